/*
 * service_internal.h - shared by the files of lib/service only (see service.h).
 *
 * The files, lowest first; each calls only those above it, and reaches those below through the
 * hooks it is given:
 *   record.c   a job's persisted record, its events and the queue: pure state, no I/O
 *   json.c     records and events on the wire (JobInfo, JobEvent) and as JSON
 *   store.c    records on disk: <state-dir>/jobs/ID/{spec,state}.json, events.jsonl
 *   work.c     blocking work on libuv's pool: validate, export, evaluate, predict
 *   trainer.c  the trainer thread's body and its ring adapter; reports through its hooks
 *   runner.c   this daemon's part of a job (JobRunner.Start / Cancel), which owns the trainer
 *              thread and gives it hooks that report to the chief over gRPC
 *   sched.c    the chief's scheduler: starting the queued job on every rank, the ranks'
 *              Prepared / Finished reports, ending a job, watchers
 *   api.c      the Jobs methods the CLI calls
 *   jobs.c     the service object: the thread pool, the timer, routing, lifetime
 * bench.c, eval.c and export_serve.c stand alone.
 */
#ifndef DT_SERVICE_INTERNAL_H
#define DT_SERVICE_INTERNAL_H

#include "service/service.h"

#include "config/jobspec.h"
#include "jobs.pb-c.h"
#include "train/train.h"
#include "nn/gpu.h"
#include "comm/comm.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* A record keeps the latest of every name: loss, accuracy, val_loss, val_accuracy, 5 progress
 * figures, and up to 8 compiled metrics with their val_ forms (25), with room to spare. */
#define JOB_MAX_METRICS 32
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
#define DT_RPC_JOBS_RESUME   "/dtrain.v1.Jobs/Resume"
#define DT_RPC_JOBS_REMOVE   "/dtrain.v1.Jobs/Remove"
#define DT_RPC_RUN_START     "/dtrain.v1.JobRunner/Start"
#define DT_RPC_RUN_CANCEL    "/dtrain.v1.JobRunner/Cancel"
#define DT_RPC_RUN_PREPARED  "/dtrain.v1.JobRunner/Prepared"
#define DT_RPC_RUN_FINISHED  "/dtrain.v1.JobRunner/Finished"

/* --- record.c: jobs as state ---------------------------------------------------------------------
 */

typedef enum job_state {
    JOB_QUEUED = 0,
    JOB_PREPARING,
    JOB_RUNNING,
    JOB_RESTARTING, /* a task was lost: the others stop, then all resume from the checkpoint */
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_CANCELLED,
} job_state;

