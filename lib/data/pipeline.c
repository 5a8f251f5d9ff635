/* pipeline.c - shard -> shuffle -> batch, with the batches made on a prefetch thread.
 *
 * Who owns what: the dataset is shared read-only. The epoch order (order, mine) and the slot
 * being written belong to the producer (the prefetch thread, or the caller when prefetch = 0).
 * The counters below mu hand slots over: the producer writes step s into slots[s % nslots]
 * only while s < released + nslots, and publishes it by setting produced = s + 1; the consumer
 * reads slot c only once produced > c and gives it back by advancing released. nslots =
 * prefetch + 1, so the producer runs `prefetch` batches ahead of the one the trainer holds. */
#include "data/data_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dt_pipeline {
    const dt_dataset *ds; /* borrowed */
    dt_pipeline_opts o;
    int W, w, L, l; /* workers, this worker, local replicas per worker, this local replica */
    int b;          /* local batch */
    dt_shard_plan plan;
    size_t *rep_counts; /* (R) examples per epoch of every replica */
    size_t local_n;     /* rep_counts[rank] */
    int64_t steps;

    /* producer-owned */
    size_t *order; /* (N) global order, DATA only */
    size_t *wlist; /* (worker count) the worker's elements for this epoch */
    size_t *mine;  /* (local_n) this replica's elements for this epoch, in order */
    int64_t my_gen, next_step;

    dt_batch *slots; /* (nslots) */
    int nslots;

    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    pthread_t thread;
    bool has_thread;
    /* under mu */
    bool started, stop;
    int64_t gen, epoch;
    int64_t produced, released, holding;
    dt_status prod_st;
    dt_err prod_err;
};

dt_pipeline_opts dt_pipeline_opts_default(void)
{
    dt_pipeline_opts o = {0};
    o.global_batch = 32;
    o.num_replicas = 1;
    o.replicas_per_worker = 1;
    o.policy = DT_SHARD_AUTO;
    o.prefetch = 2;
    return o;
}

/* Builds this replica's element list for epoch e into p->mine. Producer only. */
static dt_status build_epoch(dt_pipeline *p, int64_t e, dt_err *err)
{
    const dt_dataset *ds = p->ds;
    size_t nw = dt_shard_count(&p->plan, ds->file_start, ds->nfiles);
    if (p->plan.policy == DT_SHARD_DATA) {
        /* One global order, identical on every worker (same seed, same stream), then j % W. */
        for (size_t i = 0; i < ds->n; i++)
            p->order[i] = i;
        DT_TRY(dt_shuffle_apply(&p->o.shuffle, p->o.seed, (uint64_t)e, p->order, ds->n, err));
        dt_shard_elements(&p->plan, ds->file_start, ds->nfiles, p->order, p->wlist);
    } else {
        /* FILE and OFF: each worker shuffles its own elements; the stream includes the worker
         * so that under OFF workers do not all see the same order. */
        dt_shard_elements(&p->plan, ds->file_start, ds->nfiles, NULL, p->wlist);
        DT_TRY(dt_shuffle_apply(&p->o.shuffle, p->o.seed,
                                (uint64_t)e * 1000003u + (uint64_t)p->w + 1, p->wlist, nw, err));
    }
    /* Local replicas of one worker split its list like DATA: position k -> k % L. */
    size_t k = 0;
    for (size_t j = (size_t)p->l; j < nw; j += (size_t)p->L)
        p->mine[k++] = p->wlist[j];
    DT_ASSERT(k, ==, p->local_n);
    return DT_OK;
}

static int64_t step_global_n(const dt_pipeline *p, int64_t s)
{
    int64_t g = 0;
    for (int r = 0; r < p->o.num_replicas; r++) {
        int64_t left = (int64_t)p->rep_counts[r] - s * p->b;
        g += left <= 0 ? 0 : left < p->b ? left : p->b;
    }
    return g;
}

