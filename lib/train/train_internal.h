/* train_internal.h - helpers shared by the files of lib/train (dt__train_*). Not installed. */
#ifndef DT_TRAIN_INTERNAL_H
#define DT_TRAIN_INTERNAL_H

#include "data/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "train/train.h"
#include "io/tfevents.h"

#include <stdio.h>

/* memory.c: a job's estimated bytes per replica, checked against dt_train_memory_limit. */
typedef struct dt_train_mem {
    uint64_t weights, gradients, slots, activations, data, total;
    int batch;
} dt_train_mem;
/* Bytes of a data source's files as they are on disk (a lower bound for .gz). */
uint64_t dt__train_source_bytes(const dt_data_source *s);
/* DT_ETOOBIG with the breakdown when m->total passes the limit. */
dt_status dt__train_mem_check(const dt_train_mem *m, dt_err *err);
/* Holds bytes of the budget validations share (waits up to 30 s for room; DT_ENOMEM then). */
dt_status dt__train_mem_reserve(uint64_t bytes, dt_err *err);
void dt__train_mem_release(uint64_t bytes);

/* graph.c: CUDA graphs of fit's step, one per batch size (and with or without sample
 * weights), DT__TRAIN_GRAPHS at most. Used where the whole step runs on this thread's device:
 * one replica, or several whose collectives are queued on its stream (NCCL). */
#define DT__TRAIN_GRAPHS 4
typedef struct dt__train_graph {
    int n;
    bool weighted;
    void *graph; /* NULL until captured */
} dt__train_graph;
typedef struct dt__train_graphs {
    bool on;
    char why[256]; /* why not on */
    uint64_t gen;  /* dt_model_graph_gen the graphs hold */
    dt__train_graph s[DT__TRAIN_GRAPHS];
    int n;
    int64_t eager, captured, replayed; /* steps of each kind */
} dt__train_graphs;
/* off (why the caller wants none; NULL: it does), DTRAIN_GRAPHS=0 or a model that cannot be
 * graphed (dt_model_graph_fit) leaves them off, with why. */
void dt__train_graphs_init(dt__train_graphs *gs, dt_model *m, const char *off);
void dt__train_graphs_free(dt__train_graphs *gs, dt_model *m);
/* The collectives of a step between backward and the update (several replicas): fn queues
 * them on this thread's stream, where a capture records them. */
typedef struct dt__train_reduce {
    dt_status (*fn)(void *ctx, dt_err *err);
    void *ctx;
} dt__train_reduce;
/* Queues one step (forward, loss, backward, r's collectives when r is not NULL, the
 * optimizer's update) of b: eagerly (graphs off,
 * a batch that is not full, the first of its size), by capturing it into a graph and launching
 * that, or by launching the graph of its size. The caller then ends the step
 * (dt_model_train_end). */
dt_status dt__train_graph_step(dt__train_graphs *gs, dt_model *m, dt_optim *o, const dt_loss *loss,
                               const dt_model_batch *b, int global_batch, bool full,
                               const dt__train_reduce *r, dt_err *err);

/* feed.c: fit's device feed. Batch k + 1 goes to the device on the copy stream (put, after
 * step k is queued) while step k computes; take hands step k + 1 its device copies after the
 * compute stream waits for them. Two slots: put needs the one not in use (DT_ESTATE else).
 * With a data set on the device (feed_set, before any put) a put uploads only row numbers and
 * take gathers the rows there. Owned by the trainer thread, which the ops are bound to. */
typedef struct dt__train_feed dt__train_feed;
/* cap: rows per slot (grows on demand); x_size floats per example; labels: int32 labels;
 * y_size: float targets per example (0: none). */
dt_status dt__train_feed_new(const dt_nn_ops *o, int cap, size_t x_size, bool labels, size_t y_size,
                             dt__train_feed **out, dt_err *err);
