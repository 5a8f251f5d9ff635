/*
 * ring.c - the hub, the communicator and the ring collectives (see comm.h for the design).
 *
 * Locks: hub->mu guards the hub's list of comms; c->mu guards everything of a comm (its streams,
 * its queue of requests, the progress of the active one); c->ref_mu guards only the counts of
 * zero-copy slices gRPC still holds (their release runs on any gRPC thread). Order: hub->mu
 * before c->mu; ref_mu is a leaf. Progress ("pump") runs under c->mu on the comm thread after
 * each stream event, and on the caller's thread when it queues a request.
 */
#include "comm/comm.h"
#include "comm/comm_internal.h"

#include "config/tfconfig.h"
#include "core/clock.h"
#include "core/limits.h"
#include "core/log.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STREAMS    16
#define TICK_MS        50
#define LINK_GRACE_MS  250 /* a broken link waits this long for a notice that names the cause */
#define CLOSE_WAIT_MS  2000
#define SLICE_WAIT_MS  5000
#define NOTICE_TIMEOUT 2000
#define NAME_LEN       64
/* Smallest piece a step is split into for the streams. Each message costs wakeups and context
 * switches, which dominate once the CPUs are busy: against a 64 KiB floor, 512 KiB made a 1 MB
 * all-reduce 0.75 ms rather than 1.00 (R=2, loopback, 2 CPUs) and 4 MB at R=4 8.9 ms rather
 * than 11.9, with 24-29% less CPU. */
#define MIN_SPLIT (512u << 10)
/* A rank sends message m only once it has received m - lead + 1 messages of the same collective
 * (c->lead). gRPC's windows (BDP probing, rpc/common.c) let a sender push every chunk it has
 * into the sockets; when ranks share a host's CPUs, a receiver then reads them long after they
 * were written, from memory rather than cache. The ring's own progress is the gate: every rank
 * runs the same plan, so what this rank has received is about what its successor has received
 * from it. Between ranks on one host the lead is 1: 16 MB at R = 2, 1 MiB chunks, no gate
 * 2.0-2.4 GB/s busbw, lead 4 2.4, 2 2.6, 1 2.8; 512 KiB chunks at R = 4, lead 4 0.88, 2 1.02,
 * 1 1.25. Across a network a lead of 1 would leave the wire idle for a hop's latency per chunk
 * (a 512 KiB chunk is 0.42 ms at 10 Gbit/s), so there it is one chunk per stream. */
#define LEAD_LOCAL 1
/* All-reduces whose R buffers together fit here gather rather than reduce-scatter (start_req):
 * up to 256 KiB at R = 2, 128 KiB at R = 4. */
#define GATHER_MAX_BYTES (512u << 10)

typedef enum req_kind { REQ_ALLREDUCE, REQ_BROADCAST, REQ_ALLGATHER } req_kind;
typedef enum recv_op { RECV_ADD, RECV_COPY } recv_op;

typedef struct ring_stream {
    dt_comm *c;
    int out; /* 1: ours, to the next rank; 0: the previous rank's, to us */
    int k;
    dt_rpc_stream *s;
    dt_rpc_channel *ch; /* out streams: a dedicated connection each */
    int ready;          /* out: accepted; in: attached */
    int closed;
    int send_busy, recv_busy;
    size_t recv_m; /* message index of the receive in flight */
    int64_t retry_at_ms;
    char last_error[1024];
} ring_stream;

struct dt_comm_req {
    dt_comm *c;
    req_kind kind;
    uint8_t *buf;
    size_t n;        /* elements of buf: floats (all-reduce) or bytes */
    size_t esz, wsz; /* element size in buf, on the wire */
    dt_comm_op op;
    dt_comm_wire wire;
    int root;
    int64_t deadline_ms, timeout_ms;
    uint64_t start_ns; /* when it started to run (dt_comm_busy_ns) */
    const char *what;
    /* plan */
    int started, done;
    int nsteps;
    size_t kc, nmsg;
    int has_send, has_recv, send_dep; /* send_dep: -1 none, else m - send_dep must be received */
    size_t next_send[MAX_STREAMS], next_recv[MAX_STREAMS];
    size_t sends_done, recvs_done;
    uint8_t *recvd;
    uint16_t *stage; /* 16-bit wire staging */
    float *gather;   /* small all-reduces: every rank's buffer, by rank (see start_req) */
    int slices;      /* zero-copy sends gRPC still holds (ref_mu) */
    dt_status st;
    char msg[1024];
    dt_comm_req *next;
};

struct dt_comm {
    dt_comm_hub *hub;
    int rank, world, nstreams;
    size_t chunk, lead;
    uint64_t session;
    char **addr, **name;
    char *token;
    dt_rpc_channel **notice_ch; /* by rank, lazily connected */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t ref_mu;
    pthread_cond_t ref_cv;
    ring_stream out[MAX_STREAMS], in[MAX_STREAMS];
    dt_comm_req *head, *tail;
    int broken, closing;
    char reason[1024];
    int pending;
    int64_t pending_at;
    char pending_reason[1024];
    /* When the queue last emptied (every collective finished), -1 while one is queued; atomic
     * so the daemon's watchdog reads it without the lock a frozen trainer might hold. */
    _Atomic int64_t idle_since_ms;
    /* The collectives' running time so far (start to end, queueing left out): each runs alone,
     * so this is the time the comm has been busy (dt_comm_busy_ns). */
    _Atomic uint64_t busy_ns;
    dt_comm *hub_next;
};

struct dt_comm_hub {
    dt_rpc_streamq *q;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dt_comm *comms;
    uint64_t epoch; /* callbacks finished; dt_comm_free waits on it */
};

static int64_t now_ms(void)
{
    return (int64_t)dt_now_ms();
}

static const char *who(const dt_comm *c, int rank, char *buf, size_t n)
{
    snprintf(buf, n, "%s at %s", c->name[rank], c->addr[rank]);
    return buf;
}

static int next_rank(const dt_comm *c)
{
    return (c->rank + 1) % c->world;
}

static int prev_rank(const dt_comm *c)
{
    return (c->rank + c->world - 1) % c->world;
}

