/* test_nn_optim.c - the optimizers, their options and the learning-rate schedules against float64
 * references of Keras 3's rules written here from keras/src/optimizers/, the parsing of Keras
 * 2 and 3 configs, and a job that trains with Nadam + CosineDecay + EMA + clipping and resumes
 * bit-identically from its checkpoint. Measured max errors are printed (relative to max(|w|,
 * 0.1)). */
#include "dt_test.h"
#include "io/safetensors.h"
#include "nn/optim.h"
#include "test_nn_util.h"
#include "test_train_util.h"

#include <cjson/cJSON.h>
#include <unistd.h>

#define NP     8 /* Dense(2) on 3 inputs: kernel (3, 2) at 0, bias (2) at 6 */
#define STEPS  7
#define REL_OK 2e-6

/* The float64 reference: weights, slots in Keras's names, iterations. */
typedef struct ref {
    double w[NP], m[NP], v[NP], vh[NP], a[NP], avg[NP];
    int64_t it;
    double nadam_prod;
} ref;

static double gval(int i, int t, double scale)
{
    return scale * (sin(1.3 * i + 0.7 * t + 0.4) + 0.25 * (i % 3) - 0.1);
}

/* Keras 3's apply(): clip, decay, update_step, EMA, iterations += 1 (base_optimizer.py). */
static void ref_step(const dt_optim_cfg *c, ref *r, double *g, const size_t *off, const size_t *len,
                     size_t nseg)
{
    double lr = dt_optim_cfg_learning_rate(c, r->it); /* schedules: tested on their own below */
    double t = (double)(r->it + 1);
    if (c->clipnorm > 0)
        for (size_t s = 0; s < nseg; s++) {
            double ss = 0;
            for (size_t i = off[s]; i < off[s] + len[s]; i++)
                ss += g[i] * g[i];
            double nrm = sqrt(ss);
            for (size_t i = off[s]; i < off[s] + len[s]; i++)
                g[i] = g[i] * c->clipnorm / fmax(nrm, c->clipnorm);
        }
    if (c->global_clipnorm > 0) {
        double ss = 0;
        for (int i = 0; i < NP; i++)
            ss += g[i] * g[i];
        double scale = c->global_clipnorm * fmin(1 / sqrt(ss), 1 / (double)c->global_clipnorm);
        for (int i = 0; i < NP; i++)
            g[i] *= scale;
    }
    if (c->clipvalue > 0)
        for (int i = 0; i < NP; i++)
            g[i] = fmin(fmax(g[i], -c->clipvalue), c->clipvalue);
    double b1 = c->beta_1, b2 = c->beta_2, eps = c->epsilon, rho = c->rho, mo = c->momentum;
    double nadam_ut = 0, nadam_ut1 = 0;
    if (c->kind == DT_OPTIM_NADAM) {
        nadam_ut = b1 * (1 - 0.5 * pow(0.96, t));
        nadam_ut1 = b1 * (1 - 0.5 * pow(0.96, t + 1));
        r->nadam_prod = (r->it == 0 ? 1.0 : r->nadam_prod) * nadam_ut;
    }
    for (int i = 0; i < NP; i++) {
        double *w = &r->w[i], gi = g[i], *m = &r->m[i], *v = &r->v[i], *a = &r->a[i];
        *w -= *w * c->weight_decay * lr;
        switch (c->kind) {
        case DT_OPTIM_SGD:
            if (mo > 0) {
                *m = -gi * lr + *m * mo;
                *w += c->nesterov ? -gi * lr + *m * mo : *m;
            } else {
                *w -= gi * lr;
            }
            break;
        case DT_OPTIM_ADAM:
        case DT_OPTIM_ADAMW: {
            double alpha = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
            *m += (gi - *m) * (1 - b1);
            *v += (gi * gi - *v) * (1 - b2);
            double vv = *v;
            if (c->amsgrad) {
                r->vh[i] = fmax(r->vh[i], *v);
                vv = r->vh[i];
            }
            *w -= *m * alpha / (sqrt(vv) + eps);
            break;
        }
        case DT_OPTIM_RMSPROP: {
            *v = rho * *v + (1 - rho) * gi * gi;
            double den = *v + eps;
            if (c->centered) {
                *a = rho * *a + (1 - rho) * gi;
                den = *v - *a * *a + eps;
            }
            double inc = lr * gi / sqrt(den);
            if (mo > 0) {
                *m = mo * *m + inc;
                *w -= *m;
            } else {
                *w -= inc;
            }
            break;
        }
        case DT_OPTIM_ADAGRAD: /* accumulator in a */
            *a += gi * gi;
            *w -= lr * gi / sqrt(*a + eps);
            break;
        case DT_OPTIM_ADADELTA: { /* accumulated_grad in a, accumulated_delta_var in v */
            *a = rho * *a + (1 - rho) * gi * gi;
            double d = -(sqrt(*v + eps) * gi) / sqrt(*a + eps);
            *v = rho * *v + (1 - rho) * d * d;
            *w += lr * d;
            break;
        }
        case DT_OPTIM_ADAMAX: /* norm in v */
            *m += (gi - *m) * (1 - b1);
            *v = fmax(b2 * *v, fabs(gi));
            *w -= lr * *m / ((1 - pow(b1, t)) * (*v + eps));
            break;
        case DT_OPTIM_NADAM: {
            *m += (gi - *m) * (1 - b1);
            *v += (gi * gi - *v) * (1 - b2);
            double mh = nadam_ut1 * *m / (1 - r->nadam_prod * nadam_ut1) +
                        (1 - nadam_ut) * gi / (1 - r->nadam_prod);
            double vh = *v / (1 - pow(b2, t));
            *w -= mh * lr / (sqrt(vh) + eps);
            break;
        }
        case DT_OPTIM_FTRL: { /* accumulator in a, linear in m */
            double p = -c->learning_rate_power, l1 = c->l1_regularization_strength;
            double l2 = c->l2_regularization_strength + c->beta / (2 * lr);
            double gs = gi + 2 * c->l2_shrinkage_regularization_strength * *w;
            double na = *a + gi * gi;
            *m += gs - (pow(na, p) - pow(*a, p)) / lr * *w;
            double quad = pow(na, p) / lr + 2 * l2;
            double lc = fmin(fmax(*m, -l1), l1);
            *w = (lc - *m) / quad;
            *a = na;
            break;
        }
        case DT_OPTIM_LION: {
            double s = *m * b1 + gi * (1 - b1);
            *w -= lr * ((s > 0) - (s < 0));
            *m = *m * b2 + gi * (1 - b2);
            break;
        }
        }
        if (c->use_ema) {
            double em = r->it == 0 ? 0 : c->ema_momentum;
            r->avg[i] = em * r->avg[i] + (1 - em) * *w;
            if (c->ema_overwrite_frequency > 0 && (r->it + 1) % c->ema_overwrite_frequency == 0)
                *w = r->avg[i];
        }
    }
    r->it++;
}

