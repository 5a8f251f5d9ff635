/* test_nn_keras.c - the Keras JSON loader: the three formats, Keras's shapes and parameter
 * counts for config/models, weights by name, refusals that name layer, class and option, and
 * bad input. */
#include "core/buf.h"
#include "test_nn_util.h"

#include <cjson/cJSON.h>
#include <sys/wait.h>

static dt_status load(const char *json, dt_model **m, dt_err *err)
{
    dt_model_opts o = {.seed = 1};
    return dt_model_from_json(json, strlen(json), &o, m, err);
}

static void expect_layer(dt_model *m, size_t i, const char *name, const char *cls, size_t params,
                         int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    dt_model_layer l;
    dt_model_layer_info(m, i, &l);
    ASSERT_STREQ(l.name, name);
    ASSERT_STREQ(l.class_name, cls);
    ASSERT_EQ(l.params, params);
    ASSERT_EQ(l.ndim, ndim);
    ASSERT_EQ(l.shape[0], d0);
    if (ndim > 1) {
        ASSERT_EQ(l.shape[1], d1);
        ASSERT_EQ(l.shape[2], d2);
    }
}

static dt_model *load_file(const char *rel)
{
    dt_err err = {0};
    dt_model *m;
    dt_model_opts o = {.seed = 1};
    ASSERT_OK(dt_model_from_file(dt_test_src_path(rel), &o, &m, &err), &err);
    return m;
}

DT_TEST(nn_keras_tutorial_cnn_matches_keras_summary)
{
    dt_model *m = load_file("config/models/fmnist_cnn.json");
    size_t total, tr, nt;
    dt_model_param_counts(m, &total, &tr, &nt);
    ASSERT_EQ(total, 347146);
    ASSERT_EQ(tr, 347146);
    ASSERT_EQ(nt, 0);
    ASSERT_EQ(dt_model_layer_count(m), 6); /* with the InputLayer, hidden from the summary */
    expect_layer(m, 1, "conv2d", "Conv2D", 320, 3, 26, 26, 32);
    expect_layer(m, 2, "max_pooling2d", "MaxPooling2D", 0, 3, 13, 13, 32);
    expect_layer(m, 3, "flatten", "Flatten", 0, 1, 5408, 0, 0);
    expect_layer(m, 4, "dense", "Dense", 346176, 1, 64, 0, 0);
    expect_layer(m, 5, "dense_1", "Dense", 650, 1, 10, 0, 0);
    dt_model_layer l;
    dt_model_layer_info(m, 0, &l);
    ASSERT_FALSE(l.in_summary);
    const dt_model_weight *k = dt_model_find_weight(m, "conv2d/kernel");
    ASSERT_TRUE(k != NULL);
    ASSERT_EQ(k->ndim, 4);
    ASSERT_EQ(k->shape[0], 3);
    ASSERT_EQ(k->shape[2], 1);
    ASSERT_EQ(k->shape[3], 32);
    k = dt_model_find_weight(m, "dense/kernel");
    ASSERT_EQ(k->shape[0], 5408);
    ASSERT_EQ(k->shape[1], 64);
    dt_model_free(m);
}

DT_TEST(nn_keras_bn_cnn_keras2_matches_keras_summary)
{
    dt_model *m = load_file("config/models/fmnist_cnn_bn.json");
    size_t total, tr, nt;
    dt_model_param_counts(m, &total, &tr, &nt);
    ASSERT_EQ(total, 35178);
    ASSERT_EQ(tr, 34986);
    ASSERT_EQ(nt, 192);
    expect_layer(m, 1, "conv2d", "Conv2D", 288, 3, 26, 26, 32);
    expect_layer(m, 2, "batch_normalization", "BatchNormalization", 128, 3, 26, 26, 32);
    expect_layer(m, 5, "conv2d_1", "Conv2D", 18496, 3, 11, 11, 64);
    expect_layer(m, 8, "max_pooling2d_1", "MaxPooling2D", 0, 3, 5, 5, 64);
    expect_layer(m, 9, "flatten", "Flatten", 0, 1, 1600, 0, 0);
    expect_layer(m, 11, "dense", "Dense", 16010, 1, 10, 0, 0);
    const dt_model_weight *mv = dt_model_find_weight(m, "batch_normalization/moving_variance");
    ASSERT_TRUE(mv && !mv->trainable);
    float v[32];
    dt_err err = {0};
    ASSERT_OK(dt_model_get_weight(m, mv->name, v, 32, &err), &err);
    ASSERT_NEAR(v[5], 1.0, 0); /* Keras: moving variance starts at ones */
    dt_model_free(m);
}

