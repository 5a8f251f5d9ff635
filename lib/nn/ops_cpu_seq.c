/* ops_cpu_seq.c - CPU kernels of the sequence layers: Embedding's gather and scatter-add, the
 * masked mean over timesteps (GlobalAveragePooling1D) and layer normalization. Contracts are
 * those of nn/ops.h. */
#include "nn/ops_cpu.h"

#include <math.h>
#include <string.h>

/* The row an id names, as Keras's cast to int32 truncates it; -1 when it names none. The
 * comparison is made on the float, so NaN and ids past INT_MAX never reach a cast. */
static int id_row(float v, int rows)
{
    float t = truncf(v);
    return (t >= 0.0f && t < (float)rows) ? (int)t : -1;
}

void dt__nn_cpu_embed_fwd(const float *ids, size_t n, const float *table, int rows, int dim,
                          float *y, float *mask, float *bad)
{
    float count = 0, first = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        int r = id_row(ids[i], rows);
        if (r >= 0) {
            memcpy(y + i * (size_t)dim, table + (size_t)r * dim, sizeof(float) * (size_t)dim);
        } else {
            memset(y + i * (size_t)dim, 0, sizeof(float) * (size_t)dim);
            if (count == 0)
                first = ids[i], at = (float)i;
            count++;
        }
        if (mask)
            mask[i] = ids[i] != 0.0f ? 1.0f : 0.0f;
    }
    bad[0] = count;
    bad[1] = first;
    bad[2] = at;
}

void dt__nn_cpu_embed_bwd(const float *ids, size_t n, const float *dy, int rows, int dim,
                          float *dtable)
{
    memset(dtable, 0, sizeof(float) * (size_t)rows * (size_t)dim);
    for (size_t i = 0; i < n; i++) {
        int r = id_row(ids[i], rows);
        if (r < 0)
            continue;
        float *d = dtable + (size_t)r * dim;
        const float *g = dy + i * (size_t)dim;
        for (int j = 0; j < dim; j++)
            d[j] += g[j];
    }
}

/* The weight of each step of sample s: 1 / (its real steps), 0 on masked ones. */
static float step_weight(const float *mask, int s, int t, int i, float inv)
{
    return mask ? mask[(size_t)s * t + i] * inv : inv;
}

static float mean_inv(const float *mask, int s, int t)
{
    if (!mask)
        return 1.0f / (float)t;
    double k = 0;
    for (int i = 0; i < t; i++)
        k += mask[(size_t)s * t + i];
    return k > 0 ? (float)(1.0 / k) : 0.0f;
}

void dt__nn_cpu_seq_mean(int n, int t, int c, const float *x, const float *mask, float *y)
{
    for (int s = 0; s < n; s++) {
        float inv = mean_inv(mask, s, t);
        float *yr = y + (size_t)s * c;
        memset(yr, 0, sizeof(float) * (size_t)c);
        for (int i = 0; i < t; i++) {
            float w = step_weight(mask, s, t, i, 1.0f);
            if (w == 0.0f)
                continue;
            const float *xr = x + ((size_t)s * t + i) * c;
            for (int j = 0; j < c; j++)
                yr[j] += xr[j];
        }
        for (int j = 0; j < c; j++)
            yr[j] *= inv;
    }
}

void dt__nn_cpu_seq_mean_bwd(int n, int t, int c, const float *dy, const float *mask, float *dx,
                             bool acc)
{
    for (int s = 0; s < n; s++) {
        float inv = mean_inv(mask, s, t);
        const float *g = dy + (size_t)s * c;
        for (int i = 0; i < t; i++) {
            float w = step_weight(mask, s, t, i, inv);
            float *d = dx + ((size_t)s * t + i) * c;
            for (int j = 0; j < c; j++)
                d[j] = (acc ? d[j] : 0.0f) + w * g[j];
        }
    }
}

void dt__nn_cpu_ln_fwd(const float *x, float *y, float *xhat, float *rstd, size_t rows, int cols,
                       const float *gamma, const float *beta, float eps)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double sum = 0, sq = 0;
        for (int j = 0; j < cols; j++)
            sum += xr[j];
        double mean = sum / cols;
        for (int j = 0; j < cols; j++)
            sq += (xr[j] - mean) * (xr[j] - mean);
        float rs = (float)(1.0 / sqrt(sq / cols + eps));
        rstd[r] = rs;
        float *hr = xhat + r * cols, *yr = y + r * cols;
        for (int j = 0; j < cols; j++) {
            hr[j] = (float)((xr[j] - mean) * rs);
            yr[j] = hr[j] * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
        }
    }
}

/* dgamma and dbeta: column sums in double over the rows in order (deterministic), a block of
 * columns at a time so the sums stay on the stack. */
#define LN_BLOCK 256

static void ln_param_grads(const float *dy, const float *xhat, size_t rows, int cols, float *dgamma,
                           float *dbeta)
{
    for (int j0 = 0; j0 < cols; j0 += LN_BLOCK) {
        int nb = cols - j0 < LN_BLOCK ? cols - j0 : LN_BLOCK;
        double sg[LN_BLOCK] = {0}, sb[LN_BLOCK] = {0};
        for (size_t r = 0; r < rows; r++) {
            const float *g = dy + r * cols + j0, *h = xhat + r * cols + j0;
            for (int j = 0; j < nb; j++) {
                sg[j] += (double)g[j] * h[j];
                sb[j] += g[j];
            }
        }
        for (int j = 0; j < nb; j++) {
            if (dgamma)
                dgamma[j0 + j] = (float)sg[j];
            if (dbeta)
                dbeta[j0 + j] = (float)sb[j];
        }
    }
}

void dt__nn_cpu_ln_bwd(const float *dy, const float *xhat, const float *rstd, size_t rows, int cols,
                       const float *gamma, float *dx, bool acc, float *dgamma, float *dbeta)
{
    if (dgamma || dbeta)
        ln_param_grads(dy, xhat, rows, cols, dgamma, dbeta);
    if (!dx)
        return;
    /* dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma */
    for (size_t r = 0; r < rows; r++) {
        const float *g = dy + r * cols, *h = xhat + r * cols;
        double a = 0, b = 0;
        for (int j = 0; j < cols; j++) {
            double d = (double)g[j] * (gamma ? gamma[j] : 1.0f);
            a += d;
            b += d * h[j];
        }
        a /= cols;
        b /= cols;
        float *d = dx + r * cols;
        for (int j = 0; j < cols; j++) {
            double v = rstd[r] * ((double)g[j] * (gamma ? gamma[j] : 1.0f) - a - (double)h[j] * b);
            d[j] = (float)(acc ? d[j] + v : v);
        }
    }
}
