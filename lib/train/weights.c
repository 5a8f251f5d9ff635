/* weights.c - a dt_model (and its optimizer) to and from safetensors with Keras names, the
 * checkpoint directory (latest, keep N), export, and the replica-identity hash. */
#include "train/train_internal.h"

#include "core/hash.h"
#include "core/log.h"
#include "io/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPT_PREFIX "optimizer/"

dt_status dt_train_save_weights(const dt_model *m, dt_optim *o, const char *const *meta,
                                const char *path, dt_err *err)
{
    dt_st_writer *w = dt_st_writer_new();
    size_t nw = dt_model_weight_count(m);
    float **host = calloc(nw ? nw : 1, sizeof *host), **shost = NULL;
    dt_status st = DT_OK;
    if (!w || !host) {
        st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t i = 0; i < nw; i++) {
        const dt_model_weight *wt = dt_model_weight_at(m, i);
        /* Copied through get_weight so that a device backend works the same way. */
        if (!(host[i] = malloc(wt->size * sizeof(float) + 1))) {
            st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        DT_TRY_GOTO(dt_model_get_weight(m, wt->name, host[i], wt->size, err), st, done);
        DT_TRY_GOTO(dt_st_writer_add(w, wt->name, DT_ST_F32, wt->ndim, wt->shape, host[i], err), st,
                    done);
    }
    size_t nslots = o ? dt_optim_slot_count(o) : 0, np = 0;
    for (size_t i = 0; i < nw; i++) { /* a slot is laid out as the params buffer */
        const dt_model_weight *wt = dt_model_weight_at(m, i);
        if (wt->trainable && wt->offset + wt->size > np)
            np = wt->offset + wt->size;
    }
    if (nslots && !(shost = calloc(nslots, sizeof *shost))) {
        st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (size_t k = 0; k < nslots; k++) {
        const char *slot;
        const float *dev = dt_optim_slot(o, k, &slot);
        /* the writer reads the buffers when it writes: host copies, kept until then */
        float *buf = shost[k] = malloc(np * sizeof(float) + 1);
        if (!buf) {
            st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        dt_model_ops(m)->download(buf, dev, np * sizeof(float));
        for (size_t i = 0; i < nw; i++) {
            const dt_model_weight *wt = dt_model_weight_at(m, i);
            if (!wt->trainable)
                continue;
            char name[DT_NN_NAME_LEN + 192];
            snprintf(name, sizeof name, OPT_PREFIX "%s/%s", wt->name, slot);
            DT_TRY_GOTO(
                dt_st_writer_add(w, name, DT_ST_F32, wt->ndim, wt->shape, buf + wt->offset, err),
                st, done);
        }
    }
    if (o) {
        char it[32];
        snprintf(it, sizeof it, "%" PRId64, dt_optim_iterations(o));
        DT_TRY_GOTO(dt_st_writer_set_metadata(w, "iterations", it, err), st, done);
    }
    DT_TRY_GOTO(dt_st_writer_set_metadata(w, "model", dt_model_name(m), err), st, done);
    for (const char *const *kv = meta; kv && kv[0] && kv[1]; kv += 2)
        DT_TRY_GOTO(dt_st_writer_set_metadata(w, kv[0], kv[1], err), st, done);
    st = dt_st_writer_write(w, path, err);
done:
    for (size_t i = 0; host && i < nw; i++)
        free(host[i]);
    free(host);
    for (size_t k = 0; shost && k < dt_optim_slot_count(o); k++)
        free(shost[k]);
    free(shost);
    dt_st_writer_free(w);
    return st;
}

static dt_status check_shape(const dt_st_tensor *t, const dt_model_weight *wt, const char *path,
                             dt_err *err)
{
    bool same = t->dtype == DT_ST_F32 && t->ndim == wt->ndim;
    for (int d = 0; same && d < wt->ndim; d++)
        same = t->shape[d] == wt->shape[d];
    if (same)
        return DT_OK;
    char a[128] = "", b[128] = "";
    for (int d = 0; d < wt->ndim; d++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, d ? ", " : "", wt->shape[d]);
    for (int d = 0; d < t->ndim; d++)
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s%" PRId64, d ? ", " : "", t->shape[d]);
    return dt_err_set(err, DT_EINVAL,
                      "%s: tensor \"%s\" is %s [%s] but the model's weight is F32 [%s]; the file "
                      "belongs to another model",
                      path, t->name, dt_st_dtype_name(t->dtype), b, a);
}

dt_status dt_train_load_weights(dt_model *m, dt_optim *o, const char *path, dt_err *err)
{
    dt_st_file *f;
    DT_TRY(dt_st_open(path, &f, err));
    dt_status st = DT_OK;
    size_t nw = dt_model_weight_count(m);
    for (size_t i = 0; i < nw; i++) {
        const dt_model_weight *wt = dt_model_weight_at(m, i);
        const dt_st_tensor *t = dt_st_find(f, wt->name);
        if (!t) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s: no tensor \"%s\"; the file does not hold this model's weights",
                            path, wt->name);
            goto done;
        }
        DT_TRY_GOTO(check_shape(t, wt, path, err), st, done);
        DT_TRY_GOTO(dt_model_set_weight(m, wt->name, t->data, wt->size, err), st, done);
    }
    bool has_slots = false;
    for (size_t i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *t = dt_st_at(f, i);
        if (!strncmp(t->name, OPT_PREFIX, strlen(OPT_PREFIX))) {
            has_slots = true;
            continue;
        }
        if (!dt_model_find_weight(m, t->name)) {
            st = dt_err_set(err, DT_EINVAL,
                            "%s: tensor \"%s\" is not a weight of model \"%s\"; the file belongs "
                            "to another model",
                            path, t->name, dt_model_name(m));
            goto done;
        }
    }
    if (!o || !has_slots)
        goto done;
    for (size_t k = 0; k < dt_optim_slot_count(o); k++) {
        const char *slot;
        float *buf = dt_optim_slot(o, k, &slot);
        for (size_t i = 0; i < nw; i++) {
            const dt_model_weight *wt = dt_model_weight_at(m, i);
            if (!wt->trainable)
                continue;
            char name[DT_NN_NAME_LEN + 192];
            snprintf(name, sizeof name, OPT_PREFIX "%s/%s", wt->name, slot);
            const dt_st_tensor *t = dt_st_find(f, name);
            if (!t) {
                st = dt_err_set(err, DT_EINVAL,
                                "%s: no optimizer slot \"%s\"; the checkpoint was written with "
                                "another optimizer",
                                path, name);
                goto done;
            }
            DT_TRY_GOTO(check_shape(t, wt, path, err), st, done);
            dt_model_ops(m)->upload(buf + wt->offset, t->data, wt->size * sizeof(float));
        }
    }
    const char *it = dt_st_metadata(f, "iterations");
    if (it)
        dt_optim_set_iterations(o, strtoll(it, NULL, 10));
done:
    dt_st_free(f);
    return st;
}

/* The global step of "ckpt-<N>.safetensors", or -1. */
static int64_t ckpt_step(const char *name)
{
    unsigned long long n;
    int end = 0;
    if (sscanf(name, "ckpt-%llu.safetensors%n", &n, &end) == 1 && name[end] == '\0')
        return (int64_t)n;
    return -1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Steps of every checkpoint in dir, sorted ascending (malloc'd). */
static dt_status list_ckpts(const char *dir, int64_t **steps, size_t *n, dt_err *err)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return dt_err_set(err, errno == ENOENT ? DT_ENOENT : DT_EIO, "%s: %s", dir,
                          strerror(errno));
    size_t cap = 0;
    dt_status st = DT_OK;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = ckpt_step(e->d_name);
        if (s < 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *p = realloc(*steps, cap * sizeof *p);
            if (!p) {
                st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", dir);
                break;
            }
            *steps = p;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n)
        qsort(*steps, *n, sizeof **steps, cmp_i64);
    return st;
}

dt_status dt_train_latest_checkpoint(const char *dir, char **out, dt_err *err)
{
    *out = NULL;
    int64_t *steps;
    size_t n;
    DT_TRY(list_ckpts(dir, &steps, &n, err));
    dt_status st = DT_OK;
    if (!n) {
        st = dt_err_set(err, DT_ENOENT, "%s: no checkpoint", dir);
    } else {
        size_t len = strlen(dir) + 64;
        if ((*out = malloc(len)))
            snprintf(*out, len, "%s/ckpt-%" PRId64 ".safetensors", dir, steps[n - 1]);
        else
            st = dt_err_set(err, DT_ENOMEM, "out of memory");
    }
    free(steps);
    return st;
}

/* A failure is only logged: a stale file must not stop training. */
void dt__train_prune_checkpoints(const char *dir, int keep)
{
    int64_t *steps;
    size_t n;
    dt_err err = {0};
    if (list_ckpts(dir, &steps, &n, &err) != DT_OK) {
        DT_WARN("train", "checkpoints: %s", err.msg);
        return;
    }
    for (size_t i = 0; i + (size_t)keep < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/ckpt-%" PRId64 ".safetensors", dir, steps[i]);
        if (unlink(p) != 0)
            DT_WARN("train", "checkpoints: cannot remove %s: %s", p, strerror(errno));
    }
    free(steps);
}

dt_status dt_train_export(const char *weights_path, const char *out_path, dt_err *err)
{
    dt_st_file *f;
    DT_TRY(dt_st_open(weights_path, &f, err));
    dt_st_writer *w = dt_st_writer_new();
    dt_status st = DT_OK;
    if (!w) {
        st = dt_err_set(err, DT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < dt_st_count(f); i++) {
        const dt_st_tensor *t = dt_st_at(f, i);
        if (strncmp(t->name, OPT_PREFIX, strlen(OPT_PREFIX)))
            DT_TRY_GOTO(dt_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, err), st,
                        done);
    }
    DT_TRY_GOTO(dt_st_writer_set_metadata(w, "format", "dtrain-weights-1", err), st, done);
    static const char *const keep[] = {"model", "spec_hash", "epoch", "global_step"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        const char *v = dt_st_metadata(f, keep[i]);
        if (v)
            DT_TRY_GOTO(dt_st_writer_set_metadata(w, keep[i], v, err), st, done);
    }
    st = dt_st_writer_write(w, out_path, err);
done:
    dt_st_writer_free(w);
    dt_st_free(f);
    return st;
}

uint64_t dt_train_weights_hash(dt_model *m)
{
    uint64_t h = DT_FNV1A64_INIT;
    size_t np, ns;
    const float *p = dt_model_params(m, &np), *s = dt_model_state(m, &ns);
    if (!dt_model_ops(m)->device_memory) {
        if (p)
            h = dt_fnv1a64(h, p, np * sizeof(float));
        if (s)
            h = dt_fnv1a64(h, s, ns * sizeof(float));
        return h;
    }
    float *host = malloc((np + ns + 1) * sizeof *host);
    if (!host)
        return 0; /* no hash: differs from every real one */
    dt_model_download_all(m, host);
    h = dt_fnv1a64(h, host, np * sizeof(float));
    if (ns)
        h = dt_fnv1a64(h, host + np, ns * sizeof(float));
    free(host);
    return h;
}
