/* layers_conv.c - the spatial layers over (N, H, W, C): Conv2D (im2col + GEMM), MaxPooling2D,
 * AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, ZeroPadding2D, UpSampling2D. */
#include "nn/layer.h"

#include <string.h>

/* im2col rows of at most this many bytes per sample are kept from forward to backward; larger
 * ones are recomputed in backward from the shared scratch, trading time for memory. */
#define KEEP_COL_BYTES (256u << 10)

/* Keras's output size and leading padding for one axis; a dilated window spans (k - 1) d + 1
 * input cells. */
static int out_size(int in, int k, int s, int d, bool same, int *pad_before)
{
    int span = (k - 1) * (d > 0 ? d : 1) + 1;
    if (!same) {
        *pad_before = 0;
        return in >= span ? (in - span) / s + 1 : 0;
    }
    int out = (in + s - 1) / s;
    int total = (out - 1) * s + span - in;
    *pad_before = total > 0 ? total / 2 : 0;
    return out;
}

static dt_status spatial_input(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank != 3)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "needs a (height, width, channels) input, got rank %d", in->rank);
    return DT_OK;
}

dt_status dt__nn_window_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(spatial_input(l, err));
    const dt_nn_shape *in = &l->in_shape[0];
    dt_nn_win *g = &l->win;
    *g = (dt_nn_win){.h = in->d[0],
                     .w = in->d[1],
                     .c = in->d[2],
                     .kh = l->kh,
                     .kw = l->kw,
                     .sh = l->sh,
                     .sw = l->sw,
                     .dil_h = l->dil[0],
                     .dil_w = l->dil[1]};
    g->oh = out_size(g->h, g->kh, g->sh, g->dil_h, l->same, &g->pt);
    g->ow = out_size(g->w, g->kw, g->sw, g->dil_w, l->same, &g->pl);
    if (g->oh < 1 || g->ow < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "window %dx%d does not fit the %dx%d input (output would be empty)",
                                g->kh, g->kw, g->h, g->w);
    return DT_OK;
}

static dt_status common_spatial_opts(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return dt__nn_cfg_string_is(l, cfg, "data_format", "channels_last", err);
}

/* ---- Conv2D -----------------------------------------------------------------------------------
 */

