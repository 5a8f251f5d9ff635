/*
 * status.h - the one error convention of dtrain.
 *
 * Every fallible function returns a dt_status and, when the caller passes one, fills a
 * caller-owned dt_err with a message that names the file, JSON path or peer and says what to do:
 *
 *     dt_err err = {0};
 *     if (dt_tfconfig_parse(json, len, &spec, &err) != DT_OK)
 *         fprintf(stderr, "dtraind: %s\n", err.msg);
 *
 * Codes are generated from one table so that dt_status_name() and dt_status_str() cannot drift.
 * Append new codes at the end only; never renumber (they cross the wire and appear in logs).
 */
#ifndef DT_CORE_STATUS_H
#define DT_CORE_STATUS_H

#include <stddef.h>

#define DT_STATUS_MAP(X)                                                                           \
    X(OK, "success")                                                                               \
    X(EINVAL, "invalid argument or input")                                                         \
    X(ENOMEM, "out of memory")                                                                     \
    X(EIO, "input/output error")                                                                   \
    X(ETIMEDOUT, "deadline exceeded")                                                              \
    X(EPEER, "peer failed or went away")                                                           \
    X(EPROTO, "protocol error")                                                                    \
    X(ETOOBIG, "size limit exceeded")                                                              \
    X(ECANCELED, "cancelled")                                                                      \
    X(ENOTSUP, "not supported")                                                                    \
    X(ENOENT, "not found")                                                                         \
    X(EEXIST, "already exists")                                                                    \
    X(EPERM, "permission denied")                                                                  \
    X(EADDRINUSE, "address in use")                                                                \
    X(ESTATE, "operation not valid in this state")                                                 \
    X(EAUTH, "authentication failed")

typedef enum dt_status {
#define DT_STATUS_ENUM_(name, str) DT_##name,
    DT_STATUS_MAP(DT_STATUS_ENUM_)
#undef DT_STATUS_ENUM_
        DT_STATUS_COUNT_
} dt_status;

/* Symbolic name ("EPEER"); never NULL. */
const char *dt_status_name(dt_status st);
/* Human description ("peer failed or went away"); never NULL. */
const char *dt_status_str(dt_status st);

#define DT_ERR_LEN 1024

/* Caller-owned error slot. Zero-initialise it; functions fill it only on failure. */
typedef struct dt_err {
    dt_status code;
    char msg[DT_ERR_LEN];
} dt_err;

#if defined(__GNUC__)
#define DT_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define DT_PRINTF(fmt_idx, arg_idx)
#endif

/* Sets err (if non-NULL) to code and the formatted message; returns code, so callers can write
 * `return dt_err_set(err, DT_EINVAL, "...")`. */
dt_status dt_err_set(dt_err *err, dt_status code, const char *fmt, ...) DT_PRINTF(3, 4);

/* Prepends "context: " to err's message (if err is non-NULL) and returns err's code, to add the
 * outer layer's view (the file name, the peer) to an inner error. */
dt_status dt_err_prefix(dt_err *err, const char *fmt, ...) DT_PRINTF(2, 3);

/* Logged at debug level by DT_TRY and DT_TRY_GOTO, so one failure prints its call chain. */
void dt__err_trace(dt_status st, const char *expr, const char *file, int line);

/* Returns from the current function when call fails. */
#define DT_TRY(call)                                                                               \
    do {                                                                                           \
        dt_status dt_try_st_ = (call);                                                             \
        if (dt_try_st_ != DT_OK) {                                                                 \
            dt__err_trace(dt_try_st_, #call, __FILE__, __LINE__);                                  \
            return dt_try_st_;                                                                     \
        }                                                                                          \
    } while (0)

/* Stores the status of call in st and jumps to label when it fails. */
#define DT_TRY_GOTO(call, st, label)                                                               \
    do {                                                                                           \
        (st) = (call);                                                                             \
        if ((st) != DT_OK) {                                                                       \
            dt__err_trace((st), #call, __FILE__, __LINE__);                                        \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* Broken invariants only (never input, network or resources): prints both operands and aborts. */
#define DT_ASSERT(a, op, b)                                                                        \
    do {                                                                                           \
        long long dt_a_ = (long long)(a), dt_b_ = (long long)(b);                                  \
        if (!(dt_a_ op dt_b_))                                                                     \
            dt__assert_fail(#a " " #op " " #b, dt_a_, dt_b_, __FILE__, __LINE__);                  \
    } while (0)

_Noreturn void dt__assert_fail(const char *expr, long long a, long long b, const char *file,
                               int line);

#endif
