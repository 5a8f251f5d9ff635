/* Hostile files named by a job: a FIFO (no writer: a blocking open would hang for good), a
 * character device (endless bytes), a directory, and a gzip whose header declares far more
 * than the file can hold. Every reader refuses them at once, naming the file and what it is,
 * before it allocates. */
#include "core/buf.h"
#include "core/clock.h"
#include "data/data.h"
#include "dt_test.h"
#include "io/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char g_fifo[1100];

static void make_fifo(void)
{
    snprintf(g_fifo, sizeof g_fifo, "%s/pipe", dt_test_tmpdir());
    ASSERT_EQ(mkfifo(g_fifo, 0600), 0);
}

/* Every reader on path: refused with code, the message naming path and kind. */
static void expect_refused_everywhere(const char *path, const char *kind)
{
    dt_err err = {0};
    int64_t t0 = dt_now_ms();
    dt_idx_header h;
    uint8_t *data = NULL;
    size_t len = 0;
    ASSERT_STATUS(dt_idx_read(path, &h, &data, &len, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, path);
    ASSERT_CONTAINS(err.msg, kind);
    dt_tfrecord_reader *r = NULL;
    ASSERT_STATUS(dt_tfrecord_open(path, false, &r, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, kind);
    dt_st_file *st = NULL;
    ASSERT_STATUS(dt_st_open(path, &st, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, kind);
    dt_data_file_info info;
    ASSERT_STATUS(dt_data_inspect(path, NULL, &info, &err), DT_EINVAL);
    /* inspect reads a directory as an image folder: an empty one has no classes */
    ASSERT_CONTAINS(err.msg, strstr(kind, "directory") ? "has no class subfolders" : kind);
    char *text = NULL;
    ASSERT_STATUS(dt_file_read_regular(path, 1 << 20, &text, &len, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, kind);
    ASSERT_TRUE(dt_now_ms() - t0 < 2000); /* nothing waited for a writer */
}

DT_TEST_TIMEOUT(data_hostile_fifo_device_dir, 20)
{
    make_fifo();
    expect_refused_everywhere(g_fifo, "is a FIFO; give a regular file");
    expect_refused_everywhere("/dev/zero", "is a device");
    expect_refused_everywhere(dt_test_tmpdir(), "is a directory");
    /* The CLI's reader still takes a pipe (submit <(generate-spec)). */
    char *text = NULL;
    size_t len = 0;
    dt_err err = {0};
    ASSERT_STATUS(dt_file_read_all("/dev/null", 16, &text, &len, &err), DT_OK);
    free(text);
}

DT_TEST(data_hostile_gzip_bomb_header)
{
    /* An IDX header declaring 60000x28x28 bytes (47 MB) in a gzip of ~40 bytes: refused from
     * the sizes alone. The same header with its real bytes would be ~60 KB of gzip: fine. */
    char path[1100];
    snprintf(path, sizeof path, "%s/bomb-idx3-ubyte.gz", dt_test_tmpdir());
    gzFile g = gzopen(path, "wb9");
    ASSERT_TRUE(g != NULL);
    const uint8_t hdr[] = {0, 0, 8, 3, 0, 0, 0xEA, 0x60, 0, 0, 0, 28, 0, 0, 0, 28};
    ASSERT_EQ(gzwrite(g, hdr, sizeof hdr), (int)sizeof hdr);
    gzclose(g);
    dt_idx_header h;
    uint8_t *data = NULL;
    size_t len = 0;
    dt_err err = {0};
    ASSERT_STATUS(dt_idx_read(path, &h, &data, &len, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "declares 47040000 bytes of data, but a gzip file of");
    ASSERT_CONTAINS(err.msg, "decompression bomb");
    ASSERT_TRUE(data == NULL);
}
