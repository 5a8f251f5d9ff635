/*
 * stream.c - long-lived gRPC streams of raw bytes, driven by a completion queue of their own.
 *
 * Threads: a dt_rpc_streamq owns one "next" completion queue and the thread that drains it; every
 * event of its streams is handed to the queue's callback on that thread. Users may start a send
 * or a receive from any thread (grpc_call_start_batch is thread-safe); the flags that allow one
 * of each in flight are atomics.
 * Ownership: a stream holds one reference for its user and one per batch in flight; it is freed
 * on the queue thread when the last one goes. After dt_rpc_stream_release no event reaches the
 * user. A server stream that is refused is released by the refusal.
 */
#include "rpc/rpc_internal.h"

#include "core/log.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACCEPT_KEY       "dt-accepted"
#define STREAM_MAX_MD    8
#define SERVER_REQUESTED 8 /* new-call requests kept outstanding */

typedef enum op_kind {
    OP_NEW,    /* server: a call arrived */
    OP_OPEN,   /* client: initial metadata sent and the server's received */
    OP_STATUS, /* client: status; server: close */
    OP_SEND,
    OP_RECV,
    OP_MD,     /* server: accept metadata sent */
    OP_FINISH, /* server: refusal or end sent */
    OP_CLOSE,  /* client: half-close sent */
    OP_COUNT
} op_kind;

typedef struct stream_op {
    dt_rpc_stream *s;
    op_kind kind;
} stream_op;

struct dt_rpc_stream {
    dt_rpc_streamq *q;
    grpc_call *call;
    int server;
    void *user;
    atomic_int refs;
    atomic_bool released;
    atomic_int sending, receiving;
    stream_op ops[OP_COUNT];
    grpc_byte_buffer *sbuf, *rbuf;
    grpc_metadata_array md_in;
    grpc_metadata_array trailing;
    grpc_metadata md_out[STREAM_MAX_MD + 1];
    size_t nmd_out;
    grpc_status_code code;
    grpc_slice details;
    const char *error_string;
    int cancelled;
    int opened, status_seen, rejected;
    gpr_timespec deadline;
    char *peer;
};

struct dt_rpc_streamq {
    grpc_completion_queue *cq;
    pthread_t thread;
    dt_rpc_stream_fn fn;
    void *ctx;
    int tick_ms;
    pthread_mutex_t mu; /* guards the server binding below */
    grpc_server *server;
    void *rm;
    char *token;
    /* Closing: batches are refused from then on, and the queue is shut down only once no
     * start is under way (a batch started on a shut-down queue aborts the process). */
    atomic_bool closing;
    atomic_int starting;
};

struct dt_rpc_msg {
    grpc_byte_buffer *bb;
    grpc_byte_buffer_reader reader;
    grpc_slice cur;
    int has_cur;
    size_t len;
    size_t off, piece; /* piece > 0: hand cur out in pieces of at most this many bytes */
};

/* DT_RPC_SPLIT_SLICES=N (tests only) hands received messages out in pieces of at most N bytes,
 * so readers prove they handle values split across slices, which gRPC may produce any time. */
static size_t split_pieces(void)
{
    static atomic_long cached = -1;
    long v = atomic_load(&cached);
    if (v < 0) {
        const char *e = getenv("DT_RPC_SPLIT_SLICES");
        v = e ? atol(e) : 0;
        atomic_store(&cached, v > 0 ? v : 0);
    }
    return (size_t)v;
}

static dt_rpc_stream *stream_new(dt_rpc_streamq *q, int server)
{
    dt_rpc_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->q = q;
    s->server = server;
    for (int i = 0; i < OP_COUNT; i++) {
        s->ops[i].s = s;
        s->ops[i].kind = (op_kind)i;
    }
    grpc_metadata_array_init(&s->md_in);
    grpc_metadata_array_init(&s->trailing);
    s->details = grpc_empty_slice();
    return s;
}

static void md_out_free(dt_rpc_stream *s)
{
    for (size_t i = 0; i < s->nmd_out; i++) {
        grpc_slice_unref(s->md_out[i].key);
        grpc_slice_unref(s->md_out[i].value);
    }
    s->nmd_out = 0;
}

static void stream_free(dt_rpc_stream *s)
{
    if (s->call)
        grpc_call_unref(s->call);
    grpc_metadata_array_destroy(&s->md_in);
    grpc_metadata_array_destroy(&s->trailing);
    md_out_free(s);
    grpc_slice_unref(s->details);
    if (s->error_string)
        gpr_free((void *)s->error_string);
    if (s->sbuf)
        grpc_byte_buffer_destroy(s->sbuf);
    if (s->rbuf)
        grpc_byte_buffer_destroy(s->rbuf);
    if (s->peer)
        gpr_free(s->peer);
    free(s);
}

