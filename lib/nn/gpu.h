/*
 * gpu.h - GPUs for nn: the CUDA backend (libdtrain-cuda.so), loaded the first time it is asked
 * for, so binaries built with CUDA run on machines without a driver and CPU jobs never pay for
 * CUDA's initialisation.
 *
 *     const dt_nn_ops *ops;
 *     if (dt_nn_gpu_bind(0, false, &ops, &err) != DT_OK) ...     // on the replica's thread
 *     model with opts.ops = ops; ... per step: dt_nn_gpu_sync(&err)
 *     dt_nn_gpu_unbind();                                        // after the model is freed
 *
 * The library is looked for at $DTRAIN_CUDA_LIB, then next to the executable, in ../bin and in
 * ../lib/dtrain from it (make install's place).
 */
#ifndef DT_NN_GPU_H
#define DT_NN_GPU_H

#include "core/status.h"
#include "nn/cuda/api.h"
#include "nn/ops.h"

#include <stdbool.h>
#include <stddef.h>

typedef dt_nn_cuda_dev dt_nn_gpu_dev;

/* The backend, loaded once (thread-safe); an error says why there is none: no library (a build
 * without nvcc), a library that does not load (cuBLAS not found), a stale one. */
dt_status dt_nn_gpu_load(const dt_nn_cuda_api **out, dt_err *err);
/* DT_OK when the backend fills every op of the table (what training needs); else the error
 * names the missing ones (a backend under construction). The op tests run without it. */
dt_status dt_nn_gpu_complete(dt_err *err);
/* The visible GPUs; 0 when there is no backend, driver or device, and then `why` (may be NULL)
 * says which. Never fails. */
int dt_nn_gpu_count(char *why, size_t n);
dt_status dt_nn_gpu_info(int dev, dt_nn_gpu_dev *out, dt_err *err);
/* Binds the calling thread to GPU dev (its stream and cuBLAS handle) and gives the ops table
 * whose kernels run there. tf32: strategy.precision "tf32". */
dt_status dt_nn_gpu_bind(int dev, bool tf32, const dt_nn_ops **ops, dt_err *err);
void dt_nn_gpu_unbind(void);
/* Waits for the thread's GPU work; the first kernel error since the last sync, if any. */
dt_status dt_nn_gpu_sync(dt_err *err);

/* NCCL among this process's GPUs, one replica each (see the clique entries of nn/cuda/api.h):
 * made once per job by one thread over devs[0..n); DT_ENOTSUP when the backend has no NCCL.
 * allreduce and broadcast are member m's part, called from m's thread (bound to devs[m]), on
 * device or host memory; an all-reduce of device memory overlaps what the thread queues after
 * it, and join (before anything reads its sums) orders the thread's stream after it. abort is
 * thread-safe and makes every pending and later call fail. free (NULL-safe) after every member
 * returned. */
typedef struct dt_nn_gpu_clique dt_nn_gpu_clique;
dt_status dt_nn_gpu_clique_new(int n, const int *devs, dt_nn_gpu_clique **out, dt_err *err);
dt_status dt_nn_gpu_clique_allreduce(dt_nn_gpu_clique *c, int m, float *buf, size_t count,
                                     dt_err *err);
dt_status dt_nn_gpu_clique_broadcast(dt_nn_gpu_clique *c, int m, void *buf, size_t bytes, int root,
                                     dt_err *err);
dt_status dt_nn_gpu_clique_join(dt_nn_gpu_clique *c, int m, dt_err *err);
/* In place over buf, G x shard floats of m's device (the hierarchical all-reduce): member m's
 * shard m becomes the members' sum of it; all_gather copies every member's shard m to all.
 * Both overlap like an all-reduce of device memory: join before reading. */
dt_status dt_nn_gpu_clique_reduce_scatter(dt_nn_gpu_clique *c, int m, float *buf, size_t shard,
                                          dt_err *err);
dt_status dt_nn_gpu_clique_all_gather(dt_nn_gpu_clique *c, int m, float *buf, size_t shard,
                                      dt_err *err);
void dt_nn_gpu_clique_abort(dt_nn_gpu_clique *c);
void dt_nn_gpu_clique_free(dt_nn_gpu_clique *c);

#endif
