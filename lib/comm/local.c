/*
 * local.c - in-host collectives among the G replicas of one process, in shared memory (see
 * comm.h, "in-host collectives").
 *
 * A collective ("coll") is made by the first member that starts it and matched by position: a
 * member's k-th start joins coll k. The engine thread runs colls strictly in order, each once
 * all G members have started it; it reads and writes the members' buffers in place, unlocked
 * (they are the communicator's until the waits), and then releases the waiters.
 *
 * Locks: l->mu guards everything below except a running coll's buffers, which only the engine
 * touches while c->running. A failure (deadline, abort, mismatch) fails every coll that is not
 * running; the running one finishes (bounded: memory passes) and completes normally, so no waiter
 * ever gets its buffer back while the engine still writes to it.
 */
#include "comm/comm.h"

#include "core/clock.h"
#include "core/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_LEN 48
#define MSG_LEN  1024
/* Floats summed per pass: the accumulator (8 KiB) and one block of each input stay in L1/L2
 * while the G inputs are added into it, so each input byte is read from memory once. */
#define BLOCK 2048

typedef struct coll {
    uint64_t seq;
    dt_comm_local_op op;
    size_t n; /* floats; bytes for a broadcast */
    int root; /* broadcast */
    int arrived, refs, first;
    int running, done;
    int64_t t0_ms, deadline_ms; /* the first start; + its timeout */
    dt_status st;
    char msg[MSG_LEN];
    float *buf[DT_COMM_LOCAL_MAX];
    void (*then[DT_COMM_LOCAL_MAX])(void *, dt_status);
    void *then_ctx[DT_COMM_LOCAL_MAX];
    unsigned char here[DT_COMM_LOCAL_MAX];
    struct coll *next;
} coll;

struct dt_comm_local_req {
    dt_comm_local *l;
    coll *c;
    int member;
};

struct dt_comm_local {
    int G;
    char name[DT_COMM_LOCAL_MAX][NAME_LEN];
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the engine: a start, a stop */
    pthread_cond_t done_cv; /* waiters: a coll finished or failed */
    pthread_t engine;
    int engine_up, stop;
    int broken;
    dt_status broken_st;
    char reason[MSG_LEN];
    uint64_t next_seq[DT_COMM_LOCAL_MAX];
    _Atomic uint64_t busy_ns; /* the engine's time in collectives (dt_comm_local_busy_ns) */
    _Atomic int64_t done_ms;  /* dt_now_ms() when a collective last finished (or the start) */
    coll *head, *tail;        /* in seq order; freed once done and waited for by every member */
};

static const char *op_name(dt_comm_local_op op)
{
    switch (op) {
    case DT_COMM_LOCAL_ALLREDUCE:
        return "all-reduce";
    case DT_COMM_LOCAL_REDUCE_SCATTER:
        return "reduce-scatter";
    case DT_COMM_LOCAL_ALLGATHER:
        return "all-gather";
    case DT_COMM_LOCAL_BROADCAST:
        return "broadcast";
    }
    return "?";
}

/* abs_ms on the monotonic clock, for pthread_cond_timedwait on a CLOCK_MONOTONIC condvar. */
static void timedwait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t abs_ms)
{
    struct timespec ts = {.tv_sec = abs_ms / 1000, .tv_nsec = (abs_ms % 1000) * 1000000};
    pthread_cond_timedwait(cv, mu, &ts);
}

static int cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a))
        return -1;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* --- failure (l->mu held) ----------------------------------------------------------------------
 */

static void coll_fail(coll *c, dt_status st, const char *msg)
{
    if (c->done || c->running)
        return;
    c->done = 1;
    c->st = st;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
}

/* Poisons l: every coll not running fails with why, and so does every later start. */
static void local_fail(dt_comm_local *l, dt_status st, const char *why)
{
    if (!l->broken) {
        l->broken = 1;
        l->broken_st = st;
        snprintf(l->reason, sizeof l->reason, "%s", why);
        DT_WARN("comm", "in-host: %s", why);
    }
    for (coll *c = l->head; c; c = c->next)
        coll_fail(c, l->broken_st, l->reason);
    pthread_cond_broadcast(&l->done_cv);
    pthread_cond_broadcast(&l->work_cv);
}

/* "/cpu:1, /cpu:3": the members that have not started c. */
static void missing_names(const dt_comm_local *l, const coll *c, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (int m = 0; m < l->G && at < cap; m++)
        if (!c->here[m])
            at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? ", " : "", l->name[m]);
}

static void fail_late(dt_comm_local *l, coll *c, int64_t waited_ms)
{
    char miss[512], why[MSG_LEN];
    missing_names(l, c, miss, sizeof miss);
    snprintf(why, sizeof why,
             "in-host %s #%" PRIu64 " (%zu %s): %s did not start it within %" PRId64
             " ms of %s; every member is released with this error",
             op_name(c->op), c->seq, c->n, c->op == DT_COMM_LOCAL_BROADCAST ? "bytes" : "floats",
             miss, waited_ms, l->name[c->first]);
    local_fail(l, DT_ETIMEDOUT, why);
}

