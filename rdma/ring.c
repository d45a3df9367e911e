/*
 * The one-sided ring protocol (rdma/ring.h): how a sender writes messages
 * straight into a receiver's memory and how the receiver hands space back.
 * Used by the shm backend (rdma/shm.c) and the verbs backend
 * (rdma/verbs.c); independent of the memory underneath.
 *
 * Ring record format, version 1. The ring is a byte array of cap bytes
 * (a power of two, >= 4096) in the receiver's memory. Positions (head,
 * tail, credit) are byte counts since the ring was set up (u64, never
 * wrap); a position p lives at offset p % cap. Records start on 64-byte
 * boundaries and never wrap around the ring end. All integers
 * little-endian.
 *
 *   offset      size field
 *        0         8 seq       record number on this ring: 1, 2, 3, ...
 *                              (PAD records included); written LAST
 *        8         4 len       payload bytes (PAD: 0)
 *       12         1 version   1
 *       13         1 type      1 = MSG, 2 = PAD (skip to the ring end)
 *       14         2 flags     bit 0 = CREDIT: the sender is short of space,
 *                              return credit with a wake-up; others 0
 *       16         8 epoch     sender's epoch (fencing, see below)
 *       24       len payload
 *   24+a8(len)     4 checksum  tern_checksum32 (XXH32, seed "tern") over
 *                              bytes 0..23 (seq included) and the payload
 *   28+a8(len)     4 magic     0x474e5254 ("TRNG")
 *   32+a8(len)     8 seq       canary: the seq again
 *   record size = a64(40 + a8(len)), a8/a64 = round up to 8/64.
 *
 * A record never exceeds cap / 2, so the largest payload is cap / 2 - 40
 * (xport_ring_max_payload). Larger messages are rejected with TERN_ETOOBIG
 * (the transport's max_message); splitting big Raft messages is the raft
 * adapter's job (raft/io.c), where prev index/term are known.
 *
 * Landing rule. The sender writes payload, checksum and trailer, then
 * the header's other fields, then the 8-byte seq word (ops->write keeps
 * call order and writes an aligned 8-byte word atomically). The receiver
 * consumes the record at its tail only when the seq word equals the seq it
 * expects AND the trailer repeats it AND the magic and checksum match. Any
 * earlier state (a partially landed write) shows either an old seq (not
 * consumed: wait) or a mismatch (not consumed: TERN_ECORRUPT, the backend
 * tears the ring down). Bytes left from an older lap carry an older seq,
 * and the receiver zeroes the ring before handing it out, so stale bytes
 * never look complete. For verbs, where bytes of one RDMA write land in
 * no defined order, the receiver additionally never looks past the end of
 * the last write whose WRITE_WITH_IMM completion it has seen (the
 * immediate carries the sender's head, xport_ring_rx_landed).
 *
 * Wrap-around. When a record does not fit between head and the ring end,
 * the sender first writes a PAD record there (any such gap is >= 64 bytes,
 * enough for a 40-byte PAD) and the message goes to offset 0. The PAD
 * costs the rest of the ring up to its end.
 *
 * Credits. The sender may write only while head + (pad) + size <= credit +
 * cap, where credit is the receiver's consumed position, which the
 * receiver writes one-sidedly into a credit word in the sender's memory,
 * lazily: whenever a quarter of the ring is unreturned, and at the end of
 * every drain batch (xport_ring_rx_flush(.., force = 1)). The sender sets
 * CREDIT on a record when, after writing it, less than cap / 2 is free;
 * once such a record is consumed, the next credit write also wakes the
 * sender (ops->write_credit(.., wake = 1)), so wake-ups cost at most one
 * per quarter ring or per batch, not one per message. This cannot
 * deadlock: a sender lacking space for a record (<= cap / 2) has free <
 * cap / 2, so the last record it wrote carries CREDIT, and the batch that
 * consumes it ends with a credit write that wakes the sender. A sender
 * without space gets -EAGAIN and keeps the message in its own bounded
 * queue (the backend's max_queued_bytes).
 *
 * Fencing. Every record carries the sender's epoch (a Raft term, set through
 * xport_set_epoch). The receiver holds a fence: records with epoch < fence are
 * consumed and dropped, never delivered (counted in rx->fenced). This is
 * the software form of the fence for shm; verbs also revokes
 * remote write access at the NIC (rdma/verbs.c: QP access flags cleared,
 * or the QP torn down) and keeps this check as a second line.
 */
