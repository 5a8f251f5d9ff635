/* layers_core.c - InputLayer, Dense, Flatten, Reshape, Dropout, the activation layers
 * (Activation, ReLU, LeakyReLU, Softmax) and Rescaling. */
#include "nn/layer.h"

#include "core/limits.h"

#include <math.h>
#include <string.h>

void dt__nn_act_out(dt__nn_layer *l, dt__nn_ctx *c, size_t rows, int cols)
{
    if (l->act.kind != DT_NN_ACT_LINEAR && !l->act_to_consumer)
        c->ops->act_fwd(&l->act, l->z, l->y, rows, cols);
}

void dt__nn_act_grad(dt__nn_layer *l, dt__nn_ctx *c, size_t rows, int cols)
{
    if (l->act.kind != DT_NN_ACT_LINEAR && !l->fused_loss && !l->act_to_consumer)
        c->ops->act_bwd(&l->act, l->z, l->y, l->dy, l->dy, rows, cols, false);
}

static size_t rows_of(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return (size_t)c->n * (dt__nn_shape_size(&l->out) / (size_t)l->out.d[l->out.rank - 1]);
}

/* ---- InputLayer: the model copies the batch into y ---------------------------------------- */

static const char *const input_keys[] = {
    "batch_shape", "batch_input_shape", "input_shape", "sparse", "ragged", "optional", NULL};

static dt_status input_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    bool b;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "sparse", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'sparse': sparse inputs are not supported");
    DT_TRY(dt__nn_cfg_bool(l, cfg, "ragged", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'ragged': ragged inputs are not supported");
    DT_TRY(dt__nn_cfg_bool(l, cfg, "optional", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'optional': optional inputs are not supported");
    return DT_OK;
}

static dt_status input_build(dt__nn_layer *l, dt_err *err)
{
    if (l->decl.rank < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "no input shape (\"batch_shape\" or \"batch_input_shape\")");
    l->out = l->decl;
    return DT_OK;
}

static void nop(dt__nn_layer *l, dt__nn_ctx *c)
{
    (void)l;
    (void)c;
}

const dt__nn_layer_vt dt__nn_input_layer = {
    .class_name = "InputLayer",
    .parse = input_parse,
    .build = input_build,
    .forward = nop,
    .backward = nop,
    .keys = input_keys,
};

/* ---- Dense: y (rows, units) = act(x (rows, in) kernel (in, units) + bias) -------------------- */

static const char *const dense_keys[] = {"units",
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
                                         "quantization_config",
                                         NULL};

static dt_status dense_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_int(l, cfg, "units", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 24))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'units': %d is not in 1..16777216",
                                l->units);
    DT_TRY(dt__nn_cfg_activation(l, cfg, "activation", &l->act, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    DT_TRY(dt__nn_cfg_kernel_bias(l, cfg, err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "lora_rank", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "quantization_config", err));
    return DT_OK;
}

static dt_status dense_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs an input with at least one axis");
    l->out = *in;
    l->out.d[in->rank - 1] = l->units;
    dt__nn_weight *k = dt__nn_add_weight(
        l, "kernel", (dt_nn_shape){2, {in->d[in->rank - 1], l->units}}, true, l->kinit);
    k->l1 = l->kl1;
    k->l2 = l->kl2;
    if (l->use_bias) {
        dt__nn_weight *b =
            dt__nn_add_weight(l, "bias", (dt_nn_shape){1, {l->units}}, true, l->binit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    return DT_OK;
}

static void dense_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t rows = rows_of(l, c);
    int in = l->w[0].shape.d[0];
    dt_nn_gemm(c->ops, false, false, (int)rows, l->units, in, 1.0f, dt__nn_x(c, l, 0), in,
               l->w[0].data, l->units, 0.0f, dt__nn_pre(l), l->units);
    if (l->use_bias)
        c->ops->bias_add(dt__nn_pre(l), l->w[1].data, rows, l->units);
    dt__nn_act_out(l, c, rows, l->units);
}

static void dense_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t rows = rows_of(l, c);
    int in = l->w[0].shape.d[0];
    dt__nn_act_grad(l, c, rows, l->units); /* dy (rows, units) is now d pre-activation */
    /* dkernel (in, units) = x^T dz; no gradient buffers when the layer is not trainable */
    if (l->w[0].grad)
        dt_nn_gemm(c->ops, true, false, in, l->units, (int)rows, 1.0f, dt__nn_x(c, l, 0), in, l->dy,
                   l->units, 0.0f, l->w[0].grad, l->units);
    if (l->use_bias && l->w[1].grad)
        c->ops->bias_grad(l->dy, rows, l->units, l->w[1].grad, false);
    dt__nn_weights_done(c, l);
    if (dt__nn_need_dx(c, l, 0)) { /* dx (rows, in) = dz kernel^T */
        bool acc;
        float *dx = dt__nn_dx(c, l, 0, &acc);
        dt_nn_gemm(c->ops, false, true, (int)rows, in, l->units, 1.0f, l->dy, l->units,
                   l->w[0].data, l->units, acc ? 1.0f : 0.0f, dx, in);
    }
}

const dt__nn_layer_vt dt__nn_dense = {
    .class_name = "Dense",
    .parse = dense_parse,
    .build = dense_build,
    .forward = dense_forward,
    .backward = dense_backward,
    .keys = dense_keys,
    .mask = DT_NN_MASK_PASS,
};

/* ---- Flatten and Reshape: views of their input (model.c aliases y and dy) ------------------ */

static const char *const flatten_keys[] = {"data_format", NULL};

static dt_status flatten_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err);
}

