/* callbacks.c - the decisions of Keras 3's EarlyStopping and ReduceLROnPlateau
 * (keras/src/callbacks/early_stopping.py, reduce_lr_on_plateau.py), line for line, as pure
 * functions of a callback's state and an epoch's logs. fit.c calls them on every replica with
 * the all-reduced epoch figures, which are bit-identical on every replica, so every replica
 * takes the same decision at the same epoch without a collective of its own. */
#include "train/train_internal.h"

#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether a larger value of a compiled metric is better (Keras's metric._direction). */
static int metric_direction(dt_metric_kind k)
{
    switch (k) {
    case DT_METRIC_MAE:
    case DT_METRIC_MSE:
    case DT_METRIC_RMSE:
        return -1;
    default:
        return 1;
    }
}

int dt__train_cb_direction(const dt_jobspec *spec, const dt_jobspec_callback *cb)
{
    if (cb->mode == DT_CALLBACK_MODE_MIN)
        return -1;
    if (cb->mode == DT_CALLBACK_MODE_MAX)
        return 1;
    /* ReduceLROnPlateau's "auto": maximise when "acc" is in the name, else minimise. */
    if (cb->kind == DT_CALLBACK_REDUCE_LR_ON_PLATEAU)
        return strstr(cb->monitor, "acc") ? 1 : -1;
    /* EarlyStopping's "auto": the name without "val_"; "loss" is minimised, a metric goes the
     * way its class says; anything else Keras cannot decide (a ValueError there). */
    const char *name = cb->monitor;
    if (!strncmp(name, "val_", 4))
        name += 4;
    if (!strcmp(name, "loss"))
        return -1;
    if (spec->metric_accuracy && !strcmp(name, "accuracy"))
        return 1;
    for (int i = 0; i < spec->nmetrics; i++)
        if (!strcmp(name, spec->metrics[i].name))
            return metric_direction(spec->metrics[i].kind);
    return 0;
}

void dt__train_cb_reset(const dt_jobspec_callback *cb, int dir, dt__train_cb_state *s)
{
    memset(s, 0, sizeof *s);
    s->best_epoch = 0;
    /* every monitoring class starts from +-inf (EarlyStopping sets it with its monitor_op) */
    if (cb->kind != DT_CALLBACK_TERMINATE_ON_NAN && cb->kind != DT_CALLBACK_CSV_LOGGER) {
        s->best = dir > 0 ? -INFINITY : INFINITY;
        s->has_best = true;
    }
    if (cb->kind == DT_CALLBACK_MODEL_CHECKPOINT && cb->has_initial_threshold)
        s->best = cb->initial_threshold;
}

/* EarlyStopping._is_improvement: monitor_op(value - min_delta, reference), where min_delta
 * carries the sign of the direction (negated for "less"). */
static bool es_improves(const dt_jobspec_callback *cb, int dir, double value, double ref)
{
    double d = dir > 0 ? cb->min_delta : -cb->min_delta;
    return dir > 0 ? value - d > ref : value - d < ref;
}

bool dt__train_es_epoch_end(const dt_jobspec_callback *cb, int dir, dt__train_cb_state *s,
                            int epoch, bool has, double current, bool *take_best)
{
    *take_best = false;
    /* no value this epoch (validation did not run) or still warming up */
    if (!has || epoch < cb->start_from_epoch)
        return false;
    if (cb->restore_best_weights && !s->has_weights) {
        /* never set: the current weights are the best so far */
        *take_best = true;
        s->has_weights = true;
        s->best_epoch = epoch;
    }
    s->wait++;
    if (!s->has_best || es_improves(cb, dir, current, s->best)) {
        s->best = current;
        s->has_best = true;
        s->best_epoch = epoch;
        if (cb->restore_best_weights) {
            *take_best = true;
            s->has_weights = true;
        }
        /* the wait restarts only when the value beats the baseline as well as the best */
        if (!cb->has_baseline || es_improves(cb, dir, current, cb->baseline))
            s->wait = 0;
        return false;
    }
    if (s->wait >= cb->patience && epoch > 0) {
        s->stopped_epoch = epoch;
        return true;
    }
    return false;
}

