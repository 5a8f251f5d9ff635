/* test_nn_vision.c - the vision layers of layers_vision.c: Keras's shapes, parameter counts and
 * weight names, refusals that name the option, finite-difference gradients, and the depthwise
 * kernels against PyTorch in float64 (test/ref/conv_ref.py). */
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
#define DW(extra) "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"kernel_size\": 3" extra "}}"

/* A Functional layer: "cfg" continues the config after its name, "inb" lists inbound tensors. */
#define FL(cls, nm, cfg, inb)                                                                      \
    "{\"class_name\": \"" cls "\", \"name\": \"" nm "\", \"config\": {\"name\": \"" nm "\"" cfg    \
    "}, \"inbound_nodes\": [[" inb "]]}"
#define T(nm) "[\"" nm "\", 0, 0, {}]"

static const dt_loss sce_logits = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};

static void check(const char *json)
{
    ASSERT_GT(nn_gradcheck(json, sce_logits, 3, 1e-2, 3e-4, 4e-3), 0);
}

static void fine_check(const char *json)
{
    ASSERT_GT(nn_gradcheck(json, sce_logits, 3, 1e-3, 3e-4, 4e-3), 0);
}

static dt_model *load(const char *json, dt_err *err, dt_status *st)
{
    dt_model *m = NULL;
    dt_model_opts o = {.seed = 1};
    *st = dt_model_from_json(json, strlen(json), &o, &m, err);
    return m;
}

/* Three tanh convs over a (4, 4, 2) input, merged by cls (two or three inputs), then a Dense. */
static const char *merge_model(const char *cls, bool three)
{
    static char buf[4096];
    snprintf(
        buf, sizeof buf,
        "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"batch_input_shape\": "
        "[null, 4, 4, 2], \"name\": \"in\"}, \"inbound_nodes\": []}," FL(
            "Conv2D", "c1",
            ", \"filters\": 3, \"kernel_size\": 3, \"padding\": \"same\", \"activation\": "
            "\"tanh\"",
            T("in")) "," FL("Conv2D", "c2",
                            ", \"filters\": 3, \"kernel_size\": 3, \"padding\": \"same\", "
                            "\"activation\": \"tanh\"",
                            T("c1")) "," FL("Conv2D", "c3",
                                            ", \"filters\": 3, \"kernel_size\": 2, \"padding\": "
                                            "\"same\", \"activation\": \"tanh\"",
                                            T("in")) ","
                                                     "{\"class_name\": \"%s\", \"name\": \"m\", "
                                                     "\"config\": {\"name\": \"m\"}, "
                                                     "\"inbound_nodes\": [[" T("c1") ", " T("c2") "%s]]}," FL(
                                                         "Flatten", "fl", "",
                                                         T("m")) "," FL("Dense", "out",
                                                                        ", "
                                                                        "\"units"
                                                                        "\": 3",
                                                                        T("fl")) "],"
                                                                                 "\"input_layers\":"
                                                                                 " [[\"in\", 0, "
                                                                                 "0]], "
                                                                                 "\"output_"
                                                                                 "layers\": "
                                                                                 "[[\"out\", 0, "
                                                                                 "0]]}}",
        cls, three ? ", " T("c3") : "");
    return buf;
}

DT_TEST(nn_vision_grad_merge_layers)
{
    /* c1 feeds both the merge and c2, so its gradient is accumulated across consumers. */
    check(merge_model("Multiply", false));
    check(merge_model("Multiply", true));
    check(merge_model("Subtract", false));
    check(merge_model("Average", false));
    check(merge_model("Average", true));
    check(merge_model("Maximum", false));
    check(merge_model("Maximum", true));
}

DT_TEST(nn_vision_merge_values)
{
    /* Maximum's ties go to the first input; Subtract takes exactly two inputs. */
    const float a[4] = {1, -2, 3, 0}, b[4] = {1, 5, -3, 0}, c3[4] = {0, 5, 4, 2};
    const float *xs[3] = {a, b, c3};
    float y[4], dx[4], dy[4] = {1, 1, 1, 1};
    uint8_t arg[4];
    const dt_nn_ops *o = dt_nn_ops_cpu();
    o->max_fwd(4, 3, xs, y, arg);
    ASSERT_FEQ(y[0], 1.0f);
    ASSERT_FEQ(y[1], 5.0f);
    ASSERT_FEQ(y[2], 4.0f);
    ASSERT_FEQ(y[3], 2.0f);
    ASSERT_EQ(arg[0], 0);
    ASSERT_EQ(arg[1], 1); /* b and c3 tie at 5: the earlier one */
    o->max_bwd(4, 1, arg, dy, dx, false);
    ASSERT_FEQ(dx[0], 0.0f);
    ASSERT_FEQ(dx[1], 1.0f);
    ASSERT_FEQ(dx[2], 0.0f);
    nn_refused(merge_model("Subtract", true), "(Subtract 'm')", "exactly 2 inputs");
}

DT_TEST(nn_vision_grad_cropping2d)
{
    const char *crops[] = {
        "{\"class_name\": \"Cropping2D\", \"config\": {\"cropping\": [[1, 0], [2, 1]]}}",
        "{\"class_name\": \"Cropping2D\", \"config\": {\"cropping\": 1}}",
        "{\"class_name\": \"Cropping2D\", \"config\": {\"cropping\": [0, 1]}}",
    };
    for (size_t i = 0; i < sizeof crops / sizeof crops[0]; i++)
        check(nn_seq("5, 6, 2", CONV_SAME, crops[i], FLATTEN, DENSE3, NULL));
}

