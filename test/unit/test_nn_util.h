/* test_nn_util.h - helpers of the nn tests: compact Keras JSON, random batches, a finite-
 * difference gradient checker. Header-only (static) so each test file stays self-contained. */
#ifndef DT_TEST_NN_UTIL_H
#define DT_TEST_NN_UTIL_H

#include "dt_test.h"
#include "nn/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Keras 2 Sequential JSON from an input shape ("6, 6, 2") and layer objects
 * ("{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}"), NULL-terminated. Static buffer. */
static inline const char *nn_seq(const char *shape, ...)
{
    static char buf[16384];
    size_t o = (size_t)snprintf(buf, sizeof buf,
                                "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"t\", "
                                "\"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
                                "{\"batch_input_shape\": [null, %s], \"name\": \"in\"}}",
                                shape);
    va_list ap;
    va_start(ap, shape);
    for (const char *l; (l = va_arg(ap, const char *));)
        o += (size_t)snprintf(buf + o, sizeof buf - o, ", %s", l);
    va_end(ap);
    snprintf(buf + o, sizeof buf - o, "]}}");
    return buf;
}

static inline dt_model *nn_build(const char *json, uint64_t seed)
{
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts o = {.seed = seed};
    dt_status st = dt_model_from_json(json, strlen(json), &o, &m, &err);
    if (st != DT_OK) {
        fprintf(stderr, "model: %s\n%s\n", err.msg, json);
        exit(1);
    }
    return m;
}

/* The model is refused: no model, and the message holds a (and b, when given). */
static inline void nn_refused(const char *json, const char *a, const char *b)
{
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts o = {.seed = 1};
    ASSERT_TRUE(dt_model_from_json(json, strlen(json), &o, &m, &err) != DT_OK);
    ASSERT_TRUE(m == NULL);
    ASSERT_CONTAINS(err.msg, a);
    if (b)
        ASSERT_CONTAINS(err.msg, b);
}

typedef struct nn_data {
    float *x, *targets;
    int32_t *labels;
    int n;
} nn_data;

/* Random inputs ~ N(0, 1), labels in [0, cols), targets per loss kind. */
static inline nn_data nn_random(dt_model *m, int n, dt_nn_loss_kind kind, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    size_t in = dt_model_input_size(m), out = dt_model_output_size(m);
    nn_data d = {.n = n};
    d.x = malloc(sizeof(float) * in * (size_t)n);
    d.labels = malloc(sizeof(int32_t) * (size_t)n);
    d.targets = malloc(sizeof(float) * out * (size_t)n);
    for (size_t i = 0; i < in * (size_t)n; i++)
        d.x[i] = (float)dt_rng_normal(&r);
    for (int i = 0; i < n; i++) {
        d.labels[i] = (int32_t)dt_rng_below(&r, out);
        double s = 0;
        for (size_t j = 0; j < out; j++) {
            float *t = &d.targets[(size_t)i * out + j];
            if (kind == DT_NN_LOSS_CE)
                s += *t = dt_rng_uniform(&r) + 0.1f;
            else if (kind == DT_NN_LOSS_BCE)
                *t = dt_rng_uniform(&r) < 0.5f ? 0.0f : 1.0f;
            else
                *t = (float)dt_rng_normal(&r);
        }
        if (kind == DT_NN_LOSS_CE)
            for (size_t j = 0; j < out; j++)
                d.targets[(size_t)i * out + j] /= (float)s;
    }
    return d;
}

static inline void nn_data_free(nn_data *d)
{
    free(d->x);
    free(d->labels);
    free(d->targets);
}

static inline dt_model_batch nn_batch(const nn_data *d, dt_nn_loss_kind kind)
{
    return (dt_model_batch){.x = d->x,
                            .labels = kind == DT_NN_LOSS_SPARSE_CE ? d->labels : NULL,
                            .targets = kind == DT_NN_LOSS_SPARSE_CE ? NULL : d->targets,
                            .n = d->n};
}

/* Host copies of model memory. A model's buffers are device memory (a GPU's, or the guard's,
 * which faults on a host access), so tests read and write them only through the ops table's
 * download / upload: the same test then runs on any backend (DTRAIN_OPS=guard, /gpu:N). */

/* A malloc'd host copy of `count` floats at device address src. */
static inline float *nn_dev_get(const dt_model *m, const float *src, size_t count)
{
    float *h = malloc(sizeof(float) * (count ? count : 1));
    if (!h) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    if (count)
        dt_model_ops(m)->download(h, src, sizeof(float) * count);
    return h;
}

static inline void nn_dev_set(const dt_model *m, float *dst, const float *host, size_t count)
{
    if (count)
        dt_model_ops(m)->upload(dst, host, sizeof(float) * count);
}

