/* keras.c - Keras model.to_json() -> a list of layers in topological order.
 *
 * Formats accepted (all seen in the wild):
 *   Sequential, Keras 3:  {"class_name": "Sequential", "config": {"name", "layers": [{"class_name",
 *                          "config": {...}}, ...], "build_input_shape"}}; the first layer is an
 *                          InputLayer with "batch_shape".
 *   Sequential, Keras 2:  the same with "batch_input_shape" on the InputLayer or the first layer.
 *   Sequential, Keras 2.0 legacy: "config" is the plain list of layers.
 *   Functional (class "Functional" or "Model"): "layers" carry "inbound_nodes"; Keras 2 writes
 *     [[["producer", 0, 0, {}], ...]], Keras 3 [{"args": [<__keras_tensor__ with keras_history
 *     ["producer", 0, 0]> or a list of them], "kwargs": {}}]; "input_layers" / "output_layers"
 *     are [["name", 0, 0]] (Keras 3 may unwrap a single one to ["name", 0, 0]).
 * Every option of a layer's config is either understood or refused; see layer.c.
 */
#include "core/limits.h"
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys every layer config may carry, handled here. */
static const char *const common_keys[] = {
    "name", "trainable", "dtype", "batch_input_shape", "batch_shape", "input_dtype", NULL};

static bool in_list(const char *const *list, const char *key)
{
    for (; list && *list; list++)
        if (!strcmp(*list, key))
            return true;
    return false;
}

/* Integer inputs (token ids for an Embedding) arrive as exact floats: an InputLayer may declare
 * them. Every other tensor is float32. */
static bool int_dtype(const char *name)
{
    static const char *const ints[] = {"int8",  "int16",  "int32",  "int64",
                                       "uint8", "uint16", "uint32", "uint64"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(name, ints[i]))
            return true;
    return false;
}

static dt_status check_dtype(const dt__nn_layer *l, const cJSON *cfg, const char *key, dt_err *err)
{
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!d || cJSON_IsNull(d))
        return DT_OK;
    const char *name = NULL;
    if (cJSON_IsString(d)) {
        name = d->valuestring;
    } else if (cJSON_IsObject(d)) { /* Keras 3 DTypePolicy, Keras 2 Policy */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "config");
        const cJSON *n = c ? cJSON_GetObjectItemCaseSensitive(c, "name") : NULL;
        name = cJSON_IsString(n) ? n->valuestring : NULL;
    }
    if (name && l->vt == &dt__nn_input_layer && int_dtype(name))
        return DT_OK;
    if (!name || strcmp(name, "float32") != 0)
        return dt__nn_layer_err(
            l, DT_ENOTSUP, err, "option '%s': %s is not supported (only float32%s)", key,
            name ? name : "this dtype",
            l->vt == &dt__nn_input_layer ? ", or an integer type for token ids" : "");
    return DT_OK;
}

/* [null, 28, 28, 1] -> (28, 28, 1). */
static dt_status parse_batch_shape(const dt__nn_layer *l, const cJSON *v, dt_nn_shape *out,
                                   dt_err *err)
{
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n < 2 || n > DT_NN_MAX_RANK + 1)
        return dt__nn_layer_err(l, DT_EINVAL, err,
                                "input shape: expected [null, d1, ...] with 1 to %d axes after the "
                                "batch axis",
                                DT_NN_MAX_RANK);
    out->rank = n - 1;
    for (int i = 1; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(v, i);
        if (!dt__nn_int(d, 1, DT_MAX_NN_DIM, &out->d[i - 1]))
            return dt__nn_layer_err(l,
                                    cJSON_IsNumber(d) && d->valuedouble != floor(d->valuedouble)
                                        ? DT_EINVAL
                                        : DT_ENOTSUP,
                                    err,
                                    "input shape: axis %d must be a fixed integer size in 1..%d "
                                    "(variable sizes are not supported)",
                                    i, DT_MAX_NN_DIM);
    }
    return DT_OK;
}

