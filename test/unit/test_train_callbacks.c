/* Unit tests of $.fit.callbacks: EarlyStopping's and ReduceLROnPlateau's decisions against
 * sequences worked by hand from Keras 3's code, then jobs on 1 and 2 replicas that stop at the
 * same epoch with the same restored weights, a TerminateOnNaN stop, a lowered learning rate
 * that survives a resume, and the refusals. */
#include "test_train_util.h"

#include "train/train_internal.h"

#include <math.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ decisions -- */

static dt_jobspec_callback cb_parse(const char *json)
{
    cJSON *j = cJSON_Parse(json);
    ASSERT_TRUE(j != NULL);
    dt_jobspec_callback cb;
    dt_err err = {0};
    ASSERT_OK(dt_jobspec_callback_parse(j, "$.fit.callbacks[0]", &cb, &err), &err);
    cJSON_Delete(j);
    return cb;
}

/* Feeds values[0..n) as epochs 0..n-1 (NAN: no value that epoch); the epoch it stopped at,
 * or -1. */
static int es_run(const dt_jobspec_callback *cb, int dir, const double *v, int n,
                  dt__train_cb_state *s)
{
    dt__train_cb_reset(cb, dir, s);
    for (int e = 0; e < n; e++) {
        bool take;
        if (dt__train_es_epoch_end(cb, dir, s, e, !isnan(v[e]), v[e], &take))
            return e;
    }
    return -1;
}

DT_TEST(train_callbacks_early_stopping_decisions)
{
    dt__train_cb_state s;
    /* patience 2: the wait counts epochs since the best, and stops once it reaches 2 */
    dt_jobspec_callback cb =
        cb_parse("{\"class_name\": \"EarlyStopping\", \"config\": {\"patience\": 2}}");
    ASSERT_STREQ(cb.monitor, "val_loss");
    const double a[] = {1.0, 0.9, 0.95, 0.92, 0.5};
    ASSERT_EQ(es_run(&cb, -1, a, 5, &s), 3);
    ASSERT_EQ(s.best_epoch, 1);
    ASSERT_FEQ(s.best, 0.9);
    ASSERT_EQ(s.stopped_epoch, 3);
    /* min_delta 0.05: 0.96 is no improvement on 1.0 (0.96 + 0.05 > 1.0), 0.94 is */
    cb = cb_parse("{\"class_name\": \"EarlyStopping\", \"config\": {\"patience\": 1, "
                  "\"min_delta\": -0.05}}"); /* Keras takes |min_delta| */
    const double b[] = {1.0, 0.96, 0.94};
    ASSERT_EQ(es_run(&cb, -1, b, 3, &s), 1);
    cb.patience = 2;
    ASSERT_EQ(es_run(&cb, -1, b, 3, &s), -1);
    ASSERT_FEQ(s.best, 0.94);
    ASSERT_EQ(s.wait, 0);
    /* mode max: equal is no improvement */
    cb = cb_parse("{\"class_name\": \"EarlyStopping\", \"config\": {\"monitor\": "
                  "\"val_accuracy\", \"patience\": 2, \"mode\": \"max\"}}");
    const double c[] = {0.5, 0.6, 0.6, 0.6};
    ASSERT_EQ(es_run(&cb, 1, c, 4, &s), 3);
    /* baseline: improvements that do not beat it leave the wait running; the first epoch
     * without an improvement then stops at once */
    cb = cb_parse("{\"class_name\": \"EarlyStopping\", \"config\": {\"patience\": 2, "
                  "\"baseline\": 0.5}}");
    const double d[] = {0.9, 0.8, 0.7, 0.6, 0.65};
    ASSERT_EQ(es_run(&cb, -1, d, 5, &s), 4);
    ASSERT_EQ(s.wait, 5);
    cb.has_baseline = false;
    ASSERT_EQ(es_run(&cb, -1, d, 5, &s), -1);
    /* beating the baseline restarts the wait */
    const double d2[] = {0.9, 0.4, 0.45, 0.45, 0.45};
    cb.has_baseline = true;
    ASSERT_EQ(es_run(&cb, -1, d2, 5, &s), 3);
    /* start_from_epoch 2: epochs 0 and 1 are not looked at; patience 0 stops at the first
     * epoch without an improvement, but never at epoch 0 */
    cb = cb_parse("{\"class_name\": \"EarlyStopping\", \"config\": {\"start_from_epoch\": 2}}");
    const double e[] = {5, 6, 3, 3.5};
    ASSERT_EQ(es_run(&cb, -1, e, 4, &s), 3);
    ASSERT_FEQ(s.best, 3);
    ASSERT_EQ(s.best_epoch, 2);
    cb.start_from_epoch = 0;
    const double f[] = {1, 2};
    ASSERT_EQ(es_run(&cb, -1, f, 2, &s), 1);
    /* an epoch without the value (no validation that epoch) changes nothing */
    cb.patience = 1;
    const double g[] = {1, NAN, NAN, 2};
    ASSERT_EQ(es_run(&cb, -1, g, 4, &s), 3);
    /* restore_best_weights: the weights are taken at the first looked-at epoch and at every
     * improvement */
    cb = cb_parse("{\"class_name\": \"EarlyStopping\", \"config\": {\"patience\": 5, "
                  "\"restore_best_weights\": true}}");
    dt__train_cb_reset(&cb, -1, &s);
    const double h[] = {1.0, 0.9, 0.95};
    const bool takes[] = {true, true, false};
    for (int i = 0; i < 3; i++) {
        bool take;
        ASSERT_FALSE(dt__train_es_epoch_end(&cb, -1, &s, i, true, h[i], &take));
        ASSERT_EQ(take, takes[i]);
    }
    ASSERT_EQ(s.best_epoch, 1);
    ASSERT_TRUE(s.has_weights);
    /* the state round-trips through checkpoint text bit for bit */
    s.best = 0.1 + 0.2;
    char text[256];
    dt__train_cb_format(&s, 1, text, sizeof text);
    dt__train_cb_state back;
    ASSERT_TRUE(dt__train_cb_parse(text, &back, 1));
    ASSERT_EQ(memcmp(&back.best, &s.best, sizeof s.best), 0);
    ASSERT_EQ(back.wait, s.wait);
    ASSERT_EQ(back.best_epoch, 1);
    ASSERT_TRUE(back.has_weights);
}

