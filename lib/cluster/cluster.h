/*
 * cluster.h - rendezvous, membership, heartbeats and failure detection.
 *
 * Every ring task (chief and workers) joins the chief; start order does not matter: a worker
 * retries Join until the chief answers or --rendezvous-timeout passes. The chief keeps the
 * member table; each change (join, death, leave, restart) bumps the generation. Workers send a
 * heartbeat every heartbeat_ms and learn the table from the reply. The chief declares a task dead
 * after dead_after_ms without a heartbeat; workers declare the chief dead after dead_after_ms
 * without a reply. Both log it by name and address. A restarted task (new incarnation) rejoins;
 * a restarted chief tells the workers to rejoin. The cluster is "formed" once every ring task has
 * joined; on_formed runs once, the first time.
 *
 * Threads: everything here runs on the loop thread. Blocking RPCs run on libuv's thread pool
 * (uv_queue_work) and report back on the loop; the cluster stays alive until they have.
 *
 *     dt_cluster_opts o = {.loop = loop, .spec = &spec, .token = token, .on_formed = ready, ...};
 *     dt_cluster *c;
 *     dt_cluster_new(&o, &c, &err);
 *     dt_cluster_start(c);
 *     ... rpc handler: if (!dt_cluster_handle_call(c, call)) dt_rpc_call_fail(call, ...);
 *     dt_cluster_leave(c, on_left, d);     // SIGTERM: tell the peers, then on_left
 *     dt_cluster_free(c);
 */
#ifndef DT_CLUSTER_CLUSTER_H
#define DT_CLUSTER_CLUSTER_H

#include "config/tfconfig.h"
#include "core/status.h"
#include "rpc/rpc.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct dt_cluster dt_cluster;

#define DT_CLUSTER_GPU_MODEL_LEN 96 /* a GPU model name, at most (longer ones are cut) */

typedef struct dt_cluster_opts {
    uv_loop_t *loop;
    const dt_cluster_spec *spec;   /* borrowed; must outlive the cluster; spec->self in the ring */
    const char *token;             /* copied; NULL for none */
    int64_t rendezvous_timeout_ms; /* 0: 300 s */
    int64_t heartbeat_ms;          /* 0: 500 ms */
    int64_t dead_after_ms;         /* 0: 2500 ms */
    int cores, gpus;
    const char *gpu_model; /* copied; the GPUs' model name, NULL or "" when unknown */
    /* The first time every ring task has joined. */
    void (*on_formed)(void *ctx, uint64_t generation);
    /* The cluster cannot go on: rendezvous timed out, or the chief refused this task (cluster
     * mismatch, protocol). st is DT_ETIMEDOUT or DT_ESTATE/DT_EINVAL; msg says why. */
    void (*on_fatal)(void *ctx, dt_status st, const char *msg);
    void *ctx;
} dt_cluster_opts;

dt_status dt_cluster_new(const dt_cluster_opts *opts, dt_cluster **out, dt_err *err);
/* Starts the rendezvous: the chief waits and logs who is missing, a worker joins the chief. */
void dt_cluster_start(dt_cluster *c);
/* Serves the Control methods (Join, Heartbeat, Leave, ClusterInfo). Returns false, without
 * touching call, for any other method. */
bool dt_cluster_handle_call(dt_cluster *c, dt_rpc_call *call);
/* Leaves cleanly: a worker tells the chief, the chief tells every worker (each bounded by
 * 1.5 s), then done(ctx) runs on the loop. Heartbeats stop. */
void dt_cluster_leave(dt_cluster *c, void (*done)(void *ctx), void *ctx);
/* Closes timers and frees once no RPC is in flight; the loop must keep running until its
 * handles are closed. NULL-safe. */
void dt_cluster_free(dt_cluster *c);

uint64_t dt_cluster_generation(const dt_cluster *c);
bool dt_cluster_formed(const dt_cluster *c);
/* The chief's view of the task of rank: true when it has joined, is heartbeating and is not
 * unhealthy (dt_cluster_set_unhealthy); its
 * incarnation (random per daemon start: a change means it restarted) in *incarnation. */
bool dt_cluster_member_up(const dt_cluster *c, int rank, uint64_t *incarnation);
/* A worker's view: the chief has not answered for dead_after_ms (false on the chief). */
bool dt_cluster_chief_lost(const dt_cluster *c);
/* This task is alive but cannot train (why: its trainer hung), or is again (why NULL or ""):
 * workers tell the chief with their heartbeats; the chief counts an unhealthy task as not up
 * (dt_cluster_member_up) until it recovers. Cheap when nothing changes: call it every tick. */
void dt_cluster_set_unhealthy(dt_cluster *c, const char *why);
/* What the task of rank said of its GPUs when it last joined: their count in *gpus and their
 * model in *model ("" when unknown; valid until the next loop iteration). False, with 0 and "",
 * while nothing is known: the task has not joined since this daemon started. */
bool dt_cluster_member_gpus(const dt_cluster *c, int rank, int *gpus, const char **model);
/* Why the task of rank is unhealthy, or "" (the chief's view; never NULL). */
const char *dt_cluster_member_unhealthy(const dt_cluster *c, int rank);

#endif
