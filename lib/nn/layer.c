/* layer.c - what all layer classes share: the class table, config readers that name the layer,
 * its class and the option in every error, weight declaration and gradient routing. */
#include "nn/layer.h"

#include "core/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const dt__nn_layer_vt *const classes[] = {
    &dt__nn_input_layer,
    &dt__nn_dense,
    &dt__nn_flatten,
    &dt__nn_reshape,
    &dt__nn_dropout,
    &dt__nn_activation,
    &dt__nn_relu,
    &dt__nn_leaky_relu,
    &dt__nn_softmax,
    &dt__nn_rescaling,
    &dt__nn_conv2d,
    &dt__nn_maxpool2d,
    &dt__nn_avgpool2d,
    &dt__nn_gap2d,
    &dt__nn_gmp2d,
    &dt__nn_zeropadding2d,
    &dt__nn_upsampling2d,
    &dt__nn_batchnorm,
    &dt__nn_add,
    &dt__nn_concatenate,
    &dt__nn_resizing,
    &dt__nn_center_crop,
    &dt__nn_random_flip,
    &dt__nn_random_brightness,
    &dt__nn_random_contrast,
    &dt__nn_random_crop,
    &dt__nn_random_translation,
    &dt__nn_random_zoom,
    &dt__nn_random_rotation,
    &dt__nn_multiply,
    &dt__nn_subtract,
    &dt__nn_average,
    &dt__nn_maximum,
    &dt__nn_cropping2d,
    &dt__nn_depthwise_conv2d,
    &dt__nn_separable_conv2d,
    &dt__nn_conv2d_transpose,
    &dt__nn_spatial_dropout2d,
    &dt__nn_embedding,
    &dt__nn_conv1d,
    &dt__nn_maxpool1d,
    &dt__nn_avgpool1d,
    &dt__nn_gap1d,
    &dt__nn_gmp1d,
    &dt__nn_layernorm,
    &dt__nn_time_distributed,
    &dt__nn_spatial_dropout1d,
    &dt__nn_mha,
    &dt__nn_normalization,
    &dt__nn_category_encoding,
    &dt__nn_simple_rnn,
    &dt__nn_lstm,
    &dt__nn_gru,
    &dt__nn_bidirectional,
};

const dt__nn_layer_vt *dt__nn_find_class(const char *class_name)
{
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (strcmp(classes[i]->class_name, class_name) == 0)
            return classes[i];
    /* Keras 2 spellings of the same classes. */
    if (strcmp(class_name, "MaxPool2D") == 0)
        return &dt__nn_maxpool2d;
    if (strcmp(class_name, "AvgPool2D") == 0)
        return &dt__nn_avgpool2d;
    if (strcmp(class_name, "Convolution2D") == 0)
        return &dt__nn_conv2d;
    if (strcmp(class_name, "Convolution1D") == 0 || strcmp(class_name, "Conv1d") == 0)
        return &dt__nn_conv1d;
    if (strcmp(class_name, "MaxPool1D") == 0)
        return &dt__nn_maxpool1d;
    if (strcmp(class_name, "AvgPool1D") == 0)
        return &dt__nn_avgpool1d;
    if (strcmp(class_name, "GlobalAvgPool1D") == 0)
        return &dt__nn_gap1d;
    if (strcmp(class_name, "GlobalMaxPool1D") == 0)
        return &dt__nn_gmp1d;
    return NULL;
}

const char *dt__nn_class_list(void)
{
    static char buf[2048];
    if (!buf[0]) {
        size_t off = 0;
        for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i ? ", " : "",
                                    classes[i]->class_name);
    }
    return buf;
}

