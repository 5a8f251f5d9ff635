/* test_gpu_nccl.c - NCCL among one process's GPUs (the api's clique entries, nccl.cu): member
 * threads bound to their GPUs all-reduce and broadcast device and host buffers, every member
 * must end with the same bits, within 1e-6 of the sum in double, and a member whose sibling
 * never calls must get an error once the clique is aborted instead of waiting forever. Every
 * wait has a deadline: a watchdog fails the test (it never hangs). Tests with two members need
 * two GPUs, or one GPU and an NCCL that allows two ranks on it (NCCL_MULTI_RANK_GPU_ENABLE,
 * NCCL >= 2.30); they skip naming why otherwise. */
#include "test_gpu_util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define MAX_MEMBERS 8
#define NSIZES      3
static const size_t sizes[NSIZES] = {1, 1000, ((size_t)1 << 20) + 3};

/* --- watchdog: a wait past its deadline fails the test instead of hanging it ---------------- */

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static int wd_gen; /* bumped by every arm and disarm: a watchdog of an older one stands down */

typedef struct wd_arg {
    int gen, seconds;
    char what[128];
} wd_arg;

static void *watchdog(void *arg)
{
    wd_arg a = *(wd_arg *)arg;
    free(arg);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += a.seconds;
    pthread_mutex_lock(&wd_mu);
    int rc = 0;
    while (a.gen == wd_gen && rc == 0)
        rc = pthread_cond_timedwait(&wd_cv, &wd_mu, &dl);
    if (a.gen == wd_gen) {
        fprintf(stderr, "watchdog: %s did not end within %d s\n", a.what, a.seconds);
        fflush(stderr);
        _exit(1); /* threads are stuck in CUDA or NCCL: exit's handlers could wait for them */
    }
    pthread_mutex_unlock(&wd_mu);
    return NULL;
}

/* Fails the test unless wd_disarm (or the next wd_arm) comes within seconds. */
static void wd_arm(int seconds, const char *what)
{
    wd_arg *a = malloc(sizeof *a);
    ASSERT_TRUE(a != NULL);
    pthread_mutex_lock(&wd_mu);
    a->gen = ++wd_gen;
    pthread_cond_broadcast(&wd_cv);
    pthread_mutex_unlock(&wd_mu);
    a->seconds = seconds;
    snprintf(a->what, sizeof a->what, "%s", what);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, watchdog, a), 0);
    pthread_detach(t);
}

static void wd_disarm(void)
{
    pthread_mutex_lock(&wd_mu);
    wd_gen++;
    pthread_cond_broadcast(&wd_cv);
    pthread_mutex_unlock(&wd_mu);
}

/* --- setup ---------------------------------------------------------------------------------- */

static const dt_nn_cuda_api *nccl_api(void)
{
    const dt_nn_cuda_api *api = NULL;
    dt_err err = {0};
    if (dt_nn_gpu_load(&api, &err) != DT_OK)
        DT_SKIP("no GPU: %s", err.msg);
    return api;
}

/* The devices of an n-member clique: 0..n-1 where the host has them; with one GPU, n ranks
 * on /gpu:0 if this NCCL allows it (asked for through its environment variable), else a
 * skip naming why. Returns the members made, the clique in *out. */
static int clique_for(const dt_nn_cuda_api *api, int want, int *devs, void **out)
{
    char why[512] = "";
    int count = dt_nn_gpu_count(why, sizeof why);
    if (count == 0)
        DT_SKIP("no GPU: %s", why);
    int n = want > 0 ? want : (count < MAX_MEMBERS ? count : MAX_MEMBERS);
    if (n < 2)
        n = 2;
    bool shared = count < n;
    if (shared)
        setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0); /* this test process only */
    for (int i = 0; i < n; i++)
        devs[i] = shared ? 0 : i;
    char msg[512] = "";
    if (api->clique_new(n, devs, out, msg, sizeof msg) != 0) {
        ASSERT_TRUE(*out == NULL);
        ASSERT_TRUE(msg[0] != '\0');
        if (shared)
            DT_SKIP("%d NCCL members need %d GPUs (this host has %d) or an NCCL that allows "
                    "several ranks on one GPU: %s",
                    n, n, count, msg);
        DT_FAIL_("clique_new over %d GPUs: %s", n, msg);
    }
    ASSERT_TRUE(*out != NULL);
    return n;
}

