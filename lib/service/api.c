/*
 * api.c - the Jobs methods the CLI calls, on the chief: Submit (validated on the pool, then
 * queued), ListJobs, JobStatus, Cancel, Watch, and Export, Evaluate and Predict of a finished
 * job (on the pool). Loop thread, except the *_run functions.
 */
#include "service/service_internal.h"

#include "core/clock.h"
#include "core/limits.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CANCEL_GRACE_MS 10000 /* a cancel not confirmed by then is final anyway */

/* --- Jobs: submit -------------------------------------------------------------------------------
 */

static void validate_run(jcall *c)
{
    c->st = dt__service_validate(c->text, strlen(c->text), c->j->data_root, c->j->state_dir,
                                 c->j->spec->world_size, &c->sum, &c->err);
}

static void reply_job(const dt_service *j, dt_rpc_call *call, const job *jb)
{
    info_buf b;
    dt__service_job_info(j, jb, &b);
    Dtrain__V1__JobReply rep = DTRAIN__V1__JOB_REPLY__INIT;
    rep.job = &b.info;
    dt_rpc_call_reply(call, &rep.base);
}

/* A dir the new job would write to that another job (any state: a finished job's checkpoints
 * are still its own until it is removed) writes to as well, or inside it: writes the refusal
 * into msg and returns true. Two jobs may share a TensorBoard dir: event files have unique
 * names and are never deleted (TensorBoard's habit of one log dir for many runs); a checkpoint
 * dir is never shared, since keep's rotation deletes what it did not write. */
static bool dir_in_use(dt_service *j, const jt_summary *sum, char *msg, size_t n)
{
    static const char *const keys[] = {"$.checkpoint.dir", "$.tensorboard.log_dir"};
    for (job *jb = j->q.head; jb; jb = jb->next) {
        if (!jb->dirs_read) {
            dt_jobspec_write_dirs(jb->rec.spec_json, jb->rec.spec_len, j->state_dir, &jb->dirs[0],
                                  &jb->dirs[1]);
            jb->dirs_read = true;
        }
        for (int a = 0; a < 2; a++) {
            for (int b = 0; b < 2; b++) {
                if ((a == 1 && b == 1) || !sum->dirs[a][0] || !jb->dirs[b] ||
                    !dt_jobspec_dirs_overlap(sum->dirs[a], jb->dirs[b]))
                    continue;
                snprintf(msg, n,
                         "%s: \"%s\" in the state dir is already used by job %s (%s, its %s "
                         "\"%s\"); give each job a dir of its own, or remove job %s first "
                         "(dtrain rm %s)",
                         keys[a], sum->dirs[a], jb->rec.id, jb->rec.name, keys[b], jb->dirs[b],
                         jb->rec.id, jb->rec.id);
                return true;
            }
        }
    }
    return false;
}

/* A GPU job that some task cannot run (dt__service_check_gpus, against the GPUs each task
 * reported when it joined): answers the call and returns true. Loop thread (the member table is
 * the loop's). */
