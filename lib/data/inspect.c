/* inspect.c - what `dtrain data inspect` shows: a file's format (detected, not trusted from its
 * name), record count, every feature with dtype and shape, and a label histogram.
 *
 * Detection: gzip by its magic (then the rest on the inflated bytes); IDX by 00 00 TYPE RANK;
 * TFRecord by a valid masked CRC of the first record's length; CSV otherwise. */
#include "data/data_internal.h"
#include "core/buf.h"
#include "core/crc32c.h"

#include "example.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static dt_status info_feature(dt_data_file_info *info, const char *name, const char *path,
                              dt_data_feature_info **out, dt_err *err)
{
    for (size_t i = 0; i < info->nfeatures; i++)
        if (strcmp(info->features[i].name, name) == 0) {
            *out = &info->features[i];
            return DT_OK;
        }
    if (info->nfeatures >= DT_MAX_DATA_FEATURES)
        return dt_err_set(err, DT_ETOOBIG, "%s: more than %d distinct features", path,
                          DT_MAX_DATA_FEATURES);
    dt_data_feature_info *f =
        realloc(info->features, (info->nfeatures + 1) * sizeof *info->features);
    if (!f)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    info->features = f;
    *out = &f[info->nfeatures++];
    memset(*out, 0, sizeof **out);
    snprintf((*out)->name, sizeof(*out)->name, "%s", name);
    return DT_OK;
}

static dt_status hist_add(dt_data_file_info *info, int64_t v, const char *path, dt_err *err)
{
    info->has_labels = true;
    if (v < 0 || v >= DT_MAX_CLASSES) {
        info->labels_out_of_range++;
        return DT_OK;
    }
    if ((size_t)v >= info->nlabel_hist) {
        size_t n = (size_t)v + 1;
        uint64_t *h = realloc(info->label_hist, n * sizeof *h);
        if (!h)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        memset(h + info->nlabel_hist, 0, (n - info->nlabel_hist) * sizeof *h);
        info->label_hist = h;
        info->nlabel_hist = n;
    }
    info->label_hist[v]++;
    return DT_OK;
}

static const char *idx_dtype(int type)
{
    switch (type) {
    case 0x08:
        return "uint8";
    case 0x09:
        return "int8";
    case 0x0B:
        return "int16";
    case 0x0C:
        return "int32";
    case 0x0D:
        return "float32";
    default:
        return "float64";
    }
}

static dt_status inspect_idx(const char *path, dt_data_file_info *info, dt_err *err)
{
    dt_idx_header h;
    uint8_t *d;
    size_t len;
    DT_TRY(dt_idx_read(path, &h, &d, &len, err));
    snprintf(info->format, sizeof info->format, "%s", h.gzip ? "idx.gz" : "idx");
    info->records = (uint64_t)h.dims[0];
    dt_data_feature_info *f;
    dt_status st = info_feature(info, h.rank == 1 ? "label" : "image", path, &f, err);
    if (st == DT_OK) {
        snprintf(f->dtype, sizeof f->dtype, "%s", idx_dtype(h.type));
        f->rank = h.rank - 1;
        for (int i = 1; i < h.rank; i++)
            f->shape[i - 1] = h.dims[i];
    }
    if (st == DT_OK && h.rank == 1 && (h.type == 0x08 || h.type == 0x0C)) {
        snprintf(info->label_name, sizeof info->label_name, "label");
        for (uint64_t i = 0; i < info->records && st == DT_OK; i++) {
            int64_t v = h.type == 0x08
                            ? d[i]
                            : (int32_t)((uint32_t)d[4 * i] << 24 | (uint32_t)d[4 * i + 1] << 16 |
                                        (uint32_t)d[4 * i + 2] << 8 | d[4 * i + 3]);
            st = hist_add(info, v, path, err);
        }
    }
    free(d);
    return st;
}

