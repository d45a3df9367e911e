/*
 * Private to rdma/: the one-sided ring protocol shared by the shm backend
 * (rdma/shm.c) and the verbs backend (rdma/verbs.c). The record layout and
 * the algorithm are documented at the top of rdma/ring.c.
 *
 * One ring carries messages in ONE direction, from a sender to a receiver.
 * The ring's bytes live in the receiver's memory; the sender writes them
 * one-sidedly through struct xport_ring_ops (a memcpy into a shared
 * mapping for shm, an RDMA WRITE for verbs, a plain memcpy in the unit
 * tests). The receiver returns its consumed position ("credit") by a
 * one-sided write into a credit word in the sender's memory. Nothing here
 * allocates, blocks, or knows about libuv: the backends own memory, fds and
 * the event loop.
 */
#ifndef TERN_XPORT_RING_H
#define TERN_XPORT_RING_H

#include <stddef.h>
#include <stdint.h>

#include "xport.h"

#define XPORT_RING_VERSION 1u
#define XPORT_RING_ALIGN   64u /* records start on 64-byte boundaries */
#define XPORT_RING_HDR     24u
#define XPORT_RING_TRAILER 16u
#define XPORT_RING_MAGIC   0x474e5254u /* trailer magic, bytes "TRNG" */
#define XPORT_RING_MIN_CAP 4096u
#define XPORT_RING_MAX_CAP ((size_t)1 << 30)

enum xport_ring_type {
    XPORT_RING_MSG = 1, /* a message */
    XPORT_RING_PAD = 2, /* filler: the rest of the ring up to its end */
};

/* Record flags. */
#define XPORT_RING_F_CREDIT 0x1u /* sender is short of space: wake it */

/* One-sided operations the protocol needs; implemented by each backend.
 * ctx is the backend's (one per ring). Every op returns 0 or a negative
 * code; a failed op makes the ring unusable (the backend tears it down). */
struct xport_ring_ops
{
    /* Sender side: copy len bytes from src to byte offset off of the
     * receiver's ring data area; [off, off + len) never wraps. Writes must
     * become visible to the receiver in call order, and an 8-byte write at
     * an 8-aligned offset must be single-copy atomic (the protocol writes a
     * record's seq word last and relies on both). */
    int (*write)(void *ctx, size_t off, const void *src, size_t len);
    /* Sender side: tell the receiver that new records were written (may be
     * coalesced/suppressed by the backend while the receiver is awake). */
    int (*doorbell)(void *ctx);
    /* Receiver side: store consumed (a byte position, little-endian u64)
     * into the sender's credit word, single-copy atomic; if wake, also make
     * the sender look at it (it is waiting for space). */
    int (*write_credit)(void *ctx, uint64_t consumed, int wake);
};

/* Sender state. Owned by the backend; no heap memory. */
struct xport_ring_tx
{
    const struct xport_ring_ops *ops;
    void *ctx;
    size_t cap;                  /* ring data bytes, power of two */
    const uint64_t *credit_word; /* in local memory, written by receiver */
    uint64_t head;               /* bytes written since the ring was set up */
    uint64_t credit;             /* receiver's consumed position, last seen */
    uint64_t seq;                /* seq of the next record; starts at 1 */
    uint64_t epoch;              /* stamped on every record (fencing) */
    uint64_t waits;              /* times a write found no space (stats) */
};

/* Receiver state. */
struct xport_ring_rx
{
    const struct xport_ring_ops *ops;
    void *ctx;
    const uint8_t *base; /* ring data area, cap bytes, 8-aligned */
    size_t cap;
    uint64_t tail;          /* bytes consumed */
    uint64_t seq;           /* seq expected at tail */
    uint64_t returned;      /* last credit written to the sender */
    uint64_t fence;         /* records with epoch < fence are dropped */
    int wake;               /* a consumed record asked for a credit wake-up */
    uint64_t fenced;        /* records dropped by the fence (stats) */
    int bounded;            /* verbs: consume only below limit */
    uint64_t limit;         /* end of the writes known to have landed */
    size_t pending_size;    /* size of the record returned by peek, or 0 */
    unsigned pending_flags; /* its flags */
};

/* A record as decoded from the ring. payload points into the ring
 * (borrowed: valid until the record is consumed). */
struct xport_ring_rec
{
    unsigned type;  /* enum xport_ring_type */
    unsigned flags; /* XPORT_RING_F_* */
    uint64_t seq;
    uint64_t epoch;
    const uint8_t *payload;
    size_t len;  /* payload bytes */
    size_t size; /* ring bytes the record occupies (PAD: up to ring end) */
};

