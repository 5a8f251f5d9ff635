/* test_data_tfrecord_shard.c - TFRecord JPEG/PNG features decoded per FILE shard.
 *
 * The photos are written by scripts/bench/make_photos.py (PIL) and framed as tf.train.Example
 * records (image/encoded before image/class/label, so a skipped record's label comes from a
 * second reading) into five files of uneven record counts. What must hold: a worker's shard
 * keeps every record (counts, labels, file_start) and decodes only its own files' images, so
 * its pipeline gives exactly the batches a fully decoded set gives that worker; an image that
 * only another worker decodes cannot fail this one; on_error "skip" keeps a bad record's place
 * and label with no row, and every worker plans the same steps. */
#include "test_image_util.h"

#include "example.pb-c.h"

#include <cjson/cJSON.h>
#include <string.h>

#define NFILES 5
static const int g_per_file[NFILES] = {12, 7, 15, 9, 7}; /* 50 records */

/* One tf.train.Example {image/encoded, image/class/label} framed into out (img_len + 4096). */
static size_t frame_record(const uint8_t *img, size_t img_len, int64_t label, uint8_t *out)
{
    ProtobufCBinaryData bd = {img_len, (uint8_t *)img};
    Tensorflow__BytesList bl = TENSORFLOW__BYTES_LIST__INIT;
    bl.n_value = 1;
    bl.value = &bd;
    Tensorflow__Int64List ll = TENSORFLOW__INT64_LIST__INIT;
    ll.n_value = 1;
    ll.value = &label;
    Tensorflow__Feature f[2] = {TENSORFLOW__FEATURE__INIT, TENSORFLOW__FEATURE__INIT};
    f[0].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
    f[0].bytes_list = &bl;
    f[1].kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
    f[1].int64_list = &ll;
    Tensorflow__Features__FeatureEntry e[2] = {TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT,
                                               TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT};
    static char *keys[2] = {"image/encoded", "image/class/label"};
    Tensorflow__Features__FeatureEntry *ep[2] = {&e[0], &e[1]};
    for (int i = 0; i < 2; i++) {
        e[i].key = keys[i];
        e[i].value = &f[i];
    }
    Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
    fs.n_feature = 2;
    fs.feature = ep;
    Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
    ex.features = &fs;
    size_t len = tensorflow__example__get_packed_size(&ex);
    uint8_t *buf = malloc(len);
    ASSERT_TRUE(buf != NULL);
    tensorflow__example__pack(&ex, buf);
    dt_tfrecord_frame(buf, len, out);
    free(buf);
    return len + 16;
}

/* Writes NFILES record files under tmpdir/NAME from 50 photos (the first 5 PNG); records in
 * cut[0..ncut) have their JPEG cut inside the image data. Label of record r: r % 3. */
static void write_files(const char *name, const int *cut, int ncut, char paths[NFILES][1400])
{
    char dir[1200], cmd[3000];
    snprintf(dir, sizeof dir, "%s/%s", dt_test_tmpdir(), name);
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' '%s' 50 30 90 7 --png 5 >/dev/null",
                       dt_test_src_path("scripts/bench/make_photos.py"), dir);
    ASSERT_EQ(system(cmd), 0);
    dt_err err = {0};
    int rec = 0;
    for (int f = 0; f < NFILES; f++) {
        dt_buf b;
        dt_buf_init(&b, 1 << 26);
        for (int i = 0; i < g_per_file[f]; i++, rec++) {
            char img_name[64];
            snprintf(img_name, sizeof img_name, "class_%d/img_%05d.%s", rec % 2, rec,
                     rec < 5 ? "png" : "jpg");
            size_t len;
            uint8_t *img = img_read(dir, img_name, &len);
            for (int k = 0; k < ncut; k++)
                if (rec == cut[k])
                    len = len * 2 / 3;
            uint8_t *fr = malloc(len + 4096);
            ASSERT_TRUE(fr != NULL);
            size_t n = frame_record(img, len, rec % 3, fr);
            ASSERT_OK(dt_buf_append(&b, fr, n, &err), &err);
            free(fr);
            free(img);
        }
        snprintf(paths[f], sizeof paths[f], "%s/part%d.tfrecord", dir, f);
        ASSERT_OK(dt_file_write_atomic(paths[f], b.data, b.len, &err), &err);
        dt_buf_destroy(&b);
    }
}