#include "ring.h"

#include <errno.h>
#include <string.h>

#include <tern_common.h>

#define RING__A8(x) (((x) + 7u) & ~(size_t)7u)
#define RING__A64(x)                                                           \
    (((x) + (XPORT_RING_ALIGN - 1)) & ~(size_t)(XPORT_RING_ALIGN - 1))

/* Acquire-load of a little-endian u64 at p (8-aligned). */
static uint64_t ring_load_u64(const uint8_t *p)
{
    uint64_t v =
        __atomic_load_n((const uint64_t *)(const void *)p, __ATOMIC_ACQUIRE);
    uint8_t b[8];
    memcpy(b, &v, sizeof b);
    return tern_get_u64(b);
}

int xport_ring_cap_valid(size_t cap)
{
    return cap >= XPORT_RING_MIN_CAP && cap <= XPORT_RING_MAX_CAP &&
           (cap & (cap - 1)) == 0;
}

size_t xport_ring_max_payload(size_t cap)
{
    return cap / 2 - XPORT_RING_HDR - XPORT_RING_TRAILER;
}

size_t xport_ring_record_size(size_t len)
{
    return RING__A64(XPORT_RING_HDR + RING__A8(len) + XPORT_RING_TRAILER);
}

int xport_ring_decode(const uint8_t *base,
                      size_t cap,
                      size_t off,
                      uint64_t want_seq,
                      struct xport_ring_rec *out)
{
    const uint8_t *h = base + off;
    const uint8_t *t;
    struct tern_checksum_state st;
    size_t len, tpos;
    unsigned version, type, flags;

    if (ring_load_u64(h) != want_seq) {
        return 0;
    }
    len = tern_get_u32(h + 8);
    version = h[12];
    type = h[13];
    flags = tern_get_u16(h + 14);
    if (version != XPORT_RING_VERSION) {
        return TERN_EVERSION;
    }
    if ((flags & ~XPORT_RING_F_CREDIT) != 0) {
        return TERN_EMALFORMED;
    }
    if (type == XPORT_RING_PAD) {
        if (len != 0) {
            return TERN_EMALFORMED;
        }
    } else if (type != XPORT_RING_MSG) {
        return TERN_EMALFORMED;
    }
    if (len > xport_ring_max_payload(cap) ||
        xport_ring_record_size(len) > cap - off) {
        return TERN_EMALFORMED;
    }
    tpos = XPORT_RING_HDR + RING__A8(len);
    t = h + tpos;
    if (tern_get_u32(t + 4) != XPORT_RING_MAGIC ||
        tern_get_u64(t + 8) != want_seq) {
        return TERN_ECORRUPT;
    }
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, h, XPORT_RING_HDR);
    tern_checksum32_update(&st, h + XPORT_RING_HDR, len);
    if (tern_checksum32_end(&st) != tern_get_u32(t)) {
        return TERN_ECORRUPT;
    }
    out->type = type;
    out->flags = flags;
    out->seq = want_seq;
    out->epoch = tern_get_u64(h + 16);
    out->payload = h + XPORT_RING_HDR;
    out->len = len;
    out->size =
        type == XPORT_RING_PAD ? cap - off : xport_ring_record_size(len);
    return 1;
}

/* ---- sender ------------------------------------------------------------ */