static bool refuse_gpus(dt_service *j, jcall *c)
{
    int n = j->spec->world_size;
    jt_task_gpus *tasks = calloc((size_t)n, sizeof *tasks);
    if (!tasks) {
        dt_rpc_call_fail(c->call, DT_ENOMEM, "out of memory");
        return true;
    }
    for (int r = 0; r < n; r++) {
        const dt_task *t = dt_tfconfig_by_rank(j->spec, r);
        dt_task_name(t, tasks[r].name, sizeof tasks[r].name);
        tasks[r].address = t->address;
        tasks[r].model = "";
        if (j->o.cluster)
            tasks[r].known =
                dt_cluster_member_gpus(j->o.cluster, r, &tasks[r].gpus, &tasks[r].model);
    }
    dt_err err = {0};
    dt_status st = dt__service_check_gpus(&c->sum, tasks, n, &err);
    free(tasks);
    if (st == DT_OK)
        return false;
    DT_INFO("jobs", "refused a job from %s: %s", c->text2 ? c->text2 : "?", err.msg);
    dt_rpc_call_fail(c->call, st, err.msg);
    return true;
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
    if (c->sum.gpu && refuse_gpus(j, c))
        return;
    if (c->sum.min_workers > (uint32_t)j->spec->world_size) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "$.fault_tolerance.min_workers: %u, but the cluster has %d ring task%s (the "
                 "chief and the workers); give at most %d",
                 c->sum.min_workers, j->spec->world_size, j->spec->world_size == 1 ? "" : "s",
                 j->spec->world_size);
        dt_rpc_call_fail(c->call, DT_EINVAL, msg);
        return;
    }
    char msg[2 * PATH_MAX + 600];
    if (dir_in_use(j, &c->sum, msg, sizeof msg)) {
        DT_INFO("jobs", "refused a job from %s: %s", c->text2 ? c->text2 : "?", msg);
        dt_rpc_call_fail(c->call, DT_EPERM, msg);
        return;
    }
    job *jb = dt__service_job_new();
    if (!jb) {
        dt_rpc_call_fail(c->call, DT_ENOMEM, "out of memory");
        return;
    }
    for (int i = 0; i < 2; i++)
        if (c->sum.dirs[i][0] && !(jb->dirs[i] = strdup(c->sum.dirs[i]))) {
            dt_rpc_call_fail(c->call, DT_ENOMEM, "out of memory");
            dt__service_job_free(jb);
            return;
        }
    jb->dirs_read = true;
    snprintf(jb->rec.id, sizeof jb->rec.id, "%llu", (unsigned long long)j->q.next_id++);
    snprintf(jb->rec.name, sizeof jb->rec.name, "%s", c->sum.name[0] ? c->sum.name : "job");
    jb->rec.spec_json = c->text;
    jb->rec.spec_len = strlen(c->text);
    c->text = NULL;
    jb->rec.epochs = c->sum.epochs;
    jb->rec.params = c->sum.params;
    jb->rec.max_restarts = c->sum.max_restarts;
    jb->rec.rejoin_timeout_s = c->sum.rejoin_timeout_s;
    jb->rec.verbose = c->sum.verbose;
    jb->rec.min_workers =
        c->sum.min_workers == (uint32_t)j->spec->world_size ? 0 : c->sum.min_workers;
    jb->rec.world = (uint32_t)j->spec->world_size;
    jb->rec.submitted = dt_wall_s();
    dt_err err = {0};
    if (dt__service_save(j->state_dir, jb, true, &err) != DT_OK) {
        dt_rpc_call_fail(c->call, DT_EIO, err.msg);
        dt__service_job_free(jb);
        return;
    }
    dt__service_queue_append(&j->q, jb);
    DT_INFO("jobs", "job %s (%s) queued", jb->rec.id, jb->rec.name);
    dt__service_state_event(j, jb, NULL);
    reply_job(j, c->call, jb);
    dt__service_schedule(j);
}

void dt__service_on_submit(dt_service *j, dt_rpc_call *call)
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
    jcall *c = dt__service_call_new(j, validate_run, validate_done);
    if (!c || !(c->text = strdup(req->spec_json))) {
        free(c);
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        protobuf_c_message_free_unpacked(&req->base, NULL);
        return;
    }
    c->text2 = strdup(req->source && *req->source ? req->source : dt_rpc_call_peer(call));
    c->call = call;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    dt__service_call_queue(j, c);
}

/* --- Jobs: list, status, cancel
 * ------------------------------------------------------------------- */

