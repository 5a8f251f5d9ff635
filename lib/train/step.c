/* step.c - one replica's training step: the fusion buckets and their all-reduces started from
 * the model's grad-ready hook, the step's small collective (moving statistics and metrics), the
 * feed's next batch, and validation's split sums. train.h tells the whole story of a step. */
#include "train/train_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------------------- liveness -- */

/* A phase change of opts.pulse; a stretch of own work that ends here may raise slowest_ms. */
void dt__train_pulse(dt_trainer *t, dt_train_doing d)
{
    dt_train_pulse *p = t->opts.pulse;
    if (!p)
        return;
    int64_t now = dt_now_ms();
    if (atomic_load(&p->doing) == DT_TRAIN_WORK && now - t->phase_at > atomic_load(&p->slowest_ms))
        atomic_store(&p->slowest_ms, now - t->phase_at);
    t->phase_at = now;
    atomic_store(&p->beat_ms, now);
    atomic_store(&p->doing, (int)d);
}

/* ------------------------------------------------------------------------ collectives -- */

bool dt__train_distributed(const dt_train_comm *c)
{
    return c->world > 1 && c->allreduce_start;
}

static dt_status allreduce(const dt_train_comm *c, float *buf, size_t n, dt_err *err)
{
    if (!dt__train_distributed(c) || n == 0)
        return DT_OK;
    void *req = NULL;
    DT_TRY(c->allreduce_start(c->ctx, buf, n, &req, err));
    return c->wait(c->ctx, req, err);
}

/* Starts bucket t->started (grads final from its lo up). */
static dt_status start_bucket(dt_trainer *t, dt_err *err)
{
    size_t n;
    float *g = dt_model_grads(t->m, &n);
    size_t k = t->started;
    t->reqs[k] = NULL;
    if (k == 0)
        t->first_start = dt_wall_s();
    const dt_train_comm *c = t->comm;
    if (c->bucket_start) { /* the comm takes the device's memory itself */
        DT_TRY(c->bucket_start(c->ctx, g + t->lo[k], t->hi[k] - t->lo[k], &t->reqs[k], err));
        t->started++;
        return DT_OK;
    }
    if (t->hg) { /* the ring reads host memory */
        dt_model_ops(t->m)->download(t->hg + t->lo[k], g + t->lo[k],
                                     (t->hi[k] - t->lo[k]) * sizeof(float));
        g = t->hg;
    }
    if (t->spec->compression != DT_JOBSPEC_COMPRESS_NONE)
        DT_TRY(c->allreduce_start_compressed(c->ctx, g + t->lo[k], t->hi[k] - t->lo[k],
                                             t->spec->compression, &t->reqs[k], err));
    else
        DT_TRY(c->allreduce_start(c->ctx, g + t->lo[k], t->hi[k] - t->lo[k], &t->reqs[k], err));
    t->started++;
    return DT_OK;
}

/* The model's grad-ready hook: grads[offset, n) are final, so every bucket lying above offset
 * can go on the wire while backward continues with the earlier layers. */
void dt__train_on_grad_ready(void *ctx, size_t offset)
{
    dt_trainer *t = ctx;
    if (!t->comm || !dt__train_distributed(t->comm))
        return;
    while (t->hook_st == DT_OK && t->started < t->nwire && t->lo[t->started] >= offset)
        t->hook_st = start_bucket(t, &t->hook_err);
}

/* A last bucket of at most this many gradients (256 KiB) joins the step's small collective. */
#define TAIL_BUCKET_FLOATS (64u << 10)

static size_t mb_floats(double mb)
{
    size_t n = (size_t)(mb * 1048576.0 / sizeof(float));
    return n ? n : 1;
}

/* Bucket plan: cut at layer boundaries once a bucket holds bucket_mb. Every replica computes
 * the same plan from the same model, so they start the same all-reduces in the same order. */
