/*
 * daemon_eval.h - the evaluator task: evaluates the chief's checkpoints as a job trains.
 *
 * TF_CONFIG's "evaluator" (at most one; it need not be listed in "cluster") trains nothing and
 * stays outside the ring, as in TensorFlow's side-car evaluator. Every interval it asks the
 * chief (Jobs.ListJobs) for the running job; when that job has a checkpoint newer than the last
 * one evaluated, it fetches it over gRPC (Jobs.Export with checkpoint set, so no shared
 * filesystem is needed), evaluates it on the job's $.data.validation split read under its own
 * --data-root, and records the result. When the job succeeds, its final weights are evaluated
 * once more. Results go under STATE_DIR/eval/JOB/:
 *   eval.jsonl   one JSON object per evaluation: job, source, global_step, final, loss,
 *                accuracy (when the job has the metric), examples, time_unix;
 *   events/      TensorBoard scalars "evaluation/loss" and "evaluation/accuracy" by global step;
 *   weights.safetensors  the weights last evaluated.
 * A chief that does not answer is logged (once per outage, naming it) and asked again at the
 * next interval; the evaluator never waits without a deadline.
 *
 * Threads: everything runs on the calling thread; SIGTERM and SIGINT end the loop within
 * 100 ms of the current step (an evaluation in progress is finished first).
 */
#ifndef DT_DAEMON_EVAL_H
#define DT_DAEMON_EVAL_H

#include "config/tfconfig.h"

typedef struct dt_daemon_eval_opts {
    const dt_cluster_spec *spec; /* this task is the evaluator */
    const char *token;           /* may be NULL */
    const char *data_root;       /* reads of the job's spec; NULL = unconfined */
    const char *state_dir;       /* results */
    const char *ready_file;      /* written once the loop runs; may be NULL */
    int interval_ms;             /* between polls of the chief; 0 = 5000 */
} dt_daemon_eval_opts;

/* Runs until SIGTERM or SIGINT; returns the process exit status (0, or 1 when the results
 * cannot be written). */
int dt_daemon_eval_run(const dt_daemon_eval_opts *o);

#endif
