/*
 * auth/tls.c: TLS 1.3 sessions over memory buffers (auth.h, "TLS
 * sessions"). A session is an OpenSSL SSL object whose BIO is one half of
 * a BIO pair; the caller owns the other half through auth_tls_feed and
 * auth_tls_take, so the same code serves a libuv stream (rdma/tcp.c) and
 * a blocking socket. Both halves' buffers are AUTH_TLS_BUF bytes, which is
 * what bounds a session's memory.
 *
 * Contexts pin TLS 1.3 as both the minimum and the maximum version (every
 * end is tern), disable session tickets and the session cache (a
 * connection is long-lived and resumption would skip the certificate
 * check we rely on), and verify the peer's chain against the CA file
 * only (no system trust store). The CN check of auth_tls_expect runs once
 * the handshake completes: OpenSSL has no exact-CN check of its own (its
 * host check matches DNS names with wildcards, which is not what a node
 * id is).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "auth.h"

struct auth_tls_ctx
{
    SSL_CTX *ssl_ctx;
    enum auth_tls_role role;
};

enum tls_state {
    TLS_HANDSHAKE,
    TLS_READY,
    TLS_FAILED,
};

struct auth_tls
{
    SSL *ssl;
    BIO *net; /* our half of the BIO pair: the caller's ciphertext */
    enum auth_tls_role role;
    enum tls_state state;
    int fail_rc;
    char *expect_cn; /* owned, or NULL */
    char errmsg[TERN_ERRMSG_SIZE];
};

/* OpenSSL's reason for the failure at the head of its error queue (or
 * "unknown error" when the queue is empty), into why[cap]. Clears the
 * queue. */
static void ossl_why(char *why, size_t cap)
{
    unsigned long e = ERR_peek_last_error();

    if (e == 0) {
        (void)snprintf(why, cap, "unknown error");
    } else {
        const char *r = ERR_reason_error_string(e);
        const char *l = ERR_lib_error_string(e);
        if (r != NULL) {
            (void)snprintf(why, cap, "%s%s%s", l != NULL ? l : "",
                           l != NULL ? ": " : "", r);
        } else {
            ERR_error_string_n(e, why, cap);
        }
    }
    ERR_clear_error();
}

/* ---- context ------------------------------------------------------------ */

static int ctx_fail(char *errmsg, const char *what, const char *file)
{
    char why[160];

    ossl_why(why, sizeof why);
    tern_errmsg_printf(errmsg, "tls: %s %s: %s", what, file != NULL ? file : "",
                       why);
    return TERN_EINVAL;
}

int auth_tls_ctx_new(const struct auth_tls_ctx_options *opts,
                     struct auth_tls_ctx **out,
                     char *errmsg)
{
    struct auth_tls_ctx *c;
    SSL_CTX *sc;
    int mode;
    int rv;

    if (opts == NULL || out == NULL ||
        (opts->role != AUTH_TLS_SERVER && opts->role != AUTH_TLS_CLIENT)) {
        tern_errmsg_printf(errmsg, "tls: bad context options");
        return TERN_EINVAL;
    }
    if (opts->ca_file == NULL && opts->role == AUTH_TLS_CLIENT) {
        tern_errmsg_printf(errmsg, "tls: no CA file to verify peers with");
        return TERN_EINVAL;
    }
    if ((opts->cert_file == NULL) != (opts->key_file == NULL)) {
        tern_errmsg_printf(errmsg,
                           "tls: a certificate needs its key and a key its "
                           "certificate");
        return TERN_EINVAL;
    }
    if (opts->role == AUTH_TLS_SERVER && opts->cert_file == NULL) {
        tern_errmsg_printf(errmsg, "tls: a server needs a certificate");
        return TERN_EINVAL;
    }
    ERR_clear_error();
    c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        tern_errmsg_printf(errmsg, "tls: out of memory");
        return -ENOMEM;
    }
    sc = SSL_CTX_new(opts->role == AUTH_TLS_SERVER ? TLS_server_method()
                                                   : TLS_client_method());
    if (sc == NULL) {
        (void)ctx_fail(errmsg, "new context", NULL);
        rv = TERN_EINTERNAL;
        goto err_after_alloc;
    }
    if (SSL_CTX_set_min_proto_version(sc, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_max_proto_version(sc, TLS1_3_VERSION) != 1) {
        rv = ctx_fail(errmsg, "TLS 1.3 only", NULL);
        goto err_after_ctx;
    }
    (void)SSL_CTX_set_options(sc, SSL_OP_NO_TICKET);
    (void)SSL_CTX_set_num_tickets(sc, 0);
    (void)SSL_CTX_set_session_cache_mode(sc, SSL_SESS_CACHE_OFF);
    if (opts->cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(sc, opts->cert_file) != 1) {
            rv = ctx_fail(errmsg, "certificate", opts->cert_file);
            goto err_after_ctx;
        }
        if (SSL_CTX_use_PrivateKey_file(sc, opts->key_file, SSL_FILETYPE_PEM) !=
                1 &&
            ERR_GET_REASON(ERR_peek_last_error()) !=
                X509_R_KEY_VALUES_MISMATCH) {
            rv = ctx_fail(errmsg, "private key", opts->key_file);
            goto err_after_ctx;
        }
        if (SSL_CTX_check_private_key(sc) != 1) {
            char why[160];
            ossl_why(why, sizeof why);
            tern_errmsg_printf(errmsg,
                               "tls: private key %s does not match "
                               "certificate %s: %s",
                               opts->key_file, opts->cert_file, why);
            rv = TERN_EINVAL;
            goto err_after_ctx;
        }
    }
    if (opts->ca_file == NULL) {
        /* A server without a CA asks for no client certificate. */
        if (opts->require_peer_cert) {
            tern_errmsg_printf(errmsg, "tls: no CA file to verify peers with");
            rv = TERN_EINVAL;
            goto err_after_ctx;
        }
        mode = SSL_VERIFY_NONE;
    } else if (SSL_CTX_load_verify_locations(sc, opts->ca_file, NULL) != 1) {
        rv = ctx_fail(errmsg, "CA file", opts->ca_file);
        goto err_after_ctx;
    } else {
        mode = SSL_VERIFY_PEER;
    }
    if (opts->role == AUTH_TLS_SERVER && opts->require_peer_cert) {
        mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    }
    SSL_CTX_set_verify(sc, mode, NULL);
    c->ssl_ctx = sc;
    c->role = opts->role;
    *out = c;
    return 0;

