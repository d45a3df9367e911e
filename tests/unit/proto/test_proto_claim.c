/* Unit tests of CLAIM (op 30) in proto/: the request (acquire with a
 * lease or the server's default, release), its answer, and the
 * refusals of encoder and decoder (unknown action, a release with a
 * lease, consumer id 0, bad names, truncated bodies, trailing bytes, granted
 * above 1). */
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

static int decode_frame(const struct tern_wbuf *w,
                        struct proto_request *r,
                        struct proto_header *h,
                        const uint8_t **body)
{
    const void *b = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &b), 0);
    *body = b;
    return proto_decode_request(h->op, b, h->body_len, r);
}

Test(proto_claim, request_round_trip)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_header h;
    const uint8_t *body;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_claim(&w, 9, "orders", "billing", 0x100000003ULL,
                                    PROTO_CLAIM_ACQUIRE, 2000),
                 0);
    cr_assert_eq(decode_frame(&w, &r, &h, &body), 0);
    cr_expect_eq(h.op, PROTO_OP_CLAIM);
    cr_expect_eq(h.request_id, 9);
    cr_expect(r.queue_len == 6 && memcmp(r.queue, "orders", 6) == 0);
    cr_expect(r.group_len == 7 && memcmp(r.group, "billing", 7) == 0);
    cr_expect_eq(r.consumer_id, 0x100000003ULL);
    cr_expect_eq(r.flags, PROTO_CLAIM_ACQUIRE);
    cr_expect_eq(r.lease_ms, 2000);
    /* Every truncation is refused, and so is a trailing byte. */
    for (uint32_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_request(PROTO_OP_CLAIM, body, n, &r),
                     TERN_EMALFORMED, "length %u", n);
    }
    uint8_t longer[64];
    cr_assert_lt(h.body_len + 1, sizeof longer);
    memcpy(longer, body, h.body_len);
    longer[h.body_len] = 0;
    cr_expect_eq(
        proto_decode_request(PROTO_OP_CLAIM, longer, h.body_len + 1, &r),
        TERN_EMALFORMED);
    /* An unknown action byte (the one before the lease). */
    memcpy(longer, body, h.body_len);
    longer[h.body_len - 5] = 3;
    cr_expect_eq(proto_decode_request(PROTO_OP_CLAIM, longer, h.body_len, &r),
                 TERN_EMALFORMED);

    /* Acquire with lease 0 (the server's default) and a release. */
    w.len = 0;
    cr_assert_eq(
        proto_encode_claim(&w, 10, "q", "g", 5, PROTO_CLAIM_ACQUIRE, 0), 0);
    cr_assert_eq(decode_frame(&w, &r, &h, &body), 0);
    cr_expect(r.flags == PROTO_CLAIM_ACQUIRE && r.lease_ms == 0);
    w.len = 0;
    cr_assert_eq(
        proto_encode_claim(&w, 11, "q", "g", 5, PROTO_CLAIM_RELEASE, 0), 0);
    cr_assert_eq(decode_frame(&w, &r, &h, &body), 0);
    cr_expect(r.flags == PROTO_CLAIM_RELEASE && r.lease_ms == 0);
    /* A release with a lease, decoded: refused. */
    memcpy(longer, body, h.body_len);
    longer[h.body_len - 4] = 1;
    cr_expect_eq(proto_decode_request(PROTO_OP_CLAIM, longer, h.body_len, &r),
                 TERN_EMALFORMED);
    /* Consumer id 0 (the 8 bytes before the action), decoded: refused,
     * whatever the action (found by fuzz_proto_frames). */
    for (uint8_t action = 0; action < 3; action++) {
        memcpy(longer, body, h.body_len);
        memset(longer + h.body_len - 13, 0, 8);
        longer[h.body_len - 5] = action;
        cr_expect_eq(
            proto_decode_request(PROTO_OP_CLAIM, longer, h.body_len, &r),
            TERN_EMALFORMED, "action %u", action);
    }
    tern_wbuf_free(&w);
}

Test(proto_claim, encoder_refusals)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    cr_expect_eq(proto_encode_claim(&w, 1, "q", "g", 5, 0, 10), TERN_EINVAL);
    cr_expect_eq(proto_encode_claim(&w, 1, "q", "g", 5, 3, 10), TERN_EINVAL);
    cr_expect_eq(
        proto_encode_claim(&w, 1, "q", "g", 0, PROTO_CLAIM_ACQUIRE, 10),
        TERN_EINVAL);
    cr_expect_eq(
        proto_encode_claim(&w, 1, "q", "g", 5, PROTO_CLAIM_RELEASE, 10),
        TERN_EINVAL);
    cr_expect_eq(w.len, 0, "nothing written");
    cr_expect_eq(
        proto_encode_claim(&w, 1, "bad name", "g", 5, PROTO_CLAIM_ACQUIRE, 10),
        TERN_EBADNAME);
    tern_wbuf_free(&w);
}

Test(proto_claim, answer_round_trip_and_refusals)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *body = NULL;
    uint8_t granted = 9;
    uint64_t holder = 0, until = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_claim_resp(&w, 4, 1, 0x100000007ULL, 123456), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body), 0);
    cr_expect_eq(h.op, PROTO_OP_CLAIM | PROTO_OP_RESPONSE);
    cr_expect_eq(h.body_len, 17);
    cr_assert_eq(
        proto_decode_claim_resp(body, h.body_len, &granted, &holder, &until),
        0);
    cr_expect(granted == 1 && holder == 0x100000007ULL && until == 123456);
    cr_expect_eq(proto_decode_claim_resp(body, 16, &granted, &holder, &until),
                 TERN_EMALFORMED);
    cr_expect(granted == 0 && holder == 0 && until == 0, "zeroed");
    uint8_t b[17];
    memcpy(b, body, 17);
    b[0] = 2;
    cr_expect_eq(proto_decode_claim_resp(b, 17, &granted, &holder, &until),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_encode_claim_resp(&w, 4, 2, 1, 1), TERN_EINVAL);
    tern_wbuf_free(&w);
}
