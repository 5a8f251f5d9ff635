/* Unit tests of lib/data: TFRecord framing, GZIP, tf.train.Example decoding and broken files. */
#include "dt_test.h"

#include "core/buf.h"
#include "core/crc32c.h"
#include "data/data.h"

#include "example.pb-c.h"

#include <stdint.h>
#include <zlib.h>

/* Packs one Example: "x" float_list {i, i/2}, "image" bytes (4 raw bytes or `img`), "label"
 * int64 i % 3, "id" int64 i (unused by the spec). Returns malloc'd bytes. */
static uint8_t *make_example(int i, const uint8_t *img, size_t img_len, bool x_as_int, size_t *len)
{
    float xv[2] = {(float)i, (float)i / 2};
    int64_t xi[2] = {i, i};
    int64_t lv = i % 3, idv = i;
    uint8_t pix[4] = {(uint8_t)i, 255, 0, 51};
    Tensorflow__FloatList fl = TENSORFLOW__FLOAT_LIST__INIT;
    fl.n_value = 2;
    fl.value = xv;
    Tensorflow__Int64List xil = TENSORFLOW__INT64_LIST__INIT;
    xil.n_value = 2;
    xil.value = xi;
    Tensorflow__Int64List ll = TENSORFLOW__INT64_LIST__INIT;
    ll.n_value = 1;
    ll.value = &lv;
    Tensorflow__Int64List il = TENSORFLOW__INT64_LIST__INIT;
    il.n_value = 1;
    il.value = &idv;
    ProtobufCBinaryData bd = {img ? img_len : 4, (uint8_t *)(img ? img : pix)};
    Tensorflow__BytesList bl = TENSORFLOW__BYTES_LIST__INIT;
    bl.n_value = 1;
    bl.value = &bd;
    Tensorflow__Feature fx = TENSORFLOW__FEATURE__INIT, fimg = TENSORFLOW__FEATURE__INIT,
                        flab = TENSORFLOW__FEATURE__INIT, fid = TENSORFLOW__FEATURE__INIT;
    if (x_as_int) {
        fx.kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
        fx.int64_list = &xil;
    } else {
        fx.kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
        fx.float_list = &fl;
    }
    fimg.kind_case = TENSORFLOW__FEATURE__KIND_BYTES_LIST;
    fimg.bytes_list = &bl;
    flab.kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
    flab.int64_list = &ll;
    fid.kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
    fid.int64_list = &il;
    Tensorflow__Features__FeatureEntry e[4] = {
        TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT, TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT,
        TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT, TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT};
    e[0].key = "x";
    e[0].value = &fx;
    e[1].key = "image";
    e[1].value = &fimg;
    e[2].key = "label";
    e[2].value = &flab;
    e[3].key = "id";
    e[3].value = &fid;
    Tensorflow__Features__FeatureEntry *ep[4] = {&e[0], &e[1], &e[2], &e[3]};
    Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
    fs.n_feature = 4;
    fs.feature = ep;
    Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
    ex.features = &fs;
    *len = tensorflow__example__get_packed_size(&ex);
    uint8_t *out = malloc(*len);
    tensorflow__example__pack(&ex, out);
    return out;
}

/* Writes records [from, to) to path, framed, optionally gzip'd. Returns the raw bytes. */
static size_t write_tfrecord(const char *path, int from, int to, bool gz, bool x_as_int,
                             const uint8_t *img, size_t img_len, uint8_t **raw_out)
{
    dt_buf b;
    dt_err err = {0};
    dt_buf_init(&b, 1 << 24);
    for (int i = from; i < to; i++) {
        size_t len;
        uint8_t *ex = make_example(i, img, img_len, x_as_int, &len);
        uint8_t *fr = malloc(len + 16);
        dt_tfrecord_frame(ex, len, fr);
        ASSERT_OK(dt_buf_append(&b, fr, len + 16, &err), &err);
        free(fr);
        free(ex);
    }
    if (gz) {
        gzFile g = gzopen(path, "wb");
        gzwrite(g, b.data, (unsigned)b.len);
        gzclose(g);
    } else {
        ASSERT_OK(dt_file_write_atomic(path, b.data, b.len, &err), &err);
    }
    size_t n = b.len;
    if (raw_out)
        *raw_out = (uint8_t *)dt_buf_steal(&b, &n);
    dt_buf_destroy(&b);
    return n;
}

