/*
 * conv.cu - convolution lowering (im2col, col2im), pooling with argmax, the depthwise
 * convolution and the Maximum merge over (N, H, W, C) tensors. Contracts in nn/ops.h; the CPU
 * kernels of ops_cpu_conv.c and ops_cpu_vision.c are the reference.
 *
 * No kernel scatters: every adjoint (col2im, pool_bwd, dw_bwd's dx) gathers, one thread per
 * input element, its contributions in the order the CPU adds them (outputs ascending), with
 * explicit __fmul_rn / __fadd_rn so nvcc does not contract them into FMAs. So they need no
 * atomics and give the CPU's bits. The depthwise kernel's gradient is a reduction over every
 * output pixel: per chunk of pixels in double, then the chunks in order (two stages, fixed).
 */
#include "nn/cuda/internal.cuh"

#include <string.h>

static __host__ __device__ inline int dil(int d)
{
    return d > 1 ? d : 1;
}

/* Element i of an (n, a, b, c) tensor as its four coordinates. */
struct nhwc {
    size_t n;
    int y, x, c;
};
static __device__ inline nhwc split(size_t i, int a, int b, int c)
{
    nhwc p;
    p.c = (int)(i % (size_t)c);
    size_t t = i / (size_t)c;
    p.x = (int)(t % (size_t)b);
    t /= (size_t)b;
    p.y = (int)(t % (size_t)a);
    p.n = t / (size_t)a;
    return p;
}

/* --- im2col / col2im -------------------------------------------------------------------------- */

/* One thread per col cell: row r = (n, oy, ox), column q = (ky, kx, ch), or the trailing 1. */
static __global__ void im2col_k(dt_nn_win g, const float *x, float *col, size_t total,
                                size_t rowlen, size_t k)
{
    int dh = dil(g.dil_h), dw = dil(g.dil_w);
    size_t run = (size_t)g.kw * g.c;
    DT_CU_FOR(i, total)
    {
        size_t r = i / rowlen, q = i % rowlen;
        float v = 1.0f; /* q == k: the bias column of g.ones */
        if (q < k) {
            int ky = (int)(q / run), kx = (int)(q % run / (size_t)g.c), ch = (int)(q % (size_t)g.c);
            int ox = (int)(r % (size_t)g.ow);
            size_t t = r / (size_t)g.ow;
            int oy = (int)(t % (size_t)g.oh);
            size_t n = t / (size_t)g.oh;
            int iy = oy * g.sh - g.pt + ky * dh, ix = ox * g.sw - g.pl + kx * dw;
            v = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                    ? x[((n * g.h + iy) * g.w + ix) * g.c + ch]
                    : 0.0f;
        }
        col[i] = v;
    }
}

static void cu_im2col(const dt_nn_win *g, const float *x, float *col)
{
    size_t k = (size_t)g->kh * g->kw * g->c, rowlen = k + (g->ones ? 1 : 0);
    size_t total = (size_t)g->n * g->oh * g->ow * rowlen;
    if (total == 0)
        return;
    im2col_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(*g, x, col, total, rowlen,
                                                                        k);
    DT_CU_LAUNCH(im2col_k);
}

/* The windows that read input row (or column) i: output o = (i + p - kk d) / s for the kernel
 * positions kk whose numerator is a non-negative multiple of s below s * n_out. Walking kk
 * down walks o up: the CPU's order. Returns o, or -1 when kk reaches no window. */
static __device__ inline int reach(int i, int p, int kk, int d, int s, int n_out)
{
    int t = i + p - kk * d;
    if (t < 0 || t % s)
        return -1;
    t /= s;
    return t < n_out ? t : -1;
}

/* dx cell (n, iy, ix, ch) = (dx or 0) + its col cells, windows ascending (the CPU adds them row
 * by row of col, so in that order). col's rows are kh*kw*c (no ones column). */