err_after_ctx:
    SSL_CTX_free(sc);
err_after_alloc:
    tern_free(c);
    return rv;
}

void auth_tls_ctx_free(struct auth_tls_ctx *ctx)
{
    if (ctx == NULL) {
        return;
    }
    /* Sessions hold their own reference to the SSL_CTX. */
    SSL_CTX_free(ctx->ssl_ctx);
    tern_free(ctx);
}

/* ---- session ------------------------------------------------------------ */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = tern_malloc(n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}

int auth_tls_new(struct auth_tls_ctx *ctx,
                 const struct auth_tls_expect *expect,
                 struct auth_tls **out,
                 char *errmsg)
{
    struct auth_tls *s;
    BIO *inner = NULL;
    BIO *net = NULL;
    int rv;

    if (ctx == NULL || out == NULL) {
        tern_errmsg_printf(errmsg, "tls: no context");
        return TERN_EINVAL;
    }
    if (expect != NULL && ctx->role == AUTH_TLS_SERVER &&
        (expect->ip != NULL || expect->host != NULL)) {
        tern_errmsg_printf(errmsg,
                           "tls: a server verifies its clients by CN only");
        return TERN_EINVAL;
    }
    ERR_clear_error();
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        tern_errmsg_printf(errmsg, "tls: out of memory");
        return -ENOMEM;
    }
    s->role = ctx->role;
    s->state = TLS_HANDSHAKE;
    if (expect != NULL && expect->cn != NULL) {
        s->expect_cn = dup_str(expect->cn);
        if (s->expect_cn == NULL) {
            tern_errmsg_printf(errmsg, "tls: out of memory");
            rv = -ENOMEM;
            goto err_after_alloc;
        }
    }
    s->ssl = SSL_new(ctx->ssl_ctx);
    if (s->ssl == NULL) {
        char why[160];
        ossl_why(why, sizeof why);
        tern_errmsg_printf(errmsg, "tls: new session: %s", why);
        rv = -ENOMEM;
        goto err_after_cn;
    }
    if (BIO_new_bio_pair(&inner, AUTH_TLS_BUF, &net, AUTH_TLS_BUF) != 1) {
        char why[160];
        ossl_why(why, sizeof why);
        tern_errmsg_printf(errmsg, "tls: new session buffers: %s", why);
        rv = -ENOMEM;
        goto err_after_ssl;
    }
    SSL_set_bio(s->ssl, inner, inner); /* the SSL owns inner now */
    s->net = net;
    (void)SSL_set_mode(s->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                   SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (ctx->role == AUTH_TLS_SERVER) {
        SSL_set_accept_state(s->ssl);
    } else {
        SSL_set_connect_state(s->ssl);
    }
    if (expect != NULL && expect->ip != NULL &&
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), expect->ip) !=
            1) {
        tern_errmsg_printf(errmsg, "tls: '%s' is not an IP address",
                           expect->ip);
        rv = TERN_EINVAL;
        goto err_after_ssl;
    }
    if (expect != NULL && expect->host != NULL &&
        (SSL_set1_host(s->ssl, expect->host) != 1 ||
         SSL_set_tlsext_host_name(s->ssl, expect->host) != 1)) {
        tern_errmsg_printf(errmsg, "tls: bad host name '%s'", expect->host);
        rv = TERN_EINVAL;
        goto err_after_ssl;
    }
    *out = s;
    return 0;

