/*
 * emu_rt.cpp - the host emulator's runtime (see cuda_runtime.h for what it is and is not):
 * devices, memory, errors, the cuBLAS shim, and the fibers that run a block whose kernel meets
 * at barriers.
 *
 * Fibers: one per CUDA thread of the block, each on its own stack, made once with makecontext
 * and switched with swapcontext. A fiber loops forever: run the kernel body for the thread it
 * is given, report done, wait; so a block costs switches, not context set-ups.
 * The scheduler resumes, round after round, every live thread that is not waiting at
 * __syncthreads; when none can move, the barrier opens. A barrier that some threads of the
 * block reach after others have exited, or a shuffle whose source lane is not at the same
 * shuffle, is a kernel bug: the launch stops and the thread's error names the kernel.
 */
#include "nn/cuda/internal.cuh"

#include <atomic>
#include <cblas.h>
#include <execinfo.h>
#include <map>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
std::mutex emu_launch_mutex;

/* --- errors --------------------------------------------------------------------------------- */

static thread_local cudaError_t last_error = cudaSuccess;

void emu_set_error(cudaError_t e)
{
    if (last_error == cudaSuccess)
        last_error = e;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorIllegalState:
        return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined:
        return "operation would result in a split graph";
    case cudaErrorStreamCaptureIsolation:
        return "dependency created on an uncaptured event";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    }
    return "unknown error";
}

/* --- devices, streams, memory --------------------------------------------------------------- */

static int emu_gpus(void)
{
    const char *e = getenv("DTRAIN_EMU_GPUS");
    if (!e || !*e)
        return 1;
    int n = atoi(e);
    return n < 0 ? 0 : n > 64 ? 64 : n;
}

static thread_local int current_dev;

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = emu_gpus();
    return *count ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= emu_gpus())
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "dtrain CUDA emulator (host CPU)");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->totalGlobalMem = (size_t)16 << 30;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= emu_gpus())
        return cudaErrorInvalidDevice;
    current_dev = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = current_dev;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

/* Streams are synchronous: a handle is only something to create and destroy. */
struct CUstream_st {
    int dev;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)calloc(1, sizeof(CUstream_st));
    if (!*s)
        return cudaErrorMemoryAllocation;
    (*s)->dev = current_dev;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    emu_capture_forget(s);
    free(s);
    return cudaSuccess;
}

/* Host-blocking calls of every thread: a stream or device sync, a blocking cudaMemcpy, and a
 * cudaMemcpyAsync into pageable host memory (real CUDA returns from that one only when the copy
 * is done, so it waits for the stream). The kernels here run at once, so nothing ever waits;
 * the count is what a GPU would have waited for, read by the tests with dlsym. */
static std::atomic<long> blocking_syncs;
static thread_local long thread_syncs;

/* DTRAIN_EMU_SYNC_TRACE=1: each one prints its stack, to find who waits. */
static void blocked(void)
{
    blocking_syncs++;
    thread_syncs++;
    static const char *trace = getenv("DTRAIN_EMU_SYNC_TRACE");
    if (trace && *trace == '1') {
        void *frames[12];
        int n = backtrace(frames, 12);
        fprintf(stderr, "emu: host-blocking call %ld:\n", blocking_syncs.load());
        backtrace_symbols_fd(frames, n, 2);
    }
}

/* every thread's, and the calling thread's (a replica's trainer thread) */
extern "C" __attribute__((visibility("default"))) long emu_blocking_syncs(void)
{
    return blocking_syncs.load();
}

extern "C" __attribute__((visibility("default"))) long emu_blocking_syncs_thread(void)
{
    return thread_syncs;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    blocked();
    return emu_capture_touch(s);
}

cudaError_t cudaDeviceSynchronize(void)
{
    blocked();
    return emu_capture_unsafe("cudaDeviceSynchronize");
}

/* Events: live handles by address, each with its device and whether it was recorded. */
struct CUevent_st {
    int dev;
    bool recorded;
    /* recorded inside a capture: its origin stream, the stream and that stream's work count */
    cudaStream_t cap, src;
    long seq;
};
static std::mutex events_mu;
static std::map<uintptr_t, int> events_live; /* handle -> 1 */
/* create, destroy, record, wait, synchronize, query: calls that succeeded */
static std::atomic<long> event_calls[6];

extern "C" __attribute__((visibility("default"))) void emu_event_counts(long out[6])
{
    for (int i = 0; i < 6; i++)
        out[i] = event_calls[i].load();
}

