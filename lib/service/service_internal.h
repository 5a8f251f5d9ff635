/* service_internal.h - shared by the files of lib/service only (see service.h). */
#ifndef DT_SERVICE_INTERNAL_H
#define DT_SERVICE_INTERNAL_H

#include "service/service.h"

#include "jobs.pb-c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define JOB_MAX_METRICS 12
#define JOB_MAX_EVENTS  4096 /* kept per job in memory; older ones are dropped */
#define JOB_ID_LEN      24

#define DT_RPC_JOBS_SUBMIT   "/dtrain.v1.Jobs/Submit"
#define DT_RPC_JOBS_LIST     "/dtrain.v1.Jobs/ListJobs"
#define DT_RPC_JOBS_STATUS   "/dtrain.v1.Jobs/JobStatus"
#define DT_RPC_JOBS_WATCH    "/dtrain.v1.Jobs/Watch"
#define DT_RPC_JOBS_CANCEL   "/dtrain.v1.Jobs/Cancel"
#define DT_RPC_JOBS_EXPORT   "/dtrain.v1.Jobs/Export"
#define DT_RPC_JOBS_EVALUATE "/dtrain.v1.Jobs/Evaluate"
#define DT_RPC_JOBS_PREDICT  "/dtrain.v1.Jobs/Predict"
#define DT_RPC_RUN_START     "/dtrain.v1.JobRunner/Start"
#define DT_RPC_RUN_CANCEL    "/dtrain.v1.JobRunner/Cancel"
#define DT_RPC_RUN_PREPARED  "/dtrain.v1.JobRunner/Prepared"
#define DT_RPC_RUN_FINISHED  "/dtrain.v1.JobRunner/Finished"

typedef enum job_state {
    JOB_QUEUED = 0,
    JOB_PREPARING,
    JOB_RUNNING,
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_CANCELLED,
} job_state;

typedef struct jmetric {
    char name[28];
    double value;
} jmetric;

/* A progress event (also the trainer thread's message to the loop). */
typedef struct jevent {
    uint64_t seq;
    char kind[16]; /* "state", "epoch_begin", "step", "epoch_end" */
    uint32_t epoch, epochs;
    uint64_t step, steps;
    int nmetrics;
    jmetric metrics[JOB_MAX_METRICS];
    double elapsed_s;
    char state[16];
    char *message; /* owned; NULL for none */
    double time_unix;
} jevent;

/* --- the chief's jobs (daemon_jobs.c) and their files (daemon_jobs_store.c) ----------------- */

typedef struct job job;
struct job {
    job *next;
    char id[JOB_ID_LEN];
    char name[128];
    char *spec_json;
    size_t spec_len;
    job_state state;
    uint32_t epoch, epochs;
    uint64_t step, steps_per_epoch, global_step;
    int nmetrics;
    jmetric metrics[JOB_MAX_METRICS];
    char error[DT_ERR_LEN];
    double submitted, started, finished;
    uint32_t world;
    uint64_t examples, params;
    char weights_path[4096];
    char **hashes;     /* per rank, once finished */
    uint32_t restarts; /* resumed after a chief restart this many times */
    bool resume;       /* the next start resumes from the latest checkpoint */
    int nhashes;
    /* progress events: a ring of JOB_MAX_EVENTS, oldest at ev0 */
    jevent *ev;
    size_t ev0, nev;
    uint64_t next_seq;
    /* while it runs (the loop's bookkeeping, not persisted) */
    uint64_t generation, session;
    uint64_t *incarnations;
    uint8_t *prepared, *done;
    int nprepared, ndone;
    bool cancel_requested;
    int64_t release_at_ms; /* terminal: give up waiting for the ranks' Finished after this */
    int64_t cancel_at_ms;
    atomic_bool stopping;
    /* the daemon is stopping: no more reports (its loop is joining us) */ /* cancel requested:
                                                                              call it cancelled
                                                                              after this */
    int64_t prepare_by_ms;
    int64_t saved_ms; /* last state.json write of progress */
};

const char *dt__service_job_state_name(job_state s);
bool dt__service_job_terminal(const job *jb);
/* <state-dir>/jobs/ID, created. */
dt_status dt__service_job_mkdirs(const char *state_dir, const char *id, char *dir, size_t n,
                                 dt_err *err);
/* Appends a progress event (not steps) to <state-dir>/jobs/ID/events.jsonl; read back by
 * dt__service_load. */
void dt__service_job_log_event(const char *state_dir, const job *jb, const jevent *ev);
/* Writes state.json (and spec.json when with_spec) atomically. */
dt_status dt__service_job_save(const char *state_dir, const job *jb, bool with_spec, dt_err *err);
/* Every job under <state-dir>/jobs, oldest first (caller frees the array and the jobs). */
dt_status dt__service_load(const char *state_dir, job ***out, int *n, dt_err *err);
void dt__service_job_free(job *jb);

/* --- the train adapter (daemon_jobs_train.c): the only file that calls lib/train ------------- */

typedef struct jt_summary {
    char name[128];
    uint32_t epochs;
    uint64_t params;
} jt_summary;

/* Validates a spec completely (model, optimizer, loss, data, paths) without training. */
dt_status dt__service_validate(const char *spec_json, size_t len, const char *data_root,
                               const char *state_dir, const char *job_dir, jt_summary *out,
                               dt_err *err);

/* A progress event on its way from the trainer thread to the loop. */
typedef struct jqitem {
    struct jqitem *next;
    char id[JOB_ID_LEN];
    jevent ev;
} jqitem;

typedef struct jwatch jwatch;

