/*
 * train.h - Keras fit / evaluate / predict for one replica of a synchronous data-parallel job,
 * with checkpoints, TensorBoard logs and weight files. What the daemon's trainer thread calls.
 *
 *     dt_jobspec spec;  dt_jobspec_parse(text, len, &roots, &spec, &err);
 *     dt_train_info info;
 *     dt_train_validate(&spec, &info, &err);          // chief, at submit time: refuses a bad spec
 *
 *     dt_train_opts o = dt_train_opts_default();      // on every worker, on its trainer thread
 *     o.rank = rank; o.world = world; o.out_dir = job_dir; o.cancel = &job->cancel;
 *     o.progress = (dt_train_progress){ctx, on_epoch_begin, on_step_end, on_epoch_end};
 *     dt_trainer *t;
 *     dt_train_new(&spec, &o, &t, &err);              // model, optimizer, this rank's pipeline
 *     dt_train_get_info(t, &info);                    // examples and parameters: report them
 *     dt_train_comm comm = {ctx, rank, world, my_allreduce_start, my_wait, my_broadcast};
 *     dt_train_result r;
 *     dt_train_fit(t, &comm, &r, &err);               // DT_ECANCELED after a cancel
 *     dt_train_free(t);
 *
 * One step of fit (identical on every replica, so the weights stay bit-identical):
 *   1. the next batch of this rank's pipeline (global batch / R examples, maybe fewer or none
 *      near an epoch's end: a replica with n == 0 contributes zero gradients and zero examples);
 *   2. forward + backward (the model scales gradients by 1 / global batch);
 *   3. gradients all-reduced (SUM) in buckets cut at layer boundaries, last layer first: the
 *      first holds at least strategy.first_bucket_mb (default 1 MiB), the others bucket_mb
 *      (25), as DDP cuts them; each bucket is started from the model's grad-ready hook as soon
 *      as backward has finished its layers, so the wire works while backward goes on (one big
 *      bucket would start only when backward ends). With strategy.compression the buckets
 *      travel as float16 / bfloat16 (comm.allreduce_start_compressed);
 *   4. one small all-reduce behind the last bucket: BatchNormalization's moving statistics
 *      (then divided by R) and the metrics (loss * n, correct, n, cancel, then the compiled
 *      metrics' sums: totals and counts, confusion counts, AUC's buckets; train/metrics.c),
 *      so every replica derives the values a one-replica run would. A cancel seen by
 *      any replica stops every replica after the same step, so a cancel never leaves a peer
 *      waiting in a collective;
 *   5. after every wait, the optimizer update.
 * With a comm whose collectives queue on the device's stream (stream_ordered: an NCCL clique of
 * one host's GPUs) steps 3-5 are device work: the buckets, then the moving statistics (scaled on
 * the device), then the update, all queued before the step's one host synchronisation, and a
 * CUDA graph may capture the step whole; only the metrics of step 4 cross host memory
 * (allreduce_host).
 * Validation every fit.validation_freq epochs is split across replicas the same way (DATA
 * sharding of the validation split) and its sums all-reduced.
 *
 * Start of fit: the chief (rank 0) loads the latest checkpoint of the checkpoint dir when
 * opts.resume is set and one exists (its spec hash must match), else initial_weights, else
 * keeps its seeded initial weights; then it broadcasts the position (epoch, step, optimizer
 * iterations, RNG), params, state and optimizer slots. So a worker needs no shared filesystem.
 * A resumed run replays the interrupted one bit for bit (same data order, slots, iterations),
 * except for Dropout masks on ranks > 0, which derive their stream from the chief's anew.
 *
 * Files the chief writes (the others write nothing):
 *   <checkpoint dir>/ckpt-<global step>.safetensors, by checkpoint.save_freq, the latest
 *       checkpoint.keep kept (the dir is opts.out_dir/checkpoints when the spec has none);
 *   <out_dir>/final.safetensors at the end (when out_dir is set);
 *   tensorboard.log_dir/events.out.tfevents.*: per step "batch_loss", "batch_accuracy",
 *       "learning_rate", "samples_per_s"; per epoch "epoch_loss", "epoch_accuracy",
 *       "epoch_val_loss", "epoch_val_accuracy", "epoch_samples_per_s"; each compiled metric as
 *       "batch_<name>", "epoch_<name>" and "epoch_val_<name>" (<name> as Keras logs it).
 * Weight files are safetensors with Keras names ("conv2d/kernel", DESIGN layouts), optimizer
 * slots as "optimizer/<layer>/<var>/<slot>", and __metadata__ keys "format" ("dtrain-ckpt-1"),
 * "epoch" (epochs completed), "step" (steps done in the current epoch), "global_step",
 * "iterations", "spec_hash", "model". Dropout needs no state there: step g draws from
 * (the spec's seed, g, rank) alone.
 *
 * Threads: every function runs on the calling (trainer) thread; the data pipeline has its own
 * prefetch thread inside. Progress callbacks run on the trainer thread, inside dt_train_fit; they
 * must not block (hand the event to the loop). opts.cancel is read with an atomic load, so any
 * thread may set it. The comm vtable's functions are called from the trainer thread only.
 * A dt_trainer borrows the spec: the spec must outlive it.
 */
