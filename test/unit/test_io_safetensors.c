/* Unit tests of lib/io/safetensors: round trips, every corruption the reader must reject, and a
 * cross-check against an independent Python implementation (test/ref/safetensors_ref.py). */
#include "dt_test.h"

#include "core/buf.h"
#include "core/limits.h"
#include "io/safetensors.h"

#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the small integers used here */
}

static uint16_t to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) == 0)
        return (uint16_t)(u >> 16);
    uint32_t sign = u >> 31, exp = (u >> 23) & 0xff, mant = u & 0x7fffff;
    return (uint16_t)(sign << 15 | (exp - 127 + 15) << 10 | mant >> 13); /* normal numbers only */
}

/* Element i is (i + 1), negated at odd i for signed types; BOOL is i % 2 == 0 (as the Python
 * helper's values()). */
static void fill(dt_st_dtype dt, size_t n, void *out)
{
    for (size_t i = 0; i < n; i++) {
        double v = (double)(i + 1) * (i % 2 ? -1 : 1);
        switch (dt) {
        case DT_ST_F32:
            ((float *)out)[i] = (float)v;
            break;
        case DT_ST_F16:
            ((uint16_t *)out)[i] = to_f16((float)v);
            break;
        case DT_ST_BF16:
            ((uint16_t *)out)[i] = to_bf16((float)v);
            break;
        case DT_ST_F64:
            ((double *)out)[i] = v;
            break;
        case DT_ST_I64:
            ((int64_t *)out)[i] = (int64_t)v;
            break;
        case DT_ST_I32:
            ((int32_t *)out)[i] = (int32_t)v;
            break;
        case DT_ST_I16:
            ((int16_t *)out)[i] = (int16_t)v;
            break;
        case DT_ST_I8:
            ((int8_t *)out)[i] = (int8_t)v;
            break;
        case DT_ST_U8:
            ((uint8_t *)out)[i] = (uint8_t)(i + 1);
            break;
        case DT_ST_BOOL:
            ((uint8_t *)out)[i] = i % 2 == 0;
            break;
        }
    }
}

typedef struct test_tensor {
    const char *name;
    dt_st_dtype dtype;
    int ndim;
    int64_t shape[DT_ST_MAX_DIMS];
} test_tensor;

/* Also in test/ref/safetensors_ref.py: expected(). The odd-sized F16 before others makes
 * some tensors land unaligned in our files (the writer keeps the order added). */
static const test_tensor cross_tensors[] = {
    {"dense/kernel", DT_ST_F32, 2, {2, 3}},
    {"half", DT_ST_F16, 1, {3}},
    {"brain", DT_ST_BF16, 2, {2, 2}},
    {"scalar", DT_ST_F64, 0, {0}},
    {"step", DT_ST_I64, 1, {4}},
    {"i32", DT_ST_I32, 3, {1, 2, 1}},
    {"i16", DT_ST_I16, 1, {3}},
    {"i8", DT_ST_I8, 1, {5}},
    {"u8", DT_ST_U8, 1, {3}},
    {"mask", DT_ST_BOOL, 1, {3}},
    {"empty", DT_ST_F32, 2, {0, 4}},
};
#define NCROSS (sizeof cross_tensors / sizeof cross_tensors[0])
static const char *const meta_note = "h\xc3\xa9llo \"quoted\" \\ back";

static size_t numel(const test_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* A writer holding cross_tensors (data in bufs[], which the caller frees) and metadata. */
static dt_st_writer *cross_writer(void *bufs[NCROSS])
{
    dt_err err = {0};
    dt_st_writer *w = dt_st_writer_new();
    ASSERT_TRUE(w != NULL);
    for (size_t i = 0; i < NCROSS; i++) {
        const test_tensor *t = &cross_tensors[i];
        size_t n = numel(t);
        bufs[i] = calloc(n ? n : 1, dt_st_dtype_size(t->dtype));
        fill(t->dtype, n, bufs[i]);
        ASSERT_OK(dt_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, bufs[i], &err), &err);
    }
    ASSERT_OK(dt_st_writer_set_metadata(w, "epoch", "2", &err), &err);
    ASSERT_OK(dt_st_writer_set_metadata(w, "note", meta_note, &err), &err);
    ASSERT_OK(dt_st_writer_set_metadata(w, "epoch", "3", &err), &err); /* replaces */
    return w;
}