static double rel_err(double got, double want)
{
    return fabs(got - want) / fmax(fabs(want), 0.1);
}

/* Runs spec for STEPS steps on the Dense model with gradients of the given scale, against the
 * reference; returns the max relative error over weights (and the EMA slot). */
static double optim_vs_ref(const char *spec, double gscale)
{
    dt_model *m = nn_build(nn_seq("3",
                                  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                                  "\"units\": 2}}",
                                  NULL),
                           7);
    size_t n;
    float *dw = dt_model_params(m, &n), *dg = dt_model_grads(m, NULL), w[NP], g[NP];
    ASSERT_EQ(n, NP);
    size_t off[2], len[2], nseg = 0;
    for (size_t i = 0; i < dt_model_weight_count(m); i++) {
        const dt_model_weight *wt = dt_model_weight_at(m, i);
        off[nseg] = wt->offset;
        len[nseg++] = wt->size;
    }
    ASSERT_EQ(nseg, 2);
    cJSON *j = cJSON_Parse(spec);
    ASSERT_TRUE(j != NULL);
    dt_optim_cfg cfg;
    dt_err err = {0};
    ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
    cJSON_Delete(j);
    dt_optim *o;
    ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
    ASSERT_EQ(dt_optim_slot_count(o), dt_optim_cfg_slots(&cfg));
    ref r = {0};
    for (int i = 0; i < NP; i++) {
        w[i] = (float)(0.3 * i - 1.1);
        r.w[i] = w[i];
        if (cfg.kind == DT_OPTIM_ADAGRAD || cfg.kind == DT_OPTIM_FTRL)
            r.a[i] = (float)cfg.initial_accumulator_value;
    }
    nn_dev_set(m, dw, w, NP);
    double worst = 0;
    for (int t = 0; t < STEPS; t++) {
        double gd[NP];
        for (int i = 0; i < NP; i++) {
            g[i] = (float)gval(i, t, gscale);
            gd[i] = g[i];
        }
        nn_dev_set(m, dg, g, NP);
        ASSERT_OK(dt_optim_step(o, &err), &err);
        dt_model_ops(m)->download(w, dw, sizeof w);
        ref_step(&cfg, &r, gd, off, len, nseg);
        for (int i = 0; i < NP; i++) {
            double e = rel_err(w[i], r.w[i]);
            if (!(e <= REL_OK))
                DT_FAIL_("%s: step %d w[%d] = %.9g, reference %.9g (rel %.3g)", spec, t + 1, i,
                         (double)w[i], r.w[i], e);
            worst = fmax(worst, e);
        }
    }
    if (cfg.use_ema) {
        float *avg = NULL;
        for (size_t k = 0; k < dt_optim_slot_count(o); k++) {
            const char *name;
            float *s = dt_optim_slot(o, k, &name);
            if (!strcmp(name, "average"))
                avg = nn_dev_get(m, s, NP);
        }
        ASSERT_TRUE(avg != NULL);
        for (int i = 0; i < NP; i++)
            worst = fmax(worst, rel_err(avg[i], r.avg[i]));
        dt_optim_finalize(o);
        dt_model_ops(m)->download(w, dw, sizeof w);
        for (int i = 0; i < NP; i++)
            ASSERT_TRUE(w[i] == avg[i]);
        free(avg);
    }
    ASSERT_TRUE(worst <= REL_OK);
    ASSERT_EQ(dt_optim_iterations(o), STEPS);
    dt_optim_free(o);
    dt_model_free(m);
    return worst;
}

static const char *const optim_cases[] = {
    "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.1, \"momentum\": 0.9, "
    "\"nesterov\": true, \"weight_decay\": 0.01}}",
    "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01, \"amsgrad\": true}}",
    "{\"class_name\": \"AdamW\", \"config\": {\"learning_rate\": 0.01, \"amsgrad\": true, "
    "\"weight_decay\": 0.1}}",
    "{\"class_name\": \"RMSprop\", \"config\": {\"momentum\": 0.5, \"centered\": true, "
    "\"weight_decay\": 0.05}}",
    "\"adagrad\"",
    "{\"class_name\": \"Adagrad\", \"config\": {\"learning_rate\": 0.1, "
    "\"initial_accumulator_value\": 0.5, \"epsilon\": 1e-4}}",
    "\"adadelta\"",
    "{\"class_name\": \"Adadelta\", \"config\": {\"learning_rate\": 1.0, \"rho\": 0.8, "
    "\"epsilon\": 1e-3}}",
    "\"adamax\"",
    "{\"class_name\": \"Adamax\", \"config\": {\"learning_rate\": 0.02, \"beta_1\": 0.7, "
    "\"beta_2\": 0.9}}",
    "\"nadam\"",
    "{\"class_name\": \"Nadam\", \"config\": {\"learning_rate\": 0.02, \"beta_1\": 0.8, "
    "\"epsilon\": 1e-3}}",
    "\"ftrl\"",
    "{\"class_name\": \"Ftrl\", \"config\": {\"learning_rate\": 0.5, \"learning_rate_power\": "
    "-0.7, \"initial_accumulator_value\": 0.2, \"l1_regularization_strength\": 0.05, "
    "\"l2_regularization_strength\": 0.1, \"l2_shrinkage_regularization_strength\": 0.02, "
    "\"beta\": 0.3}}",
    "\"lion\"",
    "{\"class_name\": \"Lion\", \"config\": {\"learning_rate\": 0.01, \"beta_1\": 0.5, "
    "\"beta_2\": 0.9, \"weight_decay\": 0.5}}",
};

