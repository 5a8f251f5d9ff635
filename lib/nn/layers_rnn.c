/* layers_rnn.c - the recurrent layers SimpleRNN, LSTM and GRU and the Bidirectional wrapper, as
 * Keras defines them (Keras 2 and 3 configs, weights named and laid out as Keras's:
 * "lstm/lstm_cell/kernel" (in, 4 units) with the gates i, f, c, o; GRU z, r, h with a (2, 3 units)
 * bias when reset_after).
 *
 * A direction runs the input projection of every timestep as one GEMM, then per timestep the
 * recurrent GEMM and the cell's element-wise kernel (ops->rnn_fwd); backpropagation through time
 * walks the steps back the same way and ends with one GEMM each for the kernel's gradient and
 * the input's. Masked timesteps (dt__nn_in_mask) keep the state; their output is the kept state,
 * or 0 with zero_output_for_mask (which Bidirectional sets with return_sequences, as Keras).
 * dropout masks the input with one draw per sample over the features, kept for every timestep
 * (one per gate with "implementation": 1); recurrent_dropout is refused.
 *
 * Per-sample scratch (aux), per direction, in this order: the gate pre-activations A (T, G u)
 * (overwritten by their gradients in backward), the states H (T + 1, u) time-major, an LSTM's
 * cell states C (T + 1, u), a GRU's per-step q (T, u), the recurrent projection R (G u), the
 * carried gradients dH, dC, dQ (u each), Bidirectional's per-direction output and its
 * gradient (T_out, u each), and with dropout the masks (groups, T, D), one draw (D) and the
 * masked input (T, D). Per layer (stat),
 * per direction: the recurrent kernel packed for rnn_gemm as U (u, G u) and U^T (G u, u), the
 * input kernel W as W (D, G u) and W^T (G u, D).
 *
 * Where the backend has rnn_gemm (the CPU's), the per-timestep products h0 U, d(a) U^T and
 * h0^T d(a) (GRU's reset_after false: by gate groups) run through it with U packed once a pass;
 * so do the sequence-long ones, x W, d(a) W^T and x^T d(a) (k = n T, d(a) read in place): at an
 * LSTM(64)'s (6400, 128) x (128, 256) each takes 0.5-0.6 the time of OpenBLAS's Haswell kernels.
 * Else everything runs through gemm. */
#include "nn/layer.h"

#include "core/limits.h"

#include <stdio.h>
#include <string.h>

enum { MERGE_CONCAT, MERGE_SUM, MERGE_MUL, MERGE_AVE };

static int gates_of(int cell)
{
    return cell == DT_NN_CELL_LSTM ? 4 : cell == DT_NN_CELL_GRU ? 3 : 1;
}

static const char *cell_name(int cell)
{
    return cell == DT_NN_CELL_LSTM  ? "lstm_cell"
           : cell == DT_NN_CELL_GRU ? "gru_cell"
                                    : "simple_rnn_cell";
}

/* ---- config -------------------------------------------------------------------------------- */

#define RNN_KEYS                                                                                   \
    "units", "activation", "use_bias", "kernel_initializer", "recurrent_initializer",              \
        "bias_initializer", "kernel_regularizer", "recurrent_regularizer", "bias_regularizer",     \
        "activity_regularizer", "kernel_constraint", "recurrent_constraint", "bias_constraint",    \
        "dropout", "recurrent_dropout", "seed", "return_sequences", "return_state",                \
        "go_backwards", "stateful", "unroll", "time_major", "zero_output_for_mask"

static const char *const simple_keys[] = {RNN_KEYS, NULL};
static const char *const lstm_keys[] = {
    RNN_KEYS, "recurrent_activation", "unit_forget_bias", "implementation", "use_cudnn", NULL};
static const char *const gru_keys[] = {
    RNN_KEYS, "recurrent_activation", "reset_after", "implementation", "use_cudnn", NULL};

static const cJSON *get(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* An activation a cell can apply. hard_sigmoid is clip(0.2 x + 0.5) in Keras 2 and
 * relu6(x + 3) / 6 in Keras 3; keras2 says which wrote the config. */
static dt_status cell_act(const dt__nn_layer *l, const cJSON *cfg, const char *key, int def,
                          bool keras2, int *out, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    *out = def;
    if (!v)
        return DT_OK;
    const char *name = NULL;
    if (cJSON_IsString(v)) {
        name = v->valuestring;
    } else if (cJSON_IsObject(v)) { /* Keras 3: {"class_name": "function", "config": "tanh"} */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "config");
        name = cJSON_IsString(c) ? c->valuestring : NULL;
    }
    if (!name)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected an activation name", key);
    static const struct {
        const char *name;
        int kind;
    } acts[] = {{"tanh", DT_NN_CACT_TANH},
                {"sigmoid", DT_NN_CACT_SIGMOID},
                {"relu", DT_NN_CACT_RELU},
                {"linear", DT_NN_CACT_LINEAR}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (!strcmp(name, acts[i].name)) {
            *out = acts[i].kind;
            return DT_OK;
        }
    if (!strcmp(name, "hard_sigmoid")) {
        *out = keras2 ? DT_NN_CACT_HARD_SIGMOID2 : DT_NN_CACT_HARD_SIGMOID3;
        return DT_OK;
    }
    return dt__nn_layer_err(l, DT_ENOTSUP, err,
                            "option '%s': activation \"%s\" is not supported in a recurrent cell "
                            "(tanh, sigmoid, hard_sigmoid, relu, linear)",
                            key, name);
}

static dt_status refuse_true(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                             const char *why, dt_err *err)
{
    bool b;
    DT_TRY(dt__nn_cfg_bool(l, cfg, key, false, &b, err));
    if (b)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option '%s': true is not supported (%s)", key,
                                why);
    return DT_OK;
}

