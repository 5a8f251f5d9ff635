/* layers_attn.c - MultiHeadAttention as Keras computes it: query, key and value projections
 * (Keras's EinsumDense weights query/kernel [d, heads, key_dim], ...), scaled dot products over
 * the sequence axis, the masked softmax (the inputs' Keras masks and use_causal_mask), attention
 * dropout in training, and the output projection attention_output/kernel [heads, value_dim,
 * out]. Inputs are (T, features) sequences; the call is mha(query, value[, key]). */
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const mha_keys[] = {"num_heads",
                                       "key_dim",
                                       "value_dim",
                                       "dropout",
                                       "use_bias",
                                       "output_shape",
                                       "attention_axes",
                                       "kernel_initializer",
                                       "bias_initializer",
                                       "kernel_regularizer",
                                       "bias_regularizer",
                                       "activity_regularizer",
                                       "kernel_constraint",
                                       "bias_constraint",
                                       "seed",
                                       "flash_attention",
                                       "query_shape",
                                       "key_shape",
                                       "value_shape",
                                       NULL};

/* An int, or a list holding one int (Keras writes output_shape and attention_axes either way). */
static bool one_int(const cJSON *v, int lo, int hi, int *out)
{
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1)
        v = cJSON_GetArrayItem(v, 0);
    return dt__nn_int(v, lo, hi, out);
}

static dt_status mha_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_int(l, cfg, "num_heads", 0, &l->heads, err));
    if (l->heads < 1 || l->heads > 4096)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'num_heads': expected 1..4096");
    DT_TRY(dt__nn_cfg_int(l, cfg, "key_dim", 0, &l->key_dim, err));
    if (l->key_dim < 1 || l->key_dim > 65536)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'key_dim': expected 1..65536");
    DT_TRY(dt__nn_cfg_int(l, cfg, "value_dim", l->key_dim, &l->value_dim, err));
    if (l->value_dim < 1 || l->value_dim > 65536)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'value_dim': expected 1..65536");
    DT_TRY(dt__nn_cfg_float(l, cfg, "dropout", 0, &l->rate, err));
    if (!(l->rate >= 0 && l->rate < 1))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'dropout': %g is not in [0, 1)",
                                (double)l->rate);
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(cfg, "output_shape");
    l->attn_out = 0; /* the query's width */
    if (os && !cJSON_IsNull(os) && !one_int(os, 1, 1 << 24, &l->attn_out))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'output_shape': expected null, a width or [width] "
                                "(outputs of several axes are not supported)");
    const cJSON *ax = cJSON_GetObjectItemCaseSensitive(cfg, "attention_axes");
    int axis = 1;
    if (ax && !cJSON_IsNull(ax) && (!one_int(ax, -2, 1, &axis) || (axis != 1 && axis != -2)))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'attention_axes': only the sequence axis (null, [1]) is "
                                "supported");
    DT_TRY(dt__nn_cfg_kernel_bias(l, cfg, err));
    int seed; /* the job's seed drives the dropout draws, as Dropout's */
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &seed, err));
    bool flash; /* a kernel choice, not a result: every path computes the same attention */
    return dt__nn_cfg_bool(l, cfg, "flash_attention", false, &flash, err);
}

/* Weight i of the four projections (query, key, value, attention_output): kernel, bias. */
static dt__nn_weight *kernel(dt__nn_layer *l, int i)
{
    return &l->w[l->use_bias ? 2 * i : i];
}

static dt__nn_weight *bias(dt__nn_layer *l, int i)
{
    return l->use_bias ? &l->w[2 * i + 1] : NULL;
}

typedef struct dims {
    int n, tq, tv, dq, dv, dk, h, kd, vd, dout;
} dims;

static dims dims_of(const dt__nn_layer *l, int n)
{
    const dt_nn_shape *q = &l->in_shape[0], *v = &l->in_shape[1];
    const dt_nn_shape *k = l->n_in > 2 ? &l->in_shape[2] : v;
    return (dims){.n = n,
                  .tq = q->d[0],
                  .tv = v->d[0],
                  .dq = q->d[1],
                  .dv = v->d[1],
                  .dk = k->d[1],
                  .h = l->heads,
                  .kd = l->key_dim,
                  .vd = l->value_dim,
                  .dout = l->out.d[1]};
}

