/*
 * daemon_jobs_store.c - the chief's jobs on disk: <state-dir>/jobs/ID/spec.json (as submitted)
 * and state.json (what `dtrain status` shows), both written atomically. Loaded at start-up.
 */
#include "service/service_internal.h"

#include "core/buf.h"
#include "core/limits.h"
#include "core/log.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dt__service_job_state_name(job_state s)
{
    switch (s) {
    case JOB_QUEUED:
        return "queued";
    case JOB_PREPARING:
        return "preparing";
    case JOB_RUNNING:
        return "running";
    case JOB_SUCCEEDED:
        return "succeeded";
    case JOB_FAILED:
        return "failed";
    case JOB_CANCELLED:
        return "cancelled";
    }
    return "unknown";
}

static int state_from_name(const char *s, job_state *out)
{
    for (int i = JOB_QUEUED; i <= JOB_CANCELLED; i++)
        if (s && strcmp(s, dt__service_job_state_name((job_state)i)) == 0) {
            *out = (job_state)i;
            return 1;
        }
    return 0;
}

bool dt__service_job_terminal(const job *jb)
{
    return jb->state >= JOB_SUCCEEDED;
}

dt_status dt__service_job_mkdirs(const char *state_dir, const char *id, char *dir, size_t n,
                                 dt_err *err)
{
    char jobs[4096];
    snprintf(jobs, sizeof jobs, "%s/jobs", state_dir);
    if (mkdir(state_dir, 0750) != 0 && errno != EEXIST)
        return dt_err_set(err, DT_EIO, "--state-dir %s: %s", state_dir, strerror(errno));
    if (mkdir(jobs, 0750) != 0 && errno != EEXIST)
        return dt_err_set(err, DT_EIO, "%s: %s", jobs, strerror(errno));
    if ((size_t)snprintf(dir, n, "%s/%s", jobs, id) >= n)
        return dt_err_set(err, DT_EINVAL, "%s/%s: path too long", jobs, id);
    if (mkdir(dir, 0750) != 0 && errno != EEXIST)
        return dt_err_set(err, DT_EIO, "%s: %s", dir, strerror(errno));
    return DT_OK;
}

