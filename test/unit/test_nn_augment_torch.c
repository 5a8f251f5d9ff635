/* test_nn_augment_torch.c - the projective transform of RandomTranslation, RandomZoom and
 * RandomRotation against PyTorch's grid_sample (test/ref/augment_ref.py) where the two agree on
 * the rules: bilinear and nearest interpolation, TF's fill_mode "constant" (fill 0) and
 * "nearest". Transforms as the layers build them: rotations, zooms, shifts, and one projective. */
#include "test_image_util.h"
#include "test_nn_util.h"

#include "nn/ops.h"

#include <sys/stat.h>

DT_TEST_TIMEOUT(nn_augment_transform_matches_torch, 180)
{
    img_need_python(true);
    enum { H = 9, W = 12, C = 3, K = 5 };
    static float x[H * W * C], y[H * W * C];
    dt_rng r;
    dt_rng_seed(&r, 77);
    for (int i = 0; i < H * W * C; i++)
        x[i] = (float)dt_rng_normal(&r);
    float t[K][8];
    const float angles[K] = {0.3f, -1.1f, 2.5f, 0.0f, 0.2f};
    const float zooms[K] = {1.0f, 0.7f, 1.4f, 1.25f, 0.9f};
    for (int k = 0; k < K; k++) { /* Keras's rotation about the centre, zoomed, shifted */
        float co = cosf(angles[k]) * zooms[k], si = sinf(angles[k]) * zooms[k];
        float w1 = W - 1, h1 = H - 1;
        float v[8] = {co,
                      -si,
                      (w1 - (co * w1 - si * h1)) / 2 + 0.37f * k,
                      si,
                      co,
                      (h1 - (si * w1 + co * h1)) / 2 - 0.61f * k,
                      0,
                      k == 4 ? 0.015f : 0.0f};
        memcpy(t[k], v, sizeof v);
    }
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/transform", dt_test_tmpdir());
    ASSERT_EQ(mkdir(dir, 0700), 0);
    img_write(dir, "in.f32", x, sizeof x);
    img_write(dir, "t.f32", t, sizeof t);
    char cmd[4096];
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' transform '%s' %d %d %d %d",
                       dt_test_src_path("test/ref/augment_ref.py"), dir, H, W, C, K);
    ASSERT_EQ(system(cmd), 0);
    const dt_nn_ops *o = dt_nn_ops_cpu();
    for (int nearest = 0; nearest < 2; nearest++)
        for (int f = 0; f < 2; f++) {
            double worst = 0;
            for (int k = 0; k < K; k++) {
                dt_nn_transform g = {.n = 1,
                                     .h = H,
                                     .w = W,
                                     .c = C,
                                     .nearest = nearest,
                                     .fill = f ? DT_NN_FILL_NEAREST : DT_NN_FILL_CONSTANT};
                o->img_transform(&g, t[k], x, y);
                char name[128];
                snprintf(name, sizeof name, "out.%d.%s.%s.f32", k, nearest ? "nearest" : "bilinear",
                         f ? "nearest" : "constant");
                size_t len;
                float *want = (float *)img_read(dir, name, &len);
                ASSERT_EQ(len, sizeof y);
                double d = img_maxdiff_f32(y, want, H * W * C);
                worst = d > worst ? d : worst;
                free(want);
            }
            printf("transform %-8s fill %-8s vs torch grid_sample: max |diff| = %.3g\n",
                   nearest ? "nearest" : "bilinear", f ? "nearest" : "constant", worst);
            ASSERT_FLE(worst, 2e-6); /* measured 2.4e-7 bilinear, 0 nearest */
        }
}

/* Resizing(interpolation="area" | "bicubic") in a model, against float64 PyTorch. Area: torch's
 * "area" is adaptive_avg_pool2d, which is TF's ResizeArea only for integer ratios, so those are
 * compared. Bicubic: TF (Keras) uses Keys' a = -0.5 with taps outside the image dropped and the
 * rest renormalised; torch uses a = -0.75 with taps clamped to the edge. dtrain follows TF (to
 * float32 rounding against the float64 rendering of TF's rule), and the test measures how far
 * torch's bicubic is: its a = -0.5 variant (torch's edge rule) equals TF's away from the edges,
 * and both differ from torch's a = -0.75 by far more than rounding. */
#define RESIZING(cfg)                                                                              \
    "{\"class_name\": \"Resizing\", \"config\": {\"name\": \"r\", \"dtype\": \"float32\", " cfg "}}"

