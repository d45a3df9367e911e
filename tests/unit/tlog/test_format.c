/*
 * tests/unit/tlog/test_format.c: the raft log store's segment format
 * (tlog/format.c): header and record round trips, every header byte and
 * record byte covered by a check, pads that end each write on a block
 * boundary, and the scan: a clean end, every crash of the write in flight
 * (any subset of its sectors written, the rest zero or garbage) loads
 * every acknowledged record and is never called corrupt, damage in
 * acknowledged bytes is, and a recycled file's older bytes are not taken
 * for this use's. Version 2 segments open with a link record (naming where
 * the segment before ended), version 1 ones (zeroed) have none: the scan
 * reads both, and the crash enumerations run over both, a recycled
 * file's older bytes standing for "never written" in version 2.
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "tlog.h"

#define BLOCK 512u
#define SEQ   7u

/* A segment image under construction: records are added to the current
 * write, which end_write pads to the block end. */
struct img
{
    uint8_t *buf;
    size_t cap;
    size_t link_len; /* the link record opening write 1 (version 2) */
    size_t len;      /* bytes written so far */
    uint64_t next_index, next_pos;
    size_t write_start[64];
    unsigned n_writes;
    uint16_t write; /* the number of the write being built */
};

/* The version of the images img_init makes, and their link. */
static uint32_t img_version = TLOG_SEG_VERSION_LINKED;
static const struct tlog_link img_link = {6, 9216, 3};

static void img_init(struct img *m, size_t cap, uint64_t seq)
{
    struct tlog_seg_header h = {0};
    m->buf = calloc(1, cap);
    cr_assert_not_null(m->buf);
    m->cap = cap;
    h.seq = seq;
    h.block_size = BLOCK;
    h.in_flight = 1;
    h.version = img_version;
    tlog_seg_header_encode(m->buf, &h);
    m->len = TLOG_SEG_HEADER_SIZE;
    m->next_index = 100;
    m->next_pos = 5000;
    m->n_writes = 0;
    m->write = 1;
    m->write_start[0] = m->len;
    m->link_len = 0;
    if (img_version == TLOG_SEG_VERSION_LINKED) {
        tlog_link_encode(m->buf + m->len, seq, m->next_pos, &img_link);
        m->link_len = tlog_rec_size(TLOG_LINK_PAYLOAD);
        m->len += m->link_len;
    }
}

static void img_add(struct img *m, uint64_t seq, uint8_t type, uint32_t len)
{
    struct tlog_rec r = {0};
    uint8_t *payload = malloc(len > 0 ? len : 1);
    for (uint32_t i = 0; i < len; i++) {
        payload[i] = (uint8_t)(m->next_index * 31 + i);
    }
    r.type = type;
    r.write = m->write;
    r.seq = seq;
    r.index = m->next_index;
    r.term = 3;
    r.pos = m->next_pos;
    r.len = len;
    r.payload = payload;
    cr_assert_leq(m->len + tlog_rec_size(len), m->cap);
    tlog_rec_encode(m->buf + m->len, &r);
    m->len += tlog_rec_size(len);
    m->next_index++;
    m->next_pos = tlog_rec_pos_after(&r);
    free(payload);
}

static void img_end_write(struct img *m, uint64_t seq)
{
    size_t pad = tlog_pad_size(m->len, BLOCK);
    cr_assert_geq(pad, TLOG_REC_HEADER_SIZE, "every write ends with a pad");
    cr_assert_leq(m->len + pad, m->cap);
    tlog_pad_encode(m->buf + m->len, pad, seq, m->write, m->next_pos);
    m->len += pad;
    cr_assert_eq(m->len % BLOCK, 0);
    m->write++;
    m->n_writes++;
    cr_assert_lt(m->n_writes, 64);
    m->write_start[m->n_writes] = m->len;
}

