/* test_train_metrics.c - the compiled metrics: Keras's docstring examples, float64 formulas on
 * random batches, the names Keras logs, what is refused, and jobs on 1 and 2 replicas (threads
 * over a shared-memory comm, DATA sharding, no shuffle) whose epoch metrics agree and whose
 * validation metrics equal the formulas over the final model's predictions. */
#include "test_train_util.h"

#include "core/buf.h"
#include "data/data.h"
#include "nn/model.h"
#include "train/train_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>

static void parse_metric(const char *json, dt_jobspec_metric *m)
{
    cJSON *j = cJSON_Parse(json);
    ASSERT_TRUE(j != NULL);
    dt_err err = {0};
    ASSERT_OK(dt_jobspec_metric_parse(j, "$.m", m, &err), &err);
    cJSON_Delete(j);
}

/* One metric over one batch: its value after update_state. */
static double value_of(const char *json, const float *pred, int cols, const float *targets,
                       const int32_t *labels, int n)
{
    dt_jobspec_metric m;
    parse_metric(json, &m);
    double st[2] = {0};
    ASSERT_EQ(dt__train_metric_state_size(&m), (size_t)2);
    dt__train_metric_update(&m, pred, cols, targets, labels, n, st);
    return dt__train_metric_value(&m, st);
}

/* value_of for metrics of any state size (AUC). */
static double value_of2(const char *json, const float *pred, int cols, const float *targets,
                        const int32_t *labels, int n)
{
    dt_jobspec_metric m;
    parse_metric(json, &m);
    double *st = calloc(dt__train_metric_state_size(&m), sizeof *st);
    dt__train_metric_update(&m, pred, cols, targets, labels, n, st);
    double v = dt__train_metric_value(&m, st);
    free(st);
    return v;
}

/* The examples of the docstrings in keras/src/metrics, with their printed results. */
DT_TEST(train_metrics_keras_examples)
{
    { /* BinaryAccuracy: [[1],[1],[0],[0]] vs [[0.98],[1],[0],[0.6]] -> 0.75 */
        float y[] = {1, 1, 0, 0}, p[] = {0.98f, 1, 0, 0.6f};
        ASSERT_NEAR(value_of("\"binary_accuracy\"", p, 1, y, NULL, 4), 0.75, 1e-7);
        /* threshold 0.7 makes 0.6 a negative: 4 of 4 */
        ASSERT_NEAR(value_of("{\"class_name\": \"BinaryAccuracy\", \"config\": {\"name\": "
                             "\"binary_accuracy\", \"dtype\": \"float32\", \"threshold\": 0.7}}",
                             p, 1, y, NULL, 4),
                    1.0, 1e-7);
    }
    { /* CategoricalAccuracy: [[0,0,1],[0,1,0]] vs [[0.1,0.9,0.8],[0.05,0.95,0]] -> 0.5 */
        float y[] = {0, 0, 1, 0, 1, 0}, p[] = {0.1f, 0.9f, 0.8f, 0.05f, 0.95f, 0};
        ASSERT_NEAR(value_of("\"categorical_accuracy\"", p, 3, y, NULL, 2), 0.5, 1e-7);
        /* TopKCategoricalAccuracy(k=1) on the same -> 0.5; the default k=5 counts both */
        ASSERT_NEAR(
            value_of("{\"class_name\": \"TopKCategoricalAccuracy\", \"config\": {\"k\": 1}}", p, 3,
                     y, NULL, 2),
            0.5, 1e-7);
        ASSERT_NEAR(value_of("\"top_k_categorical_accuracy\"", p, 3, y, NULL, 2), 1.0, 1e-7);
    }
    { /* SparseCategoricalAccuracy: [[2],[1]] vs [[0.1,0.6,0.3],[0.05,0.95,0]] -> 0.5 */
        int32_t l[] = {2, 1};
        float p[] = {0.1f, 0.6f, 0.3f, 0.05f, 0.95f, 0};
        ASSERT_NEAR(value_of("\"sparse_categorical_accuracy\"", p, 3, NULL, l, 2), 0.5, 1e-7);
        /* SparseTopKCategoricalAccuracy(k=1): [2, 1] vs [[0.1,0.9,0.8],[0.05,0.95,0]] -> 0.5 */
        float q[] = {0.1f, 0.9f, 0.8f, 0.05f, 0.95f, 0};
        ASSERT_NEAR(value_of("{\"class_name\": \"SparseTopKCategoricalAccuracy\", \"config\": "
                             "{\"name\": \"sparse_top_k_categorical_accuracy\", \"k\": 1}}",
                             q, 3, NULL, l, 2),
                    0.5, 1e-7);
    }
    { /* MeanAbsoluteError, MeanSquaredError: [[0,1],[0,0]] vs [[1,1],[0,0]] -> 0.25;
         RootMeanSquaredError -> 0.5 */
        float y[] = {0, 1, 0, 0}, p[] = {1, 1, 0, 0};
        ASSERT_NEAR(value_of("\"mae\"", p, 2, y, NULL, 2), 0.25, 1e-7);
        ASSERT_NEAR(value_of("\"MeanSquaredError\"", p, 2, y, NULL, 2), 0.25, 1e-7);
        ASSERT_NEAR(value_of("\"RootMeanSquaredError\"", p, 2, y, NULL, 2), 0.5, 1e-7);
    }
    { /* Precision, Recall: [0,1,1,1] vs [1,0,1,1] -> 0.6666667 each */
        float y[] = {0, 1, 1, 1}, p[] = {1, 0, 1, 1};
        ASSERT_NEAR(value_of("\"precision\"", p, 1, y, NULL, 4), 2.0 / 3, 1e-7);
        ASSERT_NEAR(value_of("\"Recall\"", p, 1, y, NULL, 4), 2.0 / 3, 1e-7);
        /* the same as integer labels */
        int32_t l[] = {0, 1, 1, 1};
        ASSERT_NEAR(value_of("\"precision\"", p, 1, NULL, l, 4), 2.0 / 3, 1e-7);
        /* nothing predicted positive: divide_no_nan gives 0 */
        float z[] = {0, 0, 0, 0};
        ASSERT_NEAR(value_of("\"precision\"", z, 1, y, NULL, 4), 0, 0);
    }
}

