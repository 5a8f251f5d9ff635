/* jobspec.c - job spec JSON -> dt_jobspec. Every error names its JSON path and says what to do;
 * unknown keys are errors, so a misspelt "epocs" cannot silently train with the default. */
#include "config/jobspec.h"

#include "core/buf.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"

#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>

/* ---------------------------------------------------------------------------- paths -- */

/* Whether real (a resolved path) is realroot or lies below it. */
static bool inside(const char *realroot, const char *real)
{
    size_t n = strlen(realroot);
    if (n == 1 && realroot[0] == '/')
        return true;
    return strncmp(real, realroot, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

static dt_status real_root(const char *root, const char *what, char *out, dt_err *err)
{
    if (!realpath(root, out))
        return dt_err_set(err, DT_ENOENT,
                          "%s %s: %s; create it or start the daemon with another one", what, root,
                          strerror(errno));
    return DT_OK;
}

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISDIR(m)  ? "a directory"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

dt_status dt_jobspec_check_read(const char *root, const char *path, const char *json_path,
                                dt_err *err)
{
    char rr[PATH_MAX], real[PATH_MAX];
    if (!realpath(path, real))
        return dt_err_set(err, errno == ENOENT ? DT_ENOENT : DT_EIO, "%s: \"%s\": %s", json_path,
                          path, strerror(errno));
    if (root) {
        DT_TRY(real_root(root, "data root", rr, err));
        if (!inside(rr, real))
            return dt_err_set(err, DT_EPERM,
                              "%s: \"%s\" resolves to %s, outside the data root %s; put the file "
                              "under the data root (symlinks out of it are refused)",
                              json_path, path, real, rr);
    }
    /* stat, never open: opening a FIFO blocks until a writer comes, and a device never ends. */
    struct stat sb;
    if (stat(real, &sb) != 0)
        return dt_err_set(err, DT_EIO, "%s: \"%s\": %s", json_path, path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return dt_err_set(err, DT_EINVAL, "%s: \"%s\" is %s; give a regular file", json_path, path,
                          file_kind(sb.st_mode));
    return DT_OK;
}

dt_status dt_jobspec_resolve_read(const char *root, const char *path, const char *json_path,
                                  char **out, dt_err *err)
{
    *out = NULL;
    if (!path[0])
        return dt_err_set(err, DT_EINVAL, "%s: empty path", json_path);
    char *full = dt_path_join(root, path);
    if (!full)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", json_path);
    dt_status st = dt_jobspec_check_read(root, full, json_path, err);
    if (st == DT_OK) {
        char real[PATH_MAX];
        if (!realpath(full, real))
            st = dt_err_set(err, DT_EIO, "%s: \"%s\": %s", json_path, path, strerror(errno));
        else if (!(*out = strdup(real)))
            st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", json_path);
    } else if (st == DT_ENOENT && root) {
        dt_err_prefix(err, "(relative paths are relative to the data root %s) ", root);
    }
    free(full);
    return st;
}

dt_status dt_jobspec_resolve_write(const char *root, const char *path, const char *json_path,
                                   char **out, dt_err *err)
{
    *out = NULL;
    if (!path[0])
        return dt_err_set(err, DT_EINVAL, "%s: empty path", json_path);
    /* ".." is refused outright: what it means depends on directories that may not exist yet. */
    for (const char *p = path; (p = strstr(p, "..")); p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return dt_err_set(err, DT_EPERM,
                              "%s: \"%s\" contains \"..\"; give a path inside the state dir%s%s",
                              json_path, path, root ? " " : "", root ? root : "");
    char *full = dt_path_join(root, path);
    if (!full)
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", json_path);
    if (!root) {
        *out = full;
        return DT_OK;
    }
    char rr[PATH_MAX];
    dt_status st = real_root(root, "state dir", rr, err);
    if (st != DT_OK) {
        free(full);
        return st;
    }
    /* Resolve the longest existing prefix (symlinks included); the rest is created later. */
    size_t len = strlen(full);
    while (len > 1 && full[len - 1] == '/')
        full[--len] = '\0';
    char real[PATH_MAX];
    size_t cut = len;
    for (;;) {
        char save = full[cut];
        full[cut] = '\0';
        bool ok = realpath(full, real) != NULL;
        full[cut] = save;
        if (ok)
            break;
        while (cut > 0 && full[cut - 1] != '/')
            cut--;
        if (cut <= 1) {
            free(full);
            return dt_err_set(err, DT_EINVAL, "%s: \"%s\": no part of it exists", json_path, path);
        }
        cut--; /* drop the '/' */
    }
    if (!inside(rr, real)) {
        dt_err_set(err, DT_EPERM,
                   "%s: \"%s\" resolves to %s, outside the state dir %s; give a path inside it "
                   "(symlinks out of it are refused)",
                   json_path, path, real, rr);
        free(full);
        return DT_EPERM;
    }
    size_t n = strlen(real) + strlen(full + cut) + 2;
    *out = malloc(n);
    if (*out)
        snprintf(*out, n, "%s%s", real, full + cut);
    free(full);
    return *out ? DT_OK : dt_err_set(err, DT_ENOMEM, "%s: out of memory", json_path);
}

/* ------------------------------------------------------------------------- fields -- */

static dt_status check_keys(const cJSON *obj, const char *path, const char *const *allowed,
                            dt_err *err)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            ok = ok || strcmp(it->string, *a) == 0;
        if (!ok) {
            char list[512] = "";
            for (const char *const *a = allowed; *a; a++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         a == allowed ? "" : ", ", *a);
            return dt_err_set(err, DT_EINVAL, "%s.%s: unknown key; known keys are %s", path,
                              it->string, list);
        }
    }
    return DT_OK;
}

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    return "an object";
}

/* An optional integer in [min, max]; null counts as absent when null_ok. */
static dt_status get_int(const cJSON *obj, const char *key, const char *path, int64_t min,
                         int64_t max, bool null_ok, int64_t *out, dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || (null_ok && cJSON_IsNull(v)))
        return DT_OK;
    if (!cJSON_IsNumber(v))
        return dt_err_set(err, DT_EINVAL, "%s.%s: must be an integer in [%lld, %lld], got %s", path,
                          key, (long long)min, (long long)max, type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)min || d > (double)max)
        return dt_err_set(err, DT_EINVAL, "%s.%s: must be an integer in [%lld, %lld], got %g", path,
                          key, (long long)min, (long long)max, d);
    *out = (int64_t)d;
    return DT_OK;
}

