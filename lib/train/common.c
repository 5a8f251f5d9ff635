/* common.c - what fit, evaluate and predict share: building the spec's model, loss and
 * optimizer, opening its data under the data root, and the submit-time validation. */
#include "train/train_internal.h"

#include "core/log.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

dt_train_comm dt_train_comm_local(void)
{
    dt_train_comm c = {0};
    c.world = 1;
    return c;
}

dt_train_opts dt_train_opts_default(void)
{
    dt_train_opts o = {0};
    o.world = 1;
    o.prefetch = 2;
    o.data_timeout_ms = 600000;
    return o;
}

/* The model module names places from the model JSON's root, "model: $.config.layers[3] ...":
 * in a job that root is $.model, or the model file it names. */
static void model_err_path(const dt_jobspec *spec, dt_err *err)
{
    char *m = err->msg;
    if (strncmp(m, "model: ", 7) == 0)
        memmove(m, m + 7, strlen(m + 7) + 1);
    if (spec->model_path) {
        dt_err_prefix(err, "$.model (%s)", spec->model_path);
    } else if (m[0] == '$' && (m[1] == '.' || m[1] == ':')) {
        size_t len = strlen(m), add = strlen(".model");
        if (len + add >= sizeof err->msg)
            len = sizeof err->msg - add - 1;
        memmove(m + 1 + add, m + 1, len - 1);
        memcpy(m + 1, ".model", add);
        m[len + add] = '\0';
    } else {
        dt_err_prefix(err, "$.model");
    }
}

/* dt_loss_from_json names keys relative to the loss (".config.axis: ..."): put $.compile.loss in
 * front of them, as a prefix of whole-loss messages. */
static void loss_err_path(dt_err *err)
{
    const char *base = "$.compile.loss";
    char *m = err->msg;
    if (m[0] != '.' && m[0] != ':') {
        dt_err_prefix(err, "%s", base);
        return;
    }
    size_t len = strlen(m), add = strlen(base);
    if (len + add >= sizeof err->msg)
        len = sizeof err->msg - add - 1;
    memmove(m + add, m, len);
    memcpy(m, base, add);
    m[len + add] = '\0';
}

dt_status dt__train_build(const dt_jobspec *spec, const dt_nn_ops *ops, uint64_t seed, dt_model **m,
                          dt_loss *loss, dt_optim_cfg *cfg, dt_err *err)
{
    *m = NULL;
    if (!spec->model_json)
        return dt_err_set(err, DT_EINVAL, "$.model: missing");
    dt_model_opts mo = {.seed = seed, .ops = ops, .max_bytes = dt_train_memory_limit()};
    dt_status st = dt_model_from_json(spec->model_json, spec->model_json_len, &mo, m, err);
    if (st != DT_OK) {
        model_err_path(spec, err);
        return st;
    }
    st = spec->loss_json ? dt_loss_from_json(spec->loss_json, loss, err)
                         : dt_loss_from_name(spec->loss, spec->from_logits, loss, err);
    if (st != DT_OK) {
        loss_err_path(err);
        goto fail;
    }
    if ((st = dt__train_metrics_check(spec, *m, err)) != DT_OK)
        goto fail;
    if (cfg && (st = dt_optim_cfg_from_json(spec->optimizer, cfg, err)) != DT_OK) {
        dt_err_prefix(err, "$.compile.optimizer");
        goto fail;
    }
    return DT_OK;
fail:
    dt_model_free(*m);
    *m = NULL;
    return st;
}

static dt_status check_source_paths(const dt_jobspec *spec, const dt_data_source *s,
                                    const char *json_path, dt_err *err)
{
    const char *root = spec->roots.data_root;
    char p[512];
    if (s->images) {
        snprintf(p, sizeof p, "%s.images", json_path);
        DT_TRY(dt_jobspec_check_read(root, s->images, p, err));
    }
    if (s->labels) {
        snprintf(p, sizeof p, "%s.labels", json_path);
        DT_TRY(dt_jobspec_check_read(root, s->labels, p, err));
    }
    for (size_t i = 0; i < s->nfiles; i++) {
        snprintf(p, sizeof p, "%s.files[%zu]", json_path, i);
        DT_TRY(dt_jobspec_check_read(root, s->files[i], p, err));
    }
    return DT_OK;
}

dt_status dt__train_source(const dt_jobspec *spec, const cJSON *obj, const char *json_path,
                           dt_data_source *out, dt_err *err)
{
    DT_TRY(dt_data_source_parse(obj, json_path, spec->roots.data_root, out, err));
    dt_status st = check_source_paths(spec, out, json_path, err);
    if (st != DT_OK)
        dt_data_source_destroy(out);
    return st;
}

dt_status dt__train_data_spec(const dt_jobspec *spec, dt_data_spec *out, dt_err *err)
{
    if (!spec->data)
        return dt_err_set(err, DT_EINVAL, "$.data: missing");
    DT_TRY(dt_data_spec_parse(spec->data, "$.data", spec->roots.data_root, out, err));
    dt_status st = check_source_paths(spec, &out->train, "$.data.train", err);
    if (st == DT_OK && out->has_validation)
        st = check_source_paths(spec, &out->validation, "$.data.validation", err);
    if (st != DT_OK)
        dt_data_spec_destroy(out);
    return st;
}

