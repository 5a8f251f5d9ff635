/* layers_preproc.c - Keras's preprocessing layers that compute rather than augment:
 * Normalization (mean and variance from the config, as constants, or Keras's adapt() over the
 * training data: then they are the non-trainable weights mean, variance and count) and
 * CategoryEncoding (one_hot, multi_hot, count). */
#include "nn/layer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Normalization ---------------------------------------------------------------------- */

static const char *const norm_keys[] = {"axis", "mean", "variance", "invert", NULL};

/* A number or a list of numbers (config mean / variance) appended to l->cfg_floats. */
static dt_status read_vals(dt__nn_layer *l, const cJSON *cfg, const char *key, int *n, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *n = 0;
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (!(cJSON_IsNumber(v) || (cJSON_IsArray(v) && k > 0 && k <= (1 << 24))))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected a number or a list", key);
    float *p = realloc(l->cfg_floats, (l->n_cfg_floats + (size_t)k) * sizeof *p);
    if (!p)
        return dt__nn_layer_err(l, DT_ENOMEM, err, "option '%s': out of memory", key);
    l->cfg_floats = p;
    const cJSON *e = cJSON_IsArray(v) ? v->child : v;
    for (int i = 0; i < k; i++, e = e->next) {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
            return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': value %d is not a number", key,
                                    i);
        p[l->n_cfg_floats + (size_t)i] = (float)e->valuedouble;
    }
    l->n_cfg_floats += (size_t)k;
    *n = k;
    return DT_OK;
}

static dt_status norm_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    /* axis: -1 (a mean per feature of the last axis, Keras's default) or null (one for all) */
    const cJSON *ax = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
    if (cJSON_IsArray(ax) && cJSON_GetArraySize(ax) == 1)
        ax = ax->child;
    l->keepdims = !ax || !cJSON_IsNull(ax); /* true: per feature */
    if (ax && !cJSON_IsNull(ax) && !(cJSON_IsNumber(ax) && ax->valuedouble == -1))
        l->dil[0] = cJSON_IsNumber(ax) ? (int)ax->valuedouble : -99; /* checked at build */
    else
        l->dil[0] = -1;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "invert", false, &l->center, err));
    int nm, nv;
    DT_TRY(read_vals(l, cfg, "mean", &nm, err));
    DT_TRY(read_vals(l, cfg, "variance", &nv, err));
    if ((nm == 0) != (nv == 0))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "give both 'mean' and 'variance', or neither (then the job "
                                "computes them over the training data, as adapt() would)");
    for (int i = 0; i < nv; i++)
        if (l->cfg_floats[nm + i] < 0)
            return dt__nn_layer_err(l, DT_EINVAL, err, "option 'variance': value %d is negative",
                                    i);
    l->pad[0] = nm;
    l->pad[1] = nv;
    return DT_OK;
}

static int norm_features(const dt__nn_layer *l)
{
    return l->keepdims ? l->in_shape[0].d[l->in_shape[0].rank - 1] : 1;
}

static dt_status norm_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank < 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "needs an input with at least one axis");
    if (l->dil[0] != -1 && l->dil[0] != in->rank)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'axis': only the last axis (-1) or null is supported");
    l->out = *in;
    int c = norm_features(l);
    for (int i = 0; i < 2; i++)
        if (l->pad[i] && l->pad[i] != 1 && l->pad[i] != c)
            return dt__nn_layer_err(l, DT_EINVAL, err,
                                    "option '%s': %d values for %d features (give 1 or %d)",
                                    i ? "variance" : "mean", l->pad[i], c, c);
    if (l->pad[0]) { /* constants, as Keras keeps them: no weights */
        /* broadcast once to c means then c variances, what each step uploads */
        float *v = malloc(2 * (size_t)c * sizeof *v);
        if (!v)
            return dt__nn_layer_err(l, DT_ENOMEM, err, "out of memory");
        for (int i = 0; i < c; i++) {
            v[i] = l->cfg_floats[l->pad[0] == 1 ? 0 : i];
            v[c + i] = l->cfg_floats[l->pad[0] + (l->pad[1] == 1 ? 0 : i)];
        }
        free(l->cfg_floats);
        l->cfg_floats = v;
        l->n_cfg_floats = 2 * (size_t)c;
        l->pad[0] = l->pad[1] = c;
        l->stat_floats = 2 * (size_t)c;
        return DT_OK;
    }
    dt_nn_shape s = {1, {c}};
    dt__nn_add_weight(l, "mean", s, false, (dt__nn_init){.kind = DT_NN_INIT_ZEROS});
    dt__nn_add_weight(l, "variance", s, false, (dt__nn_init){.kind = DT_NN_INIT_ONES});
    dt__nn_add_weight(l, "count", (dt_nn_shape){0, {0}}, false,
                      (dt__nn_init){.kind = DT_NN_INIT_ZEROS});
    return DT_OK;
}

