/* test_gpu_graph.c - CUDA graphs of the device backend (ops->graph_begin/end/launch/free), on a
 * GPU or on the host emulator (gpu_emu runs them there; they skip where neither is found).
 * - A captured sequence (a GEMM, element-wise kernels, a device-to-device copy, a memset) runs
 *   nothing while it is recorded, and each launch replays it with the scalars it was recorded
 *   with, on the buffers' current contents: two launches equal the same ops run twice on the
 *   CPU table, bit for bit.
 * - What CUDA refuses inside a capture fails it, with a message naming the call: an allocation,
 *   a download (a synchronisation), an upload from pageable memory, sync; the thread works
 *   normally afterwards. Another thread may allocate while one captures (thread-local mode).
 * - NCCL: two members' graphs each hold an all-reduce, and their replays meet.
 * - fit (lib/train/graph.c): a one-replica fit on the device captures its step after the first
 *   and replays it; the weights equal those of the same fit with graphs off bit for bit and
 *   the CPU's within 1e-4 (relative L2): the BatchNormalization + Dropout CNN under Adam with
 *   an ExponentialDecay schedule, and an LSTM with dropout under Nadam; the short last batch
 *   runs eagerly; DTRAIN_GRAPHS=0 runs all eagerly with the same bits; a second batch size gets
 *   a graph of its own (and replayed steps report their own loss, ignore_class's count
 *   included); a step that cannot be captured turns graphs off and runs eagerly, same bits. */
#include "nn/optim.h"
#include "test_gpu_util.h"
#include "test_nn_util.h"
#include "test_train_util.h"
#include "train/train_internal.h"

#include <pthread.h>
#include <stdio.h>

/* y = 0.5 x + 2 y; z = x y (elementwise); c = z^T-shaped GEMM: c (m, m) = y_mat y_mat^T */
#define N 96
#define M 8 /* N = M * 12 */

static void seq_ops(const dt_nn_ops *o, float *x, float *y, float *z, float *c)
{
    o->axpby(N, 0.5f, x, 2.0f, y);
    o->mul(N, x, y, z, false);
    o->gemm(false, true, M, M, N / M, 1.0f, z, N / M, y, N / M, 0.0f, c, M);
    o->copy(N, z, x, true); /* x += z */
}

