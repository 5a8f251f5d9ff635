/* resize.c - tf.image.resize with antialias off (what Keras's image_dataset_from_directory and
 * Resizing layer call), one function per method, each computed in float32 the way TF's kernel
 * computes it so that results agree to rounding:
 *
 *   bilinear  ResizeBilinear(half_pixel_centers): source x = (i + 0.5) * in/out - 0.5, the two
 *             neighbours clamped to the image, lerp across then down.
 *   nearest   ResizeNearestNeighbor(half_pixel_centers): floor((i + 0.5) * in/out), clamped
 *             (PyTorch's "nearest-exact"; its plain "nearest" is floor(i * in/out)).
 *   area      ResizeArea: each output cell averages the input cells it covers, partial cells
 *             weighted by the covered fraction (no half-pixel shift; PyTorch's "area" is an
 *             adaptive average pool, equal only when in/out is an integer).
 *   bicubic   ResizeBicubic(half_pixel_centers): Keys' cubic with a = -0.5 (PyTorch uses
 *             -0.75), the fractional position rounded to 1/1024 (TF's coefficient table), taps
 *             outside the image dropped and the rest renormalised (PyTorch clamps instead).
 *
 * The scales are float32 in/out, as TF's CalculateResizeScale. Images are HWC. */
#include "data/data_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline float px(const dt__img_view *v, int y, int x, int c)
{
    size_t i = (size_t)y * v->stride + (size_t)x * (size_t)v->c + (size_t)c;
    return v->u8 ? (float)v->u8[i] : v->f32[i];
}

static inline int bound(int64_t v, int n)
{
    return v < 0 ? 0 : v > n - 1 ? n - 1 : (int)v;
}

/* ------------------------------------------------------------------------------- bilinear -- */

typedef struct lerp_tap {
    int lo, hi;
    float t;
} lerp_tap;

static void lerp_taps(int in, int out, lerp_tap *taps)
{
    float scale = (float)in / (float)out;
    for (int i = 0; i < out; i++) {
        float src = ((float)i + 0.5f) * scale - 0.5f;
        float f = floorf(src);
        taps[i].lo = bound((int64_t)f, in);
        taps[i].hi = bound((int64_t)ceilf(src), in);
        taps[i].t = src - f;
    }
}

/* The same arithmetic on uint8 rows, with each input row's horizontal lerps computed once
 * (two rows kept: consecutive output rows share them when upscaling, and their order never goes
 * back) and the channel count C known to the compiler: the decoded images' case, most of a
 * job's decode time. Writes float32 (out) or, rounded as dt_image_load_u8 rounds, uint8 (o8).
 * rows holds 2 * ow * C floats. */
static inline void hlerp_row(const uint8_t *src, const lerp_tap *tx, int ow, const int C,
                             float *dst)
{
    if (C == 3) { /* spelled out: the compiler keeps a loop over c otherwise */
        for (int x = 0; x < ow; x++, dst += 3) {
            const uint8_t *l = src + (size_t)tx[x].lo * 3, *r = src + (size_t)tx[x].hi * 3;
            float t = tx[x].t, l0 = l[0], l1 = l[1], l2 = l[2];
            dst[0] = l0 + ((float)r[0] - l0) * t;
            dst[1] = l1 + ((float)r[1] - l1) * t;
            dst[2] = l2 + ((float)r[2] - l2) * t;
        }
        return;
    }
    for (int x = 0; x < ow; x++) {
        size_t l = (size_t)tx[x].lo * (size_t)C, r = (size_t)tx[x].hi * (size_t)C;
        float t = tx[x].t;
        for (int c = 0; c < C; c++) {
            float tl = src[l + c], tr = src[r + c];
            *dst++ = tl + (tr - tl) * t;
        }
    }
}

