/* ops_cpu_image.c - CPU kernels of the image preprocessing layers (layers_augment.c): flips,
 * brightness/contrast with Keras's clip, tf.image.resize (bilinear, nearest) of a window, and
 * TF's projective transform with its fill modes, each with its transpose. Images are NHWC; the
 * contracts are those of the img_* slots in nn/ops.h. */
#include "nn/ops_cpu.h"

#include <float.h>
#include <math.h>
#include <string.h>

void dt__nn_cpu_img_flip(int n, int h, int w, int c, const int32_t *flags, const float *x, float *y,
                         bool acc)
{
    size_t row = (size_t)w * (size_t)c, img = (size_t)h * row;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * img;
        float *yi = y + (size_t)i * img;
        bool lr = flags[i] & 1, ud = flags[i] & 2;
        for (int r = 0; r < h; r++) {
            const float *xr = xi + (size_t)(ud ? h - 1 - r : r) * row;
            float *yr = yi + (size_t)r * row;
            for (int col = 0; col < w; col++) {
                const float *xp = xr + (size_t)(lr ? w - 1 - col : col) * (size_t)c;
                float *yp = yr + (size_t)col * (size_t)c;
                for (int k = 0; k < c; k++)
                    yp[k] = acc ? yp[k] + xp[k] : xp[k];
            }
        }
    }
}

/* The mean of image i's channel k over its hw pixels, summed in double: the pixel order is
 * fixed, so the result is too. */
static float channel_mean(const float *xi, int hw, int c, int k)
{
    double s = 0;
    for (int p = 0; p < hw; p++)
        s += xi[(size_t)p * (size_t)c + (size_t)k];
    return (float)(s / hw);
}

void dt__nn_cpu_img_adjust(int n, int hw, int c, const float *f, const float *d, float lo, float hi,
                           const float *x, float *y)
{
    size_t img = (size_t)hw * (size_t)c;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * img;
        float *yi = y + (size_t)i * img;
        float fi = f ? f[i] : 1.0f, di = d ? d[i] : 0.0f;
        for (int k = 0; k < c; k++) {
            float m = f ? channel_mean(xi, hw, c, k) : 0.0f;
            for (int p = 0; p < hw; p++) {
                size_t j = (size_t)p * (size_t)c + (size_t)k;
                float v = f ? (xi[j] - m) * fi + m + di : xi[j] + di;
                yi[j] = fminf(fmaxf(v, lo), hi);
            }
        }
    }
}

void dt__nn_cpu_img_adjust_bwd(int n, int hw, int c, const float *f, const float *d, float lo,
                               float hi, const float *x, const float *dy, float *dx, bool acc)
{
    size_t img = (size_t)hw * (size_t)c;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * img, *gi = dy + (size_t)i * img;
        float *oi = dx + (size_t)i * img;
        float fi = f ? f[i] : 1.0f, di = d ? d[i] : 0.0f;
        for (int k = 0; k < c; k++) {
            float m = f ? channel_mean(xi, hw, c, k) : 0.0f;
            /* g' = dy masked by the clip; dx_p = f g'_p + (1 - f) mean(g') because every pixel
             * also moves the channel mean (brightness: f = 1, the second term vanishes). */
            double gs = 0;
            for (int p = 0; p < hw; p++) {
                size_t j = (size_t)p * (size_t)c + (size_t)k;
                float v = f ? (xi[j] - m) * fi + m + di : xi[j] + di;
                gs += (v >= lo && v <= hi) ? gi[j] : 0.0f;
            }
            float gm = (float)(gs / hw) * (1.0f - fi);
            for (int p = 0; p < hw; p++) {
                size_t j = (size_t)p * (size_t)c + (size_t)k;
                float v = f ? (xi[j] - m) * fi + m + di : xi[j] + di;
                float g = ((v >= lo && v <= hi) ? gi[j] : 0.0f) * fi + (f ? gm : 0.0f);
                oi[j] = acc ? oi[j] + g : g;
            }
        }
    }
}

/* ---- resize ------------------------------------------------------------------------------ */

static inline int bound(int v, int n)
{
    return v < 0 ? 0 : v > n - 1 ? n - 1 : v;
}