bool dt__train_rlrop_epoch_end(const dt_jobspec_callback *cb, int dir, dt__train_cb_state *s,
                               bool has, double current, double lr, double *new_lr)
{
    if (!has)
        return false;
    if (s->cooldown_counter > 0) {
        s->cooldown_counter--;
        s->wait = 0;
    }
    bool better = dir > 0 ? current > s->best + cb->min_delta : current < s->best - cb->min_delta;
    if (better) {
        s->best = current;
        s->wait = 0;
        return false;
    }
    if (s->cooldown_counter > 0)
        return false;
    if (++s->wait < cb->patience)
        return false;
    /* the optimizer's rate is a float32 variable: Keras compares it with float32(min_lr) */
    if (!(lr > (double)(float)cb->min_lr))
        return false;
    *new_lr = fmax(lr * cb->factor, cb->min_lr);
    s->cooldown_counter = cb->cooldown;
    s->wait = 0;
    return true;
}

bool dt__train_cb_lookup(const dt_jobspec *spec, const char *monitor, const dt_train_epoch_info *e,
                         double *out)
{
    bool val = !strncmp(monitor, "val_", 4);
    const char *name = val ? monitor + 4 : monitor;
    if (val && !e->has_val)
        return false;
    if (!strcmp(name, "loss")) {
        *out = val ? e->val_loss : e->loss;
        return true;
    }
    if (spec->metric_accuracy && !strcmp(name, "accuracy")) {
        *out = val ? e->val_accuracy : e->accuracy;
        return true;
    }
    const dt_train_metric *m = val ? e->val_metrics : e->metrics;
    for (int i = 0; i < e->nmetrics; i++)
        if (!strcmp(spec->metrics[i].name, name)) {
            *out = m[i].value;
            return true;
        }
    return false;
}

dt_status dt__train_lr_schedule(const dt_jobspec_callback *cb, int i, dt_optim_schedule *out,
                                dt_err *err)
{
    cJSON *j = cJSON_Parse(cb->lr_schedule);
    dt_status st =
        j ? dt_optim_schedule_from_json(j, out, err) : dt_err_set(err, DT_EINVAL, "not JSON");
    cJSON_Delete(j);
    if (st == DT_OK && out->kind == DT_OPTIM_SCHEDULE_NONE)
        st = dt_err_set(err, DT_EINVAL, "not a LearningRateSchedule");
    if (st != DT_OK)
        dt_err_prefix(err, "$.fit.callbacks[%d].config.schedule", i);
    return st;
}