/* n writes of records of the given payload sizes, cycling. */
static void img_writes(struct img *m, unsigned n, unsigned per_write)
{
    static const uint32_t sizes[] = {0, 1, 7, 8, 9, 100, 333, 1024};
    for (unsigned w = 0; w < n; w++) {
        for (unsigned k = 0; k < per_write; k++) {
            img_add(m, SEQ,
                    (uint8_t)(k % 3 == 2 ? TLOG_REC_CHANGE : TLOG_REC_COMMAND),
                    sizes[(w * per_write + k) % 8]);
        }
        img_end_write(m, SEQ);
    }
}

struct seen
{
    uint64_t n;
    uint64_t last_index;
    bool order_ok;
};

static int seen_cb(void *arg, const struct tlog_rec *r, size_t off)
{
    struct seen *s = arg;
    (void)off;
    if (s->n > 0 && r->index != s->last_index + 1) {
        s->order_ok = false;
    }
    s->last_index = r->index;
    s->n++;
    return 0;
}

Test(tlog_format, header_round_trip_and_every_byte_checked)
{
    uint8_t b[TLOG_SEG_HEADER_SIZE];
    struct tlog_seg_header h = {9, 4096, 3, 0}, d;
    char em[TERN_ERRMSG_SIZE];
    tlog_seg_header_encode(b, &h);
    cr_assert_eq(tlog_seg_header_decode(b, sizeof b, &d, em), 0, "%s", em);
    cr_expect_eq(d.seq, 9);
    cr_expect_eq(d.block_size, 4096);
    cr_expect_eq(d.in_flight, 3);
    cr_expect_eq(d.version, TLOG_SEG_VERSION_LINKED, "new ones are linked");
    for (size_t i = 0; i < 36; i++) {
        b[i] ^= 0x10;
        cr_expect_neq(tlog_seg_header_decode(b, sizeof b, &d, em), 0,
                      "byte %zu", i);
        b[i] ^= 0x10;
    }
    cr_expect_eq(tlog_seg_header_decode(b, sizeof b - 1, &d, em),
                 TERN_EMALFORMED);
    /* Version 1 (zeroed segments) still reads. */
    h.version = TLOG_SEG_VERSION_ZEROED;
    tlog_seg_header_encode(b, &h);
    cr_assert_eq(tlog_seg_header_decode(b, sizeof b, &d, em), 0, "%s", em);
    cr_expect_eq(d.version, TLOG_SEG_VERSION_ZEROED);
    /* A later version, checksummed: refused as such. */
    tern_put_u32(b + 8, 3);
    tern_put_u32(b + 32, tern_checksum32(b, 32));
    cr_expect_eq(tlog_seg_header_decode(b, sizeof b, &d, em), TERN_EVERSION);
    /* Sizes out of bounds, checksummed. */
    struct tlog_seg_header bad[] = {{9, 256, 1, 0},  {9, 1000, 1, 0},
                                    {9, 8192, 1, 0}, {9, 512, 0, 0},
                                    {9, 512, 65, 0}, {0, 512, 1, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tlog_seg_header_encode(b, &bad[i]);
        cr_expect_eq(tlog_seg_header_decode(b, sizeof b, &d, em), TERN_ECORRUPT,
                     "case %zu", i);
    }
}

Test(tlog_format, record_round_trip_and_every_byte_checked)
{
    static const uint32_t lens[] = {0, 1, 7, 8, 9, 1000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        uint32_t len = lens[k];
        size_t size = tlog_rec_size(len);
        uint8_t *p = malloc(len + 1);
        uint8_t *b = malloc(size);
        struct tlog_rec r = {0}, d;
        size_t used = 0;
        for (uint32_t i = 0; i < len; i++) {
            p[i] = (uint8_t)(i * 7 + 1);
        }
        r.type = TLOG_REC_COMMAND;
        r.write = 7;
        r.seq = 77;
        r.index = 1ull << 40;
        r.term = 5;
        r.pos = 1ull << 33;
        r.len = len;
        r.payload = p;
        cr_assert_eq(size % 8, 0);
        cr_assert_geq(size, TLOG_REC_HEADER_SIZE + len);
        tlog_rec_encode(b, &r);
        cr_assert_eq(tlog_rec_decode(b, size, &d, &used), 0);
        cr_expect_eq(used, size);
        cr_expect_eq(d.type, r.type);
        cr_expect_eq(d.seq, r.seq);
        cr_expect_eq(d.index, r.index);
        cr_expect_eq(d.term, r.term);
        cr_expect_eq(d.pos, r.pos);
        cr_expect_eq(d.len, len);
        cr_expect_eq(memcmp(d.payload, p, len), 0);
        cr_expect_eq(tlog_rec_pos_after(&d),
                     r.pos + TLOG_STREAM_RECORD_HEADER + len);
        /* Every header and payload byte is covered (the zeros padding the
         * payload to 8 are not: nothing reads them). */
        for (size_t i = 0; i < TLOG_REC_HEADER_SIZE + len; i++) {
            b[i] ^= 0x01;
            cr_expect_neq(tlog_rec_decode(b, size, &d, &used), 0,
                          "len %u byte %zu", len, i);
            b[i] ^= 0x01;
        }
        cr_expect_eq(tlog_rec_decode(b, size - 1, &d, &used), TERN_EMALFORMED,
                     "short");
        free(p);
        free(b);
    }
}

Test(tlog_format, pads_end_a_write_on_a_block_boundary)
{
    cr_expect_eq(tlog_pad_size(4096, 512), 512, "on a boundary: a block");
    cr_expect_eq(tlog_pad_size(4096 + 8, 512), 504);
    cr_expect_eq(tlog_pad_size(4096 + 464, 512), 48);
    cr_expect_eq(tlog_pad_size(4096 + 472, 512), 40 + 512, "through the next");
    cr_expect_eq(tlog_pad_size(4096 + 504, 512), 8 + 512);
    for (uint64_t off = 4096; off < 4096 + 4096; off += 8) {
        size_t n = tlog_pad_size(off, 512);
        uint8_t *b;
        struct tlog_rec d;
        size_t used;
        cr_assert_eq((off + n) % 512, 0);
        cr_assert_geq(n, TLOG_REC_HEADER_SIZE);
        b = malloc(n);
        tlog_pad_encode(b, n, 3, 4, 99);
        cr_assert_eq(tlog_rec_decode(b, n, &d, &used), 0);
        cr_expect_eq(used, n);
        cr_expect_eq(d.type, TLOG_REC_PAD);
        cr_expect_eq(d.pos, 99);
        cr_expect_eq(tlog_rec_pos_after(&d), 99, "a pad takes no position");
        free(b);
    }
}

Test(tlog_format, scan_reads_every_record_to_a_clean_end)
{
    struct img m;
    struct tlog_scan s;
    struct seen seen = {0, 0, true};
    char em[TERN_ERRMSG_SIZE];
    img_init(&m, 64 * 1024, SEQ);
    img_writes(&m, 5, 6);
    /* The rest of the file: zeros (a new segment's). */
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, seen_cb, &seen, &s, em), 0,
        "%s", em);
    cr_expect_eq(s.how, TLOG_SCAN_CLEAN);
    cr_expect_eq(s.n_records, 30);
    cr_expect_eq(seen.n, 30);
    cr_expect(seen.order_ok);
    cr_expect_eq(s.next_index, 130);
    cr_expect_eq(s.next_pos, m.next_pos);
    cr_expect_eq(s.end, m.len);
    cr_expect_eq(s.first_index, 100);
    cr_expect_eq(s.first_pos, 5000);
    /* Where the previous segment ended not known (the first segment the
     * store keeps): the first record says it. */
    cr_assert_eq(tlog_seg_scan(m.buf, m.cap, SEQ, 0, 0, NULL, NULL, &s, em), 0);
    cr_expect_eq(s.how, TLOG_SCAN_CLEAN);
    cr_expect_eq(s.n_records, 30);
    cr_expect_eq(s.first_index, 100);
    cr_expect_eq(s.next_index, 130);
    cr_expect_eq(s.next_pos, m.next_pos);
    /* Not where the previous segment ended: nothing is in sequence. */
    cr_assert_eq(tlog_seg_scan(m.buf, m.cap, SEQ, 99, 5000, NULL, NULL, &s, em),
                 0);
    cr_expect_eq(s.n_records, 0);
    cr_expect_eq(s.end, TLOG_SEG_HEADER_SIZE + m.link_len);
    cr_expect_eq(s.how, TLOG_SCAN_CORRUPT);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 4999, NULL, NULL, &s, em), 0);
    cr_expect_eq(s.n_records, 0);
    cr_expect_eq(s.how, TLOG_SCAN_CORRUPT);
    /* A file that ends exactly after the last write. */
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.len, SEQ, 100, 5000, NULL, NULL, &s, em), 0);
    cr_expect_eq(s.how, TLOG_SCAN_CLEAN);
    cr_expect_eq(s.end, m.len);
    /* The file name's seq must be the header's. */
    cr_expect_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ + 1, 100, 5000, NULL, NULL, &s, em),
        TERN_ECORRUPT);
    free(m.buf);
}

