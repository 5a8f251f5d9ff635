/* layers_deconv.c - Conv2DTranspose: the adjoint of Conv2D's lowering. Its forward is Conv2D's
 * input-gradient path (a GEMM into col rows, then col2im) and its backward is Conv2D's forward
 * (im2col of dy, then GEMMs), over the window of the Conv2D that would map the transpose's output
 * back to its input. */
#include "nn/layer.h"

/* y (N, OH, OW, F) = act(col2im(x (N*H*W, C) kernel^T) + bias); kernel [kh, kw, F, C] as Keras
 * stores it (filters before input channels, the reverse of Conv2D), which read as a
 * (kh*kw*F, C) matrix is exactly the Conv2D kernel (kh, kw, F -> C) whose adjoint this is. */

static const char *const deconv_keys[] = {"filters",
                                          "kernel_size",
                                          "strides",
                                          "padding",
                                          "output_padding",
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
                                          NULL};

/* output_padding: null (l->pad[0] = -1: Keras's default rule), an int or two ints, each in
 * [0, stride) as Keras requires. */
static dt_status parse_output_padding(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, "output_padding");
    l->pad[0] = l->pad[1] = -1;
    if (!p || cJSON_IsNull(p))
        return DT_OK;
    int v[2];
    bool ok;
    if (cJSON_IsArray(p))
        ok = cJSON_GetArraySize(p) == 2 && dt__nn_int(cJSON_GetArrayItem(p, 0), 0, 65536, &v[0]) &&
             dt__nn_int(cJSON_GetArrayItem(p, 1), 0, 65536, &v[1]);
    else
        ok = dt__nn_int(p, 0, 65536, &v[0]) && dt__nn_int(p, 0, 65536, &v[1]);
    if (!ok)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'output_padding': expected null, an integer >= 0 or a "
                                "list of two");
    int s[2] = {l->sh, l->sw};
    for (int i = 0; i < 2; i++)
        if (v[i] < 0 || v[i] >= s[i])
            return dt__nn_layer_err(l, DT_EINVAL, err,
                                    "option 'output_padding': %d must be in [0, stride %d) (Keras "
                                    "requires the stride to be greater)",
                                    v[i], s[i]);
    l->pad[0] = v[0], l->pad[1] = v[1];
    return DT_OK;
}