/* Random batches against the float64 formulas written out here, state split over two "replicas"
 * (the sums of two halves) equal to the whole batch's. */
DT_TEST(train_metrics_formulas)
{
    enum { N = 37, C = 4 };
    dt_rng r;
    dt_rng_seed(&r, 11);
    float p[N * C], y[N * C], oh[N * C];
    int32_t l[N];
    for (int i = 0; i < N; i++) {
        l[i] = (int)dt_rng_below(&r, C);
        for (int j = 0; j < C; j++) {
            p[i * C + j] = (float)dt_rng_uniform(&r);
            y[i * C + j] = (float)(dt_rng_normal(&r) * 0.5);
            oh[i * C + j] = (float)(l[i] == j);
        }
    }
    p[5 * C + 1] = p[5 * C + 2] = 0.99f; /* a tie at the top */
    l[5] = 2;
    oh[5 * C + 0] = oh[5 * C + 1] = oh[5 * C + 3] = 0;
    oh[5 * C + 2] = 1;
    double mae = 0, mse = 0, bacc = 0, cacc = 0, top2 = 0, tp = 0, fp = 0, fn = 0;
    for (int i = 0; i < N; i++) {
        double a = 0, s = 0, b = 0;
        int am = 0, above = 0;
        for (int j = 0; j < C; j++) {
            double d = (double)p[i * C + j] - y[i * C + j];
            a += fabs(d);
            s += d * d;
            b += (p[i * C + j] > 0.3f) == (oh[i * C + j] != 0);
            if (p[i * C + j] > p[i * C + am])
                am = j;
            above += p[i * C + j] > p[i * C + l[i]];
        }
        mae += a / C;
        mse += s / C;
        bacc += b / C;
        cacc += am == l[i];
        top2 += above < 2;
        bool pos = p[i * C + 2] > 0.5f, yes = l[i] == 2;
        tp += pos && yes;
        fp += pos && !yes;
        fn += !pos && yes;
    }
    ASSERT_NEAR(value_of("\"mean_absolute_error\"", p, C, y, NULL, N), mae / N, 1e-12);
    ASSERT_NEAR(value_of("\"mse\"", p, C, y, NULL, N), mse / N, 1e-12);
    ASSERT_NEAR(value_of("\"root_mean_squared_error\"", p, C, y, NULL, N), sqrt(mse / N), 1e-12);
    ASSERT_NEAR(value_of("{\"class_name\": \"BinaryAccuracy\", \"config\": {\"threshold\": 0.3}}",
                         p, C, oh, NULL, N),
                bacc / N, 1e-12);
    /* integer labels against several outputs read as their one-hot rows */
    ASSERT_NEAR(value_of("{\"class_name\": \"BinaryAccuracy\", \"config\": {\"threshold\": 0.3}}",
                         p, C, NULL, l, N),
                bacc / N, 1e-12);
    ASSERT_NEAR(value_of("\"sparse_categorical_accuracy\"", p, C, NULL, l, N), cacc / N, 1e-12);
    ASSERT_NEAR(value_of("\"categorical_accuracy\"", p, C, oh, NULL, N), cacc / N, 1e-12);
    const char *top = "{\"class_name\": \"SparseTopKCategoricalAccuracy\", \"config\": {\"k\": 2}}";
    ASSERT_NEAR(value_of(top, p, C, NULL, l, N), top2 / N, 1e-12);
    ASSERT_NEAR(value_of("{\"class_name\": \"TopKCategoricalAccuracy\", \"config\": {\"k\": 2}}", p,
                         C, oh, NULL, N),
                top2 / N, 1e-12);
    const char *prec = "{\"class_name\": \"Precision\", \"config\": {\"name\": \"precision\", "
                       "\"dtype\": \"float32\", \"thresholds\": null, \"top_k\": null, "
                       "\"class_id\": 2}}";
    ASSERT_NEAR(value_of(prec, p, C, oh, NULL, N), tp / (tp + fp), 1e-12);
    ASSERT_NEAR(value_of("{\"class_name\": \"Recall\", \"config\": {\"class_id\": 2, "
                         "\"thresholds\": [0.5]}}",
                         p, C, NULL, l, N),
                tp / (tp + fn), 1e-12);

    /* The sums of two shards are the whole batch's sums: what the all-reduce relies on. */
    const char *all[] = {"\"mae\"", "\"RootMeanSquaredError\"", top, prec};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        dt_jobspec_metric m;
        parse_metric(all[k], &m);
        double whole[2] = {0}, a[2] = {0}, b[2] = {0};
        dt__train_metric_update(&m, p, C, y, l, N, whole);
        dt__train_metric_update(&m, p, C, y, l, 20, a);
        dt__train_metric_update(&m, p + 20 * C, C, y + 20 * C, l + 20, N - 20, b);
        double sum[2] = {a[0] + b[0], a[1] + b[1]};
        ASSERT_NEAR(dt__train_metric_value(&m, sum), dt__train_metric_value(&m, whole), 1e-12);
    }
}