static void stream_unref(dt_rpc_stream *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        stream_free(s);
}

/* Starts one batch holding a reference; false when gRPC refuses it or the queue is closing. */
static bool start(dt_rpc_stream *s, const grpc_op *ops, size_t n, op_kind kind)
{
    dt_rpc_streamq *q = s->q;
    atomic_fetch_add(&q->starting, 1);
    bool ok = !atomic_load(&q->closing);
    if (ok) {
        atomic_fetch_add(&s->refs, 1);
        ok = grpc_call_start_batch(s->call, ops, n, &s->ops[kind], NULL) == GRPC_CALL_OK;
        if (!ok)
            atomic_fetch_sub(&s->refs, 1);
    }
    atomic_fetch_sub(&q->starting, 1);
    return ok;
}

static void deliver(dt_rpc_stream *s, dt_rpc_stream_ev type, bool ok, dt_rpc_msg *msg, dt_status st,
                    const char *message)
{
    if (atomic_load(&s->released)) {
        dt_rpc_msg_free(msg);
        return;
    }
    dt_rpc_stream_event ev = {.type = type,
                              .stream = s,
                              .user = s->user,
                              .ok = ok,
                              .msg = msg,
                              .status = st,
                              .message = message};
    s->q->fn(s->q->ctx, &ev);
}

static void request_call(dt_rpc_streamq *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->server) {
        dt_rpc_stream *s = stream_new(q, 1);
        if (s) {
            atomic_store(&s->refs, 1);
            grpc_byte_buffer **no_payload = NULL;
            grpc_call_error e = grpc_server_request_registered_call(
                q->server, q->rm, &s->call, &s->deadline, &s->md_in, no_payload, q->cq, q->cq,
                &s->ops[OP_NEW]);
            if (e != GRPC_CALL_OK) {
                DT_ERROR("rpc", "cannot request stream calls (%d)", (int)e);
                stream_free(s);
            }
        }
    }
    pthread_mutex_unlock(&q->mu);
}

/* Sends a final status (server side): the refusal path. */
static void server_finish(dt_rpc_stream *s, grpc_status_code code, const char *message)
{
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    grpc_slice_unref(s->details);
    s->details = grpc_slice_from_copied_string(message ? message : "");
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = code;
    ops[1].data.send_status_from_server.status_details = &s->details;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &s->cancelled;
    if (!start(s, ops, 3, OP_FINISH))
        grpc_call_cancel(s->call, NULL);
}

static void on_new(dt_rpc_stream *s, bool ok)
{
    dt_rpc_streamq *q = s->q;
    if (!ok)
        return; /* server shutting down: the batch reference frees it */
    request_call(q);
    s->peer = grpc_call_get_peer(s->call);
    atomic_fetch_add(&s->refs, 1); /* the user's */
    if (!dt__rpc_auth_ok(&s->md_in, q->token)) {
        if (dt__rpc_refusal_log_ok(s->peer))
            DT_WARN("rpc", "refused a stream from %s: missing or wrong cluster token",
                    s->peer ? s->peer : "?");
        atomic_store(&s->released, true);
        server_finish(s, GRPC_STATUS_UNAUTHENTICATED,
                      "missing or wrong cluster token: use the token file this daemon was "
                      "started with (--token-file)");
        stream_unref(s);
        return;
    }
    deliver(s, DT_RPC_STREAM_INCOMING, true, NULL, DT_OK, NULL);
    if (!s->opened && !s->rejected) {
        /* The callback neither accepted nor refused: refuse, so the client is not left waiting. */
        atomic_store(&s->released, true);
        server_finish(s, GRPC_STATUS_UNAVAILABLE, "nobody takes this stream here");
        stream_unref(s);
    }
}

static bool md_has(const grpc_metadata_array *md, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < md->count; i++)
        if (GRPC_SLICE_LENGTH(md->metadata[i].key) == kl &&
            memcmp(GRPC_SLICE_START_PTR(md->metadata[i].key), key, kl) == 0)
            return true;
    return false;
}

