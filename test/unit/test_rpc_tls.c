/* TLS set-up: PEM files are checked and each bad one is named; the host check lists the SANs.
 * Certificates come from scripts/gen-tls.sh (the openssl command), an expired one from libcrypto.
 * Each test runs in its own process, so each starts with TLS off. */
#include "dt_test.h"
#include "rpc/rpc.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

static char dir[1024];

/* tmp/ca.pem, h.pem/h.key (SANs 127.0.0.1, localhost), c.pem/c.key (a client), and other/ with
 * a second CA and its own h. */
static void make_certs(void)
{
    if (system("command -v openssl >/dev/null 2>&1") != 0)
        DT_SKIP("the openssl command is not installed");
    snprintf(dir, sizeof dir, "%s", dt_test_tmpdir());
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s -o %s h=127.0.0.1,localhost c >/dev/null && %s -o %s/other h=127.0.0.1 "
             ">/dev/null && echo 'not a certificate' > %s/garbage.pem",
             dt_test_src_path("scripts/gen-tls.sh"), dir, dt_test_src_path("scripts/gen-tls.sh"),
             dir, dir);
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
    ASSERT_OK(dt_rpc_tls_check_host("10.1.2.3", &err), &err); /* no certificate: nothing to check */
}

DT_TEST(rpc_tls_mutual_and_host_check)
{
    make_certs();
    dt_err err = {0};
    dt_rpc_tls_opts o = {.cert_file = p("h.pem"), .key_file = p("h.key"), .ca_file = p("ca.pem")};
    ASSERT_OK(dt_rpc_tls_setup(&o, &err), &err);
    ASSERT_EQ(dt_rpc_tls_get_mode(), DT_RPC_TLS_MUTUAL);
    ASSERT_OK(dt_rpc_tls_check_host("127.0.0.1", &err), &err);
    ASSERT_OK(dt_rpc_tls_check_host("localhost", &err), &err);
    ASSERT_STATUS(dt_rpc_tls_check_host("10.0.0.7", &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "does not name 10.0.0.7");
    ASSERT_CONTAINS(err.msg, "IP:127.0.0.1, DNS:localhost");
    ASSERT_CONTAINS(err.msg, "h.pem");
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
        {"h.pem", "h.pem", NULL, DT_EINVAL, {"--tls-key", "not a readable PEM private key"}},
        {"h.pem", "c.key", NULL, DT_EINVAL, {"c.key does not match", "--tls-cert"}},
        {"h.pem", "h.key", "garbage.pem", DT_EINVAL, {"--tls-ca", "not a PEM file"}},
        {"h.pem", "h.key", "missing-ca.pem", DT_ENOENT, {"--tls-ca", "missing-ca.pem"}},
        {"h.pem", "h.key", "other/ca.pem", DT_EINVAL, {"is not accepted by", "other/ca.pem"}},
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

/* Writes a self-signed certificate valid from 2 days ago to 1 day ago, and its key. */
static void write_expired(const char *cert_path, const char *key_path)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    ASSERT_TRUE(key && x);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -2 * 86400);
    X509_gmtime_adj(X509_getm_notAfter(x), -86400);
    X509_set_pubkey(x, key);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"old", -1, -1, 0);
    X509_set_issuer_name(x, n);
    ASSERT_TRUE(X509_sign(x, key, EVP_sha256()) > 0);
    FILE *f = fopen(cert_path, "w");
    ASSERT_TRUE(f != NULL);
    PEM_write_X509(f, x);
    fclose(f);
    f = fopen(key_path, "w");
    ASSERT_TRUE(f != NULL);
    PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(key);
}

DT_TEST(rpc_tls_expired_certificate)
{
    snprintf(dir, sizeof dir, "%s", dt_test_tmpdir());
    write_expired(p("old.pem"), p("old.key"));
    dt_err err = {0};
    dt_rpc_tls_opts o = {.cert_file = p("old.pem"), .key_file = p("old.key")};
    ASSERT_STATUS(dt_rpc_tls_setup(&o, &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "old.pem: the certificate expired on");
}

DT_TEST(rpc_tls_ipv6_host_check)
{
    make_certs();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s -o %s h6=::1 >/dev/null", dt_test_src_path("scripts/gen-tls.sh"),
             dir);
    ASSERT_EQ(system(cmd), 0);
    dt_err err = {0};
    dt_rpc_tls_opts o = {.cert_file = p("h6.pem"), .key_file = p("h6.key"), .ca_file = p("ca.pem")};
    ASSERT_OK(dt_rpc_tls_setup(&o, &err), &err);
    ASSERT_OK(dt_rpc_tls_check_host("::1", &err), &err);
    ASSERT_OK(dt_rpc_tls_check_host("[::1]", &err), &err); /* as TF_CONFIG brackets it */
    ASSERT_STATUS(dt_rpc_tls_check_host("::2", &err), DT_EINVAL);
    ASSERT_CONTAINS(err.msg, "(its subject alternative names: IP:::1)");
}
