/*
 * libFuzzer target for the ring record decoder (rdma/ring.c): the input
 * (after a one-byte ring-size selector) becomes the contents of a ring, as
 * a hostile or broken sender could leave it. Checks the decoder's promises
 * at every record offset (payload and record inside the ring, sizes
 * aligned, never larger than half the ring; a decoded message re-encoded by
 * the sender side decodes to the same bytes), then runs the receiver over
 * the ring and checks it only moves forward, within bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "ring.h"

struct fz_mem
{
    uint8_t *ring;
    uint64_t credit;
};

static int fz_write(void *ctx, size_t off, const void *src, size_t len)
{
    struct fz_mem *m = ctx;
    memcpy(m->ring + off, src, len);
    return 0;
}

static int fz_doorbell(void *ctx)
{
    (void)ctx;
    return 0;
}

static int fz_credit(void *ctx, uint64_t consumed, int wake)
{
    struct fz_mem *m = ctx;
    (void)wake;
    tern_put_u64(&m->credit, consumed);
    return 0;
}

static const struct xport_ring_ops fz_ops = {fz_write, fz_doorbell, fz_credit};

static void check_record(const uint8_t *ring,
                         size_t cap,
                         size_t off,
                         const struct xport_ring_rec *r)
{
    struct fz_mem m;
    struct xport_ring_tx tx;
    struct xport_ring_rec g;
    struct xport_iov iov;

    if (r->payload != ring + off + XPORT_RING_HDR ||
        r->len > xport_ring_max_payload(cap) || r->size > cap - off ||
        r->size % XPORT_RING_ALIGN != 0 || r->size < XPORT_RING_ALIGN) {
        abort();
    }
    if (r->type == XPORT_RING_PAD) {
        if (r->len != 0 || off + r->size != cap) {
            abort();
        }
        return;
    }
    if (r->type != XPORT_RING_MSG || r->size > cap / 2) {
        abort();
    }
    /* Re-encode at offset 0 of a fresh ring: same payload and epoch. */
    m.credit = 0;
    if (posix_memalign((void **)&m.ring, 64, cap) != 0) {
        return;
    }
    memset(m.ring, 0, cap);
    xport_ring_tx_init(&tx, &fz_ops, &m, cap, &m.credit);
    tx.seq = r->seq;
    tx.epoch = r->epoch;
    iov.base = r->payload;
    iov.len = r->len;
    if (xport_ring_tx_write(&tx, &iov, 1, r->len) != 0 ||
        xport_ring_decode(m.ring, cap, 0, r->seq, &g) != 1 || g.len != r->len ||
        g.epoch != r->epoch || g.size != r->size ||
        memcmp(g.payload, r->payload, r->len) != 0) {
        abort();
    }
    free(m.ring);
}

/* libFuzzer's fixed entry point name. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);  // NOLINT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct xport_ring_rx rx;
    struct xport_ring_rec r;
    struct fz_mem m = {0};
    size_t cap;

    if (size < 1) {
        return 0;
    }
    cap = (size_t)XPORT_RING_MIN_CAP << (data[0] % 4);
    data++;
    size--;
    if (posix_memalign((void **)&m.ring, 64, cap) != 0) {
        return 0;
    }
    memset(m.ring, 0, cap);
    memcpy(m.ring, data, TERN_MIN(size, cap));

    /* The decoder at every record offset, expecting whatever seq is
     * there (so validation past the seq check is exercised). */
    for (size_t off = 0; off < cap; off += XPORT_RING_ALIGN) {
        uint64_t want = tern_get_u64(m.ring + off);
        int rc = xport_ring_decode(m.ring, cap, off, want, &r);
        if (rc == 1) {
            check_record(m.ring, cap, off, &r);
        } else if (rc != 0 && rc != TERN_EVERSION && rc != TERN_EMALFORMED &&
                   rc != TERN_ECORRUPT) {
            abort();
        }
        if (xport_ring_decode(m.ring, cap, off, want + 1, &r) != 0) {
            abort(); /* a seq mismatch is never a record */
        }
    }

    /* The receiver, starting at the seq found at offset 0. */
    xport_ring_rx_init(&rx, &fz_ops, &m, m.ring, cap);
    rx.seq = tern_get_u64(m.ring);
    rx.fence = size > 0 ? data[0] : 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t tail = rx.tail;
        int rc = xport_ring_rx_peek(&rx, &r);
        if (rc <= 0) {
            break;
        }
        if (r.payload < m.ring || r.payload + r.len > m.ring + cap ||
            r.epoch < rx.fence || r.type != XPORT_RING_MSG) {
            abort();
        }
        xport_ring_rx_consume(&rx);
        if (rx.tail <= tail) {
            abort();
        }
        (void)xport_ring_rx_flush(&rx, i % 2);
    }
    free(m.ring);
    return 0;
}