typedef struct member {
    const dt_nn_cuda_api *api;
    void *c;
    int m, n, dev;
    char err[1200]; /* the member's first failure; "" when none */
    /* agree: results per round, size and path (0 device, 1 host) */
    float *sum[2][NSIZES][2];
    unsigned char *bc[NSIZES][2];
    /* abort: what the lonely member saw */
    int script;
    int call_rc, later_rc;
    char call_msg[1100], later_msg[512];
} member;

/* Records the member's first failure and aborts the clique, so its siblings do not wait for a
 * member that gave up (what the trainer does with a failed replica). */
static void member_fail(member *p, const char *what, const char *msg)
{
    if (!p->err[0])
        snprintf(p->err, sizeof p->err, "member %d (/gpu:%d): %s: %s", p->m, p->dev, what, msg);
    p->api->clique_abort(p->c);
}

static uint64_t seed_of(int round, size_t s, int m)
{
    (void)round; /* both rounds use the same inputs: the second checks the bits repeat */
    return 1000u * (uint64_t)(s + 1) + (uint64_t)m;
}

/* Member m's bytes for a broadcast: the root's are random, the others' a marker. */
static unsigned char *bc_input(size_t bytes, int m, int root)
{
    unsigned char *b = malloc(bytes ? bytes : 1);
    dt_rng r;
    dt_rng_seed(&r, 77 + bytes);
    for (size_t i = 0; i < bytes; i++)
        b[i] = m == root ? (unsigned char)dt_rng_u64(&r) : (unsigned char)(0xa0 + m);
    return b;
}

static void *agree_member(void *arg)
{
    member *p = arg;
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    char msg[512];
    if (dt_nn_gpu_bind(p->dev, false, &g, &err) != DT_OK) {
        member_fail(p, "bind", err.msg);
        return NULL;
    }
    for (int round = 0; round < 2 && !p->err[0]; round++)
        for (size_t s = 0; s < NSIZES && !p->err[0]; s++) {
            size_t n = sizes[s];
            float *x = gpu_randn(n, 1, seed_of(round, s, p->m));
            float *d = g->alloc(n * sizeof(float));
            if (!d) {
                free(x);
                member_fail(p, "alloc", "out of memory");
                break;
            }
            g->upload(d, x, n * sizeof(float));
            if (p->api->clique_allreduce(p->c, p->m, d, n, msg, sizeof msg) != 0)
                member_fail(p, "allreduce of device memory", msg);
            /* it ran on the member's side stream: the download must wait for it */
            if (!p->err[0] && p->api->clique_join(p->c, p->m, msg, sizeof msg) != 0)
                member_fail(p, "join", msg);
            float *out = malloc(n * sizeof(float));
            g->download(out, d, n * sizeof(float));
            g->free(d);
            p->sum[round][s][0] = out;
            /* host memory: staged through the device, the result there when the call returns */
            if (!p->err[0] && p->api->clique_allreduce(p->c, p->m, x, n, msg, sizeof msg) != 0)
                member_fail(p, "allreduce of host memory", msg);
            p->sum[round][s][1] = x;
        }
    for (size_t s = 0; s < NSIZES && !p->err[0]; s++) {
        size_t bytes = sizes[s];
        unsigned char *x = bc_input(bytes, p->m, 1);
        unsigned char *d = g->alloc(bytes);
        if (!d) {
            free(x);
            member_fail(p, "alloc", "out of memory");
            break;
        }
        g->upload(d, x, bytes);
        if (p->api->clique_broadcast(p->c, p->m, d, bytes, 1, msg, sizeof msg) != 0)
            member_fail(p, "broadcast of device memory", msg);
        unsigned char *out = malloc(bytes);
        g->download(out, d, bytes);
        g->free(d);
        p->bc[s][0] = out;
        if (!p->err[0] && p->api->clique_broadcast(p->c, p->m, x, bytes, 1, msg, sizeof msg) != 0)
            member_fail(p, "broadcast of host memory", msg);
        p->bc[s][1] = x;
    }
    /* nothing to move: every member returns at once */
    if (!p->err[0] && p->api->clique_allreduce(p->c, p->m, NULL, 0, msg, sizeof msg) != 0)
        member_fail(p, "allreduce of 0 floats", msg);
    if (!p->err[0] && p->api->clique_broadcast(p->c, p->m, NULL, 0, 1, msg, sizeof msg) != 0)
        member_fail(p, "broadcast of 0 bytes", msg);
    if (dt_nn_gpu_sync(&err) != DT_OK)
        member_fail(p, "sync", err.msg);
    dt_nn_gpu_unbind();
    return NULL;
}

