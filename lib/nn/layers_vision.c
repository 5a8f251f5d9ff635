/* layers_vision.c - the layers MobileNet-style models add to the CNN set: the merge layers
 * Multiply, Subtract, Average and Maximum (Add and Concatenate live in layers_norm.c),
 * Cropping2D, DepthwiseConv2D, SeparableConv2D and SpatialDropout2D. */
#include "nn/layer.h"

#include <string.h>

static size_t out_floats(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return (size_t)c->n * dt__nn_shape_size(&l->out);
}

/* ---- merge layers: element-wise over inputs of one shape ----------------------------------- */

/* Keras broadcasts inputs of different ranks; dtrain, like its Add, takes equal shapes only. */
static dt_status merge_build(dt__nn_layer *l, int min_in, int max_in, dt_err *err)
{
    if (l->n_in < min_in || l->n_in > max_in) {
        if (min_in == max_in)
            return dt__nn_layer_err(l, DT_EINVAL, err, "needs exactly %d inputs, got %d", min_in,
                                    l->n_in);
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs at least %d inputs, got %d", min_in,
                                l->n_in);
    }
    for (int i = 1; i < l->n_in; i++) {
        const dt_nn_shape *a = &l->in_shape[0], *b = &l->in_shape[i];
        if (a->rank != b->rank || memcmp(a->d, b->d, sizeof(int) * (size_t)a->rank) != 0)
            return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                    "input %d's shape differs from input 0's (broadcasting is "
                                    "not supported)",
                                    i);
    }
    l->out = l->in_shape[0];
    return DT_OK;
}

/* Multiply: y = prod x_i; dx_i = dy prod_{j != i} x_j (in aux when there are more than two). */
static dt_status multiply_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(merge_build(l, 2, DT_NN_MAX_IN, err));
    if (l->n_in > 2)
        l->aux_bytes = dt__nn_shape_size(&l->out) * sizeof(float);
    return DT_OK;
}

static void multiply_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = out_floats(l, c);
    c->ops->copy(n, dt__nn_x(c, l, 0), l->y, false);
    for (int i = 1; i < l->n_in; i++)
        c->ops->mul(n, l->y, dt__nn_x(c, l, i), l->y, false);
}

static void multiply_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = out_floats(l, c);
    for (int i = 0; i < l->n_in; i++) {
        if (!dt__nn_need_dx(c, l, i))
            continue;
        bool acc;
        float *dx = dt__nn_dx(c, l, i, &acc);
        if (l->n_in == 2) {
            c->ops->mul(n, l->dy, dt__nn_x(c, l, 1 - i), dx, acc);
            continue;
        }
        float *t = l->aux; /* (n, ...) dy times the other inputs */
        c->ops->copy(n, l->dy, t, false);
        for (int j = 0; j < l->n_in; j++)
            if (j != i)
                c->ops->mul(n, t, dt__nn_x(c, l, j), t, false);
        c->ops->copy(n, t, dx, acc);
    }
}

const dt__nn_layer_vt dt__nn_multiply = {
    .class_name = "Multiply",
    .build = multiply_build,
    .forward = multiply_forward,
    .backward = multiply_backward,
    .mask = DT_NN_MASK_PASS,
};

/* Subtract: y = x0 - x1 (Keras takes exactly two inputs). */
static dt_status subtract_build(dt__nn_layer *l, dt_err *err)
{
    return merge_build(l, 2, 2, err);
}

static void subtract_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = out_floats(l, c);
    c->ops->copy(n, dt__nn_x(c, l, 0), l->y, false);
    c->ops->axpby(n, -1.0f, dt__nn_x(c, l, 1), 1.0f, l->y);
}

/* dx (=/+=) a dy. */
static void scaled_grad(dt__nn_ctx *c, size_t n, float a, const float *dy, float *dx, bool acc)
{
    if (!acc)
        c->ops->fill(n, 0.0f, dx); /* not b = 0: 0 * a stale NaN stays NaN */
    c->ops->axpby(n, a, dy, 1.0f, dx);
}