/* AUC's confusion counts by the plain definition (p > threshold, Keras's thresholds), then
 * Keras's result formulas, all in float64. */
static double auc_reference(const float *p, const float *y, int n, int T, bool pr, int sum)
{
    double *tp = calloc((size_t)T, sizeof *tp), *fp = calloc((size_t)T, sizeof *fp);
    double P = 0, N = 0;
    for (int i = 0; i < n; i++) {
        P += y[i];
        N += 1 - y[i];
        for (int t = 0; t < T; t++) {
            double th = t == 0 ? -1e-7 : t == T - 1 ? 1 + 1e-7 : (double)t / (T - 1);
            if (p[i] > th) {
                tp[t] += y[i];
                fp[t] += 1 - y[i];
            }
        }
    }
    double area = 0;
    for (int t = 0; t + 1 < T; t++) {
        if (pr && sum == 0) { /* interpolate_pr_auc */
            double dtp = tp[t] - tp[t + 1], pa = tp[t] + fp[t], pb = tp[t + 1] + fp[t + 1];
            double slope = pa - pb > 0 ? dtp / (pa - pb) : 0;
            double icpt = tp[t + 1] - slope * pb;
            double ratio = pa > 0 && pb > 0 ? pa / pb : 1;
            area += P > 0 ? slope * (dtp + icpt * log(ratio)) / P : 0;
            continue;
        }
        double ya, yb, xa, xb;
        if (pr) {
            xa = tp[t] / P, xb = tp[t + 1] / P;
            ya = tp[t] + fp[t] > 0 ? tp[t] / (tp[t] + fp[t]) : 0;
            yb = tp[t + 1] + fp[t + 1] > 0 ? tp[t + 1] / (tp[t + 1] + fp[t + 1]) : 0;
        } else {
            xa = fp[t] / N, xb = fp[t + 1] / N, ya = tp[t] / P, yb = tp[t + 1] / P;
        }
        double h = sum == 0 ? (ya + yb) / 2 : sum == 1 ? fmin(ya, yb) : fmax(ya, yb);
        area += (xa - xb) * h;
    }
    free(tp);
    free(fp);
    return area;
}

DT_TEST(train_metrics_auc)
{
    { /* keras.metrics.AUC(num_thresholds=3): [0,0,1,1] vs [0,0.5,0.3,0.9] -> 0.75 */
        float y[] = {0, 0, 1, 1}, p[] = {0, 0.5f, 0.3f, 0.9f};
        ASSERT_NEAR(value_of2("{\"class_name\": \"AUC\", \"config\": {\"num_thresholds\": 3}}", p,
                              1, y, NULL, 4),
                    0.75, 1e-12);
    }
    enum { N = 301 };
    dt_rng r;
    dt_rng_seed(&r, 5);
    float p[N], y[N], z[N];
    int32_t l[N];
    for (int i = 0; i < N; i++) {
        l[i] = dt_rng_uniform(&r) < 0.4f;
        y[i] = (float)l[i];
        /* informative but overlapping scores, some at exactly 0 and 1 */
        float s = (float)(0.5 + 0.2 * dt_rng_normal(&r) + (l[i] ? 0.15 : -0.1));
        p[i] = s < 0 ? 0 : s > 1 ? 1 : s;
        z[i] = logf(p[i] / (1 - p[i])); /* the logit of p (inf at the ends) */
    }
    static const char *const curves[] = {"ROC", "PR"};
    static const char *const sums[] = {"interpolation", "minoring", "majoring"};
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 3; k++)
            for (int T = 3; T <= 200; T += 197) {
                char js[256];
                snprintf(js, sizeof js,
                         "{\"class_name\": \"AUC\", \"config\": {\"num_thresholds\": %d, "
                         "\"curve\": \"%s\", \"summation_method\": \"%s\"}}",
                         T, curves[c], sums[k]);
                double want = auc_reference(p, y, N, T, c == 1, k);
                double got = value_of2(js, p, 1, NULL, l, N);
                printf("AUC %s %s T=%d: %.9f (float64 reference %.9f)\n", curves[c], sums[k], T,
                       got, want);
                ASSERT_NEAR(got, want, 1e-9);
            }
    /* from_logits: the sigmoid of the logits gives back p's buckets */
    ASSERT_NEAR(value_of2("{\"class_name\": \"AUC\", \"config\": {\"from_logits\": true}}", z, 1, y,
                          NULL, N),
                auc_reference(p, y, N, 200, false, 0), 1e-6);
    /* split over two replicas: the buckets add */
    dt_jobspec_metric m;
    parse_metric("{\"class_name\": \"AUC\", \"config\": {\"curve\": \"PR\"}}", &m);
    double *whole = calloc(400, sizeof(double)), *a = calloc(400, sizeof(double)),
           *b = calloc(400, sizeof(double));
    ASSERT_EQ(dt__train_metric_state_size(&m), (size_t)400);
    dt__train_metric_update(&m, p, 1, y, NULL, N, whole);
    dt__train_metric_update(&m, p, 1, y, NULL, 100, a);
    dt__train_metric_update(&m, p + 100, 1, y + 100, NULL, N - 100, b);
    for (int i = 0; i < 400; i++)
        a[i] += b[i];
    ASSERT_NEAR(dt__train_metric_value(&m, a), dt__train_metric_value(&m, whole), 1e-12);
    /* perfect separation: 1 under both curves */
    float ps[] = {0.1f, 0.2f, 0.8f, 0.9f}, ys[] = {0, 0, 1, 1};
    ASSERT_NEAR(value_of2("\"auc\"", ps, 1, ys, NULL, 4), 1.0, 1e-12);
    free(whole);
    free(a);
    free(b);
}