DT_TEST_TIMEOUT(nn_augment_resizing_area_bicubic_match_torch, 180)
{
    img_need_python(true);
    enum { N = 2, H = 12, W = 16, C = 3 };
    static float x[N * H * W * C];
    dt_rng r;
    dt_rng_seed(&r, 5);
    for (int i = 0; i < N * H * W * C; i++)
        x[i] = (float)dt_rng_normal(&r);
    const int sizes[][2] = {{4, 8}, {6, 4}, {12, 16}, {5, 7}, {20, 9}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int oh = sizes[s][0], ow = sizes[s][1];
        size_t nout = (size_t)N * oh * ow * C;
        char dir[1200], cmd[4096];
        snprintf(dir, sizeof dir, "%s/resize%zu", dt_test_tmpdir(), s);
        ASSERT_EQ(mkdir(dir, 0700), 0);
        img_write(dir, "in.f32", x, sizeof x);
        dt_test_python_cmd(cmd, sizeof cmd, " '%s' resize '%s' %d %d %d %d %d",
                           dt_test_src_path("test/ref/augment_ref.py"), dir, H, W, C, oh, ow);
        ASSERT_EQ(system(cmd), 0);
        float *y = malloc(nout * sizeof(float));
        dt_err err = {0};
        size_t len;
        char cfg[256], shape[64];
        snprintf(shape, sizeof shape, "%d, %d, %d", H, W, C);
        /* area */
        snprintf(cfg, sizeof cfg, "\"height\": %d, \"width\": %d, \"interpolation\": \"area\"", oh,
                 ow);
        char layer[512];
        snprintf(layer, sizeof layer, RESIZING("%s"), cfg);
        dt_model *m = nn_build(nn_seq(shape, layer, NULL), 1);
        ASSERT_OK(dt_model_predict(m, x, N, y, &err), &err);
        dt_model_free(m);
        if (H % oh == 0 && W % ow == 0) {
            float *want = (float *)img_read(dir, "area.pool.f32", &len);
            double d = img_maxdiff_f32(y, want, nout);
            printf("area    %2dx%2d -> %2dx%2d vs torch adaptive_avg_pool2d: max |diff| = %.3g\n",
                   H, W, oh, ow, d);
            ASSERT_FLE(d, 2e-6);
            free(want);
        }
        /* bicubic */
        snprintf(cfg, sizeof cfg, "\"height\": %d, \"width\": %d, \"interpolation\": \"bicubic\"",
                 oh, ow);
        snprintf(layer, sizeof layer, RESIZING("%s"), cfg);
        m = nn_build(nn_seq(shape, layer, NULL), 1);
        ASSERT_OK(dt_model_predict(m, x, N, y, &err), &err);
        dt_model_free(m);
        float *tf = (float *)img_read(dir, "bicubic.tf.f32", &len);
        float *pt = (float *)img_read(dir, "bicubic.torch.f32", &len);
        float *a50 = (float *)img_read(dir, "bicubic.a50.f32", &len);
        double d_tf = img_maxdiff_f32(y, tf, nout), d_pt = img_maxdiff_f32(y, pt, nout);
        /* away from the edges (2 output cells in), TF's rule is torch's with a = -0.5 */
        double d_in = 0;
        for (int i = 0; i < N; i++)
            for (int yy = 2; yy < oh - 2; yy++)
                for (int xx = 2; xx < ow - 2; xx++)
                    for (int k = 0; k < C; k++) {
                        size_t j = (((size_t)i * oh + yy) * ow + xx) * C + k;
                        double d = fabs((double)y[j] - a50[j]);
                        d_in = d > d_in ? d : d_in;
                    }
        printf("bicubic %2dx%2d -> %2dx%2d: vs TF's rule in float64 %.3g, vs torch (a=-0.75) %.3g, "
               "vs torch's formula with a=-0.5 inside %.3g\n",
               H, W, oh, ow, d_tf, d_pt, d_in);
        ASSERT_FLE(d_tf, 2e-6); /* measured <= 4.8e-7 */
        if (oh != H || ow != W) {
            /* a = -0.75 is another kernel: 0.24..0.26 apart on N(0, 1) pixels, not rounding */
            ASSERT_FLE(0.1, d_pt);
            /* a = -0.5 inside: TF's fraction rounded to 1/1024 only (0 for integer ratios,
             * measured <= 3.0e-3 otherwise) */
            ASSERT_FLE(d_in, 1e-2);
        } else {
            ASSERT_FLE(d_pt, 1e-6); /* the same size: both the identity */
        }
        free(tf);
        free(pt);
        free(a50);
        free(y);
    }
}
