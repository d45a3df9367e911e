/*
 * TLS on ternd's client port (ctls.h): a thin layer over auth/tls.c's
 * memory-buffer sessions that server.c drives from its libuv callbacks.
 * TLS 1.3 only; the client port presents client_cert (default node_cert)
 * and asks for a client certificate only when client_ca is set (then one
 * that does not chain to client_ca fails the handshake; a client without
 * one gets through, and its CN is ""). A client whose first byte is not a
 * TLS handshake record (0x16) is remembered as plaintext, so the server
 * can count and log it apart from certificate failures.
 */
#include <errno.h>
#include <string.h>

#include <tern_common.h>

#include "ctls.h"

#define CTLS__RECORD_HANDSHAKE 0x16
/* Ciphertext per 16 KiB record beyond its plaintext (header, tag, type). */
#define CTLS__RECORD_OVERHEAD 64u
#define CTLS__RECORD_SIZE     16384u
#define CTLS__CN_MAX          256

struct node_ctls
{
    struct auth_tls *tls;
    bool ready;
    bool seen_first; /* the first byte was looked at */
    bool plaintext;
    char cn[CTLS__CN_MAX];
    char errmsg[TERN_ERRMSG_SIZE];
};

int node_ctls_ctx_new(const struct node_config *cfg,
                      struct auth_tls_ctx **out,
                      char *errmsg)
{
    struct auth_tls_ctx_options o;
    int rv;

    *out = NULL;
    if (!node_config_client_tls(cfg)) {
        return 0;
    }
    memset(&o, 0, sizeof(o));
    o.role = AUTH_TLS_SERVER;
    o.cert_file = node_config_client_cert(cfg);
    o.key_file = node_config_client_key(cfg);
    o.ca_file = cfg->client_ca;
    o.require_peer_cert = false;
    rv = auth_tls_ctx_new(&o, out, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg,
                          "client_tls ([security] client_cert, "
                          "client_key, client_ca)");
    }
    return rv;
}

int node_ctls_new(struct auth_tls_ctx *ctx, struct node_ctls **out)
{
    struct node_ctls *t = tern_calloc(1, sizeof(*t));
    if (t == NULL) {
        return -ENOMEM;
    }
    if (auth_tls_new(ctx, NULL, &t->tls, t->errmsg) != 0) {
        tern_free(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

void node_ctls_free(struct node_ctls *t)
{
    if (t != NULL) {
        auth_tls_free(t->tls);
        tern_free(t);
    }
}

size_t node_ctls_room(const struct node_ctls *t)
{
    return auth_tls_feed_room(t->tls);
}

int node_ctls_feed(struct node_ctls *t, const void *buf, size_t len)
{
    size_t used = 0;
    int rv;

    if (len > 0 && !t->seen_first) {
        t->seen_first = true;
        t->plaintext = *(const uint8_t *)buf != CTLS__RECORD_HANDSHAKE;
    }
    (void)auth_tls_feed(t->tls, buf, len, &used);
    if (used != len) {
        /* server.c feeds at most node_ctls_room bytes. */
        tern_errmsg_printf(t->errmsg, "tls: input beyond the session buffer");
        return TERN_EINTERNAL;
    }
    if (t->ready) {
        return 0;
    }
    rv = auth_tls_handshake(t->tls);
    if (rv < 0) {
        tern_errmsg_printf(t->errmsg, "%s",
                           t->plaintext ? "client sent no TLS (plaintext "
                                          "on a TLS port)"
                                        : auth_tls_errmsg(t->tls));
        return TERN_EAUTH;
    }
    if (rv == 0) {
        t->ready = true;
        if (auth_tls_peer_cn(t->tls, t->cn, sizeof(t->cn)) != 0) {
            t->cn[0] = '\0';
        }
    }
    return 0;
}

bool node_ctls_ready(const struct node_ctls *t)
{
    return t->ready;
}

bool node_ctls_plaintext(const struct node_ctls *t)
{
    return t->plaintext;
}

int node_ctls_read(struct node_ctls *t, void *buf, size_t cap, size_t *n)
{
    int rv;

    *n = 0;
    if (!t->ready) {
        return 0;
    }
    rv = auth_tls_read(t->tls, buf, cap, n);
    if (rv != 0) {
        tern_errmsg_printf(t->errmsg, "%s", auth_tls_errmsg(t->tls));
    }
    return rv;
}

/* Append the pending ciphertext to b[*len..cap). */
static void take_into(struct node_ctls *t, uint8_t *b, size_t cap, size_t *len)
{
    while (*len < cap) {
        size_t k = auth_tls_take(t->tls, b + *len, cap - *len);
        if (k == 0) {
            break;
        }
        *len += k;
    }
}

int node_ctls_seal(struct node_ctls *t,
                   const void *plain,
                   size_t len,
                   uint8_t **out,
                   size_t *out_len)
{
    const uint8_t *p = plain;
    size_t cap;
    size_t olen = 0;
    size_t off = 0;
    uint8_t *b;

    if (!t->ready) {
        tern_errmsg_printf(t->errmsg, "tls: answer before the handshake");
        return TERN_EINVAL;
    }
    cap = auth_tls_pending(t->tls) + len +
          (len / CTLS__RECORD_SIZE + 1) * CTLS__RECORD_OVERHEAD;
    b = tern_malloc(cap);
    if (b == NULL) {
        return -ENOMEM;
    }
    take_into(t, b, cap, &olen);
    while (off < len) {
        size_t used = 0;
        int rv = auth_tls_write(t->tls, p + off, len - off, &used);
        if (rv != 0) {
            tern_errmsg_printf(t->errmsg, "%s", auth_tls_errmsg(t->tls));
            tern_free(b);
            return TERN_EINVAL;
        }
        if (used == 0 && auth_tls_pending(t->tls) == 0) {
            tern_errmsg_printf(t->errmsg, "tls: the session took no bytes");
            tern_free(b);
            return TERN_EINVAL;
        }
        off += used;
        if (cap - olen < auth_tls_pending(t->tls)) {
            size_t ncap =
                olen + auth_tls_pending(t->tls) + (len - off) +
                ((len - off) / CTLS__RECORD_SIZE + 1) * CTLS__RECORD_OVERHEAD;
            uint8_t *nb = tern_realloc(b, ncap);
            if (nb == NULL) {
                tern_free(b);
                return -ENOMEM;
            }
            b = nb;
            cap = ncap;
        }
        take_into(t, b, cap, &olen);
    }
    *out = b;
    *out_len = olen;
    return 0;
}

int node_ctls_take(struct node_ctls *t, uint8_t **out, size_t *out_len)
{
    size_t n = auth_tls_pending(t->tls);
    size_t olen = 0;
    uint8_t *b;

    *out = NULL;
    *out_len = 0;
    if (n == 0) {
        return 0;
    }
    b = tern_malloc(n);
    if (b == NULL) {
        return -ENOMEM;
    }
    take_into(t, b, n, &olen);
    *out = b;
    *out_len = olen;
    return 0;
}

const char *node_ctls_peer_cn(const struct node_ctls *t)
{
    return t->cn;
}

const char *node_ctls_errmsg(const struct node_ctls *t)
{
    return t->errmsg;
}