DT_TEST(train_callbacks_directions)
{
    dt_jobspec spec = {.metric_accuracy = true, .nmetrics = 1};
    spec.metrics[0].kind = DT_METRIC_MAE;
    snprintf(spec.metrics[0].name, sizeof spec.metrics[0].name, "mae");
    dt_jobspec_callback cb = cb_parse("\"EarlyStopping\"");
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), -1); /* val_loss */
    snprintf(cb.monitor, sizeof cb.monitor, "val_accuracy");
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), 1);
    snprintf(cb.monitor, sizeof cb.monitor, "mae");
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), -1);
    snprintf(cb.monitor, sizeof cb.monitor, "val_what");
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), 0);
    cb.mode = DT_CALLBACK_MODE_MAX;
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), 1);
    /* ReduceLROnPlateau's own rule: "acc" in the name maximises, anything else minimises */
    cb = cb_parse("{\"class_name\": \"ReduceLROnPlateau\", \"config\": {\"monitor\": "
                  "\"val_accuracy\"}}");
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), 1);
    snprintf(cb.monitor, sizeof cb.monitor, "val_what");
    ASSERT_EQ(dt__train_cb_direction(&spec, &cb), -1);
}

DT_TEST(train_callbacks_reduce_lr_decisions)
{
    dt_jobspec_callback cb = cb_parse(
        "{\"class_name\": \"ReduceLROnPlateau\", \"config\": {\"monitor\": \"loss\", \"factor\": "
        "0.5, \"patience\": 2, \"min_delta\": 0, \"cooldown\": 1, \"min_lr\": 0.0003}}");
    dt__train_cb_state s;
    dt__train_cb_reset(&cb, -1, &s);
    ASSERT_TRUE(isinf(s.best) && s.best > 0);
    /* a flat loss: epochs 0 (first best), 1 (wait 1), 2 (wait 2: 0.001 -> 0.0005, cooldown 1),
     * 3 (cooldown ends, wait 1), 4 (0.0005 -> max(0.00025, min_lr)), 5 (cooldown), then never
     * below min_lr; in float32 as the optimizer holds it */
    const double want[] = {0.001f, 0.001f, 0.0005f, 0.0005f, 0.0003f, 0.0003f, 0.0003f, 0.0003f};
    double lr = 0.001f;
    for (int e = 0; e < 8; e++) {
        double nlr;
        if (dt__train_rlrop_epoch_end(&cb, -1, &s, true, 1.0, lr, &nlr))
            lr = (float)nlr;
        if (lr != want[e])
            fprintf(stderr, "epoch %d: lr %.9g, want %.9g\n", e, lr, want[e]);
        ASSERT_FEQ(lr, want[e]);
    }
    ASSERT_EQ(s.wait, 3); /* at min_lr the wait keeps counting, as in Keras */
    /* min_delta: 0.9995 is no improvement on 1.0 by 0.001 */
    cb.min_delta = 0.001;
    cb.cooldown = 0;
    cb.patience = 1;
    dt__train_cb_reset(&cb, -1, &s);
    double nlr;
    ASSERT_FALSE(dt__train_rlrop_epoch_end(&cb, -1, &s, true, 1.0, 0.01, &nlr));
    ASSERT_TRUE(dt__train_rlrop_epoch_end(&cb, -1, &s, true, 0.9995, 0.01, &nlr));
    ASSERT_NEAR(nlr, 0.005, 1e-12);
    ASSERT_FALSE(dt__train_rlrop_epoch_end(&cb, -1, &s, true, 0.5, 0.005, &nlr));
    ASSERT_FALSE(dt__train_rlrop_epoch_end(&cb, -1, &s, false, 0, 0.005, &nlr)); /* no value */
    ASSERT_EQ(s.wait, 0);
}

