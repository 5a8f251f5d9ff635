/* tfrecord.c - TFRecord framing (uncompressed or one GZIP stream) and tf.train.Example decoding
 * into a dataset.
 *
 * A record is: uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes, length
 * bytes of data, uint32 masked CRC-32C of the data. Both CRCs are verified and the length is
 * checked against DT_MAX_TFRECORD before anything is allocated. */
#include "data/data_internal.h"
#include "core/buf.h"
#include "core/crc32c.h"
#include "core/log.h"

#include "example.pb-c.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

struct dt_tfrecord_reader {
    gzFile f;
    char *path;
    uint64_t index;  /* records read */
    uint64_t offset; /* of the next record, in the uncompressed stream */
    uint8_t *buf;
    size_t cap;
};

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void dt_tfrecord_frame(const void *data, size_t len, uint8_t *out)
{
    uint64_t l = len;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(l >> (8 * i));
    put_le32(out + 8, dt_crc32c_mask(dt_crc32c(0, out, 8)));
    memcpy(out + 12, data, len);
    put_le32(out + 12 + len, dt_crc32c_mask(dt_crc32c(0, data, len)));
}

dt_status dt_tfrecord_open(const char *path, bool gzip, dt_tfrecord_reader **out, dt_err *err)
{
    *out = NULL;
    int fd;
    DT_TRY(dt_file_open_regular(path, &fd, NULL, err));
    uint8_t m[2] = {0};
    ssize_t nm = pread(fd, m, 2, 0);
    bool is_gz = nm == 2 && m[0] == 0x1f && m[1] == 0x8b;
    if ((gzip && !is_gz && nm > 0) || (!gzip && is_gz))
        close(fd);
    if (gzip && !is_gz && nm > 0)
        return dt_err_set(err, DT_EINVAL,
                          "%s: \"compression\": \"GZIP\" but the file is not gzip'd (no gzip "
                          "magic at byte 0); set \"compression\": \"\"",
                          path);
    if (!gzip && is_gz)
        return dt_err_set(err, DT_EINVAL,
                          "%s: the file is gzip'd; set \"compression\": \"GZIP\" for it", path);
    dt_tfrecord_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        close(fd);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
    }
    r->f = gzdopen(fd, "rb");
    if (!r->f) {
        close(fd);
        dt_status st = dt_err_set(err, DT_ENOMEM, "%s: cannot open: out of memory", path);
        dt_tfrecord_close(r);
        return st;
    }
    gzbuffer(r->f, 1u << 17);
    *out = r;
    return DT_OK;
}

/* Reads n bytes; *got tells how many arrived before the end. */
static dt_status rd(dt_tfrecord_reader *r, void *dst, size_t n, size_t *got, dt_err *err)
{
    *got = 0;
    while (*got < n) {
        size_t chunk = n - *got > (1u << 30) ? (1u << 30) : n - *got;
        int k = gzread(r->f, (uint8_t *)dst + *got, (unsigned)chunk);
        if (k < 0) {
            int zerr;
            return dt_err_set(err, DT_EIO, "%s: record %llu near byte %llu: corrupt gzip (%s)",
                              r->path, (unsigned long long)r->index,
                              (unsigned long long)(r->offset + *got), gzerror(r->f, &zerr));
        }
        if (k == 0)
            break;
        *got += (size_t)k;
    }
    return DT_OK;
}

dt_status dt_tfrecord_next(dt_tfrecord_reader *r, const uint8_t **data, size_t *len, dt_err *err)
{
    uint8_t hdr[12], foot[4];
    size_t got;
    unsigned long long rec = (unsigned long long)r->index, off = (unsigned long long)r->offset;
    DT_TRY(rd(r, hdr, 12, &got, err));
    if (got == 0)
        return DT_ENOENT; /* a clean end */
    if (got < 12)
        return dt_err_set(err, DT_EIO,
                          "%s: record %llu at byte %llu: truncated header (%zu of 12 bytes); "
                          "the file is incomplete",
                          r->path, rec, off, got);
    uint64_t l = 0;
    for (int i = 7; i >= 0; i--)
        l = l << 8 | hdr[i];
    if (dt_crc32c_mask(dt_crc32c(0, hdr, 8)) != le32(hdr + 8))
        return dt_err_set(err, DT_EPROTO,
                          "%s: record %llu at byte %llu: length CRC mismatch; the file is "
                          "corrupt or not a TFRecord file",
                          r->path, rec, off);
    if (l > DT_MAX_TFRECORD)
        return dt_err_set(err, DT_ETOOBIG,
                          "%s: record %llu at byte %llu: length %llu is over the limit of %u "
                          "bytes (DT_MAX_TFRECORD)",
                          r->path, rec, off, (unsigned long long)l, DT_MAX_TFRECORD);
    if (l + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < l + 1)
            cap *= 2;
        uint8_t *b = realloc(r->buf, cap);
        if (!b)
            return dt_err_set(err, DT_ENOMEM, "%s: record %llu: cannot allocate %llu bytes",
                              r->path, rec, (unsigned long long)l);
        r->buf = b;
        r->cap = cap;
    }
    r->offset += 12;
    DT_TRY(rd(r, r->buf, (size_t)l, &got, err));
    if (got < l)
        return dt_err_set(err, DT_EIO,
                          "%s: record %llu at byte %llu: truncated data (%zu of %llu bytes)",
                          r->path, rec, off, got, (unsigned long long)l);
    r->offset += l;
    DT_TRY(rd(r, foot, 4, &got, err));
    if (got < 4)
        return dt_err_set(err, DT_EIO, "%s: record %llu at byte %llu: truncated data CRC", r->path,
                          rec, off);
    if (dt_crc32c_mask(dt_crc32c(0, r->buf, (size_t)l)) != le32(foot))
        return dt_err_set(err, DT_EPROTO,
                          "%s: record %llu at byte %llu: data CRC mismatch; "
                          "the record is corrupt",
                          r->path, rec, off);
    r->offset += 4;
    r->index++;
    *data = r->buf;
    *len = (size_t)l;
    return DT_OK;
}