/* MeanIoU: Keras's docstring examples and a float64 confusion matrix. */
DT_TEST(train_metrics_mean_iou)
{
    { /* MeanIoU(num_classes=2): [0,0,1,1] vs [0,1,0,1] -> 0.33333334 */
        float y[] = {0, 0, 1, 1}, p[] = {0, 1, 0, 1};
        ASSERT_NEAR(value_of2("{\"class_name\": \"MeanIoU\", \"config\": {\"num_classes\": 2}}", p,
                              1, y, NULL, 4),
                    1.0 / 3, 1e-12);
    }
    { /* OneHotMeanIoU(num_classes=3) on its docstring's rows, unweighted: cm rows [0,0,2],
         [1,0,0], [0,0,1]: iou 0, 0, 1/3 -> 1/9 */
        float y[] = {0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0};
        float p[] = {0.2f, 0.3f, 0.5f, 0.1f, 0.2f, 0.7f, 0.5f, 0.3f, 0.1f, 0.1f, 0.4f, 0.5f};
        ASSERT_NEAR(value_of2("{\"class_name\": \"OneHotMeanIoU\", \"config\": "
                              "{\"num_classes\": 3}}",
                              p, 3, y, NULL, 4),
                    1.0 / 9, 1e-12);
    }
    enum { N = 200, C = 4 };
    dt_rng r;
    dt_rng_seed(&r, 9);
    float p[N * C];
    int32_t l[N];
    double cm[C][C] = {{0}};
    for (int i = 0; i < N; i++) {
        l[i] = (int)dt_rng_below(&r, C);
        int am = 0;
        for (int j = 0; j < C; j++) {
            p[i * C + j] = (float)dt_rng_uniform(&r) + (j == l[i] ? 0.3f : 0);
            am = p[i * C + j] > p[i * C + am] ? j : am;
        }
        if (l[i] != 1) /* ignore_class 1 */
            cm[l[i]][am] += 1;
    }
    double sum = 0;
    int valid = 0;
    for (int c = 0; c < C; c++) {
        double row = 0, col = 0;
        for (int k = 0; k < C; k++)
            row += cm[c][k], col += cm[k][c];
        if (row + col - cm[c][c] != 0)
            sum += cm[c][c] / (row + col - cm[c][c]), valid++;
    }
    ASSERT_NEAR(value_of2("{\"class_name\": \"MeanIoU\", \"config\": {\"num_classes\": 4, "
                          "\"ignore_class\": 1, \"sparse_y_pred\": false}}",
                          p, C, NULL, l, N),
                sum / valid, 1e-12);
}

/* Names as Keras logs them: a string as given, an object under config.name or the class's
 * default name; val_ in front for validation. */