/* One output coordinate's taps in a window of `in` cells starting at `off`, as TF's
 * ResizeBilinear (half_pixel_centers) and ResizeNearestNeighbor compute them: the scale is the
 * float32 in / out, bilinear reads lo and hi with weight t on hi, nearest reads lo. */
typedef struct tap {
    int lo, hi;
    float t;
} tap;

static tap tap_at(int i, int in, int out, int off, bool nearest)
{
    float scale = (float)in / (float)out;
    if (nearest) {
        int j = bound((int)floorf(((float)i + 0.5f) * scale), in) + off;
        return (tap){j, j, 0.0f};
    }
    float src = ((float)i + 0.5f) * scale - 0.5f, fl = floorf(src);
    return (tap){bound((int)fl, in) + off, bound((int)ceilf(src), in) + off, src - fl};
}

/* Area and bicubic, as lib/data/resize.c computes them (TF's ResizeArea and ResizeBicubic),
 * for output coordinate i of an axis of `in` window cells at `off`. Both are separable: output
 * = (sum over row taps of (sum over column taps of x * wx) * wy) * post, rows across first as
 * TF does; the backward scatters dy * post * wy * wx to the same cells, the exact transpose. */
typedef struct sep_tap {
    int64_t start, end; /* area: window cells [start, end) */
    float a, b, scale;  /* area: the output cell's interval [a, b) in window cells */
    int idx[4];         /* bicubic: the four cells (clamped; a dropped tap has weight 0) */
    float w[4];
} sep_tap;

/* TF's ResizeArea coverage of cell v by [a, b) (scale = b - a). */
static float area_cov(int64_t v, float a, float b, float scale)
{
    if ((float)v < a)
        return (float)(v + 1) > b ? scale : (float)(v + 1) - a;
    return (float)(v + 1) > b ? b - (float)v : 1.0f;
}

/* TF's bicubic coefficient table entries (kTableSize 1024, a = -0.5), computed on demand. */
static float keys_near(int i)
{
    const double a = -0.5;
    float x = (float)(i * 1.0 / 1024);
    return (float)(((a + 2) * x - (a + 3)) * x * x + 1);
}

static float keys_far(int i)
{
    const double a = -0.5;
    float x = (float)(i * 1.0 / 1024) + 1.0f;
    return (float)(((a * x - 5 * a) * x + 8 * a) * x - 4 * a);
}

static sep_tap sep_at(int i, int in, int out, dt_nn_interp m)
{
    sep_tap t = {0};
    float scale = (float)in / (float)out;
    if (m == DT_NN_INTERP_AREA) {
        t.scale = scale;
        t.a = (float)i * scale;
        t.b = (float)(i + 1) * scale;
        t.start = (int64_t)floorf(t.a);
        t.end = (int64_t)ceilf(t.b);
        return t;
    }
    float src = ((float)i + 0.5f) * scale - 0.5f;
    int64_t loc = (int64_t)floorf(src);
    int off = (int)lrintf((src - (float)loc) * 1024);
    float w[4] = {keys_far(off), keys_near(off), keys_near(1024 - off), keys_far(1024 - off)};
    float sum = 0;
    for (int k = 0; k < 4; k++) {
        int64_t j = loc - 1 + k;
        t.idx[k] = j < 0 ? 0 : j > in - 1 ? in - 1 : (int)j;
        t.w[k] = t.idx[k] == j ? w[k] : 0.0f; /* outside the image: dropped */
        sum += t.w[k];
    }
    if (fabsf(sum) >= 1000.0f * FLT_MIN)
        for (int k = 0; k < 4; k++)
            t.w[k] *= 1.0f / sum;
    return t;
}

/* Tap k of an axis: its cell in the window and its weight. Area: k in [start, end); bicubic:
 * k in [0, 4). */
static inline int sep_n(const sep_tap *t, dt_nn_interp m)
{
    return m == DT_NN_INTERP_AREA ? (int)(t->end - t->start) : 4;
}

static inline int sep_cell(const sep_tap *t, int k, int in, dt_nn_interp m, float *w)
{
    if (m != DT_NN_INTERP_AREA) {
        *w = t->w[k];
        return t->idx[k];
    }
    int64_t v = t->start + k;
    *w = area_cov(v, t->a, t->b, t->scale);
    return bound((int)(v < in ? v : in - 1), in);
}

