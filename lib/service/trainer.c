/*
 * trainer.c - the trainer thread's body (prepare, report, fit, report) and the adapter from
 * train's comm table to the ring. It knows nothing of the runner or the chief: what it reports
 * goes through the hooks of its task (service_internal.h). Everything here blocks, on the
 * trainer thread.
 */
#include "service/service_internal.h"

#include "core/clock.h"
#include "core/log.h"
#include "nn/gpu.h"
#include "train/train.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEP_EVENT_MS 100 /* at most ten step events a second go to watchers */

/* --- progress (rank 0) ------------------------------------------------------------------------ */

/* What the ring did during rank 0's steps since the last step event, for the live view
 * (dtrain top): the ring's bus bandwidth and the share of the step spent waiting for the
 * all-reduces once backward was done. The ring adapter below fills it, on_step_end reads and
 * resets it; both run on the trainer thread. */
typedef struct wire_stats {
    int world;
    double first_start; /* dt_wall_s() of the step's first all-reduce start; 0: none yet */
    double last_end;    /* when the step's last wait returned */
    /* Summed over the steps since the last event: */
    double window_s; /* first start to last wait's end: the gradients' time on the wire */
    double wait_s;   /* blocked in waits, i.e. what the overlap with backward left exposed */
    double step_s;   /* the steps' wall time */
    double bytes;    /* all-reduced, at wire precision */
} wire_stats;

typedef struct progress_ctx {
    const trainer_hooks *h;
    int64_t last_ms;
    wire_stats wire;
} progress_ctx;

static void wire_reset(wire_stats *w)
{
    *w = (wire_stats){.world = w->world};
}

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
    wire_reset(&p->wire); /* validation's and start-up's collectives are no step's */
    p->h->progress(p->h->ctx, &ev);
}

static void on_step_end(void *ctx, const dt_train_step_info *s)
{
    progress_ctx *p = ctx;
    wire_stats *w = &p->wire;
    if (w->first_start > 0 && w->last_end > w->first_start) {
        w->window_s += w->last_end - w->first_start;
        w->step_s += s->step_ms / 1e3;
    }
    w->first_start = w->last_end = 0;
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
    for (int i = 0; i < s->nmetrics; i++)
        metric(&ev, s->metrics[i].name, s->metrics[i].value);
    metric(&ev, "samples_per_s", s->samples_per_s);
    metric(&ev, "learning_rate", s->learning_rate);
    metric(&ev, "global_step", (double)s->global_step);
    if (w->window_s > 0 && w->step_s > 0 && w->world > 1) {
        /* nccl-tests' busbw: a ring all-reduce moves 2(R-1)/R of the buffer over each link.
         * Over the wire window it undercounts when the ring idled while backward ran. */
        double bus = w->bytes * 2 * (w->world - 1) / w->world;
        metric(&ev, "ring_busbw_GBps", bus / w->window_s / 1e9);
        metric(&ev, "wire_wait_frac", w->wait_s / w->step_s);
    }
    wire_reset(w);
    p->h->progress(p->h->ctx, &ev);
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
    for (int i = 0; i < e->nmetrics; i++)
        metric(&ev, e->metrics[i].name, e->metrics[i].value);
    if (e->has_val) {
        metric(&ev, "val_loss", e->val_loss);
        if (e->has_accuracy)
            metric(&ev, "val_accuracy", e->val_accuracy);
        for (int i = 0; i < e->nmetrics; i++)
            metric(&ev, e->val_metrics[i].name, e->val_metrics[i].value);
    }
    metric(&ev, "samples_per_s", e->samples_per_s);
    p->h->progress(p->h->ctx, &ev);
}

static void on_resumed(void *ctx, int epoch, int64_t step, int64_t global_step)
{
    progress_ctx *p = ctx;
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "resumed");
    ev.epoch = (uint32_t)epoch + 1;
    ev.step = step > 0 ? (uint64_t)step : 0;
    metric(&ev, "global_step", (double)global_step);
    p->h->progress(p->h->ctx, &ev);
}

/* --- the comm -----------------------------------------------------------------------------------
 */

