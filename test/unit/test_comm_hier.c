/* The hierarchical all-reduce (comm.h, dt_comm_hier) over real gRPC rings on loopback: H
 * in-process daemons (rpc server + comm hub each), each with G replica threads and its in-host
 * comm, against the flat expectation over H * G ranks. Threads record what they saw; the main
 * thread asserts after joining every one of them. */
#include "comm/comm.h"
#include "core/clock.h"
#include "dt_test.h"
#include "test_comm_util.h"
#include "rpc/rpc.h"

#include <pthread.h>
#include <stdint.h>

#define MAXH   4
#define MAXG   3
#define NSIZES 7

static tc_node nodes[MAXH];
static const char *addrs[MAXH];
static const char *host_names[MAXH] = {"worker:0", "worker:1", "worker:2", "worker:3"};

typedef struct replica {
    struct host *host;
    int member, rank; /* rank: host * G + member, the flat ring's order */
    int skip;         /* never calls (the failure test) */
    float *out[NSIZES];
    unsigned char bc[37]; /* broadcast from the last replica */
    char where[16];       /* the failing stage */
    dt_status st;
    char msg[1024];
    int64_t elapsed_ms;
} replica;

typedef struct host {
    int index, H, G;
    int inexact;
    int64_t timeout_ms;
    dt_comm_hier *hier;
    dt_comm_local *local;
    replica rep[MAXG];
    uint64_t busy_in[MAXG], busy_ring[MAXG]; /* dt_comm_hier_busy_ns at the end */
    dt_status st;
    char msg[1024];
} host;

static size_t sizes[NSIZES];
static size_t big_n; /* 0: 1 MiB + 12 bytes as the largest size; else this many floats */

static float ival(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 13) % 1001) - 500.0f;
}

static float fval(size_t i, int rank)
{
    return ival(i, rank) / 3.7f + (float)rank * 0.1f;
}

static void *replica_main(void *arg)
{
    replica *r = arg;
    host *h = r->host;
    dt_err err = {0};
    if (r->skip)
        return NULL;
    int64_t t0 = dt_now_ms();
    float (*val)(size_t, int) = h->inexact ? fval : ival;
    /* Sizes one at a time, then all of them in flight at once, as fit starts its buckets
     * during backward and waits for them afterwards. */
    for (int pass = 0; pass < 2 && r->st == DT_OK; pass++) {
        dt_comm_hier_req *q[NSIZES] = {0};
        for (int s = 0; s < NSIZES; s++) {
            for (size_t i = 0; i < sizes[s]; i++)
                r->out[s][i] = val(i, r->rank);
            dt_status st = dt_comm_hier_allreduce_start(h->hier, r->member, r->out[s], sizes[s],
                                                        h->timeout_ms, &q[s], &err);
            if (st == DT_OK && pass == 0) {
                st = dt_comm_hier_wait(q[s], h->timeout_ms, &err);
                q[s] = NULL;
            }
            if (st != DT_OK) {
                r->st = st;
                snprintf(r->msg, sizeof r->msg, "%s", err.msg);
                break;
            }
        }
        for (int s = 0; s < NSIZES; s++) /* every started request is waited for */
            if (q[s]) {
                dt_status st = dt_comm_hier_wait(q[s], h->timeout_ms, &err);
                if (st != DT_OK && r->st == DT_OK) {
                    r->st = st;
                    snprintf(r->msg, sizeof r->msg, "%s", err.msg);
                }
            }
    }
    if (r->st == DT_OK) {
        int root = h->H * h->G - 1;
        memset(r->bc, r->rank + 1, sizeof r->bc);
        dt_status st = dt_comm_hier_broadcast(h->hier, r->member, r->bc, sizeof r->bc, root,
                                              h->timeout_ms, &err);
        if (st != DT_OK) {
            r->st = st;
            snprintf(r->msg, sizeof r->msg, "%s", err.msg);
            snprintf(r->where, sizeof r->where, "broadcast");
        }
    }
    r->elapsed_ms = dt_now_ms() - t0;
    return NULL;
}

