/* train.c - fit (stub until the implementation lands; the API in train.h is stable). */
#include "train/train.h"

dt_train_comm dt_train_comm_local(void)
{
    dt_train_comm c = {0};
    c.world = 1;
    return c;
}
dt_train_opts dt_train_opts_default(void)
{
    dt_train_opts o = {0};
    o.world = 1;
    o.prefetch = 2;
    o.data_timeout_ms = 600000;
    return o;
}
dt_status dt_train_validate(const dt_jobspec *spec, dt_train_info *info, dt_err *err)
{
    (void)spec, (void)info;
    return dt_err_set(err, DT_ENOTSUP, "train: not implemented yet");
}
dt_status dt_train_new(const dt_jobspec *spec, const dt_train_opts *opts, dt_trainer **out,
                       dt_err *err)
{
    (void)spec, (void)opts, (void)out;
    return dt_err_set(err, DT_ENOTSUP, "train: not implemented yet");
}
#define STUB return dt_err_set(err, DT_ENOTSUP, "train: not implemented yet")
void dt_train_get_info(const dt_trainer *t, dt_train_info *info)
{
    (void)t, (void)info;
}
dt_status dt_train_fit(dt_trainer *t, const dt_train_comm *comm, dt_train_result *res, dt_err *err)
{
    (void)t, (void)comm, (void)res;
    STUB;
}
dt_model *dt_train_model(dt_trainer *t)
{
    (void)t;
    return 0;
}
dt_optim *dt_train_optim(dt_trainer *t)
{
    (void)t;
    return 0;
}
void dt_train_free(dt_trainer *t)
{
    (void)t;
}
dt_status dt_train_evaluate(const dt_jobspec *spec, const char *weights_path, const cJSON *data,
                            int batch, dt_train_eval_result *out, dt_err *err)
{
    (void)spec, (void)weights_path, (void)data, (void)batch, (void)out;
    STUB;
}
dt_status dt_train_predict(const dt_jobspec *spec, const char *weights_path, const cJSON *data,
                           int batch, const char *out_path, size_t *n_out, dt_err *err)
{
    (void)spec, (void)weights_path, (void)data, (void)batch, (void)out_path, (void)n_out;
    STUB;
}
dt_status dt_train_export(const char *weights_path, const char *out_path, dt_err *err)
{
    (void)weights_path, (void)out_path;
    STUB;
}