DT_TEST(nn_optim_every_optimizer_against_keras_rules)
{
    double worst = 0;
    for (size_t i = 0; i < sizeof optim_cases / sizeof *optim_cases; i++) {
        double e = optim_vs_ref(optim_cases[i], 1.0);
        printf("%-60.60s max rel err %.2e\n", optim_cases[i], e);
        worst = fmax(worst, e);
    }
    printf("optimizers: max rel err %.2e\n", worst);
}

/* Each option on several optimizers: clipping (by weight, global, by value; active at scale 3),
 * weight decay, EMA with and without overwriting, a schedule. */
DT_TEST(nn_optim_options_against_keras_rules)
{
    static const char *const kinds[] = {"SGD",    "Adam",  "RMSprop", "Adagrad", "Adadelta",
                                        "Adamax", "Nadam", "Ftrl",    "Lion"};
    static const char *const opts[] = {
        "\"clipnorm\": 0.5",
        "\"global_clipnorm\": 0.7",
        "\"clipvalue\": 0.3",
        "\"weight_decay\": 0.2",
        "\"use_ema\": true",
        "\"use_ema\": true, \"ema_momentum\": 0.5, \"ema_overwrite_frequency\": 3",
        "\"learning_rate\": {\"module\": \"keras.optimizers.schedules\", \"class_name\": "
        "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.01, \"decay_steps\": 5, "
        "\"alpha\": 0.1, \"name\": \"CosineDecay\", \"warmup_target\": 0.05, \"warmup_steps\": "
        "2}, \"registered_name\": null}",
        "\"learning_rate\": {\"class_name\": \"ExponentialDecay\", \"config\": "
        "{\"initial_learning_rate\": 0.05, \"decay_steps\": 2, \"decay_rate\": 0.5, "
        "\"staircase\": true}}, \"clipnorm\": 1.0, \"use_ema\": true, "
        "\"ema_overwrite_frequency\": 2, \"weight_decay\": 0.01",
    };
    double worst = 0;
    char spec[1024];
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
            snprintf(spec, sizeof spec, "{\"class_name\": \"%s\", \"config\": {%s}}", kinds[k],
                     opts[i]);
            worst = fmax(worst, optim_vs_ref(spec, 3.0));
        }
    /* amsgrad with every option at once */
    snprintf(spec, sizeof spec,
             "{\"class_name\": \"AdamW\", \"config\": {\"amsgrad\": true, \"global_clipnorm\": "
             "0.4, \"use_ema\": true, \"ema_overwrite_frequency\": 4, %s}}",
             strstr(opts[6], "\"learning_rate\""));
    worst = fmax(worst, optim_vs_ref(spec, 3.0));
    printf("options: max rel err %.2e\n", worst);
}

/* Checks that clipping really acted: the same run without it differs. */
DT_TEST(nn_optim_clipping_changes_the_update)
{
    dt_model *m = nn_build(nn_seq("3",
                                  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                                  "\"units\": 2}}",
                                  NULL),
                           7);
    float *dw = dt_model_params(m, NULL), *dg = dt_model_grads(m, NULL), w[NP], g[NP];
    const char *specs[] = {
        "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 1.0}}",
        "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 1.0, \"clipnorm\": 0.5}}",
        "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 1.0, \"global_clipnorm\": "
        "0.5}}",
        "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 1.0, \"clipvalue\": 0.5}}",
    };
    double norm2[4];
    for (int k = 0; k < 4; k++) {
        cJSON *j = cJSON_Parse(specs[k]);
        dt_optim_cfg cfg;
        dt_err err = {0};
        ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
        cJSON_Delete(j);
        dt_optim *o;
        ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
        for (int i = 0; i < NP; i++) {
            w[i] = 0;
            g[i] = (float)(i + 1);
        }
        nn_dev_set(m, dw, w, NP);
        nn_dev_set(m, dg, g, NP);
        ASSERT_OK(dt_optim_step(o, &err), &err);
        dt_model_ops(m)->download(w, dw, sizeof w);
        norm2[k] = 0;
        for (int i = 0; i < NP; i++) {
            norm2[k] += (double)w[i] * w[i];
            if (k == 3)
                ASSERT_NEAR(w[i], -0.5, 1e-7);
        }
        dt_optim_free(o);
    }
    ASSERT_NEAR(norm2[0], 204.0, 1e-4); /* 1 + 4 + ... + 64 */
    ASSERT_NEAR(sqrt(norm2[2]), 0.5, 1e-6);
    ASSERT_NEAR(norm2[1], 0.5, 1e-6); /* two weights, each clipped to a norm of 0.5 */
    dt_model_free(m);
}

/* ------------------------------------------------------------------------- schedules -- */

static dt_optim_schedule sched(const char *json)
{
    cJSON *j = cJSON_Parse(json);
    ASSERT_TRUE(j != NULL);
    dt_optim_schedule s;
    dt_err err = {0};
    ASSERT_OK(dt_optim_schedule_from_json(j, &s, &err), &err);
    cJSON_Delete(j);
    return s;
}

static double sched_worst;

static void at(const dt_optim_schedule *s, int64_t step, double want)
{
    double got = dt_optim_schedule_at(s, step);
    double e = fabs(got - want) / fmax(fabs(want), 1e-12);
    if (!(e <= 1e-12))
        DT_FAIL_("schedule %d at step %lld: %.15g, Keras's formula gives %.15g", (int)s->kind,
                 (long long)step, got, want);
    sched_worst = fmax(sched_worst, e);
}

