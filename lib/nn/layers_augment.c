/* layers_augment.c - Keras's image preprocessing layers over (h, w, c) images: Resizing and
 * CenterCrop (active in training and inference, as in Keras), RandomCrop (a random box in
 * training, Resizing's centred crop otherwise) and the random augmentations RandomFlip,
 * RandomBrightness, RandomContrast, RandomTranslation, RandomZoom and RandomRotation (active in
 * training only; identity in evaluate and predict). The last three build Keras's transform
 * matrices and run TF's projective transform (fill modes reflect, wrap, constant, nearest;
 * bilinear or nearest interpolation).
 *
 * Draws: a random layer draws its per-image parameters on the host from c->rng, the stream that
 * Dropout's masks come from. fit reseeds that stream every step from (seed, global step, rank),
 * and layers draw in topological order, so a resumed job draws what the unbroken one drew and
 * each replica draws differently, as tf.distribute gives every replica its own stream. The
 * layer's own "seed" is read and ignored for the same reason Dropout ignores it: the job's seed
 * drives every draw. The drawn parameters go to aux (device memory) for the kernel and for the
 * backward.
 *
 * Gradients: every layer here is differentiable in Keras (flip, mean, clip, resize, crop and the
 * transform's interpolation have TF gradients; the draws are constants), so each backward is the
 * exact Jacobian product and the layers may follow trainable ones. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

/* Per-image parameters are drawn in chunks into host memory and uploaded: no allocation per
 * step, and a device backend gets a few uploads per batch. */
#define DRAW_CHUNK 256

static const cJSON *get(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static size_t sample_size(const dt__nn_layer *l)
{
    return dt__nn_shape_size(&l->out);
}

/* Keys every layer here reads the same way: data_format must be channels_last; a
 * bounding_box_format only matters for bounding boxes, which dtrain does not carry. */
static dt_status common_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err);
}

static dt_status need_image(dt__nn_layer *l, dt_err *err)
{
    if (l->in_shape[0].rank != 3)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs (height, width, channels) images, got an input of rank %d",
                                l->in_shape[0].rank);
    return DT_OK;
}

/* "height" and "width": required integers in 1..65536. */
static dt_status parse_size(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const char *keys[2] = {"height", "width"};
    int *out[2] = {&l->aug_h, &l->aug_w};
    for (int i = 0; i < 2; i++)
        if (!dt__nn_int(get(cfg, keys[i]), 1, 65536, out[i]))
            return dt__nn_layer_err(l, DT_EINVAL, err,
                                    "option '%s': expected an integer in 1..65536", keys[i]);
    return DT_OK;
}

/* A value_range [lo, hi] (sorted, as Keras sorts it); absent: Keras's default [0, 255]. */
static dt_status parse_range(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *v = get(cfg, "value_range");
    l->aug_range[0] = 0;
    l->aug_range[1] = 255;
    if (!v)
        return DT_OK;
    const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(a) ||
        !cJSON_IsNumber(b) || !isfinite(a->valuedouble) || !isfinite(b->valuedouble))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'value_range': expected a list of two numbers");
    l->aug_range[0] = (float)fmin(a->valuedouble, b->valuedouble);
    l->aug_range[1] = (float)fmax(a->valuedouble, b->valuedouble);
    return DT_OK;
}

/* "factor": a number x or a list [a, b]. */
static dt_status parse_factor(dt__nn_layer *l, const cJSON *cfg, double out[2], bool *pair,
                              dt_err *err)
{
    const cJSON *v = get(cfg, "factor");
    *pair = cJSON_IsArray(v);
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        out[0] = out[1] = v->valuedouble;
        return DT_OK;
    }
    const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
    if (*pair && cJSON_GetArraySize(v) == 2 && cJSON_IsNumber(a) && cJSON_IsNumber(b) &&
        isfinite(a->valuedouble) && isfinite(b->valuedouble)) {
        out[0] = a->valuedouble;
        out[1] = b->valuedouble;
        return DT_OK;
    }
    return dt__nn_layer_err(l, DT_EINVAL, err,
                            "option 'factor': expected a number or a list of two numbers");
}

