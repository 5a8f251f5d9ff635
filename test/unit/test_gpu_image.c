/* test_gpu_image.c - the CUDA augmentation kernels (image.cu) against the CPU table on the same
 * random inputs: flips, brightness / contrast with the clip, resize in every method (up, down,
 * same size, a cropped window, 1-pixel edges) and the projective transform in every fill mode,
 * forward and transpose, written (outputs poisoned with NaN) and accumulated; the transposes and
 * the channel means run twice and must give the same bits. Skips without a GPU. */
#include "test_gpu_util.h"

#include <stdio.h>

/* The device buffer d (n floats) within tol of the CPU's ref (relative L2; NaN fails). */
static void expect_close(const dt_nn_ops *g, const float *d, const float *ref, size_t n, double tol,
                         const char *what)
{
    float *h = gpu_down(g, d, n);
    GPU_SYNC();
    double e = gpu_rel_l2(h, ref, n);
    if (!(e <= tol))
        fprintf(stderr, "%s: relative L2 error %.3g > %.3g\n", what, e, tol);
    free(h);
    ASSERT_TRUE(e <= tol);
}

/* The device buffer d (n floats) holds the same bits as another run's, kept in `first`. */
static void expect_same_bits(const dt_nn_ops *g, const float *d, const float *first, size_t n,
                             const char *what)
{
    float *h = gpu_down(g, d, n);
    GPU_SYNC();
    int same = memcmp(h, first, sizeof(float) * n) == 0;
    if (!same)
        fprintf(stderr, "%s: two runs differ\n", what);
    free(h);
    ASSERT_TRUE(same);
}

