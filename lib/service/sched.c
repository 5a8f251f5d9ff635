/*
 * sched.c - the chief's scheduler: the queued job starts on every ring task once the cluster is
 * whole, the ranks report Prepared (GO when all have) and Finished (succeeded when all have,
 * with the same weights), a lost rank or a failure ends the job and stops the others, and held
 * Watch calls are answered when their job has news. Loop thread only.
 */
#include "service/service_internal.h"

#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_DEFAULT_MS   1000
#define WATCH_MAX_MS       5000
#define WATCH_MAX_EVENTS   512
#define RPC_TIMEOUT_MS     5000
#define END_GRACE_MS       10000  /* wait this long for the ranks' Finished after an end */
#define STOP_GRACE_MS      10000  /* restarting: the same, before the job starts again */
#define PREPARE_TIMEOUT_MS 900000 /* preparing longer than this fails the job */

struct jwatch {
    jwatch *next;
    dt_rpc_call *call;
    char id[JOB_ID_LEN];
    uint64_t after;
    int64_t deadline_ms;
};

static void maybe_grow(dt_service *j, job *jb, const jevent *ev);

/* Appends an event to the job's history (kept, logged, numbered) and answers the watchers it
 * wakes. Takes ev->message. */
static void add_event(dt_service *j, job *jb, jevent *ev)
{
    dt__service_events_add(&jb->events, ev);
    if (jb->events.nev)
        dt__service_log_event(j->state_dir, jb,
                              dt__service_events_at(&jb->events, jb->events.nev - 1));
    dt__service_watchers_finish(j, jb->rec.id, false);
}

void dt__service_state_event(dt_service *j, job *jb, const char *message)
{
    jevent ev = {0};
    snprintf(ev.kind, sizeof ev.kind, "state");
    snprintf(ev.state, sizeof ev.state, "%s", dt__service_state_name(jb->rec.state));
    ev.epoch = jb->rec.epoch;
    ev.epochs = jb->rec.epochs;
    ev.step = jb->rec.step;
    ev.steps = jb->rec.steps_per_epoch;
    ev.message = message && *message ? strdup(message) : NULL;
    add_event(j, jb, &ev);
}

void dt__service_progress(dt_service *j, const char *id, jevent *ev)
{
    job *jb = dt__service_queue_find(&j->q, id);
    if (!jb || jb != j->active || dt__service_terminal(jb)) {
        free(ev->message);
        return;
    }
    dt__service_record_progress(&jb->rec, ev);
    bool epoch_end = strcmp(ev->kind, "epoch_end") == 0;
    maybe_grow(j, jb, ev);
    add_event(j, jb, ev);
    /* Progress is saved at epoch ends, at most every 2 s (tiny epochs would make it I/O). */
    int64_t now = dt_now_ms();
    if (epoch_end && now - jb->act->saved_ms >= 2000) {
        jb->act->saved_ms = now;
        dt__service_save_or_warn(j, jb);
    }
}

/* --- ending a job ------------------------------------------------------------------------------
 */

/* "worker:1 at 10.0.0.2:7000": the ring task of job rank `rank` in jb's run. */
static void rank_name(const dt_service *j, const job *jb, uint32_t rank, char *buf, size_t n)
{
    uint32_t task = jb->act && rank < jb->act->world ? jb->act->tasks[rank] : rank;
    dt__service_rank_name(j, (int)task, buf, n);
}

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

void dt__service_cancel_ranks(dt_service *j, job *jb, const char *reason, bool abort)
{
    for (uint32_t r = 0; r < jb->rec.world; r++) {
        if (jb->act->done && jb->act->done[r])
            continue;
        dt_rpc_channel *ch = dt__service_channel(j, (int)jb->act->tasks[r]);
        jcall *c = ch ? dt__service_call_new(j, send_cancel_run, send_cancel_done) : NULL;
        if (!c)
            continue;
        snprintf(c->id, sizeof c->id, "%s", jb->rec.id);
        c->rank = (int)r;
        c->ch = ch;
        c->text = strdup(reason);
        dtrain__v1__cancel_job_request__init(&c->cancel);
        c->cancel.id = c->id;
        c->cancel.reason = c->text;
        c->cancel.session = jb->act->session;
        c->cancel.abort = abort;
        dt__service_call_queue(j, c);
    }
}

