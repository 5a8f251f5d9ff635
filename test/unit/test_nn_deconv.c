/* test_nn_deconv.c - Conv2DTranspose and grouped Conv2D: Keras's output sizes and parameter
 * counts, refusals that name the option, finite-difference gradients, and whole training steps
 * against PyTorch in float64 (test/ref/conv_model_ref.py). */
#include "core/buf.h"
#include "test_nn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY dt_test_python()

#define DENSE3  "{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}"
#define FLATTEN "{\"class_name\": \"Flatten\", \"config\": {}}"
#define CONV_SAME                                                                                  \
    "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 3, \"kernel_size\": 3, "               \
    "\"padding\": \"same\", \"activation\": \"tanh\"}}"
#define TR(extra)                                                                                  \
    "{\"class_name\": \"Conv2DTranspose\", \"config\": {\"name\": \"t\", \"filters\": 2, "         \
    "\"kernel_size\": 3" extra "}}"
#define GC(extra)                                                                                  \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"g\", \"filters\": 4, \"kernel_size\": " \
    "3" extra "}}"

static const dt_loss sce_logits = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};

static void check(const char *json)
{
    ASSERT_GT(nn_gradcheck(json, sce_logits, 3, 1e-2, 3e-4, 4e-3), 0);
}

static dt_model *load(const char *json, dt_err *err, dt_status *st)
{
    dt_model *m = NULL;
    dt_model_opts o = {.seed = 1};
    *st = dt_model_from_json(json, strlen(json), &o, &m, err);
    return m;
}

/* Layer 1's class, parameters and output shape. */
static void expect_layer1(const char *json, const char *cls, size_t params, int64_t h, int64_t w,
                          int64_t c)
{
    dt_err err = {0};
    dt_status st;
    dt_model *m = load(json, &err, &st);
    ASSERT_OK(st, &err);
    dt_model_layer l;
    dt_model_layer_info(m, 1, &l);
    ASSERT_STREQ(l.class_name, cls);
    ASSERT_EQ(l.params, params);
    ASSERT_EQ(l.ndim, 3);
    ASSERT_EQ(l.shape[0], h);
    ASSERT_EQ(l.shape[1], w);
    ASSERT_EQ(l.shape[2], c);
    dt_model_free(m);
}

DT_TEST(nn_deconv_shapes_and_param_counts)
{
    /* Keras's deconv_output_length on a (5, 6, 3) input, filters 2: kh*kw*filters*in + filters
     * parameters, the kernel stored (kh, kw, filters, in). */
    const size_t p33 = 3 * 3 * 2 * 3 + 2;
    expect_layer1(nn_seq("5, 6, 3", TR(""), NULL), "Conv2DTranspose", p33, 7, 8, 2);
    expect_layer1(nn_seq("5, 6, 3", TR(", \"strides\": 2"), NULL), "Conv2DTranspose", p33, 11, 13,
                  2);
    expect_layer1(nn_seq("5, 6, 3", TR(", \"strides\": 2, \"padding\": \"same\""), NULL),
                  "Conv2DTranspose", p33, 10, 12, 2);
    /* k < s: valid gives in * s */
    expect_layer1(nn_seq("5, 6, 3", TR(", \"strides\": [3, 4], \"use_bias\": false"), NULL),
                  "Conv2DTranspose", p33 - 2, 15, 24, 2);
    /* output_padding: (in - 1) s + k - 2 pad + op, pad = k // 2 for same */
    expect_layer1(nn_seq("5, 6, 3",
                         TR(", \"strides\": 2, \"padding\": \"same\", \"output_padding\": 1"),
                         NULL),
                  "Conv2DTranspose", p33, 10, 12, 2);
    expect_layer1(nn_seq("5, 6, 3",
                         TR(", \"strides\": 2, \"padding\": \"same\", \"output_padding\": 0"),
                         NULL),
                  "Conv2DTranspose", p33, 9, 11, 2);
    expect_layer1(nn_seq("5, 6, 3", TR(", \"strides\": [2, 3], \"output_padding\": [1, 2]"), NULL),
                  "Conv2DTranspose", p33, 12, 20, 2);
    dt_err err = {0};
    dt_status st;
    dt_model *m = load(nn_seq("5, 6, 3", TR(""), NULL), &err, &st);
    ASSERT_OK(st, &err);
    const dt_model_weight *k = dt_model_find_weight(m, "t/kernel");
    ASSERT_TRUE(k != NULL);
    ASSERT_EQ(k->ndim, 4);
    ASSERT_EQ(k->shape[2], 2); /* filters */
    ASSERT_EQ(k->shape[3], 3); /* input channels */
    ASSERT_TRUE(dt_model_find_weight(m, "t/bias") != NULL);
    dt_model_free(m);
}

