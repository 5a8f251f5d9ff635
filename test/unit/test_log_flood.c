/* A flood of refused calls writes one log line per peer and interval, with a count after it:
 * 10,000 calls without the token once wrote 10,000 WARN lines. The limiter on its own, then a
 * real gRPC server refusing thousands of real calls. Lines are read from stderr, redirected to
 * a file while each test runs (its own process). */
#include "core/clock.h"
#include "core/log.h"
#include "dt_test.h"
#include "jobs.pb-c.h"
#include "test_rpc_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <uv.h>

static int g_saved = -1;
static char g_path[1200];

static void capture_begin(void)
{
    snprintf(g_path, sizeof g_path, "%s/stderr.log", dt_test_tmpdir());
    int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_TRUE(fd >= 0);
    g_saved = dup(STDERR_FILENO);
    ASSERT_TRUE(dup2(fd, STDERR_FILENO) >= 0);
    close(fd);
}

/* Restores stderr; returns how many captured lines contain needle. */
static int capture_end(const char *needle)
{
    dup2(g_saved, STDERR_FILENO);
    close(g_saved);
    FILE *f = fopen(g_path, "r");
    ASSERT_TRUE(f != NULL);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

DT_TEST(log_limit_one_line_per_key_and_interval)
{
    static dt_log_limit lim = DT_LOG_LIMIT_INIT("test", "refusals", 200);
    capture_begin();
    int allowed_a = 0, allowed_b = 0;
    for (int i = 0; i < 1000; i++) {
        allowed_a += dt_log_limit_allow(&lim, "ipv4:10.0.0.9");
        allowed_b += dt_log_limit_allow(&lim, "ipv4:10.0.0.10");
    }
    dt_log_limit_flush(&lim); /* within the interval: nothing yet */
    int early = capture_end("more refusals");
    ASSERT_EQ(allowed_a, 1);
    ASSERT_EQ(allowed_b, 1);
    ASSERT_EQ(early, 0);

    capture_begin();
    struct timespec ts = {0, 250 * 1000 * 1000};
    nanosleep(&ts, NULL);
    dt_log_limit_flush(&lim);
    dt_log_limit_flush(&lim); /* counted once */
    int a = capture_end("999 more refusals from ipv4:10.0.0.9 in the last");
    ASSERT_EQ(a, 1);
    /* After a quiet interval the key is forgotten; the next line passes at once. */
    nanosleep(&ts, NULL);
    dt_log_limit_flush(&lim);
    ASSERT_TRUE(dt_log_limit_allow(&lim, "ipv4:10.0.0.9"));
    ASSERT_FALSE(dt_log_limit_allow(&lim, "ipv4:10.0.0.9"));

    /* More keys than slots: the stalest is summarised, and every new key still gets a line. */
    capture_begin();
    int allowed = 0;
    char key[32];
    for (int i = 0; i < 3 * DT_LOG_LIMIT_KEYS; i++) {
        snprintf(key, sizeof key, "host-%d", i);
        allowed += dt_log_limit_allow(&lim, key);
        allowed += dt_log_limit_allow(&lim, key);
    }
    int evicted = capture_end(" 1 more refusals from ");
    ASSERT_EQ(allowed, 3 * DT_LOG_LIMIT_KEYS);
    /* 96 keys and ipv4:10.0.0.9 (one held back) in 32 slots: 65 summarised on eviction */
    ASSERT_EQ(evicted, 2 * DT_LOG_LIMIT_KEYS + 1);
}

static int g_handled;

static void on_call(void *ctx, dt_rpc_call *call)
{
    (void)ctx;
    g_handled++;
    dt_rpc_call_fail(call, DT_ENOTSUP, "not served");
}

DT_TEST(rpc_refusal_flood_logs_one_line)
{
    dt_err err = {0};
    tr_server srv;
    tr_server_start(&srv, on_call, "the-token");
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dt_rpc_server_port(srv.srv));
    dt_rpc_channel *bad, *good;
    ASSERT_OK(dt_rpc_channel_new(addr, "a-wrong-token", &bad, &err), &err);
    ASSERT_OK(dt_rpc_channel_new(addr, "the-token", &good, &err), &err);

    capture_begin();
    int refused = 0;
    int64_t t0 = dt_now_ms();
    Dtrain__V1__ListJobsRequest req = DTRAIN__V1__LIST_JOBS_REQUEST__INIT;
    for (int i = 0; i < 3000; i++) {
        Dtrain__V1__ListJobsReply *rep = NULL;
        dt_status st = dt_rpc_unary(bad, "/dtrain.v1.Jobs/ListJobs", &req.base,
                                    &dtrain__v1__list_jobs_reply__descriptor,
                                    (ProtobufCMessage **)&rep, 5000, &err);
        refused += st == DT_EAUTH;
        if (rep)
            protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    double secs = (double)(dt_now_ms() - t0) / 1000.0;
    /* The daemon still answers the token holder. */
    Dtrain__V1__ListJobsReply *rep = NULL;
    dt_status good_st = dt_rpc_unary(good, "/dtrain.v1.Jobs/ListJobs", &req.base,
                                     &dtrain__v1__list_jobs_reply__descriptor,
                                     (ProtobufCMessage **)&rep, 5000, &err);
    int lines = capture_end("missing or wrong cluster token");
    printf("3000 refused calls in %.2f s wrote %d log line(s)\n", secs, lines);

    dt_rpc_channel_free(bad);
    dt_rpc_channel_free(good);
    tr_server_stop(&srv);
    ASSERT_EQ(refused, 3000);
    ASSERT_EQ(good_st, DT_ENOTSUP); /* it reached the handler */
    ASSERT_EQ(g_handled, 1);
    ASSERT_TRUE(lines >= 1 && lines <= 2); /* 2 only if the flood outlasted 10 s */
}
