/* spec.c - the job spec's "data" section -> dt_data_spec. Every error names its JSON path.
 * Unknown keys are errors too: a misspelt "sufle" must not silently train unshuffled. */
#include "data/data_internal.h"

#include <cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Joins base_dir and a relative path (absolute paths and a NULL base stay as they are). */
static bool has_glob(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

static dt_status check_keys(const cJSON *obj, const char *path, const char *const *allowed,
                            dt_err *err)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            ok = ok || strcmp(it->string, *a) == 0;
        if (!ok)
            return dt_err_set(err, DT_EINVAL, "%s.%s: unknown key", path, it->string);
    }
    return DT_OK;
}

static dt_status get_number(const cJSON *obj, const char *key, const char *path, bool positive,
                            float *out, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return DT_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || (positive && v->valuedouble <= 0))
        return dt_err_set(err, DT_EINVAL, "%s.%s: expected a %snumber", path, key,
                          positive ? "positive " : "");
    *out = (float)v->valuedouble;
    return DT_OK;
}

static dt_status get_bool(const cJSON *obj, const char *key, const char *path, bool *out,
                          dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return DT_OK;
    if (!cJSON_IsBool(v))
        return dt_err_set(err, DT_EINVAL, "%s.%s: expected true or false", path, key);
    *out = cJSON_IsTrue(v);
    return DT_OK;
}

/* The decoding options image folders and TFRecord image features share. */
static dt_status parse_image_opts(const cJSON *obj, const char *path, dt_image_opts *o, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "interpolation");
    if (v && (!cJSON_IsString(v) || dt_interp_parse(v->valuestring, &o->interpolation) != DT_OK))
        return dt_err_set(err, DT_EINVAL,
                          "%s.interpolation: expected \"bilinear\", \"nearest\", \"area\" or "
                          "\"bicubic\"",
                          path);
    DT_TRY(get_bool(obj, "crop_to_aspect_ratio", path, &o->crop_to_aspect_ratio, err));
    DT_TRY(get_bool(obj, "dct_scaling", path, &o->dct_scaling, err));
    v = cJSON_GetObjectItemCaseSensitive(obj, "on_error");
    if (v) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "fail") == 0)
            o->on_error = DT_ON_ERROR_FAIL;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "skip") == 0)
            o->on_error = DT_ON_ERROR_SKIP;
        else
            return dt_err_set(err, DT_EINVAL, "%s.on_error: expected \"fail\" or \"skip\"", path);
    }
    v = cJSON_GetObjectItemCaseSensitive(obj, "dct_method");
    if (v) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "INTEGER_ACCURATE") == 0)
            o->dct_fast = false;
        else if (cJSON_IsString(v) && strcmp(v->valuestring, "INTEGER_FAST") == 0)
            o->dct_fast = true;
        else
            return dt_err_set(err, DT_EINVAL,
                              "%s.dct_method: expected \"INTEGER_ACCURATE\" or \"INTEGER_FAST\"",
                              path);
    }
    return DT_OK;
}

static dt_status parse_shape(const cJSON *v, const char *path, int *rank, int64_t *shape,
                             dt_err *err)
{
    if (!cJSON_IsArray(v))
        return dt_err_set(err, DT_EINVAL, "%s: expected an array of positive integers", path);
    int n = cJSON_GetArraySize(v);
    if (n > DT_MAX_IDX_DIMS)
        return dt_err_set(err, DT_ETOOBIG, "%s: rank %d is over the limit of %d", path, n,
                          DT_MAX_IDX_DIMS);
    uint64_t prod = 1;
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > (1 << 30) ||
            d->valuedouble != floor(d->valuedouble))
            return dt_err_set(err, DT_EINVAL, "%s[%d]: expected a positive integer", path, i);
        shape[i] = (int64_t)d->valuedouble;
        prod *= (uint64_t)shape[i];
        if (prod > (1u << 30))
            return dt_err_set(err, DT_ETOOBIG, "%s: more than 2^30 values per example", path);
    }
    *rank = n;
    return DT_OK;
}

