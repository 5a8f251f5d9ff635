/*
 * daemon_jobs.c - the service object and the chief's side: the Jobs methods the CLI calls, the
 * queue, starting a job on every ring task, the Prepared / Finished reports, progress events and
 * held Watch calls. See daemon_jobs.h.
 */
#include "service/service_internal.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/log.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK_MS            250
#define WATCH_DEFAULT_MS   1000
#define WATCH_MAX_MS       5000
#define WATCH_MAX_EVENTS   512
#define RPC_TIMEOUT_MS     5000
#define END_GRACE_MS       10000  /* wait this long for the ranks' Finished after an end */
#define CANCEL_GRACE_MS    10000  /* a cancel not confirmed by then is final anyway */
#define PREPARE_TIMEOUT_MS 900000 /* preparing longer than this fails the job */
#define MAX_RESTARTS       3

struct jwatch {
    jwatch *next;
    dt_rpc_call *call;
    char id[JOB_ID_LEN];
    uint64_t after;
    int64_t deadline_ms;
};

/* A blocking call on the thread pool: an RPC to a rank, or a local job (validate, export...). */
typedef struct jcall jcall;
struct jcall {
    uv_work_t work;
    dt_service *j;
    void (*run)(jcall *c);                 /* pool thread */
    void (*done)(dt_service *j, jcall *c); /* loop thread, unless the service is closing */
    dt_rpc_call *call;                     /* the client call to answer, if any */
    char id[JOB_ID_LEN];
    int rank;
    uint64_t generation;
    dt_status st;
    dt_err err;
    /* inputs */
    char *text;  /* spec or data JSON */
    char *text2; /* weights path, format */
    char *text3;
    dt_rpc_channel *ch;
    Dtrain__V1__StartJobRequest start;
    Dtrain__V1__CancelJobRequest cancel;
    uint32_t batch;
    char format[16];
    /* outputs */
    jt_summary sum;
    jmetric metrics[JOB_MAX_METRICS];
    int nmetrics;
    uint64_t u1, u2, u3;
    char *out;
    size_t out_len;
    /* export */
    bool chunked;
    uint64_t offset, total;
    char *pin; /* the source the client's earlier pieces came from */
};

static void finish_watchers(dt_service *j, const char *id, bool all);
static void maybe_start(dt_service *j);

/* --- small helpers ---------------------------------------------------------------------------- */

const dt_cluster_spec *dt__service_spec(const dt_service *j)
{
    return j->spec;
}
const char *dt__service_token(const dt_service *j)
{
    return j->token;
}
const char *dt__service_data_root(const dt_service *j)
{
    return j->data_root;
}
const char *dt__service_state_dir(const dt_service *j)
{
    return j->state_dir;
}
dt_comm_hub *dt__service_comm_hub(const dt_service *j)
{
    return j->o.comm_hub;
}

int dt__service_rank_name(const dt_service *j, int rank, char *buf, size_t n)
{
    const dt_task *t = dt_tfconfig_by_rank(j->spec, rank);
    if (!t)
        return snprintf(buf, n, "rank %d", rank);
    char name[48];
    dt_task_name(t, name, sizeof name);
    return snprintf(buf, n, "%s at %s", name, t->address);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static job *find_job(dt_service *j, const char *ref)
{
    if (!ref || !*ref)
        return NULL;
    for (job *jb = j->head; jb; jb = jb->next)
        if (strcmp(jb->id, ref) == 0)
            return jb;
    job *last = NULL; /* a name means its latest job */
    for (job *jb = j->head; jb; jb = jb->next)
        if (strcmp(jb->name, ref) == 0)
            last = jb;
    return last;
}

static void save(dt_service *j, job *jb)
{
    dt_err err = {0};
    if (dt__service_job_save(j->state_dir, jb, false, &err) != DT_OK)
        DT_WARN("jobs", "job %s: could not save its state: %s", jb->id, err.msg);
}

static dt_rpc_channel *channel(dt_service *j, int rank)
{
    if (!j->ch[rank]) {
        const dt_task *t = dt_tfconfig_by_rank(j->spec, rank);
        dt_err err = {0};
        if (!t || dt_rpc_channel_new(t->address, j->token, &j->ch[rank], &err) != DT_OK)
            DT_WARN("jobs", "channel to rank %d: %s", rank, err.msg);
    }
    return j->ch[rank];
}

/* --- the thread pool ------------------------------------------------------------------------- */

static void work_cb(uv_work_t *w)
{
    jcall *c = w->data;
    c->run(c);
}

static void jcall_free(jcall *c)
{
    free(c->text);
    free(c->text2);
    free(c->text3);
    free(c->out);
    free(c->pin);
    free(c);
}

static void maybe_free(dt_service *j);

static void after_work_cb(uv_work_t *w, int status)
{
    (void)status;
    jcall *c = w->data;
    dt_service *j = c->j;
    j->inflight--;
    /* Closing: the rpc server, freed right after dt_service_free, has answered c->call already
     * ("daemon is shutting down") and freed it; answering again would start a batch on its
     * shut-down queue. */
    if (!j->closing && c->done)
        c->done(j, c);
    jcall_free(c);
    maybe_free(j);
}

static jcall *jcall_new(dt_service *j, void (*run)(jcall *), void (*done)(dt_service *, jcall *))
{
    jcall *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->j = j;
    c->run = run;
    c->done = done;
    c->work.data = c;
    return c;
}

static void jcall_queue(dt_service *j, jcall *c)
{
    j->inflight++;
    uv_queue_work(j->o.loop, &c->work, work_cb, after_work_cb);
}

/* --- JobInfo and events on the wire --------------------------------------------------------------
 */

/* Storage for one JobInfo's arrays; strings are borrowed from the job. */
typedef struct info_buf {
    Dtrain__V1__JobInfo info;
    Dtrain__V1__Metric m[JOB_MAX_METRICS];
    Dtrain__V1__Metric *mp[JOB_MAX_METRICS];
} info_buf;

static void fill_metrics(const jmetric *src, int n, Dtrain__V1__Metric *m, Dtrain__V1__Metric **mp)
{
    for (int i = 0; i < n; i++) {
        dtrain__v1__metric__init(&m[i]);
        m[i].name = (char *)src[i].name;
        m[i].value = src[i].value;
        mp[i] = &m[i];
    }
}

static void fill_info(const job *jb, info_buf *b)
{
    Dtrain__V1__JobInfo *in = &b->info;
    dtrain__v1__job_info__init(in);
    in->id = (char *)jb->id;
    in->name = (char *)jb->name;
    in->state = (char *)dt__service_job_state_name(jb->state);
    in->epoch = jb->epoch;
    in->epochs = jb->epochs;
    in->step = jb->step;
    in->steps_per_epoch = jb->steps_per_epoch;
    in->global_step = jb->global_step;
    fill_metrics(jb->metrics, jb->nmetrics, b->m, b->mp);
    in->n_metrics = (size_t)jb->nmetrics;
    in->metrics = b->mp;
    in->error = (char *)jb->error;
    in->submitted_unix = jb->submitted;
    in->started_unix = jb->started;
    in->finished_unix = jb->finished;
    in->world_size = jb->world;
    in->examples = jb->examples;
    in->params = jb->params;
    in->weights_path = (char *)jb->weights_path;
    in->n_weights_hashes = (size_t)jb->nhashes;
    in->weights_hashes = jb->hashes;
    in->restarts = jb->restarts;
}

/* Appends an event, numbers it and updates the job's progress fields. Takes ev->message. */
static void add_event(dt_service *j, job *jb, jevent *ev)
{
    if (!jb->ev && !(jb->ev = calloc(JOB_MAX_EVENTS, sizeof *jb->ev))) {
        free(ev->message);
        return;
    }
    if (jb->nev == JOB_MAX_EVENTS) {
        free(jb->ev[jb->ev0].message);
        jb->ev0 = (jb->ev0 + 1) % JOB_MAX_EVENTS;
        jb->nev--;
    }
    ev->seq = ++jb->next_seq;
    if (!ev->time_unix)
        ev->time_unix = dt_wall_s();
    dt__service_job_log_event(j->state_dir, jb, ev);
    jb->ev[(jb->ev0 + jb->nev++) % JOB_MAX_EVENTS] = *ev;
    ev->message = NULL;
}

static void state_event(dt_service *j, job *jb, const char *message)
{
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "state");
    snprintf(ev.state, sizeof ev.state, "%s", dt__service_job_state_name(jb->state));
    ev.epoch = jb->epoch;
    ev.epochs = jb->epochs;
    ev.step = jb->step;
    ev.steps = jb->steps_per_epoch;
    ev.message = dup_or_null(message && *message ? message : NULL);
    add_event(j, jb, &ev);
    finish_watchers(j, jb->id, false);
}