static dt_status flatten_build(dt__nn_layer *l, dt_err *err)
{
    (void)err;
    l->out = (dt_nn_shape){1, {(int)dt__nn_shape_size(&l->in_shape[0])}};
    l->alias = true;
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_flatten = {
    .class_name = "Flatten",
    .parse = flatten_parse,
    .build = flatten_build,
    .forward = nop,
    .backward = nop,
    .keys = flatten_keys,
};

static const char *const reshape_keys[] = {"target_shape", NULL};

static dt_status reshape_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "target_shape");
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    if (n < 1 || n > DT_NN_MAX_RANK)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'target_shape': expected a list of 1 to %d integers",
                                DT_NN_MAX_RANK);
    l->target.rank = n;
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(t, i);
        if (!dt__nn_int(d, -1, DT_MAX_NN_DIM, &l->target.d[i]) || l->target.d[i] == 0)
            return dt__nn_layer_err(l, DT_EINVAL, err,
                                    "option 'target_shape': item %d must be an integer in 1..%d "
                                    "or -1",
                                    i, DT_MAX_NN_DIM);
    }
    return DT_OK;
}

static dt_status reshape_build(dt__nn_layer *l, dt_err *err)
{
    size_t total = dt__nn_shape_size(&l->in_shape[0]), known = 1;
    int unknown = -1;
    for (int i = 0; i < l->target.rank; i++) {
        if (l->target.d[i] == -1) {
            if (unknown >= 0)
                return dt__nn_layer_err(l, DT_EINVAL, err, "option 'target_shape': at most one -1");
            unknown = i;
        } else {
            known *= (size_t)l->target.d[i];
        }
    }
    l->out = l->target;
    if (unknown >= 0 && known && total % known == 0)
        l->out.d[unknown] = (int)(total / known);
    if (dt__nn_shape_size(&l->out) != total || (unknown >= 0 && total % known))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'target_shape': %zu input values do not fit the target",
                                total);
    l->alias = true;
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_reshape = {
    .class_name = "Reshape",
    .parse = reshape_parse,
    .build = reshape_build,
    .forward = nop,
    .backward = nop,
    .keys = reshape_keys,
};

/* ---- Dropout: inverted dropout in training, identity otherwise ----------------------------- */

static const char *const dropout_keys[] = {"rate", "noise_shape", "seed", NULL};

static dt_status dropout_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_float(l, cfg, "rate", 0, &l->rate, err));
    if (l->rate < 0 || l->rate >= 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'rate': %g is not in [0, 1)",
                                (double)l->rate);
    DT_TRY(dt__nn_cfg_null(l, cfg, "noise_shape", err));
    int seed;
    return dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err); /* the model's seed drives masks */
}

static dt_status same_shape_build(dt__nn_layer *l, dt_err *err)
{
    (void)err;
    l->out = l->in_shape[0];
    return DT_OK;
}

static dt_status dropout_build(dt__nn_layer *l, dt_err *err)
{
    l->aux_bytes = dt__nn_shape_size(&l->in_shape[0]) * sizeof(float); /* mask */
    return same_shape_build(l, err);
}

static bool dropout_active(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return c->training && l->rate > 0;
}

static void dropout_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = (size_t)c->n * dt__nn_shape_size(&l->out);
    if (dropout_active(l, c))
        dt__nn_drop(c, dt__nn_x(c, l, 0), l->y, l->aux, n, l->rate);
    else
        c->ops->copy(n, dt__nn_x(c, l, 0), l->y, false);
}

static void dropout_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    size_t n = (size_t)c->n * dt__nn_shape_size(&l->out);
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (dropout_active(l, c))
        c->ops->mul(n, l->dy, l->aux, dx, acc);
    else
        c->ops->copy(n, l->dy, dx, acc);
}

const dt__nn_layer_vt dt__nn_dropout = {
    .class_name = "Dropout",
    .parse = dropout_parse,
    .build = dropout_build,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .keys = dropout_keys,
    .mask = DT_NN_MASK_PASS,
};

/* ---- activation layers: y = act(x); the input's y serves as z -------------------------------- */

static void act_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->relu_in_bn) /* its batch norm applied it (y and dy are the batch norm's) */
        return;
    int cols = l->out.d[l->out.rank - 1];
    c->ops->act_fwd(&l->act, dt__nn_x(c, l, 0), l->y, rows_of(l, c), cols);
}