DT_TEST(nn_vision_grad_depthwise)
{
    const char *dws[] = {
        DW(""),
        DW(", \"padding\": \"same\", \"depth_multiplier\": 2, \"activation\": \"tanh\""),
        DW(", \"padding\": \"same\", \"strides\": 2"),
        DW(", \"strides\": [2, 1], \"depth_multiplier\": 3, \"use_bias\": false"),
        DW(", \"padding\": \"same\", \"dilation_rate\": 2, \"activation\": \"tanh\""),
        DW(", \"activation\": \"swish\""), /* reads z: relu kinks at eps 1e-2 */
        DW(", \"dilation_rate\": [2, 1], \"depth_multiplier\": 2"),
        "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"kernel_size\": [2, 3], "
        "\"padding\": \"same\", \"strides\": 2}}",
    };
    for (size_t i = 0; i < sizeof dws / sizeof dws[0]; i++)
        check(nn_seq("7, 6, 2", CONV_SAME, dws[i], FLATTEN, DENSE3, NULL));
    /* MobileNetV2's block: depthwise, batch norm, ReLU(6.0), then a 1x1 projection. Batch norm
     * centres the ReLU's input on its kink, where one step of 1e-2 crosses it (Conv2D in the
     * depthwise's place fails the same way): a finer step, on an input whose draw has no kink
     * within 1e-3. */
    fine_check(
        nn_seq("6, 5, 2", CONV_SAME, DW(", \"padding\": \"same\", \"use_bias\": false"),
               "{\"class_name\": \"BatchNormalization\", \"config\": {}}",
               "{\"class_name\": \"ReLU\", \"config\": {\"max_value\": 6.0, "
               "\"negative_slope\": 0.0, \"threshold\": 0.0}}",
               "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 2, \"kernel_size\": 1}}",
               FLATTEN, DENSE3, NULL));
}

DT_TEST(nn_vision_grad_conv2d_dilation)
{
    const char *convs[] = {
        "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 3, \"kernel_size\": 3, "
        "\"dilation_rate\": 2, \"padding\": \"same\", \"activation\": \"tanh\"}}",
        "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 2, \"kernel_size\": [2, 3], "
        "\"dilation_rate\": [3, 1], \"use_bias\": false}}",
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++)
        check(nn_seq("7, 6, 2", CONV_SAME, convs[i], FLATTEN, DENSE3, NULL));
}

#define SEP(extra)                                                                                 \
    "{\"class_name\": \"SeparableConv2D\", \"config\": {\"filters\": 3, \"kernel_size\": 3" extra  \
    "}}"

DT_TEST(nn_vision_grad_separable)
{
    const char *seps[] = {
        SEP(""),
        SEP(", \"padding\": \"same\", \"depth_multiplier\": 2, \"activation\": \"tanh\""),
        SEP(", \"padding\": \"same\", \"strides\": 2, \"use_bias\": false"),
        SEP(", \"dilation_rate\": 2, \"activation\": \"swish\", \"pointwise_regularizer\": "
            "\"l2\", \"depthwise_regularizer\": \"l1\""),
    };
    for (size_t i = 0; i < sizeof seps / sizeof seps[0]; i++)
        check(nn_seq("7, 6, 2", CONV_SAME, seps[i], FLATTEN, DENSE3, NULL));
}

DT_TEST(nn_vision_spatial_dropout2d)
{
    /* The masks are rewound with the dropout stream, so the differences see the same mask. */
    check(nn_seq("5, 4, 3", CONV_SAME,
                 "{\"class_name\": \"SpatialDropout2D\", \"config\": {\"rate\": 0.5}}", FLATTEN,
                 DENSE3, NULL));
    /* Whole channels drop: with x = 1 and a 1-unit linear Dense of ones, the kernel's gradient
     * is the mask times one scalar, so it is constant over each channel's pixels. */
    dt_model *m = nn_build(nn_seq("3, 3, 16",
                                  "{\"class_name\": \"SpatialDropout2D\", \"config\": "
                                  "{\"rate\": 0.5}}",
                                  FLATTEN,
                                  "{\"class_name\": \"Dense\", \"config\": {\"units\": 1, "
                                  "\"use_bias\": false, \"kernel_initializer\": \"ones\"}}",
                                  NULL),
                           3);
    float x[144], target = 0;
    for (int i = 0; i < 144; i++)
        x[i] = 1.0f;
    dt_loss loss = {.kind = DT_NN_LOSS_MSE};
    dt_model_batch b = {.x = x, .targets = &target, .n = 1};
    dt_step_stats st;
    dt_err err = {0};
    ASSERT_OK(dt_model_train_step(m, &loss, &b, 1, &st, &err), &err);
    const dt_model_weight *w = dt_model_weight_at(m, 0);
    float *g = nn_wgrad_host(m, w);
    int kept = 0, dropped = 0;
    for (int ch = 0; ch < 16; ch++) {
        for (int p = 1; p < 9; p++)
            ASSERT_TRUE(g[p * 16 + ch] == g[ch]);
        if (g[ch] == 0)
            dropped++;
        else
            kept++;
    }
    free(g);
    ASSERT_GT(kept, 0);
    ASSERT_GT(dropped, 0);
    /* Inference passes x through. */
    float y;
    ASSERT_OK(dt_model_predict(m, x, 1, &y, &err), &err);
    ASSERT_TRUE(fabsf(y - 144.0f) < 1e-3f);
    dt_model_free(m);
    nn_refused(nn_seq("4, 4, 2",
                      "{\"class_name\": \"SpatialDropout2D\", \"config\": {\"name\": \"s\", "
                      "\"rate\": 0.5, \"noise_shape\": [null, 1, 1, 2]}}",
                      NULL),
               "(SpatialDropout2D 's')", "'noise_shape'");
}