dt_status dt__train_callbacks_check(const dt_jobspec *spec, bool has_validation,
                                    const dt_optim_cfg *cfg, dt_err *err)
{
    for (int i = 0; i < spec->ncallbacks; i++) {
        const dt_jobspec_callback *cb = &spec->callbacks[i];
        if (cb->kind == DT_CALLBACK_LR_SCHEDULER) {
            if (cfg && cfg->lr.kind != DT_OPTIM_SCHEDULE_NONE)
                return dt_err_set(err, DT_EINVAL,
                                  "$.fit.callbacks[%d]: LearningRateScheduler sets the learning "
                                  "rate, but $.compile.optimizer's learning_rate is a schedule "
                                  "(Keras refuses to set it too); give a constant learning_rate",
                                  i);
            dt_optim_schedule s;
            if (cb->lr_schedule[0])
                DT_TRY(dt__train_lr_schedule(cb, i, &s, err));
            continue;
        }
        if (cb->kind == DT_CALLBACK_MODEL_CHECKPOINT) {
            /* every field of the filepath must be one this job logs */
            dt_train_metric none[DT_JOBSPEC_MAX_METRICS];
            memset(none, 0, sizeof none);
            dt_train_epoch_info e = {
                .has_val = true, .nmetrics = spec->nmetrics, .metrics = none, .val_metrics = none};
            dt__train_log logs[DT__TRAIN_MAX_LOGS];
            int n = dt__train_epoch_logs(spec, &e, 0.0, logs);
            char name[512];
            dt_status st = dt__train_cb_filename(cb->file, 1, logs, n, name, sizeof name, err);
            if (st != DT_OK) {
                dt_err_prefix(err, "$.fit.callbacks[%d].config.filepath", i);
                return st;
            }
        }
        /* the monitor matters to ModelCheckpoint only with save_best_only */
        if (cb->kind == DT_CALLBACK_TERMINATE_ON_NAN || cb->kind == DT_CALLBACK_CSV_LOGGER ||
            (cb->kind == DT_CALLBACK_MODEL_CHECKPOINT && !cb->save_best_only))
            continue;
        const char *cls = dt_jobspec_callback_name(cb->kind);
        /* The monitor must name a log this job writes: Keras only warns at every epoch and
         * the callback then never acts, which a user learns after the job. */
        bool val = !strncmp(cb->monitor, "val_", 4);
        const char *name = val ? cb->monitor + 4 : cb->monitor;
        bool known = !strcmp(name, "loss") || (spec->metric_accuracy && !strcmp(name, "accuracy"));
        for (int k = 0; k < spec->nmetrics; k++)
            known = known || !strcmp(name, spec->metrics[k].name);
        if (!known)
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.callbacks[%d].config.monitor: \"%s\" is not among this job's "
                              "logs (loss%s and the compiled metrics, each also with val_)",
                              i, cb->monitor, spec->metric_accuracy ? ", accuracy" : "");
        if (val && !has_validation)
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.callbacks[%d].config.monitor: \"%s\" needs validation data; "
                              "add $.data.validation or monitor \"%s\"",
                              i, cb->monitor, name);
        if (dt__train_cb_direction(spec, cb) == 0)
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.callbacks[%d].config.mode: %s cannot tell whether \"%s\" "
                              "should grow or shrink; give \"min\" or \"max\"",
                              i, cls, cb->monitor);
        if (cb->kind == DT_CALLBACK_REDUCE_LR_ON_PLATEAU && cfg &&
            cfg->lr.kind != DT_OPTIM_SCHEDULE_NONE)
            return dt_err_set(err, DT_EINVAL,
                              "$.fit.callbacks[%d]: ReduceLROnPlateau sets the learning rate, "
                              "but $.compile.optimizer's learning_rate is a schedule (Keras "
                              "refuses to set it too); give a constant learning_rate",
                              i);
    }
    return DT_OK;
}

/* ------------------------------------------------------------------ checkpoint state -- */

/* One callback's state as text for a checkpoint's metadata: doubles in C99's hex form, so a
 * resumed job compares with the very same best value. */
