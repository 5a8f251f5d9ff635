/* test_nn_seq.c - the sequence and text layers of layers_seq.c: Keras's shapes, parameter
 * counts and weight names, integer InputLayers, Embedding's masks and out-of-range ids,
 * refusals that name the option, finite-difference gradients, and forward and gradients
 * against float64 PyTorch (test/ref/seq_ref.py). */
#include "core/buf.h"
#include "test_nn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY dt_test_python()

#define L(cls, cfg) "{\"class_name\": \"" cls "\", \"config\": {" cfg "}}"
#define DENSE3      L("Dense", "\"units\": 3")

static const dt_loss sce_logits = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};

/* Token ids in [1, vocab) with the tail of each sample padded with 0 (sample i keeps
 * t - i % (t - 1) ids, at least one). */
static void fill_ids(float *x, int n, int t, int vocab, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int keep = t - i % (t - 1);
        for (int j = 0; j < t; j++)
            x[i * t + j] = j < keep ? (float)(1 + dt_rng_below(&r, (uint64_t)vocab - 1)) : 0.0f;
    }
}

/* nn_gradcheck over the batch d (token ids need integer inputs). */
static int gradcheck_data(dt_model *m, nn_data *d, double eps, double atol, double rtol)
{
    dt_loss loss = sce_logits;
    dt_model_batch b = nn_batch(d, loss.kind);
    dt_rng rng = *dt_model_rng(m);
    nn_loss_at(m, &loss, &b, &rng);
    size_t np;
    float *g0 = nn_grads_host(m, &np);
    int checked = 0;
    dt_rng pick;
    dt_rng_seed(&pick, 3);
    for (size_t wi = 0; wi < dt_model_weight_count(m); wi++) {
        const dt_model_weight *w = dt_model_weight_at(m, wi);
        if (!w->trainable)
            continue;
        for (int k = 0; k < 12 && k < (int)w->size; k++) {
            size_t i = w->offset + (w->size <= 12 ? (size_t)k : dt_rng_below(&pick, w->size));
            float keep = nn_param_get(m, i);
            nn_param_set(m, i, keep + (float)eps);
            double lp = nn_loss_at(m, &loss, &b, &rng);
            nn_param_set(m, i, keep - (float)eps);
            double lm = nn_loss_at(m, &loss, &b, &rng);
            nn_param_set(m, i, keep);
            double num = (lp - lm) / (2 * eps), ana = g0[i];
            if (!(fabs(ana - num) <= atol + rtol * fabs(num)))
                DT_FAIL_("gradcheck: %s[%zu]: analytic %.8g numeric %.8g", w->name, i - w->offset,
                         ana, num);
            checked++;
        }
    }
    free(g0);
    return checked;
}

