/* test_train_lr_scheduler.c - LearningRateScheduler in $.fit.callbacks: its forms (a rate per
 * epoch, a Keras LearningRateSchedule object at the epoch), refusals naming the path, the rate
 * each epoch trains with, and a resumed job that trains as the unbroken one. */
#include "test_train_util.h"

#include <math.h>

/* tt_spec with "callbacks": cbs inside $.fit and extra at the top level. */
static const char *sched_spec(int epochs, const char *optimizer, const char *cbs, const char *extra)
{
    static char buf[16384];
    const char *base = tt_spec(epochs, 16, optimizer, extra);
    const char *fit = strstr(base, "\"batch_size\": 16}");
    ASSERT_TRUE(fit != NULL);
    snprintf(buf, sizeof buf, "%.*s\"batch_size\": 16, \"callbacks\": %s}%s", (int)(fit - base),
             base, cbs, fit + strlen("\"batch_size\": 16}"));
    return buf;
}

#define SGD(lr) "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": " #lr "}}"

DT_TEST(train_lr_scheduler_parse)
{
    dt_jobspec s;
    tt_parse(sched_spec(2, SGD(0.1),
                        "[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": "
                        "[0.1, 0.05], \"verbose\": 1}}]",
                        NULL),
             &s);
    ASSERT_EQ(s.callbacks[0].kind, DT_CALLBACK_LR_SCHEDULER);
    ASSERT_EQ(s.callbacks[0].n_lr_list, 2);
    ASSERT_NEAR(s.callbacks[0].lr_list[1], 0.05, 0);
    ASSERT_TRUE(s.callbacks[0].verbose);
    dt_jobspec_destroy(&s);
    const char *bad[][2] = {
        {"[\"LearningRateScheduler\"]", "$.fit.callbacks[0].config.schedule: required"},
        {"[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": [0.1, -1]}}]",
         "$.fit.callbacks[0].config.schedule[1]: give a learning rate >= 0"},
        {"[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": \"scheduler\"}}]",
         "a Python function cannot travel in JSON"},
        {"[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": [], "
         "\"x\": 1}}]",
         "$.fit.callbacks[0].config.schedule: give 1 to 256 rates"},
        {"[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": [0.1], "
         "\"monitor\": \"loss\"}}]",
         "$.fit.callbacks[0].config.monitor: LearningRateScheduler takes no such key"},
    };
    dt_jobspec_roots r = {.data_root = dt_test_tmpdir(), .state_dir = dt_test_tmpdir()};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *text = sched_spec(2, SGD(0.1), bad[i][0], NULL);
        dt_err err = {0};
        ASSERT_TRUE(dt_jobspec_parse(text, strlen(text), &r, &s, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, bad[i][1]);
    }
    /* refused at validation: a schedule that is not one, and an optimizer schedule too */
    tt_setup(32, 16);
    const char *val_bad[][3] = {
        {SGD(0.1),
         "[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": "
         "{\"class_name\": \"StepDecay\", \"config\": {}}}}]",
         "$.fit.callbacks[0].config.schedule"},
        {"{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
         "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 10, "
         "\"decay_rate\": 0.9}}}}",
         "[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": [0.1]}}]",
         "learning_rate is a schedule"},
    };
    for (size_t i = 0; i < sizeof val_bad / sizeof val_bad[0]; i++) {
        tt_parse(sched_spec(2, val_bad[i][0], val_bad[i][1], NULL), &s);
        dt_err err = {0};
        ASSERT_TRUE(dt_train_validate(&s, NULL, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, val_bad[i][2]);
        dt_jobspec_destroy(&s);
    }
}

/* The epoch's rate is the one the optimizer applies: a list of one rate repeated equals a
 * constant rate (the optimizer's own is overridden), bit for bit; an ExponentialDecay at the
 * epoch ends the job at initial * rate^(epochs - 1). */
DT_TEST_TIMEOUT(train_lr_scheduler_rates, 120)
{
    tt_setup(96, 32);
    dt_jobspec a, b, c;
    tt_parse(sched_spec(3, SGD(0.5),
                        "[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": "
                        "[0.05]}}]",
                        NULL),
             &a);
    tt_parse(sched_spec(3, SGD(0.05), "[]", NULL), &b);
    tt_parse(sched_spec(3, SGD(0.05),
                        "[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": "
                        "{\"class_name\": \"ExponentialDecay\", \"config\": "
                        "{\"initial_learning_rate\": 0.2, \"decay_steps\": 1, \"decay_rate\": "
                        "0.5}}, \"verbose\": 1}}]",
                        NULL),
             &c);
    ASSERT_EQ(c.ncallbacks, 1);
    dt_train_opts o = dt_train_opts_default();
    tt_replica ra[2], rb[2], rc[2];
    tt_run(&a, 2, &o, -1, 0, ra);
    tt_run(&b, 2, &o, -1, 0, rb);
    ASSERT_EQ(ra[0].st, DT_OK);
    ASSERT_EQ(rb[0].st, DT_OK);
    ASSERT_EQ(ra[0].res.weights_hash, rb[0].res.weights_hash);
    ASSERT_NEAR(ra[0].res.learning_rate, 0.05, 1e-9);
    tt_run(&c, 2, &o, -1, 0, rc);
    ASSERT_EQ(rc[0].st, DT_OK);
    ASSERT_NEAR(rc[0].res.learning_rate, 0.05, 1e-9); /* 0.2 * 0.5^2 */
    ASSERT_TRUE(rc[0].res.weights_hash != rb[0].res.weights_hash);
    tt_free(ra, 2);
    tt_free(rb, 2);
    tt_free(rc, 2);
    dt_jobspec_destroy(&a);
    dt_jobspec_destroy(&b);
    dt_jobspec_destroy(&c);
}

/* The rate depends on the epoch alone: a job cancelled in its second epoch and resumed ends
 * with the unbroken run's weights. */
DT_TEST_TIMEOUT(train_lr_scheduler_resume, 120)
{
    tt_setup(96, 32);
    dt_jobspec spec;
    tt_parse(sched_spec(3, SGD(0.1),
                        "[{\"class_name\": \"LearningRateScheduler\", \"config\": {\"schedule\": "
                        "[0.1, 0.03, 0.01]}}]",
                        ", \"checkpoint\": {\"save_freq\": 2, \"keep\": 2}"),
             &spec);
    char ref_dir[1024], run_dir[1024];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", dt_test_tmpdir());
    snprintf(run_dir, sizeof run_dir, "%s/run", dt_test_tmpdir());
    dt_train_opts o = dt_train_opts_default();
    tt_replica ref[2], run[2];
    o.out_dir = ref_dir;
    tt_run(&spec, 2, &o, -1, 0, ref);
    ASSERT_EQ(ref[0].st, DT_OK);
    o.out_dir = run_dir;
    tt_run(&spec, 2, &o, 0, 8, run); /* epoch 2 (6 steps an epoch) */
    ASSERT_EQ(run[0].st, DT_ECANCELED);
    tt_free(run, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, run);
    ASSERT_EQ(run[0].st, DT_OK);
    ASSERT_TRUE(run[0].res.resumed);
    ASSERT_EQ(run[0].res.weights_hash, ref[0].res.weights_hash);
    ASSERT_NEAR(run[0].res.learning_rate, 0.01, 1e-9);
    tt_free(ref, 2);
    tt_free(run, 2);
    dt_jobspec_destroy(&spec);
}