void dt__service_end(dt_service *j, job *jb, job_state st, const char *msg)
{
    /* The trainer's last events (the final epoch_end) may still sit in the progress queue when
     * the ranks' ends reach the loop first: record them while the job is still active, or
     * watchers and the history would miss them. */
    if (!dt__service_terminal(jb))
        dt__service_drain_progress(j);
    bool was_active = jb->act && !dt__service_terminal(jb) && jb->rec.state != JOB_QUEUED;
    if (!dt__service_move(jb, st))
        return; /* ended already */
    jb->rec.finished = dt_wall_s();
    if (msg && msg != jb->rec.error && st != JOB_SUCCEEDED) /* callers may pass jb->rec.error */
        snprintf(jb->rec.error, sizeof jb->rec.error, "%s", msg);
    if (st == JOB_SUCCEEDED)
        DT_INFO("jobs", "job %s (%s) succeeded", jb->rec.id, jb->rec.name);
    else
        DT_WARN("jobs", "job %s (%s) %s: %s", jb->rec.id, jb->rec.name, dt__service_state_name(st),
                jb->rec.error);
    dt__service_save_or_warn(j, jb);
    dt__service_state_event(j, jb, jb->rec.error);
    dt__service_events_compact(&jb->events);
    if (was_active) {
        jb->act->release_at_ms = dt_now_ms() + END_GRACE_MS;
        if (st != JOB_SUCCEEDED)
            dt__service_cancel_ranks(j, jb, jb->rec.error, true);
    }
}

/* The active job is over and every rank has said so (or the grace period ran out): the next
 * queued job may start. */
static void maybe_start(dt_service *j);

static void maybe_release(dt_service *j)
{
    job *jb = j->active;
    if (!jb)
        return;
    int64_t now = dt_now_ms();
    if (jb->act->cancel_requested && !dt__service_terminal(jb) &&
        (jb->act->ndone == (int)jb->rec.world || now >= jb->act->cancel_at_ms))
        dt__service_end(j, jb, JOB_CANCELLED, jb->rec.error[0] ? jb->rec.error : "cancelled");
    if (!dt__service_terminal(jb))
        return;
    if (jb->act->ndone < (int)jb->rec.world && now < jb->act->release_at_ms)
        return;
    if (jb->act->ndone < (int)jb->rec.world)
        DT_WARN("jobs", "job %s: %d of %u ranks never reported the end; going on", jb->rec.id,
                (int)jb->rec.world - jb->act->ndone, jb->rec.world);
    dt__service_deactivate(jb);
    j->active = NULL;
    maybe_start(j);
}

/* --- restarts -----------------------------------------------------------------------------------
 */

/* A rank's failure that a restart may cure: a lost peer, a deadline, I/O, a rank told to stop.
 * The others (bad data, a model the spec cannot build, memory) would only fail again. */
static bool restartable(dt_status code)
{
    return code == DT_EPEER || code == DT_ETIMEDOUT || code == DT_EIO || code == DT_ECANCELED;
}

/* Stops every rank of jb's run for a restart: at once (abort) when a task was lost, or after
 * their next step when a task comes back to a shrunk job (grow). */
static void begin_restart(dt_service *j, job *jb, const char *msg, const char *detail, bool abort)
{
    job_active *a = jb->act;
    dt__service_move(jb, JOB_RESTARTING);
    snprintf(jb->rec.error, sizeof jb->rec.error, "%s", msg);
    int64_t now = dt_now_ms();
    a->stop_by_ms = now + STOP_GRACE_MS;
    a->rejoin_by_ms = now + (int64_t)jb->rec.rejoin_timeout_s * 1000;
    a->grow = false;
    char ev[2 * DT_ERR_LEN + 400];
    snprintf(ev, sizeof ev, "%s; %s", msg, detail);
    DT_WARN("jobs", "job %s: %s", jb->rec.id, ev);
    dt__service_save_or_warn(j, jb);
    dt__service_state_event(j, jb, ev);
    dt__service_cancel_ranks(j, jb, msg, abort);
}

