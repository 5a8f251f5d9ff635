/*
 * elem.cu - the element-wise kernels: bias add and gradient, activations forward and backward,
 * dropout and the small vector ops. The contract of each is in nn/ops.h; the CPU kernels of
 * ops_cpu.c are the reference, formula for formula.
 *
 * Where the CPU does one float multiply and one add, the kernels say so with __fmul_rn and
 * __fadd_rn: nvcc would otherwise contract them into an FMA (one rounding instead of two), and
 * the vector ops would then differ from the CPU's in the last bit. The transcendental kernels
 * (activations) keep CUDA's own functions and agree to a few ulps.
 */
#include "nn/cuda/internal.cuh"
#include "nn/dropout_hash.h"

#include <math.h>

#define SELU_ALPHA   1.6732632423543772848170429916717
#define SELU_SCALE   1.0507009873554804934193349852946
#define SQRT1_2      0.70710678118654752440084436210485
#define INV_SQRT_2PI 0.3989422804014327

/* --- bias ------------------------------------------------------------------------------------- */

static __global__ void bias_add_k(float *y, const float *b, size_t n, int cols)
{
    DT_CU_FOR(i, n)
    {
        y[i] = __fadd_rn(y[i], b[i % (size_t)cols]);
    }
}

static void cu_bias_add(float *y, const float *b, size_t rows, int cols)
{
    size_t n = rows * (size_t)(cols > 0 ? cols : 0);
    if (n == 0)
        return;
    bias_add_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(y, b, n, cols);
    DT_CU_LAUNCH(bias_add_k);
}

/* The column sums of bias_grad in two deterministic stages. Stage 1: a block of BG_TX x BG_TY
 * threads takes BG_TX columns and a chunk of BG_ROWS rows; thread (tx, ty) sums rows ty,
 * ty + BG_TY, ... of its chunk in double, and the BG_TY sums are added in ty order into the
 * chunk's partial (nchunks, cols). Stage 2: one thread per column adds the partials in chunk
 * order. The chunks depend on rows only, so every run adds the same numbers in the same order. */
#define BG_TX   32
#define BG_TY   8
#define BG_ROWS 256
static_assert(BG_TX * BG_TY == 256, "bias_grad_partial_k's launch bounds");

static __global__ void __launch_bounds__(256)
    bias_grad_partial_k(const float *dy, size_t rows, int cols, size_t nchunks, double *part)
{
    __shared__ double sh[BG_TY][BG_TX];
    unsigned tx = threadIdx.x, ty = threadIdx.y;
    size_t j = (size_t)blockIdx.x * BG_TX + tx;
    /* the chunk loop's bounds are the block's, so the barriers below are reached by all */
    for (size_t ch = blockIdx.y; ch < nchunks; ch += gridDim.y) {
        double s = 0;
        if (j < (size_t)cols) {
            size_t r1 = (ch + 1) * BG_ROWS < rows ? (ch + 1) * BG_ROWS : rows;
            for (size_t r = ch * BG_ROWS + ty; r < r1; r += BG_TY)
                s += dy[r * (size_t)cols + j];
        }
        sh[ty][tx] = s;
        __syncthreads();
        if (ty == 0 && j < (size_t)cols) {
            double t = sh[0][tx];
            for (int k = 1; k < BG_TY; k++)
                t += sh[k][tx];
            part[ch * (size_t)cols + j] = t;
        }
        __syncthreads();
    }
}

static __global__ void bias_grad_final_k(const double *part, size_t nchunks, int cols, float *db,
                                         bool acc)
{
    DT_CU_FOR(j, (size_t)cols)
    {
        double s = 0;
        for (size_t ch = 0; ch < nchunks; ch++)
            s += part[ch * (size_t)cols + j];
        db[j] = acc ? __fadd_rn(db[j], (float)s) : (float)s;
    }
}

