/*
 * nccl.cu - NCCL among one process's GPUs: the api's clique entries (see api.h).
 *
 * One communicator per member, all made at once by one thread; afterwards member m is driven
 * only from its replica's thread (bound to devs[m]) and issues its collectives on that thread's
 * stream. NCCL's ring and tree reduce in an order fixed by the topology, the same for every
 * member, so every member ends with the same bits, and two runs on the same machine give the
 * same bits too. NCCL_ALGO / NCCL_PROTO are left to the environment: any fixed choice keeps that.
 *
 * Why the communicators are non-blocking (ncclCommInitRankConfig with blocking = 0 inside one
 * group, which is what ncclCommInitAll does, without its fixed default config): abort must be
 * able to end a member that waits forever for a sibling that never calls. With blocking
 * communicators such a member can be stuck inside NCCL on the host (the first collective of a
 * pair connects the peers and waits for them), and ncclCommAbort from another thread would free
 * the communicator under it. Non-blocking calls return at once (ncclInProgress) and the member
 * polls ncclCommGetAsyncError itself, between polls outside NCCL; abort marks the clique, waits
 * until no member is inside an NCCL call (never long: none blocks) and only then aborts the
 * communicators, which stops the device kernels and NCCL's own threads (ncclCommAbort joins the
 * group job still connecting). A member waiting on the GPU (a kernel whose peer never comes)
 * sees its kernel end once the abort flag is set.
 *
 * Why a side stream: an all-reduce of device memory is issued on the member's own side stream,
 * which first waits for an event recorded on the replica's stream (the bucket is final there),
 * so NCCL's kernel runs while backward goes on with the earlier layers; join makes the replica's
 * stream wait for the side stream's work before anything reads the sums (the update). Both are
 * stream dependencies, never host waits, so a CUDA graph captures them (fork and join).
 */
#include "nn/cuda/internal.cuh"

#include <condition_variable>
#include <mutex>
#include <nccl.h>
#include <new>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* How long clique_new waits for NCCL to build the communicators of one process (normally well
 * under a second a GPU; past this something is broken and the job should say so). */
#define CLIQUE_INIT_DEADLINE_S 120

struct member {
    ncclComm_t comm;
    int dev;
    /* Device staging for host-memory buffers: allocated and grown by the member's own thread
     * (its device current, its stream idle), freed by clique_free. Only that thread touches it
     * until then, so it needs no lock. */
    void *stage;
    size_t stage_bytes;
    /* The side stream of the member's all-reduces of device memory and its fork (ready) and
     * join (done) events, made by clique_new on the member's device; pending: work issued on it
     * since the last join (the member's thread alone reads and writes it). */
    cudaStream_t side;
    cudaEvent_t ready, done;
    bool pending;
};

struct clique {
    int n;
    std::mutex mu;
    std::condition_variable idle; /* busy fell to 0, or an abort finished */
    int busy;                     /* members inside an NCCL call on their communicator */
    bool aborted;                 /* abort began: members enter NCCL no more */
    bool aborting;                /* a thread is in ncclCommAbort (without mu) */
    bool comms_gone;              /* the communicators were aborted or destroyed */
    bool failed;                  /* an NCCL call failed: the communicators need abort */
    char why[256];                /* what aborted the clique, for every later call */
    member *m;
};