void dt__train_feed_free(dt__train_feed *f);
/* Device bytes of ds as the feed keeps it, and its decoded rows in *rows (may be NULL). */
uint64_t dt__train_feed_set_bytes(const dt_dataset *ds, size_t *rows);
/* Uploads ds (borrowed: it outlives the feed) decoded as the pipeline decodes it. */
dt_status dt__train_feed_set(dt__train_feed *f, const dt_dataset *ds, dt_err *err);
bool dt__train_feed_on_device(const dt__train_feed *f);
/* Copies b (and its sample weights sw, or NULL) into the free slot and queues its upload. */
dt_status dt__train_feed_put(dt__train_feed *f, const dt_batch *b, const float *sw, dt_err *err);
/* The batch put last, or NULL when none is queued: *mb gets its host copies (labels, targets,
 * sample weights; x NULL) and device copies; the returned batch (n, global_n, labels...) stays
 * valid until the put after next. */
const dt_batch *dt__train_feed_take(dt__train_feed *f, dt_model_batch *mb);
/* The step that took the last batch is queued: its slot may be refilled after it. */
void dt__train_feed_done(dt__train_feed *f);
/* Drops a queued batch (an epoch's start). */
void dt__train_feed_reset(dt__train_feed *f);
/* fit's feed for ds on o (*out NULL: none): on for a device backend (DTRAIN_FEED=0 turns it off,
 * =1 on for any), with ds kept on the device when it takes at most a quarter of the free device
 * memory (DTRAIN_DATA_ON_DEVICE=0 never, =1 whenever it fits). what names the split in the log
 * ("training", "validation"). */
dt_status dt__train_feed_open(const dt_nn_ops *o, const dt_dataset *ds, int local_batch,
                              const char *what, dt__train_feed **out, dt_err *err);

/* Builds the spec's model (seeded), its loss and (if cfg is not NULL) the optimizer config.
 * Errors name $.model / $.compile.*. */
dt_status dt__train_build(const dt_jobspec *spec, const dt_nn_ops *ops, uint64_t seed, dt_model **m,
                          dt_loss *loss, dt_optim_cfg *cfg, dt_err *err);
/* Parses a split object under the spec's data root and checks that its files lie inside it. */
dt_status dt__train_source(const dt_jobspec *spec, const cJSON *obj, const char *json_path,
                           dt_data_source *out, dt_err *err);
/* Parses $.data the same way. */
dt_status dt__train_data_spec(const dt_jobspec *spec, dt_data_spec *out, dt_err *err);
/* Checks that a loaded split fits the model: features per example, labels for the loss. */
dt_status dt__train_check_data(const dt_model *m, const dt_loss *loss, const dt_dataset *ds,
                               const char *json_path, bool need_labels, dt_err *err);
/* Deletes all but the keep newest ckpt-N.safetensors of dir (failures are logged). */
void dt__train_prune_checkpoints(const char *dir, int keep);
/* metrics.c: the compiled metrics' sums (see metrics.c), laid out metric after metric. */
size_t dt__train_metric_state_size(const dt_jobspec_metric *m);
size_t dt__train_metrics_state_size(const dt_jobspec *spec);
/* Adds a batch to one metric's sums: pred (n, cols); targets (n, cols) or labels (n). */
void dt__train_metric_update(const dt_jobspec_metric *m, const float *pred, int cols,
                             const float *targets, const int32_t *labels, int n, double *state);
double dt__train_metric_value(const dt_jobspec_metric *m, const double *state);
/* Every metric of the spec: the sums (dt__train_metrics_state_size doubles) and the values,
 * named "<name>" or "val_<name>" (out holds spec->nmetrics). */
void dt__train_metrics_update(const dt_jobspec *spec, const float *pred, int cols,
                              const float *targets, const int32_t *labels, int n, double *state);
void dt__train_metrics_values(const dt_jobspec *spec, const double *state, bool val,
                              dt_train_metric *out);