DT_TEST(nn_deconv_refusals_name_the_option)
{
    nn_refused(nn_seq("5, 6, 3", TR(", \"strides\": 2, \"output_padding\": 2"), NULL),
               "(Conv2DTranspose 't')", "'output_padding'");
    nn_refused(nn_seq("5, 6, 3", TR(", \"output_padding\": [0, -1]"), NULL),
               "(Conv2DTranspose 't')", "'output_padding'");
    nn_refused(nn_seq("5, 6, 3", TR(", \"dilation_rate\": 2"), NULL), "(Conv2DTranspose 't')",
               "'dilation_rate'");
    nn_refused(nn_seq("5, 6, 3", TR(", \"kernel_constraint\": \"non_neg\""), NULL),
               "(Conv2DTranspose 't')", "'kernel_constraint'");
    nn_refused(nn_seq("5, 6, 3", TR(", \"data_format\": \"channels_first\""), NULL),
               "(Conv2DTranspose 't')", "'data_format'");
    nn_refused(nn_seq("5, 6, 3", TR(", \"frobnicate\": 1"), NULL), "(Conv2DTranspose 't')",
               "'frobnicate'");
    /* an even kernel, "same", output_padding 0: the output is one row short of mapping back
     * (TF's conv2d_transpose fails on it when it runs) */
    nn_refused(nn_seq("5, 6, 3",
                      "{\"class_name\": \"Conv2DTranspose\", \"config\": {\"name\": \"t\", "
                      "\"filters\": 2, \"kernel_size\": 4, \"strides\": 2, \"padding\": \"same\", "
                      "\"output_padding\": 0}}",
                      NULL),
               "(Conv2DTranspose 't')", "'output_padding'");
    nn_refused(nn_seq("5, 6, 3",
                      "{\"class_name\": \"Conv2DTranspose\", \"config\": {\"name\": \"t\", "
                      "\"kernel_size\": 3}}",
                      NULL),
               "(Conv2DTranspose 't')", "'filters'");
}

DT_TEST(nn_deconv_grad)
{
    const char *ts[] = {
        TR(""),
        TR(", \"strides\": 2, \"activation\": \"tanh\""),
        TR(", \"strides\": 2, \"padding\": \"same\""),
        TR(", \"strides\": [3, 2], \"padding\": \"same\", \"use_bias\": false"),
        TR(", \"strides\": 2, \"padding\": \"same\", \"output_padding\": 1, "
           "\"kernel_regularizer\": \"l2\""),
        TR(", \"strides\": [2, 3], \"output_padding\": [1, 0], \"activation\": \"swish\""),
        "{\"class_name\": \"Conv2DTranspose\", \"config\": {\"filters\": 2, \"kernel_size\": [2, "
        "1], \"strides\": 3}}",
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        check(nn_seq("4, 3, 2", CONV_SAME, ts[i], FLATTEN, DENSE3, NULL));
}

/* ---- whole training steps against PyTorch in float64 ------------------------------------- */

typedef struct model_case {
    bool transpose;
    int n, h, w, c, filters, kh, kw, sh, sw;
    bool same;
    int op_h, op_w; /* output_padding, -1: None */
    int groups;
} model_case;

/* Input -> Conv2D "pre" (1x1, c -> c, no bias: its kernel gradient carries the layer's input
 * gradient) -> the layer "t" (linear), as a Keras 2 Sequential. */
static const char *case_json(const model_case *k)
{
    static char layer[1024], shape[64];
    char op[64] = "null";
    if (k->op_h >= 0)
        snprintf(op, sizeof op, "[%d, %d]", k->op_h, k->op_w);
    snprintf(layer, sizeof layer,
             "{\"class_name\": \"%s\", \"config\": {\"name\": \"t\", \"filters\": %d, "
             "\"kernel_size\": [%d, %d], \"strides\": [%d, %d], \"padding\": \"%s\", %s%s%s "
             "\"groups\": %d}}",
             k->transpose ? "Conv2DTranspose" : "Conv2D", k->filters, k->kh, k->kw, k->sh, k->sw,
             k->same ? "same" : "valid", k->transpose ? "\"output_padding\": " : "",
             k->transpose ? op : "", k->transpose ? "," : "", k->transpose ? 1 : k->groups);
    snprintf(shape, sizeof shape, "%d, %d, %d", k->h, k->w, k->c);
    return nn_seq(shape,
                  "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"pre\", \"filters\": 0, "
                  "\"kernel_size\": 1, \"use_bias\": false}}",
                  layer, NULL);
}

static void randn(dt_rng *r, float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)dt_rng_normal(r);
}

