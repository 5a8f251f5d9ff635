/* init.c - Keras initializers (keras.initializers) and activation names, seeded by the model. */
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct named_init {
    const char *name, *alias; /* Keras 3 class name, Keras string name */
    dt__nn_init init;
} named_init;

#define VS(s, m, d)                                                                                \
    {                                                                                              \
        .kind = DT_NN_INIT_VARIANCE_SCALING, .scale = (s), .mode = (m), .dist = (d)                \
    }

static const named_init inits[] = {
    {"Zeros", "zeros", {.kind = DT_NN_INIT_ZEROS}},
    {"Ones", "ones", {.kind = DT_NN_INIT_ONES}},
    {"Constant", "constant", {.kind = DT_NN_INIT_CONSTANT, .a = 0}},
    {"GlorotUniform", "glorot_uniform", VS(1, DT_NN_FAN_AVG, DT_NN_DIST_UNIFORM)},
    {"GlorotNormal", "glorot_normal", VS(1, DT_NN_FAN_AVG, DT_NN_DIST_TRUNCATED)},
    {"HeUniform", "he_uniform", VS(2, DT_NN_FAN_IN, DT_NN_DIST_UNIFORM)},
    {"HeNormal", "he_normal", VS(2, DT_NN_FAN_IN, DT_NN_DIST_TRUNCATED)},
    {"LecunUniform", "lecun_uniform", VS(1, DT_NN_FAN_IN, DT_NN_DIST_UNIFORM)},
    {"LecunNormal", "lecun_normal", VS(1, DT_NN_FAN_IN, DT_NN_DIST_TRUNCATED)},
    {"VarianceScaling", "variance_scaling", VS(1, DT_NN_FAN_IN, DT_NN_DIST_TRUNCATED)},
    {"RandomUniform", "random_uniform", {.kind = DT_NN_INIT_RANDOM_UNIFORM, .a = -0.05, .b = 0.05}},
    {"RandomNormal", "random_normal", {.kind = DT_NN_INIT_RANDOM_NORMAL, .a = 0, .b = 0.05}},
    {"TruncatedNormal",
     "truncated_normal",
     {.kind = DT_NN_INIT_TRUNCATED_NORMAL, .a = 0, .b = 0.05}},
    /* Keras's shorter aliases ("uniform" is Embedding's default as its constructor spells it) */
    {"RandomUniform", "uniform", {.kind = DT_NN_INIT_RANDOM_UNIFORM, .a = -0.05, .b = 0.05}},
    {"RandomNormal", "normal", {.kind = DT_NN_INIT_RANDOM_NORMAL, .a = 0, .b = 0.05}},
    {"Orthogonal", "orthogonal", {.kind = DT_NN_INIT_ORTHOGONAL, .a = 1}},
};

static bool num(const cJSON *cfg, const char *key, double *out)
{
    const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, key) : NULL;
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

