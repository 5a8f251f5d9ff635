/*
 * server.c - the gRPC server of a daemon.
 *
 * Threads: the completion-queue thread (cq_main) owns the server's event stream; the loop thread
 * owns handlers and answers. A call moves through phases, each ended by one CQ event:
 *   REQUESTED --(new call)--> RECEIVING --(payload in)--> [queued to the loop] HANDLING
 *   --(reply/fail from the loop)--> FINISHING --(status sent)--> freed on the CQ thread.
 * An unauthenticated call skips straight to FINISHING. Calls waiting on the loop are kept in a
 * list so dt_rpc_server_free can fail them; the list and the inbox are guarded by mu.
 */
#include "rpc/rpc_internal.h"

#include "core/log.h"

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum call_phase {
    PHASE_REQUESTED,
    PHASE_RECEIVING,
    PHASE_HANDLING,
    PHASE_FINISHING,
} call_phase;

struct dt_rpc_call {
    dt_rpc_server *srv;
    call_phase phase;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_byte_buffer *reply;
    grpc_slice status_details;
    int cancelled;
    char method[128];
    char *peer;
    uint8_t *data;
    size_t len;
    dt_rpc_call *next; /* inbox / pending list */
};

struct dt_rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    int port;
    char *token;
    dt_rpc_streamq *streamq;
    dt_rpc_handler handler;
    void *ctx;
    uv_async_t async;
    pthread_mutex_t mu;
    dt_rpc_call *inbox;   /* received, not yet handed to the handler (CQ -> loop) */
    dt_rpc_call *pending; /* handed to the handler, not yet answered (loop only) */
    atomic_int stopping;
    /* Set when the queue is about to shut down: calls whose events still arrive (a cancelled
     * receive) are dropped instead of answered, since a batch started on a shut-down queue
     * aborts the process; the shutdown waits for a start already past the check. */
    atomic_bool closing;
    atomic_int starting;
    char shutdown_tag;
};

static dt_rpc_call *call_new(dt_rpc_server *srv)
{
    dt_rpc_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->srv = srv;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    return c;
}

static void call_free(dt_rpc_call *c)
{
    if (!c)
        return;
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->reply)
        grpc_byte_buffer_destroy(c->reply);
    grpc_slice_unref(c->status_details);
    if (c->peer)
        gpr_free(c->peer);
    free(c->data);
    free(c);
}

static void request_next(dt_rpc_server *srv)
{
    if (atomic_load(&srv->stopping))
        return;
    dt_rpc_call *c = call_new(srv);
    if (!c) {
        DT_ERROR("rpc", "out of memory: no longer accepting calls");
        return;
    }
    c->phase = PHASE_REQUESTED;
    grpc_call_error e =
        grpc_server_request_call(srv->server, &c->call, &c->details, &c->md, srv->cq, srv->cq, c);
    if (e != GRPC_CALL_OK) {
        DT_ERROR("rpc", "grpc_server_request_call failed (%d)", (int)e);
        call_free(c);
    }
}

/* Starts a batch of c's unless the queue is closing; false (c untouched) when it did not. */
static bool start_batch(dt_rpc_call *c, const grpc_op *ops, size_t n)
{
    dt_rpc_server *srv = c->srv;
    atomic_fetch_add(&srv->starting, 1);
    bool ok = !atomic_load(&srv->closing) &&
              grpc_call_start_batch(c->call, ops, n, c, NULL) == GRPC_CALL_OK;
    atomic_fetch_sub(&srv->starting, 1);
    return ok;
}

/* Sends the final status (and reply when OK). Any thread; the call must be in no other batch. */
static void call_finish(dt_rpc_call *c, grpc_status_code code, const char *message)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (c->phase == PHASE_REQUESTED) {
        /* Initial metadata not sent yet (auth failure path). */
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
    }
    if (code == GRPC_STATUS_OK && c->reply) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->reply;
        n++;
    }
    c->status_details = grpc_slice_from_copied_string(message ? message : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
    n++;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
    n++;
    c->phase = PHASE_FINISHING;
    if (!start_batch(c, ops, n)) {
        if (!atomic_load(&c->srv->closing))
            DT_WARN("rpc", "%s: could not send the answer", c->method);
        call_free(c);
    }
}