static void expect_row(dt_model *m, size_t i, const char *cls, size_t params, int64_t h, int64_t w,
                       int64_t c)
{
    dt_model_layer l;
    dt_model_layer_info(m, i, &l);
    ASSERT_STREQ(l.class_name, cls);
    ASSERT_EQ(l.params, params);
    ASSERT_EQ(l.ndim, 3);
    ASSERT_EQ(l.shape[0], h);
    ASSERT_EQ(l.shape[1], w);
    ASSERT_EQ(l.shape[2], c);
}

DT_TEST(nn_vision_shapes_and_param_counts)
{
    /* Keras: DepthwiseConv2D has kh*kw*in*mult + in*mult parameters (with bias); "same" keeps
     * ceil(in / stride); a dilated 3x3 spans 5 cells. */
    const char *json = nn_seq(
        "32, 30, 8",
        "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"name\": \"dw1\", \"kernel_size\": "
        "3, \"padding\": \"same\", \"strides\": 2, \"depth_multiplier\": 2}}",
        "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"name\": \"dw2\", \"kernel_size\": "
        "3, \"use_bias\": false, \"dilation_rate\": 2}}",
        "{\"class_name\": \"Cropping2D\", \"config\": {\"name\": \"crop\", \"cropping\": [[1, "
        "2], [0, 3]]}}",
        "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"relu6\", \"max_value\": 6.0}}",
        "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"dil\", \"filters\": 4, "
        "\"kernel_size\": 3, \"dilation_rate\": [2, 3]}}",
        "{\"class_name\": \"SeparableConv2D\", \"config\": {\"name\": \"sep\", \"filters\": "
        "6, \"kernel_size\": 3, \"padding\": \"same\", \"strides\": 2, \"depth_multiplier\": "
        "2}}",
        NULL);
    dt_err err = {0};
    dt_status st;
    dt_model *m = load(json, &err, &st);
    ASSERT_OK(st, &err);
    expect_row(m, 1, "DepthwiseConv2D", 3 * 3 * 8 * 2 + 16, 16, 15, 16);
    expect_row(m, 2, "DepthwiseConv2D", 3 * 3 * 16, 12, 11, 16);
    expect_row(m, 3, "Cropping2D", 0, 9, 8, 16);
    expect_row(m, 4, "ReLU", 0, 9, 8, 16);
    expect_row(m, 5, "Conv2D", 3 * 3 * 16 * 4 + 4, 5, 2, 4); /* the window spans 5x7 */
    /* Keras: kh*kw*in*mult + in*mult*filters + filters */
    expect_row(m, 6, "SeparableConv2D", 3 * 3 * 4 * 2 + 4 * 2 * 6 + 6, 3, 1, 6);
    size_t total;
    dt_model_param_counts(m, &total, NULL, NULL);
    ASSERT_EQ(total, (size_t)(160 + 144 + 580 + 126));
    const dt_model_weight *k = dt_model_find_weight(m, "dw1/depthwise_kernel");
    ASSERT_TRUE(k != NULL);
    ASSERT_EQ(k->ndim, 4);
    ASSERT_EQ(k->shape[0], 3);
    ASSERT_EQ(k->shape[2], 8);
    ASSERT_EQ(k->shape[3], 2);
    ASSERT_TRUE(dt_model_find_weight(m, "dw1/bias") != NULL);
    ASSERT_TRUE(dt_model_find_weight(m, "dw2/bias") == NULL);
    const dt_model_weight *p = dt_model_find_weight(m, "sep/pointwise_kernel");
    ASSERT_TRUE(p != NULL);
    ASSERT_EQ(p->shape[0], 1);
    ASSERT_EQ(p->shape[2], 8);
    ASSERT_EQ(p->shape[3], 6);
    ASSERT_TRUE(dt_model_find_weight(m, "sep/depthwise_kernel") != NULL);
    ASSERT_TRUE(dt_model_find_weight(m, "sep/bias") != NULL);
    dt_model_free(m);
}