#ifndef DT_TRAIN_TRAIN_H
#define DT_TRAIN_TRAIN_H

#include "config/jobspec.h"
#include "core/status.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cJSON cJSON;
typedef struct dt_model dt_model;
typedef struct dt_optim dt_optim;
typedef struct dt_nn_ops dt_nn_ops;

/* ------------------------------------------------------------------------ collectives -- */

/* The collectives fit needs, so that train depends on no network module: the daemon adapts
 * lib/comm to it, tests use a shared-memory one. Every call must eventually return (a dead
 * peer is an error within the comm's deadline); the first error aborts fit with it. */
typedef struct dt_train_comm {
    void *ctx;
    int rank, world;
    /* Starts an in-place SUM all-reduce of buf[0..n) across all ranks; *req identifies it.
     * Every rank starts the same all-reduces in the same order. buf must stay untouched until
     * wait returns. The result must be bitwise identical on every rank. */
    dt_status (*allreduce_start)(void *ctx, float *buf, size_t n, void **req, dt_err *err);
    /* Waits for (and releases) a started all-reduce. */
    dt_status (*wait)(void *ctx, void *req, dt_err *err);
    /* Copies root's buf[0..bytes) to every rank (blocking). */
    dt_status (*broadcast)(void *ctx, void *buf, size_t bytes, int root, dt_err *err);
    /* Optional: allreduce_start with the values carried in a 16-bit wire format (the spec's
     * $.strategy.compression, never NONE here); fit uses it for gradient buckets only. The
     * result must still be bitwise identical on every rank. NULL: the comm cannot compress, and
     * fit refuses a spec that asks for it on more than one replica. */
    dt_status (*allreduce_start_compressed)(void *ctx, float *buf, size_t n,
                                            dt_jobspec_compression wire, void **req, dt_err *err);
    /* Optional: how long (seconds, so far) this replica's collectives kept the in-host comm and
     * its host ring busy (several replicas a process: lib/comm's hierarchical all-reduce). fit
     * reads it at each step's start and end and logs the per-step means with the step phases. */
    void (*busy)(void *ctx, double *in_host_s, double *ring_s);
    /* true: allreduce_start and broadcast take the model's own memory, device memory on a GPU
     * (NCCL), as well as host memory; fit then hands its buffers over as they are. false: host
     * memory only, so a device backend's gradients cross through host mirrors. */
    bool device_buffers;
    /* With device_buffers: allreduce_start on device memory only queues the collective on the
     * calling thread's stream (a GPU's NCCL) and wait does nothing more. fit then keeps the
     * whole step on the device (the buckets, the moving statistics, the update), so that it
     * costs one host synchronisation and may be captured into a CUDA graph; only the step's
     * metrics cross host memory. */
    bool stream_ordered;
    /* Optional: a blocking SUM all-reduce of host memory that passes through no device (the
     * step's metrics and validation's sums); NULL: allreduce_start and wait. The result must be
     * bitwise identical on every rank. */
    dt_status (*allreduce_host)(void *ctx, float *buf, size_t n, dt_err *err);
    /* Optional, with device_buffers false on a device backend: starts the all-reduce of a
     * gradient bucket that lies in the device's memory, which the comm moves itself (GPU hosts:
     * NCCL reduce-scatter among the host's GPUs, each GPU's shard around a host ring, NCCL
     * all-gather); wait ends it with the sums in buf, queued on the device's stream. NULL: fit
     * downloads each bucket into a host mirror for allreduce_start. */
    dt_status (*bucket_start)(void *ctx, float *dev_buf, size_t n, void **req, dt_err *err);
} dt_train_comm;