static bool event_ok(cudaEvent_t e)
{
    std::lock_guard<std::mutex> l(events_mu);
    return e && events_live.count((uintptr_t)e);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    if (!e || (flags & ~0x0fu))
        return cudaErrorInvalidValue;
    *e = (cudaEvent_t)calloc(1, sizeof(CUevent_st));
    if (!*e)
        return cudaErrorMemoryAllocation;
    (*e)->dev = current_dev;
    std::lock_guard<std::mutex> l(events_mu);
    events_live[(uintptr_t)*e] = 1;
    event_calls[0]++;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    {
        std::lock_guard<std::mutex> l(events_mu);
        if (!e || !events_live.erase((uintptr_t)e))
            return cudaErrorInvalidResourceHandle;
    }
    free(e);
    event_calls[1]++;
    return cudaSuccess;
}

/* In a capture, CUDA makes an event record and a wait dependencies between the graph's nodes
 * (fork and join, emu_graph.cpp); the emulator's graphs run their nodes in issue order, so the
 * record only notes where it was made. */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!event_ok(e))
        return cudaErrorInvalidResourceHandle;
    /* the stream and the event must belong to the same device (the legacy stream: the
     * current one) */
    if ((s ? s->dev : current_dev) != e->dev)
        return cudaErrorInvalidResourceHandle;
    cudaStream_t origin = NULL;
    long seq = 0;
    int r = emu_capture_record(s, &origin, &seq);
    if (r > 1)
        return (cudaError_t)r;
    e->cap = origin;
    e->src = s;
    e->seq = seq;
    e->recorded = true;
    event_calls[2]++;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    if (flags != 0)
        return cudaErrorInvalidValue;
    if (!event_ok(e))
        return cudaErrorInvalidResourceHandle;
    cudaError_t c = emu_capture_wait(s, e->cap, e->src, e->seq);
    if (c != cudaSuccess)
        return c;
    event_calls[3]++;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!event_ok(e))
        return cudaErrorInvalidResourceHandle;
    cudaError_t c = emu_capture_unsafe("cudaEventSynchronize"); /* a host wait, as a sync */
    if (c != cudaSuccess)
        return c;
    event_calls[4]++;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!event_ok(e))
        return cudaErrorInvalidResourceHandle;
    cudaError_t c = emu_capture_unsafe("cudaEventQuery");
    if (c != cudaSuccess)
        return c;
    event_calls[5]++;
    return cudaSuccess;
}

/* Every allocation, by address: cudaPointerGetAttributes tells device memory (and whose) from
 * pinned host memory, as nccl.cu asks. */
struct alloc_rec {
    size_t bytes;
    int dev;
    bool host;
};
static std::mutex allocs_mu;
static std::map<uintptr_t, alloc_rec> allocs;

static cudaError_t emu_alloc(void **p, size_t bytes, bool host)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    /* Fresh device memory is garbage on a GPU: 0xff bytes (float NaN) here, so a kernel that
     * reads what nobody wrote shows in the results (ctx.cu's alloc zeroes its buffers). */
    memset(*p, 0xff, bytes);
    std::lock_guard<std::mutex> l(allocs_mu);
    allocs[(uintptr_t)*p] = alloc_rec{bytes ? bytes : 1, current_dev, host};
    return cudaSuccess;
}

static cudaError_t emu_free(void *p, bool host)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> l(allocs_mu);
        auto it = allocs.find((uintptr_t)p);
        if (it == allocs.end() || it->second.host != host)
            return cudaErrorInvalidValue; /* not ours, or the other kind's free */
        allocs.erase(it);
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    cudaError_t e = emu_capture_unsafe("cudaMalloc");
    if (e != cudaSuccess) {
        *p = NULL;
        return e;
    }
    return emu_alloc(p, bytes, false);
}

cudaError_t cudaFree(void *p)
{
    cudaError_t e = emu_capture_unsafe("cudaFree");
    return e != cudaSuccess ? e : emu_free(p, false);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    cudaError_t e = emu_capture_unsafe("cudaMallocHost");
    if (e != cudaSuccess) {
        *p = NULL;
        return e;
    }
    return emu_alloc(p, bytes, true);
}

cudaError_t cudaFreeHost(void *p)
{
    cudaError_t e = emu_capture_unsafe("cudaFreeHost");
    return e != cudaSuccess ? e : emu_free(p, true);
}

