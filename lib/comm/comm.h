/*
 * comm.h - collectives among the ranks of a cluster: ring all-reduce, broadcast, all-gather,
 * barrier, over long-lived gRPC streams.
 *
 * Pieces:
 *   dt_comm_hub  one per daemon, created before its rpc server: owns the stream queue (a gRPC
 *                completion queue and its thread, "the comm thread") that the server serves
 *                DT_COMM_METHOD on, and routes each incoming ring stream to the communicator with
 *                the stream's session id; unknown sessions are refused (NOT_FOUND) and the
 *                connecting side retries until its connect deadline.
 *   dt_comm      one group of ranks for one session (a job id + generation, a bench id). Rank r
 *                opens DT_COMM_STREAMS client streams to rank r+1 and accepts as many from r-1;
 *                every collective moves data one way around the ring, r -> r+1.
 *
 * Threads and ownership: the collectives are blocking and thread-safe; callers queue them and
 * they run one at a time, in submission order, driven by the events of the hub's comm thread
 * (which also reduces the received bytes). The caller's buffer is borrowed until its collective
 * is waited for; nothing else touches it. dt_comm_new blocks until the ring is connected (or its
 * connect deadline): call it from any thread but the libuv loop. dt_comm_abort is thread-safe.
 * The comm thread is also the daemon's gRPC poller (the rpc server's unary queue does not poll):
 * a message is read, parsed and reduced on this one thread, without a hand-off (threads blocked
 * in a unary call still take turns at polling, gRPC's epoll engine being process-wide); and the
 * hub keeps freed memory in the process (mallopt), so the read buffers gRPC allocates per message
 * reuse mapped pages rather than paying page faults and unmap IPIs each time.
 *
 * Algorithm (all-reduce): reduce-scatter then all-gather in rank order, 2(R-1) steps. Segments
 * of n/R floats are split into chunks (at most DT_COMM_CHUNK bytes, and small enough that each
 * stream carries one per step, down to 512 KiB); chunk m goes on stream m % DT_COMM_STREAMS and
 * a chunk is forwarded as soon as it is reduced (send, receive and reduce overlap). A rank sends
 * chunk m only once it has received m - L + 1 chunks: L = 1 between ranks on one host, so the
 * bytes are still in cache when they are reduced, and one chunk per stream across a network. Each
 * segment is summed along one chain and then copied everywhere, so every rank ends with the same
 * bits; with a 16-bit wire the owner rounds its segment through the wire format too. MEAN divides
 * once, at the owner.
 *
 * Small float32 all-reduces (R buffers within 512 KiB) wait on round trips, not bytes: they
 * gather every rank's whole buffer around the ring (R - 1 steps instead of 2(R - 1)) and each
 * rank sums them in rank order, the same additions in the same order everywhere.
 *
 * Copies per byte (f32 wire): the sender's gRPC slice points into the caller's buffer (0 copies
 * in user space, then the kernel's socket copy); the receiver's gRPC reads the socket into its
 * slices (1) and the comm thread reduces or copies straight from those slices into the
 * destination (1). With f16/bf16 one conversion pass replaces the zero-copy send; a gathered
 * all-reduce copies its (small) buffer into the gather area and each received one out of the
 * slices, then sums.
 *
 * Failures: every collective has a deadline. A broken stream (a peer died, kill -9) fails the
 * collective and poisons the comm; the error names the task ("worker:2 at 10.1.2.3:7001"). The
 * rank that saw it waits up to 1 s for a notice that names an earlier cause (a neighbour's link
 * breaks as a side effect when that neighbour gives up), then tells every other rank over a
 * pre-connected notice stream, so all survivors fail within about 1-2 s naming the dead task.
 * Later collectives of that comm fail at once; the daemon makes a new comm (new session) to go
 * on. A failed comm releases its streams at once, so gRPC lets go of the callers' buffers.
 */
#ifndef DT_COMM_COMM_H
#define DT_COMM_COMM_H

#include "core/status.h"
#include "rpc/rpc.h"

#include <stddef.h>
#include <stdint.h>

