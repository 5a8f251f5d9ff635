/* ops_cpu_rnn.c - CPU kernels of the recurrent cells: the element-wise part of one timestep,
 * forward and backward (the layer runs the GEMMs around it). Contracts are those of
 * dt_nn_rnn_step in nn/ops.h. */
#include "nn/cell_act.h"
#include "nn/ops_cpu.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The LSTM and GRU cells spend most of a step in sigmoid and tanh: libm's expf and tanhf are
 * scalar calls (tanhf through expm1f), 5 a unit forward and 10 backward in an LSTM. The loops
 * below compute them over a block of units with branch-free code the compiler vectorises (this
 * file is built with -ftree-vectorize, see the Makefile): Cephes's expf (|error| <= 1 ulp on the
 * reduced range) and tanhf (its odd polynomial below 0.625, (1 - e) / (1 + e) with
 * e = exp(-2|x|) above), within 2-3 ulp of libm. The backward pass takes the derivatives from
 * the activations (s (1 - s), 1 - t^2) instead of computing them again. */
#define BLOCK 64

/* The row functions below are cloned: 16 lanes where the CPU has AVX-512, 8 with AVX2 (chosen
 * at load time), 4 (SSE2) elsewhere, with the activations inlined into each clone. No FMA: the
 * values are those of the SSE2 code on every machine, so replicas on mixed hosts still agree. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VEC_CLONES
#endif

/* Everything a row kernel calls is forced inline: an out-of-line exp1 is a scalar call per
 * element (the clones' loops stop vectorising), 5x slower. */
#define INLINE static inline __attribute__((always_inline))

/* c ? a : b with bit masks: no branch, so the loops around it vectorise (SSE2 has no blend). */
INLINE float sel(bool c, float a, float b)
{
    uint32_t m = c ? 0xffffffffu : 0u, ab, bb;
    memcpy(&ab, &a, sizeof ab);
    memcpy(&bb, &b, sizeof bb);
    ab = (ab & m) | (bb & ~m);
    memcpy(&a, &ab, sizeof a);
    return a;
}

/* exp(x) for x clamped to [-87.3, 88.3] (no overflow, no denormal results); NaN in, NaN out, so
 * a diverged model still shows NaN losses. Inlined into the loops below, which vectorise it. */
INLINE float exp1(float x)
{
    float v = sel(x < -87.3f, -87.3f, x);
    v = sel(v > 88.3f, 88.3f, v);
    /* round(v / ln 2) with the 1.5 * 2^23 trick (no floorf, which SSE2 cannot vectorise) */
    float t = v * 1.44269504088896341f + 12582912.0f;
    float fn = t - 12582912.0f;
    float r = v - fn * 0.693359375f + fn * 2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t bits = ((int32_t)sel(fn == fn, fn, 0.0f) + 127) << 23; /* NaN: no int of it */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

INLINE void vsigmoid(const float *x, float *y, int n)
{
    for (int k = 0; k < n; k++)
        y[k] = 1.0f / (1.0f + exp1(-x[k]));
}

INLINE void vtanh(const float *x, float *y, int n)
{
    for (int k = 0; k < n; k++) {
        float ax = fabsf(x[k]), z = x[k] * x[k], e = exp1(-2.0f * ax);
        float p = -5.70498872745e-3f;
        p = p * z + 2.06390887954e-2f;
        p = p * z - 5.37397155531e-2f;
        p = p * z + 1.33314422036e-1f;
        p = p * z - 3.33332819422e-1f;
        float small = p * z * ax + ax;
        float big = (1.0f - e) / (1.0f + e);
        /* |tanh| from the branch of |x|, then x's sign bit */
        float t = sel(ax < 0.625f, small, big);
        uint32_t tb, xs;
        memcpy(&tb, &t, sizeof tb);
        memcpy(&xs, &x[k], sizeof xs);
        tb |= xs & 0x80000000u;
        memcpy(&y[k], &tb, sizeof tb);
    }
}

/* The derivative at x (the pre-activation). */
static float dact(dt_nn_cell_act k, float x)
{
    switch (k) {
    case DT_NN_CACT_LINEAR:
        return 1;
    case DT_NN_CACT_RELU:
        return x > 0 ? 1.0f : 0.0f;
    case DT_NN_CACT_SIGMOID: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1 - s);
    }
    case DT_NN_CACT_TANH: {
        float t = tanhf(x);
        return 1 - t * t;
    }
    case DT_NN_CACT_HARD_SIGMOID2:
        return x > -2.5f && x < 2.5f ? 0.2f : 0.0f;
    case DT_NN_CACT_HARD_SIGMOID3:
        return x > -3.0f && x < 3.0f ? 1.0f / 6.0f : 0.0f;
    }
    return 1;
}

