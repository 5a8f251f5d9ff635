/*
 * data.h - the data module: readers (IDX, CSV, TFRecord + tf.train.Example), the job spec's
 * "data" section, TensorFlow's auto-shard policies, and the input pipeline (shuffle, batch,
 * prefetch on its own thread).
 *
 *     dt_data_spec spec;                       // from the job spec's "data" object
 *     dt_data_spec_parse(data_obj, "$.data", base_dir, &spec, &err);
 *     dt_dataset *ds;
 *     dt_dataset_load(&spec.train, &ds, &err); // every file, decoded into memory
 *     dt_pipeline_opts o = dt_pipeline_opts_default();
 *     o.global_batch = 64; o.num_replicas = world; o.replica_rank = rank;
 *     o.policy = spec.shard_policy; o.shuffle = spec.shuffle; o.seed = spec.seed;
 *     dt_pipeline *p;
 *     dt_pipeline_new(ds, &o, &p, &err);
 *     for (int e = 0; e < epochs; e++) {
 *         dt_pipeline_epoch_begin(p, e, &err);
 *         for (int64_t s = 0; s < dt_pipeline_steps_per_epoch(p); s++) {
 *             const dt_batch *b;
 *             dt_pipeline_next(p, &b, dt_deadline_in(60000), &err);
 *             // b->x (b->n, ...) float32, b->y (b->n); loss_sum / b->global_n
 *         }
 *     }
 *     dt_pipeline_free(p); dt_dataset_free(ds); dt_data_spec_destroy(&spec);
 *
 * In memory, a dataset is N examples of one feature tensor x (per-example shape x_shape) and an
 * optional label. IDX images stay uint8 (47 MB for Fashion-MNIST train rather than 188 MB as
 * float32) and are scaled to float32 per batch; CSV and TFRecord features are decoded to float32
 * at load time with their scale applied. Several TFRecord features are concatenated, flattened,
 * in the spec's order.
 *
 * Encoded images (JPEG, PNG) are decoded at load time by a pool of "num_parallel_calls"
 * threads (the result does not depend on the pool: row i is file i); a worker of a job sharded
 * by FILE decodes only its own files (dt_dataset_load_shard). An image folder keeps them as uint8
 * at the target size [h, w, c] (a 224x224 RGB image is 147 KB), the total checked against
 * DT_MAX_IMAGE_DATASET before anything is allocated. Keras's tf.image.resize gives float32; we
 * round its result to uint8, so values differ from Keras's by at most 0.5 (nearest: equal). A
 * JPEG or PNG TFRecord feature is decoded into the float32 rows like any other feature, on the
 * same number of threads, a chunk of records at a time (every worker reads every TFRecord file:
 * a FILE shard's record counts need the other files read). Decoding
 * lazily in the pipeline, for data sets past memory, is for later.
 *
 * The last-batch rule (why no replica can hang the cluster): every replica computes the same
 * steps_per_epoch from the sizes of ALL shards, which each replica can compute alone because
 * the shard plan is a pure function of (policy, file record counts, replicas). A replica whose
 * shard runs out early gets batches with n = 0 (or short ones); it still runs the step and
 * joins the all-reduce. Every batch carries global_n, the true number of examples of the step
 * on all replicas together (also computed locally, with no communication), so the trainer
 * divides its summed loss by global_n, as tf.nn.compute_average_loss(global_batch_size=true
 * count) does. With drop_remainder only steps that are full on every replica run.
 *
 * Threads: a dt_dataset is immutable after load and may be shared by any number of pipelines
 * and threads. A dt_pipeline owns one prefetch thread; its functions are called from one
 * thread (the trainer). A dt_batch belongs to the pipeline and stays valid until the next
 * dt_pipeline_next, dt_pipeline_epoch_begin or dt_pipeline_free on that pipeline.
 */
#ifndef DT_DATA_DATA_H
#define DT_DATA_DATA_H

#include "core/clock.h"
#include "core/limits.h"
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cJSON cJSON;