dt_status dt__train_check_data(const dt_model *m, const dt_loss *loss, const dt_dataset *ds,
                               const char *json_path, bool need_labels, dt_err *err)
{
    size_t in = dt_model_input_size(m), out = dt_model_output_size(m);
    if (ds->x_size != in)
        return dt_err_set(err, DT_EINVAL,
                          "%s: examples have %zu values but the model's input takes %zu; reshape "
                          "the data (\"shape\") or fix the model's input",
                          json_path, ds->x_size, in);
    /* Shapes must agree up to axes of size 1 ([28, 28] feeds an input of (28, 28, 1)). */
    int64_t ms[DT_NN_MAX_RANK], a[DT_MAX_IDX_DIMS + DT_NN_MAX_RANK], b[DT_MAX_IDX_DIMS];
    int mr = dt_model_input_shape(m, ms), na = 0, nb = 0;
    for (int i = 0; i < mr; i++)
        if (ms[i] != 1)
            a[na++] = ms[i];
    for (int i = 0; i < ds->x_rank; i++)
        if (ds->x_shape[i] != 1)
            b[nb++] = ds->x_shape[i];
    bool same = na == nb;
    for (int i = 0; same && i < na; i++)
        same = a[i] == b[i];
    if (!same && ds->x_rank > 0) {
        char da[96] = "", db[96] = "";
        for (int i = 0; i < mr; i++)
            snprintf(da + strlen(da), sizeof da - strlen(da), "%s%lld", i ? ", " : "",
                     (long long)ms[i]);
        for (int i = 0; i < ds->x_rank; i++)
            snprintf(db + strlen(db), sizeof db - strlen(db), "%s%lld", i ? ", " : "",
                     (long long)ds->x_shape[i]);
        return dt_err_set(err, DT_EINVAL,
                          "%s: examples have shape (%s) but the model's input is (%s); reshape "
                          "the data (\"image_shape\") or fix the model's input",
                          json_path, db, da);
    }
    if (ds->n == 0)
        return dt_err_set(err, DT_EINVAL, "%s: the data set is empty", json_path);
    if (!need_labels)
        return DT_OK;
    if (loss->kind == DT_NN_LOSS_SPARSE_CE) {
        if (ds->y_kind != DT_LABEL_INT32)
            return dt_err_set(err, DT_EINVAL,
                              "%s: sparse_categorical_crossentropy needs integer class labels; "
                              "give the split labels",
                              json_path);
        int classes = ds->num_classes;
        if (loss->has_ignore_class) { /* the ignored label may lie outside the classes (255) */
            classes = 0;
            for (size_t i = 0; i < ds->n; i++)
                if (ds->y_i32[i] != loss->ignore_class && ds->y_i32[i] + 1 > classes)
                    classes = ds->y_i32[i] + 1;
        }
        if ((size_t)classes > out)
            return dt_err_set(err, DT_EINVAL,
                              "%s: labels go up to %d but the model has %zu outputs (classes)",
                              json_path, classes - 1, out);
    } else {
        if (ds->y_kind == DT_LABEL_NONE)
            return dt_err_set(err, DT_EINVAL, "%s: the loss needs labels; give the split labels",
                              json_path);
        if (ds->y_kind == DT_LABEL_FLOAT && ds->y_size != out)
            return dt_err_set(err, DT_EINVAL,
                              "%s: targets have %zu values per example but the model has %zu "
                              "outputs",
                              json_path, ds->y_size, out);
        /* Keras casts integer labels to the prediction's dtype: with one output unit they are
         * the targets (0/1 classes for binary_crossentropy, counts for poisson, ...). */
        if (ds->y_kind == DT_LABEL_INT32 && out != 1)
            return dt_err_set(err, DT_ENOTSUP,
                              "%s: integer labels and %zu outputs: use "
                              "sparse_categorical_crossentropy, or give %s one-hot labels (one "
                              "label column per class)",
                              json_path, out, dt_loss_name(loss->kind));
    }
    return DT_OK;
}

dt_status dt__train_mkdirs(const char *dir, dt_err *err)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return dt_err_set(err, DT_EINVAL, "%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return dt_err_set(err, DT_EIO, "mkdir %s: %s", p, strerror(errno));
            *s = c;
            if (!c)
                break;
        }
    }
    return DT_OK;
}

