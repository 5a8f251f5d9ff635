/*
 * dtraind - the daemon: one per host. Parses flags and TF_CONFIG, then wires the rpc server,
 * the cluster and the signals onto one libuv loop. Exit status: 0 after a clean leave, 1 when
 * the cluster cannot go on (rendezvous timeout, port in use), 2 for bad usage or configuration.
 */
#include "cluster/cluster.h"
#include "config/tfconfig.h"
#include "core/buf.h"
#include "core/hw.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/sdnotify.h"
#include "service/service.h"
#include "train/train.h"
#include "nn/ops.h"
#include "rpc/rpc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

typedef struct daemon_opts {
    const char *tf_config_file;
    const char *listen;
    const char *token_file;
    const char *tls_cert, *tls_key, *tls_ca;
    const char *state_dir;
    const char *data_root;
    const char *ready_file;
    int insecure;
    int check;
    int json;
    double rendezvous_timeout_s;
    int threads;                /* OpenBLAS threads of the trainer; 0: the default below */
    double eval_interval_s;     /* the evaluator task's poll interval */
    int keep_jobs;              /* the chief keeps this many ended jobs; 0: all */
    const char *max_job_memory; /* as given; NULL: half of this host's RAM */
} daemon_opts;

typedef struct dt_daemon {
    daemon_opts o;
    uv_loop_t loop;
    dt_cluster_spec spec;
    char *token;
    dt_rpc_server *rpc;
    dt_cluster *cluster;
    dt_service *jobs;
    char state_dir_buf[4096];
    dt_service_bench *comm;
    uv_signal_t sigterm, sigint;
    int exit_code;
    int stopping;
} dt_daemon;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: dtraind [options]\n\n"
        "Runs this host's task of a dtrain cluster. The cluster and the task come from the\n"
        "TF_CONFIG environment variable (or --tf-config FILE); without either, or when it\n"
        "names no cluster (\"{}\", as TensorFlow reads it), the daemon is a one-worker cluster\n"
        "on --listen.\n\n"
        "options:\n"
        "  --tf-config FILE          read TF_CONFIG from FILE instead of the environment\n"
        "  --listen HOST:PORT        address to bind (default: this task's address in\n"
        "                            TF_CONFIG, else 127.0.0.1:7000)\n"
        "  --token-file FILE         shared cluster token; every peer and client must prove it\n"
        "  --insecure                allow a non-loopback address without a token\n"
        "  --tls-cert FILE           serve and dial TLS with this PEM certificate (its SANs\n"
        "                            must name this task's host as TF_CONFIG writes it)\n"
        "  --tls-key FILE            the certificate's PEM private key (unencrypted)\n"
        "  --tls-ca FILE             PEM CA that signs every peer's certificate; with it, peers\n"
        "                            and clients must present one (mutual TLS), and a token is\n"
        "                            no longer required off loopback\n"
        "  --rendezvous-timeout SEC  give up forming the cluster after SEC seconds (default 300)\n"
        "  --state-dir DIR           where jobs, checkpoints and logs are written (default\n"
        "                            /var/lib/dtrain as root, else ~/.local/state/dtrain)\n"
        "  --data-root DIR           job specs may only read files under DIR (default /)\n"
        "  --ready-file FILE         write FILE (JSON) once the cluster is formed\n"
        "  --threads N               compute (OpenBLAS) threads of the trainer (default: the\n"
        "                            CPUs less one, left to the ring and the control plane)\n"
        "  --eval-interval SEC       evaluator task: how often to ask the chief for a new\n"
        "                            checkpoint (default 5)\n"
        "  --keep-jobs N             chief: keep the newest N ended jobs, removing older ones\n"
        "                            and their files under --state-dir (default 0: keep all)\n"
        "  --max-job-memory SIZE     what one job may use per replica (weights, gradients,\n"
        "                            optimizer, activations, data), estimated at submit; jobs\n"
        "                            being validated share it too: 512M, 8G, 1T or \"none\"\n"
        "                            (default: half of this host's RAM)\n"
        "  --log-level LEVEL         error|warn|info|debug|trace (default info; or DT_LOG)\n"
        "  --check                   validate the configuration, print the resolved task, exit\n"
        "  --json                    with --check: print JSON\n"
        "  --version, --help\n\n"
        "Exit status: 0 clean shutdown, 1 runtime failure, 2 bad usage or configuration.\n");
}