static dt_status get_object(const cJSON *obj, const char *key, bool required, const cJSON **out,
                            dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return dt_err_set(err, DT_EINVAL,
                              "$.%s: missing; the job spec needs it (see README "
                              "\"Job spec\")",
                              key);
        return DT_OK;
    }
    if (!cJSON_IsObject(v))
        return dt_err_set(err, DT_EINVAL, "$.%s: must be an object, got %s", key, type_name(v));
    *out = v;
    return DT_OK;
}

static dt_status get_string(const cJSON *obj, const char *key, const char *path, const char **out,
                            dt_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return DT_OK;
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return dt_err_set(err, DT_EINVAL, "%s.%s: must be a non-empty string, got %s", path, key,
                          type_name(v));
    *out = v->valuestring;
    return DT_OK;
}

/* --------------------------------------------------------------------------- parse -- */

static dt_status parse_name(const cJSON *root, dt_jobspec *s, dt_err *err)
{
    const char *name;
    DT_TRY(get_string(root, "name", "$", &name, err));
    if (!name) {
        snprintf(s->name, sizeof s->name, "job");
        return DT_OK;
    }
    size_t n = strlen(name);
    if (n >= sizeof s->name)
        return dt_err_set(err, DT_EINVAL, "$.name: longer than %zu characters", sizeof s->name - 1);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr("._-", name[i]))
            return dt_err_set(err, DT_EINVAL,
                              "$.name: \"%s\": use only letters, digits, '.', '_' and '-'", name);
    memcpy(s->name, name, n + 1);
    return DT_OK;
}

static dt_status parse_model(const cJSON *root, const dt_jobspec_roots *roots, dt_jobspec *s,
                             dt_err *err)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!m || cJSON_IsNull(m))
        return dt_err_set(err, DT_EINVAL,
                          "$.model: missing; give a Keras model.to_json() object or the path of "
                          "a file holding one");
    if (cJSON_IsObject(m)) {
        s->model_json = cJSON_PrintUnformatted(m);
        if (!s->model_json)
            return dt_err_set(err, DT_ENOMEM, "$.model: out of memory");
        s->model_json_len = strlen(s->model_json);
        return DT_OK;
    }
    if (!cJSON_IsString(m))
        return dt_err_set(err, DT_EINVAL, "$.model: must be an object or a path, got %s",
                          type_name(m));
    DT_TRY(
        dt_jobspec_resolve_read(roots->data_root, m->valuestring, "$.model", &s->model_path, err));
    dt_status st = dt_file_read_regular(s->model_path, DT_MAX_MODEL_JSON, &s->model_json,
                                        &s->model_json_len, err);
    if (st != DT_OK)
        dt_err_prefix(err, "$.model");
    return st;
}