static const char *const conv_keys[] = {"filters",
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

static dt_status conv_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    int k[2], s[2], groups;
    DT_TRY(dt__nn_cfg_int(l, cfg, "filters", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 20))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'filters': %d is not in 1..1048576",
                                l->units);
    if (!cJSON_GetObjectItemCaseSensitive(cfg, "kernel_size"))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'kernel_size' is required");
    DT_TRY(dt__nn_cfg_pair(l, cfg, "kernel_size", 1, k, err));
    DT_TRY(dt__nn_cfg_pair(l, cfg, "strides", 1, s, err));
    l->kh = k[0], l->kw = k[1], l->sh = s[0], l->sw = s[1];
    DT_TRY(dt__nn_cfg_dilation(l, cfg, err));
    DT_TRY(dt__nn_cfg_int(l, cfg, "groups", 1, &groups, err));
    if (groups < 1 || groups > l->units || l->units % groups != 0)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'groups': %d must be >= 1 and divide filters %d", groups,
                                l->units);
    l->groups = groups;
    DT_TRY(dt__nn_cfg_padding(l, cfg, &l->same, err));
    DT_TRY(common_spatial_opts(l, cfg, err));
    DT_TRY(dt__nn_cfg_activation(l, cfg, "activation", &l->act, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    DT_TRY(dt__nn_cfg_kernel_bias(l, cfg, err));
    return dt__nn_cfg_null(l, cfg, "lora_rank", err);
}

static bool conv_is_1x1(const dt__nn_layer *l)
{
    return l->kh == 1 && l->kw == 1 && l->sh == 1 && l->sw == 1;
}

/* Rows of a 1x1 convolution's product per rnn_gemm call: about 192 KiB of its left operand, so
 * the block stays in L2 (with a 32-column panel of the packed right one, 120 KiB at k = 960)
 * while every panel passes over it. */
#define PACKED_BLOCK_BYTES (192u << 10)

/* c (m, n) = beta c + a B for beta 0 or 1, a (m, k) row stride lda, B = b (k, n) or with tb
 * b^T (b is (n, k)): the 1x1 convolutions' products (M = batch h w up to 73,728 rows, K and N
 * 16..1280). Where the backend has rnn_pack/rnn_gemm (the CPU's register-blocked FMA kernels)
 * B is packed once and a is walked in blocks of rows: 1.15-2.2x the single-threaded OpenBLAS
 * Haswell kernels on every MobileNetV2 shape, and each element is one fmaf chain over k, the
 * same bits on AVX-512 and AVX2 and whatever the block or a replica's rows. Else gemm. */
static void gemm_1x1(const dt_nn_ops *o, bool tb, int m, int n, int k, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    float *p = o->rnn_gemm ? dt_nn_alloc(o, (size_t)k * n * sizeof(float)) : NULL;
    if (!p) {
        dt_nn_gemm(o, false, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    o->rnn_pack(tb, k, n, b, ldb, p);
    int blk = (int)(PACKED_BLOCK_BYTES / ((size_t)k * sizeof(float))) / 8 * 8;
    if (blk < 24)
        blk = 24;
    for (int i0 = 0; i0 < m; i0 += blk)
        o->rnn_gemm(false, m - i0 < blk ? m - i0 : blk, n, k, a + (size_t)i0 * lda, lda, p, 0, beta,
                    c + (size_t)i0 * ldc, ldc);
    dt_nn_free(o, p);
}

static dt_status conv_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(dt__nn_window_build(l, err));
    dt_nn_win *g = &l->win;
    int G = l->groups > 1 ? l->groups : 1;
    if (g->c % G != 0)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'groups': %d does not divide the input's %d channels", G,
                                g->c);
    l->out = (dt_nn_shape){3, {g->oh, g->ow, l->units}};
    dt__nn_weight *k = dt__nn_add_weight(
        l, "kernel", (dt_nn_shape){4, {l->kh, l->kw, g->c / G, l->units}}, true, l->kinit);
    k->l1 = l->kl1;
    k->l2 = l->kl2;
    if (l->use_bias) {
        dt__nn_weight *b =
            dt__nn_add_weight(l, "bias", (dt_nn_shape){1, {l->units}}, true, l->binit);
        b->l1 = l->bl1;
        b->l2 = l->bl2;
    }
    if (G > 1) {
        /* Per group: its input channels gathered (n, h, w, C/G), then their im2col rows; the
         * window geometry is that of one group. */
        g->c /= G;
        l->col_floats = (size_t)g->oh * g->ow * g->kh * g->kw * g->c + (size_t)g->h * g->w * g->c;
    } else if (!conv_is_1x1(l)) {
        l->win.ones = l->use_bias; /* the bias rides in the forward GEMM as a kernel row */
        l->col_floats = (size_t)g->oh * g->ow * (g->kh * g->kw * g->c + (l->win.ones ? 1 : 0));
        if (l->col_floats * sizeof(float) <= KEEP_COL_BYTES)
            l->aux_bytes = l->col_floats * sizeof(float);
    }
    return DT_OK;
}

/* A conv fused with its pool works on chunks of samples whose output and im2col rows take
 * about this many bytes, so that the GEMM's output is still in L2 when the pool reads it (and
 * the pool's gradient when the kernel-gradient GEMM reads it). */
#define CHUNK_BYTES (384u << 10)

static dt_nn_pool pool_kind(const dt__nn_layer *l);

/* The bias is the row after the kernel in memory (weights of a layer are consecutive in the
 * model's flat buffers), so [kernel; bias] is a (K + 1, filters) matrix. */
static bool bias_follows(const float *kernel, const float *bias, int K, int units)
{
    return kernel && bias && bias == kernel + (size_t)K * units;
}

/* Sizes of one conv step over a chunk of samples. */
typedef struct conv_geo {
    int K, ld;           /* kernel rows; col row length (K + 1 with the ones column) */
    size_t in, out, col; /* floats per sample: input, output, im2col rows */
    dt__nn_layer *pool;  /* the fused pool consumer, or NULL */
    size_t pool_out;     /* its floats per sample */
    int chunk;           /* samples per chunk */
} conv_geo;

static conv_geo geo(dt__nn_layer *l, dt__nn_ctx *c)
{
    conv_geo g = {.K = l->kh * l->kw * l->win.c};
    g.ld = g.K + (l->win.ones ? 1 : 0);
    g.in = dt__nn_shape_size(&l->in_shape[0]);
    g.out = dt__nn_shape_size(&l->out);
    g.col = conv_is_1x1(l) ? 0 : (size_t)l->win.oh * l->win.ow * g.ld;
    g.pool = l->pool_consumer > 0 ? &c->layers[l->pool_consumer] : NULL;
    g.pool_out = g.pool ? dt__nn_shape_size(&g.pool->out) : 0;
    size_t per = (g.out + g.col) * sizeof(float);
    g.chunk = c->n;
    if (g.pool && per * (size_t)c->n > CHUNK_BYTES)
        g.chunk = per >= CHUNK_BYTES ? 1 : (int)(CHUNK_BYTES / per);
    return g;
}

/* The lowered input of samples [s0, s0 + n): x itself for 1x1 convolutions, else im2col rows
 * (kept per layer from forward to backward when small, else the shared scratch). */
static const float *conv_col(dt__nn_layer *l, dt__nn_ctx *c, const conv_geo *g, int s0, int n,
                             bool fill)
{
    const float *x = dt__nn_x(c, l, 0) + (size_t)s0 * g->in;
    if (conv_is_1x1(l))
        return x;
    float *col = l->aux ? (float *)l->aux + (size_t)s0 * g->col : c->col;
    if (fill) {
        dt_nn_win w = l->win;
        w.n = n;
        c->ops->im2col(&w, x, col);
    }
    return col;
}

/* Where the output (and its gradient) of the chunk at s0 goes: with a fused pool nobody but
 * the pool reads it, so every chunk reuses the head of the buffer, which stays in cache. */
static size_t chunk_off(const conv_geo *g, int s0)
{
    return g->pool ? 0 : (size_t)s0 * g->out;
}

static void conv_forward_chunk(dt__nn_layer *l, dt__nn_ctx *c, const conv_geo *g, int s0, int n)
{
    int rows = n * l->win.oh * l->win.ow;
    size_t off = chunk_off(g, s0);
    const float *col = conv_col(l, c, g, s0, n, true);
    /* y (rows, filters) = col (rows, K [+1]) [kernel; bias] (K [+1], filters) */
    bool aug = l->win.ones && bias_follows(l->w[0].data, l->w[1].data, g->K, l->units);
    float *pre = dt__nn_pre(l) + off;
    if (conv_is_1x1(l))
        gemm_1x1(c->ops, false, rows, l->units, aug ? g->K + 1 : g->K, col, g->ld, l->w[0].data,
                 l->units, 0.0f, pre, l->units);
    else
        dt_nn_gemm(c->ops, false, false, rows, l->units, aug ? g->K + 1 : g->K, 1.0f, col, g->ld,
                   l->w[0].data, l->units, 0.0f, pre, l->units);
    if (l->use_bias && !aug)
        c->ops->bias_add(pre, l->w[1].data, (size_t)rows, l->units);
    if (l->act.kind != DT_NN_ACT_LINEAR && !l->act_to_consumer)
        c->ops->act_fwd(&l->act, pre, l->y + off, (size_t)rows, l->units);
    if (g->pool) {
        dt_nn_win pw = g->pool->win;
        pw.n = n;
        size_t po = (size_t)s0 * g->pool_out;
        c->ops->pool_fwd(pool_kind(g->pool), &pw, l->y + off, g->pool->y + po,
                         (int32_t *)g->pool->aux + po);
    }
}

/* ---- grouped Conv2D: group j maps input channels [j C/G, (j + 1) C/G) to filters
 * [j F/G, (j + 1) F/G) through kernel[:, :, :, j F/G ...], as Keras and torch split them. Each
 * group's channels are gathered into the scratch (after its im2col rows), lowered and multiplied
 * into its strided columns of the output. */

typedef struct group_geo {
    int G, cg, fg, K, rows; /* groups, channels and filters per group, kernel rows, col rows */
    size_t px;              /* input pixels */
    float *col, *xg;        /* the group's im2col rows and its gathered channels */
} group_geo;

static group_geo ggeo(dt__nn_layer *l, dt__nn_ctx *c)
{
    group_geo q = {.G = l->groups, .cg = l->win.c, .fg = l->units / l->groups};
    q.K = l->kh * l->kw * q.cg;
    q.rows = c->n * l->win.oh * l->win.ow;
    q.px = (size_t)c->n * l->win.h * l->win.w;
    q.col = c->col;
    q.xg = c->col + (size_t)q.rows * q.K;
    return q;
}

static void group_col(dt__nn_layer *l, dt__nn_ctx *c, const group_geo *q, int j)
{
    c->ops->copy2d(q->px, q->cg, dt__nn_x(c, l, 0) + (size_t)j * q->cg, q->cg * q->G, q->xg, q->cg,
                   false);
    l->win.n = c->n;
    c->ops->im2col(&l->win, q->xg, q->col);
}

static void grouped_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    group_geo q = ggeo(l, c);
    float *pre = dt__nn_pre(l);
    for (int j = 0; j < q.G; j++) {
        group_col(l, c, &q, j);
        dt_nn_gemm(c->ops, false, false, q.rows, q.fg, q.K, 1.0f, q.col, q.K,
                   l->w[0].data + (size_t)j * q.fg, l->units, 0.0f, pre + (size_t)j * q.fg,
                   l->units);
    }
    if (l->use_bias)
        c->ops->bias_add(pre, l->w[1].data, (size_t)q.rows, l->units);
    dt__nn_act_out(l, c, (size_t)q.rows, l->units);
}

