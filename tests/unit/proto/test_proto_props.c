/* Unit tests of the message property ops of proto/: PRODUCE with the
 * properties tail, FETCH / GROUP_FETCH flags and tag filter, the answers
 * with properties, MESSAGE_GET, and the decoders' refusals (bad flags,
 * bad tags, empty tails, truncated bodies). */
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

static int decode(const struct tern_wbuf *w, struct proto_request *r)
{
    struct proto_header h;
    const uint8_t *body = parse(w, &h);
    return proto_decode_request(h.op, body, h.body_len, r);
}

struct pm
{
    const char *data;
    const char *props; /* NULL: none */
};

static void pm_at(const void *msgs,
                  uint32_t i,
                  struct proto_msg *m,
                  struct proto_msg *p)
{
    const struct pm *x = (const struct pm *)msgs + i;
    m->data = x->data;
    m->len = (uint32_t)strlen(x->data);
    p->data = x->props;
    p->len = x->props != NULL ? (uint32_t)strlen(x->props) : 0;
}

Test(proto_props, produce_tail_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_msg m;
    struct pm in[3] = {{"a", "PROPS-A"}, {"bb", NULL}, {"ccc", "P-C"}};
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_produce_props(&w, 1, "q", 7, 3, pm_at, in, 3), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.n_msgs, 3);
    cr_assert_neq(r.props_len, 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(proto_next_props(&r, &pos, &m), 1);
        size_t want = in[i].props != NULL ? strlen(in[i].props) : 0;
        cr_expect_eq(m.len, want);
        cr_expect(want == 0 || memcmp(m.data, in[i].props, want) == 0);
    }
    cr_expect_eq(proto_next_props(&r, &pos, &m), 0);
    /* producer id and seq can still be rewritten in place */
    cr_assert_eq(proto_frame_set_producer(w.base, w.len, 99, 4), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.producer_id, 99);
    cr_expect_eq(r.seq, 4);
    /* without any properties: the old bytes, no tail */
    struct pm plain[2] = {{"a", NULL}, {"b", NULL}};
    struct tern_wbuf v;
    struct proto_msg pms[2] = {{"a", 1}, {"b", 1}};
    tern_wbuf_init(&v);
    w.len = 0;
    cr_assert_eq(proto_encode_produce_props(&w, 1, "q", 0, 0, pm_at, plain, 2),
                 0);
    cr_assert_eq(proto_encode_produce(&v, 1, "q", 0, 0, pms, 2), 0);
    cr_expect_eq(w.len, v.len);
    cr_expect_eq(memcmp(w.base, v.base, w.len), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.props_len, 0);
    tern_wbuf_free(&v);
    tern_wbuf_free(&w);
}

/* Re-frame body[0..len) as op and decode it. */
static int decode_body(uint8_t op, const uint8_t *body, size_t len)
{
    struct proto_request r;
    return proto_decode_request(op, body, len, &r);
}

