/*
 * Unit tests of frame version 2 (proto.h, "Versions"): frames checksummed
 * with XXH3 round trip and catch every flipped bit, a version-1 frame
 * resealed as version 2 (libtern's send) and back, the two checksums
 * differ, an unknown version is never accepted, and HELLO round trips.
 */
#include <criterion/criterion.h>

#include <proto.h>

/* A FETCH answer of n messages of 100 bytes in frame version v. */
static void encode_answer(struct tern_wbuf *w, uint8_t v, uint32_t n)
{
    uint8_t payload[100];
    size_t start = w->len;
    memset(payload, 0xA5, sizeof payload);
    proto_frame_begin_v(w, v, PROTO_OP_FETCH | PROTO_OP_RESPONSE, 9, 0);
    tern_wbuf_u64(w, n);
    tern_wbuf_u64(w, n);
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        tern_wbuf_u64(w, i);
        tern_wbuf_u64(w, 1000 + i);
        proto_put_blob(w, payload, sizeof payload);
    }
    cr_assert_eq(proto_frame_end(w, start), 0);
}

Test(proto_xxh3, version_2_frames_round_trip_and_catch_flipped_bits)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_fetch_resp fr;
    const void *body;
    tern_wbuf_init(&w);
    encode_answer(&w, PROTO_VERSION_XXH3, 20);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body), 0);
    cr_expect_eq(h.version, PROTO_VERSION_XXH3);
    cr_expect_eq(proto_decode_fetch_resp(body, h.body_len, &fr), 0);
    cr_expect_eq(fr.n, 20);
    /* Every bit of the checked header and of the body counts. */
    for (size_t i = 0; i < w.len; i++) {
        if (i >= 20 && i < PROTO_HEADER_SIZE) {
            continue; /* the checksum field itself */
        }
        for (int bit = 0; bit < 8; bit += 3) {
            w.base[i] ^= (uint8_t)(1u << bit);
            cr_expect_neq(proto_frame_verify(w.base, w.base + PROTO_HEADER_SIZE,
                                             w.len - PROTO_HEADER_SIZE),
                          0, "byte %zu bit %d", i, bit);
            w.base[i] ^= (uint8_t)(1u << bit);
        }
    }
    tern_wbuf_free(&w);
}

Test(proto_xxh3, the_versions_differ_and_a_seal_switches_them)
{
    struct tern_wbuf a, b;
    tern_wbuf_init(&a);
    tern_wbuf_init(&b);
    encode_answer(&a, TERN_PROTO_VERSION, 3);
    encode_answer(&b, PROTO_VERSION_XXH3, 3);
    cr_assert_eq(a.len, b.len);
    cr_expect_neq(memcmp(a.base + 20, b.base + 20, 4), 0, "same checksum");
    cr_expect_eq(memcmp(a.base + PROTO_HEADER_SIZE, b.base + PROTO_HEADER_SIZE,
                        a.len - PROTO_HEADER_SIZE),
                 0);
    /* A version-1 frame sealed as version 2 is b, and back. */
    cr_assert_eq(proto_frame_seal_request(a.base, a.len, 9, PROTO_VERSION_XXH3),
                 0);
    cr_expect_eq(memcmp(a.base, b.base, a.len), 0);
    cr_assert_eq(
        proto_frame_seal_request(a.base, a.len, 10, TERN_PROTO_VERSION), 0);
    cr_expect_eq(a.base[2], TERN_PROTO_VERSION);
    cr_expect_eq(proto_frame_verify(a.base, a.base + PROTO_HEADER_SIZE,
                                    a.len - PROTO_HEADER_SIZE),
                 0);
    /* A version this build does not write, a length that is not the
     * header's: refused, frame unchanged. */
    memcpy(b.base, a.base, a.len);
    cr_expect_eq(proto_frame_seal_request(a.base, a.len, 11, 3), TERN_EVERSION);
    cr_expect_eq(
        proto_frame_seal_request(a.base, a.len - 1, 11, PROTO_VERSION_XXH3),
        TERN_EMALFORMED);
    cr_expect_eq(memcmp(a.base, b.base, a.len), 0);
    /* A frame claiming version 3 never verifies. */
    a.base[2] = 3;
    cr_expect_eq(proto_frame_verify(a.base, a.base + PROTO_HEADER_SIZE,
                                    a.len - PROTO_HEADER_SIZE),
                 TERN_ECORRUPT);
    tern_wbuf_free(&a);
    tern_wbuf_free(&b);
}

Test(proto_xxh3, an_unknown_version_is_not_encoded)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    proto_frame_begin_v(&w, 3, PROTO_OP_STATUS, 1, 0);
    cr_expect_eq(proto_frame_end(&w, 0), TERN_EVERSION);
    cr_expect_eq(w.len, 0, "the partial frame is dropped");
    cr_expect_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 2), 0);
    tern_wbuf_free(&w);
}

Test(proto_xxh3, hello_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    const void *body;
    uint32_t taken = 7;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_hello(&w, 4, PROTO_FEATURE_XXH3 | 0x80), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body), 0);
    cr_expect_eq(h.op, PROTO_OP_HELLO);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.bits, PROTO_FEATURE_XXH3 | 0x80, "unknown bits pass");
    /* A short body is malformed; what a later release appends after
     * the features is skipped. */
    cr_expect_eq(proto_decode_request(h.op, body, h.body_len - 1, &r),
                 TERN_EMALFORMED);
    {
        uint8_t longer[8] = {0};
        memcpy(longer, body, 4);
        longer[6] = 0x5a;
        cr_expect_eq(proto_decode_request(h.op, longer, sizeof longer, &r), 0);
        cr_expect_eq(r.bits, PROTO_FEATURE_XXH3 | 0x80);
    }
    w.len = 0;
    cr_assert_eq(proto_encode_hello_resp(&w, 4, PROTO_FEATURE_XXH3), 0);
    cr_assert_eq(
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body), 0);
    cr_expect_eq(h.op, PROTO_OP_HELLO | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_hello_resp(body, h.body_len, &taken), 0);
    cr_expect_eq(taken, PROTO_FEATURE_XXH3);
    cr_expect_eq(proto_decode_hello_resp(body, h.body_len + 0, &taken), 0);
    cr_expect_eq(proto_decode_hello_resp(body, 3, &taken), TERN_EMALFORMED);
    cr_expect_eq(taken, 0);
    tern_wbuf_free(&w);
}
