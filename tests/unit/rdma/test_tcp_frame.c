/* Unit tests of the TCP transport's frame codec (rdma/tcp_frame.c):
 * round trip, incremental arrival, and rejection of every malformed field. */
#include <criterion/criterion.h>

#include <tern_common.h>

#include "tcp_frame.h"

static size_t encode_msg(uint8_t *dst,
                         uint64_t seq,
                         const char *a,
                         const char *b)
{
    struct xport_iov iov[2] = {{a, strlen(a)}, {b, strlen(b)}};
    size_t len = iov[0].len + iov[1].len;
    xport_tcp_frame_encode(dst, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_MSG,
                           seq, iov, 2, len);
    return XPORT_TCP_FRAME_HDR + len;
}

Test(tcp_frame, roundtrip_concatenates_iov)
{
    uint8_t buf[128];
    struct xport_tcp_frame f;
    size_t n = encode_msg(buf, 42, "hello ", "tern");

    cr_assert_eq(xport_tcp_frame_decode(buf, n, 1024, &f), 1);
    cr_expect_eq(f.type, XPORT_TCP_FRAME_MSG);
    cr_expect_eq(f.seq, 42);
    cr_expect_eq(f.size, n);
    cr_assert_eq(f.len, 10);
    cr_expect_arr_eq(f.payload, "hello tern", 10);
    /* Byte-level layout documented at the top of rdma/tcp.c. */
    cr_expect_eq(buf[0], 'T');
    cr_expect_eq(buf[1], 'X');
    cr_expect_eq(buf[2], 1);
    cr_expect_eq(buf[3], 2);
    cr_expect_eq(tern_get_u32(buf + 4), 10);
    cr_expect_eq(tern_get_u64(buf + 8), 42);
}

Test(tcp_frame, empty_payload_and_hello)
{
    uint8_t buf[64];
    uint8_t hello[XPORT_TCP_HELLO_LEN];
    struct xport_iov iov = {hello, sizeof hello};
    struct xport_tcp_frame f;
    uint64_t s, r;

    xport_tcp_frame_encode(buf, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_MSG, 1,
                           NULL, 0, 0);
    cr_assert_eq(xport_tcp_frame_decode(buf, XPORT_TCP_FRAME_HDR, 0, &f), 1);
    cr_expect_eq(f.len, 0);

    xport_tcp_hello_encode(hello, 7, 9);
    xport_tcp_frame_encode(buf, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_HELLO,
                           0, &iov, 1, sizeof hello);
    cr_assert_eq(xport_tcp_frame_decode(buf, sizeof buf, 0, &f), 1);
    cr_assert_eq(f.type, XPORT_TCP_FRAME_HELLO);
    xport_tcp_hello_decode(f.payload, &s, &r);
    cr_expect_eq(s, 7);
    cr_expect_eq(r, 9);
}

Test(tcp_frame, incomplete_prefixes_need_more)
{
    uint8_t buf[128];
    struct xport_tcp_frame f;
    size_t n = encode_msg(buf, 1, "abcdefgh", "ijk");

    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(xport_tcp_frame_decode(buf, i, 1024, &f), 0, "prefix %zu",
                     i);
        cr_expect_eq(f.size, i < XPORT_TCP_FRAME_HDR ? XPORT_TCP_FRAME_HDR : n);
    }
    cr_expect_eq(xport_tcp_frame_decode(buf, n, 1024, &f), 1);
}

Test(tcp_frame, rejects_bad_fields)
{
    uint8_t buf[128], bad[128];
    struct xport_tcp_frame f;
    size_t n = encode_msg(buf, 1, "payload", "");

    memcpy(bad, buf, n);
    bad[0] = 'G';
    cr_expect_eq(xport_tcp_frame_decode(bad, 1, 1024, &f), TERN_EMALFORMED,
                 "garbage is refused from its first byte");
    memcpy(bad, buf, n);
    bad[2] = 3;
    cr_expect_eq(xport_tcp_frame_decode(bad, n, 1024, &f), TERN_EVERSION);
    memcpy(bad, buf, n);
    bad[3] = 9;
    cr_expect_eq(xport_tcp_frame_decode(bad, n, 1024, &f), TERN_EMALFORMED);
    cr_expect_eq(xport_tcp_frame_decode(buf, XPORT_TCP_FRAME_HDR, 6, &f),
                 TERN_ETOOBIG, "length checked before the payload arrives");
    memcpy(bad, buf, n);
    bad[n - 1] ^= 1;
    cr_expect_eq(xport_tcp_frame_decode(bad, n, 1024, &f), TERN_ECORRUPT);
    memcpy(bad, buf, n);
    bad[9] ^= 1; /* seq is covered by the checksum too */
    cr_expect_eq(xport_tcp_frame_decode(bad, n, 1024, &f), TERN_ECORRUPT);
    memcpy(bad, buf, n);
    bad[3] = XPORT_TCP_FRAME_HELLO; /* HELLO must carry exactly 16 bytes */
    cr_expect_eq(xport_tcp_frame_decode(bad, n, 1024, &f), TERN_EMALFORMED);
}

/* Version 2: the same frame with an XXH3 checksum (rdma/tcp.c,
 * "Versions"). It decodes; its checksum is not version 1's for the same
 * bytes, so relabelling it as version 1 (or a changed payload byte) is
 * refused as corrupt; a version beyond 2 is refused as unknown. */
Test(tcp_frame, version_2_checksum_is_xxh3)
{
    uint8_t v1[128], v2[128];
    struct xport_iov iov = {"replicated", 10};
    struct xport_tcp_frame f;
    size_t n = XPORT_TCP_FRAME_HDR + 10;

    xport_tcp_frame_encode(v1, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_MSG, 5,
                           &iov, 1, 10);
    xport_tcp_frame_encode(v2, XPORT_TCP_FRAME_V_XXH3, XPORT_TCP_FRAME_MSG, 5,
                           &iov, 1, 10);
    cr_expect_eq(v2[2], 2);
    cr_assert_eq(xport_tcp_frame_decode(v2, n, 1024, &f), 1);
    cr_expect_eq(f.seq, 5);
    cr_expect_arr_eq(f.payload, "replicated", 10);
    cr_expect_neq(tern_get_u32(v1 + 16), tern_get_u32(v2 + 16));

    v2[2] = XPORT_TCP_FRAME_VERSION;
    cr_expect_eq(xport_tcp_frame_decode(v2, n, 1024, &f), TERN_ECORRUPT);
    v2[2] = XPORT_TCP_FRAME_V_XXH3;
    v2[n - 1] ^= 1;
    cr_expect_eq(xport_tcp_frame_decode(v2, n, 1024, &f), TERN_ECORRUPT);
    v2[n - 1] ^= 1;
    v2[2] = 3;
    cr_expect_eq(xport_tcp_frame_decode(v2, n, 1024, &f), TERN_EVERSION);
}
