/*
 * layer.h - internal to nn: the layer structure, the per-class vtable and the step context.
 *
 * A layer class provides parse (Keras config -> fields, refusing what it does not support),
 * build (input shapes -> output shape, weights, buffer sizes), forward and backward. The model
 * (model.c) owns the layers, allocates every buffer and runs them in topological order. Layers do
 * arithmetic only through c->ops.
 */
#ifndef DT_NN_LAYER_H
#define DT_NN_LAYER_H

#include "core/rng.h"
#include "core/status.h"
#include "nn/model.h"
#include "nn/ops.h"

#include <cjson/cJSON.h>

#define DT_NN_MAX_IN 16 /* inputs of one merge layer */
#define DT_NN_MAX_W  8  /* weights of one layer (MultiHeadAttention has 8) */

typedef struct dt_nn_shape {
    int rank;
    int d[DT_NN_MAX_RANK];
} dt_nn_shape;

static inline size_t dt__nn_shape_size(const dt_nn_shape *s)
{
    size_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= (size_t)s->d[i];
    return n;
}

/* Keras initializers. The named random ones (GlorotUniform, HeNormal, ...) are VarianceScaling
 * with Keras's parameters. */
typedef enum dt__nn_init_kind {
    DT_NN_INIT_ZEROS,
    DT_NN_INIT_ONES,
    DT_NN_INIT_CONSTANT,         /* a = value */
    DT_NN_INIT_VARIANCE_SCALING, /* scale, mode, dist */
    DT_NN_INIT_RANDOM_UNIFORM,   /* a = minval, b = maxval */
    DT_NN_INIT_RANDOM_NORMAL,    /* a = mean, b = stddev */
    DT_NN_INIT_TRUNCATED_NORMAL, /* a = mean, b = stddev, cut at 2 stddev */
    DT_NN_INIT_ORTHOGONAL,       /* a = gain */
} dt__nn_init_kind;

typedef enum { DT_NN_FAN_IN, DT_NN_FAN_OUT, DT_NN_FAN_AVG } dt__nn_fan;
typedef enum { DT_NN_DIST_UNIFORM, DT_NN_DIST_TRUNCATED, DT_NN_DIST_NORMAL } dt__nn_dist;

typedef struct dt__nn_init {
    dt__nn_init_kind kind;
    double a, b, scale;
    dt__nn_fan mode;
    dt__nn_dist dist;
    /* > 0: then values [forget, 2 forget) are 1 (LSTM's unit_forget_bias; forget = units) */
    int forget;
} dt__nn_init;

/* The Keras default kernel initializer (GlorotUniform). */
#define DT_NN_INIT_GLOROT_UNIFORM_                                                                 \
    ((dt__nn_init){.kind = DT_NN_INIT_VARIANCE_SCALING,                                            \
                   .scale = 1.0,                                                                   \
                   .mode = DT_NN_FAN_AVG,                                                          \
                   .dist = DT_NN_DIST_UNIFORM})

typedef struct dt__nn_weight {
    char var[96]; /* "kernel", "forward_lstm/lstm_cell/recurrent_kernel", "dense/kernel" */
    dt_nn_shape shape;
    bool trainable;
    dt__nn_init init;
    float l1, l2; /* regularizer */
    int pub;      /* index in the model's weight table */
    float *data, *grad;
} dt__nn_weight;

typedef struct dt__nn_layer dt__nn_layer;
typedef struct dt__nn_ctx dt__nn_ctx;

/* Keras masking (Embedding's mask_zero). A layer that MAKEs a mask sets l->mask_len (its
 * timesteps) in build and writes l->mask ([batch, mask_len] of 1 and 0) in forward. A layer
 * that PASSes keeps its input's mask on its output, when the output still has those
 * timesteps on its first axis; DROP (the default) ends it there. A layer that uses a mask
 * (a recurrent layer, GlobalAveragePooling1D) reads its input's with dt__nn_in_mask. build
 * may change l->mask_rule (a recurrent layer passes only with return_sequences). */
typedef enum dt__nn_mask_rule {
    DT_NN_MASK_DROP,
    DT_NN_MASK_PASS,
    DT_NN_MASK_MAKE
} dt__nn_mask_rule;