static void grouped_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    group_geo q = ggeo(l, c);
    dt__nn_act_grad(l, c, (size_t)q.rows, l->units);
    if (l->use_bias && l->w[1].grad)
        c->ops->bias_grad(l->dy, (size_t)q.rows, l->units, l->w[1].grad, false);
    bool acc = false;
    float *dx = dt__nn_need_dx(c, l, 0) ? dt__nn_dx(c, l, 0, &acc) : NULL;
    for (int j = 0; j < q.G; j++) {
        const float *dz = l->dy + (size_t)j * q.fg;
        group_col(l, c, &q, j);
        if (l->w[0].grad) /* dkernel_j (K, F/G) = col_j^T dz_j */
            dt_nn_gemm(c->ops, true, false, q.K, q.fg, q.rows, 1.0f, q.col, q.K, dz, l->units, 0.0f,
                       l->w[0].grad + (size_t)j * q.fg, l->units);
        if (!dx)
            continue;
        /* dcol_j (rows, K) = dz_j kernel_j^T, scattered to the group's channels, then moved
         * into dx's */
        dt_nn_gemm(c->ops, false, true, q.rows, q.K, q.fg, 1.0f, dz, l->units,
                   l->w[0].data + (size_t)j * q.fg, l->units, 0.0f, q.col, q.K);
        c->ops->col2im(&l->win, q.col, q.xg, false);
        c->ops->copy2d(q.px, q.cg, q.xg, q.cg, dx + (size_t)j * q.cg, q.cg * q.G, acc);
    }
}