static void on_status(dt_rpc_stream *s)
{
    s->status_seen = 1;
    dt_status st;
    char msg[512];
    if (s->server) {
        st = s->cancelled ? DT_ECANCELED : DT_OK;
        snprintf(msg, sizeof msg, "%s", s->cancelled ? "the peer ended the stream" : "closed");
    } else {
        st = dt__rpc_status_from_grpc(s->code);
        char *d = grpc_slice_to_c_string(s->details);
        snprintf(msg, sizeof msg, "%s", d && *d ? d : dt_status_str(st));
        gpr_free(d);
    }
    if (!s->server && !s->opened)
        deliver(s, DT_RPC_STREAM_OPENED, false, NULL, st == DT_OK ? DT_EPROTO : st, msg);
    else
        deliver(s, DT_RPC_STREAM_CLOSED, st == DT_OK, NULL, st, msg);
}

static void handle(dt_rpc_stream *s, op_kind kind, bool ok)
{
    switch (kind) {
    case OP_NEW:
        on_new(s, ok);
        break;
    case OP_OPEN:
        md_out_free(s);
        if (ok && !s->status_seen && md_has(&s->md_in, ACCEPT_KEY)) {
            s->opened = 1;
            deliver(s, DT_RPC_STREAM_OPENED, true, NULL, DT_OK, NULL);
        }
        break;
    case OP_STATUS:
        on_status(s);
        break;
    case OP_SEND:
        if (s->sbuf)
            grpc_byte_buffer_destroy(s->sbuf);
        s->sbuf = NULL;
        atomic_store(&s->sending, 0);
        deliver(s, DT_RPC_STREAM_SENT, ok, NULL, ok ? DT_OK : DT_EPEER, NULL);
        break;
    case OP_RECV: {
        dt_rpc_msg *m = NULL;
        if (ok && s->rbuf) {
            m = calloc(1, sizeof *m);
            if (m && grpc_byte_buffer_reader_init(&m->reader, s->rbuf)) {
                m->bb = s->rbuf;
                m->len = grpc_byte_buffer_length(s->rbuf);
                m->piece = split_pieces();
                s->rbuf = NULL;
            } else {
                free(m);
                m = NULL;
            }
        }
        if (s->rbuf)
            grpc_byte_buffer_destroy(s->rbuf);
        s->rbuf = NULL;
        atomic_store(&s->receiving, 0);
        deliver(s, DT_RPC_STREAM_RECEIVED, m != NULL, m, m ? DT_OK : DT_EPEER, NULL);
        break;
    }
    case OP_MD:
    case OP_FINISH:
    default:
        break;
    }
    stream_unref(s);
}

static void *streamq_main(void *arg)
{
    dt_rpc_streamq *q = arg;
    pthread_setname_np(pthread_self(), "dt-comm");
    gpr_timespec next_tick = dt__rpc_deadline_ms(q->tick_ms);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(q->cq, next_tick, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE) {
            stream_op *op = ev.tag;
            handle(op->s, op->kind, ev.success != 0);
        }
        if (gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), next_tick) >= 0) {
            next_tick = dt__rpc_deadline_ms(q->tick_ms);
            dt__rpc_refusals_flush();
            dt_rpc_stream_event tick = {.type = DT_RPC_STREAM_TICK, .ok = true};
            q->fn(q->ctx, &tick);
        }
    }
    return NULL;
}

dt_status dt_rpc_streamq_new(dt_rpc_stream_fn fn, void *ctx, int tick_ms, dt_rpc_streamq **out,
                             dt_err *err)
{
    dt_rpc_global_init();
    dt_rpc_streamq *q = calloc(1, sizeof *q);
    if (!q)
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    q->fn = fn;
    q->ctx = ctx;
    q->tick_ms = tick_ms > 0 ? tick_ms : 100;
    pthread_mutex_init(&q->mu, NULL);
    q->cq = grpc_completion_queue_create_for_next(NULL);
    if (pthread_create(&q->thread, NULL, streamq_main, q) != 0) {
        grpc_completion_queue_shutdown(q->cq);
        grpc_completion_queue_destroy(q->cq);
        pthread_mutex_destroy(&q->mu);
        free(q);
        return dt_err_set(err, DT_ENOMEM, "rpc: cannot start the stream thread");
    }
    *out = q;
    return DT_OK;
}

void dt_rpc_streamq_free(dt_rpc_streamq *q)
{
    if (!q)
        return;
    dt__rpc_streamq_unserve(q);
    /* Event handlers still running on the queue's thread may try to send or finish: they are
     * refused from here on, and the shutdown waits for a start already past the check. */
    atomic_store(&q->closing, true);
    while (atomic_load(&q->starting) > 0)
        sched_yield();
    grpc_completion_queue_shutdown(q->cq);
    pthread_join(q->thread, NULL);
    grpc_completion_queue_destroy(q->cq);
    pthread_mutex_destroy(&q->mu);
    free(q->token);
    free(q);
}