DT_TEST(nn_keras_residual_functional_matches_keras_summary)
{
    dt_model *m = load_file("config/models/resnet_small.json");
    size_t total, tr, nt;
    dt_model_param_counts(m, &total, &tr, &nt);
    ASSERT_EQ(total, 7514);
    ASSERT_EQ(tr, 7482);
    ASSERT_EQ(nt, 32);
    ASSERT_FALSE(dt_model_is_sequential(m));
    expect_layer(m, 0, "input_layer", "InputLayer", 0, 3, 28, 28, 1);
    expect_layer(m, 4, "add", "Add", 0, 3, 28, 28, 16);
    expect_layer(m, 6, "conv2d_2", "Conv2D", 4640, 3, 14, 14, 32);
    expect_layer(m, 7, "global_average_pooling2d", "GlobalAveragePooling2D", 0, 1, 32, 0, 0);
    dt_model_layer l;
    dt_model_layer_info(m, 4, &l);
    ASSERT_TRUE(l.in_summary);
    ASSERT_EQ(l.n_inbound, 2);
    ASSERT_STREQ(l.inbound[0], "conv2d");
    ASSERT_STREQ(l.inbound[1], "batch_normalization");
    dt_model_free(m);
}

DT_TEST(nn_keras_legacy_list_sequential)
{
    const char *j = "{\"class_name\": \"Sequential\", \"config\": [{\"class_name\": \"Dense\", "
                    "\"config\": {\"name\": \"d\", \"units\": 4, \"batch_input_shape\": [null, 3], "
                    "\"activation\": \"relu\"}}, {\"class_name\": \"Dense\", \"config\": "
                    "{\"name\": \"e\", \"units\": 2}}]}";
    dt_model *m;
    dt_err err = {0};
    ASSERT_OK(load(j, &m, &err), &err);
    size_t total;
    dt_model_param_counts(m, &total, NULL, NULL);
    ASSERT_EQ(total, 3 * 4 + 4 + 4 * 2 + 2);
    dt_model_free(m);
}

DT_TEST(nn_keras3_functional_unwrapped_io_and_build_input_shape)
{
    /* Keras 3 may write input_layers as ["name", 0, 0]; a Sequential without InputLayer takes
     * build_input_shape. */
    const char *f =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": "
        "[{\"class_name\":"
        " \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_shape\": [null, 5], \"name\": "
        "\"x\"}, \"inbound_nodes\": []}, {\"class_name\": \"Dense\", \"name\": \"d\", \"config\": "
        "{\"name\": \"d\", \"units\": 2}, \"inbound_nodes\": [{\"args\": [{\"class_name\": "
        "\"__keras_tensor__\", \"config\": {\"shape\": [null, 5], \"dtype\": \"float32\", "
        "\"keras_history\": [\"x\", 0, 0]}}], \"kwargs\": {}}]}], \"input_layers\": [\"x\", 0, 0], "
        "\"output_layers\": [\"d\", 0, 0]}}";
    dt_model *m;
    dt_err err = {0};
    ASSERT_OK(load(f, &m, &err), &err);
    ASSERT_EQ(dt_model_output_size(m), 2);
    dt_model_free(m);
    const char *s = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": "
                    "[{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}], "
                    "\"build_input_shape\": [null, 7]}}";
    ASSERT_OK(load(s, &m, &err), &err);
    ASSERT_EQ(dt_model_input_size(m), 7);
    dt_model_free(m);
}