static double max_rel(const float *a, const double *ref, size_t n)
{
    double md = 0, mb = 1e-12;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs(a[i] - ref[i]));
        mb = fmax(mb, fabs(ref[i]));
    }
    return md / mb;
}

static void torch_parity(const model_case *cases, size_t nc, const char *what)
{
    if (access(PY, X_OK) != 0 || !dt_test_python_has("torch"))
        DT_SKIP("no %s with torch: apt-get install python3-torch", PY);
    const char *dir = dt_test_tmpdir();
    char path[1024], cmd[2048];
    dt_err err = {0};
    dt_rng r;
    dt_rng_seed(&r, 9);
    dt_buf bin;
    dt_buf_init(&bin, 1u << 26);
    cJSON *man = cJSON_CreateArray();
    dt_model **ms = calloc(nc, sizeof *ms);
    float **xs = calloc(nc, sizeof *xs), **ts = calloc(nc, sizeof *ts);
    for (size_t i = 0; i < nc; i++) {
        const model_case *k = &cases[i];
        /* "filters": 0 above is the placeholder of pre's width */
        char *json = strdup(case_json(k));
        char *z = strstr(json, "\"filters\": 0,");
        ASSERT_TRUE(z != NULL);
        char w[16];
        int wl = snprintf(w, sizeof w, "%d", k->c);
        memmove(z + 11 + wl, z + 12, strlen(z + 12) + 1);
        memcpy(z + 11, w, (size_t)wl);
        dt_status st;
        ms[i] = load(json, &err, &st);
        ASSERT_OK(st, &err);
        free(json);
        size_t nx = (size_t)k->n * k->h * k->w * k->c;
        size_t ny = (size_t)k->n * dt_model_output_size(ms[i]);
        xs[i] = malloc(nx * sizeof(float));
        ts[i] = malloc(ny * sizeof(float));
        randn(&r, xs[i], nx);
        randn(&r, ts[i], ny);
        ASSERT_OK(dt_buf_append(&bin, xs[i], nx * sizeof(float), &err), &err);
        const char *ws[] = {"pre/kernel", "t/kernel", "t/bias"};
        for (int j = 0; j < 3; j++) {
            const dt_model_weight *mw = dt_model_find_weight(ms[i], ws[j]);
            ASSERT_TRUE(mw != NULL);
            float *v = malloc(mw->size * sizeof(float));
            randn(&r, v, mw->size);
            if (j == 0) /* pre near the identity keeps the layer's input like x */
                for (int a = 0; a < k->c; a++)
                    v[a * k->c + a] += 1.0f;
            ASSERT_OK(dt_model_set_weight(ms[i], ws[j], v, mw->size, &err), &err);
            ASSERT_OK(dt_buf_append(&bin, v, mw->size * sizeof(float), &err), &err);
            free(v);
        }
        ASSERT_OK(dt_buf_append(&bin, ts[i], ny * sizeof(float), &err), &err);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "kind", k->transpose ? "transpose" : "conv");
        cJSON_AddBoolToObject(e, "same", k->same);
        const char *keys[] = {"n",  "h",  "w",  "c",    "filters", "kh",
                              "kw", "sh", "sw", "op_h", "op_w",    "groups"};
        int vals[] = {k->n,  k->h,  k->w,  k->c,    k->filters, k->kh,
                      k->kw, k->sh, k->sw, k->op_h, k->op_w,    k->groups};
        for (size_t j = 0; j < sizeof vals / sizeof vals[0]; j++)
            cJSON_AddNumberToObject(e, keys[j], vals[j]);
        cJSON_AddItemToArray(man, e);
    }
    char *text = cJSON_Print(man);
    snprintf(path, sizeof path, "%s/in.json", dir);
    ASSERT_OK(dt_file_write_atomic(path, text, strlen(text), &err), &err);
    free(text);
    cJSON_Delete(man);
    snprintf(path, sizeof path, "%s/in.bin", dir);
    ASSERT_OK(dt_file_write_atomic(path, bin.data, bin.len, &err), &err);
    dt_buf_destroy(&bin);
    dt_test_python_cmd(cmd, sizeof cmd, " %s %s", dt_test_src_path("test/ref/conv_model_ref.py"),
                       dir);
    int rc = system(cmd);
    ASSERT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0);
    char *out;
    size_t len;
    snprintf(path, sizeof path, "%s/out.bin", dir);
    ASSERT_OK(dt_file_read_all(path, 1u << 26, &out, &len, &err), &err);
    const double *ref = (const double *)(void *)out, *end = ref + len / sizeof(double);
    double worst = 0;
    dt_loss mse = {.kind = DT_NN_LOSS_MSE};
    for (size_t i = 0; i < nc; i++) {
        const model_case *k = &cases[i];
        int64_t os[DT_NN_MAX_RANK];
        ASSERT_EQ(dt_model_output_shape(ms[i], os), 3);
        ASSERT_TRUE(ref + 3 <= end);
        ASSERT_EQ((int64_t)ref[0], os[0]); /* Keras's output size, derived by the script */
        ASSERT_EQ((int64_t)ref[1], os[1]);
        double loss_ref = ref[2];
        ref += 3;
        dt_model_batch b = {.x = xs[i], .targets = ts[i], .n = k->n};
        dt_step_stats s;
        ASSERT_OK(dt_model_train_step(ms[i], &mse, &b, k->n, &s, &err), &err);
        size_t ny = (size_t)k->n * dt_model_output_size(ms[i]);
        ASSERT_TRUE(ref + ny <= end);
        double e[5];
        e[0] = fabs(s.loss - loss_ref) / fmax(fabs(loss_ref), 1e-12);
        e[1] = max_rel(dt_model_last_predictions(ms[i]), ref, ny);
        ref += ny;
        const char *ws[] = {"pre/kernel", "t/kernel", "t/bias"};
        for (int j = 0; j < 3; j++) {
            const dt_model_weight *mw = dt_model_find_weight(ms[i], ws[j]);
            ASSERT_TRUE(ref + mw->size <= end);
            float *g = nn_wgrad_host(ms[i], mw);
            e[2 + j] = max_rel(g, ref, mw->size);
            ref += mw->size;
            free(g);
        }
        printf("  %s case %zu (%s %dx%d -> %lldx%lld k %dx%d s %dx%d %s op %d,%d groups %d): "
               "loss %.1e y %.1e dx %.1e dkernel %.1e dbias %.1e\n",
               what, i, k->transpose ? "Conv2DTranspose" : "Conv2D", k->h, k->w, (long long)os[0],
               (long long)os[1], k->kh, k->kw, k->sh, k->sw, k->same ? "same" : "valid", k->op_h,
               k->op_w, k->groups, e[0], e[1], e[2], e[3], e[4]);
        for (int t = 0; t < 5; t++) {
            worst = fmax(worst, e[t]);
            if (!(e[t] < 1e-5))
                DT_FAIL_("%s case %zu: tensor %d (loss, y, dpre, dkernel, dbias): relative "
                         "error %.3e above 1e-5",
                         what, i, t, e[t]);
        }
        dt_model_free(ms[i]);
        free(xs[i]);
        free(ts[i]);
    }
    ASSERT_TRUE(ref == end);
    printf("%s: worst relative error against float64 PyTorch: %.3e\n", what, worst);
    free(out);
    free(ms);
    free(xs);
    free(ts);
}

