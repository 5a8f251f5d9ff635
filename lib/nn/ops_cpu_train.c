/* ops_cpu_train.c - CPU losses and regularizers (Keras 3 formulas); the optimizer updates are in
 * ops_cpu_optim.c. */
#include "nn/ops_cpu.h"

/* The loss and regularizer loops are streams: O3 lets GCC vectorize them (see ops_cpu.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <string.h>

/* Keras's backend.epsilon(): probabilities are clipped to [EPS, 1 - EPS] before a log. */
#define KERAS_EPS 1e-7

/* Categorical cross-entropy of one row, target t given densely (smoothed by ls) or as one label. */
static double ce_row(bool from_logits, const float *p, const float *t, int label, float ls,
                     int cols, float scale, float *d)
{
    double loss = 0;
    /* Keras smooths the one-hot target: t (1 - ls) + ls / cols. */
#define TGT(j) (t ? (double)t[j] * (1.0 - ls) + (double)ls / cols : (double)((j) == label))
    if (from_logits) {
        /* Fused softmax + cross-entropy: loss = sum_j t_j (lse - z_j), d = softmax * sum t - t. */
        double mx = p[0];
        for (int j = 1; j < cols; j++)
            mx = p[j] > mx ? p[j] : mx;
        double s = 0;
        for (int j = 0; j < cols; j++)
            s += exp(p[j] - mx);
        double lse = mx + log(s), tsum = 0;
        for (int j = 0; j < cols; j++) {
            double tj = TGT(j);
            tsum += tj;
            loss += tj * (lse - p[j]);
        }
        for (int j = 0; j < cols; j++)
            d[j] = (float)(scale * (exp(p[j] - lse) * tsum - TGT(j)));
        return loss;
    }
    /* Probabilities: Keras renormalises the row, clips and takes the log. */
    double s = 0, gq = 0;
    for (int j = 0; j < cols; j++)
        s += p[j];
    if (s <= 0)
        s = KERAS_EPS;
    for (int j = 0; j < cols; j++) {
        double tj = TGT(j);
        double q = p[j] / s,
               qc = q < KERAS_EPS ? KERAS_EPS : (q > 1 - KERAS_EPS ? 1 - KERAS_EPS : q);
        loss -= tj * log(qc);
        double g = (q > KERAS_EPS && q < 1 - KERAS_EPS) ? -tj / q : 0.0;
        d[j] = (float)g; /* dL/dq, turned into dL/dp below */
        gq += g * q;
    }
#undef TGT
    for (int j = 0; j < cols; j++)
        d[j] = (float)(scale * ((d[j] - gq) / s));
    return loss;
}

/* softplus(x) = log(1 + e^x) without overflow. */
static double softplus(double x)
{
    return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
}

/* The element-wise losses, averaged over the last axis as Keras's fn(...) does with
 * ops.mean(..., axis=-1): value of one element, *g its derivative by p. */
static double elem(const dt_nn_loss_p *lp, double p, double t, double *g)
{
    switch (lp->kind) {
    case DT_NN_LOSS_BCE: {
        t = t * (1.0 - lp->label_smoothing) + 0.5 * lp->label_smoothing;
        if (lp->from_logits) {
            *g = 1.0 / (1.0 + exp(-p)) - t;
            return (p > 0 ? p : 0) - p * t + log1p(exp(-fabs(p)));
        }
        double q = p < KERAS_EPS ? KERAS_EPS : (p > 1 - KERAS_EPS ? 1 - KERAS_EPS : p);
        *g = (p > KERAS_EPS && p < 1 - KERAS_EPS) ? (q - t) / (q * (1 - q)) : 0.0;
        return -(t * log(q) + (1 - t) * log(1 - q));
    }
    case DT_NN_LOSS_MSE:
        *g = 2.0 * (p - t);
        return (p - t) * (p - t);
    case DT_NN_LOSS_MAE:
        *g = p > t ? 1.0 : (p < t ? -1.0 : 0.0);
        return fabs(p - t);
    case DT_NN_LOSS_HUBER: {
        double e = p - t, a = fabs(e), dl = lp->delta;
        if (a <= dl) {
            *g = e;
            return 0.5 * e * e;
        }
        *g = e > 0 ? dl : -dl;
        return dl * a - 0.5 * dl * dl;
    }
    case DT_NN_LOSS_LOGCOSH: {
        /* Keras's x + softplus(-2x) - log 2: no overflow of cosh for large errors. */
        double e = p - t;
        *g = tanh(e);
        return e + softplus(-2.0 * e) - 0.69314718055994530942; /* log 2 */
    }
    case DT_NN_LOSS_HINGE:
    case DT_NN_LOSS_SQUARED_HINGE: {
        double y = lp->hinge_pm1 ? 2.0 * t - 1.0 : t, mg = 1.0 - y * p;
        if (mg < 0) {
            *g = 0;
            return 0;
        }
        /* At mg == 0 the gradient goes to the margin, as TF's maximum and torch's clamp do. */
        if (lp->kind == DT_NN_LOSS_HINGE) {
            *g = -y;
            return mg;
        }
        *g = -2.0 * y * mg;
        return mg * mg;
    }
    case DT_NN_LOSS_POISSON:
        *g = 1.0 - t / (p + KERAS_EPS);
        return p - t * log(p + KERAS_EPS);
    default:
        *g = 0;
        return 0;
    }
}

/* KL divergence of one row: sum t log(t / p), both clipped to [EPS, 1]; a sum over the last
 * axis, not a mean. The clip passes the gradient inside [EPS, 1], bounds included (TF's
 * clip_by_value). */