dt_status dt__nn_layer_err(const dt__nn_layer *l, dt_status code, dt_err *err, const char *fmt, ...)
{
    char msg[DT_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (l->json_index >= 0)
        return dt_err_set(err, code, "model: $.config.layers[%d] (%s '%s'): %s", l->json_index,
                          l->vt->class_name, l->name, msg);
    return dt_err_set(err, code, "model: layer '%s' (%s): %s", l->name, l->vt->class_name, msg);
}

bool dt__nn_need_dx(dt__nn_ctx *c, dt__nn_layer *l, int i)
{
    dt__nn_layer *p = &c->layers[l->in[i]];
    while (p->alias)
        p = &c->layers[p->in[0]];
    return p->dy != NULL;
}

float *dt__nn_dx(dt__nn_ctx *c, dt__nn_layer *l, int i, bool *acc)
{
    dt__nn_layer *p = &c->layers[l->in[i]];
    while (p->alias)
        p = &c->layers[p->in[0]];
    *acc = p->dy_written;
    p->dy_written = true;
    return p->dy;
}

dt__nn_weight *dt__nn_add_weight(dt__nn_layer *l, const char *var, dt_nn_shape shape,
                                 bool trainable, dt__nn_init init)
{
    DT_ASSERT(l->n_w, <, DT_NN_MAX_W);
    dt__nn_weight *w = &l->w[l->n_w++];
    memset(w, 0, sizeof *w);
    snprintf(w->var, sizeof w->var, "%s", var);
    w->shape = shape;
    w->trainable = trainable && l->trainable;
    w->init = init;
    return w;
}

/* ---- config readers ------------------------------------------------------------------------ */

static const cJSON *get(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

bool dt__nn_int(const cJSON *v, int lo, int hi, int *out)
{
    long long x;
    if (!dt_json_int(v, lo, hi, &x))
        return false;
    *out = (int)x;
    return true;
}

dt_status dt__nn_cfg_int(const dt__nn_layer *l, const cJSON *cfg, const char *key, int def,
                         int *out, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    if (!v) {
        *out = def;
        return DT_OK;
    }
    if (!dt__nn_int(v, -1000000000, 1000000000, out))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected an integer", key);
    return DT_OK;
}

dt_status dt__nn_cfg_float(const dt__nn_layer *l, const cJSON *cfg, const char *key, float def,
                           float *out, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    if (!v) {
        *out = def;
        return DT_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected a number", key);
    *out = (float)v->valuedouble;
    return DT_OK;
}

dt_status dt__nn_cfg_bool(const dt__nn_layer *l, const cJSON *cfg, const char *key, bool def,
                          bool *out, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    if (!v) {
        *out = def;
        return DT_OK;
    }
    if (!cJSON_IsBool(v))
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected true or false", key);
    *out = cJSON_IsTrue(v);
    return DT_OK;
}

dt_status dt__nn_cfg_pair(const dt__nn_layer *l, const cJSON *cfg, const char *key, int def,
                          int out[2], dt_err *err)
{
    const cJSON *v = get(cfg, key);
    out[0] = out[1] = def;
    if (!v)
        return DT_OK;
    /* Keras refuses 2.9 and 1e22 too; a cast would truncate the one and overflow on the other. */
    bool ok;
    if (cJSON_IsArray(v))
        ok = cJSON_GetArraySize(v) == 2 &&
             dt__nn_int(cJSON_GetArrayItem(v, 0), 1, 65536, &out[0]) &&
             dt__nn_int(cJSON_GetArrayItem(v, 1), 1, 65536, &out[1]);
    else
        ok = dt__nn_int(v, 1, 65536, &out[0]) && dt__nn_int(v, 1, 65536, &out[1]);
    if (!ok)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "option '%s': expected an integer in 1..65536 or a list of two",
                                key);
    return DT_OK;
}

dt_status dt__nn_cfg_padding(const dt__nn_layer *l, const cJSON *cfg, bool *same, dt_err *err)
{
    const cJSON *v = get(cfg, "padding");
    *same = false;
    if (!v)
        return DT_OK;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "valid") == 0)
        return DT_OK;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "same") == 0) {
        *same = true;
        return DT_OK;
    }
    return dt__nn_layer_err(l, DT_ENOTSUP, err,
                            "option 'padding': %s is not supported (use \"valid\" or \"same\")",
                            cJSON_IsString(v) ? v->valuestring : "a non-string");
}

dt_status dt__nn_cfg_activation(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                                dt_nn_act_p *out, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    memset(out, 0, sizeof *out);
    out->kind = DT_NN_ACT_LINEAR;
    if (!v)
        return DT_OK;
    const char *name = NULL;
    if (cJSON_IsString(v))
        name = v->valuestring;
    else if (cJSON_IsObject(v)) { /* Keras 3 may serialise {"class_name": "function", ...} */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "config");
        if (cJSON_IsString(c))
            name = c->valuestring;
    }
    if (!name)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected an activation name", key);
    if (dt__nn_act_parse(name, out) != DT_OK)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option '%s': activation \"%s\" is not supported (linear, relu, "
                                "sigmoid, tanh, softmax, elu, selu, gelu, swish/silu)",
                                key, name);
    return DT_OK;
}