/* A task was lost or a rank failed mid-run: the job restarts while restarts are left
 * ($.fault_tolerance.max_restarts), else it fails with msg. */
static void restart_or_fail(dt_service *j, job *jb, const char *msg)
{
    if (dt__service_terminal(jb) || jb->rec.state == JOB_RESTARTING || jb->rec.state == JOB_QUEUED)
        return;
    if (jb->act->cancel_requested) {
        dt__service_end(j, jb, JOB_CANCELLED, msg);
        return;
    }
    if (jb->rec.restarts >= jb->rec.max_restarts) {
        char full[2 * DT_ERR_LEN + 300];
        if (jb->rec.max_restarts == 0)
            snprintf(full, sizeof full,
                     "%s; no restart ($.fault_tolerance.max_restarts is 0): resume the job with "
                     "'dtrain resume' once every task is back",
                     msg);
        else
            snprintf(full, sizeof full,
                     "%s; the job was restarted %u times already ($.fault_tolerance."
                     "max_restarts): fix the fault, then 'dtrain resume' it",
                     msg, jb->rec.restarts);
        dt__service_end(j, jb, JOB_FAILED, full);
        return;
    }
    jb->rec.restarts++;
    char detail[300];
    snprintf(detail, sizeof detail,
             "restart %u of %u: the other tasks stop now, and every task resumes from the latest "
             "checkpoint once all are up (waiting up to %u s for a lost task to rejoin)",
             jb->rec.restarts, jb->rec.max_restarts, jb->rec.rejoin_timeout_s);
    begin_restart(j, jb, msg, detail, true);
}

/* --- starting a job -----------------------------------------------------------------------------
 */

static void start_done(dt_service *j, jcall *c)
{
    job *jb = dt__service_queue_find(&j->q, c->id);
    if (!jb || jb != j->active || dt__service_terminal(jb) || jb->act->session != c->session)
        return;
    if (c->st != DT_OK) {
        char who[300], msg[2 * DT_ERR_LEN];
        rank_name(j, jb, (uint32_t)c->rank, who, sizeof who);
        snprintf(msg, sizeof msg, "could not start the job on %s: %s", who, c->err.msg);
        dt__service_rank_done(jb, (uint32_t)c->rank); /* it never ran: it will not report */
        if (c->st == DT_EPEER || c->st == DT_ETIMEDOUT)
            restart_or_fail(j, jb, msg);
        else
            dt__service_end(j, jb, JOB_FAILED, msg);
        maybe_release(j);
    }
}