static dt_status inspect_tfrecord(const char *path, bool gz, const char *label,
                                  dt_data_file_info *info, dt_err *err)
{
    dt_tfrecord_reader *r;
    DT_TRY(dt_tfrecord_open(path, gz, &r, err));
    snprintf(info->format, sizeof info->format, "%s", gz ? "tfrecord.gz" : "tfrecord");
    const char *lname = label && label[0] ? label : "label";
    dt_status st = DT_OK;
    dt__img_probe *probes = NULL; /* JPEG/PNG values, in record order */
    size_t nprobes = 0, cap = 0;
    for (;;) {
        const uint8_t *data;
        size_t len;
        uint64_t rec = dt_tfrecord_index(r), off = dt_tfrecord_offset(r);
        st = dt_tfrecord_next(r, &data, &len, err);
        if (st == DT_ENOENT) {
            st = DT_OK;
            break;
        }
        if (st != DT_OK)
            break;
        Tensorflow__Example *ex = tensorflow__example__unpack(NULL, len, data);
        if (!ex) {
            st = dt_err_set(err, DT_EPROTO,
                            "%s: record %llu at byte %llu: not a valid tf.train.Example", path,
                            (unsigned long long)rec, (unsigned long long)off);
            break;
        }
        for (size_t i = 0; ex->features && i < ex->features->n_feature && st == DT_OK; i++) {
            const Tensorflow__Features__FeatureEntry *e = ex->features->feature[i];
            if (!e || !e->key || !e->value)
                continue;
            const Tensorflow__Feature *fe = e->value;
            const char *dt = "empty";
            int64_t n = 0;
            if (fe->kind_case == TENSORFLOW__FEATURE__KIND_INT64_LIST) {
                dt = "int64";
                n = fe->int64_list ? (int64_t)fe->int64_list->n_value : 0;
            } else if (fe->kind_case == TENSORFLOW__FEATURE__KIND_FLOAT_LIST) {
                dt = "float32";
                n = fe->float_list ? (int64_t)fe->float_list->n_value : 0;
            } else if (fe->kind_case == TENSORFLOW__FEATURE__KIND_BYTES_LIST) {
                dt = "bytes";
                n = fe->bytes_list ? (int64_t)fe->bytes_list->n_value : 0;
                const char *kind = n == 1 ? dt__data_image_kind(fe->bytes_list->value[0].data,
                                                                fe->bytes_list->value[0].len)
                                          : NULL;
                if (kind) {
                    dt = kind[0] == 'J' ? "bytes(jpeg)" : "bytes(png)";
                    if (nprobes == cap) {
                        size_t nc = cap ? 2 * cap : 256;
                        dt__img_probe *np = realloc(probes, nc * sizeof *np);
                        if (!np) {
                            st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
                            break;
                        }
                        probes = np;
                        cap = nc;
                    }
                    char what[600];
                    snprintf(what, sizeof what, "%s: record %llu: %s", path,
                             (unsigned long long)rec, e->key);
                    dt__inspect_probe(fe->bytes_list->value[0].data, fe->bytes_list->value[0].len,
                                      what, &probes[nprobes++]);
                }
            }
            dt_data_feature_info *f;
            st = info_feature(info, e->key, path, &f, err);
            if (st != DT_OK)
                break;
            if (!f->dtype[0]) {
                snprintf(f->dtype, sizeof f->dtype, "%s", dt);
                f->rank = 1;
                f->shape[0] = n;
            } else {
                if (strcmp(f->dtype, dt) != 0)
                    snprintf(f->dtype, sizeof f->dtype, "mixed");
                if (f->rank == 1 && f->shape[0] != n)
                    f->rank = -1; /* varies: a VarLenFeature */
            }
            if (strcmp(e->key, lname) == 0 &&
                fe->kind_case == TENSORFLOW__FEATURE__KIND_INT64_LIST && n == 1) {
                snprintf(info->label_name, sizeof info->label_name, "%s", lname);
                st = hist_add(info, fe->int64_list->value[0], path, err);
            }
        }
        tensorflow__example__free_unpacked(ex, NULL);
        if (st != DT_OK)
            break;
        info->records++;
    }
    dt_tfrecord_close(r);
    if (st == DT_OK)
        st = dt__inspect_images_sum(probes, nprobes, &info->images, err);
    for (size_t i = 0; i < nprobes; i++)
        free(probes[i].reason);
    free(probes);
    return st;
}

