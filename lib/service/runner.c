/*
 * runner.c - this daemon's part of a job: JobRunner.Start spawns the trainer thread (one at a
 * time), JobRunner.Cancel sets its cancel flag and aborts its communicator, and the hooks the
 * trainer reports through: to the chief over gRPC (Prepared, polled until GO; Finished,
 * retried), and rank 0's progress to the service's hook.
 */
#include "service/service_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREPARED_POLL_MS  200
#define PREPARED_WAIT_MS  (15 * 60 * 1000) /* the other tasks may take long to load data */
#define CHIEF_SILENCE_MS  30000            /* the chief unreachable this long: give up */
#define FINISHED_RETRY_MS 60000            /* the chief may be restarting; a newer Start ends it */
#define CANCEL_ABORT_MS   3000 /* a cancelled trainer still running then: abort its ring */
#define HANG_SLOWEST_X    4    /* own work may take this many times its slowest stretch so far */
#define HANG_IO_X         12   /* file I/O (checkpoints on a slow disk) gets this many timeouts */

/* One run of a job on this daemon; the trainer thread reads it through its task. */
struct jrun {
    runner *rn;
    char id[JOB_ID_LEN];
    char *spec_json;
    uint32_t *tasks;    /* the ring tasks of the job's ranks, or NULL: all */
    char job_dir[4096]; /* <state-dir>/jobs/ID */
    trainer_task task;
    pthread_t thread;
    bool thread_started;
    atomic_bool cancel;   /* set by Cancel; the trainer checks it every step */
    atomic_int finished;  /* the trainer thread has returned */
    atomic_bool reported; /* it is reporting Finished: nothing left but to return */
    pthread_mutex_t mu;   /* guards comm (for abort) and cancel_reason */
    dt_comm *comm;        /* the ring while fitting, else NULL */
    dt_comm_hier *hier;   /* several replicas: their comm while fitting, else NULL */
    char cancel_reason[256];
    int64_t cancel_at_ms;
    atomic_bool stopping;  /* the daemon is stopping: no more reports (its loop is joining us) */
    dt_rpc_channel *chief; /* to the chief (its own address on rank 0) */
    dt_train_pulse pulse[DT_JOBSPEC_MAX_DEVICES]; /* fit's heartbeat by replica, for the watchdog */
    _Atomic int64_t hang_ms;
    atomic_int replicas; /* pulses in use (0 until the trainer says: 1) */
    bool hung;           /* the watchdog gave up on it (loop thread) */
};

static void run_free(jrun *r)
{
    if (!r)
        return;
    dt_rpc_channel_free(r->chief);
    pthread_mutex_destroy(&r->mu);
    free(r->spec_json);
    free(r->tasks);
    free(r);
}

/* Sets the cancel flag: fit stops every rank after the same step (the flag travels with the
 * step's metrics). The communicator is aborted only when abort_now, or later from the timer
 * when the trainer has not stopped (a peer stuck in a collective). */
static void cancel_run(jrun *r, const char *reason, bool abort_now)
{
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->cancel)) {
        snprintf(r->cancel_reason, sizeof r->cancel_reason, "%s", reason ? reason : "cancelled");
        r->cancel_at_ms = dt_now_ms();
    }
    atomic_store(&r->cancel, true);
    if (r->hier && abort_now)
        dt_comm_hier_abort(r->hier, r->cancel_reason);
    else if (r->comm && abort_now)
        dt_comm_abort(r->comm, r->cancel_reason);
    pthread_mutex_unlock(&r->mu);
}

static void *trainer_main(void *arg)
{
    jrun *r = arg;
    pthread_setname_np(pthread_self(), "dt-train");
    dt__service_trainer_main(&r->task);
    atomic_store(&r->finished, 1);
    return NULL;
}

static const char *doing_name(int d)
{
    switch (d) {
    case DT_TRAIN_COMM:
        return "returning from a collective that had finished";
    case DT_TRAIN_IO:
        return "file I/O (a checkpoint, the weights or TensorBoard events)";
    default:
        return "its own work (the next batch, forward, backward or the update)";
    }
}

