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
    size_t np;
    float *grads = dt_model_grads(m, &np);
    float *params = dt_model_params(m, NULL);
    float *g0 = malloc(sizeof(float) * (np ? np : 1));
    memcpy(g0, grads, sizeof(float) * np);
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
            float keep = params[i];
            params[i] = keep + (float)eps;
            double lp = nn_loss_at(m, &loss, &b, &rng);
            params[i] = keep - (float)eps;
            double lm = nn_loss_at(m, &loss, &b, &rng);
            params[i] = keep;
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