static void start_run(jcall *c)
{
    /* A task still stopping its previous run says so (FAILED_PRECONDITION): ask again. */
    for (int attempt = 0; attempt < 15; attempt++) {
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

/* The comm session of a run: the job, the cluster generation and the restart count, so no two
 * runs of a job share one, and every report names its run. */
static uint64_t session_of(const char *id, uint64_t generation, uint32_t restarts)
{
    uint8_t g[12]; /* little-endian generation, then restarts */
    for (int i = 0; i < 8; i++)
        g[i] = (uint8_t)(generation >> (8 * i));
    for (int i = 0; i < 4; i++)
        g[8 + i] = (uint8_t)(restarts >> (8 * i));
    uint64_t h = dt_fnv1a64(dt_fnv1a64(DT_FNV1A64_INIT, id, strlen(id)), g, sizeof g);
    return h ? h : 1;
}

/* Starts jb on world ring tasks (tasks: their cluster ranks in job-rank order; NULL: all). */
static void launch(dt_service *j, job *jb, uint32_t world, const uint32_t *tasks,
                   const char *message)
{
    dt_err err = {0};
    if (dt__service_activate(jb, world, tasks, &err) != DT_OK) {
        dt__service_end(j, jb, JOB_FAILED, err.msg);
        return;
    }
    job_active *a = jb->act;
    a->generation = dt_cluster_generation(j->o.cluster);
    a->session = session_of(jb->rec.id, a->generation, jb->rec.restarts);
    for (uint32_t r = 0; r < world; r++)
        dt_cluster_member_up(j->o.cluster, (int)a->tasks[r], &a->incarnations[r]);
    jb->rec.examples = 0;
    jb->rec.error[0] = '\0';
    dt__service_move(jb, JOB_PREPARING);
    a->prepare_by_ms = dt_now_ms() + PREPARE_TIMEOUT_MS;
    j->active = jb;
    bool all = world == (uint32_t)j->spec->world_size;
    DT_INFO("jobs", "job %s (%s): preparing on %u task%s%s (generation %llu)%s%s", jb->rec.id,
            jb->rec.name, world, world == 1 ? "" : "s", all ? "" : " of the cluster's",
            (unsigned long long)a->generation, message ? ": " : "", message ? message : "");
    dt__service_save_or_warn(j, jb);
    dt__service_state_event(j, jb, message);
    for (uint32_t r = 0; r < world; r++) {
        dt_rpc_channel *ch = dt__service_channel(j, (int)a->tasks[r]);
        jcall *c = ch ? dt__service_call_new(j, start_run, start_done) : NULL;
        if (c && !all && !(c->tasks = malloc(world * sizeof *c->tasks))) {
            free(c);
            c = NULL;
        }
        if (!c) {
            dt__service_end(j, jb, JOB_FAILED, "could not reach every task (out of memory?)");
            return;
        }
        snprintf(c->id, sizeof c->id, "%s", jb->rec.id);
        c->rank = (int)r;
        c->session = a->session;
        c->ch = ch;
        dtrain__v1__start_job_request__init(&c->start);
        c->start.id = c->id;
        c->start.spec_json = jb->rec.spec_json;
        c->start.generation = a->generation;
        c->start.session = a->session;
        c->start.world_size = world;
        c->start.rank = r;
        c->start.resume = jb->resume;
        if (c->tasks) {
            memcpy(c->tasks, a->tasks, world * sizeof *c->tasks);
            c->start.tasks = c->tasks;
            c->start.n_tasks = world;
        }
        dt__service_call_queue(j, c);
    }
}

static void maybe_start(dt_service *j)
{
    if (!j->is_chief || j->closing || j->active)
        return;
    job *jb = dt__service_queue_next(&j->q);
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
            DT_INFO("jobs", "job %s waits for the cluster%s%s", jb->rec.id,
                    missing[0] ? ": missing " : " to form", missing);
            j->last_wait_log_ms = now;
        }
        return;
    }
    launch(j, jb, (uint32_t)world, NULL, NULL);
}

/* Why a queued job has not started, in the words `dtrain status` shows; "" when it is not
 * queued or is about to start. */
static void waiting_reason(const dt_service *j, const job *jb, char *buf, size_t n)
{
    buf[0] = '\0';
    if (jb->rec.state != JOB_QUEUED)
        return;
    if (!j->is_chief)
        return;
    if (j->active) {
        snprintf(buf, n, "behind job %s (%s, %s), which holds the cluster", j->active->rec.id,
                 j->active->rec.name, dt__service_state_name(j->active->rec.state));
        return;
    }
    const job *first = dt__service_queue_next(&j->q);
    if (first && first != jb) {
        snprintf(buf, n, "behind job %s (%s), queued before it", first->rec.id, first->rec.name);
        return;
    }
    bool formed = dt_cluster_formed(j->o.cluster);
    for (int r = 0; r < j->spec->world_size; r++)
        if (!dt_cluster_member_up(j->o.cluster, r, NULL)) {
            char who[300];
            dt__service_rank_name(j, r, who, sizeof who);
            snprintf(buf, n, "waiting for %s to %s", who, formed ? "rejoin" : "join the cluster");
            return;
        }
    if (!formed)
        snprintf(buf, n, "waiting for the cluster to form");
}

