/*
 * train.cu - the loss, regularization, accuracy, update and clipping kernels: the contracts are
 * ops.h's, the reference the CPU kernels of ops_cpu_train.c and ops_cpu_optim.c (Keras 3's
 * formulas).
 *
 * The step's numbers (the loss sum, the regularisation, the hits, the clipping norms) stay in
 * device memory for model.c's step block and reduce in a fixed order (per-row or per-block
 * partials, then one block's tree). No atomics: two runs give the same bits.
 *
 * update rounds every float operation on its own (__fmul_rn, ...) in the CPU's order: gcc
 * -std=c11 does not contract a * b + c and nvcc would, so the GPU's weights and slots equal the
 * CPU's bit for bit except where powf differs (Ftrl).
 */
#include "nn/cuda/internal.cuh"

#include <math.h>

/* Keras's backend.epsilon(), as ops_cpu_train.c's KERAS_EPS */
#define KERAS_EPS 1e-7

/* --- helpers ---------------------------------------------------------------------------------- */
static __device__ __forceinline__ float rsqrt_(float a)
{
    return __fsqrt_rn(a);
}

/* dt_cu_block_sum's result handed to every thread of the block (it promises thread 0). */
static __device__ double block_sum_all(double v, double *sh)
{
    double r = dt_cu_block_sum(v, sh);
    if (threadIdx.x == 0)
        sh[0] = r;
    __syncthreads();
    r = sh[0];
    __syncthreads();
    return r;
}

/* The block's maximum by the CPU's rule m = v > m ? v : m (a NaN never replaces a number and a
 * NaN start stays), in a fixed tree, handed to every thread. blockDim.x a power of two. */
static __device__ double block_max_all(double v, double *sh)
{
    unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] = sh[t + s] > sh[t] ? sh[t + s] : sh[t];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* Threads of a row kernel (one block a row): a power of two in [32, 256] covering cols. */
#define ROW_MAX_T 256
static unsigned row_threads(int cols)
{
    unsigned t = 32;
    while (t < ROW_MAX_T && t < (unsigned)cols)
        t *= 2;
    return t;
}

static unsigned row_grid(size_t rows)
{
    return rows < 65535u * 8u ? (unsigned)rows : 65535u * 8u;
}

/* out[0] = the sum of v[0 .. n) in a fixed order (one block of DT_CU_THREADS). */
static __global__ void sum_k(const double *v, size_t n, double *out)
{
    __shared__ double sh[DT_CU_THREADS];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s += v[i];
    s = dt_cu_block_sum(s, sh);
    if (threadIdx.x == 0)
        out[0] = s;
}

/* --- losses ----------------------------------------------------------------------------------- */

/* One row's categorical cross-entropy over the block, as ce_row: target t (smoothed by ls) or
 * one label; writes d, returns the row's loss (to every thread). */
static __device__ double ce_row(bool from_logits, const float *p, const float *t, int label,
                                float ls, int cols, float scale, float *d, double *sh)
{
#define TGT(j) (t ? (double)t[j] * (1.0 - ls) + (double)ls / cols : (double)((j) == label))
    const int j0 = threadIdx.x, dj = blockDim.x;
    if (from_logits) {
        double mx = p[0];
        for (int j = j0; j < cols; j += dj)
            mx = p[j] > mx ? p[j] : mx;
        mx = block_max_all(mx, sh);
        double s = 0;
        for (int j = j0; j < cols; j += dj)
            s += exp(p[j] - mx);
        double lse = mx + log(block_sum_all(s, sh));
        double tsum = 0, loss = 0;
        for (int j = j0; j < cols; j += dj) {
            double tj = TGT(j);
            tsum += tj;
            loss += tj * (lse - p[j]);
        }
        tsum = block_sum_all(tsum, sh);
        loss = block_sum_all(loss, sh);
        for (int j = j0; j < cols; j += dj)
            d[j] = (float)(scale * (exp(p[j] - lse) * tsum - TGT(j)));
        return loss;
    }
    /* probabilities: the row renormalised, clipped, logged */
    double s = 0;
    for (int j = j0; j < cols; j += dj)
        s += p[j];
    s = block_sum_all(s, sh);
    if (s <= 0)
        s = KERAS_EPS;
    double loss = 0, gq = 0;
    for (int j = j0; j < cols; j += dj) {
        double tj = TGT(j);
        double q = p[j] / s,
               qc = q < KERAS_EPS ? KERAS_EPS : (q > 1 - KERAS_EPS ? 1 - KERAS_EPS : q);
        loss -= tj * log(qc);
        double g = (q > KERAS_EPS && q < 1 - KERAS_EPS) ? -tj / q : 0.0;
        gq += g * q;
    }
    loss = block_sum_all(loss, sh);
    gq = block_sum_all(gq, sh);
    for (int j = j0; j < cols; j += dj) {
        /* the CPU keeps dL/dq in d (a float) before turning it into dL/dp: the same rounding */
        double q = p[j] / s;
        float g = (float)((q > KERAS_EPS && q < 1 - KERAS_EPS) ? -TGT(j) / q : 0.0);
        d[j] = (float)(scale * ((g - gq) / s));
    }
#undef TGT
    return loss;
}