static dt_status parse_compile(const cJSON *root, dt_jobspec *s, dt_err *err)
{
    const cJSON *c;
    DT_TRY(get_object(root, "compile", true, &c, err));
    static const char *const keys[] = {"optimizer", "loss", "metrics", NULL};
    DT_TRY(check_keys(c, "$.compile", keys, err));

    const cJSON *o = cJSON_GetObjectItemCaseSensitive(c, "optimizer");
    if (o && !cJSON_IsNull(o)) {
        if (!cJSON_IsString(o) && !cJSON_IsObject(o))
            return dt_err_set(err, DT_EINVAL,
                              "$.compile.optimizer: must be a name (\"adam\") or {\"class_name\", "
                              "\"config\"}, got %s",
                              type_name(o));
        s->optimizer = cJSON_Duplicate(o, true);
    } else {
        s->optimizer = cJSON_CreateString("rmsprop"); /* Keras compile()'s default */
    }
    if (!s->optimizer)
        return dt_err_set(err, DT_ENOMEM, "$.compile.optimizer: out of memory");

    const cJSON *l = cJSON_GetObjectItemCaseSensitive(c, "loss");
    if (!l || cJSON_IsNull(l))
        return dt_err_set(err, DT_EINVAL,
                          "$.compile.loss: missing; name a Keras loss, e.g. "
                          "\"sparse_categorical_crossentropy\"");
    const char *lname = NULL;
    if (cJSON_IsString(l)) {
        lname = l->valuestring;
    } else if (cJSON_IsObject(l)) {
        static const char *const lkeys[] = {"class_name", "config", "module", "registered_name",
                                            NULL};
        DT_TRY(check_keys(l, "$.compile.loss", lkeys, err));
        DT_TRY(get_string(l, "class_name", "$.compile.loss", &lname, err));
        if (!lname)
            return dt_err_set(err, DT_EINVAL, "$.compile.loss.class_name: missing");
        /* The config's keys and values are the loss's business: lib/train checks them with
         * the model (dt_loss_from_json), at submit time too. */
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(l, "config");
        const cJSON *fl =
            cJSON_IsObject(cfg) ? cJSON_GetObjectItemCaseSensitive(cfg, "from_logits") : NULL;
        if (fl && !cJSON_IsBool(fl))
            return dt_err_set(err, DT_EINVAL,
                              "$.compile.loss.config.from_logits: must be true or false, got %s",
                              type_name(fl));
        s->from_logits = cJSON_IsTrue(fl);
    } else {
        return dt_err_set(err, DT_EINVAL,
                          "$.compile.loss: must be a name or {\"class_name\", \"config\"}, got %s",
                          type_name(l));
    }
    if (!lname[0] || strlen(lname) >= sizeof s->loss)
        return dt_err_set(err, DT_EINVAL, "$.compile.loss: bad loss name");
    snprintf(s->loss, sizeof s->loss, "%s", lname);
    if (!(s->loss_json = cJSON_Duplicate(l, true)))
        return dt_err_set(err, DT_ENOMEM, "$.compile.loss: out of memory");

    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(c, "metrics");
    if (ms && !cJSON_IsNull(ms)) {
        if (!cJSON_IsArray(ms))
            return dt_err_set(err, DT_EINVAL,
                              "$.compile.metrics: must be a list such as [\"accuracy\"], got %s",
                              type_name(ms));
        int i = 0;
        for (const cJSON *it = ms->child; it; it = it->next, i++) {
            char path[48];
            snprintf(path, sizeof path, "$.compile.metrics[%d]", i);
            if (cJSON_IsString(it) &&
                (!strcmp(it->valuestring, "accuracy") || !strcmp(it->valuestring, "acc"))) {
                s->metric_accuracy = true;
                continue;
            }
            if (s->nmetrics == DT_JOBSPEC_MAX_METRICS)
                return dt_err_set(err, DT_ETOOBIG, "%s: at most %d metrics besides \"accuracy\"",
                                  path, DT_JOBSPEC_MAX_METRICS);
            dt_jobspec_metric *m = &s->metrics[s->nmetrics];
            DT_TRY(dt_jobspec_metric_parse(it, path, m, err));
            for (int j = 0; j < s->nmetrics; j++)
                if (!strcmp(s->metrics[j].name, m->name))
                    return dt_err_set(err, DT_EINVAL, "%s: the name \"%s\" is listed twice", path,
                                      m->name);
            if (!strcmp(m->name, "accuracy") || !strcmp(m->name, "loss"))
                return dt_err_set(err, DT_EINVAL, "%s: the name \"%s\" is taken", path, m->name);
            s->nmetrics++;
        }
    }
    return DT_OK;
}

/* Keras's class_weight dict; JSON keys are strings ("0": 1.0, "1": 4.5). */
static dt_status parse_class_weight(const cJSON *cw, dt_jobspec *s, dt_err *err)
{
    if (!cw || cJSON_IsNull(cw))
        return DT_OK;
    if (!cJSON_IsObject(cw) || !cw->child)
        return dt_err_set(err, DT_EINVAL,
                          "$.fit.class_weight: give an object of class indices and weights, "
                          "e.g. {\"0\": 1.0, \"1\": 4.0}");
    int top = -1;
    for (const cJSON *e = cw->child; e; e = e->next) {
        char *end = NULL;
        long k = strtol(e->string, &end, 10);
        if (!*e->string || *end || k < 0 || k >= DT_JOBSPEC_MAX_CLASSES)
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.class_weight.%.40s: a class is an integer in 0..%d", e->string,
                              DT_JOBSPEC_MAX_CLASSES - 1);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble > 1e30)
            return dt_err_set(err, DT_EINVAL, "$.fit.class_weight.%s: expected a weight >= 0",
                              e->string);
        top = k > top ? (int)k : top;
    }
    s->class_weight = malloc((size_t)(top + 1) * sizeof *s->class_weight);
    if (!s->class_weight)
        return dt_err_set(err, DT_ENOMEM, "$.fit.class_weight: out of memory");
    for (int i = 0; i <= top; i++)
        s->class_weight[i] = 1.0f;
    for (const cJSON *e = cw->child; e; e = e->next)
        s->class_weight[strtol(e->string, NULL, 10)] = (float)e->valuedouble;
    s->n_class_weight = top + 1;
    return DT_OK;
}

