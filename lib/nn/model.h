/*
 * model.h - a Keras model, built from model.to_json(), trained one batch at a time.
 *
 *     dt_model *m;
 *     dt_model_opts o = {.seed = 42};                         // CPU backend by default
 *     if (dt_model_from_json(text, len, &o, &m, &err) != DT_OK) ...   // refuses what it can't do
 *     dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
 *     dt_model_batch b = {.x = x, .labels = y, .n = 64};            // x (64, 28, 28, 1), y (64)
 * int32 dt_step_stats s; dt_model_train_step(m, &loss, &b, 64, &s, &err);        // forward, loss,
 * backward dt_optim_step(opt, &err);                               // nn/optim.h
 *
 * Memory: all trainable parameters live in one flat buffer, their gradients in a second one of
 * the same layout and the non-trainable state (BatchNormalization's moving statistics) in a
 * third. Weights are laid out layer by layer in topological order, so the gradients of the last
 * layers are the tail of the buffer: fusion buckets taken last-layer-first are contiguous slices.
 * Buffers are device memory of the model's backend (host memory on the CPU).
 *
 * Keras rules: layer names, weight names ("<layer>/kernel"), shapes (a Dense kernel is [in, out],
 * a Conv2D kernel [kh, kw, in, out]), initializers with their defaults, and the summary's output
 * shapes and parameter counts are Keras's.
 *
 * Threads: a model is owned by one thread (the trainer); nothing in it is locked.
 */
#ifndef DT_NN_MODEL_H
#define DT_NN_MODEL_H

#include "core/status.h"
#include "nn/ops.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dt_model dt_model;

#define DT_NN_NAME_LEN 128 /* layer names and "<layer>/<var>" weight names */
#define DT_NN_MAX_RANK 4   /* rank of one sample (without the batch axis) */

typedef struct dt_model_opts {
    uint64_t seed;        /* initializers and dropout masks */
    const dt_nn_ops *ops; /* NULL: dt_nn_ops_cpu() */
    /* Refuse (DT_ETOOBIG, naming the layer) before allocating anything when the weights and
     * their gradients pass this many bytes; 0: no limit. A daemon's --max-job-memory. */
    uint64_t max_bytes;
} dt_model_opts;

/* One weight of the model, as Keras names and shapes it. */
typedef struct dt_model_weight {
    char name[DT_NN_NAME_LEN + 96]; /* "conv2d/kernel", "bidirectional/forward_lstm/..." */
    int layer;                      /* index in dt_model_layer */
    int ndim;
    int64_t shape[DT_NN_MAX_RANK];
    size_t size;    /* elements */
    bool trainable; /* lives in the params buffer (else in the state buffer) */
    size_t offset;  /* element offset in its flat buffer */
    float *data;    /* device memory, inside the flat buffer */
    float *grad;    /* gradient, same offset in the grads buffer; NULL when not trainable */
} dt_model_weight;

/* One row of the summary. */
typedef struct dt_model_layer {
    const char *name;
    const char *class_name;
    int ndim; /* output shape without the batch axis */
    int64_t shape[DT_NN_MAX_RANK];
    size_t params, trainable_params;
    bool in_summary; /* Keras lists InputLayer only for Functional models */
    int n_inbound;
    const char *inbound[16]; /* names of the layers feeding this one */
} dt_model_layer;

/* Parses a Keras model.to_json() text (Keras 2 or 3; Sequential, legacy list Sequential or
 * Functional), validates every layer and option, and builds the model with seeded Keras-default
 * initial weights. Anything unsupported fails with DT_ENOTSUP and a message naming the layer,
 * its class and the option; malformed JSON with DT_EINVAL naming the JSON path. *out is owned by
 * the caller (dt_model_free). */
dt_status dt_model_from_json(const char *json, size_t len, const dt_model_opts *opts,
                             dt_model **out, dt_err *err);
