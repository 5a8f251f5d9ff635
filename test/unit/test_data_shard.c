/* Unit tests of lib/data: shard policies, shuffles, the pipeline and its last-batch rule. */
#include "dt_test.h"

#include "core/buf.h"
#include "data/data_internal.h"

#include <cJSON.h>
#include <stdint.h>

/* A synthetic dataset: n examples over nfiles files of uneven sizes; x[i] = {i, -i}, y = i%7. */
static dt_dataset *synth(size_t n, size_t nfiles)
{
    dt_err err = {0};
    dt_dataset *ds;
    ASSERT_OK(dt__dataset_new(&ds, &err), &err);
    ds->n = n;
    ds->x_rank = 1;
    ds->x_shape[0] = 2;
    ds->x_size = 2;
    ds->x_f32 = malloc(sizeof(float) * 2 * (n + 1));
    ds->y_i32 = malloc(sizeof(int32_t) * (n + 1));
    ds->y_kind = DT_LABEL_INT32;
    ds->y_size = 1;
    ds->num_classes = 7;
    for (size_t i = 0; i < n; i++) {
        ds->x_f32[2 * i] = (float)i;
        ds->x_f32[2 * i + 1] = -(float)i;
        ds->y_i32[i] = (int32_t)(i % 7);
    }
    size_t counts[64];
    char *names[64];
    char nb[64][32];
    size_t left = n;
    for (size_t f = 0; f < nfiles; f++) {
        /* uneven: file f gets about (f+1) shares */
        size_t share = f + 1 == nfiles ? left : (n * 2 * (f + 1)) / (nfiles * (nfiles + 1));
        if (share > left)
            share = left;
        counts[f] = share;
        left -= share;
        snprintf(nb[f], sizeof nb[f], "f%zu", f);
        names[f] = nb[f];
    }
    ASSERT_OK(dt__dataset_set_files(ds, names, nfiles, counts, &err), &err);
    return ds;
}

DT_TEST(data_shard_policies_partition_the_data)
{
    dt_err err = {0};
    const size_t n = 103;
    for (size_t nfiles = 1; nfiles <= 6; nfiles++) {
        dt_dataset *ds = synth(n, nfiles);
        for (int W = 1; W <= 5; W++) {
            dt_shard_policy pols[] = {DT_SHARD_AUTO, DT_SHARD_FILE, DT_SHARD_DATA, DT_SHARD_OFF};
            for (int pi = 0; pi < 4; pi++) {
                int seen[103] = {0};
                size_t total = 0;
                for (int w = 0; w < W; w++) {
                    dt_shard_plan plan;
                    dt_status st = dt_shard_resolve(pols[pi], nfiles, W, w, &plan, &err);
                    if (pols[pi] == DT_SHARD_FILE && nfiles < (size_t)W) {
                        ASSERT_EQ(st, DT_EINVAL);
                        ASSERT_CONTAINS(err.msg, "at least one file per worker");
                        goto next_policy;
                    }
                    ASSERT_OK(st, &err);
                    if (pols[pi] == DT_SHARD_AUTO)
                        ASSERT_EQ(plan.policy, nfiles >= (size_t)W ? DT_SHARD_FILE : DT_SHARD_DATA);
                    size_t c = dt_shard_count(&plan, ds->file_start, nfiles);
                    size_t *el = malloc(sizeof(size_t) * (c + 1));
                    dt_shard_elements(&plan, ds->file_start, nfiles, NULL, el);
                    for (size_t k = 0; k < c; k++) {
                        ASSERT_LT(el[k], n);
                        seen[el[k]]++;
                    }
                    total += c;
                    free(el);
                }
                /* OFF: everyone has everything; else disjoint and covering. */
                for (size_t i = 0; i < n; i++)
                    ASSERT_EQ(seen[i], pols[pi] == DT_SHARD_OFF ? W : 1);
                ASSERT_EQ(total, pols[pi] == DT_SHARD_OFF ? n * (size_t)W : n);
            next_policy:;
            }
        }
        dt_dataset_free(ds);
    }
}

