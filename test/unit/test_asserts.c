/* The assertions of dt_test.h themselves: the integer comparisons refuse floating operands at
 * compile time (they used to truncate them to long long, so ASSERT_LE(err, 1e-5) passed for any
 * error below 1), and the floating ones fail where they must, NaN and infinity included. */
#include "core/buf.h"
#include "dt_test.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

_Static_assert(DT_IS_FLOATING_(1e-5) && DT_IS_FLOATING_(1.0f) && DT_IS_FLOATING_(1.0L),
               "floating constants are floating");
_Static_assert(!DT_IS_FLOATING_(1) && !DT_IS_FLOATING_((size_t)1) && !DT_IS_FLOATING_('a') &&
                   !DT_IS_FLOATING_((void *)0) && !DT_IS_FLOATING_("s"),
               "integers, pointers and arrays are not");

/* Runs fn in a child whose stderr goes to a file; returns its exit status (0: fn returned),
 * the child's message in msg. */
static int in_child(void (*fn)(void), char *msg, size_t cap)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/child.err", dt_test_tmpdir());
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        if (!freopen(path, "w", stderr))
            _exit(3);
        fn();
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    msg[0] = '\0';
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    size_t n = fread(msg, 1, cap - 1, f);
    msg[n] = '\0';
    fclose(f);
    return WEXITSTATUS(status);
}

static volatile double v_err = 0.5, v_inf = INFINITY, v_nan = NAN;

static void fle_half(void)
{
    ASSERT_FLE(v_err, 1e-5);
}
static void fle_inf(void)
{
    ASSERT_FLE(v_inf, 1e-5);
}
static void fle_nan(void)
{
    ASSERT_FLE(v_nan, 1.0);
}
static void fle_nan_bound(void)
{
    ASSERT_FLE(0.0, v_nan);
}
static void flt_equal(void)
{
    ASSERT_FLT(1.0, v_err * 2);
}
static void feq_float_vs_double(void)
{
    ASSERT_FEQ(0.1f, 0.1);
}
static void feq_fraction(void)
{
    ASSERT_FEQ(4.0f, 4.5);
}
static void feq_nan(void)
{
    ASSERT_FEQ(v_nan, v_nan);
}

static void passing(void)
{
    ASSERT_FLE(1e-6, 1e-5);
    ASSERT_FLE(1e-5, 1e-5);
    ASSERT_FLT(0, 1e-300);
    ASSERT_FLT(-v_inf, 0);
    ASSERT_FEQ(0.5f, 0.5);
    ASSERT_FEQ(3, 3.0f);
    int x = 1;
    ASSERT_EQ(&x, &x);
    ASSERT_LT((size_t)1, (size_t)2);
    ASSERT_GE(-1, INT64_MIN);
}

DT_TEST(asserts_floating_comparisons_fail_where_they_must)
{
    char msg[1024];
    static const struct {
        void (*fn)(void);
        const char *says;
    } fails[] = {
        {fle_half, "v_err <= 1e-5 (0.5 vs 1e-05)"},
        {fle_inf, "(inf vs 1e-05)"},
        {fle_nan, "(nan vs 1)"},
        {fle_nan_bound, "(0 vs nan)"},
        {flt_equal, "1.0 < v_err * 2 (1 vs 1)"},
        {feq_float_vs_double, "(0.10000000149011612 vs 0.10000000000000001)"},
        {feq_fraction, "(4 vs 4.5)"},
        {feq_nan, "v_nan == v_nan"},
    };
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        int rc = in_child(fails[i].fn, msg, sizeof msg);
        if (rc != 1)
            DT_FAIL_("case %zu (%s): exit %d, want 1; stderr: %s", i, fails[i].says, rc, msg);
        ASSERT_CONTAINS(msg, "assertion failed");
        ASSERT_CONTAINS(msg, fails[i].says);
    }
    ASSERT_EQ(in_child(passing, msg, sizeof msg), 0);
    ASSERT_STREQ(msg, "");
}

/* Compiles a snippet against dt_test.h; returns the compiler's exit status, its messages in
 * out. */
static int compile(const char *body, char *out, size_t cap)
{
    char src[1100], log[1100], cmd[6000];
    snprintf(src, sizeof src, "%s/snippet.c", dt_test_tmpdir());
    snprintf(log, sizeof log, "%s/snippet.log", dt_test_tmpdir());
    FILE *f = fopen(src, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(
        f,
        "#include \"dt_test.h\"\n#include <stddef.h>\nvoid f(double err, size_t n, int *p);\n"
        "void f(double err, size_t n, int *p)\n{\n    (void)err, (void)n, (void)p;\n    %s\n}\n",
        body);
    fclose(f);
    /* dt_test_src_path returns a static buffer: one call at a time */
    char inc_test[1000], inc_lib[1000];
    snprintf(inc_test, sizeof inc_test, "%s", dt_test_src_path("test"));
    snprintf(inc_lib, sizeof inc_lib, "%s", dt_test_src_path("lib"));
    snprintf(cmd, sizeof cmd,
             "cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsyntax-only -I'%s' -I'%s' '%s' > "
             "'%s' 2>&1",
             inc_test, inc_lib, src, log);
    int rc = system(cmd);
    char *text = NULL;
    size_t len = 0;
    dt_err err = {0};
    ASSERT_OK(dt_file_read_all(log, 1 << 20, &text, &len, &err), &err);
    snprintf(out, cap, "%.*s", (int)len, text ? text : "");
    free(text);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

DT_TEST(asserts_integer_comparisons_refuse_floating_operands)
{
    if (system("cc --version >/dev/null 2>&1") != 0)
        DT_SKIP("no cc to compile the snippets with");
    char out[8192];
    /* integers, sizes and pointers compile */
    int rc =
        compile("ASSERT_LE(n, 3); ASSERT_EQ(p, NULL); ASSERT_NE(n, (size_t)-1);", out, sizeof out);
    if (rc != 0)
        DT_FAIL_("integer comparisons did not compile (exit %d):\n%s", rc, out);
    /* a floating operand on either side is a compile error that names the way out */
    static const char *refused[] = {"ASSERT_LE(err, 1e-5);", "ASSERT_EQ(n, 0.5f);",
                                    "ASSERT_GT(err, 0);", "ASSERT_NE(1.0L, n);"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        rc = compile(refused[i], out, sizeof out);
        if (rc == 0)
            DT_FAIL_("%s compiled", refused[i]);
        ASSERT_CONTAINS(out, "ASSERT_NEAR, ASSERT_FLE/ASSERT_FLT or ASSERT_TRUE");
    }
    /* the floating assertions take them */
    rc = compile("ASSERT_FLE(err, 1e-5); ASSERT_FLT(0, err); ASSERT_FEQ(err, 0.5f);", out,
                 sizeof out);
    if (rc != 0)
        DT_FAIL_("floating comparisons did not compile (exit %d):\n%s", rc, out);
}