static void subtract_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = out_floats(l, c);
    for (int i = 0; i < 2; i++) {
        if (!dt__nn_need_dx(c, l, i))
            continue;
        bool acc;
        float *dx = dt__nn_dx(c, l, i, &acc);
        if (i == 0)
            c->ops->copy(n, l->dy, dx, acc);
        else
            scaled_grad(c, n, -1.0f, l->dy, dx, acc);
    }
}

const dt__nn_layer_vt dt__nn_subtract = {
    .class_name = "Subtract",
    .build = subtract_build,
    .forward = subtract_forward,
    .backward = subtract_backward,
    .mask = DT_NN_MASK_PASS,
};

/* Average: y = sum x_i / k. */
static dt_status average_build(dt__nn_layer *l, dt_err *err)
{
    return merge_build(l, 2, DT_NN_MAX_IN, err);
}

static void average_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = out_floats(l, c);
    for (int i = 0; i < l->n_in; i++)
        c->ops->copy(n, dt__nn_x(c, l, i), l->y, i > 0);
    c->ops->axpby(n, 1.0f / (float)l->n_in, l->y, 0.0f, l->y);
}

static void average_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = out_floats(l, c);
    for (int i = 0; i < l->n_in; i++) {
        if (!dt__nn_need_dx(c, l, i))
            continue;
        bool acc;
        float *dx = dt__nn_dx(c, l, i, &acc);
        scaled_grad(c, n, 1.0f / (float)l->n_in, l->dy, dx, acc);
    }
}

const dt__nn_layer_vt dt__nn_average = {
    .class_name = "Average",
    .build = average_build,
    .forward = average_forward,
    .backward = average_backward,
    .mask = DT_NN_MASK_PASS,
};

/* Maximum: y = max x_i; aux holds which input won each element (uint8: DT_NN_MAX_IN <= 255). */
static dt_status maximum_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(merge_build(l, 2, DT_NN_MAX_IN, err));
    l->aux_bytes = dt__nn_shape_size(&l->out);
    return DT_OK;
}

static void maximum_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    const float *xs[DT_NN_MAX_IN];
    for (int i = 0; i < l->n_in; i++)
        xs[i] = dt__nn_x(c, l, i);
    c->ops->max_fwd(out_floats(l, c), l->n_in, xs, l->y, l->aux);
}

static void maximum_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    for (int i = 0; i < l->n_in; i++) {
        if (!dt__nn_need_dx(c, l, i))
            continue;
        bool acc;
        float *dx = dt__nn_dx(c, l, i, &acc);
        c->ops->max_bwd(out_floats(l, c), i, l->aux, l->dy, dx, acc);
    }
}

const dt__nn_layer_vt dt__nn_maximum = {
    .class_name = "Maximum",
    .build = maximum_build,
    .forward = maximum_forward,
    .backward = maximum_backward,
    .mask = DT_NN_MASK_PASS,
};

/* ---- Cropping2D: y is x without a frame (l->pad: top, bottom, left, right) ------------------ */

static const char *const crop_keys[] = {"cropping", "data_format", NULL};

static dt_status crop_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, "cropping");
    int v[4] = {0, 0, 0, 0}; /* Keras's default ((0, 0), (0, 0)) */
    bool ok = true;
    if (cJSON_IsNumber(p)) {
        ok = dt__nn_int(p, 0, 65536, &v[0]);
        v[1] = v[2] = v[3] = v[0];
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 2) {
        for (int i = 0; i < 2 && ok; i++) {
            const cJSON *e = cJSON_GetArrayItem(p, i);
            if (dt__nn_int(e, 0, 65536, &v[2 * i]))
                v[2 * i + 1] = v[2 * i]; /* (symmetric_height, symmetric_width) */
            else
                ok = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                     dt__nn_int(cJSON_GetArrayItem(e, 0), 0, 65536, &v[2 * i]) &&
                     dt__nn_int(cJSON_GetArrayItem(e, 1), 0, 65536, &v[2 * i + 1]);
        }
    } else if (p && !cJSON_IsNull(p)) {
        ok = false;
    }
    if (!ok)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'cropping': expected an integer >= 0, two of them or "
                                "[[top, bottom], [left, right]]");
    memcpy(l->pad, v, sizeof v);
    return dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err);
}