/* "512M", "8G", "1T", a byte count, or "none" (0). */
static int parse_size(const char *s, uint64_t *out)
{
    if (strcmp(s, "none") == 0) {
        *out = 0;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int shift = 0;
    switch (*end) {
    case 'K':
    case 'k':
        shift = 10;
        end++;
        break;
    case 'M':
    case 'm':
        shift = 20;
        end++;
        break;
    case 'G':
    case 'g':
        shift = 30;
        end++;
        break;
    case 'T':
    case 't':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' && shift)
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (end == s || *end || errno || !(v > 0) || v * (double)(1ull << shift) > 1e18 ||
        v * (double)(1ull << shift) < (double)(16u << 20))
        return -1;
    *out = (uint64_t)(v * (double)(1ull << shift));
    return 0;
}

static int parse_args(int argc, char **argv, daemon_opts *o)
{
    enum {
        OPT_TF = 256,
        OPT_LISTEN,
        OPT_TOKEN,
        OPT_INSECURE,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_TLS_CA,
        OPT_RDV,
        OPT_STATE,
        OPT_DATA,
        OPT_READY,
        OPT_THREADS,
        OPT_EVAL_INTERVAL,
        OPT_KEEP_JOBS,
        OPT_MAX_MEM,
        OPT_LOG,
        OPT_CHECK,
        OPT_JSON,
        OPT_VERSION,
        OPT_HELP
    };
    static const struct option longopts[] = {
        {"tf-config", required_argument, NULL, OPT_TF},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"token-file", required_argument, NULL, OPT_TOKEN},
        {"insecure", no_argument, NULL, OPT_INSECURE},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"rendezvous-timeout", required_argument, NULL, OPT_RDV},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"data-root", required_argument, NULL, OPT_DATA},
        {"ready-file", required_argument, NULL, OPT_READY},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"eval-interval", required_argument, NULL, OPT_EVAL_INTERVAL},
        {"keep-jobs", required_argument, NULL, OPT_KEEP_JOBS},
        {"max-job-memory", required_argument, NULL, OPT_MAX_MEM},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"check", no_argument, NULL, OPT_CHECK},
        {"json", no_argument, NULL, OPT_JSON},
        {"version", no_argument, NULL, OPT_VERSION},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    o->rendezvous_timeout_s = 300;
    o->eval_interval_s = 5;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case OPT_TF:
            o->tf_config_file = optarg;
            break;
        case OPT_LISTEN:
            o->listen = optarg;
            break;
        case OPT_TOKEN:
            o->token_file = optarg;
            break;
        case OPT_INSECURE:
            o->insecure = 1;
            break;
        case OPT_TLS_CERT:
            o->tls_cert = optarg;
            break;
        case OPT_TLS_KEY:
            o->tls_key = optarg;
            break;
        case OPT_TLS_CA:
            o->tls_ca = optarg;
            break;
        case OPT_RDV: {
            char *end;
            o->rendezvous_timeout_s = strtod(optarg, &end);
            if (*end || o->rendezvous_timeout_s <= 0 || o->rendezvous_timeout_s > 86400) {
                fprintf(stderr,
                        "dtraind: --rendezvous-timeout %s: give seconds, 0 < SEC <= 86400\n",
                        optarg);
                return 2;
            }
            break;
        }
        case OPT_STATE:
            o->state_dir = optarg;
            break;
        case OPT_DATA:
            o->data_root = optarg;
            break;
        case OPT_READY:
            o->ready_file = optarg;
            break;
        case OPT_THREADS: {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 1024) {
                fprintf(stderr, "dtraind: --threads %s: give a count, 1 <= N <= 1024\n", optarg);
                return 2;
            }
            o->threads = (int)n;
            break;
        }
        case OPT_EVAL_INTERVAL: {
            char *end;
            o->eval_interval_s = strtod(optarg, &end);
            if (*end || !(o->eval_interval_s >= 0.1 && o->eval_interval_s <= 86400)) {
                fprintf(stderr, "dtraind: --eval-interval %s: give seconds, 0.1 <= SEC <= 86400\n",
                        optarg);
                return 2;
            }
            break;
        }
        case OPT_KEEP_JOBS: {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 0 || n > 1000000) {
                fprintf(stderr, "dtraind: --keep-jobs %s: give a count, 0 <= N <= 1000000\n",
                        optarg);
                return 2;
            }
            o->keep_jobs = (int)n;
            break;
        }
        case OPT_MAX_MEM: {
            uint64_t b;
            if (parse_size(optarg, &b) != 0) {
                fprintf(stderr,
                        "dtraind: --max-job-memory %s: give a size such as 512M, 8G or 1T "
                        "(binary units, at least 16M), or \"none\"\n",
                        optarg);
                return 2;
            }
            o->max_job_memory = optarg;
            break;
        }
        case OPT_LOG: {
            dt_log_level l;
            if (dt_log_parse_level(optarg, &l) != DT_OK) {
                fprintf(stderr, "dtraind: --log-level %s: use error, warn, info, debug or trace\n",
                        optarg);
                return 2;
            }
            dt_log_set_level(l);
            break;
        }
        case OPT_CHECK:
            o->check = 1;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_VERSION:
            printf("dtraind %s\n", DT_VERSION);
            return 0;
        case 'h':
        case OPT_HELP:
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dtraind: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    return -1;
}

