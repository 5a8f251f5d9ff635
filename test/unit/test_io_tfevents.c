/* Unit tests of lib/io/tfevents: files read back with a TFRecord reader written here (CRCs
 * checked, events decoded by protoc-c), exact bytes against a hand encoding of TensorFlow's
 * field numbers, buffering, bad input, and TensorBoard's own loader when Python has it. */
#include "dt_test.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "io/tfevents.h"

#include "tfevents.pb-c.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a TFRecord reader, independent of the writer ----------------------------------------- */

typedef struct tf_record {
    const unsigned char *data;
    size_t len;
} tf_record;

typedef struct tf_file {
    char *bytes;
    size_t len;
    tf_record recs[8192];
    size_t n;
} tf_file;

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads every record of path, failing the test on a bad CRC or a torn record. */
static tf_file *read_tfrecords(const char *path)
{
    dt_err err = {0};
    tf_file *f = calloc(1, sizeof *f);
    ASSERT_OK(dt_file_read_all(path, 64u << 20, &f->bytes, &f->len, &err), &err);
    const unsigned char *p = (const unsigned char *)f->bytes, *end = p + f->len;
    while (p < end) {
        if (end - p < 12)
            DT_FAIL_("%s: torn record header at byte %td", path,
                     p - (const unsigned char *)f->bytes);
        uint64_t n = le64(p);
        ASSERT_EQ(le32(p + 8), dt_crc32c_mask(dt_crc32c(0, p, 8)));
        if ((uint64_t)(end - p - 12) < n + 4)
            DT_FAIL_("%s: torn record data", path);
        ASSERT_EQ(le32(p + 12 + n), dt_crc32c_mask(dt_crc32c(0, p + 12, n)));
        ASSERT_LT(f->n, sizeof f->recs / sizeof f->recs[0]);
        f->recs[f->n++] = (tf_record){p + 12, (size_t)n};
        p += 12 + n + 4;
    }
    return f;
}

static void free_tfrecords(tf_file *f)
{
    free(f->bytes);
    free(f);
}

static Dtrain__Tfevents__Event *decode(const tf_record *r)
{
    Dtrain__Tfevents__Event *ev = dtrain__tfevents__event__unpack(NULL, r->len, r->data);
    ASSERT_TRUE(ev != NULL);
    return ev;
}

static const char *log_dir(const char *sub)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), sub);
    return path;
}

static size_t file_size(const char *path)
{
    struct stat sb;
    ASSERT_EQ(stat(path, &sb), 0);
    return (size_t)sb.st_size;
}

/* ---- tests -------------------------------------------------------------------------------- */

