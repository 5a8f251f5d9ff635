/*
 * norm.cu - batch normalization (bn_fwd, bn_bwd), layer normalization (ln_fwd, ln_bwd) and
 * Keras's Normalization (norm_fwd, norm_bwd): the contracts are ops.h's, the reference the CPU
 * kernels of ops_cpu.c, ops_cpu_seq.c and ops_cpu_preproc.c.
 *
 * Column sums (the batch statistics, dgamma and dbeta) run in two stages in a fixed order: the
 * rows are cut into chunks that depend on the shape only, a block sums a chunk of 32 columns in
 * double (8 row lanes, then the lanes in order), and a second kernel sums each column's chunks
 * with dt_cu_block_sum. No atomics: two runs give the same bits.
 *
 * Float arithmetic goes through __fmul_rn / __fadd_rn / __fsub_rn / __fdiv_rn where the CPU
 * rounds every operation (gcc -std=c11 does not contract a * b + c): nvcc would fuse it into an
 * FMA, and the fused ReLU's gradient mask compares a recomputed value with 0 and relu, so the
 * forward and the backward must round alike (and like the CPU, where the order of operations is
 * the same).
 */
#include "nn/cuda/internal.cuh"

/* --- helpers ---------------------------------------------------------------------------------- */

/* 1.0f / sqrtf(v + eps), as the CPU's batch norm computes its inverse deviation. */
static __device__ __forceinline__ float inv_dev(float var, float eps)
{
    return rdiv(1.0f, __fsqrt_rn(radd(var, eps)));
}

/* dt_cu_block_sum's result handed to every thread of the block (it promises thread 0). */
template <typename T> static __device__ T block_sum_all(T v, T *sh)
{
    T r = dt_cu_block_sum(v, sh);
    if (threadIdx.x == 0)
        sh[0] = r;
    __syncthreads();
    r = sh[0];
    __syncthreads();
    return r;
}

/* Threads of a row kernel (one block a row): a power of two in [32, 256] covering cols. */
static unsigned row_threads(int cols)
{
    unsigned t = 32;
    while (t < 256 && t < (unsigned)cols)
        t *= 2;
    return t;
}

static unsigned row_grid(size_t rows)
{
    return rows < 65535u * 8u ? (unsigned)rows : 65535u * 8u;
}

/* --- two-stage column sums -------------------------------------------------------------------- */

#define COL_TX 32  /* columns of a stage-1 block */
#define COL_TY 8   /* row lanes of a stage-1 block */
#define COL2_T 128 /* threads of a stage-2 block (a power of two for dt_cu_block_sum) */

/* The rows cut into `chunks` runs of `per` rows, from the shape only (same bits every run):
 * runs of at least 256 rows, at most 1024 runs and about 2048 stage-1 blocks in all. */
struct col_plan {
    unsigned cb;     /* column blocks */
    unsigned chunks; /* row chunks (stage-1 grid's y) */
    size_t per;      /* rows per chunk */
};

static col_plan plan_cols(size_t rows, int cols)
{
    col_plan p;
    p.cb = (unsigned)(((size_t)cols + COL_TX - 1) / COL_TX);
    size_t want = (rows + 255) / 256, cap = 2048 / p.cb;
    if (cap > 1024)
        cap = 1024;
    if (want > cap)
        want = cap;
    if (want < 1)
        want = 1;
    p.per = (rows + want - 1) / want;
    if (p.per < 1)
        p.per = 1;
    p.chunks = (unsigned)((rows + p.per - 1) / p.per);
    if (p.chunks < 1)
        p.chunks = 1; /* rows == 0: one empty chunk, sums of 0 as the CPU's */
    return p;
}

/* Stage 1: ps[c, j], pt[c, j] = the sums F adds over chunk c's rows of column j (F::col holds
 * what F needs of column j, computed once a thread). ps and pt are (chunks, cols). */