#define DT_DATA_NAME_LEN 128

/* ---------------------------------------------------------------- spec: the job's "data" -- */

typedef enum dt_data_format {
    DT_DATA_FORMAT_IDX = 0,
    DT_DATA_FORMAT_CSV,
    DT_DATA_FORMAT_TFRECORD,
    DT_DATA_FORMAT_IMAGE_FOLDER, /* Keras's image_dataset_from_directory */
} dt_data_format;

/* Element type of a TFRecord feature as the spec declares it. */
typedef enum dt_data_dtype {
    DT_DATA_DTYPE_FLOAT32 = 0, /* float_list */
    DT_DATA_DTYPE_INT64,       /* int64_list */
    DT_DATA_DTYPE_UINT8,       /* bytes_list holding raw uint8 pixels ("uint8" / "bytes") */
} dt_data_dtype;

typedef enum dt_shard_policy {
    DT_SHARD_AUTO = 0, /* FILE when nfiles >= workers, else DATA */
    DT_SHARD_FILE,     /* file i -> worker i % W; fewer files than workers is an error */
    DT_SHARD_DATA,     /* everyone reads all, in one deterministic order; element j -> j % W */
    DT_SHARD_OFF,      /* everyone reads everything */
} dt_shard_policy;

typedef enum dt_shuffle_kind {
    DT_SHUFFLE_NONE = 0,
    DT_SHUFFLE_FULL,   /* "shuffle": true - a uniform permutation per epoch */
    DT_SHUFFLE_BUFFER, /* "shuffle": K - tf.data's buffer shuffle with a buffer of K */
} dt_shuffle_kind;

typedef struct dt_shuffle {
    dt_shuffle_kind kind;
    size_t buffer; /* DT_SHUFFLE_BUFFER only, >= 1 */
} dt_shuffle;

/* tf.image.resize's methods (half-pixel centres, no antialias), as Keras names them. */
typedef enum dt_interp {
    DT_INTERP_BILINEAR = 0,
    DT_INTERP_NEAREST,
    DT_INTERP_AREA,
    DT_INTERP_BICUBIC, /* Keys a = -0.5, weights outside the image dropped and renormalised */
} dt_interp;

/* What a record or file that cannot be decoded does: stop the load naming it, or be left out
 * (counted, and the count and the first reason logged once per load). */
typedef enum dt_on_error {
    DT_ON_ERROR_FAIL = 0,
    DT_ON_ERROR_SKIP,
} dt_on_error;

/* Keras's label_mode: int (sparse class ids), categorical (one-hot float32), binary (float32
 * 0/1, exactly two classes), none (null: no labels). */
typedef enum dt_label_mode {
    DT_LABEL_MODE_INT = 0,
    DT_LABEL_MODE_CATEGORICAL,
    DT_LABEL_MODE_BINARY,
    DT_LABEL_MODE_NONE,
} dt_label_mode;

/* How an encoded image becomes the model's input. */
typedef struct dt_image_opts {
    int height, width; /* target size; 0 = the decoded size (then every image must have it) */
    int channels;      /* 1 grayscale, 3 rgb, 4 rgba (Keras's color_mode); 0 = as stored */
    dt_interp interpolation;
    bool crop_to_aspect_ratio; /* centre crop to the target's aspect ratio before resizing */
    bool dct_scaling; /* JPEG: decode at 1/2, 1/4 or 1/8 scale while that stays >= the target */
    bool dct_fast;    /* JPEG: TF's default INTEGER_FAST IDCT instead of INTEGER_ACCURATE */
    dt_on_error on_error;
    int threads; /* decoding threads at load ("num_parallel_calls"); 0 = AUTOTUNE: one per
                    online CPU */
} dt_image_opts;

/* Keras's defaults: 256x256 rgb, bilinear, no crop; DCT scaling on, accurate IDCT, fail. */
dt_image_opts dt_image_opts_default(void);