static void refused(const char *json, dt_status code, const char *a, const char *b, const char *c)
{
    dt_model *m = NULL;
    dt_err err = {0};
    ASSERT_STATUS(load(json, &m, &err), code);
    ASSERT_TRUE(m == NULL);
    if (a)
        ASSERT_CONTAINS(err.msg, a);
    if (b)
        ASSERT_CONTAINS(err.msg, b);
    if (c)
        ASSERT_CONTAINS(err.msg, c);
}

DT_TEST(nn_keras_refuses_unsupported_naming_layer_class_option)
{
    refused(
        nn_seq("4", "{\"class_name\": \"ConvLSTM2D\", \"config\": {\"name\": \"lstm_1\"}}", NULL),
        DT_ENOTSUP, "'lstm_1'", "ConvLSTM2D", "unsupported layer class");
    refused(nn_seq("6, 6, 1",
                   "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                   "\"kernel_size\": 3, \"dilation_rate\": 2, \"strides\": 2}}",
                   NULL),
            DT_ENOTSUP, "(Conv2D 'c')", "$.config.layers[", "'dilation_rate'");
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
                   "\"frobnicate\": 1}}",
                   NULL),
            DT_ENOTSUP, "(Dense 'd')", "$.config.layers[", "'frobnicate'");
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
                   "\"dtype\": {\"class_name\": \"DTypePolicy\", \"config\": {\"name\": "
                   "\"mixed_float16\"}}}}",
                   NULL),
            DT_ENOTSUP, "'d'", "'dtype'", "mixed_float16");
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
                   "\"activation\": \"hard_sigmoid\"}}",
                   NULL),
            DT_ENOTSUP, "'d'", "'activation'", "hard_sigmoid");
    refused(nn_seq("6, 6, 1",
                   "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p\", \"padding\": "
                   "\"causal\"}}",
                   NULL),
            DT_ENOTSUP, "(MaxPooling2D 'p')", "$.config.layers[", "'padding'");
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
                   "\"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {}}}}",
                   NULL),
            DT_ENOTSUP, "(Dense 'd')", "$.config.layers[", "'kernel_constraint'");
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
                   "\"kernel_initializer\": {\"class_name\": \"Identity\", \"config\": {}}}}",
                   NULL),
            DT_ENOTSUP, "'d'", "'kernel_initializer'", "Identity");
    refused(nn_seq("4",
                   "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"dr\", \"rate\": 0.5, "
                   "\"noise_shape\": [null, 1]}}",
                   NULL),
            DT_ENOTSUP, "(Dropout 'dr')", "$.config.layers[", "'noise_shape'");
    refused(nn_seq("4, 4, 2",
                   "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", "
                   "\"axis\": 1}}",
                   NULL),
            DT_ENOTSUP, "(BatchNormalization 'bn')", "$.config.layers[", "'axis'");
    refused(nn_seq("4, 4, 2",
                   "{\"class_name\": \"UpSampling2D\", \"config\": {\"name\": \"up\", "
                   "\"interpolation\": \"bilinear\"}}",
                   NULL),
            DT_ENOTSUP, "(UpSampling2D 'up')", "$.config.layers[", "'interpolation'");
}