dt_status dt__train_plan_buckets(dt_trainer *t, dt_err *err)
{
    size_t np;
    dt_model_params(t->m, &np);
    size_t nw = dt_model_weight_count(t->m);
    size_t *starts = malloc((nw + 1) * sizeof *starts);
    t->lo = malloc((nw + 1) * sizeof *t->lo);
    t->hi = malloc((nw + 1) * sizeof *t->hi);
    t->reqs = calloc(nw + 1, sizeof *t->reqs);
    if (!starts || !t->lo || !t->hi || !t->reqs) {
        free(starts);
        return dt_err_set(err, DT_ENOMEM, "train: out of memory");
    }
    /* The first trainable offset of each layer, ascending (layers are laid out in order). */
    size_t ns = 0;
    int last_layer = -1;
    for (size_t i = 0; i < nw; i++) {
        const dt_model_weight *w = dt_model_weight_at(t->m, i);
        if (!w->trainable || w->layer == last_layer)
            continue;
        last_layer = w->layer;
        if (!ns || w->offset > starts[ns - 1])
            starts[ns++] = w->offset;
    }
    /* The first bucket (the last layers) is small so that the wire starts early: with one big
     * bucket nothing moves until backward ends. A layer is never split, so a bucket may hold
     * more than its cap. */
    size_t cap = mb_floats(t->spec->bucket_mb), first_cap = mb_floats(t->spec->first_bucket_mb);
    size_t hi = np;
    t->nbuckets = 0;
    for (size_t i = ns; i-- > 0;) {
        size_t c = t->nbuckets ? cap : first_cap;
        if (starts[i] < hi && (hi - starts[i] >= c || i == 0)) {
            t->lo[t->nbuckets] = i == 0 ? 0 : starts[i];
            t->hi[t->nbuckets++] = hi;
            hi = t->lo[t->nbuckets - 1];
        }
    }
    free(starts);
    /* The last bucket holds the first layers, final only when backward ends, just when the
     * step's small collective starts: a small one joins that collective (exact float32) rather
     * than costing a round trip of its own. */
    size_t nst;
    dt_model_state(t->m, &nst);
    size_t last = t->nbuckets ? t->hi[t->nbuckets - 1] - t->lo[t->nbuckets - 1] : 0;
    /* With a 16-bit wire a one-bucket model still travels compressed, as the spec asks. */
    bool rides = last && last <= TAIL_BUCKET_FLOATS &&
                 (t->nbuckets > 1 || t->spec->compression == DT_JOBSPEC_COMPRESS_NONE);
    t->nwire = t->nbuckets - rides;
    size_t ride = t->nwire < t->nbuckets ? last : 0;
    t->nms = dt__train_metrics_state_size(t->spec);
    /* host_alloc: pinned on a GPU, so run_step's downloads into it ride the step's one sync */
    t->tail = dt_model_ops(t->m)->host_alloc((nst + 4 + t->nms + ride) * sizeof *t->tail);
    t->mstep = calloc(3 * t->nms + 1, sizeof *t->mstep);
    t->mepoch = t->mstep + t->nms;
    t->mval = t->mepoch + t->nms;
    if (!t->tail || !t->mstep)
        return dt_err_set(err, DT_ENOMEM, "train: out of memory");
    DT_INFO(
        "train", "%zu fusion bucket%s over %zu gradients (first >= %g MiB, then %g MiB), wire %s%s",
        t->nbuckets, t->nbuckets == 1 ? "" : "s", np, t->spec->first_bucket_mb, t->spec->bucket_mb,
        t->spec->compression == DT_JOBSPEC_COMPRESS_NONE
            ? "float32"
            : dt_jobspec_compression_name(t->spec->compression),
        ride ? "; the last one rides with the step's metrics" : "");
    return DT_OK;
}

/* ------------------------------------------------------------------------------- step -- */

/* One synchronous step; *stop is set when some replica asked to cancel. */
/* Keras's class_weight as sample weights: the weight of each example's class, its class being
 * the integer label, a one-column target rounded, or a one-hot row's argmax; NULL without
 * class_weight. */
