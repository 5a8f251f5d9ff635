/* test_nn_rnn_cell.c - the CPU LSTM and GRU (reset_after) cell kernels (ops->rnn_fwd / rnn_bwd)
 * against a float64 reference of the contract in nn/ops.h, one timestep at a time: 150 units (the
 * kernel works in blocks of 64, so two whole blocks and a remainder), pre-activations from -40 to
 * 40 (the vectorised exp clamps its argument; tanh switches formula at |x| = 0.625), the activation
 * pairs Keras uses (tanh/sigmoid, tanh/both hard_sigmoids, relu/sigmoid), a masked row in between,
 * and a NaN that must stay a NaN; SimpleRNN and the GRU without reset_after likewise. */
#include "dt_test.h"
#include "nn/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_ 3
#define U_ 150
#define G_ (4 * U_)

static double ract(dt_nn_cell_act k, double x)
{
    switch (k) {
    case DT_NN_CACT_LINEAR:
        return x;
    case DT_NN_CACT_RELU:
        return x > 0 ? x : 0;
    case DT_NN_CACT_SIGMOID:
        return 1 / (1 + exp(-x));
    case DT_NN_CACT_TANH:
        return tanh(x);
    case DT_NN_CACT_HARD_SIGMOID2:
        return fmin(fmax(0.2 * x + 0.5, 0), 1);
    case DT_NN_CACT_HARD_SIGMOID3:
        return fmin(fmax(x / 6 + 0.5, 0), 1);
    }
    return x;
}

static double rdact(dt_nn_cell_act k, double x)
{
    switch (k) {
    case DT_NN_CACT_SIGMOID:
        return ract(k, x) * (1 - ract(k, x));
    case DT_NN_CACT_TANH:
        return 1 - tanh(x) * tanh(x);
    case DT_NN_CACT_RELU:
        return x > 0;
    case DT_NN_CACT_HARD_SIGMOID2:
        return x > -2.5 && x < 2.5 ? 0.2 : 0;
    case DT_NN_CACT_HARD_SIGMOID3:
        return x > -3 && x < 3 ? 1.0 / 6 : 0;
    default:
        return 1;
    }
}

static float uni(unsigned *s, float lo, float hi)
{
    *s = *s * 1103515245u + 12345u;
    return lo + (hi - lo) * (float)((*s >> 8) & 0xffffff) / 16777216.0f;
}

/* |got - want| within tol (1 + |want|), or both NaN. */
static void near(double got, double want, double tol, const char *what, int b, int j)
{
    if (isnan(want) && isnan(got))
        return;
    if (!(fabs(got - want) <= tol * (1 + fabs(want))))
        DT_FAIL_("%s row %d unit %d: %.9g, float64 %.9g", what, b, j, got, want);
}

