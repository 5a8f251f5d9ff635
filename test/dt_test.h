/*
 * dt_test.h - unit tests for test/runner.c.
 *
 * A test is a function declared with DT_TEST in any .c file of test/unit; the build collects them
 * (grep for "DT_TEST(") into build/gen/test_list.h, so adding a test needs no registration.
 * The runner runs each test in its own process with a deadline and reaps whatever it started.
 *
 *     DT_TEST(crc32c_known_vector)
 *     {
 *         ASSERT_EQ(dt_crc32c(0, "123456789", 9), 0xe3069283u);
 *     }
 *
 * Assertions print both operands and exit the test's process with status 1. DT_SKIP exits 7.
 * DT_TEST_TIMEOUT(name, seconds) declares a test with its own deadline (default 60 s).
 */
#ifndef DT_TEST_H
#define DT_TEST_H

#include "core/status.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DT_TEST(name)                  void dt_test_##name(void)
#define DT_TEST_TIMEOUT(name, seconds) void dt_test_##name(void)

/* A per-test scratch directory, created by the runner and removed after the test. */
const char *dt_test_tmpdir(void);
/* Path of a file under the source tree's top (the runner sets DT_SRC_DIR). Static buffer. */
const char *dt_test_src_path(const char *rel);
/* Path of a built binary ("dtraind", "dtrain"); the runner sets DT_BIN_DIR. Static buffer. */
const char *dt_test_bin_path(const char *name);
/* The python the reference scripts run with: $DT_TEST_PYTHON when set (a bare name such as
 * "python3" is looked up on PATH, since a GPU machine's torch lives in the python on its PATH),
 * else Debian's /usr/bin/python3. Static buffer. */
const char *dt_test_python(void);
/* Whether that python imports the modules ("torch", "PIL, numpy"); false when it is missing. */
bool dt_test_python_has(const char *modules);
/* A shell command: that python, single-quoted, followed by fmt's text (" '%s' check '%s'"). */
DT_PRINTF(3, 4) void dt_test_python_cmd(char *buf, size_t n, const char *fmt, ...);

#define DT_FAIL_(...)                                                                              \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

#define ASSERT_TRUE(x)                                                                             \
    do {                                                                                           \
        if (!(x))                                                                                  \
            DT_FAIL_("assertion failed: %s", #x);                                                  \
    } while (0)

#define ASSERT_FALSE(x) ASSERT_TRUE(!(x))

/* 1 when x has a floating type. ASSERT_CMP_ compares as long long (so pointers, sizes and enums
 * print exactly), which would truncate a float: ASSERT_LE(err, 1e-5) became 0 <= 0 and passed for
 * any error below 1, and INFINITY became LLONG_MIN. Floating operands are therefore a compile
 * error there; use ASSERT_NEAR, ASSERT_FLE / ASSERT_FLT or ASSERT_TRUE. */
#define DT_IS_FLOATING_(x) _Generic((x), float : 1, double : 1, long double : 1, default : 0)

#define ASSERT_CMP_(a, op, b)                                                                      \
    do {                                                                                           \
        _Static_assert(!DT_IS_FLOATING_(a) && !DT_IS_FLOATING_(b),                                 \
                       "ASSERT_EQ/NE/LT/LE/GT/GE compare integers; for floating values use "       \
                       "ASSERT_NEAR, ASSERT_FLE/ASSERT_FLT or ASSERT_TRUE");                       \
        long long dt_a_ = (long long)(a), dt_b_ = (long long)(b);                                  \
        if (!(dt_a_ op dt_b_))                                                                     \
            DT_FAIL_("assertion failed: %s %s %s (%lld vs %lld)", #a, #op, #b, dt_a_, dt_b_);      \
    } while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b)

#define ASSERT_STREQ(a, b)                                                                         \
    do {                                                                                           \
        const char *dt_sa_ = (a), *dt_sb_ = (b);                                                   \
        if (!dt_sa_ || !dt_sb_ || strcmp(dt_sa_, dt_sb_) != 0)                                     \
            DT_FAIL_("assertion failed: %s == %s (\"%s\" vs \"%s\")", #a, #b,                      \
                     dt_sa_ ? dt_sa_ : "(null)", dt_sb_ ? dt_sb_ : "(null)");                      \
    } while (0)

/* Asserts that haystack contains needle (error messages: name the key, the value). */
#define ASSERT_CONTAINS(haystack, needle)                                                          \
    do {                                                                                           \
        const char *dt_h_ = (haystack), *dt_n_ = (needle);                                         \
        if (!dt_h_ || !strstr(dt_h_, dt_n_))                                                       \
            DT_FAIL_("assertion failed: \"%s\" contains \"%s\"", dt_h_ ? dt_h_ : "(null)", dt_n_); \
    } while (0)

#define ASSERT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double dt_fa_ = (double)(a), dt_fb_ = (double)(b), dt_ft_ = (double)(tol);                 \
        if (!(fabs(dt_fa_ - dt_fb_) <= dt_ft_))                                                    \
            DT_FAIL_("assertion failed: |%s - %s| <= %g (%.9g vs %.9g)", #a, #b, dt_ft_, dt_fa_,   \
                     dt_fb_);                                                                      \
    } while (0)

/* Floating comparisons (a bound on an error, a loss that must fall): both sides as double, printed
 * with %.9g. A NaN on either side fails, since every comparison with it is false. */
#define ASSERT_FCMP_(a, op, b)                                                                     \
    do {                                                                                           \
        double dt_fa_ = (double)(a), dt_fb_ = (double)(b);                                         \
        if (!(dt_fa_ op dt_fb_))                                                                   \
            DT_FAIL_("assertion failed: %s %s %s (%.9g vs %.9g)", #a, #op, #b, dt_fa_, dt_fb_);    \
    } while (0)

#define ASSERT_FLE(a, b) ASSERT_FCMP_(a, <=, b)
#define ASSERT_FLT(a, b) ASSERT_FCMP_(a, <, b)

/* Exact floating equality (a value that must come out bit for bit: a sum of integers, a copied
 * weight, a learning rate halved in float32). %.17g so that two doubles that differ print apart. */
#define ASSERT_FEQ(a, b)                                                                           \
    do {                                                                                           \
        double dt_fa_ = (double)(a), dt_fb_ = (double)(b);                                         \
        if (!(dt_fa_ == dt_fb_))                                                                   \
            DT_FAIL_("assertion failed: %s == %s (%.17g vs %.17g)", #a, #b, dt_fa_, dt_fb_);       \
    } while (0)

/* Asserts a dt_status call succeeds; prints the error message of the dt_err it was given. */
#define ASSERT_OK(call, errp)                                                                      \
    do {                                                                                           \
        dt_status dt_st_ = (call);                                                                 \
        if (dt_st_ != DT_OK)                                                                       \
            DT_FAIL_("%s failed: %s: %s", #call, dt_status_name(dt_st_), (errp)->msg);             \
    } while (0)

/* Asserts a call fails with the expected status. */
#define ASSERT_STATUS(call, expected)                                                              \
    do {                                                                                           \
        dt_status dt_st_ = (call);                                                                 \
        if (dt_st_ != (expected))                                                                  \
            DT_FAIL_("%s: expected %s, got %s", #call, dt_status_name(expected),                   \
                     dt_status_name(dt_st_));                                                      \
    } while (0)

#define DT_SKIP(...)                                                                               \
    do {                                                                                           \
        printf("SKIP: ");                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
        exit(7);                                                                                   \
    } while (0)

#endif
