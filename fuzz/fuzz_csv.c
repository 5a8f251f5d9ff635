/* fuzz_csv.c - CSV data files: dt_csv_load with the spec's column choices, and
 * dt_data_inspect (which guesses the header and the column types).
 *
 * Input: [flags] [index] [text]. flags: bit 0 header row, bits 1-2 label (0 none, 1 the column
 * named "label", 2 column number `index`, 3 the column named "y"), bit 3 features by number
 * ({0, index}), bit 4 features by name ({"f1", "x"}), bit 5 split the text in two files at its
 * middle line, bit 6 inspect with label "y". */
#include "common.h"

#include "data/data.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    uint8_t flags = fz_u8(&in), index = fz_u8(&in);
    size_t cut = in.n;
    if (flags & 32) { /* after the newline nearest the middle */
        const uint8_t *nl = memchr(in.p + in.n / 2, '\n', in.n - in.n / 2);
        cut = nl ? (size_t)(nl - in.p) + 1 : in.n;
    }
    char a[FZ_PATH], b[FZ_PATH];
    fz_write("a.csv", in.p, cut, a);
    fz_write("b.csv", in.p + cut, in.n - cut, b);
    char *files[2] = {a, b};

    dt_data_source src = {0};
    src.format = DT_DATA_FORMAT_CSV;
    src.files = files;
    src.nfiles = flags & 32 ? 2 : 1;
    src.scale = 1.0f / 255;
    src.header = flags & 1;
    src.label_index = -1;
    switch ((flags >> 1) & 3) {
    case 1:
        strcpy(src.label_column, "label");
        break;
    case 2:
        src.label_index = index;
        break;
    case 3:
        strcpy(src.label_column, "y");
        break;
    }
    int cols[2] = {0, index};
    char *names[2] = {"f1", "x"};
    if (flags & 8) {
        src.feature_column_index = cols;
        src.nfeature_columns = 2;
    } else if (flags & 16) {
        src.feature_columns = names;
        src.nfeature_columns = 2;
    }

    dt_err err = {0};
    dt_dataset *ds = NULL;
    if (dt_csv_load(&src, &ds, &err) == DT_OK)
        dt_dataset_free(ds);

    dt_data_file_info info = {0};
    if (dt_data_inspect(a, flags & 64 ? "y" : "", &info, &err) == DT_OK)
        dt_data_file_info_destroy(&info);
    return 0;
}
