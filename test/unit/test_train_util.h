/* test_train_util.h - helpers of the train tests: a synthetic IDX data set that a small CNN can
 * learn, job specs around it, and a shared-memory comm that runs R replicas as threads.
 * Header-only (static) so each test file stays self-contained. */
#ifndef DT_TEST_TRAIN_UTIL_H
#define DT_TEST_TRAIN_UTIL_H

#include "dt_test.h"

#include "comm/comm.h"
#include "config/jobspec.h"
#include "core/rng.h"
#include "nn/model.h"
#include "train/train.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* ------------------------------------------------------------------------------ data -- */

static void tt_put_be32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* n examples of 8x8 uint8 images in 4 classes: class c brightens quadrant c, plus noise. */
static inline void tt_write_idx(const char *dir, const char *stem, int n, uint64_t seed)
{
    char p[1024];
    dt_rng r;
    dt_rng_seed(&r, seed);
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte", dir, stem);
    FILE *fi = fopen(p, "wb");
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", dir, stem);
    FILE *fl = fopen(p, "wb");
    ASSERT_TRUE(fi && fl);
    tt_put_be32(fi, 0x803);
    tt_put_be32(fi, (uint32_t)n);
    tt_put_be32(fi, 8);
    tt_put_be32(fi, 8);
    tt_put_be32(fl, 0x801);
    tt_put_be32(fl, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        int c = (int)dt_rng_below(&r, 4);
        unsigned char img[64];
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 8; x++) {
                int q = (y >= 4) * 2 + (x >= 4);
                int v = (int)dt_rng_below(&r, 120) + (q == c ? 110 : 0);
                img[y * 8 + x] = (unsigned char)v;
            }
        fwrite(img, 1, 64, fi);
        unsigned char lb = (unsigned char)c;
        fwrite(&lb, 1, 1, fl);
    }
    fclose(fi);
    fclose(fl);
}

/* The tiny model's layers up to its hidden Dense; TT_MODEL adds the output layer. */
#define TT_MODEL_HEAD                                                                              \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"tiny\", \"layers\": ["              \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 1], "       \
    "\"name\": \"in\"}}, "                                                                         \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", \"filters\": 4, "               \
    "\"kernel_size\": [3, 3], \"activation\": \"relu\"}}, "                                        \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}}, "                            \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"hidden\", \"units\": 16, "               \
    "\"activation\": \"relu\"}}, "
#define TT_MODEL_OUT "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4}}]}}"
#define TT_MODEL     TT_MODEL_HEAD TT_MODEL_OUT
/* TT_MODEL with a Dropout(0.3) behind the hidden layer. */
#define TT_MODEL_DROPOUT                                                                           \
    TT_MODEL_HEAD "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"drop\", \"rate\": "      \
                  "0.3}}, " TT_MODEL_OUT

/* A job spec over data written by tt_write_idx("train", "val") in the data root; extra is
 * appended inside the top-level object (", \"checkpoint\": {...}" or ""); tt_spec_model takes
 * another model (Keras JSON). */
static inline const char *tt_spec_model(const char *model, int epochs, int batch,
                                        const char *optimizer, const char *extra)
{
    static char buf[16384];
    snprintf(buf, sizeof buf,
             "{\"name\": \"tiny\", \"model\": %s, "
             "\"compile\": {\"optimizer\": %s, \"loss\": {\"class_name\": "
             "\"SparseCategoricalCrossentropy\", \"config\": {\"from_logits\": true}}, "
             "\"metrics\": [\"accuracy\"]}, "
             "\"data\": {\"train\": {\"format\": \"idx\", \"images\": "
             "\"train-images-idx3-ubyte\", \"labels\": \"train-labels-idx1-ubyte\", \"scale\": "
             "0.00392156862745098, \"image_shape\": [8, 8, 1]}, "
             "\"validation\": {\"format\": \"idx\", \"images\": \"val-images-idx3-ubyte\", "
             "\"labels\": \"val-labels-idx1-ubyte\", \"scale\": 0.00392156862745098, "
             "\"image_shape\": [8, 8, 1]}, \"shuffle\": false, \"seed\": 7, "
             "\"shard_policy\": \"DATA\"}, "
             "\"fit\": {\"epochs\": %d, \"batch_size\": %d}%s}",
             model, optimizer, epochs, batch, extra ? extra : "");
    return buf;
}

