/*
 * worker.c - a worker's side of membership: join the chief (retrying, in any start order),
 * heartbeat, learn the table from the replies, and notice a silent chief.
 */
#include "cluster/cluster_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_LOG_MS   3000
#define JOIN_RETRY_MS 250

static member_state parse_state(const char *s)
{
    if (!s)
        return MEMBER_MISSING;
    if (strcmp(s, "joined") == 0)
        return MEMBER_JOINED;
    if (strcmp(s, "dead") == 0)
        return MEMBER_DEAD;
    if (strcmp(s, "left") == 0)
        return MEMBER_LEFT;
    return MEMBER_MISSING;
}

/* Takes the chief's table, logging every change of another task's state by name. */
static void apply_view(dt_cluster *c, const Dtrain__V1__ClusterView *v)
{
    if (!v)
        return;
    int64_t now = dt_now_ms();
    c->view_at_ms = now;
    c->generation = v->generation;
    c->view_formed = v->formed;
    for (size_t i = 0; i < v->n_members; i++) {
        const Dtrain__V1__Member *vm = v->members[i];
        if (vm->rank <= 0 || vm->rank >= c->nmembers || vm->rank == c->self)
            continue;
        member *m = &c->members[vm->rank];
        member_state ns = parse_state(vm->state);
        if (ns != m->state && c->formed) {
            if (ns == MEMBER_DEAD)
                DT_WARN("cluster",
                        "%s (%s) is dead (the chief lost its heartbeat); generation "
                        "%llu",
                        m->name, m->task->address, (unsigned long long)v->generation);
            else if (ns == MEMBER_JOINED)
                DT_INFO("cluster", "%s (%s) %s; generation %llu", m->name, m->task->address,
                        m->state == MEMBER_MISSING ? "joined" : "rejoined",
                        (unsigned long long)v->generation);
            else if (ns == MEMBER_LEFT)
                DT_INFO("cluster", "%s (%s) left the cluster; generation %llu", m->name,
                        m->task->address, (unsigned long long)v->generation);
        }
        m->state = ns;
        m->reported_age_s = vm->heartbeat_age_s;
        m->incarnation = vm->incarnation;
        snprintf(m->version, sizeof m->version, "%s", vm->version ? vm->version : "");
        m->cores = vm->cores;
        m->gpus = vm->gpus;
        snprintf(m->gpu_model, sizeof m->gpu_model, "%s", vm->gpu_model ? vm->gpu_model : "");
        snprintf(m->unhealthy, sizeof m->unhealthy, "%s", vm->unhealthy ? vm->unhealthy : "");
    }
    if (v->n_members > 0 && v->members[0]->rank == 0) {
        member *ch = &c->members[0];
        ch->state = MEMBER_JOINED;
        ch->incarnation = v->members[0]->incarnation;
        snprintf(ch->version, sizeof ch->version, "%s",
                 v->members[0]->version ? v->members[0]->version : "");
        ch->cores = v->members[0]->cores;
        ch->gpus = v->members[0]->gpus;
        snprintf(ch->gpu_model, sizeof ch->gpu_model, "%s",
                 v->members[0]->gpu_model ? v->members[0]->gpu_model : "");
        snprintf(ch->unhealthy, sizeof ch->unhealthy, "%s",
                 v->members[0]->unhealthy ? v->members[0]->unhealthy : "");
    }
    if (v->formed && c->joined)
        dt__cluster_set_formed(c);
}

static void chief_answered(dt_cluster *c)
{
    int64_t now = dt_now_ms();
    if (c->chief_dead) {
        DT_INFO("cluster", "%s (%s) is back", c->members[0].name, c->members[0].task->address);
        c->chief_dead = false;
    }
    c->last_reply_ms = now;
}

static void join_done(dt_cluster *c, rpc_job *job)
{
    c->rpc_busy = false;
    int64_t now = dt_now_ms();
    if (job->st == DT_OK) {
        Dtrain__V1__JoinReply *rep = (Dtrain__V1__JoinReply *)job->resp;
        bool first = !c->formed_reported;
        c->joined = true;
        chief_answered(c);
        if (first)
            DT_INFO("cluster", "%s joined the chief %s after %.1f s", c->members[c->self].name,
                    c->members[0].task->address, (double)(now - c->started_ms) / 1000.0);
        else
            DT_INFO("cluster", "%s rejoined the chief %s", c->members[c->self].name,
                    c->members[0].task->address);
        apply_view(c, rep->view);
        c->next_rpc_ms = now + c->o.heartbeat_ms;
        return;
    }
    snprintf(c->last_error, sizeof c->last_error, "%s", job->err.msg);
    if (job->st == DT_ESTATE || job->st == DT_EINVAL || job->st == DT_EAUTH) {
        /* The chief answered and said no: retrying cannot help. */
        if (c->o.on_fatal)
            c->o.on_fatal(c->o.ctx, job->st == DT_EAUTH ? DT_EAUTH : job->st, job->err.msg);
        c->formed = true;
        c->joined = false;
        c->next_rpc_ms = INT64_MAX;
        return;
    }
    c->next_rpc_ms = now + JOIN_RETRY_MS;
}

