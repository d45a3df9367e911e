/* Unit tests of the one-sided ring protocol (rdma/ring.c) on plain memory:
 * the "remote" ring is a local buffer, one-sided writes are memcpys (or are
 * logged and landed byte by byte, to simulate partially landed writes), the
 * credit word is a local u64. Covers exact bytes, wrap-around with PAD
 * records, credits and the wake-up flag, torn and stale records, corrupt
 * records and the epoch fence. */
#include <errno.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#include <tern_common.h>

#include "ring.h"

#define LOG_MAX 64

/* One logged remote write. */
struct wlog
{
    size_t off;
    size_t len;
    uint8_t *bytes;
};

struct mem
{
    uint8_t *ring; /* receiver's ring, cap bytes */
    size_t cap;
    uint64_t credit; /* sender's credit word (LE) */
    int doorbells;
    int credit_writes;
    int wakes;
    int logging; /* 1: writes go to the log instead of the ring */
    struct wlog log[LOG_MAX];
    int nlog;
};

static int m_write(void *ctx, size_t off, const void *src, size_t len)
{
    struct mem *m = ctx;
    cr_assert_leq(off + len, m->cap, "write within the ring");
    if (m->logging) {
        cr_assert_lt(m->nlog, LOG_MAX);
        m->log[m->nlog].off = off;
        m->log[m->nlog].len = len;
        m->log[m->nlog].bytes = malloc(len + 1);
        memcpy(m->log[m->nlog].bytes, src, len);
        m->nlog++;
        return 0;
    }
    memcpy(m->ring + off, src, len);
    return 0;
}

static int m_doorbell(void *ctx)
{
    ((struct mem *)ctx)->doorbells++;
    return 0;
}

static int m_credit(void *ctx, uint64_t consumed, int wake)
{
    struct mem *m = ctx;
    tern_put_u64(&m->credit, consumed);
    m->credit_writes++;
    m->wakes += wake;
    return 0;
}

static const struct xport_ring_ops ops = {m_write, m_doorbell, m_credit};

static struct mem *mem_new(size_t cap)
{
    struct mem *m = calloc(1, sizeof *m);
    cr_assert(m != NULL);
    cr_assert_eq(posix_memalign((void **)&m->ring, 64, cap), 0);
    memset(m->ring, 0, cap);
    m->cap = cap;
    return m;
}

static void mem_free(struct mem *m)
{
    for (int i = 0; i < m->nlog; i++) {
        free(m->log[i].bytes);
    }
    free(m->ring);
    free(m);
}

static uint8_t pattern(uint64_t k, size_t i)
{
    return (uint8_t)(k * 131u + i * 7u + 1u);
}

static int put(struct xport_ring_tx *tx, uint64_t k, size_t len)
{
    uint8_t *buf = malloc(len + 1);
    struct xport_iov iov[3];
    int rc;
    for (size_t i = 0; i < len; i++) {
        buf[i] = pattern(k, i);
    }
    /* Three pieces, one possibly empty. */
    iov[0].base = buf;
    iov[0].len = len / 2;
    iov[1].base = buf + len / 2;
    iov[1].len = 0;
    iov[2].base = buf + len / 2;
    iov[2].len = len - len / 2;
    rc = xport_ring_tx_write(tx, iov, 3, len);
    free(buf);
    return rc;
}

static void expect_msg(struct xport_ring_rx *rx, uint64_t k, size_t len)
{
    struct xport_ring_rec r;
    int rc = xport_ring_rx_peek(rx, &r);
    cr_assert_eq(rc, 1, "message %llu ready (rc %d)", (unsigned long long)k,
                 rc);
    cr_assert_eq(r.len, len, "message %llu length", (unsigned long long)k);
    for (size_t i = 0; i < len; i++) {
        if (r.payload[i] != pattern(k, i)) {
            cr_assert_fail("message %llu byte %zu", (unsigned long long)k, i);
        }
    }
    xport_ring_rx_consume(rx);
}

/* Land logged write i (whole) in the receiver's ring. */
static void land(struct mem *m, int i)
{
    memcpy(m->ring + m->log[i].off, m->log[i].bytes, m->log[i].len);
}

static void setup_pair(struct mem *m,
                       struct xport_ring_tx *tx,
                       struct xport_ring_rx *rx)
{
    xport_ring_tx_init(tx, &ops, m, m->cap, &m->credit);
    xport_ring_rx_init(rx, &ops, m, m->ring, m->cap);
}