typedef struct dt_data_feature {
    char name[DT_DATA_NAME_LEN];
    dt_data_dtype dtype;
    int rank;
    int64_t shape[DT_MAX_IDX_DIMS]; /* per example; product = values per record */
    float scale;                    /* multiplies every value; 1 when not given */
} dt_data_feature;

/* One split ("train" or "validation"). Strings and arrays are owned (dt_data_spec_destroy). */
typedef struct dt_data_source {
    dt_data_format format;
    char **files; /* csv, tfrecord: the files, globs expanded, in order; idx: NULL */
    size_t nfiles;
    float scale; /* idx, csv: multiplies every feature value; 1 when not given */
    /* idx */
    char *images, *labels; /* labels may be NULL */
    int image_rank;        /* 0: the IDX file's own shape; else a reshape of it (csv: "shape") */
    int64_t image_shape[DT_MAX_IDX_DIMS];
    /* csv */
    bool header;                         /* default true */
    char label_column[DT_DATA_NAME_LEN]; /* by name ("" = none or by index) */
    int label_index;                     /* by index; -1 when by name or none */
    /* "label_column": [...]: several target columns, read as float targets (n, k) */
    char **label_columns;      /* (nlabel_columns) names, or NULL entries where given by index */
    int *label_column_index;   /* (nlabel_columns) index, or -1 where given by name */
    size_t nlabel_columns;     /* 0: one label column (label_column / label_index) or none */
    char **feature_columns;    /* (nfeature_columns) names, or NULL entries where given by index */
    int *feature_column_index; /* (nfeature_columns) index, or -1 where given by name */
    size_t nfeature_columns;   /* 0 = every column but the label */
    /* tfrecord */
    bool gzip; /* "compression": "GZIP" */
    dt_data_feature *features;
    size_t nfeatures;
    char label[DT_DATA_NAME_LEN]; /* feature holding the label, "" = none */
    /* image_folder; tfrecord image features use image (size and channels from their shape) */
    dt_image_opts image;
    char *directory;      /* image_folder: the folder, resolved */
    int32_t *file_labels; /* (nfiles) class of each file, or NULL (label_mode none) */
    char **class_names;   /* (nclasses) in class-index order */
    size_t nclasses;
    dt_label_mode label_mode;
} dt_data_source;

typedef struct dt_data_spec {
    dt_data_source train;
    dt_data_source validation;
    bool has_validation;
    dt_shuffle shuffle;
    uint64_t seed; /* default 0 */
    dt_shard_policy shard_policy;
    int num_parallel_calls; /* "num_parallel_calls": decoding threads, 0 = "AUTOTUNE" (the
                               online CPUs); copied into train/validation image.threads */
} dt_data_spec;

/* Parses a job spec's "data" object. json_path names obj in messages ("$.data"), so errors read
 * "$.data.train.files[2]: expected a string". base_dir (may be NULL) is prepended to relative
 * paths; globs in "files" are expanded (a glob matching nothing is an error). On failure out
 * is left zeroed. Formats and their fields are documented in README ("Data").*/
dt_status dt_data_spec_parse(const cJSON *obj, const char *json_path, const char *base_dir,
                             dt_data_spec *out, dt_err *err);
/* Parses one split object ("train"): exposed for the CLI and tests. */
dt_status dt_data_source_parse(const cJSON *obj, const char *json_path, const char *base_dir,
                               dt_data_source *out, dt_err *err);
void dt_data_source_destroy(dt_data_source *src);
void dt_data_spec_destroy(dt_data_spec *spec);

const char *dt_shard_policy_name(dt_shard_policy p);
/* "AUTO", "FILE", "DATA", "OFF" (case-insensitive). */
dt_status dt_shard_policy_parse(const char *s, dt_shard_policy *out, dt_err *err);
const char *dt_data_format_name(dt_data_format f);

/* ------------------------------------------------------------------------------ dataset -- */

typedef enum dt_label_kind {
    DT_LABEL_NONE = 0,
    DT_LABEL_INT32, /* sparse class ids (IDX labels, integer CSV / int64 TFRecord labels) */
    DT_LABEL_FLOAT, /* regression targets, y_size per example */
} dt_label_kind;

