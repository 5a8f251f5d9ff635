/* test_train_validation_split.c - $.fit.validation_split as Keras's fit takes it: the split of a
 * loaded data set (the tail, file provenance, refusals), and a job holding out the last quarter
 * of one CSV training exactly as the same job given that quarter as $.data.validation. */
#include "core/buf.h"
#include "data/data.h"
#include "test_train_util.h"

#include <cjson/cJSON.h>
#include <math.h>

/* rows lines "a,b,c,label" of seeded values: rows [from, to) of the sequence seed gives. */
static void write_rows(const char *name, int from, int to, uint64_t seed)
{
    dt_rng r;
    dt_rng_seed(&r, seed);
    dt_buf b;
    dt_buf_init(&b, 1u << 20);
    dt_buf_append(&b, "a,b,c,label\n", 12, NULL);
    for (int i = 0; i < to; i++) {
        double x[3] = {dt_rng_normal(&r), dt_rng_normal(&r), dt_rng_normal(&r)};
        char line[128];
        int len = snprintf(line, sizeof line, "%.6f,%.6f,%.6f,%d\n", x[0], x[1], x[2],
                           x[0] - x[1] + 0.5 * x[2] > 0);
        if (i >= from)
            dt_buf_append(&b, line, (size_t)len, NULL);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), name);
    dt_err err = {0};
    ASSERT_OK(dt_file_write_atomic(path, b.data, b.len, &err), &err);
    dt_buf_destroy(&b);
}

static dt_dataset *load_csv(const char *files)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"format\": \"csv\", \"files\": [%s], \"label_column\": \"label\"}", files);
    cJSON *j = cJSON_Parse(text);
    dt_err err = {0};
    dt_data_source src;
    ASSERT_OK(dt_data_source_parse(j, "$.t", dt_test_tmpdir(), &src, &err), &err);
    dt_dataset *ds = NULL;
    ASSERT_OK(dt_dataset_load(&src, &ds, &err), &err);
    dt_data_source_destroy(&src);
    cJSON_Delete(j);
    return ds;
}

DT_TEST(data_validation_split_tail)
{
    /* 3 files of 4, 3 and 3 rows; 0.25 of 10 holds out floor(7.5) = 7.. : 3 rows */
    write_rows("s1.csv", 0, 4, 1);
    write_rows("s2.csv", 0, 3, 2);
    write_rows("s3.csv", 0, 3, 3);
    dt_dataset *ds = load_csv("\"s1.csv\", \"s2.csv\", \"s3.csv\"");
    dt_dataset *full = load_csv("\"s1.csv\", \"s2.csv\", \"s3.csv\"");
    dt_dataset *val = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_dataset_split(ds, 0.25, &val, &err), &err);
    ASSERT_EQ(ds->n, (size_t)7);
    ASSERT_EQ(val->n, (size_t)3);
    ASSERT_EQ(ds->nfiles, (size_t)2); /* s3's rows all went */
    ASSERT_EQ(ds->file_start[2], (size_t)7);
    ASSERT_EQ(val->nfiles, (size_t)1);
    ASSERT_CONTAINS(val->file_names[0], "validation_split");
    ASSERT_TRUE(
        memcmp(val->x_f32, full->x_f32 + 7 * full->x_size, 3 * full->x_size * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(val->y_i32, full->y_i32 + 7, 3 * sizeof(int32_t)) == 0);
    ASSERT_TRUE(memcmp(ds->x_f32, full->x_f32, 7 * full->x_size * sizeof(float)) == 0);
    dt_dataset_free(val);
    dt_dataset_free(ds);
    dt_dataset_free(full);

    /* nothing left on one side */
    ds = load_csv("\"s2.csv\"");
    ASSERT_TRUE(dt_dataset_split(ds, 0.9, &val, &err) != DT_OK); /* floor(0.3) = 0 */
    ASSERT_CONTAINS(err.msg, "leaves 0 for training and 3 for validation");
    ASSERT_TRUE(val == NULL);
    dt_dataset_free(ds);
}

