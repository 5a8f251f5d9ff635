/* ops_cpu_vision.c - CPU kernels of the vision layers that are not a GEMM: the depthwise
 * convolution (direct loops; a depthwise conv does kh*kw multiply-adds per output, too few to
 * pay for im2col) and the Maximum merge. Contracts are those of nn/ops.h. */
#include "nn/ops_cpu.h"

/* Compiled at O3 with restrict pointers so that the channel loops vectorize (see ops_cpu.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <stdlib.h>
#include <string.h>

/* The depthwise kernels with depth_multiplier 1 (MobileNet's) are compiled twice, for AVX2 and
 * the SSE2 baseline, picked at load time. Without FMA: a multiply then an add, in the order of
 * the scalar loops, so every machine gets the same bits. */
typedef float dt_v8f __attribute__((vector_size(32)));
typedef float dt_v4f __attribute__((vector_size(16)));
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DT_CLONES
#endif

/* Windows of at most this many taps take the vector path (MobileNet's are 3x3). */
#define DW_MAX_TAPS 64

static int dil(int d)
{
    return d > 0 ? d : 1;
}

/* Calls body(yo, xr, kr) for every output pixel and every window tap inside the image:
 * yo is the output pixel's c*mult row, xr the input pixel's c row, kr the tap's c*mult kernel
 * row. Padded taps are skipped (they read zeros). */
