/* csv.c - CSV files of numeric features and label columns (RFC 4180 quoting).
 *
 * Fields are separated by ',' and records by '\n' or "\r\n". A field in double quotes may hold
 * commas, newlines and doubled quotes (""). Empty lines are skipped. Every row must have the
 * header's number of columns; every used value must be a number. One label column whose values
 * are all non-negative integers gives sparse class ids, otherwise float targets; a list of label
 * columns gives a float target vector per row. */
#include "data/data_internal.h"
#include "core/buf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dt_status row_push_field(dt__csv_row *r, const char *path, dt_err *err)
{
    if (r->n == r->cap) {
        if (r->cap >= DT_MAX_CSV_COLUMNS)
            return dt_err_set(err, DT_ETOOBIG, "%s:%llu: more than %d columns", path,
                              (unsigned long long)r->line, DT_MAX_CSV_COLUMNS);
        size_t cap = r->cap ? 2 * r->cap : 64;
        size_t *o = realloc(r->off, cap * sizeof *o);
        if (!o)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        r->off = o;
        r->cap = cap;
    }
    r->off[r->n++] = r->text.len;
    return DT_OK;
}

static dt_status row_putc(dt__csv_row *r, char c, const char *path, dt_err *err)
{
    if (dt_buf_append(&r->text, &c, 1, NULL) != DT_OK)
        return dt_err_set(err, DT_ETOOBIG, "%s:%llu: a row longer than %u bytes (DT_MAX_CSV_LINE)",
                          path, (unsigned long long)r->line, DT_MAX_CSV_LINE);
    return DT_OK;
}

void dt__csv_row_destroy(dt__csv_row *r)
{
    free(r->off);
    dt_buf_destroy(&r->text);
    memset(r, 0, sizeof *r);
}

/* Parses the row starting at *pos into r; *line counts newlines. Returns DT_ENOENT at the end.
 * Empty lines are skipped. */
dt_status dt__csv_next_row(const char *s, size_t len, size_t *pos, uint64_t *line, const char *path,
                           dt__csv_row *r, dt_err *err)
{
    size_t p = *pos;
    while (p < len && (s[p] == '\n' || s[p] == '\r')) {
        if (s[p] == '\n')
            (*line)++;
        p++;
    }
    if (p >= len) {
        *pos = p;
        return DT_ENOENT;
    }
    dt_buf_reset(&r->text);
    r->n = 0;
    r->line = *line;
    r->byte = p;
    DT_TRY(row_push_field(r, path, err));
    bool quoted = false, was_quoted = false;
    for (; p < len; p++) {
        char c = s[p];
        if (quoted) {
            if (c == '"') {
                if (p + 1 < len && s[p + 1] == '"') {
                    DT_TRY(row_putc(r, '"', path, err));
                    p++;
                } else {
                    quoted = false;
                }
                continue;
            }
            if (c == '\n')
                (*line)++;
            DT_TRY(row_putc(r, c, path, err));
            continue;
        }
        if (c == '"' && !was_quoted && r->text.len == r->off[r->n - 1]) {
            quoted = was_quoted = true;
            continue;
        }
        if (c == ',') {
            DT_TRY(row_putc(r, '\0', path, err));
            DT_TRY(row_push_field(r, path, err));
            was_quoted = false;
            continue;
        }
        if (c == '\n' || (c == '\r' && p + 1 < len && s[p + 1] == '\n'))
            break;
        if (was_quoted && c != ' ' && c != '\t')
            return dt_err_set(err, DT_EINVAL,
                              "%s:%llu: (byte %zu) text after a closing quote; quote the whole "
                              "field and double inner quotes (\"\")",
                              path, (unsigned long long)*line, p);
        DT_TRY(row_putc(r, c, path, err));
    }
    if (quoted)
        return dt_err_set(err, DT_EINVAL,
                          "%s:%llu: a quoted field is never closed (the file may be truncated)",
                          path, (unsigned long long)r->line);
    DT_TRY(row_putc(r, '\0', path, err));
    *pos = p;
    return DT_OK;
}