/* Draws `per` values per image with draw(l, rng, out) and uploads them into aux (4 bytes
 * each, per * 4 bytes an image). */
typedef union draw_v {
    float f;
    int32_t i;
} draw_v;

typedef void (*draw_fn)(dt__nn_layer *l, dt_rng *r, draw_v *out);

static void draw_params(dt__nn_layer *l, dt__nn_ctx *c, int per, draw_fn draw)
{
    draw_v buf[DRAW_CHUNK];
    int step = DRAW_CHUNK / per;
    for (int i = 0; i < c->n; i += step) {
        int k = c->n - i < step ? c->n - i : step;
        for (int j = 0; j < k; j++)
            draw(l, c->rng, buf + (size_t)j * (size_t)per);
        c->ops->upload((char *)l->aux + (size_t)i * (size_t)per * sizeof(draw_v), buf,
                       (size_t)k * (size_t)per * sizeof(draw_v));
    }
}

/* Inference, or a layer that does nothing: y = x, dx (=/+=) dy. */
static void pass_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    c->ops->copy((size_t)c->n * sample_size(l), dt__nn_x(c, l, 0), l->y, false);
}

static void pass_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->copy((size_t)c->n * sample_size(l), l->dy, dx, acc);
}

/* ---- Resizing: tf.image.resize to (height, width) -------------------------------------------- */

static const char *const resizing_keys[] = {"height",
                                            "width",
                                            "interpolation",
                                            "crop_to_aspect_ratio",
                                            "pad_to_aspect_ratio",
                                            "fill_mode",
                                            "fill_value",
                                            "data_format",
                                            "antialias",
                                            "bounding_box_format",
                                            NULL};

static dt_status resizing_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    DT_TRY(parse_size(l, cfg, err));
    const cJSON *v = get(cfg, "interpolation");
    static const char *const interps[] = {[DT_NN_INTERP_BILINEAR] = "bilinear",
                                          [DT_NN_INTERP_NEAREST] = "nearest",
                                          [DT_NN_INTERP_AREA] = "area",
                                          [DT_NN_INTERP_BICUBIC] = "bicubic"};
    l->aug_interp = DT_NN_INTERP_BILINEAR;
    if (v) {
        int k = 0;
        while (k < 4 && !(cJSON_IsString(v) && !strcmp(v->valuestring, interps[k])))
            k++;
        if (k == 4) /* lanczos3/5, gaussian, mitchellcubic: TF-only kernels */
            return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                    "option 'interpolation': %s is not supported (bilinear, "
                                    "nearest, area, bicubic)",
                                    cJSON_IsString(v) ? v->valuestring : "this value");
        l->aug_interp = k;
    }
    DT_TRY(dt__nn_cfg_bool(l, cfg, "crop_to_aspect_ratio", false, &l->aug_crop, err));
    bool b;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "pad_to_aspect_ratio", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'pad_to_aspect_ratio': true is not supported");
    DT_TRY(dt__nn_cfg_bool(l, cfg, "antialias", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'antialias': true is not supported");
    return DT_OK; /* fill_mode and fill_value only serve pad_to_aspect_ratio */
}

static dt_status resize_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(need_image(l, err));
    l->out = (dt_nn_shape){3, {l->aug_h, l->aug_w, l->in_shape[0].d[2]}};
    return DT_OK;
}

/* The geometry for this batch: the whole image, or the centred box of the target's aspect
 * ratio, computed as Keras 3's resize(crop_to_aspect_ratio=True) computes it. */