static void merge_metrics(job *jb, const jevent *ev)
{
    for (int i = 0; i < ev->nmetrics; i++) {
        if (strcmp(ev->metrics[i].name, "global_step") == 0) { /* a position, not a metric */
            jb->global_step = (uint64_t)ev->metrics[i].value;
            continue;
        }
        int k = 0;
        while (k < jb->nmetrics && strcmp(jb->metrics[k].name, ev->metrics[i].name) != 0)
            k++;
        if (k == jb->nmetrics) {
            if (jb->nmetrics == JOB_MAX_METRICS)
                continue;
            jb->nmetrics++;
        }
        jb->metrics[k] = ev->metrics[i];
    }
}

void dt__service_chief_event(dt_service *j, const char *id, jevent *ev)
{
    job *jb = find_job(j, id);
    if (!jb || jb != j->active || dt__service_job_terminal(jb)) {
        free(ev->message);
        return;
    }
    if (ev->epoch)
        jb->epoch = ev->epoch;
    if (ev->epochs)
        jb->epochs = ev->epochs;
    if (ev->steps)
        jb->steps_per_epoch = ev->steps;
    if (strcmp(ev->kind, "step") == 0)
        jb->step = ev->step;
    else if (strcmp(ev->kind, "epoch_begin") == 0) {
        jb->step = 0;
    }
    merge_metrics(jb, ev);
    add_event(j, jb, ev);
    /* Progress is saved at epoch ends, at most every 2 s (tiny epochs would make it I/O). */
    int64_t now = dt_now_ms();
    if (strcmp(ev->kind, "epoch_end") == 0 && now - jb->saved_ms >= 2000) {
        jb->saved_ms = now;
        save(j, jb);
    }
    finish_watchers(j, jb->id, false);
}

/* --- ending a job ------------------------------------------------------------------------------
 */

static void send_cancel_done(dt_service *j, jcall *c)
{
    (void)j;
    if (c->st != DT_OK)
        DT_DEBUG("jobs", "cancel of job %s on rank %d: %s", c->id, c->rank, c->err.msg);
}

static void send_cancel_run(jcall *c)
{
    Dtrain__V1__Ack *ack = NULL;
    c->st = dt_rpc_unary(c->ch, DT_RPC_RUN_CANCEL, &c->cancel.base, &dtrain__v1__ack__descriptor,
                         (ProtobufCMessage **)&ack, 2000, &c->err);
    if (ack)
        protobuf_c_message_free_unpacked(&ack->base, NULL);
}

/* Tells every rank that has not reported Finished to stop. */
static void cancel_ranks(dt_service *j, job *jb, const char *reason)
{
    for (uint32_t r = 0; r < jb->world; r++) {
        if (jb->done && jb->done[r])
            continue;
        dt_rpc_channel *ch = channel(j, (int)r);
        jcall *c = ch ? jcall_new(j, send_cancel_run, send_cancel_done) : NULL;
        if (!c)
            continue;
        snprintf(c->id, sizeof c->id, "%s", jb->id);
        c->rank = (int)r;
        c->ch = ch;
        c->text = strdup(reason);
        dtrain__v1__cancel_job_request__init(&c->cancel);
        c->cancel.id = c->id;
        c->cancel.reason = c->text;
        jcall_queue(j, c);
    }
}

/* Moves jb to a terminal state (once), saves it, tells watchers, stops the ranks still going. */
static void end_job(dt_service *j, job *jb, job_state st, const char *msg)
{
    if (dt__service_job_terminal(jb))
        return;
    bool was_active = jb->state == JOB_PREPARING || jb->state == JOB_RUNNING;
    jb->state = st;
    jb->finished = dt_wall_s();
    if (msg && msg != jb->error && st != JOB_SUCCEEDED) /* callers may pass jb->error */
        snprintf(jb->error, sizeof jb->error, "%s", msg);
    if (st == JOB_SUCCEEDED)
        DT_INFO("jobs", "job %s (%s) succeeded", jb->id, jb->name);
    else
        DT_WARN("jobs", "job %s (%s) %s: %s", jb->id, jb->name, dt__service_job_state_name(st),
                jb->error);
    save(j, jb);
    state_event(j, jb, jb->error);
    if (was_active) {
        jb->release_at_ms = dt_now_ms() + END_GRACE_MS;
        if (st != JOB_SUCCEEDED)
            cancel_ranks(j, jb, jb->error);
    }
}

