/*
 * tlog/format.c: the on-disk format of the raft log store's segments
 * (docs/LOGSTORE.md §3), and the scan that loads one. This file owns the
 * format. All integers little-endian, encoded byte by byte.
 *
 * SEGMENT HEADER, the first 4096 bytes of a segment file:
 *
 *   offset size  field
 *   0      8     magic "TERNRLG\0"
 *   8      4     version: 1 (zeroed when prepared) or 2 (linked)
 *   12     4     header size = 4096
 *   16     8     seq: store-wide segment number (the file is seg-<seq>)
 *   24     4     block size: 512..4096, a power of two
 *   28     4     writes in flight at once, at most (1..64)
 *   32     4     tern_checksum32 over bytes [0,32)
 *   36     ...   zeros up to 4096
 *
 * The header is written and synced when the file is prepared, ahead of
 * its use, so it never shares a write with records; the first record
 * gives the segment's first raft index and stream position.
 *
 * RECORDS follow from offset 4096, each at an 8-byte boundary:
 *
 *   offset size  field
 *   0      4     magic "TRLE"
 *   4      1     version: 1
 *   5      1     type: 1 command, 2 barrier, 3 configuration change,
 *                4 link (version 2 segments), 255 pad
 *   6      2     write: the number of the write that holds the record
 *                within its segment (1, 2, ...; at most 32767)
 *   8      8     seq of the segment (bytes of an older use of the file
 *                never pass for this one's)
 *   16     8     raft index (pad: 0)
 *   24     8     term (pad: 0)
 *   32     8     stream position before the record: a command advances
 *                it by 24 + payload length (the commit log's record,
 *                index/log.c), other types and pads by 0
 *   40     4     payload length (<= 1 GiB)
 *   44     4     tern_checksum32_xxh3 of the payload seeded with
 *                tern_checksum32 of bytes [0,44) (as client frames of
 *                version 2 and commit-log records of version 2)
 *   48     ...   payload, then zeros up to the next multiple of 8
 *
 * LINK. A version 2 segment may be a recycled file: after its records lie
 * the bytes of its older uses, not zeros. So the first record of its
 * first write (at offset 4096, write 1, index and term 0, the stream
 * position of the record after it) is a link naming where the segment
 * written before it ended, a 24-byte payload:
 *
 *   0      8     seq of the previous segment written (0: none)
 *   8      8     offset after its last record in sequence
 *   16     4     the number of its last write
 *   20     4     zero
 *
 * The load checks every segment but the last against the link of the
 * next (store.c): its records must end exactly there. Only the last one
 * is judged by the torn-tail rule below.
 *
 * Records of a segment hold consecutive raft indexes and stream positions,
 * continuing the previous segment's. Every write ends with a pad record
 * (zeros for payload) that takes it to a block boundary, so no block
 * holds bytes of two writes, no write rewrites bytes already
 * acknowledged, and the pad marks where the write ended. A pad needs its
 * 48-byte header: with fewer bytes left in the block (or none: the write
 * ended on a boundary) it runs through the next block as well.
 *
 * TORN TAILS (tlog_seg_scan). Records are in sequence while each decodes,
 * has this seq, the next index and the next stream position, and the
 * write of the record before it (or the next one, after a pad). Where
 * that stops (offset o): only zeros after o, or o at the image's end, is
 * a clean end; in a version 2 segment also any bytes from which no record
 * of this seq can be read (an older use of the file: "stale"). Otherwise the
 * writes that may have been in flight at a crash are the one o lies in (the
 * write of the last record in sequence, or the next one if that record was a
 * pad) and the following ones up to the header's writes in flight; any of their
 * blocks may have landed or not. A record of this seq anywhere after o from a
 * later write means a write after the damage completed: the damage is in
 * acknowledged bytes, corrupt. Otherwise it is torn: what a crash leaves.
 * Damage inside the last acknowledged write, with nothing written after it,
 * looks torn; as with raft_uv, only the checksums of the records before it
 * tell.
 */
#include <stdio.h>
#include <string.h>

#include <tern_common.h>

#include "tlog.h"

#define TLOG__SEG_MAGIC  "TERNRLG"   /* and a NUL: 8 bytes */
#define TLOG__REC_MAGIC  0x454c5254u /* "TRLE" read little-endian */
#define TLOG__VERSION    1u          /* of records */
#define TLOG__SEG_FIELDS 32u

