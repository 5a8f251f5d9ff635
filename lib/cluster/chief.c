/*
 * chief.c - the chief's side of membership: admitting joiners, heartbeats, failure detection,
 * and saying, while it waits, whom it waits for.
 */
#include "cluster/cluster_internal.h"

#include "core/clock.h"
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_LOG_MS 3000

static int rank_of(dt_cluster *c, const Dtrain__V1__TaskId *tid)
{
    if (!tid || !tid->type)
        return -1;
    for (int r = 0; r < c->nmembers; r++) {
        const dt_task *t = c->members[r].task;
        if (strcmp(dt_task_type_name(t->type), tid->type) == 0 && (uint32_t)t->index == tid->index)
            return r;
    }
    return -1;
}

static void bump(dt_cluster *c)
{
    c->generation++;
}

static int count_joined(dt_cluster *c)
{
    int n = 0;
    for (int r = 0; r < c->nmembers; r++)
        n += c->members[r].state == MEMBER_JOINED;
    return n;
}

static void missing_list(dt_cluster *c, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < c->nmembers && len < n; r++) {
        member *m = &c->members[r];
        if (m->state == MEMBER_JOINED)
            continue;
        len += (size_t)snprintf(out + len, n - len, "%s%s (%s)", len ? ", " : "", m->name,
                                m->task->address);
    }
}

/* Answers call with reply, whose view field (*view) is filled with the current table. */
static void reply_with_view(dt_cluster *c, dt_rpc_call *call, ProtobufCMessage *reply,
                            Dtrain__V1__ClusterView **view)
{
    *view = dt__cluster_view_new(c);
    if (!*view)
        dt_rpc_call_fail(call, DT_ENOMEM, "out of memory");
    else
        dt_rpc_call_reply(call, reply);
    dt__cluster_view_free(*view);
    *view = NULL;
}

