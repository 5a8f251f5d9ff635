/*
 * internal.cuh - what the CUDA backend's files share: the calling thread's binding, error
 * recording, launch geometry and the deterministic block reduction.
 *
 * Each kernel file (elem.cu, conv.cu, ...) fills its entries of the ops table in a
 * dt_cu_fill_<group>(dt_nn_ops *) function that ctx.cu calls once; everything else in a file is
 * static. Kernels run on dt_cu_stream(); host code never synchronises except where the ops
 * contract blocks (download, sync, free), and records the first error with DT_CU /
 * DT_CU_LAUNCH instead of returning it (ops kernels return nothing).
 */
#ifndef DT_NN_CUDA_INTERNAL_CUH
#define DT_NN_CUDA_INTERNAL_CUH

#include "nn/cuda/api.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* The calling thread's binding (thread_local in ctx.cu). */
struct dt_cu_ctx {
    int dev;
    bool bound;
    bool tf32;
    cudaStream_t stream;
    cublasHandle_t blas;
    char err[256]; /* first error since the last sync; "" when none */
    /* Scratch that grows on demand and is kept for the thread (no allocation per step). */
    void *scratch;
    size_t scratch_bytes;
    /* CUDA graphs: the live ones, whose nodes may point into scratch, so a scratch that grows
     * while any lives is retired (kept until the last graph is freed) instead of freed; and
     * cuBLAS's workspace, set once so that a captured GEMM allocates nothing. */
    int graphs;
    void **retired; /* malloc'd, n_retired of cap_retired */
    int n_retired, cap_retired;
    void *blas_ws;
    /* The copy stream of upload_async (fit's feed), made on the first use. */
    cudaStream_t copy;
};

dt_cu_ctx *dt_cu_ctx_get(void);
cudaStream_t dt_cu_stream(void);
cublasHandle_t dt_cu_blas(void);

/* Records the first error of the thread: "<what> (<file>:<line>): <text>". */
void dt_cu_fail(const char *what, const char *file, int line, const char *text);
#define DT_CU(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            dt_cu_fail(#call, __FILE__, __LINE__, cudaGetErrorString(e_));                         \
    } while (0)
#define DT_CU_LAUNCH(name) DT_CU(cudaPeekAtLastError())
#define DT_CUBLAS(call)                                                                            \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            dt_cu_fail(#call, __FILE__, __LINE__, cublasGetStatusString(s_));                      \
    } while (0)

/* Device scratch of at least `bytes`, valid until the next call on this thread (grows; the
 * old buffer is freed after the stream drains, so a kernel still reading it is safe). */
void *dt_cu_scratch(size_t bytes);
/* Copies bytes from device to host and waits: download's blocking copy. */
void dt_cu_download_sync(void *host, const void *dev, size_t bytes);

/* Launch geometry for n independent elements: 256 threads, grid capped (grid-stride loops). */
#define DT_CU_THREADS 256
static inline unsigned dt_cu_blocks(size_t n)
{
    size_t b = (n + DT_CU_THREADS - 1) / DT_CU_THREADS;
    if (b > 65535u * 8u)
        b = 65535u * 8u;
    return b ? (unsigned)b : 1u;
}
#define DT_CU_FOR(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);                \
         i += (size_t)blockDim.x * gridDim.x)

/* Sum of v over the block's threads in a fixed tree order (same bits every run); the result
 * is valid in thread 0. blockDim.x must be a power of two <= 1024; sh has blockDim.x slots. */
template <typename T> __device__ inline T dt_cu_block_sum(T v, T *sh)
{
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] += sh[t + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

/* Float operations rounded on their own, as the CPU's C11 code rounds them: nvcc would fuse a
 * product into a following add (an FMA), which changes the bits, and a clip or comparison that
 * follows can then flip. */
static __device__ __forceinline__ float rmul(float a, float b)
{
    return __fmul_rn(a, b);
}
static __device__ __forceinline__ float radd(float a, float b)
{
    return __fadd_rn(a, b);
}
static __device__ __forceinline__ float rsub(float a, float b)
{
    return __fsub_rn(a, b);
}
static __device__ __forceinline__ float rdiv(float a, float b)
{
    return __fdiv_rn(a, b);
}

/* Each kernel file fills its entries. */
void dt_cu_fill_mem(dt_nn_ops *o);   /* ctx.cu: alloc, free, upload, download */
void dt_cu_fill_gemm(dt_nn_ops *o);  /* gemm.cu */
void dt_cu_fill_elem(dt_nn_ops *o);  /* elem.cu: bias, act, dropout, vector ops */
void dt_cu_fill_conv(dt_nn_ops *o);  /* conv.cu: im2col, col2im, pool, depthwise, max */
void dt_cu_fill_norm(dt_nn_ops *o);  /* norm.cu: batch, layer and Normalization */
void dt_cu_fill_train(dt_nn_ops *o); /* train.cu: loss, regularization, hits, update, clip */
void dt_cu_fill_image(dt_nn_ops *o); /* image.cu: the augmentation kernels */
void dt_cu_fill_graph(dt_nn_ops *o); /* ctx.cu: capture and replay */
void dt_cu_fill_seq(dt_nn_ops *o);   /* seq.cu: embedding, seq_mean, attention mask, rnn, cat */

/* nccl.cu: the api's clique entries (see api.h). */
int dt_cu_clique_new(int n, const int *devs, void **out, char *msg, size_t len);
int dt_cu_clique_allreduce(void *c, int m, float *buf, size_t count, char *msg, size_t len);
int dt_cu_clique_broadcast(void *c, int m, void *buf, size_t bytes, int root, char *msg,
                           size_t len);
int dt_cu_clique_reduce_scatter(void *c, int m, float *buf, size_t shard, char *msg, size_t len);
int dt_cu_clique_all_gather(void *c, int m, float *buf, size_t shard, char *msg, size_t len);
int dt_cu_clique_join(void *c, int m, char *msg, size_t len);
void dt_cu_clique_abort(void *c);
void dt_cu_clique_free(void *c);

#endif