DT_TEST(nn_vision_refusals_name_the_option)
{
    nn_refused(
        nn_seq("6, 6, 2", DW(", \"name\": \"d\", \"depthwise_constraint\": \"non_neg\""), NULL),
        "(DepthwiseConv2D 'd')", "'depthwise_constraint'");
    nn_refused(nn_seq("6, 6, 2", DW(", \"name\": \"d\", \"frobnicate\": 1"), NULL),
               "(DepthwiseConv2D 'd')", "option 'frobnicate' is not supported");
    nn_refused(
        nn_seq("6, 6, 2", DW(", \"name\": \"d\", \"dilation_rate\": 2, \"strides\": 2"), NULL),
        "(DepthwiseConv2D 'd')", "'dilation_rate'");
    nn_refused(nn_seq("6, 6, 2",
                      "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": 2, "
                      "\"kernel_size\": 3, \"dilation_rate\": 2, \"strides\": [1, 2]}}",
                      NULL),
               "(Conv2D 'c')", "'dilation_rate'");
    nn_refused(nn_seq("6, 6, 2",
                      "{\"class_name\": \"SeparableConv2D\", \"config\": {\"name\": \"s\", "
                      "\"filters\": 2, \"kernel_size\": 3, \"pointwise_constraint\": \"non_neg\"}}",
                      NULL),
               "(SeparableConv2D 's')", "'pointwise_constraint'");
    nn_refused(nn_seq("6, 6, 2",
                      "{\"class_name\": \"SeparableConv2D\", \"config\": {\"name\": \"s\", "
                      "\"kernel_size\": 3}}",
                      NULL),
               "(SeparableConv2D 's')", "'filters'");
    nn_refused(
        nn_seq("6, 6, 2", DW(", \"name\": \"d\", \"data_format\": \"channels_first\""), NULL),
        "(DepthwiseConv2D 'd')", "'data_format'");
    nn_refused(nn_seq("6, 6, 2", DW(", \"name\": \"d\", \"depth_multiplier\": 0"), NULL),
               "(DepthwiseConv2D 'd')", "'depth_multiplier'");
    nn_refused(
        nn_seq("6, 6, 2",
               "{\"class_name\": \"Cropping2D\", \"config\": {\"name\": \"c\", \"cropping\": "
               "[[3, 3], [0, 0]]}}",
               NULL),
        "(Cropping2D 'c')", "'cropping'");
    nn_refused(
        nn_seq("6, 6, 2",
               "{\"class_name\": \"Cropping2D\", \"config\": {\"name\": \"c\", \"cropping\": "
               "\"x\"}}",
               NULL),
        "(Cropping2D 'c')", "'cropping'");
}

/* ---- PyTorch float64 parity of the depthwise and dilated convolution kernels
 * ----------------------------------------
 */

typedef struct dw_case {
    int n, h, w, c, mult, kh, kw, sh, sw, dh, dw;
    bool same;
    int filters; /* 0: DepthwiseConv2D; else Conv2D (im2col + GEMM) with that many */
} dw_case;

/* Keras's geometry, as the layer computes it (layers_conv.c). */
static dt_nn_win case_win(const dw_case *k)
{
    dt_nn_win g = {.n = k->n,
                   .h = k->h,
                   .w = k->w,
                   .c = k->c,
                   .kh = k->kh,
                   .kw = k->kw,
                   .sh = k->sh,
                   .sw = k->sw,
                   .dil_h = k->dh,
                   .dil_w = k->dw};
    int span_h = (k->kh - 1) * k->dh + 1, span_w = (k->kw - 1) * k->dw + 1;
    if (k->same) {
        g.oh = (k->h + k->sh - 1) / k->sh;
        g.ow = (k->w + k->sw - 1) / k->sw;
        int th = (g.oh - 1) * k->sh + span_h - k->h, tw = (g.ow - 1) * k->sw + span_w - k->w;
        g.pt = th > 0 ? th / 2 : 0;
        g.pl = tw > 0 ? tw / 2 : 0;
    } else {
        g.oh = (k->h - span_h) / k->sh + 1;
        g.ow = (k->w - span_w) / k->sw + 1;
    }
    return g;
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

static int case_outputs(const dw_case *k)
{
    return k->filters ? k->filters : k->c * k->mult;
}

/* One case through the CPU table: y = conv(x) + b, then dk, db and dx (written, then added a
 * second time with acc, which the caller halves) for dy. A Conv2D goes the way the layer does:
 * im2col, GEMM, and col2im of dy kernel^T. */
static void run_case(const dw_case *k, const dt_nn_win *g, const float *x, const float *ker,
                     const float *b, const float *dy, float *y, float *dx, float *dk, float *db)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    int nout = case_outputs(k), K = k->kh * k->kw * k->c;
    size_t rows = (size_t)k->n * g->oh * g->ow;
    if (!k->filters) {
        o->dw_fwd(g, k->mult, x, ker, y);
        o->dw_bwd(g, k->mult, x, ker, dy, dk, dx, false);
        o->dw_bwd(g, k->mult, x, ker, dy, NULL, dx, true);
    } else {
        float *col = malloc(rows * (size_t)K * sizeof(float));
        o->im2col(g, x, col);
        dt_nn_gemm(o, false, false, (int)rows, nout, K, 1.0f, col, K, ker, nout, 0.0f, y, nout);
        dt_nn_gemm(o, true, false, K, nout, (int)rows, 1.0f, col, K, dy, nout, 0.0f, dk, nout);
        dt_nn_gemm(o, false, true, (int)rows, K, nout, 1.0f, dy, nout, ker, nout, 0.0f, col, K);
        o->col2im(g, col, dx, false);
        o->col2im(g, col, dx, true);
        free(col);
    }
    o->bias_add(y, b, rows, nout);
    o->bias_grad(dy, rows, nout, db, false);
}