void *dt__rpc_streamq_register(dt_rpc_streamq *q, grpc_server *server, const char *method)
{
    grpc_server_register_completion_queue(server, q->cq, NULL);
    return grpc_server_register_method(server, method, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
}

void dt__rpc_streamq_serve(dt_rpc_streamq *q, grpc_server *server, void *rm, const char *token)
{
    pthread_mutex_lock(&q->mu);
    q->server = server;
    q->rm = rm;
    free(q->token);
    q->token = token ? strdup(token) : NULL;
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < SERVER_REQUESTED; i++)
        request_call(q);
}

void dt__rpc_streamq_unserve(dt_rpc_streamq *q)
{
    pthread_mutex_lock(&q->mu);
    q->server = NULL;
    pthread_mutex_unlock(&q->mu);
}

dt_status dt_rpc_stream_open(dt_rpc_channel *ch, dt_rpc_streamq *q, const char *method,
                             const char *const *md, int64_t timeout_ms, void *user,
                             dt_rpc_stream **out, dt_err *err)
{
    dt_rpc_stream *s = stream_new(q, 0);
    if (!s)
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    s->user = user;
    atomic_store(&s->refs, 1);
    gpr_timespec deadline =
        timeout_ms > 0 ? dt__rpc_deadline_ms(timeout_ms) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    s->call =
        grpc_channel_create_call(dt__rpc_channel_raw(ch), NULL, GRPC_PROPAGATE_DEFAULTS, q->cq,
                                 grpc_slice_from_static_string(method), NULL, deadline, NULL);
    const char *auth = dt__rpc_channel_auth(ch);
    if (auth) {
        s->md_out[s->nmd_out].key = grpc_slice_from_static_string("authorization");
        s->md_out[s->nmd_out++].value = grpc_slice_from_copied_string(auth);
    }
    for (size_t i = 0; md && md[i] && md[i + 1] && s->nmd_out < STREAM_MAX_MD; i += 2) {
        s->md_out[s->nmd_out].key = grpc_slice_from_copied_string(md[i]);
        s->md_out[s->nmd_out++].value = grpc_slice_from_copied_string(md[i + 1]);
    }
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = s->nmd_out;
    ops[0].data.send_initial_metadata.metadata = s->md_out;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
    grpc_op st[1];
    memset(st, 0, sizeof st);
    st[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st[0].data.recv_status_on_client.trailing_metadata = &s->trailing;
    st[0].data.recv_status_on_client.status = &s->code;
    st[0].data.recv_status_on_client.status_details = &s->details;
    st[0].data.recv_status_on_client.error_string = &s->error_string;
    if (!s->call || !start(s, ops, 2, OP_OPEN)) {
        stream_unref(s);
        return dt_err_set(err, DT_EPROTO, "%s: cannot open a stream", dt_rpc_channel_address(ch));
    }
    if (!start(s, st, 1, OP_STATUS)) {
        grpc_call_cancel(s->call, NULL);
        dt_rpc_stream_release(s);
        return dt_err_set(err, DT_EPROTO, "%s: cannot open a stream", dt_rpc_channel_address(ch));
    }
    *out = s;
    return DT_OK;
}

const char *dt_rpc_stream_meta(const dt_rpc_stream *s, const char *key, char *buf, size_t n)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < s->md_in.count; i++) {
        const grpc_metadata *m = &s->md_in.metadata[i];
        if (GRPC_SLICE_LENGTH(m->key) != kl || memcmp(GRPC_SLICE_START_PTR(m->key), key, kl))
            continue;
        size_t vl = GRPC_SLICE_LENGTH(m->value);
        if (vl >= n)
            vl = n - 1;
        memcpy(buf, GRPC_SLICE_START_PTR(m->value), vl);
        buf[vl] = '\0';
        return buf;
    }
    return NULL;
}

const char *dt_rpc_stream_peer(const dt_rpc_stream *s)
{
    return s->peer ? s->peer : "unknown peer";
}

void dt_rpc_stream_set_user(dt_rpc_stream *s, void *user)
{
    s->user = user;
}

