/* fuzz_rpc.c - every protobuf request a daemon's handlers accept, through the handlers
 * themselves: Control (Join, Heartbeat, Leave, ClusterInfo: dt_cluster_handle_call), Jobs and
 * JobRunner (dt_service_handle_call) and Comm.Bench (dt_service_bench_handle_call), on the
 * chief (worker:0) of a two-worker cluster whose other task never answers.
 *
 * The gRPC server is replaced by this file's dt_rpc_call_* (the library's server.c is not linked
 * in): a call is the input's bytes for one method, it is freed when answered, as the server
 * does, so ASan sees a handler that touches it afterwards, and a second answer or no answer
 * (after the loop has run the call's work) aborts. Before the first input the service loads a
 * state dir holding a succeeded job "1" (with final weights, so Export, Evaluate and Predict run)
 * and a failed job "2"; the data root holds the CSV its spec trains on.
 *
 * Input: [method] [request bytes]. Kept out, because they would train or connect to peers that
 * never answer: a JobRunner.Start the runner would accept and a Comm.Bench the bench would run
 * are dropped by the harness (every refusal before that runs), and Comm.BenchRun (a rank's part
 * of a bench: it connects the ring) is not sent. A Resume or Remove of job "1" or "2" is dropped
 * too. After each input the harness answers held Watch calls, has worker:1 leave if it joined,
 * and cancels and removes the jobs submitted, so every input starts from the same state. */
#include "common.h"

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "comm.pb-c.h"
#include "config/tfconfig.h"
#include "core/clock.h"
#include "nn/model.h"
#include "service/service.h"
#include "service/service_internal.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_WAIT_MS 20000 /* for a call's work on the thread pool */

/* --- the fake server ------------------------------------------------------------------------- */

struct dt_rpc_call {
    const char *method;
    const uint8_t *data;
    size_t len;
};

static int answered; /* calls answered since the input began */

const char *dt_rpc_call_method(const dt_rpc_call *call)
{
    return call->method;
}

const char *dt_rpc_call_peer(const dt_rpc_call *call)
{
    (void)call;
    return "ipv4:127.0.0.1:40000";
}

dt_status dt_rpc_call_unpack(dt_rpc_call *call, const ProtobufCMessageDescriptor *desc,
                             ProtobufCMessage **msg)
{
    *msg = protobuf_c_message_unpack(desc, NULL, call->len, call->data);
    if (!*msg) {
        dt_rpc_call_fail(call, DT_EINVAL, "the request is not a valid message");
        return DT_EPROTO;
    }
    return DT_OK;
}

void dt_rpc_call_reply(dt_rpc_call *call, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || protobuf_c_message_pack(msg, buf) != n)
        abort(); /* a reply that cannot be encoded */
    free(buf);
    free(call);
    answered++;
}

void dt_rpc_call_fail(dt_rpc_call *call, dt_status st, const char *message)
{
    (void)st;
    if (!message)
        abort();
    free(call);
    answered++;
}

/* --- the daemon ------------------------------------------------------------------------------ */

#define DAEMON_TF_CONFIG                                                                           \
    "{\"cluster\": {\"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]}, "                             \
    "\"task\": {\"type\": \"worker\", \"index\": 0}}"

static const char model_json[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 2], \"name\": \"in\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 2}}]}}";

static const char spec_json[] =
    "{\"name\": \"fz\", \"model\": \"model.json\", \"compile\": {\"optimizer\": \"sgd\", "
    "\"loss\": \"sparse_categorical_crossentropy\", \"metrics\": [\"accuracy\"]}, "
    "\"data\": {\"train\": {\"format\": \"csv\", \"files\": \"train.csv\", "
    "\"label_column\": \"label\"}}, \"fit\": {\"epochs\": 1, \"batch_size\": 2}}";

static uv_loop_t loop;
static dt_cluster_spec spec;
static dt_cluster *cluster;
static dt_service *service;
static dt_service_bench *bench;

static void die(const char *what, const dt_err *err)
{
    fprintf(stderr, "fuzz_rpc: %s: %s\n", what, err->msg);
    abort();
}

