/*
 * auth/scram.c: SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash) as two
 * transport-neutral state machines, client and server, plus the stored
 * credential, its binary form and its RFC 5803-style text form. The
 * exchange, the scope decisions (no channel binding, ASCII instead of
 * SASLprep, unknown users) and the calls are described in auth.h.
 *
 * Stored credential, binary form, version 1 (auth_scram_cred_encode and
 * auth_scram_cred_decode). Encoded and decoded here, kept in LMDB values
 * and carried in Raft entries: be careful when adapting, a change needs a
 * new version byte and a decoder that still reads version 1.
 *
 *   offset  size  field
 *   0       1     version = 1
 *   1       1     mechanism = 1 (SCRAM-SHA-256)
 *   2       1     S = salt length, 16..64
 *   3       1     reserved, 0
 *   4       4     iteration count, u32 LE, 4096..1,000,000
 *   8       S     salt
 *   8+S     32    StoredKey = SHA-256(HMAC(SaltedPassword, "Client Key"))
 *   40+S    32    ServerKey = HMAC(SaltedPassword, "Server Key")
 *   72+S    4     tern_checksum32 of bytes [0, 72+S), u32 LE
 *   total: 76+S bytes (AUTH_SCRAM_CRED_ENC_SIZE)
 *
 * Reading it safely: at least 8 bytes; the version byte first (another
 * version is TERN_EVERSION, not corruption); then the total length must
 * be exactly 76+S for the S in byte 2 and S within bounds; then the
 * checksum (TERN_ECORRUPT; skipped in fuzz builds so mutations reach the
 * field checks); then mechanism, reserved byte and iteration bounds
 * (TERN_EMALFORMED). The checksum detects corruption, not forgery: the
 * Raft log and LMDB are trusted storage.
 *
 * Messages: every byte of every SCRAM message tern accepts is printable
 * ASCII without space (0x21..0x7e), which the first check of each parser
 * enforces over the whole message; attributes are then read in the
 * RFC's order by scan_attr/scan_comma, which never step past the
 * message's length. Base64 is strict (padded, canonical, bounded output).
 *
 * Happy path (server): start (client-first parsed, user named) -> first
 * (credential or fake one bound, server-first built) -> final (proof
 * checked, "v=" built) -> done. Failure modes: any step that fails moves
 * the machine to FAILED, fills an "e=" reply when the peer should be
 * told, and every later call returns TERN_EINVAL. The client mirrors it:
 * first -> final (PBKDF2, proof) -> verify.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "auth.h"

#define SCRAM__CRED_VERSION   1
#define SCRAM__CRED_MECH      1
#define SCRAM__CLIENT_NONCE   18 /* random bytes -> 24 base64 chars */
#define SCRAM__SERVER_NONCE   24 /* random bytes -> 32 base64 chars */
#define SCRAM__TEXT_PREFIX    "SCRAM-SHA-256$"
#define SCRAM__ITER_DIGITS    7
#define SCRAM__ERR_VALUE_SHOW 64 /* bytes of a peer's e= value in errmsg */

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define SCRAM__CHECKSUM_OK(a, b) ((void)(a), (void)(b), 1)
#else
#define SCRAM__CHECKSUM_OK(a, b) ((a) == (b))
#endif

/* ---- base64 (RFC 4648, padded) ---------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_len(size_t n)
{
    return 4 * ((n + 2) / 3);
}

/* Writes b64_len(n) bytes at out, no NUL. */
static void b64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t i = 0;

    for (; i + 3 <= n; i += 3) {
        uint32_t v =
            (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *out++ = b64_alphabet[v >> 18];
        *out++ = b64_alphabet[(v >> 12) & 63];
        *out++ = b64_alphabet[(v >> 6) & 63];
        *out++ = b64_alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        *out++ = b64_alphabet[v >> 18];
        *out++ = b64_alphabet[(v >> 12) & 63];
        *out++ = '=';
        *out++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        *out++ = b64_alphabet[v >> 18];
        *out++ = b64_alphabet[(v >> 12) & 63];
        *out++ = b64_alphabet[(v >> 6) & 63];
        *out++ = '=';
    }
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '+') {
        return 62;
    }
    if (c == '/') {
        return 63;
    }
    return -1;
}

/* Strict decode of len bytes: a multiple of 4, '=' only as the last one
 * or two, unused bits zero (one encoding per value), at most cap output
 * bytes. 0 and *out_len, or -1. */
static int b64_decode(const char *in,
                      size_t len,
                      uint8_t *out,
                      size_t cap,
                      size_t *out_len)
{
    size_t pad = 0;
    size_t n;
    size_t i;
    size_t o = 0;

    if (len == 0 || len % 4 != 0) {
        return -1;
    }
    if (in[len - 1] == '=') {
        pad = in[len - 2] == '=' ? 2 : 1;
    }
    n = len / 4 * 3 - pad;
    if (n > cap) {
        return -1;
    }
    for (i = 0; i < len; i += 4) {
        int q[4];
        uint32_t v = 0;
        bool last = i + 4 == len;
        for (int k = 0; k < 4; k++) {
            bool pad_slot = last && k >= 4 - (int)pad;
            q[k] = pad_slot ? 0 : b64_value(in[i + (size_t)k]);
            if (q[k] < 0) {
                return -1;
            }
            v = v << 6 | (uint32_t)q[k];
        }
        out[o++] = (uint8_t)(v >> 16);
        if (!last || pad < 2) {
            out[o++] = (uint8_t)(v >> 8);
        }
        if (!last || pad < 1) {
            out[o++] = (uint8_t)v;
        }
        if (last && ((pad == 1 && (v & 0xff) != 0) ||
                     (pad == 2 && (v & 0xffff) != 0))) {
            return -1;
        }
    }
    *out_len = o;
    return 0;
}

/* ---- Small helpers ------------------------------------------------------ */

/* A bounded output buffer for building messages. */
struct sbuf
{
    char *p;
    size_t len;
    size_t cap;
    bool overflow;
};

static void sbuf_init(struct sbuf *b, char *p, size_t cap)
{
    b->p = p;
    b->len = 0;
    b->cap = cap;
    b->overflow = false;
}

static void sbuf_put(struct sbuf *b, const void *s, size_t n)
{
    if (b->overflow || b->cap - b->len < n) {
        b->overflow = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sbuf_str(struct sbuf *b, const char *s)
{
    sbuf_put(b, s, strlen(s));
}

static void sbuf_b64(struct sbuf *b, const uint8_t *in, size_t n)
{
    size_t m = b64_len(n);

    if (b->overflow || b->cap - b->len < m) {
        b->overflow = true;
        return;
    }
    b64_encode(in, n, b->p + b->len);
    b->len += m;
}

static void sbuf_u32(struct sbuf *b, uint32_t v)
{
    char digits[16];
    int n = snprintf(digits, sizeof digits, "%u", (unsigned)v);

    sbuf_put(b, digits, (size_t)n);
}

/* Index of the first byte of s[0..len) outside lo..0x7e, or len. */
static size_t first_bad_byte(const char *s, size_t len, unsigned char lo)
{
    size_t i;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < lo || c > 0x7e) {
            break;
        }
    }
    return i;
}