/* Writes step s of the current epoch into its slot. Producer only. */
static void fill_step(dt_pipeline *p, int64_t s, int64_t epoch)
{
    const dt_dataset *ds = p->ds;
    dt_batch *bt = &p->slots[s % p->nslots];
    size_t lo = (size_t)s * (size_t)p->b;
    size_t hi = lo + (size_t)p->b;
    if (hi > p->local_n)
        hi = p->local_n;
    int n = lo < hi ? (int)(hi - lo) : 0;
    size_t xs = ds->x_size;
    int held = 0; /* rows written: an example with no row (x_row) is left out */
    for (int e = 0; e < n; e++) {
        size_t idx = p->mine[lo + (size_t)e];
        size_t row = ds->x_row ? ds->x_row[idx] : idx;
        if (row == SIZE_MAX)
            continue;
        int i = held++;
        float *dst = bt->x ? bt->x + (size_t)i * xs : NULL; /* (xs) */
        if (!dst) {
            /* no_x: the consumer gathers the decoded row by index */
        } else if (ds->x_u8) {
            const uint8_t *src = ds->x_u8 + row * xs;
            float sc = ds->x_scale;
            for (size_t k = 0; k < xs; k++)
                dst[k] = (float)src[k] * sc;
        } else {
            memcpy(dst, ds->x_f32 + row * xs, xs * sizeof(float));
        }
        if (bt->y_i32)
            bt->y_i32[i] = ds->y_i32[idx];
        if (bt->y_f32)
            memcpy(bt->y_f32 + (size_t)i * ds->y_size, ds->y_f32 + idx * ds->y_size,
                   ds->y_size * sizeof(float));
        bt->index[i] = idx;
    }
    bt->n = held;
    bt->global_n = p->o.drop_remainder ? (int64_t)p->o.global_batch : step_global_n(p, s);
    bt->step = s;
    bt->epoch = epoch;
    bt->last = s == p->steps - 1;
}

