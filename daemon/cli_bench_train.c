/*
 * dtrain bench train --workers R - data-parallel training throughput of a formed cluster. It
 * asks the chief for the world size, submits a job (the model, Fashion-MNIST or --data, global
 * batch B, no shuffle, DATA sharding, SGD or --optimizer, no validation, no checkpoints within
 * the run) of W + N steps, follows its step events and times the steps after the warm-up from
 * the chief's event times: the job's preparation (model build, data decode, weight broadcast) is
 * not timed. On Fashion-MNIST the steps may span several epochs (large global batches), epoch
 * boundaries included; a --data split runs one epoch, which must hold W + N batches.
 */
#include "cli.h"
#include "cli_bench.h"
#include "cli_jobs.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/limits.h"
#include "dtrain.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FMNIST_DIR     "/usr/share/datasets/fashion-mnist"
#define FMNIST_TRAIN_N 60000
/* Far past any run's steps: the job writes no step checkpoint while it is timed. */
#define NO_CHECKPOINT_STEPS 1000000000

/* Inline JSON, or a file holding it; NULL after printing why. */
static cJSON *json_arg(const char *what, const char *arg)
{
    const char *p = arg;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    char *text = NULL;
    size_t len = 0;
    dt_err err = {0};
    if (*p != '{' && dt_file_read_all(arg, DT_MAX_JOBSPEC, &text, &len, &err) != DT_OK) {
        fprintf(stderr, "dtrain bench train: %s: %s\n", what, err.msg);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text ? text : arg);
    if (!cJSON_IsObject(j)) {
        fprintf(stderr, "dtrain bench train: %s: %s is not a JSON object\n", what,
                text ? arg : "the argument");
        cJSON_Delete(j);
        j = NULL;
    }
    free(text);
    return j;
}

/* The training split: --data (a split, or a whole job spec whose $.data.train is taken), else
 * Fashion-MNIST's 60,000 training images. */
static cJSON *train_split(const char *data)
{
    if (!data) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "format", "idx");
        cJSON_AddStringToObject(s, "images", FMNIST_DIR "/train-images-idx3-ubyte.gz");
        cJSON_AddStringToObject(s, "labels", FMNIST_DIR "/train-labels-idx1-ubyte.gz");
        cJSON_AddNumberToObject(s, "scale", 1.0 / 255);
        cJSON *shape = cJSON_AddArrayToObject(s, "image_shape");
        for (int i = 0; i < 3; i++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber(i < 2 ? 28 : 1));
        return s;
    }
    cJSON *j = json_arg("--data", data);
    cJSON *d = j ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
    if (cJSON_IsObject(d)) {
        cJSON *train = cJSON_DetachItemFromObjectCaseSensitive(d, "train");
        cJSON_Delete(j);
        if (!cJSON_IsObject(train)) {
            fprintf(stderr, "dtrain bench train: --data: the job spec has no $.data.train\n");
            cJSON_Delete(train);
            return NULL;
        }
        return train;
    }
    return j;
}

/* The run's shape: epochs of steps_per_epoch steps, at least W + N in all. Fashion-MNIST's
 * epoch holds at least 60,000 / B whole global batches; a --data split's size is not known
 * here, so it runs one epoch. */
typedef struct run_plan {
    int epochs;
    int steps_per_epoch;
} run_plan;

static run_plan plan_run(const dt_bench_train_opts *o)
{
    int want = o->warmup + o->steps, per = FMNIST_TRAIN_N / o->batch;
    if (o->data || per < 1 || want <= per)
        return (run_plan){1, want};
    int epochs = (want + per - 1) / per;
    return (run_plan){epochs, (want + epochs - 1) / epochs};
}

