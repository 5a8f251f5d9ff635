/*
 * image.cu - the augmentation kernels (the img_* slots of nn/ops.h): flips, brightness and
 * contrast with their per-image channel means, tf.image.resize of a window (bilinear, nearest,
 * area, bicubic) and TF's projective transform, each with its transpose.
 *
 * The reference is lib/nn/ops_cpu_image.c, line for line. It is built without FMA contraction
 * (C11, no -mfma), and several results here end in a floor, a round or a comparison (resize taps,
 * reflect/wrap fill, nearest sampling, the clip's gradient mask), where one ulp moves a whole
 * pixel; so every product that feeds a sum is spelled mul() (__fmul_rn, which nvcc never fuses)
 * and the kernels compute the CPU's bits, not only values within tolerance.
 *
 * Backwards without float atomics, in the CPU's summation order (so the bits match too):
 * - resize: separable, and an axis's taps are few and monotone, so a prep kernel lists for each
 *   window row (column) the range of output rows (columns) that read it; each input cell then
 *   gathers over that rectangle, output order, tap order - the CPU's scatter order for that cell.
 * - transform: a projective map folded by reflect/wrap has no usable inverse, so each output
 *   pixel writes its (input cell, tap) pairs as sort keys, CUB's stable radix sort groups them by
 *   cell keeping (pixel, tap) order, and each input cell sums its segment in that order. Images
 *   are done in chunks of at most TF_CHUNK pairs so the scratch stays bounded.
 */
#include "nn/cuda/internal.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <float.h>
#include <math.h>
#include <stdint.h>

/* a * b rounded on its own (never fused into an add), as the CPU computes it. */
static __device__ __forceinline__ float mul(float a, float b)
{
    return __fmul_rn(a, b);
}

#define LAUNCH_1D(n) dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()

/* ---- flip --------------------------------------------------------------------------------- */

static __global__ void k_flip(int n, int h, int w, int c, const int32_t *flags, const float *x,
                              float *y, bool acc)
{
    size_t total = (size_t)n * h * w * c;
    DT_CU_FOR(e, total)
    {
        size_t q = e / (size_t)c, k = e % (size_t)c;
        int col = (int)(q % (size_t)w);
        q /= (size_t)w;
        int row = (int)(q % (size_t)h);
        size_t i = q / (size_t)h;
        int f = flags[i];
        int sr = (f & 2) ? h - 1 - row : row, sc = (f & 1) ? w - 1 - col : col;
        float v = x[((i * (size_t)h + (size_t)sr) * (size_t)w + (size_t)sc) * (size_t)c + k];
        y[e] = acc ? y[e] + v : v;
    }
}

static void cu_img_flip(int n, int h, int w, int c, const int32_t *flags, const float *x, float *y,
                        bool acc)
{
    size_t total = (size_t)n * h * w * c;
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0)
        return;
    k_flip<<<LAUNCH_1D(total)>>>(n, h, w, c, flags, x, y, acc);
    DT_CU_LAUNCH("img_flip");
}

/* ---- brightness and contrast -------------------------------------------------------------- */

/* The pre-clip value of img_adjust, as the CPU's expression: ((x - m) f + m) + d. */
static __device__ __forceinline__ float adjust_v(bool has_f, float x, float m, float f, float d)
{
    return has_f ? (mul(x - m, f) + m) + d : x + d;
}

/* One block per (image, channel) of the n * c: m = the channel's mean (the double sum over the
 * pixels in a fixed tree order, then float(sum / hw) as the CPU rounds it); with dy also
 * gm = float(sum of the clip-masked dy / hw) * (1 - f), the mean term of the backward. */