typedef struct dt_dataset {
    size_t n;                         /* examples */
    int x_rank;                       /* per-example shape of x */
    int64_t x_shape[DT_MAX_IDX_DIMS]; /* e.g. [28, 28] or [28, 28, 1] */
    size_t x_size;                    /* product of x_shape */
    uint8_t *x_u8;                    /* (n, x_size) IDX bytes, or NULL */
    float *x_f32;                     /* (n, x_size) decoded and scaled, or NULL */
    float x_scale;                    /* applied to x_u8 when batching */
    dt_label_kind y_kind;
    int32_t *y_i32;  /* (n) when DT_LABEL_INT32 */
    float *y_f32;    /* (n, y_size) when DT_LABEL_FLOAT */
    size_t y_size;   /* label values per example (1 for sparse) */
    int num_classes; /* max label + 1 for DT_LABEL_INT32, else 0 */
    /* Provenance, for FILE sharding: examples of file f are [file_start[f], file_start[f+1]). */
    size_t nfiles;
    char **file_names;  /* (nfiles) */
    size_t *file_start; /* (nfiles + 1) */
    /* A dataset decoded for one FILE shard only (dt_dataset_load_shard): x holds the rows of
     * this worker's files, example i at row x_row[i], SIZE_MAX for an example not held here
     * (another worker's file, or one of ours skipped by on_error "skip"). NULL: row i. */
    size_t *x_row;     /* (n) or NULL */
    int shard_workers; /* 0: every example decoded; -1: none (index_only); else decoded for
                          FILE worker */
    int shard_index;   /* shard_index of shard_workers */
} dt_dataset;

/* Reads and decodes every file of src. Errors name the file and the offset or record. The
 * caller frees *out with dt_dataset_free. */
dt_status dt_dataset_load(const dt_data_source *src, dt_dataset **out, dt_err *err);
void dt_dataset_free(dt_dataset *ds);

/* Keras's fit(validation_split=): moves the last examples of ds (those from
 * floor(n * (1 - fraction)) on, in file order, before any shuffling) into a new dataset *val
 * and keeps the first ones in ds. Both parts must be non-empty. ds must hold every example
 * (loaded without a FILE shard). *val has one "file", named after the split. */
dt_status dt_dataset_split(dt_dataset *ds, double fraction, dt_dataset **val, dt_err *err);

/* Called by the loading thread every ~2 s and at the end of a long decode: done of total. */
typedef void (*dt_data_progress_fn)(void *arg, size_t done, size_t total);

typedef struct dt_data_load_opts {
    /* The shard this process will read: with policy resolving to FILE and num_workers > 1, an
     * image folder decodes only the files of worker_index (file f when f % W == w), and a
     * TFRecord source only their records' JPEG/PNG features; the other files keep their place
     * and labels (every worker plans the same steps) with no pixels (x_row). DATA and OFF read
     * every element, so everything is decoded. */
    dt_shard_policy policy;
    int num_workers, worker_index; /* 0 workers: one */
    dt_data_progress_fn progress;  /* optional; runs on the calling thread */
    void *progress_arg;
    /* Image folders and TFRecord sources with image bytes: index only - every file (record) an
     * example with its label and the declared shape, no pixel decoded (what a job's validation at
     * submit needs; a bad file is then found by the worker that decodes it). The dataset feeds no
     * pipeline. */
    bool index_only;
} dt_data_load_opts;

/* dt_dataset_load for one worker of a sharded job (o NULL: every example). With on_error
 * "skip", a skipped file of the worker's shard still counts one example in file_start (the
 * other workers, which did not decode it, plan with it) and has no row: the pipeline leaves it
 * out of its batch, which is then one short, and global_n still counts it. */
dt_status dt_dataset_load_shard(const dt_data_source *src, const dt_data_load_opts *o,
                                dt_dataset **out, dt_err *err);