static void on_new_call(dt_rpc_server *srv, dt_rpc_call *c)
{
    request_next(srv);
    size_t mlen = GRPC_SLICE_LENGTH(c->details.method);
    if (mlen >= sizeof c->method)
        mlen = sizeof c->method - 1;
    memcpy(c->method, GRPC_SLICE_START_PTR(c->details.method), mlen);
    c->method[mlen] = '\0';
    c->peer = grpc_call_get_peer(c->call);
    if (!dt__rpc_auth_ok(&c->md, srv->token)) {
        if (dt__rpc_refusal_log_ok(c->peer))
            DT_WARN("rpc", "refused %s from %s: missing or wrong cluster token", c->method,
                    c->peer ? c->peer : "?");
        call_finish(c, GRPC_STATUS_UNAUTHENTICATED,
                    "missing or wrong cluster token: use the token file this daemon was "
                    "started with (--token-file)");
        return;
    }
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_MESSAGE;
    ops[1].data.recv_message.recv_message = &c->payload;
    c->phase = PHASE_RECEIVING;
    if (!start_batch(c, ops, 2)) {
        if (!atomic_load(&srv->closing))
            DT_WARN("rpc", "%s: could not start receiving", c->method);
        call_free(c);
    }
}

static void on_received(dt_rpc_server *srv, dt_rpc_call *c)
{
    if (dt__rpc_buffer_flatten(c->payload, &c->data, &c->len) != DT_OK) {
        call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "could not read the request");
        return;
    }
    c->phase = PHASE_HANDLING;
    pthread_mutex_lock(&srv->mu);
    c->next = srv->inbox;
    srv->inbox = c;
    pthread_mutex_unlock(&srv->mu);
    uv_async_send(&srv->async);
}