/* --- the passes over the buffers (engine thread, unlocked) -------------------------------------
 */

/* acc[0..len) = ((b[0] + b[1]) + b[2]) + ... at off: the one summation order every element gets. */
static void sum_block(float *restrict acc, float *const *b, int G, size_t off, size_t len)
{
    memcpy(acc, b[0] + off, len * sizeof *acc);
    for (int m = 1; m < G; m++) {
        const float *restrict in = b[m] + off;
        for (size_t k = 0; k < len; k++)
            acc[k] += in[k];
    }
}

static void shard_of(int G, size_t n, int j, size_t *off, size_t *len)
{
    size_t s = (n + (size_t)G - 1) / (size_t)G;
    size_t lo = (size_t)j * s;
    *off = lo < n ? lo : n;
    *len = lo < n ? (n - lo < s ? n - lo : s) : 0;
}

static void run_coll(const dt_comm_local *l, const coll *c)
{
    int G = l->G;
    float *const *b = c->buf;
    float acc[BLOCK];
    if (G == 1 || c->n == 0)
        return;
    switch (c->op) {
    case DT_COMM_LOCAL_ALLREDUCE: /* one pass: sum a block, copy it to every member */
        for (size_t o = 0; o < c->n; o += BLOCK) {
            size_t len = c->n - o < BLOCK ? c->n - o : BLOCK;
            sum_block(acc, b, G, o, len);
            for (int m = 0; m < G; m++)
                memcpy(b[m] + o, acc, len * sizeof *acc);
        }
        break;
    case DT_COMM_LOCAL_REDUCE_SCATTER: /* shard j summed into member j's buffer */
        for (int j = 0; j < G; j++) {
            size_t off, len;
            shard_of(G, c->n, j, &off, &len);
            for (size_t o = 0; o < len; o += BLOCK) {
                size_t bl = len - o < BLOCK ? len - o : BLOCK;
                sum_block(acc, b, G, off + o, bl);
                memcpy(b[j] + off + o, acc, bl * sizeof *acc);
            }
        }
        break;
    case DT_COMM_LOCAL_BROADCAST: /* bytes of the root's buffer into every other one */
        for (int m = 0; m < G; m++)
            if (m != c->root)
                memcpy(b[m], b[c->root], c->n);
        break;
    case DT_COMM_LOCAL_ALLGATHER: /* member j's shard j into everyone's shard j */
        for (int j = 0; j < G; j++) {
            size_t off, len;
            shard_of(G, c->n, j, &off, &len);
            for (int m = 0; m < G; m++)
                if (m != j && len)
                    memcpy(b[m] + off, b[j] + off, len * sizeof(float));
        }
        break;
    }
}

/* --- the engine --------------------------------------------------------------------------------
 */

