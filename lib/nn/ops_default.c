/*
 * ops_default.c - the ops table of a model built without one (dt__nn_ops_default).
 *
 * The CPU's, unless DTRAIN_OPS names another: "guard" (the CPU kernels behind a device
 * backend's walls, dt_nn_ops_guard; DTRAIN_OPS_GUARD=1 says the same) or "/gpu:N" (the CUDA
 * table, the calling thread bound to GPU N the first time it asks). It lets the nn and train
 * tests, written against the default, run on another backend unchanged. A value that cannot be
 * honoured aborts naming it: a run that quietly fell back to the CPU would prove nothing.
 */
#include "nn/gpu.h"
#include "nn/ops_cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A thread bound here never says when it is done: its binding (stream, cuBLAS handle, scratch)
 * is released by a thread-exit destructor, so threads a test starts and joins leak nothing. */
static pthread_key_t unbind_key;
static pthread_once_t unbind_once = PTHREAD_ONCE_INIT;

static void unbind_at_exit(void *unused)
{
    (void)unused;
    dt_nn_gpu_unbind();
}

static void unbind_key_new(void)
{
    if (pthread_key_create(&unbind_key, unbind_at_exit) != 0)
        abort();
}

const dt_nn_ops *dt__nn_ops_default(void)
{
    const char *e = getenv("DTRAIN_OPS"), *g = getenv("DTRAIN_OPS_GUARD");
    if ((!e || !*e) && g && *g && strcmp(g, "0") != 0)
        e = "guard";
    if (!e || !*e || !strcmp(e, "cpu"))
        return dt_nn_ops_cpu();
    if (!strcmp(e, "guard"))
        return dt_nn_ops_guard();
    int dev, end = 0;
    if (sscanf(e, "/gpu:%d%n", &dev, &end) == 1 && e[end] == '\0' && dev >= 0) {
        static _Thread_local const dt_nn_ops *bound;
        dt_err err = {0};
        if (!bound && dt_nn_gpu_bind(dev, false, &bound, &err) != DT_OK) {
            fprintf(stderr, "DTRAIN_OPS=%s: %s\n", e, err.msg);
            abort();
        }
        pthread_once(&unbind_once, unbind_key_new);
        pthread_setspecific(unbind_key, (void *)1);
        return bound;
    }
    fprintf(stderr, "DTRAIN_OPS=%s: give cpu, guard or /gpu:N\n", e);
    abort();
}