static dt_nn_resize resize_geometry(const dt__nn_layer *l, int n, bool crop)
{
    const dt_nn_shape *in = &l->in_shape[0];
    dt_nn_resize g = {.n = n,
                      .h = in->d[0],
                      .w = in->d[1],
                      .c = in->d[2],
                      .oh = l->aug_h,
                      .ow = l->aug_w,
                      .wh = in->d[0],
                      .ww = in->d[1],
                      .interp = (dt_nn_interp)l->aug_interp};
    if (crop) {
        int ch = (int)((double)g.w * g.oh / g.ow), cw = (int)((double)g.h * g.ow / g.oh);
        g.wh = ch < 1 ? 1 : ch > g.h ? g.h : ch;
        g.ww = cw < 1 ? 1 : cw > g.w ? g.w : cw;
        g.y0 = (int)((double)(g.h - g.wh) / 2);
        g.x0 = (int)((double)(g.w - g.ww) / 2);
    }
    return g;
}

static void resizing_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt_nn_resize g = resize_geometry(l, c->n, l->aug_crop);
    c->ops->img_resize(&g, dt__nn_x(c, l, 0), l->y);
}

static void resizing_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    dt_nn_resize g = resize_geometry(l, c->n, l->aug_crop);
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->img_resize_bwd(&g, l->dy, dx, acc);
}

const dt__nn_layer_vt dt__nn_resizing = {
    .class_name = "Resizing",
    .parse = resizing_parse,
    .build = resize_build,
    .forward = resizing_forward,
    .backward = resizing_backward,
    .keys = resizing_keys,
};

/* ---- CenterCrop: the centred (height, width) box; a smaller image is resized instead ------- */

static const char *const center_crop_keys[] = {"height", "width", "data_format",
                                               "bounding_box_format", NULL};

static dt_status center_crop_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    return parse_size(l, cfg, err);
}

/* Keras crops when the image is at least the target in both axes; otherwise it resizes with
 * crop_to_aspect_ratio (Keras 3; Keras 2's smart_resize is the same), bilinear. */
static bool center_crop_crops(const dt__nn_layer *l)
{
    return l->in_shape[0].d[0] >= l->aug_h && l->in_shape[0].d[1] >= l->aug_w;
}

static void center_crop_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (!center_crop_crops(l)) {
        dt_nn_resize g = resize_geometry(l, c->n, true);
        c->ops->img_resize(&g, dt__nn_x(c, l, 0), l->y);
        return;
    }
    int ch = in->d[2], y0 = (in->d[0] - l->aug_h) / 2, x0 = (in->d[1] - l->aug_w) / 2;
    size_t img_in = dt__nn_shape_size(in), img_out = sample_size(l);
    const float *x = dt__nn_x(c, l, 0) + ((size_t)y0 * (size_t)in->d[1] + (size_t)x0) * ch;
    for (int i = 0; i < c->n; i++)
        c->ops->copy2d((size_t)l->aug_h, l->aug_w * ch, x + (size_t)i * img_in, in->d[1] * ch,
                       l->y + (size_t)i * img_out, l->aug_w * ch, false);
}

static void center_crop_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    const dt_nn_shape *in = &l->in_shape[0];
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (!center_crop_crops(l)) {
        dt_nn_resize g = resize_geometry(l, c->n, true);
        c->ops->img_resize_bwd(&g, l->dy, dx, acc);
        return;
    }
    int ch = in->d[2], y0 = (in->d[0] - l->aug_h) / 2, x0 = (in->d[1] - l->aug_w) / 2;
    size_t img_in = dt__nn_shape_size(in), img_out = sample_size(l);
    if (!acc) /* the cells outside the box get no gradient */
        c->ops->fill((size_t)c->n * img_in, 0.0f, dx);
    float *d0 = dx + ((size_t)y0 * (size_t)in->d[1] + (size_t)x0) * ch;
    for (int i = 0; i < c->n; i++)
        c->ops->copy2d((size_t)l->aug_h, l->aug_w * ch, l->dy + (size_t)i * img_out, l->aug_w * ch,
                       d0 + (size_t)i * img_in, in->d[1] * ch, true);
}

