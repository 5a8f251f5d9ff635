/* callbacks.c - one entry of $.fit.callbacks as a Keras user names it: the class name alone
 * ("TerminateOnNaN") or {"class_name", "config"} (plus Keras 3's "module" and
 * "registered_name"), with the keyword arguments of the class's constructor as config. Keys
 * the class does not take are refused naming their path, so a misspelt "patiance" cannot
 * silently train with the default. */
#include "config/jobspec.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *dt_jobspec_callback_name(dt_callback_kind k)
{
    switch (k) {
    case DT_CALLBACK_EARLY_STOPPING:
        return "EarlyStopping";
    case DT_CALLBACK_REDUCE_LR_ON_PLATEAU:
        return "ReduceLROnPlateau";
    case DT_CALLBACK_MODEL_CHECKPOINT:
        return "ModelCheckpoint";
    case DT_CALLBACK_CSV_LOGGER:
        return "CSVLogger";
    case DT_CALLBACK_LR_SCHEDULER:
        return "LearningRateScheduler";
    default:
        return "TerminateOnNaN";
    }
}

static dt_status get_number(const cJSON *k, const char *path, double lo, double hi, double *out,
                            dt_err *err)
{
    if (!cJSON_IsNumber(k) || !isfinite(k->valuedouble) || k->valuedouble < lo ||
        k->valuedouble > hi)
        return dt_err_set(err, DT_EINVAL, "%s.config.%s: give a number in [%g, %g]", path,
                          k->string, lo, hi);
    *out = k->valuedouble;
    return DT_OK;
}

static dt_status get_count(const cJSON *k, const char *path, int *out, dt_err *err)
{
    double v;
    DT_TRY(get_number(k, path, 0, 1000000, &v, err));
    if (v != floor(v))
        return dt_err_set(err, DT_EINVAL, "%s.config.%s: give a whole number of epochs, got %g",
                          path, k->string, v);
    *out = (int)v;
    return DT_OK;
}

static dt_status get_bool(const cJSON *k, const char *path, bool *out, dt_err *err)
{
    if (!cJSON_IsBool(k))
        return dt_err_set(err, DT_EINVAL, "%s.config.%s: give true or false", path, k->string);
    *out = cJSON_IsTrue(k);
    return DT_OK;
}

/* The keys both monitoring classes take. *done is set when k was one of them. */
static dt_status parse_common(const cJSON *k, const char *path, dt_jobspec_callback *c, bool *done,
                              dt_err *err)
{
    *done = true;
    const char *key = k->string;
    if (!strcmp(key, "monitor")) {
        if (!cJSON_IsString(k) || !k->valuestring[0] || strlen(k->valuestring) >= sizeof c->monitor)
            return dt_err_set(err, DT_EINVAL,
                              "%s.config.monitor: give a log name (\"val_loss\", \"accuracy\", "
                              "\"val_<metric>\") of at most %zu characters",
                              path, sizeof c->monitor - 1);
        snprintf(c->monitor, sizeof c->monitor, "%s", k->valuestring);
    } else if (!strcmp(key, "mode")) {
        /* Keras warns and falls back to "auto" on another mode; a daemon refuses instead, since
         * nobody reads a warning in a job's log before the job has stopped at the wrong time. */
        const char *m = cJSON_IsString(k) ? k->valuestring : "";
        if (!strcmp(m, "auto"))
            c->mode = DT_CALLBACK_MODE_AUTO;
        else if (!strcmp(m, "min"))
            c->mode = DT_CALLBACK_MODE_MIN;
        else if (!strcmp(m, "max"))
            c->mode = DT_CALLBACK_MODE_MAX;
        else
            return dt_err_set(err, DT_EINVAL, "%s.config.mode: give \"auto\", \"min\" or \"max\"",
                              path);
    } else if (!strcmp(key, "min_delta")) {
        DT_TRY(get_number(k, path, -1e30, 1e30, &c->min_delta, err));
    } else if (!strcmp(key, "patience")) {
        DT_TRY(get_count(k, path, &c->patience, err));
    } else if (!strcmp(key, "verbose")) {
        /* every decision is logged anyway */
        if (!cJSON_IsNumber(k) && !cJSON_IsBool(k))
            return dt_err_set(err, DT_EINVAL, "%s.config.verbose: give 0 or 1", path);
    } else {
        *done = false;
    }
    return DT_OK;
}

