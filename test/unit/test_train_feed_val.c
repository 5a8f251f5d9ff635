/* test_train_feed_val.c - validation through fit's device feed (each validation batch staged and
 * uploaded on the copy stream while the one before it evaluates, the split kept on the device
 * when it fits) and the pipelines without x when their split is on the device. Whatever the
 * feed does, validation's figures are the host path's bit for bit: val_loss, val_accuracy and
 * every compiled metric (sparse labels and float targets, $.data.validation and
 * $.fit.validation_split, 1 and 2 replicas). Runs on the default ops: the CPU (the feed forced
 * on), the guard, the stand-in GPU and the emulator (DTRAIN_OPS / DTRAIN_CUDA_LIB). The call
 * order on the CUDA backend is checked by gpu_feed_upload_before_sync (test_gpu_feed.c). */
#include "test_train_util.h"

#include "train/train_internal.h"

/* 150 examples at batch 16 (10 steps, the last of 6); validation 40 (3 batches, the last of 8). */
#define N_TRAIN 150
#define N_VAL   40

static void set_mode(const char *feed, const char *on_dev)
{
    setenv("DTRAIN_FEED", feed, 1);
    setenv("DTRAIN_DATA_ON_DEVICE", on_dev, 1);
}

/* Sparse labels: the IDX files of tt_setup, validation given ($.data.validation) or split off
 * the training set ($.fit.validation_split). */
static const char *idx_spec(bool split)
{
    static char buf[16384];
    char base[16384];
    snprintf(base, sizeof base, "%s", tt_spec_model(TT_MODEL_DROPOUT, 2, 16, "\"adam\"", NULL));
    /* shuffled training batches; validation is never shuffled */
    char *sh = strstr(base, "\"shuffle\": false");
    ASSERT_TRUE(sh != NULL);
    memcpy(sh, "\"shuffle\":  true", strlen("\"shuffle\": false"));
    /* compiled metrics besides accuracy, each read from the validation batches' labels */
    const char *acc = "\"metrics\": [\"accuracy\"]";
    char *m = strstr(base, acc);
    ASSERT_TRUE(m != NULL);
    const char *metrics =
        "\"metrics\": [\"accuracy\", {\"class_name\": \"SparseTopKCategoricalAccuracy\", "
        "\"config\": {\"name\": \"top2\", \"k\": 2}}, {\"class_name\": \"Precision\", "
        "\"config\": {\"class_id\": 1}}, \"auc\"]";
    char *val = strstr(base, ", \"validation\": {");
    char *val_end = val ? strstr(val, "\"image_shape\": [8, 8, 1]}") : NULL;
    ASSERT_TRUE(val && val_end);
    val_end += strlen("\"image_shape\": [8, 8, 1]}");
    const char *fit = strstr(base, "\"batch_size\": 16}");
    ASSERT_TRUE(fit != NULL);
    if (split) /* no $.data.validation: the last quarter of the training files */
        snprintf(buf, sizeof buf, "%.*s%s%.*s%.*s\"batch_size\": 16, \"validation_split\": 0.25}%s",
                 (int)(m - base), base, metrics, (int)(val - (m + strlen(acc))), m + strlen(acc),
                 (int)(fit - val_end), val_end, fit + strlen("\"batch_size\": 16}"));
    else
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(m - base), base, metrics, m + strlen(acc));
    return buf;
}

/* Float targets: a CSV of 4 features and 2 targets, MSE, regression metrics. */
static void write_csv(const char *name, int n, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f, "a,b,c,d,y1,y2\n");
    for (int i = 0; i < n; i++) {
        double x[4];
        for (int j = 0; j < 4; j++)
            x[j] = dt_rng_normal(&r);
        fprintf(f, "%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n", x[0], x[1], x[2], x[3],
                0.5 * x[0] - x[2] + 0.05 * dt_rng_normal(&r), 1.0 + 0.3 * x[1] + 0.7 * x[3]);
    }
    ASSERT_EQ(fclose(f), 0);
}

