/*
 * seq.cu - the sequence kernels (nn/ops.h): Embedding's gather and its transpose, the masked mean
 * over timesteps, attention masking, one timestep of the recurrent cells, CategoryEncoding.
 *
 * References: lib/nn/ops_cpu_seq.c, ops_cpu_attn.c, ops_cpu_rnn.c, ops_cpu_preproc.c. Sums run
 * in the CPU's order, so the gathers and means give its bits; the cells' sigmoid and tanh are
 * CUDA's expf and tanhf (the CPU's vectorised ones differ by a few ulp).
 *
 * Embedding's backward without float atomics: the (row, i) pairs are sorted by row with CUB's
 * stable radix sort (i stays in order within a row), a pass finds each table row's segment, and
 * each (row, column) sums its segment's dy rows in index order - the CPU's order, its bits. A
 * per-row scan over all ids would cost rows * n; the sort costs n whatever the vocabulary.
 * CategoryEncoding writes a sample's row from one thread (the counts are then plain adds).
 */
#include "nn/cuda/internal.cuh"

#include "nn/cell_act.h"

#include <cub/device/device_radix_sort.cuh>
#include <math.h>
#include <stdint.h>

#define LAUNCH_1D(n) dt_cu_blocks(n), DT_CU_THREADS, 0, dt_cu_stream()

/* ---- bad ids ------------------------------------------------------------------------------ */

/* The row an id names, as the CPU's id_row (Keras's cast truncates); -1 when none. */
static __device__ __forceinline__ int id_row(float v, int rows)
{
    float t = truncf(v);
    return (t >= 0.0f && t < (float)rows) ? (int)t : -1;
}

/* bad = {count, first bad id, its index} over ids[0, n), one block (a fixed tree: the count is
 * an integer sum and the first index a minimum, both order-free). embed: id_row < 0 is bad;
 * else CategoryEncoding's rule, !(v > -1 && v < lim). */
static __global__ void k_bad(const float *ids, size_t n, int lim, bool embed, float *bad)
{
    __shared__ unsigned long long cnt[DT_CU_THREADS];
    __shared__ size_t first[DT_CU_THREADS];
    unsigned t = threadIdx.x;
    unsigned long long c = 0;
    size_t f = SIZE_MAX;
    for (size_t i = t; i < n; i += blockDim.x) {
        float v = ids[i];
        bool b = embed ? id_row(v, lim) < 0 : !(v > -1.0f && v < (float)lim);
        if (b) {
            c++;
            f = i < f ? i : f;
        }
    }
    cnt[t] = c;
    first[t] = f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            cnt[t] += cnt[t + s];
            first[t] = first[t + s] < first[t] ? first[t + s] : first[t];
        }
        __syncthreads();
    }
    if (t == 0) {
        bad[0] = (float)cnt[0];
        bad[1] = cnt[0] ? ids[first[0]] : 0.0f;
        bad[2] = cnt[0] ? (float)first[0] : 0.0f;
    }
}

static void launch_bad(const float *ids, size_t n, int lim, bool embed, float *bad)
{
    k_bad<<<1, DT_CU_THREADS, 0, dt_cu_stream()>>>(ids, n, lim, embed, bad);
    DT_CU_LAUNCH(embed ? "embed_fwd bad ids" : "cat_encode bad ids");
}

/* ---- embedding ---------------------------------------------------------------------------- */

static __global__ void k_embed_fwd(const float *ids, size_t n, const float *table, int rows,
                                   int dim, float *y, float *mask)
{
    DT_CU_FOR(e, n * (size_t)dim)
    {
        size_t i = e / (size_t)dim, j = e % (size_t)dim;
        int r = id_row(ids[i], rows);
        y[e] = r >= 0 ? table[(size_t)r * (size_t)dim + j] : 0.0f;
    }
    if (mask) {
        DT_CU_FOR(i, n)
        {
            mask[i] = ids[i] != 0.0f ? 1.0f : 0.0f;
        }
    }
}

static void cu_embed_fwd(const float *ids, size_t n, const float *table, int rows, int dim,
                         float *y, float *mask, float *bad)
{
    if (n > 0 && dim >= 0) {
        size_t work = n * (size_t)dim > n ? n * (size_t)dim : n;
        k_embed_fwd<<<LAUNCH_1D(work)>>>(ids, n, table, rows, dim, y, mask);
        DT_CU_LAUNCH("embed_fwd");
    }
    launch_bad(ids, n, rows, true, bad); /* written every call, n == 0 included */
}

