/* layers_norm.c - BatchNormalization and the merge layers (Add, Concatenate). */
#include "nn/layer.h"

#include <string.h>

static size_t rows_of(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return (size_t)c->n * (dt__nn_shape_size(&l->out) / (size_t)l->out.d[l->out.rank - 1]);
}

/* Reads "axis": an integer or a one-item list; the batch axis counts, so the last axis of a
 * rank-r sample is r or -1. */
static dt_status read_axis(dt__nn_layer *l, const cJSON *cfg, int def, dt_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
    if (cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1)
        a = cJSON_GetArrayItem(a, 0);
    if (!a || cJSON_IsNull(a)) {
        l->units = def;
        return DT_OK;
    }
    if (!dt__nn_int(a, -DT_NN_MAX_RANK - 1, DT_NN_MAX_RANK, &l->units))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'axis': expected one integer (only the last axis)");
    return DT_OK;
}

static dt_status check_last_axis(dt__nn_layer *l, int rank, dt_err *err)
{
    if (l->units != -1 && l->units != rank)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'axis': %d is not supported (only the last axis, -1 or %d)",
                                l->units, rank);
    return DT_OK;
}

/* ---- BatchNormalization over the last (channel) axis ----------------------------------------- */

static const char *const bn_keys[] = {"axis",
                                      "momentum",
                                      "epsilon",
                                      "center",
                                      "scale",
                                      "beta_initializer",
                                      "gamma_initializer",
                                      "moving_mean_initializer",
                                      "moving_variance_initializer",
                                      "beta_regularizer",
                                      "gamma_regularizer",
                                      "beta_constraint",
                                      "gamma_constraint",
                                      "synchronized",
                                      "renorm",
                                      "renorm_clipping",
                                      "renorm_momentum",
                                      "fused",
                                      "virtual_batch_size",
                                      "adjustment",
                                      NULL};

static dt_status bn_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    bool b;
    DT_TRY(read_axis(l, cfg, -1, err));
    DT_TRY(dt__nn_cfg_float(l, cfg, "momentum", 0.99f, &l->momentum, err));
    DT_TRY(dt__nn_cfg_float(l, cfg, "epsilon", 1e-3f, &l->eps, err));
    if (l->momentum < 0 || l->momentum > 1 || l->eps <= 0)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "options 'momentum' (in [0, 1]) or 'epsilon' (> 0) out of range");
    DT_TRY(dt__nn_cfg_bool(l, cfg, "center", true, &l->center, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "scale", true, &l->scale_on, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "gamma_initializer", (dt__nn_init){.kind = DT_NN_INIT_ONES},
                           &l->ginit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "beta_initializer", (dt__nn_init){.kind = DT_NN_INIT_ZEROS},
                           &l->beinit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "moving_mean_initializer",
                           (dt__nn_init){.kind = DT_NN_INIT_ZEROS}, &l->mminit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "moving_variance_initializer",
                           (dt__nn_init){.kind = DT_NN_INIT_ONES}, &l->mvinit, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "gamma_regularizer", &l->kl1, &l->kl2, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "beta_regularizer", &l->bl1, &l->bl2, err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "beta_constraint", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "gamma_constraint", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "renorm_clipping", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "virtual_batch_size", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "adjustment", err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "synchronized", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'synchronized': true is not supported (per-replica "
                                "statistics only)");
    DT_TRY(dt__nn_cfg_bool(l, cfg, "renorm", false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'renorm': true is not supported");
    float rm;
    DT_TRY(dt__nn_cfg_float(l, cfg, "renorm_momentum", 0.99f, &rm, err)); /* unused: renorm off */
    DT_TRY(dt__nn_cfg_bool(l, cfg, "fused", true, &b, err)); /* an implementation choice */
    if (!l->trainable)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'trainable': false (frozen, inference-mode) batch "
                                "normalization is not supported yet");
    return DT_OK;
}

static dt_status bn_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs an input with a channel axis");
    DT_TRY(check_last_axis(l, in->rank, err));
    int ch = in->d[in->rank - 1];
    dt_nn_shape s = {1, {ch}};
    l->out = *in;
    /* Keras's order: gamma, beta, moving_mean, moving_variance. */
    l->n_w = 0;
    if (l->scale_on) {
        dt__nn_weight *g = dt__nn_add_weight(l, "gamma", s, true, l->ginit);
        g->l1 = l->kl1, g->l2 = l->kl2;
    }
    if (l->center) {
        dt__nn_weight *b = dt__nn_add_weight(l, "beta", s, true, l->beinit);
        b->l1 = l->bl1, b->l2 = l->bl2;
    }
    dt__nn_add_weight(l, "moving_mean", s, false, l->mminit);
    dt__nn_add_weight(l, "moving_variance", s, false, l->mvinit);
    /* batch mean, batch variance; the backward recomputes xhat from the input */
    l->stat_floats = 2 * (size_t)ch;
    return DT_OK;
}

static dt__nn_weight *bn_w(dt__nn_layer *l, const char *var)
{
    for (int i = 0; i < l->n_w; i++)
        if (!strcmp(l->w[i].var, var))
            return &l->w[i];
    return NULL;
}

void dt__nn_bn_gemm_fwd(dt__nn_layer *bn, dt__nn_ctx *c, int rows, int k, const float *x,
                        const float *w, float *z)
{
    int ch = bn->out.d[bn->out.rank - 1];
    dt__nn_weight *g = bn_w(bn, "gamma"), *b = bn_w(bn, "beta");
    c->ops->gemm_bn_fwd(c->ops, rows, ch, k, x, w, z, bn->y, g ? g->data : NULL, b ? b->data : NULL,
                        bn_w(bn, "moving_mean")->data, bn_w(bn, "moving_variance")->data,
                        bn->momentum, bn->eps, bn->stat, bn->stat + ch, bn->bn_relu);
}

static void bn_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (l->bn_by_producer && dt__nn_bn_by_producer(&c->layers[l->in[0]], c))
        return;
    int ch = l->out.d[l->out.rank - 1];
    dt__nn_weight *g = bn_w(l, "gamma"), *b = bn_w(l, "beta");
    c->ops->bn_fwd(c->training, dt__nn_x(c, l, 0), l->y, rows_of(l, c), ch, g ? g->data : NULL,
                   b ? b->data : NULL, bn_w(l, "moving_mean")->data,
                   bn_w(l, "moving_variance")->data, l->momentum, l->eps, l->stat, l->stat + ch,
                   l->bn_relu);
}