static int stop_cb(void *arg, const struct tlog_rec *r, size_t off)
{
    (void)off;
    return r->index == *(uint64_t *)arg ? -42 : 0;
}

Test(tlog_format, scan_stops_when_the_callback_says)
{
    struct img m;
    struct tlog_scan s;
    uint64_t at = 103;
    img_init(&m, 32 * 1024, SEQ);
    img_writes(&m, 2, 4);
    cr_expect_eq(tlog_seg_scan(m.buf, m.cap, SEQ, 0, 0, stop_cb, &at, &s, NULL),
                 -42);
    free(m.buf);
}

/* What a crash leaves of a 512-byte sector of a write in flight: state 0
 * written, 1 never written (zeros, or old: the file's older bytes), 2 torn
 * (garbage). */
static void crash_sector(uint8_t *sec, unsigned state, const uint8_t *old)
{
    if (state == 1) {
        if (old != NULL) {
            memcpy(sec, old, 512);
        } else {
            memset(sec, 0, 512);
        }
    } else if (state == 2) {
        for (size_t j = 0; j < 512; j++) {
            sec[j] = (uint8_t)rand();
        }
    }
}

/* An older use of a file (seq 3) full of whole records, for the bytes a
 * recycled file holds after its records. */
static void img_older(struct img *old, size_t cap)
{
    uint64_t seq = 3;
    img_init(old, cap, seq);
    while (old->len + 2 * tlog_rec_size(900) + 2 * BLOCK <= cap) {
        img_add(old, seq, TLOG_REC_COMMAND, 900);
        img_add(old, seq, TLOG_REC_COMMAND, 900);
        img_end_write(old, seq);
    }
}

