/*
 * work.c - the service's blocking work on libuv's thread pool, never the loop: validating a
 * submitted spec, and export, evaluate and predict for the chief's Jobs methods.
 */
#include "service/service_internal.h"

#include "core/buf.h"
#include "core/limits.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

dt_status dt__service_parse_spec(const char *text, size_t len, const char *data_root,
                                 const char *state_dir, dt_jobspec *spec, dt_err *err)
{
    dt_jobspec_roots roots = {.data_root = data_root, .state_dir = state_dir};
    return dt_jobspec_parse(text, len, &roots, spec, err);
}

dt_status dt__service_validate(const char *spec_json, size_t len, const char *data_root,
                               const char *state_dir, int world, jt_summary *out, dt_err *err)
{
    dt_jobspec spec;
    DT_TRY(dt__service_parse_spec(spec_json, len, data_root, state_dir, &spec, err));
    dt_train_info info = {0};
    dt_status st = dt_train_validate(&spec, &info, err);
    /* At submit, not in preparing: the user still has the terminal and gets exit 2. Every
     * daemon runs ndevices replicas ($.strategy.devices). */
    if (st == DT_OK)
        st = dt_train_check_world(&spec, world * (spec.ndevices > 0 ? spec.ndevices : 1), err);
    if (st == DT_OK) {
        snprintf(out->name, sizeof out->name, "%s", spec.name);
        out->epochs = (uint32_t)spec.epochs;
        out->params = info.params_total;
        out->max_restarts = (uint32_t)spec.max_restarts;
        out->rejoin_timeout_s = (uint32_t)spec.rejoin_timeout_s;
        out->min_workers = (uint32_t)spec.min_workers;
        out->verbose = spec.verbose;
        snprintf(out->dirs[0], sizeof out->dirs[0], "%s",
                 spec.checkpoint_rel ? spec.checkpoint_rel : "");
        snprintf(out->dirs[1], sizeof out->dirs[1], "%s",
                 spec.tensorboard_rel ? spec.tensorboard_rel : "");
        out->gpu = spec.gpu;
        out->gpu_max = out->gpu_max_at = 0;
        for (int i = 0; spec.gpu && i < spec.ndevices; i++)
            if (spec.devices[i] > out->gpu_max) {
                out->gpu_max = spec.devices[i];
                out->gpu_max_at = i;
            }
    }
    dt_jobspec_destroy(&spec);
    return st;
}

static dt_status read_and_remove(const char *path, char **out, size_t *out_len, dt_err *err)
{
    dt_status st = dt_file_read_all(path, DT_MAX_RPC_MSG - 4096, out, out_len, err);
    unlink(path);
    if (st == DT_ETOOBIG)
        dt_err_set(err, DT_ETOOBIG,
                   "the result is larger than one message (%u MiB); read it on the chief instead",
                   DT_MAX_RPC_MSG >> 20);
    return st;
}

/* A unique temporary file name in dir. */
static void temp_path(const char *dir, const char *what, const char *ext, char *out, size_t n)
{
    static atomic_uint counter;
    snprintf(out, n, "%s/.%s-%ld-%u%s", dir, what, (long)getpid(), atomic_fetch_add(&counter, 1),
             ext);
}

dt_status dt__service_export(const char *weights_path, const char *job_dir, bool chunked,
                             uint64_t offset, char **out, size_t *out_len, uint64_t *total,
                             dt_err *err)
{
    dt_service_export_src src;
    DT_TRY(dt_service_export_open(weights_path, job_dir, &src, err));
    *total = src.size;
    dt_status st;
    if (!chunked && src.size > DT_MAX_RPC_MSG - 4096)
        st = dt_err_set(err, DT_ETOOBIG,
                        "the weights are %llu MiB, more than one message (%u MiB): use a dtrain "
                        "that fetches them in pieces, or read %s on the chief",
                        (unsigned long long)(src.size >> 20), DT_MAX_RPC_MSG >> 20, weights_path);
    else
        st = dt_service_export_read(&src, chunked ? offset : 0,
                                    chunked ? DT_EXPORT_CHUNK : src.size, out, out_len, err);
    dt_service_export_close(&src);
    return st;
}

/* A pin names one of the job's checkpoints: <dir>/ckpt-<digits>.safetensors, nothing else. */
static bool is_checkpoint_of(const char *dir, const char *path)
{
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) != 0 || path[n] != '/')
        return false;
    const char *p = path + n + 1;
    if (strncmp(p, "ckpt-", 5) != 0)
        return false;
    p += 5;
    if (*p < '0' || *p > '9')
        return false;
    while (*p >= '0' && *p <= '9')
        p++;
    return strcmp(p, ".safetensors") == 0;
}

