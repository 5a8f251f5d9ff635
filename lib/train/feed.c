/*
 * feed.c - fit's device feed: the next batch uploaded while the current step computes, and a
 * data set kept on the device and gathered by index (see dt__train_feed in train_internal.h).
 *
 * Two slots, each a pinned host block and a device block. put(k+1) copies the pipeline's batch
 * into the free slot's host block and queues its upload on the copy stream, after the compute
 * stream has finished with that slot (its used event), then records the slot's up event; take(k)
 * makes the compute stream wait for that up event and copies the slot into the stage, the
 * device buffers the model reads at the same addresses every step (a step captured in a CUDA
 * graph replays its addresses), and from which it copies into its own input buffers. The host reads
 * the pinned copies (labels for the metrics, class weights, ignore_class counts), which stay as
 * they were until the slot is refilled, two steps on: by then its step has ended on the host.
 *
 * With the data set on the device, a slot uploads only the batch's row numbers (and sample
 * weights), and take gathers the rows into the stage on the compute stream from the device copy
 * of the set. The pipeline still
 * decides the batches (shuffle, sharding), so the steps are the host path's, bit for bit: the
 * set was decoded on the device side exactly as the pipeline decodes a row (uint8 times the
 * scale in float32, or the float32 row).
 */
#include "train/train_internal.h"

#include "core/log.h"

#include <inttypes.h>

#include <stdlib.h>
#include <string.h>

typedef struct slot {
    /* host (pinned where the backend has host_alloc); cap rows */
    float *hx, *ht, *hw;
    int32_t *hl, *hrows; /* hrows: x rows then label rows (data set on the device) */
    /* device: what the copy stream uploads (x, labels and targets only without the set) */
    float *dx, *dt, *dw;
    int32_t *dl, *drows;
    void *up, *used; /* events: upload done, compute done with the slot */
    dt_batch hb;     /* the batch as the pipeline gave it, pointing at the host copies */
    bool has_w;
    int cap; /* rows its buffers hold */
} slot;

struct dt__train_feed {
    const dt_nn_ops *o;
    int cap; /* rows of the largest batch so far */
    size_t xs, ys;
    bool labels;
    slot s[2];
    /* The batch the model reads, at the same device addresses every step (a step captured in
     * a CUDA graph replays them): take copies the slot's upload here, or gathers into it. */
    float *sx, *st, *sw;
    int32_t *sl;
    int scap;
    int head;   /* the slot take returns next */
    int queued; /* put and not yet taken: 0 or 1 */
    int in_use; /* the slot of the step in progress, or -1 */
    /* the data set on the device (NULL: batches are uploaded) */
    float *set_x, *set_y;
    int32_t *set_l;
    const dt_dataset *ds;
};

/* Every table has host_alloc (pinned on a GPU); a slot's blocks may be NULL. */
static void host_free(const dt_nn_ops *o, void *p)
{
    if (p)
        o->host_free(p);
}

static void slot_free(const dt_nn_ops *o, slot *s)
{
    if (s->up && o->event_sync)
        o->event_sync(s->up); /* no copy may still read the host block */
    host_free(o, s->hx);
    host_free(o, s->ht);
    host_free(o, s->hw);
    host_free(o, s->hl);
    host_free(o, s->hrows);
    dt_nn_free(o, s->dx);
    dt_nn_free(o, s->dt);
    dt_nn_free(o, s->dw);
    dt_nn_free(o, s->dl);
    dt_nn_free(o, s->drows);
    if (o->event_free) {
        if (s->up)
            o->event_free(s->up);
        if (s->used)
            o->event_free(s->used);
    }
    memset(s, 0, sizeof *s);
}

static void stage_free(dt__train_feed *f)
{
    dt_nn_free(f->o, f->sx);
    dt_nn_free(f->o, f->st);
    dt_nn_free(f->o, f->sw);
    dt_nn_free(f->o, f->sl);
    f->sx = f->st = f->sw = NULL;
    f->sl = NULL;
    f->scap = 0;
}

static bool stage_alloc(dt__train_feed *f, int cap)
{
    const dt_nn_ops *o = f->o;
    size_t n = (size_t)cap;
    stage_free(f);
    bool ok = (f->sx = dt_nn_alloc(o, n * f->xs * sizeof(float))) != NULL &&
              (f->sw = dt_nn_alloc(o, n * sizeof(float))) != NULL;
    if (ok && f->labels)
        ok = (f->sl = dt_nn_alloc(o, n * sizeof(int32_t))) != NULL;
    if (ok && f->ys)
        ok = (f->st = dt_nn_alloc(o, n * f->ys * sizeof(float))) != NULL;
    return ok;
}

