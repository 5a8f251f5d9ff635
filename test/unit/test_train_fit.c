/* Unit tests of lib/train's fit: R = 2 and R = 4 replicas (threads over a shared-memory comm)
 * follow the one-replica run, end bit-identical, survive uneven shards, stop together on a
 * cancel, and resume from a checkpoint to the very same weights. */
#include "test_train_util.h"

#include "core/clock.h"
#include "io/safetensors.h"
#include "nn/model.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

/* 193 examples over 4 replicas: shards of 49, 48, 48, 48, so the last step of an epoch has 1
 * example on rank 0 and none on the others. */
#define N_TRAIN 193
#define N_VAL   50

static void check_follows(const tt_replica *one, const tt_replica *reps, int world)
{
    for (int r = 0; r < world; r++) {
        if (reps[r].st != DT_OK)
            fprintf(stderr, "R=%d rank %d: %s\n", world, r, reps[r].err.msg);
        ASSERT_EQ(reps[r].st, DT_OK);
        ASSERT_EQ(reps[r].res.weights_hash, reps[0].res.weights_hash); /* bit-identical */
        ASSERT_EQ(reps[r].nlosses, one->nlosses);
    }
    for (int i = 0; i < one->nlosses; i++) {
        double a = one->losses[i], b = reps[0].losses[i];
        if (fabs(a - b) > 1e-5 * fabs(a))
            fprintf(stderr, "R=%d step %d: loss %.9g vs %.9g\n", world, i, b, a);
        ASSERT_TRUE(fabs(a - b) <= 1e-5 * fabs(a));
    }
    ASSERT_EQ(reps[0].nparams, one->nparams);
    double maxd = 0;
    for (size_t i = 0; i < one->nparams; i++) {
        double d = fabs((double)one->params[i] - reps[0].params[i]);
        maxd = d > maxd ? d : maxd;
    }
    printf("R=%d: max |w - w(R=1)| after one epoch = %.3g, val acc %.4f vs %.4f\n", world, maxd,
           reps[0].res.val_accuracy, one->res.val_accuracy);
    ASSERT_TRUE(maxd <= 1e-4);
    ASSERT_NEAR(reps[0].res.val_loss, one->res.val_loss, 1e-4);
}

