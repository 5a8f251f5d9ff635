/* data_internal.h - what the files of lib/data share and nobody else uses (dt__data_*). */
#ifndef DT_DATA_INTERNAL_H
#define DT_DATA_INTERNAL_H

#include "data/data.h"

/* A zeroed dataset (x_scale = 1); DT_ENOMEM on failure. */
dt_status dt__dataset_new(dt_dataset **out, dt_err *err);
/* Records provenance: counts[f] examples came from names[f] (counts NULL: one file, all n). */
dt_status dt__dataset_set_files(dt_dataset *ds, char *const *names, size_t nfiles,
                                const size_t *counts, dt_err *err);

/* A float array that grows to a ceiling of max elements (DT_ETOOBIG past it). */
typedef struct dt__fvec {
    float *v;
    size_t len, cap, max;
} dt__fvec;
dt_status dt__fvec_push(dt__fvec *a, const float *src, size_t n, const char *what, dt_err *err);

/* JPEG / PNG signatures: encoded images are refused for now. NULL if not an image. */
const char *dt__data_image_kind(const uint8_t *p, size_t n);

#endif