/* Loads the cluster spec: --tf-config FILE, else $TF_CONFIG, else a one-worker cluster. */
static int load_spec(dt_daemon *d)
{
    dt_err err = {0};
    char *text = NULL;
    size_t len = 0;
    const char *source = "TF_CONFIG";
    if (d->o.tf_config_file) {
        if (dt_file_read_all(d->o.tf_config_file, DT_MAX_TFCONFIG, &text, &len, &err) != DT_OK) {
            fprintf(stderr, "dtraind: --tf-config: %s\n", err.msg);
            return 2;
        }
        source = d->o.tf_config_file;
    } else {
        const char *env = getenv("TF_CONFIG");
        if (env && *env) {
            text = strdup(env);
            len = strlen(env);
        }
    }
    dt_status st;
    if (text)
        st = dt_tfconfig_parse(text, len, &d->spec, &err);
    else
        st = dt_tfconfig_single(d->o.listen ? d->o.listen : "127.0.0.1:7000", &d->spec, &err);
    free(text);
    if (st == DT_OK && d->spec.local) {
        dt_tfconfig_destroy(&d->spec);
        st = dt_tfconfig_single(d->o.listen ? d->o.listen : DT_TFCONFIG_LOCAL_ADDR, &d->spec, &err);
        if (st == DT_OK)
            DT_INFO("daemon", "%s names no cluster: a local run, one worker (TensorFlow's rule)",
                    source);
    }
    if (st != DT_OK) {
        fprintf(stderr, "dtraind: %s: %s\n", source, err.msg);
        return 2;
    }
    if (!d->spec.has_self) {
        fprintf(stderr,
                "dtraind: %s has no \"task\": add {\"task\": {\"type\": \"worker\", "
                "\"index\": N}} to say which task this daemon runs\n",
                source);
        return 2;
    }
    return -1;
}