/* The same from a file (at most DT_MAX_MODEL_JSON bytes); errors name the path. */
dt_status dt_model_from_file(const char *path, const dt_model_opts *opts, dt_model **out,
                             dt_err *err);
/* NULL-safe. */
void dt_model_free(dt_model *m);

const char *dt_model_name(const dt_model *m);
bool dt_model_is_sequential(const dt_model *m);
const dt_nn_ops *dt_model_ops(const dt_model *m);
/* The dropout stream: save and restore it with checkpoints to replay masks. */
dt_rng *dt_model_rng(dt_model *m);

/* Bytes of the activation buffers (outputs, their gradients, per-sample scratch, im2col) a
 * batch of n needs: what the first step of that batch size allocates. No allocation. */
uint64_t dt_model_batch_bytes(const dt_model *m, int n);

size_t dt_model_layer_count(const dt_model *m);
/* Row i of the summary (0 <= i < count); pointers stay valid while the model lives. */
void dt_model_layer_info(const dt_model *m, size_t i, dt_model_layer *out);
/* Parameter counts as Keras's summary prints them. */
void dt_model_param_counts(const dt_model *m, size_t *total, size_t *trainable,
                           size_t *non_trainable);
/* Sample shapes (without the batch axis) of the input and of the output. */
int dt_model_input_shape(const dt_model *m, int64_t shape[DT_NN_MAX_RANK]);
int dt_model_output_shape(const dt_model *m, int64_t shape[DT_NN_MAX_RANK]);
size_t dt_model_input_size(const dt_model *m);  /* floats per sample */
size_t dt_model_output_size(const dt_model *m); /* floats per sample */

/* Flat buffers (device memory) and their element counts. */
float *dt_model_params(dt_model *m, size_t *n);
float *dt_model_grads(dt_model *m, size_t *n);
float *dt_model_state(dt_model *m, size_t *n);

/* The params then the state (np + ns floats, Keras's get_weights order) to or from host memory:
 * the way host code reads or sets them all, on any backend. */
void dt_model_download_all(dt_model *m, float *host);
void dt_model_upload_all(dt_model *m, const float *host);

size_t dt_model_weight_count(const dt_model *m);
const dt_model_weight *dt_model_weight_at(const dt_model *m, size_t i);
/* NULL when no weight has that name. */
const dt_model_weight *dt_model_find_weight(const dt_model *m, const char *name);
/* Copies a weight from / to host memory; n must equal the weight's size (DT_EINVAL otherwise,
 * naming the weight and both sizes). */
dt_status dt_model_set_weight(dt_model *m, const char *name, const float *host, size_t n,
                              dt_err *err);
dt_status dt_model_get_weight(const dt_model *m, const char *name, float *host, size_t n,
                              dt_err *err);

/* A loss as Keras's compile() takes it, with its config (see dt_nn_loss_p for the formulas).
 * A zeroed struct with a kind is that loss with Keras's defaults except Huber's delta (1.0), which
 * dt_loss_from_name / dt_loss_from_json set. */
typedef struct dt_loss {
    dt_nn_loss_kind kind;
    bool from_logits;      /* CE family */
    float label_smoothing; /* BinaryCrossentropy, CategoricalCrossentropy; [0, 1] */
    float delta;           /* Huber; > 0 */
    bool has_ignore_class; /* SparseCategoricalCrossentropy: rows with this label count for */
    int32_t ignore_class;  /* nothing, and the mean is over the others (Keras's mask) */
} dt_loss;

/* Resolves a Keras loss name: a class ("BinaryCrossentropy"), a function
 * ("binary_crossentropy") or an alias ("bce", "mse", "mae", "kld", "logcosh", "huber_loss", ...),
 * with Keras's defaults; from_logits applies to the cross-entropies only. */
dt_status dt_loss_from_name(const char *name, bool from_logits, dt_loss *out, dt_err *err);

