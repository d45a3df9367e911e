/*
 * Frame codec of the TCP transport: encodes a frame header + payload in one
 * pass (the transport's only copy of the caller's bytes) and validates
 * frames read from the network. Layout and protocol: top of rdma/tcp.c.
 * Frames are encoded/decoded byte by byte in little-endian order, be careful
 * when adapting: the layout is on the wire between nodes of different builds.
 */
#include "tcp_frame.h"

#include <string.h>

#include <tern_common.h>

void xport_tcp_frame_encode(uint8_t *dst,
                            unsigned version,
                            unsigned type,
                            uint64_t seq,
                            const struct xport_iov *iov,
                            unsigned n,
                            size_t payload_len)
{
    struct tern_checksum32_either st;
    uint8_t *p = dst + XPORT_TCP_FRAME_HDR;

    TERN_ASSERT(payload_len <= UINT32_MAX);
    TERN_ASSERT(version == XPORT_TCP_FRAME_VERSION ||
                version == XPORT_TCP_FRAME_V_XXH3);
    tern_put_u16(dst, XPORT_TCP_FRAME_MAGIC);
    dst[2] = (uint8_t)version;
    dst[3] = (uint8_t)type;
    tern_put_u32(dst + 4, (uint32_t)payload_len);
    tern_put_u64(dst + 8, seq);
    tern_checksum32_either_begin(&st, version == XPORT_TCP_FRAME_V_XXH3,
                                 TERN_CHECKSUM_SEED);
    tern_checksum32_either_update(&st, dst, 16);
    for (unsigned i = 0; i < n; i++) {
        if (iov[i].len > 0) {
            memcpy(p, iov[i].base, iov[i].len);
            tern_checksum32_either_update(&st, p, iov[i].len);
            p += iov[i].len;
        }
    }
    TERN_ASSERT((size_t)(p - dst) == XPORT_TCP_FRAME_HDR + payload_len);
    tern_put_u32(dst + 16, tern_checksum32_either_end(&st));
}

int xport_tcp_frame_decode(const void *buf,
                           size_t len,
                           size_t max_message,
                           struct xport_tcp_frame *out)
{
    const uint8_t *b = buf;
    struct tern_checksum32_either st;
    uint32_t plen;

    memset(out, 0, sizeof *out);
    out->size = XPORT_TCP_FRAME_HDR;
    /* Reject a bad magic as soon as its bytes are there, so garbage is
     * refused without waiting for a whole header. */
    if (len >= 1 && b[0] != (XPORT_TCP_FRAME_MAGIC & 0xff)) {
        return TERN_EMALFORMED;
    }
    if (len >= 2 && tern_get_u16(b) != XPORT_TCP_FRAME_MAGIC) {
        return TERN_EMALFORMED;
    }
    if (len >= 3 && b[2] != XPORT_TCP_FRAME_VERSION &&
        b[2] != XPORT_TCP_FRAME_V_XXH3) {
        return TERN_EVERSION;
    }
    if (len < XPORT_TCP_FRAME_HDR) {
        return 0;
    }
    out->type = b[3];
    plen = tern_get_u32(b + 4);
    out->seq = tern_get_u64(b + 8);
    switch (out->type) {
    case XPORT_TCP_FRAME_HELLO:
        if (plen != XPORT_TCP_HELLO_LEN) {
            return TERN_EMALFORMED;
        }
        break;
    case XPORT_TCP_FRAME_MSG:
        if (plen > max_message) {
            return TERN_ETOOBIG;
        }
        break;
    default:
        return TERN_EMALFORMED;
    }
    out->len = plen;
    out->size = XPORT_TCP_FRAME_HDR + (size_t)plen;
    if (len < out->size) {
        return 0;
    }
    out->payload = b + XPORT_TCP_FRAME_HDR;
    tern_checksum32_either_begin(&st, b[2] == XPORT_TCP_FRAME_V_XXH3,
                                 TERN_CHECKSUM_SEED);
    tern_checksum32_either_update(&st, b, 16);
    tern_checksum32_either_update(&st, out->payload, plen);
    if (tern_checksum32_either_end(&st) != tern_get_u32(b + 16)) {
        return TERN_ECORRUPT;
    }
    return 1;
}

void xport_tcp_hello_encode(uint8_t dst[XPORT_TCP_HELLO_LEN],
                            uint64_t sender_id,
                            uint64_t receiver_id)
{
    tern_put_u64(dst, sender_id);
    tern_put_u64(dst + 8, receiver_id);
}

void xport_tcp_hello_decode(const uint8_t src[XPORT_TCP_HELLO_LEN],
                            uint64_t *sender_id,
                            uint64_t *receiver_id)
{
    *sender_id = tern_get_u64(src);
    *receiver_id = tern_get_u64(src + 8);
}
