/* ops_cpu.c - the CPU backend: GEMM on OpenBLAS, everything else in plain loops over host memory.
 * Convolution lowering and pooling live in ops_cpu_conv.c, losses and optimizers in
 * ops_cpu_train.c; this file holds the table and the element-wise kernels. */
#include "nn/dropout_hash.h"
#include "nn/ops.h"
#include "nn/ops_cpu.h"

/* The element-wise loops are the time of a step that is not GEMM. GCC's -O2 vectorizes only
 * loops it needs no runtime checks for; these kernels are written branch-free over restrict
 * pointers and compiled at O3 so that they vectorize (SSE2 baseline, no -march). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(size_t bytes)
{
    /* 64-byte alignment: whole cache lines for the GEMM packing and the vector loops. */
    size_t sz = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz ? sz : 64);
    if (p)
        memset(p, 0, sz ? sz : 64);
    return p;
}

static void cpu_free(void *p)
{
    free(p);
}

static void cpu_memcpy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
}

static void *cpu_host_alloc(size_t bytes)
{
    return calloc(1, bytes ? bytes : 1);
}

static void cpu_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void cpu_bias_add(float *y, const float *b, size_t rows, int cols)
{
    for (size_t r = 0; r < rows; r++) {
        float *yr = y + r * (size_t)cols;
        for (int j = 0; j < cols; j++)
            yr[j] += b[j];
    }
}

/* Column sums: a conv bias sums n*oh*ow rows (43k for the tutorial CNN), where float
 * accumulation loses about 1e-5 relative. Blocks of 32 rows are summed in float (vector adds,
 * error ~1e-7 of the block) and the blocks in double. */
#define BIAS_BLOCK 32
static void cpu_bias_grad(const float *restrict dy, size_t rows, int cols, float *restrict db,
                          bool acc)
{
    double dstack[256], *s = cols <= 256 ? dstack : calloc((size_t)cols, sizeof(double));
    float fstack[256], *f = cols <= 256 ? fstack : calloc((size_t)cols, sizeof(float));
    if (!s || !f)
        abort(); /* cols * 12 bytes; a broken invariant rather than input */
    memset(s, 0, sizeof(double) * (size_t)cols);
    for (size_t r0 = 0; r0 < rows; r0 += BIAS_BLOCK) {
        size_t r1 = r0 + BIAS_BLOCK < rows ? r0 + BIAS_BLOCK : rows;
        memset(f, 0, sizeof(float) * (size_t)cols);
        for (size_t r = r0; r < r1; r++) {
            const float *d = dy + r * (size_t)cols;
            for (int j = 0; j < cols; j++)
                f[j] += d[j];
        }
        for (int j = 0; j < cols; j++)
            s[j] += f[j];
    }
    for (int j = 0; j < cols; j++)
        db[j] = acc ? db[j] + (float)s[j] : (float)s[j];
    if (s != dstack)
        free(s);
    if (f != fstack)
        free(f);
}

#define SELU_ALPHA 1.6732632423543772848170429916717
#define SELU_SCALE 1.0507009873554804934193349852946

static float sigmoidf(float z)
{
    return z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
}

/* Keras's ReLU layer: x above threshold (capped at max_value), minus slope * (threshold - x)
 * below it (keras.activations.relu). */
static float relu_layer(const dt_nn_act_p *a, float x)
{
    float y = x > a->threshold ? x : 0.0f;
    if (a->max_value > 0 && isfinite(a->max_value) && y > a->max_value)
        y = a->max_value;
    if (a->alpha != 0 && x < a->threshold)
        y -= a->alpha * (a->threshold - x);
    return y;
}

static float relu_layer_grad(const dt_nn_act_p *a, float x)
{
    float g = 0.0f;
    if (x > a->threshold && !(a->max_value > 0 && isfinite(a->max_value) && x >= a->max_value))
        g = 1.0f;
    if (a->alpha != 0 && x < a->threshold)
        g += a->alpha;
    return g;
}