/* A job as the chief stores it, in state; weights may be NULL. */
static void store_job(const char *state_dir, const char *id, job_state state, const char *weights)
{
    dt_err err = {0};
    job *jb = dt__service_job_new();
    if (!jb)
        abort();
    snprintf(jb->rec.id, sizeof jb->rec.id, "%s", id);
    snprintf(jb->rec.name, sizeof jb->rec.name, "fz");
    jb->rec.spec_json = strdup(spec_json);
    jb->rec.spec_len = strlen(spec_json);
    jb->rec.state = state;
    jb->rec.epochs = 1;
    jb->rec.world = 2;
    jb->rec.max_restarts = 3;
    jb->rec.rejoin_timeout_s = 300;
    jb->rec.weights_path = weights ? strdup(weights) : NULL;
    if (state == JOB_FAILED)
        snprintf(jb->rec.error, sizeof jb->rec.error, "worker:1 failed");
    char dir[FZ_PATH];
    if (dt__service_mkdirs(state_dir, id, dir, sizeof dir, &err) != DT_OK ||
        dt__service_save(state_dir, jb, true, &err) != DT_OK)
        die("store", &err);
    dt__service_job_free(jb);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    dt_err err = {0};
    char data_root[FZ_PATH], state_dir[FZ_PATH], path[FZ_PATH];
    snprintf(data_root, sizeof data_root, "%s/data", fz_tmpdir());
    snprintf(state_dir, sizeof state_dir, "%s/state", fz_tmpdir());
    if (mkdir(data_root, 0755) != 0 || mkdir(state_dir, 0755) != 0)
        abort();
    fz_write("data/model.json", model_json, strlen(model_json), path);
    static const char csv[] = "a,b,label\n1,2,0\n3,4,1\n0.5,-1,1\n";
    fz_write("data/train.csv", csv, strlen(csv), path);

    dt_model *m = NULL;
    dt_model_opts mo = {.seed = 1};
    char weights[FZ_PATH];
    snprintf(weights, sizeof weights, "%s/final.safetensors", data_root);
    if (dt_model_from_json(model_json, strlen(model_json), &mo, &m, &err) != DT_OK ||
        dt_train_save_weights(m, NULL, NULL, weights, &err) != DT_OK)
        die("weights", &err);
    dt_model_free(m);
    store_job(state_dir, "1", JOB_SUCCEEDED, weights);
    store_job(state_dir, "2", JOB_FAILED, NULL);

    if (dt_tfconfig_parse(DAEMON_TF_CONFIG, strlen(DAEMON_TF_CONFIG), &spec, &err) != DT_OK)
        die("tfconfig", &err);
    dt_rpc_global_init();
    uv_loop_init(&loop);
    dt_cluster_opts co = {.loop = &loop, .spec = &spec, .rendezvous_timeout_ms = 3600000};
    if (dt_cluster_new(&co, &cluster, &err) != DT_OK)
        die("cluster", &err);
    if (dt_service_bench_new(&loop, &spec, NULL, &bench, &err) != DT_OK)
        die("bench", &err);
    dt_service_opts so = {.loop = &loop,
                          .spec = &spec,
                          .cluster = cluster,
                          .state_dir = state_dir,
                          .data_root = data_root,
                          .comm_hub = dt_service_bench_hub(bench)};
    if (dt_service_new(&so, &service, &err) != DT_OK)
        die("service", &err);
    return 0;
}

static const struct {
    const char *method;
    const ProtobufCMessageDescriptor *desc; /* of the request */
} methods[] = {
    {DT_RPC_JOIN, &dtrain__v1__join_request__descriptor},
    {DT_RPC_HEARTBEAT, &dtrain__v1__heartbeat_request__descriptor},
    {DT_RPC_LEAVE, &dtrain__v1__leave_request__descriptor},
    {DT_RPC_CLUSTER_INFO, &dtrain__v1__cluster_info_request__descriptor},
    {DT_RPC_JOBS_SUBMIT, &dtrain__v1__submit_request__descriptor},
    {DT_RPC_JOBS_LIST, &dtrain__v1__list_jobs_request__descriptor},
    {DT_RPC_JOBS_STATUS, &dtrain__v1__job_ref__descriptor},
    {DT_RPC_JOBS_WATCH, &dtrain__v1__watch_request__descriptor},
    {DT_RPC_JOBS_CANCEL, &dtrain__v1__job_ref__descriptor},
    {DT_RPC_JOBS_RESUME, &dtrain__v1__job_ref__descriptor},
    {DT_RPC_JOBS_REMOVE, &dtrain__v1__job_ref__descriptor},
    {DT_RPC_JOBS_EXPORT, &dtrain__v1__export_request__descriptor},
    {DT_RPC_JOBS_EVALUATE, &dtrain__v1__evaluate_request__descriptor},
    {DT_RPC_JOBS_PREDICT, &dtrain__v1__predict_request__descriptor},
    {DT_RPC_RUN_START, &dtrain__v1__start_job_request__descriptor},
    {DT_RPC_RUN_CANCEL, &dtrain__v1__cancel_job_request__descriptor},
    {DT_RPC_RUN_PREPARED, &dtrain__v1__prepared_request__descriptor},
    {DT_RPC_RUN_FINISHED, &dtrain__v1__finished_request__descriptor},
    {DT_RPC_COMM_BENCH, &dtrain__v1__comm_bench_request__descriptor},
};
#define NMETHODS (sizeof methods / sizeof methods[0])

/* Whether the runner would start a trainer for this Start (the checks of
 * dt__service_runner_start that come before it). */
static bool would_train(const uint8_t *data, size_t len)
{
    Dtrain__V1__StartJobRequest *r = dtrain__v1__start_job_request__unpack(NULL, len, data);
    if (!r)
        return false;
    int rank = spec.self.rank, world = spec.world_size;
    if (r->n_tasks) {
        world = (int)r->n_tasks;
        rank = -1;
        for (size_t i = 0; i < r->n_tasks; i++)
            if ((int)r->tasks[i] == spec.self.rank)
                rank = (int)i;
    }
    bool yes = (int)r->rank == rank && (int)r->world_size == world && world <= spec.world_size &&
               dt__service_id_ok(r->id);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return yes;
}