err_after_ssl:
    ERR_clear_error();
    BIO_free(s->net); /* NULL-safe */
    SSL_free(s->ssl); /* frees inner once SSL_set_bio took it */
err_after_cn:
    tern_free(s->expect_cn);
err_after_alloc:
    tern_free(s);
    return rv;
}

void auth_tls_free(struct auth_tls *s)
{
    if (s == NULL) {
        return;
    }
    SSL_free(s->ssl);
    BIO_free(s->net);
    tern_free(s->expect_cn);
    tern_free(s);
}

const char *auth_tls_errmsg(const struct auth_tls *s)
{
    return s->errmsg;
}

static int fail(struct auth_tls *s, int rc)
{
    s->state = TLS_FAILED;
    s->fail_rc = rc;
    return rc;
}

/* The subject CN of cert into buf. TERN_EINVAL: none or more than one, or
 * one with an embedded NUL; TERN_ETOOBIG: does not fit. */
static int cert_cn(X509 *cert, char *buf, size_t cap)
{
    X509_NAME *name = X509_get_subject_name(cert);
    unsigned char *utf8 = NULL;
    int i, len, rv;

    if (name == NULL) {
        return TERN_EINVAL;
    }
    i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
    if (i < 0 || X509_NAME_get_index_by_NID(name, NID_commonName, i) >= 0) {
        return TERN_EINVAL;
    }
    len = ASN1_STRING_to_UTF8(
        &utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i)));
    if (len < 0) {
        ERR_clear_error();
        return TERN_EINVAL;
    }
    if (memchr(utf8, '\0', (size_t)len) != NULL) {
        rv = TERN_EINVAL;
    } else if ((size_t)len >= cap) {
        rv = TERN_ETOOBIG;
    } else {
        memcpy(buf, utf8, (size_t)len);
        buf[len] = '\0';
        rv = 0;
    }
    OPENSSL_free(utf8);
    return rv;
}

/* After SSL_do_handshake succeeded: the peer's certificate and the CN
 * requirement. */
static int check_peer(struct auth_tls *s)
{
    X509 *cert = SSL_get0_peer_certificate(s->ssl);
    char cn[256];
    int rv;

    if (SSL_get_verify_result(s->ssl) != X509_V_OK) {
        tern_errmsg_printf(
            s->errmsg, "tls: peer certificate: %s",
            X509_verify_cert_error_string(SSL_get_verify_result(s->ssl)));
        return TERN_EAUTH;
    }
    if (cert == NULL) {
        if (s->role == AUTH_TLS_CLIENT || s->expect_cn != NULL) {
            tern_errmsg_printf(s->errmsg, "tls: peer presented no certificate");
            return TERN_EAUTH;
        }
        return 0;
    }
    if (s->expect_cn == NULL) {
        return 0;
    }
    rv = cert_cn(cert, cn, sizeof cn);
    if (rv != 0) {
        tern_errmsg_printf(s->errmsg,
                           "tls: peer certificate has no single CN (want "
                           "'%s')",
                           s->expect_cn);
        return TERN_EAUTH;
    }
    if (strcmp(cn, s->expect_cn) != 0) {
        tern_errmsg_printf(s->errmsg,
                           "tls: peer certificate CN '%s' is not '%s'", cn,
                           s->expect_cn);
        return TERN_EAUTH;
    }
    return 0;
}

/* errmsg for a failed SSL call whose SSL_get_error was err. */
static void ssl_failure(struct auth_tls *s, const char *op, int err)
{
    char why[160];
    long vr = SSL_get_verify_result(s->ssl);

    ossl_why(why, sizeof why);
    if (vr != X509_V_OK) {
        tern_errmsg_printf(s->errmsg, "tls: %s: %s (peer certificate: %s)", op,
                           why, X509_verify_cert_error_string(vr));
    } else if (err == SSL_ERROR_ZERO_RETURN) {
        tern_errmsg_printf(s->errmsg, "tls: %s: peer closed the session", op);
    } else {
        tern_errmsg_printf(s->errmsg, "tls: %s: %s", op, why);
    }
}

