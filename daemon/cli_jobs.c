/*
 * dtrain submit | jobs | status | cancel | export | evaluate | predict - the job verbs. Each
 * talks to the chief (the daemon at --addr); `watch` lives in cli_jobs_watch.c.
 */
#include "cli.h"
#include "cli_jobs.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/limits.h"
#include "export/export.h"

#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --- shared --------------------------------------------------------------------------------------
 */

bool dt_cli_not_connected(const dt_err *err)
{
    return strstr(err->msg, "failed to connect") || strstr(err->msg, "handshake");
}

bool dt_cli_follow_chief(dt_cli_conn *c, const dt_err *err)
{
    static const char redirect[] = "not the chief: send job requests to ";
    const char *p = strstr(err->msg, redirect);
    const char *at = p ? strstr(p, " at ") : NULL;
    if (!at || c->redirected)
        return false;
    char addr[sizeof c->addr];
    snprintf(addr, sizeof addr, "%s", at + 4);
    addr[strcspn(addr, " ;,()")] = '\0';
    dt_rpc_channel *ch = NULL;
    dt_err e2 = {0};
    if (!*addr || dt_rpc_channel_new(addr, c->token, &ch, &e2) != DT_OK)
        return false;
    dt_rpc_channel_free(c->ch);
    c->ch = ch;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    c->redirected = true;
    return true;
}

int dt_cli_call(dt_cli_conn *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                double timeout_s)
{
    dt_err err = {0};
    if (timeout_s <= 0)
        timeout_s = c->timeout_s;
    dt_deadline until = dt_deadline_in((int64_t)(timeout_s * 1000));
    dt_deadline retry_until = dt_deadline_in(3000);
    dt_status st;
    for (;;) {
        int64_t left = dt_deadline_left_ms(until);
        st = dt_rpc_unary(c->ch, method, req, resp_desc, resp, left > 0 ? left : 1, &err);
        /* A connection attempt that failed never sent the request. A busy host can miss gRPC's
         * short handshake window, so try again for a few seconds; a daemon that is not there
         * is still reported quickly. */
        if (st != DT_EPEER || !dt_cli_not_connected(&err) || dt_deadline_passed(retry_until) ||
            dt_deadline_left_ms(until) < 300)
            break;
        dt_sleep_ms(200);
    }
    if (st == DT_ESTATE && dt_cli_follow_chief(c, &err))
        return dt_cli_call(c, method, req, resp_desc, resp, timeout_s);
    if (st == DT_OK)
        return 0;
    fprintf(stderr, "dtrain %s: %s\n", c->verb, err.msg);
    if (st == DT_EPEER)
        fprintf(stderr, "  is dtraind running there? pass --addr HOST:PORT or set DTRAIN_ADDR\n");
    return st == DT_EINVAL || st == DT_ENOENT || st == DT_EPERM || st == DT_EAUTH ||
                   st == DT_ETOOBIG
               ? 2
               : 1;
}

bool dt_cli_job_terminal(const char *state)
{
    return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "cancelled") == 0);
}

int dt_cli_job_exit(const Dtrain__V1__JobInfo *j)
{
    return j->state && (strcmp(j->state, "failed") == 0 || strcmp(j->state, "cancelled") == 0);
}

static double metric_of(const Dtrain__V1__JobInfo *j, const char *name, bool *found)
{
    for (size_t i = 0; i < j->n_metrics; i++)
        if (strcmp(j->metrics[i]->name, name) == 0) {
            *found = true;
            return j->metrics[i]->value;
        }
    *found = false;
    return 0;
}

