/*
 * cuda_runtime.h - the host emulator's CUDA runtime: what lib/nn/cuda/ (every .cu) use of CUDA, on
 * the CPU, so the real kernels and the real binding code (ctx.cu) run in CI as
 * build/libdtrain-cudaemu.so (see test/cudaemu/cu2cpp.py for the launch rewrite and emu_rt.cpp
 * for the fibers).
 *
 * What it is and is not:
 * - "Device" memory is host memory; streams are synchronous (a launch returns when its kernel is
 *   done), so nothing here tests stream ordering or host/device races.
 * - Blocks run one after another, and a process runs one launch at a time (a mutex: __shared__
 *   arrays are static, so two trainer threads must not share them concurrently). A kernel
 *   without barriers runs its threads as a loop; one with __syncthreads or warp shuffles runs
 *   them as fibers that meet at each barrier (cu2cpp.py decides which, statically). No memory
 *   model beyond that: a race that a GPU's timing would expose passes here.
 * - Float arithmetic is the host's IEEE float32 without contraction (-ffp-contract=off), so
 *   __fmul_rn & co. are plain operators; math functions are the host libm's, which may differ
 *   from CUDA's by ulps (the tests' bounds allow that; bit-equality tests compare against the
 *   CPU table, which uses the same libm).
 */
#ifndef DT_CUDAEMU_CUDA_RUNTIME_H
#define DT_CUDAEMU_CUDA_RUNTIME_H

#include <algorithm>
#include <cmath>
#include <functional>
#include <math.h>
#include <mutex>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__      static
#define __launch_bounds__(...)

/* --- vector types --------------------------------------------------------------------------- */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
    dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
};
struct int2 {
    int x, y;
};
static inline int2 make_int2(int x, int y)
{
    int2 r = {x, y};
    return r;
}
struct float2 {
    float x, y;
};
static inline float2 make_float2(float x, float y)
{
    float2 r = {x, y};
    return r;
}

/* --- errors --------------------------------------------------------------------------------- */
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnjoined = 904,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorStreamCaptureWrongThread = 908,
};
typedef cudaError_t cudaError;
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);    /* returns and clears the calling thread's last error */
cudaError_t cudaPeekAtLastError(void); /* returns it */
void emu_set_error(cudaError_t e);

/* --- devices, streams, memory --------------------------------------------------------------- */
struct CUstream_st;
typedef CUstream_st *cudaStream_t;
#define cudaStreamNonBlocking 0x01
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    int multiProcessorCount;
    size_t totalGlobalMem;
    int warpSize;
    int maxThreadsPerBlock;
};

cudaError_t cudaGetDeviceCount(int *count); /* DTRAIN_EMU_GPUS, default 1 */
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = 0);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
/* The device's totalGlobalMem, less what is allocated on it now. */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
/* Events. Work runs at once here, so a recorded event has always completed: record, wait and
 * synchronize only check their handles as the runtime does (a destroyed or unknown event, or a
 * record on a stream of another device, is cudaErrorInvalidResourceHandle; wait flags other
 * than 0 are cudaErrorInvalidValue). Every call is counted (emu_event_counts) for tests that
 * check a backend's use of them. */
struct CUevent_st;
typedef CUevent_st *cudaEvent_t;
#define cudaEventDefault       0x00
#define cudaEventBlockingSync  0x01
#define cudaEventDisableTiming 0x02
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
/* Device memory by range (an interior pointer is its allocation's), pinned host memory, or
 * anything else (unregistered). */
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);

/* --- stream capture and graphs (emu_graph.cpp) ------------------------------------------------
 * While a stream captures, what is enqueued on it (kernel launches, cudaMemcpyAsync,
 * cudaMemsetAsync, cuBLAS calls on a handle bound to it, NCCL collectives) is recorded with its
 * arguments copied, not run; cudaGraphLaunch runs the recorded work in order. CUDA's refusals are
 * kept: while the calling thread has a Global or ThreadLocal capture open, or any thread has a
 * Global one, the "potentially unsafe" calls (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost,
 * the synchronous cudaMemcpy/cudaMemset, cudaDeviceSynchronize) fail with
 * cudaErrorStreamCaptureUnsupported; so do cudaStreamSynchronize and cudaStreamQuery of a
 * capturing stream, and a capturing memcpy from or to pageable host memory (CUDA stages those
 * synchronously). A refusal on the capturing thread invalidates its capture: what follows on the
 * stream fails with cudaErrorStreamCaptureInvalidated, and so does cudaStreamEndCapture, which
 * ends it without a graph.
 * Fork and join as CUDA has them: an event recorded on a capturing stream, waited for by a
 * stream that is not capturing, brings that stream into the capture (its work is recorded into
 * the same graph, in the order it is issued, which the emulator's at-once execution makes a
 * valid order); an event recorded on such a forked stream after its last work and waited for
 * by a stream of the capture joins it back. cudaStreamEndCapture fails with
 * cudaErrorStreamCaptureUnjoined when a forked stream's last work was never joined, and a
 * capturing stream waiting for an event recorded outside its capture fails with
 * cudaErrorStreamCaptureIsolation (CUDA would need an external-event node). */
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
};
struct CUgraph_st;
typedef CUgraph_st *cudaGraph_t;
struct CUgraphExec_st;
typedef CUgraphExec_st *cudaGraphExec_t;
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
/* The emulator's side of it. emu_capture_enqueue: 0 when s is not capturing (run the work now),
 * 1 when f was recorded, or the error that refused it (the capture is then invalidated).
 * emu_capture_unsafe: cudaSuccess, or the refusal of a potentially unsafe call (what names it).
 * emu_capture_touch: the refusal of a synchronising call on s (cudaStreamSynchronize, Query). */