static dt_status cell_parse(dt__nn_layer *l, const cJSON *cfg, int cell, dt_err *err)
{
    l->rnn_cell = cell;
    DT_TRY(dt__nn_cfg_int(l, cfg, "units", 0, &l->units, err));
    if (l->units < 1 || l->units > (1 << 20))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'units': %d is not in 1..1048576",
                                l->units);
    /* Keras 3 writes "seed"; Keras 2 "implementation" (LSTM, GRU) and "time_major". */
    bool keras2 =
        !cJSON_HasObjectItem(cfg, "seed") &&
        (cJSON_HasObjectItem(cfg, "implementation") || cJSON_HasObjectItem(cfg, "time_major"));
    DT_TRY(cell_act(l, cfg, "activation", DT_NN_CACT_TANH, keras2, &l->rnn_act, err));
    l->rnn_rec = DT_NN_CACT_SIGMOID;
    if (cell != DT_NN_CELL_SIMPLE)
        DT_TRY(
            cell_act(l, cfg, "recurrent_activation", DT_NN_CACT_SIGMOID, keras2, &l->rnn_rec, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "use_bias", true, &l->use_bias, err));
    DT_TRY(
        dt__nn_cfg_init(l, cfg, "kernel_initializer", DT_NN_INIT_GLOROT_UNIFORM_, &l->kinit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "recurrent_initializer",
                           (dt__nn_init){.kind = DT_NN_INIT_ORTHOGONAL, .a = 1}, &l->rinit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "bias_initializer", (dt__nn_init){.kind = DT_NN_INIT_ZEROS},
                           &l->binit, err));
    bool forget = false, reset_after = true;
    if (cell == DT_NN_CELL_LSTM)
        DT_TRY(dt__nn_cfg_bool(l, cfg, "unit_forget_bias", true, &forget, err));
    if (forget) /* Keras: the forget gate's bias starts at 1, the others from the initializer */
        l->binit.forget = l->units;
    if (cell == DT_NN_CELL_GRU)
        DT_TRY(dt__nn_cfg_bool(l, cfg, "reset_after", true, &reset_after, err));
    l->rnn_reset_after = cell == DT_NN_CELL_GRU && reset_after;
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "kernel_regularizer", &l->kl1, &l->kl2, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "recurrent_regularizer", &l->rl1, &l->rl2, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "bias_regularizer", &l->bl1, &l->bl2, err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "activity_regularizer", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "kernel_constraint", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "recurrent_constraint", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "bias_constraint", err));
    /* dropout: one mask per sample over the input features, the same at every timestep; with
     * "implementation": 1 one such mask per gate (Keras 2 and 3 alike), else one for all. */
    DT_TRY(dt__nn_cfg_float(l, cfg, "dropout", 0, &l->rate, err));
    if (l->rate < 0 || l->rate >= 1)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option 'dropout': %g is not in [0, 1)",
                                (double)l->rate);
    float rec_rate;
    DT_TRY(dt__nn_cfg_float(l, cfg, "recurrent_dropout", 0, &rec_rate, err));
    if (rec_rate != 0)
        return dt__nn_layer_err(
            l, DT_ENOTSUP, err,
            "option 'recurrent_dropout': %g is not supported (only 0: recurrent "
            "dropout is not implemented; 'dropout' is)",
            (double)rec_rate);
    int ignored;
    DT_TRY(dt__nn_cfg_int(l, cfg, "seed", 0, &ignored, err)); /* the model's seed drives draws */
    int impl;
    DT_TRY(dt__nn_cfg_int(l, cfg, "implementation", 2, &impl, err)); /* else a speed choice */
    l->rnn_gate_masks = impl == 1;
    const cJSON *cudnn = get(cfg, "use_cudnn"); /* a speed choice: true, false or "auto" */
    if (cudnn && !cJSON_IsBool(cudnn) && !cJSON_IsString(cudnn))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'use_cudnn': expected true, false or "
                                "\"auto\"");
    bool b;
    DT_TRY(dt__nn_cfg_bool(l, cfg, "unroll", false, &b, err)); /* same result either way */
    DT_TRY(dt__nn_cfg_bool(l, cfg, "return_sequences", false, &l->rnn_seq, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "go_backwards", false, &l->rnn_back, err));
    DT_TRY(dt__nn_cfg_bool(l, cfg, "zero_output_for_mask", false, &l->rnn_zero_masked, err));
    DT_TRY(refuse_true(l, cfg, "return_state", "a model has one output per layer", err));
    DT_TRY(refuse_true(l, cfg, "stateful", "every batch starts from zero states", err));
    DT_TRY(refuse_true(l, cfg, "time_major", "inputs are (batch, timesteps, features)", err));
    return DT_OK;
}

static dt_status simple_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return cell_parse(l, cfg, DT_NN_CELL_SIMPLE, err);
}

