/*
 * tlog/: tern's raft log store (prefix tlog_), docs/LOGSTORE.md. Built in
 * stages; this header holds what is built: the on-disk format of a
 * segment (its header, its records, the pads that end each write on a
 * block boundary), the scan that loads a segment image and tells a torn
 * tail from damage (format.c, which writes the byte layout down), and the
 * store over a directory of segments (store.c): load, appends written
 * from the loop thread, truncate, compaction.
 *
 * Depends on common/ and libuv. One loop thread owns a store.
 */
#ifndef TLOG_H
#define TLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include <tern_common.h>

#define TLOG_SEG_HEADER_SIZE 4096u /* records start here */
#define TLOG_REC_HEADER_SIZE 48u
#define TLOG_REC_MAX_PAYLOAD ((uint32_t)1 << 30)
/* A command record advances the stream position by the commit log's
 * record header (index/log.c, 24 bytes) plus its payload: positions are
 * those of the commit log rebuilt from the store (LOGSTORE.md §4). */
#define TLOG_STREAM_RECORD_HEADER 24u
/* Block sizes a segment may declare, and the most bytes in flight. */
#define TLOG_BLOCK_MIN     512u
#define TLOG_BLOCK_MAX     4096u
#define TLOG_WINDOW_MAX    ((uint32_t)64 << 20) /* bytes of one write */
#define TLOG_IN_FLIGHT_MAX 64u    /* writes in flight a header may declare */
#define TLOG_WRITES_MAX    32767u /* writes in one segment */

/* Segment format versions: 1 (stage 1: segments written over with zeros
 * when prepared), 2 (segments may be recycled files: the first record is
 * a link naming where the previous segment's records end). Both load;
 * new segments are version 2. */
#define TLOG_SEG_VERSION_ZEROED 1u
#define TLOG_SEG_VERSION_LINKED 2u

/* Record types: the raft entry types (libraft's values, which raft/ maps),
 * the link that opens a version 2 segment, and the pad that fills a write
 * up to its last block's end. */
enum tlog_rec_type {
    TLOG_REC_COMMAND = 1,
    TLOG_REC_BARRIER = 2,
    TLOG_REC_CHANGE = 3,
    TLOG_REC_LINK = 4,
    TLOG_REC_PAD = 255
};
#define TLOG_LINK_PAYLOAD 24u /* prev seq, prev end, prev write, zero */

/* Written when the segment is prepared, before anything is known of
 * what it will hold: its first record gives the first index and stream
 * position. */
struct tlog_seg_header
{
    uint64_t seq;        /* store-wide segment number; names the file */
    uint32_t block_size; /* writes start and end on these boundaries */
    uint32_t in_flight;  /* writes in flight at once, at most */
    uint32_t version;    /* TLOG_SEG_VERSION_*; encode: 0 means LINKED */
};

/* Encode h into out (TLOG_SEG_HEADER_SIZE bytes, zeros after the fields). */
void tlog_seg_header_encode(uint8_t *out, const struct tlog_seg_header *h);
/* Decode and check a header from buf (len bytes). 0, or TERN_ECORRUPT
 * (bad magic, checksum, sizes), TERN_EVERSION (a version this build does
 * not read) or TERN_EMALFORMED (len too short), with errmsg. */
int tlog_seg_header_decode(const uint8_t *buf,
                           size_t len,
                           struct tlog_seg_header *h,
                           char *errmsg);

/* One record. payload points into the caller's memory (encode: read;
 * decode: into the decoded buffer). A pad's payload is its zeros. */
struct tlog_rec
{
    uint8_t type;   /* enum tlog_rec_type */
    uint16_t write; /* its write's number in the segment (1..) */
    uint64_t seq;   /* its segment's seq */
    uint64_t index;
    uint64_t term;
    uint64_t pos; /* stream position before the record */
    uint32_t len; /* payload bytes */
    const void *payload;
};

/* Bytes a record of len payload bytes takes: header plus payload padded
 * to 8. */
size_t tlog_rec_size(uint32_t len);
/* The stream position after r (pos, plus the commit log's record for a
 * command). */
uint64_t tlog_rec_pos_after(const struct tlog_rec *r);
/* Encode r into out (tlog_rec_size(r->len) bytes). */
void tlog_rec_encode(uint8_t *out, const struct tlog_rec *r);
/* Size of the pad record that ends a write ending at segment offset off
 * on a block boundary: every write ends with one (it marks the end); at
 * least a header, so when fewer than TLOG_REC_HEADER_SIZE bytes are left
 * (or none) the pad runs through the next block too. */
size_t tlog_pad_size(uint64_t off, uint32_t block_size);
/* Encode a pad of size bytes (tlog_pad_size's) into out. */
void tlog_pad_encode(uint8_t *out,
                     size_t size,
                     uint64_t seq,
                     uint16_t write,
                     uint64_t pos);

/* Where the segment before ends: the link record that opens write 1 of a
 * version 2 segment. prev_seq 0: no segment before it was written. */