/* Every crash of the write in flight: the last write's sectors (512
 * bytes), each either written, never written (zeros; with older, the
 * bytes of a recycled file's older use) or torn (garbage). The records of
 * the writes before it all load; the scan never says corrupt. */
static void every_crash_of_the_write_in_flight(uint32_t version, bool recycled)
{
    struct img m, old = {0};
    uint8_t *full, *crash;
    size_t start, end, sectors;
    unsigned cases = 0;
    img_version = version;
    if (recycled) {
        img_older(&old, 64 * 1024);
    }
    img_init(&m, 64 * 1024, SEQ);
    if (recycled) {
        memcpy(m.buf + m.len, old.buf + m.len, m.cap - m.len);
    }
    img_writes(&m, 3, 5);
    start = m.len;
    img_writes(&m, 1, 9); /* the write in flight */
    end = m.len;
    sectors = (end - start) / 512;
    cr_assert_geq(sectors, 3);
    full = m.buf;
    crash = malloc(m.cap);
    srand(1);
    /* 3^sectors cases at most 3^8; more sectors: random states. */
    unsigned total = 1;
    for (size_t i = 0; i < sectors && total < 6561; i++) {
        total *= 3;
    }
    for (unsigned c = 0; c < total; c++) {
        struct tlog_scan s;
        unsigned v = c;
        memcpy(crash, full, m.cap);
        for (size_t i = 0; i < sectors; i++) {
            unsigned state = sectors <= 8 ? v % 3 : (unsigned)rand() % 3;
            uint8_t *sec = crash + start + i * 512;
            v /= 3;
            crash_sector(sec, state,
                         recycled ? old.buf + start + i * 512 : NULL);
        }
        cr_assert_eq(
            tlog_seg_scan(crash, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL),
            0);
        cr_assert_neq(s.how, TLOG_SCAN_CORRUPT, "case %u", c);
        cr_assert_geq(s.n_records, 15, "case %u: acknowledged records lost", c);
        cr_assert_geq(s.end, start);
        cr_assert_leq(s.end, end);
        if (c == 0) {
            cr_assert_eq(s.n_records, 24, "all written");
            cr_assert_eq(s.how, TLOG_SCAN_CLEAN);
            cr_assert_eq(s.stale, recycled, "older bytes after them");
        }
        cr_assert_eq(s.linked, version == TLOG_SEG_VERSION_LINKED);
        cases++;
    }
    cr_expect_geq(cases, 27);
    free(crash);
    free(m.buf);
    free(old.buf);
    img_version = TLOG_SEG_VERSION_LINKED;
}

