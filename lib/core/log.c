#include "core/log.h"

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
