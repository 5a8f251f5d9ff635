/*
 * json.c - jobs and events on the wire (JobInfo, JobEvent) and as JSON. The JSON keys are
 * written here only: `dtrain status --json`, `watch --json`, state.json and events.jsonl all
 * come from dt_service_job_json and dt_service_event_json, and the store reads them back here.
 */
#include "service/service_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the wire ------------------------------------------------------------------------------------
 */

void dt__service_metrics_pb(const jmetric *src, int n, Dtrain__V1__Metric *m,
                            Dtrain__V1__Metric **mp)
{
    for (int i = 0; i < n; i++) {
        dtrain__v1__metric__init(&m[i]);
        m[i].name = (char *)src[i].name;
        m[i].value = src[i].value;
        mp[i] = &m[i];
    }
}

void dt__service_job_pb(const job_record *rec, info_buf *b)
{
    Dtrain__V1__JobInfo *in = &b->info;
    dtrain__v1__job_info__init(in);
    in->id = (char *)rec->id;
    in->name = (char *)rec->name;
    in->state = (char *)dt__service_state_name(rec->state);
    in->epoch = rec->epoch;
    in->epochs = rec->epochs;
    in->step = rec->step;
    in->steps_per_epoch = rec->steps_per_epoch;
    in->global_step = rec->global_step;
    dt__service_metrics_pb(rec->metrics, rec->nmetrics, b->m, b->mp);
    in->n_metrics = (size_t)rec->nmetrics;
    in->metrics = b->mp;
    in->error = (char *)rec->error;
    in->submitted_unix = rec->submitted;
    in->started_unix = rec->started;
    in->finished_unix = rec->finished;
    in->world_size = rec->world;
    in->examples = rec->examples;
    in->params = rec->params;
    in->weights_path = rec->weights_path ? rec->weights_path : (char *)"";
    in->stopped = (char *)rec->stopped;
    in->n_weights_hashes = (size_t)rec->nhashes;
    in->weights_hashes = rec->hashes;
    in->restarts = rec->restarts;
    in->max_restarts = rec->max_restarts;
    in->rejoin_timeout_s = rec->rejoin_timeout_s;
    in->min_workers = rec->min_workers;
    in->verbosity = rec->verbose >= 0 && rec->verbose <= 2 ? (uint32_t)rec->verbose + 1 : 0;
}

void dt__service_event_pb(const jevent *e, Dtrain__V1__JobEvent *o, Dtrain__V1__Metric *m,
                          Dtrain__V1__Metric **mp)
{
    dtrain__v1__job_event__init(o);
    o->seq = e->seq;
    o->kind = (char *)e->kind;
    o->epoch = e->epoch;
    o->epochs = e->epochs;
    o->step = e->step;
    o->steps = e->steps;
    dt__service_metrics_pb(e->metrics, e->nmetrics, m, mp);
    o->n_metrics = (size_t)e->nmetrics;
    o->metrics = mp;
    o->elapsed_s = e->elapsed_s;
    o->state = (char *)e->state;
    o->message = e->message ? e->message : (char *)"";
    o->time_unix = e->time_unix;
}

/* --- JSON
 * ------------------------------------------------------------------------------------------ */

static void add_time(cJSON *o, const char *key, double t)
{
    if (t > 0)
        cJSON_AddNumberToObject(o, key, t);
    else
        cJSON_AddNullToObject(o, key);
}

cJSON *dt_service_job_json(const Dtrain__V1__JobInfo *j)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "id", j->id ? j->id : "");
    cJSON_AddStringToObject(o, "name", j->name ? j->name : "");
    cJSON_AddStringToObject(o, "state", j->state ? j->state : "");
    cJSON_AddNumberToObject(o, "epoch", j->epoch);
    cJSON_AddNumberToObject(o, "epochs", j->epochs);
    cJSON_AddNumberToObject(o, "step", (double)j->step);
    cJSON_AddNumberToObject(o, "steps_per_epoch", (double)j->steps_per_epoch);
    cJSON_AddNumberToObject(o, "global_step", (double)j->global_step);
    cJSON *m = cJSON_AddObjectToObject(o, "metrics");
    for (size_t i = 0; i < j->n_metrics; i++)
        if (strcmp(j->metrics[i]->name, "global_step") != 0)
            cJSON_AddNumberToObject(m, j->metrics[i]->name, j->metrics[i]->value);
    if (j->error && *j->error)
        cJSON_AddStringToObject(o, "error", j->error);
    else
        cJSON_AddNullToObject(o, "error");
    if (j->waiting && *j->waiting)
        cJSON_AddStringToObject(o, "waiting", j->waiting);
    else
        cJSON_AddNullToObject(o, "waiting");
    cJSON_AddNumberToObject(o, "world_size", j->world_size);
    cJSON_AddNumberToObject(o, "examples", (double)j->examples);
    cJSON_AddNumberToObject(o, "params", (double)j->params);
    cJSON_AddNumberToObject(o, "restarts", j->restarts);
    cJSON *ft = cJSON_AddObjectToObject(o, "fault_tolerance");
    cJSON_AddNumberToObject(ft, "max_restarts", j->max_restarts);
    cJSON_AddNumberToObject(ft, "rejoin_timeout_s", j->rejoin_timeout_s);
    if (j->min_workers)
        cJSON_AddNumberToObject(ft, "min_workers", j->min_workers);
    else
        cJSON_AddNullToObject(ft, "min_workers");
    if (j->verbosity >= 1 && j->verbosity <= 3)
        cJSON_AddNumberToObject(o, "verbose", j->verbosity - 1);
    else
        cJSON_AddStringToObject(o, "verbose", "auto");
    add_time(o, "submitted_unix", j->submitted_unix);
    add_time(o, "started_unix", j->started_unix);
    add_time(o, "finished_unix", j->finished_unix);
    cJSON_AddStringToObject(o, "weights_path", j->weights_path ? j->weights_path : "");
    if (j->stopped && *j->stopped)
        cJSON_AddStringToObject(o, "stopped", j->stopped);
    else
        cJSON_AddNullToObject(o, "stopped");
    cJSON *h = cJSON_AddArrayToObject(o, "weights_hashes");
    for (size_t i = 0; i < j->n_weights_hashes; i++)
        cJSON_AddItemToArray(h, cJSON_CreateString(j->weights_hashes[i]));
    return o;
}