/* Checks that f holds exactly cross_tensors with fill()'s values and the metadata. */
static void check_cross_file(const dt_st_file *f)
{
    ASSERT_EQ(dt_st_count(f), NCROSS);
    for (size_t i = 0; i < NCROSS; i++) {
        const test_tensor *e = &cross_tensors[i];
        const dt_st_tensor *t = dt_st_find(f, e->name);
        if (!t)
            DT_FAIL_("tensor %s missing", e->name);
        ASSERT_STREQ(t->name, e->name);
        ASSERT_EQ(t->dtype, e->dtype);
        ASSERT_EQ(t->ndim, e->ndim);
        for (int d = 0; d < e->ndim; d++)
            ASSERT_EQ(t->shape[d], e->shape[d]);
        size_t n = numel(e), sz = dt_st_dtype_size(e->dtype);
        ASSERT_EQ(t->nbytes, n * sz);
        ASSERT_TRUE(t->data != NULL);
        ASSERT_EQ((uintptr_t)t->data % sz, 0); /* safe to cast to the element type */
        unsigned char want[256];
        fill(e->dtype, n, want);
        if (memcmp(t->data, want, t->nbytes) != 0)
            DT_FAIL_("tensor %s: data differs", e->name);
    }
    ASSERT_STREQ(dt_st_metadata(f, "epoch"), "3");
    ASSERT_STREQ(dt_st_metadata(f, "note"), meta_note);
    ASSERT_TRUE(dt_st_metadata(f, "absent") == NULL);
    ASSERT_TRUE(dt_st_find(f, "absent") == NULL);
    ASSERT_EQ(dt_st_metadata_count(f), 2);
    const char *k = NULL, *v = NULL;
    ASSERT_OK(dt_st_metadata_at(f, 0, &k, &v), &(dt_err){0});
    ASSERT_STREQ(k, "epoch");
    ASSERT_EQ(dt_st_metadata_at(f, 2, &k, &v), DT_ENOENT);
}

static void free_bufs(void *bufs[NCROSS])
{
    for (size_t i = 0; i < NCROSS; i++)
        free(bufs[i]);
}

/* An in-memory file from header text (not padded) and a zeroed buffer of buflen bytes. */
static unsigned char *make_file(const char *json, size_t buflen, size_t *len)
{
    size_t n = strlen(json);
    *len = 8 + n + buflen;
    unsigned char *b = calloc(1, *len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    return b;
}

/* Parses a file made from json + buflen bytes; returns the status, the message in err. */
static dt_status parse_json(const char *json, size_t buflen, dt_err *err)
{
    size_t len;
    unsigned char *b = make_file(json, buflen, &len);
    dt_st_file *f = (dt_st_file *)0x1;
    dt_status st = dt_st_parse(b, len, &f, err);
    free(b);
    if (st == DT_OK)
        dt_st_free(f);
    else
        ASSERT_TRUE(f == NULL);
    return st;
}

#define ASSERT_REJECTS(json, buflen, status, needle)                                               \
    do {                                                                                           \
        dt_err e_ = {0};                                                                           \
        ASSERT_STATUS(parse_json(json, buflen, &e_), status);                                      \
        ASSERT_CONTAINS(e_.msg, "<memory>");                                                       \
        ASSERT_CONTAINS(e_.msg, needle);                                                           \
    } while (0)

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dt_test_tmpdir(), name);
    return path[k];
}

