/* test_nn_graph.c - the per-step values of a graphed training step (dt_model_graph_feed,
 * dt_optim_prepare/apply/advance), on whatever backend DTRAIN_OPS names (the CPU, the guard, the
 * emulated GPU: make test-guard runs it on all three). A step whose batch, loss scale, hinge flag
 * and dropout keys were put in device memory beforehand, and whose optimizer reads its learning
 * rate and bias corrections from device memory, must give the bits of a plain step: after 6 steps
 * the weights, the BatchNormalization statistics, the optimizer slots and every loss are equal.
 * Models: a CNN with BatchNormalization and Dropout under Adam with an ExponentialDecay schedule,
 * an LSTM with input dropout under Nadam with EMA and a hinge loss on 0/1
 * targets (the -1/1 flag from the step block), and a sparse CE with ignore_class (the scale from
 * the count of rows left) and sample weights, under SGD with weight decay. */
#include "nn/optim.h"
#include "test_nn_util.h"

#include <math.h>

#define STEPS 6

typedef struct graph_case {
    const char *name;
    const char *model;
    dt_loss loss;
    const char *optim; /* compile.optimizer JSON */
    int n;
    bool weights, ignore;
} graph_case;

static dt_optim *make_optim(dt_model *m, const char *json)
{
    dt_err err = {0};
    dt_optim_cfg cfg;
    cJSON *j = cJSON_Parse(json);
    ASSERT_TRUE(j != NULL);
    ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
    cJSON_Delete(j);
    dt_optim *o = NULL;
    ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
    return o;
}

/* Host copies of params, state and every slot, concatenated. */
static float *everything(dt_model *m, dt_optim *o, size_t *len)
{
    size_t np, ns;
    dt_model_params(m, &np);
    dt_model_state(m, &ns);
    size_t k = dt_optim_slot_count(o);
    float *h = malloc(sizeof(float) * (np + ns + k * np + 1));
    dt_model_download_all(m, h);
    for (size_t i = 0; i < k; i++)
        dt_model_ops(m)->download(h + np + ns + i * np, dt_optim_slot(o, i, NULL),
                                  np * sizeof(float));
    *len = np + ns + k * np;
    return h;
}

/* One run of STEPS steps; fed: every step after the first goes through the step blocks. */
static float *run(const graph_case *c, bool fed, double *losses, size_t *len)
{
    dt_model *m = nn_build(c->model, 7);
    dt_optim *o = make_optim(m, c->optim);
    dt_err err = {0};
    for (int s = 0; s < STEPS; s++) {
        nn_data d = nn_random(m, c->n, c->loss.kind, 100 + (uint64_t)s);
        dt_model_batch b = nn_batch(&d, c->loss.kind);
        float w[64];
        if (c->weights) {
            for (int i = 0; i < c->n; i++)
                w[i] = 0.5f + (float)((i + s) % 3);
            b.sample_weight = w;
        }
        if (c->ignore)
            for (int i = 0; i < c->n; i += 3 + s % 2)
                d.labels[i] = c->loss.ignore_class;
        if (c->loss.kind == DT_NN_LOSS_HINGE) /* 0/1 targets on odd steps: -1/1 then */
            for (int i = 0; i < c->n * (int)dt_model_output_size(m); i++)
                d.targets[i] = s % 2 ? (d.targets[i] > 0) : d.targets[i];
        dt_step_stats st;
        if (fed && s > 0) {
            ASSERT_OK(dt_model_graph_feed(m, &c->loss, &b, 2 * c->n, &err), &err);
            ASSERT_OK(dt_optim_prepare(o, &err), &err);
            ASSERT_OK(dt_model_train_step(m, &c->loss, &b, 2 * c->n, &st, &err), &err);
            dt_optim_apply(o);
            dt_optim_advance(o);
        } else {
            ASSERT_OK(dt_model_train_step(m, &c->loss, &b, 2 * c->n, &st, &err), &err);
            ASSERT_OK(dt_optim_step(o, &err), &err);
        }
        losses[s] = st.loss;
        nn_data_free(&d);
    }
    char why[256];
    ASSERT_TRUE(dt_optim_iterations(o) == STEPS);
    float *h = everything(m, o, len);
    (void)dt_model_graph_fit(m, why, sizeof why); /* callable on any backend */
    dt_optim_free(o);
    dt_model_free(m);
    return h;
}