template <class F>
static __global__ void col_sums_k(F f, size_t rows, int cols, size_t per, double *ps, double *pt)
{
    __shared__ double ss[COL_TY][COL_TX], st[COL_TY][COL_TX];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const unsigned ncb = (unsigned)(((size_t)cols + COL_TX - 1) / COL_TX);
    const size_t r0 = (size_t)blockIdx.y * per;
    const size_t r1 = r0 + per < rows ? r0 + per : rows;
    for (unsigned cb = blockIdx.x; cb < ncb; cb += gridDim.x) { /* uniform in the block */
        int j = (int)(cb * COL_TX + tx);
        double s = 0, t = 0;
        if (j < cols) {
            typename F::col c = f.at(j);
            for (size_t r = r0 + ty; r < r1; r += COL_TY)
                f.add(c, r * (size_t)cols + j, s, t);
        }
        ss[ty][tx] = s;
        st[ty][tx] = t;
        __syncthreads();
        if (ty == 0 && j < cols) {
            double a = 0, b = 0;
            for (int k = 0; k < COL_TY; k++) {
                a += ss[k][tx];
                b += st[k][tx];
            }
            ps[(size_t)blockIdx.y * cols + j] = a;
            pt[(size_t)blockIdx.y * cols + j] = b;
        }
        __syncthreads();
    }
}

/* Stage 2: per column j, S and T = the chunks' sums in a fixed tree; thread 0 calls fin. */
template <class G>
static __global__ void col_fin_k(G fin, int cols, unsigned chunks, const double *ps,
                                 const double *pt)
{
    __shared__ double sh[COL2_T];
    for (int j = blockIdx.x; j < cols; j += gridDim.x) { /* uniform in the block */
        double s = 0, t = 0;
        for (unsigned c = threadIdx.x; c < chunks; c += blockDim.x) {
            s += ps[(size_t)c * cols + j];
            t += pt[(size_t)c * cols + j];
        }
        s = dt_cu_block_sum(s, sh);
        t = dt_cu_block_sum(t, sh);
        if (threadIdx.x == 0)
            fin(j, s, t);
    }
}

/* The partial sums of both stages, then `extra` bytes for the caller (8-byte aligned) in one
 * scratch buffer: ps and pt, p.chunks cols doubles each. NULL: no scratch. */
static double *col_scratch(const col_plan &p, int cols, size_t extra)
{
    return (double *)dt_cu_scratch(2 * (size_t)p.chunks * (size_t)cols * sizeof(double) + extra);
}

static void *col_extra(const col_plan &p, int cols, double *ps)
{
    return ps + 2 * (size_t)p.chunks * (size_t)cols;
}

/* Runs both stages over the scratch ps from col_scratch. */
template <class F, class G>
static void col_sums(F f, G fin, const col_plan &p, size_t rows, int cols, double *ps)
{
    double *pt = ps + (size_t)p.chunks * (size_t)cols;
    dim3 b1(COL_TX, COL_TY), g1(p.cb < 65535u ? p.cb : 65535u, p.chunks);
    col_sums_k<F><<<g1, b1, 0, dt_cu_stream()>>>(f, rows, cols, p.per, ps, pt);
    DT_CU_LAUNCH(col_sums_k);
    unsigned g2 = cols < 65535 ? (unsigned)cols : 65535u;
    col_fin_k<G><<<g2, COL2_T, 0, dt_cu_stream()>>>(fin, cols, p.chunks, ps, pt);
    DT_CU_LAUNCH(col_fin_k);
}

/* --- batch normalization ---------------------------------------------------------------------- */

/* s += x, t += x^2 (in double: the product of two floats is exact there) */
struct bn_moments_f {
    const float *x;
    struct col {
    };
    __device__ col at(int) const
    {
        return col{};
    }
    __device__ void add(const col &, size_t i, double &s, double &t) const
    {
        float v = x[i];
        s += v;
        t += (double)v * v;
    }
};

/* The batch statistics and the moving ones from the sums, as cpu_bn_fwd; k[j] the inverse
 * deviation the affine pass uses. */
struct bn_stats_fin {
    size_t rows;
    float eps, momentum;
    float *smean, *svar, *mmean, *mvar, *k;
    __device__ void operator()(int j, double s, double t) const
    {
        double m = s / (double)rows, v = __dsub_rn(t / (double)rows, __dmul_rn(m, m));
        float fm = (float)m, fv = (float)(v > 0 ? v : 0);
        smean[j] = fm;
        svar[j] = fv;
        k[j] = inv_dev(fv, eps);
        mmean[j] = radd(rmul(mmean[j], momentum), rmul(fm, 1.0f - momentum));
        mvar[j] = radd(rmul(mvar[j], momentum), rmul(fv, 1.0f - momentum));
    }
};

/* k[j] = 1 / sqrtf(var[j] + eps) (inference: the moving variance) */
static __global__ void bn_invdev_k(const float *var, float eps, int cols, float *k)
{
    DT_CU_FOR(j, cols)
    k[j] = inv_dev(var[j], eps);
}