/* y = act(x) over n <= BLOCK values. */
INLINE void act_vec(dt_nn_cell_act k, const float *x, float *y, int n)
{
    if (k == DT_NN_CACT_SIGMOID)
        vsigmoid(x, y, n);
    else if (k == DT_NN_CACT_TANH)
        vtanh(x, y, n);
    else
        for (int j = 0; j < n; j++)
            y[j] = dt__nn_cell_act(k, x[j]);
}

/* y = act(x) and d = act'(x) over n <= BLOCK values. */
INLINE void act_dact_vec(dt_nn_cell_act k, const float *x, float *y, float *d, int n)
{
    act_vec(k, x, y, n);
    if (k == DT_NN_CACT_SIGMOID)
        for (int j = 0; j < n; j++)
            d[j] = y[j] * (1 - y[j]);
    else if (k == DT_NN_CACT_TANH)
        for (int j = 0; j < n; j++)
            d[j] = 1 - y[j] * y[j];
    else
        for (int j = 0; j < n; j++)
            d[j] = dact(k, x[j]);
}

/* One unmasked row of an LSTM step forward: a (pre-activations) += r, then c1 and h1. */
VEC_CLONES static void lstm_row_fwd(const dt_nn_rnn_step *s, float *a, const float *r,
                                    const float *c0, float *c1, float *h1)
{
    int u = s->u;
    for (int g = 0; g < 4; g++)
        for (int j = 0; j < u; j++)
            a[g * u + j] += r[g * u + j];
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float i[BLOCK], f[BLOCK], cc[BLOCK], o[BLOCK], t[BLOCK];
        act_vec(s->rec, a + j0, i, m);
        act_vec(s->rec, a + u + j0, f, m);
        act_vec(s->act, a + 2 * u + j0, cc, m);
        act_vec(s->rec, a + 3 * u + j0, o, m);
        for (int j = 0; j < m; j++)
            c1[j0 + j] = f[j] * c0[j0 + j] + i[j] * cc[j];
        act_vec(s->act, c1 + j0, t, m);
        for (int j = 0; j < m; j++)
            h1[j0 + j] = o[j] * t[j];
    }
}

/* One unmasked row of an LSTM step backward: a (pre-activations) becomes the gate gradients,
 * dc the cell gradient into the previous step, dh zero (the recurrent GEMM adds to it). */
VEC_CLONES static void lstm_row_bwd(const dt_nn_rnn_step *s, float *a, const float *c0,
                                    const float *c1, float *dc, float *dh, const float *dy)
{
    int u = s->u;
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float i[BLOCK], f[BLOCK], cc[BLOCK], o[BLOCK], t[BLOCK];
        float di[BLOCK], df[BLOCK], dcc[BLOCK], dO[BLOCK], dt[BLOCK];
        float *ai = a + j0, *af = a + u + j0, *ac = a + 2 * u + j0, *ao = a + 3 * u + j0;
        act_dact_vec(s->rec, ai, i, di, m);
        act_dact_vec(s->rec, af, f, df, m);
        act_dact_vec(s->act, ac, cc, dcc, m);
        act_dact_vec(s->rec, ao, o, dO, m);
        act_dact_vec(s->act, c1 + j0, t, dt, m);
        for (int j = 0; j < m; j++) {
            float dh1 = dh[j0 + j] + (dy ? dy[j0 + j] : 0.0f);
            float d = dc[j0 + j] + dh1 * o[j] * dt[j];
            ai[j] = d * cc[j] * di[j];
            af[j] = d * c0[j0 + j] * df[j];
            ac[j] = d * i[j] * dcc[j];
            ao[j] = dh1 * t[j] * dO[j];
            dc[j0 + j] = d * f[j];
            dh[j0 + j] = 0;
        }
    }
}

/* One unmasked row of a GRU step (reset_after) forward: a_z += r_z, a_r += r_r, q = r_h, h1. */
VEC_CLONES static void gru_row_fwd(const dt_nn_rnn_step *s, float *a, const float *r,
                                   const float *h0, float *h1, float *q)
{
    int u = s->u;
    for (int j = 0; j < 2 * u; j++)
        a[j] += r[j];
    for (int j = 0; j < u; j++)
        q[j] = r[2 * u + j];
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float z[BLOCK], rr[BLOCK], ah[BLOCK], hh[BLOCK];
        act_vec(s->rec, a + j0, z, m);
        act_vec(s->rec, a + u + j0, rr, m);
        for (int j = 0; j < m; j++)
            ah[j] = a[2 * u + j0 + j] + rr[j] * q[j0 + j];
        act_vec(s->act, ah, hh, m);
        for (int j = 0; j < m; j++)
            h1[j0 + j] = z[j] * h0[j0 + j] + (1 - z[j]) * hh[j];
    }
}