void dt_rpc_stream_accept(dt_rpc_stream *s)
{
    s->opened = 1;
    s->md_out[0].key = grpc_slice_from_static_string(ACCEPT_KEY);
    s->md_out[0].value = grpc_slice_from_static_string("1");
    s->nmd_out = 1;
    grpc_op md[1], close[1];
    memset(md, 0, sizeof md);
    memset(close, 0, sizeof close);
    md[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    md[0].data.send_initial_metadata.count = 1;
    md[0].data.send_initial_metadata.metadata = s->md_out;
    close[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close[0].data.recv_close_on_server.cancelled = &s->cancelled;
    if (!start(s, md, 1, OP_MD) || !start(s, close, 1, OP_STATUS))
        grpc_call_cancel(s->call, NULL);
}

void dt_rpc_stream_reject(dt_rpc_stream *s, dt_status st, const char *message)
{
    s->rejected = 1;
    atomic_store(&s->released, true);
    server_finish(s, dt__rpc_status_to_grpc(st), message);
    stream_unref(s);
}

static void no_release(void *arg)
{
    (void)arg;
}

bool dt_rpc_stream_send(dt_rpc_stream *s, const void *p, size_t len, void (*release)(void *),
                        void *arg)
{
    if (atomic_exchange(&s->sending, 1))
        return false;
    grpc_slice sl;
    if (len == 0) {
        sl = grpc_empty_slice();
        if (release)
            release(arg);
    } else {
        sl = grpc_slice_new_with_user_data((void *)p, len, release ? release : no_release, arg);
    }
    s->sbuf = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    grpc_op op[1];
    memset(op, 0, sizeof op);
    op[0].op = GRPC_OP_SEND_MESSAGE;
    op[0].data.send_message.send_message = s->sbuf;
    if (!start(s, op, 1, OP_SEND)) {
        grpc_byte_buffer_destroy(s->sbuf);
        s->sbuf = NULL;
        atomic_store(&s->sending, 0);
        return false;
    }
    return true;
}

bool dt_rpc_stream_recv(dt_rpc_stream *s)
{
    if (atomic_exchange(&s->receiving, 1))
        return false;
    grpc_op op[1];
    memset(op, 0, sizeof op);
    op[0].op = GRPC_OP_RECV_MESSAGE;
    op[0].data.recv_message.recv_message = &s->rbuf;
    if (!start(s, op, 1, OP_RECV)) {
        atomic_store(&s->receiving, 0);
        return false;
    }
    return true;
}

void dt_rpc_stream_cancel(dt_rpc_stream *s)
{
    if (s && s->call)
        grpc_call_cancel(s->call, NULL);
}

bool dt_rpc_stream_close_send(dt_rpc_stream *s)
{
    grpc_op op[1];
    memset(op, 0, sizeof op);
    op[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    return start(s, op, 1, OP_CLOSE);
}

bool dt_rpc_stream_finish(dt_rpc_stream *s)
{
    grpc_op op[1];
    memset(op, 0, sizeof op);
    grpc_slice_unref(s->details);
    s->details = grpc_empty_slice();
    op[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op[0].data.send_status_from_server.status = GRPC_STATUS_OK;
    op[0].data.send_status_from_server.status_details = &s->details;
    return start(s, op, 1, OP_FINISH);
}

void dt_rpc_stream_detach(dt_rpc_stream *s)
{
    if (!s)
        return;
    atomic_store(&s->released, true);
    stream_unref(s);
}

void dt_rpc_stream_release(dt_rpc_stream *s)
{
    if (!s)
        return;
    atomic_store(&s->released, true);
    dt_rpc_stream_cancel(s);
    stream_unref(s);
}

size_t dt_rpc_msg_len(const dt_rpc_msg *m)
{
    return m->len;
}

bool dt_rpc_msg_next(dt_rpc_msg *m, const uint8_t **p, size_t *len)
{
    if (!m->has_cur || m->off >= GRPC_SLICE_LENGTH(m->cur)) {
        if (m->has_cur)
            grpc_slice_unref(m->cur);
        m->has_cur = 0;
        m->off = 0;
        if (!grpc_byte_buffer_reader_next(&m->reader, &m->cur))
            return false;
        m->has_cur = 1;
    }
    size_t left = GRPC_SLICE_LENGTH(m->cur) - m->off;
    *p = GRPC_SLICE_START_PTR(m->cur) + m->off;
    *len = m->piece && left > m->piece ? m->piece : left;
    m->off += *len;
    return true;
}

void dt_rpc_msg_free(dt_rpc_msg *m)
{
    if (!m)
        return;
    if (m->has_cur)
        grpc_slice_unref(m->cur);
    grpc_byte_buffer_reader_destroy(&m->reader);
    grpc_byte_buffer_destroy(m->bb);
    free(m);
}
