/*
 * Unit tests of SCRAM-SHA-256 (auth/scram.c): RFC 7677's example exchange
 * byte for byte in both roles, round trips between the two state
 * machines, refusals (wrong password, tampered server signature, unknown
 * user), malformed messages on every parser, and the stored credential's
 * binary and text forms.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "auth.h"

/* RFC 7677 section 3. */
#define RFC_CNONCE       "rOprNGfwEbeRWgbNEkqO"
#define RFC_SNONCE       "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
#define RFC_SALT         "W22ZaJ0SNY7soEsUEjb6gQ=="
#define RFC_CLIENT_FIRST "n,,n=user,r=" RFC_CNONCE
#define RFC_SERVER_FIRST "r=" RFC_CNONCE RFC_SNONCE ",s=" RFC_SALT ",i=4096"
#define RFC_CLIENT_FINAL                                                       \
    "c=biws,r=" RFC_CNONCE RFC_SNONCE                                          \
    ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
#define RFC_SERVER_FINAL "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
/* The same credential in the text form (StoredKey and ServerKey computed
 * from the RFC's password and salt). */
#define RFC_CRED_TEXT                                                          \
    "SCRAM-SHA-256$4096:" RFC_SALT                                             \
    "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="                            \
    ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="

static const uint8_t rfc_salt[16] = {0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12,
                                     0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14,
                                     0x12, 0x36, 0xfa, 0x81};
static const uint8_t fake_key[AUTH_SCRAM_KEY_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8};

static char errmsg[TERN_ERRMSG_SIZE];

static void rfc_cred(struct auth_scram_cred *cred)
{
    cr_assert_eq(auth_scram_cred_derive("pencil", rfc_salt, sizeof rfc_salt,
                                        4096, cred, errmsg),
                 0, "%s", errmsg);
}

static bool cred_eq(const struct auth_scram_cred *a,
                    const struct auth_scram_cred *b)
{
    return a->iterations == b->iterations && a->salt_len == b->salt_len &&
           memcmp(a->salt, b->salt, a->salt_len) == 0 &&
           memcmp(a->stored_key, b->stored_key, AUTH_SCRAM_KEY_SIZE) == 0 &&
           memcmp(a->server_key, b->server_key, AUTH_SCRAM_KEY_SIZE) == 0;
}

static bool msg_is(const char *msg, size_t len, const char *want)
{
    return msg != NULL && len == strlen(want) && memcmp(msg, want, len) == 0;
}

/* A copy as a C string, for cr_assert messages and string checks. */
static const char *str(const char *msg, size_t len)
{
    static char buf[AUTH_SCRAM_MSG_MAX + 1];
    if (msg == NULL) {
        return "(null)";
    }
    memcpy(buf, msg, len);
    buf[len] = '\0';
    return buf;
}

TestSuite(auth_scram);

Test(auth_scram, rfc7677_credential)
{
    struct auth_scram_cred cred, parsed;
    char text[AUTH_SCRAM_CRED_TEXT_MAX];

    rfc_cred(&cred);
    cr_assert_eq(cred.iterations, 4096);
    cr_assert_eq(cred.salt_len, 16);
    cr_assert_eq(auth_scram_cred_format(&cred, text, sizeof text, errmsg), 0,
                 "%s", errmsg);
    cr_expect_str_eq(text, RFC_CRED_TEXT);
    cr_assert_eq(auth_scram_cred_parse(text, strlen(text), &parsed, errmsg), 0,
                 "%s", errmsg);
    cr_expect(cred_eq(&parsed, &cred));
}

Test(auth_scram, rfc7677_client_side)
{
    struct auth_scram_client *c;
    const char *msg;
    size_t len;

    cr_assert_eq(auth_scram_client_new("user", "pencil", 0, &c, errmsg), 0);
    cr_assert_eq(auth_scram_client_test_nonce(c, RFC_CNONCE, errmsg), 0);
    cr_assert_eq(auth_scram_client_first(c, &msg, &len, errmsg), 0);
    cr_expect(msg_is(msg, len, RFC_CLIENT_FIRST), "%s", str(msg, len));
    cr_assert_eq(
        auth_scram_client_final(c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
                                &msg, &len, errmsg),
        0, "%s", errmsg);
    cr_expect(msg_is(msg, len, RFC_CLIENT_FINAL), "%s", str(msg, len));
    cr_expect_eq(auth_scram_client_verify(c, RFC_SERVER_FINAL,
                                          strlen(RFC_SERVER_FINAL), errmsg),
                 0, "%s", errmsg);
    /* Done: nothing more to do. */
    cr_expect_eq(auth_scram_client_verify(c, RFC_SERVER_FINAL,
                                          strlen(RFC_SERVER_FINAL), errmsg),
                 TERN_EINVAL);
    auth_scram_client_free(c);
}

