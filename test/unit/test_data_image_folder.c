/* test_data_image_folder.c - class folders read by Keras's rules, and JPEG/PNG bytes in
 * TFRecord features.
 *
 * The expected split comes from test/ref/image_ref.py's keras_index: an independent rendering
 * of image_dataset_from_directory's documented rules with os.walk and numpy's
 * RandomState(seed).shuffle, on a tree with uneven classes, an empty class, nested and hidden
 * folders, upper-case extensions and files Keras skips. */
#include "test_image_util.h"

#include "example.pb-c.h"

#include <cjson/cJSON.h>
#include <sys/stat.h>

static cJSON *g_ref;

/* Builds the tree under tmpdir/t (seed, split) and keeps Keras's expected lists in g_ref. */
static const char *make_tree(int seed, double split)
{
    static char dir[1200];
    snprintf(dir, sizeof dir, "%s/t", dt_test_tmpdir());
    char args[1400], *json;
    snprintf(args, sizeof args, "tree '%s' %d %g", dir, seed, split);
    img_ref(args, &json);
    g_ref = cJSON_Parse(json);
    ASSERT_TRUE(g_ref != NULL);
    free(json);
    return dir;
}

static dt_status parse(const char *json, dt_data_source *src, dt_err *err)
{
    cJSON *obj = cJSON_Parse(json);
    ASSERT_TRUE(obj != NULL);
    dt_status st = dt_data_source_parse(obj, "$.data.train", NULL, src, err);
    cJSON_Delete(obj);
    return st;
}

/* src's files and labels equal Keras's list for subset. */
static void expect_keras_order(const dt_data_source *src, const char *subset)
{
    const cJSON *want = cJSON_GetObjectItem(g_ref, subset);
    ASSERT_EQ(src->nfiles, cJSON_GetArraySize(want));
    for (size_t i = 0; i < src->nfiles; i++) {
        const cJSON *e = cJSON_GetArrayItem(want, (int)i);
        ASSERT_STREQ(src->files[i], cJSON_GetArrayItem(e, 0)->valuestring);
        ASSERT_EQ(src->file_labels[i], cJSON_GetArrayItem(e, 1)->valueint);
    }
}

DT_TEST_TIMEOUT(data_image_folder_keras_order_and_split, 120)
{
    img_need_python(false);
    const char *dir = make_tree(42, 0.3);
    char spec[2000];
    dt_data_source src;
    dt_err err = {0};
    for (int v = 0; v < 2; v++) {
        const char *subset = v ? "validation" : "training";
        snprintf(spec, sizeof spec,
                 "{\"format\": \"image_folder\", \"directory\": \"%s\", \"image_size\": [4, 3], "
                 "\"validation_split\": 0.3, \"subset\": \"%s\", \"seed\": 42, "
                 "\"interpolation\": \"nearest\"}",
                 dir, subset);
        ASSERT_OK(parse(spec, &src, &err), &err);
        ASSERT_EQ(src.nclasses, 4); /* ant (empty), bird, cat, dog; not .hidden */
        const cJSON *cls = cJSON_GetObjectItem(g_ref, "classes");
        for (size_t k = 0; k < src.nclasses; k++)
            ASSERT_STREQ(src.class_names[k], cJSON_GetArrayItem(cls, (int)k)->valuestring);
        expect_keras_order(&src, subset);
        /* loaded: row i is file i, the label is its class */
        dt_dataset *ds;
        ASSERT_OK(dt_dataset_load(&src, &ds, &err), &err);
        ASSERT_EQ(ds->n, src.nfiles);
        ASSERT_EQ(ds->x_rank, 3);
        ASSERT_EQ(ds->x_shape[0], 4);
        ASSERT_EQ(ds->x_shape[1], 3);
        ASSERT_EQ(ds->x_shape[2], 3);
        ASSERT_EQ(ds->num_classes, 4);
        ASSERT_EQ(ds->nfiles, src.nfiles);
        for (size_t i = 0; i < ds->n; i++) {
            ASSERT_EQ(ds->y_i32[i], src.file_labels[i]);
            size_t len;
            uint8_t *data = img_read("/", src.files[i], &len);
            dt_image_opts o = src.image;
            dt_image im;
            ASSERT_OK(dt_image_decode(data, len, &o, src.files[i], &im, &err), &err);
            ASSERT_EQ(ds->x_u8[i * ds->x_size], im.px[0]); /* flat images: any pixel */
            dt_image_destroy(&im);
            free(data);
        }
        /* FILE sharding splits these files between 2 workers */
        size_t total = 0;
        for (int w = 0; w < 2; w++) {
            dt_shard_plan plan;
            ASSERT_OK(dt_shard_resolve(DT_SHARD_FILE, ds->nfiles, 2, w, &plan, &err), &err);
            total += dt_shard_count(&plan, ds->file_start, ds->nfiles);
        }
        ASSERT_EQ(total, ds->n);
        dt_dataset_free(ds);
        dt_data_source_destroy(&src);
    }
    /* another seed, another order - still Keras's */
    cJSON_Delete(g_ref);
    char d2[1300];
    snprintf(d2, sizeof d2, "%s/t", dt_test_tmpdir());
    char args[1500], *json;
    snprintf(args, sizeof args, "tree '%s' 7 0.5", d2);
    img_ref(args, &json);
    g_ref = cJSON_Parse(json);
    free(json);
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"validation_split\": 0.5, "
             "\"subset\": \"validation\", \"seed\": 7}",
             dir);
    ASSERT_OK(parse(spec, &src, &err), &err);
    expect_keras_order(&src, "validation");
    ASSERT_EQ(src.image.height, 256); /* Keras's defaults */
    ASSERT_EQ(src.image.channels, 3);
    dt_data_source_destroy(&src);
    cJSON_Delete(g_ref);
}

