/* test_nn_preproc.c - Normalization (config constants, invert, axis null, adapt() over the
 * training data in a job) and CategoryEncoding (one_hot, multi_hot, count, bad ids): values
 * against double-precision formulas, Keras's weights and counts, finite differences, refusals. */
#include "core/buf.h"
#include "io/safetensors.h"
#include "test_nn_util.h"
#include "test_train_util.h"

#include <math.h>

#define DENSE(u) "{\"class_name\": \"Dense\", \"config\": {\"units\": " #u "}}"
#define DENSE_TANH(u)                                                                              \
    "{\"class_name\": \"Dense\", \"config\": {\"units\": " #u ", \"activation\": \"tanh\"}}"
#define NORM(cfg) "{\"class_name\": \"Normalization\", \"config\": {\"name\": \"norm\"" cfg "}}"

static const dt_loss sce = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};

static void predict(dt_model *m, const float *x, int n, float *out)
{
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, n, out, &err), &err);
}

DT_TEST(nn_preproc_normalization_values)
{
    const float x[6] = {1, 10, -3, 4, 0.5f, 7};
    float y[6];
    /* per feature of 3, from the config */
    dt_model *m =
        nn_build(nn_seq("3", NORM(", \"mean\": [1, 2, 3], \"variance\": [4, 0, 0.25]"), NULL), 1);
    predict(m, x, 2, y);
    const double mean[3] = {1, 2, 3}, sd[3] = {2, 1e-7, 0.5};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(y[i], (x[i] - mean[i % 3]) / sd[i % 3], 1e-4 * fabs(y[i]) + 1e-6);
    size_t total, trainable, nt;
    dt_model_param_counts(m, &total, &trainable, &nt);
    ASSERT_EQ(total, (size_t)0); /* constants, as Keras keeps them */
    dt_model_free(m);
    /* invert, axis null, scalars */
    m = nn_build(
        nn_seq("3", NORM(", \"axis\": null, \"mean\": 2, \"variance\": 9, \"invert\": true"), NULL),
        1);
    predict(m, x, 2, y);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(y[i], 2 + x[i] * 3, 1e-5);
    dt_model_free(m);
}

DT_TEST(nn_preproc_grads)
{
    ASSERT_GT(nn_gradcheck(nn_seq("4", DENSE_TANH(3),
                                  NORM(", \"mean\": [0.5, -1, 2], \"variance\": [2, 0.5, 3]"),
                                  DENSE(3), NULL),
                           sce, 3, 1e-2, 3e-4, 4e-3),
              0);
    ASSERT_GT(nn_gradcheck(nn_seq("4", DENSE_TANH(3),
                                  NORM(", \"axis\": null, \"mean\": 1, \"variance\": 4, "
                                       "\"invert\": true"),
                                  DENSE(3), NULL),
                           sce, 3, 1e-2, 3e-4, 4e-3),
              0);
}

