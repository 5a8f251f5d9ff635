/* fuzz_keras.c - Keras model JSON (model.to_json(), Keras 2 and 3, Sequential and Functional):
 * dt_model_from_json, then, for a model that builds, one training step (MSE against zeros, so
 * any output shape will do) and one prediction, so a shape the parser let through is also
 * computed on.
 *
 * The CPU backend is wrapped so that one allocation over FZ_MAX_ALLOC fails (DT_ENOMEM): a model
 * may lawfully ask for up to DT_MAX_NN_PARAMS floats, which is not what this target tests, and a
 * refused allocation exercises the out-of-memory paths instead. */
#include "common.h"

#include "nn/model.h"

#include <stdlib.h>
#include <string.h>

#define FZ_MAX_ALLOC (16u << 20)  /* bytes per backend allocation */
#define FZ_MAX_IO    (256u << 10) /* input or output floats per sample worth a step */

static dt_nn_ops capped;

static void *capped_alloc(size_t bytes)
{
    return bytes > FZ_MAX_ALLOC ? NULL : dt_nn_ops_cpu()->alloc(bytes);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    capped = *dt_nn_ops_cpu();
    capped.alloc = capped_alloc;
    return 0;
}

static void step(dt_model *m)
{
    size_t in = dt_model_input_size(m), out = dt_model_output_size(m);
    if (in == 0 || in > FZ_MAX_IO || out == 0 || out > FZ_MAX_IO)
        return;
    float *x = malloc(2 * in * sizeof(float)), *y = calloc(2 * out, sizeof(float));
    if (x && y) {
        for (size_t i = 0; i < 2 * in; i++)
            x[i] = (float)(i % 7) * 0.25f - 0.5f;
        dt_err err = {0};
        dt_loss loss = {.kind = DT_NN_LOSS_MSE};
        dt_model_batch b = {.x = x, .targets = y, .n = 2};
        dt_step_stats s;
        if (dt_model_train_step(m, &loss, &b, 2, &s, &err) == DT_OK)
            dt_model_predict(m, x, 1, y, &err);
    }
    free(x);
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dt_model_opts o = {.seed = 7, .ops = &capped};
    dt_model *m = NULL;
    dt_err err = {0};
    if (dt_model_from_json((const char *)data, size, &o, &m, &err) != DT_OK)
        return 0;
    size_t total, trainable, frozen;
    dt_model_param_counts(m, &total, &trainable, &frozen);
    for (size_t i = 0; i < dt_model_layer_count(m); i++) {
        dt_model_layer l;
        dt_model_layer_info(m, i, &l);
    }
    step(m);
    dt_model_free(m);
    return 0;
}
