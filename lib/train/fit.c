/* fit.c - one replica's Keras fit: set-up, the start-up broadcast, the epochs (their steps and
 * validations run in step.c), callbacks, checkpoints, TensorBoard and progress. train.h tells
 * the whole story of a step. */
#include "train/train_internal.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "io/tfevents.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps the per-step Dropout streams apart from the weight initialiser's (same spec seed). */
#define STEP_RNG_SALT 0x44726f706f75ull

/* ------------------------------------------------------------------------ collectives -- */

static dt_status broadcast(const dt_train_comm *c, void *buf, size_t bytes, dt_err *err)
{
    if (c->world <= 1 || !c->broadcast || bytes == 0)
        return DT_OK;
    return c->broadcast(c->ctx, buf, bytes, 0, err);
}

/* A broadcast of n floats of the model's memory (params, state, optimizer slots), through the
 * host staging buffer when that memory is a device's. */
static dt_status broadcast_model(dt_trainer *t, const dt_train_comm *c, float *buf, size_t n,
                                 dt_err *err)
{
    if (!t->bcast || c->world <= 1 || !c->broadcast || n == 0)
        return broadcast(c, buf, n * sizeof(float), err);
    const dt_nn_ops *ops = dt_model_ops(t->m);
    ops->download(t->bcast, buf, n * sizeof(float));
    DT_TRY(broadcast(c, t->bcast, n * sizeof(float), err));
    ops->upload(buf, t->bcast, n * sizeof(float));
    return DT_OK;
}

/* ----------------------------------------------------------------------------- setup -- */

static dt_status open_pipeline(dt_trainer *t, const dt_dataset *ds, bool train, bool no_x,
                               dt_pipeline **out, dt_err *err)
{
    dt_pipeline_opts o = dt_pipeline_opts_default();
    o.no_x = no_x;
    o.global_batch = t->spec->batch_size;
    o.num_replicas = t->opts.world;
    o.replica_rank = t->opts.rank;
    o.policy = train ? t->ds.shard_policy : DT_SHARD_DATA;
    o.shuffle = train ? t->ds.shuffle : (dt_shuffle){.kind = DT_SHUFFLE_NONE};
    o.seed = t->ds.seed;
    o.prefetch = t->opts.prefetch;
    dt_status st = dt_pipeline_new(ds, &o, out, err);
    if (st != DT_OK)
        dt_err_prefix(err, "%s", train ? "$.data.train" : "$.data.validation");
    return st;
}

dt_status dt_train_new(const dt_jobspec *spec, const dt_train_opts *opts, dt_trainer **out,
                       dt_err *err)
{
    *out = NULL;
    if (opts->world < 1 || opts->rank < 0 || opts->rank >= opts->world)
        return dt_err_set(err, DT_EINVAL, "train: rank %d outside world %d", opts->rank,
                          opts->world);
    DT_TRY(dt_train_check_world(spec, opts->world, err));
    dt_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return dt_err_set(err, DT_ENOMEM, "train: out of memory");
    t->spec = spec;
    t->opts = *opts;
    if (t->opts.data_timeout_ms <= 0)
        t->opts.data_timeout_ms = 600000;
    dt_status st;
    DT_TRY_GOTO(dt__train_data_spec(spec, &t->ds, err), st, fail);
    t->seed = t->ds.seed;
    DT_TRY_GOTO(dt__train_build(spec, opts->ops, t->seed, &t->m, &t->loss, &t->cfg, err), st, fail);
    DT_TRY_GOTO(dt_optim_new(&t->cfg, t->m, &t->opt, err), st, fail);
    /* Each worker decodes only what its pipeline will read: its own files under FILE (an image
     * folder of 25,000 JPEGs is 1/W of the work per worker), everything under DATA/OFF. */
    dt_data_load_opts lo = {
        .policy = t->ds.shard_policy, .num_workers = opts->world, .worker_index = opts->rank};
    /* $.fit.validation_split holds out the end of the whole set: every worker decodes it all */
    bool split = spec->validation_split > 0;
    if ((st = dt_dataset_load_shard(&t->ds.train, split ? NULL : &lo, &t->train, err)) != DT_OK) {
        dt_err_prefix(err, "$.data.train");
        goto fail;
    }
    DT_TRY_GOTO(dt__train_check_data(t->m, &t->loss, t->train, "$.data.train", true, err), st,
                fail);
    if (split) {
        if ((st = dt_dataset_split(t->train, spec->validation_split, &t->val, err)) != DT_OK) {
            dt_err_prefix(err, "$.fit");
            goto fail;
        }
        DT_TRY_GOTO(open_pipeline(t, t->val, false, false, &t->pv, err), st, fail);
    } else if (t->ds.has_validation) {
        if ((st = dt_dataset_load(&t->ds.validation, &t->val, err)) != DT_OK) {
            dt_err_prefix(err, "$.data.validation");
            goto fail;
        }
        DT_TRY_GOTO(dt__train_check_data(t->m, &t->loss, t->val, "$.data.validation", true, err),
                    st, fail);
        DT_TRY_GOTO(open_pipeline(t, t->val, false, false, &t->pv, err), st, fail);
    }
    DT_TRY_GOTO(open_pipeline(t, t->train, true, false, &t->p, err), st, fail);
    t->steps = dt_pipeline_steps_per_epoch(t->p);
    if (spec->steps_per_epoch > 0) {
        if (spec->steps_per_epoch > t->steps)
            DT_WARN("train",
                    "$.fit.steps_per_epoch: %" PRId64 " is more than the data gives (%" PRId64
                    "); an epoch runs %" PRId64 " steps",
                    spec->steps_per_epoch, t->steps, t->steps);
        else
            t->steps = spec->steps_per_epoch;
    }
    DT_TRY_GOTO(dt__train_plan_buckets(t, err), st, fail);
    DT_TRY_GOTO(dt__train_callbacks_check(spec, t->val != NULL, &t->cfg, err), st, fail);
    for (int i = 0; i < spec->ncallbacks; i++)
        if (spec->callbacks[i].lr_schedule[0])
            DT_TRY_GOTO(dt__train_lr_schedule(&spec->callbacks[i], i, &t->lrs[i], err), st, fail);
    t->resume_lr = NAN;
    for (int i = 0; i < spec->ncallbacks; i++)
        t->on_nan |= spec->callbacks[i].kind == DT_CALLBACK_TERMINATE_ON_NAN;
    for (int i = 0; i < spec->ncallbacks; i++) {
        t->cbdir[i] = dt__train_cb_direction(spec, &spec->callbacks[i]);
        if (!spec->callbacks[i].restore_best_weights)
            continue;
        size_t np, ns;
        dt_model_params(t->m, &np);
        dt_model_state(t->m, &ns);
        if (!(t->cbbest[i] = malloc((np + ns + 1) * sizeof(float)))) {
            st = dt_err_set(err, DT_ENOMEM, "train: out of memory");
            goto fail;
        }
    }
    dt_model_set_grad_ready(t->m, dt__train_on_grad_ready, t);
    if (opts->rank == 0) {
        const char *dir = spec->checkpoint_dir;
        char buf[4096];
        if (!dir && opts->out_dir) {
            snprintf(buf, sizeof buf, "%s/checkpoints", opts->out_dir);
            dir = buf;
        }
        if (dir && !(t->ckpt_dir = strdup(dir))) {
            st = dt_err_set(err, DT_ENOMEM, "train: out of memory");
            goto fail;
        }
    }
    *out = t;
    return DT_OK;
fail:
    dt_train_free(t);
    return st;
}