dt_status dt__service_export_checkpoint(const char *spec_json, const char *data_root,
                                        const char *state_dir, const char *job_dir, const char *pin,
                                        bool chunked, uint64_t offset, char **out, size_t *out_len,
                                        uint64_t *total, char **path, uint64_t *step, dt_err *err)
{
    dt_jobspec spec;
    DT_TRY(dt__service_parse_spec(spec_json, strlen(spec_json), data_root, state_dir, &spec, err));
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", spec.checkpoint_dir ? spec.checkpoint_dir : "");
    if (!spec.checkpoint_dir)
        snprintf(dir, sizeof dir, "%s/checkpoints", job_dir);
    dt_jobspec_destroy(&spec);
    dt_status st;
    if (pin && *pin) {
        if (!is_checkpoint_of(dir, pin))
            return dt_err_set(err, DT_EINVAL,
                              "source_path %s is not one of the job's checkpoints (in %s)", pin,
                              dir);
        *path = strdup(pin);
        st = *path ? DT_OK : dt_err_set(err, DT_ENOMEM, "out of memory");
    } else {
        st = dt_train_latest_checkpoint(dir, path, err);
    }
    if (st == DT_ENOENT)
        return dt_err_set(err, DT_ENOENT,
                          "the job has no checkpoint yet in %s (the chief writes "
                          "one by checkpoint.save_freq)",
                          dir);
    DT_TRY(st);
    /* ckpt-<global step>.safetensors, as lib/train names them */
    const char *base = strrchr(*path, '/');
    *step = strtoull((base ? base + 1 : *path) + strlen("ckpt-"), NULL, 10);
    st = dt__service_export(*path, job_dir, chunked, offset, out, out_len, total, err);
    if (st == DT_ENOENT && !(pin && *pin)) {
        /* The latest was rotated away between the listing and the open: take the new latest. */
        free(*path);
        *path = NULL;
        DT_TRY(dt_train_latest_checkpoint(dir, path, err));
        base = strrchr(*path, '/');
        *step = strtoull((base ? base + 1 : *path) + strlen("ckpt-"), NULL, 10);
        st = dt__service_export(*path, job_dir, chunked, offset, out, out_len, total, err);
    }
    if (st == DT_ENOENT && pin && *pin)
        dt_err_set(err, DT_ENOENT,
                   "checkpoint %s is gone (checkpoint.keep keeps only the newest ones); fetch "
                   "again from the start to get the newest",
                   pin);
    return st;
}

static dt_status parse_data(const char *data_json, cJSON **out, dt_err *err)
{
    *out = cJSON_Parse(data_json);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return dt_err_set(err, DT_EINVAL,
                          "--data: not a JSON object; give a data split such as "
                          "{\"format\": \"idx\", \"images\": ..., \"labels\": ...}");
    }
    return DT_OK;
}

dt_status dt__service_evaluate(const char *spec_json, const char *weights_path,
                               const char *data_json, const char *data_root, const char *state_dir,
                               uint32_t batch_size, jmetric *metrics, int *nmetrics,
                               uint64_t *examples, dt_err *err)
{
    dt_jobspec spec;
    DT_TRY(dt__service_parse_spec(spec_json, strlen(spec_json), data_root, state_dir, &spec, err));
    cJSON *data = NULL;
    dt_status st = parse_data(data_json, &data, err);
    dt_train_eval_result res = {0};
    if (st == DT_OK)
        st = dt_train_evaluate(&spec, weights_path, data, (int)batch_size, &res, err);
    if (st == DT_OK) {
        int n = 0;
        snprintf(metrics[n].name, sizeof metrics[0].name, "loss");
        metrics[n++].value = res.loss;
        if (res.has_accuracy) {
            snprintf(metrics[n].name, sizeof metrics[0].name, "accuracy");
            metrics[n++].value = res.accuracy;
        }
        for (int i = 0; i < res.nmetrics && n < JOB_MAX_METRICS; i++) {
            snprintf(metrics[n].name, sizeof metrics[0].name, "%s", res.metrics[i].name);
            metrics[n++].value = res.metrics[i].value;
        }
        *nmetrics = n;
        *examples = res.examples;
    }
    cJSON_Delete(data);
    dt_jobspec_destroy(&spec);
    return st;
}

dt_status dt__service_predict(const char *spec_json, const char *weights_path,
                              const char *data_json, const char *data_root, const char *state_dir,
                              const char *job_dir, uint32_t batch_size, const char *format,
                              char **out, size_t *out_len, uint64_t *rows, uint64_t *cols,
                              dt_err *err)
{
    bool csv = format && strcmp(format, "csv") == 0;
    if (format && *format && !csv && strcmp(format, "npy") != 0)
        return dt_err_set(err, DT_EINVAL, "--format %s: use csv or npy", format);
    dt_jobspec spec;
    DT_TRY(dt__service_parse_spec(spec_json, strlen(spec_json), data_root, state_dir, &spec, err));
    cJSON *data = NULL;
    dt_status st = parse_data(data_json, &data, err);
    char tmp[4300];
    temp_path(job_dir, "predict", csv ? ".csv" : ".npy", tmp, sizeof tmp);
    size_t n = 0;
    if (st == DT_OK)
        st = dt_train_predict(&spec, weights_path, data, (int)batch_size, tmp, &n, err);
    cJSON_Delete(data);
    dt_jobspec_destroy(&spec);
    if (st != DT_OK) {
        unlink(tmp);
        return st;
    }
    DT_TRY(read_and_remove(tmp, out, out_len, err));
    *rows = n;
    *cols = 0;
    if (n && csv) {
        const char *nl = memchr(*out, '\n', *out_len);
        size_t line = nl ? (size_t)(nl - *out) : *out_len;
        *cols = 1;
        for (size_t i = 0; i < line; i++)
            *cols += (*out)[i] == ',';
    } else if (n && *out_len > 10) { /* .npy v1: 10 bytes, then a header of hlen bytes */
        size_t hlen = (uint8_t)(*out)[8] | (size_t)(uint8_t)(*out)[9] << 8;
        if (*out_len > 10 + hlen)
            *cols = (*out_len - 10 - hlen) / 4 / n;
    }
    return DT_OK;
}