/* The active job is over and every rank has said so (or the grace period ran out): the next
 * queued job may start. */
static void maybe_release(dt_service *j)
{
    job *jb = j->active;
    if (!jb)
        return;
    int64_t now = dt_now_ms();
    if (jb->cancel_requested && !dt__service_job_terminal(jb) &&
        (jb->ndone == (int)jb->world || now >= jb->cancel_at_ms))
        end_job(j, jb, JOB_CANCELLED, jb->error[0] ? jb->error : "cancelled");
    if (!dt__service_job_terminal(jb))
        return;
    if (jb->ndone < (int)jb->world && now < jb->release_at_ms)
        return;
    if (jb->ndone < (int)jb->world)
        DT_WARN("jobs", "job %s: %d of %u ranks never reported the end; going on", jb->id,
                (int)jb->world - jb->ndone, jb->world);
    j->active = NULL;
    maybe_start(j);
}

/* --- starting a job -----------------------------------------------------------------------------
 */

static void start_done(dt_service *j, jcall *c)
{
    job *jb = find_job(j, c->id);
    if (!jb || jb != j->active || dt__service_job_terminal(jb) || jb->generation != c->generation)
        return;
    if (c->st != DT_OK) {
        char who[300], msg[2 * DT_ERR_LEN];
        dt__service_rank_name(j, c->rank, who, sizeof who);
        snprintf(msg, sizeof msg, "could not start the job on %s: %s", who, c->err.msg);
        if (!jb->done[c->rank]) { /* it never ran, so it will not report */
            jb->done[c->rank] = 1;
            jb->ndone++;
        }
        end_job(j, jb, JOB_FAILED, msg);
        maybe_release(j);
    }
}

static void start_run(jcall *c)
{
    /* A task still stopping its previous run says so (FAILED_PRECONDITION): ask again. */
    for (int attempt = 0; attempt < 10; attempt++) {
        Dtrain__V1__Ack *ack = NULL;
        c->st = dt_rpc_unary(c->ch, DT_RPC_RUN_START, &c->start.base, &dtrain__v1__ack__descriptor,
                             (ProtobufCMessage **)&ack, RPC_TIMEOUT_MS, &c->err);
        if (ack)
            protobuf_c_message_free_unpacked(&ack->base, NULL);
        /* Not connected (a busy host can miss gRPC's short handshake window): again soon. */
        bool unsent = c->st == DT_EPEER &&
                      (strstr(c->err.msg, "failed to connect") || strstr(c->err.msg, "handshake"));
        if (c->st != DT_ESTATE && !unsent)
            break;
        dt_sleep_ms(unsent ? 300 : 1000);
    }
}

static uint64_t session_of(const char *id, uint64_t generation)
{
    uint8_t g[8]; /* the generation, least significant byte first */
    for (int i = 0; i < 8; i++)
        g[i] = (uint8_t)(generation >> (8 * i));
    uint64_t h = dt_fnv1a64(dt_fnv1a64(DT_FNV1A64_INIT, id, strlen(id)), g, sizeof g);
    return h ? h : 1;
}

static void maybe_start(dt_service *j)
{
    if (!j->is_chief || j->closing || j->active)
        return;
    job *jb = j->head;
    while (jb && jb->state != JOB_QUEUED)
        jb = jb->next;
    if (!jb)
        return;
    int world = j->spec->world_size;
    bool ready = dt_cluster_formed(j->o.cluster);
    char missing[256] = "";
    for (int r = 0; r < world && ready; r++)
        if (!dt_cluster_member_up(j->o.cluster, r, NULL)) {
            ready = false;
            dt__service_rank_name(j, r, missing, sizeof missing);
        }
    if (!ready) {
        int64_t now = dt_now_ms();
        if (now - j->last_wait_log_ms > 10000) {
            DT_INFO("jobs", "job %s waits for the cluster%s%s", jb->id,
                    missing[0] ? ": missing " : " to form", missing);
            j->last_wait_log_ms = now;
        }
        return;
    }
    jb->world = (uint32_t)world;
    jb->generation = dt_cluster_generation(j->o.cluster);
    jb->session = session_of(jb->id, jb->generation);
    free(jb->prepared);
    free(jb->done);
    free(jb->incarnations);
    jb->prepared = calloc((size_t)world, 1);
    jb->done = calloc((size_t)world, 1);
    jb->incarnations = calloc((size_t)world, sizeof *jb->incarnations);
    for (int i = 0; i < jb->nhashes; i++)
        free(jb->hashes[i]);
    free(jb->hashes);
    jb->hashes = calloc((size_t)world, sizeof(char *));
    jb->nhashes = world;
    /* Empty until the rank reports: protobuf-c cannot pack a NULL string. */
    for (int r = 0; r < world && jb->hashes; r++)
        if (!(jb->hashes[r] = strdup(""))) {
            jb->nhashes = r;
            break;
        }
    if (jb->nhashes != world || !jb->prepared || !jb->done || !jb->incarnations || !jb->hashes) {
        end_job(j, jb, JOB_FAILED, "out of memory starting the job");
        return;
    }
    for (int r = 0; r < world; r++)
        dt_cluster_member_up(j->o.cluster, r, &jb->incarnations[r]);
    jb->nprepared = jb->ndone = 0;
    jb->examples = 0;
    jb->state = JOB_PREPARING;
    jb->prepare_by_ms = dt_now_ms() + PREPARE_TIMEOUT_MS;
    j->active = jb;
    DT_INFO("jobs", "job %s (%s): preparing on %d task%s (generation %llu)", jb->id, jb->name,
            world, world == 1 ? "" : "s", (unsigned long long)jb->generation);
    save(j, jb);
    state_event(j, jb, NULL);
    for (int r = 0; r < world; r++) {
        dt_rpc_channel *ch = channel(j, r);
        jcall *c = ch ? jcall_new(j, start_run, start_done) : NULL;
        if (!c) {
            end_job(j, jb, JOB_FAILED, "could not reach every task (out of memory?)");
            return;
        }
        snprintf(c->id, sizeof c->id, "%s", jb->id);
        c->rank = r;
        c->generation = jb->generation;
        c->ch = ch;
        dtrain__v1__start_job_request__init(&c->start);
        c->start.id = c->id;
        c->start.spec_json = jb->spec_json;
        c->start.generation = jb->generation;
        c->start.session = jb->session;
        c->start.world_size = (uint32_t)world;
        c->start.rank = (uint32_t)r;
        c->start.resume = jb->resume;
        jcall_queue(j, c);
    }
}