DT_TEST(nn_preproc_adapt)
{
    /* Keras: an adapted Normalization has mean (C), variance (C) and count () */
    dt_model *m = nn_build(
        nn_seq("2, 3", NORM(""), "{\"class_name\": \"Flatten\", \"config\": {}}", DENSE(2), NULL),
        1);
    size_t total, trainable, nt;
    dt_model_param_counts(m, &total, &trainable, &nt);
    ASSERT_EQ(nt, (size_t)(3 + 3 + 1));
    dt_rng r;
    dt_rng_seed(&r, 3);
    float x[40 * 6];
    double sum[3] = {0}, sq[3] = {0};
    for (int i = 0; i < 40 * 6; i++) {
        x[i] = (float)(10 * (i % 3) + (1 + i % 3) * dt_rng_normal(&r));
        sum[i % 3] += x[i];
        sq[i % 3] += (double)x[i] * x[i];
    }
    dt_err err = {0};
    dt_model_adapt *a = NULL;
    ASSERT_OK(dt_model_adapt_begin(m, &a, &err), &err);
    ASSERT_TRUE(a != NULL);
    dt_model_adapt_rows(a, x, 15); /* in two chunks, as a job feeds it */
    dt_model_adapt_rows(a, x + 15 * 6, 25);
    dt_model_adapt_end(m, a);
    float mean[3], var[3], count;
    ASSERT_OK(dt_model_get_weight(m, "norm/mean", mean, 3, &err), &err);
    ASSERT_OK(dt_model_get_weight(m, "norm/variance", var, 3, &err), &err);
    ASSERT_OK(dt_model_get_weight(m, "norm/count", &count, 1, &err), &err);
    for (int c = 0; c < 3; c++) {
        double mu = sum[c] / 80, v = sq[c] / 80 - mu * mu; /* population variance */
        ASSERT_NEAR(mean[c], mu, 1e-5 * fabs(mu) + 1e-6);
        ASSERT_NEAR(var[c], v, 1e-4 * v);
    }
    ASSERT_NEAR(count, 80, 0);
    float y[12];
    predict(m, x, 2, y); /* runs with the adapted statistics */
    dt_model_free(m);

    /* a Normalization that does not read the input cannot be adapted: said at begin */
    m = nn_build(nn_seq("3", DENSE(3), NORM(""), DENSE(2), NULL), 1);
    ASSERT_TRUE(dt_model_adapt_begin(m, &a, &err) != DT_OK);
    ASSERT_CONTAINS(err.msg, "(Normalization 'norm')");
    ASSERT_CONTAINS(err.msg, "right after the InputLayer");
    dt_model_free(m);
    /* with constants nothing needs adapting */
    m = nn_build(nn_seq("3", NORM(", \"mean\": 0, \"variance\": 1"), DENSE(2), NULL), 1);
    ASSERT_OK(dt_model_adapt_begin(m, &a, &err), &err);
    ASSERT_TRUE(a == NULL);
    dt_model_free(m);
}

DT_TEST(nn_preproc_refusals)
{
    nn_refused(nn_seq("3", NORM(", \"mean\": [1, 2, 3]"), NULL), "give both 'mean' and 'variance'",
               NULL);
    nn_refused(nn_seq("3", NORM(", \"mean\": [1, 2], \"variance\": [1, 2]"), NULL),
               "option 'mean': 2 values for 3 features", NULL);
    nn_refused(nn_seq("3", NORM(", \"mean\": 0, \"variance\": -1"), NULL),
               "option 'variance': value 0 is negative", NULL);
    nn_refused(nn_seq("2, 3", NORM(", \"axis\": 1"), NULL), "option 'axis'", NULL);
    nn_refused(nn_seq("3", NORM(", \"mean\": \"x\", \"variance\": 1"), NULL), "option 'mean'",
               NULL);
    nn_refused(nn_seq("4",
                      "{\"class_name\": \"CategoryEncoding\", \"config\": {\"num_tokens\": 5, "
                      "\"output_mode\": \"tf_idf\"}}",
                      NULL),
               "\"tf_idf\" is not supported", NULL);
    nn_refused(nn_seq("4",
                      "{\"class_name\": \"CategoryEncoding\", \"config\": {\"num_tokens\": 5, "
                      "\"output_mode\": \"one_hot\"}}",
                      NULL),
               "takes one id a sample", NULL);
    nn_refused(nn_seq("4",
                      "{\"class_name\": \"CategoryEncoding\", \"config\": {\"num_tokens\": 5, "
                      "\"sparse\": true}}",
                      NULL),
               "option 'sparse'", NULL);
}