struct dt_service {
    dt_service_opts o;
    char *token, *state_dir, *data_root;
    const dt_cluster_spec *spec;
    int self_rank;
    bool is_chief;
    bool closing;
    int inflight;     /* blocking calls on the thread pool */
    int handles_open; /* timer and async until closed */
    uv_timer_t tick;
    uv_async_t async;
    /* the chief */
    job *head, *tail;
    uint64_t next_id;
    job *active; /* the job holding the cluster (preparing, running, or ending) */
    jwatch *watchers;
    dt_rpc_channel **ch; /* by rank, created on first use */
    int64_t last_wait_log_ms;
    /* trainer thread -> loop */
    pthread_mutex_t qmu;
    jqitem *qhead, *qtail;
    /* the runner */
    struct jrun *run;
};

/* The runner's view of one run of a job on this daemon (the trainer thread's input). */
typedef struct jrun jrun;

/* Trainer thread body: prepare, report, wait for GO, fit, report. Calls back into the runner
 * (dt__service_run_*). */
void dt__service_train_main(jrun *r);

/* Aborts the communicator of a run (thread-safe; the caller holds jrun.mu). */
void dt__service_comm_abort(void *comm, const char *why);

/* The final weights of a job (export), evaluation and prediction; blocking, off the loop. */
dt_status dt__service_evaluate(const char *spec_json, const char *weights_path,
                               const char *data_json, const char *data_root, const char *state_dir,
                               uint32_t batch_size, jmetric *metrics, int *nmetrics,
                               uint64_t *examples, dt_err *err);
dt_status dt__service_predict(const char *spec_json, const char *weights_path,
                              const char *data_json, const char *data_root, const char *state_dir,
                              const char *job_dir, uint32_t batch_size, const char *format,
                              char **out, size_t *out_len, uint64_t *rows, uint64_t *cols,
                              dt_err *err);
/* The model weights of weights_path (no optimizer slots) as safetensors bytes in *out: the whole
 * file, or with chunked the piece at offset (DT_EXPORT_CHUNK at most); *total is the file's size.
 * The converted file is kept in job_dir for the next piece (lib/export). */
dt_status dt__service_export(const char *weights_path, const char *job_dir, bool chunked,
                             uint64_t offset, char **out, size_t *out_len, uint64_t *total,
                             dt_err *err);
/* The same for the job's latest checkpoint, or for pin (one of its checkpoints, from an earlier
 * piece: DT_ENOENT once it is gone). *path (malloc'd) is the file, *step its global step. */
dt_status dt__service_export_checkpoint(const char *spec_json, const char *data_root,
                                        const char *state_dir, const char *job_dir, const char *pin,
                                        bool chunked, uint64_t offset, char **out, size_t *out_len,
                                        uint64_t *total, char **path, uint64_t *step, dt_err *err);

/* --- the runner (daemon_jobs_runner.c): this daemon's part of a job -------------------------- */

struct jrun {
    dt_service *jobs;
    char id[JOB_ID_LEN];
    char *spec_json;
    size_t spec_len;
    uint64_t generation, session;
    int rank, world;
    bool resume;
    char job_dir[4096]; /* <state-dir>/jobs/ID */
    pthread_t thread;
    bool thread_started;
    atomic_bool cancel;   /* set by Cancel; the trainer checks it every step */
    atomic_int finished;  /* the trainer thread has returned */
    atomic_bool reported; /* it is reporting Finished: nothing left but to return */
    pthread_mutex_t mu;   /* guards comm (for abort) */
    void *comm;           /* the ring communicator while fitting, else NULL */
    char cancel_reason[256];
    int64_t cancel_at_ms;
    atomic_bool stopping;  /* the daemon is stopping: no more reports (its loop is joining us) */
    dt_rpc_channel *chief; /* to the chief (its own address on rank 0) */
};

/* Reports this rank's preparation and waits (polling) for GO; DT_ECANCELED on ABORT or cancel,
 * with the chief's message in err. */
dt_status dt__service_run_prepared(jrun *r, bool ok, const char *error, uint64_t examples,
                                   uint64_t params, uint64_t steps_per_epoch, dt_err *err);
/* A progress event from rank 0's trainer thread (copied; ev->message stays the caller's). */
void dt__service_run_progress(jrun *r, const jevent *ev);
/* The trainer has ended: reported to the chief (retried for a few seconds). */
void dt__service_run_finished(jrun *r, dt_status st, const char *error, const char *weights_hash,
                              const char *weights_path);
/* The cluster's addresses and names by rank, for the comm. */
const dt_cluster_spec *dt__service_spec(const dt_service *j);
const char *dt__service_token(const dt_service *j);
const char *dt__service_data_root(const dt_service *j);
const char *dt__service_state_dir(const dt_service *j);
dt_comm_hub *dt__service_comm_hub(const dt_service *j);

/* Runner RPCs and lifecycle (loop thread). */
void dt__service_runner_start(dt_service *j, dt_rpc_call *call);
void dt__service_runner_cancel(dt_service *j, dt_rpc_call *call);
/* Cancels the run and joins its thread for at most timeout_ms. */
void dt__service_runner_stop(dt_service *j, int64_t timeout_ms);
/* Joins a finished trainer thread (called from the service's timer). */
void dt__service_runner_reap(dt_service *j);

/* The chief's side (daemon_jobs.c) that the runner calls: progress from rank 0, on the loop. */
void dt__service_chief_event(dt_service *j, const char *id, jevent *ev);

int dt__service_rank_name(const dt_service *j, int rank, char *buf, size_t n);

#endif