Test(auth_scram, rfc7677_server_side)
{
    struct auth_scram_server *s;
    struct auth_scram_cred cred;
    const char *user = NULL, *msg, *reply = NULL;
    size_t len, reply_len = 0;

    rfc_cred(&cred);
    cr_assert_eq(auth_scram_server_new(fake_key, 0, &s, errmsg), 0);
    cr_assert_eq(auth_scram_server_test_nonce(s, RFC_SNONCE, errmsg), 0);
    cr_assert_eq(
        auth_scram_server_start(s, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
                                &user, &reply, &reply_len, errmsg),
        0, "%s", errmsg);
    cr_assert_str_eq(user, "user");
    cr_assert_eq(auth_scram_server_first(s, &cred, &msg, &len, errmsg), 0, "%s",
                 errmsg);
    cr_expect(msg_is(msg, len, RFC_SERVER_FIRST), "%s", str(msg, len));
    cr_assert_eq(
        auth_scram_server_final(s, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
                                &reply, &reply_len, errmsg),
        0, "%s", errmsg);
    cr_expect(msg_is(reply, reply_len, RFC_SERVER_FINAL), "%s",
              str(reply, reply_len));
    auth_scram_server_free(s);
}

/* One full exchange between a client (user, password) and a server that
 * holds cred (NULL: unknown user). *client_rc is the client's verdict on
 * the server's final reply; returns the server's verdict. tamper flips a
 * bit of the server signature before the client sees it. */
struct outcome
{
    int server_rc;
    int client_rc;
    char server_first[AUTH_SCRAM_MSG_MAX + 1];
    char server_final[AUTH_SCRAM_MSG_MAX + 1];
    char client_err[TERN_ERRMSG_SIZE];
};

static void exchange(const char *user,
                     const char *password,
                     const struct auth_scram_cred *cred,
                     bool tamper,
                     struct outcome *o)
{
    struct auth_scram_client *c;
    struct auth_scram_server *s;
    const char *msg, *suser, *reply;
    size_t len, reply_len;
    char buf[AUTH_SCRAM_MSG_MAX];

    memset(o, 0, sizeof *o);
    cr_assert_eq(auth_scram_client_new(user, password, 0, &c, errmsg), 0, "%s",
                 errmsg);
    cr_assert_eq(auth_scram_server_new(fake_key, 0, &s, errmsg), 0);
    cr_assert_eq(auth_scram_client_first(c, &msg, &len, errmsg), 0);
    cr_assert_eq(auth_scram_server_start(s, msg, len, &suser, &reply,
                                         &reply_len, errmsg),
                 0, "%s", errmsg);
    cr_assert_str_eq(suser, user);
    cr_assert_eq(auth_scram_server_first(s, cred, &msg, &len, errmsg), 0);
    memcpy(o->server_first, msg, len);
    cr_assert_eq(auth_scram_client_final(c, msg, len, &msg, &len, errmsg), 0,
                 "%s", errmsg);
    o->server_rc =
        auth_scram_server_final(s, msg, len, &reply, &reply_len, errmsg);
    cr_assert_not_null(reply);
    memcpy(o->server_final, reply, reply_len);
    memcpy(buf, reply, reply_len);
    if (tamper) {
        /* Change one base64 digit of the signature (not the first, keep
         * the encoding canonical: the 4th char carries 6 full bits). */
        buf[5] = buf[5] == 'A' ? 'B' : 'A';
    }
    o->client_rc = auth_scram_client_verify(c, buf, reply_len, o->client_err);
    auth_scram_client_free(c);
    auth_scram_server_free(s);
}

Test(auth_scram, round_trip_random_nonces)
{
    struct auth_scram_cred cred;
    struct outcome a, b;

    cr_assert_eq(auth_scram_cred_make("correct horse battery staple", 5000,
                                      &cred, errmsg),
                 0, "%s", errmsg);
    cr_expect_eq(cred.iterations, 5000);
    exchange("alice", "correct horse battery staple", &cred, false, &a);
    cr_expect_eq(a.server_rc, 0, "%s", errmsg);
    cr_expect_eq(a.client_rc, 0, "%s", a.client_err);
    cr_expect_eq(strncmp(a.server_final, "v=", 2), 0);
    exchange("alice", "correct horse battery staple", &cred, false, &b);
    cr_expect_eq(b.server_rc, 0);
    cr_expect_eq(b.client_rc, 0);
    /* Fresh nonces each time. */
    cr_expect_str_neq(a.server_first, b.server_first);
    cr_expect_str_neq(a.server_final, b.server_final);
}

Test(auth_scram, escaped_username_round_trip)
{
    struct auth_scram_cred cred;
    struct outcome o;

    cr_assert_eq(auth_scram_cred_make("pw", 0, &cred, errmsg), 0);
    exchange("a,b=c", "pw", &cred, false, &o);
    cr_expect_eq(o.server_rc, 0);
    cr_expect_eq(o.client_rc, 0);
}

