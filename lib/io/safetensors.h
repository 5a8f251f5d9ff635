/*
 * safetensors.h - read and write safetensors files (weights, checkpoints, exports).
 *
 * The format (huggingface/safetensors):
 *
 *     [8 bytes]  N, little-endian uint64: length of the JSON header
 *     [N bytes]  JSON: {"__metadata__": {"key": "value", ...},          (optional, strings only)
 *                       "dense/kernel": {"dtype": "F32", "shape": [784, 128],
 *                                        "data_offsets": [BEGIN, END]}, ...}
 *                padded with spaces so that the byte buffer starts 8-byte aligned
 *     [rest]     the byte buffer; [BEGIN, END) is relative to its start. Tensors are row-major,
 *                little-endian, and together cover the buffer exactly: no holes, no overlaps.
 *
 * Reading: the whole file is read and validated in memory; the tensors then point into it.
 *
 *     dt_st_file *f;
 *     if (dt_st_open("model.safetensors", &f, &err) != DT_OK) ...   // err names file + tensor
 *     const dt_st_tensor *k = dt_st_find(f, "dense/kernel");      // NULL if absent
 *     if (k && k->dtype == DT_ST_F32 && k->ndim == 2)
 *         use((const float *)k->data, k->shape[0], k->shape[1]);   // (in, out)
 *     const char *epoch = dt_st_metadata(f, "epoch");              // NULL if absent
 *     dt_st_free(f);                                               // invalidates k and epoch
 *
 * Writing: add tensors (borrowed until write/serialize returns), set metadata, write atomically.
 *
 *     dt_st_writer *w = dt_st_writer_new();
 *     int64_t shape[2] = {784, 128};
 *     dt_st_writer_add(w, "dense/kernel", DT_ST_F32, 2, shape, kernel, &err);
 *     dt_st_writer_set_metadata(w, "epoch", "3", &err);
 *     dt_st_writer_write(w, "ckpt.safetensors", &err);   // temp file, fsync, rename
 *     dt_st_writer_free(w);
 *
 * What the reader rejects (DT_EINVAL unless noted; the message names the file and the tensor):
 * a file shorter than 8 bytes or than 8 + N, N over DT_MAX_SAFETENSORS_HDR (DT_ETOOBIG), a file
 * over DT_MAX_SAFETENSORS_FILE (DT_ETOOBIG), a header that is not a JSON object, an unknown dtype
 * (a safetensors dtype dtrain lacks, such as U32 or F8_E4M3: DT_ENOTSUP), a shape that is not a
 * list of at most DT_ST_MAX_DIMS non-negative integers, data_offsets that are not [begin <= end]
 * inside the buffer, a span that differs from the shape product times the dtype size, tensors
 * that overlap or leave holes or do not cover the buffer, metadata that is not an object of
 * strings, and duplicate tensor or metadata names.
 *
 * Thread-safety: a dt_st_file is immutable after open/parse, so several threads may read it at
 * once. A writer belongs to one thread at a time.
 */
#ifndef DT_IO_SAFETENSORS_H
#define DT_IO_SAFETENSORS_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum dt_st_dtype {
    DT_ST_F32,
    DT_ST_F16,
    DT_ST_BF16,
    DT_ST_F64,
    DT_ST_I64,
    DT_ST_I32,
    DT_ST_I16,
    DT_ST_I8,
    DT_ST_U8,
    DT_ST_BOOL
} dt_st_dtype;

#define DT_ST_MAX_DIMS 8

typedef struct dt_st_tensor {
    const char *name; /* owned by the file/writer */
    dt_st_dtype dtype;
    int ndim;                      /* 0 (a scalar) .. DT_ST_MAX_DIMS */
    int64_t shape[DT_ST_MAX_DIMS]; /* shape[0..ndim-1], each >= 0; the rest are 0 */
    size_t nbytes;                 /* product(shape) * dt_st_dtype_size(dtype) */
    const void *data;              /* points into the file's buffer (reader) or the caller's
                                      memory (writer). Reader: aligned to at least the dtype
                                      size, so (const float *)data is safe; NULL-free even
                                      when nbytes is 0. */
} dt_st_tensor;

/* The safetensors spelling ("F32", "BF16", "BOOL"); "?" for a value outside the enum. */
const char *dt_st_dtype_name(dt_st_dtype dtype);
/* Bytes per element (BOOL is 1); 0 for a value outside the enum. */
size_t dt_st_dtype_size(dt_st_dtype dtype);

/* Opaque: a whole file read and validated in memory, tensors sorted by data offset. */
typedef struct dt_st_file dt_st_file;

/* Reads and validates path; on success *out is the caller's (dt_st_free). Errors name path. */
dt_status dt_st_open(const char *path, dt_st_file **out, dt_err *err);
/* As dt_st_open on an in-memory file of len bytes; copies, so bytes may be freed afterwards.
 * Errors name "<memory>". */
dt_status dt_st_parse(const void *bytes, size_t len, dt_st_file **out, dt_err *err);

size_t dt_st_count(const dt_st_file *f);
/* The i-th tensor in file (offset) order, i < dt_st_count(f); NULL past the end. Valid until
 * dt_st_free(f). */
const dt_st_tensor *dt_st_at(const dt_st_file *f, size_t i);
/* The tensor called name (O(log n)), or NULL. Valid until dt_st_free(f). */
const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name);
/* The __metadata__ value of key, or NULL if absent. Valid until dt_st_free(f). */
const char *dt_st_metadata(const dt_st_file *f, const char *key);
/* Number of __metadata__ entries and the i-th one (sorted by key), for listing them all. */
size_t dt_st_metadata_count(const dt_st_file *f);
dt_status dt_st_metadata_at(const dt_st_file *f, size_t i, const char **key, const char **value);
void dt_st_free(dt_st_file *f); /* NULL-safe */

/* Opaque writer; tensors are written in the order they were added. */
typedef struct dt_st_writer dt_st_writer;

/* NULL only when out of memory. */
dt_st_writer *dt_st_writer_new(void);
/* Adds a tensor of ndim dims (0 = scalar, at most DT_ST_MAX_DIMS) and shape[0..ndim-1] >= 0.
 * data holds product(shape) * dtype size bytes (may be NULL when that is 0) and is borrowed
 * until write/serialize returns; name is copied. A duplicate name -> DT_EEXIST; the name
 * "__metadata__", an empty name or a bad shape -> DT_EINVAL. */
dt_status dt_st_writer_add(dt_st_writer *w, const char *name, dt_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data, dt_err *err);
/* Sets __metadata__[key] = value (both copied); setting a key again replaces its value. */
dt_status dt_st_writer_set_metadata(dt_st_writer *w, const char *key, const char *value,
                                    dt_err *err);
/* The whole file in one malloc'd buffer: *bytes is the caller's to free(). */
dt_status dt_st_writer_serialize(dt_st_writer *w, void **bytes, size_t *len, dt_err *err);
/* Serializes and writes path atomically (dt_file_write_atomic: temp file, fsync, rename).
 * Needs memory for the whole file once more. */
dt_status dt_st_writer_write(dt_st_writer *w, const char *path, dt_err *err);
void dt_st_writer_free(dt_st_writer *w); /* NULL-safe */

#endif
