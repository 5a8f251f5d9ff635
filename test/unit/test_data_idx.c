/* Unit tests of lib/data: IDX on the real Fashion-MNIST and on broken files. */
#include "dt_test.h"

#include "core/buf.h"
#include "data/data.h"

#include <cJSON.h>

#include <stdint.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"

static void need_fmnist(void)
{
    if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0)
        DT_SKIP("Debian's dataset-fashion-mnist is not installed (make deps)");
}

DT_TEST(data_idx_fashion_mnist_train)
{
    need_fmnist();
    dt_err err = {0};
    dt_dataset *ds;
    int64_t shape[3] = {28, 28, 1};
    ASSERT_OK(dt_idx_load(FMNIST "/train-images-idx3-ubyte.gz",
                          FMNIST "/train-labels-idx1-ubyte.gz", 1.0f / 255, 3, shape, &ds, &err),
              &err);
    ASSERT_EQ(ds->n, 60000);
    ASSERT_EQ(ds->x_rank, 3);
    ASSERT_EQ(ds->x_shape[0], 28);
    ASSERT_EQ(ds->x_shape[2], 1);
    ASSERT_EQ(ds->x_size, 784);
    ASSERT_TRUE(ds->x_u8 != NULL);
    ASSERT_EQ(ds->x_u8[14 * 28 + 14], 217);
    ASSERT_EQ(ds->y_kind, DT_LABEL_INT32);
    ASSERT_EQ(ds->num_classes, 10);
    ASSERT_EQ(ds->y_i32[0], 9);
    ASSERT_EQ(ds->y_i32[59999], 5);
    long sum = 0;
    for (int i = 0; i < 784; i++)
        sum += ds->x_u8[i];
    ASSERT_EQ(sum, 76247);
    dt_dataset_free(ds);
}

DT_TEST(data_idx_fashion_mnist_test_split)
{
    need_fmnist();
    dt_err err = {0};
    dt_dataset *ds;
    ASSERT_OK(dt_idx_load(FMNIST "/t10k-images-idx3-ubyte.gz", FMNIST "/t10k-labels-idx1-ubyte.gz",
                          1.0f, 0, NULL, &ds, &err),
              &err);
    ASSERT_EQ(ds->n, 10000);
    ASSERT_EQ(ds->x_rank, 2);
    ASSERT_EQ(ds->y_i32[0], 9);
    ASSERT_EQ(ds->y_i32[9999], 5);
    int hist[10] = {0};
    for (size_t i = 0; i < ds->n; i++)
        hist[ds->y_i32[i]]++;
    for (int c = 0; c < 10; c++)
        ASSERT_EQ(hist[c], 1000);
    dt_dataset_free(ds);
}

static const char *tmp(const char *name)
{
    static char buf[4][512];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 512, "%s/%s", dt_test_tmpdir(), name);
    return b;
}

static void write_file(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ(fwrite(d, 1, n, f), n);
    fclose(f);
}

/* An IDX3 of n images of 2x3 uint8, value = i*6 + k, and its labels (i % 3). */
static void write_small_idx(const char *img, const char *lab, int n)
{
    uint8_t buf[16 + 600];
    uint8_t h[16] = {0, 0, 8, 3, 0, 0, 0, (uint8_t)n, 0, 0, 0, 2, 0, 0, 0, 3};
    memcpy(buf, h, 16);
    for (int i = 0; i < n * 6; i++)
        buf[16 + i] = (uint8_t)i;
    write_file(img, buf, 16 + (size_t)n * 6);
    uint8_t l[8 + 100] = {0, 0, 8, 1, 0, 0, 0, (uint8_t)n};
    for (int i = 0; i < n; i++)
        l[8 + i] = (uint8_t)(i % 3);
    write_file(lab, l, 8 + (size_t)n);
}

DT_TEST(data_idx_small_raw_and_gz)
{
    dt_err err = {0};
    const char *img = tmp("i.idx"), *lab = tmp("l.idx"), *gz = tmp("i.idx.gz");
    write_small_idx(img, lab, 10);
    char *raw;
    size_t len;
    ASSERT_OK(dt_file_read_all(img, 1 << 20, &raw, &len, &err), &err);
    gzFile g = gzopen(gz, "wb");
    gzwrite(g, raw, (unsigned)len);
    gzclose(g);
    free(raw);
    for (int k = 0; k < 2; k++) {
        dt_dataset *ds;
        ASSERT_OK(dt_idx_load(k ? gz : img, lab, 0.5f, 0, NULL, &ds, &err), &err);
        ASSERT_EQ(ds->n, 10);
        ASSERT_EQ(ds->x_size, 6);
        ASSERT_EQ(ds->x_u8[59], 59);
        ASSERT_EQ(ds->y_i32[4], 1);
        ASSERT_EQ(ds->num_classes, 3);
        dt_dataset_free(ds);
    }
}

/* Targets of any shape: the images as their own labels (an autoencoder: uint8, scaled as the
 * images), and float32 targets of 2x2 a row; int32 targets of rank 2 are refused. */