static void cu_bias_grad(const float *dy, size_t rows, int cols, float *db, bool acc)
{
    if (cols <= 0)
        return;
    size_t nchunks = (rows + BG_ROWS - 1) / BG_ROWS;
    double *part = NULL;
    if (nchunks) {
        part = (double *)dt_cu_scratch(nchunks * (size_t)cols * sizeof(double));
        if (!part)
            return; /* the allocation failure is recorded */
        unsigned gy = nchunks < 65535 ? (unsigned)nchunks : 65535u;
        dim3 grid((unsigned)(((size_t)cols + BG_TX - 1) / BG_TX), gy), block(BG_TX, BG_TY);
        bias_grad_partial_k<<<grid, block, 0, dt_cu_stream()>>>(dy, rows, cols, nchunks, part);
        DT_CU_LAUNCH(bias_grad_partial_k);
    }
    /* rows == 0 still writes db (zeros, or db unchanged with acc), as the CPU does */
    bias_grad_final_k<<<dt_cu_blocks((size_t)cols), DT_CU_THREADS, 0, dt_cu_stream()>>>(
        part, nchunks, cols, db, acc);
    DT_CU_LAUNCH(bias_grad_final_k);
}

/* --- activations ------------------------------------------------------------------------------ */

static __device__ inline float sigmoid_d(float z)
{
    return z >= 0 ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
}

/* Keras's ReLU layer (ops_cpu.c's relu_layer and relu_layer_grad) */
static __device__ inline float relu_layer_d(const dt_nn_act_p &a, float x)
{
    float y = x > a.threshold ? x : 0.0f;
    if (a.max_value > 0 && isfinite(a.max_value) && y > a.max_value)
        y = a.max_value;
    if (a.alpha != 0 && x < a.threshold)
        y -= a.alpha * (a.threshold - x);
    return y;
}

static __device__ inline float relu_layer_grad_d(const dt_nn_act_p &a, float x)
{
    float g = 0.0f;
    if (x > a.threshold && !(a.max_value > 0 && isfinite(a.max_value) && x >= a.max_value))
        g = 1.0f;
    if (a.alpha != 0 && x < a.threshold)
        g += a.alpha;
    return g;
}

/* ReLU6 as MobileNet uses it: the CPU's branch-free path, whose backward passes dy strictly
 * inside (0, max_value) (dy itself, not dy * 1). */
static bool relu_clip_only(const dt_nn_act_p *a)
{
    return a->alpha == 0 && a->threshold == 0 && a->max_value > 0 && isfinite(a->max_value);
}

static __device__ inline float act_one(const dt_nn_act_p &a, float z)
{
    switch (a.kind) {
    case DT_NN_ACT_RELU:
        return z > 0 ? z : 0.0f;
    case DT_NN_ACT_SIGMOID:
        return sigmoid_d(z);
    case DT_NN_ACT_TANH:
        return tanhf(z);
    case DT_NN_ACT_ELU:
        return z > 0 ? z : expm1f(z);
    case DT_NN_ACT_SELU:
        return (float)(SELU_SCALE * (z > 0 ? (double)z : SELU_ALPHA * expm1((double)z)));
    case DT_NN_ACT_GELU:
        return (float)(0.5 * (double)z * (1.0 + erf((double)z * SQRT1_2)));
    case DT_NN_ACT_SWISH:
        return z * sigmoid_d(z);
    case DT_NN_ACT_LEAKY_RELU:
        return z >= 0 ? z : a.alpha * z;
    case DT_NN_ACT_RELU_CAPPED:
        return relu_layer_d(a, z);
    default: /* LINEAR; SOFTMAX goes to softmax_k */
        return z;
    }
}

static __global__ void act_fwd_k(dt_nn_act_p a, const float *z, float *y, size_t n)
{
    DT_CU_FOR(i, n)
    {
        y[i] = act_one(a, z[i]);
    }
}

/* One warp per row: lane l takes columns l, l + 32, ...; the max and the double sum meet in
 * an xor butterfly, whose additions are the same on every lane and every run. Each lane writes
 * only the columns it read, so y may alias z. */
