/*
 * ops_guard.c - the CPU kernels behind the walls of a device backend (see dt_nn_ops_guard).
 *
 * A GPU backend's buffers cannot be read by the host; code above the ops table that forgets it
 * works on the CPU and breaks on the first GPU. This table makes the CPU strict: its memory is
 * one arena mapped PROT_NONE except while a kernel, upload or download runs (then read-write),
 * so a host access outside them faults where it happens, and each kernel aborts naming the
 * argument when a buffer it is handed lies outside the arena (host memory where device memory
 * is due). Allocation is a bump pointer over fresh pages (zeroed, as the contract wants); freed
 * memory is not reused, which tests of a few thousand steps afford.
 *
 * Built with DT_NN_GUARD_FAKE_GPU (the Makefile's FAKEGPU_LIB), the same file is a stand-in CUDA
 * backend, libdtrain-fakegpu.so, with DTRAIN_FAKE_GPUS devices (default 2): each device allocates
 * in its own slice of the arena, a thread's kernels run on the device it bound (none until it
 * binds), and a buffer of another device handed to them aborts, naming both. Loaded through
 * DTRAIN_CUDA_LIB, it lets the CPU-only tests drive the GPU replicas' code: which thread binds
 * where, which device each replica's memory lives on.
 */
#include "nn/ops.h"
#include "nn/ops_cpu.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLICE_BYTES ((size_t)4 << 30) /* a device's share: reserved, not committed */
#define MAX_DEV     4
#define ARENA_BYTES (SLICE_BYTES * MAX_DEV)

#ifdef DT_NN_GUARD_FAKE_GPU
#define UNBOUND (-1) /* a thread runs kernels only after it binds */
#define WHO     "fake GPU"
#else
#define UNBOUND 0 /* the guard is one device, every thread's */
#define WHO     "ops guard"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *arena; /* device d allocates in [arena + d * SLICE_BYTES, + used[d]) */
static size_t used[MAX_DEV], opened_len[MAX_DEV];
static int open_count; /* kernels running: the arena is open while any is */
static const dt_nn_ops *cpu;
static _Thread_local int tls_dev = UNBOUND;

/* A fault inside the arena is the bug this table exists to find: say so, with the stack. */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const char *a = si->si_addr;
    if (a >= arena && a < arena + ARENA_BYTES) {
        static const char msg[] = WHO ": the host touched device memory outside a kernel "
                                      "(use upload/download); stack:\n";
        if (write(2, msg, sizeof msg - 1) < 0) {
        }
        void *pcs[48];
        backtrace_symbols_fd(pcs, backtrace(pcs, 48), 2);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void init(void)
{
    struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    cpu = dt_nn_ops_cpu();
    void *p =
        mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror(WHO ": mmap");
        abort();
    }
    arena = p;
}

/* Every device's used bytes open (read-write) or closed; with the lock held. */
static void protect_all(int prot)
{
    for (int d = 0; d < MAX_DEV; d++) {
        size_t len = prot == PROT_NONE ? opened_len[d] : used[d];
        if (len && mprotect(arena + (size_t)d * SLICE_BYTES, len, prot) != 0) {
            perror(WHO ": mprotect");
            abort();
        }
        opened_len[d] = prot == PROT_NONE ? 0 : len;
    }
}

/* Several replicas' threads may run kernels at once: the arena closes when the last ends. */
static void open_arena(void)
{
    pthread_mutex_lock(&lock);
    bool grown = false; /* memory allocated since the arena was opened */
    for (int d = 0; d < MAX_DEV; d++)
        grown |= used[d] > opened_len[d];
    if (open_count++ == 0 || grown)
        protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&lock);
}

static void close_arena(void)
{
    pthread_mutex_lock(&lock);
    if (--open_count == 0)
        protect_all(PROT_NONE);
    pthread_mutex_unlock(&lock);
}

/* The device whose memory p is, or -1 (host memory). */
static int dev_of(const void *p)
{
    const char *c = p;
    if (!arena || c < arena || c >= arena + ARENA_BYTES)
        return -1;
    int d = (int)((size_t)(c - arena) / SLICE_BYTES);
    return c < arena + (size_t)d * SLICE_BYTES + used[d] ? d : -1;
}