/* Every member's sums bitwise equal to member 0's, in both paths and both rounds, and within
 * 1e-6 (relative L2) of the sum in double; broadcasts equal to the root's bytes. */
static void check_agree(member *mb, int n)
{
    int failed = 0;
    for (int m = 0; m < n; m++)
        if (mb[m].err[0]) /* all of them: the first to fail aborts the others */
            fprintf(stderr, "%s\n", mb[m].err), failed++;
    ASSERT_EQ(failed, 0);
    for (size_t s = 0; s < NSIZES; s++) {
        size_t k = sizes[s];
        double *ref = calloc(k, sizeof(double));
        for (int m = 0; m < n; m++) {
            float *x = gpu_randn(k, 1, seed_of(0, s, m));
            for (size_t i = 0; i < k; i++)
                ref[i] += x[i];
            free(x);
        }
        float *reff = malloc(k * sizeof(float));
        for (size_t i = 0; i < k; i++)
            reff[i] = (float)ref[i];
        const float *first = mb[0].sum[0][s][0];
        for (int m = 0; m < n; m++)
            for (int round = 0; round < 2; round++)
                for (int path = 0; path < 2; path++) {
                    const float *got = mb[m].sum[round][s][path];
                    ASSERT_TRUE(got != NULL);
                    if (memcmp(got, first, k * sizeof(float)) != 0)
                        DT_FAIL_("%zu floats: member %d (round %d, %s memory) differs from "
                                 "member 0 (round 0, device memory)",
                                 k, m, round, path ? "host" : "device");
                }
        double e = gpu_rel_l2(first, reff, k);
        printf("%d members, %zu floats: relative L2 error %.3g against the sum in double\n", n, k,
               e);
        ASSERT_FLE(e, 1e-6);
        free(ref);
        free(reff);
        unsigned char *root = bc_input(k, 1, 1);
        for (int m = 0; m < n; m++)
            for (int path = 0; path < 2; path++)
                if (memcmp(mb[m].bc[s][path], root, k) != 0)
                    DT_FAIL_("broadcast of %zu bytes from member 1: member %d (%s memory) did not "
                             "get the root's bytes",
                             k, m, path ? "host" : "device");
        free(root);
    }
    for (int m = 0; m < n; m++) {
        for (int round = 0; round < 2; round++)
            for (size_t s = 0; s < NSIZES; s++)
                for (int path = 0; path < 2; path++)
                    free(mb[m].sum[round][s][path]);
        for (size_t s = 0; s < NSIZES; s++)
            for (int path = 0; path < 2; path++)
                free(mb[m].bc[s][path]);
    }
}

static void run_members(member *mb, int n, void *(*fn)(void *))
{
    pthread_t t[MAX_MEMBERS];
    for (int m = 0; m < n; m++)
        ASSERT_EQ(pthread_create(&t[m], NULL, fn, &mb[m]), 0);
    for (int m = 0; m < n; m++)
        pthread_join(t[m], NULL);
}

static void init_members(member *mb, int n, const dt_nn_cuda_api *api, void *c, const int *devs)
{
    memset(mb, 0, sizeof(member) * (size_t)n);
    for (int m = 0; m < n; m++) {
        mb[m].api = api;
        mb[m].c = c;
        mb[m].m = m;
        mb[m].n = n;
        mb[m].dev = devs[m];
    }
}

/* 2..8 members, one thread each: all-reduce of 1, 1000 and 2^20 + 3 floats in device and host
 * memory, twice; broadcast from member 1; calls that must fail before reaching NCCL. */
