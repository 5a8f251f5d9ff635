/*
 * log.h - leveled logging with a subsystem mask.
 *
 *     DT_INFO("cluster", "worker:2 (%s) joined; %d of %d tasks present", addr, n, world);
 *
 * On a terminal or plain file every line carries a local timestamp, the level and the subsystem.
 * Under systemd (JOURNAL_STREAM set and stderr is that stream) lines carry the kernel-style
 * "<N>" priority prefix instead and no timestamp, since the journal stamps them itself.
 *
 * Environment (read once by dt_log_init, also settable by dt_log_set_level):
 *   DT_LOG=error|warn|info|debug|trace   threshold (default info)
 *   DT_LOG_SUBSYS=ring,rpc               only these subsystems below warn (default all)
 * Arguments are not evaluated below the threshold. Thread-safe: one write(2) per line.
 */
#ifndef DT_CORE_LOG_H
#define DT_CORE_LOG_H

#include "core/status.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum dt_log_level {
    DT_LOG_ERROR = 0,
    DT_LOG_WARN,
    DT_LOG_INFO,
    DT_LOG_DEBUG,
    DT_LOG_TRACE,
} dt_log_level;

/* Reads DT_LOG and DT_LOG_SUBSYS; optional (defaults apply without it). Call before threads. */
void dt_log_init(void);
void dt_log_set_level(dt_log_level level);
/* Parses "info" etc.; returns DT_EINVAL for an unknown name. */
dt_status dt_log_parse_level(const char *name, dt_log_level *out);
/* A short tag put in front of every line ("worker:1"), so interleaved logs of local clusters
 * stay readable. Copied; NULL clears it. */
void dt_log_set_tag(const char *tag);

bool dt_log_enabled(dt_log_level level, const char *subsys);
void dt_log_write(dt_log_level level, const char *subsys, const char *fmt, ...) DT_PRINTF(3, 4);

#define DT_LOG_AT_(lvl, subsys, ...)                                                               \
    do {                                                                                           \
        if (dt_log_enabled((lvl), (subsys)))                                                       \
            dt_log_write((lvl), (subsys), __VA_ARGS__);                                            \
    } while (0)

/* A flood of one kind of line - a peer refused thousands of times a second - is written once
 * per interval and key (the peer): the first line at once, the rest counted. The next line let
 * through for that key, or dt_log_limit_flush (call it every second or so), writes the count:
 * "rpc: 9999 more refused calls without the cluster token from 10.0.0.9 in the last 10 s".
 * Up to DT_LOG_LIMIT_KEYS keys at once; the stalest is summarised and dropped for a new one.
 * Thread-safe. Static storage:
 *     static dt_log_limit refusals = DT_LOG_LIMIT_INIT("rpc", "refused calls ...", 10000);
 *     if (dt_log_limit_allow(&refusals, host)) DT_WARN("rpc", "refused ... from %s", host); */
#define DT_LOG_LIMIT_KEYS 32
typedef struct dt_log_limit {
    const char *subsys, *what;
    int64_t interval_ms;
    pthread_mutex_t mu;
    struct {
        char key[80];
        int64_t since_ms; /* when its last line was written */
        uint64_t count;   /* lines held back since */
    } slot[DT_LOG_LIMIT_KEYS];
} dt_log_limit;
#define DT_LOG_LIMIT_INIT(subsys, what, interval_ms)                                               \
    {                                                                                              \
        (subsys), (what), (interval_ms), PTHREAD_MUTEX_INITIALIZER,                                \
        {                                                                                          \
            {                                                                                      \
                {0}, 0, 0                                                                          \
            }                                                                                      \
        }                                                                                          \
    }

/* Whether the line for key may be written now; false counts it. */
bool dt_log_limit_allow(dt_log_limit *l, const char *key);
/* Writes the count of every key whose interval has passed with lines held back. */
void dt_log_limit_flush(dt_log_limit *l);

#define DT_ERROR(subsys, ...) DT_LOG_AT_(DT_LOG_ERROR, subsys, __VA_ARGS__)
#define DT_WARN(subsys, ...)  DT_LOG_AT_(DT_LOG_WARN, subsys, __VA_ARGS__)
#define DT_INFO(subsys, ...)  DT_LOG_AT_(DT_LOG_INFO, subsys, __VA_ARGS__)
#define DT_DEBUG(subsys, ...) DT_LOG_AT_(DT_LOG_DEBUG, subsys, __VA_ARGS__)
#define DT_TRACE(subsys, ...) DT_LOG_AT_(DT_LOG_TRACE, subsys, __VA_ARGS__)

#endif
