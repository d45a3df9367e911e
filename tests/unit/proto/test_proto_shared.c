/* Unit tests of the shared group ops in proto/ (SHARED_CONFIG, RECEIVE,
 * SETTLE): request round trips, the encoders' and decoders' refusals
 * (masks, counts, order of offsets, actions, truncation) and the RECEIVE
 * and SETTLE answers read back. */
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

Test(proto_shared, config_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    struct proto_shared_settings s = {.ack_timeout_ms = 5000,
                                      .max_deliveries = 3,
                                      .window = 99,
                                      .dlq = "dead.letters"};
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_shared_config(
                     &w, 9, "jobs", "workers",
                     PROTO_SHARED_SET_ACK_TIMEOUT |
                         PROTO_SHARED_SET_MAX_DELIVERIES | PROTO_SHARED_SET_DLQ,
                     &s),
                 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_SHARED_CONFIG);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect(r.group_len == 7 && memcmp(r.group, "workers", 7) == 0);
    cr_expect_eq(r.set_mask, PROTO_SHARED_SET_ACK_TIMEOUT |
                                 PROTO_SHARED_SET_MAX_DELIVERIES |
                                 PROTO_SHARED_SET_DLQ);
    cr_expect_eq(r.shared.ack_timeout_ms, 5000);
    cr_expect_eq(r.shared.max_deliveries, 3);
    cr_expect_eq(r.shared.window, 0, "outside the mask: sent as 0");
    cr_expect(r.shared.dlq_len == 12 &&
              memcmp(r.shared.dlq, "dead.letters", 12) == 0);
    cr_expect_eq(proto_decode_request(h.op, body, h.body_len - 1, &r),
                 TERN_EMALFORMED);

    /* mask 0: create with the defaults, no settings struct needed. */
    w.len = 0;
    cr_assert_eq(proto_encode_shared_config(&w, 1, "jobs", "g", 0, NULL), 0);
    body = parse(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.set_mask, 0);
    cr_expect_eq(r.shared.dlq_len, 0);

    w.len = 0;
    cr_expect_eq(proto_encode_shared_config(&w, 1, "jobs", "g", 0x10, &s),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_shared_config(&w, 1, "jobs", "g", 1, NULL),
                 TERN_EINVAL);
    s.dlq = "bad name";
    cr_expect_eq(proto_encode_shared_config(&w, 1, "jobs", "g",
                                            PROTO_SHARED_SET_DLQ, &s),
                 TERN_EBADNAME);
    tern_wbuf_free(&w);
}

