/* test_nn_ops.c - the CPU kernels against naive references (convolution, pooling, GEMM,
 * losses, batch-norm statistics) and the optimizers against Keras's update formulas. */
#include "nn/optim.h"
#include "test_nn_util.h"

static void randn(float *x, size_t n, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)dt_rng_normal(&r);
}

/* Keras: out = ceil(in / s) for same, (in - k) / s + 1 for valid; pad_before = total / 2. */
static int ref_out(int in, int k, int s, bool same, int *pad)
{
    if (!same) {
        *pad = 0;
        return (in - k) / s + 1;
    }
    int out = (in + s - 1) / s, total = (out - 1) * s + k - in;
    *pad = total > 0 ? total / 2 : 0;
    return out;
}

static void conv_case(int H, int W, int C, int F, int kh, int kw, int sh, int sw, bool same)
{
    char layer[512];
    snprintf(layer, sizeof layer,
             "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c\", \"filters\": %d, "
             "\"kernel_size\": [%d, %d], \"strides\": [%d, %d], \"padding\": \"%s\"}}",
             F, kh, kw, sh, sw, same ? "same" : "valid");
    char shape[64];
    snprintf(shape, sizeof shape, "%d, %d, %d", H, W, C);
    dt_model *m = nn_build(nn_seq(shape, layer, NULL), 1);
    const dt_model_weight *k = dt_model_find_weight(m, "c/kernel");
    const dt_model_weight *b = dt_model_find_weight(m, "c/bias");
    float *hk = malloc(sizeof(float) * k->size), *hb = malloc(sizeof(float) * b->size);
    randn(hk, k->size, 2);
    randn(hb, b->size, 3);
    nn_weight_set(m, k->name, hk);
    nn_weight_set(m, b->name, hb);
    int N = 2, pt, pl, OH = ref_out(H, kh, sh, same, &pt), OW = ref_out(W, kw, sw, same, &pl);
    ASSERT_EQ(dt_model_output_size(m), (size_t)OH * OW * F);
    float *x = malloc(sizeof(float) * N * H * W * C), *y = malloc(sizeof(float) * N * OH * OW * F);
    randn(x, (size_t)N * H * W * C, 4);
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, N, y, &err), &err);
    double maxdiff = 0;
    for (int n = 0; n < N; n++)
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++)
                for (int f = 0; f < F; f++) {
                    double s = hb[f];
                    for (int ky = 0; ky < kh; ky++)
                        for (int kx = 0; kx < kw; kx++)
                            for (int c = 0; c < C; c++) {
                                int iy = oy * sh - pt + ky, ix = ox * sw - pl + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                    continue;
                                s += (double)x[((n * H + iy) * W + ix) * C + c] *
                                     hk[((ky * kw + kx) * C + c) * F + f];
                            }
                    double d = fabs(s - y[((n * OH + oy) * OW + ox) * F + f]);
                    maxdiff = d > maxdiff ? d : maxdiff;
                }
    printf("conv %dx%dx%d k%dx%d s%dx%d %s: maxdiff %.3g\n", H, W, C, kh, kw, sh, sw,
           same ? "same" : "valid", maxdiff);
    ASSERT_TRUE(maxdiff < 1e-4);
    free(x);
    free(y);
    free(hk);
    free(hb);
    dt_model_free(m);
}

DT_TEST(nn_ops_conv2d_matches_direct_convolution)
{
    conv_case(7, 6, 2, 3, 3, 3, 1, 1, false);
    conv_case(7, 6, 2, 3, 3, 3, 1, 1, true);
    conv_case(7, 6, 2, 4, 3, 2, 2, 1, true);
    conv_case(8, 8, 3, 2, 4, 4, 2, 2, true); /* even kernel: asymmetric padding */
    conv_case(9, 7, 1, 2, 2, 2, 3, 2, false);
    conv_case(5, 5, 4, 3, 1, 1, 1, 1, false);
    conv_case(6, 6, 2, 2, 5, 5, 1, 1, true);
}

