/* test_gpu_elem.c - the CUDA backend's element-wise kernels (lib/nn/cuda/elem.cu) against the CPU
 * table on the same random inputs: bias add and gradient, every activation forward and backward,
 * dropout (masks equal bit for bit), axpby, mul, copy, copy2d, fill. Outputs start as NaN so an
 * element a kernel leaves unwritten fails; acc true starts from the same random values on both.
 * The dropout key test runs everywhere (it needs no GPU). */
#include "nn/dropout_hash.h"
#include "test_gpu_util.h"

#include <stdio.h>

/* The device buffer d (n floats) against ref within tol (relative L2); prints the error, the
 * figure a GPU session reports. A double comparison: ASSERT_LE would compare as integers. */
static double close_to(const dt_nn_ops *g, const float *d, const float *ref, size_t n, double tol,
                       const char *what)
{
    float *h = gpu_down(g, d, n);
    GPU_SYNC();
    double e = gpu_rel_l2(h, ref, n);
    free(h);
    if (!(e <= tol))
        fprintf(stderr, "%s: relative L2 error %.3g > %.3g\n", what, e, tol);
    ASSERT_TRUE(e <= tol);
    return e;
}

/* The device buffer d equal to ref byte for byte. */
static void same_bytes(const dt_nn_ops *g, const void *d, const void *ref, size_t bytes,
                       const char *what)
{
    void *h = malloc(bytes ? bytes : 1);
    g->download(h, d, bytes);
    GPU_SYNC();
    int c = memcmp(h, ref, bytes);
    free(h);
    if (c != 0)
        fprintf(stderr, "%s: differs from the CPU's\n", what);
    ASSERT_TRUE(c == 0);
}

static float *nans(size_t n)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    return h;
}

/* ---- dropout's key: the CUDA library's copy of dt_rng_u64 --------------------------------- */

/* dt__nn_dropout_key must be dt_rng_u64 (the CUDA library cannot call it), and the CPU's mask
 * is the counter hash of one key: runs without a GPU. */
DT_TEST(gpu_dropout_key_is_rng_u64)
{
    dt_rng a, b;
    dt_rng_seed(&a, 1234);
    b = a;
    for (int i = 0; i < 1000; i++)
        ASSERT_TRUE(dt__nn_dropout_key(&a) == dt_rng_u64(&b));
    ASSERT_TRUE(memcmp(&a, &b, sizeof a) == 0);

    const dt_nn_ops *c = dt_nn_ops_cpu();
    size_t n = 100000;
    float rate = 0.3f, keep = 1.0f / (1.0f - rate);
    float *x = gpu_randn(n, 1, 7), *y = nans(n), *m = nans(n);
    dt_rng r, k;
    dt_rng_seed2(&r, 42, 3);
    k = r;
    c->dropout_fwd(x, y, m, n, rate, &r);
    uint64_t key = dt_rng_u64(&k);
    ASSERT_TRUE(memcmp(&r, &k, sizeof r) == 0); /* one draw per call */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        float want = dt__nn_dropout_u(key, i) >= rate ? keep : 0.0f;
        ASSERT_TRUE(m[i] == want);
        ASSERT_TRUE(y[i] == x[i] * want);
        kept += m[i] != 0;
    }
    /* 70000 expected, sd 145: a broken hash (constant, or few bits) lands far outside */
    ASSERT_GT(kept, 69000);
    ASSERT_LT(kept, 71000);
    free(x);
    free(y);
    free(m);
}

/* ---- bias ------------------------------------------------------------------------------------ */

static const size_t bias_shapes[][2] = {{1, 1}, {7, 3},      {300, 33}, {257, 300},
                                        {0, 5}, {20000, 40}, {3, 1},    {100000, 3}};