/* ---- round trips -------------------------------------------------------------------------- */

DT_TEST(io_st_dtype_names_and_sizes)
{
    ASSERT_STREQ(dt_st_dtype_name(DT_ST_F32), "F32");
    ASSERT_STREQ(dt_st_dtype_name(DT_ST_BF16), "BF16");
    ASSERT_STREQ(dt_st_dtype_name(DT_ST_BOOL), "BOOL");
    ASSERT_STREQ(dt_st_dtype_name((dt_st_dtype)99), "?");
    ASSERT_EQ(dt_st_dtype_size(DT_ST_F64), 8);
    ASSERT_EQ(dt_st_dtype_size(DT_ST_F16), 2);
    ASSERT_EQ(dt_st_dtype_size(DT_ST_BOOL), 1);
    ASSERT_EQ(dt_st_dtype_size((dt_st_dtype)99), 0);
}

DT_TEST(io_st_round_trip_all_dtypes)
{
    dt_err err = {0};
    void *bufs[NCROSS];
    dt_st_writer *w = cross_writer(bufs);
    const char *path = tmp_path("rt.safetensors");
    ASSERT_OK(dt_st_writer_write(w, path, &err), &err);

    void *bytes = NULL;
    size_t len = 0;
    ASSERT_OK(dt_st_writer_serialize(w, &bytes, &len, &err), &err);
    dt_st_writer_free(w);
    free_bufs(bufs); /* the files must not point into the writer's data */

    /* The header is padded so the buffer starts 8-byte aligned; serialize == file bytes. */
    uint64_t n = 0;
    memcpy(&n, bytes, 8);
    ASSERT_EQ(n % 8, 0);
    ASSERT_EQ(((char *)bytes)[8], '{');
    char *disk = NULL;
    size_t disk_len = 0;
    ASSERT_OK(dt_file_read_all(path, 1 << 20, &disk, &disk_len, &err), &err);
    ASSERT_EQ(disk_len, len);
    ASSERT_TRUE(memcmp(disk, bytes, len) == 0);
    free(disk);

    dt_st_file *f = NULL;
    ASSERT_OK(dt_st_open(path, &f, &err), &err);
    check_cross_file(f);
    /* dt_st_at walks offset order, which for our writer is the order added. */
    for (size_t i = 0; i < NCROSS; i++)
        ASSERT_STREQ(dt_st_at(f, i)->name, cross_tensors[i].name);
    ASSERT_TRUE(dt_st_at(f, NCROSS) == NULL);
    const dt_st_tensor *s = dt_st_find(f, "scalar");
    ASSERT_EQ(s->ndim, 0);
    ASSERT_EQ(s->nbytes, 8);
    ASSERT_NEAR(*(const double *)s->data, 1.0, 0);
    const dt_st_tensor *k = dt_st_find(f, "dense/kernel");
    ASSERT_NEAR(((const float *)k->data)[5], -6.0, 0);
    ASSERT_EQ(dt_st_find(f, "empty")->nbytes, 0);
    dt_st_free(f);

    ASSERT_OK(dt_st_parse(bytes, len, &f, &err), &err);
    free(bytes); /* parse copies */
    check_cross_file(f);
    dt_st_free(f);
    dt_st_free(NULL);
}

