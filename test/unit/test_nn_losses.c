/* test_nn_losses.c - the Keras losses: value and gradient of the loss kernel against float64
 * PyTorch 1.13 (test/ref/loss_torch_ref.py; torch's own function where it has the loss, Keras's
 * formula written out for LogCosh and the hinges), finite differences through small models,
 * integer labels and the hinges' 0/1 rule through the model, and the parsing of Keras 2 and
 * Keras 3 loss configs with refusals that name the key. */
#include "core/buf.h"
#include "test_nn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY dt_test_python()

typedef struct lcase {
    const char *name; /* the reference's kind */
    dt_nn_loss_p p;
    int n, cols;
} lcase;

/* Predictions and targets that keep every branch of a loss busy but away from its kinks and
 * clips (probabilities in [0.05, 0.95], Huber errors on both sides of delta). */
static void fill(const lcase *c, dt_rng *r, float *pred, float *tgt, int32_t *lab)
{
    int n = c->n, k = c->cols;
    for (int i = 0; i < n; i++) {
        float *p = pred + (size_t)i * k, *t = tgt + (size_t)i * k;
        double sp = 0, st = 0;
        lab[i] = (int32_t)dt_rng_below(r, (uint64_t)k);
        for (int j = 0; j < k; j++) {
            double z = dt_rng_normal(r), u = dt_rng_uniform(r);
            switch (c->p.kind) {
            case DT_NN_LOSS_SPARSE_CE:
            case DT_NN_LOSS_CE:
            case DT_NN_LOSS_KLD:
                /* logits, or a softmax of them below; soft targets as a distribution */
                p[j] = (float)(c->p.from_logits ? 2 * z : exp(z));
                sp += p[j];
                t[j] = (float)(0.05 + u);
                st += t[j];
                break;
            case DT_NN_LOSS_BCE:
                p[j] = (float)(c->p.from_logits ? 2 * z : 0.05 + 0.9 * u);
                t[j] = dt_rng_uniform(r) < 0.5f ? 0.0f : 1.0f;
                break;
            case DT_NN_LOSS_HINGE:
            case DT_NN_LOSS_SQUARED_HINGE:
                p[j] = (float)z;
                t[j] = c->p.hinge_pm1 ? (u < 0.5 ? 0.0f : 1.0f) : (u < 0.5 ? -1.0f : 1.0f);
                break;
            case DT_NN_LOSS_POISSON:
                p[j] = (float)(0.1 + 3 * u);
                t[j] = (float)dt_rng_below(r, 5);
                break;
            default: /* regression */
                p[j] = (float)z;
                t[j] = (float)(dt_rng_normal(r) * 1.5);
                break;
            }
        }
        for (int j = 0; j < k && sp > 0 && !c->p.from_logits; j++)
            p[j] /= (float)sp;
        for (int j = 0; j < k && st > 0; j++)
            t[j] /= (float)st;
    }
    /* one ignored row */
    if (c->p.has_ignore_class)
        lab[1] = c->p.ignore_class;
}

static void need_torch(void)
{
    if (access(PY, X_OK) != 0)
        DT_SKIP("no %s (Debian's python3)", PY);
    if (!dt_test_python_has("torch"))
        DT_SKIP("%s has no torch: apt-get install python3-torch", PY);
}