static void softmax_rows(const float *z, float *y, size_t rows, int cols)
{
    for (size_t r = 0; r < rows; r++) {
        const float *zr = z + r * (size_t)cols;
        float *yr = y + r * (size_t)cols;
        float mx = zr[0];
        for (int j = 1; j < cols; j++)
            mx = zr[j] > mx ? zr[j] : mx;
        double s = 0;
        for (int j = 0; j < cols; j++) {
            yr[j] = expf(zr[j] - mx);
            s += yr[j];
        }
        float inv = (float)(1.0 / s);
        for (int j = 0; j < cols; j++)
            yr[j] *= inv;
    }
}

static void relu_fwd(const float *z, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = z[i] > 0 ? z[i] : 0.0f;
}

/* 4-wide vectors of GCC/clang (SSE2 at least on x86-64, NEON on arm64): the compiler does not
 * vectorize these loops at -O2 by itself. */
typedef float dt_v4f __attribute__((vector_size(16)));
typedef int32_t dt_v4i __attribute__((vector_size(16)));

static void relu_bwd(const float *y, const float *dy, float *dz, size_t n, bool acc)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        dt_v4f yv, dv, ov;
        memcpy(&yv, y + i, 16);
        memcpy(&dv, dy + i, 16);
        dt_v4i keep = yv > (dt_v4f){0, 0, 0, 0}; /* all ones where y > 0 */
        dt_v4f g = (dt_v4f)((dt_v4i)dv & keep);
        if (acc) {
            memcpy(&ov, dz + i, 16);
            g += ov;
        }
        memcpy(dz + i, &g, 16);
    }
    for (; i < n; i++) {
        float g = y[i] > 0 ? dy[i] : 0.0f;
        dz[i] = acc ? dz[i] + g : g;
    }
}

/* The ReLU layer as MobileNet uses it (ReLU6: max_value m, no slope, threshold 0): the same
 * values as relu_layer and relu_layer_grad, without a branch per element. */
static bool relu_clip_only(const dt_nn_act_p *a)
{
    return a->alpha == 0 && a->threshold == 0 && a->max_value > 0 && isfinite(a->max_value);
}

static void relu_clip_fwd(const float *z, float *y, size_t n, float m)
{
    size_t i = 0;
    dt_v4f zero = {0, 0, 0, 0}, mv = {m, m, m, m};
    for (; i + 4 <= n; i += 4) {
        dt_v4f v;
        memcpy(&v, z + i, 16);
        v = (dt_v4f)((dt_v4i)v & (v > zero)); /* x > 0 ? x : 0 (NaN: 0, as relu_layer) */
        dt_v4i big = v > mv;
        v = (dt_v4f)(((dt_v4i)mv & big) | ((dt_v4i)v & ~big));
        memcpy(y + i, &v, 16);
    }
    for (; i < n; i++) {
        float v = z[i] > 0 ? z[i] : 0.0f;
        y[i] = v > m ? m : v;
    }
}

static void relu_clip_bwd(const float *z, const float *dy, float *dz, size_t n, float m, bool acc)
{
    size_t i = 0;
    dt_v4f zero = {0, 0, 0, 0}, mv = {m, m, m, m};
    for (; i + 4 <= n; i += 4) {
        dt_v4f zv, dv, ov;
        memcpy(&zv, z + i, 16);
        memcpy(&dv, dy + i, 16);
        dt_v4i keep = (zv > zero) & (zv < mv); /* the gradient passes strictly inside (0, m) */
        dt_v4f g = (dt_v4f)((dt_v4i)dv & keep);
        if (acc) {
            memcpy(&ov, dz + i, 16);
            g += ov;
        }
        memcpy(dz + i, &g, 16);
    }
    for (; i < n; i++) {
        float g = z[i] > 0 && z[i] < m ? dy[i] : 0.0f;
        dz[i] = acc ? dz[i] + g : g;
    }
}

