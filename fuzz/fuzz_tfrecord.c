/* fuzz_tfrecord.c - TFRecord framing, uncompressed and GZIP: every record through
 * dt_tfrecord_open / dt_tfrecord_next (length and data CRCs, truncation, the size limit), then
 * dt_data_inspect on the same file.
 *
 * Input: [flags] [file]. flags: bit 0 gzip the file, bit 1 open it as GZIP (a mismatch with
 * bit 0 must be refused cleanly). */
#include "common.h"

#include "data/data.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t flags = fz_u8(&in);
    char path[FZ_PATH];
    if (flags & 1) {
        size_t zn;
        uint8_t *z = fz_gzip(in.p, in.n, &zn);
        fz_write("data.tfrecord", z, zn, path);
        free(z);
    } else {
        fz_write("data.tfrecord", in.p, in.n, path);
    }

    dt_err err = {0};
    dt_tfrecord_reader *r = NULL;
    if (dt_tfrecord_open(path, flags & 2, &r, &err) == DT_OK) {
        const uint8_t *rec;
        size_t len;
        uint64_t sum = 0;
        while (dt_tfrecord_next(r, &rec, &len, &err) == DT_OK)
            for (size_t i = 0; i < len; i++) /* every byte handed out must be readable */
                sum += rec[i];
        (void)sum;
        dt_tfrecord_close(r);
    }

    dt_data_file_info info = {0};
    if (dt_data_inspect(path, "", &info, &err) == DT_OK)
        dt_data_file_info_destroy(&info);
    return 0;
}
