#include "data/data_internal.h"
dt_status dt_csv_load(const dt_data_source *src, dt_dataset **out, dt_err *err)
{
    (void)src;
    *out = NULL;
    return dt_err_set(err, DT_ENOTSUP, "csv: not yet");
}
