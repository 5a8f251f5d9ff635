/* model.c - a built model: shapes, the flat parameter / gradient / state buffers, activation
 * buffers, and one training step (forward, loss, backward, regularizers). */
#include "nn/model.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/json.h"
#include "core/limits.h"
#include "nn/layer.h"
#include "nn/ops_cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dropout keys a graphed step may draw (the dropout calls of one step: one per Dropout layer,
 * per recurrent layer with dropout, ...). */
#define DT_MODEL_GRAPH_KEYS 256

/* The per-step values of a graphed step, as the device block holds them (dt_model_graph_feed):
 * the loss's (dt_nn_loss_p.step), then the dropout keys in call order. */
typedef struct gblock_t {
    float loss[DT_NN_LOSS_STEP_FLOATS];
    uint64_t keys[DT_MODEL_GRAPH_KEYS];
} gblock_t;

struct dt_model {
    dt__nn_graph g;
    const dt_nn_ops *ops;
    dt_rng rng;    /* dropout masks */
    float *params; /* (n_params) trainable weights, layer by layer */
    float *grads;  /* (n_params) same layout */
    float *state;  /* (n_state) non-trainable weights */
    size_t n_params, n_state;
    dt_model_weight *weights; /* (n_weights) */
    size_t n_weights;
    int reserved;        /* batch the activation buffers hold */
    float *col;          /* im2col scratch, (reserved, max col_floats) */
    int32_t *labels;     /* (reserved) device copy of the labels */
    float *targets;      /* (reserved, output size) device copy of the targets */
    float *row_w;        /* (reserved) device copy of the sample weights */
    float *host_pred;    /* (reserved, output size) host copy of the predictions */
    float *host_targets; /* (reserved, output size) integer labels made float targets */
    dt_model_grad_ready_fn grad_ready;
    void *grad_ready_ctx;
    _Atomic int64_t *beat;
    /* The train step in progress: regularization so far, its scale, the lowest final grad
     * offset, and the layer whose grads were reported from inside its backward. */
    float step_reg_scale;
    size_t step_ready;
    const dt__nn_layer *step_early;
    /* CUDA graphs of the step (dt_model_graph_*). gen counts the reallocations of the
     * activation buffers (a graph holds their addresses). fed: dt_model_graph_feed put the
     * batch and the step block on the device, so the step uploads nothing and its kernels read
     * the per-step values there (fed_count: the loss's divisor, computed by the feed). drops:
     * dropout calls of the step so far; drops_last: of the last whole step; fed_keys: keys the
     * feed drew. gblock (device) mirrors gblock_host; broken: why the graphs must stop. */
    uint64_t gen;
    bool fed;
    double fed_count;
    int fed_n, drops, drops_last, fed_keys;
    gblock_t *gblock, *gblock_host; /* device; host_alloc (pinned on a GPU) */
    char broken[160];
    /* The step block (device memory): [0] the loss sum, [1] the accuracy hits, then one double
     * per regularised weight in the order the step queued them; the kernels write it and the
     * step's end brings it to host_blk (host_alloc) with one download_async and the step's one
     * sync, with the checked layers' reports (host_stat, 3 floats each) and the predictions.
     * reg_end[k]: the end of layer k's slots among those queued (a layer's weights are summed
     * first, then added to the step's total, as the host did when each op returned its value). */
    double *blk, *host_blk;
    float *host_stat;
    int nreg, nchecked, reg_used, reg_groups, *reg_end;
    int step_n;        /* rows of the step in progress */
    double step_count; /* rows its loss divides by (ignore_class leaves some out) */
    bool drop_pred;    /* dt_model_keep_predictions(m, false) */
};

static dt__nn_layer *root(dt_model *m, dt__nn_layer *l)
{
    while (l->alias)
        l = &m->g.layers[l->in[0]];
    return l;
}

static bool has_fused_act(const dt__nn_layer *l)
{
    return l->vt == &dt__nn_dense || l->vt == &dt__nn_conv2d || l->vt == &dt__nn_depthwise_conv2d ||
           l->vt == &dt__nn_separable_conv2d || l->vt == &dt__nn_conv2d_transpose ||
           l->vt == &dt__nn_conv1d || l->vt == &dt__nn_time_distributed;
}

static void free_buffers(dt_model *m)
{
    const dt_nn_ops *o = m->ops;
    for (int i = 0; i < m->g.n; i++) {
        dt__nn_layer *l = &m->g.layers[i];
        if (!l->alias) {
            dt_nn_free(o, l->y);
            dt_nn_free(o, l->dy);
        }
        dt_nn_free(o, l->z);
        dt_nn_free(o, l->aux);
        dt_nn_free(o, l->stat);
        dt_nn_free(o, l->mask);
        l->y = l->dy = l->z = l->stat = l->mask = NULL;
        l->aux = NULL;
    }
    dt_nn_free(o, m->col);
    dt_nn_free(o, m->labels);
    dt_nn_free(o, m->targets);
    dt_nn_free(o, m->row_w);
    dt_nn_free(o, m->blk);
    if (m->host_pred)
        o->host_free(m->host_pred);
    if (m->host_blk)
        o->host_free(m->host_blk);
    if (m->host_stat)
        o->host_free(m->host_stat);
    free(m->reg_end);
    free(m->host_targets);
    m->blk = m->host_blk = NULL;
    m->host_stat = NULL;
    m->reg_end = NULL;
    m->col = m->targets = m->row_w = NULL;
    m->labels = NULL;
    m->host_pred = m->host_targets = NULL;
    m->reserved = 0;
}