dt_status dt__nn_init_parse(const cJSON *j, dt__nn_init *out, char *why, size_t why_len)
{
    const char *cls = NULL;
    const cJSON *cfg = NULL;
    if (cJSON_IsString(j)) {
        cls = j->valuestring;
    } else if (cJSON_IsObject(j)) {
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "class_name");
        cls = cJSON_IsString(cn) ? cn->valuestring : NULL;
        cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
    }
    if (!cls) {
        snprintf(why, why_len, "expected an initializer name or {\"class_name\", \"config\"}");
        return DT_EINVAL;
    }
    const named_init *n = NULL;
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++)
        if (!strcmp(cls, inits[i].name) || !strcmp(cls, inits[i].alias))
            n = &inits[i];
    if (!n) {
        snprintf(why, why_len,
                 "initializer %s is not supported (Zeros, Ones, Constant, GlorotUniform, "
                 "GlorotNormal, HeUniform, HeNormal, LecunUniform, LecunNormal, VarianceScaling, "
                 "RandomUniform, RandomNormal, TruncatedNormal, Orthogonal)",
                 cls);
        return DT_ENOTSUP;
    }
    *out = n->init;
    bool ok = true;
    switch (out->kind) {
    case DT_NN_INIT_CONSTANT:
        ok = num(cfg, "value", &out->a);
        break;
    case DT_NN_INIT_RANDOM_UNIFORM:
        ok = num(cfg, "minval", &out->a) && num(cfg, "maxval", &out->b);
        break;
    case DT_NN_INIT_RANDOM_NORMAL:
    case DT_NN_INIT_TRUNCATED_NORMAL:
        ok = num(cfg, "mean", &out->a) && num(cfg, "stddev", &out->b);
        break;
    case DT_NN_INIT_ORTHOGONAL:
        ok = num(cfg, "gain", &out->a);
        break;
    case DT_NN_INIT_VARIANCE_SCALING:
        if (!strcmp(n->name, "VarianceScaling")) {
            ok = num(cfg, "scale", &out->scale);
            const cJSON *m = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "mode") : NULL;
            const cJSON *d = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "distribution") : NULL;
            if (cJSON_IsString(m)) {
                if (!strcmp(m->valuestring, "fan_in"))
                    out->mode = DT_NN_FAN_IN;
                else if (!strcmp(m->valuestring, "fan_out"))
                    out->mode = DT_NN_FAN_OUT;
                else if (!strcmp(m->valuestring, "fan_avg"))
                    out->mode = DT_NN_FAN_AVG;
                else
                    ok = false;
            }
            if (cJSON_IsString(d)) {
                if (!strcmp(d->valuestring, "uniform"))
                    out->dist = DT_NN_DIST_UNIFORM;
                else if (!strcmp(d->valuestring, "truncated_normal") ||
                         !strcmp(d->valuestring, "normal"))
                    out->dist = DT_NN_DIST_TRUNCATED;
                else if (!strcmp(d->valuestring, "untruncated_normal"))
                    out->dist = DT_NN_DIST_NORMAL;
                else
                    ok = false;
            }
            ok = ok && out->scale > 0;
        }
        break;
    default:
        break;
    }
    if (!ok) {
        snprintf(why, why_len, "initializer %s: bad config values", cls);
        return DT_EINVAL;
    }
    return DT_OK;
}

/* Keras's _compute_fans: the last axis is out, the one before in, the rest the receptive field. */
static void fans(const dt_nn_shape *s, double *fan_in, double *fan_out)
{
    if (s->rank == 0) {
        *fan_in = *fan_out = 1;
    } else if (s->rank == 1) {
        *fan_in = *fan_out = s->d[0];
    } else {
        double rf = 1;
        for (int i = 0; i < s->rank - 2; i++)
            rf *= s->d[i];
        *fan_in = s->d[s->rank - 2] * rf;
        *fan_out = s->d[s->rank - 1] * rf;
    }
}

static double truncated(dt_rng *rng, double mean, double sd)
{
    for (;;) {
        double z = dt_rng_normal(rng);
        if (z >= -2.0 && z <= 2.0)
            return mean + sd * z;
    }
}

/* Keras's Orthogonal: a normal (rows, cols) matrix, rows = the product of all axes but the
 * last, made orthogonal by QR with R's diagonal made positive; Q^T when rows < cols. Gram-
 * Schmidt on the columns of the (max, min) matrix is that QR (its R has a positive diagonal).
 * Returns false when out of memory (the caller then fills nothing better than zeros). */
