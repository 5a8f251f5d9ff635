/*
 * daemon_comm.c - the comm hub of the daemon and the all-reduce benchmark behind
 * `dtrain bench allreduce`.
 *
 * Comm.Bench (from the CLI, to any daemon; the chief by default) picks a fresh session and asks
 * every rank, itself included, to run Comm.BenchRun in parallel; each rank makes a comm for that
 * session, runs the sizes and reports its times; the coordinator keeps the slowest rank's time
 * per size. Both calls run on a thread each and answer through the loop (uv_async). With
 * devices G > 0 every rank then also runs the hierarchical all-reduce with G replica threads
 * (bench_hier), and the coordinator keeps its slowest replica's time per size (hier_rows).
 */
#include "service/service.h"

#include "comm.pb-c.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/log.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_RUN_TIMEOUT_MS (30 * 60 * 1000)
/* The coordinator waits for each rank's whole bench outside gRPC's poller (rpc.h), looking this
 * often. */
#define BENCH_WAIT_INTERVAL_MS 20
#define COLL_TIMEOUT_MS        60000
#define MAX_ROWS               64
#define MAX_WARMUP             100000

typedef struct bench_job {
    dt_service_bench *d;
    dt_rpc_call *call;
    int coordinator;
    Dtrain__V1__CommBenchRequest *req;
    Dtrain__V1__CommBenchReply reply;
    Dtrain__V1__CommBenchRow rows[MAX_ROWS], *row_ptrs[MAX_ROWS];
    Dtrain__V1__CommBenchRow hrows[MAX_ROWS], *hrow_ptrs[MAX_ROWS];
    char error[1024];
    dt_status st;
    dt_comm *comm;      /* the comm running now, for abort at shutdown (d->mu) */
    dt_comm_hier *hier; /* or the hierarchical one */
    pthread_t thread;
    struct bench_job *next;
} bench_job;

struct dt_service_bench {
    uv_loop_t *loop;
    const dt_cluster_spec *spec;
    char *token;
    dt_comm_hub *hub;
    uv_async_t async;
    pthread_mutex_t mu;
    bench_job *running, *done;
    int stopping;
    char **addrs, **names;
};

/* --- the benchmark on one rank --------------------------------------------------------------- */

static float val(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 13) % 1001) - 500.0f;
}

static void set_comm(bench_job *j, dt_comm *c)
{
    pthread_mutex_lock(&j->d->mu);
    j->comm = c;
    if (c && j->d->stopping)
        dt_comm_abort(c, "the daemon is stopping");
    pthread_mutex_unlock(&j->d->mu);
}

/* A comm of the first world ranks (the whole cluster, or ranks 0 and 1 for the raw stream). */
static dt_status open_comm(bench_job *j, uint64_t session, int world, int streams, size_t chunk,
                           dt_comm **c, dt_err *err)
{
    dt_service_bench *d = j->d;
    dt_comm_opts o = {.rank = d->spec->self.rank,
                      .world = world,
                      .addresses = (const char *const *)d->addrs,
                      .names = (const char *const *)d->names,
                      .token = d->token,
                      .session = session,
                      .hub = d->hub,
                      .connect_timeout_ms = 10000,
                      .streams = streams,
                      .chunk_bytes = chunk};
    DT_TRY(dt_comm_new(&o, c, err));
    set_comm(j, *c);
    return DT_OK;
}

static void close_comm(bench_job *j, dt_comm *c)
{
    set_comm(j, NULL);
    dt_comm_free(c);
}

static void set_hier(bench_job *j, dt_comm_hier *h)
{
    pthread_mutex_lock(&j->d->mu);
    j->hier = h;
    if (h && j->d->stopping)
        dt_comm_hier_abort(h, "the daemon is stopping");
    pthread_mutex_unlock(&j->d->mu);
}

