/*
 * index/: tern's node-local state machine store (prefix idx_).
 *
 * Two parts, one truth:
 *   - the commit log: append-only segment files holding one checksummed
 *     record per applied Raft command entry (the entry bytes and its raft
 *     index). It survives Raft log compaction and is byte-identical on every
 *     node (entries are deterministic: the leader stamps timestamps), so a
 *     lagging node catches up by copying the byte range it lacks
 *     (idx_bulk_*). Formats are written down in index/log.c.
 *   - LMDB: queue definitions, queue -> offset -> record location,
 *     consumer-group offsets, producer dedup state, last_applied and the
 *     log end, always in the same write transaction as the change they
 *     describe. It is derived from the commit log and rebuilt from it when
 *     lost or inconsistent. Key encoding: index/keys.c.
 *
 * Command entries (the Raft entry payload) are built with idx_cmd_* and
 * applied with idx_apply; one entry carries a batch of commands, each with
 * its own result. Applying is deterministic: logical errors (no such queue,
 * sequence gap) are results, not failures; only I/O errors fail idx_apply.
 *
 * Writes go into one pending LMDB write transaction; idx_flush commits it
 * (node/ calls it once per loop iteration: group commit). Reads see only
 * flushed state. Not thread-safe: one thread (the node loop) uses an env.
 */
#ifndef TERN_IDX_H
#define TERN_IDX_H

#include <stddef.h>
#include <stdint.h>

#include <tern_common.h>

struct idx_env;

struct idx_options {
    const char *dir;        /* created if missing; holds log/ and lmdb/ */
    size_t map_size;        /* LMDB map size; 0 = 1 GiB */
    uint64_t segment_bytes; /* roll segments at this size; 0 = 64 MiB */
    uint32_t max_message;   /* largest message payload; 0 = 4 MiB */
};

/* Open (creating if needed). Truncates a torn or corrupt log tail to the
 * last valid record, then reconciles LMDB with the log (re-indexing records
 * LMDB lacks; rebuilding it from the log if it is ahead or damaged).
 * *out is released by idx_close. */
int idx_open(const struct idx_options *o, struct idx_env **out,
             char *errmsg);
/* Flushes, syncs, closes, frees. */
void idx_close(struct idx_env *e);

/* Raft index of the last applied entry (0 if none). */
uint64_t idx_last_applied(const struct idx_env *e);
/* Byte position of the end of the commit log. */
uint64_t idx_log_end(const struct idx_env *e);
/* Bytes truncated from the log tail by idx_open (0 if it was clean). */
uint64_t idx_truncated_bytes(const struct idx_env *e);
/* Last error detail. Borrowed, valid until the next call on e. */
const char *idx_errmsg(const struct idx_env *e);

/* ---- Command entries --------------------------------------------------- */

enum idx_cmd_type {
    IDX_CMD_QUEUE_CREATE = 1,
    IDX_CMD_QUEUE_DELETE = 2,
    IDX_CMD_PRODUCE = 3,
    IDX_CMD_GROUP_COMMIT = 4,
};

struct idx_msg {
    const void *data; /* borrowed */
    uint32_t len;
};

/* Build one entry into w (caller-owned). Call idx_cmd_begin, then any
 * number of idx_cmd_* adds, then idx_cmd_end, which seals the entry
 * (count and checksum). w->err reports allocation failure. */
void idx_cmd_begin(struct tern_wbuf *w, uint64_t timestamp_ms);
void idx_cmd_queue_create(struct tern_wbuf *w, const char *queue);
void idx_cmd_queue_delete(struct tern_wbuf *w, const char *queue);
/* producer_id 0 means no dedup. seq is per (producer, queue) and starts at
 * 1; each batch uses the next number. */
void idx_cmd_produce(struct tern_wbuf *w, const char *queue,
                     uint64_t producer_id, uint64_t seq,
                     const struct idx_msg *msgs, uint32_t n);
/* Commit a consumer group's next offset to read. */
void idx_cmd_group_commit(struct tern_wbuf *w, const char *queue,
                          const char *group, uint64_t next_offset);
int idx_cmd_end(struct tern_wbuf *w);

/* Check that an entry is well formed (version, checksum, every command's
 * bounds) without applying it. */