/* Activation buffers for batches of up to n samples. */
static dt_status reserve(dt_model *m, int n, dt_err *err)
{
    if (n <= m->reserved)
        return DT_OK;
    free_buffers(m);
    m->gen++;
    const dt_nn_ops *o = m->ops;
    size_t col = 0;
    bool ok = true;
    for (int i = 0; i < m->g.n && ok; i++) {
        dt__nn_layer *l = &m->g.layers[i];
        size_t sz = (size_t)n * dt__nn_shape_size(&l->out) * sizeof(float);
        if (l->alias) {
            l->y = m->g.layers[l->in[0]].y;
            l->dy = m->g.layers[l->in[0]].dy;
            continue;
        }
        l->y = dt_nn_alloc(o, sz);
        ok = ok && l->y;
        if (i > 0) {
            l->dy = dt_nn_alloc(o, sz);
            ok = ok && l->dy;
        }
        if (has_fused_act(l) && l->act.kind != DT_NN_ACT_LINEAR && !l->act_to_consumer) {
            l->z = dt_nn_alloc(o, sz);
            ok = ok && l->z;
        }
        if (l->aux_bytes) {
            l->aux = dt_nn_alloc(o, (size_t)n * l->aux_bytes);
            ok = ok && l->aux;
        }
        if (l->stat_floats) {
            l->stat = dt_nn_alloc(o, l->stat_floats * sizeof(float));
            ok = ok && l->stat;
        }
        if (l->mask_len) {
            l->mask = dt_nn_alloc(o, (size_t)n * (size_t)l->mask_len * sizeof(float));
            ok = ok && l->mask;
        }
        col = l->col_floats > col ? l->col_floats : col;
    }
    size_t out = dt_model_output_size(m);
    m->nreg = m->nchecked = 0;
    for (int i = 1; i < m->g.n; i++) {
        const dt__nn_layer *l = &m->g.layers[i];
        m->nchecked += l->vt->check != NULL;
        for (int j = 0; j < l->n_w; j++)
            m->nreg += l->w[j].trainable && l->w[j].grad && (l->w[j].l1 > 0 || l->w[j].l2 > 0);
    }
    size_t blk = (2 + (size_t)m->nreg) * sizeof(double);
    if (ok)
        ok = (m->blk = dt_nn_alloc(o, blk)) != NULL && (m->host_blk = o->host_alloc(blk)) != NULL &&
             (m->host_stat = o->host_alloc(3 * sizeof(float) * (size_t)(m->nchecked + 1))) &&
             (m->reg_end = calloc((size_t)m->nreg + 1, sizeof(int))) != NULL;
    if (ok && col)
        ok = (m->col = dt_nn_alloc(o, (size_t)n * col * sizeof(float))) != NULL;
    if (ok)
        ok = (m->labels = dt_nn_alloc(o, (size_t)n * sizeof(int32_t))) != NULL &&
             (m->targets = dt_nn_alloc(o, (size_t)n * out * sizeof(float))) != NULL &&
             (m->row_w = dt_nn_alloc(o, (size_t)n * sizeof(float))) != NULL &&
             (m->host_pred = o->host_alloc((size_t)n * out * sizeof(float))) != NULL &&
             (m->host_targets = malloc((size_t)n * out * sizeof(float))) != NULL;
    if (!ok) {
        free_buffers(m);
        return dt_err_set(err, DT_ENOMEM,
                          "model: out of memory for the activations of a batch of %d (about %zu "
                          "MiB); use a smaller batch",
                          n, (size_t)(dt_model_batch_bytes(m, n) >> 20));
    }
    m->reserved = n;
    return DT_OK;
}

uint64_t dt_model_batch_bytes(const dt_model *m, int n)
{
    uint64_t bytes = 0, col = 0;
    for (int i = 0; i < m->g.n; i++) {
        const dt__nn_layer *l = &m->g.layers[i];
        if (l->alias)
            continue;
        uint64_t sz = (uint64_t)n * dt__nn_shape_size(&l->out) * sizeof(float);
        bytes += sz;
        if (i > 0)
            bytes += sz;
        if (has_fused_act(l) && l->act.kind != DT_NN_ACT_LINEAR && !l->act_to_consumer)
            bytes += sz;
        bytes += (uint64_t)n * (l->aux_bytes + (uint64_t)l->mask_len * sizeof(float)) +
                 l->stat_floats * sizeof(float);
        col = l->col_floats > col ? l->col_floats : col;
    }
    uint64_t out = dt_model_output_size(m);
    return bytes +
           (uint64_t)n * (col * sizeof(float) + sizeof(int32_t) + (3 * out + 1) * sizeof(float));
}

/* Dense or Conv2D with a plain relu feeding only a max pool: the pool applies the relu. */
static void fuse_relu_pool(dt__nn_graph *g)
{
    for (int i = 1; i < g->n; i++) {
        dt__nn_layer *p = &g->layers[i];
        if (!has_fused_act(p) || p->act.kind != DT_NN_ACT_RELU || p->n_consumers != 1 ||
            i == g->output)
            continue;
        for (int j = i + 1; j < g->n; j++) {
            dt__nn_layer *q = &g->layers[j];
            if (q->n_in == 1 && q->in[0] == i && q->vt == &dt__nn_maxpool2d) {
                p->act_to_consumer = q->relu_in = true;
                if (p->vt == &dt__nn_conv2d && p->groups <= 1) { /* grouped: the pool runs it */
                    p->pool_consumer = j;
                    q->pooled_by_producer = true;
                }
                break;
            }
        }
    }
}

/* The cap of a ReLU layer that only clips (no slope, threshold 0); < 0 when it does more. */
static float relu_cap(const dt_nn_act_p *a)
{
    if (a->alpha != 0 || a->threshold != 0)
        return -1.0f;
    if (a->kind == DT_NN_ACT_RELU)
        return INFINITY;
    if (a->kind != DT_NN_ACT_RELU_CAPPED || !(a->max_value > 0))
        return -1.0f;
    return a->max_value; /* INFINITY included */
}

/* ZeroPadding2D -> DepthwiseConv2D (valid, depth_multiplier 1, the pad's only consumer, not the
 * output): the conv reads the unpadded input with the frame as its padding. Its taps on the
 * frame added x * k = 0 * k, which leaves every sum as it was (finite kernels), and the frame's
 * gradient was dropped, so training gives the same bits. */
static void fuse_pad_dw(dt__nn_graph *g)
{
    for (int i = 1; i < g->n; i++) {
        dt__nn_layer *p = &g->layers[i];
        if (p->vt != &dt__nn_zeropadding2d || p->n_consumers != 1 || i == g->output || p->alias ||
            p->mask_src >= 0)
            continue;
        for (int j = i + 1; j < g->n; j++) {
            dt__nn_layer *q = &g->layers[j];
            if (q->n_in != 1 || q->in[0] != i)
                continue;
            if (q->vt == &dt__nn_depthwise_conv2d && !q->same && q->mult == 1 && q->win.pt == 0 &&
                q->win.pl == 0) {
                q->win.h -= p->pad[0] + p->pad[1];
                q->win.w -= p->pad[2] + p->pad[3];
                q->win.pt = p->pad[0];
                q->win.pl = p->pad[2];
                p->alias = p->pad_in_conv = true;
            }
            break;
        }
    }
}

/* BatchNormalization -> ReLU layer (its only consumer, not the output, no mask on the way): the
 * batch norm applies the ReLU and the ReLU layer becomes its alias. */
static void fuse_bn_relu(dt__nn_graph *g)
{
    for (int i = 1; i < g->n; i++)
        g->layers[i].bn_relu = -1.0f;
    for (int i = 1; i < g->n; i++) {
        dt__nn_layer *p = &g->layers[i];
        if (p->vt != &dt__nn_batchnorm || p->n_consumers != 1 || i == g->output || p->out.rank < 1)
            continue;
        for (int j = i + 1; j < g->n; j++) {
            dt__nn_layer *q = &g->layers[j];
            if (q->n_in == 1 && q->in[0] == i && q->vt == &dt__nn_relu && j != g->output &&
                q->mask_src < 0 && relu_cap(&q->act) >= 0) {
                p->bn_relu = relu_cap(&q->act);
                q->alias = q->relu_in_bn = true;
                break;
            }
        }
    }
}