/* ------------------------------------------------------------------------------ jobs -- */

/* tt_spec with callbacks (JSON list text) in $.fit and extra at the top level. */
static const char *cb_spec(int epochs, const char *optimizer, const char *callbacks,
                           const char *extra)
{
    static char buf[20000];
    const char *base = tt_spec(epochs, 16, optimizer, extra);
    const char *at = strstr(base, "\"batch_size\": 16}");
    ASSERT_TRUE(at != NULL);
    int head = (int)(at - base) + (int)strlen("\"batch_size\": 16");
    snprintf(buf, sizeof buf, "%.*s, \"callbacks\": %s%s", head, base, callbacks, base + head);
    return buf;
}

#define N_TRAIN 193
#define N_VAL   50

/* val_accuracy cannot gain 0.5 after epoch 1, so patience 2 stops a 20-epoch job after epoch
 * 3 and restores epoch 1's weights: those of a 1-epoch job, on 1 and on 2 replicas. */
DT_TEST_TIMEOUT(train_callbacks_early_stopping_job, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    const char *es = "[{\"class_name\": \"EarlyStopping\", \"config\": {\"monitor\": "
                     "\"val_accuracy\", \"patience\": 2, \"min_delta\": 0.5, "
                     "\"restore_best_weights\": true, \"verbose\": 1}}]";
    dt_jobspec spec, one_epoch;
    tt_parse(cb_spec(20, "\"adam\"", es, ""), &spec);
    tt_parse(tt_spec(1, 16, "\"adam\"", ""), &one_epoch);
    dt_train_opts o = dt_train_opts_default();
    for (int world = 1; world <= 2; world++) {
        tt_replica run[2], ref[2];
        tt_run(&spec, world, &o, -1, 0, run);
        tt_run(&one_epoch, world, &o, -1, 0, ref);
        for (int r = 0; r < world; r++) {
            if (run[r].st != DT_OK)
                fprintf(stderr, "R=%d rank %d: %s\n", world, r, run[r].err.msg);
            ASSERT_EQ(run[r].st, DT_OK);
            ASSERT_EQ(run[r].res.stopped_epoch, 3);
            ASSERT_EQ(run[r].res.epochs_done, 3);
            ASSERT_EQ(run[r].res.global_step, 3 * 13);
            ASSERT_CONTAINS(run[r].res.stop_reason, "EarlyStopping: epoch 3: early stopping");
            ASSERT_EQ(run[r].res.weights_hash, ref[0].res.weights_hash);
        }
        printf("R=%d: stopped after epoch %d of 20 (%s), weights of epoch 1 restored\n", world,
               run[0].res.stopped_epoch, run[0].res.stop_reason);
        tt_free(run, world);
        /* cancelled in epoch 2 and resumed from the epoch-1 checkpoint, beside which the best
         * weights were written: the resumed job stops at the same epoch with the same weights */
        char dir[1024], best[1200];
        snprintf(dir, sizeof dir, "%s/run%d", dt_test_tmpdir(), world);
        o.out_dir = dir;
        tt_run(&spec, world, &o, 0, 20, run);
        ASSERT_EQ(run[0].st, DT_ECANCELED);
        snprintf(best, sizeof best, "%s/checkpoints/best0-13.safetensors", dir);
        ASSERT_EQ(access(best, F_OK), 0);
        tt_free(run, world);
        o.resume = true;
        tt_run(&spec, world, &o, -1, 0, run);
        for (int r = 0; r < world; r++) {
            if (run[r].st != DT_OK)
                fprintf(stderr, "resumed R=%d rank %d: %s\n", world, r, run[r].err.msg);
            ASSERT_EQ(run[r].st, DT_OK);
            ASSERT_TRUE(run[r].res.resumed);
            ASSERT_EQ(run[r].res.stopped_epoch, 3);
            ASSERT_EQ(run[r].res.weights_hash, ref[0].res.weights_hash);
        }
        o = dt_train_opts_default();
        tt_free(run, world);
        tt_free(ref, world);
    }
    dt_jobspec_destroy(&one_epoch);
    dt_jobspec_destroy(&spec);
}

