/* In-host collectives (comm.h, dt_comm_local): G member threads of one process. Each member
 * thread records what it saw and the main thread asserts after joining them all, so a failed
 * check never leaves a thread behind. Integers stored as floats make every sum exact; the
 * inexact runs check the bits against the fixed-order sum ((b0 + b1) + b2) + ... */
#include "comm/comm.h"
#include "core/clock.h"
#include "dt_test.h"

#include <pthread.h>
#include <stdint.h>

#define MAXG 4

typedef struct member_ctx {
    dt_comm_local *l;
    int member;
    float *buf;
    size_t n;
    int64_t timeout_ms;
    int skip;     /* this member never calls */
    int script;   /* what to run, see member_main */
    dt_status st; /* the first failure */
    char msg[1024];
    int64_t elapsed_ms;   /* from start to the end of the wait */
    int then_ran;         /* then-hook count, checked against the wait's return */
    int then_before_wait; /* the hook ran before the wait returned */
} member_ctx;

enum { RUN_ALLREDUCE, RUN_RS_THEN_AG, RUN_RS_ONLY, RUN_ASYNC_PAIR };

static void on_then(void *ctx, dt_status st)
{
    member_ctx *m = ctx;
    if (st == DT_OK)
        m->then_ran++;
}

static void record(member_ctx *m, dt_status st, const dt_err *err)
{
    if (st != DT_OK && m->st == DT_OK) {
        m->st = st;
        snprintf(m->msg, sizeof m->msg, "%s", err->msg);
    }
}

static void *member_main(void *arg)
{
    member_ctx *m = arg;
    dt_err err = {0};
    if (m->skip)
        return NULL;
    int64_t t0 = dt_now_ms();
    dt_comm_local_req *q = NULL, *q2 = NULL;
    dt_status st = DT_OK;
    switch (m->script) {
    case RUN_ALLREDUCE:
        st = dt_comm_local_start(m->l, m->member, DT_COMM_LOCAL_ALLREDUCE, m->buf, m->n,
                                 m->timeout_ms, on_then, m, &q, &err);
        if (st == DT_OK) {
            st = dt_comm_local_wait(q, m->timeout_ms * 10, &err);
            m->then_before_wait = m->then_ran;
        }
        break;
    case RUN_RS_ONLY:
        st = dt_comm_local_run(m->l, m->member, DT_COMM_LOCAL_REDUCE_SCATTER, m->buf, m->n,
                               m->timeout_ms, &err);
        break;
    case RUN_RS_THEN_AG:
        st = dt_comm_local_run(m->l, m->member, DT_COMM_LOCAL_REDUCE_SCATTER, m->buf, m->n,
                               m->timeout_ms, &err);
        if (st == DT_OK)
            st = dt_comm_local_run(m->l, m->member, DT_COMM_LOCAL_ALLGATHER, m->buf, m->n,
                                   m->timeout_ms, &err);
        break;
    case RUN_ASYNC_PAIR: /* two in flight, as fit starts buckets: RS of the first half, AR of
                            the second, then both waits */
        st = dt_comm_local_start(m->l, m->member, DT_COMM_LOCAL_REDUCE_SCATTER, m->buf, m->n / 2,
                                 m->timeout_ms, NULL, NULL, &q, &err);
        if (st == DT_OK)
            st = dt_comm_local_start(m->l, m->member, DT_COMM_LOCAL_ALLREDUCE, m->buf + m->n / 2,
                                     m->n - m->n / 2, m->timeout_ms, NULL, NULL, &q2, &err);
        if (q) {
            dt_status s1 = dt_comm_local_wait(q, m->timeout_ms, &err);
            st = st == DT_OK ? s1 : st;
        }
        if (q2) {
            dt_status s2 = dt_comm_local_wait(q2, m->timeout_ms, &err);
            st = st == DT_OK ? s2 : st;
        }
        if (st == DT_OK)
            st = dt_comm_local_run(m->l, m->member, DT_COMM_LOCAL_ALLGATHER, m->buf, m->n / 2,
                                   m->timeout_ms, &err);
        break;
    }
    record(m, st, &err);
    m->elapsed_ms = dt_now_ms() - t0;
    return NULL;
}

/* Starts G member threads on ctx and joins every one of them. */
static void run_members(int G, member_ctx *ctx)
{
    pthread_t th[MAXG];
    int up[MAXG] = {0};
    for (int i = 0; i < G; i++)
        up[i] = pthread_create(&th[i], NULL, member_main, &ctx[i]) == 0;
    for (int i = 0; i < G; i++)
        if (up[i])
            pthread_join(th[i], NULL);
    for (int i = 0; i < G; i++)
        if (!up[i])
            DT_FAIL_("could not start member thread %d", i);
}