static dt_status push_file(dt_data_source *src, char *f, const char *path, dt_err *err)
{
    if (!f)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    if (src->nfiles >= DT_MAX_DATA_FILES) {
        free(f);
        return dt_err_set(err, DT_ETOOBIG, "%s: more than %d files", path, DT_MAX_DATA_FILES);
    }
    char **v = realloc(src->files, (src->nfiles + 1) * sizeof(char *));
    if (!v) {
        free(f);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    }
    src->files = v;
    src->files[src->nfiles++] = f;
    return DT_OK;
}

/* "files": "a.tfrecord" | ["a-*.tfrecord", "b.tfrecord"]; globs expand in sorted order. */
static dt_status parse_files(const cJSON *obj, const char *path, const char *base,
                             dt_data_source *src, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "files");
    if (!v)
        return dt_err_set(err, DT_EINVAL, "%s.files: missing (a path, a glob, or a list of them)",
                          path);
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    if (!cJSON_IsArray(v) && !cJSON_IsString(v))
        return dt_err_set(err, DT_EINVAL, "%s.files: expected a string or an array of strings",
                          path);
    if (n == 0)
        return dt_err_set(err, DT_EINVAL, "%s.files: the list is empty", path);
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, i) : v;
        char ipath[512];
        if (cJSON_IsArray(v))
            snprintf(ipath, sizeof ipath, "%s.files[%d]", path, i);
        else
            snprintf(ipath, sizeof ipath, "%s.files", path);
        if (!cJSON_IsString(it) || !it->valuestring[0])
            return dt_err_set(err, DT_EINVAL, "%s: expected a non-empty string", ipath);
        char *full = dt_path_join(base, it->valuestring);
        if (!full)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", ipath);
        if (!has_glob(full)) {
            DT_TRY(push_file(src, full, ipath, err));
            continue;
        }
        glob_t g;
        int rc = glob(full, 0, NULL, &g);
        if (rc != 0) {
            dt_status st = dt_err_set(err, DT_ENOENT, "%s: \"%s\" matches no file", ipath, full);
            free(full);
            if (rc != GLOB_NOMATCH)
                globfree(&g);
            return st;
        }
        free(full);
        for (size_t k = 0; k < g.gl_pathc; k++) {
            dt_status st = push_file(src, strdup(g.gl_pathv[k]), ipath, err);
            if (st != DT_OK) {
                globfree(&g);
                return st;
            }
        }
        globfree(&g);
    }
    return DT_OK;
}

static dt_status parse_idx(const cJSON *obj, const char *path, const char *base,
                           dt_data_source *src, dt_err *err)
{
    static const char *const keys[] = {"format", "images", "labels", "scale", "image_shape", NULL};
    DT_TRY(check_keys(obj, path, keys, err));
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(obj, "images");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(obj, "labels");
    if (!cJSON_IsString(im) || !im->valuestring[0])
        return dt_err_set(err, DT_EINVAL, "%s.images: expected the path of an IDX file", path);
    if (lb && (!cJSON_IsString(lb) || !lb->valuestring[0]))
        return dt_err_set(err, DT_EINVAL, "%s.labels: expected the path of an IDX file", path);
    src->images = dt_path_join(base, im->valuestring);
    src->labels = lb ? dt_path_join(base, lb->valuestring) : NULL;
    if (!src->images || (lb && !src->labels))
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    DT_TRY(get_number(obj, "scale", path, false, &src->scale, err));
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(obj, "image_shape");
    if (sh) {
        char p2[512];
        snprintf(p2, sizeof p2, "%s.image_shape", path);
        DT_TRY(parse_shape(sh, p2, &src->image_rank, src->image_shape, err));
        if (src->image_rank == 0)
            return dt_err_set(err, DT_EINVAL, "%s: must not be empty", p2);
    }
    return DT_OK;
}

