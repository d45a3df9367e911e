/* Unit tests of the security metadata ops of proto/ (USER_*, ACL_*,
 * NAMESPACE_*, PRODUCER_INIT): request round trips, the encoders' and
 * decoders' refusals, and the streamed list answers. */
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

static const uint8_t *parse(const struct tern_wbuf *w, struct proto_header *h)
{
    const void *body = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &body),
        0);
    cr_assert_eq(PROTO_HEADER_SIZE + h->body_len, w->len);
    return body;
}

static void request(const struct tern_wbuf *w, struct proto_request *r)
{
    struct proto_header h;
    const uint8_t *body = parse(w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, r), 0);
}

static int streq(const char *p, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(p, want, len) == 0;
}

Test(proto_security, user_set_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    const uint8_t cred[] = {9, 8, 7, 6};
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_user_set(&w, 5, "alice", PROTO_USER_ADMIN, cred,
                                       sizeof cred),
                 0);
    request(&w, &r);
    cr_assert_eq(r.op, PROTO_OP_USER_SET);
    cr_assert(streq(r.user, r.user_len, "alice"));
    cr_assert_eq(r.bits, PROTO_USER_ADMIN);
    cr_assert_eq(r.cred_len, sizeof cred);
    cr_assert_eq(memcmp(r.cred, cred, sizeof cred), 0);
    /* A certificate user without a credential. */
    w.len = 0;
    cr_assert_eq(proto_encode_user_set(&w, 6, "bob", PROTO_USER_CERT, NULL, 0),
                 0);
    request(&w, &r);
    cr_assert_eq(r.cred_len, 0);
    cr_assert_eq(r.bits, PROTO_USER_CERT);
    tern_wbuf_free(&w);
}

Test(proto_security, encoders_refuse)
{
    struct tern_wbuf w;
    char longname[PROTO_MAX_USER + 2];
    uint8_t big[PROTO_MAX_CREDENTIAL + 1] = {0};
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_user_set(&w, 1, "a", 0, NULL, 0), TERN_EINVAL);
    cr_assert_eq(proto_encode_user_set(&w, 1, "a", 4, big, 1), TERN_EINVAL);
    cr_assert_eq(proto_encode_user_set(&w, 1, "a", 0, big, sizeof big),
                 TERN_EINVAL);
    cr_assert_eq(proto_encode_user_set(&w, 1, longname, 0, big, 1),
                 TERN_EBADNAME);
    cr_assert_eq(proto_encode_user_set(&w, 1, "a b", 0, big, 1), TERN_EBADNAME);
    cr_assert_eq(proto_encode_name_op(&w, PROTO_OP_QUEUE_CREATE, 1, "a"),
                 TERN_EINVAL);
    longname[PROTO_MAX_NAMESPACE + 1] = '\0';
    cr_assert_eq(
        proto_encode_name_op(&w, PROTO_OP_NAMESPACE_DELETE, 1, longname),
        TERN_EBADNAME);
    cr_assert_eq(proto_encode_acl_op(&w, PROTO_OP_ACL_SET, 1, "u", "n", "a*b",
                                     PROTO_PERM_PRODUCE),
                 TERN_EBADNAME);
    cr_assert_eq(proto_encode_acl_op(&w, PROTO_OP_ACL_SET, 1, "u", "n", "*", 0),
                 TERN_EINVAL);
    cr_assert_eq(
        proto_encode_acl_op(&w, PROTO_OP_ACL_SET, 1, "u", "n", "*", 0x10),
        TERN_EINVAL);
    cr_assert_eq(proto_encode_acl_list(&w, 1, "bad name"), TERN_EBADNAME);
    cr_assert_eq(w.len, 0, "nothing written by a refused encode");
    tern_wbuf_free(&w);
}