static void cpu_act_fwd(const dt_nn_act_p *a, const float *z, float *y, size_t rows, int cols)
{
    size_t n = rows * (size_t)cols;
    switch (a->kind) {
    case DT_NN_ACT_LINEAR:
        if (y != z)
            memcpy(y, z, n * sizeof(float));
        break;
    case DT_NN_ACT_RELU:
        relu_fwd(z, y, n);
        break;
    case DT_NN_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            y[i] = sigmoidf(z[i]);
        break;
    case DT_NN_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(z[i]);
        break;
    case DT_NN_ACT_SOFTMAX:
        softmax_rows(z, y, rows, cols);
        break;
    case DT_NN_ACT_ELU:
        for (size_t i = 0; i < n; i++)
            y[i] = z[i] > 0 ? z[i] : expm1f(z[i]);
        break;
    case DT_NN_ACT_SELU:
        for (size_t i = 0; i < n; i++)
            y[i] = (float)(SELU_SCALE * (z[i] > 0 ? z[i] : SELU_ALPHA * expm1(z[i])));
        break;
    case DT_NN_ACT_GELU:
        for (size_t i = 0; i < n; i++)
            y[i] = (float)(0.5 * z[i] * (1.0 + erf(z[i] * M_SQRT1_2)));
        break;
    case DT_NN_ACT_SWISH:
        for (size_t i = 0; i < n; i++)
            y[i] = z[i] * sigmoidf(z[i]);
        break;
    case DT_NN_ACT_LEAKY_RELU:
        for (size_t i = 0; i < n; i++)
            y[i] = z[i] >= 0 ? z[i] : a->alpha * z[i];
        break;
    case DT_NN_ACT_RELU_CAPPED:
        if (relu_clip_only(a)) {
            relu_clip_fwd(z, y, n, a->max_value);
            break;
        }
        for (size_t i = 0; i < n; i++)
            y[i] = relu_layer(a, z[i]);
        break;
    }
}

static void cpu_act_bwd(const dt_nn_act_p *a, const float *z, const float *y, const float *dy,
                        float *dz, size_t rows, int cols, bool acc)
{
    size_t n = rows * (size_t)cols;
    /* Write or add; never `0 * dz[i]`, which would keep a NaN of stale memory. */
#define PUT(i, v)                                                                                  \
    do {                                                                                           \
        float v_ = (v);                                                                            \
        dz[i] = acc ? dz[i] + v_ : v_;                                                             \
    } while (0)
    switch (a->kind) {
    case DT_NN_ACT_LINEAR:
        for (size_t i = 0; i < n; i++)
            PUT(i, dy[i]);
        break;
    case DT_NN_ACT_RELU:
        relu_bwd(y, dy, dz, n, acc);
        break;
    case DT_NN_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            PUT(i, dy[i] * y[i] * (1.0f - y[i]));
        break;
    case DT_NN_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            PUT(i, dy[i] * (1.0f - y[i] * y[i]));
        break;
    case DT_NN_ACT_SOFTMAX:
        for (size_t r = 0; r < rows; r++) {
            const float *yr = y + r * (size_t)cols, *dr = dy + r * (size_t)cols;
            double s = 0;
            for (int j = 0; j < cols; j++)
                s += (double)dr[j] * yr[j];
            for (int j = 0; j < cols; j++)
                PUT(r * (size_t)cols + j, yr[j] * (dr[j] - (float)s));
        }
        break;
    case DT_NN_ACT_ELU:
        for (size_t i = 0; i < n; i++)
            PUT(i, y[i] > 0 ? dy[i] : dy[i] * (y[i] + 1.0f));
        break;
    case DT_NN_ACT_SELU:
        for (size_t i = 0; i < n; i++)
            PUT(i, dy[i] * (float)(z[i] > 0 ? SELU_SCALE : SELU_SCALE * SELU_ALPHA * exp(z[i])));
        break;
    case DT_NN_ACT_GELU:
        for (size_t i = 0; i < n; i++) {
            double x = z[i];
            double g =
                0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
            PUT(i, dy[i] * (float)g);
        }
        break;
    case DT_NN_ACT_SWISH:
        for (size_t i = 0; i < n; i++) {
            float s = sigmoidf(z[i]);
            PUT(i, dy[i] * (s + z[i] * s * (1.0f - s)));
        }
        break;
    case DT_NN_ACT_LEAKY_RELU:
        for (size_t i = 0; i < n; i++)
            PUT(i, z[i] >= 0 ? dy[i] : a->alpha * dy[i]);
        break;
    case DT_NN_ACT_RELU_CAPPED:
        if (relu_clip_only(a)) {
            relu_clip_bwd(z, dy, dz, n, a->max_value, acc);
            break;
        }
        for (size_t i = 0; i < n; i++)
            PUT(i, dy[i] * relu_layer_grad(a, z[i]));
        break;
    }
#undef PUT
}