static float ival(size_t i, int member)
{
    return (float)((i * 7 + (size_t)member * 13) % 1001) - 500.0f;
}

static float fval(size_t i, int member)
{
    return ival(i, member) / 3.7f + (float)member * 0.1f;
}

static dt_comm_local *local_new(int G)
{
    static const char *names[MAXG] = {"/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"};
    dt_comm_local *l = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_comm_local_new(&(dt_comm_local_opts){.members = G, .names = names}, &l, &err),
              &err);
    ASSERT_EQ(dt_comm_local_members(l), G);
    return l;
}

/* The fixed-order sum of element i over G members. */
static float want_sum(size_t i, int G, float (*val)(size_t, int))
{
    float acc = val(i, 0);
    for (int m = 1; m < G; m++)
        acc += val(i, m);
    return acc;
}

static void check_op(int G, size_t n, int script, float (*val)(size_t, int))
{
    dt_comm_local *l = local_new(G);
    member_ctx ctx[MAXG];
    for (int m = 0; m < G; m++) {
        ctx[m] = (member_ctx){.l = l, .member = m, .n = n, .timeout_ms = 30000, .script = script};
        ctx[m].buf = malloc(n * sizeof(float) + 1);
        ASSERT_TRUE(ctx[m].buf);
        for (size_t i = 0; i < n; i++)
            ctx[m].buf[i] = val(i, m);
    }
    run_members(G, ctx);
    dt_comm_local_free(l);
    for (int m = 0; m < G; m++)
        if (ctx[m].st != DT_OK)
            DT_FAIL_("G %d n %zu script %d: member %d: %s: %s", G, n, script, m,
                     dt_status_name(ctx[m].st), ctx[m].msg);
    size_t s = (n + (size_t)G - 1) / (size_t)G;
    for (int m = 0; m < G; m++) {
        for (size_t i = 0; i < n; i++) {
            float got = ctx[m].buf[i], want = want_sum(i, G, val);
            if (script == RUN_RS_ONLY && i / s != (size_t)m)
                want = val(i, m); /* outside its shard a member keeps its own values */
            if (memcmp(&got, &want, sizeof got) != 0)
                DT_FAIL_("G %d n %zu script %d: member %d: buf[%zu] = %.9g, want %.9g", G, n,
                         script, m, i, got, want);
        }
        if (script == RUN_ALLREDUCE) {
            ASSERT_EQ(ctx[m].then_ran, 1);
            ASSERT_EQ(ctx[m].then_before_wait, 1);
        }
    }
    for (int m = 1; m < G && script != RUN_RS_ONLY; m++)
        ASSERT_EQ(memcmp(ctx[m].buf, ctx[0].buf, n * sizeof(float)), 0);
    for (int m = 0; m < G; m++)
        free(ctx[m].buf);
}

DT_TEST_TIMEOUT(comm_local_members_1_to_4_sizes, 120)
{
    for (int G = 1; G <= MAXG; G++) {
        size_t sizes[] = {0, 1, (size_t)G - 1, (size_t)G * 1000 + 1, (size_t)G * 4096 + 1, 5000};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (int script = RUN_ALLREDUCE; script <= RUN_ASYNC_PAIR; script++) {
                check_op(G, sizes[k], script, ival);
                check_op(G, sizes[k], script, fval);
            }
    }
}

/* Shards: ceil(n / G) slots each, the last ones short or empty (padding worth zero). */
DT_TEST(comm_local_shards)
{
    dt_comm_local *l = local_new(4);
    size_t off, len;
    dt_comm_local_shard(l, 0, 0, &off, &len);
    ASSERT_EQ(len, 0);
    dt_comm_local_shard(l, 1, 0, &off, &len);
    ASSERT_EQ(off, 0);
    ASSERT_EQ(len, 1);
    dt_comm_local_shard(l, 1, 3, &off, &len);
    ASSERT_EQ(len, 0);
    dt_comm_local_shard(l, 9, 2, &off, &len); /* s = 3: [6, 9) */
    ASSERT_EQ(off, 6);
    ASSERT_EQ(len, 3);
    dt_comm_local_shard(l, 9, 3, &off, &len); /* wholly padding */
    ASSERT_EQ(len, 0);
    dt_comm_local_shard(l, 4001, 3, &off, &len); /* s = 1001: [3003, 4001) */
    ASSERT_EQ(off, 3003);
    ASSERT_EQ(len, 998);
    dt_comm_local_free(l);
}

