/* Pieces of lib/rpc shared by server and client: args, auth, status mapping, buffers, tokens. */
#include "rpc/rpc_internal.h"

#include "core/buf.h"
#include "core/limits.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static pthread_once_t rpc_once = PTHREAD_ONCE_INIT;
static bool lock_checks_off;

/* Debian builds Abseil with its debug-mode deadlock detector on, so every lock gRPC takes also
 * updates a lock graph: 2-3% of a daemon's CPU in an all-reduce (perf, R = 4, 4 MB). Release
 * builds of Abseil run with it off; so do we. Its only entry point is C++, found by name (the
 * inline namespace is the distribution's); where it is absent nothing changes. */
static void lock_checks_disable(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        if (f) {
            void (*set_mode)(int) = NULL;
            memcpy(&set_mode, &f, sizeof f);
            set_mode(0); /* absl::OnDeadlockCycle::kIgnore */
            lock_checks_off = true;
            return;
        }
    }
}

static void rpc_init_once(void)
{
    lock_checks_disable();
    grpc_init();
}

bool dt_rpc_lock_checks_off(void)
{
    dt_rpc_global_init();
    return lock_checks_off;
}

void dt_rpc_global_init(void)
{
    pthread_once(&rpc_once, rpc_init_once);
}

grpc_channel_args *dt__rpc_args_new(int server)
{
    grpc_channel_args *a = calloc(1, sizeof *a);
    grpc_arg *v = calloc(10, sizeof *v);
    if (!a || !v) {
        free(a);
        free(v);
        return NULL;
    }
    size_t n = 0;
    v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
    v[n++].value.integer = (int)DT_MAX_RPC_MSG;
    v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
    v[n++].value.integer = (int)DT_MAX_RPC_MSG;
    /* BDP probing on (gRPC's default), stated because it decides the ring's speed. Without it
     * gRPC keeps a connection's window at 64 KiB plus what pending reads need, so every message
     * sends 64 KiB and then waits one round trip for the WINDOW_UPDATE that its header
     * triggers (strace: a 26-byte write per message). Probing grows the windows instead. Alone
     * it lets senders fill the sockets, and large all-reduces read cold memory (16 MB at R = 2:
     * 3.1 -> 2.0 GB/s busbw); with the ring's send gate and 512 KiB messages (comm/ring.c) it
     * wins at R = 2 (loopback, steady state, GB/s busbw, off -> on: 1 MB 2.33 -> 4.22, 4 MB
     * 3.67 -> 3.69, 16 MB 3.38 -> 3.74, 64 MB 2.61 -> 2.99) and is within 10% either way at
     * R = 3 and 4, where 2 CPUs are shared by 3 or 4 daemons. Across hosts the round trip is
     * a network's, so the wait it removes is longer there. */
    v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_HTTP2_BDP_PROBE, v[n++].value.integer = 1;
    v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
    v[n++].value.integer = 8 << 20;
    if (server == 1) {
        v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_ALLOW_REUSEPORT, v[n++].value.integer = 0;
    } else {
        v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
        v[n++].value.integer = 100;
        /* gRPC uses this as the time one connection attempt (TCP + HTTP/2 handshake) may take:
         * 100 ms failed attempts on a busy host ("tcp handshaker shutdown", "timed out before
         * receiving SETTINGS frame"). Calls keep their own deadlines; dedicated bulk channels
         * get gRPC's default. */
        v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
        v[n++].value.integer = server == 2 ? 20000 : 2000;
        v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
        v[n++].value.integer = 1000;
        /* Every call has its own deadline; retries would only blur which attempt failed. */
        v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_ENABLE_RETRIES, v[n++].value.integer = 0;
        if (server == 2) /* a dedicated connection: not shared through the global pool */
            v[n].type = GRPC_ARG_INTEGER, v[n].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
            v[n++].value.integer = 1;
    }
    a->num_args = n;
    a->args = v;
    return a;
}

void dt__rpc_args_free(grpc_channel_args *args)
{
    if (!args)
        return;
    free(args->args);
    free(args);
}

static dt_log_limit refusals =
    DT_LOG_LIMIT_INIT("rpc", "refused calls or streams without the cluster token", 10000);

bool dt__rpc_refusal_log_ok(const char *peer)
{
    /* "ipv4:10.0.0.9:53120": the host, since every connection has a port of its own */
    char host[80];
    snprintf(host, sizeof host, "%s", peer ? peer : "?");
    char *colon = strrchr(host, ':');
    if (colon && colon != strchr(host, ':') && colon[1] &&
        strspn(colon + 1, "0123456789") == strlen(colon + 1))
        *colon = '\0';
    return dt_log_limit_allow(&refusals, host);
}