static dt_status lstm_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return cell_parse(l, cfg, DT_NN_CELL_LSTM, err);
}

static dt_status gru_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    return cell_parse(l, cfg, DT_NN_CELL_GRU, err);
}

/* ---- Bidirectional config -------------------------------------------------------------------- */

static const char *const bidi_keys[] = {"layer", "merge_mode", "backward_layer", NULL};

/* Keras 2's Bidirectional(LSTM(..., input_shape=...)) as a Sequential's first layer: the wrapped
 * layer carries the model's input shape [null, timesteps, features]; l declares it unless it
 * declares one itself. */
static dt_status inner_shape(dt__nn_layer *l, const cJSON *ic, dt_err *err)
{
    const cJSON *bs = get(ic, "batch_shape");
    if (!bs)
        bs = get(ic, "batch_input_shape");
    if (!bs || l->decl.rank > 0)
        return DT_OK;
    int n = cJSON_IsArray(bs) ? cJSON_GetArraySize(bs) : 0;
    dt_nn_shape s = {.rank = n - 1};
    bool ok = n >= 2 && n <= DT_NN_MAX_RANK + 1;
    for (int i = 1; ok && i < n; i++)
        ok = dt__nn_int(cJSON_GetArrayItem(bs, i), 1, DT_MAX_NN_DIM, &s.d[i - 1]);
    if (!ok)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option 'layer': its input shape must be [null, d1, ...] with "
                                "fixed sizes in 1..%d",
                                DT_MAX_NN_DIM);
    l->decl = s;
    return DT_OK;
}

/* Parses the recurrent layer at cfg's key into tmp; an error names the Bidirectional l, the key
 * and the wrapped layer. */
static dt_status inner_parse(dt__nn_layer *l, const cJSON *cfg, const char *key, dt__nn_layer *tmp,
                             dt_err *err)
{
    const cJSON *j = get(cfg, key);
    const cJSON *cn = j ? cJSON_GetObjectItemCaseSensitive(j, "class_name") : NULL;
    const cJSON *ic = j ? cJSON_GetObjectItemCaseSensitive(j, "config") : NULL;
    if (!cJSON_IsString(cn) || !cJSON_IsObject(ic))
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option '%s': expected {\"class_name\": ..., \"config\": {...}}",
                                key);
    memset(tmp, 0, sizeof *tmp);
    tmp->json_index = -1;
    tmp->trainable = true;
    tmp->vt = dt__nn_find_class(cn->valuestring);
    if (tmp->vt != &dt__nn_simple_rnn && tmp->vt != &dt__nn_lstm && tmp->vt != &dt__nn_gru)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option '%s': class %s is not supported (SimpleRNN, LSTM, GRU)",
                                key, cn->valuestring);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ic, "name");
    snprintf(tmp->name, sizeof tmp->name, "%s", cJSON_IsString(nm) ? nm->valuestring : key);
    if (strchr(tmp->name, '/'))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': name '%s' contains '/'", key,
                                tmp->name);
    char prefix[DT_NN_NAME_LEN + 64];
    snprintf(prefix, sizeof prefix, "model: layer '%s' (%s): ", tmp->name, tmp->vt->class_name);
    dt_status st = dt__nn_cfg_bool(tmp, ic, "trainable", true, &tmp->trainable, err);
    const cJSON *k;
    cJSON_ArrayForEach(k, ic)
    {
        static const char *const common[] = {"name",        "trainable",         "dtype",
                                             "batch_shape", "batch_input_shape", "input_dtype"};
        bool known = false;
        for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
            known = known || !strcmp(k->string, common[i]);
        for (const char *const *p = tmp->vt->keys; !known && *p; p++)
            known = !strcmp(*p, k->string);
        if (!known && st == DT_OK)
            st = dt__nn_layer_err(tmp, DT_ENOTSUP, err, "option '%s' is not supported", k->string);
    }
    if (st == DT_OK)
        st = tmp->vt->parse(tmp, ic, err);

    if (st != DT_OK) {
        char rest[DT_ERR_LEN];
        size_t pl = strlen(prefix);
        int rl = snprintf(rest, sizeof rest, "%s",
                          strncmp(err->msg, prefix, pl) == 0 ? err->msg + pl : err->msg);
        (void)rl; /* a message cut at DT_ERR_LEN is fine */
        return dt__nn_layer_err(l, st, err, "option '%s' (%s '%s'): %s", key, tmp->vt->class_name,
                                tmp->name, rest);
    }
    return inner_shape(l, ic, err);
}

static dt_status set_name(dt__nn_layer *l, int d, const char *prefix, const char *name, dt_err *err)
{
    int n = snprintf(l->rnn_names[d], sizeof l->rnn_names[d], "%s%s", prefix, name);
    if (n < 0 || (size_t)n >= sizeof l->rnn_names[d])
        return dt__nn_layer_err(l, DT_EINVAL, err, "the wrapped layer's name '%s' is too long",
                                name);
    return DT_OK;
}

