/*
 * daemon_jobs_train.c - the job service's only caller of lib/train (and of the ring): validate
 * at submit, the trainer thread's body (prepare, report, fit, report), the comm adapter, and
 * export / evaluate / predict for the chief. Everything here blocks: trainer thread or thread
 * pool, never the loop.
 */
#include "service/service_internal.h"

#include "comm/comm.h"
#include "config/jobspec.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/limits.h"
#include "core/log.h"
#include "export/export.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP_EVENT_MS 100 /* at most ten step events a second go to watchers */

static dt_status parse_spec(const char *text, size_t len, const char *data_root,
                            const char *state_dir, dt_jobspec *spec, dt_err *err)
{
    dt_jobspec_roots roots = {.data_root = data_root, .state_dir = state_dir};
    return dt_jobspec_parse(text, len, &roots, spec, err);
}

dt_status dt__service_validate(const char *spec_json, size_t len, const char *data_root,
                               const char *state_dir, const char *job_dir, jt_summary *out,
                               dt_err *err)
{
    (void)job_dir;
    dt_jobspec spec;
    DT_TRY(parse_spec(spec_json, len, data_root, state_dir, &spec, err));
    dt_train_info info = {0};
    dt_status st = dt_train_validate(&spec, &info, err);
    if (st == DT_OK) {
        snprintf(out->name, sizeof out->name, "%s", spec.name);
        out->epochs = (uint32_t)spec.epochs;
        out->params = info.params_total;
    }
    dt_jobspec_destroy(&spec);
    return st;
}

/* --- progress (rank 0) ------------------------------------------------------------------------ */

typedef struct progress_ctx {
    jrun *r;
    int64_t last_ms;
} progress_ctx;

static void metric(jevent *ev, const char *name, double v)
{
    if (ev->nmetrics == JOB_MAX_METRICS)
        return;
    snprintf(ev->metrics[ev->nmetrics].name, sizeof ev->metrics[0].name, "%s", name);
    ev->metrics[ev->nmetrics++].value = v;
}

static void on_epoch_begin(void *ctx, int epoch, int epochs, int64_t steps)
{
    progress_ctx *p = ctx;
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "epoch_begin");
    ev.epoch = (uint32_t)epoch + 1;
    ev.epochs = (uint32_t)epochs;
    ev.steps = steps > 0 ? (uint64_t)steps : 0;
    dt__service_run_progress(p->r, &ev);
}

static void on_step_end(void *ctx, const dt_train_step_info *s)
{
    progress_ctx *p = ctx;
    int64_t now = dt_now_ms();
    /* Every step counts in the job's step total; the chief gets every one but watchers' bars
     * only need a few a second, so fast steps are batched: the chief counts global_step. */
    if (s->step != s->steps && now - p->last_ms < STEP_EVENT_MS)
        return;
    p->last_ms = now;
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "step");
    ev.epoch = (uint32_t)s->epoch + 1;
    ev.epochs = (uint32_t)s->epochs;
    ev.step = (uint64_t)s->step;
    ev.steps = s->steps > 0 ? (uint64_t)s->steps : 0;
    ev.elapsed_s = s->elapsed_s;
    metric(&ev, "loss", s->loss);
    if (s->has_accuracy)
        metric(&ev, "accuracy", s->accuracy);
    metric(&ev, "samples_per_s", s->samples_per_s);
    metric(&ev, "learning_rate", s->learning_rate);
    metric(&ev, "global_step", (double)s->global_step);
    dt__service_run_progress(p->r, &ev);
}

static void on_epoch_end(void *ctx, const dt_train_epoch_info *e)
{
    progress_ctx *p = ctx;
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "epoch_end");
    ev.epoch = (uint32_t)e->epoch + 1;
    ev.epochs = (uint32_t)e->epochs;
    ev.step = (uint64_t)e->steps;
    ev.steps = (uint64_t)e->steps;
    ev.elapsed_s = e->seconds;
    metric(&ev, "loss", e->loss);
    if (e->has_accuracy)
        metric(&ev, "accuracy", e->accuracy);
    if (e->has_val) {
        metric(&ev, "val_loss", e->val_loss);
        if (e->has_accuracy)
            metric(&ev, "val_accuracy", e->val_accuracy);
    }
    metric(&ev, "samples_per_s", e->samples_per_s);
    dt__service_run_progress(p->r, &ev);
}