#define ALLREDUCE_TIMEOUT_MS 120000 /* a dead peer fails sooner: its streams break */
#define BROADCAST_TIMEOUT_MS 300000 /* the chief may load a checkpoint first */
#define CONNECT_TIMEOUT_MS   30000

/* The trainer thread's view of the ring: the comm and the all-reduces started but not yet
 * waited for (fit stops waiting at its first error; those are released at close). */
typedef struct ring_ctx {
    dt_comm *c;
    dt_comm_req **pending;
    size_t npending, cap;
    wire_stats *wire; /* rank 0's progress context; NULL on the other ranks */
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
    if (rc->wire) {
        if (rc->wire->first_start == 0)
            rc->wire->first_start = dt_wall_s();
        rc->wire->bytes += (double)n * (wire == DT_COMM_F32 ? 4 : 2);
    }
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
    if (!rc->wire)
        return dt_comm_wait(req, ALLREDUCE_TIMEOUT_MS, err);
    double t0 = dt_wall_s();
    dt_status st = dt_comm_wait(req, ALLREDUCE_TIMEOUT_MS, err);
    rc->wire->last_end = dt_wall_s();
    rc->wire->wait_s += rc->wire->last_end - t0;
    return st;
}

static dt_status ring_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    return dt_comm_broadcast(((ring_ctx *)ctx)->c, buf, bytes, root, BROADCAST_TIMEOUT_MS, err);
}

/* The run's tasks by rank: their addresses and names ("worker:1"), into nbuf. */
static void ring_names(const trainer_task *t, const char **addrs, const char **names,
                       char (*nbuf)[48])
{
    for (int i = 0; i < t->world; i++) {
        const dt_task *task = dt_tfconfig_by_rank(t->cluster, t->tasks ? (int)t->tasks[i] : i);
        addrs[i] = task->address;
        dt_task_name(task, nbuf[i], sizeof nbuf[i]);
        names[i] = nbuf[i];
    }
}

/* The collectives for this run: none for one task; a ring of the run's tasks otherwise (its
 * session is the run's, so a later run never mixes with this one). wire (NULL: none) gets the
 * ring's timings. */
static dt_status comm_open(const trainer_task *t, wire_stats *wire, dt_train_comm *out, dt_err *err)
{
    if (t->world == 1) {
        *out = dt_train_comm_local();
        return DT_OK;
    }
    if (!t->hub)
        return dt_err_set(err, DT_ENOTSUP,
                          "this dtraind has no ring transport wired in, so it trains on one task "
                          "only; run a one-task cluster");
    const char **addrs = calloc((size_t)t->world, sizeof *addrs);
    const char **names = calloc((size_t)t->world, sizeof *names);
    char(*nbuf)[48] = calloc((size_t)t->world, sizeof *nbuf);
    ring_ctx *rc = calloc(1, sizeof *rc);
    dt_status st = DT_OK;
    if (!addrs || !names || !nbuf || !rc) {
        st = dt_err_set(err, DT_ENOMEM, "out of memory");
        goto out;
    }
    ring_names(t, addrs, names, nbuf);
    dt_comm_opts o = {
        .rank = t->rank,
        .world = t->world,
        .addresses = addrs,
        .names = names,
        .token = t->token,
        .session = t->session,
        .hub = t->hub,
        .connect_timeout_ms = CONNECT_TIMEOUT_MS,
    };
    st = dt_comm_new(&o, &rc->c, err);
    if (st != DT_OK)
        goto out;
    rc->wire = wire;
    if (wire)
        wire->world = t->world;
    /* A cancel that came before now is seen by fit at its first step, on every rank at once. */
    t->hooks.comm(t->hooks.ctx, rc->c);
    *out = (dt_train_comm){.ctx = rc,
                           .rank = t->rank,
                           .world = t->world,
                           .allreduce_start = ring_allreduce_start,
                           .wait = ring_wait,
                           .broadcast = ring_broadcast,
                           .allreduce_start_compressed = ring_allreduce_start_compressed};
    rc = NULL;
out:
    free(rc);
    free(addrs);
    free(names);
    free(nbuf);
    return st;
}

/* why: NULL after a clean fit, else its error: the peers learn it (a notice) rather than seeing
 * a closed link, so every rank's report names the cause, whichever reaches the chief first. */