const dt__nn_layer_vt dt__nn_center_crop = {
    .class_name = "CenterCrop",
    .parse = center_crop_parse,
    .build = resize_build,
    .forward = center_crop_forward,
    .backward = center_crop_backward,
    .keys = center_crop_keys,
};

/* ---- RandomFlip ------------------------------------------------------------------------------ */

static const char *const flip_keys[] = {"mode", "seed", "data_format", "bounding_box_format", NULL};

static dt_status flip_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    int seed;
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err)); /* the job's seed drives draws */
    const cJSON *v = get(cfg, "mode");
    const char *m = cJSON_IsString(v) ? v->valuestring : v ? "" : "horizontal_and_vertical";
    l->aug_flip = !strcmp(m, "horizontal")                ? 1
                  : !strcmp(m, "vertical")                ? 2
                  : !strcmp(m, "horizontal_and_vertical") ? 3
                                                          : 0;
    if (!l->aug_flip)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'mode': expected \"horizontal\", \"vertical\" or "
                                "\"horizontal_and_vertical\"");
    /* Keras 3 writes data_format, Keras 2 does not; their draws differ (see flip_draw). */
    l->aug_same = cJSON_GetObjectItemCaseSensitive(cfg, "data_format") != NULL;
    return DT_OK;
}

static dt_status random_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(need_image(l, err));
    l->out = l->in_shape[0];
    l->aux_bytes = sizeof(draw_v); /* the image's draw */
    return DT_OK;
}

/* A flip happens where U[0, 1) <= 1/2. Keras 3 (aug_same) draws once per image and flips every
 * axis of the mode on it, so horizontal_and_vertical turns an image half a turn or not at all;
 * Keras 2's tf.image random flips draw each axis on its own (left-right first). */
static void flip_draw(dt__nn_layer *l, dt_rng *r, draw_v *out)
{
    int32_t f = 0;
    if (l->aug_same) {
        f = dt_rng_uniform(r) <= 0.5f ? l->aug_flip : 0;
    } else {
        if ((l->aug_flip & 1) && dt_rng_uniform(r) <= 0.5f)
            f |= 1;
        if ((l->aug_flip & 2) && dt_rng_uniform(r) <= 0.5f)
            f |= 2;
    }
    out->i = f;
}

static void flip_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!c->training) {
        pass_forward(l, c);
        return;
    }
    draw_params(l, c, 1, flip_draw);
    const dt_nn_shape *s = &l->out;
    c->ops->img_flip(c->n, s->d[0], s->d[1], s->d[2], l->aux, dt__nn_x(c, l, 0), l->y, false);
}

static void flip_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    if (!c->training) {
        pass_backward(l, c);
        return;
    }
    const dt_nn_shape *s = &l->out;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->img_flip(c->n, s->d[0], s->d[1], s->d[2], l->aux, l->dy, dx, acc);
}

const dt__nn_layer_vt dt__nn_random_flip = {
    .class_name = "RandomFlip",
    .parse = flip_parse,
    .build = random_build,
    .forward = flip_forward,
    .backward = flip_backward,
    .keys = flip_keys,
};

/* ---- RandomBrightness: y = clip(x + delta), delta ~ U(factor) * (range width) --------------- */

static const char *const brightness_keys[] = {"factor",      "value_range",         "seed",
                                              "data_format", "bounding_box_format", NULL};

static dt_status brightness_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    int seed;
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err));
    DT_TRY(parse_range(l, cfg, err));
    double f[2];
    bool pair;
    DT_TRY(parse_factor(l, cfg, f, &pair, err));
    if (fabs(f[0]) > 1 || fabs(f[1]) > 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'factor': must be in [-1, 1]");
    /* Keras: x means [-|x|, |x|]; a pair is sorted */
    l->aug_factor[0] = (float)(pair ? fmin(f[0], f[1]) : -fabs(f[0]));
    l->aug_factor[1] = (float)(pair ? fmax(f[0], f[1]) : fabs(f[0]));
    return DT_OK;
}

