/* ops_cpu_preproc.c - CPU kernels of Normalization and CategoryEncoding. Contracts: nn/ops.h. */
#include "nn/ops_cpu.h"

#include <math.h>
#include <string.h>

/* Keras: max(sqrt(variance), backend.epsilon()). */
static float norm_scale(float var)
{
    float s = sqrtf(var);
    return s > 1e-7f ? s : 1e-7f;
}

void dt__nn_cpu_norm_fwd(const float *x, float *y, const float *mean, const float *var, size_t rows,
                         int cols, bool invert)
{
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            size_t i = r * (size_t)cols + c;
            float s = norm_scale(var[c]);
            y[i] = invert ? mean[c] + x[i] * s : (x[i] - mean[c]) / s;
        }
}

void dt__nn_cpu_norm_bwd(const float *dy, const float *var, float *dx, size_t rows, int cols,
                         bool invert, bool acc)
{
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            size_t i = r * (size_t)cols + c;
            float s = norm_scale(var[c]);
            float g = invert ? dy[i] * s : dy[i] / s;
            dx[i] = acc ? dx[i] + g : g;
        }
}

void dt__nn_cpu_cat_encode(const float *ids, int n, int t, int tokens, dt_nn_cat_mode mode,
                           float *y, float *bad)
{
    memset(y, 0, (size_t)n * (size_t)tokens * sizeof *y);
    bad[0] = bad[1] = bad[2] = 0;
    for (int s = 0; s < n; s++)
        for (int j = 0; j < t; j++) {
            size_t at = (size_t)s * t + j;
            float v = ids[at];
            /* as Keras casts: toward zero; NaN and out-of-range ids count nothing */
            if (!(v > -1.0f && v < (float)tokens)) {
                if (bad[0]++ == 0) {
                    bad[1] = v;
                    bad[2] = (float)at;
                }
                continue;
            }
            float *cell = y + (size_t)s * tokens + (int)v;
            *cell = mode == DT_NN_CAT_COUNT ? *cell + 1.0f : 1.0f;
        }
}
