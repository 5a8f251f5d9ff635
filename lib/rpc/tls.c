/*
 * tls.c - the process-wide TLS setting of lib/rpc: PEM files read and checked once at start-up
 * with OpenSSL's libcrypto (so a bad file is named before any connection is tried), then turned
 * into gRPC credentials for every channel and server made afterwards.
 *
 * The setting is written by dt_rpc_tls_setup() before any channel or server exists, and only
 * read afterwards, so readers take no lock. One channel credentials object serves every channel:
 * gRPC shares a TCP connection between channels only when their credentials are the same object.
 */
#include "rpc/rpc_internal.h"

#include "core/buf.h"
#include "core/limits.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <grpc/grpc_security.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static struct {
    dt_rpc_tls_mode mode;
    char *cert_pem, *key_pem, *ca_pem;
    char cert_file[1024], key_file[1024], ca_file[1024];
    X509 *cert; /* the first certificate of cert_pem, for host checks */
    grpc_channel_credentials *channel_creds;
} g_tls;

static atomic_int g_in_use; /* a channel or server was made: the setting is frozen */

void dt__rpc_tls_freeze(void)
{
    atomic_store(&g_in_use, 1);
}

/* OpenSSL's last error as text, for messages ("" when none). */
static const char *ossl_error(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    buf[0] = '\0';
    if (e)
        ERR_error_string_n(e, buf, n);
    ERR_clear_error();
    return buf;
}

static dt_status read_pem(const char *what, const char *path, char **out, dt_err *err)
{
    size_t len = 0;
    dt_status st = dt_file_read_all(path, DT_MAX_PEM, out, &len, err);
    if (st != DT_OK) {
        dt_err_prefix(err, "%s", what);
        return st;
    }
    if (len == 0 || !strstr(*out, "-----BEGIN ")) {
        free(*out);
        *out = NULL;
        return dt_err_set(err, DT_EINVAL,
                          "%s %s: not a PEM file (no '-----BEGIN' line); give the PEM text, "
                          "e.g. from scripts/gen-tls.sh",
                          what, path);
    }
    return DT_OK;
}

/* Every certificate in pem, in order; at least one or an error naming the file. */
static dt_status parse_certs(const char *what, const char *path, const char *pem,
                             STACK_OF(X509) * *out, dt_err *err)
{
    char eb[256];
    BIO *bio = BIO_new_mem_buf(pem, -1);
    STACK_OF(X509) *sk = sk_X509_new_null();
    if (!bio || !sk) {
        BIO_free(bio);
        sk_X509_free(sk);
        return dt_err_set(err, DT_ENOMEM, "%s %s: out of memory", what, path);
    }
    X509 *x;
    while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)))
        sk_X509_push(sk, x);
    ERR_clear_error(); /* the read that ended the loop */
    BIO_free(bio);
    if (sk_X509_num(sk) == 0) {
        sk_X509_free(sk);
        (void)ossl_error(eb, sizeof eb);
        return dt_err_set(err, DT_EINVAL,
                          "%s %s: no PEM certificate in it (expected a '-----BEGIN "
                          "CERTIFICATE-----' block)",
                          what, path);
    }
    *out = sk;
    return DT_OK;
}

static void time_str(const ASN1_TIME *t, char *buf, size_t n)
{
    BIO *b = BIO_new(BIO_s_mem());
    buf[0] = '\0';
    if (!b)
        return;
    if (ASN1_TIME_print(b, t)) {
        int k = BIO_read(b, buf, (int)n - 1);
        buf[k > 0 ? k : 0] = '\0';
    }
    BIO_free(b);
}

static dt_status check_validity(const char *path, X509 *x, dt_err *err)
{
    char when[64];
    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
        time_str(X509_get0_notAfter(x), when, sizeof when);
        return dt_err_set(err, DT_EINVAL,
                          "--tls-cert %s: the certificate expired on %s; make a new one "
                          "(scripts/gen-tls.sh)",
                          path, when);
    }
    if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
        time_str(X509_get0_notBefore(x), when, sizeof when);
        return dt_err_set(err, DT_EINVAL,
                          "--tls-cert %s: the certificate is not valid before %s; check this "
                          "host's clock",
                          path, when);
    }
    return DT_OK;
}