uint64_t dt_tfrecord_index(const dt_tfrecord_reader *r)
{
    return r->index;
}

uint64_t dt_tfrecord_offset(const dt_tfrecord_reader *r)
{
    return r->offset;
}

void dt_tfrecord_close(dt_tfrecord_reader *r)
{
    if (!r)
        return;
    if (r->f)
        gzclose(r->f);
    free(r->buf);
    free(r->path);
    free(r);
}

/* ------------------------------------------------------------- tf.train.Example -> dataset -- */

static const char *kind_name(Tensorflow__Feature__KindCase k)
{
    switch (k) {
    case TENSORFLOW__FEATURE__KIND_BYTES_LIST:
        return "bytes_list";
    case TENSORFLOW__FEATURE__KIND_FLOAT_LIST:
        return "float_list";
    case TENSORFLOW__FEATURE__KIND_INT64_LIST:
        return "int64_list";
    default:
        return "empty";
    }
}

static const Tensorflow__Feature *find_feature(const Tensorflow__Example *ex, const char *name)
{
    if (!ex->features)
        return NULL;
    for (size_t i = 0; i < ex->features->n_feature; i++) {
        const Tensorflow__Features__FeatureEntry *e = ex->features->feature[i];
        if (e && e->key && strcmp(e->key, name) == 0)
            return e->value;
    }
    return NULL;
}

typedef struct load_state {
    const dt_data_source *src;
    dt_data_feature *feat; /* (nfeatures) copies, shapes filled in from the first record */
    size_t *per_record;    /* (nfeatures) values per record */
    dt__fvec x, y;
    int32_t *yi;
    size_t nyi, cap_yi;
    bool label_int;
    bool *img_fixed;   /* (nfeatures) an image feature whose shape came from the first record:
                          every image must have it (nothing to resize to was declared) */
    bool image_failed; /* the last error was an image that did not decode (on_error applies) */
    /* Images decoded ahead on a pool of threads (pre.c): slot (record j of the chunk, feature
     * fi) holds the values decode_image_feature would compute, or its error. */
    struct predecode *pre;
    size_t pre_j; /* the chunk's record being loaded */
    float *lv;    /* the record's label values */
    size_t lv_cap;
    /* A FILE shard (dt_tfrecord_load_shard): every record is read, so the record counts,
     * labels and errors other than images are every worker's, but only the records of this
     * worker's files (plan) have their images decoded and a row (x_row). */
    dt_shard_plan plan;
    bool partial;
    bool index_only; /* no record's images decoded (a job's checks at submit) */
    bool hold;       /* the record being loaded is this worker's: its images are decoded */
    size_t *x_row;   /* (n) when partial */
    size_t n_row, cap_row;
    size_t rows; /* rows of x */
} load_state;

/* A chunk of records whose resized image features are decoded in parallel before the records
 * are loaded in order (what a record does with its images - rows, errors, skips - does not
 * change; only where the decoding runs). */
typedef struct predecode {
    size_t cap, n;            /* records the chunk holds, has */
    size_t nf;                /* features */
    Tensorflow__Example **ex; /* (cap) unpacked records, in order */
    size_t *fidx;             /* (cap) their files */
    char (*where)[1200];      /* (cap) "file: record R at byte B" */
    float **buf;              /* (cap * nf) decoded values of eligible features, else NULL */
    int *state;               /* (cap * nf) 0 not decoded ahead, 1 decoded, 2 failed (err) */
    dt_err *err;              /* (cap * nf) */
    int threads;
} predecode;

/* JPEG / PNG bytes into dst (h * w * c floats of the feature's shape [h, w, c] or [h, w]):
 * decoded, resized to the shape unless it came from the first record, times scale. */
