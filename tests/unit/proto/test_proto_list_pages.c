/* Unit tests of the paged security lists of proto/ (USER_LIST, ACL_LIST,
 * NAMESPACE_LIST): the paging tail of the requests (old and new forms,
 * truncated, oversized and half-empty cursors refused) and the more byte
 * of the answers. */
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

static int streq(const char *p, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(p, want, len) == 0;
}

/* Encode a paged request into w (reset first) and decode it into r. */
static int page_req(struct tern_wbuf *w,
                    uint8_t op,
                    const char *user,
                    const struct proto_list_cursor *after,
                    uint32_t max_count,
                    struct proto_request *r)
{
    struct proto_header h;
    const uint8_t *body;
    int rv;
    w->len = 0;
    rv = proto_encode_list_page_req(w, op, 7, user, after, max_count);
    if (rv != 0) {
        cr_assert_eq(w->len, 0, "a refused request leaves no bytes");
        return rv;
    }
    body = parse(w, &h);
    cr_assert_eq(h.op, op);
    return proto_decode_request(h.op, body, h.body_len, r);
}

Test(proto_list_pages, user_and_namespace_requests)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_list_cursor after = {"alice", NULL, NULL};
    tern_wbuf_init(&w);

    cr_assert_eq(page_req(&w, PROTO_OP_USER_LIST, NULL, &after, 50, &r), 0);
    cr_assert_eq(r.paged, 1);
    cr_assert(streq(r.after, r.after_len, "alice"));
    cr_assert_eq(r.max_count, 50);
    cr_assert_eq(r.after_ns_len, 0);

    /* From the start: an empty cursor and the server's page size. */
    cr_assert_eq(page_req(&w, PROTO_OP_NAMESPACE_LIST, "", NULL, 0, &r), 0);
    cr_assert_eq(r.paged, 1);
    cr_assert_eq(r.after_len, 0);
    cr_assert_eq(r.max_count, 0);
    cr_assert_eq(w.len, PROTO_HEADER_SIZE + 2 + 4);

    after.name = "ns.1";
    cr_assert_eq(page_req(&w, PROTO_OP_NAMESPACE_LIST, NULL, &after, 3, &r), 0);
    cr_assert(streq(r.after, r.after_len, "ns.1"));

    /* The old empty bodies still decode, unpaged. */
    w.len = 0;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_USER_LIST, 1), 0);
    {
        struct proto_header h;
        const uint8_t *body = parse(&w, &h);
        cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
        cr_assert_eq(r.paged, 0);
    }
    tern_wbuf_free(&w);
}

Test(proto_list_pages, acl_requests)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_list_cursor after = {"bob", "team.a", "orders*"};
    tern_wbuf_init(&w);

    cr_assert_eq(page_req(&w, PROTO_OP_ACL_LIST, "bob", &after, 9, &r), 0);
    cr_assert_eq(r.paged, 1);
    cr_assert(streq(r.user, r.user_len, "bob"));
    cr_assert(streq(r.after, r.after_len, "bob"));
    cr_assert(streq(r.after_ns, r.after_ns_len, "team.a"));
    cr_assert(streq(r.after_pattern, r.after_pattern_len, "orders*"));
    cr_assert_eq(r.max_count, 9);

    cr_assert_eq(page_req(&w, PROTO_OP_ACL_LIST, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.paged, 1);
    cr_assert_eq(r.user_len, 0);
    cr_assert_eq(r.after_len + r.after_ns_len + r.after_pattern_len, 0);

    /* The old form: only the user filter. */
    w.len = 0;
    cr_assert_eq(proto_encode_acl_list(&w, 2, "bob"), 0);
    {
        struct proto_header h;
        const uint8_t *body = parse(&w, &h);
        cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
        cr_assert_eq(r.paged, 0);
        cr_assert(streq(r.user, r.user_len, "bob"));
    }
    tern_wbuf_free(&w);
}

