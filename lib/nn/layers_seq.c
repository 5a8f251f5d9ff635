/* layers_seq.c - the sequence and text layers over (N, T, C): Embedding (with mask_zero),
 * Conv1D, MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D (masked), GlobalMaxPooling1D,
 * LayerNormalization and TimeDistributed(Dense).
 *
 * A (T, C) sequence is a (T, 1, C) image to the 2D kernels: Conv1D runs Conv2D's forward and
 * backward over such a window (causal padding is a window whose leading padding is the whole
 * dilated kernel), and the 1D pools run the 2D pool kernels. */
#include "nn/layer.h"

#include "core/limits.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Keras 3 writes a 1D size as [3], Keras 2 as [3] or 3. */
static dt_status cfg_one(const dt__nn_layer *l, const cJSON *cfg, const char *key, int def, int lo,
                         int *out, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *out = def;
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1)
        v = cJSON_GetArrayItem(v, 0);
    if (!dt__nn_int(v, lo, 65536, out))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option '%s': expected an integer in %d..65536 or a list of one",
                                key, lo);
    return DT_OK;
}

static dt_status seq_input(const dt__nn_layer *l, dt_err *err)
{
    if (l->in_shape[0].rank != 2)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs a (timesteps, channels) input, got rank %d",
                                l->in_shape[0].rank);
    return DT_OK;
}

/* ---- Embedding: y (.., output_dim) = embeddings[id] for every id of the input ---------------
 * Token ids arrive as floats (exact up to 2^24, hence the input_dim limit). An id outside
 * [0, input_dim) reads nothing (a row of zeros) and fails the step through check, naming the
 * id and where it was, as Keras's CPU gather names the index it refuses.
 * Fields: kh input_dim, units output_dim, kw input_length (0: none), keepdims mask_zero; stat
 * holds embed_fwd's bad-id report. */

#define EMBED_MAX_ROWS (1 << 24)

static const char *const embed_keys[] = {"input_dim",
                                         "output_dim",
                                         "embeddings_initializer",
                                         "embeddings_regularizer",
                                         "activity_regularizer",
                                         "embeddings_constraint",
                                         "mask_zero",
                                         "input_length",
                                         "sparse",
                                         "lora_rank",
                                         "lora_alpha",
                                         "quantization_config",
                                         NULL};

static dt_status embed_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_int(l, cfg, "input_dim", 0, &l->kh, err));
    if (l->kh < 1 || l->kh > EMBED_MAX_ROWS)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'input_dim': %d is not in 1..%d (token ids travel as "
                                "float32, exact up to 2^24)",
                                l->kh, EMBED_MAX_ROWS);
    DT_TRY(dt__nn_cfg_int(l, cfg, "output_dim", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 24))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'output_dim': %d is not in 1..16777216",
                                l->units);
    DT_TRY(dt__nn_cfg_init(l, cfg, "embeddings_initializer",
                           (dt__nn_init){.kind = DT_NN_INIT_RANDOM_UNIFORM, .a = -0.05, .b = 0.05},
                           &l->kinit, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "embeddings_regularizer", &l->kl1, &l->kl2, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "mask_zero", false, &l->keepdims, err));
    DT_TRY(dt__nn_cfg_int(l, cfg, "input_length", 0, &l->kw, err));
    if (l->kw < 0)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'input_length': %d is negative", l->kw);
    bool sparse;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "sparse", false, &sparse, err));
    if (sparse)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'sparse': sparse gradients are not supported");
    DT_TRY(dt__nn_cfg_null(l, cfg, "activity_regularizer", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "embeddings_constraint", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "lora_rank", err));
    return dt__nn_cfg_null(l, cfg, "quantization_config", err);
}