static bool in_arena(const void *p)
{
    return dev_of(p) >= 0;
}

static void check(const char *op, const char *arg, const void *p, bool may_be_null)
{
    if (!p && may_be_null)
        return;
    int d = p ? dev_of(p) : -1;
    if (d >= 0 && d == tls_dev)
        return;
    if (d >= 0)
        fprintf(stderr,
                WHO ": %s: argument %s = %p is memory of /gpu:%d, used by a thread bound to "
                    "/gpu:%d\n",
                op, arg, p, d, tls_dev);
    else
        fprintf(stderr, WHO ": %s: argument %s = %p is %s\n", op, arg, p,
                p ? "not device memory (a host buffer handed to a kernel)" : "NULL");
    abort();
}
/* Host memory where the contract says so (a device buffer there is the bug). */
static void check_host(const char *op, const char *arg, const void *p)
{
    if (p && !in_arena(p))
        return;
    fprintf(stderr, WHO ": %s: argument %s = %p is %s\n", op, arg, p,
            p ? "device memory where host memory is due" : "NULL");
    abort();
}
#define DEV(p) check(__func__, #p, p, false)
#define OPT(p) check(__func__, #p, p, true)

static void *g_alloc(size_t bytes)
{
    pthread_once(&once, init);
    int d = tls_dev;
    if (d < 0) {
        fprintf(stderr, WHO ": alloc on a thread bound to no device\n");
        abort();
    }
    pthread_mutex_lock(&lock);
    size_t at = (used[d] + 63) & ~(size_t)63, len = bytes ? bytes : 1;
    void *p = NULL;
    if (at + len <= SLICE_BYTES) {
        p = arena + (size_t)d * SLICE_BYTES + at;
        used[d] = at + len;
        if (open_count) /* a kernel is running: the new bytes open with the rest */
            protect_all(PROT_READ | PROT_WRITE);
    }
    pthread_mutex_unlock(&lock);
    return p;
}

static void g_free(void *p)
{
    DEV(p);
}

static void g_upload(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    DEV(dst);
    check_host(__func__, "src", src);
    open_arena();
    memcpy(dst, src, bytes);
    close_arena();
}

static void g_download(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    DEV(src);
    check_host(__func__, "dst", dst);
    open_arena();
    memcpy(dst, src, bytes);
    close_arena();
}

static void *g_host_alloc(size_t bytes)
{
    return calloc(1, bytes ? bytes : 1);
}

static void g_host_free(void *p)
{
    check_host(__func__, "p", p);
    free(p);
}

/* The CPU's uploads end before they return: the async one is the checked upload, and the
 * events the caller would need are left NULL. */
static void g_upload_async(void *dst, const void *src, size_t bytes)
{
    g_upload(dst, src, bytes);
}

/* Runs the CPU kernel with the arena open. */
#define RUN(call)                                                                                  \
    do {                                                                                           \
        open_arena();                                                                              \
        cpu->call;                                                                                 \
        close_arena();                                                                             \
    } while (0)

