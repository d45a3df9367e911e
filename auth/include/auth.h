/*
 * auth/: tern's security primitives (prefix auth_), over OpenSSL's
 * libcrypto and libssl. Library tern_auth; depends only on common/.
 *
 * Who uses what:
 *   - rdma/ authenticates cluster peers: mutual TLS on the tcp transport,
 *     a challenge-response over the cluster secret on the shm and verbs
 *     handshakes before any ring or remote key is exposed;
 *   - node/ serves clients over TLS and verifies SCRAM-SHA-256;
 *   - client/ (libtern) is the TLS and SCRAM client.
 *
 * Every call returns 0 or a negative code (TERN_EAUTH when a peer failed
 * to prove itself, -ENOMEM, TERN_EINVAL, ...) and, where it takes one,
 * fills errmsg (TERN_ERRMSG_SIZE bytes) with the reason, including
 * OpenSSL's own error text.
 */
#ifndef TERN_AUTH_H
#define TERN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tern_common.h>

/* ---- Shared core (auth.c) --------------------------------------------- */

/* Fill buf with len bytes from OpenSSL's CSPRNG. 0, or TERN_EINTERNAL
 * with errmsg (the generator failed: never fall back to weaker bytes). */
int auth_random(void *buf, size_t len, char *errmsg);

/* Constant-time comparison of two len-byte strings (time does not depend
 * on where they differ). */
bool auth_equal(const void *a, const void *b, size_t len);

/* Overwrite len bytes at p with zeros in a way the compiler keeps (for
 * keys, passwords and derived secrets before their memory is freed). */
void auth_wipe(void *p, size_t len);

/* HMAC-SHA-256 of the concatenation of iov[0..n) under key.
 * out receives AUTH_MAC_SIZE bytes. 0, or TERN_EINTERNAL. */
#define AUTH_MAC_SIZE 32
struct auth_iov
{
    const void *base;
    size_t len;
};
int auth_hmac(const void *key,
              size_t key_len,
              const struct auth_iov *iov,
              unsigned n,
              uint8_t out[AUTH_MAC_SIZE]);

/* ---- Cluster secret (secret.c) ----------------------------------------
 *
 * The key every node of a cluster shares for the shm and verbs
 * handshakes. File format: 64 hexadecimal digits (32 bytes), optionally
 * followed by whitespace (e.g. `openssl rand -hex 32 > FILE`). */
#define AUTH_SECRET_SIZE 32
struct auth_secret
{
    uint8_t key[AUTH_SECRET_SIZE];
};

/* Read the secret at path into *out (caller-owned; auth_wipe it when
 * done). Refused with TERN_EAUTH and errmsg: not a regular file, group or
 * other may read or write it (mode & 077), not 64 hex digits; -errno when
 * it cannot be opened or read. */
int auth_secret_load(const char *path, struct auth_secret *out, char *errmsg);

/* Create a new secret file at path (O_EXCL, mode 0600) from 32 random
 * bytes. -EEXIST when path exists. */
int auth_secret_create(const char *path, char *errmsg);

/* A proof of knowing the secret: HMAC-SHA-256 under s->key of label,
 * then each part, every item preceded by its length as a u32 LE (so no
 * two different transcripts encode alike). Handshakes use a label per
 * direction and message ("tern shm welcome", ...) and put both sides'
 * nonces and node ids in the parts, so a proof cannot be replayed on
 * another connection or reflected back. 0 or TERN_EINTERNAL. */
int auth_secret_mac(const struct auth_secret *s,
                    const char *label,
                    const struct auth_iov *parts,
                    unsigned n,
                    uint8_t out[AUTH_MAC_SIZE]);

/* ---- TLS sessions (tls.c) ---------------------------------------------
 *
 * TLS 1.3 (only: both ends are tern) over memory buffers, so one code
 * serves libuv streams and blocking sockets: the caller moves ciphertext
 * between the socket and the session (auth_tls_feed, auth_tls_take) and
 * plaintext between the session and itself (auth_tls_read,
 * auth_tls_write). A session never touches a socket, a clock or a thread.
 *
 * Bounded buffers: a session holds at most AUTH_TLS_BUF bytes of received
 * ciphertext not yet decrypted (auth_tls_feed takes what fits and says how
 * much) and at most AUTH_TLS_BUF bytes of ciphertext to send
 * (auth_tls_write encrypts only what fits; take the ciphertext out and
 * write the rest). Plaintext is never buffered beyond one TLS record
 * (16 KiB) inside OpenSSL.
 *
 * Usage, either role:
 *   feed what the socket gave -> auth_tls_handshake until 0 (done) or < 0;
 *   after each call, auth_tls_take everything pending and send it (also
 *   after a failure: it may hold the alert that tells the peer why);
 *   once done: auth_tls_read until it gives 0 bytes, auth_tls_write +
 *   auth_tls_take to send; auth_tls_close_notify + take at the end.
 *
 * Peer names (auth_tls_expect): every peer must present a certificate
 * chaining to the context's CA (a server with require_peer_cert false
 * lets a client without one through; a client always requires the
 * server's). On top of that, the session may require the certificate's
 * subject CN to be exactly expect_cn (tern nodes: "node-<id>"), and a
 * client may verify the server by IP address (expect_ip) or host name
 * (expect_host, against the subjectAltName DNS entries), as a browser
 * does. A failed check fails the handshake with TERN_EAUTH. */