DT_TEST_TIMEOUT(train_callbacks_terminate_on_nan, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    const char *sgd = "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 1e30}}";
    dt_jobspec spec;
    tt_parse(cb_spec(5, sgd, "[\"TerminateOnNaN\"]", ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica run[2];
    tt_run(&spec, 2, &o, -1, 0, run);
    for (int r = 0; r < 2; r++) {
        if (run[r].st != DT_OK)
            fprintf(stderr, "rank %d: %s\n", r, run[r].err.msg);
        ASSERT_EQ(run[r].st, DT_OK); /* as Keras's fit returns: the job succeeds */
        ASSERT_EQ(run[r].res.stopped_epoch, 1);
        ASSERT_EQ(run[r].res.epochs_done, 1);
        ASSERT_TRUE(run[r].res.global_step < 13);
        ASSERT_CONTAINS(run[r].res.stop_reason, "TerminateOnNaN: epoch 1, batch ");
        ASSERT_CONTAINS(run[r].res.stop_reason, "invalid loss");
    }
    printf("%s (after %lld steps)\n", run[0].res.stop_reason, (long long)run[0].res.global_step);
    tt_free(run, 2);
    dt_jobspec_destroy(&spec);
}

/* loss never gains 10, so with patience 1 every epoch from the second halves the rate. */
DT_TEST_TIMEOUT(train_callbacks_reduce_lr_job_and_resume, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    const char *rl = "[{\"class_name\": \"ReduceLROnPlateau\", \"config\": {\"monitor\": "
                     "\"loss\", \"factor\": 0.5, \"patience\": 1, \"min_delta\": 10}}]";
    const char *sgd = "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.1}}";
    dt_jobspec spec;
    tt_parse(cb_spec(4, sgd, rl, ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    char ref_dir[1024], run_dir[1024];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", dt_test_tmpdir());
    snprintf(run_dir, sizeof run_dir, "%s/run", dt_test_tmpdir());
    tt_replica ref[2], one[1], run[2];
    o.out_dir = ref_dir;
    tt_run(&spec, 2, &o, -1, 0, ref);
    ASSERT_EQ(ref[0].st, DT_OK);
    /* epochs 2, 3 and 4 each halve it: 0.1 / 8, in float32 */
    ASSERT_FEQ(ref[0].res.learning_rate, (double)(0.1f / 8));
    ASSERT_FEQ(ref[1].res.learning_rate, ref[0].res.learning_rate);
    ASSERT_EQ(ref[0].res.stopped_epoch, 0);
    o.out_dir = NULL;
    tt_run(&spec, 1, &o, -1, 0, one);
    ASSERT_FEQ(one[0].res.learning_rate, ref[0].res.learning_rate);
    /* the later steps ran at the lower rate: their loss moves less than the first ones' */
    printf("learning rate 0.1 -> %g; batch loss %.4f (step 1) .. %.4f (step 52)\n",
           ref[0].res.learning_rate, ref[0].losses[0], ref[0].losses[ref[0].nlosses - 1]);
    /* cancelled in epoch 3 and resumed from the epoch-2 checkpoint: the callback's wait and best
     * and the lowered rate come back, so the run ends bit-identical to the unbroken one */
    o.out_dir = run_dir;
    tt_run(&spec, 2, &o, 1, 30, run);
    ASSERT_EQ(run[0].st, DT_ECANCELED);
    tt_free(run, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, run);
    ASSERT_EQ(run[0].st, DT_OK);
    ASSERT_TRUE(run[0].res.resumed);
    ASSERT_FEQ(run[0].res.learning_rate, ref[0].res.learning_rate);
    ASSERT_EQ(run[0].res.weights_hash, ref[0].res.weights_hash);
    ASSERT_EQ(run[1].res.weights_hash, ref[0].res.weights_hash);
    tt_free(ref, 2);
    tt_free(one, 1);
    tt_free(run, 2);
    dt_jobspec_destroy(&spec);
}

/* ------------------------------------------------------------------------ refusals -- */

static void refused(const char *text, dt_status want, const char *msg)
{
    dt_jobspec s;
    dt_err err = {0};
    dt_jobspec_roots r = {.data_root = dt_test_tmpdir(), .state_dir = dt_test_tmpdir()};
    dt_status st = dt_jobspec_parse(text, strlen(text), &r, &s, &err);
    if (st == DT_OK) {
        st = dt_train_validate(&s, NULL, &err);
        dt_jobspec_destroy(&s);
    }
    if (st != want || !strstr(err.msg, msg))
        fprintf(stderr, "got %s: %s\nwant %s: ...%s...\n", dt_status_name(st), err.msg,
                dt_status_name(want), msg);
    ASSERT_EQ(st, want);
    ASSERT_CONTAINS(err.msg, msg);
}

DT_TEST_TIMEOUT(train_callbacks_refused, 60)
{
    tt_setup(40, 10);
    refused(cb_spec(2, "\"adam\"", "[{\"class_name\": \"LambdaCallback\"}]", ""), DT_ENOTSUP,
            "$.fit.callbacks[0].class_name: \"LambdaCallback\" is not supported");
    refused(cb_spec(2, "\"adam\"",
                    "[\"TerminateOnNaN\", {\"class_name\": \"EarlyStopping\", \"config\": "
                    "{\"patiance\": 3}}]",
                    ""),
            DT_ENOTSUP, "$.fit.callbacks[1].config.patiance: EarlyStopping takes no such key");
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"ReduceLROnPlateau\", \"config\": {\"factor\": 1.0}}]", ""),
            DT_EINVAL, "$.fit.callbacks[0].config.factor: must be below 1");
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"EarlyStopping\", \"config\": {\"mode\": \"up\"}}]", ""),
            DT_EINVAL, "$.fit.callbacks[0].config.mode");
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"EarlyStopping\", \"config\": {\"monitor\": "
                    "\"val_mae\"}}]",
                    ""),
            DT_EINVAL, "$.fit.callbacks[0].config.monitor: \"val_mae\" is not among this job's");
    refused(cb_spec(2,
                    "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": {\"class_name\": "
                    "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.1, "
                    "\"decay_steps\": 10, \"decay_rate\": 0.9}}}}",
                    "[{\"class_name\": \"ReduceLROnPlateau\"}]", ""),
            DT_EINVAL, "$.fit.callbacks[0]: ReduceLROnPlateau sets the learning rate");
    refused(cb_spec(2, "\"adam\"", "{\"EarlyStopping\": {}}", ""), DT_EINVAL,
            "$.fit.callbacks: give a list");
}

