/* dtrain bench - benchmarks.
 *   dtrain bench train --model M.json --batch B [--threads T] [--steps N] [--warmup W] [--json]
 * times training steps (forward, sparse cross-entropy, backward, SGD update) of one process on
 * random data and prints samples/s, the step time and how much of it the GEMMs take; with
 * --workers R or --addr it trains on a formed cluster instead (cli_bench_train.c).
 *   dtrain bench allreduce [--sizes 4K,64K,1M,4M,16M,64M] [--iters N] [--warmup W]
 *                          [--warmup-s S] [--wire f32|bf16|f16] [--streams K] [--chunk BYTES]
 *                          [--verify] [--no-stream] [--devices N] [--json]
 * asks a daemon (the chief by default) to run ring all-reduces of each size on every rank of the
 * formed cluster and prints time, algbw and busbw (nccl-tests' convention), and what one raw gRPC
 * stream between two daemons carries; with --devices N also the hierarchical all-reduce with N
 * CPU replicas a daemon (busbw over all hosts * N replicas). */
#include "cli.h"
#include "cli_bench.h"

#include "comm.pb-c.h"
#include "nn/gpu.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "rpc/rpc.h"

#include <cjson/cJSON.h>
#include <stdint.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The CPU table with its GEMM timed: the GEMM-only share of a step, measured in the step. */
static const dt_nn_ops *real_ops;
static double gemm_s;

static void timed_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc)
{
    double t0 = now_s();
    real_ops->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    gemm_s += now_s() - t0;
}

/* The recurrent layers' per-timestep products count as GEMMs too. */
static void timed_rnn_gemm(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                           int ldb, float beta, float *c, int ldc)
{
    double t0 = now_s();
    real_ops->rnn_gemm(ta, m, n, k, a, lda, b, ldb, beta, c, ldc);
    gemm_s += now_s() - t0;
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: dtrain bench train --model M.json --batch B [--threads T] [--steps N]\n"
           "                         [--warmup W] [--device /cpu:0|/gpu:N] [--tf32] [--json]\n"
           "       dtrain [--addr CHIEF] bench train --workers R --model M.json --batch B\n"
           "                         [--steps N] [--warmup W] [--data SPEC] [--optimizer OPT]\n"
           "                         [--token-file FILE] [--timeout SEC] [--json]\n"
           "                         [--compression none|bf16|f16] [--bucket-mb MB]\n"
           "                         [--first-bucket-mb MB] [--devices N]\n"
           "       dtrain bench allreduce [--sizes 4K,64K,1M,4M,16M,64M] [--iters N] [--warmup W]\n"
           "                              [--warmup-s S] [--wire f32|bf16|f16] [--streams K]\n"
           "                              [--chunk BYTES] [--verify] [--no-stream]\n"
           "                              [--devices N] [--timeout SEC] [--json]\n"
           "       dtrain bench data SPEC [--threads N] [--batch B] [--repeat K] [--json]\n\n"
           "train: one process, random data, sparse categorical cross-entropy and SGD;\n"
           "  --threads sets OpenBLAS's threads (default: the machine's setting).\n"
           "  --device /gpu:N trains on that GPU (the CUDA backend; exit 2 naming why when there\n"
           "  is none), strict float32 unless --tf32; the step is timed to the GPU's end.\n"
           "  --json prints {\"world_size\", \"batch\", \"samples_per_s\", \"step_s\", "
           "\"gemm_s\",\n  \"gemm_fraction\", \"blas\", \"device\"} (GPU: gemm_s 0, and "
           "\"gpu\", the model).\n"
           "train --workers R (or --addr, or $DTRAIN_ADDR set): on the formed cluster at the\n"
           "  chief (--addr, $DTRAIN_ADDR, TF_CONFIG's chief), which must have R tasks (else\n"
           "  exit 2), through the job service: W + N steps (W default 10) of global batch B\n"
           "  on Fashion-MNIST's training images, over several epochs when one holds fewer (or\n"
           "  one epoch of --data SPEC, a split as in a job's $.data.train, inline or a file),\n"
           "  no shuffle, DATA sharding, SGD (or --optimizer adam|{\"class_name\": ...}), no\n"
           "  validation or checkpoints. The steps after the warm-up are timed from the job's\n"
           "  step events, epoch boundaries included (not its preparation).\n"
           "  --timeout SEC bounds the run (default 1800; the job is then cancelled). Exit 1\n"
           "  when the job fails. --json prints {\"world_size\", \"batch\", \"samples_per_s\",\n"
           "  \"step_s\", \"timed_steps\", \"first_timed_step\", \"job_steps\", \"job\",\n"
           "  \"optimizer\", \"compression\"}. --compression sets the job's\n"
           "  $.strategy.compression (bf16 = bfloat16, f16 = float16: gradients on a 16-bit\n"
           "  wire); --bucket-mb and --first-bucket-mb its fusion buckets (defaults 25 and 1).\n"
           "  --devices N: N CPU replicas a daemon ($.strategy.devices; the global batch splits\n"
           "  over R * N replicas); the JSON adds \"devices\" and \"replicas\".\n"
           "allreduce: on the formed cluster, each size W untimed calls (default 1), then N\n"
           "  timed ones (default 5) on every rank; --warmup-s S adds untimed calls until S\n"
           "  seconds have passed (default 0.3: the ring's fresh TCP connections take a few\n"
           "  hundred MB of traffic to reach their steady rate, and training keeps its ring\n"
           "  for the whole job; 0: only the W calls). --streams K and --chunk BYTES set the\n"
           "  ring's streams per neighbour (default 4) and bytes per message (default 512K).\n"
           "  --json prints {\"world_size\", \"wire\", \"iters\", \"warmup_s\", \"rows\": "
           "[{\"bytes\",\n"
           "  \"time_s\", \"algbw_GBps\", \"busbw_GBps\", \"cpu_s\"}], \"stream_GBps\", ...}.\n"
           "  --devices N (1..16) also times the hierarchical all-reduce of a job with N CPU\n"
           "  replicas a daemon ($.strategy.devices): N threads on every daemon, in-host\n"
           "  reduce-scatter, one host ring per replica index on its shard, in-host all-gather;\n"
           "  float32 only. Sizes are per replica; busbw counts all R = daemons * N replicas,\n"
           "  algbw * 2(R-1)/R, as nccl-tests does; the flat ring's time (one replica a daemon)\n"
           "  is shown next to it. --json adds \"devices\", \"replicas\" and \"hier_rows\" (the\n"
           "  rows' keys, with \"flat_time_s\"; cpu_s per daemon).\n"
           "data: a job's input pipeline in this process: the training split of SPEC (a job\n"
           "  spec, a data spec or a split) decoded and resized on --threads threads, then one\n"
           "  epoch batched; images/s of each and of one pass (see dtrain bench data --help).\n");
}