/* --- the comm -----------------------------------------------------------------------------------
 */

#define ALLREDUCE_TIMEOUT_MS 120000 /* a dead peer fails sooner: its streams break */
#define BROADCAST_TIMEOUT_MS 300000 /* the chief may load a checkpoint first */
#define CONNECT_TIMEOUT_MS   30000

void dt__service_comm_abort(void *comm, const char *why)
{
    dt_comm_abort(comm, why);
}

/* The trainer thread's view of the ring: the comm and the all-reduces started but not yet
 * waited for (fit stops waiting at its first error; those are released at close). */
typedef struct ring_ctx {
    dt_comm *c;
    dt_comm_req **pending;
    size_t npending, cap;
} ring_ctx;

static dt_status ring_start(void *ctx, float *buf, size_t n, dt_comm_wire wire, void **req,
                            dt_err *err)
{
    ring_ctx *rc = ctx;
    if (rc->npending == rc->cap) {
        size_t cap = rc->cap ? rc->cap * 2 : 64;
        dt_comm_req **p = realloc(rc->pending, cap * sizeof *p);
        if (!p)
            return dt_err_set(err, DT_ENOMEM, "out of memory");
        rc->pending = p;
        rc->cap = cap;
    }
    DT_TRY(dt_comm_allreduce_start(rc->c, buf, n, DT_COMM_SUM, wire, ALLREDUCE_TIMEOUT_MS,
                                   (dt_comm_req **)req, err));
    rc->pending[rc->npending++] = *req;
    return DT_OK;
}

static dt_status ring_allreduce_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    return ring_start(ctx, buf, n, DT_COMM_F32, req, err);
}

/* $.strategy.compression: the gradient buckets on a 16-bit wire. */
static dt_status ring_allreduce_start_compressed(void *ctx, float *buf, size_t n,
                                                 dt_jobspec_compression wire, void **req,
                                                 dt_err *err)
{
    return ring_start(ctx, buf, n, wire == DT_JOBSPEC_COMPRESS_FLOAT16 ? DT_COMM_F16 : DT_COMM_BF16,
                      req, err);
}

static dt_status ring_wait(void *ctx, void *req, dt_err *err)
{
    ring_ctx *rc = ctx;
    for (size_t i = 0; i < rc->npending; i++)
        if (rc->pending[i] == req) {
            rc->pending[i] = rc->pending[--rc->npending];
            break;
        }
    return dt_comm_wait(req, ALLREDUCE_TIMEOUT_MS, err);
}

static dt_status ring_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    return dt_comm_broadcast(((ring_ctx *)ctx)->c, buf, bytes, root, BROADCAST_TIMEOUT_MS, err);
}

/* The collectives for this run: none for one task; a ring of every task otherwise (session =
 * the job id and the generation, so a later run of the cluster never mixes with this one). */