static inline const char *tt_spec(int epochs, int batch, const char *optimizer, const char *extra)
{
    return tt_spec_model(TT_MODEL, epochs, batch, optimizer, extra);
}

/* Data root = state dir = the test's tmp dir; n_train / n_val synthetic examples. */
static inline void tt_setup(int n_train, int n_val)
{
    tt_write_idx(dt_test_tmpdir(), "train", n_train, 1);
    tt_write_idx(dt_test_tmpdir(), "val", n_val, 2);
}

static inline void tt_parse(const char *text, dt_jobspec *s)
{
    dt_err err = {0};
    dt_jobspec_roots r = {.data_root = dt_test_tmpdir(), .state_dir = dt_test_tmpdir()};
    ASSERT_OK(dt_jobspec_parse(text, strlen(text), &r, s, &err), &err);
}

/* ------------------------------------------------------------- shared-memory comm -- */

#define TT_MAX_WORLD 8

typedef struct tt_shm {
    int world;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    uint64_t gen;
    bool aborted;
    void *bufs[TT_MAX_WORLD];
} tt_shm;

#define TT_MAX_SIZES 8

typedef struct tt_rank {
    tt_shm *s;
    int rank;
    /* the element counts of the first all-reduces, in order (the bucket plan of step 1) */
    size_t sizes[TT_MAX_SIZES];
    int nsizes;
    int ncompressed; /* all-reduces started on a 16-bit wire */
} tt_rank;

