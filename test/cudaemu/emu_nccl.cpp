/*
 * emu_nccl.cpp - the host emulator's NCCL (see nccl.h): one process's communicators, grouped by
 * the id of ncclGetUniqueId, collectives completed by the last member to issue them.
 */
#include "nccl.h"

#include <condition_variable>
#include <mutex>
#include <new>
#include <stdio.h>
#include <string.h>
#include <vector>

namespace
{

struct slot {
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    int kind; /* 0 all-reduce, 1 broadcast, 2 reduce-scatter, 3 all-gather (count: a shard's) */
    int root;
};

/* The members of one id. Round r completes when every member has issued its r-th call. */
struct group {
    std::mutex mu;
    std::condition_variable cv; /* a round completed, or the group was aborted */
    int n = 0, refs = 0, joined = 0, arrived = 0;
    unsigned long done = 0; /* rounds completed */
    bool aborted = false;
    std::vector<slot> slots;
};

} // namespace

struct ncclComm {
    group *g;
    int rank;
    unsigned long issued; /* this member's calls */
    bool aborted;
};

static thread_local char last_err[200];

static ncclResult_t fail(ncclResult_t r, const char *what)
{
    snprintf(last_err, sizeof last_err, "emulator: %s", what);
    return r;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error";
    case ncclSystemError:
        return "unhandled system error";
    case ncclInternalError:
        return "internal error";
    case ncclInvalidArgument:
        return "invalid argument";
    case ncclInvalidUsage:
        return "invalid usage";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_err;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    group *g = new (std::nothrow) group();
    if (!g)
        return fail(ncclSystemError, "out of memory");
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &g, sizeof g);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    (void)config;
    group *g;
    memcpy(&g, id.internal, sizeof g);
    *comm = NULL;
    if (!g || nranks < 1 || rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "ncclCommInitRankConfig: bad id, rank or size");
    std::lock_guard<std::mutex> l(g->mu);
    if (g->n == 0) {
        g->n = nranks;
        g->slots.resize((size_t)nranks);
    }
    if (g->n != nranks || g->joined >= nranks)
        return fail(ncclInvalidUsage, "ncclCommInitRankConfig: ranks disagree on the size");
    ncclComm *c = new (std::nothrow) ncclComm();
    if (!c)
        return fail(ncclSystemError, "out of memory");
    c->g = g;
    c->rank = rank;
    g->joined++;
    g->refs++;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devs)
{
    (void)devs;
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    for (int i = 0; i < n && r == ncclSuccess; i++)
        r = ncclCommInitRankConfig(&comms[i], n, id, i, NULL);
    return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state)
{
    if (!c)
        return fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL communicator");
    std::lock_guard<std::mutex> l(c->g->mu);
    if (c->aborted || c->g->aborted)
        *state = ncclRemoteError; /* a sibling's abort: this member's collective never ends */
    else if (c->g->joined < c->g->n)
        *state = ncclInProgress; /* the group is still being made */
    else
        *state = c->issued > c->g->done ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
}

static void release(ncclComm_t c)
{
    group *g = c->g;
    bool last;
    {
        std::lock_guard<std::mutex> l(g->mu);
        last = --g->refs == 0;
    }
    delete c;
    if (last)
        delete g;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    {
        std::lock_guard<std::mutex> l(c->g->mu);
        c->g->aborted = true;
    }
    c->g->cv.notify_all();
    release(c);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    {
        std::lock_guard<std::mutex> l(c->g->mu);
        if (c->issued > c->g->done)
            return fail(ncclInvalidUsage, "ncclCommDestroy with a collective pending");
    }
    release(c);
    return ncclSuccess;
}

static size_t type_bytes(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    }
    return 0;
}

