/*
 * ctx.cu - the CUDA backend's entry point: devices, the per-thread binding (device, stream,
 * cuBLAS handle, scratch), errors, memory, and the ops table the kernel files fill.
 */
#include "nn/cuda/internal.cuh"

#include <mutex>
#include <new>
#include <stdio.h>
#include <string.h>

static thread_local dt_cu_ctx tls_ctx;

dt_cu_ctx *dt_cu_ctx_get(void)
{
    return &tls_ctx;
}

cudaStream_t dt_cu_stream(void)
{
    return tls_ctx.stream;
}

cublasHandle_t dt_cu_blas(void)
{
    return tls_ctx.blas;
}

void dt_cu_fail(const char *what, const char *file, int line, const char *text)
{
    dt_cu_ctx *c = &tls_ctx;
    if (c->err[0])
        return;
    const char *base = strrchr(file, '/');
    snprintf(c->err, sizeof c->err, "%s (%s:%d): %s", what, base ? base + 1 : file, line,
             text ? text : "unknown error");
}

static void say(char *msg, size_t n, const char *fmt, const char *a, const char *b)
{
    if (msg && n)
        snprintf(msg, n, fmt, a, b);
}

void *dt_cu_scratch(size_t bytes)
{
    dt_cu_ctx *c = &tls_ctx;
    if (bytes <= c->scratch_bytes)
        return c->scratch;
    if (c->scratch && c->graphs > 0 && c->n_retired == c->cap_retired) {
        int cap = c->cap_retired ? 2 * c->cap_retired : 8;
        void **r = (void **)realloc(c->retired, (size_t)cap * sizeof *r);
        if (r) {
            c->retired = r;
            c->cap_retired = cap;
        }
    }
    if (c->scratch && c->graphs > 0 && c->n_retired < c->cap_retired) {
        c->retired[c->n_retired++] = c->scratch; /* a graph's kernels read it */
    } else if (c->scratch && c->graphs > 0) {
        dt_cu_fail("scratch", __FILE__, __LINE__, "out of host memory to keep a graph's scratch");
        return NULL;
    } else if (c->scratch) {
        DT_CU(cudaStreamSynchronize(c->stream)); /* a kernel may still read the old one */
        DT_CU(cudaFree(c->scratch));
    }
    c->scratch = NULL;
    c->scratch_bytes = 0;
    size_t grow = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes + bytes / 2;
    void *p = NULL;
    DT_CU(cudaMalloc(&p, grow));
    if (!p)
        return NULL;
    c->scratch = p;
    c->scratch_bytes = grow;
    return p;
}

void dt_cu_download_sync(void *host, const void *dev, size_t bytes)
{
    DT_CU(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, tls_ctx.stream));
    DT_CU(cudaStreamSynchronize(tls_ctx.stream));
}

/* --- memory ----------------------------------------------------------------------------------- */

static void *cu_alloc(size_t bytes)
{
    if (!tls_ctx.bound) {
        dt_cu_fail("alloc", __FILE__, __LINE__, "the thread is not bound to a device");
        return NULL;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorStreamCaptureUnsupported) /* a graph's capture: the capture fails */
        dt_cu_fail("cudaMalloc", __FILE__, __LINE__, cudaGetErrorString(e));
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is the caller's NULL, not a sticky error */
        return NULL;
    }
    DT_CU(cudaMemsetAsync(p, 0, bytes, tls_ctx.stream));
    return p;
}

static void cu_free(void *p)
{
    DT_CU(cudaStreamSynchronize(tls_ctx.stream));
    DT_CU(cudaFree(p));
}

/* A pageable source is staged before cudaMemcpyAsync returns, so the caller may reuse it. */
static void cu_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        DT_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, tls_ctx.stream));
}

static void cu_download(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        dt_cu_download_sync(dst, src, bytes);
}

/* --- feeding and the step's downloads: pinned memory, the copy stream, events --------------- */