DT_TEST_TIMEOUT(gpu_nccl_members_agree, 300)
{
    const dt_nn_cuda_api *api = nccl_api();
    int devs[MAX_MEMBERS];
    void *c = NULL;
    wd_arm(240, "making the clique, the all-reduces and broadcasts");
    int n = clique_for(api, 0, devs, &c);

    /* refused before NCCL (no member waits for these): an unbound thread, a bad member, a
     * broadcast root out of range */
    char msg[512] = "";
    float one = 1;
    ASSERT_EQ(api->clique_allreduce(c, 0, &one, 1, msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "bound to no GPU");
    ASSERT_EQ(api->clique_allreduce(c, n, &one, 1, msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "member");
    ASSERT_EQ(api->clique_allreduce(NULL, 0, &one, 1, msg, sizeof msg), -1);

    member *mb = calloc(MAX_MEMBERS, sizeof *mb);
    init_members(mb, n, api, c, devs);
    run_members(mb, n, agree_member);
    check_agree(mb, n);

    /* the clique still works after those refusals: a second clique user on member 0's device
     * bound here, calling as member 0 with a root out of range, is refused too */
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_nn_gpu_bind(devs[0], false, &g, &err), &err);
    ASSERT_EQ(api->clique_broadcast(c, 0, &one, sizeof one, n, msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "broadcast from member");
    if (devs[1] != devs[0]) {
        ASSERT_EQ(api->clique_allreduce(c, 1, &one, 1, msg, sizeof msg), -1);
        ASSERT_CONTAINS(msg, "called from a thread bound to /gpu:");
    }
    dt_nn_gpu_unbind();
    api->clique_free(c);
    wd_disarm();
    free(mb);
}

/* --- reduce-scatter and all-gather (the hierarchical all-reduce's in-host stages) ----------- */

#define NSHARDS 3
static const size_t shards[NSHARDS] = {1, 7, 1000};

/* Member m's input: integer values, so every sum is exact whatever the order. */
static float sharded_input(int m, size_t i)
{
    return (float)((m + 1) * (int)(i % 13) - 5);
}

typedef struct sharded {
    member *p;
    float *rs[NSHARDS], *ag[NSHARDS]; /* after the reduce-scatter, after the all-gather */
} sharded;

static void *sharded_member(void *arg)
{
    sharded *q = arg;
    member *p = q->p;
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    char msg[512];
    if (dt_nn_gpu_bind(p->dev, false, &g, &err) != DT_OK) {
        member_fail(p, "bind", err.msg);
        return NULL;
    }
    for (size_t s = 0; s < NSHARDS && !p->err[0]; s++) {
        size_t k = shards[s], n = k * (size_t)p->n;
        float *x = malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++)
            x[i] = sharded_input(p->m, i);
        float *d = gpu_up(g, x, n);
        if (p->api->clique_reduce_scatter(p->c, p->m, d, k, msg, sizeof msg) != 0 ||
            p->api->clique_join(p->c, p->m, msg, sizeof msg) != 0)
            member_fail(p, "reduce-scatter", msg);
        q->rs[s] = gpu_down(g, d, n);
        if (!p->err[0] && (p->api->clique_all_gather(p->c, p->m, d, k, msg, sizeof msg) != 0 ||
                           p->api->clique_join(p->c, p->m, msg, sizeof msg) != 0))
            member_fail(p, "all-gather", msg);
        q->ag[s] = gpu_down(g, d, n);
        g->free(d);
        free(x);
    }
    /* host memory is refused before NCCL (every member is, so none waits) */
    float h[4] = {0};
    if (!p->err[0] && p->api->clique_reduce_scatter(p->c, p->m, h, 1, msg, sizeof msg) != -1)
        member_fail(p, "a reduce-scatter of host memory", "accepted");
    else if (!p->err[0] && !strstr(msg, "device memory"))
        member_fail(p, "a reduce-scatter of host memory", msg);
    if (dt_nn_gpu_sync(&err) != DT_OK)
        member_fail(p, "sync", err.msg);
    dt_nn_gpu_unbind();
    return NULL;
}

/* 2..8 members: after the reduce-scatter member m's shard m is the members' sum of it (and its
 * other shards are its own input), after the all-gather every member holds every sum. */
DT_TEST_TIMEOUT(gpu_nccl_reduce_scatter_all_gather, 120)
{
    const dt_nn_cuda_api *api = nccl_api();
    int devs[MAX_MEMBERS];
    void *c = NULL;
    wd_arm(100, "the reduce-scatters and all-gathers");
    int n = clique_for(api, 0, devs, &c);
    member *mb = calloc(MAX_MEMBERS, sizeof *mb);
    sharded q[MAX_MEMBERS];
    memset(q, 0, sizeof q);
    init_members(mb, n, api, c, devs);
    pthread_t t[MAX_MEMBERS];
    for (int m = 0; m < n; m++) {
        q[m].p = &mb[m];
        ASSERT_EQ(pthread_create(&t[m], NULL, sharded_member, &q[m]), 0);
    }
    for (int m = 0; m < n; m++)
        pthread_join(t[m], NULL);
    for (int m = 0; m < n; m++)
        if (mb[m].err[0])
            DT_FAIL_("%s", mb[m].err);
    for (size_t s = 0; s < NSHARDS; s++) {
        size_t k = shards[s];
        for (int m = 0; m < n; m++)
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < k; i++) {
                    size_t at = (size_t)j * k + i;
                    float sum = 0;
                    for (int r = 0; r < n; r++)
                        sum += sharded_input(r, at);
                    float want_rs = j == m ? sum : sharded_input(m, at);
                    if (q[m].rs[s][at] != want_rs || q[m].ag[s][at] != sum)
                        DT_FAIL_("%d members, shard %zu: member %d, element %zu: reduce-scatter "
                                 "%g (want %g), all-gather %g (want %g)",
                                 n, k, m, at, q[m].rs[s][at], want_rs, q[m].ag[s][at], sum);
                }
        printf("%d members, shards of %zu floats: reduce-scatter and all-gather exact\n", n, k);
        for (int m = 0; m < n; m++) {
            free(q[m].rs[s]);
            free(q[m].ag[s]);
        }
    }
    api->clique_free(c);
    wd_disarm();
    free(mb);
}