void dt__rpc_refusals_flush(void)
{
    dt_log_limit_flush(&refusals);
}

int dt__rpc_auth_ok(const grpc_metadata_array *md, const char *token)
{
    if (!token || !*token)
        return 1;
    size_t tlen = strlen(token);
    int ok = 0;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice *k = &md->metadata[i].key, *v = &md->metadata[i].value;
        if (GRPC_SLICE_LENGTH(*k) != 13 || memcmp(GRPC_SLICE_START_PTR(*k), "authorization", 13))
            continue;
        size_t vlen = GRPC_SLICE_LENGTH(*v);
        const unsigned char *p = GRPC_SLICE_START_PTR(*v);
        if (vlen != tlen + 7 || memcmp(p, "Bearer ", 7) != 0)
            continue;
        /* Constant time in the token's bytes: no early exit on the first difference. */
        unsigned char diff = 0;
        for (size_t j = 0; j < tlen; j++)
            diff |= (unsigned char)(p[7 + j] ^ (unsigned char)token[j]);
        ok |= diff == 0;
    }
    return ok;
}

grpc_status_code dt__rpc_status_to_grpc(dt_status st)
{
    switch (st) {
    case DT_OK:
        return GRPC_STATUS_OK;
    case DT_EINVAL:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case DT_ETIMEDOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case DT_EPEER:
        return GRPC_STATUS_UNAVAILABLE;
    case DT_ETOOBIG:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case DT_ECANCELED:
        return GRPC_STATUS_CANCELLED;
    case DT_ENOTSUP:
        return GRPC_STATUS_UNIMPLEMENTED;
    case DT_ENOENT:
        return GRPC_STATUS_NOT_FOUND;
    case DT_EEXIST:
        return GRPC_STATUS_ALREADY_EXISTS;
    case DT_EPERM:
        return GRPC_STATUS_PERMISSION_DENIED;
    case DT_ESTATE:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case DT_EAUTH:
        return GRPC_STATUS_UNAUTHENTICATED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

dt_status dt__rpc_status_from_grpc(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK:
        return DT_OK;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return DT_EINVAL;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return DT_ETIMEDOUT;
    case GRPC_STATUS_UNAVAILABLE:
        return DT_EPEER;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return DT_ETOOBIG;
    case GRPC_STATUS_CANCELLED:
        return DT_ECANCELED;
    case GRPC_STATUS_UNIMPLEMENTED:
        return DT_ENOTSUP;
    case GRPC_STATUS_NOT_FOUND:
        return DT_ENOENT;
    case GRPC_STATUS_ALREADY_EXISTS:
        return DT_EEXIST;
    case GRPC_STATUS_PERMISSION_DENIED:
        return DT_EPERM;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return DT_ESTATE;
    case GRPC_STATUS_UNAUTHENTICATED:
        return DT_EAUTH;
    default:
        return DT_EPROTO;
    }
}

dt_status dt__rpc_buffer_flatten(grpc_byte_buffer *bb, uint8_t **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    if (!bb)
        return DT_OK;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return DT_EPROTO;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    size_t n = GRPC_SLICE_LENGTH(s);
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        grpc_slice_unref(s);
        return DT_ENOMEM;
    }
    memcpy(p, GRPC_SLICE_START_PTR(s), n);
    grpc_slice_unref(s);
    *data = p;
    *len = n;
    return DT_OK;
}

grpc_byte_buffer *dt__rpc_buffer_pack(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

gpr_timespec dt__rpc_deadline_ms(int64_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

dt_status dt_rpc_token_load(const char *path, char **token, dt_err *err)
{
    char *data = NULL;
    size_t len = 0;
    DT_TRY(dt_file_read_all(path, DT_MAX_TOKEN, &data, &len, err));
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' '))
        data[--len] = '\0';
    if (len == 0) {
        free(data);
        return dt_err_set(err, DT_EINVAL,
                          "%s: the token file is empty; put a random secret in it "
                          "(e.g. head -c 32 /dev/urandom | base64)",
                          path);
    }
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)data[i] < 0x21 || (unsigned char)data[i] > 0x7e) {
            free(data);
            return dt_err_set(err, DT_EINVAL,
                              "%s: the token must be printable ASCII without "
                              "spaces (byte %zu is not)",
                              path, i);
        }
    }
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077))
        DT_WARN("rpc", "%s is readable by group or others; chmod 600 it", path);
    *token = data;
    return DT_OK;
}

int dt_rpc_host_is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0)
        return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return 0;
}
