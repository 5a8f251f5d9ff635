/* optim.c - Keras optimizers: configuration, slots, and the scalar part of each update (the
 * element-wise part is the backend's sgd/adam/rmsprop kernel). */
#include "nn/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct dt_optim {
    dt_optim_cfg cfg;
    dt_model *m;
    int64_t iterations;
    size_t n_slots;
    float *slot[3];
    const char *slot_name[3];
};

void dt_optim_defaults(dt_optim_kind kind, dt_optim_cfg *out)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->learning_rate = kind == DT_OPTIM_SGD ? 0.01f : 0.001f;
    out->beta_1 = 0.9f;
    out->beta_2 = 0.999f;
    out->epsilon = 1e-7f;
    out->rho = 0.9f;
    out->weight_decay = kind == DT_OPTIM_ADAMW ? 0.004f : 0.0f;
}

static const struct {
    const char *cls, *str;
    dt_optim_kind kind;
} kinds[] = {
    {"SGD", "sgd", DT_OPTIM_SGD},
    {"Adam", "adam", DT_OPTIM_ADAM},
    {"AdamW", "adamw", DT_OPTIM_ADAMW},
    {"RMSprop", "rmsprop", DT_OPTIM_RMSPROP},
};

/* Keys of the base optimizer that must keep their neutral value. */
static const char *const neutral_null[] = {
    "clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor", "gradient_accumulation_steps",
    NULL};

static dt_status num(const cJSON *c, const char *cls, const char *key, float *out, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    if (cJSON_IsObject(v))
        return dt_err_set(err, DT_ENOTSUP,
                          "optimizer %s: option '%s': schedules are not supported (give a number)",
                          cls, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return dt_err_set(err, DT_EINVAL, "optimizer %s: option '%s': expected a number >= 0", cls,
                          key);
    *out = (float)v->valuedouble;
    return DT_OK;
}

static dt_status flag(const cJSON *c, const char *cls, const char *key, bool *out, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    if (!cJSON_IsBool(v))
        return dt_err_set(err, DT_EINVAL, "optimizer %s: option '%s': expected true or false", cls,
                          key);
    *out = cJSON_IsTrue(v);
    return DT_OK;
}

dt_status dt_optim_cfg_from_json(const cJSON *spec, dt_optim_cfg *out, dt_err *err)
{
    const char *cls = NULL;
    const cJSON *c = NULL;
    if (cJSON_IsString(spec)) {
        cls = spec->valuestring;
    } else if (cJSON_IsObject(spec)) {
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(spec, "class_name");
        cls = cJSON_IsString(cn) ? cn->valuestring : NULL;
        c = cJSON_GetObjectItemCaseSensitive(spec, "config");
        if (c && !cJSON_IsNull(c) && !cJSON_IsObject(c))
            return dt_err_set(err, DT_EINVAL, "optimizer: \"config\" must be an object");
    }
    if (!cls)
        return dt_err_set(err, DT_EINVAL,
                          "optimizer: expected a name (\"adam\") or {\"class_name\", \"config\"}");
    int k = -1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(cls, kinds[i].cls) || !strcasecmp(cls, kinds[i].str))
            k = (int)i;
    if (k < 0)
        return dt_err_set(err, DT_ENOTSUP,
                          "optimizer %s is not supported (SGD, Adam, AdamW, RMSprop)", cls);
    cls = kinds[k].cls;
    dt_optim_defaults(kinds[k].kind, out);
    if (!c)
        return DT_OK;
    static const char *const known[] = {"name",
                                        "learning_rate",
                                        "lr",
                                        "momentum",
                                        "nesterov",
                                        "beta_1",
                                        "beta_2",
                                        "epsilon",
                                        "rho",
                                        "centered",
                                        "amsgrad",
                                        "weight_decay",
                                        "use_ema",
                                        "ema_momentum",
                                        "ema_overwrite_frequency",
                                        "is_legacy_optimizer",
                                        "decay",
                                        "jit_compile",
                                        "clipnorm",
                                        "clipvalue",
                                        "global_clipnorm",
                                        "loss_scale_factor",
                                        "gradient_accumulation_steps",
                                        NULL};
    const cJSON *e;
    cJSON_ArrayForEach(e, c)
    {
        bool ok = false;
        for (const char *const *p = known; *p; p++)
            ok = ok || !strcmp(*p, e->string);
        if (!ok)
            return dt_err_set(err, DT_ENOTSUP, "optimizer %s: option '%s' is not supported", cls,
                              e->string);
    }
    for (const char *const *p = neutral_null; *p; p++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, *p);
        if (v && !cJSON_IsNull(v))
            return dt_err_set(err, DT_ENOTSUP,
                              "optimizer %s: option '%s' is not supported (must be null)", cls, *p);
    }
    bool b = false;
    DT_TRY(flag(c, cls, "amsgrad", &b, err));
    if (b)
        return dt_err_set(err, DT_ENOTSUP, "optimizer %s: option 'amsgrad': true is not supported",
                          cls);
    DT_TRY(flag(c, cls, "use_ema", &b, err));
    if (b)
        return dt_err_set(err, DT_ENOTSUP, "optimizer %s: option 'use_ema': true is not supported",
                          cls);
    float decay = 0;
    DT_TRY(num(c, cls, "decay", &decay, err)); /* Keras 2's legacy learning-rate decay */
    if (decay != 0)
        return dt_err_set(err, DT_ENOTSUP,
                          "optimizer %s: option 'decay': %g is not supported "
                          "(only 0)",
                          cls, (double)decay);
    DT_TRY(num(c, cls, "lr", &out->learning_rate, err));
    DT_TRY(num(c, cls, "learning_rate", &out->learning_rate, err));
    DT_TRY(num(c, cls, "momentum", &out->momentum, err));
    DT_TRY(flag(c, cls, "nesterov", &out->nesterov, err));
    DT_TRY(num(c, cls, "beta_1", &out->beta_1, err));
    DT_TRY(num(c, cls, "beta_2", &out->beta_2, err));
    DT_TRY(num(c, cls, "epsilon", &out->epsilon, err));
    DT_TRY(num(c, cls, "rho", &out->rho, err));
    DT_TRY(flag(c, cls, "centered", &out->centered, err));
    DT_TRY(num(c, cls, "weight_decay", &out->weight_decay, err));
    if (out->momentum >= 1 || out->beta_1 >= 1 || out->beta_2 >= 1 || out->rho >= 1)
        return dt_err_set(err, DT_EINVAL,
                          "optimizer %s: momentum, beta_1, beta_2 and rho must be below 1", cls);
    return DT_OK;
}