static char *tmp(const char *name)
{
    char *b = malloc(512);
    snprintf(b, 512, "%s/%s", dt_test_tmpdir(), name);
    return b;
}

static void spec_for(dt_data_source *src, char **files, size_t nfiles, bool gz)
{
    memset(src, 0, sizeof *src);
    src->format = DT_DATA_FORMAT_TFRECORD;
    src->files = files;
    src->nfiles = nfiles;
    src->gzip = gz;
    src->label_index = -1;
    static dt_data_feature f[3];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "x");
    f[0].dtype = DT_DATA_DTYPE_FLOAT32;
    f[0].scale = 1;
    strcpy(f[1].name, "image");
    f[1].dtype = DT_DATA_DTYPE_UINT8;
    f[1].rank = 2;
    f[1].shape[0] = f[1].shape[1] = 2;
    f[1].scale = 1.0f / 255;
    strcpy(f[2].name, "label");
    f[2].dtype = DT_DATA_DTYPE_INT64;
    f[2].scale = 1;
    src->features = f;
    src->nfeatures = 3;
    strcpy(src->label, "label");
}

DT_TEST(data_tfrecord_examples_plain_and_gzip)
{
    dt_err err = {0};
    char *files[3] = {tmp("a.tfrecord"), tmp("b.tfrecord"), tmp("c.tfrecord.gz")};
    write_tfrecord(files[0], 0, 5, false, false, NULL, 0, NULL);
    write_tfrecord(files[1], 5, 12, false, false, NULL, 0, NULL);
    for (int gz = 0; gz < 2; gz++) {
        write_tfrecord(files[2], 12, 20, gz, false, NULL, 0, NULL);
        dt_data_source src;
        dt_dataset *ds;
        spec_for(&src, files + 2, 1, gz);
        ASSERT_OK(dt_tfrecord_load(&src, &ds, &err), &err);
        ASSERT_EQ(ds->n, 8);
        dt_dataset_free(ds);
    }
    dt_data_source src;
    dt_dataset *ds;
    spec_for(&src, files, 3, true);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL); /* a.tfrecord is not gzip'd */
    ASSERT_CONTAINS(err.msg, "a.tfrecord");
    ASSERT_CONTAINS(err.msg, "not gzip'd");
    spec_for(&src, files, 2, false);
    ASSERT_OK(dt_tfrecord_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, 12);
    ASSERT_EQ(ds->x_size, 6); /* x [2] then image [2, 2], concatenated */
    ASSERT_EQ(ds->x_rank, 1);
    ASSERT_EQ(ds->x_shape[0], 6);
    ASSERT_EQ(ds->nfiles, 2);
    ASSERT_EQ(ds->file_start[1], 5);
    ASSERT_EQ(ds->file_start[2], 12);
    ASSERT_EQ(ds->y_kind, DT_LABEL_INT32);
    ASSERT_EQ(ds->num_classes, 3);
    for (int i = 0; i < 12; i++) {
        ASSERT_NEAR(ds->x_f32[6 * i], i, 0);
        ASSERT_NEAR(ds->x_f32[6 * i + 1], i / 2.0, 1e-6);
        ASSERT_NEAR(ds->x_f32[6 * i + 2], i / 255.0, 1e-6);
        ASSERT_NEAR(ds->x_f32[6 * i + 3], 1.0, 1e-6);
        ASSERT_NEAR(ds->x_f32[6 * i + 5], 0.2, 1e-6);
        ASSERT_EQ(ds->y_i32[i], i % 3);
    }
    dt_dataset_free(ds);
    for (int i = 0; i < 3; i++)
        free(files[i]);
}

