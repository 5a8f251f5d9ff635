/* Unit tests of lib/export: the chief's cached conversion and pieces, and the client's checks of
 * every reply (through a fake Export call that can misbehave in each way the client refuses). */
#include "dt_test.h"

#include "core/buf.h"
#include "core/limits.h"
#include "export/export.h"
#include "service/service.h"
#include "io/safetensors.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- chief side --------------------------------------------------------------------------- */

/* A checkpoint: one weight of n floats (value v) and one optimizer slot, as lib/train writes. */
static void write_ckpt(const char *path, size_t n, float v)
{
    float *w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++)
        w[i] = v + (float)i;
    int64_t shape[1] = {(int64_t)n};
    dt_err err = {0};
    dt_st_writer *wr = dt_st_writer_new();
    ASSERT_OK(dt_st_writer_add(wr, "dense/kernel", DT_ST_F32, 1, shape, w, &err), &err);
    ASSERT_OK(dt_st_writer_add(wr, "optimizer/dense/kernel/m", DT_ST_F32, 1, shape, w, &err), &err);
    ASSERT_OK(dt_st_writer_write(wr, path, &err), &err);
    dt_st_writer_free(wr);
    free(w);
}

static int count_cache_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strncmp(e->d_name, ".export-cache-", 14) == 0;
    if (d)
        closedir(d);
    return n;
}

/* The whole converted file through pieces of `piece` bytes. */
static char *read_pieces(const dt_service_export_src *s, size_t piece, size_t *len)
{
    char *all = malloc(s->size);
    dt_err err = {0};
    for (uint64_t off = 0; off < s->size;) {
        char *p;
        size_t n;
        ASSERT_OK(dt_service_export_read(s, off, piece, &p, &n, &err), &err);
        ASSERT_GT(n, 0);
        ASSERT_LE(n, piece);
        memcpy(all + off, p, n);
        free(p);
        off += n;
    }
    *len = s->size;
    return all;
}