DT_TEST_TIMEOUT(nn_deconv_torch_parity, 120)
{
    /* odd and even sizes, strides 1, 2, 3, kernels smaller and larger than the stride */
    const model_case cases[] = {
        {true, 2, 5, 4, 3, 4, 3, 3, 1, 1, false, -1, -1, 1},
        {true, 2, 5, 4, 3, 4, 3, 3, 1, 1, true, -1, -1, 1},
        {true, 2, 5, 4, 3, 2, 3, 3, 2, 2, false, -1, -1, 1},
        {true, 2, 5, 4, 3, 2, 3, 3, 2, 2, true, -1, -1, 1},
        {true, 2, 4, 5, 2, 3, 4, 4, 2, 2, true, -1, -1, 1},
        {true, 2, 4, 5, 2, 3, 3, 2, 3, 3, true, -1, -1, 1},
        {true, 2, 4, 5, 2, 3, 2, 2, 3, 3, false, -1, -1, 1},
        {true, 2, 3, 4, 2, 3, 5, 5, 3, 3, true, -1, -1, 1},
        {true, 2, 5, 4, 3, 2, 3, 3, 2, 2, true, 1, 1, 1},
        {true, 2, 5, 4, 3, 2, 3, 3, 2, 2, true, 0, 0, 1},
        {true, 2, 5, 4, 3, 2, 3, 3, 2, 3, false, 1, 2, 1},
        {true, 2, 4, 4, 2, 3, 4, 4, 2, 2, true, 1, 1, 1},
        {true, 2, 4, 3, 2, 2, 1, 2, 3, 2, true, 2, 1, 1},
    };
    torch_parity(cases, sizeof cases / sizeof cases[0], "Conv2DTranspose");
}