static dt_status parse_fit(const cJSON *root, dt_jobspec *s, dt_err *err)
{
    const cJSON *f;
    DT_TRY(get_object(root, "fit", false, &f, err));
    s->epochs = 1;
    s->batch_size = 32;
    s->validation_freq = 1;
    s->verbose = -1;
    if (!f)
        return DT_OK;
    static const char *const keys[] = {"epochs",          "batch_size",       "steps_per_epoch",
                                       "validation_freq", "verbose",          "callbacks",
                                       "class_weight",    "validation_split", NULL};
    DT_TRY(check_keys(f, "$.fit", keys, err));
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(f, "validation_split");
    if (vs && !cJSON_IsNull(vs)) {
        if (!cJSON_IsNumber(vs) || !(vs->valuedouble >= 0 && vs->valuedouble < 1))
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.validation_split: expected a fraction in [0, 1), e.g. 0.2");
        s->validation_split = vs->valuedouble;
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "data");
        const cJSON *dv =
            cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "validation") : NULL;
        if (s->validation_split > 0 && dv && !cJSON_IsNull(dv))
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.validation_split: $.data.validation is given too; use one "
                              "(validation_split holds out the end of $.data.train)");
    }
    DT_TRY(parse_class_weight(cJSON_GetObjectItemCaseSensitive(f, "class_weight"), s, err));
    const cJSON *cbs = cJSON_GetObjectItemCaseSensitive(f, "callbacks");
    if (cbs && !cJSON_IsNull(cbs)) {
        if (!cJSON_IsArray(cbs) || cJSON_GetArraySize(cbs) > DT_JOBSPEC_MAX_CALLBACKS)
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.callbacks: give a list of at most %d callbacks",
                              DT_JOBSPEC_MAX_CALLBACKS);
        for (const cJSON *c = cbs->child; c; c = c->next) {
            char path[64];
            snprintf(path, sizeof path, "$.fit.callbacks[%d]", s->ncallbacks);
            DT_TRY(dt_jobspec_callback_parse(c, path, &s->callbacks[s->ncallbacks], err));
            s->ncallbacks++;
        }
    }
    int64_t v = s->epochs;
    DT_TRY(get_int(f, "epochs", "$.fit", 1, 1000000, false, &v, err));
    s->epochs = (int)v;
    v = s->batch_size;
    DT_TRY(get_int(f, "batch_size", "$.fit", 1, 1 << 20, true, &v, err));
    s->batch_size = (int)v;
    DT_TRY(get_int(f, "steps_per_epoch", "$.fit", 1, INT64_C(1) << 40, true, &s->steps_per_epoch,
                   err));
    v = s->validation_freq;
    DT_TRY(get_int(f, "validation_freq", "$.fit", 1, 1000000, false, &v, err));
    s->validation_freq = (int)v;
    /* Keras's fit(verbose=): "auto" (a bar on a terminal, else a line per epoch), 0, 1, 2. */
    s->verbose = -1;
    const cJSON *vb = cJSON_GetObjectItemCaseSensitive(f, "verbose");
    if (cJSON_IsString(vb) && strcmp(vb->valuestring, "auto") == 0)
        return DT_OK;
    if (vb && !cJSON_IsNull(vb)) {
        if (!cJSON_IsNumber(vb) ||
            (vb->valuedouble != 0 && vb->valuedouble != 1 && vb->valuedouble != 2))
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.verbose: give \"auto\", 0 (silent), 1 (a progress bar) or 2 "
                              "(one line per epoch), as Keras's fit takes");
        s->verbose = (int)vb->valuedouble;
    }
    return DT_OK;
}

/* $.strategy.KEY: a bucket size in MiB, (0, 1024]; absent or null keeps *out. */
static dt_status get_mb(const cJSON *o, const char *key, double *out, dt_err *err)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!b || cJSON_IsNull(b))
        return DT_OK;
    if (!cJSON_IsNumber(b) || !isfinite(b->valuedouble) || b->valuedouble <= 0 ||
        b->valuedouble > 1024)
        return dt_err_set(err, DT_EINVAL, "$.strategy.%s: must be a number in (0, 1024], got %s",
                          key, cJSON_IsNumber(b) ? "a number out of range" : type_name(b));
    *out = b->valuedouble;
    return DT_OK;
}