/* A list of CSV columns, each a name (with a header) or a 0-based index: "feature_columns", or
 * "label_column" given as a list. */
static dt_status parse_columns(const cJSON *arr, const char *path, const char *key, bool header,
                               char ***names, int **index, size_t *count, dt_err *err)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0 ||
        cJSON_GetArraySize(arr) > DT_MAX_DATA_FEATURES)
        return dt_err_set(err, DT_EINVAL, "%s.%s: expected an array of 1..%d names or indices",
                          path, key, DT_MAX_DATA_FEATURES);
    size_t n = (size_t)cJSON_GetArraySize(arr);
    *names = calloc(n, sizeof(char *));
    *index = calloc(n, sizeof(int));
    if (!*names || !*index)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    *count = n;
    for (size_t i = 0; i < n; i++) {
        const cJSON *it = cJSON_GetArrayItem(arr, (int)i);
        (*index)[i] = -1;
        if (cJSON_IsString(it) && it->valuestring[0] && header) {
            if (!((*names)[i] = strdup(it->valuestring)))
                return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        } else if (cJSON_IsNumber(it) && it->valuedouble >= 0 &&
                   it->valuedouble < DT_MAX_CSV_COLUMNS &&
                   it->valuedouble == floor(it->valuedouble)) {
            (*index)[i] = (int)it->valuedouble;
        } else {
            return dt_err_set(err, DT_EINVAL,
                              "%s.%s[%zu]: expected a column name (with a header) or a 0-based "
                              "index",
                              path, key, i);
        }
    }
    return DT_OK;
}

static dt_status parse_csv(const cJSON *obj, const char *path, const char *base,
                           dt_data_source *src, dt_err *err)
{
    static const char *const keys[] = {"format", "files",           "header", "label_column",
                                       "scale",  "feature_columns", "shape",  NULL};
    DT_TRY(check_keys(obj, path, keys, err));
    DT_TRY(parse_files(obj, path, base, src, err));
    src->header = true;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "header");
    if (h && !cJSON_IsBool(h))
        return dt_err_set(err, DT_EINVAL, "%s.header: expected true or false", path);
    if (h)
        src->header = cJSON_IsTrue(h);
    DT_TRY(get_number(obj, "scale", path, false, &src->scale, err));
    src->label_index = -1;
    const cJSON *lc = cJSON_GetObjectItemCaseSensitive(obj, "label_column");
    if (cJSON_IsString(lc) && lc->valuestring[0] &&
        strlen(lc->valuestring) < sizeof src->label_column) {
        if (!src->header)
            return dt_err_set(err, DT_EINVAL,
                              "%s.label_column: a column name needs \"header\": true; give its "
                              "index instead",
                              path);
        strcpy(src->label_column, lc->valuestring);
    } else if (cJSON_IsNumber(lc) && lc->valuedouble >= 0 && lc->valuedouble < DT_MAX_CSV_COLUMNS &&
               lc->valuedouble == floor(lc->valuedouble)) {
        src->label_index = (int)lc->valuedouble;
    } else if (lc && !cJSON_IsNull(lc) && !cJSON_IsArray(lc)) {
        return dt_err_set(err, DT_EINVAL,
                          "%s.label_column: expected a column name, a 0-based index or a list of "
                          "them",
                          path);
    }
    if (cJSON_IsArray(lc))
        DT_TRY(parse_columns(lc, path, "label_column", src->header, &src->label_columns,
                             &src->label_column_index, &src->nlabel_columns, err));
    const cJSON *fc = cJSON_GetObjectItemCaseSensitive(obj, "feature_columns");
    if (fc)
        DT_TRY(parse_columns(fc, path, "feature_columns", src->header, &src->feature_columns,
                             &src->feature_column_index, &src->nfeature_columns, err));
    /* "shape": the row's features reshaped, row-major ([20, 3]: 20 timesteps of 3 channels). */
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(obj, "shape");
    if (sh) {
        char p2[512];
        snprintf(p2, sizeof p2, "%s.shape", path);
        DT_TRY(parse_shape(sh, p2, &src->image_rank, src->image_shape, err));
        if (src->image_rank == 0)
            return dt_err_set(err, DT_EINVAL, "%s: must not be empty", p2);
    }
    return DT_OK;
}

