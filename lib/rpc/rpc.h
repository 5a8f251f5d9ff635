/*
 * rpc.h - a thin, typed layer over the gRPC core C API and protobuf-c.
 *
 * Server: listens on one address, runs one completion-queue thread, and hands every incoming
 * unary call to a handler on the caller's libuv loop thread. The handler answers exactly once,
 * with dt_rpc_call_reply() or dt_rpc_call_fail(), right away or later, from the loop thread.
 *
 *     dt_rpc_server_opts o = {.address = "127.0.0.1:7000", .loop = loop,
 *                             .handler = on_call, .ctx = d, .token = token};
 *     dt_rpc_server *srv;
 *     if (dt_rpc_server_new(&o, &srv, &err) != DT_OK) ...
 *     static void on_call(void *ctx, dt_rpc_call *call) {
 *         if (strcmp(dt_rpc_call_method(call), DT_RPC_CLUSTER_INFO) == 0) ...
 *     }
 *
 * Client: a channel per peer; dt_rpc_unary() blocks until the reply or the deadline, so call it
 * from a worker thread (uv_queue_work), never from the loop. Channels are thread-safe.
 *
 * Security: with a token, every call carries "authorization: Bearer <token>"; the server
 * compares it in constant time and answers UNAUTHENTICATED otherwise, before any handler runs.
 * Message sizes are capped at DT_MAX_RPC_MSG both ways.
 * Status mapping (client side): UNAVAILABLE -> DT_EPEER, DEADLINE_EXCEEDED -> DT_ETIMEDOUT,
 * UNAUTHENTICATED -> DT_EAUTH, INVALID_ARGUMENT -> DT_EINVAL, FAILED_PRECONDITION -> DT_ESTATE,
 * RESOURCE_EXHAUSTED -> DT_ETOOBIG, NOT_FOUND -> DT_ENOENT, UNIMPLEMENTED -> DT_ENOTSUP,
 * CANCELLED -> DT_ECANCELED, others -> DT_EPROTO; the server's message is kept in err.
 */
#ifndef DT_RPC_RPC_H
#define DT_RPC_RPC_H

#include "core/status.h"

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define DT_RPC_JOIN         "/dtrain.v1.Control/Join"
#define DT_RPC_HEARTBEAT    "/dtrain.v1.Control/Heartbeat"
#define DT_RPC_LEAVE        "/dtrain.v1.Control/Leave"
#define DT_RPC_CLUSTER_INFO "/dtrain.v1.Control/ClusterInfo"

/* Process-wide gRPC start; idempotent and thread-safe. */
void dt_rpc_global_init(void);

/* --- server ---------------------------------------------------------------------------------- */

typedef struct dt_rpc_server dt_rpc_server;
typedef struct dt_rpc_call dt_rpc_call;

/* Runs on the loop thread; owns nothing but must answer call exactly once. */
typedef void (*dt_rpc_handler)(void *ctx, dt_rpc_call *call);

typedef struct dt_rpc_server_opts {
    const char *address; /* "host:port" / "[v6]:port"; port 0 picks a free one */
    uv_loop_t *loop;     /* the handler runs on this loop's thread */
    dt_rpc_handler handler;
    void *ctx;
    const char *token; /* NULL or "": no authentication (loopback or --insecure) */
} dt_rpc_server_opts;

/* Binds and starts serving. Fails with DT_EADDRINUSE naming the address when it is taken or not
 * local. The token is copied. Call from the loop thread. */
dt_status dt_rpc_server_new(const dt_rpc_server_opts *opts, dt_rpc_server **out, dt_err *err);
/* The bound port (useful with port 0). */
int dt_rpc_server_port(const dt_rpc_server *srv);
/* Stops accepting, fails the calls not yet answered (UNAVAILABLE), joins the thread, frees.
 * Call from the loop thread; no dt_rpc_call of this server may be used afterwards. NULL-safe. */
void dt_rpc_server_free(dt_rpc_server *srv);

/* "/dtrain.v1.Control/Join". Valid until the call is answered. */
const char *dt_rpc_call_method(const dt_rpc_call *call);
/* "ipv4:127.0.0.1:53120", for logs only (never authenticated). */
const char *dt_rpc_call_peer(const dt_rpc_call *call);
/* Decodes the request into *msg (free with protobuf_c_message_free_unpacked). On a bad payload
 * the call is failed with INVALID_ARGUMENT and DT_EPROTO is returned: the caller must not answer.
 */
dt_status dt_rpc_call_unpack(dt_rpc_call *call, const ProtobufCMessageDescriptor *desc,
                             ProtobufCMessage **msg);
/* Answers with OK and the encoded message; frees the call. */
void dt_rpc_call_reply(dt_rpc_call *call, const ProtobufCMessage *msg);
/* Answers with the gRPC status matching st and message; frees the call. */
void dt_rpc_call_fail(dt_rpc_call *call, dt_status st, const char *message);

/* --- client ---------------------------------------------------------------------------------- */

typedef struct dt_rpc_channel dt_rpc_channel;

/* A channel to address ("host:port"); connects lazily. token may be NULL. Thread-safe. */
dt_status dt_rpc_channel_new(const char *address, const char *token, dt_rpc_channel **out,
                             dt_err *err);
const char *dt_rpc_channel_address(const dt_rpc_channel *ch);
void dt_rpc_channel_free(dt_rpc_channel *ch);

/* Sends req to method and waits at most timeout_ms for the reply, decoded with resp_desc into
 * *resp (free with protobuf_c_message_free_unpacked). Blocking: not on the loop thread. Errors
 * name the address and the method. */
dt_status dt_rpc_unary(dt_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       int64_t timeout_ms, dt_err *err);

/* Reads a token file: trimmed of trailing newlines, non-empty, at most DT_MAX_TOKEN bytes, not
 * readable by others (mode & 077 == 0 is advised: a warning otherwise). Caller frees *token. */
dt_status dt_rpc_token_load(const char *path, char **token, dt_err *err);

/* True when host is a loopback name or address ("127.x.y.z", "::1", "localhost"). */
int dt_rpc_host_is_loopback(const char *host);

#endif