/* Buffers for cap rows; events made once. */
static bool slot_alloc(dt__train_feed *f, slot *s, int cap)
{
    const dt_nn_ops *o = f->o;
    size_t n = (size_t)cap;
    bool set = f->set_x != NULL, ok = true;
    if (!set)
        ok = (s->hx = o->host_alloc(n * f->xs * sizeof(float))) != NULL &&
             (s->dx = dt_nn_alloc(o, n * f->xs * sizeof(float))) != NULL;
    ok = ok && (s->hw = o->host_alloc(n * sizeof(float))) != NULL &&
         (s->dw = dt_nn_alloc(o, n * sizeof(float))) != NULL;
    if (ok && f->labels)
        ok = (s->hl = o->host_alloc(n * sizeof(int32_t))) != NULL &&
             (set || (s->dl = dt_nn_alloc(o, n * sizeof(int32_t))) != NULL);
    if (ok && f->ys)
        ok = (s->ht = o->host_alloc(n * f->ys * sizeof(float))) != NULL &&
             (set || (s->dt = dt_nn_alloc(o, n * f->ys * sizeof(float))) != NULL);
    if (ok && set)
        ok = (s->hrows = o->host_alloc(2 * n * sizeof(int32_t))) != NULL &&
             (s->drows = dt_nn_alloc(o, 2 * n * sizeof(int32_t))) != NULL;
    if (ok && o->event_new && !s->up)
        ok = (s->up = o->event_new()) != NULL && (s->used = o->event_new()) != NULL;
    return ok;
}

dt_status dt__train_feed_new(const dt_nn_ops *o, int cap, size_t x_size, bool labels, size_t y_size,
                             dt__train_feed **out, dt_err *err)
{
    *out = NULL;
    dt__train_feed *f = calloc(1, sizeof *f);
    if (!f)
        return dt_err_set(err, DT_ENOMEM, "train: out of memory for the device feed");
    f->o = o;
    f->cap = cap > 0 ? cap : 1;
    f->xs = x_size;
    f->labels = labels;
    f->ys = y_size;
    f->in_use = -1;
    *out = f;
    return DT_OK;
}

static void set_drop(dt__train_feed *f)
{
    dt_nn_free(f->o, f->set_x);
    dt_nn_free(f->o, f->set_l);
    dt_nn_free(f->o, f->set_y);
    f->set_x = f->set_y = NULL;
    f->set_l = NULL;
}

void dt__train_feed_free(dt__train_feed *f)
{
    if (!f)
        return;
    for (int i = 0; i < 2; i++)
        slot_free(f->o, &f->s[i]);
    stage_free(f);
    set_drop(f);
    free(f);
}

uint64_t dt__train_feed_set_bytes(const dt_dataset *ds, size_t *rows)
{
    size_t r = ds->n;
    if (ds->x_row) { /* a FILE shard's set holds only its rows */
        r = 0;
        for (size_t i = 0; i < ds->n; i++)
            if (ds->x_row[i] != SIZE_MAX && ds->x_row[i] + 1 > r)
                r = ds->x_row[i] + 1;
    }
    if (rows)
        *rows = r;
    uint64_t b = (uint64_t)r * ds->x_size * sizeof(float);
    if (ds->y_kind == DT_LABEL_INT32)
        b += (uint64_t)ds->n * sizeof(int32_t);
    else if (ds->y_kind == DT_LABEL_FLOAT)
        b += (uint64_t)ds->n * ds->y_size * sizeof(float);
    return b;
}