static dt_status decode_image_feature(load_state *ls, size_t fi, const ProtobufCBinaryData *b,
                                      const char *where, float *dst, dt_err *err)
{
    const dt_data_feature *f = &ls->feat[fi];
    char what[1400];
    snprintf(what, sizeof what, "%s: feature \"%s\"", where, f->name);
    if (f->rank != 2 && f->rank != 3)
        return dt_err_set(err, DT_EINVAL,
                          "%s: encoded image bytes need a \"shape\" of [height, width, channels] "
                          "(or none, to take the first image's)",
                          what);
    dt_image_opts o = ls->src->image;
    o.height = (int)f->shape[0];
    o.width = (int)f->shape[1];
    o.channels = f->rank == 3 ? (int)f->shape[2] : 1;
    if (o.channels != 1 && o.channels != 3 && o.channels != 4)
        return dt_err_set(err, DT_EINVAL, "%s: %d channels: an image has 1, 3 or 4", what,
                          o.channels);
    if (!ls->hold) /* another worker's file: no row, so nothing to decode */
        return DT_OK;
    ls->image_failed = true;
    size_t slot = ls->pre ? ls->pre_j * ls->pre->nf + fi : 0;
    if (ls->pre && ls->pre->state[slot] == 2) {
        *err = ls->pre->err[slot];
        return err->code ? err->code : DT_EINVAL;
    }
    if (ls->pre && ls->pre->state[slot] == 1) {
        memcpy(dst, ls->pre->buf[slot], ls->per_record[fi] * sizeof(float));
        ls->image_failed = false;
        return DT_OK;
    }
    if (!ls->img_fixed[fi]) {
        DT_TRY(dt_image_load_f32(b->data, b->len, &o, f->scale, what, dst, err));
        ls->image_failed = false;
        return DT_OK;
    }
    dt_image im;
    o.dct_scaling = false;
    DT_TRY(dt_image_decode(b->data, b->len, &o, what, &im, err));
    dt_status st = DT_OK;
    if (im.h != o.height || im.w != o.width)
        st = dt_err_set(err, DT_EINVAL,
                        "%s: a %dx%d image where the first was %dx%d; declare the feature's "
                        "\"shape\" [height, width, channels] to resize them all to one size",
                        what, im.h, im.w, o.height, o.width);
    else
        for (size_t i = 0; i < (size_t)im.h * (size_t)im.w * (size_t)im.c; i++)
            dst[i] = (float)im.px[i] * f->scale;
    dt_image_destroy(&im);
    ls->image_failed = st != DT_OK;
    return st;
}

/* Decodes one feature's values into dst (per_record floats), scaled. */
static dt_status decode_feature(load_state *ls, size_t fi, const Tensorflow__Feature *fe,
                                const char *where, float *dst, dt_err *err)
{
    const dt_data_feature *f = &ls->feat[fi];
    static const Tensorflow__Feature__KindCase want[] = {
        [DT_DATA_DTYPE_FLOAT32] = TENSORFLOW__FEATURE__KIND_FLOAT_LIST,
        [DT_DATA_DTYPE_INT64] = TENSORFLOW__FEATURE__KIND_INT64_LIST,
        [DT_DATA_DTYPE_UINT8] = TENSORFLOW__FEATURE__KIND_BYTES_LIST,
    };
    if (fe->kind_case != want[f->dtype])
        return dt_err_set(err, DT_EINVAL,
                          "%s: feature \"%s\" is a %s but the spec declares %s; fix its \"dtype\"",
                          where, f->name, kind_name(fe->kind_case), kind_name(want[f->dtype]));
    size_t n = 0;
    if (f->dtype == DT_DATA_DTYPE_FLOAT32)
        n = fe->float_list ? fe->float_list->n_value : 0;
    else if (f->dtype == DT_DATA_DTYPE_INT64)
        n = fe->int64_list ? fe->int64_list->n_value : 0;
    else {
        const Tensorflow__BytesList *bl = fe->bytes_list;
        if (!bl || bl->n_value != 1)
            return dt_err_set(err, DT_EINVAL,
                              "%s: feature \"%s\": expected one bytes value of raw uint8, got %zu",
                              where, f->name, bl ? bl->n_value : 0);
        if (dt_image_kind(bl->value[0].data, bl->value[0].len))
            return decode_image_feature(ls, fi, &bl->value[0], where, dst, err);
        n = bl->value[0].len;
    }
    if (n != ls->per_record[fi])
        return dt_err_set(err, DT_EINVAL,
                          "%s: feature \"%s\" has %zu values but its shape needs %zu", where,
                          f->name, n, ls->per_record[fi]);
    /* Token ids: float32 holds every integer up to 2^24 exactly, no more. */
    for (size_t i = 0; f->dtype == DT_DATA_DTYPE_INT64 && i < n; i++)
        if (fe->int64_list->value[i] > (1 << 24) || fe->int64_list->value[i] < -(1 << 24))
            return dt_err_set(err, DT_EINVAL,
                              "%s: feature \"%s\": value %zu is %lld; int64 features must lie "
                              "within +-2^24 (16777216), exact in float32",
                              where, f->name, i, (long long)fe->int64_list->value[i]);
    for (size_t i = 0; i < n; i++) {
        float v = f->dtype == DT_DATA_DTYPE_FLOAT32 ? fe->float_list->value[i]
                  : f->dtype == DT_DATA_DTYPE_INT64 ? (float)fe->int64_list->value[i]
                                                    : (float)fe->bytes_list->value[0].data[i];
        dst[i] = v * f->scale;
    }
    return DT_OK;
}