static void g_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc)
{
    DEV(a), DEV(b), DEV(c);
    RUN(gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

static void g_im2col(const dt_nn_win *g, const float *x, float *col)
{
    DEV(x), DEV(col);
    RUN(im2col(g, x, col));
}

static void g_col2im(const dt_nn_win *g, const float *col, float *dx, bool acc)
{
    DEV(col), DEV(dx);
    RUN(col2im(g, col, dx, acc));
}

static void g_bias_add(float *y, const float *b, size_t rows, int cols)
{
    DEV(y), DEV(b);
    RUN(bias_add(y, b, rows, cols));
}

static void g_bias_grad(const float *dy, size_t rows, int cols, float *db, bool acc)
{
    DEV(dy), DEV(db);
    RUN(bias_grad(dy, rows, cols, db, acc));
}

static void g_act_fwd(const dt_nn_act_p *a, const float *z, float *y, size_t rows, int cols)
{
    DEV(z), DEV(y);
    RUN(act_fwd(a, z, y, rows, cols));
}

static void g_act_bwd(const dt_nn_act_p *a, const float *z, const float *y, const float *dy,
                      float *dz, size_t rows, int cols, bool acc)
{
    OPT(z), DEV(y), DEV(dy), DEV(dz);
    RUN(act_bwd(a, z, y, dy, dz, rows, cols, acc));
}

static void g_pool_fwd(dt_nn_pool kind, const dt_nn_win *g, const float *x, float *y, int32_t *arg)
{
    DEV(x), DEV(y), OPT(arg);
    RUN(pool_fwd(kind, g, x, y, arg));
}

static void g_pool_bwd(dt_nn_pool kind, const dt_nn_win *g, const float *dy, const int32_t *arg,
                       float *dx, bool acc)
{
    DEV(dy), OPT(arg), DEV(dx);
    RUN(pool_bwd(kind, g, dy, arg, dx, acc));
}

static void g_bn_fwd(bool training, const float *x, float *y, size_t rows, int cols,
                     const float *gamma, const float *beta, float *mmean, float *mvar,
                     float momentum, float eps, float *smean, float *svar, float relu)
{
    DEV(x), DEV(y), OPT(gamma), OPT(beta), DEV(mmean), DEV(mvar), OPT(smean), OPT(svar);
    RUN(bn_fwd(training, x, y, rows, cols, gamma, beta, mmean, mvar, momentum, eps, smean, svar,
               relu));
}

static void g_bn_bwd(const float *dy, const float *x, size_t rows, int cols, const float *gamma,
                     const float *beta, const float *smean, const float *svar, float eps, float *dx,
                     bool acc, float *dgamma, float *dbeta, float relu)
{
    DEV(dy), DEV(x), OPT(gamma), OPT(beta), DEV(smean), DEV(svar), OPT(dx), OPT(dgamma), OPT(dbeta);
    RUN(bn_bwd(dy, x, rows, cols, gamma, beta, smean, svar, eps, dx, acc, dgamma, dbeta, relu));
}

static void g_dropout_fwd(const float *x, float *y, float *mask, size_t n, float rate, dt_rng *rng)
{
    DEV(x), DEV(y), DEV(mask);
    check_host(__func__, "rng", rng);
    RUN(dropout_fwd(x, y, mask, n, rate, rng));
}

static void g_dropout_fwd_key(const float *x, float *y, float *mask, size_t n, float rate,
                              const uint64_t *key)
{
    DEV(x), DEV(y), DEV(mask), DEV(key);
    RUN(dropout_fwd_key(x, y, mask, n, rate, key));
}

static void g_axpby(size_t n, float a, const float *x, float b, float *y)
{
    DEV(x), DEV(y);
    RUN(axpby(n, a, x, b, y));
}

static void g_mul(size_t n, const float *x, const float *m, float *y, bool acc)
{
    DEV(x), DEV(m), DEV(y);
    RUN(mul(n, x, m, y, acc));
}

static void g_copy(size_t n, const float *x, float *y, bool acc)
{
    DEV(x), DEV(y);
    RUN(copy(n, x, y, acc));
}

static void g_gather(const float *x, const int32_t *rows, int n, size_t cols, float *y)
{
    if (n <= 0)
        return;
    DEV(x), DEV(rows), DEV(y);
    RUN(gather(x, rows, n, cols, y));
}

static void g_copy2d(size_t rows, int cols, const float *x, int ldx, float *y, int ldy, bool acc)
{
    DEV(x), DEV(y);
    RUN(copy2d(rows, cols, x, ldx, y, ldy, acc));
}

static void g_fill(size_t n, float v, float *y)
{
    DEV(y);
    RUN(fill(n, v, y));
}

static void g_loss_dev(const dt_nn_loss_p *p, const float *pred, const int32_t *labels,
                       const float *values, const float *row_w, size_t n, int cols, float scale,
                       float *dpred, double *loss_sum)
{
    DEV(pred), OPT(labels), OPT(values), OPT(row_w), DEV(dpred), DEV(loss_sum), OPT(p->step);
    RUN(loss_dev(p, pred, labels, values, row_w, n, cols, scale, dpred, loss_sum));
}

static void g_regularize_dev(const float *w, float *g, size_t n, float l1, float l2, float scale,
                             double *out)
{
    DEV(w), DEV(g), DEV(out);
    RUN(regularize_dev(w, g, n, l1, l2, scale, out));
}

static void g_hits(dt_nn_hits_kind kind, const float *pred, const int32_t *labels,
                   const float *targets, size_t n, int cols, double *out)
{
    DEV(pred), OPT(labels), OPT(targets), DEV(out);
    RUN(hits(kind, pred, labels, targets, n, cols, out));
}

static void g_clip_norm(float *g, size_t n, size_t nseg, const size_t *off, const size_t *len,
                        float clipnorm, float global_clipnorm, double *ss)
{
    DEV(g), DEV(off), DEV(len), DEV(ss);
    RUN(clip_norm(g, n, nseg, off, len, clipnorm, global_clipnorm, ss));
}

static void g_update(const dt_nn_update *u, float *w, const float *g, size_t n)
{
    DEV(w), DEV(g), OPT(u->ema);
    for (int i = 0; i < 3; i++)
        OPT(u->slot[i]);
    RUN(update(u, w, g, n));
}

static void g_img_flip(int n, int h, int w, int c, const int32_t *flags, const float *x, float *y,
                       bool acc)
{
    DEV(flags), DEV(x), DEV(y);
    RUN(img_flip(n, h, w, c, flags, x, y, acc));
}

static void g_img_adjust(int n, int hw, int c, const float *f, const float *d, float lo, float hi,
                         const float *x, float *y)
{
    OPT(f), OPT(d), DEV(x), DEV(y);
    RUN(img_adjust(n, hw, c, f, d, lo, hi, x, y));
}

static void g_img_adjust_bwd(int n, int hw, int c, const float *f, const float *d, float lo,
                             float hi, const float *x, const float *dy, float *dx, bool acc)
{
    OPT(f), OPT(d), DEV(x), DEV(dy), DEV(dx);
    RUN(img_adjust_bwd(n, hw, c, f, d, lo, hi, x, dy, dx, acc));
}

static void g_img_resize(const dt_nn_resize *g, const float *x, float *y)
{
    DEV(x), DEV(y);
    RUN(img_resize(g, x, y));
}

static void g_img_resize_bwd(const dt_nn_resize *g, const float *dy, float *dx, bool acc)
{
    DEV(dy), DEV(dx);
    RUN(img_resize_bwd(g, dy, dx, acc));
}

static void g_img_transform(const dt_nn_transform *g, const float *t, const float *x, float *y)
{
    DEV(t), DEV(x), DEV(y);
    RUN(img_transform(g, t, x, y));
}

static void g_img_transform_bwd(const dt_nn_transform *g, const float *t, const float *dy,
                                float *dx, bool acc)
{
    DEV(t), DEV(dy), DEV(dx);
    RUN(img_transform_bwd(g, t, dy, dx, acc));
}

static void g_dw_fwd(const dt_nn_win *g, int mult, const float *x, const float *k, float *y)
{
    DEV(x), DEV(k), DEV(y);
    RUN(dw_fwd(g, mult, x, k, y));
}

static void g_dw_bwd(const dt_nn_win *g, int mult, const float *x, const float *k, const float *dy,
                     float *dk, float *dx, bool acc)
{
    DEV(x), DEV(k), DEV(dy), OPT(dk), OPT(dx);
    RUN(dw_bwd(g, mult, x, k, dy, dk, dx, acc));
}

static void g_max_fwd(size_t n, int k, const float *const *xs, float *y, uint8_t *arg)
{
    check_host(__func__, "xs", xs);
    for (int i = 0; i < k; i++)
        check(__func__, "xs[i]", xs[i], false);
    DEV(y), DEV(arg);
    RUN(max_fwd(n, k, xs, y, arg));
}

static void g_max_bwd(size_t n, int i, const uint8_t *arg, const float *dy, float *dx, bool acc)
{
    DEV(arg), DEV(dy), DEV(dx);
    RUN(max_bwd(n, i, arg, dy, dx, acc));
}

static void g_embed_fwd(const float *ids, size_t n, const float *table, int rows, int dim, float *y,
                        float *mask, float *bad)
{
    DEV(ids), DEV(table), DEV(y), OPT(mask), DEV(bad);
    RUN(embed_fwd(ids, n, table, rows, dim, y, mask, bad));
}

static void g_embed_bwd(const float *ids, size_t n, const float *dy, int rows, int dim,
                        float *dtable)
{
    DEV(ids), DEV(dy), DEV(dtable);
    RUN(embed_bwd(ids, n, dy, rows, dim, dtable));
}

static void g_seq_mean(int n, int t, int c, const float *x, const float *mask, float *y)
{
    DEV(x), OPT(mask), DEV(y);
    RUN(seq_mean(n, t, c, x, mask, y));
}

static void g_seq_mean_bwd(int n, int t, int c, const float *dy, const float *mask, float *dx,
                           bool acc)
{
    DEV(dy), OPT(mask), DEV(dx);
    RUN(seq_mean_bwd(n, t, c, dy, mask, dx, acc));
}

static void g_ln_fwd(const float *x, float *y, float *xhat, float *rstd, size_t rows, int cols,
                     const float *gamma, const float *beta, float eps)
{
    DEV(x), DEV(y), DEV(xhat), DEV(rstd), OPT(gamma), OPT(beta);
    RUN(ln_fwd(x, y, xhat, rstd, rows, cols, gamma, beta, eps));
}

static void g_ln_bwd(const float *dy, const float *xhat, const float *rstd, size_t rows, int cols,
                     const float *gamma, float *dx, bool acc, float *dgamma, float *dbeta)
{
    DEV(dy), DEV(xhat), DEV(rstd), OPT(gamma), OPT(dx), OPT(dgamma), OPT(dbeta);
    RUN(ln_bwd(dy, xhat, rstd, rows, cols, gamma, dx, acc, dgamma, dbeta));
}

static void g_attn_mask(float *s, const float *qm, const float *vm, const float *km, int n,
                        int heads, int tq, int tv, bool causal)
{
    DEV(s), OPT(qm), OPT(vm), OPT(km);
    RUN(attn_mask(s, qm, vm, km, n, heads, tq, tv, causal));
}

static void rnn_check(const char *op, const dt_nn_rnn_step *s)
{
    check(op, "mask", s->mask, true);
    check(op, "a", s->a, true);
    check(op, "r", s->r, true);
    check(op, "q", s->q, true);
    check(op, "h0", s->h0, true);
    check(op, "h1", s->h1, true);
    check(op, "c0", s->c0, true);
    check(op, "c1", s->c1, true);
    check(op, "y", s->y, true);
    check(op, "dy", s->dy, true);
    check(op, "dh", s->dh, true);
    check(op, "dc", s->dc, true);
    check(op, "dq", s->dq, true);
}

static void g_rnn_fwd(const dt_nn_rnn_step *s)
{
    rnn_check(__func__, s);
    RUN(rnn_fwd(s));
}

static void g_rnn_bwd(const dt_nn_rnn_step *s)
{
    rnn_check(__func__, s);
    RUN(rnn_bwd(s));
}

static void g_rnn_pack(bool tb, int k, int n, const float *b, int ldb, float *p)
{
    DEV(b), DEV(p);
    RUN(rnn_pack(tb, k, n, b, ldb, p));
}

static void g_rnn_gemm(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                       int ldb, float beta, float *c, int ldc)
{
    DEV(a), DEV(b), DEV(c);
    RUN(rnn_gemm(ta, m, n, k, a, lda, b, ldb, beta, c, ldc));
}

static void g_norm_fwd(const float *x, float *y, const float *mean, const float *var, size_t rows,
                       int cols, bool invert)
{
    DEV(x), DEV(y), DEV(mean), DEV(var);
    RUN(norm_fwd(x, y, mean, var, rows, cols, invert));
}

static void g_norm_bwd(const float *dy, const float *var, float *dx, size_t rows, int cols,
                       bool invert, bool acc)
{
    DEV(dy), DEV(var), DEV(dx);
    RUN(norm_bwd(dy, var, dx, rows, cols, invert, acc));
}

static void g_cat_encode(const float *ids, int n, int t, int tokens, dt_nn_cat_mode mode, float *y,
                         float *bad)
{
    DEV(ids), DEV(y), DEV(bad);
    RUN(cat_encode(ids, n, t, tokens, mode, y, bad));
}

/* Kernels here finish before they return; sync exists so that the trainer's per-step check of a
 * device backend runs in tests, and DTRAIN_OPS_GUARD_SYNC_FAIL=N makes the Nth call fail as a
 * GPU kernel's error would. */
static int g_sync(char *msg, size_t n)
{
    static _Atomic long calls;
    const char *e = getenv("DTRAIN_OPS_GUARD_SYNC_FAIL");
    long at = e ? strtol(e, NULL, 10) : 0, k = ++calls;
    if (at > 0 && k == at) {
        snprintf(msg, n, "an injected kernel error at sync %ld (DTRAIN_OPS_GUARD_SYNC_FAIL)", k);
        return -1;
    }
    return 0;
}

static const dt_nn_ops guard_ops = {
#ifdef DT_NN_GUARD_FAKE_GPU
    .name = "fake-gpu",
#else
    .name = "guard",
#endif
    .device_memory = true,
    .alloc = g_alloc,
    .free = g_free,
    .upload = g_upload,
    .download = g_download,
    .upload_async = g_upload_async,
    .sync = g_sync,
    .gemm = g_gemm,
    .im2col = g_im2col,
    .col2im = g_col2im,
    .bias_add = g_bias_add,
    .bias_grad = g_bias_grad,
    .act_fwd = g_act_fwd,
    .act_bwd = g_act_bwd,
    .pool_fwd = g_pool_fwd,
    .pool_bwd = g_pool_bwd,
    .bn_fwd = g_bn_fwd,
    .bn_bwd = g_bn_bwd,
    .dropout_fwd = g_dropout_fwd,
    .dropout_fwd_key = g_dropout_fwd_key,
    .axpby = g_axpby,
    .mul = g_mul,
    .copy = g_copy,
    .gather = g_gather,
    .copy2d = g_copy2d,
    .fill = g_fill,
    .update = g_update,
    .host_alloc = g_host_alloc,
    .host_free = g_host_free,
    .download_async = g_download,
    .loss_dev = g_loss_dev,
    .regularize_dev = g_regularize_dev,
    .hits = g_hits,
    .clip_norm = g_clip_norm,
    .img_flip = g_img_flip,
    .img_adjust = g_img_adjust,
    .img_adjust_bwd = g_img_adjust_bwd,
    .img_resize = g_img_resize,
    .img_resize_bwd = g_img_resize_bwd,
    .img_transform = g_img_transform,
    .img_transform_bwd = g_img_transform_bwd,
    .dw_fwd = g_dw_fwd,
    .dw_bwd = g_dw_bwd,
    .max_fwd = g_max_fwd,
    .max_bwd = g_max_bwd,
    .embed_fwd = g_embed_fwd,
    .embed_bwd = g_embed_bwd,
    .seq_mean = g_seq_mean,
    .seq_mean_bwd = g_seq_mean_bwd,
    .ln_fwd = g_ln_fwd,
    .ln_bwd = g_ln_bwd,
    .attn_mask = g_attn_mask,
    .rnn_fwd = g_rnn_fwd,
    .rnn_bwd = g_rnn_bwd,
    .rnn_pack = g_rnn_pack,
    .rnn_gemm = g_rnn_gemm,
    .norm_fwd = g_norm_fwd,
    .norm_bwd = g_norm_bwd,
    .cat_encode = g_cat_encode,
};

const dt_nn_ops *dt_nn_ops_guard(void)
{
    pthread_once(&once, init);
    return &guard_ops;
}

#ifdef DT_NN_GUARD_FAKE_GPU
#include "nn/cuda/api.h"

#include <stdatomic.h>

static _Atomic int binds[MAX_DEV]; /* per device, for the tests (dt_nn_fake_gpu_binds) */

static int f_count(char *msg, size_t n)
{
    (void)msg, (void)n;
    const char *e = getenv("DTRAIN_FAKE_GPUS");
    int c = e ? atoi(e) : 2;
    return c < 0 ? 0 : c > MAX_DEV ? MAX_DEV : c;
}

static int f_info(int dev, dt_nn_cuda_dev *out, char *msg, size_t n)
{
    if (dev < 0 || dev >= f_count(NULL, 0)) {
        snprintf(msg, n, "no fake GPU %d", dev);
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "dtrain fake GPU");
    out->sms = 1;
    out->mem = SLICE_BYTES;
    return 0;
}

static int f_bind(int dev, bool tf32, char *msg, size_t n)
{
    (void)tf32;
    if (dev < 0 || dev >= f_count(NULL, 0)) {
        snprintf(msg, n, "no fake GPU %d", dev);
        return -1;
    }
    pthread_once(&once, init);
    tls_dev = dev;
    atomic_fetch_add(&binds[dev], 1);
    return 0;
}

static void f_unbind(void)
{
    tls_dev = UNBOUND;
}

__attribute__((visibility("default"))) int dt_nn_fake_gpu_binds(int dev)
{
    return dev >= 0 && dev < MAX_DEV ? atomic_load(&binds[dev]) : -1;
}

/* The clique (NCCL's stand-in): members meet at a barrier with a deadline; each sums every
 * member's buffer in member order, so all end with the same bits, as NCCL's ring does. */
typedef struct fclique {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned gen;
    bool aborted;
    void *bufs[MAX_DEV];
} fclique;

static int f_clique_new(int n, const int *devs, void **out, char *msg, size_t len)
{
    for (int i = 0; i < n; i++)
        if (devs[i] < 0 || devs[i] >= f_count(NULL, 0)) {
            snprintf(msg, len, "no fake GPU %d", devs[i]);
            return -1;
        }
    fclique *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(msg, len, "out of memory");
        return -1;
    }
    c->n = n;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = c;
    return 0;
}

/* 0 once every member arrived; -1 when aborted or after 60 s (then aborted for all). */
static int f_barrier(fclique *c)
{
    pthread_mutex_lock(&c->mu);
    unsigned gen = c->gen;
    if (++c->arrived == c->n) {
        c->arrived = 0;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
    } else {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 60;
        while (gen == c->gen && !c->aborted)
            if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) != 0) {
                c->aborted = true;
                pthread_cond_broadcast(&c->cv);
            }
    }
    int rc = c->aborted ? -1 : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static _Atomic long clique_calls; /* all-reduces, every member's */

