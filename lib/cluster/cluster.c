/*
 * cluster.c - the cluster object: lifetime, the cron tick, the view, RPC plumbing, leaving.
 * The chief's rules live in chief.c, the worker's in worker.c.
 */
#include "cluster/cluster_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* One cron tick drives everything periodic (heartbeats, failure detection, waiting logs): a
 * quarter of the default heartbeat keeps detection latency within dead_after + 250 ms. */
#define TICK_MS 100

const char *dt__cluster_state_name(member_state s)
{
    switch (s) {
    case MEMBER_JOINED:
        return "joined";
    case MEMBER_DEAD:
        return "dead";
    case MEMBER_LEFT:
        return "left";
    default:
        return "missing";
    }
}

static void on_tick(uv_timer_t *t)
{
    dt_cluster *c = t->data;
    if (c->closing || c->leaving)
        return;
    int64_t now = dt_now_ms();
    if (c->last_tick_ms && now - c->last_tick_ms > c->o.dead_after_ms / 2) {
        /* This process did not run (SIGSTOP, a frozen VM, a starved CPU): the peers' silence
         * over that time says nothing about them, so it is not held against them. */
        DT_WARN("cluster",
                "this daemon did not run for %.1f s (stopped or starved of CPU); its peers get "
                "a fresh %.1f s to be heard from",
                (double)(now - c->last_tick_ms) / 1000.0, (double)c->o.dead_after_ms / 1000.0);
        if (c->is_chief) {
            for (int r = 0; r < c->nmembers; r++)
                if (c->members[r].state == MEMBER_JOINED)
                    c->members[r].last_seen_ms = now;
        } else {
            c->last_reply_ms = now;
        }
    }
    c->last_tick_ms = now;
    if (c->is_chief)
        dt__cluster_chief_tick(c, now);
    else
        dt__cluster_worker_tick(c, now);
}

dt_status dt_cluster_new(const dt_cluster_opts *opts, dt_cluster **out, dt_err *err)
{
    const dt_cluster_spec *spec = opts->spec;
    if (!spec->has_self || spec->self.rank < 0)
        return dt_err_set(err, DT_EINVAL, "cluster: this task is not in the ring");
    dt_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return dt_err_set(err, DT_ENOMEM, "cluster: out of memory");
    c->o = *opts;
    if (!c->o.rendezvous_timeout_ms)
        c->o.rendezvous_timeout_ms = 300000;
    if (!c->o.heartbeat_ms)
        c->o.heartbeat_ms = 500;
    if (!c->o.dead_after_ms)
        c->o.dead_after_ms = 2500;
    c->spec = spec;
    c->token = opts->token && *opts->token ? strdup(opts->token) : NULL;
    c->canonical = dt_tfconfig_canonical(spec);
    c->nmembers = spec->world_size;
    c->members = calloc((size_t)c->nmembers, sizeof *c->members);
    c->worker_ch = calloc((size_t)c->nmembers, sizeof *c->worker_ch);
    if (!c->canonical || !c->members || !c->worker_ch) {
        dt_cluster_free(c);
        return dt_err_set(err, DT_ENOMEM, "cluster: out of memory");
    }
    for (int r = 0; r < c->nmembers; r++) {
        member *m = &c->members[r];
        m->task = dt_tfconfig_by_rank(spec, r);
        dt_task_name(m->task, m->name, sizeof m->name);
        m->reported_age_s = -1;
    }
    c->self = spec->self.rank;
    c->is_chief = spec->self.rank == 0;
    if (getrandom(&c->incarnation, sizeof c->incarnation, 0) != sizeof c->incarnation)
        c->incarnation = dt_now_ns() ^ ((uint64_t)getpid() << 32);
    member *me = &c->members[c->self];
    me->state = MEMBER_JOINED;
    me->incarnation = c->incarnation;
    snprintf(me->version, sizeof me->version, "%s", DT_VERSION);
    me->cores = (uint32_t)opts->cores;
    me->gpus = (uint32_t)opts->gpus;
    snprintf(me->gpu_model, sizeof me->gpu_model, "%s", opts->gpu_model ? opts->gpu_model : "");
    if (!c->is_chief) {
        dt_status st = dt_rpc_channel_new(c->members[0].task->address, c->token, &c->chief_ch, err);
        if (st != DT_OK) {
            dt_cluster_free(c);
            return st;
        }
    }
    uv_timer_init(opts->loop, &c->tick);
    c->tick.data = c;
    uv_timer_init(opts->loop, &c->leave_timer);
    c->leave_timer.data = c;
    c->handles_open = 2;
    *out = c;
    return DT_OK;
}