void dt_train_get_info(const dt_trainer *t, dt_train_info *info)
{
    memset(info, 0, sizeof *info);
    size_t nt;
    dt_model_param_counts(t->m, &info->params_total, &info->params_trainable, &nt);
    info->train_examples = t->train->n;
    info->local_examples = dt_pipeline_local_count(t->p);
    info->val_examples = t->val ? t->val->n : 0;
    info->steps_per_epoch = t->steps;
    info->local_batch = dt_pipeline_local_batch(t->p);
}

dt_model *dt_train_model(dt_trainer *t)
{
    return t->m;
}

dt_optim *dt_train_optim(dt_trainer *t)
{
    return t->opt;
}

void dt_train_free(dt_trainer *t)
{
    if (!t)
        return;
    dt_pipeline_free(t->p);
    dt_pipeline_free(t->pv);
    dt_dataset_free(t->train);
    dt_dataset_free(t->val);
    dt_data_spec_destroy(&t->ds);
    dt__train_graphs_free(&t->graphs, t->m);
    if (t->inv_world)
        dt_model_ops(t->m)->free(t->inv_world);
    if (t->tail)
        dt_model_ops(t->m)->host_free(t->tail);
    if (t->hg)
        dt_model_ops(t->m)->host_free(t->hg);
    dt_optim_free(t->opt);
    dt_model_free(t->m);
    dt_tfevents_close(t->tb);
    dt_tfevents_close(t->tbv);
    free(t->cw);
    free(t->ckpt_dir);
    free(t->lo);
    free(t->hi);
    free(t->reqs);
    free(t->bcast);
    free(t->mstep);
    for (int i = 0; i < DT_JOBSPEC_MAX_CALLBACKS; i++) {
        free(t->cbbest[i]);
        dt__train_csv_close(&t->csv[i]);
    }
    free(t);
}

/* ------------------------------------------------------------------------ checkpoints -- */

/* Where training stands; broadcast from the chief at the start. */
typedef struct position {
    int64_t epoch;       /* epochs completed */
    int64_t step;        /* steps done in epoch `epoch` */
    int64_t global_step; /* optimizer iterations */
    int64_t resumed;
} position;

/* At most this many epoch sums go into a checkpoint's metadata (an AUC's or a MeanIoU's
 * counts can be far more; a resumed epoch then logs its later steps' figures only). */
#define MAX_META_SUMS 4096

/* The epoch's sums as hex floats (exact), or NULL when too many or out of memory. */
static char *epoch_sums_text(const dt_trainer *t)
{
    size_t n = 3 + t->nms;
    if (n > MAX_META_SUMS)
        return NULL;
    char *s = malloc(n * 32 + 1), *at = s;
    for (size_t i = 0; s && i < n; i++)
        at += sprintf(at, "%s%a", i ? " " : "", i < 3 ? t->epsum[i] : t->mepoch[i - 3]);
    return s;
}

static void parse_epoch_sums(dt_trainer *t, const char *text)
{
    size_t n = 3 + t->nms;
    const char *p = text;
    double *v = calloc(n, sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        char *end;
        v[i] = strtod(p, &end);
        if (end == p) { /* none (too many when written) or another layout: start from zero */
            free(v);
            return;
        }
        p = end;
    }
    if (!v)
        return;
    memcpy(t->epsum, v, sizeof t->epsum);
    memcpy(t->mepoch, v + 3, t->nms * sizeof *v);
    t->epsum_restored = true;
    free(v);
}

static dt_status save_checkpoint(dt_trainer *t, const position *pos, dt_err *err)
{
    if (!t->ckpt_dir)
        return DT_OK;
    dt__train_pulse(t, DT_TRAIN_IO);
    DT_TRY(dt__train_mkdirs(t->ckpt_dir, err));
    char path[4200], ep[32], st[32], gs[32], cbs[1024], lr[40];
    char *sums = epoch_sums_text(t);
    snprintf(path, sizeof path, "%s/ckpt-%" PRId64 ".safetensors", t->ckpt_dir, pos->global_step);
    snprintf(ep, sizeof ep, "%" PRId64, pos->epoch);
    snprintf(st, sizeof st, "%" PRId64, pos->step);
    snprintf(gs, sizeof gs, "%" PRId64, pos->global_step);
    /* the callbacks' state and the rate ReduceLROnPlateau may have set, so that a resumed job
     * goes on deciding as the unbroken one would */
    dt__train_cb_format(t->cb, t->spec->ncallbacks, cbs, sizeof cbs);
    snprintf(lr, sizeof lr, "%a", dt_optim_learning_rate(t->opt));
    const char *meta[] = {"format",
                          "dtrain-ckpt-1",
                          "epoch",
                          ep,
                          "step",
                          st,
                          "global_step",
                          gs,
                          "spec_hash",
                          t->spec->hash_hex,
                          "callbacks",
                          cbs,
                          "learning_rate",
                          lr,
                          "epoch_sums",
                          sums ? sums : "",
                          NULL,
                          NULL};
    /* the best weights first: a checkpoint on disk always has its best weights beside it */
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i < t->spec->ncallbacks; i++)
        if (t->cbbest[i] && t->cb[i].has_weights)
            s = dt__train_cb_save_best(t->m, t->cbbest[i], t->ckpt_dir, i, pos->global_step,
                                       t->spec->hash_hex, err);
    if (s == DT_OK)
        s = dt_train_save_weights(t->m, t->opt, meta, path, err);
    free(sums);
    if (s != DT_OK) {
        dt_err_prefix(err, "checkpoint");
        return s;
    }
    dt__train_prune_checkpoints(t->ckpt_dir, t->spec->keep);
    dt__train_cb_prune_best(t->ckpt_dir);
    DT_INFO("train", "checkpoint %s (epoch %" PRId64 ", step %" PRId64 ")", path, pos->epoch,
            pos->step);
    dt__train_pulse(t, DT_TRAIN_WORK);
    return DT_OK;
}