static void pool_case(const char *cls, int H, int W, int C, int kh, int kw, int sh, int sw,
                      bool same)
{
    char layer[512], shape[64];
    snprintf(layer, sizeof layer,
             "{\"class_name\": \"%s\", \"config\": {\"pool_size\": [%d, %d], \"strides\": [%d, "
             "%d], \"padding\": \"%s\"}}",
             cls, kh, kw, sh, sw, same ? "same" : "valid");
    snprintf(shape, sizeof shape, "%d, %d, %d", H, W, C);
    dt_model *m = nn_build(nn_seq(shape, layer, NULL), 1);
    bool mx = strstr(cls, "Max") != NULL;
    int N = 2, pt, pl, OH = ref_out(H, kh, sh, same, &pt), OW = ref_out(W, kw, sw, same, &pl);
    ASSERT_EQ(dt_model_output_size(m), (size_t)OH * OW * C);
    float *x = malloc(sizeof(float) * N * H * W * C), *y = malloc(sizeof(float) * N * OH * OW * C);
    randn(x, (size_t)N * H * W * C, 5);
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, N, y, &err), &err);
    for (int n = 0; n < N; n++)
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++)
                for (int c = 0; c < C; c++) {
                    double acc = mx ? -INFINITY : 0;
                    int cnt = 0;
                    for (int ky = 0; ky < kh; ky++)
                        for (int kx = 0; kx < kw; kx++) {
                            int iy = oy * sh - pt + ky, ix = ox * sw - pl + kx;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                continue;
                            double v = x[((n * H + iy) * W + ix) * C + c];
                            acc = mx ? (v > acc ? v : acc) : acc + v;
                            cnt++;
                        }
                    if (!mx)
                        acc /= cnt; /* TF/Keras "same" averages over valid cells */
                    ASSERT_NEAR(y[((n * OH + oy) * OW + ox) * C + c], acc, 1e-5);
                }
    free(x);
    free(y);
    dt_model_free(m);
}

DT_TEST(nn_ops_pooling_matches_naive)
{
    pool_case("MaxPooling2D", 7, 6, 3, 2, 2, 2, 2, false);
    pool_case("MaxPooling2D", 7, 6, 3, 3, 3, 2, 2, true);
    pool_case("AveragePooling2D", 7, 6, 3, 2, 2, 2, 2, false);
    pool_case("AveragePooling2D", 7, 5, 2, 3, 2, 2, 1, true);
    pool_case("MaxPooling2D", 5, 5, 1, 2, 3, 1, 2, true);
    pool_case("MaxPooling2D", 9, 8, 13, 2, 2, 2, 2, false); /* 2x2 path: 8, 4 lanes, tail */
}

DT_TEST(nn_ops_gemm_transposes)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    enum { M = 5, N = 4, K = 3 };
    float a[M * K], b[K * N], at[K * M], bt[N * K], c[M * N];
    randn(a, M * K, 1);
    randn(b, K * N, 2);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            at[k * M + i] = a[i * K + k];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            bt[j * K + k] = b[k * N + j];
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        for (int i = 0; i < M * N; i++)
            c[i] = 1.0f;
        dt_nn_gemm(o, ta, tb, M, N, K, 2.0f, ta ? at : a, ta ? M : K, tb ? bt : b, tb ? K : N, 0.5f,
                   c, N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++)
                    s += (double)a[i * K + k] * b[k * N + j];
                ASSERT_NEAR(c[i * N + j], 2 * s + 0.5, 1e-5);
            }
    }
}

DT_TEST(nn_ops_loss_values)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    float z[6] = {1, 2, 3, -1, 0, 1}, d[6];
    int32_t lab[2] = {2, 0};
    double sum; /* the CPU's device memory is the host's: loss_dev writes the sum here */
    o->loss_dev(&(dt_nn_loss_p){.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true}, z, lab, NULL,
                NULL, 2, 3, 0.5f, d, &sum);
    double l0 = log(exp(1) + exp(2) + exp(3)) - 3, l1 = log(exp(-1) + exp(0) + exp(1)) + 1;
    ASSERT_NEAR(sum, l0 + l1, 1e-6);
    ASSERT_NEAR(d[2], 0.5 * (exp(3) / (exp(1) + exp(2) + exp(3)) - 1), 1e-6);
    /* probabilities: -log p[label], clipped to [1e-7, 1 - 1e-7] */
    float p[3] = {0.2f, 0.0f, 0.8f};
    int32_t l2 = 1;
    o->loss_dev(&(dt_nn_loss_p){.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = false}, p, &l2, NULL,
                NULL, 1, 3, 1.0f, d, &sum);
    ASSERT_NEAR(sum, -log(1e-7), 1e-3);
    float t[2] = {1, 0}, q[2] = {0.5f, -2.0f};
    o->loss_dev(&(dt_nn_loss_p){.kind = DT_NN_LOSS_BCE, .from_logits = true}, q, NULL, t, NULL, 1,
                2, 1.0f, d, &sum);
    ASSERT_NEAR(sum, (log1p(exp(-0.5)) + log1p(exp(-2.0))) / 2, 1e-6);
    o->loss_dev(&(dt_nn_loss_p){.kind = DT_NN_LOSS_MSE, .from_logits = false}, q, NULL, t, NULL, 1,
                2, 1.0f, d, &sum);
    ASSERT_NEAR(sum, (0.25 + 4.0) / 2, 1e-6);
    o->loss_dev(&(dt_nn_loss_p){.kind = DT_NN_LOSS_MAE, .from_logits = false}, q, NULL, t, NULL, 1,
                2, 1.0f, d, &sum);
    ASSERT_NEAR(sum, (0.5 + 2.0) / 2, 1e-6);
}