static void conv_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->groups > 1) {
        grouped_forward(l, c);
        return;
    }
    l->win.n = c->n;
    if (dt__nn_bn_by_producer(l, c)) { /* a 1x1 conv: x is the GEMM's left operand */
        dt__nn_bn_gemm_fwd(&c->layers[l->bn_consumer], c, c->n * l->win.oh * l->win.ow, l->win.c,
                           dt__nn_x(c, l, 0), l->w[0].data, l->y);
        return;
    }
    conv_geo g = geo(l, c);
    for (int s0 = 0; s0 < c->n; s0 += g.chunk)
        conv_forward_chunk(l, c, &g, s0, c->n - s0 < g.chunk ? c->n - s0 : g.chunk);
}

static void conv_backward_chunk(dt__nn_layer *l, dt__nn_ctx *c, const conv_geo *g, int s0, int n,
                                float *dx, bool acc)
{
    int rows = n * l->win.oh * l->win.ow;
    size_t off = chunk_off(g, s0);
    float *dz = l->dy + off;
    if (g->pool) { /* the pool's gradient (its relu included) is dz */
        dt_nn_win pw = g->pool->win;
        pw.n = n;
        size_t po = (size_t)s0 * g->pool_out;
        c->ops->pool_bwd(pool_kind(g->pool), &pw, g->pool->dy + po,
                         (const int32_t *)g->pool->aux + po, dz, false);
    } else if (l->act.kind != DT_NN_ACT_LINEAR && !l->fused_loss && !l->act_to_consumer) {
        c->ops->act_bwd(&l->act, l->z ? l->z + off : NULL, l->y + off, dz, dz, (size_t)rows,
                        l->units, false);
    }
    const float *col = conv_col(l, c, g, s0, n, l->aux == NULL && !conv_is_1x1(l));
    /* dkernel (K, filters) (+)= col^T dz. The bias gradient is not the GEMM's ones row: that
     * would sum tens of thousands of rows in float (4e-6 off on resnet_small's strided conv);
     * bias_grad sums in double, over the chunk that is still in cache. */
    if (l->w[0].grad && conv_is_1x1(l) && c->ops->rnn_gemm) /* 1.1-2.4x OpenBLAS's (1 thread) */
        c->ops->rnn_gemm(true, g->K, l->units, rows, col, g->ld, dz, l->units, s0 ? 1.0f : 0.0f,
                         l->w[0].grad, l->units);
    else if (l->w[0].grad)
        dt_nn_gemm(c->ops, true, false, g->K, l->units, rows, 1.0f, col, g->ld, dz, l->units,
                   s0 ? 1.0f : 0.0f, l->w[0].grad, l->units);
    if (l->use_bias && l->w[1].grad)
        c->ops->bias_grad(dz, (size_t)rows, l->units, l->w[1].grad, s0 > 0);
    if (!dx)
        return;
    dx += (size_t)s0 * g->in;
    if (conv_is_1x1(l)) {
        gemm_1x1(c->ops, true, rows, g->K, l->units, dz, l->units, l->w[0].data, l->units,
                 acc ? 1.0f : 0.0f, dx, g->K);
        return;
    }
    /* dcol (rows, K) = dz kernel^T, then scattered back */
    dt_nn_gemm(c->ops, false, true, rows, g->K, l->units, 1.0f, dz, l->units, l->w[0].data,
               l->units, 0.0f, c->col, g->K);
    dt_nn_win w = l->win;
    w.n = n;
    c->ops->col2im(&w, c->col, dx, acc);
}

