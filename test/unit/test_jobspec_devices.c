/* $.strategy.devices and $.strategy.precision in lib/config/jobspec: TF's device strings for the
 * replicas of one daemon, all GPUs or all CPUs, each error with its JSON path. */
#include "dt_test.h"

#include "config/jobspec.h"

#include <sys/stat.h>

#define BASE                                                                                       \
    "\"model\": {\"class_name\": \"Sequential\", \"config\": {\"layers\": []}}, "                  \
    "\"compile\": {\"loss\": \"sparse_categorical_crossentropy\"}, \"data\": {\"train\": {}}"

/* Parses BASE with "strategy": {STRATEGY} (NULL: no strategy). */
static dt_status parse_strategy(const char *strategy, dt_jobspec *s, dt_err *err)
{
    char data[600], state[600], buf[4096];
    snprintf(data, sizeof data, "%s/data", dt_test_tmpdir());
    snprintf(state, sizeof state, "%s/state", dt_test_tmpdir());
    mkdir(data, 0755);
    mkdir(state, 0755);
    if (strategy)
        snprintf(buf, sizeof buf, "{" BASE ", \"strategy\": {%s}}", strategy);
    else
        snprintf(buf, sizeof buf, "{" BASE "}");
    dt_jobspec_roots r = {.data_root = data, .state_dir = state};
    return dt_jobspec_parse(buf, strlen(buf), &r, s, err);
}

static dt_status parse_devices(const char *devices, dt_jobspec *s, dt_err *err)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "\"devices\": %s", devices);
    return parse_strategy(devices ? buf : NULL, s, err);
}

static void expect_fail(const char *devices, dt_status code, const char *needle)
{
    dt_jobspec s;
    dt_err err = {0};
    dt_status st = parse_devices(devices, &s, &err);
    if (st != code)
        fprintf(stderr, "devices %s: got %s: %s\n", devices, dt_status_name(st), err.msg);
    ASSERT_EQ(st, code);
    ASSERT_CONTAINS(err.msg, needle);
}

static void expect_one(const char *devices, bool gpu, int want)
{
    dt_jobspec s;
    dt_err err = {0};
    ASSERT_OK(parse_devices(devices, &s, &err), &err);
    ASSERT_EQ(s.ndevices, 1);
    ASSERT_EQ(s.gpu, gpu);
    ASSERT_EQ(s.devices[0], want);
    dt_jobspec_destroy(&s);
}

DT_TEST(jobspec_devices)
{
    expect_one(NULL, false, 0); /* the default: one replica on /cpu:0 */
    expect_one("null", false, 0);
    expect_one("[\"/cpu:0\"]", false, 0);
    expect_one("[\"/CPU:3\"]", false, 3);
    expect_one("[\"/device:CPU:2\"]", false, 2);
    expect_one("[\"/device:cpu:12\"]", false, 12);
    expect_one("[\"/gpu:0\"]", true, 0);
    expect_one("[\"/Gpu:5\"]", true, 5);
    expect_one("[\"/DEVICE:gpu:7\"]", true, 7);

    expect_fail("[\"/cpu:0\", \"/device:GPU:1\"]", DT_EINVAL,
                "$.strategy.devices[1]: \"/device:GPU:1\" is a GPU but $.strategy.devices[0] "
                "\"/cpu:0\" is a CPU: their rounding differs, so one job trains on GPUs or on "
                "CPUs");
    expect_fail("[\"/gpu:0\", \"/gpu:1\", \"/cpu:0\"]", DT_EINVAL,
                "$.strategy.devices[2]: \"/cpu:0\" is a CPU but $.strategy.devices[0] \"/gpu:0\" "
                "is a GPU");
    expect_fail("[\"/cpu:0\", \"/cpu:0\"]", DT_EINVAL,
                "$.strategy.devices[1]: \"/cpu:0\" names the same device as "
                "$.strategy.devices[0]");
    expect_fail("[\"/cpu:0\", \"/device:CPU:0\"]", DT_EINVAL, "names the same device");
    expect_fail("[\"/gpu:1\", \"/device:GPU:1\"]", DT_EINVAL,
                "$.strategy.devices[1]: \"/device:GPU:1\" names the same device as "
                "$.strategy.devices[0]");
    expect_fail("[\"cpu:0\"]", DT_EINVAL,
                "$.strategy.devices[0]: \"cpu:0\": give a device as \"/gpu:N\" or \"/cpu:N\"");
    expect_fail("[\"gpu:0\"]", DT_EINVAL, "$.strategy.devices[0]: \"gpu:0\": give a device");
    expect_fail("[\"/cpu:\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[\"/gpu:\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[\"/cpu:-1\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[\"/gpu:-1\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[\"/cpu:1x\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[\"/gpu:0\", \"/gpu: 1\"]", DT_EINVAL, "$.strategy.devices[1]");
    expect_fail("[\"/device:gpu0\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[\"/tpu:0\"]", DT_EINVAL, "$.strategy.devices[0]");
    expect_fail("[0]", DT_EINVAL, "$.strategy.devices[0]: must be a string");
    expect_fail("[\"/gpu:0\", null]", DT_EINVAL, "$.strategy.devices[1]: must be a string");
    expect_fail("[]", DT_EINVAL, "$.strategy.devices: give 1 to 64 devices, got 0");
    expect_fail("\"/cpu:0\"", DT_EINVAL, "$.strategy.devices: must be an array");
    /* several replicas: one trainer thread each (lib/service/trainer.c) */
    dt_jobspec s;
    dt_err err = {0};
    ASSERT_OK(parse_devices("[\"/cpu:0\", \"/device:CPU:3\", \"/cpu:1\"]", &s, &err), &err);
    ASSERT_EQ(s.ndevices, 3);
    ASSERT_EQ(s.gpu, false);
    ASSERT_EQ(s.devices[0], 0);
    ASSERT_EQ(s.devices[1], 3);
    ASSERT_EQ(s.devices[2], 1);
    dt_jobspec_destroy(&s);
    ASSERT_OK(parse_devices("[\"/gpu:2\", \"/GPU:0\", \"/device:GPU:1\"]", &s, &err), &err);
    ASSERT_EQ(s.ndevices, 3);
    ASSERT_EQ(s.gpu, true);
    ASSERT_EQ(s.devices[0], 2);
    ASSERT_EQ(s.devices[1], 0);
    ASSERT_EQ(s.devices[2], 1);
    dt_jobspec_destroy(&s);
}