static cJSON *floats(const float *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

DT_TEST(nn_losses_match_torch)
{
    need_torch();
    const lcase cases[] = {
        {"sparse_ce", {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true}, 6, 4},
        {"sparse_ce", {.kind = DT_NN_LOSS_SPARSE_CE}, 6, 4},
        {"sparse_ce",
         {.kind = DT_NN_LOSS_SPARSE_CE,
          .from_logits = true,
          .has_ignore_class = true,
          .ignore_class = 255},
         6,
         4},
        {"ce", {.kind = DT_NN_LOSS_CE, .from_logits = true}, 6, 4},
        {"ce", {.kind = DT_NN_LOSS_CE, .from_logits = true, .label_smoothing = 0.2f}, 6, 4},
        {"ce", {.kind = DT_NN_LOSS_CE, .label_smoothing = 0.1f}, 6, 4},
        {"bce", {.kind = DT_NN_LOSS_BCE, .from_logits = true}, 6, 3},
        {"bce", {.kind = DT_NN_LOSS_BCE, .from_logits = true, .label_smoothing = 0.1f}, 6, 1},
        {"bce", {.kind = DT_NN_LOSS_BCE, .label_smoothing = 0.3f}, 6, 3},
        {"mse", {.kind = DT_NN_LOSS_MSE}, 6, 2},
        {"mae", {.kind = DT_NN_LOSS_MAE}, 6, 2},
        {"huber", {.kind = DT_NN_LOSS_HUBER, .delta = 1.0f}, 6, 3},
        {"huber", {.kind = DT_NN_LOSS_HUBER, .delta = 0.5f}, 6, 3},
        {"huber", {.kind = DT_NN_LOSS_HUBER, .delta = 2.5f}, 6, 3},
        {"logcosh", {.kind = DT_NN_LOSS_LOGCOSH}, 6, 3},
        {"kld", {.kind = DT_NN_LOSS_KLD}, 6, 4},
        {"hinge", {.kind = DT_NN_LOSS_HINGE, .hinge_pm1 = true}, 6, 2},
        {"hinge", {.kind = DT_NN_LOSS_HINGE}, 6, 2},
        {"squared_hinge", {.kind = DT_NN_LOSS_SQUARED_HINGE, .hinge_pm1 = true}, 6, 2},
        {"squared_hinge", {.kind = DT_NN_LOSS_SQUARED_HINGE}, 6, 2},
        {"cosine", {.kind = DT_NN_LOSS_COSINE}, 6, 5},
        {"poisson", {.kind = DT_NN_LOSS_POISSON}, 6, 3},
    };
    enum { NC = sizeof cases / sizeof cases[0], MAXV = 64 };
    const dt_nn_ops *o = dt_nn_ops_cpu();
    static float pred[NC][MAXV], tgt[NC][MAXV], grad[NC][MAXV];
    static int32_t lab[NC][MAXV];
    double loss[NC];
    dt_rng r;
    dt_rng_seed(&r, 20);
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "cases");
    for (int c = 0; c < NC; c++) {
        const lcase *lc = &cases[c];
        size_t nv = (size_t)lc->n * lc->cols;
        ASSERT_LE(nv, (size_t)MAXV);
        fill(lc, &r, pred[c], tgt[c], lab[c]);
        bool sparse = lc->p.kind == DT_NN_LOSS_SPARSE_CE;
        /* Keras's mean: over the batch, or over the rows not ignored. */
        double count = lc->n;
        for (int i = 0; lc->p.has_ignore_class && i < lc->n; i++)
            count -= lab[c][i] == lc->p.ignore_class;
        double sum; /* the CPU's device memory is the host's */
        o->loss_dev(&lc->p, pred[c], lab[c], sparse ? NULL : tgt[c], NULL, (size_t)lc->n, lc->cols,
                    (float)(1.0 / count), grad[c], &sum);
        loss[c] = sum / count;

        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "kind", lc->name);
        cJSON_AddNumberToObject(j, "n", lc->n);
        cJSON_AddNumberToObject(j, "cols", lc->cols);
        cJSON_AddBoolToObject(j, "from_logits", lc->p.from_logits);
        cJSON_AddNumberToObject(j, "label_smoothing", lc->p.label_smoothing);
        cJSON_AddNumberToObject(j, "delta", lc->p.delta);
        cJSON_AddBoolToObject(j, "hinge_pm1", lc->p.hinge_pm1);
        if (lc->p.has_ignore_class)
            cJSON_AddNumberToObject(j, "ignore_class", lc->p.ignore_class);
        cJSON_AddItemToObject(j, "pred", floats(pred[c], nv));
        if (sparse) {
            cJSON *l = cJSON_AddArrayToObject(j, "labels");
            for (int i = 0; i < lc->n; i++)
                cJSON_AddItemToArray(l, cJSON_CreateNumber(lab[c][i]));
        } else {
            cJSON_AddItemToObject(j, "target", floats(tgt[c], nv));
        }
        cJSON_AddItemToArray(arr, j);
    }
    const char *dir = dt_test_tmpdir();
    char in[1024], out[1024], cmd[4096];
    dt_err err = {0};
    snprintf(in, sizeof in, "%s/in.json", dir);
    snprintf(out, sizeof out, "%s/out.json", dir);
    char *text = cJSON_PrintUnformatted(root);
    ASSERT_OK(dt_file_write_atomic(in, text, strlen(text), &err), &err);
    free(text);
    cJSON_Delete(root);
    dt_test_python_cmd(cmd, sizeof cmd, " %s %s %s", dt_test_src_path("test/ref/loss_torch_ref.py"),
                       in, out);
    int rc = system(cmd);
    ASSERT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0);
    size_t len;
    ASSERT_OK(dt_file_read_all(out, 1u << 24, &text, &len, &err), &err);
    cJSON *ref = cJSON_Parse(text);
    free(text);
    ASSERT_TRUE(ref != NULL);
    double worst_l = 0, worst_g = 0;
    for (int c = 0; c < NC; c++) {
        const lcase *lc = &cases[c];
        cJSON *rc_ = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "cases"), c);
        double rl = cJSON_GetObjectItem(rc_, "loss")->valuedouble;
        cJSON *rg = cJSON_GetObjectItem(rc_, "grad");
        size_t nv = (size_t)lc->n * lc->cols;
        ASSERT_EQ((size_t)cJSON_GetArraySize(rg), nv);
        double gmax = 1e-12, gdiff = 0;
        for (size_t i = 0; i < nv; i++) {
            double g = cJSON_GetArrayItem(rg, (int)i)->valuedouble;
            gmax = fabs(g) > gmax ? fabs(g) : gmax;
            gdiff = fabs(g - grad[c][i]) > gdiff ? fabs(g - grad[c][i]) : gdiff;
        }
        double el = fabs(loss[c] - rl) / (fabs(rl) > 1e-3 ? fabs(rl) : 1e-3), eg = gdiff / gmax;
        printf("  %-14s logits=%d ls=%.2f delta=%.2f pm1=%d ignore=%d  loss %.9f torch %.9f  "
               "rel %.2e  grad rel %.2e\n",
               lc->name, lc->p.from_logits, (double)lc->p.label_smoothing, (double)lc->p.delta,
               lc->p.hinge_pm1, lc->p.has_ignore_class, loss[c], rl, el, eg);
        worst_l = el > worst_l ? el : worst_l;
        worst_g = eg > worst_g ? eg : worst_g;
        if (!(el <= 2e-6 && eg <= 2e-6))
            DT_FAIL_("%s (case %d): loss rel %.3e, grad rel %.3e above 2e-6", lc->name, c, el, eg);
    }
    printf("  max over %d cases: loss rel %.2e, grad rel %.2e (torch %s)\n", NC, worst_l, worst_g,
           cJSON_GetObjectItem(ref, "torch")->valuestring);
    cJSON_Delete(ref);
}