/* A rank's daemon died or restarted while the job held the cluster. */
static void check_members(dt_service *j)
{
    job *jb = j->active;
    if (!jb || dt__service_job_terminal(jb))
        return;
    for (uint32_t r = 0; r < jb->world; r++) {
        uint64_t inc = 0;
        bool up = dt_cluster_member_up(j->o.cluster, (int)r, &inc);
        if (up && inc == jb->incarnations[r])
            continue;
        char who[300], msg[2 * DT_ERR_LEN];
        dt__service_rank_name(j, (int)r, who, sizeof who);
        snprintf(msg, sizeof msg,
                 "%s %s during the job; the other tasks were stopped (the daemons stay up: "
                 "resubmit the job once it is back)",
                 who, up ? "restarted" : "died (no heartbeat)");
        jb->done[r] = 1; /* it will not report */
        jb->ndone++;
        end_job(j, jb, jb->cancel_requested ? JOB_CANCELLED : JOB_FAILED, msg);
        return;
    }
    if (jb->state == JOB_PREPARING && dt_now_ms() > jb->prepare_by_ms)
        end_job(j, jb, JOB_FAILED, "the tasks did not finish preparing within 15 minutes");
}

/* --- runner reports (JobRunner.Prepared / Finished) ------------------------------------------- */