static dt_status bidi_parse(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    const cJSON *mm = cJSON_GetObjectItemCaseSensitive(cfg, "merge_mode");
    static const char *const modes[] = {"concat", "sum", "mul", "ave"};
    l->rnn_merge = -1;
    if (!mm)
        l->rnn_merge = MERGE_CONCAT;
    for (int i = 0; i < 4 && cJSON_IsString(mm); i++)
        if (!strcmp(mm->valuestring, modes[i]))
            l->rnn_merge = i;
    if (l->rnn_merge < 0)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option 'merge_mode': %s is not supported (concat, sum, mul, ave; "
                                "null returns two outputs)",
                                cJSON_IsString(mm) ? mm->valuestring : "this value");
    dt__nn_layer fw, bw;
    DT_TRY(inner_parse(l, cfg, "layer", &fw, err));
    /* Keras 3 names the forward layer "forward_" + its name without that prefix (its config
     * already carries it); Keras 2 prefixes the wrapped layer's name. */
    const char *base = !strncmp(fw.name, "forward_", 8) ? fw.name + 8 : fw.name;
    DT_TRY(set_name(l, 0, "forward_", base, err));
    if (get(cfg, "backward_layer")) {
        DT_TRY(inner_parse(l, cfg, "backward_layer", &bw, err));
        if (bw.vt != fw.vt || bw.units != fw.units || bw.rnn_act != fw.rnn_act ||
            bw.rnn_rec != fw.rnn_rec || bw.use_bias != fw.use_bias ||
            bw.rnn_reset_after != fw.rnn_reset_after || bw.rnn_seq != fw.rnn_seq ||
            bw.rnn_back == fw.rnn_back)
            return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                    "option 'backward_layer': only the mirror of 'layer' is "
                                    "supported (same class, units, activations, use_bias, "
                                    "reset_after and return_sequences; the other go_backwards)");
        /* Keras 3 stores the backward layer under its final name "backward_..."; Keras 2
         * prefixes a given backward layer's name. */
        DT_TRY(set_name(l, 1, strncmp(bw.name, "backward_", 9) ? "backward_" : "", bw.name, err));
    } else { /* Keras makes it: "backward_" + the wrapped layer's name */
        DT_TRY(set_name(l, 1, "backward_", fw.name, err));
    }
    l->rnn_cell = fw.rnn_cell;
    l->units = fw.units;
    l->rnn_act = fw.rnn_act;
    l->rnn_rec = fw.rnn_rec;
    l->use_bias = fw.use_bias;
    l->rnn_reset_after = fw.rnn_reset_after;
    l->rnn_seq = fw.rnn_seq;
    l->rnn_back = fw.rnn_back;
    l->rnn_zero_masked = fw.rnn_seq; /* Keras's Bidirectional forces zero_output_for_mask */
    l->rate = fw.rate;
    l->rnn_gate_masks = fw.rnn_gate_masks;
    l->kinit = fw.kinit;
    l->rinit = fw.rinit;
    l->binit = fw.binit;
    l->kl1 = fw.kl1;
    l->kl2 = fw.kl2;
    l->rl1 = fw.rl1;
    l->rl2 = fw.rl2;
    l->bl1 = fw.bl1;
    l->bl2 = fw.bl2;
    l->trainable = l->trainable && fw.trainable;
    l->rnn_bidi = true;
    return DT_OK;
}

/* ---- build ----------------------------------------------------------------------------------- */

static int n_dirs(const dt__nn_layer *l)
{
    return l->rnn_bidi ? 2 : 1;
}

static int steps(const dt__nn_layer *l)
{
    return l->in_shape[0].d[0];
}

static int steps_out(const dt__nn_layer *l)
{
    return l->rnn_seq ? steps(l) : 1;
}

/* Floats of scratch per sample and direction (see the file comment). */
/* Input dropout masks: one per gate, or one for all. */
static int drop_groups(const dt__nn_layer *l)
{
    return l->rnn_gate_masks ? gates_of(l->rnn_cell) : 1;
}

static size_t dir_floats(const dt__nn_layer *l)
{
    size_t T = (size_t)steps(l), u = (size_t)l->units, gu = (size_t)gates_of(l->rnn_cell) * u;
    size_t D = (size_t)l->in_shape[0].d[1];
    size_t f = T * gu + (T + 1) * u + gu + 3 * u;
    if (l->rnn_cell == DT_NN_CELL_LSTM)
        f += (T + 1) * u;
    if (l->rnn_cell == DT_NN_CELL_GRU)
        f += T * u;
    if (l->rnn_bidi)
        f += 2 * (size_t)steps_out(l) * u;
    if (l->rate > 0) /* the masks (groups, T, D) and (D), the masked input (T, D) */
        f += ((size_t)drop_groups(l) + 1) * T * D + D;
    return f;
}