static dt_status inspect_csv(const char *path, const char *label, dt_data_file_info *info,
                             dt_err *err)
{
    char *text = NULL;
    size_t len = 0, pos = 0;
    uint64_t line = 1;
    dt__csv_row row = {0};
    dt_buf_init(&row.text, DT_MAX_CSV_LINE);
    bool *numeric = NULL, *integral = NULL;
    dt_status st;
    DT_TRY_GOTO(dt_file_read_regular(path, DT_MAX_DATA_FILE, &text, &len, err), st, out);
    snprintf(info->format, sizeof info->format, "csv");
    if (memchr(text, '\0', len)) {
        st =
            dt_err_set(err, DT_EINVAL,
                       "%s: not a data file this tool knows (not IDX, TFRecord or CSV text)", path);
        goto out;
    }
    st = dt__csv_next_row(text, len, &pos, &line, path, &row, err);
    if (st == DT_ENOENT) {
        st = dt_err_set(err, DT_EINVAL, "%s: empty file", path);
        goto out;
    }
    if (st != DT_OK)
        goto out;
    size_t ncols = row.n;
    /* A header is a first row with a field that is not a number (as pandas guesses). */
    bool header = false;
    for (size_t i = 0; i < ncols; i++) {
        double v;
        header = header || !dt__csv_parse_num(dt__csv_field(&row, i), &v);
    }
    numeric = calloc(ncols, sizeof(bool));
    integral = calloc(ncols, sizeof(bool));
    if (!numeric || !integral) {
        st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < ncols; i++) {
        char name[32];
        snprintf(name, sizeof name, "column_%zu", i);
        dt_data_feature_info *f;
        DT_TRY_GOTO(info_feature(info, header ? dt__csv_field(&row, i) : name, path, &f, err), st,
                    out);
        if (info->nfeatures != i + 1) {
            st = dt_err_set(err, DT_EINVAL, "%s:1: column %zu repeats the name \"%s\"", path, i,
                            f->name);
            goto out;
        }
        f->rank = 0;
        numeric[i] = integral[i] = true;
    }
    int lcol = -1;
    const char *lname = label && label[0] ? label : "label";
    for (size_t i = 0; i < ncols; i++)
        if (strcmp(info->features[i].name, lname) == 0)
            lcol = (int)i;
    if (!header)
        pos = 0, line = 1;
    int64_t *labels = NULL;
    size_t nl = 0, capl = 0;
    for (;;) {
        st = dt__csv_next_row(text, len, &pos, &line, path, &row, err);
        if (st == DT_ENOENT) {
            st = DT_OK;
            break;
        }
        if (st != DT_OK)
            break;
        if (row.n != ncols) {
            st = dt_err_set(err, DT_EINVAL, "%s:%llu: %zu columns where the first row has %zu",
                            path, (unsigned long long)row.line, row.n, ncols);
            break;
        }
        for (size_t i = 0; i < ncols; i++) {
            double v;
            bool num = dt__csv_parse_num(dt__csv_field(&row, i), &v);
            numeric[i] = numeric[i] && num;
            /* (int64_t)v is undefined outside int64's range [-2^63, 2^63) */
            integral[i] =
                integral[i] && num && v >= -0x1p63 && v < 0x1p63 && v == (double)(int64_t)v;
            if ((int)i == lcol && num && integral[i]) {
                if (nl == capl) {
                    capl = capl ? 2 * capl : 1024;
                    int64_t *p = realloc(labels, capl * sizeof *p);
                    if (!p) {
                        st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
                        break;
                    }
                    labels = p;
                }
                labels[nl++] = (int64_t)v;
            }
        }
        if (st != DT_OK)
            break;
        info->records++;
    }
    for (size_t i = 0; i < ncols; i++)
        snprintf(info->features[i].dtype, sizeof info->features[i].dtype, "%s",
                 !numeric[i] || !info->records ? "string"
                 : integral[i]                 ? "int64"
                                               : "float32");
    if (st == DT_OK && lcol >= 0 && integral[lcol] && numeric[lcol]) {
        snprintf(info->label_name, sizeof info->label_name, "%s", lname);
        for (size_t i = 0; i < nl && st == DT_OK; i++)
            st = hist_add(info, labels[i], path, err);
    }
    free(labels);
out:
    free(numeric);
    free(integral);
    free(text);
    dt__csv_row_destroy(&row);
    return st;
}

dt_status dt_data_inspect(const char *path, const char *label, dt_data_file_info *out, dt_err *err)
{
    return dt_data_inspect_threads(path, label, 0, out, err);
}

dt_status dt_data_inspect_threads(const char *path, const char *label, int threads,
                                  dt_data_file_info *out, dt_err *err)
{
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        dt_status st = dt__inspect_folder(path, threads, out, err);
        if (st != DT_OK)
            dt_data_file_info_destroy(out);
        return st;
    }
    int fd;
    DT_TRY(dt_file_open_regular(path, &fd, NULL, err));
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return dt_err_set(err, DT_ENOMEM, "%s: cannot open: out of memory", path);
    }
    uint8_t head[12];
    int n = gzread(f, head, sizeof head);
    bool gz = !gzdirect(f);
    gzclose(f);
    if (n < 0)
        return dt_err_set(err, DT_EIO, "%s: at byte 0: corrupt gzip stream", path);
    dt_status st;
    if (n >= 4 && head[0] == 0 && head[1] == 0 && head[3] >= 1 && head[3] <= DT_MAX_IDX_DIMS &&
        (head[2] == 0x08 || head[2] == 0x09 || (head[2] >= 0x0B && head[2] <= 0x0E)))
        st = inspect_idx(path, out, err);
    else if (n == 12 && dt_crc32c_mask(dt_crc32c(0, head, 8)) ==
                            ((uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 |
                             (uint32_t)head[11] << 24))
        st = inspect_tfrecord(path, gz, label, out, err);
    else if (gz)
        st = dt_err_set(err, DT_EINVAL,
                        "%s: a gzip'd file that holds neither IDX nor TFRecord data (gzip'd CSV "
                        "is not supported: gunzip it)",
                        path);
    else
        st = inspect_csv(path, label, out, err);
    if (st != DT_OK)
        dt_data_file_info_destroy(out);
    return st;
}

void dt_data_file_info_destroy(dt_data_file_info *info)
{
    free(info->features);
    free(info->label_hist);
    free(info->images);
    for (size_t k = 0; info->class_names && k < info->nclasses; k++)
        free(info->class_names[k]);
    free(info->class_names);
    memset(info, 0, sizeof *info);
}