void dt__train_cb_format(const dt__train_cb_state *s, int n, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < n && at < cap; i++) {
        int w = snprintf(out + at, cap - at, "%s%d %a %d %d %d %d %d", i ? ";" : "", s[i].wait,
                         s[i].best, s[i].has_best, s[i].best_epoch, s[i].stopped_epoch,
                         s[i].cooldown_counter, s[i].has_weights);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

bool dt__train_cb_parse(const char *text, dt__train_cb_state *s, int n)
{
    const char *p = text;
    for (int i = 0; i < n; i++) {
        char *end;
        long v[6];
        double best;
        v[0] = strtol(p, &end, 10);
        if (end == p)
            return false;
        p = end;
        best = strtod(p, &end);
        if (end == p)
            return false;
        p = end;
        for (int k = 1; k < 6; k++) {
            v[k] = strtol(p, &end, 10);
            if (end == p)
                return false;
            p = end;
        }
        s[i] = (dt__train_cb_state){.wait = (int)v[0],
                                    .best = best,
                                    .has_best = v[1] != 0,
                                    .best_epoch = (int)v[2],
                                    .stopped_epoch = (int)v[3],
                                    .cooldown_counter = (int)v[4],
                                    .has_weights = v[5] != 0};
        if (*p == ';')
            p++;
    }
    return true;
}

/* ------------------------------------------------------------- best weights on disk -- */

/* Swaps the model's params + state with buf (np + ns floats). */
static dt_status swap_weights(dt_model *m, float *buf, dt_err *err)
{
    size_t np, ns;
    dt_model_params(m, &np);
    dt_model_state(m, &ns);
    float *mine = malloc((np + ns + 1) * sizeof *mine);
    if (!mine)
        return dt_err_set(err, DT_ENOMEM, "train: out of memory");
    dt_model_download_all(m, mine);
    dt_model_upload_all(m, buf);
    memcpy(buf, mine, (np + ns) * sizeof *mine);
    free(mine);
    return DT_OK;
}

static void best_path(char *out, size_t cap, const char *dir, int i, int64_t gs)
{
    snprintf(out, cap, "%s/best%d-%" PRId64 ".safetensors", dir, i, gs);
}

dt_status dt__train_cb_save_best(dt_model *m, float *best, const char *dir, int i, int64_t gs,
                                 const char *spec_hash, dt_err *err)
{
    char path[4200];
    best_path(path, sizeof path, dir, i, gs);
    const char *meta[] = {"format", "dtrain-weights-1", "spec_hash", spec_hash, NULL, NULL};
    /* the model holds the best weights while they are written, then its own again */
    DT_TRY(swap_weights(m, best, err));
    dt_status st = dt_train_save_weights(m, NULL, meta, path, err);
    dt_err e2 = {0};
    dt_status st2 = swap_weights(m, best, &e2);
    if (st == DT_OK && st2 != DT_OK) {
        *err = e2;
        st = st2;
    }
    return st;
}

dt_status dt__train_cb_load_best(dt_model *m, float *best, const char *dir, int i, int64_t gs,
                                 dt_err *err)
{
    char path[4200];
    best_path(path, sizeof path, dir, i, gs);
    /* the model keeps the checkpoint's weights in best meanwhile, and gets them back */
    dt_model_download_all(m, best);
    dt_status st = dt_train_load_weights(m, NULL, path, err);
    if (st != DT_OK)
        dt_err_prefix(err, "$.fit.callbacks[%d] (restore_best_weights)", i);
    dt_err e2 = {0};
    dt_status st2 = swap_weights(m, best, &e2);
    if (st == DT_OK && st2 != DT_OK) {
        *err = e2;
        st = st2;
    }
    return st;
}

void dt__train_cb_prune_best(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        int i, end = 0;
        long long gs;
        if (sscanf(e->d_name, "best%d-%lld.safetensors%n", &i, &gs, &end) != 2 ||
            e->d_name[end] != '\0')
            continue;
        char ck[4200], p[4200];
        snprintf(ck, sizeof ck, "%s/ckpt-%lld.safetensors", dir, gs);
        if (access(ck, F_OK) == 0)
            continue;
        /* its checkpoint was pruned: nothing can resume with these best weights any more */
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            DT_WARN("train", "checkpoints: cannot remove %s: %s", p, strerror(errno));
    }
    closedir(d);
}

/* ---------------------------------------------------------- logs, files, CSVLogger -- */

int dt__train_epoch_logs(const dt_jobspec *spec, const dt_train_epoch_info *e, double lr,
                         dt__train_log *out)
{
    int n = 0;
    for (int val = 0; val < 2; val++) {
        const char *pre = val ? "val_" : "";
        bool has = !val || e->has_val;
        snprintf(out[n].name, sizeof out[n].name, "%sloss", pre);
        out[n].value = val ? e->val_loss : e->loss;
        out[n++].has = has;
        if (spec->metric_accuracy) {
            snprintf(out[n].name, sizeof out[n].name, "%saccuracy", pre);
            out[n].value = val ? e->val_accuracy : e->accuracy;
            out[n++].has = has;
        }
        for (int i = 0; i < spec->nmetrics; i++) {
            snprintf(out[n].name, sizeof out[n].name, "%s%s", pre, spec->metrics[i].name);
            out[n].value =
                has && e->nmetrics > i ? (val ? e->val_metrics : e->metrics)[i].value : 0;
            out[n++].has = has && e->nmetrics > i;
        }
    }
    if (!isnan(lr)) {
        snprintf(out[n].name, sizeof out[n].name, "learning_rate");
        out[n].value = lr;
        out[n++].has = true;
    }
    return n;
}