bool emu_pageable(const void *p)
{
    std::lock_guard<std::mutex> l(allocs_mu);
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin())
        return true;
    --it;
    return (uintptr_t)p >= it->first + it->second.bytes;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof *a);
    a->device = -2;
    std::lock_guard<std::mutex> l(allocs_mu);
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin())
        return cudaSuccess;
    --it;
    if ((uintptr_t)p >= it->first + it->second.bytes)
        return cudaSuccess;
    a->type = it->second.host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    a->device = it->second.dev;
    a->devicePointer = it->second.host ? NULL : (void *)p;
    a->hostPointer = it->second.host ? (void *)p : NULL;
    return cudaSuccess;
}

/* Live allocations: out[0] device, out[1] pinned host (tests check that a backend frees them). */
extern "C" __attribute__((visibility("default"))) void emu_live_allocs(long out[2])
{
    std::lock_guard<std::mutex> l(allocs_mu);
    out[0] = out[1] = 0;
    for (const auto &a : allocs)
        out[a.second.host]++;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return cudaErrorInvalidValue;
    size_t total = (size_t)16 << 30, used = 0; /* cudaGetDeviceProperties's totalGlobalMem */
    {
        std::lock_guard<std::mutex> l(allocs_mu);
        for (const auto &a : allocs)
            if (!a.second.host && a.second.dev == current_dev)
                used += a.second.bytes;
    }
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    if (bytes && (!dst || !src))
        return cudaErrorInvalidValue;
    if (kind == cudaMemcpyDeviceToHost && bytes && emu_pageable(dst))
        blocked();
    if (!bytes)
        return cudaSuccess;
    cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(s, &st);
    if (st != cudaStreamCaptureStatusNone) {
        /* CUDA stages a pageable copy synchronously, which a capture cannot record */
        if (emu_pageable(dst) || emu_pageable(src)) {
            emu_capture_touch(s);
            return cudaErrorStreamCaptureUnsupported;
        }
        int r = emu_capture_enqueue(s, [dst, src, bytes] { memmove(dst, src, bytes); });
        if (r != 0)
            return r == 1 ? cudaSuccess : (cudaError_t)r;
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    cudaError_t e = emu_capture_unsafe("cudaMemcpy");
    if (!(kind == cudaMemcpyDeviceToHost && bytes && dst && emu_pageable(dst)))
        blocked(); /* else cudaMemcpyAsync counts it */
    return e != cudaSuccess ? e : cudaMemcpyAsync(dst, src, bytes, kind, 0);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    if (bytes && !p)
        return cudaErrorInvalidValue;
    if (!bytes)
        return cudaSuccess;
    int r = emu_capture_enqueue(s, [p, v, bytes] { memset(p, v, bytes); });
    if (r != 0)
        return r == 1 ? cudaSuccess : (cudaError_t)r;
    memset(p, v, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
    cudaError_t e = emu_capture_unsafe("cudaMemset");
    return e != cudaSuccess ? e : cudaMemsetAsync(p, v, bytes, 0);
}

/* --- cuBLAS --------------------------------------------------------------------------------- */

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = (cublasHandle_t)calloc(1, sizeof(cublasContext));
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h || (bytes && !ws))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS; /* the host GEMM needs none */
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

static CBLAS_TRANSPOSE trans(cublasOperation_t op)
{
    return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

/* Column-major: op(A) is m x k, op(B) k x n, C m x n; lda >= rows of A as stored. */
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < std::max(1, arows) || ldb < std::max(1, brows) ||
        ldc < std::max(1, m) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    /* On a capturing stream the call is recorded, alpha and beta by value (the host pointer
     * mode reads them when the call is made). */
    float al = *alpha, be = *beta;
    int r = emu_capture_enqueue(h->stream, [=] {
        cblas_sgemm(CblasColMajor, trans(ta), trans(tb), m, n, k, al, a, lda, b, ldb, be, c, ldc);
    });
    if (r > 1)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (r == 1)
        return CUBLAS_STATUS_SUCCESS;
    cblas_sgemm(CblasColMajor, trans(ta), trans(tb), m, n, k, *alpha, a, lda, b, ldb, *beta, c,
                ldc);
    return CUBLAS_STATUS_SUCCESS;
}

/* --- launch checks -------------------------------------------------------------------------- */

bool emu_launch_ok(const emu_config &c, const char *name)
{
    size_t threads = (size_t)c.b.x * c.b.y * c.b.z;
    if (!c.g.x || !c.g.y || !c.g.z || !threads || threads > 1024 || c.b.z > 64 || c.g.y > 65535 ||
        c.g.z > 65535) {
        char m[160];
        snprintf(m, sizeof m, "emulator: launch of %s with grid (%u, %u, %u), block (%u, %u, %u)",
                 name, c.g.x, c.g.y, c.g.z, c.b.x, c.b.y, c.b.z);
        dt_cu_fail(name, __FILE__, __LINE__, m);
        emu_set_error(cudaErrorInvalidConfiguration);
        return false;
    }
    return true;
}

/* --- fibers --------------------------------------------------------------------------------- */

enum { F_RUN, F_SYNC, F_SHFL, F_DONE };
#define MAX_THREADS 1024
#define STACK_BYTES (256u << 10)

struct fiber {
#if defined(__x86_64__)
    void *sp; /* where the fiber resumes */
#else
    ucontext_t uc;
#endif
    char *stack;
    bool made; /* has a context looping in fiber_main */
    int state;
    unsigned shfl_seq;
    uint64_t shfl_val;
};

/* All of it is used under emu_launch_mutex, from one OS thread at a time. */
static fiber fibers[MAX_THREADS];
static fiber *cur;
static void (*job_body)(void *);
static void *job_arg;
static const char *job_name;
static char job_err[200];

#if defined(__x86_64__)
/* The switch: push the callee-saved registers, swap stack pointers, pop the other side's. No
 * signal mask to save (swapcontext makes a system call per switch for it, which made the
 * barrier kernels' tests ten times slower). */
extern "C" void emu_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".globl emu_switch\n"
        ".hidden emu_switch\n"
        ".type emu_switch,@function\n"
        "emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_switch, .-emu_switch\n");
