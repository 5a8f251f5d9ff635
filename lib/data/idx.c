/* idx.c - the IDX format of MNIST and Fashion-MNIST, raw or gzip'd (zlib reads both).
 *
 * Layout: 2 zero bytes, a type byte, a rank byte, rank big-endian uint32 dimensions, then the
 * elements, big-endian, row-major. Every size is checked against the header before allocating:
 * the dimension product against DT_MAX_DATA_FILE and, for raw files, against the real size. */
#include "core/buf.h"
#include "data/data_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static int idx_elem_size(int type)
{
    switch (type) {
    case 0x08: /* uint8 */
    case 0x09: /* int8 */
        return 1;
    case 0x0B: /* int16 */
        return 2;
    case 0x0C: /* int32 */
    case 0x0D: /* float32 */
        return 4;
    case 0x0E: /* float64 */
        return 8;
    default:
        return 0;
    }
}

/* Reads exactly n bytes through zlib; a short read is truncation, named with the offset. */
static dt_status gz_read_exact(gzFile f, const char *path, uint64_t off, void *dst, size_t n,
                               dt_err *err)
{
    uint8_t *p = dst;
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(f, p + got, (unsigned)chunk);
        if (r < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr);
            return dt_err_set(err, DT_EIO, "%s: at byte %llu: corrupt gzip stream (%s)", path,
                              (unsigned long long)(off + got), m);
        }
        if (r == 0)
            return dt_err_set(err, DT_EIO,
                              "%s: truncated at byte %llu: expected %zu more bytes; the file is "
                              "incomplete, fetch it again",
                              path, (unsigned long long)(off + got), n - got);
        got += (size_t)r;
    }
    return DT_OK;
}

dt_status dt_idx_read(const char *path, dt_idx_header *hdr, uint8_t **data, size_t *len,
                      dt_err *err)
{
    dt_status st = DT_OK;
    uint8_t *buf = NULL;
    memset(hdr, 0, sizeof *hdr);
    *data = NULL;
    *len = 0;

    int fd;
    uint64_t fsize;
    DT_TRY(dt_file_open_regular(path, &fd, &fsize, err));
    uint8_t magic2[2] = {0};
    ssize_t np = pread(fd, magic2, 2, 0);
    hdr->gzip = np == 2 && magic2[0] == 0x1f && magic2[1] == 0x8b;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return dt_err_set(err, DT_ENOMEM, "%s: cannot open: out of memory", path);
    }
    gzbuffer(f, 1u << 17);

    uint8_t head[4];
    DT_TRY_GOTO(gz_read_exact(f, path, 0, head, 4, err), st, fail);
    if (head[0] != 0 || head[1] != 0 || !idx_elem_size(head[2]) || head[3] == 0 ||
        head[3] > DT_MAX_IDX_DIMS) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s: at byte 0: not an IDX file (its first 4 bytes are not 00 00 TYPE "
                        "RANK with a known TYPE and RANK 1..%d)",
                        path, DT_MAX_IDX_DIMS);
        goto fail;
    }
    hdr->type = head[2];
    hdr->rank = head[3];
    hdr->elem_size = idx_elem_size(head[2]);
    uint64_t count = 1;
    for (int i = 0; i < hdr->rank; i++) {
        uint8_t d[4];
        DT_TRY_GOTO(gz_read_exact(f, path, 4 + 4 * (uint64_t)i, d, 4, err), st, fail);
        hdr->dims[i] = (int64_t)d[0] << 24 | (int64_t)d[1] << 16 | (int64_t)d[2] << 8 | d[3];
        if (hdr->dims[i] != 0 && count > DT_MAX_DATA_FILE / (uint64_t)hdr->dims[i]) {
            st = dt_err_set(err, DT_ETOOBIG,
                            "%s: at byte %d: dimensions declare more than the %llu-byte limit "
                            "(DT_MAX_DATA_FILE); the header is corrupt",
                            path, 4 + 4 * i, (unsigned long long)DT_MAX_DATA_FILE);
            goto fail;
        }
        count *= (uint64_t)hdr->dims[i];
    }
    uint64_t hdr_len = 4 + 4 * (uint64_t)hdr->rank;
    uint64_t bytes = count * (uint64_t)hdr->elem_size;
    if (bytes > DT_MAX_DATA_FILE) {
        st = dt_err_set(err, DT_ETOOBIG,
                        "%s: header declares %llu bytes of data, over the %llu-byte limit", path,
                        (unsigned long long)bytes, (unsigned long long)DT_MAX_DATA_FILE);
        goto fail;
    }
    if (hdr->gzip && bytes / DT_MAX_GZIP_RATIO > fsize) {
        st = dt_err_set(err, DT_ETOOBIG,
                        "%s: header declares %llu bytes of data, but a gzip file of %llu bytes "
                        "inflates to at most %llu (%dx) in this reader: corrupt, or a "
                        "decompression bomb",
                        path, (unsigned long long)bytes, (unsigned long long)fsize,
                        (unsigned long long)fsize * DT_MAX_GZIP_RATIO, DT_MAX_GZIP_RATIO);
        goto fail;
    }
    if (!hdr->gzip && fsize != hdr_len + bytes) {
        st = dt_err_set(err, DT_EIO,
                        "%s: header declares %llu data bytes at byte %llu but the file has %llu "
                        "bytes (expected %llu): %s",
                        path, (unsigned long long)bytes, (unsigned long long)hdr_len,
                        (unsigned long long)fsize, (unsigned long long)(hdr_len + bytes),
                        fsize < hdr_len + bytes ? "the file is truncated" : "trailing bytes");
        goto fail;
    }
    /* A gzip'd file's real size is unknown until it is inflated, so grow the buffer as data
     * arrives: a lying header then costs only what the file really holds. */
    size_t cap = hdr->gzip && bytes > (64u << 20) ? (64u << 20) : (size_t)bytes;
    size_t got = 0;
    buf = malloc(cap ? cap : 1);
    while (buf) {
        size_t want = (cap < bytes ? cap : (size_t)bytes) - got;
        DT_TRY_GOTO(gz_read_exact(f, path, hdr_len + got, buf + got, want, err), st, fail);
        got += want;
        if (got == bytes)
            break;
        cap = cap * 2 < bytes ? cap * 2 : (size_t)bytes;
        uint8_t *nb = realloc(buf, cap);
        if (!nb)
            free(buf);
        buf = nb;
    }
    if (!buf) {
        st = dt_err_set(err, DT_ENOMEM, "%s: cannot allocate %llu bytes", path,
                        (unsigned long long)bytes);
        goto fail;
    }
    uint8_t extra;
    if (gzread(f, &extra, 1) != 0) {
        st = dt_err_set(err, DT_EIO,
                        "%s: trailing data after byte %llu (the header declares "
                        "%llu bytes of elements)",
                        path, (unsigned long long)(hdr_len + bytes), (unsigned long long)bytes);
        goto fail;
    }
    gzclose(f);
    *data = buf;
    *len = bytes;
    return DT_OK;
