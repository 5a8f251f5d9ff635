/* optim.c - Keras optimizers: configuration, slots, clipping and the scalar part of each update
 * (the element-wise part is the backend's update kernel); schedules are in optim_schedule.c. */
#include "nn/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_SLOTS 4 /* the kind's three at most, and the moving average */

struct dt_optim {
    dt_optim_cfg cfg;
    dt_model *m;
    int64_t iterations;
    size_t n_slots;
    float *slot[MAX_SLOTS];
    const char *slot_name[MAX_SLOTS];
    /* Clipping by norm: the trainable weights as (offset, size) segments of the flat buffers,
     * and their gradients' sums of squares (host memory). */
    size_t nseg;
    size_t *seg_off, *seg_len;
    /* device copies for clip_norm: off then len (nseg each), and the norms' sums of squares */
    size_t *dseg;
    double *dsumsq;
    /* Nadam: the product u_1 ... u_k, kept for k = nadam_k (recomputed after a restore). */
    int64_t nadam_k;
    double nadam_prod;
    /* CUDA graphs: the update dt_optim_prepare made, its per-step values in step_dev (device,
     * DT_NN_UPD_STEP_FLOATS) uploaded from step_host. */
    dt_nn_update prepared;
    float *step_dev;
    float *step_host; /* host_alloc (pinned on a GPU), DT_NN_UPD_STEP_FLOATS */
};

void dt_optim_defaults(dt_optim_kind kind, dt_optim_cfg *out)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->learning_rate = kind == DT_OPTIM_SGD ? 0.01f : 0.001f;
    out->beta_1 = 0.9f;
    out->beta_2 = kind == DT_OPTIM_LION ? 0.99f : 0.999f;
    out->epsilon = 1e-7f;
    out->rho = kind == DT_OPTIM_ADADELTA ? 0.95f : 0.9f;
    out->initial_accumulator_value = 0.1f;
    out->learning_rate_power = -0.5f;
    out->weight_decay = kind == DT_OPTIM_ADAMW ? 0.004f : 0.0f;
    out->ema_momentum = 0.99f;
}

/* ------------------------------------------------------------------------------ parsing -- */

/* Each optimizer's own keys (beyond the base optimizer's), as its get_config() writes them. */
static const struct {
    const char *cls, *str;
    dt_optim_kind kind;
    const char *keys[7];
} kinds[] = {
    {"SGD", "sgd", DT_OPTIM_SGD, {"momentum", "nesterov"}},
    {"Adam", "adam", DT_OPTIM_ADAM, {"beta_1", "beta_2", "epsilon", "amsgrad"}},
    {"AdamW", "adamw", DT_OPTIM_ADAMW, {"beta_1", "beta_2", "epsilon", "amsgrad"}},
    {"RMSprop", "rmsprop", DT_OPTIM_RMSPROP, {"rho", "momentum", "epsilon", "centered"}},
    {"Adagrad", "adagrad", DT_OPTIM_ADAGRAD, {"initial_accumulator_value", "epsilon"}},
    {"Adadelta", "adadelta", DT_OPTIM_ADADELTA, {"rho", "epsilon"}},
    {"Adamax", "adamax", DT_OPTIM_ADAMAX, {"beta_1", "beta_2", "epsilon"}},
    {"Nadam", "nadam", DT_OPTIM_NADAM, {"beta_1", "beta_2", "epsilon"}},
    {"Ftrl",
     "ftrl",
     DT_OPTIM_FTRL,
     {"learning_rate_power", "initial_accumulator_value", "l1_regularization_strength",
      "l2_regularization_strength", "l2_shrinkage_regularization_strength", "beta"}},
    {"Lion", "lion", DT_OPTIM_LION, {"beta_1", "beta_2"}},
};

/* The base optimizer's keys, Keras 3 and Keras 2 (jit_compile, is_legacy_optimizer, and the
 * legacy optimizers' lr and decay). */
static const char *const base_keys[] = {"name",
                                        "learning_rate",
                                        "lr",
                                        "weight_decay",
                                        "clipnorm",
                                        "clipvalue",
                                        "global_clipnorm",
                                        "use_ema",
                                        "ema_momentum",
                                        "ema_overwrite_frequency",
                                        "loss_scale_factor",
                                        "gradient_accumulation_steps",
                                        "jit_compile",
                                        "is_legacy_optimizer",
                                        "decay",
                                        NULL};