static dt_status crop_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank != 3)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs a (height, width, channels) input, got rank %d", in->rank);
    int oh = in->d[0] - l->pad[0] - l->pad[1], ow = in->d[1] - l->pad[2] - l->pad[3];
    if (oh < 1 || ow < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'cropping': removes all of the %dx%d input", in->d[0],
                                in->d[1]);
    l->out = (dt_nn_shape){3, {oh, ow, in->d[2]}};
    return DT_OK;
}

/* Each sample's kept window is oh rows of ow*C floats inside rows of W*C. */
static void crop_move(dt__nn_layer *l, dt__nn_ctx *c, const float *src, float *dst, bool backward,
                      bool acc)
{
    const dt_nn_shape *in = &l->in_shape[0];
    int W = in->d[1], C = in->d[2], OH = l->out.d[0], OW = l->out.d[1];
    size_t per_in = dt__nn_shape_size(in), per_out = dt__nn_shape_size(&l->out);
    size_t corner = ((size_t)l->pad[0] * W + l->pad[2]) * C;
    for (int n = 0; n < c->n; n++) {
        if (!backward)
            c->ops->copy2d((size_t)OH, OW * C, src + n * per_in + corner, W * C, dst + n * per_out,
                           OW * C, false);
        else
            c->ops->copy2d((size_t)OH, OW * C, src + n * per_out, OW * C, dst + n * per_in + corner,
                           W * C, acc);
    }
}

static void crop_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    crop_move(l, c, dt__nn_x(c, l, 0), l->y, false, false);
}

static void crop_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (!acc) /* the cropped frame gets no gradient */
        c->ops->fill((size_t)c->n * dt__nn_shape_size(&l->in_shape[0]), 0.0f, dx);
    crop_move(l, c, l->dy, dx, true, true);
}

const dt__nn_layer_vt dt__nn_cropping2d = {
    .class_name = "Cropping2D",
    .parse = crop_parse,
    .build = crop_build,
    .forward = crop_forward,
    .backward = crop_backward,
    .keys = crop_keys,
};

/* ---- DepthwiseConv2D ------------------------------------------------------------------------
 * y (N, OH, OW, C*M) = act(depthwise(x (N, H, W, C), depthwise_kernel (KH, KW, C, M)) + bias
 * (C*M)); output channel c*M + m is input channel c through kernel slice m, Keras's order. */

static const char *const dw_keys[] = {"kernel_size",
                                      "strides",
                                      "padding",
                                      "depth_multiplier",
                                      "data_format",
                                      "dilation_rate",
                                      "groups",
                                      "activation",
                                      "use_bias",
                                      "depthwise_initializer",
                                      "bias_initializer",
                                      "depthwise_regularizer",
                                      "bias_regularizer",
                                      "activity_regularizer",
                                      "depthwise_constraint",
                                      "bias_constraint",
                                      NULL};

dt_status dt__nn_cfg_dilation(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_pair(l, cfg, "dilation_rate", 1, l->dil, err));
    /* TF's convolution has no strided dilated form, and Keras refuses the pair. */
    if ((l->dil[0] > 1 || l->dil[1] > 1) && (l->sh > 1 || l->sw > 1))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'dilation_rate': [%d, %d] with strides [%d, %d] is not "
                                "supported (a rate > 1 needs strides 1, as in Keras)",
                                l->dil[0], l->dil[1], l->sh, l->sw);
    return DT_OK;
}