static const char *spec_text(const char *train, const char *validation, const char *split)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"name\": \"vs\", \"model\": {\"class_name\": \"Sequential\", \"config\": "
             "{\"name\": \"m\", \"layers\": [{\"class_name\": \"InputLayer\", \"config\": "
             "{\"batch_shape\": [null, 3], \"name\": \"in\"}}, {\"class_name\": \"Dense\", "
             "\"config\": {\"name\": \"h\", \"units\": 8, \"activation\": \"tanh\"}}, "
             "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 1, "
             "\"activation\": \"sigmoid\"}}]}}, \"compile\": {\"optimizer\": \"adam\", \"loss\": "
             "\"binary_crossentropy\", \"metrics\": [\"accuracy\"]}, \"data\": {\"train\": "
             "{\"format\": \"csv\", \"files\": [\"%s\"], \"label_column\": \"label\"}%s%s%s, "
             "\"shuffle\": true, \"seed\": 3, \"shard_policy\": \"DATA\"}, \"fit\": {\"epochs\": "
             "3, \"batch_size\": 8%s%s}}",
             train, validation ? ", \"validation\": {\"format\": \"csv\", \"files\": [\"" : "",
             validation ? validation : "", validation ? "\"], \"label_column\": \"label\"}" : "",
             split ? ", \"validation_split\": " : "", split ? split : "");
    return buf;
}

DT_TEST_TIMEOUT(train_validation_split_job, 120)
{
    /* 64 rows: validation_split 0.25 holds out rows 48..63 */
    write_rows("all.csv", 0, 64, 9);
    write_rows("head.csv", 0, 48, 9);
    write_rows("tail.csv", 48, 64, 9);
    dt_jobspec a, b;
    tt_parse(spec_text("all.csv", NULL, "0.25"), &a);
    tt_parse(spec_text("head.csv", "tail.csv", NULL), &b);
    ASSERT_NEAR(a.validation_split, 0.25, 0);
    dt_err err = {0};
    dt_train_info ia, ib;
    ASSERT_OK(dt_train_validate(&a, &ia, &err), &err);
    ASSERT_OK(dt_train_validate(&b, &ib, &err), &err);
    ASSERT_EQ(ia.train_examples, (uint64_t)48);
    ASSERT_EQ(ia.val_examples, (uint64_t)16);
    dt_train_opts o = dt_train_opts_default();
    for (int world = 1; world <= 2; world++) {
        tt_replica ra[2], rb[2];
        tt_run(&a, world, &o, -1, 0, ra);
        tt_run(&b, world, &o, -1, 0, rb);
        if (ra[0].st != DT_OK)
            fprintf(stderr, "%s\n", ra[0].err.msg);
        ASSERT_EQ(ra[0].st, DT_OK);
        ASSERT_EQ(rb[0].st, DT_OK);
        ASSERT_TRUE(ra[0].res.has_val);
        ASSERT_EQ(ra[0].res.weights_hash, rb[0].res.weights_hash);
        ASSERT_NEAR(ra[0].res.val_loss, rb[0].res.val_loss, 0);
        ASSERT_NEAR(ra[0].res.loss, rb[0].res.loss, 0);
        tt_free(ra, world);
        tt_free(rb, world);
    }
    dt_jobspec_destroy(&a);
    dt_jobspec_destroy(&b);

    /* refusals, by JSON path */
    const char *bad[][3] = {
        {"tail.csv", "0.25", "$.fit.validation_split: $.data.validation"},
        {NULL, "1.5", "$.fit.validation_split: expected a fraction"},
        {NULL, "\"0.2\"", "$.fit.validation_split: expected a fraction"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_jobspec s;
        dt_jobspec_roots r = {.data_root = dt_test_tmpdir(), .state_dir = dt_test_tmpdir()};
        const char *text = spec_text("all.csv", bad[i][0], bad[i][1]);
        ASSERT_TRUE(dt_jobspec_parse(text, strlen(text), &r, &s, &err) != DT_OK);
        ASSERT_CONTAINS(err.msg, bad[i][2]);
    }
    /* 0.6 of 2 examples leaves none to train on: refused at validation, naming $.fit */
    write_rows("two.csv", 0, 2, 4);
    dt_jobspec c;
    tt_parse(spec_text("two.csv", NULL, "0.6"), &c);
    ASSERT_TRUE(dt_train_validate(&c, NULL, &err) != DT_OK);
    ASSERT_CONTAINS(err.msg, "$.fit");
    ASSERT_CONTAINS(err.msg, "validation_split");
    dt_jobspec_destroy(&c);
}
