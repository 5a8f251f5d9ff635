/*
 * gpu.c - finds and loads libdtrain-cuda.so (see gpu.h and nn/cuda/api.h).
 */
#include "nn/gpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIB_NAME "libdtrain-cuda.so"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const dt_nn_cuda_api *loaded;
static dt_err load_err;

static void *try_open(const char *path, char *why, size_t n)
{
    if (access(path, F_OK) != 0)
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && why[0] == '\0') {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : path);
    }
    return h;
}

static void load(void)
{
    char why[512] = "";
    void *h = NULL;
    const char *env = getenv("DTRAIN_CUDA_LIB");
    if (env && *env) {
        h = try_open(env, why, sizeof why);
        if (!h) {
            dt_err_set(&load_err, DT_ENOENT, "DTRAIN_CUDA_LIB=%s: %s", env,
                       why[0] ? why : "no such file");
            return;
        }
    }
    char exe[PATH_MAX];
    ssize_t len = h ? -1 : readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        static const char *const rel[] = {"", "/../bin", "/../lib/dtrain"};
        for (size_t i = 0; !h && i < sizeof rel / sizeof *rel; i++) {
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s%s/" LIB_NAME, exe, rel[i]);
            h = try_open(path, why, sizeof why);
        }
    }
    if (!h) {
        if (why[0])
            dt_err_set(&load_err, DT_ENOENT,
                       "the CUDA backend does not load: %s (put cuBLAS's lib folder on "
                       "LD_LIBRARY_PATH)",
                       why);
        else
            dt_err_set(&load_err, DT_ENOENT,
                       "no CUDA backend: " LIB_NAME " is not next to %s (this build had no nvcc; "
                       "rebuild where it is found, or set DTRAIN_CUDA_LIB)",
                       len > 0 ? exe : "the executable");
        return;
    }
    dt_nn_cuda_api_fn fn;
    *(void **)&fn = dlsym(h, DT_NN_CUDA_API_SYMBOL);
    const dt_nn_cuda_api *api = fn ? fn() : NULL;
    if (!api || api->abi != DT_NN_CUDA_ABI) {
        dt_err_set(&load_err, DT_ENOTSUP,
                   "the CUDA backend " LIB_NAME " is from another build (ABI %d, these binaries "
                   "need %d): rebuild both",
                   api ? api->abi : -1, DT_NN_CUDA_ABI);
        dlclose(h);
        return;
    }
    loaded = api; /* the handle stays open for the process's life */
}

dt_status dt_nn_gpu_load(const dt_nn_cuda_api **out, dt_err *err)
{
    pthread_once(&load_once, load);
    if (!loaded) {
        if (err)
            *err = load_err;
        return load_err.code ? load_err.code : DT_ENOENT;
    }
    *out = loaded;
    return DT_OK;
}

int dt_nn_gpu_count(char *why, size_t n)
{
    const dt_nn_cuda_api *api;
    dt_err err = {0};
    if (dt_nn_gpu_load(&api, &err) != DT_OK) {
        if (why && n)
            snprintf(why, n, "%s", err.msg);
        return 0;
    }
    char msg[512] = "";
    int c = api->device_count(msg, sizeof msg);
    if (c <= 0 && why && n)
        snprintf(why, n, "%s", c < 0 ? msg : "no CUDA device is visible");
    return c < 0 ? 0 : c;
}

dt_status dt_nn_gpu_complete(dt_err *err)
{
    const dt_nn_cuda_api *api;
    DT_TRY(dt_nn_gpu_load(&api, err));
    if (!api->missing || !api->missing[0])
        return DT_OK;
    char names[512] = "";
    size_t used = 0;
    for (size_t i = 0; api->missing[i] && used + 2 < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                 api->missing[i]);
    return dt_err_set(err, DT_ENOTSUP,
                      "the CUDA backend of this build cannot train yet: it lacks the ops %s",
                      names);
}

static dt_status dev_check(const dt_nn_cuda_api **api, int dev, dt_err *err)
{
    if (dt_nn_gpu_load(api, err) != DT_OK)
        return dt_err_prefix(err, "/gpu:%d", dev);
    char msg[512] = "";
    int c = (*api)->device_count(msg, sizeof msg);
    if (c < 0)
        return dt_err_set(err, DT_ENOENT, "/gpu:%d: %s", dev, msg);
    if (dev < 0 || dev >= c)
        return dt_err_set(err, DT_ENOENT, "/gpu:%d: this host has %d visible GPU%s", dev, c,
                          c == 1 ? "" : "s");
    return DT_OK;
}

dt_status dt_nn_gpu_info(int dev, dt_nn_gpu_dev *out, dt_err *err)
{
    const dt_nn_cuda_api *api;
    DT_TRY(dev_check(&api, dev, err));
    char msg[512] = "";
    if (api->device_info(dev, out, msg, sizeof msg) != 0)
        return dt_err_set(err, DT_EIO, "/gpu:%d: %s", dev, msg);
    return DT_OK;
}