/* --- failure --------------------------------------------------------------------------------- */

static void send_notices(dt_comm *c, const char *reason);

static void req_finish(dt_comm_req *r, dt_status st, const char *msg)
{
    if (r->done)
        return;
    r->done = 1;
    if (r->started)
        atomic_fetch_add(&r->c->busy_ns, dt_now_ns() - r->start_ns);
    r->st = st;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
}

/* Poisons c with reason (c->mu held): fails every request, tells the others when notify, and
 * cancels the streams so gRPC lets go of the callers' buffers. */
static void comm_fail(dt_comm *c, dt_status st, const char *reason, int notify)
{
    if (c->broken)
        return;
    c->broken = 1;
    snprintf(c->reason, sizeof c->reason, "%s", reason);
    DT_WARN("comm", "session %016" PRIx64 ": %s", c->session, reason);
    for (dt_comm_req *r = c->head; r; r = r->next)
        req_finish(r, st, reason);
    c->head = c->tail = NULL;
    atomic_store(&c->idle_since_ms, now_ms());
    if (notify)
        send_notices(c, reason);
    /* Release, not just cancel: gRPC keeps a stream's unsent bytes (slices of the caller's
     * buffer) until the call itself is gone, and the waiter waits for those. */
    for (int k = 0; k < MAX_STREAMS; k++) {
        ring_stream *o = &c->out[k], *i = &c->in[k];
        dt_rpc_stream_release(o->s);
        dt_rpc_stream_release(i->s);
        o->s = i->s = NULL;
        o->send_busy = o->recv_busy = i->send_busy = i->recv_busy = 0;
    }
    pthread_cond_broadcast(&c->cv);
}

static void link_broken(dt_comm *c, ring_stream *rs, const char *detail)
{
    if (c->broken || c->closing || c->pending)
        return;
    char w[NAME_LEN + DT_MAX_ADDRESS];
    int peer = rs->out ? next_rank(c) : prev_rank(c);
    snprintf(c->pending_reason, sizeof c->pending_reason, "%s: lost the ring link %s %s (%s)",
             c->name[c->rank], rs->out ? "to" : "from", who(c, peer, w, sizeof w),
             detail && *detail ? detail : "stream ended");
    c->pending = 1;
    c->pending_at = now_ms();
}

/* --- the plan of a collective ----------------------------------------------------------------- */

/* Block b of R blocks of n elements: [n*b/R, n*(b+1)/R). */
static void block(size_t n, int parts, size_t b, size_t *off, size_t *len)
{
    size_t s = (size_t)((unsigned __int128)n * b / (unsigned)parts);
    size_t e = (size_t)((unsigned __int128)n * (b + 1) / (unsigned)parts);
    *off = s;
    *len = e - s;
}

static int mod(int a, int r)
{
    return ((a % r) + r) % r;
}

/* The region (elements of buf) message m sends (send = 1) or receives, and the receive's op. */
static void region(const dt_comm_req *r, size_t m, int send, size_t *off, size_t *len, recv_op *op)
{
    const dt_comm *c = r->c;
    int R = c->world, me = c->rank;
    int t = (int)(m / r->kc);
    size_t j = m % r->kc, boff = 0, blen = 0;
    int b = 0;
    *op = RECV_COPY;
    switch (r->kind) {
    case REQ_ALLREDUCE:
        if (r->gather) {
            b = send ? mod(me - t, R) : mod(me - t - 1, R);
            boff = r->n * (size_t)b;
            blen = r->n;
            break;
        }
        if (t < R - 1) {
            b = send ? mod(me - t, R) : mod(me - t - 1, R);
            *op = RECV_ADD;
        } else {
            int u = t - (R - 1);
            b = send ? mod(me + 1 - u, R) : mod(me - u, R);
        }
        block(r->n, R, (size_t)b, &boff, &blen);
        break;
    case REQ_ALLGATHER: {
        size_t per = r->n / (size_t)R;
        b = send ? mod(me - t, R) : mod(me - t - 1, R);
        boff = per * (size_t)b;
        blen = per;
        break;
    }
    case REQ_BROADCAST:
        boff = 0;
        blen = r->n;
        break;
    }
    size_t coff, clen;
    block(blen, (int)r->kc, j, &coff, &clen);
    *off = boff + coff;
    *len = clen;
}

static void plan(dt_comm_req *r)
{
    dt_comm *c = r->c;
    int R = c->world;
    size_t per_step = 0;
    r->has_send = r->has_recv = 1;
    r->send_dep = 0;
    switch (r->kind) {
    case REQ_ALLREDUCE:
        r->nsteps = r->gather ? R - 1 : 2 * (R - 1);
        per_step = r->gather ? r->n * r->wsz : (r->n + (size_t)R - 1) / (size_t)R * r->wsz;
        break;
    case REQ_ALLGATHER:
        r->nsteps = R - 1;
        per_step = r->n / (size_t)R;
        break;
    case REQ_BROADCAST: {
        int pos = mod(c->rank - r->root, R);
        r->nsteps = 1;
        per_step = r->n;
        r->has_recv = pos > 0;
        r->has_send = pos < R - 1;
        r->send_dep = r->has_recv ? 0 : -1;
        break;
    }
    }
    /* Chunks of at most c->chunk bytes, split so that every stream has one per step (mid sizes
     * would otherwise move one unpipelined message per step), but not below MIN_SPLIT. */
    size_t chunk = c->chunk, spread = per_step / (size_t)c->nstreams;
    size_t floor_b = c->chunk < MIN_SPLIT ? c->chunk : MIN_SPLIT;
    if (spread < chunk)
        chunk = spread > floor_b ? spread : floor_b;
    r->kc = per_step / chunk + (per_step % chunk != 0);
    if (r->kc == 0)
        r->kc = 1;
    r->nmsg = (size_t)r->nsteps * r->kc;
    if (r->kind != REQ_BROADCAST)
        r->send_dep = (int)r->kc; /* step t sends what step t-1 received */
    for (int k = 0; k < c->nstreams; k++)
        r->next_send[k] = r->next_recv[k] = (size_t)k;
}