Test(tlog_format, every_crash_of_the_write_in_flight_loads_the_acked)
{
    every_crash_of_the_write_in_flight(TLOG_SEG_VERSION_LINKED, false);
}

Test(tlog_format, every_crash_in_a_recycled_file_loads_the_acked)
{
    every_crash_of_the_write_in_flight(TLOG_SEG_VERSION_LINKED, true);
}

Test(tlog_format, every_crash_in_a_version_1_segment_loads_the_acked)
{
    every_crash_of_the_write_in_flight(TLOG_SEG_VERSION_ZEROED, false);
}

Test(tlog_format, damage_in_acknowledged_bytes_is_corrupt)
{
    struct img m;
    struct tlog_scan s;
    size_t hit;
    img_init(&m, 64 * 1024, SEQ);
    img_writes(&m, 12, 4);
    /* A byte of the second write's first record; later writes follow. */
    hit = m.write_start[1] + 20;
    m.buf[hit] ^= 0x40;
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.how, TLOG_SCAN_CORRUPT);
    cr_expect_eq(s.end, m.write_start[1]);
    cr_expect_geq(s.later_record, m.write_start[2], "a later write's record");
    cr_expect_eq(s.n_records, 4);
    cr_expect_neq(s.why[0], '\0');
    free(m.buf);
}

/* The write that may have been in flight is the one the damage lies in:
 * damage inside a write with the next write after it is corrupt, the same
 * damage inside the last write is what a crash leaves. */
Test(tlog_format, only_the_last_write_may_be_torn)
{
    struct img m;
    struct tlog_scan s;
    img_init(&m, 64 * 1024, SEQ);
    img_writes(&m, 4, 4);
    /* Inside write 3 (its second record's index; the first holds no
     * payload), write 4 after it. */
    m.buf[m.write_start[2] + tlog_rec_size(0) + 20] ^= 0x01;
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.how, TLOG_SCAN_CORRUPT, "write 4 completed after it");
    free(m.buf);
    img_init(&m, 64 * 1024, SEQ);
    img_writes(&m, 4, 4);
    /* Inside write 4, the last (its second record's index; the first
     * holds 9 bytes). */
    m.buf[m.write_start[3] + tlog_rec_size(9) + 20] ^= 0x01;
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.how, TLOG_SCAN_TORN);
    cr_expect_eq(s.n_records, 13, "up to the damaged record");
    free(m.buf);
}

/* A write of one record larger than any other: every crash of it is a
 * torn tail, never damage (its pad lies far past the damage). */