DT_TEST(gpu_bias_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    double worst_add = 0, worst_grad = 0;
    for (size_t s = 0; s < sizeof bias_shapes / sizeof *bias_shapes; s++) {
        size_t rows = bias_shapes[s][0];
        int cols = (int)bias_shapes[s][1];
        size_t n = rows * (size_t)cols;
        float *y = gpu_randn(n, 1, 10 + s), *b = gpu_randn((size_t)cols, 1, 20 + s);
        float *dy = gpu_randn(n, 1, 30 + s);
        float *dy_ = gpu_up(g, y, n), *db_ = gpu_up(g, b, (size_t)cols), *ddy = gpu_up(g, dy, n);
        /* bias_add in place */
        c->bias_add(y, b, rows, cols);
        g->bias_add(dy_, db_, rows, cols);
        double e = close_to(g, dy_, y, n, 1e-5, "bias_add");
        same_bytes(g, dy_, y, n * sizeof(float), "bias_add bits"); /* one rounded add */
        worst_add = e > worst_add ? e : worst_add;
        for (int acc = 0; acc < 2; acc++) {
            float *db = acc ? gpu_randn((size_t)cols, 1, 40 + s) : nans((size_t)cols);
            float *dd = gpu_up(g, db, (size_t)cols);
            c->bias_grad(dy, rows, cols, db, acc);
            g->bias_grad(ddy, rows, cols, dd, acc);
            e = close_to(g, dd, db, (size_t)cols, 1e-4, "bias_grad");
            worst_grad = e > worst_grad ? e : worst_grad;
            /* a second run gives the same bits */
            float *first = gpu_down(g, dd, (size_t)cols);
            if (!acc) {
                g->bias_grad(ddy, rows, cols, dd, false);
                same_bytes(g, dd, first, sizeof(float) * (size_t)cols, "bias_grad rerun");
            }
            free(first);
            g->free(dd);
            free(db);
        }
        g->free(dy_);
        g->free(db_);
        g->free(ddy);
        free(y);
        free(b);
        free(dy);
    }
    printf("bias_add worst relative L2 %.3g, bias_grad %.3g\n", worst_add, worst_grad);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ---- activations ----------------------------------------------------------------------------- */

static const dt_nn_act_p acts[] = {
    {DT_NN_ACT_LINEAR, 0, 0, 0},
    {DT_NN_ACT_RELU, 0, 0, 0},
    {DT_NN_ACT_SIGMOID, 0, 0, 0},
    {DT_NN_ACT_TANH, 0, 0, 0},
    {DT_NN_ACT_SOFTMAX, 0, 0, 0},
    {DT_NN_ACT_ELU, 0, 0, 0},
    {DT_NN_ACT_SELU, 0, 0, 0},
    {DT_NN_ACT_GELU, 0, 0, 0},
    {DT_NN_ACT_SWISH, 0, 0, 0},
    {DT_NN_ACT_LEAKY_RELU, 0.3f, 0, 0},
    {DT_NN_ACT_RELU_CAPPED, 0, 6.0f, 0},       /* ReLU6: the clip path */
    {DT_NN_ACT_RELU_CAPPED, 0.1f, 2.0f, 0.5f}, /* slope, cap and threshold */
    {DT_NN_ACT_RELU_CAPPED, 0.2f, INFINITY, -1.0f},
};
static const char *act_names[] = {"linear",
                                  "relu",
                                  "sigmoid",
                                  "tanh",
                                  "softmax",
                                  "elu",
                                  "selu",
                                  "gelu",
                                  "swish",
                                  "leaky_relu",
                                  "relu6",
                                  "relu layer",
                                  "relu layer uncapped"};

/* The kinds whose backward may take z == NULL (their derivative follows from y). */
static bool y_only(dt_nn_act k)
{
    return k == DT_NN_ACT_LINEAR || k == DT_NN_ACT_RELU || k == DT_NN_ACT_SIGMOID ||
           k == DT_NN_ACT_TANH || k == DT_NN_ACT_SOFTMAX || k == DT_NN_ACT_ELU;
}

static const size_t act_shapes[][2] = {{1, 1}, {5, 7}, {64, 10}, {33, 1000}, {0, 4}, {3000, 129}};

DT_TEST(gpu_act_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    for (size_t a = 0; a < sizeof acts / sizeof *acts; a++) {
        const dt_nn_act_p *p = &acts[a];
        double wf = 0, wb = 0;
        for (size_t s = 0; s < sizeof act_shapes / sizeof *act_shapes; s++) {
            size_t rows = act_shapes[s][0];
            int cols = (int)act_shapes[s][1];
            size_t n = rows * (size_t)cols;
            float *z = gpu_randn(n, 3, 100 + s), *y = nans(n), *dy = gpu_randn(n, 1, 200 + s);
            /* every 5th input on an edge of some kind: 0, the caps, the threshold */
            static const float edges[] = {0.0f, 6.0f, 2.0f, 0.5f, -1.0f};
            for (size_t i = 0; i < n; i += 5)
                z[i] = edges[(i / 5) % 5];
            float *dz_ = gpu_up(g, z, n), *dyy = gpu_poison(g, n), *ddy = gpu_up(g, dy, n);
            c->act_fwd(p, z, y, rows, cols);
            g->act_fwd(p, dz_, dyy, rows, cols);
            double e = close_to(g, dyy, y, n, 1e-5, act_names[a]);
            wf = e > wf ? e : wf;
            /* in place: y aliasing z */
            float *dzz = gpu_up(g, z, n);
            g->act_fwd(p, dzz, dzz, rows, cols);
            close_to(g, dzz, y, n, 1e-5, act_names[a]);
            g->free(dzz);
            for (int acc = 0; acc < 2; acc++) {
                /* z NULL where the contract allows it, on both sides */
                bool null_z = y_only(p->kind) && acc;
                float *dz = acc ? gpu_randn(n, 1, 300 + s) : nans(n);
                float *ddz = gpu_up(g, dz, n);
                c->act_bwd(p, null_z ? NULL : z, y, dy, dz, rows, cols, acc);
                g->act_bwd(p, null_z ? NULL : dz_, dyy, ddy, ddz, rows, cols, acc);
                e = close_to(g, ddz, dz, n, 1e-5, act_names[a]);
                wb = e > wb ? e : wb;
                if (!acc) { /* dz aliasing dy */
                    float *alias = gpu_up(g, dy, n);
                    g->act_bwd(p, dz_, dyy, alias, alias, rows, cols, false);
                    close_to(g, alias, dz, n, 1e-5, act_names[a]);
                    g->free(alias);
                }
                g->free(ddz);
                free(dz);
            }
            g->free(dz_);
            g->free(dyy);
            g->free(ddy);
            free(z);
            free(y);
            free(dy);
        }
        printf("%-20s forward worst relative L2 %.3g, backward %.3g\n", act_names[a], wf, wb);
    }
    /* softmax's double sums give the same bits twice */
    size_t rows = 500;
    int cols = 777;
    float *z = gpu_randn(rows * cols, 5, 9);
    float *dz = gpu_up(g, z, rows * cols), *y1 = gpu_poison(g, rows * cols),
          *y2 = gpu_poison(g, rows * cols);
    g->act_fwd(&acts[4], dz, y1, rows, cols);
    g->act_fwd(&acts[4], dz, y2, rows, cols);
    float *h1 = gpu_down(g, y1, rows * cols);
    same_bytes(g, y2, h1, sizeof(float) * rows * cols, "softmax rerun");
    /* and the backward's (dy = z here) */
    float *d1 = gpu_poison(g, rows * cols), *d2 = gpu_poison(g, rows * cols);
    g->act_bwd(&acts[4], NULL, y1, dz, d1, rows, cols, false);
    g->act_bwd(&acts[4], NULL, y1, dz, d2, rows, cols, false);
    float *hd = gpu_down(g, d1, rows * cols);
    same_bytes(g, d2, hd, sizeof(float) * rows * cols, "softmax backward rerun");
    free(hd);
    g->free(d1);
    g->free(d2);
    free(h1);
    g->free(dz);
    g->free(y1);
    g->free(y2);
    free(z);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ---- dropout --------------------------------------------------------------------------------- */

DT_TEST(gpu_dropout_mask_equals_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const size_t sizes[] = {0, 1, 1000, 100003};
    static const float rates[] = {0.0f, 0.3f, 0.5f, 0.9f};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t k = 0; k < sizeof rates / sizeof *rates; k++) {
            size_t n = sizes[s];
            float *x = gpu_randn(n, 1, 50 + s), *y = nans(n), *m = nans(n);
            float *dx = gpu_up(g, x, n), *dy = gpu_poison(g, n), *dm = gpu_poison(g, n);
            dt_rng rc, rg;
            dt_rng_seed2(&rc, 77, s * 10 + k);
            rg = rc;
            c->dropout_fwd(x, y, m, n, rates[k], &rc);
            g->dropout_fwd(dx, dy, dm, n, rates[k], &rg);
            ASSERT_TRUE(memcmp(&rc, &rg, sizeof rc) == 0); /* the same draws from the stream */
            same_bytes(g, dm, m, n * sizeof(float), "dropout mask");
            same_bytes(g, dy, y, n * sizeof(float), "dropout output");
            /* in place, as the RNN layers call it */
            rg = rc;
            c->dropout_fwd(x, x, m, n, rates[k], &rc);
            g->dropout_fwd(dx, dx, dm, n, rates[k], &rg);
            same_bytes(g, dm, m, n * sizeof(float), "dropout mask in place");
            same_bytes(g, dx, x, n * sizeof(float), "dropout in place");
            g->free(dx);
            g->free(dy);
            g->free(dm);
            free(x);
            free(y);
            free(m);
        }
    /* a draw equal to the rate keeps its element (u >= rate): rate = element 0's own draw */
    dt_rng r, peek;
    dt_rng_seed(&r, 5);
    peek = r;
    float rate = dt__nn_dropout_u(dt_rng_u64(&peek), 0);
    float *x = gpu_randn(8, 1, 3), *dx = gpu_up(g, x, 8), *dm = gpu_poison(g, 8);
    g->dropout_fwd(dx, dx, dm, 8, rate, &r);
    float *m = gpu_down(g, dm, 8);
    GPU_SYNC();
    ASSERT_TRUE(m[0] == 1.0f / (1.0f - rate));
    free(m);
    free(x);
    g->free(dx);
    g->free(dm);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* ---- vector ops ------------------------------------------------------------------------------ */

static const size_t vec_sizes[] = {0, 1, 1000, 65537};

DT_TEST(gpu_vector_ops_match_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    for (size_t s = 0; s < sizeof vec_sizes / sizeof *vec_sizes; s++) {
        size_t n = vec_sizes[s];
        float *x = gpu_randn(n, 1, 60 + s), *m = gpu_randn(n, 1, 61 + s);
        float *dx = gpu_up(g, x, n), *dm = gpu_up(g, m, n);
        /* axpby: y = a x + b y */
        float *y = gpu_randn(n, 1, 62 + s), *dy = gpu_up(g, y, n);
        c->axpby(n, 0.7f, x, -1.3f, y);
        g->axpby(n, 0.7f, dx, -1.3f, dy);
        close_to(g, dy, y, n, 1e-5, "axpby");
        same_bytes(g, dy, y, n * sizeof(float), "axpby bits");
        g->free(dy);
        free(y);
        for (int acc = 0; acc < 2; acc++) {
            y = acc ? gpu_randn(n, 1, 63 + s) : nans(n);
            dy = gpu_up(g, y, n);
            c->mul(n, x, m, y, acc);
            g->mul(n, dx, dm, dy, acc);
            close_to(g, dy, y, n, 1e-5, "mul");
            same_bytes(g, dy, y, n * sizeof(float), "mul bits");
            c->copy(n, m, y, acc);
            g->copy(n, dm, dy, acc);
            close_to(g, dy, y, n, 1e-5, "copy");
            same_bytes(g, dy, y, n * sizeof(float), "copy bits");
            c->copy(n, y, y, acc); /* x == y: doubles it with acc, nothing without */
            g->copy(n, dy, dy, acc);
            close_to(g, dy, y, n, 1e-5, "copy in place");
            same_bytes(g, dy, y, n * sizeof(float), "copy in place bits");
            g->free(dy);
            free(y);
        }
        y = nans(n);
        dy = gpu_poison(g, n);
        c->fill(n, -2.5f, y);
        g->fill(n, -2.5f, dy);
        same_bytes(g, dy, y, n * sizeof(float), "fill");
        g->free(dy);
        free(y);
        g->free(dx);
        g->free(dm);
        free(x);
        free(m);
    }
    /* copy2d: rows of cols floats between padded row strides, and ldx 0 (one row spread) */
    static const int geo[][4] = {/* rows, cols, ldx, ldy */
                                 {1, 1, 1, 1},    {7, 5, 5, 9}, {300, 33, 40, 33},
                                 {64, 17, 0, 20}, {0, 3, 3, 3}, {5, 0, 4, 4}};
    for (size_t s = 0; s < sizeof geo / sizeof *geo; s++) {
        size_t rows = (size_t)geo[s][0];
        int cols = geo[s][1], ldx = geo[s][2], ldy = geo[s][3];
        size_t nx = ldx ? rows * (size_t)ldx : (size_t)cols, ny = rows * (size_t)ldy;
        float *x = gpu_randn(nx, 1, 70 + s), *dx = gpu_up(g, x, nx);
        for (int acc = 0; acc < 2; acc++) {
            /* the gaps between rows of y stay as they were: NaN on both sides, or the values */
            float *y = acc ? gpu_randn(ny, 1, 71 + s) : nans(ny), *dy = gpu_up(g, y, ny);
            c->copy2d(rows, cols, x, ldx, y, ldy, acc);
            g->copy2d(rows, cols, dx, ldx, dy, ldy, acc);
            close_to(g, dy, y, ny, 1e-5, "copy2d");
            same_bytes(g, dy, y, ny * sizeof(float), "copy2d bits");
            g->free(dy);
            free(y);
        }
        g->free(dx);
        free(x);
    }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}