DT_TEST(nn_optim_schedules_against_keras_formulas)
{
    const double pi = M_PI;
    /* ExponentialDecay: init * rate^(step / decay_steps), floored with staircase */
    dt_optim_schedule s = sched(
        "{\"module\": \"keras.optimizers.schedules\", \"class_name\": \"ExponentialDecay\", "
        "\"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 1000, \"decay_rate\": "
        "0.96, \"staircase\": false, \"name\": \"ExponentialDecay\"}, \"registered_name\": null}");
    at(&s, 0, 0.1);
    at(&s, 999, 0.1 * pow(0.96, 0.999));
    at(&s, 12345, 0.1 * pow(0.96, 12.345));
    s = sched("{\"class_name\": \"ExponentialDecay\", \"config\": {\"initial_learning_rate\": "
              "0.1, \"decay_steps\": 1000, \"decay_rate\": 0.96, \"staircase\": true}}");
    at(&s, 999, 0.1);
    at(&s, 1000, 0.1 * 0.96);
    at(&s, 2999, 0.1 * 0.96 * 0.96);
    /* PiecewiseConstantDecay: values[0] up to and at boundaries[0], ... */
    s = sched("{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [100, "
              "110], \"values\": [1.0, 0.5, 0.1], \"name\": \"PiecewiseConstant\"}}");
    at(&s, 0, 1.0);
    at(&s, 100, 1.0);
    at(&s, 101, 0.5);
    at(&s, 110, 0.5);
    at(&s, 111, 0.1);
    at(&s, 1000000, 0.1);
    /* PolynomialDecay: (init - end) (1 - p)^power + end; cycle stretches decay_steps */
    s = sched("{\"class_name\": \"PolynomialDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
              "\"decay_steps\": 100, \"end_learning_rate\": 0.01, \"power\": 0.5, \"cycle\": "
              "false, \"name\": \"PolynomialDecay\"}}");
    at(&s, 0, 0.1);
    at(&s, 50, 0.09 * sqrt(0.5) + 0.01);
    at(&s, 100, 0.01);
    at(&s, 250, 0.01);
    s = sched("{\"class_name\": \"PolynomialDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
              "\"decay_steps\": 100, \"end_learning_rate\": 0.01, \"power\": 2.0, \"cycle\": "
              "true}}");
    at(&s, 0, 0.1);
    at(&s, 100, 0.01);                                  /* ceil(1) = 1 */
    at(&s, 101, 0.09 * pow(1 - 101.0 / 200, 2) + 0.01); /* ceil(1.01) = 2 */
    at(&s, 250, 0.09 * pow(1 - 250.0 / 300, 2) + 0.01); /* ceil(2.5) = 3 */
    at(&s, 300, 0.01);
    /* default end_learning_rate 0.0001, power 1 */
    s = sched("{\"class_name\": \"PolynomialDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
              "\"decay_steps\": 10}}");
    at(&s, 4, (0.1 - 0.0001) * 0.6 + 0.0001);
    /* InverseTimeDecay: init / (1 + rate p) */
    s = sched("{\"class_name\": \"InverseTimeDecay\", \"config\": {\"initial_learning_rate\": "
              "0.1, \"decay_steps\": 10, \"decay_rate\": 0.5, \"staircase\": false}}");
    at(&s, 15, 0.1 / (1 + 0.5 * 1.5));
    s = sched("{\"class_name\": \"InverseTimeDecay\", \"config\": {\"initial_learning_rate\": "
              "0.1, \"decay_steps\": 10, \"decay_rate\": 0.5, \"staircase\": true}}");
    at(&s, 9, 0.1);
    at(&s, 15, 0.1 / 1.5);
    at(&s, 20, 0.1 / 2);
    /* CosineDecay: init ((1 - alpha) 0.5 (1 + cos(pi min(step, D) / D)) + alpha) */
    s = sched("{\"class_name\": \"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
              "\"decay_steps\": 100, \"alpha\": 0.2, \"name\": \"CosineDecay\", "
              "\"warmup_target\": null, \"warmup_steps\": 0}}");
    at(&s, 0, 0.1);
    at(&s, 30, 0.1 * (0.8 * 0.5 * (1 + cos(pi * 0.3)) + 0.2));
    at(&s, 100, 0.1 * 0.2);
    at(&s, 500, 0.1 * 0.2);
    /* with warmup: linear from init to warmup_target over warmup_steps, then the decay from it */
    s = sched("{\"class_name\": \"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.0, "
              "\"decay_steps\": 100, \"alpha\": 0.0, \"warmup_target\": 0.4, \"warmup_steps\": "
              "10}}");
    at(&s, 0, 0.0);
    at(&s, 5, 0.2);
    at(&s, 9, 0.36);
    at(&s, 10, 0.4);
    at(&s, 60, 0.4 * 0.5 * (1 + cos(pi * 0.5)));
    at(&s, 110, 0.4 * 0.5 * (1 + cos(pi)));
    at(&s, 1000, 0.4 * 0.5 * (1 + cos(pi)));
    /* CosineDecayRestarts: periods of 10, 20, 40 (t_mul 2), amplitude m_mul^i */
    s = sched("{\"class_name\": \"CosineDecayRestarts\", \"config\": {\"initial_learning_rate\": "
              "1.0, \"first_decay_steps\": 10, \"t_mul\": 2.0, \"m_mul\": 0.5, \"alpha\": 0.1, "
              "\"name\": \"SGDRDecay\"}}");
    at(&s, 0, 1.0);
    at(&s, 5, 0.9 * 0.5 * (1 + cos(pi * 0.5)) + 0.1);
    at(&s, 9, 0.9 * 0.5 * (1 + cos(pi * 0.9)) + 0.1);
    at(&s, 10, 0.9 * 0.5 + 0.1); /* restart 1: m_mul^1 */
    at(&s, 20, 0.9 * 0.5 * 0.5 * (1 + cos(pi * 0.5)) + 0.1);
    at(&s, 29, 0.9 * 0.5 * 0.5 * (1 + cos(pi * 19 / 20)) + 0.1);
    at(&s, 30, 0.9 * 0.25 + 0.1);    /* restart 2 */
    at(&s, 70, 0.9 * 0.125 + 0.1);   /* restart 3 */
    at(&s, 150, 0.9 * 0.0625 + 0.1); /* restart 4 */
    /* t_mul 1: equal periods; defaults t_mul 2, m_mul 1 */
    s = sched("{\"class_name\": \"CosineDecayRestarts\", \"config\": {\"initial_learning_rate\": "
              "1.0, \"first_decay_steps\": 10, \"t_mul\": 1.0, \"m_mul\": 1.0}}");
    at(&s, 10, 1.0);
    at(&s, 25, 0.5 * (1 + cos(pi * 0.5)));
    s = sched("{\"class_name\": \"CosineDecayRestarts\", \"config\": {\"initial_learning_rate\": "
              "2.0, \"first_decay_steps\": 4}}");
    at(&s, 12, 2.0);
    at(&s, 14, 2.0 * 0.5 * (1 + cos(pi * 0.125))); /* period 3 of 16 steps */
    printf("schedules: max rel err %.2e\n", sched_worst);
}