static void resize_sep(const dt_nn_resize *g, const float *x, float *y)
{
    dt_nn_interp m = g->interp;
    size_t c = (size_t)g->c, row = (size_t)g->w * c, img = (size_t)g->h * row;
    float post = 1.0f;
    if (m == DT_NN_INTERP_AREA) /* TF: 1 / (height_scale * width_scale), in float */
        post = (float)(1.0 / (((float)g->wh / (float)g->oh) * ((float)g->ww / (float)g->ow)));
    for (int i = 0; i < g->n; i++) {
        const float *xi = x + (size_t)i * img;
        for (int oy = 0; oy < g->oh; oy++) {
            sep_tap ty = sep_at(oy, g->wh, g->oh, m);
            for (int ox = 0; ox < g->ow; ox++) {
                sep_tap tx = sep_at(ox, g->ww, g->ow, m);
                for (size_t k = 0; k < c; k++) {
                    float sum = 0;
                    for (int a = 0; a < sep_n(&ty, m); a++) {
                        float wy;
                        int r = sep_cell(&ty, a, g->wh, m, &wy) + g->y0;
                        const float *xr = xi + (size_t)r * row;
                        float acc = 0;
                        for (int b = 0; b < sep_n(&tx, m); b++) {
                            float wx;
                            int col = sep_cell(&tx, b, g->ww, m, &wx) + g->x0;
                            acc += xr[(size_t)col * c + k] * wx;
                        }
                        sum += acc * wy;
                    }
                    *y++ = sum * post;
                }
            }
        }
    }
}

static void resize_sep_bwd(const dt_nn_resize *g, const float *dy, float *dx)
{
    dt_nn_interp m = g->interp;
    size_t c = (size_t)g->c, row = (size_t)g->w * c, img = (size_t)g->h * row;
    float post = 1.0f;
    if (m == DT_NN_INTERP_AREA)
        post = (float)(1.0 / (((float)g->wh / (float)g->oh) * ((float)g->ww / (float)g->ow)));
    for (int i = 0; i < g->n; i++) {
        float *xi = dx + (size_t)i * img;
        for (int oy = 0; oy < g->oh; oy++) {
            sep_tap ty = sep_at(oy, g->wh, g->oh, m);
            for (int ox = 0; ox < g->ow; ox++) {
                sep_tap tx = sep_at(ox, g->ww, g->ow, m);
                for (size_t k = 0; k < c; k++) {
                    float v = *dy++ * post;
                    for (int a = 0; a < sep_n(&ty, m); a++) {
                        float wy;
                        int r = sep_cell(&ty, a, g->wh, m, &wy) + g->y0;
                        float *xr = xi + (size_t)r * row;
                        float vy = v * wy;
                        for (int b = 0; b < sep_n(&tx, m); b++) {
                            float wx;
                            int col = sep_cell(&tx, b, g->ww, m, &wx) + g->x0;
                            xr[(size_t)col * c + k] += vy * wx;
                        }
                    }
                }
            }
        }
    }
}

void dt__nn_cpu_img_resize(const dt_nn_resize *g, const float *x, float *y)
{
    if (g->interp == DT_NN_INTERP_AREA || g->interp == DT_NN_INTERP_BICUBIC) {
        if (g->wh != g->oh || g->ww != g->ow) {
            resize_sep(g, x, y);
            return;
        }
        /* the same size: every method is the identity (TF's too), as bilinear computes it */
    }
    bool nearest = g->interp == DT_NN_INTERP_NEAREST;
    size_t c = (size_t)g->c, row = (size_t)g->w * c, img = (size_t)g->h * row;
    for (int i = 0; i < g->n; i++) {
        const float *xi = x + (size_t)i * img;
        for (int oy = 0; oy < g->oh; oy++) {
            tap ty = tap_at(oy, g->wh, g->oh, g->y0, nearest);
            const float *top = xi + (size_t)ty.lo * row, *bot = xi + (size_t)ty.hi * row;
            for (int ox = 0; ox < g->ow; ox++) {
                tap tx = tap_at(ox, g->ww, g->ow, g->x0, nearest);
                size_t l = (size_t)tx.lo * c, r = (size_t)tx.hi * c;
                for (size_t k = 0; k < c; k++) {
                    /* across, then down, in TF's order of operations */
                    float t = top[l + k] + (top[r + k] - top[l + k]) * tx.t;
                    float b = bot[l + k] + (bot[r + k] - bot[l + k]) * tx.t;
                    *y++ = t + (b - t) * ty.t;
                }
            }
        }
    }
}