/* y = gamma ((x - m) k) + beta, clipped to [0, relu] when relu >= 0 (NaN: 0), as col_affine */
static __global__ void bn_affine_k(const float *x, float *y, size_t n, int cols, const float *m,
                                   const float *k, const float *gamma, const float *beta,
                                   float relu)
{
    DT_CU_FOR(i, n)
    {
        int j = (int)(i % (size_t)cols);
        float a = gamma ? gamma[j] : 1.0f, b = beta ? beta[j] : 0.0f;
        float v = radd(rmul(a, rmul(rsub(x[i], m[j]), k[j])), b);
        if (relu >= 0) {
            v = v > 0 ? v : 0.0f;
            v = v > relu ? relu : v;
        }
        y[i] = v;
    }
}

static void cu_bn_fwd(bool training, const float *x, float *y, size_t rows, int cols,
                      const float *gamma, const float *beta, float *mmean, float *mvar,
                      float momentum, float eps, float *smean, float *svar, float relu)
{
    if (cols <= 0)
        return;
    size_t n = rows * (size_t)cols;
    cudaStream_t st = dt_cu_stream();
    float *k = NULL;
    const float *m = mmean;
    if (training) {
        /* rows == 0 still runs the statistics: 0 / 0 as the CPU's. k follows the partial sums. */
        col_plan p = plan_cols(rows, cols);
        double *ps = col_scratch(p, cols, (size_t)cols * sizeof(float));
        if (!ps)
            return;
        k = (float *)col_extra(p, cols, ps);
        bn_stats_fin fin = {rows, eps, momentum, smean, svar, mmean, mvar, k};
        col_sums(bn_moments_f{x}, fin, p, rows, cols, ps);
        m = smean;
    } else {
        k = (float *)dt_cu_scratch((size_t)cols * sizeof(float));
        if (!k)
            return;
        bn_invdev_k<<<dt_cu_blocks((size_t)cols), DT_CU_THREADS, 0, st>>>(mvar, eps, cols, k);
        DT_CU_LAUNCH(bn_invdev_k);
    }
    if (n == 0)
        return;
    bn_affine_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, st>>>(x, y, n, cols, m, k, gamma, beta, relu);
    DT_CU_LAUNCH(bn_affine_k);
}

/* Per column of bn_bwd: the forward's mean, inverse deviation, scale and shift. */
struct bn_col {
    float mu, ik, a, b;
};

static __device__ __forceinline__ bn_col bn_col_at(int j, const float *smean, const float *svar,
                                                   const float *gamma, const float *beta, float eps)
{
    bn_col c;
    c.mu = smean[j];
    c.ik = inv_dev(svar[j], eps);
    c.a = gamma ? gamma[j] : 1.0f;
    c.b = beta ? beta[j] : 0.0f;
    return c;
}

/* The gradient reaching the batch norm: dy, or with the fused ReLU dy where
 * 0 < a xhat + b < relu (the forward's output recomputed with the same roundings), else 0. */
static __device__ __forceinline__ float bn_grad_in(float dy, float h, const bn_col &c, float relu)
{
    if (relu < 0)
        return dy;
    float p = radd(rmul(c.a, h), c.b);
    return p > 0 && p < relu ? dy : 0.0f;
}

/* s += g, t += g xhat */
struct bn_grad_f {
    const float *dy, *x, *smean, *svar, *gamma, *beta;
    float eps, relu;
    typedef bn_col col;
    __device__ col at(int j) const
    {
        return bn_col_at(j, smean, svar, gamma, beta, eps);
    }
    __device__ void add(const col &c, size_t i, double &s, double &t) const
    {
        float h = rmul(rsub(x[i], c.mu), c.ik);
        float g = bn_grad_in(dy[i], h, c, relu);
        s += g;
        t += (double)g * h;
    }
};

/* dgamma += T, dbeta += S (the layer zeroed them), and the dx factors ik, k, m1, m2 (per
 * column, so the dx pass does no square root or division per element) */
struct bn_grad_fin {
    size_t rows;
    float eps;
    const float *svar, *gamma;
    float *dgamma, *dbeta, *ik, *k, *m1, *m2;
    __device__ void operator()(int j, double s, double t) const
    {
        if (dgamma)
            dgamma[j] = radd(dgamma[j], (float)t);
        if (dbeta)
            dbeta[j] = radd(dbeta[j], (float)s);
        float a = gamma ? gamma[j] : 1.0f;
        ik[j] = inv_dev(svar[j], eps);
        k[j] = rdiv(a, __fsqrt_rn(radd(svar[j], eps)));
        m1[j] = (float)(s / (double)rows);
        m2[j] = (float)(t / (double)rows);
    }
};