/* The optimizer follows its schedule from its iterations, restored or not. */
DT_TEST(nn_optim_schedule_drives_the_rate)
{
    dt_model *m = nn_build(nn_seq("3",
                                  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                                  "\"units\": 2}}",
                                  NULL),
                           7);
    cJSON *j = cJSON_Parse("{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": "
                           "{\"class_name\": \"PiecewiseConstantDecay\", \"config\": "
                           "{\"boundaries\": [2, 4], \"values\": [0.5, 0.25, 0.125]}}}}");
    dt_optim_cfg cfg;
    dt_err err = {0};
    ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
    cJSON_Delete(j);
    ASSERT_NEAR(cfg.learning_rate, 0.5, 0);
    dt_optim *o;
    ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
    const double want[] = {0.5, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125};
    for (int t = 0; t < 7; t++) {
        ASSERT_NEAR(dt_optim_learning_rate(o), want[t], 0);
        float zero = 0, one = 1;
        nn_dev_set(m, dt_model_params(m, NULL), &zero, 1);
        nn_dev_set(m, dt_model_grads(m, NULL), &one, 1);
        ASSERT_OK(dt_optim_step(o, &err), &err);
        ASSERT_NEAR(nn_param_get(m, 0), -want[t], 0);
        ASSERT_NEAR(dt_optim_learning_rate_at(o, dt_optim_iterations(o) - 1), want[t], 0);
    }
    dt_optim_set_iterations(o, 3);
    ASSERT_NEAR(dt_optim_learning_rate(o), 0.25, 0);
    ASSERT_TRUE(dt_optim_set_learning_rate(o, 0.1, &err) != DT_OK);
    ASSERT_CONTAINS(err.msg, "schedule");
    dt_optim_free(o);
    dt_model_free(m);
}

/* -------------------------------------------------------------------------- parsing -- */

static dt_optim_cfg parse_ok(const char *json)
{
    cJSON *j = cJSON_Parse(json);
    if (!j)
        DT_FAIL_("bad test JSON: %s", json);
    dt_optim_cfg c;
    dt_err err = {0};
    dt_status st = dt_optim_cfg_from_json(j, &c, &err);
    if (st != DT_OK)
        DT_FAIL_("%s: %s", json, err.msg);
    cJSON_Delete(j);
    return c;
}

