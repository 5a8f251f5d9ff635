/* test_nn_augment.c - the image preprocessing layers (Resizing, CenterCrop, RandomFlip,
 * RandomBrightness, RandomContrast): Keras 2 and 3 configs and refusals, summary shapes, the
 * kernels against float64 formulas and against data's dt_image_resize (itself checked against
 * PyTorch and PIL), the layers' draws replayed from a copy of the step's stream, identity at
 * inference, determinism per (seed, step, rank), and finite-difference gradients. */
#include "test_nn_util.h"

#include "data/data.h"

#include <math.h>

/* dt_test.h's ASSERT_EQ and friends compare as integers; floats compare here. */
#define ASSERT_F(a, op, b)                                                                         \
    do {                                                                                           \
        double dt_fa_ = (double)(a), dt_fb_ = (double)(b);                                         \
        if (!(dt_fa_ op dt_fb_))                                                                   \
            DT_FAIL_("assertion failed: %s %s %s (%.9g vs %.9g)", #a, #op, #b, dt_fa_, dt_fb_);    \
    } while (0)

#define K3_DTYPE                                                                                   \
    "\"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": {\"name\": "  \
    "\"float32\"}, \"registered_name\": null}"

/* Keras 3 to_json of Input(30, 40, 3) -> Resizing(24, 24, crop) -> CenterCrop(20, 20) ->
 * RandomFlip -> RandomBrightness -> RandomContrast -> Conv2D(4, 3). */
static const char *const k3_model =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"aug\", "
    "\"trainable\": true, " K3_DTYPE ", \"layers\": ["
    "{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": "
    "[null, 30, 40, 3], \"dtype\": \"float32\", \"sparse\": false, \"name\": \"input_layer\"}, "
    "\"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Resizing\", \"config\": {\"name\": "
    "\"resizing\", \"trainable\": true, " K3_DTYPE ", \"height\": 24, \"width\": 24, "
    "\"interpolation\": \"bilinear\", \"crop_to_aspect_ratio\": true, \"pad_to_aspect_ratio\": "
    "false, \"fill_mode\": \"constant\", \"fill_value\": 0.0, \"data_format\": "
    "\"channels_last\"}, \"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"CenterCrop\", \"config\": {\"name\": "
    "\"center_crop\", \"trainable\": true, " K3_DTYPE ", \"height\": 20, \"width\": 20, "
    "\"data_format\": \"channels_last\"}, \"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"RandomFlip\", \"config\": {\"name\": "
    "\"random_flip\", \"trainable\": true, " K3_DTYPE ", \"seed\": null, \"mode\": "
    "\"horizontal\", \"data_format\": \"channels_last\"}, \"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"RandomBrightness\", \"config\": {\"name\": "
    "\"random_brightness\", \"trainable\": true, " K3_DTYPE ", \"seed\": 3, \"factor\": 0.2, "
    "\"value_range\": [0, 255], \"data_format\": \"channels_last\"}, \"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"RandomContrast\", \"config\": {\"name\": "
    "\"random_contrast\", \"trainable\": true, " K3_DTYPE ", \"factor\": [0.1, 0.3], "
    "\"value_range\": [0, 255], \"seed\": null, \"data_format\": \"channels_last\"}, "
    "\"registered_name\": null}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", "
    "\"filters\": 4, \"kernel_size\": [3, 3]}, \"registered_name\": null}]}}";

/* Keras 2 (tf.keras 2.15) to_json of the same layers, as it writes them. */
#define K2(cls, name, cfg)                                                                         \
    "{\"class_name\": \"" cls "\", \"config\": {\"name\": \"" name "\", \"trainable\": true, "     \
    "\"dtype\": \"float32\", " cfg "}}"

static void expect_shapes(dt_model *m, const int (*want)[4], int n)
{
    ASSERT_EQ((int)dt_model_layer_count(m), n + 1); /* + the InputLayer */
    for (int i = 0; i < n; i++) {
        dt_model_layer li;
        dt_model_layer_info(m, (size_t)i + 1, &li);
        ASSERT_EQ(li.ndim, 3);
        for (int k = 0; k < 3; k++)
            ASSERT_EQ(li.shape[k], (int64_t)want[i][k]);
        ASSERT_EQ(li.params, (size_t)want[i][3]);
    }
}

DT_TEST(nn_augment_keras_configs_and_shapes)
{
    dt_model *m = nn_build(k3_model, 1);
    const int k3[][4] = {{24, 24, 3, 0}, {20, 20, 3, 0}, {20, 20, 3, 0},
                         {20, 20, 3, 0}, {20, 20, 3, 0}, {18, 18, 4, 112}};
    expect_shapes(m, k3, 6);
    dt_model_free(m);

    const char *k2 = nn_seq(
        "10, 12, 1",
        K2("Resizing", "resizing",
           "\"height\": 8, \"width\": 16, \"interpolation\": \"nearest\", "
           "\"crop_to_aspect_ratio\": false"),
        K2("CenterCrop", "center_crop", "\"height\": 12, \"width\": 12"), /* smaller: resized */
        K2("RandomFlip", "random_flip", "\"mode\": \"horizontal_and_vertical\", \"seed\": null"),
        K2("RandomBrightness", "random_brightness",
           "\"factor\": [-0.1, 0.3], \"value_range\": [0, 1], \"seed\": 7"),
        K2("RandomContrast", "random_contrast", "\"factor\": 0.2, \"seed\": null"), NULL);
    m = nn_build(k2, 1);
    const int k2s[][4] = {
        {8, 16, 1, 0}, {12, 12, 1, 0}, {12, 12, 1, 0}, {12, 12, 1, 0}, {12, 12, 1, 0}};
    expect_shapes(m, k2s, 5);
    dt_model_free(m);
}

static void expect_refused(const char *layer, const char *shape, const char *needle)
{
    const char *json = nn_seq(shape, layer, NULL);
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts o = {.seed = 1};
    dt_status st = dt_model_from_json(json, strlen(json), &o, &m, &err);
    ASSERT_TRUE(st == DT_ENOTSUP || st == DT_EINVAL);
    ASSERT_CONTAINS(err.msg, needle);
}

DT_TEST(nn_augment_refusals_name_the_key)
{
    expect_refused(
        K2("Resizing", "r", "\"height\": 4, \"width\": 4, \"interpolation\": \"lanczos3\""),
        "8, 8, 1",
        "option 'interpolation': lanczos3 is not supported (bilinear, nearest, area, "
        "bicubic)");
    expect_refused(
        K2("Resizing", "r", "\"height\": 4, \"width\": 4, \"pad_to_aspect_ratio\": true"),
        "8, 8, 1", "option 'pad_to_aspect_ratio'");
    expect_refused(K2("Resizing", "r", "\"height\": 4, \"width\": 4, \"antialias\": true"),
                   "8, 8, 1", "option 'antialias'");
    expect_refused(K2("Resizing", "r", "\"width\": 4"), "8, 8, 1", "option 'height'");
    expect_refused(K2("CenterCrop", "c",
                      "\"height\": 4, \"width\": 4, \"data_format\": "
                      "\"channels_first\""),
                   "8, 8, 1", "option 'data_format'");
    expect_refused(K2("RandomFlip", "f", "\"mode\": \"diagonal\""), "8, 8, 1", "option 'mode'");
    expect_refused(K2("RandomBrightness", "b", "\"factor\": 1.5"), "8, 8, 1", "option 'factor'");
    expect_refused(K2("RandomBrightness", "b", "\"factor\": 0.1, \"value_range\": [0]"), "8, 8, 1",
                   "option 'value_range'");
    expect_refused(K2("RandomContrast", "c", "\"factor\": [1.5, 0.2]"), "8, 8, 1",
                   "option 'factor'");
    expect_refused(K2("RandomContrast", "c", "\"factor\": 0.1, \"fill_mode\": \"wrap\""), "8, 8, 1",
                   "fill_mode");
    expect_refused(K2("RandomFlip", "f", "\"mode\": \"horizontal\""), "8", "rank 1");
}

/* ---- kernels ------------------------------------------------------------------------------- */

DT_TEST(nn_augment_flip_kernel_exact)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    enum { H = 2, W = 3, C = 2, IMG = H * W * C };
    float x[4 * IMG], y[4 * IMG];
    for (int i = 0; i < 4 * IMG; i++)
        x[i] = (float)i;
    int32_t flags[4] = {0, 1, 2, 3};
    o->img_flip(4, H, W, C, flags, x, y, false);
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < H; r++)
            for (int q = 0; q < W; q++)
                for (int k = 0; k < C; k++) {
                    int sr = (flags[i] & 2) ? H - 1 - r : r, sq = (flags[i] & 1) ? W - 1 - q : q;
                    ASSERT_F(y[i * IMG + (r * W + q) * C + k], ==,
                             x[i * IMG + (sr * W + sq) * C + k]);
                }
    /* acc adds; flipping twice is the identity */
    float z[4 * IMG];
    memcpy(z, x, sizeof z);
    o->img_flip(4, H, W, C, flags, y, z, true);
    for (int i = 0; i < 4 * IMG; i++)
        ASSERT_F(z[i], ==, 2 * x[i]);
}