/* Common keys, then the class's own parser; refuses any key nobody reads. */
static dt_status parse_layer(const cJSON *entry, const char *path, int index, dt__nn_layer *l,
                             dt_err *err)
{
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(entry, "class_name");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(entry, "config");
    if (!cJSON_IsObject(entry) || !cJSON_IsString(cn) || !cJSON_IsObject(cfg))
        return dt_err_set(err, DT_EINVAL,
                          "model: %s: expected {\"class_name\": ..., \"config\": {...}}", path);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cfg, "name");
    if (!cJSON_IsString(nm))
        nm = cJSON_GetObjectItemCaseSensitive(entry, "name");
    l->index = index;
    l->json_index = index;
    if (cJSON_IsString(nm) && nm->valuestring[0])
        snprintf(l->name, sizeof l->name, "%s", nm->valuestring);
    else
        snprintf(l->name, sizeof l->name, "layer_%d", index);
    if (strlen(cJSON_IsString(nm) ? nm->valuestring : "") >= sizeof l->name - 24 ||
        strchr(l->name, '/'))
        return dt_err_set(err, DT_EINVAL,
                          "model: %s: layer name too long or containing '/' (weights are named "
                          "\"<layer>/<var>\")",
                          path);
    l->vt = dt__nn_find_class(cn->valuestring);
    if (!l->vt)
        return dt_err_set(err, DT_ENOTSUP,
                          "model: %s (%s '%s'): unsupported layer class; supported: %s", path,
                          cn->valuestring, l->name, dt__nn_class_list());
    DT_TRY(dt__nn_cfg_bool(l, cfg, "trainable", true, &l->trainable, err));
    DT_TRY(check_dtype(l, cfg, "dtype", err));
    DT_TRY(check_dtype(l, cfg, "input_dtype", err));
    const cJSON *k;
    cJSON_ArrayForEach(k, cfg)
    {
        if (!in_list(common_keys, k->string) && !in_list(l->vt->keys, k->string))
            return dt__nn_layer_err(l, DT_ENOTSUP, err, "option '%s' is not supported", k->string);
    }
    /* A declared input shape (InputLayer, or the first layer of a Keras 2 Sequential). */
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(cfg, "batch_shape");
    if (!bs || cJSON_IsNull(bs))
        bs = cJSON_GetObjectItemCaseSensitive(cfg, "batch_input_shape");
    if (bs && !cJSON_IsNull(bs))
        DT_TRY(parse_batch_shape(l, bs, &l->decl, err));
    if (l->vt->parse)
        DT_TRY(l->vt->parse(l, cfg, err));
    return DT_OK;
}

static int find_layer(const dt__nn_graph *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->layers[i].name, name))
            return i;
    return -1;
}

/* ["name", node_index, tensor_index, ...] -> producer index. */
static dt_status history_ref(const dt__nn_graph *g, dt__nn_layer *l, const cJSON *h, int *out,
                             dt_err *err)
{
    const cJSON *nm = cJSON_GetArrayItem(h, 0), *ni = cJSON_GetArrayItem(h, 1),
                *ti = cJSON_GetArrayItem(h, 2);
    if (!cJSON_IsArray(h) || !cJSON_IsString(nm))
        return dt__nn_layer_err(l, DT_EINVAL, err, "inbound node: expected [\"layer\", 0, 0]");
    int zero;
    if ((ni && !(dt__nn_int(ni, 0, 0, &zero))) || (ti && !(dt__nn_int(ti, 0, 0, &zero))))
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "inbound node: %s[%d][%d]: shared layers and multi-output layers "
                                "are not supported",
                                nm->valuestring, ni ? ni->valueint : 0, ti ? ti->valueint : 0);
    *out = find_layer(g, nm->valuestring);
    if (*out < 0)
        return dt__nn_layer_err(l, DT_EINVAL, err, "inbound node: no layer named '%s'",
                                nm->valuestring);
    return DT_OK;
}

static dt_status add_input(dt__nn_layer *l, int producer, dt_err *err)
{
    if (l->n_in >= DT_NN_MAX_IN)
        return dt__nn_layer_err(l, DT_ENOTSUP, err, "more than %d inputs", DT_NN_MAX_IN);
    l->in[l->n_in++] = producer;
    return DT_OK;
}

/* Keras 3: walks args, collecting every __keras_tensor__'s producer in order. */
static dt_status walk_args(const dt__nn_graph *g, dt__nn_layer *l, const cJSON *a, int depth,
                           dt_err *err)
{
    if (depth > 4)
        return dt__nn_layer_err(l, DT_EINVAL, err, "inbound node: arguments nested too deeply");
    if (cJSON_IsArray(a)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, a) DT_TRY(walk_args(g, l, e, depth + 1, err));
        return DT_OK;
    }
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(a, "class_name");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "config");
    if (cJSON_IsString(cn) && !strcmp(cn->valuestring, "__keras_tensor__")) {
        int p;
        DT_TRY(history_ref(g, l, cJSON_GetObjectItemCaseSensitive(c, "keras_history"), &p, err));
        return add_input(l, p, err);
    }
    return dt__nn_layer_err(l, DT_ENOTSUP, err,
                            "inbound node: only tensors are supported as call arguments");
}