static void bn_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    int ch = l->out.d[l->out.rank - 1];
    dt__nn_weight *g = bn_w(l, "gamma"), *b = bn_w(l, "beta");
    if (g && g->grad)
        c->ops->fill((size_t)ch, 0.0f, g->grad);
    if (b && b->grad)
        c->ops->fill((size_t)ch, 0.0f, b->grad);
    bool acc = false;
    float *dx = dt__nn_need_dx(c, l, 0) ? dt__nn_dx(c, l, 0, &acc) : NULL;
    c->ops->bn_bwd(l->dy, dt__nn_x(c, l, 0), rows_of(l, c), ch, g ? g->data : NULL,
                   b ? b->data : NULL, l->stat, l->stat + ch, l->eps, dx, acc, g ? g->grad : NULL,
                   b ? b->grad : NULL, l->bn_relu); /* NULL: not trainable */
}

const dt__nn_layer_vt dt__nn_batchnorm = {
    .class_name = "BatchNormalization",
    .parse = bn_parse,
    .build = bn_build,
    .forward = bn_forward,
    .backward = bn_backward,
    .keys = bn_keys,
    .mask = DT_NN_MASK_PASS,
};

/* ---- Add: y = sum of the inputs (same shapes) ----------------------------------------------- */

static dt_status add_build(dt__nn_layer *l, dt_err *err)
{
    if (l->n_in < 2)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs at least 2 inputs, got %d", l->n_in);
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

static void add_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = (size_t)c->n * dt__nn_shape_size(&l->out);
    for (int i = 0; i < l->n_in; i++)
        c->ops->copy(n, dt__nn_x(c, l, i), l->y, i > 0);
}

static void add_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    size_t n = (size_t)c->n * dt__nn_shape_size(&l->out);
    for (int i = 0; i < l->n_in; i++) {
        if (!dt__nn_need_dx(c, l, i))
            continue;
        bool acc;
        float *dx = dt__nn_dx(c, l, i, &acc);
        c->ops->copy(n, l->dy, dx, acc);
    }
}

const dt__nn_layer_vt dt__nn_add = {
    .class_name = "Add",
    .build = add_build,
    .forward = add_forward,
    .backward = add_backward,
    .mask = DT_NN_MASK_PASS,
};

/* ---- Concatenate along the last axis -----------------------------------------------------------
 */

static const char *const concat_keys[] = {"axis", NULL};

static dt_status concat_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return read_axis(l, cfg, -1, err);
}

static dt_status concat_build(dt__nn_layer *l, dt_err *err)
{
    if (l->n_in < 2)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs at least 2 inputs, got %d", l->n_in);
    const dt_nn_shape *a = &l->in_shape[0];
    DT_TRY(check_last_axis(l, a->rank, err));
    l->out = *a;
    for (int i = 1; i < l->n_in; i++) {
        const dt_nn_shape *b = &l->in_shape[i];
        if (a->rank != b->rank || memcmp(a->d, b->d, sizeof(int) * (size_t)(a->rank - 1)) != 0)
            return dt__nn_layer_err(l, DT_EINVAL, err,
                                    "input %d's shape differs from input 0's outside the last "
                                    "axis",
                                    i);
        l->out.d[a->rank - 1] += b->d[a->rank - 1];
    }
    return DT_OK;
}

static void concat_move(dt__nn_layer *l, dt__nn_ctx *c, bool backward)
{
    size_t rows = rows_of(l, c);
    int total = l->out.d[l->out.rank - 1], off = 0;
    for (int i = 0; i < l->n_in; i++) {
        int ci = l->in_shape[i].d[l->in_shape[i].rank - 1];
        if (!backward) {
            c->ops->copy2d(rows, ci, dt__nn_x(c, l, i), ci, l->y + off, total, false);
        } else if (dt__nn_need_dx(c, l, i)) {
            bool acc;
            float *dx = dt__nn_dx(c, l, i, &acc);
            c->ops->copy2d(rows, ci, l->dy + off, total, dx, ci, acc);
        }
        off += ci;
    }
}

static void concat_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    concat_move(l, c, false);
}

static void concat_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    concat_move(l, c, true);
}

const dt__nn_layer_vt dt__nn_concatenate = {
    .class_name = "Concatenate",
    .parse = concat_parse,
    .build = concat_build,
    .forward = concat_forward,
    .backward = concat_backward,
    .keys = concat_keys,
};
