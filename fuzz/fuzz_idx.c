/* fuzz_idx.c - IDX files, raw and gzip'd: dt_idx_load (images and labels), dt_idx_read and
 * dt_data_inspect, as a job's data and `dtrain data inspect` read them.
 *
 * Input: [flags] [images: u16 length + bytes] [labels: the rest].
 * flags: bit 0 gzip the images, bit 1 gzip the labels, bit 2 no labels file, bit 3 reshape the
 * images to rank 2 with the sizes in the next two bytes. */
#include "common.h"

#include "data/data.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

/* Writes part to name, gzip'd or not; path receives its path. */
static void write_part(const char *name, const uint8_t *p, size_t n, bool gz, char *path)
{
    if (!gz) {
        fz_write(name, p, n, path);
        return;
    }
    size_t zn;
    uint8_t *z = fz_gzip(p, n, &zn);
    fz_write(name, z, zn, path);
    free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t flags = fz_u8(&in);
    int64_t shape[2] = {fz_u8(&in), fz_u8(&in)};
    size_t nimg, nlab;
    const uint8_t *img = fz_part(&in, &nimg);
    const uint8_t *lab = fz_part(&in, &nlab);
    char ipath[FZ_PATH], lpath[FZ_PATH];
    write_part("images.idx", img, nimg, flags & 1, ipath);
    write_part("labels.idx", lab, nlab, flags & 2, lpath);

    dt_err err = {0};
    dt_dataset *ds = NULL;
    if (dt_idx_load(ipath, flags & 4 ? NULL : lpath, 1.0f / 255, flags & 8 ? 2 : 0, shape, &ds,
                    &err) == DT_OK)
        dt_dataset_free(ds);

    dt_idx_header h;
    uint8_t *bytes = NULL;
    size_t len;
    if (dt_idx_read(lpath, &h, &bytes, &len, &err) == DT_OK)
        free(bytes);

    dt_data_file_info info = {0};
    if (dt_data_inspect(ipath, "", &info, &err) == DT_OK)
        dt_data_file_info_destroy(&info);
    return 0;
}