void dt_cluster_start(dt_cluster *c)
{
    c->started_ms = dt_now_ms();
    c->last_wait_log_ms = c->started_ms;
    c->last_reply_ms = c->started_ms;
    if (c->is_chief) {
        DT_INFO("cluster", "%s is the chief at %s; waiting for %d more task%s to join",
                c->members[0].name, c->members[0].task->address, c->nmembers - 1,
                c->nmembers == 2 ? "" : "s");
        if (c->nmembers == 1)
            dt__cluster_set_formed(c);
    } else {
        DT_INFO("cluster", "%s joining the chief %s at %s", c->members[c->self].name,
                c->members[0].name, c->members[0].task->address);
    }
    uv_timer_start(&c->tick, on_tick, 0, TICK_MS);
}

void dt__cluster_set_formed(dt_cluster *c)
{
    c->formed = true;
    if (c->formed_reported)
        return;
    c->formed_reported = true;
    DT_INFO("cluster", "cluster formed: %d task%s, generation %llu, after %.1f s", c->nmembers,
            c->nmembers == 1 ? "" : "s", (unsigned long long)c->generation,
            (double)(dt_now_ms() - c->started_ms) / 1000.0);
    if (c->o.on_formed)
        c->o.on_formed(c->o.ctx, c->generation);
}

uint64_t dt_cluster_generation(const dt_cluster *c)
{
    return c->generation;
}

bool dt_cluster_formed(const dt_cluster *c)
{
    return c->formed;
}

bool dt_cluster_chief_lost(const dt_cluster *c)
{
    return !c->is_chief && c->chief_dead;
}

bool dt_cluster_member_up(const dt_cluster *c, int rank, uint64_t *incarnation)
{
    if (rank < 0 || rank >= c->nmembers)
        return false;
    if (incarnation)
        *incarnation = rank == c->self ? c->incarnation : c->members[rank].incarnation;
    const member *m = &c->members[rank];
    return (rank == c->self || m->state == MEMBER_JOINED) && !m->unhealthy[0];
}

bool dt_cluster_member_gpus(const dt_cluster *c, int rank, int *gpus, const char **model)
{
    *gpus = 0;
    *model = "";
    if (rank < 0 || rank >= c->nmembers)
        return false;
    const member *m = &c->members[rank];
    /* Every daemon that joined sent a version; a member never heard from has none. */
    if (rank != c->self && !m->version[0])
        return false;
    *gpus = (int)m->gpus;
    *model = m->gpu_model;
    return true;
}

const char *dt_cluster_member_unhealthy(const dt_cluster *c, int rank)
{
    if (rank < 0 || rank >= c->nmembers)
        return "";
    return c->members[rank].unhealthy;
}

void dt__cluster_set_health(dt_cluster *c, int rank, const char *why)
{
    member *m = &c->members[rank];
    if (!why)
        why = "";
    if (strncmp(m->unhealthy, why, sizeof m->unhealthy - 1) == 0)
        return;
    if (why[0])
        DT_WARN("cluster", "%s (%s) is unhealthy, out of jobs until it recovers: %s", m->name,
                m->task->address, why);
    else
        DT_INFO("cluster", "%s (%s) is healthy again", m->name, m->task->address);
    snprintf(m->unhealthy, sizeof m->unhealthy, "%s", why);
}

void dt_cluster_set_unhealthy(dt_cluster *c, const char *why)
{
    dt__cluster_set_health(c, c->self, why);
}

/* --- the view ----------------------------------------------------------------------------- */