void dt__service_job_info(const dt_service *j, const job *jb, info_buf *b)
{
    dt__service_job_pb(&jb->rec, b);
    waiting_reason(j, jb, b->waiting, sizeof b->waiting);
    b->info.waiting = b->waiting;
}

/* Restarting: once every rank has stopped (or STOP_GRACE_MS passed) and every ring task is up,
 * the job starts again from its latest checkpoint. A task that stays away past
 * rejoin_timeout_s fails the job, or, when $.fault_tolerance.min_workers allows, the job goes
 * on without it. */
static void check_restart(dt_service *j, job *jb)
{
    job_active *a = jb->act;
    int64_t now = dt_now_ms();
    for (uint32_t r = 0; r < a->world; r++) { /* a lost task will not report */
        uint64_t inc = 0;
        if (!dt_cluster_member_up(j->o.cluster, (int)a->tasks[r], &inc) ||
            inc != a->incarnations[r])
            dt__service_rank_done(jb, r);
    }
    if (a->cancel_requested)
        return; /* a user cancelled it meanwhile: it ends as cancelled (maybe_release) */
    if (a->ndone < (int)a->world && now < a->stop_by_ms)
        return;
    uint32_t world = (uint32_t)j->spec->world_size, nup = 0;
    uint32_t *up = calloc(world, sizeof *up);
    char missing[600] = "";
    size_t ml = 0;
    int nmissing = 0;
    for (uint32_t t = 0; t < world; t++) {
        if (dt_cluster_member_up(j->o.cluster, (int)t, NULL)) {
            if (up)
                up[nup] = t;
            nup++;
        } else if (ml < sizeof missing - 1) {
            char who[300];
            dt__service_rank_name(j, (int)t, who, sizeof who);
            ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%s%s",
                                   nmissing ? ", " : "", who,
                                   dt_cluster_member_unhealthy(j->o.cluster, (int)t)[0]
                                       ? " (alive, but its trainer is still hung)"
                                       : "");
            nmissing++;
        }
    }
    uint32_t min = jb->rec.min_workers ? jb->rec.min_workers : world;
    char msg[2 * DT_ERR_LEN + 800];
    jb->resume = true;
    if (!up) {
        dt__service_end(j, jb, JOB_FAILED, "out of memory restarting the job");
    } else if (nup == world) {
        if (a->growing)
            snprintf(msg, sizeof msg,
                     "back on all %u tasks: resuming, re-sharded, from the checkpoint of the step "
                     "every rank stopped at",
                     world);
        else
            snprintf(msg, sizeof msg,
                     "restart %u of %u: resuming from the latest checkpoint on %u task%s",
                     jb->rec.restarts, jb->rec.max_restarts, world, world == 1 ? "" : "s");
        dt__service_deactivate(jb);
        launch(j, jb, world, NULL, msg);
    } else if (now < a->rejoin_by_ms) {
        if (now - j->last_wait_log_ms > 10000) {
            DT_INFO("jobs", "job %s: waiting %lld s more for %s to rejoin", jb->rec.id,
                    (long long)((a->rejoin_by_ms - now + 999) / 1000), missing);
            j->last_wait_log_ms = now;
        }
    } else if (nup >= min && up[0] == 0) {
        snprintf(msg, sizeof msg,
                 "%s did not rejoin within %u s: the job goes on on %u of %u tasks "
                 "($.fault_tolerance.min_workers %u), from the latest checkpoint, re-sharded, "
                 "with the same global batch",
                 missing, jb->rec.rejoin_timeout_s, nup, world, min);
        dt__service_deactivate(jb);
        launch(j, jb, nup, up, msg);
    } else {
        char why[DT_ERR_LEN];
        snprintf(why, sizeof why, "%s", jb->rec.error);
        snprintf(msg, sizeof msg,
                 "%s did not rejoin within %u s ($.fault_tolerance.rejoin_timeout_s)%s; the job "
                 "stopped after: %s",
                 missing, jb->rec.rejoin_timeout_s,
                 min < world ? " and too few tasks are left ($.fault_tolerance.min_workers)" : "",
                 why);
        dt__service_end(j, jb, JOB_FAILED, msg);
    }
    free(up);
}

