/*
 * Unit tests of TLS sessions over memory buffers (auth/tls.c). Every test
 * makes its own credentials with scripts/tern-certs.sh (path from CMake:
 * TERN_CERTS_SCRIPT) in a fresh temporary directory: a cluster CA with
 * nodes 1, 2, 3 and a client "alice", and a second, foreign CA made the
 * same way with node 2. Two sessions talk by moving ciphertext between
 * each other in memory; no socket is involved.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "auth.h"

static char dir[64];
static char own[96], foreign[96];

static void run(const char *cmd)
{
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "%s: exit %d", cmd, rc);
}

static void setup(void)
{
    char cmd[512];

    strcpy(dir, "/tmp/tern-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    (void)snprintf(own, sizeof own, "%s/own", dir);
    (void)snprintf(foreign, sizeof foreign, "%s/foreign", dir);
    (void)snprintf(cmd, sizeof cmd,
                   "'%s' --client alice '%s' 1 2 3 >/dev/null && "
                   "'%s' '%s' 2 >/dev/null",
                   TERN_CERTS_SCRIPT, own, TERN_CERTS_SCRIPT, foreign);
    run(cmd);
}

static void teardown(void)
{
    char cmd[128];

    /* Only our own mkdtemp directory. */
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(auth_tls, .init = setup, .fini = teardown, .timeout = 60);

/* Path of file name in credentials directory d (static buffers, 32 in
 * rotation: a test keeps fewer alive at once). */
static const char *in(const char *d, const char *name)
{
    static char paths[32][160];
    static unsigned k;
    char *p = paths[k++ % 32];

    (void)snprintf(p, 160, "%s/%s", d, name);
    return p;
}

static struct auth_tls_ctx *server_ctx(const char *d,
                                       int node,
                                       const char *ca_dir,
                                       bool require)
{
    struct auth_tls_ctx_options o = {0};
    struct auth_tls_ctx *c = NULL;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    char cert[32], key[32];

    (void)snprintf(cert, sizeof cert, "node%d.pem", node);
    (void)snprintf(key, sizeof key, "node%d.key", node);
    o.role = AUTH_TLS_SERVER;
    o.cert_file = in(d, cert);
    o.key_file = in(d, key);
    o.ca_file = in(ca_dir, "ca.pem");
    o.require_peer_cert = require;
    cr_assert_eq(auth_tls_ctx_new(&o, &c, errmsg), 0, "%s", errmsg);
    return c;
}

/* A client context presenting cert/key of d (NULL: no certificate). */
static struct auth_tls_ctx *client_ctx(const char *d,
                                       const char *cert,
                                       const char *key,
                                       const char *ca_dir)
{
    struct auth_tls_ctx_options o = {0};
    struct auth_tls_ctx *c = NULL;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    o.role = AUTH_TLS_CLIENT;
    if (cert != NULL) {
        o.cert_file = in(d, cert);
        o.key_file = in(d, key);
    }
    o.ca_file = in(ca_dir, "ca.pem");
    cr_assert_eq(auth_tls_ctx_new(&o, &c, errmsg), 0, "%s", errmsg);
    return c;
}

static struct auth_tls *session(struct auth_tls_ctx *ctx,
                                const char *cn,
                                const char *ip,
                                const char *host)
{
    struct auth_tls_expect e = {cn, ip, host};
    struct auth_tls *s = NULL;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    cr_assert_eq(auth_tls_new(ctx, &e, &s, errmsg), 0, "%s", errmsg);
    return s;
}

/* Move every pending ciphertext byte of from into to. */
static void shuttle(struct auth_tls *from, struct auth_tls *to)
{
    uint8_t buf[4096];
    size_t n;

    for (int i = 0; i < 10000 && (n = auth_tls_take(from, buf, sizeof buf));
         i++) {
        size_t used = 0;
        cr_assert_eq(auth_tls_feed(to, buf, n, &used), 0);
        cr_assert_eq(used, n, "the handshake fits the buffers");
    }
}

/* Run both handshakes to their end; OUT: each side's last result. */
static void handshake(struct auth_tls *c,
                      struct auth_tls *s,
                      int *rc_c,
                      int *rc_s)
{
    *rc_c = AUTH_TLS_AGAIN;
    *rc_s = AUTH_TLS_AGAIN;
    for (int i = 0; i < 20 && (*rc_c > 0 || *rc_s > 0); i++) {
        if (*rc_c > 0) {
            *rc_c = auth_tls_handshake(c);
        }
        shuttle(c, s);
        if (*rc_s > 0) {
            *rc_s = auth_tls_handshake(s);
        }
        shuttle(s, c);
    }
    cr_assert_leq(*rc_c, 0, "client handshake ended");
    cr_assert_leq(*rc_s, 0, "server handshake ended");
}

