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
 *
 * Streams (stream.c) never touch the loop: a dt_rpc_streamq is a completion queue with its own
 * thread, and every event of its streams (client and server side) is handed to one callback on
 * that thread. A server given .stream_method and .streamq registers that method and the queue
 * before it starts (gRPC core needs both before grpc_server_start) and requests the method's calls
 * on the queue; they are authenticated there with the same token rule (UNAUTHENTICATED otherwise)
 * and delivered as DT_RPC_STREAM_INCOMING, which the callback answers at once with accept or
 * reject. Messages are raw bytes (no protobuf): a send points at the caller's memory (a gRPC slice
 * with a release callback, no copy); a received message is read slice by slice. gRPC allows one
 * send and one receive in flight per stream; the functions return false when one already is.
 */
#ifndef DT_RPC_RPC_H
#define DT_RPC_RPC_H

#include "core/status.h"

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define DT_RPC_JOIN         "/dtrain.v1.Control/Join"
#define DT_RPC_HEARTBEAT    "/dtrain.v1.Control/Heartbeat"
#define DT_RPC_LEAVE        "/dtrain.v1.Control/Leave"
#define DT_RPC_CLUSTER_INFO "/dtrain.v1.Control/ClusterInfo"

/* Process-wide gRPC start; idempotent and thread-safe. */
void dt_rpc_global_init(void);
/* Whether Abseil's debug-mode lock-graph checks were switched off at init (see common.c). */
bool dt_rpc_lock_checks_off(void);

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
    /* Optional: calls of this method are streams served on streamq (see below), not the loop. */
    const char *stream_method;
    struct dt_rpc_streamq *streamq;
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
/* The same, with a TCP connection of its own (bulk streams must not queue behind others). */
dt_status dt_rpc_channel_new_dedicated(const char *address, const char *token, dt_rpc_channel **out,
                                       dt_err *err);
const char *dt_rpc_channel_address(const dt_rpc_channel *ch);
/* Starts connecting now rather than at the first call. */
void dt_rpc_channel_connect(dt_rpc_channel *ch);
/* Unary calls through ch wait by looking for their answer every ms milliseconds, not inside
 * gRPC's poller (0: the default, inside it). With gRPC's epoll engine a thread waiting in the
 * poller reads any connection's data and then wakes that connection's owner: a benchmark's
 * long call waiting there took the ring's stream I/O over and made every message a hand-off
 * between threads (4 MB all-reduce, R = 2: 3.9 ms against 2.3). Only for long calls in a
 * process where another thread polls (a daemon's stream queue); the answer is then read by
 * that thread, and at the latest by the next look. */
void dt_rpc_channel_set_wait_interval(dt_rpc_channel *ch, int ms);
void dt_rpc_channel_free(dt_rpc_channel *ch);

/* Sends req to method and waits at most timeout_ms for the reply, decoded with resp_desc into
 * *resp (free with protobuf_c_message_free_unpacked). Blocking: not on the loop thread. Errors
 * name the address and the method. */
dt_status dt_rpc_unary(dt_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       int64_t timeout_ms, dt_err *err);

/* --- streams (stream.c) ------------------------------------------------------------------------
 */

typedef struct dt_rpc_streamq dt_rpc_streamq;
typedef struct dt_rpc_stream dt_rpc_stream;
typedef struct dt_rpc_msg dt_rpc_msg;

typedef enum dt_rpc_stream_ev {
    DT_RPC_STREAM_INCOMING, /* server: an authenticated new stream: accept or reject it now */
    DT_RPC_STREAM_OPENED,   /* client: ok = the server accepted; else status/message say why */
    DT_RPC_STREAM_SENT,     /* a send finished; ok = 0: the stream broke */
    DT_RPC_STREAM_RECEIVED, /* msg (the callback owns it), or msg NULL: end of stream / broken */
    DT_RPC_STREAM_CLOSED,   /* the call ended: status/message say how; no more data events */
    DT_RPC_STREAM_TICK,     /* every tick_ms, for deadlines (stream NULL) */
} dt_rpc_stream_ev;

typedef struct dt_rpc_stream_event {
    dt_rpc_stream_ev type;
    dt_rpc_stream *stream;
    void *user; /* the stream's user pointer */
    bool ok;
    dt_rpc_msg *msg;
    dt_status status;
    const char *message;
} dt_rpc_stream_event;

/* Runs on the queue's thread, one event at a time. */
typedef void (*dt_rpc_stream_fn)(void *ctx, const dt_rpc_stream_event *ev);

dt_status dt_rpc_streamq_new(dt_rpc_stream_fn fn, void *ctx, int tick_ms, dt_rpc_streamq **out,
                             dt_err *err);
/* Call after the servers using q are freed and every stream is released; joins the thread. */
void dt_rpc_streamq_free(dt_rpc_streamq *q);

/* Opens a client stream to method on ch; events go to q with user. md: NULL-terminated key,
 * value pairs sent as metadata (ASCII). timeout_ms <= 0: the stream lives until cancelled. */
dt_status dt_rpc_stream_open(dt_rpc_channel *ch, dt_rpc_streamq *q, const char *method,
                             const char *const *md, int64_t timeout_ms, void *user,
                             dt_rpc_stream **out, dt_err *err);