static dt_status parse_tfrecord(const cJSON *obj, const char *path, const char *base,
                                dt_data_source *src, dt_err *err)
{
    static const char *const keys[] = {
        "format",     "files",         "compression", "features",
        "label",      "interpolation", "on_error",    "crop_to_aspect_ratio",
        "dct_method", "dct_scaling",   NULL};
    DT_TRY(check_keys(obj, path, keys, err));
    DT_TRY(parse_files(obj, path, base, src, err));
    /* JPEG / PNG bytes features: size and channels come from each feature's shape */
    src->image = dt_image_opts_default();
    src->image.height = src->image.width = src->image.channels = 0;
    DT_TRY(parse_image_opts(obj, path, &src->image, err));
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, "compression");
    if (c) {
        if (!cJSON_IsString(c) || (strcasecmp(c->valuestring, "GZIP") != 0 &&
                                   strcasecmp(c->valuestring, "NONE") != 0 && c->valuestring[0]))
            return dt_err_set(err, DT_EINVAL,
                              "%s.compression: expected \"GZIP\" or \"\" (ZLIB is not supported)",
                              path);
        src->gzip = strcasecmp(c->valuestring, "GZIP") == 0;
    }
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(obj, "label");
    if (lb) {
        if (!cJSON_IsString(lb) || !lb->valuestring[0] ||
            strlen(lb->valuestring) >= sizeof src->label)
            return dt_err_set(err, DT_EINVAL, "%s.label: expected a feature name", path);
        strcpy(src->label, lb->valuestring);
    }
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(obj, "features");
    if (!cJSON_IsObject(fs) || !fs->child)
        return dt_err_set(err, DT_EINVAL,
                          "%s.features: expected an object {NAME: {\"dtype\", \"shape\"}}", path);
    size_t n = (size_t)cJSON_GetArraySize(fs);
    if (n > DT_MAX_DATA_FEATURES)
        return dt_err_set(err, DT_ETOOBIG, "%s.features: more than %d", path, DT_MAX_DATA_FEATURES);
    src->features = calloc(n, sizeof *src->features);
    if (!src->features)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    for (const cJSON *it = fs->child; it; it = it->next) {
        char fp[512];
        snprintf(fp, sizeof fp, "%s.features.%s", path, it->string);
        dt_data_feature *f = &src->features[src->nfeatures++];
        if (strlen(it->string) >= sizeof f->name || !it->string[0])
            return dt_err_set(err, DT_EINVAL, "%s: name empty or longer than %zu", fp,
                              sizeof f->name - 1);
        strcpy(f->name, it->string);
        if (!cJSON_IsObject(it))
            return dt_err_set(err, DT_EINVAL, "%s: expected {\"dtype\", \"shape\", \"scale\"}", fp);
        static const char *const fkeys[] = {"dtype", "shape", "scale", NULL};
        DT_TRY(check_keys(it, fp, fkeys, err));
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        const char *d = cJSON_IsString(dt) ? dt->valuestring : "";
        if (strcmp(d, "float32") == 0 || strcmp(d, "float") == 0)
            f->dtype = DT_DATA_DTYPE_FLOAT32;
        else if (strcmp(d, "int64") == 0)
            f->dtype = DT_DATA_DTYPE_INT64;
        else if (strcmp(d, "uint8") == 0 || strcmp(d, "bytes") == 0)
            f->dtype = DT_DATA_DTYPE_UINT8;
        else
            return dt_err_set(err, DT_EINVAL,
                              "%s.dtype: expected \"float32\", \"int64\" or \"uint8\" (raw bytes)",
                              fp);
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        if (sh) {
            char sp[600];
            snprintf(sp, sizeof sp, "%s.shape", fp);
            DT_TRY(parse_shape(sh, sp, &f->rank, f->shape, err));
        }
        f->scale = 1.0f;
        DT_TRY(get_number(it, "scale", fp, false, &f->scale, err));
    }
    if (src->label[0]) {
        bool found = false;
        for (size_t i = 0; i < src->nfeatures; i++)
            found = found || strcmp(src->features[i].name, src->label) == 0;
        if (!found)
            return dt_err_set(err, DT_EINVAL,
                              "%s.label: \"%s\" is not one of %s.features; declare its dtype "
                              "and shape there",
                              path, src->label, path);
        if (src->nfeatures < 2)
            return dt_err_set(err, DT_EINVAL, "%s.features: no feature besides the label", path);
    }
    return DT_OK;
}