static dt_status load_record(load_state *ls, const Tensorflow__Example *ex, const char *where,
                             float *row, size_t row_cap, dt_err *err)
{
    const dt_data_source *src = ls->src;
    size_t off = 0;
    for (size_t fi = 0; fi < src->nfeatures; fi++) {
        dt_data_feature *f = &ls->feat[fi];
        const Tensorflow__Feature *fe = find_feature(ex, f->name);
        if (!fe)
            return dt_err_set(err, DT_EINVAL, "%s: feature \"%s\" is missing", where, f->name);
        bool is_label = src->label[0] && strcmp(src->label, f->name) == 0;
        if (is_label) {
            /* a target of any shape: a class id, a vector, an autoencoder's image */
            if (ls->per_record[fi] > ls->lv_cap) {
                float *p = realloc(ls->lv, ls->per_record[fi] * sizeof *p);
                if (!p)
                    return dt_err_set(err, DT_ENOMEM, "%s: out of memory for label \"%s\"", where,
                                      f->name);
                ls->lv = p;
                ls->lv_cap = ls->per_record[fi];
            }
            float *lv = ls->lv;
            DT_TRY(decode_feature(ls, fi, fe, where, lv, err));
            if (ls->label_int) {
                int64_t v = fe->int64_list->value[0];
                if (v < 0 || v >= DT_MAX_CLASSES)
                    return dt_err_set(err, DT_EINVAL,
                                      "%s: label \"%s\" is %lld, outside 0..%d (class ids)", where,
                                      f->name, (long long)v, DT_MAX_CLASSES - 1);
                if (ls->nyi == ls->cap_yi) {
                    size_t cap = ls->cap_yi ? 2 * ls->cap_yi : 1024;
                    int32_t *p = realloc(ls->yi, cap * sizeof(int32_t));
                    if (!p)
                        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", where);
                    ls->yi = p;
                    ls->cap_yi = cap;
                }
                ls->yi[ls->nyi++] = (int32_t)v;
            } else {
                DT_TRY(dt__fvec_push(&ls->y, lv, ls->per_record[fi], where, err));
            }
            continue;
        }
        DT_ASSERT(off + ls->per_record[fi], <=, row_cap);
        DT_TRY(decode_feature(ls, fi, fe, where, row + off, err));
        off += ls->per_record[fi];
    }
    return DT_OK;
}

static size_t feature_count(const Tensorflow__Feature *fe)
{
    switch (fe->kind_case) {
    case TENSORFLOW__FEATURE__KIND_FLOAT_LIST:
        return fe->float_list ? fe->float_list->n_value : 0;
    case TENSORFLOW__FEATURE__KIND_INT64_LIST:
        return fe->int64_list ? fe->int64_list->n_value : 0;
    case TENSORFLOW__FEATURE__KIND_BYTES_LIST:
        return fe->bytes_list && fe->bytes_list->n_value == 1 ? fe->bytes_list->value[0].len : 0;
    default:
        return 0;
    }
}

/* Features declared without a shape take [count] from the first record (a scalar when count
 * is 1); the label without a shape is a scalar. Returns the values per row of x. */
static size_t infer_shapes(load_state *ls, const Tensorflow__Example *ex)
{
    size_t row = 0;
    for (size_t fi = 0; fi < ls->src->nfeatures; fi++) {
        dt_data_feature *f = &ls->feat[fi];
        bool is_label = ls->src->label[0] && strcmp(ls->src->label, f->name) == 0;
        const Tensorflow__Feature *fe = find_feature(ex, f->name);
        if (f->rank == 0 && !is_label && fe && f->dtype == DT_DATA_DTYPE_UINT8 &&
            fe->kind_case == TENSORFLOW__FEATURE__KIND_BYTES_LIST && fe->bytes_list &&
            fe->bytes_list->n_value == 1 &&
            dt_image_kind(fe->bytes_list->value[0].data, fe->bytes_list->value[0].len)) {
            /* an image without a declared shape: the first one's, channels as stored */
            dt_image_opts o = ls->src->image;
            o.height = o.width = o.channels = 0;
            o.dct_scaling = false;
            dt_image im;
            dt_err e = {0};
            if (dt_image_decode(fe->bytes_list->value[0].data, fe->bytes_list->value[0].len, &o,
                                f->name, &im, &e) == DT_OK) {
                f->rank = 3;
                f->shape[0] = im.h;
                f->shape[1] = im.w;
                f->shape[2] = im.c;
                ls->img_fixed[fi] = true;
                ls->per_record[fi] = (size_t)im.h * (size_t)im.w * (size_t)im.c;
                dt_image_destroy(&im);
            } /* else: decode_image_feature reports it with the record named */
        } else if (f->rank == 0 && !is_label && fe) {
            size_t n = feature_count(fe);
            ls->per_record[fi] = n;
            if (n != 1) {
                f->rank = 1;
                f->shape[0] = (int64_t)n;
            }
        }
        if (!is_label)
            row += ls->per_record[fi];
    }
    return row;
}

