/* test_gpu_norm.c - the CUDA backend's batch normalization, layer normalization and
 * Normalization kernels against the CPU table on the same random inputs: relative L2 <= 1e-4 for
 * batch norm (column reductions), <= 1e-5 for layer norm and Normalization, and the CPU's bits
 * where the GPU does the CPU's float operations in its order (Normalization, batch norm's
 * inference); outputs poisoned with
 * NaN first, so an element a kernel leaves unwritten fails. Shapes cover one row, odd column
 * counts, more rows than one reduction chunk (256) and more columns than one block (32, 256).
 * Two runs of bn_fwd and bn_bwd on the same inputs give the same bits. */
#include "test_gpu_util.h"

#include <stdio.h>

/* (rows, cols) */
static const size_t shapes[][2] = {{1, 1},    {7, 3},   {64, 33},  {300, 65},
                                   {5000, 8}, {3, 300}, {1031, 70}};
#define NSHAPES (sizeof shapes / sizeof *shapes)

/* The fused ReLU settings: none, uncapped, capped. */
static const float relus[] = {-1.0f, INFINITY, 0.7f};

/* n floats uniform in [lo, hi), seeded; host, malloc'd */
static float *uniform(size_t n, float lo, float hi, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * dt_rng_uniform(&r);
    return x;
}

/* x with a mean away from 0 per column (batch norm must subtract it) */
static float *bn_input(size_t rows, int cols, uint64_t seed)
{
    float *x = gpu_randn(rows * (size_t)cols, 2.0f, seed);
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
            x[r * (size_t)cols + j] += 0.5f + 0.1f * (float)(j % 7);
    return x;
}

/* bn_fwd, training and inference, gamma/beta given or NULL, every fused ReLU setting: y, the
 * batch statistics and the moving ones. */
DT_TEST(gpu_bn_fwd_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    for (size_t s = 0; s < NSHAPES; s++)
        for (int training = 0; training < 2; training++)
            for (int affine = 0; affine < 2; affine++)
                for (size_t ri = 0; ri < sizeof relus / sizeof *relus; ri++) {
                    size_t rows = shapes[s][0];
                    int cols = (int)shapes[s][1];
                    size_t n = rows * (size_t)cols;
                    uint64_t seed = 100 * s + 10 * training + 2 * affine + ri;
                    float *x = bn_input(rows, cols, seed);
                    float *ga = uniform((size_t)cols, 0.5f, 1.5f, seed + 1);
                    float *be = gpu_randn((size_t)cols, 0.5f, seed + 2);
                    ga[0] = 0.0f; /* column 0 sits on the cap: 0 xhat + 0.7 = relu */
                    be[0] = 0.7f;
                    float *mm = gpu_randn((size_t)cols, 1.0f, seed + 3);
                    float *mv = uniform((size_t)cols, 0.2f, 3.0f, seed + 4);
                    float *y = malloc(sizeof(float) * n), *sm = malloc(sizeof(float) * cols),
                          *sv = malloc(sizeof(float) * cols);
                    float *dx = gpu_up(g, x, n), *dga = gpu_up(g, ga, (size_t)cols),
                          *dbe = gpu_up(g, be, (size_t)cols), *dmm = gpu_up(g, mm, (size_t)cols),
                          *dmv = gpu_up(g, mv, (size_t)cols);
                    float *dy = gpu_poison(g, n), *dsm = gpu_poison(g, (size_t)cols),
                          *dsv = gpu_poison(g, (size_t)cols);
                    float relu = relus[ri];
                    c->bn_fwd(training, x, y, rows, cols, affine ? ga : NULL, affine ? be : NULL,
                              mm, mv, 0.9f, 1e-3f, sm, sv, relu);
                    g->bn_fwd(training, dx, dy, rows, cols, affine ? dga : NULL,
                              affine ? dbe : NULL, dmm, dmv, 0.9f, 1e-3f, dsm, dsv, relu);
                    GPU_EXPECT_CLOSE(g, dy, y, n, 1e-4);
                    if (!training) /* the moving statistics: the CPU's operations exactly */
                        gpu_same_bits(g, dy, y, n, "bn_fwd inference");
                    if (training) {
                        GPU_EXPECT_CLOSE(g, dsm, sm, (size_t)cols, 1e-4);
                        GPU_EXPECT_CLOSE(g, dsv, sv, (size_t)cols, 1e-4);
                    }
                    /* inference must leave them alone: the CPU's are the inputs */
                    GPU_EXPECT_CLOSE(g, dmm, mm, (size_t)cols, 1e-4);
                    GPU_EXPECT_CLOSE(g, dmv, mv, (size_t)cols, 1e-4);
                    if (relu >= 0) { /* the clip took effect somewhere: the test sees it */
                        float *h = gpu_down(g, dy, n);
                        size_t zeros = 0;
                        for (size_t i = 0; i < n; i++) {
                            ASSERT_TRUE(h[i] >= 0 && h[i] <= relu);
                            zeros += h[i] == 0;
                        }
                        if (n >= 64)
                            ASSERT_GT(zeros, 0);
                        free(h);
                    }
                    float *bufs[] = {dx, dga, dbe, dmm, dmv, dy, dsm, dsv};
                    for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++)
                        g->free(bufs[b]);
                    free(x);
                    free(ga);
                    free(be);
                    free(mm);
                    free(mv);
                    free(y);
                    free(sm);
                    free(sv);
                }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* bn_bwd on the statistics of a CPU forward: dx written (poisoned first) and accumulated,
 * dgamma and dbeta accumulated into random values or NULL, dx NULL, every fused ReLU setting. */
