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

#endif /* TERN_AUTH_H */
