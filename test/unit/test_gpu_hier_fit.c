/* test_gpu_hier_fit.c - GPU replicas on several hosts (gpu_ring.c): each gradient bucket is
 * reduce-scattered among a host's GPUs by NCCL, each GPU's shard crosses to the other hosts
 * on the host ring of its local index (real gRPC rings on loopback, in-process daemons), and
 * NCCL all-gathers the shards; the step's tail, validation and broadcasts take the
 * hierarchical comm in host memory, as the trainer wires it.
 *
 * 2 hosts x 2 GPUs train two epochs with small buckets (several a step, none a multiple of 2
 * floats, so the shards are padded); the 4 replicas must end with the same bits, within 1e-5
 * of 4 CPU replicas through shared memory, with the same epoch losses. On the host emulator of
 * the CUDA backend (build/libdtrain-cudaemu.so, 2 devices: each host's clique on /gpu:0 and
 * /gpu:1); on a real machine with fewer than 2 GPUs it skips. */
#include "dt_test.h"
#include "nn/gpu.h"
#include "service/service_internal.h"
#include "test_comm_util.h"
#include "test_gpu_util.h"
#include "test_nn_util.h"
#include "test_train_util.h"

#include <math.h>
#include <pthread.h>

#define H       2
#define G       2
#define TIMEOUT 60000

static tc_node nodes[H];
static const char *addrs[H];
static const char *host_names[H] = {"worker:0", "worker:1"};

typedef struct grep_ {
    struct ghost *host;
    int member;
    dt__gpu_ring *gr;
    int buckets; /* all-reduces through gpu_ring */
    dt_comm_hier_req *pending[64];
    int npending;
    /* out */
    dt_train_result res;
    double losses[64];
    int n;
    float *w;
    size_t nw;
    dt_status st;
    dt_err err;
} grep_;

typedef struct ghost {
    int index;
    const dt_jobspec *spec;
    dt_comm_local *local;
    dt_comm_hier *hier;
    dt_nn_gpu_clique *cl;
    grep_ rep[G];
    dt_status st;
    dt_err err;
} ghost;

static void on_step(void *ctx, const dt_train_step_info *si)
{
    grep_ *r = ctx;
    if (r->n < 64)
        r->losses[r->n++] = si->batch_loss;
}

static dt_status c_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    grep_ *r = ctx;
    if (r->npending == 64)
        return dt_err_set(err, DT_ENOMEM, "too many all-reduces in flight");
    dt_comm_hier_req *q = NULL;
    DT_TRY(dt_comm_hier_allreduce_start(r->host->hier, r->member, buf, n, TIMEOUT, &q, err));
    r->pending[r->npending++] = q;
    *req = q;
    return DT_OK;
}

static dt_status c_bucket(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    grep_ *r = ctx;
    r->buckets++;
    return dt__gpu_ring_start(r->gr, buf, n, TIMEOUT, req, err);
}

static dt_status c_wait(void *ctx, void *req, dt_err *err)
{
    grep_ *r = ctx;
    if (dt__gpu_ring_owns(r->gr, req))
        return dt__gpu_ring_wait(r->gr, req, TIMEOUT, err);
    for (int i = 0; i < r->npending; i++)
        if (r->pending[i] == req) {
            r->pending[i] = r->pending[--r->npending];
            break;
        }
    return dt_comm_hier_wait(req, TIMEOUT, err);
}

static dt_status c_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    grep_ *r = ctx;
    return dt_comm_hier_broadcast(r->host->hier, r->member, buf, bytes, root, TIMEOUT, err);
}