#define DW_LOOP(g, mult, ...)                                                                      \
    do {                                                                                           \
        int cm_ = (g)->c * (mult), dh_ = dil((g)->dil_h), dw_ = dil((g)->dil_w);                   \
        for (int s_ = 0; s_ < (g)->n; s_++)                                                        \
            for (int oy_ = 0; oy_ < (g)->oh; oy_++)                                                \
                for (int ox_ = 0; ox_ < (g)->ow; ox_++) {                                          \
                    size_t yo = (((size_t)s_ * (g)->oh + oy_) * (g)->ow + ox_) * cm_;              \
                    for (int ky_ = 0; ky_ < (g)->kh; ky_++) {                                      \
                        int iy_ = oy_ * (g)->sh - (g)->pt + ky_ * dh_;                             \
                        if (iy_ < 0 || iy_ >= (g)->h)                                              \
                            continue;                                                              \
                        for (int kx_ = 0; kx_ < (g)->kw; kx_++) {                                  \
                            int ix_ = ox_ * (g)->sw - (g)->pl + kx_ * dw_;                         \
                            if (ix_ < 0 || ix_ >= (g)->w)                                          \
                                continue;                                                          \
                            size_t xr = (((size_t)s_ * (g)->h + iy_) * (g)->w + ix_) * (g)->c;     \
                            size_t kr = ((size_t)ky_ * (g)->kw + kx_) * cm_;                       \
                            __VA_ARGS__;                                                           \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
    } while (0)

/* A pixel's taps are the product of its row's and its column's: per output (or input) row and
 * column, the valid kernel positions (tap) and the input (or output) row or column each reaches
 * (pos) are listed once per call instead of per pixel with its bounds checks and divisions. */
typedef struct {
    int n, pos[DW_MAX_TAPS], tap[DW_MAX_TAPS];
} dw_list;

typedef struct {
    dw_list *row, *col; /* per output row / column (taps), per input one (sources) */
    size_t base, width; /* the offset tables' plane: (s base + row) width + col */
    int kw, c;
} dw_tab;

/* Kernel positions 0..k-1 of output o: input i = o s - p + kk d inside [0, n), in order. */
static void axis_taps(int o, int s, int p, int d, int k, int n, dw_list *l)
{
    l->n = 0;
    for (int kk = 0; kk < k; kk++) {
        int i = o * s - p + kk * d;
        if (i >= 0 && i < n)
            l->pos[l->n] = i, l->tap[l->n++] = kk;
    }
}

/* The outputs that input i feeds: kernel positions descending (outputs ascending). */
static void axis_sources(int i, int s, int p, int d, int k, int n_out, dw_list *l)
{
    l->n = 0;
    for (int kk = k - 1; kk >= 0; kk--) {
        int o = i + p - kk * d;
        if (o < 0 || o % s || o / s >= n_out)
            continue;
        l->pos[l->n] = o / s, l->tap[l->n++] = kk;
    }
}

/* sources: per input pixel (the adjoint's lists), else per output pixel */
static void dw_tab_init(const dt_nn_win *g, bool sources, dw_tab *t)
{
    int nr = sources ? g->h : g->oh, nc = sources ? g->w : g->ow;
    t->row = malloc(((size_t)nr + nc) * sizeof(dw_list));
    if (!t->row) /* a few KiB; treat as the broken invariant it is */
        abort();
    t->col = t->row + nr;
    int dh = dil(g->dil_h), dw = dil(g->dil_w);
    for (int r = 0; r < nr; r++)
        if (sources)
            axis_sources(r, g->sh, g->pt, dh, g->kh, g->oh, &t->row[r]);
        else
            axis_taps(r, g->sh, g->pt, dh, g->kh, g->h, &t->row[r]);
    for (int q = 0; q < nc; q++)
        if (sources)
            axis_sources(q, g->sw, g->pl, dw, g->kw, g->ow, &t->col[q]);
        else
            axis_taps(q, g->sw, g->pl, dw, g->kw, g->w, &t->col[q]);
    t->base = (size_t)(sources ? g->oh : g->h);
    t->width = (size_t)(sources ? g->ow : g->w);
    t->kw = g->kw;
    t->c = g->c;
}

/* Pixel (r, q) of sample s: the offsets of its taps' pixels (xo: in x for taps, in dy for
 * sources) and of the taps in the kernel (ko), rows outer, columns inner, in the lists' order:
 * window order for taps, reverse window order (outputs ascending) for sources. Returns their
 * count. */
static int dw_taps(const dw_tab *t, int s, int r, int q, size_t *xo, size_t *ko)
{
    const dw_list *rl = &t->row[r], *cl = &t->col[q];
    int nt = 0;
    for (int a = 0; a < rl->n; a++) {
        size_t rb = ((size_t)s * t->base + rl->pos[a]) * t->width;
        size_t kb = (size_t)rl->tap[a] * t->kw;
        for (int b = 0; b < cl->n; b++) {
            xo[nt] = (rb + cl->pos[b]) * t->c;
            ko[nt++] = (kb + cl->tap[b]) * t->c;
        }
    }
    return nt;
}

/* mult 1: each output pixel's channels summed over its taps in registers, a vector of
 * channels at a time; per channel 0 + tap 0 + tap 1 + ..., the order of the general loop. */
DT_CLONES static void dw_fwd1(const dt_nn_win *gp, const float *restrict x, const float *restrict k,
                              float *restrict y)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    size_t xo[DW_MAX_TAPS], ko[DW_MAX_TAPS];
    dw_tab tab;
    dw_tab_init(&g, false, &tab);
    for (int s = 0; s < g.n; s++)
        for (int oy = 0; oy < g.oh; oy++)
            for (int ox = 0; ox < g.ow; ox++) {
                int nt = dw_taps(&tab, s, oy, ox, xo, ko);
                float *yp = y + (((size_t)s * g.oh + oy) * g.ow + ox) * c;
                int ci = 0;
                for (; ci + 8 <= c; ci += 8) {
                    dt_v8f a = {0}, xv, kv;
                    for (int t = 0; t < nt; t++) {
                        memcpy(&xv, x + xo[t] + ci, sizeof xv);
                        memcpy(&kv, k + ko[t] + ci, sizeof kv);
                        a += xv * kv;
                    }
                    memcpy(yp + ci, &a, sizeof a);
                }
                for (; ci + 4 <= c; ci += 4) {
                    dt_v4f a = {0}, xv, kv;
                    for (int t = 0; t < nt; t++) {
                        memcpy(&xv, x + xo[t] + ci, sizeof xv);
                        memcpy(&kv, k + ko[t] + ci, sizeof kv);
                        a += xv * kv;
                    }
                    memcpy(yp + ci, &a, sizeof a);
                }
                for (; ci < c; ci++) {
                    float a = 0;
                    for (int t = 0; t < nt; t++)
                        a += x[xo[t] + ci] * k[ko[t] + ci];
                    yp[ci] = a;
                }
            }
    free(tab.row);
}

/* mult 1, the kernel's gradient: per output pixel and tap, dk += x dy over a vector of
 * channels, in the general loop's order (so the same bits). dk is zeroed first. */
DT_CLONES static void dw_dk1(const dt_nn_win *gp, const float *restrict x, const float *restrict dy,
                             float *restrict dk)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    size_t xo[DW_MAX_TAPS], ko[DW_MAX_TAPS];
    dw_tab tab;
    dw_tab_init(&g, false, &tab);
    for (int s = 0; s < g.n; s++)
        for (int oy = 0; oy < g.oh; oy++)
            for (int ox = 0; ox < g.ow; ox++) {
                int nt = dw_taps(&tab, s, oy, ox, xo, ko);
                const float *dp = dy + (((size_t)s * g.oh + oy) * g.ow + ox) * c;
                for (int t = 0; t < nt; t++) {
                    const float *xp = x + xo[t];
                    float *dkp = dk + ko[t];
                    int ci = 0;
                    for (; ci + 8 <= c; ci += 8) {
                        dt_v8f d, v, w;
                        memcpy(&d, dp + ci, sizeof d);
                        memcpy(&v, xp + ci, sizeof v);
                        memcpy(&w, dkp + ci, sizeof w);
                        w += v * d;
                        memcpy(dkp + ci, &w, sizeof w);
                    }
                    for (; ci < c; ci++)
                        dkp[ci] += xp[ci] * dp[ci];
                }
            }
    free(tab.row);
}

/* mult 1, dx (=/+=) the gradient gathered per input pixel in registers: the same additions in
 * the same order as scattering output by output into a zeroed (or the given) dx, without
 * clearing dx first or reading and writing it once per tap. */
DT_CLONES static void dw_dx1(const dt_nn_win *gp, const float *restrict k, const float *restrict dy,
                             float *restrict dx, bool acc)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    size_t yo[DW_MAX_TAPS], ko[DW_MAX_TAPS];
    dw_tab tab;
    dw_tab_init(&g, true, &tab);
    for (int s = 0; s < g.n; s++)
        for (int iy = 0; iy < g.h; iy++)
            for (int ix = 0; ix < g.w; ix++) {
                int nt = dw_taps(&tab, s, iy, ix, yo, ko);
                float *xp = dx + (((size_t)s * g.h + iy) * g.w + ix) * c;
                int ci = 0;
                for (; ci + 8 <= c; ci += 8) {
                    dt_v8f a = {0}, dv, kv;
                    if (acc)
                        memcpy(&a, xp + ci, sizeof a);
                    for (int t = 0; t < nt; t++) {
                        memcpy(&dv, dy + yo[t] + ci, sizeof dv);
                        memcpy(&kv, k + ko[t] + ci, sizeof kv);
                        a += dv * kv;
                    }
                    memcpy(xp + ci, &a, sizeof a);
                }
                for (; ci < c; ci++) {
                    float a = acc ? xp[ci] : 0.0f;
                    for (int t = 0; t < nt; t++)
                        a += dy[yo[t] + ci] * k[ko[t] + ci];
                    xp[ci] = a;
                }
            }
    free(tab.row);
}

