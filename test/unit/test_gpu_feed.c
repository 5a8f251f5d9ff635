/* test_gpu_feed.c - fit's device feed (lib/train/feed.c): the next batch uploaded on the copy
 * stream while the current step computes, and the training set kept on the device and gathered
 * by the pipeline's indices. Both must train exactly as the host path does (same bits: shuffled
 * epochs, a short last batch, class weights, dropout, validation, 1 and 2 replicas), the upload
 * of step k + 1 must be queued before step k's sync, and the feed must free its pinned memory
 * and events. train_feed_ runs on the default ops (DTRAIN_OPS: the CPU with the feed forced on,
 * the guard, the emulated GPU in test/guard/nn_train_gpu_emu.sh); gpu_feed_ on the CUDA backend
 * (a GPU, or the emulator in gpu_emu.sh), skipping without one. */
#include "test_gpu_util.h"
#include "test_nn_util.h"
#include "test_train_util.h"

#include <dlfcn.h>

/* 193 examples at batch 16: 13 steps an epoch, the last with 1 example. */
#define N_TRAIN 193
#define N_VAL   40

/* tt_spec_model shuffled, with $.fit.class_weight cw (NULL: none). */
static const char *feed_spec(const char *model, int epochs, const char *cw)
{
    static char buf[16384];
    char base[16384];
    snprintf(base, sizeof base, "%s", tt_spec_model(model, epochs, 16, "\"adam\"", NULL));
    char *sh = strstr(base, "\"shuffle\": false");
    ASSERT_TRUE(sh != NULL);
    memcpy(sh, "\"shuffle\":  true", strlen("\"shuffle\": false"));
    const char *fit = strstr(base, "\"batch_size\": 16}");
    ASSERT_TRUE(fit != NULL);
    snprintf(buf, sizeof buf, "%.*s\"batch_size\": 16%s%s}%s", (int)(fit - base), base,
             cw ? ", \"class_weight\": " : "", cw ? cw : "", fit + strlen("\"batch_size\": 16}"));
    return buf;
}

static void set_mode(const char *feed, const char *on_dev)
{
    setenv("DTRAIN_FEED", feed, 1);
    setenv("DTRAIN_DATA_ON_DEVICE", on_dev, 1);
}

/* Two runs trained alike: every step's loss, the validation figures and the weights, bit for
 * bit. */
static void same_bits(const tt_replica *a, const tt_replica *b, int world, const char *what)
{
    for (int r = 0; r < world; r++) {
        if (b[r].st != DT_OK)
            fprintf(stderr, "%s, rank %d: %s\n", what, r, b[r].err.msg);
        ASSERT_EQ(b[r].st, DT_OK);
        ASSERT_EQ(b[r].res.weights_hash, a[r].res.weights_hash);
        ASSERT_EQ(b[r].nlosses, a[r].nlosses);
        for (int i = 0; i < a[r].nlosses; i++)
            if (memcmp(&a[r].losses[i], &b[r].losses[i], sizeof(double)) != 0) {
                fprintf(stderr, "%s, rank %d, step %d: loss %.17g, the host path's %.17g\n", what,
                        r, i, b[r].losses[i], a[r].losses[i]);
                ASSERT_TRUE(!"the host path's loss");
            }
        ASSERT_EQ(b[r].nparams, a[r].nparams);
        ASSERT_TRUE(memcmp(a[r].params, b[r].params, a[r].nparams * sizeof(float)) == 0);
        ASSERT_TRUE(a[r].res.has_val && b[r].res.has_val);
        ASSERT_TRUE(memcmp(&a[r].res.val_loss, &b[r].res.val_loss, sizeof(double)) == 0);
        ASSERT_TRUE(memcmp(&a[r].res.val_accuracy, &b[r].res.val_accuracy, sizeof(double)) == 0);
    }
    printf("%s: %d steps, weights %016llx, the host path's bits\n", what, a[0].nlosses,
           (unsigned long long)a[0].res.weights_hash);
}

