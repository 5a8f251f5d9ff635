/* test_gpu_train.c - the CUDA backend's loss_dev, regularize_dev, update and clip_norm kernels
 * against the CPU table on the same random inputs. Losses: every kind with its options
 * (from_logits, label_smoothing, ignore_class, hinge_pm1) and row weights NULL or not, dpred
 * (poisoned first) and the sum (device memory, poisoned first) within 1e-5 relative. Updates:
 * every optimizer kind and variant (momentum, nesterov, amsgrad, centered, Ftrl's l1/l2/shrinkage)
 * x clipvalue x weight decay x EMA (plain, overwrite) over 3 steps: w, every slot and the average
 * within 1e-5, and with the CPU's bits but for Ftrl (powf); regularize_dev's gradient likewise
 * bit for bit. clip_norm's sums of squares (the ss it leaves) within 1e-9 of the CPU's, its
 * scaling within 1e-6 and its NaN fill as the CPU's. The sums (loss, regularisation, squares)
 * are also run twice and must give the same bits. */
#include "test_gpu_util.h"

#include <float.h>
#include <stdio.h>

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

/* |a - b| <= tol |b| (and exact when b is 0) */
static bool close_rel(double a, double b, double tol)
{
    return fabs(a - b) <= tol * fabs(b);
}

/* A device buffer of n doubles filled with NaN: a kernel that leaves one unwritten shows. */
static double *gpu_poison_doubles(const dt_nn_ops *g, size_t n)
{
    double *h = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    double *d = gpu_up_bytes(g, h, n * sizeof(double));
    free(h);
    return d;
}

/* The device doubles d (n) into h, waiting for them. */
static void gpu_down_doubles(const dt_nn_ops *g, double *h, const double *d, size_t n)
{
    g->download(h, d, n * sizeof(double));
    GPU_SYNC();
}

/* --- losses ----------------------------------------------------------------------------------- */

typedef struct loss_case {
    const char *name;
    dt_nn_loss_p p;
} loss_case;

static const loss_case loss_cases[] = {
    {"sparse_ce logits", {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true}},
    {"sparse_ce logits ignore -1",
     {.kind = DT_NN_LOSS_SPARSE_CE,
      .from_logits = true,
      .has_ignore_class = true,
      .ignore_class = -1}},
    {"sparse_ce probs ignore 1",
     {.kind = DT_NN_LOSS_SPARSE_CE, .has_ignore_class = true, .ignore_class = 1}},
    {"sparse_ce probs", {.kind = DT_NN_LOSS_SPARSE_CE}},
    {"ce logits", {.kind = DT_NN_LOSS_CE, .from_logits = true}},
    {"ce logits smoothed", {.kind = DT_NN_LOSS_CE, .from_logits = true, .label_smoothing = 0.1f}},
    {"ce probs", {.kind = DT_NN_LOSS_CE}},
    {"ce probs smoothed", {.kind = DT_NN_LOSS_CE, .label_smoothing = 0.2f}},
    {"bce logits", {.kind = DT_NN_LOSS_BCE, .from_logits = true}},
    {"bce logits smoothed", {.kind = DT_NN_LOSS_BCE, .from_logits = true, .label_smoothing = 0.1f}},
    {"bce probs", {.kind = DT_NN_LOSS_BCE}},
    {"bce probs smoothed", {.kind = DT_NN_LOSS_BCE, .label_smoothing = 0.1f}},
    {"mse", {.kind = DT_NN_LOSS_MSE}},
    {"mae", {.kind = DT_NN_LOSS_MAE}},
    {"huber", {.kind = DT_NN_LOSS_HUBER, .delta = 1.0f}},
    {"huber 0.3", {.kind = DT_NN_LOSS_HUBER, .delta = 0.3f}},
    {"logcosh", {.kind = DT_NN_LOSS_LOGCOSH}},
    {"kld", {.kind = DT_NN_LOSS_KLD}},
    {"hinge pm1", {.kind = DT_NN_LOSS_HINGE, .hinge_pm1 = true}},
    {"hinge", {.kind = DT_NN_LOSS_HINGE}},
    {"squared_hinge pm1", {.kind = DT_NN_LOSS_SQUARED_HINGE, .hinge_pm1 = true}},
    {"squared_hinge", {.kind = DT_NN_LOSS_SQUARED_HINGE}},
    {"cosine", {.kind = DT_NN_LOSS_COSINE}},
    {"poisson", {.kind = DT_NN_LOSS_POISSON}},
};

