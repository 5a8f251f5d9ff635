/* test_data_image_resize.c - tf.image.resize's four methods against PyTorch's F.interpolate
 * (align_corners=False, antialias=False) where they compute the same thing, against a float64
 * reference of TF's rule (test/ref/image_ref.py) where they do not, and against PIL on
 * upscaling (PIL antialiases when it shrinks, so only enlarging is comparable).
 *
 *   bilinear  = torch bilinear                    (both half-pixel, edges clamped)
 *   nearest   = torch "nearest-exact"             (torch's "nearest" is floor(i * in/out))
 *   area      = torch "area" for integer factors; otherwise the float64 box reference
 *   bicubic   = float64 Keys a=-0.5 reference     (torch: a=-0.75, clamped edge taps)
 *
 * Measured (values 0..255 with fractions, float32): bilinear vs torch <= 1.6e-4, nearest 0,
 * area vs torch <= 2.3e-5 and vs float64 <= 5.1e-4, bicubic vs float64 <= 6.1e-5 (float32's
 * scale and positions, as TF computes them); vs PIL (upscaling, mode F): bilinear <= 1.6e-4,
 * nearest 0, bicubic <= 0.17 (TF rounds the tap position to 1/1024, PIL does not). */
#include "test_image_util.h"

#include <sys/stat.h>

typedef struct rcase {
    int ih, iw, c, oh, ow;
} rcase;

static float *read_f32(const char *dir, const char *name, size_t n)
{
    size_t len;
    float *v = (float *)img_read(dir, name, &len);
    ASSERT_EQ(len, n * sizeof(float));
    return v;
}

static double compare(const char *dir, const char *ref, const float *ours, size_t n, double tol,
                      const rcase *k, const char *method)
{
    char path[2400];
    snprintf(path, sizeof path, "%s/%s.f32", dir, ref);
    if (access(path, F_OK) != 0)
        return -1; /* this reference does not apply to this case */
    char name[64];
    snprintf(name, sizeof name, "%s.f32", ref);
    float *want = read_f32(dir, name, n);
    double d = img_maxdiff_f32(ours, want, n);
    printf("%2dx%-2d -> %2dx%-2d %-9s vs %-12s max |diff| = %.3g\n", k->ih, k->iw, k->oh, k->ow,
           method, ref, d);
    ASSERT_FLE(d, tol);
    free(want);
    return d;
}

DT_TEST_TIMEOUT(data_image_resize_matches_torch_and_pil, 180)
{
    img_need_python(true);
    static const rcase cases[] = {
        {13, 17, 3, 29, 31}, /* up, non-integer */
        {13, 17, 3, 5, 7},   /* down, non-integer */
        {26, 34, 3, 13, 17}, /* down by 2: torch's area is TF's */
        {24, 24, 1, 6, 8},   /* down by 4 and 3 */
        {10, 10, 4, 20, 20}, /* up by 2 */
        {7, 9, 2, 7, 9},     /* same size: the identity */
    };
    char dir[1200];
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const rcase *k = &cases[ci];
        snprintf(dir, sizeof dir, "%s/case%zu", dt_test_tmpdir(), ci);
        ASSERT_EQ(mkdir(dir, 0700), 0);
        size_t nin = (size_t)k->ih * k->iw * k->c, nout = (size_t)k->oh * k->ow * k->c;
        float *in = malloc(nin * sizeof(float)), *out = malloc(nout * sizeof(float));
        srand((unsigned)ci + 1);
        for (size_t i = 0; i < nin; i++) /* pixels with fractions: no rounding hides an error */
            in[i] = (float)(rand() % 25600) / 100.0f;
        img_write(dir, "in.f32", in, nin * sizeof(float));
        char args[1400];
        snprintf(args, sizeof args, "resize '%s' %d %d %d %d %d", dir, k->ih, k->iw, k->c, k->oh,
                 k->ow);
        img_ref(args, NULL);
        dt_err err = {0};
        static const struct {
            dt_interp m;
            const char *refs[3];
            double tol[3];
        } methods[] = {
            {DT_INTERP_BILINEAR, {"bilinear.torch", "bilinear.pil"}, {1e-3, 1e-3}},
            {DT_INTERP_NEAREST, {"nearest.torch", "nearest.pil"}, {0, 0}},
            {DT_INTERP_AREA, {"area.torch", "area.f64"}, {1e-3, 1e-3}},
            {DT_INTERP_BICUBIC, {"bicubic.f64", "bicubic.pil"}, {1e-3, 0.5}},
        };
        for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++) {
            ASSERT_OK(
                dt_image_resize(in, k->ih, k->iw, k->c, out, k->oh, k->ow, methods[mi].m, &err),
                &err);
            int compared = 0;
            for (int r = 0; r < 3 && methods[mi].refs[r]; r++)
                compared += compare(dir, methods[mi].refs[r], out, nout, methods[mi].tol[r], k,
                                    dt_interp_name(methods[mi].m)) >= 0;
            ASSERT_GE(compared, 1);
            if (k->ih == k->oh && k->iw == k->ow)
                ASSERT_EQ(memcmp(in, out, nout * sizeof(float)), 0);
        }
        free(in);
        free(out);
    }
    /* sizes past the limits are refused, not allocated */
    float one = 1;
    dt_err err = {0};
    ASSERT_STATUS(dt_image_resize(&one, 1, 1, 1, &one, 0, 1, DT_INTERP_BILINEAR, &err), DT_EINVAL);
    ASSERT_STATUS(
        dt_image_resize(&one, 1, 1, 1, &one, 1, DT_MAX_IMAGE_DIM + 1, DT_INTERP_AREA, &err),
        DT_EINVAL);
}

/* Keras's crop_to_aspect_ratio and the uint8 rounding, through dt_image_load_u8 on a PNG
 * written by PIL: a 20x40 image to 10x10 crops the centre 20x20 (x from 10), then halves. */
DT_TEST_TIMEOUT(data_image_crop_to_aspect_ratio, 60)
{
    img_need_python(false);
    char dir[1200], cmd[2000];
    snprintf(dir, sizeof dir, "%s", dt_test_tmpdir());
    dt_test_python_cmd(
        cmd, sizeof cmd,
        " -c \"import numpy as np; from PIL import Image; "
        "a = (np.arange(40)[None, :] * 6 + np.arange(20)[:, None]).astype(np.uint8); "
        "Image.fromarray(a, 'L').save('%s/w.png')\"",
        dir);
    ASSERT_EQ(system(cmd), 0);
    size_t len;
    uint8_t *png = img_read(dir, "w.png", &len);
    dt_image_opts o = dt_image_opts_default();
    o.height = o.width = 10;
    o.channels = 1;
    o.interpolation = DT_INTERP_AREA;
    o.crop_to_aspect_ratio = true;
    uint8_t px[100];
    dt_err err = {0};
    ASSERT_OK(dt_image_load_u8(png, len, &o, "w.png", px, &err), &err);
    /* area 2x2 of v(y, x) = 6x + y over x in {10+2j, 11+2j}, y in {2i, 2i+1}: 6(10+2j)+3+2i
     * (+0.5 rounds up) */
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j++)
            ASSERT_EQ(px[i * 10 + j], 6 * (10 + 2 * j) + 3 + 2 * i + 1);
    o.crop_to_aspect_ratio = false; /* without the crop: all 40 columns squeezed in */
    ASSERT_OK(dt_image_load_u8(png, len, &o, "w.png", px, &err), &err);
    ASSERT_EQ(px[0], (int)(6 * 1.5 + 0.5 + 0.5)); /* mean of x 0..3, y 0..1: 9.5 -> 10 */
    free(png);
}