/* One of TF's device strings for a replica: "/cpu:N", "/gpu:N", "/device:CPU:N" or
 * "/device:GPU:N" (any case) -> N, and whether it is a GPU; anything else gets the accepted
 * forms. */
static dt_status parse_device(const char *d, int i, int *out, bool *gpu, dt_err *err)
{
    /* "/device:GPU:N" or "/gpu:N": p at "GPU:N" */
    const char *p = !strncasecmp(d, "/device:", 8) ? d + 8 : d[0] == '/' ? d + 1 : "";
    *gpu = !strncasecmp(p, "gpu:", 4);
    if (*gpu || !strncasecmp(p, "cpu:", 4)) {
        const char *q = p + 4;
        char *end;
        errno = 0;
        long v = isdigit((unsigned char)*q) ? strtol(q, &end, 10) : -1;
        if (v >= 0 && v < 1000000 && !errno && !*end) {
            *out = (int)v;
            return DT_OK;
        }
    }
    return dt_err_set(err, DT_EINVAL,
                      "$.strategy.devices[%d]: \"%s\": give a device as \"/gpu:N\" or \"/cpu:N\" "
                      "(or \"/device:GPU:N\", \"/device:CPU:N\"), N >= 0",
                      i, d);
}

/* $.strategy.devices: a non-empty array of distinct device strings, all GPUs or all CPUs. */
static dt_status parse_devices(const cJSON *o, dt_jobspec *s, dt_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "devices");
    if (!a || cJSON_IsNull(a))
        return DT_OK;
    if (!cJSON_IsArray(a))
        return dt_err_set(err, DT_EINVAL,
                          "$.strategy.devices: must be an array of device strings such as "
                          "[\"/gpu:0\", \"/gpu:1\"] or [\"/cpu:0\"], got %s",
                          type_name(a));
    int n = cJSON_GetArraySize(a);
    if (n < 1 || n > DT_JOBSPEC_MAX_DEVICES)
        return dt_err_set(err, DT_EINVAL,
                          "$.strategy.devices: give 1 to %d devices, got %d (leave it out for one "
                          "replica on /cpu:0)",
                          DT_JOBSPEC_MAX_DEVICES, n);
    int i = 0;
    const cJSON *it;
    const char *first = NULL; /* devices[0] as given, for a mixed list's refusal */
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsString(it))
            return dt_err_set(err, DT_EINVAL,
                              "$.strategy.devices[%d]: must be a string such as \"/gpu:0\" or "
                              "\"/cpu:0\", got %s",
                              i, type_name(it));
        bool gpu;
        DT_TRY(parse_device(it->valuestring, i, &s->devices[i], &gpu, err));
        if (i == 0) {
            s->gpu = gpu;
            first = it->valuestring;
        } else if (gpu != s->gpu) {
            /* A CPU replica and a GPU replica round the same step differently (cuBLAS's and
             * OpenBLAS's summation orders), so their weights would drift apart. */
            return dt_err_set(err, DT_EINVAL,
                              "$.strategy.devices[%d]: \"%s\" is a %s but $.strategy.devices[0] "
                              "\"%s\" is a %s: their rounding differs, so one job trains on GPUs "
                              "or on CPUs, not both",
                              i, it->valuestring, gpu ? "GPU" : "CPU", first,
                              s->gpu ? "GPU" : "CPU");
        }
        for (int j = 0; j < i; j++)
            if (s->devices[j] == s->devices[i])
                return dt_err_set(err, DT_EINVAL,
                                  "$.strategy.devices[%d]: \"%s\" names the same device as "
                                  "$.strategy.devices[%d]; each replica needs its own",
                                  i, it->valuestring, j);
        i++;
    }
    s->ndevices = n;
    return DT_OK;
}