static void *cq_main(void *arg)
{
    dt_rpc_server *srv = arg;
    pthread_setname_np(pthread_self(), "dt-rpc");
    for (;;) {
        /* A bounded wait, so a wedged queue shows up in a stack dump as this loop, not a hang. */
        grpc_event ev = grpc_completion_queue_next(srv->cq, dt__rpc_deadline_ms(1000), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        dt__rpc_refusals_flush();
        if (ev.type == GRPC_QUEUE_TIMEOUT)
            continue;
        if (ev.tag == &srv->shutdown_tag) {
            atomic_store(&srv->closing, true);
            while (atomic_load(&srv->starting) > 0)
                sched_yield();
            grpc_completion_queue_shutdown(srv->cq);
            continue;
        }
        dt_rpc_call *c = ev.tag;
        switch (c->phase) {
        case PHASE_REQUESTED:
            if (!ev.success) {
                call_free(c); /* server shutting down */
                break;
            }
            on_new_call(srv, c);
            break;
        case PHASE_RECEIVING:
            if (!ev.success || !c->payload) {
                /* Client went away (or sent no message): nothing to answer. */
                call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
                break;
            }
            on_received(srv, c);
            break;
        case PHASE_FINISHING:
        default:
            call_free(c);
            break;
        }
    }
    return NULL;
}

/* Loop thread: hands received calls to the handler in arrival order. */
static void on_async(uv_async_t *h)
{
    dt_rpc_server *srv = h->data;
    pthread_mutex_lock(&srv->mu);
    dt_rpc_call *list = srv->inbox;
    srv->inbox = NULL;
    pthread_mutex_unlock(&srv->mu);
    /* The inbox is LIFO; reverse it for arrival order. */
    dt_rpc_call *rev = NULL;
    while (list) {
        dt_rpc_call *n = list->next;
        list->next = rev;
        rev = list;
        list = n;
    }
    while (rev) {
        dt_rpc_call *c = rev;
        rev = c->next;
        if (atomic_load(&srv->stopping)) {
            call_finish(c, GRPC_STATUS_UNAVAILABLE, "daemon is shutting down");
            continue;
        }
        pthread_mutex_lock(&srv->mu);
        c->next = srv->pending;
        srv->pending = c;
        pthread_mutex_unlock(&srv->mu);
        srv->handler(srv->ctx, c);
    }
}

static void pending_remove(dt_rpc_server *srv, dt_rpc_call *c)
{
    pthread_mutex_lock(&srv->mu);
    for (dt_rpc_call **p = &srv->pending; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&srv->mu);
}

dt_status dt_rpc_server_new(const dt_rpc_server_opts *opts, dt_rpc_server **out, dt_err *err)
{
    dt_rpc_global_init();
    dt_rpc_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    srv->handler = opts->handler;
    srv->ctx = opts->ctx;
    srv->token = opts->token && *opts->token ? strdup(opts->token) : NULL;
    pthread_mutex_init(&srv->mu, NULL);
    grpc_channel_args *args = dt__rpc_args_new(1);
    srv->server = grpc_server_create(args, NULL);
    dt__rpc_args_free(args);
    if (opts->stream_method && opts->streamq) {
        /* gRPC's epoll engine lets any thread waiting on a polling queue do any connection's
         * I/O, then wake the queue's owner: with two polling threads every stream message paid a
         * hand-off. The stream queue polls for both; this queue only collects unary events. */
        grpc_completion_queue_attributes attr = {GRPC_CQ_CURRENT_VERSION, GRPC_CQ_NEXT,
                                                 GRPC_CQ_NON_POLLING, NULL};
        srv->cq =
            grpc_completion_queue_create(grpc_completion_queue_factory_lookup(&attr), &attr, NULL);
    } else {
        srv->cq = grpc_completion_queue_create_for_next(NULL);
    }
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
    void *stream_rm = NULL;
    if (opts->stream_method && opts->streamq)
        stream_rm = dt__rpc_streamq_register(opts->streamq, srv->server, opts->stream_method);
    dt__rpc_tls_freeze();
    grpc_server_credentials *creds = dt__rpc_server_creds(opts->address, err);
    srv->port = creds ? grpc_server_add_http2_port(srv->server, opts->address, creds) : 0;
    if (creds)
        grpc_server_credentials_release(creds);
    if (srv->port == 0) {
        grpc_server_destroy(srv->server);
        grpc_completion_queue_shutdown(srv->cq);
        grpc_completion_queue_destroy(srv->cq);
        pthread_mutex_destroy(&srv->mu);
        free(srv->token);
        free(srv);
        if (!creds)
            return err ? err->code : DT_EINVAL;
        dt_status tls_st = dt__rpc_tls_listen_failed(opts->address, err);
        if (tls_st != DT_OK)
            return tls_st;
        return dt_err_set(err, DT_EADDRINUSE,
                          "cannot listen on %s: the port is in use or the address is not one of "
                          "this host's; stop the other process or fix the address in TF_CONFIG",
                          opts->address);
    }
    grpc_server_start(srv->server);
    if (stream_rm) {
        srv->streamq = opts->streamq;
        dt__rpc_streamq_serve(opts->streamq, srv->server, stream_rm, srv->token);
    }
    uv_async_init(opts->loop, &srv->async, on_async);
    srv->async.data = srv;
    request_next(srv);
    if (pthread_create(&srv->thread, NULL, cq_main, srv) != 0) {
        /* Unreachable in practice; fail loudly rather than serve nothing. */
        DT_ASSERT(0, ==, 1);
    }
    *out = srv;
    return DT_OK;
}

int dt_rpc_server_port(const dt_rpc_server *srv)
{
    return srv->port;
}

static void on_async_closed(uv_handle_t *h)
{
    dt_rpc_server *srv = h->data;
    pthread_mutex_destroy(&srv->mu);
    free(srv->token);
    free(srv);
}

void dt_rpc_server_free(dt_rpc_server *srv)
{
    if (!srv)
        return;
    atomic_store(&srv->stopping, 1);
    /* Answer every call the loop holds or has yet to see: a call held unanswered keeps its
     * channel alive, and server shutdown would wait for it. */
    pthread_mutex_lock(&srv->mu);
    dt_rpc_call *lists[2] = {srv->pending, srv->inbox};
    srv->pending = srv->inbox = NULL;
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < 2; i++) {
        dt_rpc_call *c = lists[i];
        while (c) {
            dt_rpc_call *n = c->next;
            call_finish(c, GRPC_STATUS_UNAVAILABLE, "daemon is shutting down");
            c = n;
        }
    }
    if (srv->streamq)
        dt__rpc_streamq_unserve(srv->streamq);
    grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->shutdown_tag);
    grpc_server_cancel_all_calls(srv->server);
    pthread_join(srv->thread, NULL);
    grpc_server_destroy(srv->server);
    grpc_completion_queue_destroy(srv->cq);
    uv_close((uv_handle_t *)&srv->async, on_async_closed);
}

const char *dt_rpc_call_method(const dt_rpc_call *call)
{
    return call->method;
}

const char *dt_rpc_call_peer(const dt_rpc_call *call)
{
    return call->peer ? call->peer : "unknown peer";
}

dt_status dt_rpc_call_unpack(dt_rpc_call *call, const ProtobufCMessageDescriptor *desc,
                             ProtobufCMessage **msg)
{
    *msg = protobuf_c_message_unpack(desc, NULL, call->len, call->data);
    if (!*msg) {
        char m[256];
        snprintf(m, sizeof m, "%s: the request is not a valid %s message", call->method,
                 desc->name);
        dt_rpc_call_fail(call, DT_EINVAL, m);
        return DT_EPROTO;
    }
    return DT_OK;
}

void dt_rpc_call_reply(dt_rpc_call *call, const ProtobufCMessage *msg)
{
    pending_remove(call->srv, call);
    call->reply = dt__rpc_buffer_pack(msg);
    call_finish(call, GRPC_STATUS_OK, NULL);
}

void dt_rpc_call_fail(dt_rpc_call *call, dt_status st, const char *message)
{
    pending_remove(call->srv, call);
    call_finish(call, dt__rpc_status_to_grpc(st), message);
}