static int bench_train(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"batch", required_argument, NULL, 'b'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"steps", required_argument, NULL, 's'},
                                         {"warmup", required_argument, NULL, 'w'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"workers", required_argument, NULL, 'R'},
                                         {"addr", required_argument, NULL, 'a'},
                                         {"token-file", required_argument, NULL, 'T'},
                                         {"data", required_argument, NULL, 'd'},
                                         {"optimizer", required_argument, NULL, 'o'},
                                         {"timeout", required_argument, NULL, 'O'},
                                         {"compression", required_argument, NULL, 'C'},
                                         {"bucket-mb", required_argument, NULL, 'B'},
                                         {"first-bucket-mb", required_argument, NULL, 'F'},
                                         {"devices", required_argument, NULL, 'D'},
                                         {"device", required_argument, NULL, 'g'},
                                         {"tf32", no_argument, NULL, '3'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    int gpu = -1; /* --device /gpu:N */
    bool tf32 = false;
    int batch = 64, threads = 0, steps = 50, warmup = -1, c;
    bool json = false;
    dt_bench_train_opts co = {.timeout_s = 1800};
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            model = optarg;
            break;
        case 'b':
            batch = dt_cli_int(optarg);
            break;
        case 't':
            threads = dt_cli_int(optarg);
            break;
        case 's':
            steps = dt_cli_int(optarg);
            break;
        case 'w':
            warmup = dt_cli_int(optarg);
            break;
        case 'j':
            json = true;
            break;
        case 'R':
            co.workers = (int)strtol(optarg, &end, 10);
            if (*end || co.workers < 1 || co.workers > 4096) {
                fprintf(stderr, "dtrain bench train: --workers %s: give 1..4096\n", optarg);
                return 2;
            }
            break;
        case 'a':
            co.addr = optarg;
            break;
        case 'T':
            co.token_file = optarg;
            break;
        case 'd':
            co.data = optarg;
            break;
        case 'o':
            co.optimizer = optarg;
            break;
        case 'O':
            co.timeout_s = strtod(optarg, &end);
            if (*end || co.timeout_s <= 0 || co.timeout_s > 86400) {
                fprintf(stderr, "dtrain bench train: --timeout %s: give 0 < SEC <= 86400\n",
                        optarg);
                return 2;
            }
            break;
        case 'C':
            if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16"))
                co.compression = "bfloat16";
            else if (!strcmp(optarg, "f16") || !strcmp(optarg, "float16"))
                co.compression = "float16";
            else if (!strcmp(optarg, "none") || !strcmp(optarg, "f32"))
                co.compression = "none";
            else {
                fprintf(stderr, "dtrain bench train: --compression %s: give none, bf16 or f16\n",
                        optarg);
                return 2;
            }
            break;
        case 'D':
            co.devices = (int)strtol(optarg, &end, 10);
            if (*end || co.devices < 1 || co.devices > 64) {
                fprintf(stderr, "dtrain bench train: --devices %s: give 1..64 replicas\n", optarg);
                return 2;
            }
            break;
        case 'B':
        case 'F': {
            double mb = strtod(optarg, &end);
            if (*end || !(mb > 0 && mb <= 1024)) {
                fprintf(stderr, "dtrain bench train: --%s %s: give 0 < MB <= 1024\n",
                        c == 'B' ? "bucket-mb" : "first-bucket-mb", optarg);
                return 2;
            }
            *(c == 'B' ? &co.bucket_mb : &co.first_bucket_mb) = mb;
            break;
        }
        case 'g': {
            const char *d = !strncasecmp(optarg, "/device:", 8) ? optarg + 8
                            : optarg[0] == '/'                  ? optarg + 1
                                                                : optarg;
            long v = -1;
            if (!strncasecmp(d, "gpu:", 4) || !strncasecmp(d, "cpu:", 4))
                v = strtol(d + 4, &end, 10);
            if (v < 0 || v > 1024 || *end || (!strncasecmp(d, "cpu:", 4) && v != 0)) {
                fprintf(stderr, "dtrain bench train: --device %s: give /cpu:0 or /gpu:N\n", optarg);
                return 2;
            }
            gpu = !strncasecmp(d, "gpu:", 4) ? (int)v : -1;
            break;
        }
        case '3':
            tf32 = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return dt_cli_bad_option("bench train", argc, argv, "h", opts);
        }
    }
    if (!model || batch < 1 || batch > 1 << 16 || steps < 1 || steps > 1000000 || warmup < -1 ||
        warmup > 1000000 || threads < 0 || optind != argc) {
        usage(stderr);
        return 2;
    }
    const char *env_addr = getenv("DTRAIN_ADDR");
    if (co.workers || co.addr || (env_addr && *env_addr)) {
        co.model = model;
        co.batch = batch;
        co.steps = steps;
        co.warmup = warmup < 0 ? 10 : warmup;
        co.json = json;
        return dt_cli_bench_train_cluster(&co);
    }
    if (co.data || co.optimizer || co.compression || co.bucket_mb || co.first_bucket_mb ||
        co.devices) {
        fprintf(stderr,
                "dtrain bench train: --data, --optimizer, --compression, --devices and the bucket "
                "sizes need a cluster (--workers R)\n");
        return 2;
    }
    if (warmup < 0)
        warmup = 5;
    dt_nn_blas_threads(threads);
    real_ops = dt_nn_ops_cpu();
    dt_nn_ops timed = *real_ops;
    timed.gemm = timed_gemm;
    if (real_ops->rnn_gemm)
        timed.rnn_gemm = timed_rnn_gemm;
    dt_err err = {0};
    const dt_nn_ops *ops = &timed;
    dt_nn_gpu_dev gd = {0};
    if (gpu >= 0 && (dt_nn_gpu_info(gpu, &gd, &err) != DT_OK || dt_nn_gpu_complete(&err) != DT_OK ||
                     dt_nn_gpu_bind(gpu, tf32, &ops, &err) != DT_OK)) {
        fprintf(stderr, "dtrain bench train: --device %s\n", err.msg);
        return 2;
    }
    dt_model *m;
    dt_model_opts mo = {.seed = 1, .ops = ops};
    if (dt_model_from_file(model, &mo, &m, &err) != DT_OK) {
        fprintf(stderr, "dtrain bench: %s\n", err.msg);
        return 2;
    }
    size_t in = dt_model_input_size(m), out = dt_model_output_size(m);
    float *x = malloc(sizeof(float) * in * (size_t)batch);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
    dt_rng r;
    dt_rng_seed(&r, 1);
    for (size_t i = 0; x && i < in * (size_t)batch; i++)
        x[i] = dt_rng_uniform(&r);
    for (int i = 0; labels && i < batch; i++)
        labels[i] = (int32_t)dt_rng_below(&r, out);
    dt_optim_cfg oc;
    dt_optim_defaults(DT_OPTIM_SGD, &oc);
    dt_optim *opt = NULL;
    int rc = 1;
    if (!x || !labels || dt_optim_new(&oc, m, &opt, &err) != DT_OK) {
        fprintf(stderr, "dtrain bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    dt_model_batch b = {.x = x, .labels = labels, .n = batch};
    double t0 = 0;
    char msg[512];
    for (int i = 0; i < warmup + steps; i++) {
        if (i == warmup) {
            if (ops->sync && ops->sync(msg, sizeof msg) != 0)
                break;
            t0 = now_s();
            gemm_s = 0;
        }
        if (dt_model_train_step(m, &loss, &b, batch, NULL, &err) != DT_OK ||
            dt_optim_step(opt, &err) != DT_OK) {
            fprintf(stderr, "dtrain bench: %s\n", err.msg);
            goto out;
        }
    }
    if (ops->sync && ops->sync(msg, sizeof msg) != 0) { /* the GPU's steps end here */
        fprintf(stderr, "dtrain bench: %s: %s\n", ops->name, msg);
        goto out;
    }
    double dt = now_s() - t0, step = dt / steps, gemm = gemm_s / steps;
    char blas[256];
    dt_nn_blas_info(blas, sizeof blas);
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "world_size", 1);
        cJSON_AddNumberToObject(j, "batch", batch);
        cJSON_AddNumberToObject(j, "samples_per_s", batch / step);
        cJSON_AddNumberToObject(j, "step_s", step);
        cJSON_AddNumberToObject(j, "gemm_s", gemm);
        cJSON_AddNumberToObject(j, "gemm_fraction", gemm / step);
        cJSON_AddStringToObject(j, "blas", blas);
        char dev[32];
        snprintf(dev, sizeof dev, gpu >= 0 ? "/gpu:%d" : "/cpu:0", gpu);
        cJSON_AddStringToObject(j, "device", dev);
        if (gpu >= 0)
            cJSON_AddStringToObject(j, "gpu", gd.name);
        dt_cli_print_json(j);
    } else if (gpu >= 0)
        printf("model %s, batch %d, %d steps on /gpu:%d (%s, %s): %.1f samples/s, %.3f ms/step\n",
               model, batch, steps, gpu, gd.name, tf32 ? "tf32" : "float32", batch / step,
               step * 1e3);
    else
        printf("model %s, batch %d, %d steps: %.1f samples/s, %.3f ms/step (GEMMs %.3f ms, %.0f%% "
               "of the step)\n%s\n",
               model, batch, steps, batch / step, step * 1e3, gemm * 1e3, 100 * gemm / step, blas);
    rc = 0;