static __global__ void col2im_k(dt_nn_win g, const float *col, float *dx, size_t total, bool acc)
{
    int dh = dil(g.dil_h), dw = dil(g.dil_w);
    size_t rowlen = (size_t)g.kh * g.kw * g.c;
    DT_CU_FOR(i, total)
    {
        nhwc p = split(i, g.h, g.w, g.c);
        float a = acc ? dx[i] : 0.0f;
        for (int ky = g.kh - 1; ky >= 0; ky--) {
            int oy = reach(p.y, g.pt, ky, dh, g.sh, g.oh);
            if (oy < 0)
                continue;
            for (int kx = g.kw - 1; kx >= 0; kx--) {
                int ox = reach(p.x, g.pl, kx, dw, g.sw, g.ow);
                if (ox < 0)
                    continue;
                size_t row = (p.n * g.oh + oy) * g.ow + ox;
                a = __fadd_rn(a, col[row * rowlen + ((size_t)ky * g.kw + kx) * g.c + p.c]);
            }
        }
        dx[i] = a;
    }
}

static void cu_col2im(const dt_nn_win *g, const float *col, float *dx, bool acc)
{
    size_t total = (size_t)g->n * g->h * g->w * g->c;
    if (total == 0)
        return;
    col2im_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(*g, col, dx, total, acc);
    DT_CU_LAUNCH(col2im_k);
}

/* --- pooling ---------------------------------------------------------------------------------- */

/* Window cells inside the input: average pooling's divisor (Keras's "same"). Pooling windows
 * are not dilated (the CPU's are not either). */
static __device__ inline int window_count(const dt_nn_win &g, int oy, int ox)
{
    int y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    int y1 = y0 + g.kh, x1 = x0 + g.kw;
    y0 = y0 < 0 ? 0 : y0;
    x0 = x0 < 0 ? 0 : x0;
    y1 = y1 > g.h ? g.h : y1;
    x1 = x1 > g.w ? g.w : x1;
    return (y1 - y0) * (x1 - x0);
}

/* One thread per output: the window's cells in row-major order; the max keeps the first of
 * equal cells (strictly greater wins), as the CPU's; arg is the flat input index. */
static __global__ void pool_fwd_k(dt_nn_pool kind, dt_nn_win g, const float *x, float *y,
                                  int32_t *arg, size_t total)
{
    DT_CU_FOR(i, total)
    {
        nhwc p = split(i, g.oh, g.ow, g.c);
        int y0 = p.y * g.sh - g.pt, x0 = p.x * g.sw - g.pl;
        float m = 0.0f;
        int32_t am = -1;
        bool first = true;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = y0 + ky;
            if (iy < 0 || iy >= g.h)
                continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = x0 + kx;
                if (ix < 0 || ix >= g.w)
                    continue;
                size_t at = ((p.n * g.h + iy) * g.w + ix) * g.c + p.c;
                float v = x[at];
                if (kind == DT_NN_POOL_AVG) {
                    m = __fadd_rn(m, v);
                } else if (first || v > m) {
                    m = v;
                    am = (int32_t)at;
                }
                first = false;
            }
        }
        if (kind == DT_NN_POOL_AVG) {
            y[i] = __fmul_rn(m, 1.0f / (float)window_count(g, p.y, p.x));
            continue;
        }
        if (kind == DT_NN_POOL_MAX_RELU && !(m > 0)) { /* nothing passed the relu */
            m = 0.0f;
            am = -1;
        }
        y[i] = m;
        arg[i] = am;
    }
}

static void cu_pool_fwd(dt_nn_pool kind, const dt_nn_win *g, const float *x, float *y, int32_t *arg)
{
    size_t total = (size_t)g->n * g->oh * g->ow * g->c;
    if (total == 0)
        return;
    pool_fwd_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(kind, *g, x, y, arg,
                                                                          total);
    DT_CU_LAUNCH(pool_fwd_k);
}