DT_TEST(data_idx_float_targets_of_any_shape)
{
    dt_err err = {0};
    const char *img = tmp("ae.idx"), *lab = tmp("ae-l.idx"), *f32 = tmp("f32.idx");
    write_small_idx(img, lab, 10);
    dt_dataset *ds;
    ASSERT_OK(dt_idx_load(img, img, 0.5f, 0, NULL, &ds, &err), &err);
    ASSERT_EQ(ds->y_kind, DT_LABEL_FLOAT);
    ASSERT_EQ(ds->y_size, 6);
    for (int i = 0; i < 60; i++)
        ASSERT_NEAR(ds->y_f32[i], i * 0.5f, 0);
    dt_dataset_free(ds);
    uint8_t buf[16 + 10 * 16] = {0, 0, 0x0D, 3, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 2};
    for (int i = 0; i < 40; i++) {
        float v = -1.5f + (float)i;
        uint32_t u;
        memcpy(&u, &v, 4);
        for (int b = 0; b < 4; b++)
            buf[16 + 4 * i + b] = (uint8_t)(u >> (24 - 8 * b));
    }
    write_file(f32, buf, 16 + 160);
    ASSERT_OK(dt_idx_load(img, f32, 0.5f, 0, NULL, &ds, &err), &err);
    ASSERT_EQ(ds->y_size, 4);
    ASSERT_NEAR(ds->y_f32[39], 37.5f, 0); /* float32 targets are not scaled */
    dt_dataset_free(ds);
    buf[2] = 0x0C; /* int32 of rank 3: neither class ids nor targets */
    write_file(f32, buf, 16 + 160);
    ASSERT_TRUE(dt_idx_load(img, f32, 0.5f, 0, NULL, &ds, &err) == DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "float32 / uint8 targets of any shape");
}

/* Token ids as an IDX2 of int32 (type 0x0C): 3 sequences of 4 ids, float32 rows with the scale
 * applied; ids past 2^24 (not exact in float32) are refused naming the element. */
DT_TEST(data_idx_int32_token_ids)
{
    dt_err err = {0};
    const char *img = tmp("ids.idx");
    uint8_t buf[12 + 48] = {0, 0, 0x0C, 2, 0, 0, 0, 3, 0, 0, 0, 4};
    const int32_t ids[12] = {1, 0, 999, 16777216, 7, 7, 0, 0, -5, 42, 3, 65536};
    for (int i = 0; i < 12; i++)
        for (int b = 0; b < 4; b++)
            buf[12 + 4 * i + b] = (uint8_t)((uint32_t)ids[i] >> (24 - 8 * b));
    write_file(img, buf, sizeof buf);
    dt_dataset *ds;
    ASSERT_OK(dt_idx_load(img, NULL, 1.0f, 0, NULL, &ds, &err), &err);
    ASSERT_EQ(ds->n, 3);
    ASSERT_EQ(ds->x_rank, 1);
    ASSERT_EQ(ds->x_shape[0], 4);
    ASSERT_TRUE(ds->x_f32 != NULL);
    for (int i = 0; i < 12; i++)
        ASSERT_TRUE(ds->x_f32[i] == (float)ids[i]);
    dt_dataset_free(ds);
    buf[12 + 4 * 3 + 3] = 1; /* 16777217 */
    write_file(img, buf, sizeof buf);
    ASSERT_TRUE(dt_idx_load(img, NULL, 1.0f, 0, NULL, &ds, &err) == DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "element 3 is 16777217; int32 features must lie within +-2^24");
}