static __device__ double softplus(double x)
{
    return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
}

/* The element-wise losses, as ops_cpu_train.c's elem: value of one element, *g its derivative. */
static __device__ double elem(const dt_nn_loss_p &lp, double p, double t, double *g)
{
    switch (lp.kind) {
    case DT_NN_LOSS_BCE: {
        t = t * (1.0 - lp.label_smoothing) + 0.5 * lp.label_smoothing;
        if (lp.from_logits) {
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
        double e = p - t, a = fabs(e), dl = lp.delta;
        if (a <= dl) {
            *g = e;
            return 0.5 * e * e;
        }
        *g = e > 0 ? dl : -dl;
        return dl * a - 0.5 * dl * dl;
    }
    case DT_NN_LOSS_LOGCOSH: {
        double e = p - t;
        *g = tanh(e);
        return e + softplus(-2.0 * e) - 0.69314718055994530942; /* log 2 */
    }
    case DT_NN_LOSS_HINGE:
    case DT_NN_LOSS_SQUARED_HINGE: {
        double y = lp.hinge_pm1 ? 2.0 * t - 1.0 : t, mg = __dsub_rn(1.0, __dmul_rn(y, p));
        if (mg < 0) {
            *g = 0;
            return 0;
        }
        /* at mg == 0 the gradient goes to the margin, as the CPU's */
        if (lp.kind == DT_NN_LOSS_HINGE) {
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

/* KL divergence of one row (a sum over the row), as kld_row */
static __device__ double kld_row(const float *p, const float *t, int cols, float scale, float *d,
                                 double *sh)
{
    double loss = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        double tj = t[j] < KERAS_EPS ? KERAS_EPS : (t[j] > 1 ? 1 : t[j]);
        double pj = p[j] < KERAS_EPS ? KERAS_EPS : (p[j] > 1 ? 1 : p[j]);
        loss += tj * log(tj / pj);
        d[j] = (float)(scale * ((p[j] >= KERAS_EPS && p[j] <= 1) ? -tj / pj : 0.0));
    }
    return block_sum_all(loss, sh);
}

/* Cosine similarity loss of one row, as cosine_row */
static __device__ double cosine_row(const float *p, const float *t, int cols, float scale, float *d,
                                    double *sh)
{
    double sp = 0, st = 0, dot = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        sp += (double)p[j] * p[j];
        st += (double)t[j] * t[j];
        dot += (double)p[j] * t[j];
    }
    sp = block_sum_all(sp, sh);
    st = block_sum_all(st, sh);
    dot = block_sum_all(dot, sh);
    double e2 = KERAS_EPS * KERAS_EPS;
    double ip = 1.0 / sqrt(sp > e2 ? sp : e2), it = 1.0 / sqrt(st > e2 ? st : e2);
    double c = dot * ip * it;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        double g = -(double)t[j] * it * ip;
        if (sp > e2)
            g += c * p[j] * ip * ip;
        d[j] = (float)(scale * g);
    }
    return -c;
}

/* One block a row: dpred's row and rl[r] = the row's loss times its weight. Every branch is
 * uniform in the block (kind, the row's label), so the block reductions inside are safe. */
static __global__ void loss_k(dt_nn_loss_p lp, const float *pred, const int32_t *labels,
                              const float *values, const float *row_w, size_t n, int cols,
                              float scale0, float *dpred, double *rl)
{
    __shared__ double sh[ROW_MAX_T];
    if (lp.step) { /* this step's values from the step block (a graph's replay) */
        scale0 = lp.step[DT_NN_LOSS_STEP_SCALE];
        lp.hinge_pm1 = lp.step[DT_NN_LOSS_STEP_PM1] != 0.0f;
    }
    for (size_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *p = pred + r * (size_t)cols;
        const float *t = values ? values + r * (size_t)cols : NULL;
        float *d = dpred + r * (size_t)cols;
        float scale = row_w ? rmul(scale0, row_w[r]) : scale0;
        double l = 0;
        switch (lp.kind) {
        case DT_NN_LOSS_SPARSE_CE:
            if (lp.has_ignore_class && labels[r] == lp.ignore_class) {
                for (int j = threadIdx.x; j < cols; j += blockDim.x)
                    d[j] = 0.0f;
                break;
            }
            l = ce_row(lp.from_logits, p, NULL, labels[r], 0.0f, cols, scale, d, sh);
            break;
        case DT_NN_LOSS_CE:
            l = ce_row(lp.from_logits, p, t, -1, lp.label_smoothing, cols, scale, d, sh);
            break;
        case DT_NN_LOSS_KLD:
            l = kld_row(p, t, cols, scale, d, sh);
            break;
        case DT_NN_LOSS_COSINE:
            l = cosine_row(p, t, cols, scale, d, sh);
            break;
        default: /* element-wise, then the mean over the last axis */
            for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                double g;
                l += elem(lp, p[j], t[j], &g);
                d[j] = (float)(scale * g / cols);
            }
            l = block_sum_all(l, sh) / cols;
            break;
        }
        if (threadIdx.x == 0)
            rl[r] = row_w ? l * row_w[r] : l;
    }
}

/* Queues the per-row losses (scratch) and their sum into out (device memory; nothing when the
 * scratch could not be had, the error kept for sync). */
static void loss_queue(const dt_nn_loss_p *p, const float *pred, const int32_t *labels,
                       const float *values, const float *row_w, size_t n, int cols, float scale,
                       float *dpred, double *out)
{
    double *rl = (double *)dt_cu_scratch(n * sizeof(double));
    if (!rl)
        return;
    cudaStream_t st = dt_cu_stream();
    loss_k<<<row_grid(n), row_threads(cols), 0, st>>>(*p, pred, labels, values, row_w, n, cols,
                                                      scale, dpred, rl);
    DT_CU_LAUNCH(loss_k);
    sum_k<<<1, DT_CU_THREADS, 0, st>>>(rl, n, out);
    DT_CU_LAUNCH(sum_k);
}

/* The step block's loss: nothing crosses to the host. */
static void cu_loss_dev(const dt_nn_loss_p *p, const float *pred, const int32_t *labels,
                        const float *values, const float *row_w, size_t n, int cols, float scale,
                        float *dpred, double *loss_sum)
{
    if (n == 0 || cols <= 0) {
        DT_CU(cudaMemsetAsync(loss_sum, 0, sizeof(double), dt_cu_stream())); /* 0.0 */
        return;
    }
    loss_queue(p, pred, labels, values, row_w, n, cols, scale, dpred, loss_sum);
}

/* --- accuracy hits ---------------------------------------------------------------------------- */

/* rh[i] = row i's hits, as ops_cpu_train.c's dt__nn_cpu_hits (a thread a row: its argmax scans
 * the columns in order, so ties and NaNs go the CPU's way). */
static __global__ void hits_row_k(dt_nn_hits_kind kind, const float *pred, const int32_t *labels,
                                  const float *targets, size_t n, int cols, double *rh)
{
    DT_CU_FOR(i, n)
    {
        const float *r = pred + i * (size_t)cols;
        if (kind == DT_NN_HITS_BINARY) {
            int ok = 0;
            for (int j = 0; j < cols; j++) {
                float t = targets ? targets[i * (size_t)cols + j] : (float)labels[i];
                ok += (float)(r[j] > 0.5f) == t;
            }
            rh[i] = __ddiv_rn((double)ok, (double)cols);
            continue;
        }
        int am = 0;
        for (int j = 1; j < cols; j++)
            am = r[j] > r[am] ? j : am;
        if (kind == DT_NN_HITS_SPARSE) {
            rh[i] = am == labels[i] ? 1.0 : 0.0;
        } else {
            const float *t = targets + i * (size_t)cols;
            int tm = 0;
            for (int j = 1; j < cols; j++)
                tm = t[j] > t[tm] ? j : tm;
            rh[i] = am == tm ? 1.0 : 0.0;
        }
    }
}

/* out[0] = the rows' hits added in row order by one thread: the CPU's sum, bit for bit */
static __global__ void seq_sum_k(const double *v, size_t n, double *out)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s = __dadd_rn(s, v[i]);
    out[0] = s;
}

