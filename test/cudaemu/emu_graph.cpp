/*
 * emu_graph.cpp - the host emulator's stream capture and CUDA graphs (see cuda_runtime.h).
 *
 * A capture is a list of closures, one per piece of work enqueued on the capturing stream, each
 * holding copies of its arguments (a kernel node's parameters are copied when it is captured);
 * a graph and its executable are copies of that list, and a launch runs it in order on the
 * calling thread, as the emulator runs all work: at once. What CUDA refuses during a capture is
 * refused here with the same errors, so a backend that allocates, synchronises or copies from
 * pageable memory inside its captured step fails in CI as it would on a GPU.
 */
#include "cuda_runtime.h"

#include <atomic>
#include <map>
#include <new>
#include <thread>
#include <vector>

typedef std::vector<std::function<void()>> emu_nodes;

struct CUgraph_st {
    emu_nodes nodes;
};

struct CUgraphExec_st {
    emu_nodes nodes;
};

namespace
{

struct capture {
    cudaStreamCaptureMode mode;
    std::thread::id owner;
    bool invalid;
    emu_nodes nodes;
    /* streams forked into it: work recorded on each, and that count when last joined */
    std::map<cudaStream_t, long> work, joined;
};

std::mutex mu;
std::map<cudaStream_t, capture> caps;          /* open captures, by stream (under mu) */
std::map<cudaStream_t, cudaStream_t> forks;    /* forked stream -> its capture's origin */
std::atomic<int> open_caps{0}, global_caps{0}; /* all of them; those in Global mode */
thread_local int my_strict_caps;               /* this thread's Global and ThreadLocal ones */

/* Invalidates every capture the calling thread opened (CUDA invalidates the sequence an
 * illegal call was made in). Under mu. */
void invalidate_mine(void)
{
    for (auto &kv : caps)
        if (kv.second.owner == std::this_thread::get_id())
            kv.second.invalid = true;
}

/* The capture s records into (its own or, forked, its origin's), or NULL; *origin set. */
capture *find(cudaStream_t s, cudaStream_t *origin)
{
    auto f = forks.find(s);
    cudaStream_t o = f == forks.end() ? s : f->second;
    auto it = caps.find(o);
    if (it == caps.end())
        return NULL;
    if (origin)
        *origin = o;
    return &it->second;
}

/* Ends the forks of the capture of origin. */
void drop_forks(cudaStream_t origin)
{
    for (auto it = forks.begin(); it != forks.end();)
        it = it->second == origin ? forks.erase(it) : std::next(it);
}

} // namespace