static void *sched_sp;
#define TO_SCHED(f)    emu_switch(&(f)->sp, sched_sp)
#define TO_FIBER(f)    emu_switch(&sched_sp, (f)->sp)
#define TO_NEXT(f, nx) emu_switch(&(f)->sp, (nx)->sp)
#else
static ucontext_t sched_uc;
#define TO_SCHED(f)    swapcontext(&(f)->uc, &sched_uc)
#define TO_FIBER(f)    swapcontext(&sched_uc, &(f)->uc)
#define TO_NEXT(f, nx) swapcontext(&(f)->uc, &(nx)->uc)
#endif

static unsigned block_nt, round_moved; /* the block's threads; resumptions this round */
static void set_tid(unsigned t);

/* The first thread at or after t that can run in this round: a round resumes the threads in
 * index order, so those after the current one have not run in it yet. */
static fiber *runnable(unsigned t)
{
    for (; t < block_nt; t++)
        if (fibers[t].state != F_DONE && fibers[t].state != F_SYNC)
            return &fibers[t];
    return NULL;
}

/* Out of the kernel until the scheduler's next round reaches this thread: straight into the
 * round's next thread (half the switches of going through the scheduler), or back to the
 * scheduler at the round's end. */
static void yield(int state)
{
    fiber *me = cur;
    me->state = state;
    fiber *nx = job_err[0] ? NULL : runnable((unsigned)(me - fibers) + 1);
    if (!nx) {
        TO_SCHED(me);
        return;
    }
    cur = nx;
    set_tid((unsigned)(nx - fibers));
    round_moved++;
    TO_NEXT(me, nx);
}

/* A fiber's life: one block's thread per resumption, forever. */
static void fiber_main(void)
{
    for (;;) {
        job_body(job_arg);
        yield(F_DONE);
    }
}

static void make_fiber(fiber *f)
{
    if (!f->stack)
        f->stack = (char *)malloc(STACK_BYTES);
    if (!f->stack) {
        fprintf(stderr, "cudaemu: out of memory for a fiber stack\n");
        abort();
    }
#if defined(__x86_64__)
    /* what emu_switch pops: six registers, then fiber_main as the return address, with the
     * stack 16-byte aligned after that return as at any function's entry */
    uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL; /* fiber_main's own return address: it never returns */
    *--sp = (void *)fiber_main;
    for (int i = 0; i < 6; i++)
        *--sp = NULL;
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = STACK_BYTES;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, fiber_main, 0);
#endif
    f->made = true;
}

static void resume(fiber *f)
{
    cur = f;
    TO_FIBER(f);
}