DT_TEST(data_shuffle_is_a_deterministic_permutation)
{
    dt_err err = {0};
    const size_t n = 1000;
    size_t a[1000], b[1000];
    dt_shuffle kinds[] = {{DT_SHUFFLE_FULL, 0}, {DT_SHUFFLE_BUFFER, 10}, {DT_SHUFFLE_BUFFER, 1}};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] = i;
        ASSERT_OK(dt_shuffle_apply(&kinds[k], 42, 3, a, n, &err), &err);
        ASSERT_OK(dt_shuffle_apply(&kinds[k], 42, 3, b, n, &err), &err);
        int seen[1000] = {0}, moved = 0, far = 0;
        for (size_t i = 0; i < n; i++) {
            ASSERT_EQ(a[i], b[i]);
            seen[a[i]]++;
            moved += a[i] != i;
            /* tf.data's buffer: an element cannot come out more than K places early */
            if (kinds[k].kind == DT_SHUFFLE_BUFFER)
                ASSERT_GE(i + kinds[k].buffer, a[i]);
            far += a[i] > i + 100;
        }
        for (size_t i = 0; i < n; i++)
            ASSERT_EQ(seen[i], 1);
        if (kinds[k].buffer == 1)
            ASSERT_EQ(moved, 0); /* a buffer of one is no shuffle, as in tf.data */
        else
            ASSERT_GT(moved, 900);
        if (kinds[k].kind == DT_SHUFFLE_FULL)
            ASSERT_GT(far, 100);
        /* another epoch (stream) gives another order */
        for (size_t i = 0; i < n; i++)
            b[i] = i;
        ASSERT_OK(dt_shuffle_apply(&kinds[k], 42, 4, b, n, &err), &err);
        if (kinds[k].buffer != 1)
            ASSERT_NE(memcmp(a, b, sizeof a), 0);
    }
}

/* Runs one epoch on every replica; returns per (step, replica) the dataset indices seen. */
typedef struct run {
    int64_t steps;
    int64_t gn[256];
    int n[256][8];
    size_t idx[256][8][64];
} run;

static void run_epoch(const dt_dataset *ds, dt_pipeline_opts o, int64_t epoch, run *out)
{
    dt_err err = {0};
    memset(out, 0, sizeof *out);
    for (int r = 0; r < o.num_replicas; r++) {
        o.replica_rank = r;
        dt_pipeline *p;
        ASSERT_OK(dt_pipeline_new(ds, &o, &p, &err), &err);
        if (r == 0)
            out->steps = dt_pipeline_steps_per_epoch(p);
        ASSERT_EQ(dt_pipeline_steps_per_epoch(p), out->steps); /* the same on every replica */
        ASSERT_LE(out->steps, 256);
        ASSERT_OK(dt_pipeline_epoch_begin(p, epoch, &err), &err);
        for (int64_t s = 0; s < out->steps; s++) {
            const dt_batch *b;
            ASSERT_OK(dt_pipeline_next(p, &b, dt_deadline_in(10000), &err), &err);
            ASSERT_TRUE(b != NULL);
            ASSERT_EQ(b->step, s);
            ASSERT_EQ(b->epoch, epoch);
            ASSERT_EQ(b->last, s == out->steps - 1);
            ASSERT_LE(b->n, dt_pipeline_local_batch(p));
            if (r == 0)
                out->gn[s] = b->global_n;
            ASSERT_EQ(b->global_n, out->gn[s]);
            out->n[s][r] = b->n;
            for (int i = 0; i < b->n; i++) {
                out->idx[s][r][i] = b->index[i];
                ASSERT_FEQ(b->x[2 * i], (float)b->index[i]);
                ASSERT_EQ(b->y_i32[i], (int32_t)(b->index[i] % 7));
            }
        }
        const dt_batch *end;
        ASSERT_OK(dt_pipeline_next(p, &end, dt_deadline_in(1000), &err), &err);
        ASSERT_TRUE(end == NULL);
        dt_pipeline_free(p);
    }
}