static void fmt_time(double t, char *buf, size_t n)
{
    if (t <= 0) {
        snprintf(buf, n, "-");
        return;
    }
    time_t s = (time_t)t;
    struct tm tm;
    localtime_r(&s, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

/* Options every job verb takes; extra ones come in `more`. */
typedef struct common_opts {
    const char *addr, *token_file;
    double timeout_s;
    bool json, help;
} common_opts;

enum { O_ADDR = 1000, O_TOKEN, O_TIMEOUT, O_JSON, O_HELP };

#define COMMON_LONGOPTS                                                                            \
    {"addr", required_argument, NULL, O_ADDR}, {"token-file", required_argument, NULL, O_TOKEN},   \
        {"timeout", required_argument, NULL, O_TIMEOUT}, {"json", no_argument, NULL, O_JSON},      \
        {"help", no_argument, NULL, O_HELP},                                                       \
    {                                                                                              \
        NULL, 0, NULL, 0                                                                           \
    }

/* Handles a common option; 0 when ch was one, -1 when not, 2 on a bad value. */
static int common_opt(int ch, common_opts *o, const char *verb)
{
    switch (ch) {
    case O_ADDR:
        o->addr = optarg;
        return 0;
    case O_TOKEN:
        o->token_file = optarg;
        return 0;
    case O_TIMEOUT: {
        char *end;
        o->timeout_s = strtod(optarg, &end);
        if (*end || o->timeout_s <= 0 || o->timeout_s > 86400) {
            fprintf(stderr, "dtrain %s: --timeout %s: give seconds, 0 < SEC <= 86400\n", verb,
                    optarg);
            return 2;
        }
        return 0;
    }
    case O_JSON:
        o->json = true;
        return 0;
    case 'h':
    case O_HELP:
        o->help = true;
        return 0;
    }
    return -1;
}

static const char common_help[] =
    "  --addr HOST:PORT   the chief (default $DTRAIN_ADDR, the chief in $TF_CONFIG, else\n"
    "                     127.0.0.1:7000)\n"
    "  --token-file FILE  the cluster token (default $DTRAIN_TOKEN_FILE)\n"
    "  --timeout SEC      per request (default 30; submit 60, export 120 a piece,\n"
    "                     evaluate and predict 600)\n";

/* Parses a verb's options (the common ones, and --watch when watch is not NULL) and its one
 * positional argument (`what` names it in the error): -1 to go on, else the exit code. */
static int one_arg(int argc, char **argv, const char *verb, const char *what, void (*usage)(FILE *),
                   common_opts *o, bool *watch)
{
    static const struct option with_watch[] = {{"watch", no_argument, NULL, 'w'}, COMMON_LONGOPTS};
    static const struct option plain[] = {COMMON_LONGOPTS};
    int ch, rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", watch ? with_watch : plain, NULL)) != -1) {
        if ((rc = common_opt(ch, o, verb)) > 0)
            return rc;
        if (rc == 0)
            continue;
        if (ch == 'w' && watch) {
            *watch = true;
            continue;
        }
        return dt_cli_bad_option(verb, argc, argv, "h", watch ? with_watch : plain);
    }
    if (o->help) {
        usage(stdout);
        return 0;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "dtrain %s: give one %s (see --help)\n", verb, what);
        return 2;
    }
    return -1;
}

/* --- submit ------------------------------------------------------------------------------------
 */

static void submit_usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain submit JOB.json [--watch] [--json] [options]\n\n"
            "Sends the job spec to the chief, which validates all of it (model, optimizer, loss,\n"
            "data, paths under its --data-root and --state-dir) and queues it; jobs run one at\n"
            "a time on every task of the cluster. Prints the job id. With --watch, follows the\n"
            "job like 'dtrain watch' and exits by its end state.\n"
            "Exit status: 0 queued (with --watch: succeeded), 1 failed or cancelled or the\n"
            "daemon unreachable, 2 a bad spec (the message names its JSON path) or bad usage.\n\n"
            "options:\n"
            "  --watch            follow the job until it ends\n"
            "  --json             print the job as JSON (with --watch: JSON lines)\n%s",
            common_help);
}

/* A relative "model" path names a file beside the job file, where users keep the two: it is
 * read here and sent inline, since the chief would look for it under its --data-root on another
 * host. A path with no such file is left to the chief. Returns an exit code (0: go on). */
static int inline_model(const char *job_path, char **text, size_t *len)
{
    cJSON *root = cJSON_ParseWithLength(*text, *len);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(m) || !m->valuestring[0] || m->valuestring[0] == '/') {
        cJSON_Delete(root); /* bad JSON or no path: the chief names what is wrong */
        return 0;
    }
    char path[PATH_MAX];
    const char *slash = strrchr(job_path, '/');
    int n = slash ? snprintf(path, sizeof path, "%.*s/%s", (int)(slash - job_path), job_path,
                             m->valuestring)
                  : snprintf(path, sizeof path, "%s", m->valuestring);
    if (n < 0 || (size_t)n >= sizeof path || access(path, F_OK) != 0) {
        cJSON_Delete(root);
        return 0;
    }
    char *mtext = NULL;
    size_t mlen = 0;
    dt_err err = {0};
    if (dt_file_read_regular(path, DT_MAX_MODEL_JSON, &mtext, &mlen, &err) != DT_OK) {
        fprintf(stderr, "dtrain submit: $.model: %s\n", err.msg);
        cJSON_Delete(root);
        return 2;
    }
    cJSON *model = cJSON_ParseWithLength(mtext, mlen);
    free(mtext);
    if (!cJSON_IsObject(model)) {
        fprintf(stderr,
                "dtrain submit: $.model: %s is not a JSON object; write it with Keras's "
                "model.to_json()\n",
                path);
        cJSON_Delete(model);
        cJSON_Delete(root);
        return 2;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(root, "model", model);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!out) {
        fprintf(stderr, "dtrain submit: out of memory\n");
        return 1;
    }
    size_t olen = strlen(out);
    if (olen > DT_MAX_JOBSPEC) {
        fprintf(stderr,
                "dtrain submit: $.model: %s makes the job %.1f MiB, more than %u MiB; put it in "
                "the chief's --data-root and give its path there\n",
                path, (double)olen / (1 << 20), DT_MAX_JOBSPEC >> 20);
        free(out);
        return 2;
    }
    free(*text);
    *text = out;
    *len = olen;
    return 0;
}