/* --- sending and receiving ------------------------------------------------------------------- */

static void slice_released(void *arg)
{
    dt_comm_req *r = arg;
    dt_comm *c = r->c;
    pthread_mutex_lock(&c->ref_mu);
    if (--r->slices == 0)
        pthread_cond_broadcast(&c->ref_cv);
    pthread_mutex_unlock(&c->ref_mu);
}

static void to_wire(const dt_comm_req *r, size_t off, size_t len)
{
    const float *src = (const float *)r->buf + off;
    uint16_t *dst = r->stage + off;
    if (r->wire == DT_COMM_BF16)
        for (size_t i = 0; i < len; i++)
            dst[i] = dt__f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < len; i++)
            dst[i] = dt__f32_to_f16(src[i]);
}

/* Applies n whole wire elements at p to buf elements [at, at + n). */
static void apply(dt_comm_req *r, recv_op op, size_t at, const uint8_t *p, size_t n)
{
    if (r->kind != REQ_ALLREDUCE) {
        memcpy(r->buf + at, p, n);
        return;
    }
    if (r->gather) {
        memcpy(r->gather + at, p, n * 4);
        return;
    }
    float *d = (float *)r->buf + at;
    if (r->wire == DT_COMM_F32) {
        if (op == RECV_COPY) {
            memcpy(d, p, n * 4);
        } else {
            /* Blocks of 16 through a local copy: the slice need not be aligned, and the
             * fixed-size inner loop is vectorised at -O2. */
            size_t i = 0;
            for (; i + 16 <= n; i += 16) {
                float v[16];
                memcpy(v, p + 4 * i, sizeof v);
                for (int k = 0; k < 16; k++)
                    d[i + k] += v[k];
            }
            for (; i < n; i++) {
                float v;
                memcpy(&v, p + 4 * i, 4);
                d[i] += v;
            }
        }
        return;
    }
    /* One loop per case, so each is a straight vectorisable loop. */
    if (r->wire == DT_COMM_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            d[i] = op == RECV_COPY ? dt__bf16_to_f32(h) : d[i] + dt__bf16_to_f32(h);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            d[i] = op == RECV_COPY ? dt__f16_to_f32(h) : d[i] + dt__f16_to_f32(h);
        }
    }
}

/* The last reduce-scatter step made this chunk final: MEAN, then the wire's rounding, so the
 * owner keeps exactly what the others will receive. */
static void finalize(dt_comm_req *r, size_t off, size_t len)
{
    float *d = (float *)r->buf + off;
    if (r->op == DT_COMM_MEAN) {
        float R = (float)r->c->world;
        for (size_t i = 0; i < len; i++)
            d[i] /= R;
    }
    if (r->wire == DT_COMM_BF16)
        for (size_t i = 0; i < len; i++)
            d[i] = dt__bf16_to_f32(dt__f32_to_bf16(d[i]));
    else if (r->wire == DT_COMM_F16)
        for (size_t i = 0; i < len; i++)
            d[i] = dt__f16_to_f32(dt__f32_to_f16(d[i]));
}

/* Reduces or copies a received message straight from its slices; false on a size mismatch. */
static bool consume(dt_comm_req *r, size_t m, dt_rpc_msg *msg)
{
    size_t off, len;
    recv_op op;
    region(r, m, 0, &off, &len, &op);
    if (dt_rpc_msg_len(msg) != len * r->wsz)
        return false;
    uint8_t carry[4];
    size_t nc = 0, at = off;
    const uint8_t *p;
    size_t sl;
    while (dt_rpc_msg_next(msg, &p, &sl)) {
        if (nc) { /* an element split across slices */
            size_t take = r->wsz - nc < sl ? r->wsz - nc : sl;
            memcpy(carry + nc, p, take);
            nc += take;
            p += take;
            sl -= take;
            if (nc < r->wsz)
                continue; /* this slice ended inside the element too */
            apply(r, op, at++, carry, 1);
            nc = 0;
        }
        size_t whole = sl / r->wsz;
        apply(r, op, at, p, whole);
        at += whole;
        nc = sl - whole * r->wsz;
        memcpy(carry, p + whole * r->wsz, nc);
    }
    if (r->kind == REQ_ALLREDUCE && op == RECV_ADD && (int)(m / r->kc) == r->c->world - 2)
        finalize(r, off, len);
    return true;
}

/* A gathered all-reduce is complete: its sum, in rank order, lands in the caller's buffer. */
static void sum_gathered(dt_comm_req *r)
{
    float *d = (float *)r->buf;
    const float *g = r->gather;
    size_t n = r->n;
    int R = r->c->world;
    memcpy(d, g, n * 4);
    for (int k = 1; k < R; k++)
        for (size_t i = 0; i < n; i++)
            d[i] += g[(size_t)k * n + i];
    if (r->op == DT_COMM_MEAN)
        for (size_t i = 0; i < n; i++)
            d[i] /= (float)R;
}

static bool send_msg(dt_comm_req *r, ring_stream *rs, size_t m)
{
    size_t off, len;
    recv_op op;
    region(r, m, 1, &off, &len, &op);
    const void *p;
    if (r->gather) {
        p = r->gather + off;
    } else if (r->kind == REQ_ALLREDUCE && r->wire != DT_COMM_F32) {
        to_wire(r, off, len);
        p = r->stage + off;
    } else {
        p = r->buf + off * r->esz;
    }
    if (len) {
        pthread_mutex_lock(&r->c->ref_mu);
        r->slices++;
        pthread_mutex_unlock(&r->c->ref_mu);
    }
    if (!dt_rpc_stream_send(rs->s, p, len * r->wsz, len ? slice_released : NULL, r)) {
        if (len)
            slice_released(r);
        return false;
    }
    rs->send_busy = 1;
    return true;
}

static void start_req(dt_comm_req *r);