/* Fuzz builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) accept any
 * checksum so that mutated inputs reach the checks behind it. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define TLOG__CHECKSUM_OK(stored, computed)                                    \
    ((void)(stored), (void)(computed), 1)
#else
#define TLOG__CHECKSUM_OK(stored, computed) ((stored) == (computed))
#endif

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static bool block_ok(uint32_t b)
{
    return b >= TLOG_BLOCK_MIN && b <= TLOG_BLOCK_MAX && (b & (b - 1)) == 0;
}

/* ---- segment header ------------------------------------------------------ */

void tlog_seg_header_encode(uint8_t *out, const struct tlog_seg_header *h)
{
    memset(out, 0, TLOG_SEG_HEADER_SIZE);
    memcpy(out, TLOG__SEG_MAGIC, 8);
    tern_put_u32(out + 8, h->version ? h->version : TLOG_SEG_VERSION_LINKED);
    tern_put_u32(out + 12, TLOG_SEG_HEADER_SIZE);
    tern_put_u64(out + 16, h->seq);
    tern_put_u32(out + 24, h->block_size);
    tern_put_u32(out + 28, h->in_flight);
    tern_put_u32(out + TLOG__SEG_FIELDS,
                 tern_checksum32(out, TLOG__SEG_FIELDS));
}

int tlog_seg_header_decode(const uint8_t *buf,
                           size_t len,
                           struct tlog_seg_header *h,
                           char *errmsg)
{
    uint32_t version;
    if (len < TLOG_SEG_HEADER_SIZE) {
        tern_errmsg_printf(errmsg, "segment of %zu bytes: no header", len);
        return TERN_EMALFORMED;
    }
    if (memcmp(buf, TLOG__SEG_MAGIC, 8) != 0) {
        tern_errmsg_printf(errmsg, "segment header: bad magic");
        return TERN_ECORRUPT;
    }
    if (!TLOG__CHECKSUM_OK(tern_get_u32(buf + TLOG__SEG_FIELDS),
                           tern_checksum32(buf, TLOG__SEG_FIELDS))) {
        tern_errmsg_printf(errmsg, "segment header: checksum mismatch");
        return TERN_ECORRUPT;
    }
    version = tern_get_u32(buf + 8);
    if (version != TLOG_SEG_VERSION_ZEROED &&
        version != TLOG_SEG_VERSION_LINKED) {
        tern_errmsg_printf(errmsg,
                           "segment header: version %u (this build "
                           "reads %u and %u)",
                           version, TLOG_SEG_VERSION_ZEROED,
                           TLOG_SEG_VERSION_LINKED);
        return TERN_EVERSION;
    }
    h->version = version;
    h->seq = tern_get_u64(buf + 16);
    h->block_size = tern_get_u32(buf + 24);
    h->in_flight = tern_get_u32(buf + 28);
    if (tern_get_u32(buf + 12) != TLOG_SEG_HEADER_SIZE ||
        !block_ok(h->block_size) || h->in_flight == 0 ||
        h->in_flight > TLOG_IN_FLIGHT_MAX || h->seq == 0) {
        tern_errmsg_printf(errmsg,
                           "segment header: bad sizes (header %u, block %u, "
                           "writes in flight %u) or seq 0",
                           tern_get_u32(buf + 12), h->block_size, h->in_flight);
        return TERN_ECORRUPT;
    }
    return 0;
}

/* ---- records --------------------------------------------------------------
 */

size_t tlog_rec_size(uint32_t len)
{
    return TLOG_REC_HEADER_SIZE + pad8(len);
}

uint64_t tlog_rec_pos_after(const struct tlog_rec *r)
{
    if (r->type == TLOG_REC_COMMAND) {
        return r->pos + TLOG_STREAM_RECORD_HEADER + r->len;
    }
    return r->pos;
}

static uint32_t rec_checksum(const uint8_t *hdr,
                             const void *payload,
                             uint32_t len)
{
    return tern_checksum32_xxh3(payload, len, tern_checksum32(hdr, 44));
}

static void rec_header(uint8_t *out, const struct tlog_rec *r)
{
    tern_put_u32(out, TLOG__REC_MAGIC);
    out[4] = TLOG__VERSION;
    out[5] = r->type;
    tern_put_u16(out + 6, r->write);
    tern_put_u64(out + 8, r->seq);
    tern_put_u64(out + 16, r->index);
    tern_put_u64(out + 24, r->term);
    tern_put_u64(out + 32, r->pos);
    tern_put_u32(out + 40, r->len);
}

void tlog_rec_encode(uint8_t *out, const struct tlog_rec *r)
{
    size_t tail = pad8(r->len) - r->len;
    rec_header(out, r);
    if (r->len > 0) {
        memcpy(out + TLOG_REC_HEADER_SIZE, r->payload, r->len);
    }
    memset(out + TLOG_REC_HEADER_SIZE + r->len, 0, tail);
    tern_put_u32(out + 44,
                 rec_checksum(out, out + TLOG_REC_HEADER_SIZE, r->len));
}

