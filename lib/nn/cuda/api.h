/*
 * api.h - the contract between libdtrain and the CUDA backend (libdtrain-cuda.so).
 *
 * The backend is a shared object that libdtrain loads with dlopen the first time a job asks for
 * a GPU (lib/nn/gpu.c), so the same binaries run on a machine without a driver and CPU runs never
 * initialise CUDA. It exports one C function, dt_nn_cuda_api_v1, returning this table; abi must
 * equal DT_NN_CUDA_ABI or the loader refuses the library (a stale build next to new binaries).
 *
 * Threads: every GPU replica runs on its own trainer thread, which calls bind once; the kernels
 * of `ops` then run on that thread's device and stream with its cuBLAS handle. Kernels return
 * nothing: the first CUDA error of a thread is kept and reported by sync (or bind), which the
 * trainer calls once per step, so a step costs one host synchronisation.
 * Graphs: ops->graph_begin/graph_end/graph_launch/graph_free capture the thread's stream into a
 * CUDA graph and replay it (see ops.h); nothing is allocated or synchronised inside a capture.
 * Numbers: strict float32 (no TF32 unless bind's tf32), reductions in a fixed order without
 * atomics on floats, so two runs give the same bits.
 */
#ifndef DT_NN_CUDA_API_H
#define DT_NN_CUDA_API_H

#include "nn/ops.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_NN_CUDA_ABI 9

/* One device as the runtime describes it. */
typedef struct dt_nn_cuda_dev {
    char name[256]; /* "NVIDIA H200" */
    int cc_major, cc_minor;
    int sms;             /* multiprocessors */
    uint64_t mem;        /* bytes */
    int driver, runtime; /* versions, 13000 = 13.0 */
} dt_nn_cuda_dev;

typedef struct dt_nn_cuda_api {
    int abi;
    /* The visible devices (CUDA_VISIBLE_DEVICES applies): >= 0, or -1 with a message (no
     * driver, driver too old). No device is not an error: 0. */
    int (*device_count)(char *msg, size_t n);
    int (*device_info)(int dev, dt_nn_cuda_dev *out, char *msg, size_t n);
    /* Binds the calling thread to dev: creates its stream and cuBLAS handle; tf32 lets cuBLAS
     * use TF32 tensor cores (strategy.precision "tf32"). 0, or -1 with a message. */
    int (*bind)(int dev, bool tf32, char *msg, size_t n);
    /* Frees the thread's stream, handle and scratch (after its buffers are freed). */
    void (*unbind)(void);
    /* Waits for the thread's stream; 0, or -1 with the first error since the last sync (and
     * the kernel that met it), which it then clears. */
    int (*sync)(char *msg, size_t n);
    /* The ops table; kernels use the calling thread's binding. */
    const dt_nn_ops *ops;
    /* Names of ops entries the backend leaves NULL (a backend under construction), for the
     * loader's refusal: a NULL-terminated list. */
    const char *const *missing;

    /* NCCL among one process's GPUs, one replica each (MirroredStrategy on one host).
     * clique_new: one communicator per device of devs[0..n) (ncclCommInitAll's recipe, non-blocking
     * communicators so that abort can end a member stuck while connecting), made once per job
     * by one thread before the replicas start; 0, or -1 with a message.
     * clique_allreduce: member m's part of an in-place SUM all-reduce of count floats, issued on
     * the calling thread's stream (the thread is bound to devs[m]); every member calls it with the
     * same counts in the same order, each from its own thread. buf is device memory of that
     * device (then the call returns once it is queued: the stream orders what follows), or host
     * memory (then staged through the device and waited for). Every member ends with the same
     * bits. An all-reduce of device memory runs on the member's side stream, after the work
     * queued so far on the thread's stream, so that it overlaps what the thread queues next;
     * clique_join makes the thread's stream wait for the member's all-reduces so far (queued,
     * not waited for: a CUDA graph captures it), which must come before anything reads their
     * sums. clique_broadcast: like an all-reduce, bytes from member root, on the thread's stream.
     * clique_abort: makes every member's pending and later calls fail (ncclCommAbort), so a
     * replica that failed or hung cannot leave its siblings waiting on the GPU. Thread-safe.
     * A call that fails because the clique was aborted returns -2 (an echo of the cause, which
     * the caller reports instead), other failures -1.
     * clique_free: after every member returned. */
    int (*clique_new)(int n, const int *devs, void **out, char *msg, size_t len);
    int (*clique_allreduce)(void *c, int m, float *buf, size_t count, char *msg, size_t len);
    int (*clique_broadcast)(void *c, int m, void *buf, size_t bytes, int root, char *msg,
                            size_t len);
    int (*clique_join)(void *c, int m, char *msg, size_t len);
    /* In-place SUM reduce-scatter and all-gather of buf, n members x shard floats of device
     * memory (the hierarchical all-reduce across hosts): after reduce_scatter, member m's shard
     * buf[m * shard, (m + 1) * shard) holds every member's sum of it; all_gather gives every
     * member every member's shard m. On the side stream, like an all-reduce of device memory:
     * join before reading. Every member ends with the same bits. */
    int (*clique_reduce_scatter)(void *c, int m, float *buf, size_t shard, char *msg, size_t len);
    int (*clique_all_gather)(void *c, int m, float *buf, size_t shard, char *msg, size_t len);
    void (*clique_abort)(void *c);
    void (*clique_free)(void *c);
} dt_nn_cuda_api;

typedef const dt_nn_cuda_api *(*dt_nn_cuda_api_fn)(void);
#define DT_NN_CUDA_API_SYMBOL "dt_nn_cuda_api_v1"

#ifdef __cplusplus
}
#endif

#endif
