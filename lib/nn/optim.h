/*
 * optim.h - Keras optimizers over the model's flat buffers: SGD (momentum, nesterov), Adam,
 * AdamW and RMSprop, with Keras 3's default hyperparameters and update rules.
 *
 *     dt_optim_cfg cfg;
 *     dt_optim_cfg_from_json(cJSON_Parse("{\"class_name\": \"Adam\", \"config\": {}}"), &cfg,
 * &err); dt_optim *opt; dt_optim_new(&cfg, model, &opt, &err);
 *     ... dt_model_train_step(...); (all-reduce the grads) dt_optim_step(opt, &err); ...
 *     dt_optim_free(opt);
 *
 * Slots (momentum, velocity, ...) are flat buffers of the same layout as the model's params, so
 * slot k of weight w sits at w->offset. They are named "optimizer/<layer>/<var>/<slot>" in
 * checkpoints. Decoupled weight decay (weight_decay, AdamW's default 0.004) is applied as Keras 3
 * does, before the update: w -= w * weight_decay * learning_rate.
 * The optimizer borrows the model: it must outlive neither. One thread.
 */
#ifndef DT_NN_OPTIM_H
#define DT_NN_OPTIM_H

#include "core/status.h"
#include "nn/model.h"

#include <cjson/cJSON.h>
#include <stdint.h>

typedef enum dt_optim_kind {
    DT_OPTIM_SGD,
    DT_OPTIM_ADAM,
    DT_OPTIM_ADAMW,
    DT_OPTIM_RMSPROP,
} dt_optim_kind;

typedef struct dt_optim_cfg {
    dt_optim_kind kind;
    float learning_rate;  /* SGD 0.01, the others 0.001 */
    float momentum;       /* SGD, RMSprop: 0 */
    bool nesterov;        /* SGD: false */
    float beta_1, beta_2; /* Adam(W): 0.9, 0.999 */
    float epsilon;        /* 1e-7 */
    float rho;            /* RMSprop: 0.9 */
    bool centered;        /* RMSprop: false */
    float weight_decay;   /* AdamW 0.004, else 0 (none) */
} dt_optim_cfg;

/* Keras 3's defaults for kind. */
void dt_optim_defaults(dt_optim_kind kind, dt_optim_cfg *out);

/* "sgd" | "adam" | ... or {"class_name": "SGD", "config": {...}} (Keras 2 or 3). Unknown keys
 * and unsupported values (amsgrad, clipnorm, schedules, ...) are refused naming the key. */
dt_status dt_optim_cfg_from_json(const cJSON *spec, dt_optim_cfg *out, dt_err *err);

typedef struct dt_optim dt_optim;

/* Slot buffers cfg keeps, each the size of the params buffer (before allocating them). */
size_t dt_optim_cfg_slots(const dt_optim_cfg *cfg);

/* Allocates the slots (zeroed) on the model's backend. */
dt_status dt_optim_new(const dt_optim_cfg *cfg, dt_model *m, dt_optim **out, dt_err *err);
void dt_optim_free(dt_optim *o);

/* Applies the model's grads buffer to its params: one Keras iteration. */
dt_status dt_optim_step(dt_optim *o, dt_err *err);
/* Keras's optimizer.iterations: steps applied so far (restored from checkpoints). */
int64_t dt_optim_iterations(const dt_optim *o);
void dt_optim_set_iterations(dt_optim *o, int64_t it);

/* Slot buffers: count, and the i-th with its Keras-style name ("momentum", "velocity",
 * "average_gradient"); each has the params buffer's layout and size. */
size_t dt_optim_slot_count(const dt_optim *o);
float *dt_optim_slot(dt_optim *o, size_t i, const char **name);

#endif