/* Whether feature fi of ex is an image decode_image_feature would decode and resize (a
 * declared shape [h, w] or [h, w, c]); its bytes in *b. */
static bool pre_eligible(const load_state *ls, size_t fi, const Tensorflow__Example *ex,
                         const ProtobufCBinaryData **b)
{
    const dt_data_feature *f = &ls->feat[fi];
    const dt_data_source *src = ls->src;
    if (f->dtype != DT_DATA_DTYPE_UINT8 || (f->rank != 2 && f->rank != 3) || ls->img_fixed[fi] ||
        (src->label[0] && strcmp(src->label, f->name) == 0))
        return false;
    int c = f->rank == 3 ? (int)f->shape[2] : 1;
    if (c != 1 && c != 3 && c != 4)
        return false;
    const Tensorflow__Feature *fe = find_feature(ex, f->name);
    if (!fe || fe->kind_case != TENSORFLOW__FEATURE__KIND_BYTES_LIST || !fe->bytes_list ||
        fe->bytes_list->n_value != 1 ||
        !dt_image_kind(fe->bytes_list->value[0].data, fe->bytes_list->value[0].len))
        return false;
    *b = &fe->bytes_list->value[0];
    return true;
}

typedef struct pre_pool {
    load_state *ls;
    atomic_size_t next;
} pre_pool;

static void *pre_run(void *arg)
{
    pre_pool *pp = arg;
    load_state *ls = pp->ls;
    predecode *pd = ls->pre;
    for (;;) {
        size_t slot = atomic_fetch_add(&pp->next, 1);
        if (slot >= pd->n * pd->nf)
            break;
        size_t j = slot / pd->nf, fi = slot % pd->nf;
        const ProtobufCBinaryData *b;
        pd->state[slot] = 0;
        if (ls->index_only || !dt_shard_reads_file(&ls->plan, pd->fidx[j]) ||
            !pre_eligible(ls, fi, pd->ex[j], &b))
            continue;
        const dt_data_feature *f = &ls->feat[fi];
        if (!pd->buf[slot] && !(pd->buf[slot] = malloc(ls->per_record[fi] * sizeof(float))))
            continue; /* decoded in order instead */
        char what[1400];
        snprintf(what, sizeof what, "%s: feature \"%s\"", pd->where[j], f->name);
        dt_image_opts o = ls->src->image;
        o.height = (int)f->shape[0];
        o.width = (int)f->shape[1];
        o.channels = f->rank == 3 ? (int)f->shape[2] : 1;
        dt_err e = {0};
        dt_status st = dt_image_load_f32(b->data, b->len, &o, f->scale, what, pd->buf[slot], &e);
        if (st == DT_OK) {
            pd->state[slot] = 1;
        } else {
            pd->err[slot] = e;
            pd->err[slot].code = st;
            pd->state[slot] = 2;
        }
    }
    return NULL;
}

/* Decodes the chunk's eligible images on pd->threads threads (the caller one of them). */
static void pre_decode(load_state *ls)
{
    predecode *pd = ls->pre;
    pre_pool pp = {.ls = ls};
    atomic_init(&pp.next, 0);
    int nt = pd->threads;
    pthread_t tids[DT_MAX_DATA_THREADS];
    int started = 1;
    for (int t = 1; t < nt && pthread_create(&tids[t], NULL, pre_run, &pp) == 0; t++)
        started = t + 1;
    pre_run(&pp);
    for (int t = 1; t < started; t++)
        pthread_join(tids[t], NULL);
}

static void pre_free(predecode *pd)
{
    if (!pd)
        return;
    for (size_t j = 0; j < pd->n; j++)
        tensorflow__example__free_unpacked(pd->ex[j], NULL);
    for (size_t i = 0; pd->buf && i < pd->cap * pd->nf; i++)
        free(pd->buf[i]);
    free(pd->ex);
    free(pd->fidx);
    free(pd->where);
    free(pd->buf);
    free(pd->state);
    free(pd->err);
    free(pd);
}

/* A chunk for records of nf features: 16 records a thread, at most 256. NULL: out of memory
 * (the records are then loaded one by one, as with one thread). */