static void cu_hits(dt_nn_hits_kind kind, const float *pred, const int32_t *labels,
                    const float *targets, size_t n, int cols, double *out)
{
    cudaStream_t st = dt_cu_stream();
    if (n == 0 || cols <= 0) {
        DT_CU(cudaMemsetAsync(out, 0, sizeof(double), st));
        return;
    }
    double *rh = (double *)dt_cu_scratch(n * sizeof(double));
    if (!rh)
        return;
    hits_row_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, st>>>(kind, pred, labels, targets, n, cols, rh);
    DT_CU_LAUNCH(hits_row_k);
    seq_sum_k<<<1, 1, 0, st>>>(rh, n, out);
    DT_CU_LAUNCH(seq_sum_k);
}

/* --- regularization --------------------------------------------------------------------------- */

/* At most this many blocks: their partial sums are added by one block. */
#define REG_BLOCKS 1024

/* g += scale (l1 sign(w) + 2 l2 w); ps[b], pt[b] = the block's sum |w| and sum w^2 (double) */
static __global__ void reg_k(const float *w, float *g, size_t n, float l1, float l2, float scale,
                             double *ps, double *pt)
{
    __shared__ double sh[DT_CU_THREADS];
    double s1 = 0, s2 = 0;
    const float l2x2 = rmul(2.0f, l2);
    DT_CU_FOR(i, n)
    {
        float v = w[i];
        s1 += fabsf(v);
        s2 += (double)v * v;
        float sg = v > 0 ? 1.0f : (v < 0 ? -1.0f : 0.0f);
        g[i] = radd(g[i], rmul(scale, radd(rmul(l1, sg), rmul(l2x2, v))));
    }
    s1 = dt_cu_block_sum(s1, sh);
    s2 = dt_cu_block_sum(s2, sh);
    if (threadIdx.x == 0) {
        ps[blockIdx.x] = s1;
        pt[blockIdx.x] = s2;
    }
}