/* A 1x1 Conv2D (stride 1, no bias, linear, not grouped, not pooled) -> BatchNormalization (its
 * only consumer, no mask): the conv runs the batch norm's training forward (bn_consumer). */
static void fuse_conv_bn(dt__nn_graph *g)
{
    for (int i = 1; i < g->n; i++) {
        dt__nn_layer *p = &g->layers[i];
        if (p->vt != &dt__nn_conv2d || p->n_consumers != 1 || i == g->output || p->groups > 1 ||
            p->use_bias || p->act.kind != DT_NN_ACT_LINEAR || p->pool_consumer > 0 ||
            p->mask_src >= 0 || p->kh != 1 || p->kw != 1 || p->sh != 1 || p->sw != 1)
            continue;
        for (int j = i + 1; j < g->n; j++) {
            dt__nn_layer *q = &g->layers[j];
            if (q->n_in != 1 || q->in[0] != i)
                continue;
            if (q->vt == &dt__nn_batchnorm) {
                p->bn_consumer = j;
                q->bn_by_producer = true;
            }
            break;
        }
    }
}

static void mask_propagate(dt__nn_graph *g, dt__nn_layer *l)
{
    l->mask_src = -1;
    if (l->mask_rule == DT_NN_MASK_MAKE && l->mask_len > 0) {
        l->mask_src = l->index;
        return;
    }
    if (l->mask_rule != DT_NN_MASK_PASS)
        return;
    for (int j = 0; j < l->n_in && l->mask_src < 0; j++) {
        int s = g->layers[l->in[j]].mask_src;
        /* A mask covers the first axis; an output that lost those timesteps loses it. */
        if (s >= 0 && l->out.rank >= 2 && l->out.d[0] == g->layers[s].mask_len)
            l->mask_src = s;
    }
}

static dt_status build(dt_model *m, uint64_t seed, uint64_t max_bytes, dt_err *err)
{
    dt__nn_graph *g = &m->g;
    size_t np = 0, ns = 0, nw = 0;
    for (int i = 0; i < g->n; i++) {
        dt__nn_layer *l = &g->layers[i];
        for (int j = 0; j < l->n_in; j++) {
            l->in_shape[j] = g->layers[l->in[j]].out;
            g->layers[l->in[j]].n_consumers++;
        }
        l->mask_rule = l->vt->mask;
        l->mask_len = 0;
        DT_TRY(l->vt->build(l, err));
        mask_propagate(g, l);
        for (int d = 0; d < l->out.rank; d++)
            if (l->out.d[d] < 1 || l->out.d[d] > DT_MAX_NN_DIM)
                return dt__nn_layer_err(l, DT_ETOOBIG, err,
                                        "output axis %d has size %d (limit 1..%d)", d, l->out.d[d],
                                        DT_MAX_NN_DIM);
        if (dt__nn_shape_size(&l->out) > (size_t)1 << 31)
            return dt__nn_layer_err(l, DT_ETOOBIG, err,
                                    "output of %zu values per sample is too large",
                                    dt__nn_shape_size(&l->out));
        for (int j = 0; j < l->n_w; j++) {
            size_t sz = dt__nn_shape_size(&l->w[j].shape);
            *(l->w[j].trainable ? &np : &ns) += sz;
            nw++;
        }
        if (np + ns > DT_MAX_NN_PARAMS)
            return dt__nn_layer_err(l, DT_ETOOBIG, err,
                                    "the model passes the limit of %llu weights",
                                    (unsigned long long)DT_MAX_NN_PARAMS);
        uint64_t need = (2 * (uint64_t)np + ns) * sizeof(float);
        if (max_bytes && need > max_bytes)
            return dt__nn_layer_err(l, DT_ETOOBIG, err,
                                    "up to this layer the model has %zu weights: %.2f GiB with "
                                    "their gradients, over the %.2f GiB a job may use here "
                                    "(dtraind --max-job-memory); make the layer smaller",
                                    np + ns, (double)need / (1 << 30),
                                    (double)max_bytes / (1 << 30));
    }
    /* The loss and backward need a layer that computes: an output that is the input (or a
     * Flatten / Reshape view of it) has no gradient buffer, and a step would write through NULL. */
    if (root(m, &g->layers[g->output]) == &g->layers[0])
        return dt_err_set(err, DT_EINVAL,
                          "model: its output is its input (nothing is computed after the "
                          "InputLayer); add the model's layers");
    fuse_relu_pool(g);
    fuse_bn_relu(g);
    fuse_pad_dw(g);
    fuse_conv_bn(g);
    const dt_nn_ops *o = m->ops;
    m->n_params = np;
    m->n_state = ns;
    m->params = dt_nn_alloc(o, (np ? np : 1) * sizeof(float));
    m->grads = dt_nn_alloc(o, (np ? np : 1) * sizeof(float));
    m->state = dt_nn_alloc(o, (ns ? ns : 1) * sizeof(float));
    m->weights = calloc(nw ? nw : 1, sizeof *m->weights);
    if (!m->params || !m->grads || !m->state || !m->weights)
        return dt_err_set(err, DT_ENOMEM, "model: out of memory for %zu weights", np + ns);
    size_t po = 0, so = 0;
    for (int i = 0; i < g->n; i++) {
        dt__nn_layer *l = &g->layers[i];
        for (int j = 0; j < l->n_w; j++) {
            dt__nn_weight *w = &l->w[j];
            dt_model_weight *p = &m->weights[m->n_weights];
            w->pub = (int)m->n_weights++;
            snprintf(p->name, sizeof p->name, "%s/%s", l->name, w->var);
            p->layer = i;
            p->ndim = w->shape.rank;
            for (int d = 0; d < w->shape.rank; d++)
                p->shape[d] = w->shape.d[d];
            p->size = dt__nn_shape_size(&w->shape);
            p->trainable = w->trainable;
            if (w->trainable) {
                p->offset = po;
                w->data = p->data = m->params + po;
                w->grad = p->grad = m->grads + po;
                po += p->size;
            } else {
                p->offset = so;
                w->data = p->data = m->state + so;
                so += p->size;
            }
            /* One stream per weight: adding a layer does not change the others' values. */
            float *host = malloc(p->size * sizeof(float));
            if (!host)
                return dt_err_set(err, DT_ENOMEM, "model: out of memory initializing %s", p->name);
            dt_rng r;
            /* Streams i * 4 + j are those of the days of 4 weights a layer: a seed keeps
             * giving the initial weights it gave then. */
            uint64_t stream = j < 4 ? (uint64_t)i * 4 + (uint64_t)j
                                    : (UINT64_C(1) << 40) + (uint64_t)i * DT_NN_MAX_W + (uint64_t)j;
            dt_rng_seed2(&r, seed, stream);
            dt__nn_init_fill(&w->init, &w->shape, host, &r);
            o->upload(p->data, host, p->size * sizeof(float));
            free(host);
        }
    }
    dt_rng_seed2(&m->rng, seed, UINT64_C(0xd10f0075) /* dropout stream */);
    return DT_OK;
}