/* One unmasked row of a GRU step (reset_after) backward: the gate gradients into a and r. */
VEC_CLONES static void gru_row_bwd(const dt_nn_rnn_step *s, float *a, float *r, const float *h0,
                                   const float *q, float *dh, const float *dy)
{
    int u = s->u;
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float z[BLOCK], dz[BLOCK], rr[BLOCK], drr[BLOCK], ah[BLOCK], hh[BLOCK], dhh[BLOCK];
        act_dact_vec(s->rec, a + j0, z, dz, m);
        act_dact_vec(s->rec, a + u + j0, rr, drr, m);
        for (int j = 0; j < m; j++)
            ah[j] = a[2 * u + j0 + j] + rr[j] * q[j0 + j];
        act_dact_vec(s->act, ah, hh, dhh, m);
        for (int j = 0; j < m; j++) {
            int k = j0 + j;
            float dh1 = dh[k] + (dy ? dy[k] : 0.0f);
            float dah = dh1 * (1 - z[j]) * dhh[j];
            a[k] = r[k] = dh1 * (h0[k] - hh[j]) * dz[j];
            a[u + k] = r[u + k] = dah * q[k] * drr[j];
            a[2 * u + k] = dah;
            r[2 * u + k] = dah * rr[j];
            dh[k] = dh1 * z[j];
        }
    }
}

/* One unmasked row of a SimpleRNN step forward: a += r, h1 = act(a). */
VEC_CLONES static void simple_row_fwd(const dt_nn_rnn_step *s, float *a, const float *r, float *h1)
{
    int u = s->u;
    for (int j = 0; j < u; j++)
        a[j] += r[j];
    for (int j0 = 0; j0 < u; j0 += BLOCK)
        act_vec(s->act, a + j0, h1 + j0, u - j0 < BLOCK ? u - j0 : BLOCK);
}

/* One unmasked row of a SimpleRNN step backward: a becomes its gradient, dh zero. */
VEC_CLONES static void simple_row_bwd(const dt_nn_rnn_step *s, float *a, float *dh, const float *dy)
{
    int u = s->u;
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float y[BLOCK], d[BLOCK];
        act_dact_vec(s->act, a + j0, y, d, m);
        for (int j = 0; j < m; j++) {
            int k = j0 + j;
            float dh1 = dh[k] + (dy ? dy[k] : 0.0f);
            a[k] = dh1 * d[j];
            dh[k] = 0;
        }
    }
}

/* One unmasked row of a GRU step (reset_after false) forward. Phase 0: a_z += r_z,
 * a_r += r_r, q = rec(a_r) h0; phase 1: a_h += r_h, h1 = z h0 + (1 - z) act(a_h). */
VEC_CLONES static void gru2_row_fwd(const dt_nn_rnn_step *s, float *a, const float *r,
                                    const float *h0, float *h1, float *q)
{
    int u = s->u;
    if (s->phase == 0)
        for (int j = 0; j < 2 * u; j++)
            a[j] += r[j];
    else
        for (int j = 0; j < u; j++)
            a[2 * u + j] += r[2 * u + j];
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float x[BLOCK], hh[BLOCK];
        if (s->phase == 0) {
            act_vec(s->rec, a + u + j0, x, m);
            for (int j = 0; j < m; j++)
                q[j0 + j] = x[j] * h0[j0 + j];
            continue;
        }
        act_vec(s->rec, a + j0, x, m);
        act_vec(s->act, a + 2 * u + j0, hh, m);
        for (int j = 0; j < m; j++)
            h1[j0 + j] = x[j] * h0[j0 + j] + (1 - x[j]) * hh[j];
    }
}

/* One unmasked row of a GRU step (reset_after false) backward. Phase 1: the update gate and
 * the candidate's gradients into a, dh = dh1 z; phase 0 (given dq): the reset gate's, and
 * dh += dq rec(a_r). */