DT_TEST(train_metrics_names)
{
    static const struct {
        const char *json, *name;
    } cases[] = {
        {"\"mae\"", "mae"},
        {"\"mean_absolute_error\"", "mean_absolute_error"},
        {"\"MeanAbsoluteError\"", "MeanAbsoluteError"},
        {"{\"class_name\": \"MeanAbsoluteError\", \"config\": {\"name\": \"mean_absolute_error\", "
         "\"dtype\": \"float32\"}}",
         "mean_absolute_error"},
        {"{\"module\": \"keras.metrics\", \"class_name\": \"RootMeanSquaredError\", \"config\": "
         "{\"name\": \"rmse\", \"dtype\": \"float32\"}, \"registered_name\": null}",
         "rmse"},
        {"{\"class_name\": \"Precision\"}", "precision"},
        {"{\"class_name\": \"SparseTopKCategoricalAccuracy\", \"config\": {}}",
         "sparse_top_k_categorical_accuracy"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_jobspec_metric m;
        parse_metric(cases[i].json, &m);
        ASSERT_STREQ(m.name, cases[i].name);
    }
    dt_jobspec_metric m;
    parse_metric("{\"class_name\": \"SparseTopKCategoricalAccuracy\"}", &m);
    double st[2] = {3, 4};
    dt_train_metric out[1];
    dt_jobspec spec = {.nmetrics = 1};
    spec.metrics[0] = m;
    dt__train_metrics_values(&spec, st, true, out);
    ASSERT_STREQ(out[0].name, "val_sparse_top_k_categorical_accuracy");
    ASSERT_NEAR(out[0].value, 0.75, 0);
}

/* Unsupported metrics and keys are refused naming them. */
DT_TEST(train_metrics_refused)
{
    static const struct {
        const char *json;
        dt_status st;
        const char *needle;
    } bad[] = {
        {"\"f1_score\"", DT_ENOTSUP, "$.m: \"f1_score\" is not supported"},
        {"{\"class_name\": \"AUC\", \"config\": {\"multi_label\": true}}", DT_ENOTSUP,
         "$.m.config.multi_label"},
        {"{\"class_name\": \"AUC\", \"config\": {\"curve\": \"PRGAIN\"}}", DT_ENOTSUP,
         "$.m.config.curve"},
        {"{\"class_name\": \"AUC\", \"config\": {\"num_thresholds\": 1}}", DT_EINVAL,
         "$.m.config.num_thresholds"},
        {"{\"class_name\": \"AUC\", \"config\": {\"thresholds\": [0.5]}}", DT_ENOTSUP,
         "$.m.config.thresholds"},
        {"{\"class_name\": \"MeanIoU\", \"config\": {}}", DT_EINVAL,
         "$.m.config.num_classes: missing"},
        {"\"MeanIoU\"", DT_EINVAL, "$.m: MeanIoU needs num_classes"},
        {"{\"class_name\": \"MeanIoU\", \"config\": {\"num_classes\": 3, \"axis\": 1}}", DT_ENOTSUP,
         "$.m.config.axis"},
        {"{\"class_name\": \"F1Score\"}", DT_ENOTSUP, "$.m.class_name: \"F1Score\""},
        {"{\"class_name\": \"Precision\", \"config\": {\"top_k\": 2}}", DT_ENOTSUP,
         "$.m.config.top_k"},
        {"{\"class_name\": \"Precision\", \"config\": {\"thresholds\": [0.3, 0.6]}}", DT_ENOTSUP,
         "$.m.config.thresholds: only one threshold"},
        {"{\"class_name\": \"Recall\", \"config\": {\"class_id\": -1}}", DT_EINVAL,
         "$.m.config.class_id"},
        {"{\"class_name\": \"BinaryAccuracy\", \"config\": {\"k\": 3}}", DT_ENOTSUP,
         "$.m.config.k: not supported"},
        {"{\"class_name\": \"TopKCategoricalAccuracy\", \"config\": {\"k\": 0}}", DT_EINVAL,
         "$.m.config.k"},
        {"{\"class_name\": \"MeanAbsoluteError\", \"config\": {\"dtype\": \"float16\"}}",
         DT_ENOTSUP, "$.m.config.dtype"},
        {"{\"class_name\": \"MeanAbsoluteError\", \"cfg\": {}}", DT_EINVAL, "$.m.cfg: unknown key"},
        {"3", DT_EINVAL, "$.m: must be a name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Parse(bad[i].json);
        ASSERT_TRUE(j != NULL);
        dt_jobspec_metric m;
        dt_err err = {0};
        ASSERT_STATUS(dt_jobspec_metric_parse(j, "$.m", &m, &err), bad[i].st);
        ASSERT_CONTAINS(err.msg, bad[i].needle);
        cJSON_Delete(j);
    }
}

/* ------------------------------------------------------------------------------- jobs -- */

#define N_TRAIN 120
#define N_VAL   40

/* A CSV of 4 features; kind 0: a 0/1 label (which side of a plane), 1: two float targets,
 * 2: a class in 0..2 (the largest of three linear maps). */
static void write_csv(const char *name, int n, int kind, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    dt_buf b;
    dt_buf_init(&b, 1u << 20);
    const char *head = kind == 1 ? "a,b,c,d,y1,y2\n" : "a,b,c,d,label\n";
    dt_buf_append(&b, head, strlen(head), NULL);
    for (int i = 0; i < n; i++) {
        double x[4];
        char line[256];
        for (int j = 0; j < 4; j++)
            x[j] = dt_rng_normal(&r);
        int len = snprintf(line, sizeof line, "%.6f,%.6f,%.6f,%.6f,", x[0], x[1], x[2], x[3]);
        if (kind == 0) {
            len += snprintf(line + len, sizeof line - (size_t)len, "%d\n",
                            x[0] - 0.5 * x[1] + 0.25 * x[3] > 0.1);
        } else if (kind == 1) {
            len += snprintf(line + len, sizeof line - (size_t)len, "%.6f,%.6f\n",
                            0.5 * x[0] - x[2] + 0.05 * dt_rng_normal(&r),
                            1.0 + 0.3 * x[1] + 0.7 * x[3]);
        } else {
            double s[3] = {x[0] + 0.3 * dt_rng_normal(&r), x[1] - x[2], 0.5 * x[3] - x[0]};
            int c = s[1] > s[0] ? 1 : 0;
            c = s[2] > s[c] ? 2 : c;
            len += snprintf(line + len, sizeof line - (size_t)len, "%d\n", c);
        }
        dt_buf_append(&b, line, (size_t)len, NULL);
    }
    char path[1024];
    dt_err err = {0};
    snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), name);
    ASSERT_OK(dt_file_write_atomic(path, b.data, b.len, &err), &err);
    dt_buf_destroy(&b);
}