static int check_user(const char *user, char *errmsg)
{
    size_t n = strnlen(user, AUTH_SCRAM_USER_MAX + 1);
    size_t bad;

    if (n == 0 || n > AUTH_SCRAM_USER_MAX) {
        tern_errmsg_printf(errmsg, "scram: username must be 1..%d bytes",
                           AUTH_SCRAM_USER_MAX);
        return TERN_EINVAL;
    }
    bad = first_bad_byte(user, n, 0x21);
    if (bad < n) {
        tern_errmsg_printf(errmsg,
                           "scram: username byte %zu is 0x%02x: tern accepts "
                           "printable ASCII usernames without spaces only "
                           "(no SASLprep of other characters)",
                           bad, (unsigned)(unsigned char)user[bad]);
        return TERN_EINVAL;
    }
    return 0;
}

static int check_password(const char *password, size_t *len, char *errmsg)
{
    size_t n = strnlen(password, AUTH_SCRAM_PASSWORD_MAX + 1);
    size_t bad;

    if (n == 0 || n > AUTH_SCRAM_PASSWORD_MAX) {
        tern_errmsg_printf(errmsg, "scram: password must be 1..%d bytes",
                           AUTH_SCRAM_PASSWORD_MAX);
        return TERN_EINVAL;
    }
    bad = first_bad_byte(password, n, 0x20);
    if (bad < n) {
        /* Never print the byte: it is part of a password. */
        tern_errmsg_printf(errmsg,
                           "scram: password byte %zu is not printable "
                           "ASCII: tern accepts printable ASCII passwords "
                           "only (no SASLprep of other characters)",
                           bad);
        return TERN_EINVAL;
    }
    *len = n;
    return 0;
}

/* A nonce part: 1..AUTH_SCRAM_NONCE_MAX printable bytes, no ','. */
static bool nonce_valid(const char *s, size_t n)
{
    if (n == 0 || n > AUTH_SCRAM_NONCE_MAX) {
        return false;
    }
    if (first_bad_byte(s, n, 0x21) < n) {
        return false;
    }
    return memchr(s, ',', n) == NULL;
}

/* Fresh nonce of `bytes` random bytes in base64 into out (NUL-terminated),
 * *len set. */
static int nonce_make(size_t bytes, char *out, size_t *len, char *errmsg)
{
    uint8_t raw[SCRAM__SERVER_NONCE];
    int rv;

    TERN_ASSERT(bytes <= sizeof raw);
    TERN_ASSERT(b64_len(bytes) <= AUTH_SCRAM_NONCE_MAX);
    rv = auth_random(raw, bytes, errmsg);
    if (rv != 0) {
        return rv;
    }
    b64_encode(raw, bytes, out);
    *len = b64_len(bytes);
    out[*len] = '\0';
    return 0;
}

static int nonce_set(const char *nonce,
                     char *out,
                     size_t *len,
                     bool *fixed,
                     char *errmsg)
{
    size_t n = strnlen(nonce, AUTH_SCRAM_NONCE_MAX + 1);

    if (!nonce_valid(nonce, n)) {
        tern_errmsg_printf(errmsg,
                           "scram: a nonce is 1..%d printable ASCII bytes "
                           "without ','",
                           AUTH_SCRAM_NONCE_MAX);
        return TERN_EINVAL;
    }
    memcpy(out, nonce, n);
    out[n] = '\0';
    *len = n;
    *fixed = true;
    return 0;
}

/* Decimal iteration count: 1..7 digits, no leading zero. 0 or -1. */
static int parse_u32(const char *s, size_t n, uint32_t *out)
{
    uint32_t v = 0;

    if (n == 0 || n > SCRAM__ITER_DIGITS || (s[0] == '0' && n > 1)) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

/* ---- Attribute scanning ------------------------------------------------- */

struct scan
{
    const char *p;
    const char *end;
};

/* "<name>=<value>" at the position, the value running to the next ',' or
 * the end (not consumed). False if the attribute is not there. */
static bool scan_attr(struct scan *s, char name, const char **v, size_t *vlen)
{
    const char *q;

    if (s->end - s->p < 2 || s->p[0] != name || s->p[1] != '=') {
        return false;
    }
    q = s->p + 2;
    *v = q;
    while (q < s->end && *q != ',') {
        q++;
    }
    *vlen = (size_t)(q - *v);
    s->p = q;
    return true;
}

static bool scan_comma(struct scan *s)
{
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        return true;
    }
    return false;
}

static bool scan_done(const struct scan *s)
{
    return s->p == s->end;
}

/* An attribute name follows: "x=" for any letter x. */
static bool scan_at_attr(const struct scan *s)
{
    return s->end - s->p >= 2 && s->p[1] == '=' &&
           ((s->p[0] >= 'a' && s->p[0] <= 'z') ||
            (s->p[0] >= 'A' && s->p[0] <= 'Z'));
}

/* Whole-message checks shared by every parser: 1..AUTH_SCRAM_MSG_MAX
 * bytes of 0x21..0x7e. */
static int check_message(const char *what,
                         const char *msg,
                         size_t len,
                         char *errmsg)
{
    size_t bad;

    if (msg == NULL || len == 0 || len > AUTH_SCRAM_MSG_MAX) {
        tern_errmsg_printf(errmsg, "scram %s: length %zu not in 1..%d", what,
                           len, AUTH_SCRAM_MSG_MAX);
        return TERN_EMALFORMED;
    }
    bad = first_bad_byte(msg, len, 0x21);
    if (bad < len) {
        tern_errmsg_printf(errmsg,
                           "scram %s: byte %zu is 0x%02x: tern accepts "
                           "printable ASCII only (no SASLprep)",
                           what, bad, (unsigned)(unsigned char)msg[bad]);
        return TERN_EMALFORMED;
    }
    return 0;
}

/* ---- Crypto ------------------------------------------------------------- */

static int sha256(const void *in, size_t n, uint8_t out[AUTH_SCRAM_KEY_SIZE])
{
    unsigned int len = 0;

    if (EVP_Digest(in, n, out, &len, EVP_sha256(), NULL) != 1 ||
        len != AUTH_SCRAM_KEY_SIZE) {
        return TERN_EINTERNAL;
    }
    return 0;
}

static int hmac1(const uint8_t key[AUTH_SCRAM_KEY_SIZE],
                 const char *text,
                 uint8_t out[AUTH_SCRAM_KEY_SIZE])
{
    struct auth_iov iov = {text, strlen(text)};

    return auth_hmac(key, AUTH_SCRAM_KEY_SIZE, &iov, 1, out);
}

/* AuthMessage = client-first-bare "," server-first "," final-without-proof */
static int hmac_auth_message(const uint8_t key[AUTH_SCRAM_KEY_SIZE],
                             const char *bare,
                             size_t bare_len,
                             const char *sfirst,
                             size_t sfirst_len,
                             const char *cfinal,
                             size_t cfinal_len,
                             uint8_t out[AUTH_SCRAM_KEY_SIZE])
{
    struct auth_iov iov[5] = {
        {bare, bare_len},     {",", 1}, {sfirst, sfirst_len}, {",", 1},
        {cfinal, cfinal_len},
    };

    return auth_hmac(key, AUTH_SCRAM_KEY_SIZE, iov, 5, out);
}

