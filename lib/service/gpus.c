/*
 * gpus.c - a GPU job ($.strategy.devices "/gpu:N") against the GPUs the cluster's tasks
 * reported when they joined: refused at submit, while the user still has the terminal (exit 2),
 * rather than failing in preparing on a task that lacks the device.
 */
#include "service/service_internal.h"

#include "nn/gpu.h"

#include <stdlib.h>
#include <string.h>

dt_status dt__service_check_gpus(const jt_summary *sum, const jt_task_gpus *tasks, int n,
                                 dt_err *err)
{
    if (!sum->gpu)
        return DT_OK;
    int need = sum->gpu_max + 1, first = -1, more = 0;
    for (int i = 0; i < n; i++) {
        if (!tasks[i].known || tasks[i].gpus >= need)
            continue;
        if (first < 0)
            first = i;
        else
            more++;
    }
    if (first >= 0) {
        const jt_task_gpus *t = &tasks[first];
        char has[160], model[DT_CLUSTER_GPU_MODEL_LEN + 4] = "";
        if (t->model[0])
            snprintf(model, sizeof model, " (%s)", t->model);
        if (t->gpus == 0)
            snprintf(has, sizeof has, "which has no GPU");
        else if (t->gpus == 1)
            snprintf(has, sizeof has, "which has 1 GPU, /gpu:0%s", model);
        else
            snprintf(has, sizeof has, "which has %d GPUs, /gpu:0 to /gpu:%d%s", t->gpus,
                     t->gpus - 1, model);
        char also[64] = "";
        if (more)
            snprintf(also, sizeof also, " (and %d more task%s)", more, more == 1 ? "" : "s");
        return dt_err_set(err, DT_EINVAL,
                          "$.strategy.devices[%d]: /gpu:%d is not on %s (%s), %s%s: every task "
                          "runs the job's replicas on its own GPUs, so each needs %d or more; see "
                          "`dtrain cluster` (CUDA_VISIBLE_DEVICES in a daemon's environment hides "
                          "GPUs from it)",
                          sum->gpu_max_at, sum->gpu_max, t->name, t->address, has, also, need);
    }
    /* The chief's own build stands for the cluster's (one release everywhere): a build without
     * nvcc, or a backend that lacks ops, would only fail the job in preparing. Loading the
     * library does not initialise CUDA. */
    if (dt_nn_gpu_complete(err) != DT_OK)
        return dt_err_prefix(err, "$.strategy.devices: GPU replicas");
    return DT_OK;
}
