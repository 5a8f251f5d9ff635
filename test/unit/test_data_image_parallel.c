/* test_data_image_parallel.c - decoding an image folder on a pool of "num_parallel_calls"
 * threads, and per FILE shard.
 *
 * The photos are written by scripts/bench/make_photos.py (PIL): JPEGs and a few PNGs of mixed
 * sizes in two classes. What must hold: the decoded bytes do not depend on the thread count;
 * a worker that decodes only its FILE shard feeds its pipeline exactly the batches (indices,
 * pixels, labels, global_n) a fully decoded data set gives that worker; DATA decodes
 * everything; a skipped bad file of a shard leaves its batch one short without changing any
 * worker's step count. */
#include "test_image_util.h"

#include <cjson/cJSON.h>
#include <string.h>

/* DIR/p with n photos (the first 3 PNG) and nbad bad .jpg files; returns DIR. */
static const char *make_photos(const char *name, int n, int nbad)
{
    static char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", dt_test_tmpdir(), name);
    char cmd[3000];
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' '%s' %d 30 90 5 --png 3 --bad %d >/dev/null",
                       dt_test_src_path("scripts/bench/make_photos.py"), dir, n, nbad);
    ASSERT_EQ(system(cmd), 0);
    return dir;
}

/* Parses a whole "data" object around a train split of dir. */
static dt_status parse_spec(const char *dir, const char *extra, const char *top, dt_data_spec *spec,
                            dt_err *err)
{
    char json[2000];
    snprintf(json, sizeof json,
             "{\"train\": {\"format\": \"image_folder\", \"directory\": \"%s\", \"image_size\": "
             "[24, 20], \"shuffle\": false%s}%s}",
             dir, extra, top);
    cJSON *obj = cJSON_Parse(json);
    ASSERT_TRUE(obj != NULL);
    dt_status st = dt_data_spec_parse(obj, "$.data", NULL, spec, err);
    cJSON_Delete(obj);
    return st;
}

static size_t g_progress_done, g_progress_total;
static void on_progress(void *arg, size_t done, size_t total)
{
    ASSERT_TRUE(arg == &g_progress_done);
    g_progress_done = done;
    g_progress_total = total;
}