int emu_capture_enqueue(cudaStream_t s, std::function<void()> &&f);
cudaError_t emu_capture_unsafe(const char *what);
cudaError_t emu_capture_touch(cudaStream_t s);
void emu_capture_forget(cudaStream_t s); /* cudaStreamDestroy */
/* cudaEventRecord on s: 0 when s is not capturing (*origin NULL), 1 with the capture's origin
 * stream and s's count of recorded work (*seq), or the error that refused it. */
int emu_capture_record(cudaStream_t s, cudaStream_t *origin, long *seq);
/* cudaStreamWaitEvent(s, e) of an event recorded on src at seq in the capture of origin (NULL:
 * recorded outside any capture): cudaSuccess (a fork, a join or an ordinary wait) or the
 * refusal. */
cudaError_t emu_capture_wait(cudaStream_t s, cudaStream_t origin, cudaStream_t src, long seq);
/* Whether p is pageable host memory (neither cudaMalloc's nor cudaMallocHost's). */
bool emu_pageable(const void *p);

template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}

/* --- device intrinsics ---------------------------------------------------------------------- */
/* Round-to-nearest float32/float64 operations: the host's, with contraction off. */
static inline float __fadd_rn(float a, float b)
{
    return a + b;
}
static inline float __fsub_rn(float a, float b)
{
    return a - b;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
static inline float __fsqrt_rn(float a)
{
    return sqrtf(a);
}
static inline float __frcp_rn(float a)
{
    return 1.0f / a;
}
static inline float __fmaf_rn(float a, float b, float c)
{
    return fmaf(a, b, c);
}
static inline double __dadd_rn(double a, double b)
{
    return a + b;
}
static inline double __dsub_rn(double a, double b)
{
    return a - b;
}
static inline double __dmul_rn(double a, double b)
{
    return a * b;
}
static inline double __ddiv_rn(double a, double b)
{
    return a / b;
}
static inline double __dsqrt_rn(double a)
{
    return sqrt(a);
}
static inline double __fma_rn(double a, double b, double c)
{
    return fma(a, b, c);
}
static inline int __float2int_rn(float a)
{
    return (int)nearbyintf(a);
}
static inline int __float2int_rz(float a)
{
    return (int)a;
}
static inline int __float2int_rd(float a)
{
    return (int)floorf(a);
}
static inline int __float2int_ru(float a)
{
    return (int)ceilf(a);
}
static inline float __int2float_rn(int a)
{
    return (float)a;
}
static inline float __saturatef(float a)
{
    return a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a;
}
template <typename T> static inline T __ldg(const T *p)
{
    return *p;
}

/* Atomics: launches are serialised and threads run one at a time, so a plain read-modify-write
 * is atomic here (the kernels avoid float atomics anyway: reductions have a fixed order). */
template <typename T> static inline T atomicAdd(T *p, T v)
{
    T o = *p;
    *p = o + v;
    return o;
}
template <typename T> static inline T atomicSub(T *p, T v)
{
    T o = *p;
    *p = o - v;
    return o;
}
template <typename T> static inline T atomicMax(T *p, T v)
{
    T o = *p;
    *p = o < v ? v : o;
    return o;
}
template <typename T> static inline T atomicMin(T *p, T v)
{
    T o = *p;
    *p = v < o ? v : o;
    return o;
}
template <typename T> static inline T atomicExch(T *p, T v)
{
    T o = *p;
    *p = v;
    return o;
}
template <typename T> static inline T atomicCAS(T *p, T cmp, T v)
{
    T o = *p;
    if (o == cmp)
        *p = v;
    return o;
}
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

/* --- launch --------------------------------------------------------------------------------- */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

/* A barrier of the block (fiber mode; in loop mode it records an error: cu2cpp.py missed it). */
void __syncthreads(void);
int __syncthreads_or(int pred);
int __syncthreads_and(int pred);
int __syncthreads_count(int pred);
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
}