/* Configs as Keras 3's get_config() and Keras 2's (keras.optimizers, TF 2.11-2.15) write them. */
DT_TEST(nn_optim_parse_keras2_and_keras3_configs)
{
#define K3_BASE                                                                                    \
    "\"weight_decay\": null, \"clipnorm\": null, \"global_clipnorm\": null, \"clipvalue\": "       \
    "null, \"use_ema\": false, \"ema_momentum\": 0.99, \"ema_overwrite_frequency\": null, "        \
    "\"loss_scale_factor\": null, \"gradient_accumulation_steps\": null"
#define K2_BASE                                                                                    \
    "\"weight_decay\": null, \"clipnorm\": null, \"global_clipnorm\": null, \"clipvalue\": "       \
    "null, \"use_ema\": false, \"ema_momentum\": 0.99, \"ema_overwrite_frequency\": null, "        \
    "\"jit_compile\": true, \"is_legacy_optimizer\": false"
    dt_optim_cfg c =
        parse_ok("{\"module\": \"keras.optimizers\", \"class_name\": \"Adagrad\", "
                 "\"config\": {\"name\": \"adagrad\", \"learning_rate\": 0.01, " K3_BASE
                 ", \"initial_accumulator_value\": 0.2, \"epsilon\": 1e-07}, "
                 "\"registered_name\": null}");
    ASSERT_EQ(c.kind, DT_OPTIM_ADAGRAD);
    ASSERT_NEAR(c.initial_accumulator_value, 0.2, 1e-7);
    ASSERT_EQ(dt_optim_cfg_slots(&c), 1);
    c = parse_ok("{\"class_name\": \"Adadelta\", \"config\": {\"name\": \"Adadelta\", " K2_BASE
                 ", \"learning_rate\": 0.001, \"rho\": 0.95, \"epsilon\": 1e-07}}");
    ASSERT_EQ(c.kind, DT_OPTIM_ADADELTA);
    ASSERT_EQ(dt_optim_cfg_slots(&c), 2);
    c = parse_ok("{\"class_name\": \"Adamax\", \"config\": {\"name\": \"adamax\", "
                 "\"learning_rate\": 0.002, " K3_BASE
                 ", \"beta_1\": 0.9, \"beta_2\": 0.999, \"epsilon\": 1e-07}}");
    ASSERT_EQ(c.kind, DT_OPTIM_ADAMAX);
    c = parse_ok("{\"class_name\": \"Nadam\", \"config\": {\"name\": \"Nadam\", " K2_BASE
                 ", \"learning_rate\": 0.001, \"beta_1\": 0.9, \"beta_2\": 0.999, \"epsilon\": "
                 "1e-07}}");
    ASSERT_EQ(c.kind, DT_OPTIM_NADAM);
    c = parse_ok("{\"class_name\": \"Ftrl\", \"config\": {\"name\": \"ftrl\", \"learning_rate\": "
                 "0.001, " K3_BASE
                 ", \"learning_rate_power\": -0.5, \"initial_accumulator_value\": 0.1, "
                 "\"l1_regularization_strength\": 0.0, \"l2_regularization_strength\": 0.0, "
                 "\"l2_shrinkage_regularization_strength\": 0.0, \"beta\": 0.0}}");
    ASSERT_EQ(c.kind, DT_OPTIM_FTRL);
    ASSERT_EQ(dt_optim_cfg_slots(&c), 2);
    c = parse_ok("{\"class_name\": \"Lion\", \"config\": {\"name\": \"lion\", \"learning_rate\": "
                 "0.0001, " K3_BASE ", \"beta_1\": 0.9, \"beta_2\": 0.99}}");
    ASSERT_EQ(c.kind, DT_OPTIM_LION);
    ASSERT_NEAR(c.beta_2, 0.99, 1e-7);
    c = parse_ok("{\"class_name\": \"Adam\", \"config\": {\"name\": \"adam\", \"learning_rate\": "
                 "0.001, \"weight_decay\": null, \"clipnorm\": 1.0, \"global_clipnorm\": null, "
                 "\"clipvalue\": null, \"use_ema\": true, \"ema_momentum\": 0.9, "
                 "\"ema_overwrite_frequency\": 100, \"loss_scale_factor\": null, "
                 "\"gradient_accumulation_steps\": null, \"beta_1\": 0.9, \"beta_2\": 0.999, "
                 "\"epsilon\": 1e-07, \"amsgrad\": true}}");
    ASSERT_TRUE(c.amsgrad && c.use_ema);
    ASSERT_EQ(c.ema_overwrite_frequency, 100);
    ASSERT_NEAR(c.clipnorm, 1.0, 0);
    ASSERT_EQ(dt_optim_cfg_slots(&c), 4); /* momentum, velocity, velocity_hat, average */
    /* Keras 3 schedule inside a Keras 3 optimizer; Keras 2's bare form inside a Keras 2 one */
    c = parse_ok("{\"module\": \"keras.optimizers\", \"class_name\": \"SGD\", \"config\": "
                 "{\"name\": \"SGD\", \"learning_rate\": {\"module\": "
                 "\"keras.optimizers.schedules\", \"class_name\": \"CosineDecayRestarts\", "
                 "\"config\": {\"initial_learning_rate\": 0.1, \"first_decay_steps\": 1000, "
                 "\"t_mul\": 2.0, \"m_mul\": 1.0, \"alpha\": 0.0, \"name\": \"SGDRDecay\"}, "
                 "\"registered_name\": null}, " K3_BASE
                 ", \"momentum\": 0.0, \"nesterov\": false}, \"registered_name\": null}");
    ASSERT_EQ(c.lr.kind, DT_OPTIM_SCHEDULE_COSINE_DECAY_RESTARTS);
    ASSERT_NEAR(c.learning_rate, 0.1, 1e-8);
    c = parse_ok("{\"class_name\": \"RMSprop\", \"config\": {\"name\": \"RMSprop\", " K2_BASE
                 ", \"learning_rate\": {\"class_name\": \"InverseTimeDecay\", \"config\": "
                 "{\"initial_learning_rate\": 0.01, \"decay_steps\": 10, \"decay_rate\": 1.0, "
                 "\"staircase\": false, \"name\": null}}, \"rho\": 0.9, \"momentum\": 0.0, "
                 "\"epsilon\": 1e-07, \"centered\": false}}");
    ASSERT_EQ(c.lr.kind, DT_OPTIM_SCHEDULE_INVERSE_TIME_DECAY);
    ASSERT_NEAR(dt_optim_cfg_learning_rate(&c, 10), 0.005, 1e-9);
    /* strings */
    const char *names[] = {"\"adagrad\"", "\"Adadelta\"", "\"adamax\"",
                           "\"nadam\"",   "\"ftrl\"",     "\"lion\""};
    for (size_t i = 0; i < 6; i++)
        parse_ok(names[i]);
#undef K3_BASE
#undef K2_BASE
}

