/* dtrain - the command-line client: parses the verb and hands off to daemon/cli_<verb>.c. */
#include "cli.h"

#include "config/tfconfig.h"
#include "core/log.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct verb {
    const char *name;
    dt_cli_verb_fn fn;
    const char *summary;
} verb;

static const verb verbs[] = {
    {"bench", dt_cli_bench, "benchmarks: dtrain bench train|allreduce|data (see --help)"},
    {"cluster", dt_cli_cluster, "show the cluster's tasks, their state and heartbeats"},
    {"data", dt_cli_data, "inspect data files: dtrain data inspect FILE..."},
    {"summary", dt_cli_summary, "print a Keras model's layer table: dtrain summary MODEL.json"},
    {"submit", dt_cli_submit, "submit a training job: dtrain submit JOB.json [--watch]"},
    {"jobs", dt_cli_jobs, "list the cluster's jobs"},
    {"status", dt_cli_status, "show one job: dtrain status [JOB] [--json]"},
    {"watch", dt_cli_watch, "follow a job's progress: dtrain watch JOB"},
    {"top", dt_cli_top, "a live view of the cluster and its job: dtrain top [JOB] [--once]"},
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
               "              [--tls-cert FILE --tls-key FILE] [--timeout SEC] [--json]\n"
               "              VERB [ARGS...]\n\n"
               "Talks to the dtraind daemon at --addr, else $DTRAIN_ADDR, else the chief in\n"
               "$TF_CONFIG, else 127.0.0.1:7000, proving the cluster token in --token-file\n"
               "(else $DTRAIN_TOKEN_FILE) when the daemon has one. A job request sent to a\n"
               "worker follows it to the chief. With --tls-ca (else $DTRAIN_TLS_CA) the\n"
               "connection is TLS, the daemon's certificate checked against that CA;\n"
               "--tls-cert/--tls-key (else $DTRAIN_TLS_CERT/$DTRAIN_TLS_KEY) present a client\n"
               "certificate, which a daemon started with --tls-ca requires. These options go\n"
               "before or after the verb; --timeout and --json before it apply to the verb.\n\n"
               "verbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "  %-10s %s\n", "help", "this text, or one verb's: dtrain help VERB");
    fprintf(f, "\n'dtrain help VERB' (or 'dtrain VERB --help') describes one verb. Exit status:\n"
               "0 success, 1 failure, 2 bad usage or input.\n");
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

int dt_cli_print_json(cJSON *o)
{
    char *s = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!s) {
        fprintf(stderr, "dtrain: out of memory printing JSON\n");
        return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
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

/* Options that mean the same to every verb, taken before or after it. The connection ones
 * reach the verbs through the environment (each verb reads $DTRAIN_ADDR and friends when it
 * has no flag); --json and --timeout are the verbs' own, moved behind the verb. */
typedef struct global_opt {
    const char *name;
    const char *env; /* NULL: handed to the verb */
    bool anywhere;   /* also taken after the verb */
} global_opt;

static const global_opt globals[] = {
    {"--addr", "DTRAIN_ADDR", true},
    {"--token-file", "DTRAIN_TOKEN_FILE", true},
    {"--tls-ca", "DTRAIN_TLS_CA", true},
    {"--tls-cert", "DTRAIN_TLS_CERT", true},
    {"--tls-key", "DTRAIN_TLS_KEY", true},
    {"--timeout", NULL, false},
    {"--json", NULL, false},
};
#define NGLOBALS (sizeof globals / sizeof globals[0])

/* The global option arg names ("--addr" or "--addr=X"), or NULL; *inline_val is X. */
static const global_opt *global_of(const char *arg, const char **inline_val)
{
    *inline_val = NULL;
    for (size_t g = 0; g < NGLOBALS; g++) {
        size_t n = strlen(globals[g].name);
        if (strncmp(arg, globals[g].name, n) != 0)
            continue;
        if (arg[n] == '\0')
            return &globals[g];
        if (arg[n] == '=' && strcmp(globals[g].name, "--json") != 0) {
            *inline_val = arg + n + 1;
            return &globals[g];
        }
    }
    return NULL;
}

static int unknown_verb(const char *name)
{
    const char *names[sizeof verbs / sizeof verbs[0] + 1];
    for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++)
        names[v] = verbs[v].name;
    names[sizeof verbs / sizeof verbs[0]] = "help";
    const char *near = dt_cli_nearest(name, names, sizeof verbs / sizeof verbs[0] + 1);
    if (near)
        fprintf(stderr, "dtrain: unknown verb '%s'; did you mean %s?\n", name, near);
    else
        fprintf(stderr, "dtrain: unknown verb '%s'\n", name);
    fprintf(stderr, "  'dtrain help' lists the verbs\n");
    return 2;
}

static const verb *find_verb(const char *name)
{
    for (size_t v = 0; v < sizeof verbs / sizeof verbs[0]; v++)
        if (strcmp(name, verbs[v].name) == 0)
            return &verbs[v];
    return NULL;
}

/* dtrain help [VERB]: the usage, or the verb's own --help. */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        printf("usage: dtrain help [VERB]\n\n"
               "Prints the verbs and the options every verb takes, or VERB's own usage (as\n"
               "'dtrain VERB --help' does).\n");
        return 0;
    }
    const verb *v = find_verb(argv[1]);
    if (!v)
        return unknown_verb(argv[1]);
    char *args[] = {argv[1], "--help", NULL};
    return v->fn(2, args);
}