Test(ring, sizes_and_limits)
{
    cr_expect(xport_ring_cap_valid(4096));
    cr_expect(xport_ring_cap_valid((size_t)1 << 20));
    cr_expect(!xport_ring_cap_valid(2048));
    cr_expect(!xport_ring_cap_valid(6000));
    cr_expect_eq(xport_ring_record_size(0), 64);
    cr_expect_eq(xport_ring_record_size(24), 64);
    cr_expect_eq(xport_ring_record_size(25), 128);
    cr_expect_eq(xport_ring_max_payload(4096), 2048 - 40);
    cr_expect_eq(xport_ring_record_size(xport_ring_max_payload(4096)), 2048);
}

Test(ring, exact_bytes_zero_and_max)
{
    struct mem *m = mem_new(8192);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    size_t max = xport_ring_max_payload(m->cap);
    struct xport_ring_rec r;

    setup_pair(m, &tx, &rx);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), 0, "empty ring");
    cr_expect_eq(put(&tx, 1, max + 1), TERN_ETOOBIG);
    cr_assert_eq(put(&tx, 1, 0), 0);
    cr_assert_eq(put(&tx, 2, 1), 0);
    cr_assert_eq(put(&tx, 3, max), 0);
    cr_expect_eq(xport_ring_tx_doorbell(&tx), 0);
    cr_expect_eq(m->doorbells, 1);
    expect_msg(&rx, 1, 0);
    expect_msg(&rx, 2, 1);
    expect_msg(&rx, 3, max);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), 0);
    cr_expect_eq(rx.tail, tx.head, "receiver consumed all that was written");
    mem_free(m);
}

/* Random sizes through a small ring, the receiver lagging by random
 * amounts: order and bytes survive many laps; PADs are skipped. */
Test(ring, wrap_around_random)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    size_t max = xport_ring_max_payload(m->cap);
    static size_t lens[20000];
    uint64_t sent = 0, got = 0;
    unsigned seed = 12345;

    setup_pair(m, &tx, &rx);
    for (int round = 0; round < 20000 && sent < 20000; round++) {
        int burst = (int)(rand_r(&seed) % 8);
        for (int i = 0; i < burst && sent < 20000; i++) {
            size_t len = rand_r(&seed) % 4 == 0
                             ? (size_t)rand_r(&seed) % (max + 1)
                             : (size_t)rand_r(&seed) % 100;
            cr_assert_eq(xport_ring_tx_refresh(&tx), 0);
            int rc = put(&tx, sent, len);
            if (rc == -EAGAIN) {
                break;
            }
            cr_assert_eq(rc, 0);
            lens[sent++] = len;
        }
        int take = (int)(rand_r(&seed) % 8);
        for (int i = 0; i < take && got < sent; i++) {
            expect_msg(&rx, got, lens[got]);
            got++;
            cr_assert_eq(xport_ring_rx_flush(&rx, rand_r(&seed) % 2), 0);
        }
    }
    while (got < sent) {
        expect_msg(&rx, got, lens[got]);
        got++;
    }
    cr_expect_eq(got, 20000);
    cr_expect_gt(tx.head, 200 * (uint64_t)m->cap, "many laps");
    cr_expect_gt(rx.seq - 1, got, "PAD records were written and skipped");
    mem_free(m);
}

/* A full ring refuses with -EAGAIN (nothing written); the last record
 * carries the CREDIT flag, so consuming it returns credit with a wake-up. */
