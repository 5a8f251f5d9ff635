/*
 * daemon_jobs.h - the training service of one dtraind.
 *
 * Every daemon runs a runner: it takes orders from the chief (JobRunner.Start / Cancel), prepares
 * the job on its own trainer thread, reports back (JobRunner.Prepared, polled until the chief says
 * GO or ABORT), trains, and reports JobRunner.Finished. The chief (rank 0) also runs the service
 * the CLI talks to (Jobs.*): it validates a submitted spec completely, gives it an id, persists it
 * under <state-dir>/jobs/ID/ (spec.json and state.json, atomic writes), queues it (one job runs at
 * a time), starts it on every ring task, collects progress events (numbered) for watchers, and
 * ends it: succeeded when every rank finished, failed when one failed or its daemon died (the
 * error names the task), cancelled on request. A daemon restart keeps the job list; a job that
 * was running becomes failed with a message saying so.
 *
 * Threads: everything here runs on the loop thread except the trainer thread (one per daemon,
 * while a job runs) and blocking RPCs, which run on libuv's thread pool and report back on the
 * loop. The trainer thread hands progress to the loop through a mutex-guarded queue and a
 * uv_async. The service owns its jobs, its trainer thread and its channels.
 */
#ifndef DT_DAEMON_JOBS_H
#define DT_DAEMON_JOBS_H

#include "cluster/cluster.h"
#include "config/tfconfig.h"
#include "core/status.h"
#include "rpc/rpc.h"

#include <stdbool.h>
#include <uv.h>

typedef struct dt_jobs dt_jobs;

typedef struct dt_jobs_opts {
    uv_loop_t *loop;
    const dt_cluster_spec *spec; /* borrowed; outlives the service */
    dt_cluster *cluster;         /* borrowed; membership and generation */
    const char *token;           /* copied; NULL for none */
    const char *state_dir;       /* writes (jobs, checkpoints, logs); created when missing */
    const char *data_root;       /* reads of job specs resolve under it */
    void *comm_hub;              /* the ring's hub (dt_comm_hub *), NULL until it exists */
} dt_jobs_opts;

/* Loads the jobs kept under state_dir (the chief only) and starts the service's timer. */
dt_status dt_jobs_new(const dt_jobs_opts *opts, dt_jobs **out, dt_err *err);
/* Serves the Jobs and JobRunner methods; false, without touching call, for any other. */
bool dt_jobs_handle_call(dt_jobs *j, dt_rpc_call *call);
/* Cancels a running job (bounded wait for the trainer thread), answers held Watch calls, closes
 * handles, and frees once no RPC is in flight; the loop must keep running until then. NULL-safe.
 * Call right before the rpc server is freed: the server's shutdown answers the calls still in
 * the jobs' hands, which are never touched again. */
void dt_jobs_free(dt_jobs *j);

#endif