dt_status dt_model_from_json(const char *json, size_t len, const dt_model_opts *opts,
                             dt_model **out, dt_err *err)
{
    *out = NULL;
    if (len > DT_MAX_MODEL_JSON)
        return dt_err_set(err, DT_ETOOBIG, "model: JSON of %zu bytes exceeds the limit of %u", len,
                          DT_MAX_MODEL_JSON);
    /* The end pointer, not cJSON_GetErrorPtr(): that is a global, and threads parse at once. */
    const char *end = NULL;
    cJSON *root_j = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root_j)
        return dt_err_set(err, DT_EINVAL, "model: not valid JSON (near byte %td)",
                          end && end >= json ? end - json : (ptrdiff_t)0);
    dt_status st = dt_json_unique_keys(root_j, "model: $", err);
    if (st != DT_OK) {
        cJSON_Delete(root_j);
        return st;
    }
    dt_model *m = calloc(1, sizeof *m);
    if (!m) {
        st = dt_err_set(err, DT_ENOMEM, "model: out of memory");
        goto fail;
    }
    m->ops = (opts && opts->ops) ? opts->ops : dt__nn_ops_default();
    DT_TRY_GOTO(dt__nn_keras_parse(root_j, &m->g, err), st, fail);
    DT_TRY_GOTO(build(m, opts ? opts->seed : 0, opts ? opts->max_bytes : 0, err), st, fail);
    cJSON_Delete(root_j);
    *out = m;
    return DT_OK;
fail:
    cJSON_Delete(root_j);
    dt_model_free(m);
    return st;
}

dt_status dt_model_from_file(const char *path, const dt_model_opts *opts, dt_model **out,
                             dt_err *err)
{
    char *text;
    size_t len;
    DT_TRY(dt_file_read_all(path, DT_MAX_MODEL_JSON, &text, &len, err));
    dt_status st = dt_model_from_json(text, len, opts, out, err);
    free(text);
    if (st != DT_OK) {
        /* "m.json: $.config.layers[3] ...": the file says it is the model. */
        if (strncmp(err->msg, "model: $", 8) == 0)
            memmove(err->msg, err->msg + 7, strlen(err->msg + 7) + 1);
        dt_err_prefix(err, "%s", path);
    }
    return st;
}

void dt_model_free(dt_model *m)
{
    if (!m)
        return;
    if (m->g.layers)
        free_buffers(m);
    dt_nn_free(m->ops, m->params);
    dt_nn_free(m->ops, m->grads);
    dt_nn_free(m->ops, m->state);
    dt_nn_free(m->ops, m->gblock);
    if (m->gblock_host)
        m->ops->host_free(m->gblock_host);
    free(m->weights);
    for (int i = 0; m->g.layers && i < m->g.n; i++)
        free(m->g.layers[i].cfg_floats);
    free(m->g.layers);
    free(m);
}

dt_status dt_model_adapt_begin(dt_model *m, dt_model_adapt **out, dt_err *err)
{
    *out = NULL;
    if (dt__nn_adapt_count(&m->g) == 0)
        return DT_OK;
    return dt__nn_adapt_new(&m->g, out, err);
}

void dt_model_adapt_rows(dt_model_adapt *a, const float *x, size_t n)
{
    dt__nn_adapt_rows(a, x, n);
}

void dt_model_adapt_end(dt_model *m, dt_model_adapt *a)
{
    if (a)
        dt__nn_adapt_finish(a, m->ops);
}

dt__nn_graph *dt__nn_model_graph(dt_model *m)
{
    return &m->g;
}

const char *dt_model_name(const dt_model *m)
{
    return m->g.name;
}

bool dt_model_is_sequential(const dt_model *m)
{
    return m->g.sequential;
}

const dt_nn_ops *dt_model_ops(const dt_model *m)
{
    return m->ops;
}

dt_rng *dt_model_rng(dt_model *m)
{
    return &m->rng;
}

size_t dt_model_layer_count(const dt_model *m)
{
    return (size_t)m->g.n;
}

void dt_model_layer_info(const dt_model *m, size_t i, dt_model_layer *out)
{
    const dt__nn_layer *l = &m->g.layers[i];
    memset(out, 0, sizeof *out);
    out->name = l->name;
    out->class_name = l->vt->class_name;
    out->ndim = l->out.rank;
    for (int d = 0; d < l->out.rank; d++)
        out->shape[d] = l->out.d[d];
    for (int j = 0; j < l->n_w; j++) {
        size_t sz = dt__nn_shape_size(&l->w[j].shape);
        out->params += sz;
        if (l->w[j].trainable)
            out->trainable_params += sz;
    }
    out->in_summary = !(m->g.sequential && l->vt == &dt__nn_input_layer);
    out->n_inbound = l->n_in;
    for (int j = 0; j < l->n_in && j < 16; j++)
        out->inbound[j] = m->g.layers[l->in[j]].name;
}

void dt_model_param_counts(const dt_model *m, size_t *total, size_t *trainable,
                           size_t *non_trainable)
{
    if (total)
        *total = m->n_params + m->n_state;
    if (trainable)
        *trainable = m->n_params;
    if (non_trainable)
        *non_trainable = m->n_state;
}

static int shape_out(const dt_nn_shape *s, int64_t shape[DT_NN_MAX_RANK])
{
    for (int d = 0; d < s->rank; d++)
        shape[d] = s->d[d];
    return s->rank;
}

int dt_model_input_shape(const dt_model *m, int64_t shape[DT_NN_MAX_RANK])
{
    return shape_out(&m->g.layers[0].out, shape);
}

int dt_model_output_shape(const dt_model *m, int64_t shape[DT_NN_MAX_RANK])
{
    return shape_out(&m->g.layers[m->g.output].out, shape);
}

size_t dt_model_input_size(const dt_model *m)
{
    return dt__nn_shape_size(&m->g.layers[0].out);
}

size_t dt_model_output_size(const dt_model *m)
{
    return dt__nn_shape_size(&m->g.layers[m->g.output].out);
}

float *dt_model_params(dt_model *m, size_t *n)
{
    if (n)
        *n = m->n_params;
    return m->params;
}

float *dt_model_grads(dt_model *m, size_t *n)
{
    if (n)
        *n = m->n_params;
    return m->grads;
}

float *dt_model_state(dt_model *m, size_t *n)
{
    if (n)
        *n = m->n_state;
    return m->state;
}

