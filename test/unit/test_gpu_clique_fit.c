/* test_gpu_clique_fit.c - several GPU replicas of one host (MirroredStrategy) with the whole
 * step on the device: the gradient buckets and BatchNormalization's moving statistics
 * all-reduced by the NCCL clique on each replica's stream, the update behind them, the step's
 * metrics through host memory. So the step costs one host synchronisation a replica and is
 * captured into a CUDA graph that each replica replays, its NCCL all-reduces inside.
 *
 * Two replicas train two epochs (full batches and a short last one, validation, AUC beside
 * accuracy, Dropout, Adam) on the CPU through the shared-memory comm, then on the GPU through
 * the clique, eagerly and with graphs: the graphed weights and moving statistics are the eager
 * ones bit for bit, the two replicas agree bit for bit, both are the CPU's within 1e-5, and on
 * the host emulator of the CUDA backend (build/libdtrain-cudaemu.so, whose NCCL lets two
 * members share /gpu:0) every step after an epoch's first costs one blocking call a replica.
 * Skips (exit 7) without a GPU, and on a real GPU with fewer than two. */
#include "dt_test.h"
#include "nn/gpu.h"
#include "test_gpu_util.h"
#include "test_nn_util.h"
#include "test_train_util.h"
#include "train/train.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#define L(cls, cfg) "{\"class_name\": \"" cls "\", \"config\": {" cfg "}}"
#define MAX_STEPS   64

typedef struct crep {
    tt_shm *s;
    tt_rank rk; /* the host path (the step's metrics) */
    dt_nn_gpu_clique *cl;
    int member, dev;
    const dt_jobspec *spec;
    bool no_graphs;
    long (*count)(void);
    /* out */
    long marks[MAX_STEPS];
    int epoch[MAX_STEPS];
    double losses[MAX_STEPS];
    int n;
    dt_train_result res;
    float *w; /* params then state, downloaded at the end */
    size_t nw;
    dt_status st;
    dt_err err;
} crep;

static void on_step(void *ctx, const dt_train_step_info *si)
{
    crep *r = ctx;
    if (r->n < MAX_STEPS) {
        r->marks[r->n] = r->count ? r->count() : 0;
        r->epoch[r->n] = si->epoch;
        r->losses[r->n++] = si->batch_loss;
    }
}

static dt_status cl_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    crep *r = ctx;
    DT_TRY(dt_nn_gpu_clique_allreduce(r->cl, r->member, buf, n, err));
    *req = r;
    return DT_OK;
}

static dt_status cl_wait(void *ctx, void *req, dt_err *err)
{
    (void)req;
    crep *r = ctx;
    return dt_nn_gpu_clique_join(r->cl, r->member, err);
}

static dt_status cl_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    crep *r = ctx;
    return dt_nn_gpu_clique_broadcast(r->cl, r->member, buf, bytes, root, err);
}

static dt_status cl_host(void *ctx, float *buf, size_t n, dt_err *err)
{
    crep *r = ctx;
    void *req = NULL;
    DT_TRY(tt_allreduce_start(&r->rk, buf, n, &req, err));
    return tt_wait(&r->rk, req, err);
}

/* The params and the state of t's model, on the host. */
static void take_weights(crep *r, dt_trainer *t)
{
    dt_model *m = dt_train_model(t);
    size_t np, ns;
    const float *p = dt_model_params(m, &np), *s = dt_model_state(m, &ns);
    r->nw = np + ns;
    r->w = malloc((r->nw + 1) * sizeof(float));
    dt_model_ops(m)->download(r->w, p, np * sizeof(float));
    dt_model_ops(m)->download(r->w + np, s, ns * sizeof(float));
}