/* dx (=/+=) k (g - m1 - xhat m2), as bn_dx and masked_dx */
static __global__ void bn_dx_k(const float *dy, const float *x, float *dx, size_t n, int cols,
                               const float *smean, const float *gamma, const float *beta,
                               float relu, const float *ik, const float *k, const float *m1,
                               const float *m2, bool acc)
{
    DT_CU_FOR(i, n)
    {
        int j = (int)(i % (size_t)cols);
        bn_col c = {smean[j], ik[j], gamma ? gamma[j] : 1.0f, beta ? beta[j] : 0.0f};
        float h = rmul(rsub(x[i], c.mu), c.ik);
        float g = bn_grad_in(dy[i], h, c, relu);
        float v = rmul(k[j], rsub(rsub(g, m1[j]), rmul(h, m2[j])));
        dx[i] = acc ? radd(dx[i], v) : v;
    }
}

static void cu_bn_bwd(const float *dy, const float *x, size_t rows, int cols, const float *gamma,
                      const float *beta, const float *smean, const float *svar, float eps,
                      float *dx, bool acc, float *dgamma, float *dbeta, float relu)
{
    if (cols <= 0 || (!dx && !dgamma && !dbeta))
        return;
    /* ik, k, m1, m2 after the partial sums */
    col_plan p = plan_cols(rows, cols);
    double *ps = col_scratch(p, cols, 4 * (size_t)cols * sizeof(float));
    if (!ps)
        return;
    float *ik = (float *)col_extra(p, cols, ps), *k = ik + cols, *m1 = k + cols, *m2 = m1 + cols;
    bn_grad_f f = {dy, x, smean, svar, gamma, beta, eps, relu};
    bn_grad_fin fin = {rows, eps, svar, gamma, dgamma, dbeta, ik, k, m1, m2};
    col_sums(f, fin, p, rows, cols, ps);
    size_t n = rows * (size_t)cols;
    if (!dx || n == 0)
        return;
    bn_dx_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(dy, x, dx, n, cols, smean, gamma,
                                                                   beta, relu, ik, k, m1, m2, acc);
    DT_CU_LAUNCH(bn_dx_k);
}

/* --- layer normalization ---------------------------------------------------------------------- */

/* One block a row, as dt__nn_cpu_ln_fwd: mean and the centred sum of squares in double. */
static __global__ void ln_fwd_k(const float *x, float *y, float *xhat, float *rstd, size_t rows,
                                int cols, const float *gamma, const float *beta, float eps)
{
    __shared__ double sh[256];
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) { /* uniform in the block */
        const float *xr = x + r * (size_t)cols;
        double s = 0;
        for (int j = threadIdx.x; j < cols; j += blockDim.x)
            s += xr[j];
        double mean = block_sum_all(s, sh) / cols;
        double q = 0;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            double d = xr[j] - mean;
            q += __dmul_rn(d, d);
        }
        q = block_sum_all(q, sh);
        float rs = (float)(1.0 / sqrt(q / cols + eps));
        if (threadIdx.x == 0)
            rstd[r] = rs;
        float *hr = xhat + r * (size_t)cols, *yr = y + r * (size_t)cols;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            float h = (float)((xr[j] - mean) * rs);
            hr[j] = h;
            yr[j] = radd(rmul(h, gamma ? gamma[j] : 1.0f), beta ? beta[j] : 0.0f);
        }
    }
}

static void cu_ln_fwd(const float *x, float *y, float *xhat, float *rstd, size_t rows, int cols,
                      const float *gamma, const float *beta, float eps)
{
    if (rows == 0 || cols <= 0)
        return;
    ln_fwd_k<<<row_grid(rows), row_threads(cols), 0, dt_cu_stream()>>>(x, y, xhat, rstd, rows, cols,
                                                                       gamma, beta, eps);
    DT_CU_LAUNCH(ln_fwd_k);
}

/* s += dy, t += dy xhat */
struct ln_param_f {
    const float *dy, *xhat;
    struct col {
    };
    __device__ col at(int) const
    {
        return col{};
    }
    __device__ void add(const col &, size_t i, double &s, double &t) const
    {
        float g = dy[i];
        s += g;
        t += (double)g * xhat[i];
    }
};