static int print_check(const dt_daemon *d)
{
    const dt_cluster_spec *s = &d->spec;
    const dt_task *chief = &s->tasks[s->chief];
    char self[40], chief_name[40];
    dt_task_name(&s->self, self, sizeof self);
    dt_task_name(chief, chief_name, sizeof chief_name);
    if (d->o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "task_type", dt_task_type_name(s->self.type));
        cJSON_AddNumberToObject(j, "task_index", s->self.index);
        if (s->self.rank >= 0)
            cJSON_AddNumberToObject(j, "rank", s->self.rank);
        else
            cJSON_AddNullToObject(j, "rank");
        cJSON_AddNumberToObject(j, "world_size", s->world_size);
        cJSON_AddStringToObject(j, "chief", chief_name);
        cJSON_AddBoolToObject(j, "is_chief", s->self.rank == 0);
        cJSON_AddStringToObject(j, "address", s->self.address);
        cJSON_AddStringToObject(j, "tls", dt_rpc_tls_mode_name(dt_rpc_tls_get_mode()));
        char *out = cJSON_Print(j);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(j);
    } else {
        printf("task:       %s\n", self);
        printf("address:    %s\n", s->self.address[0] ? s->self.address : "(not in cluster)");
        if (s->self.rank >= 0)
            printf("rank:       %d of %d\n", s->self.rank, s->world_size);
        else
            printf("rank:       none (outside the ring)\n");
        printf("world size: %d\n", s->world_size);
        printf("chief:      %s (%s)%s\n", chief_name, chief->address,
               s->self.rank == 0 ? ", this task" : "");
        dt_rpc_tls_mode m = dt_rpc_tls_get_mode();
        printf("tls:        %s%s\n", dt_rpc_tls_mode_name(m),
               m == DT_RPC_TLS_MUTUAL ? " (peers and clients must present a certificate)"
               : m == DT_RPC_TLS_ON   ? " (server certificate only)"
                                      : "");
    }
    if (s->self.type == DT_TASK_PS) {
        fprintf(stderr,
                "dtraind: this task is ps:%d, but dtrain has no parameter servers: every "
                "worker holds the whole model; remove \"ps\" or run no daemon there\n",
                s->self.index);
        return 2;
    }
    return 0;
}

/* Reads the TLS files before anything dials or listens, so a bad file stops the start (exit 2). */
static int setup_tls(dt_daemon *d)
{
    const daemon_opts *o = &d->o;
    if (!o->tls_cert && !o->tls_key && !o->tls_ca)
        return -1;
    if (!o->tls_cert || !o->tls_key) {
        fprintf(stderr,
                "dtraind: %s: a daemon serves TLS with a certificate: give --tls-cert "
                "and --tls-key (and --tls-ca for mutual TLS)\n",
                o->tls_cert  ? "--tls-cert without --tls-key"
                : o->tls_key ? "--tls-key without --tls-cert"
                             : "--tls-ca alone");
        return 2;
    }
    dt_err err = {0};
    dt_rpc_tls_opts to = {.cert_file = o->tls_cert, .key_file = o->tls_key, .ca_file = o->tls_ca};
    if (dt_rpc_tls_setup(&to, &err) != DT_OK) {
        fprintf(stderr, "dtraind: %s\n", err.msg);
        return 2;
    }
    if (!o->tls_ca && d->spec.world_size > 1)
        DT_WARN("daemon", "no --tls-ca: peers' certificates are checked against the system's "
                          "public CA roots; with a private CA (scripts/gen-tls.sh) give "
                          "--tls-ca, or this daemon cannot reach its peers");
    return -1;
}

/* The cores and the GPUs this daemon reports to the cluster: GPUs from the driver's files, never
 * through CUDA (core/hw.h), as CUDA_VISIBLE_DEVICES leaves them. */
static void count_hw(int *cores, dt_hw_gpus *gpus)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *cores = n > 0 ? (int)n : 1;
    dt_hw_count_gpus("/dev", "/proc/driver/nvidia/gpus", getenv("CUDA_VISIBLE_DEVICES"), gpus);
}

static void daemon_stop(dt_daemon *d, int code);

static void on_closed_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void daemon_stop(dt_daemon *d, int code)
{
    if (d->stopping)
        return;
    d->stopping = 1;
    d->exit_code = code;
    dt_service_free(d->jobs);
    d->jobs = NULL;
    dt_cluster_free(d->cluster);
    d->cluster = NULL;
    dt_rpc_server_free(d->rpc);
    d->rpc = NULL;
    dt_service_bench_free(d->comm);
    d->comm = NULL;
    uv_signal_stop(&d->sigterm);
    uv_signal_stop(&d->sigint);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
}

