/* test_nn_attn.c - MultiHeadAttention (layers_attn.c): Keras 3 and Keras 2 call forms, Keras's
 * weight names, shapes and parameter counts, refusals naming the option, finite-difference
 * gradients (self- and cross-attention, a separate key, causal masking, attention dropout) and
 * float64 PyTorch parity of the loss and every gradient (test/ref/attn_ref.py). */
#include "core/buf.h"
#include "test_nn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY dt_test_python()

static const dt_loss sce_logits = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};

/* A Keras 3 Functional model, built layer by layer. */
typedef struct fmodel {
    cJSON *root, *layers;
} fmodel;

static fmodel fm_new(const char *batch_shape)
{
    fmodel f = {.root = cJSON_CreateObject(), .layers = cJSON_CreateArray()};
    cJSON_AddStringToObject(f.root, "class_name", "Functional");
    cJSON *cfg = cJSON_AddObjectToObject(f.root, "config");
    cJSON_AddStringToObject(cfg, "name", "f");
    cJSON_AddItemToObject(cfg, "layers", f.layers);
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_shape\": "
             "%s, \"dtype\": \"float32\", \"sparse\": false, \"name\": \"in\"}, "
             "\"inbound_nodes\": []}",
             batch_shape);
    cJSON_AddItemToArray(f.layers, cJSON_Parse(buf));
    cJSON_AddItemToObject(cfg, "input_layers", cJSON_Parse("[[\"in\", 0, 0]]"));
    return f;
}

static cJSON *tensor(const char *producer)
{
    char buf[256];
    snprintf(buf, sizeof buf,
             "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null], \"dtype\": "
             "\"float32\", \"keras_history\": [\"%s\", 0, 0]}}",
             producer);
    return cJSON_Parse(buf);
}

/* Adds cls named nm with config object text cfg ("{...}"), positional inputs args (a
 * comma-separated list of producers) and keyword arguments kw (JSON text; "$name" strings are
 * replaced by tensors of that producer). */
