/* test_nn_hook.c - the grad-ready hook: each call hands over a tail of the gradient buffer that
 * no later part of the backward changes, offsets strictly decrease and the last one is 0. */
#include "test_nn_util.h"

typedef struct hook_rec {
    dt_model *m;
    int calls;
    size_t offsets[64];
    float *snap[64]; /* grads[offset, n_params) at the call */
} hook_rec;

static void on_ready(void *ctx, size_t offset)
{
    hook_rec *r = ctx;
    ASSERT_LT(r->calls, 64);
    size_t np;
    const float *g = dt_model_grads(r->m, &np);
    ASSERT_LT(offset, np);
    r->offsets[r->calls] = offset;
    r->snap[r->calls] = nn_dev_get(r->m, g + offset, np - offset);
    r->calls++;
}

/* Two steps (the second one with other data, so stale grads would show) and the checks. */
static void check_hook(const char *json, const char *path)
{
    dt_err err = {0};
    dt_model *m = NULL;
    if (path) {
        char full[512];
        snprintf(full, sizeof full, "%s/%s", getenv("DT_SRC_DIR") ? getenv("DT_SRC_DIR") : ".",
                 path);
        dt_model_opts o = {.seed = 5};
        ASSERT_OK(dt_model_from_file(full, &o, &m, &err), &err);
    } else {
        m = nn_build(json, 5);
    }
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    size_t np;
    dt_model_params(m, &np);
    for (int step = 0; step < 2; step++) {
        hook_rec r = {.m = m};
        dt_model_set_grad_ready(m, on_ready, &r);
        nn_data d = nn_random(m, 3, loss.kind, 20 + (uint64_t)step);
        dt_model_batch b = nn_batch(&d, loss.kind);
        ASSERT_OK(dt_model_train_step(m, &loss, &b, 4, NULL, &err), &err);
        ASSERT_GT(r.calls, 1);
        ASSERT_EQ(r.offsets[r.calls - 1], 0);
        float *g = nn_grads_host(m, NULL);
        for (int k = 0; k < r.calls; k++) {
            if (k > 0)
                ASSERT_LT(r.offsets[k], r.offsets[k - 1]);
            size_t o = r.offsets[k];
            ASSERT_EQ(memcmp(r.snap[k], g + o, sizeof(float) * (np - o)), 0);
            free(r.snap[k]);
        }
        free(g);
        /* Each call covers whole weights: its offset starts a trainable weight. */
        for (int k = 0; k < r.calls; k++) {
            bool starts = false;
            for (size_t i = 0; i < dt_model_weight_count(m); i++) {
                const dt_model_weight *w = dt_model_weight_at(m, i);
                starts = starts || (w->trainable && w->offset == r.offsets[k]);
            }
            ASSERT_EQ(starts, true);
        }
        nn_data_free(&d);
    }
    /* Cleared: no more calls. */
    hook_rec r = {.m = m};
    dt_model_set_grad_ready(m, on_ready, &r);
    dt_model_set_grad_ready(m, NULL, NULL);
    nn_data d = nn_random(m, 2, loss.kind, 9);
    dt_model_batch b = nn_batch(&d, loss.kind);
    ASSERT_OK(dt_model_train_step(m, &loss, &b, 2, NULL, &err), &err);
    ASSERT_EQ(r.calls, 0);
    nn_data_free(&d);
    dt_model_free(m);
}

DT_TEST(nn_hook_grad_ready_sequential_with_regularizers)
{
    /* Regularizer gradients are added per layer, before the hook passes the layer on. */
    check_hook(
        nn_seq("6, 6, 2",
               "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 3, \"kernel_size\": 3, "
               "\"activation\": \"relu\", \"kernel_regularizer\": {\"class_name\": \"L1L2\", "
               "\"config\": {\"l1\": 0.01, \"l2\": 0.02}}}}",
               "{\"class_name\": \"BatchNormalization\", \"config\": {}}",
               "{\"class_name\": \"Flatten\", \"config\": {}}",
               "{\"class_name\": \"Dense\", \"config\": {\"units\": 4, \"bias_regularizer\": "
               "\"l2\", \"bias_initializer\": \"ones\"}}",
               NULL),
        NULL);
}

DT_TEST(nn_hook_grad_ready_residual_functional)
{
    check_hook(NULL, "config/models/resnet_small.json");
}