/* The flat params / grads / state as malloc'd host copies; *n (may be NULL) their counts. */
static inline float *nn_params_host(dt_model *m, size_t *n)
{
    size_t k;
    float *p = dt_model_params(m, &k);
    if (n)
        *n = k;
    return nn_dev_get(m, p, k);
}

static inline float *nn_grads_host(dt_model *m, size_t *n)
{
    size_t k;
    float *g = dt_model_grads(m, &k);
    if (n)
        *n = k;
    return nn_dev_get(m, g, k);
}

static inline float *nn_state_host(dt_model *m, size_t *n)
{
    size_t k;
    float *s = dt_model_state(m, &k);
    if (n)
        *n = k;
    return nn_dev_get(m, s, k);
}

/* One float of the flat params: read, write. */
static inline float nn_param_get(dt_model *m, size_t i)
{
    float v;
    dt_model_ops(m)->download(&v, dt_model_params(m, NULL) + i, sizeof v);
    return v;
}

static inline void nn_param_set(dt_model *m, size_t i, float v)
{
    dt_model_ops(m)->upload(dt_model_params(m, NULL) + i, &v, sizeof v);
}

/* A named weight as a malloc'd host copy (*n its size, may be NULL); fails the test when the
 * model has no such weight. */
static inline float *nn_weight_get(const dt_model *m, const char *name, size_t *n)
{
    const dt_model_weight *w = dt_model_find_weight(m, name);
    if (!w) {
        fprintf(stderr, "no weight %s\n", name);
        exit(1);
    }
    if (n)
        *n = w->size;
    return nn_dev_get(m, w->data, w->size);
}

/* Sets a named weight from host memory (w->size floats). */
static inline void nn_weight_set(dt_model *m, const char *name, const float *host)
{
    const dt_model_weight *w = dt_model_find_weight(m, name);
    if (!w) {
        fprintf(stderr, "no weight %s\n", name);
        exit(1);
    }
    nn_dev_set(m, w->data, host, w->size);
}

/* A weight's value and gradient (w->grad: trainable weights only) as malloc'd host copies. */
static inline float *nn_wdata_host(const dt_model *m, const dt_model_weight *w)
{
    return nn_dev_get(m, w->data, w->size);
}

static inline float *nn_wgrad_host(const dt_model *m, const dt_model_weight *w)
{
    return nn_dev_get(m, w->grad, w->size);
}

/* Loss of one training-mode step with the dropout stream rewound to *rng. */
static inline double nn_loss_at(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                                const dt_rng *rng)
{
    dt_err err = {0};
    dt_step_stats s;
    *dt_model_rng(m) = *rng;
    ASSERT_OK(dt_model_train_step(m, loss, b, b->n, &s, &err), &err);
    return s.loss;
}

/* Central differences on up to `per_weight` entries of every trainable weight; fails on the
 * first entry where |analytic - numeric| > atol + rtol |numeric|. Returns entries checked. */
static inline int nn_gradcheck(const char *json, dt_loss loss, int n, double eps, double atol,
                               double rtol)
{
    dt_model *m = nn_build(json, 7);
    nn_data d = nn_random(m, n, loss.kind, 11);
    dt_model_batch b = nn_batch(&d, loss.kind);
    dt_rng rng = *dt_model_rng(m);
    nn_loss_at(m, &loss, &b, &rng);
    float *g0 = nn_grads_host(m, NULL);
    int checked = 0;
    dt_rng pick;
    dt_rng_seed(&pick, 3);
    for (size_t wi = 0; wi < dt_model_weight_count(m); wi++) {
        const dt_model_weight *w = dt_model_weight_at(m, wi);
        if (!w->trainable)
            continue;
        int per_weight = 10;
        for (int k = 0; k < per_weight && k < (int)w->size; k++) {
            size_t i = w->offset +
                       (w->size <= (size_t)per_weight ? (size_t)k : dt_rng_below(&pick, w->size));
            float keep = nn_param_get(m, i);
            nn_param_set(m, i, keep + (float)eps);
            double lp = nn_loss_at(m, &loss, &b, &rng);
            nn_param_set(m, i, keep - (float)eps);
            double lm = nn_loss_at(m, &loss, &b, &rng);
            nn_param_set(m, i, keep);
            double num = (lp - lm) / (2 * eps), ana = g0[i];
            if (!(fabs(ana - num) <= atol + rtol * fabs(num))) {
                fprintf(stderr, "gradcheck: %s[%zu]: analytic %.8g numeric %.8g (diff %.3g)\n%s\n",
                        w->name, i - w->offset, ana, num, fabs(ana - num), json);
                exit(1);
            }
            checked++;
        }
    }
    free(g0);
    nn_data_free(&d);
    dt_model_free(m);
    return checked;
}

#endif