static int64_t meta_i64(const dt_st_file *f, const char *key)
{
    const char *v = dt_st_metadata(f, key);
    return v ? strtoll(v, NULL, 10) : 0;
}

/* Chief: the latest checkpoint (resume), else initial_weights, else the seeded weights. */
/* Keras's adapt() for the model's Normalization layers without a mean and variance: over the
 * training examples the chief holds (every one, except under FILE sharding: its files), before
 * the first step; sync_start then gives every replica the chief's weights. A resumed job takes
 * them from its checkpoint instead. */
static dt_status adapt(dt_trainer *t, dt_err *err)
{
    dt_model_adapt *a = NULL;
    DT_TRY(dt_model_adapt_begin(t->m, &a, err));
    if (!a)
        return DT_OK;
    const dt_dataset *ds = t->train;
    size_t per = ds->x_size, chunk = 256, held = 0, k = 0;
    float *buf = malloc(chunk * per * sizeof *buf);
    if (!buf) {
        dt_model_adapt_end(t->m, a);
        return dt_err_set(err, DT_ENOMEM, "out of memory adapting Normalization");
    }
    for (size_t i = 0; i < ds->n; i++) {
        size_t row = ds->x_row ? ds->x_row[i] : i;
        if (row == SIZE_MAX)
            continue;
        float *dst = buf + k * per;
        if (ds->x_f32) {
            memcpy(dst, ds->x_f32 + row * per, per * sizeof *dst);
        } else {
            for (size_t j = 0; j < per; j++)
                dst[j] = ds->x_u8[row * per + j] * ds->x_scale;
        }
        held++;
        if (++k == chunk) {
            dt_model_adapt_rows(a, buf, k);
            k = 0;
        }
    }
    if (k)
        dt_model_adapt_rows(a, buf, k);
    free(buf);
    dt_model_adapt_end(t->m, a);
    DT_INFO("train", "Normalization adapted over %zu training examples", held);
    return DT_OK;
}

static dt_status load_start(dt_trainer *t, position *pos, dt_err *err)
{
    memset(pos, 0, sizeof *pos);
    char *path = NULL;
    dt_err e2 = {0};
    if (t->opts.resume && t->ckpt_dir &&
        dt_train_latest_checkpoint(t->ckpt_dir, &path, &e2) == DT_OK) {
        dt_st_file *f;
        dt_status st = dt_st_open(path, &f, err);
        if (st == DT_OK) {
            const char *h = dt_st_metadata(f, "spec_hash");
            if (!h || strcmp(h, t->spec->hash_hex))
                st = dt_err_set(err, DT_ESTATE,
                                "checkpoint %s was written by another job spec (hash %s, this "
                                "spec %s); remove it or use another checkpoint.dir",
                                path, h ? h : "none", t->spec->hash_hex);
            pos->epoch = meta_i64(f, "epoch");
            pos->step = meta_i64(f, "step");
            pos->global_step = meta_i64(f, "global_step");
            const char *cbs = dt_st_metadata(f, "callbacks");
            const char *lr = dt_st_metadata(f, "learning_rate");
            int ncb = t->spec->ncallbacks;
            if (st == DT_OK && ncb && (!cbs || !dt__train_cb_parse(cbs, t->cb, ncb)))
                st = dt_err_set(err, DT_ESTATE,
                                "checkpoint %s holds no state for $.fit.callbacks; remove it or "
                                "use another checkpoint.dir",
                                path);
            if (lr)
                t->resume_lr = strtod(lr, NULL);
            const char *sums = dt_st_metadata(f, "epoch_sums");
            if (sums && pos->step > 0)
                parse_epoch_sums(t, sums);
            dt_st_free(f);
        }
        if (st == DT_OK)
            st = dt_train_load_weights(t->m, t->opt, path, err);
        for (int i = 0; st == DT_OK && i < t->spec->ncallbacks; i++)
            if (t->cbbest[i] && t->cb[i].has_weights)
                st = dt__train_cb_load_best(t->m, t->cbbest[i], t->ckpt_dir, i, pos->global_step,
                                            err);
        if (st == DT_OK) {
            DT_INFO("train", "resuming from %s: epoch %" PRId64 ", step %" PRId64, path, pos->epoch,
                    pos->step);
            pos->resumed = 1;
        }
        free(path);
        return st;
    }
    DT_TRY(adapt(t, err));
    if (t->spec->initial_weights) {
        dt_status st = dt_train_load_weights(t->m, NULL, t->spec->initial_weights, err);
        if (st != DT_OK) {
            dt_err_prefix(err, "$.initial_weights");
            return st;
        }
    }
    return DT_OK;
}