static int say(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *msg, size_t len, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* NCCL's code and its last detailed message (global in NCCL; the comm argument is unused). */
static int nccl_err(char *msg, size_t len, int dev, const char *what, ncclResult_t r)
{
    const char *last = ncclGetLastError(NULL);
    return say(msg, len, "/gpu:%d: %s: %s%s%s", dev, what, ncclGetErrorString(r),
               last && last[0] ? ": " : "", last && last[0] ? last : "");
}

/* A CUDA runtime error of a clique call: returned with the message, not left sticky. */
static int cuda_err(char *msg, size_t len, int dev, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    return say(msg, len, "/gpu:%d: %s: %s", dev, what, cudaGetErrorString(e));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polling back-off: yield for the first rounds (a launch takes tens of microseconds), then
 * sleep up to 1 ms (connecting the peers on a first call can take milliseconds). */
static void backoff(int round)
{
    struct timespec ts = {0, 0};
    ts.tv_nsec = round < 64 ? 0 : round < 256 ? 20000 : 1000000;
    nanosleep(&ts, NULL);
}

/* Member calls into NCCL only between enter and leave; abort waits for busy == 0. */
static bool enter(clique *c)
{
    std::lock_guard<std::mutex> g(c->mu);
    if (c->aborted)
        return false;
    c->busy++;
    return true;
}

static void leave(clique *c)
{
    std::lock_guard<std::mutex> g(c->mu);
    if (--c->busy == 0)
        c->idle.notify_all();
}

static int aborted_err(clique *c, int m, char *msg, size_t len)
{
    std::lock_guard<std::mutex> g(c->mu);
    say(msg, len, "/gpu:%d: the NCCL clique was aborted (%s)", c->m[m].dev, c->why);
    return -2; /* an echo of what aborted it, not a failure of this member */
}

/* Aborts every communicator (NCCL's teardown switches devices: the current one is kept). */
static void abort_comms(clique *c)
{
    int dev = -1;
    (void)cudaGetDevice(&dev);
    for (int i = 0; i < c->n; i++)
        if (c->m[i].comm)
            (void)ncclCommAbort(c->m[i].comm); /* nothing to do about a failed abort */
    if (dev >= 0)
        (void)cudaSetDevice(dev);
    (void)cudaGetLastError();
}

/* Marks the clique aborted (the first reason wins: every later call fails at once with it),
 * waits until no member is inside NCCL, and aborts the communicators, without holding the lock
 * (NCCL's abort can take a while; members only need the mark). Safe from any thread, any number
 * of times: one caller aborts, the others return. */
static void abort_with(clique *c, const char *why)
{
    std::unique_lock<std::mutex> g(c->mu);
    if (!c->aborted) {
        c->aborted = true;
        snprintf(c->why, sizeof c->why, "%s", why);
    }
    /* Bounded: a member holds busy only across one non-blocking NCCL call. */
    c->idle.wait(g, [c] { return c->busy == 0; });
    if (c->aborting || c->comms_gone)
        return;
    c->aborting = true;
    g.unlock();
    abort_comms(c);
    g.lock();
    c->aborting = false;
    c->comms_gone = true;
    c->idle.notify_all();
}

/* Polls member m's communicator until its last call is done (ncclSuccess) or failed; returns
 * 0, or -1 with the message (an NCCL failure also aborts the clique: NCCL promises nothing of a
 * communicator after an error, and the siblings must not wait for this member). */
static int wait_done(clique *c, int m, const char *what, ncclResult_t r, char *msg, size_t len)
{
    for (int round = 0; r == ncclInProgress; round++) {
        backoff(round);
        if (!enter(c))
            return aborted_err(c, m, msg, len);
        ncclResult_t st = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(c->m[m].comm, &st);
        leave(c);
        r = q != ncclSuccess ? q : st;
    }
    if (r == ncclSuccess)
        return 0;
    nccl_err(msg, len, c->m[m].dev, what, r);
    {
        std::lock_guard<std::mutex> g(c->mu);
        c->failed = true;
    }
    char why[256];
    snprintf(why, sizeof why, "member %d failed: %s", m, msg ? msg : what);
    abort_with(c, why);
    return -1;
}

/* Makes member i's side stream and events on its device (current). */
static int side_new(member *p, char *msg, size_t len)
{
    cudaError_t e = cudaStreamCreateWithFlags(&p->side, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&p->ready, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming);
    return e == cudaSuccess ? 0 : cuda_err(msg, len, p->dev, "the NCCL side stream", e);
}

/* Frees the side streams and events of m[0..n) (each on its device). */
static void sides_free(member *m, int n)
{
    for (int i = 0; i < n; i++) {
        if (!m[i].side && !m[i].ready && !m[i].done)
            continue;
        if (cudaSetDevice(m[i].dev) != cudaSuccess)
            continue;
        if (m[i].done)
            (void)cudaEventDestroy(m[i].done);
        if (m[i].ready)
            (void)cudaEventDestroy(m[i].ready);
        if (m[i].side)
            (void)cudaStreamDestroy(m[i].side);
        m[i].side = NULL;
        m[i].ready = m[i].done = NULL;
    }
}

int dt_cu_clique_new(int n, const int *devs, void **out, char *msg, size_t len)
{
    *out = NULL;
    if (n < 1 || !devs)
        return say(msg, len, "NCCL clique: %d devices (need at least one)", n);
    clique *c = new (std::nothrow) clique();
    member *m = new (std::nothrow) member[n]();
    if (!c || !m) {
        delete c;
        delete[] m;
        return say(msg, len, "NCCL clique of %d GPUs: out of memory", n);
    }
    c->n = n;
    c->m = m;
    for (int i = 0; i < n; i++)
        m[i].dev = devs[i];

    int old = -1, rc = 0, count = 0;
    (void)cudaGetDevice(&old);
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess) {
        rc = cuda_err(msg, len, devs[0], "cudaGetDeviceCount", ce);
        goto done;
    }
    /* Checked before the group: a rank that never joins would leave the others waiting. */
    for (int i = 0; i < n && rc == 0; i++)
        if (devs[i] < 0 || devs[i] >= count)
            rc = say(msg, len, "/gpu:%d: NCCL clique: this host has %d visible GPU%s", devs[i],
                     count, count == 1 ? "" : "s");
    if (rc != 0)
        goto done;
    r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        rc = nccl_err(msg, len, devs[0], "ncclGetUniqueId", r);
        goto done;
    }
    /* ncclCommInitAll's recipe (one id, one group, one rank per device) with non-blocking
     * communicators: the group returns ncclInProgress and each one is polled below. */
    r = ncclGroupStart();
    if (r != ncclSuccess) {
        rc = nccl_err(msg, len, devs[0], "ncclGroupStart", r);
        goto done;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        cudaError_t e = cudaSetDevice(devs[i]);
        if (e != cudaSuccess) {
            rc = cuda_err(msg, len, devs[i], "cudaSetDevice", e);
            break;
        }
        r = ncclCommInitRankConfig(&m[i].comm, n, id, i, &cfg);
        if (r != ncclSuccess && r != ncclInProgress)
            rc = nccl_err(msg, len, devs[i], "ncclCommInitRankConfig", r);
    }
    /* Always closed, even after a failure: NCCL cleans the group up in ncclGroupEnd. */
    r = ncclGroupEnd();
    if (rc == 0 && r != ncclSuccess && r != ncclInProgress)
        rc = nccl_err(msg, len, devs[0], "ncclGroupEnd (making the communicators)", r);
    {
        double deadline = now_s() + CLIQUE_INIT_DEADLINE_S;
        for (int i = 0; i < n && rc == 0; i++) {
            ncclResult_t st = ncclInProgress;
            for (int round = 0; st == ncclInProgress; round++) {
                if (!m[i].comm) {
                    rc = say(msg, len, "/gpu:%d: ncclCommInitRankConfig gave no communicator",
                             devs[i]);
                    break;
                }
                ncclResult_t q = ncclCommGetAsyncError(m[i].comm, &st);
                if (q != ncclSuccess)
                    st = q;
                if (st == ncclInProgress) {
                    if (now_s() > deadline) {
                        rc = say(msg, len,
                                 "/gpu:%d: NCCL did not make the communicators of %d GPUs "
                                 "within %d s",
                                 devs[i], n, CLIQUE_INIT_DEADLINE_S);
                        break;
                    }
                    backoff(round);
                }
            }
            if (rc == 0 && st != ncclSuccess)
                rc = nccl_err(msg, len, devs[i], "making the communicator", st);
        }
    }
    for (int i = 0; i < n && rc == 0; i++) {
        cudaError_t e = cudaSetDevice(devs[i]);
        rc = e != cudaSuccess ? cuda_err(msg, len, devs[i], "cudaSetDevice", e)
                              : side_new(&m[i], msg, len);
    }
done:
    if (rc != 0) {
        /* NCCL's way out of a failed or unfinished init: abort what exists. */
        for (int i = 0; i < n; i++)
            if (m[i].comm)
                (void)ncclCommAbort(m[i].comm);
        sides_free(m, n);
        delete[] m;
        delete c;
    } else {
        *out = c;
    }
    if (old >= 0)
        (void)cudaSetDevice(old);
    (void)cudaGetLastError();
    return rc;
}