static dt_status embed_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank < 1 || in->rank >= DT_NN_MAX_RANK)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs an input of 1 to %d axes, got %d",
                                DT_NN_MAX_RANK - 1, in->rank);
    /* Keras 2 checks input_length against the input's axes after the batch. */
    if (l->kw && in->d[0] != l->kw)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'input_length': %d, but the input has %d timesteps", l->kw,
                                in->d[0]);
    if (l->keepdims && in->rank != 1)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'mask_zero': needs a (timesteps,) input, got rank %d",
                                in->rank);
    l->out = *in;
    l->out.d[l->out.rank++] = l->units;
    dt__nn_weight *w =
        dt__nn_add_weight(l, "embeddings", (dt_nn_shape){2, {l->kh, l->units}}, true, l->kinit);
    w->l1 = l->kl1;
    w->l2 = l->kl2;
    l->stat_floats = 3; /* the bad-id report of embed_fwd */
    if (l->keepdims)
        l->mask_len = in->d[0];
    else
        l->mask_rule = DT_NN_MASK_DROP;
    return DT_OK;
}

static size_t embed_ids(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return (size_t)c->n * dt__nn_shape_size(&l->in_shape[0]);
}

static void embed_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    c->ops->embed_fwd(dt__nn_x(c, l, 0), embed_ids(l, c), l->w[0].data, l->kh, l->units, l->y,
                      l->keepdims ? l->mask : NULL, l->stat);
}

static dt_status embed_check(dt__nn_layer *l, const float *bad, dt_err *err)
{
    if (bad[0] == 0)
        return DT_OK;
    size_t per = dt__nn_shape_size(&l->in_shape[0]), at = (size_t)bad[2];
    return dt__nn_layer_err(l, DT_EINVAL, err,
                            "input id %.9g (sample %zu of the batch, position %zu) is outside "
                            "[0, %d), the option 'input_dim' (%.0f id%s of the batch out of range)",
                            (double)bad[1], at / per, at % per, l->kh, (double)bad[0],
                            bad[0] == 1 ? "" : "s");
}

static void embed_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    /* Ids take no gradient (Keras's are integers): only the table's. */
    if (l->w[0].grad)
        c->ops->embed_bwd(dt__nn_x(c, l, 0), embed_ids(l, c), l->dy, l->kh, l->units, l->w[0].grad);
}

const dt__nn_layer_vt dt__nn_embedding = {
    .class_name = "Embedding",
    .parse = embed_parse,
    .build = embed_build,
    .forward = embed_forward,
    .backward = embed_backward,
    .check = embed_check,
    .keys = embed_keys,
    .mask = DT_NN_MASK_MAKE,
};

/* ---- Conv1D: Conv2D over a (T, 1, C) image --------------------------------------------------
 * kh, sh, dil[0]: kernel_size, strides, dilation_rate; pad[0] 1: causal padding. */

static const char *const conv1d_keys[] = {"filters",
                                          "kernel_size",
                                          "strides",
                                          "padding",
                                          "data_format",
                                          "dilation_rate",
                                          "groups",
                                          "activation",
                                          "use_bias",
                                          "kernel_initializer",
                                          "bias_initializer",
                                          "kernel_regularizer",
                                          "bias_regularizer",
                                          "activity_regularizer",
                                          "kernel_constraint",
                                          "bias_constraint",
                                          "lora_rank",
                                          "lora_alpha",
                                          NULL};