Test(proto_security, acl_and_namespace_round_trips)
{
    struct tern_wbuf w;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_acl_op(&w, PROTO_OP_ACL_SET, 1, "alice", "team1",
                            "orders*", PROTO_PERM_PRODUCE | PROTO_PERM_CONSUME),
        0);
    request(&w, &r);
    cr_assert(streq(r.user, r.user_len, "alice"));
    cr_assert(streq(r.ns, r.ns_len, "team1"));
    cr_assert(streq(r.pattern, r.pattern_len, "orders*"));
    cr_assert_eq(r.bits, 3);

    w.len = 0;
    cr_assert_eq(proto_encode_acl_op(&w, PROTO_OP_ACL_DELETE, 2, "alice",
                                     "team1", "*", 0),
                 0);
    request(&w, &r);
    cr_assert_eq(r.op, PROTO_OP_ACL_DELETE);
    cr_assert(streq(r.pattern, r.pattern_len, "*"));

    w.len = 0;
    cr_assert_eq(proto_encode_acl_list(&w, 3, NULL), 0);
    request(&w, &r);
    cr_assert_eq(r.user_len, 0);
    w.len = 0;
    cr_assert_eq(proto_encode_acl_list(&w, 3, "bob"), 0);
    request(&w, &r);
    cr_assert(streq(r.user, r.user_len, "bob"));

    w.len = 0;
    cr_assert_eq(proto_encode_namespace_set(&w, 4, "team1", 10, 1u << 30, 5000),
                 0);
    request(&w, &r);
    cr_assert(streq(r.ns, r.ns_len, "team1"));
    cr_assert_eq(r.max_queues, 10);
    cr_assert_eq(r.max_bytes_quota, 1u << 30);
    cr_assert_eq(r.produce_bytes_per_s, 5000);

    w.len = 0;
    cr_assert_eq(proto_encode_name_op(&w, PROTO_OP_NAMESPACE_DELETE, 5, "t"),
                 0);
    request(&w, &r);
    cr_assert(streq(r.ns, r.ns_len, "t"));
    w.len = 0;
    cr_assert_eq(proto_encode_name_op(&w, PROTO_OP_USER_DELETE, 5, "u"), 0);
    request(&w, &r);
    cr_assert(streq(r.user, r.user_len, "u"));

    const uint8_t ops[] = {PROTO_OP_USER_LIST, PROTO_OP_NAMESPACE_LIST,
                           PROTO_OP_PRODUCER_INIT};
    for (size_t i = 0; i < sizeof ops; i++) {
        w.len = 0;
        cr_assert_eq(proto_encode_simple(&w, ops[i], 9), 0);
        request(&w, &r);
        cr_assert_eq(r.op, ops[i]);
    }
    tern_wbuf_free(&w);
}

Test(proto_security, decoder_refuses)
{
    /* USER_SET: str "a", flags 4 (unknown bit), blob of 1 byte. */
    const uint8_t bad_flags[] = {1, 0, 'a', 4, 0, 0, 0, 1, 0, 0, 0, 7};
    /* USER_SET without credential nor cert flag. */
    const uint8_t no_cred[] = {1, 0, 'a', 0, 0, 0, 0, 0, 0, 0, 0};
    /* ACL_SET with pattern "a*b". */
    const uint8_t bad_pat[] = {1,   0,   'u', 1, 0, 'n', 3, 0,
                               'a', '*', 'b', 1, 0, 0,   0};
    /* ACL_SET with perms 0. */
    const uint8_t no_perm[] = {1, 0, 'u', 1, 0, 'n', 1, 0, '*', 0, 0, 0, 0};
    /* NAMESPACE_SET truncated. */
    const uint8_t short_ns[] = {1, 0, 'n', 1, 0, 0};
    /* USER_LIST with a trailing byte. */
    const uint8_t trailing[] = {0};
    struct proto_request r;
    cr_assert_eq(proto_decode_request(PROTO_OP_USER_SET, bad_flags,
                                      sizeof bad_flags, &r),
                 TERN_EINVAL);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_USER_SET, no_cred, sizeof no_cred, &r),
        TERN_EINVAL);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_ACL_SET, bad_pat, sizeof bad_pat, &r),
        TERN_EBADNAME);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_ACL_SET, no_perm, sizeof no_perm, &r),
        TERN_EINVAL);
    cr_assert_eq(proto_decode_request(PROTO_OP_NAMESPACE_SET, short_ns,
                                      sizeof short_ns, &r),
                 TERN_EMALFORMED);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_USER_LIST, trailing, sizeof trailing, &r),
        TERN_EMALFORMED);
    cr_assert_eq(r.op, PROTO_OP_USER_LIST);
    cr_assert_null(r.user);
}