dt_status dt__nn_cfg_init(const dt__nn_layer *l, const cJSON *cfg, const char *key, dt__nn_init def,
                          dt__nn_init *out, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    *out = def;
    if (!v)
        return DT_OK;
    char why[256];
    if (dt__nn_init_parse(v, out, why, sizeof why) != DT_OK)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option '%s': %s", key, why);
    return DT_OK;
}

dt_status dt__nn_cfg_regularizer(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                                 float *l1, float *l2, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    *l1 = *l2 = 0;
    if (!v)
        return DT_OK;
    const char *cls = NULL;
    const cJSON *c = NULL;
    if (cJSON_IsString(v)) {
        cls = v->valuestring;
    } else if (cJSON_IsObject(v)) {
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(v, "class_name");
        cls = cJSON_IsString(cn) ? cn->valuestring : NULL;
        c = cJSON_GetObjectItemCaseSensitive(v, "config");
    }
    if (!cls)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': expected a regularizer", key);
    /* Keras's defaults: "l1"/"l2" strings mean 0.01; L1L2() means 0 and 0. */
    const cJSON *a = c ? cJSON_GetObjectItemCaseSensitive(c, "l1") : NULL;
    const cJSON *b = c ? cJSON_GetObjectItemCaseSensitive(c, "l2") : NULL;
    if (!strcmp(cls, "L1") || !strcmp(cls, "l1")) {
        *l1 = cJSON_IsNumber(a) ? (float)a->valuedouble : 0.01f;
    } else if (!strcmp(cls, "L2") || !strcmp(cls, "l2")) {
        *l2 = cJSON_IsNumber(b) ? (float)b->valuedouble : 0.01f;
    } else if (!strcmp(cls, "L1L2") || !strcmp(cls, "l1_l2")) {
        *l1 = cJSON_IsNumber(a) ? (float)a->valuedouble : (c ? 0.0f : 0.01f);
        *l2 = cJSON_IsNumber(b) ? (float)b->valuedouble : (c ? 0.0f : 0.01f);
    } else {
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "option '%s': regularizer %s is not supported (L1, L2, L1L2)", key,
                                cls);
    }
    if (*l1 < 0 || *l2 < 0)
        return dt__nn_layer_err(l, DT_EINVAL, err, "option '%s': negative factor", key);
    return DT_OK;
}

dt_status dt__nn_cfg_null(const dt__nn_layer *l, const cJSON *cfg, const char *key, dt_err *err)
{
    if (get(cfg, key))
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "option '%s' is not supported (must be null)",
                                key);
    return DT_OK;
}

dt_status dt__nn_cfg_string_is(const dt__nn_layer *l, const cJSON *cfg, const char *key,
                               const char *want, dt_err *err)
{
    const cJSON *v = get(cfg, key);
    if (!v)
        return DT_OK;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, want) != 0)
        return dt__nn_layer_err(
            l, DT_ENOTSUP, err, "option '%s': %s%s%s is not supported (only \"%s\")", key,
            cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "this value",
            cJSON_IsString(v) ? "\"" : "", want);
    return DT_OK;
}

dt_status dt__nn_cfg_kernel_bias(dt__nn_layer *l, const cJSON *cfg, dt_err *err)
{
    DT_TRY(
        dt__nn_cfg_init(l, cfg, "kernel_initializer", DT_NN_INIT_GLOROT_UNIFORM_, &l->kinit, err));
    DT_TRY(dt__nn_cfg_init(l, cfg, "bias_initializer", (dt__nn_init){.kind = DT_NN_INIT_ZEROS},
                           &l->binit, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "kernel_regularizer", &l->kl1, &l->kl2, err));
    DT_TRY(dt__nn_cfg_regularizer(l, cfg, "bias_regularizer", &l->bl1, &l->bl2, err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "activity_regularizer", err));
    DT_TRY(dt__nn_cfg_null(l, cfg, "kernel_constraint", err));
    return dt__nn_cfg_null(l, cfg, "bias_constraint", err);
}