static dt_status sync_start(dt_trainer *t, const dt_train_comm *c, position *pos, dt_err *err)
{
    if (c->rank == 0) {
        dt__train_pulse(t, DT_TRAIN_IO);
        DT_TRY(load_start(t, pos, err));
    }
    dt__train_pulse(t, DT_TRAIN_COMM);
    DT_TRY(broadcast(c, pos, sizeof *pos, err));
    /* the callbacks decide on every replica: all start from the chief's state */
    DT_TRY(broadcast(c, t->cb, sizeof t->cb, err));
    DT_TRY(broadcast(c, &t->resume_lr, sizeof t->resume_lr, err));
    DT_TRY(broadcast(c, &t->epsum_restored, sizeof t->epsum_restored, err));
    if (t->epsum_restored) {
        DT_TRY(broadcast(c, t->epsum, sizeof t->epsum, err));
        DT_TRY(broadcast(c, t->mepoch, t->nms * sizeof *t->mepoch, err));
    }
    for (int i = 0; i < t->spec->ncallbacks; i++)
        if (t->cbbest[i]) {
            size_t np, ns;
            dt_model_params(t->m, &np);
            dt_model_state(t->m, &ns);
            DT_TRY(broadcast(c, t->cbbest[i], (np + ns) * sizeof(float), err));
        }
    size_t n;
    float *p = dt_model_params(t->m, &n);
    DT_TRY(broadcast_model(t, c, p, n, err));
    p = dt_model_state(t->m, &n);
    DT_TRY(broadcast_model(t, c, p, n, err));
    dt_model_params(t->m, &n);
    for (size_t k = 0; k < dt_optim_slot_count(t->opt); k++)
        DT_TRY(broadcast_model(t, c, dt_optim_slot(t->opt, k, NULL), n, err));
    dt_optim_set_iterations(t->opt, pos->global_step);
    dt__train_pulse(t, DT_TRAIN_WORK);
    return DT_OK;
}

/* ------------------------------------------------------------------------------- fit -- */

static void tb_write(dt_tfevents *w, const char *tag, int64_t step, double v)
{
    dt_err e = {0};
    if (w && dt_tfevents_scalar(w, tag, step, v, &e) != DT_OK)
        DT_WARN("train", "tensorboard: %s", e.msg);
}

static void tb_scalar(dt_trainer *t, const char *tag, int64_t step, double v)
{
    tb_write(t->tb, tag, step, v);
}

/* A compiled metric's scalar: the prefix ("epoch_", "batch_") and its log name. Validation
 * values go to the validation run under the training tag ("epoch_auc", not "epoch_val_auc"),
 * so TensorBoard draws the two curves in one chart, as Keras's callback writes them. */
static void tb_metric(dt_trainer *t, const char *prefix, const dt_train_metric *m, int64_t step)
{
    char tag[sizeof m->name + 8];
    const char *name = m->name;
    dt_tfevents *w = t->tb;
    if (!strncmp(name, "val_", 4)) {
        name += 4;
        w = t->tbv;
    }
    snprintf(tag, sizeof tag, "%.7s%.*s", prefix, (int)sizeof m->name - 1, name);
    tb_write(w, tag, step, m->value);
}

/* Keras's layout: <log_dir>/train and <log_dir>/validation, under the job's own run folder when
 * the caller names one (two jobs may share a log_dir; TensorBoard then lists each job). */
static dt_status tb_open(dt_trainer *t, dt_err *err)
{
    const char *run = t->opts.tb_run;
    char dir[4096];
    for (int v = 0; v < 2; v++) {
        int n = snprintf(dir, sizeof dir, "%s%s%s/%s", t->spec->tensorboard_dir, run ? "/" : "",
                         run ? run : "", v ? "validation" : "train");
        if (n < 0 || (size_t)n >= sizeof dir)
            return dt_err_set(err, DT_ETOOBIG, "$.tensorboard.log_dir: path too long");
        DT_TRY(dt_tfevents_open(dir, v ? &t->tbv : &t->tb, err));
    }
    return DT_OK;
}

static dt_status write_final(dt_trainer *t, const position *pos, dt_train_result *res, dt_err *err)
{
    if (!t->opts.out_dir)
        return DT_OK;
    dt__train_pulse(t, DT_TRAIN_IO);
    DT_TRY(dt__train_mkdirs(t->opts.out_dir, err));
    char path[4096], ep[32], gs[32];
    if (snprintf(path, sizeof path, "%s/final.safetensors", t->opts.out_dir) >= (int)sizeof path)
        return dt_err_set(err, DT_EINVAL, "%s: path too long", t->opts.out_dir);
    snprintf(ep, sizeof ep, "%" PRId64, pos->epoch);
    snprintf(gs, sizeof gs, "%" PRId64, pos->global_step);
    const char *meta[] = {"format", "dtrain-weights-1", "epoch",           ep,   "global_step",
                          gs,       "spec_hash",        t->spec->hash_hex, NULL, NULL};
    DT_TRY(dt_train_save_weights(t->m, NULL, meta, path, err));
    snprintf(res->final_path, sizeof res->final_path, "%s", path);
    return DT_OK;
}

/* The step's phases over the epoch, per step: what a step costs, and how much of the
 * all-reduce the overlap with backward left exposed. */
static void log_phases(dt_trainer *t, int epoch)
{
    double n = (double)t->phase.n;
    if (n < 1)
        return;
    double data = t->phase.data / n * 1e3, comp = t->phase.compute / n * 1e3;
    double wait = t->phase.wait / n * 1e3, upd = t->phase.update / n * 1e3;
    double ahead = t->phase.ahead / n * 1e3;
    double step = data + comp + wait + upd;
    /* Several replicas a process: the all-reduce's two stages, each its comm's busy time within
     * the steps (they run during backward and the wait, not after them). */
    char split[160] = "";
    if (t->phase.split)
        snprintf(split, sizeof split, "; in-host all-reduce %.3f ms/step, host ring %.3f ms/step",
                 t->phase.in_host / n * 1e3, t->phase.ring / n * 1e3);
    /* ahead + wait is how long the gradients were on the wire: close to the wire time alone
     * when the ring progresses while backward runs, ahead + wire time when it does not. */
    DT_INFO("train",
            "epoch %d: %.2f ms/step over %" PRId64 " steps: data %.2f, forward+backward %.2f, "
            "all-reduce wait after backward %.2f (%.0f%% of the step), update %.2f; the first "
            "bucket went out %.2f ms before backward ended (all-reduces in flight %.2f ms)%s",
            epoch + 1, step, t->phase.n, data, comp, wait, step > 0 ? 100 * wait / step : 0, upd,
            ahead, ahead + wait, split);
}

/* The params + state, as Keras's get_weights/set_weights take them, to or from buf. */
static void copy_weights(dt_trainer *t, float *buf, bool restore)
{
    if (restore)
        dt_model_upload_all(t->m, buf);
    else
        dt_model_download_all(t->m, buf);
}