static __global__ void k_adjust_stats(int n, int hw, int c, const float *f, const float *d,
                                      float lo, float hi, const float *x, const float *dy, float *m,
                                      float *gm)
{
    __shared__ double sh[DT_CU_THREADS];
    __shared__ float mean;
    size_t img = (size_t)hw * (size_t)c;
    for (size_t bk = blockIdx.x; bk < (size_t)n * (size_t)c; bk += gridDim.x) {
        size_t i = bk / (size_t)c, k = bk % (size_t)c;
        const float *xi = x + i * img;
        double s = 0;
        for (size_t p = threadIdx.x; p < (size_t)hw; p += blockDim.x)
            s += xi[p * (size_t)c + k];
        s = dt_cu_block_sum(s, sh);
        if (threadIdx.x == 0) {
            mean = (float)(s / hw);
            m[bk] = mean;
        }
        __syncthreads();
        if (dy) {
            float mk = mean, fi = f[i], di = d ? d[i] : 0.0f;
            const float *gi = dy + i * img;
            double gs = 0;
            for (size_t p = threadIdx.x; p < (size_t)hw; p += blockDim.x) {
                size_t j = p * (size_t)c + k;
                float v = adjust_v(true, xi[j], mk, fi, di);
                gs += (v >= lo && v <= hi) ? gi[j] : 0.0f;
            }
            gs = dt_cu_block_sum(gs, sh);
            if (threadIdx.x == 0)
                gm[bk] = (float)(gs / hw) * (1.0f - fi);
        }
        __syncthreads(); /* `mean` is rewritten by the next (image, channel) */
    }
}

static __global__ void k_adjust(int n, int hw, int c, const float *f, const float *d, float lo,
                                float hi, const float *m, const float *x, float *y)
{
    size_t total = (size_t)n * hw * c;
    DT_CU_FOR(e, total)
    {
        size_t i = e / ((size_t)hw * (size_t)c), k = e % (size_t)c;
        float mk = f ? m[i * (size_t)c + k] : 0.0f;
        float v = adjust_v(f != NULL, x[e], mk, f ? f[i] : 1.0f, d ? d[i] : 0.0f);
        y[e] = fminf(fmaxf(v, lo), hi);
    }
}

static __global__ void k_adjust_bwd(int n, int hw, int c, const float *f, const float *d, float lo,
                                    float hi, const float *m, const float *gm, const float *x,
                                    const float *dy, float *dx, bool acc)
{
    size_t total = (size_t)n * hw * c;
    DT_CU_FOR(e, total)
    {
        size_t i = e / ((size_t)hw * (size_t)c), ik = i * (size_t)c + e % (size_t)c;
        float fi = f ? f[i] : 1.0f, di = d ? d[i] : 0.0f;
        float v = adjust_v(f != NULL, x[e], f ? m[ik] : 0.0f, fi, di);
        float g = mul((v >= lo && v <= hi) ? dy[e] : 0.0f, fi) + (f ? gm[ik] : 0.0f);
        dx[e] = acc ? dx[e] + g : g;
    }
}

/* The stats blocks: one per (image, channel), capped (each block loops over the rest). */
static unsigned stat_blocks(int n, int c)
{
    size_t b = (size_t)n * (size_t)c;
    return b > 65535u * 8u ? 65535u * 8u : (unsigned)b;
}

static void cu_img_adjust(int n, int hw, int c, const float *f, const float *d, float lo, float hi,
                          const float *x, float *y)
{
    if (n <= 0 || hw <= 0 || c <= 0)
        return;
    float *m = NULL;
    if (f) { /* brightness (f NULL) needs no mean */
        m = (float *)dt_cu_scratch(sizeof(float) * (size_t)n * (size_t)c);
        if (!m)
            return;
        k_adjust_stats<<<stat_blocks(n, c), DT_CU_THREADS, 0, dt_cu_stream()>>>(
            n, hw, c, f, d, lo, hi, x, NULL, m, NULL);
        DT_CU_LAUNCH("img_adjust stats");
    }
    k_adjust<<<LAUNCH_1D((size_t)n * hw * c)>>>(n, hw, c, f, d, lo, hi, m, x, y);
    DT_CU_LAUNCH("img_adjust");
}

static void cu_img_adjust_bwd(int n, int hw, int c, const float *f, const float *d, float lo,
                              float hi, const float *x, const float *dy, float *dx, bool acc)
{
    if (n <= 0 || hw <= 0 || c <= 0)
        return;
    float *m = NULL, *gm = NULL;
    if (f) {
        m = (float *)dt_cu_scratch(2 * sizeof(float) * (size_t)n * (size_t)c);
        if (!m)
            return;
        gm = m + (size_t)n * (size_t)c;
        k_adjust_stats<<<stat_blocks(n, c), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, hw, c, f, d, lo,
                                                                                hi, x, dy, m, gm);
        DT_CU_LAUNCH("img_adjust_bwd stats");
    }
    k_adjust_bwd<<<LAUNCH_1D((size_t)n * hw * c)>>>(n, hw, c, f, d, lo, hi, m, gm, x, dy, dx, acc);
    DT_CU_LAUNCH("img_adjust_bwd");
}