void dt__nn_cpu_img_resize_bwd(const dt_nn_resize *g, const float *dy, float *dx, bool acc)
{
    size_t c = (size_t)g->c, row = (size_t)g->w * c, img = (size_t)g->h * row;
    if (!acc)
        memset(dx, 0, (size_t)g->n * img * sizeof(float));
    if ((g->interp == DT_NN_INTERP_AREA || g->interp == DT_NN_INTERP_BICUBIC) &&
        (g->wh != g->oh || g->ww != g->ow)) {
        resize_sep_bwd(g, dy, dx);
        return;
    }
    bool nearest = g->interp == DT_NN_INTERP_NEAREST;
    /* The forward's weights, scattered in output order: the order is fixed, so the sums are. */
    for (int i = 0; i < g->n; i++) {
        float *xi = dx + (size_t)i * img;
        for (int oy = 0; oy < g->oh; oy++) {
            tap ty = tap_at(oy, g->wh, g->oh, g->y0, nearest);
            float *top = xi + (size_t)ty.lo * row, *bot = xi + (size_t)ty.hi * row;
            for (int ox = 0; ox < g->ow; ox++) {
                tap tx = tap_at(ox, g->ww, g->ow, g->x0, nearest);
                size_t l = (size_t)tx.lo * c, r = (size_t)tx.hi * c;
                for (size_t k = 0; k < c; k++) {
                    float v = *dy++;
                    float vt = v * (1.0f - ty.t), vb = v * ty.t;
                    top[l + k] += vt * (1.0f - tx.t);
                    top[r + k] += vt * tx.t;
                    bot[l + k] += vb * (1.0f - tx.t);
                    bot[r + k] += vb * tx.t;
                }
            }
        }
    }
}

/* ---- projective transforms ------------------------------------------------------------------ */

/* TF's MapCoordinate for each fill mode, line for line (its int64 truncations included), then
 * clamped to the image as TF clamps (a reflected 3.5 in 4 cells must not round to 4). */
static float map_coord(float v, int len, dt_nn_fill fill)
{
    int64_t n = len;
    if (fill == DT_NN_FILL_CONSTANT)
        return v; /* out-of-image taps read the fill value */
    if (fill == DT_NN_FILL_REFLECT) {
        if (v < 0) {
            if (n <= 1) {
                v = 0;
            } else {
                int64_t sz2 = 2 * n;
                if (v < (float)sz2) /* always true here; TF writes it so */
                    v = (float)(sz2 * (int64_t)(-v / (float)sz2)) + v;
                v = v < (float)-n ? v + (float)sz2 : -v - 1;
            }
        } else if (v > (float)(n - 1)) {
            if (n <= 1) {
                v = 0;
            } else {
                int64_t sz2 = 2 * n;
                v -= (float)(sz2 * (int64_t)(v / (float)sz2));
                if (v >= (float)n)
                    v = (float)sz2 - v - 1;
            }
        }
    } else if (fill == DT_NN_FILL_WRAP) {
        if (v < 0) {
            if (n <= 1)
                v = 0;
            else
                v += (float)(n * ((int64_t)(-v / (float)(n - 1)) + 1));
        } else if (v > (float)(n - 1)) {
            if (n <= 1)
                v = 0;
            else
                v -= (float)(n * (int64_t)(v / (float)(n - 1)));
        }
    }
    return fminf(fmaxf(v, 0.0f), (float)(n - 1));
}

/* The input cells an output pixel reads: idx[a * 2 + b] is row a (floor, ceiling) and column
 * b (floor, ceiling) as y * w + x, or -1 outside the image (it reads the fill value and takes
 * no gradient); wy and wx are the weights of the rows and the columns. Nearest reads idx[0]
 * alone. none: the projection is 0 and the pixel is the fill value. */
typedef struct taps4 {
    int64_t idx[4];
    float wy[2], wx[2];
    bool none;
} taps4;