DT_TEST(gpu_graph_replays_what_it_recorded)
{
    const dt_nn_ops *g = gpu_ops();
    ASSERT_TRUE(g->graph_begin && g->graph_end && g->graph_launch && g->graph_free);
    const dt_nn_ops *cpu = dt_nn_ops_cpu();
    ASSERT_TRUE(cpu->graph_begin == NULL && dt_nn_ops_guard()->graph_begin == NULL);
    float *hx = gpu_randn(N, 1.0f, 1), *hy = gpu_randn(N, 1.0f, 2);
    float hz[N], hc[M * M];
    float *x = gpu_up(g, hx, N), *y = gpu_up(g, hy, N), *z = gpu_poison(g, N),
          *c = gpu_poison(g, M * M);
    char msg[512] = "";
    ASSERT_EQ(g->graph_begin(msg, sizeof msg), 0);
    seq_ops(g, x, y, z, c);
    void *graph = NULL;
    int rc = g->graph_end(&graph, msg, sizeof msg);
    if (rc != 0)
        fprintf(stderr, "graph_end: %s\n", msg);
    ASSERT_EQ(rc, 0);
    ASSERT_TRUE(graph != NULL);
    /* recorded, not run: x and y as uploaded, z still NaN */
    gpu_same_bits(g, x, hx, N, "x after the capture");
    gpu_same_bits(g, y, hy, N, "y after the capture");
    float *hz0 = gpu_down(g, z, N);
    GPU_SYNC();
    ASSERT_TRUE(isnan(hz0[0]) && isnan(hz0[N - 1]));
    free(hz0);
    /* two launches = the sequence twice on the CPU, on the buffers' contents of each launch */
    float cx[N], cy[N];
    memcpy(cx, hx, sizeof cx);
    memcpy(cy, hy, sizeof cy);
    ASSERT_EQ(g->graph_launch(graph, msg, sizeof msg), 0);
    seq_ops(cpu, cx, cy, hz, hc);
    float seven = 7.0f; /* a change between launches is seen by the second one */
    g->upload(x + 3, &seven, sizeof seven);
    cx[3] = seven;
    ASSERT_EQ(g->graph_launch(graph, msg, sizeof msg), 0);
    seq_ops(cpu, cx, cy, hz, hc);
    GPU_SYNC();
    gpu_same_bits(g, x, cx, N, "x after two launches");
    gpu_same_bits(g, y, cy, N, "y after two launches");
    gpu_same_bits(g, z, hz, N, "z after two launches");
    gpu_same_bits(g, c, hc, M * M, "c after two launches");
    g->graph_free(graph);
    free(hx);
    free(hy);
    g->free(x);
    g->free(y);
    g->free(z);
    g->free(c);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* Begins a capture, runs what, and expects graph_end to fail naming want. */
static void refused(const dt_nn_ops *g, void (*what)(const dt_nn_ops *g, float *d), float *d,
                    const char *want)
{
    char msg[512] = "";
    ASSERT_EQ(g->graph_begin(msg, sizeof msg), 0);
    what(g, d);
    void *graph = NULL;
    ASSERT_EQ(g->graph_end(&graph, msg, sizeof msg), -1);
    ASSERT_TRUE(graph == NULL);
    fprintf(stderr, "refused as it should be: %s\n", msg);
    ASSERT_CONTAINS(msg, want);
    /* the thread is itself again: kernels run, sync is clean */
    g->fill(4, 3.0f, d);
    float h[4];
    g->download(h, d, sizeof h);
    GPU_SYNC();
    ASSERT_FEQ(h[3], 3.0f);
}

static void do_alloc(const dt_nn_ops *g, float *d)
{
    (void)d;
    void *p = g->alloc(64);
    ASSERT_TRUE(p == NULL); /* cudaMalloc is refused while the thread captures */
}

static void do_download(const dt_nn_ops *g, float *d)
{
    float h[4];
    g->download(h, d, sizeof h);
}

static void do_upload_pageable(const dt_nn_ops *g, float *d)
{
    float h[4] = {1, 2, 3, 4};
    g->upload(d, h, sizeof h);
}

static void do_sync(const dt_nn_ops *g, float *d)
{
    g->fill(4, 1.0f, d);
    char msg[256] = "";
    ASSERT_EQ(g->sync(msg, sizeof msg), -1);
    fprintf(stderr, "sync inside the capture: %s\n", msg);
    ASSERT_CONTAINS(msg, "capturing");
}

DT_TEST(gpu_graph_capture_refuses_alloc_and_sync)
{
    const dt_nn_ops *g = gpu_ops();
    float *d = g->alloc(4 * sizeof(float));
    ASSERT_TRUE(d != NULL);
    refused(g, do_alloc, d, "cudaMalloc");
    refused(g, do_download, d, "capturing");
    refused(g, do_upload_pageable, d, "capturing");
    refused(g, do_sync, d, "");
    /* ending a capture that was never begun, and beginning one twice */
    char msg[256] = "";
    void *graph = NULL;
    ASSERT_EQ(g->graph_end(&graph, msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "cudaStreamEndCapture");
    ASSERT_EQ(g->graph_begin(msg, sizeof msg), 0);
    ASSERT_EQ(g->graph_begin(msg, sizeof msg), -1);
    ASSERT_CONTAINS(msg, "cudaStreamBeginCapture");
    ASSERT_EQ(g->graph_end(&graph, msg, sizeof msg), 0); /* an empty graph is a graph */
    ASSERT_EQ(g->graph_launch(graph, msg, sizeof msg), 0);
    g->graph_free(graph);
    g->free(d);
    GPU_SYNC();
    dt_nn_gpu_unbind();
}

/* --- another replica's thread while this one captures ---------------------------------------- */

typedef struct other_arg {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage; /* 1: main captures; 2: the other thread allocated and synced */
    bool ok;
    char msg[1200];
} other_arg;

static void *other_thread(void *p)
{
    other_arg *a = p;
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    pthread_mutex_lock(&a->mu);
    while (a->stage < 1)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    bool ok = dt_nn_gpu_bind(0, false, &g, &err) == DT_OK;
    float *d = ok ? g->alloc(256) : NULL;
    ok = ok && d != NULL;
    if (ok) {
        g->fill(64, 1.0f, d);
        ok = g->sync(a->msg, sizeof a->msg) == 0;
        g->free(d);
        ok = ok && g->sync(a->msg, sizeof a->msg) == 0;
    } else {
        snprintf(a->msg, sizeof a->msg, "bind or alloc failed: %s", err.msg);
    }
    dt_nn_gpu_unbind();
    pthread_mutex_lock(&a->mu);
    a->ok = ok;
    a->stage = 2;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

DT_TEST(gpu_graph_other_threads_allocate_during_a_capture)
{
    const dt_nn_ops *g = gpu_ops();
    float *d = g->alloc(64 * sizeof(float));
    other_arg a = {.stage = 0};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, other_thread, &a), 0);
    char msg[512] = "";
    ASSERT_EQ(g->graph_begin(msg, sizeof msg), 0);
    g->fill(64, 2.0f, d);
    pthread_mutex_lock(&a.mu);
    a.stage = 1;
    pthread_cond_signal(&a.cv);
    while (a.stage < 2)
        pthread_cond_wait(&a.cv, &a.mu);
    pthread_mutex_unlock(&a.mu);
    ASSERT_EQ(pthread_join(t, NULL), 0);
    if (!a.ok)
        fprintf(stderr, "the other thread: %s\n", a.msg);
    ASSERT_TRUE(a.ok);
    void *graph = NULL;
    ASSERT_EQ(g->graph_end(&graph, msg, sizeof msg), 0);
    ASSERT_EQ(g->graph_launch(graph, msg, sizeof msg), 0);
    float h[64];
    g->download(h, d, sizeof h);
    GPU_SYNC();
    ASSERT_FEQ(h[63], 2.0f);
    g->graph_free(graph);
    g->free(d);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
    dt_nn_gpu_unbind();
}

/* --- NCCL in a graph ----------------------------------------------------------------------------
 */

#define NC 1000

typedef struct member_arg {
    dt_nn_gpu_clique *c;
    int m, dev;
    float got[NC], before[NC];
    char msg[1200];
    bool ok;
    bool emu;           /* on the emulator: first a capture that never joins */
    char unjoined[512]; /* what ending that capture said */
} member_arg;

/* Member m: its buffer is (m + 1) x; it captures all-reduce + y *= 0.25, then replays it twice. */
static void *member(void *p)
{
    member_arg *a = p;
    const dt_nn_ops *g = NULL;
    dt_err err = {0};
    a->ok = false;
    if (dt_nn_gpu_bind(a->dev, false, &g, &err) != DT_OK) {
        snprintf(a->msg, sizeof a->msg, "bind: %s", err.msg);
        return NULL;
    }
    float *h = gpu_randn(NC, 1.0f, 9);
    for (int i = 0; i < NC; i++)
        h[i] *= (float)(a->m + 1);
    float *d = g->alloc(NC * sizeof(float)), *q = g->alloc(NC * sizeof(float));
    g->upload(d, h, NC * sizeof(float));
    g->fill(NC, 0.25f, q);
    char msg[512] = "";
    void *graph = NULL;
    if (a->emu && g->graph_begin(msg, sizeof msg) == 0) {
        /* the side stream's all-reduce left unjoined: CUDA refuses to end the capture (a
         * split graph), and so must the emulator, or a missing join would pass in CI */
        if (dt_nn_gpu_clique_allreduce(a->c, a->m, d, NC, &err) == DT_OK &&
            g->graph_end(&graph, a->unjoined, sizeof a->unjoined) == 0) {
            snprintf(a->unjoined, sizeof a->unjoined, "the unjoined capture ended");
            g->graph_free(graph);
        }
        graph = NULL;
    }
    bool ok = g->graph_begin(msg, sizeof msg) == 0;
    ok = ok && dt_nn_gpu_clique_allreduce(a->c, a->m, d, NC, &err) == DT_OK;
    /* the all-reduce ran on the member's side stream (a fork of the capture): the multiply
     * waits for it (the join), without which the capture cannot end */
    ok = ok && dt_nn_gpu_clique_join(a->c, a->m, &err) == DT_OK;
    if (ok)
        g->mul(NC, q, d, d, false);
    ok = ok && g->graph_end(&graph, msg, sizeof msg) == 0;
    if (ok) {
        g->download(a->before, d, NC * sizeof(float));
        ok = g->graph_launch(graph, msg, sizeof msg) == 0 &&
             g->graph_launch(graph, msg, sizeof msg) == 0;
    }
    if (ok) {
        g->download(a->got, d, NC * sizeof(float));
        ok = g->sync(msg, sizeof msg) == 0;
    }
    if (!ok)
        snprintf(a->msg, sizeof a->msg, "member %d: %.500s%.600s", a->m, msg, err.msg);
    g->graph_free(graph);
    g->free(d);
    g->free(q);
    free(h);
    dt_nn_gpu_unbind();
    a->ok = ok;
    return NULL;
}

DT_TEST(gpu_graph_records_nccl_all_reduce)
{
    const dt_nn_ops *g = gpu_ops();
    (void)g;
    dt_nn_gpu_unbind();
    char why[256] = "";
    int n = dt_nn_gpu_count(why, sizeof why);
    dt_nn_gpu_dev info;
    dt_err err = {0};
    ASSERT_OK(dt_nn_gpu_info(0, &info, &err), &err);
    /* two members: two GPUs, or the emulator's one (which takes two ranks on a device) */
    int devs[2] = {0, n >= 2 ? 1 : 0};
    if (n < 2 && !strstr(info.name, "emulator"))
        DT_SKIP("one GPU: the NCCL graph test needs two");
    dt_nn_gpu_clique *c = NULL;
    ASSERT_OK(dt_nn_gpu_clique_new(2, devs, &c, &err), &err);
    member_arg *a = calloc(2, sizeof *a);
    pthread_t t[2];
    for (int m = 0; m < 2; m++) {
        a[m] = (member_arg){.c = c, .m = m, .dev = devs[m], .emu = strstr(info.name, "emulator")};
        ASSERT_EQ(pthread_create(&t[m], NULL, member, &a[m]), 0);
    }
    for (int m = 0; m < 2; m++)
        ASSERT_EQ(pthread_join(t[m], NULL), 0);
    for (int m = 0; m < 2; m++) {
        if (!a[m].ok)
            fprintf(stderr, "%s\n", a[m].msg);
        ASSERT_TRUE(a[m].ok);
        if (a[m].emu) {
            printf("member %d, a capture without the join: %s\n", m, a[m].unjoined);
            ASSERT_CONTAINS(a[m].unjoined, "split graph");
        }
    }
    float *x = gpu_randn(NC, 1.0f, 9);
    for (int i = 0; i < NC; i++) {
        /* nothing ran during the capture */
        ASSERT_FEQ(a[0].before[i], x[i]);
        ASSERT_FEQ(a[1].before[i], 2.0f * x[i]);
        /* launch 1: 0.25 (x + 2x); launch 2: 0.25 (v + v) */
        float v = 0.25f * (x[i] + 2.0f * x[i]);
        float w = 0.25f * (v + v);
        ASSERT_FEQ(a[0].got[i], w);
        ASSERT_FEQ(a[1].got[i], w);
    }
    free(x);
    free(a);
    dt_nn_gpu_clique_free(c);
}

/* --- fit ----------------------------------------------------------------------------------------
 */

#define CNN_BN_DROP                                                                                \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"cnn\", \"layers\": ["               \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 1], "       \
    "\"name\": \"in\"}}, "                                                                         \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", \"filters\": 4, "               \
    "\"kernel_size\": [3, 3], \"use_bias\": false}}, "                                             \
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"}}, "                   \
    "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"relu\"}}, "                               \
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"pool\"}}, "                       \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}}, "                            \
    "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"drop\", \"rate\": 0.3}}, "             \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4}}]}}"