/* ---- resize ------------------------------------------------------------------------------- */

/* One output coordinate of one axis, in window cells (the offset y0 / x0 is added by the
 * kernels). Bilinear and nearest (and area / bicubic at the same size, which the CPU runs as
 * bilinear): cells lo, hi with t on hi. Area: cells [start, end) of the interval [a, b).
 * Bicubic: idx, w. */
struct rtap {
    long long start, end;
    int lo, hi;
    float t;
    float a, b, scale;
    int idx[4];
    float w[4];
};

/* How an op runs: the CPU's dispatch. */
enum rmode { R_LERP, R_AREA, R_CUBIC };

static rmode resize_mode(const dt_nn_resize *g)
{
    bool sep = (g->interp == DT_NN_INTERP_AREA || g->interp == DT_NN_INTERP_BICUBIC) &&
               (g->wh != g->oh || g->ww != g->ow);
    if (!sep)
        return R_LERP;
    return g->interp == DT_NN_INTERP_AREA ? R_AREA : R_CUBIC;
}

static __device__ __forceinline__ int bound(int v, int n)
{
    return v < 0 ? 0 : v > n - 1 ? n - 1 : v;
}

/* TF's bicubic table entries (a = -0.5), in double as the CPU's keys_near / keys_far. */
static __device__ float keys_near(int i)
{
    double x = (double)(float)(i * 1.0 / 1024);
    /* ((a + 2) x - (a + 3)) x x + 1 */
    double p = __dsub_rn(__dmul_rn(1.5, x), 2.5);
    return (float)__dadd_rn(__dmul_rn(__dmul_rn(p, x), x), 1.0);
}

static __device__ float keys_far(int i)
{
    double x = (double)((float)(i * 1.0 / 1024) + 1.0f);
    /* ((a x - 5 a) x + 8 a) x - 4 a */
    double p = __dsub_rn(__dmul_rn(-0.5, x), -2.5);
    p = __dadd_rn(__dmul_rn(p, x), -4.0);
    return (float)__dsub_rn(__dmul_rn(p, x), -2.0);
}

/* Output coordinate i of an axis of `in` window cells resized to `out`: tap_at and sep_at. */
static __device__ rtap tap_make(int i, int in, int out, rmode mode, bool nearest)
{
    rtap t = {};
    float scale = (float)in / (float)out;
    if (mode == R_LERP) {
        if (nearest) {
            int j = bound((int)floorf(((float)i + 0.5f) * scale), in);
            t.lo = t.hi = j;
            t.t = 0.0f;
        } else {
            float src = mul((float)i + 0.5f, scale) - 0.5f, fl = floorf(src);
            t.lo = bound((int)fl, in);
            t.hi = bound((int)ceilf(src), in);
            t.t = src - fl;
        }
        return t;
    }
    if (mode == R_AREA) {
        t.scale = scale;
        t.a = (float)i * scale;
        t.b = (float)(i + 1) * scale;
        t.start = (long long)floorf(t.a);
        t.end = (long long)ceilf(t.b);
        return t;
    }
    float src = mul((float)i + 0.5f, scale) - 0.5f;
    long long loc = (long long)floorf(src);
    int off = __float2int_rn(mul(src - (float)loc, 1024.0f)); /* lrintf: nearest, ties even */
    float w[4] = {keys_far(off), keys_near(off), keys_near(1024 - off), keys_far(1024 - off)};
    float sum = 0;
    for (int k = 0; k < 4; k++) {
        long long j = loc - 1 + k;
        t.idx[k] = j < 0 ? 0 : j > in - 1 ? in - 1 : (int)j;
        t.w[k] = t.idx[k] == j ? w[k] : 0.0f; /* outside the image: dropped */
        sum += t.w[k];
    }
    if (fabsf(sum) >= 1000.0f * FLT_MIN)
        for (int k = 0; k < 4; k++)
            t.w[k] *= 1.0f / sum;
    return t;
}

static __device__ __forceinline__ int tap_count(const rtap &t, rmode mode)
{
    return mode == R_AREA ? (int)(t.end - t.start) : mode == R_CUBIC ? 4 : 2;
}

