/* rpc_internal.h - shared by the files of lib/rpc only. */
#ifndef DT_RPC_INTERNAL_H
#define DT_RPC_INTERNAL_H

#include "rpc/rpc.h"

#include <grpc/grpc.h>

/* Channel or server args: message size caps, no SO_REUSEPORT (two daemons must never share a
 * port), short reconnect backoff so restarted peers are found again within a second. */
grpc_channel_args *dt__rpc_args_new(int server); /* 1 server, 0 client, 2 dedicated client */
void dt__rpc_args_free(grpc_channel_args *args);

/* Constant-time comparison of the "authorization" metadata against "Bearer <token>". */
int dt__rpc_auth_ok(const grpc_metadata_array *md, const char *token);
/* Whether to log a refusal of peer now: one line per peer host per 10 s, the rest counted (a
 * flood of bad calls must not flood the log); dt__rpc_refusals_flush writes the counts. */
bool dt__rpc_refusal_log_ok(const char *peer);
void dt__rpc_refusals_flush(void);

grpc_status_code dt__rpc_status_to_grpc(dt_status st);
dt_status dt__rpc_status_from_grpc(grpc_status_code code);

/* Flattens a received byte buffer into a malloc'd array (caller frees). */
dt_status dt__rpc_buffer_flatten(grpc_byte_buffer *bb, uint8_t **data, size_t *len);
/* Encodes msg into a new byte buffer (caller destroys). */
grpc_byte_buffer *dt__rpc_buffer_pack(const ProtobufCMessage *msg);

gpr_timespec dt__rpc_deadline_ms(int64_t ms);

/* stream.c: the server side of streams. Before grpc_server_start: register the method and q's
 * queue; after: keep calls requested on q. */
void *dt__rpc_streamq_register(dt_rpc_streamq *q, grpc_server *server, const char *method);
void dt__rpc_streamq_serve(dt_rpc_streamq *q, grpc_server *server, void *rm, const char *token);
/* Before the server shuts down: request no more calls on it. */
void dt__rpc_streamq_unserve(dt_rpc_streamq *q);
/* The raw channel of a dt_rpc_channel. */
grpc_channel *dt__rpc_channel_raw(dt_rpc_channel *ch);
const char *dt__rpc_channel_auth(dt_rpc_channel *ch);

/* tls.c. The channel credentials every channel uses (not to be released), or NULL: plaintext. */
grpc_channel_credentials *dt__rpc_channel_creds(void);
/* New server credentials (caller releases): TLS when set up, else insecure; NULL + err when TLS
 * is on without a certificate. */
grpc_server_credentials *dt__rpc_server_creds(const char *address, dt_err *err);
/* After adding a port failed: DT_EINVAL naming the files when TLS is on and the address binds
 * without it (gRPC refused the certificate or key), else DT_OK (a plain bind failure). */
dt_status dt__rpc_tls_listen_failed(const char *address, dt_err *err);
/* Called when a channel or server is made: dt_rpc_tls_setup is refused from then on. */
void dt__rpc_tls_freeze(void);
/* Writes into buf ("" when none) a hint for an UNAVAILABLE call to address whose gRPC details
 * point at TLS: a plaintext/TLS mismatch, a certificate that fails verification, a missing SAN. */
void dt__rpc_unavailable_hint(const char *address, const char *details, char *buf, size_t n);

#endif
