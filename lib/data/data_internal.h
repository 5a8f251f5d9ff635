/* data_internal.h - what the files of lib/data share and nobody else uses (dt__data_*). */
#ifndef DT_DATA_INTERNAL_H
#define DT_DATA_INTERNAL_H

#include "core/buf.h"
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

/* JPEG / PNG signatures ("JPEG", "PNG"), NULL if not an image (public: dt_image_kind). */
const char *dt__data_image_kind(const uint8_t *p, size_t n);

/* A window of an image for resizing: uint8 (u8) or float32 (f32) pixels, rows stride elements
 * apart (a crop is a window of the decoded image, so nothing is copied). */
typedef struct dt__img_view {
    const uint8_t *u8;
    const float *f32;
    int h, w, c;
    size_t stride;
} dt__img_view;
/* tf.image.resize of the view into out (oh, ow, c). */
dt_status dt__image_resize_view(const dt__img_view *in, float *out, int oh, int ow, dt_interp m,
                                dt_err *err);
/* Bilinear of a uint8 view straight to uint8 (oh, ow, c): the float result clamped to [0, 255]
 * and rounded half up, bit for bit what resizing to float32 and rounding gives. */
dt_status dt__image_resize_bilinear_u8(const dt__img_view *in, uint8_t *out, int oh, int ow,
                                       dt_err *err);

/* One image as inspect sees it (inspect_image.c): kind 0 neither, 1 JPEG, 2 PNG; its size and
 * mode from the header (0 / "" when unreadable); ok when it decodes; reason malloc'd if not. */
typedef struct dt__img_probe {
    int kind, h, w;
    char mode[8];
    bool ok;
    char *reason;
} dt__img_probe;
/* Decodes data (cheaply: JPEG at 1/8) into *out; what names it in the reason. */
void dt__inspect_probe(const uint8_t *data, size_t len, const char *what, dt__img_probe *out);
/* Sums n probes, in order, into a new *out (NULL when n = 0); the caller frees reasons. */
dt_status dt__inspect_images_sum(const dt__img_probe *p, size_t n, dt_data_image_info **out,
                                 dt_err *err);
/* Describes the image folder at path into info (format "image_folder"). */
dt_status dt__inspect_folder(const char *path, int threads, dt_data_file_info *info, dt_err *err);

/* CSV rows (csv.c), shared with inspect.c. Init text with dt_buf_init(&r.text, DT_MAX_CSV_LINE). */
typedef struct dt__csv_row {
    dt_buf text;   /* unescaped fields, each NUL-terminated */
    size_t *off;   /* (n) start of field i in text */
    size_t n, cap; /* fields */
    uint64_t line; /* 1-based line where the row starts */
    uint64_t byte; /* offset where the row starts */
} dt__csv_row;
/* Parses the row at *pos of s (len bytes), skipping empty lines; DT_ENOENT at the end. */
dt_status dt__csv_next_row(const char *s, size_t len, size_t *pos, uint64_t *line, const char *path,
                           dt__csv_row *r, dt_err *err);
const char *dt__csv_field(const dt__csv_row *r, size_t i);
void dt__csv_row_destroy(dt__csv_row *r);
/* A whole field as a finite number (surrounding blanks allowed). */
bool dt__csv_parse_num(const char *f, double *out);

#endif
