/* dtrain bench - benchmarks that need no cluster.
 *   dtrain bench train --model M.json --batch B [--threads T] [--steps N] [--warmup W] [--json]
 * times training steps (forward, sparse cross-entropy, backward, SGD update) of one process on
 * random data and prints samples/s, the step time and how much of it the GEMMs take.
 *   dtrain bench allreduce  (not available yet) */
#include "cli.h"

#include "nn/model.h"
#include "nn/optim.h"

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

static void usage(FILE *f)
{
    fprintf(f, "usage: dtrain bench train --model M.json --batch B [--threads T] [--steps N]\n"
               "                         [--warmup W] [--json]\n"
               "       dtrain bench allreduce\n\n"
               "train: one process, random data, sparse categorical cross-entropy and SGD;\n"
               "  --threads sets OpenBLAS's threads (default: the machine's setting).\n"
               "  --json prints {\"world_size\", \"batch\", \"samples_per_s\", \"step_s\", "
               "\"gemm_s\",\n  \"gemm_fraction\", \"blas\"}.\n");
}

static int bench_train(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},   {"batch", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'}, {"steps", required_argument, NULL, 's'},
        {"warmup", required_argument, NULL, 'w'},  {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {0, 0, 0, 0}};
    const char *model = NULL;
    int batch = 64, threads = 0, steps = 50, warmup = 5, c;
    bool json = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            model = optarg;
            break;
        case 'b':
            batch = atoi(optarg);
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 's':
            steps = atoi(optarg);
            break;
        case 'w':
            warmup = atoi(optarg);
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!model || batch < 1 || batch > 1 << 16 || steps < 1 || warmup < 0 || threads < 0 ||
        optind != argc) {
        usage(stderr);
        return 2;
    }
    dt_nn_blas_threads(threads);
    real_ops = dt_nn_ops_cpu();
    dt_nn_ops timed = *real_ops;
    timed.gemm = timed_gemm;
    dt_err err = {0};
    dt_model *m;
    dt_model_opts mo = {.seed = 1, .ops = &timed};
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
    dt_loss loss = {DT_NN_LOSS_SPARSE_CE, true};
    dt_model_batch b = {.x = x, .labels = labels, .n = batch};
    double t0 = 0;
    for (int i = 0; i < warmup + steps; i++) {
        if (i == warmup) {
            t0 = now_s();
            gemm_s = 0;
        }
        if (dt_model_train_step(m, &loss, &b, batch, NULL, &err) != DT_OK ||
            dt_optim_step(opt, &err) != DT_OK) {
            fprintf(stderr, "dtrain bench: %s\n", err.msg);
            goto out;
        }
    }
    double dt = now_s() - t0, step = dt / steps, gemm = gemm_s / steps;
    char blas[256];
    dt_nn_blas_info(blas, sizeof blas);
    if (json)
        printf("{\"world_size\": 1, \"batch\": %d, \"samples_per_s\": %.1f, \"step_s\": %.6f, "
               "\"gemm_s\": %.6f, \"gemm_fraction\": %.3f, \"blas\": \"%s\"}\n",
               batch, batch / step, step, gemm, gemm / step, blas);
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
    if (!strcmp(argv[1], "allreduce")) {
        fprintf(stderr, "dtrain bench allreduce: not available yet\n");
        return 2;
    }
    fprintf(stderr, "dtrain bench: unknown benchmark '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