static int cred_check(const struct auth_scram_cred *c, char *errmsg)
{
    if (c->salt_len < AUTH_SCRAM_SALT_MIN ||
        c->salt_len > AUTH_SCRAM_SALT_MAX) {
        tern_errmsg_printf(
            errmsg, "scram credential: salt of %u bytes, not %d..%d",
            (unsigned)c->salt_len, AUTH_SCRAM_SALT_MIN, AUTH_SCRAM_SALT_MAX);
        return TERN_EINVAL;
    }
    if (c->iterations < AUTH_SCRAM_ITER_MIN ||
        c->iterations > AUTH_SCRAM_ITER_MAX) {
        tern_errmsg_printf(
            errmsg, "scram credential: %u iterations, not %d..%d",
            (unsigned)c->iterations, AUTH_SCRAM_ITER_MIN, AUTH_SCRAM_ITER_MAX);
        return TERN_EINVAL;
    }
    return 0;
}

/* SaltedPassword and the keys derived from it. */
static int derive_keys(const char *password,
                       size_t password_len,
                       const uint8_t *salt,
                       size_t salt_len,
                       uint32_t iterations,
                       uint8_t client_key[AUTH_SCRAM_KEY_SIZE],
                       uint8_t stored_key[AUTH_SCRAM_KEY_SIZE],
                       uint8_t server_key[AUTH_SCRAM_KEY_SIZE],
                       char *errmsg)
{
    uint8_t salted[AUTH_SCRAM_KEY_SIZE];
    int rv = TERN_EINTERNAL;

    if (PKCS5_PBKDF2_HMAC(password, (int)password_len, salt, (int)salt_len,
                          (int)iterations, EVP_sha256(), AUTH_SCRAM_KEY_SIZE,
                          salted) != 1) {
        tern_errmsg_printf(errmsg, "scram: PBKDF2 failed");
        goto out;
    }
    if (hmac1(salted, "Client Key", client_key) != 0 ||
        sha256(client_key, AUTH_SCRAM_KEY_SIZE, stored_key) != 0 ||
        hmac1(salted, "Server Key", server_key) != 0) {
        tern_errmsg_printf(errmsg, "scram: HMAC or SHA-256 failed");
        goto out;
    }
    rv = 0;
out:
    auth_wipe(salted, sizeof salted);
    return rv;
}

/* ---- Stored credentials ------------------------------------------------- */

