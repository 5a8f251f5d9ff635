/*
 * cublas_v2.h - the host emulator's cuBLAS: handles, and SGEMM through OpenBLAS's cblas_sgemm
 * with cuBLAS's column-major semantics and its argument checks (a leading dimension too small
 * for its matrix is CUBLAS_STATUS_INVALID_VALUE, as on a GPU). The math mode is recorded and
 * ignored: the host has no TF32, so "tf32" runs are strict float32 here.
 */
#ifndef DT_CUDAEMU_CUBLAS_V2_H
#define DT_CUDAEMU_CUBLAS_V2_H

#include "cuda_runtime.h"

typedef enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
} cublasStatus_t;
typedef enum cublasOperation_t {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2
} cublasOperation_t;
typedef enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
} cublasMath_t;
struct cublasContext;
typedef cublasContext *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
/* Recorded and ignored (OpenBLAS needs no workspace); ctx.cu gives the real one a workspace so
 * that a captured GEMM allocates nothing. */
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc);

#endif