struct tlog_link
{
    uint64_t prev_seq;
    uint64_t prev_end;   /* offset after its last record in sequence */
    uint32_t prev_write; /* the number of its last write */
};
/* Encode the link record of segment seq (write 1, at stream position
 * pos) into out (tlog_rec_size(TLOG_LINK_PAYLOAD) bytes). */
void tlog_link_encode(uint8_t *out,
                      uint64_t seq,
                      uint64_t pos,
                      const struct tlog_link *k);
/* Decode the record at buf (len bytes left in the image): 0 and *used, or
 * TERN_EMALFORMED (short, bad magic, version, write, type, length) or
 * TERN_ECORRUPT (checksum). Checks nothing against other records. */
int tlog_rec_decode(const uint8_t *buf,
                    size_t len,
                    struct tlog_rec *r,
                    size_t *used);

/* How a segment's records end. */
enum tlog_scan_end {
    /* At the image's end, only zeros after the last record, or (version
     * 2) nothing of this seq after it (an older use of the file). */
    TLOG_SCAN_CLEAN,
    /* Bytes after the last record that are no record of the sequence, and
     * no record of this segment from a write after those that may have
     * been in flight: what a crash leaves. The records before end stand. */
    TLOG_SCAN_TORN,
    /* A record of this segment from a later write lies after end
     * (later_record): the damage at end is in acknowledged bytes. */
    TLOG_SCAN_CORRUPT
};

struct tlog_scan
{
    struct tlog_seg_header header;
    uint64_t first_index; /* of the first record (0: none in sequence) */
    uint64_t first_pos;
    uint64_t next_index; /* after the last record in sequence (0: none) */
    uint64_t next_pos;
    uint64_t n_records; /* records in sequence, pads not counted */
    size_t end;         /* offset after the last record in sequence */
    uint32_t write;     /* the write of the last record in sequence */
    bool ended;         /* that record was a pad: its write ended */
    enum tlog_scan_end how;
    size_t later_record; /* TLOG_SCAN_CORRUPT: the offset of that record */
    bool linked;         /* version 2: its link record is in sequence */
    struct tlog_link link;
    bool stale;   /* CLEAN, and bytes after end: a recycled file's older */
    char why[96]; /* not CLEAN: what stopped the scan at end */
};

/* Called for each record in sequence (pads excepted) with its offset in
 * the image; a non-zero return stops the scan and is returned. */
typedef int (*tlog_rec_cb)(void *arg, const struct tlog_rec *r, size_t off);

/* Scan a segment image (img, len bytes: the whole file). seq: the seq
 * the file name gives (0: any). index, pos: where the previous segment
 * ended (0, 0: not known, the first record sets them). Records are in
 * sequence while each is whole, of this seq, at the next index and
 * stream position (pads at the stream position, index and term 0); in a
 * version 2 segment the first is its link (out->link; not handed to cb).
 * 0 with *out filled (out->how says how they end), or the header's error
 * (errmsg), or cb's return. Borrows img; records handed to cb point into
 * it. */
int tlog_seg_scan(const uint8_t *img,
                  size_t len,
                  uint64_t seq,
                  uint64_t index,
                  uint64_t pos,
                  tlog_rec_cb cb,
                  void *arg,
                  struct tlog_scan *out,
                  char *errmsg);

/* ---- the store (store.c) ------------------------------------------------ */

struct tlog_store; /* opaque */

#define TLOG_DEFAULT_SEGMENT_BYTES ((uint64_t)8 << 20)

struct tlog_config
{
    const char *dir;        /* created 0700 if missing; owned by caller */
    uint64_t segment_bytes; /* a segment file's size (a larger record gets a
                               larger file); default
                               TLOG_DEFAULT_SEGMENT_BYTES */
    uint32_t block_size;    /* default 4096 */
    uint32_t window;        /* the most bytes of one write (one larger
                               record excepted); default 1 MiB */
    bool no_aio;            /* writes through the thread pool only */
    uint64_t void_below;    /* segments of a lower seq are void: deleted at
                               open, unread (tlog_reset); 0: none */
    uint32_t free_max;      /* forgotten segment files kept for reuse (the
                               free list: free-N files), at most; default 4 */
    uint64_t restart_index; /* where the caller's snapshot ends + 1 (0:
                               none): a segment starting there after a gap
                               supersedes every entry before it */
};

/* One entry. Appends: payload is the caller's, read during the call.
 * Loads: payload points into the store's load buffers (tlog_loaded). */
struct tlog_entry
{
    uint8_t type; /* TLOG_REC_COMMAND, _BARRIER or _CHANGE */
    uint64_t term;
    const void *payload;
    uint32_t len;
};

/* What tlog_open loaded: the entries in index order from first_index, and
 * where appends go on. Freed with tlog_loaded_free. */