#define DENSE(u, act)                                                                              \
    "{\"class_name\": \"Dense\", \"config\": {\"units\": " #u ", \"activation\": \"" act "\"}}"

/* Finite differences through Dense(6, tanh) -> Dense(4, act) for every loss and option. */
DT_TEST(nn_losses_gradcheck)
{
    struct {
        dt_loss loss;
        const char *act;
    } cases[] = {
        {{.kind = DT_NN_LOSS_CE, .from_logits = true, .label_smoothing = 0.2f}, "linear"},
        {{.kind = DT_NN_LOSS_CE, .label_smoothing = 0.1f}, "softmax"},
        {{.kind = DT_NN_LOSS_BCE, .label_smoothing = 0.2f}, "sigmoid"},
        {{.kind = DT_NN_LOSS_BCE, .from_logits = true, .label_smoothing = 0.1f}, "linear"},
        {{.kind = DT_NN_LOSS_SPARSE_CE,
          .from_logits = true,
          .has_ignore_class = true,
          .ignore_class = 1},
         "linear"},
        {{.kind = DT_NN_LOSS_HUBER, .delta = 0.5f}, "linear"},
        {{.kind = DT_NN_LOSS_HUBER, .delta = 1.0f}, "tanh"},
        {{.kind = DT_NN_LOSS_LOGCOSH}, "linear"},
        {{.kind = DT_NN_LOSS_KLD}, "softmax"},
        {{.kind = DT_NN_LOSS_HINGE}, "linear"},
        {{.kind = DT_NN_LOSS_SQUARED_HINGE}, "tanh"},
        {{.kind = DT_NN_LOSS_COSINE}, "linear"},
        {{.kind = DT_NN_LOSS_POISSON}, "sigmoid"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[256];
        snprintf(out, sizeof out,
                 "{\"class_name\": \"Dense\", \"config\": {\"units\": 4, \"activation\": \"%s\"}}",
                 cases[i].act);
        ASSERT_GT(nn_gradcheck(nn_seq("5", DENSE(6, "tanh"), out, NULL), cases[i].loss, 3, 1e-2,
                               3e-4, 4e-3),
                  0);
    }
}

/* Loss of a model on a batch in inference mode. */
static double eval_loss(dt_model *m, const dt_loss *l, const dt_model_batch *b)
{
    dt_err err = {0};
    dt_step_stats s;
    ASSERT_OK(dt_model_evaluate(m, l, b, &s, &err), &err);
    return s.loss;
}

DT_TEST(nn_losses_integer_labels_and_hinge_targets)
{
    /* A 1-unit sigmoid classifier: integer 0/1 labels give the loss and accuracy of the same
     * labels as float targets (Keras casts y_true), and binary accuracy. */
    dt_model *m = nn_build(nn_seq("3", DENSE(4, "tanh"), DENSE(1, "sigmoid"), NULL), 5);
    float x[8 * 3], y[8], p[8];
    int32_t lab[8];
    dt_rng r;
    dt_rng_seed(&r, 4);
    for (int i = 0; i < 24; i++)
        x[i] = (float)dt_rng_normal(&r);
    for (int i = 0; i < 8; i++)
        y[i] = (float)(lab[i] = (int32_t)(i % 3 == 0));
    dt_err err = {0};
    dt_loss bce;
    ASSERT_OK(dt_loss_from_name("binary_crossentropy", false, &bce, &err), &err);
    dt_model_batch bl = {.x = x, .labels = lab, .n = 8}, bt = {.x = x, .targets = y, .n = 8};
    dt_step_stats s1, s2;
    ASSERT_OK(dt_model_evaluate(m, &bce, &bl, &s1, &err), &err);
    ASSERT_OK(dt_model_evaluate(m, &bce, &bt, &s2, &err), &err);
    ASSERT_NEAR(s1.loss, s2.loss, 0);
    ASSERT_NEAR(s1.accuracy, s2.accuracy, 0);
    ASSERT_OK(dt_model_predict(m, x, 8, p, &err), &err);
    double want = 0, hits = 0;
    for (int i = 0; i < 8; i++) {
        want -= y[i] ? log(p[i]) : log(1 - p[i]);
        hits += (p[i] > 0.5f) == (y[i] > 0.5f);
    }
    ASSERT_NEAR(s1.loss, want / 8, 1e-6);
    ASSERT_NEAR(s1.accuracy, hits / 8, 0);
    ASSERT_OK(dt_model_train_step(m, &bce, &bl, 8, &s1, &err), &err);
    /* Integer labels with several outputs need sparse CE or one-hot targets. */
    dt_model *m3 = nn_build(nn_seq("3", DENSE(3, "softmax"), NULL), 5);
    dt_loss ce;
    ASSERT_OK(dt_loss_from_name("categorical_crossentropy", false, &ce, &err), &err);
    ASSERT_STATUS(dt_model_train_step(m3, &ce, &bl, 8, NULL, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "not integer labels");
    dt_model_free(m3);

    /* Hinge: 0/1 targets become -1/1 only when the whole batch is 0/1, as Keras checks. */
    dt_model *h = nn_build(nn_seq("3", DENSE(1, "tanh"), NULL), 6);
    dt_loss hinge;
    ASSERT_OK(dt_loss_from_name("hinge", false, &hinge, &err), &err);
    ASSERT_OK(dt_model_predict(h, x, 8, p, &err), &err);
    double pm1 = 0, raw = 0;
    for (int i = 0; i < 8; i++) {
        pm1 += fmax(1 - (2 * y[i] - 1) * p[i], 0) / 8;
        raw += fmax(1 - (y[i] == 0 ? 0.5 : 1) * p[i], 0) / 8;
    }
    ASSERT_NEAR(eval_loss(h, &hinge, &bt), pm1, 1e-6);
    float y2[8];
    for (int i = 0; i < 8; i++)
        y2[i] = y[i] == 0 ? 0.5f : 1.0f; /* not all 0/1: used as they are */
    dt_model_batch b2 = {.x = x, .targets = y2, .n = 8};
    ASSERT_NEAR(eval_loss(h, &hinge, &b2), raw, 1e-6);
    dt_model_free(h);

    /* ignore_class: the mean is over the rows left; a batch of ignored rows has loss 0. */
    dt_model *c = nn_build(nn_seq("3", DENSE(3, "linear"), NULL), 7);
    dt_loss sce = {.kind = DT_NN_LOSS_SPARSE_CE,
                   .from_logits = true,
                   .has_ignore_class = true,
                   .ignore_class = -1};
    int32_t l3[8] = {0, -1, 2, 1, -1, 0, 2, 1};
    int32_t keep[6] = {0, 2, 1, 0, 2, 1};
    float xk[6 * 3];
    for (int i = 0, k = 0; i < 8; i++)
        if (l3[i] >= 0)
            memcpy(xk + 3 * k++, x + 3 * i, 3 * sizeof(float));
    dt_model_batch b3 = {.x = x, .labels = l3, .n = 8}, bk = {.x = xk, .labels = keep, .n = 6};
    ASSERT_NEAR(eval_loss(c, &sce, &b3), eval_loss(c, &sce, &bk), 1e-6);
    int32_t none[2] = {-1, -1};
    dt_model_batch bn = {.x = x, .labels = none, .n = 2};
    ASSERT_NEAR(eval_loss(c, &sce, &bn), 0, 0);
    dt_model_free(c);
    dt_model_free(m);
}

static dt_status parse(const char *json, dt_loss *out, dt_err *err)
{
    cJSON *j = cJSON_Parse(json);
    ASSERT_TRUE(j != NULL);
    dt_status st = dt_loss_from_json(j, out, err);
    cJSON_Delete(j);
    return st;
}

DT_TEST(nn_losses_parse_keras_configs)
{
    dt_loss l;
    dt_err err = {0};
    /* Keras 3's keras.losses.serialize(BinaryCrossentropy(label_smoothing=0.1)) */
    ASSERT_OK(parse("{\"module\": \"keras.losses\", \"class_name\": \"BinaryCrossentropy\", "
                    "\"config\": {\"name\": \"binary_crossentropy\", \"reduction\": "
                    "\"sum_over_batch_size\", \"dtype\": null, \"from_logits\": false, "
                    "\"label_smoothing\": 0.1, \"axis\": -1}, \"registered_name\": null}",
                    &l, &err),
              &err);
    ASSERT_EQ(l.kind, DT_NN_LOSS_BCE);
    ASSERT_NEAR(l.label_smoothing, 0.1, 1e-7);
    ASSERT_FALSE(l.from_logits);
    /* Keras 2's, with "auto" */
    ASSERT_OK(parse("{\"class_name\": \"CategoricalCrossentropy\", \"config\": {\"reduction\": "
                    "\"auto\", \"name\": \"categorical_crossentropy\", \"from_logits\": true, "
                    "\"label_smoothing\": 0.2, \"axis\": -1}}",
                    &l, &err),
              &err);
    ASSERT_EQ(l.kind, DT_NN_LOSS_CE);
    ASSERT_TRUE(l.from_logits);
    ASSERT_OK(parse("{\"class_name\": \"SparseCategoricalCrossentropy\", \"config\": "
                    "{\"name\": \"sparse_categorical_crossentropy\", \"reduction\": "
                    "\"sum_over_batch_size\", \"from_logits\": true, \"ignore_class\": 255, "
                    "\"axis\": -1}}",
                    &l, &err),
              &err);
    ASSERT_TRUE(l.has_ignore_class);
    ASSERT_EQ(l.ignore_class, 255);
    ASSERT_OK(parse("{\"class_name\": \"SparseCategoricalCrossentropy\", \"config\": "
                    "{\"ignore_class\": null}}",
                    &l, &err),
              &err);
    ASSERT_FALSE(l.has_ignore_class);
    ASSERT_OK(parse("{\"class_name\": \"Huber\", \"config\": {\"name\": \"huber_loss\", "
                    "\"reduction\": \"sum_over_batch_size\", \"delta\": 2.0}}",
                    &l, &err),
              &err);
    ASSERT_EQ(l.kind, DT_NN_LOSS_HUBER);
    ASSERT_NEAR(l.delta, 2.0, 0);
    ASSERT_OK(parse("{\"class_name\": \"CosineSimilarity\", \"config\": {\"axis\": -1, \"dtype\": "
                    "{\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": "
                    "{\"name\": \"float32\"}}}}",
                    &l, &err),
              &err);
    ASSERT_EQ(l.kind, DT_NN_LOSS_COSINE);
    /* an early Keras 3 config that keeps "fn"; a serialized function */
    ASSERT_OK(parse("{\"class_name\": \"MeanSquaredError\", \"config\": {\"name\": "
                    "\"mean_squared_error\", \"reduction\": \"sum_over_batch_size\", \"fn\": "
                    "\"mean_squared_error\"}}",
                    &l, &err),
              &err);
    ASSERT_EQ(l.kind, DT_NN_LOSS_MSE);
    ASSERT_OK(parse("{\"module\": \"keras.losses\", \"class_name\": \"function\", \"config\": "
                    "\"log_cosh\", \"registered_name\": \"log_cosh\"}",
                    &l, &err),
              &err);
    ASSERT_EQ(l.kind, DT_NN_LOSS_LOGCOSH);
    /* names: classes, functions, Keras 2 and 3 aliases */
    static const struct {
        const char *name;
        dt_nn_loss_kind kind;
    } names[] = {
        {"binary_crossentropy", DT_NN_LOSS_BCE},
        {"bce", DT_NN_LOSS_BCE},
        {"mse", DT_NN_LOSS_MSE},
        {"MAE", DT_NN_LOSS_MAE},
        {"huber", DT_NN_LOSS_HUBER},
        {"Huber", DT_NN_LOSS_HUBER},
        {"logcosh", DT_NN_LOSS_LOGCOSH},
        {"log_cosh", DT_NN_LOSS_LOGCOSH},
        {"kld", DT_NN_LOSS_KLD},
        {"KLD", DT_NN_LOSS_KLD},
        {"kullback_leibler_divergence", DT_NN_LOSS_KLD},
        {"KLDivergence", DT_NN_LOSS_KLD},
        {"hinge", DT_NN_LOSS_HINGE},
        {"squared_hinge", DT_NN_LOSS_SQUARED_HINGE},
        {"SquaredHinge", DT_NN_LOSS_SQUARED_HINGE},
        {"cosine_similarity", DT_NN_LOSS_COSINE},
        {"poisson", DT_NN_LOSS_POISSON},
        {"Poisson", DT_NN_LOSS_POISSON},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ASSERT_OK(dt_loss_from_name(names[i].name, false, &l, &err), &err);
        ASSERT_EQ(l.kind, names[i].kind);
        ASSERT_NEAR(l.delta, 1.0, 0);
    }
    /* refusals name the key */
    static const struct {
        const char *json;
        dt_status st;
        const char *needle;
    } bad[] = {
        {"{\"class_name\": \"MeanSquaredError\", \"config\": {\"reduction\": \"sum\"}}", DT_ENOTSUP,
         ".config.reduction: \"sum\""},
        {"{\"class_name\": \"MeanSquaredError\", \"config\": {\"reduction\": null}}", DT_ENOTSUP,
         ".config.reduction"},
        {"{\"class_name\": \"BinaryCrossentropy\", \"config\": {\"axis\": 1}}", DT_ENOTSUP,
         ".config.axis: 1"},
        {"{\"class_name\": \"BinaryCrossentropy\", \"config\": {\"dtype\": \"float16\"}}",
         DT_ENOTSUP, ".config.dtype"},
        {"{\"class_name\": \"BinaryCrossentropy\", \"config\": {\"label_smoothing\": 1.5}}",
         DT_EINVAL, ".config.label_smoothing"},
        {"{\"class_name\": \"Huber\", \"config\": {\"delta\": 0}}", DT_EINVAL, ".config.delta"},
        {"{\"class_name\": \"Huber\", \"config\": {\"from_logits\": true}}", DT_EINVAL,
         ".config.from_logits: not an option of Keras's Huber"},
        {"{\"class_name\": \"MeanSquaredError\", \"config\": {\"sample_weight\": [1, 2]}}",
         DT_ENOTSUP, ".config.sample_weight"},
        {"{\"class_name\": \"SparseCategoricalCrossentropy\", \"config\": {\"ignore_class\": "
         "1.5}}",
         DT_EINVAL, ".config.ignore_class"},
        {"{\"class_name\": \"MeanSquaredError\", \"config\": {\"fn\": \"huber\"}}", DT_EINVAL,
         ".config.fn"},
        {"{\"class_name\": \"CategoricalFocalCrossentropy\", \"config\": {}}", DT_ENOTSUP,
         ".class_name: \"CategoricalFocalCrossentropy\""},
        {"{\"class_name\": \"Hinge\", \"confg\": {}}", DT_EINVAL, ".confg: unknown key"},
        {"\"ctc\"", DT_ENOTSUP, "loss \"ctc\""},
        {"7", DT_EINVAL, ": must be a name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(parse(bad[i].json, &l, &err), bad[i].st);
        ASSERT_CONTAINS(err.msg, bad[i].needle);
    }
}