/* The outputs whose windows hold input coordinate i: [*lo, *hi] (empty when *lo > *hi). */
static __device__ inline void covering(int i, int p, int k, int s, int n_out, int *lo, int *hi)
{
    int t = i + p; /* window o starts at o s - p: it holds i when o s <= t <= o s + k - 1 */
    if (t < 0) {
        *lo = 0;
        *hi = -1;
        return;
    }
    int first = t - k + 1;
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = t / s < n_out - 1 ? t / s : n_out - 1;
}

/* dx cell = (dx or 0) + what every window holding it hands it, windows ascending (the CPU's
 * scatter order): max pooling the window's gradient where the cell won, average pooling the
 * gradient over the window's count. */
static __global__ void pool_bwd_k(dt_nn_pool kind, dt_nn_win g, const float *dy, const int32_t *arg,
                                  float *dx, size_t total, bool acc)
{
    DT_CU_FOR(i, total)
    {
        nhwc p = split(i, g.h, g.w, g.c);
        int oy0, oy1, ox0, ox1;
        covering(p.y, g.pt, g.kh, g.sh, g.oh, &oy0, &oy1);
        covering(p.x, g.pl, g.kw, g.sw, g.ow, &ox0, &ox1);
        float a = acc ? dx[i] : 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                size_t o = ((p.n * g.oh + oy) * g.ow + ox) * g.c + p.c;
                if (kind != DT_NN_POOL_AVG) {
                    if (arg[o] == (int32_t)i)
                        a = __fadd_rn(a, dy[o]);
                } else {
                    float inv = 1.0f / (float)window_count(g, oy, ox);
                    a = __fadd_rn(a, __fmul_rn(dy[o], inv));
                }
            }
        dx[i] = a;
    }
}

static void cu_pool_bwd(dt_nn_pool kind, const dt_nn_win *g, const float *dy, const int32_t *arg,
                        float *dx, bool acc)
{
    size_t total = (size_t)g->n * g->h * g->w * g->c;
    if (total == 0)
        return;
    pool_bwd_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(kind, *g, dy, arg, dx,
                                                                          total, acc);
    DT_CU_LAUNCH(pool_bwd_k);
}

/* --- depthwise convolution -------------------------------------------------------------------- */

/* y (n, oh, ow, c*mult), one thread per output: 0 + tap 0 + tap 1 + ... in window order, a
 * multiply and an add each, as the CPU. */
static __global__ void dw_fwd_k(dt_nn_win g, int mult, const float *x, const float *k, float *y,
                                size_t total)
{
    int dh = dil(g.dil_h), dw = dil(g.dil_w), cm = g.c * mult;
    DT_CU_FOR(i, total)
    {
        nhwc p = split(i, g.oh, g.ow, cm);
        int ci = p.c / mult;
        float a = 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            int iy = p.y * g.sh - g.pt + ky * dh;
            if (iy < 0 || iy >= g.h)
                continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ix = p.x * g.sw - g.pl + kx * dw;
                if (ix < 0 || ix >= g.w)
                    continue;
                float xv = x[((p.n * g.h + iy) * g.w + ix) * g.c + ci];
                float kv = k[((size_t)ky * g.kw + kx) * cm + p.c];
                a = __fadd_rn(a, __fmul_rn(xv, kv));
            }
        }
        y[i] = a;
    }
}

static void cu_dw_fwd(const dt_nn_win *g, int mult, const float *x, const float *k, float *y)
{
    size_t total = (size_t)g->n * g->oh * g->ow * g->c * mult;
    if (total == 0)
        return;
    dw_fwd_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(*g, mult, x, k, y, total);
    DT_CU_LAUNCH(dw_fwd_k);
}

/* dk, stage 1: thread e of the kernel (ky, kx, co) sums x * dy over the output pixels
 * [ch * per, (ch + 1) * per) in double, into part (nchunks, K). Consecutive threads take
 * consecutive channels, so the reads of x and dy are coalesced. */