DT_TEST(nn_keras_refuses_bad_graphs)
{
    /* a layer called twice (shared), two inputs, a dangling name */
    const char *shared =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": "
        "[null, 3], \"name\": \"x\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Dense\", \"name\": \"d\", \"config\": {\"name\": \"d\", \"units\": 3},"
        " \"inbound_nodes\": [[[\"x\", 0, 0, {}]], [[\"d\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"d\", 1, 0]]}}";
    refused(shared, DT_ENOTSUP, "'d'", "shared", NULL);
    const char *two =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": "
        "[null, 3], \"name\": \"x\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"InputLayer\", \"name\": \"y\", \"config\": {\"batch_input_shape\": "
        "[null, 3], \"name\": \"y\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Add\", \"name\": \"a\", \"config\": {\"name\": \"a\"},"
        " \"inbound_nodes\": [[[\"x\", 0, 0, {}], [\"y\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"x\", 0, 0], [\"y\", 0, 0]], \"output_layers\": [[\"a\", 0, 0]]}}";
    refused(two, DT_ENOTSUP, "input_layers", "several inputs", NULL);
    const char *dangling =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": {\"batch_input_shape\": "
        "[null, 3], \"name\": \"x\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Dense\", \"name\": \"d\", \"config\": {\"name\": \"d\", \"units\": 3},"
        " \"inbound_nodes\": [[[\"nope\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"d\", 0, 0]]}}";
    refused(dangling, DT_EINVAL, "'d'", "'nope'", NULL);
    refused(nn_seq("4", "{\"class_name\": \"Add\", \"config\": {\"name\": \"a\"}}", NULL),
            DT_EINVAL, "'a'", "2 inputs", NULL);
    refused(nn_seq("4",
                   "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": "
                   "1, \"kernel_size\": 3}}",
                   NULL),
            DT_EINVAL, "'c'", "rank 1", NULL);
    refused(nn_seq("2, 2, 1",
                   "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", "
                   "\"filters\": 1, \"kernel_size\": 3}}",
                   NULL),
            DT_EINVAL, "'c'", "does not fit", NULL);
}

/* fuzz/keras found it: a model whose output is its input (an InputLayer alone, or only a
 * Flatten / Reshape of it) built, and its first training step wrote the loss gradient through
 * NULL (SIGSEGV in the trainer, so in dtraind). It is refused when built. */
DT_TEST(nn_keras_refuses_output_that_is_the_input)
{
    refused(nn_seq("3", NULL), DT_EINVAL, "output is its input", "InputLayer", NULL);
    refused(nn_seq("3, 1", "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}", NULL),
            DT_EINVAL, "output is its input", NULL, NULL);
    refused(nn_seq("4",
                   "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", "
                   "\"target_shape\": [2, 2]}}",
                   NULL),
            DT_EINVAL, "output is its input", NULL, NULL);
    /* a layer that computes after the view is fine */
    dt_model *m = NULL;
    dt_err err = {0};
    ASSERT_OK(
        load(nn_seq("3, 1", "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}",
                    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}}",
                    NULL),
             &m, &err),
        &err);
    float x[6] = {1, 2, 3, 4, 5, 6}, y[4] = {0};
    dt_loss loss = {.kind = DT_NN_LOSS_MSE};
    dt_model_batch b = {.x = x, .targets = y, .n = 2};
    dt_step_stats st;
    ASSERT_OK(dt_model_train_step(m, &loss, &b, 2, &st, &err), &err);
    dt_model_free(m);
}

