/*
 * libFuzzer target for the TCP transport's frame decoder
 * (rdma/tcp_frame.c): decodes the input as the receive path does (frame
 * after frame, with a small max_message taken from the first byte), checks
 * the decoder's promises (sizes within the input, payload inside the frame,
 * a re-encoded frame decodes to the same thing), and feeds every prefix so
 * incomplete input is exercised too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "tcp_frame.h"

static void check_frame(const uint8_t *buf,
                        size_t len,
                        size_t max_message,
                        const struct xport_tcp_frame *f)
{
    struct xport_iov iov = {f->payload, f->len};
    struct xport_tcp_frame g;
    uint8_t *copy;

    if (f->size > len || f->size != XPORT_TCP_FRAME_HDR + f->len ||
        f->payload != buf + XPORT_TCP_FRAME_HDR) {
        abort();
    }
    if (f->type == XPORT_TCP_FRAME_MSG && f->len > max_message) {
        abort();
    }
    if (f->type == XPORT_TCP_FRAME_HELLO && f->len != XPORT_TCP_HELLO_LEN) {
        abort();
    }
    copy = malloc(f->size);
    if (copy == NULL) {
        return;
    }
    xport_tcp_frame_encode(copy, buf[2], f->type, f->seq, &iov, 1, f->len);
    if (memcmp(copy, buf, f->size) != 0 ||
        xport_tcp_frame_decode(copy, f->size, max_message, &g) != 1 ||
        g.seq != f->seq || g.len != f->len || g.type != f->type) {
        abort();
    }
    free(copy);
}

/* libFuzzer's fixed entry point name. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);  // NOLINT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)  // NOLINT
{
    size_t max_message;
    size_t off = 0;

    if (size == 0) {
        return 0;
    }
    max_message = (size_t)data[0] * 4;
    data++;
    size--;
    while (off < size) {
        struct xport_tcp_frame f;
        int rc =
            xport_tcp_frame_decode(data + off, size - off, max_message, &f);
        if (rc < 0) {
            break;
        }
        if (rc == 0) {
            if (f.size <= size - off) {
                abort(); /* "need more" must mean more than we have */
            }
            break;
        }
        check_frame(data + off, size - off, max_message, &f);
        off += f.size;
    }
    /* Every prefix of the first frame: never a frame, never past the end. */
    for (size_t i = 0; i < size && i < 64; i++) {
        struct xport_tcp_frame f;
        if (xport_tcp_frame_decode(data, i, max_message, &f) == 1 &&
            f.size > i) {
            abort();
        }
    }
    return 0;
}
