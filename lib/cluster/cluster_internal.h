/* cluster_internal.h - shared by the files of lib/cluster only. */
#ifndef DT_CLUSTER_INTERNAL_H
#define DT_CLUSTER_INTERNAL_H

#include "cluster/cluster.h"

#include "dtrain.pb-c.h"

typedef enum member_state {
    MEMBER_MISSING = 0,
    MEMBER_JOINED,
    MEMBER_DEAD,
    MEMBER_LEFT,
} member_state;

typedef struct member {
    const dt_task *task; /* into spec->tasks */
    char name[40];       /* "worker:1" */
    member_state state;
    int64_t last_seen_ms;  /* chief: last heartbeat; worker: from the chief's view */
    double reported_age_s; /* worker: heartbeat age the chief reported, at view_at_ms */
    uint64_t incarnation;
    char version[32];
    uint32_t cores, gpus;
    char gpu_model[DT_CLUSTER_GPU_MODEL_LEN]; /* "" when unknown or none */
    char unhealthy[512]; /* "" or why the task cannot train now (its own word) */
} member;

/* An RPC run on the thread pool; fields by value so the loop can free it in one go. */
typedef struct rpc_job rpc_job;
typedef void (*rpc_done_fn)(dt_cluster *c, rpc_job *job);

struct rpc_job {
    uv_work_t work;
    dt_cluster *c;
    dt_rpc_channel *ch;
    const char *method;
    const ProtobufCMessage *req;
    const ProtobufCMessageDescriptor *resp_desc;
    ProtobufCMessage *resp;
    int64_t timeout_ms;
    dt_status st;
    dt_err err;
    rpc_done_fn done;
    int target; /* member index the job talks to */
    Dtrain__V1__TaskId tid;
    char text[512]; /* a string field's copy (the heartbeat's unhealthy) */
    union {
        Dtrain__V1__JoinRequest join;
        Dtrain__V1__HeartbeatRequest hb;
        Dtrain__V1__LeaveRequest leave;
    } u;
};

struct dt_cluster {
    dt_cluster_opts o;
    const dt_cluster_spec *spec;
    char *token;
    char *canonical;
    member *members; /* world_size, by rank */
    int nmembers;
    int self; /* own rank */
    bool is_chief;
    uint64_t incarnation;
    uint64_t generation;
    bool formed; /* chief: all joined once; worker: joined and the view said formed */
    bool formed_reported;
    bool leaving;
    bool closing;
    int inflight; /* rpc jobs not yet back on the loop */
    int handles_open;
    int64_t started_ms;
    int64_t last_wait_log_ms;
    int64_t last_tick_ms;
    uv_timer_t tick;

    /* worker side */
    dt_rpc_channel *chief_ch;
    bool joined;   /* the chief admitted this incarnation */
    bool rpc_busy; /* a Join or Heartbeat is in flight */
    int64_t next_rpc_ms;
    int64_t last_reply_ms; /* last successful answer from the chief */
    bool chief_dead;
    char last_error[DT_ERR_LEN];
    int64_t view_at_ms;
    bool view_formed;

    /* chief side */
    dt_rpc_channel **worker_ch; /* lazily, for Leave */

    /* leave */
    void (*leave_done)(void *ctx);
    void *leave_ctx;
    int leave_pending;
    uv_timer_t leave_timer;
};

const char *dt__cluster_state_name(member_state s);
/* Builds a view of the table (strings borrowed from c; free with dt__cluster_view_free). */
Dtrain__V1__ClusterView *dt__cluster_view_new(dt_cluster *c);
void dt__cluster_view_free(Dtrain__V1__ClusterView *v);

/* A job from this task over ch: task id filled, 1 s deadline; the caller sets job->u and
 * job->req. NULL when out of memory. */
rpc_job *dt__cluster_job_new(dt_cluster *c, dt_rpc_channel *ch, const char *method,
                             const ProtobufCMessageDescriptor *resp_desc, rpc_done_fn done);
/* Runs job->method on the thread pool; job->done runs on the loop (job freed after). */
void dt__cluster_rpc(dt_cluster *c, rpc_job *job);

/* The chief's handlers (chief.c) and the worker's side (worker.c). */
void dt__cluster_chief_join(dt_cluster *c, dt_rpc_call *call);
void dt__cluster_chief_heartbeat(dt_cluster *c, dt_rpc_call *call);
void dt__cluster_chief_tick(dt_cluster *c, int64_t now);
void dt__cluster_on_leave(dt_cluster *c, dt_rpc_call *call);
void dt__cluster_worker_tick(dt_cluster *c, int64_t now);
void dt__cluster_set_formed(dt_cluster *c);
/* Records (and logs a change of) member rank's health: why it cannot train, or "" / NULL. */
void dt__cluster_set_health(dt_cluster *c, int rank, const char *why);

#endif