static dt_status verify(dt_comm *c, float *b, size_t n, dt_comm_wire wire, dt_err *err)
{
    int R = dt_comm_world(c), me = dt_comm_rank(c);
    for (size_t i = 0; i < n; i++)
        b[i] = wire == DT_COMM_F32 ? val(i, me) : (float)((i + (size_t)me) % 64);
    DT_TRY(dt_comm_allreduce(c, b, n, DT_COMM_SUM, wire, COLL_TIMEOUT_MS, err));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int k = 0; k < R; k++)
            want += wire == DT_COMM_F32 ? val(i, k) : (float)((i + (size_t)k) % 64);
        if (b[i] != want)
            return dt_err_set(err, DT_EIO,
                              "verify: rank %d, %zu floats: element %zu is %.9g, the exact sum "
                              "is %.9g",
                              me, n, i, (double)b[i], (double)want);
    }
    uint32_t crc = dt_crc32c(0, b, n * 4), *all = calloc((size_t)R, 4);
    if (!all)
        return dt_err_set(err, DT_ENOMEM, "verify: out of memory");
    dt_status st = dt_comm_allgather(c, &crc, 4, all, COLL_TIMEOUT_MS, err);
    for (int k = 0; st == DT_OK && k < R; k++)
        if (all[k] != crc)
            st = dt_err_set(err, DT_EIO,
                            "verify: rank %d and rank %d hold different bits after the "
                            "all-reduce of %zu floats",
                            me, k, n);
    free(all);
    return st;
}

static dt_comm_wire parse_wire(const char *w)
{
    if (w && !strcmp(w, "bf16"))
        return DT_COMM_BF16;
    if (w && !strcmp(w, "f16"))
        return DT_COMM_F16;
    return DT_COMM_F32;
}

/* One untimed call: an all-reduce of n floats, or (bcast) a broadcast of n bytes from rank 0. */
static dt_status bench_call(dt_comm *c, int bcast, void *b, size_t n, dt_comm_wire wire,
                            dt_err *err)
{
    if (bcast)
        return dt_comm_broadcast(c, b, n, 0, COLL_TIMEOUT_MS, err);
    return dt_comm_allreduce(c, b, n, DT_COMM_SUM, wire, COLL_TIMEOUT_MS, err);
}

/* W calls, then more until every rank has spent warmup_s: each round sizes its batch by the pace
 * of the previous one (the first calls on fresh connections are the slow ones), and the ranks
 * average their counts (one all-reduce), so all make the same calls and stop together, when
 * none wants more. */
static dt_status warm_up(dt_comm *c, int bcast, void *b, size_t n, dt_comm_wire wire, int calls,
                         double warmup_s, dt_err *err)
{
    if (warmup_s > 0 && calls < 1)
        calls = 1;
    uint64_t t0 = dt_now_ns(), tb = t0;
    for (int i = 0; i < calls; i++)
        DT_TRY(bench_call(c, bcast, b, n, wire, err));
    for (int batch = calls; warmup_s > 0 && batch > 0;) {
        uint64_t now = dt_now_ns();
        double spent = (double)(now - t0) / 1e9, per = (double)(now - tb) / 1e9 / batch;
        float more =
            spent < warmup_s ? (float)ceil((warmup_s - spent) / (per > 0 ? per : 1e-6)) : 0.0f;
        if (more > MAX_WARMUP)
            more = MAX_WARMUP;
        DT_TRY(dt_comm_allreduce(c, &more, 1, DT_COMM_MEAN, DT_COMM_F32, COLL_TIMEOUT_MS, err));
        batch = (int)ceilf(more);
        tb = dt_now_ns();
        for (int i = 0; i < batch; i++)
            DT_TRY(bench_call(c, bcast, b, n, wire, err));
    }
    return DT_OK;
}

/* --- the hierarchical all-reduce (--devices G) ------------------------------------------------
 *
 * G replica threads on every rank (daemon), one dt_comm_local among them and G host rings across
 * the ranks (dt_comm_hier), as a job with $.strategy.devices runs them. Every replica runs every
 * size: the check (--verify), the warm-up, a barrier, the timed calls; the rank keeps its slowest
 * replica's time. Float32 only: the hierarchical path has no 16-bit wire. */

typedef struct hier_member {
    bench_job *j;
    dt_comm_hier *h;
    int member, G, host, hosts;
    pthread_t thread;
    double time_s[MAX_ROWS], cpu_s[MAX_ROWS];
    int verified[MAX_ROWS];
    uint32_t crc[MAX_ROWS];
    dt_status st;
    dt_err err;
} hier_member;

/* A SUM of one float over every replica: each gets the same total (and it is a barrier). */
static dt_status hier_sum1(hier_member *m, float *x, dt_err *err)
{
    return dt_comm_hier_allreduce(m->h, m->member, x, 1, COLL_TIMEOUT_MS, err);
}