static dt_jobspec_precision precision_of(const char *strategy)
{
    dt_jobspec s;
    dt_err err = {0};
    ASSERT_OK(parse_strategy(strategy, &s, &err), &err);
    dt_jobspec_precision p = s.precision;
    dt_jobspec_destroy(&s);
    return p;
}

static void expect_strategy_fail(const char *strategy, const char *needle)
{
    dt_jobspec s;
    dt_err err = {0};
    dt_status st = parse_strategy(strategy, &s, &err);
    if (st != DT_EINVAL)
        fprintf(stderr, "strategy {%s}: got %s: %s\n", strategy, dt_status_name(st), err.msg);
    ASSERT_EQ(st, DT_EINVAL);
    ASSERT_CONTAINS(err.msg, needle);
}

DT_TEST(jobspec_devices_precision)
{
    ASSERT_EQ(precision_of(NULL), DT_JOBSPEC_PRECISION_FLOAT32); /* strict float32 by default */
    ASSERT_EQ(precision_of("\"precision\": null"), DT_JOBSPEC_PRECISION_FLOAT32);
    ASSERT_EQ(precision_of("\"precision\": \"float32\""), DT_JOBSPEC_PRECISION_FLOAT32);
    ASSERT_EQ(precision_of("\"devices\": [\"/gpu:0\"], \"precision\": \"tf32\""),
              DT_JOBSPEC_PRECISION_TF32);
    /* on CPUs it is accepted and means nothing, as TF's set_float32_matmul_precision */
    ASSERT_EQ(precision_of("\"devices\": [\"/cpu:0\"], \"precision\": \"tf32\""),
              DT_JOBSPEC_PRECISION_TF32);
    ASSERT_EQ(precision_of("\"precision\": \"tf32\""), DT_JOBSPEC_PRECISION_TF32);
    ASSERT_STREQ(dt_jobspec_precision_name(DT_JOBSPEC_PRECISION_TF32), "tf32");
    ASSERT_STREQ(dt_jobspec_precision_name(DT_JOBSPEC_PRECISION_FLOAT32), "float32");

    expect_strategy_fail("\"precision\": \"TF32\"",
                         "$.strategy.precision: \"TF32\": use \"float32\"");
    expect_strategy_fail("\"precision\": \"bfloat16\"", "$.strategy.precision: \"bfloat16\"");
    expect_strategy_fail("\"precision\": \"highest\"", "$.strategy.precision: \"highest\"");
    expect_strategy_fail("\"precision\": 32", "$.strategy.precision: must be a non-empty string");
    expect_strategy_fail("\"precision\": \"\"", "$.strategy.precision: must be a non-empty string");
    expect_strategy_fail("\"precison\": \"tf32\"", "precison");
}