DT_TEST(gpu_bn_bwd_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    for (size_t s = 0; s < NSHAPES; s++)
        for (int mode = 0; mode < 4; mode++) /* 0: dx written, 1: dx +=, 2: no dx, 3: no params */
            for (int affine = 0; affine < 2; affine++)
                for (size_t ri = 0; ri < sizeof relus / sizeof *relus; ri++) {
                    size_t rows = shapes[s][0];
                    int cols = (int)shapes[s][1];
                    size_t n = rows * (size_t)cols, nc = (size_t)cols;
                    uint64_t seed = 1000 + 100 * s + 10 * mode + 3 * affine + ri;
                    float relu = relus[ri];
                    float *x = bn_input(rows, cols, seed), *dyv = gpu_randn(n, 1.0f, seed + 1);
                    float *ga = uniform(nc, 0.5f, 1.5f, seed + 2);
                    float *be = gpu_randn(nc, 0.5f, seed + 3);
                    ga[0] = 0.0f; /* column 0 on the cap: the mask's p < relu, not <= */
                    be[0] = 0.7f;
                    float *mm = calloc(nc, sizeof(float)), *mv = calloc(nc, sizeof(float));
                    float *y = malloc(sizeof(float) * n), *sm = malloc(sizeof(float) * nc),
                          *sv = malloc(sizeof(float) * nc);
                    c->bn_fwd(true, x, y, rows, cols, affine ? ga : NULL, affine ? be : NULL, mm,
                              mv, 0.9f, 1e-3f, sm, sv, relu);
                    float *dxv = gpu_randn(n, 1.0f, seed + 4);
                    float *dg = gpu_randn(nc, 1.0f, seed + 5), *db = gpu_randn(nc, 1.0f, seed + 6);
                    float *d_x = gpu_up(g, x, n), *d_dy = gpu_up(g, dyv, n);
                    float *d_ga = gpu_up(g, ga, nc), *d_be = gpu_up(g, be, nc);
                    float *d_sm = gpu_up(g, sm, nc), *d_sv = gpu_up(g, sv, nc);
                    float *d_dx = mode == 1 ? gpu_up(g, dxv, n) : gpu_poison(g, n);
                    float *d_dg = gpu_up(g, dg, nc), *d_db = gpu_up(g, db, nc);
                    bool acc = mode == 1, want_dx = mode != 2, want_p = mode != 3;
                    c->bn_bwd(dyv, x, rows, cols, affine ? ga : NULL, affine ? be : NULL, sm, sv,
                              1e-3f, want_dx ? dxv : NULL, acc, want_p ? dg : NULL,
                              want_p ? db : NULL, relu);
                    g->bn_bwd(d_dy, d_x, rows, cols, affine ? d_ga : NULL, affine ? d_be : NULL,
                              d_sm, d_sv, 1e-3f, want_dx ? d_dx : NULL, acc, want_p ? d_dg : NULL,
                              want_p ? d_db : NULL, relu);
                    if (want_dx)
                        GPU_EXPECT_CLOSE(g, d_dx, dxv, n, 1e-4);
                    /* untouched when not wanted: still the random start on both sides */
                    GPU_EXPECT_CLOSE(g, d_dg, dg, nc, 1e-4);
                    GPU_EXPECT_CLOSE(g, d_db, db, nc, 1e-4);
                    float *bufs[] = {d_x, d_dy, d_ga, d_be, d_sm, d_sv, d_dx, d_dg, d_db};
                    for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++)
                        g->free(bufs[b]);
                    float *hb[] = {x, dyv, ga, be, mm, mv, y, sm, sv, dxv, dg, db};
                    for (size_t b = 0; b < sizeof hb / sizeof *hb; b++)
                        free(hb[b]);
                }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* A big batch (many reduction chunks, columns over several blocks) twice: the same bits. */