static void parse_src(char paths[NFILES][1400], const char *on_error, int threads,
                      dt_data_source *src)
{
    char spec[12000], files[8000] = "";
    for (int f = 0; f < NFILES; f++)
        snprintf(files + strlen(files), sizeof files - strlen(files), "%s\"%s\"", f ? ", " : "",
                 paths[f]);
    snprintf(spec, sizeof spec,
             "{\"format\": \"tfrecord\", \"files\": [%s], \"label\": \"image/class/label\", "
             "\"on_error\": \"%s\", \"features\": {\"image/encoded\": {\"dtype\": \"uint8\", "
             "\"shape\": [16, 20, 3], \"scale\": 0.5}, \"image/class/label\": {\"dtype\": "
             "\"int64\"}}}",
             files, on_error);
    cJSON *obj = cJSON_Parse(spec);
    ASSERT_TRUE(obj != NULL);
    dt_err err = {0};
    ASSERT_OK(dt_data_source_parse(obj, "$.data.train", NULL, src, &err), &err);
    cJSON_Delete(obj);
    src->image.threads = threads;
}

/* The file of record r. */
static int file_of(size_t r)
{
    int f = 0;
    for (size_t start = 0; r >= start + (size_t)g_per_file[f]; f++)
        start += (size_t)g_per_file[f];
    return f;
}

