/* Unit tests of the retention ops of proto/ (QUEUE_CREATE's settings
 * tail, QUEUE_UPDATE, QUEUE_INFO, OFFSET_FOR_TIME): round trips, the old
 * QUEUE_CREATE body still decoding without settings, and the decoders'
 * answers to bad masks, bad overflow values and trailing bytes. */
#include <criterion/criterion.h>
#include <string.h>

#include <proto.h>

/* Parse the single frame in w; *body and *len borrow from it. */
static void parse(const struct tern_wbuf *w,
                  struct proto_header *h,
                  const void **body)
{
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, body), 0);
}

Test(proto_retention, create_with_and_without_settings)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *body;
    struct proto_request r;
    struct proto_queue_settings s = {.max_age_ms = 3600000,
                                     .max_bytes = 1 << 30,
                                     .max_messages = 10,
                                     .overflow = 1};
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_queue_create(&w, 7, "q1", &s), 0);
    parse(&w, &h, &body);
    cr_assert_eq(h.op, PROTO_OP_QUEUE_CREATE);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_assert_eq(r.has_settings, 1);
    cr_assert_eq(r.settings.max_age_ms, 3600000);
    cr_assert_eq(r.settings.max_bytes, 1 << 30);
    cr_assert_eq(r.settings.max_messages, 10);
    cr_assert_eq(r.settings.overflow, 1);
    cr_assert_eq(r.queue_len, 2);

    w.len = 0;
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 8, "q1"), 0);
    parse(&w, &h, &body);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_assert_eq(r.has_settings, 0, "an older client's body: no settings");

    s.overflow = 2;
    w.len = 0;
    cr_assert_eq(proto_encode_queue_create(&w, 9, "q1", &s), TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto_retention, update_round_trip_and_bad_masks)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *body;
    struct proto_request r;
    struct proto_queue_settings s = {.max_messages = 5};
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_queue_update(&w, 1, "q", PROTO_SET_MAX_MESSAGES, &s), 0);
    parse(&w, &h, &body);
    cr_assert_eq(h.op, PROTO_OP_QUEUE_UPDATE);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_assert_eq(r.set_mask, PROTO_SET_MAX_MESSAGES);
    cr_assert_eq(r.settings.max_messages, 5);
    /* mask 0 and unknown bits are malformed on the wire */
    uint8_t b[64];
    cr_assert_leq(h.body_len, sizeof b);
    memcpy(b, body, h.body_len);
    memset(b + 3, 0, 4); /* str "q" = u16 len + 1 byte, then the mask */
    cr_assert_eq(proto_decode_request(h.op, b, h.body_len, &r),
                 TERN_EMALFORMED);
    b[3] = 0x10;
    cr_assert_eq(proto_decode_request(h.op, b, h.body_len, &r),
                 TERN_EMALFORMED);
    cr_assert_eq(proto_encode_queue_update(&w, 1, "q", 0, &s), TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto_retention, info_and_offset_for_time)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *body;
    struct proto_request r;
    struct proto_queue_info_resp a = {.start_offset = 3,
                                      .next_offset = 9,
                                      .bytes = 60,
                                      .created_index = 4,
                                      .settings = {.max_age_ms = 1000}},
                                 b;
    uint64_t off = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_queue_info_req(&w, 2, "q"), 0);
    parse(&w, &h, &body);
    cr_assert_eq(
        proto_decode_request(PROTO_OP_QUEUE_INFO, body, h.body_len, &r), 0);
    cr_assert_eq(r.queue_len, 1);
    w.len = 0;
    cr_assert_eq(proto_encode_queue_info_resp(&w, 2, &a), 0);
    parse(&w, &h, &body);
    cr_assert_eq(h.op, PROTO_OP_QUEUE_INFO | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_queue_info_resp(body, h.body_len, &b), 0);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    cr_assert_eq(proto_decode_queue_info_resp(body, h.body_len - 1, &b),
                 TERN_EMALFORMED);

    w.len = 0;
    cr_assert_eq(proto_encode_offset_for_time(&w, 3, "q", 1700000000000ull), 0);
    parse(&w, &h, &body);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_assert_eq(r.time_ms, 1700000000000ull);
    w.len = 0;
    cr_assert_eq(proto_encode_offset_resp(&w, 3, 42), 0);
    parse(&w, &h, &body);
    cr_assert_eq(proto_decode_offset_resp(body, h.body_len, &off), 0);
    cr_assert_eq(off, 42);
    cr_assert_eq(proto_decode_offset_resp(body, 4, &off), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}