/* out = l1 sum ps + l2 sum pt (one block) */
static __global__ void reg_fin_k(const double *ps, const double *pt, unsigned nb, float l1,
                                 float l2, double *out)
{
    __shared__ double sh[DT_CU_THREADS];
    double s1 = 0, s2 = 0;
    for (unsigned b = threadIdx.x; b < nb; b += blockDim.x) {
        s1 += ps[b];
        s2 += pt[b];
    }
    s1 = dt_cu_block_sum(s1, sh);
    s2 = dt_cu_block_sum(s2, sh);
    if (threadIdx.x == 0)
        out[0] = __dadd_rn(__dmul_rn(l1, s1), __dmul_rn(l2, s2));
}

/* Queues the regularisation into out (device memory). */
static void reg_queue(const float *w, float *g, size_t n, float l1, float l2, float scale,
                      double *out)
{
    /* the grid depends on n only: the same partials, the same bits, every run */
    unsigned nb = dt_cu_blocks(n);
    if (nb > REG_BLOCKS)
        nb = REG_BLOCKS;
    double *ps = (double *)dt_cu_scratch(2 * (size_t)nb * sizeof(double));
    if (!ps)
        return;
    double *pt = ps + nb;
    cudaStream_t st = dt_cu_stream();
    reg_k<<<nb, DT_CU_THREADS, 0, st>>>(w, g, n, l1, l2, scale, ps, pt);
    DT_CU_LAUNCH(reg_k);
    reg_fin_k<<<1, DT_CU_THREADS, 0, st>>>(ps, pt, nb, l1, l2, out);
    DT_CU_LAUNCH(reg_fin_k);
}