static const float *class_weights(dt_trainer *t, const dt_batch *b, dt_err *err, dt_status *st)
{
    const dt_jobspec *s = t->spec;
    *st = DT_OK;
    if (!s->n_class_weight)
        return NULL;
    if (b->n > t->cw_cap) {
        float *p = realloc(t->cw, (size_t)b->n * sizeof *p);
        if (!p) {
            *st = dt_err_set(err, DT_ENOMEM, "out of memory for the class weights");
            return NULL;
        }
        t->cw = p;
        t->cw_cap = b->n;
    }
    int cols = (int)dt_model_output_size(t->m);
    for (int i = 0; i < b->n; i++) {
        long k;
        if (b->y_i32) {
            k = b->y_i32[i];
        } else if (cols == 1) {
            k = lrintf(b->y_f32[i]);
        } else {
            const float *r = b->y_f32 + (size_t)i * cols;
            k = 0;
            for (int j = 1; j < cols; j++)
                k = r[j] > r[k] ? j : k;
        }
        t->cw[i] = k >= 0 && k < s->n_class_weight ? s->class_weight[k] : 1.0f;
    }
    return t->cw;
}

/* Puts b (NULL: the data ended, nothing to put) in the feed with its class weights. */
dt_status dt__train_put(dt_trainer *t, const dt_batch *b, dt_err *err)
{
    if (!b)
        return DT_OK;
    dt_status st;
    const float *sw = class_weights(t, b, err, &st);
    DT_TRY(st);
    return dt__train_feed_put(t->feed, b, sw, err);
}

/* The current step is queued: the next batch goes to the device while it computes. */
static dt_status feed_next(dt_trainer *t, dt_err *err)
{
    dt__train_feed_done(t->feed);
    if (!t->feed_ahead)
        return DT_OK;
    t->feed_ahead = false;
    const dt_batch *b;
    DT_TRY(dt_pipeline_next(t->p, &b, dt_deadline_in(t->opts.data_timeout_ms), err));
    return dt__train_put(t, b, err);
}

/* fed: b's model batch from the feed (its device copies), or NULL to upload b in the step. */
/* The collectives of a step whose comm queues them on this thread's stream (several replicas
 * on one host's GPUs, NCCL), between backward and the update: the buckets the grad-ready hook
 * has not started, then BatchNormalization's moving statistics, summed and scaled in place. They
 * are device work like the kernels around them, so a CUDA graph captures the step whole. */
static dt_status reduce_on_device(void *ctx, dt_err *err)
{
    dt_trainer *t = ctx;
    const dt_train_comm *c = t->comm;
    if (t->hook_st != DT_OK) {
        *err = t->hook_err;
        return t->hook_st;
    }
    while (t->started < t->nbuckets)
        DT_TRY(start_bucket(t, err));
    size_t ns;
    float *state = dt_model_state(t->m, &ns);
    if (ns > 0) {
        void *req = NULL;
        DT_TRY(c->allreduce_start(c->ctx, state, ns, &req, err));
        DT_TRY(c->wait(c->ctx, req, err));
        /* the same sum on every replica, times the same factor (the host path's float multiply):
         * still bit-identical */
        dt_model_ops(t->m)->mul(ns, state, t->inv_world, state, false);
    }
    for (size_t k = 0; k < t->started; k++)
        DT_TRY(c->wait(c->ctx, t->reqs[k], err));
    return DT_OK;
}

dt_status dt__train_step_setup(dt_trainer *t, const dt_train_comm *c, dt_err *err)
{
    const dt_nn_ops *ops = dt_model_ops(t->m);
    t->dev_comm = dt__train_distributed(c) && c->device_buffers && c->stream_ordered;
    if (t->inv_world) {
        ops->free(t->inv_world);
        t->inv_world = NULL;
    }
    size_t ns;
    dt_model_state(t->m, &ns);
    if (!t->dev_comm || ns == 0)
        return DT_OK;
    t->inv_world = ops->alloc(ns * sizeof(float));
    if (!t->inv_world)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory for %zu floats", ops->name, ns);
    ops->fill(ns, 1.0f / (float)c->world, t->inv_world);
    return DT_OK;
}

/* A blocking all-reduce of the host buffer buf: through the comm's host path when it has one
 * (a device comm would stage it through the GPU and wait for that). */
