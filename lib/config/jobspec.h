/*
 * jobspec.h - a training job's JSON (DESIGN.md "Job spec") parsed into a validated structure.
 *
 *     dt_jobspec_roots roots = {.data_root = "/srv/data", .state_dir = "/var/lib/dtrain"};
 *     dt_jobspec spec;
 *     if (dt_jobspec_parse(text, len, &roots, &spec, &err) != DT_OK)
 *         reply(err.msg);          // "$.fit.batch_size: must be a positive integer, got -3"
 *     ... dt_train_validate(&spec, ...) (lib/train checks the model, optimizer, loss, data)
 *     dt_jobspec_destroy(&spec);
 *
 * This module checks the STRUCTURE of a spec: types, ranges, known keys, Keras defaults for what
 * is left out, and where its paths point. It does not build the model nor open the data (config
 * may not include nn or data, see DESIGN's dependency rules): it hands lib/train the model JSON
 * text, the optimizer and data objects as cJSON, and the resolved paths.
 *
 * Paths (DESIGN Security). Reads (model file, initial_weights, data files) resolve under
 * roots->data_root; writes (checkpoint.dir, tensorboard.log_dir) under roots->state_dir. A
 * relative path is relative to its root; an absolute one must lie inside it. A path whose
 * resolved form leaves the root - through ".." or a symlink anywhere along it - is refused
 * with DT_EPERM naming the JSON path. A NULL root means "no confinement" (the CLI's local
 * use, tests): relative paths are then relative to the working directory.
 * A write dir may not be the state dir itself nor lie in the daemon's own trees there (jobs/,
 * where every job's files live, and eval/): a job writes only under its own dir or one it
 * names; the job service refuses a dir another job already uses.
 * Data files are checked by lib/train with dt_jobspec_check_read after the data module has
 * expanded its globs.
 *
 * Limits: the text at most DT_MAX_JOBSPEC bytes, a model file at most DT_MAX_MODEL_JSON;
 * truncated or non-object JSON is DT_EINVAL; more than DT_MAX_JOBSPEC bytes is DT_ETOOBIG.
 *
 * Ownership: a dt_jobspec owns every string and cJSON it points to; dt_jobspec_destroy frees
 * them (and is a no-op on a zeroed struct). A parsed spec is immutable, so several threads may
 * read it at once.
 */
#ifndef DT_CONFIG_JOBSPEC_H
#define DT_CONFIG_JOBSPEC_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cJSON cJSON;

#define DT_JOBSPEC_NAME_LEN    128
#define DT_JOBSPEC_MAX_CLASSES 65536 /* $.fit.class_weight's largest class + 1 */

typedef struct dt_jobspec_roots {
    const char *data_root; /* reads; NULL = no confinement */
    const char *state_dir; /* writes; NULL = no confinement */
} dt_jobspec_roots;

#define DT_JOBSPEC_MAX_DEVICES 64 /* replicas in one daemon, at most */

typedef enum dt_jobspec_comm {
    DT_JOBSPEC_COMM_AUTO = 0,
    DT_JOBSPEC_COMM_RING,
    DT_JOBSPEC_COMM_NCCL,
} dt_jobspec_comm;

/* $.strategy.compression: the wire format of the gradient all-reduces (opt-in, as DDP's
 * fp16/bf16 compress hooks and Horovod's Compression.fp16). Weights, BatchNormalization
 * statistics and metrics always travel as exact float32. */
typedef enum dt_jobspec_compression {
    DT_JOBSPEC_COMPRESS_NONE = 0, /* "none": float32, exact */
    DT_JOBSPEC_COMPRESS_FLOAT16,  /* "float16": IEEE half, round to nearest even */
    DT_JOBSPEC_COMPRESS_BFLOAT16, /* "bfloat16": float32's range, 8 bits of mantissa */
} dt_jobspec_compression;

/* $.strategy.precision: how float32 matrix products are computed on GPUs (CPUs always compute
 * them in float32; TF's set_float32_matmul_precision takes "tf32" there and ignores it too). */
typedef enum dt_jobspec_precision {
    DT_JOBSPEC_PRECISION_FLOAT32 = 0, /* "float32": strict float32 (cuBLAS's pedantic math) */
    DT_JOBSPEC_PRECISION_TF32, /* "tf32": TensorFloat-32 tensor cores (10-bit mantissas in) */
} dt_jobspec_precision;

/* $.compile.metrics beyond "accuracy": Keras's metrics by their function names, class names or
 * {"class_name", "config"} (Keras 2 and 3), parsed by metrics.c; lib/train computes them. */
