/* test_train_guard.c - the trainer above a device backend's walls. The guarded ops table
 * (dt_nn_ops_guard) faults on any host access to model memory outside a kernel and aborts when
 * a kernel is handed a host buffer, so these runs prove that fit, its collectives, checkpoints,
 * resume, callbacks and the weights files move model memory only through upload and download,
 * as a GPU needs, and give the CPU table's bits. */
#include "nn/ops.h"
#include "test_train_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_TRAIN 193
#define N_VAL   50

/* Conv2D -> BatchNormalization -> ReLU -> MaxPooling2D -> Flatten -> Dropout -> Dense: state,
 * masks and argmax buffers as well as weights. */
#define GUARD_MODEL                                                                                \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"g\", \"layers\": ["                 \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 1], "       \
    "\"name\": \"in\"}}, "                                                                         \
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", \"filters\": 4, "               \
    "\"kernel_size\": [3, 3], \"use_bias\": false}}, "                                             \
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"}}, "                   \
    "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"relu\"}}, "                               \
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"pool\"}}, "                       \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}}, "                            \
    "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"drop\", \"rate\": 0.25}}, "            \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 4}}]}}"

/* Runs fn in a child and returns how it ended (its wait status). */
static int in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

static dt_model *guarded_model(void)
{
    const char *json = GUARD_MODEL;
    dt_model *m = NULL;
    dt_err err = {0};
    dt_model_opts o = {.seed = 1, .ops = dt_nn_ops_guard()};
    ASSERT_OK(dt_model_from_json(json, strlen(json), &o, &m, &err), &err);
    return m;
}

static void read_params_directly(void)
{
    dt_model *m = guarded_model();
    size_t n;
    volatile float *p = dt_model_params(m, &n);
    printf("%g\n", (double)p[0]); /* the bug the guard is there to catch */
}

static void hand_host_buffer(void)
{
    float host[4];
    dt_nn_ops_guard()->fill(4, 0.0f, host);
}

/* The walls hold: a host read of model memory faults, a host buffer handed to a kernel aborts,
 * and the same values come back through download. */
DT_TEST(guard_faults_on_host_access)
{
    int st = in_child(read_params_directly);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = in_child(hand_host_buffer);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    dt_model *m = guarded_model();
    size_t n;
    const float *p = dt_model_params(m, &n);
    float *h = malloc(n * sizeof *h);
    dt_model_ops(m)->download(h, p, n * sizeof *h);
    bool nonzero = false;
    for (size_t i = 0; i < n; i++)
        nonzero |= h[i] != 0.0f;
    ASSERT_TRUE(nonzero); /* the initialiser's weights, read the right way */
    free(h);
    dt_model_free(m);
}

/* tt_spec_model with callbacks (JSON list text) in $.fit and extra at the top level. */
static const char *spec_with(const char *callbacks, const char *extra, int epochs)
{
    static char buf[24000];
    const char *base = tt_spec_model(GUARD_MODEL, epochs, 16, "\"adam\"", extra);
    const char *at = strstr(base, "\"batch_size\": 16");
    ASSERT_TRUE(at != NULL);
    int head = (int)(at - base) + (int)strlen("\"batch_size\": 16");
    snprintf(buf, sizeof buf, "%.*s, \"callbacks\": %s%s", head, base, callbacks, base + head);
    return buf;
}

/* Two replicas with the asynchronous comm (buckets downloaded and uploaded around the ring),
 * checkpoints, EarlyStopping with restore_best_weights, cancelled and resumed: every hash equals
 * the CPU table's run. */