DT_TEST(data_pipeline_every_policy_covers_the_epoch)
{
    const size_t n = 103;
    for (size_t nfiles = 1; nfiles <= 5; nfiles += 4) {
        dt_dataset *ds = synth(n, nfiles);
        for (int R = 1; R <= 5; R++) {
            for (int pol = DT_SHARD_AUTO; pol <= DT_SHARD_DATA; pol++) {
                if (pol == DT_SHARD_FILE && nfiles < (size_t)R)
                    continue;
                for (int shuf = 0; shuf < 3; shuf++) {
                    dt_pipeline_opts o = dt_pipeline_opts_default();
                    o.global_batch = 4 * R;
                    o.num_replicas = R;
                    o.policy = (dt_shard_policy)pol;
                    o.shuffle.kind = (dt_shuffle_kind)shuf;
                    o.shuffle.buffer = 16;
                    o.seed = 7;
                    o.prefetch = shuf; /* 0 = synchronous, 1, 2 = threaded */
                    static run rn;
                    run_epoch(ds, o, 1, &rn);
                    int seen[103] = {0};
                    int64_t total = 0;
                    for (int64_t s = 0; s < rn.steps; s++) {
                        int64_t g = 0;
                        for (int r = 0; r < R; r++) {
                            g += rn.n[s][r];
                            for (int i = 0; i < rn.n[s][r]; i++)
                                seen[rn.idx[s][r][i]]++;
                        }
                        ASSERT_EQ(g, rn.gn[s]); /* global_n is the true count of the step */
                        total += g;
                    }
                    ASSERT_EQ(total, (int64_t)n);
                    for (size_t i = 0; i < n; i++)
                        ASSERT_EQ(seen[i], 1);
                }
            }
        }
        dt_dataset_free(ds);
    }
}

DT_TEST(data_pipeline_data_sharding_reproduces_single_worker_steps)
{
    dt_dataset *ds = synth(103, 1);
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        dt_pipeline_opts o = dt_pipeline_opts_default();
        o.global_batch = 12;
        o.policy = DT_SHARD_DATA;
        o.shuffle.kind = shuffled ? DT_SHUFFLE_FULL : DT_SHUFFLE_NONE;
        o.seed = 99;
        static run one, many;
        o.num_replicas = 1;
        run_epoch(ds, o, 2, &one);
        for (int R = 2; R <= 4; R += 1) {
            if (12 % R)
                continue;
            o.num_replicas = R;
            run_epoch(ds, o, 2, &many);
            ASSERT_EQ(many.steps, one.steps);
            for (int64_t s = 0; s < one.steps; s++) {
                /* the step's examples on R replicas are the single worker's, as a set */
                int in_one[103] = {0};
                for (int i = 0; i < one.n[s][0]; i++)
                    in_one[one.idx[s][0][i]] = 1;
                int cnt = 0;
                for (int r = 0; r < R; r++)
                    for (int i = 0; i < many.n[s][r]; i++) {
                        ASSERT_TRUE(in_one[many.idx[s][r][i]]);
                        cnt++;
                    }
                ASSERT_EQ(cnt, one.n[s][0]);
                ASSERT_EQ(many.gn[s], one.gn[s]);
            }
        }
        if (!shuffled) /* no shuffle: the single worker reads in file order */
            for (int64_t s = 0; s < one.steps; s++)
                for (int i = 0; i < one.n[s][0]; i++)
                    ASSERT_EQ(one.idx[s][0][i], (size_t)(s * 12 + i));
    }
    dt_dataset_free(ds);
}

DT_TEST(data_pipeline_uneven_files_never_hang)
{
    /* 3 files of very different sizes under FILE: replicas run out at different steps but
     * all run the same number of steps, some with n = 0. */
    dt_dataset *ds = synth(60, 3); /* files of 10, 20, 30 */
    ASSERT_EQ(ds->file_start[1], 10);
    dt_pipeline_opts o = dt_pipeline_opts_default();
    o.global_batch = 12;
    o.num_replicas = 3;
    o.policy = DT_SHARD_FILE;
    static run rn;
    run_epoch(ds, o, 0, &rn);
    ASSERT_EQ(rn.steps, 8); /* ceil(30 / 4) */
    ASSERT_EQ(rn.n[2][0], 2);
    ASSERT_EQ(rn.n[3][0], 0);
    ASSERT_EQ(rn.n[7][2], 2);
    ASSERT_EQ(rn.gn[0], 12);
    ASSERT_EQ(rn.gn[2], 2 + 4 + 4);
    ASSERT_EQ(rn.gn[7], 2);
    o.drop_remainder = true;
    run_epoch(ds, o, 0, &rn);
    ASSERT_EQ(rn.steps, 2); /* only steps full everywhere */
    ASSERT_EQ(rn.gn[1], 12);
    dt_dataset_free(ds);
}

