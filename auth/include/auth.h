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

/* ---- SCRAM-SHA-256 (scram.c) ------------------------------------------
 *
 * Client authentication by RFC 5802 SCRAM with RFC 7677's SHA-256: the
 * password never travels and the server stores only StoredKey and
 * ServerKey, from which a password cannot be recovered and with which a
 * client cannot be impersonated. The exchange, transport-neutral (node/
 * and client/ carry the messages in their own frames):
 *
 *   C: client-first  = "n,," "n=" user ",r=" cnonce
 *   S: server-first  = "r=" cnonce snonce ",s=" salt(b64) ",i=" iterations
 *   C: client-final  = "c=biws,r=" cnonce snonce ",p=" ClientProof(b64)
 *   S: server-final  = "v=" ServerSignature(b64)  or  "e=" error
 *
 * Scope and decisions:
 *   - no channel binding: the client sends the gs2 header "n,," and the
 *     server advertises no -PLUS mechanism, so it accepts "n" and "y"
 *     and refuses "p=..." (e=channel-binding-not-supported). tern's
 *     client TLS terminates in the same process, so "tls-exporter" or
 *     "tls-server-end-point" binding can be added later as
 *     SCRAM-SHA-256-PLUS without changing the stored credentials;
 *   - SASLprep: usernames are 1..AUTH_SCRAM_USER_MAX bytes of printable
 *     ASCII without space (0x21..0x7e), passwords 1..AUTH_SCRAM_PASSWORD_MAX
 *     bytes of printable ASCII with space (0x20..0x7e). On that set
 *     SASLprep (RFC 4013) is the identity, so tern's results equal every
 *     conforming implementation's; anything else is refused with
 *     TERN_EINVAL (locally) or e=invalid-encoding (from a peer) rather
 *     than normalized differently;
 *   - strict parsing: attributes in the RFC's order, no extensions (a
 *     mandatory "m=" is refused with e=extensions-not-supported, so are
 *     optional ones), an authzid ("a=") only when it names the user
 *     itself, strict base64 (padded, canonical), every message at most
 *     AUTH_SCRAM_MSG_MAX bytes, nonces of printable ASCII without ',';
 *   - unknown users: the server answers with a salt derived from a
 *     server key and the username (HMAC) and the same iteration count as
 *     new credentials, runs the same final computation and refuses with
 *     the same e=invalid-proof as for a wrong password, so the exchange
 *     does not tell whether a user exists. The key must be the same on
 *     every node and across restarts (derive it from the cluster secret,
 *     or keep a random one in the replicated metadata), or the salt
 *     would change and give it away;
 *   - cost: the client runs PBKDF2 with the server's iteration count
 *     (AUTH_SCRAM_ITER_MIN..its own maximum) in auth_scram_client_final;
 *     the server never runs PBKDF2 during an exchange, only when a
 *     credential is made (auth_scram_cred_make).
 *
 * Return codes: 0; TERN_EAUTH when the peer failed to prove itself or
 * refused us; TERN_EMALFORMED for a message that breaks the grammar or a
 * bound; TERN_EINVAL for a bad local argument or a call out of order;
 * TERN_ECORRUPT for a stored credential whose checksum fails;
 * TERN_EVERSION for a stored credential of an unknown version; -ENOMEM;
 * TERN_EINTERNAL when libcrypto fails. errmsg says why. A state machine
 * that failed once refuses every later call (TERN_EINVAL). */
#define AUTH_SCRAM_KEY_SIZE     32 /* SHA-256 output */
#define AUTH_SCRAM_SALT_MIN     16
#define AUTH_SCRAM_SALT_MAX     64
#define AUTH_SCRAM_SALT_DEFAULT 16   /* made by auth_scram_cred_make */
#define AUTH_SCRAM_ITER_MIN     4096 /* RFC 7677's minimum */
#define AUTH_SCRAM_ITER_MAX     1000000
#define AUTH_SCRAM_ITER_DEFAULT 4096
#define AUTH_SCRAM_USER_MAX     255
#define AUTH_SCRAM_PASSWORD_MAX 1024
#define AUTH_SCRAM_NONCE_MAX    128  /* each side's part of the nonce */
#define AUTH_SCRAM_MSG_MAX      2048 /* any message, bytes */

