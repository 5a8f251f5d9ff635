#include "core/log.h"

#include "core/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Written once before threads start (dt_log_init / set_level), read everywhere after. */
static dt_log_level log_level = DT_LOG_INFO;
static char log_subsys[256];
static char log_tag[64];
static bool log_journal;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static const char *const level_tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG", "TRACE"};
/* syslog priorities: err, warning, info, debug, debug */
static const int level_prio[] = {3, 4, 6, 7, 7};

dt_status dt_log_parse_level(const char *name, dt_log_level *out)
{
    for (int i = 0; i <= DT_LOG_TRACE; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (dt_log_level)i;
            return DT_OK;
        }
    }
    if (strcmp(name, "warning") == 0) {
        *out = DT_LOG_WARN;
        return DT_OK;
    }
    return DT_EINVAL;
}

/* journald sets JOURNAL_STREAM=dev:ino for the stream it gave us; only trust it when stderr is
 * still that stream (a child with redirected stderr must not emit priority prefixes). */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    if (!js)
        return false;
    unsigned long long dev, ino;
    if (sscanf(js, "%llu:%llu", &dev, &ino) != 2)
        return false;
    struct stat st;
    if (fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void dt_log_init(void)
{
    const char *lv = getenv("DT_LOG");
    if (lv && *lv) {
        dt_log_level l;
        if (dt_log_parse_level(lv, &l) == DT_OK)
            log_level = l;
        else
            fprintf(stderr,
                    "dtrain: DT_LOG=%s is not a level (error|warn|info|debug|trace); "
                    "using info\n",
                    lv);
    }
    const char *ss = getenv("DT_LOG_SUBSYS");
    if (ss)
        snprintf(log_subsys, sizeof log_subsys, ",%s,", ss);
    log_journal = stderr_is_journal();
}

void dt_log_set_level(dt_log_level level)
{
    log_level = level;
}

void dt_log_set_tag(const char *tag)
{
    snprintf(log_tag, sizeof log_tag, "%s", tag ? tag : "");
}

bool dt_log_enabled(dt_log_level level, const char *subsys)
{
    if (level > log_level)
        return false;
    if (level <= DT_LOG_WARN || !log_subsys[0] || !subsys)
        return true;
    char key[40];
    snprintf(key, sizeof key, ",%s,", subsys);
    return strstr(log_subsys, key) != NULL;
}

void dt_log_write(dt_log_level level, const char *subsys, const char *fmt, ...)
{
    char line[2048];
    size_t n = 0;
    if (log_journal) {
        n = (size_t)snprintf(line, sizeof line, "<%d>", level_prio[level]);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        localtime_r(&ts.tv_sec, &tm);
        n = strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof line - n, ".%03ld %s ", ts.tv_nsec / 1000000L,
                              level_tags[level]);
    }
    if (log_tag[0] && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "[%s] ", log_tag);
    if (subsys && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s: ", subsys);
    if (n < sizeof line) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += (size_t)m;
    }
    if (n >= sizeof line - 1)
        n = sizeof line - 2;
    line[n++] = '\n';
    /* One write per line keeps concurrent threads' lines whole. */
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* --- rate limit -------------------------------------------------------------------------- */

static void limit_summary(dt_log_limit *l, int i, int64_t now)
{
    if (l->slot[i].count)
        dt_log_write(DT_LOG_WARN, l->subsys, "%llu more %s from %s in the last %.0f s",
                     (unsigned long long)l->slot[i].count, l->what, l->slot[i].key,
                     (double)(now - l->slot[i].since_ms) / 1000.0);
    l->slot[i].count = 0;
    l->slot[i].since_ms = now;
}

bool dt_log_limit_allow(dt_log_limit *l, const char *key)
{
    int64_t now = dt_now_ms();
    bool allow = true;
    pthread_mutex_lock(&l->mu);
    int found = -1, stalest = 0;
    for (int i = 0; i < DT_LOG_LIMIT_KEYS; i++) {
        if (l->slot[i].key[0] && strncmp(l->slot[i].key, key, sizeof l->slot[i].key - 1) == 0) {
            found = i;
            break;
        }
        if (!l->slot[i].key[0] ||
            (l->slot[stalest].key[0] && l->slot[i].since_ms < l->slot[stalest].since_ms))
            stalest = i;
    }
    if (found < 0) {
        if (l->slot[stalest].key[0])
            limit_summary(l, stalest, now);
        snprintf(l->slot[stalest].key, sizeof l->slot[stalest].key, "%s", key);
        l->slot[stalest].count = 0;
        l->slot[stalest].since_ms = now;
    } else if (now - l->slot[found].since_ms >= l->interval_ms) {
        limit_summary(l, found, now);
    } else {
        l->slot[found].count++;
        allow = false;
    }
    pthread_mutex_unlock(&l->mu);
    return allow;
}

void dt_log_limit_flush(dt_log_limit *l)
{
    int64_t now = dt_now_ms();
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < DT_LOG_LIMIT_KEYS; i++) {
        if (!l->slot[i].key[0] || now - l->slot[i].since_ms < l->interval_ms)
            continue;
        if (l->slot[i].count)
            limit_summary(l, i, now);
        else
            l->slot[i].key[0] = '\0'; /* quiet for a whole interval: forget it */
    }
    pthread_mutex_unlock(&l->mu);
}
