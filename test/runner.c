/*
 * runner.c - the test runner behind `make test`.
 *
 * Runs every unit test (DT_TEST functions, collected at build time into test_list.h) and every
 * integration script (test/integration/NAME.sh) in its own process group, with a deadline, N at a
 * time. When a test ends, for whatever reason, its whole process group is killed and every
 * process it left behind is reaped (the runner is a child subreaper), so a failing test cannot
 * leak daemons into the next one. Output of a failing test is printed; the last line is
 * "N passed, N failed, N skipped".
 *
 * Exit status of a test: 0 passed, 7 skipped (first "SKIP: reason" line is shown), else failed.
 *
 * Usage: dt_test [-j N] [--timeout-mult K] [--unit | --integration | --suite NAME] [--list]
 *                [PATTERN...]
 *        --suite NAME runs the scripts of test/NAME/ instead (test/faults: `make test-faults`,
 *        the long fault-injection runs), and no unit tests.
 *        dt_test --free-ports N     print N currently free TCP ports on 127.0.0.1
 * Environment passed to tests: DT_SRC_DIR, DT_BIN_DIR, DT_TEST_TMP (per-test scratch dir).
 */
#include "dt_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void (*test_fn)(void);

typedef struct unit_test {
    const char *name;
    test_fn fn;
    int timeout_s;
} unit_test;

#define DT_TEST_ENTRY(name, timeout) void dt_test_##name(void);
#include "test_list.h"
#undef DT_TEST_ENTRY

static const unit_test unit_tests[] = {
#define DT_TEST_ENTRY(name, timeout) {#name, dt_test_##name, timeout},
#include "test_list.h"
#undef DT_TEST_ENTRY
    {NULL, NULL, 0},
};

typedef struct job {
    char name[256];
    char script[900]; /* empty for unit tests */
    int timeout_s;
    pid_t pid;
    double start;
    char dir[800];
    char log[820];
    int done;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char g_src_dir[500], g_bin_dir[512], g_tmp_root[512];

const char *dt_test_tmpdir(void)
{
    const char *t = getenv("DT_TEST_TMP");
    return t ? t : "/tmp";
}

const char *dt_test_src_path(const char *rel)
{
    static char path[2048];
    const char *src = getenv("DT_SRC_DIR");
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    return path;
}

const char *dt_test_bin_path(const char *name)
{
    static char path[2048];
    const char *bin = getenv("DT_BIN_DIR");
    snprintf(path, sizeof path, "%s/%s", bin ? bin : "bin", name);
    return path;
}

const char *dt_test_python(void)
{
    static char path[4096];
    const char *py = getenv("DT_TEST_PYTHON");
    if (!py || !*py)
        return "/usr/bin/python3";
    if (strchr(py, '/'))
        return py;
    const char *dirs = getenv("PATH");
    while (dirs && *dirs) {
        size_t len = strcspn(dirs, ":");
        if (len > 0 && len < sizeof path) {
            snprintf(path, sizeof path, "%.*s/%s", (int)len, dirs, py);
            if (access(path, X_OK) == 0)
                return path;
        }
        dirs += len + (dirs[len] == ':');
    }
    return py; /* not found: access() fails and the tests skip, naming it */
}

bool dt_test_python_has(const char *modules)
{
    char cmd[4096];
    dt_test_python_cmd(cmd, sizeof cmd, " -c 'import %s' >/dev/null 2>&1", modules);
    return system(cmd) == 0;
}

void dt_test_python_cmd(char *buf, size_t n, const char *fmt, ...)
{
    int o = snprintf(buf, n, "'%s'", dt_test_python());
    if (o < 0 || (size_t)o >= n)
        DT_FAIL_("python command longer than %zu bytes", n);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + o, n - (size_t)o, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n - (size_t)o)
        DT_FAIL_("python command longer than %zu bytes", n);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int free_ports(int n)
{
    int fds[256];
    if (n < 1 || n > 256)
        return 2;
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&sa, &len) != 0) {
            perror("free-ports");
            return 1;
        }
        printf("%d\n", ntohs(sa.sin_port));
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return 0;
}

static int script_timeout(const char *path)
{
    FILE *f = fopen(path, "r");
    int t = 120;
    if (!f)
        return t;
    char line[512];
    for (int i = 0; i < 15 && fgets(line, sizeof line, f); i++) {
        int v;
        if (sscanf(line, "# timeout: %d", &v) == 1)
            t = v;
    }
    fclose(f);
    return t;
}

static bool matches(const char *name, int npat, char **pats)
{
    if (npat == 0)
        return true;
    for (int i = 0; i < npat; i++)
        if (strstr(name, pats[i]))
            return true;
    return false;
}