dt_status dt__train_feed_set(dt__train_feed *f, const dt_dataset *ds, dt_err *err)
{
    const dt_nn_ops *o = f->o;
    size_t rows;
    dt__train_feed_set_bytes(ds, &rows);
    if (!o->gather)
        return dt_err_set(err, DT_ENOTSUP, "train: the %s backend cannot gather a batch", o->name);
    if (rows > INT32_MAX || ds->n > INT32_MAX)
        return dt_err_set(err, DT_ENOTSUP,
                          "train: %zu examples are too many to keep on the device (int32 rows)",
                          ds->n);
    if (f->queued || f->in_use >= 0 || f->s[0].hw || f->s[1].hw)
        return dt_err_set(err, DT_ESTATE, "train: the data set goes to the device before a batch");
    size_t xs = ds->x_size;
    f->set_x = dt_nn_alloc(o, (rows ? rows : 1) * xs * sizeof(float));
    bool ok = f->set_x != NULL;
    if (ok && ds->y_kind == DT_LABEL_INT32)
        ok = (f->set_l = dt_nn_alloc(o, (ds->n ? ds->n : 1) * sizeof(int32_t))) != NULL;
    if (ok && ds->y_kind == DT_LABEL_FLOAT)
        ok = (f->set_y = dt_nn_alloc(o, (ds->n ? ds->n : 1) * ds->y_size * sizeof(float))) != NULL;
    if (!ok) {
        set_drop(f);
        return dt_err_set(err, DT_ENOMEM,
                          "train: out of device memory for the data set (%zu rows of %zu floats)",
                          rows, xs);
    }
    if (ds->x_u8) {
        /* decoded as the pipeline decodes a row (fill_step), chunk by chunk */
        size_t chunk = 4096, done = 0;
        float *h = malloc(chunk * xs * sizeof(float) + 1);
        if (!h) {
            set_drop(f);
            return dt_err_set(err, DT_ENOMEM, "train: out of memory");
        }
        while (done < rows) {
            size_t k = rows - done < chunk ? rows - done : chunk;
            const uint8_t *src = ds->x_u8 + done * xs;
            float sc = ds->x_scale;
            for (size_t i = 0; i < k * xs; i++)
                h[i] = (float)src[i] * sc;
            o->upload(f->set_x + done * xs, h, k * xs * sizeof(float));
            done += k;
        }
        free(h);
    } else {
        o->upload(f->set_x, ds->x_f32, rows * xs * sizeof(float));
    }
    if (f->set_l)
        o->upload(f->set_l, ds->y_i32, ds->n * sizeof(int32_t));
    if (f->set_y)
        o->upload(f->set_y, ds->y_f32, ds->n * ds->y_size * sizeof(float));
    f->ds = ds;
    return DT_OK;
}

bool dt__train_feed_on_device(const dt__train_feed *f)
{
    return f->set_x != NULL;
}

void dt__train_feed_reset(dt__train_feed *f)
{
    dt__train_feed_done(f);
    f->queued = 0;
}

dt_status dt__train_feed_put(dt__train_feed *f, const dt_batch *b, const float *sw, dt_err *err)
{
    const dt_nn_ops *o = f->o;
    int k = (f->head + f->queued) % 2;
    if (f->queued > 0 || k == f->in_use)
        return dt_err_set(err, DT_ESTATE, "train: the device feed has no free slot");
    slot *s = &f->s[k];
    if (b->n > f->cap)
        f->cap = b->n; /* never in fit, whose slots hold its local batch */
    if (!s->hw || b->n > s->cap) {
        slot_free(o, s);
        if (!slot_alloc(f, s, f->cap))
            return dt_err_set(err, DT_ENOMEM,
                              "train: out of memory for the device feed's batch of %d", f->cap);
        s->cap = f->cap;
    }
    /* a new stage moves the model's source addresses (a captured step must be captured again);
     * freeing the old one waits for the step that may still read it */
    if (!f->sx || b->n > f->scap) {
        if (!stage_alloc(f, f->cap))
            return dt_err_set(err, DT_ENOMEM,
                              "train: out of memory for the device feed's batch of %d", f->cap);
        f->scap = f->cap;
    }
    /* the slot's last upload must be done reading its host block before it is rewritten */
    if (o->event_sync)
        o->event_sync(s->up);
    size_t n = (size_t)(b->n > 0 ? b->n : 0);
    s->hb = *b;
    s->hb.x = s->hx;
    s->hb.y_i32 = s->hl;
    s->hb.y_f32 = s->ht;
    s->hb.index = NULL;
    s->has_w = sw != NULL;
    if (b->y_i32 && s->hl)
        memcpy(s->hl, b->y_i32, n * sizeof(int32_t));
    else
        s->hb.y_i32 = NULL;
    if (b->y_f32 && s->ht)
        memcpy(s->ht, b->y_f32, n * f->ys * sizeof(float));
    else
        s->hb.y_f32 = NULL;
    if (sw)
        memcpy(s->hw, sw, n * sizeof(float));
    if (f->set_x) {
        const dt_dataset *ds = f->ds;
        for (size_t i = 0; i < n; i++) {
            size_t idx = b->index[i];
            s->hrows[i] = (int32_t)(ds->x_row ? ds->x_row[idx] : idx);
            s->hrows[n + i] = (int32_t)idx;
        }
    } else if (n) {
        memcpy(s->hx, b->x, n * f->xs * sizeof(float));
    }
    /* the copy stream refills the device block once the compute stream is done with it */
    if (o->event_wait)
        o->event_wait(s->used, true);
    void (*up)(void *, const void *, size_t) = o->upload_async ? o->upload_async : o->upload;
    if (n && f->set_x) {
        up(s->drows, s->hrows, 2 * n * sizeof(int32_t));
    } else if (n) {
        up(s->dx, s->hx, n * f->xs * sizeof(float));
        if (s->hb.y_i32)
            up(s->dl, s->hl, n * sizeof(int32_t));
        if (s->hb.y_f32)
            up(s->dt, s->ht, n * f->ys * sizeof(float));
    }
    if (n && sw)
        up(s->dw, s->hw, n * sizeof(float));
    if (o->event_record)
        o->event_record(s->up, true);
    f->queued = 1;
    return DT_OK;
}

