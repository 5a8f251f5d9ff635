/*
 * buf.h - a growable byte buffer with a hard ceiling.
 *
 *     dt_buf b;
 *     dt_buf_init(&b, DT_MAX_JOBSPEC);
 *     if (dt_buf_append(&b, data, n, &err) != DT_OK) ...   // DT_ETOOBIG past the ceiling
 *     use(b.data, b.len);                                  // data is always NUL-terminated
 *     dt_buf_destroy(&b);
 *
 * The buffer owns data. dt_buf_destroy on a zeroed buffer is a no-op.
 */
#ifndef DT_CORE_BUF_H
#define DT_CORE_BUF_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dt_buf {
    char *data; /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    size_t max; /* ceiling on len */
} dt_buf;

void dt_buf_init(dt_buf *b, size_t max);
void dt_buf_destroy(dt_buf *b);
void dt_buf_reset(dt_buf *b);
dt_status dt_buf_append(dt_buf *b, const void *data, size_t n, dt_err *err);
dt_status dt_buf_printf(dt_buf *b, dt_err *err, const char *fmt, ...) DT_PRINTF(3, 4);
/* Hands data to the caller (free() it) and leaves b empty. */
char *dt_buf_steal(dt_buf *b, size_t *len);

/* Reads a whole file into *out (malloc'd, NUL-terminated, caller frees) if it is at most max
 * bytes; errors name the path. */
dt_status dt_file_read_all(const char *path, size_t max, char **out, size_t *len, dt_err *err);

/* Opens path for reading only if it is a regular file, checked with fstat on the descriptor
 * itself: the open is non-blocking (O_NONBLOCK cleared after), so a FIFO swapped in after an
 * earlier stat() cannot hang it, and a device or directory is refused before a read. *size is
 * the file's size. Errors name the path and say what it is instead. For what a job names. */
dt_status dt_file_open_regular(const char *path, int *fd, uint64_t *size, dt_err *err);
/* dt_file_read_all of a regular file only (dt_file_open_regular): what a daemon reads for a job.
 * dt_file_read_all itself also reads pipes, for the CLI's `submit <(generate-spec)`. */
dt_status dt_file_read_regular(const char *path, size_t max, char **out, size_t *len, dt_err *err);

/* Writes data to path atomically: a temporary file beside it, fsync, rename, fsync of the
 * directory. A crash leaves either the old file or the new one. */
dt_status dt_file_write_atomic(const char *path, const void *data, size_t len, dt_err *err);

/* Appends line and a newline to path (created 0644 if missing). No fsync: for logs and
 * histories where a crash may cut the last line, which readers must then ignore. */
dt_status dt_file_append_line(const char *path, const char *line, dt_err *err);

/* "base/path", or a copy of path when it is absolute or base is NULL or empty; NULL when out of
 * memory. The caller frees. Joins only: confinement is the caller's business. */
char *dt_path_join(const char *base, const char *path);

#endif