static void *engine_main(void *arg)
{
    dt_comm_local *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        coll *c = l->head;
        while (c && c->done)
            c = c->next;
        if (!c) {
            pthread_cond_wait(&l->work_cv, &l->mu);
            continue;
        }
        if (c->arrived == l->G) {
            c->running = 1;
            pthread_mutex_unlock(&l->mu);
            uint64_t t0 = dt_now_ns();
            run_coll(l, c);
            atomic_fetch_add(&l->busy_ns, dt_now_ns() - t0);
            /* then-hooks before any waiter is released: what follows a stage is queued
             * behind it (the host ring of a shard) before a member can move on. */
            for (int m = 0; m < l->G; m++)
                if (c->then[m])
                    c->then[m](c->then_ctx[m], DT_OK);
            pthread_mutex_lock(&l->mu);
            atomic_store(&l->done_ms, dt_now_ms());
            c->running = 0;
            c->done = 1;
            c->st = DT_OK;
            pthread_cond_broadcast(&l->done_cv);
            continue;
        }
        int64_t now = dt_now_ms();
        if (now >= c->deadline_ms) {
            fail_late(l, c, now - c->t0_ms);
            continue;
        }
        timedwait_until(&l->work_cv, &l->mu, c->deadline_ms);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* --- public ------------------------------------------------------------------------------------
 */

dt_status dt_comm_local_new(const dt_comm_local_opts *opts, dt_comm_local **out, dt_err *err)
{
    *out = NULL;
    if (!opts || opts->members < 1 || opts->members > DT_COMM_LOCAL_MAX)
        return dt_err_set(err, DT_EINVAL, "in-host comm: members must be 1..%d, got %d",
                          DT_COMM_LOCAL_MAX, opts ? opts->members : 0);
    if (opts->backend != DT_COMM_LOCAL_SHM)
        return dt_err_set(err, DT_ENOTSUP,
                          "in-host comm: only the shared-memory backend exists in this build");
    dt_comm_local *l = calloc(1, sizeof *l);
    if (!l)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    l->G = opts->members;
    for (int m = 0; m < l->G; m++) {
        if (opts->names && opts->names[m])
            snprintf(l->name[m], NAME_LEN, "%s", opts->names[m]);
        else
            snprintf(l->name[m], NAME_LEN, "member %d", m);
    }
    pthread_mutex_init(&l->mu, NULL);
    atomic_init(&l->done_ms, dt_now_ms());
    if (cond_init_monotonic(&l->work_cv) || cond_init_monotonic(&l->done_cv)) {
        free(l); /* glibc's cond_init cannot fail with these attributes; be safe anyway */
        return dt_err_set(err, DT_ENOMEM, "in-host comm: cannot make condition variables");
    }
    if (pthread_create(&l->engine, NULL, engine_main, l)) {
        pthread_cond_destroy(&l->work_cv);
        pthread_cond_destroy(&l->done_cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return dt_err_set(err, DT_ENOMEM, "in-host comm: cannot start its engine thread");
    }
    l->engine_up = 1;
    *out = l;
    return DT_OK;
}

void dt_comm_local_free(dt_comm_local *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    int pending = 0;
    for (coll *c = l->head; c; c = c->next)
        pending |= !c->done;
    if (pending) /* a caller broke the contract; fail its collectives rather than hang them */
        local_fail(l, DT_ECANCELED, "in-host comm freed with collectives pending");
    l->stop = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    if (l->engine_up)
        pthread_join(l->engine, NULL);
    for (coll *c = l->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int64_t dt_comm_local_idle_ms(dt_comm_local *l, int member)
{
    /* A member thread holds the lock only for moments, but a stuck one might hold it: then
     * say "in a collective" and let the caller ask again later rather than block. */
    if (member < 0 || member >= l->G || pthread_mutex_trylock(&l->mu) != 0)
        return -1;
    int pending = 0;
    for (coll *c = l->head; c && !pending; c = c->next)
        pending = c->here[member] && !c->done;
    pthread_mutex_unlock(&l->mu);
    return pending ? -1 : dt_now_ms() - atomic_load(&l->done_ms);
}

uint64_t dt_comm_local_busy_ns(dt_comm_local *l)
{
    return atomic_load(&l->busy_ns);
}

int dt_comm_local_members(const dt_comm_local *l)
{
    return l->G;
}

void dt_comm_local_shard(const dt_comm_local *l, size_t n, int j, size_t *off, size_t *len)
{
    shard_of(l->G, n, j, off, len);
}

static dt_status start(dt_comm_local *l, int member, dt_comm_local_op op, float *buf, size_t n,
                       int root, int64_t timeout_ms, void (*then)(void *ctx, dt_status st),
                       void *then_ctx, dt_comm_local_req **req, dt_err *err)
{
    *req = NULL;
    if (member < 0 || member >= l->G)
        return dt_err_set(err, DT_EINVAL, "in-host comm: member %d out of range 0..%d", member,
                          l->G - 1);
    if (op != DT_COMM_LOCAL_ALLREDUCE && op != DT_COMM_LOCAL_REDUCE_SCATTER &&
        op != DT_COMM_LOCAL_ALLGATHER && op != DT_COMM_LOCAL_BROADCAST)
        return dt_err_set(err, DT_EINVAL, "in-host comm: unknown collective %d", (int)op);
    if (n && !buf)
        return dt_err_set(err, DT_EINVAL, "in-host comm: %s: no buffer for %zu floats",
                          l->name[member], n);
    if (timeout_ms <= 0)
        return dt_err_set(err, DT_EINVAL, "in-host comm: a collective needs a deadline (> 0 ms)");
    dt_comm_local_req *q = calloc(1, sizeof *q);
    if (!q)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    dt_status st = DT_OK;
    pthread_mutex_lock(&l->mu);
    if (l->broken) {
        st = dt_err_set(err, l->broken_st, "%s", l->reason);
        goto out;
    }
    uint64_t seq = l->next_seq[member]++;
    coll *c = l->head;
    while (c && c->seq != seq)
        c = c->next;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) {
            l->next_seq[member]--;
            st = dt_err_set(err, DT_ENOMEM, "out of memory");
            goto out;
        }
        c->seq = seq;
        c->op = op;
        c->n = n;
        c->root = root;
        c->first = member;
        c->t0_ms = dt_now_ms();
        c->deadline_ms = c->t0_ms + timeout_ms;
        if (l->tail)
            l->tail->next = c;
        else
            l->head = c;
        l->tail = c;
    } else if (c->op != op || c->n != n || c->root != root) {
        char why[MSG_LEN], r0[32] = "", r1[32] = "";
        if (c->op == DT_COMM_LOCAL_BROADCAST)
            snprintf(r0, sizeof r0, " from %d", c->root);
        if (op == DT_COMM_LOCAL_BROADCAST)
            snprintf(r1, sizeof r1, " from %d", root);
        snprintf(why, sizeof why,
                 "in-host collective #%" PRIu64 ": %s started %s of %zu%s%s but %s %s of %zu%s "
                 "(every member must start the same collectives in the same order)",
                 seq, l->name[c->first], op_name(c->op), c->n,
                 c->op == DT_COMM_LOCAL_BROADCAST ? " bytes" : " floats", r0, l->name[member],
                 op_name(op), n, r1);
        local_fail(l, DT_EINVAL, why);
        st = dt_err_set(err, DT_EINVAL, "%s", why);
        goto out;
    }
    c->buf[member] = buf;
    c->then[member] = then;
    c->then_ctx[member] = then_ctx;
    c->here[member] = 1;
    c->arrived++;
    c->refs++;
    q->l = l;
    q->c = c;
    q->member = member;
    /* The engine learns of a first start (its deadline) and of a complete one. */
    if (c->arrived == 1 || c->arrived == l->G)
        pthread_cond_signal(&l->work_cv);
out:
    pthread_mutex_unlock(&l->mu);
    if (st != DT_OK)
        free(q);
    else
        *req = q;
    return st;
}

dt_status dt_comm_local_start(dt_comm_local *l, int member, dt_comm_local_op op, float *buf,
                              size_t n, int64_t timeout_ms, void (*then)(void *ctx, dt_status st),
                              void *then_ctx, dt_comm_local_req **req, dt_err *err)
{
    if (op == DT_COMM_LOCAL_BROADCAST)
        return dt_err_set(err, DT_EINVAL,
                          "in-host comm: a broadcast goes by dt_comm_local_broadcast");
    return start(l, member, op, buf, n, 0, timeout_ms, then, then_ctx, req, err);
}

dt_status dt_comm_local_broadcast(dt_comm_local *l, int member, void *buf, size_t bytes, int root,
                                  int64_t timeout_ms, dt_err *err)
{
    if (root < 0 || root >= l->G)
        return dt_err_set(err, DT_EINVAL, "in-host comm: broadcast root %d out of range 0..%d",
                          root, l->G - 1);
    dt_comm_local_req *q;
    DT_TRY(start(l, member, DT_COMM_LOCAL_BROADCAST, buf, bytes, root, timeout_ms, NULL, NULL, &q,
                 err));
    return dt_comm_local_wait(q, timeout_ms, err);
}

dt_status dt_comm_local_wait(dt_comm_local_req *req, int64_t timeout_ms, dt_err *err)
{
    dt_comm_local *l = req->l;
    coll *c = req->c;
    int64_t t0 = dt_now_ms(), deadline = t0 + (timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&l->mu);
    while (!c->done) {
        int64_t now = dt_now_ms();
        if (now >= deadline && !c->running) {
            /* Whoever is missing is named; past this point the members cannot be matched. */
            fail_late(l, c, now - t0);
            break;
        }
        /* A running coll is waited out past the deadline: its passes are bounded, and the
         * buffer must not go back to the caller while the engine writes it. */
        timedwait_until(&l->done_cv, &l->mu, c->running ? now + 50 : deadline);
    }
    dt_status st = c->st;
    if (st != DT_OK)
        dt_err_set(err, st, "%s", c->msg);
    if (--c->refs == 0) { /* every member that started it has waited: unlink and free */
        coll **pp = &l->head, *prev = NULL;
        while (*pp != c) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        *pp = c->next;
        if (l->tail == c)
            l->tail = prev;
        /* Done with refs 0: either every member started it, or l is broken and a member that
         * never did will be refused at its start, so nobody reaches this coll again. */
        free(c);
    }
    pthread_mutex_unlock(&l->mu);
    free(req);
    return st;
}

dt_status dt_comm_local_run(dt_comm_local *l, int member, dt_comm_local_op op, float *buf, size_t n,
                            int64_t timeout_ms, dt_err *err)
{
    dt_comm_local_req *q;
    DT_TRY(dt_comm_local_start(l, member, op, buf, n, timeout_ms, NULL, NULL, &q, err));
    return dt_comm_local_wait(q, timeout_ms, err);
}

void dt_comm_local_abort(dt_comm_local *l, const char *why)
{
    char msg[MSG_LEN];
    snprintf(msg, sizeof msg, "in-host comm aborted: %s", why ? why : "no reason given");
    pthread_mutex_lock(&l->mu);
    local_fail(l, DT_ECANCELED, msg);
    pthread_mutex_unlock(&l->mu);
}