Test(proto_shared, config_fields_outside_mask_refused)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_shared_config(&w, 1, "q", "g", 0, NULL), 0);
    const uint8_t *body = parse(&w, &h);
    uint8_t copy[256];
    cr_assert_lt(h.body_len, sizeof copy);
    memcpy(copy, body, h.body_len);
    /* body: str q (3), str g (3), u32 mask, u64 ack_timeout: set a
     * timeout without its mask bit. */
    copy[3 + 3 + 4] = 7;
    cr_expect_eq(proto_decode_request(h.op, copy, h.body_len, &r),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto_shared, receive_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_receive(&w, 3, "jobs", "workers", 0x77, 100, 2500), 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_RECEIVE);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.consumer_id, 0x77);
    cr_expect_eq(r.max_msgs, 100);
    cr_expect_eq(r.wait_ms, 2500);
    for (uint32_t cut = 0; cut < h.body_len; cut++) {
        cr_expect_neq(proto_decode_request(h.op, body, cut, &r), 0);
    }
    w.len = 0;
    cr_expect_eq(proto_encode_receive(&w, 3, "jobs", "g", 0, 1, 0),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_receive(&w, 3, "jobs", "g", 1, 0, 0),
                 TERN_EINVAL);
    cr_expect_eq(proto_encode_receive(&w, 3, "jobs", "g", 1,
                                      PROTO_SHARED_LIST_MAX + 1, 0),
                 TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto_shared, settle_round_trip_and_refusals)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    struct proto_settle_item it[3] = {
        {.offset = 4, .count = 1, .action = PROTO_SETTLE_ACK},
        {.offset = 9, .count = 2, .action = PROTO_SETTLE_NACK, .delay_ms = 50},
        {.offset = 10,
         .count = 1,
         .action = PROTO_SETTLE_EXTEND,
         .delay_ms = 60000},
    };
    struct proto_settle_item got;
    size_t pos = 0;
    uint32_t n = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_settle(&w, 4, "jobs", "workers", it, 3), 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.n_items, 3);
    while (proto_next_settle(&r, &pos, &got)) {
        cr_expect_eq(got.offset, it[n].offset);
        cr_expect_eq(got.count, it[n].count);
        cr_expect_eq(got.action, it[n].action);
        cr_expect_eq(got.delay_ms, it[n].delay_ms);
        n++;
    }
    cr_expect_eq(n, 3);

    w.len = 0;
    cr_expect_eq(proto_encode_settle(&w, 4, "jobs", "g", it, 0), TERN_EINVAL);
    it[1].offset = 4; /* not increasing */
    cr_expect_eq(proto_encode_settle(&w, 4, "jobs", "g", it, 3), TERN_EINVAL);
    it[1].offset = 9;
    it[0].delay_ms = 5; /* an ack has no delay */
    cr_expect_eq(proto_encode_settle(&w, 4, "jobs", "g", it, 3), TERN_EINVAL);
    it[0].delay_ms = 0;
    it[2].action = 5;
    cr_expect_eq(proto_encode_settle(&w, 4, "jobs", "g", it, 3), TERN_EINVAL);
    /* A retry takes its delay from the leader's levels: none given. */
    it[2].action = PROTO_SETTLE_RETRY;
    cr_expect_eq(proto_encode_settle(&w, 4, "jobs", "g", it, 3), TERN_EINVAL);
    it[2].delay_ms = 0;
    cr_expect_eq(proto_encode_settle(&w, 4, "jobs", "g", it, 3), 0);
    tern_wbuf_free(&w);
}

Test(proto_shared, receive_answer)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_fetch_resp fr;
    struct proto_fetched_msg m = {.offset = 12,
                                  .timestamp_ms = 1700000000000ull,
                                  .data = "hello",
                                  .len = 5,
                                  .props = "",
                                  .props_len = 0};
    struct proto_fetched_msg got;
    size_t pos = 0;
    tern_wbuf_init(&w);
    size_t start = proto_receive_begin(&w, 8, 0x55);
    proto_put_received(&w, &m, 3);
    m.offset = 13;
    proto_put_received(&w, &m, 1);
    cr_assert_eq(proto_receive_end(&w, start, 2), 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_RECEIVE | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_receive_resp(body, h.body_len, &fr), 0);
    cr_expect_eq(fr.queue_id, 0x55);
    cr_expect_eq(fr.n, 2);
    uint32_t count = 0;
    cr_assert(proto_next_received(&fr, &pos, &got, &count));
    cr_expect_eq(got.offset, 12);
    cr_expect_eq(count, 3);
    cr_expect(got.len == 5 && memcmp(got.data, "hello", 5) == 0);
    cr_assert(proto_next_received(&fr, &pos, &got, &count));
    cr_expect_eq(got.offset, 13);
    cr_expect_eq(count, 1);
    cr_expect_eq(proto_next_received(&fr, &pos, &got, &count), 0);
    pos = 0;
    cr_expect(proto_next_fetched(&fr, &pos, &got) && got.offset == 12);
    for (uint32_t cut = 0; cut < h.body_len; cut++) {
        cr_expect_eq(proto_decode_receive_resp(body, cut, &fr),
                     TERN_EMALFORMED);
    }
    tern_wbuf_free(&w);
}

Test(proto_shared, settle_answer)
{
    struct tern_wbuf w;
    struct proto_header h;
    const uint8_t done[3] = {1, 0, 1};
    const uint8_t *got;
    uint32_t n;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_settle_resp(&w, 2, done, 3), 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(proto_decode_settle_resp(body, h.body_len, &got, &n), 0);
    cr_expect_eq(n, 3);
    cr_expect(memcmp(got, done, 3) == 0);
    cr_expect_eq(proto_decode_settle_resp(body, h.body_len - 1, &got, &n),
                 TERN_EMALFORMED);
    uint8_t bad[7];
    memcpy(bad, body, 7);
    bad[5] = 2; /* neither done nor stale */
    cr_expect_eq(proto_decode_settle_resp(bad, 7, &got, &n), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}
