/* tfevents.c - see tfevents.h for the file format and the contracts. */
#include "io/tfevents.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/log.h"

#include "tfevents.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One scalar Event is wall_time (9 bytes) + step (<= 11) + summary framing (<= 12) + the tag
 * (<= DT_TFEVENTS_MAX_TAG + 3) + simple_value (5): this bounds the stack buffer we pack into. */
#define TFE_MAX_EVENT (DT_TFEVENTS_MAX_TAG + 64)
#define TFE_FRAME     16 /* length (8) + its CRC (4) + the data's CRC (4) */

struct dt_tfevents {
    int fd;
    char *path;            /* owned */
    dt_buf pending;        /* framed records not yet written; max 2 x DT_TFEVENTS_FLUSH_BYTES */
    int64_t last_write_ms; /* monotonic time of the last flush */
};

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Frames the serialized event as one TFRecord and appends it to the pending buffer. */
static dt_status tfe_append_event(dt_tfevents *w, const Dtrain__Tfevents__Event *ev, dt_err *err)
{
    unsigned char rec[TFE_FRAME + TFE_MAX_EVENT];
    size_t n = dtrain__tfevents__event__get_packed_size(ev);
    DT_ASSERT(n, <=, TFE_MAX_EVENT);
    put_le64(rec, n);
    put_le32(rec + 8, dt_crc32c_mask(dt_crc32c(0, rec, 8)));
    dtrain__tfevents__event__pack(ev, rec + 12);
    put_le32(rec + 12 + n, dt_crc32c_mask(dt_crc32c(0, rec + 12, n)));
    dt_status st = dt_buf_append(&w->pending, rec, TFE_FRAME + n, err);
    if (st != DT_OK)
        return dt_err_prefix(err, "%s", w->path);
    return DT_OK;
}

dt_status dt_tfevents_flush(dt_tfevents *w, dt_err *err)
{
    if (!w)
        return dt_err_set(err, DT_EINVAL, "tfevents: NULL writer");
    const char *p = w->pending.data;
    size_t left = w->pending.len;
    dt_status st = DT_OK;
    while (left > 0) {
        ssize_t n = write(w->fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = dt_err_set(err, DT_EIO, "%s: write failed: %s (%zu bytes of events dropped)",
                            w->path, strerror(errno), left);
            break;
        }
        p += n;
        left -= (size_t)n;
    }
    /* Written or dropped: either way the buffer starts empty again (see the header). */
    dt_buf_reset(&w->pending);
    w->last_write_ms = dt_now_ms();
    return st;
}

dt_status dt_tfevents_scalar(dt_tfevents *w, const char *tag, int64_t step, double value,
                             dt_err *err)
{
    if (!w)
        return dt_err_set(err, DT_EINVAL, "tfevents: NULL writer");
    size_t tag_len = tag ? strlen(tag) : 0;
    if (tag_len == 0 || tag_len > DT_TFEVENTS_MAX_TAG)
        return dt_err_set(err, DT_EINVAL, "%s: a scalar's tag must be 1..%d bytes (got %zu bytes)",
                          w->path, DT_TFEVENTS_MAX_TAG, tag_len);

    /* Event { wall_time, step, summary { value { tag, simple_value } } } */
    Dtrain__Tfevents__Summary__Value val = DTRAIN__TFEVENTS__SUMMARY__VALUE__INIT;
    val.tag = (char *)tag;
    val.value_case = DTRAIN__TFEVENTS__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    val.simple_value = (float)value;
    Dtrain__Tfevents__Summary__Value *vals[1] = {&val};
    Dtrain__Tfevents__Summary sum = DTRAIN__TFEVENTS__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = vals;
    Dtrain__Tfevents__Event ev = DTRAIN__TFEVENTS__EVENT__INIT;
    ev.wall_time = dt_wall_s();
    ev.step = step;
    ev.what_case = DTRAIN__TFEVENTS__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;

    /* Make room first, so a full buffer is written rather than refused. */
    if (w->pending.len + TFE_FRAME + TFE_MAX_EVENT > w->pending.max)
        DT_TRY(dt_tfevents_flush(w, err));
    DT_TRY(tfe_append_event(w, &ev, err));
    if (w->pending.len >= DT_TFEVENTS_FLUSH_BYTES ||
        dt_now_ms() - w->last_write_ms >= DT_TFEVENTS_FLUSH_MS)
        DT_TRY(dt_tfevents_flush(w, err));
    return DT_OK;
}