static dt_status dw_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    int k[2], s[2], groups;
    if (!cJSON_GetObjectItemCaseSensitive(cfg, "kernel_size"))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'kernel_size' is required");
    DT_TRY(dt__nn_cfg_pair(l, cfg, "kernel_size", 1, k, err));
    DT_TRY(dt__nn_cfg_pair(l, cfg, "strides", 1, s, err));
    l->kh = k[0], l->kw = k[1], l->sh = s[0], l->sw = s[1];
    DT_TRY(dt__nn_cfg_dilation(l, cfg, err));
    DT_TRY(dt__nn_cfg_int(l, cfg, "depth_multiplier", 1, &l->mult, err));
    if (l->mult < 1 || l->mult > 4096)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'depth_multiplier': %d is not in 1..4096", l->mult);
    DT_TRY(dt__nn_cfg_int(l, cfg, "groups", 1, &groups, err)); /* Keras 2 writes 1 */
    if (groups != 1)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'groups': %d is not supported (only 1)",
                                groups);
    DT_TRY(dt__nn_cfg_padding(l, cfg, &l->same, err));
    DT_TRY(dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err));
    DT_TRY(dt__nn_cfg_activation(l, cfg, "activation", &l->act, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "depthwise_initializer", DT_NN_INIT_GLOROT_UNIFORM_, &l->kinit,
                           err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "bias_initializer", (dt__nn_init){.kind = DT_NN_INIT_ZEROS},
                           &l->binit, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "depthwise_regularizer", &l->kl1, &l->kl2, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "bias_regularizer", &l->bl1, &l->bl2, err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "activity_regularizer", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "depthwise_constraint", err));
    return dt__nn_cfg_null(l, cfg, "bias_constraint", err);
}

static dt_status dw_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(dt__nn_window_build(l, err));
    const dt_nn_win *g = &l->win;
    int cm = g->c * l->mult;
    l->out = (dt_nn_shape){3, {g->oh, g->ow, cm}};
    dt__nn_weight *k = dt__nn_add_weight(
        l, "depthwise_kernel", (dt_nn_shape){4, {l->kh, l->kw, g->c, l->mult}}, true, l->kinit);
    k->l1 = l->kl1;
    k->l2 = l->kl2;
    if (l->use_bias) {
        dt__nn_weight *b = dt__nn_add_weight(l, "bias", (dt_nn_shape){1, {cm}}, true, l->binit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    return DT_OK;
}

static void dw_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t rows = (size_t)c->n * l->win.oh * l->win.ow;
    int cm = l->out.d[2];
    l->win.n = c->n;
    c->ops->dw_fwd(&l->win, l->mult, dt__nn_x(c, l, 0), l->w[0].data, dt__nn_pre(l));
    if (l->use_bias)
        c->ops->bias_add(dt__nn_pre(l), l->w[1].data, rows, cm);
    dt__nn_act_out(l, c, rows, cm);
}

static void dw_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t rows = (size_t)c->n * l->win.oh * l->win.ow;
    int cm = l->out.d[2];
    l->win.n = c->n;
    dt__nn_act_grad(l, c, rows, cm); /* dy (rows, C*M) is now d pre-activation */
    bool acc = false;
    float *dx = dt__nn_need_dx(c, l, 0) ? dt__nn_dx(c, l, 0, &acc) : NULL;
    if (l->use_bias && l->w[1].grad)
        c->ops->bias_grad(l->dy, rows, cm, l->w[1].grad, false);
    /* One pass yields both gradients, so the weights are reported done after dx too. */
    c->ops->dw_bwd(&l->win, l->mult, dt__nn_x(c, l, 0), l->w[0].data, l->dy, l->w[0].grad, dx, acc);
    dt__nn_weights_done(c, l);
}

const dt__nn_layer_vt dt__nn_depthwise_conv2d = {
    .class_name = "DepthwiseConv2D",
    .parse = dw_parse,
    .build = dw_build,
    .forward = dw_forward,
    .backward = dw_backward,
    .keys = dw_keys,
};

/* ---- SeparableConv2D ------------------------------------------------------------------------
 * t (N, OH, OW, C*M) = depthwise(x, depthwise_kernel (KH, KW, C, M)), kept in aux for the
 * pointwise kernel's gradient; y (N, OH, OW, F) = act(t pointwise_kernel (1, 1, C*M, F) + bias
 * (F)). Backward puts t's gradient in the im2col scratch. */

static const char *const sep_keys[] = {"filters",
                                       "kernel_size",
                                       "strides",
                                       "padding",
                                       "depth_multiplier",
                                       "data_format",
                                       "dilation_rate",
                                       "groups",
                                       "activation",
                                       "use_bias",
                                       "depthwise_initializer",
                                       "pointwise_initializer",
                                       "bias_initializer",
                                       "depthwise_regularizer",
                                       "pointwise_regularizer",
                                       "bias_regularizer",
                                       "activity_regularizer",
                                       "depthwise_constraint",
                                       "pointwise_constraint",
                                       "bias_constraint",
                                       NULL};

