/* jobspec.c - stub until the parser lands. */
#include "config/jobspec.h"

dt_status dt_jobspec_parse(const char *json, size_t len, const dt_jobspec_roots *roots,
                           dt_jobspec *out, dt_err *err)
{
    (void)json, (void)len, (void)roots, (void)out;
    return dt_err_set(err, DT_ENOTSUP, "jobspec: not implemented yet");
}
void dt_jobspec_destroy(dt_jobspec *spec)
{
    (void)spec;
}
dt_status dt_jobspec_parse_file(const char *path, const dt_jobspec_roots *roots, dt_jobspec *out,
                                dt_err *err)
{
    (void)path, (void)roots, (void)out;
    return dt_err_set(err, DT_ENOTSUP, "jobspec: not implemented yet");
}
const char *dt_jobspec_comm_name(dt_jobspec_comm c)
{
    (void)c;
    return "AUTO";
}