DT_TEST(io_tfe_scalars_read_back)
{
    dt_err err = {0};
    dt_tfevents *w = NULL;
    const char *dir = log_dir("logs/run1"); /* parents are created */
    ASSERT_OK(dt_tfevents_open(dir, &w, &err), &err);
    char path[1024];
    snprintf(path, sizeof path, "%s", dt_tfevents_path(w));

    /* The name TensorFlow gives: DIR/events.out.tfevents.<unix_ts>.<hostname> */
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    char want[1024];
    snprintf(want, sizeof want, "%s/events.out.tfevents.", dir);
    ASSERT_TRUE(strncmp(path, want, strlen(want)) == 0);
    long long ts = strtoll(path + strlen(want), NULL, 10);
    ASSERT_NEAR((double)ts, dt_wall_s(), 60);
    ASSERT_CONTAINS(path + strlen(want), host);

    for (int step = 0; step < 10; step++) {
        ASSERT_OK(dt_tfevents_scalar(w, "epoch_loss", step, step == 0 ? 0.0 : 1.0 / step, &err),
                  &err);
        ASSERT_OK(dt_tfevents_scalar(w, "val/accuracy", step, 0.5 + step * 0.01, &err), &err);
    }
    ASSERT_OK(dt_tfevents_flush(w, &err), &err);

    /* Readable while the writer is still open (TensorBoard tails live files). */
    tf_file *f = read_tfrecords(path);
    ASSERT_EQ(f->n, 21);
    Dtrain__Tfevents__Event *ev = decode(&f->recs[0]);
    ASSERT_EQ(ev->what_case, DTRAIN__TFEVENTS__EVENT__WHAT_FILE_VERSION);
    ASSERT_STREQ(ev->file_version, "brain.Event:2");
    ASSERT_NEAR(ev->wall_time, dt_wall_s(), 60);
    dtrain__tfevents__event__free_unpacked(ev, NULL);
    for (size_t i = 1; i < f->n; i++) {
        int step = (int)(i - 1) / 2;
        ev = decode(&f->recs[i]);
        ASSERT_EQ(ev->what_case, DTRAIN__TFEVENTS__EVENT__WHAT_SUMMARY);
        ASSERT_EQ(ev->step, step);
        ASSERT_NEAR(ev->wall_time, dt_wall_s(), 60);
        ASSERT_EQ(ev->summary->n_value, 1);
        Dtrain__Tfevents__Summary__Value *v = ev->summary->value[0];
        /* Set even when the value is 0.0: a proto3 float outside a oneof would vanish. */
        ASSERT_EQ(v->value_case, DTRAIN__TFEVENTS__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        if (i % 2 == 1) {
            ASSERT_STREQ(v->tag, "epoch_loss");
            ASSERT_NEAR(v->simple_value, step == 0 ? 0.0f : (float)(1.0 / step), 0);
        } else {
            ASSERT_STREQ(v->tag, "val/accuracy");
            ASSERT_NEAR(v->simple_value, (float)(0.5 + step * 0.01), 0);
        }
        dtrain__tfevents__event__free_unpacked(ev, NULL);
    }
    free_tfrecords(f);

    ASSERT_OK(dt_tfevents_scalar(w, "epoch_loss", 10, 0.05, &err), &err);
    dt_tfevents_close(w); /* flushes */
    f = read_tfrecords(path);
    ASSERT_EQ(f->n, 22);
    free_tfrecords(f);
    dt_tfevents_close(NULL);
}

/* The record's bytes, field by field, as TensorFlow's event.proto and summary.proto define
 * them: this pins the field numbers and wire types independently of protoc-c. */
DT_TEST(io_tfe_exact_bytes)
{
    dt_err err = {0};
    dt_tfevents *w = NULL;
    ASSERT_OK(dt_tfevents_open(log_dir("bytes"), &w, &err), &err);
    ASSERT_OK(dt_tfevents_scalar(w, "loss", 300, 0.5, &err), &err);
    ASSERT_OK(dt_tfevents_scalar(w, "loss", 0, -2.0, &err), &err);
    ASSERT_OK(dt_tfevents_flush(w, &err), &err);
    tf_file *f = read_tfrecords(dt_tfevents_path(w));
    ASSERT_EQ(f->n, 3);

    /* Event { wall_time(1, fixed64) file_version(3, bytes) } */
    const unsigned char *d = f->recs[0].data;
    ASSERT_EQ(f->recs[0].len, 9 + 2 + 13);
    ASSERT_EQ(d[0], 0x09); /* field 1, wire type 1 (64-bit) */
    double wall;
    memcpy(&wall, d + 1, 8);
    ASSERT_NEAR(wall, dt_wall_s(), 60);
    ASSERT_EQ(d[9], 0x1a); /* field 3, wire type 2 */
    ASSERT_EQ(d[10], 13);
    ASSERT_TRUE(memcmp(d + 11, "brain.Event:2", 13) == 0);

    /* Event { wall_time(1) step(2, varint) summary(5) { value(1) { tag(1) simple_value(2,
     * fixed32) } } } */
    static const unsigned char tail300[] = {
        0x10, 0xac, 0x02,                  /* step = 300 */
        0x2a, 0x0d,                        /* summary, 13 bytes */
        0x0a, 0x0b,                        /*   value, 11 bytes */
        0x0a, 0x04, 'l',  'o',  's',  's', /*     tag = "loss" */
        0x15, 0x00, 0x00, 0x00, 0x3f,      /*     simple_value = 0.5f */
    };
    ASSERT_EQ(f->recs[1].len, 9 + sizeof tail300);
    ASSERT_EQ(f->recs[1].data[0], 0x09);
    ASSERT_TRUE(memcmp(f->recs[1].data + 9, tail300, sizeof tail300) == 0);
    /* step 0 is proto3's default and is left out, as TensorFlow does. */
    static const unsigned char tail0[] = {0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 'l', 'o',
                                          's',  's',  0x15, 0x00, 0x00, 0x00, 0xc0};
    ASSERT_EQ(f->recs[2].len, 9 + sizeof tail0);
    ASSERT_TRUE(memcmp(f->recs[2].data + 9, tail0, sizeof tail0) == 0);
    free_tfrecords(f);
    dt_tfevents_close(w);
}

DT_TEST(io_tfe_buffers_until_flush_or_size)
{
    dt_err err = {0};
    dt_tfevents *w = NULL;
    ASSERT_OK(dt_tfevents_open(log_dir("buf"), &w, &err), &err);
    const char *path = dt_tfevents_path(w);
    size_t header = file_size(path);
    ASSERT_GT(header, 0); /* the file_version record is on disk at once */

    int64_t t0 = dt_now_ms();
    ASSERT_OK(dt_tfevents_scalar(w, "loss", 1, 1.0, &err), &err);
    if (dt_now_ms() - t0 < DT_TFEVENTS_FLUSH_MS)
        ASSERT_EQ(file_size(path), header); /* buffered */
    ASSERT_OK(dt_tfevents_flush(w, &err), &err);
    ASSERT_GT(file_size(path), header);

    /* Past DT_TFEVENTS_FLUSH_BYTES the writer flushes by itself. */
    size_t before = file_size(path);
    int64_t t1 = dt_now_ms();
    int n = 0;
    while (file_size(path) == before) {
        ASSERT_OK(dt_tfevents_scalar(w, "a/rather/long/tag/name/for/the/size/test", n, n, &err),
                  &err);
        ASSERT_LT(++n, 10000);
    }
    if (dt_now_ms() - t1 < DT_TFEVENTS_FLUSH_MS) /* else the timer may have flushed first */
        ASSERT_GE(file_size(path) - before, DT_TFEVENTS_FLUSH_BYTES);
    for (int i = 0; i < 3000; i++)
        ASSERT_OK(dt_tfevents_scalar(w, "more", i, i, &err), &err);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", path);
    dt_tfevents_close(w);
    tf_file *f = read_tfrecords(saved);
    ASSERT_EQ(f->n, (size_t)(1 + 1 + n + 3000));
    free_tfrecords(f);
}

DT_TEST(io_tfe_rejects_bad_input)
{
    dt_err err = {0};
    dt_tfevents *w = NULL;
    ASSERT_STATUS(dt_tfevents_open("", &w, &err), DT_EINVAL);
    ASSERT_TRUE(w == NULL);

    /* A file where the directory should be. */
    const char *file = log_dir("plainfile");
    ASSERT_OK(dt_file_write_atomic(file, "x", 1, &err), &err);
    ASSERT_STATUS(dt_tfevents_open(file, &w, &err), DT_EIO);
    ASSERT_CONTAINS(err.msg, "not a directory");
    char sub[600];
    snprintf(sub, sizeof sub, "%s/logs", file);
    ASSERT_STATUS(dt_tfevents_open(sub, &w, &err), DT_EIO);
    ASSERT_CONTAINS(err.msg, file);
    ASSERT_TRUE(w == NULL);

    ASSERT_OK(dt_tfevents_open(log_dir("ok/"), &w, &err), &err); /* trailing slash is fine */
    ASSERT_STATUS(dt_tfevents_scalar(w, "", 0, 1.0, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "tag");
    ASSERT_STATUS(dt_tfevents_scalar(w, NULL, 0, 1.0, &err), DT_EINVAL);
    char big[DT_TFEVENTS_MAX_TAG + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ASSERT_STATUS(dt_tfevents_scalar(w, big, 0, 1.0, &err), DT_EINVAL);
    big[DT_TFEVENTS_MAX_TAG] = '\0'; /* exactly the limit is accepted */
    ASSERT_OK(dt_tfevents_scalar(w, big, INT64_MIN, NAN, &err), &err);
    ASSERT_OK(dt_tfevents_scalar(w, "inf", INT64_MAX, INFINITY, &err), &err);
    ASSERT_STATUS(dt_tfevents_scalar(NULL, "x", 0, 1.0, &err), DT_EINVAL);
    ASSERT_STATUS(dt_tfevents_flush(NULL, &err), DT_EINVAL);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dt_tfevents_path(w));
    dt_tfevents_close(w);

    tf_file *f = read_tfrecords(saved);
    ASSERT_EQ(f->n, 3);
    Dtrain__Tfevents__Event *ev = decode(&f->recs[1]);
    ASSERT_EQ(ev->step, INT64_MIN);
    ASSERT_EQ(strlen(ev->summary->value[0]->tag), DT_TFEVENTS_MAX_TAG);
    ASSERT_TRUE(isnan(ev->summary->value[0]->simple_value));
    dtrain__tfevents__event__free_unpacked(ev, NULL);
    free_tfrecords(f);
}

DT_TEST(io_tfe_two_writers_get_two_files)
{
    dt_err err = {0};
    dt_tfevents *a = NULL, *b = NULL;
    const char *dir = log_dir("twice");
    ASSERT_OK(dt_tfevents_open(dir, &a, &err), &err);
    ASSERT_OK(dt_tfevents_open(dir, &b, &err), &err);
    ASSERT_TRUE(strcmp(dt_tfevents_path(a), dt_tfevents_path(b)) != 0);
    ASSERT_OK(dt_tfevents_scalar(a, "x", 1, 1, &err), &err);
    ASSERT_OK(dt_tfevents_scalar(b, "x", 1, 2, &err), &err);
    dt_tfevents_close(a);
    dt_tfevents_close(b);
    int files = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0)
            files++;
    }
    closedir(d);
    ASSERT_EQ(files, 2);
}

static int run_cmd(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* Verified once by hand as well: TensorBoard 2.21 (EventAccumulator and LegacyEventFileLoader)
 * read a file of ours and returned brain.Event:2 and every epoch_loss (step, value) pair. */
DT_TEST_TIMEOUT(io_tfe_tensorboard_reads_it, 120)
{
    if (access(dt_test_python(), X_OK) != 0)
        DT_SKIP("%s is not installed", dt_test_python());
    if (!dt_test_python_has("tensorboard"))
        DT_SKIP("Debian's python3 has neither tensorboard nor tensorflow; the file format is "
                "checked by io_tfe_exact_bytes and io_tfe_scalars_read_back instead");
    dt_err err = {0};
    dt_tfevents *w = NULL;
    const char *dir = log_dir("tb");
    ASSERT_OK(dt_tfevents_open(dir, &w, &err), &err);
    for (int step = 0; step < 5; step++)
        ASSERT_OK(dt_tfevents_scalar(w, "epoch_loss", step, 1.0 / (step + 1), &err), &err);
    dt_tfevents_close(w);
    char cmd[2048];
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' '%s'", dt_test_src_path("test/ref/tfevents_ref.py"),
                       dir);
    ASSERT_EQ(run_cmd(cmd), 0);
}