/* numpy's RandomState(seed).shuffle, checked against numpy itself for a few sizes. */
DT_TEST_TIMEOUT(data_image_numpy_shuffle, 60)
{
    img_need_python(false);
    char cmd[2600], path[1200];
    snprintf(path, sizeof path, "%s/perm.txt", dt_test_tmpdir());
    dt_test_python_cmd(cmd, sizeof cmd,
                       " -c \"import numpy as np\nfor s, n in ((0, 1), (42, 10), (1337, 1000), "
                       "(4294967295, 77777)):\n p = list(range(n)); np.random.RandomState(s)"
                       ".shuffle(p); print(s, n, ' '.join(map(str, p)))\" > '%s'",
                       path);
    ASSERT_EQ(system(cmd), 0);
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    unsigned long seed;
    size_t n;
    while (fscanf(f, "%lu %zu", &seed, &n) == 2) {
        size_t *perm = malloc(n * sizeof *perm);
        dt_image_numpy_shuffle((uint32_t)seed, perm, n);
        for (size_t i = 0; i < n; i++) {
            size_t want;
            ASSERT_EQ(fscanf(f, "%zu", &want), 1);
            ASSERT_EQ(perm[i], want);
        }
        free(perm);
    }
    fclose(f);
}

DT_TEST_TIMEOUT(data_image_folder_labels_and_errors, 120)
{
    img_need_python(false);
    const char *dir = make_tree(1, 0.2);
    char spec[2000];
    dt_data_source src;
    dt_err err = {0};
    dt_dataset *ds;
    /* class_names: a subset, in the given order; categorical labels are one-hot */
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"image_size\": [2, 2], "
             "\"class_names\": [\"dog\", \"bird\"], \"label_mode\": \"categorical\", "
             "\"shuffle\": false, \"color_mode\": \"grayscale\"}",
             dir);
    ASSERT_OK(parse(spec, &src, &err), &err);
    ASSERT_EQ(src.nfiles, 4);
    ASSERT_CONTAINS(src.files[0], "/dog/d0.png");
    ASSERT_CONTAINS(src.files[2], "/dog/d2.png");
    ASSERT_CONTAINS(src.files[3], "/bird/b0.png");
    ASSERT_OK(dt_dataset_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->y_kind, DT_LABEL_FLOAT);
    ASSERT_EQ(ds->y_size, 2);
    ASSERT_NEAR(ds->y_f32[0], 1, 0);
    ASSERT_NEAR(ds->y_f32[3 * 2 + 1], 1, 0);
    ASSERT_EQ(ds->x_shape[2], 1);
    dt_dataset_free(ds);
    dt_data_source_destroy(&src);
    /* binary needs two classes */
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"label_mode\": \"binary\"}",
             dir);
    ASSERT_STATUS(parse(spec, &src, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.data.train.label_mode: \"binary\" needs exactly 2 classes");
    /* a split without a seed, an unknown class, an unknown key */
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"validation_split\": 0.2, "
             "\"subset\": \"training\"}",
             dir);
    ASSERT_STATUS(parse(spec, &src, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.data.train.seed: missing");
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"class_names\": [\"cow\"]}",
             dir);
    ASSERT_STATUS(parse(spec, &src, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.data.train.class_names[0]: \"cow\" is not a subfolder");
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"imagesize\": [2, 2]}", dir);
    ASSERT_STATUS(parse(spec, &src, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.data.train.imagesize: unknown key");
    snprintf(spec, sizeof spec, "{\"format\": \"image_folder\", \"directory\": \"%s/none\"}", dir);
    ASSERT_STATUS(parse(spec, &src, &err), DT_ENOENT);
    ASSERT_CONTAINS(err.msg, "is not a folder");

    /* bad files among good ones: text named .jpg, a truncated PNG, a FIFO named .png */
    char p[1400];
    snprintf(p, sizeof p, "%s/dog/a_text.jpg", dir);
    img_write("/", p, "not a jpeg\n", 11);
    size_t len;
    snprintf(p, sizeof p, "%s/dog/d0.png", dir);
    uint8_t *png = img_read("/", p, &len);
    snprintf(p, sizeof p, "%s/dog/b_cut.png", dir);
    img_write("/", p, png, len / 2);
    free(png);
    snprintf(p, sizeof p, "%s/dog/c_fifo.png", dir);
    ASSERT_EQ(mkfifo(p, 0600), 0);
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"image_size\": [3, 3], "
             "\"class_names\": [\"dog\"], \"shuffle\": false}",
             dir);
    ASSERT_OK(parse(spec, &src, &err), &err);
    ASSERT_EQ(src.nfiles, 6);
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL);
    /* the first bad file in order, whatever the threads did */
    ASSERT_CONTAINS(err.msg, "/dog/a_text.jpg: not a JPEG or PNG image");
    src.image.threads = 1;
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "/dog/a_text.jpg: not a JPEG or PNG image");
    dt_data_source_destroy(&src);
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"image_size\": [3, 3], "
             "\"class_names\": [\"dog\"], \"shuffle\": false, \"on_error\": \"skip\"}",
             dir);
    ASSERT_OK(parse(spec, &src, &err), &err);
    ASSERT_OK(dt_dataset_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, 3);
    ASSERT_EQ(ds->nfiles, 6); /* skipped files keep their place, with no example */
    ASSERT_EQ(ds->file_start[3], 0);
    ASSERT_EQ(ds->file_start[6], 3);
    dt_dataset_free(ds);
    dt_data_source_destroy(&src);
    /* the FIFO alone, failing: named and refused at once */
    snprintf(p, sizeof p, "%s/dog/a_text.jpg", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/dog/b_cut.png", dir);
    unlink(p);
    snprintf(spec, sizeof spec,
             "{\"format\": \"image_folder\", \"directory\": \"%s\", \"image_size\": [3, 3], "
             "\"class_names\": [\"dog\"], \"shuffle\": false}",
             dir);
    ASSERT_OK(parse(spec, &src, &err), &err);
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "/dog/c_fifo.png");
    ASSERT_CONTAINS(err.msg, "FIFO");
    dt_data_source_destroy(&src);
    cJSON_Delete(g_ref);
}