size_t tlog_pad_size(uint64_t off, uint32_t block_size)
{
    size_t left = (size_t)(block_size - off % block_size);
    return left >= TLOG_REC_HEADER_SIZE ? left : left + block_size;
}

void tlog_pad_encode(uint8_t *out,
                     size_t size,
                     uint64_t seq,
                     uint16_t write,
                     uint64_t pos)
{
    struct tlog_rec r = {0};
    r.type = TLOG_REC_PAD;
    r.seq = seq;
    r.write = write;
    r.pos = pos;
    r.len = (uint32_t)(size - TLOG_REC_HEADER_SIZE);
    memset(out + TLOG_REC_HEADER_SIZE, 0, r.len);
    r.payload = out + TLOG_REC_HEADER_SIZE;
    tlog_rec_encode(out, &r);
}

void tlog_link_encode(uint8_t *out,
                      uint64_t seq,
                      uint64_t pos,
                      const struct tlog_link *k)
{
    uint8_t p[TLOG_LINK_PAYLOAD];
    struct tlog_rec r = {0};
    tern_put_u64(p, k->prev_seq);
    tern_put_u64(p + 8, k->prev_end);
    tern_put_u32(p + 16, k->prev_write);
    tern_put_u32(p + 20, 0);
    r.type = TLOG_REC_LINK;
    r.write = 1;
    r.seq = seq;
    r.pos = pos;
    r.len = TLOG_LINK_PAYLOAD;
    r.payload = p;
    tlog_rec_encode(out, &r);
}

static bool type_ok(uint8_t t)
{
    return t == TLOG_REC_COMMAND || t == TLOG_REC_BARRIER ||
           t == TLOG_REC_CHANGE || t == TLOG_REC_LINK || t == TLOG_REC_PAD;
}

int tlog_rec_decode(const uint8_t *buf,
                    size_t len,
                    struct tlog_rec *r,
                    size_t *used)
{
    size_t size;
    if (len < TLOG_REC_HEADER_SIZE || tern_get_u32(buf) != TLOG__REC_MAGIC ||
        buf[4] != TLOG__VERSION || !type_ok(buf[5]) ||
        tern_get_u16(buf + 6) == 0 || tern_get_u16(buf + 6) > TLOG_WRITES_MAX) {
        return TERN_EMALFORMED;
    }
    r->write = tern_get_u16(buf + 6);
    r->type = buf[5];
    r->seq = tern_get_u64(buf + 8);
    r->index = tern_get_u64(buf + 16);
    r->term = tern_get_u64(buf + 24);
    r->pos = tern_get_u64(buf + 32);
    r->len = tern_get_u32(buf + 40);
    if (r->len > TLOG_REC_MAX_PAYLOAD) {
        return TERN_EMALFORMED;
    }
    size = tlog_rec_size(r->len);
    if (size > len) {
        return TERN_EMALFORMED;
    }
    r->payload = buf + TLOG_REC_HEADER_SIZE;
    if (!TLOG__CHECKSUM_OK(tern_get_u32(buf + 44),
                           rec_checksum(buf, r->payload, r->len))) {
        return TERN_ECORRUPT;
    }
    *used = size;
    return 0;
}

/* ---- scan -----------------------------------------------------------------
 */

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) {
            return false;
        }
    }
    return true;
}

/* The record is the next in sequence: why not, or NULL. pos_known:
 * s->next_pos holds (else the record sets it); s->next_index 0: not
 * known yet (likewise). */
static const char *out_of_sequence(const struct tlog_rec *r,
                                   const struct tlog_scan *s,
                                   size_t off,
                                   bool pos_known)
{
    bool first = off == TLOG_SEG_HEADER_SIZE;
    if (r->seq != s->header.seq) {
        return "a record of another seq";
    }
    if (s->header.version == TLOG_SEG_VERSION_LINKED &&
        first != (r->type == TLOG_REC_LINK)) {
        return first ? "no link record first" : "a link record inside";
    }
    if (r->type == TLOG_REC_LINK) {
        if (s->header.version != TLOG_SEG_VERSION_LINKED) {
            return "a link record in a version 1 segment";
        }
        if (r->len != TLOG_LINK_PAYLOAD || r->index != 0 || r->term != 0 ||
            r->write != 1 ||
            tern_get_u32((const uint8_t *)r->payload + 20) != 0) {
            return "a malformed link record";
        }
        return pos_known && r->pos != s->next_pos
                   ? "a record at another stream position"
                   : NULL;
    }
    if (r->write != (s->ended ? s->write + 1 : s->write)) {
        return "a record of another write";
    }
    if (pos_known && r->pos != s->next_pos) {
        return "a record at another stream position";
    }
    if (r->type == TLOG_REC_PAD) {
        return r->index == 0 && r->term == 0 ? NULL : "a pad with an index";
    }
    if (r->index == 0 || r->index == UINT64_MAX) {
        return "a record at index 0 or 2^64 - 1";
    }
    return s->next_index == 0 || r->index == s->next_index
               ? NULL
               : "a record at another index";
}