typedef struct dt__nn_layer_vt {
    const char *class_name;
    /* Reads the layer's config; the common keys are read by keras.c. NULL: no options. */
    dt_status (*parse)(dt__nn_layer *l, const cJSON *cfg, dt_err *err);
    /* From l->in_shape: sets l->out, declares weights (l->w, l->n_w) and aux bytes/sample. */
    dt_status (*build)(dt__nn_layer *l, dt_err *err);
    void (*forward)(dt__nn_layer *l, dt__nn_ctx *c);
    void (*backward)(dt__nn_layer *l, dt__nn_ctx *c);
    /* At the step's end, after its one sync: reports what the batch did wrong that the layer
     * found (an Embedding's id outside its table) as the step's error, from stat, the host copy
     * of the first 3 floats of l->stat (its forward's report). NULL: nothing to check. */
    dt_status (*check)(dt__nn_layer *l, const float *stat, dt_err *err);
    /* Keys of the config this class reads (besides the common ones), NULL-terminated. */
    const char *const *keys;
    dt__nn_mask_rule mask;
} dt__nn_layer_vt;

struct dt__nn_layer {
    const dt__nn_layer_vt *vt;
    char name[DT_NN_NAME_LEN];
    int index;
    int json_index; /* its place in $.config.layers, for messages; -1: synthesized */
    bool trainable;
    int n_in;
    int in[DT_NN_MAX_IN]; /* producer layer indices */
    dt_nn_shape in_shape[DT_NN_MAX_IN];
    dt_nn_shape out;

    /* Config (each class reads its own fields). */
    dt_nn_act_p act; /* fused activation (Dense, Conv2D) or the layer's own */
    int units;       /* Dense units, Conv2D filters */
    int kh, kw, sh, sw;
    int dil[2]; /* dilation_rate (Conv2D, DepthwiseConv2D); 0 before parse means 1 */
    int mult;   /* depth_multiplier (DepthwiseConv2D, SeparableConv2D) */
    int groups; /* Conv2D's groups (0 or 1: none) */
    bool same;  /* padding "same" */
    bool use_bias, center, scale_on, keepdims;
    float rate; /* Dropout */
    float scale, offset, momentum, eps;
    int pad[4];         /* ZeroPadding2D top, bottom, left, right */
    int up[2];          /* UpSampling2D */
    dt_nn_shape target; /* Reshape (-1 allowed before build) */
    dt_nn_shape decl;   /* declared input shape (InputLayer; first layer of a Keras 2 model) */
    dt__nn_init kinit, binit, ginit, beinit, mminit, mvinit;
    float kl1, kl2, bl1, bl2;
    float pl1,
        pl2; /* SeparableConv2D's pointwise_regularizer; its pointwise_initializer is ginit */
    /* Image preprocessing layers (layers_augment.c): the factor's range [lo, hi], Keras's
     * value_range, the flip axes (1 left-right, 2 upside down), the target size, and
     * crop_to_aspect_ratio / interpolation "nearest" of Resizing. */
    float aug_factor[2], aug_range[2];
    int aug_flip, aug_h, aug_w;
    bool aug_crop, aug_nearest;
    int aug_interp; /* Resizing: dt_nn_interp (CenterCrop, RandomCrop: 0, bilinear) */
    /* RandomTranslation/RandomZoom: the width factor's range (aug_factor is the height's, or
     * RandomRotation's); zoom without a width_factor zooms both axes alike (aug_same), as a
     * Keras 3 RandomFlip flips both axes on one draw (aug_same); the fill mode and value of
     * the transform. */
    float aug_factor_w[2], aug_fill_value;
    int aug_fill; /* dt_nn_fill */
    bool aug_same;

    /* Recurrent layers (layers_rnn.c): the cell (dt_nn_cell), its activation and recurrent
     * activation (dt_nn_cell_act), the recurrent kernel's initializer and regularizer, the
     * options (the input dropout's rate is `rate`), and Bidirectional's merge mode and its two
     * layers' names. */
    int rnn_cell, rnn_act, rnn_rec, rnn_merge;
    bool rnn_seq, rnn_back, rnn_reset_after, rnn_zero_masked, rnn_bidi;
    bool rnn_gate_masks; /* dropout: one input mask per gate (implementation 1), else one */
    dt__nn_init rinit;
    float rl1, rl2;
    char rnn_names[2][DT_NN_NAME_LEN];

    /* Masking: the rule (vt->mask unless build changes it), the layer whose mask covers this
     * output's timesteps (-1: none; model.c sets it after build) and a made mask. */
    dt__nn_mask_rule mask_rule;
    int mask_src, mask_len;
    float *mask;

    /* MultiHeadAttention: heads, the per-head key and value widths, the output width, and
     * the call argument use_causal_mask. */
    int heads, key_dim, value_dim, attn_out;
    bool causal;

