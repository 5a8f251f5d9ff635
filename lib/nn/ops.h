/*
 * ops.h - the compute backend of nn: one table of kernels per device.
 *
 * Layers, losses and optimizers never touch a float themselves: they call the kernels of a
 * dt_nn_ops table through the static inline wrappers below (dt_nn_gemm(ops, ...)), so a CUDA
 * backend plugs in by filling another table; no layer changes. All pointers given to a kernel are
 * device memory of that backend (host memory for the CPU one), allocated with dt_nn_alloc.
 *
 *     const dt_nn_ops *ops = dt_nn_ops_cpu();
 *     float *c = dt_nn_alloc(ops, m * n * sizeof(float));
 *     dt_nn_gemm(ops, false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);  // C = A B, row-major
 *
 * Layout: float32, row-major, images channels_last (N, H, W, C) as in Keras.
 * Accumulation: kernels that produce an input gradient take `acc`: false writes, true adds. A
 * node's gradient is written by its first consumer and accumulated by the others, so no buffer
 * needs zeroing per step.
 * Threads: a table is immutable and shareable; kernels on the same buffers must not run
 * concurrently. The CPU backend runs GEMMs on OpenBLAS's threads.
 */
#ifndef DT_NN_OPS_H
#define DT_NN_OPS_H

#include "core/rng.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element-wise activations, named as in Keras (keras.activations). */
typedef enum dt_nn_act {
    DT_NN_ACT_LINEAR = 0,
    DT_NN_ACT_RELU,
    DT_NN_ACT_SIGMOID,
    DT_NN_ACT_TANH,
    DT_NN_ACT_SOFTMAX, /* over the last axis (cols) */
    DT_NN_ACT_ELU,
    DT_NN_ACT_SELU,
    DT_NN_ACT_GELU,        /* exact (erf) form, Keras's default approximate=False */
    DT_NN_ACT_SWISH,       /* = silu */
    DT_NN_ACT_LEAKY_RELU,  /* alpha = negative slope */
    DT_NN_ACT_RELU_CAPPED, /* ReLU layer: alpha = negative slope, max_value, threshold */
} dt_nn_act;

/* Parameters of one activation; only ReLU-family kinds read the numbers. */
typedef struct dt_nn_act_p {
    dt_nn_act kind;
    float alpha;     /* negative slope (LeakyReLU, ReLU layer) */
    float max_value; /* ReLU layer; <= 0 or INFINITY: none */
    float threshold; /* ReLU layer */
} dt_nn_act_p;

/* Geometry of a 2-D convolution or pooling window over (N, H, W, C) input. */
typedef struct dt_nn_win {
    int n, h, w, c; /* input */
    int oh, ow;     /* output spatial size */
    int kh, kw;     /* window */
    int sh, sw;     /* strides */
    int pt, pl;     /* padding before (top, left); bottom/right follow from the sizes */
    /* Dilation (Keras's dilation_rate): window tap k reads input row oy*sh - pt + k*dil_h.
     * 0 means 1, so windows built before dilation existed keep their meaning. */
    int dil_h, dil_w;
    /* im2col appends a 1 to every col row (rows of kh*kw*c + 1): a bias stored right after the
     * kernel is then one more kernel row, added by the forward GEMM. col2im ignores it (its rows
     * are kh*kw*c). */
    bool ones;
} dt_nn_win;

/* tf.image.resize's methods, as data's dt_interp (lib/data/resize.c computes the same). */
typedef enum dt_nn_interp {
    DT_NN_INTERP_BILINEAR = 0,
    DT_NN_INTERP_NEAREST,
    DT_NN_INTERP_AREA,    /* ResizeArea: box coverage, no half-pixel shift */
    DT_NN_INTERP_BICUBIC, /* ResizeBicubic: Keys a = -0.5, outside taps dropped, renormalised */
} dt_nn_interp;

/* An image resize (Resizing, CenterCrop): x (n, h, w, c) -> y (n, oh, ow, c) from the window of
 * rows [y0, y0 + wh) and columns [x0, x0 + ww) of every image (the whole image, or Keras's
 * crop_to_aspect_ratio box), with tf.image.resize's rules: half-pixel centres (area: none), no
 * antialias, float32 scales wh / oh and ww / ow. Every method is linear in x: the backward is
 * its exact transpose. */
typedef struct dt_nn_resize {
    int n, h, w, c;
    int oh, ow;
    int y0, x0, wh, ww;
    dt_nn_interp interp;
} dt_nn_resize;

/* A projective transform of every image (RandomTranslation, RandomZoom, RandomRotation), as TF's
 * ImageProjectiveTransformV3 (Keras's affine_transform) computes it: image i's 8 numbers
 * t = [a0 a1 a2 b0 b1 b2 c0 c1] map the output pixel (x, y) to the input point
 * ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1, in pixel coordinates;
 * fill maps a point outside the image back in (reflect: dcba|abcd|dcba, wrap: abcd|abcd, nearest:
 * the edge) or, constant, reads fill_value there; then nearest (round half away) or bilinear
 * interpolation, taps outside the image reading fill_value. */