int dt_cli_submit(int argc, char **argv)
{
    common_opts o = {0};
    bool watch = false;
    int rc = one_arg(argc, argv, "submit", "JOB.json", submit_usage, &o, &watch);
    if (rc >= 0)
        return rc;
    const char *path = argv[optind];
    char *text = NULL;
    size_t len = 0;
    dt_err err = {0};
    if (dt_file_read_all(path, DT_MAX_JOBSPEC, &text, &len, &err) != DT_OK) {
        fprintf(stderr, "dtrain submit: %s\n", err.msg);
        return 2;
    }
    if ((rc = inline_model(path, &text, &len)) != 0) {
        free(text);
        return rc;
    }
    dt_cli_conn c = {.timeout_s = o.timeout_s ? o.timeout_s : 60};
    if ((rc = dt_cli_conn_open(&c, "submit", o.addr, o.token_file)) != 0) {
        free(text);
        return rc;
    }
    Dtrain__V1__SubmitRequest req = DTRAIN__V1__SUBMIT_REQUEST__INIT;
    req.spec_json = text;
    req.source = (char *)path;
    Dtrain__V1__SubmitReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_SUBMIT, &req.base, &dtrain__v1__submit_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    free(text);
    if (rc == 0 && rep->job) {
        char id[64];
        snprintf(id, sizeof id, "%s", rep->job->id);
        if (o.json && !watch)
            dt_cli_print_json(dt_service_job_json(rep->job));
        else if (!o.json)
            printf("job %s (%s) submitted: %s\n", rep->job->id, rep->job->name, rep->job->state);
        fflush(stdout);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        if (watch)
            rc = dt_cli_watch_job(&c, id, o.json);
    } else if (rep) {
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    dt_cli_conn_close(&c);
    return rc;
}

/* --- jobs --------------------------------------------------------------------------------------
 */

static void jobs_usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain jobs [--json] [options]\n\n"
            "Lists the cluster's jobs, oldest first: id, name, state, progress, last loss and\n"
            "accuracy. --json prints {\"jobs\": [<status object>...]} (see 'dtrain status').\n\n"
            "options:\n%s",
            common_help);
}