static void *rep_main(void *arg)
{
    crep *r = arg;
    const dt_nn_ops *ops = NULL;
    dt_trainer *t = NULL;
    r->st = dt_nn_gpu_bind(r->dev, false, &ops, &r->err);
    if (r->st == DT_OK) {
        dt_train_opts o = dt_train_opts_default();
        o.ops = ops;
        o.rank = r->member;
        o.world = r->s->world;
        o.no_graphs = r->no_graphs;
        o.progress = (dt_train_progress){.ctx = r, .step_end = on_step};
        r->st = dt_train_new(r->spec, &o, &t, &r->err);
    }
    if (r->st == DT_OK) {
        dt_train_comm c = {.ctx = r,
                           .rank = r->member,
                           .world = r->s->world,
                           .allreduce_start = cl_start,
                           .wait = cl_wait,
                           .broadcast = cl_broadcast,
                           .device_buffers = true,
                           .stream_ordered = true,
                           .allreduce_host = cl_host};
        r->st = dt_train_fit(t, &c, &r->res, &r->err);
        if (r->st == DT_OK)
            take_weights(r, t);
    }
    if (r->st != DT_OK) { /* the sibling must not wait for this one */
        tt_shm_abort(r->s);
        dt_nn_gpu_clique_abort(r->cl);
    }
    dt_train_free(t);
    if (ops)
        dt_nn_gpu_unbind();
    return NULL;
}