/* Checks the call's member and thread: the thread must be bound to the member's device. */
static int check_member(clique *c, int m, const void *buf, size_t n, char *msg, size_t len)
{
    if (!c)
        return say(msg, len, "NCCL clique: none (clique_new failed or was not called)");
    if (m < 0 || m >= c->n)
        return say(msg, len, "NCCL clique: member %d of %d", m, c->n);
    dt_cu_ctx *x = dt_cu_ctx_get();
    if (!x->bound)
        return say(msg, len,
                   "/gpu:%d: NCCL clique member %d called from a thread bound to no GPU (bind "
                   "it to /gpu:%d first)",
                   c->m[m].dev, m, c->m[m].dev);
    if (x->dev != c->m[m].dev)
        return say(msg, len, "/gpu:%d: NCCL clique member %d called from a thread bound to /gpu:%d",
                   c->m[m].dev, m, x->dev);
    if (!buf && n)
        return say(msg, len, "/gpu:%d: NCCL clique member %d: NULL buffer of %zu bytes",
                   c->m[m].dev, m, n);
    return 0;
}

/* Where buf lives: 1 device memory of the member's device, 0 host memory, -1 error. */
static int on_device(clique *c, int m, const void *buf, char *msg, size_t len)
{
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, buf);
    if (e != cudaSuccess)
        return cuda_err(msg, len, c->m[m].dev, "cudaPointerGetAttributes", e);
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
        if (a.type == cudaMemoryTypeDevice && a.device != c->m[m].dev)
            return say(msg, len, "/gpu:%d: NCCL clique member %d: the buffer is memory of /gpu:%d",
                       c->m[m].dev, m, a.device);
        return 1;
    }
    return 0; /* pageable (cudaMemoryTypeUnregistered) or pinned host memory: staged */
}