/* Readers, one per format (they fill a fresh dataset; the caller owns it). */
dt_status dt_idx_load(const char *images, const char *labels, float scale, int image_rank,
                      const int64_t *image_shape, dt_dataset **out, dt_err *err);
dt_status dt_csv_load(const dt_data_source *src, dt_dataset **out, dt_err *err);
dt_status dt_tfrecord_load(const dt_data_source *src, dt_dataset **out, dt_err *err);
/* dt_tfrecord_load for one worker (o may be NULL: every record decoded). When o's policy
 * resolves to FILE over several workers and a feature is uint8 bytes (JPEG/PNG images), every
 * record of every file is still read - counts, labels and errors other than an image's are
 * every worker's - but only the records of this worker's files have their images decoded and a
 * row (x_row); with on_error "skip" a bad image of ours keeps its example, with no row, as an
 * image folder's shard does (see dt_dataset_load_shard). o->index_only: no image decoded, no
 * row (shard_workers -1). */
dt_status dt_tfrecord_load_shard(const dt_data_source *src, const dt_data_load_opts *o,
                                 dt_dataset **out, dt_err *err);
/* Decodes src->files (an indexed image folder) with a pool of src->image.threads threads,
 * placing results by file index, so the bytes do not depend on the thread count; row i is
 * file i. o (may be NULL) restricts decoding to a FILE shard (see dt_dataset_load_shard). */
dt_status dt_image_folder_load(const dt_data_source *src, const dt_data_load_opts *o,
                               dt_dataset **out, dt_err *err);

/* ------------------------------------------------------------------------------- images -- */

/* Indexes an image folder as Keras's image_dataset_from_directory does, into src->files,
 * file_labels, class_names (src's other image_folder fields already set): classes are the
 * sorted subfolders not starting with "." (or class_names, in its order, a subset of them);
 * each class folder is walked recursively (symlinked subfolders not followed), folders in
 * path order, files sorted, those ending in .bmp .gif .jpeg .jpg .png (any case) kept - BMP
 * and GIF are listed, so the split matches Keras's, and refused when decoded. With a seed the
 * list is shuffled as numpy's RandomState(seed).shuffle; then validation_split keeps the
 * last int(split * n) files for "validation" and the rest for "training". Errors name the
 * JSON path (json_path) or the folder. */
dt_status dt_image_folder_index(dt_data_source *src, double validation_split, const char *subset,
                                bool shuffle, bool has_seed, uint64_t seed, const char *json_path,
                                dt_err *err);

/* numpy's RandomState(seed).shuffle of [0, n) into perm (MT19937, random_interval): the
 * order Keras gives its files. */
void dt_image_numpy_shuffle(uint32_t seed, size_t *perm, size_t n);

/* "JPEG" or "PNG" from the first bytes, else NULL. */
const char *dt_image_kind(const uint8_t *p, size_t n);

/* A decoded image: (h, w, c) uint8, row-major. Owned: dt_image_destroy. */
typedef struct dt_image {
    uint8_t *px;
    int h, w, c;
    /* The file's own: size before DCT scaling, and PIL's name of its mode ("L", "LA", "RGB",
     * "RGBA", "P", "CMYK"; ";16" etc. for PNG depths other than 8). Set once the header is
     * read, also when decoding then fails (inspect reports them). */
    int src_h, src_w;
    char mode[8];
} dt_image;

/* Decodes JPEG or PNG bytes (detected by magic) into o->channels channels as TF's
 * decode_image(channels=...) does: PNG 16-bit keeps the high byte, palette and tRNS expand,
 * gray<->rgb convert (rgb->gray with 0.299/0.587/0.114), alpha is added opaque or stripped;
 * JPEG to rgba is refused as TF refuses it. o->height/width (when set) only steer JPEG's DCT
 * scaling. Declared sizes past DT_MAX_IMAGE_DIM / DT_MAX_IMAGE_PIXELS, a PNG declaring more
 * than deflate can inflate from its size, a JPEG past DT_MAX_JPEG_SCANS, truncation and CRC
 * errors are refused before or instead of allocating; what names the file or record. */