/* 64 MB per member, G = 2 and 4: exact, the same bits everywhere. Values are cheap to make and
 * to check (the point is the sizes: many blocks, shards that are not multiples of a block). */
static float bigval(size_t i, int member)
{
    return (float)((int)((i + (size_t)member * 3) & 1023) - 512);
}

DT_TEST_TIMEOUT(comm_local_64mb, 120)
{
    size_t n = (64u << 20) / sizeof(float) + 3;
    for (int G = 2; G <= 4; G += 2) {
        dt_comm_local *l = local_new(G);
        member_ctx ctx[MAXG];
        for (int m = 0; m < G; m++) {
            ctx[m] = (member_ctx){
                .l = l, .member = m, .n = n, .timeout_ms = 60000, .script = RUN_RS_THEN_AG};
            ctx[m].buf = malloc(n * sizeof(float));
            ASSERT_TRUE(ctx[m].buf);
            for (size_t i = 0; i < n; i++)
                ctx[m].buf[i] = bigval(i, m);
        }
        run_members(G, ctx);
        for (int m = 0; m < G; m++)
            if (ctx[m].st != DT_OK)
                DT_FAIL_("G %d: member %d: %s", G, m, ctx[m].msg);
        for (size_t i = 0; i < n; i++) {
            float want = want_sum(i, G, bigval);
            if (ctx[0].buf[i] != want)
                DT_FAIL_("G %d: buf[%zu] = %g, want %g", G, i, ctx[0].buf[i], want);
        }
        for (int m = 1; m < G; m++)
            ASSERT_EQ(memcmp(ctx[m].buf, ctx[0].buf, n * sizeof(float)), 0);
        /* and the one-pass all-reduce on the same buffers (values now the sums) */
        for (int m = 0; m < G; m++)
            ctx[m].script = RUN_ALLREDUCE;
        run_members(G, ctx);
        dt_comm_local_free(l);
        for (int m = 0; m < G; m++)
            if (ctx[m].st != DT_OK)
                DT_FAIL_("G %d all-reduce: member %d: %s", G, m, ctx[m].msg);
        for (size_t i = 0; i < n; i += 4099)
            ASSERT_FEQ(ctx[0].buf[i], want_sum(i, G, bigval) * (float)G);
        for (int m = 1; m < G; m++)
            ASSERT_EQ(memcmp(ctx[m].buf, ctx[0].buf, n * sizeof(float)), 0);
        for (int m = 0; m < G; m++)
            free(ctx[m].buf);
    }
}

/* A member that never calls: the others fail within the deadline, naming it, and are released;
 * later collectives fail at once with the same cause. */
DT_TEST_TIMEOUT(comm_local_missing_member_is_named, 30)
{
    int G = 3;
    int64_t timeout = 400;
    dt_comm_local *l = local_new(G);
    member_ctx ctx[MAXG];
    float bufs[MAXG][10] = {{0}};
    for (int m = 0; m < G; m++)
        ctx[m] = (member_ctx){.l = l,
                              .member = m,
                              .n = 10,
                              .buf = bufs[m],
                              .timeout_ms = timeout,
                              .script = RUN_ALLREDUCE,
                              .skip = m == 2};
    run_members(G, ctx);
    for (int m = 0; m < 2; m++) {
        ASSERT_EQ(ctx[m].st, DT_ETIMEDOUT);
        ASSERT_CONTAINS(ctx[m].msg, "/cpu:2 did not start it");
        ASSERT_CONTAINS(ctx[m].msg, "all-reduce #0");
        ASSERT_EQ(ctx[m].then_ran, 0);
        ASSERT_GE(ctx[m].elapsed_ms, timeout - 5);
        ASSERT_LE(ctx[m].elapsed_ms, timeout + 1000); /* a loaded 2-core CI box */
        fprintf(stderr, "member %d released after %lld ms (deadline %lld ms): %s\n", m,
                (long long)ctx[m].elapsed_ms, (long long)timeout, ctx[m].msg);
    }
    dt_err err = {0};
    int64_t t0 = dt_now_ms();
    ASSERT_STATUS(dt_comm_local_run(l, 2, DT_COMM_LOCAL_ALLREDUCE, bufs[2], 10, 5000, &err),
                  DT_ETIMEDOUT);
    ASSERT_LT(dt_now_ms() - t0, 100);
    ASSERT_CONTAINS(err.msg, "/cpu:2 did not start it");
    dt_comm_local_free(l);
}