/* The trainer's own work has not beaten for longer than its limit: a stuck device, blocked
 * I/O, a frozen thread. A wait on its peers is not its own work, unless every collective it
 * waits for has finished (then its thread is what does not run). Every replica's pulse counts
 * (several replicas a daemon: one thread each); a replica stuck in its own work is named before
 * a sibling that waits for it. why says so. */
static bool replica_hung(jrun *r, int m, int comm_pass, char *why, size_t n)
{
    dt_train_pulse *p = &r->pulse[m];
    int doing = atomic_load(&p->doing);
    int64_t hang = atomic_load(&r->hang_ms);
    if (doing == DT_TRAIN_IDLE || hang <= 0 || (doing == DT_TRAIN_COMM) != comm_pass)
        return false;
    int64_t now = dt_now_ms();
    int64_t since = now - atomic_load(&p->beat_ms);
    int64_t slow = HANG_SLOWEST_X * atomic_load(&p->slowest_ms);
    int64_t limit = hang > slow ? hang : slow;
    int G = atomic_load(&r->replicas);
    if (doing == DT_TRAIN_COMM) {
        /* several replicas: its in-host collectives and its host ring (its shard's) */
        pthread_mutex_lock(&r->mu);
        int64_t idle = r->hier             ? dt_comm_hier_idle_ms(r->hier, m)
                       : r->comm && m == 0 ? dt_comm_idle_ms(r->comm)
                                           : -1;
        pthread_mutex_unlock(&r->mu);
        if (idle < 0)
            return false;
        if (idle < since)
            since = idle;
    } else if (doing == DT_TRAIN_IO && limit < HANG_IO_X * hang) {
        limit = HANG_IO_X * hang;
    }
    if (since <= limit)
        return false;
    char which[48] = "";
    if (G > 1)
        snprintf(which, sizeof which, " (replica %d of its %d)", m, G);
    snprintf(why, n,
             "the trainer of job %s is hung: no progress for %.1f s in %s%s, after step %lld "
             "(limit %.1f s: $.fault_tolerance.hang_timeout_s, or %dx its slowest step); a stuck "
             "device, blocked I/O or a frozen thread",
             r->id, (double)since / 1000, doing_name(doing), which,
             (long long)atomic_load(&p->step), (double)limit / 1000, HANG_SLOWEST_X);
    return true;
}

static bool run_hung(jrun *r, char *why, size_t n)
{
    int G = atomic_load(&r->replicas);
    if (G < 1)
        G = 1;
    if (G > DT_JOBSPEC_MAX_DEVICES)
        G = DT_JOBSPEC_MAX_DEVICES;
    for (int m = 0; m < G; m++)
        if (replica_hung(r, m, 0, why, n))
            return true;
    /* All of them in collectives: a frozen replica blocks its siblings' next in-host one, and
     * it is the one that stopped beating first. */
    int worst = -1;
    for (int m = 0; m < G; m++)
        if (replica_hung(r, m, 1, why, n) &&
            (worst < 0 ||
             atomic_load(&r->pulse[m].beat_ms) < atomic_load(&r->pulse[worst].beat_ms)))
            worst = m;
    return worst >= 0 && replica_hung(r, worst, 1, why, n);
}

void dt__service_runner_reap(runner *rn)
{
    jrun *r = rn->run;
    if (r && !atomic_load(&r->finished) && atomic_load(&r->cancel) &&
        dt_now_ms() - r->cancel_at_ms > CANCEL_ABORT_MS)
        cancel_run(r, NULL, true);
    char why[sizeof rn->unhealthy];
    if (r && !r->hung && !atomic_load(&r->finished) && run_hung(r, why, sizeof why)) {
        /* Its peers would wait for it until the ring's deadline: abort the ring now, so they
         * stop naming this task, and keep the task out of jobs (the chief sees it unhealthy)
         * until the thread returns. */
        r->hung = true;
        snprintf(rn->unhealthy, sizeof rn->unhealthy, "%s", why);
        DT_ERROR("jobs", "%s", why);
        cancel_run(r, why, true);
    }
    if (!r || !atomic_load(&r->finished))
        return;
    if (r->hung)
        DT_INFO("jobs", "job %s: the hung trainer returned; this task can train again", r->id);
    rn->unhealthy[0] = '\0';
    if (r->thread_started)
        pthread_join(r->thread, NULL);
    rn->run = NULL;
    run_free(r);
}

