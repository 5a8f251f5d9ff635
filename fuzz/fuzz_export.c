/* fuzz_export.c - the chief's export pieces, both ends of Jobs.Export.
 *
 * Client (flags bit 7 clear): dt_export_fetch (`dtrain export`, the evaluator) against a chief
 * whose replies are the input: each part (u16 length + bytes) is one serialized ExportReply; an
 * empty part answers NOT_FOUND (the pinned source is gone), bytes that do not decode answer
 * as a bad reply would, and when the parts run out the chief is unreachable. A file fetched
 * whole is then opened as safetensors, as the evaluator does.
 * Chief (bit 7 set): the rest of the input is a weights file that dt_service_export_open
 * converts into a cache dir, then pieces are read at the offsets of the next bytes.
 *
 * flags: bit 0 restart once when the source is gone, bit 1 stop early for an unchanged source,
 * bit 2 a 1 MiB size limit (else the default), bit 3 ask for a checkpoint. */
#include "common.h"

#include "core/limits.h"
#include "export/export.h"
#include "io/safetensors.h"
#include "service/service.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

static dt_status chief(void *arg, const Dtrain__V1__ExportRequest *req,
                       Dtrain__V1__ExportReply **rep, int64_t timeout_ms, dt_err *err)
{
    (void)req, (void)timeout_ms;
    fz_in *in = arg;
    if (in->n == 0)
        return dt_err_set(err, DT_EPEER, "the chief is unreachable");
    size_t len;
    const uint8_t *p = fz_part(in, &len);
    if (len == 0)
        return dt_err_set(err, DT_ENOENT, "the pinned source is gone");
    *rep = dtrain__v1__export_reply__unpack(NULL, len, p);
    if (!*rep)
        return dt_err_set(err, DT_EPROTO, "not an ExportReply");
    return DT_OK;
}

static void on_restart(void *arg, const char *why)
{
    (void)arg, (void)why;
}

static void fetch(fz_in *in, uint8_t flags)
{
    char out[FZ_PATH];
    snprintf(out, sizeof out, "%s/fetched.safetensors", fz_tmpdir());
    dt_export_fetch_opts o = {.id = "7",
                              .checkpoint = flags & 8,
                              .call_timeout_ms = 1000,
                              .max_bytes = flags & 4 ? 1u << 20 : 0,
                              .restart_if_gone = flags & 1,
                              .unless_source = flags & 2 ? "/chief/final.safetensors" : NULL,
                              .unless_step = 3,
                              .unary = chief,
                              .unary_arg = in,
                              .restarted = on_restart};
    dt_export_info info;
    dt_err err = {0};
    if (dt_export_fetch(&o, out, &info, &err) == DT_OK && !info.unchanged) {
        dt_st_file *f = NULL;
        if (dt_st_open(out, &f, &err) == DT_OK)
            dt_st_free(f);
    }
    dt_export_info_destroy(&info);
    remove(out);
}

static void serve(fz_in *in)
{
    uint32_t offsets[2] = {fz_u16(in), fz_u16(in)};
    char source[FZ_PATH], cache[FZ_PATH];
    fz_write("final.safetensors", in->p, in->n, source);
    snprintf(cache, sizeof cache, "%s/cache", fz_tmpdir());
    mkdir(cache, 0755);
    dt_service_export_src s;
    dt_err err = {0};
    if (dt_service_export_open(source, cache, &s, &err) != DT_OK)
        return;
    char *piece;
    size_t len;
    for (int i = 0; i < 2; i++)
        if (dt_service_export_read(&s, offsets[i], 1 + offsets[i] % 512, &piece, &len, &err) ==
            DT_OK)
            free(piece);
    dt_service_export_close(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t flags = fz_u8(&in);
    if (flags & 128)
        serve(&in);
    else
        fetch(&in, flags);
    return 0;
}
