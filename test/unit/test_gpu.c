/* test_gpu.c - the CUDA backend's loader and GEMM. The loader test runs everywhere: without a
 * GPU it must say why there is none (no library, no driver, no device) instead of failing. */
#include "test_gpu_util.h"

#include <stdio.h>

DT_TEST(gpu_loader_says_why)
{
    char why[512] = "";
    int n = dt_nn_gpu_count(why, sizeof why);
    ASSERT_GE(n, 0);
    if (n == 0) {
        /* CI: no driver or device, or a build without nvcc; never an empty reason */
        ASSERT_TRUE(why[0] != '\0');
        dt_err err = {0};
        dt_nn_gpu_dev d;
        ASSERT_TRUE(dt_nn_gpu_info(0, &d, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, "/gpu:0");
        const dt_nn_ops *ops = NULL;
        ASSERT_TRUE(dt_nn_gpu_bind(0, false, &ops, &err) != DT_OK);
        ASSERT_TRUE(ops == NULL);
        printf("no GPU here: %s\n", why);
        return;
    }
    dt_err err = {0};
    dt_nn_gpu_dev d;
    ASSERT_OK(dt_nn_gpu_info(0, &d, &err), &err);
    ASSERT_TRUE(d.name[0] != '\0');
    ASSERT_GT(d.sms, 0);
    ASSERT_TRUE(dt_nn_gpu_info(n, &d, &err) != DT_OK);
    ASSERT_CONTAINS(err.msg, "visible GPU");
    printf("%d GPU(s); /gpu:0 %s, cc %d.%d, %d SMs, %.1f GiB, driver %d, runtime %d\n", n, d.name,
           d.cc_major, d.cc_minor, d.sms, (double)d.mem / (1u << 30), d.driver, d.runtime);
}

/* Row-major GEMM in every transpose combination, odd sizes, padded leading dimensions, alpha
 * and beta, against the CPU table (relative L2 <= 1e-4, the bound for GEMM). */
DT_TEST(gpu_gemm_matches_cpu)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 33, 129}, {300, 257, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
                size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb,
                       nc = (size_t)m * ldc;
                float *a = gpu_randn(na, 1, 1 + s), *b = gpu_randn(nb, 1, 2 + s),
                      *cc = gpu_randn(nc, 1, 3 + s);
                float *da = gpu_up(g, a, na), *db = gpu_up(g, b, nb), *dc = gpu_up(g, cc, nc);
                c->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 0.25f, cc, ldc);
                g->gemm(ta, tb, m, n, k, 0.5f, da, lda, db, ldb, 0.25f, dc, ldc);
                GPU_EXPECT_CLOSE(g, dc, cc, nc, 1e-4);
                g->free(da);
                g->free(db);
                g->free(dc);
                free(a);
                free(b);
                free(cc);
            }
    GPU_SYNC();
    dt_nn_gpu_unbind();
}
