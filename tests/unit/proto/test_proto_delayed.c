/* Unit tests of PRODUCE_DELAYED (op 31) in proto/: the request with a
 * delay and with a due time, with and without the properties tail, its
 * answer, and the decoder's refusals (no messages, a tail of empty
 * blocks, truncated bodies, trailing bytes). */
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

struct dm
{
    const char *data;
    const char *props; /* NULL: none */
};

static void dm_at(const void *msgs,
                  uint32_t i,
                  struct proto_msg *m,
                  struct proto_msg *p)
{
    const struct dm *x = (const struct dm *)msgs + i;
    m->data = x->data;
    m->len = (uint32_t)strlen(x->data);
    p->data = x->props;
    p->len = x->props != NULL ? (uint32_t)strlen(x->props) : 0;
}

static int decode_frame(const struct tern_wbuf *w,
                        struct proto_request *r,
                        struct proto_header *h)
{
    const void *body = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &body),
        0);
    return proto_decode_request(h->op, body, h->body_len, r);
}

Test(proto_delayed, delay_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    struct proto_msg m;
    struct dm in[2] = {{"one", NULL}, {"two!", NULL}};
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_produce_delayed(&w, 5, "jobs", 10000, 0, 0, dm_at, in, 2),
        0);
    cr_assert_eq(decode_frame(&w, &r, &h), 0);
    cr_expect_eq(h.op, PROTO_OP_PRODUCE_DELAYED);
    cr_expect_eq(h.request_id, 5);
    cr_expect_eq(r.queue_len, 4);
    cr_expect_eq(memcmp(r.queue, "jobs", 4), 0);
    cr_expect_eq(r.time_ms, 10000);
    cr_expect_eq(r.n_msgs, 2);
    cr_expect_eq(r.props_len, 0);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(proto_next_msg(&r, &pos, &m), 1);
        cr_expect_eq(m.len, strlen(in[i].data));
        cr_expect_eq(memcmp(m.data, in[i].data, m.len), 0);
    }
    cr_expect_eq(proto_next_msg(&r, &pos, &m), 0);
    tern_wbuf_free(&w);
}

Test(proto_delayed, due_time_with_props)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    struct proto_msg m;
    struct dm in[2] = {{"a", "PA"}, {"b", NULL}};
    uint64_t due = 1767000000000ull;
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_produce_delayed(&w, 1, "q", due | PROTO_DELAY_AT,
                                              0, 0, dm_at, in, 2),
                 0);
    cr_assert_eq(decode_frame(&w, &r, &h), 0);
    cr_expect_eq(r.time_ms & PROTO_DELAY_AT, PROTO_DELAY_AT);
    cr_expect_eq(r.time_ms & ~PROTO_DELAY_AT, due);
    cr_assert_neq(r.props_len, 0);
    cr_assert_eq(proto_next_props(&r, &pos, &m), 1);
    cr_expect_eq(m.len, 2);
    cr_expect_eq(memcmp(m.data, "PA", 2), 0);
    cr_assert_eq(proto_next_props(&r, &pos, &m), 1);
    cr_expect_eq(m.len, 0);
    cr_expect_eq(proto_next_props(&r, &pos, &m), 0);
    tern_wbuf_free(&w);
}

Test(proto_delayed, encoder_refusals)
{
    struct tern_wbuf w;
    struct dm in[1] = {{"a", NULL}};
    tern_wbuf_init(&w);
    cr_expect_eq(
        proto_encode_produce_delayed(&w, 1, "q", 1, 0, 0, dm_at, in, 0),
        TERN_EINVAL);
    cr_expect_eq(proto_encode_produce_delayed(&w, 1, "q", 1, 0, 0, NULL, in, 1),
                 TERN_EINVAL);
    cr_expect_eq(
        proto_encode_produce_delayed(&w, 1, "q", 1, 0, 0, dm_at, NULL, 1),
        TERN_EINVAL);
    cr_expect_eq(
        proto_encode_produce_delayed(&w, 1, "bad name", 1, 0, 0, dm_at, in, 1),
        TERN_EBADNAME);
    /* Bit 62 is the encoder's own flag; a producer id needs a seq. */
    cr_expect_eq(proto_encode_produce_delayed(&w, 1, "q", PROTO_DELAY_DEDUP, 0,
                                              0, dm_at, in, 1),
                 TERN_EINVAL);
    cr_expect_eq(
        proto_encode_produce_delayed(&w, 1, "q", 1, 77, 0, dm_at, in, 1),
        TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto_delayed, dedup_pair_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    struct proto_msg m;
    struct dm in[1] = {{"job", "P"}};
    uint64_t due = 1767000000000ull;
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_produce_delayed(&w, 3, "q", due | PROTO_DELAY_AT,
                                     (7ull << 32) | 2, 41, dm_at, in, 1),
        0);
    cr_assert_eq(decode_frame(&w, &r, &h), 0);
    cr_expect_eq(r.time_ms, due | PROTO_DELAY_AT);
    cr_expect_eq(r.producer_id, (7ull << 32) | 2);
    cr_expect_eq(r.seq, 41);
    cr_expect_eq(r.n_msgs, 1);
    cr_assert_eq(proto_next_msg(&r, &pos, &m), 1);
    cr_expect_eq(m.len, 3);
    cr_expect_eq(memcmp(m.data, "job", 3), 0);
    pos = 0;
    cr_assert_eq(proto_next_props(&r, &pos, &m), 1);
    cr_expect_eq(m.len, 1);
    tern_wbuf_free(&w);
    /* Without the pair the fields decode as 0 (no dedup). */
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_produce_delayed(&w, 4, "q", 500, 0, 0, dm_at, in, 1), 0);
    cr_assert_eq(decode_frame(&w, &r, &h), 0);
    cr_expect_eq(r.time_ms, 500);
    cr_expect_eq(r.producer_id, 0);
    cr_expect_eq(r.seq, 0);
    tern_wbuf_free(&w);
}