/* Integer values (val), so the sum over R replicas is exact: every replica must hold it, and so
 * the same bits; member 0 also compares its bits with the other hosts' member 0 over ring 0. */
static dt_status hier_verify(hier_member *m, float *b, size_t n, int s, dt_err *err)
{
    int R = m->hosts * m->G, me = m->host * m->G + m->member;
    for (size_t i = 0; i < n; i++)
        b[i] = val(i, me);
    DT_TRY(dt_comm_hier_allreduce(m->h, m->member, b, n, COLL_TIMEOUT_MS, err));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int k = 0; k < R; k++)
            want += val(i, k);
        if (b[i] != want)
            return dt_err_set(err, DT_EIO,
                              "verify: replica %d of %d, %zu floats: element %zu is %.9g, the "
                              "exact sum is %.9g",
                              me, R, n, i, (double)b[i], (double)want);
    }
    m->crc[s] = dt_crc32c(0, b, n * 4);
    dt_comm *ring0 = dt_comm_hier_ring(m->h, 0);
    if (m->member == 0 && ring0) {
        uint32_t *all = calloc((size_t)m->hosts, 4);
        if (!all)
            return dt_err_set(err, DT_ENOMEM, "verify: out of memory");
        dt_status st = dt_comm_allgather(ring0, &m->crc[s], 4, all, COLL_TIMEOUT_MS, err);
        for (int k = 0; st == DT_OK && k < m->hosts; k++)
            if (all[k] != m->crc[s])
                st = dt_err_set(err, DT_EIO,
                                "verify: rank %d and rank %d hold different bits after the "
                                "hierarchical all-reduce of %zu floats",
                                m->host, k, n);
        free(all);
        DT_TRY(st);
    }
    m->verified[s] = 1;
    return DT_OK;
}

/* As warm_up: W calls, then batches sized by the pace so far until warmup_s has passed, the
 * replicas agreeing on each batch through a one-float all-reduce (its mean). */
static dt_status hier_warm_up(hier_member *m, float *b, size_t n, int calls, double warmup_s,
                              dt_err *err)
{
    if (warmup_s > 0 && calls < 1)
        calls = 1;
    int R = m->hosts * m->G;
    uint64_t t0 = dt_now_ns(), tb = t0;
    for (int i = 0; i < calls; i++)
        DT_TRY(dt_comm_hier_allreduce(m->h, m->member, b, n, COLL_TIMEOUT_MS, err));
    for (int batch = calls; warmup_s > 0 && batch > 0;) {
        uint64_t now = dt_now_ns();
        double spent = (double)(now - t0) / 1e9, per = (double)(now - tb) / 1e9 / batch;
        float more =
            spent < warmup_s ? (float)ceil((warmup_s - spent) / (per > 0 ? per : 1e-6)) : 0.0f;
        if (more > MAX_WARMUP)
            more = MAX_WARMUP;
        DT_TRY(hier_sum1(m, &more, err));
        batch = (int)ceilf(more / (float)R);
        tb = dt_now_ns();
        for (int i = 0; i < batch; i++)
            DT_TRY(dt_comm_hier_allreduce(m->h, m->member, b, n, COLL_TIMEOUT_MS, err));
    }
    return DT_OK;
}

static void *hier_member_main(void *arg)
{
    hier_member *m = arg;
    pthread_setname_np(pthread_self(), "dt-bench-rep");
    const Dtrain__V1__CommBenchRequest *q = m->j->req;
    int iters = q->iters ? (int)q->iters : 5;
    dt_status st = DT_OK;
    for (size_t s = 0; s < q->n_sizes && s < MAX_ROWS && st == DT_OK; s++) {
        size_t n = (size_t)(q->sizes[s] / 4);
        float *b = malloc(n * 4 + 4);
        if (!b) {
            st = dt_err_set(&m->err, DT_ENOMEM, "bench: cannot allocate %zu bytes", n * 4);
            break;
        }
        if (q->verify)
            st = hier_verify(m, b, n, (int)s, &m->err);
        memset(b, 0, n * 4);
        if (st == DT_OK)
            st = hier_warm_up(m, b, n, (int)q->warmup, q->warmup_s, &m->err);
        float one = 1;
        if (st == DT_OK)
            st = hier_sum1(m, &one, &m->err);
        uint64_t t0 = dt_now_ns(), c0 = dt_cpu_ns();
        for (int i = 0; i < iters && st == DT_OK; i++)
            st = dt_comm_hier_allreduce(m->h, m->member, b, n, COLL_TIMEOUT_MS, &m->err);
        m->time_s[s] = (double)(dt_now_ns() - t0) / 1e9 / iters;
        m->cpu_s[s] = (double)(dt_cpu_ns() - c0) / 1e9 / iters;
        free(b);
    }
    /* The siblings and the other hosts learn it now rather than at a deadline. */
    if (st != DT_OK)
        dt_comm_hier_abort(m->h, m->err.msg);
    m->st = st;
    return NULL;
}