static void set_tid(unsigned t)
{
    threadIdx.x = t % blockDim.x;
    threadIdx.y = (t / blockDim.x) % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

/* Runs one block; false with job_err set when the kernel broke a barrier's rules. */
static bool run_block(unsigned nt)
{
    block_nt = nt;
    for (unsigned t = 0; t < nt; t++) {
        fibers[t].state = F_RUN;
        fibers[t].shfl_seq = 0;
    }
    for (;;) {
        round_moved = 0;
        fiber *first = runnable(0);
        if (first) {
            set_tid((unsigned)(first - fibers));
            round_moved++;
            resume(first); /* the round: each runnable thread in turn, then back here */
        }
        if (job_err[0])
            return false;
        unsigned live = 0, done = 0;
        for (unsigned t = 0; t < nt; t++) {
            if (fibers[t].state == F_DONE)
                done++;
            else
                live++;
        }
        if (!live)
            return true;
        if (round_moved)
            continue;
        /* everyone live waits at __syncthreads: the barrier opens */
        if (done) {
            snprintf(job_err, sizeof job_err,
                     "emulator: %u threads of a block wait at __syncthreads after %u exited "
                     "(a barrier in divergent code)",
                     live, done);
            return false;
        }
        for (unsigned t = 0; t < nt; t++)
            fibers[t].state = F_RUN;
    }
}

void emu_run_fibers(const emu_config &c, const char *name, void (*body)(void *), void *arg)
{
    unsigned nt = c.b.x * c.b.y * c.b.z;
    gridDim = c.g;
    blockDim = c.b;
    job_body = body;
    job_arg = arg;
    job_name = name;
    job_err[0] = '\0';
    for (unsigned t = 0; t < nt; t++)
        if (!fibers[t].made)
            make_fiber(&fibers[t]);
    for (unsigned bz = 0; bz < c.g.z; bz++)
        for (unsigned by = 0; by < c.g.y; by++)
            for (unsigned bx = 0; bx < c.g.x; bx++) {
                blockIdx = uint3{bx, by, bz};
                if (run_block(nt))
                    continue;
                /* the block's fibers are abandoned mid-kernel: remake them next time */
                for (unsigned t = 0; t < nt; t++)
                    if (fibers[t].state != F_DONE)
                        fibers[t].made = false;
                char m[300];
                snprintf(m, sizeof m, "%s (block %u, %u, %u)", job_err, bx, by, bz);
                dt_cu_fail(name, __FILE__, __LINE__, m);
                emu_set_error(cudaErrorLaunchFailure);
                cur = NULL;
                return;
            }
    cur = NULL;
}

static bool in_fiber(const char *what)
{
    if (cur)
        return true;
    char m[160];
    snprintf(m, sizeof m, "emulator: %s in a kernel run as a loop (cu2cpp.py missed it)", what);
    dt_cu_fail(what, __FILE__, __LINE__, m);
    emu_set_error(cudaErrorLaunchFailure);
    return false;
}

void __syncthreads(void)
{
    if (in_fiber("__syncthreads"))
        yield(F_SYNC);
}

/* The predicate forms: each thread publishes in its shuffle slot, then all meet twice. */
static int sync_pred(int pred, int mode)
{
    if (!in_fiber("__syncthreads_count"))
        return 0;
    cur->shfl_val = pred != 0;
    yield(F_SYNC);
    unsigned nt = blockDim.x * blockDim.y * blockDim.z, n = 0;
    for (unsigned t = 0; t < nt; t++)
        n += (unsigned)fibers[t].shfl_val;
    yield(F_SYNC);
    return mode == 0 ? (int)n : mode == 1 ? n > 0 : n == nt;
}

int __syncthreads_count(int pred)
{
    return sync_pred(pred, 0);
}

int __syncthreads_or(int pred)
{
    return sync_pred(pred, 1);
}

int __syncthreads_and(int pred)
{
    return sync_pred(pred, 2);
}

uint64_t emu_shfl(unsigned mask, uint64_t bits, int lane)
{
    if (!in_fiber("a warp shuffle"))
        return bits;
    fiber *me = cur;
    unsigned t = (unsigned)(me - fibers), nt = blockDim.x * blockDim.y * blockDim.z;
    if (mask != 0xffffffffu && !job_err[0])
        snprintf(job_err, sizeof job_err, "emulator: a shuffle with mask %#x (only full warps)",
                 mask);
    me->shfl_val = bits;
    me->shfl_seq++;
    yield(F_SHFL); /* every lane publishes */
    uint64_t r = bits;
    if (lane >= 0) {
        unsigned src = (t & ~31u) + (unsigned)lane;
        if (src >= nt || fibers[src].shfl_seq != me->shfl_seq) {
            if (!job_err[0])
                snprintf(job_err, sizeof job_err,
                         "emulator: thread %u shuffles from thread %u, which is not at the same "
                         "shuffle (exited, or diverged)",
                         t, src);
        } else {
            r = fibers[src].shfl_val;
        }
    }
    yield(F_SHFL); /* every lane has read before anyone publishes again */
    return r;
}