static void *rep_main(void *arg)
{
    grep_ *r = arg;
    ghost *h = r->host;
    const dt_nn_ops *ops = NULL;
    dt_trainer *t = NULL;
    r->st = dt_nn_gpu_bind(r->member, false, &ops, &r->err);
    if (r->st == DT_OK)
        r->st = dt__gpu_ring_new(h->cl, r->member, G, dt_comm_hier_ring(h->hier, r->member), ops,
                                 &r->gr, &r->err);
    if (r->st == DT_OK) {
        dt_train_opts o = dt_train_opts_default();
        o.ops = ops;
        o.rank = h->index * G + r->member;
        o.world = H * G;
        o.progress = (dt_train_progress){.ctx = r, .step_end = on_step};
        r->st = dt_train_new(h->spec, &o, &t, &r->err);
    }
    if (r->st == DT_OK) {
        dt_train_comm c = {.ctx = r,
                           .rank = h->index * G + r->member,
                           .world = H * G,
                           .allreduce_start = c_start,
                           .wait = c_wait,
                           .broadcast = c_broadcast,
                           .bucket_start = c_bucket};
        r->st = dt_train_fit(t, &c, &r->res, &r->err);
    }
    if (r->st == DT_OK) {
        dt_model *m = dt_train_model(t);
        size_t np, ns;
        const float *p = dt_model_params(m, &np), *s = dt_model_state(m, &ns);
        r->nw = np + ns;
        r->w = malloc((r->nw + 1) * sizeof(float));
        ops->download(r->w, p, np * sizeof(float));
        ops->download(r->w + np, s, ns * sizeof(float));
    } else {
        dt_comm_hier_abort(h->hier, r->err.msg); /* the clique too (on_abort) */
    }
    dt_err e = {0};
    for (int i = 0; i < r->npending; i++)
        dt_comm_hier_wait(r->pending[i], 1000, &e);
    dt_train_free(t);
    dt__gpu_ring_free(r->gr);
    if (ops)
        dt_nn_gpu_unbind();
    return NULL;
}

static void clique_abort(void *arg)
{
    dt_nn_gpu_clique_abort(arg);
}

static void *host_main(void *arg)
{
    ghost *h = arg;
    char names[G][48];
    const char *np[G];
    for (int m = 0; m < G; m++) {
        snprintf(names[m], sizeof names[m], "%s /gpu:%d", host_names[h->index], m);
        np[m] = names[m];
    }
    int devs[G] = {0, 1};
    h->st = dt_comm_local_new(&(dt_comm_local_opts){.members = G, .names = np}, &h->local, &h->err);
    if (h->st == DT_OK) {
        dt_comm_hier_opts o = {.local = h->local,
                               .ring = {.rank = h->index,
                                        .world = H,
                                        .addresses = addrs,
                                        .names = host_names,
                                        .session = 0x6a1d,
                                        .hub = nodes[h->index].hub,
                                        .connect_timeout_ms = 10000}};
        h->st = dt_comm_hier_new(&o, &h->hier, &h->err);
    }
    if (h->st == DT_OK)
        h->st = dt_nn_gpu_clique_new(G, devs, &h->cl, &h->err);
    if (h->st == DT_OK) {
        dt_comm_hier_on_abort(h->hier, clique_abort, h->cl);
        pthread_t th[G];
        for (int m = 0; m < G; m++) {
            h->rep[m] = (grep_){.host = h, .member = m};
            pthread_create(&th[m], NULL, rep_main, &h->rep[m]);
        }
        for (int m = 0; m < G; m++)
            pthread_join(th[m], NULL);
    }
    dt_nn_gpu_clique_free(h->cl);
    dt_comm_hier_free(h->hier);
    dt_comm_local_free(h->local);
    return NULL;
}

#define L(cls, cfg) "{\"class_name\": \"" cls "\", \"config\": {" cfg "}}"

