/* test_gpu_sync.c - one host synchronisation per training step on a device backend.
 *
 * The loss sum, the regularisation, the accuracy hits and the layers' bad-id reports stay in the
 * model's device step block until the step's end, clipping decides on the device, and the
 * step's end downloads everything behind one sync. On the host emulator of the CUDA backend
 * (build/libdtrain-cudaemu.so, which counts every call a GPU would block the host in:
 * emu_blocking_syncs) each step after the first must cost exactly one, and its figures must be
 * the CPU's. Skips (exit 7) where no GPU is visible; on a real GPU only the figures are
 * compared. test/integration/gpu_emu_sync.sh runs it on the emulator. */
#include "dt_test.h"
#include "nn/optim.h"
#include "test_gpu_util.h"
#include "test_nn_util.h"
#include "test_train_util.h"
#include "train/train.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#define STEPS 4

/* The emulator's count of host-blocking calls, or NULL on a real GPU. */
static long (*blocking(void))(void)
{
    const char *lib = getenv("DTRAIN_CUDA_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    return h ? (long (*)(void))dlsym(h, "emu_blocking_syncs") : NULL;
}

static dt_model *build_on(const char *json, const dt_nn_ops *ops)
{
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts o = {.seed = 5, .ops = ops};
    ASSERT_OK(dt_model_from_json(json, strlen(json), &o, &m, &err), &err);
    return m;
}

typedef struct sync_case {
    const char *name, *json;
    dt_loss loss;
    float clipnorm, global_clipnorm;
    bool ids;     /* integer inputs in [0, 9) with zeros (Embedding) */
    bool weights; /* per-row sample weights (class_weight's) */
} sync_case;

/* Trains STEPS steps of c on the GPU and the CPU (begin, clipped update, end: the order fit
 * uses for one replica) and checks the figures and the syncs per step. */
static void run_case(const dt_nn_ops *g, const sync_case *c)
{
    long (*count)(void) = blocking();
    dt_model *mg = build_on(c->json, g), *mc = build_on(c->json, dt_nn_ops_cpu());
    dt_optim_cfg cfg;
    dt_optim_defaults(DT_OPTIM_SGD, &cfg);
    cfg.momentum = 0.9f;
    cfg.clipnorm = c->clipnorm;
    cfg.global_clipnorm = c->global_clipnorm;
    dt_optim *og, *oc;
    dt_err err = {0};
    ASSERT_OK(dt_optim_new(&cfg, mg, &og, &err), &err);
    ASSERT_OK(dt_optim_new(&cfg, mc, &oc, &err), &err);
    int n = 12;
    nn_data d = nn_random(mc, n, c->loss.kind, 11);
    size_t in = dt_model_input_size(mc);
    if (c->ids)
        for (size_t i = 0; i < in * (size_t)n; i++)
            d.x[i] = (float)(i % 7 == 3 ? 0 : (i * 5) % 9);
    if (c->loss.has_ignore_class)
        d.labels[1] = d.labels[4] = c->loss.ignore_class;
    float sw[12];
    for (int i = 0; i < n; i++)
        sw[i] = 0.5f + 0.25f * (float)(i % 3);
    dt_model_batch b = nn_batch(&d, c->loss.kind);
    if (c->weights)
        b.sample_weight = sw;
    for (int s = 0; s < STEPS; s++) {
        long before = count ? count() : 0;
        dt_step_stats sg, sc;
        ASSERT_OK(dt_model_train_begin(mg, &c->loss, &b, n, &err), &err);
        ASSERT_OK(dt_optim_step(og, &err), &err);
        ASSERT_OK(dt_model_train_end(mg, &sg, &err), &err);
        long syncs = count ? count() - before : 1;
        ASSERT_OK(dt_model_train_step(mc, &c->loss, &b, n, &sc, &err), &err);
        ASSERT_OK(dt_optim_step(oc, &err), &err);
        printf("%s step %d: %ld host syncs, loss %.9g (CPU %.9g), accuracy %.6g (CPU %.6g)\n",
               c->name, s + 1, syncs, sg.loss, sc.loss, sg.accuracy, sc.accuracy);
        if (s > 0)
            ASSERT_EQ(syncs, 1);
        ASSERT_NEAR(sg.loss, sc.loss, 1e-4 * fabs(sc.loss) + 1e-6);
        ASSERT_NEAR(sg.accuracy, sc.accuracy, 1e-9);
    }
    size_t np;
    float *pg = nn_params_host(mg, &np), *pc = nn_params_host(mc, &np);
    double e = gpu_rel_l2(pg, pc, np);
    printf("%s: weights after %d steps, relative L2 %.3g\n", c->name, STEPS, e);
    ASSERT_FLE(e, 1e-4);
    free(pg);
    free(pc);
    nn_data_free(&d);
    dt_optim_free(og);
    dt_optim_free(oc);
    dt_model_free(mg);
    dt_model_free(mc);
}

#define L(cls, cfg) "{\"class_name\": \"" cls "\", \"config\": {" cfg "}}"

DT_TEST_TIMEOUT(gpu_sync_one_per_step, 120)
{
    const dt_nn_ops *g = gpu_ops();
    const dt_loss sce = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    const dt_loss sce_ignore = {.kind = DT_NN_LOSS_SPARSE_CE,
                                .from_logits = true,
                                .has_ignore_class = true,
                                .ignore_class = 2};
    const dt_loss bce = {.kind = DT_NN_LOSS_BCE};
    char cnn[4096], rnn[2048], reg[2048];
    snprintf(cnn, sizeof cnn, "%s",
             nn_seq("8, 8, 1", L("Conv2D", "\"filters\": 4, \"kernel_size\": [3, 3]"),
                    L("BatchNormalization", ""), L("Activation", "\"activation\": \"relu\""),
                    L("MaxPooling2D", "\"pool_size\": [2, 2]"), L("Flatten", ""),
                    L("Dropout", "\"rate\": 0.25"), L("Dense", "\"units\": 3"), NULL));
    snprintf(rnn, sizeof rnn, "%s",
             nn_seq("5", L("Embedding", "\"input_dim\": 9, \"output_dim\": 4, \"mask_zero\": true"),
                    L("LSTM", "\"units\": 6"), L("Dense", "\"units\": 3"), NULL));
    snprintf(reg, sizeof reg, "%s",
             nn_seq("6",
                    L("Dense", "\"units\": 5, \"activation\": \"tanh\", \"kernel_regularizer\": "
                               "{\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.01, \"l2\": "
                               "0.02}}, \"bias_regularizer\": \"l2\""),
                    L("Dense", "\"units\": 1, \"activation\": \"sigmoid\", "
                               "\"kernel_regularizer\": \"l2\""),
                    NULL));
    const sync_case cases[] = {
        {.name = "cnn+bn+dropout", .json = cnn, .loss = sce},
        {.name = "cnn clipnorm", .json = cnn, .loss = sce, .clipnorm = 0.05f},
        {.name = "cnn global_clipnorm", .json = cnn, .loss = sce, .global_clipnorm = 0.05f},
        {.name = "embedding+lstm", .json = rnn, .loss = sce, .ids = true},
        {.name = "l1l2 regularizers", .json = reg, .loss = bce, .weights = true},
        {.name = "ignore_class", .json = rnn, .loss = sce_ignore, .ids = true, .weights = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_case(g, &cases[i]);
}

/* A bad id is still the step's error with the layer's message, now taken after the sync. */
DT_TEST(gpu_sync_bad_id_after_the_sync)
{
    const dt_nn_ops *g = gpu_ops();
    const char *json = nn_seq("5", L("Embedding", "\"input_dim\": 9, \"output_dim\": 4"),
                              L("Flatten", ""), L("Dense", "\"units\": 3"), NULL);
    dt_model *m = build_on(json, g);
    float x[2 * 5] = {1, 2, 3, 4, 5, 6, 7, 42, 1, 2};
    int32_t y[2] = {0, 1};
    dt_model_batch b = {.x = x, .labels = y, .n = 2};
    dt_loss l = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
    dt_step_stats s;
    dt_err err = {0};
    ASSERT_EQ(dt_model_train_step(m, &l, &b, 2, &s, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "input id 42 (sample 1 of the batch, position 2)");
    dt_model_free(m);
}

/* Through fit (lib/train) with one replica: the CNN with BatchNormalization and Dropout under
 * clipnorm and class_weight, compiled metrics (AUC and Precision read the predictions on the
 * host, which ride the step's sync) and validation: run_step adds no sync of its own, one per
 * step; the losses and metrics equal a CPU fit's. */
typedef struct fit_log {
    long (*count)(void);
    long marks[64];
    double losses[64];
    int n;
} fit_log;

static void on_step(void *ctx, const dt_train_step_info *si)
{
    fit_log *f = ctx;
    if (f->n < 64) {
        f->marks[f->n] = f->count ? f->count() : 0;
        f->losses[f->n++] = si->batch_loss;
    }
}

static void fit_once(const dt_jobspec *spec, const dt_nn_ops *ops, fit_log *f, dt_train_result *r)
{
    dt_train_opts o = dt_train_opts_default();
    o.ops = ops;
    o.progress = (dt_train_progress){.ctx = f, .step_end = on_step};
    dt_trainer *t = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(spec, &o, &t, &err), &err);
    dt_train_comm c = {.rank = 0, .world = 1};
    ASSERT_OK(dt_train_fit(t, &c, r, &err), &err);
    dt_train_free(t);
}

DT_TEST_TIMEOUT(gpu_sync_fit_one_replica, 120)
{
    gpu_ops();
    long (*count)(void) = blocking();
    if (!count)
        DT_SKIP("not the emulator: no count of host syncs");
    setenv("DTRAIN_OPS", "/gpu:0", 1); /* the trainer thread binds /gpu:0 */
    tt_setup(48, 16);
    const char *model =
        nn_seq("8, 8, 1", L("Conv2D", "\"filters\": 4, \"kernel_size\": [3, 3]"),
               L("BatchNormalization", ""), L("Activation", "\"activation\": \"relu\""),
               L("MaxPooling2D", "\"pool_size\": [2, 2]"), L("Flatten", ""),
               L("Dropout", "\"rate\": 0.3"), L("Dense", "\"units\": 4"), NULL);
    char text[20000];
    snprintf(text, sizeof text, "%s",
             tt_spec_model(model, 1, 8,
                           "{\"class_name\": \"SGD\", \"config\": {\"learning_rate\": 0.05, "
                           "\"clipnorm\": 0.5}}",
                           ""));
    /* AUC and Precision besides accuracy; class_weight in $.fit */
    const char *edits[][2] = {
        {"\"metrics\": [\"accuracy\"]", "\"metrics\": [\"accuracy\", \"AUC\", \"Precision\"]"},
        {"\"batch_size\": 8}", "\"batch_size\": 8, \"class_weight\": {\"0\": 1.5, \"3\": 0.5}}"},
    };
    for (size_t e = 0; e < 2; e++) {
        char *at = strstr(text, edits[e][0]);
        ASSERT_TRUE(at != NULL);
        char rest[20000];
        snprintf(rest, sizeof rest, "%s", at + strlen(edits[e][0]));
        snprintf(at, sizeof text - (size_t)(at - text), "%s%s", edits[e][1], rest);
    }
    dt_jobspec spec;
    tt_parse(text, &spec);
    fit_log fg = {.count = count}, fc = {0};
    dt_train_result rg, rc;
    fit_once(&spec, NULL, &fg, &rg);
    fit_once(&spec, dt_nn_ops_cpu(), &fc, &rc);
    printf("fit: %d steps, host syncs at their ends:", fg.n);
    for (int i = 0; i < fg.n; i++)
        printf(" %ld", fg.marks[i]);
    printf("\n");
    ASSERT_EQ(fg.n, 6);
    ASSERT_EQ(fc.n, 6);
    for (int i = 1; i < fg.n; i++)
        ASSERT_EQ(fg.marks[i] - fg.marks[i - 1], 1);
    for (int i = 0; i < fg.n; i++) {
        printf("step %d: loss %.9g (CPU %.9g)\n", i + 1, fg.losses[i], fc.losses[i]);
        ASSERT_NEAR(fg.losses[i], fc.losses[i], 1e-5 * fabs(fc.losses[i]));
    }
    printf("accuracy %.6g (CPU %.6g), val_loss %.9g (CPU %.9g)\n", rg.accuracy, rc.accuracy,
           rg.val_loss, rc.val_loss);
    ASSERT_NEAR(rg.accuracy, rc.accuracy, 1e-9);
    ASSERT_NEAR(rg.val_loss, rc.val_loss, 1e-5 * fabs(rc.val_loss));
    ASSERT_EQ(rg.nmetrics, rc.nmetrics);
    for (int i = 0; i < rg.nmetrics; i++) {
        printf("%s %.9g (CPU %.9g)\n", rg.metrics[i].name, rg.metrics[i].value,
               rc.metrics[i].value);
        ASSERT_NEAR(rg.metrics[i].value, rc.metrics[i].value, 1e-6);
    }
    dt_jobspec_destroy(&spec);
}

/* Two replicas through the ring in host memory (test_train_util.h's shared-memory comm): each
 * step downloads the step block, the moving statistics and the riding bucket behind one sync,
 * every bucket that goes on the wire by itself (the grads leave the device as backward finishes
 * them), and syncs once more after the update (its grads came back from the host). Here one
 * bucket of 70k floats travels alone: 3 blocking calls a replica and step. */
typedef struct sync_rep {
    tt_shm *s;
    tt_rank rk;
    const dt_jobspec *spec;
    long (*count)(void);
    long marks[64];
    int nmarks;
    dt_status st;
    dt_err err;
} sync_rep;

static void rep_step(void *ctx, const dt_train_step_info *si)
{
    (void)si;
    sync_rep *r = ctx;
    if (r->nmarks < 64)
        r->marks[r->nmarks++] = r->count();
}

static void *rep_main(void *arg)
{
    sync_rep *r = arg;
    dt_train_opts o = dt_train_opts_default();
    o.rank = r->rk.rank;
    o.world = r->s->world;
    o.progress = (dt_train_progress){.ctx = r, .step_end = rep_step};
    dt_trainer *t = NULL;
    r->st = dt_train_new(r->spec, &o, &t, &r->err);
    if (r->st == DT_OK) {
        dt_train_comm c = {.ctx = &r->rk,
                           .rank = r->rk.rank,
                           .world = r->s->world,
                           .allreduce_start = tt_allreduce_start,
                           .wait = tt_wait,
                           .broadcast = tt_broadcast};
        dt_train_result res;
        r->st = dt_train_fit(t, &c, &res, &r->err);
    }
    if (r->st != DT_OK)
        tt_shm_abort(r->s);
    dt_train_free(t);
    return NULL;
}

DT_TEST_TIMEOUT(gpu_sync_fit_two_replicas_host_ring, 120)
{
    gpu_ops();
    const char *lib = getenv("DTRAIN_CUDA_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    long (*count)(void) = h ? (long (*)(void))dlsym(h, "emu_blocking_syncs_thread") : NULL;
    if (!count)
        DT_SKIP("not the emulator: no count of host syncs");
    setenv("DTRAIN_OPS", "/gpu:0", 1);
    tt_setup(64, 16);
    const char *model =
        nn_seq("8, 8, 1", L("Flatten", ""), L("Dense", "\"units\": 1100, \"activation\": \"relu\""),
               L("BatchNormalization", ""), L("Dense", "\"units\": 4"), NULL);
    char text[20000];
    snprintf(text, sizeof text, "%s", tt_spec_model(model, 1, 16, "\"sgd\"", ""));
    dt_jobspec spec;
    tt_parse(text, &spec);
    static tt_shm shm;
    tt_shm_init(&shm, 2);
    sync_rep reps[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        memset(&reps[i], 0, sizeof reps[i]);
        reps[i] =
            (sync_rep){.s = &shm, .rk = {.s = &shm, .rank = i}, .spec = &spec, .count = count};
        pthread_create(&th[i], NULL, rep_main, &reps[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(reps[i].st, &reps[i].err);
        printf("replica %d: %d steps, host syncs at their ends:", i, reps[i].nmarks);
        for (int k = 0; k < reps[i].nmarks; k++)
            printf(" %ld", reps[i].marks[k]);
        printf("\n");
        ASSERT_EQ(reps[i].nmarks, 4);
        for (int k = 1; k < reps[i].nmarks; k++)
            ASSERT_EQ(reps[i].marks[k] - reps[i].marks[k - 1], 3);
    }
    dt_jobspec_destroy(&spec);
}