DT_TEST(io_st_empty_file_and_no_metadata)
{
    dt_err err = {0};
    dt_st_writer *w = dt_st_writer_new();
    void *bytes;
    size_t len;
    ASSERT_OK(dt_st_writer_serialize(w, &bytes, &len, &err), &err);
    ASSERT_EQ(len, 16); /* 8 + "{}" padded to 8 */
    ASSERT_TRUE(memcmp((char *)bytes + 8, "{}      ", 8) == 0);
    dt_st_file *f;
    ASSERT_OK(dt_st_parse(bytes, len, &f, &err), &err);
    ASSERT_EQ(dt_st_count(f), 0);
    ASSERT_TRUE(dt_st_find(f, "x") == NULL);
    ASSERT_TRUE(dt_st_metadata(f, "x") == NULL);
    dt_st_free(f);
    free(bytes);

    /* One empty tensor only: a zero-length buffer. */
    int64_t shape[1] = {0};
    ASSERT_OK(dt_st_writer_add(w, "none", DT_ST_I64, 1, shape, NULL, &err), &err);
    ASSERT_OK(dt_st_writer_serialize(w, &bytes, &len, &err), &err);
    ASSERT_OK(dt_st_parse(bytes, len, &f, &err), &err);
    ASSERT_EQ(dt_st_count(f), 1);
    ASSERT_EQ(dt_st_at(f, 0)->nbytes, 0);
    ASSERT_TRUE(dt_st_at(f, 0)->data != NULL);
    dt_st_free(f);
    free(bytes);
    dt_st_writer_free(w);
    dt_st_writer_free(NULL);
}

DT_TEST(io_st_writer_rejects_bad_tensors)
{
    dt_err err = {0};
    dt_st_writer *w = dt_st_writer_new();
    float x[4] = {0};
    int64_t shape[9] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
    ASSERT_OK(dt_st_writer_add(w, "a", DT_ST_F32, 2, shape, x, &err), &err);
    ASSERT_STATUS(dt_st_writer_add(w, "a", DT_ST_F32, 2, shape, x, &err), DT_EEXIST);
    ASSERT_CONTAINS(err.msg, "\"a\"");
    ASSERT_STATUS(dt_st_writer_add(w, "__metadata__", DT_ST_F32, 2, shape, x, &err), DT_EINVAL);
    ASSERT_STATUS(dt_st_writer_add(w, "", DT_ST_F32, 2, shape, x, &err), DT_EINVAL);
    ASSERT_STATUS(dt_st_writer_add(w, "b", DT_ST_F32, 9, shape, x, &err), DT_EINVAL);
    ASSERT_STATUS(dt_st_writer_add(w, "b", DT_ST_F32, -1, shape, x, &err), DT_EINVAL);
    ASSERT_STATUS(dt_st_writer_add(w, "b", (dt_st_dtype)42, 2, shape, x, &err), DT_EINVAL);
    ASSERT_STATUS(dt_st_writer_add(w, "b", DT_ST_F32, 2, shape, NULL, &err), DT_EINVAL);
    int64_t neg[2] = {2, -1};
    ASSERT_STATUS(dt_st_writer_add(w, "b", DT_ST_F32, 2, neg, x, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "shape[1]");
    int64_t huge[3] = {INT64_MAX, INT64_MAX, 2};
    ASSERT_STATUS(dt_st_writer_add(w, "b", DT_ST_F32, 3, huge, x, &err), DT_EINVAL);
    ASSERT_STATUS(dt_st_writer_set_metadata(w, "k", NULL, &err), DT_EINVAL);
    ASSERT_EQ(dt_st_count(NULL), 0);
    /* Failed adds left the writer as it was: one tensor. */
    void *bytes;
    size_t len;
    ASSERT_OK(dt_st_writer_serialize(w, &bytes, &len, &err), &err);
    dt_st_file *f;
    ASSERT_OK(dt_st_parse(bytes, len, &f, &err), &err);
    ASSERT_EQ(dt_st_count(f), 1);
    dt_st_free(f);
    free(bytes);
    ASSERT_STATUS(dt_st_writer_write(w, "/nonexistent/dir/w.safetensors", &err), DT_EIO);
    ASSERT_CONTAINS(err.msg, "/nonexistent/dir/w.safetensors");
    dt_st_writer_free(w);
}

/* ---- corruption: each a clear error, never a crash ---------------------------------------- */

#define T1(extra) "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}" extra "}"

DT_TEST(io_st_valid_baseline)
{
    dt_err err = {0};
    ASSERT_OK(parse_json(T1(""), 24, &err), &err);
    /* Unknown keys in a tensor entry are ignored, as the reference does. */
    ASSERT_OK(parse_json("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":1}}",
                         1, &err),
              &err);
    ASSERT_OK(parse_json("{\"__metadata__\":null}", 0, &err), &err);
}