#define DT_COMM_METHOD  "/dtrain.v1.Comm/Ring"
#define DT_COMM_STREAMS 4            /* streams per neighbour (default) */
#define DT_COMM_CHUNK   (512u << 10) /* bytes per message, at most (see ring.c) */

typedef struct dt_comm_hub dt_comm_hub;
typedef struct dt_comm dt_comm;
typedef struct dt_comm_req dt_comm_req;

typedef enum dt_comm_op { DT_COMM_SUM, DT_COMM_MEAN } dt_comm_op;
typedef enum dt_comm_wire { DT_COMM_F32, DT_COMM_F16, DT_COMM_BF16 } dt_comm_wire;

/* Creates the hub (its comm thread starts). Give dt_comm_hub_streamq() to the rpc server's
 * opts (.stream_method = DT_COMM_METHOD) before the server starts. */
dt_status dt_comm_hub_new(dt_comm_hub **out, dt_err *err);
dt_rpc_streamq *dt_comm_hub_streamq(dt_comm_hub *h);
/* After the rpc server is freed and every comm of this hub is freed. NULL-safe. */
void dt_comm_hub_free(dt_comm_hub *h);

typedef struct dt_comm_opts {
    int rank, world;
    const char *const *addresses; /* by rank, "host:port" of each daemon */
    const char *const *names;     /* by rank, "worker:1" (NULL: "rank N") */
    const char *token;            /* NULL: none */
    uint64_t session;             /* the same on every rank, unique per group */
    dt_comm_hub *hub;             /* NULL only when world == 1 */
    int64_t connect_timeout_ms;   /* 0: 30 s */
    int streams;                  /* per neighbour; 0: DT_COMM_STREAMS */
    size_t chunk_bytes;           /* 0: DT_COMM_CHUNK */
} dt_comm_opts;

/* Connects the ring (blocking, bounded by connect_timeout_ms). Errors name the task that did not
 * answer. opts and its strings are copied. */
dt_status dt_comm_new(const dt_comm_opts *opts, dt_comm **out, dt_err *err);
/* Aborts what is pending, closes the streams, frees. NULL-safe. No collective may be running in
 * another thread. */
void dt_comm_free(dt_comm *c);
int dt_comm_rank(const dt_comm *c);
int dt_comm_world(const dt_comm *c);
/* How long (ms) every collective started on c has been finished, or -1 while one is queued or
 * running. A caller stuck in a wait on c for longer than this was not held up by the ring: its
 * own thread is not running (a watchdog's question). Thread-safe. */
int64_t dt_comm_idle_ms(dt_comm *c);
/* Nanoseconds c's collectives have spent running so far, each from when it started (after
 * those queued before it) to its end: they run one at a time, so this is c's busy time. Read it
 * before and after a stretch of work to get the wire's share of it. Thread-safe. */
uint64_t dt_comm_busy_ns(dt_comm *c);

/* In-place all-reduce of n floats: every rank ends with the same bits. */
dt_status dt_comm_allreduce(dt_comm *c, float *buf, size_t n, dt_comm_op op, dt_comm_wire wire,
                            int64_t timeout_ms, dt_err *err);
/* Copies root's bytes into every rank's buf. */
dt_status dt_comm_broadcast(dt_comm *c, void *buf, size_t bytes, int root, int64_t timeout_ms,
                            dt_err *err);
/* out (world * bytes) receives every rank's in, in rank order. in may lie inside out. */
dt_status dt_comm_allgather(dt_comm *c, const void *in, size_t bytes, void *out, int64_t timeout_ms,
                            dt_err *err);
/* Returns once every rank has entered it. */
dt_status dt_comm_barrier(dt_comm *c, int64_t timeout_ms, dt_err *err);

/* Asynchronous all-reduce: queued behind earlier collectives; buf is borrowed until
 * dt_comm_wait returns. timeout_ms counts from when it starts to run (after the collectives
 * queued before it); the comm thread enforces it even if nobody waits. */