#define MODEL(units, act)                                                                          \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["                 \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": "         \
    "\"in\"}}, {\"class_name\": \"Dense\", \"config\": {\"name\": \"hidden\", \"units\": 8, "      \
    "\"activation\": \"tanh\"}}, {\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", "     \
    "\"units\": " #units ", \"activation\": \"" act "\"}}]}}"

static const char *const STEMS[] = {"mbin", "mreg", "mcls"};

static const char *spec_text(int kind)
{
    static char buf[8192];
    static const char *const models[] = {MODEL(1, "sigmoid"), MODEL(2, "linear"),
                                         MODEL(3, "softmax")};
    static const char *const losses[] = {"\"binary_crossentropy\"", "\"mse\"",
                                         "\"sparse_categorical_crossentropy\""};
    static const char *const metrics[] = {
        /* binary: Keras's accuracy, its variants and the confusion counts */
        "[\"accuracy\", \"binary_accuracy\", {\"class_name\": \"BinaryAccuracy\", \"config\": "
        "{\"name\": \"acc_at_0.7\", \"threshold\": 0.7}}, \"precision\", {\"module\": "
        "\"keras.metrics\", \"class_name\": \"Recall\", \"config\": {\"name\": \"recall\", "
        "\"dtype\": \"float32\", \"thresholds\": null, \"top_k\": null, \"class_id\": null}, "
        "\"registered_name\": null}, \"mae\", \"AUC\", {\"module\": \"keras.metrics\", "
        "\"class_name\": \"AUC\", \"config\": {\"name\": \"pr_auc\", \"dtype\": \"float32\", "
        "\"num_thresholds\": 200, \"curve\": \"PR\", \"summation_method\": \"interpolation\", "
        "\"multi_label\": false, \"num_labels\": null, \"label_weights\": null, "
        "\"from_logits\": false}, \"registered_name\": null}]",
        /* regression */
        "[\"mae\", \"mean_absolute_error\", \"mse\", {\"class_name\": \"RootMeanSquaredError\", "
        "\"config\": {\"name\": \"root_mean_squared_error\", \"dtype\": \"float32\"}}]",
        /* three classes */
        "[\"sparse_categorical_accuracy\", {\"class_name\": \"SparseTopKCategoricalAccuracy\", "
        "\"config\": {\"name\": \"top2\", \"k\": 2}}, {\"class_name\": \"Precision\", \"config\": "
        "{\"class_id\": 1}}, {\"class_name\": \"Recall\", \"config\": {\"name\": \"recall_2\", "
        "\"class_id\": 2}}, {\"class_name\": \"BinaryAccuracy\"}, \"auc\", {\"class_name\": "
        "\"MeanIoU\", \"config\": {\"name\": \"mean_io_u\", \"dtype\": \"float32\", "
        "\"num_classes\": 3, \"ignore_class\": null, \"sparse_y_true\": true, "
        "\"sparse_y_pred\": false, \"axis\": -1}}]",
    };
    const char *label = kind == 1 ? "[\"y1\", \"y2\"]" : "\"label\"";
    snprintf(buf, sizeof buf,
             "{\"name\": \"%s\", \"model\": %s, \"compile\": {\"optimizer\": {\"class_name\": "
             "\"Adam\", \"config\": {\"learning_rate\": 0.01}}, \"loss\": %s, \"metrics\": %s}, "
             "\"data\": {\"train\": {\"format\": \"csv\", \"files\": [\"%s-train.csv\"], "
             "\"label_column\": %s}, \"validation\": {\"format\": \"csv\", \"files\": "
             "[\"%s-val.csv\"], \"label_column\": %s}, \"shuffle\": false, \"shard_policy\": "
             "\"DATA\"}, \"fit\": {\"epochs\": 4, \"batch_size\": 20}, \"tensorboard\": "
             "{\"log_dir\": \"tb-%s\"}}",
             STEMS[kind], models[kind], losses[kind], metrics[kind], STEMS[kind], label,
             STEMS[kind], label, STEMS[kind]);
    return buf;
}

