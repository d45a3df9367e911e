/*
 * Private to rdma/: the frame codec of the TCP transport. The byte-level
 * layout and the connection protocol are documented at the top of
 * rdma/tcp.c. Split out of tcp.c so the decoder, which reads untrusted bytes
 * from the network, can be unit-tested and fuzzed
 * (tests/fuzz/fuzz_rdma_tcpframe.c) on its own.
 */
#ifndef TERN_TCP_FRAME_H
#define TERN_TCP_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "xport.h"

#define XPORT_TCP_FRAME_MAGIC   0x5854u /* bytes "TX" */
#define XPORT_TCP_FRAME_VERSION 1u      /* checksum XXH32 */
#define XPORT_TCP_FRAME_V_XXH3  2u      /* checksum XXH3 (tcp.c: when used) */
#define XPORT_TCP_FRAME_HDR     20u
#define XPORT_TCP_HELLO_LEN     16u

enum xport_tcp_frame_type {
    XPORT_TCP_FRAME_HELLO = 1,
    XPORT_TCP_FRAME_MSG = 2,
};

/* A decoded frame. payload points into the caller's buffer (borrowed, valid
 * as long as that buffer). */
struct xport_tcp_frame
{
    unsigned type;          /* enum xport_tcp_frame_type */
    uint64_t seq;           /* position on its connection; HELLO is 0 */
    const uint8_t *payload; /* len bytes */
    size_t len;             /* payload length */
    size_t size;            /* whole frame: XPORT_TCP_FRAME_HDR + len */
};

/* Encode one frame (header + concatenated iov payload) into dst, which must
 * hold XPORT_TCP_FRAME_HDR + payload_len bytes; payload_len must equal the
 * iov total and fit in 32 bits. version: XPORT_TCP_FRAME_VERSION or
 * XPORT_TCP_FRAME_V_XXH3 (the checksum it names). This is the transport's
 * single copy of the caller's bytes. */
void xport_tcp_frame_encode(uint8_t *dst,
                            unsigned version,
                            unsigned type,
                            uint64_t seq,
                            const struct xport_iov *iov,
                            unsigned n,
                            size_t payload_len);

/* Decode the frame at the start of buf[0..len) (untrusted bytes).
 * Returns 1 when a whole valid frame is there (*out filled, out->size bytes
 * consumed), 0 when more bytes are needed (out->size is the total needed
 * once known, else XPORT_TCP_FRAME_HDR), or a negative code:
 * TERN_EMALFORMED (bad magic, unknown type, bad HELLO length),
 * TERN_EVERSION (a version other than 1 or 2), TERN_ETOOBIG (length >
 * max_message), TERN_ECORRUPT (checksum mismatch). The header is validated
 * before the payload arrives, so an oversized length is rejected without
 * buffering. */
int xport_tcp_frame_decode(const void *buf,
                           size_t len,
                           size_t max_message,
                           struct xport_tcp_frame *out /* OUT */);

/* HELLO payload: the sender's node id and the id it believes it is
 * connecting to. */
void xport_tcp_hello_encode(uint8_t dst[XPORT_TCP_HELLO_LEN],
                            uint64_t sender_id,
                            uint64_t receiver_id);
void xport_tcp_hello_decode(const uint8_t src[XPORT_TCP_HELLO_LEN],
                            uint64_t *sender_id /* OUT */,
                            uint64_t *receiver_id /* OUT */);

#endif /* TERN_TCP_FRAME_H */