VEC_CLONES static void gru2_row_bwd(const dt_nn_rnn_step *s, float *a, const float *h0,
                                    const float *dq, float *dh, const float *dy)
{
    int u = s->u;
    for (int j0 = 0; j0 < u; j0 += BLOCK) {
        int m = u - j0 < BLOCK ? u - j0 : BLOCK;
        float z[BLOCK], dz[BLOCK], hh[BLOCK], dhh[BLOCK];
        if (s->phase == 0) {
            act_dact_vec(s->rec, a + u + j0, z, dz, m);
            for (int j = 0; j < m; j++) {
                int k = j0 + j;
                a[u + k] = dq[k] * h0[k] * dz[j];
                dh[k] += dq[k] * z[j];
            }
            continue;
        }
        act_dact_vec(s->rec, a + j0, z, dz, m);
        act_dact_vec(s->act, a + 2 * u + j0, hh, dhh, m);
        for (int j = 0; j < m; j++) {
            int k = j0 + j;
            float dh1 = dh[k] + (dy ? dy[k] : 0.0f);
            a[k] = dh1 * (h0[k] - hh[j]) * dz[j];
            a[2 * u + k] = dh1 * (1 - z[j]) * dhh[j];
            dh[k] = dh1 * z[j];
        }
    }
}

void dt__nn_cpu_rnn_fwd(const dt_nn_rnn_step *s)
{
    int u = s->u, gu = dt__nn_cell_gates(s->cell) * u;
    bool gru_split = s->cell == DT_NN_CELL_GRU && !s->reset_after;
    bool final = !gru_split || s->phase == 1; /* this call writes h1 */
    for (int b = 0; b < s->n; b++) {
        bool real = !s->mask || s->mask[(size_t)b * s->ldm] != 0;
        float *a = s->a + (size_t)b * s->lda;
        const float *r = s->r + (size_t)b * gu;
        const float *h0 = s->h0 + (size_t)b * u;
        float *h1 = s->h1 + (size_t)b * u;
        float *q = s->q ? s->q + (size_t)b * u : NULL;
        if (real && s->cell == DT_NN_CELL_LSTM)
            lstm_row_fwd(s, a, r, s->c0 + (size_t)b * u, s->c1 + (size_t)b * u, h1);
        else if (real && s->cell == DT_NN_CELL_GRU && s->reset_after)
            gru_row_fwd(s, a, r, h0, h1, q);
        else if (real && s->cell == DT_NN_CELL_GRU)
            gru2_row_fwd(s, a, r, h0, h1, q);
        else if (real)
            simple_row_fwd(s, a, r, h1);
        for (int j = 0; j < u && !real; j++) { /* a masked row keeps the state */
            if (final)
                h1[j] = h0[j];
            if (s->cell == DT_NN_CELL_LSTM)
                s->c1[(size_t)b * u + j] = s->c0[(size_t)b * u + j];
            if (q && !final)
                q[j] = 0;
        }
        if (s->y && final) {
            float *y = s->y + (size_t)b * s->ldy;
            for (int j = 0; j < u; j++)
                y[j] = (!real && s->zero_masked) ? 0.0f : h1[j];
        }
    }
}

void dt__nn_cpu_rnn_bwd(const dt_nn_rnn_step *s)
{
    int u = s->u, gu = dt__nn_cell_gates(s->cell) * u;
    bool gru_split = s->cell == DT_NN_CELL_GRU && !s->reset_after;
    for (int b = 0; b < s->n; b++) {
        bool real = !s->mask || s->mask[(size_t)b * s->ldm] != 0;
        float *a = s->a + (size_t)b * s->lda;
        float *r = s->r ? s->r + (size_t)b * gu : NULL;
        const float *h0 = s->h0 + (size_t)b * u;
        const float *q = s->q ? s->q + (size_t)b * u : NULL;
        float *dh = s->dh + (size_t)b * u;
        if (gru_split && s->phase == 0) { /* the reset gate, given dq = d(a_h) U_h^T */
            if (real)
                gru2_row_bwd(s, a, h0, s->dq + (size_t)b * u, dh, NULL);
            else
                memset(a + u, 0, (size_t)u * sizeof(float));
            continue;
        }
        const float *dy = (s->dy && (real || !s->zero_masked)) ? s->dy + (size_t)b * s->ldy : NULL;
        if (real && s->cell == DT_NN_CELL_LSTM)
            lstm_row_bwd(s, a, s->c0 + (size_t)b * u, s->c1 + (size_t)b * u, s->dc + (size_t)b * u,
                         dh, dy);
        else if (real && s->cell == DT_NN_CELL_GRU && s->reset_after)
            gru_row_bwd(s, a, r, h0, q, dh, dy);
        else if (real && s->cell == DT_NN_CELL_GRU) /* reset_after false, phase 1 */
            gru2_row_bwd(s, a, h0, NULL, dh, dy);
        else if (real)
            simple_row_bwd(s, a, dh, dy);
        for (int j = 0; j < u && !real; j++) { /* a masked row: no gate gradient, dh carried */
            for (int g = 0; g < gu / u; g++) {
                a[g * u + j] = 0;
                if (r)
                    r[g * u + j] = 0;
            }
            dh[j] += dy ? dy[j] : 0.0f;
        }
    }
}
