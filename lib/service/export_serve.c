/* export_serve.c - the chief's side of a chunked export: one conversion per source, pieces by
 * pread. */
#include "service/service.h"

#include "core/hash.h"
#include "core/limits.h"
#include "train/train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_PREFIX ".export-cache-"
#define CACHE_EXT    ".safetensors"

/* The source's identity: a rewritten or replaced file gets another key. */
static uint64_t source_key(const char *path, const struct stat *st)
{
    uint64_t h = dt_fnv1a64(DT_FNV1A64_INIT, path, strlen(path) + 1);
    uint64_t v[5] = {(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                     (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
    return dt_fnv1a64(h, v, sizeof v);
}

typedef struct cached {
    char name[256];
    double mtime;
} cached;

static int newest_first(const void *a, const void *b)
{
    double x = ((const cached *)a)->mtime, y = ((const cached *)b)->mtime;
    return (y > x) - (y < x);
}

/* Keeps the DT_EXPORT_CACHE_KEEP most recently used cache files (keep, just made, among them)
 * and removes the others, and temp files of conversions that died. Best effort: a reader that
 * still has one open keeps its bytes; a later piece converts again. */
static void evict(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    cached *list = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, CACHE_PREFIX, strlen(CACHE_PREFIX)) != 0 ||
            strcmp(e->d_name, keep) == 0 || strlen(e->d_name) >= sizeof list[0].name)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        bool temp = strstr(e->d_name, ".tmp-") != NULL; /* a conversion, maybe still running */
        if (now - st.st_mtim.tv_sec > DT_EXPORT_CACHE_IDLE_S) {
            unlinkat(dirfd(d), e->d_name, 0);
        } else if (!temp) {
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                cached *l = realloc(list, cap * sizeof *l);
                if (!l)
                    break;
                list = l;
            }
            snprintf(list[n].name, sizeof list[n].name, "%s", e->d_name);
            list[n++].mtime = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
        }
    }
    if (n + 1 > DT_EXPORT_CACHE_KEEP) {
        qsort(list, n, sizeof *list, newest_first);
        for (size_t i = DT_EXPORT_CACHE_KEEP - 1; i < n; i++)
            unlinkat(dirfd(d), list[i].name, 0);
    }
    free(list);
    closedir(d);
}

static dt_status convert(int src_fd, const char *source_path, const char *cache_dir,
                         const char *name, dt_err *err)
{
    static atomic_uint counter;
    char from[64], tmp[4400], dst[4400];
    /* Through the open descriptor: the file converted is the one whose identity names the cache,
     * even if the path is replaced meanwhile. */
    snprintf(from, sizeof from, "/proc/self/fd/%d", src_fd);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp-%ld-%u", cache_dir, name, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    snprintf(dst, sizeof dst, "%s/%s", cache_dir, name);
    dt_status st = dt_train_export(from, tmp, err);
    if (st != DT_OK) {
        unlink(tmp);
        return dt_err_prefix(err, "%s", source_path);
    }
    if (rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_err_set(err, DT_EIO, "%s: rename failed: %s", dst, strerror(e));
    }
    evict(cache_dir, name);
    return DT_OK;
}

dt_status dt_service_export_open(const char *source_path, const char *cache_dir,
                                 dt_service_export_src *out, dt_err *err)
{
    out->fd = -1;
    out->size = 0;
    int src = open(source_path, O_RDONLY | O_CLOEXEC);
    if (src < 0) {
        int e = errno;
        return dt_err_set(err, e == ENOENT ? DT_ENOENT : DT_EIO, "%s: %s", source_path,
                          strerror(e));
    }
    struct stat sst;
    if (fstat(src, &sst) != 0 || !S_ISREG(sst.st_mode)) {
        close(src);
        return dt_err_set(err, DT_EIO, "%s: not a regular file", source_path);
    }
    char name[64], path[4400];
    snprintf(name, sizeof name, CACHE_PREFIX "%016llx" CACHE_EXT,
             (unsigned long long)source_key(source_path, &sst));
    snprintf(path, sizeof path, "%s/%s", cache_dir, name);
    dt_status st = DT_OK;
    /* A cache file evicted between the two steps is converted again (the second open). */
    for (int attempt = 0; attempt < 2 && out->fd < 0; attempt++) {
        out->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (out->fd >= 0)
            break;
        if (errno != ENOENT) {
            st = dt_err_set(err, DT_EIO, "%s: %s", path, strerror(errno));
            break;
        }
        if ((st = convert(src, source_path, cache_dir, name, err)) != DT_OK)
            break;
    }
    close(src);
    if (st == DT_OK && out->fd < 0)
        st = dt_err_set(err, DT_EIO, "%s: vanished right after it was written", path);
    if (st != DT_OK) {
        dt_service_export_close(out);
        return st;
    }
    struct stat cst;
    if (fstat(out->fd, &cst) != 0) {
        st = dt_err_set(err, DT_EIO, "%s: %s", path, strerror(errno));
        dt_service_export_close(out);
        return st;
    }
    out->size = (uint64_t)cst.st_size;
    futimens(out->fd, NULL); /* in use: not evicted while pieces are fetched */
    return DT_OK;
}

dt_status dt_service_export_read(const dt_service_export_src *s, uint64_t offset, size_t max,
                                 char **out, size_t *len, dt_err *err)
{
    *out = NULL;
    *len = 0;
    if (offset >= s->size)
        return dt_err_set(err, DT_EINVAL,
                          "offset %llu is past the end of the exported file (%llu bytes); start "
                          "again from offset 0",
                          (unsigned long long)offset, (unsigned long long)s->size);
    uint64_t left = s->size - offset;
    size_t n = left < max ? (size_t)left : max;
    char *buf = malloc(n ? n : 1);
    if (!buf)
        return dt_err_set(err, DT_ENOMEM, "out of memory (%zu bytes for one export piece)", n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(s->fd, buf + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return dt_err_set(err, DT_EIO, "reading the exported file at %llu: %s",
                              (unsigned long long)(offset + got),
                              r < 0 ? strerror(errno) : "it is shorter than it was");
        }
        got += (size_t)r;
    }
    *out = buf;
    *len = n;
    return DT_OK;
}

void dt_service_export_close(dt_service_export_src *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}