static void cu_regularize_dev(const float *w, float *g, size_t n, float l1, float l2, float scale,
                              double *out)
{
    if (n == 0) {
        DT_CU(cudaMemsetAsync(out, 0, sizeof(double), dt_cu_stream())); /* l1 0 + l2 0 */
        return;
    }
    reg_queue(w, g, n, l1, l2, scale, out);
}

/* --- optimizer updates ------------------------------------------------------------------------ */

/* ops.clip(g, -v, v); NaN stays NaN */
static __device__ __forceinline__ float clipv(float g, float v)
{
    return g < -v ? -v : (g > v ? v : g);
}

/* Each kind as ops_cpu_optim.c's upd_<kind> for element i: w is the decayed weight (updated in
 * place), g the clipped gradient; every operation in the CPU's order. */
static __device__ __forceinline__ void upd_sgd(const dt_nn_update &u, size_t i, float &w, float g)
{
    float *m = u.slot[0];
    if (!m) {
        w = rsub(w, rmul(u.lr, g));
        return;
    }
    float mi = rsub(rmul(u.momentum, m[i]), rmul(u.lr, g));
    m[i] = mi;
    w = radd(w, u.nesterov ? rsub(rmul(u.momentum, mi), rmul(u.lr, g)) : mi);
}

static __device__ __forceinline__ void upd_adam(const dt_nn_update &u, size_t i, float &w, float g)
{
    float *m = u.slot[0], *v = u.slot[1], *vh = u.slot[2];
    float mi = radd(m[i], rmul(rsub(g, m[i]), 1.0f - u.b1));
    float vi = radd(v[i], rmul(rsub(rmul(g, g), v[i]), 1.0f - u.b2));
    m[i] = mi;
    v[i] = vi;
    float den = vi;
    if (vh) {
        float h = vh[i] > vi ? vh[i] : vi;
        vh[i] = h;
        den = h;
    }
    w = rsub(w, rdiv(rmul(mi, u.c[0]), radd(rsqrt_(den), u.eps)));
}

static __device__ __forceinline__ void upd_rmsprop(const dt_nn_update &u, size_t i, float &w,
                                                   float g)
{
    float *vel = u.slot[0], *mom = u.slot[1], *avg = u.slot[2];
    const float rho = u.rho, r1 = 1.0f - u.rho;
    float ve = radd(rmul(rho, vel[i]), rmul(rmul(r1, g), g));
    vel[i] = ve;
    float den = radd(ve, u.eps);
    if (avg) {
        float a = radd(rmul(rho, avg[i]), rmul(r1, g));
        avg[i] = a;
        den = radd(rsub(ve, rmul(a, a)), u.eps);
    }
    float inc = rdiv(rmul(u.lr, g), rsqrt_(den));
    if (mom) {
        float mo = radd(rmul(u.momentum, mom[i]), inc);
        mom[i] = mo;
        w = rsub(w, mo);
    } else {
        w = rsub(w, inc);
    }
}

static __device__ __forceinline__ void upd_adagrad(const dt_nn_update &u, size_t i, float &w,
                                                   float g)
{
    float *acc = u.slot[0];
    float a = radd(acc[i], rmul(g, g));
    acc[i] = a;
    w = rsub(w, rdiv(rmul(u.lr, g), rsqrt_(radd(a, u.eps))));
}

