/*
 * service.h - the job service of one dtraind: the floor that joins the compute stack (train) and
 * the network stack (comm, cluster, rpc). Only daemon/ includes it.
 *
 *     dt_service_bench *b;   dt_service_bench_new(loop, &spec, token, &b, &err);   // the ring's
 * hub dt_rpc_server_new(&(dt_rpc_server_opts){..., .streamq =
 *                           dt_comm_hub_streamq(dt_service_bench_hub(b))}, &rpc, &err);
 *     dt_service *s;         dt_service_new(&(dt_service_opts){loop, &spec, cluster, token,
 *                                state_dir, data_root, dt_service_bench_hub(b)}, &s, &err);
 *     on every call:         dt_service_handle_call(s, call) || dt_service_bench_handle_call(b,
 * call) at the end:            dt_service_free(s); ... dt_rpc_server_free(rpc);
 * dt_service_bench_free(b);
 *
 * The jobs (dt_service). Every daemon runs a runner: it takes orders from the chief
 * (JobRunner.Start / Cancel), prepares the job on its own trainer thread, reports back
 * (JobRunner.Prepared, polled until the chief says GO or ABORT), trains, and reports
 * JobRunner.Finished. The chief (rank 0) also serves the CLI (Jobs.*): it validates a submitted
 * spec completely, gives it an id, persists it under <state-dir>/jobs/ID/ (spec.json and
 * state.json, atomic writes), queues it (one job runs at a time), starts it on every ring task,
 * collects progress events (numbered) for watchers, and ends it: succeeded when every rank
 * finished, cancelled on request. When a task dies, hangs or fails mid-job, the job goes to
 * `restarting`: the other tasks stop, the chief waits for the lost task to rejoin, and every
 * task resumes from the latest checkpoint (the chief loads it and broadcasts it, so no other
 * task needs it on disk); after $.fault_tolerance.max_restarts restarts, or when the task
 * stays away, the job fails naming it (or shrinks to $.fault_tolerance.min_workers). A chief
 * restart keeps the job list; a job that was running is queued again and resumes the same way.
 *
 * The all-reduce benchmark (dt_service_bench): the comm hub the rpc server serves ring streams
 * on, and Comm.Bench / Comm.BenchRun behind `dtrain bench allreduce`.
 *
 * The evaluator task (dt_service_eval_run): TF_CONFIG's "evaluator" trains nothing and stays
 * outside the ring; it evaluates the chief's checkpoints as a job trains (see below).
 *
 * Export serving (dt_service_export_*): the chief's side of Jobs.Export in pieces; the client
 * side is lib/export.
 *
 * Threads: dt_service and dt_service_bench are created, called and freed on the loop thread.
 * Their blocking work (RPCs to ranks, validation, export, the trainer, benches) runs on libuv's
 * thread pool or threads of their own and reports back on the loop through uv_async. Each owns
 * what it creates: jobs, threads, channels.
 */
#ifndef DT_SERVICE_SERVICE_H
#define DT_SERVICE_SERVICE_H

#include "cluster/cluster.h"
#include "comm/comm.h"
#include "config/tfconfig.h"
#include "core/status.h"
#include "jobs.pb-c.h"
#include "rpc/rpc.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* --- the jobs ----------------------------------------------------------------------------------
 */

typedef struct dt_service dt_service;

typedef struct dt_service_opts {
    uv_loop_t *loop;
    const dt_cluster_spec *spec; /* borrowed; outlives the service */
    dt_cluster *cluster;         /* borrowed; membership and generation */
    const char *token;           /* copied; NULL for none */
    const char *state_dir;       /* writes (jobs, checkpoints, logs); created when missing */
    const char *data_root;       /* reads of job specs resolve under it */
    dt_comm_hub *comm_hub;       /* borrowed; the ring's hub, NULL: one-task jobs only */
    int keep_jobs;               /* the chief keeps this many ended jobs (files too); 0: all */
} dt_service_opts;

/* Loads the jobs kept under state_dir (the chief only) and starts the service's timer. */
dt_status dt_service_new(const dt_service_opts *opts, dt_service **out, dt_err *err);
/* Serves the Jobs and JobRunner methods; false, without touching call, for any other. */
bool dt_service_handle_call(dt_service *s, dt_rpc_call *call);
/* Cancels a running job (bounded wait for the trainer thread), answers held Watch calls, closes
 * handles, and frees once no RPC is in flight; the loop must keep running until then. NULL-safe.
 * Call right before the rpc server is freed: the server's shutdown answers the calls still in
 * the service's hands, which are never touched again. */
void dt_service_free(dt_service *s);

/* --- jobs and events as JSON: the one place their keys are written ------------------------------
 */

/* DESIGN's `status --json` object: {"id", "name", "state", "epoch", "epochs", "step",
 * "steps_per_epoch", "global_step", "metrics", "error" (null when none), "world_size",
 * "examples", "params", "restarts", "fault_tolerance" {"max_restarts", "rejoin_timeout_s",
 * "min_workers" (null: all)}, "submitted_unix", "started_unix", "finished_unix" (null until
 * then), "weights_path", "weights_hashes"}. The CLI prints it; the chief stores it as
 * state.json. The caller owns the result. */