    /* TimeDistributed: the wrapped layer's name; its weights are "<layer>/<inner>/<var>", the
     * variable paths of Keras 3. */
    char inner[36];

    /* Config values a class keeps (Normalization's mean and variance), freed with the model. */
    float *cfg_floats;
    size_t n_cfg_floats;

    int n_w;
    dt__nn_weight w[DT_NN_MAX_W];

    /* Buffers (device), sized for the reserved batch. z is the pre-activation (NULL when the
     * activation is linear: y is written directly). aux holds per-sample scratch of aux_bytes
     * (dropout mask, max-pool argmax, BN xhat); stat per-layer scratch of stat_floats. */
    size_t aux_bytes, stat_floats;
    float *y, *dy, *z, *stat;
    void *aux;
    bool fused_loss; /* the loss took the gradient of the pre-activation: skip act backward */
    bool alias;      /* y/dy are the input's (Flatten, Reshape): nothing is copied */
    /* A plain relu whose only consumer is a max pool, which applies it (relu_in): y holds the
     * pre-activation and dy arrives as its gradient. Saves two passes over the largest tensor
     * of a CNN. */
    bool act_to_consumer, relu_in;
    /* A Conv2D's pool consumer (index, else 0): the conv runs the pool chunk by chunk of
     * samples, right after its GEMM, while the chunk is in cache; the pool's own forward and
     * backward then do nothing (pooled_by_producer). */
    int pool_consumer;
    bool pooled_by_producer;
    /* A BatchNormalization whose only consumer is a ReLU layer (MobileNet's BN -> ReLU6)
     * applies it: bn_relu is the cap (INFINITY: none; < 0: no ReLU fused), and the ReLU layer
     * becomes an alias of it (relu_in_bn) that does nothing. Saves a read and a write of the
     * tensor forward and three passes backward. */
    float bn_relu;
    bool relu_in_bn;
    /* A 1x1 Conv2D (no bias, activation or groups) whose only consumer is a
     * BatchNormalization: in training, with the table's gemm_bn_fwd, the conv runs the batch
     * norm's forward (bn_consumer: its index, else 0) in blocks of rows, summing its statistics
     * while each block of the conv's output is in cache; the batch norm's forward then does
     * nothing (bn_by_producer). Saves a read of the tensor. */
    int bn_consumer;
    bool bn_by_producer;
    /* A ZeroPadding2D whose only consumer is a valid DepthwiseConv2D (depth_multiplier 1;
     * MobileNet's stride-2 blocks) becomes an alias of its input that does nothing
     * (pad_in_conv): the conv's window takes the frame as its padding, whose taps it skips.
     * Saves filling and copying the padded tensor forward and copying its gradient back. */
    bool pad_in_conv;
    dt_nn_win win;
    size_t col_floats; /* im2col scratch per sample */
    int n_consumers;
    bool dy_written; /* reset every backward: the first consumer writes, the others add */
};

struct dt__nn_ctx {
    const dt_nn_ops *ops;
    dt__nn_layer *layers;
    int n; /* batch */
    bool training;
    dt_rng *rng;
    float *col; /* im2col scratch */
    /* Training backward only (else NULL): see dt__nn_weights_done. */
    void (*weights_done)(dt__nn_ctx *c, dt__nn_layer *l);
    void *owner;
    dt_model *model; /* whose step this is (dt__nn_drop's keys) */
};

/* Inverted dropout of n floats with the step's next key (model.c): drawn from c->rng now, or,
 * in a step whose per-step values were put on the device beforehand (a CUDA graph's step, see
 * dt_model_graph_feed), read by the kernel from there. Every layer's dropout goes through it,
 * so a step's draws are counted and replayable. */
void dt__nn_drop(dt__nn_ctx *c, const float *x, float *y, float *mask, size_t n, float rate);

/* A layer's backward calls this once its weight gradients are final and before it computes
 * dx: the model then hands them to the grad-ready hook, so their all-reduce runs while dx is
 * computed (a big Dense's all-reduce starts before its dx GEMM). Optional: a layer that does
 * not call it is reported after its backward. */
static inline void dt__nn_weights_done(dt__nn_ctx *c, dt__nn_layer *l)
{
    if (c->weights_done)
        c->weights_done(c, l);
}

/* Input i's output and gradient. need_dx: whether the producer wants a gradient (not an
 * InputLayer). take_acc: false for the first writer of the producer's dy, true after. */