/* The callbacks' on_epoch_end, in the order given, on the epoch's all-reduced logs. */
/* LearningRateScheduler's on_epoch_begin: the rate of epoch e (0-based, as Keras passes it)
 * from the list or the schedule object. It depends on e alone, so a resumed job sets the
 * same rate. */
static dt_status schedule_epoch(dt_trainer *t, int e, dt_err *err)
{
    for (int i = 0; i < t->spec->ncallbacks; i++) {
        const dt_jobspec_callback *cb = &t->spec->callbacks[i];
        if (cb->kind != DT_CALLBACK_LR_SCHEDULER)
            continue;
        double lr = cb->n_lr_list ? cb->lr_list[e < cb->n_lr_list ? e : cb->n_lr_list - 1]
                                  : dt_optim_schedule_at(&t->lrs[i], e);
        DT_TRY(dt_optim_set_learning_rate(t->opt, lr, err));
        if (cb->verbose)
            DT_INFO("train", "Epoch %d: LearningRateScheduler setting learning rate to %g.", e + 1,
                    lr);
    }
    return DT_OK;
}

static dt_status epoch_callbacks(dt_trainer *t, const dt_train_epoch_info *ei, bool *stop,
                                 dt_train_result *res, dt_err *err)
{
    int e = ei->epoch;
    dt__train_log logs[DT__TRAIN_MAX_LOGS];
    int nlogs = dt__train_epoch_logs(t->spec, ei, NAN, logs);
    for (int i = 0; i < t->spec->ncallbacks; i++) {
        const dt_jobspec_callback *cb = &t->spec->callbacks[i];
        dt__train_cb_state *s = &t->cb[i];
        double v = 0;
        bool has = dt__train_cb_lookup(t->spec, cb->monitor, ei, &v);
        if (cb->kind == DT_CALLBACK_CSV_LOGGER) {
            DT_TRY(dt__train_csv_row(&t->csv[i], e, logs, nlogs, err));
        } else if (cb->kind == DT_CALLBACK_MODEL_CHECKPOINT) {
            bool better = has && (t->cbdir[i] > 0 ? v > s->best : v < s->best);
            /* without the value this epoch Keras saves anyway (with a warning) */
            if (cb->save_best_only && has && !better)
                continue;
            if (cb->save_best_only && has) {
                DT_INFO("train", "Epoch %d: %s improved from %.5f to %.5f", e + 1, cb->monitor,
                        s->best, v);
                s->best = v;
            }
            if (!t->ckpt_dir) /* the chief writes */
                continue;
            char name[512], path[4700], ep[32];
            DT_TRY(dt__train_cb_filename(cb->file, e + 1, logs, nlogs, name, sizeof name, err));
            snprintf(path, sizeof path, "%s/%s", t->ckpt_dir, name);
            snprintf(ep, sizeof ep, "%d", e + 1);
            const char *meta[] = {"format",    "dtrain-weights-1", "epoch", ep,
                                  "spec_hash", t->spec->hash_hex,  NULL,    NULL};
            dt__train_pulse(t, DT_TRAIN_IO);
            DT_TRY(dt__train_mkdirs(t->ckpt_dir, err));
            dt_status st = dt_train_save_weights(t->m, NULL, meta, path, err);
            dt__train_pulse(t, DT_TRAIN_WORK);
            if (st != DT_OK) {
                dt_err_prefix(err, "$.fit.callbacks[%d] (ModelCheckpoint)", i);
                return st;
            }
            DT_INFO("train", "Epoch %d: ModelCheckpoint saved the weights to %s", e + 1, path);
        }
        if (cb->kind == DT_CALLBACK_EARLY_STOPPING) {
            bool take = false;
            if (dt__train_es_epoch_end(cb, t->cbdir[i], s, e, has, v, &take)) {
                *stop = true;
                if (!res->stopped_epoch) {
                    res->stopped_epoch = e + 1;
                    snprintf(res->stop_reason, sizeof res->stop_reason,
                             "EarlyStopping: epoch %d: early stopping (%s: best %.6g at epoch %d, "
                             "no improvement for %d epochs)",
                             e + 1, cb->monitor, s->best, s->best_epoch + 1, s->wait);
                    DT_INFO("train", "%s", res->stop_reason);
                }
            }
            if (take && t->cbbest[i])
                copy_weights(t, t->cbbest[i], false);
        } else if (cb->kind == DT_CALLBACK_LR_SCHEDULER) {
            /* Keras puts the epoch's rate in the logs the later callbacks see */
            if (nlogs < DT__TRAIN_MAX_LOGS && strcmp(logs[nlogs - 1].name, "learning_rate"))
                nlogs++;
            logs[nlogs - 1] = (dt__train_log){
                .name = "learning_rate", .value = dt_optim_learning_rate(t->opt), .has = true};
        } else if (cb->kind == DT_CALLBACK_REDUCE_LR_ON_PLATEAU) {
            double lr = dt_optim_learning_rate(t->opt), nlr = lr;
            /* Keras puts the epoch's rate in the logs the later callbacks see */
            if (nlogs < DT__TRAIN_MAX_LOGS && strcmp(logs[nlogs - 1].name, "learning_rate"))
                nlogs++;
            logs[nlogs - 1] = (dt__train_log){.name = "learning_rate", .value = lr, .has = true};
            if (dt__train_rlrop_epoch_end(cb, t->cbdir[i], s, has, v, lr, &nlr)) {
                DT_TRY(dt_optim_set_learning_rate(t->opt, nlr, err));
                DT_INFO("train", "Epoch %d: ReduceLROnPlateau reducing learning rate to %g.", e + 1,
                        dt_optim_learning_rate(t->opt));
            }
        }
    }
    return DT_OK;
}