/* Call arguments by name. A MultiHeadAttention's query (when not positional), value and key
 * are tensors, Keras 3's __keras_tensor__ objects or Keras 2's ["producer", 0, 0], taken in that
 * order; use_causal_mask is a flag. Any other argument must be null. */
static dt_status call_kwargs(const dt__nn_graph *g, dt__nn_layer *l, const cJSON *kw, dt_err *err)
{
    static const char *const tensors[] = {"query", "value", "key"};
    bool mha = l->vt == &dt__nn_mha;
    for (int i = 0; mha && i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(kw, tensors[i]);
        if (!v || cJSON_IsNull(v))
            continue;
        if (l->n_in != i)
            return dt__nn_layer_err(l, DT_EINVAL, err,
                                    "inbound node: argument '%s' comes after %d input%s",
                                    tensors[i], l->n_in, l->n_in == 1 ? "" : "s");
        if (cJSON_IsObject(v)) {
            DT_TRY(walk_args(g, l, v, 0, err));
        } else {
            int p;
            DT_TRY(history_ref(g, l, v, &p, err));
            DT_TRY(add_input(l, p, err));
        }
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, kw)
    {
        if (cJSON_IsNull(k))
            continue;
        bool tensor = false;
        for (int i = 0; i < 3; i++)
            tensor = tensor || !strcmp(k->string, tensors[i]);
        if (mha && tensor)
            continue;
        if (mha && !strcmp(k->string, "use_causal_mask") && cJSON_IsBool(k)) {
            l->causal = cJSON_IsTrue(k);
            continue;
        }
        if (mha && !strcmp(k->string, "return_attention_scores") && cJSON_IsFalse(k))
            continue;
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "inbound node: call argument '%s' is not supported", k->string);
    }
    return DT_OK;
}

static dt_status parse_inbound(const dt__nn_graph *g, dt__nn_layer *l, const cJSON *nodes,
                               dt_err *err)
{
    int n = cJSON_IsArray(nodes) ? cJSON_GetArraySize(nodes) : 0;
    if (n == 0)
        return DT_OK;
    if (n > 1)
        return dt__nn_layer_err(l, DT_ENOTSUP, err,
                                "called %d times: shared layers are not supported", n);
    const cJSON *node = cJSON_GetArrayItem(nodes, 0);
    if (cJSON_IsObject(node)) { /* Keras 3 */
        DT_TRY(walk_args(g, l, cJSON_GetObjectItemCaseSensitive(node, "args"), 0, err));
        return call_kwargs(g, l, cJSON_GetObjectItemCaseSensitive(node, "kwargs"), err);
    }
    if (!cJSON_IsArray(node))
        return dt__nn_layer_err(l, DT_EINVAL, err, "inbound_nodes: expected a list or an object");
    const cJSON *ref;
    cJSON_ArrayForEach(ref, node)
    { /* Keras 2: ["producer", 0, 0, {kwargs}] */
        int p;
        DT_TRY(history_ref(g, l, ref, &p, err));
        DT_TRY(add_input(l, p, err));
        const cJSON *kw = cJSON_GetArrayItem(ref, 3);
        if (cJSON_IsObject(kw))
            DT_TRY(call_kwargs(g, l, kw, err));
    }
    return DT_OK;
}