/* Checks the metrics against the model (class_id within its outputs). */
dt_status dt__train_metrics_check(const dt_jobspec *spec, const dt_model *m, dt_err *err);
/* callbacks.c: Keras 3's EarlyStopping and ReduceLROnPlateau decisions, on an epoch's logs. */
typedef struct dt__train_cb_state {
    int wait;
    double best;          /* from +-inf (ModelCheckpoint: initial_value_threshold) */
    bool has_best;        /* set from the start (Keras's older EarlyStopping began with None) */
    int best_epoch;       /* 0-based */
    int stopped_epoch;    /* 0: not stopped (Keras's convention) */
    int cooldown_counter; /* ReduceLROnPlateau */
    bool has_weights;     /* EarlyStopping: best weights were taken (restore_best_weights) */
} dt__train_cb_state;
/* +1 when larger is better, -1 when smaller, by mode or each class's "auto" rule; 0 when
 * EarlyStopping's "auto" cannot tell (Keras raises). */
int dt__train_cb_direction(const dt_jobspec *spec, const dt_jobspec_callback *cb);
/* on_train_begin. */
void dt__train_cb_reset(const dt_jobspec_callback *cb, int dir, dt__train_cb_state *s);
/* EarlyStopping.on_epoch_end for epoch (0-based) with the monitored value when has: true to
 * stop; *take_best when the current weights become the best ones. */
bool dt__train_es_epoch_end(const dt_jobspec_callback *cb, int dir, dt__train_cb_state *s,
                            int epoch, bool has, double current, bool *take_best);
/* ReduceLROnPlateau.on_epoch_end with the optimizer's rate lr: true with *new_lr to set. */
bool dt__train_rlrop_epoch_end(const dt_jobspec_callback *cb, int dir, dt__train_cb_state *s,
                               bool has, double current, double lr, double *new_lr);
/* The value of the log `monitor` in an epoch's logs; false when it has none this epoch. */
bool dt__train_cb_lookup(const dt_jobspec *spec, const char *monitor, const dt_train_epoch_info *e,
                         double *out);
/* Submit-time check: monitors name this job's logs, val_ ones have validation data, "auto" can
 * decide, and ReduceLROnPlateau has a constant rate to set (cfg may be NULL). */
/* A LearningRateScheduler's schedule object (callback i), errors naming its path. */
dt_status dt__train_lr_schedule(const dt_jobspec_callback *cb, int i, dt_optim_schedule *out,
                                dt_err *err);
dt_status dt__train_callbacks_check(const dt_jobspec *spec, bool has_validation,
                                    const dt_optim_cfg *cfg, dt_err *err);
/* The states of n callbacks as checkpoint metadata text, and back (false on a malformed one). */
void dt__train_cb_format(const dt__train_cb_state *s, int n, char *out, size_t cap);
bool dt__train_cb_parse(const char *text, dt__train_cb_state *s, int n);
/* restore_best_weights across a resume: callback i's best params + state (np + ns floats) as
 * "best<i>-<global step>.safetensors" beside the checkpoint of that step, written before it;
 * loaded back into best; and the files whose checkpoint was pruned removed. */
dt_status dt__train_cb_save_best(dt_model *m, float *best, const char *dir, int i, int64_t gs,
                                 const char *spec_hash, dt_err *err);
dt_status dt__train_cb_load_best(dt_model *m, float *best, const char *dir, int i, int64_t gs,
                                 dt_err *err);
void dt__train_cb_prune_best(const char *dir);
/* An epoch's logs as Keras's callbacks get them: loss, accuracy, the compiled metrics, their
 * val_ forms (has false when validation did not run) and, when lr is not NaN, learning_rate
 * (ReduceLROnPlateau adds it). out holds DT__TRAIN_MAX_LOGS. */
#define DT__TRAIN_MAX_LOGS (2 * (2 + DT_JOBSPEC_MAX_METRICS) + 1)
typedef struct dt__train_log {
    char name[DT_METRIC_NAME_LEN + 8];
    double value;
    bool has;
} dt__train_log;
int dt__train_epoch_logs(const dt_jobspec *spec, const dt_train_epoch_info *e, double lr,
                         dt__train_log *out);
/* v as Python's repr writes a float ("0.5", "1.0", "1e-05"): CSVLogger's cells. */
void dt__train_py_float(double v, char *out, size_t cap);
/* A ModelCheckpoint filepath with its {epoch:02d} and {val_loss:.2f} filled (epoch 1-based, as
 * Keras passes epoch + 1); DT_EINVAL names an unknown field or format. */