/* Pinned: a copy into pageable memory would return only once the stream got there. */
static void *cu_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is the caller's NULL, as alloc's */
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cu_host_free(void *p)
{
    DT_CU(cudaStreamSynchronize(tls_ctx.stream)); /* a queued download may still write it */
    DT_CU(cudaFreeHost(p));
}

/* Queued behind the step's kernels; the host reads dst after the next sync. */
static void cu_download_async(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        DT_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, tls_ctx.stream));
}

/* The thread's copy stream; NULL (and the sticky error set) when it cannot be made. */
static cudaStream_t copy_stream(void)
{
    dt_cu_ctx *c = &tls_ctx;
    if (!c->bound) {
        dt_cu_fail("copy stream", __FILE__, __LINE__, "the thread is not bound to a device");
        return NULL;
    }
    if (!c->copy)
        DT_CU(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    return c->copy;
}

static void cu_upload_async(void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = bytes ? copy_stream() : NULL;
    if (s)
        DT_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
}

static void *cu_event_new(void)
{
    cudaEvent_t e = NULL;
    /* no timing: recording is then a marker only, the cheapest kind */
    DT_CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}

static void cu_event_free(void *ev)
{
    if (ev)
        DT_CU(cudaEventDestroy((cudaEvent_t)ev));
}

static void cu_event_record(void *ev, bool copy)
{
    cudaStream_t s = copy ? copy_stream() : tls_ctx.stream;
    if (ev && (s || !copy))
        DT_CU(cudaEventRecord((cudaEvent_t)ev, s));
}

static void cu_event_wait(void *ev, bool copy)
{
    cudaStream_t s = copy ? copy_stream() : tls_ctx.stream;
    if (ev && (s || !copy))
        DT_CU(cudaStreamWaitEvent(s, (cudaEvent_t)ev, 0));
}

static void cu_event_sync(void *ev)
{
    if (ev)
        DT_CU(cudaEventSynchronize((cudaEvent_t)ev));
}

static int cu_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* the caller's -1: it then keeps the data on the host */
        return -1;
    }
    return 0;
}

void dt_cu_fill_mem(dt_nn_ops *o)
{
    o->host_alloc = cu_host_alloc;
    o->host_free = cu_host_free;
    o->download_async = cu_download_async;
    o->mem_info = cu_mem_info;
    o->alloc = cu_alloc;
    o->free = cu_free;
    o->upload = cu_upload;
    o->download = cu_download;
    o->upload_async = cu_upload_async;
    o->event_new = cu_event_new;
    o->event_free = cu_event_free;
    o->event_record = cu_event_record;
    o->event_wait = cu_event_wait;
    o->event_sync = cu_event_sync;
}

/* --- devices and binding ---------------------------------------------------------------------- */

static int device_count(char *msg, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice) {
        (void)cudaGetLastError();
        return 0;
    }
    if (e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        say(msg, n, "%s%s",
            "no NVIDIA driver for CUDA 13 (libcuda.so.1 missing or older than the runtime)", "");
        return -1;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        say(msg, n, "cudaGetDeviceCount: %s%s", cudaGetErrorString(e), "");
        return -1;
    }
    return count;
}

static int device_info(int dev, dt_nn_cuda_dev *out, char *msg, size_t n)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        say(msg, n, "cudaGetDeviceProperties: %s%s", cudaGetErrorString(e), "");
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sms = p.multiProcessorCount;
    out->mem = p.totalGlobalMem;
    cudaDriverGetVersion(&out->driver);
    cudaRuntimeGetVersion(&out->runtime);
    return 0;
}

static int take_err(char *msg, size_t n)
{
    dt_cu_ctx *c = &tls_ctx;
    if (!c->err[0])
        return 0;
    say(msg, n, "%s%s", c->err, "");
    c->err[0] = '\0';
    return -1;
}

/* --- CUDA graphs ------------------------------------------------------------------------------ */

/* A captured step. ThreadLocal capture: another replica's thread may allocate or synchronise
 * while this one captures (Global mode would refuse its calls); this thread may not. */
struct dt_cu_graph {
    cudaGraphExec_t exec;
};