static bool orthogonal(double gain, const dt_nn_shape *shape, float *host, dt_rng *rng)
{
    size_t n = dt__nn_shape_size(shape);
    size_t cols = shape->rank ? (size_t)shape->d[shape->rank - 1] : 1, rows = n / cols;
    size_t big = rows > cols ? rows : cols, small = rows > cols ? cols : rows;
    double *q = malloc(big * small * sizeof *q); /* column-major: column k at q + k * big */
    if (!q)
        return false;
    for (size_t i = 0; i < big * small; i++)
        q[i] = dt_rng_normal(rng);
    for (size_t k = 0; k < small; k++) {
        double *ck = q + k * big;
        for (int pass = 0; pass < 2; pass++) /* twice: orthogonal to rounding */
            for (size_t j = 0; j < k; j++) {
                const double *cj = q + j * big;
                double d = 0;
                for (size_t i = 0; i < big; i++)
                    d += cj[i] * ck[i];
                for (size_t i = 0; i < big; i++)
                    ck[i] -= d * cj[i];
            }
        double nrm = 0;
        for (size_t i = 0; i < big; i++)
            nrm += ck[i] * ck[i];
        nrm = sqrt(nrm);
        for (size_t i = 0; i < big; i++)
            ck[i] = nrm > 0 ? ck[i] / nrm : 0;
    }
    /* Q is (big, small); the weight is Q (rows >= cols) or Q^T, row-major (rows, cols). */
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            host[r * cols + c] = (float)(gain * (rows >= cols ? q[c * big + r] : q[r * big + c]));
    free(q);
    return true;
}

void dt__nn_init_fill(const dt__nn_init *init, const dt_nn_shape *shape, float *host, dt_rng *rng)
{
    size_t n = dt__nn_shape_size(shape);
    if (init->kind == DT_NN_INIT_ORTHOGONAL) {
        if (!orthogonal(init->a, shape, host, rng))
            memset(host, 0, n * sizeof *host);
        return;
    }
    double fi, fo;
    fans(shape, &fi, &fo);
    for (size_t i = 0; i < n; i++) {
        double v = 0;
        switch (init->kind) {
        case DT_NN_INIT_ZEROS:
            v = 0;
            break;
        case DT_NN_INIT_ONES:
            v = 1;
            break;
        case DT_NN_INIT_CONSTANT:
            v = init->a;
            break;
        case DT_NN_INIT_RANDOM_UNIFORM:
            v = init->a + (init->b - init->a) * dt_rng_uniform_f64(rng);
            break;
        case DT_NN_INIT_RANDOM_NORMAL:
            v = init->a + init->b * dt_rng_normal(rng);
            break;
        case DT_NN_INIT_TRUNCATED_NORMAL:
            v = truncated(rng, init->a, init->b);
            break;
        case DT_NN_INIT_ORTHOGONAL: /* filled above */
            break;
        case DT_NN_INIT_VARIANCE_SCALING: {
            double fan = init->mode == DT_NN_FAN_IN    ? fi
                         : init->mode == DT_NN_FAN_OUT ? fo
                                                       : (fi + fo) / 2;
            double s = init->scale / (fan > 1 ? fan : 1);
            if (init->dist == DT_NN_DIST_UNIFORM) {
                double lim = sqrt(3.0 * s);
                v = -lim + 2 * lim * dt_rng_uniform_f64(rng);
            } else if (init->dist == DT_NN_DIST_TRUNCATED) {
                /* 0.879...: the stddev of a unit normal truncated to [-2, 2] */
                v = truncated(rng, 0, sqrt(s) / 0.87962566103423978);
            } else {
                v = sqrt(s) * dt_rng_normal(rng);
            }
            break;
        }
        }
        host[i] = (float)v;
    }
    for (size_t i = (size_t)init->forget; init->forget > 0 && i < 2 * (size_t)init->forget && i < n;
         i++)
        host[i] = 1.0f;
}

dt_status dt__nn_act_parse(const char *name, dt_nn_act_p *out)
{
    static const struct {
        const char *name;
        dt_nn_act kind;
    } acts[] = {
        {"linear", DT_NN_ACT_LINEAR},   {"relu", DT_NN_ACT_RELU},
        {"sigmoid", DT_NN_ACT_SIGMOID}, {"tanh", DT_NN_ACT_TANH},
        {"softmax", DT_NN_ACT_SOFTMAX}, {"elu", DT_NN_ACT_ELU},
        {"selu", DT_NN_ACT_SELU},       {"gelu", DT_NN_ACT_GELU},
        {"swish", DT_NN_ACT_SWISH},     {"silu", DT_NN_ACT_SWISH},
    };
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (!strcmp(name, acts[i].name)) {
            out->kind = acts[i].kind;
            return DT_OK;
        }
    return DT_ENOTSUP;
}