void dt__service_on_list(dt_service *j, dt_rpc_call *call)
{
    int n = 0;
    for (job *jb = j->q.head; jb; jb = jb->next)
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
    for (job *jb = j->q.head; jb; jb = jb->next, i++) {
        dt__service_job_info(j, jb, &bufs[i]);
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
    job *jb = dt__service_queue_find(&j->q, req->id);
    if (!jb) {
        char msg[300];
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", req->id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
    return jb;
}

void dt__service_on_status(dt_service *j, dt_rpc_call *call)
{
    job *jb = ref_job(j, call);
    if (jb)
        reply_job(j, call, jb);
}

void dt__service_on_cancel(dt_service *j, dt_rpc_call *call)
{
    job *jb = ref_job(j, call);
    if (!jb)
        return;
    if (!dt__service_terminal(jb) && !(jb->act && jb->act->cancel_requested)) {
        DT_INFO("jobs", "job %s: cancel requested by %s", jb->rec.id, dt_rpc_call_peer(call));
        snprintf(jb->rec.error, sizeof jb->rec.error, "cancelled by a user");
        if (!jb->act) { /* queued: nothing runs yet */
            dt__service_end(j, jb, JOB_CANCELLED, jb->rec.error);
        } else {
            jb->act->cancel_requested = true;
            jb->act->cancel_at_ms = dt_now_ms() + CANCEL_GRACE_MS;
            dt__service_cancel_ranks(j, jb, jb->rec.error, false);
        }
    }
    reply_job(j, call, jb);
    dt__service_schedule(j);
}

/* A failed or cancelled job goes back to the queue; its next start resumes from its latest
 * checkpoint (from the start when it has none), as after a chief restart. */
void dt__service_on_resume(dt_service *j, dt_rpc_call *call)
{
    job *jb = ref_job(j, call);
    if (!jb)
        return;
    char msg[300];
    if (jb->rec.state != JOB_FAILED && jb->rec.state != JOB_CANCELLED) {
        snprintf(msg, sizeof msg, "job %s is %s: only a failed or cancelled job resumes%s",
                 jb->rec.id, dt__service_state_name(jb->rec.state),
                 jb->rec.state == JOB_SUCCEEDED ? " (submit it again to train anew)" : "");
        dt_rpc_call_fail(call, DT_EINVAL, msg);
        return;
    }
    if (jb == j->active) { /* its ranks have not all reported the end yet */
        snprintf(msg, sizeof msg,
                 "job %s is still stopping on some tasks; try again in a few "
                 "seconds",
                 jb->rec.id);
        dt_rpc_call_fail(call, DT_ESTATE, msg);
        return;
    }
    DT_INFO("jobs", "job %s: resume requested by %s (it was %s: %s)", jb->rec.id,
            dt_rpc_call_peer(call), dt__service_state_name(jb->rec.state), jb->rec.error);
    dt__service_move(jb, JOB_QUEUED);
    jb->resume = true;
    jb->rec.restarts = 0; /* a user's resume starts the chief-restart allowance anew */
    jb->rec.error[0] = '\0';
    jb->rec.finished = 0;
    dt__service_save_or_warn(j, jb);
    dt__service_state_event(j, jb, "resumed by a user: from the latest checkpoint");
    reply_job(j, call, jb);
    dt__service_schedule(j);
}

static void remove_run(jcall *c)
{
    c->st = dt__service_remove(c->j->state_dir, c->id, &c->err);
}

static void remove_done(dt_service *j, jcall *c)
{
    (void)j;
    if (c->st != DT_OK)
        DT_WARN("jobs", "job %s: removing its files: %s", c->id, c->err.msg);
}

/* Forgets an ended job: out of the list and its watchers answered now, its directory removed on
 * the pool. */
static void remove_job(dt_service *j, job *jb)
{
    dt__service_queue_unlink(&j->q, jb);
    dt__service_watchers_finish(j, jb->rec.id, false);
    jcall *c = dt__service_call_new(j, remove_run, remove_done);
    if (c) {
        snprintf(c->id, sizeof c->id, "%s", jb->rec.id);
        dt__service_call_queue(j, c);
    } else {
        DT_WARN("jobs", "job %s: out of memory; its files stay in %s/jobs", jb->rec.id,
                j->state_dir);
    }
    dt__service_job_free(jb);
}

void dt__service_on_remove(dt_service *j, dt_rpc_call *call)
{
    job *jb = ref_job(j, call);
    if (!jb)
        return;
    if (!dt__service_terminal(jb) || jb == j->active) {
        char msg[300];
        snprintf(msg, sizeof msg, "job %s is %s: cancel it first ('dtrain cancel %s')", jb->rec.id,
                 dt__service_terminal(jb) ? "still stopping on some tasks"
                                          : dt__service_state_name(jb->rec.state),
                 jb->rec.id);
        dt_rpc_call_fail(call, DT_EINVAL, msg);
        return;
    }
    DT_INFO("jobs", "job %s (%s): removed by %s", jb->rec.id, jb->rec.name, dt_rpc_call_peer(call));
    reply_job(j, call, jb);
    remove_job(j, jb);
}

void dt__service_retain(dt_service *j)
{
    if (j->o.keep_jobs <= 0)
        return;
    int ended = 0;
    for (job *jb = j->q.head; jb; jb = jb->next)
        ended += dt__service_terminal(jb) && jb != j->active;
    for (job *jb = j->q.head, *next; jb && ended > j->o.keep_jobs; jb = next) {
        next = jb->next;
        if (!dt__service_terminal(jb) || jb == j->active)
            continue;
        DT_INFO("jobs", "job %s (%s): removed (--keep-jobs %d)", jb->rec.id, jb->rec.name,
                j->o.keep_jobs);
        remove_job(j, jb);
        ended--;
    }
}

/* --- Jobs: watch
 * ---------------------------------------------------------------------------------- */

void dt__service_on_watch(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__WatchRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__watch_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    job *jb = dt__service_queue_find(&j->q, req->id);
    if (!jb) {
        char msg[300];
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", req->id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
    } else if (jb->events.next_seq > req->after_seq || dt__service_terminal(jb)) {
        dt__service_reply_watch(j, call, jb, req->after_seq);
    } else {
        dt__service_watch_add(j, call, jb, req->after_seq, req->wait_ms);
    }
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Answers the held watches of job id that now have news (or all of them, e.g. when timed out). */
/* --- Jobs: export, evaluate, predict ------------------------------------------------------------
 */

static dt_status final_weights(dt_service *j, dt_rpc_call *call, const char *id, job **out)
{
    job *jb = dt__service_queue_find(&j->q, id);
    char msg[2 * DT_ERR_LEN];
    if (!jb) {
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
        return DT_ENOENT;
    }
    if (jb->rec.state != JOB_SUCCEEDED || !jb->rec.weights_path) {
        snprintf(msg, sizeof msg, "job %s is %s: it has no final weights%s", jb->rec.id,
                 dt__service_state_name(jb->rec.state),
                 dt__service_terminal(jb) ? "" : " yet (dtrain watch waits for it)");
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
    rep.state = (char *)dt__service_state_name((job_state)c->u2);
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

void dt__service_on_export(dt_service *j, dt_rpc_call *call)
{
    Dtrain__V1__ExportRequest *req = NULL;
    if (dt_rpc_call_unpack(call, &dtrain__v1__export_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    bool pinned = req->source_path && *req->source_path;
    job *jb = req->checkpoint ? dt__service_queue_find(&j->q, req->id) : NULL;
    char msg[2 * DT_ERR_LEN];
    if (!req->chunked && (req->offset || pinned)) {
        dt_rpc_call_fail(call, DT_EINVAL, "offset and source_path need chunked = true");
    } else if (req->checkpoint && !jb) {
        snprintf(msg, sizeof msg, "no job '%s' on this cluster (see 'dtrain jobs')", req->id);
        dt_rpc_call_fail(call, DT_ENOENT, msg);
    } else if (jb || final_weights(j, call, req->id, &jb) == DT_OK) {
        jcall *c = NULL;
        if (!req->checkpoint && pinned && strcmp(req->source_path, jb->rec.weights_path) != 0) {
            char pmsg[4096 + 2 * DT_ERR_LEN];
            snprintf(pmsg, sizeof pmsg, "source_path %s is not the final weights of job %s (%s)",
                     req->source_path, jb->rec.id, jb->rec.weights_path);
            dt_rpc_call_fail(call, DT_EINVAL, pmsg);
        } else if (!(c = dt__service_call_new(
                         j, req->checkpoint ? export_checkpoint_run : export_run, export_done))) {
            dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        } else {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/jobs/%s", j->state_dir, jb->rec.id);
            c->call = call;
            c->text = strdup(jb->rec.spec_json);
            c->text2 = strdup(jb->rec.weights_path ? jb->rec.weights_path : "");
            c->text3 = strdup(dir);
            c->pin = pinned ? strdup(req->source_path) : NULL;
            c->chunked = req->chunked;
            c->offset = req->offset;
            c->u1 = jb->rec.global_step;
            c->u2 = (uint64_t)jb->rec.state;
            dt__service_call_queue(j, c);
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
    dt__service_metrics_pb(c->metrics, c->nmetrics, m, mp);
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
        jcall *c = dt__service_call_new(j, predict ? predict_run : evaluate_run,
                                        predict ? predict_done : evaluate_done);
        if (!c) {
            dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        } else {
            c->call = call;
            c->text = strdup(data);
            c->text2 = strdup(jb->rec.weights_path);
            c->text3 = strdup(jb->rec.spec_json);
            c->batch = batch;
            snprintf(c->id, sizeof c->id, "%s", jb->rec.id);
            snprintf(c->format, sizeof c->format, "%s", format ? format : "");
            dt__service_call_queue(j, c);
        }
    }
    protobuf_c_message_free_unpacked(msg, NULL);
}

void dt__service_on_evaluate(dt_service *j, dt_rpc_call *call)
{
    on_eval_or_predict(j, call, false);
}

void dt__service_on_predict(dt_service *j, dt_rpc_call *call)
{
    on_eval_or_predict(j, call, true);
}