/* The batch of one case: pred (n, cols), the labels or values the kind reads, as a model would
 * give them (probabilities where the kind wants them, edge values where it clips). */
typedef struct loss_in {
    float *pred, *values;
    int32_t *labels;
} loss_in;

static loss_in loss_inputs(const dt_nn_loss_p *p, size_t n, int cols, uint64_t seed)
{
    size_t m = n * (size_t)cols;
    loss_in in = {0};
    bool ce = p->kind == DT_NN_LOSS_SPARSE_CE || p->kind == DT_NN_LOSS_CE;
    if ((ce || p->kind == DT_NN_LOSS_BCE) && !p->from_logits)
        in.pred = uniform(m, 0.01f, 1.0f, seed);
    else if (p->kind == DT_NN_LOSS_KLD)
        in.pred = uniform(m, -0.1f, 1.1f, seed); /* both clips */
    else if (p->kind == DT_NN_LOSS_POISSON)
        in.pred = uniform(m, 0.05f, 3.0f, seed);
    else
        in.pred = gpu_randn(m, 2.0f, seed);
    if (p->kind == DT_NN_LOSS_BCE && !p->from_logits && m >= 4) {
        in.pred[0] = 0.0f; /* at and beyond the clip: gradient 0 there */
        in.pred[m - 1] = 1.0f;
    }
    if (p->kind == DT_NN_LOSS_COSINE && n > 1)
        for (int j = 0; j < cols; j++) /* a row under the EPS clamp, not 0: its p^ term shows */
            in.pred[(size_t)cols + j] = 1e-9f * (float)(j + 1);
    if (p->kind == DT_NN_LOSS_SPARSE_CE) {
        in.labels = malloc(sizeof(int32_t) * n);
        dt_rng r;
        dt_rng_seed(&r, seed + 1);
        for (size_t i = 0; i < n; i++) {
            in.labels[i] = (int32_t)(dt_rng_uniform(&r) * (float)cols) % cols;
            if (p->has_ignore_class && p->ignore_class < 0 && i % 3 == 1)
                in.labels[i] = p->ignore_class;
        }
        return in;
    }
    switch (p->kind) {
    case DT_NN_LOSS_CE:
        in.values = uniform(m, 0.0f, 1.0f, seed + 1);
        /* rows of probabilities, but for logits (the fused softmax's gradient scales by the
         * row's target sum: 1 is the one value that hides a kernel dropping it) */
        for (size_t i = 0; i < n && !p->from_logits; i++) {
            float s = 0;
            for (int j = 0; j < cols; j++)
                s += in.values[i * (size_t)cols + j];
            for (int j = 0; j < cols; j++)
                in.values[i * (size_t)cols + j] /= s;
        }
        break;
    case DT_NN_LOSS_BCE:
        in.values = uniform(m, 0.0f, 1.0f, seed + 1);
        break;
    case DT_NN_LOSS_KLD:
        in.values = uniform(m, -0.1f, 1.1f, seed + 1);
        break;
    case DT_NN_LOSS_HINGE:
    case DT_NN_LOSS_SQUARED_HINGE:
        in.values = uniform(m, 0.0f, 1.0f, seed + 1);
        for (size_t i = 0; i < m; i++) /* 0/1 (pm1 maps them to -1/1) or -1/1 */
            in.values[i] = in.values[i] < 0.5f ? (p->hinge_pm1 ? 0.0f : -1.0f) : 1.0f;
        break;
    case DT_NN_LOSS_POISSON:
        in.values = uniform(m, 0.0f, 5.0f, seed + 1);
        for (size_t i = 0; i < m; i++)
            in.values[i] = floorf(in.values[i]);
        break;
    default:
        in.values = gpu_randn(m, 1.0f, seed + 1);
        if (p->kind == DT_NN_LOSS_MAE)
            for (size_t i = 0; i < m; i += 5) /* p == t: MAE's gradient is 0 there */
                in.values[i] = in.pred[i];
        break;
    }
    return in;
}