/* A file name the job writes in its own dir: no directories, so it cannot leave it. */
static dt_status get_file(const cJSON *k, const char *path, const char *ext, char *out, size_t cap,
                          dt_err *err)
{
    const char *v = cJSON_IsString(k) ? k->valuestring : NULL;
    if (!v || !v[0] || strlen(v) >= cap || strchr(v, '/') || !strcmp(v, ".") || !strcmp(v, ".."))
        return dt_err_set(err, DT_EINVAL,
                          "%s.config.%s: give a file name (no directories, at most %zu "
                          "characters); it is written in the job's %s",
                          path, k->string, cap - 1, ext ? "checkpoint dir" : "dir");
    size_t n = strlen(v), e = ext ? strlen(ext) : 0;
    if (ext && (n <= e || strcmp(v + n - e, ext)))
        return dt_err_set(err, DT_EINVAL,
                          "%s.config.%s: \"%s\": dtrain writes the weights as safetensors; give "
                          "a name ending in %s",
                          path, k->string, v, ext);
    snprintf(out, cap, "%s", v);
    return DT_OK;
}

/* LearningRateScheduler's schedule: [rate per epoch, ...] or a LearningRateSchedule object. */
static dt_status parse_schedule(const cJSON *k, const char *path, dt_jobspec_callback *c,
                                dt_err *err)
{
    if (cJSON_IsArray(k)) {
        int n = cJSON_GetArraySize(k);
        if (n < 1 || n > DT_JOBSPEC_MAX_LR_EPOCHS)
            return dt_err_set(err, DT_EINVAL,
                              "%s.config.schedule: give 1 to %d rates, one per epoch (the last "
                              "one repeats)",
                              path, DT_JOBSPEC_MAX_LR_EPOCHS);
        int i = 0;
        for (const cJSON *e = k->child; e; e = e->next, i++) {
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < 0)
                return dt_err_set(err, DT_EINVAL,
                                  "%s.config.schedule[%d]: give a learning rate >= 0", path, i);
            c->lr_list[i] = e->valuedouble;
        }
        c->n_lr_list = n;
        return DT_OK;
    }
    if (cJSON_IsObject(k)) {
        char *text = cJSON_PrintUnformatted(k);
        size_t n = text ? strlen(text) : 0;
        if (text && n < sizeof c->lr_schedule)
            memcpy(c->lr_schedule, text, n + 1);
        cJSON_free(text);
        if (!n || n >= sizeof c->lr_schedule)
            return dt_err_set(err, DT_EINVAL, "%s.config.schedule: the object is too long", path);
        return DT_OK;
    }
    return dt_err_set(err, DT_EINVAL,
                      "%s.config.schedule: give a list of rates, one per epoch, or a Keras "
                      "LearningRateSchedule ({\"class_name\": \"ExponentialDecay\", \"config\": "
                      "{...}}) evaluated at the epoch; a Python function cannot travel in JSON",
                      path);
}