cJSON *dt_service_job_json(const Dtrain__V1__JobInfo *j);
/* One progress event as `watch --json` prints it and events.jsonl keeps it: {"job", "seq",
 * "kind", "epoch", "epochs", "step", "steps", "state" and "message" (state events) or
 * "metrics" and "elapsed_s" (the others), "time_unix"}. The caller owns the result. */
cJSON *dt_service_event_json(const char *job_id, const Dtrain__V1__JobEvent *e);

/* --- the comm hub and the all-reduce benchmark ---------------------------------------------------
 */

#define DT_RPC_COMM_BENCH     "/dtrain.v1.Comm/Bench"
#define DT_RPC_COMM_BENCH_RUN "/dtrain.v1.Comm/BenchRun"

typedef struct dt_service_bench dt_service_bench;

/* spec is borrowed (outlives it); token copied. Create before the rpc server. */
dt_status dt_service_bench_new(uv_loop_t *loop, const dt_cluster_spec *spec, const char *token,
                               dt_service_bench **out, dt_err *err);
dt_comm_hub *dt_service_bench_hub(dt_service_bench *b);
/* Serves Comm.Bench and Comm.BenchRun; false (call untouched) for any other method. */
bool dt_service_bench_handle_call(dt_service_bench *b, dt_rpc_call *call);
/* Stop: after the rpc server is freed (its calls are answered). Joins running benches. */
void dt_service_bench_free(dt_service_bench *b);

/* --- the evaluator task -------------------------------------------------------------------------
 */

/* Every interval the evaluator asks the chief (Jobs.ListJobs) for the running job; when that job
 * has a checkpoint newer than the last one evaluated, it fetches it over gRPC (Jobs.Export with
 * checkpoint set, so no shared filesystem is needed), evaluates it on the job's
 * $.data.validation split read under its own --data-root, and records the result. When the job
 * succeeds, its final weights are evaluated once more. Results go under STATE_DIR/eval/JOB/:
 *   eval.jsonl   one JSON object per evaluation: job, source, global_step, final, loss,
 *                accuracy (when the job has the metric), examples, time_unix;
 *   events/      TensorBoard scalars "evaluation/loss" and "evaluation/accuracy" by global step;
 *   weights.safetensors  the weights last evaluated.
 * A chief that does not answer is logged (once per outage, naming it) and asked again at the
 * next interval; the evaluator never waits without a deadline. Everything runs on the calling
 * thread; SIGTERM and SIGINT end the loop within 100 ms of the current step (an evaluation in
 * progress is finished first). */
typedef struct dt_service_eval_opts {
    const dt_cluster_spec *spec; /* this task is the evaluator */
    const char *token;           /* may be NULL */
    const char *data_root;       /* reads of the job's spec; NULL = unconfined */
    const char *state_dir;       /* results */
    const char *ready_file;      /* written once the loop runs; may be NULL */
    int interval_ms;             /* between polls of the chief; 0 = 5000 */
} dt_service_eval_opts;

/* Runs until SIGTERM or SIGINT; returns the process exit status (0, or 1 when the results
 * cannot be written). */
int dt_service_eval_run(const dt_service_eval_opts *o);

/* --- export serving (the chief's side of Jobs.Export) --------------------------------------------
 */

/* dt_service_export_open converts a weights or checkpoint file to the exported safetensors once
 * and keeps the result in cache_dir, named after the source's identity (path, device, inode,
 * size, mtime): every later piece of the same source reads that file with pread. A changed
 * source gets a new cache file (atomic rename); when one is made, only the DT_EXPORT_CACHE_KEEP
 * most recently used stay, and none idle for DT_EXPORT_CACHE_IDLE_S. Several threads may open,
 * read and convert at once: a conversion writes a unique temp file and renames it. Blocking:
 * the thread pool, never the loop. */
#define DT_EXPORT_CACHE_IDLE_S 600 /* a converted file unused this long is removed */
#define DT_EXPORT_CACHE_KEEP   3   /* converted files kept per job (final, checkpoints) */

typedef struct dt_service_export_src {
    int fd;        /* the converted file, read-only */
    uint64_t size; /* its bytes */
} dt_service_export_src;

/* Opens the exported form of source_path (model weights only, as dt_train_export writes them),
 * converting it into cache_dir unless a cache file of the same source exists. DT_ENOENT when
 * source_path does not exist (the message names it). */
dt_status dt_service_export_open(const char *source_path, const char *cache_dir,
                                 dt_service_export_src *out, dt_err *err);
/* [offset, offset + max) of the file, clipped at its end, in *out (malloc'd). An offset at or past
 * the end is DT_EINVAL. */
dt_status dt_service_export_read(const dt_service_export_src *s, uint64_t offset, size_t max,
                                 char **out, size_t *len, dt_err *err);
void dt_service_export_close(dt_service_export_src *s);

#endif
