/* Unit tests of lib/core: status names, error messages, buffers with ceilings, RNG, CRC-32C. */
#include "dt_test.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/rng.h"

DT_TEST(core_status_names_match_table)
{
    ASSERT_STREQ(dt_status_name(DT_OK), "OK");
    ASSERT_STREQ(dt_status_name(DT_EPEER), "EPEER");
    ASSERT_STREQ(dt_status_name((dt_status)9999), "EUNKNOWN");
    ASSERT_STREQ(dt_status_str(DT_ETIMEDOUT), "deadline exceeded");
    /* Numbers are part of the contract: they must never move. */
    ASSERT_EQ(DT_OK, 0);
    ASSERT_EQ(DT_EINVAL, 1);
    ASSERT_EQ(DT_EPEER, 5);
}

DT_TEST(core_err_set_and_prefix)
{
    dt_err err = {0};
    ASSERT_EQ(dt_err_set(&err, DT_EINVAL, "$.task.index: %d is negative", -1), DT_EINVAL);
    ASSERT_EQ(dt_err_prefix(&err, "%s", "TF_CONFIG"), DT_EINVAL);
    ASSERT_STREQ(err.msg, "TF_CONFIG: $.task.index: -1 is negative");
    ASSERT_EQ(dt_err_set(NULL, DT_EIO, "ignored"), DT_EIO);
}

DT_TEST(core_buf_enforces_ceiling)
{
    dt_buf b;
    dt_err err = {0};
    dt_buf_init(&b, 10);
    ASSERT_OK(dt_buf_append(&b, "hello", 5, &err), &err);
    ASSERT_OK(dt_buf_printf(&b, &err, "%d", 1234), &err);
    ASSERT_STREQ(b.data, "hello1234");
    ASSERT_STATUS(dt_buf_append(&b, "xy", 2, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, "10 bytes");
    ASSERT_EQ(b.len, 9);
    dt_buf_destroy(&b);
    dt_buf_destroy(&b); /* zeroed: no-op */
}

DT_TEST(core_file_read_all_limits_and_errors)
{
    char path[512];
    dt_err err = {0};
    snprintf(path, sizeof path, "%s/f.txt", dt_test_tmpdir());
    ASSERT_OK(dt_file_write_atomic(path, "0123456789", 10, &err), &err);
    char *data = NULL;
    size_t len = 0;
    ASSERT_OK(dt_file_read_all(path, 100, &data, &len, &err), &err);
    ASSERT_EQ(len, 10);
    ASSERT_STREQ(data, "0123456789");
    free(data);
    ASSERT_STATUS(dt_file_read_all(path, 5, &data, &len, &err), DT_ETOOBIG);
    ASSERT_CONTAINS(err.msg, path);
    ASSERT_STATUS(dt_file_read_all("/nonexistent/x", 5, &data, &len, &err), DT_ENOENT);
    ASSERT_CONTAINS(err.msg, "/nonexistent/x");
}

DT_TEST(core_file_append_line)
{
    char path[512];
    dt_err err = {0};
    snprintf(path, sizeof path, "%s/log.jsonl", dt_test_tmpdir());
    ASSERT_OK(dt_file_append_line(path, "{\"a\":1}", &err), &err);
    ASSERT_OK(dt_file_append_line(path, "{\"b\":2}", &err), &err);
    char *data = NULL;
    size_t len = 0;
    ASSERT_OK(dt_file_read_all(path, 100, &data, &len, &err), &err);
    ASSERT_STREQ(data, "{\"a\":1}\n{\"b\":2}\n");
    free(data);
    ASSERT_STATUS(dt_file_append_line("/nonexistent/dir/x", "l", &err), DT_EIO);
    ASSERT_CONTAINS(err.msg, "/nonexistent/dir/x");
}

DT_TEST(core_rng_is_reproducible)
{
    dt_rng a, b, c;
    dt_rng_seed(&a, 42);
    dt_rng_seed(&b, 42);
    dt_rng_seed2(&c, 42, 1);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = dt_rng_u64(&a);
        ASSERT_EQ(x, dt_rng_u64(&b));
        differ += x != dt_rng_u64(&c);
    }
    ASSERT_GT(differ, 990);
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        double z = dt_rng_normal(&a);
        sum += z;
        sq += z * z;
        uint64_t k = dt_rng_below(&a, 7);
        ASSERT_LT(k, 7);
        float u = dt_rng_uniform(&a);
        ASSERT_TRUE(u >= 0.0f && u < 1.0f);
    }
    ASSERT_NEAR(sum / 100000, 0.0, 0.02);
    ASSERT_NEAR(sq / 100000, 1.0, 0.02);
}

DT_TEST(core_crc32c_known_vectors)
{
    /* RFC 3720 B.4 check value and the all-zero 32-byte vector. */
    ASSERT_EQ(dt_crc32c(0, "123456789", 9), 0xe3069283u);
    unsigned char zeros[32] = {0};
    ASSERT_EQ(dt_crc32c(0, zeros, 32), 0x8a9136aau);
    /* Extending in pieces equals one pass. */
    uint32_t c = dt_crc32c(0, "1234", 4);
    ASSERT_EQ(dt_crc32c(c, "56789", 5), 0xe3069283u);
}

DT_TEST(core_deadlines)
{
    dt_deadline d = dt_deadline_in(50);
    ASSERT_FALSE(dt_deadline_passed(d));
    ASSERT_LE(dt_deadline_left_ms(d), 50);
    dt_sleep_ms(60);
    ASSERT_TRUE(dt_deadline_passed(d));
    ASSERT_EQ(dt_deadline_left_ms(d), 0);
    ASSERT_FALSE(dt_deadline_passed(DT_DEADLINE_NEVER));
}

/* FNV-1a 64 against the published test vectors; chained calls equal one call. */
DT_TEST(core_fnv1a64_vectors)
{
    ASSERT_EQ(dt_fnv1a64(DT_FNV1A64_INIT, "", 0), 0xcbf29ce484222325ull);
    ASSERT_EQ(dt_fnv1a64(DT_FNV1A64_INIT, "a", 1), 0xaf63dc4c8601ec8cull);
    ASSERT_EQ(dt_fnv1a64(DT_FNV1A64_INIT, "foobar", 6), 0x85944171f73967e8ull);
    ASSERT_EQ(dt_fnv1a64(dt_fnv1a64(DT_FNV1A64_INIT, "foo", 3), "bar", 3),
              dt_fnv1a64(DT_FNV1A64_INIT, "foobar", 6));
}