static inline void bilinear_u8_rows(const dt__img_view *in, float *out, uint8_t *o8, int oh, int ow,
                                    const lerp_tap *ty, const lerp_tap *tx, const int C,
                                    float *rows)
{
    size_t n = (size_t)ow * (size_t)C;
    float *ra = rows, *rb = rows + n;
    int ia = -1, ib = -1; /* the input rows ra and rb hold */
    for (int y = 0; y < oh; y++) {
        int lo = ty[y].lo, hi = ty[y].hi;
        if (ia != lo) {
            if (ib == lo) { /* the previous bottom row is this top row */
                float *t = ra;
                ra = rb;
                rb = t;
                ia = lo;
                ib = -1;
            } else {
                hlerp_row(in->u8 + (size_t)lo * in->stride, tx, ow, C, ra);
                ia = lo;
            }
        }
        const float *pb = ra;
        if (hi != lo) {
            if (ib != hi) {
                hlerp_row(in->u8 + (size_t)hi * in->stride, tx, ow, C, rb);
                ib = hi;
            }
            pb = rb;
        }
        float ty_t = ty[y].t;
        if (o8) {
            /* No clamp to [0, 255] (which keeps the loop from vectorising): a lerp of lerps of
             * uint8 values stays within rounding (~1e-5) of [0, 255], where (int)(v + 0.5f)
             * already gives what clamping first gives (0 below 0.5, 255 above 254.5). */
            for (size_t k = 0; k < n; k++) {
                float v = ra[k] + (pb[k] - ra[k]) * ty_t;
                o8[k] = (uint8_t)(int)(v + 0.5f);
            }
            o8 += n;
        } else {
            for (size_t k = 0; k < n; k++)
                *out++ = ra[k] + (pb[k] - ra[k]) * ty_t;
        }
    }
}

static void bilinear_u8(const dt__img_view *in, float *out, uint8_t *o8, int oh, int ow,
                        const lerp_tap *ty, const lerp_tap *tx, float *rows)
{
    if (in->c == 3)
        bilinear_u8_rows(in, out, o8, oh, ow, ty, tx, 3, rows);
    else if (in->c == 1)
        bilinear_u8_rows(in, out, o8, oh, ow, ty, tx, 1, rows);
    else
        bilinear_u8_rows(in, out, o8, oh, ow, ty, tx, in->c, rows);
}

dt_status dt__image_resize_bilinear_u8(const dt__img_view *in, uint8_t *out, int oh, int ow,
                                       dt_err *err)
{
    if (in->h < 1 || in->w < 1 || in->c < 1 || oh < 1 || ow < 1 || oh > DT_MAX_IMAGE_DIM ||
        ow > DT_MAX_IMAGE_DIM || in->h > DT_MAX_IMAGE_DIM || in->w > DT_MAX_IMAGE_DIM || !in->u8)
        return dt_err_set(err, DT_EINVAL, "resize: %dx%dx%d to %dx%d: sizes must be 1..%d", in->h,
                          in->w, in->c, oh, ow, DT_MAX_IMAGE_DIM);
    lerp_tap *ty = malloc((size_t)oh * sizeof *ty), *tx = malloc((size_t)ow * sizeof *tx);
    float *rows = malloc(2 * (size_t)ow * (size_t)in->c * sizeof(float));
    dt_status st = DT_OK;
    if (!ty || !tx || !rows) {
        st = dt_err_set(err, DT_ENOMEM, "resize: out of memory");
    } else {
        /* the same size: lerps of weight 0, the identity, as the float path's copy */
        lerp_taps(in->h, oh, ty);
        lerp_taps(in->w, ow, tx);
        bilinear_u8(in, NULL, out, oh, ow, ty, tx, rows);
    }
    free(ty);
    free(tx);
    free(rows);
    return st;
}

static void resize_bilinear(const dt__img_view *in, float *out, int oh, int ow, lerp_tap *ty,
                            lerp_tap *tx)
{
    lerp_taps(in->h, oh, ty);
    lerp_taps(in->w, ow, tx);
    if (in->u8) {
        float *rows = malloc(2 * (size_t)ow * (size_t)in->c * sizeof(float));
        if (rows) {
            bilinear_u8(in, out, NULL, oh, ow, ty, tx, rows);
            free(rows);
            return;
        } /* else the general loop below, which needs no memory */
    }
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < in->c; c++) {
                float tl = px(in, ty[y].lo, tx[x].lo, c), tr = px(in, ty[y].lo, tx[x].hi, c);
                float bl = px(in, ty[y].hi, tx[x].lo, c), br = px(in, ty[y].hi, tx[x].hi, c);
                float top = tl + (tr - tl) * tx[x].t, bot = bl + (br - bl) * tx[x].t;
                *out++ = top + (bot - top) * ty[y].t;
            }
}

/* -------------------------------------------------------------------------------- nearest -- */