/* The certificate must chain to one of the CA file's: peers check it against the same file. */
static dt_status check_signed_by(const dt_rpc_tls_opts *o, X509 *leaf, STACK_OF(X509) * chain,
                                 STACK_OF(X509) * cas, dt_err *err)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    dt_status st = DT_OK;
    if (!store || !ctx) {
        st = dt_err_set(err, DT_ENOMEM, "tls: out of memory");
        goto out;
    }
    for (int i = 0; i < sk_X509_num(cas); i++)
        X509_STORE_add_cert(store, sk_X509_value(cas, i));
    if (!X509_STORE_CTX_init(ctx, store, leaf, chain)) {
        st = dt_err_set(err, DT_ENOMEM, "tls: out of memory");
        goto out;
    }
    if (X509_verify_cert(ctx) != 1) {
        int code = X509_STORE_CTX_get_error(ctx);
        st = dt_err_set(err, DT_EINVAL,
                        "--tls-cert %s is not accepted by --tls-ca %s (%s): every daemon and "
                        "client certificate must be signed by that CA (scripts/gen-tls.sh)",
                        o->cert_file, o->ca_file, X509_verify_cert_error_string(code));
    }
out:
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    ERR_clear_error();
    return st;
}

/* Reads and checks everything into the locals of setup; nothing global changes on error. */
static dt_status load_all(const dt_rpc_tls_opts *o, char **cert_pem, char **key_pem, char **ca_pem,
                          X509 **cert_out, dt_err *err)
{
    char eb[256];
    STACK_OF(X509) *certs = NULL, *cas = NULL;
    EVP_PKEY *key = NULL;
    dt_status st = DT_OK;
    if (o->cert_file) {
        DT_TRY_GOTO(read_pem("--tls-cert", o->cert_file, cert_pem, err), st, out);
        DT_TRY_GOTO(parse_certs("--tls-cert", o->cert_file, *cert_pem, &certs, err), st, out);
        DT_TRY_GOTO(check_validity(o->cert_file, sk_X509_value(certs, 0), err), st, out);
        DT_TRY_GOTO(read_pem("--tls-key", o->key_file, key_pem, err), st, out);
        BIO *bio = BIO_new_mem_buf(*key_pem, -1);
        /* No passphrase callback: a daemon starts unattended, so its key must be unencrypted. */
        key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)"") : NULL;
        BIO_free(bio);
        if (!key) {
            st = dt_err_set(err, DT_EINVAL,
                            "--tls-key %s: not a readable PEM private key (%s); it must be "
                            "unencrypted ('-----BEGIN PRIVATE KEY-----')",
                            o->key_file, ossl_error(eb, sizeof eb));
            goto out;
        }
        if (X509_check_private_key(sk_X509_value(certs, 0), key) != 1) {
            ERR_clear_error();
            st = dt_err_set(err, DT_EINVAL,
                            "--tls-key %s does not match the certificate in --tls-cert %s: give "
                            "the key that was made with that certificate",
                            o->key_file, o->cert_file);
            goto out;
        }
        struct stat sb;
        if (stat(o->key_file, &sb) == 0 && (sb.st_mode & 077))
            DT_WARN("rpc", "--tls-key %s is readable by group or others; chmod 600 it",
                    o->key_file);
    }
    if (o->ca_file) {
        DT_TRY_GOTO(read_pem("--tls-ca", o->ca_file, ca_pem, err), st, out);
        DT_TRY_GOTO(parse_certs("--tls-ca", o->ca_file, *ca_pem, &cas, err), st, out);
        if (certs)
            DT_TRY_GOTO(check_signed_by(o, sk_X509_value(certs, 0), certs, cas, err), st, out);
    }
    if (certs) {
        *cert_out = sk_X509_value(certs, 0);
        X509_up_ref(*cert_out);
    }
out:
    EVP_PKEY_free(key);
    sk_X509_pop_free(certs, X509_free);
    sk_X509_pop_free(cas, X509_free);
    return st;
}