void xport_ring_tx_init(struct xport_ring_tx *tx,
                        const struct xport_ring_ops *ops,
                        void *ctx,
                        size_t cap,
                        const uint64_t *credit_word)
{
    memset(tx, 0, sizeof *tx);
    tx->ops = ops;
    tx->ctx = ctx;
    tx->cap = cap;
    tx->credit_word = credit_word;
    tx->seq = 1;
}

int xport_ring_tx_refresh(struct xport_ring_tx *tx)
{
    uint64_t c = ring_load_u64((const uint8_t *)tx->credit_word);
    if (c < tx->credit || c > tx->head) {
        return TERN_ECORRUPT;
    }
    tx->credit = c;
    return 0;
}

/* Ring bytes needed to write a record of size bytes at head: the PAD up to
 * the ring end if the record does not fit before it, plus the record. */
static size_t tx_need(const struct xport_ring_tx *tx, size_t size)
{
    size_t off = (size_t)(tx->head & (tx->cap - 1));
    size_t rest = tx->cap - off;
    return size <= rest ? size : rest + size;
}

static size_t tx_free(const struct xport_ring_tx *tx)
{
    return tx->cap - (size_t)(tx->head - tx->credit);
}

int xport_ring_tx_fits(const struct xport_ring_tx *tx, size_t len)
{
    return len <= xport_ring_max_payload(tx->cap) &&
           tx_need(tx, xport_ring_record_size(len)) <= tx_free(tx);
}

/* Write one record (header fields, payload, trailer, then the seq word) at
 * head and advance head by size. */
static int tx_put(struct xport_ring_tx *tx,
                  unsigned type,
                  unsigned flags,
                  const struct xport_iov *iov,
                  unsigned n,
                  size_t len,
                  size_t size)
{
    size_t off = (size_t)(tx->head & (tx->cap - 1));
    uint8_t hdr[XPORT_RING_HDR];
    uint8_t trl[XPORT_RING_TRAILER];
    struct tern_checksum_state st;
    size_t pos = off + XPORT_RING_HDR;
    int rc;

    tern_put_u64(hdr, tx->seq);
    tern_put_u32(hdr + 8, (uint32_t)len);
    hdr[12] = XPORT_RING_VERSION;
    hdr[13] = (uint8_t)type;
    tern_put_u16(hdr + 14, (uint16_t)flags);
    tern_put_u64(hdr + 16, tx->epoch);
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, hdr, sizeof hdr);
    for (unsigned i = 0; i < n; i++) {
        if (iov[i].len == 0) {
            continue;
        }
        tern_checksum32_update(&st, iov[i].base, iov[i].len);
        rc = tx->ops->write(tx->ctx, pos, iov[i].base, iov[i].len);
        if (rc != 0) {
            return rc;
        }
        pos += iov[i].len;
    }
    tern_put_u32(trl, tern_checksum32_end(&st));
    tern_put_u32(trl + 4, XPORT_RING_MAGIC);
    tern_put_u64(trl + 8, tx->seq);
    rc = tx->ops->write(tx->ctx, off + XPORT_RING_HDR + RING__A8(len), trl,
                        sizeof trl);
    if (rc == 0) {
        rc = tx->ops->write(tx->ctx, off + 8, hdr + 8, XPORT_RING_HDR - 8);
    }
    if (rc == 0) {
        rc = tx->ops->write(tx->ctx, off, hdr, 8); /* lands the record */
    }
    if (rc != 0) {
        return rc;
    }
    tx->seq++;
    tx->head += size;
    return 0;
}

int xport_ring_tx_write(struct xport_ring_tx *tx,
                        const struct xport_iov *iov,
                        unsigned n,
                        size_t len)
{
    size_t size = xport_ring_record_size(len);
    size_t off, rest;
    unsigned flags = 0;
    int rc;

    if (len > xport_ring_max_payload(tx->cap)) {
        return TERN_ETOOBIG;
    }
    if (tx_need(tx, size) > tx_free(tx)) {
        tx->waits++;
        return -EAGAIN;
    }
    off = (size_t)(tx->head & (tx->cap - 1));
    rest = tx->cap - off;
    if (size > rest) {
        rc = tx_put(tx, XPORT_RING_PAD, 0, NULL, 0, 0, rest);
        if (rc != 0) {
            return rc;
        }
    }
    /* Free space once this record is written. */
    if (tx_free(tx) - size < tx->cap / 2) {
        flags |= XPORT_RING_F_CREDIT;
    }
    return tx_put(tx, XPORT_RING_MSG, flags, iov, n, len, size);
}

