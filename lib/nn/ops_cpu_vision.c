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

/* ---- 3x3 windows (MobileNet's), depth_multiplier 1: per output (or input) row of a sample and
 * per channel block, the nine kernel vectors (or the nine kernel-gradient sums) stay in
 * registers over a run of the row's pixels; a pixel's taps come from its row's and column's
 * masks, their offsets premultiplied, and a pixel with all nine takes them without a test. Each
 * sum still takes its terms in the order of the general kernels below, so the same bits. */

/* One axis position: the kernel positions inside the image (bit kk of m) and the offset, in
 * floats, of the row (or column) each reaches: an output's inputs (taps) or an input's outputs
 * (sources). */
typedef struct {
    unsigned m;
    size_t off[3];
} dw3_ax;

/* The rows' then the columns' axes of a dw_tab of 3-tap lists; free(result) */
static dw3_ax *dw3_axes(const dt_nn_win *g, bool sources, int *nr)
{
    dw_tab t;
    dw_tab_init(g, sources, &t);
    *nr = sources ? g->h : g->oh;
    int n = *nr + (sources ? g->w : g->ow);
    size_t row = (size_t)(sources ? g->ow : g->w) * g->c; /* floats a row of the read tensor */
    dw3_ax *a = malloc((size_t)n * sizeof *a);
    if (!a) /* a few KiB; treat as the broken invariant it is */
        abort();
    for (int i = 0; i < n; i++) {
        const dw_list *l = i < *nr ? &t.row[i] : &t.col[i - *nr];
        a[i].m = 0;
        for (int j = 0; j < 3; j++)
            a[i].off[j] = 0;
        for (int j = 0; j < l->n; j++) {
            a[i].m |= 1u << l->tap[j];
            a[i].off[l->tap[j]] = (size_t)l->pos[j] * (i < *nr ? row : (size_t)g->c);
        }
    }
    free(t.row);
    return a;
}

#define DW3_W(T)     ((int)(sizeof(T) / sizeof(float)))
#define DW3_LD(v, p) memcpy(&(v), (p), sizeof(v))

/* A row is taken this many pixels at a time, every channel block over them before the next
 * pixels, so that the rows they read stay in L1 from one block to the next. */
#define DW3_PX 8

/* y: per output 0 + the valid taps, kernel rows then columns ascending (axis_taps' order) */
#define DW3_FWD(T)                                                                                 \
    for (; ci + DW3_W(T) <= c; ci += DW3_W(T)) {                                                   \
        T kv[9], v;                                                                                \
        for (int t = 0; t < 9; t++)                                                                \
            DW3_LD(kv[t], k + (size_t)t * c + ci);                                                 \
        const float *r0 = xs + ry->off[0] + ci, *r1 = xs + ry->off[1] + ci;                        \
        const float *r2 = xs + ry->off[2] + ci;                                                    \
        for (int ox = o0; ox < o1; ox++) {                                                         \
            const dw3_ax *cx = &cols[ox];                                                          \
            size_t c0 = cx->off[0], c1 = cx->off[1], c2 = cx->off[2];                              \
            T a = {0};                                                                             \
            if (ry->m == 7 && cx->m == 7) {                                                        \
                DW3_LD(v, r0 + c0), a += v * kv[0];                                                \
                DW3_LD(v, r0 + c1), a += v * kv[1];                                                \
                DW3_LD(v, r0 + c2), a += v * kv[2];                                                \
                DW3_LD(v, r1 + c0), a += v * kv[3];                                                \
                DW3_LD(v, r1 + c1), a += v * kv[4];                                                \
                DW3_LD(v, r1 + c2), a += v * kv[5];                                                \
                DW3_LD(v, r2 + c0), a += v * kv[6];                                                \
                DW3_LD(v, r2 + c1), a += v * kv[7];                                                \
                DW3_LD(v, r2 + c2), a += v * kv[8];                                                \
            } else {                                                                               \
                for (int ky = 0; ky < 3; ky++) {                                                   \
                    if (!(ry->m >> ky & 1))                                                        \
                        continue;                                                                  \
                    const float *r = xs + ry->off[ky] + ci;                                        \
                    for (int kx = 0; kx < 3; kx++)                                                 \
                        if (cx->m >> kx & 1)                                                       \
                            DW3_LD(v, r + cx->off[kx]), a += v * kv[ky * 3 + kx];                  \
                }                                                                                  \
            }                                                                                      \
            memcpy(yr + (size_t)ox * c + ci, &a, sizeof a);                                        \
        }                                                                                          \
    }