/* A loss as compile() takes it: a name, or keras.losses.serialize's object {"class_name",
 * "config", "module", "registered_name"} of Keras 2 or 3 ({"class_name": "function", "config":
 * "mse"} included). Every config key Keras writes is taken: from_logits, label_smoothing, axis
 * (-1 only), ignore_class, delta, name, dtype (float32 only) and reduction ("auto",
 * "sum_over_batch_size", "mean"; "sum" and "none" are refused). Unknown keys are DT_EINVAL,
 * unsupported values DT_ENOTSUP; messages start with the key's path relative to the loss object
 * (".config.axis: ..."), so the caller prefixes the object's own path. */
struct cJSON;
dt_status dt_loss_from_json(const struct cJSON *j, dt_loss *out, dt_err *err);

/* Keras's function name of a kind ("binary_crossentropy"). */
const char *dt_loss_name(dt_nn_loss_kind kind);

/* One batch, host memory. labels for sparse categorical cross-entropy, else targets
 * (n, output size); a model with one output also takes integer labels for the other losses (0/1
 * classes for binary_crossentropy, as Keras casts y_true to the prediction's dtype). */
typedef struct dt_model_batch {
    const float *x;        /* (n, input shape...) */
    const int32_t *labels; /* (n) */
    const float *targets;  /* (n, output size) */
    /* (n) host; NULL: all 1. Each sample's loss counts this many times (Keras's sample_weight,
     * which fit's class_weight becomes); the mean still divides by the sample count. Training
     * steps only. */
    const float *sample_weight;
    int n;
    /* Optional device copies of the same values (fit's feed puts the batch on the device ahead
     * of its step): where one is set the step copies it device to device instead of uploading
     * the host field, which must still be given and hold the same values (the host reads it:
     * label checks, ignore_class counts, accuracy), except x, which may then be NULL. The
     * compute stream must already be ordered after their writes. */
    const float *x_dev;
    const int32_t *labels_dev;
    const float *targets_dev;
    const float *sample_weight_dev;
} dt_model_batch;

typedef struct dt_step_stats {
    double loss;     /* mean loss over the batch plus the regularization losses */
    double accuracy; /* "accuracy" as Keras resolves it for this loss and output shape */
} dt_step_stats;

/* Forward in training mode, loss, backward: fills the grads buffer with the gradient of the
 * sum of the per-sample losses divided by global_batch (so summing the grads of R replicas with
 * global_batch = R * n gives Keras's mean), plus n/global_batch of the regularizers' gradient.
 * Labels outside [0, classes) and batches with n < 1 are DT_EINVAL. */
dt_status dt_model_train_step(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                              int global_batch, dt_step_stats *stats, dt_err *err);
/* dt_model_train_step in two halves, so that more device work (the optimizer's update) rides
 * the step's one host synchronisation: begin queues the forward, loss and backward (the
 * grad-ready hook runs inside it); end downloads the step's numbers, syncs once (a device's
 * kernel error is DT_EIO naming the backend) and then takes the step's checks: an id outside an
 * Embedding's (CategoryEncoding's) table, then a non-finite loss (DT_EINVAL, stats set), which
 * no longer stop the step before its backward and what was queued after begin. The grads and
 * the stats are valid after end only. */
dt_status dt_model_train_begin(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                               int global_batch, dt_err *err);
dt_status dt_model_train_end(dt_model *m, dt_step_stats *stats, dt_err *err);
/* false: the training step does not download its predictions (no compiled metric reads them);
 * dt_model_last_predictions then holds those of the last evaluation. Default true. */
void dt_model_keep_predictions(dt_model *m, bool keep);

/* Called by dt_model_train_step's backward each time the gradients grads[offset, n_params) are
 * final: after the weight gradients (and the regularizer gradients) of every layer holding
 * trainable weights - a Dense calls it before computing its input gradient, so a trainer's
 * all-reduce of its (often big) kernel runs during that GEMM - so offsets strictly decrease and the
 * last call has offset 0 (one call with 0 when the model has no trainable weight). Lets a trainer
 * start reducing the gradients of the last layers while the first ones are still being computed.
 * Runs on the trainer's thread, inside the step; it must not touch the model. */