static __device__ __forceinline__ void upd_adadelta(const dt_nn_update &u, size_t i, float &w,
                                                    float g)
{
    float *ag = u.slot[0], *ad = u.slot[1];
    const float rho = u.rho, r1 = 1.0f - u.rho, eps = u.eps;
    float a = radd(rmul(rho, ag[i]), rmul(r1, rmul(g, g)));
    ag[i] = a;
    float d = -rdiv(rmul(rsqrt_(radd(ad[i], eps)), g), rsqrt_(radd(a, eps)));
    ad[i] = radd(rmul(rho, ad[i]), rmul(r1, rmul(d, d)));
    w = radd(w, rmul(u.lr, d));
}

static __device__ __forceinline__ void upd_adamax(const dt_nn_update &u, size_t i, float &w,
                                                  float g)
{
    float *m = u.slot[0], *nu = u.slot[1];
    float mi = radd(m[i], rmul(rsub(g, m[i]), 1.0f - u.b1));
    m[i] = mi;
    float a = rmul(u.b2, nu[i]), b = fabsf(g);
    float ni = a > b ? a : b;
    nu[i] = ni;
    w = rsub(w, rdiv(rmul(u.lr, mi), rmul(u.c[0], radd(ni, u.eps))));
}

static __device__ __forceinline__ void upd_nadam(const dt_nn_update &u, size_t i, float &w, float g)
{
    float *m = u.slot[0], *v = u.slot[1];
    float mi = radd(m[i], rmul(rsub(g, m[i]), 1.0f - u.b1));
    float vi = radd(v[i], rmul(rsub(rmul(g, g), v[i]), 1.0f - u.b2));
    m[i] = mi;
    v[i] = vi;
    float mh = radd(rdiv(rmul(u.c[0], mi), u.c[1]), rdiv(rmul(u.c[2], g), u.c[3]));
    float vh = rdiv(vi, u.c[4]);
    w = rsub(w, rdiv(rmul(mh, u.lr), radd(rsqrt_(vh), u.eps)));
}

static __device__ __forceinline__ void upd_ftrl(const dt_nn_update &u, size_t i, float &w, float g)
{
    float *acc = u.slot[0], *lin = u.slot[1];
    const float p = -u.lr_power, lr = u.lr, l1 = u.l1;
    float gs = radd(g, rmul(rmul(2.0f, u.l2_shrinkage), w));
    float na = radd(acc[i], rmul(g, g));
    float pn = powf(na, p);
    float li = radd(lin[i], rsub(gs, rmul(rdiv(rsub(pn, powf(acc[i], p)), lr), w)));
    lin[i] = li;
    float quad = radd(rdiv(pn, lr), rmul(2.0f, u.l2));
    float lc = li < -l1 ? -l1 : (li > l1 ? l1 : li);
    w = rdiv(rsub(lc, li), quad);
    acc[i] = na;
}

static __device__ __forceinline__ void upd_lion(const dt_nn_update &u, size_t i, float &w, float g)
{
    float *m = u.slot[0];
    float c = radd(rmul(m[i], u.b1), rmul(g, 1.0f - u.b1));
    w = rsub(w, rmul(u.lr, (float)((c > 0) - (c < 0))));
    m[i] = radd(rmul(m[i], u.b2), rmul(g, 1.0f - u.b2));
}

/* One optimizer iteration over the flat buffer; u by value (its slot pointers are device
 * memory). The switch is uniform over the grid. */