/* A comm for a single process (world 1): all-reduce and broadcast do nothing. */
dt_train_comm dt_train_comm_local(void);

/* --------------------------------------------------------------------------- progress -- */

/* A compiled metric's value under its Keras log name ("mae", "val_mae"). */
typedef struct dt_train_metric {
    char name[DT_METRIC_NAME_LEN + 4];
    double value;
} dt_train_metric;

typedef struct dt_train_step_info {
    int epoch, epochs;     /* 0-based epoch; epochs in the job */
    int64_t step, steps;   /* 1-based step within the epoch; steps per epoch */
    int64_t global_step;   /* optimizer iterations after this step */
    double loss, accuracy; /* running means over the epoch so far (as Keras's bar shows) */
    double batch_loss;     /* this step's mean loss over the global batch */
    double samples_per_s;  /* global examples per second over this step */
    double step_ms;        /* this step's wall time */
    double elapsed_s;      /* since the epoch began */
    double learning_rate;
    bool has_accuracy;
    int nmetrics;                   /* spec->nmetrics */
    const dt_train_metric *metrics; /* running values over the epoch so far */
} dt_train_step_info;

typedef struct dt_train_epoch_info {
    int epoch, epochs;
    int64_t steps;
    double loss, accuracy; /* over the whole epoch */
    bool has_accuracy;
    bool has_val; /* validation ran after this epoch */
    double val_loss, val_accuracy;
    double seconds, samples_per_s;
    int nmetrics;                       /* spec->nmetrics */
    const dt_train_metric *metrics;     /* over the whole epoch */
    const dt_train_metric *val_metrics; /* named "val_<name>"; when has_val */
} dt_train_epoch_info;

/* Any slot may be NULL. Called on the trainer thread of every replica; the daemon forwards the
 * chief's to watchers. */
typedef struct dt_train_progress {
    void *ctx;
    void (*epoch_begin)(void *ctx, int epoch, int epochs, int64_t steps);
    void (*step_end)(void *ctx, const dt_train_step_info *s);
    void (*epoch_end)(void *ctx, const dt_train_epoch_info *e);
    /* Once, before the first step, when the run resumed from a checkpoint: the position it
     * resumed at (epoch 0-based; step within it; optimizer iterations). */
    void (*resumed)(void *ctx, int epoch, int64_t step, int64_t global_step);
} dt_train_progress;

/* --------------------------------------------------------------------------- liveness -- */

/* What fit is doing, for a watchdog on another thread. */
typedef enum dt_train_doing {
    DT_TRAIN_IDLE = 0, /* not fitting (preparing, or done) */
    DT_TRAIN_WORK,     /* its own work: the next batch, forward, backward, update, validation */
    DT_TRAIN_COMM, /* in a collective: the pace of its peers, which the comm's deadlines judge */
    DT_TRAIN_IO,   /* loading or writing a checkpoint, the final weights, TensorBoard events */
} dt_train_doing;

/* fit's heartbeat: a replica whose own work stops beating is stuck (a hung device, blocked
 * I/O, a frozen thread), which its peers cannot tell from a slow step. fit stores, relaxed:
 * beat_ms: dt_now_ms() at its latest progress (every layer of a step, every phase change);
 * doing: a dt_train_doing; step: optimizer iterations done; slowest_ms: the longest stretch of
 * DT_TRAIN_WORK between two phase changes so far, so that a watchdog's limit can follow the
 * model's real pace. Zeroed by the owner before fit. */