/* A wait shorter than the start's deadline also ends in bounded time, naming the missing. */
DT_TEST_TIMEOUT(comm_local_wait_deadline, 30)
{
    dt_comm_local *l = local_new(2);
    float b[4] = {1, 2, 3, 4};
    dt_comm_local_req *q;
    dt_err err = {0};
    ASSERT_OK(dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, b, 4, 60000, NULL, NULL, &q, &err),
              &err);
    int64_t t0 = dt_now_ms();
    ASSERT_STATUS(dt_comm_local_wait(q, 200, &err), DT_ETIMEDOUT);
    int64_t el = dt_now_ms() - t0;
    ASSERT_GE(el, 195);
    ASSERT_LE(el, 700);
    ASSERT_CONTAINS(err.msg, "/cpu:1 did not start it");
    dt_comm_local_free(l);
}

/* Members that disagree on a collective fail it, naming both sides. */
DT_TEST_TIMEOUT(comm_local_mismatch, 30)
{
    dt_comm_local *l = local_new(2);
    float a[8] = {0}, b[8] = {0};
    dt_comm_local_req *q;
    dt_err err = {0}, err2 = {0};
    ASSERT_OK(dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, a, 8, 5000, NULL, NULL, &q, &err),
              &err);
    ASSERT_STATUS(dt_comm_local_run(l, 1, DT_COMM_LOCAL_ALLREDUCE, b, 7, 5000, &err2), DT_EINVAL);
    ASSERT_CONTAINS(err2.msg, "/cpu:0 started all-reduce of 8 floats but /cpu:1 all-reduce of 7 ");
    ASSERT_STATUS(dt_comm_local_wait(q, 5000, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "/cpu:1");
    dt_comm_local_free(l);
}

/* Abort from another thread releases a waiter at once. */
static void *abort_later(void *arg)
{
    dt_sleep_ms(100);
    dt_comm_local_abort(arg, "the job was cancelled");
    return NULL;
}

DT_TEST_TIMEOUT(comm_local_abort_releases, 30)
{
    dt_comm_local *l = local_new(2);
    float a[4] = {0};
    dt_err err = {0};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, abort_later, l), 0);
    int64_t t0 = dt_now_ms();
    dt_status st = dt_comm_local_run(l, 0, DT_COMM_LOCAL_ALLREDUCE, a, 4, 20000, &err);
    int64_t el = dt_now_ms() - t0;
    pthread_join(th, NULL);
    ASSERT_EQ(st, DT_ECANCELED);
    ASSERT_CONTAINS(err.msg, "the job was cancelled");
    ASSERT_LT(el, 2000);
    dt_comm_local_free(l);
}

DT_TEST(comm_local_bad_arguments)
{
    dt_err err = {0};
    dt_comm_local *l = NULL;
    ASSERT_STATUS(dt_comm_local_new(&(dt_comm_local_opts){.members = 0}, &l, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "members must be 1..64, got 0");
    ASSERT_STATUS(dt_comm_local_new(&(dt_comm_local_opts){.members = 65}, &l, &err), DT_EINVAL);
    ASSERT_TRUE(l == NULL);
    dt_comm_local_free(NULL);
    l = local_new(2);
    float a[2];
    dt_comm_local_req *q;
    ASSERT_STATUS(
        dt_comm_local_start(l, 2, DT_COMM_LOCAL_ALLREDUCE, a, 2, 1000, NULL, NULL, &q, &err),
        DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "member 2 out of range 0..1");
    ASSERT_STATUS(dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, a, 2, 0, NULL, NULL, &q, &err),
                  DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "deadline");
    ASSERT_STATUS(
        dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, NULL, 2, 1000, NULL, NULL, &q, &err),
        DT_EINVAL);
    /* none of those counted as a start: a proper pair still matches */
    float b[2] = {1, 2}, c[2] = {3, 4};
    ASSERT_OK(dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, b, 2, 1000, NULL, NULL, &q, &err),
              &err);
    ASSERT_OK(dt_comm_local_run(l, 1, DT_COMM_LOCAL_ALLREDUCE, c, 2, 1000, &err), &err);
    ASSERT_OK(dt_comm_local_wait(q, 1000, &err), &err);
    ASSERT_FEQ(b[0], 4);
    ASSERT_FEQ(c[1], 6);
    dt_comm_local_free(l);
}