DT_TEST(nn_preproc_category_encoding)
{
    const char *modes[] = {"multi_hot", "count"};
    const float ids[8] = {0, 3, 3, 1, 4, 4, 4, 2};
    const float want[2][2][5] = {{{1, 1, 0, 1, 0}, {0, 0, 1, 0, 1}},
                                 {{1, 1, 0, 2, 0}, {0, 0, 1, 0, 3}}};
    for (int k = 0; k < 2; k++) {
        char layer[256];
        snprintf(layer, sizeof layer,
                 "{\"class_name\": \"CategoryEncoding\", \"config\": {\"name\": \"cat\", "
                 "\"num_tokens\": 5, \"output_mode\": \"%s\", \"sparse\": false}}",
                 modes[k]);
        dt_model *m = nn_build(nn_seq("4", layer, NULL), 1);
        float y[10];
        predict(m, ids, 2, y);
        for (int i = 0; i < 10; i++)
            ASSERT_NEAR(y[i], want[k][i / 5][i % 5], 0);
        /* an id past num_tokens fails the step, naming it and where it is */
        const float bad[4] = {0, 1, 5, 2};
        dt_err err = {0};
        ASSERT_TRUE(dt_model_predict(m, bad, 1, y, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, "(CategoryEncoding 'cat')");
        ASSERT_CONTAINS(err.msg, "input id 5 (sample 0 of the batch, position 2)");
        dt_model_free(m);
    }
    dt_model *m =
        nn_build(nn_seq("1",
                        "{\"class_name\": \"CategoryEncoding\", \"config\": {\"num_tokens\": 4, "
                        "\"output_mode\": \"one_hot\"}}",
                        DENSE(2), NULL),
                 1);
    const float one[3] = {2, 0, 3};
    float y[6];
    predict(m, one, 3, y); /* through a Dense: just runs */
    dt_model_free(m);
}

/* A job adapts its Normalization over the training data before the first step: the exported
 * mean and variance are the CSV's, on 1 and 2 replicas. */
DT_TEST_TIMEOUT(train_preproc_adapt_job, 120)
{
    dt_buf b;
    dt_buf_init(&b, 1 << 20);
    dt_buf_append(&b, "a,b,label\n", 10, NULL);
    double sum[2] = {0}, sq[2] = {0};
    dt_rng r;
    dt_rng_seed(&r, 5);
    for (int i = 0; i < 64; i++) {
        float a = (float)(100 + 20 * dt_rng_normal(&r)), c = (float)(-5 + 0.1 * dt_rng_normal(&r));
        char line[96];
        int n = snprintf(line, sizeof line, "%.4f,%.4f,%d\n", a, c, a > 100);
        dt_buf_append(&b, line, (size_t)n, NULL);
        double v[2] = {strtod(line, NULL), strtod(strchr(line, ',') + 1, NULL)};
        for (int j = 0; j < 2; j++) {
            sum[j] += v[j];
            sq[j] += v[j] * v[j];
        }
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/norm.csv", dt_test_tmpdir());
    dt_err err = {0};
    ASSERT_OK(dt_file_write_atomic(path, b.data, b.len, &err), &err);
    dt_buf_destroy(&b);
    const char *text =
        "{\"name\": \"norm\", \"model\": {\"class_name\": \"Sequential\", \"config\": {\"name\": "
        "\"m\", \"layers\": [{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, "
        "2], \"name\": \"in\"}}, {\"class_name\": \"Normalization\", \"config\": {\"name\": "
        "\"normalization\", \"axis\": -1, \"mean\": null, \"variance\": null, \"invert\": false}}, "
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 1, \"activation\": "
        "\"sigmoid\"}}]}}, \"compile\": {\"optimizer\": \"adam\", \"loss\": "
        "\"binary_crossentropy\"}, \"data\": {\"train\": {\"format\": \"csv\", \"files\": "
        "[\"norm.csv\"], \"label_column\": \"label\"}, \"shuffle\": false, \"shard_policy\": "
        "\"DATA\"}, \"fit\": {\"epochs\": 1, \"batch_size\": 16}}";
    dt_jobspec spec;
    tt_parse(text, &spec);
    ASSERT_OK(dt_train_validate(&spec, NULL, &err), &err);
    for (int world = 1; world <= 2; world++) {
        char out[1024];
        snprintf(out, sizeof out, "%s/out%d", dt_test_tmpdir(), world);
        dt_train_opts o = dt_train_opts_default();
        o.out_dir = out;
        tt_replica rep[2];
        tt_run(&spec, world, &o, -1, 0, rep);
        ASSERT_EQ(rep[0].st, DT_OK);
        if (world == 2)
            ASSERT_EQ(rep[0].res.weights_hash, rep[1].res.weights_hash);
        dt_st_file *f;
        ASSERT_OK(dt_st_open(rep[0].res.final_path, &f, &err), &err);
        const dt_st_tensor *mt = dt_st_find(f, "normalization/mean");
        const dt_st_tensor *vt = dt_st_find(f, "normalization/variance");
        ASSERT_TRUE(mt && vt);
        const float *mean = (const float *)mt->data, *var = (const float *)vt->data;
        for (int j = 0; j < 2; j++) {
            double mu = sum[j] / 64, v = sq[j] / 64 - mu * mu;
            ASSERT_NEAR(mean[j], mu, 1e-5 * fabs(mu));
            ASSERT_NEAR(var[j], v, 1e-3 * v);
        }
        dt_st_free(f);
        tt_free(rep, world);
    }
    dt_jobspec_destroy(&spec);
}
