/*
 * hier.c - the hierarchical all-reduce: in-host reduce-scatter, G host rings on the shards,
 * in-host all-gather (see comm.h, "the hierarchical all-reduce").
 *
 * Who runs what: the reduce-scatter runs on the in-host comm's engine thread; its then-hook, on
 * that thread, starts ring i on member i's shard (queued on the hub's comm thread, which sends
 * and reduces); the member's own thread waits for its ring in dt_comm_hier_wait and then joins
 * the in-host all-gather. So the in-host reduction and the wire both overlap what the members do
 * between start and wait, and the members meet again only in the all-gather.
 */
#include "comm/comm.h"

#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each stage waits a little longer than the one before it may take to fail, so the member that
 * sees a failure first is the one nearest its cause, and its error (not "a sibling did not come")
 * reaches everyone: a replica that never starts fails its host's reduce-scatter at timeout_ms;
 * that host then aborts its rings, and the other hosts' rings, which wait timeout_ms +
 * RING_GRACE_MS, get the notice naming it first; a member late to the all-gather is stuck on its
 * ring, which fails before the all-gather's timeout_ms + GATHER_GRACE_MS. */
#define RING_GRACE_MS   1000
#define GATHER_GRACE_MS 2000

struct dt_comm_hier {
    dt_comm_local *local;
    int G;
    void (*on_abort)(void *arg); /* dt_comm_hier_on_abort's, or NULL */
    void *on_abort_arg;
    dt_comm *ring[DT_COMM_LOCAL_MAX]; /* by local replica index; NULL when there is one host */
};

struct dt_comm_hier_req {
    dt_comm_hier *h;
    int member;
    float *buf;
    size_t n;
    int64_t timeout_ms;
    dt_comm_local_req *rs;
    /* Set by the then-hook on the engine thread, read by the member once the reduce-scatter's
     * wait has returned (the in-host comm's lock orders the two). */
    dt_comm_req *ring;
    dt_status ring_st;
    char ring_msg[DT_ERR_LEN];
};