DT_TEST(nn_augment_adjust_kernel_matches_float64)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    enum { N = 3, HW = 20, C = 3, IMG = HW * C };
    float x[N * IMG], y[N * IMG];
    dt_rng r;
    dt_rng_seed(&r, 5);
    for (int i = 0; i < N * IMG; i++)
        x[i] = 255.0f * dt_rng_uniform(&r);
    float f[N] = {0.5f, 1.0f, 1.8f}, d[N] = {-40.0f, 0.0f, 90.5f};
    for (int contrast = 0; contrast < 2; contrast++) {
        o->img_adjust(N, HW, C, contrast ? f : NULL, contrast ? NULL : d, 0, 255, x, y);
        int clipped = 0;
        for (int i = 0; i < N; i++)
            for (int k = 0; k < C; k++) {
                double m = 0;
                for (int p = 0; p < HW; p++)
                    m += x[i * IMG + p * C + k];
                m /= HW;
                for (int p = 0; p < HW; p++) {
                    double v = x[i * IMG + p * C + k];
                    double e = contrast ? (v - m) * f[i] + m : v + d[i];
                    clipped += e < 0 || e > 255;
                    e = fmin(fmax(e, 0), 255);
                    ASSERT_NEAR(y[i * IMG + p * C + k], e, 1e-4);
                }
            }
        ASSERT_GT(clipped, 0); /* the clip was exercised */
    }
}

/* img_adjust_bwd against central differences of sum(g * img_adjust(x)) per input value, in
 * double, skipping the values whose perturbation moves any output across a clip boundary (the
 * derivative is not defined there). */
