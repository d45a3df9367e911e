/* Unit tests of GROUP_FETCH's skip report in proto/: the request's flags
 * byte (present only when not 0, unknown bits refused both ways, the old
 * body unchanged) and the answer's skip tail (round trip with and without
 * messages, short, inconsistent and trailing tails refused). */
#include <criterion/criterion.h>
#include <string.h>

#include <proto.h>

/* Parse the single frame in w; *body borrows from it. */
static void parse(const struct tern_wbuf *w,
                  struct proto_header *h,
                  const uint8_t **body)
{
    const void *b = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &b), 0);
    *body = b;
}

Test(proto_group_skip, request_flag)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    const uint8_t *body;
    uint8_t copy[64];
    size_t old_len;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_group_fetch(&w, 1, "q", "g", 5, 99, 7), 0);
    parse(&w, &h, &body);
    old_len = h.body_len;
    cr_expect_eq(old_len, 2 + 1 + 2 + 1 + 4 + 4 + 4, "old body unchanged");
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, 0);

    w.len = 0;
    cr_assert_eq(proto_encode_group_fetch_flags(&w, 2, "q", "g", 5, 99, 7,
                                                PROTO_GROUP_FETCH_SKIPPED),
                 0);
    parse(&w, &h, &body);
    cr_expect_eq(h.body_len, old_len + 1);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, PROTO_GROUP_FETCH_SKIPPED);
    cr_expect_eq(r.max_msgs, 5);
    cr_expect_eq(r.max_bytes, 99);
    cr_expect_eq(r.wait_ms, 7);
    cr_expect_eq(r.group_len, 1);

    cr_assert_leq(h.body_len + 1, sizeof copy);
    memcpy(copy, body, h.body_len);
    copy[h.body_len - 1] = 0x08; /* unknown bit (0x02, 0x04: properties) */
    cr_expect_eq(
        proto_decode_request(PROTO_OP_GROUP_FETCH, copy, h.body_len, &r),
        TERN_EMALFORMED);
    copy[h.body_len - 1] = 0; /* 0 is written by leaving the byte out */
    cr_expect_eq(
        proto_decode_request(PROTO_OP_GROUP_FETCH, copy, h.body_len, &r),
        TERN_EMALFORMED);
    copy[h.body_len - 1] = PROTO_GROUP_FETCH_SKIPPED;
    copy[h.body_len] = 0; /* a second trailing byte */
    cr_expect_eq(
        proto_decode_request(PROTO_OP_GROUP_FETCH, copy, h.body_len + 1, &r),
        TERN_EMALFORMED);

    w.len = 0;
    cr_expect_eq(proto_encode_group_fetch_flags(&w, 3, "q", "g", 1, 1, 0, 0x80),
                 TERN_EINVAL);
    cr_expect_eq(w.len, 0, "nothing written");
    tern_wbuf_free(&w);
}

Test(proto_group_skip, answer_tail_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    const uint8_t *body;
    struct proto_fetch_resp fr;
    struct proto_fetched_msg m[2] = {{40, 1000, "ab", 2, NULL, 0},
                                     {41, 1001, "c", 1, NULL, 0}};
    struct proto_fetched_msg got;
    struct proto_group_skip s = {.skipped = 37, .first_offset = 40};
    struct proto_group_skip back;
    size_t fetch_len = 0;
    size_t pos = 0;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_group_fetch_skip_resp(&w, 9, 42, 50, m, 2, &s),
                 0);
    parse(&w, &h, &body);
    cr_expect_eq(h.op, PROTO_OP_GROUP_FETCH | PROTO_OP_RESPONSE);
    cr_expect_eq(h.request_id, 9);
    cr_assert_eq(
        proto_decode_group_fetch_resp(body, h.body_len, &fr, &back, &fetch_len),
        0);
    cr_expect_eq(back.skipped, 37);
    cr_expect_eq(back.first_offset, 40);
    cr_expect_eq(fetch_len, h.body_len - PROTO_GROUP_SKIP_SIZE);
    cr_expect_eq(fr.next_offset, 42);
    cr_expect_eq(fr.end_offset, 50);
    cr_assert_eq(fr.n, 2);
    cr_assert_eq(proto_next_fetched(&fr, &pos, &got), 1);
    cr_expect_eq(got.offset, 40);
    cr_expect_eq(got.len, 2);
    cr_expect_eq(memcmp(got.data, "ab", 2), 0);
    cr_assert_eq(proto_next_fetched(&fr, &pos, &got), 1);
    cr_expect_eq(got.offset, 41);
    cr_expect_eq(proto_next_fetched(&fr, &pos, &got), 0);
    /* Without the tail it is not a plain fetch answer either. */
    cr_expect_eq(proto_decode_fetch_resp(body, h.body_len, &fr),
                 TERN_EMALFORMED);

    /* An empty answer still names where it starts. */
    w.len = 0;
    s.skipped = 0;
    s.first_offset = 12;
    cr_assert_eq(
        proto_encode_group_fetch_skip_resp(&w, 10, 12, 12, NULL, 0, &s), 0);
    parse(&w, &h, &body);
    cr_expect_eq(h.body_len, 8 + 8 + 4 + PROTO_GROUP_SKIP_SIZE);
    cr_assert_eq(
        proto_decode_group_fetch_resp(body, h.body_len, &fr, &back, NULL), 0);
    cr_expect_eq(back.skipped, 0);
    cr_expect_eq(back.first_offset, 12);
    cr_expect_eq(fr.n, 0);
    cr_expect_eq(fr.next_offset, 12);
    tern_wbuf_free(&w);
}