/* A rank's daemon died, hung or restarted while the job held the cluster; a task the job shrank
 * past is back. */
static void check_members(dt_service *j)
{
    job *jb = j->active;
    if (!jb || dt__service_terminal(jb))
        return;
    if (jb->rec.state == JOB_RESTARTING) {
        check_restart(j, jb);
        return;
    }
    job_active *a = jb->act;
    for (uint32_t r = 0; r < a->world; r++) {
        uint64_t inc = 0;
        bool up = dt_cluster_member_up(j->o.cluster, (int)a->tasks[r], &inc);
        if (up && inc == a->incarnations[r])
            continue;
        char who[300], msg[2 * DT_ERR_LEN];
        rank_name(j, jb, r, who, sizeof who);
        const char *sick = dt_cluster_member_unhealthy(j->o.cluster, (int)a->tasks[r]);
        if (sick[0])
            snprintf(msg, sizeof msg, "%s cannot train: %s", who, sick);
        else
            snprintf(msg, sizeof msg, "%s %s during the job", who,
                     up ? "restarted" : "was lost (no heartbeat: dead, hung or cut off)");
        dt__service_rank_done(jb, r); /* it will not report */
        restart_or_fail(j, jb, msg);
        return;
    }
    if (jb->rec.state == JOB_PREPARING && dt_now_ms() > a->prepare_by_ms)
        dt__service_end(j, jb, JOB_FAILED, "the tasks did not finish preparing within 15 minutes");
    if (jb->rec.state == JOB_RUNNING && !a->grow && a->world < (uint32_t)j->spec->world_size) {
        uint32_t nup = 0;
        for (int t = 0; t < j->spec->world_size; t++)
            nup += dt_cluster_member_up(j->o.cluster, t, NULL);
        if (nup > a->world) {
            a->grow = true;
            DT_INFO("jobs",
                    "job %s: %u of %d tasks are up again; the job grows to them at the "
                    "next epoch's end",
                    jb->rec.id, nup, j->spec->world_size);
        }
    }
}

/* A shrunk job at an epoch's end, with the tasks it left back: every rank stops after its next
 * step (a checkpoint written there), and the job goes on on every task. Not a fault: the
 * restart count stays. */
static void maybe_grow(dt_service *j, job *jb, const jevent *ev)
{
    if (!jb->act || !jb->act->grow || jb->rec.state != JOB_RUNNING ||
        strcmp(ev->kind, "epoch_end") != 0 || ev->epoch >= ev->epochs)
        return;
    char msg[200];
    snprintf(msg, sizeof msg, "tasks are back after the job shrank to %u", jb->act->world);
    begin_restart(j, jb, msg,
                  "every rank stops after its next step and the job goes on on every task that "
                  "is up, from that step",
                  false);
    jb->act->growing = true;
}

/* --- runner reports (JobRunner.Prepared / Finished) ------------------------------------------- */