static double adjust_dot(const float *f, const float *d, const float *x, const float *g, float *y,
                         int n, int hw, int c, unsigned char *mask)
{
    dt_nn_ops_cpu()->img_adjust(n, hw, c, f, d, 0.1f, 0.9f, x, y);
    double s = 0;
    for (int i = 0; i < n * hw * c; i++) {
        s += (double)g[i] * y[i];
        mask[i] = y[i] > 0.1f && y[i] < 0.9f;
    }
    return s;
}

DT_TEST(nn_augment_adjust_backward_matches_differences)
{
    enum { N = 2, HW = 6, C = 2, NX = N * HW * C };
    float x[NX], g[NX], y[NX], dx[NX];
    unsigned char m0[NX], mp[NX], mm[NX];
    dt_rng r;
    dt_rng_seed(&r, 17);
    for (int i = 0; i < NX; i++)
        x[i] = dt_rng_uniform(&r), g[i] = (float)dt_rng_normal(&r);
    float f[N] = {0.6f, 1.7f}, d[N] = {0.25f, -0.2f};
    for (int contrast = 0; contrast < 2; contrast++) {
        const float *fp = contrast ? f : NULL, *dp = contrast ? NULL : d;
        dt_nn_ops_cpu()->img_adjust_bwd(N, HW, C, fp, dp, 0.1f, 0.9f, x, g, dx, false);
        adjust_dot(fp, dp, x, g, y, N, HW, C, m0);
        int checked = 0, clipped = 0;
        for (int i = 0; i < NX; i++)
            clipped += !m0[i];
        for (int j = 0; j < NX; j++) {
            const float eps = 1e-3f;
            float keep = x[j];
            x[j] = keep + eps;
            double lp = adjust_dot(fp, dp, x, g, y, N, HW, C, mp);
            x[j] = keep - eps;
            double lm = adjust_dot(fp, dp, x, g, y, N, HW, C, mm);
            x[j] = keep;
            if (memcmp(mp, m0, NX) || memcmp(mm, m0, NX))
                continue;
            ASSERT_NEAR(dx[j], (lp - lm) / (2.0 * eps), 2e-3);
            checked++;
        }
        ASSERT_GT(clipped, 2);
        ASSERT_GT(checked, NX / 2);
        if (contrast) /* acc adds */
            for (int i = 0; i < NX; i++)
                y[i] = dx[i];
        if (contrast) {
            dt_nn_ops_cpu()->img_adjust_bwd(N, HW, C, fp, dp, 0.1f, 0.9f, x, g, dx, true);
            for (int i = 0; i < NX; i++)
                ASSERT_F(dx[i], ==, 2 * y[i]);
        }
    }
}

/* The nn kernel equals data's dt_image_resize bit for bit for the four methods (same TF rules;
 * data's is checked against PyTorch's interpolate, PIL and float64 renderings of TF's area and
 * bicubic), and its backward is its transpose: <R x, g> equals <x, R^T g> in double. Sizes
 * include integer and non-integer ratios, up and down, and a 1-pixel axis. */
DT_TEST(nn_augment_resize_kernel_matches_data_and_transpose)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    const int sizes[][4] = {{7, 9, 3, 4},  {4, 5, 11, 13}, {6, 6, 6, 6}, {1, 8, 5, 2}, {9, 4, 4, 9},
                            {8, 12, 4, 3}, {10, 7, 3, 5},  {3, 2, 7, 9}, {17, 5, 2, 1}};
    const dt_nn_interp kinds[] = {DT_NN_INTERP_BILINEAR, DT_NN_INTERP_NEAREST, DT_NN_INTERP_AREA,
                                  DT_NN_INTERP_BICUBIC};
    const dt_interp data_kinds[] = {DT_INTERP_BILINEAR, DT_INTERP_NEAREST, DT_INTERP_AREA,
                                    DT_INTERP_BICUBIC};
    dt_rng r;
    dt_rng_seed(&r, 9);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int kind = 0; kind < 4; kind++) {
            int h = sizes[s][0], w = sizes[s][1], oh = sizes[s][2], ow = sizes[s][3], c = 2;
            size_t nin = (size_t)h * w * c, nout = (size_t)oh * ow * c;
            float *x = malloc(nin * sizeof(float)), *y = malloc(nout * sizeof(float));
            float *ref = malloc(nout * sizeof(float)), *g = malloc(nout * sizeof(float));
            float *dx = malloc(nin * sizeof(float));
            for (size_t i = 0; i < nin; i++)
                x[i] = (float)dt_rng_normal(&r);
            for (size_t i = 0; i < nout; i++)
                g[i] = (float)dt_rng_normal(&r);
            dt_nn_resize geo = {.n = 1,
                                .h = h,
                                .w = w,
                                .c = c,
                                .oh = oh,
                                .ow = ow,
                                .wh = h,
                                .ww = w,
                                .interp = kinds[kind]};
            o->img_resize(&geo, x, y);
            dt_err err = {0};
            ASSERT_OK(dt_image_resize(x, h, w, c, ref, oh, ow, data_kinds[kind], &err), &err);
            ASSERT_EQ(memcmp(y, ref, nout * sizeof(float)), 0);
            o->img_resize_bwd(&geo, g, dx, false);
            double a = 0, b = 0;
            for (size_t i = 0; i < nout; i++)
                a += (double)y[i] * g[i];
            for (size_t i = 0; i < nin; i++)
                b += (double)x[i] * dx[i];
            ASSERT_NEAR(a, b, 1e-4 * (1 + fabs(a)));
            free(x), free(y), free(ref), free(g), free(dx);
        }
}