DT_TEST(data_pipeline_errors_and_teardown)
{
    dt_err err = {0};
    dt_dataset *ds = synth(1000, 1);
    dt_pipeline *p;
    dt_pipeline_opts o = dt_pipeline_opts_default();
    o.global_batch = 10;
    o.num_replicas = 3;
    ASSERT_STATUS(dt_pipeline_new(ds, &o, &p, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "multiple of the number of replicas");
    o.num_replicas = 2;
    o.policy = DT_SHARD_FILE;
    ASSERT_STATUS(dt_pipeline_new(ds, &o, &p, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "1 file(s) for 2 workers");
    o.policy = DT_SHARD_AUTO;
    o.replica_rank = 2;
    ASSERT_STATUS(dt_pipeline_new(ds, &o, &p, &err), DT_EINVAL);
    o.replica_rank = 1;
    o.prefetch = 4;
    ASSERT_OK(dt_pipeline_new(ds, &o, &p, &err), &err);
    const dt_batch *b;
    ASSERT_STATUS(dt_pipeline_next(p, &b, dt_deadline_in(100), &err), DT_ESTATE);
    /* abandon epochs midway, restart, and free with the queue full */
    for (int e = 0; e < 5; e++) {
        ASSERT_OK(dt_pipeline_epoch_begin(p, e, &err), &err);
        for (int s = 0; s < 3 + e; s++) {
            ASSERT_OK(dt_pipeline_next(p, &b, dt_deadline_in(10000), &err), &err);
            ASSERT_EQ(b->step, s);
            ASSERT_EQ(b->epoch, e);
        }
    }
    dt_pipeline_free(p);
    dt_pipeline_free(NULL);
    dt_dataset_free(ds);
}

DT_TEST(data_spec_parse_and_errors)
{
    dt_err err = {0};
    dt_data_spec spec;
    cJSON *j = cJSON_Parse("{\"train\": {\"format\": \"idx\", \"images\": \"a.gz\", \"labels\": "
                           "\"/abs/b.gz\", \"scale\": 0.00392156862745098, \"image_shape\": [28, "
                           "28, 1]}, \"shuffle\": 1000, \"seed\": 42, \"shard_policy\": \"data\"}");
    ASSERT_OK(dt_data_spec_parse(j, "$.data", "/root", &spec, &err), &err);
    ASSERT_STREQ(spec.train.images, "/root/a.gz");
    ASSERT_STREQ(spec.train.labels, "/abs/b.gz");
    ASSERT_EQ(spec.train.image_rank, 3);
    ASSERT_EQ(spec.shuffle.kind, DT_SHUFFLE_BUFFER);
    ASSERT_EQ(spec.shuffle.buffer, 1000);
    ASSERT_EQ(spec.seed, 42);
    ASSERT_EQ(spec.shard_policy, DT_SHARD_DATA);
    ASSERT_FALSE(spec.has_validation);
    dt_data_spec_destroy(&spec);
    cJSON_Delete(j);

    /* files with a glob, relative to the base directory */
    const char *d = dt_test_tmpdir();
    char path[512];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/part-%d.csv", d, i);
        ASSERT_OK(dt_file_write_atomic(path, "a,b\n1,2\n", 8, &err), &err);
    }
    j = cJSON_Parse("{\"train\": {\"format\": \"csv\", \"files\": [\"part-*.csv\", \"x.csv\"], "
                    "\"label_column\": \"b\"}, \"validation\": {\"format\": \"tfrecord\", "
                    "\"files\": \"v.tfrecord\", \"compression\": \"GZIP\", \"features\": {\"x\": "
                    "{\"dtype\": \"float32\", \"shape\": [4]}, \"y\": {\"dtype\": \"int64\"}}, "
                    "\"label\": \"y\"}, \"shuffle\": true}");
    ASSERT_OK(dt_data_spec_parse(j, "$.data", d, &spec, &err), &err);
    ASSERT_EQ(spec.train.nfiles, 4);
    ASSERT_CONTAINS(spec.train.files[0], "part-0.csv");
    ASSERT_CONTAINS(spec.train.files[2], "part-2.csv");
    ASSERT_STREQ(spec.train.label_column, "b");
    ASSERT_TRUE(spec.train.header);
    ASSERT_TRUE(spec.has_validation);
    ASSERT_TRUE(spec.validation.gzip);
    ASSERT_EQ(spec.validation.nfeatures, 2);
    ASSERT_EQ(spec.validation.features[0].shape[0], 4);
    ASSERT_EQ(spec.shuffle.kind, DT_SHUFFLE_FULL);
    dt_data_spec_destroy(&spec);
    cJSON_Delete(j);

    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"[]", "$.data: expected an object"},
        {"{}", "$.data.train: missing"},
        {"{\"train\": {\"format\": \"parquet\"}}", "$.data.train.format"},
        {"{\"train\": {\"format\": \"idx\"}}", "$.data.train.images"},
        {"{\"train\": {\"format\": \"idx\", \"images\": \"a\", \"imags\": 1}}",
         "$.data.train.imags: unknown key"},
        {"{\"train\": {\"format\": \"csv\", \"files\": [\"a\", 3]}}", "$.data.train.files[1]"},
        {"{\"train\": {\"format\": \"csv\", \"files\": [\"nothing-*.csv\"]}}", "matches no file"},
        {"{\"train\": {\"format\": \"csv\", \"files\": \"a\", \"header\": false, "
         "\"label_column\": \"y\"}}",
         "label_column"},
        {"{\"train\": {\"format\": \"tfrecord\", \"files\": \"a\", \"features\": {\"x\": "
         "{\"dtype\": \"complex\"}}}}",
         "$.data.train.features.x.dtype"},
        {"{\"train\": {\"format\": \"tfrecord\", \"files\": \"a\", \"features\": {\"x\": "
         "{\"dtype\": \"float32\", \"shape\": [-1]}}}}",
         "$.data.train.features.x.shape[0]"},
        {"{\"train\": {\"format\": \"tfrecord\", \"files\": \"a\", \"features\": {\"x\": "
         "{\"dtype\": \"float32\"}}, \"label\": \"y\"}}",
         "\"y\" is not one of"},
        {"{\"train\": {\"format\": \"idx\", \"images\": \"a\"}, \"shuffle\": -3}",
         "$.data.shuffle"},
        {"{\"train\": {\"format\": \"idx\", \"images\": \"a\"}, \"shard_policy\": \"HASH\"}",
         "$.data.shard_policy"},
        {"{\"train\": {\"format\": \"idx\", \"images\": \"a\"}, \"validation\": 3}",
         "$.data.validation"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = cJSON_Parse(bad[i].json);
        ASSERT_TRUE(j != NULL);
        ASSERT_NE(dt_data_spec_parse(j, "$.data", d, &spec, &err), DT_OK);
        ASSERT_CONTAINS(err.msg, bad[i].msg);
        cJSON_Delete(j);
    }
}

DT_TEST(data_pipeline_shuffle_is_deterministic_per_seed_and_epoch)
{
    dt_dataset *ds = synth(500, 4);
    for (int pol = DT_SHARD_FILE; pol <= DT_SHARD_OFF; pol++) {
        dt_pipeline_opts o = dt_pipeline_opts_default();
        o.global_batch = 20;
        o.num_replicas = 2;
        o.replica_rank = 1;
        o.policy = (dt_shard_policy)pol;
        o.shuffle.kind = DT_SHUFFLE_BUFFER;
        o.shuffle.buffer = 64;
        o.seed = 5;
        static run a, b, c, d;
        run_epoch(ds, o, 1, &a);
        run_epoch(ds, o, 1, &b); /* same seed and epoch: the same batches */
        run_epoch(ds, o, 2, &c); /* next epoch: reshuffled */
        o.seed = 6;
        run_epoch(ds, o, 1, &d); /* another seed: another order */
        ASSERT_EQ(memcmp(a.idx, b.idx, sizeof a.idx), 0);
        ASSERT_NE(memcmp(a.idx, c.idx, sizeof a.idx), 0);
        ASSERT_NE(memcmp(a.idx, d.idx, sizeof a.idx), 0);
    }
    dt_dataset_free(ds);
}