DT_TEST(nn_ops_batchnorm_moving_statistics)
{
    /* Keras: moving = moving * momentum + batch * (1 - momentum), batch variance biased. */
    dt_model *m = nn_build(nn_seq("2",
                                  "{\"class_name\": \"BatchNormalization\", \"config\": "
                                  "{\"name\": \"bn\", \"momentum\": 0.9}}",
                                  NULL),
                           1);
    float x[6] = {1, 10, 2, 20, 3, 60};
    int32_t lab[3] = {0, 1, 0};
    dt_model_batch b = {.x = x, .labels = lab, .n = 3};
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    dt_step_stats s;
    dt_err err = {0};
    ASSERT_OK(dt_model_train_step(m, &loss, &b, 3, &s, &err), &err);
    float mm[2], mv[2];
    ASSERT_OK(dt_model_get_weight(m, "bn/moving_mean", mm, 2, &err), &err);
    ASSERT_OK(dt_model_get_weight(m, "bn/moving_variance", mv, 2, &err), &err);
    ASSERT_NEAR(mm[0], 0.1 * 2, 1e-6);
    ASSERT_NEAR(mm[1], 0.1 * 30, 1e-5);
    ASSERT_NEAR(mv[0], 0.9 + 0.1 * (2.0 / 3), 1e-6);
    ASSERT_NEAR(mv[1], 0.9 + 0.1 * ((400.0 + 100 + 900) / 3), 1e-4);
    /* inference uses the moving statistics */
    float y[2];
    ASSERT_OK(dt_model_predict(m, x, 1, y, &err), &err);
    ASSERT_NEAR(y[0], (1 - mm[0]) / sqrt(mv[0] + 1e-3), 1e-5);
    dt_model_free(m);
}

/* One weight w, gradient g fed by hand, against Keras's formulas in double. */
static void optim_case(const char *spec, int steps)
{
    dt_model *m = nn_build(nn_seq("1",
                                  "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
                                  "\"units\": 1, \"use_bias\": false}}",
                                  NULL),
                           1);
    cJSON *j = cJSON_Parse(spec);
    dt_optim_cfg cfg;
    dt_err err = {0};
    ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
    cJSON_Delete(j);
    dt_optim *o;
    ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
    nn_param_set(m, 0, 0.5f);
    double rw = 0.5, rm = 0, rv = 0, ra = 0;
    double lr = cfg.learning_rate;
    for (int t = 1; t <= steps; t++) {
        double gr = 0.3 * t - 0.7;
        float gf = (float)gr;
        nn_dev_set(m, dt_model_grads(m, NULL), &gf, 1);
        ASSERT_OK(dt_optim_step(o, &err), &err);
        rw -= rw * cfg.weight_decay * lr;
        switch (cfg.kind) {
        case DT_OPTIM_SGD:
            rm = cfg.momentum * rm - lr * gr;
            rw += cfg.nesterov ? cfg.momentum * rm - lr * gr : (cfg.momentum > 0 ? rm : -lr * gr);
            break;
        case DT_OPTIM_ADAM:
        case DT_OPTIM_ADAMW: {
            double alpha = lr * sqrt(1 - pow(cfg.beta_2, t)) / (1 - pow(cfg.beta_1, t));
            rm += (gr - rm) * (1 - cfg.beta_1);
            rv += (gr * gr - rv) * (1 - cfg.beta_2);
            rw -= alpha * rm / (sqrt(rv) + cfg.epsilon);
            break;
        }
        case DT_OPTIM_RMSPROP: {
            rv = cfg.rho * rv + (1 - cfg.rho) * gr * gr;
            double den = rv + cfg.epsilon;
            if (cfg.centered) {
                ra = cfg.rho * ra + (1 - cfg.rho) * gr;
                den = rv - ra * ra + cfg.epsilon;
            }
            double inc = lr * gr / sqrt(den);
            if (cfg.momentum > 0) {
                rm = cfg.momentum * rm + inc;
                rw -= rm;
            } else {
                rw -= inc;
            }
            break;
        }
        default: /* the other optimizers: test_nn_optim.c */
            break;
        }
        ASSERT_NEAR(nn_param_get(m, 0), rw, 1e-6);
    }
    ASSERT_EQ(dt_optim_iterations(o), steps);
    dt_optim_free(o);
    dt_model_free(m);
}