static dt_status comm_open(jrun *r, dt_train_comm *out, dt_err *err)
{
    if (r->world == 1) {
        *out = dt_train_comm_local();
        return DT_OK;
    }
    dt_service *j = r->jobs;
    if (!dt__service_comm_hub(j))
        return dt_err_set(err, DT_ENOTSUP,
                          "this dtraind has no ring transport wired in, so it trains on one task "
                          "only; run a one-task cluster");
    const dt_cluster_spec *spec = dt__service_spec(j);
    const char **addrs = calloc((size_t)r->world, sizeof *addrs);
    const char **names = calloc((size_t)r->world, sizeof *names);
    char(*nbuf)[48] = calloc((size_t)r->world, sizeof *nbuf);
    dt_status st = DT_OK;
    if (!addrs || !names || !nbuf) {
        st = dt_err_set(err, DT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < r->world; i++) {
        const dt_task *t = dt_tfconfig_by_rank(spec, i);
        addrs[i] = t->address;
        dt_task_name(t, nbuf[i], sizeof nbuf[i]);
        names[i] = nbuf[i];
    }
    dt_comm_opts o = {
        .rank = r->rank,
        .world = r->world,
        .addresses = addrs,
        .names = names,
        .token = dt__service_token(j),
        .session = r->session,
        .hub = dt__service_comm_hub(j),
        .connect_timeout_ms = CONNECT_TIMEOUT_MS,
    };
    ring_ctx *rc = calloc(1, sizeof *rc);
    if (!rc) {
        st = dt_err_set(err, DT_ENOMEM, "out of memory");
        goto out;
    }
    dt_comm *c = NULL;
    st = dt_comm_new(&o, &c, err);
    if (st != DT_OK) {
        free(rc);
        goto out;
    }
    rc->c = c;
    /* A cancel that came before now is seen by fit at its first step, on every rank at once. */
    pthread_mutex_lock(&r->mu);
    r->comm = c;
    pthread_mutex_unlock(&r->mu);
    *out = (dt_train_comm){.ctx = rc,
                           .rank = r->rank,
                           .world = r->world,
                           .allreduce_start = ring_allreduce_start,
                           .wait = ring_wait,
                           .broadcast = ring_broadcast,
                           .allreduce_start_compressed = ring_allreduce_start_compressed};
out:
    free(addrs);
    free(names);
    free(nbuf);
    return st;
}

static void comm_close(jrun *r, dt_train_comm *c)
{
    if (r->world == 1)
        return;
    ring_ctx *rc = c->ctx;
    pthread_mutex_lock(&r->mu);
    r->comm = NULL;
    pthread_mutex_unlock(&r->mu);
    if (rc->npending) { /* fit ended at an error with all-reduces in flight: release them */
        dt_comm_abort(rc->c, "the trainer stopped");
        dt_err e = {0};
        for (size_t i = 0; i < rc->npending; i++)
            dt_comm_wait(rc->pending[i], 1000, &e);
    }
    dt_comm_free(rc->c);
    free(rc->pending);
    free(rc);
}

/* --- the trainer thread -------------------------------------------------------------------------
 */

void dt__service_train_main(jrun *r)
{
    dt_service *j = r->jobs;
    dt_err err = {0};
    dt_jobspec spec;
    dt_trainer *t = NULL;
    dt_train_info info = {0};
    progress_ctx pc = {.r = r};
    dt_status st = parse_spec(r->spec_json, r->spec_len, dt__service_data_root(j),
                              dt__service_state_dir(j), &spec, &err);
    bool have_spec = st == DT_OK;
    if (st == DT_OK) {
        dt_train_opts o = dt_train_opts_default();
        o.rank = r->rank;
        o.world = r->world;
        o.out_dir = r->rank == 0 ? r->job_dir : NULL;
        o.cancel = &r->cancel;
        o.resume = r->resume && r->rank == 0;
        if (r->rank == 0)
            o.progress = (dt_train_progress){&pc, on_epoch_begin, on_step_end, on_epoch_end};
        st = dt_train_new(&spec, &o, &t, &err);
    }
    if (st == DT_OK)
        dt_train_get_info(t, &info);
    dt_err perr = {0};
    dt_status pst =
        dt__service_run_prepared(r, st == DT_OK, err.msg, info.local_examples, info.params_total,
                                 (uint64_t)info.steps_per_epoch, &perr);
    char hash[32] = "";
    dt_train_result res;
    memset(&res, 0, sizeof res);
    if (st == DT_OK && pst != DT_OK) {
        st = pst;
        err = perr;
    }
    if (st == DT_OK) {
        dt_train_comm comm;
        st = comm_open(r, &comm, &err);
        if (st == DT_OK) {
            st = dt_train_fit(t, &comm, &res, &err);
            comm_close(r, &comm);
        }
        if (st == DT_OK)
            snprintf(hash, sizeof hash, "%016llx", (unsigned long long)res.weights_hash);
        if (st == DT_ECANCELED && atomic_load(&r->cancel))
            dt_err_set(&err, DT_ECANCELED, "cancelled: %s", r->cancel_reason);
    }
    dt_train_free(t);
    if (have_spec)
        dt_jobspec_destroy(&spec);
    dt__service_run_finished(r, st, st == DT_OK ? "" : err.msg, hash,
                             st == DT_OK ? res.final_path : "");
}

/* --- export, evaluate, predict (the chief's thread pool) -------------------------------------- */

static dt_status read_and_remove(const char *path, char **out, size_t *out_len, dt_err *err)
{
    dt_status st = dt_file_read_all(path, DT_MAX_RPC_MSG - 4096, out, out_len, err);
    unlink(path);
    if (st == DT_ETOOBIG)
        dt_err_set(err, DT_ETOOBIG,
                   "the result is larger than one message (%u MiB); read it on the chief instead",
                   DT_MAX_RPC_MSG >> 20);
    return st;
}

/* A unique temporary file name in dir. */
static void temp_path(const char *dir, const char *what, const char *ext, char *out, size_t n)
{
    static atomic_uint counter;
    snprintf(out, n, "%s/.%s-%ld-%u%s", dir, what, (long)getpid(), atomic_fetch_add(&counter, 1),
             ext);
}

dt_status dt__service_export(const char *weights_path, const char *job_dir, bool chunked,
                             uint64_t offset, char **out, size_t *out_len, uint64_t *total,
                             dt_err *err)
{
    dt_service_export_src src;
    DT_TRY(dt_service_export_open(weights_path, job_dir, &src, err));
    *total = src.size;
    dt_status st;
    if (!chunked && src.size > DT_MAX_RPC_MSG - 4096)
        st = dt_err_set(err, DT_ETOOBIG,
                        "the weights are %llu MiB, more than one message (%u MiB): use a dtrain "
                        "that fetches them in pieces, or read %s on the chief",
                        (unsigned long long)(src.size >> 20), DT_MAX_RPC_MSG >> 20, weights_path);
    else
        st = dt_service_export_read(&src, chunked ? offset : 0,
                                    chunked ? DT_EXPORT_CHUNK : src.size, out, out_len, err);
    dt_service_export_close(&src);
    return st;
}

/* A pin names one of the job's checkpoints: <dir>/ckpt-<digits>.safetensors, nothing else. */
static bool is_checkpoint_of(const char *dir, const char *path)
{
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0 || path[n] != '/')
        return false;
    const char *p = path + n + 1;
    if (strncmp(p, "ckpt-", 5) != 0)
        return false;
    p += 5;
    if (*p < '0' || *p > '9')
        return false;
    while (*p >= '0' && *p <= '9')
        p++;
    return strcmp(p, ".safetensors") == 0;
}