/* A metadata value of a server stream (copied into buf, NUL-terminated), or NULL. */
const char *dt_rpc_stream_meta(const dt_rpc_stream *s, const char *key, char *buf, size_t n);
const char *dt_rpc_stream_peer(const dt_rpc_stream *s);
void dt_rpc_stream_set_user(dt_rpc_stream *s, void *user);
/* Server, inside the INCOMING event only: accept (the client gets OPENED ok) or refuse with st. */
void dt_rpc_stream_accept(dt_rpc_stream *s);
void dt_rpc_stream_reject(dt_rpc_stream *s, dt_status st, const char *message);
/* Sends len bytes at p without copying them; release(arg) runs (any thread) once gRPC no longer
 * reads p. False (release not called) when a send is already in flight or the stream is over. */
bool dt_rpc_stream_send(dt_rpc_stream *s, const void *p, size_t len, void (*release)(void *),
                        void *arg);
/* Asks for the next message (RECEIVED event). False when a receive is already in flight. */
bool dt_rpc_stream_recv(dt_rpc_stream *s);
/* Ends the call now (CANCELLED on both sides); pending operations fail. Thread-safe. */
void dt_rpc_stream_cancel(dt_rpc_stream *s);
/* Client: no more messages from this side (the server's receive then ends). */
bool dt_rpc_stream_close_send(dt_rpc_stream *s);
/* Server: ends an accepted stream with OK. */
bool dt_rpc_stream_finish(dt_rpc_stream *s);
/* The caller is done with s: no more events for it; freed once gRPC is. Cancels it first. */
void dt_rpc_stream_release(dt_rpc_stream *s);
/* Like release, without cancelling: the call runs to its end or deadline on its own. */
void dt_rpc_stream_detach(dt_rpc_stream *s);

size_t dt_rpc_msg_len(const dt_rpc_msg *m);
/* The next slice of the message (no copy); false at the end. */
bool dt_rpc_msg_next(dt_rpc_msg *m, const uint8_t **p, size_t *len);
void dt_rpc_msg_free(dt_rpc_msg *m);

/* --- TLS (tls.c) -------------------------------------------------------------------------------
 *
 * One process-wide setting, made once at start-up before any channel or server exists and
 * read-only afterwards. Why not a field of every channel's and server's options: a process has
 * one identity (its certificate) and one trust anchor (the CA) for every connection it makes or
 * accepts -- cluster RPCs, ring streams, job RPCs, the CLI's calls -- and the channels are made
 * deep inside cluster, comm and jobs; a per-call option would have to be threaded through all of
 * them, and one forgotten path would silently talk plaintext. Set up, every dt_rpc_channel_new*
 * dials TLS and every dt_rpc_server_new serves TLS only. The token check runs on top, unchanged.
 *
 * Peers are dialed by "host:port" as TF_CONFIG (or --addr) writes it, and the peer's certificate
 * must carry that host as a subject alternative name (IP SAN for an address, DNS SAN for a name);
 * scripts/gen-tls.sh makes such certificates. Modes:
 *   cert + key + ca: MUTUAL. The server requires and verifies a client certificate signed by ca,
 *                    and channels verify servers against ca and present cert.
 *   cert + key:      ON. The server does not ask for client certificates; channels verify servers
 *                    against the system's CA roots and present cert.
 *   ca only:         ON, a client only (the CLI against a daemon that does not check clients).
 */
typedef struct dt_rpc_tls_opts {
    const char *cert_file; /* PEM certificate (chain), this process's identity; with key_file */
    const char *key_file;  /* PEM private key, unencrypted */
    const char *ca_file;   /* PEM CA certificate(s) that sign every peer's certificate */
} dt_rpc_tls_opts;

typedef enum dt_rpc_tls_mode { DT_RPC_TLS_OFF, DT_RPC_TLS_ON, DT_RPC_TLS_MUTUAL } dt_rpc_tls_mode;

/* Reads and checks the files (errors name the flag and the file: missing, unreadable, over
 * DT_MAX_PEM, not PEM, no certificate / private key block, an encrypted key), then turns TLS on.
 * What only a TLS stack can check -- the key matching the certificate, expiry, the CA's
 * signature, the SANs -- gRPC checks at each handshake; a failed call then says which peer, which
 * files and what to fix. All three NULL: stays off (DT_OK). DT_ESTATE once a channel or server
 * was made, or when already set up. Call from main() before starting threads. */
dt_status dt_rpc_tls_setup(const dt_rpc_tls_opts *o, dt_err *err);
dt_rpc_tls_mode dt_rpc_tls_get_mode(void);
const char *dt_rpc_tls_mode_name(dt_rpc_tls_mode m); /* "off", "on", "mutual" */

/* Reads a token file: trimmed of trailing newlines, non-empty, at most DT_MAX_TOKEN bytes, not
 * readable by others (mode & 077 == 0 is advised: a warning otherwise). Caller frees *token. */
dt_status dt_rpc_token_load(const char *path, char **token, dt_err *err);

/* True when host is a loopback name or address ("127.x.y.z", "::1", "localhost"). */
int dt_rpc_host_is_loopback(const char *host);

#endif
