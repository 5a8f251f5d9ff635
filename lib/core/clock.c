#include "core/clock.h"

#include <errno.h>
#include <time.h>

uint64_t dt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t dt_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t dt_now_ms(void)
{
    return (int64_t)(dt_now_ns() / 1000000ull);
}

double dt_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

dt_deadline dt_deadline_in(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    int64_t now = dt_now_ms();
    if (ms > DT_DEADLINE_NEVER - now)
        return DT_DEADLINE_NEVER;
    return now + ms;
}

bool dt_deadline_passed(dt_deadline dl)
{
    return dl != DT_DEADLINE_NEVER && dt_now_ms() >= dl;
}

int64_t dt_deadline_left_ms(dt_deadline dl)
{
    if (dl == DT_DEADLINE_NEVER)
        return DT_DEADLINE_NEVER;
    int64_t left = dl - dt_now_ms();
    return left > 0 ? left : 0;
}

void dt_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