Test(ring, full_ring_then_credit_wake)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    uint64_t n = 0, head;
    struct xport_ring_rec r;

    setup_pair(m, &tx, &rx);
    while (put(&tx, n, 200) == 0) {
        n++;
        cr_assert_lt(n, 100);
    }
    head = tx.head;
    cr_expect_eq(put(&tx, n, 200), -EAGAIN);
    cr_expect_eq(tx.head, head, "a refused write writes nothing");
    cr_expect_eq(tx.waits, 2);
    cr_expect_eq(n, 4096 / xport_ring_record_size(200));
    /* Nothing is returned until forced, a quarter, or a wake is due. */
    cr_assert_eq(xport_ring_rx_peek(&rx, &r), 1);
    cr_expect_eq(r.flags & XPORT_RING_F_CREDIT, 0, "ring was half empty");
    xport_ring_rx_consume(&rx);
    cr_assert_eq(xport_ring_rx_flush(&rx, 0), 0);
    cr_expect_eq(m->credit_writes, 0, "lazy credit");
    for (uint64_t k = 1; k < n; k++) {
        expect_msg(&rx, k, 200);
    }
    cr_assert_eq(xport_ring_rx_flush(&rx, 0), 0);
    cr_expect_eq(m->credit_writes, 1);
    cr_expect_eq(m->wakes, 1, "the last records asked for a wake-up");
    cr_assert_eq(xport_ring_tx_refresh(&tx), 0);
    cr_expect(xport_ring_tx_fits(&tx, 200));
    /* Fill again; consume one flagged record: the wake waits for a
     * quarter or the end of the batch, not for every message. */
    for (uint64_t k = n; k < 2 * n; k++) {
        cr_assert_eq(put(&tx, k, 200), 0);
    }
    for (uint64_t k = n; k < n + 10; k++) {
        expect_msg(&rx, k, 200);
    }
    cr_assert_eq(xport_ring_rx_flush(&rx, 0), 0);
    cr_expect_eq(m->credit_writes, 2, "a quarter: credit with wake");
    cr_expect_eq(m->wakes, 2);
    expect_msg(&rx, n + 10, 200);
    cr_assert_eq(xport_ring_rx_flush(&rx, 0), 0);
    cr_expect_eq(m->credit_writes, 2, "flagged, but lazy until batch end");
    cr_assert_eq(xport_ring_rx_flush(&rx, 1), 0);
    cr_expect_eq(m->credit_writes, 3);
    cr_expect_eq(m->wakes, 3, "batch end carries the wake");
    mem_free(m);
}

/* Land a logged record's writes byte by byte, in order: until the seq
 * word (written last, atomically) is there, the record is never
 * consumed. */
Test(ring, torn_write_never_consumed)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    struct xport_ring_rec r;
    size_t total = 0, landed = 0;

    setup_pair(m, &tx, &rx);
    /* First a normal record so the torn one is not at offset 0. */
    cr_assert_eq(put(&tx, 0, 10), 0);
    expect_msg(&rx, 0, 10);
    m->logging = 1;
    cr_assert_eq(put(&tx, 1, 300), 0);
    m->logging = 0;
    cr_assert_eq(m->nlog, 5, "payload x2, trailer, header, seq word");
    cr_expect_eq(m->log[m->nlog - 1].len, 8, "the seq word is last");
    for (int i = 0; i < m->nlog; i++) {
        total += m->log[i].len;
    }
    for (int i = 0; i < m->nlog; i++) {
        /* The seq word lands whole (ops->write contract: an aligned
         * 8-byte write is single-copy atomic); everything else byte by
         * byte. */
        size_t step = i == m->nlog - 1 ? 8 : 1;
        for (size_t b = 0; b < m->log[i].len; b += step) {
            memcpy(m->ring + m->log[i].off + b, m->log[i].bytes + b, step);
            landed += step;
            if (landed < total) {
                cr_assert_eq(xport_ring_rx_peek(&rx, &r), 0,
                             "torn after %zu of %zu bytes", landed, total);
                cr_assert_eq(rx.tail, 64);
            }
        }
    }
    expect_msg(&rx, 1, 300);
    mem_free(m);
}

/* Out-of-order landing (allowed by RDMA without WRITE_WITH_IMM): the
 * header and seq land before the payload. Never consumed: a mismatch is
 * reported and the tail stays; once all bytes are there it is delivered. */
Test(ring, seq_landed_before_payload)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    struct xport_ring_rec r;

    setup_pair(m, &tx, &rx);
    m->logging = 1;
    cr_assert_eq(put(&tx, 7, 100), 0);
    m->logging = 0;
    /* Land header (3) and seq (4) first, then payload, then trailer. */
    for (int i = 3; i <= 4; i++) {
        land(m, i);
    }
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_ECORRUPT);
    cr_expect_eq(rx.tail, 0);
    land(m, 0);
    land(m, 2);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_ECORRUPT,
                 "half the payload: checksum mismatch");
    cr_expect_eq(rx.tail, 0);
    land(m, 1);
    expect_msg(&rx, 7, 100);
    mem_free(m);
}

/* After a lap, the slot at the tail holds a complete record of the
 * previous lap: its older seq means "not landed". */
