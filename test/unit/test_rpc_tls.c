/* TLS set-up: PEM files are checked and each bad one is named. Certificates come from
 * scripts/gen-tls.sh (the openssl command). Each test runs in its own process, so each starts
 * with TLS off. What only a handshake can check is in test/integration/tls_*.sh. */
#include "dt_test.h"
#include "rpc/rpc.h"

#include <unistd.h>

static char dir[1024];

/* tmp/ca.pem, h.pem/h.key (SANs 127.0.0.1, localhost), c.pem/c.key (a client), enc.key (h.key
 * under a passphrase) and garbage.pem. */
static void make_certs(void)
{
    if (system("command -v openssl >/dev/null 2>&1") != 0)
        DT_SKIP("the openssl command is not installed");
    snprintf(dir, sizeof dir, "%s", dt_test_tmpdir());
    static char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s -o . h=127.0.0.1,localhost c >/dev/null && "
             "echo 'not a certificate' > garbage.pem && "
             "openssl pkey -in h.key -aes256 -passout pass:x -out enc.key",
             dir, dt_test_src_path("scripts/gen-tls.sh"));
    ASSERT_EQ(system(cmd), 0);
}

static const char *p(const char *name)
{
    static char bufs[4][1200];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

DT_TEST(rpc_tls_off_without_files)
{
    dt_err err = {0};
    dt_rpc_tls_opts o = {0};
    ASSERT_OK(dt_rpc_tls_setup(&o, &err), &err);
    ASSERT_EQ(dt_rpc_tls_get_mode(), DT_RPC_TLS_OFF);
    ASSERT_STREQ(dt_rpc_tls_mode_name(dt_rpc_tls_get_mode()), "off");
}

DT_TEST(rpc_tls_mutual)
{
    make_certs();
    dt_err err = {0};
    dt_rpc_tls_opts o = {.cert_file = p("h.pem"), .key_file = p("h.key"), .ca_file = p("ca.pem")};
    ASSERT_OK(dt_rpc_tls_setup(&o, &err), &err);
    ASSERT_EQ(dt_rpc_tls_get_mode(), DT_RPC_TLS_MUTUAL);
    ASSERT_STREQ(dt_rpc_tls_mode_name(dt_rpc_tls_get_mode()), "mutual");
    /* Set up once: a second call is refused. */
    ASSERT_STATUS(dt_rpc_tls_setup(&o, &err), DT_ESTATE);
}

DT_TEST(rpc_tls_server_only_and_client_only)
{
    make_certs();
    dt_err err = {0};
    dt_rpc_tls_opts o = {.ca_file = p("ca.pem")};
    ASSERT_OK(dt_rpc_tls_setup(&o, &err), &err);
    ASSERT_EQ(dt_rpc_tls_get_mode(), DT_RPC_TLS_ON);
}

DT_TEST(rpc_tls_refused_after_first_channel)
{
    make_certs();
    dt_err err = {0};
    dt_rpc_channel *ch;
    ASSERT_OK(dt_rpc_channel_new("127.0.0.1:1", NULL, &ch, &err), &err);
    dt_rpc_tls_opts o = {.ca_file = p("ca.pem")};
    ASSERT_STATUS(dt_rpc_tls_setup(&o, &err), DT_ESTATE);
    ASSERT_CONTAINS(err.msg, "before the first channel");
    ASSERT_EQ(dt_rpc_tls_get_mode(), DT_RPC_TLS_OFF);
    dt_rpc_channel_free(ch);
}

DT_TEST(rpc_tls_bad_files_are_named)
{
    make_certs();
    struct {
        const char *cert, *key, *ca;
        dt_status st;
        const char *want[2];
    } cases[] = {
        {"missing.pem", "h.key", NULL, DT_ENOENT, {"--tls-cert", "missing.pem: cannot open"}},
        {"garbage.pem", "h.key", NULL, DT_EINVAL, {"--tls-cert", "garbage.pem: not a PEM file"}},
        {"h.key", "h.key", NULL, DT_EINVAL, {"--tls-cert", "no PEM certificate"}},
        {"h.pem", "missing.key", NULL, DT_ENOENT, {"--tls-key", "missing.key: cannot open"}},
        {"h.pem", "garbage.pem", NULL, DT_EINVAL, {"--tls-key", "not a PEM file"}},
        {"h.pem", "h.pem", NULL, DT_EINVAL, {"--tls-key", "no PEM private key"}},
        {"h.pem", "enc.key", NULL, DT_EINVAL, {"--tls-key", "enc.key: the key is encrypted"}},
        {"h.pem", "h.key", "h.key", DT_EINVAL, {"--tls-ca", "no PEM certificate"}},
        {"h.pem", "h.key", "garbage.pem", DT_EINVAL, {"--tls-ca", "not a PEM file"}},
        {"h.pem", "h.key", "missing-ca.pem", DT_ENOENT, {"--tls-ca", "missing-ca.pem"}},
        {"h.pem", NULL, NULL, DT_EINVAL, {"--tls-cert without --tls-key", "together"}},
        {NULL, "h.key", NULL, DT_EINVAL, {"--tls-key without --tls-cert", "together"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_err err = {0};
        dt_rpc_tls_opts o = {.cert_file = cases[i].cert ? p(cases[i].cert) : NULL,
                             .key_file = cases[i].key ? p(cases[i].key) : NULL,
                             .ca_file = cases[i].ca ? p(cases[i].ca) : NULL};
        ASSERT_STATUS(dt_rpc_tls_setup(&o, &err), cases[i].st);
        ASSERT_CONTAINS(err.msg, cases[i].want[0]);
        ASSERT_CONTAINS(err.msg, cases[i].want[1]);
        /* A refused setup leaves TLS off, so the next case starts clean. */
        ASSERT_EQ(dt_rpc_tls_get_mode(), DT_RPC_TLS_OFF);
    }
}

DT_TEST(rpc_lock_checks_off)
{
    /* Debian's Abseil (the one the build links) runs with its deadlock detector on unless
     * told otherwise; a renamed entry point would silently cost the CPU again. */
    ASSERT_TRUE(dt_rpc_lock_checks_off());
}