Test(proto_delayed, dedup_flag_with_zero_pair_refused)
{
    /* A frame that sets bit 62 but carries producer id 0 is refused. */
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    struct dm in[1] = {{"j", NULL}};
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_produce_delayed(&w, 4, "q", 500, 9, 1, dm_at, in, 1), 0);
    const void *body = NULL;
    uint8_t copy[64];
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body), 0);
    cr_assert_leq(h.body_len, sizeof copy);
    memcpy(copy, body, h.body_len);
    /* body: str "q" (u16 len + 1 byte), u64 when, then the producer id */
    memset(copy + 2 + 1 + 8, 0, 8);
    cr_expect_eq(proto_decode_request(h.op, copy, h.body_len, &r), TERN_EINVAL);
    tern_wbuf_free(&w);
}

/* A hand-built body: str "q", u64 when, u32 n, n x blob "x", then extra
 * bytes (tail) of tail_len. */
static size_t body(uint8_t *b, uint32_t n, const uint8_t *tail, size_t tail_len)
{
    size_t o = 0;
    tern_put_u16(b + o, 1);
    b[o + 2] = 'q';
    o += 3;
    tern_put_u64(b + o, 250);
    o += 8;
    tern_put_u32(b + o, n);
    o += 4;
    for (uint32_t i = 0; i < n; i++) {
        tern_put_u32(b + o, 1);
        b[o + 4] = 'x';
        o += 5;
    }
    if (tail_len > 0) {
        memcpy(b + o, tail, tail_len);
    }
    return o + tail_len;
}

Test(proto_delayed, decoder_refusals)
{
    uint8_t b[128];
    struct proto_request r;
    static const uint8_t empty_tail[] = {PROTO_PRODUCE_PROPS, 0, 0, 0, 0};
    static const uint8_t bad_flag[] = {2, 0, 0, 0, 0};
    static const uint8_t one_prop[] = {PROTO_PRODUCE_PROPS, 1, 0, 0, 0, 'p'};
    size_t len = body(b, 1, NULL, 0);
    cr_expect_eq(proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, len, &r), 0);
    cr_expect_eq(r.time_ms, 250);
    len = body(b, 0, NULL, 0);
    cr_expect_eq(proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, len, &r),
                 TERN_EINVAL);
    len = body(b, 1, empty_tail, sizeof(empty_tail));
    cr_expect_eq(proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, len, &r),
                 TERN_EMALFORMED);
    len = body(b, 1, bad_flag, sizeof(bad_flag));
    cr_expect_eq(proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, len, &r),
                 TERN_EMALFORMED);
    len = body(b, 1, one_prop, sizeof(one_prop));
    cr_expect_eq(proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, len, &r), 0);
    cr_expect_eq(r.props_len, 5);
    /* every truncation of a good body is refused */
    len = body(b, 2, one_prop, 0);
    for (size_t cut = 0; cut < len; cut++) {
        cr_expect_neq(
            proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, cut, &r), 0,
            "cut at %zu", cut);
    }
    b[len] = 0;
    cr_expect_eq(proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, len + 1, &r),
                 TERN_EMALFORMED);
}

Test(proto_delayed, answer_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *bd = NULL;
    uint32_t count = 0;
    uint64_t due = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_produce_delayed_resp(&w, 9, 3, 123456789), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &bd), 0);
    cr_expect_eq(h.op, PROTO_OP_PRODUCE_DELAYED | PROTO_OP_RESPONSE);
    cr_assert_eq(
        proto_decode_produce_delayed_resp(bd, h.body_len, &count, &due), 0);
    cr_expect_eq(count, 3);
    cr_expect_eq(due, 123456789);
    cr_expect_eq(
        proto_decode_produce_delayed_resp(bd, h.body_len - 1, &count, &due),
        TERN_EMALFORMED);
    tern_wbuf_free(&w);
}