size_t dt_model_weight_count(const dt_model *m)
{
    return m->n_weights;
}

const dt_model_weight *dt_model_weight_at(const dt_model *m, size_t i)
{
    return i < m->n_weights ? &m->weights[i] : NULL;
}

const dt_model_weight *dt_model_find_weight(const dt_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_weights; i++)
        if (!strcmp(m->weights[i].name, name))
            return &m->weights[i];
    return NULL;
}

static dt_status weight_for_copy(const dt_model *m, const char *name, size_t n,
                                 const dt_model_weight **w, dt_err *err)
{
    *w = dt_model_find_weight(m, name);
    if (!*w)
        return dt_err_set(err, DT_ENOENT, "model '%s' has no weight named '%s'", m->g.name, name);
    if ((*w)->size != n)
        return dt_err_set(err, DT_EINVAL, "weight '%s' has %zu values, not %zu", name, (*w)->size,
                          n);
    return DT_OK;
}

void dt_model_download_all(dt_model *m, float *host)
{
    size_t np, ns;
    const float *p = dt_model_params(m, &np), *s = dt_model_state(m, &ns);
    m->ops->download(host, p, np * sizeof(float));
    if (ns)
        m->ops->download(host + np, s, ns * sizeof(float));
}

void dt_model_upload_all(dt_model *m, const float *host)
{
    size_t np, ns;
    float *p = dt_model_params(m, &np), *s = dt_model_state(m, &ns);
    m->ops->upload(p, host, np * sizeof(float));
    if (ns)
        m->ops->upload(s, host + np, ns * sizeof(float));
}

dt_status dt_model_set_weight(dt_model *m, const char *name, const float *host, size_t n,
                              dt_err *err)
{
    const dt_model_weight *w;
    DT_TRY(weight_for_copy(m, name, n, &w, err));
    m->ops->upload(w->data, host, n * sizeof(float));
    return DT_OK;
}

dt_status dt_model_get_weight(const dt_model *m, const char *name, float *host, size_t n,
                              dt_err *err)
{
    const dt_model_weight *w;
    DT_TRY(weight_for_copy(m, name, n, &w, err));
    m->ops->download(host, w->data, n * sizeof(float));
    return DT_OK;
}

/* ---- one step ----------------------------------------------------------------------------------
 */

static dt__nn_ctx ctx(dt_model *m, int n, bool training)
{
    return (dt__nn_ctx){.ops = m->ops,
                        .layers = m->g.layers,
                        .n = n,
                        .training = training,
                        .rng = &m->rng,
                        .col = m->col,
                        .model = m};
}

void dt__nn_drop(dt__nn_ctx *c, const float *x, float *y, float *mask, size_t n, float rate)
{
    dt_model *m = c->model;
    int k = m ? m->drops++ : 0;
    if (m && m->fed && c->ops->dropout_fwd_key) {
        if (k < m->fed_keys) {
            c->ops->dropout_fwd_key(x, y, mask, n, rate, &m->gblock->keys[k]);
            return;
        }
        /* more draws than the step this feed copied: the step changed shape under the graph */
        snprintf(m->broken, sizeof m->broken,
                 "the step made more dropout draws (%d) than the one before it (%d)", k + 1,
                 m->fed_keys);
    }
    c->ops->dropout_fwd(x, y, mask, n, rate, c->rng);
}

static dt_status check_batch(dt_model *m, const dt_model_batch *b, const dt_loss *loss, dt_err *err)
{
    if (!b || b->n < 1 || (!b->x && !b->x_dev))
        return dt_err_set(err, DT_EINVAL, "model: empty batch");
    int cols = (int)dt_model_output_size(m);
    if (loss->kind == DT_NN_LOSS_SPARSE_CE) {
        if (!b->labels)
            return dt_err_set(err, DT_EINVAL,
                              "model: sparse_categorical_crossentropy needs labels");
        for (int i = 0; i < b->n; i++)
            if ((b->labels[i] < 0 || b->labels[i] >= cols) &&
                !(loss->has_ignore_class && b->labels[i] == loss->ignore_class))
                return dt_err_set(err, DT_EINVAL,
                                  "model: label %d of sample %d is outside [0, %d) (the output "
                                  "layer '%s' has %d units)",
                                  b->labels[i], i, cols, m->g.layers[m->g.output].name, cols);
    } else if (!b->targets && !(b->labels && cols == 1)) {
        return dt_err_set(err, DT_EINVAL, "model: %s needs targets of %d values per sample%s",
                          dt_loss_name(loss->kind), cols, b->labels ? ", not integer labels" : "");
    }
    return DT_OK;
}

static void beat(dt_model *m)
{
    if (m->beat)
        atomic_store_explicit(m->beat, dt_now_ms(), memory_order_relaxed);
}

/* The batch's inputs into the input layer's buffer, whose address stays: copied on the device
 * when the batch is there already (fit's feed), else uploaded. */
static void put_input(dt_model *m, const float *x, const float *x_dev, int n)
{
    dt__nn_layer *in = &m->g.layers[0];
    size_t nx = (size_t)n * dt__nn_shape_size(&in->out);
    if (x_dev)
        m->ops->copy(nx, x_dev, in->y, false);
    else
        m->ops->upload(in->y, x, nx * sizeof(float));
}

/* Queues the forward. What a layer finds wrong with the batch (an id outside an Embedding's
 * table) is checked at the step's end, after its one sync (checks() below). */
static void forward(dt_model *m, const float *x, const float *x_dev, int n, bool training)
{
    if (!m->fed) /* else dt_model_graph_feed put it there */
        put_input(m, x, x_dev, n);
    dt__nn_ctx c = ctx(m, n, training);
    for (int i = 1; i < m->g.n; i++) {
        dt__nn_layer *l = &m->g.layers[i];
        l->vt->forward(l, &c);
        beat(m);
    }
}

/* Queues the download of every checked layer's report into host_stat. */
static void queue_checks(dt_model *m)
{
    for (int i = 1, k = 0; i < m->g.n; i++) {
        dt__nn_layer *l = &m->g.layers[i];
        if (l->vt->check)
            m->ops->download_async(m->host_stat + 3 * k++, l->stat, 3 * sizeof(float));
    }
}

/* After the sync: fails on the first layer (in the graph's order) whose report finds the batch
 * wrong, with the message its check made when it ran right after the layer's forward. */
static dt_status checks(dt_model *m, dt_err *err)
{
    for (int i = 1, k = 0; i < m->g.n; i++) {
        dt__nn_layer *l = &m->g.layers[i];
        if (l->vt->check)
            DT_TRY(l->vt->check(l, m->host_stat + 3 * k++, err));
    }
    return DT_OK;
}

/* Keras fuses a final softmax (sigmoid) into a cross-entropy given probabilities, computing it
 * from the logits; so do we. Returns the tensor the loss reads and sets from_logits. */