/* Tap k's window cell and weight. Lerp: lo with 1 - t, hi with t (the CPU's backward weights). */
static __device__ __forceinline__ int tap_cell(const rtap &t, int k, int in, rmode mode, float *w)
{
    if (mode == R_LERP) {
        *w = k ? t.t : 1.0f - t.t;
        return k ? t.hi : t.lo;
    }
    if (mode == R_CUBIC) {
        *w = t.w[k];
        return t.idx[k];
    }
    long long v = t.start + k; /* TF's ResizeArea coverage of cell v by [a, b) */
    if ((float)v < t.a)
        *w = (float)(v + 1) > t.b ? t.scale : (float)(v + 1) - t.a;
    else
        *w = (float)(v + 1) > t.b ? t.b - (float)v : 1.0f;
    return bound((int)(v < in ? v : in - 1), in);
}

/* The taps of every output row (oh) then column (ow). */
static __global__ void k_resize_taps(dt_nn_resize g, rmode mode, rtap *tys, rtap *txs)
{
    bool nearest = g.interp == DT_NN_INTERP_NEAREST;
    DT_CU_FOR(e, (size_t)g.oh + (size_t)g.ow)
    {
        if (e < (size_t)g.oh)
            tys[e] = tap_make((int)e, g.wh, g.oh, mode, nearest);
        else
            txs[e - g.oh] = tap_make((int)(e - g.oh), g.ww, g.ow, mode, nearest);
    }
}

/* For every window row (wh) then column (ww): the first and last output coordinate with a tap
 * on it (x > y: none). Every tap counts, weight 0 included, as the CPU adds those too. */
static __global__ void k_resize_ranges(dt_nn_resize g, rmode mode, const rtap *tys, const rtap *txs,
                                       int2 *rys, int2 *rxs)
{
    DT_CU_FOR(e, (size_t)g.wh + (size_t)g.ww)
    {
        bool row = e < (size_t)g.wh;
        int v = row ? (int)e : (int)(e - g.wh), in = row ? g.wh : g.ww, out = row ? g.oh : g.ow;
        const rtap *ts = row ? tys : txs;
        int2 r = make_int2(out, -1);
        for (int o = 0; o < out; o++) {
            int nt = tap_count(ts[o], mode);
            for (int k = 0; k < nt; k++) {
                float w;
                if (tap_cell(ts[o], k, in, mode, &w) == v) {
                    r.x = min(r.x, o);
                    r.y = o;
                    break;
                }
            }
        }
        (row ? rys : rxs)[v] = r;
    }
}

static __global__ void k_resize_lerp(dt_nn_resize g, const rtap *tys, const rtap *txs,
                                     const float *x, float *y)
{
    size_t c = (size_t)g.c, row = (size_t)g.w * c, img = (size_t)g.h * row;
    DT_CU_FOR(e, (size_t)g.n * g.oh * g.ow * c)
    {
        size_t q = e / c, k = e % c;
        int ox = (int)(q % (size_t)g.ow);
        q /= (size_t)g.ow;
        int oy = (int)(q % (size_t)g.oh);
        size_t i = q / (size_t)g.oh;
        rtap ty = tys[oy], tx = txs[ox];
        const float *top = x + i * img + (size_t)(ty.lo + g.y0) * row,
                    *bot = x + i * img + (size_t)(ty.hi + g.y0) * row;
        size_t l = (size_t)(tx.lo + g.x0) * c + k, r = (size_t)(tx.hi + g.x0) * c + k;
        /* across, then down, in TF's order of operations */
        float t = top[l] + mul(top[r] - top[l], tx.t);
        float b = bot[l] + mul(bot[r] - bot[l], tx.t);
        y[e] = t + mul(b - t, ty.t);
    }
}

static __global__ void k_resize_sep(dt_nn_resize g, rmode mode, float post, const rtap *tys,
                                    const rtap *txs, const float *x, float *y)
{
    size_t c = (size_t)g.c, row = (size_t)g.w * c, img = (size_t)g.h * row;
    DT_CU_FOR(e, (size_t)g.n * g.oh * g.ow * c)
    {
        size_t q = e / c, k = e % c;
        int ox = (int)(q % (size_t)g.ow);
        q /= (size_t)g.ow;
        int oy = (int)(q % (size_t)g.oh);
        size_t i = q / (size_t)g.oh;
        const rtap &ty = tys[oy], &tx = txs[ox];
        int na = tap_count(ty, mode), nb = tap_count(tx, mode);
        float sum = 0;
        for (int a = 0; a < na; a++) {
            float wy;
            int r = tap_cell(ty, a, g.wh, mode, &wy) + g.y0;
            const float *xr = x + i * img + (size_t)r * row;
            float acc = 0;
            for (int b = 0; b < nb; b++) {
                float wx;
                int col = tap_cell(tx, b, g.ww, mode, &wx) + g.x0;
                acc += mul(xr[(size_t)col * c + k], wx);
            }
            sum += mul(acc, wy);
        }
        y[e] = mul(sum, post);
    }
}