/* mean and variance on the device: the weights, or the config's constants uploaded. */
static void norm_stats(dt__nn_layer *l, dt__nn_ctx *c, const float **mean, const float **var)
{
    if (!l->pad[0]) {
        *mean = l->w[0].data;
        *var = l->w[1].data;
        return;
    }
    /* stat is the batch's scratch, reallocated with the batch: the constants go up each time */
    int n = norm_features(l);
    c->ops->upload(l->stat, l->cfg_floats, 2 * (size_t)n * sizeof(float));
    *mean = l->stat;
    *var = l->stat + n;
}

static void norm_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    int cols = norm_features(l);
    size_t rows = (size_t)c->n * dt__nn_shape_size(&l->out) / (size_t)cols;
    const float *mean, *var;
    norm_stats(l, c, &mean, &var);
    c->ops->norm_fwd(dt__nn_x(c, l, 0), l->y, mean, var, rows, cols, l->center);
}

static void norm_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!dt__nn_need_dx(c, l, 0))
        return;
    int cols = norm_features(l);
    size_t rows = (size_t)c->n * dt__nn_shape_size(&l->out) / (size_t)cols;
    const float *mean, *var;
    norm_stats(l, c, &mean, &var);
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    c->ops->norm_bwd(l->dy, var, dx, rows, cols, l->center, acc);
}

const dt__nn_layer_vt dt__nn_normalization = {
    .class_name = "Normalization",
    .parse = norm_parse,
    .build = norm_build,
    .forward = norm_forward,
    .backward = norm_backward,
    .keys = norm_keys,
    .mask = DT_NN_MASK_PASS,
};

/* ---- adapt ------------------------------------------------------------------------------ */

struct dt_model_adapt {
    int n;                /* layers */
    dt__nn_layer **layer; /* the Normalization layers to adapt */
    double **sum, **sq;   /* per layer, per feature */
    double *count;        /* per layer: values summed per feature */
};

static bool needs_adapt(const dt__nn_layer *l)
{
    return l->vt == &dt__nn_normalization && !l->pad[0];
}

int dt__nn_adapt_count(dt__nn_graph *g)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        n += needs_adapt(&g->layers[i]);
    return n;
}

void dt__nn_adapt_free(dt_model_adapt *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n; i++) {
        free(a->sum[i]);
        free(a->sq[i]);
    }
    free(a->sum);
    free(a->sq);
    free(a->count);
    free(a->layer);
    free(a);
}

dt_status dt__nn_adapt_new(dt__nn_graph *g, dt_model_adapt **out, dt_err *err)
{
    *out = NULL;
    dt_model_adapt *a = calloc(1, sizeof *a);
    int n = dt__nn_adapt_count(g);
    if (!a || !(a->layer = calloc((size_t)n + 1, sizeof *a->layer)) ||
        !(a->sum = calloc((size_t)n + 1, sizeof *a->sum)) ||
        !(a->sq = calloc((size_t)n + 1, sizeof *a->sq)) ||
        !(a->count = calloc((size_t)n + 1, sizeof *a->count))) {
        dt__nn_adapt_free(a);
        return dt_err_set(err, DT_ENOMEM, "model: out of memory adapting Normalization");
    }
    for (int i = 0; i < g->n; i++) {
        dt__nn_layer *l = &g->layers[i];
        if (!needs_adapt(l))
            continue;
        /* adapt() sees what the model is given: the layer must read the input itself */
        if (l->in[0] != 0) {
            dt__nn_adapt_free(a);
            return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                    "has no 'mean' and 'variance' and does not read the model's "
                                    "input, so they cannot be computed from the data; put it "
                                    "right after the InputLayer or give them in its config");
        }
        int c = norm_features(l);
        a->layer[a->n] = l;
        a->sum[a->n] = calloc((size_t)c, sizeof(double));
        a->sq[a->n] = calloc((size_t)c, sizeof(double));
        if (!a->sum[a->n++] || !a->sq[a->n - 1]) {
            dt__nn_adapt_free(a);
            return dt_err_set(err, DT_ENOMEM, "model: out of memory adapting Normalization");
        }
    }
    *out = a;
    return DT_OK;
}