void dt__cluster_chief_join(dt_cluster *c, dt_rpc_call *call)
{
    Dtrain__V1__JoinRequest *req;
    if (dt_rpc_call_unpack(call, &dtrain__v1__join_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    char msg[DT_ERR_LEN];
    const char *who = req->task && req->task->type ? req->task->type : "?";
    if (req->protocol != DTRAIN__V1__PROTOCOL__PROTOCOL_V1) {
        snprintf(msg, sizeof msg,
                 "protocol mismatch: the chief speaks protocol %d, this task %u; "
                 "run the same dtrain version on every host",
                 DTRAIN__V1__PROTOCOL__PROTOCOL_V1, req->protocol);
        DT_WARN("cluster", "refused %s:%u from %s: %s", who, req->task ? req->task->index : 0,
                dt_rpc_call_peer(call), msg);
        dt_rpc_call_fail(call, DT_ESTATE, msg);
        goto out;
    }
    if (req->cluster_hash != c->spec->hash) {
        char here[DT_ERR_LEN / 2], there[DT_ERR_LEN / 2];
        const char *theirs = req->cluster_text ? req->cluster_text : "";
        dt_tfconfig_diff(c->canonical, theirs, here, sizeof here);
        dt_tfconfig_diff(theirs, c->canonical, there, sizeof there);
        DT_ERROR("cluster",
                 "refused %s:%u (%s): its TF_CONFIG cluster differs from the chief's: %s", who,
                 req->task ? req->task->index : 0, dt_rpc_call_peer(call), here);
        snprintf(msg, sizeof msg,
                 "cluster mismatch: this task's TF_CONFIG cluster differs from the "
                 "chief's (%s at %s): %s; give every task the same \"cluster\"",
                 c->members[0].name, c->members[0].task->address, there);
        dt_rpc_call_fail(call, DT_ESTATE, msg);
        goto out;
    }
    int r = rank_of(c, req->task);
    if (r <= 0) {
        snprintf(msg, sizeof msg,
                 "%s:%u is not a ring task of this cluster (or is the chief "
                 "itself); only the chief and workers join",
                 who, req->task ? req->task->index : 0);
        dt_rpc_call_fail(call, DT_EINVAL, msg);
        goto out;
    }
    member *m = &c->members[r];
    int64_t now = dt_now_ms();
    bool restarted = m->incarnation && m->incarnation != req->incarnation;
    member_state before = m->state;
    m->state = MEMBER_JOINED;
    m->last_seen_ms = now;
    m->incarnation = req->incarnation;
    snprintf(m->version, sizeof m->version, "%s", req->version ? req->version : "");
    m->cores = req->cores;
    m->gpus = req->gpus;
    /* an older peer sends none: "" */
    snprintf(m->gpu_model, sizeof m->gpu_model, "%s", req->gpu_model ? req->gpu_model : "");
    if (req->last_generation > c->generation)
        c->generation = req->last_generation;
    if (before != MEMBER_JOINED || restarted) {
        bump(c);
        if (c->formed)
            DT_INFO("cluster", "%s (%s) %s; generation %llu", m->name, m->task->address,
                    restarted ? "restarted and rejoined" : "rejoined",
                    (unsigned long long)c->generation);
        else
            DT_INFO("cluster", "%s (%s) joined: %d of %d tasks present", m->name, m->task->address,
                    count_joined(c), c->nmembers);
    }
    if (!c->formed && count_joined(c) == c->nmembers)
        dt__cluster_set_formed(c);
    Dtrain__V1__JoinReply reply = DTRAIN__V1__JOIN_REPLY__INIT;
    reply_with_view(c, call, &reply.base, &reply.view);
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void dt__cluster_chief_heartbeat(dt_cluster *c, dt_rpc_call *call)
{
    Dtrain__V1__HeartbeatRequest *req;
    if (dt_rpc_call_unpack(call, &dtrain__v1__heartbeat_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    Dtrain__V1__HeartbeatReply reply = DTRAIN__V1__HEARTBEAT_REPLY__INIT;
    int r = rank_of(c, req->task);
    if (req->cluster_hash != c->spec->hash || r <= 0) {
        dt_rpc_call_fail(call, DT_ESTATE, "heartbeat from a task outside this cluster");
        goto out;
    }
    member *m = &c->members[r];
    if (m->incarnation != req->incarnation || m->state != MEMBER_JOINED) {
        /* This chief restarted, or declared the task dead: it must join again. */
        reply.rejoin = true;
    } else {
        m->last_seen_ms = dt_now_ms();
        dt__cluster_set_health(c, r, req->unhealthy);
    }
    reply_with_view(c, call, &reply.base, &reply.view);
out:
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

void dt__cluster_chief_tick(dt_cluster *c, int64_t now)
{
    for (int r = 1; r < c->nmembers; r++) {
        member *m = &c->members[r];
        if (m->state == MEMBER_JOINED && now - m->last_seen_ms > c->o.dead_after_ms) {
            m->state = MEMBER_DEAD;
            bump(c);
            DT_WARN("cluster", "%s (%s) is dead: no heartbeat for %.1f s; generation %llu", m->name,
                    m->task->address, (double)(now - m->last_seen_ms) / 1000.0,
                    (unsigned long long)c->generation);
        }
    }
    if (c->formed)
        return;
    char missing[DT_ERR_LEN];
    if (now - c->started_ms > c->o.rendezvous_timeout_ms) {
        missing_list(c, missing, sizeof missing);
        char msg[DT_ERR_LEN + 200];
        snprintf(msg, sizeof msg,
                 "rendezvous timed out after %.0f s; never joined: %s; start "
                 "dtraind there or fix its address in TF_CONFIG",
                 (double)c->o.rendezvous_timeout_ms / 1000.0, missing);
        c->formed = true; /* stop checking; the daemon exits */
        if (c->o.on_fatal)
            c->o.on_fatal(c->o.ctx, DT_ETIMEDOUT, msg);
        return;
    }
    if (now - c->last_wait_log_ms >= WAIT_LOG_MS) {
        c->last_wait_log_ms = now;
        missing_list(c, missing, sizeof missing);
        DT_INFO("cluster", "waiting %.0f s for %d of %d tasks: %s",
                (double)(now - c->started_ms) / 1000.0, c->nmembers - count_joined(c), c->nmembers,
                missing);
    }
}

void dt__cluster_on_leave(dt_cluster *c, dt_rpc_call *call)
{
    Dtrain__V1__LeaveRequest *req;
    if (dt_rpc_call_unpack(call, &dtrain__v1__leave_request__descriptor,
                           (ProtobufCMessage **)&req) != DT_OK)
        return;
    int r = rank_of(c, req->task);
    if (r == 0 && !c->is_chief) {
        /* The chief is going away: wait for it to come back (a new incarnation). */
        DT_WARN("cluster", "%s (%s) left the cluster (%s); waiting for it to return",
                c->members[0].name, c->members[0].task->address,
                req->reason ? req->reason : "no reason");
        c->members[0].state = MEMBER_LEFT;
        c->joined = false;
        c->chief_dead = true;
        c->next_rpc_ms = dt_now_ms() + 200;
    } else if (r > 0 && c->is_chief && c->members[r].incarnation == req->incarnation) {
        member *m = &c->members[r];
        m->state = MEMBER_LEFT;
        bump(c);
        DT_INFO("cluster", "%s (%s) left the cluster (%s); generation %llu", m->name,
                m->task->address, req->reason ? req->reason : "no reason",
                (unsigned long long)c->generation);
    }
    Dtrain__V1__LeaveReply reply = DTRAIN__V1__LEAVE_REPLY__INIT;
    dt_rpc_call_reply(call, &reply.base);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}