/* ---- layers: draws replayed, inference identity, determinism -------------------------------- */

static dt_loss mse(void)
{
    dt_loss l;
    dt_err err = {0};
    ASSERT_OK(dt_loss_from_name("mse", false, &l, &err), &err);
    return l;
}

/* The mean squared difference between the training-mode output of a one-layer model, with the
 * step's stream at *rng, and want. */
static double train_mse(dt_model *m, const float *x, const float *want, int n, const dt_rng *rng)
{
    dt_loss l = mse();
    dt_model_batch b = {.x = x, .targets = want, .n = n};
    return nn_loss_at(m, &l, &b, rng);
}

/* A step stream as fit derives one from (seed, step, rank). */
static dt_rng step_rng(uint64_t seed, uint64_t step, int rank)
{
    dt_rng r;
    dt_rng_seed2(&r, seed ^ step * 0x9e3779b97f4a7c15u, (uint64_t)rank);
    return r;
}

enum { N = 16, H = 5, W = 4, C = 3, IMG = H * W * C };

static void image_batch(float *x, float scale, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int i = 0; i < N * IMG; i++)
        x[i] = scale * dt_rng_uniform(&r);
}

/* The expected outputs, drawing from a copy of the stream in the layer's order. */
/* joint: Keras 3's one draw for every axis of the mode; else Keras 2's draw per axis. */
static void expect_flip(int mode, bool joint, dt_rng r, const float *x, float *want, int32_t *flags)
{
    for (int i = 0; i < N; i++) {
        flags[i] = 0;
        if (joint && dt_rng_uniform(&r) <= 0.5f)
            flags[i] = mode;
        if (!joint && (mode & 1) && dt_rng_uniform(&r) <= 0.5f)
            flags[i] |= 1;
        if (!joint && (mode & 2) && dt_rng_uniform(&r) <= 0.5f)
            flags[i] |= 2;
    }
    dt_nn_ops_cpu()->img_flip(N, H, W, C, flags, x, want, false);
}

static void expect_adjust(bool contrast, float lo, float hi, float vlo, float vhi, dt_rng r,
                          const float *x, float *want)
{
    for (int i = 0; i < N; i++) {
        float u = lo + (hi - lo) * dt_rng_uniform(&r);
        double d = contrast ? 0 : (double)(u * (vhi - vlo)), f = contrast ? u : 1;
        for (int k = 0; k < C; k++) {
            double m = 0;
            for (int p = 0; p < H * W; p++)
                m += x[i * IMG + p * C + k];
            m /= H * W;
            for (int p = 0; p < H * W; p++) {
                double v = x[i * IMG + p * C + k];
                double e = contrast ? (v - m) * f + m : v + d;
                want[i * IMG + p * C + k] = (float)fmin(fmax(e, vlo), vhi);
            }
        }
    }
}

static void expect_identity_at_inference(dt_model *m, const float *x)
{
    float out[N * IMG];
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, N, out, &err), &err);
    ASSERT_EQ(memcmp(out, x, sizeof out), 0);
}

DT_TEST(nn_augment_random_flip_draws)
{
    static float x[N * IMG], want[N * IMG];
    image_batch(x, 1, 3);
    const char *modes[] = {"horizontal", "vertical", "horizontal_and_vertical"};
    for (int k3 = 0; k3 < 2; k3++) /* Keras 3 configs carry data_format */
        for (int mi = 0; mi < 3; mi++) {
            char layer[256];
            snprintf(layer, sizeof layer,
                     K2("RandomFlip", "flip", "\"mode\": \"%s\", \"seed\": 1337%s"), modes[mi],
                     k3 ? ", \"data_format\": \"channels_last\"" : "");
            dt_model *m = nn_build(nn_seq("5, 4, 3", layer, NULL), 1);
            dt_rng r0 = step_rng(42, 7, 0), r1 = step_rng(42, 7, 1);
            int32_t f0[N], f1[N];
            expect_flip(mi + 1, k3, r0, x, want, f0);
            ASSERT_F(train_mse(m, x, want, N, &r0), ==, 0.0); /* exact: a flip moves values */
            ASSERT_F(train_mse(m, x, want, N, &r0), ==, 0.0); /* same (seed, step, rank) */
            expect_flip(mi + 1, k3, r1, x, want, f1);
            ASSERT_NE(memcmp(f0, f1, sizeof f0), 0); /* another rank draws other flips */
            ASSERT_F(train_mse(m, x, want, N, &r1), ==, 0.0);
            int lr = 0, ud = 0, one = 0;
            for (int i = 0; i < N; i++)
                lr += f0[i] & 1, ud += (f0[i] >> 1) & 1, one += f0[i] == 1 || f0[i] == 2;
            ASSERT_TRUE(mi == 1 ? lr == 0 : lr > 0 && lr < N);
            ASSERT_TRUE(mi == 0 ? ud == 0 : ud > 0 && ud < N);
            if (mi == 2) /* Keras 3 turns half or not at all; Keras 2 also flips one axis */
                ASSERT_TRUE(k3 ? one == 0 : one > 0);
            expect_identity_at_inference(m, x);
            dt_model_free(m);
        }
}