DT_TEST_TIMEOUT(train_feed_same_bits, 180)
{
    tt_setup(N_TRAIN, N_VAL);
    static const struct {
        const char *model, *cw;
    } jobs[] = {
        {TT_MODEL, "{\"0\": 1.5, \"2\": 0.5}"}, /* sample weights through the feed */
        {TT_MODEL_DROPOUT, NULL},               /* no weights; dropout's draws per step */
    };
    for (size_t j = 0; j < sizeof jobs / sizeof *jobs; j++) {
        dt_jobspec spec;
        tt_parse(feed_spec(jobs[j].model, 3, jobs[j].cw), &spec);
        for (int world = 1; world <= 2; world++) {
            dt_train_opts o = dt_train_opts_default();
            tt_replica host[2], pre[2], dev[2];
            set_mode("0", "0");
            tt_run(&spec, world, &o, -1, 0, host);
            for (int r = 0; r < world; r++) {
                if (host[r].st != DT_OK)
                    fprintf(stderr, "host path, rank %d: %s\n", r, host[r].err.msg);
                ASSERT_EQ(host[r].st, DT_OK);
            }
            ASSERT_EQ(host[0].nlosses, 3 * 13);
            set_mode("1", "0");
            tt_run(&spec, world, &o, -1, 0, pre);
            char what[64];
            snprintf(what, sizeof what, "job %zu, R=%d, prefetch", j, world);
            same_bits(host, pre, world, what);
            set_mode("1", "1");
            tt_run(&spec, world, &o, -1, 0, dev);
            snprintf(what, sizeof what, "job %zu, R=%d, data set on the device", j, world);
            same_bits(host, dev, world, what);
            tt_free(host, world);
            tt_free(pre, world);
            tt_free(dev, world);
        }
        dt_jobspec_destroy(&spec);
    }
}

/* ------------------------------------------------------------- on the CUDA backend -- */

/* The backend's table with the calls the order test watches recorded: 'U' for an event
 * recorded on the copy stream (a put's uploads are queued), 'S' for the step's sync. */
static const dt_nn_ops *inner;
static dt_nn_ops wrap;
static char trace[4096];
static size_t ntrace;
static long ngather;

static void w_event_record(void *ev, bool copy)
{
    if (copy && ntrace + 1 < sizeof trace)
        trace[ntrace++] = 'U';
    inner->event_record(ev, copy);
}

static int w_sync(char *msg, size_t n)
{
    if (ntrace + 1 < sizeof trace)
        trace[ntrace++] = 'S';
    return inner->sync(msg, n);
}

static void w_gather(const float *x, const int32_t *rows, int n, size_t cols, float *y)
{
    ngather++;
    inner->gather(x, rows, n, cols, y);
}

typedef struct run1 {
    uint64_t hash;
    int64_t graphed; /* steps replayed from a CUDA graph */
    double losses[TT_MAX_STEPS];
    int nlosses;
} run1;

static void on_step(void *ctx, const dt_train_step_info *si)
{
    run1 *r = ctx;
    if (r->nlosses < TT_MAX_STEPS)
        r->losses[r->nlosses++] = si->batch_loss;
}

/* One replica on this thread (bound to the GPU) with the wrapped table. */
static void fit1(const dt_jobspec *spec, run1 *out)
{
    memset(out, 0, sizeof *out);
    ntrace = 0;
    ngather = 0;
    dt_train_opts o = dt_train_opts_default();
    o.ops = &wrap;
    o.progress = (dt_train_progress){.ctx = out, .step_end = on_step};
    dt_trainer *t = NULL;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(spec, &o, &t, &err), &err);
    dt_train_comm c = {.rank = 0, .world = 1};
    dt_train_result res;
    ASSERT_OK(dt_train_fit(t, &c, &res, &err), &err);
    out->hash = res.weights_hash;
    out->graphed = res.steps_graphed;
    dt_train_free(t);
    trace[ntrace] = '\0';
}

/* The emulator's counters, when the backend is the emulator (NULL on a GPU). */
static void *emu_sym(const char *name)
{
    const char *lib = getenv("DTRAIN_CUDA_LIB");
    void *h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    return h ? dlsym(h, name) : NULL;
}