static dt_status bench_hier(bench_job *j, dt_err *err)
{
    const Dtrain__V1__CommBenchRequest *q = j->req;
    dt_service_bench *d = j->d;
    int G = (int)q->devices, H = d->spec->world_size, me = d->spec->self.rank;
    char(*mbuf)[80] = calloc((size_t)G, sizeof *mbuf);
    const char **mnames = calloc((size_t)G, sizeof *mnames);
    hier_member *ms = calloc((size_t)G, sizeof *ms);
    dt_comm_local *local = NULL;
    dt_comm_hier *h = NULL;
    dt_status st = mbuf && mnames && ms ? DT_OK : dt_err_set(err, DT_ENOMEM, "out of memory");
    for (int m = 0; st == DT_OK && m < G; m++) {
        snprintf(mbuf[m], sizeof mbuf[m], "%s /cpu:%d", d->names[me], m);
        mnames[m] = mbuf[m];
    }
    if (st == DT_OK)
        st = dt_comm_local_new(&(dt_comm_local_opts){.members = G, .names = mnames}, &local, err);
    dt_comm_hier_opts o = {.local = local,
                           .ring = {.rank = me,
                                    .world = H,
                                    .addresses = (const char *const *)d->addrs,
                                    .names = (const char *const *)d->names,
                                    .token = d->token,
                                    .session = q->session ^ 0x4849455200000000ull,
                                    .hub = d->hub,
                                    .connect_timeout_ms = 10000,
                                    .chunk_bytes = q->chunk_bytes}};
    if (st == DT_OK)
        st = dt_comm_hier_new(&o, &h, err);
    if (st == DT_OK) {
        set_hier(j, h);
        DT_INFO("comm",
                "bench session %016llx: %d host ring%s of %d ranks connected, %d replicas "
                "here",
                (unsigned long long)q->session, G, G == 1 ? "" : "s", H, G);
        for (int m = 0; m < G; m++) {
            ms[m] = (hier_member){.j = j, .h = h, .member = m, .G = G, .host = me, .hosts = H};
            if (pthread_create(&ms[m].thread, NULL, hier_member_main, &ms[m]) != 0) {
                ms[m].thread = 0;
                ms[m].st = dt_err_set(&ms[m].err, DT_ENOMEM, "cannot start replica %d's thread", m);
                dt_comm_hier_abort(h, ms[m].err.msg);
            }
        }
        for (int m = 0; m < G; m++)
            if (ms[m].thread)
                pthread_join(ms[m].thread, NULL);
        /* The cause, not its echo: an abort reaches the siblings as DT_ECANCELED. */
        int bad = -1;
        for (int m = 0; m < G; m++)
            if (ms[m].st != DT_OK &&
                (bad < 0 || (ms[bad].st == DT_ECANCELED && ms[m].st != DT_ECANCELED)))
                bad = m;
        if (bad >= 0)
            st = dt_err_set(err, ms[bad].st, "%s", ms[bad].err.msg);
        for (size_t s = 0; st == DT_OK && s < q->n_sizes && s < MAX_ROWS; s++) {
            Dtrain__V1__CommBenchRow *row = &j->hrows[s];
            dtrain__v1__comm_bench_row__init(row);
            row->bytes = q->sizes[s] / 4 * 4;
            row->verified = q->verify != 0;
            row->cpu_s = ms[0].cpu_s[s];
            for (int m = 0; m < G; m++) {
                if (ms[m].time_s[s] > row->time_s)
                    row->time_s = ms[m].time_s[s];
                row->verified = row->verified && ms[m].verified[s] && ms[m].crc[s] == ms[0].crc[s];
            }
            j->hrow_ptrs[s] = row;
            j->reply.n_hier_rows = s + 1;
        }
        set_hier(j, NULL);
    }
    dt_comm_hier_free(h);
    dt_comm_local_free(local);
    free(ms);
    free(mbuf);
    free(mnames);
    return st;
}