DT_TEST(export_serve_converts_once_and_reads_pieces)
{
    char src[512], cache[512];
    snprintf(src, sizeof src, "%s/ckpt-4.safetensors", dt_test_tmpdir());
    snprintf(cache, sizeof cache, "%s/job", dt_test_tmpdir());
    mkdir(cache, 0755);
    write_ckpt(src, 10000, 1.0f);
    dt_err err = {0};
    dt_service_export_src s;
    ASSERT_OK(dt_service_export_open(src, cache, &s, &err), &err);
    ASSERT_EQ(count_cache_files(cache), 1);
    size_t len;
    char *whole = read_pieces(&s, 4096, &len);
    /* The exported form: the weight without the optimizer slot. */
    dt_st_file *f;
    ASSERT_OK(dt_st_parse(whole, len, &f, &err), &err);
    ASSERT_TRUE(dt_st_find(f, "dense/kernel") != NULL);
    ASSERT_TRUE(dt_st_find(f, "optimizer/dense/kernel/m") == NULL);
    dt_st_free(f);
    struct stat a, b;
    ASSERT_EQ(fstat(s.fd, &a), 0);
    dt_service_export_close(&s);

    /* The same source again: the same cache file, not a new conversion. */
    ASSERT_OK(dt_service_export_open(src, cache, &s, &err), &err);
    ASSERT_EQ(fstat(s.fd, &b), 0);
    ASSERT_EQ(a.st_ino, b.st_ino);
    size_t len2;
    char *again = read_pieces(&s, 1000, &len2);
    ASSERT_EQ(len2, len);
    ASSERT_EQ(memcmp(whole, again, len), 0);
    /* Past the end is refused and says how to go on. */
    char *p;
    size_t n;
    ASSERT_STATUS(dt_service_export_read(&s, s.size, 100, &p, &n, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "past the end");
    ASSERT_STATUS(dt_service_export_read(&s, s.size + 12345, 100, &p, &n, &err), DT_EINVAL);
    dt_service_export_close(&s);
    free(again);

    /* A rewritten source gets a new cache file with its content. */
    usleep(20000);
    write_ckpt(src, 10000, 2.0f);
    ASSERT_OK(dt_service_export_open(src, cache, &s, &err), &err);
    ASSERT_EQ(fstat(s.fd, &b), 0);
    ASSERT_NE(a.st_ino, b.st_ino);
    ASSERT_EQ(count_cache_files(cache), 2); /* the old one is evicted only once idle */
    again = read_pieces(&s, 1 << 20, &len2);
    ASSERT_EQ(len2, len);
    ASSERT_NE(memcmp(whole, again, len), 0);
    dt_service_export_close(&s);
    free(again);
    free(whole);

    /* More sources: only the most recently used converted files stay. */
    for (int i = 0; i < 4; i++) {
        char other[600];
        snprintf(other, sizeof other, "%s/ckpt-%d.safetensors", dt_test_tmpdir(), 10 + i);
        write_ckpt(other, 100, (float)i);
        ASSERT_OK(dt_service_export_open(other, cache, &s, &err), &err);
        dt_service_export_close(&s);
    }
    ASSERT_EQ(count_cache_files(cache), DT_EXPORT_CACHE_KEEP);
}

DT_TEST(export_serve_refuses_missing_and_bad_sources)
{
    char src[512];
    dt_err err = {0};
    dt_service_export_src s;
    snprintf(src, sizeof src, "%s/ckpt-8.safetensors", dt_test_tmpdir());
    ASSERT_STATUS(dt_service_export_open(src, dt_test_tmpdir(), &s, &err), DT_ENOENT);
    ASSERT_CONTAINS(err.msg, "ckpt-8.safetensors");
    ASSERT_OK(dt_file_write_atomic(src, "not safetensors", 15, &err), &err);
    ASSERT_TRUE(dt_service_export_open(src, dt_test_tmpdir(), &s, &err) != DT_OK);
    ASSERT_CONTAINS(err.msg, "ckpt-8.safetensors");
    ASSERT_EQ(count_cache_files(dt_test_tmpdir()), 0); /* no half-written cache file stays */
}

/* ---- client side -------------------------------------------------------------------------- */

typedef enum fault {
    OK,
    TOTAL_CHANGES,
    WRONG_OFFSET,
    EMPTY_PIECE,
    PAST_END,
    OTHER_SOURCE,
    GONE_ONCE,
    GONE_ALWAYS,
    WHOLE_FILE, /* a chief without chunks: the whole file, no total */
    FAIL_LATER,
} fault;

typedef struct fake {
    const uint8_t *data;
    size_t len, piece;
    fault f;
    int calls, gone;
    uint64_t step;
} fake;

static dt_status fake_unary(void *arg, const Dtrain__V1__ExportRequest *req,
                            Dtrain__V1__ExportReply **rep, int64_t timeout_ms, dt_err *err)
{
    fake *k = arg;
    k->calls++;
    ASSERT_TRUE(timeout_ms > 0);
    ASSERT_TRUE(req->chunked);
    ASSERT_STREQ(req->id, "7");
    if (req->offset > 0)
        ASSERT_STREQ(req->source_path, "/chief/ckpt-3.safetensors");
    else
        ASSERT_STREQ(req->source_path, "");
    if (req->offset > 0 && (k->f == GONE_ALWAYS || (k->f == GONE_ONCE && k->gone++ == 0)))
        return dt_err_set(err, DT_ENOENT, "checkpoint %s is gone", req->source_path);
    if (req->offset > 0 && k->f == FAIL_LATER)
        return dt_err_set(err, DT_EPEER, "the chief went away");
    Dtrain__V1__ExportReply *r = calloc(1, sizeof *r);
    dtrain__v1__export_reply__init(r);
    uint64_t off = req->offset;
    size_t n = k->len - off < k->piece ? k->len - off : k->piece;
    r->total_bytes = k->len;
    r->offset = off;
    if (k->f == WHOLE_FILE) {
        n = k->len;
        r->total_bytes = 0;
    }
    if (off > 0 && k->f == TOTAL_CHANGES)
        r->total_bytes = k->len + 1;
    if (off > 0 && k->f == WRONG_OFFSET)
        r->offset = off + 1;
    if (off > 0 && k->f == EMPTY_PIECE)
        n = 0;
    size_t copy = n;
    if (off > 0 && k->f == PAST_END)
        n = k->len; /* claims more than is left */
    r->safetensors.data = malloc(n ? n : 1);
    memset(r->safetensors.data, 0, n ? n : 1);
    memcpy(r->safetensors.data, k->data + off, copy);
    r->safetensors.len = n;
    r->source_path = strdup(off > 0 && k->f == OTHER_SOURCE ? "/chief/ckpt-6.safetensors"
                                                            : "/chief/ckpt-3.safetensors");
    r->spec_json = strdup("{}");
    r->state = strdup("running");
    r->global_step = k->step;
    *rep = r;
    return DT_OK;
}

static int restarts;
static void on_restart(void *arg, const char *why)
{
    (void)arg;
    (void)why;
    restarts++;
}

static bool leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));)
        found |= strstr(e->d_name, ".tmp-") != NULL;
    if (d)
        closedir(d);
    return found;
}