static dt_status rnn_build(dt__nn_layer *l, dt_err *err)
{
    const dt_nn_shape *in = &l->in_shape[0];
    if (in->rank != 2)
        return dt__nn_layer_err(
            l, DT_EINVAL, err, "needs a (timesteps, features) input, not one of %d axes", in->rank);
    int T = in->d[0], D = in->d[1], u = l->units, gu = gates_of(l->rnn_cell) * u;
    /* The kernels index a sample's gates (T, G u) with ints. */
    if ((size_t)T * (size_t)gu > ((size_t)1 << 30))
        return dt__nn_layer_err(l, DT_ETOOBIG, err,
                                "%d timesteps x %d gate units is too large (limit 2^30 a sample)",
                                T, gu);
    int width = l->rnn_bidi && l->rnn_merge == MERGE_CONCAT ? 2 * u : u;
    l->out = l->rnn_seq ? (dt_nn_shape){2, {T, width}} : (dt_nn_shape){1, {width}};
    for (int d = 0; d < n_dirs(l); d++) {
        static const char *const vars[] = {"kernel", "recurrent_kernel", "bias"};
        dt_nn_shape shapes[3] = {{2, {D, gu}}, {2, {u, gu}}, {1, {gu}}};
        if (l->rnn_reset_after)
            shapes[2] = (dt_nn_shape){2, {2, gu}}; /* input bias, recurrent bias */
        const dt__nn_init *inits[3] = {&l->kinit, &l->rinit, &l->binit};
        const float l1[3] = {l->kl1, l->rl1, l->bl1}, l2[3] = {l->kl2, l->rl2, l->bl2};
        for (int k = 0; k < (l->use_bias ? 3 : 2); k++) {
            char var[sizeof l->w[0].var];
            int len = snprintf(var, sizeof var, "%s%s%s/%s", l->rnn_bidi ? l->rnn_names[d] : "",
                               l->rnn_bidi ? "/" : "", cell_name(l->rnn_cell), vars[k]);
            if (len < 0 || (size_t)len >= sizeof var)
                return dt__nn_layer_err(l, DT_EINVAL, err,
                                        "the weight name %s/%s/... is too long; shorten the "
                                        "wrapped layer's name",
                                        l->name, l->rnn_names[d]);
            dt__nn_weight *w = dt__nn_add_weight(l, var, shapes[k], true, *inits[k]);
            w->l1 = l1[k];
            w->l2 = l2[k];
        }
    }
    l->mask_rule = l->rnn_seq ? DT_NN_MASK_PASS : DT_NN_MASK_DROP;
    l->aux_bytes = (size_t)n_dirs(l) * dir_floats(l) * sizeof(float);
    l->stat_floats = (size_t)n_dirs(l) * 2 * ((size_t)u + (size_t)D) * (size_t)gu;
    return DT_OK;
}

/* ---- one direction --------------------------------------------------------------------------- */

typedef struct dir_bufs {
    float *a, *h, *c, *q, *r, *dh, *dc, *dq, *y, *dy;
    float *pu, *put;     /* U (u, G u) and U^T (G u, u) packed, per layer */
    float *pw, *pwt;     /* W (D, G u) and W^T (G u, D) packed, per layer */
    float *mx, *mc, *xd; /* input dropout: masks (groups, n, T, D), one draw (n, D), x masked */
} dir_bufs;

static dir_bufs bufs(dt__nn_layer *l, const dt__nn_ctx *c, int d)
{
    size_t n = (size_t)c->n, T = (size_t)steps(l), u = (size_t)l->units;
    size_t gu = (size_t)gates_of(l->rnn_cell) * u;
    float *p = (float *)l->aux + (size_t)d * n * dir_floats(l);
    dir_bufs b = {0};
#define TAKE(f, cnt) (b.f = p, p += n * (cnt))
    TAKE(a, T * gu);
    TAKE(h, (T + 1) * u);
    if (l->rnn_cell == DT_NN_CELL_LSTM)
        TAKE(c, (T + 1) * u);
    if (l->rnn_cell == DT_NN_CELL_GRU)
        TAKE(q, T * u);
    TAKE(r, gu);
    TAKE(dh, u);
    TAKE(dc, u);
    TAKE(dq, u);
    if (l->rnn_bidi) {
        TAKE(y, (size_t)steps_out(l) * u);
        TAKE(dy, (size_t)steps_out(l) * u);
    }
    if (l->rate > 0) {
        size_t D = (size_t)l->in_shape[0].d[1];
        TAKE(mx, (size_t)drop_groups(l) * T * D);
        TAKE(mc, D);
        TAKE(xd, T * D);
    }
#undef TAKE
    size_t D = (size_t)l->in_shape[0].d[1];
    b.pu = l->stat + (size_t)d * 2 * (u + D) * gu;
    b.put = b.pu + u * gu;
    b.pw = b.put + u * gu;
    b.pwt = b.pw + D * gu;
    return b;
}

static dt__nn_weight *dir_w(dt__nn_layer *l, int d)
{
    return &l->w[d * (l->use_bias ? 3 : 2)];
}

/* Direction d reads the input reversed (go_backwards; Bidirectional's backward layer flips it)
 * and Bidirectional's backward direction writes its outputs back in input order. */
static bool rev_in(const dt__nn_layer *l, int d)
{
    return d == 0 ? l->rnn_back : !l->rnn_back;
}

static dt_nn_rnn_step step_at(dt__nn_layer *l, dt__nn_ctx *c, const dir_bufs *b, int d, int s)
{
    int n = c->n, T = steps(l), u = l->units, gu = gates_of(l->rnn_cell) * u;
    int t = rev_in(l, d) ? T - 1 - s : s;
    const float *mask = dt__nn_in_mask(c, l, 0);
    size_t nu = (size_t)n * (size_t)u;
    return (dt_nn_rnn_step){
        .cell = (dt_nn_cell)l->rnn_cell,
        .n = n,
        .u = u,
        .act = (dt_nn_cell_act)l->rnn_act,
        .rec = (dt_nn_cell_act)l->rnn_rec,
        .reset_after = l->rnn_reset_after,
        .zero_masked = l->rnn_zero_masked,
        .mask = mask ? mask + t : NULL,
        .ldm = T,
        .a = b->a + (size_t)t * (size_t)gu,
        .lda = T * gu,
        .r = b->r,
        .q = b->q ? b->q + (size_t)s * nu : NULL,
        .h0 = b->h + (size_t)s * nu,
        .h1 = b->h + (size_t)(s + 1) * nu,
        .c0 = b->c ? b->c + (size_t)s * nu : NULL,
        .c1 = b->c ? b->c + (size_t)(s + 1) * nu : NULL,
        .ldy = steps_out(l) * u,
        .dh = b->dh,
        .dc = b->dc,
        .dq = b->dq,
    };
}