static void free_retired(dt_cu_ctx *c)
{
    if (!c->n_retired)
        return;
    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->n_retired; i++)
        cudaFree(c->retired[i]);
    c->n_retired = 0;
}

static int graph_begin(char *msg, size_t n)
{
    dt_cu_ctx *c = &tls_ctx;
    if (!c->bound) {
        say(msg, n, "%s%s", "graph capture: the thread is not bound to a device", "");
        return -1;
    }
    if (c->err[0]) { /* an earlier error is the step's to report, before any capture */
        say(msg, n, "graph capture: %s%s", c->err, "");
        c->err[0] = '\0';
        return -1;
    }
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        say(msg, n, "cudaStreamBeginCapture: %s%s", cudaGetErrorString(e), "");
        return -1;
    }
    return 0;
}

static int graph_end(void **out, char *msg, size_t n)
{
    dt_cu_ctx *c = &tls_ctx;
    *out = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    (void)cudaGetLastError();
    /* The first error met while capturing (an allocation, a synchronisation) says why. */
    if (c->err[0] || e != cudaSuccess) {
        if (c->err[0])
            say(msg, n, "graph capture: %s%s", c->err, "");
        else
            say(msg, n, "cudaStreamEndCapture: %s%s", cudaGetErrorString(e), "");
        c->err[0] = '\0';
        if (g)
            cudaGraphDestroy(g);
        return -1;
    }
    dt_cu_graph *h = new (std::nothrow) dt_cu_graph();
    e = h ? cudaGraphInstantiate(&h->exec, g, 0) : cudaErrorMemoryAllocation;
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        delete h;
        say(msg, n, "cudaGraphInstantiate: %s%s", cudaGetErrorString(e), "");
        return -1;
    }
    c->graphs++;
    *out = h;
    return 0;
}

static int graph_launch(void *g, char *msg, size_t n)
{
    dt_cu_ctx *c = &tls_ctx;
    cudaError_t e = cudaGraphLaunch(((dt_cu_graph *)g)->exec, c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        say(msg, n, "cudaGraphLaunch: %s%s", cudaGetErrorString(e), "");
        return -1;
    }
    return 0;
}

static void graph_free(void *g)
{
    dt_cu_ctx *c = &tls_ctx;
    if (!g)
        return;
    cudaStreamSynchronize(c->stream); /* a launch of it may still run */
    cudaGraphExecDestroy(((dt_cu_graph *)g)->exec);
    delete (dt_cu_graph *)g;
    if (--c->graphs == 0)
        free_retired(c);
}

void dt_cu_fill_graph(dt_nn_ops *o)
{
    o->graph_begin = graph_begin;
    o->graph_end = graph_end;
    o->graph_launch = graph_launch;
    o->graph_free = graph_free;
}

static void unbind(void)
{
    dt_cu_ctx *c = &tls_ctx;
    if (!c->bound)
        return;
    cudaStreamSynchronize(c->stream);
    free_retired(c);
    free(c->retired);
    if (c->blas_ws)
        cudaFree(c->blas_ws);
    if (c->copy) {
        cudaStreamSynchronize(c->copy);
        cudaStreamDestroy(c->copy);
    }
    if (c->scratch)
        cudaFree(c->scratch);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    memset(c, 0, sizeof *c);
}

#define BLAS_WS_BYTES ((size_t)32 << 20)