/* The member's staging buffer of at least bytes (its thread, its device, its stream idle). */
static void *stage(clique *c, int m, size_t bytes, char *msg, size_t len)
{
    member *p = &c->m[m];
    if (bytes <= p->stage_bytes)
        return p->stage;
    if (p->stage) {
        cudaError_t e = cudaFree(p->stage);
        p->stage = NULL;
        p->stage_bytes = 0;
        if (e != cudaSuccess) {
            cuda_err(msg, len, p->dev, "cudaFree (NCCL staging)", e);
            return NULL;
        }
    }
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes);
    if (e != cudaSuccess) {
        cuda_err(msg, len, p->dev, "cudaMalloc (NCCL staging)", e);
        return NULL;
    }
    p->stage = d;
    p->stage_bytes = bytes;
    return d;
}

enum coll { COLL_ALLREDUCE, COLL_BROADCAST, COLL_REDUCE_SCATTER, COLL_ALL_GATHER };

/* Issues member m's collective on dev_buf (device memory) on stream st and waits until NCCL
 * has queued it (until then nothing else may go on the stream). */
static int issue(clique *c, int m, coll k, void *dev_buf, size_t count, int root, cudaStream_t st,
                 char *msg, size_t len)
{
    if (!enter(c))
        return aborted_err(c, m, msg, len);
    ncclResult_t r;
    const char *what;
    if (k == COLL_ALLREDUCE) {
        what = "ncclAllReduce";
        r = ncclAllReduce(dev_buf, dev_buf, count, ncclFloat, ncclSum, c->m[m].comm, st);
    } else if (k == COLL_REDUCE_SCATTER) { /* in place: shard m of dev_buf (count a shard) */
        what = "ncclReduceScatter";
        r = ncclReduceScatter(dev_buf, (float *)dev_buf + (size_t)m * count, count, ncclFloat,
                              ncclSum, c->m[m].comm, st);
    } else if (k == COLL_ALL_GATHER) {
        what = "ncclAllGather";
        r = ncclAllGather((float *)dev_buf + (size_t)m * count, dev_buf, count, ncclFloat,
                          c->m[m].comm, st);
    } else {
        what = "ncclBroadcast";
        r = ncclBroadcast(dev_buf, dev_buf, count, ncclUint8, root, c->m[m].comm, st);
    }
    leave(c);
    return wait_done(c, m, what, r, msg, len);
}