/* The slots cfg keeps per weight, named as Keras names them; returns how many. */
static size_t slot_names(const dt_optim_cfg *cfg, const char **names)
{
    size_t n = 0;
    switch (cfg->kind) {
    case DT_OPTIM_SGD:
        if (cfg->momentum > 0)
            names[n++] = "momentum";
        break;
    case DT_OPTIM_ADAM:
    case DT_OPTIM_ADAMW:
        names[n++] = "momentum";
        names[n++] = "velocity";
        break;
    case DT_OPTIM_RMSPROP:
        names[n++] = "velocity";
        if (cfg->momentum > 0)
            names[n++] = "momentum";
        if (cfg->centered)
            names[n++] = "average_gradient";
        break;
    }
    return n;
}

size_t dt_optim_cfg_slots(const dt_optim_cfg *cfg)
{
    const char *names[4];
    return slot_names(cfg, names);
}

dt_status dt_optim_new(const dt_optim_cfg *cfg, dt_model *m, dt_optim **out, dt_err *err)
{
    *out = NULL;
    dt_optim *o = calloc(1, sizeof *o);
    if (!o)
        return dt_err_set(err, DT_ENOMEM, "optimizer: out of memory");
    o->cfg = *cfg;
    o->m = m;
    o->n_slots = slot_names(cfg, o->slot_name);
    size_t n;
    dt_model_params(m, &n);
    const dt_nn_ops *ops = dt_model_ops(m);
    for (size_t i = 0; i < o->n_slots; i++) {
        o->slot[i] = dt_nn_alloc(ops, (n ? n : 1) * sizeof(float));
        if (!o->slot[i]) {
            dt_optim_free(o);
            return dt_err_set(err, DT_ENOMEM, "optimizer: out of memory for %zu slot values", n);
        }
    }
    *out = o;
    return DT_OK;
}

void dt_optim_free(dt_optim *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n_slots; i++)
        dt_nn_free(dt_model_ops(o->m), o->slot[i]);
    free(o);
}

static float *slot_named(dt_optim *o, const char *name)
{
    for (size_t i = 0; i < o->n_slots; i++)
        if (!strcmp(o->slot_name[i], name))
            return o->slot[i];
    return NULL;
}

dt_status dt_optim_step(dt_optim *o, dt_err *err)
{
    (void)err;
    size_t n;
    float *w = dt_model_params(o->m, &n);
    float *g = dt_model_grads(o->m, NULL);
    const dt_nn_ops *ops = dt_model_ops(o->m);
    const dt_optim_cfg *c = &o->cfg;
    if (c->weight_decay > 0) /* w -= w * wd * lr, before the update (Keras 3) */
        ops->axpby(n, 0.0f, w, 1.0f - c->weight_decay * c->learning_rate, w);
    switch (c->kind) {
    case DT_OPTIM_SGD:
        ops->sgd(w, g, slot_named(o, "momentum"), n, c->learning_rate, c->momentum, c->nesterov);
        break;
    case DT_OPTIM_ADAM:
    case DT_OPTIM_ADAMW: {
        double t = (double)(o->iterations + 1);
        double alpha = c->learning_rate * sqrt(1.0 - pow(c->beta_2, t)) / (1.0 - pow(c->beta_1, t));
        ops->adam(w, g, slot_named(o, "momentum"), slot_named(o, "velocity"), n, (float)alpha,
                  c->beta_1, c->beta_2, c->epsilon);
        break;
    }
    case DT_OPTIM_RMSPROP:
        ops->rmsprop(w, g, slot_named(o, "velocity"), slot_named(o, "momentum"),
                     c->centered ? slot_named(o, "average_gradient") : NULL, n, c->learning_rate,
                     c->rho, c->momentum, c->epsilon);
        break;
    }
    o->iterations++;
    return DT_OK;
}

int64_t dt_optim_iterations(const dt_optim *o)
{
    return o->iterations;
}

void dt_optim_set_iterations(dt_optim *o, int64_t it)
{
    o->iterations = it;
}

size_t dt_optim_slot_count(const dt_optim *o)
{
    return o->n_slots;
}

float *dt_optim_slot(dt_optim *o, size_t i, const char **name)
{
    if (i >= o->n_slots)
        return NULL;
    if (name)
        *name = o->slot_name[i];
    return o->slot[i];
}