static void same_steps(const graph_case *c)
{
    double lp[STEPS], lf[STEPS];
    size_t np, nf;
    float *p = run(c, false, lp, &np);
    float *f = run(c, true, lf, &nf);
    ASSERT_EQ(np, nf);
    for (int s = 0; s < STEPS; s++) {
        if (memcmp(&lp[s], &lf[s], sizeof lp[s]) != 0)
            fprintf(stderr, "%s: step %d's loss %.17g, fed %.17g\n", c->name, s, lp[s], lf[s]);
        ASSERT_TRUE(memcmp(&lp[s], &lf[s], sizeof lp[s]) == 0);
    }
    for (size_t i = 0; i < np; i++) {
        if (memcmp(&p[i], &f[i], sizeof p[i]) != 0)
            fprintf(stderr, "%s: value %zu of %zu: %.9g plain, %.9g fed\n", c->name, i, np,
                    (double)p[i], (double)f[i]);
        ASSERT_TRUE(memcmp(&p[i], &f[i], sizeof p[i]) == 0);
    }
    free(p);
    free(f);
}

#define CONV(f, a)                                                                                 \
    "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": " #f ", \"kernel_size\": 3, "          \
    "\"activation\": \"" a "\"}}"

DT_TEST(nn_graph_fed_cnn_bn_dropout_adam_schedule)
{
    graph_case c = {
        .name = "cnn",
        .model = nn_seq("10, 10, 1", CONV(4, "linear"),
                        "{\"class_name\": \"BatchNormalization\", \"config\": {}}",
                        "{\"class_name\": \"ReLU\", \"config\": {}}",
                        "{\"class_name\": \"MaxPooling2D\", \"config\": {}}",
                        "{\"class_name\": \"Flatten\", \"config\": {}}",
                        "{\"class_name\": \"Dropout\", \"config\": {\"rate\": 0.3}}",
                        "{\"class_name\": \"Dense\", \"config\": {\"units\": 3}}", NULL),
        .loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true},
        .optim = "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": {\"class_name\": "
                 "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.01, "
                 "\"decay_steps\": 2, \"decay_rate\": 0.5}}}}",
        .n = 8,
    };
    same_steps(&c);
}

DT_TEST(nn_graph_fed_lstm_dropout_nadam_ema_hinge)
{
    graph_case c = {
        .name = "lstm",
        .model = nn_seq("5, 3",
                        "{\"class_name\": \"LSTM\", \"config\": {\"units\": 4, \"dropout\": 0.2}}",
                        "{\"class_name\": \"Dropout\", \"config\": {\"rate\": 0.25}}",
                        "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}", NULL),
        .loss = {.kind = DT_NN_LOSS_HINGE},
        .optim = "{\"class_name\": \"Nadam\", \"config\": {\"learning_rate\": 0.01, \"use_ema\": "
                 "true, \"ema_overwrite_frequency\": 2}}",
        .n = 6,
    };
    same_steps(&c);
}

DT_TEST(nn_graph_fed_ignore_class_weights_sgd_decay)
{
    graph_case c = {
        .name = "ignore",
        .model = nn_seq("6", "{\"class_name\": \"Dense\", \"config\": {\"units\": 5}}",
                        "{\"class_name\": \"Dense\", \"config\": {\"units\": 4, \"activation\": "
                        "\"softmax\"}}",
                        NULL),
        .loss = {.kind = DT_NN_LOSS_SPARSE_CE, .has_ignore_class = true, .ignore_class = 2},
        .optim = "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.1, \"momentum\": "
                 "0.9, \"weight_decay\": 0.01}}",
        .n = 10,
        .weights = true,
        .ignore = true,
    };
    same_steps(&c);
}