/* Write text on from, carry it to to, read it back exactly. */
static void transfer(struct auth_tls *from,
                     struct auth_tls *to,
                     const char *text)
{
    size_t len = strlen(text), used = 0, n = 0;
    char got[256];

    cr_assert_eq(auth_tls_write(from, text, len, &used), 0, "%s",
                 auth_tls_errmsg(from));
    cr_assert_eq(used, len);
    shuttle(from, to);
    cr_assert_eq(auth_tls_read(to, got, sizeof got, &n), 0, "%s",
                 auth_tls_errmsg(to));
    cr_assert_eq(n, len);
    cr_assert_eq(memcmp(got, text, len), 0);
}

Test(auth_tls, handshake_and_data_both_ways)
{
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, "node2.pem", "node2.key", own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, "node-1", "127.0.0.1", NULL);
    char cn[64];
    size_t n = 1;
    int rc_c, rc_s;

    /* Contexts may go before their sessions. */
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
    cr_expect_eq(auth_tls_peer_cn(s, cn, sizeof cn), TERN_EINVAL,
                 "no peer before the handshake");
    handshake(c, s, &rc_c, &rc_s);
    cr_assert_eq(rc_c, 0, "%s", auth_tls_errmsg(c));
    cr_assert_eq(rc_s, 0, "%s", auth_tls_errmsg(s));
    cr_expect_eq(auth_tls_handshake(c), 0, "done stays done");
    cr_assert_eq(auth_tls_peer_cn(s, cn, sizeof cn), 0);
    cr_expect_str_eq(cn, "node-2");
    cr_assert_eq(auth_tls_peer_cn(c, cn, sizeof cn), 0);
    cr_expect_str_eq(cn, "node-1");
    cr_expect_eq(auth_tls_peer_cn(c, cn, 4), TERN_ETOOBIG);

    transfer(c, s, "from the client");
    transfer(s, c, "from the server");
    transfer(c, s, "and again");
    cr_expect_eq(auth_tls_read(s, cn, sizeof cn, &n), 0);
    cr_expect_eq(n, 0, "nothing more to read");

    cr_assert_eq(auth_tls_close_notify(c), 0);
    shuttle(c, s);
    cr_expect_eq(auth_tls_read(s, cn, sizeof cn, &n), TERN_ECLOSED);
    auth_tls_free(c);
    auth_tls_free(s);
}

Test(auth_tls, client_cert_from_client_ca_and_optional_cert)
{
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, false);
    struct auth_tls_ctx *anon = client_ctx(own, NULL, NULL, own);
    struct auth_tls_ctx *alice =
        client_ctx(own, "client-alice.pem", "client-alice.key", own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(anon, NULL, NULL, NULL);
    char cn[64];
    int rc_c, rc_s;

    /* Optional client certificate: a client without one gets through,
     * and the server sees no CN. */
    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_c, 0, "%s", auth_tls_errmsg(c));
    cr_expect_eq(rc_s, 0, "%s", auth_tls_errmsg(s));
    cr_expect_eq(auth_tls_peer_cn(s, cn, sizeof cn), TERN_EINVAL);
    transfer(c, s, "anonymous");
    auth_tls_free(c);
    auth_tls_free(s);

    s = session(sc, NULL, NULL, NULL);
    c = session(alice, NULL, NULL, "node-1.invalid");
    handshake(c, s, &rc_c, &rc_s);
    cr_expect_lt(rc_c, 0, "the server has no DNS name node-1.invalid");
    auth_tls_free(c);
    auth_tls_free(s);

    s = session(sc, NULL, NULL, NULL);
    c = session(alice, NULL, "127.0.0.1", NULL);
    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_c, 0, "%s", auth_tls_errmsg(c));
    cr_expect_eq(rc_s, 0, "%s", auth_tls_errmsg(s));
    cr_assert_eq(auth_tls_peer_cn(s, cn, sizeof cn), 0);
    cr_expect_str_eq(cn, "alice");
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(anon);
    auth_tls_ctx_free(alice);
}