DT_TEST_TIMEOUT(gpu_feed_upload_before_sync, 180)
{
    inner = gpu_ops();
    wrap = *inner;
    ASSERT_TRUE(inner->upload_async && inner->host_alloc && inner->event_record && inner->gather);
    wrap.event_record = w_event_record;
    wrap.sync = w_sync;
    wrap.gather = w_gather;
    void (*counts)(long[6]) = (void (*)(long[6]))emu_sym("emu_event_counts");
    void (*live)(long[2]) = (void (*)(long[2]))emu_sym("emu_live_allocs");

    tt_setup(N_TRAIN, N_VAL);
    dt_jobspec spec;
    tt_parse(feed_spec(TT_MODEL, 2, "{\"1\": 2}"), &spec);
    run1 host, pre, dev;
    set_mode("0", "0");
    fit1(&spec, &host);
    /* the host path: 13 steps an epoch, one sync each, then validation's 3 batches (one sync
     * each), no copy stream */
    char want[256] = "";
    for (int e = 0; e < 2; e++)
        strcat(want, "SSSSSSSSSSSSS"
                     "SSS");
    ASSERT_STREQ(trace, want);
    long ev0[6] = {0}, ev1[6] = {0}, mem0[2] = {0}, mem1[2] = {0};
    if (counts)
        counts(ev0);
    if (live)
        live(mem0);

    set_mode("auto", "0"); /* a device backend feeds by default */
    fit1(&spec, &pre);
    /* each epoch: its first batch put before step 1, then each step k's put of batch k + 1
     * before step k's sync; the epoch's last step puts nothing. Validation's own feed alike:
     * its first batch put, then batch k + 1 put (uploaded on the copy stream) before batch k's
     * sync, the last one's sync alone */
    want[0] = '\0';
    for (int e = 0; e < 2; e++) {
        strcat(want, "U");
        for (int k = 0; k < 12; k++)
            strcat(want, "US");
        strcat(want, "S"
                     "U"
                     "USUSS");
    }
    ASSERT_STREQ(trace, want);
    ASSERT_EQ(ngather, 0);
    ASSERT_EQ(pre.hash, host.hash);
    /* the fed steps were graphed too: the feed's copies stay outside the captured work */
    printf("steps replayed from a graph: host path %lld, fed %lld\n", (long long)host.graphed,
           (long long)pre.graphed);
    ASSERT_TRUE(pre.graphed > 0 && pre.graphed == host.graphed);
    ASSERT_EQ(pre.nlosses, 26);
    ASSERT_TRUE(memcmp(pre.losses, host.losses, sizeof host.losses) == 0);
    if (counts) {
        counts(ev1);
        printf("events: %ld made, %ld freed, %ld recorded, %ld waited for, %ld synchronized\n",
               ev1[0] - ev0[0], ev1[1] - ev0[1], ev1[2] - ev0[2], ev1[3] - ev0[3], ev1[4] - ev0[4]);
        /* two feeds (training, validation) of two slots with two events each; 26 training
         * and 6 validation batches */
        ASSERT_EQ(ev1[0] - ev0[0], 8);
        ASSERT_EQ(ev1[1] - ev0[1], 8);               /* all freed */
        ASSERT_EQ(ev1[2] - ev0[2], 26 + 26 + 6 + 6); /* an upload per put, a release per step */
        ASSERT_EQ(ev1[3] - ev0[3], 26 + 26 + 6 + 6); /* the copy stream's and the step's waits */
    }
    if (live) {
        live(mem1);
        printf("live allocations after fit: %ld device, %ld pinned (before: %ld, %ld)\n", mem1[0],
               mem1[1], mem0[0], mem0[1]);
        ASSERT_EQ(mem1[1], mem0[1]); /* pinned slots freed */
        ASSERT_EQ(mem1[0], mem0[0]); /* device slots freed */
    }

    set_mode("auto", "1");
    fit1(&spec, &dev);
    ASSERT_STREQ(trace, want);
    /* the rows and the labels of every step, validation's too (both sets on the device) */
    ASSERT_EQ(ngather, (26 + 6) * 2);
    ASSERT_EQ(dev.hash, host.hash);
    ASSERT_TRUE(memcmp(dev.losses, host.losses, sizeof host.losses) == 0);
    if (live) {
        live(mem1);
        ASSERT_EQ(mem1[1], mem0[1]);
        ASSERT_EQ(mem1[0], mem0[0]); /* the data set freed with the feed */
    }
    /* auto keeps a small set on the device by itself (it takes far less than a quarter of the
     * free memory) */
    set_mode("auto", "auto");
    fit1(&spec, &dev);
    ASSERT_EQ(ngather, (26 + 6) * 2);
    ASSERT_EQ(dev.hash, host.hash);
    dt_jobspec_destroy(&spec);
}