const char *dt_tfevents_path(const dt_tfevents *w)
{
    return w ? w->path : NULL;
}

/* mkdir -p: creates each missing component of dir. */
static dt_status tfe_mkdirs(const char *dir, dt_err *err)
{
    char *p = strdup(dir);
    if (!p)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", dir);
    dt_status st = DT_OK;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            st = dt_err_set(err, DT_EIO, "%s: cannot create directory %s: %s", dir, p,
                            strerror(errno));
            break;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    if (st != DT_OK)
        return st;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dt_err_set(err, DT_EIO, "%s: not a directory (tensorboard.log_dir must be one)",
                          dir);
    return DT_OK;
}

/* Creates a new event file in dir: TensorFlow's name, or that name plus ".<pid>.<n>" when a
 * writer on this host opened one in the same second. */
static dt_status tfe_create(const char *dir, int *fd, char **path, dt_err *err)
{
    char host[HOST_NAME_MAX + 1] = "localhost";
    if (gethostname(host, sizeof host) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++) {
        if (*c == '/')
            *c = '_';
    }
    long long ts = (long long)time(NULL);
    size_t cap = strlen(dir) + strlen(host) + 96;
    char *p = malloc(cap);
    if (!p)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", dir);
    for (int n = 0; n < 100; n++) {
        if (n == 0)
            snprintf(p, cap, "%s/events.out.tfevents.%lld.%s", dir, ts, host);
        else
            snprintf(p, cap, "%s/events.out.tfevents.%lld.%s.%ld.%d", dir, ts, host, (long)getpid(),
                     n);
        *fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (*fd >= 0) {
            *path = p;
            return DT_OK;
        }
        if (errno != EEXIST) {
            dt_status st = dt_err_set(err, DT_EIO, "%s: cannot create: %s", p, strerror(errno));
            free(p);
            return st;
        }
    }
    free(p);
    return dt_err_set(err, DT_EEXIST, "%s: 100 event files from this host in one second", dir);
}

dt_status dt_tfevents_open(const char *dir, dt_tfevents **out, dt_err *err)
{
    *out = NULL;
    if (!dir || !*dir)
        return dt_err_set(err, DT_EINVAL, "tfevents: empty log directory");
    DT_TRY(tfe_mkdirs(dir, err));
    dt_tfevents *w = calloc(1, sizeof *w);
    if (!w)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", dir);
    dt_buf_init(&w->pending, 2 * DT_TFEVENTS_FLUSH_BYTES);
    dt_status st = tfe_create(dir, &w->fd, &w->path, err);
    if (st != DT_OK) {
        free(w);
        return st;
    }
    /* The first record names the format version; TensorBoard checks it. */
    Dtrain__Tfevents__Event ev = DTRAIN__TFEVENTS__EVENT__INIT;
    ev.wall_time = dt_wall_s();
    ev.what_case = DTRAIN__TFEVENTS__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)DT_TFEVENTS_FILE_VERSION;
    DT_TRY_GOTO(tfe_append_event(w, &ev, err), st, fail);
    DT_TRY_GOTO(dt_tfevents_flush(w, err), st, fail);
    *out = w;
    return DT_OK;
fail:
    dt_tfevents_close(w);
    return st;
}

void dt_tfevents_close(dt_tfevents *w)
{
    if (!w)
        return;
    dt_err err = {0};
    if (dt_tfevents_flush(w, &err) != DT_OK)
        DT_WARN("tfevents", "%s", err.msg);
    if (fsync(w->fd) != 0)
        DT_WARN("tfevents", "%s: fsync failed: %s", w->path, strerror(errno));
    close(w->fd);
    dt_buf_destroy(&w->pending);
    free(w->path);
    free(w);
}