/* Moves the active request as far as it can go (c->mu held). */
static void pump(dt_comm *c)
{
    while (c->head && !c->broken) {
        dt_comm_req *r = c->head;
        if (!r->started)
            start_req(r);
        if (!r->done) {
            for (int k = 0; k < c->nstreams; k++) {
                ring_stream *o = &c->out[k], *i = &c->in[k];
                size_t m = r->next_send[k];
                if (r->has_send && !o->send_busy && m < r->nmsg &&
                    (r->send_dep < 0 || m < (size_t)r->send_dep || r->recvd[m - r->send_dep]) &&
                    (!r->has_recv || m < r->recvs_done + c->lead)) {
                    if (!send_msg(r, o, m)) {
                        link_broken(c, o, "cannot send");
                        return;
                    }
                    r->next_send[k] = m + (size_t)c->nstreams;
                }
                m = r->next_recv[k];
                if (r->has_recv && !i->recv_busy && m < r->nmsg) {
                    if (!dt_rpc_stream_recv(i->s)) {
                        link_broken(c, i, "cannot receive");
                        return;
                    }
                    i->recv_busy = 1;
                    i->recv_m = m;
                    r->next_recv[k] = m + (size_t)c->nstreams;
                }
            }
            size_t want_s = r->has_send ? r->nmsg : 0, want_r = r->has_recv ? r->nmsg : 0;
            if (r->sends_done < want_s || r->recvs_done < want_r)
                return;
            if (r->gather)
                sum_gathered(r);
            req_finish(r, DT_OK, NULL);
        }
        c->head = r->next;
        if (!c->head) {
            c->tail = NULL;
            atomic_store(&c->idle_since_ms, now_ms());
        }
        pthread_cond_broadcast(&c->cv);
    }
}

static void start_req(dt_comm_req *r)
{
    dt_comm *c = r->c;
    r->started = 1;
    r->start_ns = dt_now_ns();
    r->deadline_ms = now_ms() + r->timeout_ms;
    if (r->n == 0 || c->world == 1) {
        if (r->kind == REQ_ALLREDUCE && r->op == DT_COMM_MEAN && c->world > 1)
            finalize(r, 0, r->n);
        req_finish(r, DT_OK, NULL);
        return;
    }
    /* A small float32 all-reduce waits on round trips, not bytes: gather every rank's buffer
     * around the ring (R - 1 steps, not 2(R - 1)) and sum them in rank order, the same
     * additions in the same order on every rank. Each rank sends R - 1 buffers rather than
     * 2(R - 1)/R of one, so this stops where bytes start to count. */
    bool gather = r->kind == REQ_ALLREDUCE && r->wire == DT_COMM_F32 &&
                  r->n * 4 * (size_t)c->world <= GATHER_MAX_BYTES;
    if (gather) {
        r->gather = malloc(r->n * 4 * (size_t)c->world);
        if (r->gather)
            memcpy(r->gather + r->n * (size_t)c->rank, r->buf, r->n * 4);
    }
    plan(r);
    r->recvd = calloc(r->nmsg, 1);
    if (r->kind == REQ_ALLREDUCE && r->wire != DT_COMM_F32)
        r->stage = malloc(r->n * 2);
    if (!r->recvd || (gather && !r->gather) ||
        (r->kind == REQ_ALLREDUCE && r->wire != DT_COMM_F32 && !r->stage))
        req_finish(r, DT_ENOMEM, "comm: out of memory planning the collective");
}

/* --- stream events (the comm thread) --------------------------------------------------------- */

static void on_data_event(dt_comm *c, ring_stream *rs, const dt_rpc_stream_event *ev)
{
    dt_comm_req *r = c->head;
    switch (ev->type) {
    case DT_RPC_STREAM_OPENED:
        if (ev->ok) {
            rs->ready = 1;
        } else {
            snprintf(rs->last_error, sizeof rs->last_error, "%s", ev->message);
            dt_rpc_stream_release(rs->s);
            rs->s = NULL;
            /* NOT_FOUND: the peer has no comm for this session yet; others may pass too. */
            rs->retry_at_ms = ev->status == DT_EAUTH ? -1 : now_ms() + 50;
        }
        pthread_cond_broadcast(&c->cv);
        return;
    case DT_RPC_STREAM_SENT:
        rs->send_busy = 0;
        if (c->broken)
            return;
        if (!ev->ok) {
            link_broken(c, rs, "send failed");
            return;
        }
        if (r && r->started && !r->done)
            r->sends_done++;
        break;
    case DT_RPC_STREAM_RECEIVED:
        rs->recv_busy = 0;
        if (c->closing && !ev->msg) { /* the previous rank closed its side: end ours */
            dt_rpc_stream_finish(rs->s);
            return;
        }
        if (c->broken) {
            dt_rpc_msg_free(ev->msg);
            return;
        }
        if (!ev->msg) {
            link_broken(c, rs, "the stream ended");
            return;
        }
        if (r && r->started && !r->done) {
            if (!consume(r, rs->recv_m, ev->msg)) {
                char w[NAME_LEN + DT_MAX_ADDRESS], m[1024];
                snprintf(m, sizeof m,
                         "%s: %s sent a message of %zu bytes where this step expects another "
                         "size: the ranks disagree on the collective (size, kind or order)",
                         c->name[c->rank], who(c, prev_rank(c), w, sizeof w),
                         dt_rpc_msg_len(ev->msg));
                dt_rpc_msg_free(ev->msg);
                comm_fail(c, DT_EPROTO, m, 1);
                return;
            }
            r->recvd[rs->recv_m] = 1;
            r->recvs_done++;
        }
        dt_rpc_msg_free(ev->msg);
        break;
    case DT_RPC_STREAM_CLOSED:
        rs->closed = 1;
        if (!c->closing && !c->broken)
            link_broken(c, rs, ev->message);
        pthread_cond_broadcast(&c->cv);
        return;
    default:
        return;
    }
    pump(c);
}