static void fm_add(fmodel *f, const char *cls, const char *nm, const char *cfg, const char *args,
                   const char *kw)
{
    cJSON *l = cJSON_CreateObject();
    cJSON_AddStringToObject(l, "class_name", cls);
    cJSON_AddStringToObject(l, "name", nm);
    cJSON *c = cJSON_Parse(cfg);
    ASSERT_TRUE(c != NULL);
    cJSON_AddStringToObject(c, "name", nm);
    cJSON_AddItemToObject(l, "config", c);
    cJSON *node = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(node, "args");
    char list[256];
    snprintf(list, sizeof list, "%s", args);
    for (char *save, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        cJSON_AddItemToArray(a, tensor(p));
    cJSON *k = cJSON_Parse(kw ? kw : "{}");
    ASSERT_TRUE(k != NULL);
    for (cJSON *e = k->child, *next; e; e = next) {
        next = e->next; /* e is freed when replaced */
        if (cJSON_IsString(e) && e->valuestring[0] == '$') {
            char key[64], prod[64];
            snprintf(key, sizeof key, "%s", e->string);
            snprintf(prod, sizeof prod, "%s", e->valuestring + 1);
            cJSON_ReplaceItemInObject(k, key, tensor(prod));
        }
    }
    cJSON_AddItemToObject(node, "kwargs", k);
    cJSON *nodes = cJSON_AddArrayToObject(l, "inbound_nodes");
    cJSON_AddItemToArray(nodes, node);
    cJSON_AddItemToArray(f->layers, l);
}

/* The JSON text (static buffer), output layer out; frees the model. */
static const char *fm_done(fmodel *f, const char *out)
{
    static char buf[32768];
    char o[128];
    snprintf(o, sizeof o, "[[\"%s\", 0, 0]]", out);
    cJSON_AddItemToObject(cJSON_GetObjectItem(f->root, "config"), "output_layers", cJSON_Parse(o));
    char *text = cJSON_PrintUnformatted(f->root);
    snprintf(buf, sizeof buf, "%s", text);
    free(text);
    cJSON_Delete(f->root);
    return buf;
}

#define MHA_CFG(extra) "{\"num_heads\": 2, \"key_dim\": 3, \"value_dim\": 4" extra "}"

/* x (5, 6) -> Dense tanh -> MHA(d, d, ...) -> Flatten -> Dense(3). */
static const char *self_model(const char *mha_cfg, const char *kw)
{
    fmodel f = fm_new("[null, 5, 6]");
    fm_add(&f, "Dense", "d", "{\"units\": 6, \"activation\": \"tanh\"}", "in", NULL);
    fm_add(&f, "MultiHeadAttention", "mha", mha_cfg, "d,d", kw);
    fm_add(&f, "Flatten", "fl", "{}", "mha", NULL);
    fm_add(&f, "Dense", "out", "{\"units\": 3}", "fl", NULL);
    return fm_done(&f, "out");
}

/* Token ids (5) -> Embedding(9, 6, mask_zero) -> MHA(e, e, kw) -> GlobalAveragePooling1D ->
 * Dense(3). */
static const char *embed_model(const char *kw)
{
    fmodel f = fm_new("[null, 5]");
    fm_add(&f, "Embedding", "emb", "{\"input_dim\": 9, \"output_dim\": 6, \"mask_zero\": true}",
           "in", NULL);
    fm_add(&f, "MultiHeadAttention", "mha", MHA_CFG(""), "emb,emb", kw[0] ? kw : NULL);
    fm_add(&f, "GlobalAveragePooling1D", "gp", "{}", "mha", NULL);
    fm_add(&f, "Dense", "out", "{\"units\": 3}", "gp", NULL);
    return fm_done(&f, "out");
}

static void check(const char *json)
{
    ASSERT_GT(nn_gradcheck(json, sce_logits, 3, 1e-2, 3e-4, 4e-3), 0);
}

DT_TEST(nn_attn_shapes_names_counts)
{
    dt_model *m = nn_build(self_model(MHA_CFG(""), NULL), 1);
    /* Keras: query/key kernels (6, 2, 3) + bias (2, 3), value (6, 2, 4) + (2, 4),
     * attention_output (2, 4, 6) + (6): 42 + 42 + 56 + 54 = 194. */
    const char *names[] = {"mha/query/kernel",
                           "mha/query/bias",
                           "mha/key/kernel",
                           "mha/key/bias",
                           "mha/value/kernel",
                           "mha/value/bias",
                           "mha/attention_output/kernel",
                           "mha/attention_output/bias"};
    size_t total = 0;
    int found = 0;
    for (size_t i = 0; i < dt_model_weight_count(m); i++) {
        const dt_model_weight *w = dt_model_weight_at(m, i);
        for (int j = 0; j < 8; j++)
            if (!strcmp(w->name, names[j])) {
                found++;
                total += w->size;
                if (j == 0)
                    ASSERT_TRUE(w->ndim == 3 && w->shape[0] == 6 && w->shape[1] == 2 &&
                                w->shape[2] == 3);
                if (j == 6)
                    ASSERT_TRUE(w->ndim == 3 && w->shape[0] == 2 && w->shape[1] == 4 &&
                                w->shape[2] == 6);
            }
    }
    ASSERT_EQ(found, 8);
    ASSERT_EQ(total, (size_t)194);
    dt_model_free(m);

    /* output_shape and use_bias=false: 6*2*3 * 2 + 6*2*4 + 2*4*7 = 176, output (5, 7). */
    m = nn_build(self_model(MHA_CFG(", \"output_shape\": [7], \"use_bias\": false"), NULL), 1);
    total = 0;
    found = 0;
    for (size_t i = 0; i < dt_model_weight_count(m); i++) {
        const dt_model_weight *w = dt_model_weight_at(m, i);
        if (!strncmp(w->name, "mha/", 4)) {
            found++;
            total += w->size;
        }
    }
    ASSERT_EQ(found, 4);
    ASSERT_EQ(total, (size_t)176);
    dt_model_free(m);
}

DT_TEST(nn_attn_grad_self)
{
    check(self_model(MHA_CFG(""), NULL));
    check(self_model(MHA_CFG(", \"output_shape\": 5, \"use_bias\": false"), NULL));
}

DT_TEST(nn_attn_grad_causal_dropout)
{
    check(self_model(MHA_CFG(""), "{\"use_causal_mask\": true}"));
    /* Dropout on the attention weights: the checker rewinds the draws for every evaluation. */
    check(self_model(MHA_CFG(", \"dropout\": 0.3"), "{\"use_causal_mask\": false}"));
}

DT_TEST(nn_attn_grad_cross_with_key)
{
    /* query (5, 4), value (5, 5) and key (5, 3) from three Dense layers of one input; the key
     * by name, as Keras 3 writes mha(q, v, key=k). */
    fmodel f = fm_new("[null, 5, 6]");
    fm_add(&f, "Dense", "q", "{\"units\": 4, \"activation\": \"tanh\"}", "in", NULL);
    fm_add(&f, "Dense", "v", "{\"units\": 5, \"activation\": \"tanh\"}", "in", NULL);
    fm_add(&f, "Dense", "k", "{\"units\": 3, \"activation\": \"tanh\"}", "in", NULL);
    fm_add(&f, "MultiHeadAttention", "mha",
           "{\"num_heads\": 3, \"key_dim\": 2, \"value_dim\": 2, \"output_shape\": 4}", "q,v",
           "{\"key\": \"$k\"}");
    fm_add(&f, "GlobalAveragePooling1D", "gp", "{}", "mha", NULL);
    fm_add(&f, "Dense", "out", "{\"units\": 3}", "gp", NULL);
    check(fm_done(&f, "out"));
}

DT_TEST(nn_attn_keras2_call_form)
{
    /* tf.keras writes mha(d, d) as [["d", 0, 0, {"value": ["d", 0, 0]}]]. */
    const char *json =
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_input_shape\": "
        "[null, 5, 6], \"name\": \"in\"}, \"inbound_nodes\": []},"
        "{\"class_name\": \"Dense\", \"name\": \"d\", \"config\": {\"name\": \"d\", \"units\": 6}, "
        "\"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
        "{\"class_name\": \"MultiHeadAttention\", \"name\": \"mha\", \"config\": {\"name\": "
        "\"mha\", \"num_heads\": 2, \"key_dim\": 3, \"value_dim\": 3, \"dropout\": 0.0, "
        "\"use_bias\": true, \"output_shape\": null, \"attention_axes\": [1], "
        "\"kernel_initializer\": {\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": "
        "null}}, "
        "\"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, "
        "\"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null, "
        "\"kernel_constraint\": null, \"bias_constraint\": null, \"query_shape\": [null, 5, 6], "
        "\"key_shape\": [null, 5, 6], \"value_shape\": [null, 5, 6]}, "
        "\"inbound_nodes\": [[[\"d\", 0, 0, {\"value\": [\"d\", 0, 0], \"use_causal_mask\": "
        "true}]]]},"
        "{\"class_name\": \"Flatten\", \"name\": \"fl\", \"config\": {\"name\": \"fl\"}, "
        "\"inbound_nodes\": [[[\"mha\", 0, 0, {}]]]},"
        "{\"class_name\": \"Dense\", \"name\": \"out\", \"config\": {\"name\": \"out\", \"units\": "
        "2}, \"inbound_nodes\": [[[\"fl\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"out\", 0, 0]]}}";
    dt_model *m = nn_build(json, 1);
    ASSERT_EQ(dt_model_output_size(m), (size_t)2);
    dt_model_free(m);
    check(json);
}

DT_TEST(nn_attn_refusals)
{
    nn_refused(self_model("{\"key_dim\": 3}", NULL), "(MultiHeadAttention 'mha')", "'num_heads'");
    nn_refused(self_model("{\"num_heads\": 2}", NULL), "(MultiHeadAttention 'mha')", "'key_dim'");
    nn_refused(self_model(MHA_CFG(", \"dropout\": 1.5"), NULL), "'mha'", "'dropout'");
    nn_refused(self_model(MHA_CFG(", \"attention_axes\": [2]"), NULL), "'mha'", "'attention_axes'");
    nn_refused(self_model(MHA_CFG(", \"output_shape\": [2, 3]"), NULL), "'mha'", "'output_shape'");
    nn_refused(self_model(MHA_CFG(", \"kernel_constraint\": \"non_neg\""), NULL), "'mha'",
               "'kernel_constraint'");
    nn_refused(self_model(MHA_CFG(", \"flavour\": 1"), NULL), "mha", "flavour");
    nn_refused(self_model(MHA_CFG(""), "{\"return_attention_scores\": true}"), "'mha'",
               "'return_attention_scores'");
    nn_refused(self_model(MHA_CFG(""), "{\"attention_mask\": \"$d\"}"), "'mha'",
               "'attention_mask'");

    fmodel f = fm_new("[null, 5, 6]");
    fm_add(&f, "Dense", "d", "{\"units\": 6}", "in", NULL);
    fm_add(&f, "MultiHeadAttention", "mha", MHA_CFG(""), "d", NULL);
    nn_refused(fm_done(&f, "mha"), "'mha'", "mha(x, x)");

    f = fm_new("[null, 4, 4, 2]");
    fm_add(&f, "MultiHeadAttention", "mha", MHA_CFG(""), "in,in", NULL);
    nn_refused(fm_done(&f, "mha"), "'mha'", "(steps, features)");
}

/* ---- float64 PyTorch parity ---------------------------------------------------------------- */

static cJSON *floats(const float *x, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

/* One training step of json (self_model's, or embed_model's with embed) on a batch of 4 against
 * attn_ref.py; returns the largest gradient error relative to each weight's largest gradient. */
static double parity(const char *json, bool causal, bool embed)
{
    dt_model *m = nn_build(json, 3);
    int n = 4;
    nn_data d = nn_random(m, n, DT_NN_LOSS_SPARSE_CE, 9);
    if (embed) { /* ids 1..8, then padding: sample s has 2 + s real steps of 5 */
        dt_rng r;
        dt_rng_seed(&r, 4);
        for (int i = 0; i < n; i++)
            for (int t = 0; t < 5; t++)
                d.x[i * 5 + t] = t < 2 + i ? (float)(1 + dt_rng_below(&r, 8)) : 0.0f;
    }
    dt_model_batch b = nn_batch(&d, DT_NN_LOSS_SPARSE_CE);
    dt_err err = {0};
    dt_step_stats s;
    cJSON *spec = cJSON_CreateObject();
    cJSON_AddNumberToObject(spec, "n", n);
    cJSON_AddNumberToObject(spec, "t", 5);
    cJSON_AddNumberToObject(spec, "f", 6);
    cJSON_AddNumberToObject(spec, "key_dim", 3);
    cJSON_AddBoolToObject(spec, "causal", causal);
    cJSON_AddBoolToObject(spec, "embed", embed);
    cJSON_AddItemToObject(spec, "x", floats(d.x, (size_t)n * (embed ? 5 : 30)));
    cJSON *labels = cJSON_AddArrayToObject(spec, "labels");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(labels, cJSON_CreateNumber(d.labels[i]));
    cJSON *ws = cJSON_AddObjectToObject(spec, "weights");
    for (size_t i = 0; i < dt_model_weight_count(m); i++) {
        const dt_model_weight *w = dt_model_weight_at(m, i);
        cJSON *e = cJSON_AddObjectToObject(ws, w->name);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int j = 0; j < w->ndim; j++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)w->shape[j]));
        float *h = nn_wdata_host(m, w);
        cJSON_AddItemToObject(e, "data", floats(h, w->size));
        free(h);
    }
    ASSERT_OK(dt_model_train_step(m, &sce_logits, &b, n, &s, &err), &err);
    char in[1024], out[1024], cmd[4096];
    snprintf(in, sizeof in, "%s/attn_in.json", dt_test_tmpdir());
    snprintf(out, sizeof out, "%s/attn_out.json", dt_test_tmpdir());
    char *text = cJSON_PrintUnformatted(spec);
    ASSERT_OK(dt_file_write_atomic(in, text, strlen(text), &err), &err);
    free(text);
    cJSON_Delete(spec);
    dt_test_python_cmd(cmd, sizeof cmd, " %s %s %s", dt_test_src_path("test/ref/attn_ref.py"), in,
                       out);
    int rc = system(cmd);
    ASSERT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0);
    char *body;
    size_t len;
    ASSERT_OK(dt_file_read_all(out, 1u << 24, &body, &len, &err), &err);
    cJSON *ref = cJSON_ParseWithLength(body, len);
    free(body);
    ASSERT_TRUE(ref != NULL);
    double loss_ref = cJSON_GetObjectItem(ref, "loss")->valuedouble;
    ASSERT_TRUE(fabs(s.loss - loss_ref) <= 1e-5 * fmax(1.0, fabs(loss_ref)));
    double worst = 0;
    for (size_t i = 0; i < dt_model_weight_count(m); i++) {
        const dt_model_weight *w = dt_model_weight_at(m, i);
        cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "grads"), w->name);
        ASSERT_TRUE(g != NULL);
        ASSERT_EQ((size_t)cJSON_GetArraySize(g), w->size);
        /* key/bias's gradient is 0 in exact arithmetic (it shifts a softmax row by a constant):
         * rounding noise is measured against 1e-3, not against torch's 1e-17. */
        double md = 0, mb = 1e-3;
        size_t j = 0;
        cJSON *e;
        float *wg = nn_wgrad_host(m, w);
        cJSON_ArrayForEach(e, g)
        {
            md = fmax(md, fabs(wg[j] - e->valuedouble));
            mb = fmax(mb, fabs(e->valuedouble));
            j++;
        }
        free(wg);
        printf("  %-28s max |grad - torch| / max |torch| = %.2e\n", w->name, md / mb);
        worst = fmax(worst, md / mb);
    }
    cJSON_Delete(ref);
    nn_data_free(&d);
    dt_model_free(m);
    return worst;
}

DT_TEST_TIMEOUT(nn_attn_torch_parity, 120)
{
    if (access(PY, X_OK) != 0 || !dt_test_python_has("torch"))
        DT_SKIP("no %s with torch: apt-get install python3-torch", PY);
    double e = parity(self_model(MHA_CFG(""), NULL), false, false);
    printf("self-attention: worst %.2e\n", e);
    ASSERT_TRUE(e < 1e-5);
    e = parity(self_model(MHA_CFG(""), "{\"use_causal_mask\": true}"), true, false);
    printf("causal self-attention: worst %.2e\n", e);
    ASSERT_TRUE(e < 1e-5);
    /* The Embedding's mask reaches the attention (query and value) and the pooling after it. */
    e = parity(embed_model(""), false, true);
    printf("masked self-attention: worst %.2e\n", e);
    ASSERT_TRUE(e < 1e-5);
    e = parity(embed_model("{\"use_causal_mask\": true}"), true, true);
    printf("masked causal self-attention: worst %.2e\n", e);
    ASSERT_TRUE(e < 1e-5);
}