int xport_ring_tx_doorbell(struct xport_ring_tx *tx)
{
    return tx->ops->doorbell(tx->ctx);
}

/* ---- receiver ---------------------------------------------------------- */

void xport_ring_rx_init(struct xport_ring_rx *rx,
                        const struct xport_ring_ops *ops,
                        void *ctx,
                        const uint8_t *base,
                        size_t cap)
{
    memset(rx, 0, sizeof *rx);
    rx->ops = ops;
    rx->ctx = ctx;
    rx->base = base;
    rx->cap = cap;
    rx->seq = 1;
}

static void rx_advance(struct xport_ring_rx *rx, const struct xport_ring_rec *r)
{
    rx->tail += r->size;
    rx->seq++;
    if (r->flags & XPORT_RING_F_CREDIT) {
        rx->wake = 1;
    }
}

int xport_ring_rx_peek(struct xport_ring_rx *rx, struct xport_ring_rec *out)
{
    /* Each turn consumes a PAD or fenced record; a lap of the ring holds at
     * most cap / ALIGN records. */
    for (size_t turns = 0; turns <= rx->cap / XPORT_RING_ALIGN; turns++) {
        size_t off = (size_t)(rx->tail & (rx->cap - 1));
        int rc;
        if (rx->bounded && rx->tail >= rx->limit) {
            rx->pending_size = 0;
            return 0;
        }
        rc = xport_ring_decode(rx->base, rx->cap, off, rx->seq, out);
        if (rc <= 0) {
            rx->pending_size = 0;
            return rc;
        }
        if (out->type == XPORT_RING_MSG && out->epoch >= rx->fence) {
            rx->pending_size = out->size;
            rx->pending_flags = out->flags;
            return 1;
        }
        if (out->type == XPORT_RING_MSG) {
            rx->fenced++;
        }
        rx_advance(rx, out);
    }
    return 0;
}

void xport_ring_rx_landed(struct xport_ring_rx *rx, uint32_t head_lo32)
{
    /* Unconsumed bytes never exceed cap (<= 2^30), so the distance from
     * tail fits in 32 bits; a larger one is an announcement older than
     * tail (already consumed): ignored. */
    uint32_t ahead = head_lo32 - (uint32_t)rx->tail;
    rx->bounded = 1;
    if (ahead <= rx->cap && rx->tail + ahead > rx->limit) {
        rx->limit = rx->tail + ahead;
    }
}

void xport_ring_rx_consume(struct xport_ring_rx *rx)
{
    struct xport_ring_rec r;

    if (rx->pending_size == 0) {
        return;
    }
    r.size = rx->pending_size;
    r.flags = rx->pending_flags;
    rx->pending_size = 0;
    rx_advance(rx, &r);
}

int xport_ring_rx_ready(const struct xport_ring_rx *rx)
{
    size_t off = (size_t)(rx->tail & (rx->cap - 1));
    return ring_load_u64(rx->base + off) == rx->seq;
}

int xport_ring_rx_flush(struct xport_ring_rx *rx, int force)
{
    int wake = rx->wake;
    int rc;

    if (rx->tail == rx->returned) {
        return 0;
    }
    if (!force && rx->tail - rx->returned < rx->cap / 4) {
        return 0;
    }
    rc = rx->ops->write_credit(rx->ctx, rx->tail, wake);
    if (rc != 0) {
        return rc;
    }
    rx->returned = rx->tail;
    rx->wake = 0;
    return 0;
}
