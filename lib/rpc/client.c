/*
 * client.c - channels and blocking unary calls with deadlines.
 *
 * Each call plucks its own completion queue, so any number of threads can call through one
 * channel at once; the call's deadline bounds the wait, and the pluck has a small margin on top
 * so a wedged transport still returns.
 */
#include "rpc/rpc_internal.h"

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dt_rpc_channel {
    grpc_channel *channel;
    char *address;
    char *auth;  /* "Bearer <token>" or NULL */
    int wait_ms; /* > 0: calls look for their answer this often, outside gRPC's poller */
};

void dt_rpc_channel_set_wait_interval(dt_rpc_channel *ch, int ms)
{
    ch->wait_ms = ms > 0 ? ms : 0;
}

/* A zero-timeout pluck does at most one quick poll, then the thread sleeps outside gRPC, so it
 * never becomes the poller that reads other connections' data (see rpc.h). */
static grpc_event pluck_at_intervals(grpc_completion_queue *cq, void *tag, gpr_timespec deadline,
                                     int ms)
{
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_pluck(cq, tag, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type != GRPC_QUEUE_TIMEOUT ||
            gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) >= 0)
            return ev;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static dt_status channel_new(const char *address, const char *token, int dedicated,
                             dt_rpc_channel **out, dt_err *err)
{
    dt_rpc_global_init();
    dt_rpc_channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return dt_err_set(err, DT_ENOMEM, "rpc: out of memory");
    ch->address = strdup(address);
    if (token && *token) {
        size_t n = strlen(token) + 8;
        ch->auth = malloc(n);
        if (ch->auth)
            snprintf(ch->auth, n, "Bearer %s", token);
    }
    grpc_channel_args *args = dt__rpc_args_new(dedicated ? 2 : 0);
    dt__rpc_tls_freeze();
    grpc_channel_credentials *tls = dt__rpc_channel_creds();
    grpc_channel_credentials *creds = tls ? tls : grpc_insecure_credentials_create();
    ch->channel = grpc_channel_create(address, creds, args);
    if (!tls)
        grpc_channel_credentials_release(creds);
    dt__rpc_args_free(args);
    if (!ch->channel || !ch->address || (token && *token && !ch->auth)) {
        dt_rpc_channel_free(ch);
        return dt_err_set(err, DT_ENOMEM, "rpc: cannot create a channel to %s", address);
    }
    *out = ch;
    return DT_OK;
}

dt_status dt_rpc_channel_new(const char *address, const char *token, dt_rpc_channel **out,
                             dt_err *err)
{
    return channel_new(address, token, 0, out, err);
}

dt_status dt_rpc_channel_new_dedicated(const char *address, const char *token, dt_rpc_channel **out,
                                       dt_err *err)
{
    return channel_new(address, token, 1, out, err);
}

const char *dt_rpc_channel_address(const dt_rpc_channel *ch)
{
    return ch->address;
}

void dt_rpc_channel_connect(dt_rpc_channel *ch)
{
    grpc_channel_check_connectivity_state(ch->channel, 1);
}

grpc_channel *dt__rpc_channel_raw(dt_rpc_channel *ch)
{
    return ch->channel;
}

const char *dt__rpc_channel_auth(dt_rpc_channel *ch)
{
    return ch->auth;
}

void dt_rpc_channel_free(dt_rpc_channel *ch)
{
    if (!ch)
        return;
    if (ch->channel)
        grpc_channel_destroy(ch->channel);
    free(ch->address);
    free(ch->auth);
    free(ch);
}

static const char *short_method(const char *method)
{
    const char *p = strrchr(method, '/');
    return p ? p + 1 : method;
}

dt_status dt_rpc_unary(dt_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                       int64_t timeout_ms, dt_err *err)
{
    *resp = NULL;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice mslice = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               mslice, NULL, dt__rpc_deadline_ms(timeout_ms), NULL);
    grpc_metadata md;
    memset(&md, 0, sizeof md);
    if (ch->auth) {
        md.key = grpc_slice_from_static_string("authorization");
        md.value = grpc_slice_from_copied_string(ch->auth);
    }
    grpc_byte_buffer *send = dt__rpc_buffer_pack(req);
    grpc_byte_buffer *recv = NULL;
    grpc_metadata_array initial_md, trailing_md;
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = ch->auth ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = ch->auth ? &md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;

    dt_status st = DT_OK;
    int tag;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
        st = dt_err_set(err, DT_EPROTO, "%s %s: could not start the call", ch->address,
                        short_method(method));
        goto out;
    }
    grpc_event ev =
        ch->wait_ms > 0
            ? pluck_at_intervals(cq, &tag, dt__rpc_deadline_ms(timeout_ms + 2000), ch->wait_ms)
            : grpc_completion_queue_pluck(cq, &tag, dt__rpc_deadline_ms(timeout_ms + 2000), NULL);
    if (ev.type != GRPC_OP_COMPLETE) {
        grpc_call_cancel(call, NULL);
        grpc_completion_queue_pluck(cq, &tag, dt__rpc_deadline_ms(5000), NULL);
        st = dt_err_set(err, DT_ETIMEDOUT, "%s %s: no answer within %lld ms", ch->address,
                        short_method(method), (long long)timeout_ms);
        goto out;
    }
    if (code != GRPC_STATUS_OK) {
        st = dt__rpc_status_from_grpc(code);
        char *msg = grpc_slice_to_c_string(details);
        char hint[512];
        if (code == GRPC_STATUS_UNAVAILABLE) {
            dt__rpc_unavailable_hint(ch->address, msg, hint, sizeof hint);
            dt_err_set(err, st, "%s %s: peer unreachable (%s)%s", ch->address, short_method(method),
                       msg && *msg ? msg : "no details", hint);
        } else if (code == GRPC_STATUS_DEADLINE_EXCEEDED)
            dt_err_set(err, st, "%s %s: no answer within %lld ms", ch->address,
                       short_method(method), (long long)timeout_ms);
        else
            dt_err_set(err, st, "%s", msg && *msg ? msg : dt_status_str(st));
        gpr_free(msg);
        goto out;
    }
    uint8_t *data = NULL;
    size_t len = 0;
    if (dt__rpc_buffer_flatten(recv, &data, &len) != DT_OK) {
        st = dt_err_set(err, DT_ENOMEM, "%s %s: out of memory reading the reply", ch->address,
                        short_method(method));
        goto out;
    }
    *resp = protobuf_c_message_unpack(resp_desc, NULL, len, data);
    free(data);
    if (!*resp)
        st = dt_err_set(err, DT_EPROTO, "%s %s: the reply is not a valid %s message", ch->address,
                        short_method(method), resp_desc->name);
out:
    if (error_string)
        gpr_free((void *)error_string);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial_md);
    grpc_metadata_array_destroy(&trailing_md);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(send);
    if (ch->auth)
        grpc_slice_unref(md.value);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, dt__rpc_deadline_ms(1000), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return st;
}