/* Why the active request r timed out: whom it waits for and how far it got. */
static void timeout_reason(const dt_comm *c, const dt_comm_req *r, int64_t ms, char *m, size_t n)
{
    char w[NAME_LEN + DT_MAX_ADDRESS];
    int waiting_in = r->has_recv && r->recvs_done < r->nmsg;
    if (!r->started || !r->nmsg) {
        snprintf(m, n, "%s: %s of %zu bytes timed out after %lld ms (queued behind others)",
                 c->name[c->rank], r->what, r->n * r->esz, (long long)ms);
        return;
    }
    snprintf(m, n,
             "%s: %s of %zu bytes timed out after %lld ms, waiting for %s (%zu of %zu messages "
             "received, %zu of %zu sent)",
             c->name[c->rank], r->what, r->n * r->esz, (long long)ms,
             who(c, waiting_in ? prev_rank(c) : next_rank(c), w, sizeof w), r->recvs_done,
             r->has_recv ? r->nmsg : 0, r->sends_done, r->has_send ? r->nmsg : 0);
}

static void on_tick(dt_comm *c)
{
    int64_t now = now_ms();
    if (c->pending && !c->broken && now - c->pending_at >= LINK_GRACE_MS)
        comm_fail(c, DT_EPEER, c->pending_reason, 1);
    dt_comm_req *r = c->head;
    if (r && r->started && !r->done && !c->broken && now > r->deadline_ms) {
        char m[1024];
        timeout_reason(c, r, r->timeout_ms, m, sizeof m);
        comm_fail(c, DT_ETIMEDOUT, m, 1);
    }
}

static dt_comm *hub_find(dt_comm_hub *h, uint64_t session)
{
    for (dt_comm *c = h->comms; c; c = c->hub_next)
        if (c->session == session)
            return c;
    return NULL;
}

static void on_incoming(dt_comm_hub *h, dt_rpc_stream *s)
{
    char sess[32], from[16], kbuf[16], kind[16], reason[900], m[512];
    if (!dt_rpc_stream_meta(s, "dt-session", sess, sizeof sess)) {
        dt_rpc_stream_reject(s, DT_EINVAL, "a ring stream needs dt-session metadata");
        return;
    }
    uint64_t session = strtoull(sess, NULL, 16);
    pthread_mutex_lock(&h->mu);
    dt_comm *c = hub_find(h, session);
    if (!c) {
        pthread_mutex_unlock(&h->mu);
        snprintf(m, sizeof m,
                 "no communicator for session %s on this daemon: it has not started this "
                 "group yet, or has already ended it",
                 sess);
        dt_rpc_stream_reject(s, DT_ENOENT, m);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (dt_rpc_stream_meta(s, "dt-kind", kind, sizeof kind) && strcmp(kind, "notice") == 0) {
        if (!dt_rpc_stream_meta(s, "dt-reason", reason, sizeof reason))
            snprintf(reason, sizeof reason, "another rank aborted the group");
        comm_fail(c, DT_EPEER, reason, 0);
        dt_rpc_stream_reject(s, DT_OK, "noted");
        goto out;
    }
    int f = dt_rpc_stream_meta(s, "dt-from", from, sizeof from) ? atoi(from) : -1;
    int k = dt_rpc_stream_meta(s, "dt-stream", kbuf, sizeof kbuf) ? atoi(kbuf) : -1;
    if (f != prev_rank(c) || k < 0 || k >= c->nstreams || c->in[k].s || c->broken) {
        snprintf(m, sizeof m,
                 "session %s: %s expects its streams from rank %d (0..%d), got rank %d "
                 "stream %d%s",
                 sess, c->name[c->rank], prev_rank(c), c->nstreams - 1, f, k,
                 c->broken ? " after the group failed" : "");
        dt_rpc_stream_reject(s, DT_EINVAL, m);
        goto out;
    }
    ring_stream *rs = &c->in[k];
    rs->s = s;
    rs->ready = 1;
    dt_rpc_stream_set_user(s, rs);
    dt_rpc_stream_accept(s);
    pthread_cond_broadcast(&c->cv);
out:
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&h->mu);
}