typedef enum dt_metric_kind {
    DT_METRIC_MAE = 0,                     /* MeanAbsoluteError: mean |y - p| */
    DT_METRIC_MSE,                         /* MeanSquaredError: mean (y - p)^2 */
    DT_METRIC_RMSE,                        /* RootMeanSquaredError: sqrt(mean (y - p)^2) */
    DT_METRIC_BINARY_ACCURACY,             /* mean over outputs of (p > threshold) == y */
    DT_METRIC_CATEGORICAL_ACCURACY,        /* argmax p == argmax y */
    DT_METRIC_SPARSE_CATEGORICAL_ACCURACY, /* argmax p == label */
    DT_METRIC_TOP_K,                       /* argmax y among the k largest p (ties count in) */
    DT_METRIC_SPARSE_TOP_K,                /* label among the k largest p */
    DT_METRIC_PRECISION,                   /* tp / (tp + fp) at threshold */
    DT_METRIC_RECALL,                      /* tp / (tp + fn) at threshold */
    DT_METRIC_AUC,                         /* area under the ROC or PR curve */
    DT_METRIC_MEAN_IOU,                    /* mean over classes of tp / (tp + fp + fn) */
} dt_metric_kind;

typedef enum dt_metric_summation {
    DT_METRIC_SUM_INTERPOLATION = 0, /* "interpolation": mid-points (ROC), Davis-Goadrich (PR) */
    DT_METRIC_SUM_MINORING,          /* "minoring": the lower of each interval's ends */
    DT_METRIC_SUM_MAJORING,          /* "majoring": the higher */
} dt_metric_summation;

#define DT_METRIC_MAX_THRESHOLDS 10000 /* AUC's num_thresholds, at most */
#define DT_METRIC_MAX_CLASSES    1024  /* MeanIoU's num_classes, at most (a square of counts) */

#define DT_JOBSPEC_MAX_METRICS 8
#define DT_METRIC_NAME_LEN     40 /* the log name; "val_" is put in front of it too */

typedef struct dt_jobspec_metric {
    dt_metric_kind kind;
    char name[DT_METRIC_NAME_LEN]; /* the log name: the string as given, else config.name, else
                                      Keras's default ("mean_absolute_error") */
    float threshold;               /* binary_accuracy, precision, recall; default 0.5 */
    int k;                         /* top-k; default 5 */
    int class_id;                  /* precision, recall: one output column; -1 = all */
    /* AUC: num_thresholds (default 200), curve "PR" (else "ROC"), the summation, and whether
     * the predictions are logits (a sigmoid first) */
    int num_thresholds;
    bool curve_pr;
    dt_metric_summation summation;
    bool from_logits;
    /* MeanIoU: num_classes (required), ignore_class (-1 none), and whether y_true and y_pred
     * are class ids (sparse, Keras's defaults) or rows to argmax (OneHotMeanIoU: both not) */
    int num_classes;
    int ignore_class;
    bool sparse_y_true, sparse_y_pred;
} dt_jobspec_metric;

/* Parses one entry of $.compile.metrics (path is "$.compile.metrics[i]"); DT_ENOTSUP names an
 * unsupported metric or config key, DT_EINVAL a bad value. */
dt_status dt_jobspec_metric_parse(const cJSON *it, const char *path, dt_jobspec_metric *out,
                                  dt_err *err);

/* $.fit.callbacks: Keras's callbacks by class name, as {"class_name", "config"} (the name alone
 * takes the defaults); parsed by callbacks.c, run by lib/train/callbacks.c. */
typedef enum dt_callback_kind {
    DT_CALLBACK_EARLY_STOPPING = 0,
    DT_CALLBACK_REDUCE_LR_ON_PLATEAU,
    DT_CALLBACK_TERMINATE_ON_NAN,
    DT_CALLBACK_MODEL_CHECKPOINT,
    DT_CALLBACK_CSV_LOGGER,
    DT_CALLBACK_LR_SCHEDULER, /* LearningRateScheduler */
} dt_callback_kind;

typedef enum dt_callback_mode {
    DT_CALLBACK_MODE_AUTO = 0, /* by the monitor's name, as each Keras class decides it */
    DT_CALLBACK_MODE_MIN,
    DT_CALLBACK_MODE_MAX,
} dt_callback_mode;

#define DT_JOBSPEC_MAX_CALLBACKS 8

#define DT_JOBSPEC_MAX_LR_EPOCHS 256 /* LearningRateScheduler's list of rates */