typedef struct dt_train_pulse {
    _Atomic int64_t beat_ms;
    atomic_int doing;
    _Atomic int64_t step;
    _Atomic int64_t slowest_ms;
} dt_train_pulse;

/* ------------------------------------------------------------------------ fit -- */

typedef struct dt_train_info {
    size_t params_total, params_trainable;
    size_t train_examples;   /* in the whole training split */
    size_t local_examples;   /* this rank's share (dt_train_get_info only) */
    size_t val_examples;     /* 0 without validation */
    int64_t steps_per_epoch; /* as fit will run them */
    int local_batch;         /* batch_size / world */
} dt_train_info;

typedef struct dt_train_opts {
    int rank, world;           /* this replica; world 1 for one process */
    const char *out_dir;       /* chief: final.safetensors (and default checkpoints) go here;
                                  NULL: neither (checkpoints only if the spec names a dir) */
    const atomic_bool *cancel; /* may be NULL */
    dt_train_progress progress;
    const dt_nn_ops *ops;    /* NULL: CPU */
    int prefetch;            /* batches read ahead; default 2 */
    bool resume;             /* chief: start from the latest checkpoint if there is one */
    int64_t data_timeout_ms; /* a batch not ready by then is an error; default 600000 */
    dt_train_pulse *pulse;   /* NULL: none; else fit beats it (see dt_train_pulse) */
    /* The job's run folder in $.tensorboard.log_dir ("fmnist-3"): events go to
     * log_dir/run/train and log_dir/run/validation; NULL: log_dir/train and log_dir/validation. */
    const char *tb_run;
    /* true: no CUDA graphs (as DTRAIN_GRAPHS=0). On a device backend a one-replica fit captures
     * its step (forward, loss, backward, update) after the first step of a batch size and
     * replays it; short batches run eagerly; see lib/train/graph.c. */
    bool no_graphs;
} dt_train_opts;

typedef struct dt_train_result {
    int epochs_done;
    int64_t global_step;
    double loss, accuracy; /* last epoch */
    bool has_val;
    double val_loss, val_accuracy; /* last validation */
    int nmetrics;                  /* spec->nmetrics: last epoch's and last validation's */
    dt_train_metric metrics[DT_JOBSPEC_MAX_METRICS], val_metrics[DT_JOBSPEC_MAX_METRICS];
    uint64_t weights_hash; /* FNV-1a 64 of params + state: equal on every replica */
    char final_path[4096]; /* chief with out_dir: the final weights file, else "" */
    bool resumed;          /* started from a checkpoint */
    int64_t resumed_step;
    /* $.fit.callbacks stopped the run after this epoch (1-based; 0 = ran every epoch): an
     * EarlyStopping or TerminateOnNaN, which stop_reason tells as the log said it. Fit still
     * returns DT_OK, as Keras's fit returns, and the job succeeds. */
    int stopped_epoch;
    char stop_reason[256];
    double learning_rate; /* the optimizer's rate at the end (ReduceLROnPlateau may lower it) */
    /* Training steps run eagerly, captured into a CUDA graph, and launched as one (a captured
     * step is launched too), and why graphs were off ("" when on). */
    int64_t steps_eager, graphs_captured, steps_graphed;
    char graphs_off[256];
} dt_train_result;

typedef struct dt_trainer dt_trainer;

dt_train_opts dt_train_opts_default(void);

/* What one job may use per replica (dtraind --max-job-memory; 0, the default, is no limit).
 * Building a model refuses weights past it before allocating them; validation estimates the
 * weights, gradients, optimizer slots, the activations of a batch and the data files before it
 * loads the data, and refuses a job over it with the estimate. Validations running at once
 * share it as one budget. Set once before threads start. */
void dt_train_set_memory_limit(uint64_t bytes);
uint64_t dt_train_memory_limit(void);

/* Submit-time check of everything a run needs: builds the model (from spec->model_json), the
 * optimizer and the loss; parses the data spec (under the data root; files exist, inside the
 * root), loads the splits and checks them against the model (input shape up to axes of 1,
 * labels for the loss, classes within the outputs), and checks initial_weights against the
 * model. Errors name the JSON path ("$.compile.optimizer: ..."). info may be NULL.
 * Reading the data takes about a second for Fashion-MNIST: call it off the loop thread. */
