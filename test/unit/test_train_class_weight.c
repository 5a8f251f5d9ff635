/* test_train_class_weight.c - $.fit.class_weight: parsing and refusals, the weighted loss and
 * gradient of a batch against its per-sample parts, and a job whose every class weighs 2
 * training as the same job with twice the SGD learning rate (the same bits). */
#include "test_nn_util.h"
#include "test_train_util.h"

#include <math.h>

/* tt_spec with "class_weight": cw inside $.fit. */
static const char *cw_spec(const char *optimizer, const char *cw)
{
    static char buf[16384];
    const char *base = tt_spec(2, 16, optimizer, NULL);
    const char *fit = strstr(base, "\"batch_size\": 16}");
    ASSERT_TRUE(fit != NULL);
    snprintf(buf, sizeof buf, "%.*s\"batch_size\": 16%s%s}%s", (int)(fit - base), base,
             cw ? ", \"class_weight\": " : "", cw ? cw : "", fit + strlen("\"batch_size\": 16}"));
    return buf;
}

DT_TEST(train_class_weight_parse)
{
    dt_jobspec s;
    tt_parse(cw_spec("\"sgd\"", "{\"0\": 1.5, \"3\": 0}"), &s);
    ASSERT_EQ(s.n_class_weight, 4);
    ASSERT_NEAR(s.class_weight[0], 1.5, 0);
    ASSERT_NEAR(s.class_weight[1], 1.0, 0); /* not named: Keras's 1 */
    ASSERT_NEAR(s.class_weight[2], 1.0, 0);
    ASSERT_NEAR(s.class_weight[3], 0.0, 0);
    dt_jobspec_destroy(&s);
    tt_parse(cw_spec("\"sgd\"", "null"), &s);
    ASSERT_EQ(s.n_class_weight, 0);
    dt_jobspec_destroy(&s);

    const char *bad[][2] = {
        {"{\"a\": 1}", "$.fit.class_weight.a: a class is an integer"},
        {"{\"-1\": 1}", "$.fit.class_weight.-1: a class is an integer"},
        {"{\"1.5\": 1}", "$.fit.class_weight.1.5: a class is an integer"},
        {"{\"70000\": 1}", "a class is an integer in 0..65535"},
        {"{\"1\": -2}", "$.fit.class_weight.1: expected a weight >= 0"},
        {"{\"1\": \"x\"}", "$.fit.class_weight.1: expected a weight >= 0"},
        {"{}", "$.fit.class_weight: give an object"},
        {"[1, 2]", "$.fit.class_weight: give an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *text = cw_spec("\"sgd\"", bad[i][0]);
        dt_err err = {0};
        dt_jobspec_roots r = {.data_root = dt_test_tmpdir(), .state_dir = dt_test_tmpdir()};
        ASSERT_TRUE(dt_jobspec_parse(text, strlen(text), &r, &s, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, bad[i][1]);
    }
}

/* A batch's weighted loss is sum w_i l_i / n and its gradient sum w_i g_i / n, from the loss
 * and gradient of each sample alone. */
DT_TEST(train_class_weight_batch_is_weighted_sum)
{
    const char *json = nn_seq("5",
                              "{\"class_name\": \"Dense\", \"config\": {\"units\": 4, "
                              "\"activation\": \"tanh\"}}",
                              "{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}", NULL);
    const dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    const float w[4] = {2.0f, 0.0f, 0.5f, 1.0f};
    dt_model *m = nn_build(json, 5);
    nn_data d = nn_random(m, 4, DT_NN_LOSS_SPARSE_CE, 8);
    size_t np;
    dt_model_grads(m, &np);
    double *want = calloc(np, sizeof *want), want_loss = 0;
    dt_err err = {0};
    dt_step_stats st;
    for (int i = 0; i < 4; i++) {
        dt_model_batch one = {.x = d.x + i * 5, .labels = d.labels + i, .n = 1};
        ASSERT_OK(dt_model_train_step(m, &loss, &one, 1, &st, &err), &err);
        want_loss += w[i] * st.loss / 4;
        float *g = nn_grads_host(m, NULL);
        for (size_t j = 0; j < np; j++)
            want[j] += w[i] * (double)g[j] / 4;
        free(g);
    }
    dt_model_batch all = {.x = d.x, .labels = d.labels, .sample_weight = w, .n = 4};
    ASSERT_OK(dt_model_train_step(m, &loss, &all, 4, &st, &err), &err);
    ASSERT_NEAR(st.loss, want_loss, 1e-6);
    double worst = 0, top = 0;
    float *g = nn_grads_host(m, NULL);
    for (size_t j = 0; j < np; j++) {
        worst = fmax(worst, fabs(g[j] - want[j]));
        top = fmax(top, fabs(want[j]));
    }
    free(g);
    ASSERT_TRUE(top > 0);
    ASSERT_TRUE(worst <= 1e-6 * top);
    free(want);
    nn_data_free(&d);
    dt_model_free(m);
}

/* SGD on losses weighted 2 is SGD with twice the rate on the plain loss, to the bit: the
 * gradient is exactly doubled, and lr * (2 g) == (2 lr) * g in float32. */
DT_TEST_TIMEOUT(train_class_weight_job_doubles_like_lr, 120)
{
    tt_setup(96, 32);
    dt_jobspec a, b;
    tt_parse(cw_spec("{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.05}}",
                     "{\"0\": 2, \"1\": 2, \"2\": 2, \"3\": 2}"),
             &a);
    tt_parse(cw_spec("{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.1}}", NULL), &b);
    dt_train_opts o = dt_train_opts_default();
    for (int world = 1; world <= 2; world++) {
        tt_replica ra[2], rb[2];
        tt_run(&a, world, &o, -1, 0, ra);
        tt_run(&b, world, &o, -1, 0, rb);
        ASSERT_EQ(ra[0].st, DT_OK);
        ASSERT_EQ(rb[0].st, DT_OK);
        ASSERT_EQ(ra[0].res.weights_hash, rb[0].res.weights_hash);
        ASSERT_NEAR(ra[0].res.loss, 2 * rb[0].res.loss, 1e-9 * rb[0].res.loss);
        /* validation carries no class weights, as in Keras */
        ASSERT_NEAR(ra[0].res.val_loss, rb[0].res.val_loss, 0);
        tt_free(ra, world);
        tt_free(rb, world);
    }
    dt_jobspec_destroy(&a);
    dt_jobspec_destroy(&b);
}