DT_TEST_TIMEOUT(data_image_parallel_same_bytes_any_thread_count, 120)
{
    img_need_python(false);
    const char *dir = make_photos("p", 40, 0);
    dt_data_spec spec;
    dt_err err = {0};
    ASSERT_OK(parse_spec(dir, "", ", \"num_parallel_calls\": 1", &spec, &err), &err);
    ASSERT_EQ(spec.num_parallel_calls, 1);
    ASSERT_EQ(spec.train.image.threads, 1);
    ASSERT_EQ(spec.train.nfiles, 40);
    dt_dataset *one;
    ASSERT_OK(dt_dataset_load(&spec.train, &one, &err), &err);
    ASSERT_EQ(one->n, 40);
    ASSERT_TRUE(one->x_row == NULL);
    /* the rows are not all alike (a pool writing one row everywhere would pass a memcmp) */
    ASSERT_NE(memcmp(one->x_u8, one->x_u8 + one->x_size, one->x_size), 0);
    const int threads[] = {2, 3, 7, 0};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        spec.train.image.threads = threads[t];
        dt_data_load_opts lo = {.progress = on_progress, .progress_arg = &g_progress_done};
        g_progress_done = g_progress_total = 0;
        dt_dataset *ds;
        ASSERT_OK(dt_dataset_load_shard(&spec.train, &lo, &ds, &err), &err);
        ASSERT_EQ(ds->n, one->n);
        ASSERT_EQ(memcmp(ds->x_u8, one->x_u8, one->n * one->x_size), 0);
        ASSERT_EQ(memcmp(ds->y_i32, one->y_i32, one->n * sizeof(int32_t)), 0);
        ASSERT_EQ(g_progress_total, 40); /* the final report: every file done */
        ASSERT_EQ(g_progress_done, 40);
        dt_dataset_free(ds);
    }
    dt_dataset_free(one);
    dt_data_spec_destroy(&spec);

    /* AUTOTUNE, tf.data.AUTOTUNE's -1, absent: 0 (one thread per CPU) */
    const char *autos[] = {", \"num_parallel_calls\": \"AUTOTUNE\"", ", \"num_parallel_calls\": -1",
                           ""};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_OK(parse_spec(dir, "", autos[i], &spec, &err), &err);
        ASSERT_EQ(spec.num_parallel_calls, 0);
        ASSERT_EQ(spec.train.image.threads, 0);
        dt_data_spec_destroy(&spec);
    }
    const char *bad[] = {
        ", \"num_parallel_calls\": 0",        ", \"num_parallel_calls\": 2.5",
        ", \"num_parallel_calls\": \"fast\"", ", \"num_parallel_calls\": 100000",
        ", \"num_parallel_calls\": -2",       ", \"num_parallel_calls\": \"autotune\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(parse_spec(dir, "", bad[i], &spec, &err), DT_EINVAL);
        ASSERT_CONTAINS(err.msg, "$.data.num_parallel_calls: expected a number of threads 1..256");
    }
    /* it belongs to "data", not to a split */
    ASSERT_STATUS(parse_spec(dir, ", \"num_parallel_calls\": 2", "", &spec, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.data.train.num_parallel_calls");
}

DT_TEST_TIMEOUT(data_image_parallel_decodes_only_the_file_shard, 120)
{
    img_need_python(false);
    const char *dir = make_photos("s", 23, 0);
    dt_data_spec spec;
    dt_err err = {0};
    ASSERT_OK(parse_spec(dir, "", ", \"num_parallel_calls\": 3", &spec, &err), &err);
    dt_dataset *full;
    ASSERT_OK(dt_dataset_load(&spec.train, &full, &err), &err);
    ASSERT_EQ(full->n, 23);
    const int W = 3;
    size_t total = 0;
    for (int w = 0; w < W; w++) {
        dt_data_load_opts lo = {.policy = DT_SHARD_FILE, .num_workers = W, .worker_index = w};
        dt_dataset *part;
        ASSERT_OK(dt_dataset_load_shard(&spec.train, &lo, &part, &err), &err);
        /* every file keeps its place and label; only w's files have pixels */
        ASSERT_EQ(part->n, 23);
        ASSERT_EQ(part->nfiles, 23);
        ASSERT_TRUE(part->x_row != NULL);
        ASSERT_EQ(part->shard_workers, W);
        size_t held = 0;
        for (size_t i = 0; i < part->n; i++) {
            ASSERT_EQ(part->y_i32[i], full->y_i32[i]);
            if (i % (size_t)W != (size_t)w) {
                ASSERT_EQ(part->x_row[i], SIZE_MAX);
                continue;
            }
            ASSERT_EQ(part->x_row[i], held);
            ASSERT_EQ(memcmp(part->x_u8 + held * part->x_size, full->x_u8 + i * full->x_size,
                             full->x_size),
                      0);
            held++;
        }
        ASSERT_EQ(held, (23 - (size_t)w + 2) / 3);
        total += img_same_batches(full, part, DT_SHARD_FILE, W, w, 11, NULL);
        /* AUTO resolves to FILE here (23 files >= 3 workers): the same shard */
        img_same_batches(full, part, DT_SHARD_AUTO, W, w, 11, NULL);
        /* a pipeline for another worker or policy is refused, not fed holes */
        dt_pipeline_opts o = dt_pipeline_opts_default();
        o.global_batch = 3;
        o.num_replicas = W;
        o.replica_rank = (w + 1) % W;
        o.policy = DT_SHARD_FILE;
        dt_pipeline *p;
        ASSERT_STATUS(dt_pipeline_new(part, &o, &p, &err), DT_EINVAL);
        ASSERT_CONTAINS(err.msg, "decoded for FILE shard");
        o.replica_rank = w;
        o.policy = DT_SHARD_DATA;
        ASSERT_STATUS(dt_pipeline_new(part, &o, &p, &err), DT_EINVAL);
        dt_dataset_free(part);

        /* DATA: every worker reads every element, so everything is decoded */
        lo.policy = DT_SHARD_DATA;
        ASSERT_OK(dt_dataset_load_shard(&spec.train, &lo, &part, &err), &err);
        ASSERT_TRUE(part->x_row == NULL);
        ASSERT_EQ(part->shard_workers, 0);
        ASSERT_EQ(memcmp(part->x_u8, full->x_u8, full->n * full->x_size), 0);
        img_same_batches(full, part, DT_SHARD_DATA, W, w, 11, NULL);
        dt_dataset_free(part);
    }
    ASSERT_EQ(total, 2 * 23); /* two epochs of the whole set over the three workers */
    dt_dataset_free(full);
    dt_data_spec_destroy(&spec);
}

DT_TEST_TIMEOUT(data_image_parallel_skip_in_a_shard_keeps_the_plan, 120)
{
    img_need_python(false);
    const char *dir = make_photos("b", 10, 2); /* + bad_00000.jpg (text), bad_00001 (cut) */
    dt_data_spec spec;
    dt_err err = {0};
    ASSERT_OK(parse_spec(dir, ", \"on_error\": \"skip\"", "", &spec, &err), &err);
    ASSERT_EQ(spec.train.nfiles, 12);
    int bad[2] = {-1, -1};
    for (size_t i = 0; i < spec.train.nfiles; i++)
        if (strstr(spec.train.files[i], "/bad_"))
            bad[bad[0] < 0 ? 0 : 1] = (int)i;
    ASSERT_GE(bad[1], 0);
    dt_dataset *full;
    ASSERT_OK(dt_dataset_load(&spec.train, &full, &err), &err);
    ASSERT_EQ(full->n, 10); /* everything decoded: the bad files have no example */
    const int W = 2;
    int64_t steps = -1;
    size_t seen = 0, held_total = 0;
    for (int w = 0; w < W; w++) {
        dt_data_load_opts lo = {.policy = DT_SHARD_FILE, .num_workers = W, .worker_index = w};
        dt_dataset *part;
        ASSERT_OK(dt_dataset_load_shard(&spec.train, &lo, &part, &err), &err);
        ASSERT_EQ(part->n, 12); /* a shard plans with every file, bad ones included */
        for (int k = 0; k < 2; k++)
            ASSERT_EQ(part->x_row[bad[k]], SIZE_MAX);
        for (size_t i = 0; i < 12; i++)
            held_total += part->x_row[i] != SIZE_MAX;
        dt_pipeline_opts o = dt_pipeline_opts_default();
        o.global_batch = 4;
        o.num_replicas = W;
        o.replica_rank = w;
        o.policy = DT_SHARD_FILE;
        dt_pipeline *p;
        ASSERT_OK(dt_pipeline_new(part, &o, &p, &err), &err);
        if (steps < 0)
            steps = dt_pipeline_steps_per_epoch(p);
        ASSERT_EQ(dt_pipeline_steps_per_epoch(p), steps); /* the same plan on both workers */
        ASSERT_OK(dt_pipeline_epoch_begin(p, 0, &err), &err);
        const dt_batch *b;
        for (;;) {
            ASSERT_OK(dt_pipeline_next(p, &b, dt_deadline_in(30000), &err), &err);
            if (!b)
                break;
            for (int i = 0; i < b->n; i++) {
                ASSERT_NE((int)b->index[i], bad[0]);
                ASSERT_NE((int)b->index[i], bad[1]);
            }
            seen += (size_t)b->n;
        }
        dt_pipeline_free(p);
        dt_dataset_free(part);
    }
    ASSERT_EQ(steps, 3);       /* 6 files per worker, 2 per step */
    ASSERT_EQ(held_total, 10); /* the good ones, each on its worker */
    ASSERT_EQ(seen, 10);
    dt_dataset_free(full);
    dt_data_spec_destroy(&spec);
}

/* The uint8 fast path of bilinear resizing (decoded images) computes what the float path does:
 * load_u8 = round(resize(float(decode))) for photos of mixed sizes, RGB and gray, up and down. */
DT_TEST_TIMEOUT(data_image_u8_resize_equals_the_float_path, 120)
{
    img_need_python(false);
    const char *dir = make_photos("u", 8, 0);
    dt_data_spec spec;
    dt_err err = {0};
    ASSERT_OK(parse_spec(dir, "", "", &spec, &err), &err);
    const int sizes[][2] = {{24, 20}, {100, 170}, {7, 3}};
    for (size_t f = 0; f < spec.train.nfiles; f++) {
        size_t len;
        uint8_t *data = img_read("/", spec.train.files[f], &len);
        for (int ch = 1; ch <= 3; ch += 2)
            for (size_t s = 0; s < 3; s++) {
                dt_image_opts o = dt_image_opts_default();
                o.channels = ch;
                o.height = sizes[s][0];
                o.width = sizes[s][1];
                o.dct_scaling = false;
                dt_image im;
                ASSERT_OK(dt_image_decode(data, len, &o, "photo", &im, &err), &err);
                size_t n = (size_t)o.height * (size_t)o.width * (size_t)ch;
                float *in = malloc((size_t)im.h * (size_t)im.w * (size_t)ch * sizeof(float));
                float *want = malloc(n * sizeof(float));
                uint8_t *got = malloc(n);
                for (size_t i = 0; i < (size_t)im.h * (size_t)im.w * (size_t)ch; i++)
                    in[i] = im.px[i];
                ASSERT_OK(dt_image_resize(in, im.h, im.w, ch, want, o.height, o.width,
                                          DT_INTERP_BILINEAR, &err),
                          &err);
                ASSERT_OK(dt_image_load_u8(data, len, &o, "photo", got, &err), &err);
                for (size_t i = 0; i < n; i++) {
                    float v = want[i] < 0 ? 0 : want[i] > 255 ? 255 : want[i];
                    ASSERT_EQ(got[i], (uint8_t)(v + 0.5f));
                }
                free(in);
                free(want);
                free(got);
                dt_image_destroy(&im);
            }
        free(data);
    }
    dt_data_spec_destroy(&spec);
}

/* A job's validation at submit indexes an image folder without decoding it: every file is an
 * example with its label and the image_size shape (a bad file too: nothing is read), and such
 * a data set feeds no pipeline. */
DT_TEST_TIMEOUT(data_image_index_only_decodes_nothing, 120)
{
    img_need_python(false);
    const char *dir = make_photos("i", 6, 2);
    dt_data_spec spec;
    dt_err err = {0};
    ASSERT_OK(parse_spec(dir, "", "", &spec, &err), &err);
    dt_dataset *ds;
    ASSERT_STATUS(dt_dataset_load(&spec.train, &ds, &err), DT_EINVAL); /* on_error fail */
    ASSERT_CONTAINS(err.msg, "bad_00000.jpg");
    dt_data_load_opts lo = {.index_only = true};
    ASSERT_OK(dt_dataset_load_shard(&spec.train, &lo, &ds, &err), &err);
    ASSERT_EQ(ds->n, 8);
    ASSERT_EQ(ds->x_size, 24 * 20 * 3);
    ASSERT_EQ(ds->num_classes, 2);
    for (size_t i = 0; i < ds->n; i++) {
        ASSERT_EQ(ds->x_row[i], SIZE_MAX);
        ASSERT_EQ(ds->y_i32[i], spec.train.file_labels[i]);
    }
    dt_pipeline_opts o = dt_pipeline_opts_default();
    dt_pipeline *p;
    ASSERT_STATUS(dt_pipeline_new(ds, &o, &p, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "indexed, not decoded");
    /* $.fit.validation_split at submit splits the index by count (no pixels to copy) */
    dt_dataset *val;
    ASSERT_OK(dt_dataset_split(ds, 0.25, &val, &err), &err);
    ASSERT_EQ(ds->n, 6);
    ASSERT_EQ(val->n, 2);
    ASSERT_EQ(val->shard_workers, -1);
    ASSERT_EQ(val->y_i32[1], spec.train.file_labels[7]);
    dt_dataset_free(val);
    dt_dataset_free(ds);
    dt_data_spec_destroy(&spec);
}
