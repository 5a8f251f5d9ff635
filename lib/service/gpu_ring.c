/* gpu_ring.c - the hierarchical all-reduce of GPU replicas across hosts (service_internal.h).
 *
 * A gradient bucket in replica m's device memory is padded to G equal shards, reduce-scattered
 * among the host's G GPUs by NCCL (member m's shard m becomes its host's sum), shard m goes to
 * a pinned host buffer and around host ring m (the hierarchical comm's ring of local index m,
 * across the hosts), comes back, and NCCL all-gathers the shards. So each byte of a host's
 * gradients crosses PCIe once and the wire once per host, where the host-memory path moved the
 * whole bucket through every GPU's PCIe link and reduced it on the CPU. Every replica ends with
 * the same bits: each element is summed by NCCL in its host (the same order on every member),
 * then around its ring in rank order, then copied.
 *
 * Start runs on the replica's thread from fit's grad-ready hook: it queues the pad copy and the
 * reduce-scatter behind backward's kernels, waits for the shard's download (the ring reads host
 * memory), and starts the ring, which then runs on the comm's thread while backward goes on.
 * Wait ends the ring and queues the upload, the all-gather and the copy back, so the update
 * that follows on the stream reads the sums. Buffers grow on the first steps and are kept.
 */
#include "service/service_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot {
    float *pad;  /* device, cap floats: the bucket padded to G shards */
    float *host; /* pinned, cap / G floats: this member's shard */
    size_t cap;
    float *buf; /* the bucket (borrowed until the wait) */
    size_t n, shard;
    dt_comm_req *req; /* the ring's, while the bucket is in flight (the slot is taken) */
} slot;

struct dt__gpu_ring {
    dt_nn_gpu_clique *clique;
    int member, G;
    dt_comm *ring;
    const dt_nn_ops *ops;
    slot **s; /* one per bucket in flight at once, each allocated once (requests point at it) */
    size_t ns;
};

dt_status dt__gpu_ring_new(dt_nn_gpu_clique *clique, int member, int G, dt_comm *ring,
                           const dt_nn_ops *ops, dt__gpu_ring **out, dt_err *err)
{
    *out = NULL;
    if (!clique || !ring || !ops || G < 1 || member < 0 || member >= G)
        return dt_err_set(err, DT_EINVAL, "GPU ring: member %d of %d without clique or ring",
                          member, G);
    dt__gpu_ring *g = calloc(1, sizeof *g);
    if (!g)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    *g = (dt__gpu_ring){.clique = clique, .member = member, .G = G, .ring = ring, .ops = ops};
    *out = g;
    return DT_OK;
}

void dt__gpu_ring_free(dt__gpu_ring *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->ns; i++) {
        slot *s = g->s[i];
        if (s->req) { /* started, never waited for: fit failed, and the ring was aborted */
            dt_err e = {0};
            dt_comm_wait(s->req, 1000, &e);
        }
        if (s->pad)
            g->ops->free(s->pad);
        if (s->host)
            g->ops->host_free(s->host);
        free(s);
    }
    free(g->s);
    free(g);
}

bool dt__gpu_ring_owns(const dt__gpu_ring *g, const void *req)
{
    for (size_t i = 0; g && i < g->ns; i++)
        if (g->s[i] == req)
            return true;
    return false;
}

/* A free slot with room for cap floats (a new one when every slot is in flight). */
static slot *take(dt__gpu_ring *g, size_t cap, dt_err *err)
{
    slot *s = NULL;
    for (size_t i = 0; i < g->ns && !s; i++)
        if (!g->s[i]->req)
            s = g->s[i];
    if (!s) {
        slot **p = realloc(g->s, (g->ns + 1) * sizeof *p);
        if (p)
            g->s = p;
        if (!p || !(s = calloc(1, sizeof *s))) {
            dt_err_set(err, DT_ENOMEM, "out of memory");
            return NULL;
        }
        g->s[g->ns++] = s;
    }
    if (s->cap < cap) {
        const dt_nn_ops *o = g->ops;
        if (s->pad)
            o->free(s->pad);
        if (s->host)
            o->host_free(s->host);
        s->cap = 0;
        s->pad = o->alloc(cap * sizeof(float));
        s->host = o->host_alloc(cap / (size_t)g->G * sizeof(float));
        if (!s->pad || !s->host) {
            dt_err_set(err, DT_ENOMEM, "%s: out of memory for a %zu-float bucket's shards", o->name,
                       cap);
            return NULL;
        }
        s->cap = cap;
    }
    return s;
}

dt_status dt__gpu_ring_start(dt__gpu_ring *g, float *buf, size_t n, int64_t timeout_ms, void **req,
                             dt_err *err)
{
    *req = NULL;
    size_t G = (size_t)g->G, shard = (n + G - 1) / G;
    slot *s = take(g, shard * G > 0 ? shard * G : G, err);
    if (!s)
        return DT_ENOMEM;
    const dt_nn_ops *o = g->ops;
    /* queued behind backward's kernels on the replica's stream; the reduce-scatter forks from
     * it and is joined before the shard's download */
    o->copy(n, buf, s->pad, false);
    if (shard * G > n)
        o->fill(shard * G - n, 0.0f, s->pad + n);
    float *mine = s->pad + (size_t)g->member * shard;
    if (shard > 0) {
        DT_TRY(dt_nn_gpu_clique_reduce_scatter(g->clique, g->member, s->pad, shard, err));
        DT_TRY(dt_nn_gpu_clique_join(g->clique, g->member, err));
        o->download(s->host, mine, shard * sizeof(float)); /* waits: the ring reads host memory */
    }
    DT_TRY(dt_comm_allreduce_start(g->ring, s->host, shard, DT_COMM_SUM, DT_COMM_F32, timeout_ms,
                                   &s->req, err));
    s->buf = buf;
    s->n = n;
    s->shard = shard;
    *req = s;
    return DT_OK;
}

dt_status dt__gpu_ring_wait(dt__gpu_ring *g, void *req, int64_t timeout_ms, dt_err *err)
{
    slot *s = req;
    dt_comm_req *rq = s->req;
    s->req = NULL;
    DT_TRY(dt_comm_wait(rq, timeout_ms, err));
    if (s->shard == 0)
        return DT_OK;
    const dt_nn_ops *o = g->ops;
    o->upload(s->pad + (size_t)g->member * s->shard, s->host, s->shard * sizeof(float));
    DT_TRY(dt_nn_gpu_clique_all_gather(g->clique, g->member, s->pad, s->shard, err));
    DT_TRY(dt_nn_gpu_clique_join(g->clique, g->member, err));
    o->copy(s->n, s->pad, s->buf, false);
    return DT_OK;
}