#define EMB(in, out, extra)                                                                        \
    L("Embedding", "\"name\": \"embedding\", \"input_dim\": " #in ", \"output_dim\": " #out extra)

/* ---- Keras's counts, shapes and names --------------------------------------------------------
 * A text classifier as Keras 3's model.to_json() writes it (DTypePolicy objects, 1-lists for
 * the 1D sizes, an int32 InputLayer). model.summary(): embedding 16,000; conv1d 3*16*32 + 32
 * = 1,568; layer_normalization 64; time_distributed 32*8 + 8 = 264; dense 9; total 17,905.
 * TimeDistributed's weights carry the wrapped Dense's name, as Keras 3's variable paths do. */
static const char keras3_text[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"text\", "
    "\"trainable\": true, \"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", "
    "\"config\": {\"name\": \"float32\"}, \"registered_name\": null}, \"layers\": ["
    "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": "
    "[null, 20], \"dtype\": \"int32\", \"sparse\": false, \"name\": \"input_layer\"}, "
    "\"registered_name\": null},"
    "{\"module\": \"keras.layers\", \"class_name\": \"Embedding\", \"config\": {\"name\": "
    "\"embedding\", \"trainable\": true, \"dtype\": {\"module\": \"keras\", \"class_name\": "
    "\"DTypePolicy\", \"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"input_dim\": 1000, \"output_dim\": 16, \"embeddings_initializer\": {\"module\": "
    "\"keras.initializers\", \"class_name\": \"RandomUniform\", \"config\": {\"seed\": null, "
    "\"minval\": -0.05, \"maxval\": 0.05}, \"registered_name\": null}, \"embeddings_regularizer\": "
    "null, \"activity_regularizer\": null, \"embeddings_constraint\": null, \"mask_zero\": true}, "
    "\"registered_name\": null, \"build_config\": {\"input_shape\": [null, 20]}},"
    "{\"module\": \"keras.layers\", \"class_name\": \"Conv1D\", \"config\": {\"name\": \"conv1d\", "
    "\"trainable\": true, \"filters\": 32, \"kernel_size\": [3], \"strides\": [1], \"padding\": "
    "\"same\", \"data_format\": \"channels_last\", \"dilation_rate\": [1], \"groups\": 1, "
    "\"activation\": \"relu\", \"use_bias\": true, \"kernel_initializer\": {\"module\": "
    "\"keras.initializers\", \"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, \"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null}, \"registered_name\": null},"
    "{\"module\": \"keras.layers\", \"class_name\": \"MaxPooling1D\", \"config\": {\"name\": "
    "\"max_pooling1d\", \"trainable\": true, \"pool_size\": [2], \"padding\": \"valid\", "
    "\"strides\": [2], \"data_format\": \"channels_last\"}, \"registered_name\": null},"
    "{\"module\": \"keras.layers\", \"class_name\": \"LayerNormalization\", \"config\": {\"name\": "
    "\"layer_normalization\", \"trainable\": true, \"axis\": -1, \"epsilon\": 0.001, \"center\": "
    "true, \"scale\": true, \"rms_scaling\": false, \"beta_initializer\": {\"module\": "
    "\"keras.initializers\", \"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": "
    "null}, \"gamma_initializer\": {\"module\": \"keras.initializers\", \"class_name\": \"Ones\", "
    "\"config\": {}, \"registered_name\": null}, \"beta_regularizer\": null, "
    "\"gamma_regularizer\": null, \"beta_constraint\": null, \"gamma_constraint\": null}, "
    "\"registered_name\": null},"
    "{\"module\": \"keras.layers\", \"class_name\": \"TimeDistributed\", \"config\": {\"name\": "
    "\"time_distributed\", \"trainable\": true, \"layer\": {\"module\": \"keras.layers\", "
    "\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"trainable\": true, \"units\": "
    "8, \"activation\": \"tanh\", \"use_bias\": true, \"kernel_initializer\": null, "
    "\"bias_initializer\": null, \"kernel_regularizer\": null, \"bias_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 32]}}}, \"registered_name\": null},"
    "{\"module\": \"keras.layers\", \"class_name\": \"GlobalAveragePooling1D\", \"config\": "
    "{\"name\": \"global_average_pooling1d\", \"trainable\": true, \"data_format\": "
    "\"channels_last\", \"keepdims\": false}, \"registered_name\": null},"
    "{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": "
    "\"dense_1\", \"trainable\": true, \"units\": 1, \"activation\": \"sigmoid\"}, "
    "\"registered_name\": null}], \"build_input_shape\": [null, 20]}}";

DT_TEST(nn_seq_keras_counts)
{
    dt_model *m = nn_build(keras3_text, 1);
    size_t total, tr, nt;
    dt_model_param_counts(m, &total, &tr, &nt);
    ASSERT_EQ(total, 17905);
    ASSERT_EQ(tr, 17905);
    ASSERT_EQ(nt, 0);
    const struct {
        const char *name;
        int ndim, d0, d1, d2;
    } want[] = {
        {"embedding/embeddings", 2, 1000, 16, 0},
        {"conv1d/kernel", 3, 3, 16, 32},
        {"conv1d/bias", 1, 32, 0, 0},
        {"layer_normalization/gamma", 1, 32, 0, 0},
        {"layer_normalization/beta", 1, 32, 0, 0},
        {"time_distributed/dense/kernel", 2, 32, 8, 0},
        {"time_distributed/dense/bias", 1, 8, 0, 0},
        {"dense_1/kernel", 2, 8, 1, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const dt_model_weight *w = dt_model_find_weight(m, want[i].name);
        if (!w)
            DT_FAIL_("no weight %s", want[i].name);
        ASSERT_EQ(w->ndim, want[i].ndim);
        ASSERT_EQ(w->shape[0], want[i].d0);
        if (w->ndim > 1)
            ASSERT_EQ(w->shape[1], want[i].d1);
        if (w->ndim > 2)
            ASSERT_EQ(w->shape[2], want[i].d2);
    }
    /* Output shapes: (20, 16), (20, 32), (10, 32), (10, 32), (10, 8), (8), (1). */
    const int shapes[][2] = {{20, 0}, {20, 16}, {20, 32}, {10, 32}, {10, 32}, {10, 8}, {8, 0}};
    for (size_t i = 0; i < 7; i++) {
        dt_model_layer l;
        dt_model_layer_info(m, i, &l);
        ASSERT_EQ(l.shape[0], shapes[i][0]);
        if (shapes[i][1])
            ASSERT_EQ(l.shape[1], shapes[i][1]);
        else
            ASSERT_EQ(l.ndim, 1);
    }
    /* The embeddings start in Keras's RandomUniform(-0.05, 0.05). */
    const dt_model_weight *e = dt_model_find_weight(m, "embedding/embeddings");
    float lo = 1, hi = -1;
    float *ed = nn_wdata_host(m, e);
    for (size_t i = 0; i < e->size; i++)
        lo = fminf(lo, ed[i]), hi = fmaxf(hi, ed[i]);
    free(ed);
    ASSERT_TRUE(lo >= -0.05f && lo < -0.04f && hi <= 0.05f && hi > 0.04f);
    /* A training step on padded token ids. */
    dt_loss bce = {.kind = DT_NN_LOSS_BCE};
    float x[4 * 20];
    int32_t lab[4] = {0, 1, 1, 0};
    fill_ids(x, 4, 20, 1000, 5);
    dt_model_batch b = {.x = x, .labels = lab, .n = 4};
    dt_step_stats st;
    dt_err err = {0};
    ASSERT_OK(dt_model_train_step(m, &bce, &b, 4, &st, &err), &err);
    ASSERT_TRUE(isfinite(st.loss) && st.loss > 0.3 && st.loss < 1.2);
    dt_model_free(m);
}

/* Keras 2 spellings: an int64 InputLayer in a Functional model, Embedding's input_length,
 * Convolution1D and the pool aliases, "axis": [2] on a (T, C) LayerNormalization. */
DT_TEST(nn_seq_keras2_spellings)
{
    dt_model *m = nn_build(
        nn_seq("12", EMB(50, 4, ", \"input_length\": 12, \"embeddings_initializer\": \"uniform\""),
               L("Convolution1D", "\"filters\": 5, \"kernel_size\": 3, \"padding\": \"causal\""),
               L("MaxPool1D", "\"pool_size\": 3, \"strides\": 1, \"padding\": \"same\""),
               L("LayerNormalization", "\"axis\": [2]"), L("GlobalMaxPool1D", ""), DENSE3, NULL),
        1);
    size_t total;
    dt_model_param_counts(m, &total, NULL, NULL);
    ASSERT_EQ(total, 50 * 4 + 3 * 4 * 5 + 5 + 10 + 3 * 5 + 3);
    dt_model_free(m);
    const char *fn =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"ids\", \"config\": {\"batch_input_shape\": "
        "[null, 6], \"dtype\": \"int64\", \"sparse\": false, \"ragged\": false, \"name\": "
        "\"ids\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Embedding\", \"name\": \"emb\", \"config\": {\"name\": \"emb\", "
        "\"input_dim\": 9, \"output_dim\": 3, \"mask_zero\": true}, \"inbound_nodes\": "
        "[[[\"ids\", 0, 0, {}]]]},"
        "{\"class_name\": \"GlobalAveragePooling1D\", \"name\": \"gap\", \"config\": {\"name\": "
        "\"gap\"}, \"inbound_nodes\": [[[\"emb\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"ids\", 0, 0]], \"output_layers\": [[\"gap\", 0, 0]]}}";
    m = nn_build(fn, 2);
    /* Masked mean: sample 0 [4, 2, 0, 0, 0, 0] averages rows 4 and 2; sample 1 with no id but
     * 0 gets 0 (Keras: NaN); sample 2 [7, 0, 7, 0, 0, 0]: the zeros in between are masked. */
    float x[18] = {4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 7, 0, 0, 0};
    float y[9], e[27];
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, 3, y, &err), &err);
    ASSERT_OK(dt_model_get_weight(m, "emb/embeddings", e, 27, &err), &err);
    for (int j = 0; j < 3; j++) {
        ASSERT_NEAR(y[j], (e[4 * 3 + j] + e[2 * 3 + j]) / 2, 1e-7);
        ASSERT_FEQ(y[3 + j], 0.0f);
        ASSERT_NEAR(y[6 + j], e[7 * 3 + j], 1e-7);
    }
    dt_model_free(m);
}

/* The mask rides through TimeDistributed, SpatialDropout1D and LayerNormalization to the
 * pooling: [3, 4, 0, 0] averages two tokens exactly as [3, 4, 4, 3] averages four (were the
 * padding counted, the first would mix in two rows of id 0). */
DT_TEST(nn_seq_mask_passes_through)
{
    dt_model *m =
        nn_build(nn_seq("4", EMB(6, 3, ", \"mask_zero\": true"),
                        L("TimeDistributed", "\"layer\": {\"class_name\": \"Dense\", \"config\": "
                                             "{\"units\": 5, \"activation\": \"tanh\"}}"),
                        L("SpatialDropout1D", "\"rate\": 0.5"), L("LayerNormalization", ""),
                        L("GlobalAveragePooling1D", ""), DENSE3, NULL),
                 4);
    float x[12] = {3, 4, 0, 0, 3, 4, 4, 3, 4, 0, 3, 0};
    float y[9];
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, 3, y, &err), &err);
    for (int j = 0; j < 3; j++) {
        ASSERT_NEAR(y[j], y[3 + j], 1e-6);
        ASSERT_NEAR(y[j], y[6 + j], 1e-6);
    }
    /* Without mask_zero the padding counts and the outputs differ. */
    dt_model_free(m);
    m = nn_build(nn_seq("4", EMB(6, 3, ""),
                        L("TimeDistributed", "\"layer\": {\"class_name\": \"Dense\", \"config\": "
                                             "{\"units\": 5, \"activation\": \"tanh\"}}"),
                        L("GlobalAveragePooling1D", ""), DENSE3, NULL),
                 4);
    ASSERT_OK(dt_model_predict(m, x, 3, y, &err), &err);
    ASSERT_TRUE(fabsf(y[0] - y[3]) + fabsf(y[1] - y[4]) + fabsf(y[2] - y[5]) > 1e-4f);
    dt_model_free(m);
}

