/* common.c - see common.h. */
#include "common.h"

#include "core/log.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[FZ_PATH];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void rm_tmpdir(void)
{
    if (tmpdir[0])
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void fz_init(void)
{
    dt_log_set_level(DT_LOG_ERROR);
}

const char *fz_tmpdir(void)
{
    if (tmpdir[0])
        return tmpdir;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/dtfuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(rm_tmpdir);
    return tmpdir;
}

void fz_write(const char *name, const void *data, size_t len, char *path)
{
    snprintf(path, FZ_PATH, "%s/%s", fz_tmpdir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const uint8_t *p = data;
    while (fd >= 0 && len > 0) {
        ssize_t w = write(fd, p, len);
        if (w <= 0)
            break;
        p += w;
        len -= (size_t)w;
    }
    if (fd < 0 || len > 0 || close(fd) != 0) {
        perror(path);
        abort();
    }
}

uint8_t *fz_gzip(const void *data, size_t len, size_t *out_len)
{
    z_stream z = {0};
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    size_t cap = deflateBound(&z, (uLong)len) + 32;
    uint8_t *out = malloc(cap);
    if (!out)
        abort();
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

uint8_t fz_u8(fz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

uint16_t fz_u16(fz_in *in)
{
    uint16_t lo = fz_u8(in);
    return (uint16_t)(lo | fz_u8(in) << 8);
}

const uint8_t *fz_part(fz_in *in, size_t *len)
{
    size_t want = fz_u16(in);
    *len = want < in->n ? want : in->n;
    const uint8_t *p = in->p;
    in->p += *len;
    in->n -= *len;
    return p;
}