/* 1 if cap is a valid ring size: a power of two in [MIN_CAP, MAX_CAP]. */
int xport_ring_cap_valid(size_t cap);
/* Largest payload one record can carry in a ring of cap bytes (a record
 * never exceeds cap / 2, so any record eventually fits). */
size_t xport_ring_max_payload(size_t cap);
/* Ring bytes a record with len payload bytes occupies. */
size_t xport_ring_record_size(size_t len);

/* Decode the record at byte offset off (a multiple of XPORT_RING_ALIGN,
 * < cap) of the ring base[0..cap) (untrusted bytes), expecting sequence
 * number want_seq. Returns 1 with *out filled when a complete valid record
 * is there; 0 when the seq word is not want_seq yet (not landed, or stale
 * bytes of an older lap: never consumed); or, when the seq word matches but
 * the record is not valid: TERN_EVERSION (unknown version),
 * TERN_EMALFORMED (bad type, length or flags), TERN_ECORRUPT (trailer or
 * checksum mismatch). The seq word is read with an acquire load; base must
 * be 8-aligned. */
int xport_ring_decode(const uint8_t *base,
                      size_t cap,
                      size_t off,
                      uint64_t want_seq,
                      struct xport_ring_rec *out /* OUT */);

/* ---- sender ------------------------------------------------------------ */

/* credit_word: sender-local word the receiver writes (must start at 0 and
 * stay valid while tx is used). */
void xport_ring_tx_init(struct xport_ring_tx *tx,
                        const struct xport_ring_ops *ops,
                        void *ctx,
                        size_t cap,
                        const uint64_t *credit_word);

/* Read the credit word. Returns 0, or TERN_ECORRUPT if the receiver
 * reports a position that went backwards or beyond what was written. */
int xport_ring_tx_refresh(struct xport_ring_tx *tx);

/* 1 if a record of len payload bytes fits now (using the last credit
 * read; call xport_ring_tx_refresh first to see new credit). */
int xport_ring_tx_fits(const struct xport_ring_tx *tx, size_t len);

/* Write one message (the concatenation of iov[0..n), len bytes in all)
 * into the ring: this is the transport's single copy of the caller's
 * bytes. Does not ring the doorbell (call xport_ring_tx_doorbell once per
 * batch). Returns 0; -EAGAIN when there is no space (nothing written: try
 * again once credit arrives); TERN_ETOOBIG when len exceeds
 * xport_ring_max_payload; or an ops->write error. */
int xport_ring_tx_write(struct xport_ring_tx *tx,
                        const struct xport_iov *iov,
                        unsigned n,
                        size_t len);

int xport_ring_tx_doorbell(struct xport_ring_tx *tx);

/* ---- receiver ---------------------------------------------------------- */

/* base: the local ring data area (cap bytes, zeroed before the sender is
 * given access, 8-aligned). */
void xport_ring_rx_init(struct xport_ring_rx *rx,
                        const struct xport_ring_ops *ops,
                        void *ctx,
                        const uint8_t *base,
                        size_t cap);

/* The next deliverable message at the tail, without consuming it. PAD
 * records and records below the fence are consumed on the way. Returns 1
 * with *out (payload borrowed until xport_ring_rx_consume), 0 when nothing
 * complete is there, or a negative code from xport_ring_decode (the
 * record is not consumed: the backend must tear the ring down). */
int xport_ring_rx_peek(struct xport_ring_rx *rx,
                       struct xport_ring_rec *out /* OUT */);

/* Verbs: RDMA writes land in no particular byte order, so the receiver
 * must not look past the end of the last write whose completion it has
 * seen (WRITE_WITH_IMM carries the low 32 bits of the sender's head after
 * that write). Switches rx to bounded mode and raises the limit. */
void xport_ring_rx_landed(struct xport_ring_rx *rx, uint32_t head_lo32);

/* Consume the message returned by the last successful peek. */
void xport_ring_rx_consume(struct xport_ring_rx *rx);

/* 1 if a record (of any validity) has landed at the tail: the seq word
 * there equals the expected seq. Cheap; used to re-check before sleeping. */
int xport_ring_rx_ready(const struct xport_ring_rx *rx);

/* Return credit: write the consumed position to the sender if it changed
 * and (force, or at least a quarter of the ring is unreturned), with a
 * wake-up if a record consumed since the last write asked for one. Call
 * with force = 1 at the end of every drain batch. Returns 0 or an ops
 * error. */
int xport_ring_rx_flush(struct xport_ring_rx *rx, int force);

#endif /* TERN_XPORT_RING_H */