dt_status dt_rpc_tls_setup(const dt_rpc_tls_opts *o, dt_err *err)
{
    if (atomic_load(&g_in_use) || g_tls.mode != DT_RPC_TLS_OFF)
        return dt_err_set(err, DT_ESTATE,
                          "tls: set up once, before the first channel or server is made");
    if (!o->cert_file && !o->key_file && !o->ca_file)
        return DT_OK;
    if (!o->cert_file != !o->key_file)
        return dt_err_set(
            err, DT_EINVAL, "%s without %s: give the certificate and its private key together",
            o->cert_file ? "--tls-cert" : "--tls-key", o->cert_file ? "--tls-key" : "--tls-cert");
    dt_rpc_global_init();
    char *cert_pem = NULL, *key_pem = NULL, *ca_pem = NULL;
    X509 *cert = NULL;
    dt_status st = load_all(o, &cert_pem, &key_pem, &ca_pem, &cert, err);
    if (st != DT_OK) {
        free(cert_pem);
        free(key_pem);
        free(ca_pem);
        return st;
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key_pem, .cert_chain = cert_pem};
    /* No CA file: peers are checked against the system's roots (publicly signed certificates). */
    g_tls.channel_creds =
        grpc_ssl_credentials_create_ex(ca_pem, cert_pem ? &pair : NULL, NULL, NULL);
    if (!g_tls.channel_creds) {
        X509_free(cert);
        free(cert_pem);
        free(key_pem);
        free(ca_pem);
        return dt_err_set(err, DT_EINVAL, "tls: gRPC refused the credentials");
    }
    g_tls.cert_pem = cert_pem;
    g_tls.key_pem = key_pem;
    g_tls.ca_pem = ca_pem;
    g_tls.cert = cert;
    snprintf(g_tls.cert_file, sizeof g_tls.cert_file, "%s", o->cert_file ? o->cert_file : "");
    snprintf(g_tls.key_file, sizeof g_tls.key_file, "%s", o->key_file ? o->key_file : "");
    snprintf(g_tls.ca_file, sizeof g_tls.ca_file, "%s", o->ca_file ? o->ca_file : "");
    g_tls.mode = cert_pem && ca_pem ? DT_RPC_TLS_MUTUAL : DT_RPC_TLS_ON;
    return DT_OK;
}

dt_rpc_tls_mode dt_rpc_tls_get_mode(void)
{
    return g_tls.mode;
}

const char *dt_rpc_tls_mode_name(dt_rpc_tls_mode m)
{
    return m == DT_RPC_TLS_MUTUAL ? "mutual" : m == DT_RPC_TLS_ON ? "on" : "off";
}

dt_status dt_rpc_tls_check_host(const char *host, dt_err *err)
{
    if (!g_tls.cert)
        return DT_OK;
    char h[DT_MAX_ADDRESS];
    snprintf(h, sizeof h, "%s", host);
    size_t n = strlen(h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') { /* "[::1]" as TF_CONFIG writes it */
        memmove(h, h + 1, n - 2);
        h[n - 2] = '\0';
    }
    int ok =
        X509_check_ip_asc(g_tls.cert, h, 0) == 1 || X509_check_host(g_tls.cert, h, 0, 0, NULL) == 1;
    ERR_clear_error();
    if (ok)
        return DT_OK;
    char sans[512] = "";
    GENERAL_NAMES *names = X509_get_ext_d2i(g_tls.cert, NID_subject_alt_name, NULL, NULL);
    for (int i = 0; names && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        char one[80] = "";
        if (g->type == GEN_DNS)
            snprintf(one, sizeof one, "DNS:%.*s", ASN1_STRING_length(g->d.dNSName),
                     (const char *)ASN1_STRING_get0_data(g->d.dNSName));
        else if (g->type == GEN_IPADD && ASN1_STRING_length(g->d.iPAddress) == 4) {
            const unsigned char *p = ASN1_STRING_get0_data(g->d.iPAddress);
            snprintf(one, sizeof one, "IP:%u.%u.%u.%u", p[0], p[1], p[2], p[3]);
        } else if (g->type == GEN_IPADD && ASN1_STRING_length(g->d.iPAddress) == 16) {
            char v6[INET6_ADDRSTRLEN];
            if (inet_ntop(AF_INET6, ASN1_STRING_get0_data(g->d.iPAddress), v6, sizeof v6))
                snprintf(one, sizeof one, "IP:%s", v6);
        }
        if (*one)
            snprintf(sans + strlen(sans), sizeof sans - strlen(sans), "%s%s", *sans ? ", " : "",
                     one);
    }
    GENERAL_NAMES_free(names);
    return dt_err_set(err, DT_EINVAL,
                      "--tls-cert %s does not name %s (its subject alternative names: %s): peers "
                      "dial %s as TF_CONFIG writes it and would refuse this certificate; make one "
                      "that carries it (scripts/gen-tls.sh NAME=%s)",
                      g_tls.cert_file, h, *sans ? sans : "none", h, h);
}