/* ------------------------------------------------------------------ TFRecord image bytes -- */

static size_t frame_example(const uint8_t *img, size_t img_len, int64_t label, uint8_t *out)
{
    ProtobufCBinaryData bd = {img_len, (uint8_t *)img}, fmt = {3, (uint8_t *)"png"};
    Tensorflow__BytesList bl = TENSORFLOW__BYTES_LIST__INIT, fl = TENSORFLOW__BYTES_LIST__INIT;
    bl.n_value = fl.n_value = 1;
    bl.value = &bd;
    fl.value = &fmt;
    Tensorflow__Int64List ll = TENSORFLOW__INT64_LIST__INIT;
    ll.n_value = 1;
    ll.value = &label;
    Tensorflow__Feature f[3] = {TENSORFLOW__FEATURE__INIT, TENSORFLOW__FEATURE__INIT,
                                TENSORFLOW__FEATURE__INIT};
    f[0].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
    f[0].bytes_list = &bl;
    f[1].kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
    f[1].int64_list = &ll;
    f[2].kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
    f[2].bytes_list = &fl;
    Tensorflow__Features__FeatureEntry e[3] = {TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT,
                                               TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT,
                                               TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT};
    static char *keys[3] = {"image/encoded", "image/class/label", "image/format"};
    Tensorflow__Features__FeatureEntry *ep[3];
    for (int i = 0; i < 3; i++) {
        e[i].key = keys[i];
        e[i].value = &f[i];
        ep[i] = &e[i];
    }
    Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
    fs.n_feature = 3;
    fs.feature = ep;
    Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
    ex.features = &fs;
    size_t len = tensorflow__example__get_packed_size(&ex);
    uint8_t *buf = malloc(len);
    tensorflow__example__pack(&ex, buf);
    dt_tfrecord_frame(buf, len, out);
    free(buf);
    return len + 16;
}