/* The sort's input: key = the row ids[i] names, or `rows` (sorted last) for a bad id; value i. */
static __global__ void k_embed_keys(const float *ids, size_t n, int rows, uint32_t *keys,
                                    uint32_t *vals)
{
    DT_CU_FOR(i, n)
    {
        int r = id_row(ids[i], rows);
        keys[i] = r >= 0 ? (uint32_t)r : (uint32_t)rows;
        vals[i] = (uint32_t)i;
    }
}

/* seg[r] = the first sorted position whose key is >= r, for r in [0, rows]. */
static __global__ void k_embed_segs(const uint32_t *keys, size_t n, int rows, uint32_t *seg)
{
    DT_CU_FOR(r, (size_t)rows + 1)
    {
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < (uint32_t)r)
                lo = mid + 1;
            else
                hi = mid;
        }
        seg[r] = (uint32_t)lo;
    }
}

static __global__ void k_embed_gather(const uint32_t *seg, const uint32_t *vals, const float *dy,
                                      int rows, int dim, float *dtable)
{
    DT_CU_FOR(e, (size_t)rows * (size_t)dim)
    {
        size_t r = e / (size_t)dim, j = e % (size_t)dim;
        float acc = 0;
        for (uint32_t s = seg[r]; s < seg[r + 1]; s++)
            acc += dy[(size_t)vals[s] * (size_t)dim + j];
        dtable[e] = acc;
    }
}

static int bits_for(uint32_t v)
{
    int b = 0;
    while (b < 32 && (v >> b) != 0)
        b++;
    return b ? b : 1;
}

static void cu_embed_bwd(const float *ids, size_t n, const float *dy, int rows, int dim,
                         float *dtable)
{
    if (rows <= 0 || dim <= 0)
        return;
    size_t total = (size_t)rows * (size_t)dim;
    if (n == 0) {
        DT_CU(cudaMemsetAsync(dtable, 0, sizeof(float) * total, dt_cu_stream()));
        return;
    }
    if (n >= UINT32_MAX) {
        dt_cu_fail("embed_bwd", __FILE__, __LINE__, "2^32 ids or more in one batch");
        return;
    }
    cub::DoubleBuffer<uint32_t> q0(NULL, NULL), q1(NULL, NULL);
    size_t tmp = 0;
    int bits = bits_for((uint32_t)rows);
    DT_CU(cub::DeviceRadixSort::SortPairs(NULL, tmp, q0, q1, (uint32_t)n, 0, bits, dt_cu_stream()));
    size_t arr = (n * sizeof(uint32_t) + 255) / 256 * 256,
           segb = (((size_t)rows + 1) * sizeof(uint32_t) + 255) / 256 * 256;
    char *s = (char *)dt_cu_scratch(4 * arr + segb + tmp);
    if (!s)
        return;
    uint32_t *k0 = (uint32_t *)s, *k1 = (uint32_t *)(s + arr), *v0 = (uint32_t *)(s + 2 * arr),
             *v1 = (uint32_t *)(s + 3 * arr), *seg = (uint32_t *)(s + 4 * arr);
    k_embed_keys<<<LAUNCH_1D(n)>>>(ids, n, rows, k0, v0);
    DT_CU_LAUNCH("embed_bwd keys");
    cub::DoubleBuffer<uint32_t> kb(k0, k1), vb(v0, v1);
    DT_CU(cub::DeviceRadixSort::SortPairs(s + 4 * arr + segb, tmp, kb, vb, (uint32_t)n, 0, bits,
                                          dt_cu_stream()));
    k_embed_segs<<<LAUNCH_1D((size_t)rows + 1)>>>(kb.Current(), n, rows, seg);
    DT_CU_LAUNCH("embed_bwd segments");
    k_embed_gather<<<LAUNCH_1D(total)>>>(seg, vb.Current(), dy, rows, dim, dtable);
    DT_CU_LAUNCH("embed_bwd gather");
}

/* ---- masked mean over timesteps ----------------------------------------------------------- */

/* 1 / (sample s's real steps) as the CPU's mean_inv: the mask summed in double in step order. */
static __device__ float mean_inv(const float *mask, int s, int t)
{
    if (!mask)
        return 1.0f / (float)t;
    double k = 0;
    for (int i = 0; i < t; i++)
        k += mask[(size_t)s * t + i];
    return k > 0 ? (float)(1.0 / k) : 0.0f;
}

static __global__ void k_seq_mean(int n, int t, int c, const float *x, const float *mask, float *y)
{
    DT_CU_FOR(e, (size_t)n * (size_t)c)
    {
        int s = (int)(e / (size_t)c);
        size_t j = e % (size_t)c;
        float acc = 0;
        for (int i = 0; i < t; i++) {
            /* the CPU skips a step whose mask is 0 and adds the others unweighted */
            if (mask && mask[(size_t)s * t + i] * 1.0f == 0.0f)
                continue;
            acc += x[((size_t)s * t + i) * (size_t)c + j];
        }
        y[e] = acc * mean_inv(mask, s, t);
    }
}