static dt_status parse_strategy(const cJSON *root, dt_jobspec *s, dt_err *err)
{
    const cJSON *o;
    DT_TRY(get_object(root, "strategy", false, &o, err));
    s->communication = DT_JOBSPEC_COMM_AUTO;
    s->bucket_mb = 25;
    s->first_bucket_mb = 1;
    s->compression = DT_JOBSPEC_COMPRESS_NONE;
    s->precision = DT_JOBSPEC_PRECISION_FLOAT32;
    /* One replica on /cpu:0 while the CUDA backend is being completed; then the default becomes
     * every visible GPU (MirroredStrategy's), and /cpu:0 when the host has none. */
    s->gpu = false;
    s->ndevices = 1;
    s->devices[0] = 0;
    if (!o)
        return DT_OK;
    static const char *const keys[] = {
        "communication", "bucket_mb", "first_bucket_mb", "compression", "devices",
        "precision",     NULL};
    DT_TRY(check_keys(o, "$.strategy", keys, err));
    const char *c;
    DT_TRY(get_string(o, "communication", "$.strategy", &c, err));
    if (c) {
        if (!strcasecmp(c, "AUTO"))
            s->communication = DT_JOBSPEC_COMM_AUTO;
        else if (!strcasecmp(c, "RING"))
            s->communication = DT_JOBSPEC_COMM_RING;
        else if (!strcasecmp(c, "NCCL"))
            s->communication = DT_JOBSPEC_COMM_NCCL;
        else
            return dt_err_set(err, DT_EINVAL,
                              "$.strategy.communication: \"%s\": use AUTO, RING or NCCL", c);
    }
    DT_TRY(get_mb(o, "bucket_mb", &s->bucket_mb, err));
    DT_TRY(get_mb(o, "first_bucket_mb", &s->first_bucket_mb, err));
    DT_TRY(get_string(o, "compression", "$.strategy", &c, err));
    if (c) {
        if (!strcmp(c, "none"))
            s->compression = DT_JOBSPEC_COMPRESS_NONE;
        else if (!strcmp(c, "float16"))
            s->compression = DT_JOBSPEC_COMPRESS_FLOAT16;
        else if (!strcmp(c, "bfloat16"))
            s->compression = DT_JOBSPEC_COMPRESS_BFLOAT16;
        else
            return dt_err_set(err, DT_EINVAL,
                              "$.strategy.compression: \"%s\": use \"none\" (exact float32, the "
                              "default), \"float16\" or \"bfloat16\"",
                              c);
    }
    DT_TRY(parse_devices(o, s, err));
    DT_TRY(get_string(o, "precision", "$.strategy", &c, err));
    if (c) {
        /* "tf32" means nothing on CPUs; accepted there and ignored, as TF's
         * set_float32_matmul_precision is. */
        if (!strcmp(c, "float32"))
            s->precision = DT_JOBSPEC_PRECISION_FLOAT32;
        else if (!strcmp(c, "tf32"))
            s->precision = DT_JOBSPEC_PRECISION_TF32;
        else
            return dt_err_set(err, DT_EINVAL,
                              "$.strategy.precision: \"%s\": use \"float32\" (strict float32, the "
                              "default) or \"tf32\" (GPU matrix products on TensorFloat-32 tensor "
                              "cores: 10 bits of mantissa in the inputs)",
                              c);
    }
    return DT_OK;
}

/* out (from dt_jobspec_resolve_write under state_dir) relative to the state dir, normalised:
 * no empty or "." components ("" for the state dir itself). NULL when out of memory. */
static char *rel_to_state(const char *state_dir, const char *out)
{
    char rr[PATH_MAX];
    if (!realpath(state_dir, rr) || !inside(rr, out))
        return NULL;
    const char *p = out + (strcmp(rr, "/") == 0 ? 0 : strlen(rr));
    char *rel = malloc(strlen(p) + 1);
    if (!rel)
        return NULL;
    size_t n = 0;
    while (*p) {
        while (*p == '/')
            p++;
        size_t k = strcspn(p, "/");
        if (k && !(k == 1 && p[0] == '.')) {
            if (n)
                rel[n++] = '/';
            memcpy(rel + n, p, k);
            n += k;
        }
        p += k;
    }
    rel[n] = '\0';
    return rel;
}

/* The daemon's own trees in the state dir: jobs/<id> holds every job's record, checkpoints and
 * weights (one job's keep rotation would delete another's), eval/ the evaluator's files. */
static dt_status check_write_dir(const char *rel, const char *json_path, const char *path,
                                 dt_err *err)
{
    size_t k = strcspn(rel, "/");
    if (!rel[0])
        return dt_err_set(err, DT_EPERM,
                          "%s: \"%s\" is the state dir itself; give a dir of this job's own "
                          "inside it (e.g. \"runs/<name>\"), or leave the key out",
                          json_path, path);
    if ((k == 4 && strncmp(rel, "jobs", 4) == 0) || (k == 4 && strncmp(rel, "eval", 4) == 0))
        return dt_err_set(err, DT_EPERM,
                          "%s: \"%s\" lies in the daemon's own %.4s/ dir, where every job's "
                          "files live; give a dir of this job's own (e.g. \"runs/<name>\"), or "
                          "leave the key out%s",
                          json_path, path, rel,
                          strcmp(json_path, "$.checkpoint.dir") == 0
                              ? " (checkpoints then go to jobs/<id>/checkpoints)"
                              : "");
    return DT_OK;
}

static dt_status resolve_out_dir(const char *state_dir, const char *path, const char *json_path,
                                 char **out, char **rel, dt_err *err)
{
    DT_TRY(dt_jobspec_resolve_write(state_dir, path, json_path, out, err));
    if (!state_dir)
        return DT_OK;
    if (!(*rel = rel_to_state(state_dir, *out)))
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", json_path);
    return check_write_dir(*rel, json_path, path, err);
}