/* ---------------------------------------------------- ModelCheckpoint, CSVLogger -- */

DT_TEST(train_callbacks_py_float_and_filepath)
{
    static const struct {
        double v;
        const char *want;
    } cases[] = {{0.5, "0.5"},
                 {1.0, "1.0"},
                 {1e-5, "1e-05"},
                 {100.0, "100.0"},
                 {1e16, "1e+16"},
                 {123.456, "123.456"},
                 {0.1 + 0.2, "0.30000000000000004"},
                 {-2.5e-7, "-2.5e-07"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[64];
        dt__train_py_float(cases[i].v, buf, sizeof buf);
        ASSERT_STREQ(buf, cases[i].want);
    }
    dt__train_log logs[2] = {{.name = "loss", .value = 0.5, .has = true},
                             {.name = "val_loss", .value = 0.12345, .has = true}};
    char out[256];
    dt_err err = {0};
    ASSERT_OK(dt__train_cb_filename("w-{epoch:02d}-{val_loss:.2f}.safetensors", 3, logs, 2, out,
                                    sizeof out, &err),
              &err);
    ASSERT_STREQ(out, "w-03-0.12.safetensors");
    ASSERT_OK(
        dt__train_cb_filename("{epoch}_{loss}.safetensors", 12, logs, 2, out, sizeof out, &err),
        &err);
    ASSERT_STREQ(out, "12_0.5.safetensors");
    ASSERT_STATUS(dt__train_cb_filename("{acc}.safetensors", 1, logs, 2, out, sizeof out, &err),
                  DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "{acc}: not \"epoch\" nor one of this job's logs");
    ASSERT_STATUS(
        dt__train_cb_filename("{loss:02d}.safetensors", 1, logs, 2, out, sizeof out, &err),
        DT_EINVAL);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ASSERT_TRUE(f != NULL);
    static char buf[3][8192];
    static int k;
    char *b = buf[k++ % 3];
    size_t n = fread(b, 1, sizeof buf[0] - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

/* A CSVLogger's rows and ModelCheckpoint's files on 2 replicas; a resumed run's CSV is the
 * unbroken run's, byte for byte. */
DT_TEST_TIMEOUT(train_callbacks_csv_and_model_checkpoint_job, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    const char *cbs = "[{\"class_name\": \"CSVLogger\", \"config\": {\"filename\": "
                      "\"log.csv\"}}, {\"class_name\": \"ModelCheckpoint\", \"config\": "
                      "{\"filepath\": \"w-{epoch:02d}.safetensors\"}}, {\"class_name\": "
                      "\"ModelCheckpoint\", \"config\": {\"filepath\": \"best.safetensors\", "
                      "\"monitor\": \"val_loss\", \"save_best_only\": true}}]";
    dt_jobspec spec;
    tt_parse(cb_spec(3, "\"adam\"", cbs, ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    char ref_dir[1024], run_dir[1024], p[1200];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", dt_test_tmpdir());
    snprintf(run_dir, sizeof run_dir, "%s/run", dt_test_tmpdir());
    tt_replica ref[2], run[2];
    o.out_dir = ref_dir;
    tt_run(&spec, 2, &o, -1, 0, ref);
    ASSERT_EQ(ref[0].st, DT_OK);
    snprintf(p, sizeof p, "%s/log.csv", ref_dir);
    char *csv = slurp(p);
    printf("%s", csv);
    ASSERT_EQ(strncmp(csv, "epoch,accuracy,loss,val_accuracy,val_loss\r\n0,", 45), 0);
    ASSERT_TRUE(strstr(csv, "\r\n1,") && strstr(csv, "\r\n2,") && !strstr(csv, "\r\n3,"));
    for (int e = 1; e <= 3; e++) {
        snprintf(p, sizeof p, "%s/checkpoints/w-%02d.safetensors", ref_dir, e);
        ASSERT_EQ(access(p, F_OK), 0);
    }
    snprintf(p, sizeof p, "%s/checkpoints/best.safetensors", ref_dir);
    ASSERT_EQ(access(p, F_OK), 0);
    o.out_dir = run_dir;
    tt_run(&spec, 2, &o, 0, 20, run);
    ASSERT_EQ(run[0].st, DT_ECANCELED);
    tt_free(run, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, run);
    ASSERT_EQ(run[0].st, DT_OK);
    ASSERT_TRUE(run[0].res.resumed);
    snprintf(p, sizeof p, "%s/log.csv", run_dir);
    /* epoch 1 resumed at its step 8 with the sums of its first 8 steps: the same row */
    ASSERT_STREQ(slurp(p), csv);
    tt_free(ref, 2);
    tt_free(run, 2);
    dt_jobspec_destroy(&spec);
}

DT_TEST_TIMEOUT(train_callbacks_files_refused, 60)
{
    tt_setup(40, 10);
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"ModelCheckpoint\", \"config\": {\"filepath\": "
                    "\"m.keras\"}}]",
                    ""),
            DT_EINVAL, "$.fit.callbacks[0].config.filepath: \"m.keras\": dtrain writes");
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"ModelCheckpoint\", \"config\": {\"filepath\": "
                    "\"{val_acc}.safetensors\"}}]",
                    ""),
            DT_EINVAL, "{val_acc}: not \"epoch\" nor one of this job's logs");
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"ModelCheckpoint\", \"config\": {\"filepath\": "
                    "\"m.safetensors\", \"save_freq\": 100}}]",
                    ""),
            DT_ENOTSUP, "$.fit.callbacks[0].config.save_freq: only \"epoch\"");
    refused(cb_spec(2, "\"adam\"",
                    "[{\"class_name\": \"CSVLogger\", \"config\": {\"filename\": \"../x.csv\"}}]",
                    ""),
            DT_EINVAL, "$.fit.callbacks[0].config.filename: give a file name");
    refused(cb_spec(2, "\"adam\"", "[\"CSVLogger\"]", ""), DT_EINVAL,
            "$.fit.callbacks[0].config.filename: required");
}
