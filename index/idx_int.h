/*
 * index/ private header: one section per file of index/, each holding what
 * that file defines for the others (its private interface, and for the
 * files that own a format, the decoders the unit tests and fuzz targets
 * call). Everything one file uses alone stays in that file. Reachable
 * only from index/ (PRIVATE include path) and from the index unit tests
 * and fuzz targets, which compile against it on purpose.
 *
 * Files of index/ and who calls whom (a DAG, top first; no file calls a
 * file above it):
 *
 *   backup.c    backups: manifest, copy, verify, install
 *   env.c       open (recovery), close, accessors
 *   snapshot.c  manifests, bulk catch-up, restore
 *   read.c      queue lookups, group offsets, fetches
 *   status.c    group status and delivery states (reads only)
 *   apply.c     idx_apply, the index writer, idx_sync, idx_bulk_discard
 *   shared.c    shared groups: apply, TRIM's part, the leader's plans
 *   timer.c     delayed messages: apply, plan, stats
 *   clean.c     message rows by range and time, the row cleaner
 *   log.c       commit-log segments and records
 *   cmd.c       command entry codec
 *   keys.c      LMDB key and value codecs
 *   txn.c       errors, read buffer, the pending write txn, idx_flush
 *
 *   backup.c -> snapshot.c (manifest codec), ckpt.c, log.c (record
 *   header, first position), keys.c (state row); the one call into it
 *   is idx_close's idx__backup_detach (env.c); snapshot.c only reads
 *   e->backup (the trim hold)
 *   env.c, snapshot.c -> apply.c -> cmd.c, keys.c, log.c, clean.c
 *   apply.c -> shared.c -> cmd.c, keys.c, log.c
 *   apply.c <-> timer.c (the one cycle: the writer dispatches the timer
 *   commands to timer.c, which appends through idx__produce_append);
 *   snapshot.c -> timer.c (the log start); timer.c -> keys.c, log.c, cmd.c
 *   env.c -> keys.c, log.c;  snapshot.c -> log.c
 *   read.c -> keys.c, log.c, clean.c;  clean.c -> keys.c
 *   status.c -> shared.c (the DLQ name), keys.c
 *   every file but cmd.c and keys.c -> txn.c
 *   cmd.c, keys.c and txn.c call no other file of index/.
 *
 * The sections below follow the same order bottom up, so each one uses
 * only types declared above it.
 */
#ifndef TERN_IDX_INT_H
#define TERN_IDX_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lmdb.h>

#include "cmd.h"
#include "idx.h"

/* ---- txn.c: errors, read buffer, the pending write txn ------------------- */

/* Set e->errmsg from fmt and return code; TERN_ECORRUPT messages carry
 * the source line. */