dt_status dt_image_decode(const uint8_t *data, size_t len, const dt_image_opts *o, const char *what,
                          dt_image *out, dt_err *err);
void dt_image_destroy(dt_image *im);

/* tf.image.resize (antialias off) of in (ih, iw, c) float32 into out (oh, ow, c) float32.
 * DT_EINVAL for sizes < 1 or past DT_MAX_IMAGE_DIM. */
dt_status dt_image_resize(const float *in, int ih, int iw, int c, float *out, int oh, int ow,
                          dt_interp method, dt_err *err);

/* Decode, centre-crop (crop_to_aspect_ratio), resize to o's size and round to uint8: one
 * example as an image folder stores it. out holds o->height * o->width * o->channels. */
dt_status dt_image_load_u8(const uint8_t *data, size_t len, const dt_image_opts *o,
                           const char *what, uint8_t *out, dt_err *err);
/* The same into float32 (TFRecord features: no rounding), each value times scale. */
dt_status dt_image_load_f32(const uint8_t *data, size_t len, const dt_image_opts *o, float scale,
                            const char *what, float *out, dt_err *err);

/* "bilinear" | "nearest" | "area" | "bicubic". */
dt_status dt_interp_parse(const char *s, dt_interp *out);
const char *dt_interp_name(dt_interp m);

/* ------------------------------------------------------------------------------- IDX file -- */

typedef struct dt_idx_header {
    int type; /* 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64 */
    int rank;
    int64_t dims[DT_MAX_IDX_DIMS];
    int elem_size;
    bool gzip;
} dt_idx_header;

/* Reads an IDX file (raw or .gz) whole: header checked (magic, rank, dimension product against
 * DT_MAX_DATA_FILE and, for raw files, the real file size) before allocating. *data is
 * malloc'd (caller frees), big-endian element bytes as stored. */
dt_status dt_idx_read(const char *path, dt_idx_header *hdr, uint8_t **data, size_t *len,
                      dt_err *err);

/* ---------------------------------------------------------------------------- TFRecord -- */

typedef struct dt_tfrecord_reader dt_tfrecord_reader;

/* Opens a TFRecord file; gzip = the file is one GZIP stream (TF's "GZIP" compression). */
dt_status dt_tfrecord_open(const char *path, bool gzip, dt_tfrecord_reader **out, dt_err *err);
/* Next record: *data points into the reader's buffer (valid until the next call), *len its
 * length. Returns DT_ENOENT at a clean end of file; truncation, a bad length or data CRC, or a
 * length over DT_MAX_TFRECORD is an error naming the file, record number and byte offset. */
dt_status dt_tfrecord_next(dt_tfrecord_reader *r, const uint8_t **data, size_t *len, dt_err *err);
/* Records read so far, and the byte offset (in the uncompressed stream) of the next one. */
uint64_t dt_tfrecord_index(const dt_tfrecord_reader *r);
uint64_t dt_tfrecord_offset(const dt_tfrecord_reader *r);
void dt_tfrecord_close(dt_tfrecord_reader *r);
/* Frames data as one TFRecord (12-byte header + data + 4-byte CRC) into out (len + 16 bytes). */
void dt_tfrecord_frame(const void *data, size_t len, uint8_t *out);

/* ------------------------------------------------------------------------------ sharding -- */

/* The pure shard plan: which files / elements a worker reads. AUTO is resolved first. */
typedef struct dt_shard_plan {
    dt_shard_policy policy; /* resolved: FILE, DATA or OFF */
    int num_workers, worker_index;
} dt_shard_plan;

/* Resolves policy for nfiles files and num_workers workers; FILE with nfiles < num_workers is
 * DT_EINVAL with a message that says so and what to do. */
dt_status dt_shard_resolve(dt_shard_policy policy, size_t nfiles, int num_workers, int worker_index,
                           dt_shard_plan *out, dt_err *err);
