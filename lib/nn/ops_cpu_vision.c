/* ops_cpu_vision.c - CPU kernels of the vision layers that are not a GEMM: the depthwise
 * convolution (direct loops; a depthwise conv does kh*kw multiply-adds per output, too few to
 * pay for im2col) and the Maximum merge. Contracts are those of nn/ops.h. */
#include "nn/ops_cpu.h"

/* Compiled at O3 with restrict pointers so that the channel loops vectorize (see ops_cpu.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

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

/* The taps of output pixel (oy, ox) of sample s that fall inside the image: the input pixel's
 * offset in x (xo) and the tap's in the kernel (ko), in window order. Returns their count. */
static int dw_taps(const dt_nn_win *g, int s, int oy, int ox, size_t *xo, size_t *ko)
{
    int nt = 0, dh = dil(g->dil_h), dw = dil(g->dil_w);
    for (int ky = 0; ky < g->kh; ky++) {
        int iy = oy * g->sh - g->pt + ky * dh;
        if (iy < 0 || iy >= g->h)
            continue;
        for (int kx = 0; kx < g->kw; kx++) {
            int ix = ox * g->sw - g->pl + kx * dw;
            if (ix < 0 || ix >= g->w)
                continue;
            xo[nt] = (((size_t)s * g->h + iy) * g->w + ix) * g->c;
            ko[nt++] = ((size_t)ky * g->kw + kx) * g->c;
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
    for (int s = 0; s < g.n; s++)
        for (int oy = 0; oy < g.oh; oy++)
            for (int ox = 0; ox < g.ow; ox++) {
                int nt = dw_taps(&g, s, oy, ox, xo, ko);
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
}

/* mult 1, the kernel's gradient: per output pixel and tap, dk += x dy over a vector of
 * channels, in the general loop's order (so the same bits). dk is zeroed first. */
DT_CLONES static void dw_dk1(const dt_nn_win *gp, const float *restrict x, const float *restrict dy,
                             float *restrict dk)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    size_t xo[DW_MAX_TAPS], ko[DW_MAX_TAPS];
    for (int s = 0; s < g.n; s++)
        for (int oy = 0; oy < g.oh; oy++)
            for (int ox = 0; ox < g.ow; ox++) {
                int nt = dw_taps(&g, s, oy, ox, xo, ko);
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
}

/* The output pixels that input pixel (iy, ix) of sample s feeds, as offsets in dy (yo) and the
 * taps that reach it (ko), in the order the output-major loop adds them: output rows
 * ascending, so taps in reverse window order. Returns their count. */
static int dw_sources(const dt_nn_win *g, int s, int iy, int ix, size_t *yo, size_t *ko)
{
    int nt = 0, dh = dil(g->dil_h), dw = dil(g->dil_w);
    for (int ky = g->kh - 1; ky >= 0; ky--) {
        int ny = iy + g->pt - ky * dh;
        if (ny < 0 || ny % g->sh || ny / g->sh >= g->oh)
            continue;
        for (int kx = g->kw - 1; kx >= 0; kx--) {
            int nx = ix + g->pl - kx * dw;
            if (nx < 0 || nx % g->sw || nx / g->sw >= g->ow)
                continue;
            yo[nt] = (((size_t)s * g->oh + ny / g->sh) * g->ow + nx / g->sw) * g->c;
            ko[nt++] = ((size_t)ky * g->kw + kx) * g->c;
        }
    }
    return nt;
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
    for (int s = 0; s < g.n; s++)
        for (int iy = 0; iy < g.h; iy++)
            for (int ix = 0; ix < g.w; ix++) {
                int nt = dw_sources(&g, s, iy, ix, yo, ko);
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