/* dx's cell (i, yy, xx, k) gathers dy * post * wy * wx over the outputs that read it, in the
 * CPU's order (output row, output column, row tap, column tap), from dx (acc) or 0. */
static __global__ void k_resize_bwd(dt_nn_resize g, rmode mode, float post, const rtap *tys,
                                    const rtap *txs, const int2 *rys, const int2 *rxs,
                                    const float *dy, float *dx, bool accum)
{
    size_t c = (size_t)g.c;
    DT_CU_FOR(e, (size_t)g.n * g.h * g.w * c)
    {
        size_t q = e / c, k = e % c;
        int xx = (int)(q % (size_t)g.w);
        q /= (size_t)g.w;
        int yy = (int)(q % (size_t)g.h);
        size_t i = q / (size_t)g.h;
        float acc = accum ? dx[e] : 0.0f;
        int vy = yy - g.y0, vx = xx - g.x0;
        if (vy >= 0 && vy < g.wh && vx >= 0 && vx < g.ww) {
            int2 ry = rys[vy], rx = rxs[vx];
            for (int oy = ry.x; oy <= ry.y; oy++) {
                const rtap &ty = tys[oy];
                int na = tap_count(ty, mode);
                const float *dr = dy + (i * (size_t)g.oh + (size_t)oy) * (size_t)g.ow * c + k;
                for (int ox = rx.x; ox <= rx.y; ox++) {
                    const rtap &tx = txs[ox];
                    int nb = tap_count(tx, mode);
                    float v = mul(dr[(size_t)ox * c], post);
                    for (int a = 0; a < na; a++) {
                        float wy;
                        if (tap_cell(ty, a, g.wh, mode, &wy) != vy)
                            continue;
                        float vyw = mul(v, wy);
                        for (int b = 0; b < nb; b++) {
                            float wx;
                            if (tap_cell(tx, b, g.ww, mode, &wx) == vx)
                                acc += mul(vyw, wx);
                        }
                    }
                }
            }
        }
        dx[e] = acc;
    }
}

/* TF's 1 / (height_scale * width_scale) for area, in float as the CPU (host code, no FMA). */
static float resize_post(const dt_nn_resize *g, rmode mode)
{
    if (mode != R_AREA)
        return 1.0f;
    return (float)(1.0 / (((float)g->wh / (float)g->oh) * ((float)g->ww / (float)g->ow)));
}

/* Scratch: the taps of the oh rows and ow columns, then (ranges) the wh + ww output ranges. */
static rtap *resize_prep(const dt_nn_resize *g, rmode mode, bool ranges, int2 **rys)
{
    size_t taps = (size_t)g->oh + (size_t)g->ow, nr = ranges ? (size_t)g->wh + (size_t)g->ww : 0;
    rtap *t = (rtap *)dt_cu_scratch(sizeof(rtap) * taps + sizeof(int2) * nr);
    if (!t)
        return NULL;
    k_resize_taps<<<LAUNCH_1D(taps)>>>(*g, mode, t, t + g->oh);
    DT_CU_LAUNCH("img_resize taps");
    if (ranges) {
        *rys = (int2 *)(t + taps); /* rtap's size is a multiple of 8 */
        k_resize_ranges<<<LAUNCH_1D(nr)>>>(*g, mode, t, t + g->oh, *rys, *rys + g->wh);
        DT_CU_LAUNCH("img_resize ranges");
    }
    return t;
}

static void cu_img_resize(const dt_nn_resize *g, const float *x, float *y)
{
    size_t total = (size_t)g->n * g->oh * g->ow * g->c;
    if (g->n <= 0 || g->oh <= 0 || g->ow <= 0 || g->c <= 0 || total == 0)
        return;
    rmode mode = resize_mode(g);
    rtap *t = resize_prep(g, mode, false, NULL);
    if (!t)
        return;
    if (mode == R_LERP)
        k_resize_lerp<<<LAUNCH_1D(total)>>>(*g, t, t + g->oh, x, y);
    else
        k_resize_sep<<<LAUNCH_1D(total)>>>(*g, mode, resize_post(g, mode), t, t + g->oh, x, y);
    DT_CU_LAUNCH("img_resize");
}