static dt_status deconv_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    int k[2], s[2], d[2], groups;
    DT_TRY(dt__nn_cfg_int(l, cfg, "filters", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 20))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'filters': %d is not in 1..1048576",
                                l->units);
    if (!cJSON_GetObjectItemCaseSensitive(cfg, "kernel_size"))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'kernel_size' is required");
    DT_TRY(dt__nn_cfg_pair(l, cfg, "kernel_size", 1, k, err));
    DT_TRY(dt__nn_cfg_pair(l, cfg, "strides", 1, s, err));
    l->kh = k[0], l->kw = k[1], l->sh = s[0], l->sw = s[1];
    DT_TRY(dt__nn_cfg_pair(l, cfg, "dilation_rate", 1, d, err));
    if (d[0] != 1 || d[1] != 1)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'dilation_rate': [%d, %d] is not supported (only 1)", d[0],
                                d[1]);
    l->dil[0] = l->dil[1] = 1;
    DT_TRY(dt__nn_cfg_int(l, cfg, "groups", 1, &groups, err));
    if (groups != 1)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'groups': %d is not supported (only 1)",
                                groups);
    DT_TRY(dt__nn_cfg_padding(l, cfg, &l->same, err));
    DT_TRY(parse_output_padding(l, cfg, err));
    DT_TRY(dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err));
    DT_TRY(dt__nn_cfg_activation(l, cfg, "activation", &l->act, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    return dt__nn_cfg_kernel_bias(l, cfg, err);
}

/* Keras's deconv_output_length for one axis (op < 0: output_padding None). */
static long out_length(int in, int k, int s, bool same, int op)
{
    if (op < 0)
        return same ? (long)in * s : (long)in * s + (k > s ? k - s : 0);
    int pad = same ? k / 2 : 0;
    return (long)(in - 1) * s + k - 2 * pad + op;
}

/* The leading padding of the Conv2D that maps `out` cells back to `in` (TF's conv2d_transpose
 * is that conv's input gradient): "same" pads max((in - 1) s + k - out, 0) cells, the smaller
 * half first; "valid" pads none. Fails when that conv would not give `in` cells back (a
 * "same" layer with an even kernel and output_padding 0, which TF refuses when it runs). */
static bool conv_pad(int in, long out, int k, int s, bool same, int *pad_before)
{
    *pad_before = 0;
    if (!same)
        return out >= k && (out - k) / s + 1 == in;
    if ((out + s - 1) / s != in)
        return false;
    long total = (long)(in - 1) * s + k - out;
    *pad_before = total > 0 ? (int)(total / 2) : 0;
    return true;
}

static dt_status deconv_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank != 3)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs a (height, width, channels) input, got rank %d", in->rank);
    int H = in->d[0], W = in->d[1], C = in->d[2];
    long oh = out_length(H, l->kh, l->sh, l->same, l->pad[0]);
    long ow = out_length(W, l->kw, l->sw, l->same, l->pad[1]);
    if (oh < 1 || ow < 1 || oh > (1 << 20) || ow > (1 << 20))
        return dt__nn_layer_err(l, DT_EINVAL, err, "the output would be %ldx%ld", oh, ow);
    dt_nn_win *g = &l->win;
    *g = (dt_nn_win){.h = (int)oh,
                     .w = (int)ow,
                     .c = l->units,
                     .oh = H,
                     .ow = W,
                     .kh = l->kh,
                     .kw = l->kw,
                     .sh = l->sh,
                     .sw = l->sw,
                     .dil_h = 1,
                     .dil_w = 1};
    if (!conv_pad(H, oh, l->kh, l->sh, l->same, &g->pt) ||
        !conv_pad(W, ow, l->kw, l->sw, l->same, &g->pl))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'output_padding': the %ldx%ld output does not map back to "
                                "the %dx%d input with padding '%s' (Keras fails on it too)",
                                oh, ow, H, W, l->same ? "same" : "valid");
    l->out = (dt_nn_shape){3, {(int)oh, (int)ow, l->units}};
    dt__nn_weight *k = dt__nn_add_weight(l, "kernel", (dt_nn_shape){4, {l->kh, l->kw, l->units, C}},
                                         true, l->kinit);
    k->l1 = l->kl1;
    k->l2 = l->kl2;
    if (l->use_bias) {
        dt__nn_weight *b =
            dt__nn_add_weight(l, "bias", (dt_nn_shape){1, {l->units}}, true, l->binit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    l->col_floats = (size_t)H * W * l->kh * l->kw * l->units; /* the col rows, in c->col */
    return DT_OK;
}

static void deconv_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt_nn_win *g = &l->win;
    g->n = c->n;
    int rows = c->n * g->oh * g->ow, K = g->kh * g->kw * g->c, C = l->in_shape[0].d[2];
    /* col (rows, K) = x (rows, C) kernel^T, then every col cell is added to its output cell */
    dt_nn_gemm(c->ops, false, true, rows, K, C, 1.0f, dt__nn_x(c, l, 0), C, l->w[0].data, C, 0.0f,
               c->col, K);
    c->ops->col2im(g, c->col, dt__nn_pre(l), false);
    size_t out_rows = (size_t)c->n * g->h * g->w;
    if (l->use_bias)
        c->ops->bias_add(dt__nn_pre(l), l->w[1].data, out_rows, l->units);
    dt__nn_act_out(l, c, out_rows, l->units);
}

static void deconv_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    dt_nn_win *g = &l->win;
    g->n = c->n;
    int rows = c->n * g->oh * g->ow, K = g->kh * g->kw * g->c, C = l->in_shape[0].d[2];
    size_t out_rows = (size_t)c->n * g->h * g->w;
    dt__nn_act_grad(l, c, out_rows, l->units); /* dy is now d pre-activation */
    if (l->use_bias && l->w[1].grad)
        c->ops->bias_grad(l->dy, out_rows, l->units, l->w[1].grad, false);
    /* dcol (rows, K): the output gradient gathered back to every input cell's window */
    c->ops->im2col(g, l->dy, c->col);
    const float *x = dt__nn_x(c, l, 0);
    if (l->w[0].grad) /* dkernel (K, C) = dcol^T x */
        dt_nn_gemm(c->ops, true, false, K, C, rows, 1.0f, c->col, K, x, C, 0.0f, l->w[0].grad, C);
    dt__nn_weights_done(c, l);
    if (!dt__nn_need_dx(c, l, 0))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    /* dx (rows, C) (+)= dcol kernel */
    dt_nn_gemm(c->ops, false, false, rows, C, K, 1.0f, c->col, K, l->w[0].data, C,
               acc ? 1.0f : 0.0f, dx, C);
}

const dt__nn_layer_vt dt__nn_conv2d_transpose = {
    .class_name = "Conv2DTranspose",
    .parse = deconv_parse,
    .build = deconv_build,
    .forward = deconv_forward,
    .backward = deconv_backward,
    .keys = deconv_keys,
};