static dt_status sep_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    int filters;
    DT_TRY(dt__nn_cfg_int(l, cfg, "filters", 0, &filters, err));
    if (filters < 1 || filters > (1 << 20))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'filters': %d is not in 1..1048576",
                                filters);
    /* The depthwise half reads everything but the pointwise keys. */
    DT_TRY(dw_parse(l, cfg, err));
    l->units = filters;
    DT_TRY(dt__nn_cfg_init(l, cfg, "pointwise_initializer", DT_NN_INIT_GLOROT_UNIFORM_, &l->ginit,
                           err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "pointwise_regularizer", &l->pl1, &l->pl2, err));
    return dt__nn_cfg_null(l, cfg, "pointwise_constraint", err);
}

static dt_status sep_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(dt__nn_window_build(l, err));
    const dt_nn_win *g = &l->win;
    int m = l->mult, cm = g->c * m;
    l->out = (dt_nn_shape){3, {g->oh, g->ow, l->units}};
    dt__nn_weight *k = dt__nn_add_weight(l, "depthwise_kernel",
                                         (dt_nn_shape){4, {l->kh, l->kw, g->c, m}}, true, l->kinit);
    k->l1 = l->kl1;
    k->l2 = l->kl2;
    dt__nn_weight *p = dt__nn_add_weight(l, "pointwise_kernel",
                                         (dt_nn_shape){4, {1, 1, cm, l->units}}, true, l->ginit);
    p->l1 = l->pl1;
    p->l2 = l->pl2;
    if (l->use_bias) {
        dt__nn_weight *b =
            dt__nn_add_weight(l, "bias", (dt_nn_shape){1, {l->units}}, true, l->binit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    l->aux_bytes = (size_t)g->oh * g->ow * cm * sizeof(float); /* t */
    l->col_floats = (size_t)g->oh * g->ow * cm;                /* dt */
    return DT_OK;
}

static void sep_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    int m = l->mult, cm = l->win.c * m;
    size_t rows = (size_t)c->n * l->win.oh * l->win.ow;
    l->win.n = c->n;
    float *t = l->aux;
    c->ops->dw_fwd(&l->win, m, dt__nn_x(c, l, 0), l->w[0].data, t);
    dt_nn_gemm(c->ops, false, false, (int)rows, l->units, cm, 1.0f, t, cm, l->w[1].data, l->units,
               0.0f, dt__nn_pre(l), l->units);
    if (l->use_bias)
        c->ops->bias_add(dt__nn_pre(l), l->w[2].data, rows, l->units);
    dt__nn_act_out(l, c, rows, l->units);
}

static void sep_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    int m = l->mult, cm = l->win.c * m;
    size_t rows = (size_t)c->n * l->win.oh * l->win.ow;
    l->win.n = c->n;
    const float *t = l->aux;
    dt__nn_act_grad(l, c, rows, l->units); /* dy (rows, F) is now d pre-activation */
    if (l->w[1].grad)                      /* dpointwise (C*M, F) = t^T dz */
        dt_nn_gemm(c->ops, true, false, cm, l->units, (int)rows, 1.0f, t, cm, l->dy, l->units, 0.0f,
                   l->w[1].grad, l->units);
    if (l->use_bias && l->w[2].grad)
        c->ops->bias_grad(l->dy, rows, l->units, l->w[2].grad, false);
    bool acc = false;
    float *dx = dt__nn_need_dx(c, l, 0) ? dt__nn_dx(c, l, 0, &acc) : NULL;
    if (!l->w[0].grad && !dx) {
        dt__nn_weights_done(c, l);
        return;
    }
    float *dt = c->col; /* (rows, C*M) = dz pointwise^T */
    dt_nn_gemm(c->ops, false, true, (int)rows, cm, l->units, 1.0f, l->dy, l->units, l->w[1].data,
               l->units, 0.0f, dt, cm);
    c->ops->dw_bwd(&l->win, m, dt__nn_x(c, l, 0), l->w[0].data, dt, l->w[0].grad, dx, acc);
    dt__nn_weights_done(c, l);
}