typedef struct dt_jobspec_callback {
    dt_callback_kind kind;
    char monitor[DT_METRIC_NAME_LEN + 4]; /* a log name: "val_loss" (default), "accuracy", ... */
    dt_callback_mode mode;
    double min_delta; /* EarlyStopping 0 (kept as |min_delta|), ReduceLROnPlateau 1e-4 */
    int patience;     /* EarlyStopping 0, ReduceLROnPlateau 10 */
    /* EarlyStopping */
    bool has_baseline;
    double baseline;
    bool restore_best_weights; /* false */
    int start_from_epoch;      /* 0 */
    /* ReduceLROnPlateau */
    double factor; /* 0.1; [0, 1) */
    int cooldown;  /* 0 */
    double min_lr; /* 0 */
    /* ModelCheckpoint: filepath, a file name in the job's checkpoint dir with Keras's
     * placeholders ({epoch:02d}, {val_loss:.2f}); CSVLogger: filename, in the job's dir */
    char file[256];
    bool save_best_only;        /* ModelCheckpoint: false */
    bool has_initial_threshold; /* ModelCheckpoint: initial_value_threshold given */
    double initial_threshold;
    char separator; /* CSVLogger: ',' */
    bool append;    /* CSVLogger: false */
    /* LearningRateScheduler: Keras's takes a Python function of the epoch; a job gives the
     * common forms as data: a rate per epoch (the last one repeats), or a Keras
     * LearningRateSchedule object (its JSON text, parsed by the trainer) evaluated at the
     * epoch index - ExponentialDecay with staircase is a step decay. */
    double lr_list[DT_JOBSPEC_MAX_LR_EPOCHS];
    int n_lr_list;
    char lr_schedule[1024];
    bool verbose; /* LearningRateScheduler: log each epoch's rate */
} dt_jobspec_callback;

/* Parses one entry of $.fit.callbacks (path is "$.fit.callbacks[i]"); DT_ENOTSUP names an
 * unsupported callback or config key, DT_EINVAL a bad value. */
dt_status dt_jobspec_callback_parse(const cJSON *it, const char *path, dt_jobspec_callback *out,
                                    dt_err *err);
/* The callback's Keras class name. */
const char *dt_jobspec_callback_name(dt_callback_kind k);

typedef struct dt_jobspec {
    char name[DT_JOBSPEC_NAME_LEN]; /* $.name; default "job"; [A-Za-z0-9._-] only */

    /* $.model: inline object or a path (resolved under data_root). */
    char *model_json; /* the model's JSON text (inline object printed, or the file's text) */
    size_t model_json_len;
    char *model_path; /* resolved file, or NULL when inline */

    char *initial_weights; /* resolved path, or NULL */

    /* $.compile */
    cJSON *optimizer;     /* string or {"class_name", "config"}; default "rmsprop" (Keras) */
    char loss[64];        /* loss name or class name; required */
    bool from_logits;     /* $.compile.loss.config.from_logits (default false) */
    cJSON *loss_json;     /* $.compile.loss as given (name or object); its config is checked by
                             lib/train (dt_loss_from_json) */
    bool metric_accuracy; /* "accuracy" or "acc" listed: Keras resolves it by the loss and the
                             output shape, and logs it as "accuracy" */
    int nmetrics;         /* the other metrics, in the order given */
    dt_jobspec_metric metrics[DT_JOBSPEC_MAX_METRICS];

    /* $.data: checked by the data module (dt_data_spec_parse with data_root as base). */
    cJSON *data;

    /* $.fit (Keras defaults) */
    int epochs;              /* default 1 */
    int batch_size;          /* GLOBAL batch, default 32 */
    int64_t steps_per_epoch; /* 0 = the whole data set (null) */
    int validation_freq;     /* default 1 */
    /* $.fit.class_weight, Keras's {"class": weight}: a training sample's loss counts
     * class_weight[its class] times (classes past n_class_weight, or not named: 1). Its class is
     * the integer label, the rounded value of a one-column target, or a one-hot row's argmax. */
    float *class_weight;
    int n_class_weight;
    /* $.fit.validation_split, (0, 1): the last part of the training data (before shuffling)
     * is the validation data, as Keras's fit takes it; 0: none. */
    double validation_split;
    int verbose;    /* -1 "auto" (default), 0 silent, 1 progress bar, 2 a line per
                       epoch: how `dtrain watch` shows the job */
    int ncallbacks; /* $.fit.callbacks, in the order given (Keras calls them so) */
    dt_jobspec_callback callbacks[DT_JOBSPEC_MAX_CALLBACKS];

    /* $.strategy */
    dt_jobspec_comm communication; /* default AUTO */
    double bucket_mb;              /* default 25; (0, 1024] */
    /* The bucket of the last layers, which goes on the wire first: small, so the all-reduce
     * starts while most of backward is still to run (DDP's 1 MB first bucket). */
    double first_bucket_mb;             /* default 1; (0, 1024] */
    dt_jobspec_compression compression; /* default NONE */
    dt_jobspec_precision precision;     /* default FLOAT32 */
    /* $.strategy.devices: the replicas each daemon runs, as TF's device strings ("/gpu:0",
     * "/GPU:1", "/device:GPU:2", "/cpu:0", ...; any case); ndevices replicas, devices[i] the N
     * of the i-th "/gpu:N" or "/cpu:N" (distinct), gpu whether they are GPUs (a job's replicas
     * are all GPUs or all CPUs). Default one replica, /cpu:0 (every visible GPU once the CUDA
     * trainer is complete). */
    bool gpu;
    int ndevices;
    int devices[DT_JOBSPEC_MAX_DEVICES];

    /* $.checkpoint; has_checkpoint false when absent (the trainer then uses its own dir). */
    bool has_checkpoint;
    char *checkpoint_dir;    /* resolved under state_dir, or NULL */
    bool save_freq_epoch;    /* "epoch" (default) */
    int64_t save_freq_steps; /* N when save_freq is an integer, else 0 */
    int keep;                /* default 3; >= 1 */

    char *tensorboard_dir; /* $.tensorboard.log_dir resolved under state_dir, or NULL */
    /* The same two relative to the state dir, normalised ("ckpt/mnist"), or NULL: what the
     * job service compares so that no two jobs share a dir (dt_jobspec_dirs_overlap). */
    char *checkpoint_rel, *tensorboard_rel;

    /* $.fault_tolerance: what the job service does when a task dies or hangs mid-job. */
    int max_restarts;     /* default 3: restarts from the latest checkpoint before it fails */
    int rejoin_timeout_s; /* default 300: how long a lost task may take to come back */
    int min_workers;      /* default 0: every ring task; fewer lets the job shrink */
    /* default 4: a trainer whose own work (not a wait on its peers) makes no progress this
     * long, or 4 times its slowest step so far if longer, is hung (12 times for file I/O) */
    int hang_timeout_s;

    /* FNV-1a 64 of the canonical (unformatted cJSON) spec: checkpoints record it so a resume
     * refuses a checkpoint of another spec. */
    uint64_t hash;
    char hash_hex[17];

    dt_jobspec_roots roots; /* copies of the roots (owned), for lib/train's path checks */
} dt_jobspec;

