/* dataset.c - the in-memory dataset: allocation, provenance, and loading by format. */
#include "data/data_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

dt_status dt__dataset_new(dt_dataset **out, dt_err *err)
{
    dt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return dt_err_set(err, DT_ENOMEM, "data: out of memory");
    ds->x_scale = 1.0f;
    *out = ds;
    return DT_OK;
}

dt_status dt__dataset_set_files(dt_dataset *ds, char *const *names, size_t nfiles,
                                const size_t *counts, dt_err *err)
{
    ds->file_names = calloc(nfiles ? nfiles : 1, sizeof(char *));
    ds->file_start = calloc(nfiles + 1, sizeof(size_t));
    if (!ds->file_names || !ds->file_start)
        return dt_err_set(err, DT_ENOMEM, "data: out of memory");
    ds->nfiles = nfiles;
    for (size_t f = 0; f < nfiles; f++) {
        ds->file_names[f] = strdup(names[f]);
        if (!ds->file_names[f])
            return dt_err_set(err, DT_ENOMEM, "data: out of memory");
        ds->file_start[f + 1] = ds->file_start[f] + (counts ? counts[f] : ds->n);
    }
    DT_ASSERT(ds->file_start[nfiles], ==, ds->n);
    return DT_OK;
}

void dt_dataset_free(dt_dataset *ds)
{
    if (!ds)
        return;
    free(ds->x_u8);
    free(ds->x_f32);
    free(ds->y_i32);
    free(ds->y_f32);
    for (size_t f = 0; f < ds->nfiles; f++)
        free(ds->file_names[f]);
    free(ds->file_names);
    free(ds->file_start);
    free(ds->x_row);
    free(ds);
}

dt_status dt_dataset_split(dt_dataset *ds, double fraction, dt_dataset **val, dt_err *err)
{
    *val = NULL;
    size_t at = (size_t)floor((double)ds->n * (1.0 - fraction));
    /* An index (submit-time checks) splits by count; a FILE shard lacks other workers' rows. */
    bool index = ds->shard_workers == -1;
    if (ds->x_row && !index)
        return dt_err_set(err, DT_EINVAL, "validation_split: the data set is a FILE shard");
    if (!(fraction > 0 && fraction < 1) || at == 0 || at >= ds->n)
        return dt_err_set(err, DT_EINVAL,
                          "validation_split %g of %zu examples leaves %zu for training and %zu "
                          "for validation; both need at least one",
                          fraction, ds->n, at, ds->n - at);
    size_t nv = ds->n - at;
    dt_dataset *v = calloc(1, sizeof *v);
    if (!v)
        return dt_err_set(err, DT_ENOMEM, "validation_split: out of memory");
    *v = (dt_dataset){.n = nv,
                      .x_rank = ds->x_rank,
                      .x_size = ds->x_size,
                      .x_scale = ds->x_scale,
                      .y_kind = ds->y_kind,
                      .y_size = ds->y_size,
                      .num_classes = ds->num_classes,
                      .nfiles = 1};
    memcpy(v->x_shape, ds->x_shape, sizeof v->x_shape);
    bool ok = true;
#define DT_SPLIT_TAIL(field, per)                                                                  \
    if (ds->field) {                                                                               \
        size_t bytes_ = nv * (per) * sizeof *ds->field;                                            \
        v->field = malloc(bytes_ ? bytes_ : 1);                                                    \
        if ((ok = ok && v->field))                                                                 \
            memcpy(v->field, ds->field + at * (per), bytes_);                                      \
    }
    if (index) { /* an index holds no pixels (x is one placeholder element): nor does its tail */
        if (ds->x_u8)
            ok = ok && (v->x_u8 = malloc(1));
        if (ds->x_f32)
            ok = ok && (v->x_f32 = malloc(sizeof(float)));
    } else {
        DT_SPLIT_TAIL(x_u8, ds->x_size)
        DT_SPLIT_TAIL(x_f32, ds->x_size)
    }
    DT_SPLIT_TAIL(y_i32, 1)
    DT_SPLIT_TAIL(y_f32, ds->y_size)
    DT_SPLIT_TAIL(x_row, 1)
#undef DT_SPLIT_TAIL
    v->shard_workers = index ? -1 : 0;
    v->file_names = calloc(1, sizeof *v->file_names);
    v->file_start = calloc(2, sizeof *v->file_start);
    char name[256];
    snprintf(name, sizeof name, "the last %zu examples of %s (validation_split)", nv,
             ds->nfiles ? ds->file_names[0] : "the training data");
    ok = ok && v->file_names && v->file_start && (v->file_names[0] = strdup(name));
    if (!ok) {
        dt_dataset_free(v);
        return dt_err_set(err, DT_ENOMEM, "validation_split: out of memory");
    }
    v->file_start[1] = nv;
    /* The training part keeps the files that start before the split, the last one cut. */
    size_t keep = 0;
    while (keep < ds->nfiles && ds->file_start[keep] < at)
        keep++;
    for (size_t f = keep; f < ds->nfiles; f++)
        free(ds->file_names[f]);
    ds->nfiles = keep;
    ds->file_start[keep] = at;
    ds->n = at;
    *val = v;
    return DT_OK;
}