Test(ring, stale_lap_not_consumed)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    struct xport_ring_rec r;
    uint64_t k = 0;

    setup_pair(m, &tx, &rx);
    /* 64-byte records: exactly one lap, no PAD. */
    for (; k < 64; k++) {
        cr_assert_eq(put(&tx, k, 8), 0);
        expect_msg(&rx, k, 8);
        cr_assert_eq(xport_ring_rx_flush(&rx, 1), 0);
        cr_assert_eq(xport_ring_tx_refresh(&tx), 0);
    }
    cr_expect_eq(rx.tail % m->cap, 0);
    cr_expect_eq(xport_ring_rx_ready(&rx), 0);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), 0, "old lap's record ignored");
    cr_assert_eq(put(&tx, k, 8), 0);
    expect_msg(&rx, k, 8);
    mem_free(m);
}

Test(ring, corrupt_records_rejected)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    struct xport_ring_rec r;
    uint8_t save;

    setup_pair(m, &tx, &rx);
    cr_assert_eq(put(&tx, 1, 40), 0);
    /* A flipped payload bit. */
    m->ring[30] ^= 0x10;
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_ECORRUPT);
    m->ring[30] ^= 0x10;
    /* Unknown version, type, flags; a length beyond the ring. */
    save = m->ring[12];
    m->ring[12] = 9;
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_EVERSION);
    m->ring[12] = save;
    save = m->ring[13];
    m->ring[13] = 7;
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_EMALFORMED);
    m->ring[13] = save;
    m->ring[15] = 0x80;
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_EMALFORMED);
    m->ring[15] = 0;
    tern_put_u32(m->ring + 8, 1u << 30);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_EMALFORMED);
    tern_put_u32(m->ring + 8, 40);
    /* Trailer magic. */
    m->ring[24 + 40 + 4] ^= 1;
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), TERN_ECORRUPT);
    m->ring[24 + 40 + 4] ^= 1;
    cr_expect_eq(rx.tail, 0, "nothing consumed");
    expect_msg(&rx, 1, 40);
    mem_free(m);
}

Test(ring, credit_word_checked)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;

    setup_pair(m, &tx, &rx);
    cr_assert_eq(put(&tx, 1, 10), 0);
    tern_put_u64(&m->credit, 128); /* beyond what was written */
    cr_expect_eq(xport_ring_tx_refresh(&tx), TERN_ECORRUPT);
    tern_put_u64(&m->credit, 64);
    cr_expect_eq(xport_ring_tx_refresh(&tx), 0);
    tern_put_u64(&m->credit, 0); /* backwards */
    cr_expect_eq(xport_ring_tx_refresh(&tx), TERN_ECORRUPT);
    mem_free(m);
}

Test(ring, fence_drops_older_epochs)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    struct xport_ring_rec r;

    setup_pair(m, &tx, &rx);
    rx.fence = 5;
    tx.epoch = 4;
    cr_assert_eq(put(&tx, 1, 10), 0);
    cr_assert_eq(put(&tx, 2, 10), 0);
    tx.epoch = 5;
    cr_assert_eq(put(&tx, 3, 10), 0);
    tx.epoch = 9;
    cr_assert_eq(put(&tx, 4, 10), 0);
    tx.epoch = 1;
    cr_assert_eq(put(&tx, 5, 10), 0);
    cr_assert_eq(xport_ring_rx_peek(&rx, &r), 1);
    cr_expect_eq(r.epoch, 5);
    expect_msg(&rx, 3, 10);
    expect_msg(&rx, 4, 10);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), 0);
    cr_expect_eq(rx.fenced, 3);
    cr_expect_eq(rx.tail, tx.head, "fenced records are consumed");
    mem_free(m);
}

/* Verbs mode: nothing past the last announced write is looked at, even
 * when complete records are there. */
Test(ring, bounded_receiver_waits_for_landing)
{
    struct mem *m = mem_new(4096);
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
    struct xport_ring_rec r;
    uint64_t first_end;

    setup_pair(m, &tx, &rx);
    cr_assert_eq(put(&tx, 1, 10), 0);
    first_end = tx.head;
    cr_assert_eq(put(&tx, 2, 10), 0);
    xport_ring_rx_landed(&rx, (uint32_t)first_end);
    expect_msg(&rx, 1, 10);
    cr_expect_eq(xport_ring_rx_peek(&rx, &r), 0, "second not announced");
    xport_ring_rx_landed(&rx, (uint32_t)tx.head);
    expect_msg(&rx, 2, 10);
    /* An older announcement never lowers the limit. */
    xport_ring_rx_landed(&rx, (uint32_t)first_end);
    cr_expect_eq(rx.limit, tx.head);
    mem_free(m);
}