/* Number ranges: lo <= v (lo < v when lo_open), v <= hi (v < hi when hi_open). */
typedef struct range {
    double lo, hi;
    bool lo_open, hi_open;
    const char *text; /* "a number >= 0" */
} range;

static const range NONNEG = {0, INFINITY, false, false, "a number >= 0"};
static const range UNIT_OPEN = {0, 1, false, true, "a number in [0, 1)"};
static const range UNIT = {0, 1, false, false, "a number in [0, 1]"};
static const range NONPOS = {-INFINITY, 0, false, false, "a number <= 0"};

static dt_status num(const cJSON *c, const char *cls, const char *key, range r, float *out,
                     dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    bool ok =
        isfinite(d) && (r.lo_open ? d > r.lo : d >= r.lo) && (r.hi_open ? d < r.hi : d <= r.hi);
    if (!ok) {
        char *s = cJSON_PrintUnformatted(v);
        dt_status st = dt_err_set(err, DT_EINVAL, "optimizer %s: option '%s': expected %s, got %s",
                                  cls, key, r.text, s ? s : "?");
        free(s);
        return st;
    }
    *out = (float)d;
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

static bool is_set(const cJSON *c, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return v && !cJSON_IsNull(v);
}

/* The learning rate: a number, or a schedule object. */
static dt_status learning_rate(const cJSON *c, const char *cls, dt_optim_cfg *out, dt_err *err)
{
    DT_TRY(num(c, cls, "lr", NONNEG, &out->learning_rate, err));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "learning_rate");
    if (!cJSON_IsObject(v))
        return num(c, cls, "learning_rate", NONNEG, &out->learning_rate, err);
    if (dt_optim_schedule_from_json(v, &out->lr, err) != DT_OK)
        return dt_err_prefix(err, "optimizer %s: option 'learning_rate'", cls);
    out->learning_rate = (float)dt_optim_schedule_at(&out->lr, 0);
    return DT_OK;
}

/* The base optimizer's options: clipping, weight decay, the moving average. */
static dt_status base_options(const cJSON *c, const char *cls, dt_optim_cfg *out, dt_err *err)
{
    static const char *const refused[] = {"loss_scale_factor", "gradient_accumulation_steps", NULL};
    for (const char *const *p = refused; *p; p++)
        if (is_set(c, *p))
            return dt_err_set(err, DT_ENOTSUP,
                              "optimizer %s: option '%s' is not supported (must be null)", cls, *p);
    float decay = 0;
    DT_TRY(num(c, cls, "decay", NONNEG, &decay, err)); /* Keras 2's legacy learning-rate decay */
    if (decay != 0)
        return dt_err_set(err, DT_ENOTSUP,
                          "optimizer %s: option 'decay': %g is not supported (only 0; use a "
                          "learning-rate schedule such as InverseTimeDecay)",
                          cls, (double)decay);
    const char *clips[] = {"clipnorm", "clipvalue", "global_clipnorm"};
    float *clipv[] = {&out->clipnorm, &out->clipvalue, &out->global_clipnorm};
    const char *first = NULL;
    for (int i = 0; i < 3; i++) {
        if (!is_set(c, clips[i]))
            continue;
        if (first)
            return dt_err_set(err, DT_EINVAL,
                              "optimizer %s: options '%s' and '%s': only one of clipnorm, "
                              "clipvalue and global_clipnorm can be set",
                              cls, first, clips[i]);
        first = clips[i];
        DT_TRY(num(c, cls, clips[i], NONNEG, clipv[i], err));
    }
    DT_TRY(num(c, cls, "weight_decay", NONNEG, &out->weight_decay, err));
    DT_TRY(flag(c, cls, "use_ema", &out->use_ema, err));
    DT_TRY(num(c, cls, "ema_momentum", UNIT, &out->ema_momentum, err));
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "ema_overwrite_frequency");
    if (f && !cJSON_IsNull(f)) {
        double d = cJSON_IsNumber(f) ? f->valuedouble : NAN;
        if (!(d >= 0 && d <= 1e15 && d == floor(d)))
            return dt_err_set(err, DT_EINVAL,
                              "optimizer %s: option 'ema_overwrite_frequency': expected an "
                              "integer >= 1 or null",
                              cls);
        out->ema_overwrite_frequency = (int64_t)d; /* 0 reads as None, as in Keras */
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    if (name && !cJSON_IsNull(name) && !cJSON_IsString(name))
        return dt_err_set(err, DT_EINVAL, "optimizer %s: option 'name': expected a string", cls);
    return DT_OK;
}