Test(proto_security, list_answers)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_list_resp lr;
    size_t pos = 0;
    tern_wbuf_init(&w);

    size_t start = proto_list_begin(&w, PROTO_OP_USER_LIST, 11);
    proto_put_user_entry(&w, "alice", PROTO_USER_ADMIN, 1);
    proto_put_user_entry(&w, "bob", PROTO_USER_CERT, 0);
    cr_assert_eq(proto_list_end(&w, start, 2), 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(h.op, PROTO_OP_USER_LIST | PROTO_OP_RESPONSE);
    cr_assert_eq(h.request_id, 11);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_USER_LIST, body, h.body_len, &lr), 0);
    cr_assert_eq(lr.n, 2);
    struct proto_user_entry u;
    cr_assert_eq(proto_next_user(&lr, &pos, &u), 1);
    cr_assert(streq(u.user, u.user_len, "alice"));
    cr_assert_eq(u.flags, PROTO_USER_ADMIN);
    cr_assert_eq(u.has_cred, 1);
    cr_assert_eq(proto_next_user(&lr, &pos, &u), 1);
    cr_assert(streq(u.user, u.user_len, "bob"));
    cr_assert_eq(u.has_cred, 0);
    cr_assert_eq(proto_next_user(&lr, &pos, &u), 0);
    /* The wrong iterator yields nothing. */
    struct proto_acl_entry a;
    pos = 0;
    cr_assert_eq(proto_next_acl(&lr, &pos, &a), 0);
    /* The count must match the records. */
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_ACL_LIST, body, h.body_len, &lr),
        TERN_EMALFORMED);

    w.len = 0;
    start = proto_list_begin(&w, PROTO_OP_ACL_LIST, 12);
    proto_put_acl_entry(&w, "alice", "default", "q*", 5);
    cr_assert_eq(proto_list_end(&w, start, 1), 0);
    body = parse(&w, &h);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_ACL_LIST, body, h.body_len, &lr), 0);
    pos = 0;
    cr_assert_eq(proto_next_acl(&lr, &pos, &a), 1);
    cr_assert(streq(a.ns, a.ns_len, "default"));
    cr_assert(streq(a.pattern, a.pattern_len, "q*"));
    cr_assert_eq(a.perms, 5);
    cr_assert_eq(proto_next_acl(&lr, &pos, &a), 0);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_ACL_LIST, body, h.body_len - 1, &lr),
        TERN_EMALFORMED);

    w.len = 0;
    start = proto_list_begin(&w, PROTO_OP_NAMESPACE_LIST, 13);
    proto_put_namespace_entry(&w, "default", 0, 0, 0);
    proto_put_namespace_entry(&w, "t", 1, 2, 3);
    cr_assert_eq(proto_list_end(&w, start, 2), 0);
    body = parse(&w, &h);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_NAMESPACE_LIST, body, h.body_len, &lr),
        0);
    struct proto_namespace_entry n;
    pos = 0;
    cr_assert_eq(proto_next_namespace(&lr, &pos, &n), 1);
    cr_assert_eq(proto_next_namespace(&lr, &pos, &n), 1);
    cr_assert(streq(n.ns, n.ns_len, "t"));
    cr_assert_eq(n.max_queues, 1);
    cr_assert_eq(n.max_bytes, 2);
    cr_assert_eq(n.produce_bytes_per_s, 3);
    cr_assert_eq(proto_next_namespace(&lr, &pos, &n), 0);

    /* A list entry with an invalid name is refused. */
    w.len = 0;
    start = proto_list_begin(&w, PROTO_OP_USER_LIST, 14);
    proto_put_user_entry(&w, "bad name", 0, 0);
    cr_assert_eq(proto_list_end(&w, start, 1), 0);
    body = parse(&w, &h);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_USER_LIST, body, h.body_len, &lr),
        TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto_security, producer_init_answer)
{
    struct tern_wbuf w;
    struct proto_header h;
    uint64_t id = 0;
    const uint8_t zero[8] = {0};
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_producer_init_resp(&w, 3, 77), 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(h.op, PROTO_OP_PRODUCER_INIT | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_producer_init_resp(body, h.body_len, &id), 0);
    cr_assert_eq(id, 77);
    cr_assert_eq(proto_decode_producer_init_resp(zero, sizeof zero, &id),
                 TERN_EMALFORMED);
    cr_assert_eq(proto_decode_producer_init_resp(body, 7, &id),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto_security, auth_round_trips)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    const uint8_t *body;
    const void *d;
    uint32_t n;
    const char first[] = "n,,n=alice,r=abc";
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_auth_start(&w, 1, "SCRAM-SHA-256", "acme", first,
                                         sizeof first - 1),
                 0);
    request(&w, &r);
    cr_assert_eq(r.op, PROTO_OP_AUTH_START);
    cr_assert(streq(r.mechanism, r.mechanism_len, "SCRAM-SHA-256"));
    cr_assert(streq(r.ns, r.ns_len, "acme"));
    cr_assert_eq(r.auth_data_len, sizeof first - 1);
    cr_assert_eq(memcmp(r.auth_data, first, sizeof first - 1), 0);
    /* Default namespace, no data (EXTERNAL). */
    w.len = 0;
    cr_assert_eq(proto_encode_auth_start(&w, 2, "EXTERNAL", NULL, NULL, 0), 0);
    request(&w, &r);
    cr_assert_eq(r.ns_len, 0);
    cr_assert_eq(r.auth_data_len, 0);
    w.len = 0;
    cr_assert_eq(proto_encode_auth_continue(&w, 3, "c=biws", 6), 0);
    request(&w, &r);
    cr_assert_eq(r.op, PROTO_OP_AUTH_CONTINUE);
    cr_assert_eq(r.auth_data_len, 6);
    w.len = 0;
    cr_assert_eq(
        proto_encode_auth_resp(&w, PROTO_OP_AUTH_CONTINUE, 3, "v=xyz", 5), 0);
    body = parse(&w, &h);
    cr_assert_eq(h.op, PROTO_OP_AUTH_CONTINUE | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_auth_resp(body, h.body_len, &d, &n), 0);
    cr_assert_eq(n, 5);
    cr_assert_eq(memcmp(d, "v=xyz", 5), 0);
    /* Trailing bytes are malformed. */
    cr_assert_eq(proto_decode_auth_resp(body, h.body_len + 1, &d, &n) != 0, 1);
    tern_wbuf_free(&w);
}