/* The output row of step s in out (n, T_out, u): every step's with return_sequences (in input
 * order for Bidirectional's backward direction), else the last step's only. */
static float *out_at(const dt__nn_layer *l, int d, int s, float *out)
{
    int T = steps(l);
    if (!l->rnn_seq)
        return s == T - 1 ? out : NULL;
    int o = (l->rnn_bidi && d == 1) ? T - 1 - s : s;
    return out + (size_t)o * (size_t)l->units;
}

static bool dropping(const dt__nn_layer *l, const dt__nn_ctx *c)
{
    return c->training && l->rate > 0;
}

/* The input dropout's masks of a step: per sample and group one draw over the features (as
 * Dropout draws, from the model's stream), spread over the timesteps (Keras keeps a cell's mask
 * for the whole sequence). */
static void draw_masks(dt__nn_layer *l, dt__nn_ctx *c, const dir_bufs *b)
{
    const dt_nn_ops *o = c->ops;
    size_t n = (size_t)c->n, T = (size_t)steps(l), D = (size_t)l->in_shape[0].d[1];
    for (int g = 0; g < drop_groups(l); g++) {
        o->fill(n * D, 1.0f, b->xd);
        dt__nn_drop(c, b->xd, b->xd, b->mc, n * D, l->rate);
        float *m = b->mx + (size_t)g * n * T * D;
        for (size_t s = 0; s < n; s++)
            o->copy2d(T, (int)D, b->mc + s * D, 0, m + s * T * D, (int)D, false);
    }
}

/* out(n T, D) (=/+=) the input masked by group g's dropout mask. */
static const float *masked_x(dt__nn_layer *l, dt__nn_ctx *c, const dir_bufs *b, int g)
{
    size_t all = (size_t)c->n * (size_t)steps(l) * (size_t)l->in_shape[0].d[1];
    c->ops->mul(all, dt__nn_x(c, l, 0), b->mx + (size_t)g * all, b->xd, false);
    return b->xd;
}

/* c (m, n) = beta c + A B: B is (part of) a kernel packed in p where the backend has rnn_gemm
 * (p NULL: b as it is, read in place), or gate gradients; without rnn_gemm, or a b^T not
 * packed, plain gemm with b (tb: b^T). */