Test(auth_tls, server_ip_mismatch_refused)
{
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, "node2.pem", "node2.key", own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, NULL, "10.99.0.1", NULL);
    struct auth_tls *bad = NULL;
    struct auth_tls_expect e = {NULL, "not-an-ip", NULL};
    char errmsg[TERN_ERRMSG_SIZE] = "";
    int rc_c, rc_s;

    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_c, TERN_EAUTH);
    cr_expect(strstr(auth_tls_errmsg(c), "IP address mismatch") != NULL, "%s",
              auth_tls_errmsg(c));
    cr_expect_eq(auth_tls_new(cc, &e, &bad, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "not-an-ip") != NULL, "%s", errmsg);
    e.ip = "127.0.0.1";
    cr_expect_eq(auth_tls_new(sc, &e, &bad, errmsg), TERN_EINVAL,
                 "a server checks clients by CN only");
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, foreign_ca_refused_by_server)
{
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, true);
    /* Trusts our CA, but its own certificate is signed by the foreign
     * one. */
    struct auth_tls_ctx *cc =
        client_ctx(foreign, "node2.pem", "node2.key", own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, "node-1", NULL, NULL);
    char buf[64];
    size_t n = 0;
    int rc_c, rc_s;

    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_s, TERN_EAUTH);
    cr_expect(strstr(auth_tls_errmsg(s), "certificate") != NULL, "%s",
              auth_tls_errmsg(s));
    /* TLS 1.3: the client finished first; the server's alert tells it. */
    if (rc_c == 0) {
        cr_expect_eq(auth_tls_read(c, buf, sizeof buf, &n), TERN_EAUTH);
        cr_expect_eq(n, 0);
    }
    cr_expect_eq(auth_tls_read(s, buf, sizeof buf, &n), TERN_EAUTH,
                 "a failed session stays failed");
    cr_expect_eq(auth_tls_write(s, "x", 1, &n), TERN_EAUTH);
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, foreign_ca_refused_by_client)
{
    /* The server's certificate is signed by the foreign CA. */
    struct auth_tls_ctx *sc = server_ctx(foreign, 2, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, "node1.pem", "node1.key", own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, "node-2", NULL, NULL);
    int rc_c, rc_s;

    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_c, TERN_EAUTH);
    cr_expect(strstr(auth_tls_errmsg(c), "certificate") != NULL, "%s",
              auth_tls_errmsg(c));
    cr_expect_lt(rc_s, 0, "the client's alert ends the server's handshake");
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, client_without_cert_refused)
{
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, NULL, NULL, own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, "node-1", NULL, NULL);
    char buf[64];
    size_t n = 0;
    int rc_c, rc_s;

    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_s, TERN_EAUTH);
    cr_expect(strstr(auth_tls_errmsg(s), "certificate") != NULL, "%s",
              auth_tls_errmsg(s));
    if (rc_c == 0) {
        cr_expect_eq(auth_tls_read(c, buf, sizeof buf, &n), TERN_EAUTH);
        cr_expect(strstr(auth_tls_errmsg(c), "certificate") != NULL, "%s",
                  auth_tls_errmsg(c));
    }
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, cn_mismatch_refused)
{
    struct auth_tls_ctx *sc = server_ctx(own, 3, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, "node1.pem", "node1.key", own);
    /* Dialed node 2, found node 3's (valid) certificate. */
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, "node-2", NULL, NULL);
    size_t used = 0;
    int rc_c, rc_s;

    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_c, TERN_EAUTH);
    cr_expect(strstr(auth_tls_errmsg(c), "'node-3' is not 'node-2'") != NULL,
              "%s", auth_tls_errmsg(c));
    cr_expect_eq(auth_tls_write(c, "x", 1, &used), TERN_EAUTH,
                 "nothing is sent after a refusal");
    cr_expect_eq(used, 0);
    auth_tls_free(c);
    auth_tls_free(s);

    /* A server session may require a CN too. */
    sc = (auth_tls_ctx_free(sc), server_ctx(own, 1, own, true));
    s = session(sc, "node-3", NULL, NULL);
    c = session(cc, NULL, NULL, NULL);
    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_s, TERN_EAUTH);
    cr_expect(strstr(auth_tls_errmsg(s), "'node-1' is not 'node-3'") != NULL,
              "%s", auth_tls_errmsg(s));
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, garbage_instead_of_handshake)
{
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, "node2.pem", "node2.key", own);
    /* A plaintext tcp-transport HELLO frame header, then noise. */
    static const uint8_t frame[] = {0x54, 0x58, 1, 1, 16, 0, 0, 0, 0, 0,
                                    0,    0,    0, 0, 0,  0, 1, 2, 3, 4};
    uint8_t noise[3000];
    size_t used = 0;
    char buf[64];

    for (size_t i = 0; i < sizeof noise; i++) {
        noise[i] = (uint8_t)(i * 131 + 7);
    }
    for (int k = 0; k < 2; k++) {
        struct auth_tls *s = session(sc, NULL, NULL, NULL);
        const uint8_t *p = k == 0 ? frame : noise;
        size_t len = k == 0 ? sizeof frame : sizeof noise;

        cr_assert_eq(auth_tls_feed(s, p, len, &used), 0);
        cr_expect_eq(used, len);
        cr_expect_eq(auth_tls_handshake(s), TERN_EAUTH);
        cr_expect_neq(auth_tls_errmsg(s)[0], '\0');
        cr_expect_eq(auth_tls_handshake(s), TERN_EAUTH, "stays failed");
        cr_expect_eq(auth_tls_read(s, buf, sizeof buf, &used), TERN_EAUTH);
        (void)auth_tls_take(s, buf, sizeof buf); /* an alert, maybe */
        auth_tls_free(s);
    }
    /* A client answered with noise. */
    {
        struct auth_tls *c = session(cc, "node-1", NULL, NULL);
        cr_expect_eq(auth_tls_handshake(c), AUTH_TLS_AGAIN);
        cr_expect_gt(auth_tls_pending(c), 0, "a ClientHello to send");
        cr_expect_gt(auth_tls_take(c, noise, sizeof noise), 0);
        for (size_t i = 0; i < sizeof noise; i++) {
            noise[i] = (uint8_t)(i * 17 + 3);
        }
        cr_assert_eq(auth_tls_feed(c, noise, sizeof noise, &used), 0);
        cr_expect_eq(auth_tls_handshake(c), TERN_EAUTH);
        auth_tls_free(c);
    }
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, bounded_buffers)
{
    enum { BIG = 1 << 20 };
    struct auth_tls_ctx *sc = server_ctx(own, 1, own, true);
    struct auth_tls_ctx *cc = client_ctx(own, "node2.pem", "node2.key", own);
    struct auth_tls *s = session(sc, NULL, NULL, NULL);
    struct auth_tls *c = session(cc, "node-1", NULL, NULL);
    uint8_t *src = malloc(BIG), *dst = malloc(BIG), *wire = malloc(BIG);
    size_t sent = 0, got = 0, used = 0;
    int rc_c, rc_s, rounds = 0;

    cr_assert(src != NULL && dst != NULL && wire != NULL);
    for (size_t i = 0; i < BIG; i++) {
        src[i] = (uint8_t)(i ^ (i >> 9));
    }
    handshake(c, s, &rc_c, &rc_s);
    cr_assert_eq(rc_c, 0, "%s", auth_tls_errmsg(c));
    cr_assert_eq(rc_s, 0, "%s", auth_tls_errmsg(s));

    /* One write of 1 MiB takes only what fits in the outgoing buffer. */
    cr_assert_eq(auth_tls_write(c, src, BIG, &used), 0);
    cr_expect_gt(used, 0);
    cr_expect_lt(used, BIG, "took %zu of %d", used, BIG);
    cr_expect_leq(auth_tls_pending(c), AUTH_TLS_BUF);
    sent = used;

    /* Feeding more than the incoming buffer takes only what fits. */
    {
        size_t n = auth_tls_take(c, wire, BIG);
        cr_expect_eq(auth_tls_pending(c), 0);
        cr_assert_eq(auth_tls_feed(s, wire, n, &used), 0);
        cr_expect_eq(used, n);
        cr_assert_eq(auth_tls_feed(s, wire, AUTH_TLS_BUF, &used), 0);
        cr_expect_eq(used, 0, "the incoming buffer is full");
        while (got < sent && rounds++ < 1000) {
            size_t r = 0;
            cr_assert_eq(auth_tls_read(s, dst + got, BIG - got, &r), 0);
            if (r == 0) {
                break;
            }
            got += r;
        }
        cr_expect_eq(got, sent);
    }
    /* The rest, the way a caller moves a large message. */
    while (got < BIG && rounds++ < 100000) {
        size_t n, off = 0, r = 0;
        if (sent < BIG) {
            cr_assert_eq(auth_tls_write(c, src + sent, BIG - sent, &used), 0);
            sent += used;
        }
        n = auth_tls_take(c, wire, BIG);
        cr_expect_leq(n, AUTH_TLS_BUF);
        while (off < n && rounds++ < 100000) {
            cr_assert_eq(auth_tls_feed(s, wire + off, n - off, &used), 0);
            off += used;
            do {
                cr_assert_eq(auth_tls_read(s, dst + got, BIG - got, &r), 0);
                got += r;
            } while (r > 0);
        }
    }
    cr_expect_eq(got, (size_t)BIG);
    cr_expect_eq(memcmp(src, dst, BIG), 0, "every byte, in order");
    free(src);
    free(dst);
    free(wire);
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(cc);
}

