/*
 * export.h - fetching weights of any size through Jobs.Export (the client side: `dtrain export`,
 * the evaluator task). The chief's side, which serves the pieces, is the job service's
 * (service.h, dt_service_export_*).
 *
 * One gRPC message holds at most DT_MAX_RPC_MSG bytes, a model's weights can hold far more. A
 * chunked Export request names an offset; the reply carries [offset, offset + DT_EXPORT_CHUNK)
 * of the file, its total size and the source file on the chief. Later requests name that source
 * (the pin), so a fetch never mixes two checkpoints: a pinned source that is gone is DT_ENOENT.
 *
 * dt_export_fetch asks for the pieces in order on one channel, checks every reply (same total,
 * the offset asked for, no empty piece before the end, the pinned source, total under
 * DT_MAX_WEIGHTS_BYTES) and writes them to a temp file next to out_path, renamed over it at the
 * end; on failure the temp file is removed and out_path is untouched. Every call has a deadline.
 */
#ifndef DT_EXPORT_EXPORT_H
#define DT_EXPORT_EXPORT_H

#include "core/status.h"
#include "jobs.pb-c.h"
#include "rpc/rpc.h"

#include <stdbool.h>
#include <stdint.h>

/* --- client side ----------------------------------------------------------------------------- */

/* One Export call; the default is dt_rpc_unary on the channel. */
typedef dt_status (*dt_export_unary_fn)(void *arg, const Dtrain__V1__ExportRequest *req,
                                        Dtrain__V1__ExportReply **rep, int64_t timeout_ms,
                                        dt_err *err);

typedef struct dt_export_fetch_opts {
    dt_rpc_channel *ch;        /* the chief */
    const char *id;            /* the job */
    bool checkpoint;           /* its latest checkpoint instead of its final weights */
    int64_t call_timeout_ms;   /* each call's deadline; 0: 120 s */
    uint64_t max_bytes;        /* 0: DT_MAX_WEIGHTS_BYTES */
    bool restart_if_gone;      /* a pinned source that vanished: start once more from the newest */
    const char *unless_source; /* stop after the first reply if it names this source ... */
    uint64_t unless_step;      /* ... at this global step (info->unchanged, nothing written) */
    dt_export_unary_fn unary;  /* NULL: dt_rpc_unary on ch */
    void *unary_arg;
    void (*progress)(void *arg, uint64_t done, uint64_t total); /* after each piece, may be NULL */
    void (*restarted)(void *arg, const char *why);              /* may be NULL */
    void *arg;
} dt_export_fetch_opts;

typedef struct dt_export_info {
    char *source_path; /* on the chief */
    char *spec_json;   /* the job's spec */
    char *state;       /* the job's state when the first piece was made */
    uint64_t global_step;
    uint64_t bytes;
    int chunks;     /* replies fetched */
    bool unchanged; /* unless_source matched: out_path was not written */
} dt_export_info;

/* Fetches the whole file into out_path (atomically). *info is filled on DT_OK; free it with
 * dt_export_info_destroy in every case. */
dt_status dt_export_fetch(const dt_export_fetch_opts *o, const char *out_path, dt_export_info *info,
                          dt_err *err);
void dt_export_info_destroy(dt_export_info *info);

#endif