DT_TEST(nn_optim_bad_values_refused_naming_the_key)
{
    static const char *const bad[][2] = {
        {"{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": -0.1}}", "'learning_rate'"},
        {"{\"class_name\": \"RMSprop\", \"config\": {\"rho\": 1.0}}", "'rho'"},
        {"{\"class_name\": \"Adadelta\", \"config\": {\"rho\": 1.5}}", "'rho'"},
        {"{\"class_name\": \"Adam\", \"config\": {\"beta_1\": \"0.9\"}}", "'beta_1'"},
        {"{\"class_name\": \"Adam\", \"config\": {\"momentum\": 0.9}}", "'momentum'"},
        {"{\"class_name\": \"Adam\", \"config\": {\"amsgrad\": 1}}", "'amsgrad'"},
        {"{\"class_name\": \"Lion\", \"config\": {\"beta_1\": 0}}", "'beta_1'"},
        {"{\"class_name\": \"Ftrl\", \"config\": {\"learning_rate_power\": 0.5}}",
         "'learning_rate_power'"},
        {"{\"class_name\": \"Ftrl\", \"config\": {\"l1_regularization_strength\": -1}}",
         "'l1_regularization_strength'"},
        {"{\"class_name\": \"Adagrad\", \"config\": {\"initial_accumulator_value\": -0.1}}",
         "'initial_accumulator_value'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"clipnorm\": 1, \"clipvalue\": 1}}",
         "'clipnorm' and 'clipvalue'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"global_clipnorm\": -1}}", "'global_clipnorm'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"weight_decay\": -0.1}}", "'weight_decay'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"use_ema\": \"yes\"}}", "'use_ema'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"use_ema\": true, \"ema_momentum\": 1.5}}",
         "'ema_momentum'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"use_ema\": true, \"ema_overwrite_frequency\": "
         "1.5}}",
         "'ema_overwrite_frequency'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"gradient_accumulation_steps\": 4}}",
         "'gradient_accumulation_steps'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"decay\": 0.01}}", "'decay'"},
        {"{\"class_name\": \"Adafactor\", \"config\": {}}", "Adafactor"},
        /* schedules */
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"LinearWarmup\", \"config\": {}}}}",
         "LinearWarmup"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 0, "
         "\"decay_rate\": 0.9}}}}",
         "'decay_steps'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": "
         "10}}}}",
         "'decay_rate' is required"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": -0.1, \"decay_steps\": 10, "
         "\"decay_rate\": 0.9}}}}",
         "'initial_learning_rate'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10, "
         "\"decay_rate\": 0.9, \"staircase\": 1}}}}",
         "'staircase'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [10, 20], \"values\": [1.0, "
         "0.5]}}}}",
         "'values'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [20, 10], \"values\": [1.0, "
         "0.5, 0.1]}}}}",
         "'boundaries'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [10], \"values\": [1.0, "
         "-0.5]}}}}",
         "'values'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10, "
         "\"alpha\": 2}}}}",
         "'alpha'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10, "
         "\"warmup_target\": \"x\"}}}}",
         "'warmup_target'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10, "
         "\"bogus\": 1}}}}",
         "'bogus'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"module\": \"my_pkg\", "
         "\"class_name\": \"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
         "\"decay_steps\": 10}}}}",
         "\"module\""},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"CosineDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10}, "
         "\"registered_name\": \"my_pkg>CosineDecay\"}}}",
         "registered_name"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"CosineDecayRestarts\", \"config\": {\"initial_learning_rate\": 0.1, "
         "\"first_decay_steps\": 10, \"t_mul\": 0}}}}",
         "'t_mul'"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"PolynomialDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10, "
         "\"power\": -1}}}}",
         "'power'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Parse(bad[i][0]);
        if (!j)
            DT_FAIL_("bad test JSON %zu", i);
        dt_optim_cfg c;
        dt_err err = {0};
        if (dt_optim_cfg_from_json(j, &c, &err) == DT_OK)
            DT_FAIL_("accepted: %s", bad[i][0]);
        ASSERT_CONTAINS(err.msg, bad[i][1]);
        cJSON_Delete(j);
    }
}

/* ----------------------------------------------------------------------- end to end -- */

/* A job with Nadam + CosineDecay (warmup) + use_ema + clipnorm learns, and one cancelled and
 * resumed from its checkpoint ends bit-identical to one that never stopped (slots "momentum",
 * "velocity", "average" and the iterations restored; the schedule continues). */
DT_TEST_TIMEOUT(train_nadam_cosine_ema_resumes, 120)
{
    tt_setup(256, 64);
    const char *opt =
        "{\"class_name\": \"Nadam\", \"config\": {\"learning_rate\": {\"module\": "
        "\"keras.optimizers.schedules\", \"class_name\": \"CosineDecay\", \"config\": "
        "{\"initial_learning_rate\": 0.001, \"decay_steps\": 20, \"alpha\": 0.1, "
        "\"warmup_target\": 0.01, \"warmup_steps\": 4}, \"registered_name\": null}, "
        "\"clipnorm\": 1.0, \"use_ema\": true, \"ema_momentum\": 0.9, "
        "\"ema_overwrite_frequency\": 5}}";
    char ref_dir[1024], run_dir[1024];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", dt_test_tmpdir());
    snprintf(run_dir, sizeof run_dir, "%s/run", dt_test_tmpdir());
    dt_jobspec spec;
    tt_parse(tt_spec(2, 16, opt, ", \"checkpoint\": {\"save_freq\": 4, \"keep\": 2}"), &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica ref[2], run[2];
    o.out_dir = ref_dir;
    tt_run(&spec, 2, &o, -1, 0, ref);
    ASSERT_EQ(ref[0].st, DT_OK);
    ASSERT_EQ(ref[0].res.global_step, 32);
    printf("Nadam + CosineDecay + EMA: loss %.4f -> %.4f, val accuracy %.4f\n", ref[0].losses[0],
           ref[0].res.loss, ref[0].res.val_accuracy);
    ASSERT_TRUE(ref[0].res.loss < ref[0].losses[0]);
    ASSERT_EQ(ref[1].res.weights_hash, ref[0].res.weights_hash);
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/checkpoints", ref_dir);
    char *latest = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_train_latest_checkpoint(ck, &latest, &err), &err);
    dt_st_file *f;
    ASSERT_OK(dt_st_open(latest, &f, &err), &err);
    ASSERT_TRUE(dt_st_find(f, "optimizer/out/kernel/momentum") != NULL);
    ASSERT_TRUE(dt_st_find(f, "optimizer/out/kernel/velocity") != NULL);
    ASSERT_TRUE(dt_st_find(f, "optimizer/out/kernel/average") != NULL);
    dt_st_free(f);
    free(latest);

    o.out_dir = run_dir;
    tt_run(&spec, 2, &o, 0, 10, run); /* cancelled during step 10 */
    ASSERT_EQ(run[0].st, DT_ECANCELED);
    tt_free(run, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, run);
    ASSERT_EQ(run[0].st, DT_OK);
    ASSERT_TRUE(run[0].res.resumed);
    ASSERT_EQ(run[0].res.global_step, 32);
    ASSERT_EQ(run[0].res.weights_hash, ref[0].res.weights_hash);
    ASSERT_EQ(run[1].res.weights_hash, ref[0].res.weights_hash);
    tt_free(ref, 2);
    tt_free(run, 2);
    dt_jobspec_destroy(&spec);
}