/* The optimizer's own options, with Keras's ranges. */
static dt_status own_options(const cJSON *c, const char *cls, dt_optim_cfg *out, dt_err *err)
{
    bool lion = out->kind == DT_OPTIM_LION;
    DT_TRY(num(c, cls, "momentum", UNIT_OPEN, &out->momentum, err));
    DT_TRY(flag(c, cls, "nesterov", &out->nesterov, err));
    if (lion) { /* Keras: beta_1 in (0, 1]; beta_2 is a decay rate */
        static const range B1 = {0, 1, true, false, "a number in (0, 1]"};
        DT_TRY(num(c, cls, "beta_1", B1, &out->beta_1, err));
        DT_TRY(num(c, cls, "beta_2", UNIT, &out->beta_2, err));
    } else {
        DT_TRY(num(c, cls, "beta_1", UNIT_OPEN, &out->beta_1, err));
        DT_TRY(num(c, cls, "beta_2", UNIT_OPEN, &out->beta_2, err));
    }
    DT_TRY(num(c, cls, "epsilon", NONNEG, &out->epsilon, err));
    DT_TRY(flag(c, cls, "amsgrad", &out->amsgrad, err));
    DT_TRY(num(c, cls, "rho", UNIT_OPEN, &out->rho, err));
    DT_TRY(flag(c, cls, "centered", &out->centered, err));
    DT_TRY(num(c, cls, "initial_accumulator_value", NONNEG, &out->initial_accumulator_value, err));
    DT_TRY(num(c, cls, "learning_rate_power", NONPOS, &out->learning_rate_power, err));
    DT_TRY(
        num(c, cls, "l1_regularization_strength", NONNEG, &out->l1_regularization_strength, err));
    DT_TRY(
        num(c, cls, "l2_regularization_strength", NONNEG, &out->l2_regularization_strength, err));
    DT_TRY(num(c, cls, "l2_shrinkage_regularization_strength", NONNEG,
               &out->l2_shrinkage_regularization_strength, err));
    DT_TRY(num(c, cls, "beta", NONNEG, &out->beta, err));
    if (out->kind == DT_OPTIM_FTRL && out->learning_rate == 0)
        return dt_err_set(err, DT_EINVAL,
                          "optimizer %s: option 'learning_rate': Ftrl divides by it: expected a "
                          "number > 0",
                          cls);
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
                          "optimizer %s is not supported (SGD, Adam, AdamW, RMSprop, Adagrad, "
                          "Adadelta, Adamax, Nadam, Ftrl, Lion)",
                          cls);
    cls = kinds[k].cls;
    dt_optim_defaults(kinds[k].kind, out);
    if (!c || cJSON_IsNull(c))
        return DT_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, c)
    {
        bool ok = false;
        for (const char *const *p = base_keys; *p && !ok; p++)
            ok = !strcmp(*p, e->string);
        for (size_t i = 0; i < sizeof kinds[k].keys / sizeof *kinds[k].keys && !ok; i++)
            ok = kinds[k].keys[i] && !strcmp(kinds[k].keys[i], e->string);
        if (!ok)
            return dt_err_set(err, DT_ENOTSUP, "optimizer %s: option '%s' is not supported", cls,
                              e->string);
    }
    DT_TRY(learning_rate(c, cls, out, err));
    DT_TRY(base_options(c, cls, out, err));
    return own_options(c, cls, out, err);
}

/* -------------------------------------------------------------------------------- slots -- */