int dt_cli_jobs(int argc, char **argv)
{
    static const struct option longopts[] = {COMMON_LONGOPTS};
    common_opts o = {0};
    int ch, rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if ((rc = common_opt(ch, &o, "jobs")) > 0)
            return rc;
        if (rc < 0)
            return dt_cli_bad_option("jobs", argc, argv, "h", longopts);
    }
    if (o.help) {
        jobs_usage(stdout);
        return 0;
    }
    if (optind < argc) {
        fprintf(stderr, "dtrain jobs: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    dt_cli_conn c = {.timeout_s = o.timeout_s};
    if ((rc = dt_cli_conn_open(&c, "jobs", o.addr, o.token_file)) != 0)
        return rc;
    Dtrain__V1__ListJobsRequest req = DTRAIN__V1__LIST_JOBS_REQUEST__INIT;
    Dtrain__V1__ListJobsReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_LIST, &req.base, &dtrain__v1__list_jobs_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    if (rc == 0 && o.json) {
        cJSON *out = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(out, "jobs");
        for (size_t i = 0; i < rep->n_jobs; i++)
            cJSON_AddItemToArray(arr, dt_service_job_json(rep->jobs[i]));
        dt_cli_print_json(out);
    } else if (rc == 0) {
        printf("%-6s %-24s %-10s %-7s %-13s %-8s %-8s %s\n", "ID", "NAME", "STATE", "EPOCH", "STEP",
               "LOSS", "ACC", "SUBMITTED");
        for (size_t i = 0; i < rep->n_jobs; i++) {
            const Dtrain__V1__JobInfo *j = rep->jobs[i];
            char ep[32], st[48], loss[16] = "-", acc[16] = "-", when[32];
            bool f;
            double v = metric_of(j, "loss", &f);
            if (f)
                snprintf(loss, sizeof loss, "%.4f", v);
            v = metric_of(j, "accuracy", &f);
            if (f)
                snprintf(acc, sizeof acc, "%.4f", v);
            snprintf(ep, sizeof ep, "%u/%u", j->epoch, j->epochs);
            if (j->steps_per_epoch)
                snprintf(st, sizeof st, "%llu/%llu", (unsigned long long)j->step,
                         (unsigned long long)j->steps_per_epoch);
            else
                snprintf(st, sizeof st, "%llu", (unsigned long long)j->step);
            fmt_time(j->submitted_unix, when, sizeof when);
            printf("%-6s %-24s %-10s %-7s %-13s %-8s %-8s %s\n", j->id, j->name, j->state, ep, st,
                   loss, acc, when);
        }
        if (rep->n_jobs == 0)
            printf("(no jobs yet: dtrain submit JOB.json)\n");
    }
    if (rep)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    dt_cli_conn_close(&c);
    return rc;
}

/* --- status ------------------------------------------------------------------------------------
 */

static void status_usage(FILE *f)
{
    fprintf(
        f,
        "usage: dtrain status [JOB] [--json] [options]\n\n"
        "Shows one job (by id, or by name: its latest job); without JOB, the running job or\n"
        "else the latest one. --json prints {\"id\", \"name\", \"state\", \"epoch\", \"step\",\n"
        "\"metrics\", \"error\", \"restarts\", ...}; states are queued, preparing, running,\n"
        "restarting (a task was lost: see README \"Faults and recovery\"), succeeded, failed,\n"
        "cancelled.\n"
        "Exit status: 0, or 1 when the job failed or was cancelled; 2 for an unknown job.\n\n"
        "options:\n%s",
        common_help);
}

/* The job to show when none is named: the one holding the cluster, else the latest. */
static int pick_job(dt_cli_conn *c, char *id, size_t n)
{
    Dtrain__V1__ListJobsRequest req = DTRAIN__V1__LIST_JOBS_REQUEST__INIT;
    Dtrain__V1__ListJobsReply *rep = NULL;
    int rc = dt_cli_call(c, DT_CLI_RPC_JOBS_LIST, &req.base,
                         &dtrain__v1__list_jobs_reply__descriptor, (ProtobufCMessage **)&rep, 0);
    if (rc)
        return rc;
    const Dtrain__V1__JobInfo *pick = NULL;
    for (size_t i = 0; i < rep->n_jobs; i++) {
        const char *s = rep->jobs[i]->state;
        if (strcmp(s, "preparing") == 0 || strcmp(s, "running") == 0)
            pick = rep->jobs[i];
    }
    if (!pick && rep->n_jobs)
        pick = rep->jobs[rep->n_jobs - 1];
    if (pick)
        snprintf(id, n, "%s", pick->id);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    if (!pick) {
        fprintf(stderr, "dtrain %s: no jobs on this cluster yet\n", c->verb);
        return 2;
    }
    return 0;
}

static void print_status(const Dtrain__V1__JobInfo *j)
{
    char when[32];
    printf("job %s (%s): %s\n", j->id, j->name, j->state);
    if (j->waiting && *j->waiting)
        printf("  waiting     %s\n", j->waiting);
    if (j->epochs)
        printf("  epoch       %u/%u", j->epoch, j->epochs);
    if (j->steps_per_epoch)
        printf(", step %llu/%llu", (unsigned long long)j->step,
               (unsigned long long)j->steps_per_epoch);
    if (j->epochs)
        printf("\n");
    if (j->n_metrics) {
        printf("  metrics    ");
        for (size_t i = 0; i < j->n_metrics; i++)
            if (strcmp(j->metrics[i]->name, "global_step") != 0)
                printf(" %s %.4g", j->metrics[i]->name, j->metrics[i]->value);
        printf("\n");
    }
    printf("  tasks       %u", j->world_size);
    if (j->examples)
        printf(", %llu training examples", (unsigned long long)j->examples);
    if (j->params)
        printf(", %llu parameters", (unsigned long long)j->params);
    printf("\n");
    fmt_time(j->submitted_unix, when, sizeof when);
    printf("  submitted   %s\n", when);
    if (j->started_unix > 0) {
        fmt_time(j->started_unix, when, sizeof when);
        printf("  started     %s\n", when);
    }
    if (j->finished_unix > 0) {
        fmt_time(j->finished_unix, when, sizeof when);
        printf("  finished    %s", when);
        if (j->started_unix > 0)
            printf(" (%.1f s of training)", j->finished_unix - j->started_unix);
        printf("\n");
    }
    if (j->stopped && *j->stopped)
        printf("  stopped     early: %s\n", j->stopped);
    if (j->weights_path && *j->weights_path)
        printf("  weights     %s (on the chief; 'dtrain export %s -o FILE' fetches them)\n",
               j->weights_path, j->id);
    if (j->restarts || j->max_restarts != 3)
        printf("  restarts    %u of %u%s\n", j->restarts, j->max_restarts,
               j->min_workers ? " (elastic)" : "");
    if (j->error && *j->error)
        printf("  %s %s\n", strcmp(j->state, "restarting") == 0 ? "why        " : "error      ",
               j->error);
}

int dt_cli_status(int argc, char **argv)
{
    static const struct option longopts[] = {COMMON_LONGOPTS};
    common_opts o = {0};
    int ch, rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if ((rc = common_opt(ch, &o, "status")) > 0)
            return rc;
        if (rc < 0)
            return dt_cli_bad_option("status", argc, argv, "h", longopts);
    }
    if (o.help) {
        status_usage(stdout);
        return 0;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "dtrain status: give at most one JOB (see --help)\n");
        return 2;
    }
    dt_cli_conn c = {.timeout_s = o.timeout_s};
    if ((rc = dt_cli_conn_open(&c, "status", o.addr, o.token_file)) != 0)
        return rc;
    char id[256];
    if (optind < argc)
        snprintf(id, sizeof id, "%s", argv[optind]);
    else if ((rc = pick_job(&c, id, sizeof id)) != 0) {
        dt_cli_conn_close(&c);
        return rc;
    }
    Dtrain__V1__JobRef req = DTRAIN__V1__JOB_REF__INIT;
    req.id = id;
    Dtrain__V1__JobReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_STATUS, &req.base, &dtrain__v1__job_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    if (rc == 0 && rep->job) {
        if (o.json)
            dt_cli_print_json(dt_service_job_json(rep->job));
        else
            print_status(rep->job);
        rc = dt_cli_job_exit(rep->job);
    }
    if (rep)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    dt_cli_conn_close(&c);
    return rc;
}