static inline const float *dt__nn_x(dt__nn_ctx *c, dt__nn_layer *l, int i)
{
    return c->layers[l->in[i]].y;
}
bool dt__nn_need_dx(dt__nn_ctx *c, dt__nn_layer *l, int i);
/* Input i's mask ([batch, T] of 1 and 0), NULL when its timesteps are all real. */
static inline const float *dt__nn_in_mask(dt__nn_ctx *c, dt__nn_layer *l, int i)
{
    int s = c->layers[l->in[i]].mask_src;
    return s >= 0 ? c->layers[s].mask : NULL;
}
float *dt__nn_dx(dt__nn_ctx *c, dt__nn_layer *l, int i, bool *acc);

/* The fused activation of Dense and Conv2D: the GEMM writes dt__nn_pre(l), act_out turns it
 * into y; act_grad turns dy into the gradient of the pre-activation, in place. */
static inline float *dt__nn_pre(dt__nn_layer *l)
{
    return l->z ? l->z : l->y;
}
void dt__nn_act_out(dt__nn_layer *l, dt__nn_ctx *c, size_t rows, int cols);
/* Whether producer p runs its batch norm consumer's forward in this pass (see bn_consumer). */
static inline bool dt__nn_bn_by_producer(const dt__nn_layer *p, const dt__nn_ctx *c)
{
    return p->bn_consumer > 0 && c->training && c->ops->gemm_bn_fwd;
}
/* The forward of batch norm bn (a 1x1 conv's consumer) with the conv: z (rows, n) = x (rows, k)
 * w (k, n) and bn's output from it, through the table's gemm_bn_fwd. */
void dt__nn_bn_gemm_fwd(dt__nn_layer *bn, dt__nn_ctx *c, int rows, int k, const float *x,
                        const float *w, float *z);
void dt__nn_act_grad(dt__nn_layer *l, dt__nn_ctx *c, size_t rows, int cols);

/* Adds weight `var` of shape to l (build time). */
dt__nn_weight *dt__nn_add_weight(dt__nn_layer *l, const char *var, dt_nn_shape shape,
                                 bool trainable, dt__nn_init init);

/* Config readers shared by the classes: they name the layer, its class and the key. */
/* v is a JSON number holding an integer in [lo, hi] (no fraction, no overflow): *out gets it. */
bool dt__nn_int(const cJSON *v, int lo, int hi, int *out);
dt_status dt__nn_cfg_int(const dt__nn_layer *l, const cJSON *cfg, const char *key, int def,
                         int *out, dt_err *err);
dt_status dt__nn_cfg_float(const dt__nn_layer *l, const cJSON *cfg, const char *key, float def,
                           float *out, dt_err *err);
dt_status dt__nn_cfg_bool(const dt__nn_layer *l, const cJSON *cfg, const char *key, bool def,
                          bool *out, dt_err *err);
/* An int or a list of two ints ("kernel_size": 3 or [3, 3]). */
dt_status dt__nn_cfg_pair(const dt__nn_layer *l, const cJSON *cfg, const char *key, int def,
                          int out[2], dt_err *err);
/* "valid" or "same". */
dt_status dt__nn_cfg_padding(const dt__nn_layer *l, const cJSON *cfg, bool *same, dt_err *err);
dt_status dt__nn_cfg_activation(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                                dt_nn_act_p *out, dt_err *err);
dt_status dt__nn_cfg_init(const dt__nn_layer *l, const cJSON *cfg, const char *key, dt__nn_init def,
                          dt__nn_init *out, dt_err *err);
dt_status dt__nn_cfg_regularizer(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                                 float *l1, float *l2, dt_err *err);
/* The keys of a layer with a kernel and a bias (Dense, Conv1D/2D, MultiHeadAttention, ...):
 * kernel_initializer (GlorotUniform) and bias_initializer (Zeros) into kinit/binit, their L1/L2
 * regularizers into kl1/kl2/bl1/bl2, and activity_regularizer and the constraints null. */
dt_status dt__nn_cfg_kernel_bias(dt__nn_layer *l, const cJSON *cfg, dt_err *err);
/* Refuses a key whose value is anything but null (constraints, activity regularizers). */
dt_status dt__nn_cfg_null(const dt__nn_layer *l, const cJSON *cfg, const char *key, dt_err *err);
/* Refuses a key whose value is present and differs from the string want. */
dt_status dt__nn_cfg_string_is(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                               const char *want, dt_err *err);
/* Conv2D's and DepthwiseConv2D's dilation_rate: [1, 1], or a rate > 1 with strides 1 (as
 * Keras requires); reads l->sh and l->sw, sets l->dil. */