fail:
    free(buf);
    gzclose(f);
    return st;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

dt_status dt_idx_load(const char *images, const char *labels, float scale, int image_rank,
                      const int64_t *image_shape, dt_dataset **out, dt_err *err)
{
    dt_status st = DT_OK;
    dt_idx_header xh, yh;
    uint8_t *xd = NULL, *yd = NULL;
    size_t xl = 0, yl = 0;
    dt_dataset *ds = NULL;
    *out = NULL;

    DT_TRY_GOTO(dt_idx_read(images, &xh, &xd, &xl, err), st, fail);
    if (xh.type != 0x08 && xh.type != 0x0D && xh.type != 0x0C) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s: IDX element type 0x%02x; images must be uint8 (0x08) or float32 "
                        "(0x0D), token ids int32 (0x0C)",
                        images, xh.type);
        goto fail;
    }
    DT_TRY_GOTO(dt__dataset_new(&ds, err), st, fail);
    ds->n = (size_t)xh.dims[0];
    ds->x_rank = xh.rank - 1;
    ds->x_size = 1;
    for (int i = 1; i < xh.rank; i++) {
        ds->x_shape[i - 1] = xh.dims[i];
        ds->x_size *= (size_t)xh.dims[i];
    }
    if (ds->x_rank == 0) { /* a rank-1 IDX: one scalar per example */
        ds->x_rank = 1;
        ds->x_shape[0] = 1;
    }
    if (image_rank > 0) {
        uint64_t prod = 1;
        for (int i = 0; i < image_rank; i++)
            prod *= (uint64_t)image_shape[i];
        if (prod != ds->x_size) {
            st = dt_err_set(err, DT_EINVAL,
                            "image_shape: %llu values an image, but each image in %s has %zu; "
                            "give a shape whose product is %zu",
                            (unsigned long long)prod, images, ds->x_size, ds->x_size);
            goto fail;
        }
        ds->x_rank = image_rank;
        memcpy(ds->x_shape, image_shape, sizeof(int64_t) * (size_t)image_rank);
    }
    ds->x_scale = scale;
    if (xh.type == 0x08) {
        ds->x_u8 = xd;
        xd = NULL;
    } else { /* big-endian float32 or int32 -> host floats, scaled now */
        ds->x_f32 = malloc(xl ? xl : 1);
        if (!ds->x_f32) {
            st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", images);
            goto fail;
        }
        for (size_t i = 0; i < xl / 4; i++) {
            uint32_t u = be32(xd + 4 * i);
            float v;
            if (xh.type == 0x0C) {
                /* Token ids: float32 holds every integer up to 2^24 exactly, no more. */
                int32_t iv = (int32_t)u;
                if (iv > (1 << 24) || iv < -(1 << 24)) {
                    st = dt_err_set(err, DT_EINVAL,
                                    "%s: element %zu is %d; int32 features must lie within "
                                    "+-2^24 (16777216), exact in float32",
                                    images, i, (int)iv);
                    goto fail;
                }
                v = (float)iv;
            } else {
                memcpy(&v, &u, 4);
            }
            ds->x_f32[i] = v * scale;
        }
        ds->x_scale = 1.0f;
    }

    if (labels && labels[0]) {
        DT_TRY_GOTO(dt_idx_read(labels, &yh, &yd, &yl, err), st, fail);
        bool ids = yh.rank == 1 && (yh.type == 0x08 || yh.type == 0x0C);
        bool targets = yh.rank >= 1 && (yh.type == 0x08 || yh.type == 0x0D) && !ids;
        if (!ids && !targets) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s: labels must be a rank-1 IDX of uint8 or int32 (class ids), or "
                            "float32 / uint8 targets of any shape (got rank %d, type 0x%02x)",
                            labels, yh.rank, yh.type);
            goto fail;
        }
        if ((size_t)yh.dims[0] != ds->n) {
            st = dt_err_set(err, DT_EINVAL, "%s has %lld labels but %s has %zu images", labels,
                            (long long)yh.dims[0], images, ds->n);
            goto fail;
        }
        if (targets) {
            /* A target per example of any shape (an autoencoder's image): float32 as stored,
             * uint8 times the images' scale, as the images are. */
            size_t per = 1;
            for (int d = 1; d < yh.rank; d++)
                per *= (size_t)yh.dims[d];
            ds->y_kind = DT_LABEL_FLOAT;
            ds->y_size = per;
            size_t total = ds->n * per;
            ds->y_f32 = malloc(sizeof(float) * (total ? total : 1));
            if (!ds->y_f32) {
                st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", labels);
                goto fail;
            }
            for (size_t i = 0; i < ds->n * per; i++) {
                if (yh.type == 0x08) {
                    ds->y_f32[i] = yd[i] * scale;
                } else {
                    uint32_t u = be32(yd + 4 * i);
                    memcpy(&ds->y_f32[i], &u, 4);
                }
            }
            goto labelled;
        }
        ds->y_kind = DT_LABEL_INT32;
        ds->y_size = 1;
        ds->y_i32 = malloc(sizeof(int32_t) * (ds->n ? ds->n : 1));
        if (!ds->y_i32) {
            st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", labels);
            goto fail;
        }
        for (size_t i = 0; i < ds->n; i++) {
            int32_t v = yh.type == 0x08 ? yd[i] : (int32_t)be32(yd + 4 * i);
            if (v < 0 || v >= DT_MAX_CLASSES) {
                st = dt_err_set(err, DT_EINVAL, "%s: label %zu is %d, outside 0..%d", labels, i, v,
                                DT_MAX_CLASSES - 1);
                goto fail;
            }
            ds->y_i32[i] = v;
            if (v + 1 > ds->num_classes)
                ds->num_classes = v + 1;
        }
    }
labelled:
    DT_TRY_GOTO(dt__dataset_set_files(ds, (char *const *)&images, 1, NULL, err), st, fail);
    free(xd);
    free(yd);
    *out = ds;
    return DT_OK;
fail:
    free(xd);
    free(yd);
    dt_dataset_free(ds);
    return st;
}