/* --- abort ---------------------------------------------------------------------------------- */

enum {
    LONELY_COLD_HOST,  /* first call (NCCL still connects the pair), host memory */
    LONELY_WARM_HOST,  /* after a call together: the kernel waits on the GPU, host memory */
    LONELY_WARM_DEVICE /* likewise, device memory: the call returns, the sync waits */
};
static const char *const script_name[] = {"first call, host memory",
                                          "after a call together, host memory",
                                          "after a call together, device memory"};

static pthread_mutex_t warm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t warm_cv = PTHREAD_COND_INITIALIZER;
static int warm_done;

static void *lonely_member(void *arg)
{
    member *p = arg;
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    char msg[512];
    if (dt_nn_gpu_bind(p->dev, false, &g, &err) != DT_OK) {
        member_fail(p, "bind", err.msg);
        return NULL;
    }
    size_t n = 1000;
    float *x = gpu_randn(n, 1, 5 + p->m);
    float *d = g->alloc(n * sizeof(float));
    g->upload(d, x, n * sizeof(float));
    if (p->script != LONELY_COLD_HOST) {
        /* together once: the peers are connected, the next lonely call waits on the GPU */
        if (p->api->clique_allreduce(p->c, p->m, d, n, msg, sizeof msg) != 0)
            member_fail(p, "allreduce together", msg);
        if (!p->err[0] && p->api->clique_join(p->c, p->m, msg, sizeof msg) != 0)
            member_fail(p, "join", msg);
        if (dt_nn_gpu_sync(&err) != DT_OK)
            member_fail(p, "sync after the call together", err.msg);
        pthread_mutex_lock(&warm_mu);
        warm_done++;
        pthread_cond_broadcast(&warm_cv);
        pthread_mutex_unlock(&warm_mu);
    }
    if (p->m == 0 && !p->err[0]) {
        /* alone: member 1 never calls; the aborter ends this */
        if (p->script == LONELY_WARM_DEVICE) {
            p->call_rc = p->api->clique_allreduce(p->c, 0, d, n, p->call_msg, sizeof p->call_msg);
            if (p->call_rc == 0) /* the sync below then waits for the side stream's kernel */
                p->call_rc = p->api->clique_join(p->c, 0, p->call_msg, sizeof p->call_msg);
            if (p->call_rc == 0 && dt_nn_gpu_sync(&err) != DT_OK) /* may say nothing: NCCL's */
                snprintf(p->call_msg, sizeof p->call_msg, "sync: %s", err.msg); /* kernel ends */
        } else {
            p->call_rc = p->api->clique_allreduce(p->c, 0, x, n, p->call_msg, sizeof p->call_msg);
        }
        /* and every later call fails at once */
        p->later_rc = p->api->clique_allreduce(p->c, 0, d, n, p->later_msg, sizeof p->later_msg);
    }
    g->free(d);
    free(x);
    (void)dt_nn_gpu_sync(&err); /* an aborted collective may leave nothing or an error here */
    dt_nn_gpu_unbind();
    return NULL;
}