/* gather against the CPU's, bit for bit (int32 words and NaN payloads included), and an async
 * upload from pinned memory seen by a kernel after the compute stream waits for its event. */
DT_TEST(gpu_feed_gather_and_upload)
{
    const dt_nn_ops *g = gpu_ops(), *c = dt_nn_ops_cpu();
    enum { ROWS = 37, COLS = 5, N = 64 };
    float *x = gpu_randn(ROWS * COLS, 1.0f, 11);
    uint32_t nan_bits = 0x7fc01234u; /* a payload a float move must keep */
    memcpy(&x[7], &nan_bits, 4);
    int32_t rows[N];
    dt_rng r;
    dt_rng_seed(&r, 5);
    for (int i = 0; i < N; i++)
        rows[i] = (int32_t)dt_rng_below(&r, ROWS); /* repeats included */
    float ref[N * COLS];
    c->gather(x, rows, N, COLS, ref);
    float *dx = gpu_up(g, x, ROWS * COLS), *dy = gpu_poison(g, N * COLS);
    int32_t *drows = gpu_up_bytes(g, rows, sizeof rows);
    g->gather(dx, drows, N, COLS, dy);
    gpu_same_bits(g, dy, ref, N * COLS, "gather (64 rows of 5)");
    /* int32 labels, one column: negative values and all bits */
    int32_t lab[ROWS], lref[N];
    for (int i = 0; i < ROWS; i++)
        lab[i] = (int32_t)(0x80000001u + 977u * (uint32_t)i);
    c->gather((const float *)lab, rows, N, 1, (float *)lref);
    int32_t *dl = gpu_up_bytes(g, lab, sizeof lab), *dlo = gpu_up_bytes(g, lref, sizeof lref);
    g->fill(N, 0.0f, (float *)dlo);
    g->gather((const float *)dl, drows, N, 1, (float *)dlo);
    gpu_same_bits(g, (const float *)dlo, (const float *)lref, N, "gather of int32 labels");

    /* pinned -> device on the copy stream, then a kernel on the compute stream reads it */
    float *pin = g->host_alloc(N * COLS * sizeof(float));
    ASSERT_TRUE(pin != NULL);
    memcpy(pin, ref, sizeof ref);
    void *up = g->event_new();
    ASSERT_TRUE(up != NULL);
    float *dz = gpu_poison(g, N * COLS), *dw = gpu_poison(g, N * COLS);
    g->upload_async(dz, pin, sizeof ref);
    g->event_record(up, true);
    g->event_wait(up, false);
    g->copy(N * COLS, dz, dw, false);
    g->event_sync(up);
    memset(pin, 0, sizeof ref); /* the upload is done: the block may change */
    gpu_same_bits(g, dw, ref, N * COLS, "async upload then copy");
    g->event_free(up);
    g->host_free(pin);
    size_t fr = 0, tot = 0;
    ASSERT_EQ(g->mem_info(&fr, &tot), 0);
    ASSERT_TRUE(tot > 0 && fr <= tot);
    GPU_SYNC();
    g->free(dx), g->free(dy), g->free(drows), g->free(dl), g->free(dlo), g->free(dz), g->free(dw);
    free(x);
}

/* ------------------------------------------------------- the model's device copies -- */