/* U(lo, hi) as Keras's uniform(minval, maxval) draws it. */
static float uniform(const float range[2], dt_rng *r)
{
    return range[0] + (range[1] - range[0]) * dt_rng_uniform(r);
}

static void brightness_draw(dt__nn_layer *l, dt_rng *r, draw_v *out)
{
    out->f = uniform(l->aug_factor, r) * (l->aug_range[1] - l->aug_range[0]);
}

/* Contrast draws f ~ U(1 - lower, 1 + upper), stored in aug_factor. */
static void contrast_draw(dt__nn_layer *l, dt_rng *r, draw_v *out)
{
    out->f = uniform(l->aug_factor, r);
}

static bool is_contrast(const dt__nn_layer *l)
{
    return l->vt == &dt__nn_random_contrast;
}

static void adjust_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!c->training) {
        pass_forward(l, c);
        return;
    }
    bool con = is_contrast(l);
    draw_params(l, c, 1, con ? contrast_draw : brightness_draw);
    const dt_nn_shape *s = &l->out;
    c->ops->img_adjust(c->n, s->d[0] * s->d[1], s->d[2], con ? l->aux : NULL, con ? NULL : l->aux,
                       l->aug_range[0], l->aug_range[1], dt__nn_x(c, l, 0), l->y);
}

static void adjust_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    if (!c->training) {
        pass_backward(l, c);
        return;
    }
    bool con = is_contrast(l), acc;
    const dt_nn_shape *s = &l->out;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->img_adjust_bwd(c->n, s->d[0] * s->d[1], s->d[2], con ? l->aux : NULL,
                           con ? NULL : l->aux, l->aug_range[0], l->aug_range[1], dt__nn_x(c, l, 0),
                           l->dy, dx, acc);
}

const dt__nn_layer_vt dt__nn_random_brightness = {
    .class_name = "RandomBrightness",
    .parse = brightness_parse,
    .build = random_build,
    .forward = adjust_forward,
    .backward = adjust_backward,
    .keys = brightness_keys,
};

/* ---- RandomContrast: y = clip((x - mean) f + mean), the mean per image and channel --------- */

static const char *const contrast_keys[] = {"factor",      "value_range",         "seed",
                                            "data_format", "bounding_box_format", NULL};

/* Keras 3 clips to value_range (default [0, 255]); Keras 2 configs carry no value_range and get
 * the same default. */
static dt_status contrast_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    int seed;
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err));
    DT_TRY(parse_range(l, cfg, err));
    double f[2];
    bool pair;
    DT_TRY(parse_factor(l, cfg, f, &pair, err));
    if (f[0] < 0 || f[1] < 0 || f[0] > 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'factor': lower must be in [0, 1] and upper >= 0");
    l->aug_factor[0] = (float)(1 - f[0]);
    l->aug_factor[1] = (float)(1 + f[1]);
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_random_contrast = {
    .class_name = "RandomContrast",
    .parse = contrast_parse,
    .build = random_build,
    .forward = adjust_forward,
    .backward = adjust_backward,
    .keys = contrast_keys,
};

/* ---- RandomCrop: a random (height, width) box in training, Resizing's crop otherwise -------- */

static const char *const random_crop_keys[] = {
    "height", "width", "seed", "data_format", "bounding_box_format", NULL};

static dt_status random_crop_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    int seed;
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err));
    return parse_size(l, cfg, err);
}

static dt_status random_crop_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(resize_build(l, err));
    l->aux_bytes = 2 * sizeof(draw_v); /* the box's top row and left column */
    return DT_OK;
}

/* Keras crops at random when the image is at least the target in both axes (Keras 2's rule)
 * and in training; otherwise (and at inference) it resizes the centred box of the target's
 * aspect ratio, bilinear, as Resizing(crop_to_aspect_ratio=True). */
static bool random_crop_crops(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return c->training && center_crop_crops(l);
}