DT_TEST(nn_optim_keras_update_rules)
{
    optim_case("\"sgd\"", 4);
    optim_case("{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.1, \"momentum\": 0.9}}",
               5);
    optim_case("{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.1, \"momentum\": 0.9, "
               "\"nesterov\": true}}",
               5);
    optim_case("\"adam\"", 5);
    optim_case("{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01, \"beta_1\": 0.8, "
               "\"epsilon\": 1e-3}}",
               5);
    optim_case("{\"class_name\": \"AdamW\", \"config\": {\"learning_rate\": 0.01}}", 5);
    optim_case("\"rmsprop\"", 5);
    optim_case("{\"class_name\": \"RMSprop\", \"config\": {\"momentum\": 0.5, \"centered\": true}}",
               5);
}

DT_TEST(nn_optim_config_defaults_and_refusals)
{
    dt_optim_cfg c;
    dt_err err = {0};
    cJSON *j = cJSON_Parse("{\"class_name\": \"Adam\", \"config\": {}}");
    ASSERT_OK(dt_optim_cfg_from_json(j, &c, &err), &err);
    cJSON_Delete(j);
    ASSERT_NEAR(c.learning_rate, 0.001, 1e-9);
    ASSERT_NEAR(c.epsilon, 1e-7, 1e-12);
    ASSERT_NEAR(c.beta_2, 0.999, 1e-7);
    dt_optim_defaults(DT_OPTIM_ADAMW, &c);
    ASSERT_NEAR(c.weight_decay, 0.004, 1e-9);
    dt_optim_defaults(DT_OPTIM_SGD, &c);
    ASSERT_NEAR(c.learning_rate, 0.01, 1e-9);
    const char *bad[][2] = {
        {"{\"class_name\": \"Adam\", \"config\": {\"amsgrad\": 1}}", "amsgrad"},
        {"{\"class_name\": \"SGD\", \"config\": {\"clipnorm\": -1.0}}", "clipnorm"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"ExponentialDecay\"}}}",
         "learning_rate"},
        {"{\"class_name\": \"SGD\", \"config\": {\"bogus\": 1}}", "bogus"},
        {"{\"class_name\": \"Adafactor\", \"config\": {}}", "Adafactor"},
        {"{\"class_name\": \"SGD\", \"config\": {\"momentum\": -1}}", "momentum"},
        {"42", "expected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = cJSON_Parse(bad[i][0]);
        ASSERT_TRUE(dt_optim_cfg_from_json(j, &c, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, bad[i][1]);
        cJSON_Delete(j);
    }
}

DT_TEST(nn_model_label_and_batch_checks)
{
    dt_model *m = nn_build(nn_seq("2",
                                  "{\"class_name\": \"Dense\", \"config\": {\"name\": "
                                  "\"out\", \"units\": 3}}",
                                  NULL),
                           1);
    float x[4] = {0};
    int32_t lab[2] = {1, 3};
    dt_model_batch b = {.x = x, .labels = lab, .n = 2};
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    dt_err err = {0};
    ASSERT_STATUS(dt_model_train_step(m, &loss, &b, 2, NULL, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "label 3");
    ASSERT_CONTAINS(err.msg, "'out'");
    b.n = 0;
    ASSERT_STATUS(dt_model_train_step(m, &loss, &b, 2, NULL, &err), DT_EINVAL);
    dt_loss mse = {.kind = DT_NN_LOSS_MSE, .from_logits = false};
    b.n = 2;
    ASSERT_STATUS(dt_model_train_step(m, &mse, &b, 2, NULL, &err), DT_EINVAL);
    ASSERT_STATUS(dt_loss_from_name("ctc", false, &loss, &err), DT_ENOTSUP);
    ASSERT_OK(dt_loss_from_name("mse", false, &loss, &err), &err);
    ASSERT_EQ(loss.kind, DT_NN_LOSS_MSE);
    dt_model_free(m);
}

/* The batch norm as it was when the forward kept xhat: the backward's sums, mask and input
 * gradient read the stored xhat. The CPU kernels recompute xhat from x in the backward instead
 * and must give the same bits. */
static void bn_ref(const float *x, const float *dy, size_t R, int C, const float *ga,
                   const float *be, float eps, float relu, bool acc, float *y, float *dx,
                   float *dga, float *dbe)
{
    float *h = malloc(R * (size_t)C * sizeof(float));
    for (int j = 0; j < C; j++) {
        double s = 0, t = 0;
        for (size_t r = 0; r < R; r++) {
            s += x[r * C + j];
            t += (double)x[r * C + j] * x[r * C + j];
        }
        double m = s / (double)R, v = t / (double)R - m * m;
        float mean = (float)m, var = (float)(v > 0 ? v : 0), k = 1.0f / sqrtf(var + eps);
        double sg = 0, sgh = 0;
        for (size_t r = 0; r < R; r++) {
            size_t i = r * C + j;
            h[i] = (x[i] - mean) * k;
            float o = ga[j] * h[i] + be[j];
            if (relu >= 0) {
                o = o > 0 ? o : 0.0f;
                o = o > relu ? relu : o;
            }
            y[i] = o;
            float p = ga[j] * h[i] + be[j];
            float g = relu < 0 || (p > 0 && p < relu) ? dy[i] : 0.0f;
            sg += g;
            sgh += (double)g * h[i];
        }
        dga[j] = (float)sgh;
        dbe[j] = (float)sg;
        float kk = ga[j] / sqrtf(var + eps), m1 = (float)(sg / (double)R);
        float m2 = (float)(sgh / (double)R);
        for (size_t r = 0; r < R; r++) {
            size_t i = r * C + j;
            float p = ga[j] * h[i] + be[j];
            float g = relu < 0 || (p > 0 && p < relu) ? dy[i] : 0.0f;
            float d = kk * (g - m1 - h[i] * m2);
            dx[i] = acc ? dx[i] + d : d;
        }
    }
    free(h);
}

DT_TEST(nn_ops_batchnorm_recomputed_xhat_is_bit_exact)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    const int cols[] = {3, 8, 13, 40};
    const float relus[] = {-1.0f, 6.0f, 0.5f, INFINITY};
    for (int ci = 0; ci < 4; ci++)
        for (int ri = 0; ri < 4; ri++) {
            int C = cols[ci];
            size_t R = 37, n = R * (size_t)C;
            float *x = malloc(n * sizeof(float)), *dy = malloc(n * sizeof(float));
            float *y = malloc(n * sizeof(float)), *ry = malloc(n * sizeof(float));
            float *dx = malloc(n * sizeof(float)), *rdx = malloc(n * sizeof(float));
            float ga[40], be[40], mm[40], mv[40], sm[40], sv[40], dga[40], dbe[40], rga[40],
                rbe[40];
            randn(x, n, 10 + ci);
            randn(dy, n, 20 + ri);
            randn(ga, C, 30);
            randn(be, C, 31);
            for (size_t i = 0; i < n; i++)
                x[i] = 3.0f * x[i] + 1.5f; /* a mean and a spread that are not 0 and 1 */
            for (int j = 0; j < C; j++)
                mm[j] = 0, mv[j] = 1, dga[j] = dbe[j] = 0;
            bool acc = ri & 1;
            for (size_t i = 0; i < n; i++)
                dx[i] = rdx[i] = acc ? 0.25f : 0.0f;
            o->bn_fwd(true, x, y, R, C, ga, be, mm, mv, 0.9f, 1e-3f, sm, sv, relus[ri]);
            o->bn_bwd(dy, x, R, C, ga, be, sm, sv, 1e-3f, dx, acc, dga, dbe, relus[ri]);
            bn_ref(x, dy, R, C, ga, be, 1e-3f, relus[ri], acc, ry, rdx, rga, rbe);
            ASSERT_EQ(memcmp(y, ry, n * sizeof(float)), 0);
            ASSERT_EQ(memcmp(dx, rdx, n * sizeof(float)), 0);
            ASSERT_EQ(memcmp(dga, rga, (size_t)C * sizeof(float)), 0);
            ASSERT_EQ(memcmp(dbe, rbe, (size_t)C * sizeof(float)), 0);
            int masked = 0; /* the ReLU cases do mask something */
            for (size_t i = 0; i < n; i++)
                masked += relus[ri] >= 0 && dx[i] == dx[i] && y[i] <= 0;
            ASSERT_TRUE(relus[ri] < 0 || masked > 0);
            free(x), free(dy), free(y), free(ry), free(dx), free(rdx);
        }
}