dt_status dt__service_job_save(const char *state_dir, const job *jb, bool with_spec, dt_err *err)
{
    char dir[4096], path[4200];
    DT_TRY(dt__service_job_mkdirs(state_dir, jb->id, dir, sizeof dir, err));
    if (with_spec) {
        snprintf(path, sizeof path, "%s/spec.json", dir);
        DT_TRY(dt_file_write_atomic(path, jb->spec_json, jb->spec_len, err));
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", jb->id);
    cJSON_AddStringToObject(o, "name", jb->name);
    cJSON_AddStringToObject(o, "state", dt__service_job_state_name(jb->state));
    cJSON_AddNumberToObject(o, "epoch", jb->epoch);
    cJSON_AddNumberToObject(o, "epochs", jb->epochs);
    cJSON_AddNumberToObject(o, "step", (double)jb->step);
    cJSON_AddNumberToObject(o, "steps_per_epoch", (double)jb->steps_per_epoch);
    cJSON_AddNumberToObject(o, "global_step", (double)jb->global_step);
    cJSON *m = cJSON_AddObjectToObject(o, "metrics");
    for (int i = 0; i < jb->nmetrics; i++)
        cJSON_AddNumberToObject(m, jb->metrics[i].name, jb->metrics[i].value);
    cJSON_AddStringToObject(o, "error", jb->error);
    cJSON_AddNumberToObject(o, "submitted_unix", jb->submitted);
    cJSON_AddNumberToObject(o, "started_unix", jb->started);
    cJSON_AddNumberToObject(o, "finished_unix", jb->finished);
    cJSON_AddNumberToObject(o, "world_size", jb->world);
    cJSON_AddNumberToObject(o, "examples", (double)jb->examples);
    cJSON_AddNumberToObject(o, "params", (double)jb->params);
    cJSON_AddStringToObject(o, "weights_path", jb->weights_path);
    cJSON_AddNumberToObject(o, "restarts", jb->restarts);
    cJSON *h = cJSON_AddArrayToObject(o, "weights_hashes");
    for (int i = 0; i < jb->nhashes; i++)
        cJSON_AddItemToArray(h, cJSON_CreateString(jb->hashes[i] ? jb->hashes[i] : ""));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return dt_err_set(err, DT_ENOMEM, "job %s: out of memory", jb->id);
    snprintf(path, sizeof path, "%s/state.json", dir);
    dt_status st = dt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void str(const cJSON *o, const char *k, char *out, size_t n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    snprintf(out, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

void dt__service_job_log_event(const char *state_dir, const job *jb, const jevent *ev)
{
    if (strcmp(ev->kind, "step") == 0) /* many per second; the epoch ends carry the history */
        return;
    cJSON *o = cJSON_CreateObject(), *m = cJSON_AddObjectToObject(o, "metrics");
    cJSON_AddNumberToObject(o, "seq", (double)ev->seq);
    cJSON_AddStringToObject(o, "kind", ev->kind);
    cJSON_AddNumberToObject(o, "epoch", ev->epoch);
    cJSON_AddNumberToObject(o, "epochs", ev->epochs);
    cJSON_AddNumberToObject(o, "step", (double)ev->step);
    cJSON_AddNumberToObject(o, "steps", (double)ev->steps);
    for (int i = 0; i < ev->nmetrics; i++)
        cJSON_AddNumberToObject(m, ev->metrics[i].name, ev->metrics[i].value);
    cJSON_AddNumberToObject(o, "elapsed_s", ev->elapsed_s);
    cJSON_AddStringToObject(o, "state", ev->state);
    cJSON_AddStringToObject(o, "message", ev->message ? ev->message : "");
    cJSON_AddNumberToObject(o, "time_unix", ev->time_unix);
    char *line = cJSON_PrintUnformatted(o), path[4500];
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/jobs/%s/events.jsonl", state_dir, jb->id);
    dt_err err = {0};
    if (!line)
        dt_err_set(&err, DT_ENOMEM, "%s: out of memory", path);
    if (!line ||
        dt_file_append_line(path, line, &err) != DT_OK) /* a convenience: the job goes on */
        DT_WARN("jobs", "job %s: %s", jb->id, err.msg);
    free(line);
}

/* Reads DIR/events.jsonl back into the job's event ring: `watch` after a restart shows the
 * states and epochs of before. A line that does not parse ends the history there. */
static void load_events(const char *dir, job *jb)
{
    char path[4500], *text = NULL;
    size_t len = 0;
    dt_err err = {0};
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    if (access(path, F_OK) != 0)
        return;
    if (dt_file_read_all(path, 16u << 20, &text, &len, &err) != DT_OK) {
        DT_WARN("jobs", "job %s: no event history: %s", jb->id, err.msg);
        return;
    }
    if (!(jb->ev = calloc(JOB_MAX_EVENTS, sizeof *jb->ev))) {
        free(text);
        return;
    }
    for (char *line = text, *nl; *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            break; /* a line cut short by a crash */
        *nl = '\0';
        cJSON *o = cJSON_Parse(line);
        if (!o || num(o, "seq") <= (double)jb->next_seq) {
            cJSON_Delete(o);
            break;
        }
        if (jb->nev == JOB_MAX_EVENTS) {
            free(jb->ev[jb->ev0].message);
            jb->ev0 = (jb->ev0 + 1) % JOB_MAX_EVENTS;
            jb->nev--;
        }
        jevent *ev = &jb->ev[(jb->ev0 + jb->nev++) % JOB_MAX_EVENTS];
        ev->seq = jb->next_seq = (uint64_t)num(o, "seq");
        str(o, "kind", ev->kind, sizeof ev->kind);
        ev->epoch = (uint32_t)num(o, "epoch");
        ev->epochs = (uint32_t)num(o, "epochs");
        ev->step = (uint64_t)num(o, "step");
        ev->steps = (uint64_t)num(o, "steps");
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(o, "metrics"))
        {
            if (ev->nmetrics < JOB_MAX_METRICS && cJSON_IsNumber(m) && m->string) {
                snprintf(ev->metrics[ev->nmetrics].name, sizeof ev->metrics[0].name, "%s",
                         m->string);
                ev->metrics[ev->nmetrics++].value = m->valuedouble;
            }
        }
        ev->elapsed_s = num(o, "elapsed_s");
        str(o, "state", ev->state, sizeof ev->state);
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(o, "message"));
        ev->message = msg && *msg ? strdup(msg) : NULL;
        ev->time_unix = num(o, "time_unix");
        cJSON_Delete(o);
    }
    free(text);
}

/* Reads one job directory; NULL (logged) when it is not a job. */
static job *load_one(const char *dir, const char *id)
{
    char path[4500], *text = NULL;
    size_t len = 0;
    dt_err err = {0};
    snprintf(path, sizeof path, "%s/state.json", dir);
    if (dt_file_read_all(path, 1u << 20, &text, &len, &err) != DT_OK) {
        DT_WARN("jobs", "skipping %s: %s", dir, err.msg);
        return NULL;
    }
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    job_state state;
    if (!o || !state_from_name(cJSON_GetStringValue(cJSON_GetObjectItem(o, "state")), &state)) {
        DT_WARN("jobs", "skipping %s: not a job state file (bad JSON or state)", path);
        cJSON_Delete(o);
        return NULL;
    }
    job *jb = calloc(1, sizeof *jb);
    snprintf(path, sizeof path, "%s/spec.json", dir);
    if (!jb || dt_file_read_all(path, DT_MAX_JOBSPEC, &jb->spec_json, &jb->spec_len, &err)) {
        DT_WARN("jobs", "skipping %s: %s", dir, jb ? err.msg : "out of memory");
        free(jb);
        cJSON_Delete(o);
        return NULL;
    }
    snprintf(jb->id, sizeof jb->id, "%.*s", (int)sizeof jb->id - 1, id);
    str(o, "name", jb->name, sizeof jb->name);
    jb->state = state;
    jb->epoch = (uint32_t)num(o, "epoch");
    jb->epochs = (uint32_t)num(o, "epochs");
    jb->step = (uint64_t)num(o, "step");
    jb->steps_per_epoch = (uint64_t)num(o, "steps_per_epoch");
    jb->global_step = (uint64_t)num(o, "global_step");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "metrics"), *e;
    cJSON_ArrayForEach(e, m)
    {
        if (jb->nmetrics >= JOB_MAX_METRICS || !cJSON_IsNumber(e) || !e->string)
            continue;
        snprintf(jb->metrics[jb->nmetrics].name, sizeof jb->metrics[0].name, "%s", e->string);
        jb->metrics[jb->nmetrics++].value = e->valuedouble;
    }
    str(o, "error", jb->error, sizeof jb->error);
    jb->submitted = num(o, "submitted_unix");
    jb->started = num(o, "started_unix");
    jb->finished = num(o, "finished_unix");
    jb->world = (uint32_t)num(o, "world_size");
    jb->examples = (uint64_t)num(o, "examples");
    jb->params = (uint64_t)num(o, "params");
    str(o, "weights_path", jb->weights_path, sizeof jb->weights_path);
    jb->restarts = (uint32_t)num(o, "restarts");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "weights_hashes");
    int nh = cJSON_GetArraySize(h);
    if (nh > 0 && nh <= DT_MAX_CLUSTER_TASKS && (jb->hashes = calloc((size_t)nh, sizeof(char *)))) {
        jb->nhashes = nh;
        for (int i = 0; i < nh; i++) {
            const char *s = cJSON_GetStringValue(cJSON_GetArrayItem(h, i));
            jb->hashes[i] = strdup(s ? s : "");
        }
    }
    cJSON_Delete(o);
    load_events(dir, jb);
    return jb;
}