static void *host_main(void *arg)
{
    host *h = arg;
    dt_err err = {0};
    char names[MAXG][48];
    const char *np[MAXG];
    for (int m = 0; m < h->G; m++) {
        snprintf(names[m], sizeof names[m], "%s /cpu:%d", host_names[h->index], m);
        np[m] = names[m];
    }
    h->st = dt_comm_local_new(&(dt_comm_local_opts){.members = h->G, .names = np}, &h->local, &err);
    if (h->st == DT_OK) {
        dt_comm_hier_opts o = {.local = h->local,
                               .ring = {.rank = h->index,
                                        .world = h->H,
                                        .addresses = addrs,
                                        .names = host_names,
                                        .session = 0x41e7,
                                        .hub = nodes[h->index].hub,
                                        .connect_timeout_ms = 10000}};
        h->st = dt_comm_hier_new(&o, &h->hier, &err);
    }
    if (h->st != DT_OK) {
        snprintf(h->msg, sizeof h->msg, "%s", err.msg);
        dt_comm_local_free(h->local);
        return NULL;
    }
    pthread_t th[MAXG];
    int up[MAXG] = {0};
    for (int m = 0; m < h->G; m++)
        up[m] = pthread_create(&th[m], NULL, replica_main, &h->rep[m]) == 0;
    for (int m = 0; m < h->G; m++)
        if (up[m])
            pthread_join(th[m], NULL);
    for (int m = 0; m < h->G; m++)
        if (!up[m])
            h->rep[m].st = DT_ENOMEM;
    for (int m = 0; m < h->G; m++)
        dt_comm_hier_busy_ns(h->hier, m, &h->busy_in[m], &h->busy_ring[m]);
    dt_comm_hier_free(h->hier);
    dt_comm_local_free(h->local);
    return NULL;
}

/* Runs H hosts x G replicas (skip: the flat rank that never calls, or -1) and joins them all. */
static void run_hosts(int H, int G, int inexact, int skip, int64_t timeout_ms, host *hs)
{
    size_t k = 1000;
    size_t base[NSIZES] = {0,
                           1,
                           (size_t)G - 1,
                           (size_t)(H * G) * k + 1,
                           (size_t)G * k + 1,
                           big_n ? big_n : (1u << 20) / 4 + 3,
                           5};
    memcpy(sizes, base, sizeof sizes);
    tc_nodes_up(nodes, addrs, H, NULL);
    pthread_t th[MAXH];
    int up[MAXH] = {0};
    for (int i = 0; i < H; i++) {
        hs[i] = (host){.index = i, .H = H, .G = G, .inexact = inexact, .timeout_ms = timeout_ms};
        for (int m = 0; m < G; m++) {
            replica *r = &hs[i].rep[m];
            *r = (replica){.host = &hs[i], .member = m, .rank = i * G + m};
            r->skip = r->rank == skip;
            for (int s = 0; s < NSIZES; s++) {
                r->out[s] = calloc(sizes[s] + 1, sizeof(float));
                ASSERT_TRUE(r->out[s]);
            }
        }
    }
    for (int i = 0; i < H; i++)
        up[i] = pthread_create(&th[i], NULL, host_main, &hs[i]) == 0;
    for (int i = 0; i < H; i++)
        if (up[i])
            pthread_join(th[i], NULL);
    tc_nodes_down(nodes, H);
    for (int i = 0; i < H; i++)
        ASSERT_TRUE(up[i]);
}

static void free_hosts(int H, int G, host *hs)
{
    for (int i = 0; i < H; i++)
        for (int m = 0; m < G; m++)
            for (int s = 0; s < NSIZES; s++)
                free(hs[i].rep[m].out[s]);
}

static void check_hier(int H, int G, int inexact)
{
    host hs[MAXH];
    run_hosts(H, G, inexact, -1, 30000, hs);
    for (int i = 0; i < H; i++) {
        if (hs[i].st != DT_OK)
            DT_FAIL_("H %d G %d: host %d: %s", H, G, i, hs[i].msg);
        for (int m = 0; m < G; m++)
            if (hs[i].rep[m].st != DT_OK)
                DT_FAIL_("H %d G %d: host %d replica %d: %s %s", H, G, i, m, hs[i].rep[m].where,
                         hs[i].rep[m].msg);
    }
    /* The busy times the step-phase log reports: the in-host engine ran collectives of 1 MB;
     * a member's host ring ran only with several hosts. */
    for (int h = 0; h < H; h++)
        for (int m = 0; m < G; m++) {
            if (G > 1 && hs[h].busy_in[m] == 0)
                DT_FAIL_("H %d G %d: host %d: no in-host busy time", H, G, h);
            if ((H > 1) != (hs[h].busy_ring[m] > 0))
                DT_FAIL_("H %d G %d: host %d replica %d: host ring busy %llu ns", H, G, h, m,
                         (unsigned long long)hs[h].busy_ring[m]);
        }
    float (*val)(size_t, int) = inexact ? fval : ival;
    const float *first = NULL;
    for (int h = 0; h < H; h++)
        for (int m = 0; m < G; m++)
            for (size_t i = 0; i < sizeof hs[h].rep[m].bc; i++)
                if (hs[h].rep[m].bc[i] != H * G)
                    DT_FAIL_("H %d G %d: host %d replica %d: broadcast byte %zu = %d, want %d", H,
                             G, h, m, i, hs[h].rep[m].bc[i], H * G);
    for (int s = 0; s < NSIZES; s++) {
        size_t n = sizes[s];
        first = hs[0].rep[0].out[s];
        for (size_t i = 0; i < n; i++) {
            /* the flat ring's sum over H * G ranks, in rank order, and its magnitude */
            float want = val(i, 0), mag = fabsf(want);
            for (int r = 1; r < H * G; r++) {
                want += val(i, r);
                mag += fabsf(val(i, r));
            }
            float got = first[i];
            bool ok = inexact ? fabsf(got - want) <= 4e-7f * (float)(H * G) * mag : got == want;
            if (!ok)
                DT_FAIL_("H %d G %d n %zu: out[%zu] = %.9g, want %.9g", H, G, n, i, got, want);
        }
        for (int h = 0; h < H; h++) /* every replica of every host: the same bits */
            for (int m = 0; m < G; m++)
                if (memcmp(hs[h].rep[m].out[s], first, n * sizeof(float)) != 0)
                    DT_FAIL_("H %d G %d n %zu: host %d replica %d differs from host 0 replica 0", H,
                             G, n, h, m);
    }
    free_hosts(H, G, hs);
}