Test(auth_scram, wrong_password_refused)
{
    struct auth_scram_cred cred;
    struct outcome o;

    cr_assert_eq(auth_scram_cred_make("right", 0, &cred, errmsg), 0);
    exchange("bob", "wrong", &cred, false, &o);
    cr_expect_eq(o.server_rc, TERN_EAUTH);
    cr_expect_str_eq(o.server_final, "e=invalid-proof");
    cr_expect_eq(o.client_rc, TERN_EAUTH);
    cr_expect_not_null(strstr(o.client_err, "invalid-proof"), "%s",
                       o.client_err);
}

Test(auth_scram, tampered_server_signature_refused)
{
    struct auth_scram_cred cred;
    struct outcome o;

    cr_assert_eq(auth_scram_cred_make("right", 0, &cred, errmsg), 0);
    exchange("bob", "right", &cred, true, &o);
    cr_expect_eq(o.server_rc, 0);
    cr_expect_eq(o.client_rc, TERN_EAUTH, "%s", o.client_err);
    cr_expect_not_null(strstr(o.client_err, "signature"), "%s", o.client_err);
}

/* A server that knows a user with a made credential and one that does
 * not: the server-first messages have the same shape. */
static void shape(const char *m, size_t *r_len, size_t *s_len, char *i)
{
    const char *s = strstr(m, ",s=");
    const char *it = strstr(m, ",i=");
    cr_assert(strncmp(m, "r=", 2) == 0 && s != NULL && it != NULL);
    *r_len = (size_t)(s - m - 2);
    *s_len = (size_t)(it - s - 3);
    cr_assert_lt(snprintf(i, 16, "%s", it + 3), 16);
}

Test(auth_scram, unknown_user_indistinguishable)
{
    struct auth_scram_cred cred;
    struct outcome known, unknown, again;
    size_t r1, s1, r2, s2;
    char i1[16], i2[16];

    cr_assert_eq(auth_scram_cred_make("pw", 0, &cred, errmsg), 0);
    exchange("carol", "pw", &cred, false, &known);
    cr_expect_eq(known.server_rc, 0);
    exchange("mallory", "pw", NULL, false, &unknown);
    cr_expect_eq(unknown.server_rc, TERN_EAUTH);
    cr_expect_str_eq(unknown.server_final, "e=invalid-proof");
    cr_expect_eq(unknown.client_rc, TERN_EAUTH);
    shape(known.server_first, &r1, &s1, i1);
    shape(unknown.server_first, &r2, &s2, i2);
    cr_expect_eq(r1, r2);
    cr_expect_eq(s1, s2);
    cr_expect_str_eq(i1, i2);
    /* Same fake salt for the same name on every try (a real user's salt
     * does not change either), another one for another name. */
    exchange("mallory", "other", NULL, false, &again);
    cr_expect_eq(again.server_rc, TERN_EAUTH);
    cr_expect_str_eq(strstr(unknown.server_first, ",s="),
                     strstr(again.server_first, ",s="));
    exchange("trent", "pw", NULL, false, &again);
    cr_expect_str_neq(strstr(unknown.server_first, ",s="),
                      strstr(again.server_first, ",s="));
}

Test(auth_scram, unknown_user_fake_salt_depends_on_key)
{
    uint8_t other_key[AUTH_SCRAM_KEY_SIZE] = {9};
    struct auth_scram_server *a, *b;
    const char *user, *m;
    size_t len;
    char first_a[AUTH_SCRAM_MSG_MAX + 1];

    cr_assert_eq(auth_scram_server_new(fake_key, 0, &a, errmsg), 0);
    cr_assert_eq(auth_scram_server_new(other_key, 0, &b, errmsg), 0);
    cr_assert_eq(auth_scram_server_test_nonce(a, "x", errmsg), 0);
    cr_assert_eq(auth_scram_server_test_nonce(b, "x", errmsg), 0);
    cr_assert_eq(
        auth_scram_server_start(a, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
                                &user, NULL, NULL, errmsg),
        0);
    cr_assert_eq(
        auth_scram_server_start(b, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
                                &user, NULL, NULL, errmsg),
        0);
    cr_assert_eq(auth_scram_server_first(a, NULL, &m, &len, errmsg), 0);
    cr_assert_lt(snprintf(first_a, sizeof first_a, "%s", str(m, len)),
                 (int)sizeof first_a);
    cr_assert_eq(auth_scram_server_first(b, NULL, &m, &len, errmsg), 0);
    cr_expect_str_neq(first_a, str(m, len));
    auth_scram_server_free(a);
    auth_scram_server_free(b);
}

/* ---- Malformed client-first (server side) ---- */

struct bad_case
{
    const char *msg;
    int rc;
    const char *reply;
};