int idx__fail(struct idx_env *e, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same into errmsg (TERN_ERRMSG_SIZE bytes): for code that touches
 * no env (an idx_reader on another thread). */
int idx__failm(char *errmsg, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Line-stamped error return for corruption/misuse sites (SQLite _BKPT). */
#define IDX__CORRUPT(e, ...)                                                   \
    idx__fail((e), TERN_ECORRUPT, __LINE__, __VA_ARGS__)
#define IDX__CORRUPTM(errmsg, ...)                                             \
    idx__failm((errmsg), TERN_ECORRUPT, __LINE__, __VA_ARGS__)
/* Translate an LMDB return code into a tern code, errmsg "lmdb <what>:
 * ...". MDB_MAP_FULL, ENOSPC and EDQUOT are TERN_EFULL. */
int idx__mdb_err(struct idx_env *e, int rc, const char *what);
/* The same into errmsg, for reads (no MDB_MAP_FULL bookkeeping). */
int idx__mdb_errm(char *errmsg, int rc, const char *what);
/* An EIO from mdb_txn_commit while fewer than IDX__SHORT_WRITE_FREE bytes
 * are free is a full disk (see txn.c). Pure, for tests: rc the commit's
 * code, free_bytes the free bytes after the failure, have_free whether
 * they are known. TERN_EFULL or -rc. */
#define IDX__SHORT_WRITE_FREE ((uint64_t)64 << 20)
int idx__commit_err_code(int rc, uint64_t free_bytes, int have_free);
/* idx__commit_err_code for env e (statvfs of its LMDB dir), errmsg set. */
int idx__commit_eio(struct idx_env *e);
/* Grow e->rbuf to at least n bytes. 0 or -ENOMEM. */
int idx__rbuf_reserve(struct idx_env *e, size_t n);
/* Grow *buf (capacity *cap) to at least n bytes. 0 or -ENOMEM (errmsg). */
int idx__buf_reserve(uint8_t **buf, size_t *cap, size_t n, char *errmsg);
/* Open the pending write txn e->wtxn unless it is open. 0 or a tern code. */
int idx__txn_begin(struct idx_env *e);
/* Drop the pending write txn (if any) and the applied state it described
 * (e->st = e->committed). */
void idx__txn_abort(struct idx_env *e);

/* ---- keys.c: LMDB key/value codecs (format: keys.c) ---------------------- */

/* meta "state": what the index covers. */
struct idx__state
{
    uint64_t last_applied; /* raft index of the last indexed record */
    uint64_t log_end;      /* log position just after it */
    uint64_t last_rec_pos; /* its position (0 with last_applied 0) */
    uint32_t last_rec_checksum;
    uint64_t next_queue_id;    /* next id handed to a created queue */
    uint64_t next_producer_id; /* next block PRODUCER_INIT issues */
    uint64_t last_append_ms;   /* append time of the last valid entry */
};
/* Schema 4: append time, queue value 3 with retention, work marks
 * (keys.c). */
#define IDX__SCHEMA_VERSION 4
#define IDX__STATE_SIZE     64
#define IDX__META_KEY_STATE "state"
void idx__state_encode(uint8_t *buf, const struct idx__state *s);
int idx__state_decode(const void *buf, size_t len, struct idx__state *s);

struct idx__queue_val
{
    uint64_t id;
    uint64_t created_index;
    uint64_t start_offset;
    uint64_t next_offset;
    uint64_t bytes; /* sum of the lengths of the retained messages */
    struct idx_queue_settings settings;
};
#define IDX__QUEUE_VAL_SIZE 80
void idx__queue_val_encode(uint8_t *buf, const struct idx__queue_val *q);
int idx__queue_val_decode(const void *buf,
                          size_t len,
                          struct idx__queue_val *q);

struct idx__msg_val
{
    uint64_t rec_pos;  /* log position of the record holding the message */
    uint32_t data_off; /* byte offset of the message in the record payload */
    uint32_t len;
    uint64_t timestamp_ms; /* append time (docs/MESSAGES.md, "Time") */
    uint64_t producer_id;
    /* Properties (version 2 rows; all 0 in a version 1 row): */
    uint32_t props_off; /* byte offset of the block in the record payload */
    uint32_t props_len; /* 0 = the message has no properties */
    uint32_t tag_hash;  /* idx__tag_hash of the tag, 0 without one */
    uint8_t tag_len;    /* 0 = no tag */
    uint16_t key_len;   /* 0 = no key */
    const uint8_t *key; /* key_len bytes, borrowed from the decoded row */
};
#define IDX__MSG_VAL_SIZE    32 /* version 1: no properties */
#define IDX__MSG_VAL_V2_SIZE 48 /* version 2, before the key bytes */
#define IDX__MSG_VAL_MAX     (IDX__MSG_VAL_V2_SIZE + IDX_KEY_MAX)
#define IDX__MSG_KEY_SIZE    16
void idx__msg_key(uint8_t *key, uint64_t queue_id, uint64_t offset);
/* Writes version 1 when m->props_len is 0, else version 2; returns the
 * value length. */
size_t idx__msg_val_encode(uint8_t *buf, const struct idx__msg_val *m);
/* m->key borrows from buf. */
int idx__msg_val_decode(const void *buf, size_t len, struct idx__msg_val *m);
/* The hash of a tag kept in msgs rows, so a tag filter skips rows without
 * reading the log (a match is confirmed on the record's own tag). */
uint32_t idx__tag_hash(const void *tag, size_t len);

/* keys: u64 BE queue id, u8 key_len - 1, key, u64 BE offset -> empty. */
#define IDX__KEY_ROW_MAX (8 + 1 + IDX_KEY_MAX + 8)
/* Writes the row key; returns its length. prefix_only leaves the offset
 * out (the range of one key's rows). */
size_t idx__key_row(uint8_t *buf,
                    uint64_t queue_id,
                    const void *key,
                    size_t key_len,
                    uint64_t offset,
                    bool prefix_only);

/* groups: (queue id BE, name) -> idx__group_val. Returns the key length. */
size_t idx__group_key(uint8_t *key,
                      uint64_t queue_id,
                      const char *group,
                      size_t group_len);
#define IDX__GROUP_KEY_MAX (8 + TERN_NAME_MAX)
/* groups value (keys.c): version 2 with the committing entry, or the
 * 8-byte version 1 (commit_ms and commit_index 0: unknown). */
struct idx__group_val
{
    uint64_t next_offset;  /* the committed offset; shared: the floor */
    uint64_t commit_ms;    /* append time of the GROUP_COMMIT's entry */
    uint64_t commit_index; /* raft index of that entry */
    /* Version 3 (a shared group, docs/WORKQUEUES.md): shared set, next
     * the first offset never delivered, settings (dlq "" = default). */
    bool shared;
    uint64_t next;
    struct idx_shared_settings settings;
};
#define IDX__GROUP_VAL_SIZE    32
#define IDX__GROUP_VAL_V1_SIZE 8
#define IDX__GROUP_VAL_V3_SIZE 41 /* before the DLQ name */
#define IDX__GROUP_VAL_MAX     (IDX__GROUP_VAL_V3_SIZE + TERN_NAME_MAX)
/* Writes version 2, or version 3 when g->shared; returns the length. */
size_t idx__group_val_encode(uint8_t *buf, const struct idx__group_val *g);
int idx__group_val_decode(const void *buf,
                          size_t len,
                          struct idx__group_val *g);

/* leases (keys.c): u64 BE queue id, u8 group_len, group, u64 BE offset
 * -> idx__lease_val. prefix_only leaves the offset out (one group's
 * rows); returns the key length. */
#define IDX__LEASE_KEY_MAX (8 + 1 + TERN_NAME_MAX + 8)
size_t idx__lease_key(uint8_t *key,
                      uint64_t queue_id,
                      const char *group,
                      size_t group_len,
                      uint64_t offset,
                      bool prefix_only);
#define IDX__LEASE_VAL_SIZE 24
enum { IDX__LEASE_LEASED = 0, IDX__LEASE_READY = 1 };
struct idx__lease_val
{
    uint32_t count; /* deliveries so far (>= 1) */
    uint8_t state;  /* IDX__LEASE_* */
    uint64_t consumer_id;
    uint64_t deadline_ms; /* leased: lease end; ready: not before */
};
void idx__lease_val_encode(uint8_t *buf, const struct idx__lease_val *l);
int idx__lease_val_decode(const void *buf,
                          size_t len,
                          struct idx__lease_val *l);

/* Remembered batch results per (queue, producer) for idempotent retries. */
#define IDX__DEDUP_WINDOW 32
struct idx__batch
{
    uint64_t seq;
    uint64_t base_offset;
    uint32_t count;
};
struct idx__producer_val
{
    uint64_t last_seq;
    uint32_t n; /* remembered batches, newest first */
    struct idx__batch b[IDX__DEDUP_WINDOW];
};
#define IDX__PRODUCER_VAL_MAX (16 + IDX__DEDUP_WINDOW * 20)
void idx__producer_key(uint8_t *key, uint64_t queue_id, uint64_t producer_id);
size_t idx__producer_val_encode(uint8_t *buf,
                                const struct idx__producer_val *p);
int idx__producer_val_decode(const void *buf,
                             size_t len,
                             struct idx__producer_val *p);

/* users: name -> flags, created_index, credential. */
struct idx__user_val
{
    uint32_t flags;
    uint64_t created_index;
    uint32_t cred_len;
    uint8_t cred[IDX_CRED_MAX];
};
#define IDX__USER_VAL_MAX (17 + IDX_CRED_MAX)
/* Returns the value length. */
size_t idx__user_val_encode(uint8_t *buf, const struct idx__user_val *u);
int idx__user_val_decode(const void *buf, size_t len, struct idx__user_val *u);

/* acls: user 0x00 namespace 0x00 pattern -> u32 perms. */
#define IDX__ACL_KEY_MAX                                                       \
    (IDX_USER_NAME_MAX + IDX_NS_NAME_MAX + TERN_NAME_MAX + 2)
size_t idx__acl_key(uint8_t *key,
                    const char *user,
                    size_t user_len,
                    const char *ns,
                    size_t ns_len,
                    const char *pattern,
                    size_t pattern_len);
struct idx__acl_key
{
    char user[TERN_NAME_MAX + 1];
    size_t user_len;
    char ns[TERN_NAME_MAX + 1];
    size_t ns_len;
    char pattern[TERN_NAME_MAX + 1];
    size_t pattern_len;
};
/* Split and validate a stored key (NUL-terminated copies). 0 or
 * TERN_ECORRUPT. */
int idx__acl_key_split(const void *key, size_t len, struct idx__acl_key *out);

/* namespaces: name -> created_index, quotas. */
struct idx__ns_val
{
    uint64_t created_index;
    struct idx_quota quota;
};
#define IDX__NS_VAL_SIZE 40
void idx__ns_val_encode(uint8_t *buf, const struct idx__ns_val *n);
int idx__ns_val_decode(const void *buf, size_t len, struct idx__ns_val *n);

/* producer_ids: u64 BE block number -> owner's created_index, owner
 * name. */
struct idx__pid_val
{
    uint64_t owner_created_index;
    char owner[TERN_NAME_MAX + 1]; /* NUL-terminated after decode */
    size_t owner_len;
};
#define IDX__PID_VAL_MAX (8 + TERN_NAME_MAX)
size_t idx__pid_val_encode(uint8_t *buf, const struct idx__pid_val *p);
int idx__pid_val_decode(const void *buf, size_t len, struct idx__pid_val *p);

/* ns_usage: namespace -> queues, bytes. */
struct idx__usage_val
{
    uint64_t queues;
    uint64_t bytes;
};
#define IDX__USAGE_VAL_SIZE 24
void idx__usage_val_encode(uint8_t *buf, const struct idx__usage_val *u);
int idx__usage_val_decode(const void *buf,
                          size_t len,
                          struct idx__usage_val *u);
/* The ns_usage key of a stored queue name (queue[0..queue_len), valid):
 * its namespace, or "default" for a plain name. *key (OUT) points into
 * queue or at a static string; returns its length. */
size_t idx__usage_key(const char *queue, size_t queue_len, const char **key);

/* Producer-id blocks: PRODUCER_INIT issues block n (1..IDX__PID_BLOCK_MAX)
 * as the producer id n << 32; the block holds every id with those high 32
 * bits. */
#define IDX__PID_BLOCK_SHIFT 32
#define IDX__PID_BLOCK_MAX   UINT64_C(0xffffffff)

/* The cleaner's work marks in meta (keys.c): kind "dead" or "trim" + u64
 * BE queue id into key (IDX__MARK_KEY_SIZE bytes). */
#define IDX__MARK_KEY_SIZE 12
#define IDX__MARK_DEAD     "dead"
#define IDX__MARK_TRIM     "trim"
void idx__mark_key(uint8_t *key, const char *kind, uint64_t queue_id);

/* timers: key (due, raft index, message number; BE) -> idx__timer_val;
 * timer_recs: u64 BE record position -> rows (keys.c). */
#define IDX__TIMER_KEY_SIZE     20
#define IDX__TIMER_VAL_SIZE     32
#define IDX__TIMER_REC_VAL_SIZE 8
struct idx__timer_val
{
    uint32_t msg_no;
    uint64_t queue_id;
    uint64_t created_index; /* the queue's incarnation */
    uint64_t rec_pos;       /* the PRODUCE_DELAYED record */
};
void idx__timer_key(uint8_t *key, const struct idx_timer_key *k);
int idx__timer_key_decode(const void *buf, size_t len, struct idx_timer_key *k);
void idx__timer_val_encode(uint8_t *buf, const struct idx__timer_val *t);
int idx__timer_val_decode(const void *buf,
                          size_t len,
                          struct idx__timer_val *t);
void idx__timer_rec_val_encode(uint8_t *buf, uint32_t rows);
int idx__timer_rec_val_decode(const void *buf, size_t len, uint32_t *rows);

/* Big-endian u64 for sortable key prefixes. */
void idx__put_be64(uint8_t *p, uint64_t v);
uint64_t idx__get_be64(const uint8_t *p);

/* ---- cmd.c: command entries: cmd.h ------------------------------------ */

/* ---- log.c: the commit log (format: log.c) ------------------------------- */

#define IDX__REC_HDR_SIZE 24

struct idx__record
{
    uint16_t version;       /* IDX__REC_VERSION_* */
    uint64_t index;         /* raft index */
    uint32_t payload_len;   /* bytes after the header */
    uint32_t checksum;      /* of its version (log.c): header[0..20), payload */
    const uint8_t *payload; /* set by idx__record_decode only */
};

/* Decode and check a record header (IDX__REC_HDR_SIZE bytes at hdr): magic,
 * version, flags, length bound. Does not check the checksum. 0 or
 * TERN_EMALFORMED. */
int idx__record_header_decode(const void *hdr, struct idx__record *out);
/* Checksum of a record given its header bytes (their version says
 * which) and payload. */
uint32_t idx__record_checksum(const void *hdr,
                              const void *payload,
                              size_t payload_len);
/* The same, over a payload given in pieces: begin with the header, update
 * with each piece, end. */
struct idx__record_sum
{
    struct tern_checksum32_either sum;
};
void idx__record_sum_begin(struct idx__record_sum *rs, const void *hdr);
void idx__record_sum_update(struct idx__record_sum *rs,
                            const void *buf,
                            size_t len);
uint32_t idx__record_sum_end(struct idx__record_sum *rs);
/* Pure decoder of one whole record at buf[0..len): header checks, payload
 * bound, checksum. On success fills *out (payload borrowed from buf) and
 * *size (OUT: header + payload bytes). TERN_EMALFORMED if short or
 * malformed, TERN_ECORRUPT on checksum mismatch. */
int idx__record_decode(const void *buf,
                       size_t len,
                       struct idx__record *out,
                       size_t *size);
/* Encode a record header of version (IDX__REC_VERSION_*) for (index,
 * payload) into hdr. */
void idx__record_header_encode(void *hdr,
                               uint16_t version,
                               uint64_t index,
                               const void *payload,
                               uint32_t payload_len);

/* A copy of the env's segment table from the segment holding a position
 * on (at most e->view_max_segs segments), read through its own fds and
 * buffer: what an idx_reader reads on another thread, touching no env.
 * idx__logview_init on the loop thread; the rest on any one thread. */
#define IDX__VIEW_MAX_SEGS 4096
/* The largest record buffer handed from one idx_reader to the next. */
#define IDX__HELD_MAX ((size_t)16 << 20)
struct idx__logview
{
    struct idx__seg *segs; /* copied; fd: this view's, -1 until opened */
    size_t n_segs;
    unsigned open_fds; /* of segs, at most IDX_READER_MAX_FDS */
    bool capped;       /* segments after the copied ones exist */
    uint64_t log_end;  /* end of the copied segments' bytes */
    char *log_dir;     /* copied */
    uint8_t *rbuf;     /* record read buffer */
    size_t rbuf_cap;
    /* the position of the checked record in rbuf (UINT64_MAX: none); a
     * read of it takes it from there (a record handed over from the
     * reader before, env held_buf) */
    uint64_t rbuf_pos;
    /* read-ahead asked over [ahead_from, ahead_until): by this view, or
     * by the readers before it (idx__logview_init) */
    uint64_t ahead_from;
    uint64_t ahead_until;
    char *errmsg; /* TERN_ERRMSG_SIZE bytes, the owner's */
};
/* 0 or -ENOMEM (errmsg). from must be at or after the log's first
 * segment start. */
int idx__logview_init(struct idx__logview *v,
                      const struct idx_env *e,
                      uint64_t from,
                      char *errmsg);
/* idx__log_read_record through v (limit: the view's end), with the same
 * read-ahead; -EAGAIN when the record may lie past a capped view. */
int idx__logview_read_record(struct idx__logview *v,
                             uint64_t pos,
                             struct idx__record *rec);
void idx__logview_close(struct idx__logview *v);
/* A process-wide increasing number: a new env and every cut of its log
 * take the next one (e->gen). */
uint64_t idx__next_gen(void);
/* read.c: idx_close abandons the readers not yet run and waits for the
 * running ones. */
void idx__readers_abandon(struct idx_env *e);

/* Scan log/ into the segment table (bad or non-contiguous segments cut
 * the log), creating the first segment of an empty log. */
int idx__log_open(struct idx_env *e);
void idx__log_close(struct idx_env *e);
/* Read n stream bytes at pos into buf (caller-owned), across segments. */
int idx__log_pread(struct idx_env *e, uint64_t pos, void *buf, size_t n);
/* Append one record of version (idx__entry_record_version of payload) at
 * the log end: *pos (OUT) its position, *checksum (OUT) its record
 * checksum. A failed write is rolled back. */
int idx__log_append_record(struct idx_env *e,
                           uint16_t version,
                           uint64_t index,
                           const void *payload,
                           uint32_t len,
                           uint64_t *pos,
                           uint32_t *checksum);
/* Appended bytes after which their writeback is started (log.c,
 * log_writeback). 256 KiB: larger bursts queued every node's O_DSYNC raft
 * appends behind them (1 MiB: 45.8 k msg/s against 51.2 k, 7 alternated
 * rounds, bench/RESULTS.md); smaller ones gained nothing more. */
#define IDX__LOG_WRITEBACK_BYTES ((uint64_t)256 << 10)
/* Append raw stream bytes at pos == log end (bulk catch-up). */
int idx__log_write_raw(struct idx_env *e,
                       uint64_t pos,
                       const void *buf,
                       size_t n);
/* Cut the log at pos (<= log end), durably (ftruncate + fsync). */
int idx__log_truncate(struct idx_env *e, uint64_t pos);
/* Delete the segments that end at or before pos (never the active one). */
int idx__log_drop_head(struct idx_env *e, uint64_t pos);
/* Delete every segment; the log restarts empty at pos. */
int idx__log_reset(struct idx_env *e, uint64_t pos);
/* Position of the first byte the segment files hold. */
uint64_t idx__log_first(const struct idx_env *e);
/* Is pos inside a segment of version 1 (an earlier release's, log.c)? */
bool idx__log_in_v1_segment(const struct idx_env *e, uint64_t pos);
/* Bytes of the segment files on disk (headers included). */
uint64_t idx__log_disk_bytes(const struct idx_env *e);
/* "log/<file>.seg offset N" of the stream position pos (pos <= log_end)
 * into buf. */
void idx__log_locate(const struct idx_env *e,
                     uint64_t pos,
                     char *buf,
                     size_t cap);
/* fdatasync the segments written since the last sync, fsync log/ when
 * segments were created or removed. */
int idx__log_sync(struct idx_env *e);
/* Read and verify the record at pos, bounded by limit. On success the
 * payload is in e->rbuf[IDX__REC_HDR_SIZE..] (borrowed until the next
 * read). TERN_ECORRUPT / TERN_EMALFORMED for a bad record, -errno for I/O
 * errors. */
int idx__log_read_record(struct idx_env *e,
                         uint64_t pos,
                         uint64_t limit,
                         struct idx__record *rec);

/* ---- clean.c: message rows by range and time, the cleaner ---------------- */

/* First offset in [lo, hi) of queue_id whose msgs row has append time >=
 * time_ms, or hi (OUT *offset); binary search in txn (any txn of e). */
int idx__msgs_time_search(struct idx_env *e,
                          MDB_txn *txn,
                          uint64_t queue_id,
                          uint64_t lo,
                          uint64_t hi,
                          uint64_t time_ms,
                          uint64_t *offset);
/* Delete the rows of the messages of queue_id at offsets [from, to) in the
 * pending txn, at most budget of them; *deleted (OUT) how many. Rows of
 * other tables keyed by (queue id, offset) are deleted here too when
 * they are added, so the cleaner keeps one entry point. */
int idx__clean_range(struct idx_env *e,
                     uint64_t queue_id,
                     uint64_t from,
                     uint64_t to,
                     unsigned budget,
                     unsigned *deleted);
/* Record cleaner work in the pending txn: kind IDX__MARK_DEAD (name
 * empty) or IDX__MARK_TRIM with the queue's stored name (borrowed). */
int idx__mark_put(struct idx_env *e,
                  const char *kind,
                  uint64_t queue_id,
                  const char *name,
                  size_t name_len);

/* ---- claim.c: single active consumer of stream groups ------------------- */

/* Apply CLAIM of queue q in the pending txn at the entry's time t.
 * Results as idx.h says; 0 or a failure code. */
int idx__claim_apply(struct idx_env *e,
                     const struct idx__queue_val *q,
                     uint64_t t,
                     const struct idx__cmd *c,
                     struct idx_result *r);
/* The claim row of the groups key key[0..key_len) in txn: 0 with *c, 1
 * when there is none (*c zeroed), or a failure code. */
int idx__claim_read(struct idx_env *e,
                    MDB_txn *txn,
                    const void *key,
                    size_t key_len,
                    struct idx_claim *c);
/* The commit check of GROUP_COMMIT (consumer_id 0) and GROUP_COMMIT_AS on
 * group key key[0..key_len) (idx__group_key): 1 with r->status
 * TERN_ECLAIMED and r->claim when a live claim (until > t) of another
 * consumer (any, for consumer_id 0) refuses it, 0 when it may go on, or
 * a failure code. */
int idx__claim_commit_check(struct idx_env *e,
                            const void *key,
                            size_t key_len,
                            uint64_t consumer_id,
                            uint64_t t,
                            struct idx_result *r);

/* ---- shared.c: shared groups (docs/WORKQUEUES.md) ------------------------ */

/* Apply SHARED_CONFIG, DELIVER, SETTLE in the pending txn; t is the
 * entry's timestamp_ms. Results as idx.h says; 0 or a failure code. */
int idx__shared_apply(struct idx_env *e,
                      const struct idx__queue_val *q,
                      uint64_t t,
                      const struct idx__cmd *c,
                      struct idx_result *r);
/* DEAD_LETTER, in two steps around the DLQ append (apply.c): check
 * returns 1 when the row of c->dl is there with that count and due by t
 * (then *dlq, caller's TERN_NAME_MAX + 1 bytes, is the DLQ's stored
 * name), 0 when the result is already set (a moved row: status 0, count
 * 0; or the group's refusal), or a failure code; finish deletes the row
 * and moves the floor. */
int idx__shared_dl_check(struct idx_env *e,
                         const struct idx__queue_val *q,
                         uint64_t t,
                         const struct idx__cmd *c,
                         char *dlq,
                         struct idx_result *r);
int idx__shared_dl_finish(struct idx_env *e,
                          const struct idx__queue_val *q,
                          const struct idx__cmd *c);
/* TRIM of queue_id to new first offset to: moves floor and next of its
 * shared groups up to it and deletes their lease rows below it. */
int idx__shared_trim(struct idx_env *e, uint64_t queue_id, uint64_t to);
/* Whether the stored group row (k) of a GROUP_COMMIT is a shared one: 1
 * yes, 0 no or no row, or a failure code. */
int idx__group_is_shared(struct idx_env *e, const void *key, size_t key_len);
/* The DLQ's stored name of shared group g (group[0..group_len)) of
 * queue[0..queue_len) into out (TERN_NAME_MAX + 1 bytes): its dlq setting
 * in the queue's namespace, or "<queue>-dlq-<group>". 0, or TERN_EBADNAME
 * when that is no valid queue name (status.c reads it). */
int idx__shared_dlq_name(const char *queue,
                         size_t queue_len,
                         const char *group,
                         size_t group_len,
                         const struct idx__group_val *g,
                         char *out);

/* ---- apply.c: the index writer ------------------------------------------- */

/* Index one record (already in the log at pos) into the pending txn;
 * results optional (as idx_apply). 0 or a tern code for an LMDB failure;
 * the caller then aborts the txn (idx__txn_abort). */
int idx__index_record(struct idx_env *e,
                      uint64_t pos,
                      uint64_t index,
                      const uint8_t *payload,
                      uint32_t len,
                      uint32_t checksum,
                      struct idx_result *results,
                      unsigned max,
                      unsigned *n_results);

/* The queue row of name[0..n) in the pending txn: 0 with *q, 1 when there
 * is none, or a failure code. */
int idx__queue_get(struct idx_env *e,
                   const char *name,
                   size_t n,
                   struct idx__queue_val *q);
/* The produce path shared by PRODUCE, PRODUCE_PROPS and TIMER_FIRE: append
 * the n messages of mi (borrowed; batch_bytes their bytes, each <=
 * max_message), which lie in payload, the record at rec_pos, to queue
 * (q: its row, updated) with append time timestamp_ms: namespace quota,
 * retention admission, msgs and key rows, bytes, the over-limits note,
 * the queue and usage rows. r->status TERN_EQUOTA or TERN_EQUEUEFULL
 * refuses (nothing written); else r->base_offset and r->count. 0 or a
 * failure code. */
int idx__produce_append(struct idx_env *e,
                        const char *queue,
                        size_t queue_len,
                        struct idx__queue_val *q,
                        uint64_t rec_pos,
                        uint64_t timestamp_ms,
                        const uint8_t *payload,
                        uint64_t producer_id,
                        const struct idx__msg_iter *mi,
                        uint32_t n,
                        uint64_t batch_bytes,
                        struct idx_result *r);

/* Producer dedup shared by PRODUCE and PRODUCE_DELAYED (apply.c; rules at
 * the top of apply.c): check before applying a batch (1 answered: a
 * duplicate or TERN_ESEQUENCE in r; 0 go on with *pv filled; or a failure
 * code), remember (seq, base, count) after applying it. */
int idx__producer_check(struct idx_env *e,
                        uint64_t queue_id,
                        uint64_t producer_id,
                        uint64_t seq,
                        struct idx__producer_val *pv,
                        struct idx_result *r);
int idx__producer_remember(struct idx_env *e,
                           uint64_t queue_id,
                           uint64_t producer_id,
                           uint64_t seq,
                           struct idx__producer_val *pv,
                           uint64_t base,
                           uint32_t count);

/* ---- timer.c: delayed messages ------------------------------------------- */

/* PRODUCE_DELAYED c of the record at pos (raft index index): a timer row
 * per message, numbered from *msg_no (IN/OUT: advanced by the command's
 * messages whatever the result). */
int idx__timer_apply_delayed(struct idx_env *e,
                             uint64_t pos,
                             uint64_t index,
                             const struct idx__cmd *c,
                             uint32_t *msg_no,
                             struct idx_result *r);
/* TIMER_FIRE c of the record at pos (payload its bytes), entry time t,
 * append time append_ms. */
int idx__timer_apply_fire(struct idx_env *e,
                          uint64_t pos,
                          uint64_t append_ms,
                          uint64_t t,
                          const uint8_t *payload,
                          const struct idx__cmd *c,
                          struct idx_result *r);
/* Lower *need (IN/OUT) to the oldest record a pending timer needs, in the
 * pending txn. */
int idx__timer_need(struct idx_env *e, uint64_t *need);

/* Delete the key index rows of queue queue_id's messages at offsets
 * [from, to) from the pending txn, reading their keys from the msgs rows
 * (call it before those rows are deleted; offsets without a row or without
 * a key are skipped). 0 or a tern code. */
int idx__key_rows_delete(struct idx_env *e,
                         uint64_t queue_id,
                         uint64_t from,
                         uint64_t to);

/* ---- snapshot.c: manifests (format: snapshot.c) -------------------------- */

struct idx__manifest
{
    uint64_t last_applied;
    uint64_t log_end;
    uint64_t last_rec_pos;
    uint32_t last_rec_checksum;
    /* version 2: where the sender's log starts (0 = it was never
     * trimmed) and its checkpoint there (file size, header checksum) */
    uint64_t log_start;
    uint64_t ckpt_size;
    uint32_t ckpt_sum;
};
#define IDX__MANIFEST_SIZE_V1 40
#define IDX__MANIFEST_SIZE    64
/* Pure decoder: 0, TERN_EMALFORMED or TERN_EVERSION. */
int idx__manifest_decode(const void *buf, size_t len, struct idx__manifest *m);

/* Encode m as a version 2 manifest into b (IDX__MANIFEST_SIZE bytes). */
void idx__manifest_encode(uint8_t *b, const struct idx__manifest *m);

/* ---- backup.c: backups (format: backup.c) -------------------------------- */

#define IDX__BACKUP_MAX_FILES    100000u
#define IDX__BACKUP_NAME_MAX     29 /* "log/" + 20 digits + ".ckpt" */
#define IDX__BACKUP_MANIFEST_MAX ((size_t)8 << 20)
struct idx__backup_file
{
    char name[IDX__BACKUP_NAME_MAX + 1];
    uint64_t size;
    uint32_t checksum;
};
struct idx__backup_manifest
{
    uint64_t created_ms;
    uint64_t node_id;
    uint64_t term;
    struct idx__manifest snap; /* what the copy covers */
    char cluster[IDX_BACKUP_CLUSTER_MAX + 1];
    uint32_t n_files;
    struct idx__backup_file *files; /* decode: tern_malloc'd, owned by m */
};
/* Is name one a manifest may list ("lmdb/data.mdb", "log/<20 digits>.seg"
 * or ".ckpt")? Pure. */
bool idx__backup_name_valid(const char *name, size_t n);
/* Append m's encoding to w (caller-owned). 0, TERN_EINVAL (bad name or
 * count) or TERN_ETOOBIG. */
int idx__backup_manifest_encode(const struct idx__backup_manifest *m,
                                struct tern_wbuf *w);
/* Pure decoder of untrusted bytes: 0, TERN_EMALFORMED, TERN_ECORRUPT
 * (checksum), TERN_EVERSION or -ENOMEM. On success m->files is allocated:
 * idx__backup_manifest_free. */
int idx__backup_manifest_decode(const void *buf,
                                size_t len,
                                struct idx__backup_manifest *m);
void idx__backup_manifest_free(struct idx__backup_manifest *m);
/* idx_close: cancel the running backup and wait for its worker. */
void idx__backup_detach(struct idx_env *e);

/* env.c: empty every table in the pending txn (a rebase on a fetched
 * checkpoint, snapshot.c). */
int idx__lmdb_clear(struct idx_env *e);

/* ---- ckpt.c: checkpoints (format at the top of ckpt.c) ------------------ */

#define IDX__CKPT_HDR_SIZE 64
struct idx__ckpt_hdr
{
    uint64_t pos;
    uint64_t last_applied;
    uint64_t last_rec_pos;
    uint32_t last_rec_checksum;
    uint32_t rows;
    uint64_t body_len;
    uint32_t body_sum;
    uint32_t hdr_sum;
};
void idx__ckpt_path(const struct idx_env *e,
                    uint64_t pos,
                    char *buf,
                    size_t cap);
/* List <log>/NNN.ckpt into e->ckpts (removes unfinished .tmp files). */
int idx__ckpt_scan(struct idx_env *e);
/* Write the checkpoint at pos (== e->st.log_end) from the pending txn;
 * nothing if the file exists. */
int idx__ckpt_write(struct idx_env *e, uint64_t pos);
/* The same in the background (ckpt.c, BACKGROUND): finish the previous
 * job, commit the pending txn, open a read txn on it and leave the job in
 * e->ckpt_job for idx_ckpt_take; a new pending txn is open on return. */
int idx__ckpt_start(struct idx_env *e, uint64_t pos);
/* Drop the pending job unless a thread writes it (then wait for it; a
 * written one joins the list). idx_close and idx__ckpt_forget_all. */
void idx__ckpt_abandon(struct idx_env *e);
int idx__ckpt_header_decode(const uint8_t *h,
                            uint64_t pos,
                            struct idx__ckpt_hdr *out);
/* Read and verify the checkpoint file at pos: *body (caller frees). */
int idx__ckpt_read_file(struct idx_env *e,
                        uint64_t pos,
                        struct idx__ckpt_hdr *hdr,
                        uint8_t **body);
/* Put the checkpoint's rows into the (empty) tables in the pending txn
 * and set e->st from it. */
int idx__ckpt_load(struct idx_env *e, uint64_t pos);
/* Size of the checkpoint file at pos with its header checksum in *sum;
 * 0 if missing or unusable. */
uint64_t idx__ckpt_file_size(struct idx_env *e, uint64_t pos, uint32_t *sum);
int idx__ckpt_pread(struct idx_env *e,
                    uint64_t pos,
                    uint64_t off,
                    void *buf,
                    size_t n);
/* Delete the checkpoints before pos (all: idx__ckpt_forget_all). */
void idx__ckpt_drop_before(struct idx_env *e, uint64_t pos);
void idx__ckpt_forget_all(struct idx_env *e);

/* ---- read.c: no private interface ---------------------------------------- */

/* ---- env.c: the env ------------------------------------------------------ */

struct idx__seg; /* one segment file (log.c) */

/* Allocated and freed by env.c; each group of fields names the file that
 * writes it. Every file reads it. */
struct idx_env
{
    /* env.c: options and paths */
    int lock_fd; /* <dir>/LOCK, flock'ed exclusively while open */
    char *dir;
    char *log_dir;
    char *lmdb_dir;
    size_t map_size;
    uint64_t segment_bytes;
    uint32_t max_message;

    /* log.c: the segment table */
    struct idx__seg *segs; /* sorted by start, contiguous */
    size_t n_segs;
    size_t cap_segs;
    unsigned open_fds;
    uint64_t log_end; /* end of the bytes in the segment files */
    int dir_dirty;    /* a segment was created or removed since sync */
    uint64_t wb_pos;  /* log.c: writeback started up to here */
    /* env.c and snapshot.c: the first position the log holds records
     * from (0, or the checkpoint it was trimmed to or restored from) */
    uint64_t log_start;

    /* ckpt.c: checkpoint positions, sorted; env.c: their interval */
    uint64_t *ckpts;
    size_t n_ckpts;
    size_t cap_ckpts;
    uint64_t checkpoint_bytes;
    /* ckpt.c: background checkpoints (idx_options.background_checkpoints)
     * and the one job in flight or NULL; apply.c: whether the record being
     * indexed comes from idx_apply (rebuilds write synchronously) */
    bool ckpt_background;
    bool ckpt_live;
    struct idx_ckpt_job *ckpt_job;
    /* apply.c: the first record since the state was last rebuilt that
     * holds an entry of a later release (idx__entry_newer), recorded
     * unapplied: no checkpoint is written after it (idx_refused_newer) */
    bool refused_newer;
    uint64_t refused_pos;
    /* env.c (a rebuild): the first record of a version 1 segment that an
     * earlier release recorded unapplied (an XXH3 entry in a record of
     * version 1); a checkpoint file in a version 1 segment after it was
     * written without it, and the rebuild writes it again (ckpt.c) */
    bool stale_ckpts;
    uint64_t stale_from;

    /* snapshot.c: a checkpoint being fetched from a peer (bulk bytes
     * below the manifest's log_start), and the log end the previous
     * snapshot manifest named (trimming never passes it) */
    struct
    {
        bool active;
        uint64_t pos;  /* the checkpoint's position (the manifest's S) */
        uint64_t size; /* its file size */
        uint32_t sum;  /* its header checksum */
        uint64_t written;
        int fd;
    } stage;
    uint64_t prev_snap_end;
    /* backup.c: the running backup, or NULL; while set the head of the
     * log is not trimmed (snapshot.c) */
    struct idx_backup *backup;

    /* apply.c writes, read.c drains (idx_over_limits_drain): queues a
     * produce left over a drop-oldest limit, for the leader's planner */
#define IDX__OVER_MAX 1024
    char over[IDX__OVER_MAX][TERN_NAME_MAX + 1];
    size_t n_over;
    bool over_lost;

    /* LMDB: env.c opens it; txn.c owns wtxn and committed; the index
     * writer (apply.c) advances st, txn.c resets it on abort */
    MDB_env *mdb;
    MDB_dbi dbi_meta;
    MDB_dbi dbi_queues;
    MDB_dbi dbi_msgs;
    MDB_dbi dbi_groups;
    MDB_dbi dbi_producers;
    MDB_dbi dbi_users;
    MDB_dbi dbi_acls;
    MDB_dbi dbi_namespaces;
    MDB_dbi dbi_pids;
    MDB_dbi dbi_usage;
    MDB_dbi dbi_keys;            /* message key index (keys.c) */
    MDB_dbi dbi_leases;          /* shared groups' lease rows (keys.c) */
    MDB_dbi dbi_timers;          /* delayed messages (keys.c, timer.c) */
    MDB_dbi dbi_timer_recs;      /* records pending timers need */
    MDB_dbi dbi_claims;          /* stream groups' claims (claim.c) */
    MDB_txn *wtxn;               /* pending write txn or NULL */
    struct idx__state st;        /* applied state, including pending */
    struct idx__state committed; /* state of the last commit */

    /* security generation (idx_security_gen): apply.c sets sec_dirty when
     * it changes users, acls, namespaces or producer_ids; txn.c bumps
     * sec_gen when that txn commits or is dropped; env.c and snapshot.c
     * bump it after idx_open and idx_restore */
    uint64_t sec_gen;
    bool sec_dirty;

    /* sticky failure: set by txn.c (idx_flush), apply.c, snapshot.c */
    int failed;       /* sticky error of a failed apply, 0 if none */
    bool sync_failed; /* a log/LMDB sync failed (apply.c, idx_sync) */
    bool map_full;    /* a write met MDB_MAP_FULL (txn.c) */
    /* what recovery and bulk discards dropped: env.c, log.c, apply.c */
    uint64_t truncated; /* bytes cut from the tail by idx_open */
    uint64_t discarded; /* un-indexed bulk bytes dropped (idx_bulk_discard) */
    char cut_note[TERN_ERRMSG_SIZE]; /* where idx_open cut the log, or "" */
    /* last error detail: every file, mostly through idx__fail */
    char errmsg[TERN_ERRMSG_SIZE];

    /* log.c: the generation of the log's bytes (idx__next_gen at open and
     * at every cut or deleted segment); read.c: idx_readers started on
     * this env and not yet ended (loop thread only) */
    uint64_t gen;
    struct tern_list readers;
    size_t view_max_segs; /* IDX__VIEW_MAX_SEGS; tests lower it */

    /* record read buffer: grown by txn.c, filled by log.c */
    uint8_t *rbuf;
    size_t rbuf_cap;
    /* log.c, idx__log_read_record: the position after the last record
     * read (a read there is sequential) and how far the kernel has been
     * asked to read ahead (POSIX_FADV_WILLNEED). */
    uint64_t read_next;
    uint64_t read_ahead_until;
    /* read.c: the range the last idx_reader asked to be read ahead (its
     * view's ahead_from/ahead_until, handed back by idx_reader_end): the
     * next reader starting inside it asks only for what lies past it,
     * not 8 MiB again for each answer of a consumer streaming a queue.
     * Cleared when the log is cut. */
    uint64_t view_ahead_from;
    uint64_t view_ahead_until;
    /* read.c: the record the last idx_reader read last (bytes checked,
     * header included), handed back by idx_reader_end and on to the next
     * reader that starts at it: a consumer's answers of about 1 MiB over
     * records of about as much would otherwise read and check the
     * record at each answer's start twice. Valid while held_gen is
     * e->gen (a cut takes a new generation); owned (freed by idx_close,
     * or when replaced). At most IDX__HELD_MAX bytes. */
    uint8_t *held_buf;
    size_t held_cap;
    uint64_t held_pos;
    uint64_t held_gen;
    /* idx_xxh3_in_use: the version of the record at xxh3_pos, read in
     * generation xxh3_gen (0: not read, -1: unreadable) */
    uint64_t xxh3_pos;
    uint64_t xxh3_gen;
    int xxh3_version;
};

#endif /* TERN_IDX_INT_H */