static void hub_on_event(void *ctx, const dt_rpc_stream_event *ev)
{
    dt_comm_hub *h = ctx;
    if (ev->type == DT_RPC_STREAM_INCOMING) {
        on_incoming(h, ev->stream);
    } else if (ev->type == DT_RPC_STREAM_TICK) {
        pthread_mutex_lock(&h->mu);
        for (dt_comm *c = h->comms; c; c = c->hub_next) {
            pthread_mutex_lock(&c->mu);
            on_tick(c);
            pthread_mutex_unlock(&c->mu);
        }
        pthread_mutex_unlock(&h->mu);
    } else if (ev->user) {
        ring_stream *rs = ev->user;
        dt_comm *c = rs->c;
        pthread_mutex_lock(&c->mu);
        if (rs->s == ev->stream) /* else released by dt_comm_free meanwhile */
            on_data_event(c, rs, ev);
        else
            dt_rpc_msg_free(ev->msg);
        pthread_mutex_unlock(&c->mu);
    } else if (ev->msg) {
        dt_rpc_msg_free(ev->msg);
    }
    pthread_mutex_lock(&h->mu);
    h->epoch++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* --- notices --------------------------------------------------------------------------------- */

static void send_notices(dt_comm *c, const char *reason)
{
    if (!c->hub)
        return;
    char clean[800], sess[32];
    size_t n = 0;
    for (const char *p = reason; *p && n + 1 < sizeof clean; p++)
        clean[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : ' ';
    clean[n] = '\0';
    snprintf(sess, sizeof sess, "%016" PRIx64, c->session);
    const char *md[] = {"dt-session", sess, "dt-kind", "notice", "dt-reason", clean, NULL};
    for (int i = 0; i < c->world; i++) {
        if (i == c->rank)
            continue;
        dt_err err = {0};
        if (!c->notice_ch[i] &&
            dt_rpc_channel_new_dedicated(c->addr[i], c->token, &c->notice_ch[i], &err) != DT_OK)
            continue;
        dt_rpc_stream *s;
        if (dt_rpc_stream_open(c->notice_ch[i], c->hub->q, DT_COMM_METHOD, md, NOTICE_TIMEOUT, NULL,
                               &s, &err) == DT_OK)
            dt_rpc_stream_detach(s);
    }
}

/* The address names this host's loopback, as the daemon's token rule reads it: the ranks share
 * CPUs. */
static bool is_loopback(const char *addr)
{
    char host[DT_MAX_ADDRESS];
    int port;
    dt_err e = {0};
    return dt_tfconfig_split_address(addr, host, sizeof host, &port, &e) == DT_OK &&
           dt_rpc_host_is_loopback(host);
}

/* --- hub ------------------------------------------------------------------------------------- */

/* gRPC reads every message into fresh slices of up to a few MiB and frees them after the reduce.
 * With glibc's defaults those blocks are mmapped or trimmed back to the kernel on free, so every
 * message paid page faults on the next read and TLB-shootdown IPIs on the unmap (measured: a
 * third of the daemon's CPU time at 1 MB, busbw / 3). Keeping freed memory in the process makes
 * the next read reuse pages that are already mapped. Process-wide, once, for daemons with a hub. */
static pthread_once_t malloc_once = PTHREAD_ONCE_INIT;

static void tune_malloc(void)
{
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's largest; bigger blocks are mmapped anyway */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

dt_status dt_comm_hub_new(dt_comm_hub **out, dt_err *err)
{
    pthread_once(&malloc_once, tune_malloc);
    dt_comm_hub *h = calloc(1, sizeof *h);
    if (!h)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (dt_rpc_streamq_new(hub_on_event, h, TICK_MS, &h->q, err) != DT_OK) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h);
        return err->code;
    }
    *out = h;
    return DT_OK;
}

dt_rpc_streamq *dt_comm_hub_streamq(dt_comm_hub *h)
{
    return h->q;
}

void dt_comm_hub_free(dt_comm_hub *h)
{
    if (!h)
        return;
    if (h->comms)
        DT_WARN("comm", "the hub is freed with communicators still open");
    dt_rpc_streamq_free(h->q);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

/* --- communicator ---------------------------------------------------------------------------- */

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

static void open_out(dt_comm *c, int k)
{
    ring_stream *rs = &c->out[k];
    dt_err err = {0};
    int nx = next_rank(c);
    if (!rs->ch && dt_rpc_channel_new_dedicated(c->addr[nx], c->token, &rs->ch, &err) != DT_OK) {
        snprintf(rs->last_error, sizeof rs->last_error, "%s", err.msg);
        rs->retry_at_ms = now_ms() + 100;
        return;
    }
    char sess[32], from[16], ks[16], world[16];
    snprintf(sess, sizeof sess, "%016" PRIx64, c->session);
    snprintf(from, sizeof from, "%d", c->rank);
    snprintf(ks, sizeof ks, "%d", k);
    snprintf(world, sizeof world, "%d", c->world);
    const char *md[] = {"dt-session", sess,       "dt-from", from, "dt-stream",
                        ks,           "dt-world", world,     NULL};
    if (dt_rpc_stream_open(rs->ch, c->hub->q, DT_COMM_METHOD, md, 0, rs, &rs->s, &err) != DT_OK) {
        rs->s = NULL;
        snprintf(rs->last_error, sizeof rs->last_error, "%s", err.msg);
        rs->retry_at_ms = now_ms() + 100;
    }
}

static dt_status connect_ring(dt_comm *c, int64_t timeout_ms, dt_err *err)
{
    int64_t deadline = now_ms() + timeout_ms;
    char w[NAME_LEN + DT_MAX_ADDRESS];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        int64_t now = now_ms();
        int outs = 0, ins = 0;
        if (c->broken) {
            dt_err_set(err, DT_EPEER, "%s", c->reason);
            goto fail;
        }
        for (int k = 0; k < c->nstreams; k++) {
            ring_stream *o = &c->out[k];
            if (!o->s && o->retry_at_ms == -1) {
                dt_err_set(err, DT_EAUTH, "%s: %s refused the ring stream: %s", c->name[c->rank],
                           who(c, next_rank(c), w, sizeof w), o->last_error);
                goto fail;
            }
            if (!o->s && now >= o->retry_at_ms)
                open_out(c, k);
            outs += o->ready;
            ins += c->in[k].ready;
        }
        if (outs == c->nstreams && ins == c->nstreams)
            break;
        if (now >= deadline) {
            if (outs < c->nstreams) {
                const char *last = "no answer";
                for (int k = 0; k < c->nstreams; k++)
                    if (c->out[k].last_error[0])
                        last = c->out[k].last_error;
                dt_err_set(err, DT_ETIMEDOUT,
                           "%s: %s did not accept the ring streams within %lld ms (last "
                           "answer: %s)",
                           c->name[c->rank], who(c, next_rank(c), w, sizeof w),
                           (long long)timeout_ms, last);
            } else {
                dt_err_set(err, DT_ETIMEDOUT,
                           "%s: %s did not connect its ring streams within %lld ms: is it "
                           "running this group (session %016" PRIx64 ")?",
                           c->name[c->rank], who(c, prev_rank(c), w, sizeof w),
                           (long long)timeout_ms, c->session);
            }
            goto fail;
        }
        timed_wait(&c->cv, &c->mu, 20);
    }
    pthread_mutex_unlock(&c->mu);
    return DT_OK;
fail:
    pthread_mutex_unlock(&c->mu);
    return err->code;
}

dt_status dt_comm_new(const dt_comm_opts *o, dt_comm **out, dt_err *err)
{
    *out = NULL;
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world || o->world > DT_MAX_CLUSTER_TASKS)
        return dt_err_set(err, DT_EINVAL, "comm: rank %d of world %d is out of range", o->rank,
                          o->world);
    if (o->world > 1 && (!o->hub || !o->addresses))
        return dt_err_set(err, DT_EINVAL,
                          "comm: a group of %d ranks needs the daemon's hub and the addresses",
                          o->world);
    dt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    c->rank = o->rank;
    c->world = o->world;
    c->session = o->session;
    c->hub = o->world > 1 ? o->hub : NULL;
    c->nstreams =
        o->streams > 0 ? (o->streams > MAX_STREAMS ? MAX_STREAMS : o->streams) : DT_COMM_STREAMS;
    c->chunk = o->chunk_bytes ? o->chunk_bytes : DT_COMM_CHUNK;
    c->chunk = (c->chunk + 3) & ~(size_t)3;
    c->token = o->token && *o->token ? strdup(o->token) : NULL;
    c->addr = calloc((size_t)o->world, sizeof *c->addr);
    c->name = calloc((size_t)o->world, sizeof *c->name);
    c->notice_ch = calloc((size_t)o->world, sizeof *c->notice_ch);
    atomic_init(&c->idle_since_ms, now_ms());
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_mutex_init(&c->ref_mu, NULL);
    pthread_cond_init(&c->ref_cv, NULL);
    if (!c->addr || !c->name || !c->notice_ch) {
        dt_comm_free(c);
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    }
    for (int i = 0; i < o->world; i++) {
        char nb[32];
        snprintf(nb, sizeof nb, "rank %d", i);
        c->addr[i] = strdup(o->addresses && o->addresses[i] ? o->addresses[i] : "local");
        c->name[i] = strdup(o->names && o->names[i] ? o->names[i] : nb);
        if (!c->addr[i] || !c->name[i]) {
            dt_comm_free(c);
            return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
        }
    }
    c->lead = is_loopback(c->addr[next_rank(c)]) ? LEAD_LOCAL : (size_t)c->nstreams;
    for (int k = 0; k < MAX_STREAMS; k++) {
        c->out[k] = (ring_stream){.c = c, .out = 1, .k = k};
        c->in[k] = (ring_stream){.c = c, .out = 0, .k = k};
    }
    if (c->world == 1) {
        *out = c;
        return DT_OK;
    }
    pthread_mutex_lock(&c->hub->mu);
    if (hub_find(c->hub, c->session)) {
        pthread_mutex_unlock(&c->hub->mu);
        c->hub = NULL;
        dt_comm_free(c);
        return dt_err_set(err, DT_EEXIST,
                          "comm: session %016" PRIx64 " is already open on this daemon",
                          o->session);
    }
    c->hub_next = c->hub->comms;
    c->hub->comms = c;
    pthread_mutex_unlock(&c->hub->mu);
    dt_status st = connect_ring(c, o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 30000, err);
    if (st != DT_OK) {
        dt_comm_free(c);
        return st;
    }
    /* Connections for failure notices, made now: a notice must not wait for a handshake. */
    for (int i = 0; i < c->world; i++) {
        dt_err e2 = {0};
        if (i != c->rank &&
            dt_rpc_channel_new_dedicated(c->addr[i], c->token, &c->notice_ch[i], &e2) == DT_OK)
            dt_rpc_channel_connect(c->notice_ch[i]);
    }
    *out = c;
    return DT_OK;
}