static void check(dt_nn_cell_act act, dt_nn_cell_act rec, unsigned seed)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    static float a[N_ * G_], a0[N_ * G_], r[N_ * G_], h0[N_ * U_], h1[N_ * U_], c0[N_ * U_],
        c1[N_ * U_], y[N_ * U_], dy[N_ * U_], dh[N_ * U_], dh0[N_ * U_], dc[N_ * U_], dc0[N_ * U_];
    float mask[N_] = {1, 0, 1};
    for (int k = 0; k < N_ * G_; k++) {
        /* row 0 moderate, row 2 wide: saturated gates and the exp clamp */
        float w = k / G_ == 2 ? 40.0f : 6.0f;
        a[k] = a0[k] = uni(&seed, -w, w);
        r[k] = uni(&seed, -1, 1);
    }
    for (int k = 0; k < N_ * U_; k++) {
        h0[k] = uni(&seed, -1, 1);
        c0[k] = uni(&seed, -3, 3);
        dy[k] = uni(&seed, -1, 1);
        dh[k] = dh0[k] = uni(&seed, -1, 1);
        dc[k] = dc0[k] = uni(&seed, -1, 1);
    }
    /* small arguments (tanh's polynomial branch) and the branch point itself */
    a[7] = a0[7] = 1e-4f;
    a[2 * U_ + 9] = a0[2 * U_ + 9] = -0.625f;
    /* a NaN in row 0's output gate of unit 5 */
    a[3 * U_ + 5] = a0[3 * U_ + 5] = NAN;

    dt_nn_rnn_step st = {.cell = DT_NN_CELL_LSTM,
                         .n = N_,
                         .u = U_,
                         .act = act,
                         .rec = rec,
                         .zero_masked = true,
                         .mask = mask,
                         .ldm = 1,
                         .a = a,
                         .lda = G_,
                         .r = r,
                         .h0 = h0,
                         .h1 = h1,
                         .c0 = c0,
                         .c1 = c1,
                         .y = y,
                         .ldy = U_};
    o->rnn_fwd(&st);
    for (int b = 0; b < N_; b++)
        for (int j = 0; j < U_; j++) {
            size_t k = (size_t)b * U_ + j;
            if (!mask[b]) {
                ASSERT_TRUE(h1[k] == h0[k] && c1[k] == c0[k] && y[k] == 0.0f);
                continue;
            }
            double p[4];
            for (int g = 0; g < 4; g++) {
                size_t i = (size_t)b * G_ + (size_t)g * U_ + j;
                p[g] = (double)a0[i] + r[i];
                near(a[i], p[g], 1e-7, "pre-activation", b, j);
            }
            double i = ract(rec, p[0]), f = ract(rec, p[1]), g = ract(act, p[2]);
            double o_ = ract(rec, p[3]), c = f * c0[k] + i * g, h = o_ * ract(act, c);
            near(c1[k], c, 1e-6, "c1", b, j);
            near(h1[k], h, 1e-6, "h1", b, j);
            ASSERT_TRUE(y[k] == h1[k] || (isnan(y[k]) && isnan(h1[k])));
            /* the NaN stays, and only there (fmaxf in hard_sigmoid drops a NaN, as before) */
            if (rec == DT_NN_CACT_SIGMOID)
                ASSERT_TRUE(isnan(h1[k]) == (b == 0 && j == 5));
            else
                ASSERT_TRUE(!isnan(h1[k]));
        }

    /* backward from the forward's state: a holds the pre-activations */
    float pre[N_ * G_];
    memcpy(pre, a, sizeof pre);
    st.dy = dy;
    st.dh = dh;
    st.dc = dc;
    o->rnn_bwd(&st);
    for (int b = 0; b < N_; b++)
        for (int j = 0; j < U_; j++) {
            size_t k = (size_t)b * U_ + j;
            const float *pa = pre + (size_t)b * G_;
            const float *ga = a + (size_t)b * G_;
            if (!mask[b]) {
                for (int g = 0; g < 4; g++)
                    ASSERT_TRUE(ga[g * U_ + j] == 0.0f);
                ASSERT_TRUE(dh[k] == dh0[k] && dc[k] == dc0[k]); /* zero_masked: no dy */
                continue;
            }
            double ai = pa[j], af = pa[U_ + j], ac = pa[2 * U_ + j], ao = pa[3 * U_ + j];
            double i = ract(rec, ai), f = ract(rec, af), g = ract(act, ac), o_ = ract(rec, ao);
            double c = c1[k], dh1 = (double)dh0[k] + dy[k];
            double d = dc0[k] + dh1 * o_ * rdact(act, c);
            near(ga[j], d * g * rdact(rec, ai), 2e-6, "d a_i", b, j);
            near(ga[U_ + j], d * c0[k] * rdact(rec, af), 2e-6, "d a_f", b, j);
            near(ga[2 * U_ + j], d * i * rdact(act, ac), 2e-6, "d a_c", b, j);
            near(ga[3 * U_ + j], dh1 * ract(act, c) * rdact(rec, ao), 2e-6, "d a_o", b, j);
            near(dc[k], d * f, 2e-6, "dc", b, j);
            ASSERT_TRUE(dh[k] == 0.0f);
        }
}