Dtrain__V1__ClusterView *dt__cluster_view_new(dt_cluster *c)
{
    Dtrain__V1__ClusterView *v = calloc(1, sizeof *v);
    Dtrain__V1__Member **ms = calloc((size_t)c->nmembers, sizeof *ms);
    Dtrain__V1__Member *mb = calloc((size_t)c->nmembers, sizeof *mb);
    Dtrain__V1__TaskId *ids = calloc((size_t)c->nmembers, sizeof *ids);
    if (!v || !ms || !mb || !ids) {
        free(v);
        free(ms);
        free(mb);
        free(ids);
        return NULL;
    }
    dtrain__v1__cluster_view__init(v);
    int64_t now = dt_now_ms();
    v->generation = c->generation;
    v->formed = c->is_chief ? c->formed : c->view_formed;
    v->chief = c->members[0].name;
    v->reporter = c->members[c->self].name;
    for (int r = 0; r < c->nmembers; r++) {
        member *m = &c->members[r];
        dtrain__v1__task_id__init(&ids[r]);
        ids[r].type = (char *)dt_task_type_name(m->task->type);
        ids[r].index = (uint32_t)m->task->index;
        dtrain__v1__member__init(&mb[r]);
        mb[r].task = &ids[r];
        mb[r].address = (char *)m->task->address;
        mb[r].rank = r;
        mb[r].state = (char *)dt__cluster_state_name(m->state);
        mb[r].version = m->version;
        mb[r].cores = m->cores;
        mb[r].gpus = m->gpus;
        mb[r].gpu_model = m->gpu_model;
        mb[r].incarnation = m->incarnation;
        mb[r].unhealthy = m->unhealthy;
        if (r == c->self)
            mb[r].heartbeat_age_s = 0;
        else if (c->is_chief)
            mb[r].heartbeat_age_s =
                m->last_seen_ms ? (double)(now - m->last_seen_ms) / 1000.0 : -1.0;
        else if (r == 0)
            mb[r].heartbeat_age_s =
                c->last_reply_ms && c->joined ? (double)(now - c->last_reply_ms) / 1000.0 : -1.0;
        else
            mb[r].heartbeat_age_s =
                m->reported_age_s < 0 ? -1.0
                                      : m->reported_age_s + (double)(now - c->view_at_ms) / 1000.0;
        ms[r] = &mb[r];
    }
    v->n_members = (size_t)c->nmembers;
    v->members = ms;
    return v;
}

void dt__cluster_view_free(Dtrain__V1__ClusterView *v)
{
    if (!v)
        return;
    if (v->n_members) {
        free(v->members[0]->task);
        free(v->members[0]);
    }
    free(v->members);
    free(v);
}

/* --- RPC plumbing ------------------------------------------------------------------------- */

static void rpc_work(uv_work_t *w)
{
    rpc_job *job = w->data;
    job->st = dt_rpc_unary(job->ch, job->method, job->req, job->resp_desc, &job->resp,
                           job->timeout_ms, &job->err);
}

static void cluster_maybe_release(dt_cluster *c);

static void rpc_after(uv_work_t *w, int status)
{
    (void)status;
    rpc_job *job = w->data;
    dt_cluster *c = job->c;
    c->inflight--;
    if (!c->closing && job->done)
        job->done(c, job);
    if (job->resp)
        protobuf_c_message_free_unpacked(job->resp, NULL);
    free(job);
    if (c->closing)
        cluster_maybe_release(c);
}

rpc_job *dt__cluster_job_new(dt_cluster *c, dt_rpc_channel *ch, const char *method,
                             const ProtobufCMessageDescriptor *resp_desc, rpc_done_fn done)
{
    rpc_job *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    dtrain__v1__task_id__init(&job->tid);
    job->tid.type = (char *)dt_task_type_name(c->spec->self.type);
    job->tid.index = (uint32_t)c->spec->self.index;
    job->ch = ch;
    job->method = method;
    job->resp_desc = resp_desc;
    job->timeout_ms = 1000;
    job->done = done;
    return job;
}

void dt__cluster_rpc(dt_cluster *c, rpc_job *job)
{
    job->c = c;
    job->work.data = job;
    c->inflight++;
    uv_queue_work(c->o.loop, &job->work, rpc_work, rpc_after);
}

/* --- incoming calls ----------------------------------------------------------------------- */

static void serve_cluster_info(dt_cluster *c, dt_rpc_call *call)
{
    ProtobufCMessage *req;
    if (dt_rpc_call_unpack(call, &dtrain__v1__cluster_info_request__descriptor, &req) != DT_OK)
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    Dtrain__V1__ClusterInfoReply reply = DTRAIN__V1__CLUSTER_INFO_REPLY__INIT;
    reply.view = dt__cluster_view_new(c);
    if (!reply.view) {
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
        return;
    }
    dt_rpc_call_reply(call, &reply.base);
    dt__cluster_view_free(reply.view);
}