void dt__nn_adapt_rows(dt_model_adapt *a, const float *x, size_t n)
{
    for (int k = 0; k < a->n; k++) {
        const dt__nn_layer *l = a->layer[k];
        int c = norm_features(l);
        size_t per = dt__nn_shape_size(&l->in_shape[0]);
        for (size_t r = 0; r < n; r++) {
            const float *row = x + r * per;
            for (size_t j = 0; j < per; j++) {
                double v = row[j];
                a->sum[k][j % (size_t)c] += v;
                a->sq[k][j % (size_t)c] += v * v;
            }
        }
        a->count[k] += (double)n * (double)(per / (size_t)c);
    }
}

void dt__nn_adapt_finish(dt_model_adapt *a, const dt_nn_ops *ops)
{
    for (int k = 0; k < a->n; k++) {
        dt__nn_layer *l = a->layer[k];
        int c = norm_features(l);
        float *host = malloc((2 * (size_t)c + 1) * sizeof *host);
        if (!host)
            continue;
        double n = a->count[k] > 0 ? a->count[k] : 1;
        for (int j = 0; j < c; j++) {
            double m = a->sum[k][j] / n;
            double v = a->sq[k][j] / n - m * m; /* Keras's variance: the population's */
            host[j] = (float)m;
            host[c + j] = (float)(v > 0 ? v : 0);
        }
        host[2 * c] = (float)a->count[k]; /* values seen per feature */
        ops->upload(l->w[0].data, host, (size_t)c * sizeof *host);
        ops->upload(l->w[1].data, host + c, (size_t)c * sizeof *host);
        ops->upload(l->w[2].data, host + 2 * c, sizeof *host);
        free(host);
    }
    dt__nn_adapt_free(a);
}

/* ---- CategoryEncoding ------------------------------------------------------------------- */

static const char *const cat_keys[] = {"num_tokens", "output_mode", "sparse", NULL};

static dt_status cat_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(dt__nn_cfg_int(l, cfg, "num_tokens", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 24))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'num_tokens': expected 1..16777216");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "output_mode");
    const char *mode = cJSON_IsString(m) ? m->valuestring : "multi_hot";
    if (m && !cJSON_IsNull(m) && !cJSON_IsString(m))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'output_mode': expected a string");
    if (!strcmp(mode, "one_hot"))
        l->mult = DT_NN_CAT_ONE_HOT;
    else if (!strcmp(mode, "multi_hot"))
        l->mult = DT_NN_CAT_MULTI_HOT;
    else if (!strcmp(mode, "count"))
        l->mult = DT_NN_CAT_COUNT;
    else
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'output_mode': \"%s\" is not supported (one_hot, "
                                "multi_hot, count)",
                                mode);
    bool sparse;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "sparse", false, &sparse, err));
    if (sparse)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option 'sparse': only false is supported");
    return DT_OK;
}

static dt_status cat_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    size_t per = dt__nn_shape_size(in);
    if (in->rank != 1 || (l->mult == DT_NN_CAT_ONE_HOT && per != 1))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "takes one id a sample (one_hot) or a list of ids (multi_hot, "
                                "count): an input of shape (%s)",
                                l->mult == DT_NN_CAT_ONE_HOT ? "1" : "ids");
    l->out = (dt_nn_shape){1, {l->units}};
    l->stat_floats = 3; /* the bad-id report, as Embedding's */
    return DT_OK;
}

static void cat_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    c->ops->cat_encode(dt__nn_x(c, l, 0), c->n, l->in_shape[0].d[0], l->units,
                       (dt_nn_cat_mode)l->mult, l->y, l->stat);
}

static dt_status cat_check(dt__nn_layer *l, const float *bad, dt_err *err)
{
    if (bad[0] == 0)
        return DT_OK;
    int t = l->in_shape[0].d[0];
    return dt__nn_layer_err(l, DT_EINVAL, err,
                            "input id %.9g (sample %d of the batch, position %d) is outside "
                            "[0, %d), the option 'num_tokens'",
                            (double)bad[1], (int)bad[2] / t, (int)bad[2] % t, l->units);
}

static void cat_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    /* Ids take no gradient, as in Keras: a producer that wants one gets zeros. */
    if (!dt__nn_need_dx(c, l, 0))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    if (!acc)
        c->ops->fill((size_t)c->n * dt__nn_shape_size(&l->in_shape[0]), 0.0f, dx);
}

const dt__nn_layer_vt dt__nn_category_encoding = {
    .class_name = "CategoryEncoding",
    .parse = cat_parse,
    .build = cat_build,
    .forward = cat_forward,
    .backward = cat_backward,
    .check = cat_check,
    .keys = cat_keys,
};