/* Parses and validates a job spec. On failure out is left zeroed and err names the JSON path
 * and says what to do; codes: DT_EINVAL (bad JSON, types, ranges, unknown keys), DT_ETOOBIG,
 * DT_EPERM (a path escaping its root), DT_ENOENT (a model file or initial_weights missing). */
dt_status dt_jobspec_parse(const char *json, size_t len, const dt_jobspec_roots *roots,
                           dt_jobspec *out, dt_err *err);
/* The same from a file (at most DT_MAX_JOBSPEC bytes); errors name the file too. */
dt_status dt_jobspec_parse_file(const char *path, const dt_jobspec_roots *roots, dt_jobspec *out,
                                dt_err *err);
void dt_jobspec_destroy(dt_jobspec *spec);

/* The dirs a job writes to besides its own (checkpoint.dir, tensorboard.log_dir), relative to
 * state_dir as in dt_jobspec: for a job the service already holds, without validating the rest
 * of its spec again. A missing key, a spec that no longer parses or no state_dir gives NULL. */
void dt_jobspec_write_dirs(const char *json, size_t len, const char *state_dir, char **ckpt_rel,
                           char **tb_rel);
/* Whether two such relative dirs are the same dir or one lies inside the other. */
bool dt_jobspec_dirs_overlap(const char *a, const char *b);

/* Resolves path for reading under root (NULL = unconfined): relative to root, symlinks
 * followed; the file must exist. *out (malloc'd, caller frees) is the real path. Refuses an
 * escape with DT_EPERM, a missing file with DT_ENOENT; messages start with json_path. */
dt_status dt_jobspec_resolve_read(const char *root, const char *path, const char *json_path,
                                  char **out, dt_err *err);
/* Resolves a path for writing under root: it need not exist yet; the part that exists is
 * resolved with its symlinks and must lie inside root, and the rest may hold no "..". */
dt_status dt_jobspec_resolve_write(const char *root, const char *path, const char *json_path,
                                   char **out, dt_err *err);
/* DT_OK when the existing file `path` (already joined with its root) lies inside root. */
dt_status dt_jobspec_check_read(const char *root, const char *path, const char *json_path,
                                dt_err *err);

const char *dt_jobspec_comm_name(dt_jobspec_comm c);
/* "none", "float16" or "bfloat16". */
const char *dt_jobspec_compression_name(dt_jobspec_compression c);
/* "float32" or "tf32". */
const char *dt_jobspec_precision_name(dt_jobspec_precision p);

#endif