static __device__ inline double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __global__ void softmax_k(const float *z, float *y, size_t rows, int cols)
{
    unsigned lane = threadIdx.x & 31u, wpb = blockDim.x / 32;
    for (size_t r = (size_t)blockIdx.x * wpb + threadIdx.x / 32; r < rows;
         r += (size_t)gridDim.x * wpb) {
        const float *zr = z + r * (size_t)cols;
        float *yr = y + r * (size_t)cols;
        float mx = zr[0];
        for (int j = (int)lane; j < cols; j += 32)
            mx = zr[j] > mx ? zr[j] : mx;
        for (int o = 16; o > 0; o >>= 1) {
            float t = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = t > mx ? t : mx;
        }
        double s = 0;
        for (int j = (int)lane; j < cols; j += 32) {
            float e = expf(zr[j] - mx);
            yr[j] = e;
            s += e;
        }
        float inv = (float)(1.0 / warp_sum(s));
        for (int j = (int)lane; j < cols; j += 32)
            yr[j] *= inv;
    }
}

/* Rows per 256-thread block of the warp-per-row kernels, and their grid. */
#define ROWS_PER_BLOCK (DT_CU_THREADS / 32)
static unsigned row_blocks(size_t rows)
{
    size_t b = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    return b > 65535u * 8u ? 65535u * 8u : (unsigned)b;
}

static void cu_act_fwd(const dt_nn_act_p *a, const float *z, float *y, size_t rows, int cols)
{
    size_t n = rows * (size_t)(cols > 0 ? cols : 0);
    if (n == 0)
        return;
    if (a->kind == DT_NN_ACT_LINEAR) {
        if (y != z)
            DT_CU(
                cudaMemcpyAsync(y, z, n * sizeof(float), cudaMemcpyDeviceToDevice, dt_cu_stream()));
        return;
    }
    if (a->kind == DT_NN_ACT_SOFTMAX) {
        softmax_k<<<row_blocks(rows), DT_CU_THREADS, 0, dt_cu_stream()>>>(z, y, rows, cols);
        DT_CU_LAUNCH(softmax_k);
        return;
    }
    act_fwd_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(*a, z, y, n);
    DT_CU_LAUNCH(act_fwd_k);
}

/* dy * act'(z) from y (the forward's output) or z, as cpu_act_bwd; z is read only by the kinds
 * whose derivative needs it (selu, gelu, swish, leaky relu, relu layer). */
static __device__ inline float act_grad(const dt_nn_act_p &a, bool clip, const float *z,
                                        const float *y, float dy, size_t i)
{
    switch (a.kind) {
    case DT_NN_ACT_RELU:
        return y[i] > 0 ? dy : 0.0f;
    case DT_NN_ACT_SIGMOID:
        return dy * y[i] * (1.0f - y[i]);
    case DT_NN_ACT_TANH:
        return dy * (1.0f - y[i] * y[i]);
    case DT_NN_ACT_ELU:
        return y[i] > 0 ? dy : dy * (y[i] + 1.0f);
    case DT_NN_ACT_SELU:
        return dy * (float)(z[i] > 0 ? SELU_SCALE : SELU_SCALE * SELU_ALPHA * exp((double)z[i]));
    case DT_NN_ACT_GELU: {
        double x = z[i];
        double g = 0.5 * (1.0 + erf(x * SQRT1_2)) + x * exp(-0.5 * x * x) * INV_SQRT_2PI;
        return dy * (float)g;
    }
    case DT_NN_ACT_SWISH: {
        float s = sigmoid_d(z[i]);
        return dy * (s + z[i] * s * (1.0f - s));
    }
    case DT_NN_ACT_LEAKY_RELU:
        return z[i] >= 0 ? dy : a.alpha * dy;
    case DT_NN_ACT_RELU_CAPPED:
        if (clip)
            return z[i] > 0 && z[i] < a.max_value ? dy : 0.0f;
        return dy * relu_layer_grad_d(a, z[i]);
    default: /* LINEAR */
        return dy;
    }
}

/* Write or add; never 0 * dz, which would keep a NaN of stale memory. */
static __global__ void act_bwd_k(dt_nn_act_p a, bool clip, const float *z, const float *y,
                                 const float *dy, float *dz, size_t n, bool acc)
{
    DT_CU_FOR(i, n)
    {
        float v = act_grad(a, clip, z, y, dy[i], i);
        dz[i] = acc ? __fadd_rn(dz[i], v) : v;
    }
}