static dt_status bench_run(bench_job *j, dt_err *err)
{
    const Dtrain__V1__CommBenchRequest *q = j->req;
    dt_comm_wire wire = parse_wire(q->wire);
    int iters = q->iters ? (int)q->iters : 5, warm = (int)q->warmup;
    dt_comm *c = NULL;
    DT_TRY(
        open_comm(j, q->session, j->d->spec->world_size, (int)q->streams, q->chunk_bytes, &c, err));
    DT_INFO("comm", "bench session %016llx: ring connected, %zu sizes, %d iterations",
            (unsigned long long)q->session, q->n_sizes, iters);
    dt_status st = DT_OK;
    size_t maxb = 0;
    for (size_t s = 0; s < q->n_sizes && s < MAX_ROWS && st == DT_OK; s++) {
        size_t n = (size_t)(q->sizes[s] / 4);
        float *b = malloc(n * 4 + 4);
        if (!b) {
            st = dt_err_set(err, DT_ENOMEM, "bench: cannot allocate %zu bytes", n * 4);
            break;
        }
        Dtrain__V1__CommBenchRow *row = &j->rows[j->reply.n_rows];
        dtrain__v1__comm_bench_row__init(row);
        row->bytes = n * 4;
        if (n * 4 > maxb)
            maxb = n * 4;
        if (q->verify) {
            st = verify(c, b, n, wire, err);
            row->verified = st == DT_OK;
        }
        memset(b, 0, n * 4);
        st = warm_up(c, 0, b, n, wire, warm, q->warmup_s, err);
        if (st == DT_OK)
            st = dt_comm_barrier(c, COLL_TIMEOUT_MS, err);
        uint64_t t0 = dt_now_ns(), c0 = dt_cpu_ns();
        for (int i = 0; i < iters && st == DT_OK; i++)
            st = dt_comm_allreduce(c, b, n, DT_COMM_SUM, wire, COLL_TIMEOUT_MS, err);
        row->time_s = (double)(dt_now_ns() - t0) / 1e9 / iters;
        row->cpu_s = (double)(dt_cpu_ns() - c0) / 1e9 / iters;
        free(b);
        j->row_ptrs[j->reply.n_rows++] = row;
    }
    close_comm(j, c);
    if (st == DT_OK && q->devices > 0)
        st = bench_hier(j, err);
    if (st != DT_OK || !q->raw_stream || j->d->spec->world_size < 2 || !maxb ||
        j->d->spec->self.rank > 1)
        return st;
    /* One raw stream: a 1-stream broadcast from rank 0 to rank 1, the two alone (with more ranks
     * a broadcast would relay through all of them). */
    uint8_t *b = calloc(maxb, 1);
    if (!b)
        return dt_err_set(err, DT_ENOMEM, "bench: cannot allocate %zu bytes", maxb);
    st = open_comm(j, q->session ^ 0x5354524541ull, 2, 1, 4u << 20, &c, err);
    if (st == DT_OK) {
        st = warm_up(c, 1, b, maxb, wire, warm, q->warmup_s, err);
        if (st == DT_OK)
            st = dt_comm_barrier(c, COLL_TIMEOUT_MS, err);
        uint64_t t0 = dt_now_ns(), c0 = dt_cpu_ns();
        for (int i = 0; i < iters && st == DT_OK; i++)
            st = dt_comm_broadcast(c, b, maxb, 0, COLL_TIMEOUT_MS, err);
        if (st == DT_OK)
            st = dt_comm_barrier(c, COLL_TIMEOUT_MS, err);
        double t = (double)(dt_now_ns() - t0) / 1e9 / iters;
        j->reply.stream_cpu_s = (double)(dt_cpu_ns() - c0) / 1e9 / iters;
        j->reply.stream_gbps = (double)maxb / t / 1e9;
        j->reply.stream_bytes = maxb;
        close_comm(j, c);
    }
    free(b);
    return st;
}

/* --- the coordinator ------------------------------------------------------------------------- */

typedef struct rank_call {
    bench_job *j;
    int rank;
    const Dtrain__V1__CommBenchRequest *req;
    Dtrain__V1__CommBenchReply *reply;
    dt_status st;
    dt_err err;
    pthread_t thread;
} rank_call;