static double kld_row(const float *p, const float *t, int cols, float scale, float *d)
{
    double loss = 0;
    for (int j = 0; j < cols; j++) {
        double tj = t[j] < KERAS_EPS ? KERAS_EPS : (t[j] > 1 ? 1 : t[j]);
        double pj = p[j] < KERAS_EPS ? KERAS_EPS : (p[j] > 1 ? 1 : p[j]);
        loss += tj * log(tj / pj);
        d[j] = (float)(scale * ((p[j] >= KERAS_EPS && p[j] <= 1) ? -tj / pj : 0.0));
    }
    return loss;
}

/* Cosine similarity loss of one row: -sum t^ p^ with x^ = x rsqrt(max(sum x^2, EPS^2)), Keras
 * 3's normalize. Where |p| > EPS, d/dp = -(t^ - c p^) / |p| with c = t^ . p^; where the clamp
 * holds, p^ = p / EPS and d/dp = -t^ / EPS. */
static double cosine_row(const float *p, const float *t, int cols, float scale, float *d)
{
    double sp = 0, st = 0, dot = 0;
    for (int j = 0; j < cols; j++) {
        sp += (double)p[j] * p[j];
        st += (double)t[j] * t[j];
        dot += (double)p[j] * t[j];
    }
    double e2 = KERAS_EPS * KERAS_EPS;
    double ip = 1.0 / sqrt(sp > e2 ? sp : e2), it = 1.0 / sqrt(st > e2 ? st : e2);
    double c = dot * ip * it;
    for (int j = 0; j < cols; j++) {
        double g = -(double)t[j] * it * ip;
        if (sp > e2)
            g += c * p[j] * ip * ip;
        d[j] = (float)(scale * g);
    }
    return -c;
}

void dt__nn_cpu_loss(const dt_nn_loss_p *lp, const float *pred, const int32_t *labels,
                     const float *values, const float *row_w, size_t n, int cols, float scale,
                     float *dpred, double *loss_sum)
{
    double total = 0;
    dt_nn_loss_p stepped;
    if (lp->step) { /* this step's values from the step block (a graph's replay) */
        stepped = *lp;
        scale = lp->step[DT_NN_LOSS_STEP_SCALE];
        stepped.hinge_pm1 = lp->step[DT_NN_LOSS_STEP_PM1] != 0.0f;
        lp = &stepped;
    }
    const float scale0 = scale;
    for (size_t r = 0; r < n; r++) {
        const float *p = pred + r * (size_t)cols;
        const float *t = values ? values + r * (size_t)cols : NULL;
        float *d = dpred + r * (size_t)cols;
        double l = 0;
        scale = row_w ? scale0 * row_w[r] : scale0;
        switch (lp->kind) {
        case DT_NN_LOSS_SPARSE_CE:
            if (lp->has_ignore_class && labels[r] == lp->ignore_class) {
                memset(d, 0, (size_t)cols * sizeof(float));
                break;
            }
            l = ce_row(lp->from_logits, p, NULL, labels[r], 0.0f, cols, scale, d);
            break;
        case DT_NN_LOSS_CE:
            l = ce_row(lp->from_logits, p, t, -1, lp->label_smoothing, cols, scale, d);
            break;
        case DT_NN_LOSS_KLD:
            l = kld_row(p, t, cols, scale, d);
            break;
        case DT_NN_LOSS_COSINE:
            l = cosine_row(p, t, cols, scale, d);
            break;
        default: /* element-wise, then the mean over the last axis */
            for (int j = 0; j < cols; j++) {
                double g;
                l += elem(lp, p[j], t[j], &g);
                d[j] = (float)(scale * g / cols);
            }
            l /= cols;
            break;
        }
        total += row_w ? l * row_w[r] : l;
    }
    *loss_sum = total;
}

static double regularize(const float *w, float *g, size_t n, float l1, float l2, float scale)
{
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s1 += fabsf(w[i]);
        s2 += (double)w[i] * w[i];
        g[i] += scale * (l1 * (w[i] > 0 ? 1.0f : (w[i] < 0 ? -1.0f : 0.0f)) + 2.0f * l2 * w[i]);
    }
    return l1 * s1 + l2 * s2;
}

void dt__nn_cpu_regularize_dev(const float *w, float *g, size_t n, float l1, float l2, float scale,
                               double *out)
{
    *out = regularize(w, g, n, l1, l2, scale);
}

/* model.c's accuracy() did this on the host before the step block: same rows, same order. */
void dt__nn_cpu_hits(dt_nn_hits_kind kind, const float *pred, const int32_t *labels,
                     const float *targets, size_t n, int cols, double *out)
{
    double hits = 0;
    for (size_t i = 0; i < n; i++) {
        const float *r = pred + i * (size_t)cols;
        if (kind == DT_NN_HITS_BINARY) {
            int ok = 0;
            for (int j = 0; j < cols; j++) {
                float t = targets ? targets[i * (size_t)cols + j] : (float)labels[i];
                ok += (float)(r[j] > 0.5f) == t;
            }
            hits += (double)ok / cols;
            continue;
        }
        int am = 0;
        for (int j = 1; j < cols; j++)
            am = r[j] > r[am] ? j : am;
        if (kind == DT_NN_HITS_SPARSE) {
            hits += am == labels[i];
        } else {
            const float *t = targets + i * (size_t)cols;
            int tm = 0;
            for (int j = 1; j < cols; j++)
                tm = t[j] > t[tm] ? j : tm;
            hits += am == tm;
        }
    }
    *out = hits;
}