/* The job spec of the run, or NULL after printing why. */
static cJSON *build_spec(const dt_bench_train_opts *o)
{
    cJSON *model = json_arg("--model", o->model);
    if (!model)
        return NULL;
    cJSON *train = train_split(o->data);
    if (!train) {
        cJSON_Delete(model);
        return NULL;
    }
    cJSON *spec = cJSON_CreateObject();
    cJSON_AddStringToObject(spec, "name", "bench-train");
    cJSON_AddItemToObject(spec, "model", model);
    cJSON *compile = cJSON_AddObjectToObject(spec, "compile");
    const char *opt = o->optimizer ? o->optimizer : "sgd";
    while (*opt == ' ')
        opt++;
    if (*opt == '{') {
        cJSON *oj = json_arg("--optimizer", opt);
        if (!oj) {
            cJSON_Delete(spec);
            cJSON_Delete(train);
            return NULL;
        }
        cJSON_AddItemToObject(compile, "optimizer", oj);
    } else {
        cJSON_AddStringToObject(compile, "optimizer", opt);
    }
    /* Logits and sparse labels, as the one-process bench computes. */
    cJSON *loss = cJSON_AddObjectToObject(compile, "loss");
    cJSON_AddStringToObject(loss, "class_name", "SparseCategoricalCrossentropy");
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(loss, "config"), "from_logits", true);
    cJSON *data = cJSON_AddObjectToObject(spec, "data");
    cJSON_AddItemToObject(data, "train", train);
    cJSON_AddBoolToObject(data, "shuffle", false);
    cJSON_AddNumberToObject(data, "seed", 1);
    cJSON_AddStringToObject(data, "shard_policy", "DATA");
    cJSON *fit = cJSON_AddObjectToObject(spec, "fit");
    run_plan rp = plan_run(o);
    cJSON_AddNumberToObject(fit, "epochs", rp.epochs);
    cJSON_AddNumberToObject(fit, "batch_size", o->batch);
    cJSON_AddNumberToObject(fit, "steps_per_epoch", rp.steps_per_epoch);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(spec, "checkpoint"), "save_freq",
                            NO_CHECKPOINT_STEPS);
    if (o->compression || o->bucket_mb || o->first_bucket_mb || o->devices) {
        cJSON *st = cJSON_AddObjectToObject(spec, "strategy");
        if (o->devices) {
            cJSON *dev = cJSON_AddArrayToObject(st, "devices");
            for (int i = 0; i < o->devices; i++) {
                char d[24];
                snprintf(d, sizeof d, "/cpu:%d", i);
                cJSON_AddItemToArray(dev, cJSON_CreateString(d));
            }
        }
        if (o->compression)
            cJSON_AddStringToObject(st, "compression", o->compression);
        if (o->bucket_mb)
            cJSON_AddNumberToObject(st, "bucket_mb", o->bucket_mb);
        if (o->first_bucket_mb)
            cJSON_AddNumberToObject(st, "first_bucket_mb", o->first_bucket_mb);
    }
    return spec;
}

/* The number of ring tasks the daemon at c knows (0 after printing why it cannot tell). */
static int world_size(dt_cli_conn *c, bool *formed)
{
    Dtrain__V1__ClusterInfoRequest req = DTRAIN__V1__CLUSTER_INFO_REQUEST__INIT;
    Dtrain__V1__ClusterInfoReply *rep = NULL;
    if (dt_cli_call(c, DT_RPC_CLUSTER_INFO, &req.base, &dtrain__v1__cluster_info_reply__descriptor,
                    (ProtobufCMessage **)&rep, 10) != 0)
        return 0;
    int n = rep->view ? (int)rep->view->n_members : 0;
    *formed = rep->view && rep->view->formed;
    if (!n)
        fprintf(stderr, "dtrain bench train: %s sent an empty cluster view\n", c->addr);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return n;
}

/* A point of the run: steps done since the job's first, and the chief's clock then. */
typedef struct mark {
    uint64_t step;
    double time_s;
} mark;

typedef struct follow {
    uint64_t steps; /* the run's steps (epochs x the epoch's steps; 0 until known) */
    mark start;     /* the first step event at or past the warm-up */
    bool have_start;
    mark before; /* the last step event before the warm-up ended, or the first epoch's start */
    mark end;    /* the run's last step */
    bool have_end;
} follow;

