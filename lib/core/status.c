#include "core/status.h"

#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
#define DT_STATUS_NAME_(name, str) #name,
    DT_STATUS_MAP(DT_STATUS_NAME_)
#undef DT_STATUS_NAME_
};

static const char *const status_strs[] = {
#define DT_STATUS_STR_(name, str) str,
    DT_STATUS_MAP(DT_STATUS_STR_)
#undef DT_STATUS_STR_
};

const char *dt_status_name(dt_status st)
{
    if ((unsigned)st >= DT_STATUS_COUNT_)
        return "EUNKNOWN";
    return status_names[st];
}

const char *dt_status_str(dt_status st)
{
    if ((unsigned)st >= DT_STATUS_COUNT_)
        return "unknown status";
    return status_strs[st];
}

dt_status dt_err_set(dt_err *err, dt_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

dt_status dt_err_prefix(dt_err *err, const char *fmt, ...)
{
    if (!err)
        return DT_EINVAL;
    char prefix[DT_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n < 0)
        return err->code;
    /* Shift the old message right and put "prefix: " in front; truncation keeps the prefix. */
    size_t plen = strlen(prefix), olen = strnlen(err->msg, sizeof err->msg - 1);
    if (plen > sizeof err->msg - 3)
        plen = sizeof err->msg - 3;
    size_t keep = sizeof err->msg - 1 - plen - 2;
    if (olen > keep)
        olen = keep;
    memmove(err->msg + plen + 2, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, ": ", 2);
    err->msg[plen + 2 + olen] = '\0';
    return err->code;
}

void dt__err_trace(dt_status st, const char *expr, const char *file, int line)
{
    DT_DEBUG("trace", "-> %s at %s:%d: %s", dt_status_name(st), file, line, expr);
}

void dt__assert_fail(const char *expr, long long a, long long b, const char *file, int line)
{
    fprintf(stderr, "dtrain: assertion failed at %s:%d: %s (%lld vs %lld)\n", file, line, expr, a,
            b);
    abort();
}