const dt_batch *dt__train_feed_take(dt__train_feed *f, dt_model_batch *mb)
{
    const dt_nn_ops *o = f->o;
    if (!f->queued)
        return NULL;
    dt__train_feed_done(f);
    int k = f->head;
    slot *s = &f->s[k];
    f->head ^= 1;
    f->queued = 0;
    f->in_use = k;
    if (o->event_wait)
        o->event_wait(s->up, false);
    int n = s->hb.n;
    size_t un = (size_t)(n > 0 ? n : 0);
    /* labels are int32 words: gather and copy move them unchanged */
    if (f->set_x && n > 0) {
        o->gather(f->set_x, s->drows, n, f->xs, f->sx);
        if (s->hb.y_i32)
            o->gather((const float *)f->set_l, s->drows + n, n, 1, (float *)f->sl);
        if (s->hb.y_f32)
            o->gather(f->set_y, s->drows + n, n, f->ys, f->st);
    } else if (n > 0) {
        o->copy(un * f->xs, s->dx, f->sx, false);
        if (s->hb.y_i32)
            o->copy(un, (const float *)s->dl, (float *)f->sl, false);
        if (s->hb.y_f32)
            o->copy(un * f->ys, s->dt, f->st, false);
    }
    if (s->has_w && n > 0)
        o->copy(un, s->dw, f->sw, false);
    memset(mb, 0, sizeof *mb);
    mb->labels = s->hb.y_i32;
    mb->targets = s->hb.y_f32;
    mb->sample_weight = s->has_w ? s->hw : NULL;
    mb->n = n;
    mb->x_dev = f->sx;
    mb->labels_dev = s->hb.y_i32 ? f->sl : NULL;
    mb->targets_dev = s->hb.y_f32 ? f->st : NULL;
    mb->sample_weight_dev = s->has_w ? f->sw : NULL;
    return &s->hb;
}

void dt__train_feed_done(dt__train_feed *f)
{
    if (f->in_use < 0)
        return;
    if (f->o->event_record)
        f->o->event_record(f->s[f->in_use].used, false);
    f->in_use = -1;
}

/* "0" off, "1" on, unset or "auto": -1. */
static int env_mode(const char *name)
{
    const char *e = getenv(name);
    if (!e || !*e || !strcmp(e, "auto"))
        return -1;
    return strcmp(e, "0") != 0;
}

/* The pipeline's batches are a pure function of the set, the epoch and the step (its decode has
 * no random transform: augmentation is the model's), so gathering its rows by the pipeline's
 * indices gives the host path's batches. */
dt_status dt__train_feed_open(const dt_nn_ops *o, const dt_dataset *ds, int local_batch,
                              const char *what, dt__train_feed **out, dt_err *err)
{
    *out = NULL;
    int want = env_mode("DTRAIN_FEED"), on_dev = env_mode("DTRAIN_DATA_ON_DEVICE");
    if (want == 0 || (want < 0 && !o->device_memory))
        return DT_OK;
    DT_TRY(dt__train_feed_new(o, local_batch, ds->x_size, ds->y_kind == DT_LABEL_INT32,
                              ds->y_kind == DT_LABEL_FLOAT ? ds->y_size : 0, out, err));
    if (on_dev == 0 || !o->gather)
        return DT_OK;
    uint64_t bytes = dt__train_feed_set_bytes(ds, NULL);
    size_t free_b = 0, total_b = 0;
    bool fits = o->mem_info && o->mem_info(&free_b, &total_b) == 0 && bytes <= free_b / 4;
    if (on_dev < 0 && !(o->device_memory && fits))
        return DT_OK;
    dt_status st = dt__train_feed_set(*out, ds, err);
    if (st == DT_ENOMEM && on_dev < 0) /* auto: the host path still works */
        return DT_OK;
    if (st == DT_OK)
        DT_INFO("train", "the %s set is on the device (%" PRIu64 " MiB), batches gathered there",
                what, bytes >> 20);
    else {
        dt__train_feed_free(*out);
        *out = NULL;
    }
    return st;
}