cudaError_t emu_capture_unsafe(const char *what)
{
    (void)what;
    if (!open_caps.load())
        return cudaSuccess;
    std::lock_guard<std::mutex> l(mu);
    int others_global = global_caps.load();
    for (auto &kv : caps)
        if (kv.second.owner == std::this_thread::get_id() &&
            kv.second.mode == cudaStreamCaptureModeGlobal)
            others_global--;
    if (my_strict_caps == 0 && others_global <= 0)
        return cudaSuccess;
    invalidate_mine();
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t emu_capture_touch(cudaStream_t s)
{
    if (!open_caps.load() || !s)
        return cudaSuccess;
    std::lock_guard<std::mutex> l(mu);
    capture *c = find(s, NULL);
    if (!c)
        return cudaSuccess;
    c->invalid = true;
    return cudaErrorStreamCaptureUnsupported;
}

int emu_capture_enqueue(cudaStream_t s, std::function<void()> &&f)
{
    if (!open_caps.load() || !s)
        return 0;
    std::lock_guard<std::mutex> l(mu);
    cudaStream_t o = NULL;
    capture *c = find(s, &o);
    if (!c)
        return 0;
    if (c->invalid)
        return cudaErrorStreamCaptureInvalidated;
    c->nodes.push_back(std::move(f));
    if (s != o)
        c->work[s]++;
    return 1;
}

int emu_capture_record(cudaStream_t s, cudaStream_t *origin, long *seq)
{
    *origin = NULL;
    *seq = 0;
    if (!open_caps.load() || !s)
        return 0;
    std::lock_guard<std::mutex> l(mu);
    cudaStream_t o = NULL;
    capture *c = find(s, &o);
    if (!c)
        return 0;
    if (c->invalid)
        return cudaErrorStreamCaptureInvalidated;
    *origin = o;
    *seq = s == o ? 0 : c->work[s];
    return 1;
}

cudaError_t emu_capture_wait(cudaStream_t s, cudaStream_t origin, cudaStream_t src, long seq)
{
    if (!s || (!origin && !open_caps.load()))
        return cudaSuccess;
    std::lock_guard<std::mutex> l(mu);
    cudaStream_t so = NULL;
    capture *cs = find(s, &so);
    if (!origin) { /* an event from outside any capture */
        if (!cs)
            return cudaSuccess;
        cs->invalid = true;
        return cudaErrorStreamCaptureIsolation;
    }
    auto it = caps.find(origin);
    if (it == caps.end()) /* its capture has ended: the event belongs to no live graph */
        return cs ? (cs->invalid = true, cudaErrorStreamCaptureIsolation)
                  : cudaErrorStreamCaptureUnsupported;
    capture *ce = &it->second;
    if (!cs) { /* a fork: s records into the capture from now on */
        forks[s] = origin;
        ce->work[s] = 0;
        ce->joined[s] = 0;
        return cudaSuccess;
    }
    if (cs != ce) {
        cs->invalid = ce->invalid = true;
        return cudaErrorStreamCaptureIsolation;
    }
    if (src != origin && src != s && ce->work[src] == seq)
        ce->joined[src] = seq; /* src's work so far is joined */
    return cudaSuccess;
}

void emu_capture_forget(cudaStream_t s)
{
    if (!open_caps.load() || !s)
        return;
    std::lock_guard<std::mutex> l(mu);
    forks.erase(s);
    auto it = caps.find(s);
    if (it == caps.end())
        return;
    if (it->second.mode != cudaStreamCaptureModeRelaxed &&
        it->second.owner == std::this_thread::get_id())
        my_strict_caps--;
    if (it->second.mode == cudaStreamCaptureModeGlobal)
        global_caps--;
    caps.erase(it);
    open_caps--;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    if (!s) /* the legacy stream cannot capture */
        return cudaErrorStreamCaptureUnsupported;
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> l(mu);
    if (caps.count(s) || forks.count(s))
        return cudaErrorIllegalState;
    caps[s] = capture{mode, std::this_thread::get_id(), false, emu_nodes(), {}, {}};
    open_caps++;
    if (mode == cudaStreamCaptureModeGlobal)
        global_caps++;
    if (mode != cudaStreamCaptureModeRelaxed)
        my_strict_caps++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    if (g)
        *g = NULL;
    if (!s || !g)
        return cudaErrorInvalidValue;
    std::unique_lock<std::mutex> l(mu);
    auto it = caps.find(s);
    if (it == caps.end())
        return cudaErrorIllegalState;
    /* Global and ThreadLocal captures end on the thread that began them. */
    if (it->second.mode != cudaStreamCaptureModeRelaxed &&
        it->second.owner != std::this_thread::get_id())
        return cudaErrorStreamCaptureWrongThread;
    capture c = std::move(it->second);
    caps.erase(it);
    drop_forks(s);
    open_caps--;
    if (c.mode == cudaStreamCaptureModeGlobal)
        global_caps--;
    if (c.mode != cudaStreamCaptureModeRelaxed)
        my_strict_caps--;
    l.unlock();
    if (c.invalid)
        return cudaErrorStreamCaptureInvalidated;
    for (auto &w : c.work)
        if (w.second != c.joined[w.first]) /* a forked stream's last work never joined back */
            return cudaErrorStreamCaptureUnjoined;
    CUgraph_st *graph = new (std::nothrow) CUgraph_st();
    if (!graph)
        return cudaErrorMemoryAllocation;
    graph->nodes = std::move(c.nodes);
    *g = graph;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st)
{
    if (!st)
        return cudaErrorInvalidValue;
    *st = cudaStreamCaptureStatusNone;
    if (!open_caps.load() || !s)
        return cudaSuccess;
    std::lock_guard<std::mutex> l(mu);
    capture *c = find(s, NULL);
    if (c)
        *st = c->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    /* the emulator's streams are always idle; a capturing one may not be asked */
    return emu_capture_touch(s);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    if (!e || !g)
        return cudaErrorInvalidValue;
    CUgraphExec_st *x = new (std::nothrow) CUgraphExec_st();
    if (!x)
        return cudaErrorMemoryAllocation;
    x->nodes = g->nodes; /* an executable is a snapshot: the graph may be destroyed after */
    *e = x;
    return cudaSuccess;
}

/* Graphs launched (outside a capture) in this process, read by the tests with dlsym. */
static std::atomic<long> launches{0};
extern "C" __attribute__((visibility("default"))) long emu_graph_launches(void)
{
    return launches.load();
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    if (!e)
        return cudaErrorInvalidResourceHandle;
    /* launched into a capture, the graph becomes part of it (a child graph's nodes, in order) */
    CUgraphExec_st *x = e;
    int r = emu_capture_enqueue(s, [x] {
        for (auto &n : x->nodes)
            n();
    });
    if (r > 1)
        return (cudaError_t)r;
    if (r == 1)
        return cudaSuccess;
    launches++;
    for (auto &n : e->nodes)
        n();
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}