dt_status dt_comm_allreduce_start(dt_comm *c, float *buf, size_t n, dt_comm_op op,
                                  dt_comm_wire wire, int64_t timeout_ms, dt_comm_req **req,
                                  dt_err *err);
/* Waits for req (at most timeout_ms) and frees it; on a timeout the comm is aborted (the ring
 * cannot be resynchronised), so the request still ends here. */
dt_status dt_comm_wait(dt_comm_req *req, int64_t timeout_ms, dt_err *err);

/* Fails what is pending and everything later with why; tells the other ranks. Thread-safe. */
void dt_comm_abort(dt_comm *c, const char *why);

/* Wire conversions (round to nearest even), exposed for tests. */
uint16_t dt_comm_f32_to_bf16(float f);
float dt_comm_bf16_to_f32(uint16_t h);
uint16_t dt_comm_f32_to_f16(float f);
float dt_comm_f16_to_f32(uint16_t h);

/* --- in-host collectives ------------------------------------------------------------------------
 *
 * dt_comm_local: the G replicas of one daemon (one trainer thread each) reduce among themselves,
 * as NCCL does among a host's GPUs. Made once per job for G members; every member calls from its
 * own thread and starts the same collectives in the same order (a collective is matched across
 * members by its position in that order, as NCCL matches calls on a communicator). Backends:
 * DT_COMM_LOCAL_SHM today (the members' buffers are read and written in place, in this
 * process's memory); NCCL would sit behind the same calls (buffers on the members' devices).
 *
 *     dt_comm_local *l;                        // once, before the member threads start
 *     dt_comm_local_new(&(dt_comm_local_opts){.members = 2}, &l, &err);
 *     // on member i's thread:
 *     dt_comm_local_req *q;
 *     dt_comm_local_start(l, i, DT_COMM_LOCAL_ALLREDUCE, buf, n, 30000, NULL, NULL, &q, &err);
 *     ...                                      // buf is the communicator's until the wait
 *     dt_comm_local_wait(q, 30000, &err);      // every member's buf: the same bits
 *     dt_comm_local_free(l);                   // once, after the member threads are done
 *
 * Shards: a buffer of n floats is cut into G shards of s = ceil(n / G) slots; shard j is
 * [j*s, j*s + s) clipped to n. The slots past n are padding worth zero: every shard is whole (the
 * same s on every member and host), but the padding is never stored, so a caller's buffer is its
 * n floats (a bucket of the flat gradient buffer) and never more. dt_comm_local_shard says where
 * a shard lies.
 *
 * Numerics: element k is summed once, by one thread, in member order ((b0 + b1) + b2) + ..., and
 * then copied, so every member ends with the same bits, equal to that fixed-order sum.
 *
 * Threads: a member's requests are its own (one thread per member). Collectives run on the
 * communicator's engine thread in order, each once all G members have started it; starting never
 * blocks. Deadlines: a collective that some members started and others did not within timeout_ms
 * of the first start fails on every member that started it, naming those that did not, and so
 * does each later one (the communicator is poisoned: a member that missed one collective cannot
 * be matched again). dt_comm_local_abort does the same from any thread. */

#define DT_COMM_LOCAL_MAX 64 /* members of one communicator, at most */

typedef struct dt_comm_local dt_comm_local;
typedef struct dt_comm_local_req dt_comm_local_req;

typedef enum dt_comm_local_op {
    DT_COMM_LOCAL_ALLREDUCE,      /* every member ends with the sum of every shard */
    DT_COMM_LOCAL_REDUCE_SCATTER, /* member i's shard i becomes the sum of shard i; the rest of
                                     its buffer is left as it was */
    DT_COMM_LOCAL_ALLGATHER,      /* shard j of member j is copied into every member's shard j */
    DT_COMM_LOCAL_BROADCAST,      /* dt_comm_local_broadcast only */
} dt_comm_local_op;

typedef enum dt_comm_local_backend { DT_COMM_LOCAL_SHM } dt_comm_local_backend;

typedef struct dt_comm_local_opts {
    int members;              /* G: 1..DT_COMM_LOCAL_MAX */
    const char *const *names; /* by member ("/cpu:1"); NULL: "member N". Copied. */
    dt_comm_local_backend backend;
} dt_comm_local_opts;