DT_TEST(data_tfrecord_reader_rejects_broken_files)
{
    dt_err err = {0};
    char *path = tmp("r.tfrecord"), *bad = tmp("bad.tfrecord");
    uint8_t *raw;
    size_t n = write_tfrecord(path, 0, 3, false, false, NULL, 0, &raw);
    size_t rec_len = n / 3;
    dt_data_source src;
    dt_dataset *ds = NULL;
    char *files[1] = {bad};
    spec_for(&src, files, 1, false);

    /* every truncation: a clean error naming the file, or fewer records at a boundary */
    for (size_t cut = 1; cut < n; cut++) {
        ASSERT_OK(dt_file_write_atomic(bad, raw, cut, &err), &err);
        dt_status st = dt_tfrecord_load(&src, &ds, &err);
        if (cut % rec_len == 0) {
            ASSERT_OK(st, &err);
            ASSERT_EQ(ds->n, cut / rec_len);
            dt_dataset_free(ds);
            continue;
        }
        ASSERT_EQ(st, DT_EIO);
        ASSERT_CONTAINS(err.msg, bad);
        ASSERT_CONTAINS(err.msg, "truncated");
        char want[64];
        snprintf(want, sizeof want, "record %zu at byte %zu", cut / rec_len,
                 cut / rec_len * rec_len);
        ASSERT_CONTAINS(err.msg, want);
    }
    /* every flipped byte: a CRC mismatch (or a length over the limit), never a crash */
    for (size_t i = 0; i < n; i++) {
        raw[i] ^= 0x20;
        ASSERT_OK(dt_file_write_atomic(bad, raw, n, &err), &err);
        dt_status st = dt_tfrecord_load(&src, &ds, &err);
        ASSERT_TRUE(st == DT_EPROTO || st == DT_ETOOBIG || st == DT_EIO);
        ASSERT_CONTAINS(err.msg, bad);
        size_t off = i % rec_len;
        ASSERT_CONTAINS(err.msg, off < 12 ? "length" : "data CRC");
        raw[i] ^= 0x20;
    }
    /* wrong magic: a text file is not a TFRecord */
    ASSERT_OK(dt_file_write_atomic(bad, "label,x\n1,2\n3,4\n5,6\n", 20, &err), &err);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EPROTO);
    ASSERT_CONTAINS(err.msg, "record 0 at byte 0: length CRC mismatch");
    /* a huge declared size with a valid length CRC */
    uint8_t huge[16] = {0, 0, 0, 0, 0, 1, 0, 0};
    uint32_t c = dt_crc32c_mask(dt_crc32c(0, huge, 8));
    memcpy(huge + 8, &c, 4); /* little-endian host */
    ASSERT_OK(dt_file_write_atomic(bad, huge, 16, &err), &err);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "over the limit");
    /* valid framing around bytes that are not an Example */
    uint8_t junk[8 + 16] = {0};
    dt_tfrecord_frame("\xff\xff\xff\xff\xff\xff\xff\xff", 8, junk);
    ASSERT_OK(dt_file_write_atomic(bad, junk, 24, &err), &err);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EPROTO);
    ASSERT_CONTAINS(err.msg, "not a valid tf.train.Example");
    /* a gzip'd file read as uncompressed */
    write_tfrecord(bad, 0, 2, true, false, NULL, 0, NULL);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "\"GZIP\"");
    /* a corrupt gzip stream */
    uint8_t *gzraw;
    size_t gzn;
    ASSERT_OK(dt_file_read_all(bad, 1 << 20, (char **)&gzraw, &gzn, &err), &err);
    for (size_t i = 12; i + 8 < gzn; i++)
        gzraw[i] ^= 0x55;
    ASSERT_OK(dt_file_write_atomic(bad, gzraw, gzn, &err), &err);
    src.gzip = true;
    ASSERT_NE(dt_tfrecord_load(&src, &ds, &err), DT_OK);
    ASSERT_CONTAINS(err.msg, bad);
    src.gzip = false;
    free(gzraw);
    ASSERT_TRUE(ds == NULL);
    free(raw);
    free(path);
    free(bad);
}