/* Whether worker reads file f (FILE: f % W == w; DATA and OFF: every file). */
bool dt_shard_reads_file(const dt_shard_plan *plan, size_t f);
/* Number of elements the worker keeps, given file_start (nfiles + 1 prefix offsets). */
size_t dt_shard_count(const dt_shard_plan *plan, const size_t *file_start, size_t nfiles);
/* The worker's elements (dataset indices) in reading order, before shuffling: out has room for
 * dt_shard_count(...) entries. DATA keeps positions j % W == w of order (the deterministic
 * global order, NULL = identity) - of n = file_start[nfiles] elements. */
void dt_shard_elements(const dt_shard_plan *plan, const size_t *file_start, size_t nfiles,
                       const size_t *order, size_t *out);

/* ------------------------------------------------------------------------------ shuffle -- */

/* Writes into order (n entries, in and out) a permutation of its input: FULL is Fisher-Yates;
 * BUFFER is tf.data's: a buffer of K elements, each output drawn uniformly from it and
 * replaced by the next input. Deterministic for (seed, stream). NONE leaves order as it is.
 * Returns DT_ENOMEM if the buffer cannot be allocated. */
dt_status dt_shuffle_apply(const dt_shuffle *sh, uint64_t seed, uint64_t stream, size_t *order,
                           size_t n, dt_err *err);

/* ----------------------------------------------------------------------------- pipeline -- */

typedef struct dt_pipeline_opts {
    int global_batch;        /* examples per step on all replicas together (Keras batch_size) */
    int num_replicas;        /* R, replicas in the ring; global_batch % R == 0 */
    int replica_rank;        /* this replica's rank, 0..R-1 */
    int replicas_per_worker; /* local replicas sharing one worker's shard (GPUs of a host);
                                worker = rank / this, local = rank % this; default 1 */
    dt_shard_policy policy;
    dt_shuffle shuffle;
    uint64_t seed;
    int prefetch;        /* batches read ahead on the prefetch thread; 0 = no thread */
    bool drop_remainder; /* only steps that are full on every replica */
    /* Batches without their features (x NULL): the rows' indices, labels and targets only, for
     * a consumer that holds the decoded set elsewhere (fit's feed with the set on the device
     * gathers x there by index). The order, sharding and every other field are the same. */
    bool no_x;
} dt_pipeline_opts;

/* One step's input on one replica. x rows [0, n) are valid; n may be 0 near an epoch's end. */
typedef struct dt_batch {
    float *x;         /* (local_batch, x_size) float32, first n rows valid; NULL: opts.no_x */
    int32_t *y_i32;   /* (local_batch) sparse labels, or NULL */
    float *y_f32;     /* (local_batch, y_size) float labels, or NULL */
    size_t *index;    /* (local_batch) dataset index of each row */
    int n;            /* this replica's examples in this step */
    int64_t global_n; /* examples of this step on all replicas: divide the loss by it */
    int64_t step, epoch;
    bool last; /* the epoch's last step */
} dt_batch;

typedef struct dt_pipeline dt_pipeline;

dt_pipeline_opts dt_pipeline_opts_default(void);

/* Creates a pipeline over ds (borrowed: it must outlive the pipeline) and starts its prefetch
 * thread. Checks opts (batch divisible by replicas, rank in range, FILE needs enough files). */
dt_status dt_pipeline_new(const dt_dataset *ds, const dt_pipeline_opts *opts, dt_pipeline **out,
                          dt_err *err);
/* Steps of every epoch; identical on every replica of one job. */
int64_t dt_pipeline_steps_per_epoch(const dt_pipeline *p);
/* Examples per replica per step (global_batch / R). */
int dt_pipeline_local_batch(const dt_pipeline *p);
/* Examples this replica sees per epoch. */
size_t dt_pipeline_local_count(const dt_pipeline *p);
/* Starts epoch `epoch` (shuffled with (seed, epoch)); abandons what is left of the current. */
dt_status dt_pipeline_epoch_begin(dt_pipeline *p, int64_t epoch, dt_err *err);
/* The next batch of the epoch, waiting until dl; *b = NULL after the last step. DT_ETIMEDOUT
 * if no batch was ready by dl; DT_ESTATE before dt_pipeline_epoch_begin. */