cJSON *dt_service_event_json(const char *job_id, const Dtrain__V1__JobEvent *e)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "job", job_id ? job_id : "");
    cJSON_AddNumberToObject(o, "seq", (double)e->seq);
    cJSON_AddStringToObject(o, "kind", e->kind ? e->kind : "");
    cJSON_AddNumberToObject(o, "epoch", e->epoch);
    cJSON_AddNumberToObject(o, "epochs", e->epochs);
    cJSON_AddNumberToObject(o, "step", (double)e->step);
    cJSON_AddNumberToObject(o, "steps", (double)e->steps);
    if (e->kind && strcmp(e->kind, "state") == 0) {
        cJSON_AddStringToObject(o, "state", e->state ? e->state : "");
        if (e->message && *e->message)
            cJSON_AddStringToObject(o, "message", e->message);
    } else {
        cJSON *m = cJSON_AddObjectToObject(o, "metrics");
        for (size_t i = 0; i < e->n_metrics; i++)
            cJSON_AddNumberToObject(m, e->metrics[i]->name, e->metrics[i]->value);
        cJSON_AddNumberToObject(o, "elapsed_s", e->elapsed_s);
    }
    cJSON_AddNumberToObject(o, "time_unix", e->time_unix);
    return o;
}

/* --- back from JSON
 * ---------------------------------------------------------------------------------- */

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

static int metrics_from(const cJSON *o, jmetric *m)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "metrics"))
    {
        if (n >= JOB_MAX_METRICS || !cJSON_IsNumber(e) || !e->string)
            continue;
        snprintf(m[n].name, sizeof m[n].name, "%s", e->string);
        m[n++].value = e->valuedouble;
    }
    return n;
}

void dt__service_record_from_json(const cJSON *o, job_record *rec)
{
    str(o, "name", rec->name, sizeof rec->name);
    rec->epoch = (uint32_t)num(o, "epoch");
    rec->epochs = (uint32_t)num(o, "epochs");
    rec->step = (uint64_t)num(o, "step");
    rec->steps_per_epoch = (uint64_t)num(o, "steps_per_epoch");
    rec->global_step = (uint64_t)num(o, "global_step");
    rec->nmetrics = metrics_from(o, rec->metrics);
    str(o, "error", rec->error, sizeof rec->error);
    str(o, "stopped", rec->stopped, sizeof rec->stopped);
    rec->submitted = num(o, "submitted_unix");
    rec->started = num(o, "started_unix");
    rec->finished = num(o, "finished_unix");
    rec->world = (uint32_t)num(o, "world_size");
    rec->examples = (uint64_t)num(o, "examples");
    rec->params = (uint64_t)num(o, "params");
    const char *w = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "weights_path"));
    free(rec->weights_path);
    rec->weights_path = w && *w ? strdup(w) : NULL;
    rec->restarts = (uint32_t)num(o, "restarts");
    /* Jobs stored before $.fault_tolerance existed get its defaults. */
    const cJSON *ft = cJSON_GetObjectItemCaseSensitive(o, "fault_tolerance");
    bool has = cJSON_IsObject(ft);
    rec->max_restarts = has ? (uint32_t)num(ft, "max_restarts") : 3;
    rec->rejoin_timeout_s = has ? (uint32_t)num(ft, "rejoin_timeout_s") : 300;
    rec->min_workers = has ? (uint32_t)num(ft, "min_workers") : 0;
    if (!rec->rejoin_timeout_s)
        rec->rejoin_timeout_s = 300;
    const cJSON *vb = cJSON_GetObjectItemCaseSensitive(o, "verbose");
    rec->verbose = cJSON_IsNumber(vb) && vb->valueint >= 0 && vb->valueint <= 2 ? vb->valueint : -1;
}

void dt__service_event_from_json(const cJSON *o, jevent *ev)
{
    ev->seq = (uint64_t)num(o, "seq");
    str(o, "kind", ev->kind, sizeof ev->kind);
    ev->epoch = (uint32_t)num(o, "epoch");
    ev->epochs = (uint32_t)num(o, "epochs");
    ev->step = (uint64_t)num(o, "step");
    ev->steps = (uint64_t)num(o, "steps");
    ev->nmetrics = metrics_from(o, ev->metrics);
    ev->elapsed_s = num(o, "elapsed_s");
    str(o, "state", ev->state, sizeof ev->state);
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "message"));
    ev->message = msg && *msg ? strdup(msg) : NULL;
    ev->time_unix = num(o, "time_unix");
}