/* The batch's tensors in aux, each (n, per sample) so the projections are one GEMM each:
 * projected query, key and value (t, heads, dim), attention weights p (heads, tq, tv), p after
 * dropout and its mask, the heads' outputs o (tq, heads, vd), and the backward's gradients of
 * the same. */
typedef struct bufs {
    float *qp, *kp, *vp, *p, *pd, *dm, *o, *dqp, *dkp, *dvp, *dob, *dp;
} bufs;

static size_t per_sample(const dims *d, bool dropout, bufs *b, float *base, size_t n)
{
    size_t sq = (size_t)d->tq * d->h * d->kd, sk = (size_t)d->tv * d->h * d->kd,
           sv = (size_t)d->tv * d->h * d->vd, sp = (size_t)d->h * d->tq * d->tv,
           so = (size_t)d->tq * d->h * d->vd;
    size_t sizes[12] = {sq, sk, sv, sp, dropout ? sp : 0, dropout ? sp : 0, so, sq, sk, sv, so, sp};
    float **slot[12] = {&b->qp, &b->kp,  &b->vp,  &b->p,   &b->pd,  &b->dm,
                        &b->o,  &b->dqp, &b->dkp, &b->dvp, &b->dob, &b->dp};
    size_t off = 0;
    for (int i = 0; i < 12; i++) {
        if (base)
            *slot[i] = sizes[i] ? base + off * n : NULL;
        off += sizes[i];
    }
    return off;
}

static dt_status mha_build(dt__nn_layer *l, dt_err *err)
{
    if (l->n_in < 2 || l->n_in > 3)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "takes query and value (and optionally key): call it as "
                                "mha(x, x) for self-attention; it has %d input%s",
                                l->n_in, l->n_in == 1 ? "" : "s");
    for (int i = 0; i < l->n_in; i++)
        if (l->in_shape[i].rank != 2)
            return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                    "input %d has %d axes; only (steps, features) sequences are "
                                    "supported",
                                    i, l->in_shape[i].rank);
    if (l->n_in == 3 && l->in_shape[2].d[0] != l->in_shape[1].d[0])
        return dt__nn_layer_err(l, DT_EINVAL, err, "key has %d steps and value %d: they must match",
                                l->in_shape[2].d[0], l->in_shape[1].d[0]);
    l->out =
        (dt_nn_shape){2, {l->in_shape[0].d[0], l->attn_out ? l->attn_out : l->in_shape[0].d[1]}};
    dims d = dims_of(l, 1);
    static const char *const names[4] = {"query", "key", "value", "attention_output"};
    int in_w[3] = {d.dq, d.dk, d.dv}, head_w[3] = {d.kd, d.kd, d.vd};
    for (int i = 0; i < 4; i++) {
        char var[24];
        dt_nn_shape ks = i < 3 ? (dt_nn_shape){3, {in_w[i], d.h, head_w[i]}}
                               : (dt_nn_shape){3, {d.h, d.vd, d.dout}};
        dt_nn_shape bs = i < 3 ? (dt_nn_shape){2, {d.h, head_w[i]}} : (dt_nn_shape){1, {d.dout}};
        snprintf(var, sizeof var, "%s/kernel", names[i]);
        dt__nn_weight *k = dt__nn_add_weight(l, var, ks, true, l->kinit);
        k->l1 = l->kl1;
        k->l2 = l->kl2;
        if (l->use_bias) {
            snprintf(var, sizeof var, "%s/bias", names[i]);
            dt__nn_weight *b = dt__nn_add_weight(l, var, bs, true, l->binit);
            b->l1 = l->bl1;
            b->l2 = l->bl2;
        }
    }
    bufs b;
    l->aux_bytes = per_sample(&d, l->rate > 0, &b, NULL, 0) * sizeof(float);
    return DT_OK;
}

/* y (rows, out) = x (rows, in) kernel + bias. */
static void project(const dt_nn_ops *o, const float *x, int rows, int in, const dt__nn_weight *k,
                    const dt__nn_weight *b, int out, float *y)
{
    dt_nn_gemm(o, false, false, rows, out, in, 1.0f, x, in, k->data, out, 0.0f, y, out);
    if (b)
        o->bias_add(y, b->data, (size_t)rows, out);
}