DT_TEST_TIMEOUT(train_replicas_follow_one, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    dt_jobspec spec;
    tt_parse(tt_spec(1, 16, "\"adam\"", ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica one[1], two[2], four[4];
    tt_run(&spec, 1, &o, -1, 0, one);
    if (one[0].st != DT_OK)
        fprintf(stderr, "R=1: %s\n", one[0].err.msg);
    ASSERT_EQ(one[0].st, DT_OK);
    ASSERT_EQ(one[0].nlosses, 13); /* ceil(193 / 16) */
    ASSERT_TRUE(one[0].res.has_val);
    tt_run(&spec, 2, &o, -1, 0, two);
    check_follows(&one[0], two, 2);
    /* R = 4 with buckets of ~26 floats: many all-reduces, started from the grad-ready hook */
    dt_jobspec small;
    tt_parse(tt_spec(1, 16, "\"adam\"", ", \"strategy\": {\"bucket_mb\": 0.0001}"), &small);
    tt_run(&small, 4, &o, -1, 0, four);
    check_follows(&one[0], four, 4);
    /* the same with a comm that keeps the buckets in flight on a thread of its own */
    tt_free(four, 4);
    tt_use_async = true;
    tt_run(&small, 4, &o, -1, 0, four);
    check_follows(&one[0], four, 4);
    tt_use_async = false;
    dt_jobspec_destroy(&small);
    tt_free(one, 1);
    tt_free(two, 2);
    tt_free(four, 4);
    dt_jobspec_destroy(&spec);
}

DT_TEST_TIMEOUT(train_learns, 120)
{
    tt_setup(512, 128);
    dt_jobspec spec;
    tt_parse(
        tt_spec(4, 32, "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01}}", ""),
        &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica two[2];
    tt_run(&spec, 2, &o, -1, 0, two);
    ASSERT_EQ(two[0].st, DT_OK);
    ASSERT_EQ(two[1].st, DT_OK);
    ASSERT_EQ(two[0].res.epochs_done, 4);
    ASSERT_EQ(two[0].res.global_step, 4 * 16);
    printf("val accuracy %.4f, loss %.4f -> %.4f\n", two[0].res.val_accuracy, two[0].losses[0],
           two[0].res.loss);
    ASSERT_TRUE(two[0].res.val_accuracy > 0.8);
    ASSERT_TRUE(two[0].res.loss < two[0].losses[0]);
    ASSERT_EQ(two[0].res.weights_hash, two[1].res.weights_hash);
    tt_free(two, 2);
    dt_jobspec_destroy(&spec);
}

/* Shard sizes in every combination of remainders: no replica count hangs or fails. */
DT_TEST_TIMEOUT(train_uneven_shards_complete, 120)
{
    static const int sizes[] = {3, 5, 6, 7, 9, 33};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        tt_setup(sizes[i], 3);
        dt_jobspec spec;
        tt_parse(tt_spec(2, 8, "\"sgd\"", ""), &spec);
        dt_train_opts o = dt_train_opts_default();
        tt_replica reps[4];
        tt_run(&spec, 4, &o, -1, 0, reps);
        for (int r = 0; r < 4; r++) {
            if (reps[r].st != DT_OK)
                fprintf(stderr, "n=%d rank %d: %s\n", sizes[i], r, reps[r].err.msg);
            ASSERT_EQ(reps[r].st, DT_OK);
            ASSERT_EQ(reps[r].res.weights_hash, reps[0].res.weights_hash);
            ASSERT_EQ(reps[r].res.global_step, 2 * ((sizes[i] + 7) / 8));
        }
        tt_free(reps, 4);
        dt_jobspec_destroy(&spec);
    }
}

DT_TEST_TIMEOUT(train_cancel_stops_all, 60)
{
    tt_setup(N_TRAIN, N_VAL);
    dt_jobspec spec;
    tt_parse(tt_spec(3, 16, "\"adam\"", ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica reps[2];
    /* Only rank 1 sees the cancel, set during step 5: every rank stops after step 6, the
     * first step that carries the flag in its metrics all-reduce. */
    tt_run(&spec, 2, &o, 1, 5, reps);
    for (int r = 0; r < 2; r++) {
        ASSERT_EQ(reps[r].st, DT_ECANCELED);
        ASSERT_CONTAINS(reps[r].err.msg, "cancelled");
        ASSERT_EQ(reps[r].res.global_step, 6);
        ASSERT_EQ(reps[r].res.weights_hash, reps[0].res.weights_hash);
    }
    tt_free(reps, 2);
    dt_jobspec_destroy(&spec);
}

static int count_ckpts(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, "ckpt-", 5) == 0;
    closedir(d);
    return n;
}

/* A run cancelled mid-epoch and resumed from its checkpoint ends with the weights of a run
 * that never stopped (same data order, optimizer slots and iterations restored). */
DT_TEST_TIMEOUT(train_checkpoint_resume, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    char ref_dir[1024], run_dir[1024], ck[1100];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", dt_test_tmpdir());
    snprintf(run_dir, sizeof run_dir, "%s/run", dt_test_tmpdir());
    dt_jobspec spec;
    tt_parse(tt_spec(2, 16, "\"adam\"",
                     ", \"checkpoint\": {\"save_freq\": 4, \"keep\": 2}, \"tensorboard\": "
                     "{\"log_dir\": \"tb\"}"),
             &spec);
    dt_train_opts o = dt_train_opts_default();

    tt_replica ref[2];
    o.out_dir = ref_dir;
    tt_run(&spec, 2, &o, -1, 0, ref);
    ASSERT_EQ(ref[0].st, DT_OK);
    ASSERT_EQ(ref[0].res.global_step, 26);
    snprintf(ck, sizeof ck, "%s/checkpoints", ref_dir);
    ASSERT_EQ(count_ckpts(ck), 2); /* keep 2 of 6 */
    char *latest = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_train_latest_checkpoint(ck, &latest, &err), &err);
    ASSERT_CONTAINS(latest, "ckpt-24.safetensors");
    dt_st_file *f;
    ASSERT_OK(dt_st_open(latest, &f, &err), &err);
    ASSERT_STREQ(dt_st_metadata(f, "spec_hash"), spec.hash_hex);
    ASSERT_STREQ(dt_st_metadata(f, "epoch"), "1");
    ASSERT_STREQ(dt_st_metadata(f, "step"), "11");
    ASSERT_STREQ(dt_st_metadata(f, "iterations"), "24");
    ASSERT_TRUE(dt_st_find(f, "conv/kernel") != NULL);
    ASSERT_TRUE(dt_st_find(f, "optimizer/conv/kernel/momentum") != NULL ||
                dt_st_find(f, "optimizer/conv/kernel/m") != NULL || dt_st_count(f) > 8);
    dt_st_free(f);
    free(latest);
    char final[1100];
    snprintf(final, sizeof final, "%s/final.safetensors", ref_dir);
    ASSERT_STREQ(ref[0].res.final_path, final);
    struct stat sb;
    ASSERT_EQ(stat(final, &sb), 0);
    /* Keras's layout: a train and a validation run, one event file each */
    for (int v = 0; v < 2; v++) {
        char tb[1100];
        snprintf(tb, sizeof tb, "%s/tb/%s", dt_test_tmpdir(), v ? "validation" : "train");
        DIR *d = opendir(tb);
        ASSERT_TRUE(d != NULL);
        int events = 0;
        for (struct dirent *e; (e = readdir(d));)
            events += strncmp(e->d_name, "events.out.tfevents.", 20) == 0;
        closedir(d);
        ASSERT_EQ(events, 1);
    }

    /* cancelled during step 10, so stopped after 11 (checkpoint at 8 and at the stop), then
     * resumed */
    tt_replica run[2];
    o.out_dir = run_dir;
    tt_run(&spec, 2, &o, 0, 10, run);
    ASSERT_EQ(run[0].st, DT_ECANCELED);
    ASSERT_EQ(run[1].st, DT_ECANCELED);
    tt_free(run, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, run);
    ASSERT_EQ(run[0].st, DT_OK);
    ASSERT_TRUE(run[0].res.resumed);
    ASSERT_EQ(run[0].res.resumed_step, 11);
    ASSERT_EQ(run[0].nlosses, 15); /* steps 12..26 */
    ASSERT_EQ(run[0].res.global_step, 26);
    ASSERT_EQ(run[0].res.weights_hash, ref[0].res.weights_hash);
    ASSERT_EQ(run[1].res.weights_hash, ref[0].res.weights_hash);
    tt_free(ref, 2);
    tt_free(run, 2);

    /* a checkpoint of another spec is refused */
    dt_jobspec other;
    tt_parse(tt_spec(3, 16, "\"adam\"", ", \"checkpoint\": {\"save_freq\": 4}"), &other);
    tt_replica x[1];
    tt_run(&other, 1, &o, -1, 0, x);
    ASSERT_EQ(x[0].st, DT_ESTATE);
    ASSERT_CONTAINS(x[0].err.msg, "another job spec");
    tt_free(x, 1);
    dt_jobspec_destroy(&other);
    dt_jobspec_destroy(&spec);
}

/* With Dropout too: step g draws from (seed, g, rank) alone, so every replica of a resumed run
 * draws what it drew in the unbroken one. The run itself differs from the Dropout-free one. */
DT_TEST_TIMEOUT(train_checkpoint_resume_dropout, 120)
{
    tt_setup(N_TRAIN, N_VAL);
    char ref_dir[1024], run_dir[1024];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", dt_test_tmpdir());
    snprintf(run_dir, sizeof run_dir, "%s/run", dt_test_tmpdir());
    dt_jobspec spec, plain;
    const char *ck = ", \"checkpoint\": {\"save_freq\": 4, \"keep\": 2}";
    tt_parse(tt_spec_model(TT_MODEL_DROPOUT, 2, 16, "\"adam\"", ck), &spec);
    tt_parse(tt_spec(2, 16, "\"adam\"", ck), &plain);
    dt_train_opts o = dt_train_opts_default();
    tt_replica ref[2], run[2], p[2];
    o.out_dir = ref_dir;
    tt_run(&spec, 2, &o, -1, 0, ref);
    ASSERT_EQ(ref[0].st, DT_OK);
    ASSERT_EQ(ref[1].res.weights_hash, ref[0].res.weights_hash);
    o.out_dir = run_dir;
    tt_run(&spec, 2, &o, 0, 10, run); /* cancelled during step 10 */
    ASSERT_EQ(run[0].st, DT_ECANCELED);
    tt_free(run, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, run);
    ASSERT_EQ(run[0].st, DT_OK);
    ASSERT_TRUE(run[0].res.resumed);
    ASSERT_EQ(run[0].res.weights_hash, ref[0].res.weights_hash);
    ASSERT_EQ(run[1].res.weights_hash, ref[0].res.weights_hash);
    o.resume = false;
    o.out_dir = NULL;
    tt_run(&plain, 2, &o, -1, 0, p);
    ASSERT_EQ(p[0].st, DT_OK);
    ASSERT_NE(p[0].res.weights_hash, ref[0].res.weights_hash); /* the masks did something */
    tt_free(ref, 2);
    tt_free(run, 2);
    tt_free(p, 2);
    dt_jobspec_destroy(&spec);
    dt_jobspec_destroy(&plain);
}

/* BatchNormalization's moving statistics are averaged across replicas every step, so even a
 * model with non-trainable state ends bit-identical everywhere (the hash covers the state). */
DT_TEST_TIMEOUT(train_batchnorm_replicas_identical, 60)
{
    tt_setup(N_TRAIN, N_VAL);
    char text[16384];
    snprintf(text, sizeof text, "%s", tt_spec(1, 16, "\"adam\"", ""));
    const char *flat = "{\"class_name\": \"Flatten\"";
    char *p = strstr(text, flat);
    ASSERT_TRUE(p != NULL);
    char rest[16384];
    snprintf(rest, sizeof rest, "%s", p);
    snprintf(p, sizeof text - (size_t)(p - text),
             "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"}}, %s", rest);
    dt_jobspec spec;
    tt_parse(text, &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica reps[2];
    tt_run(&spec, 2, &o, -1, 0, reps);
    for (int r = 0; r < 2; r++) {
        if (reps[r].st != DT_OK)
            fprintf(stderr, "rank %d: %s\n", r, reps[r].err.msg);
        ASSERT_EQ(reps[r].st, DT_OK);
        ASSERT_EQ(reps[r].res.weights_hash, reps[0].res.weights_hash);
    }
    tt_free(reps, 2);
    dt_jobspec_destroy(&spec);
}

DT_TEST_TIMEOUT(train_steps_per_epoch_and_validation_freq, 60)
{
    tt_setup(N_TRAIN, N_VAL);
    dt_jobspec spec;
    char text[16384];
    snprintf(text, sizeof text, "%s", tt_spec(3, 16, "\"sgd\"", ""));
    char *p = strstr(text, "\"batch_size\": 16}");
    ASSERT_TRUE(p != NULL);
    snprintf(p, sizeof text - (size_t)(p - text),
             "\"batch_size\": 16, \"steps_per_epoch\": 4, \"validation_freq\": 2}}");
    tt_parse(text, &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica reps[2];
    tt_run(&spec, 2, &o, -1, 0, reps);
    ASSERT_EQ(reps[0].st, DT_OK);
    ASSERT_EQ(reps[0].res.global_step, 12); /* 3 epochs of 4 steps */
    ASSERT_EQ(reps[0].nlosses, 12);
    ASSERT_TRUE(reps[0].res.has_val); /* after epoch 2 */
    tt_free(reps, 2);
    dt_jobspec_destroy(&spec);

    /* one epoch with validation_freq 2: no validation at all */
    p = strstr(text, "\"epochs\": 3");
    p[10] = '1';
    tt_parse(text, &spec);
    tt_run(&spec, 1, &o, -1, 0, reps);
    ASSERT_EQ(reps[0].st, DT_OK);
    ASSERT_EQ(reps[0].res.global_step, 4);
    ASSERT_FALSE(reps[0].res.has_val);
    tt_free(reps, 1);
    dt_jobspec_destroy(&spec);
}

/* The bucket plan (strategy.first_bucket_mb, bucket_mb) as the comm sees it in step 1: the
 * tiny model's weights are conv 40, hidden 2320, out 68 floats; buckets are cut at layer
 * boundaries from the last layer, and the step's small all-reduce (no state + 4 metrics) comes
 * last, carrying the last bucket with it (it is small). */
DT_TEST_TIMEOUT(train_bucket_plan_first_bucket, 60)
{
    tt_setup(32, 8);
    static const struct {
        const char *strategy;
        int n;
        size_t sizes[4];
    } cases[] = {
        {"", 1, {2432}}, /* defaults (1 MiB first, 25 MiB): the whole model, with the metrics */
        {", \"strategy\": {\"first_bucket_mb\": 0.0001}", 2, {68, 2364}},
        {", \"strategy\": {\"first_bucket_mb\": 0.0001, \"bucket_mb\": 0.0001}", 3, {68, 2320, 44}},
        {", \"strategy\": {\"first_bucket_mb\": 0.009, \"bucket_mb\": 0.0001}",
         2,
         {2388, 44}}, /* 0.009 MiB = 2359 floats: out + hidden */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dt_jobspec spec;
        tt_parse(tt_spec(1, 16, "\"sgd\"", cases[c].strategy), &spec);
        dt_train_opts o = dt_train_opts_default();
        tt_replica reps[2];
        tt_run(&spec, 2, &o, -1, 0, reps);
        for (int r = 0; r < 2; r++) {
            if (reps[r].st != DT_OK)
                fprintf(stderr, "case %zu rank %d: %s\n", c, r, reps[r].err.msg);
            ASSERT_EQ(reps[r].st, DT_OK);
            ASSERT_EQ(reps[r].res.weights_hash, reps[0].res.weights_hash);
            ASSERT_TRUE(reps[r].rk.nsizes >= cases[c].n);
            for (int k = 0; k < cases[c].n; k++) {
                if (reps[r].rk.sizes[k] != cases[c].sizes[k])
                    fprintf(stderr, "case %zu rank %d: all-reduce %d has %zu floats, want %zu\n", c,
                            r, k, reps[r].rk.sizes[k], cases[c].sizes[k]);
                ASSERT_EQ(reps[r].rk.sizes[k], cases[c].sizes[k]);
            }
            ASSERT_EQ(reps[r].rk.ncompressed, 0);
        }
        tt_free(reps, 2);
        dt_jobspec_destroy(&spec);
    }
}

/* strategy.compression: gradient buckets on a 16-bit wire (the small all-reduce of metrics and
 * statistics stays float32). Two replicas still learn and end bit-identical, and the run
 * differs from the exact one, so the rounding really happened. */
DT_TEST_TIMEOUT(train_compression_16bit_wire, 120)
{
    tt_setup(512, 128);
    const char *adam = "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01}}";
    dt_jobspec exact, bf16, f16;
    tt_parse(tt_spec(2, 32, adam, ""), &exact);
    tt_parse(tt_spec(2, 32, adam, ", \"strategy\": {\"compression\": \"bfloat16\"}"), &bf16);
    tt_parse(tt_spec(2, 32, adam,
                     ", \"strategy\": {\"compression\": \"float16\", \"first_bucket_mb\": 0.0001}"),
             &f16);
    dt_train_opts o = dt_train_opts_default();
    tt_replica ex[2], b[2], h[2];
    tt_run(&exact, 2, &o, -1, 0, ex);
    tt_run(&bf16, 2, &o, -1, 0, b);
    tt_use_async = true; /* float16 on the comm that keeps buckets in flight */
    tt_run(&f16, 2, &o, -1, 0, h);
    tt_use_async = false;
    tt_replica *runs[] = {ex, b, h};
    const char *names[] = {"float32", "bfloat16", "float16"};
    for (int k = 0; k < 3; k++) {
        tt_replica *r = runs[k];
        for (int i = 0; i < 2; i++) {
            if (r[i].st != DT_OK)
                fprintf(stderr, "%s rank %d: %s\n", names[k], i, r[i].err.msg);
            ASSERT_EQ(r[i].st, DT_OK);
        }
        printf("%s: loss %.4f -> %.4f, val accuracy %.4f\n", names[k], r[0].losses[0],
               r[0].res.loss, r[0].res.val_accuracy);
        ASSERT_EQ(r[1].res.weights_hash, r[0].res.weights_hash); /* bit-identical replicas */
        ASSERT_TRUE(r[0].res.loss < 0.5 * r[0].losses[0]);       /* it learns */
        ASSERT_TRUE(r[0].res.val_accuracy > 0.8);
        ASSERT_EQ(r[0].rk.ncompressed > 0, k > 0);
    }
    ASSERT_NE(b[0].res.weights_hash, ex[0].res.weights_hash);
    ASSERT_NE(h[0].res.weights_hash, ex[0].res.weights_hash);
    ASSERT_NE(h[0].res.weights_hash, b[0].res.weights_hash);
    tt_free(ex, 2);
    tt_free(b, 2);
    tt_free(h, 2);

    /* a comm that carries float32 only refuses the spec instead of training exactly */
    tt_no_compression = true;
    tt_run(&bf16, 2, &o, -1, 0, b);
    tt_no_compression = false;
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(b[i].st, DT_ENOTSUP);
        ASSERT_CONTAINS(b[i].err.msg, "$.strategy.compression");
    }
    tt_free(b, 2);
    dt_jobspec_destroy(&exact);
    dt_jobspec_destroy(&bf16);
    dt_jobspec_destroy(&f16);
}

/* fit's pulse, as a watchdog reads it: it beats during the run (layer by layer: a step is many
 * beats), counts the steps, measures its slowest stretch of own work, and ends idle. */
typedef struct pulse_watch {
    dt_train_pulse *p;
    atomic_bool stop;
    int64_t beats, work_seen;
} pulse_watch;

static void *watch_pulse(void *arg)
{
    pulse_watch *w = arg;
    int64_t last = 0;
    while (!atomic_load(&w->stop)) {
        int64_t b = atomic_load(&w->p->beat_ms);
        w->beats += b != last;
        last = b;
        w->work_seen += atomic_load(&w->p->doing) == DT_TRAIN_WORK;
        dt_sleep_ms(1);
    }
    return NULL;
}

DT_TEST_TIMEOUT(train_pulse_beats, 60)
{
    /* big enough for a fit of some 100 ms: a loaded machine may not run the watcher for 12 */
    tt_setup(4096, 128);
    dt_jobspec spec;
    tt_parse(
        tt_spec(20, 32, "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.05}}", ""),
        &spec);
    dt_train_pulse pulse = {0};
    dt_train_opts o = dt_train_opts_default();
    o.pulse = &pulse;
    dt_trainer *t;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(&spec, &o, &t, &err), &err);
    ASSERT_EQ(atomic_load(&pulse.doing), DT_TRAIN_IDLE); /* preparing is not fitting */
    pulse_watch w = {.p = &pulse};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, watch_pulse, &w), 0);
    int64_t t0 = dt_now_ms();
    dt_train_result r;
    dt_train_comm c = dt_train_comm_local();
    ASSERT_OK(dt_train_fit(t, &c, &r, &err), &err);
    int64_t t1 = dt_now_ms();
    atomic_store(&w.stop, true);
    pthread_join(th, NULL);
    printf("fit %lld ms: the watcher saw %lld beats, slowest stretch %lld ms\n",
           (long long)(t1 - t0), (long long)w.beats, (long long)atomic_load(&pulse.slowest_ms));
    ASSERT_EQ(atomic_load(&pulse.doing), DT_TRAIN_IDLE);
    ASSERT_EQ(atomic_load(&pulse.step), r.global_step);
    ASSERT_EQ(r.global_step, 20 * 128);
    int64_t beat = atomic_load(&pulse.beat_ms);
    ASSERT_TRUE(beat >= t0 && beat <= t1);
    ASSERT_TRUE(atomic_load(&pulse.slowest_ms) >= 0 && atomic_load(&pulse.slowest_ms) <= t1 - t0);
    ASSERT_TRUE(w.work_seen > 0);
    /* The model beats per layer: a watcher polling every ms sees the beat move often. */
    ASSERT_TRUE(w.beats > 1);
    dt_train_free(t);
    dt_jobspec_destroy(&spec);
}