static void heartbeat_done(dt_cluster *c, rpc_job *job)
{
    c->rpc_busy = false;
    int64_t now = dt_now_ms();
    if (job->st == DT_OK) {
        Dtrain__V1__HeartbeatReply *rep = (Dtrain__V1__HeartbeatReply *)job->resp;
        chief_answered(c);
        if (rep->rejoin) {
            DT_INFO("cluster",
                    "%s (%s) does not know this task any more (it restarted, or "
                    "declared us dead); joining again",
                    c->members[0].name, c->members[0].task->address);
            c->joined = false;
            c->next_rpc_ms = now;
            return;
        }
        apply_view(c, rep->view);
    } else {
        snprintf(c->last_error, sizeof c->last_error, "%s", job->err.msg);
    }
    c->next_rpc_ms = now + c->o.heartbeat_ms;
}

static void send_join(dt_cluster *c)
{
    rpc_job *job = dt__cluster_job_new(c, c->chief_ch, DT_RPC_JOIN,
                                       &dtrain__v1__join_reply__descriptor, join_done);
    if (!job)
        return;
    Dtrain__V1__JoinRequest *r = &job->u.join;
    dtrain__v1__join_request__init(r);
    r->protocol = DTRAIN__V1__PROTOCOL__PROTOCOL_V1;
    r->cluster_hash = c->spec->hash;
    r->cluster_text = c->canonical;
    r->task = &job->tid;
    r->address = (char *)c->spec->self.address;
    r->incarnation = c->incarnation;
    r->version = DT_VERSION;
    r->cores = (uint32_t)c->o.cores;
    r->gpus = (uint32_t)c->o.gpus;
    r->gpu_model = c->members[c->self].gpu_model;
    r->last_generation = c->generation;
    job->req = &r->base;
    c->rpc_busy = true;
    dt__cluster_rpc(c, job);
}

static void send_heartbeat(dt_cluster *c)
{
    rpc_job *job = dt__cluster_job_new(c, c->chief_ch, DT_RPC_HEARTBEAT,
                                       &dtrain__v1__heartbeat_reply__descriptor, heartbeat_done);
    if (!job)
        return;
    Dtrain__V1__HeartbeatRequest *r = &job->u.hb;
    dtrain__v1__heartbeat_request__init(r);
    r->task = &job->tid;
    r->incarnation = c->incarnation;
    r->cluster_hash = c->spec->hash;
    r->generation = c->generation;
    snprintf(job->text, sizeof job->text, "%s", c->members[c->self].unhealthy);
    r->unhealthy = job->text;
    job->req = &r->base;
    c->rpc_busy = true;
    dt__cluster_rpc(c, job);
}

void dt__cluster_worker_tick(dt_cluster *c, int64_t now)
{
    member *chief = &c->members[0];
    if (!c->formed_reported) {
        if (now - c->started_ms > c->o.rendezvous_timeout_ms) {
            char msg[DT_ERR_LEN + 200];
            snprintf(msg, sizeof msg, "rendezvous timed out after %.0f s: %s",
                     (double)c->o.rendezvous_timeout_ms / 1000.0,
                     c->joined ? "joined the chief, but the cluster never formed (another task is "
                                 "missing: see the chief's log)"
                               : "the chief never admitted this task");
            if (!c->joined && c->last_error[0]) {
                size_t l = strlen(msg);
                snprintf(msg + l, sizeof msg - l, "; last error: %s", c->last_error);
            }
            c->formed_reported = true;
            if (c->o.on_fatal)
                c->o.on_fatal(c->o.ctx, DT_ETIMEDOUT, msg);
            return;
        }
        if (now - c->last_wait_log_ms >= WAIT_LOG_MS) {
            c->last_wait_log_ms = now;
            if (!c->joined)
                DT_INFO("cluster", "waiting %.0f s for the chief %s at %s%s%s",
                        (double)(now - c->started_ms) / 1000.0, chief->name, chief->task->address,
                        c->last_error[0] ? ": " : "", c->last_error);
            else
                DT_INFO("cluster",
                        "joined; waiting %.0f s for the other tasks (the chief's log "
                        "names them)",
                        (double)(now - c->started_ms) / 1000.0);
        }
    }
    if (c->formed_reported && !c->chief_dead && now - c->last_reply_ms > c->o.dead_after_ms) {
        c->chief_dead = true;
        chief->state = MEMBER_DEAD;
        DT_WARN("cluster", "%s (%s) is dead: no answer for %.1f s%s%s", chief->name,
                chief->task->address, (double)(now - c->last_reply_ms) / 1000.0,
                c->last_error[0] ? ": " : "", c->last_error);
    }
    if (c->rpc_busy || now < c->next_rpc_ms)
        return;
    if (!c->joined)
        send_join(c);
    else
        send_heartbeat(c);
}