dt_status dt__service_export_checkpoint(const char *spec_json, const char *data_root,
                                        const char *state_dir, const char *job_dir, const char *pin,
                                        bool chunked, uint64_t offset, char **out, size_t *out_len,
                                        uint64_t *total, char **path, uint64_t *step, dt_err *err)
{
    dt_jobspec spec;
    DT_TRY(parse_spec(spec_json, strlen(spec_json), data_root, state_dir, &spec, err));
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", spec.checkpoint_dir ? spec.checkpoint_dir : "");
    if (!spec.checkpoint_dir)
        snprintf(dir, sizeof dir, "%s/checkpoints", job_dir);
    dt_jobspec_destroy(&spec);
    dt_status st;
    if (pin && *pin) {
        if (!is_checkpoint_of(dir, pin))
            return dt_err_set(err, DT_EINVAL,
                              "source_path %s is not one of the job's checkpoints (in %s)", pin,
                              dir);
        *path = strdup(pin);
        st = *path ? DT_OK : dt_err_set(err, DT_ENOMEM, "out of memory");
    } else {
        st = dt_train_latest_checkpoint(dir, path, err);
    }
    if (st == DT_ENOENT)
        return dt_err_set(err, DT_ENOENT,
                          "the job has no checkpoint yet in %s (the chief writes "
                          "one by checkpoint.save_freq)",
                          dir);
    DT_TRY(st);
    /* ckpt-<global step>.safetensors, as lib/train names them */
    const char *base = strrchr(*path, '/');
    *step = strtoull((base ? base + 1 : *path) + strlen("ckpt-"), NULL, 10);
    st = dt__service_export(*path, job_dir, chunked, offset, out, out_len, total, err);
    if (st == DT_ENOENT && !(pin && *pin)) {
        /* The latest was rotated away between the listing and the open: take the new latest. */
        free(*path);
        *path = NULL;
        DT_TRY(dt_train_latest_checkpoint(dir, path, err));
        base = strrchr(*path, '/');
        *step = strtoull((base ? base + 1 : *path) + strlen("ckpt-"), NULL, 10);
        st = dt__service_export(*path, job_dir, chunked, offset, out, out_len, total, err);
    }
    if (st == DT_ENOENT && pin && *pin)
        dt_err_set(err, DT_ENOENT,
                   "checkpoint %s is gone (checkpoint.keep keeps only the newest ones); fetch "
                   "again from the start to get the newest",
                   pin);
    return st;
}