static void transform_taps(const dt_nn_transform *g, const float *t, int oy, int ox, taps4 *tp)
{
    float fx = (float)ox, fy = (float)oy;
    float k = t[6] * fx + t[7] * fy + 1.0f;
    tp->none = k == 0.0f;
    if (tp->none)
        return;
    float ix = (t[0] * fx + t[1] * fy + t[2]) / k, iy = (t[3] * fx + t[4] * fy + t[5]) / k;
    float x = map_coord(ix, g->w, g->fill), y = map_coord(iy, g->h, g->fill);
    int64_t ys[2], xs[2];
    if (g->nearest) {
        ys[0] = ys[1] = (int64_t)roundf(y), xs[0] = xs[1] = (int64_t)roundf(x);
        tp->wy[0] = tp->wx[0] = 1, tp->wy[1] = tp->wx[1] = 0;
    } else {
        float y0 = floorf(y), x0 = floorf(x);
        ys[0] = (int64_t)y0, ys[1] = ys[0] + 1, xs[0] = (int64_t)x0, xs[1] = xs[0] + 1;
        tp->wy[0] = y0 + 1 - y, tp->wy[1] = y - y0, tp->wx[0] = x0 + 1 - x, tp->wx[1] = x - x0;
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            tp->idx[a * 2 + b] = ys[a] >= 0 && ys[a] < g->h && xs[b] >= 0 && xs[b] < g->w
                                     ? ys[a] * g->w + xs[b]
                                     : -1;
}

static inline float read_or_fill(const float *xi, int64_t idx, size_t c, size_t k, float fill)
{
    return idx >= 0 ? xi[(size_t)idx * c + k] : fill;
}

void dt__nn_cpu_img_transform(const dt_nn_transform *g, const float *t, const float *x, float *y)
{
    size_t c = (size_t)g->c, img = (size_t)g->h * (size_t)g->w * c;
    float fv = g->fill_value;
    for (int i = 0; i < g->n; i++) {
        const float *xi = x + (size_t)i * img, *ti = t + (size_t)i * 8;
        for (int oy = 0; oy < g->h; oy++)
            for (int ox = 0; ox < g->w; ox++) {
                taps4 tp;
                transform_taps(g, ti, oy, ox, &tp);
                for (size_t k = 0; k < c; k++) {
                    if (tp.none) {
                        *y++ = fv;
                    } else if (g->nearest) {
                        *y++ = read_or_fill(xi, tp.idx[0], c, k, fv);
                    } else { /* TF's order: along the floor and ceiling rows, then between */
                        float top = tp.wx[0] * read_or_fill(xi, tp.idx[0], c, k, fv) +
                                    tp.wx[1] * read_or_fill(xi, tp.idx[1], c, k, fv);
                        float bot = tp.wx[0] * read_or_fill(xi, tp.idx[2], c, k, fv) +
                                    tp.wx[1] * read_or_fill(xi, tp.idx[3], c, k, fv);
                        *y++ = tp.wy[0] * top + tp.wy[1] * bot;
                    }
                }
            }
    }
}

void dt__nn_cpu_img_transform_bwd(const dt_nn_transform *g, const float *t, const float *dy,
                                  float *dx, bool acc)
{
    size_t c = (size_t)g->c, img = (size_t)g->h * (size_t)g->w * c;
    if (!acc)
        memset(dx, 0, (size_t)g->n * img * sizeof(float));
    for (int i = 0; i < g->n; i++) {
        float *xi = dx + (size_t)i * img;
        const float *ti = t + (size_t)i * 8;
        for (int oy = 0; oy < g->h; oy++)
            for (int ox = 0; ox < g->w; ox++, dy += c) {
                taps4 tp;
                transform_taps(g, ti, oy, ox, &tp);
                if (tp.none)
                    continue;
                for (int j = 0; j < (g->nearest ? 1 : 4); j++) {
                    if (tp.idx[j] < 0)
                        continue;
                    float wt = tp.wy[j / 2] * tp.wx[j % 2];
                    float *d = xi + (size_t)tp.idx[j] * c;
                    for (size_t k = 0; k < c; k++)
                        d[k] += wt * dy[k];
                }
            }
    }
}