dt_status dt_pipeline_next(dt_pipeline *p, const dt_batch **b, dt_deadline dl, dt_err *err);
/* Stops and joins the prefetch thread (even mid-epoch) and frees everything. NULL is a no-op. */
void dt_pipeline_free(dt_pipeline *p);

/* ------------------------------------------------------------------------------ inspect -- */

typedef struct dt_data_feature_info {
    char name[DT_DATA_NAME_LEN];
    char dtype[16]; /* "uint8", "int64", "float32", "bytes", "string", ... */
    int rank;       /* -1: varies between records */
    int64_t shape[DT_MAX_IDX_DIMS];
} dt_data_feature_info;

#define DT_INSPECT_MODES 16 /* distinct image modes counted; more are "other" */
#define DT_INSPECT_BAD   10 /* unreadable images whose reasons are kept */
#define DT_INSPECT_SIZES 8  /* size buckets: < 64, < 128, < 256, ... < 4096, >= 4096 px */

/* What the images of a folder or of a TFRecord's JPEG/PNG bytes features are. */
typedef struct dt_data_image_info {
    uint64_t images;     /* image files listed, or image values (JPEG/PNG bytes) of records */
    uint64_t jpeg, png;  /* by signature */
    uint64_t other;      /* neither signature (BMP, GIF, text named .jpg...) */
    uint64_t unreadable; /* could not be decoded as dtrain would (other included) */
    char mode[DT_INSPECT_MODES][8]; /* PIL's mode names, in order of first appearance */
    uint64_t mode_count[DT_INSPECT_MODES];
    size_t nmodes;
    /* sizes of the images whose header could be read */
    uint64_t sized;
    int height_min, height_median, height_max;
    int width_min, width_median, width_max;
    uint64_t height_hist[DT_INSPECT_SIZES], width_hist[DT_INSPECT_SIZES];
    char bad[DT_INSPECT_BAD][512]; /* "file: reason" of the first unreadable ones, in order */
    size_t nbad;
} dt_data_image_info;

/* The lower bound in pixels of size bucket b (0, 64, 128, ..., 4096). */
int dt_data_inspect_size_bucket_lo(int b);

typedef struct dt_data_file_info {
    char format[16]; /* "idx", "idx.gz", "csv", "tfrecord", "tfrecord.gz" */
    uint64_t records;
    dt_data_feature_info *features; /* (nfeatures), owned */
    size_t nfeatures;
    bool has_labels;
    char label_name[DT_DATA_NAME_LEN];
    uint64_t *label_hist; /* (nlabel_hist) counts of labels 0..n-1, owned */
    size_t nlabel_hist;
    uint64_t labels_out_of_range; /* negative or >= DT_MAX_CLASSES */
    dt_data_image_info *images;   /* owned; NULL when no image was found */
    char **class_names;           /* (nclasses) image folder: label_hist[k] is class k's files */
    size_t nclasses;
} dt_data_file_info;

/* Detects the format (IDX by magic, gzip by magic then inside, TFRecord by the first record's
 * CRC, else CSV) and describes the file: record count, every feature with dtype and shape,
 * and a histogram of label (a feature name; "" = "label" when present, IDX label files alone).
 * A TFRecord's JPEG/PNG values are decoded and described in out->images. A folder is read as
 * an image folder (Keras's classes and files, labels inferred): records are its image files,
 * the histogram counts classes (class_names), out->images describes the files, each decoded
 * on `threads` threads (0 = one per CPU) as a job would decode it. */
dt_status dt_data_inspect(const char *path, const char *label, dt_data_file_info *out, dt_err *err);
dt_status dt_data_inspect_threads(const char *path, const char *label, int threads,
                                  dt_data_file_info *out, dt_err *err);
void dt_data_file_info_destroy(dt_data_file_info *info);

#endif