static void on_event(follow *f, int warmup, const Dtrain__V1__JobEvent *e)
{
    if (e->epoch == 1 && !strcmp(e->kind, "epoch_begin") && !f->before.time_s) {
        f->before = (mark){0, e->time_unix};
        return;
    }
    if (e->epoch < 1 || !e->steps || strcmp(e->kind, "step") != 0)
        return;
    mark m = {(uint64_t)(e->epoch - 1) * e->steps + e->step, e->time_unix};
    f->steps = (uint64_t)e->epochs * e->steps;
    if (m.step >= f->steps) {
        f->end = m;
        f->have_end = true;
    } else if (m.step >= (uint64_t)warmup) {
        if (!f->have_start)
            f->start = m, f->have_start = true;
    } else {
        f->before = m;
    }
}

static void cancel_job(dt_cli_conn *c, const char *id)
{
    Dtrain__V1__JobRef req = DTRAIN__V1__JOB_REF__INIT;
    req.id = (char *)id;
    Dtrain__V1__JobReply *rep = NULL;
    if (dt_cli_call(c, DT_CLI_RPC_JOBS_CANCEL, &req.base, &dtrain__v1__job_reply__descriptor,
                    (ProtobufCMessage **)&rep, 10) == 0)
        protobuf_c_message_free_unpacked(&rep->base, NULL);
}

/* Follows job id to its end; 0 when it succeeded, else the exit status after printing why. */
static int follow_job(dt_cli_conn *c, const char *id, int warmup, double timeout_s, follow *f)
{
    dt_deadline until = dt_deadline_in((int64_t)(timeout_s * 1000));
    int64_t last_ok = dt_now_ms();
    uint64_t after = 0;
    dt_err err = {0};
    while (!dt_deadline_passed(until)) {
        Dtrain__V1__WatchReply *rep = NULL;
        dt_status st = dt_cli_watch_poll(c, id, after, &rep, &err);
        if (st != DT_OK) {
            if ((st != DT_EPEER && st != DT_ETIMEDOUT) || dt_now_ms() - last_ok > 30000) {
                fprintf(stderr, "dtrain bench train: following job %s: %s\n", id, err.msg);
                return 1;
            }
            dt_sleep_ms(500);
            continue;
        }
        last_ok = dt_now_ms();
        for (size_t i = 0; i < rep->n_events; i++) {
            if (rep->events[i]->seq <= after)
                continue;
            after = rep->events[i]->seq;
            on_event(f, warmup, rep->events[i]);
        }
        const Dtrain__V1__JobInfo *j = rep->job;
        if (j && dt_cli_job_terminal(j->state) && rep->n_events == 0) {
            int rc = 0;
            if (strcmp(j->state, "succeeded") != 0) {
                fprintf(stderr, "dtrain bench train: job %s %s: %s\n", id, j->state,
                        j->error && *j->error ? j->error : "(no reason given)");
                rc = 1;
            }
            protobuf_c_message_free_unpacked(&rep->base, NULL);
            return rc;
        }
        protobuf_c_message_free_unpacked(&rep->base, NULL);
    }
    fprintf(stderr,
            "dtrain bench train: job %s did not end within %.0f s (--timeout); cancelling it\n", id,
            timeout_s);
    cancel_job(c, id);
    return 1;
}