static void comm_close(const trainer_task *t, dt_train_comm *c, const char *why)
{
    if (t->world == 1)
        return;
    ring_ctx *rc = c->ctx;
    t->hooks.comm(t->hooks.ctx, NULL);
    if (why || rc->npending)
        dt_comm_abort(rc->c, why ? why : "the trainer stopped");
    if (rc->npending) { /* fit ended at an error with all-reduces in flight: release them */
        dt_err e = {0};
        for (size_t i = 0; i < rc->npending; i++)
            dt_comm_wait(rc->pending[i], 1000, &e);
    }
    dt_comm_free(rc->c);
    free(rc->pending);
    free(rc);
}

/* --- devices ---------------------------------------------------------------------------------
 *
 * A GPU replica's kernels run on the device its thread is bound to (lib/nn/gpu.h). The thread
 * that builds a replica's model binds to its device first, so the model's memory lives there;
 * the replica's own thread binds again before fit (a binding is per thread and holds its stream
 * and cuBLAS handle; the memory stays on the device). CPU replicas bind nothing: their models
 * take the CPU table (ops NULL). */

/* "/gpu:1" or "/cpu:1": replica m's device as the spec names it. */
static const char *dev_name(const dt_jobspec *spec, int m, char *buf, size_t n)
{
    snprintf(buf, n, "/%s:%d", spec->gpu ? "gpu" : "cpu", spec->ndevices ? spec->devices[m] : 0);
    return buf;
}

static dt_status device_bind(const dt_jobspec *spec, int m, const dt_nn_ops **ops, dt_err *err)
{
    *ops = NULL;
    if (!spec->gpu)
        return DT_OK;
    DT_TRY(dt_nn_gpu_complete(err));
    return dt_nn_gpu_bind(spec->devices[m], spec->precision == DT_JOBSPEC_PRECISION_TF32, ops, err);
}

static void device_unbind(const dt_jobspec *spec)
{
    if (spec->gpu)
        dt_nn_gpu_unbind();
}

/* --- several replicas in this daemon ($.strategy.devices) ---------------------------------------
 *
 * G = ndevices trainers, one thread each (the task's own thread is replica 0), with global ranks
 * rank * G + m of world * G, so DATA sharding and the global batch split over every replica of
 * every task, as they do over tasks. Their collectives go through the hierarchical comm
 * (lib/comm: in-host reduce-scatter, G host rings on the shards, in-host all-gather). Only
 * global rank 0 writes files and reports progress; replica 0 beats the pulse. The task reports
 * once: the sum of its replicas' examples, and replica 0's weights hash once every replica's
 * agrees. */

/* One replica's view of the hierarchical comm: its member index, its all-reduces started and
 * not yet waited for (released at the end when fit stops at an error). */
typedef struct hier_ctx {
    dt_comm_hier *h;
    int member;
    dt_comm_hier_req **pending;
    size_t npending, cap;
    wire_stats *wire; /* global rank 0's; NULL elsewhere */
} hier_ctx;

static dt_status hier_allreduce_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    hier_ctx *hc = ctx;
    if (hc->npending == hc->cap) {
        size_t cap = hc->cap ? hc->cap * 2 : 64;
        dt_comm_hier_req **p = realloc(hc->pending, cap * sizeof *p);
        if (!p)
            return dt_err_set(err, DT_ENOMEM, "out of memory");
        hc->pending = p;
        hc->cap = cap;
    }
    DT_TRY(dt_comm_hier_allreduce_start(hc->h, hc->member, buf, n, ALLREDUCE_TIMEOUT_MS,
                                        (dt_comm_hier_req **)req, err));
    hc->pending[hc->npending++] = *req;
    if (hc->wire) {
        if (hc->wire->first_start == 0)
            hc->wire->first_start = dt_wall_s();
        hc->wire->bytes += (double)n * 4;
    }
    return DT_OK;
}