out:
    dt_optim_free(opt);
    dt_model_free(m);
    free(x);
    free(labels);
    if (gpu >= 0)
        dt_nn_gpu_unbind();
    return rc;
}

static int parse_sizes(const char *arg, uint64_t *sizes, size_t max, size_t *n)
{
    *n = 0;
    const char *p = arg;
    while (*p) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p)
            return -1;
        uint64_t mult = 1;
        if (*end == 'K' || *end == 'k')
            mult = 1ull << 10, end++;
        else if (*end == 'M' || *end == 'm')
            mult = 1ull << 20, end++;
        else if (*end == 'G' || *end == 'g')
            mult = 1ull << 30, end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if ((*end != ',' && *end != '\0') || *n >= max || v * mult > (2ull << 30))
            return -1;
        sizes[(*n)++] = v * mult;
        p = *end == ',' ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

static void size_name(uint64_t b, char *buf, size_t n)
{
    if (b >= (1ull << 30) && b % (1ull << 30) == 0)
        snprintf(buf, n, "%lluG", (unsigned long long)(b >> 30));
    else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
        snprintf(buf, n, "%lluM", (unsigned long long)(b >> 20));
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, n, "%lluK", (unsigned long long)(b >> 10));
    else
        snprintf(buf, n, "%llu", (unsigned long long)b);
}