/* The kind's slots at their kernel positions (dt_nn_update), NULL where cfg keeps none. */
static void kind_slots(const dt_optim_cfg *cfg, const char *pos[3])
{
    pos[0] = pos[1] = pos[2] = NULL;
    switch (cfg->kind) {
    case DT_OPTIM_SGD:
        pos[0] = cfg->momentum > 0 ? "momentum" : NULL;
        break;
    case DT_OPTIM_ADAM:
    case DT_OPTIM_ADAMW:
        pos[0] = "momentum";
        pos[1] = "velocity";
        pos[2] = cfg->amsgrad ? "velocity_hat" : NULL;
        break;
    case DT_OPTIM_RMSPROP:
        pos[0] = "velocity";
        pos[1] = cfg->momentum > 0 ? "momentum" : NULL;
        pos[2] = cfg->centered ? "average_gradient" : NULL;
        break;
    case DT_OPTIM_ADAGRAD:
        pos[0] = "accumulator";
        break;
    case DT_OPTIM_ADADELTA:
        pos[0] = "accumulated_grad";
        pos[1] = "accumulated_delta_var";
        break;
    case DT_OPTIM_ADAMAX:
        pos[0] = "momentum";
        pos[1] = "norm";
        break;
    case DT_OPTIM_NADAM:
        pos[0] = "momentum";
        pos[1] = "velocity";
        break;
    case DT_OPTIM_FTRL:
        pos[0] = "accumulator";
        pos[1] = "linear";
        break;
    case DT_OPTIM_LION:
        pos[0] = "momentum";
        break;
    }
}

/* The slots cfg keeps per weight, named as Keras names them; returns how many. */
static size_t slot_names(const dt_optim_cfg *cfg, const char **names)
{
    const char *pos[3];
    kind_slots(cfg, pos);
    size_t n = 0;
    for (int i = 0; i < 3; i++)
        if (pos[i])
            names[n++] = pos[i];
    if (cfg->use_ema)
        names[n++] = "average";
    return n;
}

size_t dt_optim_cfg_slots(const dt_optim_cfg *cfg)
{
    const char *names[MAX_SLOTS];
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
        if (!strcmp(o->slot_name[i], "accumulator") && cfg->initial_accumulator_value != 0)
            ops->fill(n, cfg->initial_accumulator_value, o->slot[i]);
    }
    if (cfg->clipnorm > 0 || cfg->global_clipnorm > 0) {
        size_t nw = dt_model_weight_count(m);
        o->seg_off = calloc(nw + 1, sizeof *o->seg_off);
        o->seg_len = calloc(nw + 1, sizeof *o->seg_len);
        if (!o->seg_off || !o->seg_len) {
            dt_optim_free(o);
            return dt_err_set(err, DT_ENOMEM, "optimizer: out of memory");
        }
        for (size_t i = 0; i < nw; i++) {
            const dt_model_weight *wt = dt_model_weight_at(m, i);
            if (!wt->trainable)
                continue;
            o->seg_off[o->nseg] = wt->offset;
            o->seg_len[o->nseg++] = wt->size;
        }
        o->dseg = dt_nn_alloc(ops, (2 * o->nseg + 1) * sizeof(size_t));
        o->dsumsq = dt_nn_alloc(ops, (o->nseg + 1) * sizeof(double));
        if (!o->dseg || !o->dsumsq) {
            dt_optim_free(o);
            return dt_err_set(err, DT_ENOMEM, "optimizer: out of memory");
        }
        ops->upload(o->dseg, o->seg_off, o->nseg * sizeof(size_t));
        ops->upload(o->dseg + o->nseg, o->seg_len, o->nseg * sizeof(size_t));
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
    dt_nn_free(dt_model_ops(o->m), o->step_dev);
    if (o->step_host)
        dt_model_ops(o->m)->host_free(o->step_host);
    dt_nn_free(dt_model_ops(o->m), o->dseg);
    dt_nn_free(dt_model_ops(o->m), o->dsumsq);
    free(o->seg_off);
    free(o->seg_len);
    free(o);
}

static float *slot_named(dt_optim *o, const char *name)
{
    for (size_t i = 0; name && i < o->n_slots; i++)
        if (!strcmp(o->slot_name[i], name))
            return o->slot[i];
    return NULL;
}

/* --------------------------------------------------------------------------------- step -- */

/* Step 1: clipnorm (each weight) or global_clipnorm (all weights), on the grads in place: the
 * norms, the decision and the scaling are the backend's kernels (nothing waits for the host). */
