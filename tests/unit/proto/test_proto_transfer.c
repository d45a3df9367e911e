/* Unit tests of CLUSTER_TRANSFER (op 33) in proto/: the request (a
 * target id, or 0 for any voter) and its answer, and the decoders'
 * refusals of truncated bodies, trailing bytes and an answer without a
 * leader. */
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

Test(proto_transfer, request_round_trip)
{
    static const uint64_t ids[] = {0, 3, 0x100000002ULL};
    for (unsigned i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        struct tern_wbuf w;
        struct proto_request r;
        struct proto_header h;
        const void *body = NULL;
        uint8_t longer[16];
        tern_wbuf_init(&w);
        cr_assert_eq(proto_encode_cluster_transfer(&w, 41 + i, ids[i]), 0);
        cr_assert_eq(
            proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body),
            0);
        cr_expect_eq(h.op, PROTO_OP_CLUSTER_TRANSFER);
        cr_expect_eq(h.request_id, 41 + i);
        cr_expect_eq(h.body_len, 8);
        cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
        cr_expect_eq(r.op, PROTO_OP_CLUSTER_TRANSFER);
        cr_expect_eq(r.to_id, ids[i]);
        for (uint32_t n = 0; n < h.body_len; n++) {
            cr_expect_eq(
                proto_decode_request(PROTO_OP_CLUSTER_TRANSFER, body, n, &r),
                TERN_EMALFORMED, "length %u", n);
        }
        memcpy(longer, body, 8);
        longer[8] = 0;
        cr_expect_eq(
            proto_decode_request(PROTO_OP_CLUSTER_TRANSFER, longer, 9, &r),
            TERN_EMALFORMED);
        cr_expect_eq(r.to_id, 0, "a refused body leaves no field set");
        tern_wbuf_free(&w);
    }
}

Test(proto_transfer, answer_round_trip_and_refusals)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *body = NULL;
    uint64_t leader = 9, term = 9;
    uint8_t b[17];
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_cluster_transfer_resp(&w, 7, 2, 0x1234), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body), 0);
    cr_expect_eq(h.op, PROTO_OP_CLUSTER_TRANSFER | PROTO_OP_RESPONSE);
    cr_expect_eq(h.body_len, 16);
    cr_assert_eq(
        proto_decode_cluster_transfer_resp(body, h.body_len, &leader, &term),
        0);
    cr_expect(leader == 2 && term == 0x1234);
    cr_expect_eq(proto_decode_cluster_transfer_resp(body, 15, &leader, &term),
                 TERN_EMALFORMED);
    memcpy(b, body, 16);
    b[16] = 0;
    cr_expect_eq(proto_decode_cluster_transfer_resp(b, 17, &leader, &term),
                 TERN_EMALFORMED);
    memset(b, 0, 8); /* leader 0: no new leader is not a completed transfer */
    cr_expect_eq(proto_decode_cluster_transfer_resp(b, 16, &leader, &term),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
}