DT_TEST_TIMEOUT(data_image_tfrecord_encoded_features, 120)
{
    img_need_python(false);
    char args[1400];
    const char *dir = dt_test_tmpdir();
    snprintf(args, sizeof args, "images '%s'", dir);
    img_ref(args, NULL);
    static const char *const files[] = {"rgb.png", "baseline.jpg", "palette.png"};
    dt_buf b;
    dt_buf_init(&b, 1 << 24);
    dt_err err = {0};
    for (int i = 0; i < 4; i++) { /* record 3 is a corrupt copy of the first */
        size_t len;
        uint8_t *img = img_read(dir, files[i % 3], &len);
        if (i == 3)
            len /= 2;
        uint8_t *fr = malloc(len + 4096);
        size_t n = frame_example(img, len, i, fr);
        ASSERT_OK(dt_buf_append(&b, fr, n, &err), &err);
        free(fr);
        free(img);
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/img.tfrecord", dir);
    ASSERT_OK(dt_file_write_atomic(path, b.data, b.len, &err), &err);
    dt_buf_destroy(&b);
    char spec[2000];
    snprintf(spec, sizeof spec,
             "{\"format\": \"tfrecord\", \"files\": \"%s\", \"label\": \"image/class/label\", "
             "\"features\": {\"image/encoded\": {\"dtype\": \"uint8\", \"shape\": [16, 20, 3], "
             "\"scale\": 0.5}, \"image/class/label\": {\"dtype\": \"int64\"}}}",
             path);
    cJSON *obj = cJSON_Parse(spec);
    dt_data_source src;
    ASSERT_OK(dt_data_source_parse(obj, "$.data.train", NULL, &src, &err), &err);
    dt_dataset *ds;
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "record 3 at byte");
    ASSERT_CONTAINS(err.msg, "feature \"image/encoded\": corrupt PNG");
    dt_data_source_destroy(&src);
    cJSON_AddStringToObject(obj, "on_error", "skip");
    ASSERT_OK(dt_data_source_parse(obj, "$.data.train", NULL, &src, &err), &err);
    ASSERT_OK(dt_dataset_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, 3);
    ASSERT_EQ(ds->x_size, 16 * 20 * 3);
    ASSERT_EQ(ds->y_i32[2], 2);
    /* each row is the image decoded, resized (bilinear) to 16x20, times 0.5 */
    for (int i = 0; i < 3; i++) {
        size_t len;
        uint8_t *img = img_read(dir, files[i], &len);
        dt_image_opts o = src.image;
        o.height = 16;
        o.width = 20;
        o.channels = 3;
        float *want = malloc(16 * 20 * 3 * sizeof(float));
        ASSERT_OK(dt_image_load_f32(img, len, &o, 0.5f, files[i], want, &err), &err);
        ASSERT_EQ(memcmp(want, ds->x_f32 + (size_t)i * ds->x_size, 16 * 20 * 3 * sizeof(float)), 0);
        free(want);
        free(img);
    }
    dt_dataset_free(ds);
    dt_data_source_destroy(&src);
    cJSON_Delete(obj);
    /* no shape: the first image's (23x37 RGB); a JPEG of another size is then an error */
    snprintf(spec, sizeof spec,
             "{\"format\": \"tfrecord\", \"files\": \"%s\", \"label\": \"image/class/label\", "
             "\"features\": {\"image/encoded\": {\"dtype\": \"uint8\"}, "
             "\"image/class/label\": {\"dtype\": \"int64\"}}}",
             path);
    obj = cJSON_Parse(spec);
    ASSERT_OK(dt_data_source_parse(obj, "$.data.train", NULL, &src, &err), &err);
    ASSERT_STATUS(dt_dataset_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "record 1 at byte");
    ASSERT_CONTAINS(err.msg, "a 61x83 image where the first was 23x37");
    dt_data_source_destroy(&src);
    cJSON_Delete(obj);
}

