/* libFuzzer target: the SCRAM-SHA-256 parsers (auth/scram.c). The first
 * byte picks what the rest feeds; two messages are separated by the first
 * '\n' (a byte no SCRAM message may contain):
 *   0  server, known user:   client-first '\n' client-final
 *   1  server, unknown user: client-first '\n' client-final
 *   2  client:               server-first '\n' server-final
 *   3  stored credential, binary form (decode, then encode must agree)
 *   4  stored credential, text form (parse, then format must agree)
 * The server holds RFC 7677's credential and nonce and the client is
 * RFC 7677's, so the seed corpus's example exchange reaches the success
 * paths. The client allows only AUTH_SCRAM_ITER_MIN iterations, so one
 * input costs at most one short PBKDF2. Invariants beyond "no crash": a
 * failed server step names an "e=" reply, a success is only ever the
 * one that proves the password, outputs stay within AUTH_SCRAM_MSG_MAX,
 * and decoded credentials encode back to the same bytes. Build with
 * -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION so that the binary form's
 * checksum does not stop mutated inputs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"

#define RFC_CNONCE "rOprNGfwEbeRWgbNEkqO"
#define RFC_SNONCE "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"

static const uint8_t rfc_salt[16] = {0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12,
                                     0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14,
                                     0x12, 0x36, 0xfa, 0x81};
static const uint8_t fake_key[AUTH_SCRAM_KEY_SIZE] = {42};

static void check(bool ok)
{
    if (!ok) {
        abort();
    }
}

static const struct auth_scram_cred *rfc_cred(void)
{
    static struct auth_scram_cred cred;
    static bool ready;

    if (!ready) {
        check(auth_scram_cred_derive("pencil", rfc_salt, sizeof rfc_salt, 4096,
                                     &cred, NULL) == 0);
        ready = true;
    }
    return &cred;
}

static void split(const uint8_t *data,
                  size_t size,
                  const char **a,
                  size_t *a_len,
                  const char **b,
                  size_t *b_len)
{
    const uint8_t *nl = memchr(data, '\n', size);

    *a = (const char *)data;
    if (nl == NULL) {
        *a_len = size;
        *b = (const char *)data + size;
        *b_len = 0;
        return;
    }
    *a_len = (size_t)(nl - data);
    *b = (const char *)nl + 1;
    *b_len = size - *a_len - 1;
}

static void check_reply(const char *reply, size_t len, const char *prefix)
{
    check(reply != NULL && len >= 3 && len <= AUTH_SCRAM_MSG_MAX &&
          memcmp(reply, prefix, 2) == 0);
}

static void fuzz_server(const char *a,
                        size_t a_len,
                        const char *b,
                        size_t b_len,
                        bool known)
{
    struct auth_scram_server *s = NULL;
    const char *user = NULL, *reply = NULL, *msg = NULL;
    size_t reply_len = 0, msg_len = 0;
    int rc;

    check(auth_scram_server_new(fake_key, 0, &s, NULL) == 0);
    check(auth_scram_server_test_nonce(s, RFC_SNONCE, NULL) == 0);
    rc = auth_scram_server_start(s, a, a_len, &user, &reply, &reply_len, NULL);
    if (rc != 0) {
        check(rc == TERN_EMALFORMED || rc == TERN_EAUTH);
        check_reply(reply, reply_len, "e=");
        goto out;
    }
    check(user != NULL && strlen(user) >= 1 &&
          strlen(user) <= AUTH_SCRAM_USER_MAX);
    rc = auth_scram_server_first(s, known ? rfc_cred() : NULL, &msg, &msg_len,
                                 NULL);
    check(rc == 0 && msg_len <= AUTH_SCRAM_MSG_MAX &&
          memcmp(msg, "r=", 2) == 0);
    rc = auth_scram_server_final(s, b, b_len, &reply, &reply_len, NULL);
    if (rc == 0) {
        /* Only the password's owner gets here: the RFC's client. */
        check(known && strcmp(user, "user") == 0);
        check_reply(reply, reply_len, "v=");
    } else {
        check(rc == TERN_EMALFORMED || rc == TERN_EAUTH);
        check_reply(reply, reply_len, "e=");
    }
out:
    auth_scram_server_free(s);
}

static void fuzz_client(const char *a,
                        size_t a_len,
                        const char *b,
                        size_t b_len)
{
    struct auth_scram_client *c = NULL;
    const char *msg = NULL;
    size_t msg_len = 0;
    int rc;

    check(auth_scram_client_new("user", "pencil", AUTH_SCRAM_ITER_MIN, &c,
                                NULL) == 0);
    check(auth_scram_client_test_nonce(c, RFC_CNONCE, NULL) == 0);
    check(auth_scram_client_first(c, &msg, &msg_len, NULL) == 0);
    rc = auth_scram_client_final(c, a, a_len, &msg, &msg_len, NULL);
    if (rc != 0) {
        check(rc == TERN_EMALFORMED || rc == TERN_EAUTH);
        goto out;
    }
    check(msg_len <= AUTH_SCRAM_MSG_MAX && memcmp(msg, "c=biws,r=", 9) == 0);
    rc = auth_scram_client_verify(c, b, b_len, NULL);
    check(rc == 0 || rc == TERN_EMALFORMED || rc == TERN_EAUTH);
out:
    auth_scram_client_free(c);
}

static void fuzz_cred_binary(const uint8_t *data, size_t size)
{
    struct auth_scram_cred cred;
    uint8_t buf[AUTH_SCRAM_CRED_ENC_MAX];
    size_t len = 0;
    int rc = auth_scram_cred_decode(data, size, &cred, NULL);

    if (rc != 0) {
        check(rc == TERN_EMALFORMED || rc == TERN_ECORRUPT ||
              rc == TERN_EVERSION);
        return;
    }
    check(auth_scram_cred_encode(&cred, buf, sizeof buf, &len, NULL) == 0);
    /* The last 4 bytes are the checksum, which fuzz builds do not check. */
    check(len == size && memcmp(buf, data, len - 4) == 0);
}

static void fuzz_cred_text(const char *text, size_t size)
{
    struct auth_scram_cred cred;
    char buf[AUTH_SCRAM_CRED_TEXT_MAX];
    int rc = auth_scram_cred_parse(text, size, &cred, NULL);

    if (rc != 0) {
        check(rc == TERN_EMALFORMED);
        return;
    }
    /* One text per credential: formatting gives back the same bytes. */
    check(auth_scram_cred_format(&cred, buf, sizeof buf, NULL) == 0);
    check(strlen(buf) == size && memcmp(buf, text, size) == 0);
}

/* libFuzzer's entry point, named by libFuzzer.
 * NOLINTNEXTLINE(readability-identifier-naming) */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *a, *b;
    size_t a_len, b_len;

    if (size < 1) {
        return 0;
    }
    split(data + 1, size - 1, &a, &a_len, &b, &b_len);
    switch (data[0] % 5) {
    case 0:
        fuzz_server(a, a_len, b, b_len, true);
        break;
    case 1:
        fuzz_server(a, a_len, b, b_len, false);
        break;
    case 2:
        fuzz_client(a, a_len, b, b_len);
        break;
    case 3:
        fuzz_cred_binary(data + 1, size - 1);
        break;
    default:
        fuzz_cred_text((const char *)data + 1, size - 1);
        break;
    }
    return 0;
}
