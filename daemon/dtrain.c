/* dtrain - the command-line client: parses the verb and hands off to daemon/cli_<verb>.c. */
#include "cli.h"

#include "config/tfconfig.h"
#include "core/log.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct verb {
    const char *name;
    dt_cli_verb_fn fn;
    const char *summary;
} verb;

static const verb verbs[] = {
    {"bench", dt_cli_bench, "benchmarks: dtrain bench train|allreduce (see --help)"},
    {"cluster", dt_cli_cluster, "show the cluster's tasks, their state and heartbeats"},
    {"data", dt_cli_data, "inspect data files: dtrain data inspect FILE..."},
    {"summary", dt_cli_summary, "print a Keras model's layer table: dtrain summary MODEL.json"},
    {"submit", dt_cli_submit, "submit a training job: dtrain submit JOB.json [--watch]"},
    {"jobs", dt_cli_jobs, "list the cluster's jobs"},
    {"status", dt_cli_status, "show one job: dtrain status [JOB] [--json]"},
    {"watch", dt_cli_watch, "follow a job's progress: dtrain watch JOB"},
    {"cancel", dt_cli_cancel, "cancel a job: dtrain cancel JOB"},
    {"resume", dt_cli_resume, "resume a failed or cancelled job from its latest checkpoint"},
    {"rm", dt_cli_rm, "remove an ended job and its files from the chief: dtrain rm JOB"},
    {"export", dt_cli_export, "fetch final weights: dtrain export JOB -o FILE.safetensors"},
    {"evaluate", dt_cli_evaluate, "evaluate final weights: dtrain evaluate JOB --data SPEC"},
    {"predict", dt_cli_predict, "predict: dtrain predict JOB --data SPEC -o FILE"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: dtrain [--addr HOST:PORT] [--token-file FILE] [--tls-ca FILE]\n"
               "              [--tls-cert FILE --tls-key FILE] VERB [ARGS...] [--json]\n\n"
               "Talks to the dtraind daemon at --addr, else $DTRAIN_ADDR, else the chief in\n"
               "$TF_CONFIG, else 127.0.0.1:7000, proving the cluster token in --token-file\n"
               "(else $DTRAIN_TOKEN_FILE) when the daemon has one. With --tls-ca (else\n"
               "$DTRAIN_TLS_CA) the connection is TLS, the daemon's certificate checked against\n"
               "that CA; --tls-cert/--tls-key (else $DTRAIN_TLS_CERT/$DTRAIN_TLS_KEY) present a\n"
               "client certificate, which a daemon started with --tls-ca requires.\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\n'dtrain VERB --help' describes one verb. Exit status: 0 success, 1 failure,\n"
               "2 bad usage or input.\n");
}

int dt_cli_conn_open(dt_cli_conn *c, const char *verb, const char *addr_flag,
                     const char *token_file)
{
    c->verb = verb;
    if (c->timeout_s <= 0)
        c->timeout_s = 30;
    dt_cli_daemon_addr(addr_flag, c->addr, sizeof c->addr);
    dt_err err = {0};
    if (!token_file)
        token_file = getenv("DTRAIN_TOKEN_FILE");
    if (token_file && *token_file && dt_rpc_token_load(token_file, &c->token, &err) != DT_OK) {
        fprintf(stderr, "dtrain %s: %s\n", verb, err.msg);
        return 2;
    }
    static int tls_done; /* one TLS setting per process, made before its first channel */
    if (!tls_done) {
        dt_rpc_tls_opts to = {.cert_file = getenv("DTRAIN_TLS_CERT"),
                              .key_file = getenv("DTRAIN_TLS_KEY"),
                              .ca_file = getenv("DTRAIN_TLS_CA")};
        if (to.cert_file && !*to.cert_file)
            to.cert_file = NULL;
        if (to.key_file && !*to.key_file)
            to.key_file = NULL;
        if (to.ca_file && !*to.ca_file)
            to.ca_file = NULL;
        if (dt_rpc_tls_setup(&to, &err) != DT_OK) {
            fprintf(stderr, "dtrain %s: %s\n", verb, err.msg);
            return 2;
        }
        tls_done = 1;
    }
    if (dt_rpc_channel_new(c->addr, c->token, &c->ch, &err) != DT_OK) {
        fprintf(stderr, "dtrain %s: %s\n", verb, err.msg);
        return 1;
    }
    return 0;
}

void dt_cli_conn_close(dt_cli_conn *c)
{
    dt_rpc_channel_free(c->ch);
    free(c->token);
    c->ch = NULL;
    c->token = NULL;
}

int dt_cli_int(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < INT_MIN + 1 || v > INT_MAX)
        return INT_MIN;
    return (int)v;
}

double dt_cli_double(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || isnan(v) || isinf(v))
        return NAN;
    return v;
}

const char *dt_cli_daemon_addr(const char *flag_addr, char *buf, size_t n)
{
    const char *env = getenv("DTRAIN_ADDR");
    if (flag_addr && *flag_addr) {
        snprintf(buf, n, "%s", flag_addr);
        return buf;
    }
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return buf;
    }
    const char *tf = getenv("TF_CONFIG");
    if (tf && *tf) {
        dt_cluster_spec spec;
        dt_err err = {0};
        if (dt_tfconfig_parse(tf, strlen(tf), &spec, &err) == DT_OK) {
            snprintf(buf, n, "%s", spec.tasks[spec.chief].address);
            dt_tfconfig_destroy(&spec);
            return buf;
        }
    }
    snprintf(buf, n, "127.0.0.1:7000");
    return buf;
}

int main(int argc, char **argv)
{
    dt_log_init();
    /* Global options before the verb: --addr is also accepted by the verbs themselves. */
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("dtrain %s\n", DT_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--addr") == 0 && i + 1 < argc) {
            setenv("DTRAIN_ADDR", argv[++i], 1);
            continue;
        }
        if (strncmp(argv[i], "--addr=", 7) == 0) {
            setenv("DTRAIN_ADDR", argv[i] + 7, 1);
            continue;
        }
        if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) {
            setenv("DTRAIN_TOKEN_FILE", argv[++i], 1);
            continue;
        }
        /* TLS files go through the environment, like --token-file, to reach every verb. */
        const char *tls_flags[][2] = {{"--tls-ca", "DTRAIN_TLS_CA"},
                                      {"--tls-cert", "DTRAIN_TLS_CERT"},
                                      {"--tls-key", "DTRAIN_TLS_KEY"}};
        int matched = 0;
        for (size_t t = 0; t < 3 && !matched; t++) {
            if (strcmp(argv[i], tls_flags[t][0]) == 0 && i + 1 < argc) {
                setenv(tls_flags[t][1], argv[++i], 1);
                matched = 1;
            }
        }
        if (matched)
            continue;
        fprintf(stderr, "dtrain: unknown option %s before the verb\n", argv[i]);
        usage(stderr);
        return 2;
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++)
        if (strcmp(argv[i], verbs[v].name) == 0)
            return verbs[v].fn(argc - i, argv + i);
    fprintf(stderr, "dtrain: unknown verb '%s'\n", argv[i]);
    usage(stderr);
    return 2;
}