/* dgamma, dbeta written (NULL: not wanted) */
struct ln_param_fin {
    float *dgamma, *dbeta;
    __device__ void operator()(int j, double s, double t) const
    {
        if (dgamma)
            dgamma[j] = (float)t;
        if (dbeta)
            dbeta[j] = (float)s;
    }
};

/* dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma; one block a row */
static __global__ void ln_dx_k(const float *dy, const float *xhat, const float *rstd, size_t rows,
                               int cols, const float *gamma, float *dx, bool acc)
{
    __shared__ double sh[256];
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) { /* uniform in the block */
        const float *g = dy + r * (size_t)cols, *h = xhat + r * (size_t)cols;
        double a = 0, b = 0;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            double d = (double)g[j] * (gamma ? gamma[j] : 1.0f);
            a += d;
            b += d * h[j];
        }
        a = block_sum_all(a, sh) / cols;
        b = block_sum_all(b, sh) / cols;
        float *o = dx + r * (size_t)cols;
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            double v = rstd[r] * ((double)g[j] * (gamma ? gamma[j] : 1.0f) - a - (double)h[j] * b);
            o[j] = (float)(acc ? o[j] + v : v);
        }
    }
}

static void cu_ln_bwd(const float *dy, const float *xhat, const float *rstd, size_t rows, int cols,
                      const float *gamma, float *dx, bool acc, float *dgamma, float *dbeta)
{
    if (cols <= 0)
        return;
    if (dgamma || dbeta) {
        col_plan p = plan_cols(rows, cols);
        double *ps = col_scratch(p, cols, 0);
        if (!ps)
            return;
        col_sums(ln_param_f{dy, xhat}, ln_param_fin{dgamma, dbeta}, p, rows, cols, ps);
    }
    if (!dx || rows == 0)
        return;
    ln_dx_k<<<row_grid(rows), row_threads(cols), 0, dt_cu_stream()>>>(dy, xhat, rstd, rows, cols,
                                                                      gamma, dx, acc);
    DT_CU_LAUNCH(ln_dx_k);
}

/* --- Normalization ---------------------------------------------------------------------------- */

/* Keras: max(sqrt(variance), backend.epsilon()) */
static __device__ __forceinline__ float norm_scale(float var)
{
    float s = __fsqrt_rn(var);
    return s > 1e-7f ? s : 1e-7f;
}

static __global__ void norm_fwd_k(const float *x, float *y, const float *mean, const float *var,
                                  size_t n, int cols, bool invert)
{
    DT_CU_FOR(i, n)
    {
        int c = (int)(i % (size_t)cols);
        float s = norm_scale(var[c]);
        y[i] = invert ? radd(mean[c], rmul(x[i], s)) : rdiv(rsub(x[i], mean[c]), s);
    }
}

static __global__ void norm_bwd_k(const float *dy, const float *var, float *dx, size_t n, int cols,
                                  bool invert, bool acc)
{
    DT_CU_FOR(i, n)
    {
        float s = norm_scale(var[i % (size_t)cols]);
        float g = invert ? rmul(dy[i], s) : rdiv(dy[i], s);
        dx[i] = acc ? radd(dx[i], g) : g;
    }
}

static void cu_norm_fwd(const float *x, float *y, const float *mean, const float *var, size_t rows,
                        int cols, bool invert)
{
    size_t n = rows * (size_t)(cols > 0 ? cols : 0);
    if (n == 0)
        return;
    norm_fwd_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(x, y, mean, var, n, cols,
                                                                      invert);
    DT_CU_LAUNCH(norm_fwd_k);
}

static void cu_norm_bwd(const float *dy, const float *var, float *dx, size_t rows, int cols,
                        bool invert, bool acc)
{
    size_t n = rows * (size_t)(cols > 0 ? cols : 0);
    if (n == 0)
        return;
    norm_bwd_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(dy, var, dx, n, cols, invert,
                                                                      acc);
    DT_CU_LAUNCH(norm_bwd_k);
}

void dt_cu_fill_norm(dt_nn_ops *o)
{
    o->bn_fwd = cu_bn_fwd;
    o->bn_bwd = cu_bn_bwd;
    o->ln_fwd = cu_ln_fwd;
    o->ln_bwd = cu_ln_bwd;
    o->norm_fwd = cu_norm_fwd;
    o->norm_bwd = cu_norm_bwd;
}