static void *dev_copy(const dt_nn_ops *o, const void *h, size_t bytes)
{
    void *d = o->alloc(bytes ? bytes : 1);
    ASSERT_TRUE(d != NULL);
    o->upload(d, h, bytes);
    return d;
}

/* 3 steps of TT_MODEL on random batches; mode 0: host fields, 1: device copies (x NULL),
 * 2: device copies through dt_model_graph_feed after the first (eager) step. Returns every
 * step's loss and gradients, concatenated. */
static float *model_steps(const dt_loss *loss, int mode, double losses[3], size_t *len)
{
    enum { N = 12 };
    dt_model *m = nn_build(TT_MODEL, 3);
    const dt_nn_ops *o = dt_model_ops(m);
    size_t np;
    float *g = dt_model_grads(m, &np);
    float *out = malloc(3 * np * sizeof(float));
    dt_err err = {0};
    for (int s = 0; s < 3; s++) {
        nn_data d = nn_random(m, N, loss->kind, 40 + (uint64_t)s);
        dt_model_batch b = nn_batch(&d, loss->kind);
        float w[N];
        for (int i = 0; i < N; i++)
            w[i] = 0.25f + (float)((i * 7 + s) % 4);
        b.sample_weight = w;
        void *dx = NULL, *dl = NULL, *dt = NULL, *dw = NULL;
        size_t in = dt_model_input_size(m), cols = dt_model_output_size(m);
        if (mode > 0) {
            b.x_dev = dx = dev_copy(o, d.x, N * in * sizeof(float));
            b.x = NULL;
            if (b.labels)
                b.labels_dev = dl = dev_copy(o, b.labels, N * sizeof(int32_t));
            if (b.targets)
                b.targets_dev = dt = dev_copy(o, b.targets, N * cols * sizeof(float));
            b.sample_weight_dev = dw = dev_copy(o, w, sizeof w);
            /* the host's weights and MSE targets are not read for the loss: other values there
             * show a step that uploaded them instead of using the device copies */
            for (int i = 0; i < N; i++)
                w[i] = 1.0f;
            if (b.targets)
                memset(d.targets, 0, N * cols * sizeof(float));
        }
        dt_step_stats st;
        if (mode == 2 && s > 0)
            ASSERT_OK(dt_model_graph_feed(m, loss, &b, 2 * N, &err), &err);
        ASSERT_OK(dt_model_train_step(m, loss, &b, 2 * N, &st, &err), &err);
        if (mode == 2 && s > 0)
            dt_model_graph_replayed(m);
        losses[s] = st.loss;
        o->download(out + (size_t)s * np, g, np * sizeof(float));
        dt_nn_free(o, dx), dt_nn_free(o, dl), dt_nn_free(o, dt), dt_nn_free(o, dw);
        nn_data_free(&d);
    }
    dt_model_free(m);
    *len = 3 * np;
    return out;
}

/* The model's steps from device copies of the batch (plain and through dt_model_graph_feed)
 * give the host batch's losses and gradients bit for bit: sparse CE on int32 labels and MSE on
 * float targets, both with sample weights. */
DT_TEST(train_feed_model_device_copies)
{
    const dt_loss losses[] = {{.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true},
                              {.kind = DT_NN_LOSS_MSE}};
    for (size_t k = 0; k < 2; k++) {
        double lh[3], ld[3], lg[3];
        size_t nh, nd, ng;
        float *h = model_steps(&losses[k], 0, lh, &nh);
        float *d = model_steps(&losses[k], 1, ld, &nd);
        float *gf = model_steps(&losses[k], 2, lg, &ng);
        ASSERT_EQ(nh, nd);
        ASSERT_EQ(nh, ng);
        ASSERT_TRUE(memcmp(h, d, nh * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(h, gf, nh * sizeof(float)) == 0);
        ASSERT_TRUE(memcmp(lh, ld, sizeof lh) == 0);
        ASSERT_TRUE(memcmp(lh, lg, sizeof lh) == 0);
        printf("%s: 3 steps from device copies, the host batch's gradients (%zu floats) bit for "
               "bit\n",
               dt_loss_name(losses[k].kind), nh / 3);
        free(h), free(d), free(gf);
    }
}