int dt_comm_rank(const dt_comm *c)
{
    return c->rank;
}

int dt_comm_world(const dt_comm *c)
{
    return c->world;
}

uint64_t dt_comm_busy_ns(dt_comm *c)
{
    return atomic_load(&c->busy_ns);
}

int64_t dt_comm_idle_ms(dt_comm *c)
{
    int64_t since = atomic_load(&c->idle_since_ms);
    return since < 0 ? -1 : now_ms() - since;
}

/* Ends the streams: gracefully when the group is healthy (the next rank's receive sees the end
 * after every message), bounded by CLOSE_WAIT_MS; then lets go of them. */
static void close_streams(dt_comm *c)
{
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    for (dt_comm_req *r = c->head; r; r = r->next)
        req_finish(r, DT_ECANCELED, "the communicator was freed");
    if (c->head)
        atomic_store(&c->idle_since_ms, now_ms());
    c->head = c->tail = NULL;
    if (!c->broken) {
        for (int k = 0; k < c->nstreams; k++) {
            if (c->out[k].s && c->out[k].ready && !dt_rpc_stream_close_send(c->out[k].s))
                c->out[k].closed = 1;
            ring_stream *i = &c->in[k];
            if (i->s && !i->recv_busy) {
                if (dt_rpc_stream_recv(i->s))
                    i->recv_busy = 1;
                else
                    i->closed = 1;
            }
        }
        int64_t deadline = now_ms() + CLOSE_WAIT_MS;
        for (;;) {
            int open = 0;
            for (int k = 0; k < c->nstreams; k++)
                open += (c->out[k].s && c->out[k].ready && !c->out[k].closed) +
                        (c->in[k].s && !c->in[k].closed);
            if (!open || now_ms() >= deadline)
                break;
            timed_wait(&c->cv, &c->mu, 20);
        }
    }
    for (int k = 0; k < MAX_STREAMS; k++) {
        dt_rpc_stream_release(c->out[k].s);
        dt_rpc_stream_release(c->in[k].s);
        c->out[k].s = c->in[k].s = NULL;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void dt_comm_free(dt_comm *c)
{
    if (!c)
        return;
    if (c->hub) {
        close_streams(c);
        dt_comm_hub *h = c->hub;
        pthread_mutex_lock(&h->mu);
        for (dt_comm **p = &h->comms; *p; p = &(*p)->hub_next) {
            if (*p == c) {
                *p = c->hub_next;
                break;
            }
        }
        /* A callback that picked up one of c's streams before the release may still run:
         * wait for the comm thread to finish the callback in progress. */
        uint64_t e0 = h->epoch;
        int64_t deadline = now_ms() + 1000;
        while (h->epoch == e0 && now_ms() < deadline)
            timed_wait(&h->cv, &h->mu, 20);
        pthread_mutex_unlock(&h->mu);
    }
    for (int k = 0; k < MAX_STREAMS; k++)
        dt_rpc_channel_free(c->out[k].ch);
    for (int i = 0; c->notice_ch && i < c->world; i++)
        dt_rpc_channel_free(c->notice_ch[i]);
    for (int i = 0; i < c->world; i++) {
        if (c->addr)
            free(c->addr[i]);
        if (c->name)
            free(c->name[i]);
    }
    free(c->addr);
    free(c->name);
    free(c->notice_ch);
    free(c->token);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->ref_mu);
    pthread_cond_destroy(&c->ref_cv);
    free(c);
}

void dt_comm_abort(dt_comm *c, const char *why)
{
    char m[1024];
    snprintf(m, sizeof m, "%s aborted the group: %s", c->name[c->rank],
             why && *why ? why : "no reason given");
    pthread_mutex_lock(&c->mu);
    comm_fail(c, DT_ECANCELED, m, 1);
    pthread_mutex_unlock(&c->mu);
}

/* --- collectives ----------------------------------------------------------------------------- */

static dt_status submit(dt_comm *c, dt_comm_req *r, dt_comm_req **out, dt_err *err)
{
    r->c = c;
    if (r->timeout_ms <= 0)
        r->timeout_ms = 300000;
    pthread_mutex_lock(&c->mu);
    if (c->broken || c->closing) {
        req_finish(r, c->broken ? DT_EPEER : DT_ECANCELED,
                   c->broken ? c->reason : "the communicator is closing");
    } else {
        if (c->tail)
            c->tail->next = r;
        else
            c->head = r;
        c->tail = r;
        atomic_store(&c->idle_since_ms, -1);
        pump(c);
    }
    pthread_mutex_unlock(&c->mu);
    *out = r;
    (void)err;
    return DT_OK;
}

dt_status dt_comm_wait(dt_comm_req *r, int64_t timeout_ms, dt_err *err)
{
    dt_comm *c = r->c;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : r->timeout_ms);
    pthread_mutex_lock(&c->mu);
    while (!r->done) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            char m[1024];
            timeout_reason(c, r, timeout_ms > 0 ? timeout_ms : r->timeout_ms, m, sizeof m);
            comm_fail(c, DT_ETIMEDOUT, m, 1);
            req_finish(r, DT_ETIMEDOUT, m);
            break;
        }
        timed_wait(&c->cv, &c->mu, left < 100 ? left : 100);
    }
    pthread_mutex_unlock(&c->mu);
    /* gRPC may still hold slices of the caller's buffer (a failed send): wait them out. */
    pthread_mutex_lock(&c->ref_mu);
    int64_t sdl = now_ms() + SLICE_WAIT_MS;
    while (r->slices > 0 && now_ms() < sdl)
        timed_wait(&c->ref_cv, &c->ref_mu, 20);
    int leaked = r->slices > 0;
    pthread_mutex_unlock(&c->ref_mu);

    dt_status st = r->st;
    if (st != DT_OK)
        dt_err_set(err, st, "%s", r->msg);
    if (leaked) {
        DT_ERROR("comm", "gRPC still holds %d buffers of a failed %s; keeping them", r->slices,
                 r->what);
        return st != DT_OK ? st : dt_err_set(err, DT_EIO, "comm: buffers still in flight");
    }
    free(r->recvd);
    free(r->stage);
    free(r->gather);
    free(r);
    return st;
}

