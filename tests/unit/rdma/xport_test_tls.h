/* TLS credentials for the rdma/ unit tests (test_tcp_tls.c, and the tcp+TLS
 * backend of test_conformance.c): tls_creds_make runs scripts/tern-certs.sh
 * (path from CMake: TERN_CERTS_SCRIPT) into a fresh temporary directory;
 * tls_node_options fills a struct xport_tcp_options with the server and
 * client contexts of one node's certificate. Contexts are kept in a table
 * and freed by tls_creds_free, after every transport using them is closed
 * (the transport borrows them). Header-only, included once per test file. */
#ifndef TERN_XPORT_TEST_TLS_H
#define TERN_XPORT_TEST_TLS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <auth.h>
#include <xport.h>

#define TLS_MAX_CTX 32

static char tls_root[64];
static struct auth_tls_ctx *tls_ctxs[TLS_MAX_CTX];
static unsigned tls_n_ctx;

/* Make credentials for nodes ids ("1 2 3") in <root>/<name> (the root is
 * created on the first call); returns that directory (static storage, 4
 * in rotation). */
static inline const char *tls_creds_make(const char *name, const char *ids)
{
    static char dirs[4][128];
    static unsigned k;
    char *d = dirs[k++ % 4];
    char cmd[512];
    int rc;

    if (tls_root[0] == '\0') {
        strcpy(tls_root, "/tmp/tern-xtls-XXXXXX");
        cr_assert_not_null(mkdtemp(tls_root));
    }
    (void)snprintf(d, 128, "%s/%s", tls_root, name);
    (void)snprintf(cmd, sizeof cmd, "'%s' '%s' %s >/dev/null",
                   TERN_CERTS_SCRIPT, d, ids);
    rc = system(cmd);
    cr_assert_eq(rc, 0, "%s: exit %d", cmd, rc);
    return d;
}

static inline struct auth_tls_ctx *tls_ctx(enum auth_tls_role role,
                                           const char *cert_dir,
                                           uint64_t cert_id,
                                           const char *ca_dir)
{
    struct auth_tls_ctx_options o = {0};
    char cert[160], key[160], ca[160];
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct auth_tls_ctx *c = NULL;

    (void)snprintf(cert, sizeof cert, "%s/node%llu.pem", cert_dir,
                   (unsigned long long)cert_id);
    (void)snprintf(key, sizeof key, "%s/node%llu.key", cert_dir,
                   (unsigned long long)cert_id);
    (void)snprintf(ca, sizeof ca, "%s/ca.pem", ca_dir);
    o.role = role;
    o.cert_file = cert;
    o.key_file = key;
    o.ca_file = ca;
    o.require_peer_cert = true;
    cr_assert_eq(auth_tls_ctx_new(&o, &c, errmsg), 0, "%s", errmsg);
    cr_assert_lt(tls_n_ctx, TLS_MAX_CTX);
    tls_ctxs[tls_n_ctx++] = c;
    return c;
}

/* TLS options of a node presenting node<cert_id>'s certificate from
 * cert_dir and trusting the CA of ca_dir. */
static inline void tls_node_options(struct xport_tcp_options *o,
                                    const char *cert_dir,
                                    uint64_t cert_id,
                                    const char *ca_dir)
{
    o->tls_server = tls_ctx(AUTH_TLS_SERVER, cert_dir, cert_id, ca_dir);
    o->tls_client = tls_ctx(AUTH_TLS_CLIENT, cert_dir, cert_id, ca_dir);
}

/* Free every context and remove the credentials (only our own mkdtemp
 * directory). */
static inline void tls_creds_free(void)
{
    char cmd[128];

    for (unsigned i = 0; i < tls_n_ctx; i++) {
        auth_tls_ctx_free(tls_ctxs[i]);
    }
    tls_n_ctx = 0;
    if (tls_root[0] != '\0') {
        (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", tls_root);
        (void)!system(cmd);
        tls_root[0] = '\0';
    }
}

#endif /* TERN_XPORT_TEST_TLS_H */