/* A user's stored credential (RFC 5802 section 3): never the password.
 * Not secret in the way a password is, but whoever holds it can run a
 * dictionary attack on the password: keep it out of logs, wipe it. */
struct auth_scram_cred
{
    uint32_t iterations; /* AUTH_SCRAM_ITER_MIN..AUTH_SCRAM_ITER_MAX */
    uint8_t salt_len;    /* AUTH_SCRAM_SALT_MIN..AUTH_SCRAM_SALT_MAX */
    uint8_t salt[AUTH_SCRAM_SALT_MAX];
    uint8_t
        stored_key[AUTH_SCRAM_KEY_SIZE]; /* H(HMAC(SaltedPw, "Client Key")) */
    uint8_t server_key[AUTH_SCRAM_KEY_SIZE]; /* HMAC(SaltedPw, "Server Key") */
};

/* Derive *out (caller-owned) from password (a NUL-terminated string,
 * caller-owned, see the SASLprep rule above) with a fresh random salt of
 * AUTH_SCRAM_SALT_DEFAULT bytes and the given iteration count (0 means
 * AUTH_SCRAM_ITER_DEFAULT). Costs `iterations` HMACs: run it off an
 * event loop. */
int auth_scram_cred_make(const char *password,
                         uint32_t iterations,
                         struct auth_scram_cred *out,
                         char *errmsg);
/* The same with a given salt (caller-owned, salt_len bytes within the
 * bounds): for reproducing a known credential, e.g. RFC 7677's example. */
int auth_scram_cred_derive(const char *password,
                           const uint8_t *salt,
                           size_t salt_len,
                           uint32_t iterations,
                           struct auth_scram_cred *out,
                           char *errmsg);

/* Binary form of a credential, for LMDB values and Raft entries (format
 * byte by byte at the top of scram.c): AUTH_SCRAM_CRED_ENC_SIZE(salt_len)
 * bytes, at most AUTH_SCRAM_CRED_ENC_MAX. auth_scram_cred_encode writes
 * into buf (caller-owned, cap bytes) and sets *len (OUT); TERN_EINVAL if
 * cred is out of bounds or cap too small. auth_scram_cred_decode reads
 * exactly len bytes (untrusted, caller-owned) into *out. */
#define AUTH_SCRAM_CRED_ENC_SIZE(salt_len) (76u + (unsigned)(salt_len))
#define AUTH_SCRAM_CRED_ENC_MAX            AUTH_SCRAM_CRED_ENC_SIZE(AUTH_SCRAM_SALT_MAX)
int auth_scram_cred_encode(const struct auth_scram_cred *cred,
                           uint8_t *buf,
                           size_t cap,
                           size_t *len,
                           char *errmsg);
int auth_scram_cred_decode(const uint8_t *buf,
                           size_t len,
                           struct auth_scram_cred *out,
                           char *errmsg);

/* RFC 5803-style text form, for a CLI that sets a user from a
 * precomputed credential:
 *   SCRAM-SHA-256$<iterations>:<salt b64>$<StoredKey b64>:<ServerKey b64>
 * (iterations in decimal without leading zeros, base64 padded).
 * auth_scram_cred_format writes a NUL-terminated string into buf
 * (caller-owned, cap >= AUTH_SCRAM_CRED_TEXT_MAX); auth_scram_cred_parse
 * reads len bytes of text (untrusted, caller-owned; no NUL needed). */
#define AUTH_SCRAM_CRED_TEXT_MAX 256
int auth_scram_cred_format(const struct auth_scram_cred *cred,
                           char *buf,
                           size_t cap,
                           char *errmsg);
int auth_scram_cred_parse(const char *text,
                          size_t len,
                          struct auth_scram_cred *out,
                          char *errmsg);

/* Client side. One object per exchange; every message the calls return
 * is borrowed from the object, valid until the next call on it or its
 * free, and is not NUL-terminated (use the length). */
struct auth_scram_client;

/* user and password: NUL-terminated, caller-owned (copied; the copy of
 * the password is wiped as soon as the proof is computed).
 * max_iterations: the highest iteration count the client will run for a
 * server (0 means AUTH_SCRAM_ITER_MAX; clamped to AUTH_SCRAM_ITER_MIN..
 * AUTH_SCRAM_ITER_MAX). *out is transferred to the caller on success. */