DT_TEST_TIMEOUT(gpu_hier_fit_two_hosts, 240)
{
    char why[512] = "";
    int ngpu = dt_nn_gpu_count(why, sizeof why);
    if (ngpu <= 0)
        DT_SKIP("no GPU: %s", why);
    if (ngpu < G)
        DT_SKIP("%d GPU: each host's clique needs %d (the emulator: DTRAIN_EMU_GPUS=%d)", ngpu, G,
                G);
    unsetenv("DTRAIN_OPS");
    tt_setup(52, 16);
    /* 30 + 6 + 763 + 32 gradients; buckets of 26 and 52 floats at least, never split in a
     * layer: the Dense layers' 32 and 763 go on the wire by themselves (763: padded to two
     * shards), the first layers' 36 ride with the step's metrics */
    const char *model =
        nn_seq("8, 8, 1", L("Conv2D", "\"filters\": 3, \"kernel_size\": [3, 3]"),
               L("BatchNormalization", ""), L("Activation", "\"activation\": \"relu\""),
               L("Flatten", ""), L("Dense", "\"units\": 7"), L("Dense", "\"units\": 4"), NULL);
    char text[20000];
    snprintf(text, sizeof text, "%s",
             tt_spec_model(model, 2, 8,
                           "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.05, "
                           "\"momentum\": 0.9}}",
                           ", \"strategy\": {\"bucket_mb\": 0.0002, \"first_bucket_mb\": 0.0001}"));
    dt_jobspec spec;
    tt_parse(text, &spec);

    dt_train_opts o = dt_train_opts_default();
    o.ops = dt_nn_ops_cpu();
    tt_replica cpu[H * G];
    tt_run(&spec, H * G, &o, -1, 0, cpu);
    for (int i = 0; i < H * G; i++)
        ASSERT_OK(cpu[i].st, &cpu[i].err);

    tc_nodes_up(nodes, addrs, H, NULL);
    static ghost hosts[H];
    pthread_t th[H];
    for (int i = 0; i < H; i++) {
        memset(&hosts[i], 0, sizeof hosts[i]);
        hosts[i].index = i;
        hosts[i].spec = &spec;
        pthread_create(&th[i], NULL, host_main, &hosts[i]);
    }
    for (int i = 0; i < H; i++)
        pthread_join(th[i], NULL);
    tc_nodes_down(nodes, H);
    for (int i = 0; i < H; i++) {
        ASSERT_OK(hosts[i].st, &hosts[i].err);
        for (int m = 0; m < G; m++)
            ASSERT_OK(hosts[i].rep[m].st, &hosts[i].rep[m].err);
    }
    grep_ *r0 = &hosts[0].rep[0];
    size_t np = cpu[0].nparams;
    ASSERT_GE(r0->nw, np);
    for (int i = 0; i < H; i++)
        for (int m = 0; m < G; m++) {
            grep_ *r = &hosts[i].rep[m];
            ASSERT_EQ(r->nw, r0->nw);
            if (memcmp(r->w, r0->w, r0->nw * sizeof(float)) != 0)
                DT_FAIL_("host %d, GPU %d: weights differ from host 0, GPU 0", i, m);
        }
    printf("buckets through NCCL and the host rings: %d over %d steps\n", r0->buckets, r0->n);
    ASSERT_EQ(r0->buckets, 2 * r0->n);
    double e = gpu_rel_l2(r0->w, cpu[0].params, np);
    printf("2 hosts x 2 GPUs, %d steps: weights within %.3g (relative L2) of 4 CPU replicas\n",
           r0->n, e);
    ASSERT_FLE(e, 1e-5);
    ASSERT_EQ(r0->n, cpu[0].nlosses);
    for (int k = 0; k < r0->n; k++)
        ASSERT_NEAR(r0->losses[k], cpu[0].losses[k], 1e-5 * fabs(cpu[0].losses[k]) + 1e-7);
    printf("val_loss %.9g (CPU %.9g)\n", r0->res.val_loss, cpu[0].res.val_loss);
    ASSERT_NEAR(r0->res.val_loss, cpu[0].res.val_loss, 1e-5 * fabs(cpu[0].res.val_loss));
    for (int i = 0; i < H; i++)
        for (int m = 0; m < G; m++)
            free(hosts[i].rep[m].w);
    tt_free(cpu, H * G);
    dt_jobspec_destroy(&spec);
}