/* The batch norm passes are compiled twice, for AVX2 and the SSE2 baseline, picked at load time
 * (no FMA: the same bits on every machine). */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DT_CLONES
#endif

/* Per-channel sums over rows of a (rows, cols) matrix, in double, row by row (a fixed order):
 * s[j] += x[r, j] and t[j] += x[r, j] y[r, j]. Four rows (ld floats apart) at a time: each
 * channel's sums stay in registers over them (still added in row order, so the same bits as row
 * by row) instead of being loaded and stored once per row. The loops over j vectorize. */
static inline void sums4(const float *restrict x, const float *restrict y, size_t ld, int cols,
                         double *restrict s, double *restrict t)
{
    const float *x1 = x + ld, *x2 = x + 2 * ld, *x3 = x + 3 * ld;
    const float *y1 = y + ld, *y2 = y + 2 * ld, *y3 = y + 3 * ld;
    for (int j = 0; j < cols; j++) {
        double sj = s[j], tj = t[j];
        sj += x[j];
        tj += (double)x[j] * y[j];
        sj += x1[j];
        tj += (double)x1[j] * y1[j];
        sj += x2[j];
        tj += (double)x2[j] * y2[j];
        sj += x3[j];
        tj += (double)x3[j] * y3[j];
        s[j] = sj;
        t[j] = tj;
    }
}

static inline void sums1(const float *restrict x, const float *restrict y, int cols,
                         double *restrict s, double *restrict t)
{
    for (int j = 0; j < cols; j++) {
        s[j] += x[j];
        t[j] += (double)x[j] * y[j];
    }
}

DT_CLONES static void col_sums(const float *restrict x, const float *restrict y, size_t rows,
                               int cols, double *restrict s, double *restrict t)
{
    size_t r = 0, C = (size_t)cols;
    for (; r + 4 <= rows; r += 4)
        sums4(x + r * C, y + r * C, C, cols, s, t);
    for (; r < rows; r++)
        sums1(x + r * C, y + r * C, cols, s, t);
}

/* y[r, j] = a[j] ((x[r, j] - m[j]) k[j]) + b[j], clipped to [0, relu] when relu >= 0 */
DT_CLONES static void col_affine(const float *restrict x, float *restrict y, size_t rows, int cols,
                                 const float *restrict m, const float *restrict k,
                                 const float *restrict a, const float *restrict b, float relu)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * (size_t)cols;
        float *yr = y + r * (size_t)cols;
        for (int j = 0; j < cols; j++)
            yr[j] = a[j] * ((xr[j] - m[j]) * k[j]) + b[j];
        if (relu >= 0) /* the fused ReLU, as relu_clip_fwd (NaN: 0) */
            for (int j = 0; j < cols; j++) {
                float v = yr[j] > 0 ? yr[j] : 0.0f;
                yr[j] = v > relu ? relu : v;
            }
    }
}

/* The rest of a training forward once acc holds col_sums(x, x) over all rows: the batch
 * statistics, y, and the moving statistics. */
static void bn_fwd_from_sums(const double *acc, const float *x, float *y, size_t rows, int cols,
                             const float *gamma, const float *beta, float *mmean, float *mvar,
                             float momentum, float eps, float *smean, float *svar, float relu)
{
    float *f = calloc(3 * (size_t)cols, sizeof(float)); /* inverse deviation, scale, shift */
    if (!f) /* a few KiB; treat as the broken invariant it is */
        abort();
    float *k = f, *ga = f + cols, *be = f + 2 * (size_t)cols;
    for (int j = 0; j < cols; j++) {
        double m = acc[j] / (double)rows, v = acc[cols + j] / (double)rows - m * m;
        smean[j] = (float)m;
        svar[j] = (float)(v > 0 ? v : 0);
        k[j] = 1.0f / sqrtf(svar[j] + eps);
        ga[j] = gamma ? gamma[j] : 1.0f;
        be[j] = beta ? beta[j] : 0.0f;
    }
    col_affine(x, y, rows, cols, smean, k, ga, be, relu);
    free(f);
    for (int j = 0; j < cols; j++) {
        mmean[j] = mmean[j] * momentum + smean[j] * (1.0f - momentum);
        mvar[j] = mvar[j] * momentum + svar[j] * (1.0f - momentum);
    }
}