static __global__ void update_k(dt_nn_update u, float *w, const float *g, size_t n)
{
    if (u.step) /* this step's values from the step block (a graph's replay) */
        DT_NN_UPD_UNPACK(u, u.step);
    DT_CU_FOR(i, n)
    {
        float wi = w[i], gi = g[i];
        if (u.decay != 1.0f)
            wi = rmul(wi, u.decay);
        if (u.clipvalue > 0)
            gi = clipv(gi, u.clipvalue);
        switch (u.kind) {
        case DT_NN_UPD_SGD:
            upd_sgd(u, i, wi, gi);
            break;
        case DT_NN_UPD_ADAM:
            upd_adam(u, i, wi, gi);
            break;
        case DT_NN_UPD_RMSPROP:
            upd_rmsprop(u, i, wi, gi);
            break;
        case DT_NN_UPD_ADAGRAD:
            upd_adagrad(u, i, wi, gi);
            break;
        case DT_NN_UPD_ADADELTA:
            upd_adadelta(u, i, wi, gi);
            break;
        case DT_NN_UPD_ADAMAX:
            upd_adamax(u, i, wi, gi);
            break;
        case DT_NN_UPD_NADAM:
            upd_nadam(u, i, wi, gi);
            break;
        case DT_NN_UPD_FTRL:
            upd_ftrl(u, i, wi, gi);
            break;
        case DT_NN_UPD_LION:
            upd_lion(u, i, wi, gi);
            break;
        }
        /* the model's moving average (use_ema), after the update as Keras does */
        if (u.ema) {
            float a = radd(rmul(u.ema_momentum, u.ema[i]), rmul(1.0f - u.ema_momentum, wi));
            u.ema[i] = a;
            if (u.ema_overwrite)
                wi = a;
        }
        w[i] = wi;
    }
}

static void cu_update(const dt_nn_update *u, float *w, const float *g, size_t n)
{
    if (n == 0)
        return;
    update_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(*u, w, g, n);
    DT_CU_LAUNCH(update_k);
}

/* --- sums of squares -------------------------------------------------------------------------- */

/* A segment of len floats is summed by chunks(len) blocks (from its length only: the same
 * partials every run), block c taking elements c T + t, c T + t + chunks T, ... */
#define SQ_PER_BLOCK  4096
#define SQ_MAX_CHUNKS DT_CU_THREADS /* stage 2 adds one partial a thread */

static __host__ __device__ unsigned sq_chunks(size_t len)
{
    size_t c = (len + SQ_PER_BLOCK - 1) / SQ_PER_BLOCK;
    if (c > SQ_MAX_CHUNKS)
        c = SQ_MAX_CHUNKS;
    return c ? (unsigned)c : 1u;
}

/* part[s gx + c] = chunk c's sum of squares of segment s */
static __global__ void sumsq_k(const float *x, size_t nseg, const size_t *off, const size_t *lens,
                               unsigned gx, double *part)
{
    __shared__ double sh[DT_CU_THREADS];
    for (size_t s = blockIdx.y; s < nseg; s += gridDim.y) { /* uniform in the block */
        size_t len = lens[s];
        unsigned ch = sq_chunks(len);
        if (blockIdx.x >= ch)
            continue;
        const float *p = x + off[s];
        double acc = 0;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
             i += (size_t)ch * blockDim.x)
            acc += (double)p[i] * p[i];
        acc = dt_cu_block_sum(acc, sh);
        if (threadIdx.x == 0)
            part[s * gx + blockIdx.x] = acc;
    }
}

/* out[s] = the sum of segment s's chunks in a fixed tree */
static __global__ void sumsq_fin_k(size_t nseg, const size_t *lens, unsigned gx, const double *part,
                                   double *out)
{
    __shared__ double sh[DT_CU_THREADS];
    for (size_t s = blockIdx.x; s < nseg; s += gridDim.x) { /* uniform in the block */
        unsigned ch = sq_chunks(lens[s]);
        double v = threadIdx.x < ch ? part[s * gx + threadIdx.x] : 0.0;
        v = dt_cu_block_sum(v, sh);
        if (threadIdx.x == 0)
            out[s] = v;
    }
}

/* Queues the segments' sums of squares into out (device): chunk partials, then their tree. */
static void sumsq_queue(const float *x, size_t nseg, const size_t *off, const size_t *lens,
                        unsigned gx, double *part, double *out)
{
    cudaStream_t st = dt_cu_stream();
    unsigned gy = nseg < 65535u ? (unsigned)nseg : 65535u;
    sumsq_k<<<dim3(gx, gy), DT_CU_THREADS, 0, st>>>(x, nseg, off, lens, gx, part);
    DT_CU_LAUNCH(sumsq_k);
    unsigned g2 = nseg < 65535u * 8u ? (unsigned)nseg : 65535u * 8u;
    sumsq_fin_k<<<g2, DT_CU_THREADS, 0, st>>>(nseg, lens, gx, part, out);
    DT_CU_LAUNCH(sumsq_fin_k);
}