dt_status dt_nn_gpu_bind(int dev, bool tf32, const dt_nn_ops **ops, dt_err *err)
{
    const dt_nn_cuda_api *api;
    DT_TRY(dev_check(&api, dev, err));
    char msg[512] = "";
    if (api->bind(dev, tf32, msg, sizeof msg) != 0)
        return dt_err_set(err, DT_EIO, "/gpu:%d: %s", dev, msg);
    *ops = api->ops;
    return DT_OK;
}

void dt_nn_gpu_unbind(void)
{
    if (loaded)
        loaded->unbind();
}

dt_status dt_nn_gpu_sync(dt_err *err)
{
    if (!loaded)
        return dt_err_set(err, DT_ESTATE, "no CUDA backend is loaded");
    char msg[512] = "";
    if (loaded->sync(msg, sizeof msg) != 0)
        return dt_err_set(err, DT_EIO, "GPU: %s", msg);
    return DT_OK;
}

struct dt_nn_gpu_clique {
    const dt_nn_cuda_api *api;
    void *h;
    int devs[64];
};

dt_status dt_nn_gpu_clique_new(int n, const int *devs, dt_nn_gpu_clique **out, dt_err *err)
{
    const dt_nn_cuda_api *api;
    *out = NULL;
    DT_TRY(dt_nn_gpu_load(&api, err));
    if (!api->clique_new)
        return dt_err_set(err, DT_ENOTSUP, "the CUDA backend has no NCCL");
    if (n < 1 || n > 64)
        return dt_err_set(err, DT_EINVAL, "NCCL: %d GPUs (1..64)", n);
    dt_nn_gpu_clique *c = calloc(1, sizeof *c);
    if (!c)
        return dt_err_set(err, DT_ENOMEM, "out of memory");
    c->api = api;
    memcpy(c->devs, devs, (size_t)n * sizeof *devs);
    char msg[512] = "";
    if (api->clique_new(n, devs, &c->h, msg, sizeof msg) != 0) {
        free(c);
        return dt_err_set(err, DT_EIO, "NCCL: %s", msg);
    }
    *out = c;
    return DT_OK;
}

dt_status dt_nn_gpu_clique_allreduce(dt_nn_gpu_clique *c, int m, float *buf, size_t count,
                                     dt_err *err)
{
    char msg[512] = "";
    int rc = c->api->clique_allreduce(c->h, m, buf, count, msg, sizeof msg);
    if (rc != 0) /* -2: aborted for a sibling's failure, which is the one to report */
        return dt_err_set(err, rc == -2 ? DT_ECANCELED : DT_EPEER, "NCCL all-reduce: %s", msg);
    return DT_OK;
}

dt_status dt_nn_gpu_clique_broadcast(dt_nn_gpu_clique *c, int m, void *buf, size_t bytes, int root,
                                     dt_err *err)
{
    char msg[512] = "";
    int rc = c->api->clique_broadcast(c->h, m, buf, bytes, root, msg, sizeof msg);
    if (rc != 0)
        return dt_err_set(err, rc == -2 ? DT_ECANCELED : DT_EPEER, "NCCL broadcast: %s", msg);
    return DT_OK;
}

typedef int (*sharded_fn)(void *c, int m, float *buf, size_t shard, char *msg, size_t len);

/* A reduce-scatter or all-gather through the api's entry fn (NULL: the backend has none). */
static dt_status sharded(dt_nn_gpu_clique *c, sharded_fn fn, const char *what, int m, float *buf,
                         size_t shard, dt_err *err)
{
    char msg[512] = "";
    if (!fn)
        return dt_err_set(err, DT_ENOTSUP, "NCCL: this backend has no %s", what);
    int rc = fn(c->h, m, buf, shard, msg, sizeof msg);
    if (rc != 0) /* -2: aborted for a sibling's failure, which is the one to report */
        return dt_err_set(err, rc == -2 ? DT_ECANCELED : DT_EPEER, "NCCL %s: %s", what, msg);
    return DT_OK;
}

dt_status dt_nn_gpu_clique_reduce_scatter(dt_nn_gpu_clique *c, int m, float *buf, size_t shard,
                                          dt_err *err)
{
    return sharded(c, c->api->clique_reduce_scatter, "reduce-scatter", m, buf, shard, err);
}

dt_status dt_nn_gpu_clique_all_gather(dt_nn_gpu_clique *c, int m, float *buf, size_t shard,
                                      dt_err *err)
{
    return sharded(c, c->api->clique_all_gather, "all-gather", m, buf, shard, err);
}

dt_status dt_nn_gpu_clique_join(dt_nn_gpu_clique *c, int m, dt_err *err)
{
    char msg[512] = "";
    if (c->api->clique_join && c->api->clique_join(c->h, m, msg, sizeof msg) != 0)
        return dt_err_set(err, DT_EIO, "NCCL: %s", msg);
    return DT_OK;
}

void dt_nn_gpu_clique_abort(dt_nn_gpu_clique *c)
{
    if (c)
        c->api->clique_abort(c->h);
}

void dt_nn_gpu_clique_free(dt_nn_gpu_clique *c)
{
    if (!c)
        return;
    c->api->clique_free(c->h);
    free(c);
}
