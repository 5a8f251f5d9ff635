/*
 * optim.h - Keras optimizers over the model's flat buffers: SGD (momentum, nesterov), Adam and
 * AdamW (amsgrad), RMSprop, Adagrad, Adadelta, Adamax, Nadam, Ftrl and Lion, with Keras 3's
 * defaults and update rules, its gradient clipping (clipnorm, clipvalue, global_clipnorm),
 * decoupled weight decay, moving average of the weights (use_ema) and learning-rate schedules.
 *
 *     dt_optim_cfg cfg;
 *     dt_optim_cfg_from_json(cJSON_Parse("{\"class_name\": \"Adam\", \"config\": {}}"), &cfg,
 *                            &err);
 *     dt_optim *opt;
 *     dt_optim_new(&cfg, model, &opt, &err);
 *     ... dt_model_train_step(...); (all-reduce the grads) dt_optim_step(opt, &err); ...
 *     dt_optim_finalize(opt); (end of fit: the moving average replaces the weights, if use_ema)
 *     dt_optim_free(opt);
 *
 * One iteration, as Keras 3's apply() runs it (base_optimizer.py), with t = iterations and
 * lr = the learning rate at t (the schedule's value, or the constant):
 *   1. clip the gradients: clipnorm rescales each weight's gradient to an L2 norm of at most
 *      clipnorm, global_clipnorm rescales all of them by one factor so that their joint norm is
 *      at most global_clipnorm, clipvalue clips each value to [-clipvalue, clipvalue];
 *   2. w -= w * weight_decay * lr (decoupled weight decay; AdamW's default 0.004);
 *   3. the optimizer's own update (the backend's update kernel, one pass over the buffers);
 *   4. use_ema: average = m average + (1 - m) w, m = ema_momentum except 0 at t = 0; every
 *      ema_overwrite_frequency iterations (when (t + 1) % f == 0) w = average;
 *   5. iterations += 1.
 * Clipping by norm rescales the model's grads buffer in place.
 *
 * Slots (momentum, velocity, ...) are flat buffers of the same layout as the model's params, so
 * slot k of weight w sits at w->offset. They are named as Keras names them and saved as
 * "optimizer/<layer>/<var>/<slot>" in checkpoints; the moving average is the slot "average".
 * Everything else an iteration needs (Nadam's momentum-cache product, the schedule's rate) is a
 * function of iterations, so restoring the slots and iterations resumes bit-identically.
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
    DT_OPTIM_ADAGRAD,
    DT_OPTIM_ADADELTA,
    DT_OPTIM_ADAMAX,
    DT_OPTIM_NADAM,
    DT_OPTIM_FTRL,
    DT_OPTIM_LION,
} dt_optim_kind;

/* keras.optimizers.schedules, by class name. */
typedef enum dt_optim_schedule_kind {
    DT_OPTIM_SCHEDULE_NONE, /* a constant learning rate */
    DT_OPTIM_SCHEDULE_EXPONENTIAL_DECAY,
    DT_OPTIM_SCHEDULE_PIECEWISE_CONSTANT_DECAY,
    DT_OPTIM_SCHEDULE_POLYNOMIAL_DECAY,
    DT_OPTIM_SCHEDULE_INVERSE_TIME_DECAY,
    DT_OPTIM_SCHEDULE_COSINE_DECAY,
    DT_OPTIM_SCHEDULE_COSINE_DECAY_RESTARTS,
} dt_optim_schedule_kind;

#define DT_OPTIM_MAX_BOUNDARIES 64 /* PiecewiseConstantDecay's boundaries */

/* A learning-rate schedule: the rate as a function of the optimizer's iterations. Fields are
 * Keras's config keys; each kind reads its own. */
typedef struct dt_optim_schedule {
    dt_optim_schedule_kind kind;
    double initial_learning_rate;
    double decay_steps;              /* CosineDecayRestarts: first_decay_steps */
    double decay_rate;               /* Exponential, InverseTime */
    bool staircase;                  /* Exponential, InverseTime */
    double end_learning_rate, power; /* Polynomial: 0.0001, 1 */
    bool cycle;                      /* Polynomial */
    double alpha;                    /* Cosine, CosineRestarts: 0 */
    bool warmup;                     /* Cosine: warmup_target given */
    double warmup_target, warmup_steps;
    double t_mul, m_mul; /* CosineRestarts: 2, 1 */
    int n_boundaries;    /* Piecewise: boundaries (as integer steps) and n + 1 values */
    int64_t boundaries[DT_OPTIM_MAX_BOUNDARIES];
    double values[DT_OPTIM_MAX_BOUNDARIES + 1];
} dt_optim_schedule;