const char *dt__csv_field(const dt__csv_row *r, size_t i)
{
    return r->text.data + r->off[i];
}

bool dt__csv_parse_num(const char *f, double *out)
{
    while (*f == ' ' || *f == '\t')
        f++;
    if (!*f)
        return false;
    char *end;
    errno = 0;
    double v = strtod(f, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end || errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

typedef struct csv_cols {
    size_t ncols;
    char **names; /* (ncols) header names, or NULL */
    size_t *lab;  /* (nlab) label columns; none when nlab is 0 */
    size_t nlab;
    size_t *feat; /* (nfeat) columns */
    size_t nfeat;
} csv_cols;

static void cols_destroy(csv_cols *c)
{
    for (size_t i = 0; c->names && i < c->ncols; i++)
        free(c->names[i]);
    free(c->names);
    free(c->lab);
    free(c->feat);
    memset(c, 0, sizeof *c);
}

static int col_by_name(const csv_cols *c, const char *name)
{
    for (size_t i = 0; c->names && i < c->ncols; i++)
        if (strcmp(c->names[i], name) == 0)
            return (int)i;
    return -1;
}

/* Resolves the label and feature columns of the first file. */
static dt_status resolve_cols(const dt_data_source *src, const dt__csv_row *hdr, const char *path,
                              csv_cols *c, dt_err *err)
{
    c->ncols = hdr->n;
    if (src->header) {
        c->names = calloc(c->ncols, sizeof(char *));
        if (!c->names)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        for (size_t i = 0; i < c->ncols; i++)
            if (!(c->names[i] = strdup(dt__csv_field(hdr, i))))
                return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    }
    size_t nl =
        src->nlabel_columns ? src->nlabel_columns : (src->label_column[0] || src->label_index >= 0);
    if (nl && !(c->lab = calloc(nl, sizeof(size_t))))
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < nl; i++) {
        const char *name = src->nlabel_columns ? src->label_columns[i] : src->label_column;
        int col = src->nlabel_columns ? src->label_column_index[i] : src->label_index;
        if (name && name[0]) {
            col = col_by_name(c, name);
            if (col < 0)
                return dt_err_set(err, DT_EINVAL, "%s:1: no column named \"%s\" in the header",
                                  path, name);
        } else if (col < 0 || (size_t)col >= c->ncols) {
            return dt_err_set(err, DT_EINVAL, "%s: label column %d, but rows have %zu columns",
                              path, col, c->ncols);
        }
        for (size_t j = 0; j < i; j++)
            if (c->lab[j] == (size_t)col)
                return dt_err_set(err, DT_EINVAL, "%s: label column %d is listed twice", path, col);
        c->lab[c->nlab++] = (size_t)col;
    }
    size_t nf = src->nfeature_columns ? src->nfeature_columns : c->ncols - c->nlab;
    if (nf == 0)
        return dt_err_set(err, DT_EINVAL, "%s: no feature column besides the label", path);
    if (nf > DT_MAX_CSV_COLUMNS)
        return dt_err_set(err, DT_ETOOBIG, "%s: more than %d feature columns", path,
                          DT_MAX_CSV_COLUMNS);
    c->feat = calloc(nf, sizeof(size_t));
    if (!c->feat)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    if (src->nfeature_columns) {
        for (size_t i = 0; i < nf; i++) {
            int col = src->feature_column_index ? src->feature_column_index[i] : -1;
            if (col < 0 && src->feature_columns && src->feature_columns[i]) {
                col = col_by_name(c, src->feature_columns[i]);
                if (col < 0)
                    return dt_err_set(err, DT_EINVAL, "%s:1: no column named \"%s\"", path,
                                      src->feature_columns[i]);
            }
            if (col < 0 || (size_t)col >= c->ncols)
                return dt_err_set(err, DT_EINVAL,
                                  "%s: feature column %d is outside the %zu columns", path, col,
                                  c->ncols);
            c->feat[c->nfeat++] = (size_t)col;
        }
    } else {
        for (size_t i = 0; i < c->ncols; i++) {
            bool is_label = false;
            for (size_t j = 0; j < c->nlab; j++)
                is_label = is_label || c->lab[j] == i;
            if (!is_label)
                c->feat[c->nfeat++] = i;
        }
    }
    return DT_OK;
}

dt_status dt_csv_load(const dt_data_source *src, dt_dataset **out, dt_err *err)
{
    dt_status st = DT_OK;
    dt_dataset *ds = NULL;
    char *text = NULL;
    dt__csv_row row = {0};
    csv_cols cols = {0};
    dt__fvec x = {.max = DT_MAX_DATA_FILE / sizeof(float)};
    double *lab = NULL;
    size_t nlab = 0, cap_lab = 0;
    float *vals = NULL;
    size_t *counts = calloc(src->nfiles + 1, sizeof(size_t));
    *out = NULL;
    dt_buf_init(&row.text, DT_MAX_CSV_LINE);
    if (!counts) {
        st = dt_err_set(err, DT_ENOMEM, "csv: out of memory");
        goto fail;
    }
    size_t n = 0;
    for (size_t fidx = 0; fidx < src->nfiles; fidx++) {
        const char *path = src->files[fidx];
        size_t len = 0, pos = 0;
        uint64_t line = 1;
        free(text);
        text = NULL;
        DT_TRY_GOTO(dt_file_read_regular(path, DT_MAX_DATA_FILE, &text, &len, err), st, fail);
        if (memchr(text, '\0', len)) {
            st = dt_err_set(err, DT_EINVAL, "%s: byte %zu is NUL: this is not a CSV text file",
                            path, (size_t)((char *)memchr(text, '\0', len) - text));
            goto fail;
        }
        if (src->header || fidx == 0) {
            st = dt__csv_next_row(text, len, &pos, &line, path, &row, err);
            if (st == DT_ENOENT) {
                st = dt_err_set(err, DT_EINVAL, "%s: empty file", path);
                goto fail;
            }
            if (st != DT_OK)
                goto fail;
            if (fidx == 0) {
                DT_TRY_GOTO(resolve_cols(src, &row, path, &cols, err), st, fail);
                vals = malloc(cols.nfeat * sizeof(float));
                if (!vals) {
                    st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
                    goto fail;
                }
            } else {
                bool same = row.n == cols.ncols;
                for (size_t i = 0; same && i < row.n; i++)
                    same = strcmp(dt__csv_field(&row, i), cols.names[i]) == 0;
                if (!same) {
                    st = dt_err_set(err, DT_EINVAL, "%s:1: the header differs from %s's", path,
                                    src->files[0]);
                    goto fail;
                }
            }
            if (!src->header)
                pos = 0, line = 1; /* the first row was data: read it again */
        }
        for (;;) {
            st = dt__csv_next_row(text, len, &pos, &line, path, &row, err);
            if (st == DT_ENOENT) {
                st = DT_OK;
                break;
            }
            if (st != DT_OK)
                goto fail;
            if (row.n != cols.ncols) {
                st = dt_err_set(err, DT_EINVAL, "%s:%llu: %zu columns where the %s has %zu", path,
                                (unsigned long long)row.line, row.n,
                                src->header ? "header" : "first row", cols.ncols);
                goto fail;
            }
            for (size_t i = 0; i < cols.nfeat; i++) {
                double v;
                if (!dt__csv_parse_num(dt__csv_field(&row, cols.feat[i]), &v)) {
                    st = dt_err_set(
                        err, DT_EINVAL, "%s:%llu: column %s%s%s (%zu): \"%.40s\" is not a number",
                        path, (unsigned long long)row.line, cols.names ? "\"" : "",
                        cols.names ? cols.names[cols.feat[i]] : "", cols.names ? "\"" : "",
                        cols.feat[i], dt__csv_field(&row, cols.feat[i]));
                    goto fail;
                }
                vals[i] = (float)v * src->scale;
            }
            DT_TRY_GOTO(dt__fvec_push(&x, vals, cols.nfeat, path, err), st, fail);
            for (size_t li = 0; li < cols.nlab; li++) {
                double v;
                if (!dt__csv_parse_num(dt__csv_field(&row, cols.lab[li]), &v)) {
                    st = dt_err_set(err, DT_EINVAL,
                                    "%s:%llu: label \"%.40s\" is not a number; map class names to "
                                    "integers 0..K-1",
                                    path, (unsigned long long)row.line,
                                    dt__csv_field(&row, cols.lab[li]));
                    goto fail;
                }
                if (nlab == cap_lab) {
                    cap_lab = cap_lab ? 2 * cap_lab : 1024;
                    double *l = realloc(lab, cap_lab * sizeof(double));
                    if (!l) {
                        st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
                        goto fail;
                    }
                    lab = l;
                }
                lab[nlab++] = v;
            }
            n++;
            counts[fidx]++;
        }
    }
    if (n == 0) {
        st = dt_err_set(err, DT_EINVAL, "%s: no data rows", src->nfiles ? src->files[0] : "csv");
        goto fail;
    }
    DT_TRY_GOTO(dt__dataset_new(&ds, err), st, fail);
    ds->n = n;
    ds->x_f32 = x.v;
    x.v = NULL;
    ds->x_size = cols.nfeat;
    ds->x_rank = 1;
    ds->x_shape[0] = (int64_t)cols.nfeat;
    if (src->image_rank > 0) { /* "shape": the row reshaped */
        uint64_t prod = 1;
        for (int i = 0; i < src->image_rank; i++)
            prod *= (uint64_t)src->image_shape[i];
        if (prod != cols.nfeat) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s: \"shape\" holds %llu values but the rows have %zu feature "
                            "columns; give a shape whose product is %zu",
                            src->nfiles ? src->files[0] : "csv", (unsigned long long)prod,
                            (size_t)cols.nfeat, (size_t)cols.nfeat);
            goto fail;
        }
        ds->x_rank = src->image_rank;
        memcpy(ds->x_shape, src->image_shape, sizeof(int64_t) * (size_t)src->image_rank);
    }
    if (cols.nlab) {
        /* One column of non-negative integers is class ids; a list of label columns is a
         * target vector per row (regression targets, or one-hot labels). */
        bool ints = !src->nlabel_columns;
        for (size_t i = 0; i < n && ints; i++)
            ints = lab[i] >= 0 && lab[i] < DT_MAX_CLASSES && lab[i] == floor(lab[i]);
        ds->y_size = cols.nlab;
        if (ints) {
            ds->y_kind = DT_LABEL_INT32;
            ds->y_i32 = malloc(n * sizeof(int32_t));
        } else {
            ds->y_kind = DT_LABEL_FLOAT;
            ds->y_f32 = malloc(n * cols.nlab * sizeof(float));
        }
        if (!ds->y_i32 && !ds->y_f32) {
            st = dt_err_set(err, DT_ENOMEM, "csv: out of memory");
            goto fail;
        }
        for (size_t i = 0; i < n * cols.nlab; i++) {
            if (ints) {
                ds->y_i32[i] = (int32_t)lab[i];
                if (ds->y_i32[i] + 1 > ds->num_classes)
                    ds->num_classes = ds->y_i32[i] + 1;
            } else {
                ds->y_f32[i] = (float)lab[i];
            }
        }
    }
    DT_TRY_GOTO(dt__dataset_set_files(ds, src->files, src->nfiles, counts, err), st, fail);
    *out = ds;
    ds = NULL;
fail:
    dt_dataset_free(ds);
    free(text);
    free(x.v);
    free(lab);
    free(vals);
    free(counts);
    dt__csv_row_destroy(&row);
    cols_destroy(&cols);
    return st;
}