static __global__ void k_seq_inv(int n, int t, const float *mask, float *inv)
{
    DT_CU_FOR(s, (size_t)n)
    {
        inv[s] = mean_inv(mask, (int)s, t);
    }
}

static __global__ void k_seq_mean_bwd(int n, int t, int c, const float *dy, const float *mask,
                                      const float *inv, float *dx, bool acc)
{
    DT_CU_FOR(e, (size_t)n * (size_t)t * (size_t)c)
    {
        size_t st = e / (size_t)c, s = st / (size_t)t, j = e % (size_t)c;
        float w = mask ? mask[st] * inv[s] : inv[s];
        dx[e] = (acc ? dx[e] : 0.0f) + __fmul_rn(w, dy[s * (size_t)c + j]);
    }
}

static void cu_seq_mean(int n, int t, int c, const float *x, const float *mask, float *y)
{
    if (n <= 0 || c <= 0)
        return;
    k_seq_mean<<<LAUNCH_1D((size_t)n * (size_t)c)>>>(n, t, c, x, mask, y);
    DT_CU_LAUNCH("seq_mean");
}

static void cu_seq_mean_bwd(int n, int t, int c, const float *dy, const float *mask, float *dx,
                            bool acc)
{
    if (n <= 0 || t <= 0 || c <= 0)
        return;
    float *inv = (float *)dt_cu_scratch(sizeof(float) * (size_t)n);
    if (!inv)
        return;
    k_seq_inv<<<LAUNCH_1D((size_t)n)>>>(n, t, mask, inv);
    DT_CU_LAUNCH("seq_mean_bwd weights");
    k_seq_mean_bwd<<<LAUNCH_1D((size_t)n * (size_t)t * (size_t)c)>>>(n, t, c, dy, mask, inv, dx,
                                                                     acc);
    DT_CU_LAUNCH("seq_mean_bwd");
}

/* ---- attention mask ----------------------------------------------------------------------- */

static __global__ void k_attn_mask(float *s, const float *qm, const float *vm, const float *km,
                                   int n, int heads, int tq, int tv, bool causal)
{
    DT_CU_FOR(e, (size_t)n * heads * tq * tv)
    {
        size_t q = e / (size_t)tv;
        int u = (int)(e % (size_t)tv), t = (int)(q % (size_t)tq);
        size_t b = q / (size_t)tq / (size_t)heads;
        bool off = (qm && qm[b * tq + t] == 0.0f) || (vm && vm[b * tv + u] == 0.0f) ||
                   (km && km[b * tv + u] == 0.0f) || (causal && u > t);
        if (off) /* Keras's (1 - mask) * -1e9 in float32, as the CPU adds it */
            s[e] += -1e9f;
    }
}

static void cu_attn_mask(float *s, const float *qm, const float *vm, const float *km, int n,
                         int heads, int tq, int tv, bool causal)
{
    if (n <= 0 || heads <= 0 || tq <= 0 || tv <= 0 || (!qm && !vm && !km && !causal))
        return;
    k_attn_mask<<<LAUNCH_1D((size_t)n * heads * tq * tv)>>>(s, qm, vm, km, n, heads, tq, tv,
                                                            causal);
    DT_CU_LAUNCH("attn_mask");
}

/* ---- recurrent cells ---------------------------------------------------------------------- */

/* The derivative at x whose activation is y = dt__nn_cell_act(x): sigmoid and tanh from y, as the
 * CPU. */
static __device__ float dact(dt_nn_cell_act k, float x, float y)
{
    switch (k) {
    case DT_NN_CACT_LINEAR:
        return 1;
    case DT_NN_CACT_RELU:
        return x > 0 ? 1.0f : 0.0f;
    case DT_NN_CACT_SIGMOID:
        return y * (1 - y);
    case DT_NN_CACT_TANH:
        return 1 - y * y;
    case DT_NN_CACT_HARD_SIGMOID2:
        return x > -2.5f && x < 2.5f ? 0.2f : 0.0f;
    case DT_NN_CACT_HARD_SIGMOID3:
        return x > -3.0f && x < 3.0f ? 1.0f / 6.0f : 0.0f;
    }
    return 1;
}

/* One thread per (row b, unit j): every gate of a unit is in that thread, so a step is
 * element-wise (the layer's GEMMs couple the units). */