/* Warp shuffles: 8-byte slots per thread, two fiber switches a shuffle (publish, then read
 * once every lane has published). lane is the source lane's index in the warp, or -1 for
 * "keep my own value" (shfl_up/down past the edge). */
uint64_t emu_shfl(unsigned mask, uint64_t bits, int lane);
template <typename T> static inline T emu_shfl_t(unsigned mask, T v, int lane)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    b = emu_shfl(mask, b, lane);
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}
static inline unsigned emu_lane(void)
{
    return ((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) & 31u;
}
template <typename T> static inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32)
{
    unsigned l = emu_lane();
    return emu_shfl_t(m, v, (int)((l & ~(unsigned)(w - 1)) | ((l ^ (unsigned)x) & (w - 1))));
}
template <typename T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32)
{
    unsigned l = emu_lane();
    return emu_shfl_t(m, v, (int)((l & ~(unsigned)(w - 1)) + ((unsigned)src & (w - 1))));
}
template <typename T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32)
{
    unsigned l = emu_lane(), in = l & (unsigned)(w - 1);
    return emu_shfl_t(m, v, in + d < (unsigned)w ? (int)(l + d) : -1);
}
template <typename T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32)
{
    unsigned l = emu_lane(), in = l & (unsigned)(w - 1);
    return emu_shfl_t(m, v, in >= d ? (int)(l - d) : -1);
}

struct emu_config {
    dim3 g, b;
    cudaStream_t s;
};
static inline emu_config emu_cfg(dim3 g, dim3 b, size_t shared = 0, cudaStream_t s = 0)
{
    if (shared)
        emu_set_error(cudaErrorInvalidValue); /* no kernel uses dynamic shared memory */
    emu_config c = {g, b, s};
    return c;
}
extern std::mutex emu_launch_mutex;
/* Checks the geometry as a GPU does (false: the launch is refused with an error). */
bool emu_launch_ok(const emu_config &c, const char *name);
/* Runs every block of c, its threads as fibers meeting at barriers. */
void emu_run_fibers(const emu_config &c, const char *name, void (*body)(void *), void *arg);

/* The launch object of `emu_launch(cfg, barriers, "k", k)(args)`: its call takes the kernel's own
 * parameter types, so arguments convert as in a CUDA launch (NULL to a pointer) and are evaluated
 * once, before the threads run. On a capturing stream the launch (geometry checked, arguments
 * copied by value, as a graph's kernel node keeps them) is recorded instead. */
template <typename... P> struct emu_launcher {
    emu_config c;
    bool barriers;
    const char *name;
    void (*k)(P...);
    void operator()(P... a) const
    {
        if (c.s) {
            {
                std::lock_guard<std::mutex> lock(emu_launch_mutex);
                if (!emu_launch_ok(c, name))
                    return;
            }
            emu_launcher self = *this;
            int r = emu_capture_enqueue(c.s, [self, a...] { self.run(a...); });
            if (r > 1)
                emu_set_error((cudaError_t)r);
            if (r != 0)
                return;
        }
        run(a...);
    }
    void run(P... a) const
    {
        std::lock_guard<std::mutex> lock(emu_launch_mutex);
        if (!emu_launch_ok(c, name))
            return;
        auto body = [&] { k(a...); };
        if (barriers) {
            emu_run_fibers(
                c, name, [](void *p) { (*static_cast<decltype(body) *>(p))(); }, &body);
            return;
        }
        gridDim = c.g;
        blockDim = c.b;
        for (unsigned bz = 0; bz < c.g.z; bz++)
            for (unsigned by = 0; by < c.g.y; by++)
                for (unsigned bx = 0; bx < c.g.x; bx++) {
                    blockIdx = uint3{bx, by, bz};
                    for (unsigned tz = 0; tz < c.b.z; tz++)
                        for (unsigned ty = 0; ty < c.b.y; ty++)
                            for (unsigned tx = 0; tx < c.b.x; tx++) {
                                threadIdx = uint3{tx, ty, tz};
                                body();
                            }
                }
    }
};
template <typename... P>
static inline emu_launcher<P...> emu_launch(emu_config c, bool barriers, const char *name,
                                            void (*k)(P...))
{
    return emu_launcher<P...>{c, barriers, name, k};
}

#endif