/* --- cancel ------------------------------------------------------------------------------------
 */

static void cancel_usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain cancel JOB [--json] [options]\n\n"
            "Cancels a job: a queued one at once; a running one stops on every task within\n"
            "seconds. Waits (up to --timeout, default 30 s) until the job is cancelled.\n"
            "Exit status: 0 cancelled, 1 the job had already ended otherwise or did not stop in\n"
            "time, 2 an unknown job.\n\n"
            "options:\n%s",
            common_help);
}

int dt_cli_cancel(int argc, char **argv)
{
    common_opts o = {0};
    int rc = one_arg(argc, argv, "cancel", "JOB", cancel_usage, &o, NULL);
    if (rc >= 0)
        return rc;
    double wait_s = o.timeout_s ? o.timeout_s : 30;
    dt_cli_conn c = {.timeout_s = 30};
    if ((rc = dt_cli_conn_open(&c, "cancel", o.addr, o.token_file)) != 0)
        return rc;
    Dtrain__V1__JobRef req = DTRAIN__V1__JOB_REF__INIT;
    req.id = argv[optind];
    Dtrain__V1__JobReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_CANCEL, &req.base, &dtrain__v1__job_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    dt_deadline until = dt_deadline_in((int64_t)(wait_s * 1000));
    while (rc == 0 && rep->job && !dt_cli_job_terminal(rep->job->state) &&
           !dt_deadline_passed(until)) {
        dt_sleep_ms(200);
        char id[64];
        snprintf(id, sizeof id, "%s", rep->job->id);
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        rep = NULL;
        req.id = id;
        rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_STATUS, &req.base, &dtrain__v1__job_reply__descriptor,
                         (ProtobufCMessage **)&rep, 0);
    }
    if (rc == 0 && rep->job) {
        const Dtrain__V1__JobInfo *j = rep->job;
        if (o.json)
            dt_cli_print_json(dt_service_job_json(j));
        if (strcmp(j->state, "cancelled") == 0) {
            if (!o.json)
                printf("job %s (%s) cancelled\n", j->id, j->name);
        } else if (dt_cli_job_terminal(j->state)) {
            fprintf(stderr, "dtrain cancel: job %s had already %s\n", j->id, j->state);
            rc = 1;
        } else {
            fprintf(stderr, "dtrain cancel: job %s is still %s after %.0f s\n", j->id, j->state,
                    wait_s);
            rc = 1;
        }
    }
    if (rep)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    dt_cli_conn_close(&c);
    return rc;
}

/* --- resume ------------------------------------------------------------------------------------
 */

static void resume_usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain resume JOB [--watch] [--json] [options]\n\n"
            "Queues a failed or cancelled job again. Its next run resumes from its latest\n"
            "checkpoint (from the start when it has none) as if it had never stopped: the same\n"
            "data order, optimizer slots and Dropout draws. With --watch, follows the job like\n"
            "'dtrain watch' and exits by its end state.\n"
            "Exit status: 0 queued (with --watch: succeeded), 1 failed or cancelled again or the\n"
            "daemon unreachable, 2 an unknown job, one that succeeded or still runs, or bad\n"
            "usage.\n\n"
            "options:\n"
            "  --watch            follow the job until it ends\n"
            "  --json             print the job as JSON (with --watch: JSON lines)\n%s",
            common_help);
}

int dt_cli_resume(int argc, char **argv)
{
    common_opts o = {0};
    bool watch = false;
    int rc = one_arg(argc, argv, "resume", "JOB", resume_usage, &o, &watch);
    if (rc >= 0)
        return rc;
    dt_cli_conn c = {.timeout_s = o.timeout_s ? o.timeout_s : 30};
    if ((rc = dt_cli_conn_open(&c, "resume", o.addr, o.token_file)) != 0)
        return rc;
    Dtrain__V1__JobRef req = DTRAIN__V1__JOB_REF__INIT;
    req.id = argv[optind];
    Dtrain__V1__JobReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_RESUME, &req.base, &dtrain__v1__job_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    if (rc == 0 && rep->job) {
        char id[64];
        snprintf(id, sizeof id, "%s", rep->job->id);
        if (watch)
            rc = dt_cli_watch_job(&c, id, o.json);
        else if (o.json)
            dt_cli_print_json(dt_service_job_json(rep->job));
        else
            printf("job %s (%s) queued; it resumes from its latest checkpoint\n", id,
                   rep->job->name);
    }
    if (rep)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    dt_cli_conn_close(&c);
    return rc;
}

/* --- rm ----------------------------------------------------------------------------------------
 */