static __global__ void k_rnn_fwd(dt_nn_rnn_step s, int G)
{
    int u = s.u;
    bool split = s.cell == DT_NN_CELL_GRU && !s.reset_after;
    bool final = !split || s.phase == 1; /* this call writes h1 */
    DT_CU_FOR(e, (size_t)s.n * (size_t)u)
    {
        size_t b = e / (size_t)u;
        int j = (int)(e % (size_t)u);
        bool real = !s.mask || s.mask[b * (size_t)s.ldm] != 0;
        float *a = s.a + b * (size_t)s.lda;
        const float *r = s.r + b * (size_t)(G * u);
        float h0 = s.h0[e], h1 = 0;
        if (!real) {
            h1 = h0;
            if (s.cell == DT_NN_CELL_LSTM)
                s.c1[e] = s.c0[e];
            if (s.q && !final)
                s.q[e] = 0;
        } else {
            switch (s.cell) {
            case DT_NN_CELL_SIMPLE:
                a[j] += r[j];
                h1 = dt__nn_cell_act(s.act, a[j]);
                break;
            case DT_NN_CELL_LSTM: {
                for (int g = 0; g < 4; g++)
                    a[g * u + j] += r[g * u + j];
                float i = dt__nn_cell_act(s.rec, a[j]), f = dt__nn_cell_act(s.rec, a[u + j]);
                float cc = dt__nn_cell_act(s.act, a[2 * u + j]),
                      o = dt__nn_cell_act(s.rec, a[3 * u + j]);
                float c1 = f * s.c0[e] + i * cc;
                s.c1[e] = c1;
                h1 = o * dt__nn_cell_act(s.act, c1);
                break;
            }
            case DT_NN_CELL_GRU:
                if (s.reset_after) {
                    a[j] += r[j];
                    a[u + j] += r[u + j];
                    float q = r[2 * u + j];
                    s.q[e] = q;
                    float z = dt__nn_cell_act(s.rec, a[j]), rr = dt__nn_cell_act(s.rec, a[u + j]);
                    float hh = dt__nn_cell_act(s.act, a[2 * u + j] + rr * q);
                    h1 = z * h0 + (1 - z) * hh;
                } else if (s.phase == 0) {
                    a[j] += r[j];
                    a[u + j] += r[u + j];
                    s.q[e] = dt__nn_cell_act(s.rec, a[u + j]) * h0;
                } else {
                    a[2 * u + j] += r[2 * u + j];
                    float z = dt__nn_cell_act(s.rec, a[j]),
                          hh = dt__nn_cell_act(s.act, a[2 * u + j]);
                    h1 = z * h0 + (1 - z) * hh;
                }
                break;
            }
        }
        if (final) {
            s.h1[e] = h1;
            if (s.y)
                s.y[b * (size_t)s.ldy + j] = (!real && s.zero_masked) ? 0.0f : h1;
        }
    }
}