static dt_status fit(dt_trainer *t, const dt_train_comm *c, dt_train_result *res, dt_err *err)
{
    bool chief = c->rank == 0;
    const dt_train_progress *pg = &t->opts.progress;
    position pos;
    DT_TRY(sync_start(t, c, &pos, err));
    DT_TRY(dt__train_step_setup(t, c, err));
    /* Replicas that reduce through host memory run host code between the step's kernels (the
     * host ring's downloads and calls): they stay eager. NCCL's collectives queue on the
     * stream, where a capture takes them with the kernels. */
    dt__train_graphs_free(&t->graphs, t->m);
    dt__train_graphs_init(&t->graphs, t->m,
                          t->opts.no_graphs ? "the fit's no_graphs option"
                          : dt__train_distributed(c) && !t->dev_comm
                              ? "several replicas all-reduce through host memory between kernels"
                              : NULL);
    res->resumed = pos.resumed != 0;
    res->resumed_step = pos.global_step;
    if (pos.resumed && pg->resumed)
        pg->resumed(pg->ctx, (int)pos.epoch, pos.step, pos.global_step);
    if (chief && t->spec->tensorboard_dir && !t->tb)
        DT_TRY(tb_open(t, err));
    bool ckpt_on = chief && t->ckpt_dir;
    int epochs = t->spec->epochs;
    /* on_train_begin, unless the state came with the checkpoint */
    bool on_nan = false, sets_lr = false;
    for (int i = 0; i < t->spec->ncallbacks; i++) {
        const dt_jobspec_callback *cb = &t->spec->callbacks[i];
        if (!pos.resumed)
            dt__train_cb_reset(cb, t->cbdir[i], &t->cb[i]);
        on_nan |= cb->kind == DT_CALLBACK_TERMINATE_ON_NAN;
        sets_lr |= cb->kind == DT_CALLBACK_REDUCE_LR_ON_PLATEAU;
    }
    if (pos.resumed && sets_lr && !isnan(t->resume_lr))
        DT_TRY(dt_optim_set_learning_rate(t->opt, t->resume_lr, err));
    for (int i = 0; chief && t->opts.out_dir && i < t->spec->ncallbacks; i++) {
        const dt_jobspec_callback *cb = &t->spec->callbacks[i];
        if (cb->kind != DT_CALLBACK_CSV_LOGGER)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", t->opts.out_dir, cb->file);
        DT_TRY(dt__train_mkdirs(t->opts.out_dir, err));
        dt_status st = dt__train_csv_open(&t->csv[i], path, cb->append, cb->separator,
                                          pos.resumed ? pos.epoch : -1, err);
        if (st != DT_OK) {
            dt_err_prefix(err, "$.fit.callbacks[%d]", i);
            return st;
        }
    }
    bool stop_training = false, nan_stop = false;
    if (pos.step >= t->steps) { /* a step checkpoint at an epoch's end */
        pos.epoch++;
        pos.step = 0;
        t->epsum_restored = false;
    }
    for (; pos.epoch < epochs; pos.epoch++, pos.step = 0) {
        int e = (int)pos.epoch;
        DT_TRY(schedule_epoch(t, e, err));
        DT_TRY(dt_pipeline_epoch_begin(t->p, e, err));
        for (int64_t s = 0; s < pos.step; s++) { /* resuming mid-epoch: replay the order */
            const dt_batch *b;
            DT_TRY(dt_pipeline_next(t->p, &b, dt_deadline_in(t->opts.data_timeout_ms), err));
        }
        if (pg->epoch_begin)
            pg->epoch_begin(pg->ctx, e, epochs, t->steps);
        dt__train_sums ep = {0};
        if (t->epsum_restored) /* resumed mid-epoch: the steps before the resume count too */
            ep = (dt__train_sums){t->epsum[0], t->epsum[1], t->epsum[2]};
        else
            memset(t->mepoch, 0, t->nms * sizeof *t->mepoch);
        t->epsum_restored = false;
        double t0 = dt_wall_s();
        int64_t first_step = pos.step;
        if (t->feed) {
            dt__train_feed_reset(t->feed);
            if (pos.step < t->steps) { /* the epoch's first batch; each step puts the next */
                const dt_batch *b0;
                DT_TRY(dt_pipeline_next(t->p, &b0, dt_deadline_in(t->opts.data_timeout_ms), err));
                DT_TRY(dt__train_put(t, b0, err));
            }
        }
        for (; pos.step < t->steps; pos.step++) {
            double ts = dt_wall_s();
            const dt_batch *b;
            dt_model_batch fed;
            if (t->feed) {
                b = dt__train_feed_take(t->feed, &fed);
                t->feed_ahead = pos.step + 1 < t->steps;
            } else {
                DT_TRY(dt_pipeline_next(t->p, &b, dt_deadline_in(t->opts.data_timeout_ms), err));
            }
            if (pos.step == first_step) /* the epoch's first step is not counted */
                memset(&t->phase, 0, sizeof t->phase);
            else
                t->phase.n++;
            t->phase.data += dt_wall_s() - ts;
            if (!b)
                return dt_err_set(err, DT_ESTATE,
                                  "train: the data ended at step %" PRId64 " of %" PRId64, pos.step,
                                  t->steps);
            dt__train_sums st = {0};
            bool stop = false;
            /* Dropout's draws in step g come from (seed, g, rank) alone: a run resumed from a
             * checkpoint draws what an unbroken run draws, on every replica; rank 0 draws what a
             * one-replica run draws for the same examples; replicas never drop alike. */
            dt_rng_seed2(dt_model_rng(t->m),
                         t->seed ^ STEP_RNG_SALT ^ (uint64_t)pos.global_step * 0x9e3779b97f4a7c15u,
                         (uint64_t)c->rank);
            DT_TRY(dt__train_run_step(t, c, b, t->feed ? &fed : NULL, &st, &stop, err));
            pos.global_step++;
            if (t->opts.pulse)
                atomic_store(&t->opts.pulse->step, pos.global_step);
            ep.loss += st.loss;
            ep.correct += st.correct;
            ep.n += st.n;
            for (size_t i = 0; i < t->nms; i++)
                t->mepoch[i] += t->mstep[i];
            t->epsum[0] = ep.loss;
            t->epsum[1] = ep.correct;
            t->epsum[2] = ep.n;
            dt__train_metrics_values(t->spec, t->mepoch, false, t->mrun);
            double now = dt_wall_s();
            dt_train_step_info si = {
                .epoch = e,
                .epochs = epochs,
                .step = pos.step + 1,
                .steps = t->steps,
                .global_step = pos.global_step,
                .loss = ep.n > 0 ? ep.loss / ep.n : 0,
                .accuracy = ep.n > 0 ? ep.correct / ep.n : 0,
                .batch_loss = st.n > 0 ? st.loss / st.n : 0,
                .samples_per_s = now > ts ? st.n / (now - ts) : 0,
                .step_ms = (now - ts) * 1000,
                .elapsed_s = now - t0,
                /* the rate this step applied (its schedule at the step's iteration) */
                .learning_rate = dt_optim_learning_rate_at(t->opt, pos.global_step - 1),
                .has_accuracy = t->spec->metric_accuracy,
                .nmetrics = t->spec->nmetrics,
                .metrics = t->mrun,
            };
            if (pg->step_end)
                pg->step_end(pg->ctx, &si);
            if (chief && t->tb) {
                dt__train_pulse(t, DT_TRAIN_IO);
                tb_scalar(t, "batch_loss", pos.global_step, si.batch_loss);
                if (si.has_accuracy)
                    tb_scalar(t, "batch_accuracy", pos.global_step, st.n ? st.correct / st.n : 0);
                if (t->spec->nmetrics) { /* this step's values, as Keras's batch_ scalars */
                    dt_train_metric bm[DT_JOBSPEC_MAX_METRICS];
                    dt__train_metrics_values(t->spec, t->mstep, false, bm);
                    for (int i = 0; i < t->spec->nmetrics; i++)
                        tb_metric(t, "batch_", &bm[i], pos.global_step);
                }
                tb_scalar(t, "learning_rate", pos.global_step, si.learning_rate);
                tb_scalar(t, "samples_per_s", pos.global_step, si.samples_per_s);
                dt__train_pulse(t, DT_TRAIN_WORK);
            }
            /* TerminateOnNaN: the batch logs' loss (the epoch's running mean, all-reduced) */
            if (on_nan && !isfinite(si.loss)) {
                stop_training = nan_stop = true;
                res->stopped_epoch = e + 1;
                snprintf(res->stop_reason, sizeof res->stop_reason,
                         "TerminateOnNaN: epoch %d, batch %" PRId64 ": invalid loss (%g), "
                         "terminating training",
                         e + 1, pos.step, si.loss);
                DT_WARN("train", "%s", res->stop_reason);
            }
            if (stop) {
                position done = pos;
                done.step++;
                if (ckpt_on)
                    DT_TRY(save_checkpoint(t, &done, err));
                res->global_step = pos.global_step;
                return dt_err_set(err, DT_ECANCELED,
                                  "train: cancelled after epoch %d step %" PRId64, e + 1,
                                  done.step);
            }
            if (ckpt_on && !t->spec->save_freq_epoch && t->spec->save_freq_steps > 0 &&
                pos.global_step % t->spec->save_freq_steps == 0) {
                position done = pos;
                if (++done.step >= t->steps) {
                    done.epoch++;
                    done.step = 0;
                }
                DT_TRY(save_checkpoint(t, &done, err));
            }
            if (nan_stop) { /* Keras ends the epoch there: validation and on_epoch_end still run */
                pos.step++;
                break;
            }
        }
        double secs = dt_wall_s() - t0;
        log_phases(t, e);
        dt_train_epoch_info ei = {
            .epoch = e,
            .epochs = epochs,
            .steps = t->steps,
            .loss = ep.n > 0 ? ep.loss / ep.n : 0,
            .accuracy = ep.n > 0 ? ep.correct / ep.n : 0,
            .has_accuracy = t->spec->metric_accuracy,
            .seconds = secs,
            .samples_per_s = secs > 0 ? ep.n / secs : 0,
            .nmetrics = t->spec->nmetrics,
            .metrics = t->mrun,
            .val_metrics = t->mvalout,
        };
        dt__train_metrics_values(t->spec, t->mepoch, false, t->mrun);
        if (t->pv && (e + 1) % t->spec->validation_freq == 0) {
            dt__train_sums v;
            DT_TRY(dt__train_validate_epoch(t, c, e, &v, err));
            ei.has_val = v.n > 0;
            ei.val_loss = v.n > 0 ? v.loss / v.n : 0;
            ei.val_accuracy = v.n > 0 ? v.correct / v.n : 0;
            res->has_val = ei.has_val;
            res->val_loss = ei.val_loss;
            res->val_accuracy = ei.val_accuracy;
            dt__train_metrics_values(t->spec, t->mval, true, t->mvalout);
            memcpy(res->val_metrics, t->mvalout, sizeof t->mvalout);
        }
        res->nmetrics = t->spec->nmetrics;
        memcpy(res->metrics, t->mrun, sizeof t->mrun);
        res->loss = ei.loss;
        res->accuracy = ei.accuracy;
        res->epochs_done = e + 1;
        res->global_step = pos.global_step;
        if (pg->epoch_end)
            pg->epoch_end(pg->ctx, &ei);
        if (chief && t->tb) {
            dt__train_pulse(t, DT_TRAIN_IO);
            tb_scalar(t, "epoch_loss", e, ei.loss);
            if (ei.has_accuracy)
                tb_scalar(t, "epoch_accuracy", e, ei.accuracy);
            if (ei.has_val) {
                tb_write(t->tbv, "epoch_loss", e, ei.val_loss);
                if (ei.has_accuracy)
                    tb_write(t->tbv, "epoch_accuracy", e, ei.val_accuracy);
                for (int i = 0; i < ei.nmetrics; i++)
                    tb_metric(t, "epoch_", &ei.val_metrics[i], e);
            }
            for (int i = 0; i < ei.nmetrics; i++)
                tb_metric(t, "epoch_", &ei.metrics[i], e);
            tb_scalar(t, "epoch_samples_per_s", e, ei.samples_per_s);
            dt_err fe = {0};
            if ((t->tb && dt_tfevents_flush(t->tb, &fe) != DT_OK) ||
                (t->tbv && dt_tfevents_flush(t->tbv, &fe) != DT_OK))
                DT_WARN("train", "tensorboard: %s", fe.msg);
            dt__train_pulse(t, DT_TRAIN_WORK);
        }
        DT_TRY(epoch_callbacks(t, &ei, &stop_training, res, err));
        /* a cut epoch is no place to resume from: it was not run to its end */
        if (ckpt_on && t->spec->save_freq_epoch && !nan_stop) {
            position done = pos;
            done.epoch++;
            done.step = 0;
            DT_TRY(save_checkpoint(t, &done, err));
        }
        if (stop_training) {
            pos.epoch++;
            break;
        }
    }
    res->global_step = pos.global_step;
    res->learning_rate = dt_optim_learning_rate(t->opt);
    res->steps_eager = t->graphs.eager;
    res->graphs_captured = t->graphs.captured;
    res->steps_graphed = t->graphs.replayed;
    snprintf(res->graphs_off, sizeof res->graphs_off, "%s", t->graphs.on ? "" : t->graphs.why);
    /* A GPU fit says how its steps ran: a user who expects graphs sees whether and why not */
    if (chief && dt_model_ops(t->m)->graph_begin) {
        if (t->graphs.on)
            DT_INFO("train",
                    "%" PRId64 " steps: %" PRId64 " replayed from %" PRId64
                    " CUDA graph%s, %" PRId64
                    " eager (each batch size's first step and short batches)",
                    t->graphs.eager + t->graphs.replayed, t->graphs.replayed, t->graphs.captured,
                    t->graphs.captured == 1 ? "" : "s", t->graphs.eager);
        else
            DT_INFO("train", "%" PRId64 " steps, all eager: CUDA graphs off (%s)", t->graphs.eager,
                    t->graphs.why);
    }
    /* Keras's fit() ends with finalize_variable_values: use_ema's average becomes the weights
     * (on every replica, after the last checkpoint, which keeps the raw weights to resume). */
    dt_optim_finalize(t->opt);
    /* EarlyStopping.on_train_end (after finalize, as in Keras): the best epoch's weights, on
     * every replica, whether or not it stopped early */
    for (int i = 0; i < t->spec->ncallbacks; i++)
        if (t->cbbest[i] && t->cb[i].has_weights) {
            copy_weights(t, t->cbbest[i], true);
            DT_INFO("train", "Restoring model weights from the end of the best epoch: %d.",
                    t->cb[i].best_epoch + 1);
        }
    if (chief)
        DT_TRY(write_final(t, &pos, res, err));
    return DT_OK;
}