dt_status dt__train_cb_filename(const char *pattern, int epoch, const dt__train_log *logs, int n,
                                char *out, size_t cap, dt_err *err);
/* CSVLogger: the file, its columns (fixed at the first row, sorted) and separator. Opened with
 * "w", or "a" when append; on a resume (resumed_epoch >= 0) the rows of epochs from
 * resumed_epoch on are dropped first and the columns read back from the header. */
typedef struct dt__train_csv {
    FILE *f;
    char sep;
    bool header_done;
    int nkeys;
    char keys[DT__TRAIN_MAX_LOGS][DT_METRIC_NAME_LEN + 8];
} dt__train_csv;
dt_status dt__train_csv_open(dt__train_csv *c, const char *path, bool append, char sep,
                             int64_t resumed_epoch, dt_err *err);
dt_status dt__train_csv_row(dt__train_csv *c, int epoch, const dt__train_log *logs, int n,
                            dt_err *err);
void dt__train_csv_close(dt__train_csv *c);

/* mkdir -p. */
dt_status dt__train_mkdirs(const char *dir, dt_err *err);

/* fit's state of one replica (fit.c sets it up and runs the epochs; step.c runs each step). */
struct dt_trainer {
    const dt_jobspec *spec; /* borrowed */
    dt_train_opts opts;
    dt_model *m;
    dt_loss loss;
    dt_optim_cfg cfg;
    dt_optim *opt;
    dt_data_spec ds;
    dt_dataset *train, *val;
    dt_pipeline *p, *pv;
    int64_t steps;  /* per epoch, as run */
    char *ckpt_dir; /* chief's checkpoint dir, or NULL */
    uint64_t seed;

    /* Fusion buckets over the grads buffer, last layers first: bucket k is
     * [lo[k], hi[k]) and lo strictly decreases with k. */
    size_t *lo, *hi;
    size_t nbuckets;
    size_t nwire; /* buckets that go out on their own; the last one rides in the tail when small */
    /* The step in flight (set by run_step for the grad-ready hook). */
    const dt_train_comm *comm;
    void **reqs;
    size_t started;
    dt_status hook_st;
    dt_err hook_err;
    /* (state size + 4 + the last bucket when it rides along): moving statistics, metrics and
     * the first layers' gradients of one step, in one all-reduce after backward. */
    float *tail;
    /* When the ops' memory is a device's (a GPU), the ring cannot read the grads: each bucket
     * is downloaded into this host mirror (np floats), all-reduced there and uploaded back;
     * bcast stages broadcasts of device buffers. NULL on the CPU, where the ring reads the
     * model's own buffers. */
    float *hg, *bcast;
    /* The compiled metrics' sums (spec->nmetrics metrics, nms doubles each): this step's (after
     * the all-reduce), the epoch's so far, and a validation's; their values as reported. */
    size_t nms;
    double *mstep, *mepoch, *mval;
    dt_train_metric mrun[DT_JOBSPEC_MAX_METRICS], mvalout[DT_JOBSPEC_MAX_METRICS];

    /* Where an epoch's steps spend their time (the first step of an epoch left out: it warms
     * caches and pages), logged at the epoch's end: the exposed wait is the all-reduce time
     * that backward did not hide. Seconds, summed over n steps. */
    struct {
        double data, compute, wait, update;
        double ahead; /* the first bucket's start to the end of backward: the overlap window */
        /* comm.busy's in-host and host-ring time within the steps (split: comm.busy given);
         * they overlap backward and the wait, and each other (bucket k on the ring while
         * bucket k+1 is reduced in the host) */
        double in_host, ring;
        bool split;
        int64_t n;
    } phase;
    double first_start; /* when this step's first bucket was started */
    int64_t phase_at;   /* dt_now_ms() of the last pulse phase change */