static void start_job(job *j, const char *self, double mult)
{
    snprintf(j->dir, sizeof j->dir, "%s/%s", g_tmp_root, j->name);
    mkdir(j->dir, 0755);
    snprintf(j->log, sizeof j->log, "%s.log", j->dir);
    j->start = now_s();
    j->timeout_s = (int)(j->timeout_s * mult + 0.5);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(j->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int devnull = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (devnull >= 0)
            dup2(devnull, 0);
        setenv("DT_TEST_TMP", j->dir, 1);
        setenv("DT_SRC_DIR", g_src_dir, 1);
        setenv("DT_BIN_DIR", g_bin_dir, 1);
        if (chdir(j->dir) != 0)
            _exit(3);
        if (j->script[0])
            execl("/bin/bash", "bash", j->script, (char *)NULL);
        else
            execl(self, self, "--run-one", j->name, (char *)NULL);
        perror("exec");
        _exit(3);
    }
    setpgid(pid, pid);
    j->pid = pid;
}

static void print_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[4096];
    int n = 0;
    /* Long logs: the tail holds the failure. Count lines, then print the last 200. */
    while (fgets(line, sizeof line, f))
        n++;
    rewind(f);
    int skip = n > 200 ? n - 200 : 0;
    if (skip)
        printf("    | ... %d earlier lines in the log\n", skip);
    for (int i = 0; fgets(line, sizeof line, f); i++) {
        if (i < skip)
            continue;
        printf("    | %s", line);
        if (!strchr(line, '\n'))
            putchar('\n');
    }
    fclose(f);
}

