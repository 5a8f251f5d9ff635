/* ops_cpu_rgemm.c - the recurrent layers' small per-timestep products (rnn_pack, rnn_gemm in
 * nn/ops.h): an LSTM(64) on a batch of 32 runs 600 GEMMs of 32 x 256 x 64 a step, where
 * OpenBLAS's AVX2 kernels reach about 108 GFLOP/s (their packing of the same recurrent kernel
 * at every call included). Here the recurrent kernel is packed once per pass into panels of 32
 * columns and a register-blocked kernel (8 x 32 with AVX-512, 6 x 16 with AVX2 and FMA) runs
 * over it: 2.2-2.5x faster on this project's AVX-512 EPYC, 1.2-1.4x with AVX2.
 *
 * Every output element is one chain of fused multiply-adds over k in order, starting from 0 or
 * from c (beta 1), whatever the tile or the instruction set: the AVX-512 and AVX2 kernels give
 * the same bits, and so does a batch split over replicas. Without FMA (pre-2013 x86 and other
 * CPUs) rnn_pack copies B plainly and rnn_gemm is OpenBLAS's, whose bits differ by core anyway. */
#include "nn/ops_cpu.h"

#include <cblas.h>
#include <stdbool.h>
#include <string.h>

#define PANEL 32 /* columns of a packed panel; the last panel of a matrix may be narrower */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RG_X86 1
#else
#define RG_X86 0
#endif

static int forced; /* dt__nn_cpu_rnn_gemm_isa */