Test(proto_props, produce_tail_refusals)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct pm in[2] = {{"a", "P"}, {"b", NULL}};
    uint8_t buf[256];
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_produce_props(&w, 1, "q", 0, 0, pm_at, in, 2), 0);
    const uint8_t *body = parse(&w, &h);
    size_t n = h.body_len;
    memcpy(buf, body, n);
    /* body: str q (3), u64, u64, u32 n, blob a (5), blob b (5), u8 flags,
     * blob P (5), blob "" (4) */
    size_t flags_at = 3 + 8 + 8 + 4 + 5 + 5;
    cr_assert_eq(buf[flags_at], PROTO_PRODUCE_PROPS);
    buf[flags_at] = 2;
    cr_expect_eq(decode_body(PROTO_OP_PRODUCE, buf, n), TERN_EMALFORMED);
    buf[flags_at] = PROTO_PRODUCE_PROPS;
    for (size_t k = flags_at + 1; k < n; k++) {
        cr_expect_eq(decode_body(PROTO_OP_PRODUCE, buf, k), TERN_EMALFORMED,
                     "cut at %zu", k);
    }
    /* a tail of empty blocks only is not the one encoding */
    uint8_t empty[64];
    memcpy(empty, buf, flags_at + 1);
    memset(empty + flags_at + 1, 0, 8);
    cr_expect_eq(decode_body(PROTO_OP_PRODUCE, empty, flags_at + 9),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto_props, fetch_filter_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    const char *tags[2] = {"paid", "refund.v2"};
    struct proto_fetch_filter f = {PROTO_FETCH_PROPS, tags, 2};
    const char *t;
    uint8_t tl;
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_fetch_filtered(&w, 1, "q", NULL, 5, 10, 100, 0, &f), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.op, PROTO_OP_FETCH);
    cr_expect_eq(r.offset, 5);
    cr_expect_eq(r.flags, PROTO_FETCH_PROPS | PROTO_FETCH_TAGS);
    cr_expect_eq(r.n_tags, 2);
    cr_assert_eq(proto_next_tag(&r, &pos, &t, &tl), 1);
    cr_expect(tl == 4 && memcmp(t, "paid", 4) == 0);
    cr_assert_eq(proto_next_tag(&r, &pos, &t, &tl), 1);
    cr_expect(tl == 9 && memcmp(t, "refund.v2", 9) == 0);
    cr_expect_eq(proto_next_tag(&r, &pos, &t, &tl), 0);
    /* group fetch */
    w.len = 0;
    cr_assert_eq(
        proto_encode_fetch_filtered(&w, 1, "q", "g", 0, 10, 100, 50, &f), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.op, PROTO_OP_GROUP_FETCH);
    cr_expect_eq(r.n_tags, 2);
    cr_expect_eq(r.wait_ms, 50);
    /* no filter: the old bytes */
    struct tern_wbuf v;
    tern_wbuf_init(&v);
    w.len = 0;
    cr_assert_eq(
        proto_encode_fetch_filtered(&w, 1, "q", "g", 0, 10, 100, 50, NULL), 0);
    cr_assert_eq(proto_encode_group_fetch(&v, 1, "q", "g", 10, 100, 50), 0);
    cr_expect(w.len == v.len && memcmp(w.base, v.base, w.len) == 0);
    /* refusals */
    const char *bad[1] = {"a b"};
    struct proto_fetch_filter fb = {0, bad, 1};
    cr_expect_eq(proto_encode_fetch_filtered(&w, 1, "q", NULL, 0, 1, 1, 0, &fb),
                 TERN_EBADNAME);
    const char *many[17];
    for (int i = 0; i < 17; i++) {
        many[i] = "t";
    }
    struct proto_fetch_filter fm = {0, many, 17};
    cr_expect_eq(proto_encode_fetch_filtered(&w, 1, "q", NULL, 0, 1, 1, 0, &fm),
                 TERN_EINVAL);
    /* Bit 0 is the skip request on GROUP_FETCH; bit 3 is nobody's. */
    struct proto_fetch_filter fl = {0x08, NULL, 0};
    cr_expect_eq(proto_encode_fetch_filtered(&w, 1, "q", "g", 0, 1, 1, 0, &fl),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_fetch_filtered(&w, 1, "q", NULL, 0, 1, 1, 0, &fl),
                 TERN_EINVAL);
    tern_wbuf_free(&v);
    tern_wbuf_free(&w);
}

Test(proto_props, fetch_tail_refusals)
{
    /* FETCH body: str "q", u64, u32, u32, u32, then the tail */
    uint8_t b[64] = {1, 0, 'q'};
    size_t base = 3 + 8 + 12;
    b[base] = PROTO_FETCH_TAGS;
    b[base + 1] = 1;
    b[base + 2] = 1;
    b[base + 3] = 'x';
    cr_expect_eq(decode_body(PROTO_OP_FETCH, b, base + 4), 0);
    b[base + 3] = '|';
    cr_expect_eq(decode_body(PROTO_OP_FETCH, b, base + 4), TERN_EBADNAME);
    b[base + 3] = 'x';
    b[base + 1] = 0; /* no tags with the tags bit */
    cr_expect_eq(decode_body(PROTO_OP_FETCH, b, base + 2), TERN_EMALFORMED);
    b[base + 1] = 17;
    cr_expect_eq(decode_body(PROTO_OP_FETCH, b, base + 2), TERN_EMALFORMED);
    b[base] = 0x08; /* unknown bit */
    cr_expect_eq(decode_body(PROTO_OP_FETCH, b, base + 1), TERN_EMALFORMED);
    b[base] = 0; /* a zero flags byte is not the one encoding */
    cr_expect_eq(decode_body(PROTO_OP_FETCH, b, base + 1), TERN_EMALFORMED);
    /* GROUP_FETCH: str "q", str "g", u32 x3, flags: bit 0 is
     * PROTO_GROUP_FETCH_SKIPPED there, bit 3 unknown */
    uint8_t g[64] = {1, 0, 'q', 1, 0, 'g'};
    size_t gb = 6 + 12;
    g[gb] = 0x08;
    cr_expect_eq(decode_body(PROTO_OP_GROUP_FETCH, g, gb + 1), TERN_EMALFORMED);
    g[gb] = PROTO_GROUP_FETCH_SKIPPED | PROTO_FETCH_PROPS;
    cr_expect_eq(decode_body(PROTO_OP_GROUP_FETCH, g, gb + 1), 0);
    g[gb] = PROTO_FETCH_PROPS;
    cr_expect_eq(decode_body(PROTO_OP_GROUP_FETCH, g, gb + 1), 0);
}