int auth_scram_cred_derive(const char *password,
                           const uint8_t *salt,
                           size_t salt_len,
                           uint32_t iterations,
                           struct auth_scram_cred *out,
                           char *errmsg)
{
    uint8_t client_key[AUTH_SCRAM_KEY_SIZE];
    size_t password_len = 0;
    int rv;

    if (iterations == 0) {
        iterations = AUTH_SCRAM_ITER_DEFAULT;
    }
    rv = check_password(password, &password_len, errmsg);
    if (rv != 0) {
        return rv;
    }
    if (salt == NULL || salt_len < AUTH_SCRAM_SALT_MIN ||
        salt_len > AUTH_SCRAM_SALT_MAX) {
        tern_errmsg_printf(errmsg,
                           "scram credential: salt must be %d..%d bytes",
                           AUTH_SCRAM_SALT_MIN, AUTH_SCRAM_SALT_MAX);
        return TERN_EINVAL;
    }
    memset(out, 0, sizeof *out);
    out->iterations = iterations;
    out->salt_len = (uint8_t)salt_len;
    memcpy(out->salt, salt, salt_len);
    rv = cred_check(out, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = derive_keys(password, password_len, salt, salt_len, iterations,
                     client_key, out->stored_key, out->server_key, errmsg);
    auth_wipe(client_key, sizeof client_key);
    if (rv != 0) {
        auth_wipe(out, sizeof *out);
    }
    return rv;
}

int auth_scram_cred_make(const char *password,
                         uint32_t iterations,
                         struct auth_scram_cred *out,
                         char *errmsg)
{
    uint8_t salt[AUTH_SCRAM_SALT_DEFAULT];
    int rv = auth_random(salt, sizeof salt, errmsg);

    if (rv != 0) {
        return rv;
    }
    return auth_scram_cred_derive(password, salt, sizeof salt, iterations, out,
                                  errmsg);
}

int auth_scram_cred_encode(const struct auth_scram_cred *cred,
                           uint8_t *buf,
                           size_t cap,
                           size_t *len,
                           char *errmsg)
{
    size_t s;
    size_t n;
    int rv = cred_check(cred, errmsg);

    if (rv != 0) {
        return rv;
    }
    s = cred->salt_len;
    n = AUTH_SCRAM_CRED_ENC_SIZE(s);
    if (cap < n) {
        tern_errmsg_printf(
            errmsg, "scram credential: %zu bytes needed, %zu given", n, cap);
        return TERN_EINVAL;
    }
    buf[0] = SCRAM__CRED_VERSION;
    buf[1] = SCRAM__CRED_MECH;
    buf[2] = (uint8_t)s;
    buf[3] = 0;
    tern_put_u32(buf + 4, cred->iterations);
    memcpy(buf + 8, cred->salt, s);
    memcpy(buf + 8 + s, cred->stored_key, AUTH_SCRAM_KEY_SIZE);
    memcpy(buf + 40 + s, cred->server_key, AUTH_SCRAM_KEY_SIZE);
    tern_put_u32(buf + 72 + s, tern_checksum32(buf, 72 + s));
    *len = n;
    return 0;
}

int auth_scram_cred_decode(const uint8_t *buf,
                           size_t len,
                           struct auth_scram_cred *out,
                           char *errmsg)
{
    struct tern_cursor c;
    struct auth_scram_cred cred;
    const uint8_t *p;
    uint8_t mech, reserved;
    size_t s;
    uint32_t sum;
    int rv = TERN_EMALFORMED;

    memset(&cred, 0, sizeof cred);
    if (buf == NULL || len < 8) {
        tern_errmsg_printf(errmsg, "scram credential: %zu bytes, too short",
                           len);
        return TERN_EMALFORMED;
    }
    if (buf[0] != SCRAM__CRED_VERSION) {
        tern_errmsg_printf(errmsg, "scram credential: version %u unknown",
                           (unsigned)buf[0]);
        return TERN_EVERSION;
    }
    s = buf[2];
    if (s < AUTH_SCRAM_SALT_MIN || s > AUTH_SCRAM_SALT_MAX ||
        len != AUTH_SCRAM_CRED_ENC_SIZE(s)) {
        tern_errmsg_printf(
            errmsg, "scram credential: %zu bytes for a salt of %zu", len, s);
        return TERN_EMALFORMED;
    }
    sum = tern_get_u32(buf + 72 + s);
    if (!SCRAM__CHECKSUM_OK(sum, tern_checksum32(buf, 72 + s))) {
        tern_errmsg_printf(errmsg, "scram credential: checksum mismatch");
        return TERN_ECORRUPT;
    }
    tern_cursor_init(&c, buf, len);
    (void)tern_cursor_u8(&c); /* version, checked above */
    mech = tern_cursor_u8(&c);
    cred.salt_len = tern_cursor_u8(&c);
    reserved = tern_cursor_u8(&c);
    cred.iterations = tern_cursor_u32(&c);
    p = tern_cursor_bytes(&c, s);
    if (p != NULL) {
        memcpy(cred.salt, p, s);
    }
    p = tern_cursor_bytes(&c, AUTH_SCRAM_KEY_SIZE);
    if (p != NULL) {
        memcpy(cred.stored_key, p, AUTH_SCRAM_KEY_SIZE);
    }
    p = tern_cursor_bytes(&c, AUTH_SCRAM_KEY_SIZE);
    if (p != NULL) {
        memcpy(cred.server_key, p, AUTH_SCRAM_KEY_SIZE);
    }
    (void)tern_cursor_u32(&c); /* checksum, checked above */
    if (c.err != 0 || tern_cursor_left(&c) != 0) {
        tern_errmsg_printf(errmsg, "scram credential: truncated");
        goto out;
    }
    if (mech != SCRAM__CRED_MECH || reserved != 0) {
        tern_errmsg_printf(errmsg,
                           "scram credential: mechanism %u, reserved %u",
                           (unsigned)mech, (unsigned)reserved);
        goto out;
    }
    if (cred_check(&cred, errmsg) != 0) {
        goto out;
    }
    *out = cred;
    rv = 0;
out:
    auth_wipe(&cred, sizeof cred);
    return rv;
}

int auth_scram_cred_format(const struct auth_scram_cred *cred,
                           char *buf,
                           size_t cap,
                           char *errmsg)
{
    struct sbuf b;
    int rv = cred_check(cred, errmsg);

    if (rv != 0) {
        return rv;
    }
    if (cap == 0) {
        return TERN_EINVAL;
    }
    sbuf_init(&b, buf, cap - 1);
    sbuf_str(&b, SCRAM__TEXT_PREFIX);
    sbuf_u32(&b, cred->iterations);
    sbuf_str(&b, ":");
    sbuf_b64(&b, cred->salt, cred->salt_len);
    sbuf_str(&b, "$");
    sbuf_b64(&b, cred->stored_key, AUTH_SCRAM_KEY_SIZE);
    sbuf_str(&b, ":");
    sbuf_b64(&b, cred->server_key, AUTH_SCRAM_KEY_SIZE);
    if (b.overflow) {
        buf[0] = '\0';
        tern_errmsg_printf(errmsg,
                           "scram credential: text needs more than "
                           "%zu bytes",
                           cap);
        return TERN_EINVAL;
    }
    buf[b.len] = '\0';
    return 0;
}

/* The text up to the next `sep` (or the end when sep is 0). */
static bool text_field(struct scan *s, char sep, const char **v, size_t *n)
{
    const char *q = s->p;

    while (q < s->end && *q != sep) {
        q++;
    }
    if (sep != 0 && q == s->end) {
        return false;
    }
    *v = s->p;
    *n = (size_t)(q - s->p);
    s->p = q < s->end ? q + 1 : q;
    return true;
}

int auth_scram_cred_parse(const char *text,
                          size_t len,
                          struct auth_scram_cred *out,
                          char *errmsg)
{
    const size_t plen = sizeof SCRAM__TEXT_PREFIX - 1;
    struct auth_scram_cred cred;
    struct scan s;
    const char *iter, *salt, *stored, *server;
    size_t iter_n, salt_n, stored_n, server_n, n;
    int rv = TERN_EMALFORMED;

    memset(&cred, 0, sizeof cred);
    if (text == NULL || len > AUTH_SCRAM_CRED_TEXT_MAX || len < plen ||
        first_bad_byte(text, len, 0x21) < len ||
        memcmp(text, SCRAM__TEXT_PREFIX, plen) != 0) {
        tern_errmsg_printf(errmsg,
                           "scram credential: expected "
                           "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:"
                           "<ServerKey> in at most %d printable bytes",
                           AUTH_SCRAM_CRED_TEXT_MAX);
        return TERN_EMALFORMED;
    }
    s.p = text + plen;
    s.end = text + len;
    if (!text_field(&s, ':', &iter, &iter_n) ||
        !text_field(&s, '$', &salt, &salt_n) ||
        !text_field(&s, ':', &stored, &stored_n) ||
        !text_field(&s, 0, &server, &server_n)) {
        tern_errmsg_printf(errmsg, "scram credential: missing field");
        goto out;
    }
    if (parse_u32(iter, iter_n, &cred.iterations) != 0) {
        tern_errmsg_printf(errmsg, "scram credential: bad iteration count");
        goto out;
    }
    if (b64_decode(salt, salt_n, cred.salt, sizeof cred.salt, &n) != 0) {
        tern_errmsg_printf(errmsg, "scram credential: bad base64 salt");
        goto out;
    }
    cred.salt_len = (uint8_t)n;
    if (b64_decode(stored, stored_n, cred.stored_key, AUTH_SCRAM_KEY_SIZE,
                   &n) != 0 ||
        n != AUTH_SCRAM_KEY_SIZE ||
        b64_decode(server, server_n, cred.server_key, AUTH_SCRAM_KEY_SIZE,
                   &n) != 0 ||
        n != AUTH_SCRAM_KEY_SIZE) {
        tern_errmsg_printf(errmsg,
                           "scram credential: StoredKey and ServerKey must "
                           "be %d bytes in base64",
                           AUTH_SCRAM_KEY_SIZE);
        goto out;
    }
    if (cred_check(&cred, errmsg) != 0) {
        goto out;
    }
    *out = cred;
    rv = 0;
out:
    auth_wipe(&cred, sizeof cred);
    return rv;
}

/* ---- Client ------------------------------------------------------------- */

enum scram_client_state {
    SCRAM_CLIENT_INIT,
    SCRAM_CLIENT_FIRST_SENT,
    SCRAM_CLIENT_FINAL_SENT,
    SCRAM_CLIENT_DONE,
    SCRAM_CLIENT_FAILED,
};

struct auth_scram_client
{
    enum scram_client_state state;
    uint32_t max_iterations;
    bool nonce_fixed;
    size_t nonce_len;
    char nonce[AUTH_SCRAM_NONCE_MAX + 1];
    char user[AUTH_SCRAM_USER_MAX + 1];
    size_t password_len;
    char password[AUTH_SCRAM_PASSWORD_MAX + 1]; /* wiped after step 2 */
    size_t first_len;               /* client-first, gs2 header included */
    char first[AUTH_SCRAM_MSG_MAX]; /* bare part starts at first + 3 */
    size_t final_len;
    char final[AUTH_SCRAM_MSG_MAX];
    uint8_t server_signature[AUTH_SCRAM_KEY_SIZE]; /* expected in step 3 */
};

#define SCRAM__GS2_HEADER     "n,,"
#define SCRAM__GS2_HEADER_B64 "biws"

int auth_scram_client_new(const char *user,
                          const char *password,
                          uint32_t max_iterations,
                          struct auth_scram_client **out,
                          char *errmsg)
{
    struct auth_scram_client *c;
    size_t password_len = 0;
    int rv;

    if (user == NULL || password == NULL || out == NULL) {
        tern_errmsg_printf(errmsg, "scram client: missing argument");
        return TERN_EINVAL;
    }
    rv = check_user(user, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = check_password(password, &password_len, errmsg);
    if (rv != 0) {
        return rv;
    }
    c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        tern_errmsg_printf(errmsg, "scram client: out of memory");
        return -ENOMEM;
    }
    if (max_iterations == 0 || max_iterations > AUTH_SCRAM_ITER_MAX) {
        max_iterations = AUTH_SCRAM_ITER_MAX;
    }
    if (max_iterations < AUTH_SCRAM_ITER_MIN) {
        max_iterations = AUTH_SCRAM_ITER_MIN;
    }
    c->state = SCRAM_CLIENT_INIT;
    c->max_iterations = max_iterations;
    memcpy(c->user, user, strlen(user) + 1);
    memcpy(c->password, password, password_len);
    c->password_len = password_len;
    *out = c;
    return 0;
}

void auth_scram_client_free(struct auth_scram_client *c)
{
    if (c == NULL) {
        return;
    }
    auth_wipe(c, sizeof *c);
    tern_free(c);
}

int auth_scram_client_test_nonce(struct auth_scram_client *c,
                                 const char *nonce,
                                 char *errmsg)
{
    if (c->state != SCRAM_CLIENT_INIT || nonce == NULL) {
        tern_errmsg_printf(errmsg, "scram client: nonce set out of order");
        return TERN_EINVAL;
    }
    return nonce_set(nonce, c->nonce, &c->nonce_len, &c->nonce_fixed, errmsg);
}

/* saslname: ',' as "=2C", '=' as "=3D". */
static void sbuf_saslname(struct sbuf *b, const char *name)
{
    for (; *name != '\0'; name++) {
        if (*name == ',') {
            sbuf_str(b, "=2C");
        } else if (*name == '=') {
            sbuf_str(b, "=3D");
        } else {
            sbuf_put(b, name, 1);
        }
    }
}

static int client_fail(struct auth_scram_client *c, int rv)
{
    c->state = SCRAM_CLIENT_FAILED;
    auth_wipe(c->password, sizeof c->password);
    auth_wipe(c->server_signature, sizeof c->server_signature);
    return rv;
}

int auth_scram_client_first(struct auth_scram_client *c,
                            const char **msg,
                            size_t *msg_len,
                            char *errmsg)
{
    struct sbuf b;
    int rv;

    if (c->state != SCRAM_CLIENT_INIT) {
        tern_errmsg_printf(errmsg, "scram client: first message out of order");
        return TERN_EINVAL;
    }
    if (!c->nonce_fixed) {
        rv = nonce_make(SCRAM__CLIENT_NONCE, c->nonce, &c->nonce_len, errmsg);
        if (rv != 0) {
            return client_fail(c, rv);
        }
    }
    sbuf_init(&b, c->first, sizeof c->first);
    sbuf_str(&b, SCRAM__GS2_HEADER "n=");
    sbuf_saslname(&b, c->user);
    sbuf_str(&b, ",r=");
    sbuf_put(&b, c->nonce, c->nonce_len);
    TERN_INVARIANT(!b.overflow); /* bounded by USER_MAX and NONCE_MAX */
    c->first_len = b.len;
    c->state = SCRAM_CLIENT_FIRST_SENT;
    *msg = c->first;
    *msg_len = c->first_len;
    return 0;
}

/* A peer's "e=" value into errmsg, bounded. */
static void report_server_error(const char *what,
                                const char *v,
                                size_t n,
                                char *errmsg)
{
    tern_errmsg_printf(errmsg, "scram %s: server refused: %.*s", what,
                       (int)TERN_MIN(n, (size_t)SCRAM__ERR_VALUE_SHOW), v);
}

int auth_scram_client_final(struct auth_scram_client *c,
                            const char *server_first,
                            size_t len,
                            const char **msg,
                            size_t *msg_len,
                            char *errmsg)
{
    static const char what[] = "server-first-message";
    uint8_t client_key[AUTH_SCRAM_KEY_SIZE];
    uint8_t stored_key[AUTH_SCRAM_KEY_SIZE];
    uint8_t server_key[AUTH_SCRAM_KEY_SIZE];
    uint8_t signature[AUTH_SCRAM_KEY_SIZE];
    uint8_t salt[AUTH_SCRAM_SALT_MAX];
    size_t salt_len = 0;
    uint32_t iterations = 0;
    const char *r, *sv, *iv, *ev;
    size_t r_n, s_n, i_n, e_n, without_proof;
    struct scan s;
    struct sbuf b;
    int rv;

    if (c->state != SCRAM_CLIENT_FIRST_SENT) {
        tern_errmsg_printf(errmsg, "scram client: final message out of order");
        return TERN_EINVAL;
    }
    rv = check_message(what, server_first, len, errmsg);
    if (rv != 0) {
        return client_fail(c, rv);
    }
    s.p = server_first;
    s.end = server_first + len;
    if (scan_attr(&s, 'e', &ev, &e_n)) {
        report_server_error(what, ev, e_n, errmsg);
        return client_fail(c, TERN_EAUTH);
    }
    rv = TERN_EMALFORMED;
    if (scan_attr(&s, 'm', &ev, &e_n)) {
        tern_errmsg_printf(errmsg,
                           "scram %s: mandatory extension not "
                           "supported",
                           what);
        goto fail;
    }
    if (!scan_attr(&s, 'r', &r, &r_n) || !scan_comma(&s) ||
        !scan_attr(&s, 's', &sv, &s_n) || !scan_comma(&s) ||
        !scan_attr(&s, 'i', &iv, &i_n)) {
        tern_errmsg_printf(errmsg, "scram %s: expected r=,s=,i=", what);
        goto fail;
    }
    if (!scan_done(&s)) {
        tern_errmsg_printf(errmsg, "scram %s: extensions not supported", what);
        goto fail;
    }
    if (r_n <= c->nonce_len || r_n > (size_t)2 * AUTH_SCRAM_NONCE_MAX ||
        memcmp(r, c->nonce, c->nonce_len) != 0) {
        tern_errmsg_printf(errmsg,
                           "scram %s: the server's nonce does not extend "
                           "ours (or is longer than %d bytes)",
                           what, 2 * AUTH_SCRAM_NONCE_MAX);
        goto fail;
    }
    if (b64_decode(sv, s_n, salt, sizeof salt, &salt_len) != 0 ||
        salt_len < AUTH_SCRAM_SALT_MIN) {
        tern_errmsg_printf(errmsg,
                           "scram %s: salt is not %d..%d bytes of base64", what,
                           AUTH_SCRAM_SALT_MIN, AUTH_SCRAM_SALT_MAX);
        goto fail;
    }
    if (parse_u32(iv, i_n, &iterations) != 0 ||
        iterations < AUTH_SCRAM_ITER_MIN || iterations > c->max_iterations) {
        tern_errmsg_printf(errmsg,
                           "scram %s: iteration count '%.*s' not in %d..%u",
                           what, (int)TERN_MIN(i_n, (size_t)16), iv,
                           AUTH_SCRAM_ITER_MIN, (unsigned)c->max_iterations);
        goto fail;
    }

    /* client-final-message-without-proof, then the proof. */
    sbuf_init(&b, c->final, sizeof c->final);
    sbuf_str(&b, "c=" SCRAM__GS2_HEADER_B64 ",r=");
    sbuf_put(&b, r, r_n);
    without_proof = b.len;
    rv = derive_keys(c->password, c->password_len, salt, salt_len, iterations,
                     client_key, stored_key, server_key, errmsg);
    if (rv != 0) {
        goto wipe;
    }
    rv = TERN_EINTERNAL;
    if (hmac_auth_message(stored_key, c->first + 3, c->first_len - 3,
                          server_first, len, c->final, without_proof,
                          signature) != 0 ||
        hmac_auth_message(server_key, c->first + 3, c->first_len - 3,
                          server_first, len, c->final, without_proof,
                          c->server_signature) != 0) {
        tern_errmsg_printf(errmsg, "scram client: HMAC failed");
        goto wipe;
    }
    for (size_t k = 0; k < AUTH_SCRAM_KEY_SIZE; k++) {
        client_key[k] ^= signature[k]; /* now ClientProof */
    }
    sbuf_str(&b, ",p=");
    sbuf_b64(&b, client_key, AUTH_SCRAM_KEY_SIZE);
    TERN_INVARIANT(!b.overflow); /* r_n <= 2 * NONCE_MAX */
    c->final_len = b.len;
    rv = 0;
wipe:
    auth_wipe(client_key, sizeof client_key);
    auth_wipe(stored_key, sizeof stored_key);
    auth_wipe(server_key, sizeof server_key);
    auth_wipe(signature, sizeof signature);
    auth_wipe(c->password, sizeof c->password);
    c->password_len = 0;
    if (rv != 0) {
        return client_fail(c, rv);
    }
    c->state = SCRAM_CLIENT_FINAL_SENT;
    *msg = c->final;
    *msg_len = c->final_len;
    return 0;
fail:
    return client_fail(c, rv);
}

int auth_scram_client_verify(struct auth_scram_client *c,
                             const char *server_final,
                             size_t len,
                             char *errmsg)
{
    static const char what[] = "server-final-message";
    uint8_t signature[AUTH_SCRAM_KEY_SIZE];
    const char *v;
    size_t n, sig_len = 0;
    struct scan s;
    int rv;

    if (c->state != SCRAM_CLIENT_FINAL_SENT) {
        tern_errmsg_printf(errmsg, "scram client: verify out of order");
        return TERN_EINVAL;
    }
    rv = check_message(what, server_final, len, errmsg);
    if (rv != 0) {
        return client_fail(c, rv);
    }
    s.p = server_final;
    s.end = server_final + len;
    if (scan_attr(&s, 'e', &v, &n)) {
        report_server_error(what, v, n, errmsg);
        return client_fail(c, TERN_EAUTH);
    }
    if (!scan_attr(&s, 'v', &v, &n) || !scan_done(&s) ||
        b64_decode(v, n, signature, sizeof signature, &sig_len) != 0 ||
        sig_len != AUTH_SCRAM_KEY_SIZE) {
        tern_errmsg_printf(errmsg,
                           "scram %s: expected v=<base64 of %d bytes> and "
                           "nothing else",
                           what, AUTH_SCRAM_KEY_SIZE);
        return client_fail(c, TERN_EMALFORMED);
    }
    if (!auth_equal(signature, c->server_signature, AUTH_SCRAM_KEY_SIZE)) {
        tern_errmsg_printf(errmsg,
                           "scram %s: wrong server signature: the server "
                           "does not hold this user's credential",
                           what);
        return client_fail(c, TERN_EAUTH);
    }
    auth_wipe(c->server_signature, sizeof c->server_signature);
    c->state = SCRAM_CLIENT_DONE;
    return 0;
}

/* ---- Server ------------------------------------------------------------- */

enum scram_server_state {
    SCRAM_SERVER_INIT,
    SCRAM_SERVER_STARTED,
    SCRAM_SERVER_FIRST_SENT,
    SCRAM_SERVER_DONE,
    SCRAM_SERVER_FAILED,
};

struct auth_scram_server
{
    enum scram_server_state state;
    uint8_t fake_key[AUTH_SCRAM_KEY_SIZE];
    uint32_t fake_iterations;
    bool unknown_user; /* cred is the fake one: refuse at the end */
    bool nonce_fixed;
    char user[AUTH_SCRAM_USER_MAX + 1];
    size_t cnonce_len;
    char cnonce[AUTH_SCRAM_NONCE_MAX + 1];
    size_t snonce_len;
    char snonce[AUTH_SCRAM_NONCE_MAX + 1];
    size_t gs2_len;                        /* client_first[0..gs2_len) */
    size_t client_first_len;               /* bare part after gs2 */
    char client_first[AUTH_SCRAM_MSG_MAX]; /* a copy, as received */
    struct auth_scram_cred cred;
    size_t first_len;
    char first[AUTH_SCRAM_MSG_MAX];
    size_t reply_len;
    char reply[AUTH_SCRAM_MSG_MAX]; /* "v=..." or "e=..." */
};

int auth_scram_server_new(const uint8_t fake_key[AUTH_SCRAM_KEY_SIZE],
                          uint32_t iterations,
                          struct auth_scram_server **out,
                          char *errmsg)
{
    struct auth_scram_server *s;

    if (fake_key == NULL || out == NULL) {
        tern_errmsg_printf(errmsg, "scram server: missing argument");
        return TERN_EINVAL;
    }
    if (iterations == 0) {
        iterations = AUTH_SCRAM_ITER_DEFAULT;
    }
    if (iterations < AUTH_SCRAM_ITER_MIN || iterations > AUTH_SCRAM_ITER_MAX) {
        tern_errmsg_printf(errmsg, "scram server: %u iterations, not %d..%d",
                           (unsigned)iterations, AUTH_SCRAM_ITER_MIN,
                           AUTH_SCRAM_ITER_MAX);
        return TERN_EINVAL;
    }
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        tern_errmsg_printf(errmsg, "scram server: out of memory");
        return -ENOMEM;
    }
    s->state = SCRAM_SERVER_INIT;
    memcpy(s->fake_key, fake_key, AUTH_SCRAM_KEY_SIZE);
    s->fake_iterations = iterations;
    *out = s;
    return 0;
}

