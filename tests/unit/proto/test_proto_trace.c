/* Unit tests of MESSAGE_TRACE in proto/: the request round trip, the
 * answer built with proto_trace_begin / proto_put_trace_group /
 * proto_trace_end and read back with its groups, and the decoder's
 * refusals (every truncation, trailing bytes, bad more byte, bad tag,
 * position past the batch). */
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

Test(proto_trace, request_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_message_trace(&w, 5, "orders.eu", 1234567), 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_MESSAGE_TRACE);
    cr_expect_eq(h.request_id, 5);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect(r.queue_len == 9 && memcmp(r.queue, "orders.eu", 9) == 0);
    cr_expect_eq(r.offset, 1234567);
    cr_expect_eq(proto_decode_request(h.op, body, h.body_len - 1, &r),
                 TERN_EMALFORMED);
    w.len = 0;
    cr_expect_eq(proto_encode_message_trace(&w, 5, "bad name", 1),
                 TERN_EBADNAME);
    tern_wbuf_free(&w);
}

static size_t build_answer(struct tern_wbuf *w, uint32_t n_groups, int more)
{
    struct proto_trace t = {
        .queue_id = 0xabcdef,
        .offset = 41,
        .append_ms = 1700000000123ull,
        .producer_id = 0x100000002ull,
        .seq = 7,
        .batch_pos = 2,
        .batch_count = 3,
        .len = 99,
        .raft_index = 812,
        .term = 4,
        .key = "order\0x",
        .key_len = 7,
        .tag = "paid",
        .tag_len = 4,
    };
    static const char *names[3] = {"billing", "audit", "g"};
    size_t start = proto_trace_begin(w, 77, &t);
    for (uint32_t i = 0; i < n_groups; i++) {
        struct proto_trace_group g = {names[i], (uint16_t)strlen(names[i]),
                                      42 + i, 1700000000500ull + i, 900 + i};
        proto_put_trace_group(w, &g);
    }
    cr_assert_eq(proto_trace_end(w, start, n_groups, more), 0);
    return start;
}

Test(proto_trace, answer_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_trace t;
    struct proto_trace_group g;
    size_t pos = 0;
    tern_wbuf_init(&w);
    build_answer(&w, 3, 1);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_MESSAGE_TRACE | PROTO_OP_RESPONSE);
    cr_expect_eq(h.request_id, 77);
    cr_assert_eq(proto_decode_message_trace_resp(body, h.body_len, &t), 0);
    cr_expect_eq(t.queue_id, 0xabcdef);
    cr_expect_eq(t.offset, 41);
    cr_expect_eq(t.append_ms, 1700000000123ull);
    cr_expect_eq(t.producer_id, 0x100000002ull);
    cr_expect_eq(t.seq, 7);
    cr_expect_eq(t.batch_pos, 2);
    cr_expect_eq(t.batch_count, 3);
    cr_expect_eq(t.len, 99);
    cr_expect_eq(t.raft_index, 812);
    cr_expect_eq(t.term, 4);
    cr_expect(t.key_len == 7 && memcmp(t.key, "order\0x", 7) == 0);
    cr_expect(t.tag_len == 4 && memcmp(t.tag, "paid", 4) == 0);
    cr_expect_eq(t.n_groups, 3);
    cr_expect_eq(t.more, 1);
    cr_assert_eq(proto_next_trace_group(&t, &pos, &g), 1);
    cr_expect(g.name_len == 7 && memcmp(g.name, "billing", 7) == 0);
    cr_expect_eq(g.next_offset, 42);
    cr_expect_eq(g.commit_ms, 1700000000500ull);
    cr_expect_eq(g.commit_index, 900);
    cr_assert_eq(proto_next_trace_group(&t, &pos, &g), 1);
    cr_expect(g.name_len == 5 && memcmp(g.name, "audit", 5) == 0);
    cr_assert_eq(proto_next_trace_group(&t, &pos, &g), 1);
    cr_expect_eq(g.commit_index, 902);
    cr_expect_eq(proto_next_trace_group(&t, &pos, &g), 0);
    cr_expect_eq(proto_trace_group_size(7), 2 + 7 + 24);
    for (size_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_message_trace_resp(body, n, &t),
                     TERN_EMALFORMED, "truncated at %zu", n);
    }
    tern_wbuf_free(&w);
}

Test(proto_trace, answer_without_key_tag_or_groups)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_trace t = {.offset = 3, .batch_count = 1, .raft_index = 9};
    tern_wbuf_init(&w);
    size_t start = proto_trace_begin(&w, 1, &t);
    cr_assert_eq(proto_trace_end(&w, start, 0, 0), 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(proto_decode_message_trace_resp(body, h.body_len, &t), 0);
    cr_expect_eq(t.offset, 3);
    cr_expect_eq(t.raft_index, 9);
    cr_expect_eq(t.term, 0);
    cr_expect_eq(t.key_len, 0);
    cr_expect_null(t.key);
    cr_expect_eq(t.tag_len, 0);
    cr_expect_null(t.tag);
    cr_expect_eq(t.n_groups, 0);
    cr_expect_eq(t.more, 0);
    tern_wbuf_free(&w);
}

Test(proto_trace, decoder_refusals)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_trace t;
    uint8_t copy[1024];
    tern_wbuf_init(&w);
    build_answer(&w, 1, 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_lt(h.body_len + 1, sizeof copy);
    memcpy(copy, body, h.body_len);
    cr_assert_eq(proto_decode_message_trace_resp(copy, h.body_len, &t), 0);
    /* trailing byte */
    copy[h.body_len] = 0;
    cr_expect_eq(proto_decode_message_trace_resp(copy, h.body_len + 1, &t),
                 TERN_EMALFORMED);
    /* more byte other than 0/1 */
    copy[h.body_len - 1] = 2;
    cr_expect_eq(proto_decode_message_trace_resp(copy, h.body_len, &t),
                 TERN_EMALFORMED);
    copy[h.body_len - 1] = 0;
    /* a tag with a byte outside [A-Za-z0-9._-] (tag at 68 + 4 + 7 + 2) */
    copy[81] = ' ';
    cr_expect_eq(proto_decode_message_trace_resp(copy, h.body_len, &t),
                 TERN_EMALFORMED);
    copy[81] = 'p';
    /* position past the batch */
    tern_put_u32(copy + 40, 3);
    cr_expect_eq(proto_decode_message_trace_resp(copy, h.body_len, &t),
                 TERN_EMALFORMED);
    tern_put_u32(copy + 40, 2);
    cr_expect_eq(proto_decode_message_trace_resp(copy, h.body_len, &t), 0);
    /* a group name that is not a name */
    copy[h.body_len - 1 - 24 - 1] = '%';
    cr_expect_eq(proto_decode_message_trace_resp(copy, h.body_len, &t),
                 TERN_EMALFORMED);
    /* the encoder refuses a key over the bound */
    struct proto_trace big = {.key = copy, .key_len = PROTO_MAX_KEY + 1};
    w.len = 0;
    size_t start = proto_trace_begin(&w, 1, &big);
    cr_expect_eq(proto_trace_end(&w, start, 0, 0), TERN_EINVAL);
    tern_wbuf_free(&w);
}