Test(proto_group_skip, answer_tail_refused)
{
    struct tern_wbuf w;
    struct proto_header h;
    const uint8_t *body;
    struct proto_fetch_resp fr;
    struct proto_group_skip s = {.skipped = 3, .first_offset = 5};
    struct proto_group_skip back;
    uint8_t copy[128];
    size_t fetch_len = 99;
    tern_wbuf_init(&w);

    /* A plain fetch answer (an older server) is too short or torn. */
    cr_assert_eq(
        proto_encode_fetch_resp(&w, PROTO_OP_GROUP_FETCH, 1, 5, 5, NULL, 0), 0);
    parse(&w, &h, &body);
    cr_expect_eq(
        proto_decode_group_fetch_resp(body, h.body_len, &fr, &back, &fetch_len),
        TERN_EMALFORMED);
    cr_expect_eq(fetch_len, 0);
    cr_expect_eq(back.first_offset, 0);

    w.len = 0;
    cr_assert_eq(proto_encode_group_fetch_skip_resp(&w, 2, 5, 5, NULL, 0, &s),
                 0);
    parse(&w, &h, &body);
    cr_assert_leq(h.body_len + 1, sizeof copy);
    memcpy(copy, body, h.body_len);
    /* A trailing byte shifts the tail: the fetch part no longer parses. */
    copy[h.body_len] = 0;
    cr_expect_eq(
        proto_decode_group_fetch_resp(copy, h.body_len + 1, &fr, &back, NULL),
        TERN_EMALFORMED);
    /* skipped above first_offset: the committed offset would be negative. */
    tern_put_u64(copy + h.body_len - PROTO_GROUP_SKIP_SIZE, 6);
    cr_expect_eq(
        proto_decode_group_fetch_resp(copy, h.body_len, &fr, &back, NULL),
        TERN_EMALFORMED);
    cr_expect_eq(back.skipped, 0);
    for (size_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_group_fetch_resp(body, n, &fr, &back, NULL),
                     TERN_EMALFORMED, "truncated to %zu bytes", n);
    }
    tern_wbuf_free(&w);
}

/* The skip request together with the properties flag and a tag filter:
 * the request carries all three bits and the tags, and the answer with
 * properties ends with the skip tail (after the queue id). */
Test(proto_group_skip, with_props_and_tags)
{
    static const char *const tags[2] = {"paid", "refund"};
    struct proto_fetch_filter f = {
        PROTO_GROUP_FETCH_SKIPPED | PROTO_FETCH_PROPS, tags, 2};
    struct proto_group_skip s = {3, 10};
    struct proto_fetched_msg m = {10, 1000, "ab", 2, "P", 1};
    struct proto_fetched_msg got;
    struct proto_fetch_resp fr;
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    const uint8_t *body;
    const char *t;
    uint8_t tl;
    size_t pos = 0;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_fetch_filtered(&w, 1, "q", "g", 0, 5, 99, 7, &f),
                 0);
    parse(&w, &h, &body);
    cr_expect_eq(h.op, PROTO_OP_GROUP_FETCH);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, PROTO_GROUP_FETCH_SKIPPED | PROTO_FETCH_PROPS |
                              PROTO_FETCH_TAGS);
    cr_assert_eq(r.n_tags, 2);
    cr_assert_eq(proto_next_tag(&r, &pos, &t, &tl), 1);
    cr_expect(tl == 4 && memcmp(t, "paid", 4) == 0);
    cr_assert_eq(proto_next_tag(&r, &pos, &t, &tl), 1);
    cr_expect(tl == 6 && memcmp(t, "refund", 6) == 0);
    cr_expect_eq(proto_next_tag(&r, &pos, &t, &tl), 0);

    /* The answer as the server builds it: the tail goes last. */
    w.len = 0;
    cr_assert_eq(proto_encode_fetch_props_resp(&w, PROTO_OP_GROUP_FETCH, 2, 11,
                                               12, &m, 1, 77),
                 0);
    proto_put_group_skip(&w, &s);
    cr_assert_eq(proto_frame_end(&w, 0), 0);
    parse(&w, &h, &body);
    cr_assert_gt(h.body_len, PROTO_GROUP_SKIP_SIZE);
    cr_expect_eq(tern_get_u64(body + h.body_len - 16), 3, "skipped");
    cr_expect_eq(tern_get_u64(body + h.body_len - 8), 10, "first_offset");
    cr_assert_eq(proto_decode_fetch_props_resp(
                     body, h.body_len - PROTO_GROUP_SKIP_SIZE, &fr),
                 0);
    cr_expect_eq(fr.queue_id, 77);
    cr_expect_eq(fr.next_offset, 11);
    pos = 0;
    cr_assert_eq(proto_next_fetched(&fr, &pos, &got), 1);
    cr_expect_eq(got.offset, 10);
    cr_expect(got.props_len == 1 && memcmp(got.props, "P", 1) == 0);
    tern_wbuf_free(&w);
}