static void *rank_call_main(void *arg)
{
    rank_call *rc = arg;
    pthread_setname_np(pthread_self(), "dt-bench-call");
    dt_service_bench *d = rc->j->d;
    dt_rpc_channel *ch = NULL;
    /* A connection of its own: a shared one may be one a previous bench is tearing down. */
    rc->st = dt_rpc_channel_new_dedicated(d->addrs[rc->rank], d->token, &ch, &rc->err);
    if (rc->st == DT_OK)
        dt_rpc_channel_set_wait_interval(ch, BENCH_WAIT_INTERVAL_MS);
    if (rc->st == DT_OK)
        rc->st = dt_rpc_unary(ch, DT_RPC_COMM_BENCH_RUN, &rc->req->base,
                              &dtrain__v1__comm_bench_reply__descriptor,
                              (ProtobufCMessage **)&rc->reply, BENCH_RUN_TIMEOUT_MS, &rc->err);
    dt_rpc_channel_free(ch);
    return NULL;
}

static uint64_t fresh_session(void)
{
    static uint64_t counter;
    uint64_t x = dt_now_ns() ^ ((uint64_t)getpid() << 32) ^ (++counter * 0x9e3779b97f4a7c15ull);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x | 1;
}

static dt_status bench_coordinate(bench_job *j, dt_err *err)
{
    dt_service_bench *d = j->d;
    int R = d->spec->world_size;
    Dtrain__V1__CommBenchRequest q = *j->req;
    q.session = fresh_session();
    rank_call *rc = calloc((size_t)R, sizeof *rc);
    if (!rc)
        return dt_err_set(err, DT_ENOMEM, "bench: out of memory");
    for (int i = 0; i < R; i++) {
        rc[i] = (rank_call){.j = j, .rank = i, .req = &q};
        if (pthread_create(&rc[i].thread, NULL, rank_call_main, &rc[i]) != 0) {
            rc[i].st = dt_err_set(&rc[i].err, DT_ENOMEM, "cannot start a thread");
            rc[i].thread = 0;
        }
    }
    for (int i = 0; i < R; i++)
        if (rc[i].thread)
            pthread_join(rc[i].thread, NULL);
    dt_status st = DT_OK;
    /* The ranks' own errors name the task that failed; a failed call to a rank says less. */
    for (int i = 0; i < R && st == DT_OK; i++)
        if (rc[i].st == DT_OK && rc[i].reply->error && *rc[i].reply->error)
            st = dt_err_set(err, DT_EIO, "%s", rc[i].reply->error);
    for (int i = 0; i < R && st == DT_OK; i++)
        if (rc[i].st != DT_OK)
            st = dt_err_set(err, rc[i].st, "%s (%s): %s", d->names[i], d->addrs[i], rc[i].err.msg);
    for (int i = 0; i < R && st == DT_OK; i++) {
        Dtrain__V1__CommBenchReply *r = rc[i].reply;
        for (size_t k = 0; k < r->n_rows && k < MAX_ROWS; k++) {
            Dtrain__V1__CommBenchRow *row = &j->rows[k];
            if (i == 0) {
                dtrain__v1__comm_bench_row__init(row);
                *row = *r->rows[k];
                j->row_ptrs[k] = row;
                j->reply.n_rows = k + 1;
            } else if (k < j->reply.n_rows) {
                if (r->rows[k]->time_s > row->time_s)
                    row->time_s = r->rows[k]->time_s;
                row->cpu_s += r->rows[k]->cpu_s;
                row->verified = row->verified && r->rows[k]->verified;
            }
        }
        for (size_t k = 0; k < r->n_hier_rows && k < MAX_ROWS; k++) {
            Dtrain__V1__CommBenchRow *row = &j->hrows[k];
            if (i == 0) {
                dtrain__v1__comm_bench_row__init(row);
                *row = *r->hier_rows[k];
                j->hrow_ptrs[k] = row;
                j->reply.n_hier_rows = k + 1;
            } else if (k < j->reply.n_hier_rows) {
                if (r->hier_rows[k]->time_s > row->time_s)
                    row->time_s = r->hier_rows[k]->time_s;
                row->cpu_s += r->hier_rows[k]->cpu_s;
                row->verified = row->verified && r->hier_rows[k]->verified;
            }
        }
        j->reply.stream_cpu_s += r->stream_cpu_s;
        if (r->stream_gbps > 0 &&
            (j->reply.stream_gbps == 0 || r->stream_gbps < j->reply.stream_gbps)) {
            j->reply.stream_gbps = r->stream_gbps;
            j->reply.stream_bytes = r->stream_bytes;
        }
    }
    for (size_t k = 0; st == DT_OK && k < j->reply.n_rows; k++)
        j->rows[k].cpu_s /= R;
    for (size_t k = 0; st == DT_OK && k < j->reply.n_hier_rows; k++)
        j->hrows[k].cpu_s /= R;
    for (int i = 0; i < R; i++)
        if (rc[i].reply)
            protobuf_c_message_free_unpacked(&rc[i].reply->base, NULL);
    free(rc);
    return st;
}