static void cu_img_resize_bwd(const dt_nn_resize *g, const float *dy, float *dx, bool acc)
{
    size_t total = (size_t)g->n * g->h * g->w * g->c;
    if (g->n <= 0 || g->h <= 0 || g->w <= 0 || g->c <= 0)
        return;
    if (g->oh <= 0 || g->ow <= 0 || g->wh <= 0 || g->ww <= 0) { /* nothing was read */
        if (!acc)
            DT_CU(cudaMemsetAsync(dx, 0, sizeof(float) * total, dt_cu_stream()));
        return;
    }
    rmode mode = resize_mode(g);
    int2 *r = NULL;
    rtap *t = resize_prep(g, mode, true, &r);
    if (!t)
        return;
    k_resize_bwd<<<LAUNCH_1D(total)>>>(*g, mode, resize_post(g, mode), t, t + g->oh, r, r + g->wh,
                                       dy, dx, acc);
    DT_CU_LAUNCH("img_resize_bwd");
}

/* ---- projective transforms ---------------------------------------------------------------- */

/* TF's MapCoordinate, as the CPU's map_coord (its int64 truncations included). */
static __device__ float map_coord(float v, int len, dt_nn_fill fill)
{
    long long n = len;
    if (fill == DT_NN_FILL_CONSTANT)
        return v;
    if (fill == DT_NN_FILL_REFLECT) {
        if (v < 0) {
            if (n <= 1) {
                v = 0;
            } else {
                long long sz2 = 2 * n;
                if (v < (float)sz2)
                    v = (float)(sz2 * (long long)(-v / (float)sz2)) + v;
                v = v < (float)-n ? v + (float)sz2 : -v - 1;
            }
        } else if (v > (float)(n - 1)) {
            if (n <= 1) {
                v = 0;
            } else {
                long long sz2 = 2 * n;
                v -= (float)(sz2 * (long long)(v / (float)sz2));
                if (v >= (float)n)
                    v = (float)sz2 - v - 1;
            }
        }
    } else if (fill == DT_NN_FILL_WRAP) {
        if (v < 0) {
            if (n <= 1)
                v = 0;
            else
                v += (float)(n * ((long long)(-v / (float)(n - 1)) + 1));
        } else if (v > (float)(n - 1)) {
            if (n <= 1)
                v = 0;
            else
                v -= (float)(n * (long long)(v / (float)(n - 1)));
        }
    }
    return fminf(fmaxf(v, 0.0f), (float)(n - 1));
}

/* The CPU's taps4: idx[a * 2 + b] = row a, column b as y * w + x, or -1 outside the image. */
struct taps4 {
    long long idx[4];
    float wy[2], wx[2];
    bool none;
};