typedef struct dt_optim_cfg {
    dt_optim_kind kind;
    float learning_rate;  /* SGD 0.01, the others 0.001; with a schedule, its rate at step 0 */
    dt_optim_schedule lr; /* kind NONE: learning_rate is constant */
    float momentum;       /* SGD, RMSprop: 0 */
    bool nesterov;        /* SGD: false */
    float beta_1, beta_2; /* Adam(W), Adamax, Nadam: 0.9, 0.999; Lion: 0.9, 0.99 */
    float epsilon;        /* 1e-7 */
    bool amsgrad;         /* Adam(W): false */
    float rho;            /* RMSprop 0.9, Adadelta 0.95 */
    bool centered;        /* RMSprop: false */
    float initial_accumulator_value;            /* Adagrad, Ftrl: 0.1 */
    float learning_rate_power;                  /* Ftrl: -0.5 */
    float l1_regularization_strength;           /* Ftrl: 0 */
    float l2_regularization_strength;           /* Ftrl: 0 */
    float l2_shrinkage_regularization_strength; /* Ftrl: 0 */
    float beta;                                 /* Ftrl: 0 */
    float weight_decay;                         /* AdamW 0.004, else 0 (none) */
    float clipnorm, clipvalue, global_clipnorm; /* 0: none; at most one is set */
    bool use_ema;                               /* false */
    float ema_momentum;                         /* 0.99 */
    int64_t ema_overwrite_frequency;            /* 0: none (Keras's None) */
} dt_optim_cfg;

/* Keras 3's defaults for kind. */
void dt_optim_defaults(dt_optim_kind kind, dt_optim_cfg *out);

/* "sgd" | "adam" | ... or {"class_name": "SGD", "config": {...}} (Keras 2 or 3; the
 * learning_rate may be a schedule object, see dt_optim_schedule_from_json). Unknown keys, keys
 * of other optimizers and unsupported values (gradient_accumulation_steps, loss_scale_factor,
 * Keras 2's decay) are refused naming the key, as are bad values (negative rates, rho >= 1, two
 * clipping options). */
dt_status dt_optim_cfg_from_json(const cJSON *spec, dt_optim_cfg *out, dt_err *err);

/* {"class_name": "ExponentialDecay", "config": {...}} with optional "module" and
 * "registered_name" (Keras 2 and 3 serializations): ExponentialDecay, PiecewiseConstantDecay,
 * PolynomialDecay, InverseTimeDecay, CosineDecay, CosineDecayRestarts. Errors name the class
 * and the key. */
dt_status dt_optim_schedule_from_json(const cJSON *spec, dt_optim_schedule *out, dt_err *err);

/* The schedule's rate at step (Keras's schedule(step)), in double; kind NONE gives 0. */
double dt_optim_schedule_at(const dt_optim_schedule *s, int64_t step);

/* The rate the iteration from `iteration` applies: the schedule at it, or the constant. */
double dt_optim_cfg_learning_rate(const dt_optim_cfg *cfg, int64_t iteration);

typedef struct dt_optim dt_optim;

/* Slot buffers cfg keeps, each the size of the params buffer (before allocating them). */
size_t dt_optim_cfg_slots(const dt_optim_cfg *cfg);

/* Allocates the slots on the model's backend, initialised as Keras does (zeros; Adagrad's and
 * Ftrl's accumulator: initial_accumulator_value). */
dt_status dt_optim_new(const dt_optim_cfg *cfg, dt_model *m, dt_optim **out, dt_err *err);
void dt_optim_free(dt_optim *o);

/* Applies the model's grads buffer to its params: one Keras iteration (see above). */
dt_status dt_optim_step(dt_optim *o, dt_err *err);
/* dt_optim_step in three parts, for a step that a CUDA graph replays (lib/train/graph.c):
 * prepare computes the next iteration's per-step values (learning rate, bias corrections, the
 * EMA's factors) and uploads them into a small device block (allocated by its first call, so
 * call it before any capture); apply queues the clipping and the update, whose kernel reads
 * them from there, so a captured apply replays right after each step's prepare; advance counts
 * the iteration. prepare, apply, advance = dt_optim_step, bit for bit. */
dt_status dt_optim_prepare(dt_optim *o, dt_err *err);
void dt_optim_apply(dt_optim *o);
void dt_optim_advance(dt_optim *o);
/* Keras's finalize_variable_values, which fit() calls after its last epoch: with use_ema the
 * moving average replaces the weights; otherwise nothing. */
void dt_optim_finalize(dt_optim *o);

/* Keras's optimizer.iterations: steps applied so far (restored from checkpoints). */
int64_t dt_optim_iterations(const dt_optim *o);
void dt_optim_set_iterations(dt_optim *o, int64_t it);

/* Keras's optimizer.learning_rate: the rate of the next iteration. */
double dt_optim_learning_rate(const dt_optim *o);
/* The rate the iteration from `iteration` applies (iterations - 1: the last step's rate). */
double dt_optim_learning_rate_at(const dt_optim *o, int64_t iteration);
/* Sets a constant rate, as assigning optimizer.learning_rate does; refused (DT_EINVAL) when
 * the rate is a schedule, as Keras refuses it, or when lr is negative or not finite. */
dt_status dt_optim_set_learning_rate(dt_optim *o, double lr, dt_err *err);

/* Slot buffers: count, and the i-th with its Keras name ("momentum", "velocity",
 * "velocity_hat", "average_gradient", "accumulator", "accumulated_grad",
 * "accumulated_delta_var", "norm", "linear", "average"); each has the params buffer's layout
 * and size. */
size_t dt_optim_slot_count(const dt_optim *o);
float *dt_optim_slot(dt_optim *o, size_t i, const char **name);

#endif