void dt__nn_cpu_dw_fwd(const dt_nn_win *g, int mult, const float *x, const float *k, float *y)
{
    if (mult == 1 && g->kh * g->kw <= DW_MAX_TAPS) {
        dw_fwd1(g, x, k, y);
        return;
    }
    size_t total = (size_t)g->n * g->oh * g->ow * g->c * mult;
    memset(y, 0, total * sizeof(float));
    int c = g->c;
    DW_LOOP(g, mult, {
        const float *xp = x + xr, *kp = k + kr;
        float *yp = y + yo;
        if (mult == 1) {
            for (int ci = 0; ci < c; ci++)
                yp[ci] += xp[ci] * kp[ci];
        } else {
            for (int ci = 0; ci < c; ci++)
                for (int m = 0; m < mult; m++)
                    yp[ci * mult + m] += xp[ci] * kp[ci * mult + m];
        }
    });
}

void dt__nn_cpu_dw_bwd(const dt_nn_win *g, int mult, const float *x, const float *k,
                       const float *dy, float *dk, float *dx, bool acc)
{
    int c = g->c;
    if (dk)
        memset(dk, 0, (size_t)g->kh * g->kw * c * mult * sizeof(float));
    if (mult == 1 && g->kh * g->kw <= DW_MAX_TAPS) {
        if (dk)
            dw_dk1(g, x, dy, dk);
        if (dx)
            dw_dx1(g, k, dy, dx, acc);
        return;
    }
    if (dx && !acc)
        memset(dx, 0, (size_t)g->n * g->h * g->w * c * sizeof(float));
    DW_LOOP(g, mult, {
        const float *dyp = dy + yo, *kp = k + kr, *xp = x + xr;
        for (int ci = 0; ci < c; ci++) {
            float s = 0;
            for (int m = 0; m < mult; m++) {
                float d = dyp[ci * mult + m];
                if (dk)
                    dk[kr + (size_t)ci * mult + m] += xp[ci] * d;
                s += d * kp[ci * mult + m];
            }
            if (dx)
                dx[xr + (size_t)ci] += s;
        }
    });
}

void dt__nn_cpu_max_fwd(size_t n, int k, const float *const *xs, float *y, uint8_t *arg)
{
    memcpy(y, xs[0], n * sizeof(float));
    memset(arg, 0, n);
    for (int i = 1; i < k; i++)
        for (size_t j = 0; j < n; j++)
            if (xs[i][j] > y[j]) { /* strictly: ties stay with the earlier input */
                y[j] = xs[i][j];
                arg[j] = (uint8_t)i;
            }
}

void dt__nn_cpu_max_bwd(size_t n, int i, const uint8_t *arg, const float *dy, float *dx, bool acc)
{
    for (size_t j = 0; j < n; j++) {
        float v = arg[j] == i ? dy[j] : 0.0f;
        dx[j] = acc ? dx[j] + v : v;
    }
}