static const float *input_mask(dt__nn_ctx *c, dt__nn_layer *l, int i)
{
    return i < l->n_in ? dt__nn_in_mask(c, l, i) : NULL;
}

static void mha_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    const dt_nn_ops *o = c->ops;
    dims d = dims_of(l, c->n);
    bool drop = c->training && l->rate > 0;
    bufs b;
    per_sample(&d, l->rate > 0, &b, l->aux, (size_t)d.n);
    const float *xq = dt__nn_x(c, l, 0), *xv = dt__nn_x(c, l, 1);
    const float *xk = l->n_in > 2 ? dt__nn_x(c, l, 2) : xv;
    int hk = d.h * d.kd, hv = d.h * d.vd;
    project(o, xq, d.n * d.tq, d.dq, kernel(l, 0), bias(l, 0), hk, b.qp);
    project(o, xk, d.n * d.tv, d.dk, kernel(l, 1), bias(l, 1), hk, b.kp);
    project(o, xv, d.n * d.tv, d.dv, kernel(l, 2), bias(l, 2), hv, b.vp);
    float scale = 1.0f / sqrtf((float)d.kd);
    size_t sp = (size_t)d.tq * d.tv;
    for (int s = 0; s < d.n; s++)
        for (int j = 0; j < d.h; j++)
            dt_nn_gemm(o, false, true, d.tq, d.tv, d.kd, scale,
                       b.qp + (size_t)s * d.tq * hk + (size_t)j * d.kd, hk,
                       b.kp + (size_t)s * d.tv * hk + (size_t)j * d.kd, hk, 0.0f,
                       b.p + ((size_t)s * d.h + j) * sp, d.tv);
    /* Keras ignores the key's mask when the key is the value. */
    const float *qm = input_mask(c, l, 0), *vm = input_mask(c, l, 1), *km = input_mask(c, l, 2);
    if (qm || vm || km || l->causal)
        o->attn_mask(b.p, qm, vm, km, d.n, d.h, d.tq, d.tv, l->causal);
    dt_nn_act_p softmax = {.kind = DT_NN_ACT_SOFTMAX};
    size_t rows = (size_t)d.n * d.h * d.tq;
    o->act_fwd(&softmax, b.p, b.p, rows, d.tv);
    const float *pa = b.p;
    if (drop) {
        dt__nn_drop(c, b.p, b.pd, b.dm, rows * d.tv, l->rate);
        pa = b.pd;
    }
    for (int s = 0; s < d.n; s++)
        for (int j = 0; j < d.h; j++)
            dt_nn_gemm(o, false, false, d.tq, d.vd, d.tv, 1.0f, pa + ((size_t)s * d.h + j) * sp,
                       d.tv, b.vp + (size_t)s * d.tv * hv + (size_t)j * d.vd, hv, 0.0f,
                       b.o + (size_t)s * d.tq * hv + (size_t)j * d.vd, hv);
    project(o, b.o, d.n * d.tq, hv, kernel(l, 3), bias(l, 3), d.dout, l->y);
}

/* The weight gradients of projection i: kernel = x^T dy, bias = column sums of dy. */
static void project_grads(const dt_nn_ops *o, const float *x, int rows, int in, dt__nn_weight *k,
                          dt__nn_weight *b, const float *dy, int out)
{
    if (k->grad)
        dt_nn_gemm(o, true, false, in, out, rows, 1.0f, x, in, dy, out, 0.0f, k->grad, out);
    if (b && b->grad)
        o->bias_grad(dy, (size_t)rows, out, b->grad, false);
}

/* dx (rows, in) (=/+=) dy (rows, out) kernel^T, into input i's gradient. */
static void project_dx(dt__nn_ctx *c, dt__nn_layer *l, int i, const dt__nn_weight *k,
                       const float *dy, int rows, int in, int out)
{
    if (!dt__nn_need_dx(c, l, i))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, i, &acc);
    dt_nn_gemm(c->ops, false, true, rows, in, out, 1.0f, dy, out, k->data, out, acc ? 1.0f : 0.0f,
               dx, in);
}