grpc_channel_credentials *dt__rpc_channel_creds(void)
{
    return g_tls.channel_creds;
}

grpc_server_credentials *dt__rpc_server_creds(const char *address, dt_err *err)
{
    if (g_tls.mode == DT_RPC_TLS_OFF)
        return grpc_insecure_server_credentials_create();
    if (!g_tls.cert_pem) {
        dt_err_set(err, DT_EINVAL,
                   "cannot serve TLS on %s without a certificate: give --tls-cert and --tls-key",
                   address);
        return NULL;
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = g_tls.key_pem, .cert_chain = g_tls.cert_pem};
    /* With a CA, every caller (peer daemon or CLI) must present a certificate it signed. */
    grpc_server_credentials *c = grpc_ssl_server_credentials_create_ex(
        g_tls.ca_pem, &pair, 1,
        g_tls.ca_pem ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                     : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    if (!c)
        dt_err_set(err, DT_EINVAL, "tls: gRPC refused the server credentials for %s", address);
    return c;
}

/* Case-insensitive substring test, for gRPC's free-form error details. */
static int has(const char *s, const char *needle)
{
    size_t n = strlen(needle);
    for (; s && *s; s++)
        if (strncasecmp(s, needle, n) == 0)
            return 1;
    return 0;
}

void dt__rpc_unavailable_hint(const char *address, const char *details, char *buf, size_t n)
{
    buf[0] = '\0';
    char host[DT_MAX_ADDRESS];
    snprintf(host, sizeof host, "%s", address);
    char *colon = strrchr(host, ':');
    if (colon && strchr(host, ']'))
        colon = strrchr(host, ']') + 1;
    if (colon && *colon == ':')
        *colon = '\0';
    if (g_tls.mode == DT_RPC_TLS_OFF) {
        /* A TLS server closes a plaintext connection right after the HTTP/2 preface. */
        if (has(details, "Socket closed") || has(details, "Connection reset") ||
            has(details, "connection closed") || has(details, "GOAWAY"))
            snprintf(buf, n,
                     "; if that daemon serves TLS, give --tls-ca (and --tls-cert/--tls-key "
                     "when it checks client certificates)");
        return;
    }
    if (has(details, "wrong version number") || has(details, "packet length too long") ||
        has(details, "http request")) {
        snprintf(buf, n, "; %s does not speak TLS: start it with --tls-cert/--tls-key too",
                 address);
        return;
    }
    if (has(details, "Peer name") || has(details, "not in peer certificate"))
        snprintf(buf, n,
                 "; TLS: %s's certificate does not carry %s as a subject alternative name: "
                 "remake it with that name or address (scripts/gen-tls.sh)",
                 address, host);
    else if (has(details, "certificate verify failed") || has(details, "CERTIFICATE_VERIFY"))
        snprintf(buf, n,
                 "; TLS: %s's certificate failed verification against %s: it must be signed "
                 "by that CA and carry %s as a subject alternative name (scripts/gen-tls.sh)",
                 address, *g_tls.ca_file ? g_tls.ca_file : "the system's CA roots", host);
    else if (has(details, "ssl") || has(details, "handshake") || has(details, "certificate") ||
             has(details, "Socket closed")) {
        /* The server closing the connection during the handshake is all a client sees when its
         * own certificate is missing or refused. */
        const char *ca = *g_tls.ca_file ? g_tls.ca_file : "the system's CA roots";
        if (*g_tls.cert_file)
            snprintf(buf, n,
                     "; TLS handshake with %s failed: %s must accept its certificate (with %s as "
                     "a subject alternative name), and its --tls-ca must accept %s",
                     address, ca, host, g_tls.cert_file);
        else
            snprintf(buf, n,
                     "; TLS handshake with %s failed: %s must accept its certificate (with %s as "
                     "a subject alternative name); a daemon started with --tls-ca also wants a "
                     "client certificate (--tls-cert/--tls-key)",
                     address, ca, host);
    }
}