static dt_status allreduce_host(const dt_train_comm *c, float *buf, size_t n, dt_err *err)
{
    if (!dt__train_distributed(c) || n == 0)
        return DT_OK;
    if (c->allreduce_host)
        return c->allreduce_host(c->ctx, buf, n, err);
    return allreduce(c, buf, n, err);
}

dt_status dt__train_run_step(dt_trainer *t, const dt_train_comm *c, const dt_batch *b,
                             const dt_model_batch *fed, dt__train_sums *step, bool *stop,
                             dt_err *err)
{
    size_t np;
    float *g = dt_model_grads(t->m, &np);
    t->comm = c;
    t->started = 0;
    t->hook_st = DT_OK;
    dt_step_stats s = {0};
    double t0 = dt_wall_s(), busy0[2] = {0, 0};
    bool split = c->busy && dt__train_distributed(c);
    /* One replica, or several whose collectives queue on the device's stream (dev_comm): the
     * whole step (forward, backward, the collectives, clipping, update) is queued before the
     * model's end and costs the one host synchronisation of that end; only the loss and metrics
     * then cross host memory. Several on a host ring: the loss and metrics ride the all-reduce,
     * so the end comes first (the moving statistics and the riding bucket downloaded behind its
     * sync), the update after, then a sync of its own; the ring downloads each bucket as
     * backward finishes it. */
    bool host_ring = dt__train_distributed(c) && !t->dev_comm;
    bool updated = false, tail_down = false;
    size_t ns;
    float *state = dt_model_state(t->m, &ns);
    float *rider = t->tail + ns + 4 + t->nms;
    if (split)
        c->busy(c->ctx, &busy0[0], &busy0[1]);
    if (b->n > 0) {
        dt_status st = DT_OK;
        dt_model_batch mb;
        if (fed) {
            mb = *fed;
        } else {
            const float *sw = class_weights(t, b, err, &st);
            DT_TRY(st);
            mb = (dt_model_batch){
                .x = b->x, .labels = b->y_i32, .targets = b->y_f32, .sample_weight = sw, .n = b->n};
        }
        /* The model scales by 1/global batch; global_n is the step's true count on all replicas,
         * so short last steps average over what they really hold. */
        dt_model_keep_predictions(t->m, t->nms > 0);
        if (!host_ring) {
            /* the whole step on this thread's device: eager, captured or replayed (graph.c);
             * only full batches are graphed, an epoch's short last one runs eagerly */
            bool full = b->n == dt_pipeline_local_batch(t->p) &&
                        b->global_n == (int64_t)t->spec->batch_size;
            dt__train_reduce r = {.fn = reduce_on_device, .ctx = t};
            DT_TRY(dt__train_graph_step(&t->graphs, t->m, t->opt, &t->loss, &mb, (int)b->global_n,
                                        full, t->dev_comm ? &r : NULL, err));
            updated = true;
        } else {
            DT_TRY(dt_model_train_begin(t->m, &t->loss, &mb, (int)b->global_n, err));
            const dt_nn_ops *ops = dt_model_ops(t->m);
            ops->download_async(t->tail, state, ns * sizeof(float));
            if (t->nwire < t->nbuckets) {
                size_t lo = t->lo[t->nbuckets - 1];
                ops->download_async(rider, g + lo, (t->hi[t->nbuckets - 1] - lo) * sizeof(float));
            }
            tail_down = true;
        }
        /* the step is queued: the next batch's upload overlaps it, before the step's sync */
        if (t->feed)
            DT_TRY(feed_next(t, err));
        st = dt_model_train_end(t->m, &s, err);
        /* The model refuses a non-finite loss at the step's end, with the step's figures set
         * (and, with the update queued before the end, applied: the job fails). With
         * TerminateOnNaN the step goes on instead, so that every replica learns of it through
         * the all-reduced loss and stops after the same batch, as Keras does. */
        if (st == DT_EINVAL && t->on_nan && !isfinite(s.loss))
            st = DT_OK;
        DT_TRY(st);
        memset(t->mstep, 0, t->nms * sizeof *t->mstep);
        dt__train_metrics_update(t->spec, dt_model_last_predictions(t->m),
                                 (int)dt_model_output_size(t->m), b->y_f32, b->y_i32, b->n,
                                 t->mstep);
    } else {
        memset(t->mstep, 0, t->nms * sizeof *t->mstep);
        dt_model_ops(t->m)->fill(np, 0.0f, g); /* no examples: contribute nothing, still join */
        if (t->dev_comm) {
            DT_TRY(reduce_on_device(t, err));
            DT_TRY(dt_optim_step(t->opt, err));
            updated = true;
        }
        if (t->feed)
            DT_TRY(feed_next(t, err));
    }
    if (t->hook_st != DT_OK) {
        *err = t->hook_err;
        return t->hook_st;
    }
    /* The step's small collective: BatchNormalization's moving statistics and the metrics, in
     * one all-reduce started right behind the last gradient bucket (one round trip, not two);
     * with dev_comm the statistics were summed on the device and the metrics go alone. */
    double t1 = dt_wall_s();
    if (t->started > 0)
        t->phase.ahead += t1 - t->first_start;
    bool cancel = t->opts.cancel && atomic_load(t->opts.cancel);
    float *mv = t->tail + ns;
    mv[0] = (float)(s.loss * b->n);
    mv[1] = (float)round(s.accuracy * b->n);
    mv[2] = (float)b->n;
    mv[3] = cancel ? 1.0f : 0.0f;
    /* the metrics' sums: counts stay exact in float32 up to 2^24 a step */
    for (size_t i = 0; i < t->nms; i++)
        mv[4 + i] = (float)t->mstep[i];
    if (host_ring) {
        while (t->started < t->nwire)
            DT_TRY(start_bucket(t, err));
        const dt_nn_ops *ops = dt_model_ops(t->m);
        if (!tail_down) /* no examples: nothing was queued */
            ops->download(t->tail, state, ns * sizeof(float));
        size_t ride = 0, lo = 0;
        if (t->nwire < t->nbuckets) {
            lo = t->lo[t->nbuckets - 1];
            ride = t->hi[t->nbuckets - 1] - lo;
            if (!tail_down)
                ops->download(rider, g + lo, ride * sizeof(float));
        }
        void *treq = NULL;
        DT_TRY(c->allreduce_start(c->ctx, t->tail, ns + 4 + t->nms + ride, &treq, err));
        dt__train_pulse(t, DT_TRAIN_COMM);
        for (size_t k = 0; k < t->nwire; k++)
            DT_TRY(c->wait(c->ctx, t->reqs[k], err));
        DT_TRY(c->wait(c->ctx, treq, err));
        dt__train_pulse(t, DT_TRAIN_WORK);
        ops->upload(g + lo, rider, ride * sizeof(float));
        for (size_t k = 0; t->hg && !c->bucket_start && k < t->nwire; k++)
            ops->upload(g + t->lo[k], t->hg + t->lo[k], (t->hi[k] - t->lo[k]) * sizeof(float));
        /* the same sum on every replica, times the same factor: still bit-identical */
        float inv = 1.0f / (float)c->world;
        for (size_t i = 0; i < ns; i++)
            t->tail[i] *= inv;
        ops->upload(state, t->tail, ns * sizeof(float));
    } else if (t->dev_comm) {
        dt__train_pulse(t, DT_TRAIN_COMM);
        DT_TRY(allreduce_host(c, mv, 4 + t->nms, err));
        dt__train_pulse(t, DT_TRAIN_WORK);
    }
    t->comm = NULL;
    double t2 = dt_wall_s();
    if (split) {
        double busy1[2];
        c->busy(c->ctx, &busy1[0], &busy1[1]);
        t->phase.in_host += busy1[0] - busy0[0];
        t->phase.ring += busy1[1] - busy0[1];
        t->phase.split = true;
    }
    if (!updated)
        DT_TRY(dt_optim_step(t->opt, err));
    if (!updated || b->n == 0) { /* else the model's end synchronised behind the update */
        const dt_nn_ops *ops = dt_model_ops(t->m);
        char msg[512];
        if (ops->sync && ops->sync(msg, sizeof msg) != 0) /* a device's kernels fail only here */
            return dt_err_set(err, DT_EIO, "%s: %s", ops->name, msg);
    }
    t->phase.compute += t1 - t0;
    t->phase.wait += t2 - t1;
    t->phase.update += dt_wall_s() - t2;
    step->loss = mv[0];
    step->correct = mv[1];
    step->n = mv[2];
    for (size_t i = 0; i < t->nms; i++)
        t->mstep[i] = mv[4 + i];
    *stop = mv[3] > 0;
    return DT_OK;
}