static predecode *pre_new(const dt_data_source *src, size_t nf)
{
    long t = src->image.threads > 0 ? src->image.threads : sysconf(_SC_NPROCESSORS_ONLN);
    t = t < 1 ? 1 : t > DT_MAX_DATA_THREADS ? DT_MAX_DATA_THREADS : t;
    predecode *pd = calloc(1, sizeof *pd);
    if (!pd)
        return NULL;
    pd->threads = (int)t;
    pd->cap = (size_t)(16 * t < 256 ? 16 * t : 256);
    pd->nf = nf ? nf : 1;
    pd->ex = calloc(pd->cap, sizeof *pd->ex);
    pd->fidx = calloc(pd->cap, sizeof *pd->fidx);
    pd->where = calloc(pd->cap, sizeof *pd->where);
    pd->buf = calloc(pd->cap * pd->nf, sizeof *pd->buf);
    pd->state = calloc(pd->cap * pd->nf, sizeof *pd->state);
    pd->err = calloc(pd->cap * pd->nf, sizeof *pd->err);
    if (!pd->ex || !pd->fidx || !pd->where || !pd->buf || !pd->state || !pd->err) {
        pre_free(pd);
        return NULL;
    }
    return pd;
}

/* Where loaded records are counted. */
typedef struct rec_sink {
    size_t *n;       /* records kept */
    size_t *counts;  /* (nfiles) records kept per file */
    size_t *skipped; /* records left out by on_error "skip" */
    dt_err *first_skip;
} rec_sink;

/* Loads one record (row is scratch) and appends it, or leaves it out when an image in it did not
 * decode and on_error is "skip". A FILE shard keeps every record as an example: another
 * worker's, and one of ours that was skipped, with its label and no row (x_row SIZE_MAX), since
 * the other workers, which did not decode it, plan their steps with it. */
static dt_status load_one(load_state *ls, const Tensorflow__Example *ex, const char *where,
                          size_t fidx, float *row, size_t row_size, rec_sink *k, dt_err *err)
{
    size_t nyi = ls->nyi, ny = ls->y.len;
    ls->image_failed = false;
    ls->hold = !ls->index_only && dt_shard_reads_file(&ls->plan, fidx);
    dt_status st = load_record(ls, ex, where, row, row_size, err);
    bool skip = st != DT_OK && ls->image_failed && ls->src->image.on_error == DT_ON_ERROR_SKIP;
    if (skip) {
        if ((*k->skipped)++ == 0)
            *k->first_skip = *err;
        ls->nyi = nyi; /* the record's label, if it came first, goes too */
        ls->y.len = ny;
        if (!ls->partial)
            return DT_OK;
        /* read again without its images, as the other workers read it (its label back) */
        ls->hold = false;
        st = load_record(ls, ex, where, row, row_size, err);
    }
    if (st != DT_OK)
        return st;
    bool has_row = ls->hold;
    if (ls->partial) {
        if (ls->n_row == ls->cap_row) {
            size_t cap = ls->cap_row ? 2 * ls->cap_row : 1024;
            size_t *p = realloc(ls->x_row, cap * sizeof *p);
            if (!p)
                return dt_err_set(err, DT_ENOMEM, "%s: out of memory", where);
            ls->x_row = p;
            ls->cap_row = cap;
        }
        ls->x_row[ls->n_row++] = has_row ? ls->rows : SIZE_MAX;
    }
    if (has_row) {
        DT_TRY(dt__fvec_push(&ls->x, row, row_size, where, err));
        ls->rows++;
    }
    (*k->n)++;
    k->counts[fidx]++;
    return DT_OK;
}

/* Decodes the chunk's images in parallel, then loads its records in order; empties it. */
static dt_status pre_flush(load_state *ls, predecode *pd, float *row, size_t row_size, rec_sink *k,
                           dt_err *err)
{
    ls->pre = pd;
    pre_decode(ls);
    dt_status st = DT_OK;
    for (size_t j = 0; j < pd->n && st == DT_OK; j++) {
        ls->pre_j = j;
        st = load_one(ls, pd->ex[j], pd->where[j], pd->fidx[j], row, row_size, k, err);
    }
    ls->pre = NULL;
    for (size_t j = 0; j < pd->n; j++) {
        tensorflow__example__free_unpacked(pd->ex[j], NULL);
        pd->ex[j] = NULL;
    }
    pd->n = 0;
    return st;
}

dt_status dt_tfrecord_load(const dt_data_source *src, dt_dataset **out, dt_err *err)
{
    return dt_tfrecord_load_shard(src, NULL, out, err);
}