DT_TEST(io_st_rejects_bad_lengths)
{
    dt_err err = {0};
    dt_st_file *f = NULL;
    ASSERT_STATUS(dt_st_parse("abc", 3, &f, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "too short");
    ASSERT_STATUS(dt_st_parse(NULL, 0, &f, &err), DT_EINVAL);

    size_t len;
    unsigned char *b = make_file(T1(""), 24, &len);
    /* Header length past the end of the file. */
    b[0] = 0xff;
    ASSERT_STATUS(dt_st_parse(b, len, &f, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "runs past the end");
    /* Header length over DT_MAX_SAFETENSORS_HDR, and a length that would wrap around. */
    uint64_t n = (uint64_t)DT_MAX_SAFETENSORS_HDR + 1;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(n >> (8 * i));
    ASSERT_STATUS(dt_st_parse(b, len, &f, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "limit");
    memset(b, 0xff, 8);
    ASSERT_STATUS(dt_st_parse(b, len, &f, &err), DT_ETOOBIG);
    /* Header length 0. */
    memset(b, 0, 8);
    ASSERT_STATUS(dt_st_parse(b, len, &f, &err), DT_EINVAL);
    ASSERT_TRUE(f == NULL);
    free(b);
}

/* A file that is not safetensors (a token, a password hash) is refused without its first bytes
 * in the error, as text or as the number they make. */
DT_TEST(io_st_errors_do_not_echo_the_file)
{
    static const char *const secrets[] = {"d7q0rt4Zsecret-token-tail", "root:*:20000:0:99999:7:::",
                                          "\x01\x00\x00\x00\x00\x00\x00\x00{}"};
    for (size_t i = 0; i < sizeof secrets / sizeof *secrets; i++) {
        const char *s = secrets[i];
        size_t len = i == 2 ? 10 : strlen(s);
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--)
            n = n << 8 | (unsigned char)s[k];
        char num[32], hex[8];
        snprintf(num, sizeof num, "%llu", (unsigned long long)n);
        snprintf(hex, sizeof hex, "%02x", (unsigned char)s[0]);
        dt_err err = {0};
        dt_st_file *f = NULL;
        ASSERT_TRUE(dt_st_parse(s, len, &f, &err) != DT_OK);
        ASSERT_TRUE(f == NULL);
        if (strstr(err.msg, num) || (i < 2 && strstr(err.msg, "d7q0")) ||
            (i < 2 && strstr(err.msg, "root:")))
            DT_FAIL_("the error echoes the file's bytes: %s", err.msg);
        ASSERT_CONTAINS(err.msg, "header length");
    }
}

DT_TEST(io_st_rejects_truncated_files_by_path)
{
    dt_err err = {0};
    void *bufs[NCROSS];
    dt_st_writer *w = cross_writer(bufs);
    void *bytes;
    size_t len;
    ASSERT_OK(dt_st_writer_serialize(w, &bytes, &len, &err), &err);
    dt_st_writer_free(w);
    free_bufs(bufs);
    const char *path = tmp_path("trunc.safetensors");
    dt_st_file *f = NULL;
    /* Every prefix shorter than the file fails, and names the file. */
    for (size_t cut = 0; cut < len; cut++) {
        ASSERT_OK(dt_file_write_atomic(path, bytes, cut, &err), &err);
        dt_status st = dt_st_open(path, &f, &err);
        if (st == DT_OK)
            DT_FAIL_("a file cut to %zu of %zu bytes was accepted", cut, len);
        ASSERT_CONTAINS(err.msg, path);
        ASSERT_TRUE(f == NULL);
    }
    /* Cut inside the data: the message points at truncation. */
    ASSERT_OK(dt_file_write_atomic(path, bytes, len - 3, &err), &err);
    ASSERT_STATUS(dt_st_open(path, &f, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "truncated");
    /* Extra bytes after the last tensor. */
    unsigned char *longer = calloc(1, len + 4);
    memcpy(longer, bytes, len);
    ASSERT_OK(dt_file_write_atomic(path, longer, len + 4, &err), &err);
    ASSERT_STATUS(dt_st_open(path, &f, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "cover");
    free(longer);
    free(bytes);

    ASSERT_STATUS(dt_st_open(tmp_path("missing.safetensors"), &f, &err), DT_ENOENT);
    ASSERT_STATUS(dt_st_open(dt_test_tmpdir(), &f, &err), DT_EINVAL); /* a directory */
}

DT_TEST(io_st_rejects_json_garbage)
{
    ASSERT_REJECTS("{\"w\": {\"dtype\": \"F32\",", 0, DT_EINVAL, "not valid JSON");
    ASSERT_REJECTS("\x01\x02\x03garbage", 0, DT_EINVAL, "not valid JSON");
    ASSERT_REJECTS("[1, 2, 3]", 0, DT_EINVAL, "not an object");
    ASSERT_REJECTS("\"str\"", 0, DT_EINVAL, "not an object");
    ASSERT_REJECTS(T1("") "xx", 24, DT_EINVAL, "after the JSON");
    ASSERT_REJECTS("{\"w\": 5}", 0, DT_EINVAL, "\"w\": expected an object");
    ASSERT_REJECTS("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DT_EINVAL, "dtype");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, DT_EINVAL, "shape");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, DT_EINVAL, "data_offsets");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, DT_EINVAL,
                   "data_offsets");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4,
                   DT_EINVAL, "data_offsets");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
                   DT_EINVAL, "data_offsets");
}

DT_TEST(io_st_rejects_bad_dtype)
{
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DT_EINVAL,
                   "\"w\": unknown dtype \"Q7\"");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                   DT_ENOTSUP, "U32 is not supported");
    ASSERT_REJECTS("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DT_EINVAL,
                   "dtype");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DT_EINVAL,
                   "unknown dtype"); /* case matters */
}