static void rm_usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain rm JOB [--json] [options]\n\n"
            "Removes an ended job from the chief: its entry, its event history and its directory\n"
            "under the chief's --state-dir (checkpoints, final weights, exports). A checkpoint or\n"
            "TensorBoard directory the spec put elsewhere stays. A queued or running job must be\n"
            "cancelled first. (dtraind --keep-jobs N does this for all but the newest N.)\n"
            "Exit status: 0 removed, 1 the daemon unreachable, 2 an unknown job, one that has\n"
            "not ended, or bad usage.\n\n"
            "options:\n"
            "  --json             print the removed job as JSON\n%s",
            common_help);
}

int dt_cli_rm(int argc, char **argv)
{
    common_opts o = {0};
    int rc = one_arg(argc, argv, "rm", "JOB", rm_usage, &o, NULL);
    if (rc >= 0)
        return rc;
    dt_cli_conn c = {.timeout_s = o.timeout_s ? o.timeout_s : 30};
    if ((rc = dt_cli_conn_open(&c, "rm", o.addr, o.token_file)) != 0)
        return rc;
    Dtrain__V1__JobRef req = DTRAIN__V1__JOB_REF__INIT;
    req.id = argv[optind];
    Dtrain__V1__JobReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_REMOVE, &req.base, &dtrain__v1__job_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    if (rc == 0 && rep->job) {
        if (o.json)
            dt_cli_print_json(dt_service_job_json(rep->job));
        else
            printf("job %s (%s) removed\n", rep->job->id, rep->job->name);
    }
    if (rep)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    dt_cli_conn_close(&c);
    return rc;
}

/* --- export ------------------------------------------------------------------------------------
 */

static void export_usage(FILE *f)
{
    fprintf(f,
            "usage: dtrain export JOB -o FILE.safetensors [--checkpoint] [--json] [options]\n\n"
            "Fetches a succeeded job's final weights from the chief and writes them to FILE\n"
            "(safetensors, Keras names: \"<layer>/kernel\", \"<layer>/bias\", ...; no optimizer\n"
            "state). The file is written atomically; weights of any size come in pieces of\n"
            "32 MiB (a progress line on a terminal), all from the same file on the chief.\n\n"
            "options:\n"
            "  -o, --output FILE  where to write (required)\n"
            "  --checkpoint       the job's latest checkpoint instead (any state, while it runs\n"
            "                     too)\n%s",
            common_help);
}

static int write_output(const char *verb, const char *path, const void *data, size_t len)
{
    dt_err err = {0};
    if (dt_file_write_atomic(path, data, len, &err) != DT_OK) {
        fprintf(stderr, "dtrain %s: %s\n", verb, err.msg);
        return 1;
    }
    return 0;
}

/* One Export piece through the CLI's connection: a chief that is slow to accept is tried again
 * for a few seconds, as dt_cli_call does. */
static dt_status export_unary(void *arg, const Dtrain__V1__ExportRequest *req,
                              Dtrain__V1__ExportReply **rep, int64_t timeout_ms, dt_err *err)
{
    dt_cli_conn *c = arg;
    dt_deadline until = dt_deadline_in(timeout_ms);
    dt_deadline retry_until = dt_deadline_in(3000);
    for (;;) {
        int64_t left = dt_deadline_left_ms(until);
        dt_status st = dt_rpc_unary(c->ch, DT_CLI_RPC_JOBS_EXPORT, &req->base,
                                    &dtrain__v1__export_reply__descriptor, (ProtobufCMessage **)rep,
                                    left > 0 ? left : 1, err);
        if (st == DT_ESTATE && dt_cli_follow_chief(c, err))
            continue;
        if (st != DT_EPEER || !dt_cli_not_connected(err) || dt_deadline_passed(retry_until) ||
            dt_deadline_left_ms(until) < 300)
            return st;
        dt_sleep_ms(200);
    }
}

typedef struct export_progress {
    bool tty;
    bool shown;
    int64_t t0;
} export_progress;

static void export_show(void *arg, uint64_t done, uint64_t total)
{
    export_progress *p = arg;
    if (!p->tty || (done == total && !p->shown))
        return; /* one-piece files need no bar */
    p->shown = true;
    double s = (double)(dt_now_ms() - p->t0) / 1000.0;
    fprintf(stderr, "\r%.1f / %.1f MB (%3.0f%%) %.1fs%s", done / 1e6, total / 1e6,
            100.0 * (double)done / (double)total, s, done == total ? "\n" : "");
    fflush(stderr);
}

static void export_restarted(void *arg, const char *why)
{
    export_progress *p = arg;
    if (p->shown)
        fputc('\n', stderr);
    p->shown = false;
    fprintf(stderr, "dtrain export: %s; starting over\n", why);
}