/* The validation metrics from the final weights: the model's predictions over the validation
 * file, then the sums in float64 (the trainer's own update, one batch of all rows). */
static void val_expected(const dt_jobspec *spec, const float *params, size_t nparams,
                         dt_train_metric *out)
{
    dt_err err = {0};
    dt_data_source src;
    cJSON *val = cJSON_GetObjectItemCaseSensitive(spec->data, "validation");
    ASSERT_OK(dt_data_source_parse(val, "$.v", dt_test_tmpdir(), &src, &err), &err);
    dt_dataset *ds = NULL;
    ASSERT_OK(dt_dataset_load(&src, &ds, &err), &err);
    dt_data_source_destroy(&src);
    dt_model *m = NULL;
    dt_model_opts mo = {.seed = 1};
    ASSERT_OK(dt_model_from_json(spec->model_json, spec->model_json_len, &mo, &m, &err), &err);
    size_t n;
    float *p = dt_model_params(m, &n);
    ASSERT_EQ(n, nparams);
    dt_model_ops(m)->upload(p, params, n * sizeof(float));
    int cols = (int)dt_model_output_size(m), rows = (int)ds->n;
    float *pred = malloc((size_t)rows * cols * sizeof(float));
    ASSERT_OK(dt_model_predict(m, ds->x_f32, rows, pred, &err), &err);
    double *st = calloc(dt__train_metrics_state_size(spec), sizeof *st);
    dt__train_metrics_update(spec, pred, cols, ds->y_kind == DT_LABEL_FLOAT ? ds->y_f32 : NULL,
                             ds->y_kind == DT_LABEL_FLOAT ? NULL : ds->y_i32, rows, st);
    dt__train_metrics_values(spec, st, true, out);
    free(st);
    free(pred);
    dt_model_free(m);
    dt_dataset_free(ds);
}

/* Whether the chief's TensorBoard files under tb-<stem>/<run> ("train" or "validation") hold
 * the tag (a plain string inside the Summary protobuf). */
static bool tb_has(const char *stem, const char *run, const char *tag)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tb-%s/%s", dt_test_tmpdir(), stem, run);
    DIR *d = opendir(dir);
    ASSERT_TRUE(d != NULL);
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0)
            continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        char *text = NULL;
        size_t len = 0;
        dt_err err = {0};
        ASSERT_OK(dt_file_read_all(p, 1u << 24, &text, &len, &err), &err);
        found = memmem(text, len, tag, strlen(tag)) != NULL;
        free(text);
    }
    closedir(d);
    return found;
}

