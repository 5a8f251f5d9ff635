/* shard.c - tf.data's AutoShardPolicy as pure functions, and the two shuffles.
 *
 * FILE: file f goes to worker f % W (tf.data shards the file list the same way); a worker with
 *       no file would have nothing to read, so fewer files than workers is an error.
 * DATA: every worker reads every file in the same deterministic order (shuffled with the same
 *       seed everywhere) and keeps positions j with j % W == w.
 * AUTO: FILE when nfiles >= W, else DATA. (tf.data falls back to DATA when it cannot find
 *       files; we fall back when there are too few of them, which is the case that matters.)
 * OFF:  everyone reads everything. */
#include "data/data_internal.h"
#include "core/rng.h"

#include <stdlib.h>
#include <string.h>

dt_status dt_shard_resolve(dt_shard_policy policy, size_t nfiles, int num_workers, int worker_index,
                           dt_shard_plan *out, dt_err *err)
{
    memset(out, 0, sizeof *out);
    if (num_workers < 1 || worker_index < 0 || worker_index >= num_workers)
        return dt_err_set(err, DT_EINVAL, "shard: worker %d of %d is out of range", worker_index,
                          num_workers);
    if (policy == DT_SHARD_AUTO)
        policy = nfiles >= (size_t)num_workers ? DT_SHARD_FILE : DT_SHARD_DATA;
    if (policy == DT_SHARD_FILE && nfiles < (size_t)num_workers)
        return dt_err_set(err, DT_EINVAL,
                          "shard: policy FILE needs at least one file per worker, but there are "
                          "%zu file(s) for %d workers; split the data into more files or use "
                          "\"shard_policy\": \"DATA\" (or AUTO)",
                          nfiles, num_workers);
    out->policy = policy;
    out->num_workers = num_workers;
    out->worker_index = worker_index;
    return DT_OK;
}

bool dt_shard_reads_file(const dt_shard_plan *plan, size_t f)
{
    return plan->policy != DT_SHARD_FILE ||
           f % (size_t)plan->num_workers == (size_t)plan->worker_index;
}

size_t dt_shard_count(const dt_shard_plan *plan, const size_t *file_start, size_t nfiles)
{
    size_t n = file_start[nfiles];
    size_t w = (size_t)plan->worker_index, W = (size_t)plan->num_workers;
    switch (plan->policy) {
    case DT_SHARD_FILE: {
        size_t c = 0;
        for (size_t f = w; f < nfiles; f += W)
            c += file_start[f + 1] - file_start[f];
        return c;
    }
    case DT_SHARD_DATA:
        return n > w ? (n - w + W - 1) / W : 0;
    default:
        return n;
    }
}

void dt_shard_elements(const dt_shard_plan *plan, const size_t *file_start, size_t nfiles,
                       const size_t *order, size_t *out)
{
    size_t n = file_start[nfiles], k = 0;
    size_t w = (size_t)plan->worker_index, W = (size_t)plan->num_workers;
    switch (plan->policy) {
    case DT_SHARD_FILE:
        for (size_t f = w; f < nfiles; f += W)
            for (size_t i = file_start[f]; i < file_start[f + 1]; i++)
                out[k++] = i;
        break;
    case DT_SHARD_DATA:
        for (size_t j = w; j < n; j += W)
            out[k++] = order ? order[j] : j;
        break;
    default:
        for (size_t j = 0; j < n; j++)
            out[k++] = order ? order[j] : j;
        break;
    }
}

dt_status dt_shuffle_apply(const dt_shuffle *sh, uint64_t seed, uint64_t stream, size_t *order,
                           size_t n, dt_err *err)
{
    dt_rng rng;
    dt_rng_seed2(&rng, seed, stream);
    if (sh->kind == DT_SHUFFLE_NONE || n < 2)
        return DT_OK;
    if (sh->kind == DT_SHUFFLE_FULL || sh->buffer >= n) {
        /* Fisher-Yates: a buffer as large as the data is a uniform permutation too. */
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)dt_rng_below(&rng, i + 1);
            size_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        return DT_OK;
    }
    /* tf.data's ShuffleDataset: fill a buffer of K, then repeatedly emit a uniformly chosen
     * slot and refill it with the next input; once the input is exhausted, drain the buffer
     * the same way (swap-remove). Early elements can only move about K places ahead. */
    size_t K = sh->buffer ? sh->buffer : 1;
    size_t *buf = malloc(K * sizeof *buf);
    if (!buf)
        return dt_err_set(err, DT_ENOMEM, "shuffle: cannot allocate a buffer of %zu", K);
    size_t in = 0, fill = 0, o = 0;
    while (fill < K && in < n)
        buf[fill++] = order[in++];
    while (fill > 0) {
        size_t j = (size_t)dt_rng_below(&rng, fill);
        order[o++] = buf[j]; /* o < in always: safe to write over consumed input */
        if (in < n)
            buf[j] = order[in++];
        else
            buf[j] = buf[--fill];
    }
    free(buf);
    return DT_OK;
}