int dt_cli_export(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"checkpoint", no_argument, NULL, 'C'},
                                             COMMON_LONGOPTS};
    common_opts o = {0};
    const char *out = NULL;
    bool checkpoint = false;
    int ch, rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
        if ((rc = common_opt(ch, &o, "export")) > 0)
            return rc;
        if (rc == 0)
            continue;
        if (ch == 'o') {
            out = optarg;
            continue;
        }
        if (ch == 'C') {
            checkpoint = true;
            continue;
        }
        return dt_cli_bad_option("export", argc, argv, "ho:", longopts);
    }
    if (o.help) {
        export_usage(stdout);
        return 0;
    }
    if (optind + 1 != argc || !out) {
        fprintf(stderr, "dtrain export: give one JOB and -o FILE.safetensors (see --help)\n");
        return 2;
    }
    dt_cli_conn c = {.timeout_s = o.timeout_s ? o.timeout_s : 120};
    if ((rc = dt_cli_conn_open(&c, "export", o.addr, o.token_file)) != 0)
        return rc;
    export_progress prog = {.tty = isatty(STDERR_FILENO) == 1, .t0 = dt_now_ms()};
    dt_export_fetch_opts fo = {
        .ch = c.ch,
        .id = argv[optind],
        .checkpoint = checkpoint,
        .call_timeout_ms = (int64_t)(c.timeout_s * 1000),
        .restart_if_gone = true, /* a checkpoint rotated away mid-fetch: once, from the newest */
        .unary = export_unary,
        .unary_arg = &c,
        .progress = export_show,
        .restarted = export_restarted,
        .arg = &prog,
    };
    dt_export_info info;
    dt_err err = {0};
    dt_status st = dt_export_fetch(&fo, out, &info, &err);
    if (st != DT_OK) {
        if (prog.shown)
            fputc('\n', stderr);
        fprintf(stderr, "dtrain export: %s\n", err.msg);
        if (st == DT_EPEER)
            fprintf(stderr,
                    "  is dtraind running there? pass --addr HOST:PORT or set DTRAIN_ADDR\n");
        rc = st == DT_EINVAL || st == DT_ENOENT || st == DT_EPERM || st == DT_EAUTH ||
                     st == DT_ETOOBIG
                 ? 2
                 : 1;
    } else if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "path", out);
        cJSON_AddNumberToObject(j, "bytes", (double)info.bytes);
        cJSON_AddStringToObject(j, "source", info.source_path);
        cJSON_AddNumberToObject(j, "global_step", (double)info.global_step);
        cJSON_AddStringToObject(j, "state", info.state);
        cJSON_AddNumberToObject(j, "chunks", info.chunks);
        dt_cli_print_json(j);
    } else {
        printf("wrote %s (%" PRIu64 " bytes, step %" PRIu64 ") from the chief's %s\n", out,
               info.bytes, info.global_step, info.source_path);
    }
    dt_export_info_destroy(&info);
    dt_cli_conn_close(&c);
    return rc;
}

/* --- evaluate, predict -------------------------------------------------------------------------
 */

/* --data: inline JSON, or a file holding it. */
static int read_data_arg(const char *verb, const char *arg, char **out)
{
    const char *p = arg;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (*p == '{') {
        *out = strdup(arg);
        return *out ? 0 : 1;
    }
    size_t len;
    dt_err err = {0};
    if (dt_file_read_all(arg, DT_MAX_JOBSPEC, out, &len, &err) != DT_OK) {
        fprintf(stderr, "dtrain %s: --data: %s (give a JSON object or a file holding one)\n", verb,
                err.msg);
        return 2;
    }
    /* A whole job spec is accepted too: its validation split, else its training split. */
    cJSON *j = cJSON_Parse(*out);
    cJSON *data = j ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
    if (cJSON_IsObject(data)) {
        cJSON *split = cJSON_GetObjectItemCaseSensitive(data, "validation");
        if (!cJSON_IsObject(split))
            split = cJSON_GetObjectItemCaseSensitive(data, "train");
        char *s = cJSON_IsObject(split) ? cJSON_PrintUnformatted(split) : NULL;
        if (s) {
            free(*out);
            *out = s;
        }
    }
    cJSON_Delete(j);
    return 0;
}

static void eval_usage(FILE *f, bool predict)
{
    if (predict)
        fprintf(f,
                "usage: dtrain predict JOB --data SPEC -o FILE [--format csv|npy] [options]\n\n"
                "Runs a succeeded job's final weights on every example of a data split on the\n"
                "chief and writes the model's outputs to FILE: .csv (one line per example) or\n"
                "NumPy .npy (float32, shape [examples, outputs]; the default for other names).\n");
    else
        fprintf(f, "usage: dtrain evaluate JOB --data SPEC [--batch N] [--json] [options]\n\n"
                   "Evaluates a succeeded job's final weights on a data split on the chief and\n"
                   "prints the loss and metrics. --json prints {\"examples\", \"loss\", "
                   "\"accuracy\"}.\n");
    fprintf(f, "SPEC is a data split as in a job's $.data.train ({\"format\": \"idx\", ...}),\n"
               "inline or in a file (a whole job spec gives its validation split); its paths\n"
               "resolve on the chief under its --data-root.\n\n"
               "options:\n"
               "  --data SPEC        the data split (required)\n"
               "  --batch N          examples per batch (default: the job's batch size)\n");
    if (predict)
        fprintf(f, "  -o, --output FILE  where to write (required)\n"
                   "  --format csv|npy   output format (default: by FILE's extension)\n");
    fprintf(f, "%s", common_help);
}