DT_TEST_TIMEOUT(comm_hier_2_hosts_2_replicas, 120)
{
    int64_t t0 = dt_now_ms();
    check_hier(2, 2, 0);
    check_hier(2, 2, 1);
    fprintf(stderr, "2 hosts x 2 replicas, exact and inexact: %lld ms\n",
            (long long)(dt_now_ms() - t0));
}

DT_TEST_TIMEOUT(comm_hier_shapes, 180)
{
    check_hier(1, 3, 0); /* one host: the in-host all-reduce alone */
    check_hier(3, 1, 0); /* one replica per host: the ring alone */
    check_hier(2, 3, 0); /* shards that do not divide n */
    check_hier(3, 2, 1);
}

DT_TEST_TIMEOUT(comm_hier_four_hosts, 180)
{
    check_hier(4, 2, 0);
    check_hier(4, 1, 1);
}

/* The rest of 1..4 hosts x 1..3 replicas (the tests above hold the others). */
DT_TEST_TIMEOUT(comm_hier_matrix, 240)
{
    int64_t t0 = dt_now_ms();
    check_hier(1, 1, 0);
    check_hier(1, 2, 1);
    check_hier(2, 1, 0);
    check_hier(3, 3, 0);
    check_hier(4, 3, 1);
    fprintf(stderr, "1x1, 1x2, 2x1, 3x3, 4x3: %lld ms\n", (long long)(dt_now_ms() - t0));
}

/* 64 MB a replica, 2 hosts x 2 replicas: exact against the flat sum, one set of bits. */
DT_TEST_TIMEOUT(comm_hier_64mb, 180)
{
    big_n = (64u << 20) / sizeof(float) + 3;
    int64_t t0 = dt_now_ms();
    check_hier(2, 2, 0);
    fprintf(stderr, "2 hosts x 2 replicas with 64 MB: %lld ms\n", (long long)(dt_now_ms() - t0));
}

/* A replica that never calls: its siblings fail naming it within the deadline, and the other
 * host's replicas fail too (the rings' notices), within a bound; every thread ends. */
DT_TEST_TIMEOUT(comm_hier_missing_replica, 60)
{
    host hs[MAXH];
    int64_t timeout = 1500;
    run_hosts(2, 2, 0, 3, timeout, hs); /* rank 3: worker:1's /cpu:1 */
    for (int i = 0; i < 2; i++)
        if (hs[i].st != DT_OK)
            DT_FAIL_("host %d: %s", i, hs[i].msg);
    for (int rank = 0; rank < 3; rank++) {
        replica *r = &hs[rank / 2].rep[rank % 2];
        fprintf(stderr, "rank %d: %s after %lld ms: %s\n", rank, dt_status_name(r->st),
                (long long)r->elapsed_ms, r->msg);
        ASSERT_NE(r->st, DT_OK);
        ASSERT_LE(r->elapsed_ms, timeout + 3000);
    }
    /* every replica reports the cause, not an echo of a sibling's lateness */
    for (int rank = 0; rank < 3; rank++)
        ASSERT_CONTAINS(hs[rank / 2].rep[rank % 2].msg, "worker:1 /cpu:1 did not start it");
    free_hosts(2, 2, hs);
}