static void conv_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->groups > 1) {
        grouped_backward(l, c);
        return;
    }
    l->win.n = c->n;
    conv_geo g = geo(l, c);
    bool acc = false;
    float *dx = dt__nn_need_dx(c, l, 0) ? dt__nn_dx(c, l, 0, &acc) : NULL;
    for (int s0 = 0; s0 < c->n; s0 += g.chunk)
        conv_backward_chunk(l, c, &g, s0, c->n - s0 < g.chunk ? c->n - s0 : g.chunk, dx, acc);
}

const dt__nn_layer_vt dt__nn_conv2d = {
    .class_name = "Conv2D",
    .parse = conv_parse,
    .build = conv_build,
    .forward = conv_forward,
    .backward = conv_backward,
    .keys = conv_keys,
};

/* ---- pooling ----------------------------------------------------------------------------------
 */

static const char *const pool_keys[] = {"pool_size", "strides", "padding", "data_format", NULL};

static dt_status pool_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    int k[2], s[2];
    DT_TRY(dt__nn_cfg_pair(l, cfg, "pool_size", 2, k, err));
    DT_TRY(dt__nn_cfg_pair(l, cfg, "strides", 0 /* none: the pool size */, s, err));
    l->kh = k[0], l->kw = k[1];
    l->sh = s[0] ? s[0] : k[0];
    l->sw = s[1] ? s[1] : k[1];
    DT_TRY(dt__nn_cfg_padding(l, cfg, &l->same, err));
    return common_spatial_opts(l, cfg, err);
}

static dt_status pool_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(dt__nn_window_build(l, err));
    l->out = (dt_nn_shape){3, {l->win.oh, l->win.ow, l->win.c}};
    if (l->vt == &dt__nn_maxpool2d || l->vt == &dt__nn_gmp2d)
        l->aux_bytes = dt__nn_shape_size(&l->out) * sizeof(int32_t); /* argmax */
    return DT_OK;
}

static dt_nn_pool pool_kind(const dt__nn_layer *l)
{
    if (l->relu_in)
        return DT_NN_POOL_MAX_RELU;
    return (l->vt == &dt__nn_maxpool2d || l->vt == &dt__nn_gmp2d) ? DT_NN_POOL_MAX : DT_NN_POOL_AVG;
}