int auth_scram_client_new(const char *user,
                          const char *password,
                          uint32_t max_iterations,
                          struct auth_scram_client **out,
                          char *errmsg);
/* Wipes every secret, then frees. c may be NULL. */
void auth_scram_client_free(struct auth_scram_client *c);
/* Step 1: the client-first-message. */
int auth_scram_client_first(struct auth_scram_client *c,
                            const char **msg, /* OUT, borrowed */
                            size_t *msg_len,  /* OUT */
                            char *errmsg);
/* Step 2: from the server-first-message (untrusted, caller-owned, len
 * bytes), the client-final-message. Checks that the server's nonce
 * extends ours, the salt's size and the iteration count's bounds; an
 * "e=" answer in place of server-first gives TERN_EAUTH with the
 * server's reason. Runs PBKDF2. */
int auth_scram_client_final(struct auth_scram_client *c,
                            const char *server_first,
                            size_t len,
                            const char **msg, /* OUT, borrowed */
                            size_t *msg_len,  /* OUT */
                            char *errmsg);
/* Step 3: check the server-final-message (untrusted, caller-owned): 0
 * when the server proved it knows our ServerKey; TERN_EAUTH for a wrong
 * signature or an "e=" answer (errmsg carries the server's reason). */
int auth_scram_client_verify(struct auth_scram_client *c,
                             const char *server_final,
                             size_t len,
                             char *errmsg);
/* For tests only: use nonce (NUL-terminated, printable, no ',') instead
 * of a random one; call before auth_scram_client_first. A predictable
 * nonce gives up the exchange's freshness: never call it elsewhere. */
int auth_scram_client_test_nonce(struct auth_scram_client *c,
                                 const char *nonce,
                                 char *errmsg);

/* Server side. One object per exchange, messages borrowed as above.
 * fake_key (caller-owned, copied) derives the answers for unknown users
 * (see above); iterations is the count the server uses for them and
 * should equal what new credentials get (0 means the default). */
struct auth_scram_server;

int auth_scram_server_new(const uint8_t fake_key[AUTH_SCRAM_KEY_SIZE],
                          uint32_t iterations,
                          struct auth_scram_server **out,
                          char *errmsg);
/* Wipes every secret, then frees. s may be NULL. */
void auth_scram_server_free(struct auth_scram_server *s);
/* Step 1: parse the client-first-message (untrusted, caller-owned) and
 * give the username to look up (*user borrowed, NUL-terminated,
 * unescaped). On failure *reply (if not NULL on return) is an "e=..."
 * message the transport may send before closing. */
int auth_scram_server_start(struct auth_scram_server *s,
                            const char *client_first,
                            size_t len,
                            const char **user, /* OUT, borrowed */
                            const char **reply,
                            size_t *reply_len,
                            char *errmsg);
/* Step 2: the server-first-message for the user's credential (cred:
 * caller-owned, copied), or for an unknown user when cred is NULL. */
int auth_scram_server_first(struct auth_scram_server *s,
                            const struct auth_scram_cred *cred,
                            const char **msg, /* OUT, borrowed */
                            size_t *msg_len,  /* OUT */
                            char *errmsg);
/* Step 3: verify the client-final-message (untrusted, caller-owned).
 * 0: authenticated, *reply is "v=ServerSignature". Otherwise *reply (if
 * not NULL) is the "e=..." to send: TERN_EAUTH with e=invalid-proof for
 * a wrong password and for an unknown user alike, TERN_EMALFORMED with
 * the matching RFC 5802 error for a broken message. */
int auth_scram_server_final(struct auth_scram_server *s,
                            const char *client_final,
                            size_t len,
                            const char **reply, /* OUT, borrowed */
                            size_t *reply_len,  /* OUT */
                            char *errmsg);
/* For tests only: the server's part of the nonce, as for the client. */
int auth_scram_server_test_nonce(struct auth_scram_server *s,
                                 const char *nonce,
                                 char *errmsg);
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
                             * required, but for a server that does not
                             * require_peer_cert: NULL asks clients for
                             * no certificate */
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

/* How many bytes auth_tls_feed would take now (0..AUTH_TLS_BUF). */
size_t auth_tls_feed_room(const struct auth_tls *s);

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