static const char *csv_spec(void)
{
    return "{\"name\": \"reg\", \"model\": {\"class_name\": \"Sequential\", \"config\": {\"name\": "
           "\"r\", \"layers\": [{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": "
           "[null, 4], \"name\": \"in\"}}, {\"class_name\": \"Dense\", \"config\": {\"name\": "
           "\"hidden\", \"units\": 8, \"activation\": \"tanh\"}}, {\"class_name\": \"Dense\", "
           "\"config\": {\"name\": \"out\", \"units\": 2}}]}}, \"compile\": {\"optimizer\": "
           "\"adam\", \"loss\": \"mse\", \"metrics\": [\"mae\", {\"class_name\": "
           "\"RootMeanSquaredError\", \"config\": {\"name\": \"rmse\"}}]}, \"data\": {\"train\": "
           "{\"format\": \"csv\", \"files\": [\"reg-train.csv\"], \"label_column\": [\"y1\", "
           "\"y2\"]}, \"validation\": {\"format\": \"csv\", \"files\": [\"reg-val.csv\"], "
           "\"label_column\": [\"y1\", \"y2\"]}, \"shuffle\": true, \"seed\": 3, "
           "\"shard_policy\": \"DATA\"}, \"fit\": {\"epochs\": 2, \"batch_size\": 16}}";
}

/* b's validation (and everything else) is a's, bit for bit. */
static void same_val(const tt_replica *a, const tt_replica *b, int world, const char *what)
{
    for (int r = 0; r < world; r++) {
        if (b[r].st != DT_OK)
            fprintf(stderr, "%s, rank %d: %s\n", what, r, b[r].err.msg);
        ASSERT_EQ(b[r].st, DT_OK);
        ASSERT_EQ(b[r].res.weights_hash, a[r].res.weights_hash);
        ASSERT_EQ(b[r].nlosses, a[r].nlosses);
        ASSERT_TRUE(memcmp(a[r].losses, b[r].losses, (size_t)a[r].nlosses * sizeof(double)) == 0);
        ASSERT_TRUE(a[r].res.has_val && b[r].res.has_val);
        if (memcmp(&a[r].res.val_loss, &b[r].res.val_loss, sizeof(double)) != 0)
            fprintf(stderr, "%s, rank %d: val_loss %.17g, the host path's %.17g\n", what, r,
                    b[r].res.val_loss, a[r].res.val_loss);
        ASSERT_TRUE(memcmp(&a[r].res.val_loss, &b[r].res.val_loss, sizeof(double)) == 0);
        ASSERT_TRUE(memcmp(&a[r].res.val_accuracy, &b[r].res.val_accuracy, sizeof(double)) == 0);
        ASSERT_EQ(b[r].res.nmetrics, a[r].res.nmetrics);
        ASSERT_GT(a[r].res.nmetrics, 0);
        for (int i = 0; i < a[r].res.nmetrics; i++) {
            ASSERT_STREQ(b[r].res.val_metrics[i].name, a[r].res.val_metrics[i].name);
            if (memcmp(&a[r].res.val_metrics[i].value, &b[r].res.val_metrics[i].value,
                       sizeof(double)) != 0)
                fprintf(stderr, "%s, rank %d: %s %.17g, the host path's %.17g\n", what, r,
                        a[r].res.val_metrics[i].name, b[r].res.val_metrics[i].value,
                        a[r].res.val_metrics[i].value);
            ASSERT_TRUE(memcmp(&a[r].res.val_metrics[i].value, &b[r].res.val_metrics[i].value,
                               sizeof(double)) == 0);
        }
    }
    printf("%s: val_loss %.9g, %s %.9g: the host path's bits\n", what, a[0].res.val_loss,
           a[0].res.val_metrics[a[0].res.nmetrics - 1].name,
           a[0].res.val_metrics[a[0].res.nmetrics - 1].value);
}