static void rmul(const dt_nn_ops *o, bool ta, int m, int n, int k, const float *a, int lda,
                 const float *p, const float *b, bool tb, int ldb, float beta, float *c, int ldc)
{
    if (o->rnn_gemm && p)
        o->rnn_gemm(ta, m, n, k, a, lda, p, 0, beta, c, ldc);
    else if (o->rnn_gemm && !tb)
        o->rnn_gemm(ta, m, n, k, a, lda, b, ldb, beta, c, ldc);
    else
        dt_nn_gemm(o, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static void dir_forward(dt__nn_layer *l, dt__nn_ctx *c, int d, float *out)
{
    const dt_nn_ops *o = c->ops;
    int n = c->n, T = steps(l), D = l->in_shape[0].d[1], u = l->units;
    int gu = gates_of(l->rnn_cell) * u;
    bool split = l->rnn_cell == DT_NN_CELL_GRU && !l->rnn_reset_after;
    dir_bufs b = bufs(l, c, d);
    const dt__nn_weight *w = dir_w(l, d);
    if (!dropping(l, c)) {
        const float *pw = NULL;
        if (o->rnn_gemm) {
            o->rnn_pack(false, D, gu, w[0].data, gu, b.pw);
            pw = b.pw;
        }
        rmul(o, false, n * T, gu, D, dt__nn_x(c, l, 0), D, pw, w[0].data, false, gu, 0.0f, b.a, gu);
    } else { /* each group of gate columns from the input under its mask, W read in place */
        draw_masks(l, c, &b);
        int gw = gu / drop_groups(l);
        for (int g = 0; g < drop_groups(l); g++)
            rmul(o, false, n * T, gw, D, masked_x(l, c, &b, g), D, NULL, w[0].data + g * gw, false,
                 gu, 0.0f, b.a + g * gw, gu);
    }
    if (l->use_bias)
        o->bias_add(b.a, w[2].data, (size_t)n * (size_t)T, gu);
    o->fill((size_t)n * (size_t)u, 0.0f, b.h);
    if (b.c)
        o->fill((size_t)n * (size_t)u, 0.0f, b.c);
    /* the recurrent kernel packed once for the whole sequence, where the backend packs */
    const float *U = w[1].data, *pu = NULL, *pu_h = NULL;
    if (o->rnn_gemm && !split) {
        o->rnn_pack(false, u, gu, U, gu, b.pu);
        pu = b.pu;
    } else if (o->rnn_gemm) { /* U_z,r (u, 2 u) and U_h (u, u) */
        o->rnn_pack(false, u, 2 * u, U, gu, b.pu);
        o->rnn_pack(false, u, u, U + 2 * u, gu, b.pu + (size_t)2 * u * u);
        pu = b.pu;
        pu_h = b.pu + (size_t)2 * u * u;
    }
    for (int s = 0; s < T; s++) {
        dt_nn_rnn_step st = step_at(l, c, &b, d, s);
        st.y = out_at(l, d, s, out);
        if (!split) {
            rmul(o, false, n, gu, u, st.h0, u, pu, U, false, gu, 0.0f, b.r, gu);
            if (l->rnn_reset_after && l->use_bias)
                o->bias_add(b.r, w[2].data + gu, (size_t)n, gu);
            o->rnn_fwd(&st);
        } else { /* the reset gate scales h0 before its product with the candidate's kernel */
            rmul(o, false, n, 2 * u, u, st.h0, u, pu, U, false, gu, 0.0f, b.r, gu);
            st.phase = 0;
            o->rnn_fwd(&st);
            rmul(o, false, n, u, u, st.q, u, pu_h, U + 2 * u, false, gu, 0.0f, b.r + 2 * u, gu);
            st.phase = 1;
            o->rnn_fwd(&st);
        }
    }
}

/* Backpropagation through time of direction d given its output's gradient dout; leaves the
 * gradient of the pre-activations in b.a for the input's gradient. */
static void dir_backward(dt__nn_layer *l, dt__nn_ctx *c, int d, const float *dout)
{
    const dt_nn_ops *o = c->ops;
    int n = c->n, T = steps(l), D = l->in_shape[0].d[1], u = l->units;
    int gu = gates_of(l->rnn_cell) * u;
    bool split = l->rnn_cell == DT_NN_CELL_GRU && !l->rnn_reset_after;
    bool ra = l->rnn_reset_after;
    dir_bufs b = bufs(l, c, d);
    dt__nn_weight *w = dir_w(l, d);
    float *gr = w[1].grad, *gb = l->use_bias ? w[2].grad : NULL;
    const float *U = w[1].data;
    o->fill((size_t)n * (size_t)u, 0.0f, b.dh);
    if (b.c)
        o->fill((size_t)n * (size_t)u, 0.0f, b.dc);
    if (gr)
        o->fill((size_t)u * (size_t)gu, 0.0f, gr);
    if (ra && gb)
        o->fill((size_t)gu, 0.0f, gb + gu);
    /* U^T packed once for the whole sequence, where the backend packs */
    const float *put = NULL, *put_h = NULL;
    if (o->rnn_gemm && !split) {
        o->rnn_pack(true, gu, u, U, gu, b.put);
        put = b.put;
    } else if (o->rnn_gemm) { /* U_z,r^T (2 u, u) and U_h^T (u, u) */
        o->rnn_pack(true, 2 * u, u, U, gu, b.put);
        o->rnn_pack(true, u, u, U + 2 * u, gu, b.put + (size_t)2 * u * u);
        put = b.put;
        put_h = b.put + (size_t)2 * u * u;
    }
    for (int s = T - 1; s >= 0; s--) {
        dt_nn_rnn_step st = step_at(l, c, &b, d, s);
        st.dy = out_at(l, d, s, (float *)dout);
        st.r = ra ? b.r : NULL;
        int lda = st.lda;
        if (!split) {
            o->rnn_bwd(&st);
            const float *g = ra ? b.r : st.a; /* the gradient of h0 U (+ recurrent bias) */
            int ldg = ra ? gu : lda;
            if (gr) /* dU += h0^T g */
                rmul(o, true, u, gu, n, st.h0, u, NULL, g, false, ldg, 1.0f, gr, gu);
            if (ra && gb)
                o->bias_grad(b.r, (size_t)n, gu, gb + gu, true);
            rmul(o, false, n, u, gu, g, ldg, put, U, true, gu, 1.0f, b.dh, u);
        } else {
            st.phase = 1;
            o->rnn_bwd(&st);
            rmul(o, false, n, u, u, st.a + 2 * u, lda, put_h, U + 2 * u, true, gu, 0.0f, b.dq, u);
            st.phase = 0;
            o->rnn_bwd(&st);
            if (gr) {
                rmul(o, true, u, 2 * u, n, st.h0, u, NULL, st.a, false, lda, 1.0f, gr, gu);
                rmul(o, true, u, u, n, st.q, u, NULL, st.a + 2 * u, false, lda, 1.0f, gr + 2 * u,
                     gu);
            }
            rmul(o, false, n, u, 2 * u, st.a, lda, put, U, true, gu, 1.0f, b.dh, u);
        }
    }
    if (w[0].grad && !dropping(l, c)) { /* dW = x^T d(a) */
        rmul(o, true, D, gu, n * T, dt__nn_x(c, l, 0), D, NULL, b.a, false, gu, 0.0f, w[0].grad,
             gu);
    } else if (w[0].grad) {
        int gw = gu / drop_groups(l);
        for (int g = 0; g < drop_groups(l); g++)
            rmul(o, true, D, gw, n * T, masked_x(l, c, &b, g), D, NULL, b.a + g * gw, false, gu,
                 0.0f, w[0].grad + g * gw, gu);
    }
    if (gb)
        o->bias_grad(b.a, (size_t)n * (size_t)T, gu, gb, false);
}

/* ---- the layers ------------------------------------------------------------------------------ */

static void rnn_forward(dt__nn_layer *l, dt__nn_ctx *c)
{
    if (!l->rnn_bidi) {
        dir_forward(l, c, 0, l->y);
        return;
    }
    const dt_nn_ops *o = c->ops;
    dir_bufs f = bufs(l, c, 0), b = bufs(l, c, 1);
    dir_forward(l, c, 0, f.y);
    dir_forward(l, c, 1, b.y);
    int u = l->units;
    size_t rows = (size_t)c->n * (size_t)steps_out(l), all = rows * (size_t)u;
    switch (l->rnn_merge) {
    case MERGE_CONCAT:
        o->copy2d(rows, u, f.y, u, l->y, 2 * u, false);
        o->copy2d(rows, u, b.y, u, l->y + u, 2 * u, false);
        break;
    case MERGE_SUM:
        o->copy(all, f.y, l->y, false);
        o->axpby(all, 1.0f, b.y, 1.0f, l->y);
        break;
    case MERGE_AVE:
        o->copy(all, f.y, l->y, false);
        o->axpby(all, 0.5f, b.y, 0.5f, l->y);
        break;
    case MERGE_MUL:
        o->mul(all, f.y, b.y, l->y, false);
        break;
    }
}

static void rnn_backward(dt__nn_layer *l, dt__nn_ctx *c)
{
    const dt_nn_ops *o = c->ops;
    if (!l->rnn_bidi) {
        dir_backward(l, c, 0, l->dy);
    } else {
        dir_bufs f = bufs(l, c, 0), b = bufs(l, c, 1);
        int u = l->units;
        size_t rows = (size_t)c->n * (size_t)steps_out(l), all = rows * (size_t)u;
        switch (l->rnn_merge) {
        case MERGE_CONCAT:
            o->copy2d(rows, u, l->dy, 2 * u, f.dy, u, false);
            o->copy2d(rows, u, l->dy + u, 2 * u, b.dy, u, false);
            break;
        case MERGE_SUM:
        case MERGE_AVE:
            o->copy(all, l->dy, f.dy, false);
            if (l->rnn_merge == MERGE_AVE)
                o->axpby(all, 0.0f, l->dy, 0.5f, f.dy);
            o->copy(all, f.dy, b.dy, false);
            break;
        case MERGE_MUL:
            o->mul(all, l->dy, b.y, f.dy, false);
            o->mul(all, l->dy, f.y, b.dy, false);
            break;
        }
        dir_backward(l, c, 0, f.dy);
        dir_backward(l, c, 1, b.dy);
    }
    dt__nn_weights_done(c, l);
    if (!dt__nn_need_dx(c, l, 0))
        return;
    bool acc;
    float *dx = dt__nn_dx(c, l, 0, &acc);
    int n = c->n, T = steps(l), D = l->in_shape[0].d[1], gu = gates_of(l->rnn_cell) * l->units;
    for (int d = 0; d < n_dirs(l); d++) { /* dx (=/+=) d(pre-activations) kernel^T */
        dir_bufs b = bufs(l, c, d);
        const float *k = dir_w(l, d)[0].data;
        if (!dropping(l, c)) {
            if (o->rnn_gemm) /* W^T packed once for the whole batch */
                o->rnn_pack(true, gu, D, k, gu, b.pwt);
            rmul(o, false, n * T, D, gu, b.a, gu, o->rnn_gemm ? b.pwt : NULL, k, true, gu,
                 (acc || d > 0) ? 1.0f : 0.0f, dx, D);
            continue;
        }
        int gw = gu / drop_groups(l);
        size_t all = (size_t)n * (size_t)T * (size_t)D;
        for (int g = 0; g < drop_groups(l); g++) { /* each group's part, under its mask */
            if (o->rnn_gemm)                       /* the group's rows of W^T (gw, D) */
                o->rnn_pack(true, gw, D, k + g * gw, gu, b.pwt);
            rmul(o, false, n * T, D, gw, b.a + g * gw, gu, o->rnn_gemm ? b.pwt : NULL, k + g * gw,
                 true, gu, 0.0f, b.xd, D);
            o->mul(all, b.xd, b.mx + (size_t)g * all, dx, acc || d > 0 || g > 0);
        }
    }
}

const dt__nn_layer_vt dt__nn_simple_rnn = {
    .class_name = "SimpleRNN",
    .parse = simple_parse,
    .build = rnn_build,
    .forward = rnn_forward,
    .backward = rnn_backward,
    .keys = simple_keys,
};

const dt__nn_layer_vt dt__nn_lstm = {
    .class_name = "LSTM",
    .parse = lstm_parse,
    .build = rnn_build,
    .forward = rnn_forward,
    .backward = rnn_backward,
    .keys = lstm_keys,
};

const dt__nn_layer_vt dt__nn_gru = {
    .class_name = "GRU",
    .parse = gru_parse,
    .build = rnn_build,
    .forward = rnn_forward,
    .backward = rnn_backward,
    .keys = gru_keys,
};

const dt__nn_layer_vt dt__nn_bidirectional = {
    .class_name = "Bidirectional",
    .parse = bidi_parse,
    .build = rnn_build,
    .forward = rnn_forward,
    .backward = rnn_backward,
    .keys = bidi_keys,
};
