/* Unit tests of lib/data: CSV with a header, a label column, quoted fields and broken rows. */
#include "dt_test.h"

#include "core/buf.h"
#include "data/data.h"

#include <cjson/cJSON.h>

static char *write_tmp(const char *name, const char *text)
{
    dt_err err = {0};
    char *p = malloc(512);
    snprintf(p, 512, "%s/%s", dt_test_tmpdir(), name);
    ASSERT_OK(dt_file_write_atomic(p, text, strlen(text), &err), &err);
    return p;
}

static void csv_src(dt_data_source *src, char **files, size_t n)
{
    memset(src, 0, sizeof *src);
    src->format = DT_DATA_FORMAT_CSV;
    src->files = files;
    src->nfiles = n;
    src->header = true;
    src->scale = 1;
    src->label_index = -1;
}

DT_TEST(data_csv_header_label_and_quotes)
{
    dt_err err = {0};
    char *files[2] = {
        write_tmp("a.csv", "f1,\"label\",\"f,2\"\r\n1.5,2,\"3\"\r\n\n\"-4\",0,5e-1\n"),
        write_tmp("b.csv", "f1,label,\"f,2\"\n7,1,\" 8 \"\n"),
    };
    dt_data_source src;
    csv_src(&src, files, 2);
    strcpy(src.label_column, "label");
    dt_dataset *ds;
    ASSERT_OK(dt_csv_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, 3);
    ASSERT_EQ(ds->x_size, 2);
    ASSERT_EQ(ds->x_shape[0], 2);
    ASSERT_NEAR(ds->x_f32[0], 1.5, 0);
    ASSERT_NEAR(ds->x_f32[1], 3, 0);
    ASSERT_NEAR(ds->x_f32[2], -4, 0);
    ASSERT_NEAR(ds->x_f32[3], 0.5, 0);
    ASSERT_NEAR(ds->x_f32[5], 8, 0);
    ASSERT_EQ(ds->y_kind, DT_LABEL_INT32);
    ASSERT_EQ(ds->y_i32[0], 2);
    ASSERT_EQ(ds->y_i32[2], 1);
    ASSERT_EQ(ds->num_classes, 3);
    ASSERT_EQ(ds->file_start[1], 2);
    dt_dataset_free(ds);

    /* by index, chosen features, scale, float labels, no header */
    char *f3[1] = {write_tmp("c.csv", "1,2,0.5\n3,4,1.5\n")};
    csv_src(&src, f3, 1);
    src.header = false;
    src.label_index = 2;
    src.scale = 0.5f;
    int idx[1] = {1};
    src.feature_column_index = idx;
    src.nfeature_columns = 1;
    ASSERT_OK(dt_csv_load(&src, &ds, &err), &err);
    ASSERT_EQ(ds->n, 2);
    ASSERT_EQ(ds->x_size, 1);
    ASSERT_NEAR(ds->x_f32[1], 2, 0);
    ASSERT_EQ(ds->y_kind, DT_LABEL_FLOAT);
    ASSERT_NEAR(ds->y_f32[1], 1.5, 0);
    dt_dataset_free(ds);
    free(files[0]);
    free(files[1]);
    free(f3[0]);
}