__attribute__((visibility("default"))) long dt_nn_fake_gpu_clique_calls(void)
{
    return atomic_load(&clique_calls);
}

static int f_clique_allreduce(void *cv, int m, float *buf, size_t count, char *msg, size_t len)
{
    fclique *c = cv;
    atomic_fetch_add(&clique_calls, 1);
    if (in_arena(buf))
        check(__func__, "buf", buf, false);
    c->bufs[m] = buf;
    float *sum = malloc((count ? count : 1) * sizeof *sum);
    int rc = sum ? f_barrier(c) : -1;
    open_arena();
    for (size_t i = 0; rc == 0 && i < count; i++) {
        float v = ((float *)c->bufs[0])[i];
        for (int k = 1; k < c->n; k++)
            v += ((float *)c->bufs[k])[i];
        sum[i] = v;
    }
    close_arena();
    if (rc == 0)
        rc = f_barrier(c); /* every member has read every buffer */
    if (rc == 0) {
        open_arena();
        memcpy(buf, sum, count * sizeof *sum);
        close_arena();
    }
    free(sum);
    if (rc != 0) {
        snprintf(msg, len, "the fake clique was aborted");
        rc = -2; /* as NCCL's: an echo of the cause */
    }
    return rc;
}

static int f_clique_broadcast(void *cv, int m, void *buf, size_t bytes, int root, char *msg,
                              size_t len)
{
    fclique *c = cv;
    if (in_arena(buf))
        check(__func__, "buf", buf, false);
    c->bufs[m] = buf;
    int rc = f_barrier(c);
    if (rc == 0 && m != root) {
        open_arena();
        memcpy(buf, c->bufs[root], bytes);
        close_arena();
    }
    if (rc == 0)
        rc = f_barrier(c);
    if (rc != 0) {
        snprintf(msg, len, "the fake clique was aborted");
        rc = -2; /* as NCCL's: an echo of the cause */
    }
    return rc;
}