static const float *loss_input(dt_model *m, const dt_loss *loss, bool *from_logits)
{
    dt__nn_layer *o = root(m, &m->g.layers[m->g.output]);
    o->fused_loss = false;
    *from_logits = loss->from_logits;
    if (loss->from_logits || o != &m->g.layers[m->g.output])
        return o->y;
    dt_nn_act want = loss->kind == DT_NN_LOSS_BCE ? DT_NN_ACT_SIGMOID : DT_NN_ACT_SOFTMAX;
    bool ce = loss->kind == DT_NN_LOSS_SPARSE_CE || loss->kind == DT_NN_LOSS_CE ||
              loss->kind == DT_NN_LOSS_BCE;
    if (!ce || o->act.kind != want)
        return o->y;
    if (has_fused_act(o)) {
        o->fused_loss = true;
        *from_logits = true;
        return o->z;
    }
    if (o->vt == &dt__nn_activation || o->vt == &dt__nn_softmax) {
        o->fused_loss = true;
        *from_logits = true;
        return m->g.layers[o->in[0]].y;
    }
    return o->y;
}

/* Queues Keras's "accuracy" hits of the batch into the step block: binary for
 * binary_crossentropy or one output unit, sparse categorical for integer labels, categorical
 * otherwise; the labels or targets it reads are the device copies loss_feed uploaded. */
static void queue_hits(dt_model *m, const dt_loss *loss, const dt_model_batch *b)
{
    int cols = (int)dt_model_output_size(m);
    dt__nn_layer *o = root(m, &m->g.layers[m->g.output]);
    bool sparse_loss = loss->kind == DT_NN_LOSS_SPARSE_CE;
    const int32_t *lab = NULL;
    const float *tg = NULL;
    dt_nn_hits_kind kind;
    if (loss->kind == DT_NN_LOSS_BCE || cols == 1) {
        kind = DT_NN_HITS_BINARY;
        if (!sparse_loss) { /* the loss's targets: b->targets, or the labels as floats */
            tg = m->targets;
        } else if (b->targets) {
            tg = m->targets;
        } else {
            lab = m->labels;
        }
    } else if (b->labels) {
        kind = DT_NN_HITS_SPARSE;
        lab = m->labels;
    } else {
        kind = DT_NN_HITS_CATEGORICAL; /* targets: the loss is not sparse (it needs labels) */
        tg = m->targets;
    }
    m->ops->hits(kind, o->y, lab, tg, (size_t)b->n, cols, m->blk + 1);
}

/* Keras's hinge losses turn 0/1 targets into -1/1 when every target of the batch is 0 or 1. */
static bool all_binary(const float *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] != 0.0f && t[i] != 1.0f)
            return false;
    return true;
}

/* The host half of the loss: uploads the batch's labels or targets and its sample weights, and
 * works out what depends on them: the scale (with ignore_class, over the rows left), hinge's
 * -1/1 flag and the divisor of the mean. */
static void loss_feed(dt_model *m, const dt_loss *loss, const dt_model_batch *b, float *scale,
                      bool *pm1, double *count)
{
    int cols = (int)dt_model_output_size(m);
    size_t nt = (size_t)b->n * (size_t)cols;
    *count = b->n;
    *pm1 = false;
    if (loss->kind == DT_NN_LOSS_SPARSE_CE) {
        /* copy moves 32-bit words: the labels' bits pass unchanged */
        if (b->labels_dev)
            m->ops->copy((size_t)b->n, (const float *)b->labels_dev, (float *)m->labels, false);
        else
            m->ops->upload(m->labels, b->labels, (size_t)b->n * sizeof(int32_t));
        /* Keras masks the ignored rows and divides by the rows left (per replica, as under
         * MirroredStrategy: each replica's mean counts 1/R of the global one). */
        if (loss->has_ignore_class) {
            double c = 0;
            for (int i = 0; i < b->n; i++)
                c += b->labels[i] != loss->ignore_class;
            *scale = c > 0 ? (float)(*scale * b->n / c) : 0.0f;
            *count = c;
        }
    } else {
        /* Integer labels of a one-output model are the float targets Keras casts them to. */
        const float *t = b->targets;
        if (!t) {
            for (int i = 0; i < b->n; i++)
                m->host_targets[i] = (float)b->labels[i];
            t = m->host_targets;
        }
        *pm1 = (loss->kind == DT_NN_LOSS_HINGE || loss->kind == DT_NN_LOSS_SQUARED_HINGE) &&
               all_binary(t, nt);
        if (b->targets && b->targets_dev)
            m->ops->copy(nt, b->targets_dev, m->targets, false);
        else
            m->ops->upload(m->targets, t, nt * sizeof(float));
    }
    if (b->sample_weight && b->sample_weight_dev)
        m->ops->copy((size_t)b->n, b->sample_weight_dev, m->row_w, false);
    else if (b->sample_weight)
        m->ops->upload(m->row_w, b->sample_weight, (size_t)b->n * sizeof(float));
    /* what the accuracy reads besides (queue_hits): the targets of a binary output under sparse
     * CE, the labels of a categorical one under another loss */
    bool binary = loss->kind == DT_NN_LOSS_BCE || cols == 1;
    if (loss->kind == DT_NN_LOSS_SPARSE_CE && binary && b->targets)
        m->ops->upload(m->targets, b->targets, nt * sizeof(float));
    if (loss->kind != DT_NN_LOSS_SPARSE_CE && !binary && b->labels)
        m->ops->upload(m->labels, b->labels, (size_t)b->n * sizeof(int32_t));
}

/* Queues the batch's loss: the sum of the per-sample losses into the step block (blk[0]), and
 * scale times its gradient in the output's dy; returns the rows its mean divides by (those not
 * ignored, with ignore_class). A fed step (dt_model_graph_feed) has its batch on the device
 * already and the kernel reads the scale and hinge's flag from the graph's block. */
static double compute_loss(dt_model *m, const dt_loss *loss, const dt_model_batch *b, float scale)
{
    int cols = (int)dt_model_output_size(m);
    dt_nn_loss_p p = {.kind = loss->kind,
                      .label_smoothing = loss->label_smoothing,
                      .delta = loss->delta,
                      .has_ignore_class = loss->has_ignore_class,
                      .ignore_class = loss->ignore_class};
    const float *pred = loss_input(m, loss, &p.from_logits);
    double count;
    if (m->fed) {
        p.step = m->gblock->loss;
        count = m->fed_count;
        scale = NAN; /* the kernel reads the block's: one that did not would show */
    } else {
        loss_feed(m, loss, b, &scale, &p.hinge_pm1, &count);
    }
    dt__nn_layer *o = root(m, &m->g.layers[m->g.output]);
    const float *row_w = b->sample_weight ? m->row_w : NULL;
    m->ops->loss_dev(&p, pred, m->labels, loss->kind == DT_NN_LOSS_SPARSE_CE ? NULL : m->targets,
                     row_w, (size_t)b->n, cols, scale, o->dy, m->blk);
    return count;
}