void auth_scram_server_free(struct auth_scram_server *s)
{
    if (s == NULL) {
        return;
    }
    auth_wipe(s, sizeof *s);
    tern_free(s);
}

int auth_scram_server_test_nonce(struct auth_scram_server *s,
                                 const char *nonce,
                                 char *errmsg)
{
    if (s->state == SCRAM_SERVER_FIRST_SENT || s->state == SCRAM_SERVER_DONE ||
        s->state == SCRAM_SERVER_FAILED || nonce == NULL) {
        tern_errmsg_printf(errmsg, "scram server: nonce set out of order");
        return TERN_EINVAL;
    }
    return nonce_set(nonce, s->snonce, &s->snonce_len, &s->nonce_fixed, errmsg);
}

/* Fail the exchange; `e` is the RFC 5802 server-error-value to send. */
static int server_fail(struct auth_scram_server *s,
                       int rv,
                       const char *e,
                       const char **reply,
                       size_t *reply_len)
{
    struct sbuf b;

    s->state = SCRAM_SERVER_FAILED;
    auth_wipe(&s->cred, sizeof s->cred);
    sbuf_init(&b, s->reply, sizeof s->reply);
    sbuf_str(&b, "e=");
    sbuf_str(&b, e);
    s->reply_len = b.len;
    if (reply != NULL) {
        *reply = s->reply;
    }
    if (reply_len != NULL) {
        *reply_len = s->reply_len;
    }
    return rv;
}