DT_TEST(io_st_rejects_bad_shapes)
{
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,3],\"data_offsets\":[0,24]}}", 24,
                   DT_EINVAL, "\"w\": shape[0] is not a non-negative integer");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,10]}}", 10,
                   DT_EINVAL, "shape[0]");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,\"3\"],\"data_offsets\":[0,24]}}", 24,
                   DT_EINVAL, "shape[1]");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4, DT_EINVAL,
                   "shape");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,1]}}",
                   1, DT_EINVAL, "9 dims");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,9007199254740992],"
                   "\"data_offsets\":[0,4]}}",
                   4, DT_EINVAL, "overflows");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4,
                   DT_EINVAL, "shape[0]");
    /* Shape product * dtype size != the span. */
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
                   DT_EINVAL, "\"w\": data_offsets span 20 bytes but shape x F32 needs 24");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24,
                   DT_EINVAL, "needs 48");
}

DT_TEST(io_st_rejects_bad_offsets)
{
    /* Out of range. */
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]}}", 24,
                   DT_EINVAL, "\"w\": data_offsets [0, 100] are outside the 24-byte");
    /* begin > end. */
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8, DT_EINVAL,
                   "outside");
    /* Overlap. */
    ASSERT_REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[8,24]}}",
                   24, DT_EINVAL, "\"b\" starts at byte 8 but \"a\" ends at 16: tensors overlap");
    /* Same range twice. */
    ASSERT_REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
                   8, DT_EINVAL, "overlap");
    /* Hole between tensors. */
    ASSERT_REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[16,24]}}",
                   24, DT_EINVAL, "leave a hole");
    /* Hole at the start. */
    ASSERT_REJECTS("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}", 16,
                   DT_EINVAL, "\"a\" starts at byte 8, not 0");
    /* Not covering the buffer (trailing bytes), and bytes with no tensors at all. */
    ASSERT_REJECTS(T1(""), 28, DT_EINVAL, "cover 24 bytes but the data buffer has 28");
    ASSERT_REJECTS("{}", 4, DT_EINVAL, "cover 0 bytes");
}