DT_TEST(nn_keras_bad_input)
{
    const char *good = nn_seq("4", "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}", NULL);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", good);
    /* every truncation fails cleanly */
    for (size_t n = 0; n + 1 < strlen(buf); n += 7) {
        dt_model *m = NULL;
        dt_err err = {0};
        dt_model_opts o = {0};
        ASSERT_TRUE(dt_model_from_json(buf, n, &o, &m, &err) != DT_OK);
        ASSERT_TRUE(m == NULL);
        ASSERT_TRUE(err.msg[0] != 0);
    }
    refused("", DT_EINVAL, "JSON", NULL, NULL);
    refused("\x01\x02garbage\xff", DT_EINVAL, "JSON", NULL, NULL);
    /* A key twice: cJSON would take the first, Python's json the last. */
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, "
                   "\"units\": 200}}",
                   NULL),
            DT_EINVAL, "$.config.layers[1].config.units: duplicate key", NULL, NULL);
    /* Integers that are not: a fraction is not truncated, 1e22 does not overflow a cast. */
    static const char *const bad_ints[] = {"[2.9, 3.7]", "1e22", "[3, -1e22]", "2.5",
                                           "[3, 1e300]", "[3]",  "\"3\""};
    for (size_t i = 0; i < sizeof bad_ints / sizeof *bad_ints; i++) {
        char layer[512];
        snprintf(layer, sizeof layer,
                 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                 "\"kernel_size\": %s}}",
                 bad_ints[i]);
        refused(nn_seq("6, 6, 1", layer, NULL), DT_EINVAL, "'c'", "'kernel_size'",
                "an integer in 1..65536");
    }
    refused(nn_seq("8.5, 1", "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}", NULL),
            DT_EINVAL, "axis 1 must be a fixed integer size", NULL, NULL);
    refused(nn_seq("6, 6, 1",
                   "{\"class_name\": \"ZeroPadding2D\", \"config\": {\"name\": \"z\", "
                   "\"padding\": [[1.5, 1], [1, 1]]}}",
                   NULL),
            DT_EINVAL, "'z'", "'padding'", NULL);
    refused(nn_seq("4",
                   "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", "
                   "\"target_shape\": [2, 2.0001]}}",
                   NULL),
            DT_EINVAL, "'r'", "'target_shape'", NULL);
    refused("[1, 2, 3]", DT_EINVAL, "class_name", NULL, NULL);
    refused("{\"class_name\": \"Sequential\", \"config\": {\"layers\": 5}}", DT_EINVAL,
            "$.config.layers", NULL, NULL);
    refused("{\"class_name\": \"Sequential\", \"config\": {\"layers\": []}}", DT_EINVAL, "empty",
            NULL, NULL);
    refused("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [7]}}", DT_EINVAL,
            "$.config.layers[0]", NULL, NULL);
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": "
                   "\"many\"}}",
                   NULL),
            DT_EINVAL, "'d'", "'units'", NULL);
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": "
                   "1e12}}",
                   NULL),
            DT_EINVAL, "'d'", "'units'", NULL);
    refused(nn_seq("-3", "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}", NULL),
            DT_ENOTSUP, "input shape", NULL, NULL);
    refused(nn_seq("null", "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}", NULL),
            DT_ENOTSUP, "variable", NULL, NULL);
    /* a model whose weights pass the limit is refused before allocating */
    refused(
        nn_seq("16777216", "{\"class_name\": \"Dense\", \"config\": {\"units\": 16777216}}", NULL),
        DT_ETOOBIG, "limit", NULL, NULL);
    refused(nn_seq("4",
                   "{\"class_name\": \"Dense\", \"config\": {\"name\": \"a/b\", \"units\": "
                   "2}}",
                   NULL),
            DT_EINVAL, "'/'", NULL, NULL);
}

DT_TEST(nn_keras_initializers_seeded_keras_defaults)
{
    const char *j = nn_seq("100", "{\"class_name\": \"Dense\", \"config\": {\"units\": 50}}", NULL);
    dt_model *a = nn_build(j, 5), *b = nn_build(j, 5), *c = nn_build(j, 6);
    const dt_model_weight *ka = dt_model_find_weight(a, "layer_1/kernel");
    ASSERT_TRUE(ka != NULL);
    const dt_model_weight *kb = dt_model_find_weight(b, ka->name);
    const dt_model_weight *kc = dt_model_find_weight(c, ka->name);
    float *ha = nn_wdata_host(a, ka), *hb = nn_wdata_host(b, kb), *hc = nn_wdata_host(c, kc);
    ASSERT_TRUE(memcmp(ha, hb, ka->size * 4) == 0);
    ASSERT_TRUE(memcmp(ha, hc, ka->size * 4) != 0);
    /* glorot_uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)); variance l^2 / 3 */
    double lim = sqrt(6.0 / 150), var = 0;
    for (size_t i = 0; i < ka->size; i++) {
        ASSERT_TRUE(fabs(ha[i]) <= lim);
        var += (double)ha[i] * ha[i];
    }
    ASSERT_NEAR(var / ka->size, lim * lim / 3, lim * lim / 3 * 0.05);
    free(ha);
    free(hb);
    free(hc);
    const dt_model_weight *bias = dt_model_find_weight(a, "layer_1/bias");
    float *hbias = nn_wdata_host(a, bias);
    for (size_t i = 0; i < bias->size; i++)
        ASSERT_NEAR(hbias[i], 0, 0);
    free(hbias);
    dt_model_free(a);
    dt_model_free(b);
    dt_model_free(c);
}