static dt_status conv1d_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    int groups;
    DT_TRY(dt__nn_cfg_int(l, cfg, "filters", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 20))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'filters': %d is not in 1..1048576",
                                l->units);
    if (!cJSON_GetObjectItemCaseSensitive(cfg, "kernel_size"))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'kernel_size' is required");
    DT_TRY(cfg_one(l, cfg, "kernel_size", 1, 1, &l->kh, err));
    DT_TRY(cfg_one(l, cfg, "strides", 1, 1, &l->sh, err));
    DT_TRY(cfg_one(l, cfg, "dilation_rate", 1, 1, &l->dil[0], err));
    l->kw = l->sw = l->dil[1] = 1;
    if (l->dil[0] > 1 && l->sh > 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "options 'strides' %d and 'dilation_rate' %d: Keras refuses both "
                                "above 1",
                                l->sh, l->dil[0]);
    DT_TRY(dt__nn_cfg_int(l, cfg, "groups", 1, &groups, err));
    if (groups != 1)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'groups': %d is not supported (only 1)",
                                groups);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, "padding");
    l->same = false;
    l->pad[0] = 0; /* 1: causal */
    if (cJSON_IsString(p) && !strcmp(p->valuestring, "same"))
        l->same = true;
    else if (cJSON_IsString(p) && !strcmp(p->valuestring, "causal"))
        l->pad[0] = 1;
    else if (p && !cJSON_IsNull(p) && !(cJSON_IsString(p) && !strcmp(p->valuestring, "valid")))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'padding': %s is not supported (\"valid\", \"same\" or "
                                "\"causal\")",
                                cJSON_IsString(p) ? p->valuestring : "a non-string");
    DT_TRY(dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err));
    DT_TRY(dt__nn_cfg_activation(l, cfg, "activation", &l->act, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    DT_TRY(dt__nn_cfg_kernel_bias(l, cfg, err));
    return dt__nn_cfg_null(l, cfg, "lora_rank", err);
}

/* The (T, 1, C) window of a 1D layer with kernel l->kh, stride l->sh, dilation l->dil[0]:
 * Keras's "valid" and "same" sizes, or "causal" (l->pad[0]): the whole dilated span of
 * padding before, none after, so output t sees inputs up to t. */
static dt_status window1d(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(seq_input(l, err));
    const dt_nn_shape *in = &l->in_shape[0];
    int d = l->dil[0] > 0 ? l->dil[0] : 1, span = (l->kh - 1) * d + 1, T = in->d[0];
    dt_nn_win *g = &l->win;
    *g = (dt_nn_win){.h = T,
                     .w = 1,
                     .c = in->d[1],
                     .kh = l->kh,
                     .kw = 1,
                     .sh = l->sh,
                     .sw = 1,
                     .dil_h = d,
                     .dil_w = 1,
                     .ow = 1};
    if (l->pad[0]) {
        g->pt = span - 1;
        g->oh = (T - 1) / l->sh + 1;
    } else if (l->same) {
        g->oh = (T + l->sh - 1) / l->sh;
        int total = (g->oh - 1) * l->sh + span - T;
        g->pt = total > 0 ? total / 2 : 0;
    } else {
        g->oh = T >= span ? (T - span) / l->sh + 1 : 0;
    }
    if (g->oh < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "window of %d does not fit the %d timesteps (output would be "
                                "empty)",
                                span, T);
    return DT_OK;
}

/* As Conv2D's build: the im2col rows of a small layer are kept from forward to backward. */
#define KEEP_COL_BYTES (256u << 10)

static dt_status conv1d_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(window1d(l, err));
    const dt_nn_win *g = &l->win;
    l->out = (dt_nn_shape){2, {g->oh, l->units}};
    dt__nn_weight *k =
        dt__nn_add_weight(l, "kernel", (dt_nn_shape){3, {l->kh, g->c, l->units}}, true, l->kinit);
    k->l1 = l->kl1;
    k->l2 = l->kl2;
    if (l->use_bias) {
        dt__nn_weight *b =
            dt__nn_add_weight(l, "bias", (dt_nn_shape){1, {l->units}}, true, l->binit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    if (!(l->kh == 1 && l->sh == 1)) {
        l->win.ones = l->use_bias;
        l->col_floats = (size_t)g->oh * (g->kh * g->c + (l->win.ones ? 1 : 0));
        if (l->col_floats * sizeof(float) <= KEEP_COL_BYTES)
            l->aux_bytes = l->col_floats * sizeof(float);
    }
    return DT_OK;
}

static void conv1d_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt__nn_conv2d.forward(l, c);
}

static void conv1d_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt__nn_conv2d.backward(l, c);
}

const dt__nn_layer_vt dt__nn_conv1d = {
    .class_name = "Conv1D",
    .parse = conv1d_parse,
    .build = conv1d_build,
    .forward = conv1d_forward,
    .backward = conv1d_backward,
    .keys = conv1d_keys,
};

/* ---- MaxPooling1D, AveragePooling1D, GlobalMaxPooling1D: the 2D pool kernels ---------------- */