bool dt_jobspec_dirs_overlap(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b), n = na < nb ? na : nb;
    return strncmp(a, b, n) == 0 && (na == nb || (na < nb ? b[n] : a[n]) == '/' || n == 0);
}

void dt_jobspec_write_dirs(const char *json, size_t len, const char *state_dir, char **ckpt_rel,
                           char **tb_rel)
{
    *ckpt_rel = *tb_rel = NULL;
    if (!state_dir)
        return;
    cJSON *root = cJSON_ParseWithLength(json, len);
    static const char *const keys[][2] = {{"checkpoint", "dir"}, {"tensorboard", "log_dir"}};
    char **outs[] = {ckpt_rel, tb_rel};
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, keys[i][0]);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, keys[i][1]);
        char *full = NULL;
        dt_err err;
        if (cJSON_IsString(d) &&
            dt_jobspec_resolve_write(state_dir, d->valuestring, "", &full, &err) == DT_OK)
            *outs[i] = rel_to_state(state_dir, full);
        free(full);
    }
    cJSON_Delete(root);
}

static dt_status parse_outputs(const cJSON *root, const dt_jobspec_roots *roots, dt_jobspec *s,
                               dt_err *err)
{
    const cJSON *c;
    s->keep = 3;
    s->save_freq_epoch = true;
    DT_TRY(get_object(root, "checkpoint", false, &c, err));
    if (c) {
        static const char *const keys[] = {"dir", "save_freq", "keep", NULL};
        DT_TRY(check_keys(c, "$.checkpoint", keys, err));
        s->has_checkpoint = true;
        const char *dir;
        DT_TRY(get_string(c, "dir", "$.checkpoint", &dir, err));
        if (dir)
            DT_TRY(resolve_out_dir(roots->state_dir, dir, "$.checkpoint.dir", &s->checkpoint_dir,
                                   &s->checkpoint_rel, err));
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "save_freq");
        if (cJSON_IsString(f)) {
            if (strcmp(f->valuestring, "epoch"))
                return dt_err_set(err, DT_EINVAL,
                                  "$.checkpoint.save_freq: \"%s\": use \"epoch\" or a number of "
                                  "steps",
                                  f->valuestring);
        } else if (f && !cJSON_IsNull(f)) {
            DT_TRY(get_int(c, "save_freq", "$.checkpoint", 1, INT64_C(1) << 40, false,
                           &s->save_freq_steps, err));
            s->save_freq_epoch = false;
        }
        int64_t k = s->keep;
        DT_TRY(get_int(c, "keep", "$.checkpoint", 1, 100000, false, &k, err));
        s->keep = (int)k;
    }
    const cJSON *t;
    DT_TRY(get_object(root, "tensorboard", false, &t, err));
    if (t) {
        static const char *const keys[] = {"log_dir", NULL};
        DT_TRY(check_keys(t, "$.tensorboard", keys, err));
        const char *dir;
        DT_TRY(get_string(t, "log_dir", "$.tensorboard", &dir, err));
        if (!dir)
            return dt_err_set(err, DT_EINVAL, "$.tensorboard.log_dir: missing");
        DT_TRY(resolve_out_dir(roots->state_dir, dir, "$.tensorboard.log_dir", &s->tensorboard_dir,
                               &s->tensorboard_rel, err));
    }
    return DT_OK;
}

static dt_status parse_fault_tolerance(const cJSON *root, dt_jobspec *s, dt_err *err)
{
    s->max_restarts = 3;
    s->rejoin_timeout_s = 300;
    s->hang_timeout_s = 4;
    const cJSON *f;
    DT_TRY(get_object(root, "fault_tolerance", false, &f, err));
    if (!f)
        return DT_OK;
    static const char *const keys[] = {"max_restarts", "rejoin_timeout_s", "min_workers",
                                       "hang_timeout_s", NULL};
    DT_TRY(check_keys(f, "$.fault_tolerance", keys, err));
    int64_t v = s->max_restarts;
    DT_TRY(get_int(f, "max_restarts", "$.fault_tolerance", 0, 1000, false, &v, err));
    s->max_restarts = (int)v;
    v = s->rejoin_timeout_s;
    DT_TRY(get_int(f, "rejoin_timeout_s", "$.fault_tolerance", 1, 7 * 86400, false, &v, err));
    s->rejoin_timeout_s = (int)v;
    v = s->hang_timeout_s;
    DT_TRY(get_int(f, "hang_timeout_s", "$.fault_tolerance", 1, 86400, false, &v, err));
    s->hang_timeout_s = (int)v;
    v = 0;
    /* The cluster's size is checked at submit, where it is known. */
    DT_TRY(get_int(f, "min_workers", "$.fault_tolerance", 1, 100000, true, &v, err));
    s->min_workers = (int)v;
    return DT_OK;
}