static void cpu_bn_fwd(bool training, const float *x, float *y, size_t rows, int cols,
                       const float *gamma, const float *beta, float *mmean, float *mvar,
                       float momentum, float eps, float *smean, float *svar, float relu)
{
    if (!training) {
        float *f = calloc(3 * (size_t)cols, sizeof(float)); /* inverse deviation, scale, shift */
        if (!f)
            abort();
        float *k = f, *ga = f + cols, *be = f + 2 * (size_t)cols;
        for (int j = 0; j < cols; j++) {
            k[j] = 1.0f / sqrtf(mvar[j] + eps);
            ga[j] = gamma ? gamma[j] : 1.0f;
            be[j] = beta ? beta[j] : 0.0f;
        }
        col_affine(x, y, rows, cols, mmean, k, ga, be, relu);
        free(f);
        return;
    }
    /* One pass for both moments, in double: E[x^2] - E[x]^2 loses about log10(mean^2 / var)
     * of double's 16 digits, far below float's 7 for any activation batch norm sees, and the
     * tensor (often the step's largest) is read once instead of twice. */
    double *acc = calloc(2 * (size_t)cols, sizeof(double));
    if (!acc)
        abort();
    col_sums(x, x, rows, cols, acc, acc + cols);
    bn_fwd_from_sums(acc, x, y, rows, cols, gamma, beta, mmean, mvar, momentum, eps, smean, svar,
                     relu);
    free(acc);
}

/* Rows of z in one GEMM block of the fused 1x1 conv + batch norm: about 128 KiB (32-512 KiB
 * time the same on MobileNetV2), so col_sums reads the block from L2 right after the GEMM
 * wrote it, and a multiple of 96 rows: OpenBLAS's Haswell kernels tile a call's rows by 24,
 * so a block starting on a tile boundary gives every row the bits one call over all rows
 * gives it. */
#define BN_GEMM_BLOCK_BYTES (128u << 10)

static void cpu_gemm_bn_fwd(const dt_nn_ops *o, int rows, int n, int k, const float *x,
                            const float *w, float *z, float *y, const float *gamma,
                            const float *beta, float *mmean, float *mvar, float momentum, float eps,
                            float *smean, float *svar, float relu)
{
    double *acc = calloc(2 * (size_t)n, sizeof(double));
    if (!acc)
        abort();
    int blk = (int)(BN_GEMM_BLOCK_BYTES / ((size_t)n * sizeof(float))) / 96 * 96;
    if (blk < 96)
        blk = 96;
    /* The kernel packed once for rnn_gemm's register-blocked kernels, as the unfused 1x1 conv
     * does (layers_conv.c's gemm_1x1): the same bits, whatever the block (each element is one
     * fmaf chain over k). */
    float *p = o->rnn_gemm ? malloc((size_t)k * n * sizeof(float)) : NULL;
    if (p)
        o->rnn_pack(false, k, n, w, n, p);
    /* col_sums adds row after row, so summing block by block gives bn_fwd's sums */
    for (int r = 0; r < rows; r += blk) {
        int m = rows - r < blk ? rows - r : blk;
        float *zr = z + (size_t)r * n;
        if (p)
            o->rnn_gemm(false, m, n, k, x + (size_t)r * k, k, p, 0, 0.0f, zr, n);
        else
            o->gemm(false, false, m, n, k, 1.0f, x + (size_t)r * k, k, w, n, 0.0f, zr, n);
        col_sums(zr, zr, (size_t)m, n, acc, acc + n);
    }
    free(p);
    bn_fwd_from_sums(acc, z, y, (size_t)rows, n, gamma, beta, mmean, mvar, momentum, eps, smean,
                     svar, relu);
    free(acc);
}