Test(auth_tls, context_errors_name_the_file)
{
    struct auth_tls_ctx_options o = {0};
    struct auth_tls_ctx *c = NULL;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    o.role = AUTH_TLS_SERVER;
    o.cert_file = in(own, "node1.pem");
    o.key_file = in(own, "node1.key");
    o.ca_file = in(own, "missing-ca.pem");
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "missing-ca.pem") != NULL, "%s", errmsg);

    o.ca_file = in(own, "ca.pem");
    o.cert_file = in(own, "node9.pem");
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "node9.pem") != NULL, "%s", errmsg);

    o.cert_file = in(own, "node1.pem");
    o.key_file = in(own, "node2.key");
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "does not match") != NULL, "%s", errmsg);

    o.key_file = in(own, "ca.pem"); /* not a key */
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "private key") != NULL, "%s", errmsg);

    o.key_file = NULL;
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    o.key_file = in(own, "node1.key");
    o.ca_file = NULL;
    o.require_peer_cert = true; /* a server without a CA only without it */
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "CA") != NULL, "%s", errmsg);
    o.require_peer_cert = false;
    o.ca_file = in(own, "node1.key"); /* no certificate in it */
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "CA file") != NULL, "%s", errmsg);
    o.role = AUTH_TLS_SERVER;
    o.cert_file = NULL;
    o.key_file = NULL;
    o.ca_file = in(own, "ca.pem");
    cr_expect_eq(auth_tls_ctx_new(&o, &c, errmsg), TERN_EINVAL,
                 "a server needs a certificate");
    cr_expect_null(c);
}