static void pool_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->pooled_by_producer)
        return;
    l->win.n = c->n;
    c->ops->pool_fwd(pool_kind(l), &l->win, dt__nn_x(c, l, 0), l->y, l->aux);
}

static void pool_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    if (l->pooled_by_producer) { /* the conv runs it; its dy counts as written */
        bool acc;
        (void)dt__nn_dx(c, l, 0, &acc);
        return;
    }
    l->win.n = c->n;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->pool_bwd(pool_kind(l), &l->win, l->dy, l->aux, dx, acc);
}

const dt__nn_layer_vt dt__nn_maxpool2d = {
    .class_name = "MaxPooling2D",
    .parse = pool_parse,
    .build = pool_build,
    .forward = pool_forward,
    .backward = pool_backward,
    .keys = pool_keys,
};

const dt__nn_layer_vt dt__nn_avgpool2d = {
    .class_name = "AveragePooling2D",
    .parse = pool_parse,
    .build = pool_build,
    .forward = pool_forward,
    .backward = pool_backward,
    .keys = pool_keys,
};

/* Global pooling is pooling with one window the size of the image. */
static const char *const gpool_keys[] = {"data_format", "keepdims", NULL};

static dt_status gpool_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(common_spatial_opts(l, cfg, err));
    return dt__nn_cfg_bool(l, cfg, "keepdims", false, &l->keepdims, err);
}

static dt_status gpool_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(spatial_input(l, err));
    l->kh = l->in_shape[0].d[0], l->kw = l->in_shape[0].d[1];
    l->sh = l->sw = 1;
    l->same = false;
    DT_TRY(pool_build(l, err));
    int ch = l->win.c;
    l->out = l->keepdims ? (dt_nn_shape){3, {1, 1, ch}} : (dt_nn_shape){1, {ch}};
    return DT_OK;
}

const dt__nn_layer_vt dt__nn_gap2d = {
    .class_name = "GlobalAveragePooling2D",
    .parse = gpool_parse,
    .build = gpool_build,
    .forward = pool_forward,
    .backward = pool_backward,
    .keys = gpool_keys,
};

const dt__nn_layer_vt dt__nn_gmp2d = {
    .class_name = "GlobalMaxPooling2D",
    .parse = gpool_parse,
    .build = gpool_build,
    .forward = pool_forward,
    .backward = pool_backward,
    .keys = gpool_keys,
};

/* ---- ZeroPadding2D: y is x inside a frame of zeros --------------------------------------------
 */

static const char *const zpad_keys[] = {"padding", "data_format", NULL};

static dt_status zpad_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, "padding");
    int v[4] = {1, 1, 1, 1};
    if (cJSON_IsNumber(p)) {
        if (!dt__nn_int(p, 0, 65536, &v[0]))
            return dt__nn_layer_err(l, DT_EINVAL, err, "option 'padding': expected an integer");
        v[1] = v[2] = v[3] = v[0];
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 2) {
        for (int i = 0; i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(p, i);
            bool one = dt__nn_int(e, 0, 65536, &v[2 * i]);
            if (one)
                v[2 * i + 1] = v[2 * i];
            else if (!(cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                       dt__nn_int(cJSON_GetArrayItem(e, 0), 0, 65536, &v[2 * i]) &&
                       dt__nn_int(cJSON_GetArrayItem(e, 1), 0, 65536, &v[2 * i + 1]))) {
                return dt__nn_layer_err(l, DT_EINVAL, err,
                                        "option 'padding': expected [[top, bottom], [left, "
                                        "right]]");
            }
        }
    } else if (p && !cJSON_IsNull(p)) {
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'padding': expected an integer or two pairs");
    }
    for (int i = 0; i < 4; i++)
        if (v[i] < 0 || v[i] > 65536)
            return dt__nn_layer_err(l, DT_EINVAL, err, "option 'padding': %d out of range", v[i]);
    memcpy(l->pad, v, sizeof v);
    return common_spatial_opts(l, cfg, err);
}

static dt_status zpad_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(spatial_input(l, err));
    const dt_nn_shape *in = &l->in_shape[0];
    l->out = (dt_nn_shape){
        3, {in->d[0] + l->pad[0] + l->pad[1], in->d[1] + l->pad[2] + l->pad[3], in->d[2]}};
    return DT_OK;
}

