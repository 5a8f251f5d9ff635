/* test_nn_fused.c - Conv2D(relu) -> MaxPooling2D, where the pool applies the relu, gives the
 * numbers of the same network with the relu as its own layer (the conv bias, carried as one
 * more kernel row through the GEMMs, is checked by the finite differences of test_nn_grad.c). */
#include "test_nn_util.h"

#define CONV(name, act, extra)                                                                     \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"" name "\", \"filters\": 6, "           \
    "\"kernel_size\": 3, \"activation\": \"" act "\"" extra "}}"
#define RELU                                                                                       \
    "{\"class_name\": \"Activation\", \"config\": {\"name\": \"r\", \"activation\": \"relu\"}}"
#define FLAT "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}}"
#define OUT  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}"

/* fused and plain are the same network; plain has the relu as its own layer. */
static void same_numbers(const char *fused_json, const char *plain_json)
{
    char *fused_text = strdup(fused_json);
    dt_model *a = nn_build(fused_text, 3), *b = nn_build(plain_json, 4);
    dt_err err = {0};
    /* b takes a's weights (b's own init differs: its layers sit at other indices) */
    for (size_t i = 0; i < dt_model_weight_count(a); i++) {
        const dt_model_weight *w = dt_model_weight_at(a, i);
        float *h = nn_wdata_host(a, w);
        ASSERT_OK(dt_model_set_weight(b, w->name, h, w->size, &err), &err);
        free(h);
    }
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    nn_data d = nn_random(a, 5, loss.kind, 8); /* N(0, 1) inputs: many windows stay negative */
    dt_model_batch bt = nn_batch(&d, loss.kind);
    dt_step_stats sa, sb;
    ASSERT_OK(dt_model_train_step(a, &loss, &bt, 5, &sa, &err), &err);
    ASSERT_OK(dt_model_train_step(b, &loss, &bt, 5, &sb, &err), &err);
    /* The same sums, but a GEMM over fewer rows may round its last bits differently. */
    printf("loss %.9g vs %.9g\n", sa.loss, sb.loss);
    ASSERT_NEAR(sa.loss, sb.loss, 1e-6 * fabs(sb.loss));
    for (size_t i = 0; i < dt_model_weight_count(a); i++) {
        const dt_model_weight *wa = dt_model_weight_at(a, i);
        const dt_model_weight *wb = dt_model_find_weight(b, wa->name);
        ASSERT_TRUE(wb != NULL);
        double md = 0, mg = 0;
        float *ga = nn_wgrad_host(a, wa), *gb = nn_wgrad_host(b, wb);
        for (size_t k = 0; k < wa->size; k++) {
            double diff = fabs((double)ga[k] - gb[k]);
            md = diff > md ? diff : md;
            mg = fabs(gb[k]) > mg ? fabs(gb[k]) : mg;
        }
        free(ga);
        free(gb);
        printf("  %-12s max |grad diff| %.3g (max |grad| %.3g)\n", wa->name, md, mg);
        ASSERT_TRUE(md <= 1e-6 * (mg > 1 ? mg : 1));
        ASSERT_TRUE(mg > 0);
    }
    size_t out = dt_model_output_size(a);
    float *pa = malloc(sizeof(float) * out * 5), *pb = malloc(sizeof(float) * out * 5);
    ASSERT_OK(dt_model_predict(a, d.x, 5, pa, &err), &err);
    ASSERT_OK(dt_model_predict(b, d.x, 5, pb, &err), &err);
    for (size_t k = 0; k < out * 5; k++)
        ASSERT_TRUE(fabs(pa[k] - pb[k]) <= 1e-5);
    free(pa);
    free(pb);
    nn_data_free(&d);
    dt_model_free(a);
    dt_model_free(b);
    free(fused_text);
}

DT_TEST(nn_fused_conv_relu_maxpool_2x2)
{
    const char *pool = "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p\"}}";
    char *fused = strdup(nn_seq("9, 8, 2", CONV("c", "relu", ""), pool, FLAT, OUT, NULL));
    same_numbers(fused, nn_seq("9, 8, 2", CONV("c", "linear", ""), RELU, pool, FLAT, OUT, NULL));
    free(fused);
}

DT_TEST(nn_fused_conv_relu_maxpool_in_chunks)
{
    /* 40x40x16 outputs: about 150 KB per sample, so the conv and its pool run in chunks of
     * samples (2, 2, 1 for this batch of 5), the last one short. */
    const char *pool = "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p\"}}";
#define CONV16(act)                                                                                \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 16, "                 \
    "\"kernel_size\": 3, \"activation\": \"" act "\"}}"
    char *fused = strdup(nn_seq("42, 42, 1", CONV16("relu"), pool, FLAT, OUT, NULL));
    same_numbers(fused, nn_seq("42, 42, 1", CONV16("linear"), RELU, pool, FLAT, OUT, NULL));
    free(fused);
}

DT_TEST(nn_fused_conv_relu_maxpool_overlapping_same)
{
    /* 3x3 windows, stride 2, same padding: the general path and the scattering backward */
    const char *pool = "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p\", "
                       "\"pool_size\": 3, \"strides\": 2, \"padding\": \"same\"}}";
    char *fused = strdup(
        nn_seq("9, 8, 2", CONV("c", "relu", ", \"use_bias\": false"), pool, FLAT, OUT, NULL));
    same_numbers(fused, nn_seq("9, 8, 2", CONV("c", "linear", ", \"use_bias\": false"), RELU, pool,
                               FLAT, OUT, NULL));
    free(fused);
}

DT_TEST(nn_fused_relu_pool_only_for_a_single_consumer)
{
    /* A relu conv read by a pool and by an Add must keep its own output. */
    const char *json =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_input_shape\": "
        "[null, 6, 6, 2], \"name\": \"in\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Conv2D\", \"name\": \"c\", \"config\": {\"name\": \"c\", "
        "\"filters\": 2, \"kernel_size\": 1, \"activation\": \"relu\"}, "
        "\"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
        "{\"class_name\": \"MaxPooling2D\", \"name\": \"p\", \"config\": {\"name\": \"p\", "
        "\"pool_size\": 1}, \"inbound_nodes\": [[[\"c\", 0, 0, {}]]]},"
        "{\"class_name\": \"Add\", \"name\": \"add\", \"config\": {\"name\": \"add\"}, "
        "\"inbound_nodes\": [[[\"c\", 0, 0, {}], [\"p\", 0, 0, {}]]]},"
        "{\"class_name\": \"Flatten\", \"name\": \"fl\", \"config\": {\"name\": \"fl\"}, "
        "\"inbound_nodes\": [[[\"add\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"fl\", 0, 0]]}}";
    dt_model *m = nn_build(json, 1);
    float x[72], y[72];
    for (int i = 0; i < 72; i++)
        x[i] = (float)(i % 7) - 3.0f;
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, 1, y, &err), &err);
    /* pool of size 1 is the identity, so y = 2 relu(conv(x)) >= 0 */
    int zeros = 0;
    for (int i = 0; i < 72; i++) {
        ASSERT_TRUE(y[i] >= 0);
        zeros += y[i] == 0;
    }
    ASSERT_TRUE(zeros > 0 && zeros < 72);
    dt_model_free(m);
}