#define AUTH_TLS_BUF ((size_t)64 << 10)

enum auth_tls_role {
    AUTH_TLS_SERVER = 0,
    AUTH_TLS_CLIENT = 1,
};

struct auth_tls_ctx_options
{
    enum auth_tls_role role;
    const char *cert_file;  /* PEM certificate (chain) presented to peers;
                             * NULL: none (client only) */
    const char *key_file;   /* PEM private key of cert_file */
    const char *ca_file;    /* PEM CA certificates that verify the peer;
                             * required */
    bool require_peer_cert; /* server: refuse clients without a
                             * certificate (a client always requires the
                             * server's) */
};

/* A context: the role, own credentials and the trusted CA, shared by any
 * number of sessions (it is reference-counted internally, so it may be
 * freed while sessions made from it live). Files are read once, here.
 * *out is owned by the caller, released with auth_tls_ctx_free. Errors:
 * TERN_EINVAL (missing option, a file that cannot be read or parsed, the
 * key does not match the certificate), with errmsg naming the file and
 * OpenSSL's reason; -ENOMEM. */
struct auth_tls_ctx;
int auth_tls_ctx_new(const struct auth_tls_ctx_options *opts,
                     struct auth_tls_ctx **out,
                     char *errmsg);
void auth_tls_ctx_free(struct auth_tls_ctx *ctx);

/* What a session requires of the peer beyond a valid chain. Every field
 * may be NULL (no requirement); the strings are copied. */
struct auth_tls_expect
{
    const char *cn;   /* the peer certificate's subject CN, exactly */
    const char *ip;   /* client only: an IP SAN of the server ("1.2.3.4",
                       * "::1") */
    const char *host; /* client only: a DNS SAN of the server */
};

/* A session on one connection. expect may be NULL. *out is owned by the
 * caller, released with auth_tls_free. TERN_EINVAL (bad expect, e.g. an
 * ip that does not parse, or ip/host on a server), -ENOMEM. */
struct auth_tls;
int auth_tls_new(struct auth_tls_ctx *ctx,
                 const struct auth_tls_expect *expect,
                 struct auth_tls **out,
                 char *errmsg);
void auth_tls_free(struct auth_tls *s);

/* Hand len bytes of ciphertext from the peer to the session (buf is
 * caller-owned). *used (OUT) is how many it took: fewer than len when
 * AUTH_TLS_BUF bytes are waiting to be decrypted (read plaintext or drive
 * the handshake first, then feed the rest). Returns 0. */
int auth_tls_feed(struct auth_tls *s,
                  const void *buf,
                  size_t len,
                  size_t *used /* OUT */);

/* Drive the handshake with what was fed. Returns 0 when it is complete
 * (the peer's certificate verified and matched expect; also on every call
 * after that), AUTH_TLS_AGAIN when it needs more input from the peer, or
 * a negative code: TERN_EAUTH (the peer's certificate was refused, or it
 * refused ours, or it is not TLS 1.3 or not TLS at all), TERN_EINTERNAL.
 * The reason is in auth_tls_errmsg. A failed session stays failed. */
#define AUTH_TLS_AGAIN 1
int auth_tls_handshake(struct auth_tls *s);

/* Decrypt up to cap bytes of plaintext into buf (caller-owned). *n (OUT)
 * is the count, 0 when no whole record is there yet. Returns 0,
 * TERN_ECLOSED when the peer sent close_notify (and nothing is left), or
 * TERN_EAUTH (a record failed to authenticate, or the peer sent an alert,
 * e.g. it refused our certificate after a TLS 1.3 client's handshake
 * completed) with auth_tls_errmsg. Call only after the handshake. */
int auth_tls_read(struct auth_tls *s, void *buf, size_t cap, size_t *n);

/* Encrypt plaintext (caller-owned, len bytes) into the pending
 * ciphertext. *used (OUT) is how many bytes it took: fewer than len when
 * the pending ciphertext reached AUTH_TLS_BUF; auth_tls_take it, then
 * call again with the rest (the same bytes: OpenSSL may hold a record it
 * has already encrypted from them). Returns 0, or a negative code after a
 * failure. Call only after the handshake. */
int auth_tls_write(struct auth_tls *s,
                   const void *buf,
                   size_t len,
                   size_t *used /* OUT */);

/* Bytes of ciphertext waiting to be sent. */
size_t auth_tls_pending(const struct auth_tls *s);

/* Move up to cap bytes of pending ciphertext into buf (caller-owned);
 * returns the count (0: nothing pending). */
size_t auth_tls_take(struct auth_tls *s, void *buf, size_t cap);

/* Queue close_notify (then take it and send it). Returns 0, or a negative
 * code when the session failed or never completed its handshake. */
int auth_tls_close_notify(struct auth_tls *s);

/* The subject CN of the verified peer certificate, copied into buf (cap
 * bytes, NUL-terminated). Returns 0, TERN_EINVAL (no verified
 * certificate: handshake not done, or a client without one), TERN_ETOOBIG
 * (does not fit). */
int auth_tls_peer_cn(const struct auth_tls *s, char *buf, size_t cap);

/* Why the last call failed (valid while s lives). */
const char *auth_tls_errmsg(const struct auth_tls *s);

#endif /* TERN_AUTH_H */