typedef struct aborter {
    const dt_nn_cuda_api *api;
    void *c;
} aborter;

static void *abort_after_1s(void *arg)
{
    aborter *a = arg;
    struct timespec ts = {1, 0};
    while (nanosleep(&ts, &ts) != 0)
        ;
    a->api->clique_abort(a->c);
    return NULL;
}

/* Member 0 calls, member 1 never does, a third thread aborts after 1 s: member 0's call (or its
 * sync, for device memory) ends within 10 s, the call fails naming the abort (host memory), and
 * member 0's and member 1's later calls fail at once. */
DT_TEST_TIMEOUT(gpu_nccl_abort_ends_a_lonely_member, 180)
{
    const dt_nn_cuda_api *api = nccl_api();
    for (int script = 0; script < 3; script++) {
        int devs[MAX_MEMBERS];
        void *c = NULL;
        wd_arm(60, "making a clique of 2");
        int n = clique_for(api, 2, devs, &c);
        ASSERT_EQ(n, 2);
        wd_disarm();
        member mb[2];
        init_members(mb, 2, api, c, devs);
        mb[0].script = mb[1].script = script;
        mb[0].call_rc = mb[0].later_rc = 99;
        pthread_mutex_lock(&warm_mu);
        warm_done = 0;
        pthread_mutex_unlock(&warm_mu);

        pthread_t t[2], ta;
        aborter ab = {api, c};
        wd_arm(60, "the call together");
        ASSERT_EQ(pthread_create(&t[0], NULL, lonely_member, &mb[0]), 0);
        ASSERT_EQ(pthread_create(&t[1], NULL, lonely_member, &mb[1]), 0);
        if (script != LONELY_COLD_HOST) {
            pthread_mutex_lock(&warm_mu);
            while (warm_done < 2)
                pthread_cond_wait(&warm_cv, &warm_mu); /* the watchdog bounds this */
            pthread_mutex_unlock(&warm_mu);
        }
        wd_disarm();
        /* 1 s for the abort, 10 s for the lonely member to come back */
        wd_arm(11, script_name[script]);
        ASSERT_EQ(pthread_create(&ta, NULL, abort_after_1s, &ab), 0);
        pthread_join(t[0], NULL);
        pthread_join(ta, NULL);
        wd_disarm();
        wd_arm(30, "member 1 and the teardown");
        pthread_join(t[1], NULL);
        for (int m = 0; m < 2; m++)
            if (mb[m].err[0])
                DT_FAIL_("%s: %s", script_name[script], mb[m].err);
        printf("%s: the call said: %s%s\n", script_name[script],
               mb[0].call_rc ? mb[0].call_msg : "(queued) ", mb[0].call_rc ? "" : mb[0].call_msg);
        if (script != LONELY_WARM_DEVICE) {
            ASSERT_EQ(mb[0].call_rc, -2); /* aborted: an echo, not this member's failure */
            ASSERT_CONTAINS(mb[0].call_msg, "aborted");
            ASSERT_CONTAINS(mb[0].call_msg, "clique_abort was called");
        }
        ASSERT_EQ(mb[0].later_rc, -2);
        ASSERT_CONTAINS(mb[0].later_msg, "aborted");

        /* member 1, from its own thread's binding, fails at once too */
        const dt_nn_ops *g = NULL;
        dt_err err = {0};
        ASSERT_OK(dt_nn_gpu_bind(devs[1], false, &g, &err), &err);
        float one = 1;
        char msg[512] = "";
        ASSERT_EQ(api->clique_allreduce(c, 1, &one, 1, msg, sizeof msg), -2);
        ASSERT_CONTAINS(msg, "aborted");
        ASSERT_EQ(api->clique_broadcast(c, 1, &one, sizeof one, 0, msg, sizeof msg), -2);
        ASSERT_CONTAINS(msg, "aborted");
        dt_nn_gpu_unbind();
        api->clique_abort(c); /* a second abort is harmless */
        api->clique_free(c);
        wd_disarm();
    }
}