/* --- threads and the loop -------------------------------------------------------------------- */

static void *job_main(void *arg)
{
    bench_job *j = arg;
    pthread_setname_np(pthread_self(), "dt-bench");
    dt_err err = {0};
    dtrain__v1__comm_bench_reply__init(&j->reply);
    j->reply.rows = j->row_ptrs;
    j->reply.hier_rows = j->hrow_ptrs;
    j->reply.world_size = (uint32_t)j->d->spec->world_size;
    j->reply.devices = j->req->devices;
    j->st = j->coordinator ? bench_coordinate(j, &err) : bench_run(j, &err);
    if (j->st != DT_OK) {
        snprintf(j->error, sizeof j->error, "%s", err.msg);
        DT_WARN("comm", "bench: %s", err.msg);
    }
    dt_service_bench *d = j->d;
    pthread_mutex_lock(&d->mu);
    for (bench_job **p = &d->running; *p; p = &(*p)->next) {
        if (*p == j) {
            *p = j->next;
            break;
        }
    }
    j->next = d->done;
    d->done = j;
    pthread_mutex_unlock(&d->mu);
    uv_async_send(&d->async);
    return NULL;
}

static void job_free(bench_job *j)
{
    pthread_join(j->thread, NULL);
    if (j->req)
        protobuf_c_message_free_unpacked(&j->req->base, NULL);
    free(j);
}

static void on_async(uv_async_t *h)
{
    dt_service_bench *d = h->data;
    pthread_mutex_lock(&d->mu);
    bench_job *list = d->done;
    d->done = NULL;
    pthread_mutex_unlock(&d->mu);
    while (list) {
        bench_job *j = list;
        list = j->next;
        if (j->st == DT_OK || !j->coordinator) {
            /* A rank's failure travels in the reply, so the coordinator can name the rank. */
            if (j->st != DT_OK)
                j->reply.error = j->error;
            dt_rpc_call_reply(j->call, &j->reply.base);
        } else {
            dt_rpc_call_fail(j->call, j->st, j->error);
        }
        job_free(j);
    }
}

bool dt_service_bench_handle_call(dt_service_bench *d, dt_rpc_call *call)
{
    const char *m = dt_rpc_call_method(call);
    int coord = strcmp(m, DT_RPC_COMM_BENCH) == 0;
    if (!coord && strcmp(m, DT_RPC_COMM_BENCH_RUN) != 0)
        return false;
    ProtobufCMessage *msg;
    if (dt_rpc_call_unpack(call, &dtrain__v1__comm_bench_request__descriptor, &msg) != DT_OK)
        return true;
    Dtrain__V1__CommBenchRequest *q = (Dtrain__V1__CommBenchRequest *)msg;
    const char *bad = NULL;
    if (q->n_sizes == 0 || q->n_sizes > MAX_ROWS)
        bad = "give 1 to 64 sizes";
    for (size_t i = 0; !bad && i < q->n_sizes; i++)
        if (q->sizes[i] > (1ull << 31))
            bad = "a size is over 2 GiB";
    if (!bad && q->chunk_bytes && (q->chunk_bytes < 4096 || q->chunk_bytes > (32u << 20)))
        bad = "chunk_bytes must be 4K to 32M";
    if (!bad && q->iters > 100000)
        bad = "iters must be at most 100000";
    if (!bad && q->warmup > MAX_WARMUP)
        bad = "warmup must be at most 100000";
    if (!bad && !(q->warmup_s >= 0 && q->warmup_s <= 60)) /* NaN fails too */
        bad = "warmup_s must be 0 to 60 seconds";
    if (!bad && q->wire && *q->wire && strcmp(q->wire, "f32") && strcmp(q->wire, "bf16") &&
        strcmp(q->wire, "f16"))
        bad = "wire must be f32, bf16 or f16";
    if (!bad && q->devices > 16)
        bad = "devices must be at most 16 replicas a daemon";
    if (!bad && q->devices > 0 && q->wire && *q->wire && strcmp(q->wire, "f32"))
        bad = "devices: the hierarchical all-reduce is float32 only (wire f32)";
    if (bad) {
        protobuf_c_message_free_unpacked(msg, NULL);
        dt_rpc_call_fail(call, DT_EINVAL, bad);
        return true;
    }
    bench_job *j = calloc(1, sizeof *j);
    if (!j) {
        protobuf_c_message_free_unpacked(msg, NULL);
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        return true;
    }
    j->d = d;
    j->call = call;
    j->coordinator = coord;
    j->req = q;
    pthread_mutex_lock(&d->mu);
    j->next = d->running;
    d->running = j;
    if (pthread_create(&j->thread, NULL, job_main, j) != 0) {
        d->running = j->next;
        pthread_mutex_unlock(&d->mu);
        protobuf_c_message_free_unpacked(msg, NULL);
        free(j);
        dt_rpc_call_fail(call, DT_ENOMEM, "cannot start the bench thread");
        return true;
    }
    pthread_mutex_unlock(&d->mu);
    return true;
}