DT_TEST(data_tfrecord_example_type_errors)
{
    dt_err err = {0};
    char *path = tmp("t.tfrecord");
    char *files[1] = {path};
    dt_data_source src;
    dt_dataset *ds = NULL;
    spec_for(&src, files, 1, false);
    /* x stored as int64 where the spec says float32 */
    write_tfrecord(path, 0, 3, false, true, NULL, 0, NULL);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "record 0 at byte 0: feature \"x\" is a int64_list but the spec "
                             "declares float_list");
    /* token ids as int64 lists load as exact floats; past 2^24 they would not be exact */
    src.features[0].dtype = DT_DATA_DTYPE_INT64;
    ASSERT_OK(dt_tfrecord_load(&src, &ds, &err), &err);
    ASSERT_TRUE(ds->x_f32[2 * ds->x_size] == 2.0f && ds->x_f32[2 * ds->x_size + 1] == 2.0f);
    dt_dataset_free(ds);
    ds = NULL;
    write_tfrecord(path, 16777216, 16777218, false, true, NULL, 0, NULL);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "record 1 at byte");
    ASSERT_CONTAINS(err.msg, "feature \"x\": value 0 is 16777217; int64 features must lie within "
                             "+-2^24");
    src.features[0].dtype = DT_DATA_DTYPE_FLOAT32;
    /* encoded image bytes are decoded (test_data_image.c); a broken JPEG names its record */
    static const uint8_t jpeg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F'};
    write_tfrecord(path, 0, 2, false, false, jpeg, sizeof jpeg, NULL);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "record 0 at byte 0: feature \"image\": corrupt JPEG");
    ASSERT_CONTAINS(err.msg, path);
    /* the wrong number of raw bytes for the declared shape */
    write_tfrecord(path, 0, 2, false, false, (const uint8_t *)"abcdefghi", 9, NULL);
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "has 9 values but its shape needs 4");
    /* a feature the records do not have */
    write_tfrecord(path, 0, 2, false, false, NULL, 0, NULL);
    strcpy(src.features[0].name, "nope");
    ASSERT_STATUS(dt_tfrecord_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "feature \"nope\" is missing");
    ASSERT_TRUE(ds == NULL);
    free(path);
}

/* fuzz/example found it: a feature declared without a shape whose first record holds no
 * values gives rows of 0 floats, and pushing them did pointer arithmetic on NULL (UBSan). Such
 * a data set loads with x_size 0 (the model's input check refuses it later). */
DT_TEST(data_tfrecord_feature_empty_in_the_first_record)
{
    dt_err err = {0};
    char *path = tmp("e.tfrecord");
    dt_buf b;
    dt_buf_init(&b, 1 << 20);
    for (int i = 0; i < 2; i++) {
        Tensorflow__FloatList fl = TENSORFLOW__FLOAT_LIST__INIT; /* no values */
        int64_t lv = i;
        Tensorflow__Int64List ll = TENSORFLOW__INT64_LIST__INIT;
        ll.n_value = 1;
        ll.value = &lv;
        Tensorflow__Feature fx = TENSORFLOW__FEATURE__INIT, flab = TENSORFLOW__FEATURE__INIT;
        fx.kind_case = TENSORFLOW__FEATURE__KIND_FLOAT_LIST;
        fx.float_list = &fl;
        flab.kind_case = TENSORFLOW__FEATURE__KIND_INT64_LIST;
        flab.int64_list = &ll;
        Tensorflow__Features__FeatureEntry e[2] = {TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT,
                                                   TENSORFLOW__FEATURES__FEATURE_ENTRY__INIT};
        e[0].key = "x";
        e[0].value = &fx;
        e[1].key = "label";
        e[1].value = &flab;
        Tensorflow__Features__FeatureEntry *ep[2] = {&e[0], &e[1]};
        Tensorflow__Features fs = TENSORFLOW__FEATURES__INIT;
        fs.n_feature = 2;
        fs.feature = ep;
        Tensorflow__Example ex = TENSORFLOW__EXAMPLE__INIT;
        ex.features = &fs;
        uint8_t rec[256], fr[256 + 16];
        size_t len = tensorflow__example__pack(&ex, rec);
        dt_tfrecord_frame(rec, len, fr);
        ASSERT_OK(dt_buf_append(&b, fr, len + 16, &err), &err);
    }
    ASSERT_OK(dt_file_write_atomic(path, b.data, b.len, &err), &err);
    dt_buf_destroy(&b);
    char *files[1] = {path};
    dt_data_source src;
    spec_for(&src, files, 1, false);
    src.features[1] = src.features[2]; /* x (no shape) and the label */
    src.nfeatures = 2;
    dt_dataset *ds = NULL;
    ASSERT_OK(dt_tfrecord_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, 2);
    ASSERT_EQ(ds->x_size, 0);
    ASSERT_EQ(ds->y_i32[1], 1);
    dt_dataset_free(ds);
    free(path);
}