void dt__train_py_float(double v, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "inf" : "-inf");
        return;
    }
    /* Python's repr: the fewest digits that read back as v ... */
    int p = 1;
    char buf[64];
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    snprintf(buf, sizeof buf, "%.*e", p - 1, v);
    int exp = atoi(strchr(buf, 'e') + 1);
    /* ... in positional form for exponents in [-4, 16), with ".0" on whole numbers */
    if (exp >= -4 && exp < 16) {
        int dec = p - 1 - exp > 0 ? p - 1 - exp : 0;
        snprintf(out, cap, "%.*f%s", dec, v, dec == 0 ? ".0" : "");
    } else {
        snprintf(out, cap, "%s", buf);
    }
}

/* One {name[:spec]} of a ModelCheckpoint filepath, as Python's str.format writes it: spec is
 * [0][width][.precision](d|f|e|g), or none (an int as such, a float as its repr). */
static dt_status format_field(const char *name, const char *spec, int epoch,
                              const dt__train_log *logs, int n, char *out, size_t cap, dt_err *err)
{
    bool is_epoch = !strcmp(name, "epoch");
    const dt__train_log *l = NULL;
    for (int i = 0; !is_epoch && i < n; i++)
        if (!strcmp(logs[i].name, name))
            l = &logs[i];
    if (!is_epoch && !l)
        return dt_err_set(err, DT_EINVAL, "{%s}: not \"epoch\" nor one of this job's logs", name);
    size_t sl = strlen(spec);
    if (sl && (sl > 8 || strspn(spec, "0123456789.") != sl - 1 || !strchr("dfeg", spec[sl - 1]) ||
               (spec[sl - 1] == 'd' && !is_epoch)))
        return dt_err_set(err, DT_EINVAL, "{%s:%s}: give a format like {epoch:02d} or {%s:.4f}",
                          name, spec, is_epoch ? "val_loss" : name);
    char fmt[16];
    if (is_epoch) {
        snprintf(fmt, sizeof fmt, "%%%.*sd", sl ? (int)sl - 1 : 0, spec);
        snprintf(out, cap, fmt, epoch);
    } else if (!l->has) {
        snprintf(out, cap, "NA");
    } else if (!sl) {
        dt__train_py_float(l->value, out, cap);
    } else {
        snprintf(fmt, sizeof fmt, "%%%s", spec);
        snprintf(out, cap, fmt, l->value);
    }
    return DT_OK;
}

dt_status dt__train_cb_filename(const char *pattern, int epoch, const dt__train_log *logs, int n,
                                char *out, size_t cap, dt_err *err)
{
    size_t at = 0;
    out[0] = '\0';
    for (const char *p = pattern; *p;) {
        char piece[128];
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (!end || end - p > 100)
                return dt_err_set(err, DT_EINVAL, "an unclosed { in \"%s\"", pattern);
            char name[104], *spec;
            snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
            spec = strchr(name, ':');
            if (spec)
                *spec++ = '\0';
            DT_TRY(format_field(name, spec ? spec : "", epoch, logs, n, piece, sizeof piece, err));
            p = end + 1;
        } else {
            piece[0] = *p++;
            piece[1] = '\0';
        }
        size_t k = strlen(piece);
        if (at + k >= cap)
            return dt_err_set(err, DT_EINVAL, "\"%s\" makes too long a file name", pattern);
        memcpy(out + at, piece, k + 1);
        at += k;
    }
    if (strchr(out, '/'))
        return dt_err_set(err, DT_EINVAL, "\"%s\" gives a name with a '/'", pattern);
    return DT_OK;
}