Test(tlog_format, every_crash_of_a_large_write_is_torn)
{
    struct img m;
    uint8_t *crash;
    size_t start, end, sectors;
    img_init(&m, 64 * 1024, SEQ);
    img_writes(&m, 2, 3);
    start = m.len;
    img_add(&m, SEQ, TLOG_REC_COMMAND, 9000);
    img_end_write(&m, SEQ);
    end = m.len;
    sectors = (end - start) / 512;
    cr_assert_geq(sectors, 18);
    crash = malloc(m.cap);
    srand(3);
    for (unsigned c = 0; c < 3000; c++) {
        struct tlog_scan s;
        memcpy(crash, m.buf, m.cap);
        for (size_t i = 0; i < sectors; i++) {
            unsigned state = c == 0 ? 0 : (unsigned)rand() % 3;
            uint8_t *sec = crash + start + i * 512;
            crash_sector(sec, state, NULL);
        }
        cr_assert_eq(
            tlog_seg_scan(crash, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL),
            0);
        cr_assert_neq(s.how, TLOG_SCAN_CORRUPT, "case %u", c);
        cr_assert_geq(s.n_records, 6, "case %u", c);
    }
    free(crash);
    free(m.buf);
}

Test(tlog_format, a_gap_in_the_indexes_ends_the_sequence)
{
    struct img m;
    struct tlog_scan s;
    img_init(&m, 32 * 1024, SEQ);
    img_writes(&m, 1, 3);
    m.next_index++; /* skip one */
    img_writes(&m, 1, 3);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.n_records, 3);
    cr_expect_eq(s.end, m.write_start[1]);
    cr_expect_eq(s.how, TLOG_SCAN_TORN, "nothing of it beyond the window");
    cr_expect_str_eq(s.why, "a record at another index");
    free(m.buf);
}

/* The same file taken as seq 7: a new header and writes over the older
 * bytes (seq 3). */
static void recycled_image(struct img *old, struct img *m, unsigned writes)
{
    img_older(old, 64 * 1024);
    img_init(m, 64 * 1024, SEQ);
    memcpy(m->buf + m->len, old->buf + m->len, old->cap - m->len);
    for (unsigned w = 0; w < writes; w++) {
        img_add(m, SEQ, TLOG_REC_COMMAND, 900);
        img_add(m, SEQ, TLOG_REC_COMMAND, 900);
        img_end_write(m, SEQ);
    }
}

Test(tlog_format, a_recycled_file_s_older_records_are_not_this_use_s)
{
    struct img old, m;
    struct tlog_scan s;
    recycled_image(&old, &m, 2);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.n_records, 4);
    cr_expect_eq(s.end, m.len);
    cr_expect_eq(s.how, TLOG_SCAN_CLEAN, "older bytes, none of seq 7: %s",
                 s.why);
    cr_expect(s.stale);
    cr_expect(s.linked);
    cr_expect_eq(s.link.prev_seq, img_link.prev_seq);
    cr_expect_eq(s.link.prev_end, img_link.prev_end);
    cr_expect_eq(s.link.prev_write, img_link.prev_write);
    free(old.buf);
    free(m.buf);
    /* Nothing of this use yet: its header over older records. */
    img_older(&old, 64 * 1024);
    img_init(&m, 64 * 1024, SEQ);
    memcpy(m.buf + TLOG_SEG_HEADER_SIZE, old.buf + TLOG_SEG_HEADER_SIZE,
           m.cap - TLOG_SEG_HEADER_SIZE);
    cr_assert_eq(tlog_seg_scan(m.buf, m.cap, SEQ, 0, 0, NULL, NULL, &s, NULL),
                 0);
    cr_expect_eq(s.n_records, 0);
    cr_expect(!s.linked);
    cr_expect_eq(s.how, TLOG_SCAN_CLEAN);
    cr_expect(s.stale);
    free(old.buf);
    free(m.buf);
}

/* Damage in the older bytes of a recycled file is no damage of this use;
 * a lost write (the device kept the older bytes) with a later write of
 * this use after it is corrupt. */