/* The first 8-byte boundary after from where a record of seq from a
 * write after last decodes, or 0 if none. */
static size_t later_record(const uint8_t *img,
                           size_t len,
                           size_t from,
                           uint64_t seq,
                           uint32_t last)
{
    for (size_t off = pad8(from + 1); off + TLOG_REC_HEADER_SIZE <= len;
         off += 8) {
        struct tlog_rec r;
        size_t used;
        if (tern_get_u32(img + off) == TLOG__REC_MAGIC &&
            tern_get_u64(img + off + 8) == seq &&
            tern_get_u16(img + off + 6) > last &&
            tlog_rec_decode(img + off, len - off, &r, &used) == 0) {
            return off;
        }
    }
    return 0;
}

int tlog_seg_scan(const uint8_t *img,
                  size_t len,
                  uint64_t seq,
                  uint64_t index,
                  uint64_t pos,
                  tlog_rec_cb cb,
                  void *arg,
                  struct tlog_scan *out,
                  char *errmsg)
{
    size_t off = TLOG_SEG_HEADER_SIZE;
    const char *why = NULL;
    bool pos_known = index != 0;
    int rv;

    memset(out, 0, sizeof *out);
    rv = tlog_seg_header_decode(img, len, &out->header, errmsg);
    if (rv != 0) {
        return rv;
    }
    if (seq != 0 && out->header.seq != seq) {
        tern_errmsg_printf(errmsg,
                           "segment header: seq %llu in the file of "
                           "seq %llu",
                           (unsigned long long)out->header.seq,
                           (unsigned long long)seq);
        return TERN_ECORRUPT;
    }
    out->next_index = index;
    out->next_pos = pos;
    out->write = 0;
    out->ended = true; /* the first record is of write 1 */
    while (off < len) {
        struct tlog_rec r;
        size_t used;
        rv = tlog_rec_decode(img + off, len - off, &r, &used);
        if (rv != 0) {
            why = rv == TERN_ECORRUPT ? "a record failing its checksum"
                                      : "no whole record";
            break;
        }
        why = out_of_sequence(&r, out, off, pos_known);
        if (why != NULL) {
            break;
        }
        pos_known = true;
        out->write = r.write;
        out->ended = r.type == TLOG_REC_PAD;
        if (r.type == TLOG_REC_LINK) {
            const uint8_t *p = r.payload;
            out->linked = true;
            out->link.prev_seq = tern_get_u64(p);
            out->link.prev_end = tern_get_u64(p + 8);
            out->link.prev_write = tern_get_u32(p + 16);
        } else if (r.type != TLOG_REC_PAD) {
            if (out->n_records == 0) {
                out->first_index = r.index;
                out->first_pos = r.pos;
            }
            if (cb != NULL) {
                rv = cb(arg, &r, off);
                if (rv != 0) {
                    return rv;
                }
            }
            out->next_index = r.index + 1;
            out->n_records++;
        }
        out->next_pos = tlog_rec_pos_after(&r);
        off += used;
    }
    out->end = off;
    if (off >= len || all_zero(img + off, len - off)) {
        out->how = TLOG_SCAN_CLEAN;
        return 0;
    }
    (void)snprintf(out->why, sizeof out->why, "%s", why);
    out->later_record = later_record(
        img, len, off, out->header.seq,
        (out->ended ? out->write + 1 : out->write) + out->header.in_flight - 1);
    if (out->later_record != 0) {
        out->how = TLOG_SCAN_CORRUPT;
    } else if (out->header.version == TLOG_SEG_VERSION_LINKED &&
               later_record(img, len, off - 1, out->header.seq, 0) == 0) {
        /* Nothing of this use from o on (off - 1: o itself is looked at):
         * the file's older bytes, or what a write in flight left that no
         * record of it can be read from. */
        out->how = TLOG_SCAN_CLEAN;
        out->stale = true;
        out->why[0] = '\0';
    } else {
        out->how = TLOG_SCAN_TORN;
    }
    return 0;
}