static int bind(int dev, bool tf32, char *msg, size_t n)
{
    dt_cu_ctx *c = &tls_ctx;
    unbind();
    c->dev = dev;
    DT_CU(cudaSetDevice(dev));
    if (!c->err[0])
        DT_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    if (!c->err[0])
        DT_CUBLAS(cublasCreate(&c->blas));
    if (!c->err[0])
        DT_CUBLAS(cublasSetStream(c->blas, c->stream));
    /* cuBLAS's own workspace, so that a GEMM captured into a graph allocates nothing (32 MiB:
     * NVIDIA's recommendation for Hopper). */
    if (!c->err[0])
        DT_CU(cudaMalloc(&c->blas_ws, BLAS_WS_BYTES));
    if (!c->err[0])
        DT_CUBLAS(cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES));
    /* CUBLAS_DEFAULT_MATH keeps float32 GEMMs in float32; TF32 only when the spec asks. */
    if (!c->err[0])
        DT_CUBLAS(
            cublasSetMathMode(c->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    c->tf32 = tf32;
    c->bound = !c->err[0];
    if (!c->bound) {
        char e[sizeof c->err];
        memcpy(e, c->err, sizeof e);
        unbind();
        say(msg, n, "%s%s", e, "");
        return -1;
    }
    return 0;
}

static int sync(char *msg, size_t n)
{
    dt_cu_ctx *c = &tls_ctx;
    if (!c->bound) {
        say(msg, n, "%s%s", "sync: the thread is not bound to a device", "");
        return -1;
    }
    DT_CU(cudaStreamSynchronize(c->stream));
    return take_err(msg, n);
}

/* --- the table -------------------------------------------------------------------------------- */

#define DT_CU_OPS(X)                                                                               \
    X(alloc)                                                                                       \
    X(free)                                                                                        \
    X(upload)                                                                                      \
    X(download)                                                                                    \
    X(gemm)                                                                                        \
    X(im2col) X(col2im) X(bias_add) X(bias_grad) X(act_fwd) X(act_bwd) X(pool_fwd) X(pool_bwd)     \
        X(bn_fwd) X(bn_bwd) X(dropout_fwd) X(axpby) X(mul) X(copy) X(copy2d) X(fill) X(gather)     \
            X(update) X(img_flip) X(img_adjust) X(img_adjust_bwd)                                  \
                X(img_resize) X(img_resize_bwd) X(img_transform) X(img_transform_bwd) X(dw_fwd)    \
                    X(dw_bwd) X(max_fwd) X(max_bwd) X(embed_fwd) X(embed_bwd) X(seq_mean)          \
                        X(seq_mean_bwd) X(ln_fwd) X(ln_bwd) X(attn_mask) X(rnn_fwd) X(rnn_bwd)     \
                            X(norm_fwd) X(norm_bwd) X(cat_encode) X(host_alloc) X(host_free)       \
                                X(download_async) X(loss_dev) X(regularize_dev) X(hits)            \
                                    X(clip_norm)

static dt_nn_ops table;
static const char *missing[64];
static dt_nn_cuda_api api;
static std::once_flag once;

static void build(void)
{
    table.name = "cuda";
    table.device_memory = true;
    table.sync = sync;
    dt_cu_fill_mem(&table);
    dt_cu_fill_gemm(&table);
    dt_cu_fill_elem(&table);
    dt_cu_fill_conv(&table);
    dt_cu_fill_norm(&table);
    dt_cu_fill_train(&table);
    dt_cu_fill_image(&table);
    dt_cu_fill_seq(&table);
    dt_cu_fill_graph(&table);
    size_t k = 0;
#define DT_CU_MISSING(name)                                                                        \
    if (!table.name && k + 1 < sizeof missing / sizeof *missing)                                   \
        missing[k++] = #name;
    DT_CU_OPS(DT_CU_MISSING)
#undef DT_CU_MISSING
    missing[k] = NULL;
    api.abi = DT_NN_CUDA_ABI;
    api.device_count = device_count;
    api.device_info = device_info;
    api.bind = bind;
    api.unbind = unbind;
    api.sync = sync;
    api.ops = &table;
    api.missing = missing;
    api.clique_new = dt_cu_clique_new;
    api.clique_allreduce = dt_cu_clique_allreduce;
    api.clique_broadcast = dt_cu_clique_broadcast;
    api.clique_join = dt_cu_clique_join;
    api.clique_reduce_scatter = dt_cu_clique_reduce_scatter;
    api.clique_all_gather = dt_cu_clique_all_gather;
    api.clique_abort = dt_cu_clique_abort;
    api.clique_free = dt_cu_clique_free;
}

extern "C" __attribute__((visibility("default"))) const dt_nn_cuda_api *dt_nn_cuda_api_v1(void)
{
    std::call_once(once, build);
    return &api;
}
