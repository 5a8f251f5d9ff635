/* test_service_gpu_fake.c - the trainer's GPU replicas without a GPU: the stand-in backend
 * (build/libdtrain-fakegpu.so, the CPU kernels as 2 devices, loaded through DTRAIN_CUDA_LIB as
 * the real one is) aborts when a kernel gets memory of another device than its thread's or runs
 * on a thread bound to none, and faults on host access to device memory. A job on
 * ["/gpu:0", "/gpu:1"] must bind each replica's thread to its device, keep each model on it, and
 * end with the bits of the same job on ["/cpu:0", "/cpu:1"], all-reducing through the clique
 * (NCCL's stand-in: the gradient buckets in device memory); one on "/gpu:1" alone runs there. */
#include "core/clock.h"
#include "nn/gpu.h"
#include "service/service_internal.h"
#include "test_train_util.h"

#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct run_out {
    dt_status st;
    char error[1024], hash[32];
} run_out;

static dt_status on_prepared(void *ctx, bool ok, const char *error, uint64_t examples,
                             uint64_t params, uint64_t steps, dt_err *err)
{
    (void)ctx, (void)examples, (void)params, (void)steps, (void)err;
    if (!ok)
        fprintf(stderr, "prepare: %s\n", error);
    return DT_OK;
}
static void on_progress(void *ctx, const jevent *ev)
{
    (void)ctx, (void)ev;
}
static void on_comm(void *ctx, dt_comm *c)
{
    (void)ctx, (void)c;
}
static void on_finished(void *ctx, dt_status st, const char *error, const char *hash,
                        const char *path, const char *stopped)
{
    (void)path, (void)stopped;
    run_out *o = ctx;
    o->st = st;
    snprintf(o->error, sizeof o->error, "%s", error);
    snprintf(o->hash, sizeof o->hash, "%s", hash);
}

/* The job spec with $.strategy.devices = devices, run by the trainer on this thread. */
static run_out run_job(const char *devices, const char *job)
{
    char extra[256], dir[1024];
    snprintf(extra, sizeof extra, ", \"strategy\": {\"devices\": %s}", devices);
    const char *spec = tt_spec_model(TT_MODEL_DROPOUT, 2, 16, "\"adam\"", extra);
    snprintf(dir, sizeof dir, "%s/%s", dt_test_tmpdir(), job);
    ASSERT_EQ(mkdir(dir, 0755), 0);
    dt_cluster_spec cluster;
    dt_err err = {0};
    const char *tf = "{\"cluster\": {\"worker\": [\"127.0.0.1:1\"]}, \"task\": {\"type\": "
                     "\"worker\", \"index\": 0}}";
    ASSERT_OK(dt_tfconfig_parse(tf, strlen(tf), &cluster, &err), &err);
    atomic_bool cancel = false;
    run_out o = {.st = DT_EINVAL};
    trainer_task t = {.spec_json = spec,
                      .spec_len = strlen(spec),
                      .world = 1,
                      .job_dir = dir,
                      .data_root = dt_test_tmpdir(),
                      .state_dir = dt_test_tmpdir(),
                      .cancel = &cancel,
                      .cancel_reason = "",
                      .cluster = &cluster,
                      .hooks = {.ctx = &o,
                                .prepared = on_prepared,
                                .progress = on_progress,
                                .comm = on_comm,
                                .finished = on_finished}};
    dt__service_trainer_main(&t);
    dt_tfconfig_destroy(&cluster);
    return o;
}