DT_TEST(gpu_bn_deterministic)
{
    const dt_nn_ops *g = gpu_ops();
    size_t rows = 70001;
    int cols = 67;
    size_t n = rows * (size_t)cols, nc = (size_t)cols;
    float *x = bn_input(rows, cols, 7), *dyv = gpu_randn(n, 1.0f, 8);
    float *ga = uniform(nc, 0.5f, 1.5f, 9), *be = gpu_randn(nc, 0.5f, 10);
    float *d_x = gpu_up(g, x, n), *d_dy = gpu_up(g, dyv, n), *d_ga = gpu_up(g, ga, nc),
          *d_be = gpu_up(g, be, nc);
    float *out[2][6]; /* y, smean, svar, dx, dgamma, dbeta as downloaded */
    for (int run = 0; run < 2; run++) {
        float *d_mm = gpu_poison(g, nc), *d_mv = gpu_poison(g, nc);
        g->fill(nc, 0.0f, d_mm);
        g->fill(nc, 1.0f, d_mv);
        float *d_y = gpu_poison(g, n), *d_sm = gpu_poison(g, nc), *d_sv = gpu_poison(g, nc);
        float *d_dx = gpu_poison(g, n), *d_dg = gpu_poison(g, nc), *d_db = gpu_poison(g, nc);
        g->fill(nc, 0.0f, d_dg);
        g->fill(nc, 0.0f, d_db);
        g->bn_fwd(true, d_x, d_y, rows, cols, d_ga, d_be, d_mm, d_mv, 0.99f, 1e-3f, d_sm, d_sv,
                  6.0f);
        g->bn_bwd(d_dy, d_x, rows, cols, d_ga, d_be, d_sm, d_sv, 1e-3f, d_dx, false, d_dg, d_db,
                  6.0f);
        float *d[6] = {d_y, d_sm, d_sv, d_dx, d_dg, d_db};
        size_t len[6] = {n, nc, nc, n, nc, nc};
        for (int k = 0; k < 6; k++) {
            out[run][k] = gpu_down(g, d[k], len[k]);
            g->free(d[k]);
        }
        g->free(d_mm);
        g->free(d_mv);
        GPU_SYNC();
        for (int k = 0; k < 6; k++)
            for (size_t i = 0; i < len[k]; i++)
                ASSERT_FALSE(isnan(out[run][k][i]));
    }
    size_t len[6] = {n, nc, nc, n, nc, nc};
    for (int k = 0; k < 6; k++) {
        ASSERT_EQ(memcmp(out[0][k], out[1][k], len[k] * sizeof(float)), 0);
        free(out[0][k]);
        free(out[1][k]);
    }
    g->free(d_x);
    g->free(d_dy);
    g->free(d_ga);
    g->free(d_be);
    free(x);
    free(dyv);
    free(ga);
    free(be);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ln_fwd (y, xhat, rstd) and ln_bwd (dx written and accumulated or NULL; dgamma and dbeta
 * written or NULL), gamma/beta given or NULL. */
DT_TEST(gpu_ln_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const size_t ln_shapes[][2] = {{1, 1},     {7, 3},    {64, 33},
                                          {300, 257}, {5, 1000}, {2000, 16}};
    for (size_t s = 0; s < sizeof ln_shapes / sizeof *ln_shapes; s++)
        for (int affine = 0; affine < 2; affine++)
            for (int mode = 0; mode < 4; mode++) { /* dx =, dx +=, no dx, no dgamma/dbeta */
                size_t rows = ln_shapes[s][0];
                int cols = (int)ln_shapes[s][1];
                size_t n = rows * (size_t)cols, nc = (size_t)cols;
                uint64_t seed = 5000 + 10 * s + 4 * affine + mode;
                float *x = bn_input(rows, cols, seed), *dyv = gpu_randn(n, 1.0f, seed + 1);
                float *ga = uniform(nc, 0.5f, 1.5f, seed + 2), *be = gpu_randn(nc, 0.5f, seed + 3);
                float *y = malloc(sizeof(float) * n), *xh = malloc(sizeof(float) * n),
                      *rs = malloc(sizeof(float) * rows);
                float *d_x = gpu_up(g, x, n), *d_ga = gpu_up(g, ga, nc), *d_be = gpu_up(g, be, nc);
                float *d_y = gpu_poison(g, n), *d_xh = gpu_poison(g, n),
                      *d_rs = gpu_poison(g, rows);
                c->ln_fwd(x, y, xh, rs, rows, cols, affine ? ga : NULL, affine ? be : NULL, 1e-3f);
                g->ln_fwd(d_x, d_y, d_xh, d_rs, rows, cols, affine ? d_ga : NULL,
                          affine ? d_be : NULL, 1e-3f);
                GPU_EXPECT_CLOSE(g, d_y, y, n, 1e-5);
                GPU_EXPECT_CLOSE(g, d_xh, xh, n, 1e-5);
                GPU_EXPECT_CLOSE(g, d_rs, rs, rows, 1e-5);
                /* the backward on the CPU's xhat and rstd, so it is tested on its own */
                float *dxv = gpu_randn(n, 1.0f, seed + 4);
                float *dg = gpu_randn(nc, 1.0f, seed + 5), *db = gpu_randn(nc, 1.0f, seed + 6);
                float *d_dy = gpu_up(g, dyv, n), *d_xh2 = gpu_up(g, xh, n),
                      *d_rs2 = gpu_up(g, rs, rows);
                float *d_dx = mode == 1 ? gpu_up(g, dxv, n) : gpu_poison(g, n);
                bool want_p = mode != 3, want_dx = mode != 2, acc = mode == 1;
                float *d_dg = want_p ? gpu_poison(g, nc) : gpu_up(g, dg, nc);
                float *d_db = want_p ? gpu_poison(g, nc) : gpu_up(g, db, nc);
                c->ln_bwd(dyv, xh, rs, rows, cols, affine ? ga : NULL, want_dx ? dxv : NULL, acc,
                          want_p ? dg : NULL, want_p ? db : NULL);
                g->ln_bwd(d_dy, d_xh2, d_rs2, rows, cols, affine ? d_ga : NULL,
                          want_dx ? d_dx : NULL, acc, want_p ? d_dg : NULL, want_p ? d_db : NULL);
                if (want_dx)
                    GPU_EXPECT_CLOSE(g, d_dx, dxv, n, 1e-5);
                GPU_EXPECT_CLOSE(g, d_dg, dg, nc, 1e-5);
                GPU_EXPECT_CLOSE(g, d_db, db, nc, 1e-5);
                float *bufs[] = {d_x,  d_ga,  d_be,  d_y,  d_xh, d_rs,
                                 d_dy, d_xh2, d_rs2, d_dx, d_dg, d_db};
                for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++)
                    g->free(bufs[b]);
                float *hb[] = {x, dyv, ga, be, y, xh, rs, dxv, dg, db};
                for (size_t b = 0; b < sizeof hb / sizeof *hb; b++)
                    free(hb[b]);
            }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* norm_fwd and norm_bwd, invert or not, dx written or accumulated; a zero variance takes
 * Keras's 1e-7 floor. */
DT_TEST(gpu_norm_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    for (size_t s = 0; s < NSHAPES; s++)
        for (int invert = 0; invert < 2; invert++)
            for (int acc = 0; acc < 2; acc++) {
                size_t rows = shapes[s][0];
                int cols = (int)shapes[s][1];
                size_t n = rows * (size_t)cols, nc = (size_t)cols;
                uint64_t seed = 9000 + 10 * s + 2 * invert + acc;
                float *x = gpu_randn(n, 1.0f, seed), *mean = gpu_randn(nc, 1.0f, seed + 1);
                float *var = uniform(nc, 0.1f, 4.0f, seed + 2);
                var[0] = 0.0f; /* the floor: scale 1e-7 */
                float *y = malloc(sizeof(float) * n);
                float *d_x = gpu_up(g, x, n), *d_m = gpu_up(g, mean, nc), *d_v = gpu_up(g, var, nc);
                float *d_y = gpu_poison(g, n);
                c->norm_fwd(x, y, mean, var, rows, cols, invert);
                g->norm_fwd(d_x, d_y, d_m, d_v, rows, cols, invert);
                GPU_EXPECT_CLOSE(g, d_y, y, n, 1e-5);
                gpu_same_bits(g, d_y, y, n, "norm_fwd");
                float *dyv = gpu_randn(n, 1.0f, seed + 3), *dxv = gpu_randn(n, 1.0f, seed + 4);
                float *d_dy = gpu_up(g, dyv, n);
                float *d_dx = acc ? gpu_up(g, dxv, n) : gpu_poison(g, n);
                c->norm_bwd(dyv, var, dxv, rows, cols, invert, acc);
                g->norm_bwd(d_dy, d_v, d_dx, rows, cols, invert, acc);
                GPU_EXPECT_CLOSE(g, d_dx, dxv, n, 1e-5);
                gpu_same_bits(g, d_dx, dxv, n, "norm_bwd");
                float *bufs[] = {d_x, d_m, d_v, d_y, d_dy, d_dx};
                for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++)
                    g->free(bufs[b]);
                float *hb[] = {x, mean, var, y, dyv, dxv};
                for (size_t b = 0; b < sizeof hb / sizeof *hb; b++)
                    free(hb[b]);
            }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}