static inline void tt_shm_init(tt_shm *s, int world)
{
    memset(s, 0, sizeof *s);
    s->world = world;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static inline void tt_shm_abort(tt_shm *s)
{
    pthread_mutex_lock(&s->mu);
    s->aborted = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Every rank waits here; a failed rank aborts the others instead of leaving them waiting. */
static inline dt_status tt_barrier(tt_shm *s, dt_err *err)
{
    pthread_mutex_lock(&s->mu);
    uint64_t g = s->gen;
    if (++s->arrived == s->world) {
        s->arrived = 0;
        s->gen++;
        pthread_cond_broadcast(&s->cv);
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 30;
    int rc = 0;
    while (s->gen == g && !s->aborted && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->cv, &s->mu, &dl);
    bool ab = s->aborted && s->gen == g;
    pthread_mutex_unlock(&s->mu);
    if (ab)
        return dt_err_set(err, DT_EPEER, "shm comm: another rank failed");
    if (rc == ETIMEDOUT)
        return dt_err_set(err, DT_ETIMEDOUT, "shm comm: barrier timed out");
    return DT_OK;
}

/* x rounded through a 16-bit wire format (NONE: x). */
static inline float tt_wire_round(float x, dt_jobspec_compression w)
{
    if (w == DT_JOBSPEC_COMPRESS_BFLOAT16)
        return dt_comm_bf16_to_f32(dt_comm_f32_to_bf16(x));
    if (w == DT_JOBSPEC_COMPRESS_FLOAT16)
        return dt_comm_f16_to_f32(dt_comm_f32_to_f16(x));
    return x;
}

/* Blocking: every rank sums all buffers in rank order, so the results are bit-identical. With
 * a 16-bit wire, as the ring: every contribution and the sum are rounded through it. */
static inline dt_status tt_allreduce_wire(tt_rank *r, float *buf, size_t n,
                                          dt_jobspec_compression wire, dt_err *err)
{
    if (r->nsizes < TT_MAX_SIZES)
        r->sizes[r->nsizes++] = n;
    r->ncompressed += wire != DT_JOBSPEC_COMPRESS_NONE;
    r->s->bufs[r->rank] = buf;
    DT_TRY(tt_barrier(r->s, err));
    float *sum = calloc(n, sizeof *sum);
    if (!sum)
        return dt_err_set(err, DT_ENOMEM, "shm comm: out of memory");
    for (int k = 0; k < r->s->world; k++) {
        const float *b = r->s->bufs[k];
        for (size_t i = 0; i < n; i++)
            sum[i] += tt_wire_round(b[i], wire);
    }
    for (size_t i = 0; i < n; i++)
        sum[i] = tt_wire_round(sum[i], wire);
    dt_status st = tt_barrier(r->s, err);
    if (st == DT_OK)
        memcpy(buf, sum, n * sizeof *sum);
    free(sum);
    return st;
}

static inline dt_status tt_allreduce_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    *req = NULL;
    return tt_allreduce_wire(ctx, buf, n, DT_JOBSPEC_COMPRESS_NONE, err);
}

static inline dt_status tt_allreduce_start_compressed(void *ctx, float *buf, size_t n,
                                                      dt_jobspec_compression wire, void **req,
                                                      dt_err *err)
{
    *req = NULL;
    return tt_allreduce_wire(ctx, buf, n, wire, err);
}

static inline dt_status tt_wait(void *ctx, void *req, dt_err *err)
{
    (void)ctx, (void)req, (void)err;
    return DT_OK;
}

static inline dt_status tt_broadcast(void *ctx, void *buf, size_t bytes, int root, dt_err *err)
{
    tt_rank *r = ctx;
    r->s->bufs[r->rank] = buf;
    DT_TRY(tt_barrier(r->s, err));
    if (r->rank != root)
        memcpy(buf, r->s->bufs[root], bytes);
    return tt_barrier(r->s, err);
}

/* An asynchronous variant, as the ring is: allreduce_start queues the request for the rank's
 * comm thread and returns at once; wait blocks until it is done. Buffers stay in flight while
 * the trainer goes on with backward, so fit touching one before its wait would show up as
 * replicas that differ. */
typedef struct tt_req {
    float *buf;
    size_t n;
    dt_jobspec_compression wire;
    bool done;
    dt_status st;
    dt_err err;
    struct tt_req *next;
} tt_req;

typedef struct tt_async {
    tt_rank *rk;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tt_req *head, *tail;
    bool stop;
} tt_async;

static inline void *tt_async_main(void *arg)
{
    tt_async *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop)
            pthread_cond_wait(&a->cv, &a->mu);
        if (!a->head)
            break;
        tt_req *r = a->head;
        pthread_mutex_unlock(&a->mu);
        r->st = tt_allreduce_wire(a->rk, r->buf, r->n, r->wire, &r->err);
        pthread_mutex_lock(&a->mu);
        a->head = r->next;
        if (!a->head)
            a->tail = NULL;
        r->done = true;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static inline dt_status tt_async_start_compressed(void *ctx, float *buf, size_t n,
                                                  dt_jobspec_compression wire, void **req,
                                                  dt_err *err)
{
    tt_async *a = ctx;
    tt_req *r = calloc(1, sizeof *r);
    if (!r)
        return dt_err_set(err, DT_ENOMEM, "async comm: out of memory");
    r->buf = buf;
    r->n = n;
    r->wire = wire;
    pthread_mutex_lock(&a->mu);
    if (a->tail)
        a->tail->next = r;
    else
        a->head = r;
    a->tail = r;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    *req = r;
    return DT_OK;
}

static inline dt_status tt_async_start(void *ctx, float *buf, size_t n, void **req, dt_err *err)
{
    return tt_async_start_compressed(ctx, buf, n, DT_JOBSPEC_COMPRESS_NONE, req, err);
}

static inline dt_status tt_async_wait(void *ctx, void *req, dt_err *err)
{
    tt_async *a = ctx;
    tt_req *r = req;
    pthread_mutex_lock(&a->mu);
    while (!r->done)
        pthread_cond_wait(&a->cv, &a->mu); /* the shm barrier itself times out after 30 s */
    pthread_mutex_unlock(&a->mu);
    dt_status st = r->st;
    if (st != DT_OK)
        *err = r->err;
    free(r);
    return st;
}

static inline dt_status tt_async_broadcast(void *ctx, void *buf, size_t bytes, int root,
                                           dt_err *err)
{
    tt_async *a = ctx;
    return tt_broadcast(a->rk, buf, bytes, root, err);
}

/* ---------------------------------------------------------------- R replicas as threads -- */

#define TT_MAX_STEPS 256

typedef struct tt_replica {
    tt_shm *s;
    tt_rank rk;
    const dt_jobspec *spec;
    dt_train_opts opts;
    int cancel_at_step; /* 0: never; else set the cancel flag at this global step */
    bool async;         /* use the asynchronous comm */
    atomic_bool cancel;
    /* out */
    dt_status st;
    dt_err err;
    dt_train_result res;
    double losses[TT_MAX_STEPS];
    int nlosses;
    float *params; /* copy of the final params (malloc'd) */
    size_t nparams;
} tt_replica;

static inline void tt_on_step(void *ctx, const dt_train_step_info *si)
{
    tt_replica *r = ctx;
    if (r->nlosses < TT_MAX_STEPS)
        r->losses[r->nlosses++] = si->batch_loss;
    if (r->cancel_at_step && si->global_step == r->cancel_at_step)
        atomic_store(&r->cancel, true);
}

static bool tt_no_compression; /* tt_run: a comm without allreduce_start_compressed */

static inline void *tt_replica_main(void *arg)
{
    tt_replica *r = arg;
    r->opts.rank = r->rk.rank;
    r->opts.world = r->s->world;
    r->opts.cancel = &r->cancel;
    r->opts.progress = (dt_train_progress){.ctx = r, .step_end = tt_on_step};
    dt_trainer *t = NULL;
    r->st = dt_train_new(r->spec, &r->opts, &t, &r->err);
    if (r->st == DT_OK) {
        dt_train_comm c = {.ctx = &r->rk,
                           .rank = r->rk.rank,
                           .world = r->s->world,
                           .allreduce_start = tt_allreduce_start,
                           .wait = tt_wait,
                           .broadcast = tt_broadcast,
                           .allreduce_start_compressed =
                               tt_no_compression ? NULL : tt_allreduce_start_compressed};
        tt_async a = {.rk = &r->rk};
        if (r->async) {
            pthread_mutex_init(&a.mu, NULL);
            pthread_cond_init(&a.cv, NULL);
            pthread_create(&a.th, NULL, tt_async_main, &a);
            c.ctx = &a;
            c.allreduce_start = tt_async_start;
            c.wait = tt_async_wait;
            c.broadcast = tt_async_broadcast;
            if (c.allreduce_start_compressed)
                c.allreduce_start_compressed = tt_async_start_compressed;
        }
        r->st = dt_train_fit(t, &c, &r->res, &r->err);
        if (r->async) {
            if (r->st != DT_OK && r->st != DT_ECANCELED)
                tt_shm_abort(r->s); /* queued requests fail instead of waiting */
            pthread_mutex_lock(&a.mu);
            a.stop = true;
            pthread_cond_broadcast(&a.cv);
            pthread_mutex_unlock(&a.mu);
            pthread_join(a.th, NULL);
            for (tt_req *q = a.head; q;) { /* started but never waited for: fit failed */
                tt_req *next = q->next;
                free(q);
                q = next;
            }
        }
        size_t n;
        dt_model *m = dt_train_model(t);
        const float *p = dt_model_params(m, &n);
        r->params = malloc(n * sizeof(float));
        dt_model_ops(m)->download(r->params, p, n * sizeof(float));
        r->nparams = n;
    }
    if (r->st != DT_OK && r->st != DT_ECANCELED)
        tt_shm_abort(r->s);
    dt_train_free(t);
    return NULL;
}

static bool tt_use_async; /* tt_run: give the replicas the asynchronous comm */

/* Runs fit on world replicas (threads); reps[0..world) are filled. opts is a template
 * (out_dir, resume). */
static inline void tt_run(const dt_jobspec *spec, int world, const dt_train_opts *opts,
                          int cancel_rank, int cancel_at_step, tt_replica *reps)
{
    static tt_shm shm;
    tt_shm_init(&shm, world);
    pthread_t th[TT_MAX_WORLD];
    for (int i = 0; i < world; i++) {
        memset(&reps[i], 0, sizeof reps[i]);
        reps[i].s = &shm;
        reps[i].rk = (tt_rank){.s = &shm, .rank = i};
        reps[i].spec = spec;
        reps[i].opts = *opts;
        reps[i].cancel_at_step = i == cancel_rank ? cancel_at_step : 0;
        reps[i].async = tt_use_async;
        atomic_init(&reps[i].cancel, false);
        pthread_create(&th[i], NULL, tt_replica_main, &reps[i]);
    }
    for (int i = 0; i < world; i++)
        pthread_join(th[i], NULL);
}

static inline void tt_free(tt_replica *reps, int world)
{
    for (int i = 0; i < world; i++)
        free(reps[i].params);
}

#endif