Test(proto_list_pages, encoder_refuses)
{
    struct tern_wbuf w;
    struct proto_request r;
    char long_user[PROTO_MAX_USER + 2];
    struct proto_list_cursor half = {"bob", NULL, "*"};
    struct proto_list_cursor bad_pat = {"bob", "ns", "a*b"};
    struct proto_list_cursor bad_name = {"bad name", NULL, NULL};
    struct proto_list_cursor empty_user = {"", "ns", "*"};
    struct proto_list_cursor long_cursor = {long_user, NULL, NULL};
    memset(long_user, 'u', sizeof long_user - 1);
    long_user[sizeof long_user - 1] = '\0';
    tern_wbuf_init(&w);
    cr_assert_eq(page_req(&w, PROTO_OP_ACL_LIST, NULL, &half, 0, &r),
                 TERN_EBADNAME);
    cr_assert_eq(page_req(&w, PROTO_OP_ACL_LIST, NULL, &bad_pat, 0, &r),
                 TERN_EBADNAME);
    cr_assert_eq(page_req(&w, PROTO_OP_ACL_LIST, NULL, &empty_user, 0, &r),
                 TERN_EBADNAME);
    cr_assert_eq(page_req(&w, PROTO_OP_USER_LIST, NULL, &bad_name, 0, &r),
                 TERN_EBADNAME);
    cr_assert_eq(page_req(&w, PROTO_OP_USER_LIST, NULL, &long_cursor, 0, &r),
                 TERN_EBADNAME);
    /* A user filter only on ACL_LIST. */
    cr_assert_eq(page_req(&w, PROTO_OP_USER_LIST, "bob", NULL, 0, &r),
                 TERN_EBADNAME);
    cr_assert_eq(page_req(&w, PROTO_OP_QUEUE_LIST, NULL, NULL, 0, &r),
                 TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto_list_pages, decoder_refuses)
{
    struct proto_request r;
    /* USER_LIST: a cursor str without max_count (truncated tail). */
    const uint8_t no_count[] = {1, 0, 'a'};
    /* USER_LIST: the tail and one byte more (oversized tail). */
    const uint8_t extra[] = {1, 0, 'a', 5, 0, 0, 0, 9};
    /* USER_LIST: a cursor that is not a name. */
    const uint8_t bad_cursor[] = {1, 0, ' ', 5, 0, 0, 0};
    /* NAMESPACE_LIST: a 65-byte cursor (over PROTO_MAX_NAMESPACE). */
    uint8_t long_ns[2 + 65 + 4];
    /* ACL_LIST: user "", cursor ("u", "", "*"): half empty. */
    const uint8_t acl_half[] = {0, 0, 1, 0, 'u', 0, 0, 1, 0, '*', 0, 0, 0, 0};
    /* ACL_LIST: user "", cursor ("", "", "") without max_count. */
    const uint8_t acl_short[] = {0, 0, 0, 0, 0, 0, 0, 0};
    /* ACL_LIST: user "", a cursor whose pattern is "a*b". */
    const uint8_t acl_pat[] = {0, 0,   1,   0,   'u', 1, 0, 'n', 3,
                               0, 'a', '*', 'b', 0,   0, 0, 0};
    /* ACL_LIST: a whole tail from the start; valid. */
    const uint8_t acl_ok[] = {0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0};
    long_ns[0] = 65;
    long_ns[1] = 0;
    memset(long_ns + 2, 'n', 65);
    memset(long_ns + 2 + 65, 0, 4);

    cr_assert_eq(
        proto_decode_request(PROTO_OP_USER_LIST, no_count, sizeof no_count, &r),
        TERN_EMALFORMED);
    cr_assert_eq(r.paged, 0, "a refused request is zeroed");
    cr_assert_eq(
        proto_decode_request(PROTO_OP_USER_LIST, extra, sizeof extra, &r),
        TERN_EMALFORMED);
    cr_assert_eq(proto_decode_request(PROTO_OP_USER_LIST, bad_cursor,
                                      sizeof bad_cursor, &r),
                 TERN_EBADNAME);
    cr_assert_eq(proto_decode_request(PROTO_OP_NAMESPACE_LIST, long_ns,
                                      sizeof long_ns, &r),
                 TERN_EBADNAME);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_ACL_LIST, acl_half, sizeof acl_half, &r),
        TERN_EBADNAME);
    cr_assert_eq(proto_decode_request(PROTO_OP_ACL_LIST, acl_short,
                                      sizeof acl_short, &r),
                 TERN_EMALFORMED);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_ACL_LIST, acl_pat, sizeof acl_pat, &r),
        TERN_EBADNAME);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_ACL_LIST, acl_ok, sizeof acl_ok, &r), 0);
    cr_assert_eq(r.paged, 1);
    cr_assert_eq(r.max_count, 2);
}

Test(proto_list_pages, page_answers)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_list_resp lr;
    struct proto_user_entry u;
    size_t pos = 0;
    size_t start, before;
    const uint8_t *body;
    tern_wbuf_init(&w);

    start = proto_list_begin(&w, PROTO_OP_USER_LIST, 3);
    before = w.len;
    proto_put_user_entry(&w, "carol", 0, 1);
    cr_assert_eq(w.len - before, proto_list_user_size("carol"));
    cr_assert_eq(proto_list_end_page(&w, start, 1, 1), 0);
    body = parse(&w, &h);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_USER_LIST, body, h.body_len, &lr), 0);
    cr_assert_eq(lr.paged, 1);
    cr_assert_eq(lr.more, 1);
    cr_assert_eq(proto_next_user(&lr, &pos, &u), 1);
    cr_assert(streq(u.user, u.user_len, "carol"));
    cr_assert_eq(proto_next_user(&lr, &pos, &u), 0);

    /* The unpaged answer has no more byte. */
    w.len = 0;
    start = proto_list_begin(&w, PROTO_OP_NAMESPACE_LIST, 4);
    before = w.len;
    proto_put_namespace_entry(&w, "default", 0, 0, 0);
    cr_assert_eq(w.len - before, proto_list_namespace_size("default"));
    cr_assert_eq(proto_list_end(&w, start, 1), 0);
    body = parse(&w, &h);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_NAMESPACE_LIST, body, h.body_len, &lr),
        0);
    cr_assert_eq(lr.paged, 0);
    cr_assert_eq(lr.more, 0);

    /* A last page, then the acl record size. */
    w.len = 0;
    start = proto_list_begin(&w, PROTO_OP_ACL_LIST, 5);
    before = w.len;
    proto_put_acl_entry(&w, "bob", "default", "q*", 3);
    cr_assert_eq(w.len - before, proto_list_acl_size("bob", "default", "q*"));
    cr_assert_eq(proto_list_end_page(&w, start, 1, 0), 0);
    body = parse(&w, &h);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_ACL_LIST, body, h.body_len, &lr), 0);
    cr_assert_eq(lr.paged, 1);
    cr_assert_eq(lr.more, 0);
    tern_wbuf_free(&w);
}

Test(proto_list_pages, bad_more_byte)
{
    /* u32 n = 0, then a more byte of 2; then two trailing bytes. */
    const uint8_t more2[] = {0, 0, 0, 0, 2};
    const uint8_t two[] = {0, 0, 0, 0, 1, 0};
    struct proto_list_resp lr;
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_USER_LIST, more2, sizeof more2, &lr),
        TERN_EMALFORMED);
    cr_assert_eq(
        proto_decode_list_resp(PROTO_OP_ACL_LIST, two, sizeof two, &lr),
        TERN_EMALFORMED);
}
