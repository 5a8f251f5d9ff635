/* test_nn_fuse_bn.c - a 1x1 Conv2D that runs its BatchNormalization consumer's forward
 * (model.c's fuse_conv_bn, ops gemm_bn_fwd): the op against gemm then bn_fwd, and models with
 * and without the fusion trained side by side. */
#include "test_nn_util.h"

#include <math.h>

static void randn(float *x, size_t n, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)dt_rng_normal(&r);
}

/* A copy of the CPU table whose gemm, rnn_gemm and gemm_bn_fwd count their calls. */
static const dt_nn_ops *real;
static int gemm_calls, fused_calls;

static void count_rnn_gemm(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                           int ldb, float beta, float *c, int ldc)
{
    gemm_calls++;
    real->rnn_gemm(ta, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

static void count_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc)
{
    gemm_calls++;
    real->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void count_fused(const dt_nn_ops *o, int rows, int n, int k, const float *x, const float *w,
                        float *z, float *y, const float *gamma, const float *beta, float *mmean,
                        float *mvar, float momentum, float eps, float *smean, float *svar,
                        float relu)
{
    fused_calls++;
    real->gemm_bn_fwd(o, rows, n, k, x, w, z, y, gamma, beta, mmean, mvar, momentum, eps, smean,
                      svar, relu);
}

static dt_nn_ops counting_ops(void)
{
    real = dt_nn_ops_cpu();
    dt_nn_ops o = *real;
    o.gemm = count_gemm;
    if (o.rnn_gemm) /* the packed kernels run the 1x1 conv's products where the CPU has FMA */
        o.rnn_gemm = count_rnn_gemm;
    o.gemm_bn_fwd = count_fused;
    return o;
}

DT_TEST(nn_fuse_gemm_bn_fwd_equals_gemm_then_bn_fwd)
{
    /* One block (37 rows), several blocks with a tail (3000 rows of 16, 144 and 640 channels:
     * blocks of 2048, 192 and 96 rows), batch norm with and without gamma and beta, no ReLU,
     * ReLU6 and an uncapped one. The statistics, y and the moving statistics equal bn_fwd's on
     * the op's z bit for bit; z is the one-call GEMM's within float rounding (OpenBLAS's; the
     * op runs rnn_gemm's packed FMA kernels where the CPU has them). */
    const int rows[] = {37, 3000, 3000, 3000}, cols[] = {24, 16, 144, 640}, ks[] = {16, 24, 96, 8};
    const float relus[] = {-1.0f, 6.0f, INFINITY};
    dt_nn_ops o = counting_ops();
    for (int ci = 0; ci < 4; ci++)
        for (int ri = 0; ri < 3; ri++) {
            int R = rows[ci], C = cols[ci], K = ks[ci];
            bool affine = ri != 1;
            size_t n = (size_t)R * C;
            float *x = malloc((size_t)R * K * sizeof(float)),
                  *w = malloc((size_t)K * C * sizeof(float));
            float *z = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
            float *rz = malloc(n * sizeof(float)), *ry = malloc(n * sizeof(float));
            float *p = malloc(14 * (size_t)C * sizeof(float)); /* gamma beta, 2 x 6 stats */
            float *ga = p, *be = p + C, *st = p + 2 * C, *rst = p + 8 * C;
            randn(x, (size_t)R * K, 1 + ci);
            randn(w, (size_t)K * C, 2 + ci);
            randn(ga, C, 3);
            randn(be, C, 4);
            for (size_t i = 0; i < (size_t)R * K; i++)
                x[i] = 2.0f * x[i] + 0.5f; /* the conv's output has means away from 0 */
            for (int j = 0; j < C; j++)    /* moving mean, variance, then the batch's */
                st[j] = rst[j] = 0.1f * (float)j, st[C + j] = rst[C + j] = 1.0f;
            gemm_calls = fused_calls = 0;
            o.gemm_bn_fwd(&o, R, C, K, x, w, z, y, affine ? ga : NULL, affine ? be : NULL, st,
                          st + C, 0.9f, 1e-3f, st + 2 * C, st + 3 * C, relus[ri]);
            int blocks = gemm_calls;
            ASSERT_TRUE(blocks >= 1 && (R < 1000 || blocks > 1)); /* through o's GEMMs, in blocks */
            real->gemm(false, false, R, C, K, 1.0f, x, K, w, C, 0.0f, rz, C);
            size_t same = 0;
            for (size_t i = 0; i < n; i++) {
                double mag = 0; /* the rounding a float dot product of K terms may carry */
                size_t r = i / (size_t)C, j = i % (size_t)C;
                for (int q = 0; q < K; q++)
                    mag += fabs((double)x[r * K + q] * w[(size_t)q * C + j]);
                ASSERT_TRUE(fabs((double)z[i] - rz[i]) <= 2.0 * K * 6e-8 * mag + 1e-30);
                same += z[i] == rz[i];
            }
            real->bn_fwd(true, z, ry, (size_t)R, C, affine ? ga : NULL, affine ? be : NULL, rst,
                         rst + C, 0.9f, 1e-3f, rst + 2 * C, rst + 3 * C, relus[ri]);
            ASSERT_EQ(memcmp(y, ry, n * sizeof(float)), 0);
            ASSERT_EQ(memcmp(st, rst, 4 * (size_t)C * sizeof(float)), 0);
            ASSERT_TRUE(st[2 * C] != 0.0f && st[3 * C] > 0.5f); /* statistics were written */
            if (ri == 0)
                printf("%d rows x %d channels (k %d): %d GEMM blocks, z equal to one GEMM's in "
                       "%zu of %zu values, statistics and y bit for bit\n",
                       R, C, K, blocks, same, n);
            free(x), free(w), free(z), free(y), free(rz), free(ry), free(p);
        }
}

/* Conv2D(1x1, filters, no bias) -> [Activation(linear)] -> BatchNormalization -> ReLU6 ->
 * DepthwiseConv2D -> BatchNormalization -> Flatten -> Dense(3); with the linear activation in
 * between (split) the conv has another consumer than the batch norm and nothing is fused. */
static const char *conv_bn_model(int filters, bool bias, bool split)
{
    static char buf[8192];
    char conv[512];
    snprintf(conv, sizeof conv,
             "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": %d, \"kernel_size\": 1, "
             "\"use_bias\": %s}}",
             filters, bias ? "true" : "false");
    const char *bn = "{\"class_name\": \"BatchNormalization\", \"config\": {\"momentum\": 0.9}}";
    const char *relu6 = "{\"class_name\": \"ReLU\", \"config\": {\"max_value\": 6.0}}";
    const char *dw = "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"kernel_size\": 3, "
                     "\"padding\": \"same\", \"use_bias\": false}}";
    const char *lin = "{\"class_name\": \"Activation\", \"config\": {\"activation\": \"linear\"}}";
    const char *flat = "{\"class_name\": \"Flatten\", \"config\": {}}";
    const char *dense = "{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}";
    snprintf(buf, sizeof buf, "%s",
             split ? nn_seq("6, 5, 4", conv, lin, bn, relu6, dw, bn, flat, dense, NULL)
                   : nn_seq("6, 5, 4", conv, bn, relu6, dw, bn, flat, dense, NULL));
    return buf;
}

static dt_model *build_with(const char *json, const dt_nn_ops *ops)
{
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts mo = {.seed = 3, .ops = ops};
    ASSERT_OK(dt_model_from_json(json, strlen(json), &mo, &m, &err), &err);
    return m;
}

DT_TEST(nn_fuse_conv_bn_equals_unfused)
{
    /* 8 filters over 5 x 6 x 5 = 150 rows: one GEMM block, so the fused model trains (loss,
     * gradients, moving statistics) and predicts bit for bit as the unfused one on any BLAS;
     * 600 filters: two blocks of 96 rows and a tail, bit for bit on OpenBLAS's Haswell
     * kernels and within float rounding elsewhere. A conv with a bias is not fused. */
    const int filters[] = {8, 600, 8};
    const bool bias[] = {false, false, true};
    const int fused_per_step[] = {1, 1, 0};
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    dt_nn_ops o = counting_ops();
    for (int i = 0; i < 3; i++) {
        dt_model *m[2];
        float *pred[2];
        double lv[2];
        int fused[2];
        for (int k = 0; k < 2; k++)
            m[k] = build_with(conv_bn_model(filters[i], bias[i], k == 1), &o);
        size_t np0, np1, ns0, ns1;
        float *p0 = nn_params_host(m[0], &np0), *p1 = dt_model_params(m[1], &np1);
        ASSERT_EQ(np0, np1);
        nn_dev_set(m[1], p1, p0, np0);
        free(p0);
        for (int k = 0; k < 2; k++) {
            nn_data d = nn_random(m[k], 5, loss.kind, 4);
            dt_model_batch b = nn_batch(&d, loss.kind);
            dt_err err = {0};
            dt_step_stats st;
            fused_calls = 0;
            for (int step = 0; step < 2; step++) /* the moving statistics move twice */
                ASSERT_OK(dt_model_train_step(m[k], &loss, &b, 5, &st, &err), &err);
            fused[k] = fused_calls;
            lv[k] = st.loss;
            pred[k] = malloc(5 * 3 * sizeof(float));
            fused_calls = 0;
            ASSERT_OK(dt_model_predict(m[k], d.x, 5, pred[k], &err), &err);
            ASSERT_EQ(fused_calls, 0); /* inference takes the moving statistics: no fusion */
            nn_data_free(&d);
        }
        ASSERT_EQ(fused[0], 2 * fused_per_step[i]);
        ASSERT_EQ(fused[1], 0);
        size_t n0, n1;
        float *g0 = nn_grads_host(m[0], &n0), *g1 = nn_grads_host(m[1], &n1);
        float *s0 = nn_state_host(m[0], &ns0), *s1 = nn_state_host(m[1], &ns1);
        ASSERT_EQ(n0, n1);
        ASSERT_EQ(ns0, ns1);
        bool bits = lv[0] == lv[1] && !memcmp(g0, g1, n0 * sizeof(float)) &&
                    !memcmp(s0, s1, ns0 * sizeof(float)) &&
                    !memcmp(pred[0], pred[1], 5 * 3 * sizeof(float));
        if (filters[i] < 96)
            ASSERT_TRUE(bits);
        double gmax = 0, dmax = 0;
        for (size_t j = 0; j < n0; j++) {
            gmax = fmax(gmax, fabs(g0[j]));
            dmax = fmax(dmax, fabs((double)g0[j] - g1[j]));
        }
        ASSERT_TRUE(gmax > 0 && dmax <= 1e-5 * gmax);
        ASSERT_TRUE(fabs(lv[0] - lv[1]) <= 1e-6 * fabs(lv[1]));
        printf("%d filters%s: loss %.6f, %zu gradients, %zu moving statistics and the "
               "predictions %s\n",
               filters[i], bias[i] ? " and a bias" : "", lv[0], n0, ns0,
               bits ? "equal bit for bit" : "within float rounding");
        free(g0), free(g1), free(s0), free(s1);
        for (int k = 0; k < 2; k++) {
            dt_model_free(m[k]);
            free(pred[k]);
        }
    }
}