int dt_cli_bench_train_cluster(const dt_bench_train_opts *o)
{
    cJSON *spec = build_spec(o);
    if (!spec)
        return 2;
    dt_cli_conn c = {.timeout_s = 60};
    int rc = dt_cli_conn_open(&c, "bench train", o->addr, o->token_file);
    if (rc) {
        cJSON_Delete(spec);
        return rc;
    }
    bool formed = false;
    int R = world_size(&c, &formed);
    if (!R) {
        rc = 1;
        goto out;
    }
    if (o->workers && R != o->workers) {
        fprintf(stderr,
                "dtrain bench train: --workers %d, but the cluster at %s has %d task%s; start %d "
                "daemons (scripts/local-cluster.sh %d) or pass --workers %d\n",
                o->workers, c.addr, R, R == 1 ? "" : "s", o->workers, o->workers, R);
        rc = 2;
        goto out;
    }
    if (!formed)
        fprintf(stderr,
                "dtrain bench train: the cluster at %s has not formed yet; the job waits "
                "for it\n",
                c.addr);
    char *text = cJSON_PrintUnformatted(spec);
    Dtrain__V1__SubmitRequest req = DTRAIN__V1__SUBMIT_REQUEST__INIT;
    req.spec_json = text;
    req.source = (char *)"bench train";
    Dtrain__V1__SubmitReply *rep = NULL;
    rc = dt_cli_call(&c, DT_CLI_RPC_JOBS_SUBMIT, &req.base, &dtrain__v1__submit_reply__descriptor,
                     (ProtobufCMessage **)&rep, 0);
    free(text);
    if (rc)
        goto out;
    char id[64] = "";
    if (rep->job)
        snprintf(id, sizeof id, "%s", rep->job->id);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    if (!*id) {
        fprintf(stderr, "dtrain bench train: %s accepted the job but sent no id\n", c.addr);
        rc = 1;
        goto out;
    }
    follow f = {0};
    if ((rc = follow_job(&c, id, o->warmup, o->timeout_s, &f)) != 0)
        goto out;
    /* Step events come at most ten a second, so the timed span starts at the first event at or
     * past the warm-up; were there none, at the last one before it (or the epoch's start). */
    mark start = f.have_start && o->warmup > 0 ? f.start : f.before;
    if (!f.have_end || f.end.step <= start.step || f.end.time_s <= start.time_s) {
        fprintf(stderr,
                "dtrain bench train: job %s ran %llu step%s, too few to time after %d warm-up "
                "steps (the data gives fewer than --warmup + --steps?)\n",
                id, (unsigned long long)f.steps, f.steps == 1 ? "" : "s", o->warmup);
        rc = 1;
        goto out;
    }
    if (start.step < (uint64_t)o->warmup)
        fprintf(stderr,
                "dtrain bench train: the run was too short to leave the warm-up out (step events "
                "come at most ten a second): steps %llu..%llu are timed, %llu of them warm-up; "
                "give more --steps\n",
                (unsigned long long)start.step + 1, (unsigned long long)f.end.step,
                (unsigned long long)(o->warmup - start.step));
    uint64_t timed = f.end.step - start.step;
    double secs = f.end.time_s - start.time_s, step_s = secs / (double)timed;
    double sps = o->batch / step_s;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "world_size", R);
        cJSON_AddNumberToObject(j, "devices", o->devices ? o->devices : 1);
        cJSON_AddNumberToObject(j, "replicas", R * (o->devices ? o->devices : 1));
        cJSON_AddNumberToObject(j, "batch", o->batch);
        cJSON_AddNumberToObject(j, "samples_per_s", sps);
        cJSON_AddNumberToObject(j, "step_s", step_s);
        cJSON_AddNumberToObject(j, "timed_steps", (double)timed);
        cJSON_AddNumberToObject(j, "first_timed_step", (double)start.step + 1);
        cJSON_AddNumberToObject(j, "job_steps", (double)f.steps);
        cJSON_AddStringToObject(j, "job", id);
        cJSON_AddStringToObject(j, "optimizer", o->optimizer ? o->optimizer : "sgd");
        cJSON_AddStringToObject(j, "compression", o->compression ? o->compression : "none");
        dt_cli_print_json(j);
    } else {
        int G = o->devices ? o->devices : 1;
        printf("model %s, %d worker%s x %d replica%s, global batch %d, gradient wire %s, steps "
               "%llu..%llu of job %s timed:\n%.1f samples/s, %.3f ms/step (%.1f samples/s per "
               "worker)\n",
               o->model, R, R == 1 ? "" : "s", G, G == 1 ? "" : "s", o->batch,
               o->compression && strcmp(o->compression, "none") ? o->compression : "float32",
               (unsigned long long)start.step + 1, (unsigned long long)f.end.step, id, sps,
               step_s * 1e3, sps / R);
    }
out:
    cJSON_Delete(spec);
    dt_cli_conn_close(&c);
    return rc;
}