static dt_status parse_key(const cJSON *k, const char *path, dt_jobspec_callback *c, dt_err *err)
{
    const char *key = k->string;
    bool done = false;
    if (c->kind == DT_CALLBACK_EARLY_STOPPING || c->kind == DT_CALLBACK_REDUCE_LR_ON_PLATEAU ||
        (c->kind == DT_CALLBACK_MODEL_CHECKPOINT && strcmp(key, "patience") &&
         strcmp(key, "min_delta")))
        DT_TRY(parse_common(k, path, c, &done, err));
    if (done)
        return DT_OK;
    if (c->kind == DT_CALLBACK_EARLY_STOPPING) {
        if (!strcmp(key, "baseline")) {
            c->has_baseline = !cJSON_IsNull(k);
            if (c->has_baseline)
                DT_TRY(get_number(k, path, -1e30, 1e30, &c->baseline, err));
            return DT_OK;
        }
        if (!strcmp(key, "restore_best_weights"))
            return get_bool(k, path, &c->restore_best_weights, err);
        if (!strcmp(key, "start_from_epoch"))
            return get_count(k, path, &c->start_from_epoch, err);
    } else if (c->kind == DT_CALLBACK_REDUCE_LR_ON_PLATEAU) {
        if (!strcmp(key, "factor")) {
            DT_TRY(get_number(k, path, 0, 1, &c->factor, err));
            if (c->factor >= 1) /* Keras: "ReduceLROnPlateau does not support a factor >= 1.0" */
                return dt_err_set(err, DT_EINVAL,
                                  "%s.config.factor: must be below 1 (the rate is multiplied by "
                                  "it), got %g",
                                  path, c->factor);
            return DT_OK;
        }
        if (!strcmp(key, "cooldown"))
            return get_count(k, path, &c->cooldown, err);
        if (!strcmp(key, "min_lr"))
            return get_number(k, path, 0, 1e30, &c->min_lr, err);
    } else if (c->kind == DT_CALLBACK_MODEL_CHECKPOINT) {
        if (!strcmp(key, "filepath"))
            return get_file(k, path, ".safetensors", c->file, sizeof c->file, err);
        if (!strcmp(key, "save_best_only"))
            return get_bool(k, path, &c->save_best_only, err);
        /* the weights are what dtrain writes either way (a .keras archive is Keras's own) */
        if (!strcmp(key, "save_weights_only")) {
            bool b;
            return get_bool(k, path, &b, err);
        }
        if (!strcmp(key, "save_freq")) {
            if (!cJSON_IsString(k) || strcmp(k->valuestring, "epoch"))
                return dt_err_set(err, DT_ENOTSUP,
                                  "%s.config.save_freq: only \"epoch\" is supported; for a "
                                  "checkpoint every N steps use $.checkpoint.save_freq",
                                  path);
            return DT_OK;
        }
        if (!strcmp(key, "initial_value_threshold")) {
            c->has_initial_threshold = !cJSON_IsNull(k);
            if (c->has_initial_threshold)
                DT_TRY(get_number(k, path, -1e30, 1e30, &c->initial_threshold, err));
            return DT_OK;
        }
    } else if (c->kind == DT_CALLBACK_CSV_LOGGER) {
        if (!strcmp(key, "filename"))
            return get_file(k, path, NULL, c->file, sizeof c->file, err);
        if (!strcmp(key, "separator")) {
            if (!cJSON_IsString(k) || strlen(k->valuestring) != 1 ||
                strchr("\n\r\"", k->valuestring[0]))
                return dt_err_set(err, DT_EINVAL,
                                  "%s.config.separator: give one character (\",\" by default)",
                                  path);
            c->separator = k->valuestring[0];
            return DT_OK;
        }
        if (!strcmp(key, "append"))
            return get_bool(k, path, &c->append, err);
    } else if (c->kind == DT_CALLBACK_LR_SCHEDULER) {
        if (!strcmp(key, "verbose")) {
            if (!cJSON_IsNumber(k) && !cJSON_IsBool(k))
                return dt_err_set(err, DT_EINVAL, "%s.config.verbose: give 0 or 1", path);
            c->verbose = cJSON_IsNumber(k) ? k->valuedouble != 0 : cJSON_IsTrue(k);
            return DT_OK;
        }
        if (!strcmp(key, "schedule"))
            return parse_schedule(k, path, c, err);
    }
    return dt_err_set(err, DT_ENOTSUP, "%s.config.%s: %s takes no such key here", path, key,
                      dt_jobspec_callback_name(c->kind));
}