DT_TEST(data_inspect_detects_formats_and_features)
{
    dt_err err = {0};
    char *tf = tmp("i.tfrecord"), *tfgz = tmp("i.tfrecord.gz"), *csv = tmp("i.csv");
    write_tfrecord(tf, 0, 7, false, false, NULL, 0, NULL);
    write_tfrecord(tfgz, 0, 5, true, false, NULL, 0, NULL);
    ASSERT_OK(dt_file_write_atomic(csv, "a,b,label\n1.5,x,1\n2,y,1\n3,z,0\n", 30, &err), &err);
    dt_data_file_info info;
    ASSERT_OK(dt_data_inspect(tf, "", &info, &err), &err);
    ASSERT_STREQ(info.format, "tfrecord");
    ASSERT_EQ(info.records, 7);
    ASSERT_EQ(info.nfeatures, 4); /* x, image, label, id: used or not */
    int seen = 0;
    for (size_t i = 0; i < info.nfeatures; i++) {
        const dt_data_feature_info *f = &info.features[i];
        if (strcmp(f->name, "x") == 0) {
            ASSERT_STREQ(f->dtype, "float32");
            ASSERT_EQ(f->shape[0], 2);
            seen++;
        } else if (strcmp(f->name, "image") == 0) {
            ASSERT_STREQ(f->dtype, "bytes");
            seen++;
        } else if (strcmp(f->name, "id") == 0) {
            ASSERT_STREQ(f->dtype, "int64");
            ASSERT_EQ(f->rank, 1);
            ASSERT_EQ(f->shape[0], 1);
            seen++;
        }
    }
    ASSERT_EQ(seen, 3);
    ASSERT_TRUE(info.has_labels);
    ASSERT_EQ(info.nlabel_hist, 3);
    ASSERT_EQ(info.label_hist[0], 3); /* 0, 3, 6 */
    ASSERT_EQ(info.label_hist[2], 2);
    dt_data_file_info_destroy(&info);
    ASSERT_OK(dt_data_inspect(tfgz, "id", &info, &err), &err);
    ASSERT_STREQ(info.format, "tfrecord.gz");
    ASSERT_EQ(info.records, 5);
    ASSERT_EQ(info.nlabel_hist, 5); /* histogram of "id" */
    dt_data_file_info_destroy(&info);
    ASSERT_OK(dt_data_inspect(csv, "", &info, &err), &err);
    ASSERT_STREQ(info.format, "csv");
    ASSERT_EQ(info.records, 3);
    ASSERT_EQ(info.nfeatures, 3);
    ASSERT_STREQ(info.features[0].dtype, "float32");
    ASSERT_STREQ(info.features[1].dtype, "string");
    ASSERT_STREQ(info.features[2].dtype, "int64");
    ASSERT_EQ(info.label_hist[1], 2);
    dt_data_file_info_destroy(&info);
    /* a corrupt TFRecord is an error naming the record */
    uint8_t *raw;
    size_t n = write_tfrecord(tf, 0, 3, false, false, NULL, 0, &raw);
    raw[n / 3 + 20] ^= 1;
    ASSERT_OK(dt_file_write_atomic(tf, raw, n, &err), &err);
    ASSERT_STATUS(dt_data_inspect(tf, "", &info, &err), DT_EPROTO);
    ASSERT_CONTAINS(err.msg, "record 1");
    char *none = tmp("none");
    ASSERT_STATUS(dt_data_inspect(none, "", &info, &err), DT_ENOENT);
    free(none);
    free(raw);
    free(tf);
    free(tfgz);
    free(csv);
}

/* A target of any shape: an autoencoder's 100x100 image as the label (10,000 values a record),
 * decoded and scaled like a feature, float targets of the record's size. */
DT_TEST(data_tfrecord_image_label_of_any_size)
{
    uint8_t img[10000];
    for (size_t i = 0; i < sizeof img; i++)
        img[i] = (uint8_t)(7 + i * 13);
    char *path = tmp("ae.tfrecord");
    write_tfrecord(path, 0, 5, false, false, img, sizeof img, NULL);
    dt_data_source src;
    char *files[1] = {path};
    spec_for(&src, files, 1, false);
    dt_data_feature *f = (dt_data_feature *)src.features;
    f[1].shape[0] = f[1].shape[1] = 100;
    strcpy(src.label, "image");
    dt_dataset *ds = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_tfrecord_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, (size_t)5);
    ASSERT_EQ(ds->y_kind, DT_LABEL_FLOAT);
    ASSERT_EQ(ds->y_size, (size_t)10000);
    ASSERT_EQ(ds->x_size, (size_t)3); /* x's 2 values and the int64 label feature, now an input */
    for (size_t i = 0; i < 10000; i += 997)
        ASSERT_NEAR(ds->y_f32[4 * 10000 + i], img[i] / 255.0f, 1e-7);
    dt_dataset_free(ds);
    free(path);
}