/* Points DTRAIN_CUDA_LIB at the stand-in next to this runner; its bind counter. */
static int (*fake_binds)(int dev);
static long (*fake_clique_calls)(void);
static void use_fake(void)
{
    char exe[PATH_MAX], lib[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ASSERT_TRUE(n > 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(lib, sizeof lib, "%s/libdtrain-fakegpu.so", exe);
    ASSERT_EQ(access(lib, R_OK), 0);
    setenv("DTRAIN_CUDA_LIB", lib, 1);
    setenv("DTRAIN_FAKE_GPUS", "2", 1);
    char why[512] = "";
    ASSERT_EQ(dt_nn_gpu_count(why, sizeof why), 2); /* loads it */
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_TRUE(h != NULL);
    *(void **)&fake_binds = dlsym(h, "dt_nn_fake_gpu_binds");
    ASSERT_TRUE(fake_binds != NULL);
    *(void **)&fake_clique_calls = dlsym(h, "dt_nn_fake_gpu_clique_calls");
    ASSERT_TRUE(fake_clique_calls != NULL);
}

DT_TEST_TIMEOUT(service_gpu_replicas_on_fake_devices, 120)
{
    tt_setup(193, 50);
    use_fake();
    run_out cpu = run_job("[\"/cpu:0\", \"/cpu:1\"]", "cpu");
    ASSERT_EQ(cpu.st, DT_OK);
    ASSERT_EQ(fake_binds(0) + fake_binds(1), 0); /* CPU replicas never touch the backend */
    ASSERT_EQ(fake_clique_calls(), 0);

    run_out gpu = run_job("[\"/gpu:0\", \"/gpu:1\"]", "gpu");
    if (gpu.st != DT_OK)
        fprintf(stderr, "%s\n", gpu.error);
    ASSERT_EQ(gpu.st, DT_OK);
    ASSERT_STREQ(gpu.hash, cpu.hash);
    /* one host: the GPUs all-reduce with the clique (NCCL's place), on device memory */
    ASSERT_GT(fake_clique_calls(), 0);
    /* each device: its model built, its replica's thread, its memory freed */
    ASSERT_GE(fake_binds(0), 2);
    ASSERT_GE(fake_binds(1), 2);

    int b0 = fake_binds(0), b1 = fake_binds(1);
    run_out one = run_job("[\"/gpu:1\"]", "one");
    ASSERT_EQ(one.st, DT_OK);
    ASSERT_EQ(fake_binds(0), b0); /* the one replica lives on /gpu:1 only */
    ASSERT_GT(fake_binds(1), b1);
    run_out cpu1 = run_job("[\"/cpu:0\"]", "cpu1");
    ASSERT_STREQ(one.hash, cpu1.hash);

    /* a device the host lacks fails the preparation, naming it */
    run_out none = run_job("[\"/gpu:0\", \"/gpu:2\"]", "none");
    ASSERT_TRUE(none.st != DT_OK);
    ASSERT_CONTAINS(none.error, "/gpu:2");
}

static void kernel_on_other_device(void)
{
    const dt_nn_ops *ops;
    dt_err err = {0};
    if (dt_nn_gpu_bind(0, false, &ops, &err) != DT_OK)
        _exit(3);
    float *p = ops->alloc(64);
    if (dt_nn_gpu_bind(1, false, &ops, &err) != DT_OK)
        _exit(3);
    ops->fill(16, 1.0f, p); /* /gpu:0's memory on /gpu:1's thread: the bug to catch */
}

/* The stand-in's own check: without it the test above would prove nothing. */
DT_TEST(service_gpu_fake_catches_cross_device)
{
    use_fake();
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        kernel_on_other_device();
        _exit(0);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

/* A replica whose GPU fails mid-job (an injected kernel error at its step's sync) stops its
 * siblings at once: the job's comm abort reaches the clique, so the other replica is not left
 * waiting in an all-reduce (NCCL's would wait on the GPU for ever). The job fails naming it. */
DT_TEST_TIMEOUT(service_gpu_replica_failure_aborts_the_clique, 60)
{
    tt_setup(193, 50);
    use_fake();
    setenv("DTRAIN_OPS_GUARD_SYNC_FAIL", "5", 1);
    int64_t t0 = dt_now_ms();
    run_out r = run_job("[\"/gpu:0\", \"/gpu:1\"]", "fail");
    ASSERT_EQ(r.st, DT_EIO);
    ASSERT_CONTAINS(r.error, "an injected kernel error at sync 5");
    ASSERT_LT(dt_now_ms() - t0, 20000); /* not the clique's 60 s deadline */
}

/* The CUDA backend's own code on the host emulator (build/libdtrain-cudaemu.so, 2 devices):
 * the trainer's clique (NCCL's all-reduces on each member's side stream, joined before the
 * update; the metrics through the in-host comm) with CUDA graphs captured and replayed, and the
 * same job eagerly (DTRAIN_GRAPHS=0): the same weights hash. */
DT_TEST_TIMEOUT(service_gpu_emulated_clique_graphs, 180)
{
    char exe[PATH_MAX], lib[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ASSERT_TRUE(n > 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(lib, sizeof lib, "%s/libdtrain-cudaemu.so", exe);
    if (access(lib, R_OK) != 0)
        DT_SKIP("no %s (the build makes it only where python3 and g++ exist)", lib);
    tt_setup(193, 50);
    setenv("DTRAIN_CUDA_LIB", lib, 1);
    setenv("DTRAIN_EMU_GPUS", "2", 1);
    char why[512] = "";
    ASSERT_EQ(dt_nn_gpu_count(why, sizeof why), 2);
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_TRUE(h != NULL);
    long (*launches)(void);
    *(void **)&launches = dlsym(h, "emu_graph_launches");
    ASSERT_TRUE(launches != NULL);

    setenv("DTRAIN_GRAPHS", "0", 1);
    run_out eager = run_job("[\"/gpu:0\", \"/gpu:1\"]", "eager");
    unsetenv("DTRAIN_GRAPHS");
    if (eager.st != DT_OK)
        fprintf(stderr, "%s\n", eager.error);
    ASSERT_EQ(eager.st, DT_OK);
    ASSERT_EQ(launches(), 0);
    run_out graphed = run_job("[\"/gpu:0\", \"/gpu:1\"]", "graphed");
    if (graphed.st != DT_OK)
        fprintf(stderr, "%s\n", graphed.error);
    ASSERT_EQ(graphed.st, DT_OK);
    /* 2 epochs of 193 examples at 16: 12 full steps an epoch, the first of them eager */
    printf("graph launches: %ld; weights %s (eager %s)\n", launches(), graphed.hash, eager.hash);
    ASSERT_EQ(launches(), 2 * 23);
    ASSERT_STREQ(graphed.hash, eager.hash);
}