typedef void (*dt_model_grad_ready_fn)(void *ctx, size_t offset);
/* Sets (fn NULL: clears) the hook of the following steps. */
void dt_model_set_grad_ready(dt_model *m, dt_model_grad_ready_fn fn, void *ctx);

/* After every layer's forward and backward the model stores dt_now_ms() in *beat (NULL: off),
 * so a watchdog on another thread can tell a long step from a stuck one layer by layer. */
void dt_model_set_beat(dt_model *m, _Atomic int64_t *beat);

/* Keras's adapt() for the Normalization layers that have no mean and variance in their config
 * (a model built from such a JSON starts with mean 0 and variance 1): begin (*out NULL when no
 * layer needs it; DT_ENOTSUP naming a layer that does not read the model's input), feed the
 * training inputs in chunks of n rows of dt_model_input_size floats (host), then end, which
 * writes their mean, population variance and count weights and frees a. */
typedef struct dt_model_adapt dt_model_adapt;
dt_status dt_model_adapt_begin(dt_model *m, dt_model_adapt **out, dt_err *err);
void dt_model_adapt_rows(dt_model_adapt *a, const float *x, size_t n);
void dt_model_adapt_end(dt_model *m, dt_model_adapt *a);

/* CUDA graphs of the training step (lib/train/graph.c drives them on a device backend).
 * A graph replays the kernels of a step with the arguments they were captured with, so
 * everything that changes from step to step reaches them through device memory:
 * dt_model_graph_feed does the host half of a step ahead of it (checks the batch, uploads it,
 * and fills the model's step block: the loss's scale and hinge flag, one dropout key per
 * dropout call of the last step, drawn from the model's rng in call order); the next
 * dt_model_train_begin (or _step) then uploads nothing and its kernels read those values
 * (capture it), or a replay of a captured begin runs instead and dt_model_graph_replayed
 * records that it did; dt_model_train_end ends either.
 * A fed step and a plain one give the same bits. Feed only a batch size that had a plain
 * step (which allocates its buffers); a graph holds buffer addresses, valid while
 * dt_model_graph_gen stays the same (a larger batch reallocates them).
 * dt_model_graph_fit: false, with why, when the step cannot be graphed (a backend without
 * graphs; a layer doing host work every step: the random augmentation layers; a step whose
 * dropout calls changed). */
bool dt_model_graph_fit(const dt_model *m, char *why, size_t n);
dt_status dt_model_graph_feed(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                              int global_batch, dt_err *err);
void dt_model_graph_replayed(dt_model *m);
uint64_t dt_model_graph_gen(const dt_model *m);

/* Inference forward; writes (n, output size) floats to out (host). */
dt_status dt_model_predict(dt_model *m, const float *x, int n, float *out, dt_err *err);

/* The predictions (n, output size) of the last dt_model_train_step or dt_model_evaluate, in host
 * memory owned by the model: valid until the model's next call. Compiled metrics read them. */
const float *dt_model_last_predictions(const dt_model *m);

/* Loss and accuracy of a batch in inference mode, without gradients (evaluate). The batch may
 * come with device copies as a training step's does (x_dev, labels_dev, targets_dev). */
dt_status dt_model_evaluate(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                            dt_step_stats *stats, dt_err *err);
/* dt_model_evaluate in two halves, like a training step's: begin checks the batch and queues
 * its forward and loss, end downloads the numbers and the predictions behind one sync. Between
 * them the caller may queue work of its own (fit's feed uploads the next validation batch on
 * the copy stream); every begin that returned DT_OK needs its end before the model's next
 * call. Same bits as dt_model_evaluate. */
dt_status dt_model_evaluate_begin(dt_model *m, const dt_loss *loss, const dt_model_batch *b,
                                  dt_err *err);
dt_status dt_model_evaluate_end(dt_model *m, dt_step_stats *stats, dt_err *err);

#endif