DT_TEST(gpu_img_flip_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const int shapes[][4] = {{1, 1, 1, 1}, {4, 5, 7, 3}, {4, 6, 1, 2}, {5, 1, 9, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int acc = 0; acc < 2; acc++) {
            int n = shapes[s][0], h = shapes[s][1], w = shapes[s][2], ch = shapes[s][3];
            size_t sz = (size_t)n * h * w * ch;
            int32_t flags[5];
            for (int i = 0; i < n; i++)
                flags[i] = (i + (int)s) % 4; /* none, left-right, up-down, both */
            float *x = gpu_randn(sz, 1, 10 + s), *y = gpu_randn(sz, 1, 20 + s);
            int32_t *dflags = gpu_up_bytes(g, flags, sizeof(int32_t) * (size_t)n);
            float *dx = gpu_up(g, x, sz), *dy = acc ? gpu_up(g, y, sz) : gpu_poison(g, sz);
            c->img_flip(n, h, w, ch, flags, x, y, acc);
            g->img_flip(n, h, w, ch, dflags, dx, dy, acc);
            expect_close(g, dy, y, sz, 1e-5, "img_flip");
            g->free(dflags);
            g->free(dx);
            g->free(dy);
            free(x);
            free(y);
        }
    dt_nn_gpu_unbind();
}

/* Brightness (f NULL), contrast (d NULL) and both, with a clip that cuts some values, forward and
 * backward, over images of 1 pixel, fewer pixels than a block and more than a block's stride. */
DT_TEST(gpu_img_adjust_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const int shapes[][3] = {{1, 1, 1}, {3, 13 * 17, 3}, {2, 4099, 1}, {1, 40, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int kind = 0; kind < 4; kind++) {
            int n = shapes[s][0], hw = shapes[s][1], ch = shapes[s][2];
            size_t sz = (size_t)n * hw * ch;
            float lo = -0.6f, hi = 0.9f;
            float *x = gpu_randn(sz, 1, 30 + s), *dyv = gpu_randn(sz, 1, 40 + s);
            float *f = gpu_randn((size_t)n, 0.5f, 50 + s), *d = gpu_randn((size_t)n, 0.3f, 60 + s);
            for (int i = 0; i < n; i++)
                f[i] += 1.0f;
            bool hf = kind & 1, hd = kind & 2;
            float *df = gpu_up(g, f, (size_t)n), *dd = gpu_up(g, d, (size_t)n);
            float *gx = gpu_up(g, x, sz), *gdy = gpu_up(g, dyv, sz);
            const float *cf = hf ? f : NULL, *cd = hd ? d : NULL;
            const float *gf = hf ? df : NULL, *gd = hd ? dd : NULL;
            float *y = malloc(sizeof(float) * sz), *gy = gpu_poison(g, sz);
            c->img_adjust(n, hw, ch, cf, cd, lo, hi, x, y);
            g->img_adjust(n, hw, ch, gf, gd, lo, hi, gx, gy);
            expect_close(g, gy, y, sz, 1e-5, "img_adjust");
            for (int acc = 0; acc < 2; acc++) {
                float *dx = gpu_randn(sz, 1, 70 + s);
                float *gdx = acc ? gpu_up(g, dx, sz) : gpu_poison(g, sz);
                c->img_adjust_bwd(n, hw, ch, cf, cd, lo, hi, x, dyv, dx, acc);
                g->img_adjust_bwd(n, hw, ch, gf, gd, lo, hi, gx, gdy, gdx, acc);
                expect_close(g, gdx, dx, sz, 1e-4, "img_adjust_bwd"); /* a channel mean */
                if (!acc) {
                    float *first = gpu_down(g, gdx, sz);
                    g->img_adjust_bwd(n, hw, ch, gf, gd, lo, hi, gx, gdy, gdx, false);
                    expect_same_bits(g, gdx, first, sz, "img_adjust_bwd");
                    free(first);
                }
                g->free(gdx);
                free(dx);
            }
            g->free(df);
            g->free(dd);
            g->free(gx);
            g->free(gdy);
            g->free(gy);
            free(x);
            free(dyv);
            free(f);
            free(d);
            free(y);
        }
    dt_nn_gpu_unbind();
}

/* One resize geometry in one method: forward, transpose written and accumulated, the transpose
 * twice for its bits. */
static void check_resize(const dt_nn_ops *g, const dt_nn_resize *r, uint64_t seed)
{
    const dt_nn_ops *c = dt_nn_ops_cpu();
    size_t nx = (size_t)r->n * r->h * r->w * r->c, ny = (size_t)r->n * r->oh * r->ow * r->c;
    char what[128];
    snprintf(what, sizeof what, "img_resize interp %d %dx%d window (%d,%d) %dx%d -> %dx%d",
             (int)r->interp, r->h, r->w, r->y0, r->x0, r->wh, r->ww, r->oh, r->ow);
    float *x = gpu_randn(nx, 1, seed), *y = malloc(sizeof(float) * ny);
    float *gx = gpu_up(g, x, nx), *gy = gpu_poison(g, ny);
    c->img_resize(r, x, y);
    g->img_resize(r, gx, gy);
    expect_close(g, gy, y, ny, 1e-5, what);
    float *dy = gpu_randn(ny, 1, seed + 1), *gdy = gpu_up(g, dy, ny);
    for (int acc = 0; acc < 2; acc++) {
        float *dx = gpu_randn(nx, 1, seed + 2);
        float *gdx = acc ? gpu_up(g, dx, nx) : gpu_poison(g, nx);
        c->img_resize_bwd(r, dy, dx, acc);
        g->img_resize_bwd(r, gdy, gdx, acc);
        expect_close(g, gdx, dx, nx, 1e-5, what);
        if (!acc) {
            float *first = gpu_down(g, gdx, nx);
            g->img_resize_bwd(r, gdy, gdx, false);
            expect_same_bits(g, gdx, first, nx, what);
            free(first);
        }
        g->free(gdx);
        free(dx);
    }
    g->free(gx);
    g->free(gy);
    g->free(gdy);
    free(x);
    free(y);
    free(dy);
}

/* Every method over: up, down (by 2.6 and by 13), the same size, a cropped window (cells outside
 * it get no gradient), 1-pixel outputs and inputs, mixed up/down axes, one axis kept. */
DT_TEST(gpu_img_resize_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops();
    /* n, h, w, c, oh, ow, y0, x0, wh, ww */
    static const int geo[][10] = {
        {2, 5, 7, 3, 11, 13, 0, 0, 5, 7},   {2, 17, 19, 3, 6, 5, 0, 0, 17, 19},
        {1, 9, 8, 2, 9, 8, 0, 0, 9, 8},     {3, 12, 10, 1, 7, 9, 2, 1, 8, 6},
        {2, 6, 6, 2, 1, 1, 0, 0, 6, 6},     {2, 1, 1, 3, 4, 5, 0, 0, 1, 1},
        {1, 40, 39, 1, 3, 3, 0, 0, 40, 39}, {2, 7, 30, 2, 20, 4, 0, 3, 7, 25},
        {2, 6, 9, 1, 6, 4, 0, 0, 6, 9},
    };
    static const dt_nn_interp kinds[] = {DT_NN_INTERP_BILINEAR, DT_NN_INTERP_NEAREST,
                                         DT_NN_INTERP_AREA, DT_NN_INTERP_BICUBIC};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t s = 0; s < sizeof geo / sizeof *geo; s++) {
            const int *q = geo[s];
            dt_nn_resize r = {.n = q[0],
                              .h = q[1],
                              .w = q[2],
                              .c = q[3],
                              .oh = q[4],
                              .ow = q[5],
                              .y0 = q[6],
                              .x0 = q[7],
                              .wh = q[8],
                              .ww = q[9],
                              .interp = kinds[k]};
            check_resize(g, &r, 100 + 10 * k + s);
        }
    dt_nn_gpu_unbind();
}

/* Per-image transforms: identity, a rotation with translation, a zoom out (many outputs read
 * the edges under reflect / wrap / nearest), a projective one, a shift far outside the image,
 * and one whose projection is 0 on a column (k = 1 - x / 3 at x = 3: the fill value). */
static void make_transforms(float *t, int n)
{
    static const float base[][8] = {
        {1, 0, 0, 0, 1, 0, 0, 0},
        {0.96f, -0.28f, 2.1f, 0.28f, 0.96f, -1.3f, 0, 0},
        {2.3f, 0.1f, -4.2f, -0.05f, 1.9f, -3.7f, 0, 0},
        {1.05f, 0.12f, -0.7f, -0.09f, 0.93f, 0.4f, 0.013f, -0.021f},
        {1, 0, 37.5f, 0, 1, -41.25f, 0, 0},
        {1, 0, 0.5f, 0, 1, 0.25f, -1.0f / 3.0f, 0},
    };
    for (int i = 0; i < n; i++)
        memcpy(t + (size_t)i * 8, base[i % 6], sizeof base[0]);
}

static void check_transform(const dt_nn_ops *g, const dt_nn_transform *tf, uint64_t seed)
{
    const dt_nn_ops *c = dt_nn_ops_cpu();
    size_t nx = (size_t)tf->n * tf->h * tf->w * tf->c;
    char what[128];
    snprintf(what, sizeof what, "img_transform fill %d %s %dx%dx%dx%d", (int)tf->fill,
             tf->nearest ? "nearest" : "bilinear", tf->n, tf->h, tf->w, tf->c);
    float *t = malloc(sizeof(float) * 8 * (size_t)tf->n);
    make_transforms(t, tf->n);
    float *x = gpu_randn(nx, 1, seed), *y = malloc(sizeof(float) * nx);
    float *gt = gpu_up(g, t, 8 * (size_t)tf->n), *gx = gpu_up(g, x, nx), *gy = gpu_poison(g, nx);
    c->img_transform(tf, t, x, y);
    g->img_transform(tf, gt, gx, gy);
    expect_close(g, gy, y, nx, 1e-5, what);
    float *dy = gpu_randn(nx, 1, seed + 1), *gdy = gpu_up(g, dy, nx);
    for (int acc = 0; acc < 2; acc++) {
        float *dx = gpu_randn(nx, 1, seed + 2);
        float *gdx = acc ? gpu_up(g, dx, nx) : gpu_poison(g, nx);
        c->img_transform_bwd(tf, t, dy, dx, acc);
        g->img_transform_bwd(tf, gt, gdy, gdx, acc);
        expect_close(g, gdx, dx, nx, 1e-5, what);
        if (!acc) {
            float *first = gpu_down(g, gdx, nx);
            g->img_transform_bwd(tf, gt, gdy, gdx, false);
            expect_same_bits(g, gdx, first, nx, what);
            free(first);
        }
        g->free(gdx);
        free(dx);
    }
    g->free(gt);
    g->free(gx);
    g->free(gy);
    g->free(gdy);
    free(t);
    free(x);
    free(y);
    free(dy);
}

DT_TEST(gpu_img_transform_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops();
    static const dt_nn_fill fills[] = {DT_NN_FILL_REFLECT, DT_NN_FILL_WRAP, DT_NN_FILL_CONSTANT,
                                       DT_NN_FILL_NEAREST};
    static const int shapes[][4] = {{6, 9, 11, 3}, {6, 1, 7, 2}, {6, 8, 1, 1}, {6, 16, 16, 1}};
    for (size_t f = 0; f < sizeof fills / sizeof *fills; f++)
        for (int nearest = 0; nearest < 2; nearest++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                dt_nn_transform tf = {.n = shapes[s][0],
                                      .h = shapes[s][1],
                                      .w = shapes[s][2],
                                      .c = shapes[s][3],
                                      .nearest = nearest,
                                      .fill = fills[f],
                                      .fill_value = 0.37f};
                check_transform(g, &tf, 300 + 10 * f + 3 * s + nearest);
            }
    dt_nn_gpu_unbind();
}

/* The transpose sorts at most 4 M (cell, tap) pairs at once: 3 images of 600x700 bilinear are
 * two chunks, the second shorter, and must still match the CPU. */
DT_TEST(gpu_img_transform_bwd_chunks)
{
    const dt_nn_ops *g = gpu_ops();
    dt_nn_transform tf = {.n = 3, .h = 600, .w = 700, .c = 1, .fill = DT_NN_FILL_REFLECT};
    check_transform(g, &tf, 400);
    dt_nn_gpu_unbind();
}