/* JPEG/PNG features are decoded a chunk of records at a time on "num_parallel_calls" threads:
 * the rows, the labels, the first error (fail) and the records left out (skip) are those of one
 * thread, over two files and more records than one chunk holds (16 a thread). The rows are
 * checked against dt_image_load_f32 by data_image_tfrecord_encoded_features. */
DT_TEST_TIMEOUT(data_image_tfrecord_parallel_decode, 120)
{
    img_need_python(false);
    char dir[1200], cmd[3000];
    snprintf(dir, sizeof dir, "%s/ph", dt_test_tmpdir());
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' '%s' 70 30 90 4 --png 5 >/dev/null",
                       dt_test_src_path("scripts/bench/make_photos.py"), dir);
    ASSERT_EQ(system(cmd), 0);
    dt_err err = {0};
    char paths[2][1400];
    int rec = 0;
    for (int f = 0; f < 2; f++) {
        dt_buf b;
        dt_buf_init(&b, 1 << 26);
        for (int i = 0; i < (f ? 30 : 40); i++, rec++) {
            char name[64];
            snprintf(name, sizeof name, "class_%d/img_%05d.%s", rec % 2, rec,
                     rec < 5 ? "png" : "jpg");
            size_t len;
            uint8_t *img = img_read(dir, name, &len);
            if (rec == 23 || rec == 51) /* cut inside the image data */
                len = len * 2 / 3;
            uint8_t *fr = malloc(len + 4096);
            size_t n = frame_example(img, len, rec % 3, fr);
            ASSERT_OK(dt_buf_append(&b, fr, n, &err), &err);
            free(fr);
            free(img);
        }
        snprintf(paths[f], sizeof paths[f], "%s/part%d.tfrecord", dt_test_tmpdir(), f);
        ASSERT_OK(dt_file_write_atomic(paths[f], b.data, b.len, &err), &err);
        dt_buf_destroy(&b);
    }
    dt_dataset *ds[2] = {0};
    for (int skip = 0; skip < 2; skip++) {
        for (int t = 0; t < 2; t++) {
            char spec[4000];
            snprintf(spec, sizeof spec,
                     "{\"format\": \"tfrecord\", \"files\": [\"%s\", \"%s\"], \"label\": "
                     "\"image/class/label\", \"on_error\": \"%s\", \"features\": "
                     "{\"image/encoded\": {\"dtype\": \"uint8\", \"shape\": [16, 20, 3], "
                     "\"scale\": 0.5}, \"image/class/label\": {\"dtype\": \"int64\"}}}",
                     paths[0], paths[1], skip ? "skip" : "fail");
            cJSON *obj = cJSON_Parse(spec);
            dt_data_source src;
            ASSERT_OK(dt_data_source_parse(obj, "$.data.train", NULL, &src, &err), &err);
            cJSON_Delete(obj);
            src.image.threads = t ? 2 : 1; /* chunks of 32: three, one across the files */
            if (!skip) {
                ASSERT_STATUS(dt_dataset_load(&src, &ds[t], &err), DT_EINVAL);
                ASSERT_CONTAINS(err.msg, "part0.tfrecord: record 23 at byte");
                ASSERT_CONTAINS(err.msg, "corrupt JPEG");
            } else {
                ASSERT_OK(dt_dataset_load(&src, &ds[t], &err), &err);
            }
            dt_data_source_destroy(&src);
        }
        if (!skip)
            continue;
        ASSERT_EQ(ds[0]->n, 68);
        ASSERT_EQ(ds[1]->n, 68);
        ASSERT_EQ(ds[1]->file_start[1], 39); /* part0 lost record 23, part1 its record 11 */
        ASSERT_EQ(memcmp(ds[0]->x_f32, ds[1]->x_f32, 68 * ds[0]->x_size * sizeof(float)), 0);
        ASSERT_EQ(memcmp(ds[0]->y_i32, ds[1]->y_i32, 68 * sizeof(int32_t)), 0);
        ASSERT_EQ(ds[1]->y_i32[23], 24 % 3); /* record 24 moved up to row 23 */
        ASSERT_NE(memcmp(ds[1]->x_f32, ds[1]->x_f32 + ds[1]->x_size, ds[1]->x_size * 4), 0);
        dt_dataset_free(ds[0]);
        dt_dataset_free(ds[1]);
    }
}