DT_TEST(data_csv_bad_rows_are_clear_errors)
{
    dt_err err = {0};
    static const struct {
        const char *text, *msg;
        dt_status st;
    } bad[] = {
        {"a,label\n1,2\n3\n", "b.csv:3: 1 columns where the header has 2", DT_EINVAL},
        {"a,label\n1,2\nx,1\n", "b.csv:3: column \"a\" (0): \"x\" is not a number", DT_EINVAL},
        {"a,label\n1,2\n,1\n", "is not a number", DT_EINVAL},
        {"a,label\n1,cat\n", "label \"cat\" is not a number", DT_EINVAL},
        {"a,label\n\"1,2\n", "b.csv:2: a quoted field is never closed", DT_EINVAL},
        {"a,label\n\"1\"x,2\n", "text after a closing quote", DT_EINVAL},
        {"a,lbl\n1,2\n", "no column named \"label\"", DT_EINVAL},
        {"", "empty file", DT_EINVAL},
        {"a,label\n", "no data rows", DT_EINVAL},
        {"a,label\n1,1e999\n", "is not a number", DT_EINVAL},
        {"a,label\n1,-1\n", "", DT_OK}, /* a negative label: float targets */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *files[1] = {write_tmp("b.csv", bad[i].text)};
        dt_data_source src;
        csv_src(&src, files, 1);
        strcpy(src.label_column, "label");
        dt_dataset *ds = NULL;
        dt_status st = dt_csv_load(&src, &ds, &err);
        if (st != bad[i].st)
            DT_FAIL_("case %zu: expected %s, got %s (%s)", i, dt_status_name(bad[i].st),
                     dt_status_name(st), err.msg);
        if (st == DT_OK) {
            ASSERT_EQ(ds->y_kind, DT_LABEL_FLOAT);
            dt_dataset_free(ds);
        } else {
            ASSERT_CONTAINS(err.msg, bad[i].msg);
            ASSERT_TRUE(ds == NULL);
        }
        free(files[0]);
    }
    /* binary garbage and a row over DT_MAX_CSV_LINE */
    char *files[1] = {write_tmp("g.csv", "a,label\n1,2\n")};
    char garbage[64];
    for (int i = 0; i < 64; i++)
        garbage[i] = (char)(i * 37);
    ASSERT_OK(dt_file_write_atomic(files[0], garbage, sizeof garbage, &err), &err);
    dt_data_source src;
    csv_src(&src, files, 1);
    dt_dataset *ds = NULL;
    ASSERT_STATUS(dt_csv_load(&src, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "NUL");
    size_t big = DT_MAX_CSV_LINE + 10;
    char *long_row = malloc(big + 1);
    memset(long_row, '1', big);
    long_row[big] = 0;
    ASSERT_OK(dt_file_write_atomic(files[0], long_row, big, &err), &err);
    ASSERT_STATUS(dt_csv_load(&src, &ds, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "DT_MAX_CSV_LINE");
    free(long_row);
    free(files[0]);
}

/* fuzz/csv found it: `data inspect` cast every number to int64 to see whether it is integral,
 * undefined (UBSan: float-cast-overflow) for 1e300 or 2^63. Numbers outside int64 are float32
 * columns, and such labels stay out of the histogram. */
DT_TEST(data_inspect_csv_numbers_outside_int64)
{
    dt_err err = {0};
    char *path = write_tmp("big.csv", "a,b,c,label\n"
                                      "1e300,9000000000000000000,-9223372036854775808,1\n"
                                      "2,9223372036854775808,0,9e300\n");
    dt_data_file_info info;
    ASSERT_OK(dt_data_inspect(path, "", &info, &err), &err);
    ASSERT_EQ(info.records, 2);
    ASSERT_STREQ(info.features[0].dtype, "float32");
    ASSERT_STREQ(info.features[1].dtype, "float32"); /* 2^63 is one past int64's top */
    ASSERT_STREQ(info.features[2].dtype, "int64");   /* -2^63 is int64's bottom */
    ASSERT_STREQ(info.features[3].dtype, "float32");
    ASSERT_EQ(info.nlabel_hist, 0);
    dt_data_file_info_destroy(&info);
    free(path);
}

/* "shape" reshapes a row's features (a Conv1D's (timesteps, channels) input from one CSV row);
 * a shape of another size is refused naming the file and the column count. */
DT_TEST(data_csv_shape)
{
    dt_err err = {0};
    char *f = write_tmp("s.csv", "a,b,c,d,e,f,label\n1,2,3,4,5,6,0\n7,8,9,10,11,12,1\n");
    const char *dir = dt_test_tmpdir();
    cJSON *j = cJSON_Parse("{\"train\": {\"format\": \"csv\", \"files\": [\"s.csv\"], "
                           "\"label_column\": \"label\", \"shape\": [3, 2]}}");
    dt_data_spec spec;
    ASSERT_OK(dt_data_spec_parse(j, "$.data", dir, &spec, &err), &err);
    dt_dataset *ds;
    ASSERT_OK(dt_dataset_load(&spec.train, &ds, &err), &err);
    ASSERT_EQ(ds->x_rank, 2);
    ASSERT_EQ(ds->x_shape[0], 3);
    ASSERT_EQ(ds->x_shape[1], 2);
    ASSERT_EQ(ds->x_size, 6);
    ASSERT_NEAR(ds->x_f32[7], 8, 0);
    dt_dataset_free(ds);
    spec.train.image_shape[0] = 4;
    ASSERT_STATUS(dt_dataset_load(&spec.train, &ds, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "s.csv: \"shape\" holds 8 values but the rows have 6 feature columns");
    dt_data_spec_destroy(&spec);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"train\": {\"format\": \"csv\", \"files\": [\"s.csv\"], \"shape\": []}}");
    ASSERT_TRUE(dt_data_spec_parse(j, "$.data", dir, &spec, &err) != DT_OK);
    ASSERT_CONTAINS(err.msg, "$.data.train.shape");
    cJSON_Delete(j);
    free(f);
}