dt_status dt_train_validate(const dt_jobspec *spec, dt_train_info *info, dt_err *err)
{
    dt_model *m = NULL;
    dt_loss loss;
    dt_optim_cfg cfg;
    dt_optim *opt = NULL;
    dt_data_spec ds = {0};
    dt_dataset *tr = NULL, *va = NULL;
    dt_status st;
    /* NCCL needs the CUDA build and GPUs; neither exists yet, so refuse rather than fall back
     * to the ring behind the user's back. */
    if (spec->communication == DT_JOBSPEC_COMM_NCCL)
        return dt_err_set(err, DT_ENOTSUP,
                          "$.strategy.communication: \"NCCL\" needs a CUDA build with GPUs, "
                          "which this dtrain is not; use \"AUTO\" or \"RING\"");
    uint64_t held = 0;
    DT_TRY(dt__train_build(spec, NULL, 0, &m, &loss, &cfg, err));
    /* A Normalization the job cannot adapt is refused now, not when the job starts. */
    dt_model_adapt *adapt = NULL;
    DT_TRY_GOTO(dt_model_adapt_begin(m, &adapt, err), st, fail);
    dt_model_adapt_end(m, adapt);
    DT_TRY_GOTO(dt__train_data_spec(spec, &ds, err), st, fail);
    DT_TRY_GOTO(
        dt__train_callbacks_check(spec, ds.has_validation || spec->validation_split > 0, &cfg, err),
        st, fail);
    /* Estimate before loading anything big: the batch is the global one, since the world the
     * job will run on is not known here (an over-estimate on several replicas). */
    dt_train_mem mem = {.batch = spec->batch_size};
    size_t np, ns;
    dt_model_param_counts(m, NULL, &np, &ns);
    mem.weights = (uint64_t)(np + ns) * sizeof(float);
    mem.gradients = (uint64_t)np * sizeof(float);
    mem.slots = (uint64_t)dt_optim_cfg_slots(&cfg) * np * sizeof(float);
    mem.activations = dt_model_batch_bytes(m, spec->batch_size);
    mem.data = dt__train_source_bytes(&ds.train) +
               (ds.has_validation ? dt__train_source_bytes(&ds.validation) : 0);
    mem.total = mem.weights + mem.gradients + mem.slots + mem.activations + mem.data;
    DT_TRY_GOTO(dt__train_mem_check(&mem, err), st, fail);
    DT_TRY_GOTO(dt__train_mem_reserve(mem.total, err), st, fail);
    held = mem.total;
    DT_TRY_GOTO(dt_optim_new(&cfg, m, &opt, err), st, fail);
    if (spec->initial_weights &&
        (st = dt_train_load_weights(m, NULL, spec->initial_weights, err)) != DT_OK) {
        dt_err_prefix(err, "$.initial_weights");
        goto fail;
    }
    /* Image folders and TFRecord images are indexed, not decoded: shapes and labels are what
     * is checked here, and each worker decodes its own files when the job prepares (naming a
     * bad one then). */
    dt_data_load_opts lo = {.index_only = true};
    if ((st = dt_dataset_load_shard(&ds.train, &lo, &tr, err)) != DT_OK) {
        dt_err_prefix(err, "$.data.train");
        goto fail;
    }
    DT_TRY_GOTO(dt__train_check_data(m, &loss, tr, "$.data.train", true, err), st, fail);
    if (spec->validation_split > 0) {
        if ((st = dt_dataset_split(tr, spec->validation_split, &va, err)) != DT_OK) {
            dt_err_prefix(err, "$.fit");
            goto fail;
        }
    } else if (ds.has_validation) {
        if ((st = dt_dataset_load_shard(&ds.validation, &lo, &va, err)) != DT_OK) {
            dt_err_prefix(err, "$.data.validation");
            goto fail;
        }
        DT_TRY_GOTO(dt__train_check_data(m, &loss, va, "$.data.validation", true, err), st, fail);
    }
    if (info) {
        memset(info, 0, sizeof *info);
        size_t nt;
        dt_model_param_counts(m, &info->params_total, &info->params_trainable, &nt);
        info->train_examples = info->local_examples = tr->n;
        info->val_examples = va ? va->n : 0;
        int64_t steps = (int64_t)((tr->n + (size_t)spec->batch_size - 1) / spec->batch_size);
        if (spec->steps_per_epoch && spec->steps_per_epoch < steps)
            steps = spec->steps_per_epoch;
        info->steps_per_epoch = steps;
        info->local_batch = spec->batch_size;
    }
    st = DT_OK;
fail:
    dt_dataset_free(va);
    dt_dataset_free(tr);
    dt_data_spec_destroy(&ds);
    dt_optim_free(opt);
    dt_model_free(m);
    dt__train_mem_release(held);
    return st;
}

dt_status dt_train_check_world(const dt_jobspec *spec, int world, dt_err *err)
{
    if (world < 1)
        return dt_err_set(err, DT_EINVAL, "train: world size %d", world);
    if (spec->batch_size % world)
        return dt_err_set(err, DT_EINVAL,
                          "$.fit.batch_size: %d is the global batch and must be divisible by the "
                          "%d replicas; use a multiple of %d",
                          spec->batch_size, world, world);
    dt_data_spec ds;
    DT_TRY(dt__train_data_spec(spec, &ds, err));
    size_t nfiles = ds.train.format == DT_DATA_FORMAT_IDX ? 1 : ds.train.nfiles;
    dt_shard_plan plan;
    dt_status st = dt_shard_resolve(ds.shard_policy, nfiles, world, 0, &plan, err);
    if (st != DT_OK)
        dt_err_prefix(err, "$.data.shard_policy");
    dt_data_spec_destroy(&ds);
    return st;
}
