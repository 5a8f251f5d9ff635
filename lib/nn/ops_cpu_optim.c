/* ops_cpu_optim.c - CPU optimizer updates: one pass over the flat buffers per iteration, with
 * Keras 3's formulas written in Keras's order of operations (keras/src/optimizers/<kind>.py). */
#include "nn/ops_cpu.h"

/* The updates are streams over every weight: O3 and restrict let GCC vectorize them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>

/* ops.clip(g, -v, v); NaN stays NaN as in Keras. */
static inline float clipv(float g, float v)
{
    return g < -v ? -v : (g > v ? v : g);
}

/* Steps 1 and 2 of dt_nn_update: decay w, and give the gradient to use. */
#define PREP(i)                                                                                    \
    float gi = g[i];                                                                               \
    if (decay != 1.0f)                                                                             \
        w[i] *= decay;                                                                             \
    if (cv > 0)                                                                                    \
    gi = clipv(gi, cv)

/* keras.optimizers.SGD: m = momentum m - lr g; w += nesterov ? momentum m - lr g : m. */
static void upd_sgd(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, mo = u->momentum;
    float *restrict m = u->slot[0];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        if (!m) {
            w[i] -= lr * gi;
            continue;
        }
        m[i] = mo * m[i] - lr * gi;
        w[i] += u->nesterov ? mo * m[i] - lr * gi : m[i];
    }
}

/* keras.optimizers.Adam: m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2); amsgrad: vh = max(vh, v)
 * stands for v; w -= alpha m / (sqrt(v) + eps). */
static void upd_adam(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, b1 = u->b1, b2 = u->b2, eps = u->eps;
    const float alpha = u->c[0];
    float *restrict m = u->slot[0], *restrict v = u->slot[1], *restrict vh = u->slot[2];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        m[i] += (gi - m[i]) * (1.0f - b1);
        v[i] += (gi * gi - v[i]) * (1.0f - b2);
        float den = v[i];
        if (vh) {
            vh[i] = vh[i] > v[i] ? vh[i] : v[i];
            den = vh[i];
        }
        w[i] -= m[i] * alpha / (sqrtf(den) + eps);
    }
}

/* keras.optimizers.RMSprop: vel = rho vel + (1 - rho) g^2; centered: avg = rho avg + (1-rho) g,
 * den = vel - avg^2 + eps, else den = vel + eps; inc = lr g / sqrt(den);
 * with momentum: mom = momentum mom + inc, w -= mom; else w -= inc. */
static void upd_rmsprop(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, rho = u->rho, eps = u->eps;
    const float mo = u->momentum;
    float *restrict vel = u->slot[0], *restrict mom = u->slot[1], *restrict avg = u->slot[2];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        vel[i] = rho * vel[i] + (1.0f - rho) * gi * gi;
        float den = vel[i] + eps;
        if (avg) {
            avg[i] = rho * avg[i] + (1.0f - rho) * gi;
            den = vel[i] - avg[i] * avg[i] + eps;
        }
        float inc = lr * gi / sqrtf(den);
        if (mom) {
            mom[i] = mo * mom[i] + inc;
            w[i] -= mom[i];
        } else {
            w[i] -= inc;
        }
    }
}

/* keras.optimizers.Adagrad: acc += g^2; w -= lr g / sqrt(acc + eps). */
static void upd_adagrad(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, eps = u->eps;
    float *restrict acc = u->slot[0];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        acc[i] += gi * gi;
        w[i] -= lr * gi / sqrtf(acc[i] + eps);
    }
}

/* keras.optimizers.Adadelta: ag = rho ag + (1 - rho) g^2;
 * d = -sqrt(ad + eps) g / sqrt(ag + eps); ad = rho ad + (1 - rho) d^2; w += lr d. */
static void upd_adadelta(const dt_nn_update *u, float *restrict w, const float *restrict g,
                         size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, rho = u->rho, eps = u->eps;
    float *restrict ag = u->slot[0], *restrict ad = u->slot[1];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        ag[i] = rho * ag[i] + (1.0f - rho) * (gi * gi);
        float d = -(sqrtf(ad[i] + eps) * gi / sqrtf(ag[i] + eps));
        ad[i] = rho * ad[i] + (1.0f - rho) * (d * d);
        w[i] += lr * d;
    }
}

/* keras.optimizers.Adamax: m += (g - m)(1 - b1); u = max(b2 u, |g|);
 * w -= lr m / ((1 - b1^t)(u + eps)). */
static void upd_adamax(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, b1 = u->b1, b2 = u->b2;
    const float eps = u->eps, bc = u->c[0];
    float *restrict m = u->slot[0], *restrict nu = u->slot[1];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        m[i] += (gi - m[i]) * (1.0f - b1);
        float a = b2 * nu[i], b = fabsf(gi);
        nu[i] = a > b ? a : b;
        w[i] -= lr * m[i] / (bc * (nu[i] + eps));
    }
}

/* keras.optimizers.Nadam: m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2);
 * m_hat = u_{t+1} m / (1 - prod_{t+1}) + (1 - u_t) g / (1 - prod_t); v_hat = v / (1 - b2^t);
 * w -= m_hat lr / (sqrt(v_hat) + eps). */