const dt__nn_layer_vt dt__nn_separable_conv2d = {
    .class_name = "SeparableConv2D",
    .parse = sep_parse,
    .build = sep_build,
    .forward = sep_forward,
    .backward = sep_backward,
    .keys = sep_keys,
};

/* ---- SpatialDropout2D: Dropout of whole channels --------------------------------------------
 * In training, each (sample, channel) is kept with probability 1 - rate and scaled by
 * 1 / (1 - rate), as Keras's noise_shape (batch, 1, 1, channels) does. The per-channel draws
 * (n, C) go to the im2col scratch and are spread over the pixels into aux, the (n, H, W, C)
 * mask that backward multiplies by. */

static const char *const sdrop_keys[] = {"rate", "noise_shape", "seed", "data_format", NULL};

static dt_status sdrop_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_float(l, cfg, "rate", 0, &l->rate, err));
    if (l->rate < 0 || l->rate >= 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'rate': %g is not in [0, 1)",
                                (double)l->rate);
    DT_TRY(dt__nn_cfg_null(l, cfg, "noise_shape", err));
    DT_TRY(dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err));
    int seed;
    return dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err); /* the model's seed drives masks */
}

static dt_status sdrop_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (l->vt == &dt__nn_spatial_dropout1d && in->rank != 2)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs a (timesteps, channels) input, got rank %d", in->rank);
    if (l->vt == &dt__nn_spatial_dropout2d && in->rank != 3)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs a (height, width, channels) input, got rank %d", in->rank);
    l->out = *in;
    l->aux_bytes = dt__nn_shape_size(in) * sizeof(float); /* the mask */
    l->col_floats = 2 * (size_t)in->d[in->rank - 1];      /* ones and the draws, per sample */
    return DT_OK;
}

static bool sdrop_active(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return c->training && l->rate > 0;
}

static void sdrop_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t total = (size_t)c->n * dt__nn_shape_size(&l->out);
    if (!sdrop_active(l, c)) {
        c->ops->copy(total, dt__nn_x(c, l, 0), l->y, false);
        return;
    }
    int C = l->out.d[l->out.rank - 1], hw = (int)(dt__nn_shape_size(&l->out) / (size_t)C);
    size_t nc = (size_t)c->n * C;
    float *ones = c->col, *draw = c->col + nc, *mask = l->aux;
    c->ops->fill(nc, 1.0f, ones);
    /* draw = the (n, C) mask; the head of aux is its scratch until the spread overwrites it */
    dt__nn_drop(c, ones, draw, mask, nc, l->rate);
    for (int s = 0; s < c->n; s++) /* row stride 0: every pixel reads the sample's draws */
        c->ops->copy2d((size_t)hw, C, draw + (size_t)s * C, 0, mask + (size_t)s * hw * C, C, false);
    c->ops->mul(total, dt__nn_x(c, l, 0), mask, l->y, false);
}

static void sdrop_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    size_t total = (size_t)c->n * dt__nn_shape_size(&l->out);
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (sdrop_active(l, c))
        c->ops->mul(total, l->dy, l->aux, dx, acc);
    else
        c->ops->copy(total, l->dy, dx, acc);
}

const dt__nn_layer_vt dt__nn_spatial_dropout2d = {
    .class_name = "SpatialDropout2D",
    .parse = sdrop_parse,
    .build = sdrop_build,
    .forward = sdrop_forward,
    .backward = sdrop_backward,
    .keys = sdrop_keys,
};

/* SpatialDropout1D: whole channels of a (timesteps, channels) input, Keras's noise_shape
 * (batch, 1, channels); it passes the mask as Keras's Dropout does. */
const dt__nn_layer_vt dt__nn_spatial_dropout1d = {
    .class_name = "SpatialDropout1D",
    .parse = sdrop_parse,
    .build = sdrop_build,
    .forward = sdrop_forward,
    .backward = sdrop_backward,
    .keys = sdrop_keys,
    .mask = DT_NN_MASK_PASS,
};