static dt_status fetch(fault f, size_t len, size_t piece, const char *out, dt_export_info *info,
                       fake *k, dt_err *err)
{
    static uint8_t *data;
    if (!data) {
        data = malloc(1 << 20);
        for (size_t i = 0; i < 1 << 20; i++)
            data[i] = (uint8_t)(i * 7 + 3);
    }
    *k = (fake){.data = data, .len = len, .piece = piece, .f = f, .step = 3};
    dt_export_fetch_opts o = {.id = "7",
                              .checkpoint = true,
                              .call_timeout_ms = 1000,
                              .max_bytes = 1 << 20,
                              .restart_if_gone = true,
                              .unary = fake_unary,
                              .unary_arg = k,
                              .restarted = on_restart};
    memset(err, 0, sizeof *err);
    return dt_export_fetch(&o, out, info, err);
}

DT_TEST(export_fetch_assembles_pieces)
{
    char out[512];
    snprintf(out, sizeof out, "%s/w.safetensors", dt_test_tmpdir());
    dt_export_info info;
    fake k;
    dt_err err;
    size_t sizes[][2] = {{100000, 4096}, {8192, 4096}, {5, 4096}, {4097, 4096}};
    for (size_t t = 0; t < 4; t++) {
        ASSERT_OK(fetch(OK, sizes[t][0], sizes[t][1], out, &info, &k, &err), &err);
        ASSERT_EQ(info.bytes, sizes[t][0]);
        ASSERT_EQ(info.chunks, (int)((sizes[t][0] + sizes[t][1] - 1) / sizes[t][1]));
        ASSERT_STREQ(info.source_path, "/chief/ckpt-3.safetensors");
        ASSERT_EQ(info.global_step, 3);
        char *got;
        size_t n;
        ASSERT_OK(dt_file_read_all(out, 1 << 20, &got, &n, &err), &err);
        ASSERT_EQ(n, sizes[t][0]);
        ASSERT_EQ(memcmp(got, k.data, n), 0);
        free(got);
        dt_export_info_destroy(&info);
    }
    /* A chief that sends the whole file without a total (no chunks) is still understood. */
    ASSERT_OK(fetch(WHOLE_FILE, 3000, 1000, out, &info, &k, &err), &err);
    ASSERT_EQ(info.bytes, 3000);
    ASSERT_EQ(k.calls, 1);
    dt_export_info_destroy(&info);
    ASSERT_FALSE(leftovers(dt_test_tmpdir()));
}

