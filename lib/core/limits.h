/*
 * limits.h - every ceiling on untrusted input, in one place.
 *
 * Buffers fed by files, JSON or the network are created with one of these as their maximum and
 * fail with DT_ETOOBIG (naming the limit) past it, instead of growing without bound.
 */
#ifndef DT_CORE_LIMITS_H
#define DT_CORE_LIMITS_H

#define DT_MAX_TFCONFIG         (1u << 20)    /* TF_CONFIG JSON text */
#define DT_MAX_CLUSTER_TASKS    1024          /* tasks in one cluster */
#define DT_MAX_ADDRESS          256           /* "host:port" */
#define DT_MAX_JOBSPEC          (4u << 20)    /* job spec JSON */
#define DT_MAX_MODEL_JSON       (16u << 20)   /* Keras model JSON */
#define DT_MAX_RPC_MSG          (64u << 20)   /* one control-plane gRPC message */
#define DT_MAX_TOKEN            4096          /* token file */
#define DT_MAX_PEM              (1u << 20)    /* one TLS PEM file (certificate chain, key, CA) */
#define DT_MAX_TFRECORD         (256u << 20)  /* one TFRecord record */
#define DT_MAX_IDX_DIMS         8             /* IDX rank */
#define DT_MAX_CSV_LINE         (1u << 20)    /* one CSV line */
#define DT_MAX_SAFETENSORS_HDR  (100u << 20)  /* safetensors JSON header */
#define DT_MAX_SAFETENSORS_FILE (64ull << 30) /* a whole safetensors file, read into memory */
#define DT_MAX_DATA_FILE        (4ull << 30)  /* one data file, decoded (IDX, CSV, TFRecord .gz) */
/* A .gz data file may declare at most this many times its own size: real data sets inflate
 * 2-10x, a zero-filled bomb ~1000x (deflate's ceiling is 1032x). */
#define DT_MAX_GZIP_RATIO 256
/* Encoded images (JPEG, PNG: image folders and TFRecord image features). The pixel limit is
 * checked on the declared header before anything is allocated; 64 Mi pixels is 8192x8192, past
 * any training image and far below a 60000x60000 header's 3.6 G. */
#define DT_MAX_IMAGE_FILE    (256u << 20)  /* one encoded image file */
#define DT_MAX_IMAGE_DIM     65535         /* one side of an image (JPEG's own ceiling) */
#define DT_MAX_IMAGE_PIXELS  (64u << 20)   /* width x height of one declared image */
#define DT_MAX_JPEG_SCANS    500           /* progressive scans: past it a file is a CPU bomb */
#define DT_MAX_IMAGE_FILES   (1u << 24)    /* files of one image folder */
#define DT_MAX_IMAGE_DATASET (16ull << 30) /* decoded images of one data set, in memory (uint8) */
#define DT_MAX_DATA_THREADS  256           /* "num_parallel_calls": decoding threads of one load */
#define DT_MAX_DATA_FILES    65536         /* files of one data set (after globbing) */
#define DT_MAX_DATA_FEATURES 256           /* features of one record / CSV columns used */
#define DT_MAX_CSV_COLUMNS   65536         /* columns of one CSV line */
#define DT_MAX_CLASSES       65536         /* label histogram ceiling (inspect) */
#define DT_MAX_NN_LAYERS     4096          /* layers of one Keras model */
#define DT_MAX_NN_PARAMS     (1ull << 30)  /* weights of one model (floats, 4 GiB) */
#define DT_MAX_NN_DIM        (1 << 24)     /* one axis of a layer's output */
#define DT_MAX_WEIGHTS_BYTES (16ull << 30) /* one exported weights file, fetched in chunks */
#define DT_EXPORT_CHUNK      (32u << 20)   /* one Export reply's piece of the file */

#endif