static void clip_by_norm(dt_optim *o, float *g, size_t n)
{
    const dt_optim_cfg *c = &o->cfg;
    if (!o->nseg)
        return;
    dt_model_ops(o->m)->clip_norm(g, n, o->nseg, o->dseg, o->dseg + o->nseg, c->clipnorm,
                                  c->global_clipnorm, o->dsumsq);
}

/* Nadam's u_1 u_2 ... u_k, u_i = beta_1 (1 - 0.5 0.96^i), multiplied in order from 1 (so a
 * restored optimizer computes the same bits as one that never stopped). */
static double nadam_product(dt_optim *o, int64_t k)
{
    double b1 = o->cfg.beta_1;
    if (o->nadam_k != k - 1 || k <= 1) {
        o->nadam_k = 0;
        o->nadam_prod = 1.0;
    }
    while (o->nadam_k < k) {
        o->nadam_k++;
        o->nadam_prod *= b1 * (1.0 - 0.5 * pow(0.96, (double)o->nadam_k));
    }
    return o->nadam_prod;
}

static const dt_nn_upd_kind upd_kind[] = {
    [DT_OPTIM_SGD] = DT_NN_UPD_SGD,         [DT_OPTIM_ADAM] = DT_NN_UPD_ADAM,
    [DT_OPTIM_ADAMW] = DT_NN_UPD_ADAM,      [DT_OPTIM_RMSPROP] = DT_NN_UPD_RMSPROP,
    [DT_OPTIM_ADAGRAD] = DT_NN_UPD_ADAGRAD, [DT_OPTIM_ADADELTA] = DT_NN_UPD_ADADELTA,
    [DT_OPTIM_ADAMAX] = DT_NN_UPD_ADAMAX,   [DT_OPTIM_NADAM] = DT_NN_UPD_NADAM,
    [DT_OPTIM_FTRL] = DT_NN_UPD_FTRL,       [DT_OPTIM_LION] = DT_NN_UPD_LION,
};

/* The update of iteration o->iterations: every scalar the kernel takes. */
static dt_nn_update build_update(dt_optim *o)
{
    const dt_optim_cfg *c = &o->cfg;
    int64_t it = o->iterations;
    double t = (double)(it + 1); /* Keras's local_step */
    float lr = (float)dt_optim_learning_rate_at(o, it);
    dt_nn_update u = {
        .kind = upd_kind[c->kind],
        .lr = lr,
        .decay = c->weight_decay > 0 ? 1.0f - c->weight_decay * lr : 1.0f,
        .clipvalue = c->clipvalue,
        .momentum = c->momentum,
        .nesterov = c->nesterov,
        .b1 = c->beta_1,
        .b2 = c->beta_2,
        .eps = c->epsilon,
        .rho = c->rho,
        .lr_power = c->learning_rate_power,
        .l1 = c->l1_regularization_strength,
        .l2 = c->l2_regularization_strength,
        .l2_shrinkage = c->l2_shrinkage_regularization_strength,
        .ema = slot_named(o, c->use_ema ? "average" : NULL),
        .ema_momentum = it == 0 ? 0.0f : c->ema_momentum,
        .ema_overwrite =
            c->ema_overwrite_frequency > 0 && (it + 1) % c->ema_overwrite_frequency == 0,
    };
    const char *pos[3];
    kind_slots(c, pos);
    for (int i = 0; i < 3; i++)
        u.slot[i] = slot_named(o, pos[i]);
    switch (c->kind) {
    case DT_OPTIM_ADAM:
    case DT_OPTIM_ADAMW:
        u.c[0] = (float)(lr * sqrt(1.0 - pow(c->beta_2, t)) / (1.0 - pow(c->beta_1, t)));
        break;
    case DT_OPTIM_ADAMAX:
        u.c[0] = (float)(1.0 - pow(c->beta_1, t));
        break;
    case DT_OPTIM_NADAM: {
        double b1 = c->beta_1;
        double u_t = b1 * (1.0 - 0.5 * pow(0.96, t));
        double u_t1 = b1 * (1.0 - 0.5 * pow(0.96, t + 1));
        double prod_t = nadam_product(o, it + 1);
        u.c[0] = (float)u_t1;
        u.c[1] = (float)(1.0 - prod_t * u_t1);
        u.c[2] = (float)(1.0 - u_t);
        u.c[3] = (float)(1.0 - prod_t);
        u.c[4] = (float)(1.0 - pow(c->beta_2, t));
        break;
    }
    case DT_OPTIM_FTRL:
        u.l2 += c->beta / (2.0f * lr);
        break;
    default:
        break;
    }
    return u;
}