static __global__ void k_rnn_bwd(dt_nn_rnn_step s, int G)
{
    int u = s.u;
    bool split = s.cell == DT_NN_CELL_GRU && !s.reset_after;
    DT_CU_FOR(e, (size_t)s.n * (size_t)u)
    {
        size_t b = e / (size_t)u;
        int j = (int)(e % (size_t)u);
        bool real = !s.mask || s.mask[b * (size_t)s.ldm] != 0;
        float *a = s.a + b * (size_t)s.lda;
        float *r = s.r ? s.r + b * (size_t)(G * u) : NULL;
        float h0 = s.h0[e];
        if (split && s.phase == 0) { /* the reset gate, given dq = d(a_h) U_h^T */
            if (!real) {
                a[u + j] = 0;
                continue;
            }
            float ar = a[u + j], rr = dt__nn_cell_act(s.rec, ar), dq = s.dq[e];
            a[u + j] = dq * h0 * dact(s.rec, ar, rr);
            s.dh[e] += dq * rr;
            continue;
        }
        bool use_dy = s.dy && (real || !s.zero_masked);
        float dh1 = s.dh[e] + (use_dy ? s.dy[b * (size_t)s.ldy + j] : 0.0f);
        if (!real) {
            for (int g = 0; g < G; g++) {
                a[g * u + j] = 0;
                if (r)
                    r[g * u + j] = 0;
            }
            s.dh[e] = dh1;
            continue;
        }
        switch (s.cell) {
        case DT_NN_CELL_SIMPLE: {
            float x = a[j];
            a[j] = dh1 * dact(s.act, x, dt__nn_cell_act(s.act, x));
            s.dh[e] = 0;
            break;
        }
        case DT_NN_CELL_LSTM: {
            float ai = a[j], af = a[u + j], ac = a[2 * u + j], ao = a[3 * u + j];
            float i = dt__nn_cell_act(s.rec, ai), f = dt__nn_cell_act(s.rec, af);
            float cc = dt__nn_cell_act(s.act, ac), o = dt__nn_cell_act(s.rec, ao);
            float c1 = s.c1[e], c0 = s.c0[e], t = dt__nn_cell_act(s.act, c1);
            float d = s.dc[e] + dh1 * o * dact(s.act, c1, t);
            a[j] = d * cc * dact(s.rec, ai, i);
            a[u + j] = d * c0 * dact(s.rec, af, f);
            a[2 * u + j] = d * i * dact(s.act, ac, cc);
            a[3 * u + j] = dh1 * t * dact(s.rec, ao, o);
            s.dc[e] = d * f;
            s.dh[e] = 0;
            break;
        }
        case DT_NN_CELL_GRU: {
            float az = a[j], z = dt__nn_cell_act(s.rec, az), dz = dact(s.rec, az, z);
            if (s.reset_after) {
                float ar = a[u + j], rr = dt__nn_cell_act(s.rec, ar), q = s.q[e];
                float ah = a[2 * u + j] + rr * q, hh = dt__nn_cell_act(s.act, ah);
                float dah = dh1 * (1 - z) * dact(s.act, ah, hh);
                a[j] = r[j] = dh1 * (h0 - hh) * dz;
                a[u + j] = r[u + j] = dah * q * dact(s.rec, ar, rr);
                a[2 * u + j] = dah;
                r[2 * u + j] = dah * rr;
            } else { /* phase 1: the update gate and the candidate */
                float ah = a[2 * u + j], hh = dt__nn_cell_act(s.act, ah);
                a[j] = dh1 * (h0 - hh) * dz;
                a[2 * u + j] = dh1 * (1 - z) * dact(s.act, ah, hh);
            }
            s.dh[e] = dh1 * z;
            break;
        }
        }
    }
}

static void cu_rnn_fwd(const dt_nn_rnn_step *s)
{
    if (s->n <= 0 || s->u <= 0)
        return;
    k_rnn_fwd<<<LAUNCH_1D((size_t)s->n * (size_t)s->u)>>>(*s, dt__nn_cell_gates(s->cell));
    DT_CU_LAUNCH("rnn_fwd");
}

static void cu_rnn_bwd(const dt_nn_rnn_step *s)
{
    if (s->n <= 0 || s->u <= 0)
        return;
    k_rnn_bwd<<<LAUNCH_1D((size_t)s->n * (size_t)s->u)>>>(*s, dt__nn_cell_gates(s->cell));
    DT_CU_LAUNCH("rnn_bwd");
}

/* ---- CategoryEncoding --------------------------------------------------------------------- */

/* One thread per sample over its t ids, in order (y zeroed before). */
static __global__ void k_cat_encode(const float *ids, int n, int t, int tokens, bool count,
                                    float *y)
{
    DT_CU_FOR(s, (size_t)n)
    {
        float *row = y + s * (size_t)tokens;
        for (int j = 0; j < t; j++) {
            float v = ids[s * (size_t)t + j];
            if (!(v > -1.0f && v < (float)tokens)) /* as Keras casts: toward zero */
                continue;
            float *cell = row + (int)v;
            *cell = count ? *cell + 1.0f : 1.0f;
        }
    }
}

static void cu_cat_encode(const float *ids, int n, int t, int tokens, dt_nn_cat_mode mode, float *y,
                          float *bad)
{
    size_t nt = n > 0 && t > 0 ? (size_t)n * (size_t)t : 0;
    if (n > 0 && tokens > 0) {
        DT_CU(cudaMemsetAsync(y, 0, sizeof(float) * (size_t)n * (size_t)tokens, dt_cu_stream()));
        if (t > 0) {
            k_cat_encode<<<LAUNCH_1D((size_t)n)>>>(ids, n, t, tokens, mode == DT_NN_CAT_COUNT, y);
            DT_CU_LAUNCH("cat_encode");
        }
    }
    launch_bad(ids, nt, tokens, false, bad);
}

void dt_cu_fill_seq(dt_nn_ops *o)
{
    o->embed_fwd = cu_embed_fwd;
    o->embed_bwd = cu_embed_bwd;
    o->seq_mean = cu_seq_mean;
    o->seq_mean_bwd = cu_seq_mean_bwd;
    o->attn_mask = cu_attn_mask;
    o->rnn_fwd = cu_rnn_fwd;
    o->rnn_bwd = cu_rnn_bwd;
    o->cat_encode = cu_cat_encode;
}
