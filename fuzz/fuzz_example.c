/* fuzz_example.c - tf.train.Example records decoded into a dataset: dt_tfrecord_load with the
 * spec's features (declared or inferred shapes, uint8 / int64 / float32, int or float labels),
 * and dt_data_inspect's feature listing and label histogram.
 *
 * Input: [flags] then records, each a u16 length + a serialized tf.train.Example; each is framed
 * as a valid TFRecord, so the fuzzer works on the Examples themselves. flags: bit 0 gzip the
 * file, bits 1-2 pick one of four specs (below). */
#include "common.h"

#include "data/data.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

static dt_data_feature feature(const char *name, dt_data_dtype dtype, int rank, int64_t d0,
                               int64_t d1)
{
    dt_data_feature f = {.dtype = dtype, .rank = rank, .shape = {d0, d1}, .scale = 1};
    strcpy(f.name, name);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t flags = fz_u8(&in);
    uint8_t *file = malloc(size / 2 * 16 + 16 + size); /* parts of >= 2 bytes, 16 per frame */
    size_t n = 0;
    if (!file)
        return 0;
    while (in.n > 0) {
        size_t len;
        const uint8_t *rec = fz_part(&in, &len);
        dt_tfrecord_frame(rec, len, file + n);
        n += len + 16;
    }
    char path[FZ_PATH];
    if (flags & 1) {
        size_t zn;
        uint8_t *z = fz_gzip(file, n, &zn);
        fz_write("data.tfrecord", z, zn, path);
        free(z);
    } else {
        fz_write("data.tfrecord", file, n, path);
    }
    free(file);

    dt_data_feature feats[2];
    dt_data_source src = {.format = DT_DATA_FORMAT_TFRECORD, .nfiles = 1, .scale = 1};
    switch ((flags >> 1) & 3) {
    case 0: /* MNIST-like: uint8 image [2, 3] and an int64 class id */
        feats[0] = feature("image", DT_DATA_DTYPE_UINT8, 2, 2, 3);
        feats[1] = feature("label", DT_DATA_DTYPE_INT64, 0, 0, 0);
        strcpy(src.label, "label");
        break;
    case 1: /* shapes from the first record, a float regression target */
        feats[0] = feature("x", DT_DATA_DTYPE_FLOAT32, 0, 0, 0);
        feats[1] = feature("y", DT_DATA_DTYPE_FLOAT32, 0, 0, 0);
        strcpy(src.label, "y");
        break;
    case 2: /* two features concatenated, no label */
        feats[0] = feature("x", DT_DATA_DTYPE_INT64, 1, 4, 0);
        feats[1] = feature("image", DT_DATA_DTYPE_UINT8, 0, 0, 0);
        break;
    default: /* an int64 label of two values: float labels */
        feats[0] = feature("label", DT_DATA_DTYPE_INT64, 1, 2, 0);
        feats[1] = feature("x", DT_DATA_DTYPE_FLOAT32, 0, 0, 0);
        strcpy(src.label, "label");
        break;
    }
    char *files[1] = {path};
    src.files = files;
    src.gzip = flags & 1;
    src.features = feats;
    src.nfeatures = 2;

    dt_err err = {0};
    dt_dataset *ds = NULL;
    if (dt_tfrecord_load(&src, &ds, &err) == DT_OK)
        dt_dataset_free(ds);

    dt_data_file_info info = {0};
    if (dt_data_inspect(path, flags & 8 ? "x" : "", &info, &err) == DT_OK)
        dt_data_file_info_destroy(&info);
    return 0;
}