static dt_status hier_wait(void *ctx, void *req, dt_err *err)
{
    hier_ctx *hc = ctx;
    for (size_t i = 0; i < hc->npending; i++)
        if (hc->pending[i] == req) {
            hc->pending[i] = hc->pending[--hc->npending];
            break;
        }
    double t0 = dt_wall_s();
    dt_status st = dt_comm_hier_wait(req, ALLREDUCE_TIMEOUT_MS, err);
    if (hc->wire) {
        hc->wire->last_end = dt_wall_s();
        hc->wire->wait_s += hc->wire->last_end - t0;
    }
    return st;
}

static void hier_busy(void *ctx, double *in_host_s, double *ring_s)
{
    hier_ctx *hc = ctx;
    uint64_t a, b;
    dt_comm_hier_busy_ns(hc->h, hc->member, &a, &b);
    *in_host_s = (double)a / 1e9;
    *ring_s = (double)b / 1e9;
}

static dt_status hier_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    hier_ctx *hc = ctx;
    return dt_comm_hier_broadcast(hc->h, hc->member, buf, bytes, root, BROADCAST_TIMEOUT_MS, err);
}

typedef struct replica {
    const trainer_task *t;
    const dt_jobspec *spec;
    int member, G;
    dt_trainer *tr;
    hier_ctx hc;
    dt_nn_gpu_clique *clique; /* GPU replicas: NCCL among the host's GPUs; else NULL */
    dt__gpu_ring *gr;         /* several hosts: the buckets' hierarchical all-reduce */
    const dt_nn_ops *ops;     /* its model's (its device's) */
    dt_train_result res;
    dt_status st;
    dt_err err;
} replica;

/* The GPUs of a one-task job all-reduce with NCCL, on the model's device memory; the
 * hierarchical comm stays open beside it for the job's abort (its hook aborts the clique). */
static dt_status clique_allreduce_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    replica *r = ctx;
    DT_TRY(dt_nn_gpu_clique_allreduce(r->clique, r->member, buf, n, err));
    *req = r; /* queued behind the replica's stream; clique_wait orders its stream after it */
    return DT_OK;
}

/* The sums are read only after this on the replica's stream (a stream dependency, no host
 * wait: a CUDA graph captures it). */
static dt_status clique_wait(void *ctx, void *req, dt_err *err)
{
    (void)req;
    replica *r = ctx;
    return dt_nn_gpu_clique_join(r->clique, r->member, err);
}

/* The step's metrics and validation's sums (host memory) go through the in-host comm, as CPU
 * replicas' do: NCCL would stage them through the device and wait for it. */
static dt_status clique_allreduce_host(void *ctx, float *buf, size_t n, dt_err *err)
{
    replica *r = ctx;
    void *req = NULL;
    DT_TRY(hier_allreduce_start(&r->hc, buf, n, &req, err));
    return hier_wait(&r->hc, req, err);
}

static dt_status clique_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    replica *r = ctx;
    return dt_nn_gpu_clique_broadcast(r->clique, r->member, buf, bytes, root, err);
}

/* GPU hosts: a bucket through the clique and this replica's host ring (gpu_ring.c); the rest
 * (the step's tail, validation, broadcasts) through the hierarchical comm in host memory. */
static dt_status gr_bucket_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    replica *r = ctx;
    return dt__gpu_ring_start(r->gr, buf, n, ALLREDUCE_TIMEOUT_MS, req, err);
}

static dt_status gr_allreduce_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    replica *r = ctx;
    return hier_allreduce_start(&r->hc, buf, n, req, err);
}

static dt_status gr_wait(void *ctx, void *req, dt_err *err)
{
    replica *r = ctx;
    if (dt__gpu_ring_owns(r->gr, req))
        return dt__gpu_ring_wait(r->gr, req, ALLREDUCE_TIMEOUT_MS, err);
    return hier_wait(&r->hc, req, err);
}

static dt_status gr_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    replica *r = ctx;
    return hier_broadcast(&r->hc, buf, bytes, root, err);
}

static void gr_busy(void *ctx, double *in_host_s, double *ring_s)
{
    replica *r = ctx;
    hier_busy(&r->hc, in_host_s, ring_s);
}

static void clique_abort(void *arg)
{
    dt_nn_gpu_clique_abort(arg);
}