static void mha_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    const dt_nn_ops *o = c->ops;
    dims d = dims_of(l, c->n);
    bool drop = c->training && l->rate > 0;
    bufs b;
    per_sample(&d, l->rate > 0, &b, l->aux, (size_t)d.n);
    const float *xq = dt__nn_x(c, l, 0), *xv = dt__nn_x(c, l, 1);
    const float *xk = l->n_in > 2 ? dt__nn_x(c, l, 2) : xv;
    int hk = d.h * d.kd, hv = d.h * d.vd;
    size_t sp = (size_t)d.tq * d.tv;
    const float *pa = drop ? b.pd : b.p;
    project_grads(o, b.o, d.n * d.tq, hv, kernel(l, 3), bias(l, 3), l->dy, d.dout);
    dt_nn_gemm(o, false, true, d.n * d.tq, hv, d.dout, 1.0f, l->dy, d.dout, kernel(l, 3)->data,
               d.dout, 0.0f, b.dob, hv);
    for (int s = 0; s < d.n; s++)
        for (int j = 0; j < d.h; j++) {
            const float *dob = b.dob + (size_t)s * d.tq * hv + (size_t)j * d.vd;
            const float *vp = b.vp + (size_t)s * d.tv * hv + (size_t)j * d.vd;
            size_t pi = ((size_t)s * d.h + j) * sp;
            dt_nn_gemm(o, false, true, d.tq, d.tv, d.vd, 1.0f, dob, hv, vp, hv, 0.0f, b.dp + pi,
                       d.tv);
            dt_nn_gemm(o, true, false, d.tv, d.vd, d.tq, 1.0f, pa + pi, d.tv, dob, hv, 0.0f,
                       b.dvp + (size_t)s * d.tv * hv + (size_t)j * d.vd, hv);
        }
    size_t rows = (size_t)d.n * d.h * d.tq;
    if (drop)
        o->mul(rows * d.tv, b.dp, b.dm, b.dp, false);
    dt_nn_act_p softmax = {.kind = DT_NN_ACT_SOFTMAX};
    o->act_bwd(&softmax, NULL, b.p, b.dp, b.dp, rows, d.tv, false);
    float scale = 1.0f / sqrtf((float)d.kd);
    for (int s = 0; s < d.n; s++)
        for (int j = 0; j < d.h; j++) {
            size_t pi = ((size_t)s * d.h + j) * sp;
            size_t qo = (size_t)s * d.tq * hk + (size_t)j * d.kd;
            size_t ko = (size_t)s * d.tv * hk + (size_t)j * d.kd;
            dt_nn_gemm(o, false, false, d.tq, d.kd, d.tv, scale, b.dp + pi, d.tv, b.kp + ko, hk,
                       0.0f, b.dqp + qo, hk);
            dt_nn_gemm(o, true, false, d.tv, d.kd, d.tq, scale, b.dp + pi, d.tv, b.qp + qo, hk,
                       0.0f, b.dkp + ko, hk);
        }
    project_grads(o, xq, d.n * d.tq, d.dq, kernel(l, 0), bias(l, 0), b.dqp, hk);
    project_grads(o, xk, d.n * d.tv, d.dk, kernel(l, 1), bias(l, 1), b.dkp, hk);
    project_grads(o, xv, d.n * d.tv, d.dv, kernel(l, 2), bias(l, 2), b.dvp, hv);
    dt__nn_weights_done(c, l);
    project_dx(c, l, 0, kernel(l, 0), b.dqp, d.n * d.tq, d.dq, hk);
    project_dx(c, l, 1, kernel(l, 2), b.dvp, d.n * d.tv, d.dv, hv);
    /* Without a key input the key is the value: its gradient adds to the value's. */
    project_dx(c, l, l->n_in > 2 ? 2 : 1, kernel(l, 1), b.dkp, d.n * d.tv, d.dk, hk);
}

const dt__nn_layer_vt dt__nn_mha = {
    .class_name = "MultiHeadAttention",
    .parse = mha_parse,
    .build = mha_build,
    .forward = mha_forward,
    .backward = mha_backward,
    .keys = mha_keys,
    .mask = DT_NN_MASK_PASS, /* the output keeps the query's mask */
};