DT_TEST_TIMEOUT(nn_vision_torch_conv_kernels, 120)
{
    if (access(PY, X_OK) != 0 || !dt_test_python_has("torch"))
        DT_SKIP("no %s with torch: apt-get install python3-torch", PY);
    /* n, h, w, c, mult, kh, kw, sh, sw, dh, dw, same, filters */
    const dw_case cases[] = {
        {4, 9, 8, 3, 1, 3, 3, 1, 1, 1, 1, false, 0},
        {4, 9, 8, 3, 1, 3, 3, 1, 1, 1, 1, true, 0},
        {4, 9, 8, 3, 2, 3, 3, 2, 2, 1, 1, false, 0},
        {4, 9, 8, 3, 2, 3, 3, 2, 2, 1, 1, true, 0},
        {3, 10, 7, 4, 1, 3, 3, 2, 2, 1, 1, true, 0},
        {2, 8, 8, 2, 3, 2, 3, 2, 1, 1, 1, true, 0},
        {2, 9, 9, 3, 1, 3, 3, 1, 1, 2, 2, true, 0},
        {2, 9, 9, 3, 2, 3, 2, 1, 1, 2, 3, false, 0},
        /* Conv2D with dilation_rate */
        {2, 9, 9, 3, 1, 3, 3, 1, 1, 2, 2, true, 4},
        {2, 10, 9, 2, 1, 3, 2, 1, 1, 3, 2, false, 5},
        {2, 8, 7, 3, 1, 3, 3, 1, 1, 1, 1, true, 4},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    const char *dir = dt_test_tmpdir();
    char path[1024], cmd[2048];
    dt_err err = {0};
    dt_rng r;
    dt_rng_seed(&r, 5);
    dt_buf bin;
    dt_buf_init(&bin, 1u << 26);
    cJSON *man = cJSON_CreateArray();
    float *buf[4 * NC];
    size_t sz[NC][4];
    for (size_t i = 0; i < NC; i++) {
        const dw_case *k = &cases[i];
        dt_nn_win g = case_win(k);
        int nout = case_outputs(k);
        sz[i][0] = (size_t)k->n * k->h * k->w * k->c;
        sz[i][1] = (size_t)k->kh * k->kw * k->c * (k->filters ? k->filters : k->mult);
        sz[i][2] = (size_t)nout;
        sz[i][3] = (size_t)k->n * g.oh * g.ow * nout;
        for (int t = 0; t < 4; t++) {
            buf[4 * i + t] = malloc(sz[i][t] * sizeof(float));
            for (size_t j = 0; j < sz[i][t]; j++)
                buf[4 * i + t][j] = (float)dt_rng_normal(&r);
            ASSERT_OK(dt_buf_append(&bin, buf[4 * i + t], sz[i][t] * sizeof(float), &err), &err);
        }
        cJSON *e = cJSON_CreateObject();
        const char *keys[] = {"n",  "h",  "w",  "c",  "mult", "kh", "kw", "sh",
                              "sw", "dh", "dw", "pt", "pl",   "oh", "ow", "filters"};
        int vals[] = {k->n,  k->h,  k->w,  k->c, k->mult, k->kh, k->kw, k->sh,
                      k->sw, k->dh, k->dw, g.pt, g.pl,    g.oh,  g.ow,  k->filters};
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
    dt_test_python_cmd(cmd, sizeof cmd, " %s %s", dt_test_src_path("test/ref/conv_ref.py"), dir);
    int rc = system(cmd);
    ASSERT_EQ(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0);
    char *out;
    size_t len;
    snprintf(path, sizeof path, "%s/out.bin", dir);
    ASSERT_OK(dt_file_read_all(path, 1u << 26, &out, &len, &err), &err);
    const double *ref = (const double *)(void *)out;
    double worst = 0;
    for (size_t i = 0; i < NC; i++) {
        const dw_case *k = &cases[i];
        dt_nn_win g = case_win(k);
        size_t ny = sz[i][3], nx = sz[i][0], nk = sz[i][1], nb = sz[i][2];
        ASSERT_TRUE(len >= sizeof(double) *
                               ((size_t)(ref - (const double *)(void *)out) + ny + nx + nk + nb));
        float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dk = malloc(nk * 4), *db = malloc(nb * 4);
        run_case(k, &g, buf[4 * i], buf[4 * i + 1], buf[4 * i + 2], buf[4 * i + 3], y, dx, dk, db);
        for (size_t j = 0; j < nx; j++)
            dx[j] *= 0.5f; /* written once, then added once more (acc) */
        double e[4] = {max_rel(y, ref, ny), max_rel(dx, ref + ny, nx),
                       max_rel(dk, ref + ny + nx, nk), max_rel(db, ref + ny + nx + nk, nb)};
        ref += ny + nx + nk + nb;
        printf("  case %zu (%s k %dx%d s %dx%d d %dx%d mult %d %s): y %.2e dx %.2e dk %.2e "
               "db %.2e\n",
               i, k->filters ? "Conv2D" : "DepthwiseConv2D", k->kh, k->kw, k->sh, k->sw, k->dh,
               k->dw, k->mult, k->same ? "same" : "valid", e[0], e[1], e[2], e[3]);
        for (int t = 0; t < 4; t++) {
            worst = fmax(worst, e[t]);
            if (!(e[t] < 1e-5))
                DT_FAIL_("case %zu: tensor %d (y, dx, dkernel, dbias): relative error %.3e "
                         "above 1e-5",
                         i, t, e[t]);
        }
        free(y), free(dx), free(dk), free(db);
        for (int t = 0; t < 4; t++)
            free(buf[4 * i + t]);
    }
    printf("worst relative error against float64: %.3e\n", worst);
    free(out);
}

/* ---- MobileNetV2 as tf.keras.applications writes it (test/ref/mobilenet_v2_json.py) -------- */

static char *mobilenet_json(int size)
{
    char cmd[1024];
    dt_test_python_cmd(cmd, sizeof cmd, " %s %d 2",
                       dt_test_src_path("test/ref/mobilenet_v2_json.py"), size);
    FILE *p = popen(cmd, "r");
    ASSERT_TRUE(p != NULL);
    size_t cap = 1u << 20, len = 0;
    char *s = malloc(cap);
    for (size_t r; (r = fread(s + len, 1, cap - 1 - len, p)) > 0;)
        len += r;
    s[len] = 0;
    ASSERT_EQ(pclose(p), 0);
    ASSERT_LT(len, cap - 1);
    return s;
}

DT_TEST_TIMEOUT(nn_vision_mobilenet_v2, 120)
{
    if (access(PY, X_OK) != 0)
        DT_SKIP("no %s", PY);
    /* Keras's summary of MobileNetV2(weights=None, classes=2): 2,260,546 parameters, 34,112 of
     * them the batch norms' moving statistics. */
    char *json = mobilenet_json(224);
    dt_model *m = nn_build(json, 1);
    free(json);
    size_t total, tr, nt;
    dt_model_param_counts(m, &total, &tr, &nt);
    ASSERT_EQ(total, 2260546);
    ASSERT_EQ(tr, 2226434);
    ASSERT_EQ(nt, 34112);
    bool seen = false;
    for (size_t i = 0; i < dt_model_layer_count(m); i++) {
        dt_model_layer l;
        dt_model_layer_info(m, i, &l);
        if (strcmp(l.name, "out_relu") == 0) {
            ASSERT_EQ(l.shape[0], 7);
            ASSERT_EQ(l.shape[2], 1280);
            seen = true;
        }
    }
    ASSERT_TRUE(seen);
    dt_model_free(m);
    /* At 96x96 (the job test's and the benchmark's size) the same counts, and out_relu is 3x3 */
    json = mobilenet_json(96);
    m = nn_build(json, 1);
    free(json);
    dt_model_param_counts(m, &total, &tr, &nt);
    ASSERT_EQ(total, 2260546);
    ASSERT_EQ(nt, 34112);
    seen = false;
    for (size_t i = 0; i < dt_model_layer_count(m); i++) {
        dt_model_layer l;
        dt_model_layer_info(m, i, &l);
        if (strcmp(l.name, "out_relu") == 0) {
            ASSERT_EQ(l.shape[0], 3);
            ASSERT_EQ(l.shape[1], 3);
            seen = true;
        }
    }
    ASSERT_TRUE(seen);
    dt_model_free(m);
    /* It runs a training step: a finite loss and a non-zero, finite gradient. */
    json = mobilenet_json(32);
    m = nn_build(json, 1);
    free(json);
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE};
    nn_data d = nn_random(m, 4, loss.kind, 2);
    dt_model_batch b = nn_batch(&d, loss.kind);
    dt_err err = {0};
    dt_step_stats st;
    ASSERT_OK(dt_model_train_step(m, &loss, &b, 4, &st, &err), &err);
    ASSERT_TRUE(isfinite(st.loss));
    size_t np;
    float *g = nn_grads_host(m, &np);
    double sq = 0;
    for (size_t i = 0; i < np; i++)
        sq += (double)g[i] * g[i];
    free(g);
    ASSERT_TRUE(isfinite(sq) && sq > 0);
    printf("MobileNetV2 32x32, batch 4: loss %.4f, gradient norm %.4g\n", st.loss, sqrt(sq));
    nn_data_free(&d);
    dt_model_free(m);
}

/* ---- BatchNormalization -> ReLU fused (model.c's fuse_bn_relu) ------------------------------ */

/* Conv -> BN -> [Activation(linear)] -> ReLU(relu_cfg) -> Conv -> BN -> ReLU -> GAP -> Dense:
 * with the linear activation in between the batch norm has another consumer and nothing is
 * fused. */
static const char *bn_relu_model(const char *relu_cfg, bool split)
{
    static char buf[8192];
    char relu[512];
    snprintf(relu, sizeof relu, "{\"class_name\": \"ReLU\", \"config\": {%s}}", relu_cfg);
    snprintf(buf, sizeof buf, "%s",
             nn_seq("6, 5, 3", CONV_SAME,
                    "{\"class_name\": \"BatchNormalization\", \"config\": {}}",
                    split ? "{\"class_name\": \"Activation\", \"config\": {\"activation\": "
                            "\"linear\"}}"
                          : relu,
                    split ? relu : DW(", \"padding\": \"same\""),
                    split ? DW(", \"padding\": \"same\"") : FLATTEN, split ? FLATTEN : DENSE3,
                    split ? DENSE3 : NULL, NULL));
    return buf;
}

DT_TEST(nn_vision_bn_relu_fused_equals_unfused)
{
    /* ReLU6 as MobileNet writes it, a plain ReLU, and ReLU(max_value=0.5): the fused batch norm
     * computes the ReLU's output and gradient bit for bit; a sloped ReLU is not fused but
     * trains alike. */
    const char *cfgs[] = {"\"max_value\": 6.0, \"negative_slope\": 0.0, \"threshold\": 0.0", "",
                          "\"max_value\": 0.5", "\"negative_slope\": 0.1"};
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        dt_model *m[2];
        float *pred[2];
        double lv[2];
        for (int k = 0; k < 2; k++)
            m[k] = nn_build(bn_relu_model(cfgs[i], k == 1), 3);
        size_t np0, np1; /* the same initial weights (the extra layer moves the draws) */
        float *p0 = nn_params_host(m[0], &np0), *p1 = dt_model_params(m[1], &np1);
        ASSERT_EQ(np0, np1);
        nn_dev_set(m[1], p1, p0, np0);
        free(p0);
        for (int k = 0; k < 2; k++) {
            nn_data d = nn_random(m[k], 5, loss.kind, 4);
            dt_model_batch b = nn_batch(&d, loss.kind);
            dt_err err = {0};
            dt_step_stats st;
            for (int step = 0; step < 2; step++) /* the moving statistics move twice */
                ASSERT_OK(dt_model_train_step(m[k], &loss, &b, 5, &st, &err), &err);
            lv[k] = st.loss;
            pred[k] = malloc(5 * 3 * sizeof(float));
            ASSERT_OK(dt_model_predict(m[k], d.x, 5, pred[k], &err), &err);
            nn_data_free(&d);
        }
        ASSERT_TRUE(lv[0] == lv[1]);
        size_t n0, n1;
        float *g0 = nn_grads_host(m[0], &n0), *g1 = nn_grads_host(m[1], &n1);
        ASSERT_EQ(n0, n1);
        ASSERT_TRUE(memcmp(g0, g1, n0 * sizeof(float)) == 0);
        free(g0);
        free(g1);
        ASSERT_TRUE(memcmp(pred[0], pred[1], 5 * 3 * sizeof(float)) == 0); /* inference too */
        printf("ReLU {%s}: loss %.6f, %zu gradients and the predictions equal bit for bit\n",
               cfgs[i], lv[0], n0);
        for (int k = 0; k < 2; k++) {
            dt_model_free(m[k]);
            free(pred[k]);
        }
    }
}

