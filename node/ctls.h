/*
 * TLS on ternd's client port (ctls.c): the server context made from the
 * [security] client_* keys and one session per connection. server.c moves
 * the bytes: ciphertext from the socket in (node_ctls_feed), plaintext out
 * into the connection's read buffer (node_ctls_read), answers sealed into
 * ciphertext (node_ctls_seal) and handshake bytes taken out
 * (node_ctls_take) for uv_write. Private to node/.
 */
#ifndef TERN_NODE_CTLS_H
#define TERN_NODE_CTLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <auth.h>

#include "config.h"

/* Memory one session holds (OpenSSL's two AUTH_TLS_BUF BIO buffers and
 * its record buffers and state), charged to client_memory_bytes for the
 * connection's lifetime. */
#define NODE_CTLS_COST (2 * AUTH_TLS_BUF + ((size_t)48 << 10))

/* The client port's context when node_config_client_tls(cfg), else *out
 * = NULL: client_cert/client_key (default node_cert/node_key) presented,
 * client_ca (optional) verifying client certificates. *out is the
 * caller's (auth_tls_ctx_free). 0, or TERN_EINVAL with errmsg naming the
 * key and file. */
int node_ctls_ctx_new(const struct node_config *cfg,
                      struct auth_tls_ctx **out,
                      char *errmsg);

struct node_ctls;

/* A session for one accepted connection (ctx borrowed; it may be freed
 * before the session). *out is the caller's (node_ctls_free). 0 or
 * -ENOMEM. */
int node_ctls_new(struct auth_tls_ctx *ctx, struct node_ctls **out);
void node_ctls_free(struct node_ctls *t);

/* Bytes node_ctls_feed takes now (0: decrypt first). */
size_t node_ctls_room(const struct node_ctls *t);

/* Hand len (<= node_ctls_room) bytes from the socket (caller-owned) to
 * the session and drive the handshake. 0, or TERN_EAUTH when the
 * handshake failed (a client that is not TLS, a refused certificate;
 * node_ctls_errmsg says why, node_ctls_plaintext whether the client spoke
 * without TLS). Afterwards node_ctls_take the bytes to send (also after a
 * failure: the alert). */
int node_ctls_feed(struct node_ctls *t, const void *buf, size_t len);

/* The handshake is complete: node_ctls_read and node_ctls_seal work. */
bool node_ctls_ready(const struct node_ctls *t);

/* The first byte the client sent was not a TLS handshake record. */
bool node_ctls_plaintext(const struct node_ctls *t);

/* Up to cap (> 0) bytes of plaintext into buf (caller-owned); *n (OUT) 0
 * when no whole record is there (or before the handshake is done). 0,
 * TERN_ECLOSED (the client sent close_notify) or TERN_EAUTH (a bad
 * record). */
int node_ctls_read(struct node_ctls *t, void *buf, size_t cap, size_t *n);

/* Encrypt len bytes of plaintext (caller-owned) into a new buffer *out
 * of *out_len bytes, transferred to the caller (tern_free). Includes any
 * ciphertext already pending. 0, TERN_EINVAL (handshake not done, or the
 * session failed), -ENOMEM. */
int node_ctls_seal(struct node_ctls *t,
                   const void *plain,
                   size_t len,
                   uint8_t **out,
                   size_t *out_len);

/* The pending ciphertext (handshake messages, alerts) in a new buffer
 * *out of *out_len bytes (caller's, tern_free), or *out = NULL when none.
 * 0 or -ENOMEM. */
int node_ctls_take(struct node_ctls *t, uint8_t **out, size_t *out_len);

/* The verified client certificate's CN ("" without one). Borrowed. */
const char *node_ctls_peer_cn(const struct node_ctls *t);

/* Why the last failing call failed. Borrowed. */
const char *node_ctls_errmsg(const struct node_ctls *t);

#endif /* TERN_NODE_CTLS_H */