static void zpad_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->pad_in_conv) /* its conv reads the input (y is the input's) */
        return;
    const dt_nn_shape *in = &l->in_shape[0];
    int H = in->d[0], W = in->d[1], C = in->d[2], OW = l->out.d[1];
    size_t per_in = dt__nn_shape_size(in), per_out = dt__nn_shape_size(&l->out);
    c->ops->fill((size_t)c->n * per_out, 0.0f, l->y);
    for (int n = 0; n < c->n; n++)
        c->ops->copy2d((size_t)H, W * C, dt__nn_x(c, l, 0) + n * per_in, W * C,
                       l->y + n * per_out + ((size_t)l->pad[0] * OW + l->pad[2]) * C, OW * C,
                       false);
}

static void zpad_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->pad_in_conv || !dt__nn_need_dx(c, l, 0))
        return;
    const dt_nn_shape *in = &l->in_shape[0];
    int H = in->d[0], W = in->d[1], C = in->d[2], OW = l->out.d[1];
    size_t per_in = dt__nn_shape_size(in), per_out = dt__nn_shape_size(&l->out);
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    for (int n = 0; n < c->n; n++)
        c->ops->copy2d((size_t)H, W * C,
                       l->dy + n * per_out + ((size_t)l->pad[0] * OW + l->pad[2]) * C, OW * C,
                       dx + n * per_in, W * C, acc);
}

const dt__nn_layer_vt dt__nn_zeropadding2d = {
    .class_name = "ZeroPadding2D",
    .parse = zpad_parse,
    .build = zpad_build,
    .forward = zpad_forward,
    .backward = zpad_backward,
    .keys = zpad_keys,
};

/* ---- UpSampling2D (nearest): y[i, j] = x[i / sh, j / sw] --------------------------------------
 */

static const char *const up_keys[] = {"size", "data_format", "interpolation", NULL};

static dt_status up_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_pair(l, cfg, "size", 2, l->up, err));
    DT_TRY(dt__nn_cfg_string_is(l, cfg, "interpolation", "nearest", err));
    return common_spatial_opts(l, cfg, err);
}

static dt_status up_build(dt__nn_layer *l, dt_err *err)
{
    DT_TRY(spatial_input(l, err));
    const dt_nn_shape *in = &l->in_shape[0];
    l->out = (dt_nn_shape){3, {in->d[0] * l->up[0], in->d[1] * l->up[1], in->d[2]}};
    return DT_OK;
}

/* One strided copy per (sample, input row, vertical copy, horizontal phase): row ix of the input
 * goes to columns ix*sw + phase of output row iy*sh + k. */
static void up_move(dt__nn_layer *l, dt__nn_ctx *c, bool backward)
{
    const dt_nn_shape *in = &l->in_shape[0];
    int H = in->d[0], W = in->d[1], C = in->d[2], sh = l->up[0], sw = l->up[1], OW = W * sw;
    size_t per_in = dt__nn_shape_size(in), per_out = dt__nn_shape_size(&l->out);
    bool acc = false;
    float *dx = backward ? dt__nn_dx(c, l, 0, &acc) : NULL;
    for (int n = 0; n < c->n; n++)
        for (int iy = 0; iy < H; iy++)
            for (int k = 0; k < sh; k++)
                for (int p = 0; p < sw; p++) {
                    size_t xo = n * per_in + (size_t)iy * W * C;
                    size_t yo = n * per_out + ((size_t)(iy * sh + k) * OW + p) * C;
                    if (!backward) {
                        c->ops->copy2d((size_t)W, C, dt__nn_x(c, l, 0) + xo, C, l->y + yo, sw * C,
                                       false);
                    } else {
                        c->ops->copy2d((size_t)W, C, l->dy + yo, sw * C, dx + xo, C, acc || k || p);
                    }
                }
}

static void up_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    up_move(l, c, false);
}

static void up_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (dt__nn_need_dx(c, l, 0))
        up_move(l, c, true);
}

const dt__nn_layer_vt dt__nn_upsampling2d = {
    .class_name = "UpSampling2D",
    .parse = up_parse,
    .build = up_build,
    .forward = up_forward,
    .backward = up_backward,
    .keys = up_keys,
};