/* ---- ZeroPadding2D -> DepthwiseConv2D fused (model.c's fuse_pad_dw) ------------------------ */

/* Conv -> ZeroPadding2D(pad) -> [Activation(linear)] -> DepthwiseConv2D(valid, stride) ->
 * Flatten -> Dense: with the linear activation in between the pad is not fused. */
static const char *pad_dw_model(const char *pad, int stride, bool split)
{
    static char buf[8192];
    char zp[256], dw[256];
    snprintf(zp, sizeof zp, "{\"class_name\": \"ZeroPadding2D\", \"config\": {\"padding\": %s}}",
             pad);
    snprintf(dw, sizeof dw, DW(", \"strides\": %d, \"activation\": \"relu\""), stride);
    snprintf(buf, sizeof buf, "%s",
             nn_seq("9, 8, 5", CONV_SAME, zp,
                    split ? "{\"class_name\": \"Activation\", \"config\": {\"activation\": "
                            "\"linear\"}}"
                          : dw,
                    split ? dw : FLATTEN, split ? FLATTEN : DENSE3, split ? DENSE3 : NULL, NULL));
    return buf;
}

DT_TEST(nn_vision_pad_dw_fused_equals_unfused)
{
    /* MobileNet's stride-2 frame ((0, 1), (0, 1)), a symmetric one at stride 1 and a lopsided
     * one: the fused depthwise conv (the frame as its padding) trains and predicts bit for bit
     * as the padded tensor did, and the padded tensor's buffers are gone. */
    const char *pads[] = {"[[0, 1], [0, 1]]", "1", "[[2, 0], [1, 3]]"};
    const int strides[] = {2, 1, 2};
    const int padded[] = {10 * 9 * 3, 11 * 10 * 3, 11 * 12 * 3}; /* floats per sample */
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    for (size_t i = 0; i < sizeof pads / sizeof pads[0]; i++) {
        dt_model *m[2];
        float *pred[2];
        double lv[2];
        for (int k = 0; k < 2; k++)
            m[k] = nn_build(pad_dw_model(pads[i], strides[i], k == 1), 3);
        /* unfused: the pad's y and dy plus the activation's; fused: the activation's only */
        ASSERT_EQ(dt_model_batch_bytes(m[1], 5) - dt_model_batch_bytes(m[0], 5),
                  (uint64_t)4 * 5 * padded[i] * sizeof(float));
        size_t np0, np1;
        float *p0 = nn_params_host(m[0], &np0), *p1 = dt_model_params(m[1], &np1);
        ASSERT_EQ(np0, np1);
        nn_dev_set(m[1], p1, p0, np0);
        free(p0);
        for (int k = 0; k < 2; k++) {
            nn_data d = nn_random(m[k], 5, loss.kind, 4);
            dt_model_batch b = nn_batch(&d, loss.kind);
            dt_err err = {0};
            dt_step_stats st;
            for (int step = 0; step < 2; step++)
                ASSERT_OK(dt_model_train_step(m[k], &loss, &b, 5, &st, &err), &err);
            lv[k] = st.loss;
            pred[k] = malloc(5 * 3 * sizeof(float));
            ASSERT_OK(dt_model_predict(m[k], d.x, 5, pred[k], &err), &err);
            nn_data_free(&d);
        }
        ASSERT_TRUE(lv[0] == lv[1]);
        size_t n0, n1;
        float *g0 = nn_grads_host(m[0], &n0), *g1 = nn_grads_host(m[1], &n1);
        ASSERT_EQ(n0, n1);
        ASSERT_TRUE(memcmp(g0, g1, n0 * sizeof(float)) == 0);
        free(g0);
        free(g1);
        ASSERT_TRUE(memcmp(pred[0], pred[1], 5 * 3 * sizeof(float)) == 0);
        printf("padding %s, stride %d: loss %.6f, %zu gradients and the predictions equal bit "
               "for bit\n",
               pads[i], strides[i], lv[0], n0);
        for (int k = 0; k < 2; k++) {
            dt_model_free(m[k]);
            free(pred[k]);
        }
    }
}