/* Keras adds the regularizers to the loss; per replica they count scale = n/global_batch of
 * it. Queues the layer's regularization losses into the step block's next slots and adds scale
 * times their gradient to the grads (scale 0: the loss only). */
static void layer_regularize(dt_model *m, const dt__nn_layer *ly, float scale)
{
    int k0 = m->reg_used;
    for (int j = 0; j < ly->n_w; j++) {
        const dt__nn_weight *w = &ly->w[j];
        if (w->trainable && w->grad && (w->l1 > 0 || w->l2 > 0) && m->reg_used < m->nreg)
            m->ops->regularize_dev(w->data, w->grad, dt__nn_shape_size(&w->shape), w->l1, w->l2,
                                   scale, m->blk + 2 + m->reg_used++);
    }
    if (m->reg_used > k0)
        m->reg_end[m->reg_groups++] = m->reg_used;
}

/* The regularization losses of the step block (host_blk), added as the host did when the op
 * returned them: each layer's weights in order, then the layers' sums in order. */
static double reg_total(const dt_model *m)
{
    double reg = 0;
    for (int g = 0, k = 0; g < m->reg_groups; g++) {
        double r = 0;
        for (; k < m->reg_end[g]; k++)
            r += m->host_blk[2 + k];
        reg += r;
    }
    return reg;
}

static void step_start(dt_model *m, int n, double count)
{
    m->step_n = n;
    m->step_count = count;
    m->reg_used = m->reg_groups = 0;
}

/* The step's one host synchronisation: the step block, the checked layers' reports and (when
 * stats are due and kept) the predictions are queued for download behind everything queued so
 * far, then one sync; the host reads them after it. The checks that stopped a step early when
 * each op waited for its own number (a bad id, a non-finite loss) are taken here, with the
 * same messages, so the step's backward (and whatever the caller queued, the update) has run. */
static dt_status finish(dt_model *m, dt_step_stats *stats, bool nonfinite_fails, dt_err *err)
{
    const dt_nn_ops *o = m->ops;
    o->download_async(m->host_blk, m->blk, (2 + (size_t)m->reg_used) * sizeof(double));
    queue_checks(m);
    int cols = (int)dt_model_output_size(m);
    if (stats && !m->drop_pred)
        o->download_async(m->host_pred, root(m, &m->g.layers[m->g.output])->y,
                          (size_t)m->step_n * cols * sizeof(float));
    char msg[512];
    if (o->sync && o->sync(msg, sizeof msg) != 0) /* a device's kernels fail only here */
        return dt_err_set(err, DT_EIO, "%s: %s", o->name, msg);
    DT_TRY(checks(m, err));
    double l = m->step_count > 0 ? m->host_blk[0] / m->step_count : 0.0;
    if (stats) {
        stats->loss = l + reg_total(m);
        stats->accuracy = m->host_blk[1] / m->step_n;
    }
    if (nonfinite_fails && !isfinite(l))
        return dt_err_set(err, DT_EINVAL,
                          "model: the loss is not finite (%g); lower the "
                          "learning rate or check the inputs",
                          l);
    return DT_OK;
}

void dt_model_keep_predictions(dt_model *m, bool keep)
{
    m->drop_pred = !keep;
}

static bool layer_has_grads(const dt__nn_layer *ly)
{
    for (int j = 0; j < ly->n_w; j++)
        if (ly->w[j].trainable && ly->w[j].grad)
            return true;
    return false;
}

/* Layer ly's gradients are final: its regularizers are added, then the grad-ready hook learns
 * that the grads from its first trainable weight on may go. Once per layer and step: from
 * inside its backward (dt__nn_weights_done, before its dx) or right after it. */
static void grads_final(dt_model *m, const dt__nn_layer *ly)
{
    layer_regularize(m, ly, m->step_reg_scale);
    for (int j = 0; j < ly->n_w; j++) {
        const dt_model_weight *w = &m->weights[ly->w[j].pub];
        if (w->trainable && w->offset < m->step_ready)
            m->step_ready = w->offset;
    }
    if (m->grad_ready && layer_has_grads(ly))
        m->grad_ready(m->grad_ready_ctx, m->step_ready);
}

static void on_weights_done(dt__nn_ctx *c, dt__nn_layer *l)
{
    dt_model *m = c->owner;
    grads_final(m, l);
    m->step_early = l;
}

void dt_model_set_beat(dt_model *m, _Atomic int64_t *b)
{
    m->beat = b;
}

void dt_model_set_grad_ready(dt_model *m, dt_model_grad_ready_fn fn, void *ctx)
{
    m->grad_ready = fn;
    m->grad_ready_ctx = ctx;
}

static dt_status train_begin(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                             int global_batch, dt_err *err)
{
    DT_TRY(check_batch(m, b, loss, err));
    if (global_batch < b->n)
        return dt_err_set(err, DT_EINVAL, "model: global batch %d is smaller than the batch %d",
                          global_batch, b->n);
    DT_TRY(reserve(m, b->n, err));
    forward(m, b->x, b->x_dev, b->n, true);
    step_start(m, b->n, compute_loss(m, loss, b, 1.0f / (float)global_batch));
    queue_hits(m, loss, b);

    /* Backward in reverse topological order. The output's dy was written by the loss; every
     * other dy is written by its first consumer and added to by the rest. Weights are laid out
     * layer by layer in this order, so once layer i's weight gradients are done (regularizers
     * included; a Dense says so before its dx) the grads from its first trainable weight on are
     * final and the hook may take them. */
    dt__nn_ctx c = ctx(m, b->n, true);
    c.weights_done = on_weights_done;
    c.owner = m;
    for (int i = 0; i < m->g.n; i++)
        m->g.layers[i].dy_written = false;
    root(m, &m->g.layers[m->g.output])->dy_written = true;
    m->step_reg_scale = (float)b->n / (float)global_batch;
    m->step_ready = m->n_params;
    for (int i = m->g.n - 1; i >= 1; i--) {
        dt__nn_layer *ly = &m->g.layers[i];
        if (!ly->alias && !ly->dy_written) { /* feeds nothing that reaches the output */
            for (int j = 0; j < ly->n_w; j++)
                if (ly->w[j].grad)
                    m->ops->fill(dt__nn_shape_size(&ly->w[j].shape), 0.0f, ly->w[j].grad);
        } else {
            m->step_early = NULL;
            ly->vt->backward(ly, &c);
            beat(m);
            if (m->step_early == ly)
                continue;
        }
        grads_final(m, ly);
    }
    if (m->grad_ready && m->n_params == 0)
        m->grad_ready(m->grad_ready_ctx, 0);
    return DT_OK;
}