size_t auth_tls_feed_room(const struct auth_tls *s)
{
    return BIO_ctrl_get_write_guarantee(s->net);
}

int auth_tls_feed(struct auth_tls *s, const void *buf, size_t len, size_t *used)
{
    int n;

    *used = 0;
    if (len == 0) {
        return 0;
    }
    n = BIO_write(s->net, buf, len > INT_MAX ? INT_MAX : (int)len);
    if (n > 0) {
        *used = (size_t)n;
    }
    return 0;
}

int auth_tls_handshake(struct auth_tls *s)
{
    int rc, err;

    if (s->state == TLS_FAILED) {
        return s->fail_rc;
    }
    if (s->state == TLS_READY) {
        return 0;
    }
    ERR_clear_error();
    rc = SSL_do_handshake(s->ssl);
    if (rc == 1) {
        rc = check_peer(s);
        if (rc != 0) {
            return fail(s, rc);
        }
        s->state = TLS_READY;
        return 0;
    }
    err = SSL_get_error(s->ssl, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        return AUTH_TLS_AGAIN;
    }
    ssl_failure(s, "handshake", err);
    return fail(s, TERN_EAUTH);
}

int auth_tls_read(struct auth_tls *s, void *buf, size_t cap, size_t *n)
{
    int err;

    *n = 0;
    if (s->state != TLS_READY) {
        if (s->state == TLS_FAILED) {
            return s->fail_rc;
        }
        tern_errmsg_printf(s->errmsg, "tls: read before the handshake");
        return TERN_EINVAL;
    }
    if (cap == 0) {
        return 0;
    }
    ERR_clear_error();
    if (SSL_read_ex(s->ssl, buf, cap, n) == 1) {
        return 0;
    }
    *n = 0;
    err = SSL_get_error(s->ssl, 0);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        return 0;
    }
    if (err == SSL_ERROR_ZERO_RETURN) {
        tern_errmsg_printf(s->errmsg, "tls: peer closed the session");
        return fail(s, TERN_ECLOSED);
    }
    ssl_failure(s, "read", err);
    return fail(s, TERN_EAUTH);
}

int auth_tls_write(struct auth_tls *s,
                   const void *buf,
                   size_t len,
                   size_t *used)
{
    const unsigned char *p = buf;
    size_t total = 0;

    *used = 0;
    if (s->state != TLS_READY) {
        if (s->state == TLS_FAILED) {
            return s->fail_rc;
        }
        tern_errmsg_printf(s->errmsg, "tls: write before the handshake");
        return TERN_EINVAL;
    }
    ERR_clear_error();
    while (total < len) {
        size_t w = 0;
        int err;

        if (SSL_write_ex(s->ssl, p + total, len - total, &w) == 1) {
            total += w;
            continue;
        }
        err = SSL_get_error(s->ssl, 0);
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
            break; /* AUTH_TLS_BUF of ciphertext pending: take it first */
        }
        ssl_failure(s, "write", err);
        *used = total;
        return fail(s, TERN_EAUTH);
    }
    *used = total;
    return 0;
}

size_t auth_tls_pending(const struct auth_tls *s)
{
    return BIO_ctrl_pending(s->net);
}

size_t auth_tls_take(struct auth_tls *s, void *buf, size_t cap)
{
    int n;

    if (cap == 0) {
        return 0;
    }
    n = BIO_read(s->net, buf, cap > INT_MAX ? INT_MAX : (int)cap);
    return n > 0 ? (size_t)n : 0;
}

int auth_tls_close_notify(struct auth_tls *s)
{
    if (s->state != TLS_READY) {
        return s->state == TLS_FAILED ? s->fail_rc : TERN_EINVAL;
    }
    ERR_clear_error();
    if (SSL_shutdown(s->ssl) < 0) {
        ssl_failure(s, "close_notify", SSL_get_error(s->ssl, -1));
        return TERN_EINTERNAL;
    }
    return 0;
}

int auth_tls_peer_cn(const struct auth_tls *s, char *buf, size_t cap)
{
    X509 *cert;

    if (s->state != TLS_READY) {
        return TERN_EINVAL;
    }
    cert = SSL_get0_peer_certificate(s->ssl);
    if (cert == NULL) {
        return TERN_EINVAL;
    }
    return cert_cn(cert, buf, cap);
}