static void crop_draw(dt__nn_layer *l, dt_rng *r, draw_v *out)
{
    const dt_nn_shape *in = &l->in_shape[0];
    out[0].i = (int32_t)dt_rng_below(r, (uint64_t)(in->d[0] - l->aug_h + 1));
    out[1].i = (int32_t)dt_rng_below(r, (uint64_t)(in->d[1] - l->aug_w + 1));
}

/* Copies image i's box (y0, x0) of x into y, or back (bwd: dy's image into dx's box, added). */
static void crop_copy(dt__nn_layer *l, dt__nn_ctx *c, int i, const draw_v *box, const float *src,
                      float *dst, bool bwd)
{
    const dt_nn_shape *in = &l->in_shape[0];
    int ch = in->d[2];
    size_t img_in = dt__nn_shape_size(in), img_out = sample_size(l);
    size_t off = ((size_t)box[0].i * (size_t)in->d[1] + (size_t)box[1].i) * (size_t)ch;
    if (!bwd)
        c->ops->copy2d((size_t)l->aug_h, l->aug_w * ch, src + (size_t)i * img_in + off,
                       in->d[1] * ch, dst + (size_t)i * img_out, l->aug_w * ch, false);
    else
        c->ops->copy2d((size_t)l->aug_h, l->aug_w * ch, src + (size_t)i * img_out, l->aug_w * ch,
                       dst + (size_t)i * img_in + off, in->d[1] * ch, true);
}

static void random_crop_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!random_crop_crops(l, c)) {
        dt_nn_resize g = resize_geometry(l, c->n, true);
        g.interp = DT_NN_INTERP_BILINEAR;
        c->ops->img_resize(&g, dt__nn_x(c, l, 0), l->y);
        return;
    }
    draw_params(l, c, 2, crop_draw);
    /* the boxes steer host-side copies: read them back (a few bytes an image) */
    draw_v buf[DRAW_CHUNK];
    for (int i = 0; i < c->n; i += DRAW_CHUNK / 2) {
        int k = c->n - i < DRAW_CHUNK / 2 ? c->n - i : DRAW_CHUNK / 2;
        c->ops->download(buf, (char *)l->aux + (size_t)i * 2 * sizeof(draw_v),
                         (size_t)k * 2 * sizeof(draw_v));
        for (int j = 0; j < k; j++)
            crop_copy(l, c, i + j, buf + 2 * j, dt__nn_x(c, l, 0), l->y, false);
    }
}

static void random_crop_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (!random_crop_crops(l, c)) {
        dt_nn_resize g = resize_geometry(l, c->n, true);
        g.interp = DT_NN_INTERP_BILINEAR;
        c->ops->img_resize_bwd(&g, l->dy, dx, acc);
        return;
    }
    if (!acc) /* the cells outside the box get no gradient */
        c->ops->fill((size_t)c->n * dt__nn_shape_size(&l->in_shape[0]), 0.0f, dx);
    draw_v buf[DRAW_CHUNK];
    for (int i = 0; i < c->n; i += DRAW_CHUNK / 2) {
        int k = c->n - i < DRAW_CHUNK / 2 ? c->n - i : DRAW_CHUNK / 2;
        c->ops->download(buf, (char *)l->aux + (size_t)i * 2 * sizeof(draw_v),
                         (size_t)k * 2 * sizeof(draw_v));
        for (int j = 0; j < k; j++)
            crop_copy(l, c, i + j, buf + 2 * j, l->dy, dx, true);
    }
}

const dt__nn_layer_vt dt__nn_random_crop = {
    .class_name = "RandomCrop",
    .parse = random_crop_parse,
    .build = random_crop_build,
    .forward = random_crop_forward,
    .backward = random_crop_backward,
    .keys = random_crop_keys,
};

/* ---- RandomTranslation, RandomZoom, RandomRotation: one projective transform per image ------ */