static void *prefetch_main(void *arg)
{
    dt_pipeline *p = arg;
    pthread_setname_np(pthread_self(), "dt-data");
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (!p->started || (p->my_gen == p->gen && p->next_step >= p->steps)) {
            pthread_cond_wait(&p->cv_prod, &p->mu);
            continue;
        }
        if (p->my_gen != p->gen) { /* a new epoch: rebuild the order outside the lock */
            int64_t gen = p->gen, e = p->epoch;
            pthread_mutex_unlock(&p->mu);
            dt_err err = {0};
            dt_status st = build_epoch(p, e, &err);
            pthread_mutex_lock(&p->mu);
            p->my_gen = gen;
            p->next_step = 0;
            if (gen != p->gen)
                continue;
            if (st != DT_OK) {
                p->prod_st = st;
                p->prod_err = err;
                p->next_step = p->steps;
                pthread_cond_broadcast(&p->cv_cons);
            }
            continue;
        }
        if (p->next_step >= p->released + p->nslots) { /* queue full */
            pthread_cond_wait(&p->cv_prod, &p->mu);
            continue;
        }
        int64_t s = p->next_step, gen = p->gen, e = p->epoch;
        pthread_mutex_unlock(&p->mu);
        fill_step(p, s, e);
        pthread_mutex_lock(&p->mu);
        if (gen == p->gen) {
            p->produced = s + 1;
            p->next_step = s + 1;
            pthread_cond_broadcast(&p->cv_cons);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

dt_status dt_pipeline_new(const dt_dataset *ds, const dt_pipeline_opts *opts, dt_pipeline **out,
                          dt_err *err)
{
    dt_status st = DT_OK;
    *out = NULL;
    dt_pipeline_opts o = *opts;
    if (o.replicas_per_worker <= 0)
        o.replicas_per_worker = 1;
    int R = o.num_replicas;
    if (R < 1 || o.replica_rank < 0 || o.replica_rank >= R)
        return dt_err_set(err, DT_EINVAL, "pipeline: replica rank %d of %d is out of range",
                          o.replica_rank, R);
    if (o.global_batch < 1 || o.global_batch % R != 0)
        return dt_err_set(err, DT_EINVAL,
                          "pipeline: the global batch %d must be a positive multiple of the "
                          "number of replicas %d (each replica takes batch_size / replicas)",
                          o.global_batch, R);
    if (R % o.replicas_per_worker != 0)
        return dt_err_set(err, DT_EINVAL,
                          "pipeline: %d replicas are not a multiple of %d per "
                          "worker",
                          R, o.replicas_per_worker);
    if (o.prefetch < 0 || o.prefetch > 1024)
        return dt_err_set(err, DT_EINVAL, "pipeline: prefetch %d is outside 0..1024", o.prefetch);
    if (o.shuffle.kind == DT_SHUFFLE_BUFFER && o.shuffle.buffer < 1)
        return dt_err_set(err, DT_EINVAL, "pipeline: a shuffle buffer must hold at least 1");

    dt_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return dt_err_set(err, DT_ENOMEM, "pipeline: out of memory");
    p->ds = ds;
    p->o = o;
    p->L = o.replicas_per_worker;
    p->W = R / p->L;
    p->w = o.replica_rank / p->L;
    p->l = o.replica_rank % p->L;
    p->b = o.global_batch / R;
    p->holding = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv_prod, &ca);
    pthread_cond_init(&p->cv_cons, &ca);
    pthread_condattr_destroy(&ca);

    DT_TRY_GOTO(dt_shard_resolve(o.policy, ds->nfiles, p->W, p->w, &p->plan, err), st, fail);
    if (ds->shard_workers < 0) {
        st = dt_err_set(err, DT_EINVAL, "pipeline: the data set was indexed, not decoded");
        goto fail;
    }
    if (ds->shard_workers &&
        (p->plan.policy != DT_SHARD_FILE || p->W != ds->shard_workers || p->w != ds->shard_index)) {
        st = dt_err_set(err, DT_EINVAL,
                        "pipeline: the data set was decoded for FILE shard %d of %d only, not for "
                        "%s worker %d of %d",
                        ds->shard_index, ds->shard_workers, dt_shard_policy_name(p->plan.policy),
                        p->w, p->W);
        goto fail;
    }
    /* Every replica's count, from the pure shard plan: this is what makes steps_per_epoch
     * and each step's global_n identical everywhere without any communication. */
    p->rep_counts = calloc((size_t)R, sizeof(size_t));
    if (!p->rep_counts)
        goto oom;
    for (int r = 0; r < R; r++) {
        dt_shard_plan pl;
        DT_TRY_GOTO(dt_shard_resolve(o.policy, ds->nfiles, p->W, r / p->L, &pl, err), st, fail);
        size_t nw = dt_shard_count(&pl, ds->file_start, ds->nfiles);
        size_t l = (size_t)(r % p->L);
        p->rep_counts[r] = nw > l ? (nw - l + (size_t)p->L - 1) / (size_t)p->L : 0;
    }
    p->local_n = p->rep_counts[o.replica_rank];
    int64_t steps = o.drop_remainder ? INT64_MAX : 0;
    for (int r = 0; r < R; r++) {
        int64_t c = (int64_t)p->rep_counts[r];
        int64_t sr = o.drop_remainder ? c / p->b : (c + p->b - 1) / p->b;
        steps = o.drop_remainder ? (sr < steps ? sr : steps) : (sr > steps ? sr : steps);
    }
    p->steps = steps;

    size_t nw = dt_shard_count(&p->plan, ds->file_start, ds->nfiles);
    p->order = malloc((ds->n ? ds->n : 1) * sizeof(size_t));
    p->wlist = malloc((nw ? nw : 1) * sizeof(size_t));
    p->mine = malloc((p->local_n ? p->local_n : 1) * sizeof(size_t));
    p->nslots = o.prefetch + 1;
    p->slots = calloc((size_t)p->nslots, sizeof(dt_batch));
    if (!p->order || !p->wlist || !p->mine || !p->slots)
        goto oom;
    for (int i = 0; i < p->nslots; i++) {
        dt_batch *bt = &p->slots[i];
        if (!o.no_x &&
            !(bt->x = malloc((size_t)p->b * (ds->x_size ? ds->x_size : 1) * sizeof(float))))
            goto oom;
        if (!(bt->index = malloc((size_t)p->b * sizeof(size_t))))
            goto oom;
        if (ds->y_kind == DT_LABEL_INT32 && !(bt->y_i32 = malloc((size_t)p->b * 4)))
            goto oom;
        if (ds->y_kind == DT_LABEL_FLOAT &&
            !(bt->y_f32 = malloc((size_t)p->b * ds->y_size * sizeof(float))))
            goto oom;
    }
    if (o.prefetch > 0) {
        if (pthread_create(&p->thread, NULL, prefetch_main, p) != 0) {
            st = dt_err_set(err, DT_ENOMEM, "pipeline: cannot start the prefetch thread");
            goto fail;
        }
        p->has_thread = true;
    }
    *out = p;
    return DT_OK;
oom:
    st = dt_err_set(err, DT_ENOMEM, "pipeline: out of memory (local batch %d)", p->b);
fail:
    dt_pipeline_free(p);
    return st;
}

int64_t dt_pipeline_steps_per_epoch(const dt_pipeline *p)
{
    return p->steps;
}

int dt_pipeline_local_batch(const dt_pipeline *p)
{
    return p->b;
}

size_t dt_pipeline_local_count(const dt_pipeline *p)
{
    return p->local_n;
}

dt_status dt_pipeline_epoch_begin(dt_pipeline *p, int64_t epoch, dt_err *err)
{
    if (epoch < 0)
        return dt_err_set(err, DT_EINVAL, "pipeline: epoch %lld is negative", (long long)epoch);
    pthread_mutex_lock(&p->mu);
    p->gen++;
    p->epoch = epoch;
    p->produced = p->released = 0;
    p->holding = -1;
    p->started = true;
    p->prod_st = DT_OK;
    pthread_cond_broadcast(&p->cv_prod);
    pthread_mutex_unlock(&p->mu);
    if (!p->has_thread) { /* synchronous mode: the caller is the producer */
        DT_TRY(build_epoch(p, epoch, err));
        p->my_gen = p->gen;
        p->next_step = 0;
    }
    return DT_OK;
}

dt_status dt_pipeline_next(dt_pipeline *p, const dt_batch **b, dt_deadline dl, dt_err *err)
{
    *b = NULL;
    if (!p->has_thread) {
        if (!p->started)
            return dt_err_set(err, DT_ESTATE, "pipeline: next before epoch_begin");
        if (p->next_step >= p->steps)
            return DT_OK;
        int64_t s = p->next_step++;
        fill_step(p, s, p->epoch);
        *b = &p->slots[s % p->nslots];
        return DT_OK;
    }
    dt_status st = DT_OK;
    pthread_mutex_lock(&p->mu);
    if (!p->started) {
        st = dt_err_set(err, DT_ESTATE, "pipeline: next before epoch_begin");
        goto out;
    }
    if (p->holding >= 0) { /* give the previous batch back */
        p->released = p->holding + 1;
        p->holding = -1;
        pthread_cond_signal(&p->cv_prod);
    }
    int64_t c = p->released;
    if (c >= p->steps)
        goto out;
    while (p->produced <= c && p->prod_st == DT_OK) {
        int64_t ms = dl;
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        if (dt_deadline_passed(dl) || pthread_cond_timedwait(&p->cv_cons, &p->mu, &ts) != 0) {
            if (p->produced > c)
                break;
            if (dt_deadline_passed(dl)) {
                st = dt_err_set(err, DT_ETIMEDOUT,
                                "pipeline: no batch for step %lld of epoch %lld before the "
                                "deadline (prefetch thread too slow?)",
                                (long long)c, (long long)p->epoch);
                goto out;
            }
        }
    }
    if (p->prod_st != DT_OK) {
        st = p->prod_st;
        if (err)
            *err = p->prod_err;
        goto out;
    }
    p->holding = c;
    *b = &p->slots[c % p->nslots];
out:
    pthread_mutex_unlock(&p->mu);
    return st;
}

void dt_pipeline_free(dt_pipeline *p)
{
    if (!p)
        return;
    if (p->has_thread) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->cv_prod);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (int i = 0; p->slots && i < p->nslots; i++) {
        free(p->slots[i].x);
        free(p->slots[i].index);
        free(p->slots[i].y_i32);
        free(p->slots[i].y_f32);
    }
    free(p->slots);
    free(p->order);
    free(p->wlist);
    free(p->mine);
    free(p->rep_counts);
    pthread_cond_destroy(&p->cv_prod);
    pthread_cond_destroy(&p->cv_cons);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
