/* The chief's check of a GPU job against the GPUs its tasks reported (service/gpus.c): a task
 * without the device asked for is named with its address and GPU count; tasks not heard from are
 * not judged; a job that passes is still refused when this build's CUDA backend is missing or
 * incomplete, saying which. */
#include "dt_test.h"

#include "nn/gpu.h"
#include "service/service_internal.h"

static jt_task_gpus task(const char *name, const char *address, bool known, int gpus,
                         const char *model)
{
    jt_task_gpus t = {.address = address, .known = known, .gpus = gpus, .model = model};
    snprintf(t.name, sizeof t.name, "%s", name);
    return t;
}

static dt_status check(bool gpu, int gpu_max, int gpu_max_at, const jt_task_gpus *t, int n,
                       dt_err *err)
{
    jt_summary *sum = calloc(1, sizeof *sum); /* two PATH_MAX dirs: not on the stack */
    ASSERT_TRUE(sum != NULL);
    sum->gpu = gpu;
    sum->gpu_max = gpu_max;
    sum->gpu_max_at = gpu_max_at;
    memset(err, 0, sizeof *err);
    dt_status st = dt__service_check_gpus(sum, t, n, err);
    free(sum);
    return st;
}

DT_TEST(service_gpus_refused_at_submit)
{
    dt_err err;
    jt_task_gpus none[2] = {task("worker:0", "127.0.0.1:7000", true, 0, ""),
                            task("worker:1", "127.0.0.1:7001", true, 0, "")};
    /* a CPU job is not looked at */
    ASSERT_OK(check(false, 0, 0, none, 2, &err), &err);

    ASSERT_EQ(check(true, 0, 0, none, 2, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.strategy.devices[0]: /gpu:0 is not on worker:0 (127.0.0.1:7000), "
                             "which has no GPU (and 1 more task): every task runs the job's "
                             "replicas on its own GPUs, so each needs 1 or more");

    jt_task_gpus some[3] = {task("chief:0", "10.0.0.1:7000", true, 4, "NVIDIA H200"),
                            task("worker:0", "10.0.0.2:7000", true, 2, "NVIDIA H200"),
                            task("worker:1", "10.0.0.3:7000", false, 0, "")};
    /* /gpu:3 as the second entry: the chief has it, worker 0 does not; worker 1 is not known */
    ASSERT_EQ(check(true, 3, 1, some, 3, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.strategy.devices[1]: /gpu:3 is not on worker:0 (10.0.0.2:7000), "
                             "which has 2 GPUs, /gpu:0 to /gpu:1 (NVIDIA H200): every task");
    ASSERT_TRUE(strstr(err.msg, "more task") == NULL);
    jt_task_gpus one = task("worker:3", "10.0.0.4:7000", true, 1, "");
    ASSERT_EQ(check(true, 1, 0, &one, 1, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg,
                    "/gpu:1 is not on worker:3 (10.0.0.4:7000), which has 1 GPU, /gpu:0: ");

    /* enough GPUs everywhere known: up to this build's backend */
    dt_err cerr = {0};
    if (dt_nn_gpu_complete(&cerr) == DT_OK)
        ASSERT_OK(check(true, 1, 0, some, 3, &err), &err);
    else {
        ASSERT_EQ(check(true, 1, 0, some, 3, &err), cerr.code);
        ASSERT_CONTAINS(err.msg, "$.strategy.devices: GPU replicas: ");
        ASSERT_CONTAINS(err.msg, cerr.msg);
    }
    /* the device check comes first */
    ASSERT_EQ(check(true, 2, 0, some, 3, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "/gpu:2 is not on worker:0 (10.0.0.2:7000)");
}