static const char *const pool1d_keys[] = {"pool_size", "strides", "padding", "data_format", NULL};

static dt_status pool1d_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(cfg_one(l, cfg, "pool_size", 2, 1, &l->kh, err));
    DT_TRY(cfg_one(l, cfg, "strides", 0, 1, &l->sh, err));
    if (!l->sh) /* none: the pool size */
        l->sh = l->kh;
    l->kw = l->sw = l->dil[0] = l->dil[1] = 1;
    DT_TRY(dt__nn_cfg_padding(l, cfg, &l->same, err));
    return dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err);
}

static bool is_max(const dt__nn_layer *l)
{
    return l->vt == &dt__nn_maxpool1d || l->vt == &dt__nn_gmp1d;
}

static dt_status pool1d_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(window1d(l, err));
    l->out = (dt_nn_shape){2, {l->win.oh, l->win.c}};
    if (is_max(l))
        l->aux_bytes = dt__nn_shape_size(&l->out) * sizeof(int32_t); /* argmax */
    return DT_OK;
}

static void pool1d_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    l->win.n = c->n;
    c->ops->pool_fwd(is_max(l) ? DT_NN_POOL_MAX : DT_NN_POOL_AVG, &l->win, dt__nn_x(c, l, 0), l->y,
                     l->aux);
}

static void pool1d_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    l->win.n = c->n;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->pool_bwd(is_max(l) ? DT_NN_POOL_MAX : DT_NN_POOL_AVG, &l->win, l->dy, l->aux, dx, acc);
}

const dt__nn_layer_vt dt__nn_maxpool1d = {
    .class_name = "MaxPooling1D",
    .parse = pool1d_parse,
    .build = pool1d_build,
    .forward = pool1d_forward,
    .backward = pool1d_backward,
    .keys = pool1d_keys,
};

const dt__nn_layer_vt dt__nn_avgpool1d = {
    .class_name = "AveragePooling1D",
    .parse = pool1d_parse,
    .build = pool1d_build,
    .forward = pool1d_forward,
    .backward = pool1d_backward,
    .keys = pool1d_keys,
};

static const char *const gpool1d_keys[] = {"data_format", "keepdims", NULL};

static dt_status gpool1d_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err));
    return dt__nn_cfg_bool(l, cfg, "keepdims", false, &l->keepdims, err);
}

static dt_status gpool1d_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(seq_input(l, err));
    l->kh = l->sh = l->in_shape[0].d[0];
    l->kw = l->sw = l->dil[0] = l->dil[1] = 1;
    l->same = false;
    l->pad[0] = 0;
    DT_TRY(pool1d_build(l, err));
    int ch = l->win.c;
    l->out = l->keepdims ? (dt_nn_shape){2, {1, ch}} : (dt_nn_shape){1, {ch}};
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_gmp1d = {
    .class_name = "GlobalMaxPooling1D",
    .parse = gpool1d_parse,
    .build = gpool1d_build,
    .forward = pool1d_forward,
    .backward = pool1d_backward,
    .keys = gpool1d_keys,
};

/* GlobalAveragePooling1D: with a mask, the mean over the real timesteps only, as Keras's
 * sum(x * mask) / sum(mask) (a sample whose every step is masked gets 0 here, NaN in Keras). */
static void gap1d_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    const dt_nn_shape *in = &l->in_shape[0];
    c->ops->seq_mean(c->n, in->d[0], in->d[1], dt__nn_x(c, l, 0), dt__nn_in_mask(c, l, 0), l->y);
}

static void gap1d_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    const dt_nn_shape *in = &l->in_shape[0];
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->seq_mean_bwd(c->n, in->d[0], in->d[1], l->dy, dt__nn_in_mask(c, l, 0), dx, acc);
}

const dt__nn_layer_vt dt__nn_gap1d = {
    .class_name = "GlobalAveragePooling1D",
    .parse = gpool1d_parse,
    .build = gpool1d_build,
    .forward = gap1d_forward,
    .backward = gap1d_backward,
    .keys = gpool1d_keys,
};

