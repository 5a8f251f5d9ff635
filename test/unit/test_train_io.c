/* Unit tests of lib/train around fit: submit-time validation with JSON paths, weight files
 * (Keras names, slots, refusals), export, evaluate and predict (.npy and CSV). */
#include "test_train_util.h"

#include "core/buf.h"
#include "io/safetensors.h"
#include "nn/optim.h"

#include <cJSON.h>
#include <sys/stat.h>
#include <unistd.h>

/* A copy of text with the first `from` replaced by `to` (static buffer). */
static const char *replace(const char *text, const char *from, const char *to)
{
    static char buf[16384];
    const char *p = strstr(text, from);
    ASSERT_TRUE(p != NULL);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - text), text, to, p + strlen(from));
    return buf;
}

static void expect_invalid(const char *text, dt_status code, const char *needle)
{
    dt_jobspec s;
    tt_parse(text, &s);
    dt_train_info info;
    dt_err err = {0};
    dt_status st = dt_train_validate(&s, &info, &err);
    if (st != code)
        fprintf(stderr, "got %s: %s\n", dt_status_name(st), err.msg);
    ASSERT_EQ(st, code);
    ASSERT_CONTAINS(err.msg, needle);
    dt_jobspec_destroy(&s);
}

DT_TEST(train_validate)
{
    tt_setup(100, 20);
    dt_jobspec s;
    tt_parse(tt_spec(2, 32, "\"adam\"", ""), &s);
    dt_train_info info;
    dt_err err = {0};
    ASSERT_OK(dt_train_validate(&s, &info, &err), &err);
    ASSERT_EQ(info.train_examples, 100);
    ASSERT_EQ(info.val_examples, 20);
    ASSERT_EQ(info.steps_per_epoch, 4);
    /* conv 3*3*1*4+4, hidden 6*6*4*16+16, out 16*4+4 */
    ASSERT_EQ(info.params_total, 40 + 2320 + 68);
    ASSERT_OK(dt_train_check_world(&s, 4, &err), &err);
    ASSERT_STATUS(dt_train_check_world(&s, 3, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.fit.batch_size: 32");
    dt_jobspec_destroy(&s);
    /* FILE sharding of one IDX file over 2 workers */
    tt_parse(replace(tt_spec(1, 32, "\"adam\"", ""), "\"DATA\"", "\"FILE\""), &s);
    ASSERT_OK(dt_train_check_world(&s, 1, &err), &err);
    ASSERT_STATUS(dt_train_check_world(&s, 2, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.data.shard_policy");
    dt_jobspec_destroy(&s);

    expect_invalid(tt_spec(1, 32, "\"adafactor\"", ""), DT_ENOTSUP, "$.compile.optimizer");
    expect_invalid(tt_spec(1, 32,
                           "{\"class_name\": \"Adam\", \"config\": "
                           "{\"gradient_accumulation_steps\": 4}}",
                           ""),
                   DT_ENOTSUP, "$.compile.optimizer");
    char t[16384];
    snprintf(t, sizeof t, "%s", tt_spec(1, 32, "\"adam\"", ""));
    expect_invalid(replace(t, "SparseCategoricalCrossentropy", "CategoricalFocalCrossentropy"),
                   DT_ENOTSUP, "$.compile.loss");
    /* the data does not fit the model's input */
    expect_invalid(replace(t, "\"image_shape\": [8, 8, 1]", "\"image_shape\": [4, 16, 1]"),
                   DT_EINVAL, "$.data.train: examples have shape (4, 16, 1)");
    /* a data file that does not exist, and one outside the data root */
    expect_invalid(replace(t, "train-images", "trXin-images"), DT_ENOENT, "$.data.train.images");
    char link[1200];
    snprintf(link, sizeof link, "%s/evil-images-idx3-ubyte", dt_test_tmpdir());
    ASSERT_EQ(symlink("/etc/passwd", link), 0);
    expect_invalid(replace(t, "train-images", "evil-images"), DT_EPERM, "outside the data root");
    /* a model the nn module refuses */
    expect_invalid(replace(t, "\"Flatten\"", "\"Flutten\""), DT_ENOTSUP, "$.model");
    /* NCCL without a CUDA build is refused, not quietly run on the ring */
    expect_invalid(tt_spec(1, 32, "\"adam\"", ", \"strategy\": {\"communication\": \"NCCL\"}"),
                   DT_ENOTSUP, "$.strategy.communication");
}

/* Trains the tiny model one epoch in one process; returns the final weights path. */
static const char *train_one(dt_jobspec *spec)
{
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/job", dt_test_tmpdir());
    dt_train_opts o = dt_train_opts_default();
    o.out_dir = dir;
    dt_trainer *t;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(spec, &o, &t, &err), &err);
    dt_train_info info;
    dt_train_get_info(t, &info);
    ASSERT_EQ(info.local_examples, info.train_examples);
    dt_train_result r;
    dt_train_comm c = dt_train_comm_local();
    ASSERT_OK(dt_train_fit(t, &c, &r, &err), &err);
    dt_train_free(t);
    static char final[4096];
    snprintf(final, sizeof final, "%s", r.final_path);
    return final;
}

DT_TEST(train_export_evaluate_predict)
{
    tt_setup(256, 40);
    dt_jobspec spec;
    tt_parse(
        tt_spec(2, 32, "{\"class_name\": \"Adam\", \"config\": {\"learning_rate\": 0.01}}", ""),
        &spec);
    const char *final = train_one(&spec);
    dt_err err = {0};

    char exp[1100];
    snprintf(exp, sizeof exp, "%s/export.safetensors", dt_test_tmpdir());
    ASSERT_OK(dt_train_export(final, exp, &err), &err);
    dt_st_file *f;
    ASSERT_OK(dt_st_open(exp, &f, &err), &err);
    ASSERT_EQ(dt_st_count(f), 6); /* conv, hidden, out: kernel + bias */
    const dt_st_tensor *k = dt_st_find(f, "conv/kernel");
    ASSERT_TRUE(k != NULL);
    ASSERT_EQ(k->ndim, 4); /* [kh, kw, in, out] */
    ASSERT_EQ(k->shape[0], 3);
    ASSERT_EQ(k->shape[3], 4);
    k = dt_st_find(f, "hidden/kernel");
    ASSERT_EQ(k->shape[0], 144); /* Dense [in, out] */
    ASSERT_EQ(k->shape[1], 16);
    ASSERT_STREQ(dt_st_metadata(f, "format"), "dtrain-weights-1");
    ASSERT_STREQ(dt_st_metadata(f, "spec_hash"), spec.hash_hex);
    dt_st_free(f);

    /* evaluate on the validation split (NULL) and on an explicit split */
    dt_train_eval_result ev;
    ASSERT_OK(dt_train_evaluate(&spec, exp, NULL, 0, &ev, &err), &err);
    ASSERT_EQ(ev.examples, 40);
    printf("evaluate: loss %.4f accuracy %.4f\n", ev.loss, ev.accuracy);
    ASSERT_TRUE(ev.accuracy > 0.7);
    cJSON *split = cJSON_Parse("{\"format\": \"idx\", \"images\": \"train-images-idx3-ubyte\", "
                               "\"labels\": \"train-labels-idx1-ubyte\", \"scale\": "
                               "0.00392156862745098, \"image_shape\": [8, 8, 1]}");
    dt_train_eval_result ev2;
    ASSERT_OK(dt_train_evaluate(&spec, final, split, 100, &ev2, &err), &err);
    ASSERT_EQ(ev2.examples, 256);

    /* predict: .npy then CSV; rows agree with evaluate's accuracy on the same split */
    char npy[1100], csv[1100];
    snprintf(npy, sizeof npy, "%s/pred.npy", dt_test_tmpdir());
    snprintf(csv, sizeof csv, "%s/pred.csv", dt_test_tmpdir());
    size_t n = 0;
    ASSERT_OK(dt_train_predict(&spec, final, split, 64, npy, &n, &err), &err);
    ASSERT_EQ(n, 256);
    char *bytes;
    size_t len;
    ASSERT_OK(dt_file_read_all(npy, 1 << 20, &bytes, &len, &err), &err);
    ASSERT_TRUE(memcmp(bytes, "\x93NUMPY\x01\x00", 8) == 0);
    size_t hl = (unsigned char)bytes[8] | (size_t)(unsigned char)bytes[9] << 8;
    ASSERT_EQ((10 + hl) % 64, 0);
    ASSERT_CONTAINS(bytes + 10, "'shape': (256, 4)");
    ASSERT_EQ(len, 10 + hl + 256 * 4 * sizeof(float));
    const float *y = (const float *)(bytes + 10 + hl);
    ASSERT_OK(dt_train_predict(&spec, final, split, 0, csv, NULL, &err), &err);
    char *text;
    size_t tlen;
    ASSERT_OK(dt_file_read_all(csv, 1 << 22, &text, &tlen, &err), &err);
    int lines = 0;
    for (size_t i = 0; i < tlen; i++)
        lines += text[i] == '\n';
    ASSERT_EQ(lines, 256);
    ASSERT_NEAR(strtod(text, NULL), y[0], 1e-6 * (fabs(y[0]) + 1));
    free(text);
    free(bytes);

    /* a predict path that cannot be written fails with the path */
    ASSERT_STATUS(dt_train_predict(&spec, final, split, 0, "/nonexistent/dir/p.npy", NULL, &err),
                  DT_EIO);
    cJSON_Delete(split);
    dt_jobspec_destroy(&spec);
}

/* fuzz/rpc found it: Jobs.Evaluate and Jobs.Predict pass the request's batch_size to the
 * pipeline, which allocated that many rows per slot (805306367 rows: a malloc of gigabytes, or
 * DT_ENOMEM). A batch over the data set is the data set. */
DT_TEST(train_evaluate_predict_batch_over_data_set)
{
    tt_setup(64, 40);
    dt_jobspec spec;
    tt_parse(tt_spec(1, 32, "\"sgd\"", ""), &spec);
    const char *final = train_one(&spec);
    dt_err err = {0};
    dt_train_eval_result small, huge;
    ASSERT_OK(dt_train_evaluate(&spec, final, NULL, 8, &small, &err), &err);
    ASSERT_OK(dt_train_evaluate(&spec, final, NULL, 805306367, &huge, &err), &err);
    ASSERT_EQ(huge.examples, 40);
    ASSERT_NEAR(huge.loss, small.loss, 1e-5 * (fabs(small.loss) + 1));
    ASSERT_NEAR(huge.accuracy, small.accuracy, 0);
    char npy[1100];
    snprintf(npy, sizeof npy, "%s/pred.npy", dt_test_tmpdir());
    size_t n = 0;
    ASSERT_OK(dt_train_predict(&spec, final, NULL, 805306367, npy, &n, &err), &err);
    ASSERT_EQ(n, 40);
    dt_jobspec_destroy(&spec);
}

DT_TEST(train_weights_files)
{
    tt_setup(64, 16);
    dt_jobspec spec;
    tt_parse(tt_spec(1, 32, "\"adam\"", ""), &spec);
    dt_train_opts o = dt_train_opts_default();
    dt_trainer *t;
    dt_err err = {0};
    ASSERT_OK(dt_train_new(&spec, &o, &t, &err), &err);
    dt_model *m = dt_train_model(t);
    dt_optim *opt = dt_train_optim(t);
    size_t np;
    float *p = dt_model_params(m, &np);
    float *slot0 = dt_optim_slot(opt, 0, NULL), *h0 = malloc(np * sizeof(float));
    const dt_nn_ops *ops = dt_model_ops(m); /* model memory is the backend's: upload/download */
    for (size_t i = 0; i < np; i++)
        h0[i] = (float)i * 0.5f;
    ops->upload(slot0, h0, np * sizeof(float));
    dt_optim_set_iterations(opt, 77);
    uint64_t h = dt_train_weights_hash(m);
    char path[1100];
    snprintf(path, sizeof path, "%s/w.safetensors", dt_test_tmpdir());
    const char *meta[] = {"epoch", "3", NULL, NULL};
    ASSERT_OK(dt_train_save_weights(m, opt, meta, path, &err), &err);

    /* scramble, reload: params, slots and iterations come back */
    for (size_t i = 0; i < np; i++)
        h0[i] = 0;
    ops->upload(p, h0, np * sizeof(float));
    ops->upload(slot0, h0, np * sizeof(float));
    dt_optim_set_iterations(opt, 0);
    ASSERT_NE(dt_train_weights_hash(m), h);
    ASSERT_OK(dt_train_load_weights(m, opt, path, &err), &err);
    ASSERT_EQ(dt_train_weights_hash(m), h);
    ASSERT_EQ(dt_optim_iterations(opt), 77);
    ops->download(h0, slot0, np * sizeof(float));
    ASSERT_NEAR(h0[10], 5.0, 0);
    free(h0);

    /* a file of another model: a missing tensor, a wrong shape, an extra tensor */
    dt_st_writer *w = dt_st_writer_new();
    float z[4096] = {0};
    int64_t s2[2] = {144, 16}, s1[1] = {16}, bad[2] = {16, 144};
    ASSERT_OK(dt_st_writer_add(w, "hidden/kernel", DT_ST_F32, 2, s2, z, &err), &err);
    snprintf(path, sizeof path, "%s/other.safetensors", dt_test_tmpdir());
    ASSERT_OK(dt_st_writer_write(w, path, &err), &err);
    ASSERT_STATUS(dt_train_load_weights(m, NULL, path, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "no tensor \"conv/kernel\"");
    dt_st_writer_free(w);

    const char *names[] = {"conv/kernel", "conv/bias",  "hidden/kernel",
                           "hidden/bias", "out/kernel", "out/bias"};
    int64_t shapes[6][4] = {{3, 3, 1, 4}, {4}, {144, 16}, {16}, {16, 4}, {4}};
    int nd[6] = {4, 1, 2, 1, 2, 1};
    for (int mode = 0; mode < 2; mode++) {
        w = dt_st_writer_new();
        for (int i = 0; i < 6; i++) {
            const int64_t *sh = shapes[i];
            if (mode == 0 && i == 2)
                sh = bad;
            ASSERT_OK(dt_st_writer_add(w, names[i], DT_ST_F32, nd[i], sh, z, &err), &err);
        }
        if (mode == 1)
            ASSERT_OK(dt_st_writer_add(w, "extra/bias", DT_ST_F32, 1, s1, z, &err), &err);
        ASSERT_OK(dt_st_writer_write(w, path, &err), &err);
        dt_st_writer_free(w);
        ASSERT_STATUS(dt_train_load_weights(m, NULL, path, &err), DT_EINVAL);
        ASSERT_CONTAINS(err.msg, mode == 0 ? "hidden/kernel" : "extra/bias");
        ASSERT_CONTAINS(err.msg, "another model");
    }
    ASSERT_STATUS(dt_train_latest_checkpoint(dt_test_tmpdir(), (char **)&names[0], &err),
                  DT_ENOENT);
    dt_train_free(t);

    /* initial_weights: a job starts from them */
    char iw[1200];
    snprintf(iw, sizeof iw, ", \"initial_weights\": \"w.safetensors\"");
    dt_jobspec s2spec;
    tt_parse(tt_spec(1, 32, "\"adam\"", iw), &s2spec);
    dt_train_info info;
    ASSERT_OK(dt_train_validate(&s2spec, &info, &err), &err);
    dt_jobspec_destroy(&s2spec);
    snprintf(iw, sizeof iw, ", \"initial_weights\": \"other.safetensors\"");
    tt_parse(tt_spec(1, 32, "\"adam\"", iw), &s2spec);
    ASSERT_STATUS(dt_train_validate(&s2spec, &info, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "$.initial_weights");
    dt_jobspec_destroy(&s2spec);
    dt_jobspec_destroy(&spec);
}