static void on_left(void *ctx)
{
    dt_daemon *d = ctx;
    DT_INFO("daemon", "left the cluster; exiting");
    dt_sd_notify("STATUS=stopped");
    daemon_stop(d, 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
    dt_daemon *d = h->data;
    if (d->stopping || !d->cluster)
        return;
    DT_INFO("daemon", "%s: leaving the cluster", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    dt_sd_notify("STOPPING=1");
    dt_cluster_leave(d->cluster, on_left, d);
}

static void on_formed(void *ctx, uint64_t generation)
{
    dt_daemon *d = ctx;
    dt_sd_notifyf("READY=1\nSTATUS=cluster formed: %d tasks, generation %llu", d->spec.world_size,
                  (unsigned long long)generation);
    if (d->o.ready_file) {
        char buf[512];
        int n = snprintf(buf, sizeof buf,
                         "{\"address\": \"%s\", \"port\": %d, \"rank\": %d, \"world_size\": %d, "
                         "\"generation\": %llu, \"pid\": %ld}\n",
                         d->spec.self.address, dt_rpc_server_port(d->rpc), d->spec.self.rank,
                         d->spec.world_size, (unsigned long long)generation, (long)getpid());
        dt_err err = {0};
        if (dt_file_write_atomic(d->o.ready_file, buf, (size_t)n, &err) != DT_OK)
            DT_WARN("daemon", "--ready-file: %s", err.msg);
    }
}

static void on_fatal(void *ctx, dt_status st, const char *msg)
{
    dt_daemon *d = ctx;
    DT_ERROR("cluster", "%s", msg);
    dt_sd_notifyf("STATUS=failed: %s", msg);
    daemon_stop(d, st == DT_ESTATE || st == DT_EINVAL || st == DT_EAUTH ? 2 : 1);
}

static void on_call(void *ctx, dt_rpc_call *call)
{
    dt_daemon *d = ctx;
    if (d->cluster && dt_cluster_handle_call(d->cluster, call))
        return;
    if (d->jobs && dt_service_handle_call(d->jobs, call))
        return;
    if (d->comm && dt_service_bench_handle_call(d->comm, call))
        return;
    char msg[256];
    snprintf(msg, sizeof msg, "%s is not served by this daemon (dtraind %s)",
             dt_rpc_call_method(call), DT_VERSION);
    dt_rpc_call_fail(call, DT_ENOTSUP, msg);
}

static int run(dt_daemon *d)
{
    dt_err err = {0};
    const char *bind = d->o.listen ? d->o.listen : d->spec.self.address;
    char host[DT_MAX_ADDRESS];
    int port;
    /* The evaluator serves nothing: it only calls the chief. */
    bool evaluator = d->spec.self.type == DT_TASK_EVALUATOR;
    if (!evaluator && dt_tfconfig_split_address(bind, host, sizeof host, &port, &err) != DT_OK) {
        fprintf(stderr, "dtraind: --listen: %s\n", err.msg);
        return 2;
    }
    if (d->o.token_file && dt_rpc_token_load(d->o.token_file, &d->token, &err) != DT_OK) {
        fprintf(stderr, "dtraind: --token-file: %s\n", err.msg);
        return 2;
    }
    bool loopback = evaluator || dt_rpc_host_is_loopback(host);
    for (size_t i = 0; i < d->spec.ntasks && loopback; i++)
        loopback = dt_rpc_host_is_loopback(d->spec.tasks[i].host);
    /* Mutual TLS authenticates every caller by a certificate the cluster's CA signed, which is as
     * strong as the token; server-only TLS encrypts but lets anyone call, so it does not count. */
    if (!loopback && !d->token && !d->o.insecure && dt_rpc_tls_get_mode() != DT_RPC_TLS_MUTUAL) {
        fprintf(stderr,
                "dtraind: refusing to serve %s beyond this host without a token: give "
                "every daemon the same --token-file, or mutual TLS (--tls-cert, --tls-key and "
                "--tls-ca), or pass --insecure on a trusted network\n",
                bind);
        return 2;
    }
    if (!d->o.state_dir) {
        /* Jobs need somewhere to live: the system's state directory for a system daemon, the
         * user's XDG state directory otherwise. */
        const char *home = getenv("HOME");
        if (getuid() == 0 || !home || !*home) {
            snprintf(d->state_dir_buf, sizeof d->state_dir_buf, "/var/lib/dtrain");
        } else {
            snprintf(d->state_dir_buf, sizeof d->state_dir_buf, "%s/.local/state", home);
            mkdir(d->state_dir_buf,
                  0700); /* its parents are the user's, or the mkdir below fails */
            snprintf(d->state_dir_buf, sizeof d->state_dir_buf, "%s/.local/state/dtrain", home);
        }
        d->o.state_dir = d->state_dir_buf;
    }
    if (d->o.state_dir && mkdir(d->o.state_dir, 0750) != 0 && errno != EEXIST) {
        fprintf(stderr, "dtraind: --state-dir %s: %s\n", d->o.state_dir, strerror(errno));
        return 2;
    }
    char tag[48];
    dt_task_name(&d->spec.self, tag, sizeof tag);
    dt_log_set_tag(tag);
    if (evaluator) {
        dt_service_eval_opts eo = {.spec = &d->spec,
                                   .token = d->token,
                                   .data_root = d->o.data_root,
                                   .state_dir = d->o.state_dir,
                                   .ready_file = d->o.ready_file,
                                   .interval_ms = (int)(d->o.eval_interval_s * 1000)};
        return dt_service_eval_run(&eo);
    }
    if (d->spec.self.type != DT_TASK_CHIEF && d->spec.self.type != DT_TASK_WORKER) {
        fprintf(stderr,
                "dtraind: this task is %s, but only chief and worker tasks run a daemon "
                "in this version\n",
                tag);
        return 2;
    }

    uv_loop_init(&d->loop);
    if (dt_service_bench_new(&d->loop, &d->spec, d->token, &d->comm, &err) != DT_OK) {
        DT_ERROR("daemon", "%s", err.msg);
        uv_loop_close(&d->loop);
        return 1;
    }
    dt_rpc_server_opts so = {.address = bind,
                             .loop = &d->loop,
                             .handler = on_call,
                             .ctx = d,
                             .token = d->token,
                             .stream_method = DT_COMM_METHOD,
                             .streamq = dt_comm_hub_streamq(dt_service_bench_hub(d->comm))};
    if (dt_rpc_server_new(&so, &d->rpc, &err) != DT_OK) {
        DT_ERROR("daemon", "%s", err.msg);
        dt_service_bench_free(d->comm);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        uv_loop_close(&d->loop);
        return err.code == DT_EINVAL ? 2 : 1; /* refused TLS files: configuration, exit 2 */
    }
    if (d->spec.njob[DT_TASK_PS] > 0)
        DT_WARN("daemon",
                "TF_CONFIG lists %d ps task%s: dtrain has no parameter servers, so they "
                "are left out of the ring (every worker holds the whole model)",
                d->spec.njob[DT_TASK_PS], d->spec.njob[DT_TASK_PS] == 1 ? "" : "s");
    DT_INFO("daemon", "dtraind %s serving %s as %s (rank %d of %d)%s, TLS %s", DT_VERSION, bind,
            tag, d->spec.self.rank, d->spec.world_size, d->token ? ", token required" : "",
            dt_rpc_tls_mode_name(dt_rpc_tls_get_mode()));
    int cores;
    dt_hw_gpus gpus;
    count_hw(&cores, &gpus);
    if (gpus.count)
        DT_INFO("daemon", "%d GPU%s (%s)%s", gpus.count, gpus.count == 1 ? "" : "s",
                gpus.model[0] ? gpus.model : "model unknown",
                getenv("CUDA_VISIBLE_DEVICES") ? " as CUDA_VISIBLE_DEVICES leaves them" : "");
    dt_cluster_opts co = {
        .loop = &d->loop,
        .spec = &d->spec,
        .token = d->token,
        .rendezvous_timeout_ms = (int64_t)(d->o.rendezvous_timeout_s * 1000),
        .cores = cores,
        .gpus = gpus.count,
        .gpu_model = gpus.model,
        .on_formed = on_formed,
        .on_fatal = on_fatal,
        .ctx = d,
    };
    if (!d->o.data_root)
        DT_WARN("daemon", "no --data-root: job specs may read any file this user can read; "
                          "give --data-root DIR to confine them");
    dt_service_opts jo = {
        .loop = &d->loop,
        .spec = &d->spec,
        .token = d->token,
        .state_dir = d->o.state_dir,
        .data_root = d->o.data_root ? d->o.data_root : "/",
        .comm_hub = d->comm ? dt_service_bench_hub(d->comm) : NULL,
        .keep_jobs = d->o.keep_jobs,
    };
    if (dt_cluster_new(&co, &d->cluster, &err) != DT_OK) {
        DT_ERROR("daemon", "%s", err.msg);
        daemon_stop(d, 1);
    } else if ((jo.cluster = d->cluster, dt_service_new(&jo, &d->jobs, &err)) != DT_OK) {
        DT_ERROR("daemon", "jobs: %s", err.msg);
        daemon_stop(d, 1);
    } else {
        uv_signal_init(&d->loop, &d->sigterm);
        uv_signal_init(&d->loop, &d->sigint);
        d->sigterm.data = d->sigint.data = d;
        uv_signal_start(&d->sigterm, on_signal, SIGTERM);
        uv_signal_start(&d->sigint, on_signal, SIGINT);
        dt_sd_notifyf("STATUS=waiting for %d tasks to join", d->spec.world_size);
        dt_cluster_start(d->cluster);
    }
    uv_run(&d->loop, UV_RUN_DEFAULT);
    /* Anything still open (should be nothing) is closed before the loop goes. */
    uv_walk(&d->loop, on_closed_walk, NULL);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    uv_loop_close(&d->loop);
    return d->exit_code;
}

/* OpenBLAS threads spin while they wait for work; if they take every CPU, the ring's threads
 * and the heartbeats starve and a step costs several times its compute (measured: 2 daemons on
 * 2 CPUs trained 2.6x slower with OpenBLAS's default of one thread per CPU). */
static void set_threads(const daemon_opts *o)
{
    int n = o->threads;
    if (n == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus > 2 ? (int)cpus - 1 : 1;
    }
    dt_nn_blas_threads(n);
    DT_INFO("daemon", "trainer: %d compute thread%s (--threads)", n, n == 1 ? "" : "s");
}

static void set_memory_limit(const daemon_opts *o)
{
    uint64_t b = 0;
    if (o->max_job_memory) {
        parse_size(o->max_job_memory, &b);
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0)
            b = (uint64_t)pages * (uint64_t)psz / 2;
    }
    dt_train_set_memory_limit(b);
    if (b)
        DT_INFO("daemon", "a job may use %.1f GiB per replica (--max-job-memory)",
                (double)b / (1u << 30));
    else
        DT_INFO("daemon", "jobs have no memory limit (--max-job-memory none)");
}

int main(int argc, char **argv)
{
    dt_log_init();
    signal(SIGPIPE, SIG_IGN);
    dt_daemon d;
    memset(&d, 0, sizeof d);
    int rc = parse_args(argc, argv, &d.o);
    if (rc >= 0)
        return rc;
    rc = load_spec(&d);
    if (rc < 0)
        rc = setup_tls(&d);
    if (rc < 0 && !d.o.check) {
        set_threads(&d.o);
        set_memory_limit(&d.o);
    }
    if (rc < 0)
        rc = d.o.check ? print_check(&d) : run(&d);
    dt_tfconfig_destroy(&d.spec);
    free(d.token);
    return rc;
}