/* The training (or validation) pipeline as its feed wants it: without x when the feed keeps
 * the split on the device and gathers the rows there by index (decoding them on the host too
 * would be wasted), with x otherwise. Reopened only when that changes (the pipelines are made
 * by dt_train_new, before the feed knows where the set goes); the batches are the same. */
static dt_status pipeline_for_feed(dt_trainer *t, bool train, dt_err *err)
{
    dt__train_feed *f = train ? t->feed : t->vfeed;
    dt_pipeline **p = train ? &t->p : &t->pv;
    bool *off = train ? &t->p_no_x : &t->pv_no_x;
    bool want = f && dt__train_feed_on_device(f);
    if (want == *off)
        return DT_OK;
    dt_pipeline *np;
    DT_TRY(open_pipeline(t, train ? t->train : t->val, train, want, &np, err));
    dt_pipeline_free(*p);
    *p = np;
    *off = want;
    return DT_OK;
}

dt_status dt_train_fit(dt_trainer *t, const dt_train_comm *comm, dt_train_result *res, dt_err *err)
{
    dt_train_result local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    if (comm->world != t->opts.world || comm->rank != t->opts.rank)
        return dt_err_set(err, DT_EINVAL,
                          "train: the comm is rank %d of %d but the trainer was prepared for "
                          "rank %d of %d",
                          comm->rank, comm->world, t->opts.rank, t->opts.world);
    if (comm->world > 1 && (!comm->allreduce_start || !comm->wait || !comm->broadcast))
        return dt_err_set(err, DT_EINVAL, "train: the comm lacks a collective for world %d",
                          comm->world);
    if (comm->world > 1 && t->spec->compression != DT_JOBSPEC_COMPRESS_NONE &&
        !comm->allreduce_start_compressed)
        return dt_err_set(err, DT_ENOTSUP,
                          "$.strategy.compression: \"%s\": this comm carries float32 only; "
                          "use \"none\"",
                          dt_jobspec_compression_name(t->spec->compression));
    /* A device's memory reaches a host-memory comm through mirrors; a comm that reads the
     * device's memory itself (NCCL), or none (one replica), needs none. */
    if (dt_model_ops(t->m)->device_memory && !comm->device_buffers && comm->world > 1) {
        size_t np, nst;
        dt_model_params(t->m, &np);
        dt_model_state(t->m, &nst);
        size_t big = np > nst ? np : nst;
        /* pinned: a bucket's download then waits for the stream once, not twice; a comm that
         * moves the buckets itself (bucket_start) needs no mirror of them */
        if (!comm->bucket_start && !t->hg)
            t->hg = dt_model_ops(t->m)->host_alloc((np ? np : 1) * sizeof *t->hg);
        if (!t->bcast)
            t->bcast = malloc((big ? big : 1) * sizeof *t->bcast);
        if ((!t->hg && !comm->bucket_start) || !t->bcast)
            return dt_err_set(err, DT_ENOMEM, "train: out of memory");
    }
    if (t->opts.pulse) {
        dt_model_set_beat(t->m, &t->opts.pulse->beat_ms);
        dt__train_pulse(t, DT_TRAIN_WORK);
    }
    const dt_nn_ops *ops = dt_model_ops(t->m);
    dt_status st = dt__train_feed_open(ops, t->train, dt_pipeline_local_batch(t->p), "training",
                                       &t->feed, err);
    if (st == DT_OK)
        st = pipeline_for_feed(t, true, err);
    if (st == DT_OK && t->pv)
        st = dt__train_feed_open(ops, t->val, dt_pipeline_local_batch(t->pv), "validation",
                                 &t->vfeed, err);
    if (st == DT_OK && t->pv)
        st = pipeline_for_feed(t, false, err);
    if (st == DT_OK)
        st = fit(t, comm, res, err);
    dt__train_feed_free(t->feed);
    dt__train_feed_free(t->vfeed);
    t->feed = t->vfeed = NULL;
    for (int i = 0; i < DT_JOBSPEC_MAX_CALLBACKS; i++)
        dt__train_csv_close(&t->csv[i]);
    dt__train_pulse(t, DT_TRAIN_IDLE);
    dt_model_set_beat(t->m, NULL);
    t->comm = NULL;
    res->weights_hash = dt_train_weights_hash(t->m);
    if (t->tb || t->tbv) {
        dt_tfevents_close(t->tb);
        dt_tfevents_close(t->tbv);
        t->tb = t->tbv = NULL;
    }
    return st;
}