    dt_tfevents *tb, *tbv; /* TensorBoard's train and validation runs (chief) */
    float *cw;             /* $.fit.class_weight: this batch's sample weights */
    /* The device feed (feed.c; NULL: batches are uploaded inside their step) and whether the
     * step in progress should fetch and put the next one. Made by dt_train_fit on its thread. */
    dt__train_feed *feed;
    bool feed_ahead;
    /* Validation's own feed (NULL: each batch uploaded in its evaluation). A second feed rather
     * than the training one reused between epochs: a feed gathers from the one set it holds on
     * the device, and the training set stays there for the next epoch; the validation split
     * gets its own slots and, by the same quarter-of-free-memory rule, its own device copy. */
    dt__train_feed *vfeed;
    /* p, pv were opened with no_x (their set is on the device, gathered by the feed) */
    bool p_no_x, pv_no_x;
    /* LearningRateScheduler objects, parsed once */
    dt_optim_schedule lrs[DT_JOBSPEC_MAX_CALLBACKS];
    int cw_cap;

    /* $.fit.callbacks: each one's direction (+1 larger is better), its state, and for
     * EarlyStopping's restore_best_weights the best epoch's params + state (np + ns floats). */
    int cbdir[DT_JOBSPEC_MAX_CALLBACKS];
    dt__train_cb_state cb[DT_JOBSPEC_MAX_CALLBACKS];
    float *cbbest[DT_JOBSPEC_MAX_CALLBACKS];
    bool on_nan;                                 /* a TerminateOnNaN is among them */
    dt__train_csv csv[DT_JOBSPEC_MAX_CALLBACKS]; /* CSVLogger's files (chief) */
    /* The epoch's sums so far (loss, correct, n; the metrics' in mepoch), kept in checkpoints
     * so that an epoch resumed mid-way logs what the unbroken epoch logs, and the callbacks
     * decide alike; epsum_restored when a resume brought them. */
    double epsum[3];
    bool epsum_restored;
    double resume_lr; /* a resumed checkpoint's learning rate (ReduceLROnPlateau), else NaN */
    dt__train_graphs graphs; /* CUDA graphs of the step (graph.c), set up by fit */
    /* The comm queues its collectives on this thread's stream (dt_train_comm.stream_ordered):
     * the step's collectives run on the device, the moving statistics scaled by inv_world
     * (state-size floats of 1 / world in device memory; NULL without state). */
    bool dev_comm;
    float *inv_world;
};

/* step.c: one replica's step. */
typedef struct dt__train_sums {
    double loss, correct, n;
} dt__train_sums;
/* A phase change of opts.pulse; a stretch of own work that ends here may raise slowest_ms. */
void dt__train_pulse(dt_trainer *t, dt_train_doing d);
/* More than one replica and a comm that all-reduces. */
bool dt__train_distributed(const dt_train_comm *c);
/* The fusion buckets over the grads (cut at layer boundaries, the same on every replica) and
 * the step's tail buffer. */
dt_status dt__train_plan_buckets(dt_trainer *t, dt_err *err);
/* The model's grad-ready hook (ctx: the trainer): starts every bucket lying above offset. */
void dt__train_on_grad_ready(void *ctx, size_t offset);
/* Puts b (NULL: the data ended, nothing to put) in the feed with its class weights. */
dt_status dt__train_put(dt_trainer *t, const dt_batch *b, dt_err *err);
/* One synchronous step of b (fed: its device copies from the feed, or NULL to upload b in the
 * step): *step gets the all-reduced loss * n, correct and n, t->mstep the metrics' sums, and
 * *stop is set when some replica asked to cancel. */
dt_status dt__train_run_step(dt_trainer *t, const dt_train_comm *c, const dt_batch *b,
                             const dt_model_batch *fed, dt__train_sums *step, bool *stop,
                             dt_err *err);
/* Sets up the step for comm c (fit's start): dev_comm and inv_world. */
dt_status dt__train_step_setup(dt_trainer *t, const dt_train_comm *c, dt_err *err);
/* A validation over this replica's share of the validation split, the sums all-reduced. */
dt_status dt__train_validate_epoch(dt_trainer *t, const dt_train_comm *c, int64_t epoch,
                                   dt__train_sums *out, dt_err *err);

#endif