typedef enum dt_nn_fill {
    DT_NN_FILL_REFLECT,
    DT_NN_FILL_WRAP,
    DT_NN_FILL_CONSTANT,
    DT_NN_FILL_NEAREST,
} dt_nn_fill;

typedef struct dt_nn_transform {
    int n, h, w, c;
    bool nearest; /* else bilinear */
    dt_nn_fill fill;
    float fill_value;
} dt_nn_transform;

/* DT_NN_POOL_MAX_RELU: max pooling of relu(x), the pair Conv2D(activation="relu") ->
 * MaxPooling2D in one pass (relu and max commute); arg is -1 where no cell is positive, so the
 * backward hands the gradient to the winner only where relu passed it. */
typedef enum dt_nn_pool { DT_NN_POOL_MAX, DT_NN_POOL_AVG, DT_NN_POOL_MAX_RELU } dt_nn_pool;

/* Losses, named as in Keras (keras.losses). */
typedef enum dt_nn_loss_kind {
    DT_NN_LOSS_SPARSE_CE,
    DT_NN_LOSS_CE,
    DT_NN_LOSS_BCE,
    DT_NN_LOSS_MSE,
    DT_NN_LOSS_MAE,
    DT_NN_LOSS_HUBER,
    DT_NN_LOSS_LOGCOSH,
    DT_NN_LOSS_KLD,
    DT_NN_LOSS_HINGE,
    DT_NN_LOSS_SQUARED_HINGE,
    DT_NN_LOSS_COSINE, /* CosineSimilarity */
    DT_NN_LOSS_POISSON,
} dt_nn_loss_kind;

/* One loss with its Keras config, as the loss kernel takes it. Per row (sample) of (n, cols),
 * p the prediction, t the target, EPS = 1e-7 (Keras's backend.epsilon()):
 *   SPARSE_CE  -log softmax(p)[label] (from_logits) or -log clip(p / sum p)[label]; a row whose
 *              label is ignore_class (has_ignore_class) has loss 0 and gradient 0
 *   CE         -sum t' log q, t' = t (1 - label_smoothing) + label_smoothing / cols
 *   BCE        mean of -(t' log q + (1 - t') log(1 - q)), q = clip(p) or sigmoid(p) (then the
 *              stable form), t' = t (1 - label_smoothing) + label_smoothing / 2
 *   MSE, MAE   mean of (p - t)^2, |p - t|
 *   HUBER      mean of e^2 / 2 where |e| <= delta, else delta |e| - delta^2 / 2 (e = p - t)
 *   LOGCOSH    mean of e + softplus(-2e) - log 2
 *   KLD        sum of t' log(t' / p'), t' and p' clipped to [EPS, 1] (a sum, not a mean)
 *   HINGE      mean of max(1 - t' p, 0), t' = 2t - 1 when hinge_pm1 (the caller found every
 *              target of the batch 0 or 1, as Keras checks per batch), else t
 *   SQUARED_HINGE  mean of max(1 - t' p, 0)^2
 *   COSINE     -sum t^ p^, x^ = x / sqrt(max(sum x^2, EPS^2)) (a sum)
 *   POISSON    mean of p - t log(p + EPS) */
typedef struct dt_nn_loss_p {
    dt_nn_loss_kind kind;
    bool from_logits;      /* CE family: p are logits */
    float label_smoothing; /* CE, BCE; [0, 1] */
    float delta;           /* HUBER; > 0 */
    bool has_ignore_class; /* SPARSE_CE */
    int32_t ignore_class;
    bool hinge_pm1; /* HINGE, SQUARED_HINGE */
    /* Device memory (NULL: none): the values that change from batch to batch, read by the
     * kernel instead of the call's scale and hinge_pm1, so that a CUDA graph's replay takes
     * each step's: step[DT_NN_LOSS_STEP_SCALE], step[DT_NN_LOSS_STEP_PM1] (0 or 1). */
    const float *step;
} dt_nn_loss_p;

enum { DT_NN_LOSS_STEP_SCALE, DT_NN_LOSS_STEP_PM1, DT_NN_LOSS_STEP_FLOATS };

/* Optimizer updates, one kind per Keras optimizer (AdamW is Adam with weight decay). */
typedef enum dt_nn_upd_kind {
    DT_NN_UPD_SGD,
    DT_NN_UPD_ADAM,
    DT_NN_UPD_RMSPROP,
    DT_NN_UPD_ADAGRAD,
    DT_NN_UPD_ADADELTA,
    DT_NN_UPD_ADAMAX,
    DT_NN_UPD_NADAM,
    DT_NN_UPD_FTRL,
    DT_NN_UPD_LION,
} dt_nn_upd_kind;