/* Makes the thread's stream wait for the member's side stream (its all-reduces so far). */
static int join(clique *c, int m, char *msg, size_t len)
{
    member *p = &c->m[m];
    if (!p->pending)
        return 0;
    cudaError_t e = cudaEventRecord(p->done, p->side);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(dt_cu_stream(), p->done, 0);
    if (e != cudaSuccess)
        return cuda_err(msg, len, p->dev, "joining the NCCL side stream", e);
    p->pending = false;
    return 0;
}

/* One collective of member m: an all-reduce of device memory is used in place on the side
 * stream (the call returns once queued; join orders the thread's stream after it); a
 * broadcast of device memory runs on the thread's stream; host memory goes through the staging
 * buffer and the call waits for the result. */
static int collective(clique *c, int m, coll k, void *buf, size_t count, size_t bytes, int root,
                      char *msg, size_t len)
{
    if (check_member(c, m, buf, bytes, msg, len) != 0)
        return -1;
    {
        std::lock_guard<std::mutex> g(c->mu);
        if (c->aborted) {
            say(msg, len, "/gpu:%d: the NCCL clique was aborted (%s)", c->m[m].dev, c->why);
            return -2;
        }
    }
    if (k == COLL_BROADCAST && (root < 0 || root >= c->n))
        return say(msg, len, "/gpu:%d: NCCL broadcast from member %d of %d", c->m[m].dev, root,
                   c->n);
    if (bytes == 0)
        return 0; /* every member has the same count, so every member skips */
    int where = on_device(c, m, buf, msg, len);
    if (where < 0)
        return -1;
    member *p = &c->m[m];
    bool sharded = k == COLL_REDUCE_SCATTER || k == COLL_ALL_GATHER;
    if (sharded && where != 1)
        return say(msg, len,
                   "/gpu:%d: NCCL clique member %d: a reduce-scatter or all-gather takes "
                   "device memory",
                   p->dev, m);
    if (where == 1 && k != COLL_BROADCAST) {
        cudaError_t e = cudaEventRecord(p->ready, dt_cu_stream());
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(p->side, p->ready, 0);
        if (e != cudaSuccess)
            return cuda_err(msg, len, p->dev, "forking the NCCL side stream", e);
        p->pending = true;
        return issue(c, m, k, buf, count, root, p->side, msg, len);
    }
    if (join(c, m, msg, len) != 0)
        return -1;
    if (where == 1)
        return issue(c, m, k, buf, count, root, dt_cu_stream(), msg, len);

    int dev = c->m[m].dev;
    cudaStream_t s = dt_cu_stream();
    void *d = stage(c, m, bytes, msg, len);
    if (!d)
        return -1;
    cudaError_t e;
    bool up = k == COLL_ALLREDUCE || m == root; /* a broadcast's receivers send nothing */
    if (up && (e = cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, s)) != cudaSuccess)
        return cuda_err(msg, len, dev, "cudaMemcpyAsync (to NCCL staging)", e);
    int rc = issue(c, m, k, d, count, root, s, msg, len);
    if (rc == 0 && !(k == COLL_BROADCAST && m == root) &&
        (e = cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, s)) != cudaSuccess)
        rc = cuda_err(msg, len, dev, "cudaMemcpyAsync (from NCCL staging)", e);
    /* Waited for even after a failure: the staging buffer must be idle before the next call,
     * and an aborted collective's kernel ends once the abort flag is set. */
    e = cudaStreamSynchronize(s);
    if (rc == 0 && e != cudaSuccess)
        rc = cuda_err(msg, len, dev, "cudaStreamSynchronize (NCCL host buffer)", e);
    if (rc == 0) {
        /* A kernel whose peer never came ends on abort without an error: its result is void. */
        std::lock_guard<std::mutex> g(c->mu);
        if (c->aborted) {
            say(msg, len, "/gpu:%d: the NCCL clique was aborted (%s)", dev, c->why);
            rc = -2;
        }
    }
    return rc;
}