static bool has_avx2_fma(void)
{
#if RG_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static bool has_avx512(void)
{
#if RG_X86
    return has_avx2_fma() && __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

/* The packed kernels run where the CPU has FMA (and AVX2); else the plain layout and OpenBLAS. */
static bool packed(void)
{
    return forced ? forced >= 2 : has_avx2_fma();
}

static bool wide(void)
{
    return forced ? forced == 3 : has_avx512();
}

bool dt__nn_cpu_rnn_gemm_isa(int level)
{
    if (level < 0 || level > 3 || (level == 2 && !has_avx2_fma()) || (level == 3 && !has_avx512()))
        return false;
    forced = level;
    return true;
}

/* B(kk, j): b (k, n) row-major, or with tb b^T (b is (n, k)). Packed: panel q (columns
 * q PANEL.., width w) is k rows of w floats at p + q PANEL k. */
void dt__nn_cpu_rnn_pack(bool tb, int k, int n, const float *b, int ldb, float *p)
{
    if (!packed()) {
        for (int kk = 0; kk < k; kk++)
            for (int j = 0; j < n; j++)
                p[(size_t)kk * n + j] = tb ? b[(size_t)j * ldb + kk] : b[(size_t)kk * ldb + j];
        return;
    }
    for (int j0 = 0; j0 < n; j0 += PANEL) {
        int w = n - j0 < PANEL ? n - j0 : PANEL;
        float *q = p + (size_t)j0 * k;
        for (int kk = 0; kk < k; kk++)
            for (int j = 0; j < w; j++)
                q[(size_t)kk * w + j] =
                    tb ? b[(size_t)(j0 + j) * ldb + kk] : b[(size_t)kk * ldb + j0 + j];
    }
}

#if RG_X86
/* One tile: MR rows of c from row i0, the panel's w <= 32 columns from column j0. A(i, kk) at
 * a[i ar + kk ak] (ar, ak = lda, 1, or 1, lda with ta). */
#define TILE512(MR)                                                                                \
    __attribute__((target("avx512f"))) static void tile512_##MR(                                   \
        int k, const float *a, int ar, int ak, const float *q, int ldq, int w, float *c, int ldc,  \
        bool acc)                                                                                  \
    {                                                                                              \
        __mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);                              \
        __mmask16 m1 = (__mmask16)(w >= 32 ? 0xffff : w > 16 ? (1u << (w - 16)) - 1 : 0);          \
        __m512 s0[MR], s1[MR];                                                                     \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                       \
        {                                                                                          \
            s0[r] = acc ? _mm512_maskz_loadu_ps(m0, c + (size_t)r * ldc) : _mm512_setzero_ps();    \
            s1[r] =                                                                                \
                acc ? _mm512_maskz_loadu_ps(m1, c + (size_t)r * ldc + 16) : _mm512_setzero_ps();   \
        }                                                                                          \
        for (int kk = 0; kk < k; kk++) {                                                           \
            __m512 b0 = _mm512_maskz_loadu_ps(m0, q + (size_t)kk * ldq);                           \
            __m512 b1 = _mm512_maskz_loadu_ps(m1, q + (size_t)kk * ldq + 16);                      \
            const float *ak_ = a + (size_t)kk * ak;                                                \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                   \
            {                                                                                      \
                __m512 x = _mm512_set1_ps(ak_[(size_t)r * ar]);                                    \
                s0[r] = _mm512_fmadd_ps(x, b0, s0[r]);                                             \
                s1[r] = _mm512_fmadd_ps(x, b1, s1[r]);                                             \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                       \
        {                                                                                          \
            _mm512_mask_storeu_ps(c + (size_t)r * ldc, m0, s0[r]);                                 \
            _mm512_mask_storeu_ps(c + (size_t)r * ldc + 16, m1, s1[r]);                            \
        }                                                                                          \
    }
TILE512(8)
TILE512(4)
TILE512(2)
TILE512(1)

/* AVX2 has 16 registers: a whole panel in two halves of 16 columns, 6 rows a tile (12 sums, 2
 * of B, 1 of A). */
#define TILE256(MR)                                                                                \
    __attribute__((target("avx2,fma"))) static void tile256_##MR(                                  \
        int k, const float *a, int ar, int ak, const float *q, int ldq, int w, float *c, int ldc,  \
        bool acc)                                                                                  \
    {                                                                                              \
        (void)w; /* always 16 columns */                                                           \
        __m256 s0[MR], s1[MR];                                                                     \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                       \
        {                                                                                          \
            s0[r] = acc ? _mm256_loadu_ps(c + (size_t)r * ldc) : _mm256_setzero_ps();              \
            s1[r] = acc ? _mm256_loadu_ps(c + (size_t)r * ldc + 8) : _mm256_setzero_ps();          \
        }                                                                                          \
        for (int kk = 0; kk < k; kk++) {                                                           \
            __m256 b0 = _mm256_loadu_ps(q + (size_t)kk * ldq);                                     \
            __m256 b1 = _mm256_loadu_ps(q + (size_t)kk * ldq + 8);                                 \
            const float *ak_ = a + (size_t)kk * ak;                                                \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                   \
            {                                                                                      \
                __m256 x = _mm256_broadcast_ss(ak_ + (size_t)r * ar);                              \
                s0[r] = _mm256_fmadd_ps(x, b0, s0[r]);                                             \
                s1[r] = _mm256_fmadd_ps(x, b1, s1[r]);                                             \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                       \
        {                                                                                          \
            _mm256_storeu_ps(c + (size_t)r * ldc, s0[r]);                                          \
            _mm256_storeu_ps(c + (size_t)r * ldc + 8, s1[r]);                                      \
        }                                                                                          \
    }
TILE256(6)
TILE256(2)
TILE256(1)

/* A narrower last panel, a row at a time under masks (lane l of part v on when 8 v + l < w). */
__attribute__((target("avx2,fma"))) static void
tile256_narrow(int k, const float *a, int ak, const float *q, int ldq, int w, float *c, bool acc)
{
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), mk[4];
    __m256 s[4];
    for (int v = 0; v < 4; v++) {
        mk[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - 8 * v), lane);
        s[v] = acc ? _mm256_maskload_ps(c + 8 * v, mk[v]) : _mm256_setzero_ps();
    }
    for (int kk = 0; kk < k; kk++) {
        __m256 x = _mm256_broadcast_ss(a + (size_t)kk * ak);
        for (int v = 0; v < 4; v++)
            s[v] =
                _mm256_fmadd_ps(x, _mm256_maskload_ps(q + (size_t)kk * ldq + 8 * v, mk[v]), s[v]);
    }
    for (int v = 0; v < 4; v++)
        _mm256_maskstore_ps(c + 8 * v, mk[v], s[v]);
}

typedef void tile_fn(int k, const float *a, int ar, int ak, const float *q, int ldq, int w,
                     float *c, int ldc, bool acc);

/* Rows kk0.. (kc of them) of one panel over all row tiles of c; acc: add to c. */
static void panel(bool w5, int m, int kc, const float *a, int ar, int ak, const float *q, int ldq,
                  int w, float *c, int ldc, bool acc)
{
    /* tiles of rows, tallest first: the tile sets no bits, only which rows share loads */
    tile_fn *t512[] = {tile512_8, tile512_4, tile512_2, tile512_1};
    tile_fn *t256[] = {tile256_6, tile256_2, tile256_1};
    const int h512[] = {8, 4, 2, 1}, h256[] = {6, 2, 1};
    if (!w5 && w < PANEL) {
        for (int i = 0; i < m; i++)
            tile256_narrow(kc, a + (size_t)i * ar, ak, q, ldq, w, c + (size_t)i * ldc, acc);
        return;
    }
    /* AVX-512: the panel in one; AVX2: in halves of 16 columns */
    for (int h = 0; h < (w5 ? 1 : 2); h++) {
        int i0 = 0;
        for (int t = 0; t < (w5 ? 4 : 3); t++) {
            int th = w5 ? h512[t] : h256[t];
            for (; i0 + th <= m; i0 += th)
                (w5 ? t512 : t256)[t](kc, a + (size_t)i0 * ar, ar, ak, q + 16 * h, ldq, w,
                                      c + (size_t)i0 * ldc + 16 * h, ldc, acc);
        }
    }
}
#endif

/* B plain is copied a block of KC rows of a panel at a time into a local buffer first: the
 * gate gradients' rows lie T G u floats apart (a multiple of 4 KiB for an LSTM(64) on 200
 * steps), so read in place every row of a block falls in one L1 set. A block boundary splits
 * no sum: the partial sums go through c as the floats they are. */
#define KC 64

void dt__nn_cpu_rnn_gemm(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                         int ldb, float beta, float *c, int ldc)
{
#if RG_X86
    if (packed()) {
        int ar = ta ? 1 : lda, ak = ta ? lda : 1;
        bool w5 = wide();
        float buf[KC * PANEL];
        for (int j0 = 0; j0 < n; j0 += PANEL) {
            int w = n - j0 < PANEL ? n - j0 : PANEL;
            if (!ldb) { /* packed: the panel's k rows of w floats */
                panel(w5, m, k, a, ar, ak, b + (size_t)j0 * k, w, w, c + j0, ldc, beta != 0);
                continue;
            }
            for (int k0 = 0; k0 < k; k0 += KC) {
                int kc = k - k0 < KC ? k - k0 : KC;
                for (int kk = 0; kk < kc; kk++) {
                    const float *src = b + (size_t)(k0 + kk) * ldb + j0;
                    if (w == PANEL) /* a fixed count: the copy vectorises */
                        memcpy(buf + kk * PANEL, src, PANEL * sizeof(float));
                    else
                        memcpy(buf + kk * PANEL, src, (size_t)w * sizeof(float));
                }
                panel(w5, m, kc, a + (size_t)k0 * ak, ar, ak, buf, PANEL, w, c + j0, ldc,
                      beta != 0 || k0 > 0);
            }
        }
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda,
                b, ldb ? ldb : n, beta, c, ldc);
}
