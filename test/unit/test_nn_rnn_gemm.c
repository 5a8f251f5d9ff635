/* test_nn_rnn_gemm.c - the CPU's rnn_pack / rnn_gemm (nn/ops.h): every output element is one
 * chain of fused multiply-adds over k in order from 0 (beta 0) or from c (beta 1), so the AVX2
 * and AVX-512 kernels must give exactly the bits of a scalar fmaf loop, on the recurrent layers'
 * shapes (32 x 256 x 64 and its transposes) and on ragged ones: rows that no tile height
 * divides, a last panel narrower than 32 columns, k of 1, A transposed, strided A, B given
 * transposed to rnn_pack, B given unpacked (ldb > 0), c's columns beyond n left alone, and the
 * sequence-long products x W, d(a) W^T and x^T d(a) (k over many blocks). The OpenBLAS
 * fallback (CPUs without FMA) is held to float64 within float32 rounding. */
#include "dt_test.h"
#include "nn/ops.h"
#include "nn/ops_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float uni(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffffff) / 16777216.0f - 0.5f;
}

typedef struct shape {
    int m, n, k;
    bool ta, tb;
    float beta;
    int pad; /* extra floats in each row of a and b (strides beyond the width) */
} shape;

static const shape shapes[] = {
    {32, 256, 64, false, false, 0, 0},  /* h0 U */
    {32, 64, 256, false, true, 1, 768}, /* d(a) U^T, d(a)'s rows strided as in (T, G u) */
    {64, 256, 32, true, false, 1, 0},   /* h0^T d(a) */
    {7, 40, 10, false, false, 1, 3},    /* 7 rows: 4 + 2 + 1 (AVX-512), 3 + 3 + 1 (AVX2) */
    {13, 70, 33, true, true, 0, 5},     /* panels 32 + 32 + 6 */
    {1, 5, 1, false, false, 1, 0},      /* one row, one narrow panel, k 1 */
    {9, 17, 256, false, true, 1, 1},    /* panel of 17: both halves of the AVX-512 masks */
    {11, 96, 7, true, false, 0, 2},     /* whole panels only */
    /* the sequence-long products (n T rows; an LSTM(64) on 128 features, fewer rows) */
    {203, 256, 128, false, false, 0, 0}, /* x W */
    {203, 128, 256, false, true, 1, 0},  /* d(a) W^T, accumulated over directions */
    {128, 256, 700, true, false, 0, 0},  /* x^T d(a): k of 10 blocks of 64 and one of 60 */
    {128, 64, 700, true, false, 0, 192}, /* a dropout group's columns of d(a) in place */
};

static void check(const shape *s, const float *a, int lda, const float *b, int ldb, const float *c,
                  const float *c0, int ldc, bool exact);

/* One shape at the given kernel level; exact: compare bits with the fmaf chain, else float64. */
static void run(const shape *s, int level, bool exact)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    int lda = (s->ta ? s->m : s->k) + s->pad, ldb = (s->tb ? s->k : s->n) + s->pad;
    int ldc = s->n + 3;
    size_t na = (size_t)(s->ta ? s->k : s->m) * lda, nb = (size_t)(s->tb ? s->n : s->k) * ldb;
    size_t nc = (size_t)s->m * ldc;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = malloc(nc * sizeof(float)), *c0 = malloc(nc * sizeof(float));
    float *p = malloc((size_t)s->k * s->n * sizeof(float));
    unsigned seed = 7u + (unsigned)level;
    for (size_t i = 0; i < na; i++)
        a[i] = uni(&seed);
    for (size_t i = 0; i < nb; i++)
        b[i] = uni(&seed);
    for (size_t i = 0; i < nc; i++)
        c0[i] = c[i] = uni(&seed);
    ASSERT_TRUE(dt__nn_cpu_rnn_gemm_isa(level));
    /* B packed, then (not transposed) B as it is */
    for (int plain = 0; plain < (s->tb ? 1 : 2); plain++) {
        memcpy(c, c0, nc * sizeof(float));
        if (plain) {
            o->rnn_gemm(s->ta, s->m, s->n, s->k, a, lda, b, ldb, s->beta, c, ldc);
        } else {
            o->rnn_pack(s->tb, s->k, s->n, b, ldb, p);
            o->rnn_gemm(s->ta, s->m, s->n, s->k, a, lda, p, 0, s->beta, c, ldc);
        }
        check(s, a, lda, b, ldb, c, c0, ldc, exact);
    }
    free(a), free(b), free(c), free(c0), free(p);
}

/* c against the fmaf chain (exact) or float64, and untouched beyond column n. */
static void check(const shape *s, const float *a, int lda, const float *b, int ldb, const float *c,
                  const float *c0, int ldc, bool exact)
{
    for (int i = 0; i < s->m; i++) {
        for (int j = 0; j < ldc; j++) {
            float got = c[(size_t)i * ldc + j], old = c0[(size_t)i * ldc + j];
            if (j >= s->n) { /* beyond the product's columns: untouched */
                ASSERT_TRUE(got == old);
                continue;
            }
            float f = s->beta != 0 ? old : 0.0f;
            double d = s->beta != 0 ? old : 0.0, mag = fabs(d);
            for (int kk = 0; kk < s->k; kk++) {
                float x = s->ta ? a[(size_t)kk * lda + i] : a[(size_t)i * lda + kk];
                float y = s->tb ? b[(size_t)j * ldb + kk] : b[(size_t)kk * ldb + j];
                f = fmaf(x, y, f);
                d += (double)x * y;
                mag += fabs((double)x * y);
            }
            if (exact)
                ASSERT_TRUE(memcmp(&got, &f, sizeof f) == 0);
            else
                ASSERT_NEAR(got, d, 1e-6 * mag + 1e-7);
        }
    }
}

DT_TEST(nn_rnn_gemm_avx2_fmaf_bits)
{
    if (!dt__nn_cpu_rnn_gemm_isa(2))
        DT_SKIP("the CPU has no AVX2 and FMA");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run(&shapes[i], 2, true);
}

DT_TEST(nn_rnn_gemm_avx512_fmaf_bits)
{
    if (!dt__nn_cpu_rnn_gemm_isa(3))
        DT_SKIP("the CPU has no AVX-512");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run(&shapes[i], 3, true);
}

DT_TEST(nn_rnn_gemm_openblas_fallback)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run(&shapes[i], 1, false);
}