typedef struct jmetric {
    char name[48]; /* "val_sparse_top_k_categorical_accuracy" fits */
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

/* What is persisted (state.json, spec.json) and what `dtrain status` shows. */
typedef struct job_record {
    char id[JOB_ID_LEN];
    char name[128];
    char *spec_json; /* owned */
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
    char *weights_path; /* the final weights on the chief, owned; NULL until then */
    char stopped[256];  /* $.fit.callbacks stopped it early: why; "" otherwise */
    char **hashes;      /* per rank once started ("" until it reports), owned */
    int nhashes;
    uint32_t restarts; /* restarted after a lost task or chief this many times */
    /* $.fault_tolerance, from the validated spec */
    uint32_t max_restarts, rejoin_timeout_s, min_workers; /* min_workers 0: all */
    int verbose;                                          /* $.fit.verbose: -1 "auto", 0, 1, 2 */
} job_record;

/* The progress events kept for watchers: a ring of cap (at most JOB_MAX_EVENTS), oldest at
 * ev0. */
typedef struct job_events {
    jevent *ev;
    size_t ev0, nev, cap;
    uint64_t next_seq; /* the last seq given */
} job_events;

/* The loop's bookkeeping while the job holds the cluster (preparing, running, or ending until
 * every rank has reported); not persisted. */
typedef struct job_active {
    uint64_t generation, session;
    uint32_t world;
    uint32_t *tasks;        /* [world] the ring task (cluster rank) of each job rank */
    uint64_t *incarnations; /* [world] each rank's daemon when the job started */
    uint8_t *prepared;      /* [world] */
    uint8_t *done;          /* [world] reported Finished, or will never report */
    int nprepared, ndone;
    bool cancel_requested;
    int64_t cancel_at_ms;  /* cancel requested: call it cancelled after this */
    int64_t release_at_ms; /* terminal: give up waiting for the ranks' Finished after this */
    int64_t prepare_by_ms;
    int64_t saved_ms; /* last state.json write of progress */
    /* restarting: the ranks must have stopped by stop_by_ms; the lost tasks rejoin by
     * rejoin_by_ms, or the job fails (or shrinks to min_workers) */
    int64_t stop_by_ms, rejoin_by_ms;
    bool grow;    /* a task the job shrank past is back: restart on every task at an epoch end */
    bool growing; /* restarting for that (not a fault: the restart count stays) */
} job_active;

typedef struct job job;
struct job {
    job *next;
    job_record rec;
    job_events events;
    bool resume;     /* the next start resumes from the latest checkpoint */
    job_active *act; /* while it holds the cluster, else NULL */
    /* The dirs it writes to besides jobs/<id> (checkpoint.dir, tensorboard.log_dir) relative
     * to the state dir, owned, NULL if none; read from the spec on first use (dirs_read). */
    char *dirs[2];
    bool dirs_read;
};

/* The chief's jobs, oldest first. */
typedef struct job_queue {
    job *head, *tail;
    uint64_t next_id;
} job_queue;

const char *dt__service_state_name(job_state s);
/* A job id as the chief makes them: 1 to 20 decimal digits. Every id that crosses the wire is
 * checked with it before it names a file or a directory. */
bool dt__service_id_ok(const char *id);
bool dt__service_state_parse(const char *name, job_state *out);
bool dt__service_terminal(const job *jb);
/* Whether a job may go from one state to another: queued -> preparing -> running -> an end,
 * any live state -> failed or cancelled, preparing/running -> restarting -> preparing when a
 * task is lost, preparing/running/restarting -> queued when a restarted chief resumes it, and
 * failed/cancelled -> queued when a user resumes it. Nothing leaves success. */
bool dt__service_can_move(job_state from, job_state to);
/* Moves jb to state to, or leaves it and returns false when the move is not allowed. */
bool dt__service_move(job *jb, job_state to);

job *dt__service_job_new(void);
void dt__service_job_free(job *jb); /* NULL-safe */

/* Appends ev to the events (dropping the oldest past JOB_MAX_EVENTS), numbers it and stamps
 * its time when it has none. Takes ev->message. */
void dt__service_events_add(job_events *e, jevent *ev);
/* The i-th event kept (0: the oldest), or NULL past the last. */
const jevent *dt__service_events_at(const job_events *e, size_t i);
/* The index of the first event kept with a seq above seq (nev when none). */
size_t dt__service_events_after(const job_events *e, uint64_t seq);
/* Drops the step events but each epoch's last (an ended job's history is its states, epochs
 * and final positions). */
void dt__service_events_compact(job_events *e);
void dt__service_events_destroy(job_events *e);

/* A progress event from rank 0 into the record: epoch, step and the metrics it carries. */
void dt__service_record_progress(job_record *rec, const jevent *ev);

/* The bookkeeping of a start on world ranks, job rank r on ring task tasks[r] (NULL: r):
 * clears the hashes, prepared and done. */
dt_status dt__service_activate(job *jb, uint32_t world, const uint32_t *tasks, dt_err *err);
void dt__service_deactivate(job *jb);

/* A rank will not report (it died, or it failed before it ran); false when it was counted. */
bool dt__service_rank_done(job *jb, uint32_t rank);

job *dt__service_queue_find(const job_queue *q, const char *ref); /* an id, or a name: its latest */
job *dt__service_queue_next(const job_queue *q);                  /* the oldest queued job */
void dt__service_queue_append(job_queue *q, job *jb);
/* Takes jb out of the queue (the caller frees it); false when it is not there. */
bool dt__service_queue_unlink(job_queue *q, job *jb);
void dt__service_queue_destroy(job_queue *q);
/* Adds the jobs loaded from disk (oldest first; the queue takes them) after the bookkeeping of
 * a chief restart: a job that was preparing or running is queued again to resume from its
 * latest checkpoint, or fails once it has been restarted rec.max_restarts times. *changed[i] says
 * that list[i] must be saved. */
void dt__service_queue_recover(job_queue *q, job **list, int n, bool *changed);

/* --- json.c: on the wire
 * --------------------------------------------------------------------------- */

/* Storage for one JobInfo's arrays; strings are borrowed from the record. */
typedef struct info_buf {
    Dtrain__V1__JobInfo info;
    Dtrain__V1__Metric m[JOB_MAX_METRICS];
    Dtrain__V1__Metric *mp[JOB_MAX_METRICS];
    char waiting[400];
} info_buf;

void dt__service_metrics_pb(const jmetric *src, int n, Dtrain__V1__Metric *m,
                            Dtrain__V1__Metric **mp);
void dt__service_job_pb(const job_record *rec, info_buf *b);
/* dt__service_job_pb, and for a queued job why it waits (dt__service_waiting). */
void dt__service_job_info(const dt_service *j, const job *jb, info_buf *b);
/* m and mp hold JOB_MAX_METRICS each; strings are borrowed from ev. */
void dt__service_event_pb(const jevent *ev, Dtrain__V1__JobEvent *o, Dtrain__V1__Metric *m,
                          Dtrain__V1__Metric **mp);
/* The record and event back from dt_service_job_json / dt_service_event_json (state.json and
 * events.jsonl); keys that are missing read as empty. */
void dt__service_record_from_json(const cJSON *o, job_record *rec);
void dt__service_event_from_json(const cJSON *o, jevent *ev);

/* --- store.c: on disk
 * ----------------------------------------------------------------------------- */

/* <state-dir>/jobs/ID, created. */
dt_status dt__service_mkdirs(const char *state_dir, const char *id, char *dir, size_t n,
                             dt_err *err);
/* Appends a progress event (not steps) to <state-dir>/jobs/ID/events.jsonl; read back by
 * dt__service_load. */
void dt__service_log_event(const char *state_dir, const job *jb, const jevent *ev);
/* Writes state.json (and spec.json when with_spec) atomically. */
dt_status dt__service_save(const char *state_dir, const job *jb, bool with_spec, dt_err *err);
/* Removes <state-dir>/jobs/ID and all it holds (links are removed, not followed). */
dt_status dt__service_remove(const char *state_dir, const char *id, dt_err *err);
/* Every job under <state-dir>/jobs, oldest first (caller frees the array and the jobs). */
dt_status dt__service_load(const char *state_dir, job ***out, int *n, dt_err *err);

/* --- work.c: blocking, on the pool
 * ------------------------------------------------------------------ */

typedef struct jt_summary {
    char name[128];
    uint32_t epochs;
    uint64_t params;
    uint32_t max_restarts, rejoin_timeout_s, min_workers;
    int verbose;
    char dirs[2][PATH_MAX]; /* as job.dirs; "" if none */
    /* $.strategy.devices of a GPU job: the highest GPU index every task needs, and the entry
     * that names it */
    bool gpu;
    int gpu_max, gpu_max_at;
} jt_summary;

/* Parses a spec with the daemon's roots (data_root for reads, state_dir for writes). */
dt_status dt__service_parse_spec(const char *text, size_t len, const char *data_root,
                                 const char *state_dir, dt_jobspec *spec, dt_err *err);
/* Validates a spec completely (model, optimizer, loss, data, paths) without training, and that
 * it runs on world replicas (the global batch divides, FILE sharding has the files). */
dt_status dt__service_validate(const char *spec_json, size_t len, const char *data_root,
                               const char *state_dir, int world, jt_summary *out, dt_err *err);
/* --- gpus.c: a GPU job against the cluster's GPUs, at submit (loop thread)
 * ---------------------------------------------------- */

/* One ring task's GPUs as the chief knows them (dt_cluster_member_gpus). */
typedef struct jt_task_gpus {
    char name[40];       /* "worker:1" */
    const char *address; /* borrowed */
    bool known;          /* it has joined: gpus and model are what it reported */
    int gpus;
    const char *model; /* borrowed; "" when unknown */
} jt_task_gpus;

/* A job validated into sum against tasks[0..n): DT_OK for a CPU job. A GPU job is refused with
 * DT_EINVAL when a known task has fewer than sum->gpu_max + 1 GPUs (the message names the entry
 * of $.strategy.devices, the first such task with its address and GPU count, and how many more
 * there are), and while this build's trainer cannot run GPU replicas. Tasks not heard from yet
 * are not judged: their trainers refuse a missing GPU when the job starts. */
dt_status dt__service_check_gpus(const jt_summary *sum, const jt_task_gpus *tasks, int n,
                                 dt_err *err);

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
 * The converted file is kept in job_dir for the next piece. */
dt_status dt__service_export(const char *weights_path, const char *job_dir, bool chunked,
                             uint64_t offset, char **out, size_t *out_len, uint64_t *total,
                             dt_err *err);
/* The same for the job's latest checkpoint, or for pin (one of its checkpoints, from an earlier
 * piece: DT_ENOENT once it is gone). *path (malloc'd) is the file, *step its global step. */
dt_status dt__service_export_checkpoint(const char *spec_json, const char *data_root,
                                        const char *state_dir, const char *job_dir, const char *pin,
                                        bool chunked, uint64_t offset, char **out, size_t *out_len,
                                        uint64_t *total, char **path, uint64_t *step, dt_err *err);

/* --- trainer.c: the trainer thread's body
 * ------------------------------------------------------------ */

/* How the trainer reports; every hook runs on the trainer thread. */
typedef struct trainer_hooks {
    void *ctx;
    /* This rank's preparation, then the wait for every rank's: DT_OK to train. */
    dt_status (*prepared)(void *ctx, bool ok, const char *error, uint64_t examples, uint64_t params,
                          uint64_t steps_per_epoch, dt_err *err);
    /* A progress event (rank 0 only); must not block. ev->message stays the caller's. */
    void (*progress)(void *ctx, const jevent *ev);
    /* The ring while fit runs (a cancel aborts it), then NULL. */
    void (*comm)(void *ctx, dt_comm *c);
    /* Several replicas ($.strategy.devices): their hierarchical comm while they fit (a cancel
     * or the hang watchdog aborts it, which releases every replica and the other hosts), then
     * NULL. Optional. */
    void (*hier)(void *ctx, dt_comm_hier *h);
    /* The end, with the final weights' hash and path when st is DT_OK. */
    void (*finished)(void *ctx, dt_status st, const char *error, const char *weights_hash,
                     const char *weights_path, const char *stopped);
} trainer_hooks;

/* One run of a job on this daemon: everything the trainer reads, borrowed for its run. */
typedef struct trainer_task {
    const char *spec_json;
    size_t spec_len;
    int rank, world;
    bool resume;
    const uint32_t *tasks; /* the ring task of each rank (a shrunk job), or NULL: rank r is r */
    const char *job_dir;   /* <state-dir>/jobs/ID */
    const char *data_root, *state_dir;
    const atomic_bool *cancel;
    const char *cancel_reason; /* set before *cancel */
    /* the ring, for world > 1 */
    const dt_cluster_spec *cluster;
    const char *token;
    uint64_t session;
    dt_comm_hub *hub; /* NULL: one-task jobs only */
    trainer_hooks hooks;
    /* fit beats pulse (replica m of several beats pulse[m]: DT_JOBSPEC_MAX_DEVICES of them);
     * the trainer stores the spec's hang timeout in *hang_ms and its replica count in
     * *replicas (before they fit), so the runner's watchdog (loop thread) can tell a stuck
     * replica from a slow one, whichever thread it is */
    dt_train_pulse *pulse;
    _Atomic int64_t *hang_ms;
    atomic_int *replicas;
} trainer_task;

/* Prepare, report, wait for GO, fit, report: the whole run, on the calling thread. */
void dt__service_trainer_main(const trainer_task *t);

/* --- runner.c: this daemon's part of a job
 * ---------------------------------------------------------- */

typedef struct jrun jrun;

typedef struct runner {
    const dt_cluster_spec *spec;
    const char *token, *state_dir, *data_root; /* borrowed from the service */
    dt_comm_hub *hub;
    /* Rank 0's progress, on its trainer thread: the chief's side takes it from here. */
    void *ctx;
    void (*progress)(void *ctx, const char *id, const jevent *ev);
    jrun *run; /* the run on this daemon, or NULL (loop thread) */
    /* "" or why this task cannot train now: its trainer is hung (set by the watchdog in
     * dt__service_runner_reap, cleared once that thread has returned) */
    char unhealthy[512];
} runner;

/* JobRunner.Start / Cancel (loop thread). */
void dt__service_runner_start(runner *rn, dt_rpc_call *call);
void dt__service_runner_cancel(runner *rn, dt_rpc_call *call);
/* Joins a finished trainer thread, aborts the ring of one that ignores a cancel, and watches
 * the running one: a trainer whose own work stops beating ($.fault_tolerance.hang_timeout_s)
 * is hung; its ring is aborted (the peers stop at once, naming this task) and rn->unhealthy
 * says why until the thread returns (timer). */
void dt__service_runner_reap(runner *rn);
/* Stops the run at once (its ring aborted), when one runs; it still reports. */
void dt__service_runner_abort(runner *rn, const char *why);
/* Cancels the run (no more reports) and joins its thread for at most timeout_ms. */
void dt__service_runner_stop(runner *rn, int64_t timeout_ms);

/* --- the service object (jobs.c, sched.c, api.c)
 * --------------------------------------------------- */

typedef struct jwatch jwatch;
typedef struct jcall jcall;

/* A progress event on its way from the trainer thread to the loop. */
typedef struct jqitem {
    struct jqitem *next;
    char id[JOB_ID_LEN];
    jevent ev;
} jqitem;

struct dt_service {
    dt_service_opts o;
    char *token, *state_dir, *data_root;
    const dt_cluster_spec *spec;
    int self_rank;
    bool is_chief;
    bool closing;
    uint64_t boot;    /* this run of the service, random: watchers see a restart by it */
    int inflight;     /* blocking calls on the thread pool */
    int handles_open; /* timer and async until closed */
    uv_timer_t tick;
    uv_async_t async;
    /* the chief */
    job_queue q;
    job *active; /* the job holding the cluster (preparing, running, or ending) */
    jwatch *watchers;
    dt_rpc_channel **ch; /* by rank, created on first use */
    int64_t last_wait_log_ms;
    /* trainer thread -> loop */
    pthread_mutex_t qmu;
    jqitem *qhead, *qtail;
    runner rn;
};

/* A blocking call on the thread pool: an RPC to a rank, or a local job (validate, export...). */
struct jcall {
    uv_work_t work;
    dt_service *j;
    void (*run)(jcall *c);                 /* pool thread */
    void (*done)(dt_service *j, jcall *c); /* loop thread, unless the service is closing */
    dt_rpc_call *call;                     /* the client call to answer, if any */
    char id[JOB_ID_LEN];
    int rank;
    uint64_t session; /* the run it is about */
    dt_status st;
    dt_err err;
    /* inputs */
    char *text;  /* spec or data JSON */
    char *text2; /* weights path, format */
    char *text3;
    dt_rpc_channel *ch;
    Dtrain__V1__StartJobRequest start;
    uint32_t *tasks; /* start.tasks, owned */
    Dtrain__V1__CancelJobRequest cancel;
    uint32_t batch;
    char format[16];
    /* outputs */
    jt_summary sum;
    jmetric metrics[JOB_MAX_METRICS];
    int nmetrics;
    uint64_t u1, u2, u3;
    char *out;
    size_t out_len;
    /* export */
    bool chunked;
    uint64_t offset, total;
    char *pin; /* the source the client's earlier pieces came from */
};

/* jobs.c */
jcall *dt__service_call_new(dt_service *j, void (*run)(jcall *),
                            void (*done)(dt_service *, jcall *));
void dt__service_call_queue(dt_service *j, jcall *c);
dt_rpc_channel *dt__service_channel(dt_service *j, int rank);
/* "worker:1 at 10.0.0.2:7000" */
int dt__service_rank_name(const dt_service *j, int rank, char *buf, size_t n);
/* Saves jb's state.json, logging a failure (the job goes on). */
void dt__service_save_or_warn(dt_service *j, job *jb);

/* sched.c */
/* Appends a state event (jb's state now) and answers the watchers it wakes. */
void dt__service_state_event(dt_service *j, job *jb, const char *message);
/* A progress event from rank 0's trainer, on the loop. Takes ev->message. */
void dt__service_progress(dt_service *j, const char *id, jevent *ev);
/* Hands every queued progress event of the trainer thread to dt__service_progress, now (the
 * loop's async does it too, whenever it runs). */
void dt__service_drain_progress(dt_service *j);
/* Moves jb to an end (once), saves it, tells watchers, stops the ranks still going. */
void dt__service_end(dt_service *j, job *jb, job_state st, const char *msg);
/* Tells every rank that has not reported Finished to stop: after its current step (every rank
 * after the same one, a checkpoint written), or with abort at once (a peer is lost). */
void dt__service_cancel_ranks(dt_service *j, job *jb, const char *reason, bool abort);
/* The timer's work: lost ranks, a prepare past its deadline, the end of the active job, the
 * next start. */
void dt__service_schedule(dt_service *j);
void dt__service_on_prepared(dt_service *j, dt_rpc_call *call);
void dt__service_on_finished(dt_service *j, dt_rpc_call *call);
/* Holds a Watch call of jb for events after `after`, at most wait_ms (0: the default). */
void dt__service_watch_add(dt_service *j, dt_rpc_call *call, const job *jb, uint64_t after,
                           uint32_t wait_ms);
/* Answers the held Watch calls of job id (any job when NULL) that have news or are past their
 * deadline, or all of them when `all`. */
void dt__service_watchers_finish(dt_service *j, const char *id, bool all);
void dt__service_reply_watch(const dt_service *j, dt_rpc_call *call, const job *jb, uint64_t after);

/* api.c: Jobs.* (the chief) */
void dt__service_on_submit(dt_service *j, dt_rpc_call *call);
void dt__service_on_list(dt_service *j, dt_rpc_call *call);
void dt__service_on_status(dt_service *j, dt_rpc_call *call);
void dt__service_on_cancel(dt_service *j, dt_rpc_call *call);
void dt__service_on_resume(dt_service *j, dt_rpc_call *call);
void dt__service_on_remove(dt_service *j, dt_rpc_call *call);
/* Removes the oldest ended jobs past opts.keep_jobs (timer). */
void dt__service_retain(dt_service *j);
void dt__service_on_watch(dt_service *j, dt_rpc_call *call);
void dt__service_on_export(dt_service *j, dt_rpc_call *call);
void dt__service_on_evaluate(dt_service *j, dt_rpc_call *call);
void dt__service_on_predict(dt_service *j, dt_rpc_call *call);

/* gpu_ring.c: the hierarchical all-reduce of GPU replicas across hosts, one per replica (its
 * thread): a bucket of device memory reduce-scattered among the host's G GPUs by the clique,
 * member's shard around host ring `ring` (the hierarchical comm's ring of its local index)
 * through pinned host memory, then all-gathered. start waits for the shard's download and
 * starts the ring; wait ends it and queues the all-gather and the copy back on the replica's
 * stream. Every replica of every host ends with the same bits. */
typedef struct dt__gpu_ring dt__gpu_ring;
dt_status dt__gpu_ring_new(dt_nn_gpu_clique *clique, int member, int G, dt_comm *ring,
                           const dt_nn_ops *ops, dt__gpu_ring **out, dt_err *err);
void dt__gpu_ring_free(dt__gpu_ring *g); /* NULL-safe; after its requests were waited for */
dt_status dt__gpu_ring_start(dt__gpu_ring *g, float *buf, size_t n, int64_t timeout_ms, void **req,
                             dt_err *err);
dt_status dt__gpu_ring_wait(dt__gpu_ring *g, void *req, int64_t timeout_ms, dt_err *err);
/* Whether req came from g's start (the replica's comm also carries the hierarchical comm's). */
bool dt__gpu_ring_owns(const dt__gpu_ring *g, const void *req);

#endif