DT_TEST(io_st_rejects_bad_metadata_and_duplicates)
{
    ASSERT_REJECTS(T1(",\"__metadata__\":{\"epoch\":3}"), 24, DT_EINVAL,
                   "__metadata__[\"epoch\"] is not a string");
    ASSERT_REJECTS(T1(",\"__metadata__\":{\"a\":{\"b\":\"c\"}}"), 24, DT_EINVAL, "not a string");
    ASSERT_REJECTS(T1(",\"__metadata__\":[\"a\"]"), 24, DT_EINVAL, "object of strings");
    ASSERT_REJECTS(T1(",\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}"), 24, DT_EINVAL,
                   "key \"k\" twice");
    ASSERT_REJECTS(T1(",\"__metadata__\":{},\"__metadata__\":{}"), 24, DT_EINVAL,
                   "\"__metadata__\" twice");
    ASSERT_REJECTS("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                   "\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                   8, DT_EINVAL, "tensor \"w\" appears twice");
}

/* Flips bits and rewrites bytes all over a valid file: the reader must fail cleanly or accept
 * a still-valid file, never crash or leak (this is what make asan is for). */
DT_TEST(io_st_survives_random_corruption)
{
    dt_err err = {0};
    void *bufs[NCROSS];
    dt_st_writer *w = cross_writer(bufs);
    unsigned char *bytes;
    size_t len;
    ASSERT_OK(dt_st_writer_serialize(w, (void **)&bytes, &len, &err), &err);
    dt_st_writer_free(w);
    free_bufs(bufs);
    unsigned char *copy = malloc(len);
    uint64_t hdr;
    memcpy(&hdr, bytes, 8);
    int accepted = 0, rejected = 0;
    uint64_t x = 88172645463325252ull;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(copy, bytes, len);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* Mostly the header (8 + hdr bytes), where the structure is. */
            size_t at = (x >> 8) % (iter % 8 == 0 ? len : 8 + hdr);
            if (iter % 3 == 0)
                copy[at] ^= (unsigned char)(1u << (x % 8));
            else
                copy[at] = "{}[]\",:0123456789-e. \\\"x"[x % 25];
        }
        dt_st_file *f = NULL;
        if (dt_st_parse(copy, len, &f, &err) == DT_OK) {
            accepted++;
            for (size_t i = 0; i < dt_st_count(f); i++) {
                const dt_st_tensor *t = dt_st_at(f, i);
                ASSERT_TRUE(dt_st_find(f, t->name) == t);
                volatile unsigned char sink = 0;
                for (size_t j = 0; j < t->nbytes; j++)
                    sink ^= ((const unsigned char *)t->data)[j];
                (void)sink;
            }
            dt_st_free(f);
        } else {
            rejected++;
            ASSERT_TRUE(f == NULL);
            ASSERT_TRUE(err.msg[0] != '\0');
        }
    }
    printf("random corruption: %d accepted (data bytes or harmless), %d rejected\n", accepted,
           rejected);
    ASSERT_GT(rejected, 1000);
    free(copy);
    free(bytes);
}

/* ---- cross-check with an independent Python implementation -------------------------------- */