static __device__ taps4 transform_taps(const dt_nn_transform &g, const float *t, int oy, int ox)
{
    taps4 tp;
    float fx = (float)ox, fy = (float)oy;
    float k = (mul(t[6], fx) + mul(t[7], fy)) + 1.0f;
    tp.none = k == 0.0f;
    if (tp.none)
        return tp;
    float ix = ((mul(t[0], fx) + mul(t[1], fy)) + t[2]) / k;
    float iy = ((mul(t[3], fx) + mul(t[4], fy)) + t[5]) / k;
    float x = map_coord(ix, g.w, g.fill), y = map_coord(iy, g.h, g.fill);
    long long ys[2], xs[2];
    if (g.nearest) {
        ys[0] = ys[1] = (long long)roundf(y);
        xs[0] = xs[1] = (long long)roundf(x);
        tp.wy[0] = tp.wx[0] = 1, tp.wy[1] = tp.wx[1] = 0;
    } else {
        float y0 = floorf(y), x0 = floorf(x);
        ys[0] = (long long)y0, ys[1] = ys[0] + 1, xs[0] = (long long)x0, xs[1] = xs[0] + 1;
        tp.wy[0] = y0 + 1 - y, tp.wy[1] = y - y0, tp.wx[0] = x0 + 1 - x, tp.wx[1] = x - x0;
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            tp.idx[a * 2 + b] =
                ys[a] >= 0 && ys[a] < g.h && xs[b] >= 0 && xs[b] < g.w ? ys[a] * g.w + xs[b] : -1;
    return tp;
}

static __device__ __forceinline__ float read_or_fill(const float *xi, long long idx, size_t c,
                                                     size_t k, float fill)
{
    return idx >= 0 ? xi[(size_t)idx * c + k] : fill;
}

static __global__ void k_transform(dt_nn_transform g, const float *t, const float *x, float *y)
{
    size_t c = (size_t)g.c, hw = (size_t)g.h * (size_t)g.w;
    DT_CU_FOR(e, (size_t)g.n * hw * c)
    {
        size_t q = e / c, k = e % c, i = q / hw, p = q % hw;
        const float *xi = x + i * hw * c;
        taps4 tp = transform_taps(g, t + i * 8, (int)(p / (size_t)g.w), (int)(p % (size_t)g.w));
        float fv = g.fill_value, v;
        if (tp.none) {
            v = fv;
        } else if (g.nearest) {
            v = read_or_fill(xi, tp.idx[0], c, k, fv);
        } else { /* TF's order: along the floor and ceiling rows, then between */
            float top = mul(tp.wx[0], read_or_fill(xi, tp.idx[0], c, k, fv)) +
                        mul(tp.wx[1], read_or_fill(xi, tp.idx[1], c, k, fv));
            float bot = mul(tp.wx[0], read_or_fill(xi, tp.idx[2], c, k, fv)) +
                        mul(tp.wx[1], read_or_fill(xi, tp.idx[3], c, k, fv));
            v = mul(tp.wy[0], top) + mul(tp.wy[1], bot);
        }
        y[e] = v;
    }
}

static void cu_img_transform(const dt_nn_transform *g, const float *t, const float *x, float *y)
{
    size_t total = (size_t)g->n * g->h * g->w * g->c;
    if (g->n <= 0 || g->h <= 0 || g->w <= 0 || g->c <= 0)
        return;
    k_transform<<<LAUNCH_1D(total)>>>(*g, t, x, y);
    DT_CU_LAUNCH("img_transform");
}

/* At most this many (cell, tap) pairs are sorted at once: 4 M pairs are 64 MiB of keys and
 * values (double-buffered) plus CUB's temporary storage; a batch of 224x224 bilinear images
 * goes 20 images a chunk. */
#define TF_CHUNK ((size_t)1 << 22)

/* Pair e of a chunk of images starting at image i0: output pixel e / taps (counted from the
 * chunk's first pixel), tap e % taps. key = the input cell it reads (from the chunk's first
 * cell), or `none` (= the chunk's cell count, sorted last) for a tap outside the image or a
 * pixel whose projection is 0. */
static __global__ void k_tf_keys(dt_nn_transform g, const float *t, size_t i0, size_t pairs,
                                 int taps, uint32_t none, uint32_t *keys, uint32_t *vals)
{
    size_t hw = (size_t)g.h * (size_t)g.w;
    DT_CU_FOR(e, pairs)
    {
        size_t p = e / (size_t)taps, il = p / hw, pix = p % hw;
        int j = (int)(e % (size_t)taps);
        taps4 tp = transform_taps(g, t + (i0 + il) * 8, (int)(pix / (size_t)g.w),
                                  (int)(pix % (size_t)g.w));
        bool hit = !tp.none && tp.idx[j] >= 0;
        keys[e] = hit ? (uint32_t)(il * hw + (size_t)tp.idx[j]) : none;
        vals[e] = (uint32_t)e;
    }
}

/* The first position of sorted keys[0, n) holding a key >= v. */
static __device__ __forceinline__ size_t lower_bound_u32(const uint32_t *keys, size_t n, uint32_t v)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* dx's cells of the chunk: each sums weight * dy over its segment of the sorted pairs, which
 * the stable sort left in (pixel, tap) order - the CPU's scatter order for that cell. */
static __global__ void k_tf_gather(dt_nn_transform g, const float *t, size_t i0, size_t cells,
                                   size_t pairs, int taps, const uint32_t *keys,
                                   const uint32_t *vals, const float *dy, float *dx, bool accum)
{
    size_t c = (size_t)g.c, hw = (size_t)g.h * (size_t)g.w;
    DT_CU_FOR(e, cells * c)
    {
        size_t cell = e / c, k = e % c;
        float *d = dx + (i0 * hw + cell) * c + k;
        float acc = accum ? *d : 0.0f;
        for (size_t s = lower_bound_u32(keys, pairs, (uint32_t)cell);
             s < pairs && keys[s] == (uint32_t)cell; s++) {
            size_t v = vals[s], p = v / (size_t)taps, il = p / hw, pix = p % hw;
            int j = (int)(v % (size_t)taps);
            taps4 tp = transform_taps(g, t + (i0 + il) * 8, (int)(pix / (size_t)g.w),
                                      (int)(pix % (size_t)g.w));
            float wt = mul(tp.wy[j / 2], tp.wx[j % 2]);
            acc += mul(wt, dy[((i0 + il) * hw + pix) * c + k]);
        }
        *d = acc;
    }
}

static int bits_for(uint32_t v)
{
    int b = 0;
    while (b < 32 && (v >> b) != 0)
        b++;
    return b ? b : 1;
}

static void cu_img_transform_bwd(const dt_nn_transform *g, const float *t, const float *dy,
                                 float *dx, bool acc)
{
    if (g->n <= 0 || g->h <= 0 || g->w <= 0 || g->c <= 0)
        return;
    size_t hw = (size_t)g->h * (size_t)g->w;
    int taps = g->nearest ? 1 : 4;
    if (hw * (size_t)taps >= UINT32_MAX) {
        dt_cu_fail("img_transform_bwd", __FILE__, __LINE__,
                   "an image of 2^30 pixels or more: its taps do not fit 32-bit sort keys");
        return;
    }
    size_t per = TF_CHUNK / (hw * (size_t)taps), n = (size_t)g->n;
    if (per < 1)
        per = 1;
    if (per > n)
        per = n;
    size_t last = n % per ? n % per : per;
    /* CUB's temporary storage for the full chunk and the last one (it depends on the count);
     * 32-bit counts (every chunk has fewer than 2^32 pairs) keep CUB on 32-bit offsets */
    size_t tmp = 0, tmp_last = 0;
    {
        cub::DoubleBuffer<uint32_t> kb(NULL, NULL), vb(NULL, NULL);
        uint32_t none = (uint32_t)(per * hw);
        DT_CU(cub::DeviceRadixSort::SortPairs(NULL, tmp, kb, vb,
                                              (uint32_t)(per * hw * (size_t)taps), 0,
                                              bits_for(none), dt_cu_stream()));
        DT_CU(cub::DeviceRadixSort::SortPairs(NULL, tmp_last, kb, vb,
                                              (uint32_t)(last * hw * (size_t)taps), 0,
                                              bits_for((uint32_t)(last * hw)), dt_cu_stream()));
        if (tmp_last > tmp)
            tmp = tmp_last;
    }
    size_t pmax = per * hw * (size_t)taps, arr = (pmax * sizeof(uint32_t) + 255) / 256 * 256;
    char *s = (char *)dt_cu_scratch(4 * arr + tmp);
    if (!s)
        return;
    uint32_t *k0 = (uint32_t *)s, *k1 = (uint32_t *)(s + arr), *v0 = (uint32_t *)(s + 2 * arr),
             *v1 = (uint32_t *)(s + 3 * arr);
    void *temp = s + 4 * arr;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        size_t ni = n - i0 < per ? n - i0 : per, cells = ni * hw, pairs = cells * (size_t)taps;
        uint32_t none = (uint32_t)cells;
        k_tf_keys<<<LAUNCH_1D(pairs)>>>(*g, t, i0, pairs, taps, none, k0, v0);
        DT_CU_LAUNCH("img_transform_bwd keys");
        cub::DoubleBuffer<uint32_t> kb(k0, k1), vb(v0, v1);
        size_t tb = tmp;
        DT_CU(cub::DeviceRadixSort::SortPairs(temp, tb, kb, vb, (uint32_t)pairs, 0, bits_for(none),
                                              dt_cu_stream()));
        k_tf_gather<<<LAUNCH_1D(cells * (size_t)g->c)>>>(*g, t, i0, cells, pairs, taps,
                                                         kb.Current(), vb.Current(), dy, dx, acc);
        DT_CU_LAUNCH("img_transform_bwd gather");
    }
}

void dt_cu_fill_image(dt_nn_ops *o)
{
    o->img_flip = cu_img_flip;
    o->img_adjust = cu_img_adjust;
    o->img_adjust_bwd = cu_img_adjust_bwd;
    o->img_resize = cu_img_resize;
    o->img_resize_bwd = cu_img_resize_bwd;
    o->img_transform = cu_img_transform;
    o->img_transform_bwd = cu_img_transform_bwd;
}