/* Ring j's session: distinct per j and from the base, the same on every host (splitmix64). */
static uint64_t ring_session(uint64_t base, int j)
{
    uint64_t z = base + 0x9e3779b97f4a7c15ull * (uint64_t)(j + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

dt_status dt_comm_hier_new(const dt_comm_hier_opts *opts, dt_comm_hier **out, dt_err *err)
{
    *out = NULL;
    if (!opts || !opts->local)
        return dt_err_set(err, DT_EINVAL, "hierarchical comm: no in-host comm given");
    dt_comm_hier *h = calloc(1, sizeof *h);
    if (!h)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    h->local = opts->local;
    h->G = dt_comm_local_members(opts->local);
    if (opts->ring.world > 1) {
        dt_comm_opts o = opts->ring;
        if (!o.streams)
            o.streams = DT_COMM_STREAMS / h->G > 0 ? DT_COMM_STREAMS / h->G : 1;
        for (int j = 0; j < h->G; j++) {
            o.session = ring_session(opts->ring.session, j);
            dt_status st = dt_comm_new(&o, &h->ring[j], err);
            if (st != DT_OK) {
                dt_comm_hier_free(h);
                return st;
            }
        }
    }
    *out = h;
    return DT_OK;
}

void dt_comm_hier_free(dt_comm_hier *h)
{
    if (!h)
        return;
    for (int j = 0; j < h->G; j++)
        dt_comm_free(h->ring[j]);
    free(h);
}

/* Engine thread, once member req->member's shard holds its host's sum: start its ring. */
static void start_ring(void *ctx, dt_status st)
{
    dt_comm_hier_req *q = ctx;
    if (st != DT_OK)
        return;
    size_t off, len;
    dt_comm_local_shard(q->h->local, q->n, q->member, &off, &len);
    dt_err e = {0};
    q->ring_st = dt_comm_allreduce_start(q->h->ring[q->member], q->buf + off, len, DT_COMM_SUM,
                                         DT_COMM_F32, q->timeout_ms + RING_GRACE_MS, &q->ring, &e);
    if (q->ring_st != DT_OK)
        snprintf(q->ring_msg, sizeof q->ring_msg, "%s", e.msg);
}

dt_status dt_comm_hier_allreduce_start(dt_comm_hier *h, int member, float *buf, size_t n,
                                       int64_t timeout_ms, dt_comm_hier_req **req, dt_err *err)
{
    *req = NULL;
    dt_comm_hier_req *q = calloc(1, sizeof *q);
    if (!q)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    *q = (dt_comm_hier_req){.h = h, .member = member, .buf = buf, .n = n, .timeout_ms = timeout_ms};
    /* One host: the in-host all-reduce is the whole job (one pass instead of two). */
    dt_status st = h->ring[0] ? dt_comm_local_start(h->local, member, DT_COMM_LOCAL_REDUCE_SCATTER,
                                                    buf, n, timeout_ms, start_ring, q, &q->rs, err)
                              : dt_comm_local_start(h->local, member, DT_COMM_LOCAL_ALLREDUCE, buf,
                                                    n, timeout_ms, NULL, NULL, &q->rs, err);
    if (st != DT_OK) {
        free(q);
        return st;
    }
    *req = q;
    return DT_OK;
}

dt_status dt_comm_hier_wait(dt_comm_hier_req *q, int64_t timeout_ms, dt_err *err)
{
    dt_comm_hier *h = q->h;
    dt_status st = dt_comm_local_wait(q->rs, timeout_ms, err);
    if (st == DT_OK && h->ring[0]) {
        if (q->ring_st != DT_OK) {
            st = dt_err_set(err, q->ring_st, "%s", q->ring_msg);
        } else {
            st = dt_comm_wait(q->ring, timeout_ms + RING_GRACE_MS, err);
            q->ring = NULL;
        }
        if (st != DT_OK) /* siblings wait for this member in the all-gather: release them */
            dt_comm_local_abort(h->local, err->msg);
        else
            st = dt_comm_local_run(h->local, q->member, DT_COMM_LOCAL_ALLGATHER, q->buf, q->n,
                                   timeout_ms + GATHER_GRACE_MS, err);
    }
    if (st != DT_OK && h->ring[0]) {
        /* The other hosts learn it from the rings' notices rather than from a deadline. */
        for (int j = 0; j < h->G; j++)
            dt_comm_abort(h->ring[j], err->msg);
    }
    free(q);
    return st;
}

dt_status dt_comm_hier_allreduce(dt_comm_hier *h, int member, float *buf, size_t n,
                                 int64_t timeout_ms, dt_err *err)
{
    dt_comm_hier_req *q;
    DT_TRY(dt_comm_hier_allreduce_start(h, member, buf, n, timeout_ms, &q, err));
    return dt_comm_hier_wait(q, timeout_ms, err);
}

dt_status dt_comm_hier_broadcast(dt_comm_hier *h, int member, void *buf, size_t bytes, int root,
                                 int64_t timeout_ms, dt_err *err)
{
    int hosts = h->ring[0] ? dt_comm_world(h->ring[0]) : 1;
    if (root < 0 || root >= hosts * h->G)
        return dt_err_set(err, DT_EINVAL, "hierarchical comm: broadcast root %d of %d replicas",
                          root, hosts * h->G);
    int rhost = root / h->G, rmember = root % h->G;
    dt_status st = DT_OK;
    /* 1. the root's member index on every host gets it over its ring; */
    if (h->ring[0] && member == rmember)
        st = dt_comm_broadcast(h->ring[member], buf, bytes, rhost, timeout_ms, err);
    if (st != DT_OK) {
        dt_comm_local_abort(h->local, err->msg); /* its siblings wait in step 2 */
        return st;
    }
    /* 2. and copies it to its siblings. */
    st = dt_comm_local_broadcast(h->local, member, buf, bytes, rmember, timeout_ms, err);
    if (st != DT_OK && h->ring[0])
        for (int j = 0; j < h->G; j++)
            dt_comm_abort(h->ring[j], err->msg);
    return st;
}

void dt_comm_hier_busy_ns(dt_comm_hier *h, int member, uint64_t *in_host, uint64_t *ring)
{
    *in_host = dt_comm_local_busy_ns(h->local);
    *ring = member >= 0 && member < h->G && h->ring[member] ? dt_comm_busy_ns(h->ring[member]) : 0;
}

int64_t dt_comm_hier_idle_ms(dt_comm_hier *h, int member)
{
    int64_t a = dt_comm_local_idle_ms(h->local, member);
    if (a < 0 || member >= h->G || !h->ring[member])
        return a;
    int64_t b = dt_comm_idle_ms(h->ring[member]);
    return b < 0 ? -1 : a < b ? a : b;
}

dt_comm *dt_comm_hier_ring(dt_comm_hier *h, int j)
{
    return j >= 0 && j < h->G ? h->ring[j] : NULL;
}

void dt_comm_hier_on_abort(dt_comm_hier *h, void (*fn)(void *arg), void *arg)
{
    h->on_abort = fn;
    h->on_abort_arg = arg;
}

void dt_comm_hier_abort(dt_comm_hier *h, const char *why)
{
    if (h->on_abort)
        h->on_abort(h->on_abort_arg);
    dt_comm_local_abort(h->local, why);
    for (int j = 0; j < h->G; j++)
        if (h->ring[j])
            dt_comm_abort(h->ring[j], why);
}