/* A server context without a CA asks for no client certificate: a client
 * that has one still gets through (it is not sent), and the server sees
 * no CN. feed_room shrinks as undecrypted ciphertext waits. */
Test(auth_tls, server_without_ca_takes_anonymous_clients)
{
    struct auth_tls_ctx_options o = {0};
    struct auth_tls_ctx *sc = NULL;
    struct auth_tls_ctx *alice =
        client_ctx(own, "client-alice.pem", "client-alice.key", own);
    struct auth_tls *s, *c;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    char cn[64];
    int rc_c, rc_s;

    o.role = AUTH_TLS_SERVER;
    o.cert_file = in(own, "node1.pem");
    o.key_file = in(own, "node1.key");
    o.require_peer_cert = true;
    cr_expect_eq(auth_tls_ctx_new(&o, &sc, errmsg), TERN_EINVAL,
                 "requiring client certificates needs a CA");
    o.require_peer_cert = false;
    cr_assert_eq(auth_tls_ctx_new(&o, &sc, errmsg), 0, "%s", errmsg);
    s = session(sc, NULL, NULL, NULL);
    c = session(alice, NULL, "127.0.0.1", NULL);
    cr_expect_eq(auth_tls_feed_room(s), AUTH_TLS_BUF);
    handshake(c, s, &rc_c, &rc_s);
    cr_expect_eq(rc_c, 0, "%s", auth_tls_errmsg(c));
    cr_expect_eq(rc_s, 0, "%s", auth_tls_errmsg(s));
    cr_expect_eq(auth_tls_peer_cn(s, cn, sizeof cn), TERN_EINVAL);
    {
        size_t used = 0;
        cr_assert_eq(auth_tls_write(c, "x", 1, &used), 0);
        cr_assert_eq(used, 1);
        used = auth_tls_take(c, errmsg, sizeof errmsg);
        cr_assert_gt(used, 0);
        cr_assert_eq(auth_tls_feed(s, errmsg, used, &used), 0);
        cr_expect_eq(auth_tls_feed_room(s), AUTH_TLS_BUF - used);
    }
    auth_tls_free(c);
    auth_tls_free(s);
    auth_tls_ctx_free(sc);
    auth_tls_ctx_free(alice);
}