/* Broadcast: bytes (not whole floats) of the root's buffer into every member's. */
typedef struct bc_ctx {
    dt_comm_local *l;
    int member, root;
    unsigned char buf[13];
    dt_status st;
    char msg[1024];
} bc_ctx;

static void *bc_main(void *arg)
{
    bc_ctx *b = arg;
    dt_err err = {0};
    b->st = dt_comm_local_broadcast(b->l, b->member, b->buf, sizeof b->buf, b->root, 5000, &err);
    snprintf(b->msg, sizeof b->msg, "%s", err.msg);
    return NULL;
}

DT_TEST_TIMEOUT(comm_local_broadcast, 30)
{
    int G = 3;
    dt_comm_local *l = local_new(G);
    bc_ctx b[MAXG];
    pthread_t th[MAXG];
    int up[MAXG] = {0};
    for (int m = 0; m < G; m++) {
        b[m] = (bc_ctx){.l = l, .member = m, .root = 1};
        memset(b[m].buf, 'a' + m, sizeof b[m].buf);
        up[m] = pthread_create(&th[m], NULL, bc_main, &b[m]) == 0;
    }
    for (int m = 0; m < G; m++)
        if (up[m])
            pthread_join(th[m], NULL);
    dt_comm_local_free(l);
    for (int m = 0; m < G; m++) {
        ASSERT_TRUE(up[m]);
        if (b[m].st != DT_OK)
            DT_FAIL_("member %d: %s", m, b[m].msg);
        for (size_t i = 0; i < sizeof b[m].buf; i++)
            ASSERT_EQ(b[m].buf[i], 'b');
    }
    /* roots that disagree are a mismatch, named */
    l = local_new(2);
    float x = 0;
    dt_comm_local_req *q;
    dt_err err = {0};
    ASSERT_OK(dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, &x, 1, 5000, NULL, NULL, &q, &err),
              &err);
    ASSERT_STATUS(dt_comm_local_broadcast(l, 1, &x, 4, 0, 5000, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg,
                    "/cpu:0 started all-reduce of 1 floats but /cpu:1 broadcast of 4 from 0");
    ASSERT_STATUS(dt_comm_local_wait(q, 5000, &err), DT_EINVAL);
    ASSERT_STATUS(dt_comm_local_broadcast(l, 0, &x, 4, 2, 5000, &err), DT_EINVAL);
    dt_comm_local_free(l);
}

/* What the hung-trainer watchdog reads (dt_comm_local_idle_ms), and the busy time the
 * step-phase log reports: a member with a started, unfinished collective is "in it" (-1); one
 * that has not joined it, or whose collectives are all done, is idle. */
DT_TEST_TIMEOUT(comm_local_idle_and_busy, 30)
{
    dt_comm_local *l = local_new(2);
    dt_err err = {0};
    ASSERT_GE(dt_comm_local_idle_ms(l, 0), 0);
    ASSERT_EQ(dt_comm_local_idle_ms(l, 2), -1); /* out of range */
    ASSERT_EQ(dt_comm_local_busy_ns(l), 0);
    static float a[1 << 18], b[1 << 18];
    dt_comm_local_req *qa, *qb;
    ASSERT_STATUS(dt_comm_local_start(l, 0, DT_COMM_LOCAL_ALLREDUCE, a, 1 << 18, 10000, NULL, NULL,
                                      &qa, &err),
                  DT_OK);
    ASSERT_EQ(dt_comm_local_idle_ms(l, 0), -1); /* member 0 waits for member 1 */
    ASSERT_GE(dt_comm_local_idle_ms(l, 1), 0);  /* member 1 is not in it yet */
    ASSERT_STATUS(dt_comm_local_start(l, 1, DT_COMM_LOCAL_ALLREDUCE, b, 1 << 18, 10000, NULL, NULL,
                                      &qb, &err),
                  DT_OK);
    ASSERT_STATUS(dt_comm_local_wait(qa, 10000, &err), DT_OK);
    ASSERT_STATUS(dt_comm_local_wait(qb, 10000, &err), DT_OK);
    ASSERT_GE(dt_comm_local_idle_ms(l, 0), 0);
    ASSERT_GE(dt_comm_local_idle_ms(l, 1), 0);
    ASSERT_GT(dt_comm_local_busy_ns(l), 0); /* a 1 MB pass took some time */
    dt_comm_local_free(l);
}