static dt_status report_prepared(void *ctx, bool ok, const char *error, uint64_t examples,
                                 uint64_t params, uint64_t steps_per_epoch, dt_err *err);
static void report_progress(void *ctx, const jevent *ev);
static void report_comm(void *ctx, dt_comm *c);
static void report_hier(void *ctx, dt_comm_hier *h);
static void report_finished(void *ctx, dt_status st, const char *error, const char *weights_hash,
                            const char *weights_path, const char *stopped);

/* The run of a Start request, with its task and channel to the chief; not started. */
static dt_status run_new(runner *rn, const Dtrain__V1__StartJobRequest *req, jrun **out,
                         dt_err *err)
{
    jrun *r = calloc(1, sizeof *r);
    if (!r || !(r->spec_json = strdup(req->spec_json ? req->spec_json : ""))) {
        free(r);
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&r->mu, NULL);
    r->rn = rn;
    snprintf(r->id, sizeof r->id, "%s", req->id);
    if (req->n_tasks) {
        if (!(r->tasks = malloc(req->n_tasks * sizeof *r->tasks))) {
            run_free(r);
            return dt_err_set(err, DT_ENOMEM, "out of memory");
        }
        memcpy(r->tasks, req->tasks, req->n_tasks * sizeof *r->tasks);
    }
    r->task = (trainer_task){
        .spec_json = r->spec_json,
        .spec_len = strlen(r->spec_json),
        .rank = (int)req->rank,
        .world = (int)req->world_size,
        .resume = req->resume,
        .tasks = r->tasks,
        .job_dir = r->job_dir,
        .data_root = rn->data_root,
        .state_dir = rn->state_dir,
        .cancel = &r->cancel,
        .cancel_reason = r->cancel_reason,
        .cluster = rn->spec,
        .token = rn->token,
        .session = req->session,
        .hub = rn->hub,
        .pulse = r->pulse,
        .hang_ms = &r->hang_ms,
        .replicas = &r->replicas,
        .hooks = {.ctx = r,
                  .prepared = report_prepared,
                  .progress = report_progress,
                  .comm = report_comm,
                  .hier = report_hier,
                  .finished = report_finished},
    };
    *out = r;
    const dt_task *chief = dt_tfconfig_by_rank(rn->spec, 0);
    DT_TRY(dt__service_mkdirs(rn->state_dir, r->id, r->job_dir, sizeof r->job_dir, err));
    return dt_rpc_channel_new(chief->address, rn->token, &r->chief, err);
}

