/* The evaluator trusts nothing its chief sends: a rogue chief (a real gRPC server in this
 * process) answers ListJobs with job ids that are paths. The evaluator, run in this process as
 * dtraind runs it, must name no directory after them, write nothing outside its state dir and
 * ask the chief for no weights. Each test runs in its own process, so the evaluator's SIGTERM
 * handler and the signal that stops it stay in this test. */
#include "config/tfconfig.h"
#include "core/clock.h"
#include "dt_test.h"
#include "jobs.pb-c.h"
#include "test_rpc_util.h"
#include "service/service.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

static atomic_int g_lists, g_exports;
static tr_server g_chief;

/* Odd polls: a running job whose id climbs out of STATE/eval; even polls: a finished one with
 * an id that looks like a number first. After six the evaluator has seen both twice. */
static void on_call(void *ctx, dt_rpc_call *call)
{
    (void)ctx;
    const char *m = dt_rpc_call_method(call);
    if (strcmp(m, "/dtrain.v1.Jobs/ListJobs") != 0) {
        if (strstr(m, "Export"))
            atomic_fetch_add(&g_exports, 1);
        dt_rpc_call_fail(call, DT_ENOTSUP, "not served by this test");
        return;
    }
    int n = atomic_fetch_add(&g_lists, 1) + 1;
    Dtrain__V1__JobInfo info = DTRAIN__V1__JOB_INFO__INIT, *infos[] = {&info};
    info.id = n % 2 ? "../../outside-eval" : "1/../../../outside-eval2";
    info.name = "rogue";
    info.state = n % 2 ? "running" : "succeeded";
    Dtrain__V1__ListJobsReply rep = DTRAIN__V1__LIST_JOBS_REPLY__INIT;
    rep.n_jobs = 1;
    rep.jobs = infos;
    dt_rpc_call_reply(call, &rep.base);
    if (n == 6)
        kill(getpid(), SIGTERM); /* the evaluator's handler: its loop ends within 100 ms */
}

DT_TEST(eval_refuses_a_rogue_chiefs_job_ids)
{
    char base[1024], state[1100], tfc[512];
    snprintf(base, sizeof base, "%s/a/b", dt_test_tmpdir());
    snprintf(state, sizeof state, "%s/state", base);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", state);
    ASSERT_EQ(system(cmd), 0);

    dt_err err = {0};
    tr_server_start(&g_chief, on_call, NULL);

    snprintf(tfc, sizeof tfc,
             "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"]}, \"task\": {\"type\": \"evaluator\", "
             "\"index\": 0}}",
             dt_rpc_server_port(g_chief.srv));
    dt_cluster_spec spec;
    ASSERT_OK(dt_tfconfig_parse(tfc, strlen(tfc), &spec, &err), &err);
    dt_service_eval_opts eo = {.spec = &spec, .state_dir = state, .interval_ms = 50};
    int64_t t0 = dt_now_ms();
    int rc = dt_service_eval_run(&eo);
    int64_t took = dt_now_ms() - t0;

    tr_server_stop(&g_chief);
    dt_tfconfig_destroy(&spec);

    int lists = atomic_load(&g_lists), exports = atomic_load(&g_exports);
    ASSERT_EQ(rc, 0);
    ASSERT_TRUE(lists >= 6);
    ASSERT_TRUE(took < 10000);
    ASSERT_EQ(exports, 0); /* it asked for no weights of a job it could not name */
    /* Nothing outside the state dir, and nothing named after the ids inside it. */
    char p[1300];
    struct stat st;
    snprintf(p, sizeof p, "%s/outside-eval", base);
    ASSERT_TRUE(stat(p, &st) != 0);
    snprintf(p, sizeof p, "%s/outside-eval2", base);
    ASSERT_TRUE(stat(p, &st) != 0);
    snprintf(p, sizeof p, "%s/eval", state);
    DIR *d = opendir(p);
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                DT_FAIL_("the evaluator made %s/%s from a rogue id", p, e->d_name);
        closedir(d);
    }
}