/* The last member's work: every member's slot is filled for this round. */
static ncclResult_t complete(group *g)
{
    const slot &s0 = g->slots[0];
    for (int m = 1; m < g->n; m++) {
        const slot &s = g->slots[(size_t)m];
        if (s.kind != s0.kind || s.count != s0.count || s.type != s0.type || s.root != s0.root)
            return fail(ncclInvalidUsage, "members issued different collectives in one round");
    }
    if (s0.kind == 1) {
        const slot &r = g->slots[(size_t)s0.root];
        size_t bytes = s0.count * type_bytes(s0.type);
        for (int m = 0; m < g->n; m++)
            if (g->slots[(size_t)m].recv != r.send)
                memmove(g->slots[(size_t)m].recv, r.send, bytes);
        return ncclSuccess;
    }
    if (s0.kind == 2) {
        /* member m's recv: shard m of every send, summed in member order; in place is recv ==
         * send + m * count (NCCL's rule), where reading shard m of the others first is safe */
        std::vector<float> v(s0.count);
        for (int m = 0; m < g->n; m++) {
            size_t off = (size_t)m * s0.count;
            for (size_t i = 0; i < s0.count; i++) {
                float a = ((const float *)s0.send)[off + i];
                for (int k = 1; k < g->n; k++)
                    a += ((const float *)g->slots[(size_t)k].send)[off + i];
                v[i] = a;
            }
            memcpy(g->slots[(size_t)m].recv, v.data(), s0.count * sizeof(float));
        }
        return ncclSuccess;
    }
    if (s0.kind == 3) {
        /* every recv: the members' sends in member order (in place: send == recv + m * count) */
        size_t bytes = s0.count * type_bytes(s0.type);
        for (int m = 0; m < g->n; m++)
            for (int k = 0; k < g->n; k++) {
                char *dst = (char *)g->slots[(size_t)m].recv + (size_t)k * bytes;
                if (dst != g->slots[(size_t)k].send)
                    memmove(dst, g->slots[(size_t)k].send, bytes);
            }
        return ncclSuccess;
    }
    /* float sum in member order, element by element: every recv gets the same bits, and a
     * member's recv may be its send (in place) */
    for (size_t i = 0; i < s0.count; i++) {
        float v = ((const float *)s0.send)[i];
        for (int m = 1; m < g->n; m++)
            v += ((const float *)g->slots[(size_t)m].send)[i];
        for (int m = 0; m < g->n; m++)
            ((float *)g->slots[(size_t)m].recv)[i] = v;
    }
    return ncclSuccess;
}

static ncclResult_t issue(ncclComm_t c, const slot &s)
{
    if (!c)
        return fail(ncclInvalidArgument, "NULL communicator");
    if (s.kind == 0 && (s.type != ncclFloat32 || type_bytes(s.type) == 0))
        return fail(ncclInvalidArgument, "the emulator's all-reduce sums float32 only");
    group *g = c->g;
    std::lock_guard<std::mutex> l(g->mu);
    if (g->aborted || c->aborted)
        return fail(ncclRemoteError, "the communicator was aborted");
    if (c->issued > g->done)
        return fail(ncclInvalidUsage, "a collective issued before the last one completed");
    g->slots[(size_t)c->rank] = s;
    c->issued++;
    if (++g->arrived < g->n)
        return ncclInProgress;
    g->arrived = 0;
    ncclResult_t r = complete(g);
    if (r != ncclSuccess) {
        g->aborted = true;
        g->cv.notify_all();
        return r;
    }
    g->done++;
    g->cv.notify_all();
    return ncclSuccess;
}

/* A collective enqueued on a capturing stream is a node of the graph: its replay issues it and
 * then holds the replaying thread (the emulator's stream) until the round completes, as a GPU
 * stream waits for NCCL's kernel, so what the graph does next reads the reduced values. A sibling
 * that never replays its part leaves it waiting, as on a GPU, until the clique is aborted. */
static ncclResult_t issue_or_record(ncclComm_t c, const slot &s, cudaStream_t st)
{
    int r = emu_capture_enqueue(st, [c, s] {
        ncclResult_t q = issue(c, s);
        if (q != ncclSuccess && q != ncclInProgress) {
            emu_set_error(cudaErrorLaunchFailure);
            return;
        }
        group *g = c->g;
        std::unique_lock<std::mutex> l(g->mu);
        g->cv.wait(l, [c, g] { return g->aborted || c->aborted || g->done >= c->issued; });
        if (g->aborted || c->aborted)
            emu_set_error(cudaErrorLaunchFailure);
    });
    if (r > 1)
        return fail(ncclInvalidUsage, "the capturing stream's capture was invalidated");
    if (r == 1)
        return ncclSuccess;
    return issue(c, s);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    if (op != ncclSum)
        return fail(ncclInvalidArgument, "the emulator's all-reduce sums only");
    if (!comm)
        return fail(ncclInvalidArgument, "NULL communicator");
    return issue_or_record(comm, slot{send, recv, count, type, 0, 0}, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    if (op != ncclSum || type != ncclFloat32)
        return fail(ncclInvalidArgument, "the emulator's reduce-scatter sums float32 only");
    if (!comm)
        return fail(ncclInvalidArgument, "NULL communicator");
    return issue_or_record(comm, slot{send, recv, recvcount, type, 2, 0}, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t s)
{
    if (!comm || type_bytes(type) == 0)
        return fail(ncclInvalidArgument, "ncclAllGather: bad communicator or type");
    return issue_or_record(comm, slot{send, recv, sendcount, type, 3, 0}, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s)
{
    if (!comm || root < 0 || root >= comm->g->n)
        return fail(ncclInvalidArgument, "ncclBroadcast: bad root");
    return issue_or_record(comm, slot{send, recv, count, type, 1, root}, s);
}