/* Unescape a saslname into out (cap bytes incl. NUL). 0 or -1. */
static int saslname_decode(const char *v, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (ch == '=') {
            if (n - i < 3) {
                return -1;
            }
            if (v[i + 1] == '2' && v[i + 2] == 'C') {
                ch = ',';
            } else if (v[i + 1] == '3' && v[i + 2] == 'D') {
                ch = '=';
            } else {
                return -1;
            }
            i += 2;
        }
        if (o + 1 >= cap) {
            return -1;
        }
        out[o++] = ch;
    }
    if (o == 0) {
        return -1;
    }
    out[o] = '\0';
    return 0;
}

int auth_scram_server_start(struct auth_scram_server *s,
                            const char *client_first,
                            size_t len,
                            const char **user,
                            const char **reply,
                            size_t *reply_len,
                            char *errmsg)
{
    static const char what[] = "client-first-message";
    char authzid[AUTH_SCRAM_USER_MAX + 1];
    const char *v;
    size_t n;
    struct scan sc;
    bool has_authzid = false;
    int rv;

    if (reply != NULL) {
        *reply = NULL;
    }
    if (s->state != SCRAM_SERVER_INIT) {
        tern_errmsg_printf(errmsg, "scram server: start out of order");
        return TERN_EINVAL;
    }
    rv = check_message(what, client_first, len, errmsg);
    if (rv != 0) {
        return server_fail(s, rv, "invalid-encoding", reply, reply_len);
    }
    sc.p = client_first;
    sc.end = client_first + len;
    /* gs2-cbind-flag: "n" (client cannot bind), "y" (client could, and
     * believes the server cannot: true, tern offers no -PLUS mechanism,
     * so there is no downgrade to detect), "p=" (binding required). */
    if (scan_attr(&sc, 'p', &v, &n)) {
        tern_errmsg_printf(errmsg,
                           "scram %s: channel binding requested, not "
                           "supported",
                           what);
        return server_fail(s, TERN_EAUTH, "channel-binding-not-supported",
                           reply, reply_len);
    }
    if (sc.end - sc.p < 2 || (sc.p[0] != 'n' && sc.p[0] != 'y') ||
        sc.p[1] != ',') {
        tern_errmsg_printf(errmsg, "scram %s: expected gs2 header n,, or y,,",
                           what);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    sc.p += 2;
    if (scan_attr(&sc, 'a', &v, &n)) {
        if (saslname_decode(v, n, authzid, sizeof authzid) != 0) {
            tern_errmsg_printf(errmsg, "scram %s: bad authzid", what);
            return server_fail(s, TERN_EMALFORMED, "invalid-username-encoding",
                               reply, reply_len);
        }
        has_authzid = true;
    }
    if (!scan_comma(&sc)) {
        tern_errmsg_printf(errmsg, "scram %s: gs2 header not closed", what);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    s->gs2_len = (size_t)(sc.p - client_first);
    if (scan_attr(&sc, 'm', &v, &n)) {
        tern_errmsg_printf(errmsg,
                           "scram %s: mandatory extension not "
                           "supported",
                           what);
        return server_fail(s, TERN_EAUTH, "extensions-not-supported", reply,
                           reply_len);
    }
    if (!scan_attr(&sc, 'n', &v, &n)) {
        tern_errmsg_printf(errmsg, "scram %s: expected n=", what);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    if (saslname_decode(v, n, s->user, sizeof s->user) != 0) {
        tern_errmsg_printf(errmsg,
                           "scram %s: username is not 1..%d bytes with ',' "
                           "and '=' escaped",
                           what, AUTH_SCRAM_USER_MAX);
        return server_fail(s, TERN_EMALFORMED, "invalid-username-encoding",
                           reply, reply_len);
    }
    if (!scan_comma(&sc) || !scan_attr(&sc, 'r', &v, &n)) {
        tern_errmsg_printf(errmsg, "scram %s: expected r=", what);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    if (!nonce_valid(v, n)) {
        tern_errmsg_printf(errmsg, "scram %s: nonce is not 1..%d bytes", what,
                           AUTH_SCRAM_NONCE_MAX);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    memcpy(s->cnonce, v, n);
    s->cnonce[n] = '\0';
    s->cnonce_len = n;
    if (!scan_done(&sc)) {
        bool ext = scan_comma(&sc) && scan_at_attr(&sc);
        tern_errmsg_printf(errmsg, "scram %s: %s after r=", what,
                           ext ? "extensions not supported" : "bytes");
        return server_fail(
            s, ext ? TERN_EAUTH : TERN_EMALFORMED,
            ext ? "extensions-not-supported" : "invalid-encoding", reply,
            reply_len);
    }
    if (has_authzid && strcmp(authzid, s->user) != 0) {
        tern_errmsg_printf(errmsg,
                           "scram %s: acting as another user (authzid) is "
                           "not supported",
                           what);
        return server_fail(s, TERN_EAUTH, "other-error", reply, reply_len);
    }
    memcpy(s->client_first, client_first, len);
    s->client_first_len = len;
    s->state = SCRAM_SERVER_STARTED;
    *user = s->user;
    return 0;
}

/* HMAC(fake_key, label NUL user): labels differ before their NUL. */
static int fake_mac(const struct auth_scram_server *s,
                    const char *label,
                    uint8_t out[AUTH_SCRAM_KEY_SIZE])
{
    struct auth_iov iov[2] = {
        {label, strlen(label) + 1},
        {s->user, strlen(s->user)},
    };

    return auth_hmac(s->fake_key, AUTH_SCRAM_KEY_SIZE, iov, 2, out);
}

int auth_scram_server_first(struct auth_scram_server *s,
                            const struct auth_scram_cred *cred,
                            const char **msg,
                            size_t *msg_len,
                            char *errmsg)
{
    uint8_t salt[AUTH_SCRAM_KEY_SIZE];
    struct sbuf b;
    int rv;

    if (s->state != SCRAM_SERVER_STARTED) {
        tern_errmsg_printf(errmsg, "scram server: first message out of order");
        return TERN_EINVAL;
    }
    if (cred != NULL) {
        rv = cred_check(cred, errmsg);
        if (rv != 0) {
            tern_errmsg_wrapf(errmsg, "scram server: user %s", s->user);
            return server_fail(s, rv, "other-error", NULL, NULL);
        }
        s->cred = *cred;
        s->unknown_user = false;
    } else {
        /* Same salt size and count as auth_scram_cred_make gives, fixed
         * per user, keys nobody can match (and refused anyway). */
        memset(&s->cred, 0, sizeof s->cred);
        s->cred.iterations = s->fake_iterations;
        s->cred.salt_len = AUTH_SCRAM_SALT_DEFAULT;
        if (fake_mac(s, "tern scram fake salt", salt) != 0 ||
            fake_mac(s, "tern scram fake stored key", s->cred.stored_key) !=
                0 ||
            fake_mac(s, "tern scram fake server key", s->cred.server_key) !=
                0) {
            tern_errmsg_printf(errmsg, "scram server: HMAC failed");
            return server_fail(s, TERN_EINTERNAL, "other-error", NULL, NULL);
        }
        memcpy(s->cred.salt, salt, AUTH_SCRAM_SALT_DEFAULT);
        auth_wipe(salt, sizeof salt);
        s->unknown_user = true;
    }
    if (!s->nonce_fixed) {
        rv = nonce_make(SCRAM__SERVER_NONCE, s->snonce, &s->snonce_len, errmsg);
        if (rv != 0) {
            return server_fail(s, rv, "other-error", NULL, NULL);
        }
    }
    sbuf_init(&b, s->first, sizeof s->first);
    sbuf_str(&b, "r=");
    sbuf_put(&b, s->cnonce, s->cnonce_len);
    sbuf_put(&b, s->snonce, s->snonce_len);
    sbuf_str(&b, ",s=");
    sbuf_b64(&b, s->cred.salt, s->cred.salt_len);
    sbuf_str(&b, ",i=");
    sbuf_u32(&b, s->cred.iterations);
    TERN_INVARIANT(!b.overflow); /* bounded by NONCE_MAX and SALT_MAX */
    s->first_len = b.len;
    s->state = SCRAM_SERVER_FIRST_SENT;
    *msg = s->first;
    *msg_len = s->first_len;
    return 0;
}

int auth_scram_server_final(struct auth_scram_server *s,
                            const char *client_final,
                            size_t len,
                            const char **reply,
                            size_t *reply_len,
                            char *errmsg)
{
    static const char what[] = "client-final-message";
    char cbind[AUTH_SCRAM_MSG_MAX];
    uint8_t proof[AUTH_SCRAM_KEY_SIZE];
    uint8_t signature[AUTH_SCRAM_KEY_SIZE];
    uint8_t server_signature[AUTH_SCRAM_KEY_SIZE];
    uint8_t hashed[AUTH_SCRAM_KEY_SIZE];
    const char *v;
    size_t n, proof_len = 0, without_proof;
    struct scan sc;
    struct sbuf b;
    bool ok;
    int rv;

    if (reply != NULL) {
        *reply = NULL;
    }
    if (s->state != SCRAM_SERVER_FIRST_SENT) {
        tern_errmsg_printf(errmsg, "scram server: final message out of order");
        return TERN_EINVAL;
    }
    rv = check_message(what, client_final, len, errmsg);
    if (rv != 0) {
        return server_fail(s, rv, "invalid-encoding", reply, reply_len);
    }
    sc.p = client_final;
    sc.end = client_final + len;
    if (!scan_attr(&sc, 'c', &v, &n) || !scan_comma(&sc)) {
        tern_errmsg_printf(errmsg, "scram %s: expected c=", what);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    /* c= must carry the gs2 header of client-first, byte for byte (no
     * channel binding data follows it since none is supported). */
    TERN_INVARIANT(b64_len(s->gs2_len) <= sizeof cbind);
    b64_encode((const uint8_t *)s->client_first, s->gs2_len, cbind);
    if (n != b64_len(s->gs2_len) || memcmp(v, cbind, n) != 0) {
        tern_errmsg_printf(errmsg,
                           "scram %s: c= does not repeat the gs2 header", what);
        return server_fail(s, TERN_EAUTH, "channel-bindings-dont-match", reply,
                           reply_len);
    }
    if (!scan_attr(&sc, 'r', &v, &n) || !scan_comma(&sc)) {
        tern_errmsg_printf(errmsg, "scram %s: expected r=", what);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }
    if (n != s->cnonce_len + s->snonce_len ||
        memcmp(v, s->cnonce, s->cnonce_len) != 0 ||
        memcmp(v + s->cnonce_len, s->snonce, s->snonce_len) != 0) {
        tern_errmsg_printf(errmsg, "scram %s: nonce differs from ours", what);
        return server_fail(s, TERN_EAUTH, "other-error", reply, reply_len);
    }
    without_proof = (size_t)(sc.p - client_final) - 1;
    if (!scan_attr(&sc, 'p', &v, &n)) {
        bool ext = scan_at_attr(&sc);
        tern_errmsg_printf(errmsg, "scram %s: %s", what,
                           ext ? "extensions not supported" : "expected p=");
        return server_fail(
            s, ext ? TERN_EAUTH : TERN_EMALFORMED,
            ext ? "extensions-not-supported" : "invalid-encoding", reply,
            reply_len);
    }
    if (!scan_done(&sc) ||
        b64_decode(v, n, proof, sizeof proof, &proof_len) != 0 ||
        proof_len != AUTH_SCRAM_KEY_SIZE) {
        tern_errmsg_printf(errmsg,
                           "scram %s: p= is not %d bytes of base64, last", what,
                           AUTH_SCRAM_KEY_SIZE);
        return server_fail(s, TERN_EMALFORMED, "invalid-encoding", reply,
                           reply_len);
    }

    /* ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); the proof
     * holds iff H(ClientKey) == StoredKey. The same work runs for an
     * unknown user, whose fake credential is refused after the check. */
    rv = TERN_EINTERNAL;
    if (hmac_auth_message(s->cred.stored_key, s->client_first + s->gs2_len,
                          s->client_first_len - s->gs2_len, s->first,
                          s->first_len, client_final, without_proof,
                          signature) != 0 ||
        hmac_auth_message(s->cred.server_key, s->client_first + s->gs2_len,
                          s->client_first_len - s->gs2_len, s->first,
                          s->first_len, client_final, without_proof,
                          server_signature) != 0) {
        tern_errmsg_printf(errmsg, "scram server: HMAC failed");
        goto wipe;
    }
    for (size_t k = 0; k < AUTH_SCRAM_KEY_SIZE; k++) {
        proof[k] ^= signature[k]; /* now ClientKey */
    }
    if (sha256(proof, sizeof proof, hashed) != 0) {
        tern_errmsg_printf(errmsg, "scram server: SHA-256 failed");
        goto wipe;
    }
    ok = auth_equal(hashed, s->cred.stored_key, AUTH_SCRAM_KEY_SIZE);
    if (!ok || s->unknown_user) {
        tern_errmsg_printf(errmsg, "scram: user %s: %s", s->user,
                           s->unknown_user ? "no such user"
                                           : "wrong password (invalid proof)");
        rv = TERN_EAUTH;
        goto wipe;
    }
    sbuf_init(&b, s->reply, sizeof s->reply);
    sbuf_str(&b, "v=");
    sbuf_b64(&b, server_signature, AUTH_SCRAM_KEY_SIZE);
    TERN_INVARIANT(!b.overflow);
    s->reply_len = b.len;
    rv = 0;
wipe:
    auth_wipe(proof, sizeof proof);
    auth_wipe(signature, sizeof signature);
    auth_wipe(server_signature, sizeof server_signature);
    auth_wipe(hashed, sizeof hashed);
    if (rv != 0) {
        return server_fail(s, rv,
                           rv == TERN_EAUTH ? "invalid-proof" : "other-error",
                           reply, reply_len);
    }
    auth_wipe(&s->cred, sizeof s->cred);
    s->state = SCRAM_SERVER_DONE;
    if (reply != NULL) {
        *reply = s->reply;
    }
    if (reply_len != NULL) {
        *reply_len = s->reply_len;
    }
    return 0;
}