dt_status dt_optim_step(dt_optim *o, dt_err *err)
{
    (void)err;
    size_t n;
    float *w = dt_model_params(o->m, &n);
    float *g = dt_model_grads(o->m, NULL);
    clip_by_norm(o, g, n);
    dt_nn_update u = build_update(o);
    dt_model_ops(o->m)->update(&u, w, g, n);
    o->iterations++;
    return DT_OK;
}

dt_status dt_optim_prepare(dt_optim *o, dt_err *err)
{
    const dt_nn_ops *ops = dt_model_ops(o->m);
    size_t bytes = DT_NN_UPD_STEP_FLOATS * sizeof(float);
    if (!o->step_dev && !(o->step_dev = dt_nn_alloc(ops, bytes)))
        return dt_err_set(err, DT_ENOMEM, "optimizer: out of memory for its step values");
    /* pinned on a GPU: rewritten at the next prepare, after this step's end has synchronised */
    if (!o->step_host && !(o->step_host = ops->host_alloc(bytes)))
        return dt_err_set(err, DT_ENOMEM, "optimizer: out of host memory for its step values");
    o->prepared = build_update(o);
    dt_nn_update_pack(&o->prepared, o->step_host);
    ops->upload(o->step_dev, o->step_host, bytes);
    o->prepared.step = o->step_dev;
    /* The fields the block replaces are NaN: a kernel that read them instead shows at once. */
    o->prepared.lr = o->prepared.decay = o->prepared.l2 = o->prepared.ema_momentum = NAN;
    for (int i = 0; i < 5; i++)
        o->prepared.c[i] = NAN;
    return DT_OK;
}

void dt_optim_apply(dt_optim *o)
{
    size_t n;
    float *w = dt_model_params(o->m, &n);
    float *g = dt_model_grads(o->m, NULL);
    clip_by_norm(o, g, n);
    dt_model_ops(o->m)->update(&o->prepared, w, g, n);
}

void dt_optim_advance(dt_optim *o)
{
    o->iterations++;
}

void dt_optim_finalize(dt_optim *o)
{
    float *avg = slot_named(o, o->cfg.use_ema ? "average" : NULL);
    if (!avg)
        return;
    size_t n;
    float *w = dt_model_params(o->m, &n);
    dt_model_ops(o->m)->copy(n, avg, w, false);
}

int64_t dt_optim_iterations(const dt_optim *o)
{
    return o->iterations;
}

void dt_optim_set_iterations(dt_optim *o, int64_t it)
{
    o->iterations = it;
}

double dt_optim_cfg_learning_rate(const dt_optim_cfg *cfg, int64_t iteration)
{
    if (cfg->lr.kind == DT_OPTIM_SCHEDULE_NONE)
        return cfg->learning_rate;
    return (float)dt_optim_schedule_at(&cfg->lr, iteration < 0 ? 0 : iteration);
}

double dt_optim_learning_rate_at(const dt_optim *o, int64_t iteration)
{
    return dt_optim_cfg_learning_rate(&o->cfg, iteration);
}

double dt_optim_learning_rate(const dt_optim *o)
{
    return dt_optim_cfg_learning_rate(&o->cfg, o->iterations);
}

dt_status dt_optim_set_learning_rate(dt_optim *o, double lr, dt_err *err)
{
    if (o->cfg.lr.kind != DT_OPTIM_SCHEDULE_NONE)
        return dt_err_set(err, DT_EINVAL,
                          "optimizer: the learning rate is a schedule and cannot be set (as in "
                          "Keras); give a constant learning_rate to change it while training");
    if (!(lr >= 0) || !isfinite(lr))
        return dt_err_set(err, DT_EINVAL, "optimizer: learning rate %g: expected a number >= 0",
                          lr);
    o->cfg.learning_rate = (float)lr;
    return DT_OK;
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
