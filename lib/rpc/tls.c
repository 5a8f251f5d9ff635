/*
 * tls.c - the process-wide TLS setting of lib/rpc: PEM files read and checked once at start-up
 * (present, readable, under DT_MAX_PEM, with the PEM block each one needs), then turned into
 * gRPC credentials for every channel and server made afterwards. The certificate's contents
 * (key match, expiry, CA signature, SANs) are left to gRPC's TLS stack, which checks them at the
 * handshake; dt__rpc_unavailable_hint turns its failures into a message naming peer and files.
 *
 * The setting is written by dt_rpc_tls_setup() before any channel or server exists, and only
 * read afterwards, so readers take no lock. One channel credentials object serves every channel:
 * gRPC shares a TCP connection between channels only when their credentials are the same object.
 */
#include "rpc/rpc_internal.h"

#include "core/buf.h"
#include "core/limits.h"
#include "core/log.h"

#include <grpc/grpc_security.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
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
    grpc_channel_credentials *channel_creds;
} g_tls;

static atomic_int g_in_use; /* a channel or server was made: the setting is frozen */

void dt__rpc_tls_freeze(void)
{
    atomic_store(&g_in_use, 1);
}

/* Reads path and checks it holds a PEM block whose BEGIN line ends with label ("CERTIFICATE",
 * "PRIVATE KEY": also matches "EC PRIVATE KEY", "RSA PRIVATE KEY"). */
static dt_status read_pem(const char *flag, const char *path, const char *label, char **out,
                          dt_err *err)
{
    size_t len = 0;
    dt_status st = dt_file_read_all(path, DT_MAX_PEM, out, &len, err);
    if (st != DT_OK) {
        dt_err_prefix(err, "%s", flag);
        return st;
    }
    /* Some BEGIN line's label ends with label: "-----BEGIN EC PRIVATE KEY-----". */
    const char *begin = strstr(*out, "-----BEGIN ");
    size_t ll = strlen(label);
    int found = 0;
    for (const char *b = begin; b && !found; b = strstr(b + 1, "-----BEGIN ")) {
        const char *name = b + 11, *end = strstr(name, "-----");
        const char *nl = strchr(name, '\n');
        if (!end || (nl && nl < end) || (size_t)(end - name) < ll)
            continue;
        found = strncmp(end - ll, label, ll) == 0;
    }
    const char *what = strcmp(label, "CERTIFICATE") == 0 ? "certificate" : "private key";
    if (!begin) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s %s: not a PEM file (no '-----BEGIN' line); give the PEM text of a "
                        "%s, e.g. from scripts/gen-tls.sh",
                        flag, path, what);
    } else if (!found) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s %s: no PEM %s in it (expected a '-----BEGIN %s-----' block)", flag,
                        path, what, label);
    } else if (strstr(*out, "-----BEGIN ENCRYPTED PRIVATE KEY-----") ||
               strstr(*out, "Proc-Type: 4,ENCRYPTED")) {
        /* A daemon starts unattended: nobody could type the passphrase. */
        st = dt_err_set(err, DT_EINVAL,
                        "%s %s: the key is encrypted; give an unencrypted one (openssl pkey -in "
                        "%s -out KEY, then chmod 600 KEY)",
                        flag, path, path);
    }
    if (st != DT_OK) {
        free(*out);
        *out = NULL;
    }
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
    dt_status st = DT_OK;
    if (o->cert_file) {
        DT_TRY_GOTO(read_pem("--tls-cert", o->cert_file, "CERTIFICATE", &cert_pem, err), st, fail);
        DT_TRY_GOTO(read_pem("--tls-key", o->key_file, "PRIVATE KEY", &key_pem, err), st, fail);
        struct stat sb;
        if (stat(o->key_file, &sb) == 0 && (sb.st_mode & 077))
            DT_WARN("rpc", "--tls-key %s is readable by group or others; chmod 600 it",
                    o->key_file);
    }
    if (o->ca_file)
        DT_TRY_GOTO(read_pem("--tls-ca", o->ca_file, "CERTIFICATE", &ca_pem, err), st, fail);
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key_pem, .cert_chain = cert_pem};
    /* No CA file: peers are checked against gRPC's public CA roots (publicly signed
     * certificates). */
    g_tls.channel_creds =
        grpc_ssl_credentials_create_ex(ca_pem, cert_pem ? &pair : NULL, NULL, NULL);
    if (!g_tls.channel_creds) {
        st = dt_err_set(err, DT_EINVAL, "tls: gRPC refused the credentials");
        goto fail;
    }
    g_tls.cert_pem = cert_pem;
    g_tls.key_pem = key_pem;
    g_tls.ca_pem = ca_pem;
    snprintf(g_tls.cert_file, sizeof g_tls.cert_file, "%s", o->cert_file ? o->cert_file : "");
    snprintf(g_tls.key_file, sizeof g_tls.key_file, "%s", o->key_file ? o->key_file : "");
    snprintf(g_tls.ca_file, sizeof g_tls.ca_file, "%s", o->ca_file ? o->ca_file : "");
    g_tls.mode = cert_pem && ca_pem ? DT_RPC_TLS_MUTUAL : DT_RPC_TLS_ON;
    return DT_OK;
fail:
    free(cert_pem);
    free(key_pem);
    free(ca_pem);
    return st;
}

dt_rpc_tls_mode dt_rpc_tls_get_mode(void)
{
    return g_tls.mode;
}

const char *dt_rpc_tls_mode_name(dt_rpc_tls_mode m)
{
    return m == DT_RPC_TLS_MUTUAL ? "mutual" : m == DT_RPC_TLS_ON ? "on" : "off";
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

dt_status dt__rpc_tls_listen_failed(const char *address, dt_err *err)
{
    if (g_tls.mode == DT_RPC_TLS_OFF)
        return DT_OK;
    /* gRPC builds the TLS context when the port is added: a key that does not match its
     * certificate fails there, and looks like a bind failure. If the address binds without
     * gRPC, the credentials were the problem. */
    char host[DT_MAX_ADDRESS];
    snprintf(host, sizeof host, "%s", address);
    char *colon = strrchr(host, ':');
    if (!colon)
        return DT_OK;
    *colon = '\0';
    const char *port = colon + 1, *h = host;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        h = host + 1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(*h ? h : NULL, port, &hints, &ai) != 0 || !ai)
        return DT_OK;
    int binds = 0;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        binds = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        close(fd);
    }
    freeaddrinfo(ai);
    if (!binds)
        return DT_OK;
    return dt_err_set(err, DT_EINVAL,
                      "cannot serve TLS on %s: gRPC refused --tls-cert %s with --tls-key %s: the "
                      "key does not match the certificate, or one of them is not a valid "
                      "certificate / key (gRPC's log line above says which); give the key made "
                      "with that certificate (scripts/gen-tls.sh)",
                      address, g_tls.cert_file, g_tls.key_file);
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
    if (*g_tls.cert_file && has(details, "empty address list")) {
        /* gRPC could not build the TLS context of the connection: it logs why just before. */
        snprintf(buf, n,
                 "; TLS: gRPC could not use --tls-cert %s with --tls-key %s (does the key match "
                 "the certificate?); give the key made with that certificate",
                 g_tls.cert_file, g_tls.key_file);
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
