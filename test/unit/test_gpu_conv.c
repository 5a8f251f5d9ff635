/* test_gpu_conv.c - the CUDA backend's convolution kernels (lib/nn/cuda/conv.cu) against the CPU
 * table on the same random inputs: im2col (with the ones column), col2im, pooling forward and
 * backward (max, average with Keras's "same" divisor, max of relu; argmax equal, ties
 * included), the depthwise convolution (mult 1 and 2) and the Maximum merge. Geometries: 3x3
 * "same" at stride 1 and 2, 1x1, 5x5 "valid", dilation 2, kh != kw, c = 1 and 3, n = 3;
 * pooling 2x2/2 and 3x3/2 "same". Outputs start as NaN (arg as -7) so an element a kernel
 * leaves unwritten fails; acc true starts from the same random values on both sides. */
#include "test_gpu_util.h"

#include <stdio.h>

/* The device buffer d (n floats) against ref within tol (relative L2); returns the error. A
 * double comparison: ASSERT_LE would compare as integers. */
static double close_to(const dt_nn_ops *g, const float *d, const float *ref, size_t n, double tol,
                       const char *what, int geo)
{
    float *h = gpu_down(g, d, n);
    GPU_SYNC();
    double e = gpu_rel_l2(h, ref, n);
    free(h);
    if (!(e <= tol))
        fprintf(stderr, "%s (geometry %d): relative L2 error %.3g > %.3g\n", what, geo, e, tol);
    ASSERT_TRUE(e <= tol);
    return e;
}

/* The device buffer d equal to ref byte for byte (argmax, copies, reruns). */
static void same_bytes(const dt_nn_ops *g, const void *d, const void *ref, size_t bytes,
                       const char *what, int geo)
{
    void *h = malloc(bytes ? bytes : 1);
    g->download(h, d, bytes);
    GPU_SYNC();
    int c = memcmp(h, ref, bytes);
    free(h);
    if (c != 0)
        fprintf(stderr, "%s (geometry %d): differs from the reference\n", what, geo);
    ASSERT_TRUE(c == 0);
}

/* And the same bits as the CPU: the gathers add the same numbers in the same order (each a
 * rounded multiply and add, no FMA), so an order that drifts from the CPU's shows here even
 * where the tolerance cannot see it. */
static void same_floats(const dt_nn_ops *g, const float *d, const float *ref, size_t n,
                        const char *what, int geo)
{
    same_bytes(g, d, ref, n * sizeof(float), what, geo);
}

static float *nans(size_t n)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    return h;
}