/* ------------------------------------------------------------------- PyTorch parity -- */

#define PY dt_test_python()

/* Where PyTorch's rule is Keras's (epsilon 0 for Adagrad, Adamax and AMSGrad, whose epsilon
 * sits elsewhere; Adadelta as is; AdamW's decoupled decay), float64 PyTorch 1.13 on the same
 * weights and gradients. */
static const char *const torch_py =
    "import json, sys, torch\n"
    "s = json.load(open(sys.argv[1]))\n"
    "p = torch.nn.Parameter(torch.tensor(s['w'], dtype=torch.float64))\n"
    "opt = eval('torch.optim.' + s['torch'])\n"
    "for g in s['grads']:\n"
    "    p.grad = torch.tensor(g, dtype=torch.float64)\n"
    "    opt.step()\n"
    "json.dump(p.detach().tolist(), open(sys.argv[2], 'w'))\n";

DT_TEST_TIMEOUT(nn_optim_torch_parity, 120)
{
    if (access(PY, X_OK) != 0)
        DT_SKIP("no %s (Debian's python3)", PY);
    if (!dt_test_python_has("torch"))
        DT_SKIP("%s has no torch: apt-get install python3-torch", PY);
    static const char *const cases[][2] = {
        {"{\"class_name\": \"Adadelta\", \"config\": {\"learning_rate\": 1.0, \"rho\": 0.9, "
         "\"epsilon\": 1e-6}}",
         "Adadelta([p], lr=1.0, rho=0.9, eps=1e-6)"},
        {"{\"class_name\": \"Adagrad\", \"config\": {\"learning_rate\": 0.1, "
         "\"initial_accumulator_value\": 0.1, \"epsilon\": 0}}",
         "Adagrad([p], lr=0.1, initial_accumulator_value=0.1, eps=0)"},
        {"{\"class_name\": \"Adamax\", \"config\": {\"learning_rate\": 0.02, \"epsilon\": 0}}",
         "Adamax([p], lr=0.02, betas=(0.9, 0.999), eps=0)"},
        {"{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01, \"amsgrad\": true, "
         "\"epsilon\": 0}}",
         "Adam([p], lr=0.01, betas=(0.9, 0.999), eps=0, amsgrad=True)"},
        {"{\"class_name\": \"AdamW\", \"config\": {\"learning_rate\": 0.01, \"amsgrad\": true, "
         "\"epsilon\": 0, \"weight_decay\": 0.1}}",
         "AdamW([p], lr=0.01, betas=(0.9, 0.999), eps=0, amsgrad=True, weight_decay=0.1)"},
    };
    char py[1024], in[1024], out[1024], cmd[4096];
    snprintf(py, sizeof py, "%s/optim.py", dt_test_tmpdir());
    snprintf(in, sizeof in, "%s/in.json", dt_test_tmpdir());
    snprintf(out, sizeof out, "%s/out.json", dt_test_tmpdir());
    FILE *f = fopen(py, "w");
    ASSERT_TRUE(f != NULL);
    fputs(torch_py, f);
    fclose(f);
    double worst = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_model *m = nn_build(nn_seq("3",
                                      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                                      "\"units\": 2}}",
                                      NULL),
                               7);
        float *dw = dt_model_params(m, NULL), *dg = dt_model_grads(m, NULL), w[NP], g[NP];
        cJSON *j = cJSON_Parse(cases[k][0]);
        dt_optim_cfg cfg;
        dt_err err = {0};
        ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
        cJSON_Delete(j);
        dt_optim *o;
        ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
        cJSON *man = cJSON_CreateObject(), *w0 = cJSON_AddArrayToObject(man, "w");
        cJSON *gs = cJSON_AddArrayToObject(man, "grads");
        cJSON_AddStringToObject(man, "torch", cases[k][1]);
        for (int i = 0; i < NP; i++) {
            w[i] = (float)(0.3 * i - 1.1);
            cJSON_AddItemToArray(w0, cJSON_CreateNumber(w[i]));
        }
        nn_dev_set(m, dw, w, NP);
        for (int t = 0; t < STEPS; t++) {
            cJSON *row = cJSON_CreateArray();
            for (int i = 0; i < NP; i++) {
                g[i] = (float)gval(i, t, 1.0);
                cJSON_AddItemToArray(row, cJSON_CreateNumber(g[i]));
            }
            cJSON_AddItemToArray(gs, row);
            nn_dev_set(m, dg, g, NP);
            ASSERT_OK(dt_optim_step(o, &err), &err);
        }
        dt_model_ops(m)->download(w, dw, sizeof w);
        char *text = cJSON_Print(man);
        f = fopen(in, "w");
        ASSERT_TRUE(f != NULL);
        fputs(text, f);
        fclose(f);
        free(text);
        cJSON_Delete(man);
        dt_test_python_cmd(cmd, sizeof cmd, " %s %s %s", py, in, out);
        ASSERT_EQ(system(cmd), 0);
        f = fopen(out, "r");
        ASSERT_TRUE(f != NULL);
        char buf[4096];
        size_t nr = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[nr] = 0;
        cJSON *res = cJSON_Parse(buf);
        ASSERT_TRUE(cJSON_IsArray(res) && cJSON_GetArraySize(res) == NP);
        double e = 0;
        for (int i = 0; i < NP; i++)
            e = fmax(e, rel_err(w[i], cJSON_GetArrayItem(res, i)->valuedouble));
        printf("%-50.50s vs torch: max rel err %.2e\n", cases[k][1], e);
        if (!(e <= REL_OK))
            DT_FAIL_("%s vs torch.optim.%s: max rel err %.3g", cases[k][0], cases[k][1], e);
        worst = fmax(worst, e);
        cJSON_Delete(res);
        dt_optim_free(o);
        dt_model_free(m);
    }
    printf("torch parity: max rel err %.2e\n", worst);
}
