/*
 * clock.h - monotonic time and deadlines.
 *
 * A deadline is an absolute point on the monotonic clock in milliseconds; every blocking wait in
 * dtrain takes one. DT_DEADLINE_NEVER exists for tests of the deadline code itself; production
 * waits always use a finite one.
 *
 *     dt_deadline dl = dt_deadline_in(5000);
 *     while (!done && !dt_deadline_passed(dl)) ...
 */
#ifndef DT_CORE_CLOCK_H
#define DT_CORE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef int64_t dt_deadline;

#define DT_DEADLINE_NEVER INT64_MAX

/* Monotonic clock, nanoseconds / milliseconds since an arbitrary origin. */
uint64_t dt_now_ns(void);
int64_t dt_now_ms(void);
/* CPU time of this process, every thread, user and system, in nanoseconds. */
uint64_t dt_cpu_ns(void);
/* Wall clock, seconds since the epoch (for logs and file metadata only). */
double dt_wall_s(void);

dt_deadline dt_deadline_in(int64_t ms);
bool dt_deadline_passed(dt_deadline dl);
/* Milliseconds left, never negative. */
int64_t dt_deadline_left_ms(dt_deadline dl);

/* Sleeps for ms milliseconds (restarts on EINTR). For pacing loops, never for synchronisation. */
void dt_sleep_ms(int64_t ms);

#endif