static void nearest_taps(int in, int out, int *idx)
{
    float scale = (float)in / (float)out;
    for (int i = 0; i < out; i++)
        idx[i] = bound((int64_t)floorf(((float)i + 0.5f) * scale), in);
}

static void resize_nearest(const dt__img_view *in, float *out, int oh, int ow, int *iy, int *ix)
{
    nearest_taps(in->h, oh, iy);
    nearest_taps(in->w, ow, ix);
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < in->c; c++)
                *out++ = px(in, iy[y], ix[x], c);
}

/* ----------------------------------------------------------------------------------- area -- */

typedef struct area_tap {
    int64_t start, end;    /* input cells [start, end) touch the output cell */
    float start_w, last_w; /* coverage of the first and the last of them */
} area_tap;

/* The coverage of input cell v by the output interval [a, b), as TF writes it. */
static float coverage(int64_t v, float a, float b, float scale)
{
    if ((float)v < a)
        return (float)(v + 1) > b ? scale : (float)(v + 1) - a;
    return (float)(v + 1) > b ? b - (float)v : 1.0f;
}

static void area_taps(int in, int out, area_tap *t)
{
    float scale = (float)in / (float)out;
    for (int i = 0; i < out; i++) {
        float a = (float)i * scale, b = (float)(i + 1) * scale;
        t[i].start = (int64_t)floorf(a);
        t[i].end = (int64_t)ceilf(b);
        t[i].start_w = coverage(t[i].start, a, b, scale);
        t[i].last_w = coverage(t[i].end - 1, a, b, scale);
    }
}

static void resize_area(const dt__img_view *in, float *out, int oh, int ow, area_tap *ty,
                        area_tap *tx)
{
    area_taps(in->h, oh, ty);
    area_taps(in->w, ow, tx);
    float sy = (float)in->h / (float)oh, sx = (float)in->w / (float)ow;
    float norm = (float)(1.0 / (sy * sx));
    for (int y = 0; y < oh; y++) {
        float a = (float)y * sy, b = (float)(y + 1) * sy;
        for (int x = 0; x < ow; x++) {
            const area_tap *t = &tx[x];
            for (int c = 0; c < in->c; c++) {
                float sum = 0;
                for (int64_t i = ty[y].start; i < ty[y].end; i++) {
                    int r = bound(i, in->h);
                    /* first cell weighted, the middle ones whole, the last weighted */
                    float row = px(in, r, bound(t->start, in->w), c) * t->start_w;
                    if (t->start + 1 != t->end) {
                        for (int64_t j = t->start + 1; j < t->end - 1; j++)
                            row += px(in, r, bound(j, in->w), c);
                        row += px(in, r, bound(t->end - 1, in->w), c) * t->last_w;
                    }
                    sum += row * coverage(i, a, b, sy);
                }
                *out++ = sum * norm;
            }
        }
    }
}

/* -------------------------------------------------------------------------------- bicubic -- */

typedef struct cubic_tap {
    int idx[4];
    float w[4];
} cubic_tap;

/* TF's coefficient table entries, computed on demand: entry i of kTableSize = 1024, with
 * x = i / 1024 (float), the near tap (|d| < 1) and the far one (1 <= |d| < 2), a = -0.5. */
static float keys_near(int i)
{
    const double a = -0.5;
    float x = (float)(i * 1.0 / 1024);
    return (float)(((a + 2) * x - (a + 3)) * x * x + 1);
}

static float keys_far(int i)
{
    const double a = -0.5;
    float x = (float)(i * 1.0 / 1024);
    x += 1.0f;
    return (float)(((a * x - 5 * a) * x + 8 * a) * x - 4 * a);
}

static void cubic_taps(int in, int out, cubic_tap *t)
{
    float scale = (float)in / (float)out;
    for (int i = 0; i < out; i++) {
        float src = ((float)i + 0.5f) * scale - 0.5f;
        int64_t loc = (int64_t)floorf(src);
        int off = (int)lrintf((src - (float)loc) * 1024);
        float w[4] = {keys_far(off), keys_near(off), keys_near(1024 - off), keys_far(1024 - off)};
        float sum = 0;
        for (int k = 0; k < 4; k++) {
            t[i].idx[k] = bound(loc - 1 + k, in);
            t[i].w[k] = t[i].idx[k] == loc - 1 + k ? w[k] : 0.0f; /* outside: dropped */
            sum += t[i].w[k];
        }
        if (fabsf(sum) >= 1000.0f * FLT_MIN)
            for (int k = 0; k < 4; k++)
                t[i].w[k] *= 1.0f / sum;
    }
}