/* The backward pass does not read a stored xhat: it recomputes xhat[r, j] = (x[r, j] - mu[j])
 * ik[j] from the batch norm's input (kept by its producer anyway) with the forward's mean and
 * inverse deviation, the same float operations as col_affine, so the same bits. That saves the
 * forward a write of a tensor the size of x (and its memory). */

/* s[j] += dy[r, j], t[j] += dy[r, j] xhat[r, j] over rows, in double, in row order */
DT_CLONES static void xhat_sums(const float *restrict dy, const float *restrict x, size_t rows,
                                int cols, const float *restrict mu, const float *restrict ik,
                                double *restrict s, double *restrict t)
{
    for (size_t r = 0; r < rows; r++) {
        const float *dr = dy + r * (size_t)cols, *xr = x + r * (size_t)cols;
        for (int j = 0; j < cols; j++) {
            float h = (xr[j] - mu[j]) * ik[j];
            s[j] += dr[j];
            t[j] += (double)dr[j] * h;
        }
    }
}

/* dx[r, j] (=/+=) k[j] (dy[r, j] - m1[j] - xhat[r, j] m2[j]) */
DT_CLONES static void bn_dx(const float *restrict dy, const float *restrict x, float *restrict dx,
                            size_t rows, int cols, const float *restrict mu,
                            const float *restrict ik, const float *restrict k,
                            const float *restrict m1, const float *restrict m2, bool acc)
{
    for (size_t r = 0; r < rows; r++) {
        size_t o = r * (size_t)cols;
        if (acc)
            for (int j = 0; j < cols; j++)
                dx[o + j] += k[j] * (dy[o + j] - m1[j] - ((x[o + j] - mu[j]) * ik[j]) * m2[j]);
        else
            for (int j = 0; j < cols; j++)
                dx[o + j] = k[j] * (dy[o + j] - m1[j] - ((x[o + j] - mu[j]) * ik[j]) * m2[j]);
    }
}

/* The fused ReLU's gradient: dy where 0 < a xhat + b < relu (the batch norm's output,
 * recomputed bit for bit), else 0 - what the ReLU layer's backward would have written. */
static inline float relu_mask(float dy, float v, float a, float b, float relu)
{
    float p = a * v + b;
    return p > 0 && p < relu ? dy : 0.0f;
}

/* xhat_sums of the masked gradient. Row by row, xhat and the masked gradient go to rows of
 * scratch (h, g) first: GCC vectorizes neither loop when the float mask and the double sums
 * share one. */
DT_CLONES static void masked_sums(const float *restrict dy, const float *restrict x, size_t rows,
                                  int cols, const float *restrict mu, const float *restrict ik,
                                  const float *restrict a, const float *restrict b, float relu,
                                  float *restrict h, float *restrict g, double *restrict s,
                                  double *restrict t)
{
    size_t C = (size_t)cols;
    for (size_t r0 = 0; r0 < rows; r0 += 4) {
        size_t nr = rows - r0 < 4 ? rows - r0 : 4;
        for (size_t q = 0; q < nr; q++) {
            const float *d = dy + (r0 + q) * C, *xr = x + (r0 + q) * C;
            float *hq = h + q * C, *gq = g + q * C;
            for (int j = 0; j < cols; j++) {
                hq[j] = (xr[j] - mu[j]) * ik[j];
                gq[j] = relu_mask(d[j], hq[j], a[j], b[j], relu);
            }
        }
        if (nr == 4)
            sums4(g, h, C, cols, s, t);
        else
            for (size_t q = 0; q < nr; q++)
                sums1(g + q * C, h + q * C, cols, s, t);
    }
}

/* dx (=/+=) k (g - m1 - xhat m2) with g the masked gradient, everything recomputed in place */
DT_CLONES static void masked_dx(const float *restrict dy, const float *restrict x,
                                float *restrict dx, size_t rows, int cols, const float *restrict mu,
                                const float *restrict ik, const float *restrict k,
                                const float *restrict m1, const float *restrict m2,
                                const float *restrict a, const float *restrict b, float relu,
                                bool acc)
{
    for (size_t r = 0; r < rows; r++) {
        size_t o = r * (size_t)cols;
        const float *d = dy + o, *xr = x + o;
        float *dr = dx + o;
        if (acc)
            for (int j = 0; j < cols; j++) {
                float v = (xr[j] - mu[j]) * ik[j];
                dr[j] += k[j] * (relu_mask(d[j], v, a[j], b[j], relu) - m1[j] - v * m2[j]);
            }
        else
            for (int j = 0; j < cols; j++) {
                float v = (xr[j] - mu[j]) * ik[j];
                dr[j] = k[j] * (relu_mask(d[j], v, a[j], b[j], relu) - m1[j] - v * m2[j]);
            }
    }
}