Test(tlog_format, a_lost_write_in_a_recycled_file_is_corrupt)
{
    struct img old, m;
    struct tlog_scan s;
    recycled_image(&old, &m, 6);
    /* Write 3 never reached the disk: the older bytes are there. */
    memcpy(m.buf + m.write_start[2], old.buf + m.write_start[2],
           m.write_start[3] - m.write_start[2]);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.how, TLOG_SCAN_CORRUPT, "writes 4 to 6 came after it");
    cr_expect_eq(s.end, m.write_start[2]);
    free(old.buf);
    free(m.buf);
    /* The older bytes after the last write damaged: still a clean end. */
    recycled_image(&old, &m, 2);
    m.buf[m.len + 100] ^= 0x20;
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.how, TLOG_SCAN_CLEAN);
    cr_expect(s.stale);
    cr_expect_eq(s.n_records, 4);
    free(old.buf);
    free(m.buf);
    /* Part of a write that was in flight landed (a record of it can be
     * read after the end): torn, and what is before it stands. */
    recycled_image(&old, &m, 3);
    memset(m.buf + m.write_start[2], 0xee, 512);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5000, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.how, TLOG_SCAN_TORN);
    cr_expect_eq(s.n_records, 4);
    cr_expect_eq(s.end, m.write_start[2]);
    free(old.buf);
    free(m.buf);
}

/* The link opens write 1 of a version 2 segment and nowhere else; a
 * version 1 segment has none. */
Test(tlog_format, the_link_opens_a_version_2_segment_only)
{
    struct img m;
    struct tlog_scan s;
    struct seen seen = {0, 0, true};
    /* Version 2 without its link: nothing in sequence. */
    img_version = TLOG_SEG_VERSION_LINKED;
    img_init(&m, 32 * 1024, SEQ);
    m.len = TLOG_SEG_HEADER_SIZE;
    memset(m.buf + m.len, 0, m.link_len);
    img_writes(&m, 2, 3);
    cr_assert_eq(tlog_seg_scan(m.buf, m.cap, SEQ, 0, 0, NULL, NULL, &s, NULL),
                 0);
    cr_expect_eq(s.n_records, 0);
    cr_expect_str_eq(s.why, "no link record first");
    cr_expect_eq(s.how, TLOG_SCAN_CORRUPT, "its records follow");
    free(m.buf);
    /* Version 1 with a link: nothing in sequence. */
    img_version = TLOG_SEG_VERSION_ZEROED;
    img_init(&m, 32 * 1024, SEQ);
    tlog_link_encode(m.buf + m.len, SEQ, m.next_pos, &img_link);
    m.len += tlog_rec_size(TLOG_LINK_PAYLOAD);
    img_writes(&m, 2, 3);
    cr_assert_eq(tlog_seg_scan(m.buf, m.cap, SEQ, 0, 0, NULL, NULL, &s, NULL),
                 0);
    cr_expect_eq(s.n_records, 0);
    cr_expect_str_eq(s.why, "a link record in a version 1 segment");
    free(m.buf);
    /* Version 2: the link is not an entry, and a second one is out of
     * sequence. */
    img_version = TLOG_SEG_VERSION_LINKED;
    img_init(&m, 32 * 1024, SEQ);
    img_writes(&m, 1, 3);
    tlog_link_encode(m.buf + m.len, SEQ, m.next_pos, &img_link);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 0, 0, seen_cb, &seen, &s, NULL), 0);
    cr_expect_eq(seen.n, 3);
    cr_expect_eq(s.n_records, 3);
    cr_expect_eq(s.first_index, 100);
    cr_expect_eq(s.first_pos, 5000);
    cr_expect_eq(s.end, m.len);
    cr_expect_str_eq(s.why, "a link record inside");
    cr_expect(s.linked);
    free(m.buf);
    /* A link at another stream position than its segment's first. */
    img_init(&m, 32 * 1024, SEQ);
    img_writes(&m, 1, 3);
    cr_assert_eq(
        tlog_seg_scan(m.buf, m.cap, SEQ, 100, 5001, NULL, NULL, &s, NULL), 0);
    cr_expect_eq(s.n_records, 0);
    cr_expect(!s.linked);
    free(m.buf);
}