static int cmp_ids(const void *a, const void *b)
{
    const job *x = *(job *const *)a, *y = *(job *const *)b;
    long long u = atoll(x->id), v = atoll(y->id);
    return u < v ? -1 : u > v;
}

dt_status dt__service_load(const char *state_dir, job ***out, int *n, dt_err *err)
{
    *out = NULL;
    *n = 0;
    char jobs[4096];
    snprintf(jobs, sizeof jobs, "%s/jobs", state_dir);
    DIR *d = opendir(jobs);
    if (!d) {
        if (errno == ENOENT)
            return DT_OK;
        return dt_err_set(err, DT_EIO, "%s: %s", jobs, strerror(errno));
    }
    job **list = NULL;
    int cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* Ids are decimal numbers; anything else in the directory is not ours. */
        if (!e->d_name[0] || strspn(e->d_name, "0123456789") != strlen(e->d_name) ||
            strlen(e->d_name) >= JOB_ID_LEN)
            continue;
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", jobs, e->d_name);
        job *jb = load_one(dir, e->d_name);
        if (!jb)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            job **nl = realloc(list, (size_t)cap * sizeof *nl);
            if (!nl) {
                dt__service_job_free(jb);
                break;
            }
            list = nl;
        }
        list[cnt++] = jb;
    }
    closedir(d);
    if (cnt)
        qsort(list, (size_t)cnt, sizeof *list, cmp_ids);
    *out = list;
    *n = cnt;
    return DT_OK;
}

void dt__service_job_free(job *jb)
{
    if (!jb)
        return;
    free(jb->spec_json);
    for (size_t i = 0; i < jb->nev; i++)
        free(jb->ev[(jb->ev0 + i) % JOB_MAX_EVENTS].message);
    free(jb->ev);
    free(jb->prepared);
    free(jb->done);
    free(jb->incarnations);
    for (int i = 0; i < jb->nhashes; i++)
        free(jb->hashes[i]);
    free(jb->hashes);
    free(jb);
}