/* [["name", 0, 0]] or ["name", 0, 0] -> exactly one layer index. */
static dt_status io_layer(const dt__nn_graph *g, const cJSON *v, const char *key, int *out,
                          dt_err *err)
{
    if (cJSON_IsArray(v) && cJSON_IsString(cJSON_GetArrayItem(v, 0))) {
        *out = find_layer(g, cJSON_GetArrayItem(v, 0)->valuestring);
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 &&
               cJSON_IsArray(cJSON_GetArrayItem(v, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(cJSON_GetArrayItem(v, 0), 0))) {
        *out = find_layer(g, cJSON_GetArrayItem(cJSON_GetArrayItem(v, 0), 0)->valuestring);
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 1) {
        return dt_err_set(err, DT_ENOTSUP,
                          "model: $.config.%s: %d entries; models with several inputs or outputs "
                          "are not supported",
                          key, cJSON_GetArraySize(v));
    } else {
        return dt_err_set(err, DT_EINVAL, "model: $.config.%s: expected [[\"layer\", 0, 0]]", key);
    }
    if (*out < 0)
        return dt_err_set(err, DT_EINVAL, "model: $.config.%s names no layer of the model", key);
    return DT_OK;
}

/* Reorders g->layers so producers come first, the InputLayer at 0, and remaps indices. */
static dt_status topo_sort(dt__nn_graph *g, int input, int *output, dt_err *err)
{
    int n = g->n;
    size_t un = n > 0 ? (size_t)n : 1;
    int *order = malloc(sizeof(int) * un), *pos = malloc(sizeof(int) * un);
    dt__nn_layer *sorted = calloc(un, sizeof *sorted);
    dt_status st = DT_OK;
    if (!order || !pos || !sorted) {
        st = dt_err_set(err, DT_ENOMEM, "model: out of memory sorting %d layers", n);
        goto out;
    }
    for (int i = 0; i < n; i++)
        pos[i] = -1;
    int k = 0;
    pos[input] = k;
    order[k++] = input;
    for (bool progress = true; progress && k < n;) {
        progress = false;
        for (int i = 0; i < n; i++) {
            if (pos[i] >= 0 || g->layers[i].vt == &dt__nn_input_layer)
                continue;
            bool ready = g->layers[i].n_in > 0;
            for (int j = 0; j < g->layers[i].n_in; j++)
                ready = ready && pos[g->layers[i].in[j]] >= 0;
            if (ready) {
                pos[i] = k;
                order[k++] = i;
                progress = true;
            }
        }
    }
    if (pos[*output] < 0) {
        st = dt_err_set(err, DT_EINVAL,
                        "model: the output layer '%s' is not reachable from the input '%s' "
                        "(a cycle, a missing inbound node or a second input)",
                        g->layers[*output].name, g->layers[input].name);
        goto out;
    }
    for (int i = 0; i < k; i++) {
        sorted[i] = g->layers[order[i]];
        sorted[i].index = i;
        for (int j = 0; j < sorted[i].n_in; j++)
            sorted[i].in[j] = pos[sorted[i].in[j]];
    }
    /* Layers that feed nothing on the way to the output are dropped, as Keras would. */
    for (int j = 0; j < n; j++)
        if (pos[j] < 0)
            free(g->layers[j].cfg_floats);
    free(g->layers);
    g->layers = sorted;
    sorted = NULL;
    g->n = k;
    *output = pos[*output];
out:
    free(order);
    free(pos);
    free(sorted);
    return st;
}

static dt_status parse_layers(dt__nn_graph *g, const cJSON *list, dt_err *err)
{
    int n = cJSON_GetArraySize(list);
    if (n < 1)
        return dt_err_set(err, DT_EINVAL, "model: $.config.layers is empty");
    if (n >= DT_MAX_NN_LAYERS)
        return dt_err_set(err, DT_ETOOBIG, "model: %d layers exceed the limit of %d", n,
                          DT_MAX_NN_LAYERS);
    /* One extra slot: Sequential models without an InputLayer get one. */
    g->layers = calloc((size_t)n + 1, sizeof *g->layers);
    if (!g->layers)
        return dt_err_set(err, DT_ENOMEM, "model: out of memory for %d layers", n);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, list)
    {
        char path[64];
        snprintf(path, sizeof path, "$.config.layers[%d]", i);
        g->n = i + 1; /* what a failed parse allocated is freed with the model */
        DT_TRY(parse_layer(e, path, i, &g->layers[i], err));
        for (int j = 0; j < i; j++)
            if (!strcmp(g->layers[j].name, g->layers[i].name))
                return dt_err_set(err, DT_EINVAL, "model: %s: duplicate layer name '%s'", path,
                                  g->layers[i].name);
        i++;
    }
    g->n = n;
    return DT_OK;
}