int main(int argc, char **argv)
{
    dt_log_init();
    opterr = 0; /* the verbs print their own one-line errors (dt_cli_bad_option) */
    /* The verb's argv: its name, its arguments, then the global options it takes itself. */
    char **vargv = calloc((size_t)argc + 1, sizeof *vargv);
    char **moved = calloc((size_t)argc + 1, sizeof *moved);
    if (!vargv || !moved) {
        fprintf(stderr, "dtrain: out of memory\n");
        return 1;
    }
    int vargc = 0, nmoved = 0, rc = 2;
    const char *name = NULL;
    bool dashdash = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        const global_opt *g = dashdash ? NULL : global_of(arg, &val);
        if (g && (!name || g->anywhere)) {
            bool takes = strcmp(g->name, "--json") != 0;
            if (takes && !val && i + 1 >= argc) {
                fprintf(stderr, "dtrain: option %s needs a value\n", g->name);
                goto out;
            }
            if (takes && !val)
                val = argv[++i];
            if (g->env) {
                setenv(g->env, val, 1);
            } else {
                moved[nmoved++] = (char *)g->name;
                if (takes)
                    moved[nmoved++] = (char *)val;
            }
            continue;
        }
        if (!name && !dashdash && arg[0] == '-') {
            if (strcmp(arg, "--version") == 0) {
                printf("dtrain %s\n", DT_VERSION);
                rc = 0;
                goto out;
            }
            if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
                usage(stdout);
                rc = 0;
                goto out;
            }
            const char *names[NGLOBALS + 2];
            for (size_t k = 0; k < NGLOBALS; k++)
                names[k] = globals[k].name;
            names[NGLOBALS] = "--help";
            names[NGLOBALS + 1] = "--version";
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)strcspn(arg, "="), arg);
            const char *near = dt_cli_nearest(word, names, NGLOBALS + 2);
            fprintf(stderr, "dtrain: unknown option %s%s%s%s\n", word,
                    near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
            fprintf(stderr, "  'dtrain --help' lists the options, 'dtrain help VERB' a verb's\n");
            goto out;
        }
        if (strcmp(arg, "--") == 0 && name)
            dashdash = true;
        if (!name)
            name = arg;
        vargv[vargc++] = (char *)arg;
    }
    if (!name) {
        usage(stderr);
        goto out;
    }
    /* Before a "--", so that the verb's getopt still reads them as options. */
    int at = vargc;
    for (int k = 1; k < vargc; k++)
        if (strcmp(vargv[k], "--") == 0) {
            at = k;
            break;
        }
    memmove(vargv + at + nmoved, vargv + at, (size_t)(vargc - at) * sizeof *vargv);
    memcpy(vargv + at, moved, (size_t)nmoved * sizeof *vargv);
    vargc += nmoved;
    vargv[vargc] = NULL;
    if (strcmp(name, "help") == 0) {
        rc = help(vargc, vargv);
        goto out;
    }
    const verb *v = find_verb(name);
    rc = v ? v->fn(vargc, vargv) : unknown_verb(name);
out:
    free(vargv);
    free(moved);
    return rc;
}
