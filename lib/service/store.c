/*
 * store.c - the chief's jobs on disk: <state-dir>/jobs/ID/spec.json (as submitted), state.json
 * (what `dtrain status --json` shows, from json.c), both written atomically, and events.jsonl
 * (the events `watch --json` prints, steps left out). Loaded at start-up.
 */
#include "service/service_internal.h"

#include "core/buf.h"
#include "core/limits.h"
#include "core/log.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dt_status dt__service_mkdirs(const char *state_dir, const char *id, char *dir, size_t n,
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

dt_status dt__service_save(const char *state_dir, const job *jb, bool with_spec, dt_err *err)
{
    const job_record *rec = &jb->rec;
    char dir[4096], path[4200];
    DT_TRY(dt__service_mkdirs(state_dir, rec->id, dir, sizeof dir, err));
    if (with_spec) {
        snprintf(path, sizeof path, "%s/spec.json", dir);
        DT_TRY(dt_file_write_atomic(path, rec->spec_json, rec->spec_len, err));
    }
    info_buf b;
    dt__service_job_pb(rec, &b);
    cJSON *o = dt_service_job_json(&b.info);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text)
        return dt_err_set(err, DT_ENOMEM, "job %s: out of memory", rec->id);
    snprintf(path, sizeof path, "%s/state.json", dir);
    dt_status st = dt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

void dt__service_log_event(const char *state_dir, const job *jb, const jevent *ev)
{
    if (strcmp(ev->kind, "step") == 0) /* many per second; the epoch ends carry the history */
        return;
    Dtrain__V1__JobEvent pb;
    Dtrain__V1__Metric m[JOB_MAX_METRICS], *mp[JOB_MAX_METRICS];
    dt__service_event_pb(ev, &pb, m, mp);
    cJSON *o = dt_service_event_json(jb->rec.id, &pb);
    char *line = o ? cJSON_PrintUnformatted(o) : NULL, path[4500];
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/jobs/%s/events.jsonl", state_dir, jb->rec.id);
    dt_err err = {0};
    if (!line)
        dt_err_set(&err, DT_ENOMEM, "%s: out of memory", path);
    if (!line ||
        dt_file_append_line(path, line, &err) != DT_OK) /* a convenience: the job goes on */
        DT_WARN("jobs", "job %s: %s", jb->rec.id, err.msg);
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
        DT_WARN("jobs", "job %s: no event history: %s", jb->rec.id, err.msg);
        return;
    }
    for (char *line = text, *nl; *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n')))
            break; /* a line cut short by a crash */
        *nl = '\0';
        cJSON *o = cJSON_Parse(line);
        jevent ev = {0};
        if (o)
            dt__service_event_from_json(o, &ev);
        cJSON_Delete(o);
        if (!o || ev.seq <= jb->events.next_seq) {
            free(ev.message);
            break;
        }
        jb->events.next_seq = ev.seq - 1; /* keep its number: steps were never logged */
        dt__service_events_add(&jb->events, &ev);
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
    if (!o || !dt__service_state_parse(
                  cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "state")), &state)) {
        DT_WARN("jobs", "skipping %s: not a job state file (bad JSON or state)", path);
        cJSON_Delete(o);
        return NULL;
    }
    job *jb = dt__service_job_new();
    job_record *rec = jb ? &jb->rec : NULL;
    snprintf(path, sizeof path, "%s/spec.json", dir);
    if (!jb || dt_file_read_all(path, DT_MAX_JOBSPEC, &rec->spec_json, &rec->spec_len, &err)) {
        DT_WARN("jobs", "skipping %s: %s", dir, jb ? err.msg : "out of memory");
        dt__service_job_free(jb);
        cJSON_Delete(o);
        return NULL;
    }
    snprintf(rec->id, sizeof rec->id, "%.*s", (int)sizeof rec->id - 1, id);
    dt__service_record_from_json(o, rec);
    rec->state = state;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "weights_hashes");
    int nh = cJSON_GetArraySize(h);
    if (nh > 0 && nh <= DT_MAX_CLUSTER_TASKS &&
        (rec->hashes = calloc((size_t)nh, sizeof(char *)))) {
        for (int i = 0; i < nh; i++) {
            const char *s = cJSON_GetStringValue(cJSON_GetArrayItem(h, i));
            if (!(rec->hashes[i] = strdup(s ? s : "")))
                break;
            rec->nhashes++;
        }
    }
    cJSON_Delete(o);
    load_events(dir, jb);
    return jb;
}

static int cmp_ids(const void *a, const void *b)
{
    const job *x = *(job *const *)a, *y = *(job *const *)b;
    long long u = atoll(x->rec.id), v = atoll(y->rec.id);
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

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 || errno == ENOENT ? 0 : -1;
}

dt_status dt__service_remove(const char *state_dir, const char *id, dt_err *err)
{
    if (!dt__service_id_ok(id)) /* never a path: ids are numbers */
        return dt_err_set(err, DT_EINVAL, "bad job id '%s'", id);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/jobs/%s", state_dir, id);
    /* Depth first, not following links: a link inside goes, never what it points to. */
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return dt_err_set(err, DT_EIO, "%s: %s", dir, strerror(errno));
    return DT_OK;
}