/* One optimizer iteration over a flat buffer, Keras 3's rules: the scalars optim.c computed for
 * this step and the slot buffers (device memory, the layout of w). Per element, in order:
 *   1. w *= decay (Keras 3's decoupled weight decay, w - w wd lr; decay = 1: none);
 *   2. g clipped to [-clipvalue, clipvalue] when clipvalue > 0 (clipnorm is applied to the
 *      gradient buffer before, see clip_norm);
 *   3. the kind's update, slots in this order:
 *      SGD      momentum (NULL when momentum == 0)
 *      ADAM     momentum, velocity, velocity_hat (amsgrad; else NULL); c[0] = alpha =
 *               lr sqrt(1 - b2^t) / (1 - b1^t)
 *      RMSPROP  velocity, momentum (NULL when momentum == 0), average_gradient (centered)
 *      ADAGRAD  accumulator
 *      ADADELTA accumulated_grad, accumulated_delta_var
 *      ADAMAX   momentum, norm; c[0] = 1 - b1^t
 *      NADAM    momentum, velocity; c[0] = u_{t+1}, c[1] = 1 - prod u_1..u_{t+1},
 *               c[2] = 1 - u_t, c[3] = 1 - prod u_1..u_t, c[4] = 1 - b2^t
 *      FTRL     accumulator, linear; l2 already holds beta / (2 lr)
 *      LION     momentum
 *   4. with ema: ema = ema_momentum ema + (1 - ema_momentum) w, then w = ema when
 *      ema_overwrite. */
typedef struct dt_nn_update {
    dt_nn_upd_kind kind;
    float lr;        /* this step's learning rate (schedule applied) */
    float decay;     /* 1 - weight_decay * lr; 1: none */
    float clipvalue; /* > 0: clip each gradient value */
    float momentum;  /* SGD, RMSprop */
    bool nesterov;   /* SGD */
    float b1, b2;    /* Adam, Adamax, Nadam, Lion */
    float eps;
    float rho;                            /* RMSprop, Adadelta */
    float c[5];                           /* per-step factors, see the kinds */
    float lr_power, l1, l2, l2_shrinkage; /* Ftrl */
    float *slot[3];
    float *ema; /* the "average" slot, or NULL */
    float ema_momentum;
    bool ema_overwrite;
    /* Device memory (NULL: none): this step's values of the fields that change from step to
     * step (lr, decay, c, l2, ema_momentum, ema_overwrite as 0/1), in that order (see
     * dt_nn_update_pack), read by the kernel instead of the fields: a CUDA graph's replay then
     * takes each step's, which the host uploads before launching it. */
    const float *step;
} dt_nn_update;

#define DT_NN_UPD_STEP_FLOATS 10
/* u's per-step fields into step[DT_NN_UPD_STEP_FLOATS] (host); DT_NN_UPD_UNPACK(u, step) is
 * the reverse, for the kernels (u a struct, not a pointer; host or device code). */
static inline void dt_nn_update_pack(const dt_nn_update *u, float *step)
{
    step[0] = u->lr;
    step[1] = u->decay;
    for (int i = 0; i < 5; i++)
        step[2 + i] = u->c[i];
    step[7] = u->l2;
    step[8] = u->ema_momentum;
    step[9] = u->ema_overwrite ? 1.0f : 0.0f;
}
#define DT_NN_UPD_UNPACK(u, s)                                                                     \
    do {                                                                                           \
        (u).lr = (s)[0];                                                                           \
        (u).decay = (s)[1];                                                                        \
        for (int k_ = 0; k_ < 5; k_++)                                                             \
            (u).c[k_] = (s)[2 + k_];                                                               \
        (u).l2 = (s)[7];                                                                           \
        (u).ema_momentum = (s)[8];                                                                 \
        (u).ema_overwrite = (s)[9] != 0.0f;                                                        \
    } while (0)

/* Recurrent cells, one timestep over n rows of u units (layers_rnn.c runs the GEMMs around
 * them). G gates per unit: SIMPLE 1, LSTM 4 (Keras's order i, f, c, o), GRU 3 (z, r, h).
 * Forward, per row b whose mask[b * ldm] is nonzero (mask NULL: every row):
 *   SIMPLE  a += r; h1 = act(a)
 *   LSTM    a += r; c1 = f c0 + i act(a_c); h1 = o act(c1) (i, f, o = rec(a_i), ...)
 *   GRU reset_after  a_z += r_z, a_r += r_r, q = r_h (r holds h0 U + the recurrent bias);
 *           h1 = z h0 + (1 - z) act(a_h + rec(a_r) q)
 *   GRU !reset_after  phase 0: a_z += r_z, a_r += r_r, q = rec(a_r) h0; (the layer then
 *           writes r_h = q U_h) phase 1: a_h += r_h, h1 = z h0 + (1 - z) act(a_h)
 * A masked row keeps its state (h1 = h0, c1 = c0). y (NULL: none) gets h1, or 0 on a masked
 * row when zero_masked (Keras's zero_output_for_mask).
 * Backward, per row: dh holds the gradient of h1 from the later steps, to which dy adds
 * (not on a masked row with zero_masked); dc that of c1. The kernel overwrites a with the
 * gradient of the pre-activations (0 on a masked row), and dh (dc) with the part of h0's (c0's)
 * gradient that does not go through U (the layer adds d(a) U^T). GRU reset_after also writes
 * the gradient of r (it differs from a's in the h gate) into r. GRU !reset_after runs phase 1
 * (z and h gates) first, then phase 0 with dq = d(a_h) U_h^T, which adds dq rec(a_r) to dh. */