DT_TEST(gpu_loss_dev_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const size_t shapes[][2] = {{1, 1}, {5, 3}, {64, 10}, {33, 300}, {1000, 2}};
    for (size_t k = 0; k < sizeof loss_cases / sizeof *loss_cases; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int weighted = 0; weighted < 2; weighted++) {
                const dt_nn_loss_p *p = &loss_cases[k].p;
                size_t n = shapes[s][0];
                int cols = (int)shapes[s][1];
                size_t m = n * (size_t)cols;
                uint64_t seed = 100 * k + 10 * s + weighted;
                loss_in in = loss_inputs(p, n, cols, seed);
                float *rw = weighted ? uniform(n, 0.5f, 2.0f, seed + 7) : NULL;
                float *d = malloc(sizeof(float) * m);
                float scale = 1.0f / (float)n;
                double sum = -1; /* the CPU's device memory is the host's */
                c->loss_dev(p, in.pred, in.labels, in.values, rw, n, cols, scale, d, &sum);
                float *d_p = gpu_up(g, in.pred, m),
                      *d_v = in.values ? gpu_up(g, in.values, m) : NULL;
                int32_t *d_l = in.labels ? gpu_up_bytes(g, in.labels, n * sizeof(int32_t)) : NULL;
                float *d_w = rw ? gpu_up(g, rw, n) : NULL, *d_d = gpu_poison(g, m);
                double *d_sum = gpu_poison_doubles(g, 1), gsum = -2;
                g->loss_dev(p, d_p, d_l, d_v, d_w, n, cols, scale, d_d, d_sum);
                gpu_down_doubles(g, &gsum, d_sum, 1);
                if (!close_rel(gsum, sum, 1e-5))
                    fprintf(stderr, "%s (%zu, %d) weighted %d: loss %.10g, CPU %.10g\n",
                            loss_cases[k].name, n, cols, weighted, gsum, sum);
                ASSERT_TRUE(close_rel(gsum, sum, 1e-5));
                float *h = gpu_down(g, d_d, m);
                double e = gpu_rel_l2(h, d, m);
                if (!(e <= 1e-5))
                    fprintf(stderr, "%s (%zu, %d) weighted %d: dpred relative L2 %.3g\n",
                            loss_cases[k].name, n, cols, weighted, e);
                ASSERT_FLE(e, 1e-5);
                free(h);
                g->free(d_p);
                dt_nn_free(g, d_v);
                dt_nn_free(g, d_l);
                dt_nn_free(g, d_w);
                g->free(d_d);
                g->free(d_sum);
                free(in.pred);
                free(in.values);
                free(in.labels);
                free(rw);
                free(d);
            }
    /* an empty batch writes 0 (the step block reads it) */
    double *d_sum = gpu_poison_doubles(g, 1), gsum = NAN, sum = NAN;
    float *d_p = gpu_poison(g, 1), *d_d = gpu_poison(g, 1), p1 = 0, d1 = 0;
    c->loss_dev(&loss_cases[12].p, &p1, NULL, &p1, NULL, 0, 3, 1.0f, &d1, &sum);
    g->loss_dev(&loss_cases[12].p, d_p, NULL, d_p, NULL, 0, 3, 1.0f, d_d, d_sum);
    gpu_down_doubles(g, &gsum, d_sum, 1);
    ASSERT_TRUE(sum == 0.0 && gsum == 0.0);
    g->free(d_sum);
    g->free(d_p);
    g->free(d_d);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* A big batch twice (sparse CE with weights, MSE): dpred and the sum with the same bits. */
DT_TEST(gpu_loss_dev_deterministic)
{
    const dt_nn_ops *g = gpu_ops();
    size_t n = 20000;
    int cols = 37;
    size_t m = n * (size_t)cols;
    const dt_nn_loss_p *ps[] = {&loss_cases[1].p, &loss_cases[12].p};
    for (size_t k = 0; k < 2; k++) {
        loss_in in = loss_inputs(ps[k], n, cols, 77 + k);
        float *rw = uniform(n, 0.5f, 2.0f, 78);
        float *d_p = gpu_up(g, in.pred, m), *d_v = in.values ? gpu_up(g, in.values, m) : NULL;
        int32_t *d_l = in.labels ? gpu_up_bytes(g, in.labels, n * sizeof(int32_t)) : NULL;
        float *d_w = gpu_up(g, rw, n);
        double sums[2], *d_sum = gpu_poison_doubles(g, 2);
        float *h[2];
        for (int run = 0; run < 2; run++) {
            float *d_d = gpu_poison(g, m);
            g->loss_dev(ps[k], d_p, d_l, d_v, d_w, n, cols, 1.0f / (float)n, d_d, d_sum + run);
            h[run] = gpu_down(g, d_d, m);
            g->free(d_d);
            GPU_SYNC();
        }
        gpu_down_doubles(g, sums, d_sum, 2);
        g->free(d_sum);
        ASSERT_TRUE(isfinite(sums[0]) && sums[0] != 0);
        ASSERT_EQ(memcmp(&sums[0], &sums[1], sizeof(double)), 0);
        ASSERT_EQ(memcmp(h[0], h[1], m * sizeof(float)), 0);
        free(h[0]);
        free(h[1]);
        g->free(d_p);
        dt_nn_free(g, d_v);
        dt_nn_free(g, d_l);
        g->free(d_w);
        free(in.pred);
        free(in.values);
        free(in.labels);
        free(rw);
    }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* --- regularize_dev --------------------------------------------------------------------------- */

DT_TEST(gpu_regularize_dev_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const size_t sizes[] = {1, 7, 1000, 300001};
    static const float ls[][2] = {{0.01f, 0.0f}, {0.0f, 0.02f}, {0.01f, 0.02f}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t l = 0; l < sizeof ls / sizeof *ls; l++) {
            size_t n = sizes[s];
            float *w = gpu_randn(n, 1.0f, 10 * s + l), *gr = gpu_randn(n, 0.1f, 10 * s + l + 5);
            for (size_t i = 5; i < n; i += 11)
                w[i] = 0.0f; /* sign(0) = 0 */
            float *d_w = gpu_up(g, w, n), *d_g = gpu_up(g, gr, n), *d_g2 = gpu_up(g, gr, n);
            double ref = NAN, got[2], *d_out = gpu_poison_doubles(g, 2);
            c->regularize_dev(w, gr, n, ls[l][0], ls[l][1], 0.5f, &ref);
            g->regularize_dev(d_w, d_g, n, ls[l][0], ls[l][1], 0.5f, d_out);
            g->regularize_dev(d_w, d_g2, n, ls[l][0], ls[l][1], 0.5f, d_out + 1);
            gpu_down_doubles(g, got, d_out, 2);
            g->free(d_out);
            if (!close_rel(got[0], ref, 1e-9))
                fprintf(stderr, "n %zu l1 %g l2 %g: %.17g, CPU %.17g\n", n, ls[l][0], ls[l][1],
                        got[0], ref);
            ASSERT_TRUE(ref > 0);
            ASSERT_TRUE(close_rel(got[0], ref, 1e-9));
            ASSERT_EQ(memcmp(&got[0], &got[1], sizeof(double)), 0);
            GPU_EXPECT_CLOSE(g, d_g, gr, n, 1e-5);
            gpu_same_bits(g, d_g, gr, n, "regularize's gradient");
            g->free(d_w);
            g->free(d_g);
            g->free(d_g2);
            free(w);
            free(gr);
        }
    /* no weights: 0 written, g untouched */
    double *d_out = gpu_poison_doubles(g, 1), got = NAN, ref = NAN;
    float w1 = 1.0f, g1 = 0.25f, *d_g = gpu_up(g, &g1, 1);
    c->regularize_dev(&w1, &g1, 0, 0.01f, 0.02f, 0.5f, &ref);
    g->regularize_dev(d_g, d_g, 0, 0.01f, 0.02f, 0.5f, d_out);
    gpu_down_doubles(g, &got, d_out, 1);
    ASSERT_TRUE(ref == 0.0 && got == 0.0 && g1 == 0.25f);
    gpu_same_bits(g, d_g, &g1, 1, "regularize_dev's gradient of no weights");
    g->free(d_out);
    g->free(d_g);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* --- update ----------------------------------------------------------------------------------- */

/* One optimizer variant: its kind and options, and which slots it has (signed: any value; else
 * a non-negative accumulator). */
typedef struct upd_case {
    const char *name;
    dt_nn_upd_kind kind;
    float momentum;
    bool nesterov;
    bool slot[3], nonneg[3];
    float lr_power, l1, l2, l2_shrinkage;
} upd_case;

static const upd_case upd_cases[] = {
    {"sgd", DT_NN_UPD_SGD, 0, false, {0}, {0}, 0, 0, 0, 0},
    {"sgd momentum", DT_NN_UPD_SGD, 0.9f, false, {1}, {0}, 0, 0, 0, 0},
    {"sgd nesterov", DT_NN_UPD_SGD, 0.9f, true, {1}, {0}, 0, 0, 0, 0},
    {"adam", DT_NN_UPD_ADAM, 0, false, {1, 1}, {0, 1}, 0, 0, 0, 0},
    {"adam amsgrad", DT_NN_UPD_ADAM, 0, false, {1, 1, 1}, {0, 1, 1}, 0, 0, 0, 0},
    {"rmsprop", DT_NN_UPD_RMSPROP, 0, false, {1}, {1}, 0, 0, 0, 0},
    {"rmsprop momentum", DT_NN_UPD_RMSPROP, 0.9f, false, {1, 1}, {1, 0}, 0, 0, 0, 0},
    {"rmsprop centered", DT_NN_UPD_RMSPROP, 0, false, {1, 0, 1}, {1, 0, 0}, 0, 0, 0, 0},
    {"rmsprop centered momentum", DT_NN_UPD_RMSPROP, 0.9f, false, {1, 1, 1}, {1, 0, 0}, 0, 0, 0, 0},
    {"adagrad", DT_NN_UPD_ADAGRAD, 0, false, {1}, {1}, 0, 0, 0, 0},
    {"adadelta", DT_NN_UPD_ADADELTA, 0, false, {1, 1}, {1, 1}, 0, 0, 0, 0},
    {"adamax", DT_NN_UPD_ADAMAX, 0, false, {1, 1}, {0, 1}, 0, 0, 0, 0},
    {"nadam", DT_NN_UPD_NADAM, 0, false, {1, 1}, {0, 1}, 0, 0, 0, 0},
    {"ftrl", DT_NN_UPD_FTRL, 0, false, {1, 1}, {1, 0}, -0.5f, 0, 0, 0},
    {"ftrl l1 l2 shrinkage", DT_NN_UPD_FTRL, 0, false, {1, 1}, {1, 0}, -0.5f, 0.01f, 0.02f, 0.03f},
    {"ftrl power -0.3 l1", DT_NN_UPD_FTRL, 0, false, {1, 1}, {1, 0}, -0.3f, 0.05f, 0, 0},
    {"lion", DT_NN_UPD_LION, 0, false, {1}, {0}, 0, 0, 0, 0},
};

/* The dt_nn_update optim.c would build for step t (1-based) of a case, slots not set. */
static dt_nn_update upd_step(const upd_case *uc, int t, float clip, float decay, int ema)
{
    const double b1 = 0.9, b2 = 0.999, lr = 0.01;
    dt_nn_update u = {
        .kind = uc->kind,
        .lr = (float)lr,
        .decay = decay,
        .clipvalue = clip,
        .momentum = uc->momentum,
        .nesterov = uc->nesterov,
        .b1 = (float)b1,
        .b2 = (float)b2,
        .eps = 1e-7f,
        .rho = 0.9f,
        .lr_power = uc->lr_power,
        .l1 = uc->l1,
        .l2 = uc->l2,
        .l2_shrinkage = uc->l2_shrinkage,
        .ema_momentum = 0.9f,
        .ema_overwrite = ema == 2 && t % 2 == 0,
    };
    if (uc->kind == DT_NN_UPD_LION) {
        u.b1 = 0.9f;
        u.b2 = 0.99f;
    }
    switch (uc->kind) {
    case DT_NN_UPD_ADAM:
        u.c[0] = (float)(lr * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t)));
        break;
    case DT_NN_UPD_ADAMAX:
        u.c[0] = (float)(1.0 - pow(b1, t));
        break;
    case DT_NN_UPD_NADAM: {
        double prod = 1;
        for (int k = 1; k <= t + 1; k++)
            prod *= b1 * (1.0 - 0.5 * pow(0.96, k));
        double u_t = b1 * (1.0 - 0.5 * pow(0.96, t)), u_t1 = b1 * (1.0 - 0.5 * pow(0.96, t + 1));
        double prod_t = prod / u_t1; /* u_1 .. u_t */
        u.c[0] = (float)u_t1;
        u.c[1] = (float)(1.0 - prod_t * u_t1);
        u.c[2] = (float)(1.0 - u_t);
        u.c[3] = (float)(1.0 - prod_t);
        u.c[4] = (float)(1.0 - pow(b2, t));
        break;
    }
    case DT_NN_UPD_FTRL:
        u.l2 += 0.1f / (2.0f * (float)lr); /* beta 0.1 */
        break;
    default:
        break;
    }
    return u;
}

DT_TEST(gpu_update_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const size_t sizes[] = {1, 1003};
    static const float clips[] = {0.0f, 0.05f}, decays[] = {1.0f, 0.999f};
    int runs = 0;
    for (size_t k = 0; k < sizeof upd_cases / sizeof *upd_cases; k++)
        for (size_t s = 0; s < 2; s++)
            for (int ci = 0; ci < 2; ci++)
                for (int di = 0; di < 2; di++)
                    for (int ema = 0; ema < 3; ema++) { /* none, ema, ema with overwrite */
                        const upd_case *uc = &upd_cases[k];
                        size_t n = sizes[s];
                        uint64_t seed = 1000 * k + 100 * s + 10 * ci + 3 * di + ema;
                        float *w = gpu_randn(n, 1.0f, seed), *d_w = gpu_up(g, w, n);
                        float *sl[3] = {0}, *d_sl[3] = {0};
                        for (int i = 0; i < 3; i++) {
                            if (!uc->slot[i])
                                continue;
                            if (uc->nonneg[i])
                                sl[i] = uniform(n, 0.01f, 0.5f, seed + 1 + i);
                            else
                                sl[i] = gpu_randn(n, uc->kind == DT_NN_UPD_RMSPROP ? 0.01f : 0.1f,
                                                  seed + 1 + i);
                            d_sl[i] = gpu_up(g, sl[i], n);
                        }
                        float *av = ema ? gpu_randn(n, 1.0f, seed + 4) : NULL;
                        float *d_av = av ? gpu_up(g, av, n) : NULL;
                        for (int t = 1; t <= 3; t++) {
                            float *gr = gpu_randn(n, 0.1f, seed + 10 * t);
                            float *d_gr = gpu_up(g, gr, n);
                            dt_nn_update u = upd_step(uc, t, clips[ci], decays[di], ema);
                            for (int i = 0; i < 3; i++)
                                u.slot[i] = sl[i];
                            u.ema = av;
                            c->update(&u, w, gr, n);
                            for (int i = 0; i < 3; i++)
                                u.slot[i] = d_sl[i];
                            u.ema = d_av;
                            g->update(&u, d_w, d_gr, n);
                            g->free(d_gr);
                            free(gr);
                        }
                        float *h = gpu_down(g, d_w, n);
                        GPU_SYNC();
                        double e = gpu_rel_l2(h, w, n);
                        if (!(e <= 1e-5))
                            fprintf(stderr, "%s n %zu clip %g decay %g ema %d: w error %.3g\n",
                                    uc->name, n, clips[ci], decays[di], ema, e);
                        ASSERT_FLE(e, 1e-5);
                        free(h);
                        /* every float operation in the CPU's order, each rounded on its own:
                         * the CPU's bits, but for Ftrl's powf */
                        bool bits = uc->kind != DT_NN_UPD_FTRL;
                        if (bits)
                            gpu_same_bits(g, d_w, w, n, uc->name);
                        for (int i = 0; i < 3; i++)
                            if (sl[i]) {
                                GPU_EXPECT_CLOSE(g, d_sl[i], sl[i], n, 1e-5);
                                if (bits)
                                    gpu_same_bits(g, d_sl[i], sl[i], n, uc->name);
                                g->free(d_sl[i]);
                                free(sl[i]);
                            }
                        if (av) {
                            GPU_EXPECT_CLOSE(g, d_av, av, n, 1e-5);
                            if (bits)
                                gpu_same_bits(g, d_av, av, n, uc->name);
                            g->free(d_av);
                            free(av);
                        }
                        g->free(d_w);
                        free(w);
                        runs++;
                    }
    printf("%d optimizer runs of 3 steps match the CPU\n", runs);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* --- clip_norm -------------------------------------------------------------------------------- */

/* clip_norm on the GPU and the CPU over the same g (nx floats) and segments (host arrays, put in
 * device memory for the GPU): ss and g come back in ref/got (nseg doubles) and g_cpu/g_gpu. */
typedef struct clip_run {
    double *ss_cpu, *ss_gpu;
    float *g_cpu, *g_gpu;
} clip_run;

static clip_run clip_both(const dt_nn_ops *g, const float *x, size_t nx, size_t nseg,
                          const size_t *off, const size_t *len, float clipnorm, float gclip)
{
    const dt_nn_ops *c = dt_nn_ops_cpu();
    clip_run r = {.ss_cpu = malloc(sizeof(double) * nseg), .ss_gpu = malloc(sizeof(double) * nseg)};
    r.g_cpu = malloc(sizeof(float) * nx);
    memcpy(r.g_cpu, x, sizeof(float) * nx);
    for (size_t s = 0; s < nseg; s++)
        r.ss_cpu[s] = NAN;
    c->clip_norm(r.g_cpu, nx, nseg, off, len, clipnorm, gclip, r.ss_cpu);
    size_t *d_seg = g->alloc(2 * nseg * sizeof(size_t));
    g->upload(d_seg, off, nseg * sizeof(size_t));
    g->upload(d_seg + nseg, len, nseg * sizeof(size_t));
    float *d_x = gpu_up(g, x, nx);
    double *d_ss = gpu_poison_doubles(g, nseg);
    g->clip_norm(d_x, nx, nseg, d_seg, d_seg + nseg, clipnorm, gclip, d_ss);
    gpu_down_doubles(g, r.ss_gpu, d_ss, nseg);
    r.g_gpu = gpu_down(g, d_x, nx);
    GPU_SYNC();
    g->free(d_seg);
    g->free(d_x);
    g->free(d_ss);
    return r;
}

static void clip_free(clip_run *r)
{
    free(r->ss_cpu);
    free(r->ss_gpu);
    free(r->g_cpu);
    free(r->g_gpu);
}

/* The sums of squares clip_norm leaves in ss: segments from empty to more than the most chunks a
 * segment gets, overlapping, and 70000 short ones (more than a grid's 65535 rows), with a clipnorm
 * no norm reaches (g kept bit for bit); twice, the same bits. */
DT_TEST(gpu_clip_norm_sums_match_cpu)
{
    const dt_nn_ops *g = gpu_ops();
    size_t nx = 1200000;
    float *x = gpu_randn(nx, 1.0f, 3);
    static const size_t off[] = {0, 0, 5, 1000, 7, 100};
    static const size_t len[] = {0, 1, 1000, 250000, 1100000, 3};
    size_t ns = sizeof off / sizeof *off;
    clip_run a = clip_both(g, x, nx, ns, off, len, FLT_MAX, 0.0f);
    clip_run b = clip_both(g, x, nx, ns, off, len, FLT_MAX, 0.0f);
    for (size_t s = 0; s < ns; s++) {
        if (!close_rel(a.ss_gpu[s], a.ss_cpu[s], 1e-9))
            fprintf(stderr, "segment %zu (%zu, %zu): %.17g, CPU %.17g\n", s, off[s], len[s],
                    a.ss_gpu[s], a.ss_cpu[s]);
        ASSERT_TRUE(close_rel(a.ss_gpu[s], a.ss_cpu[s], 1e-9));
    }
    ASSERT_TRUE(a.ss_cpu[0] == 0 && a.ss_cpu[4] > 0);
    ASSERT_EQ(memcmp(a.ss_gpu, b.ss_gpu, ns * sizeof(double)), 0);
    ASSERT_EQ(memcmp(a.g_gpu, x, nx * sizeof(float)), 0);
    ASSERT_EQ(memcmp(a.g_cpu, x, nx * sizeof(float)), 0);
    clip_free(&a);
    clip_free(&b);
    /* clip_norm's grid spans n's chunks (it cannot know the longest segment): a short g keeps
     * the 70000 segments to one chunk each, as a model's many small layers would be */
    size_t many = 70000, nsmall = 4096;
    size_t *o2 = malloc(many * sizeof(size_t)), *l2 = malloc(many * sizeof(size_t));
    for (size_t s = 0; s < many; s++) {
        o2[s] = (s * 17) % (nsmall - 8);
        l2[s] = 1 + s % 7;
    }
    clip_run m = clip_both(g, x, nsmall, many, o2, l2, FLT_MAX, 0.0f);
    for (size_t s = 0; s < many; s++)
        ASSERT_TRUE(close_rel(m.ss_gpu[s], m.ss_cpu[s], 1e-9));
    ASSERT_TRUE(m.ss_cpu[many - 1] > 0);
    ASSERT_EQ(memcmp(m.g_gpu, x, nsmall * sizeof(float)), 0);
    clip_free(&m);
    free(o2);
    free(l2);
    free(x);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* The clipping itself: clipnorm over disjoint segments (some under the norm, kept bit for bit,
 * some scaled), global_clipnorm above and below |g|, and a non-finite |g| (NaN everywhere). */
DT_TEST(gpu_clip_norm_scales_match_cpu)
{
    const dt_nn_ops *g = gpu_ops();
    size_t nx = 30000;
    float *x = gpu_randn(nx, 0.1f, 5);
    static const size_t off[] = {0, 10, 1000, 5000, 29990};
    static const size_t len[] = {10, 990, 4000, 24990, 10};
    size_t ns = sizeof off / sizeof *off;
    /* clipnorm 1: |g_s| ~ 0.1 sqrt(len): the short segments stay, the long ones scale */
    clip_run r = clip_both(g, x, nx, ns, off, len, 1.0f, 0.0f);
    for (size_t s = 0; s < ns; s++) {
        double e = gpu_rel_l2(r.g_gpu + off[s], r.g_cpu + off[s], len[s]);
        bool kept = !memcmp(r.g_cpu + off[s], x + off[s], len[s] * sizeof(float));
        printf("clipnorm 1, segment %zu (len %zu): |g| %.6g, %s, error %.3g\n", s, len[s],
               sqrt(r.ss_cpu[s]), kept ? "kept" : "scaled", e);
        ASSERT_TRUE(kept == (sqrt(r.ss_cpu[s]) <= 1.0));
        if (kept)
            ASSERT_EQ(memcmp(r.g_gpu + off[s], x + off[s], len[s] * sizeof(float)), 0);
        ASSERT_FLE(e, 1e-6);
        ASSERT_TRUE(close_rel(r.ss_gpu[s], r.ss_cpu[s], 1e-9));
    }
    ASSERT_TRUE(sqrt(r.ss_cpu[0]) <= 1.0 && sqrt(r.ss_cpu[3]) > 1.0);
    clip_free(&r);
    static const float gclips[] = {1.0f, 100.0f};
    for (int k = 0; k < 2; k++) {
        r = clip_both(g, x, nx, ns, off, len, 0.0f, gclips[k]);
        double e = gpu_rel_l2(r.g_gpu, r.g_cpu, nx);
        printf("global_clipnorm %g: error %.3g\n", (double)gclips[k], e);
        ASSERT_FLE(e, 1e-6);
        bool kept = !memcmp(r.g_cpu, x, nx * sizeof(float));
        ASSERT_TRUE(kept == (k == 1)); /* |g| ~ 17 */
        if (kept)
            ASSERT_EQ(memcmp(r.g_gpu, x, nx * sizeof(float)), 0);
        clip_free(&r);
    }
    x[20000] = INFINITY;
    r = clip_both(g, x, nx, ns, off, len, 0.0f, 1.0f);
    for (size_t i = 0; i < nx; i++)
        ASSERT_TRUE(isnan(r.g_cpu[i]) && isnan(r.g_gpu[i]));
    ASSERT_TRUE(isinf(r.ss_cpu[3]) && isinf(r.ss_gpu[3]));
    clip_free(&r);
    free(x);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}