/* One member (any host with a GPU, the lent single-GPU machine included): the sum over one
 * member is its input, bit for bit, in device and host memory; a broadcast from itself keeps
 * its bytes; after an abort every call fails naming it. */
DT_TEST_TIMEOUT(gpu_nccl_one_member, 120)
{
    const dt_nn_cuda_api *api = nccl_api();
    char why[512] = "";
    if (dt_nn_gpu_count(why, sizeof why) == 0)
        DT_SKIP("no GPU: %s", why);
    wd_arm(90, "a clique of one");
    int dev = 0;
    void *c = NULL;
    char msg[512] = "";
    if (api->clique_new(1, &dev, &c, msg, sizeof msg) != 0)
        DT_FAIL_("clique_new(1, /gpu:0): %s", msg);
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_nn_gpu_bind(0, false, &g, &err), &err);
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        float *x = gpu_randn(n, 1, 11 + s), *h = gpu_randn(n, 1, 11 + s);
        float *d = gpu_up(g, x, n);
        ASSERT_EQ(api->clique_allreduce(c, 0, d, n, msg, sizeof msg), 0);
        ASSERT_EQ(api->clique_join(c, 0, msg, sizeof msg), 0);
        float *out = gpu_down(g, d, n);
        ASSERT_TRUE(memcmp(out, x, n * sizeof(float)) == 0);
        ASSERT_EQ(api->clique_allreduce(c, 0, h, n, msg, sizeof msg), 0);
        ASSERT_TRUE(memcmp(h, x, n * sizeof(float)) == 0);
        ASSERT_EQ(api->clique_broadcast(c, 0, h, n * sizeof(float), 0, msg, sizeof msg), 0);
        ASSERT_TRUE(memcmp(h, x, n * sizeof(float)) == 0);
        g->free(d);
        free(x);
        free(h);
        free(out);
    }
    GPU_SYNC();
    api->clique_abort(c);
    float one = 1;
    ASSERT_EQ(api->clique_allreduce(c, 0, &one, 1, msg, sizeof msg), -2);
    ASSERT_CONTAINS(msg, "/gpu:0: the NCCL clique was aborted (clique_abort was called)");
    dt_nn_gpu_unbind();
    api->clique_free(c);
    wd_disarm();
}

/* Without a driver or device (CI), clique_new says why and the other entries take NULL. */
DT_TEST(gpu_nccl_new_says_why)
{
    const dt_nn_cuda_api *api = nccl_api();
    char why[512] = "";
    if (dt_nn_gpu_count(why, sizeof why) > 0)
        DT_SKIP("a GPU is here: the other gpu_nccl_ tests make real cliques");
    int devs[2] = {0, 1};
    void *c = (void *)&devs; /* must be cleared */
    char msg[512] = "";
    ASSERT_EQ(api->clique_new(2, devs, &c, msg, sizeof msg), -1);
    ASSERT_TRUE(c == NULL);
    ASSERT_CONTAINS(msg, "/gpu:0");
    printf("clique_new here: %s\n", msg);
    ASSERT_EQ(api->clique_new(0, devs, &c, msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "at least one");
    float one = 1;
    ASSERT_EQ(api->clique_allreduce(NULL, 0, &one, 1, msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "none");
    api->clique_abort(NULL);
    api->clique_free(NULL);
    /* and through libdtrain's wrapper, which the trainer calls: an I/O error naming NCCL and
     * the device, not "unsupported" (that one means a backend without NCCL) */
    dt_nn_gpu_clique *wc = NULL;
    dt_err err = {0};
    ASSERT_EQ(dt_nn_gpu_clique_new(2, devs, &wc, &err), DT_EIO);
    ASSERT_TRUE(wc == NULL);
    ASSERT_CONTAINS(err.msg, "NCCL: /gpu:0");
    dt_nn_gpu_clique_free(NULL);
}