static void cpu_bn_bwd(const float *dy, const float *x, size_t rows, int cols, const float *gamma,
                       const float *beta, const float *smean, const float *svar, float eps,
                       float *dx, bool acc, float *dgamma, float *dbeta, float relu)
{
    double *s = calloc(2 * (size_t)cols, sizeof(double)); /* sum dy, sum dy*xhat */
    float *f = malloc(14 * (size_t)cols * sizeof(float));
    if (!s || !f)
        abort();
    float *k = f, *m1 = f + cols, *m2 = f + 2 * (size_t)cols, *ga = f + 3 * (size_t)cols;
    float *be = f + 4 * (size_t)cols, *ik = f + 5 * (size_t)cols;
    float *h = f + 6 * (size_t)cols, *g = f + 10 * (size_t)cols; /* 4 scratch rows each */
    for (int j = 0; j < cols; j++) {
        ga[j] = gamma ? gamma[j] : 1.0f;
        be[j] = beta ? beta[j] : 0.0f;
        ik[j] = 1.0f / sqrtf(svar[j] + eps); /* as cpu_bn_fwd computed it */
    }
    if (relu >= 0)
        masked_sums(dy, x, rows, cols, smean, ik, ga, be, relu, h, g, s, s + cols);
    else
        xhat_sums(dy, x, rows, cols, smean, ik, s, s + cols);
    if (dgamma)
        for (int j = 0; j < cols; j++)
            dgamma[j] += (float)s[cols + j];
    if (dbeta)
        for (int j = 0; j < cols; j++)
            dbeta[j] += (float)s[j];
    if (dx) {
        for (int j = 0; j < cols; j++) {
            k[j] = ga[j] / sqrtf(svar[j] + eps);
            m1[j] = (float)(s[j] / (double)rows);
            m2[j] = (float)(s[cols + j] / (double)rows);
        }
        if (relu >= 0)
            masked_dx(dy, x, dx, rows, cols, smean, ik, k, m1, m2, ga, be, relu, acc);
        else
            bn_dx(dy, x, dx, rows, cols, smean, ik, k, m1, m2, acc);
    }
    free(s);
    free(f);
}

/* One key from the rng per call; element i keeps iff its counter-based draw u_i >= rate (see
 * dropout_hash.h), so the CUDA backend draws the same mask in parallel. */
static void cpu_dropout_fwd(const float *x, float *y, float *mask, size_t n, float rate,
                            dt_rng *rng)
{
    float keep = 1.0f / (1.0f - rate);
    uint64_t key = dt_rng_u64(rng);
    for (size_t i = 0; i < n; i++) {
        mask[i] = dt__nn_dropout_u(key, i) >= rate ? keep : 0.0f;
        y[i] = x[i] * mask[i];
    }
}

static void cpu_dropout_fwd_key(const float *x, float *y, float *mask, size_t n, float rate,
                                const uint64_t *key)
{
    float keep = 1.0f / (1.0f - rate);
    uint64_t k = *key;
    for (size_t i = 0; i < n; i++) {
        mask[i] = dt__nn_dropout_u(k, i) >= rate ? keep : 0.0f;
        y[i] = x[i] * mask[i];
    }
}

static void cpu_axpby(size_t n, float a, const float *x, float b, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = a * x[i] + b * y[i];
}

static void cpu_mul(size_t n, const float *x, const float *m, float *y, bool acc)
{
    if (acc)
        for (size_t i = 0; i < n; i++)
            y[i] += x[i] * m[i];
    else
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] * m[i];
}