/* ---- Conv2D groups -------------------------------------------------------------------------- */

DT_TEST(nn_groups_shapes_and_param_counts)
{
    /* Keras: kernel (kh, kw, in / groups, filters), kh*kw*(in/groups)*filters + filters */
    expect_layer1(nn_seq("7, 6, 6", GC(", \"groups\": 2"), NULL), "Conv2D", 3 * 3 * 3 * 4 + 4, 5, 4,
                  4);
    expect_layer1(
        nn_seq("7, 6, 6", GC(", \"groups\": 2, \"strides\": 2, \"padding\": \"same\""), NULL),
        "Conv2D", 3 * 3 * 3 * 4 + 4, 4, 3, 4);
    dt_err err = {0};
    dt_status st;
    dt_model *m = load(nn_seq("7, 6, 8", GC(", \"groups\": 4"), NULL), &err, &st);
    ASSERT_OK(st, &err);
    const dt_model_weight *k = dt_model_find_weight(m, "g/kernel");
    ASSERT_TRUE(k != NULL);
    ASSERT_EQ(k->shape[2], 2);
    ASSERT_EQ(k->shape[3], 4);
    dt_model_free(m);
    nn_refused(nn_seq("7, 6, 6", GC(", \"groups\": 3"), NULL), "(Conv2D 'g')", "'groups'");
    nn_refused(nn_seq("7, 6, 5", GC(", \"groups\": 2"), NULL), "(Conv2D 'g')", "'groups'");
    nn_refused(nn_seq("7, 6, 6", GC(", \"groups\": 0"), NULL), "(Conv2D 'g')", "'groups'");
}

DT_TEST(nn_groups_grad)
{
    const char *gs[] = {
        GC(", \"groups\": 2"),
        GC(", \"groups\": 4, \"padding\": \"same\", \"strides\": 2, \"activation\": \"tanh\""),
        GC(", \"groups\": 2, \"dilation_rate\": 2, \"padding\": \"same\", \"use_bias\": false"),
        "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 4, \"kernel_size\": 1, "
        "\"groups\": 4, \"activation\": \"sigmoid\"}}",
    };
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
        check(nn_seq("6, 5, 2",
                     "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 4, \"kernel_size\": "
                     "3, \"padding\": \"same\", \"activation\": \"tanh\"}}",
                     gs[i], FLATTEN, DENSE3, NULL));
    /* a grouped conv with relu in front of a max pool (the pool applies the relu); a finer
     * step: one of 1e-2 crosses the relu's kink or changes a window's winner */
    ASSERT_GT(
        nn_gradcheck(nn_seq("6, 6, 4",
                            GC(", \"groups\": 2, \"padding\": \"same\", \"activation\": \"relu\""),
                            "{\"class_name\": \"MaxPooling2D\", \"config\": {}}", FLATTEN, DENSE3,
                            NULL),
                     sce_logits, 3, 1e-3, 3e-4, 4e-3),
        0);
}

DT_TEST_TIMEOUT(nn_groups_torch_parity, 120)
{
    const model_case cases[] = {
        {false, 2, 7, 6, 4, 6, 3, 3, 1, 1, false, -1, -1, 2},
        {false, 2, 7, 6, 4, 6, 3, 3, 1, 1, true, -1, -1, 2},
        {false, 2, 7, 6, 6, 6, 3, 3, 2, 2, true, -1, -1, 3},
        {false, 2, 8, 5, 8, 4, 2, 3, 2, 1, true, -1, -1, 4},
        {false, 2, 6, 6, 4, 8, 1, 1, 1, 1, false, -1, -1, 4},
        {false, 2, 9, 7, 6, 6, 3, 3, 3, 3, false, -1, -1, 6},
    };
    torch_parity(cases, sizeof cases / sizeof cases[0], "grouped Conv2D");
}