/* fill_mode, fill_value, interpolation, seed and data_format, as the three layers share them. */
static dt_status transform_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_parse(l, cfg, err));
    int seed;
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err));
    DT_TRY(dt__nn_cfg_float(l, cfg, "fill_value", 0, &l->aug_fill_value, err));
    const cJSON *v = get(cfg, "fill_mode");
    const char *fm = cJSON_IsString(v) ? v->valuestring : v ? "" : "reflect";
    static const char *const fills[] = {"reflect", "wrap", "constant", "nearest"};
    l->aug_fill = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(fm, fills[i]))
            l->aug_fill = i; /* the order of dt_nn_fill */
    if (l->aug_fill < 0)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'fill_mode': %s is not supported (reflect, wrap, constant, "
                                "nearest)",
                                cJSON_IsString(v) ? v->valuestring : "this value");
    v = get(cfg, "interpolation");
    if (v && !(cJSON_IsString(v) &&
               (!strcmp(v->valuestring, "bilinear") || !strcmp(v->valuestring, "nearest"))))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'interpolation': %s is not supported (bilinear, nearest)",
                                cJSON_IsString(v) ? v->valuestring : "this value");
    l->aug_nearest = v && !strcmp(v->valuestring, "nearest");
    return DT_OK;
}

/* A factor key as Keras reads it: x means [-x, x], a pair [lo, hi] must have lo <= hi; lo is
 * at least min_lo and both at most max_abs in magnitude (0: no bound). */
static dt_status parse_sym_factor(dt__nn_layer *l, const cJSON *cfg, const char *key, double min_lo,
                                  double max_abs, float out[2], dt_err *err)
{
    const cJSON *v = get(cfg, key);
    const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
    double lo, hi;
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
        lo = -v->valuedouble, hi = v->valuedouble;
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsNumber(a) &&
               cJSON_IsNumber(b) && isfinite(a->valuedouble) && isfinite(b->valuedouble)) {
        lo = a->valuedouble, hi = b->valuedouble;
    } else {
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option '%s': expected a number or a list of two numbers", key);
    }
    if (lo > hi || lo < min_lo || (max_abs > 0 && (fabs(lo) > max_abs || fabs(hi) > max_abs)))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option '%s': [%g, %g] is not a range Keras accepts (lower <= "
                                "upper, lower >= %g%s)",
                                key, lo, hi, min_lo, max_abs > 0 ? ", |values| <= 1" : "");
    out[0] = (float)lo;
    out[1] = (float)hi;
    return DT_OK;
}

static dt_status transform_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(need_image(l, err));
    l->out = l->in_shape[0];
    l->aux_bytes = 8 * sizeof(draw_v); /* the image's transform */
    return DT_OK;
}

static dt_nn_transform transform_geometry(const dt__nn_layer *l, int n)
{
    return (dt_nn_transform){.n = n,
                             .h = l->out.d[0],
                             .w = l->out.d[1],
                             .c = l->out.d[2],
                             .nearest = l->aug_nearest,
                             .fill = (dt_nn_fill)l->aug_fill,
                             .fill_value = l->aug_fill_value};
}

/* t = [a0 a1 a2 b0 b1 b2 0 0] */
static void affine(draw_v *t, float a0, float a1, float a2, float b0, float b1, float b2)
{
    float v[8] = {a0, a1, a2, b0, b1, b2, 0, 0};
    for (int i = 0; i < 8; i++)
        t[i].f = v[i];
}

/* Keras's get_translation_matrix: the output pixel (x, y) reads (x - dx, y - dy); the height
 * shift is drawn first, as Keras draws it. */
static void translation_draw(dt__nn_layer *l, dt_rng *r, draw_v *t)
{
    float dy = uniform(l->aug_factor, r) * (float)l->out.d[0];
    float dx = uniform(l->aug_factor_w, r) * (float)l->out.d[1];
    affine(t, 1, 0, -dx, 0, 1, -dy);
}

/* Keras's _get_zoom_matrix: zoom z about the image centre, z ~ U(1 + lower, 1 + upper) per axis
 * (the width's own draw only with a width_factor). */