/* Makes the communicator and starts its engine thread. */
dt_status dt_comm_local_new(const dt_comm_local_opts *opts, dt_comm_local **out, dt_err *err);
/* Fails what is pending, stops the engine, frees. Every request must have been waited for (or
 * its member thread be gone for good). NULL-safe. */
void dt_comm_local_free(dt_comm_local *l);
int dt_comm_local_members(const dt_comm_local *l);
/* Nanoseconds the engine has spent running collectives (the memory passes), as
 * dt_comm_busy_ns. Thread-safe. */
uint64_t dt_comm_local_busy_ns(dt_comm_local *l);
/* As dt_comm_idle_ms for one member: -1 while a collective it has started is not finished,
 * else how long (ms) since a collective last finished. Never blocks (-1 when it cannot tell
 * at once). Thread-safe. */
int64_t dt_comm_local_idle_ms(dt_comm_local *l, int member);
/* Shard j of n floats: its first element and its length (0 when it lies wholly in padding). */
void dt_comm_local_shard(const dt_comm_local *l, size_t n, int j, size_t *off, size_t *len);

/* Member `member` starts its next collective on buf[0..n) (n the same on every member; the
 * members' buffers distinct). buf is borrowed until dt_comm_local_wait returns. then (optional)
 * runs on the engine thread once the collective has succeeded, its result in every buffer, and
 * before any waiter is released (a failed collective reports to its waiters only): the hook for
 * what follows a stage (the hierarchical all-reduce starts its host ring there); it must not
 * block. timeout_ms > 0 (see Deadlines above). *req is freed by dt_comm_local_wait. Thread: the
 * member's. */
dt_status dt_comm_local_start(dt_comm_local *l, int member, dt_comm_local_op op, float *buf,
                              size_t n, int64_t timeout_ms, void (*then)(void *ctx, dt_status st),
                              void *then_ctx, dt_comm_local_req **req, dt_err *err);
/* Waits for req, at most timeout_ms (then the communicator is aborted: the members cannot be
 * matched again), and frees it. */
dt_status dt_comm_local_wait(dt_comm_local_req *req, int64_t timeout_ms, dt_err *err);
/* start + wait. */
dt_status dt_comm_local_run(dt_comm_local *l, int member, dt_comm_local_op op, float *buf, size_t n,
                            int64_t timeout_ms, dt_err *err);
/* Copies member root's buf[0..bytes) into every other member's (blocking; a collective like the
 * others, in the same order, with the same deadline rules). */
dt_status dt_comm_local_broadcast(dt_comm_local *l, int member, void *buf, size_t bytes, int root,
                                  int64_t timeout_ms, dt_err *err);
/* Fails what is pending and everything later with why (DT_ECANCELED). Thread-safe. */
void dt_comm_local_abort(dt_comm_local *l, const char *why);

/* --- the hierarchical all-reduce -----------------------------------------------------------------
 *
 * dt_comm_hier: H hosts (daemons) x G replicas each, as MirroredStrategy inside a host and the
 * ring across hosts. An all-reduce of n floats, on member i of every host:
 *   1. in-host reduce-scatter (dt_comm_local): member i's shard i becomes its host's sum;
 *   2. host ring i (one dt_comm per local replica index: G rings across the hosts, in parallel,
 *      each on its own session and streams) all-reduces shard i of member i's buffer, started
 *      from the reduce-scatter's then-hook, so it runs while the members go on (backward);
 *   3. in-host all-gather, when the member waits.
 * Each host byte crosses the wire once per host (a 1/G shard per ring), not once per replica.
 * Every replica of every host ends with the same bits: each element is summed in its host in
 * member order, then around its ring in rank order, then copied. Against a flat ring over H*G
 * ranks it differs only by float32 reassociation (integer-valued data: exactly equal). With
 * H == 1 there is no ring and the all-reduce is the in-host one.
 *
 *     dt_comm_hier *h;                  // once per job, on every host, with its local comm
 *     dt_comm_hier_new(&(dt_comm_hier_opts){.local = l, .ring = host_ring_opts}, &h, &err);
 *     // member i, on its own thread, as with dt_comm_allreduce_start / dt_comm_wait:
 *     dt_comm_hier_allreduce_start(h, i, bucket, n, 120000, &q, &err);
 *     dt_comm_hier_wait(q, 120000, &err);
 *
 * Failures: a member's failure (a ring that broke, a replica that never came) aborts its host's
 * in-host comm, so its sibling members are released with the cause, and its host's rings, so the
 * other hosts learn it from the ring's notices and fail naming it. */