#define LSTM_DROP                                                                                  \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"rnn\", \"layers\": ["               \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 1], "       \
    "\"name\": \"in\"}}, "                                                                         \
    "{\"class_name\": \"Reshape\", \"config\": {\"name\": \"seq\", \"target_shape\": [8, 8]}}, "   \
    "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 8, \"dropout\": "      \
    "0.2}}, "                                                                                      \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4}}]}}"
#define ADAM_DECAY                                                                                 \
    "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": {\"class_name\": "                 \
    "\"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.01, \"decay_steps\": 5, "     \
    "\"decay_rate\": 0.5}}}}"
#define NADAM "{\"class_name\": \"Nadam\", \"config\": {\"learning_rate\": 0.005}}"

typedef struct fit_out {
    float *w; /* params + state */
    size_t n;
    dt_train_result r;
} fit_out;

/* One epoch of 20 full batches of 8 and a short one of 4 (164 examples) on ops. */
static fit_out one_fit(const char *model, const char *optim, const dt_nn_ops *ops, bool no_graphs)
{
    dt_jobspec spec;
    tt_parse(tt_spec_model(model, 1, 8, optim, ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    o.ops = ops;
    o.no_graphs = no_graphs;
    dt_trainer *t = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(&spec, &o, &t, &err), &err);
    dt_train_comm c = {.rank = 0, .world = 1};
    fit_out f;
    memset(&f, 0, sizeof f);
    ASSERT_OK(dt_train_fit(t, &c, &f.r, &err), &err);
    ASSERT_EQ(f.r.global_step, 21);
    dt_model *m = dt_train_model(t);
    size_t np, ns;
    dt_model_params(m, &np);
    dt_model_state(m, &ns);
    f.n = np + ns;
    f.w = malloc(sizeof(float) * (f.n + 1));
    dt_model_download_all(m, f.w);
    dt_train_free(t);
    dt_jobspec_destroy(&spec);
    return f;
}

/* graphs on (device) = graphs off (device), bit for bit; = the CPU within 1e-4 */
static void fit_three_ways(const char *model, const char *optim)
{
    const dt_nn_ops *g = gpu_ops();
    tt_setup(164, 16);
    fit_out on = one_fit(model, optim, g, false);
    fit_out off = one_fit(model, optim, g, true);
    fit_out cpu = one_fit(model, optim, dt_nn_ops_cpu(), false);
    printf("graphs on: %lld eager, %lld captured, %lld graphed (%s); off: %lld eager (%s); "
           "the CPU: %s\n",
           (long long)on.r.steps_eager, (long long)on.r.graphs_captured,
           (long long)on.r.steps_graphed, on.r.graphs_off, (long long)off.r.steps_eager,
           off.r.graphs_off, cpu.r.graphs_off);
    /* the first step eager, the second captured then launched with the rest, the short last
     * one eager */
    ASSERT_EQ(on.r.graphs_captured, 1);
    ASSERT_EQ(on.r.steps_graphed, 19);
    ASSERT_EQ(on.r.steps_eager, 2);
    ASSERT_STREQ(on.r.graphs_off, "");
    ASSERT_EQ(off.r.steps_eager, 21);
    ASSERT_EQ(off.r.steps_graphed, 0);
    ASSERT_CONTAINS(off.r.graphs_off, "no_graphs");
    ASSERT_CONTAINS(cpu.r.graphs_off, "runs each kernel when it is called");
    ASSERT_EQ(on.n, off.n);
    for (size_t i = 0; i < on.n; i++) {
        if (memcmp(&on.w[i], &off.w[i], sizeof(float)) != 0)
            fprintf(stderr, "weight %zu of %zu: %.9g graphed, %.9g eager\n", i, on.n,
                    (double)on.w[i], (double)off.w[i]);
        ASSERT_TRUE(memcmp(&on.w[i], &off.w[i], sizeof(float)) == 0);
    }
    ASSERT_TRUE(on.r.weights_hash == off.r.weights_hash);
    ASSERT_TRUE(on.r.loss == off.r.loss);
    double e = gpu_rel_l2(on.w, cpu.w, on.n);
    printf("graphed fit against the CPU: relative L2 %.3g over %zu values; loss %.9g vs %.9g\n", e,
           on.n, on.r.loss, cpu.r.loss);
    ASSERT_FLE(e, 1e-4);
    free(on.w);
    free(off.w);
    free(cpu.w);
    dt_nn_gpu_unbind();
}

DT_TEST_TIMEOUT(gpu_graph_fit_cnn_bn_dropout_adam_decay, 120)
{
    fit_three_ways(CNN_BN_DROP, ADAM_DECAY);
}

DT_TEST_TIMEOUT(gpu_graph_fit_lstm_dropout_nadam, 120)
{
    fit_three_ways(LSTM_DROP, NADAM);
}

DT_TEST_TIMEOUT(gpu_graph_fit_env_off, 120)
{
    const dt_nn_ops *g = gpu_ops();
    tt_setup(164, 16);
    fit_out on = one_fit(CNN_BN_DROP, ADAM_DECAY, g, false);
    setenv("DTRAIN_GRAPHS", "0", 1);
    fit_out env = one_fit(CNN_BN_DROP, ADAM_DECAY, g, false);
    unsetenv("DTRAIN_GRAPHS");
    ASSERT_EQ(env.r.steps_eager, 21);
    ASSERT_EQ(env.r.graphs_captured, 0);
    ASSERT_CONTAINS(env.r.graphs_off, "DTRAIN_GRAPHS=0");
    ASSERT_EQ(on.r.graphs_captured, 1);
    ASSERT_TRUE(memcmp(on.w, env.w, on.n * sizeof(float)) == 0);
    free(on.w);
    free(env.w);
    dt_nn_gpu_unbind();
}

/* Batch sizes 8, 8, 8, 4, 4, 4, 8 through graph.c: each size's first step eager, its second
 * captured, later ones replayed (the 4s do not reallocate: 8's buffers hold them); the same bits
 * as the sequence with graphs off. */
static dt_model *build_on(const dt_nn_ops *g, const char *json)
{
    dt_err err = {0};
    dt_model *m = NULL;
    dt_model_opts mo = {.seed = 3, .ops = g};
    ASSERT_OK(dt_model_from_json(json, strlen(json), &mo, &m, &err), &err);
    return m;
}

static float *sizes_run(const dt_nn_ops *g, bool on, dt__train_graphs *gs, double *losses)
{
    dt_model *m = build_on(g, CNN_BN_DROP);
    dt_err err = {0};
    dt_optim_cfg cfg;
    cJSON *j = cJSON_Parse(ADAM_DECAY);
    ASSERT_OK(dt_optim_cfg_from_json(j, &cfg, &err), &err);
    cJSON_Delete(j);
    dt_optim *o = NULL;
    ASSERT_OK(dt_optim_new(&cfg, m, &o, &err), &err);
    /* ignore_class: each step's mean divides by its own count of rows left */
    dt_loss loss = {.kind = DT_NN_LOSS_SPARSE_CE,
                    .from_logits = true,
                    .has_ignore_class = true,
                    .ignore_class = 1};
    dt__train_graphs_init(gs, m, on ? NULL : "off");
    static const int sizes[] = {8, 8, 8, 4, 4, 4, 8};
    for (int s = 0; s < 7; s++) {
        nn_data d = nn_random(m, sizes[s], loss.kind, 50 + (uint64_t)s);
        dt_model_batch b = nn_batch(&d, loss.kind);
        ASSERT_OK(dt__train_graph_step(gs, m, o, &loss, &b, 16, true, NULL, &err), &err);
        dt_step_stats st;
        ASSERT_OK(dt_model_train_end(m, &st, &err), &err);
        losses[s] = st.loss;
        nn_data_free(&d);
    }
    size_t np, ns;
    dt_model_params(m, &np);
    dt_model_state(m, &ns);
    float *w = malloc(sizeof(float) * (np + ns));
    dt_model_download_all(m, w);
    ASSERT_EQ(dt_optim_iterations(o), 7);
    dt__train_graphs_free(gs, m);
    dt_optim_free(o);
    dt_model_free(m);
    return w;
}

DT_TEST_TIMEOUT(gpu_graph_second_batch_size_second_graph, 120)
{
    const dt_nn_ops *g = gpu_ops();
    dt__train_graphs on, off;
    double la[7], lb[7];
    float *a = sizes_run(g, true, &on, la);
    float *b = sizes_run(g, false, &off, lb);
    for (int s = 0; s < 7; s++) {
        if (la[s] != lb[s])
            fprintf(stderr, "step %d: loss %.17g graphed, %.17g eager\n", s, la[s], lb[s]);
        ASSERT_TRUE(memcmp(&la[s], &lb[s], sizeof la[s]) == 0);
    }
    printf("sizes 8 8 8 4 4 4 8: %lld eager, %lld captured, %lld graphed\n", (long long)on.eager,
           (long long)on.captured, (long long)on.replayed);
    ASSERT_EQ(on.eager, 2);
    ASSERT_EQ(on.captured, 2);
    ASSERT_EQ(on.replayed, 5);
    ASSERT_EQ(off.eager, 7);
    dt_model *m = build_on(g, CNN_BN_DROP);
    size_t np, ns;
    dt_model_params(m, &np);
    dt_model_state(m, &ns);
    dt_model_free(m);
    ASSERT_TRUE(memcmp(a, b, (np + ns) * sizeof(float)) == 0);
    free(a);
    free(b);
    dt_nn_gpu_unbind();
}

/* A step that cannot be captured (a Normalization with config constants uploads them from
 * host memory in every forward): the capture fails, graphs go off saying why, and the step runs
 * eagerly from its fed state: the same bits as a fit without graphs. */
#define NORM_MODEL                                                                                 \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"nm\", \"layers\": ["                \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 1], "       \
    "\"name\": \"in\"}}, "                                                                         \
    "{\"class_name\": \"Normalization\", \"config\": {\"name\": \"norm\", \"mean\": 0.5, "         \
    "\"variance\": 0.09}}, "                                                                       \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}}, "                            \
    "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"drop\", \"rate\": 0.2}}, "             \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4}}]}}"

DT_TEST_TIMEOUT(gpu_graph_fit_falls_back_when_capture_fails, 120)
{
    const dt_nn_ops *g = gpu_ops();
    tt_setup(164, 16);
    fit_out on = one_fit(NORM_MODEL, ADAM_DECAY, g, false);
    fit_out off = one_fit(NORM_MODEL, ADAM_DECAY, g, true);
    printf("graphs: %lld eager, %lld captured; off because: %s\n", (long long)on.r.steps_eager,
           (long long)on.r.graphs_captured, on.r.graphs_off);
    ASSERT_EQ(on.r.graphs_captured, 0);
    ASSERT_EQ(on.r.steps_eager, 21);
    ASSERT_CONTAINS(on.r.graphs_off, "capturing");
    ASSERT_EQ(on.n, off.n);
    ASSERT_TRUE(memcmp(on.w, off.w, on.n * sizeof(float)) == 0);
    free(on.w);
    free(off.w);
    dt_nn_gpu_unbind();
}