struct tlog_loaded
{
    uint64_t first_index; /* 0: no entries */
    struct tlog_entry *entries;
    size_t n;
    uint64_t next_index; /* 0: nothing was ever written */
    uint64_t next_pos;
    unsigned torn; /* torn tails found at open (0 or 1): a write a crash
                      interrupted, after every acknowledged one, of which
                      a record can be read (one that left nothing
                      readable looks like older bytes); a version 2 one
                      is found again at each open until a later segment's
                      link settles it */
    /* private: the segment images the payloads point into (mapped files,
     * or a copy for a file too short to map) */
    struct tlog_image
    {
        void *p;
        size_t len;
        bool mapped;
    } * images;
    size_t n_images;
};
void tlog_loaded_free(struct tlog_loaded *l);

/* Open the store in c->dir on loop (the caller's loop thread from now on)
 * and load it: every segment scanned in seq order, each continuing the
 * previous one or superseding its entries from the index it starts at (a
 * truncate), each but the last with records ending where the next one's
 * link says; the last one synced (a version 1 one with a torn tail
 * shortened to its last whole record first). Segments without records go
 * to the free list (or are deleted), the newest kept as the spare. 0 with
 * *out and *loaded, or a negative code with errmsg: TERN_ECORRUPT
 * (damage: file and offset named), -errno. */
int tlog_open(uv_loop_t *loop,
              const struct tlog_config *c,
              struct tlog_store **out,
              struct tlog_loaded *loaded,
              char *errmsg);

/* Where the appends of an empty store start (its first index and stream
 * position); TERN_EINVAL once anything was appended or loaded. */
int tlog_start_at(struct tlog_store *s, uint64_t index, uint64_t pos);

/* Write the first entries of a store that has no segment, synchronously
 * (durable on return), without opening it: a raft bootstrap. 0,
 * -EEXIST (segments exist) or a negative code, with errmsg. */
int tlog_bootstrap(const struct tlog_config *c,
                   uint64_t index,
                   uint64_t pos,
                   const struct tlog_entry *entries,
                   unsigned n,
                   char *errmsg);

/* Void every segment that exists now (an install replaces the log): the
 * appends submitted before still complete, later ones start at index and
 * pos in new segments. Returns the first seq that stays valid: what the
 * caller records durably (its tlog_config.void_below for later opens)
 * before tlog_forget deletes the void segments. */
uint64_t tlog_reset(struct tlog_store *s, uint64_t index, uint64_t pos);
/* What tlog_reset would return now (nothing changes). */
uint64_t tlog_reset_seq(const struct tlog_store *s);
uint64_t tlog_next_index(const struct tlog_store *s);
uint64_t tlog_next_pos(const struct tlog_store *s);

/* Append n entries at tlog_next_index (encoded at once: the caller's
 * memory is free when this returns). cb(arg, 0) once they are durable,
 * never from inside this call, callbacks in submission order; a write
 * that fails fails its appends and every later one (no holes) and the
 * store refuses appends from then on. 0, or a negative code (cb never
 * runs): TERN_ESHUTDOWN (closing), the failure that stopped the store,
 * TERN_ETOOBIG (a payload over TLOG_REC_MAX_PAYLOAD). */
typedef void (*tlog_append_cb)(void *arg, int status);
int tlog_append(struct tlog_store *s,
                const struct tlog_entry *entries,
                unsigned n,
                tlog_append_cb cb,
                void *arg);

/* Drop the entries from index on (index >= the first kept, < next):
 * after the appends submitted before, before those after, which start a
 * new segment (the load then supersedes the older entries from index
 * on). 0 or TERN_EINVAL. */
int tlog_truncate(struct tlog_store *s, uint64_t index);

/* Forget the entries below index: segments holding only such entries, and
 * void ones, go (off the loop thread), oldest first, up to the first one
 * that stays or that a write still targets: onto the free list while it
 * has room, else deleted. */
void tlog_forget(struct tlog_store *s, uint64_t index);

/* Read the whole file name of the directory dir_fd into *img
 * (tern_malloc'd, the caller frees it) and *len. 0, TERN_ETOOBIG (over
 * max bytes) or -errno. */
int tlog_read_file(int dir_fd,
                   const char *name,
                   uint64_t max,
                   uint8_t **img,
                   size_t *len);

/* Stats for tests and metrics. */
struct tlog_stats
{
    uint64_t writes;   /* writes completed */
    uint64_t bytes;    /* bytes written by them */
    uint64_t segments; /* segments in use */
    uint64_t prepared; /* segments prepared since open */
    uint64_t recycled; /* of them, from a file of the free list */
    uint64_t deleted;  /* segments forgotten since open (deleted or freed) */
    uint64_t freed;    /* of them, kept on the free list */
    uint64_t free;     /* files on the free list now */
    bool aio;          /* writes go out by AIO from the loop */
};
void tlog_get_stats(const struct tlog_store *s, struct tlog_stats *out);

/* Close: the write in flight completes, queued appends get -ECANCELED in
 * order, then cb(arg) from the loop. The store is freed before cb. */
void tlog_close(struct tlog_store *s, void (*cb)(void *arg), void *arg);

#endif