void dt__service_runner_start(runner *rn, dt_rpc_call *call)
{
    Dtrain__V1__StartJobRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__start_job_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    char msg[2 * DT_ERR_LEN] = "";
    dt_status st = DT_OK;
    dt__service_runner_reap(rn);
    if (rn->run && (strcmp(rn->run->id, req->id) != 0 || rn->run->task.session != req->session)) {
        /* The chief starts another run, so the one here is over for it: either it reported
         * Finished and has nothing left but to return, or the chief restarted the job, or
         * lost this task (it hung, or was cut off) and went on: it is stale. Stop it, without
         * a report, and wait a little for its thread. */
        jrun *old = rn->run;
        atomic_store(&old->stopping, true);
        if (!atomic_load(&old->reported)) {
            DT_WARN("jobs", "job %s: stopping a stale run (the chief now starts %s %s)", old->id,
                    strcmp(old->id, req->id) ? "job" : "a new run of job", req->id);
            cancel_run(old, "the chief started another run", true);
        }
        /* Briefly: the loop must keep heartbeating. Not done yet -> FAILED_PRECONDITION, and
         * the chief asks again a second later. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_timedjoin_np(old->thread, NULL, &ts) == 0) {
            run_free(old);
            rn->run = NULL;
            rn->unhealthy[0] = '\0';
        }
    }
    int rank = rn->spec->self.rank, world = rn->spec->world_size;
    if (req->n_tasks) { /* a shrunk job: this task's rank among those it runs on */
        world = (int)req->n_tasks;
        rank = -1;
        for (size_t i = 0; i < req->n_tasks; i++)
            if ((int)req->tasks[i] == rn->spec->self.rank)
                rank = (int)i;
    }
    if (rn->run && strcmp(rn->run->id, req->id) == 0 && rn->run->task.session == req->session) {
        /* a retried Start: already running */
    } else if (rn->run) {
        st = DT_ESTATE;
        snprintf(msg, sizeof msg, "this task is still stopping job %s; try again", rn->run->id);
    } else if ((int)req->rank != rank || (int)req->world_size != world ||
               world > rn->spec->world_size) {
        st = DT_EINVAL;
        snprintf(msg, sizeof msg,
                 "the chief sees this task as rank %u of %u, but it is rank %d of %d: are the "
                 "TF_CONFIGs the same everywhere?",
                 req->rank, req->world_size, rank, world);
    } else if (!dt__service_id_ok(req->id)) {
        st = DT_EINVAL;
        snprintf(msg, sizeof msg, "bad job id");
    } else {
        jrun *r = NULL;
        dt_err err = {0};
        st = run_new(rn, req, &r, &err);
        if (st == DT_OK && pthread_create(&r->thread, NULL, trainer_main, r) != 0)
            st = dt_err_set(&err, DT_ENOMEM, "could not start the trainer thread: %s",
                            strerror(errno));
        if (st != DT_OK) {
            snprintf(msg, sizeof msg, "%s", err.msg);
            run_free(r);
        } else {
            r->thread_started = true;
            rn->run = r;
            DT_INFO("jobs", "job %s: preparing as rank %d of %d", r->id, r->task.rank,
                    r->task.world);
        }
    }
    if (st != DT_OK) {
        dt_rpc_call_fail(call, st, msg);
    } else {
        Dtrain__V1__Ack ack = DTRAIN__V1__ACK__INIT;
        dt_rpc_call_reply(call, &ack.base);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void dt__service_runner_cancel(runner *rn, dt_rpc_call *call)
{
    Dtrain__V1__CancelJobRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__cancel_job_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    /* A cancel of an earlier run of the same job (a restarted chief's) leaves this one be. */
    if (rn->run && strcmp(rn->run->id, req->id) == 0 && rn->run->task.session == req->session &&
        !atomic_load(&rn->run->finished)) {
        DT_INFO("jobs", "job %s: stopping%s (%s)", req->id, req->abort ? " now" : "", req->reason);
        cancel_run(rn->run, req->reason, req->abort);
    }
    Dtrain__V1__Ack ack = DTRAIN__V1__ACK__INIT;
    dt_rpc_call_reply(call, &ack.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void dt__service_runner_abort(runner *rn, const char *why)
{
    jrun *r = rn->run;
    if (!r || atomic_load(&r->finished) || atomic_load(&r->cancel))
        return;
    DT_WARN("jobs", "job %s: stopping now: %s", r->id, why);
    cancel_run(r, why, true);
}

void dt__service_runner_stop(runner *rn, int64_t timeout_ms)
{
    jrun *r = rn->run;
    if (!r)
        return;
    atomic_store(&r->stopping, true);
    cancel_run(r, "dtraind is stopping", true);
    if (r->thread_started) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        if (pthread_timedjoin_np(r->thread, NULL, &ts) != 0) {
            /* The process is about to exit; leaving the thread is better than hanging. */
            DT_WARN("jobs", "job %s: the trainer did not stop within %lld ms; leaving it", r->id,
                    (long long)timeout_ms);
            pthread_detach(r->thread);
            rn->run = NULL;
            return;
        }
    }
    rn->run = NULL;
    run_free(r);
}

/* --- the trainer thread's reports ------------------------------------------------------------- */

static dt_status report_prepared(void *ctx, bool ok, const char *error, uint64_t examples,
                                 uint64_t params, uint64_t steps_per_epoch, dt_err *err)
{
    jrun *r = ctx;
    Dtrain__V1__PreparedRequest req = DTRAIN__V1__PREPARED_REQUEST__INIT;
    req.id = r->id;
    req.rank = (uint32_t)r->task.rank;
    req.ok = ok;
    req.error = (char *)(error ? error : "");
    req.examples = examples;
    req.params = params;
    req.steps_per_epoch = steps_per_epoch;
    req.session = r->task.session;
    dt_deadline until = dt_deadline_in(PREPARED_WAIT_MS);
    int64_t last_ok = dt_now_ms();
    dt_err e = {0};
    while (!dt_deadline_passed(until)) {
        if (atomic_load(&r->cancel))
            return dt_err_set(err, DT_ECANCELED, "cancelled: %s", r->cancel_reason);
        Dtrain__V1__PreparedReply *rep = NULL;
        dt_status st = dt_rpc_unary(r->chief, DT_RPC_RUN_PREPARED, &req.base,
                                    &dtrain__v1__prepared_reply__descriptor,
                                    (ProtobufCMessage **)&rep, 5000, &e);
        if (st == DT_OK) {
            last_ok = dt_now_ms();
            int d = rep->decision;
            if (d == DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT)
                dt_err_set(err, DT_ECANCELED, "the chief stopped the job: %s", rep->message);
            protobuf_c_message_free_unpacked(&rep->base, NULL);
            if (d == DTRAIN__V1__PREPARED_REPLY__DECISION__GO)
                return ok ? DT_OK : DT_ECANCELED;
            if (d == DTRAIN__V1__PREPARED_REPLY__DECISION__ABORT)
                return DT_ECANCELED;
            if (!ok) /* reported; the chief ends the job */
                return dt_err_set(err, DT_ECANCELED, "%s", error);
        } else if (dt_now_ms() - last_ok > CHIEF_SILENCE_MS) {
            return dt_err_set(err, DT_EPEER, "the chief stopped answering: %s", e.msg);
        }
        dt_sleep_ms(PREPARED_POLL_MS);
    }
    return dt_err_set(err, DT_ETIMEDOUT, "the other tasks did not finish preparing in time");
}

/* Rank 0's progress goes to the service, unless the daemon is stopping (its loop may be
 * closing the handle that would carry it). */
static void report_progress(void *ctx, const jevent *ev)
{
    jrun *r = ctx;
    if (!atomic_load(&r->stopping))
        r->rn->progress(r->rn->ctx, r->id, ev);
}

static void report_comm(void *ctx, dt_comm *c)
{
    jrun *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->comm = c;
    pthread_mutex_unlock(&r->mu);
}

static void report_hier(void *ctx, dt_comm_hier *h)
{
    jrun *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->hier = h;
    pthread_mutex_unlock(&r->mu);
}

static void report_finished(void *ctx, dt_status st, const char *error, const char *weights_hash,
                            const char *weights_path, const char *stopped)
{
    jrun *r = ctx;
    Dtrain__V1__FinishedRequest req = DTRAIN__V1__FINISHED_REQUEST__INIT;
    req.id = r->id;
    req.rank = (uint32_t)r->task.rank;
    req.code = (int32_t)st;
    req.error = (char *)(error ? error : "");
    req.weights_hash = (char *)(weights_hash ? weights_hash : "");
    req.weights_path = (char *)(weights_path ? weights_path : "");
    req.stopped = (char *)(stopped ? stopped : "");
    req.session = r->task.session;
    if (st == DT_OK)
        DT_INFO("jobs", "job %s: rank %d done", r->id, r->task.rank);
    else
        DT_INFO("jobs", "job %s: rank %d ended: %s", r->id, r->task.rank, error);
    dt_deadline until = dt_deadline_in(FINISHED_RETRY_MS);
    dt_err e = {0};
    atomic_store(&r->reported, true);
    while (!atomic_load(&r->stopping)) {
        Dtrain__V1__Ack *ack = NULL;
        if (dt_rpc_unary(r->chief, DT_RPC_RUN_FINISHED, &req.base, &dtrain__v1__ack__descriptor,
                         (ProtobufCMessage **)&ack, 3000, &e) == DT_OK) {
            protobuf_c_message_free_unpacked(&ack->base, NULL);
            break;
        }
        if (dt_deadline_passed(until)) {
            DT_WARN("jobs", "job %s: could not tell the chief that rank %d ended: %s", r->id,
                    r->task.rank, e.msg);
            break;
        }
        dt_sleep_ms(300);
    }
}