static dt_status parse_root(const cJSON *root, const dt_jobspec_roots *roots, dt_jobspec *s,
                            dt_err *err)
{
    if (!cJSON_IsObject(root))
        return dt_err_set(err, DT_EINVAL, "$: a job spec must be a JSON object, got %s",
                          type_name(root));
    static const char *const keys[] = {
        "name",        "model",       "initial_weights", "compile",
        "data",        "fit",         "strategy",        "checkpoint",
        "tensorboard", "description", "fault_tolerance", NULL};
    DT_TRY(check_keys(root, "$", keys, err));
    DT_TRY(parse_name(root, s, err));
    DT_TRY(parse_model(root, roots, s, err));
    const char *iw;
    DT_TRY(get_string(root, "initial_weights", "$", &iw, err));
    if (iw)
        DT_TRY(dt_jobspec_resolve_read(roots->data_root, iw, "$.initial_weights",
                                       &s->initial_weights, err));
    DT_TRY(parse_compile(root, s, err));
    const cJSON *d;
    DT_TRY(get_object(root, "data", true, &d, err));
    if (!(s->data = cJSON_Duplicate(d, true)))
        return dt_err_set(err, DT_ENOMEM, "$.data: out of memory");
    DT_TRY(parse_fit(root, s, err));
    DT_TRY(parse_strategy(root, s, err));
    DT_TRY(parse_outputs(root, roots, s, err));
    DT_TRY(parse_fault_tolerance(root, s, err));

    char *canon = cJSON_PrintUnformatted(root);
    if (!canon)
        return dt_err_set(err, DT_ENOMEM, "job spec: out of memory");
    s->hash = dt_fnv1a64(DT_FNV1A64_INIT, canon, strlen(canon));
    free(canon);
    snprintf(s->hash_hex, sizeof s->hash_hex, "%016llx", (unsigned long long)s->hash);
    if ((roots->data_root && !(s->roots.data_root = strdup(roots->data_root))) ||
        (roots->state_dir && !(s->roots.state_dir = strdup(roots->state_dir))))
        return dt_err_set(err, DT_ENOMEM, "job spec: out of memory");
    return DT_OK;
}

dt_status dt_jobspec_parse(const char *json, size_t len, const dt_jobspec_roots *roots,
                           dt_jobspec *out, dt_err *err)
{
    memset(out, 0, sizeof *out);
    static const dt_jobspec_roots none = {0};
    if (!roots)
        roots = &none;
    if (len > DT_MAX_JOBSPEC)
        return dt_err_set(err, DT_ETOOBIG,
                          "job spec: %zu bytes, over the limit of %u (DT_MAX_JOBSPEC); put the "
                          "model in a file and give its path in $.model",
                          len, DT_MAX_JOBSPEC);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        size_t off = end && end >= json ? (size_t)(end - json) : 0;
        return dt_err_set(err, DT_EINVAL,
                          "job spec: not valid JSON (truncated or malformed) near byte %zu of %zu",
                          off, len);
    }
    dt_status st = dt_json_unique_keys(root, "$", err);
    if (st == DT_OK)
        st = parse_root(root, roots, out, err);
    cJSON_Delete(root);
    if (st != DT_OK)
        dt_jobspec_destroy(out);
    return st;
}

dt_status dt_jobspec_parse_file(const char *path, const dt_jobspec_roots *roots, dt_jobspec *out,
                                dt_err *err)
{
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    DT_TRY(dt_file_read_all(path, DT_MAX_JOBSPEC, &text, &len, err));
    dt_status st = dt_jobspec_parse(text, len, roots, out, err);
    free(text);
    if (st != DT_OK)
        dt_err_prefix(err, "%s", path);
    return st;
}

void dt_jobspec_destroy(dt_jobspec *s)
{
    if (!s)
        return;
    free(s->model_json);
    free(s->model_path);
    free(s->initial_weights);
    cJSON_Delete(s->optimizer);
    cJSON_Delete(s->loss_json);
    cJSON_Delete(s->data);
    free(s->checkpoint_dir);
    free(s->class_weight);
    free(s->tensorboard_dir);
    free(s->checkpoint_rel);
    free(s->tensorboard_rel);
    free((char *)s->roots.data_root);
    free((char *)s->roots.state_dir);
    memset(s, 0, sizeof *s);
}

const char *dt_jobspec_comm_name(dt_jobspec_comm c)
{
    switch (c) {
    case DT_JOBSPEC_COMM_RING:
        return "RING";
    case DT_JOBSPEC_COMM_NCCL:
        return "NCCL";
    default:
        return "AUTO";
    }
}

const char *dt_jobspec_compression_name(dt_jobspec_compression c)
{
    switch (c) {
    case DT_JOBSPEC_COMPRESS_FLOAT16:
        return "float16";
    case DT_JOBSPEC_COMPRESS_BFLOAT16:
        return "bfloat16";
    default:
        return "none";
    }
}

const char *dt_jobspec_precision_name(dt_jobspec_precision p)
{
    return p == DT_JOBSPEC_PRECISION_TF32 ? "tf32" : "float32";
}