/* Two replicas on devs through a fresh clique. */
static void run_clique(const dt_jobspec *spec, const int *devs, bool no_graphs, long (*count)(void),
                       crep *reps)
{
    static tt_shm shm;
    tt_shm_init(&shm, 2);
    dt_nn_gpu_clique *cl = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_nn_gpu_clique_new(2, devs, &cl, &err), &err);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&reps[i], 0, sizeof reps[i]);
        reps[i] = (crep){.s = &shm,
                         .rk = {.s = &shm, .rank = i},
                         .cl = cl,
                         .member = i,
                         .dev = devs[i],
                         .spec = spec,
                         .no_graphs = no_graphs,
                         .count = count};
        pthread_create(&th[i], NULL, rep_main, &reps[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    dt_nn_gpu_clique_free(cl);
    for (int i = 0; i < 2; i++)
        ASSERT_OK(reps[i].st, &reps[i].err);
}

/* One blocking call a step, but across an epoch's end (validation, the epoch's logs). */
static void check_syncs(const crep *r, const char *what)
{
    printf("%s, replica %d: host syncs at the steps' ends:", what, r->member);
    for (int k = 0; k < r->n; k++)
        printf(" %ld", r->marks[k]);
    printf("\n");
    for (int k = 1; k < r->n; k++)
        if (r->epoch[k] == r->epoch[k - 1])
            ASSERT_EQ(r->marks[k] - r->marks[k - 1], 1);
}

DT_TEST_TIMEOUT(gpu_clique_fit_graphs, 240)
{
    char why[512] = "";
    int ngpu = dt_nn_gpu_count(why, sizeof why);
    if (ngpu <= 0)
        DT_SKIP("no GPU: %s", why);
    const char *lib = getenv("DTRAIN_CUDA_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    long (*count)(void) = h ? (long (*)(void))dlsym(h, "emu_blocking_syncs_thread") : NULL;
    if (!count && ngpu < 2)
        DT_SKIP("one GPU: NCCL needs a device a member");
    int devs[2] = {0, ngpu > 1 ? 1 : 0};
    unsetenv("DTRAIN_OPS");
    tt_setup(52, 16);
    const char *model =
        nn_seq("8, 8, 1", L("Conv2D", "\"filters\": 4, \"kernel_size\": [3, 3]"),
               L("BatchNormalization", ""), L("Activation", "\"activation\": \"relu\""),
               L("MaxPooling2D", "\"pool_size\": [2, 2]"), L("Flatten", ""),
               L("Dropout", "\"rate\": 0.3"), L("Dense", "\"units\": 4"), NULL);
    char text[20000];
    /* Adam's epsilon large enough that a gradient of about 0 (its sign a rounding's) does not
     * move a weight by a whole learning rate: the GPU's and the CPU's rounding stay small */
    snprintf(text, sizeof text, "%s",
             tt_spec_model(model, 2, 8,
                           "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01, "
                           "\"epsilon\": 0.001}}",
                           ""));
    char *at = strstr(text, "\"metrics\": [\"accuracy\"]");
    ASSERT_TRUE(at != NULL);
    char rest[20000];
    snprintf(rest, sizeof rest, "%s", at + strlen("\"metrics\": [\"accuracy\"]"));
    snprintf(at, sizeof text - (size_t)(at - text), "\"metrics\": [\"accuracy\", \"AUC\"]%s", rest);
    dt_jobspec spec;
    tt_parse(text, &spec);

    /* the reference: two CPU replicas through host memory */
    dt_train_opts o = dt_train_opts_default();
    o.ops = dt_nn_ops_cpu();
    tt_replica cpu[2];
    tt_run(&spec, 2, &o, -1, 0, cpu);
    for (int i = 0; i < 2; i++)
        ASSERT_OK(cpu[i].st, &cpu[i].err);

    crep eager[2], graphed[2];
    run_clique(&spec, devs, true, count, eager);
    run_clique(&spec, devs, false, count, graphed);
    /* 52 examples, global batch 8: 6 full steps and a short one an epoch, two epochs */
    for (int i = 0; i < 2; i++) {
        const dt_train_result *e = &eager[i].res, *g = &graphed[i].res;
        printf("replica %d: eager %" PRId64 " steps (graphs off: %s); graphed run %" PRId64
               " eager, %" PRId64 " captured, %" PRId64 " replayed (%s)\n",
               i, e->steps_eager, e->graphs_off, g->steps_eager, g->graphs_captured,
               g->steps_graphed, g->graphs_off[0] ? g->graphs_off : "on");
        ASSERT_EQ(e->steps_eager, 14);
        ASSERT_EQ(e->steps_graphed, 0);
        ASSERT_EQ(g->graphs_off[0], '\0');
        ASSERT_EQ(g->graphs_captured, 1);
        ASSERT_EQ(g->steps_eager, 3); /* the first full step, and each epoch's short one */
        ASSERT_EQ(g->steps_graphed, 11);
        ASSERT_EQ(graphed[i].n, 14);
        if (count) {
            check_syncs(&eager[i], "eager");
            check_syncs(&graphed[i], "graphed");
        }
    }
    size_t np = cpu[0].nparams;
    ASSERT_EQ(graphed[0].nw, eager[0].nw);
    ASSERT_GE(graphed[0].nw, np);
    /* replicas agree, graphs change no bit */
    ASSERT_EQ(memcmp(graphed[0].w, graphed[1].w, graphed[0].nw * sizeof(float)), 0);
    ASSERT_EQ(memcmp(eager[0].w, eager[1].w, eager[0].nw * sizeof(float)), 0);
    ASSERT_EQ(memcmp(graphed[0].w, eager[0].w, eager[0].nw * sizeof(float)), 0);
    ASSERT_EQ(memcmp(cpu[0].params, cpu[1].params, np * sizeof(float)), 0);
    double e = gpu_rel_l2(graphed[0].w, cpu[0].params, np);
    printf("weights after 2 epochs: relative L2 %.3g from the CPU's two replicas\n", e);
    ASSERT_FLE(e, 1e-5);
    for (int k = 0; k < 14; k++)
        printf("step %d: loss %.9g (CPU %.9g)\n", k + 1, graphed[0].losses[k], cpu[0].losses[k]);
    for (int k = 0; k < 14; k++) {
        double c = cpu[0].losses[k], gl = graphed[0].losses[k];
        ASSERT_NEAR(gl, c, 1e-5 * fabs(c) + 1e-7);
        ASSERT_TRUE(gl == graphed[1].losses[k]);
    }
    const dt_train_result *gr = &graphed[0].res, *cr = &cpu[0].res;
    printf("val_loss %.9g (CPU %.9g)\n", gr->val_loss, cr->val_loss);
    ASSERT_NEAR(gr->val_loss, cr->val_loss, 1e-5 * fabs(cr->val_loss));
    ASSERT_EQ(gr->nmetrics, 1);
    ASSERT_EQ(cr->nmetrics, 1);
    printf("%s %.9g (CPU %.9g)\n", gr->metrics[0].name, gr->metrics[0].value, cr->metrics[0].value);
    ASSERT_NEAR(gr->metrics[0].value, cr->metrics[0].value, 1e-6);
    for (int i = 0; i < 2; i++) {
        free(eager[i].w);
        free(graphed[i].w);
    }
    tt_free(cpu, 2);
    dt_jobspec_destroy(&spec);
}