/* ---- LayerNormalization over the last axis ------------------------------------------------- */

static const char *const ln_keys[] = {"axis",
                                      "epsilon",
                                      "center",
                                      "scale",
                                      "rms_scaling",
                                      "beta_initializer",
                                      "gamma_initializer",
                                      "beta_regularizer",
                                      "gamma_regularizer",
                                      "beta_constraint",
                                      "gamma_constraint",
                                      NULL};

static dt_status ln_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1)
        a = cJSON_GetArrayItem(a, 0);
    l->units = -1; /* the axis, counting the batch axis as Keras does; checked in build */
    if (a && !cJSON_IsNull(a) && !dt__nn_int(a, -DT_NN_MAX_RANK - 1, DT_NN_MAX_RANK, &l->units))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'axis': only the last axis is supported (-1 or [-1])");
    DT_TRY(dt__nn_cfg_float(l, cfg, "epsilon", 1e-3f, &l->eps, err));
    if (!(l->eps > 0))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'epsilon': %g is not > 0",
                                (double)l->eps);
    DT_TRY(dt__nn_cfg_bool(l, cfg, "center", true, &l->center, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "scale", true, &l->scale_on, err));
    bool rms;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "rms_scaling", false, &rms, err));
    if (rms)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'rms_scaling' is not supported");
    DT_TRY(dt__nn_cfg_init(l, cfg, "beta_initializer", (dt__nn_init){.kind = DT_NN_INIT_ZEROS},
                           &l->beinit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "gamma_initializer", (dt__nn_init){.kind = DT_NN_INIT_ONES},
                           &l->ginit, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "beta_regularizer", &l->bl1, &l->bl2, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "gamma_regularizer", &l->kl1, &l->kl2, err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "beta_constraint", err));
    return dt__nn_cfg_null(l, cfg, "gamma_constraint", err);
}

static int ln_cols(const dt__nn_layer *l)
{
    return l->out.d[l->out.rank - 1];
}

static size_t ln_rows(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return (size_t)c->n * (dt__nn_shape_size(&l->out) / (size_t)ln_cols(l));
}

static dt_status ln_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs an input with at least one axis");
    if (l->units != -1 && l->units != in->rank)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'axis': %d is not supported (only the last axis, -1)",
                                l->units);
    l->out = *in;
    int cols = in->d[in->rank - 1];
    dt_nn_shape v = {1, {cols}};
    if (l->scale_on) {
        dt__nn_weight *g = dt__nn_add_weight(l, "gamma", v, true, l->ginit);
        g->l1 = l->kl1;
        g->l2 = l->kl2;
    }
    if (l->center) {
        dt__nn_weight *b = dt__nn_add_weight(l, "beta", v, true, l->beinit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    /* aux: xhat, then one rstd per row */
    size_t size = dt__nn_shape_size(in);
    l->aux_bytes = (size + size / (size_t)cols) * sizeof(float);
    return DT_OK;
}

static void ln_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t rows = ln_rows(l, c);
    int cols = ln_cols(l);
    float *xhat = l->aux, *rstd = xhat + rows * (size_t)cols;
    const float *gamma = l->scale_on ? l->w[0].data : NULL;
    const float *beta = l->center ? l->w[l->scale_on ? 1 : 0].data : NULL;
    c->ops->ln_fwd(dt__nn_x(c, l, 0), l->y, xhat, rstd, rows, cols, gamma, beta, l->eps);
}

static void ln_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t rows = ln_rows(l, c);
    int cols = ln_cols(l);
    const float *xhat = l->aux, *rstd = xhat + rows * (size_t)cols;
    const float *gamma = l->scale_on ? l->w[0].data : NULL;
    float *dg = l->scale_on ? l->w[0].grad : NULL;
    float *db = l->center ? l->w[l->scale_on ? 1 : 0].grad : NULL;
    if (dg || db)
        c->ops->ln_bwd(l->dy, xhat, rstd, rows, cols, gamma, NULL, false, dg, db);
    dt__nn_weights_done(c, l);
    if (!dt__nn_need_dx(c, l, 0))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->ln_bwd(l->dy, xhat, rstd, rows, cols, gamma, dx, acc, NULL, NULL);
}