Test(proto_security, auth_refusals)
{
    struct tern_wbuf w;
    struct proto_request r;
    static uint8_t big[PROTO_MAX_AUTH_DATA + 1];
    uint8_t body[64];
    size_t len = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_auth_start(&w, 1, "scram", NULL, NULL, 0),
                 TERN_EINVAL); /* lower case */
    cr_assert_eq(proto_encode_auth_start(&w, 1, "", NULL, NULL, 0),
                 TERN_EINVAL);
    cr_assert_eq(proto_encode_auth_start(&w, 1, "EXTERNAL", "a%b", NULL, 0),
                 TERN_EBADNAME);
    cr_assert_eq(
        proto_encode_auth_start(&w, 1, "EXTERNAL", NULL, big, sizeof big),
        TERN_EINVAL);
    cr_assert_eq(proto_encode_auth_continue(&w, 1, big, sizeof big),
                 TERN_EINVAL);
    /* A decoder sees a bad mechanism and an oversized blob. */
    body[len++] = 2;
    body[len++] = 0;
    memcpy(body + len, "a!", 2);
    len += 2;
    body[len++] = 0;
    body[len++] = 0;
    memset(body + len, 0, 4);
    len += 4;
    cr_assert_eq(proto_decode_request(PROTO_OP_AUTH_START, body, len, &r),
                 TERN_EINVAL);
    tern_put_u32(body, PROTO_MAX_AUTH_DATA + 1);
    cr_assert_eq(proto_decode_request(PROTO_OP_AUTH_CONTINUE, body, 4, &r) != 0,
                 1);
    tern_wbuf_free(&w);
}