dt_status dt_tfrecord_load_shard(const dt_data_source *src, const dt_data_load_opts *o,
                                 dt_dataset **out, dt_err *err)
{
    *out = NULL;
    /* A FILE shard is worth it when records carry images (uint8 bytes, JPEG/PNG by magic):
     * numeric features cost little to read everywhere, and Normalization's adapt() then sees
     * every example as before. */
    dt_shard_plan plan = {.policy = DT_SHARD_OFF, .num_workers = 1};
    bool bytes = false;
    for (size_t fi = 0; fi < src->nfeatures; fi++)
        bytes |= src->features[fi].dtype == DT_DATA_DTYPE_UINT8 &&
                 !(src->label[0] && strcmp(src->label, src->features[fi].name) == 0);
    if (o && o->num_workers > 1 && bytes)
        DT_TRY(
            dt_shard_resolve(o->policy, src->nfiles, o->num_workers, o->worker_index, &plan, err));
    if (plan.policy != DT_SHARD_FILE)
        plan = (dt_shard_plan){.policy = DT_SHARD_OFF, .num_workers = 1};
    /* index only (what a job's checks at submit need: counts, shapes, labels): no image is
     * decoded; a bad one is found by the worker that decodes it, as in an image folder */
    bool index_only = o && o->index_only && bytes;
    dt_status st = DT_OK;
    dt_dataset *ds = NULL;
    dt_tfrecord_reader *r = NULL;
    Tensorflow__Example *ex = NULL;
    float *row = NULL;
    size_t *counts = calloc(src->nfiles + 1, sizeof(size_t));
    load_state ls = {.src = src,
                     .plan = plan,
                     .partial = plan.policy == DT_SHARD_FILE || index_only,
                     .index_only = index_only};
    ls.x.max = ls.y.max = DT_MAX_DATA_FILE / sizeof(float);
    ls.feat = calloc(src->nfeatures + 1, sizeof *ls.feat);
    ls.per_record = calloc(src->nfeatures + 1, sizeof(size_t));
    ls.img_fixed = calloc(src->nfeatures + 1, sizeof(bool));
    size_t skipped = 0;
    dt_err first_skip = {0};
    predecode *pd = NULL;
    if (!counts || !ls.feat || !ls.per_record || !ls.img_fixed) {
        st = dt_err_set(err, DT_ENOMEM, "tfrecord: out of memory");
        goto fail;
    }
    memcpy(ls.feat, src->features, src->nfeatures * sizeof *ls.feat);
    size_t row_size = 0;
    for (size_t fi = 0; fi < src->nfeatures; fi++) {
        dt_data_feature *f = &ls.feat[fi];
        size_t n = 1;
        for (int d = 0; d < f->rank; d++)
            n *= (size_t)f->shape[d];
        ls.per_record[fi] = n;
        bool is_label = src->label[0] && strcmp(src->label, f->name) == 0;
        if (is_label)
            ls.label_int = f->dtype == DT_DATA_DTYPE_INT64 && n == 1;
        else
            row_size += n;
    }
    DT_TRY_GOTO(dt__dataset_new(&ds, err), st, fail);
    size_t n = 0;
    /* Image features with a declared shape are decoded ahead, a chunk of records at a time, on
     * "num_parallel_calls" threads; everything else about a record happens in order. */
    bool any_image = false;
    for (size_t fi = 0; fi < src->nfeatures; fi++)
        any_image |= ls.feat[fi].dtype == DT_DATA_DTYPE_UINT8 &&
                     (ls.feat[fi].rank == 2 || ls.feat[fi].rank == 3);
    rec_sink sink = {.n = &n, .counts = counts, .skipped = &skipped, .first_skip = &first_skip};
    for (size_t fidx = 0; fidx < src->nfiles; fidx++) {
        const char *path = src->files[fidx];
        DT_TRY_GOTO(dt_tfrecord_open(path, src->gzip, &r, err), st, fail);
        for (;;) {
            const uint8_t *data;
            size_t len;
            uint64_t off = dt_tfrecord_offset(r), rec = dt_tfrecord_index(r);
            st = dt_tfrecord_next(r, &data, &len, err);
            if (st == DT_ENOENT) {
                st = DT_OK;
                break;
            }
            char where[1200];
            snprintf(where, sizeof where, "%s: record %llu at byte %llu", path,
                     (unsigned long long)rec, (unsigned long long)off);
            ex = st == DT_OK ? tensorflow__example__unpack(NULL, len, data) : NULL;
            if (st == DT_OK && !ex)
                st = dt_err_set(err, DT_EPROTO, "%s: not a valid tf.train.Example", where);
            if (st != DT_OK) { /* the records before it come first, with their own errors */
                dt_err keep = *err;
                dt_status kst = st;
                if (pd && pd->n && (st = pre_flush(&ls, pd, row, row_size, &sink, err)) != DT_OK)
                    goto fail;
                *err = keep;
                st = kst;
                goto fail;
            }
            if (row == NULL) { /* shapes may come from the first record: size the row after it */
                row_size = infer_shapes(&ls, ex);
                row = malloc((row_size ? row_size : 1) * sizeof(float));
                if (!row) {
                    st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", where);
                    goto fail;
                }
                if (any_image)
                    pd = pre_new(src, src->nfeatures);
            } else if (pd) {
                pd->ex[pd->n] = ex;
                pd->fidx[pd->n] = fidx;
                memcpy(pd->where[pd->n], where, sizeof where);
                pd->n++;
                ex = NULL;
                if (pd->n == pd->cap)
                    DT_TRY_GOTO(pre_flush(&ls, pd, row, row_size, &sink, err), st, fail);
                continue;
            }
            st = load_one(&ls, ex, where, fidx, row, row_size, &sink, err);
            tensorflow__example__free_unpacked(ex, NULL);
            ex = NULL;
            if (st != DT_OK)
                goto fail;
        }
        dt_tfrecord_close(r);
        r = NULL;
    }
    if (pd && pd->n)
        DT_TRY_GOTO(pre_flush(&ls, pd, row, row_size, &sink, err), st, fail);
    if (ls.partial && ls.rows == 0 && skipped) {
        st = dt_err_set(err, DT_EINVAL,
                        "tfrecord: all %zu records of this worker's files (FILE shard %d of %d) "
                        "had images that did not decode; first: %s",
                        skipped, plan.worker_index, plan.num_workers, first_skip.msg);
        goto fail;
    }
    if (n == 0 && skipped) {
        st = dt_err_set(err, DT_EINVAL,
                        "tfrecord: all %zu records had images that did not "
                        "decode; first: %s",
                        skipped, first_skip.msg);
        goto fail;
    }
    if (n == 0) {
        st = dt_err_set(err, DT_EINVAL, "%s: no records in %zu file(s)",
                        src->nfiles ? src->files[0] : "tfrecord", src->nfiles);
        goto fail;
    }
    if (skipped)
        DT_WARN("data",
                "tfrecord: skipped %zu records whose image did not decode (\"on_error\": "
                "\"skip\")%s; first: %s",
                skipped,
                ls.partial ? " (each leaves its step one example short: the other workers plan "
                             "with it)"
                           : "",
                first_skip.msg);
    if (ls.partial) {
        size_t mine = 0;
        for (size_t f = plan.worker_index; f < src->nfiles; f += (size_t)plan.num_workers)
            mine++;
        if (!index_only)
            DT_INFO("data",
                    "tfrecord: decoded the images of %zu of %zu records (this worker's FILE shard: "
                    "%zu of %zu files)",
                    ls.rows, n, mine, src->nfiles);
        if (!ls.x.v && !(ls.x.v = malloc(sizeof(float)))) { /* no row here: x is not NULL */
            st = dt_err_set(err, DT_ENOMEM, "tfrecord: out of memory");
            goto fail;
        }
        ds->x_row = ls.x_row;
        ls.x_row = NULL;
        ds->shard_workers = index_only ? -1 : plan.num_workers;
        ds->shard_index = index_only ? 0 : plan.worker_index;
    }
    ds->n = n;
    ds->x_f32 = ls.x.v;
    ls.x.v = NULL;
    ds->x_size = row_size;
    size_t nx = 0, last = 0;
    for (size_t fi = 0; fi < src->nfeatures; fi++)
        if (!(src->label[0] && strcmp(src->label, ls.feat[fi].name) == 0)) {
            nx++;
            last = fi;
        }
    if (nx == 1 && ls.feat[last].rank > 0) {
        ds->x_rank = ls.feat[last].rank;
        memcpy(ds->x_shape, ls.feat[last].shape, sizeof ds->x_shape);
    } else {
        ds->x_rank = 1;
        ds->x_shape[0] = (int64_t)row_size;
    }
    if (ls.label_int && ls.nyi == n) {
        ds->y_kind = DT_LABEL_INT32;
        ds->y_size = 1;
        ds->y_i32 = ls.yi;
        ls.yi = NULL;
        for (size_t i = 0; i < n; i++)
            if (ds->y_i32[i] + 1 > ds->num_classes)
                ds->num_classes = ds->y_i32[i] + 1;
    } else if (src->label[0]) {
        ds->y_kind = DT_LABEL_FLOAT;
        ds->y_size = ls.y.len / n;
        ds->y_f32 = ls.y.v;
        ls.y.v = NULL;
    }
    DT_TRY_GOTO(dt__dataset_set_files(ds, src->files, src->nfiles, counts, err), st, fail);
    *out = ds;
    ds = NULL;
fail:
    if (ex)
        tensorflow__example__free_unpacked(ex, NULL);
    pre_free(pd);
    dt_tfrecord_close(r);
    dt_dataset_free(ds);
    free(row);
    free(counts);
    free(ls.feat);
    free(ls.per_record);
    free(ls.img_fixed);
    free(ls.x.v);
    free(ls.y.v);
    free(ls.yi);
    free(ls.lv);
    free(ls.x_row);
    return st;
}