bool dt_cluster_handle_call(dt_cluster *c, dt_rpc_call *call)
{
    const char *m = dt_rpc_call_method(call);
    if (strcmp(m, DT_RPC_CLUSTER_INFO) == 0) {
        serve_cluster_info(c, call);
        return true;
    }
    if (strcmp(m, DT_RPC_LEAVE) == 0) {
        dt__cluster_on_leave(c, call);
        return true;
    }
    if (strcmp(m, DT_RPC_JOIN) == 0 || strcmp(m, DT_RPC_HEARTBEAT) == 0) {
        if (!c->is_chief) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s is not the chief; join %s at %s",
                     c->members[c->self].name, c->members[0].name, c->members[0].task->address);
            dt_rpc_call_fail(call, DT_ESTATE, msg);
        } else if (c->leaving) {
            dt_rpc_call_fail(call, DT_EPEER, "the chief is shutting down");
        } else if (strcmp(m, DT_RPC_JOIN) == 0) {
            dt__cluster_chief_join(c, call);
        } else {
            dt__cluster_chief_heartbeat(c, call);
        }
        return true;
    }
    return false;
}

/* --- leaving ------------------------------------------------------------------------------ */

static void leave_finish(dt_cluster *c)
{
    if (!c->leave_done)
        return;
    void (*done)(void *) = c->leave_done;
    c->leave_done = NULL;
    uv_timer_stop(&c->leave_timer);
    done(c->leave_ctx);
}

static void leave_rpc_done(dt_cluster *c, rpc_job *job)
{
    if (job->st != DT_OK)
        DT_DEBUG("cluster", "leave notice to %s not delivered: %s", c->members[job->target].name,
                 job->err.msg);
    if (--c->leave_pending == 0)
        leave_finish(c);
}

static void on_leave_timeout(uv_timer_t *t)
{
    leave_finish(t->data);
}

static void send_leave(dt_cluster *c, int target)
{
    dt_rpc_channel *ch = target == 0 ? c->chief_ch : c->worker_ch[target];
    if (!ch) {
        dt_err err = {0};
        if (dt_rpc_channel_new(c->members[target].task->address, c->token, &c->worker_ch[target],
                               &err) != DT_OK)
            return;
        ch = c->worker_ch[target];
    }
    rpc_job *job = dt__cluster_job_new(c, ch, DT_RPC_LEAVE, &dtrain__v1__leave_reply__descriptor,
                                       leave_rpc_done);
    if (!job)
        return;
    dtrain__v1__leave_request__init(&job->u.leave);
    job->u.leave.task = &job->tid;
    job->u.leave.incarnation = c->incarnation;
    job->u.leave.reason = "shutting down";
    job->req = &job->u.leave.base;
    job->target = target;
    c->leave_pending++;
    dt__cluster_rpc(c, job);
}

void dt_cluster_leave(dt_cluster *c, void (*done)(void *ctx), void *ctx)
{
    c->leaving = true;
    c->leave_done = done;
    c->leave_ctx = ctx;
    uv_timer_stop(&c->tick);
    if (c->is_chief) {
        for (int r = 1; r < c->nmembers; r++)
            if (c->members[r].state == MEMBER_JOINED)
                send_leave(c, r);
    } else if (c->joined) {
        send_leave(c, 0);
    }
    if (c->leave_pending == 0) {
        leave_finish(c);
        return;
    }
    /* Peers that do not answer must not hold up the exit. */
    uv_timer_start(&c->leave_timer, on_leave_timeout, 1500, 0);
}

/* --- teardown ----------------------------------------------------------------------------- */

static void cluster_release(dt_cluster *c)
{
    dt_rpc_channel_free(c->chief_ch);
    if (c->worker_ch)
        for (int r = 0; r < c->nmembers; r++)
            dt_rpc_channel_free(c->worker_ch[r]);
    free(c->worker_ch);
    free(c->members);
    free(c->canonical);
    free(c->token);
    free(c);
}

static void cluster_maybe_release(dt_cluster *c)
{
    if (c->inflight == 0 && c->handles_open == 0)
        cluster_release(c);
}

static void on_handle_closed(uv_handle_t *h)
{
    dt_cluster *c = h->data;
    c->handles_open--;
    cluster_maybe_release(c);
}

void dt_cluster_free(dt_cluster *c)
{
    if (!c)
        return;
    c->closing = true;
    if (c->handles_open == 0) {
        /* Never started the handles (failed dt_cluster_new). */
        cluster_maybe_release(c);
        return;
    }
    uv_close((uv_handle_t *)&c->tick, on_handle_closed);
    uv_close((uv_handle_t *)&c->leave_timer, on_handle_closed);
}