typedef enum dt_nn_cell { DT_NN_CELL_SIMPLE, DT_NN_CELL_LSTM, DT_NN_CELL_GRU } dt_nn_cell;

/* The activations a cell applies (activation, recurrent_activation). */
typedef enum dt_nn_cell_act {
    DT_NN_CACT_LINEAR,
    DT_NN_CACT_RELU,
    DT_NN_CACT_SIGMOID,
    DT_NN_CACT_TANH,
    DT_NN_CACT_HARD_SIGMOID2, /* Keras 2's hard_sigmoid: clip(0.2 x + 0.5, 0, 1) */
    DT_NN_CACT_HARD_SIGMOID3, /* Keras 3's: relu6(x + 3) / 6 = clip(x / 6 + 0.5, 0, 1) */
} dt_nn_cell_act;

typedef struct dt_nn_rnn_step {
    dt_nn_cell cell;
    int n, u;
    dt_nn_cell_act act, rec;
    bool reset_after, zero_masked;
    int phase;
    const float *mask; /* mask[b * ldm]; NULL: no row is masked */
    int ldm;
    float *a; /* (n, G u), row stride lda */
    int lda;
    float *r;        /* (n, G u), contiguous */
    float *q;        /* GRU (n, u), contiguous */
    const float *h0; /* (n, u) each, contiguous */
    float *h1;
    const float *c0; /* LSTM */
    float *c1;
    float *y; /* (n, u), row stride ldy */
    int ldy;
    const float *dy; /* backward: (n, u), row stride ldy; NULL: none */
    float *dh, *dc;  /* (n, u) */
    const float *dq; /* GRU !reset_after phase 0 */
} dt_nn_rnn_step;

/* CategoryEncoding's output modes. */
typedef enum dt_nn_cat_mode {
    DT_NN_CAT_ONE_HOT,
    DT_NN_CAT_MULTI_HOT,
    DT_NN_CAT_COUNT
} dt_nn_cat_mode;

/* Keras's "accuracy" as model.c chooses it: binary (prediction > 0.5 against each target, a row
 * counting the share of its columns right), sparse categorical (the argmax against an integer
 * label) or categorical (the argmax against the target's argmax; argmax = the first maximum). */
typedef enum dt_nn_hits_kind {
    DT_NN_HITS_BINARY,
    DT_NN_HITS_SPARSE,
    DT_NN_HITS_CATEGORICAL,
} dt_nn_hits_kind;