/* Keeps the header and the rows of epochs before `epoch` (a resume runs the others again). */
static dt_status csv_cut(const char *path, int64_t epoch, dt_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return DT_OK;
    char *kept = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&kept, &n);
    char line[8192];
    bool first = true;
    while (m && fgets(line, sizeof line, f)) {
        if (first || strtoll(line, NULL, 10) < epoch)
            fputs(line, m);
        first = false;
    }
    fclose(f);
    if (!m)
        return dt_err_set(err, DT_ENOMEM, "CSVLogger: out of memory");
    fclose(m);
    f = fopen(path, "w");
    dt_status st = DT_OK;
    if (!f || fwrite(kept, 1, n, f) != n)
        st = dt_err_set(err, DT_EIO, "CSVLogger: %s: %s", path, strerror(errno));
    if (f)
        fclose(f);
    free(kept);
    return st;
}

dt_status dt__train_csv_open(dt__train_csv *c, const char *path, bool append, char sep,
                             int64_t resumed_epoch, dt_err *err)
{
    memset(c, 0, sizeof *c);
    c->sep = sep;
    if (resumed_epoch >= 0)
        DT_TRY(csv_cut(path, resumed_epoch, err));
    bool keep = append || resumed_epoch >= 0;
    /* Keras writes the header unless it appends to a file that has a first line */
    FILE *r = keep ? fopen(path, "r") : NULL;
    char line[8192];
    if (r && fgets(line, sizeof line, r)) {
        c->header_done = true;
        /* a resume goes on with the columns already there */
        char *save = NULL, delim[2] = {sep, '\0'};
        line[strcspn(line, "\r\n")] = '\0';
        for (char *tok = strtok_r(line, delim, &save); tok && c->nkeys < DT__TRAIN_MAX_LOGS;
             tok = strtok_r(NULL, delim, &save))
            if (strcmp(tok, "epoch") && resumed_epoch >= 0)
                snprintf(c->keys[c->nkeys++], sizeof c->keys[0], "%s", tok);
    }
    if (r)
        fclose(r);
    if (!(c->f = fopen(path, keep ? "a" : "w")))
        return dt_err_set(err, DT_EIO, "CSVLogger: %s: %s", path, strerror(errno));
    return DT_OK;
}

dt_status dt__train_csv_row(dt__train_csv *c, int epoch, const dt__train_log *logs, int n,
                            dt_err *err)
{
    if (!c->f)
        return DT_OK;
    if (!c->nkeys) { /* the first epoch's log names, sorted, as Keras fixes its columns */
        for (int i = 0; i < n && c->nkeys < DT__TRAIN_MAX_LOGS; i++)
            if (logs[i].has)
                snprintf(c->keys[c->nkeys++], sizeof c->keys[0], "%s", logs[i].name);
        qsort(c->keys, (size_t)c->nkeys, sizeof c->keys[0],
              (int (*)(const void *, const void *))strcmp);
    }
    /* Python's csv writes rows ending in \r\n (the excel dialect Keras derives from) */
    if (!c->header_done) {
        fprintf(c->f, "epoch");
        for (int k = 0; k < c->nkeys; k++)
            fprintf(c->f, "%c%s", c->sep, c->keys[k]);
        fprintf(c->f, "\r\n");
        c->header_done = true;
    }
    fprintf(c->f, "%d", epoch);
    for (int k = 0; k < c->nkeys; k++) {
        char v[64] = "NA";
        for (int i = 0; i < n; i++)
            if (logs[i].has && !strcmp(logs[i].name, c->keys[k]))
                dt__train_py_float(logs[i].value, v, sizeof v);
        fprintf(c->f, "%c%s", c->sep, v);
    }
    fprintf(c->f, "\r\n");
    if (fflush(c->f) != 0)
        return dt_err_set(err, DT_EIO, "CSVLogger: %s", strerror(errno));
    return DT_OK;
}

void dt__train_csv_close(dt__train_csv *c)
{
    if (c->f)
        fclose(c->f);
    c->f = NULL;
}