static void resize_bicubic(const dt__img_view *in, float *out, int oh, int ow, cubic_tap *ty,
                           cubic_tap *tx)
{
    cubic_taps(in->h, oh, ty);
    cubic_taps(in->w, ow, tx);
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++)
            for (int c = 0; c < in->c; c++) {
                float rows[4]; /* across first, then down, as TF caches the rows */
                for (int k = 0; k < 4; k++) {
                    int r = ty[y].idx[k];
                    rows[k] = px(in, r, tx[x].idx[0], c) * tx[x].w[0] +
                              px(in, r, tx[x].idx[1], c) * tx[x].w[1] +
                              px(in, r, tx[x].idx[2], c) * tx[x].w[2] +
                              px(in, r, tx[x].idx[3], c) * tx[x].w[3];
                }
                *out++ = rows[0] * ty[y].w[0] + rows[1] * ty[y].w[1] + rows[2] * ty[y].w[2] +
                         rows[3] * ty[y].w[3];
            }
}

/* ------------------------------------------------------------------------------ dispatch -- */

dt_status dt__image_resize_view(const dt__img_view *in, float *out, int oh, int ow, dt_interp m,
                                dt_err *err)
{
    if (in->h < 1 || in->w < 1 || in->c < 1 || oh < 1 || ow < 1 || oh > DT_MAX_IMAGE_DIM ||
        ow > DT_MAX_IMAGE_DIM || in->h > DT_MAX_IMAGE_DIM || in->w > DT_MAX_IMAGE_DIM)
        return dt_err_set(err, DT_EINVAL, "resize: %dx%dx%d to %dx%d: sizes must be 1..%d", in->h,
                          in->w, in->c, oh, ow, DT_MAX_IMAGE_DIM);
    if (in->h == oh && in->w == ow) { /* every method is the identity then */
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < in->c; c++)
                    *out++ = px(in, y, x, c);
        return DT_OK;
    }
    size_t tap = sizeof(cubic_tap) > sizeof(area_tap) ? sizeof(cubic_tap) : sizeof(area_tap);
    void *ty = malloc((size_t)oh * tap), *tx = malloc((size_t)ow * tap);
    if (!ty || !tx) {
        free(ty);
        free(tx);
        return dt_err_set(err, DT_ENOMEM, "resize: out of memory");
    }
    switch (m) {
    case DT_INTERP_BILINEAR:
        resize_bilinear(in, out, oh, ow, ty, tx);
        break;
    case DT_INTERP_NEAREST:
        resize_nearest(in, out, oh, ow, ty, tx);
        break;
    case DT_INTERP_AREA:
        resize_area(in, out, oh, ow, ty, tx);
        break;
    case DT_INTERP_BICUBIC:
        resize_bicubic(in, out, oh, ow, ty, tx);
        break;
    }
    free(ty);
    free(tx);
    return DT_OK;
}

dt_status dt_image_resize(const float *in, int ih, int iw, int c, float *out, int oh, int ow,
                          dt_interp method, dt_err *err)
{
    dt__img_view v = {.f32 = in, .h = ih, .w = iw, .c = c, .stride = (size_t)iw * (size_t)c};
    return dt__image_resize_view(&v, out, oh, ow, method, err);
}

static const char *const interp_names[] = {
    [DT_INTERP_BILINEAR] = "bilinear",
    [DT_INTERP_NEAREST] = "nearest",
    [DT_INTERP_AREA] = "area",
    [DT_INTERP_BICUBIC] = "bicubic",
};

dt_status dt_interp_parse(const char *s, dt_interp *out)
{
    for (int i = 0; i < (int)(sizeof interp_names / sizeof interp_names[0]); i++)
        if (s && strcmp(s, interp_names[i]) == 0) {
            *out = (dt_interp)i;
            return DT_OK;
        }
    return DT_EINVAL;
}

const char *dt_interp_name(dt_interp m)
{
    return (unsigned)m < sizeof interp_names / sizeof interp_names[0] ? interp_names[m] : "?";
}