/* fit for one replica (its own thread, or the task's for replica 0). */
static void *replica_fit(void *arg)
{
    replica *r = arg;
    if (r->member > 0) /* its own name, so a stuck one can be told (and, in tests, frozen) */
        pthread_setname_np(pthread_self(), "dt-replica");
    const trainer_task *t = r->t;
    const dt_nn_ops *ops;
    if (r->member > 0 && (r->st = device_bind(r->spec, r->member, &ops, &r->err)) != DT_OK) {
        dt_comm_hier_abort(r->hc.h, r->err.msg);
        return NULL;
    }
    dt_train_comm comm = {.ctx = &r->hc,
                          .rank = t->rank * r->G + r->member,
                          .world = t->world * r->G,
                          .allreduce_start = hier_allreduce_start,
                          .wait = hier_wait,
                          .broadcast = hier_broadcast,
                          .busy = hier_busy};
    if (r->clique && t->world > 1) {
        r->st = dt__gpu_ring_new(r->clique, r->member, r->G, dt_comm_hier_ring(r->hc.h, r->member),
                                 r->ops, &r->gr, &r->err);
        if (r->st != DT_OK) {
            dt_comm_hier_abort(r->hc.h, r->err.msg);
            if (r->member > 0)
                device_unbind(r->spec);
            return NULL;
        }
        comm.ctx = r;
        comm.allreduce_start = gr_allreduce_start;
        comm.wait = gr_wait;
        comm.broadcast = gr_broadcast;
        comm.busy = gr_busy;
        comm.bucket_start = gr_bucket_start;
    } else if (r->clique)
        comm = (dt_train_comm){.ctx = r,
                               .rank = r->member,
                               .world = r->G,
                               .allreduce_start = clique_allreduce_start,
                               .wait = clique_wait,
                               .broadcast = clique_broadcast,
                               .device_buffers = true,
                               .stream_ordered = true,
                               .allreduce_host = clique_allreduce_host};
    r->st = dt_train_fit(r->tr, &comm, &r->res, &r->err);
    /* Siblings blocked in an in-host collective and the other tasks' rings learn the cause
     * now rather than at a deadline (a cancel stops every replica after the same step). */
    if (r->st != DT_OK && r->st != DT_ECANCELED)
        dt_comm_hier_abort(r->hc.h, r->err.msg);
    else if (r->hc.npending)
        dt_comm_hier_abort(r->hc.h, "a replica stopped with all-reduces in flight");
    dt_err e = {0};
    for (size_t i = 0; i < r->hc.npending; i++)
        dt_comm_hier_wait(r->hc.pending[i], 1000, &e);
    r->hc.npending = 0;
    dt__gpu_ring_free(r->gr); /* its device buffers: before the thread lets the device go */
    r->gr = NULL;
    if (r->member > 0)
        device_unbind(r->spec);
    return NULL;
}

/* The in-host comm ("worker:1 /cpu:0", ...) and the host rings of this run. */
static dt_status hier_open(const trainer_task *t, const dt_jobspec *spec, dt_comm_local **local,
                           dt_comm_hier **hier, dt_err *err)
{
    int G = spec->ndevices;
    if (t->world > 1 && !t->hub)
        return dt_err_set(err, DT_ENOTSUP,
                          "this dtraind has no ring transport wired in, so it trains on one task "
                          "only; run a one-task cluster");
    const char **addrs = calloc((size_t)t->world, sizeof *addrs);
    const char **names = calloc((size_t)t->world, sizeof *names);
    char(*nbuf)[48] = calloc((size_t)t->world, sizeof *nbuf);
    char(*mbuf)[80] = calloc((size_t)G, sizeof *mbuf);
    const char **mnames = calloc((size_t)G, sizeof *mnames);
    dt_status st = DT_OK;
    if (!addrs || !names || !nbuf || !mbuf || !mnames) {
        st = dt_err_set(err, DT_ENOMEM, "out of memory");
        goto out;
    }
    ring_names(t, addrs, names, nbuf);
    for (int m = 0; m < G; m++) {
        char dn[32];
        snprintf(mbuf[m], sizeof mbuf[m], "%s %s", nbuf[t->rank], dev_name(spec, m, dn, sizeof dn));
        mnames[m] = mbuf[m];
    }
    st = dt_comm_local_new(&(dt_comm_local_opts){.members = G, .names = mnames}, local, err);
    if (st != DT_OK)
        goto out;
    dt_comm_hier_opts o = {.local = *local,
                           .ring = {.rank = t->rank,
                                    .world = t->world,
                                    .addresses = addrs,
                                    .names = names,
                                    .token = t->token,
                                    .session = t->session,
                                    .hub = t->hub,
                                    .connect_timeout_ms = CONNECT_TIMEOUT_MS}};
    st = dt_comm_hier_new(&o, hier, err);
    if (st != DT_OK) {
        dt_comm_local_free(*local);
        *local = NULL;
    }
out:
    free(addrs);
    free(names);
    free(nbuf);
    free(mbuf);
    free(mnames);
    return st;
}