/* Keras's image_dataset_from_directory arguments; the folder is indexed here, as globs are
 * expanded, so that the file list (and FILE sharding) is known at submit time. */
static dt_status parse_image_folder(const cJSON *obj, const char *path, const char *base,
                                    dt_data_source *src, dt_err *err)
{
    static const char *const keys[] = {"format",
                                       "directory",
                                       "image_size",
                                       "labels",
                                       "label_mode",
                                       "class_names",
                                       "color_mode",
                                       "validation_split",
                                       "subset",
                                       "seed",
                                       "shuffle",
                                       "interpolation",
                                       "crop_to_aspect_ratio",
                                       "on_error",
                                       "scale",
                                       "dct_method",
                                       "dct_scaling",
                                       NULL};
    DT_TRY(check_keys(obj, path, keys, err));
    src->image = dt_image_opts_default();
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(obj, "directory");
    if (!cJSON_IsString(d) || !d->valuestring[0])
        return dt_err_set(err, DT_EINVAL, "%s.directory: expected the path of a folder", path);
    if (!(src->directory = dt_path_join(base, d->valuestring)))
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(obj, "image_size");
    if (sz) {
        const cJSON *h = cJSON_GetArrayItem(sz, 0), *w = cJSON_GetArrayItem(sz, 1);
        if (!cJSON_IsArray(sz) || cJSON_GetArraySize(sz) != 2 || !cJSON_IsNumber(h) ||
            !cJSON_IsNumber(w) || h->valuedouble < 1 || w->valuedouble < 1 ||
            h->valuedouble > DT_MAX_IMAGE_DIM || w->valuedouble > DT_MAX_IMAGE_DIM ||
            h->valuedouble != floor(h->valuedouble) || w->valuedouble != floor(w->valuedouble))
            return dt_err_set(err, DT_EINVAL,
                              "%s.image_size: expected [height, width], integers 1..%d", path,
                              DT_MAX_IMAGE_DIM);
        src->image.height = (int)h->valuedouble;
        src->image.width = (int)w->valuedouble;
    }
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(obj, "color_mode");
    if (cm) {
        const char *c = cJSON_IsString(cm) ? cm->valuestring : "";
        src->image.channels = strcmp(c, "grayscale") == 0 ? 1
                              : strcmp(c, "rgb") == 0     ? 3
                              : strcmp(c, "rgba") == 0    ? 4
                                                          : 0;
        if (!src->image.channels)
            return dt_err_set(err, DT_EINVAL,
                              "%s.color_mode: expected \"grayscale\", \"rgb\" or \"rgba\"", path);
    }
    DT_TRY(parse_image_opts(obj, path, &src->image, err));
    DT_TRY(get_number(obj, "scale", path, false, &src->scale, err));
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(obj, "labels");
    if (lb && cJSON_IsNull(lb))
        src->label_mode = DT_LABEL_MODE_NONE;
    else if (lb && !(cJSON_IsString(lb) && strcmp(lb->valuestring, "inferred") == 0))
        return dt_err_set(err, DT_EINVAL,
                          "%s.labels: expected \"inferred\" (one subfolder per class) or null "
                          "(explicit label lists are not supported)",
                          path);
    const cJSON *lm = cJSON_GetObjectItemCaseSensitive(obj, "label_mode");
    if (lm && src->label_mode != DT_LABEL_MODE_NONE) {
        const char *m = cJSON_IsString(lm) ? lm->valuestring : "";
        if (cJSON_IsNull(lm))
            src->label_mode = DT_LABEL_MODE_NONE;
        else if (strcmp(m, "int") == 0)
            src->label_mode = DT_LABEL_MODE_INT;
        else if (strcmp(m, "categorical") == 0)
            src->label_mode = DT_LABEL_MODE_CATEGORICAL;
        else if (strcmp(m, "binary") == 0)
            src->label_mode = DT_LABEL_MODE_BINARY;
        else
            return dt_err_set(err, DT_EINVAL,
                              "%s.label_mode: expected \"int\", \"categorical\", \"binary\" or "
                              "null",
                              path);
    }
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(obj, "class_names");
    if (cn) {
        if (src->label_mode == DT_LABEL_MODE_NONE)
            return dt_err_set(err, DT_EINVAL, "%s.class_names: only with \"labels\": \"inferred\"",
                              path);
        int n = cJSON_IsArray(cn) ? cJSON_GetArraySize(cn) : -1;
        if (n < 1 || n > DT_MAX_CLASSES)
            return dt_err_set(err, DT_EINVAL, "%s.class_names: expected 1..%d folder names", path,
                              DT_MAX_CLASSES);
        src->class_names = calloc((size_t)n, sizeof(char *));
        if (!src->class_names)
            return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        for (int i = 0; i < n; i++) {
            const cJSON *it = cJSON_GetArrayItem(cn, i);
            if (!cJSON_IsString(it) || !it->valuestring[0] || strchr(it->valuestring, '/'))
                return dt_err_set(err, DT_EINVAL, "%s.class_names[%d]: expected a folder name",
                                  path, i);
            for (int k = 0; k < i; k++)
                if (strcmp(src->class_names[k], it->valuestring) == 0)
                    return dt_err_set(err, DT_EINVAL, "%s.class_names[%d]: \"%s\" given twice",
                                      path, i, it->valuestring);
            if (!(src->class_names[i] = strdup(it->valuestring)))
                return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
            src->nclasses = (size_t)i + 1;
        }
    }
    bool shuffle = true, has_seed = false;
    uint64_t seed = 0;
    DT_TRY(get_bool(obj, "shuffle", path, &shuffle, err));
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    if (sd && !cJSON_IsNull(sd)) {
        if (!cJSON_IsNumber(sd) || sd->valuedouble < 0 || sd->valuedouble > 4294967295.0 ||
            sd->valuedouble != floor(sd->valuedouble))
            return dt_err_set(err, DT_EINVAL,
                              "%s.seed: expected an integer 0..2^32-1 (numpy's RandomState seed)",
                              path);
        seed = (uint64_t)sd->valuedouble;
        has_seed = true;
    }
    double split = 0;
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(obj, "validation_split");
    if (vs && !cJSON_IsNull(vs)) {
        if (!cJSON_IsNumber(vs) || !(vs->valuedouble >= 0 && vs->valuedouble < 1))
            return dt_err_set(err, DT_EINVAL,
                              "%s.validation_split: expected a fraction between 0 and 1", path);
        split = vs->valuedouble;
    }
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(obj, "subset");
    const char *subset = NULL;
    if (ss && !cJSON_IsNull(ss)) {
        if (!cJSON_IsString(ss) || (strcmp(ss->valuestring, "training") != 0 &&
                                    strcmp(ss->valuestring, "validation") != 0))
            return dt_err_set(err, DT_EINVAL,
                              "%s.subset: expected \"training\" or \"validation\" (give each "
                              "split its own source)",
                              path);
        subset = ss->valuestring;
    }
    if ((split > 0) != (subset != NULL))
        return dt_err_set(err, DT_EINVAL,
                          "%s: \"subset\" and \"validation_split\" go together (as in Keras)",
                          path);
    if (split > 0 && shuffle && !has_seed)
        return dt_err_set(err, DT_EINVAL,
                          "%s.seed: missing: with \"validation_split\" and shuffling, a seed keeps "
                          "the training and validation files apart (Keras asks for one too)",
                          path);
    return dt_image_folder_index(src, split, subset, shuffle, has_seed, seed, path, err);
}