DT_TEST_TIMEOUT(guard_fit_matches_cpu, 180)
{
    tt_setup(N_TRAIN, N_VAL);
    const char *cb = "[{\"class_name\": \"EarlyStopping\", \"config\": {\"monitor\": \"val_loss\", "
                     "\"patience\": 1, \"min_delta\": 10, \"restore_best_weights\": true}}]";
    dt_jobspec spec;
    tt_parse(spec_with(cb, ", \"checkpoint\": {\"save_freq\": 4, \"keep\": 2}", 4), &spec);
    char cpu_dir[1024], g_dir[1024];
    snprintf(cpu_dir, sizeof cpu_dir, "%s/cpu", dt_test_tmpdir());
    snprintf(g_dir, sizeof g_dir, "%s/guard", dt_test_tmpdir());
    tt_use_async = true;
    tt_replica cpu[2], g[2];
    dt_train_opts o = dt_train_opts_default();
    o.out_dir = cpu_dir;
    tt_run(&spec, 2, &o, -1, 0, cpu);
    ASSERT_EQ(cpu[0].st, DT_OK);
    ASSERT_EQ(cpu[1].res.weights_hash, cpu[0].res.weights_hash);

    o.ops = dt_nn_ops_guard();
    o.out_dir = g_dir;
    tt_run(&spec, 2, &o, 0, 9, g); /* cancelled during step 9, after a checkpoint */
    ASSERT_EQ(g[0].st, DT_ECANCELED);
    tt_free(g, 2);
    o.resume = true;
    tt_run(&spec, 2, &o, -1, 0, g);
    ASSERT_EQ(g[0].st, DT_OK);
    ASSERT_TRUE(g[0].res.resumed);
    ASSERT_EQ(g[0].res.weights_hash, cpu[0].res.weights_hash);
    ASSERT_EQ(g[1].res.weights_hash, cpu[0].res.weights_hash);
    ASSERT_EQ(g[0].nparams, cpu[0].nparams);
    ASSERT_EQ(memcmp(g[0].params, cpu[0].params, g[0].nparams * sizeof(float)), 0);
    tt_free(cpu, 2);
    tt_free(g, 2);
    dt_jobspec_destroy(&spec);
}

/* A 16-bit wire (the compressed path) and a replica whose shard runs out first (an empty
 * batch fills its gradients on the device). */
DT_TEST_TIMEOUT(guard_fit_compressed_and_uneven, 120)
{
    tt_setup(17, N_VAL); /* shards of 9 and 8, batches of 8: the second runs dry */
    dt_jobspec spec;
    tt_parse(spec_with("[]", ", \"strategy\": {\"compression\": \"bfloat16\"}", 2), &spec);
    tt_use_async = true;
    tt_replica cpu[2], g[2];
    dt_train_opts o = dt_train_opts_default();
    tt_run(&spec, 2, &o, -1, 0, cpu);
    if (cpu[0].st != DT_OK)
        fprintf(stderr, "%s\n", cpu[0].err.msg);
    ASSERT_EQ(cpu[0].st, DT_OK);
    o.ops = dt_nn_ops_guard();
    tt_run(&spec, 2, &o, -1, 0, g);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(g[i].st, DT_OK);
        ASSERT_EQ(g[i].res.weights_hash, cpu[0].res.weights_hash);
    }
    tt_free(cpu, 2);
    tt_free(g, 2);
    dt_jobspec_destroy(&spec);
}

/* A kernel error a device reports at the step's sync fails the fit with its message (the GPU's
 * asynchronous errors surface there), on the replica that met it, and the others stop too. */
DT_TEST_TIMEOUT(guard_sync_error_fails_the_fit, 60)
{
    tt_setup(N_TRAIN, N_VAL);
    dt_jobspec spec;
    tt_parse(spec_with("[]", "", 2), &spec);
    setenv("DTRAIN_OPS_GUARD_SYNC_FAIL", "5", 1);
    tt_use_async = true;
    tt_replica g[1];
    dt_train_opts o = dt_train_opts_default();
    o.ops = dt_nn_ops_guard();
    tt_run(&spec, 1, &o, -1, 0, g);
    ASSERT_EQ(g[0].st, DT_EIO);
    ASSERT_CONTAINS(g[0].err.msg, "guard: an injected kernel error at sync 5");
    ASSERT_EQ(g[0].nlosses, 4); /* steps 1-4 ended; the fifth failed at its sync */
    tt_free(g, 1);
    dt_jobspec_destroy(&spec);
}