DT_TEST_TIMEOUT(data_tfrecord_shard_decodes_only_its_files, 120)
{
    img_need_python(false);
    char paths[NFILES][1400];
    write_files("ts", NULL, 0, paths);
    dt_data_source src;
    parse_src(paths, "fail", 2, &src);
    dt_err err = {0};
    dt_dataset *full;
    ASSERT_OK(dt_dataset_load(&src, &full, &err), &err);
    ASSERT_EQ(full->n, 50);
    ASSERT_TRUE(full->x_row == NULL);
    for (int W = 2; W <= 3; W++) {
        size_t total = 0;
        for (int w = 0; w < W; w++) {
            dt_data_load_opts lo = {.policy = DT_SHARD_FILE, .num_workers = W, .worker_index = w};
            dt_dataset *part;
            ASSERT_OK(dt_dataset_load_shard(&src, &lo, &part, &err), &err);
            /* every record keeps its place, file and label; only w's files have pixels */
            ASSERT_EQ(part->n, 50);
            ASSERT_EQ(part->nfiles, NFILES);
            ASSERT_EQ(memcmp(part->file_start, full->file_start, (NFILES + 1) * sizeof(size_t)), 0);
            ASSERT_EQ(part->num_classes, full->num_classes);
            ASSERT_EQ(part->shard_workers, W);
            ASSERT_EQ(part->shard_index, w);
            ASSERT_TRUE(part->x_row != NULL);
            size_t held = 0, want = 0;
            for (int f = w; f < NFILES; f += W)
                want += (size_t)g_per_file[f];
            for (size_t i = 0; i < 50; i++) {
                ASSERT_EQ(part->y_i32[i], full->y_i32[i]);
                if (file_of(i) % W != w) {
                    ASSERT_EQ(part->x_row[i], SIZE_MAX);
                    continue;
                }
                ASSERT_EQ(part->x_row[i], held);
                ASSERT_EQ(memcmp(part->x_f32 + held * part->x_size, full->x_f32 + i * full->x_size,
                                 full->x_size * sizeof(float)),
                          0);
                held++;
            }
            ASSERT_EQ(held, want);
            total += img_same_batches(full, part, DT_SHARD_FILE, W, w, 5, file_of);
            /* AUTO resolves to FILE (5 files >= W workers): the same shard */
            img_same_batches(full, part, DT_SHARD_AUTO, W, w, 5, file_of);
            /* a pipeline for another worker or for DATA is refused, not fed holes */
            dt_pipeline_opts o = dt_pipeline_opts_default();
            o.global_batch = W;
            o.num_replicas = W;
            o.replica_rank = (w + 1) % W;
            o.policy = DT_SHARD_FILE;
            dt_pipeline *p;
            ASSERT_STATUS(dt_pipeline_new(part, &o, &p, &err), DT_EINVAL);
            ASSERT_CONTAINS(err.msg, "decoded for FILE shard");
            dt_dataset_free(part);

            /* DATA reads every element: everything decoded, as without a shard */
            lo.policy = DT_SHARD_DATA;
            ASSERT_OK(dt_dataset_load_shard(&src, &lo, &part, &err), &err);
            ASSERT_TRUE(part->x_row == NULL);
            ASSERT_EQ(part->shard_workers, 0);
            ASSERT_EQ(memcmp(part->x_f32, full->x_f32, 50 * full->x_size * sizeof(float)), 0);
            dt_dataset_free(part);
        }
        ASSERT_EQ(total, 2 * 50); /* two epochs of the whole set over the workers */
    }
    /* one worker: no shard */
    dt_data_load_opts one = {.policy = DT_SHARD_FILE, .num_workers = 1};
    dt_dataset *ds;
    ASSERT_OK(dt_dataset_load_shard(&src, &one, &ds, &err), &err);
    ASSERT_TRUE(ds->x_row == NULL);
    ASSERT_EQ(memcmp(ds->x_f32, full->x_f32, 50 * full->x_size * sizeof(float)), 0);
    dt_dataset_free(ds);
    /* FILE with more workers than files is refused by name, as the pipeline would */
    dt_data_load_opts many = {.policy = DT_SHARD_FILE, .num_workers = 6, .worker_index = 1};
    ASSERT_STATUS(dt_dataset_load_shard(&src, &many, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "at least one file per worker");
    dt_dataset_free(full);
    dt_data_source_destroy(&src);
}

DT_TEST_TIMEOUT(data_tfrecord_shard_bad_images_by_owner, 120)
{
    img_need_python(false);
    char paths[NFILES][1400];
    /* files: part0 records 0-11, part1 12-18, part2 19-33, part3 34-42, part4 43-49. Cut:
     * record 8 (part0's 8), 15 (part1's 3), 30 (part2's 11). Workers of 2: {0, 2, 4}, {1, 3};
     * of 3: {0, 3}, {1, 4}, {2}. */
    const int cut[3] = {8, 15, 30};
    write_files("tb", cut, 3, paths);
    dt_err err = {0};
    dt_dataset *ds;

    /* fail: only the worker that decodes a bad image fails, naming its record */
    dt_data_source src;
    parse_src(paths, "fail", 2, &src);
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "part0.tfrecord: record 8 at byte");
    dt_data_load_opts lo = {.policy = DT_SHARD_FILE, .num_workers = 3, .worker_index = 1};
    ASSERT_STATUS(dt_dataset_load_shard(&src, &lo, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "part1.tfrecord: record 3 at byte");
    ASSERT_CONTAINS(err.msg, "corrupt JPEG");
    lo.worker_index = 2;
    ASSERT_STATUS(dt_dataset_load_shard(&src, &lo, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "part2.tfrecord: record 11 at byte");
    lo.worker_index = 0; /* part0 (record 8 cut)... */
    ASSERT_STATUS(dt_dataset_load_shard(&src, &lo, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "part0.tfrecord: record 8 at byte");
    dt_data_source_destroy(&src);
    /* ...while with cuts only in part0 and part2, worker 1 of 2 (part1, part3) never decodes
     * them and loads */
    const int cut02[2] = {8, 30};
    char p2[NFILES][1400];
    write_files("tb2", cut02, 2, p2);
    parse_src(p2, "fail", 2, &src);
    dt_data_load_opts lo1 = {.policy = DT_SHARD_FILE, .num_workers = 2, .worker_index = 1};
    ASSERT_OK(dt_dataset_load_shard(&src, &lo1, &ds, &err), &err);
    ASSERT_EQ(ds->n, 50);
    ASSERT_EQ(ds->y_i32[8], 8 % 3); /* another worker's bad record: counted, labelled */
    ASSERT_EQ(ds->x_row[8], SIZE_MAX);
    dt_dataset_free(ds);
    dt_data_source_destroy(&src);

    /* skip: the full set loses the 3 bad records; a shard keeps them with labels, no rows */
    parse_src(paths, "skip", 2, &src);
    dt_dataset *full;
    ASSERT_OK(dt_dataset_load(&src, &full, &err), &err);
    ASSERT_EQ(full->n, 47);
    for (int W = 2; W <= 3; W++) {
        int64_t steps = -1;
        size_t seen = 0, held_total = 0;
        for (int w = 0; w < W; w++) {
            dt_data_load_opts l = {.policy = DT_SHARD_FILE, .num_workers = W, .worker_index = w};
            dt_dataset *part;
            ASSERT_OK(dt_dataset_load_shard(&src, &l, &part, &err), &err);
            ASSERT_EQ(part->n, 50); /* a shard plans with every record, bad ones included */
            ASSERT_EQ(part->file_start[1], 12);
            for (size_t i = 0; i < 50; i++) {
                ASSERT_EQ(part->y_i32[i], (int32_t)(i % 3)); /* a bad record's label kept */
                held_total += part->x_row[i] != SIZE_MAX;
            }
            for (int k = 0; k < 3; k++)
                ASSERT_EQ(part->x_row[cut[k]], SIZE_MAX);
            /* a held row is the full set's row of the same record (47 rows, 3 left out) */
            for (size_t i = 0; i < 50; i++) {
                if (part->x_row[i] == SIZE_MAX)
                    continue;
                size_t fr = i - (i > 8) - (i > 15) - (i > 30);
                ASSERT_EQ(memcmp(part->x_f32 + part->x_row[i] * part->x_size,
                                 full->x_f32 + fr * full->x_size, full->x_size * sizeof(float)),
                          0);
            }
            dt_pipeline_opts o = dt_pipeline_opts_default();
            o.global_batch = 2 * W;
            o.num_replicas = W;
            o.replica_rank = w;
            o.policy = DT_SHARD_FILE;
            dt_pipeline *p;
            ASSERT_OK(dt_pipeline_new(part, &o, &p, &err), &err);
            if (steps < 0)
                steps = dt_pipeline_steps_per_epoch(p);
            ASSERT_EQ(dt_pipeline_steps_per_epoch(p), steps); /* the same plan everywhere */
            ASSERT_OK(dt_pipeline_epoch_begin(p, 0, &err), &err);
            for (;;) {
                const dt_batch *b;
                ASSERT_OK(dt_pipeline_next(p, &b, dt_deadline_in(30000), &err), &err);
                if (!b)
                    break;
                for (int i = 0; i < b->n; i++)
                    for (int k = 0; k < 3; k++)
                        ASSERT_NE((int)b->index[i], cut[k]);
                seen += (size_t)b->n;
            }
            dt_pipeline_free(p);
            dt_dataset_free(part);
        }
        /* W=2: worker 0 has 12+15+7 = 34 records, 17 steps of 2; W=3: 12+9 = 21, 11 steps */
        ASSERT_EQ(steps, W == 2 ? 17 : 11);
        ASSERT_EQ(held_total, 47); /* the good ones, each on its worker */
        ASSERT_EQ(seen, 47);
    }
    dt_dataset_free(full);
    dt_data_source_destroy(&src);
}

/* What a job's checks at submit load (index_only): every record with its label, no image
 * decoded (a cut JPEG does not fail it), nothing a pipeline can be fed; the validation_split
 * of an index splits by count. Records without image bytes load as before. */
DT_TEST_TIMEOUT(data_tfrecord_index_only_decodes_nothing, 120)
{
    img_need_python(false);
    char paths[NFILES][1400];
    const int cut[1] = {20};
    write_files("ti", cut, 1, paths);
    dt_data_source src;
    parse_src(paths, "fail", 2, &src);
    dt_err err = {0};
    dt_dataset *ds;
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL); /* decoded: record 20 fails */
    ASSERT_CONTAINS(err.msg, "part2.tfrecord: record 1 at byte");
    dt_data_load_opts lo = {.index_only = true};
    ASSERT_OK(dt_dataset_load_shard(&src, &lo, &ds, &err), &err);
    ASSERT_EQ(ds->n, 50);
    ASSERT_EQ(ds->shard_workers, -1);
    ASSERT_EQ(ds->x_size, 16 * 20 * 3);
    ASSERT_EQ(ds->x_rank, 3);
    ASSERT_EQ(ds->num_classes, 3);
    ASSERT_EQ(ds->file_start[NFILES], 50);
    for (size_t i = 0; i < 50; i++) {
        ASSERT_EQ(ds->x_row[i], SIZE_MAX);
        ASSERT_EQ(ds->y_i32[i], (int32_t)(i % 3));
    }
    dt_pipeline_opts o = dt_pipeline_opts_default();
    o.global_batch = 4;
    dt_pipeline *p;
    ASSERT_STATUS(dt_pipeline_new(ds, &o, &p, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "indexed, not decoded");
    dt_dataset *val;
    ASSERT_OK(dt_dataset_split(ds, 0.2, &val, &err), &err);
    ASSERT_EQ(ds->n, 40);
    ASSERT_EQ(val->n, 10);
    ASSERT_EQ(val->y_i32[0], 40 % 3);
    dt_dataset_free(val);
    dt_dataset_free(ds);
    dt_data_source_destroy(&src);

    /* no image bytes: index_only changes nothing */
    char csvish[1400];
    snprintf(csvish, sizeof csvish, "%s/ti/nums.tfrecord", dt_test_tmpdir());
    float v = 1.5f;
    Tensorflow__FloatList fl = TENSORFLOW__FLOAT_LIST__INIT;
    fl.n_value = 1;
    fl.value = &v;
    Tensorflow__Feature f = TENSORFLOW__FEATURE__INIT;
    f.kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
    f.float_list = &fl;
    Tensorflow__Features__FeatureEntry e = TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT;
    e.key = "x";
    e.value = &f;
    Tensorflow__Features__FeatureEntry *ep = &e;
    Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
    fs.n_feature = 1;
    fs.feature = &ep;
    Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
    ex.features = &fs;
    size_t len = tensorflow__example__get_packed_size(&ex);
    uint8_t packed[256], framed[512];
    ASSERT_LE(len, sizeof packed);
    tensorflow__example__pack(&ex, packed);
    dt_tfrecord_frame(packed, len, framed);
    ASSERT_OK(dt_file_write_atomic(csvish, framed, len + 16, &err), &err);
    char spec[2000];
    snprintf(spec, sizeof spec,
             "{\"format\": \"tfrecord\", \"files\": \"%s\", \"features\": {\"x\": {\"dtype\": "
             "\"float32\"}}}",
             csvish);
    cJSON *obj = cJSON_Parse(spec);
    ASSERT_OK(dt_data_source_parse(obj, "$.data.train", NULL, &src, &err), &err);
    cJSON_Delete(obj);
    ASSERT_OK(dt_dataset_load_shard(&src, &lo, &ds, &err), &err);
    ASSERT_EQ(ds->n, 1);
    ASSERT_TRUE(ds->x_row == NULL);
    ASSERT_EQ(ds->shard_workers, 0);
    ASSERT_FEQ(ds->x_f32[0], 1.5f);
    dt_dataset_free(ds);
    dt_data_source_destroy(&src);
}