DT_TEST(nn_augment_random_brightness_contrast_draws)
{
    static float x[N * IMG], want[N * IMG], other[N * IMG];
    struct {
        const char *layer;
        bool contrast;
        float lo, hi, vlo, vhi, scale;
    } cases[] = {
        {K2("RandomBrightness", "b", "\"factor\": 0.4, \"value_range\": [0, 255], \"seed\": null"),
         false, -0.4f, 0.4f, 0, 255, 255},
        {K2("RandomBrightness", "b", "\"factor\": [0.3, -0.1], \"value_range\": [1, 0]"), false,
         -0.1f, 0.3f, 0, 1, 1},
        {K2("RandomContrast", "c", "\"factor\": [0.5, 0.9], \"value_range\": [0, 1]"), true, 0.5f,
         1.9f, 0, 1, 1},
        {K2("RandomContrast", "c", "\"factor\": 0.7, \"seed\": 2"), true, 0.3f, 1.7f, 0, 255, 255},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        image_batch(x, cases[ci].scale, 11 + ci);
        dt_model *m = nn_build(nn_seq("5, 4, 3", cases[ci].layer, NULL), 1);
        dt_rng r0 = step_rng(42, 3, 0), r1 = step_rng(42, 3, 1);
        expect_adjust(cases[ci].contrast, cases[ci].lo, cases[ci].hi, cases[ci].vlo, cases[ci].vhi,
                      r0, x, want);
        double tol = 1e-10 * cases[ci].scale * cases[ci].scale;
        double l0 = train_mse(m, x, want, N, &r0);
        ASSERT_F(l0, <, tol);
        ASSERT_F(train_mse(m, x, want, N, &r0), ==, l0); /* bit-identical replay */
        expect_adjust(cases[ci].contrast, cases[ci].lo, cases[ci].hi, cases[ci].vlo, cases[ci].vhi,
                      r1, x, other);
        ASSERT_F(train_mse(m, x, other, N, &r1), <, tol);
        ASSERT_F(train_mse(m, x, want, N, &r1), >, 1e3 * tol); /* rank 1 drew other factors */
        expect_identity_at_inference(m, x);
        dt_model_free(m);
    }
}

/* Resizing and CenterCrop act at inference too: predict gives the resize of data's kernel and
 * the centred slice. */
DT_TEST(nn_augment_resizing_center_crop_predict)
{
    static float x[N * IMG];
    image_batch(x, 1, 21);
    dt_err err = {0};
    dt_model *m = nn_build(
        nn_seq("5, 4, 3",
               K2("Resizing", "r", "\"height\": 3, \"width\": 7, \"interpolation\": \"bilinear\""),
               NULL),
        1);
    float out[N * 3 * 7 * C], ref[3 * 7 * C];
    ASSERT_OK(dt_model_predict(m, x, N, out, &err), &err);
    for (int i = 0; i < N; i++) {
        ASSERT_OK(dt_image_resize(x + i * IMG, H, W, C, ref, 3, 7, DT_INTERP_BILINEAR, &err), &err);
        ASSERT_EQ(memcmp(out + i * 3 * 7 * C, ref, sizeof ref), 0);
    }
    dt_model_free(m);

    /* crop_to_aspect_ratio: 5x4 to 2x2 resizes the centred 4x4 box (rows 0..3; int(1 / 2) = 0) */
    m = nn_build(nn_seq("5, 4, 3",
                        K2("Resizing", "r",
                           "\"height\": 2, \"width\": 2, \"crop_to_aspect_ratio\": true, "
                           "\"interpolation\": \"nearest\""),
                        NULL),
                 1);
    float o2[N * 2 * 2 * C];
    ASSERT_OK(dt_model_predict(m, x, N, o2, &err), &err);
    for (int i = 0; i < N; i++)
        for (int yy = 0; yy < 2; yy++)
            for (int xx = 0; xx < 2; xx++)
                for (int k = 0; k < C; k++) /* nearest of 4 -> 2: rows/cols 1 and 3 */
                    ASSERT_F(o2[((i * 2 + yy) * 2 + xx) * C + k], ==,
                             x[i * IMG + ((1 + 2 * yy) * W + 1 + 2 * xx) * C + k]);
    dt_model_free(m);

    m = nn_build(nn_seq("5, 4, 3", K2("CenterCrop", "c", "\"height\": 2, \"width\": 3"), NULL), 1);
    float o3[N * 2 * 3 * C];
    ASSERT_OK(dt_model_predict(m, x, N, o3, &err), &err);
    for (int i = 0; i < N; i++) /* (5 - 2) // 2 = 1, (4 - 3) // 2 = 0 */
        for (int yy = 0; yy < 2; yy++)
            for (int xx = 0; xx < 3; xx++)
                for (int k = 0; k < C; k++)
                    ASSERT_F(o3[((i * 2 + yy) * 3 + xx) * C + k], ==,
                             x[i * IMG + ((1 + yy) * W + xx) * C + k]);
    dt_model_free(m);
}

/* ---- gradients ----------------------------------------------------------------------------- */

#define CONV_TANH                                                                                  \
    "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 2, \"kernel_size\": 2, "               \
    "\"padding\": \"same\", \"activation\": \"tanh\"}}"
#define FLATTEN "{\"class_name\": \"Flatten\", \"config\": {}}"
#define DENSE3  "{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}"

/* A conv in front, so the conv's weight gradients check each layer's input gradient. The value
 * ranges leave tanh's (-1, 1) unclipped: a clip boundary crossed within eps breaks central
 * differences, so the clip's mask is checked on the kernel, where crossings are detected. */