dt_status dt_dataset_load(const dt_data_source *src, dt_dataset **out, dt_err *err)
{
    return dt_dataset_load_shard(src, NULL, out, err);
}

dt_status dt_dataset_load_shard(const dt_data_source *src, const dt_data_load_opts *o,
                                dt_dataset **out, dt_err *err)
{
    *out = NULL;
    switch (src->format) {
    case DT_DATA_FORMAT_IDX:
        return dt_idx_load(src->images, src->labels, src->scale, src->image_rank, src->image_shape,
                           out, err);
    case DT_DATA_FORMAT_CSV:
        return dt_csv_load(src, out, err);
    case DT_DATA_FORMAT_TFRECORD:
        return dt_tfrecord_load_shard(src, o, out, err);
    case DT_DATA_FORMAT_IMAGE_FOLDER:
        return dt_image_folder_load(src, o, out, err);
    }
    return dt_err_set(err, DT_EINVAL, "data: unknown format %d", (int)src->format);
}

dt_status dt__fvec_push(dt__fvec *a, const float *src, size_t n, const char *what, dt_err *err)
{
    if (n > a->max || a->len > a->max - n)
        return dt_err_set(err, DT_ETOOBIG, "%s: more than %zu values in memory (limit)", what,
                          a->max);
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->len + n)
            cap *= 2;
        if (cap > a->max)
            cap = a->max;
        float *v = realloc(a->v, cap * sizeof(float));
        if (!v)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
        a->v = v;
        a->cap = cap;
    }
    if (n == 0) /* rows of no values (a feature empty in the first record): v may be NULL */
        return DT_OK;
    memcpy(a->v + a->len, src, n * sizeof(float));
    a->len += n;
    return DT_OK;
}

const char *dt__data_image_kind(const uint8_t *p, size_t n)
{
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return "JPEG";
    if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
        return "PNG";
    return NULL;
}

const char *dt_shard_policy_name(dt_shard_policy p)
{
    switch (p) {
    case DT_SHARD_AUTO:
        return "AUTO";
    case DT_SHARD_FILE:
        return "FILE";
    case DT_SHARD_DATA:
        return "DATA";
    case DT_SHARD_OFF:
        return "OFF";
    }
    return "?";
}

dt_status dt_shard_policy_parse(const char *s, dt_shard_policy *out, dt_err *err)
{
    static const dt_shard_policy all[] = {DT_SHARD_AUTO, DT_SHARD_FILE, DT_SHARD_DATA,
                                          DT_SHARD_OFF};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && strcasecmp(s, dt_shard_policy_name(all[i])) == 0) {
            *out = all[i];
            return DT_OK;
        }
    return dt_err_set(err, DT_EINVAL, "shard policy \"%s\": expected AUTO, FILE, DATA or OFF",
                      s ? s : "(null)");
}

const char *dt_data_format_name(dt_data_format f)
{
    switch (f) {
    case DT_DATA_FORMAT_IDX:
        return "idx";
    case DT_DATA_FORMAT_CSV:
        return "csv";
    case DT_DATA_FORMAT_TFRECORD:
        return "tfrecord";
    case DT_DATA_FORMAT_IMAGE_FOLDER:
        return "image_folder";
    }
    return "?";
}
