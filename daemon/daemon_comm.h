/*
 * daemon_comm.h - the daemon's side of the collectives: the comm hub that the rpc server serves
 * ring streams on, and the Comm.Bench / Comm.BenchRun calls behind `dtrain bench allreduce`.
 *
 * Threads: created and called on the loop thread. A bench runs on a thread of its own (it blocks
 * on collectives and RPCs) and hands its answer back to the loop through a uv_async.
 */
#ifndef DT_DAEMON_COMM_H
#define DT_DAEMON_COMM_H

#include "comm/comm.h"
#include "config/tfconfig.h"
#include "rpc/rpc.h"

#include <stdbool.h>
#include <uv.h>

#define DT_RPC_COMM_BENCH     "/dtrain.v1.Comm/Bench"
#define DT_RPC_COMM_BENCH_RUN "/dtrain.v1.Comm/BenchRun"

typedef struct dt_daemon_comm dt_daemon_comm;

/* spec is borrowed (outlives it); token copied. Create before the rpc server. */
dt_status dt_daemon_comm_new(uv_loop_t *loop, const dt_cluster_spec *spec, const char *token,
                             dt_daemon_comm **out, dt_err *err);
dt_comm_hub *dt_daemon_comm_hub(dt_daemon_comm *d);
/* Serves Comm.Bench and Comm.BenchRun; false (call untouched) for any other method. */
bool dt_daemon_comm_handle_call(dt_daemon_comm *d, dt_rpc_call *call);
/* Stop: after the rpc server is freed (its calls are answered). Joins running benches. */
void dt_daemon_comm_free(dt_daemon_comm *d);

#endif