DT_TEST(nn_grad_augment_layers)
{
    const char *layers[] = {
        K2("RandomFlip", "f", "\"mode\": \"horizontal_and_vertical\""),
        K2("RandomBrightness", "b", "\"factor\": 0.3, \"value_range\": [-5, 5]"),
        K2("RandomContrast", "c", "\"factor\": [0.4, 0.6], \"value_range\": [-5, 5]"),
        K2("Resizing", "r", "\"height\": 5, \"width\": 3"),
        K2("Resizing", "r", "\"height\": 3, \"width\": 7, \"crop_to_aspect_ratio\": true"),
        K2("Resizing", "r", "\"height\": 6, \"width\": 2, \"interpolation\": \"nearest\""),
        K2("Resizing", "r", "\"height\": 3, \"width\": 2, \"interpolation\": \"area\""),
        K2("Resizing", "r", "\"height\": 7, \"width\": 3, \"interpolation\": \"area\""),
        K2("Resizing", "r", "\"height\": 6, \"width\": 3, \"interpolation\": \"bicubic\""),
        K2("Resizing", "r",
           "\"height\": 3, \"width\": 2, \"interpolation\": \"bicubic\", "
           "\"crop_to_aspect_ratio\": true"),
        K2("CenterCrop", "c", "\"height\": 2, \"width\": 3"),
        K2("CenterCrop", "c", "\"height\": 6, \"width\": 5"),
    };
    static const dt_loss sce = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        ASSERT_GT(nn_gradcheck(nn_seq("4, 4, 2", CONV_TANH, layers[i], FLATTEN, DENSE3, NULL), sce,
                               3, 3e-3, 5e-4, 1e-2),
                  0);
}

/* ---- geometric layers: RandomCrop, RandomTranslation, RandomZoom, RandomRotation ------------ */

/* Shifts of the row [a b c d] by 2 (or 1 for wrap) under each fill mode, as TF maps the
 * coordinates: reflect dcba|abcd|dcba, wrap abcd|abcd, constant fill, nearest the edge. */
DT_TEST(nn_augment_transform_fill_modes_exact)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    float x[4] = {1, 2, 3, 4}, y[4];
    struct {
        dt_nn_fill fill;
        float dx;
        float want[4];
    } cases[] = {
        {DT_NN_FILL_REFLECT, 2, {2, 1, 1, 2}},  {DT_NN_FILL_REFLECT, -2, {3, 4, 4, 3}},
        {DT_NN_FILL_WRAP, 1, {4, 1, 2, 3}},     {DT_NN_FILL_WRAP, -1, {2, 3, 4, 1}},
        {DT_NN_FILL_CONSTANT, 2, {9, 9, 1, 2}}, {DT_NN_FILL_NEAREST, 2, {1, 1, 1, 2}},
        {DT_NN_FILL_NEAREST, -3, {4, 4, 4, 4}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int nearest = 0; nearest < 2; nearest++) {
            dt_nn_transform g = {.n = 1,
                                 .h = 1,
                                 .w = 4,
                                 .c = 1,
                                 .nearest = nearest,
                                 .fill = cases[i].fill,
                                 .fill_value = 9};
            float t[8] = {1, 0, -cases[i].dx, 0, 1, 0, 0, 0};
            o->img_transform(&g, t, x, y);
            for (int k = 0; k < 4; k++)
                ASSERT_F(y[k], ==, cases[i].want[k]);
        }
    /* half a pixel, bilinear, constant: each output averages two neighbours, the fill at the
     * left edge */
    dt_nn_transform g = {.n = 1, .h = 1, .w = 4, .c = 1, .fill = DT_NN_FILL_CONSTANT};
    float t[8] = {1, 0, -0.5f, 0, 1, 0, 0, 0};
    o->img_transform(&g, t, x, y);
    const float half[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    for (int k = 0; k < 4; k++)
        ASSERT_F(y[k], ==, half[k]);
}

/* Keras's rotation matrix: a quarter turn of a square image reads in(w - 1 - y, x); half a turn
 * is both flips. Every transform's backward is its transpose. */
DT_TEST(nn_augment_transform_rotation_and_transpose)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    enum { S = 5, C2 = 2, IMG2 = S * S * C2 };
    float x[IMG2], y[IMG2], ref[IMG2], g[IMG2], dx[IMG2];
    dt_rng r;
    dt_rng_seed(&r, 4);
    for (int i = 0; i < IMG2; i++)
        x[i] = (float)dt_rng_normal(&r), g[i] = (float)dt_rng_normal(&r);
    for (int quarter = 1; quarter <= 2; quarter++) {
        double a = quarter * M_PI / 2;
        float co = (float)cos(a), si = (float)sin(a), w1 = S - 1, h1 = S - 1;
        float t[8] = {
            co, -si, (w1 - (co * w1 - si * h1)) / 2, si, co, (h1 - (si * w1 + co * h1)) / 2, 0, 0};
        dt_nn_transform geo = {.n = 1, .h = S, .w = S, .c = C2, .nearest = true};
        o->img_transform(&geo, t, x, y);
        int32_t both = 3;
        if (quarter == 2)
            o->img_flip(1, S, S, C2, &both, x, ref, false);
        if (quarter == 2)
            ASSERT_EQ(memcmp(y, ref, sizeof y), 0);
        else
            for (int yy = 0; yy < S; yy++)
                for (int xx = 0; xx < S; xx++)
                    for (int k = 0; k < C2; k++) /* out(x, y) = in(w - 1 - y, x) */
                        ASSERT_F(y[(yy * S + xx) * C2 + k], ==,
                                 x[(xx * S + (S - 1 - yy)) * C2 + k]);
    }
    for (int fill = 0; fill < 4; fill++)
        for (int nearest = 0; nearest < 2; nearest++) {
            dt_nn_transform geo = {.n = 1,
                                   .h = S,
                                   .w = S,
                                   .c = C2,
                                   .nearest = nearest,
                                   .fill = (dt_nn_fill)fill,
                                   .fill_value = 0};
            float a = 0.7f, z = 1.3f;
            float t[8] = {z * cosf(a), -sinf(a), 1.2f, sinf(a), z * cosf(a), -0.7f, 0.01f, 0};
            o->img_transform(&geo, t, x, y);
            o->img_transform_bwd(&geo, t, g, dx, false);
            double lhs = 0, rhs = 0;
            for (int i = 0; i < IMG2; i++)
                lhs += (double)y[i] * g[i], rhs += (double)x[i] * dx[i];
            ASSERT_NEAR(lhs, rhs, 1e-4 * (1 + fabs(lhs)));
        }
}