/* Prepare every replica, report once, fit them all, report once. */
/* The job's TensorBoard run folder, "<name>-<id>" (the id is job_dir's last part), so jobs
 * sharing a log_dir show as runs of their own. */
static void tb_run_name(const trainer_task *t, const dt_jobspec *spec, char *out, size_t n)
{
    const char *id = t->job_dir ? strrchr(t->job_dir, '/') : NULL;
    snprintf(out, n, "%s-%s", spec->name, id ? id + 1 : "job");
}

static void replicas_main(const trainer_task *t, const dt_jobspec *spec, progress_ctx *pc)
{
    const trainer_hooks *h = &t->hooks;
    int G = spec->ndevices;
    dt_err err = {0};
    char tb_run[DT_JOBSPEC_NAME_LEN + 32];
    tb_run_name(t, spec, tb_run, sizeof tb_run);
    replica *reps = calloc((size_t)G, sizeof *reps);
    dt_status st = reps ? DT_OK : dt_err_set(&err, DT_ENOMEM, "out of memory");
    uint64_t examples = 0;
    dt_train_info info0 = {0};
    if (st == DT_OK && t->hang_ms)
        atomic_store(t->hang_ms, (int64_t)spec->hang_timeout_s * 1000);
    if (st == DT_OK && t->replicas)
        atomic_store(t->replicas, G);
    for (int m = 0; st == DT_OK && m < G; m++) {
        reps[m] = (replica){.t = t, .spec = spec, .member = m, .G = G, .hc = {.member = m}};
        dt_train_opts o = dt_train_opts_default();
        char dn[32];
        /* this thread builds every replica, each on its device; replica 0 keeps it */
        st = device_bind(spec, m, &o.ops, &err);
        if (st != DT_OK)
            break;
        o.rank = t->rank * G + m;
        o.world = t->world * G;
        o.out_dir = o.rank == 0 ? t->job_dir : NULL;
        o.tb_run = tb_run;
        o.cancel = t->cancel;
        o.resume = t->resume && o.rank == 0;
        o.pulse = t->pulse ? &t->pulse[m] : NULL; /* the watchdog watches every replica */
        if (o.rank == 0)
            o.progress =
                (dt_train_progress){pc, on_epoch_begin, on_step_end, on_epoch_end, on_resumed};
        reps[m].ops = o.ops;
        st = dt_train_new(spec, &o, &reps[m].tr, &err);
        if (st != DT_OK) {
            dt_err_prefix(&err, "replica %s", dev_name(spec, m, dn, sizeof dn));
            break;
        }
        dt_train_info info;
        dt_train_get_info(reps[m].tr, &info);
        examples += info.local_examples;
        if (m == 0)
            info0 = info;
    }
    dt_err perr = {0};
    dt_status pst = h->prepared(h->ctx, st == DT_OK, err.msg, examples, info0.params_total,
                                (uint64_t)info0.steps_per_epoch, &perr);
    if (st == DT_OK && pst != DT_OK) {
        st = pst;
        err = perr;
    }
    dt_comm_local *local = NULL;
    dt_comm_hier *hier = NULL;
    const dt_nn_ops *ops0;
    if (st == DT_OK && spec->gpu && G > 1) /* back on replica 0's device */
        st = device_bind(spec, 0, &ops0, &err);
    if (st == DT_OK)
        st = hier_open(t, spec, &local, &hier, &err);
    dt_nn_gpu_clique *clique = NULL;
    /* NCCL among the host's GPUs: the whole all-reduce with one host; with several, its
     * in-host stages around the host rings (gpu_ring.c), where one GPU a host has none */
    if (st == DT_OK && spec->gpu && (t->world == 1 || G > 1)) {
        st = dt_nn_gpu_clique_new(G, spec->devices, &clique, &err);
        if (st == DT_ENOTSUP) { /* a backend without NCCL: the host's comm, through host memory */
            DT_WARN("jobs", "%s; the GPUs all-reduce through host memory", err.msg);
            st = DT_OK;
        } else if (st == DT_OK) {
            dt_comm_hier_on_abort(hier, clique_abort, clique);
            for (int m = 0; m < G; m++)
                reps[m].clique = clique;
        }
        /* NCCL's setup may leave another device current: replica 0's thread binds again */
        const dt_nn_ops *again;
        if (st == DT_OK)
            st = device_bind(spec, 0, &again, &err);
    }
    if (st == DT_OK)
        DT_INFO("jobs", "rank %d trains %d %s replicas (global ranks %d..%d of %d)%s", t->rank, G,
                spec->gpu ? "GPU" : "CPU", t->rank * G, t->rank * G + G - 1, t->world * G,
                !clique         ? ""
                : t->world == 1 ? ", all-reduced with NCCL"
                                : ", NCCL among them and one host ring a GPU across hosts");
    char hash[32] = "";
    if (st == DT_OK) {
        if (t->rank == 0) {
            reps[0].hc.wire = &pc->wire;
            pc->wire.world = t->world * G;
        }
        dt_comm *ring0 = dt_comm_hier_ring(hier, 0);
        if (ring0) /* a cancel or the hang watchdog aborts it; replica 0 then fails the rest */
            t->hooks.comm(t->hooks.ctx, ring0);
        if (t->hooks.hier) /* or, better, all of it: every replica stops at once */
            t->hooks.hier(t->hooks.ctx, hier);
        pthread_t *th = calloc((size_t)G, sizeof *th);
        bool *up = calloc((size_t)G, sizeof *up);
        for (int m = 0; m < G; m++)
            reps[m].hc.h = hier;
        for (int m = 1; th && up && m < G; m++)
            up[m] = pthread_create(&th[m], NULL, replica_fit, &reps[m]) == 0;
        for (int m = 1; m < G; m++)
            if (!th || !up || !up[m]) { /* never started: fail its siblings rather than hang */
                char dn[32];
                reps[m].st =
                    dt_err_set(&reps[m].err, DT_ENOMEM, "replica %s: cannot start its thread",
                               dev_name(spec, m, dn, sizeof dn));
                dt_comm_hier_abort(hier, reps[m].err.msg);
            }
        replica_fit(&reps[0]);
        for (int m = 1; m < G; m++)
            if (th && up && up[m])
                pthread_join(th[m], NULL);
        free(th);
        free(up);
        if (ring0)
            t->hooks.comm(t->hooks.ctx, NULL);
        if (t->hooks.hier)
            t->hooks.hier(t->hooks.ctx, NULL);
        /* The cause, not its echo: a sibling's abort reaches the others as DT_ECANCELED. */
        int bad = -1;
        for (int m = 0; m < G; m++)
            if (reps[m].st != DT_OK &&
                (bad < 0 || (reps[bad].st == DT_ECANCELED && reps[m].st != DT_ECANCELED)))
                bad = m;
        if (bad >= 0) {
            st = reps[bad].st;
            err = reps[bad].err;
        }
        for (int m = 1; st == DT_OK && m < G; m++)
            if (reps[m].res.weights_hash != reps[0].res.weights_hash) {
                char d0[32], dm[32];
                st = dt_err_set(
                    &err, DT_EPROTO,
                    "replicas diverged: %s ends with weights %016llx, %s with %016llx",
                    dev_name(spec, 0, d0, sizeof d0), (unsigned long long)reps[0].res.weights_hash,
                    dev_name(spec, m, dm, sizeof dm), (unsigned long long)reps[m].res.weights_hash);
            }
        if (st == DT_OK)
            snprintf(hash, sizeof hash, "%016llx", (unsigned long long)reps[0].res.weights_hash);
        if (st == DT_ECANCELED && atomic_load(t->cancel))
            dt_err_set(&err, DT_ECANCELED, "cancelled: %s", t->cancel_reason);
    }
    dt_comm_hier_free(hier);
    dt_comm_local_free(local);
    dt_nn_gpu_clique_free(clique);
    for (int m = 0; reps && m < G; m++) {
        const dt_nn_ops *ops;
        dt_err berr = {0};
        /* a replica's memory is freed from its device */
        if (reps[m].tr && spec->gpu && device_bind(spec, m, &ops, &berr) != DT_OK)
            DT_WARN("jobs", "%s", berr.msg);
        dt_train_free(reps[m].tr);
        free(reps[m].hc.pending);
    }
    device_unbind(spec);
    h->finished(h->ctx, st, st == DT_OK ? "" : err.msg, hash,
                st == DT_OK && reps ? reps[0].res.final_path : "",
                st == DT_OK && reps ? reps[0].res.stop_reason : "");
    free(reps);
}