static void on_prepared(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__PreparedRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__prepared_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    Dtrain__V1__PreparedReply rep = DTRAIN__V1__PREPARED_REPLY__INIT;
    job *jb = find_job(j, req->id);
    char msg[2 * DT_ERR_LEN] = "";
    if (!jb || jb != j->active || req->rank >= jb->world) {
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        snprintf(msg, sizeof msg, "job %s is not the one running on this cluster", req->id);
    } else if (dt__service_job_terminal(jb) || jb->cancel_requested) {
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        snprintf(msg, sizeof msg, "job %s was %s: %s", jb->id,
                 jb->cancel_requested ? "cancelled" : dt__service_job_state_name(jb->state),
                 jb->error);
    } else if (!req->ok) {
        char who[300];
        dt__service_rank_name(j, (int)req->rank, who, sizeof who);
        snprintf(msg, sizeof msg, "%s could not prepare the job: %s", who, req->error);
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        jb->done[req->rank] = 1; /* its trainer ends now */
        jb->ndone++;
        end_job(j, jb, JOB_FAILED, msg);
    } else {
        if (!jb->prepared[req->rank]) {
            jb->prepared[req->rank] = 1;
            jb->nprepared++;
            jb->examples += req->examples;
            jb->params = req->params;
            if (req->steps_per_epoch)
                jb->steps_per_epoch = req->steps_per_epoch;
            DT_INFO("jobs", "job %s: rank %u prepared (%llu examples, %llu parameters)", jb->id,
                    req->rank, (unsigned long long)req->examples, (unsigned long long)req->params);
        }
        if (jb->nprepared == (int)jb->world) {
            if (jb->state == JOB_PREPARING) {
                jb->state = JOB_RUNNING;
                jb->started = dt_wall_s();
                DT_INFO("jobs", "job %s: every task prepared; training", jb->id);
                save(j, jb);
                state_event(j, jb, NULL);
            }
            rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__GO;
        }
    }
    rep.message = msg;
    dt_rpc_call_reply(call, &rep.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    maybe_release(j);
}

static void on_finished(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__FinishedRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__finished_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    job *jb = find_job(j, req->id);
    if (jb && jb == j->active && req->rank < jb->world && !jb->done[req->rank]) {
        jb->done[req->rank] = 1;
        jb->ndone++;
        if (req->weights_hash && *req->weights_hash) {
            free(jb->hashes[req->rank]);
            jb->hashes[req->rank] = strdup(req->weights_hash);
        }
        char who[300];
        dt__service_rank_name(j, (int)req->rank, who, sizeof who);
        if (req->code != DT_OK && !dt__service_job_terminal(jb)) {
            if (jb->cancel_requested || req->code == DT_ECANCELED) {
                if (!jb->cancel_requested) { /* a rank stopped on its own: still a failure */
                    char msg[2 * DT_ERR_LEN];
                    snprintf(msg, sizeof msg, "%s stopped: %s", who, req->error);
                    end_job(j, jb, JOB_FAILED, msg);
                }
            } else {
                char msg[2 * DT_ERR_LEN];
                snprintf(msg, sizeof msg, "%s failed: %s", who, req->error);
                end_job(j, jb, JOB_FAILED, msg);
            }
        } else if (req->code == DT_OK && req->rank == 0 && req->weights_path) {
            snprintf(jb->weights_path, sizeof jb->weights_path, "%s", req->weights_path);
        }
        if (jb->ndone == (int)jb->world && !dt__service_job_terminal(jb) && !jb->cancel_requested) {
            bool same = true;
            for (uint32_t r = 1; r < jb->world; r++)
                if (!jb->hashes[0][0] || strcmp(jb->hashes[r], jb->hashes[0]) != 0)
                    same = false;
            if (!same)
                DT_WARN("jobs", "job %s: the replicas' final weights differ (hashes in status)",
                        jb->id);
            end_job(j, jb, JOB_SUCCEEDED, NULL);
        }
    }
    Dtrain__V1__Ack ack = DTRAIN__V1__ACK__INIT;
    dt_rpc_call_reply(call, &ack.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    maybe_release(j);
}

/* --- Jobs: submit -------------------------------------------------------------------------------
 */

static void validate_run(jcall *c)
{
    c->st = dt__service_validate(c->text, strlen(c->text), c->j->data_root, c->j->state_dir, NULL,
                                 &c->sum, &c->err);
}

static void reply_job(dt_rpc_call *call, const job *jb)
{
    info_buf b;
    fill_info(jb, &b);
    Dtrain__V1__JobReply rep = DTRAIN__V1__JOB_REPLY__INIT;
    rep.job = &b.info;
    dt_rpc_call_reply(call, &rep.base);
}

static void validate_done(dt_service *j, jcall *c)
{
    if (c->st != DT_OK) {
        DT_INFO("jobs", "refused a job from %s: %s", c->text2 ? c->text2 : "?", c->err.msg);
        /* Whatever validation finds wrong is the spec's fault (bad input), except for what
         * says more: an escape, a missing file, a size, or the daemon's own trouble. */
        dt_status st = c->st;
        if (st != DT_EPERM && st != DT_ENOENT && st != DT_ETOOBIG && st != DT_ENOMEM &&
            st != DT_EIO)
            st = DT_EINVAL;
        dt_rpc_call_fail(c->call, st, c->err.msg);
        return;
    }
    job *jb = calloc(1, sizeof *jb);
    if (!jb) {
        dt_rpc_call_fail(c->call, DT_ENOMEM, "out of memory");
        return;
    }
    snprintf(jb->id, sizeof jb->id, "%llu", (unsigned long long)j->next_id++);
    snprintf(jb->name, sizeof jb->name, "%s", c->sum.name[0] ? c->sum.name : "job");
    jb->spec_json = c->text;
    jb->spec_len = strlen(c->text);
    c->text = NULL;
    jb->epochs = c->sum.epochs;
    jb->params = c->sum.params;
    jb->world = (uint32_t)j->spec->world_size;
    jb->submitted = dt_wall_s();
    dt_err err = {0};
    if (dt__service_job_save(j->state_dir, jb, true, &err) != DT_OK) {
        dt_rpc_call_fail(c->call, DT_EIO, err.msg);
        dt__service_job_free(jb);
        return;
    }
    if (j->tail)
        j->tail->next = jb;
    else
        j->head = jb;
    j->tail = jb;
    DT_INFO("jobs", "job %s (%s) queued", jb->id, jb->name);
    state_event(j, jb, NULL);
    reply_job(c->call, jb);
    maybe_start(j);
}

static void on_submit(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__SubmitRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__submit_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    size_t len = req->spec_json ? strlen(req->spec_json) : 0;
    if (len == 0 || len > DT_MAX_JOBSPEC) {
        dt_rpc_call_fail(call, DT_EINVAL,
                         len ? "the job spec is larger than 4 MiB" : "the job spec is empty");
        protobuf_c_message_free_unpacked(&req->base, NULL);
        return;
    }
    jcall *c = jcall_new(j, validate_run, validate_done);
    if (!c || !(c->text = strdup(req->spec_json))) {
        free(c);
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        protobuf_c_message_free_unpacked(&req->base, NULL);
        return;
    }
    c->text2 = dup_or_null(req->source && *req->source ? req->source : dt_rpc_call_peer(call));
    c->call = call;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    jcall_queue(j, c);
}

/* --- Jobs: list, status, cancel
 * ------------------------------------------------------------------- */

static void on_list(dt_service *j, dt_rpc_call *call)
{
    int n = 0;
    for (job *jb = j->head; jb; jb = jb->next)
        n++;
    info_buf *bufs = calloc((size_t)(n ? n : 1), sizeof *bufs);
    Dtrain__V1__JobInfo **ptrs = calloc((size_t)(n ? n : 1), sizeof *ptrs);
    if (!bufs || !ptrs) {
        free(bufs);
        free(ptrs);
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        return;
    }
    int i = 0;
    for (job *jb = j->head; jb; jb = jb->next, i++) {
        fill_info(jb, &bufs[i]);
        ptrs[i] = &bufs[i].info;
    }
    Dtrain__V1__ListJobsReply rep = DTRAIN__V1__LIST_JOBS_REPLY__INIT;
    rep.n_jobs = (size_t)n;
    rep.jobs = ptrs;
    dt_rpc_call_reply(call, &rep.base);
    free(bufs);
    free(ptrs);
}

/* Unpacks a JobRef and finds the job; answers NOT_FOUND itself. */
static job *ref_job(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__JobRef *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__job_ref__descriptor, (ProtobufCMessage **)&req) !=
        DT_OK)
        return NULL;
    job *jb = find_job(j, req->id);
    if (!jb) {
        char msg[300];
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", req->id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
    return jb;
}

static void on_status(dt_service *j, dt_rpc_call *call)
{
    job *jb = ref_job(j, call);
    if (jb)
        reply_job(call, jb);
}

static void on_cancel(dt_service *j, dt_rpc_call *call)
{
    job *jb = ref_job(j, call);
    if (!jb)
        return;
    if (!dt__service_job_terminal(jb) && !jb->cancel_requested) {
        DT_INFO("jobs", "job %s: cancel requested by %s", jb->id, dt_rpc_call_peer(call));
        jb->cancel_requested = true;
        snprintf(jb->error, sizeof jb->error, "cancelled by a user");
        if (jb->state == JOB_QUEUED) {
            end_job(j, jb, JOB_CANCELLED, jb->error);
        } else {
            jb->cancel_at_ms = dt_now_ms() + CANCEL_GRACE_MS;
            cancel_ranks(j, jb, jb->error);
        }
    }
    reply_job(call, jb);
    maybe_release(j);
}

/* --- Jobs: watch
 * ---------------------------------------------------------------------------------- */

static void reply_watch(dt_service *j, dt_rpc_call *call, job *jb, uint64_t after)
{
    (void)j;
    size_t skip = 0;
    uint64_t first = jb->nev ? jb->ev[jb->ev0].seq : jb->next_seq + 1;
    if (after >= first)
        skip = (size_t)(after - first + 1);
    size_t n = skip < jb->nev ? jb->nev - skip : 0;
    if (n > WATCH_MAX_EVENTS)
        n = WATCH_MAX_EVENTS;
    Dtrain__V1__JobEvent *evs = calloc(n ? n : 1, sizeof *evs);
    Dtrain__V1__JobEvent **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    Dtrain__V1__Metric *ms = calloc((n ? n : 1) * JOB_MAX_METRICS, sizeof *ms);
    Dtrain__V1__Metric **mps = calloc((n ? n : 1) * JOB_MAX_METRICS, sizeof *mps);
    if (!evs || !ptrs || !ms || !mps) {
        free(evs);
        free(ptrs);
        free(ms);
        free(mps);
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        jevent *e = &jb->ev[(jb->ev0 + skip + i) % JOB_MAX_EVENTS];
        Dtrain__V1__JobEvent *o = &evs[i];
        dtrain__v1__job_event__init(o);
        o->seq = e->seq;
        o->kind = e->kind;
        o->epoch = e->epoch;
        o->epochs = e->epochs;
        o->step = e->step;
        o->steps = e->steps;
        fill_metrics(e->metrics, e->nmetrics, &ms[i * JOB_MAX_METRICS], &mps[i * JOB_MAX_METRICS]);
        o->n_metrics = (size_t)e->nmetrics;
        o->metrics = &mps[i * JOB_MAX_METRICS];
        o->elapsed_s = e->elapsed_s;
        o->state = e->state;
        o->message = e->message ? e->message : (char *)"";
        o->time_unix = e->time_unix;
        ptrs[i] = o;
    }
    info_buf b;
    fill_info(jb, &b);
    Dtrain__V1__WatchReply rep = DTRAIN__V1__WATCH_REPLY__INIT;
    rep.n_events = n;
    rep.events = ptrs;
    rep.job = &b.info;
    rep.first_seq = first;
    dt_rpc_call_reply(call, &rep.base);
    free(evs);
    free(ptrs);
    free(ms);
    free(mps);
}

static void on_watch(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__WatchRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__watch_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    job *jb = find_job(j, req->id);
    if (!jb) {
        char msg[300];
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", req->id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
    } else if (jb->next_seq > req->after_seq || dt__service_job_terminal(jb)) {
        reply_watch(j, call, jb, req->after_seq);
    } else {
        jwatch *w = calloc(1, sizeof *w);
        if (!w) {
            dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        } else {
            uint32_t wait = req->wait_ms ? req->wait_ms : WATCH_DEFAULT_MS;
            if (wait > WATCH_MAX_MS)
                wait = WATCH_MAX_MS;
            w->call = call;
            snprintf(w->id, sizeof w->id, "%s", jb->id);
            w->after = req->after_seq;
            w->deadline_ms = dt_now_ms() + wait;
            w->next = j->watchers;
            j->watchers = w;
        }
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Answers the held watches of job id that now have news (or all of them, e.g. when timed out). */
static void finish_watchers(dt_service *j, const char *id, bool all)
{
    int64_t now = dt_now_ms();
    jwatch **pp = &j->watchers;
    while (*pp) {
        jwatch *w = *pp;
        job *jb = find_job(j, w->id);
        bool news = jb && (!id || strcmp(id, w->id) == 0) &&
                    (jb->next_seq > w->after || dt__service_job_terminal(jb));
        if (all || news || now >= w->deadline_ms || !jb) {
            *pp = w->next;
            if (jb && !j->closing)
                reply_watch(j, w->call, jb, w->after);
            else
                dt_rpc_call_fail(w->call, DT_EPEER, "dtraind is shutting down");
            free(w);
        } else {
            pp = &w->next;
        }
    }
}

/* --- Jobs: export, evaluate, predict ------------------------------------------------------------
 */

static dt_status final_weights(dt_service *j, dt_rpc_call *call, const char *id, job **out)
{
    job *jb = find_job(j, id);
    char msg[2 * DT_ERR_LEN];
    if (!jb) {
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
        return DT_ENOENT;
    }
    if (jb->state != JOB_SUCCEEDED || !jb->weights_path[0]) {
        snprintf(msg, sizeof msg, "job %s is %s: it has no final weights%s", jb->id,
                 dt__service_job_state_name(jb->state),
                 dt__service_job_terminal(jb) ? "" : " yet (dtrain watch waits for it)");
        dt_rpc_call_fail(call, DT_ESTATE, msg);
        return DT_ESTATE;
    }
    *out = jb;
    return DT_OK;
}

static void export_run(jcall *c)
{
    c->st = dt__service_export(c->text2, c->text3, c->chunked, c->offset, &c->out, &c->out_len,
                               &c->total, &c->err);
    if (c->st == DT_ENOENT && c->pin)
        dt_err_set(&c->err, DT_ENOENT,
                   "the final weights %s are gone from the chief; see its log, then "
                   "export again",
                   c->text2);
    else if (c->st == DT_ENOENT)
        c->st = DT_EIO;
}

static void export_done(dt_service *j, jcall *c)
{
    (void)j;
    if (c->st != DT_OK) {
        /* NOT_FOUND is kept for a pinned source that vanished: the client starts over. */
        bool keep = c->st == DT_ETOOBIG || c->st == DT_EINVAL || (c->st == DT_ENOENT && c->pin);
        dt_rpc_call_fail(c->call, keep ? c->st : DT_EIO, c->err.msg);
        return;
    }
    Dtrain__V1__ExportReply rep = DTRAIN__V1__EXPORT_REPLY__INIT;
    rep.safetensors.data = (uint8_t *)c->out;
    rep.safetensors.len = c->out_len;
    rep.source_path = c->text2;
    rep.global_step = c->u1;
    rep.spec_json = c->text;
    rep.state = (char *)dt__service_job_state_name((job_state)c->u2);
    if (c->chunked) {
        rep.total_bytes = c->total;
        rep.offset = c->offset;
    }
    dt_rpc_call_reply(c->call, &rep.base);
}

static void export_checkpoint_run(jcall *c)
{
    char *path = NULL;
    c->st = dt__service_export_checkpoint(c->text, c->j->data_root, c->j->state_dir, c->text3,
                                          c->pin, c->chunked, c->offset, &c->out, &c->out_len,
                                          &c->total, &path, &c->u1, &c->err);
    free(c->text2);
    c->text2 = path;
}

static void on_export(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__ExportRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__export_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    bool pinned = req->source_path && *req->source_path;
    job *jb = req->checkpoint ? find_job(j, req->id) : NULL;
    char msg[2 * DT_ERR_LEN];
    if (!req->chunked && (req->offset || pinned)) {
        dt_rpc_call_fail(call, DT_EINVAL, "offset and source_path need chunked = true");
    } else if (req->checkpoint && !jb) {
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", req->id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
    } else if (jb || final_weights(j, call, req->id, &jb) == DT_OK) {
        jcall *c = NULL;
        if (!req->checkpoint && pinned && strcmp(req->source_path, jb->weights_path) != 0) {
            char pmsg[4096 + 2 * DT_ERR_LEN];
            snprintf(pmsg, sizeof pmsg, "source_path %s is not the final weights of job %s (%s)",
                     req->source_path, jb->id, jb->weights_path);
            dt_rpc_call_fail(call, DT_EINVAL, pmsg);
        } else if (!(c = jcall_new(j, req->checkpoint ? export_checkpoint_run : export_run,
                                   export_done))) {
            dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        } else {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/jobs/%s", j->state_dir, jb->id);
            c->call = call;
            c->text = strdup(jb->spec_json);
            c->text2 = strdup(jb->weights_path);
            c->text3 = strdup(dir);
            c->pin = pinned ? strdup(req->source_path) : NULL;
            c->chunked = req->chunked;
            c->offset = req->offset;
            c->u1 = jb->global_step;
            c->u2 = (uint64_t)jb->state;
            jcall_queue(j, c);
        }
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void evaluate_run(jcall *c)
{
    c->st = dt__service_evaluate(c->text3, c->text2, c->text, c->j->data_root, c->j->state_dir,
                                 c->batch, c->metrics, &c->nmetrics, &c->u1, &c->err);
}

static void evaluate_done(dt_service *j, jcall *c)
{
    (void)j;
    if (c->st != DT_OK) {
        dt_rpc_call_fail(c->call, c->st, c->err.msg);
        return;
    }
    Dtrain__V1__Metric m[JOB_MAX_METRICS], *mp[JOB_MAX_METRICS];
    fill_metrics(c->metrics, c->nmetrics, m, mp);
    Dtrain__V1__EvaluateReply rep = DTRAIN__V1__EVALUATE_REPLY__INIT;
    rep.n_metrics = (size_t)c->nmetrics;
    rep.metrics = mp;
    rep.examples = c->u1;
    dt_rpc_call_reply(c->call, &rep.base);
}

static void predict_run(jcall *c)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/jobs/%s", c->j->state_dir, c->id);
    c->st = dt__service_predict(c->text3, c->text2, c->text, c->j->data_root, c->j->state_dir, dir,
                                c->batch, c->format, &c->out, &c->out_len, &c->u1, &c->u2, &c->err);
}

static void predict_done(dt_service *j, jcall *c)
{
    (void)j;
    if (c->st != DT_OK) {
        dt_rpc_call_fail(c->call, c->st, c->err.msg);
        return;
    }
    Dtrain__V1__PredictReply rep = DTRAIN__V1__PREDICT_REPLY__INIT;
    rep.output.data = (uint8_t *)c->out;
    rep.output.len = c->out_len;
    rep.rows = c->u1;
    rep.cols = c->u2;
    dt_rpc_call_reply(c->call, &rep.base);
}

static void on_eval_or_predict(dt_service *j, dt_rpc_call *call, bool predict)
{
    ProtobufCMessage *msg = NULL;
    const ProtobufCMessageDescriptor *d = predict ? &dtrain__v1__predict_request__descriptor
                                                  : &dtrain__v1__evaluate_request__descriptor;
    if (dt_rpc_call_unpack(call, d, &msg) != DT_OK)
        return;
    const char *id, *data;
    uint32_t batch;
    const char *format = "";
    if (predict) {
        Dtrain__V1__PredictRequest *r = (Dtrain__V1__PredictRequest *)msg;
        id = r->id, data = r->data_json, batch = r->batch_size, format = r->format;
    } else {
        Dtrain__V1__EvaluateRequest *r = (Dtrain__V1__EvaluateRequest *)msg;
        id = r->id, data = r->data_json, batch = r->batch_size;
    }
    job *jb = NULL;
    if (!data || !*data || strlen(data) > DT_MAX_JOBSPEC) {
        dt_rpc_call_fail(call, DT_EINVAL, "the data spec is empty or larger than 4 MiB");
    } else if (final_weights(j, call, id, &jb) == DT_OK) {
        jcall *c = jcall_new(j, predict ? predict_run : evaluate_run,
                             predict ? predict_done : evaluate_done);
        if (!c) {
            dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        } else {
            c->call = call;
            c->text = strdup(data);
            c->text2 = strdup(jb->weights_path);
            c->text3 = strdup(jb->spec_json);
            c->batch = batch;
            snprintf(c->id, sizeof c->id, "%s", jb->id);
            snprintf(c->format, sizeof c->format, "%s", format ? format : "");
            jcall_queue(j, c);
        }
    }
    protobuf_c_message_free_unpacked(msg, NULL);
}

/* --- lifetime ------------------------------------------------------------------------------------
 */

static void drain_queue(dt_service *j)
{
    pthread_mutex_lock(&j->qmu);
    jqitem *it = j->qhead;
    j->qhead = j->qtail = NULL;
    pthread_mutex_unlock(&j->qmu);
    while (it) {
        jqitem *next = it->next;
        if (!j->closing && j->is_chief)
            dt__service_chief_event(j, it->id, &it->ev);
        else
            free(it->ev.message);
        free(it);
        it = next;
    }
}

static void on_async(uv_async_t *a)
{
    drain_queue(a->data);
}

void dt__service_run_progress(jrun *r, const jevent *ev)
{
    dt_service *j = r->jobs;
    if (atomic_load(&r->stopping)) /* the loop may be closing the async handle */
        return;
    jqitem *it = calloc(1, sizeof *it);
    if (!it)
        return;
    snprintf(it->id, sizeof it->id, "%s", r->id);
    it->ev = *ev;
    it->ev.message = dup_or_null(ev->message);
    pthread_mutex_lock(&j->qmu);
    if (j->qtail)
        j->qtail->next = it;
    else
        j->qhead = it;
    j->qtail = it;
    pthread_mutex_unlock(&j->qmu);
    uv_async_send(&j->async);
}

static void on_tick(uv_timer_t *t)
{
    dt_service *j = t->data;
    if (j->closing)
        return;
    dt__service_runner_reap(j);
    if (!j->is_chief)
        return;
    finish_watchers(j, NULL, false);
    check_members(j);
    maybe_release(j);
    maybe_start(j);
}

dt_status dt_service_new(const dt_service_opts *opts, dt_service **out, dt_err *err)
{
    dt_service *j = calloc(1, sizeof *j);
    if (!j)
        return dt_err_set(err, DT_ENOMEM, "jobs: out of memory");
    j->o = *opts;
    j->spec = opts->spec;
    j->token = dup_or_null(opts->token);
    j->state_dir = strdup(opts->state_dir ? opts->state_dir : "state");
    j->data_root = strdup(opts->data_root ? opts->data_root : "/");
    j->self_rank = opts->spec->self.rank;
    j->is_chief = j->self_rank == 0;
    j->next_id = 1;
    j->ch = calloc((size_t)opts->spec->world_size, sizeof *j->ch);
    pthread_mutex_init(&j->qmu, NULL);
    if (!j->state_dir || !j->data_root || !j->ch) {
        dt_service_free(j);
        return dt_err_set(err, DT_ENOMEM, "jobs: out of memory");
    }
    if (j->is_chief) {
        job **list = NULL;
        int n = 0;
        dt_status st = dt__service_load(j->state_dir, &list, &n, err);
        if (st != DT_OK) {
            dt_service_free(j);
            return st;
        }
        for (int i = 0; i < n; i++) {
            job *jb = list[i];
            if (jb->state == JOB_PREPARING || jb->state == JOB_RUNNING) {
                /* The chief stopped (or died) under the job: run it again from its latest
                 * checkpoint, a few times at most, so a job that kills its daemon ends. */
                char msg[2 * DT_ERR_LEN];
                bool again = jb->restarts < MAX_RESTARTS;
                snprintf(msg, sizeof msg,
                         "dtraind on the chief restarted while the job was %s (epoch %u, step "
                         "%llu)%s",
                         dt__service_job_state_name(jb->state), jb->epoch,
                         (unsigned long long)jb->step,
                         again ? "; it resumes from its latest checkpoint"
                               : "; it was resumed too often already: resubmit it");
                DT_WARN("jobs", "job %s: %s", jb->id, msg);
                if (again) {
                    jb->state = JOB_QUEUED;
                    jb->restarts++;
                    jb->resume = true;
                } else {
                    jb->state = JOB_FAILED;
                    jb->finished = dt_wall_s();
                    snprintf(jb->error, sizeof jb->error, "%.1000s", msg);
                }
                save(j, jb);
            } else if (jb->state == JOB_QUEUED && jb->started > 0) {
                jb->resume = true; /* queued again by an earlier restart, never restarted since */
            }
            uint64_t idn = strtoull(jb->id, NULL, 10);
            if (idn >= j->next_id)
                j->next_id = idn + 1;
            if (j->tail)
                j->tail->next = jb;
            else
                j->head = jb;
            j->tail = jb;
        }
        free(list);
        if (n)
            DT_INFO("jobs", "%d job%s loaded from %s/jobs", n, n == 1 ? "" : "s", j->state_dir);
    }
    uv_timer_init(opts->loop, &j->tick);
    uv_async_init(opts->loop, &j->async, on_async);
    j->tick.data = j->async.data = j;
    j->handles_open = 2;
    uv_timer_start(&j->tick, on_tick, TICK_MS, TICK_MS);
    *out = j;
    return DT_OK;
}

bool dt_service_handle_call(dt_service *j, dt_rpc_call *call)
{
    const char *m = dt_rpc_call_method(call);
    if (strncmp(m, "/dtrain.v1.Jobs/", 16) != 0 && strncmp(m, "/dtrain.v1.JobRunner/", 21) != 0)
        return false;
    if (j->closing) {
        dt_rpc_call_fail(call, DT_EPEER, "dtraind is shutting down");
        return true;
    }
    if (strcmp(m, DT_RPC_RUN_START) == 0) {
        dt__service_runner_start(j, call);
        return true;
    }
    if (strcmp(m, DT_RPC_RUN_CANCEL) == 0) {
        dt__service_runner_cancel(j, call);
        return true;
    }
    if (!j->is_chief) {
        char msg[400], chief[300];
        dt__service_rank_name(j, 0, chief, sizeof chief);
        snprintf(msg, sizeof msg, "this daemon is not the chief: send job requests to %s", chief);
        dt_rpc_call_fail(call, DT_ESTATE, msg);
        return true;
    }
    static const struct {
        const char *method;
        void (*fn)(dt_service *, dt_rpc_call *);
    } routes[] = {
        {DT_RPC_JOBS_SUBMIT, on_submit},    {DT_RPC_JOBS_LIST, on_list},
        {DT_RPC_JOBS_STATUS, on_status},    {DT_RPC_JOBS_WATCH, on_watch},
        {DT_RPC_JOBS_CANCEL, on_cancel},    {DT_RPC_JOBS_EXPORT, on_export},
        {DT_RPC_RUN_PREPARED, on_prepared}, {DT_RPC_RUN_FINISHED, on_finished},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(m, routes[i].method) == 0) {
            routes[i].fn(j, call);
            return true;
        }
    if (strcmp(m, DT_RPC_JOBS_EVALUATE) == 0 || strcmp(m, DT_RPC_JOBS_PREDICT) == 0) {
        on_eval_or_predict(j, call, strcmp(m, DT_RPC_JOBS_PREDICT) == 0);
        return true;
    }
    char msg[300];
    snprintf(msg, sizeof msg, "%s is not served by this daemon (dtraind %s)", m, DT_VERSION);
    dt_rpc_call_fail(call, DT_ENOTSUP, msg);
    return true;
}

static void really_free(dt_service *j)
{
    job *jb = j->head;
    while (jb) {
        job *next = jb->next;
        dt__service_job_free(jb);
        jb = next;
    }
    if (j->ch)
        for (int r = 0; r < j->spec->world_size; r++)
            dt_rpc_channel_free(j->ch[r]);
    free(j->ch);
    pthread_mutex_destroy(&j->qmu);
    free(j->token);
    free(j->state_dir);
    free(j->data_root);
    free(j);
}

static void maybe_free(dt_service *j)
{
    if (j->closing && j->inflight == 0 && j->handles_open == 0)
        really_free(j);
}

static void on_handle_closed(uv_handle_t *h)
{
    dt_service *j = h->data;
    j->handles_open--;
    maybe_free(j);
}

void dt_service_free(dt_service *j)
{
    if (!j || j->closing)
        return;
    j->closing = true;
    if (j->active && !dt__service_job_terminal(j->active)) {
        /* Left running on disk: the next start of this daemon resumes it from its latest
         * checkpoint. The other tasks stop now. */
        DT_WARN("jobs", "job %s: stopped with the daemon; it resumes when the daemon restarts",
                j->active->id);
        save(j, j->active);
        cancel_ranks(j, j->active, "dtraind on the chief is stopping");
    }
    dt__service_runner_stop(j, 10000);
    finish_watchers(j, NULL, true);
    drain_queue(j);
    if (j->handles_open == 0) { /* dt_service_new failed before the handles existed */
        maybe_free(j);
        return;
    }
    uv_timer_stop(&j->tick);
    uv_close((uv_handle_t *)&j->tick, on_handle_closed);
    uv_close((uv_handle_t *)&j->async, on_handle_closed);
}