DT_TEST(nn_keras_set_get_weight)
{
    dt_model *m = nn_build(nn_seq("3",
                                  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                                  "\"units\": 2}}",
                                  NULL),
                           1);
    float w[6] = {1, 2, 3, 4, 5, 6}, r[6];
    dt_err err = {0};
    ASSERT_OK(dt_model_set_weight(m, "d/kernel", w, 6, &err), &err);
    ASSERT_OK(dt_model_get_weight(m, "d/kernel", r, 6, &err), &err);
    ASSERT_TRUE(memcmp(w, r, sizeof w) == 0);
    ASSERT_STATUS(dt_model_set_weight(m, "d/kernel", w, 5, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "d/kernel");
    ASSERT_STATUS(dt_model_set_weight(m, "e/kernel", w, 6, &err), DT_ENOENT);
    /* Dense (2,) = x (1, 3) kernel (3, 2): [1 1 1] -> [1+3+5, 2+4+6] */
    float x[3] = {1, 1, 1}, y[2];
    ASSERT_OK(dt_model_predict(m, x, 1, y, &err), &err);
    ASSERT_NEAR(y[0], 9, 1e-6);
    ASSERT_NEAR(y[1], 12, 1e-6);
    dt_model_free(m);
}

static int run_cli(const char *args, char *out, size_t n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", dt_test_bin_path("dtrain"), args);
    FILE *p = popen(cmd, "r");
    ASSERT_TRUE(p != NULL);
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

DT_TEST(nn_cli_summary)
{
    static char out[65536];
    char args[1024];
    snprintf(args, sizeof args, "summary %s", dt_test_src_path("config/models/fmnist_cnn.json"));
    ASSERT_EQ(run_cli(args, out, sizeof out), 0);
    ASSERT_CONTAINS(out, "Model: \"sequential\"");
    ASSERT_CONTAINS(out, "conv2d (Conv2D)");
    ASSERT_CONTAINS(out, "(None, 26, 26, 32)");
    ASSERT_CONTAINS(out, "346,176");
    ASSERT_CONTAINS(out, "Total params: 347,146 (1.32 MB)");
    ASSERT_CONTAINS(out, "Non-trainable params: 0 (0.00 B)");
    snprintf(args, sizeof args, "summary --json %s",
             dt_test_src_path("config/models/resnet_small.json"));
    ASSERT_EQ(run_cli(args, out, sizeof out), 0);
    cJSON *j = cJSON_Parse(out);
    ASSERT_TRUE(j != NULL);
    ASSERT_EQ(cJSON_GetObjectItem(j, "total_params")->valueint, 7514);
    ASSERT_EQ(cJSON_GetObjectItem(j, "trainable_params")->valueint, 7482);
    ASSERT_EQ(cJSON_GetObjectItem(j, "non_trainable_params")->valueint, 32);
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "layers"), 6);
    ASSERT_STREQ(cJSON_GetObjectItem(l, "name")->valuestring, "conv2d_2");
    ASSERT_STREQ(cJSON_GetObjectItem(l, "class_name")->valuestring, "Conv2D");
    ASSERT_EQ(cJSON_GetArrayItem(cJSON_GetObjectItem(l, "output_shape"), 0)->valueint, 14);
    ASSERT_EQ(cJSON_GetObjectItem(l, "params")->valueint, 4640);
    cJSON_Delete(j);
    /* bad input: exit 2 and a message naming the file */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad.json", dt_test_tmpdir());
    dt_err err = {0};
    const char *txt = "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
                      "\"GRU\", \"config\": {\"name\": \"g\"}}]}}";
    ASSERT_OK(dt_file_write_atomic(bad, txt, strlen(txt), &err), &err);
    snprintf(args, sizeof args, "summary %s", bad);
    ASSERT_EQ(run_cli(args, out, sizeof out), 2);
    ASSERT_CONTAINS(out, "bad.json");
    ASSERT_CONTAINS(out, "GRU");
    ASSERT_EQ(run_cli("summary", out, sizeof out), 2);
    ASSERT_EQ(run_cli("summary /nonexistent.json", out, sizeof out), 2);
}
