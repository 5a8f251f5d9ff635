/* test_gpu_util.h - helpers of the GPU op tests: every kernel of the CUDA table against the CPU
 * table on the same random inputs. The tests skip (exit 7) where no GPU is visible (CI), and
 * run in one batch on a lent GPU machine (scripts/gpu/test.sh). Header-only (static). */
#ifndef DT_TEST_GPU_UTIL_H
#define DT_TEST_GPU_UTIL_H

#include "core/rng.h"
#include "dt_test.h"
#include "nn/gpu.h"
#include "nn/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The CUDA table bound to /gpu:0 on this thread, or a skip naming why there is none. */
static inline const dt_nn_ops *gpu_ops(void)
{
    char why[512] = "";
    if (dt_nn_gpu_count(why, sizeof why) == 0)
        DT_SKIP("no GPU: %s", why);
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_nn_gpu_bind(0, false, &g, &err), &err);
    return g;
}

/* Fails the test with the kernel's error if the GPU met one since the last sync. */
#define GPU_SYNC()                                                                                 \
    do {                                                                                           \
        dt_err gerr_ = {0};                                                                        \
        ASSERT_OK(dt_nn_gpu_sync(&gerr_), &gerr_);                                                 \
    } while (0)

/* n floats from a normal distribution (scale s), seeded. Host memory, malloc'd. */
static inline float *gpu_randn(size_t n, float s, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = s * (float)dt_rng_normal(&r);
    return x;
}

/* A device copy of n host floats (or bytes of anything with gpu_up_bytes). */
static inline void *gpu_up_bytes(const dt_nn_ops *g, const void *h, size_t bytes)
{
    void *d = g->alloc(bytes ? bytes : 1);
    ASSERT_TRUE(d != NULL);
    g->upload(d, h, bytes);
    return d;
}
static inline float *gpu_up(const dt_nn_ops *g, const float *h, size_t n)
{
    return gpu_up_bytes(g, h, n * sizeof(float));
}

/* A device buffer of n floats filled with NaN: a kernel that leaves an element unwritten fails
 * the comparison. */
static inline float *gpu_poison(const dt_nn_ops *g, size_t n)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    float *d = gpu_up(g, h, n);
    free(h);
    return d;
}

/* The device buffer d (n floats) downloaded into a new host buffer. */
static inline float *gpu_down(const dt_nn_ops *g, const float *d, size_t n)
{
    float *h = malloc(sizeof(float) * (n ? n : 1));
    g->download(h, d, n * sizeof(float));
    return h;
}

/* ||a - ref|| / ||ref|| in double; a NaN anywhere gives INFINITY; ref all zero compares the
 * absolute norm. */
static inline double gpu_rel_l2(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(ref[i]))
            return INFINITY;
        if (isnan(a[i]))
            continue;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The device buffer d (n floats) against the CPU's result ref within tol (relative L2). */
#define GPU_EXPECT_CLOSE(g, d, ref, n, tol)                                                        \
    do {                                                                                           \
        float *h_ = gpu_down(g, d, n);                                                             \
        GPU_SYNC();                                                                                \
        double e_ = gpu_rel_l2(h_, ref, n);                                                        \
        if (!(e_ <= (tol)))                                                                        \
            fprintf(stderr, "%s: relative L2 error %.3g > %.3g\n", #d, e_, (double)(tol));         \
        free(h_);                                                                                  \
        ASSERT_FLE(e_, (tol));                                                                     \
    } while (0)

/* The device buffer d (n floats) with the bits of the CPU's ref: for the kernels that do the
 * CPU's float operations in the CPU's order, each rounded on its own. Names the first
 * difference. */
static inline void gpu_same_bits(const dt_nn_ops *g, const float *d, const float *ref, size_t n,
                                 const char *what)
{
    float *h = gpu_down(g, d, n);
    GPU_SYNC();
    for (size_t i = 0; i < n; i++)
        if (memcmp(&h[i], &ref[i], sizeof(float)) != 0) {
            fprintf(stderr, "%s: element %zu of %zu is %.9g, the CPU's %.9g\n", what, i, n,
                    (double)h[i], (double)ref[i]);
            ASSERT_TRUE(!"the CPU's bits");
        }
    free(h);
}

#endif