static void cpu_copy(size_t n, const float *x, float *y, bool acc)
{
    if (acc)
        for (size_t i = 0; i < n; i++)
            y[i] += x[i];
    else if (x != y)
        memcpy(y, x, n * sizeof(float));
}

static void cpu_copy2d(size_t rows, int cols, const float *x, int ldx, float *y, int ldy, bool acc)
{
    for (size_t r = 0; r < rows; r++)
        cpu_copy((size_t)cols, x + r * (size_t)ldx, y + r * (size_t)ldy, acc);
}

static void cpu_fill(size_t n, float v, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = v;
}

static void cpu_gather(const float *x, const int32_t *rows, int n, size_t cols, float *y)
{
    /* memcpy moves the words: int32 labels pass bit for bit */
    for (int i = 0; i < n; i++)
        memcpy(y + (size_t)i * cols, x + (size_t)rows[i] * cols, cols * sizeof(float));
}

static const dt_nn_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .gemm = cpu_gemm,
    .im2col = dt__nn_cpu_im2col,
    .col2im = dt__nn_cpu_col2im,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .pool_fwd = dt__nn_cpu_pool_fwd,
    .pool_bwd = dt__nn_cpu_pool_bwd,
    .bn_fwd = cpu_bn_fwd,
    .bn_bwd = cpu_bn_bwd,
    .gemm_bn_fwd = cpu_gemm_bn_fwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_fwd_key = cpu_dropout_fwd_key,
    .axpby = cpu_axpby,
    .mul = cpu_mul,
    .copy = cpu_copy,
    .gather = cpu_gather,
    .copy2d = cpu_copy2d,
    .fill = cpu_fill,
    .update = dt__nn_cpu_update,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .download_async = cpu_memcpy,
    .loss_dev = dt__nn_cpu_loss,
    .regularize_dev = dt__nn_cpu_regularize_dev,
    .hits = dt__nn_cpu_hits,
    .clip_norm = dt__nn_cpu_clip_norm,
    .img_flip = dt__nn_cpu_img_flip,
    .img_adjust = dt__nn_cpu_img_adjust,
    .img_adjust_bwd = dt__nn_cpu_img_adjust_bwd,
    .img_resize = dt__nn_cpu_img_resize,
    .img_resize_bwd = dt__nn_cpu_img_resize_bwd,
    .img_transform = dt__nn_cpu_img_transform,
    .img_transform_bwd = dt__nn_cpu_img_transform_bwd,
    .dw_fwd = dt__nn_cpu_dw_fwd,
    .dw_bwd = dt__nn_cpu_dw_bwd,
    .max_fwd = dt__nn_cpu_max_fwd,
    .max_bwd = dt__nn_cpu_max_bwd,
    .embed_fwd = dt__nn_cpu_embed_fwd,
    .embed_bwd = dt__nn_cpu_embed_bwd,
    .seq_mean = dt__nn_cpu_seq_mean,
    .seq_mean_bwd = dt__nn_cpu_seq_mean_bwd,
    .ln_fwd = dt__nn_cpu_ln_fwd,
    .ln_bwd = dt__nn_cpu_ln_bwd,
    .attn_mask = dt__nn_cpu_attn_mask,
    .norm_fwd = dt__nn_cpu_norm_fwd,
    .norm_bwd = dt__nn_cpu_norm_bwd,
    .cat_encode = dt__nn_cpu_cat_encode,
    .rnn_fwd = dt__nn_cpu_rnn_fwd,
    .rnn_bwd = dt__nn_cpu_rnn_bwd,
    .rnn_pack = dt__nn_cpu_rnn_pack,
    .rnn_gemm = dt__nn_cpu_rnn_gemm,
};

const dt_nn_ops *dt_nn_ops_cpu(void)
{
    return &cpu_ops;
}

const char *dt_nn_blas_info(char *buf, size_t n)
{
    snprintf(buf, n, "OpenBLAS %s, core %s, %d thread%s", openblas_get_config(),
             openblas_get_corename(), openblas_get_num_threads(),
             openblas_get_num_threads() == 1 ? "" : "s");
    return buf;
}

void dt_nn_blas_threads(int n)
{
    if (n > 0)
        openblas_set_num_threads(n);
}
