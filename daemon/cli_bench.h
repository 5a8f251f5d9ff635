/*
 * cli_bench.h - the options of `dtrain bench train`, shared by its one-process form
 * (cli_bench.c) and its cluster form (cli_bench_train.c), which trains on every task of a formed
 * cluster through the job service and times the steps from the job's step events.
 * Single-threaded, like the whole CLI; the strings point into argv.
 */
#ifndef DT_DAEMON_CLI_BENCH_H
#define DT_DAEMON_CLI_BENCH_H

#include <stdbool.h>

typedef struct dt_bench_train_opts {
    const char *model;       /* Keras model JSON file */
    const char *addr;        /* --addr, or NULL: DTRAIN_ADDR, TF_CONFIG's chief, 127.0.0.1:7000 */
    const char *token_file;  /* --token-file, or NULL: DTRAIN_TOKEN_FILE */
    const char *data;        /* --data: a training split (inline JSON or a file), or NULL */
    const char *optimizer;   /* --optimizer: a Keras name or {"class_name", "config"}, or NULL */
    int batch;               /* the global batch */
    int steps;               /* timed steps */
    int warmup;              /* steps before the timed ones */
    int workers;             /* --workers: the world size the cluster must have, or 0: any */
    const char *compression; /* --compression: $.strategy.compression ("bfloat16"), or NULL */
    double bucket_mb;        /* --bucket-mb: $.strategy.bucket_mb, or 0: the default */
    double first_bucket_mb;  /* --first-bucket-mb: $.strategy.first_bucket_mb, or 0 */
    int devices;             /* --devices N: $.strategy.devices /cpu:0..N-1, or 0: one replica */
    double timeout_s;        /* the whole run */
    bool json;
} dt_bench_train_opts;

/* Runs the benchmark on the cluster at o->addr; returns the exit status (0 ok, 1 the job failed
 * or the chief is unreachable, 2 bad input or the cluster's world size is not o->workers). */
int dt_cli_bench_train_cluster(const dt_bench_train_opts *o);

/* dtrain bench data SPEC (cli_bench_data.c): argv[0] is "data"; returns the exit status. */
int dt_cli_bench_data(int argc, char **argv);

#endif