dt_status dt_train_validate(const dt_jobspec *spec, dt_train_info *info, dt_err *err);

/* Submit-time check that the spec can run on world replicas: the global batch divides by
 * world ("$.fit.batch_size: ..."), and FILE sharding has at least world files. */
dt_status dt_train_check_world(const dt_jobspec *spec, int world, dt_err *err);

/* Prepares this replica: builds the model (seeded with data.seed), the optimizer, loads the
 * training (and validation) data and opens this rank's pipelines. */
dt_status dt_train_new(const dt_jobspec *spec, const dt_train_opts *opts, dt_trainer **out,
                       dt_err *err);
void dt_train_get_info(const dt_trainer *t, dt_train_info *info);
/* Runs fit as described at the top. res may be NULL. Returns DT_ECANCELED after a cancel (the
 * chief still writes a checkpoint of the last completed step when checkpoints are on). */
dt_status dt_train_fit(dt_trainer *t, const dt_train_comm *comm, dt_train_result *res, dt_err *err);
/* The trainer's model and optimizer (owned by it), e.g. for tests and exports. */
dt_model *dt_train_model(dt_trainer *t);
dt_optim *dt_train_optim(dt_trainer *t);
void dt_train_free(dt_trainer *t); /* NULL-safe */

/* -------------------------------------------------------- evaluate, predict, export -- */

typedef struct dt_train_eval_result {
    size_t examples;
    double loss, accuracy;
    bool has_accuracy;
    int nmetrics; /* the spec's compiled metrics, under their names (no val_) */
    dt_train_metric metrics[DT_JOBSPEC_MAX_METRICS];
} dt_train_eval_result;

/* Loads weights_path (a final weights file or a checkpoint) into the spec's model and evaluates
 * it (inference mode) on a data split: data is a split object as in $.data.train ({"format":
 * "idx", ...}), resolved under spec's data root; NULL = the spec's validation split. One
 * process. batch 0 = the spec's batch size. */
dt_status dt_train_evaluate(const dt_jobspec *spec, const char *weights_path, const cJSON *data,
                            int batch, dt_train_eval_result *out, dt_err *err);

/* Predicts the outputs of every example of the data split (labels not needed) and writes them
 * to out_path (a write path, already resolved by the caller): ".csv" -> one line per example,
 * output values separated by commas ("%.9g"); anything else -> a NumPy .npy file, float32,
 * little-endian, shape (examples, output size). *n_out (may be NULL) gets the example count. */
dt_status dt_train_predict(const dt_jobspec *spec, const char *weights_path, const cJSON *data,
                           int batch, const char *out_path, size_t *n_out, dt_err *err);

/* Writes the model weights of weights_path (no optimizer slots, no training state; metadata
 * "format" = "dtrain-weights-1", "model", "spec_hash") to out_path, atomically. */
dt_status dt_train_export(const char *weights_path, const char *out_path, dt_err *err);

/* ------------------------------------------------------------------- weight files -- */

/* Writes the model's weights (and, if o is not NULL, the optimizer's slots and iterations)
 * with Keras names; meta is NULL or a NULL-terminated list of key, value pairs added to
 * __metadata__. Atomic (temp file, fsync, rename). */
dt_status dt_train_save_weights(const dt_model *m, dt_optim *o, const char *const *meta,
                                const char *path, dt_err *err);
/* Loads every weight of the model from path (each must be present, F32, of the model's shape;
 * extra tensors are refused unless they are optimizer slots), and the slots and iterations
 * into o when o is not NULL and the file has them (a file without slots leaves them zero). */
dt_status dt_train_load_weights(dt_model *m, dt_optim *o, const char *path, dt_err *err);
/* Path of the latest checkpoint in dir (by global step) in *out (malloc'd), or DT_ENOENT. */
dt_status dt_train_latest_checkpoint(const char *dir, char **out, dt_err *err);
/* FNV-1a 64 over the model's params and state buffers. */
uint64_t dt_train_weights_hash(dt_model *m);

#endif
