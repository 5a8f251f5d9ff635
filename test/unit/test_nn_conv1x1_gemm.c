/* test_nn_conv1x1_gemm.c - a 1x1 Conv2D's products on the CPU's packed FMA kernels
 * (layers_conv.c's gemm_1x1: the kernel packed once, the input in blocks of rows): the forward
 * must give exactly the bits of a scalar fmaf chain over the input channels, on AVX2 and on
 * AVX-512, over more rows than one block holds and with a ragged last panel; the input
 * gradient (the transposed kernel packed) is checked against finite differences. */
#include "test_nn_util.h"

#include "nn/ops_cpu.h"

#include <math.h>

static const char *pw_model(void)
{
    return nn_seq("9, 7, 37",
                  "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"pw\", \"filters\": 45, "
                  "\"kernel_size\": 1, \"use_bias\": false}}",
                  NULL);
}

DT_TEST(nn_conv1x1_packed_gemm_equals_fmaf_chain)
{
    /* 30 samples of 9 x 7: 1,890 rows (blocks of 1,328 at 37 channels, so two), 45 filters:
     * panels of 32 and 13 columns */
    const int n = 30, rows = n * 9 * 7, K = 37, F = 45;
    /* the CPU's table whatever DTRAIN_OPS says: the emulated GPU runs gemm */
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts mo = {.seed = 5, .ops = dt_nn_ops_cpu()};
    const char *json = pw_model();
    ASSERT_OK(dt_model_from_json(json, strlen(json), &mo, &m, &err), &err);
    size_t nw;
    float *w = nn_weight_get(m, "pw/kernel", &nw);
    ASSERT_EQ(nw, (size_t)K * F);
    float *x = malloc((size_t)rows * K * sizeof(float)),
          *y = malloc((size_t)rows * F * sizeof(float));
    float *ref = malloc((size_t)rows * F * sizeof(float));
    dt_rng r;
    dt_rng_seed(&r, 9);
    for (size_t i = 0; i < (size_t)rows * K; i++)
        x[i] = (float)dt_rng_normal(&r);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < F; j++) {
            float s = 0.0f;
            for (int q = 0; q < K; q++)
                s = fmaf(x[(size_t)i * K + q], w[(size_t)q * F + j], s);
            ref[(size_t)i * F + j] = s;
        }
    int levels = 0;
    for (int level = 2; level <= 3; level++) {
        if (!dt__nn_cpu_rnn_gemm_isa(level))
            continue; /* the CPU lacks it */
        memset(y, 0, (size_t)rows * F * sizeof(float));
        ASSERT_OK(dt_model_predict(m, x, n, y, &err), &err);
        ASSERT_EQ(memcmp(y, ref, (size_t)rows * F * sizeof(float)), 0);
        levels++;
    }
    ASSERT_TRUE(dt__nn_cpu_rnn_gemm_isa(0));
    printf("%d rows x %d filters (k %d): the fmaf chain's bits on %d kernel level(s)\n", rows, F, K,
           levels);
    free(x), free(y), free(ref), free(w);
    dt_model_free(m);
}

DT_TEST(nn_conv1x1_packed_gemm_input_gradient)
{
    /* the second 1x1 conv's input gradient (dz kernel^T, the kernel packed transposed) feeds
     * the first one's kernel gradient: both against finite differences */
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    const char *json =
        nn_seq("3, 4, 5",
               "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 37, \"kernel_size\": 1}}",
               "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 6, \"kernel_size\": 1, "
               "\"activation\": \"tanh\"}}",
               "{\"class_name\": \"Flatten\", \"config\": {}}",
               "{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}", NULL);
    ASSERT_GT(nn_gradcheck(json, loss, 3, 1e-2, 3e-4, 4e-3), 0);
}