static int32_t *minus7(size_t n)
{
    int32_t *h = malloc(sizeof(int32_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = -7;
    return h;
}

/* Keras's geometry: "same" pads (k_eff - 1) total, the smaller half first; "valid" none. */
static dt_nn_win win(int n, int h, int w, int c, int kh, int kw, int s, int d, bool same)
{
    dt_nn_win g;
    memset(&g, 0, sizeof g);
    g.n = n, g.h = h, g.w = w, g.c = c, g.kh = kh, g.kw = kw, g.sh = s, g.sw = s;
    g.dil_h = d, g.dil_w = d;
    int ekh = (kh - 1) * d + 1, ekw = (kw - 1) * d + 1;
    if (same) {
        g.oh = (h + s - 1) / s;
        g.ow = (w + s - 1) / s;
        int ph = (g.oh - 1) * s + ekh - h, pw = (g.ow - 1) * s + ekw - w;
        g.pt = ph > 0 ? ph / 2 : 0;
        g.pl = pw > 0 ? pw / 2 : 0;
    } else {
        g.oh = (h - ekh) / s + 1;
        g.ow = (w - ekw) / s + 1;
    }
    return g;
}

/* n, h, w, c, kh, kw, stride, dilation, same */
static const int conv_geo[][9] = {
    {3, 9, 9, 3, 3, 3, 1, 1, 1},    /* 3x3 same */
    {3, 9, 8, 3, 3, 3, 2, 1, 1},    /* 3x3 same, stride 2 */
    {3, 7, 7, 1, 1, 1, 1, 1, 0},    /* 1x1 */
    {3, 11, 10, 3, 5, 5, 1, 1, 0},  /* 5x5 valid */
    {3, 10, 10, 3, 3, 3, 1, 2, 1},  /* dilation 2 */
    {3, 9, 12, 1, 3, 2, 1, 1, 1},   /* kh != kw, c = 1 */
    {3, 8, 9, 3, 2, 4, 2, 1, 0},    /* kh != kw, stride 2 */
    {2, 12, 11, 2, 3, 3, 2, 2, 1},  /* stride and dilation together */
    {1, 1, 1, 1, 1, 1, 1, 1, 0},    /* one pixel */
    {3, 32, 32, 16, 3, 3, 1, 1, 1}, /* a real layer's size */
};
#define NGEO (sizeof conv_geo / sizeof *conv_geo)

static dt_nn_win conv_win(size_t i)
{
    const int *q = conv_geo[i];
    return win(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8]);
}

static size_t in_size(const dt_nn_win *g)
{
    return (size_t)g->n * g->h * g->w * g->c;
}

static size_t out_pixels(const dt_nn_win *g)
{
    return (size_t)g->n * g->oh * g->ow;
}

/* ---- im2col / col2im ------------------------------------------------------------------------- */

DT_TEST(gpu_im2col_col2im_match_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    double worst = 0;
    for (size_t s = 0; s < NGEO; s++) {
        dt_nn_win w = conv_win(s);
        size_t nx = in_size(&w), k = (size_t)w.kh * w.kw * w.c;
        float *x = gpu_randn(nx, 1, 10 + s), *dx_ = gpu_up(g, x, nx);
        for (int ones = 0; ones < 2; ones++) {
            w.ones = ones;
            size_t ncol = out_pixels(&w) * (k + (size_t)ones);
            float *col = nans(ncol), *dcol = gpu_poison(g, ncol);
            c->im2col(&w, x, col);
            g->im2col(&w, dx_, dcol);
            same_bytes(g, dcol, col, ncol * sizeof(float), "im2col", (int)s); /* a copy */
            g->free(dcol);
            free(col);
        }
        /* col2im reads rows of kh*kw*c whatever g->ones says */
        size_t ncol = out_pixels(&w) * k;
        float *col = gpu_randn(ncol, 1, 20 + s), *dcol = gpu_up(g, col, ncol);
        for (int acc = 0; acc < 2; acc++) {
            float *dx = acc ? gpu_randn(nx, 1, 30 + s) : nans(nx), *ddx = gpu_up(g, dx, nx);
            c->col2im(&w, col, dx, acc);
            g->col2im(&w, dcol, ddx, acc);
            double e = close_to(g, ddx, dx, nx, 1e-5, "col2im", (int)s);
            same_floats(g, ddx, dx, nx, "col2im bits", (int)s);
            worst = e > worst ? e : worst;
            g->free(ddx);
            free(dx);
        }
        g->free(dcol);
        free(col);
        g->free(dx_);
        free(x);
    }
    printf("col2im worst relative L2 %.3g over %zu geometries\n", worst, NGEO);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ---- pooling --------------------------------------------------------------------------------- */

/* n, h, w, c, k, stride, same */
static const int pool_geo[][7] = {
    {3, 8, 8, 3, 2, 2, 0},  /* 2x2/2, tiled (the CPU's fast path) */
    {3, 7, 9, 1, 2, 2, 0},  /* 2x2/2 with a row and column no window covers */
    {3, 7, 7, 3, 3, 2, 1},  /* 3x3/2 same: padding, overlapping windows */
    {3, 8, 10, 5, 3, 2, 1}, /* 3x3/2 same, even sizes */
    {2, 6, 6, 4, 3, 1, 1},  /* 3x3/1 same: every cell in up to 9 windows */
    {2, 9, 9, 2, 3, 3, 0},  /* 3x3/3: tiled, not 2x2 */
};
#define NPOOL (sizeof pool_geo / sizeof *pool_geo)

static const dt_nn_pool pool_kinds[] = {DT_NN_POOL_MAX, DT_NN_POOL_AVG, DT_NN_POOL_MAX_RELU};
static const char *pool_names[] = {"max", "avg", "max_relu"};

/* Inputs: 0 random, 1 a constant (every window a tie), 2 a negative constant (relu stops
 * everything), 3 few distinct values (ties mixed with wins). */
static float *pool_input(size_t n, int mode, uint64_t seed)
{
    float *x = gpu_randn(n, 1, seed);
    for (size_t i = 0; i < n; i++) {
        if (mode == 1)
            x[i] = 0.5f;
        else if (mode == 2)
            x[i] = -1.0f;
        else if (mode == 3)
            x[i] = roundf(x[i]);
    }
    return x;
}

DT_TEST(gpu_pool_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    for (size_t s = 0; s < NPOOL; s++) {
        const int *q = pool_geo[s];
        dt_nn_win w = win(q[0], q[1], q[2], q[3], q[4], q[4], q[5], 1, q[6]);
        w.dil_h = w.dil_w = 0; /* pooling windows are not dilated */
        size_t nx = in_size(&w), ny = out_pixels(&w) * w.c;
        for (size_t kk = 0; kk < 3; kk++)
            for (int mode = 0; mode < 4; mode++) {
                dt_nn_pool kind = pool_kinds[kk];
                float *x = pool_input(nx, mode, 40 + s), *dx_ = gpu_up(g, x, nx);
                float *y = nans(ny), *dy_ = gpu_poison(g, ny);
                int32_t *arg = minus7(ny), *darg = gpu_up_bytes(g, arg, ny * sizeof(int32_t));
                c->pool_fwd(kind, &w, x, y, kind == DT_NN_POOL_AVG ? NULL : arg);
                g->pool_fwd(kind, &w, dx_, dy_, kind == DT_NN_POOL_AVG ? NULL : darg);
                close_to(g, dy_, y, ny, 1e-5, pool_names[kk], (int)s);
                same_floats(g, dy_, y, ny, "pool_fwd bits", (int)s);
                if (kind != DT_NN_POOL_AVG)
                    same_bytes(g, darg, arg, ny * sizeof(int32_t), "pool argmax", (int)s);
                /* the backward from the CPU's argmax, so both sides route alike */
                float *gy = gpu_randn(ny, 1, 50 + s), *dgy = gpu_up(g, gy, ny);
                g->upload(darg, arg, ny * sizeof(int32_t));
                for (int acc = 0; acc < 2; acc++) {
                    float *dx = acc ? gpu_randn(nx, 1, 60 + s) : nans(nx), *ddx = gpu_up(g, dx, nx);
                    c->pool_bwd(kind, &w, gy, arg, dx, acc);
                    g->pool_bwd(kind, &w, dgy, darg, ddx, acc);
                    close_to(g, ddx, dx, nx, 1e-5, pool_names[kk], (int)s);
                    same_floats(g, ddx, dx, nx, "pool_bwd bits", (int)s);
                    g->free(ddx);
                    free(dx);
                }
                g->free(dgy);
                free(gy);
                g->free(darg);
                free(arg);
                g->free(dy_);
                free(y);
                g->free(dx_);
                free(x);
            }
    }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ---- depthwise convolution ------------------------------------------------------------------- */

DT_TEST(gpu_depthwise_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    double wy = 0, wk = 0, wx = 0;
    for (size_t s = 0; s < NGEO; s++)
        for (int mult = 1; mult <= 2; mult++) {
            dt_nn_win w = conv_win(s);
            size_t nx = in_size(&w), nk = (size_t)w.kh * w.kw * w.c * mult;
            size_t ny = out_pixels(&w) * w.c * mult;
            float *x = gpu_randn(nx, 1, 70 + s), *k = gpu_randn(nk, 0.5f, 71 + s);
            float *gy = gpu_randn(ny, 1, 72 + s);
            float *dx_ = gpu_up(g, x, nx), *dk_ = gpu_up(g, k, nk), *dgy = gpu_up(g, gy, ny);
            float *y = nans(ny), *dy_ = gpu_poison(g, ny);
            c->dw_fwd(&w, mult, x, k, y);
            g->dw_fwd(&w, mult, dx_, dk_, dy_);
            double e = close_to(g, dy_, y, ny, 1e-5, "dw_fwd", (int)s);
            wy = e > wy ? e : wy;
            same_floats(g, dy_, y, ny, "dw_fwd bits", (int)s);
            for (int acc = 0; acc < 2; acc++) {
                float *dk = nans(nk), *ddk = gpu_poison(g, nk);
                float *dx = acc ? gpu_randn(nx, 1, 73 + s) : nans(nx), *ddx = gpu_up(g, dx, nx);
                c->dw_bwd(&w, mult, x, k, gy, dk, dx, acc);
                g->dw_bwd(&w, mult, dx_, dk_, dgy, ddk, ddx, acc);
                e = close_to(g, ddk, dk, nk, 1e-4, "dw_bwd dk", (int)s);
                wk = e > wk ? e : wk;
                e = close_to(g, ddx, dx, nx, 1e-5, "dw_bwd dx", (int)s);
                wx = e > wx ? e : wx;
                same_floats(g, ddx, dx, nx, "dw_bwd dx bits", (int)s);
                if (!acc) {
                    /* dk alone, twice: the same bits (a fixed two-stage sum) */
                    float *first = gpu_down(g, ddk, nk);
                    g->dw_bwd(&w, mult, dx_, dk_, dgy, ddk, NULL, false);
                    same_bytes(g, ddk, first, nk * sizeof(float), "dw_bwd dk rerun", (int)s);
                    free(first);
                    /* dx alone (dk NULL) into a fresh NaN buffer */
                    float *again = gpu_poison(g, nx);
                    g->dw_bwd(&w, mult, dx_, dk_, dgy, NULL, again, false);
                    close_to(g, again, dx, nx, 1e-5, "dw_bwd dx only", (int)s);
                    g->free(again);
                }
                g->free(ddx);
                g->free(ddk);
                free(dx);
                free(dk);
            }
            g->free(dy_);
            free(y);
            g->free(dx_);
            g->free(dk_);
            g->free(dgy);
            free(x);
            free(k);
            free(gy);
        }
    printf("depthwise worst relative L2: y %.3g, dk %.3g, dx %.3g\n", wy, wk, wx);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ---- Maximum merge --------------------------------------------------------------------------- */

DT_TEST(gpu_maximum_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const size_t sizes[] = {0, 1, 1000, 70001};
    static const int ks[] = {1, 2, 3, 5};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
            size_t n = sizes[s];
            int k = ks[t];
            float *xs[5], *dxs[5];
            for (int i = 0; i < k; i++) {
                xs[i] = gpu_randn(n, 1, 80 + 10 * s + i);
                for (size_t j = 0; j < n; j++) /* few distinct values: ties between inputs */
                    xs[i][j] = roundf(xs[i][j]);
                dxs[i] = gpu_up(g, xs[i], n);
            }
            float *y = nans(n), *dy_ = gpu_poison(g, n);
            uint8_t *arg = malloc(n ? n : 1), *darg;
            memset(arg, 0xee, n ? n : 1);
            darg = gpu_up_bytes(g, arg, n);
            c->max_fwd(n, k, (const float *const *)xs, y, arg);
            g->max_fwd(n, k, (const float *const *)dxs, dy_, darg);
            same_bytes(g, dy_, y, n * sizeof(float), "max_fwd", (int)s);
            same_bytes(g, darg, arg, n, "max_fwd arg", (int)s);
            float *gy = gpu_randn(n, 1, 90 + s), *dgy = gpu_up(g, gy, n);
            for (int i = 0; i < k; i++)
                for (int acc = 0; acc < 2; acc++) {
                    float *dx = acc ? gpu_randn(n, 1, 95 + s) : nans(n), *ddx = gpu_up(g, dx, n);
                    c->max_bwd(n, i, arg, gy, dx, acc);
                    g->max_bwd(n, i, darg, dgy, ddx, acc);
                    close_to(g, ddx, dx, n, 1e-5, "max_bwd", (int)s);
                    g->free(ddx);
                    free(dx);
                }
            g->free(dgy);
            free(gy);
            g->free(darg);
            free(arg);
            g->free(dy_);
            free(y);
            for (int i = 0; i < k; i++) {
                g->free(dxs[i]);
                free(xs[i]);
            }
        }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}
