/* ops_cpu_rnn.c - CPU kernels of the recurrent cells: the element-wise part of one timestep,
 * forward and backward (the layer runs the GEMMs around it). Contracts are those of
 * dt_nn_rnn_step in nn/ops.h. */
#include "nn/ops_cpu.h"

#include <math.h>

static float act(dt_nn_cell_act k, float x)
{
    switch (k) {
    case DT_NN_CACT_LINEAR:
        return x;
    case DT_NN_CACT_RELU:
        return x > 0 ? x : 0;
    case DT_NN_CACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case DT_NN_CACT_TANH:
        return tanhf(x);
    case DT_NN_CACT_HARD_SIGMOID2:
        return fminf(fmaxf(0.2f * x + 0.5f, 0.0f), 1.0f);
    case DT_NN_CACT_HARD_SIGMOID3:
        return fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
    }
    return x;
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

static int gates(dt_nn_cell c)
{
    return c == DT_NN_CELL_LSTM ? 4 : c == DT_NN_CELL_GRU ? 3 : 1;
}

void dt__nn_cpu_rnn_fwd(const dt_nn_rnn_step *s)
{
    int u = s->u, gu = gates(s->cell) * u;
    bool gru_split = s->cell == DT_NN_CELL_GRU && !s->reset_after;
    bool final = !gru_split || s->phase == 1; /* this call writes h1 */
    for (int b = 0; b < s->n; b++) {
        bool real = !s->mask || s->mask[(size_t)b * s->ldm] != 0;
        float *a = s->a + (size_t)b * s->lda;
        const float *r = s->r + (size_t)b * gu;
        const float *h0 = s->h0 + (size_t)b * u;
        float *h1 = s->h1 + (size_t)b * u;
        float *q = s->q ? s->q + (size_t)b * u : NULL;
        for (int j = 0; j < u; j++) {
            if (!real) {
                if (final)
                    h1[j] = h0[j];
                if (s->cell == DT_NN_CELL_LSTM)
                    s->c1[(size_t)b * u + j] = s->c0[(size_t)b * u + j];
                if (q && !final)
                    q[j] = 0;
                continue;
            }
            switch (s->cell) {
            case DT_NN_CELL_SIMPLE:
                a[j] += r[j];
                h1[j] = act(s->act, a[j]);
                break;
            case DT_NN_CELL_LSTM: {
                for (int g = 0; g < 4; g++)
                    a[g * u + j] += r[g * u + j];
                float i = act(s->rec, a[j]), f = act(s->rec, a[u + j]);
                float cc = act(s->act, a[2 * u + j]), o = act(s->rec, a[3 * u + j]);
                float c1 = f * s->c0[(size_t)b * u + j] + i * cc;
                s->c1[(size_t)b * u + j] = c1;
                h1[j] = o * act(s->act, c1);
                break;
            }
            case DT_NN_CELL_GRU:
                if (s->reset_after) {
                    a[j] += r[j];
                    a[u + j] += r[u + j];
                    q[j] = r[2 * u + j];
                    float z = act(s->rec, a[j]), rr = act(s->rec, a[u + j]);
                    float hh = act(s->act, a[2 * u + j] + rr * q[j]);
                    h1[j] = z * h0[j] + (1 - z) * hh;
                } else if (s->phase == 0) {
                    a[j] += r[j];
                    a[u + j] += r[u + j];
                    q[j] = act(s->rec, a[u + j]) * h0[j];
                } else {
                    a[2 * u + j] += r[2 * u + j];
                    float z = act(s->rec, a[j]), hh = act(s->act, a[2 * u + j]);
                    h1[j] = z * h0[j] + (1 - z) * hh;
                }
                break;
            }
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
    int u = s->u, gu = gates(s->cell) * u;
    bool gru_split = s->cell == DT_NN_CELL_GRU && !s->reset_after;
    for (int b = 0; b < s->n; b++) {
        bool real = !s->mask || s->mask[(size_t)b * s->ldm] != 0;
        float *a = s->a + (size_t)b * s->lda;
        float *r = s->r ? s->r + (size_t)b * gu : NULL;
        const float *h0 = s->h0 + (size_t)b * u;
        const float *q = s->q ? s->q + (size_t)b * u : NULL;
        float *dh = s->dh + (size_t)b * u;
        if (gru_split && s->phase == 0) { /* the reset gate, given dq = d(a_h) U_h^T */
            const float *dq = s->dq + (size_t)b * u;
            for (int j = 0; j < u; j++) {
                if (!real) {
                    a[u + j] = 0;
                    continue;
                }
                float rr = act(s->rec, a[u + j]);
                a[u + j] = dq[j] * h0[j] * dact(s->rec, a[u + j]);
                dh[j] += dq[j] * rr;
            }
            continue;
        }
        const float *dy = (s->dy && (real || !s->zero_masked)) ? s->dy + (size_t)b * s->ldy : NULL;
        for (int j = 0; j < u; j++) {
            float dh1 = dh[j] + (dy ? dy[j] : 0.0f);
            if (!real) {
                for (int g = 0; g < gu / u; g++) {
                    a[g * u + j] = 0;
                    if (r)
                        r[g * u + j] = 0;
                }
                dh[j] = dh1;
                continue;
            }
            switch (s->cell) {
            case DT_NN_CELL_SIMPLE:
                a[j] = dh1 * dact(s->act, a[j]);
                dh[j] = 0;
                break;
            case DT_NN_CELL_LSTM: {
                float ai = a[j], af = a[u + j], ac = a[2 * u + j], ao = a[3 * u + j];
                float i = act(s->rec, ai), f = act(s->rec, af);
                float cc = act(s->act, ac), o = act(s->rec, ao);
                float c1 = s->c1[(size_t)b * u + j], c0 = s->c0[(size_t)b * u + j];
                float dc = s->dc[(size_t)b * u + j] + dh1 * o * dact(s->act, c1);
                a[j] = dc * cc * dact(s->rec, ai);
                a[u + j] = dc * c0 * dact(s->rec, af);
                a[2 * u + j] = dc * i * dact(s->act, ac);
                a[3 * u + j] = dh1 * act(s->act, c1) * dact(s->rec, ao);
                s->dc[(size_t)b * u + j] = dc * f;
                dh[j] = 0;
                break;
            }
            case DT_NN_CELL_GRU: {
                float az = a[j], z = act(s->rec, az);
                if (s->reset_after) {
                    float ar = a[u + j], rr = act(s->rec, ar);
                    float ah = a[2 * u + j] + rr * q[j], hh = act(s->act, ah);
                    float dah = dh1 * (1 - z) * dact(s->act, ah);
                    a[j] = r[j] = dh1 * (h0[j] - hh) * dact(s->rec, az);
                    a[u + j] = r[u + j] = dah * q[j] * dact(s->rec, ar);
                    a[2 * u + j] = dah;
                    r[2 * u + j] = dah * rr;
                } else { /* phase 1: the update gate and the candidate */
                    float ah = a[2 * u + j], hh = act(s->act, ah);
                    a[j] = dh1 * (h0[j] - hh) * dact(s->rec, az);
                    a[2 * u + j] = dh1 * (1 - z) * dact(s->act, ah);
                }
                dh[j] = dh1 * z;
                break;
            }
            }
        }
    }
}