static int eval_or_predict(int argc, char **argv, bool predict)
{
    const char *verb = predict ? "predict" : "evaluate";
    static const struct option longopts[] = {{"data", required_argument, NULL, 'd'},
                                             {"batch", required_argument, NULL, 'b'},
                                             {"output", required_argument, NULL, 'o'},
                                             {"format", required_argument, NULL, 'f'},
                                             COMMON_LONGOPTS};
    common_opts o = {0};
    const char *data = NULL, *out = NULL, *format = NULL;
    long batch = 0;
    int ch, rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, predict ? "ho:" : "h", longopts, NULL)) != -1) {
        if ((rc = common_opt(ch, &o, verb)) > 0)
            return rc;
        if (rc == 0)
            continue;
        char *end;
        switch (ch) {
        case 'd':
            data = optarg;
            continue;
        case 'b':
            batch = strtol(optarg, &end, 10);
            if (*end || batch <= 0 || batch > 1 << 20) {
                fprintf(stderr, "dtrain %s: --batch %s: give a positive integer\n", verb, optarg);
                return 2;
            }
            continue;
        case 'o':
            if (predict) {
                out = optarg;
                continue;
            }
            break;
        case 'f':
            if (predict) {
                format = optarg;
                continue;
            }
            break;
        }
        return dt_cli_bad_option(verb, argc, argv, predict ? "ho:" : "h", longopts);
    }
    if (o.help) {
        eval_usage(stdout, predict);
        return 0;
    }
    if (optind + 1 != argc || !data || (predict && !out)) {
        fprintf(stderr, "dtrain %s: give one JOB and --data SPEC%s (see --help)\n", verb,
                predict ? " and -o FILE" : "");
        return 2;
    }
    if (format && strcmp(format, "csv") != 0 && strcmp(format, "npy") != 0) {
        fprintf(stderr, "dtrain predict: --format %s: use csv or npy\n", format);
        return 2;
    }
    if (predict && !format) {
        size_t n = strlen(out);
        format = n > 4 && strcmp(out + n - 4, ".csv") == 0 ? "csv" : "npy";
    }
    char *spec = NULL;
    if ((rc = read_data_arg(verb, data, &spec)) != 0)
        return rc;
    dt_cli_conn c = {.timeout_s = o.timeout_s ? o.timeout_s : 600};
    if ((rc = dt_cli_conn_open(&c, verb, o.addr, o.token_file)) != 0) {
        free(spec);
        return rc;
    }
    if (predict) {
        Dtrain__V1__PredictRequest req = DTRAIN__V1__PREDICT_REQUEST__INIT;
        req.id = argv[optind];
        req.data_json = spec;
        req.batch_size = (uint32_t)batch;
        req.format = (char *)format;
        Dtrain__V1__PredictReply *rep = NULL;
        rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_PREDICT, &req.base,
                         &dtrain__v1__predict_reply__descriptor, (ProtobufCMessage **)&rep, 0);
        if (rc == 0)
            rc = write_output(verb, out, rep->output.data, rep->output.len);
        if (rc == 0 && o.json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "path", out);
            cJSON_AddStringToObject(j, "format", format);
            cJSON_AddNumberToObject(j, "rows", (double)rep->rows);
            cJSON_AddNumberToObject(j, "cols", (double)rep->cols);
            dt_cli_print_json(j);
        } else if (rc == 0) {
            printf("wrote %s: %llu examples x %llu outputs (%s)\n", out,
                   (unsigned long long)rep->rows, (unsigned long long)rep->cols, format);
        }
        if (rep)
            protobuf_c_message_free_unpacked(&rep->base, NULL);
    } else {
        Dtrain__V1__EvaluateRequest req = DTRAIN__V1__EVALUATE_REQUEST__INIT;
        req.id = argv[optind];
        req.data_json = spec;
        req.batch_size = (uint32_t)batch;
        Dtrain__V1__EvaluateReply *rep = NULL;
        rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_EVALUATE, &req.base,
                         &dtrain__v1__evaluate_reply__descriptor, (ProtobufCMessage **)&rep, 0);
        if (rc == 0 && o.json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddNumberToObject(j, "examples", (double)rep->examples);
            for (size_t i = 0; i < rep->n_metrics; i++)
                cJSON_AddNumberToObject(j, rep->metrics[i]->name, rep->metrics[i]->value);
            dt_cli_print_json(j);
        } else if (rc == 0) {
            printf("%llu examples", (unsigned long long)rep->examples);
            for (size_t i = 0; i < rep->n_metrics; i++)
                printf(" - %s: %.4f", rep->metrics[i]->name, rep->metrics[i]->value);
            printf("\n");
        }
        if (rep)
            protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    free(spec);
    dt_cli_conn_close(&c);
    return rc;
}

int dt_cli_evaluate(int argc, char **argv)
{
    return eval_or_predict(argc, argv, false);
}

int dt_cli_predict(int argc, char **argv)
{
    return eval_or_predict(argc, argv, true);
}