static __global__ void dw_dk_partial_k(dt_nn_win g, int mult, const float *x, const float *dy,
                                       size_t pixels, size_t per, size_t nchunks, double *part)
{
    int dh = dil(g.dil_h), dw = dil(g.dil_w), cm = g.c * mult;
    size_t K = (size_t)g.kh * g.kw * cm;
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= K)
        return; /* no barrier below */
    int co = (int)(e % (size_t)cm), tap = (int)(e / (size_t)cm);
    int ky = tap / g.kw, kx = tap % g.kw, ci = co / mult;
    for (size_t ch = blockIdx.y; ch < nchunks; ch += gridDim.y) {
        size_t p1 = (ch + 1) * per < pixels ? (ch + 1) * per : pixels;
        double s = 0;
        for (size_t q = ch * per; q < p1; q++) {
            int ox = (int)(q % (size_t)g.ow);
            size_t t = q / (size_t)g.ow;
            int oy = (int)(t % (size_t)g.oh);
            size_t n = t / (size_t)g.oh;
            int iy = oy * g.sh - g.pt + ky * dh, ix = ox * g.sw - g.pl + kx * dw;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                continue;
            s += (double)x[((n * g.h + iy) * g.w + ix) * g.c + ci] * (double)dy[q * cm + co];
        }
        part[ch * K + e] = s;
    }
}

/* dk, stage 2: the chunks of each kernel element in chunk order. */
static __global__ void dw_dk_final_k(const double *part, size_t nchunks, size_t K, float *dk)
{
    DT_CU_FOR(e, K)
    {
        double s = 0;
        for (size_t ch = 0; ch < nchunks; ch++)
            s += part[ch * K + e];
        dk[e] = (float)s;
    }
}

/* dx cell (n, iy, ix, ci) = (dx or 0) + sum over the windows reading it (outputs ascending, the
 * CPU's order) of sum_m dy k; mult 1 adds dy k directly (the CPU's fast path; 0 + v = v makes
 * its general path the same). */
static __global__ void dw_dx_k(dt_nn_win g, int mult, const float *k, const float *dy, float *dx,
                               size_t total, bool acc)
{
    int dh = dil(g.dil_h), dw = dil(g.dil_w), cm = g.c * mult;
    DT_CU_FOR(i, total)
    {
        nhwc p = split(i, g.h, g.w, g.c);
        float a = acc ? dx[i] : 0.0f;
        for (int ky = g.kh - 1; ky >= 0; ky--) {
            int oy = reach(p.y, g.pt, ky, dh, g.sh, g.oh);
            if (oy < 0)
                continue;
            for (int kx = g.kw - 1; kx >= 0; kx--) {
                int ox = reach(p.x, g.pl, kx, dw, g.sw, g.ow);
                if (ox < 0)
                    continue;
                const float *d = dy + ((p.n * g.oh + oy) * g.ow + ox) * cm + (size_t)p.c * mult;
                const float *kk = k + ((size_t)ky * g.kw + kx) * cm + (size_t)p.c * mult;
                if (mult == 1) {
                    a = __fadd_rn(a, __fmul_rn(d[0], kk[0]));
                } else {
                    float s = 0.0f;
                    for (int m = 0; m < mult; m++)
                        s = __fadd_rn(s, __fmul_rn(d[m], kk[m]));
                    a = __fadd_rn(a, s);
                }
            }
        }
        dx[i] = a;
    }
}

/* Threads of dk's stage 1 (K * nchunks) to aim for: enough to fill a GPU, while the partials
 * (8 bytes each) stay a few MiB. A function of the geometry alone, so runs agree. */
#define DW_DK_THREADS ((size_t)1 << 20)