dt_status dt_service_bench_new(uv_loop_t *loop, const dt_cluster_spec *spec, const char *token,
                               dt_service_bench **out, dt_err *err)
{
    dt_service_bench *d = calloc(1, sizeof *d);
    if (!d)
        return dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    d->loop = loop;
    d->spec = spec;
    d->token = token ? strdup(token) : NULL;
    int R = spec->world_size > 0 ? spec->world_size : 1;
    d->addrs = calloc((size_t)R, sizeof *d->addrs);
    d->names = calloc((size_t)R, sizeof *d->names);
    for (int i = 0; d->addrs && d->names && i < spec->world_size; i++) {
        const dt_task *t = dt_tfconfig_by_rank(spec, i);
        char name[64];
        d->addrs[i] = strdup(t ? t->address : "?");
        d->names[i] = strdup(t ? dt_task_name(t, name, sizeof name) : "?");
    }
    pthread_mutex_init(&d->mu, NULL);
    if (!d->addrs || !d->names || dt_comm_hub_new(&d->hub, err) != DT_OK) {
        dt_service_bench_free(d);
        return err->code ? err->code : dt_err_set(err, DT_ENOMEM, "comm: out of memory");
    }
    uv_async_init(loop, &d->async, on_async);
    d->async.data = d;
    *out = d;
    return DT_OK;
}

dt_comm_hub *dt_service_bench_hub(dt_service_bench *d)
{
    return d->hub;
}

static void on_closed(uv_handle_t *h)
{
    dt_service_bench *d = h->data;
    dt_comm_hub_free(d->hub);
    for (int i = 0; i < d->spec->world_size; i++) {
        if (d->addrs)
            free(d->addrs[i]);
        if (d->names)
            free(d->names[i]);
    }
    free(d->addrs);
    free(d->names);
    free(d->token);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void dt_service_bench_free(dt_service_bench *d)
{
    if (!d)
        return;
    /* The rpc server is gone and has answered our calls: abort the benches, drop the calls. */
    pthread_mutex_lock(&d->mu);
    d->stopping = 1;
    for (bench_job *j = d->running; j; j = j->next) {
        if (j->comm)
            dt_comm_abort(j->comm, "the daemon is stopping");
        if (j->hier)
            dt_comm_hier_abort(j->hier, "the daemon is stopping");
    }
    pthread_mutex_unlock(&d->mu);
    for (;;) {
        pthread_mutex_lock(&d->mu);
        int busy = d->running != NULL;
        bench_job *list = d->done;
        d->done = NULL;
        pthread_mutex_unlock(&d->mu);
        while (list) {
            bench_job *n = list->next;
            job_free(list);
            list = n;
        }
        if (!busy)
            break;
        dt_sleep_ms(20);
    }
    if (d->async.loop) {
        uv_close((uv_handle_t *)&d->async, on_closed);
    } else {
        d->async.data = d;
        on_closed((uv_handle_t *)&d->async);
    }
}