static void act_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->relu_in_bn || !dt__nn_need_dx(c, l, 0))
        return;
    int cols = l->out.d[l->out.rank - 1];
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (l->fused_loss)
        c->ops->copy(rows_of(l, c) * (size_t)cols, l->dy, dx, acc);
    else
        c->ops->act_bwd(&l->act, dt__nn_x(c, l, 0), l->y, l->dy, dx, rows_of(l, c), cols, acc);
}

static const char *const activation_keys[] = {"activation", NULL};

static dt_status activation_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return dt__nn_cfg_activation(l, cfg, "activation", &l->act, err);
}

const dt__nn_layer_vt dt__nn_activation = {
    .class_name = "Activation",
    .parse = activation_parse,
    .build = same_shape_build,
    .forward = act_forward,
    .backward = act_backward,
    .keys = activation_keys,
    .mask = DT_NN_MASK_PASS,
};

static const char *const relu_keys[] = {"max_value", "negative_slope", "threshold", NULL};

static dt_status relu_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    float mx, slope, thr;
    DT_TRY(dt__nn_cfg_float(l, cfg, "max_value", INFINITY, &mx, err));
    DT_TRY(dt__nn_cfg_float(l, cfg, "negative_slope", 0, &slope, err));
    DT_TRY(dt__nn_cfg_float(l, cfg, "threshold", 0, &thr, err));
    if (mx < 0 || slope < 0)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "options 'max_value' and 'negative_slope' must be >= 0");
    l->act =
        (dt_nn_act_p){.kind = DT_NN_ACT_RELU, .alpha = slope, .max_value = mx, .threshold = thr};
    if (slope != 0 || thr != 0 || isfinite(mx))
        l->act.kind = DT_NN_ACT_RELU_CAPPED;
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_relu = {
    .class_name = "ReLU",
    .parse = relu_parse,
    .build = same_shape_build,
    .forward = act_forward,
    .backward = act_backward,
    .keys = relu_keys,
    .mask = DT_NN_MASK_PASS,
};

static const char *const leaky_keys[] = {"negative_slope", "alpha", NULL};

static dt_status leaky_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    float k3, k2;
    DT_TRY(dt__nn_cfg_float(l, cfg, "negative_slope", NAN, &k3, err)); /* Keras 3 */
    DT_TRY(dt__nn_cfg_float(l, cfg, "alpha", NAN, &k2, err));          /* Keras 2 */
    l->act = (dt_nn_act_p){.kind = DT_NN_ACT_LEAKY_RELU,
                           .alpha = !isnan(k3) ? k3 : (!isnan(k2) ? k2 : 0.3f)};
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_leaky_relu = {
    .class_name = "LeakyReLU",
    .parse = leaky_parse,
    .build = same_shape_build,
    .forward = act_forward,
    .backward = act_backward,
    .keys = leaky_keys,
    .mask = DT_NN_MASK_PASS,
};

static const char *const softmax_keys[] = {"axis", NULL};

static dt_status softmax_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1)
        a = cJSON_GetArrayItem(a, 0);
    l->act = (dt_nn_act_p){.kind = DT_NN_ACT_SOFTMAX};
    l->units = -1;
    if (a && !cJSON_IsNull(a) && !dt__nn_int(a, -DT_NN_MAX_RANK - 1, DT_NN_MAX_RANK, &l->units))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'axis': expected an integer");
    return DT_OK;
}

static dt_status softmax_build(dt__nn_layer *l, dt_err *err)
{
    int rank = l->in_shape[0].rank;
    if (l->units != -1 && l->units != rank) /* axis counts the batch axis */
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'axis': %d is not supported (only the last axis, -1)",
                                l->units);
    return same_shape_build(l, err);
}

const dt__nn_layer_vt dt__nn_softmax = {
    .class_name = "Softmax",
    .parse = softmax_parse,
    .build = softmax_build,
    .forward = act_forward,
    .backward = act_backward,
    .keys = softmax_keys,
};

/* ---- Rescaling: y = x * scale + offset ------------------------------------------------------ */

static const char *const rescaling_keys[] = {"scale", "offset", NULL};

static dt_status rescaling_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_float(l, cfg, "scale", 1, &l->scale, err));
    return dt__nn_cfg_float(l, cfg, "offset", 0, &l->offset, err);
}

static void rescaling_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = (size_t)c->n * dt__nn_shape_size(&l->out);
    c->ops->fill(n, l->offset, l->y);
    c->ops->axpby(n, l->scale, dt__nn_x(c, l, 0), 1.0f, l->y);
}

static void rescaling_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    size_t n = (size_t)c->n * dt__nn_shape_size(&l->out);
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (!acc)
        c->ops->fill(n, 0.0f, dx);
    c->ops->axpby(n, l->scale, l->dy, 1.0f, dx);
}

const dt__nn_layer_vt dt__nn_rescaling = {
    .class_name = "Rescaling",
    .parse = rescaling_parse,
    .build = same_shape_build,
    .forward = rescaling_forward,
    .backward = rescaling_backward,
    .keys = rescaling_keys,
};