/* ---- Embedding: ids out of range, the scatter-add gradient ------------------------------- */

DT_TEST(nn_seq_embedding_bad_ids)
{
    dt_model *m = nn_build(nn_seq("5", EMB(10, 2, ""), L("Flatten", ""), DENSE3, NULL), 1);
    float x[10] = {1, 2, 3, 4, 9, 0, 1, 10, 2, -3};
    int32_t lab[2] = {0, 1};
    dt_model_batch b = {.x = x, .labels = lab, .n = 2};
    dt_step_stats st;
    dt_err err = {0};
    ASSERT_TRUE(dt_model_train_step(m, &sce_logits, &b, 2, &st, &err) == DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.config.layers[1] (Embedding 'embedding'");
    ASSERT_CONTAINS(err.msg, "input id 10 (sample 1 of the batch, position 2) is outside [0, 10)");
    ASSERT_CONTAINS(err.msg, "(2 ids of the batch out of range)");
    float y[6];
    err = (dt_err){0};
    ASSERT_TRUE(dt_model_predict(m, x, 2, y, &err) == DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "input id 10");
    err = (dt_err){0};
    ASSERT_TRUE(dt_model_evaluate(m, &sce_logits, &b, &st, &err) == DT_EINVAL);
    x[9] = NAN;
    x[7] = 3;
    err = (dt_err){0};
    ASSERT_TRUE(dt_model_predict(m, x, 2, y, &err) == DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "input id nan (sample 1 of the batch, position 4)");
    /* Fractions truncate toward zero as Keras's cast does: 9.9 is row 9, -0.5 row 0. */
    x[9] = 9.9f;
    x[5] = -0.5f;
    ASSERT_OK(dt_model_train_step(m, &sce_logits, &b, 2, &st, &err), &err);
    dt_model_free(m);
}

DT_TEST(nn_seq_embedding_scatter_add)
{
    /* Embedding -> Flatten -> Dense: the gradient of row r is the sum, over the positions
     * holding r, of that position's slice of dy; a row no id names gets 0. */
    dt_model *m = nn_build(nn_seq("4", EMB(6, 2, ""), L("Flatten", ""), DENSE3, NULL), 3);
    float x[8] = {1, 3, 1, 1, 5, 3, 0, 1};
    int32_t lab[2] = {2, 0};
    dt_model_batch b = {.x = x, .labels = lab, .n = 2};
    dt_step_stats st;
    dt_err err = {0};
    ASSERT_OK(dt_model_train_step(m, &sce_logits, &b, 2, &st, &err), &err);
    const dt_model_weight *e = dt_model_find_weight(m, "embedding/embeddings");
    float g[12];
    dt_model_ops(m)->download(g, e->grad, sizeof g);
    /* Row 2 and row 4 appear nowhere. */
    for (int j = 0; j < 2; j++) {
        ASSERT_FEQ(g[2 * 2 + j], 0.0f);
        ASSERT_FEQ(g[4 * 2 + j], 0.0f);
    }
    ASSERT_TRUE(g[1 * 2] != 0.0f && g[3 * 2] != 0.0f && g[5 * 2] != 0.0f && g[0] != 0.0f);
    /* The same step again gives the same bits (a fixed order of the additions). */
    ASSERT_OK(dt_model_train_step(m, &sce_logits, &b, 2, &st, &err), &err);
    float g2[12];
    dt_model_ops(m)->download(g2, e->grad, sizeof g2);
    ASSERT_TRUE(memcmp(g, g2, sizeof g) == 0);
    dt_model_free(m);
}

/* ---- finite differences ---------------------------------------------------------------------- */

DT_TEST(nn_seq_gradcheck_embedding_masked)
{
    /* Embedding(mask_zero) -> LayerNormalization -> Dense(tanh) -> GAP1D (masked) -> Dense:
     * the mask rides through LayerNormalization and Dense to the pooling. */
    dt_model *m = nn_build(nn_seq("7", EMB(12, 5, ", \"mask_zero\": true"),
                                  L("LayerNormalization", "\"epsilon\": 0.01"),
                                  L("Dense", "\"units\": 4, \"activation\": \"tanh\""),
                                  L("GlobalAveragePooling1D", ""), DENSE3, NULL),
                           7);
    nn_data d = nn_random(m, 5, DT_NN_LOSS_SPARSE_CE, 11);
    fill_ids(d.x, 5, 7, 12, 4);
    ASSERT_GT(gradcheck_data(m, &d, 1e-2, 3e-4, 4e-3), 40);
    /* Row 0, the padding id, is read only at masked positions: no gradient reaches it. */
    dt_step_stats st;
    dt_err err = {0};
    dt_model_batch b = nn_batch(&d, DT_NN_LOSS_SPARSE_CE);
    ASSERT_OK(dt_model_train_step(m, &sce_logits, &b, 5, &st, &err), &err);
    const dt_model_weight *e = dt_model_find_weight(m, "embedding/embeddings");
    float *eg = nn_wgrad_host(m, e);
    for (int j = 0; j < 5; j++)
        ASSERT_FEQ(eg[j], 0.0f);
    free(eg);
    nn_data_free(&d);
    dt_model_free(m);
}

/* eps 1e-3: a step of 1e-2 may move a max pool's winner (the kink is not the gradient). */
static void check(const char *json)
{
    ASSERT_GT(nn_gradcheck(json, sce_logits, 3, 1e-3, 3e-4, 4e-3), 0);
}

DT_TEST(nn_seq_gradcheck_conv_pool)
{
    const char *conv_tanh = "\"activation\": \"tanh\", \"kernel_size\": 3, \"filters\": 4";
    /* same, causal with dilation, strided valid; max and average pools, valid and same. */
    check(nn_seq("11, 3",
                 L("Conv1D", "\"padding\": \"same\", "
                             "\"activation\": \"tanh\", "
                             "\"kernel_size\": [3], \"filters\": 4"),
                 L("MaxPooling1D", "\"pool_size\": [2]"), L("Flatten", ""), DENSE3, NULL));
    char a[512], b[512];
    snprintf(a, sizeof a, "\"padding\": \"causal\", \"dilation_rate\": 2, %s", conv_tanh);
    snprintf(b, sizeof b, "\"padding\": \"valid\", \"strides\": 2, %s", conv_tanh);
    char cl[600], vl[600];
    snprintf(cl, sizeof cl, "{\"class_name\": \"Conv1D\", \"config\": {%s}}", a);
    snprintf(vl, sizeof vl, "{\"class_name\": \"Conv1D\", \"config\": {%s}}", b);
    check(nn_seq("12, 2", cl,
                 L("AveragePooling1D", "\"pool_size\": 3, \"strides\": 2, "
                                       "\"padding\": \"same\""),
                 vl, L("GlobalMaxPooling1D", ""), DENSE3, NULL));
    check(nn_seq("9, 3", L("Conv1D", "\"kernel_size\": 1, \"filters\": 4, \"use_bias\": false"),
                 L("MaxPooling1D", "\"pool_size\": 2, \"strides\": 1, \"padding\": \"same\""),
                 L("GlobalAveragePooling1D", "\"keepdims\": true"), L("Flatten", ""), DENSE3,
                 NULL));
}

DT_TEST(nn_seq_gradcheck_layernorm_td)
{
    check(nn_seq("5, 6", L("LayerNormalization", "\"axis\": -1"),
                 L("TimeDistributed", "\"layer\": {\"class_name\": \"Dense\", \"config\": "
                                      "{\"units\": 4, \"activation\": \"tanh\"}}"),
                 L("LayerNormalization", "\"center\": false, \"epsilon\": 0.1"),
                 L("SpatialDropout1D", "\"rate\": 0.3"), L("Flatten", ""), DENSE3, NULL));
    check(nn_seq("4, 3", L("LayerNormalization", "\"scale\": false, \"axis\": [-1]"),
                 L("Flatten", ""), DENSE3, NULL));
    /* A regularized gamma adds to the loss and its gradient. */
    check(nn_seq("4, 3",
                 L("LayerNormalization", "\"gamma_regularizer\": {\"class_name\": \"L2\", "
                                         "\"config\": {\"l2\": 0.1}}"),
                 L("Flatten", ""), DENSE3, NULL));
}

/* ---- refusals ----------------------------------------------------------------------------- */

DT_TEST(nn_seq_refusals)
{
    nn_refused(nn_seq("4", EMB(10, 2, ", \"dtype\": \"int32\""), NULL),
               "$.config.layers[1] (Embedding 'embedding')",
               "option 'dtype': int32 is not supported");
    nn_refused("{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
               "\"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"dtype\": \"string\", "
               "\"name\": \"in\"}}, " EMB(10, 2, "") "]}}",
               "$.config.layers[0] (InputLayer 'in'): option 'dtype': string is not supported",
               "an integer type for token ids");
    nn_refused(
        nn_seq("8, 4", L("Conv1D", "\"filters\": 4, \"kernel_size\": 3, \"groups\": 2"), NULL),
        "$.config.layers[1] (Conv1D", "option 'groups': 2 is not supported (only 1)");
    nn_refused(nn_seq("8, 4",
                      L("Conv1D", "\"filters\": 4, \"kernel_size\": 3, \"padding\": "
                                  "\"full\""),
                      NULL),
               "option 'padding': full is not supported", "causal");
    nn_refused(nn_seq("8, 4",
                      L("Conv1D", "\"filters\": 4, \"kernel_size\": 3, \"strides\": 2, "
                                  "\"dilation_rate\": 2"),
                      NULL),
               "$.config.layers[1]", "'dilation_rate' 2");
    nn_refused(nn_seq("8, 4", L("LayerNormalization", "\"axis\": 1"), NULL),
               "$.config.layers[1] (LayerNormalization",
               "option 'axis': 1 is not supported (only the last axis, -1)");
    nn_refused(nn_seq("8, 4", L("LayerNormalization", "\"axis\": [1, 2]"), NULL),
               "$.config.layers[1] (LayerNormalization", "option 'axis'");
    nn_refused(nn_seq("8, 4", L("LayerNormalization", "\"rms_scaling\": true"), NULL),
               "$.config.layers[1]", "option 'rms_scaling' is not supported");
    /* 16,777,216 x 128 embeddings: 2^31 weights, past the model limit of 2^30. */
    nn_refused(nn_seq("4", EMB(16777216, 128, ""), NULL), "$.config.layers[1] (Embedding",
               "passes the limit of 1073741824 weights");
    nn_refused(nn_seq("4", EMB(16777217, 2, ""), NULL), "option 'input_dim': 16777217 is not in",
               "exact up to 2^24");
    nn_refused(nn_seq("4, 2", EMB(10, 2, ", \"mask_zero\": true"), NULL),
               "option 'mask_zero': needs a (timesteps,) input", NULL);
    nn_refused(nn_seq("4", EMB(10, 2, ", \"input_length\": 5"), NULL),
               "option 'input_length': 5, but the input has 4 timesteps", NULL);
    nn_refused(nn_seq("4", EMB(10, 2, ", \"embeddings_constraint\": \"non_neg\""), NULL),
               "option 'embeddings_constraint' is not supported", NULL);
    nn_refused(nn_seq("4, 3",
                      L("TimeDistributed", "\"layer\": {\"class_name\": \"Conv1D\", "
                                           "\"config\": {\"filters\": 2}}"),
                      NULL),
               "$.config.layers[1] (TimeDistributed", "option 'layer': Conv1D is not supported");
    nn_refused(nn_seq("4, 3",
                      L("TimeDistributed", "\"layer\": {\"class_name\": \"Dense\", "
                                           "\"config\": {\"units\": 2, \"bogus\": 1}}"),
                      NULL),
               "option 'layer.config.bogus' is not supported", NULL);
    nn_refused(nn_seq("4, 3",
                      L("TimeDistributed", "\"layer\": {\"class_name\": \"Dense\", "
                                           "\"config\": {\"units\": 2, \"name\": \"a/b\"}}"),
                      NULL),
               "option 'layer.config.name': longer than 35 characters or containing '/'", NULL);
    nn_refused(
        nn_seq("4, 3", L("GlobalAveragePooling1D", ""), L("GlobalAveragePooling1D", ""), NULL),
        "$.config.layers[2]", "needs a (timesteps, channels) input, got rank 1");
    nn_refused(nn_seq("4, 3", L("MaxPooling1D", "\"pool_size\": 5"), NULL),
               "window of 5 does not fit the 4 timesteps", NULL);
}

/* ---- PyTorch float64 parity ---------------------------------------------------------------- */

typedef struct par_case {
    const char *json;
    bool ids; /* the input is token ids below vocab */
    int vocab, n, classes;
} par_case;

static double max_rel(const float *a, const double *ref, size_t n)
{
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(a[i] - ref[i]) / (scale > 0 ? scale : 1));
    return worst;
}

static void add_tensor(cJSON *list, dt_buf *bin, const char *name, const float *v, size_t n,
                       const int *shape, int ndim, bool trainable)
{
    dt_err err = {0};
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON *s = cJSON_AddArrayToObject(e, "shape");
    for (int i = 0; i < ndim; i++)
        cJSON_AddItemToArray(s, cJSON_CreateNumber(shape[i]));
    cJSON_AddNumberToObject(e, "offset", (double)(bin->len / sizeof(float)));
    cJSON_AddBoolToObject(e, "trainable", trainable);
    cJSON_AddItemToArray(list, e);
    ASSERT_OK(dt_buf_append(bin, v, n * sizeof(float), &err), &err);
}

DT_TEST_TIMEOUT(nn_seq_torch_parity, 120)
{
    if (access(PY, X_OK) != 0 || !dt_test_python_has("torch"))
        DT_SKIP("no %s with torch: apt-get install python3-torch", PY);
    static char j0[16384], j1[16384], j2[16384];
    snprintf(j0, sizeof j0, "%s",
             nn_seq("9",
                    EMB(17, 6,
                        ", \"mask_zero\": true, \"embeddings_initializer\": "
                        "{\"class_name\": \"RandomNormal\", \"config\": {\"stddev\": 1}}"),
                    L("LayerNormalization", "\"epsilon\": 0.001, \"beta_initializer\": "
                                            "{\"class_name\": \"RandomNormal\", \"config\": {}}"),
                    L("Dense", "\"units\": 5, \"activation\": \"tanh\""),
                    L("GlobalAveragePooling1D", ""), L("Dense", "\"units\": 4"), NULL));
    snprintf(
        j1, sizeof j1, "%s",
        nn_seq("16, 3",
               L("Conv1D", "\"filters\": 4, \"kernel_size\": [3], \"padding\": \"same\", "
                           "\"activation\": \"tanh\", \"bias_initializer\": \"glorot_uniform\""),
               L("Conv1D", "\"filters\": 5, \"kernel_size\": 3, \"padding\": \"causal\", "
                           "\"dilation_rate\": [2], \"activation\": \"tanh\""),
               L("MaxPooling1D", "\"pool_size\": 3, \"strides\": 2, \"padding\": \"same\""),
               L("Conv1D", "\"filters\": 4, \"kernel_size\": 2, \"strides\": 2"),
               L("AveragePooling1D", "\"pool_size\": 2, \"strides\": 1, \"padding\": \"same\""),
               L("LayerNormalization", ""), L("GlobalAveragePooling1D", ""),
               L("Dense", "\"units\": 4"), NULL));
    snprintf(j2, sizeof j2, "%s",
             nn_seq("10, 4",
                    L("Conv1D", "\"filters\": 6, \"kernel_size\": 4, \"padding\": \"same\", "
                                "\"dilation_rate\": 3, \"activation\": \"relu\""),
                    L("AveragePooling1D", "\"pool_size\": 3, \"padding\": \"valid\""),
                    L("TimeDistributed", "\"layer\": {\"class_name\": \"Dense\", \"config\": "
                                         "{\"units\": 5, \"activation\": \"tanh\"}}"),
                    L("MaxPooling1D", "\"pool_size\": 2, \"strides\": 1"),
                    L("GlobalMaxPooling1D", ""), L("Dense", "\"units\": 3"), NULL));
    const par_case cases[] = {
        {j0, true, 17, 6, 4},
        {j1, false, 0, 5, 4},
        {j2, false, 0, 4, 3},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    const char *dir = dt_test_tmpdir();
    char path[1024], cmd[2048];
    dt_err err = {0};
    dt_buf bin;
    dt_buf_init(&bin, 1u << 26);
    cJSON *root = cJSON_CreateObject(), *cl = cJSON_AddArrayToObject(root, "cases");
    dt_model *m[NC];
    nn_data d[NC];
    double loss[NC];
    for (size_t c = 0; c < NC; c++) {
        const par_case *k = &cases[c];
        m[c] = nn_build(k->json, 20 + c);
        d[c] = nn_random(m[c], k->n, DT_NN_LOSS_SPARSE_CE, 30 + c);
        int t = (int)dt_model_input_size(m[c]);
        if (k->ids)
            fill_ids(d[c].x, k->n, t, k->vocab, 40 + c);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "model", cJSON_Parse(k->json));
        cJSON *tl = cJSON_AddArrayToObject(e, "tensors");
        for (size_t w = 0; w < dt_model_weight_count(m[c]); w++) {
            const dt_model_weight *mw = dt_model_weight_at(m[c], w);
            int sh[DT_NN_MAX_RANK];
            for (int i = 0; i < mw->ndim; i++)
                sh[i] = (int)mw->shape[i];
            float *h = nn_wdata_host(m[c], mw);
            add_tensor(tl, &bin, mw->name, h, mw->size, sh, mw->ndim, mw->trainable);
            free(h);
        }
        int64_t is[DT_NN_MAX_RANK];
        int ir = dt_model_input_shape(m[c], is), xs[DT_NN_MAX_RANK + 1] = {k->n};
        for (int i = 0; i < ir; i++)
            xs[i + 1] = (int)is[i];
        add_tensor(tl, &bin, "x", d[c].x, (size_t)k->n * t, xs, ir + 1, false);
        float lab[16];
        for (int i = 0; i < k->n; i++)
            lab[i] = (float)d[c].labels[i];
        add_tensor(tl, &bin, "labels", lab, (size_t)k->n, &k->n, 1, false);
        cJSON_AddItemToArray(cl, e);
        dt_model_batch b = nn_batch(&d[c], DT_NN_LOSS_SPARSE_CE);
        dt_step_stats st;
        ASSERT_OK(dt_model_train_step(m[c], &sce_logits, &b, k->n, &st, &err), &err);
        loss[c] = st.loss;
    }
    char *text = cJSON_Print(root);
    snprintf(path, sizeof path, "%s/in.json", dir);
    ASSERT_OK(dt_file_write_atomic(path, text, strlen(text), &err), &err);
    free(text);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/in.bin", dir);
    ASSERT_OK(dt_file_write_atomic(path, bin.data, bin.len, &err), &err);
    dt_buf_destroy(&bin);
    dt_test_python_cmd(cmd, sizeof cmd, " %s %s", dt_test_src_path("test/ref/seq_ref.py"), dir);
    int rc = system(cmd);
    ASSERT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0);
    char *out;
    size_t len;
    snprintf(path, sizeof path, "%s/out.bin", dir);
    ASSERT_OK(dt_file_read_all(path, 1u << 26, &out, &len, &err), &err);
    const double *ref = (const double *)(void *)out, *end = ref + len / sizeof(double);
    double worst_loss = 0, worst_grad = 0;
    for (size_t c = 0; c < NC; c++) {
        ASSERT_TRUE(ref < end);
        double le = fabs(loss[c] - *ref) / fmax(fabs(*ref), 1e-12);
        ref++;
        printf("  case %zu: loss %.6f (torch %.6f, relative error %.2e)\n", c, loss[c], ref[-1],
               le);
        if (!(le < 1e-5))
            DT_FAIL_("case %zu: loss %.9g, torch %.9g: relative error %.3e above 1e-5", c, loss[c],
                     ref[-1], le);
        worst_loss = fmax(worst_loss, le);
        for (size_t w = 0; w < dt_model_weight_count(m[c]); w++) {
            const dt_model_weight *mw = dt_model_weight_at(m[c], w);
            if (!mw->trainable)
                continue;
            ASSERT_TRUE(ref + mw->size <= end);
            float *hg = nn_wgrad_host(m[c], mw);
            double e = max_rel(hg, ref, mw->size);
            free(hg);
            ref += mw->size;
            printf("    grad %-28s %.2e\n", mw->name, e);
            if (!(e < 1e-5))
                DT_FAIL_("case %zu: gradient of %s: relative error %.3e above 1e-5", c, mw->name,
                         e);
            worst_grad = fmax(worst_grad, e);
        }
        nn_data_free(&d[c]);
        dt_model_free(m[c]);
    }
    ASSERT_TRUE(ref == end);
    printf("worst relative error against float64: loss %.2e, gradients %.2e\n", worst_loss,
           worst_grad);
    free(out);
}
