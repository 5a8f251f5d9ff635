/* The job specs shipped in config/jobs/ parse and pass the submit-time validation (with the
 * Fashion-MNIST files Debian's dataset-fashion-mnist installs). */
#include "dt_test.h"

#include "config/jobspec.h"
#include "train/train.h"

#include <unistd.h>

static void check_job(const char *rel, size_t train_examples, size_t params)
{
    if (access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0)
        DT_SKIP("Fashion-MNIST is not installed (make deps)");
    dt_jobspec s;
    dt_err err = {0};
    dt_jobspec_roots roots = {.data_root = "/usr/share/datasets", .state_dir = dt_test_tmpdir()};
    ASSERT_OK(dt_jobspec_parse_file(dt_test_src_path(rel), &roots, &s, &err), &err);
    dt_train_info info;
    ASSERT_OK(dt_train_validate(&s, &info, &err), &err);
    ASSERT_EQ(info.train_examples, train_examples);
    ASSERT_EQ(info.val_examples, 10000);
    ASSERT_EQ(info.params_total, params);
    dt_jobspec_destroy(&s);
}

DT_TEST_TIMEOUT(train_job_fmnist_cnn, 60)
{
    /* conv2d 320 + dense 5408*64+64 + dense_1 650 */
    check_job("config/jobs/fmnist-cnn.json", 60000, 320 + 346176 + 650);
}

DT_TEST_TIMEOUT(train_job_tiny, 60)
{
    check_job("config/jobs/tiny.json", 10000, 784 * 32 + 32 + 330);
}