static void server_start_case(const char *msg,
                              size_t len,
                              int want_rc,
                              const char *want_reply)
{
    struct auth_scram_server *s;
    const char *user = NULL, *reply = NULL, *m;
    size_t reply_len = 0, mlen;
    int rc;

    cr_assert_eq(auth_scram_server_new(fake_key, 0, &s, errmsg), 0);
    errmsg[0] = '\0';
    rc =
        auth_scram_server_start(s, msg, len, &user, &reply, &reply_len, errmsg);
    cr_expect_eq(rc, want_rc, "'%s': rc %d (%s)", msg, rc, errmsg);
    if (want_rc != 0) {
        cr_expect(errmsg[0] != '\0', "'%s': no errmsg", msg);
        cr_expect(msg_is(reply, reply_len, want_reply), "'%s': reply %s", msg,
                  str(reply, reply_len));
        /* Failed for good. */
        cr_expect_eq(auth_scram_server_first(s, NULL, &m, &mlen, errmsg),
                     TERN_EINVAL);
    }
    auth_scram_server_free(s);
}

Test(auth_scram, server_refuses_bad_client_first)
{
    static const struct bad_case cases[] = {
        {"n,,n=user", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,r=abc,n=user", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,n=user,r=", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,n=user,r=abc,", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,n=user,,r=abc", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,n=user,r=abc,x=1", TERN_EAUTH, "e=extensions-not-supported"},
        {"n,,m=ext,n=user,r=abc", TERN_EAUTH, "e=extensions-not-supported"},
        {"p=tls-unique,,n=user,r=abc", TERN_EAUTH,
         "e=channel-binding-not-supported"},
        {"p=tls-exporter,,n=user,r=abc", TERN_EAUTH,
         "e=channel-binding-not-supported"},
        {"x,,n=user,r=abc", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,n=user,r=abc", TERN_EMALFORMED, "e=invalid-encoding"},
        {"nn,,n=user,r=abc", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,a=other,n=user,r=abc", TERN_EAUTH, "e=other-error"},
        {"n,a=,n=user,r=abc", TERN_EMALFORMED, "e=invalid-username-encoding"},
        {"n,,n=,r=abc", TERN_EMALFORMED, "e=invalid-username-encoding"},
        {"n,,n=us=2Xr,r=abc", TERN_EMALFORMED, "e=invalid-username-encoding"},
        {"n,,n=user=,r=abc", TERN_EMALFORMED, "e=invalid-username-encoding"},
        {"n,,n=user=2,r=abc", TERN_EMALFORMED, "e=invalid-username-encoding"},
        {"n,,n=us\xc3\xa9r,r=abc", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,n=us er,r=abc", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,n=user,r=a\001c", TERN_EMALFORMED, "e=invalid-encoding"},
        {"", TERN_EMALFORMED, "e=invalid-encoding"},
        {",", TERN_EMALFORMED, "e=invalid-encoding"},
        {"n,,", TERN_EMALFORMED, "e=invalid-encoding"},
    };

    for (size_t i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        server_start_case(cases[i].msg, strlen(cases[i].msg), cases[i].rc,
                          cases[i].reply);
    }
}

Test(auth_scram, server_accepts_valid_variants)
{
    server_start_case("n,a=user,n=user,r=abc", strlen("n,a=user,n=user,r=abc"),
                      0, NULL);
    server_start_case("y,,n=user,r=abc", strlen("y,,n=user,r=abc"), 0, NULL);
    server_start_case("n,,n=a=2Cb=3Dc,r=abc", strlen("n,,n=a=2Cb=3Dc,r=abc"), 0,
                      NULL);
}

Test(auth_scram, server_refuses_oversized_client_first)
{
    char msg[AUTH_SCRAM_MSG_MAX + 64];
    char name[AUTH_SCRAM_USER_MAX + 2];
    int n;

    /* A name one byte too long. */
    memset(name, 'u', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    n = snprintf(msg, sizeof msg, "n,,n=%s,r=abc", name);
    server_start_case(msg, (size_t)n, TERN_EMALFORMED,
                      "e=invalid-username-encoding");
    /* A nonce too long. */
    n = snprintf(msg, sizeof msg, "n,,n=user,r=%0*d", AUTH_SCRAM_NONCE_MAX + 1,
                 7);
    server_start_case(msg, (size_t)n, TERN_EMALFORMED, "e=invalid-encoding");
    /* A message too long. */
    memset(msg, 'x', sizeof msg);
    server_start_case(msg, AUTH_SCRAM_MSG_MAX + 1, TERN_EMALFORMED,
                      "e=invalid-encoding");
    /* No NUL needed, none read past len: the same bytes, cut. */
    server_start_case(RFC_CLIENT_FIRST, 12, TERN_EMALFORMED,
                      "e=invalid-encoding");
}

/* ---- Malformed client-final (server side) ---- */

static void server_final_case(const char *msg, int want_rc, const char *want)
{
    struct auth_scram_server *s;
    struct auth_scram_cred cred;
    const char *user, *m, *reply = NULL;
    size_t len, reply_len = 0;
    int rc;

    rfc_cred(&cred);
    cr_assert_eq(auth_scram_server_new(fake_key, 0, &s, errmsg), 0);
    cr_assert_eq(auth_scram_server_test_nonce(s, RFC_SNONCE, errmsg), 0);
    cr_assert_eq(
        auth_scram_server_start(s, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
                                &user, NULL, NULL, errmsg),
        0);
    cr_assert_eq(auth_scram_server_first(s, &cred, &m, &len, errmsg), 0);
    rc = auth_scram_server_final(s, msg, strlen(msg), &reply, &reply_len,
                                 errmsg);
    cr_expect_eq(rc, want_rc, "'%s': rc %d (%s)", msg, rc, errmsg);
    cr_expect(msg_is(reply, reply_len, want), "'%s': reply %s", msg,
              str(reply, reply_len));
    cr_expect_eq(
        auth_scram_server_final(s, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
                                &reply, &reply_len, errmsg),
        TERN_EINVAL);
    auth_scram_server_free(s);
}

#define RFC_R "r=" RFC_CNONCE RFC_SNONCE
#define RFC_P "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="

Test(auth_scram, server_refuses_bad_client_final)
{
    static const struct bad_case cases[] = {
        {RFC_R "," RFC_P, TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=biws," RFC_P, TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=biws," RFC_R, TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=biws," RFC_R ",", TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=eSws," RFC_R "," RFC_P, TERN_EAUTH,
         "e=channel-bindings-dont-match"},
        {"c=biws=," RFC_R "," RFC_P, TERN_EAUTH,
         "e=channel-bindings-dont-match"},
        {"c=biws,r=" RFC_CNONCE "," RFC_P, TERN_EAUTH, "e=other-error"},
        {"c=biws," RFC_R "x," RFC_P, TERN_EAUTH, "e=other-error"},
        {"c=biws," RFC_R ",x=1," RFC_P, TERN_EAUTH,
         "e=extensions-not-supported"},
        {"c=biws," RFC_R "," RFC_P ",x=1", TERN_EMALFORMED,
         "e=invalid-encoding"},
        {"c=biws," RFC_R ",p=!!!!", TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=biws," RFC_R ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndQ==",
         TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=biws," RFC_R ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVR=",
         TERN_EMALFORMED, "e=invalid-encoding"},
        {"c=biws," RFC_R ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ",
         TERN_EMALFORMED, "e=invalid-encoding"},
        /* Well formed, wrong proof (one bit). */
        {"c=biws," RFC_R ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVA=",
         TERN_EAUTH, "e=invalid-proof"},
        {"", TERN_EMALFORMED, "e=invalid-encoding"},
    };

    for (size_t i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        server_final_case(cases[i].msg, cases[i].rc, cases[i].reply);
    }
}

/* ---- Malformed server-first and server-final (client side) ---- */

static void client_final_case(const char *msg,
                              uint32_t max_iterations,
                              int want_rc)
{
    struct auth_scram_client *c;
    const char *m = NULL;
    size_t len = 0;
    int rc;

    cr_assert_eq(
        auth_scram_client_new("user", "pencil", max_iterations, &c, errmsg), 0);
    cr_assert_eq(auth_scram_client_test_nonce(c, RFC_CNONCE, errmsg), 0);
    cr_assert_eq(auth_scram_client_first(c, &m, &len, errmsg), 0);
    errmsg[0] = '\0';
    rc = auth_scram_client_final(c, msg, strlen(msg), &m, &len, errmsg);
    cr_expect_eq(rc, want_rc, "'%s': rc %d (%s)", msg, rc, errmsg);
    if (want_rc != 0) {
        cr_expect(errmsg[0] != '\0');
        cr_expect_eq(auth_scram_client_verify(c, RFC_SERVER_FINAL,
                                              strlen(RFC_SERVER_FINAL), errmsg),
                     TERN_EINVAL);
    }
    auth_scram_client_free(c);
}

#define SF(r, s, i) "r=" r ",s=" s ",i=" i

Test(auth_scram, client_refuses_bad_server_first)
{
    static const struct
    {
        const char *msg;
        int rc;
    } cases[] = {
        /* nonce not prefixed by ours, or not extended */
        {SF("xOprNGfwEbeRWgbNEkqO123", RFC_SALT, "4096"), TERN_EMALFORMED},
        {SF(RFC_CNONCE, RFC_SALT, "4096"), TERN_EMALFORMED},
        {SF("rOprNGfw", RFC_SALT, "4096"), TERN_EMALFORMED},
        /* bad base64, non-canonical base64, short salt */
        {SF(RFC_CNONCE "x", "W22ZaJ0SNY7soEsUEjb6g*==", "4096"),
         TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", "W22ZaJ0SNY7soEsUEjb6gR==", "4096"),
         TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", "W22ZaJ0SNY7soEsU", "4096"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", "", "4096"), TERN_EMALFORMED},
        /* iteration counts */
        {SF(RFC_CNONCE "x", RFC_SALT, "4095"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "1000001"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "4294967296"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "99999999999999999999"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "04096"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "-4096"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, ""), TERN_EMALFORMED},
        /* order, missing attributes, extensions */
        {"s=" RFC_SALT ",r=" RFC_CNONCE "x,i=4096", TERN_EMALFORMED},
        {"r=" RFC_CNONCE "x,s=" RFC_SALT, TERN_EMALFORMED},
        {"r=" RFC_CNONCE "x,i=4096", TERN_EMALFORMED},
        {"m=ext," SF(RFC_CNONCE "x", RFC_SALT, "4096"), TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "4096") ",x=1", TERN_EMALFORMED},
        {SF(RFC_CNONCE "x", RFC_SALT, "4096") ",", TERN_EMALFORMED},
        {SF(RFC_CNONCE "\xc3\xa9", RFC_SALT, "4096"), TERN_EMALFORMED},
        {"", TERN_EMALFORMED},
        /* the server's refusal, surfaced */
        {"e=other-error", TERN_EAUTH},
    };

    for (size_t i = 0; i < TERN_ARRAY_SIZE(cases); i++) {
        client_final_case(cases[i].msg, 0, cases[i].rc);
    }
    /* A client's own, lower bound. */
    client_final_case(SF(RFC_CNONCE "x", RFC_SALT, "5000"), 4500,
                      TERN_EMALFORMED);
    client_final_case(SF(RFC_CNONCE "x", RFC_SALT, "4096"), 4500, 0);
}

Test(auth_scram, client_surfaces_server_error)
{
    struct auth_scram_client *c;
    const char *m;
    size_t len;

    cr_assert_eq(auth_scram_client_new("user", "pencil", 0, &c, errmsg), 0);
    cr_assert_eq(auth_scram_client_first(c, &m, &len, errmsg), 0);
    cr_expect_eq(
        auth_scram_client_final(c, "e=unknown-user", 14, &m, &len, errmsg),
        TERN_EAUTH);
    cr_expect_not_null(strstr(errmsg, "unknown-user"), "%s", errmsg);
    auth_scram_client_free(c);
}

static void client_verify_case(const char *msg, int want_rc)
{
    struct auth_scram_client *c;
    const char *m;
    size_t len;
    int rc;

    cr_assert_eq(auth_scram_client_new("user", "pencil", 0, &c, errmsg), 0);
    cr_assert_eq(auth_scram_client_test_nonce(c, RFC_CNONCE, errmsg), 0);
    cr_assert_eq(auth_scram_client_first(c, &m, &len, errmsg), 0);
    cr_assert_eq(
        auth_scram_client_final(c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
                                &m, &len, errmsg),
        0);
    rc = auth_scram_client_verify(c, msg, strlen(msg), errmsg);
    cr_expect_eq(rc, want_rc, "'%s': rc %d (%s)", msg, rc, errmsg);
    auth_scram_client_free(c);
}

Test(auth_scram, client_refuses_bad_server_final)
{
    client_verify_case(RFC_SERVER_FINAL, 0);
    client_verify_case("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G5=",
                       TERN_EMALFORMED); /* non-canonical */
    client_verify_case("v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
                       TERN_EAUTH);
    client_verify_case(RFC_SERVER_FINAL ",x=1", TERN_EMALFORMED);
    client_verify_case("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4",
                       TERN_EMALFORMED);
    client_verify_case("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl9==",
                       TERN_EMALFORMED);
    client_verify_case("x=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
                       TERN_EMALFORMED);
    client_verify_case("", TERN_EMALFORMED);
    client_verify_case("e=invalid-proof", TERN_EAUTH);
}

/* ---- Local arguments ---- */

Test(auth_scram, client_refuses_bad_names_and_passwords)
{
    struct auth_scram_client *c = NULL;
    char long_name[AUTH_SCRAM_USER_MAX + 2];
    char long_pw[AUTH_SCRAM_PASSWORD_MAX + 2];

    cr_expect_eq(auth_scram_client_new("us\xc3\xa9r", "pw", 0, &c, errmsg),
                 TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "ASCII"), "%s", errmsg);
    cr_expect_eq(auth_scram_client_new("user", "p\xc3\xa9", 0, &c, errmsg),
                 TERN_EINVAL);
    cr_expect_not_null(strstr(errmsg, "ASCII"), "%s", errmsg);
    cr_expect_eq(auth_scram_client_new("a user", "pw", 0, &c, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(auth_scram_client_new("", "pw", 0, &c, errmsg), TERN_EINVAL);
    cr_expect_eq(auth_scram_client_new("user", "", 0, &c, errmsg), TERN_EINVAL);
    cr_expect_eq(auth_scram_client_new("user", "tab\tpw", 0, &c, errmsg),
                 TERN_EINVAL);
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    cr_expect_eq(auth_scram_client_new(long_name, "pw", 0, &c, errmsg),
                 TERN_EINVAL);
    memset(long_pw, 'a', sizeof long_pw - 1);
    long_pw[sizeof long_pw - 1] = '\0';
    cr_expect_eq(auth_scram_client_new("user", long_pw, 0, &c, errmsg),
                 TERN_EINVAL);
    cr_expect_null(c);
    /* A space inside a password is fine, as is the longest name. */
    long_name[AUTH_SCRAM_USER_MAX] = '\0';
    cr_assert_eq(auth_scram_client_new(long_name, "a b", 0, &c, errmsg), 0);
    auth_scram_client_free(c);
    auth_scram_client_free(NULL);
    auth_scram_server_free(NULL);
}

Test(auth_scram, out_of_memory)
{
    struct auth_scram_client *c = NULL;
    struct auth_scram_server *s = NULL;

    tern_alloc_fail_after(0);
    cr_expect_eq(auth_scram_client_new("user", "pw", 0, &c, errmsg), -ENOMEM);
    cr_expect_eq(auth_scram_server_new(fake_key, 0, &s, errmsg), -ENOMEM);
    tern_alloc_fail_after(-1);
    cr_expect_null(c);
    cr_expect_null(s);
}

Test(auth_scram, calls_out_of_order)
{
    struct auth_scram_client *c;
    struct auth_scram_server *s;
    const char *m;
    size_t len;

    cr_assert_eq(auth_scram_client_new("user", "pencil", 0, &c, errmsg), 0);
    cr_expect_eq(
        auth_scram_client_final(c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
                                &m, &len, errmsg),
        TERN_EINVAL);
    cr_assert_eq(auth_scram_client_first(c, &m, &len, errmsg), 0);
    cr_expect_eq(auth_scram_client_first(c, &m, &len, errmsg), TERN_EINVAL);
    cr_expect_eq(auth_scram_client_test_nonce(c, "abc", errmsg), TERN_EINVAL);
    auth_scram_client_free(c);

    cr_assert_eq(auth_scram_server_new(fake_key, 0, &s, errmsg), 0);
    cr_expect_eq(auth_scram_server_first(s, NULL, &m, &len, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(auth_scram_server_test_nonce(s, "a,b", errmsg), TERN_EINVAL);
    cr_expect_eq(auth_scram_server_test_nonce(s, "", errmsg), TERN_EINVAL);
    auth_scram_server_free(s);
    cr_expect_eq(auth_scram_server_new(fake_key, 100, &s, errmsg), TERN_EINVAL);
}

/* ---- Stored credentials ---- */

Test(auth_scram, cred_bounds)
{
    struct auth_scram_cred cred;
    uint8_t salt[AUTH_SCRAM_SALT_MAX + 1] = {0};

    cr_expect_eq(auth_scram_cred_make("pw", 4095, &cred, errmsg), TERN_EINVAL);
    cr_expect_eq(
        auth_scram_cred_make("pw", AUTH_SCRAM_ITER_MAX + 1, &cred, errmsg),
        TERN_EINVAL);
    cr_expect_eq(auth_scram_cred_make("p\xc3\xa9", 0, &cred, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(auth_scram_cred_derive("pw", salt, 15, 0, &cred, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(
        auth_scram_cred_derive("pw", salt, sizeof salt, 0, &cred, errmsg),
        TERN_EINVAL);
    cr_assert_eq(auth_scram_cred_make("pw", 0, &cred, errmsg), 0);
    cr_expect_eq(cred.iterations, AUTH_SCRAM_ITER_DEFAULT);
    cr_expect_eq(cred.salt_len, AUTH_SCRAM_SALT_DEFAULT);
}

Test(auth_scram, cred_salts_are_random)
{
    struct auth_scram_cred a, b;

    cr_assert_eq(auth_scram_cred_make("pw", 0, &a, errmsg), 0);
    cr_assert_eq(auth_scram_cred_make("pw", 0, &b, errmsg), 0);
    cr_expect_neq(memcmp(a.salt, b.salt, a.salt_len), 0);
    cr_expect_neq(memcmp(a.stored_key, b.stored_key, AUTH_SCRAM_KEY_SIZE), 0);
}

Test(auth_scram, cred_encode_decode_round_trip)
{
    struct auth_scram_cred cred, back;
    uint8_t salt[AUTH_SCRAM_SALT_MAX];
    uint8_t buf[AUTH_SCRAM_CRED_ENC_MAX];
    size_t len = 0;

    rfc_cred(&cred);
    cr_assert_eq(auth_scram_cred_encode(&cred, buf, sizeof buf, &len, errmsg),
                 0);
    cr_expect_eq(len, AUTH_SCRAM_CRED_ENC_SIZE(16));
    cr_expect_eq(buf[0], 1);
    cr_expect_eq(buf[2], 16);
    cr_expect_eq(tern_get_u32(buf + 4), 4096);
    cr_expect_eq(memcmp(buf + 8, rfc_salt, 16), 0);
    cr_expect_eq(tern_get_u32(buf + len - 4), tern_checksum32(buf, len - 4));
    memset(&back, 0, sizeof back);
    cr_assert_eq(auth_scram_cred_decode(buf, len, &back, errmsg), 0, "%s",
                 errmsg);
    cr_expect(cred_eq(&back, &cred));

    /* The largest salt. */
    for (size_t i = 0; i < sizeof salt; i++) {
        salt[i] = (uint8_t)i;
    }
    cr_assert_eq(
        auth_scram_cred_derive("pw", salt, sizeof salt, 4097, &cred, errmsg),
        0);
    cr_assert_eq(auth_scram_cred_encode(&cred, buf, sizeof buf, &len, errmsg),
                 0);
    cr_expect_eq(len, AUTH_SCRAM_CRED_ENC_MAX);
    memset(&back, 0, sizeof back);
    cr_assert_eq(auth_scram_cred_decode(buf, len, &back, errmsg), 0);
    cr_expect(cred_eq(&back, &cred));
    /* Too small a buffer. */
    cr_expect_eq(auth_scram_cred_encode(&cred, buf, len - 1, &len, errmsg),
                 TERN_EINVAL);
}

Test(auth_scram, cred_decode_detects_corruption)
{
    struct auth_scram_cred cred, back;
    uint8_t buf[AUTH_SCRAM_CRED_ENC_MAX + 1];
    size_t len = 0;
    int rc;

    rfc_cred(&cred);
    cr_assert_eq(auth_scram_cred_encode(&cred, buf, sizeof buf, &len, errmsg),
                 0);
    /* Every single-bit flip is refused. */
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            rc = auth_scram_cred_decode(buf, len, &back, errmsg);
            cr_expect(rc == TERN_ECORRUPT || rc == TERN_EMALFORMED ||
                          rc == TERN_EVERSION,
                      "byte %zu bit %d: rc %d", i, bit, rc);
            if (i == 0) {
                cr_expect_eq(rc, TERN_EVERSION);
            }
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    /* Every truncation and an extra byte. */
    for (size_t n = 0; n < len; n++) {
        cr_expect_neq(auth_scram_cred_decode(buf, n, &back, errmsg), 0,
                      "length %zu", n);
    }
    buf[len] = 0;
    cr_expect_eq(auth_scram_cred_decode(buf, len + 1, &back, errmsg),
                 TERN_EMALFORMED);
    /* A well-formed checksum over out-of-bounds fields. */
    tern_put_u32(buf + 4, 100);
    tern_put_u32(buf + len - 4, tern_checksum32(buf, len - 4));
    cr_expect_eq(auth_scram_cred_decode(buf, len, &back, errmsg),
                 TERN_EMALFORMED);
    tern_put_u32(buf + 4, 4096);
    buf[3] = 1;
    tern_put_u32(buf + len - 4, tern_checksum32(buf, len - 4));
    cr_expect_eq(auth_scram_cred_decode(buf, len, &back, errmsg),
                 TERN_EMALFORMED);
    buf[3] = 0;
    tern_put_u32(buf + len - 4, tern_checksum32(buf, len - 4));
    cr_expect_eq(auth_scram_cred_decode(buf, len, &back, errmsg), 0);
}

Test(auth_scram, cred_text_round_trip)
{
    struct auth_scram_cred cred, back;
    char text[AUTH_SCRAM_CRED_TEXT_MAX];

    cr_assert_eq(auth_scram_cred_make("pw", 12345, &cred, errmsg), 0);
    cr_assert_eq(auth_scram_cred_format(&cred, text, sizeof text, errmsg), 0);
    cr_expect_eq(strncmp(text, "SCRAM-SHA-256$12345:", 20), 0, "%s", text);
    memset(&back, 0, sizeof back);
    cr_assert_eq(auth_scram_cred_parse(text, strlen(text), &back, errmsg), 0,
                 "%s", errmsg);
    cr_expect(cred_eq(&back, &cred));
    cr_expect_eq(auth_scram_cred_format(&cred, text, 20, errmsg), TERN_EINVAL);
}

Test(auth_scram, cred_text_refuses_malformed)
{
    static const char *const bad[] = {
        "",
        "SCRAM-SHA-256$",
        "SCRAM-SHA-1$4096:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
        "SCRAM-SHA-256$4095:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
        "SCRAM-SHA-256$04096:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
        "SCRAM-SHA-256$4096:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=",
        "SCRAM-SHA-256$4096:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4q="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
        "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsU"
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
        "SCRAM-SHA-256$4096:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=:",
        "SCRAM-SHA-256$4096:" RFC_SALT
        "$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
        ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU= ",
    };
    struct auth_scram_cred back;

    for (size_t i = 0; i < TERN_ARRAY_SIZE(bad); i++) {
        cr_expect_eq(
            auth_scram_cred_parse(bad[i], strlen(bad[i]), &back, errmsg),
            TERN_EMALFORMED, "'%s'", bad[i]);
    }
}