static dt_status parse_sequential(dt__nn_graph *g, const cJSON *cfg, const cJSON *list, dt_err *err)
{
    DT_TRY(parse_layers(g, list, err));
    g->sequential = true;
    dt__nn_layer *first = &g->layers[0];
    if (first->vt != &dt__nn_input_layer) {
        /* Keras 2 puts batch_input_shape on the first layer; Keras 3 keeps build_input_shape. */
        dt_nn_shape shape = first->decl;
        const cJSON *bis = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "build_input_shape") : NULL;
        if (shape.rank == 0 && bis && !cJSON_IsNull(bis))
            DT_TRY(parse_batch_shape(first, bis, &shape, err));
        if (shape.rank == 0)
            return dt_err_set(err, DT_EINVAL,
                              "model: Sequential '%s' declares no input shape (add an InputLayer "
                              "or batch_input_shape to the first layer)",
                              g->name);
        memmove(g->layers + 1, g->layers, sizeof *g->layers * (size_t)g->n);
        g->n++;
        dt__nn_layer *in = &g->layers[0];
        memset(in, 0, sizeof *in);
        in->json_index = -1;
        in->vt = &dt__nn_input_layer;
        in->trainable = true;
        in->decl = shape;
        snprintf(in->name, sizeof in->name, "input_layer");
        if (find_layer(g, "input_layer") != 0)
            snprintf(in->name, sizeof in->name, "input_layer_%d", g->n);
    }
    for (int i = 1; i < g->n; i++) {
        if (g->layers[i].vt == &dt__nn_input_layer)
            return dt_err_set(err, DT_EINVAL,
                              "model: $.config.layers[%d] (InputLayer '%s'): an InputLayer after "
                              "the first layer",
                              g->layers[i].json_index, g->layers[i].name);
        g->layers[i].n_in = 1;
        g->layers[i].in[0] = i - 1;
        g->layers[i].index = i;
    }
    g->output = g->n - 1;
    return DT_OK;
}

static dt_status parse_functional(dt__nn_graph *g, const cJSON *cfg, dt_err *err)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(cfg, "layers");
    if (!cJSON_IsArray(list))
        return dt_err_set(err, DT_EINVAL, "model: $.config.layers: expected a list");
    DT_TRY(parse_layers(g, list, err));
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        DT_TRY(parse_inbound(g, &g->layers[i], cJSON_GetObjectItemCaseSensitive(e, "inbound_nodes"),
                             err));
        if (g->layers[i].vt != &dt__nn_input_layer && g->layers[i].n_in == 0)
            return dt__nn_layer_err(&g->layers[i], DT_EINVAL, err,
                                    "has no inbound node (is it connected?)");
        i++;
    }
    int input, output;
    DT_TRY(io_layer(g, cJSON_GetObjectItemCaseSensitive(cfg, "input_layers"), "input_layers",
                    &input, err));
    DT_TRY(io_layer(g, cJSON_GetObjectItemCaseSensitive(cfg, "output_layers"), "output_layers",
                    &output, err));
    if (g->layers[input].vt != &dt__nn_input_layer)
        return dt_err_set(err, DT_EINVAL, "model: input layer '%s' is not an InputLayer",
                          g->layers[input].name);
    for (int j = 0; j < g->n; j++)
        if (j != input && g->layers[j].vt == &dt__nn_input_layer)
            return dt_err_set(err, DT_ENOTSUP,
                              "model: second InputLayer '%s': models with several inputs are not "
                              "supported",
                              g->layers[j].name);
    DT_TRY(topo_sort(g, input, &output, err));
    g->output = output;
    return DT_OK;
}

dt_status dt__nn_keras_parse(const cJSON *root, dt__nn_graph *g, dt_err *err)
{
    memset(g, 0, sizeof *g);
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(root, "class_name");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (!cJSON_IsObject(root) || !cJSON_IsString(cn))
        return dt_err_set(err, DT_EINVAL,
                          "model: $: expected a Keras model.to_json() object with \"class_name\" "
                          "and \"config\"");
    const cJSON *nm = cJSON_IsObject(cfg) ? cJSON_GetObjectItemCaseSensitive(cfg, "name") : NULL;
    snprintf(g->name, sizeof g->name, "%s",
             cJSON_IsString(nm)
                 ? nm->valuestring
                 : (!strcmp(cn->valuestring, "Sequential") ? "sequential" : "functional"));
    if (!strcmp(cn->valuestring, "Sequential")) {
        if (cJSON_IsArray(cfg)) /* Keras 2.0: the config is the list of layers */
            return parse_sequential(g, NULL, cfg, err);
        const cJSON *list =
            cJSON_IsObject(cfg) ? cJSON_GetObjectItemCaseSensitive(cfg, "layers") : NULL;
        if (!cJSON_IsArray(list))
            return dt_err_set(err, DT_EINVAL, "model: $.config.layers: expected a list");
        return parse_sequential(g, cfg, list, err);
    }
    if (!strcmp(cn->valuestring, "Functional") || !strcmp(cn->valuestring, "Model")) {
        if (!cJSON_IsObject(cfg))
            return dt_err_set(err, DT_EINVAL, "model: $.config: expected an object");
        return parse_functional(g, cfg, err);
    }
    return dt_err_set(err, DT_ENOTSUP,
                      "model: $.class_name: %s is not supported (Sequential, Functional, Model)",
                      cn->valuestring);
}