DT_TEST_TIMEOUT(train_feed_val_same_bits, 180)
{
    tt_setup(N_TRAIN, N_VAL);
    write_csv("reg-train.csv", N_TRAIN, 1);
    write_csv("reg-val.csv", N_VAL, 2);
    for (int job = 0; job < 3; job++) {
        dt_jobspec spec;
        tt_parse(job == 2 ? csv_spec() : idx_spec(job == 1), &spec);
        for (int world = 1; world <= 2; world++) {
            dt_train_opts o = dt_train_opts_default();
            tt_replica host[2], pre[2], dev[2];
            set_mode("0", "0");
            tt_run(&spec, world, &o, -1, 0, host);
            for (int r = 0; r < world; r++) {
                if (host[r].st != DT_OK)
                    fprintf(stderr, "host path, rank %d: %s\n", r, host[r].err.msg);
                ASSERT_EQ(host[r].st, DT_OK);
            }
            char what[96];
            set_mode("1", "0");
            tt_run(&spec, world, &o, -1, 0, pre);
            snprintf(what, sizeof what, "job %d, R=%d, validation fed", job, world);
            same_val(host, pre, world, what);
            set_mode("1", "1");
            tt_run(&spec, world, &o, -1, 0, dev);
            snprintf(what, sizeof what, "job %d, R=%d, validation set on the device", job, world);
            same_val(host, dev, world, what);
            tt_free(host, world);
            tt_free(pre, world);
            tt_free(dev, world);
        }
        dt_jobspec_destroy(&spec);
    }
    /* 17 validation examples on 2 replicas at 8 each: rank 0 holds 9 (steps of 8 and 1), rank 1
     * 8 (8, then an empty batch the feed passes through without an evaluation) */
    tt_setup(N_TRAIN, 17);
    dt_jobspec spec;
    tt_parse(idx_spec(false), &spec);
    dt_train_opts o = dt_train_opts_default();
    tt_replica host[2], dev[2];
    set_mode("0", "0");
    tt_run(&spec, 2, &o, -1, 0, host);
    ASSERT_EQ(host[0].st, DT_OK);
    ASSERT_EQ(host[1].st, DT_OK);
    set_mode("1", "1");
    tt_run(&spec, 2, &o, -1, 0, dev);
    same_val(host, dev, 2, "17 validation examples, R=2 (an empty batch), set on the device");
    tt_free(host, 2);
    tt_free(dev, 2);
    dt_jobspec_destroy(&spec);
    unsetenv("DTRAIN_FEED");
    unsetenv("DTRAIN_DATA_ON_DEVICE");
}

/* After a fit, the trainer's pipelines: without x exactly where the feed kept their split on the
 * device (DTRAIN_FEED=0 turns all of it off), and the feeds gone. */
static void pipelines_after_fit(const dt_jobspec *spec, bool want_no_x, bool want_x_val)
{
    dt_train_opts o = dt_train_opts_default();
    dt_trainer *t = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(spec, &o, &t, &err), &err);
    dt_train_comm c = {.rank = 0, .world = 1};
    dt_train_result res;
    ASSERT_OK(dt_train_fit(t, &c, &res, &err), &err);
    ASSERT_TRUE(res.has_val);
    ASSERT_TRUE(t->feed == NULL && t->vfeed == NULL);
    ASSERT_EQ(t->p_no_x, want_no_x);
    ASSERT_EQ(t->pv_no_x, !want_x_val);
    dt_pipeline *ps[2] = {t->p, t->pv};
    for (int i = 0; i < 2; i++) {
        const dt_batch *b;
        ASSERT_OK(dt_pipeline_epoch_begin(ps[i], 0, &err), &err);
        ASSERT_OK(dt_pipeline_next(ps[i], &b, dt_deadline_in(10000), &err), &err);
        ASSERT_TRUE(b != NULL && b->n > 0 && b->y_i32 != NULL);
        ASSERT_EQ(b->x == NULL, i == 0 ? want_no_x : !want_x_val);
    }
    dt_train_free(t);
}

DT_TEST(train_feed_pipelines_skip_x)
{
    tt_setup(N_TRAIN, N_VAL);
    dt_jobspec spec;
    tt_parse(idx_spec(false), &spec);
    set_mode("1", "1");
    pipelines_after_fit(&spec, true, false);
    set_mode("1", "0"); /* fed, the sets on the host: the pipelines decode x */
    pipelines_after_fit(&spec, false, true);
    set_mode("0", "1"); /* no feed at all */
    pipelines_after_fit(&spec, false, true);
    dt_jobspec_destroy(&spec);
    unsetenv("DTRAIN_FEED");
    unsetenv("DTRAIN_DATA_ON_DEVICE");
}