dt_status dt_jobspec_callback_parse(const cJSON *it, const char *path, dt_jobspec_callback *out,
                                    dt_err *err)
{
    memset(out, 0, sizeof *out);
    const char *cls = NULL;
    const cJSON *cfg = NULL;
    if (cJSON_IsString(it)) {
        cls = it->valuestring;
    } else if (cJSON_IsObject(it)) {
        for (const cJSON *k = it->child; k; k = k->next)
            if (strcmp(k->string, "class_name") && strcmp(k->string, "config") &&
                strcmp(k->string, "module") && strcmp(k->string, "registered_name"))
                return dt_err_set(err, DT_EINVAL,
                                  "%s.%s: unknown key; a callback is {\"class_name\", \"config\"}",
                                  path, k->string);
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(it, "class_name");
        cls = cJSON_IsString(cn) ? cn->valuestring : NULL;
        cfg = cJSON_GetObjectItemCaseSensitive(it, "config");
        if (!cls)
            return dt_err_set(err, DT_EINVAL, "%s.class_name: give the callback's class name",
                              path);
        if (cfg && !cJSON_IsNull(cfg) && !cJSON_IsObject(cfg))
            return dt_err_set(err, DT_EINVAL, "%s.config: give an object of the class's arguments",
                              path);
    } else {
        return dt_err_set(err, DT_EINVAL,
                          "%s: give a class name or {\"class_name\": ..., \"config\": {...}}",
                          path);
    }
    snprintf(out->monitor, sizeof out->monitor, "val_loss");
    if (!strcmp(cls, "EarlyStopping")) {
        out->kind = DT_CALLBACK_EARLY_STOPPING;
    } else if (!strcmp(cls, "ReduceLROnPlateau")) {
        out->kind = DT_CALLBACK_REDUCE_LR_ON_PLATEAU;
        out->factor = 0.1;
        out->patience = 10;
        out->min_delta = 1e-4;
    } else if (!strcmp(cls, "TerminateOnNaN")) {
        out->kind = DT_CALLBACK_TERMINATE_ON_NAN;
    } else if (!strcmp(cls, "ModelCheckpoint")) {
        out->kind = DT_CALLBACK_MODEL_CHECKPOINT;
    } else if (!strcmp(cls, "CSVLogger")) {
        out->kind = DT_CALLBACK_CSV_LOGGER;
        out->separator = ',';
    } else if (!strcmp(cls, "LearningRateScheduler")) {
        out->kind = DT_CALLBACK_LR_SCHEDULER;
    } else {
        return dt_err_set(err, DT_ENOTSUP,
                          "%s.class_name: \"%s\" is not supported; give EarlyStopping, "
                          "ReduceLROnPlateau, TerminateOnNaN, ModelCheckpoint, CSVLogger or "
                          "LearningRateScheduler",
                          path, cls);
    }
    for (const cJSON *k = cfg ? cfg->child : NULL; k; k = k->next)
        DT_TRY(parse_key(k, path, out, err));
    if (out->kind == DT_CALLBACK_LR_SCHEDULER && !out->n_lr_list && !out->lr_schedule[0])
        return dt_err_set(err, DT_EINVAL, "%s.config.schedule: required", path);
    /* both are required in Keras (positional arguments) */
    if ((out->kind == DT_CALLBACK_MODEL_CHECKPOINT || out->kind == DT_CALLBACK_CSV_LOGGER) &&
        !out->file[0])
        return dt_err_set(err, DT_EINVAL, "%s.config.%s: required", path,
                          out->kind == DT_CALLBACK_CSV_LOGGER ? "filename" : "filepath");
    /* Keras keeps abs(min_delta) and gives it the monitor's sign when it compares. */
    if (out->kind == DT_CALLBACK_EARLY_STOPPING)
        out->min_delta = fabs(out->min_delta);
    return DT_OK;
}