/* The layers' transforms from a copy of the step's stream, with Keras's matrices written out
 * here: translation (height drawn first), zoom about the centre, rotation about the centre. */
static void expect_transform(int kind, dt_rng r, const float *x, float *want)
{
    static float t[N * 8];
    for (int i = 0; i < N; i++) {
        float *ti = t + i * 8;
        memset(ti, 0, 8 * sizeof(float));
        if (kind == 0) { /* height_factor [-0.2, 0.3], width_factor 0.5 */
            float dy = (-0.2f + 0.5f * dt_rng_uniform(&r)) * H;
            float dx = (-0.5f + 1.0f * dt_rng_uniform(&r)) * W;
            ti[0] = ti[4] = 1, ti[2] = -dx, ti[5] = -dy;
        } else if (kind == 1) { /* height_factor [-0.5, 0.2], no width_factor */
            float z = 1 + (-0.5f + 0.7f * dt_rng_uniform(&r));
            ti[0] = ti[4] = z, ti[2] = (W - 1.0f) / 2 * (1 - z), ti[5] = (H - 1.0f) / 2 * (1 - z);
        } else { /* factor 0.1 */
            float lo = -0.1f * (float)(2 * M_PI), hi = 0.1f * (float)(2 * M_PI);
            float a = lo + (hi - lo) * dt_rng_uniform(&r), co = cosf(a), si = sinf(a);
            float w1 = W - 1.0f, h1 = H - 1.0f;
            ti[0] = co, ti[1] = -si, ti[2] = (w1 - (co * w1 - si * h1)) / 2;
            ti[3] = si, ti[4] = co, ti[5] = (h1 - (si * w1 + co * h1)) / 2;
        }
    }
    dt_nn_transform g = {.n = N, .h = H, .w = W, .c = C, .fill = DT_NN_FILL_REFLECT};
    dt_nn_ops_cpu()->img_transform(&g, t, x, want);
}

DT_TEST(nn_augment_transform_layers_draws)
{
    static float x[N * IMG], want[N * IMG];
    image_batch(x, 1, 31);
    const char *layers[] = {
        K2("RandomTranslation", "t",
           "\"height_factor\": [-0.2, 0.3], \"width_factor\": 0.5, \"fill_mode\": \"reflect\", "
           "\"interpolation\": \"bilinear\", \"seed\": null, \"fill_value\": 0.0"),
        K2("RandomZoom", "z",
           "\"height_factor\": [-0.5, 0.2], \"width_factor\": null, \"fill_mode\": \"reflect\", "
           "\"interpolation\": \"bilinear\", \"seed\": null, \"fill_value\": 0.0"),
        K2("RandomRotation", "r",
           "\"factor\": 0.1, \"fill_mode\": \"reflect\", \"interpolation\": \"bilinear\", "
           "\"seed\": null, \"fill_value\": 0.0"),
    };
    for (int kind = 0; kind < 3; kind++) {
        dt_model *m = nn_build(nn_seq("5, 4, 3", layers[kind], NULL), 1);
        dt_rng r0 = step_rng(9, 2, 0), r1 = step_rng(9, 2, 1);
        expect_transform(kind, r0, x, want);
        ASSERT_F(train_mse(m, x, want, N, &r0), ==, 0.0);
        ASSERT_F(train_mse(m, x, want, N, &r1), >, 1e-4); /* rank 1 moved other ways */
        expect_transform(kind, r1, x, want);
        ASSERT_F(train_mse(m, x, want, N, &r1), ==, 0.0);
        expect_identity_at_inference(m, x);
        dt_model_free(m);
    }
}

/* RandomCrop: a random box in training (offsets U{0..h - height}, then the width's), the
 * Resizing(crop_to_aspect_ratio) output at inference. */
