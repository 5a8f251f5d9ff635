/*
 * nccl.cu - NCCL among one process's GPUs: the api's clique entries (see api.h).
 */
#include "nn/cuda/internal.cuh"

#include <stdio.h>

int dt_cu_clique_new(int n, const int *devs, void **out, char *msg, size_t len)
{
    (void)n, (void)devs;
    *out = NULL;
    snprintf(msg, len, "this CUDA backend has no NCCL yet");
    return -1;
}

int dt_cu_clique_allreduce(void *c, int m, float *buf, size_t count, char *msg, size_t len)
{
    (void)c, (void)m, (void)buf, (void)count;
    snprintf(msg, len, "this CUDA backend has no NCCL yet");
    return -1;
}

int dt_cu_clique_broadcast(void *c, int m, void *buf, size_t bytes, int root, char *msg, size_t len)
{
    (void)c, (void)m, (void)buf, (void)bytes, (void)root;
    snprintf(msg, len, "this CUDA backend has no NCCL yet");
    return -1;
}

void dt_cu_clique_abort(void *c)
{
    (void)c;
}

void dt_cu_clique_free(void *c)
{
    (void)c;
}