static void upd_nadam(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, b1 = u->b1, b2 = u->b2;
    const float eps = u->eps, ut1 = u->c[0], pt1 = u->c[1], ut = u->c[2], pt = u->c[3];
    const float b2p = u->c[4];
    float *restrict m = u->slot[0], *restrict v = u->slot[1];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        m[i] += (gi - m[i]) * (1.0f - b1);
        v[i] += (gi * gi - v[i]) * (1.0f - b2);
        float mh = ut1 * m[i] / pt1 + ut * gi / pt;
        float vh = v[i] / b2p;
        w[i] -= mh * lr / (sqrtf(vh) + eps);
    }
}

/* keras.optimizers.Ftrl (l2 holds l2_regularization_strength + beta / (2 lr)):
 * gs = g + 2 l2_shrinkage w; na = acc + g^2;
 * lin += gs - (na^-p - acc^-p) / lr w; quad = na^-p / lr + 2 l2;
 * w = (clip(lin, -l1, l1) - lin) / quad; acc = na. */
static void upd_ftrl(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, p = -u->lr_power;
    const float l1 = u->l1, l2 = u->l2, l2s = u->l2_shrinkage;
    float *restrict acc = u->slot[0], *restrict lin = u->slot[1];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        float gs = gi + 2 * l2s * w[i];
        float na = acc[i] + gi * gi;
        float pn = powf(na, p);
        lin[i] += gs - (pn - powf(acc[i], p)) / lr * w[i];
        float quad = pn / lr + 2 * l2;
        float lc = lin[i] < -l1 ? -l1 : (lin[i] > l1 ? l1 : lin[i]);
        w[i] = (lc - lin[i]) / quad;
        acc[i] = na;
    }
}

/* keras.optimizers.Lion: w -= lr sign(b1 m + (1 - b1) g); m = b2 m + (1 - b2) g. */
static void upd_lion(const dt_nn_update *u, float *restrict w, const float *restrict g, size_t n)
{
    const float decay = u->decay, cv = u->clipvalue, lr = u->lr, b1 = u->b1, b2 = u->b2;
    float *restrict m = u->slot[0];
    for (size_t i = 0; i < n; i++) {
        PREP(i);
        float c = m[i] * b1 + gi * (1.0f - b1);
        w[i] -= lr * (float)((c > 0) - (c < 0));
        m[i] = m[i] * b2 + gi * (1.0f - b2);
    }
}

void dt__nn_cpu_update(const dt_nn_update *u, float *w, const float *g, size_t n)
{
    dt_nn_update stepped;
    if (u->step) { /* this step's values from the step block (a graph's replay) */
        stepped = *u;
        DT_NN_UPD_UNPACK(stepped, u->step);
        u = &stepped;
    }
    switch (u->kind) {
    case DT_NN_UPD_SGD:
        upd_sgd(u, w, g, n);
        break;
    case DT_NN_UPD_ADAM:
        upd_adam(u, w, g, n);
        break;
    case DT_NN_UPD_RMSPROP:
        upd_rmsprop(u, w, g, n);
        break;
    case DT_NN_UPD_ADAGRAD:
        upd_adagrad(u, w, g, n);
        break;
    case DT_NN_UPD_ADADELTA:
        upd_adadelta(u, w, g, n);
        break;
    case DT_NN_UPD_ADAMAX:
        upd_adamax(u, w, g, n);
        break;
    case DT_NN_UPD_NADAM:
        upd_nadam(u, w, g, n);
        break;
    case DT_NN_UPD_FTRL:
        upd_ftrl(u, w, g, n);
        break;
    case DT_NN_UPD_LION:
        upd_lion(u, w, g, n);
        break;
    }
    /* The model's moving average (use_ema), after the update as Keras does. */
    float *restrict avg = u->ema;
    if (!avg)
        return;
    const float em = u->ema_momentum;
    for (size_t i = 0; i < n; i++) {
        avg[i] = em * avg[i] + (1.0f - em) * w[i];
        if (u->ema_overwrite)
            w[i] = avg[i];
    }
}

/* out[s] = the sum of squares of segment s of x, in double in index order */
static void sumsq(const float *x, size_t nseg, const size_t *off, const size_t *len, double *out)
{
    for (size_t s = 0; s < nseg; s++) {
        const float *p = x + off[s];
        double acc = 0;
        for (size_t i = 0; i < len[s]; i++)
            acc += (double)p[i] * p[i];
        out[s] = acc;
    }
}

/* optim.c's clip_by_norm before the step block, operation for operation (the CPU's bits). */
void dt__nn_cpu_clip_norm(float *g, size_t n, size_t nseg, const size_t *off, const size_t *len,
                          float clipnorm, float global_clipnorm, double *ss)
{
    if (!nseg)
        return;
    sumsq(g, nseg, off, len, ss);
    if (clipnorm > 0) {
        /* g clipnorm / max(|g|, clipnorm) */
        for (size_t s = 0; s < nseg; s++) {
            double norm = sqrt(ss[s]);
            if (!(norm <= clipnorm)) {
                float a = (float)(clipnorm / norm);
                float *p = g + off[s];
                for (size_t i = 0; i < len[s]; i++)
                    p[i] = a * p[i] + 0.0f * p[i];
            }
        }
        return;
    }
    /* g global_clipnorm min(1 / |all g|, 1 / global_clipnorm); NaN when the norm is not finite */
    double sum = 0;
    for (size_t s = 0; s < nseg; s++)
        sum += ss[s];
    double norm = sqrt(sum);
    if (!isfinite(norm)) {
        for (size_t i = 0; i < n; i++)
            g[i] = NAN;
    } else if (norm > global_clipnorm) {
        float a = (float)(global_clipnorm / norm);
        for (size_t i = 0; i < n; i++)
            g[i] = a * g[i] + 0.0f * g[i];
    }
}