int idx_cmd_validate(const void *entry, size_t len);

/* Valid queue and group names: 1..200 bytes of [A-Za-z0-9._-]. */
int idx_name_valid(const char *name);

struct idx_result {
    int status;           /* 0 or a tern code (TERN_ENOQUEUE, ...) */
    uint64_t base_offset; /* produce: offset of the first message */
    uint32_t count;       /* produce: number of messages */
    int duplicate;        /* produce: 1 if this batch was applied before */
};

/* Apply the entry at raft index: append it to the commit log and index it.
 * Entries at or below last_applied are skipped (*n_results = 0, returns
 * 0). Results for each command are written to results[0..max) and their
 * number to *n_results (OUT). Returns 0, or a negative code on I/O
 * failure (-ENOSPC -> TERN_EFULL), after which the env refuses further
 * applies until reopened. */
int idx_apply(struct idx_env *e, uint64_t index, const void *entry,
              size_t len, struct idx_result *results, unsigned max,
              unsigned *n_results);

/* Commit the pending write transaction (no fsync: the Raft log is the
 * durable source of truth). */
int idx_flush(struct idx_env *e);
/* Flush, then fdatasync the log and sync LMDB. */
int idx_sync(struct idx_env *e);

/* ---- Reads (flushed state only) ---------------------------------------- */

struct idx_queue_info {
    const char *name; /* borrowed for the callback */
    uint64_t start_offset; /* first readable offset */
    uint64_t next_offset;  /* offset the next message will get */
    uint64_t created_index; /* raft index of the create */
};
typedef int (*idx_queue_cb)(void *arg, const struct idx_queue_info *q);
/* Calls cb for each queue in name order; a non-zero return stops. */
int idx_queue_list(struct idx_env *e, idx_queue_cb cb, void *arg);
int idx_queue_get(struct idx_env *e, const char *queue,
                  struct idx_queue_info *out);

struct idx_fetched {
    uint64_t offset;
    uint64_t timestamp_ms;
    uint64_t producer_id;
    const void *data; /* borrowed for the callback */
    uint32_t len;
};
typedef int (*idx_fetch_cb)(void *arg, const struct idx_fetched *m);
/* Read up to max_msgs messages (and about max_bytes: at least one message
 * is returned even if larger) from offset. *next_offset (OUT) is the offset
 * after the last message returned. TERN_ENOQUEUE, TERN_EOFFSET (offset
 * below the start), 0 with no calls at the end of the queue. Every record
 * read is verified by checksum (TERN_ECORRUPT, never garbage). */
int idx_fetch(struct idx_env *e, const char *queue, uint64_t offset,
              uint32_t max_msgs, uint32_t max_bytes, idx_fetch_cb cb,
              void *arg, uint64_t *next_offset);

/* Committed offset of a group (0 if it never committed). */
int idx_group_offset(struct idx_env *e, const char *queue, const char *group,
                     uint64_t *offset);

/* ---- Snapshots and bulk catch-up --------------------------------------- */

/* Sync everything and write a manifest of the current state into w
 * (version, checksum, last_applied, log end, checksum of the last record).
 * Format in index/snapshot.c. */
int idx_snapshot(struct idx_env *e, struct tern_wbuf *w);
/* Adopt a manifest: if the local state already covers it, nothing to do;
 * otherwise the log must already hold [0, manifest end) (after bulk
 * writes): index it and set last_applied. TERN_ECORRUPT if the local log
 * disagrees with the manifest. */
int idx_restore(struct idx_env *e, const void *manifest, size_t len);
/* Which bytes [*from, *to) the local log lacks to reach the manifest. */
int idx_bulk_range(struct idx_env *e, const void *manifest, size_t len,
                   uint64_t *from, uint64_t *to);
/* Read raw log bytes at pos (leader side). *n (OUT) may be < cap. */
int idx_bulk_read(struct idx_env *e, uint64_t pos, void *buf, size_t cap,
                  size_t *n);
/* Append raw log bytes at pos == idx_log_end (follower side). Records are
 * verified when idx_restore indexes them. */
int idx_bulk_write(struct idx_env *e, uint64_t pos, const void *buf,
                   size_t n);

#endif /* TERN_IDX_H */
