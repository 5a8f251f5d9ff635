/* fetch.c - the client's side of a chunked export: pieces in order, checked, into a temp file. */
#include "export/export.h"

#include "core/limits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RPC_EXPORT         "/dtrain.v1.Jobs/Export"
#define DEFAULT_TIMEOUT_MS 120000

static dt_status default_unary(void *arg, const Dtrain__V1__ExportRequest *req,
                               Dtrain__V1__ExportReply **rep, int64_t timeout_ms, dt_err *err)
{
    return dt_rpc_unary(arg, RPC_EXPORT, &req->base, &dtrain__v1__export_reply__descriptor,
                        (ProtobufCMessage **)rep, timeout_ms, err);
}

static dt_status write_all(int fd, const char *path, const uint8_t *p, size_t n, dt_err *err)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return dt_err_set(err, DT_EIO, "%s: write failed: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return DT_OK;
}

static dt_status take_meta(dt_export_info *info, const Dtrain__V1__ExportReply *r, dt_err *err)
{
    info->source_path = strdup(r->source_path ? r->source_path : "");
    info->spec_json = strdup(r->spec_json ? r->spec_json : "");
    info->state = strdup(r->state ? r->state : "");
    info->global_step = r->global_step;
    if (!info->source_path || !info->spec_json || !info->state)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    return DT_OK;
}

/* Checks one reply against what was asked and what came before. */
static dt_status check_piece(const dt_export_info *info, const Dtrain__V1__ExportReply *r,
                             uint64_t offset, uint64_t *total, uint64_t cap, dt_err *err)
{
    uint64_t len = r->safetensors.len;
    uint64_t t = r->total_bytes;
    /* A chief without chunked export answers with the whole file and no total. */
    if (t == 0 && offset == 0 && r->offset == 0)
        t = len;
    if (offset == 0) {
        if (t == 0)
            return dt_err_set(err, DT_EPROTO, "the chief sent an empty export");
        if (t > cap)
            return dt_err_set(err, DT_ETOOBIG,
                              "the exported weights are %llu bytes, over the limit of %llu (%llu "
                              "GiB); read the file on the chief instead",
                              (unsigned long long)t, (unsigned long long)cap,
                              (unsigned long long)(cap >> 30));
        *total = t;
    } else {
        if (t != *total)
            return dt_err_set(err, DT_EPROTO,
                              "the export changed size between pieces (%llu, then %llu bytes)",
                              (unsigned long long)*total, (unsigned long long)t);
        if (strcmp(r->source_path ? r->source_path : "", info->source_path) != 0)
            return dt_err_set(err, DT_EPROTO,
                              "the chief sent a piece of %s while %s was being fetched",
                              r->source_path, info->source_path);
    }
    if (r->offset != offset)
        return dt_err_set(err, DT_EPROTO, "asked for the piece at %llu, the chief sent %llu",
                          (unsigned long long)offset, (unsigned long long)r->offset);
    if (len == 0)
        return dt_err_set(err, DT_EPROTO, "the chief sent an empty piece at %llu of %llu bytes",
                          (unsigned long long)offset, (unsigned long long)*total);
    if (len > *total - offset)
        return dt_err_set(
            err, DT_EPROTO, "the piece at %llu (%llu bytes) runs past the end (%llu bytes)",
            (unsigned long long)offset, (unsigned long long)len, (unsigned long long)*total);
    return DT_OK;
}

/* One pass: every piece of one source into fd. *gone: a pinned source vanished. */
static dt_status fetch_pass(const dt_export_fetch_opts *o, int fd, const char *tmp,
                            dt_export_info *info, bool *gone, dt_err *err)
{
    dt_export_unary_fn unary = o->unary ? o->unary : default_unary;
    void *uarg = o->unary ? o->unary_arg : o->ch;
    int64_t timeout = o->call_timeout_ms > 0 ? o->call_timeout_ms : DEFAULT_TIMEOUT_MS;
    uint64_t cap = o->max_bytes ? o->max_bytes : DT_MAX_WEIGHTS_BYTES;
    uint64_t offset = 0, total = 0;
    *gone = false;
    do {
        Dtrain__V1__ExportRequest req = DTRAIN__V1__EXPORT_REQUEST__INIT;
        req.id = (char *)o->id;
        req.checkpoint = o->checkpoint;
        req.chunked = true;
        req.offset = offset;
        req.source_path = offset ? info->source_path : "";
        Dtrain__V1__ExportReply *r = NULL;
        dt_status st = unary(uarg, &req, &r, timeout, err);
        if (st != DT_OK) {
            *gone = st == DT_ENOENT && offset > 0;
            return st;
        }
        st = check_piece(info, r, offset, &total, cap, err);
        if (st == DT_OK && offset == 0) {
            st = take_meta(info, r, err);
            if (st == DT_OK && o->unless_source &&
                strcmp(info->source_path, o->unless_source) == 0 &&
                info->global_step == o->unless_step) {
                info->unchanged = true;
                protobuf_c_message_free_unpacked(&r->base, NULL);
                return DT_OK;
            }
        }
        if (st == DT_OK)
            st = write_all(fd, tmp, r->safetensors.data, r->safetensors.len, err);
        offset += r->safetensors.len;
        info->chunks++;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (st != DT_OK)
            return st;
        if (o->progress)
            o->progress(o->arg, offset, total);
    } while (offset < total);
    info->bytes = total;
    return DT_OK;
}

dt_status dt_export_fetch(const dt_export_fetch_opts *o, const char *out_path, dt_export_info *info,
                          dt_err *err)
{
    memset(info, 0, sizeof *info);
    size_t plen = strlen(out_path);
    char *tmp = malloc(plen + 16);
    if (!tmp)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    dt_status st = DT_OK;
    for (int attempt = 0;; attempt++) {
        snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", out_path);
        int fd = mkstemp(tmp);
        if (fd < 0) {
            st = dt_err_set(err, DT_EIO, "%s: cannot create: %s", tmp, strerror(errno));
            break;
        }
        bool gone = false;
        st = fetch_pass(o, fd, tmp, info, &gone, err);
        if (st == DT_OK && !info->unchanged) {
            if (fchmod(fd, 0644) != 0 || fsync(fd) != 0)
                st = dt_err_set(err, DT_EIO, "%s: %s", tmp, strerror(errno));
        }
        if (close(fd) != 0 && st == DT_OK)
            st = dt_err_set(err, DT_EIO, "%s: close failed: %s", tmp, strerror(errno));
        if (st == DT_OK && !info->unchanged && rename(tmp, out_path) != 0)
            st = dt_err_set(err, DT_EIO, "%s: rename failed: %s", out_path, strerror(errno));
        if (st != DT_OK || info->unchanged)
            unlink(tmp);
        if (st == DT_OK || !gone || !o->restart_if_gone || attempt > 0)
            break;
        if (o->restarted)
            o->restarted(o->arg, err->msg);
        dt_export_info_destroy(info);
        memset(info, 0, sizeof *info);
        memset(err, 0, sizeof *err);
    }
    free(tmp);
    return st;
}

void dt_export_info_destroy(dt_export_info *info)
{
    free(info->source_path);
    free(info->spec_json);
    free(info->state);
    info->source_path = info->spec_json = info->state = NULL;
}