/* The GRU with reset_after (Keras 2's tf2 and Keras 3's default): r holds h0 U + the recurrent
 * bias; forward a_z += r_z, a_r += r_r, q = r_h, h1 = z h0 + (1 - z) act(a_h + rec(a_r) q);
 * backward the gradients of a and of r (they differ in the h gate). */
static void check_gru(dt_nn_cell_act act, dt_nn_cell_act rec, unsigned seed)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    enum { GG = 3 * U_ };
    static float a[N_ * GG], a0[N_ * GG], r[N_ * GG], r0[N_ * GG], q[N_ * U_], h0[N_ * U_],
        h1[N_ * U_], y[N_ * U_], dy[N_ * U_], dh[N_ * U_], dh0[N_ * U_];
    float mask[N_] = {1, 0, 1};
    for (int k = 0; k < N_ * GG; k++) {
        float w = k / GG == 2 ? 40.0f : 6.0f;
        a[k] = a0[k] = uni(&seed, -w, w);
        r[k] = r0[k] = uni(&seed, -1, 1);
    }
    for (int k = 0; k < N_ * U_; k++) {
        h0[k] = uni(&seed, -1, 1);
        dy[k] = uni(&seed, -1, 1);
        dh[k] = dh0[k] = uni(&seed, -1, 1);
    }
    a[2 * U_ + 5] = a0[2 * U_ + 5] = NAN; /* row 0's candidate, unit 5 */
    dt_nn_rnn_step st = {.cell = DT_NN_CELL_GRU,
                         .n = N_,
                         .u = U_,
                         .act = act,
                         .rec = rec,
                         .reset_after = true,
                         .zero_masked = true,
                         .mask = mask,
                         .ldm = 1,
                         .a = a,
                         .lda = GG,
                         .r = r,
                         .q = q,
                         .h0 = h0,
                         .h1 = h1,
                         .y = y,
                         .ldy = U_};
    o->rnn_fwd(&st);
    for (int b = 0; b < N_; b++)
        for (int j = 0; j < U_; j++) {
            size_t k = (size_t)b * U_ + j, i = (size_t)b * GG + j;
            if (!mask[b]) {
                ASSERT_TRUE(h1[k] == h0[k] && y[k] == 0.0f);
                continue;
            }
            double az = (double)a0[i] + r0[i], ar = (double)a0[i + U_] + r0[i + U_];
            double qq = r0[i + 2 * U_], z = ract(rec, az);
            double hh = ract(act, a0[i + 2 * U_] + ract(rec, ar) * qq);
            near(q[k], qq, 0, "q", b, j);
            near(h1[k], z * h0[k] + (1 - z) * hh, 1e-6, "h1", b, j);
            if (act == DT_NN_CACT_TANH)
                ASSERT_TRUE(isnan(h1[k]) == (b == 0 && j == 5));
        }
    float pre[N_ * GG];
    memcpy(pre, a, sizeof pre);
    st.dy = dy;
    st.dh = dh;
    o->rnn_bwd(&st);
    for (int b = 0; b < N_; b++)
        for (int j = 0; j < U_; j++) {
            size_t k = (size_t)b * U_ + j, i = (size_t)b * GG + j;
            if (!mask[b]) {
                for (int g = 0; g < 3; g++)
                    ASSERT_TRUE(a[i + g * U_] == 0.0f && r[i + g * U_] == 0.0f);
                ASSERT_TRUE(dh[k] == dh0[k]);
                continue;
            }
            double az = pre[i], ar = pre[i + U_], z = ract(rec, az), rr = ract(rec, ar);
            double ah = pre[i + 2 * U_] + rr * q[k], hh = ract(act, ah);
            double dh1 = (double)dh0[k] + dy[k], dah = dh1 * (1 - z) * rdact(act, ah);
            near(a[i], dh1 * (h0[k] - hh) * rdact(rec, az), 2e-6, "d a_z", b, j);
            near(a[i + U_], dah * q[k] * rdact(rec, ar), 2e-6, "d a_r", b, j);
            near(a[i + 2 * U_], dah, 2e-6, "d a_h", b, j);
            near(r[i], a[i], 0, "d r_z", b, j);
            near(r[i + U_], a[i + U_], 0, "d r_r", b, j);
            near(r[i + 2 * U_], dah * rr, 2e-6, "d r_h", b, j);
            near(dh[k], dh1 * z, 2e-6, "dh", b, j);
        }
}

