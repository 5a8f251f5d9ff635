#include "core/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void dt_buf_init(dt_buf *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max;
}

void dt_buf_destroy(dt_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void dt_buf_reset(dt_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static dt_status buf_reserve(dt_buf *b, size_t n, dt_err *err)
{
    if (n > b->max || b->len > b->max - n)
        return dt_err_set(err, DT_ETOOBIG, "buffer would exceed its limit of %zu bytes", b->max);
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return DT_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return dt_err_set(err, DT_ENOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return DT_OK;
}

dt_status dt_buf_append(dt_buf *b, const void *data, size_t n, dt_err *err)
{
    DT_TRY(buf_reserve(b, n, err));
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return DT_OK;
}

dt_status dt_buf_printf(dt_buf *b, dt_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return dt_err_set(err, DT_EINVAL, "bad format string");
    DT_TRY(buf_reserve(b, (size_t)n, err));
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return DT_OK;
}

char *dt_buf_steal(dt_buf *b, size_t *len)
{
    char *p = b->data;
    if (len)
        *len = b->len;
    size_t max = b->max;
    memset(b, 0, sizeof *b);
    b->max = max;
    return p;
}

static const char *file_kind(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m) || S_ISBLK(m))
        return "a device";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

dt_status dt_file_open_regular(const char *path, int *fd, uint64_t *size, dt_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0)
        return dt_err_set(err, errno == ENOENT ? DT_ENOENT : DT_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        dt_status s = dt_err_set(err, DT_EINVAL, "%s: is %s; give a regular file", path,
                                 file_kind(st.st_mode));
        close(*fd);
        *fd = -1;
        return s;
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl >= 0)
        fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size)
        *size = (uint64_t)st.st_size;
    return DT_OK;
}

/* Reads fd to its end into *out (NUL-terminated); closes fd. */
static dt_status read_fd_all(int fd, const char *path, size_t max, char **out, size_t *len,
                             dt_err *err)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > max) {
        close(fd);
        return dt_err_set(err, DT_ETOOBIG, "%s: %lld bytes is over the limit of %zu bytes", path,
                          (long long)st.st_size, max);
    }
    dt_buf b;
    dt_buf_init(&b, max);
    char chunk[65536];
    dt_status st_ = DT_OK;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st_ = dt_err_set(err, DT_EIO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        st_ = dt_buf_append(&b, chunk, (size_t)n, err);
        if (st_ != DT_OK) {
            dt_err_prefix(err, "%s", path);
            break;
        }
    }
    close(fd);
    if (st_ != DT_OK) {
        dt_buf_destroy(&b);
        return st_;
    }
    if (!b.data) {
        st_ = dt_buf_append(&b, "", 0, err);
        if (st_ != DT_OK)
            return st_;
    }
    *out = dt_buf_steal(&b, len);
    return DT_OK;
}

dt_status dt_file_read_all(const char *path, size_t max, char **out, size_t *len, dt_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dt_err_set(err, errno == ENOENT ? DT_ENOENT : DT_EIO, "%s: cannot open: %s", path,
                          strerror(errno));
    return read_fd_all(fd, path, max, out, len, err);
}

dt_status dt_file_read_regular(const char *path, size_t max, char **out, size_t *len, dt_err *err)
{
    int fd;
    DT_TRY(dt_file_open_regular(path, &fd, NULL, err));
    return read_fd_all(fd, path, max, out, len, err);
}

dt_status dt_file_append_line(const char *path, const char *line, dt_err *err)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return dt_err_set(err, DT_EIO, "%s: %s", path, strerror(errno));
    bool ok = fputs(line, f) >= 0 && fputc('\n', f) != EOF;
    ok = fclose(f) == 0 && ok;
    return ok ? DT_OK : dt_err_set(err, DT_EIO, "%s: write failed: %s", path, strerror(errno));
}

dt_status dt_file_write_atomic(const char *path, const void *data, size_t len, dt_err *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    char *dir = strdup(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    dt_status st = DT_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = dt_err_set(err, DT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = dt_err_set(err, DT_EIO, "%s: write failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            goto out;
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        st = dt_err_set(err, DT_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = dt_err_set(err, DT_EIO, "%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    free(tmp);
    free(dir);
    return st;
}

char *dt_path_join(const char *base, const char *path)
{
    if (!base || !base[0] || path[0] == '/')
        return strdup(path);
    size_t n = strlen(base) + strlen(path) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", base, path);
    return s;
}