/* Whether Comm.Bench would run this benchmark (the checks of dt_service_bench_handle_call
 * before it starts): it would connect to every rank, which never answers here. */
static bool would_bench(const uint8_t *data, size_t len)
{
    Dtrain__V1__CommBenchRequest *q = dtrain__v1__comm_bench_request__unpack(NULL, len, data);
    if (!q)
        return false;
    bool yes = q->n_sizes >= 1 && q->n_sizes <= 64 && q->iters <= 100000 && q->warmup <= 100000 &&
               q->warmup_s >= 0 && q->warmup_s <= 60 &&
               (!q->chunk_bytes || (q->chunk_bytes >= 4096 && q->chunk_bytes <= (32u << 20))) &&
               (!q->wire || !*q->wire || !strcmp(q->wire, "f32") || !strcmp(q->wire, "bf16") ||
                !strcmp(q->wire, "f16"));
    for (size_t i = 0; yes && i < q->n_sizes; i++)
        yes = q->sizes[i] <= (1ull << 31);
    protobuf_c_message_free_unpacked(&q->base, NULL);
    return yes;
}

/* Whether a Resume or Remove would change job "1" or "2", which every input starts from. */
static bool touches_kept_job(const uint8_t *data, size_t len)
{
    Dtrain__V1__JobRef *r = dtrain__v1__job_ref__unpack(NULL, len, data);
    if (!r)
        return false;
    const job *jb = dt__service_queue_find(&service->q, r->id);
    bool yes = jb && (!strcmp(jb->rec.id, "1") || !strcmp(jb->rec.id, "2"));
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return yes;
}

/* Runs the loop until every call of this input is answered and no work is left on the pool. */
static void settle(int calls)
{
    dt_deadline until = dt_deadline_in(MAX_WAIT_MS);
    for (;;) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (service->watchers) /* held Watch calls: answer them now, as their timeout would */
            dt__service_watchers_finish(service, NULL, true);
        if (answered == calls && service->inflight == 0)
            return;
        if (answered > calls)
            abort(); /* a call answered twice */
        if (dt_deadline_passed(until)) {
            fprintf(stderr, "fuzz_rpc: %d of %d calls unanswered after %d ms\n", calls - answered,
                    calls, MAX_WAIT_MS);
            abort();
        }
        dt_sleep_ms(1);
    }
}

/* Sends one call and waits for its answer. */
static void call(const char *method, const uint8_t *data, size_t len)
{
    dt_rpc_call *c = malloc(sizeof *c);
    if (!c)
        abort();
    *c = (dt_rpc_call){.method = method, .data = data, .len = len};
    answered = 0;
    if (!dt_cluster_handle_call(cluster, c) && !dt_service_handle_call(service, c) &&
        !dt_service_bench_handle_call(bench, c))
        abort(); /* every method of the table is served */
    settle(1);
}

/* Back to the state every input starts from: worker:1 away (it leaves), jobs "1" and "2"
 * only (the others are cancelled and removed). */
static void reset(void)
{
    if (cluster->members[1].state == MEMBER_JOINED) {
        Dtrain__V1__TaskId task = DTRAIN__V1__TASK_ID__INIT;
        task.type = "worker";
        task.index = 1;
        Dtrain__V1__LeaveRequest leave = DTRAIN__V1__LEAVE_REQUEST__INIT;
        leave.task = &task;
        leave.incarnation = cluster->members[1].incarnation;
        uint8_t buf[128];
        call(DT_RPC_LEAVE, buf, dtrain__v1__leave_request__pack(&leave, buf));
    }
    for (int pass = 0; pass < 2; pass++) {
        for (job *jb = service->q.head, *next; jb; jb = next) {
            next = jb->next;
            if (!strcmp(jb->rec.id, "1") || !strcmp(jb->rec.id, "2"))
                continue;
            Dtrain__V1__JobRef ref = DTRAIN__V1__JOB_REF__INIT;
            ref.id = jb->rec.id;
            uint8_t buf[64];
            size_t n = dtrain__v1__job_ref__pack(&ref, buf);
            /* Removing frees jb: nothing of it is read afterwards. */
            call(pass == 0 ? DT_RPC_JOBS_CANCEL : DT_RPC_JOBS_REMOVE, buf, n);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t k = data[0] % NMETHODS;
    const uint8_t *req = data + 1;
    size_t len = size - 1;
    if (methods[k].desc == &dtrain__v1__start_job_request__descriptor && would_train(req, len))
        return 0;
    if (methods[k].desc == &dtrain__v1__comm_bench_request__descriptor && would_bench(req, len))
        return 0;
    if ((!strcmp(methods[k].method, DT_RPC_JOBS_RESUME) ||
         !strcmp(methods[k].method, DT_RPC_JOBS_REMOVE)) &&
        touches_kept_job(req, len))
        return 0;
    call(methods[k].method, req, len);
    reset();
    return 0;
}