static int bench_allreduce(int argc, char **argv)
{
    static const struct option opts[] = {
        {"sizes", required_argument, NULL, 's'},   {"iters", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'},  {"wire", required_argument, NULL, 'W'},
        {"streams", required_argument, NULL, 'k'}, {"verify", no_argument, NULL, 'v'},
        {"no-stream", no_argument, NULL, 'n'},     {"timeout", required_argument, NULL, 'T'},
        {"addr", required_argument, NULL, 'a'},    {"token-file", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
        {"chunk", required_argument, NULL, 'C'},   {"warmup-s", required_argument, NULL, 'S'},
        {"devices", required_argument, NULL, 'D'}, {0, 0, 0, 0}};
    uint64_t sizes[64], chunk = 0;
    size_t nsizes = 0;
    parse_sizes("4K,64K,1M,4M,16M,64M", sizes, 64, &nsizes);
    const char *wire = "f32", *addr_flag = NULL, *token_file = getenv("DTRAIN_TOKEN_FILE");
    int iters = 5, warmup = 1, streams = 0, verify = 0, raw = 1, json = 0, devices = 0, c;
    double timeout_s = 1800, warmup_s = 0.3;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'D':
            devices = dt_cli_int(optarg);
            if (devices < 1 || devices > 16) {
                fprintf(stderr, "dtrain bench allreduce: --devices %s: give 1..16 replicas\n",
                        optarg);
                return 2;
            }
            break;
        case 'S':
            warmup_s = dt_cli_double(optarg);
            break;
        case 's':
            if (parse_sizes(optarg, sizes, 64, &nsizes) != 0) {
                fprintf(stderr,
                        "dtrain bench allreduce: --sizes %s: give up to 64 sizes like "
                        "4K,1M,64M (each at most 2G)\n",
                        optarg);
                return 2;
            }
            break;
        case 'i':
            iters = dt_cli_int(optarg);
            break;
        case 'w':
            warmup = dt_cli_int(optarg);
            break;
        case 'W':
            wire = optarg;
            break;
        case 'k':
            streams = dt_cli_int(optarg);
            break;
        case 'v':
            verify = 1;
            break;
        case 'C': {
            size_t one = 0;
            if (parse_sizes(optarg, &chunk, 1, &one) != 0 || chunk < 4096 || chunk > (32u << 20)) {
                fprintf(stderr, "dtrain bench allreduce: --chunk %s: give 4K to 32M\n", optarg);
                return 2;
            }
            break;
        }
        case 'n':
            raw = 0;
            break;
        case 'T':
            timeout_s = atof(optarg);
            break;
        case 'a':
            addr_flag = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return dt_cli_bad_option("bench allreduce", argc, argv, "h", opts);
        }
    }
    if (iters < 1 || iters > 100000 || warmup < 0 || warmup > 1000 || streams < 0 || streams > 16 ||
        timeout_s <= 0 || !(warmup_s >= 0 && warmup_s <= 60) ||
        (strcmp(wire, "f32") && strcmp(wire, "bf16") && strcmp(wire, "f16"))) {
        fprintf(stderr, "dtrain bench allreduce: --iters 1..100000, --warmup 0..1000, --warmup-s "
                        "0..60, --streams 0..16, --wire f32|bf16|f16\n");
        return 2;
    }
    if (devices && strcmp(wire, "f32")) {
        fprintf(stderr,
                "dtrain bench allreduce: --devices times the float32 hierarchical "
                "all-reduce; it takes no --wire %s\n",
                wire);
        return 2;
    }
    dt_cli_conn conn = {0};
    int orc = dt_cli_conn_open(&conn, "bench allreduce", addr_flag, token_file);
    if (orc) {
        dt_cli_conn_close(&conn);
        return orc;
    }
    dt_err err = {0};
    Dtrain__V1__CommBenchRequest req = DTRAIN__V1__COMM_BENCH_REQUEST__INIT;
    req.sizes = sizes;
    req.n_sizes = nsizes;
    req.iters = (uint32_t)iters;
    req.warmup = (uint32_t)warmup;
    req.wire = (char *)wire;
    req.verify = verify;
    req.streams = (uint32_t)streams;
    req.raw_stream = raw;
    req.chunk_bytes = (uint32_t)chunk;
    req.warmup_s = warmup_s;
    req.devices = (uint32_t)devices;
    Dtrain__V1__CommBenchReply *rep = NULL;
    dt_status st = dt_rpc_unary(conn.ch, "/dtrain.v1.Comm/Bench", &req.base,
                                &dtrain__v1__comm_bench_reply__descriptor,
                                (ProtobufCMessage **)&rep, (int64_t)(timeout_s * 1000), &err);
    dt_cli_conn_close(&conn);
    if (st != DT_OK) {
        fprintf(stderr, "dtrain bench allreduce: %s\n", err.msg);
        return st == DT_EINVAL || st == DT_EAUTH ? 2 : 1;
    }
    int R = (int)rep->world_size, rc = 0;
    double bus = R > 1 ? 2.0 * (R - 1) / R : 1.0;
    int HR = R * devices; /* the hierarchical rows' replicas */
    double hbus = HR > 1 ? 2.0 * (HR - 1) / HR : 1.0;
    if (devices && (rep->devices != (uint32_t)devices || rep->n_hier_rows != rep->n_rows)) {
        fprintf(stderr, "dtrain bench allreduce: the daemon ran no hierarchical all-reduce "
                        "(is it an older dtraind?)\n");
        protobuf_c_message_free_unpacked(&rep->base, NULL);
        return 1;
    }
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "world_size", R);
        cJSON_AddStringToObject(j, "wire", wire);
        cJSON_AddNumberToObject(j, "iters", iters);
        cJSON_AddNumberToObject(j, "warmup_s", warmup_s);
        cJSON *rows = cJSON_AddArrayToObject(j, "rows");
        for (size_t i = 0; i < rep->n_rows; i++) {
            const Dtrain__V1__CommBenchRow *r = rep->rows[i];
            double alg = r->time_s > 0 ? (double)r->bytes / r->time_s / 1e9 : 0;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
            cJSON_AddNumberToObject(o, "time_s", r->time_s);
            cJSON_AddNumberToObject(o, "algbw_GBps", alg);
            cJSON_AddNumberToObject(o, "busbw_GBps", alg * bus);
            cJSON_AddNumberToObject(o, "cpu_s", r->cpu_s);
            if (verify)
                cJSON_AddBoolToObject(o, "verified", r->verified);
            cJSON_AddItemToArray(rows, o);
        }
        if (devices) {
            cJSON_AddNumberToObject(j, "devices", devices);
            cJSON_AddNumberToObject(j, "replicas", HR);
            cJSON *hrows = cJSON_AddArrayToObject(j, "hier_rows");
            for (size_t i = 0; i < rep->n_hier_rows; i++) {
                const Dtrain__V1__CommBenchRow *r = rep->hier_rows[i];
                double alg = r->time_s > 0 ? (double)r->bytes / r->time_s / 1e9 : 0;
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
                cJSON_AddNumberToObject(o, "time_s", r->time_s);
                cJSON_AddNumberToObject(o, "algbw_GBps", alg);
                cJSON_AddNumberToObject(o, "busbw_GBps", alg * hbus);
                cJSON_AddNumberToObject(o, "cpu_s", r->cpu_s);
                cJSON_AddNumberToObject(o, "flat_time_s", rep->rows[i]->time_s);
                if (verify)
                    cJSON_AddBoolToObject(o, "verified", r->verified);
                cJSON_AddItemToArray(hrows, o);
            }
        }
        if (rep->stream_gbps > 0) {
            cJSON_AddNumberToObject(j, "stream_GBps", rep->stream_gbps);
            cJSON_AddNumberToObject(j, "stream_bytes", (double)rep->stream_bytes);
            cJSON_AddNumberToObject(j, "stream_cpu_s", rep->stream_cpu_s);
        }
        dt_cli_print_json(j);
    } else {
        printf("ring all-reduce, %d rank%s, wire %s, %d iterations (+%d warm-up), slowest rank\n\n",
               R, R == 1 ? "" : "s", wire, iters, warmup);
        printf("%10s %12s %12s %12s %13s%s\n", "size", "time(ms)", "algbw(GB/s)", "busbw(GB/s)",
               "cpu/rank(ms)", verify ? "  verified" : "");
        for (size_t i = 0; i < rep->n_rows; i++) {
            const Dtrain__V1__CommBenchRow *r = rep->rows[i];
            double alg = r->time_s > 0 ? (double)r->bytes / r->time_s / 1e9 : 0;
            char sz[32];
            size_name(r->bytes, sz, sizeof sz);
            printf("%10s %12.3f %12.3f %12.3f %13.3f%s\n", sz, r->time_s * 1e3, alg, alg * bus,
                   r->cpu_s * 1e3, verify ? (r->verified ? "  yes" : "  NO") : "");
        }
        if (devices) {
            printf("\nhierarchical all-reduce, %d rank%s x %d CPU replica%s (%d replicas: busbw "
                   "over all), f32, slowest replica\n\n",
                   R, R == 1 ? "" : "s", devices, devices == 1 ? "" : "s", HR);
            printf("%10s %12s %12s %12s %13s %13s%s\n", "size", "time(ms)", "algbw(GB/s)",
                   "busbw(GB/s)", "cpu/rank(ms)", "flat ring(ms)", verify ? "  verified" : "");
            for (size_t i = 0; i < rep->n_hier_rows; i++) {
                const Dtrain__V1__CommBenchRow *r = rep->hier_rows[i];
                double alg = r->time_s > 0 ? (double)r->bytes / r->time_s / 1e9 : 0;
                char sz[32];
                size_name(r->bytes, sz, sizeof sz);
                printf("%10s %12.3f %12.3f %12.3f %13.3f %13.3f%s\n", sz, r->time_s * 1e3, alg,
                       alg * hbus, r->cpu_s * 1e3, rep->rows[i]->time_s * 1e3,
                       verify ? (r->verified ? "  yes" : "  NO") : "");
            }
        }
        if (rep->stream_gbps > 0) {
            char sz[32];
            size_name(rep->stream_bytes, sz, sizeof sz);
            double last = 0;
            for (size_t i = 0; i < rep->n_rows; i++)
                if (rep->rows[i]->bytes == rep->stream_bytes && rep->rows[i]->time_s > 0)
                    last = (double)rep->rows[i]->bytes / rep->rows[i]->time_s / 1e9 * bus;
            printf("\none raw gRPC stream (%s, rank 0 to rank 1, one stream): %.3f GB/s", sz,
                   rep->stream_gbps);
            if (last > 0)
                printf("; busbw at %s is %.0f%% of it", sz, 100 * last / rep->stream_gbps);
            if (rep->stream_cpu_s > 0)
                printf("\n  CPU: %.3f ms a message at both ends together, %.2f ns a byte",
                       rep->stream_cpu_s * 1e3,
                       rep->stream_cpu_s * 1e9 / (double)rep->stream_bytes);
            printf("\n");
        }
    }
    for (size_t i = 0; verify && i < rep->n_rows; i++)
        if (!rep->rows[i]->verified)
            rc = 1;
    for (size_t i = 0; verify && i < rep->n_hier_rows; i++)
        if (!rep->hier_rows[i]->verified)
            rc = 1;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}

int dt_cli_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train"))
        return bench_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "allreduce"))
        return bench_allreduce(argc - 1, argv + 1);
    if (!strcmp(argv[1], "data"))
        return dt_cli_bench_data(argc - 1, argv + 1);
    static const char *const names[] = {"train", "allreduce", "data"};
    const char *near = dt_cli_nearest(argv[1], names, 3);
    fprintf(stderr,
            "dtrain bench: unknown benchmark '%s'%s%s%s (train, allreduce, data; see --help)\n",
            argv[1], near ? "; did you mean " : "", near ? near : "", near ? "?" : "");
    return 2;
}