Test(proto_props, props_answers_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_fetch_resp fr;
    struct proto_fetched_msg got;
    struct proto_fetched_msg fm[2] = {{10, 111, "hello", 5, "PR", 2},
                                      {11, 222, "x", 1, NULL, 0}};
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_fetch_props_resp(&w, PROTO_OP_FETCH, 3, 12, 20, fm, 2, 77),
        0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(proto_decode_fetch_props_resp(body, h.body_len, &fr), 0);
    cr_expect_eq(fr.queue_id, 77);
    cr_expect_eq(fr.next_offset, 12);
    cr_assert_eq(proto_next_fetched(&fr, &pos, &got), 1);
    cr_expect(got.props_len == 2 && memcmp(got.props, "PR", 2) == 0);
    cr_assert_eq(proto_next_fetched(&fr, &pos, &got), 1);
    cr_expect_eq(got.props_len, 0);
    cr_expect_eq(proto_next_fetched(&fr, &pos, &got), 0);
    for (size_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_fetch_props_resp(body, n, &fr),
                     TERN_EMALFORMED);
    }
    /* the old decoder refuses the new layout (trailing bytes) */
    cr_expect_eq(proto_decode_fetch_resp(body, h.body_len, &fr),
                 TERN_EMALFORMED);

    w.len = 0;
    cr_assert_eq(proto_encode_message_get_resp(&w, 4, 77, fm, 2), 0);
    body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_MESSAGE_GET | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_message_get_resp(body, h.body_len, &fr), 0);
    cr_expect_eq(fr.queue_id, 77);
    cr_expect_eq(fr.n, 2);
    pos = 0;
    cr_assert_eq(proto_next_fetched(&fr, &pos, &got), 1);
    cr_expect_eq(got.offset, 10);
    cr_expect(got.len == 5 && memcmp(got.data, "hello", 5) == 0);
    for (size_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_message_get_resp(body, n, &fr),
                     TERN_EMALFORMED);
    }
    tern_wbuf_free(&w);
}

Test(proto_props, message_get_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_message_get(&w, 1, "q", 0, 42, NULL, 0, 0), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.get_by, PROTO_GET_OFFSET);
    cr_expect_eq(r.offset, 42);
    w.len = 0;
    cr_assert_eq(proto_encode_message_get(&w, 1, "q", 9, 43, NULL, 0, 0), 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.get_by, PROTO_GET_ID);
    cr_expect_eq(r.queue_id, 9);
    cr_expect_eq(r.offset, 43);
    w.len = 0;
    cr_assert_eq(proto_encode_message_get(&w, 1, "q", 0, 0, "key\0bin", 7, 5),
                 0);
    cr_assert_eq(decode(&w, &r), 0);
    cr_expect_eq(r.get_by, PROTO_GET_KEY);
    cr_expect(r.key_len == 7 && memcmp(r.key, "key\0bin", 7) == 0);
    cr_expect_eq(r.max_count, 5);
    char big[PROTO_MAX_KEY + 1];
    memset(big, 'k', sizeof big);
    cr_expect_eq(proto_encode_message_get(&w, 1, "q", 0, 0, big, sizeof big, 1),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_message_get(&w, 1, "q", 0, 0, "k", 1, 0),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_message_get(&w, 1, "q", 0, 0, "k", 1,
                                          PROTO_MESSAGE_GET_MAX + 1),
                 TERN_EINVAL);
    /* unknown "by" */
    uint8_t b[16] = {1, 0, 'q', 9, 0, 0, 0, 0, 0, 0, 0, 0};
    cr_expect_eq(decode_body(PROTO_OP_MESSAGE_GET, b, 12), TERN_EMALFORMED);
    b[3] = PROTO_GET_OFFSET;
    cr_expect_eq(decode_body(PROTO_OP_MESSAGE_GET, b, 12), 0);
    cr_expect_eq(decode_body(PROTO_OP_MESSAGE_GET, b, 11), TERN_EMALFORMED);
    cr_expect_eq(decode_body(PROTO_OP_MESSAGE_GET, b, 13), TERN_EMALFORMED);
    /* by id: id 0 would spell "by offset" a second way */
    uint8_t c[20] = {1, 0, 'q', PROTO_GET_ID};
    cr_expect_eq(decode_body(PROTO_OP_MESSAGE_GET, c, 20), TERN_EMALFORMED);
    c[4] = 1; /* little-endian u64 queue id 1 */
    cr_expect_eq(decode_body(PROTO_OP_MESSAGE_GET, c, 20), 0);
    tern_wbuf_free(&w);
}