static void run(int kind)
{
    char f[64];
    snprintf(f, sizeof f, "%s-train.csv", STEMS[kind]);
    write_csv(f, N_TRAIN, kind, 1 + 2 * (uint64_t)kind);
    snprintf(f, sizeof f, "%s-val.csv", STEMS[kind]);
    write_csv(f, N_VAL, kind, 2 + 2 * (uint64_t)kind);
    dt_jobspec spec;
    tt_parse(spec_text(kind), &spec);
    dt_err err = {0};
    ASSERT_OK(dt_train_validate(&spec, NULL, &err), &err);
    dt_train_opts o = dt_train_opts_default();
    char out_dir[1024];
    snprintf(out_dir, sizeof out_dir, "%s/out-%s", dt_test_tmpdir(), STEMS[kind]);
    o.out_dir = out_dir; /* the chief's final weights, for evaluate */
    tt_replica one[1], two[2];
    tt_run(&spec, 1, &o, -1, 0, one);
    if (one[0].st != DT_OK)
        fprintf(stderr, "R=1: %s\n", one[0].err.msg);
    ASSERT_EQ(one[0].st, DT_OK);
    o.out_dir = NULL; /* evaluate reads the 1-replica run's weights */
    tt_run(&spec, 2, &o, -1, 0, two);
    for (int r = 0; r < 2; r++) {
        if (two[r].st != DT_OK)
            fprintf(stderr, "R=2 rank %d: %s\n", r, two[r].err.msg);
        ASSERT_EQ(two[r].st, DT_OK);
    }
    const dt_train_result *a = &one[0].res, *b = &two[0].res;
    ASSERT_EQ(a->nmetrics, spec.nmetrics);
    ASSERT_EQ(b->nmetrics, spec.nmetrics);
    ASSERT_TRUE(a->has_val && b->has_val);
    dt_train_metric want[DT_JOBSPEC_MAX_METRICS];
    val_expected(&spec, one[0].params, one[0].nparams, want);
    double maxd = 0;
    for (int i = 0; i < spec.nmetrics; i++) {
        /* the same name on every replica and in both runs, Keras's log name */
        ASSERT_STREQ(a->metrics[i].name, spec.metrics[i].name);
        ASSERT_STREQ(b->metrics[i].name, a->metrics[i].name);
        ASSERT_STREQ(two[1].res.metrics[i].name, a->metrics[i].name);
        ASSERT_STREQ(b->val_metrics[i].name, want[i].name);
        double d = fabs(a->metrics[i].value - b->metrics[i].value);
        double dv = fabs(a->val_metrics[i].value - b->val_metrics[i].value);
        printf("%s: %-24s R=1 %.7f R=2 %.7f (|d| %.2g)  %-28s R=1 %.7f R=2 %.7f (|d| %.2g) "
               "formula %.7f\n",
               STEMS[kind], a->metrics[i].name, a->metrics[i].value, b->metrics[i].value, d,
               want[i].name, a->val_metrics[i].value, b->val_metrics[i].value, dv, want[i].value);
        maxd = fmax(maxd, fmax(d, dv));
        /* every replica reports the same all-reduced values */
        ASSERT_NEAR(two[1].res.metrics[i].value, b->metrics[i].value, 0);
        ASSERT_NEAR(two[1].res.val_metrics[i].value, b->val_metrics[i].value, 0);
        ASSERT_NEAR(b->metrics[i].value, a->metrics[i].value, 1e-6);
        ASSERT_NEAR(b->val_metrics[i].value, a->val_metrics[i].value, 1e-6);
        ASSERT_NEAR(a->val_metrics[i].value, want[i].value, 1e-6);
    }
    printf("%s: max |R=2 - R=1| over the epoch and validation metrics: %.3g\n", STEMS[kind], maxd);
    /* evaluate (dtrain evaluate, the eval sidecar) reports them too, without val_ */
    dt_train_eval_result ev;
    char final[1100];
    snprintf(final, sizeof final, "%s/final.safetensors", out_dir);
    ASSERT_OK(dt_train_evaluate(&spec, final, NULL, 7, &ev, &err), &err);
    ASSERT_EQ(ev.nmetrics, spec.nmetrics);
    for (int i = 0; i < spec.nmetrics; i++) {
        ASSERT_STREQ(ev.metrics[i].name, spec.metrics[i].name);
        ASSERT_NEAR(ev.metrics[i].value, want[i].value, 1e-6); /* batches of 7, not 40 */
    }
    /* TensorBoard: Keras's runs and tags, "epoch_" and "batch_" before the log name; the
     * validation run uses the training tags, so the curves overlay */
    char tag[96];
    ASSERT_TRUE(tb_has(STEMS[kind], "train", "epoch_loss"));
    ASSERT_TRUE(tb_has(STEMS[kind], "validation", "epoch_loss"));
    ASSERT_TRUE(!tb_has(STEMS[kind], "validation", "epoch_val_loss"));
    ASSERT_TRUE(!tb_has(STEMS[kind], "validation", "batch_loss"));
    for (int i = 0; i < spec.nmetrics; i++) {
        snprintf(tag, sizeof tag, "epoch_%s", a->metrics[i].name);
        ASSERT_TRUE(tb_has(STEMS[kind], "train", tag));
        ASSERT_TRUE(tb_has(STEMS[kind], "validation", tag));
        snprintf(tag, sizeof tag, "epoch_%s", a->val_metrics[i].name);
        ASSERT_TRUE(!tb_has(STEMS[kind], "train", tag));
        snprintf(tag, sizeof tag, "batch_%s", a->metrics[i].name);
        ASSERT_TRUE(tb_has(STEMS[kind], "train", tag));
    }
    tt_free(one, 1);
    tt_free(two, 2);
    dt_jobspec_destroy(&spec);
}

DT_TEST_TIMEOUT(train_metrics_binary_job, 120)
{
    run(0);
}

DT_TEST_TIMEOUT(train_metrics_regression_job, 120)
{
    run(1);
}

DT_TEST_TIMEOUT(train_metrics_three_class_job, 120)
{
    run(2);
}

/* A class_id outside the model's outputs is refused at submit time. */
DT_TEST(train_metrics_class_id_checked)
{
    write_csv("mbin-train.csv", N_TRAIN, 0, 1);
    write_csv("mbin-val.csv", N_VAL, 0, 2);
    char text[8192];
    snprintf(text, sizeof text, "%s", spec_text(0));
    char *at = strstr(text, "\"class_id\": null");
    ASSERT_TRUE(at != NULL);
    memcpy(at, "\"class_id\": 3   ", 16);
    dt_jobspec spec;
    tt_parse(text, &spec);
    dt_err err = {0};
    ASSERT_STATUS(dt_train_validate(&spec, NULL, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "class_id 3 is outside the model's 1 outputs");
    dt_jobspec_destroy(&spec);
    /* MeanIoU's sparse y_pred is a class id per example, not 3 probabilities */
    write_csv("mcls-train.csv", N_TRAIN, 2, 5);
    write_csv("mcls-val.csv", N_VAL, 2, 6);
    snprintf(text, sizeof text, "%s", spec_text(2));
    at = strstr(text, "\"sparse_y_pred\": false");
    ASSERT_TRUE(at != NULL);
    memcpy(at, "\"sparse_y_pred\": true ", 22);
    tt_parse(text, &spec);
    ASSERT_STATUS(dt_train_validate(&spec, NULL, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "sparse_y_pred true takes a class id per example but the model has 3");
    dt_jobspec_destroy(&spec);
}