static void f_clique_abort(void *cv)
{
    fclique *c = cv;
    pthread_mutex_lock(&c->mu);
    c->aborted = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void f_clique_free(void *cv)
{
    fclique *c = cv;
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* In place over buf (n x shard floats): reduce, a reduce-scatter (member m's shard m becomes
 * the sum of every member's), else an all-gather. Done when it returns; the sums in member order.
 */
static int f_sharded(fclique *c, int m, float *buf, size_t shard, bool reduce, char *msg,
                     size_t len)
{
    atomic_fetch_add(&clique_calls, 1);
    if (in_arena(buf))
        check(__func__, "buf", buf, false);
    c->bufs[m] = buf;
    float *sum = malloc((shard ? shard : 1) * sizeof *sum);
    int rc = sum ? f_barrier(c) : -1;
    open_arena();
    for (size_t i = 0; rc == 0 && reduce && i < shard; i++) {
        float v = ((float *)c->bufs[0])[(size_t)m * shard + i];
        for (int k = 1; k < c->n; k++)
            v += ((float *)c->bufs[k])[(size_t)m * shard + i];
        sum[i] = v;
    }
    /* all-gather: shard k of member k is never written, so it is read while others write */
    for (int k = 0; rc == 0 && !reduce && k < c->n; k++)
        if (k != m)
            memcpy(buf + (size_t)k * shard, (float *)c->bufs[k] + (size_t)k * shard,
                   shard * sizeof *buf);
    close_arena();
    if (rc == 0)
        rc = f_barrier(c); /* every member has read every buffer */
    if (rc == 0 && reduce) {
        open_arena();
        memcpy(buf + (size_t)m * shard, sum, shard * sizeof *sum);
        close_arena();
    }
    free(sum);
    if (rc != 0) {
        snprintf(msg, len, "the fake clique was aborted");
        rc = -2;
    }
    return rc;
}

static int f_clique_reduce_scatter(void *cv, int m, float *buf, size_t shard, char *msg, size_t len)
{
    return f_sharded(cv, m, buf, shard, true, msg, len);
}

static int f_clique_all_gather(void *cv, int m, float *buf, size_t shard, char *msg, size_t len)
{
    return f_sharded(cv, m, buf, shard, false, msg, len);
}

/* The stand-in's all-reduces are done when they return: nothing to order after them. */
static int f_clique_join(void *cv, int m, char *msg, size_t len)
{
    fclique *c = cv;
    if (m < 0 || m >= c->n) {
        snprintf(msg, len, "fake clique: member %d of %d", m, c->n);
        return -1;
    }
    return 0;
}

static const char *const none[] = {NULL};
static const dt_nn_cuda_api fake_api = {
    .abi = DT_NN_CUDA_ABI,
    .device_count = f_count,
    .device_info = f_info,
    .bind = f_bind,
    .unbind = f_unbind,
    .sync = g_sync,
    .ops = &guard_ops,
    .missing = none,
    .clique_new = f_clique_new,
    .clique_allreduce = f_clique_allreduce,
    .clique_broadcast = f_clique_broadcast,
    .clique_join = f_clique_join,
    .clique_reduce_scatter = f_clique_reduce_scatter,
    .clique_all_gather = f_clique_all_gather,
    .clique_abort = f_clique_abort,
    .clique_free = f_clique_free,
};

__attribute__((visibility("default"))) const dt_nn_cuda_api *dt_nn_cuda_api_v1(void)
{
    return &fake_api;
}
#endif