static void zoom_draw(dt__nn_layer *l, dt_rng *r, draw_v *t)
{
    float zh = 1 + uniform(l->aug_factor, r);
    float zw = l->aug_same ? zh : 1 + uniform(l->aug_factor_w, r);
    float h1 = (float)l->out.d[0] - 1, w1 = (float)l->out.d[1] - 1;
    affine(t, zw, 0, w1 / 2 * (1 - zw), 0, zh, h1 / 2 * (1 - zh));
}

/* Keras's _get_rotation_matrix: a rotation by angle ~ U(lower, upper) * 2 pi about the centre. */
static void rotation_draw(dt__nn_layer *l, dt_rng *r, draw_v *t)
{
    const float two_pi = (float)(2 * M_PI);
    float lim[2] = {l->aug_factor[0] * two_pi, l->aug_factor[1] * two_pi};
    float a = uniform(lim, r), co = cosf(a), si = sinf(a);
    float h1 = (float)l->out.d[0] - 1, w1 = (float)l->out.d[1] - 1;
    affine(t, co, -si, (w1 - (co * w1 - si * h1)) / 2, si, co, (h1 - (si * w1 + co * h1)) / 2);
}

static draw_fn transform_draw(const dt__nn_layer *l)
{
    return l->vt == &dt__nn_random_translation ? translation_draw
           : l->vt == &dt__nn_random_zoom      ? zoom_draw
                                               : rotation_draw;
}

static void transform_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!c->training) {
        pass_forward(l, c);
        return;
    }
    draw_params(l, c, 8, transform_draw(l));
    dt_nn_transform g = transform_geometry(l, c->n);
    c->ops->img_transform(&g, l->aux, dt__nn_x(c, l, 0), l->y);
}

static void transform_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    if (!c->training) {
        pass_backward(l, c);
        return;
    }
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    dt_nn_transform g = transform_geometry(l, c->n);
    c->ops->img_transform_bwd(&g, l->aux, l->dy, dx, acc);
}

static const char *const translation_keys[] = {"height_factor", "width_factor",        "fill_mode",
                                               "fill_value",    "interpolation",       "seed",
                                               "data_format",   "bounding_box_format", NULL};

static dt_status translation_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(transform_parse(l, cfg, err));
    DT_TRY(parse_sym_factor(l, cfg, "height_factor", -1, 1, l->aug_factor, err));
    return parse_sym_factor(l, cfg, "width_factor", -1, 1, l->aug_factor_w, err);
}

const dt__nn_layer_vt dt__nn_random_translation = {
    .class_name = "RandomTranslation",
    .parse = translation_parse,
    .build = transform_build,
    .forward = transform_forward,
    .backward = transform_backward,
    .keys = translation_keys,
};

static dt_status zoom_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(transform_parse(l, cfg, err));
    DT_TRY(parse_sym_factor(l, cfg, "height_factor", -1, 0, l->aug_factor, err));
    l->aug_same = !get(cfg, "width_factor");
    if (l->aug_same)
        return DT_OK;
    return parse_sym_factor(l, cfg, "width_factor", -1, 0, l->aug_factor_w, err);
}

const dt__nn_layer_vt dt__nn_random_zoom = {
    .class_name = "RandomZoom",
    .parse = zoom_parse,
    .build = transform_build,
    .forward = transform_forward,
    .backward = transform_backward,
    .keys = translation_keys,
};

static const char *const rotation_keys[] = {
    "factor",      "fill_mode",           "fill_value", "interpolation", "seed", "data_format",
    "value_range", "bounding_box_format", NULL};

static dt_status rotation_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(transform_parse(l, cfg, err));
    return parse_sym_factor(l, cfg, "factor", -INFINITY, 0, l->aug_factor, err);
}

const dt__nn_layer_vt dt__nn_random_rotation = {
    .class_name = "RandomRotation",
    .parse = rotation_parse,
    .build = transform_build,
    .forward = transform_forward,
    .backward = transform_backward,
    .keys = rotation_keys,
};