void dt__service_on_prepared(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__PreparedRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__prepared_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    Dtrain__V1__PreparedReply rep = DTRAIN__V1__PREPARED_REPLY__INIT;
    job *jb = dt__service_queue_find(&j->q, req->id);
    char msg[2 * DT_ERR_LEN] = "";
    if (!jb || jb != j->active || req->rank >= jb->rec.world) {
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        snprintf(msg, sizeof msg, "job %s is not the one running on this cluster", req->id);
    } else if (req->session != jb->act->session) {
        /* A trainer of an earlier run (before a restart): it must stop, and it says nothing
         * about this run. */
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        snprintf(msg, sizeof msg, "this report is from an earlier run of job %s", jb->rec.id);
        DT_INFO("jobs", "job %s: rank %u reported for an earlier run; told it to stop", jb->rec.id,
                req->rank);
    } else if (dt__service_terminal(jb) || jb->act->cancel_requested ||
               jb->rec.state == JOB_RESTARTING) {
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        snprintf(msg, sizeof msg, "job %s was %s: %s", jb->rec.id,
                 jb->act->cancel_requested ? "cancelled" : dt__service_state_name(jb->rec.state),
                 jb->rec.error);
    } else if (!req->ok) {
        char who[300];
        rank_name(j, jb, req->rank, who, sizeof who);
        snprintf(msg, sizeof msg, "%s could not prepare the job: %s", who, req->error);
        rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT;
        dt__service_rank_done(jb, req->rank); /* its trainer ends now */
        dt__service_end(j, jb, JOB_FAILED, msg);
    } else {
        if (!jb->act->prepared[req->rank]) {
            jb->act->prepared[req->rank] = 1;
            jb->act->nprepared++;
            jb->rec.examples += req->examples;
            jb->rec.params = req->params;
            if (req->steps_per_epoch)
                jb->rec.steps_per_epoch = req->steps_per_epoch;
            DT_INFO("jobs", "job %s: rank %u prepared (%llu examples, %llu parameters)", jb->rec.id,
                    req->rank, (unsigned long long)req->examples, (unsigned long long)req->params);
        }
        if (jb->act->nprepared == (int)jb->rec.world) {
            if (dt__service_move(jb, JOB_RUNNING)) {
                if (jb->rec.started <= 0)
                    jb->rec.started = dt_wall_s();
                DT_INFO("jobs", "job %s: every task prepared; training", jb->rec.id);
                dt__service_save_or_warn(j, jb);
                dt__service_state_event(j, jb, NULL);
            }
            rep.decision = DTRAIN__V1__PREPARED_REPLY__DECISION__GO;
        }
    }
    rep.message = msg;
    dt_rpc_call_reply(call, &rep.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    maybe_release(j);
}

/* A rank's end with an error, while the job runs. */
static void rank_failed(dt_service *j, job *jb, const Dtrain__V1__FinishedRequest *req)
{
    if (jb->rec.state == JOB_RESTARTING || jb->act->cancel_requested)
        return; /* it stopped as asked */
    char who[300], msg[2 * DT_ERR_LEN];
    rank_name(j, jb, req->rank, who, sizeof who);
    snprintf(msg, sizeof msg, "%s %s: %s", who, req->code == DT_ECANCELED ? "stopped" : "failed",
             req->error);
    if (restartable((dt_status)req->code))
        restart_or_fail(j, jb, msg);
    else
        dt__service_end(j, jb, JOB_FAILED, msg);
}

void dt__service_on_finished(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__FinishedRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__finished_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    job *jb = dt__service_queue_find(&j->q, req->id);
    bool stale = jb && jb == j->active && req->session != jb->act->session;
    if (stale) /* retried by a rank of an earlier run, which may come after a restart */
        DT_INFO("jobs", "job %s: dropped rank %u's end report of an earlier run (%s)", jb->rec.id,
                req->rank, req->code == DT_OK ? "ok" : req->error);
    if (jb && jb == j->active && !stale && dt__service_rank_done(jb, req->rank)) {
        if (req->weights_hash && *req->weights_hash) {
            free(jb->rec.hashes[req->rank]);
            jb->rec.hashes[req->rank] = strdup(req->weights_hash);
        }
        if (req->code != DT_OK && !dt__service_terminal(jb)) {
            rank_failed(j, jb, req);
        } else if (req->code == DT_OK && req->rank == 0 && req->weights_path &&
                   *req->weights_path) {
            free(jb->rec.weights_path);
            jb->rec.weights_path = strdup(req->weights_path);
            snprintf(jb->rec.stopped, sizeof jb->rec.stopped, "%s",
                     req->stopped ? req->stopped : "");
        }
        if (jb->act->ndone == (int)jb->rec.world && jb->rec.state == JOB_RUNNING &&
            !jb->act->cancel_requested) {
            bool same = true;
            for (uint32_t r = 1; r < jb->rec.world; r++)
                if (!jb->rec.hashes[0][0] || strcmp(jb->rec.hashes[r], jb->rec.hashes[0]) != 0)
                    same = false;
            if (!same)
                DT_WARN("jobs", "job %s: the replicas' final weights differ (hashes in status)",
                        jb->rec.id);
            dt__service_end(j, jb, JOB_SUCCEEDED, NULL);
        }
    }
    Dtrain__V1__Ack ack = DTRAIN__V1__ACK__INIT;
    dt_rpc_call_reply(call, &ack.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
    maybe_release(j);
    if (jb && jb == j->active && jb->rec.state == JOB_RESTARTING)
        check_restart(j, jb); /* every rank may have stopped now */
}

/* --- watchers -----------------------------------------------------------------------------------
 */

void dt__service_schedule(dt_service *j)
{
    check_members(j);
    maybe_release(j);
    maybe_start(j);
    dt__service_retain(j);
}

void dt__service_reply_watch(const dt_service *j, dt_rpc_call *call, const job *jb, uint64_t after)
{
    const job_events *e = &jb->events;
    uint64_t first = e->nev ? dt__service_events_at(e, 0)->seq : e->next_seq + 1;
    size_t skip = dt__service_events_after(e, after); /* seqs may have gaps: steps dropped */
    size_t n = e->nev - skip;
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
        dt__service_event_pb(dt__service_events_at(e, skip + i), &evs[i], &ms[i * JOB_MAX_METRICS],
                             &mps[i * JOB_MAX_METRICS]);
        ptrs[i] = &evs[i];
    }
    info_buf b;
    dt__service_job_info(j, jb, &b);
    Dtrain__V1__WatchReply rep = DTRAIN__V1__WATCH_REPLY__INIT;
    rep.n_events = n;
    rep.events = ptrs;
    rep.job = &b.info;
    rep.first_seq = first;
    rep.boot = j->boot;
    dt_rpc_call_reply(call, &rep.base);
    free(evs);
    free(ptrs);
    free(ms);
    free(mps);
}

void dt__service_watch_add(dt_service *j, dt_rpc_call *call, const job *jb, uint64_t after,
                           uint32_t wait_ms)
{
    jwatch *w = calloc(1, sizeof *w);
    if (!w) {
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        return;
    }
    uint32_t wait = wait_ms ? wait_ms : WATCH_DEFAULT_MS;
    if (wait > WATCH_MAX_MS)
        wait = WATCH_MAX_MS;
    w->call = call;
    snprintf(w->id, sizeof w->id, "%s", jb->rec.id);
    w->after = after;
    w->deadline_ms = dt_now_ms() + wait;
    w->next = j->watchers;
    j->watchers = w;
}

void dt__service_watchers_finish(dt_service *j, const char *id, bool all)
{
    int64_t now = dt_now_ms();
    jwatch **pp = &j->watchers;
    while (*pp) {
        jwatch *w = *pp;
        job *jb = dt__service_queue_find(&j->q, w->id);
        bool news = jb && (!id || strcmp(id, w->id) == 0) &&
                    (jb->events.next_seq > w->after || dt__service_terminal(jb));
        if (all || news || now >= w->deadline_ms || !jb) {
            *pp = w->next;
            if (jb && !j->closing)
                dt__service_reply_watch(j, w->call, jb, w->after);
            else
                dt_rpc_call_fail(w->call, jb ? DT_EPEER : DT_ENOENT,
                                 jb ? "dtraind is shutting down" : "the job was removed");
            free(w);
        } else {
            pp = &w->next;
        }
    }
}