static void cu_dw_bwd(const dt_nn_win *g, int mult, const float *x, const float *k, const float *dy,
                      float *dk, float *dx, bool acc)
{
    if (dk) {
        size_t K = (size_t)g->kh * g->kw * g->c * mult;
        size_t pixels = (size_t)g->n * g->oh * g->ow;
        size_t nchunks = 0, per = 1;
        double *part = NULL;
        if (K && pixels) {
            size_t want = DW_DK_THREADS / K;
            want = want < 1 ? 1 : want;
            per = (pixels + want - 1) / want;
            per = per < 16 ? 16 : per;
            nchunks = (pixels + per - 1) / per;
            part = (double *)dt_cu_scratch(nchunks * K * sizeof(double));
            if (!part)
                return; /* the allocation failure is recorded */
            dim3 grid((unsigned)((K + DT_CU_THREADS - 1) / DT_CU_THREADS),
                      nchunks < 65535 ? (unsigned)nchunks : 65535u);
            dw_dk_partial_k<<<grid, DT_CU_THREADS, 0, dt_cu_stream()>>>(*g, mult, x, dy, pixels,
                                                                        per, nchunks, part);
            DT_CU_LAUNCH(dw_dk_partial_k);
        }
        if (K) { /* no pixels: dk is written zeros, as the CPU's memset */
            dw_dk_final_k<<<dt_cu_blocks(K), DT_CU_THREADS, 0, dt_cu_stream()>>>(part, nchunks, K,
                                                                                 dk);
            DT_CU_LAUNCH(dw_dk_final_k);
        }
    }
    if (dx) {
        size_t total = (size_t)g->n * g->h * g->w * g->c;
        if (total == 0)
            return;
        dw_dx_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(*g, mult, k, dy, dx,
                                                                           total, acc);
        DT_CU_LAUNCH(dw_dx_k);
    }
}

/* --- Maximum merge ---------------------------------------------------------------------------- */

/* The k input pointers travel in the kernel's arguments (xs is host memory); arg is a uint8_t,
 * so k <= 256, 2 KiB of pointers, within the 4 KiB a launch may carry. */
#define MAX_INPUTS 256
struct max_inputs {
    const float *p[MAX_INPUTS];
};

static __global__ void max_fwd_k(size_t n, int k, max_inputs xs, float *y, uint8_t *arg)
{
    DT_CU_FOR(j, n)
    {
        float m = xs.p[0][j];
        int a = 0;
        for (int i = 1; i < k; i++) {
            float v = xs.p[i][j];
            if (v > m) { /* strictly: ties stay with the earlier input */
                m = v;
                a = i;
            }
        }
        y[j] = m;
        arg[j] = (uint8_t)a;
    }
}

static void cu_max_fwd(size_t n, int k, const float *const *xs, float *y, uint8_t *arg)
{
    if (k < 1 || k > MAX_INPUTS) {
        dt_cu_fail("max_fwd", __FILE__, __LINE__, "the Maximum merge takes 1 to 256 inputs");
        return;
    }
    if (n == 0)
        return;
    max_inputs in;
    memset(&in, 0, sizeof in);
    for (int i = 0; i < k; i++)
        in.p[i] = xs[i];
    max_fwd_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, k, in, y, arg);
    DT_CU_LAUNCH(max_fwd_k);
}

static __global__ void max_bwd_k(size_t n, int i, const uint8_t *arg, const float *dy, float *dx,
                                 bool acc)
{
    DT_CU_FOR(j, n)
    {
        float v = arg[j] == i ? dy[j] : 0.0f;
        dx[j] = acc ? __fadd_rn(dx[j], v) : v;
    }
}

static void cu_max_bwd(size_t n, int i, const uint8_t *arg, const float *dy, float *dx, bool acc)
{
    if (n == 0)
        return;
    max_bwd_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, i, arg, dy, dx, acc);
    DT_CU_LAUNCH(max_bwd_k);
}

void dt_cu_fill_conv(dt_nn_ops *o)
{
    o->im2col = cu_im2col;
    o->col2im = cu_col2im;
    o->pool_fwd = cu_pool_fwd;
    o->pool_bwd = cu_pool_bwd;
    o->dw_fwd = cu_dw_fwd;
    o->dw_bwd = cu_dw_bwd;
    o->max_fwd = cu_max_fwd;
    o->max_bwd = cu_max_bwd;
}