/* --- the trainer thread -------------------------------------------------------------------------
 */

void dt__service_trainer_main(const trainer_task *t)
{
    const trainer_hooks *h = &t->hooks;
    dt_err err = {0};
    dt_jobspec spec;
    dt_trainer *tr = NULL;
    dt_train_info info = {0};
    progress_ctx pc = {.h = h};
    dt_status st =
        dt__service_parse_spec(t->spec_json, t->spec_len, t->data_root, t->state_dir, &spec, &err);
    bool have_spec = st == DT_OK;
    if (st == DT_OK && spec.ndevices > 1) {
        replicas_main(t, &spec, &pc);
        dt_jobspec_destroy(&spec);
        return;
    }
    char tb_run[DT_JOBSPEC_NAME_LEN + 32];
    if (st == DT_OK) {
        tb_run_name(t, &spec, tb_run, sizeof tb_run);
        dt_train_opts o = dt_train_opts_default();
        o.rank = t->rank;
        o.world = t->world;
        o.out_dir = t->rank == 0 ? t->job_dir : NULL;
        o.tb_run = tb_run;
        o.cancel = t->cancel;
        o.resume = t->resume && t->rank == 0;
        o.pulse = t->pulse;
        if (t->hang_ms)
            atomic_store(t->hang_ms, (int64_t)spec.hang_timeout_s * 1000);
        if (t->rank == 0)
            o.progress =
                (dt_train_progress){&pc, on_epoch_begin, on_step_end, on_epoch_end, on_resumed};
        st = device_bind(&spec, 0, &o.ops, &err);
        if (st == DT_OK)
            st = dt_train_new(&spec, &o, &tr, &err);
    }
    if (st == DT_OK)
        dt_train_get_info(tr, &info);
    dt_err perr = {0};
    dt_status pst = h->prepared(h->ctx, st == DT_OK, err.msg, info.local_examples,
                                info.params_total, (uint64_t)info.steps_per_epoch, &perr);
    char hash[32] = "";
    dt_train_result res;
    memset(&res, 0, sizeof res);
    if (st == DT_OK && pst != DT_OK) {
        st = pst;
        err = perr;
    }
    if (st == DT_OK) {
        dt_train_comm comm;
        st = comm_open(t, t->rank == 0 ? &pc.wire : NULL, &comm, &err);
        if (st == DT_OK) {
            st = dt_train_fit(tr, &comm, &res, &err);
            /* a cancel stops every rank after the same step: nothing to tell */
            comm_close(t, &comm, st == DT_OK || st == DT_ECANCELED ? NULL : err.msg);
        }
        if (st == DT_OK)
            snprintf(hash, sizeof hash, "%016llx", (unsigned long long)res.weights_hash);
        if (st == DT_ECANCELED && atomic_load(t->cancel))
            dt_err_set(&err, DT_ECANCELED, "cancelled: %s", t->cancel_reason);
    }
    dt_train_free(tr);
    if (have_spec) {
        device_unbind(&spec);
        dt_jobspec_destroy(&spec);
    }
    h->finished(h->ctx, st, st == DT_OK ? "" : err.msg, hash, st == DT_OK ? res.final_path : "",
                st == DT_OK ? res.stop_reason : "");
}