/* dz = y (dy - sum_j dy_j y_j) per row, the sum in double (warp per row, as softmax_k); dz may
 * alias dy (acc false): each lane writes only the columns it read. */
static __global__ void softmax_bwd_k(const float *y, const float *dy, float *dz, size_t rows,
                                     int cols, bool acc)
{
    unsigned lane = threadIdx.x & 31u, wpb = blockDim.x / 32;
    for (size_t r = (size_t)blockIdx.x * wpb + threadIdx.x / 32; r < rows;
         r += (size_t)gridDim.x * wpb) {
        const float *yr = y + r * (size_t)cols, *dr = dy + r * (size_t)cols;
        float *zr = dz + r * (size_t)cols;
        double s = 0;
        for (int j = (int)lane; j < cols; j += 32)
            s += (double)dr[j] * yr[j];
        float fs = (float)warp_sum(s);
        for (int j = (int)lane; j < cols; j += 32) {
            float v = __fmul_rn(yr[j], dr[j] - fs);
            zr[j] = acc ? __fadd_rn(zr[j], v) : v;
        }
    }
}

static void cu_act_bwd(const dt_nn_act_p *a, const float *z, const float *y, const float *dy,
                       float *dz, size_t rows, int cols, bool acc)
{
    size_t n = rows * (size_t)(cols > 0 ? cols : 0);
    if (n == 0)
        return;
    if (a->kind == DT_NN_ACT_SOFTMAX) {
        softmax_bwd_k<<<row_blocks(rows), DT_CU_THREADS, 0, dt_cu_stream()>>>(y, dy, dz, rows, cols,
                                                                              acc);
        DT_CU_LAUNCH(softmax_bwd_k);
        return;
    }
    bool clip = a->kind == DT_NN_ACT_RELU_CAPPED && relu_clip_only(a);
    act_bwd_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(*a, clip, z, y, dy, dz, n,
                                                                     acc);
    DT_CU_LAUNCH(act_bwd_k);
}

/* --- dropout ---------------------------------------------------------------------------------- */

/* Element i keeps iff its counter-based draw (dropout_hash.h) is >= rate: the CPU's mask. */
static __global__ void dropout_k(const float *x, float *y, float *mask, size_t n, float rate,
                                 float keep, uint64_t key)
{
    DT_CU_FOR(i, n)
    {
        float m = dt__nn_dropout_u(key, i) >= rate ? keep : 0.0f;
        mask[i] = m;
        y[i] = __fmul_rn(x[i], m);
    }
}

static void cu_dropout_fwd(const float *x, float *y, float *mask, size_t n, float rate, dt_rng *rng)
{
    /* one key per call, n == 0 included, so the rng stream is the CPU's */
    uint64_t key = dt__nn_dropout_key(rng);
    float keep = 1.0f / (1.0f - rate);
    if (n == 0)
        return;
    dropout_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(x, y, mask, n, rate, keep,
                                                                     key);
    DT_CU_LAUNCH(dropout_k);
}

/* The key from device memory (a graph replays the step with each step's key). */
static __global__ void dropout_key_k(const float *x, float *y, float *mask, size_t n, float rate,
                                     float keep, const uint64_t *key)
{
    uint64_t k = *key;
    DT_CU_FOR(i, n)
    {
        float m = dt__nn_dropout_u(k, i) >= rate ? keep : 0.0f;
        mask[i] = m;
        y[i] = __fmul_rn(x[i], m);
    }
}

static void cu_dropout_fwd_key(const float *x, float *y, float *mask, size_t n, float rate,
                               const uint64_t *key)
{
    float keep = 1.0f / (1.0f - rate);
    if (n == 0)
        return;
    dropout_key_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(x, y, mask, n, rate, keep,
                                                                         key);
    DT_CU_LAUNCH(dropout_key_k);
}

/* --- vector ops ------------------------------------------------------------------------------- */

