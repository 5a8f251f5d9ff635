/*
 * cell_act.h - what the CPU and CUDA backends' recurrent cells share: a cell activation at a
 * point, and the gates of a cell. Header-only; C and CUDA (host and device).
 */
#ifndef DT_NN_CELL_ACT_H
#define DT_NN_CELL_ACT_H

#include "nn/ops.h"

#include <math.h>

#ifndef DT_NN_HD
#ifdef __CUDACC__
#define DT_NN_HD __host__ __device__
#else
#define DT_NN_HD
#endif
#endif

/* activation (or recurrent_activation) k at x, as Keras computes it. */
static inline DT_NN_HD float dt__nn_cell_act(dt_nn_cell_act k, float x)
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

/* Gates per unit: LSTM 4 (i, f, c, o), GRU 3 (z, r, h), SimpleRNN 1. */
static inline DT_NN_HD int dt__nn_cell_gates(dt_nn_cell c)
{
    return c == DT_NN_CELL_LSTM ? 4 : c == DT_NN_CELL_GRU ? 3 : 1;
}

#endif