/* Validation's next batch, put in its feed (NULL: the data ended, nothing to put). */
static dt_status val_put_next(dt_trainer *t, dt_err *err)
{
    const dt_batch *b;
    DT_TRY(dt_pipeline_next(t->pv, &b, dt_deadline_in(t->opts.data_timeout_ms), err));
    return b ? dt__train_feed_put(t->vfeed, b, NULL, err) : DT_OK;
}

/* With a validation feed (t->vfeed) the batches go to the device as the training ones do:
 * batch k + 1 is put (staged, uploaded on the copy stream) once batch k's evaluation is
 * queued, before its sync; the figures are the host path's, bit for bit. */
dt_status dt__train_validate_epoch(dt_trainer *t, const dt_train_comm *c, int64_t epoch,
                                   dt__train_sums *out, dt_err *err)
{
    double loss = 0, correct = 0, n = 0;
    dt__train_feed *f = t->vfeed;
    memset(t->mval, 0, t->nms * sizeof *t->mval);
    DT_TRY(dt_pipeline_epoch_begin(t->pv, epoch, err));
    if (f) {
        dt__train_feed_reset(f);
        DT_TRY(val_put_next(t, err));
    }
    for (;;) {
        const dt_batch *b;
        dt_model_batch mb;
        if (f) {
            b = dt__train_feed_take(f, &mb);
        } else {
            DT_TRY(dt_pipeline_next(t->pv, &b, dt_deadline_in(t->opts.data_timeout_ms), err));
            if (b)
                mb =
                    (dt_model_batch){.x = b->x, .labels = b->y_i32, .targets = b->y_f32, .n = b->n};
        }
        if (!b)
            break;
        if (b->n > 0)
            DT_TRY(dt_model_evaluate_begin(t->m, &t->loss, &mb, err));
        if (f) { /* this batch is queued: the next one's upload overlaps it */
            dt__train_feed_done(f);
            dt_status st = val_put_next(t, err);
            if (st != DT_OK) {
                dt_step_stats s;
                dt_err ignored;
                if (b->n > 0) /* the queued evaluation still ends */
                    dt_model_evaluate_end(t->m, &s, &ignored);
                return st;
            }
        }
        if (b->n == 0)
            continue;
        dt_step_stats s;
        DT_TRY(dt_model_evaluate_end(t->m, &s, err));
        loss += s.loss * b->n;
        correct += round(s.accuracy * b->n);
        n += b->n;
        dt__train_metrics_update(t->spec, dt_model_last_predictions(t->m),
                                 (int)dt_model_output_size(t->m), b->y_f32, b->y_i32, b->n,
                                 t->mval);
    }
    /* the step's tail buffer is free between steps and holds 3 + nms floats */
    float *v = t->tail;
    v[0] = (float)loss;
    v[1] = (float)correct;
    v[2] = (float)n;
    for (size_t i = 0; i < t->nms; i++)
        v[3 + i] = (float)t->mval[i];
    dt__train_pulse(t, DT_TRAIN_COMM);
    DT_TRY(allreduce_host(c, v, 3 + t->nms, err));
    dt__train_pulse(t, DT_TRAIN_WORK);
    out->loss = v[0];
    out->correct = v[1];
    out->n = v[2];
    for (size_t i = 0; i < t->nms; i++)
        t->mval[i] = v[3 + i];
    return DT_OK;
}