typedef struct dt_nn_ops {
    const char *name;
    /* true: alloc returns memory the host must not touch (a GPU's); buffers then cross with
     * upload/download only. The CPU table is false; dt_nn_ops_guard() is true. */
    bool device_memory;
    /* Device memory; alloc returns zeroed memory or NULL. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /* Copies between host and device (same memory on the CPU). */
    void (*upload)(void *dst, const void *src, size_t bytes);
    void (*download)(void *dst, const void *src, size_t bytes);
    /* Waits for the work queued by this thread; 0, or -1 with the first kernel error since the
     * last call in msg. NULL where kernels finish before they return (the CPU). A device
     * backend's kernels report errors only here: the trainer calls it once a step. */
    int (*sync)(char *msg, size_t n);
    /* CUDA graphs; all four NULL where kernels run when called (the CPU and guard tables).
     * graph_begin: the thread's kernels, copies and GEMMs are recorded (arguments by value)
     * instead of run, until graph_end, which returns the recording in *out (an opaque handle
     * the thread owns). Inside, nothing may allocate (alloc, a growing scratch), synchronise
     * (sync, download) or upload from memory that is not pinned: the capture then fails and
     * graph_end says why. graph_launch queues the recorded work again, as it was recorded:
     * pointers, sizes and by-value scalars included, so what changes from step to step must
     * reach the kernels through device memory. graph_free: after its last launch (it waits).
     * Each returns 0, or -1 with a message. Scratch the recorded kernels use stays allocated
     * while the graph lives. */
    int (*graph_begin)(char *msg, size_t n);
    int (*graph_end)(void **out, char *msg, size_t n);
    int (*graph_launch)(void *graph, char *msg, size_t n);
    void (*graph_free)(void *graph);

    /* Feeding a device (fit's prefetch, lib/train/feed.c). Each may be NULL, and the caller then
     * falls back: upload_async to upload, the events to nothing (a backend whose uploads finish
     * before they return needs none). upload_async's sources come from host_alloc (below).
     * upload_async: dst (device) <- src (pinned host), queued on the thread's copy stream, which
     * runs beside the kernels. src must not change, and no kernel may read dst, until an event
     * recorded on the copy stream after it has completed (event_sync) or been waited for by the
     * compute stream (event_wait), respectively.
     * Events: event_record(ev, copy) marks the work queued so far on the copy stream (copy) or
     * the compute stream; event_wait(ev, copy) makes that stream's later work wait for ev;
     * event_sync blocks the host until ev has completed (at once if never recorded). Errors go
     * to the thread's sticky error (sync reports them). */
    void (*upload_async)(void *dst, const void *src, size_t bytes);
    void *(*event_new)(void);
    void (*event_free)(void *ev);
    void (*event_record)(void *ev, bool copy);
    void (*event_wait)(void *ev, bool copy);
    void (*event_sync)(void *ev);
    /* The device's free and total memory in bytes: 0, or -1 when it cannot tell. NULL: the
     * host's memory (the CPU tables). */
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes);

    /* C(m,n) = alpha op(A) op(B) + beta C, row-major; op(A) is (m,k), op(B) is (k,n). */
    void (*gemm)(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);

    /* Conv lowering. col: (n*oh*ow, kh*kw*c [+ 1 if g->ones]) with columns ordered (kh, kw, c)
     * like a Keras kernel [kh, kw, in, out], so conv = col x kernel. col2im adds col (rows of
     * kh*kw*c) back into dx. */
    void (*im2col)(const dt_nn_win *g, const float *x, float *col);
    void (*col2im)(const dt_nn_win *g, const float *col, float *dx, bool acc);

    /* y(rows, cols) += b(cols); db(cols) (+)= column sums of dy(rows, cols). */
    void (*bias_add)(float *y, const float *b, size_t rows, int cols);
    void (*bias_grad)(const float *dy, size_t rows, int cols, float *db, bool acc);

    /* y = act(z) over (rows, cols); z and y may alias. act_bwd: dz (=/+=) dy * act'(z) (the
     * Jacobian product for softmax); it reads z and y (the forward output; z may be NULL when y
     * aliased it, for the kinds whose derivative follows from y: linear, relu, sigmoid, tanh,
     * softmax, elu). dz may alias dy when acc is false. */
    void (*act_fwd)(const dt_nn_act_p *a, const float *z, float *y, size_t rows, int cols);
    void (*act_bwd)(const dt_nn_act_p *a, const float *z, const float *y, const float *dy,
                    float *dz, size_t rows, int cols, bool acc);

    /* Pooling over g's windows: y (n, oh, ow, c). Max pooling records the flat input index of
     * each maximum in arg (same size as y); padded cells never win. Average pooling divides by
     * the number of valid (unpadded) cells, as Keras's "same" does. */
    void (*pool_fwd)(dt_nn_pool kind, const dt_nn_win *g, const float *x, float *y, int32_t *arg);
    void (*pool_bwd)(dt_nn_pool kind, const dt_nn_win *g, const float *dy, const int32_t *arg,
                     float *dx, bool acc);

    /* Batch normalization over rows (all axes but the channel one), cols channels.
     * Training: mean/var (biased) of the batch go to smean/svar and the moving statistics are
     * updated m = m*momentum + s*(1-momentum). Inference uses the moving statistics. gamma/beta may
     * be NULL (scale/center off). relu >= 0: a ReLU follows (a ReLU layer the model fused in): y =
     * min(max(bn, 0), relu) (INFINITY: no cap), and bn_bwd's dy is the ReLU's output gradient,
     * passed where 0 < gamma xhat + beta < relu; relu < 0: none. bn_bwd takes the forward's x,
     * smean and svar, and recomputes xhat = (x - smean) / sqrtf(svar + eps) bit for bit (nothing
     * the size of x is kept). */
    void (*bn_fwd)(bool training, const float *x, float *y, size_t rows, int cols,
                   const float *gamma, const float *beta, float *mmean, float *mvar, float momentum,
                   float eps, float *smean, float *svar, float relu);
    void (*bn_bwd)(const float *dy, const float *x, size_t rows, int cols, const float *gamma,
                   const float *beta, const float *smean, const float *svar, float eps, float *dx,
                   bool acc, float *dgamma, float *dbeta, float relu);
    /* Optional (NULL: the layers call gemm, then bn_fwd): a 1x1 convolution and the batch norm
     * that reads it, in training. z (rows, n) = x (rows, k) w (k, n), then bn_fwd(true, z, y,
     * rows, n, ...). The GEMM runs through o->gemm (the table the layer calls; a wrapper's
     * hooks see it) in blocks of rows, each block's statistics summed while it is still in
     * cache. The statistics and y are bn_fwd's bits for that z; z is one GEMM's bits where the
     * BLAS gives a row its bits whatever rows share the call (OpenBLAS's Haswell kernels with
     * blocks of a multiple of 24 rows), else within an ulp or two. */
    void (*gemm_bn_fwd)(const struct dt_nn_ops *o, int rows, int n, int k, const float *x,
                        const float *w, float *z, float *y, const float *gamma, const float *beta,
                        float *mmean, float *mvar, float momentum, float eps, float *smean,
                        float *svar, float relu);

    /* Inverted dropout: mask = (u >= rate) / (1 - rate); y = x * mask. */
    void (*dropout_fwd)(const float *x, float *y, float *mask, size_t n, float rate, dt_rng *rng);
    /* The same with the call's key given (dt_rng_u64 of the rng, drawn by the caller) in device
     * memory, where a CUDA graph's replay reads each step's (model.c's step block). */
    void (*dropout_fwd_key)(const float *x, float *y, float *mask, size_t n, float rate,
                            const uint64_t *key);

    /* Small vector ops. axpby: y = a x + b y. mul: y (=/+=) x * m. */
    void (*axpby)(size_t n, float a, const float *x, float b, float *y);
    void (*mul)(size_t n, const float *x, const float *m, float *y, bool acc);
    void (*copy)(size_t n, const float *x, float *y, bool acc);
    /* Strided block copy: y(rows, cols; row stride ldy) (=/+=) x(rows, cols; row stride ldx).
     * ldx may be 0: every row of y gets x's one row (SpatialDropout2D spreads its draws). */
    void (*copy2d)(size_t rows, int cols, const float *x, int ldx, float *y, int ldy, bool acc);
    void (*fill)(size_t n, float v, float *y);
    /* y (n, cols) = the rows rows[0..n) (device int32, each in range) of x: a batch gathered from
     * a data set kept on the device (fit's feed). Words are moved, not computed, so int32 labels
     * gather through it bit for bit. NULL: the caller gathers on the host. */
    void (*gather)(const float *x, const int32_t *rows, int n, size_t cols, float *y);

    /* One optimizer iteration over the flat buffers w and g (n elements), see dt_nn_update. */
    void (*update)(const dt_nn_update *u, float *w, const float *g, size_t n);

    /* Image preprocessing (the Keras augmentation layers) over x (n, h, w, c), hw = h * w; the
     * per-image parameters (flags, f, d) are device memory, drawn by the layer on the host.
     * img_flip: y (=/+=) x mirrored left-right where flags[i] & 1 and upside down where
     *   flags[i] & 2. A flip is its own transpose, so the backward calls it on dy.
     * img_adjust: y = clip(f[i] (x - m) + m + d[i], lo, hi), m the mean of image i's channel
     *   over (h, w) (RandomContrast: d NULL, d = 0; RandomBrightness: f NULL, f = 1, m unused).
     * img_adjust_bwd: dx (=/+=) the Jacobian product of img_adjust with dy; the clip passes the
     *   gradient where lo <= pre-clip value <= hi (tf.clip_by_value's rule), recomputed from x.
     * img_resize: see dt_nn_resize; img_resize_bwd: dx (=/+=) its transpose applied to dy
     *   (every window cell gets the weights it was read with; cells outside get 0). */
    void (*img_flip)(int n, int h, int w, int c, const int32_t *flags, const float *x, float *y,
                     bool acc);
    void (*img_adjust)(int n, int hw, int c, const float *f, const float *d, float lo, float hi,
                       const float *x, float *y);
    void (*img_adjust_bwd)(int n, int hw, int c, const float *f, const float *d, float lo, float hi,
                           const float *x, const float *dy, float *dx, bool acc);
    void (*img_resize)(const dt_nn_resize *g, const float *x, float *y);
    void (*img_resize_bwd)(const dt_nn_resize *g, const float *dy, float *dx, bool acc);
    /* img_transform: y = image i of x transformed by t + 8 i (device memory), see
     * dt_nn_transform. img_transform_bwd: dx (=/+=) its transpose applied to dy (the fill value
     * is a constant: it takes no gradient). */
    void (*img_transform)(const dt_nn_transform *g, const float *t, const float *x, float *y);
    void (*img_transform_bwd)(const dt_nn_transform *g, const float *t, const float *dy, float *dx,
                              bool acc);

    /* Depthwise convolution (DepthwiseConv2D) over g's windows (dilation included), mult
     * outputs per input channel: y (n, oh, ow, c*mult), y[.., ci*mult + m] = sum over the window
     * of x[.., ci] k[ky, kx, ci, m], k (kh, kw, c, mult) as Keras's depthwise_kernel; no bias
     * (bias_add does it). dw_bwd: dk = the kernel's gradient (written, NULL: none) and dx (=/+=)
     * the input's (NULL: none). */
    void (*dw_fwd)(const dt_nn_win *g, int mult, const float *x, const float *k, float *y);
    void (*dw_bwd)(const dt_nn_win *g, int mult, const float *x, const float *k, const float *dy,
                   float *dk, float *dx, bool acc);
    /* The Maximum merge layer over k inputs of n floats each (xs: k device pointers, held in host
     * memory): y = their element-wise maximum and arg the input it came from, the first of equal
     * ones (Keras chains maximum(a, b), whose gradient goes to a where a >= b).
     * max_bwd: dx (=/+=) dy where arg == i, else 0. */
    void (*max_fwd)(size_t n, int k, const float *const *xs, float *y, uint8_t *arg);
    void (*max_bwd)(size_t n, int i, const uint8_t *arg, const float *dy, float *dx, bool acc);

    /* Sequence kernels (layers_seq.c).
     * embed_fwd: y (n, dim) = row ids[i] of table (rows, dim), the float id truncated toward
     *   zero as Keras casts it; an id outside [0, rows) (NaN included) reads nothing: its row of
     *   y is zeros and it is counted in bad (device memory, 3 floats, written every call): the
     *   count, the first such id and its index i. mask (n; NULL: none) = ids[i] != 0 (Keras's
     *   mask_zero).
     * embed_bwd: dtable (rows, dim) = the sum of dy's row i into row ids[i] over i in order
     *   (written, not added: rows no id names get 0; deterministic, no atomics); bad ids add
     *   nothing.
     * seq_mean: y (n, c) = the mean of x (n, t, c) over the t steps whose mask (n, t) is 1 (all
     *   of them when mask is NULL); a sample without any gets 0. seq_mean_bwd: dx (=/+=) its
     *   transpose applied to dy.
     * ln_fwd: layer normalization of each row of x (rows, cols): xhat = (x - mean) rstd, rstd =
     *   1 / sqrt(var + eps) (var biased), y = xhat gamma + beta (gamma, beta NULL: 1, 0); keeps
     *   xhat (rows, cols) and rstd (rows) for ln_bwd, which writes dx (=/+=; NULL: not wanted)
     *   and dgamma, dbeta (written, column sums in double; NULL: not wanted). */
    void (*embed_fwd)(const float *ids, size_t n, const float *table, int rows, int dim, float *y,
                      float *mask, float *bad);
    void (*embed_bwd)(const float *ids, size_t n, const float *dy, int rows, int dim,
                      float *dtable);
    void (*seq_mean)(int n, int t, int c, const float *x, const float *mask, float *y);
    void (*seq_mean_bwd)(int n, int t, int c, const float *dy, const float *mask, float *dx,
                         bool acc);
    void (*ln_fwd)(const float *x, float *y, float *xhat, float *rstd, size_t rows, int cols,
                   const float *gamma, const float *beta, float eps);
    void (*ln_bwd)(const float *dy, const float *xhat, const float *rstd, size_t rows, int cols,
                   const float *gamma, float *dx, bool acc, float *dgamma, float *dbeta);
    /* Attention scores s (n, heads, tq, tv) before the softmax: adds -1e9 (Keras's masked
     * softmax for float32) where the query step is masked (qm (n, tq) is 0), the value or key
     * step is masked (vm, km (n, tv)), or, causal, the value step comes after the query step.
     * NULL masks mask nothing. */
    void (*attn_mask)(float *s, const float *qm, const float *vm, const float *km, int n, int heads,
                      int tq, int tv, bool causal);
    /* One timestep of a recurrent cell, forward and backward: see dt_nn_rnn_step. */
    void (*rnn_fwd)(const dt_nn_rnn_step *s);
    void (*rnn_bwd)(const dt_nn_rnn_step *s);
    /* Optional (NULL: the recurrent layers run gemm): their per-timestep products with an
     * operand that serves many calls packed once. rnn_pack writes B (k, n) - b (k, n), row
     * stride ldb, or with tb b^T (b is (n, k)) - into p (k n floats, the backend's layout).
     * rnn_gemm: c (m, n) = beta c + A B for beta 0 or 1, A (m, k) = a (row stride lda) or with
     * ta a^T (a is (k, m)); B as rnn_pack left it in b when ldb is 0, else b (k, n) with row
     * stride ldb (an operand used once). Deterministic, and each element's value does not
     * depend on m, n or ldb (a batch split over replicas gives the same rows); the bits may
     * differ from gemm's. */
    void (*rnn_pack)(bool tb, int k, int n, const float *b, int ldb, float *p);
    void (*rnn_gemm)(bool ta, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float beta, float *c, int ldc);
    /* Normalization over rows (rows, cols), a mean and variance per column:
     * y = (x - mean) / max(sqrt(var), 1e-7), or with invert y = mean + x max(sqrt(var), 1e-7),
     * as Keras computes it. norm_bwd: dx (=/+=) dy / max(...) (invert: dy max(...)). */
    void (*norm_fwd)(const float *x, float *y, const float *mean, const float *var, size_t rows,
                     int cols, bool invert);
    void (*norm_bwd)(const float *dy, const float *var, float *dx, size_t rows, int cols,
                     bool invert, bool acc);
    /* CategoryEncoding: ids (n, t) as exact floats -> y (n, tokens): one_hot (t = 1) and
     * multi_hot write 1 where an id occurs, count the number of times. An id outside
     * [0, tokens) counts nothing and is reported in bad (device, 3 floats, written every call:
     * the count, the first such id and its index), as embed_fwd does. */
    void (*cat_encode)(const float *ids, int n, int t, int tokens, dt_nn_cat_mode mode, float *y,
                       float *bad);

    /* One host synchronisation per training step: the step's numbers (loss sum, regularisation,
     * accuracy hits, the layers' bad-id reports) stay in device memory until the step's end,
     * where one download_async each and one sync bring them to the host (model.c's step block).
     * host_alloc: zeroed host memory a download_async may write (pinned on a GPU, where a copy
     * into pageable memory would wait for the stream); NULL or host_free'd.
     * download_async: queues a copy of device memory into dst (from host_alloc); dst holds it
     * after the next sync (at once on the CPU).
     * loss_dev: the loss over a batch of rows (n, cols), see dt_nn_loss_p: pred are the model's
     *   outputs (logits for the CE family when from_logits), the target is labels (sparse CE,
     *   int32 (n), each in [0, cols) or ignore_class) or values (n, cols). Writes
     *   scale * d(loss_i)/d(pred) into dpred (scale = 1/global batch gives Keras's mean) and
     *   into loss_sum (device memory, one double, written; 0 when n is 0) the sum over rows of
     *   the per-sample losses (Keras's reduction before the mean). row_w (n; NULL: all 1) weighs
     *   each row's loss and gradient (Keras's sample weights, from class_weight).
     * regularize_dev: out (device memory, one double, written) = l1*sum|w| + l2*sum w^2 over
     *   w (n), and scale times its gradient added to g.
     * hits: out (device, one double) = the batch's accuracy hits, summed in double over the rows
     *   in order (binary: ok columns / cols a row); labels (n int32) for SPARSE, targets
     *   (n, cols) for CATEGORICAL, and for BINARY targets or else labels as floats.
     * clip_norm: clipnorm > 0: each segment s of g (off[s], len[s]) scaled by clipnorm / |g_s|
     *   where |g_s| <= clipnorm fails; else all of g (n floats) scaled by global_clipnorm / |g|
     *   where |g| > global_clipnorm, filled with NaN where |g| is not finite (|g| over the
     *   segments). Each segment's sum of squares is summed in double in a fixed order (the CPU:
     *   index order), the global one over the segments in segment order; the scales
     *   (float)(c / norm) in double, applied as axpby(scale, g, 0, g) does: off, len and ss
     *   (nseg doubles, the segments' sums of squares left there) are device memory. Nothing
     *   goes to the host. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    void (*download_async)(void *dst, const void *src, size_t bytes);
    void (*loss_dev)(const dt_nn_loss_p *p, const float *pred, const int32_t *labels,
                     const float *values, const float *row_w, size_t n, int cols, float scale,
                     float *dpred, double *loss_sum);
    void (*regularize_dev)(const float *w, float *g, size_t n, float l1, float l2, float scale,
                           double *out);
    void (*hits)(dt_nn_hits_kind kind, const float *pred, const int32_t *labels,
                 const float *targets, size_t n, int cols, double *out);
    void (*clip_norm)(float *g, size_t n, size_t nseg, const size_t *off, const size_t *len,
                      float clipnorm, float global_clipnorm, double *ss);
} dt_nn_ops;

/* The CPU backend (OpenBLAS GEMM); never NULL. */
const dt_nn_ops *dt_nn_ops_cpu(void);
/* The CPU kernels with the discipline of a device backend enforced: its memory is unreadable to
 * the host except inside a kernel, upload or download (a stray host access faults at once), and
 * every kernel checks that its buffers are its own. For tests of code above the table; same
 * bits as dt_nn_ops_cpu(). DTRAIN_OPS_GUARD=1 makes it the default of models built without ops. */
const dt_nn_ops *dt_nn_ops_guard(void);
/* The OpenBLAS core and thread count in one line ("OpenBLAS 0.3.21 Haswell, 1 thread"). */
const char *dt_nn_blas_info(char *buf, size_t n);
/* Sets OpenBLAS's thread count (<= 0 leaves the machine's setting). */
void dt_nn_blas_threads(int n);

static inline void *dt_nn_alloc(const dt_nn_ops *o, size_t bytes)
{
    return o->alloc(bytes);
}
static inline void dt_nn_free(const dt_nn_ops *o, void *p)
{
    if (p)
        o->free(p);
}
static inline void dt_nn_gemm(const dt_nn_ops *o, bool ta, bool tb, int m, int n, int k,
                              float alpha, const float *a, int lda, const float *b, int ldb,
                              float beta, float *c, int ldc)
{
    o->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#endif