dt_status dt__nn_cfg_dilation(dt__nn_layer *l, const cJSON *cfg, dt_err *err);
/* l->win from the input shape and kh, kw, sh, sw, dil, same, with Keras's output size and
 * padding (layers_conv.c). */
dt_status dt__nn_window_build(dt__nn_layer *l, dt_err *err);
/* Errors: "model: layer 'conv2d' (Conv2D): option 'padding': ..." */
dt_status dt__nn_layer_err(const dt__nn_layer *l, dt_status code, dt_err *err, const char *fmt, ...)
    DT_PRINTF(4, 5);

/* The class table (layers_*.c) and its lookup; NULL for an unknown class. */
const dt__nn_layer_vt *dt__nn_find_class(const char *class_name);
/* "Dense, Conv2D, ..." for messages. */
const char *dt__nn_class_list(void);

/* Fills host memory with an initializer (init.c); fan_in/fan_out follow Keras's rules for the
 * shape. */
void dt__nn_init_fill(const dt__nn_init *init, const dt_nn_shape *shape, float *host, dt_rng *rng);
dt_status dt__nn_init_parse(const cJSON *j, dt__nn_init *out, char *why, size_t why_len);
dt_status dt__nn_act_parse(const char *name, dt_nn_act_p *out);

/* The layers of a parsed model in topological order (keras.c fills it, model.c owns it). */
typedef struct dt__nn_graph {
    char name[DT_NN_NAME_LEN];
    bool sequential;
    dt__nn_layer *layers; /* calloc'd */
    int n;
    int output; /* index of the output layer; layer 0 is the only InputLayer */
} dt__nn_graph;

/* A built model's layers (the unit tests give a recurrent layer's input a mask by hand). */
dt__nn_graph *dt__nn_model_graph(dt_model *m);

/* Keras's adapt() for Normalization layers without a config mean and variance
 * (layers_preproc.c): count them, then feed the model's inputs and finish, which writes their
 * mean, variance and count weights. */
int dt__nn_adapt_count(dt__nn_graph *g);
dt_status dt__nn_adapt_new(dt__nn_graph *g, dt_model_adapt **out, dt_err *err);
void dt__nn_adapt_rows(dt_model_adapt *a, const float *x, size_t n);
void dt__nn_adapt_finish(dt_model_adapt *a, const dt_nn_ops *ops);
void dt__nn_adapt_free(dt_model_adapt *a);

/* Parses a model.to_json() document into g (layers parsed, not built: shapes are set later). */
dt_status dt__nn_keras_parse(const cJSON *root, dt__nn_graph *g, dt_err *err);

/* Per-class vtables. */
extern const dt__nn_layer_vt dt__nn_mha, dt__nn_normalization, dt__nn_category_encoding;
extern const dt__nn_layer_vt dt__nn_input_layer, dt__nn_dense, dt__nn_flatten, dt__nn_reshape,
    dt__nn_dropout, dt__nn_activation, dt__nn_relu, dt__nn_leaky_relu, dt__nn_softmax,
    dt__nn_rescaling, dt__nn_conv2d, dt__nn_maxpool2d, dt__nn_avgpool2d, dt__nn_gap2d, dt__nn_gmp2d,
    dt__nn_upsampling2d, dt__nn_zeropadding2d, dt__nn_batchnorm, dt__nn_add, dt__nn_concatenate,
    dt__nn_resizing, dt__nn_center_crop, dt__nn_random_flip, dt__nn_random_brightness,
    dt__nn_random_contrast, dt__nn_random_crop, dt__nn_random_translation, dt__nn_random_zoom,
    dt__nn_random_rotation, dt__nn_multiply, dt__nn_subtract, dt__nn_average, dt__nn_maximum,
    dt__nn_cropping2d, dt__nn_depthwise_conv2d, dt__nn_separable_conv2d, dt__nn_spatial_dropout2d;
/* layers_deconv.c */
extern const dt__nn_layer_vt dt__nn_conv2d_transpose;
/* layers_seq.c, and SpatialDropout1D in layers_vision.c */
extern const dt__nn_layer_vt dt__nn_embedding, dt__nn_conv1d, dt__nn_maxpool1d, dt__nn_avgpool1d,
    dt__nn_gap1d, dt__nn_gmp1d, dt__nn_layernorm, dt__nn_time_distributed, dt__nn_spatial_dropout1d;
/* layers_rnn.c */
extern const dt__nn_layer_vt dt__nn_simple_rnn, dt__nn_lstm, dt__nn_gru, dt__nn_bidirectional;

#endif
