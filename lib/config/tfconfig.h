/*
 * tfconfig.h - TF_CONFIG JSON -> a validated cluster spec, with TensorFlow's rules.
 *
 *     dt_cluster_spec spec;
 *     dt_err err = {0};
 *     if (dt_tfconfig_parse(getenv("TF_CONFIG"), strlen(...), &spec, &err) != DT_OK)
 *         die("%s", err.msg);                // names the key and value, says what to do
 *     printf("%s:%d rank %d of %d\n", dt_task_type_name(spec.self.type), spec.self.index,
 *            spec.self.rank, spec.world_size);
 *     dt_tfconfig_destroy(&spec);
 *
 * Rules (TensorFlow's multi_worker_util / TFConfigClusterResolver, plus dtrain's checks):
 * - "cluster" maps job names to lists of "host:port" ("[v6addr]:port" for IPv6). Jobs: chief,
 *   worker, ps, evaluator. At most one chief and at most one evaluator.
 * - "task" has "type" and "index" (an integer, or a string holding one, as TF accepts).
 * - The chief is chief:0 when present, else worker:0. Ranks: chief 0, worker i -> i + nchief.
 *   ps and evaluator tasks are outside the ring (rank -1). world_size = nchief + nworker.
 * - The evaluator need not appear in "cluster". Other keys ("rpc_layer", "environment") are
 *   accepted and ignored.
 * - dtrain rejects: a negative or out-of-range index, a duplicate address, a port outside
 *   1..65535, an unknown task type, a cluster with no chief and no worker.
 * Thread-safety: plain data; parse/destroy from one thread.
 */
#ifndef DT_CONFIG_TFCONFIG_H
#define DT_CONFIG_TFCONFIG_H

#include "core/limits.h"
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum dt_task_type {
    DT_TASK_CHIEF = 0,
    DT_TASK_WORKER,
    DT_TASK_PS,
    DT_TASK_EVALUATOR,
} dt_task_type;

typedef struct dt_task {
    dt_task_type type;
    int index;
    int rank;                     /* 0..world_size-1 in the ring; -1 for ps and evaluator */
    char address[DT_MAX_ADDRESS]; /* as written: "host:port" or "[v6]:port" */
    char host[DT_MAX_ADDRESS];    /* without brackets: "10.0.0.2", "::1", "node-3" */
    int port;                     /* 1..65535 */
} dt_task;

typedef struct dt_cluster_spec {
    dt_task *tasks; /* every task of "cluster" (owned): chief, workers by index, ps, evaluator */
    size_t ntasks;
    dt_task self;   /* this process's task ("task" in TF_CONFIG); copy of its entry */
    bool has_self;  /* false when TF_CONFIG has no "task" (e.g. the CLI reading it) */
    int world_size; /* tasks in the ring: chief + workers */
    int chief;      /* index into tasks of the chief (chief:0, else worker:0) */
    uint64_t hash;  /* of the canonical cluster (jobs and addresses, not "task"): every
                       daemon of one cluster must agree on it */
} dt_cluster_spec;

/* Parses TF_CONFIG text (len bytes, need not be NUL-terminated). On failure spec is left
 * zeroed and err names the JSON key and value ("$.task.index: -1 is negative; ..."). */
dt_status dt_tfconfig_parse(const char *json, size_t len, dt_cluster_spec *spec, dt_err *err);

/* A one-worker cluster on address ("127.0.0.1:7000"), as a daemon without TF_CONFIG runs. */
dt_status dt_tfconfig_single(const char *address, dt_cluster_spec *spec, dt_err *err);

/* Frees spec->tasks; a zeroed spec is a no-op. */
void dt_tfconfig_destroy(dt_cluster_spec *spec);

/* "chief", "worker", "ps", "evaluator". */
const char *dt_task_type_name(dt_task_type type);

/* "worker:2" into buf (at least 32 bytes); returns buf. */
char *dt_task_name(const dt_task *task, char *buf, size_t n);

/* Ring member with this rank, or NULL. */
const dt_task *dt_tfconfig_by_rank(const dt_cluster_spec *spec, int rank);

/* Splits "host:port" / "[v6]:port" into host and port; errors say what form is expected. */
dt_status dt_tfconfig_split_address(const char *address, char *host, size_t host_len, int *port,
                                    dt_err *err);

/* The canonical text of the cluster, one entry per line, "worker:1=10.0.0.2:7000\n", in the
 * order of spec->tasks; the hash is FNV-1a 64 of this text. Caller frees. Used to tell two
 * daemons which entries differ. */
char *dt_tfconfig_canonical(const dt_cluster_spec *spec);

/* Compares two canonical texts and writes the differing entries, human-readable
 * ("worker:1 is 10.0.0.2:7000 here and 10.0.0.9:7000 there; ps:0 only here"), into out. */
void dt_tfconfig_diff(const char *mine, const char *theirs, char *out, size_t n);

#endif
