/*
 * gemm.cu - C = alpha op(A) op(B) + beta C in row-major through column-major cuBLAS.
 *
 * A row-major (m, n) matrix is the column-major (n, m) one, so C^T = op(B)^T op(A)^T: cuBLAS
 * gets the operands swapped, each with its own transpose flag, and no data moves.
 */
#include "nn/cuda/internal.cuh"

static void cu_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    DT_CUBLAS(cublasSgemm(dt_cu_blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda, &beta, c,
                          ldc));
}

void dt_cu_fill_gemm(dt_nn_ops *o)
{
    o->gemm = cu_gemm;
}