static __global__ void axpby_k(size_t n, float a, const float *x, float b, float *y)
{
    DT_CU_FOR(i, n)
    {
        y[i] = __fadd_rn(__fmul_rn(a, x[i]), __fmul_rn(b, y[i]));
    }
}

static void cu_axpby(size_t n, float a, const float *x, float b, float *y)
{
    if (n == 0)
        return;
    axpby_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, a, x, b, y);
    DT_CU_LAUNCH(axpby_k);
}

static __global__ void mul_k(size_t n, const float *x, const float *m, float *y, bool acc)
{
    DT_CU_FOR(i, n)
    {
        float v = __fmul_rn(x[i], m[i]);
        y[i] = acc ? __fadd_rn(y[i], v) : v;
    }
}

static void cu_mul(size_t n, const float *x, const float *m, float *y, bool acc)
{
    if (n == 0)
        return;
    mul_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, x, m, y, acc);
    DT_CU_LAUNCH(mul_k);
}

static __global__ void add_k(size_t n, const float *x, float *y)
{
    DT_CU_FOR(i, n)
    {
        y[i] = __fadd_rn(y[i], x[i]);
    }
}

static void cu_copy(size_t n, const float *x, float *y, bool acc)
{
    if (n == 0)
        return;
    if (acc) {
        add_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, x, y);
        DT_CU_LAUNCH(add_k);
    } else if (x != y) {
        DT_CU(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, dt_cu_stream()));
    }
}

/* One thread per element of y; ldx 0 makes every row read x's one row. */
static __global__ void copy2d_k(size_t n, int cols, const float *x, int ldx, float *y, int ldy,
                                bool acc)
{
    DT_CU_FOR(i, n)
    {
        size_t r = i / (size_t)cols, j = i % (size_t)cols;
        float v = x[r * (size_t)ldx + j];
        float *d = y + r * (size_t)ldy + j;
        *d = acc ? __fadd_rn(*d, v) : v;
    }
}

static void cu_copy2d(size_t rows, int cols, const float *x, int ldx, float *y, int ldy, bool acc)
{
    size_t n = rows * (size_t)(cols > 0 ? cols : 0);
    if (n == 0)
        return;
    copy2d_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, cols, x, ldx, y, ldy, acc);
    DT_CU_LAUNCH(copy2d_k);
}

static __global__ void fill_k(size_t n, float v, float *y)
{
    DT_CU_FOR(i, n)
    {
        y[i] = v;
    }
}

static void cu_fill(size_t n, float v, float *y)
{
    if (n == 0)
        return;
    fill_k<<<dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()>>>(n, v, y);
    DT_CU_LAUNCH(fill_k);
}

/* One thread per element of y. Loads and stores of 32-bit words: int32 labels pass unchanged. */
static __global__ void gather_k(const float *x, const int32_t *rows, size_t n, size_t cols,
                                float *y)
{
    DT_CU_FOR(i, n * cols)
    {
        size_t r = i / cols, c = i - r * cols;
        y[i] = x[(size_t)rows[r] * cols + c];
    }
}

static void cu_gather(const float *x, const int32_t *rows, int n, size_t cols, float *y)
{
    if (n <= 0 || cols == 0)
        return;
    size_t total = (size_t)n * cols;
    gather_k<<<dt_cu_blocks(total), DT_CU_THREADS, 0, dt_cu_stream()>>>(x, rows, (size_t)n, cols,
                                                                        y);
    DT_CU_LAUNCH(gather_k);
}

void dt_cu_fill_elem(dt_nn_ops *o)
{
    o->gather = cu_gather;
    o->bias_add = cu_bias_add;
    o->bias_grad = cu_bias_grad;
    o->act_fwd = cu_act_fwd;
    o->act_bwd = cu_act_bwd;
    o->dropout_fwd = cu_dropout_fwd;
    o->dropout_fwd_key = cu_dropout_fwd_key;
    o->axpby = cu_axpby;
    o->mul = cu_mul;
    o->copy = cu_copy;
    o->copy2d = cu_copy2d;
    o->fill = cu_fill;
}