dt_status dt_data_source_parse(const cJSON *obj, const char *json_path, const char *base_dir,
                               dt_data_source *out, dt_err *err)
{
    memset(out, 0, sizeof *out);
    out->scale = 1.0f;
    out->label_index = -1;
    if (!cJSON_IsObject(obj))
        return dt_err_set(err, DT_EINVAL, "%s: expected an object with \"format\"", json_path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(obj, "format");
    dt_status st;
    if (!cJSON_IsString(fmt))
        return dt_err_set(err, DT_EINVAL,
                          "%s.format: expected \"idx\", \"csv\", \"tfrecord\" or "
                          "\"image_folder\"",
                          json_path);
    if (strcmp(fmt->valuestring, "idx") == 0) {
        out->format = DT_DATA_FORMAT_IDX;
        st = parse_idx(obj, json_path, base_dir, out, err);
    } else if (strcmp(fmt->valuestring, "csv") == 0) {
        out->format = DT_DATA_FORMAT_CSV;
        st = parse_csv(obj, json_path, base_dir, out, err);
    } else if (strcmp(fmt->valuestring, "tfrecord") == 0) {
        out->format = DT_DATA_FORMAT_TFRECORD;
        st = parse_tfrecord(obj, json_path, base_dir, out, err);
    } else if (strcmp(fmt->valuestring, "image_folder") == 0) {
        out->format = DT_DATA_FORMAT_IMAGE_FOLDER;
        st = parse_image_folder(obj, json_path, base_dir, out, err);
    } else {
        st = dt_err_set(err, DT_EINVAL,
                        "%s.format: \"%s\" is not one of \"idx\", \"csv\", \"tfrecord\", "
                        "\"image_folder\"",
                        json_path, fmt->valuestring);
    }
    if (st != DT_OK)
        dt_data_source_destroy(out);
    return st;
}

/* "num_parallel_calls": N (1..DT_MAX_DATA_THREADS) or "AUTOTUNE" (or tf.data.AUTOTUNE's -1),
 * into *out (0 = AUTOTUNE, also when absent: tf.data's usual choice for decoding maps). */
static dt_status parse_parallel_calls(const cJSON *v, const char *path, int *out, dt_err *err)
{
    *out = 0;
    if (!v || (cJSON_IsString(v) && strcmp(v->valuestring, "AUTOTUNE") == 0))
        return DT_OK;
    if (cJSON_IsNumber(v) && v->valuedouble == -1)
        return DT_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > DT_MAX_DATA_THREADS ||
        v->valuedouble != floor(v->valuedouble))
        return dt_err_set(err, DT_EINVAL,
                          "%s.num_parallel_calls: expected a number of threads 1..%d or "
                          "\"AUTOTUNE\" (one per CPU)",
                          path, DT_MAX_DATA_THREADS);
    *out = (int)v->valuedouble;
    return DT_OK;
}