/* --- clipping by norm ------------------------------------------------------------------------- */

/* One thread: the host's decisions of optim.c before the step block, in double as there.
 * on[s] (clipnorm) or on[0] (global): 0 leave, 1 scale by sc[.], 2 fill with NaN. */
static __global__ void clip_scale_k(size_t nseg, float clipnorm, float gclip, const double *ss,
                                    float *sc, int *on)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    if (clipnorm > 0) {
        for (size_t s = 0; s < nseg; s++) {
            double norm = sqrt(ss[s]);
            on[s] = !(norm <= (double)clipnorm);
            sc[s] = on[s] ? (float)__ddiv_rn((double)clipnorm, norm) : 1.0f;
        }
        return;
    }
    double sum = 0;
    for (size_t s = 0; s < nseg; s++)
        sum = __dadd_rn(sum, ss[s]);
    double norm = sqrt(sum);
    on[0] = !isfinite(norm) ? 2 : (norm > (double)gclip ? 1 : 0);
    sc[0] = on[0] == 1 ? (float)__ddiv_rn((double)gclip, norm) : 1.0f;
}

/* clipnorm: each segment whose on[s] is set, as axpby(sc[s], g, 0, g) computes it */
static __global__ void clip_seg_k(float *g, size_t nseg, const size_t *off, const size_t *lens,
                                  const float *sc, const int *on)
{
    for (size_t s = blockIdx.y; s < nseg; s += gridDim.y) {
        if (!on[s])
            continue;
        float a = sc[s], *p = g + off[s];
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < lens[s];
             i += (size_t)gridDim.x * blockDim.x)
            p[i] = __fadd_rn(__fmul_rn(a, p[i]), __fmul_rn(0.0f, p[i]));
    }
}

/* global_clipnorm: all of g by on[0] */
static __global__ void clip_all_k(float *g, size_t n, const float *sc, const int *on)
{
    int code = on[0];
    if (!code)
        return;
    float a = sc[0];
    DT_CU_FOR(i, n)
    {
        g[i] = code == 2 ? NAN : __fadd_rn(__fmul_rn(a, g[i]), __fmul_rn(0.0f, g[i]));
    }
}

static void cu_clip_norm(float *g, size_t n, size_t nseg, const size_t *off, const size_t *len,
                         float clipnorm, float global_clipnorm, double *ss)
{
    if (nseg == 0)
        return;
    /* the host does not know the longest segment: n bounds it, and a segment's partials depend
     * on its own length only: gx lays the partials out and changes no sum */
    unsigned gx = sq_chunks(n);
    double *part = (double *)dt_cu_scratch((size_t)gx * nseg * sizeof(double) +
                                           nseg * (sizeof(float) + sizeof(int)));
    if (!part)
        return;
    float *sc = (float *)(part + (size_t)gx * nseg);
    int *on = (int *)(sc + nseg);
    cudaStream_t st = dt_cu_stream();
    sumsq_queue(g, nseg, off, len, gx, part, ss);
    clip_scale_k<<<1, 1, 0, st>>>(nseg, clipnorm, global_clipnorm, ss, sc, on);
    DT_CU_LAUNCH(clip_scale_k);
    if (clipnorm > 0) {
        unsigned gy = nseg < 65535u ? (unsigned)nseg : 65535u;
        clip_seg_k<<<dim3(gx, gy), DT_CU_THREADS, 0, st>>>(g, nseg, off, len, sc, on);
        DT_CU_LAUNCH(clip_seg_k);
    } else {
        clip_all_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, st>>>(g, n, sc, on);
        DT_CU_LAUNCH(clip_all_k);
    }
}

void dt_cu_fill_train(dt_nn_ops *o)
{
    o->update = cu_update;
    o->loss_dev = cu_loss_dev;
    o->regularize_dev = cu_regularize_dev;
    o->hits = cu_hits;
    o->clip_norm = cu_clip_norm;
}