DT_TEST(nn_augment_random_crop)
{
    static float x[N * IMG], want[N * 3 * 2 * C], out[N * 3 * 2 * C], ref[N * 3 * 2 * C];
    image_batch(x, 1, 41);
    dt_model *m = nn_build(
        nn_seq("5, 4, 3", K2("RandomCrop", "c", "\"height\": 3, \"width\": 2, \"seed\": 5"), NULL),
        1);
    dt_rng r0 = step_rng(1, 1, 0), r = r0;
    for (int i = 0; i < N; i++) {
        int y0 = (int)dt_rng_below(&r, 3), x0 = (int)dt_rng_below(&r, 3);
        for (int yy = 0; yy < 3; yy++)
            for (int xx = 0; xx < 2; xx++)
                for (int k = 0; k < C; k++)
                    want[((i * 3 + yy) * 2 + xx) * C + k] =
                        x[i * IMG + ((y0 + yy) * W + x0 + xx) * C + k];
    }
    ASSERT_F(train_mse(m, x, want, N, &r0), ==, 0.0);
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, N, out, &err), &err);
    dt_model *rs = nn_build(
        nn_seq("5, 4, 3",
               K2("Resizing", "r", "\"height\": 3, \"width\": 2, \"crop_to_aspect_ratio\": true"),
               NULL),
        1);
    ASSERT_OK(dt_model_predict(rs, x, N, ref, &err), &err);
    ASSERT_EQ(memcmp(out, ref, sizeof out), 0);
    dt_model_free(rs);
    dt_model_free(m);
}

DT_TEST(nn_augment_geometric_configs)
{
    const char *k3 = nn_seq(
        "12, 10, 3",
        "{\"module\": \"keras.layers\", \"class_name\": \"RandomCrop\", \"config\": {\"name\": "
        "\"random_crop\", \"trainable\": true, " K3_DTYPE ", \"height\": 8, \"width\": 8, "
        "\"seed\": null, \"data_format\": \"channels_last\"}, \"registered_name\": null}",
        "{\"module\": \"keras.layers\", \"class_name\": \"RandomTranslation\", \"config\": "
        "{\"name\": \"random_translation\", \"trainable\": true, " K3_DTYPE
        ", \"height_factor\": 0.1, \"width_factor\": [-0.2, 0.1], \"fill_mode\": \"wrap\", "
        "\"interpolation\": \"nearest\", \"seed\": 1, \"fill_value\": 0.0, \"data_format\": "
        "\"channels_last\"}, \"registered_name\": null}",
        "{\"module\": \"keras.layers\", \"class_name\": \"RandomZoom\", \"config\": {\"name\": "
        "\"random_zoom\", \"trainable\": true, " K3_DTYPE ", \"height_factor\": [-0.3, 0.2], "
        "\"width_factor\": null, \"fill_mode\": \"constant\", \"interpolation\": \"bilinear\", "
        "\"seed\": null, \"fill_value\": 0.5, \"data_format\": \"channels_last\"}, "
        "\"registered_name\": null}",
        "{\"module\": \"keras.layers\", \"class_name\": \"RandomRotation\", \"config\": {\"name\": "
        "\"random_rotation\", \"trainable\": true, " K3_DTYPE ", \"factor\": 0.2, \"fill_mode\": "
        "\"nearest\", \"interpolation\": \"bilinear\", \"seed\": null, \"fill_value\": 0.0, "
        "\"data_format\": \"channels_last\"}, \"registered_name\": null}",
        NULL);
    dt_model *m = nn_build(k3, 1);
    const int shapes[][4] = {{8, 8, 3, 0}, {8, 8, 3, 0}, {8, 8, 3, 0}, {8, 8, 3, 0}};
    expect_shapes(m, shapes, 4);
    dt_model_free(m);
    expect_refused(K2("RandomRotation", "r", "\"factor\": 0.1, \"fill_mode\": \"mirror\""),
                   "8, 8, 1", "option 'fill_mode'");
    expect_refused(K2("RandomRotation", "r", "\"factor\": 0.1, \"interpolation\": \"bicubic\""),
                   "8, 8, 1", "option 'interpolation'");
    expect_refused(K2("RandomTranslation", "t", "\"height_factor\": 0.1"), "8, 8, 1",
                   "option 'width_factor'");
    expect_refused(K2("RandomTranslation", "t", "\"height_factor\": 1.5, \"width_factor\": 0"),
                   "8, 8, 1", "option 'height_factor'");
    expect_refused(K2("RandomZoom", "z", "\"height_factor\": [-1.5, 0.2]"), "8, 8, 1",
                   "option 'height_factor'");
    expect_refused(K2("RandomZoom", "z", "\"height_factor\": [0.3, 0.2]"), "8, 8, 1",
                   "option 'height_factor'");
    expect_refused(K2("RandomCrop", "c", "\"height\": 0, \"width\": 2"), "8, 8, 1",
                   "option 'height'");
}

DT_TEST(nn_grad_augment_geometric_layers)
{
    const char *layers[] = {
        K2("RandomCrop", "c", "\"height\": 3, \"width\": 2"),
        K2("RandomCrop", "c", "\"height\": 5, \"width\": 3"), /* larger: the resize path */
        K2("RandomTranslation", "t",
           "\"height_factor\": 0.3, \"width_factor\": 0.4, \"fill_mode\": \"constant\", "
           "\"fill_value\": 0.3"),
        K2("RandomZoom", "z", "\"height_factor\": [-0.4, 0.4], \"fill_mode\": \"wrap\""),
        K2("RandomRotation", "r", "\"factor\": 0.3"),
        K2("RandomRotation", "r",
           "\"factor\": 0.3, \"interpolation\": \"nearest\", "
           "\"fill_mode\": \"nearest\""),
    };
    static const dt_loss sce = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        ASSERT_GT(nn_gradcheck(nn_seq("4, 4, 2", CONV_TANH, layers[i], FLATTEN, DENSE3, NULL), sce,
                               3, 3e-3, 5e-4, 1e-2),
                  0);
}