int dt_cu_clique_allreduce(void *c, int m, float *buf, size_t count, char *msg, size_t len)
{
    return collective((clique *)c, m, COLL_ALLREDUCE, buf, count, count * sizeof(float), 0, msg,
                      len);
}

int dt_cu_clique_broadcast(void *c, int m, void *buf, size_t bytes, int root, char *msg, size_t len)
{
    return collective((clique *)c, m, COLL_BROADCAST, buf, bytes, bytes, root, msg, len);
}

int dt_cu_clique_reduce_scatter(void *c, int m, float *buf, size_t shard, char *msg, size_t len)
{
    clique *q = (clique *)c;
    size_t n = q && q->n > 0 ? (size_t)q->n : 0;
    return collective(q, m, COLL_REDUCE_SCATTER, buf, shard, n * shard * sizeof(float), 0, msg,
                      len);
}

int dt_cu_clique_all_gather(void *c, int m, float *buf, size_t shard, char *msg, size_t len)
{
    clique *q = (clique *)c;
    size_t n = q && q->n > 0 ? (size_t)q->n : 0;
    return collective(q, m, COLL_ALL_GATHER, buf, shard, n * shard * sizeof(float), 0, msg, len);
}

int dt_cu_clique_join(void *cv, int m, char *msg, size_t len)
{
    clique *c = (clique *)cv;
    if (check_member(c, m, c, 0, msg, len) != 0)
        return -1;
    return join(c, m, msg, len);
}

void dt_cu_clique_abort(void *c)
{
    if (c)
        abort_with((clique *)c, "clique_abort was called");
}

void dt_cu_clique_free(void *cv)
{
    clique *c = (clique *)cv;
    if (!c)
        return;
    int old = -1;
    (void)cudaGetDevice(&old);
    {
        std::unique_lock<std::mutex> g(c->mu);
        c->idle.wait(g, [c] { return c->busy == 0 && !c->aborting; });
        if (!c->comms_gone) {
            if (c->failed) {
                abort_comms(c); /* NCCL: after an error only abort is safe */
                c->comms_gone = true;
            } else {
                /* Every member returned and its work completes (all issued the same calls);
                 * the last destroy of the process's communicators frees them all. */
                for (int i = 0; i < c->n; i++)
                    if (c->m[i].comm && ncclCommDestroy(c->m[i].comm) != ncclSuccess)
                        (void)ncclCommAbort(c->m[i].comm); /* an error came after the last
                                                              call: destroy refuses, abort not */
                c->comms_gone = true;
            }
        }
    }
    sides_free(c->m, c->n);
    for (int i = 0; i < c->n; i++)
        if (c->m[i].stage) {
            /* The member's device current: the buffer is that device's memory. */
            if (cudaSetDevice(c->m[i].dev) == cudaSuccess)
                (void)cudaFree(c->m[i].stage);
        }
    if (old >= 0)
        (void)cudaSetDevice(old);
    (void)cudaGetLastError();
    delete[] c->m;
    delete c;
}