static void skip_reason(const char *path, char *out, size_t n)
{
    snprintf(out, n, "skipped");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "SKIP: ");
        if (p) {
            p += 6;
            p[strcspn(p, "\n")] = '\0';
            snprintf(out, n, "%s", p);
            break;
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--run-one") == 0) {
        for (const unit_test *t = unit_tests; t->name; t++) {
            if (strcmp(t->name, argv[2]) == 0) {
                t->fn();
                return 0;
            }
        }
        fprintf(stderr, "no such test: %s\n", argv[2]);
        return 2;
    }
    if (argc == 3 && strcmp(argv[1], "--free-ports") == 0)
        return free_ports(atoi(argv[2]));

    int jobs_max = 2;
    double mult = 1.0;
    bool want_unit = true, want_int = true, list = false;
    const char *suite = "integration";
    int npat = 0;
    char **pats = calloc((size_t)argc, sizeof *pats);
    const char *m = getenv("DT_TEST_TIMEOUT_MULT");
    if (m)
        mult = atof(m);
    const char *jenv = getenv("DT_TEST_JOBS");
    if (jenv)
        jobs_max = atoi(jenv);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-j") == 0 && i + 1 < argc)
            jobs_max = atoi(argv[++i]);
        else if (strcmp(argv[i], "--timeout-mult") == 0 && i + 1 < argc)
            mult = atof(argv[++i]);
        else if (strcmp(argv[i], "--unit") == 0)
            want_int = false;
        else if (strcmp(argv[i], "--integration") == 0)
            want_unit = false;
        else if (strcmp(argv[i], "--suite") == 0 && i + 1 < argc &&
                 strspn(argv[i + 1], "abcdefghijklmnopqrstuvwxyz_") == strlen(argv[i + 1])) {
            suite = argv[++i];
            want_unit = false;
        } else if (strcmp(argv[i], "--list") == 0)
            list = true;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: dt_test [-j N] [--timeout-mult K] [--unit|--integration|--suite NAME] "
                   "[--list] [PATTERN...]\n       dt_test --free-ports N\n");
            return 0;
        } else
            pats[npat++] = argv[i];
    }
    if (jobs_max < 1)
        jobs_max = 1;
    if (mult <= 0)
        mult = 1.0;

    const char *src = getenv("DT_SRC_DIR");
    const char *bin = getenv("DT_BIN_DIR");
    char *p = realpath(src ? src : ".", NULL);
    if (!p)
        return 2;
    snprintf(g_src_dir, sizeof g_src_dir, "%s", p);
    free(p);
    p = realpath(bin ? bin : "bin", NULL);
    if (p)
        snprintf(g_bin_dir, sizeof g_bin_dir, "%s", p);
    else
        snprintf(g_bin_dir, sizeof g_bin_dir, "%s/bin", g_src_dir);
    free(p);

    /* Collect the jobs: unit tests first (fast), then integration scripts in name order. */
    size_t cap = 64, n = 0;
    job *jobs = calloc(cap, sizeof *jobs);
    if (want_unit) {
        for (const unit_test *t = unit_tests; t->name; t++) {
            if (!matches(t->name, npat, pats))
                continue;
            if (n == cap)
                jobs = realloc(jobs, (cap *= 2) * sizeof *jobs);
            memset(&jobs[n], 0, sizeof jobs[n]);
            snprintf(jobs[n].name, sizeof jobs[n].name, "%s", t->name);
            jobs[n].timeout_s = t->timeout_s;
            n++;
        }
    }
    if (want_int) {
        char idir[600];
        snprintf(idir, sizeof idir, "%s/test/%s", g_src_dir, suite);
        struct dirent **ents = NULL;
        int ne = scandir(idir, &ents, NULL, alphasort);
        for (int i = 0; i < ne; i++) {
            const char *fn = ents[i]->d_name;
            size_t fl = strlen(fn);
            if (fl > 3 && strcmp(fn + fl - 3, ".sh") == 0 && strncmp(fn, "lib", 3) != 0) {
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)(fl - 3), fn);
                if (matches(name, npat, pats)) {
                    if (n == cap)
                        jobs = realloc(jobs, (cap *= 2) * sizeof *jobs);
                    memset(&jobs[n], 0, sizeof jobs[n]);
                    snprintf(jobs[n].name, sizeof jobs[n].name, "%s", name);
                    snprintf(jobs[n].script, sizeof jobs[n].script, "%s/%s", idir, fn);
                    jobs[n].timeout_s = script_timeout(jobs[n].script);
                    n++;
                }
            }
            free(ents[i]);
        }
        free(ents);
    }
    if (list) {
        for (size_t i = 0; i < n; i++)
            printf("%s%s\n", jobs[i].name, jobs[i].script[0] ? " (integration)" : "");
        return 0;
    }

    const char *tmpbase = getenv("TMPDIR");
    snprintf(g_tmp_root, sizeof g_tmp_root, "%s/dt-test.XXXXXX", tmpbase ? tmpbase : "/tmp");
    if (!mkdtemp(g_tmp_root)) {
        perror("mkdtemp");
        return 2;
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    signal(SIGPIPE, SIG_IGN);

    char self[1024];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 2;
    self[sl] = '\0';

    int passed = 0, failed = 0, skipped = 0;
    size_t next = 0, running = 0, finished = 0;
    double t0 = now_s();
    printf("running %zu tests, %d at a time\n", n, jobs_max);
    while (finished < n) {
        while (running < (size_t)jobs_max && next < n) {
            start_job(&jobs[next++], self, mult);
            running++;
        }
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid == 0 || (pid < 0 && errno == ECHILD)) {
            /* Nothing finished: check the deadlines, then wait a little. */
            for (size_t i = 0; i < next; i++) {
                job *j = &jobs[i];
                if (!j->done && j->pid > 0 && now_s() - j->start > j->timeout_s) {
                    kill(-j->pid, SIGKILL);
                    j->done = 2; /* timed out; reaped below */
                }
            }
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (pid < 0)
            continue;
        job *j = NULL;
        for (size_t i = 0; i < next; i++)
            if (jobs[i].pid == pid)
                j = &jobs[i];
        if (!j)
            continue; /* an orphan the test left behind, reaped */
        /* The test's own process ended: take down everything else in its group. */
        kill(-pid, SIGKILL);
        double dt = now_s() - j->start;
        bool timed_out = j->done == 2;
        j->done = 1;
        j->pid = -1;
        running--;
        finished++;
        if (!timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            passed++;
            printf("ok      %s (%.2fs)\n", j->name, dt);
            rm_rf(j->dir);
            unlink(j->log);
        } else if (!timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 7) {
            skipped++;
            char why[400];
            skip_reason(j->log, why, sizeof why);
            printf("skip    %s: %s\n", j->name, why);
            rm_rf(j->dir);
            unlink(j->log);
        } else {
            failed++;
            if (timed_out)
                printf("FAIL    %s: timed out after %d s\n", j->name, j->timeout_s);
            else if (WIFSIGNALED(status))
                printf("FAIL    %s: killed by signal %d (%.2fs)\n", j->name, WTERMSIG(status), dt);
            else
                printf("FAIL    %s: exit status %d (%.2fs)\n", j->name, WEXITSTATUS(status), dt);
            print_log(j->log);
        }
    }
    /* Reap any stragglers that were still being torn down. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (failed == 0 && !getenv("DT_TEST_KEEP"))
        rm_rf(g_tmp_root);
    else
        printf("test logs kept in %s\n", g_tmp_root);
    printf("(%.1f s)\n", now_s() - t0);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    free(pats);
    free(jobs);
    return failed ? 1 : 0;
}