DT_CLONES static void dw3_fwd(const dt_nn_win *gp, const float *restrict x, const float *restrict k,
                              float *restrict y)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    int nr;
    dw3_ax *rows = dw3_axes(&g, false, &nr), *cols = rows + nr;
    for (int s = 0; s < g.n; s++) {
        const float *xs = x + (size_t)s * g.h * g.w * c;
        for (int oy = 0; oy < g.oh; oy++) {
            const dw3_ax *ry = &rows[oy];
            float *yr = y + ((size_t)s * g.oh + oy) * g.ow * c;
            for (int o0 = 0; o0 < g.ow; o0 += DW3_PX) {
                int o1 = o0 + DW3_PX < g.ow ? o0 + DW3_PX : g.ow, ci = 0;
                DW3_FWD(dt_v8f)
                DW3_FWD(dt_v4f)
                DW3_FWD(float)
            }
        }
    }
    free(rows);
}

/* dk: each tap's sum takes its terms pixel by pixel (rows, then columns ascending) as dw_dk1
 * does, held in a register over a run of pixels */
#define DW3_DK(T)                                                                                  \
    for (; ci + DW3_W(T) <= c; ci += DW3_W(T)) {                                                   \
        T acc[9], v, d;                                                                            \
        for (int t = 0; t < 9; t++)                                                                \
            DW3_LD(acc[t], dk + (size_t)t * c + ci);                                               \
        const float *r0 = xs + ry->off[0] + ci, *r1 = xs + ry->off[1] + ci;                        \
        const float *r2 = xs + ry->off[2] + ci;                                                    \
        for (int ox = o0; ox < o1; ox++) {                                                         \
            const dw3_ax *cx = &cols[ox];                                                          \
            size_t c0 = cx->off[0], c1 = cx->off[1], c2 = cx->off[2];                              \
            DW3_LD(d, dr + (size_t)ox * c + ci);                                                   \
            if (ry->m == 7 && cx->m == 7) {                                                        \
                DW3_LD(v, r0 + c0), acc[0] += v * d;                                               \
                DW3_LD(v, r0 + c1), acc[1] += v * d;                                               \
                DW3_LD(v, r0 + c2), acc[2] += v * d;                                               \
                DW3_LD(v, r1 + c0), acc[3] += v * d;                                               \
                DW3_LD(v, r1 + c1), acc[4] += v * d;                                               \
                DW3_LD(v, r1 + c2), acc[5] += v * d;                                               \
                DW3_LD(v, r2 + c0), acc[6] += v * d;                                               \
                DW3_LD(v, r2 + c1), acc[7] += v * d;                                               \
                DW3_LD(v, r2 + c2), acc[8] += v * d;                                               \
            } else {                                                                               \
                for (int ky = 0; ky < 3; ky++) {                                                   \
                    if (!(ry->m >> ky & 1))                                                        \
                        continue;                                                                  \
                    const float *r = xs + ry->off[ky] + ci;                                        \
                    for (int kx = 0; kx < 3; kx++)                                                 \
                        if (cx->m >> kx & 1)                                                       \
                            DW3_LD(v, r + cx->off[kx]), acc[ky * 3 + kx] += v * d;                 \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int t = 0; t < 9; t++)                                                                \
            memcpy(dk + (size_t)t * c + ci, &acc[t], sizeof(T));                                   \
    }

DT_CLONES static void dw3_dk(const dt_nn_win *gp, const float *restrict x, const float *restrict dy,
                             float *restrict dk)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    int nr;
    dw3_ax *rows = dw3_axes(&g, false, &nr), *cols = rows + nr;
    for (int s = 0; s < g.n; s++) {
        const float *xs = x + (size_t)s * g.h * g.w * c;
        for (int oy = 0; oy < g.oh; oy++) {
            const dw3_ax *ry = &rows[oy];
            const float *dr = dy + ((size_t)s * g.oh + oy) * g.ow * c;
            for (int o0 = 0; o0 < g.ow; o0 += DW3_PX) {
                int o1 = o0 + DW3_PX < g.ow ? o0 + DW3_PX : g.ow, ci = 0;
                DW3_DK(dt_v8f)
                DW3_DK(dt_v4f)
                DW3_DK(float)
            }
        }
    }
    free(rows);
}

/* dx: per input pixel (0 or its dx) + its sources, kernel rows then columns descending
 * (axis_sources' order, outputs ascending), as dw_dx1 */
#define DW3_DX(T)                                                                                  \
    for (; ci + DW3_W(T) <= c; ci += DW3_W(T)) {                                                   \
        T kv[9], v;                                                                                \
        for (int t = 0; t < 9; t++)                                                                \
            DW3_LD(kv[t], k + (size_t)t * c + ci);                                                 \
        const float *r0 = ds + ry->off[0] + ci, *r1 = ds + ry->off[1] + ci;                        \
        const float *r2 = ds + ry->off[2] + ci;                                                    \
        for (int ix = o0; ix < o1; ix++) {                                                         \
            const dw3_ax *cx = &cols[ix];                                                          \
            size_t c0 = cx->off[0], c1 = cx->off[1], c2 = cx->off[2];                              \
            float *xp = xr + (size_t)ix * c + ci;                                                  \
            T a = {0};                                                                             \
            if (acc)                                                                               \
                DW3_LD(a, xp);                                                                     \
            if (ry->m == 7 && cx->m == 7) {                                                        \
                DW3_LD(v, r2 + c2), a += v * kv[8];                                                \
                DW3_LD(v, r2 + c1), a += v * kv[7];                                                \
                DW3_LD(v, r2 + c0), a += v * kv[6];                                                \
                DW3_LD(v, r1 + c2), a += v * kv[5];                                                \
                DW3_LD(v, r1 + c1), a += v * kv[4];                                                \
                DW3_LD(v, r1 + c0), a += v * kv[3];                                                \
                DW3_LD(v, r0 + c2), a += v * kv[2];                                                \
                DW3_LD(v, r0 + c1), a += v * kv[1];                                                \
                DW3_LD(v, r0 + c0), a += v * kv[0];                                                \
            } else {                                                                               \
                for (int ky = 2; ky >= 0; ky--) {                                                  \
                    if (!(ry->m >> ky & 1))                                                        \
                        continue;                                                                  \
                    const float *r = ds + ry->off[ky] + ci;                                        \
                    for (int kx = 2; kx >= 0; kx--)                                                \
                        if (cx->m >> kx & 1)                                                       \
                            DW3_LD(v, r + cx->off[kx]), a += v * kv[ky * 3 + kx];                  \
                }                                                                                  \
            }                                                                                      \
            memcpy(xp, &a, sizeof a);                                                              \
        }                                                                                          \
    }

DT_CLONES static void dw3_dx(const dt_nn_win *gp, const float *restrict k, const float *restrict dy,
                             float *restrict dx, bool acc)
{
    const dt_nn_win g = *gp;
    const int c = g.c;
    int nr;
    dw3_ax *rows = dw3_axes(&g, true, &nr), *cols = rows + nr;
    for (int s = 0; s < g.n; s++) {
        const float *ds = dy + (size_t)s * g.oh * g.ow * c;
        for (int iy = 0; iy < g.h; iy++) {
            const dw3_ax *ry = &rows[iy];
            float *xr = dx + ((size_t)s * g.h + iy) * g.w * c;
            for (int o0 = 0; o0 < g.w; o0 += DW3_PX) {
                int o1 = o0 + DW3_PX < g.w ? o0 + DW3_PX : g.w, ci = 0;
                DW3_DX(dt_v8f)
                DW3_DX(dt_v4f)
                DW3_DX(float)
            }
        }
    }
    free(rows);
}

/* Where the 3x3 kernels win (measured on MobileNetV2's layers, 1 thread): with up to 32
 * channels (MobileNetV2's first depthwise conv, 48x48 at 96x96: 1.9-2.4 -> 1.1-1.2 ms per kernel
 * for a batch of 32) the general kernels spend more on listing each pixel's taps than on its
 * few channel blocks. With more channels the general kernels are faster (144 channels at 24x24:
 * 1.5 against 2.3 ms), and so they are for dx at strides over 1, whose masks alternate from
 * pixel to pixel (a branch mispredicted every pixel). */
static bool dw3(const dt_nn_win *g, int mult, bool dx)
{
    return mult == 1 && g->kh == 3 && g->kw == 3 && g->c <= 32 &&
           (!dx || (g->sh == 1 && g->sw == 1));
}

/* A pixel with NT taps (9: an inner pixel of a 3x3 window) is summed with the tap loop unrolled
 * and its pointers taken once per pixel instead of reloaded from xo/ko for every channel block
 * (the loop is bound by its loads; dx and dk gained nothing from the same). The same terms in
 * the same order: a = a + p[t][ci..] q[t][ci..] for 8 channels, t ascending. */
#define DW_SUM8(NT, a, p, q, ci)                                                                   \
    do {                                                                                           \
        dt_v8f u_, v_;                                                                             \
        for (int t_ = 0; t_ < (NT); t_++) {                                                        \
            memcpy(&u_, (p)[t_] + (ci), sizeof u_);                                                \
            memcpy(&v_, (q)[t_] + (ci), sizeof v_);                                                \
            (a) += u_ * v_;                                                                        \
        }                                                                                          \
    } while (0)

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
                if (nt == 9) {
                    const float *xp[9], *kp[9];
                    for (int t = 0; t < 9; t++)
                        xp[t] = x + xo[t], kp[t] = k + ko[t];
                    for (; ci + 8 <= c; ci += 8) {
                        dt_v8f a = {0};
                        DW_SUM8(9, a, xp, kp, ci);
                        memcpy(yp + ci, &a, sizeof a);
                    }
                }
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
    if (dw3(g, mult, false)) {
        dw3_fwd(g, x, k, y);
        return;
    }
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
        if (dk && dw3(g, mult, false))
            dw3_dk(g, x, dy, dk);
        else if (dk)
            dw_dk1(g, x, dy, dk);
        if (dx && dw3(g, mult, true))
            dw3_dx(g, k, dy, dx, acc);
        else if (dx)
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