dt_status dt_model_train_begin(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                               int global_batch, dt_err *err)
{
    m->drops = 0;
    dt_status st = train_begin(m, loss, b, global_batch, err);
    if (st == DT_OK || m->drops > 0) /* the forward ran: its dropout calls were counted */
        m->drops_last = m->drops;
    /* A fed step stays fed until its end: a capture that failed runs its begin again, eagerly,
     * from the same feed (the keys it drew). Without an end to come, the next step feeds
     * itself. */
    if (st != DT_OK)
        m->fed = false;
    return st;
}

dt_status dt_model_train_end(dt_model *m, dt_step_stats *stats, dt_err *err)
{
    m->fed = false;
    return finish(m, stats, true, err);
}

dt_status dt_model_train_step(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                              int global_batch, dt_step_stats *stats, dt_err *err)
{
    DT_TRY(dt_model_train_begin(m, loss, b, global_batch, err));
    return dt_model_train_end(m, stats, err);
}

/* --- CUDA graphs of the training step ------------------------------------------------------- */

bool dt_model_graph_fit(const dt_model *m, char *why, size_t n)
{
    const char *w = NULL;
    char buf[DT_NN_NAME_LEN + 160];
    if (!m->ops->graph_begin)
        w = "the backend runs each kernel when it is called";
    else if (!m->ops->dropout_fwd_key)
        w = "the backend has no dropout with a key in device memory";
    else if (m->broken[0])
        w = m->broken;
    for (int i = 1; !w && i < m->g.n; i++) {
        const dt__nn_layer *l = &m->g.layers[i];
        /* The random augmentation layers draw each image's parameters on the host and upload
         * them every step: a replay would reuse the captured step's draws. */
        const dt__nn_layer_vt *vt = l->vt;
        if (vt == &dt__nn_random_flip || vt == &dt__nn_random_brightness ||
            vt == &dt__nn_random_contrast || vt == &dt__nn_random_crop ||
            vt == &dt__nn_random_translation || vt == &dt__nn_random_zoom ||
            vt == &dt__nn_random_rotation) {
            snprintf(buf, sizeof buf, "layer '%s' (%s) draws its parameters on the host every step",
                     l->name, vt->class_name);
            w = buf;
        }
    }
    if (w && why && n)
        snprintf(why, n, "%s", w);
    return w == NULL;
}

uint64_t dt_model_graph_gen(const dt_model *m)
{
    return m->gen;
}

dt_status dt_model_graph_feed(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                              int global_batch, dt_err *err)
{
    m->fed = false;
    DT_TRY(check_batch(m, b, loss, err));
    if (global_batch < b->n)
        return dt_err_set(err, DT_EINVAL, "model: global batch %d is smaller than the batch %d",
                          global_batch, b->n);
    if (b->n > m->reserved)
        return dt_err_set(err, DT_ESTATE,
                          "model: a graphed step of %d samples before an eager one (its "
                          "buffers are not reserved)",
                          b->n);
    if (m->drops_last > DT_MODEL_GRAPH_KEYS)
        return dt_err_set(err, DT_ENOTSUP,
                          "model: the step draws %d dropout keys; a graphed step holds %d",
                          m->drops_last, DT_MODEL_GRAPH_KEYS);
    if (!m->gblock && !(m->gblock = dt_nn_alloc(m->ops, sizeof *m->gblock)))
        return dt_err_set(err, DT_ENOMEM, "model: out of memory for the step block");
    /* Pinned on a GPU, so the upload is a plain async copy: the host rewrites it only at the
     * next feed, after this step's end has synchronised. */
    if (!m->gblock_host && !(m->gblock_host = m->ops->host_alloc(sizeof *m->gblock_host)))
        return dt_err_set(err, DT_ENOMEM, "model: out of host memory for the step block");
    put_input(m, b->x, b->x_dev, b->n);
    float scale = 1.0f / (float)global_batch;
    bool pm1;
    double count;
    loss_feed(m, loss, b, &scale, &pm1, &count);
    m->gblock_host->loss[DT_NN_LOSS_STEP_SCALE] = scale;
    m->gblock_host->loss[DT_NN_LOSS_STEP_PM1] = pm1 ? 1.0f : 0.0f;
    /* the keys the step's dropout calls draw, in call order (the CPU draws dt_rng_u64 per call) */
    for (int k = 0; k < m->drops_last; k++)
        m->gblock_host->keys[k] = dt_rng_u64(&m->rng);
    m->ops->upload(m->gblock, m->gblock_host,
                   offsetof(gblock_t, keys) + (size_t)m->drops_last * sizeof(uint64_t));
    m->fed = true;
    m->fed_n = b->n;
    m->fed_count = count;
    m->fed_keys = m->drops_last;
    return DT_OK;
}

void dt_model_graph_replayed(dt_model *m)
{
    /* what the captured step's begin left for its end, for this step's */
    m->step_n = m->fed_n;
    m->step_count = m->fed_count;
    m->drops = m->drops_last = m->fed_keys;
}

dt_status dt_model_predict(dt_model *m, const float *x, int n, float *out, dt_err *err)
{
    if (n < 1 || !x)
        return dt_err_set(err, DT_EINVAL, "model: empty batch");
    DT_TRY(reserve(m, n, err));
    forward(m, x, NULL, n, false);
    queue_checks(m);
    dt__nn_layer *o = root(m, &m->g.layers[m->g.output]);
    /* a blocking download: the reports queued before it are in too */
    m->ops->download(out, o->y, (size_t)n * dt_model_output_size(m) * sizeof(float));
    return checks(m, err);
}

const float *dt_model_last_predictions(const dt_model *m)
{
    return m->host_pred; /* the step's end downloads them with its stats */
}

dt_status dt_model_evaluate_begin(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                                  dt_err *err)
{
    DT_TRY(check_batch(m, b, loss, err));
    DT_TRY(reserve(m, b->n, err));
    forward(m, b->x, b->x_dev, b->n, false);
    step_start(m, b->n, compute_loss(m, loss, b, 1.0f / (float)b->n));
    queue_hits(m, loss, b);
    for (int i = 1; i < m->g.n; i++)
        layer_regularize(m, &m->g.layers[i], 0.0f);
    return DT_OK;
}

dt_status dt_model_evaluate_end(dt_model *m, dt_step_stats *stats, dt_err *err)
{
    bool drop = m->drop_pred;
    m->drop_pred = false; /* evaluation's metrics always read them */
    dt_status st = finish(m, stats, false, err);
    m->drop_pred = drop;
    return st;
}

dt_status dt_model_evaluate(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                            dt_step_stats *stats, dt_err *err)
{
    DT_TRY(dt_model_evaluate_begin(m, loss, b, err));
    return dt_model_evaluate_end(m, stats, err);
}