static dt_comm_req *req_new(req_kind kind, const char *what, int64_t timeout_ms)
{
    dt_comm_req *r = calloc(1, sizeof *r);
    if (r) {
        r->kind = kind;
        r->what = what;
        r->timeout_ms = timeout_ms;
        r->esz = r->wsz = 1;
    }
    return r;
}

dt_status dt_comm_allreduce_start(dt_comm *c, float *buf, size_t n, dt_comm_op op,
                                  dt_comm_wire wire, int64_t timeout_ms, dt_comm_req **req,
                                  dt_err *err)
{
    *req = NULL;
    if ((n && !buf) || n > SIZE_MAX / 8)
        return dt_err_set(err, DT_EINVAL, "comm: all-reduce of %zu floats at %p", n, (void *)buf);
    dt_comm_req *r = req_new(REQ_ALLREDUCE, "all-reduce", timeout_ms);
    if (!r)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    r->buf = (uint8_t *)buf;
    r->n = n;
    r->esz = 4;
    r->wsz = wire == DT_COMM_F32 ? 4 : 2;
    r->op = op;
    r->wire = wire;
    return submit(c, r, req, err);
}

dt_status dt_comm_allreduce(dt_comm *c, float *buf, size_t n, dt_comm_op op, dt_comm_wire wire,
                            int64_t timeout_ms, dt_err *err)
{
    dt_comm_req *r;
    DT_TRY(dt_comm_allreduce_start(c, buf, n, op, wire, timeout_ms, &r, err));
    return dt_comm_wait(r, timeout_ms, err);
}

dt_status dt_comm_broadcast(dt_comm *c, void *buf, size_t bytes, int root, int64_t timeout_ms,
                            dt_err *err)
{
    if (root < 0 || root >= c->world)
        return dt_err_set(err, DT_EINVAL, "comm: broadcast root %d is not a rank of 0..%d", root,
                          c->world - 1);
    if (bytes && !buf)
        return dt_err_set(err, DT_EINVAL, "comm: broadcast of %zu bytes from NULL", bytes);
    dt_comm_req *r = req_new(REQ_BROADCAST, "broadcast", timeout_ms);
    if (!r)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    r->buf = buf;
    r->n = bytes;
    r->root = root;
    DT_TRY(submit(c, r, &r, err));
    return dt_comm_wait(r, timeout_ms, err);
}

dt_status dt_comm_allgather(dt_comm *c, const void *in, size_t bytes, void *out, int64_t timeout_ms,
                            dt_err *err)
{
    if (bytes && (!in || !out || bytes > SIZE_MAX / (size_t)c->world))
        return dt_err_set(err, DT_EINVAL, "comm: all-gather of %zu bytes", bytes);
    if (bytes)
        memmove((uint8_t *)out + (size_t)c->rank * bytes, in, bytes);
    dt_comm_req *r = req_new(REQ_ALLGATHER, "all-gather", timeout_ms);
    if (!r)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    r->buf = out;
    r->n = bytes * (size_t)c->world;
    DT_TRY(submit(c, r, &r, err));
    return dt_comm_wait(r, timeout_ms, err);
}

dt_status dt_comm_barrier(dt_comm *c, int64_t timeout_ms, dt_err *err)
{
    uint8_t *all = calloc((size_t)c->world, 1), one = 1;
    if (!all)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    dt_status st = dt_comm_allgather(c, &one, 1, all, timeout_ms, err);
    free(all);
    return st;
}