static int run_cmd(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

DT_TEST_TIMEOUT(io_st_python_cross_check, 120)
{
    if (access(dt_test_python(), X_OK) != 0)
        DT_SKIP("%s is not installed", dt_test_python());
    if (!dt_test_python_has("torch"))
        DT_SKIP("Debian's python3 has no torch (apt-get install python3-torch) for the reference "
                "reader/writer in test/ref/safetensors_ref.py");
    dt_err err = {0};
    char cmd[2048];
    const char *script = dt_test_src_path("test/ref/safetensors_ref.py");

    /* 1. Python reads a file we wrote. */
    void *bufs[NCROSS];
    dt_st_writer *w = cross_writer(bufs);
    const char *ours = tmp_path("ours.safetensors");
    ASSERT_OK(dt_st_writer_write(w, ours, &err), &err);
    dt_st_writer_free(w);
    free_bufs(bufs);
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' check '%s'", script, ours);
    ASSERT_EQ(run_cmd(cmd), 0);

    /* 2. We read a file Python wrote (reference layout: sorted by alignment, then name). */
    const char *theirs = tmp_path("theirs.safetensors");
    dt_test_python_cmd(cmd, sizeof cmd, " '%s' write '%s'", script, theirs);
    ASSERT_EQ(run_cmd(cmd), 0);
    dt_st_file *f = NULL;
    ASSERT_OK(dt_st_open(theirs, &f, &err), &err);
    check_cross_file(f);
    ASSERT_EQ(dt_st_at(f, 0)->dtype, DT_ST_F64); /* offset order: 8-byte types first */
    dt_st_free(f);
}

/* test/ref/hf_safetensors_0.8.0.safetensors was written by huggingface's own library
 * (safetensors 0.8.0, torch 2.11):
 *   save_file({"a": arange(6.).reshape(2, 3), "b": tensor([1., -2, 3], dtype=bfloat16),
 *              "c": tensor(7), "e": zeros(0, 2, dtype=float16)}, path, metadata={"k": "v"})
 * (That library also read back a file of ours, cross_tensors, with every value equal.) */
DT_TEST(io_st_reads_reference_library_file)
{
    dt_err err = {0};
    dt_st_file *f = NULL;
    ASSERT_OK(dt_st_open(dt_test_src_path("test/ref/hf_safetensors_0.8.0.safetensors"), &f, &err),
              &err);
    ASSERT_EQ(dt_st_count(f), 4);
    ASSERT_STREQ(dt_st_metadata(f, "k"), "v");
    /* Offset order: the reference sorts by dtype alignment, then name. */
    ASSERT_STREQ(dt_st_at(f, 0)->name, "c");
    ASSERT_STREQ(dt_st_at(f, 3)->name, "e");
    const dt_st_tensor *a = dt_st_find(f, "a");
    ASSERT_EQ(a->dtype, DT_ST_F32);
    ASSERT_EQ(a->ndim, 2);
    ASSERT_EQ(a->shape[0], 2);
    ASSERT_EQ(a->shape[1], 3);
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(((const float *)a->data)[i], i, 0);
    const dt_st_tensor *b = dt_st_find(f, "b");
    ASSERT_EQ(b->dtype, DT_ST_BF16);
    const uint16_t *bv = b->data;
    ASSERT_EQ(bv[0], to_bf16(1.0f));
    ASSERT_EQ(bv[1], to_bf16(-2.0f));
    ASSERT_EQ(bv[2], to_bf16(3.0f));
    const dt_st_tensor *c = dt_st_find(f, "c");
    ASSERT_EQ(c->dtype, DT_ST_I64);
    ASSERT_EQ(c->ndim, 0);
    ASSERT_EQ(*(const int64_t *)c->data, 7);
    const dt_st_tensor *e = dt_st_find(f, "e");
    ASSERT_EQ(e->dtype, DT_ST_F16);
    ASSERT_EQ(e->nbytes, 0);
    ASSERT_EQ(e->shape[0], 0);
    ASSERT_EQ(e->shape[1], 2);
    dt_st_free(f);
}