const dt__nn_layer_vt dt__nn_layernorm = {
    .class_name = "LayerNormalization",
    .parse = ln_parse,
    .build = ln_build,
    .forward = ln_forward,
    .backward = ln_backward,
    .keys = ln_keys,
    .mask = DT_NN_MASK_PASS,
};

/* ---- TimeDistributed(Dense): Dense already maps the last axis, step by step ---------------
 * The mask passes, as in Keras 2 and Keras 3 releases (Keras's master of July 2026 turned
 * supports_masking off for TimeDistributed and the RNN layers). */

static const char *const td_keys[] = {"layer", NULL};

static dt_status td_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(cfg, "layer");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(inner, "class_name");
    const cJSON *ic = cJSON_GetObjectItemCaseSensitive(inner, "config");
    if (!cJSON_IsObject(inner) || !cJSON_IsString(cn) || !cJSON_IsObject(ic))
        return dt__nn_layer_err(
            l, DT_EINVAL, err, "option 'layer': expected {\"class_name\": ..., \"config\": {...}}");
    if (strcmp(cn->valuestring, "Dense") != 0)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'layer': %s is not supported (only Dense)",
                                cn->valuestring);
    const cJSON *k;
    cJSON_ArrayForEach(k, ic)
    {
        bool known = !strcmp(k->string, "name") || !strcmp(k->string, "trainable") ||
                     !strcmp(k->string, "dtype");
        for (const char *const *p = dt__nn_dense.keys; !known && *p; p++)
            known = !strcmp(*p, k->string);
        if (!known)
            return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'layer.config.%s' is not supported",
                                    k->string);
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(ic, "dtype");
    if (cJSON_IsObject(d)) { /* Keras 3 DTypePolicy */
        const cJSON *dc = cJSON_GetObjectItemCaseSensitive(d, "config");
        d = dc ? cJSON_GetObjectItemCaseSensitive(dc, "name") : NULL;
    }
    if (d && !cJSON_IsNull(d) && !(cJSON_IsString(d) && !strcmp(d->valuestring, "float32")))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'layer.config.dtype' is not supported (only float32)");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ic, "name");
    const char *wn = cJSON_IsString(nm) && nm->valuestring[0] ? nm->valuestring : "dense";
    if (strlen(wn) >= sizeof l->inner || strchr(wn, '/'))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'layer.config.name': longer than %zu characters or "
                                "containing '/' (its weights are named \"<layer>/<name>/<var>\")",
                                sizeof l->inner - 1);
    snprintf(l->inner, sizeof l->inner, "%s", wn);
    bool tr;
    DT_TRY(dt__nn_cfg_bool(l, ic, "trainable", true, &tr, err));
    l->trainable = l->trainable && tr;
    return dt__nn_dense.parse(l, ic, err);
}

static dt_status td_build(dt__nn_layer *l, dt_err *err)
{
    if (l->in_shape[0].rank < 2)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs an input with timesteps and features, got rank %d",
                                l->in_shape[0].rank);
    DT_TRY(dt__nn_dense.build(l, err));
    /* Keras 3 builds the wrapped layer inside the wrapper's name scope:
     * "time_distributed/dense/kernel" (tf.keras 2 named it "time_distributed/kernel:0"). */
    for (int i = 0; i < l->n_w; i++) {
        char var[12]; /* "kernel", "bias" */
        snprintf(var, sizeof var, "%s", l->w[i].var);
        snprintf(l->w[i].var, sizeof l->w[i].var, "%s/%s", l->inner, var);
    }
    return DT_OK;
}

static void td_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt__nn_dense.forward(l, c);
}

static void td_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt__nn_dense.backward(l, c);
}

const dt__nn_layer_vt dt__nn_time_distributed = {
    .class_name = "TimeDistributed",
    .parse = td_parse,
    .build = td_build,
    .forward = td_forward,
    .backward = td_backward,
    .keys = td_keys,
    .mask = DT_NN_MASK_PASS,
};