/* The vectorised depthwise kernels (depth_multiplier 1; the 3x3 ones up to 32 channels and the
 * general ones) add in the order of the plain loops below - per output 0 + tap 0 + tap 1 ...; dk
 * and dx output by output, taps in window order - so their bits equal these loops' on any machine.
 */
DT_TEST(nn_vision_depthwise_kernels_keep_the_summation_order)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    /* n, h, w, c, k, stride, pad top/left, dilation: interior and borders, 8/4/1-wide tails */
    const int cases[][8] = {{3, 9, 8, 21, 3, 1, 1, 1},   {3, 9, 8, 13, 3, 2, 0, 1},
                            {2, 8, 9, 8, 3, 2, 1, 1},    {2, 9, 9, 5, 3, 1, 2, 2},
                            {2, 10, 10, 24, 3, 2, 0, 1}, /* MobileNet's stride 2 */
                            {2, 9, 8, 37, 3, 1, 1, 1},   /* 3x3 past 32 channels */
                            {2, 9, 8, 11, 5, 2, 2, 1},   /* other windows: the general kernels */
                            {2, 7, 7, 9, 2, 1, 0, 1}};
    dt_rng r;
    dt_rng_seed(&r, 12);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *q = cases[ci];
        dt_nn_win g = {.n = q[0],
                       .h = q[1],
                       .w = q[2],
                       .c = q[3],
                       .kh = q[4],
                       .kw = q[4],
                       .sh = q[5],
                       .sw = q[5],
                       .pt = q[6],
                       .pl = q[6],
                       .dil_h = q[7],
                       .dil_w = q[7]};
        int span = (g.kh - 1) * q[7] + 1;
        g.oh = (g.h + 2 * g.pt - span) / g.sh + 1;
        g.ow = (g.w + 2 * g.pl - span) / g.sw + 1;
        size_t nx = (size_t)g.n * g.h * g.w * g.c, ny = (size_t)g.n * g.oh * g.ow * g.c;
        size_t nk = (size_t)g.kh * g.kw * g.c;
        float *x = malloc(nx * 4), *k = malloc(nk * 4), *dy = malloc(ny * 4);
        float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dk = malloc(nk * 4);
        float *ry = calloc(ny, 4), *rdx = calloc(nx, 4), *rdk = calloc(nk, 4);
        for (size_t i = 0; i < nx; i++)
            x[i] = (float)dt_rng_normal(&r);
        for (size_t i = 0; i < nk; i++)
            k[i] = (float)dt_rng_normal(&r);
        for (size_t i = 0; i < ny; i++)
            dy[i] = (float)dt_rng_normal(&r);
        o->dw_fwd(&g, 1, x, k, y);
        o->dw_bwd(&g, 1, x, k, dy, dk, dx, false);
        o->dw_bwd(&g, 1, x, k, dy, NULL, dx, true); /* adds a second time onto dx */
        for (int pass = 0; pass < 2; pass++)
            for (int s = 0; s < g.n; s++)
                for (int oy = 0; oy < g.oh; oy++)
                    for (int ox = 0; ox < g.ow; ox++)
                        for (int ky = 0; ky < g.kh; ky++)
                            for (int kx = 0; kx < g.kw; kx++) {
                                int iy = oy * g.sh - g.pt + ky * q[7];
                                int ix = ox * g.sw - g.pl + kx * q[7];
                                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                                    continue;
                                size_t yo = (((size_t)s * g.oh + oy) * g.ow + ox) * g.c;
                                size_t xo = (((size_t)s * g.h + iy) * g.w + ix) * g.c;
                                size_t ko = ((size_t)ky * g.kw + kx) * g.c;
                                for (int ch = 0; ch < g.c; ch++) {
                                    if (pass == 0) {
                                        ry[yo + ch] += x[xo + ch] * k[ko + ch];
                                        rdk[ko + ch] += x[xo + ch] * dy[yo + ch];
                                    }
                                    rdx[xo + ch] += dy[yo + ch] * k[ko + ch];
                                }
                            }
        ASSERT_TRUE(memcmp(y, ry, ny * 4) == 0);
        ASSERT_TRUE(memcmp(dk, rdk, nk * 4) == 0);
        ASSERT_TRUE(memcmp(dx, rdx, nx * 4) == 0);
        free(x), free(k), free(dy), free(y), free(dx), free(dk), free(ry), free(rdx), free(rdk);
    }
}