DT_TEST(export_fetch_refuses_bad_replies)
{
    char out[512];
    snprintf(out, sizeof out, "%s/w.safetensors", dt_test_tmpdir());
    dt_err err;
    dt_export_info info;
    fake k;
    struct {
        fault f;
        dt_status st;
        const char *msg;
    } cases[] = {
        {TOTAL_CHANGES, DT_EPROTO, "changed size"}, {WRONG_OFFSET, DT_EPROTO, "asked for"},
        {EMPTY_PIECE, DT_EPROTO, "empty piece"},    {PAST_END, DT_EPROTO, "past the end"},
        {OTHER_SOURCE, DT_EPROTO, "ckpt-6"},        {GONE_ALWAYS, DT_ENOENT, "gone"},
        {FAIL_LATER, DT_EPEER, "went away"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ASSERT_STATUS(fetch(cases[i].f, 10000, 4000, out, &info, &k, &err), cases[i].st);
        ASSERT_CONTAINS(err.msg, cases[i].msg);
        dt_export_info_destroy(&info);
        ASSERT_TRUE(access(out, F_OK) != 0); /* nothing half-written under the name */
        ASSERT_FALSE(leftovers(dt_test_tmpdir()));
    }
    /* A total over the cap is refused before anything is written. */
    ASSERT_STATUS(fetch(OK, (1 << 20) + 1, 4096, out, &info, &k, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "over the limit");
    ASSERT_EQ(k.calls, 1);
    dt_export_info_destroy(&info);
    ASSERT_FALSE(leftovers(dt_test_tmpdir()));
    /* An earlier file under the name is left as it was by a failed fetch. */
    ASSERT_OK(dt_file_write_atomic(out, "old", 3, &err), &err);
    ASSERT_STATUS(fetch(EMPTY_PIECE, 10000, 4000, out, &info, &k, &err), DT_EPROTO);
    dt_export_info_destroy(&info);
    struct stat st;
    ASSERT_EQ(stat(out, &st), 0);
    ASSERT_EQ(st.st_size, 3);
}

DT_TEST(export_fetch_restarts_once_when_the_source_is_gone)
{
    char out[512];
    snprintf(out, sizeof out, "%s/w.safetensors", dt_test_tmpdir());
    dt_err err;
    dt_export_info info;
    fake k;
    restarts = 0;
    ASSERT_OK(fetch(GONE_ONCE, 10000, 4000, out, &info, &k, &err), &err);
    ASSERT_EQ(restarts, 1);
    ASSERT_EQ(info.bytes, 10000);
    ASSERT_EQ(info.chunks, 3); /* the pieces of the second pass */
    dt_export_info_destroy(&info);
    restarts = 0;
    ASSERT_STATUS(fetch(GONE_ALWAYS, 10000, 4000, out, &info, &k, &err), DT_ENOENT);
    ASSERT_EQ(restarts, 1);
    dt_export_info_destroy(&info);
    ASSERT_FALSE(leftovers(dt_test_tmpdir()));
}

DT_TEST(export_fetch_stops_early_for_weights_already_seen)
{
    char out[512];
    snprintf(out, sizeof out, "%s/w.safetensors", dt_test_tmpdir());
    dt_err err;
    dt_export_info info;
    fake k = {.data = (const uint8_t *)"0123456789", .len = 10, .piece = 4, .step = 3};
    dt_export_fetch_opts o = {.id = "7",
                              .checkpoint = true,
                              .unless_source = "/chief/ckpt-3.safetensors",
                              .unless_step = 3,
                              .unary = fake_unary,
                              .unary_arg = &k};
    ASSERT_OK(dt_export_fetch(&o, out, &info, &err), &err);
    ASSERT_TRUE(info.unchanged);
    ASSERT_EQ(k.calls, 1);
    ASSERT_TRUE(access(out, F_OK) != 0);
    dt_export_info_destroy(&info);
    o.unless_step = 2; /* another step: fetched */
    ASSERT_OK(dt_export_fetch(&o, out, &info, &err), &err);
    ASSERT_FALSE(info.unchanged);
    ASSERT_EQ(info.bytes, 10);
    dt_export_info_destroy(&info);
    ASSERT_FALSE(leftovers(dt_test_tmpdir()));
}

/* ---- a real chief (run by test/integration/jobs_export_large.sh, skipped otherwise) -------- */

static dt_status probe(dt_rpc_channel *ch, const char *id, bool checkpoint, bool chunked,
                       uint64_t offset, const char *pin, Dtrain__V1__ExportReply **rep, dt_err *err)
{
    Dtrain__V1__ExportRequest req = DTRAIN__V1__EXPORT_REQUEST__INIT;
    req.id = (char *)id;
    req.checkpoint = checkpoint;
    req.chunked = chunked;
    req.offset = offset;
    req.source_path = (char *)pin;
    *rep = NULL;
    memset(err, 0, sizeof *err);
    return dt_rpc_unary(ch, "/dtrain.v1.Jobs/Export", &req.base,
                        &dtrain__v1__export_reply__descriptor, (ProtobufCMessage **)rep, 30000,
                        err);
}

/* DT_EXPORT_PROBE_ADDR: the chief; job 1 there succeeded, its weights are over one message
 * (64 MiB), and it has a checkpoint at step 2; DT_EXPORT_PROBE_CKPT_DIR: its checkpoint directory
 * (on this host). */
DT_TEST(export_rpc_refusals)
{
    const char *addr = getenv("DT_EXPORT_PROBE_ADDR");
    const char *dir = getenv("DT_EXPORT_PROBE_CKPT_DIR");
    if (!addr || !dir)
        DT_SKIP("run by test/integration/jobs_export_large.sh against its chief");
    dt_err err = {0};
    dt_rpc_channel *ch;
    ASSERT_OK(dt_rpc_channel_new(addr, NULL, &ch, &err), &err);
    Dtrain__V1__ExportReply *r;
    char ckpt[1024], moved[1100], other[1100];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt-2.safetensors", dir);

    /* An older client's request: refused, since the file is over one message. */
    ASSERT_STATUS(probe(ch, "1", false, false, 0, "", &r, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "more than one message");
    ASSERT_OK(probe(ch, "1", false, true, 0, "", &r, &err), &err);
    uint64_t whole = r->total_bytes;
    ASSERT_GT(whole, DT_MAX_RPC_MSG);
    ASSERT_EQ(r->safetensors.len, DT_EXPORT_CHUNK);
    char *final_path = strdup(r->source_path);
    protobuf_c_message_free_unpacked(&r->base, NULL);

    /* Offsets and pins only with chunks; an offset past the end. */
    ASSERT_STATUS(probe(ch, "1", false, false, 5, "", &r, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "chunked");
    ASSERT_STATUS(probe(ch, "1", false, true, whole, final_path, &r, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "past the end");
    /* The last piece of the final weights. */
    uint64_t last = (whole - 1) / DT_EXPORT_CHUNK * DT_EXPORT_CHUNK;
    ASSERT_OK(probe(ch, "1", false, true, last, final_path, &r, &err), &err);
    ASSERT_EQ(r->total_bytes, whole);
    ASSERT_EQ(r->offset, last);
    ASSERT_EQ(r->safetensors.len, whole - last);
    protobuf_c_message_free_unpacked(&r->base, NULL);

    /* A pin names the job's own files, nothing else on the chief. */
    ASSERT_STATUS(probe(ch, "1", false, true, 0, "/etc/passwd", &r, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "not the final weights");
    ASSERT_STATUS(probe(ch, "1", true, true, 0, final_path, &r, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "not one of the job's checkpoints");
    snprintf(other, sizeof other, "%s/../ckpt-2.safetensors", dir);
    ASSERT_STATUS(probe(ch, "1", true, true, 0, other, &r, &err), DT_EINVAL);
    snprintf(other, sizeof other, "%s/ckpt-2.safetensors.bak", dir);
    ASSERT_STATUS(probe(ch, "1", true, true, 0, other, &r, &err), DT_EINVAL);

    /* A pinned checkpoint that vanished after the first piece: NOT_FOUND, and says what to do. */
    ASSERT_OK(probe(ch, "1", true, true, 0, "", &r, &err), &err);
    ASSERT_STREQ(r->source_path, ckpt);
    ASSERT_EQ(r->global_step, 2);
    ASSERT_EQ(r->safetensors.len, DT_EXPORT_CHUNK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    snprintf(moved, sizeof moved, "%s.moved", ckpt);
    ASSERT_EQ(rename(ckpt, moved), 0);
    dt_status st = probe(ch, "1", true, true, DT_EXPORT_CHUNK, ckpt, &r, &err);
    ASSERT_EQ(rename(moved, ckpt), 0);
    ASSERT_STATUS(st, DT_ENOENT);
    ASSERT_CONTAINS(err.msg, "is gone");
    ASSERT_CONTAINS(err.msg, "fetch again");
    /* Back in place: served again (the chief keeps the converted file per source). */
    ASSERT_OK(probe(ch, "1", true, true, DT_EXPORT_CHUNK, ckpt, &r, &err), &err);
    ASSERT_EQ(r->offset, DT_EXPORT_CHUNK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    /* The final weights gone: NOT_FOUND for a pinned piece. */
    snprintf(moved, sizeof moved, "%s.moved", final_path);
    ASSERT_EQ(rename(final_path, moved), 0);
    st = probe(ch, "1", false, true, DT_EXPORT_CHUNK, final_path, &r, &err);
    ASSERT_EQ(rename(moved, final_path), 0);
    ASSERT_STATUS(st, DT_ENOENT);
    ASSERT_CONTAINS(err.msg, "gone");
    free(final_path);
    dt_rpc_channel_free(ch);
}