dt_status dt_data_spec_parse(const cJSON *obj, const char *json_path, const char *base_dir,
                             dt_data_spec *out, dt_err *err)
{
    dt_status st = DT_OK;
    char p[512];
    memset(out, 0, sizeof *out);
    if (!json_path)
        json_path = "$.data";
    if (!cJSON_IsObject(obj))
        return dt_err_set(err, DT_EINVAL, "%s: expected an object with \"train\"", json_path);
    static const char *const keys[] = {"train",        "validation",         "shuffle", "seed",
                                       "shard_policy", "num_parallel_calls", NULL};
    DT_TRY(check_keys(obj, json_path, keys, err));
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(obj, "train");
    snprintf(p, sizeof p, "%s.train", json_path);
    if (!tr)
        return dt_err_set(err, DT_EINVAL, "%s: missing", p);
    DT_TRY_GOTO(dt_data_source_parse(tr, p, base_dir, &out->train, err), st, fail);
    const cJSON *va = cJSON_GetObjectItemCaseSensitive(obj, "validation");
    if (va && !cJSON_IsNull(va)) {
        snprintf(p, sizeof p, "%s.validation", json_path);
        DT_TRY_GOTO(dt_data_source_parse(va, p, base_dir, &out->validation, err), st, fail);
        out->has_validation = true;
    }
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(obj, "shuffle");
    if (cJSON_IsBool(sh)) {
        out->shuffle.kind = cJSON_IsTrue(sh) ? DT_SHUFFLE_FULL : DT_SHUFFLE_NONE;
    } else if (cJSON_IsNumber(sh) && sh->valuedouble >= 1 && sh->valuedouble <= 1e12 &&
               sh->valuedouble == floor(sh->valuedouble)) {
        out->shuffle.kind = DT_SHUFFLE_BUFFER;
        out->shuffle.buffer = (size_t)sh->valuedouble;
    } else if (sh) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s.shuffle: expected true, false or a buffer size (a positive integer)",
                        json_path);
        goto fail;
    }
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    if (sd) {
        if (!cJSON_IsNumber(sd) || sd->valuedouble < 0 || sd->valuedouble > 9007199254740992.0 ||
            sd->valuedouble != floor(sd->valuedouble)) {
            st = dt_err_set(err, DT_EINVAL, "%s.seed: expected a non-negative integer", json_path);
            goto fail;
        }
        out->seed = (uint64_t)sd->valuedouble;
    }
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(obj, "shard_policy");
    if (sp) {
        if (!cJSON_IsString(sp) ||
            dt_shard_policy_parse(sp->valuestring, &out->shard_policy, NULL) != DT_OK) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s.shard_policy: expected \"AUTO\", \"FILE\", \"DATA\" or \"OFF\"",
                            json_path);
            goto fail;
        }
    }
    DT_TRY_GOTO(parse_parallel_calls(cJSON_GetObjectItemCaseSensitive(obj, "num_parallel_calls"),
                                     json_path, &out->num_parallel_calls, err),
                st, fail);
    out->train.image.threads = out->num_parallel_calls;
    out->validation.image.threads = out->num_parallel_calls;
    return DT_OK;
fail:
    dt_data_spec_destroy(out);
    return st;
}

void dt_data_source_destroy(dt_data_source *src)
{
    for (size_t i = 0; i < src->nfiles; i++)
        free(src->files[i]);
    free(src->files);
    free(src->images);
    free(src->labels);
    for (size_t i = 0; src->feature_columns && i < src->nfeature_columns; i++)
        free(src->feature_columns[i]);
    free(src->feature_columns);
    free(src->feature_column_index);
    for (size_t i = 0; src->label_columns && i < src->nlabel_columns; i++)
        free(src->label_columns[i]);
    free(src->label_columns);
    free(src->label_column_index);
    free(src->features);
    free(src->directory);
    free(src->file_labels);
    for (size_t i = 0; src->class_names && i < src->nclasses; i++)
        free(src->class_names[i]);
    free(src->class_names);
    memset(src, 0, sizeof *src);
    src->label_index = -1;
}

void dt_data_spec_destroy(dt_data_spec *spec)
{
    dt_data_source_destroy(&spec->train);
    dt_data_source_destroy(&spec->validation);
    memset(spec, 0, sizeof *spec);
}