DT_TEST(data_idx_bad_files_are_clear_errors)
{
    dt_err err = {0};
    dt_dataset *ds = NULL;
    char img[512], lab[512], bad[512], l9[512];
    snprintf(img, sizeof img, "%s", tmp("i.idx"));
    snprintf(lab, sizeof lab, "%s", tmp("l.idx"));
    snprintf(bad, sizeof bad, "%s", tmp("bad.idx"));
    snprintf(l9, sizeof l9, "%s", tmp("l9.idx"));
    write_small_idx(img, lab, 10);
    char *raw;
    size_t len;
    ASSERT_OK(dt_file_read_all(img, 1 << 20, &raw, &len, &err), &err);

    /* not IDX at all: the error does not show the file's first bytes */
    write_file(bad, "root:*:20000:0:99999:7:::\n", 26);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "not an IDX file");
    if (strstr(err.msg, "72 6f") || strstr(err.msg, "root"))
        DT_FAIL_("the error echoes the file's bytes: %s", err.msg);

    /* truncated */
    write_file(bad, raw, len - 5);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_EIO);
    ASSERT_CONTAINS(err.msg, bad);
    ASSERT_CONTAINS(err.msg, "truncated");
    /* truncated inside the header */
    write_file(bad, raw, 6);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_EIO);
    ASSERT_CONTAINS(err.msg, "truncated at byte 6");
    /* wrong magic */
    raw[0] = 0x12;
    write_file(bad, raw, len);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "not an IDX file");
    raw[0] = 0;
    /* huge declared sizes */
    uint8_t huge[16] = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9};
    write_file(bad, huge, sizeof huge);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "limit");
    /* the same, gzip'd, so the real-size check cannot catch it first */
    char gz[512];
    snprintf(gz, sizeof gz, "%s", tmp("huge.gz"));
    uint8_t huge2[16] = {0, 0, 8, 3, 0, 0x10, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 1};
    gzFile g = gzopen(gz, "wb");
    gzwrite(g, huge2, sizeof huge2);
    gzclose(g);
    ASSERT_NE(dt_idx_load(gz, lab, 1, 0, NULL, &ds, &err), DT_OK);
    ASSERT_CONTAINS(err.msg, gz);
    /* rank 0 and rank over the limit */
    uint8_t r9[4] = {0, 0, 8, 9};
    write_file(bad, r9, 4);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_EINVAL);
    /* labels that disagree with the images */
    write_small_idx(bad, l9, 9);
    ASSERT_STATUS(dt_idx_load(img, l9, 1, 0, NULL, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "9 labels");
    /* image_shape that does not match */
    int64_t sh[2] = {4, 2};
    ASSERT_STATUS(dt_idx_load(img, lab, 1, 2, sh, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "image_shape");
    /* missing file, garbage */
    ASSERT_STATUS(dt_idx_load(tmp("nope"), lab, 1, 0, NULL, &ds, &err), DT_ENOENT);
    ASSERT_CONTAINS(err.msg, "nope");
    write_file(bad, "hello, world, this is text\n", 27);
    ASSERT_STATUS(dt_idx_load(bad, lab, 1, 0, NULL, &ds, &err), DT_EINVAL);
    /* corrupt gzip stream */
    g = gzopen(gz, "wb");
    gzwrite(g, raw, (unsigned)len);
    gzclose(g);
    char *gzd;
    size_t gzl;
    ASSERT_OK(dt_file_read_all(gz, 1 << 20, &gzd, &gzl, &err), &err);
    for (size_t i = 12; i < gzl - 8; i++)
        gzd[i] ^= 0x5a;
    write_file(gz, gzd, gzl);
    ASSERT_NE(dt_idx_load(gz, lab, 1, 0, NULL, &ds, &err), DT_OK);
    ASSERT_CONTAINS(err.msg, gz);
    ASSERT_TRUE(ds == NULL);
    free(gzd);
    free(raw);
}

DT_TEST(data_fashion_mnist_spec_and_sharded_pipeline)
{
    need_fmnist();
    dt_err err = {0};
    cJSON *j = cJSON_Parse("{\"train\": {\"format\": \"idx\", \"images\": "
                           "\"train-images-idx3-ubyte.gz\", \"labels\": "
                           "\"train-labels-idx1-ubyte.gz\", \"scale\": 0.00392156862745098, "
                           "\"image_shape\": [28, 28, 1]}, \"shuffle\": 10000, \"seed\": 1}");
    dt_data_spec spec;
    ASSERT_OK(dt_data_spec_parse(j, "$.data", FMNIST, &spec, &err), &err);
    cJSON_Delete(j);
    dt_dataset *ds;
    ASSERT_OK(dt_dataset_load(&spec.train, &ds, &err), &err);
    ASSERT_EQ(ds->n, 60000);
    ASSERT_EQ(ds->x_rank, 3);
    /* R = 1..5 replicas, AUTO (one data set -> DATA): disjoint shards whose union is all. */
    uint8_t *seen = calloc(60000, 1);
    for (int R = 1; R <= 5; R++) {
        memset(seen, 0, 60000);
        int64_t steps = -1, total = 0;
        for (int r = 0; r < R; r++) {
            dt_pipeline_opts o = dt_pipeline_opts_default();
            o.global_batch = 60 * R;
            o.num_replicas = R;
            o.replica_rank = r;
            o.shuffle = spec.shuffle;
            o.seed = spec.seed;
            dt_pipeline *p;
            ASSERT_OK(dt_pipeline_new(ds, &o, &p, &err), &err);
            if (steps < 0)
                steps = dt_pipeline_steps_per_epoch(p);
            ASSERT_EQ(dt_pipeline_steps_per_epoch(p), steps);
            ASSERT_OK(dt_pipeline_epoch_begin(p, 3, &err), &err);
            const dt_batch *b;
            for (;;) {
                ASSERT_OK(dt_pipeline_next(p, &b, dt_deadline_in(30000), &err), &err);
                if (!b)
                    break;
                for (int i = 0; i < b->n; i++) {
                    ASSERT_EQ(seen[b->index[i]], 0);
                    seen[b->index[i]] = 1;
                    ASSERT_EQ(b->y_i32[i], ds->y_i32[b->index[i]]);
                }
                if (b->n)
                    ASSERT_NEAR(b->x[783], ds->x_u8[b->index[0] * 784 + 783] / 255.0, 1e-6);
                total += b->n;
            }
            dt_pipeline_free(p);
        }
        ASSERT_EQ(total, 60000);
        ASSERT_EQ(steps, (60000 + 60 * R - 1) / (60 * R));
    }
    free(seen);
    dt_dataset_free(ds);
    dt_data_spec_destroy(&spec);
}