DT_TEST(nn_rnn_cell_gru_kernel_vs_float64)
{
    check_gru(DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, 4);
    check_gru(DT_NN_CACT_TANH, DT_NN_CACT_HARD_SIGMOID3, 5);
    check_gru(DT_NN_CACT_RELU, DT_NN_CACT_SIGMOID, 6);
}

DT_TEST(nn_rnn_cell_lstm_kernel_vs_float64)
{
    check(DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, 1);
    check(DT_NN_CACT_TANH, DT_NN_CACT_HARD_SIGMOID2, 2);
    check(DT_NN_CACT_RELU, DT_NN_CACT_SIGMOID, 3);
}

/* SimpleRNN (h1 = act(a + r)) and the GRU without reset_after (Keras 2's default; phase 0 gives
 * q = rec(a_r + r_r) h0, the layer then writes r_h, phase 1 gives h1), vectorised like the LSTM:
 * forward and backward of one step against float64, a masked row between two real ones. */
static void check_simple_gru2(dt_nn_cell cell, dt_nn_cell_act act, dt_nn_cell_act rec,
                              unsigned seed)
{
    const dt_nn_ops *o = dt_nn_ops_cpu();
    enum { GG = 3 * U_ };
    int gates = cell == DT_NN_CELL_GRU ? 3 : 1, gu = gates * U_;
    static float a[N_ * GG], a0[N_ * GG], r[N_ * GG], q[N_ * U_], h0[N_ * U_], h1[N_ * U_],
        y[N_ * U_], dy[N_ * U_], dh[N_ * U_], dh0[N_ * U_], dq[N_ * U_], pre[N_ * GG];
    float mask[N_] = {1, 0, 1};
    for (int k = 0; k < N_ * gu; k++) {
        float w = k / gu == 2 ? 40.0f : 6.0f;
        a[k] = a0[k] = uni(&seed, -w, w);
        r[k] = uni(&seed, -1, 1);
    }
    for (int k = 0; k < N_ * U_; k++) {
        h0[k] = uni(&seed, -1, 1);
        dy[k] = uni(&seed, -1, 1);
        dh[k] = dh0[k] = uni(&seed, -1, 1);
        dq[k] = uni(&seed, -1, 1);
        q[k] = -7; /* phase 0 writes it on every row */
    }
    a[7] = a0[7] = 1e-4f; /* tanh's polynomial branch */
    dt_nn_rnn_step st = {.cell = cell,
                         .n = N_,
                         .u = U_,
                         .act = act,
                         .rec = rec,
                         .zero_masked = true,
                         .mask = mask,
                         .ldm = 1,
                         .a = a,
                         .lda = gu,
                         .r = r,
                         .q = cell == DT_NN_CELL_GRU ? q : NULL,
                         .h0 = h0,
                         .h1 = h1,
                         .y = y,
                         .ldy = U_};
    o->rnn_fwd(&st); /* SimpleRNN: the step; GRU: phase 0 */
    if (cell == DT_NN_CELL_GRU) {
        for (int k = 0; k < N_ * U_; k++) {
            int b = k / U_, j = k % U_;
            double ar = (double)a0[b * gu + U_ + j] + r[b * gu + U_ + j];
            near(q[k], mask[b] ? ract(rec, ar) * h0[k] : 0.0, 1e-6, "q", b, j);
        }
        st.phase = 1;
        o->rnn_fwd(&st);
    }
    for (int b = 0; b < N_; b++)
        for (int j = 0; j < U_; j++) {
            size_t k = (size_t)b * U_ + j, i = (size_t)b * gu + j;
            if (!mask[b]) {
                ASSERT_TRUE(h1[k] == h0[k] && y[k] == 0.0f);
                continue;
            }
            double want, hh = 0;
            if (cell == DT_NN_CELL_SIMPLE) {
                want = ract(act, (double)a0[i] + r[i]);
            } else {
                double z = ract(rec, (double)a0[i] + r[i]);
                hh = ract(act, (double)a0[i + 2 * U_] + r[i + 2 * U_]);
                want = z * h0[k] + (1 - z) * hh;
            }
            /* 1 - z in float loses z's rounding (6e-8 near 1) relative to a relu's large hh */
            near(h1[k], want, 1e-6 + 1.2e-7 * fabs(hh) / (1 + fabs(want)), "h1", b, j);
            ASSERT_TRUE(y[k] == h1[k]);
        }
    memcpy(pre, a, sizeof pre);
    st.dy = dy;
    st.dh = dh;
    st.dq = dq;
    o->rnn_bwd(&st); /* SimpleRNN: the step; GRU: phase 1, then phase 0 */
    if (cell == DT_NN_CELL_GRU) {
        st.phase = 0;
        o->rnn_bwd(&st);
    }
    for (int b = 0; b < N_; b++)
        for (int j = 0; j < U_; j++) {
            size_t k = (size_t)b * U_ + j, i = (size_t)b * gu + j;
            if (!mask[b]) {
                for (int g = 0; g < gates; g++)
                    ASSERT_TRUE(a[i + g * U_] == 0.0f);
                ASSERT_TRUE(dh[k] == dh0[k]); /* zero_masked: no dy */
                continue;
            }
            double dh1 = (double)dh0[k] + dy[k];
            if (cell == DT_NN_CELL_SIMPLE) {
                near(a[i], dh1 * rdact(act, pre[i]), 2e-6, "d a", b, j);
                ASSERT_TRUE(dh[k] == 0.0f);
                continue;
            }
            double az = pre[i], ar = pre[i + U_], ah = pre[i + 2 * U_];
            double z = ract(rec, az), hh = ract(act, ah);
            near(a[i], dh1 * (h0[k] - hh) * rdact(rec, az), 2e-6, "d a_z", b, j);
            near(a[i + U_], (double)dq[k] * h0[k] * rdact(rec, ar), 2e-6, "d a_r", b, j);
            near(a[i + 2 * U_], dh1 * (1 - z) * rdact(act, ah), 2e-6, "d a_h", b, j);
            near(dh[k], dh1 * z + (double)dq[k] * ract(rec, ar), 2e-6, "dh", b, j);
        }
}

DT_TEST(nn_rnn_cell_simple_kernel_vs_float64)
{
    check_simple_gru2(DT_NN_CELL_SIMPLE, DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, 7);
    check_simple_gru2(DT_NN_CELL_SIMPLE, DT_NN_CACT_SIGMOID, DT_NN_CACT_SIGMOID, 8);
    check_simple_gru2(DT_NN_CELL_SIMPLE, DT_NN_CACT_RELU, DT_NN_CACT_SIGMOID, 9);
}

DT_TEST(nn_rnn_cell_gru_reset_before_kernel_vs_float64)
{
    check_simple_gru2(DT_NN_CELL_GRU, DT_NN_CACT_TANH, DT_NN_CACT_SIGMOID, 10);
    check_simple_gru2(DT_NN_CELL_GRU, DT_NN_CACT_TANH, DT_NN_CACT_HARD_SIGMOID2, 11);
    check_simple_gru2(DT_NN_CELL_GRU, DT_NN_CACT_RELU, DT_NN_CACT_SIGMOID, 12);
}