static dt_status parse_data(const char *data_json, cJSON **out, dt_err *err)
{
    *out = cJSON_Parse(data_json);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return dt_err_set(err, DT_EINVAL,
                          "--data: not a JSON object; give a data split such as "
                          "{\"format\": \"idx\", \"images\": ..., \"labels\": ...}");
    }
    return DT_OK;
}

dt_status dt__service_evaluate(const char *spec_json, const char *weights_path,
                               const char *data_json, const char *data_root, const char *state_dir,
                               uint32_t batch_size, jmetric *metrics, int *nmetrics,
                               uint64_t *examples, dt_err *err)
{
    dt_jobspec spec;
    DT_TRY(parse_spec(spec_json, strlen(spec_json), data_root, state_dir, &spec, err));
    cJSON *data = NULL;
    dt_status st = parse_data(data_json, &data, err);
    dt_train_eval_result res = {0};
    if (st == DT_OK)
        st = dt_train_evaluate(&spec, weights_path, data, (int)batch_size, &res, err);
    if (st == DT_OK) {
        int n = 0;
        snprintf(metrics[n].name, sizeof metrics[0].name, "loss");
        metrics[n++].value = res.loss;
        if (res.has_accuracy) {
            snprintf(metrics[n].name, sizeof metrics[0].name, "accuracy");
            metrics[n++].value = res.accuracy;
        }
        *nmetrics = n;
        *examples = res.examples;
    }
    cJSON_Delete(data);
    dt_jobspec_destroy(&spec);
    return st;
}

dt_status dt__service_predict(const char *spec_json, const char *weights_path,
                              const char *data_json, const char *data_root, const char *state_dir,
                              const char *job_dir, uint32_t batch_size, const char *format,
                              char **out, size_t *out_len, uint64_t *rows, uint64_t *cols,
                              dt_err *err)
{
    bool csv = format && strcmp(format, "csv") == 0;
    if (format && *format && !csv && strcmp(format, "npy") != 0)
        return dt_err_set(err, DT_EINVAL, "--format %s: use csv or npy", format);
    dt_jobspec spec;
    DT_TRY(parse_spec(spec_json, strlen(spec_json), data_root, state_dir, &spec, err));
    cJSON *data = NULL;
    dt_status st = parse_data(data_json, &data, err);
    char tmp[4300];
    temp_path(job_dir, "predict", csv ? ".csv" : ".npy", tmp, sizeof tmp);
    size_t n = 0;
    if (st == DT_OK)
        st = dt_train_predict(&spec, weights_path, data, (int)batch_size, tmp, &n, err);
    cJSON_Delete(data);
    dt_jobspec_destroy(&spec);
    if (st != DT_OK) {
        unlink(tmp);
        return st;
    }
    DT_TRY(read_and_remove(tmp, out, out_len, err));
    *rows = n;
    *cols = 0;
    if (n && csv) {
        const char *nl = memchr(*out, '\n', *out_len);
        size_t line = nl ? (size_t)(nl - *out) : *out_len;
        *cols = 1;
        for (size_t i = 0; i < line; i++)
            *cols += (*out)[i] == ',';
    } else if (n && *out_len > 10) { /* .npy v1: 10 bytes, then a header of hlen bytes */
        size_t hlen = (uint8_t)(*out)[8] | (size_t)(uint8_t)(*out)[9] << 8;
        if (*out_len > 10 + hlen)
            *cols = (*out_len - 10 - hlen) / 4 / n;
    }
    return DT_OK;
}