typedef struct dt_comm_hier dt_comm_hier;
typedef struct dt_comm_hier_req dt_comm_hier_req;

typedef struct dt_comm_hier_opts {
    dt_comm_local *local; /* borrowed, G members; must outlive the hier */
    /* The host ring: rank and world count hosts. Ring j uses a session derived from
     * ring.session and j (the same on every host); streams 0: DT_COMM_STREAMS / G (at least 1)
     * per ring, so G rings together keep about as many connections as one. */
    dt_comm_opts ring;
} dt_comm_hier_opts;

/* Connects the G host rings, one after the other (every host in the same order; blocking,
 * bounded by ring.connect_timeout_ms each). Call once per job on one thread of every host. */
dt_status dt_comm_hier_new(const dt_comm_hier_opts *opts, dt_comm_hier **out, dt_err *err);
/* Frees the rings (not the local comm). Every request waited for. NULL-safe. */
void dt_comm_hier_free(dt_comm_hier *h);
/* Member `member` starts an in-place SUM all-reduce of buf[0..n) over every replica of every
 * host (n the same everywhere). buf is borrowed until dt_comm_hier_wait returns; timeout_ms
 * bounds each stage. Thread: the member's. */
dt_status dt_comm_hier_allreduce_start(dt_comm_hier *h, int member, float *buf, size_t n,
                                       int64_t timeout_ms, dt_comm_hier_req **req, dt_err *err);
/* Waits for the ring and runs the in-host all-gather; frees req. Thread: the member's. */
dt_status dt_comm_hier_wait(dt_comm_hier_req *req, int64_t timeout_ms, dt_err *err);
dt_status dt_comm_hier_allreduce(dt_comm_hier *h, int member, float *buf, size_t n,
                                 int64_t timeout_ms, dt_err *err);
/* Copies the buffer of global replica root (host root / G, member root % G) to every replica:
 * over that member's host ring, then in each host. Blocking; every replica calls it. */
dt_status dt_comm_hier_broadcast(dt_comm_hier *h, int member, void *buf, size_t bytes, int root,
                                 int64_t timeout_ms, dt_err *err);
/* Busy time so far (dt_comm_busy_ns): the in-host comm's engine (every member's collectives;
 * they run together) and member's host ring (0 with one host). Thread-safe. */
void dt_comm_hier_busy_ns(dt_comm_hier *h, int member, uint64_t *in_host, uint64_t *ring);
/* As dt_comm_idle_ms for member's part: -1 while one of its in-host collectives or its host
 * ring's is unfinished, else the shorter of the two idle times. A member thread stuck in a
 * wait for longer than this is not held up by its siblings or the ring (the hung-trainer
 * watchdog's question, per replica). Thread-safe. */
int64_t dt_comm_hier_idle_ms(dt_comm_hier *h, int member);
/* Host ring j (NULL with one host), e.g. for a watchdog that aborts it. */
dt_comm *dt_comm_hier_ring(dt_comm_hier *h, int j);
/* Aborts the in-host comm and every host ring with why. Thread-safe. */
void dt_comm_hier_abort(dt_comm_hier *h, const char *why);
/* fn(arg) runs first in every dt_comm_hier_abort: another channel the members use beside this
 * one (NCCL among GPUs) is aborted with it, so whoever aborts the job's comm releases them all.
 * Set before the members start. */
void dt_comm_hier_on_abort(dt_comm_hier *h, void (*fn)(void *arg), void *arg);

#endif
