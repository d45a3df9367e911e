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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tern_common.h>

struct idx_env;

struct idx_options
{
    const char *dir;        /* created if missing; holds log/ and lmdb/ */
    size_t map_size;        /* LMDB map size; 0 = 1 GiB */
    uint64_t segment_bytes; /* roll segments at this size; 0 = 64 MiB */
    uint32_t max_message;   /* largest message payload; 0 = 4 MiB */
    /* a checkpoint of the metadata every this many log bytes (index/
     * ckpt.c); 0 = segment_bytes */
    uint64_t checkpoint_bytes;
    /* write the checkpoints idx_apply reaches in a worker thread (the
     * caller runs idx_ckpt_take/run/end, below) instead of inside the
     * apply; idx_open and idx_restore always write theirs inline */
    bool background_checkpoints;
    /* When another env (a process still exiting: a killed node whose
     * thread-pool threads have not yet left the kernel) holds the
     * directory's lock, retry for this long before TERN_EBUSY; 0 = fail
     * at once. Blocks the calling thread meanwhile. */
    unsigned lock_wait_ms;
};

/* Open (creating if needed). Verifies every record of the log and cuts
 * it at the first bad one (torn tail, or damage in the middle: the raft
 * log or a peer re-supplies what follows), then rebuilds LMDB from the log
 * (LMDB has no checksums, so its files are never trusted across a stop;
 * cost linear in the log, see index/env.c). *out is released by
 * idx_close. */
int idx_open(const struct idx_options *o, struct idx_env **out, char *errmsg);
/* Flushes, syncs, closes, frees. */
void idx_close(struct idx_env *e);

/* ---- Checkpoints in the background (index/ckpt.c) ---------------------
 * With idx_options.background_checkpoints, an idx_apply that reaches a
 * checkpoint position commits the state before it and leaves a job that
 * writes the checkpoint from an LMDB read txn. The checkpoint counts
 * (trims, snapshot manifests, serving) only once the file is fsynced and
 * idx_ckpt_end (or the next checkpoint position) added it. At most one
 * job at a time: an apply reaching the next position first waits for the
 * running one, or writes a job nobody started itself. */
struct idx_ckpt_job;
/* Loop thread, after idx_apply: the job it left, or NULL (none, or
 * handed out already). Owned by the caller until idx_ckpt_end. */
struct idx_ckpt_job *idx_ckpt_take(struct idx_env *e);
/* Any thread (blocking: reads the tables, writes and fsyncs the file).
 * Does nothing when the loop thread wrote it first or idx_close dropped
 * it. */
void idx_ckpt_run(struct idx_ckpt_job *j);
/* Loop thread, after idx_ckpt_run returned or instead of it (the job is
 * then written here): add the checkpoint to the env's list and free j.
 * 0, or the write's error with errmsg (TERN_ERRMSG_SIZE, caller's), which
 * also fails the env as a failed apply would (idx_status). After
 * idx_close only frees j. */
int idx_ckpt_end(struct idx_ckpt_job *j, char *errmsg);

/* Raft index of the last applied entry (0 if none). */
uint64_t idx_last_applied(const struct idx_env *e);
/* Whether the cluster has switched its entries to XXH3: nothing applied
 * yet in a directory this build created (a new cluster, whose first
 * leader may start flagged), or the last applied entry carried the flag
 * (its record is of version 2). An entry's flag is the same on every
 * node, so this is too once they applied the same entries. Known from the
 * append, or read back from the last record's header. */
bool idx_xxh3_in_use(struct idx_env *e);
/* Byte position of the end of the commit log. */
uint64_t idx_log_end(const struct idx_env *e);
/* First log position the node still holds records from: 0, or the
 * checkpoint retention trimmed the log to (idx_snapshot) or a restore
 * started from. */
uint64_t idx_log_start(const struct idx_env *e);
/* Bytes of commit-log segments and checkpoints on disk (LMDB not
 * included). */
uint64_t idx_disk_bytes(const struct idx_env *e);
/* Bytes truncated from the log tail by idx_open (0 if it was clean). */
uint64_t idx_truncated_bytes(const struct idx_env *e);
/* Where and why idx_open cut the log ("commit log cut at P
 * (log/<file>.seg offset O): <reason>; N bytes dropped"), or "" if it was
 * not cut. Borrowed, valid until idx_close. idx_restore's error names it
 * when the snapshot needs bytes the cut removed. */
const char *idx_cut_note(const struct idx_env *e);
/* Last error detail. Borrowed, valid until the next call on e. */
const char *idx_errmsg(const struct idx_env *e);
/* Sticky failure: 0, or the code of the failed apply (TERN_EFULL, -EIO,
 * ...) after which idx_apply refuses until the env is reopened. */
int idx_status(const struct idx_env *e);
/* True once an fdatasync/fsync of the log failed (sticky:
 * idx_status is that error from then on). Unlike a failed apply, this must
 * not be cured by reopening: after a failed fsync Linux may have dropped
 * the dirty pages while the page cache still shows their bytes, so a later
 * sync could "succeed" over data that never reached the disk (PostgreSQL's
 * fsyncgate). The caller stops the process and recovers from the raft log. */
bool idx_sync_failed(const struct idx_env *e);
/* True once a write met MDB_MAP_FULL (sticky until the env is reopened):
 * the index reached idx_options.map_size, not the disk; its code is
 * TERN_EFULL as for a full disk. */
bool idx_map_full(const struct idx_env *e);
/* True once this env recorded an entry of a later release that it could
 * not apply (an unknown entry version, header flag or command type: its
 * results are TERN_EMALFORMED), with the record's log position in *pos
 * (may be NULL). Its peers on that release did apply it, so from there
 * on this node's index lacks what they hold: it writes no checkpoint
 * after that record (one would carry the gap into retention and to
 * peers), and once it runs the later release its rebuild applies the
 * entry from the log. Cleared by a rebuild that no longer meets one. */
bool idx_refused_newer(const struct idx_env *e, uint64_t *pos);

/* ---- Command entries --------------------------------------------------- */

enum idx_cmd_type {
    IDX_CMD_QUEUE_CREATE = 1,
    IDX_CMD_QUEUE_DELETE = 2,
    IDX_CMD_PRODUCE = 3,
    IDX_CMD_GROUP_COMMIT = 4,
    IDX_CMD_READ_BARRIER = 5,
    /* Security metadata (docs/AUTH.md). */
    IDX_CMD_USER_SET = 6,
    IDX_CMD_USER_DELETE = 7,
    IDX_CMD_ACL_SET = 8,
    IDX_CMD_ACL_DELETE = 9,
    IDX_CMD_NAMESPACE_SET = 10,
    IDX_CMD_NAMESPACE_DELETE = 11,
    IDX_CMD_PRODUCER_INIT = 12,
    /* Retention (docs/MESSAGES.md, "Retention") */
    IDX_CMD_QUEUE_UPDATE = 13,
    IDX_CMD_TRIM = 14,
    /* Message properties (docs/MESSAGES.md). */
    IDX_CMD_PRODUCE_PROPS = 15,
    /* Message trace: the proposing leader's term (docs/MESSAGES.md). */
    IDX_CMD_TERM = 16,
    /* Work queues: shared groups (docs/WORKQUEUES.md). */
    IDX_CMD_SHARED_CONFIG = 17,
    IDX_CMD_DELIVER = 18,
    IDX_CMD_SETTLE = 19,
    IDX_CMD_DEAD_LETTER = 20,
    /* Delayed messages (docs/WORKQUEUES.md, "Delayed and scheduled
     * messages"). */
    IDX_CMD_PRODUCE_DELAYED = 21,
    IDX_CMD_TIMER_FIRE = 22,
    /* Single active consumer of stream groups (docs/WORKQUEUES.md). */
    IDX_CMD_CLAIM = 23,
    IDX_CMD_GROUP_COMMIT_AS = 24,
};

/* User and namespace names follow the queue name rule (tern_name_valid)
 * with shorter bounds, so that a grant key (user, namespace, pattern) fits
 * LMDB's 511-byte key limit. */
#define IDX_USER_NAME_MAX 128u
#define IDX_NS_NAME_MAX   64u

/* User flags (USER_SET). */
#define IDX_USER_ADMIN 0x1u /* cluster administrator */
#define IDX_USER_CERT                                                          \
    0x2u /* may authenticate by a client certificate                           \
            whose subject CN is the user name */
#define IDX_USER_FLAGS (IDX_USER_ADMIN | IDX_USER_CERT)
/* Largest stored credential (the binary SCRAM form of auth/scram.c,
 * opaque to index/). */
#define IDX_CRED_MAX 255u
/* Permission bits of an ACL grant. IDX_PERM_ADMIN implies the others. */
#define IDX_PERM_PRODUCE 0x1u
#define IDX_PERM_CONSUME 0x2u
#define IDX_PERM_MANAGE  0x4u
#define IDX_PERM_ADMIN   0x8u
#define IDX_PERM_ALL                                                           \
    (IDX_PERM_PRODUCE | IDX_PERM_CONSUME | IDX_PERM_MANAGE | IDX_PERM_ADMIN)
/* The namespace every queue created before namespaces lives in; it always
 * exists and cannot be deleted. */
#define IDX_NAMESPACE_DEFAULT "default"

/* Per-namespace quotas; 0 means unlimited. */
struct idx_quota
{
    uint64_t max_queues;
    uint64_t max_bytes;
    uint64_t produce_bytes_per_s;
};

/* Retention settings of a queue (docs/MESSAGES.md, "Retention"); 0 means
 * no limit for max_age_ms, max_bytes and max_messages. */
enum idx_overflow {
    IDX_OVERFLOW_DROP_OLDEST = 0, /* trim the oldest messages to make room */
    IDX_OVERFLOW_REJECT = 1,      /* refuse the produce: TERN_EQUEUEFULL */
};
struct idx_queue_settings
{
    uint64_t max_age_ms;
    uint64_t max_bytes;
    uint64_t max_messages;
    uint32_t overflow; /* enum idx_overflow */
};
/* Built-in defaults: what the leader writes into a QUEUE_CREATE whose
 * client sent no settings (a QUEUE_CREATE without the settings tail, as the
 * earlier release wrote it, applies no limits). */
#define IDX_DEFAULT_MAX_AGE_MS ((uint64_t)72 * 3600 * 1000)
/* The defaults above into *s (caller-owned). */
void idx_queue_settings_default(struct idx_queue_settings *s);
/* QUEUE_UPDATE field mask: which settings the command changes. */
#define IDX_SET_MAX_AGE      0x1u
#define IDX_SET_MAX_BYTES    0x2u
#define IDX_SET_MAX_MESSAGES 0x4u
#define IDX_SET_OVERFLOW     0x8u
#define IDX_SET_ALL                                                            \
    (IDX_SET_MAX_AGE | IDX_SET_MAX_BYTES | IDX_SET_MAX_MESSAGES |              \
     IDX_SET_OVERFLOW)
/* Most queues the leader's retention pass plans per step (node/). */
#define IDX_RETAIN_PAGE_MAX 65536u

struct idx_msg
{
    const void *data; /* borrowed */
    uint32_t len;
};
/* A message with its properties block (format: index/cmd.c, "Properties
 * block"), both borrowed; props_len 0 = no properties. */
struct idx_pmsg
{
    const void *data;
    uint32_t len;
    const void *props;
    uint32_t props_len;
};

/* ---- Message properties (docs/MESSAGES.md) ----------------------------- */

/* Limits of one message's properties; a block over any of them is refused
 * (idx_props_check) and never applied. */
#define IDX_KEY_MAX           256u  /* key: 1..256 bytes (0 = no key) */
#define IDX_TAG_MAX           64u   /* tag: 1..64 bytes of [A-Za-z0-9._-] */
#define IDX_HEADERS_MAX       32u   /* headers per message */
#define IDX_HEADER_NAME_MAX   64u   /* a header name: 1..64 bytes */
#define IDX_HEADER_VALUE_MAX  1024u /* a header value: 0..1024 bytes */
#define IDX_HEADERS_BYTES_MAX 8192u /* sum of names and values */
/* Largest properties block (header, key, tag, headers). */
#define IDX_PROPS_MAX                                                          \
    (14u + IDX_KEY_MAX + IDX_TAG_MAX + 3u * IDX_HEADERS_MAX +                  \
     IDX_HEADERS_BYTES_MAX)

struct idx_header
{
    const char *name; /* borrowed, name_len bytes */
    uint32_t name_len;
    const void *value; /* borrowed, value_len bytes */
    uint32_t value_len;
};
struct idx_props
{
    uint64_t producer_ts_ms;
    const char *key; /* borrowed; key_len 0 = no key */
    uint32_t key_len;
    const char *tag; /* borrowed; tag_len 0 = no tag */
    uint32_t tag_len;
    const struct idx_header *headers; /* borrowed, n_headers of them */
    uint32_t n_headers;
};
/* Whether t[0..len) is a tag (1..IDX_TAG_MAX bytes of [A-Za-z0-9._-]). */
bool idx_tag_valid(const char *t, size_t len);
/* Append the properties block of p (borrowed) to w (caller-owned).
 * Errors as idx_props_check, sticky in w->err. */
void idx_props_encode(struct tern_wbuf *w, const struct idx_props *p);
/* Check a properties block p[0..len) (untrusted bytes, borrowed): 0,
 * TERN_EMALFORMED (not a block: bad version, truncated, trailing bytes),
 * TERN_EINVAL (a tag with a byte outside [A-Za-z0-9._-], an empty header
 * name) or TERN_ETOOBIG (over a limit above); errmsg (caller-owned,
 * TERN_ERRMSG_SIZE, may be NULL) names the limit. */
int idx_props_check(const void *p, size_t len, char *errmsg);
/* Decode a checked block into out (pointers borrow from p); headers are
 * read with idx_props_header. 0 or as idx_props_check. */
int idx_props_decode(const void *p, size_t len, struct idx_props *out);
/* Header i (< out->n_headers) of a block decoded by idx_props_decode from
 * p[0..len): 0 with *h filled (borrowed from p), TERN_EINVAL for i out of
 * range. */
int idx_props_header(const void *p,
                     size_t len,
                     uint32_t i,
                     struct idx_header *h);

/* Build one entry into w (caller-owned). Call idx_cmd_begin, then any
 * number of idx_cmd_* adds, then idx_cmd_end, which seals the entry
 * (count and checksum). idx_cmd_begin resets w->len to 0 (the entry is
 * w->base[0..w->len), the allocation is reused). Errors are sticky in
 * w->err and returned by idx_cmd_end: -ENOMEM, TERN_EBADNAME (a queue name
 * that is NULL or fails tern_qname_valid, a group name that is NULL or
 * fails tern_name_valid), TERN_EINVAL (no
 * commands, produce with n == 0 or with producer_id != 0 and seq == 0),
 * TERN_ETOOBIG (over 65536 commands or an entry over 1 GiB). Format:
 * index/cmd.c.
 * Queue names are stored names (docs/AUTH.md, "Stored names"): "q" for
 * queue q of namespace "default", "ns%q" for queue q of namespace ns
 * (tern_qname_join). Group, user and namespace names are plain. */
void idx_cmd_begin(struct tern_wbuf *w, uint64_t timestamp_ms);
/* Mark the entry begun in w with the XXH3 flag (index/cmd.c): its own
 * checksum and its commit-log record's are XXH3. A node of a release
 * before the flag finds such an entry malformed (it records it unapplied,
 * in a record of version 1, where nodes that know the flag write version
 * 2): propose flagged entries only once every node knows it
 * (idx_xxh3_in_use, [raft] entry_checksum in node/). */
void idx_cmd_flag_xxh3(struct tern_wbuf *w);
/* Result TERN_EQUEUEEXISTS if the queue exists, else TERN_ENOTFOUND for
 * "ns%q" when namespace ns does not exist, else TERN_EQUOTA when the
 * namespace's max_queues > 0 and it already has that many queues. */
void idx_cmd_queue_create(struct tern_wbuf *w, const char *queue);
/* Result TERN_ENOQUEUE if it does not. Removes the queue in the same txn
 * and gives its bytes back to its namespace's usage (idx_ns_usage); its
 * messages' index entries, groups and producer state are left to the
 * row cleaner (idx_clean_step), unreachable meanwhile. The name can be
 * created again (a new, empty queue starting at offset 0, with no group
 * offsets: ids are never reused). */
void idx_cmd_queue_delete(struct tern_wbuf *w, const char *queue);
/* QUEUE_CREATE with explicit retention settings s (borrowed; NULL: no
 * settings tail, as idx_cmd_queue_create: the queue gets no limits).
 * TERN_EINVAL for an unknown overflow. Results as idx_cmd_queue_create. */
void idx_cmd_queue_create_opts(struct tern_wbuf *w,
                               const char *queue,
                               const struct idx_queue_settings *s);
/* Change the settings of queue named by mask (IDX_SET_*, at least one
 * bit, no others: TERN_EINVAL); fields of s outside mask are ignored and
 * stay unchanged. Result TERN_ENOQUEUE for an unknown queue. A lowered
 * limit is enforced by the next TRIM the leader plans (idx_trim_plan). */
void idx_cmd_queue_update(struct tern_wbuf *w,
                          const char *queue,
                          uint32_t mask,
                          const struct idx_queue_settings *s);
/* The leader's trim decision (idx_trim_plan, format in index/cmd.c):
 * queue (stored name), incarnation queue_id, drops [from, to) holding
 * bytes message bytes. TERN_EINVAL unless to > from. Result: 0 with count
 * = messages trimmed; TERN_EINVAL (nothing changes) when the queue is not
 * that incarnation, its start_offset is not from, to is past its next
 * offset or bytes exceeds its bytes; TERN_ENOQUEUE when it is gone. */
void idx_cmd_trim(struct tern_wbuf *w,
                  const char *queue,
                  uint64_t queue_id,
                  uint64_t from,
                  uint64_t to,
                  uint64_t bytes);
/* producer_id 0 means no dedup. seq is per (producer, queue) and starts at
 * 1; each batch uses the next number. Result TERN_EQUOTA, nothing
 * appended and the producer's dedup state unchanged, when the namespace's
 * max_bytes > 0 and its bytes plus the batch's message bytes would exceed
 * it; the dedup checks come first, so a resend of an applied batch still
 * answers duplicate. */
void idx_cmd_produce(struct tern_wbuf *w,
                     const char *queue,
                     uint64_t producer_id,
                     uint64_t seq,
                     const struct idx_msg *msgs,
                     uint32_t n);
/* As idx_cmd_produce, with properties: a batch where some message has
 * them (props_len > 0, each block passing idx_props_check, else
 * TERN_EINVAL / TERN_ETOOBIG) is written as PRODUCE_PROPS, a batch
 * without any as PRODUCE (which nodes that predate properties apply). */
void idx_cmd_produce_props(struct tern_wbuf *w,
                           const char *queue,
                           uint64_t producer_id,
                           uint64_t seq,
                           const struct idx_pmsg *msgs,
                           uint32_t n);
/* Commit a consumer group's next offset to read. Result TERN_ENOQUEUE, or
 * TERN_EOFFSET beyond the queue's next offset. */
void idx_cmd_group_commit(struct tern_wbuf *w,
                          const char *queue,
                          const char *group,
                          uint64_t next_offset);
/* ---- Shared groups (docs/WORKQUEUES.md; format: index/cmd.c) ---------- */

/* Settings of a shared group and their defaults. */
#define IDX_SHARED_ACK_TIMEOUT_MS 30000u
#define IDX_SHARED_MAX_DELIVERIES 16u
#define IDX_SHARED_WINDOW         65536u
#define IDX_SHARED_PREFETCH       256u /* per consumer, not replicated */
#define IDX_SHARED_WINDOW_MAX     ((uint32_t)1 << 24)
#define IDX_SHARED_REASON_MAX     64u
struct idx_shared_settings
{
    uint64_t ack_timeout_ms;     /* >= 1 */
    uint32_t max_deliveries;     /* >= 1 */
    uint32_t window;             /* 1..IDX_SHARED_WINDOW_MAX */
    char dlq[TERN_NAME_MAX + 1]; /* plain name (tern_name_valid) of the
                                    DLQ in the queue's namespace; "" =
                                    "<queue>-dlq-<group>" */
};
/* The defaults above into *s (caller-owned). */
void idx_shared_settings_default(struct idx_shared_settings *s);
/* SHARED_CONFIG mask: which settings the command sets. */
#define IDX_SHARED_SET_ACK_TIMEOUT    0x1u
#define IDX_SHARED_SET_MAX_DELIVERIES 0x2u
#define IDX_SHARED_SET_WINDOW         0x4u
#define IDX_SHARED_SET_DLQ            0x8u
#define IDX_SHARED_SET_ALL                                                     \
    (IDX_SHARED_SET_ACK_TIMEOUT | IDX_SHARED_SET_MAX_DELIVERIES |              \
     IDX_SHARED_SET_WINDOW | IDX_SHARED_SET_DLQ)
/* Create shared group (queue, group) with the defaults overridden by the
 * masked fields of s (borrowed; NULL with mask 0), or change the masked
 * settings of an existing one. TERN_EINVAL for an unknown mask bit or an
 * out-of-range value, TERN_EBADNAME for a bad name. Result: 0,
 * TERN_ENOQUEUE, TERN_EINVAL (a stream group of that name), TERN_EBADNAME
 * (the default DLQ name would be longer than TERN_NAME_MAX). */
void idx_cmd_shared_config(struct tern_wbuf *w,
                           const char *queue,
                           const char *group,
                           uint32_t mask,
                           const struct idx_shared_settings *s);
/* One offset of a DELIVER: count 0 = a new offset, else the delivery
 * count of the row the leader saw (the redelivery's receipt - 1). */
struct idx_deliver_item
{
    uint64_t offset;
    uint32_t count;
};
/* Lease items[0..n) (1..IDX_SHARED_LIST_MAX, borrowed) of (queue, group)
 * to consumer_id. Result: count and done[] = the offsets leased (each now
 * has delivery count item.count + 1); TERN_ENOQUEUE, TERN_ENOTFOUND (no
 * such group), TERN_EINVAL (a stream group). */
void idx_cmd_deliver(struct tern_wbuf *w,
                     const char *queue,
                     const char *group,
                     uint64_t consumer_id,
                     const struct idx_deliver_item *items,
                     uint32_t n);
enum idx_settle_action {
    IDX_SETTLE_ACK = 0,     /* done: the row goes */
    IDX_SETTLE_NACK = 1,    /* ready again at t + delay_ms */
    IDX_SETTLE_EXTEND = 2,  /* the lease ends at t + delay_ms */
    IDX_SETTLE_RELEASE = 3, /* the consumer is gone: ready at t */
};
/* One receipt (offset, delivery count) and what to do with it; delay_ms
 * must be 0 for ack and release. */
struct idx_settle_item
{
    uint64_t offset;
    uint32_t count;
    uint32_t action; /* enum idx_settle_action */
    uint64_t delay_ms;
};
/* Settle items[0..n) (1..IDX_SHARED_LIST_MAX, borrowed). Result: count
 * and done[] = the receipts that matched a row; the others are stale and
 * change nothing. Statuses as idx_cmd_deliver. */
void idx_cmd_settle(struct tern_wbuf *w,
                    const char *queue,
                    const char *group,
                    const struct idx_settle_item *items,
                    uint32_t n);
/* Move the message at offset (whose row has delivery count count and is
 * due) of (queue, group) to the group's DLQ: m is the message with its
 * original properties (borrowed); the command carries a properties block
 * with the original headers (the last ones dropped if the four below do
 * not fit, any earlier tern-dlq-* headers removed) and tern-dlq-queue,
 * tern-dlq-offset, tern-dlq-deliveries, tern-dlq-reason appended. reason:
 * 1..IDX_SHARED_REASON_MAX bytes of [A-Za-z0-9._-]. Result: 0 with
 * base_offset = the DLQ offset and count 1; 0 with count 0 when the row
 * moved on (nothing changes); TERN_ENOQUEUE, TERN_ENOTFOUND, TERN_EINVAL,
 * or the DLQ's refusal (TERN_EQUOTA, TERN_EQUEUEFULL, ...; the row
 * stays). */
void idx_cmd_dead_letter(struct tern_wbuf *w,
                         const char *queue,
                         const char *group,
                         uint64_t offset,
                         uint32_t count,
                         const char *reason,
                         const struct idx_pmsg *m);

/* A command that changes nothing (result 0): a leader that sees it applied
 * knows every entry committed before it is applied too, and that it was
 * still leader when it was committed (linearizable reads, node/batch.c). */
/* ---- Single active consumer of stream groups (claim.c) ------------------
 * docs/WORKQUEUES.md, "Single active consumer for stream groups". */
#define IDX_CLAIM_ACQUIRE 1u /* claim, or renew a claim held */
#define IDX_CLAIM_RELEASE 2u
/* A claim row: the holder's consumer id, the end of its claim (leader
 * clock, ms) and the generation (+1 each time the holder changes). */
struct idx_claim
{
    uint64_t holder;
    uint64_t until_ms;
    uint64_t generation;
};
/* CLAIM of stream group (queue, group) by consumer_id (!= 0): action
 * IDX_CLAIM_ACQUIRE with lease_ms >= 1, or IDX_CLAIM_RELEASE with
 * lease_ms 0 (else TERN_EINVAL in w->err). Result: acquire granted,
 * status 0 and count 1; refused (another holder whose until > t), status
 * TERN_ECLAIMED; a shared group, TERN_EINVAL; release: count 1 when the row
 * was the consumer's and is gone, 0 when it changed nothing. Every
 * result's claim field holds the row after the command (holder 0: no
 * row). */
void idx_cmd_claim(struct tern_wbuf *w,
                   const char *queue,
                   const char *group,
                   uint64_t consumer_id,
                   uint32_t action,
                   uint32_t lease_ms);
/* GROUP_COMMIT by consumer consumer_id (!= 0): as idx_cmd_group_commit,
 * refused with TERN_ECLAIMED (claim = the row) while another consumer's
 * claim is live (until > t). A plain GROUP_COMMIT is refused so while
 * any claim is live. */
void idx_cmd_group_commit_as(struct tern_wbuf *w,
                             const char *queue,
                             const char *group,
                             uint64_t consumer_id,
                             uint64_t next_offset);
void idx_cmd_read_barrier(struct tern_wbuf *w);
/* The Raft term (>= 1, else TERN_EINVAL) of the leader building the entry;
 * applies nothing (result 0). node/batch.c puts it first in every entry,
 * so that message trace can name the term a message was proposed in. */
void idx_cmd_term(struct tern_wbuf *w, uint64_t term);

/* ---- Delayed messages (docs/WORKQUEUES.md; apply: index/timer.c) ------- */

/* A pending timer: the key of its row in "timers" (keys.c). msg_no
 * numbers the messages of all PRODUCE_DELAYED commands of the entry at
 * raft index index, from 0, in entry order. */
struct idx_timer_key
{
    uint64_t due_ms;
    uint64_t index;
    uint32_t msg_no;
};
/* Most keys, and most body bytes unless it holds a single key, of one
 * TIMER_FIRE command (format: index/cmd.c). */
#define IDX_TIMER_FIRE_KEYS_MAX  1024u
#define IDX_TIMER_FIRE_BYTES_MAX ((uint32_t)4 << 20)
/* PRODUCE_DELAYED: msgs[0..n) (borrowed, n >= 1; props_len 0 = none) go
 * to queue when the leader's clock reaches due_ms (absolute, ms). Result:
 * count = n, or TERN_ENOQUEUE, TERN_ETOOBIG (a message over max_message);
 * nothing is appended to the queue until a TIMER_FIRE moves it. With
 * producer_id != 0 (seq >= 1) the batch is deduplicated as a PRODUCE: a
 * resend answers duplicate = 1 with the first batch's count and its due
 * time in base_offset (0 / 0 when forgotten), TERN_ESEQUENCE for a gap.
 * Errors in w->err as the produce builders. */
void idx_cmd_produce_delayed(struct tern_wbuf *w,
                             const char *queue,
                             uint64_t due_ms,
                             uint64_t producer_id,
                             uint64_t seq,
                             const struct idx_pmsg *msgs,
                             uint32_t n);
/* TIMER_FIRE, built key by key: begin returns a handle (0 after an error,
 * which is sticky in w->err), add appends one key with the message the
 * leader read for it (queue and m borrowed for the call), end seals the
 * command: TERN_EINVAL without keys, TERN_ETOOBIG over
 * IDX_TIMER_FIRE_KEYS_MAX keys or over IDX_TIMER_FIRE_BYTES_MAX body bytes
 * with more than one key. Apply (t = the entry's timestamp_ms): each key
 * still in "timers" with due_ms <= t has its row deleted and its message
 * appended to its queue as a PRODUCE_PROPS of one message would append it
 * (a queue gone or re-created, or a produce refusal: dropped); keys
 * absent or not due are skipped. Result: count = appended, base_offset =
 * dropped. */
size_t idx_cmd_timer_fire_begin(struct tern_wbuf *w);
void idx_cmd_timer_fire_add(struct tern_wbuf *w,
                            size_t at,
                            const struct idx_timer_key *k,
                            const char *queue,
                            const struct idx_pmsg *m);
void idx_cmd_timer_fire_end(struct tern_wbuf *w, size_t at);
/* A name too long for its kind (IDX_USER_NAME_MAX, IDX_NS_NAME_MAX) or
 * failing tern_name_valid, or a bad pattern, is TERN_EBADNAME. */
/* Create or replace user name (a valid name) with flags (IDX_USER_FLAGS
 * bits) and credential cred[0..cred_len) (borrowed; at most IDX_CRED_MAX;
 * 0 bytes only with IDX_USER_CERT). TERN_EINVAL otherwise. Result 0. A
 * replaced user keeps its grants and producer ids. */
void idx_cmd_user_set(struct tern_wbuf *w,
                      const char *name,
                      uint32_t flags,
                      const void *cred,
                      size_t cred_len);
/* Result TERN_ENOTFOUND if there is no such user. Deletes its grants in
 * the same txn; its producer ids stop being its own (the owner's creation
 * index no longer matches any user). */
void idx_cmd_user_delete(struct tern_wbuf *w, const char *name);
/* Grant perms (1..IDX_PERM_ALL) to user in namespace ns for the queues
 * matching pattern (a queue name, a prefix ending in '*', or "*";
 * idx_acl_pattern_valid), replacing an existing grant of the same triple.
 * Result TERN_ENOTFOUND if the user or the namespace does not exist. */
void idx_cmd_acl_set(struct tern_wbuf *w,
                     const char *user,
                     const char *ns,
                     const char *pattern,
                     uint32_t perms);
/* Result TERN_ENOTFOUND if there is no such grant. */
void idx_cmd_acl_delete(struct tern_wbuf *w,
                        const char *user,
                        const char *ns,
                        const char *pattern);
/* Create namespace name or replace its quotas (q borrowed). Result 0. */
void idx_cmd_namespace_set(struct tern_wbuf *w,
                           const char *name,
                           const struct idx_quota *q);
/* Result TERN_ENOTFOUND if it does not exist, TERN_EINVAL for "default"
 * or while it holds queues. Deletes the namespace's grants in the same
 * txn. */
void idx_cmd_namespace_delete(struct tern_wbuf *w, const char *name);
/* Allocate the next producer-id block n (1..2^32 - 1) for owner (a valid
 * user name, or "" / NULL for the anonymous owner of connections that did
 * not authenticate). Result: base_offset is the producer id n << 32; the
 * owner may use every id n << 32 | k (k < 2^32). TERN_ENOTFOUND for a
 * named owner that does not exist, TERN_ELIMIT once every block is
 * issued. */
void idx_cmd_producer_init(struct tern_wbuf *w, const char *owner);
int idx_cmd_end(struct tern_wbuf *w);

/* Length of the entry in buf without trailing zero padding: entries are
 * padded with up to 7 zero bytes to a multiple of 8 before they go to raft
 * (repl_propose requires it), and the FSM gets them back padded. Returns len
 * unchanged when buf does not look like a padded entry. */
size_t idx_cmd_entry_len(const void *buf, size_t len);
/* Pad the sealed entry in w with zeros to a multiple of 8. */
void idx_cmd_pad(struct tern_wbuf *w);

/* Check that an entry is well formed (version, checksum, every command's
 * bounds) without applying it. 0, TERN_EMALFORMED or TERN_EVERSION. The
 * per-message size limit is not checked here (idx_apply does, from
 * idx_options.max_message). */
int idx_cmd_validate(const void *entry, size_t len);

/* Longest offset list of one DELIVER or SETTLE (docs/WORKQUEUES.md). */
#define IDX_SHARED_LIST_MAX 1024u
struct idx_result
{
    int status;           /* 0 or a tern code (TERN_ENOQUEUE, ...) */
    uint64_t base_offset; /* produce: offset of the first message;
                             TIMER_FIRE: messages dropped (queue gone or
                             re-created, or the produce refused) */
    uint32_t count;       /* produce: number of messages; DELIVER, SETTLE,
                             DEAD_LETTER: list items done */
    int duplicate;        /* produce: 1 if this batch was applied before */
    /* DELIVER and SETTLE: bit i (done[i / 64] >> (i % 64) & 1) set when
     * list item i was delivered / settled; clear: left out (a plan on a
     * state that moved) / stale receipt. */
    uint64_t done[IDX_SHARED_LIST_MAX / 64];
    /* CLAIM, and GROUP_COMMIT(_AS) refused by a claim: the claim row */
    struct idx_claim claim;
};
/* Retention at apply (docs/MESSAGES.md, "Retention"): a produce on a
 * queue with max_messages or max_bytes appends, then (drop-oldest) trims
 * the oldest messages until both hold again, or (reject) is refused
 * whole with TERN_EQUEUEFULL when it would pass one. Under either policy
 * a batch that alone passes a limit is refused with TERN_EQUEUEFULL
 * (trimming would drop messages of the batch it acknowledges). Trimming
 * moves start_offset, lowers the queue's bytes and its namespace usage;
 * the rows below start_offset go to the cleaner (idx_clean_step). */

/* Apply the entry at raft index: append it to the commit log and index it.
 * Entries at or below last_applied are skipped (*n_results = 0, returns
 * 0). Results for each command are written to results[0..max) and their
 * number to *n_results (OUT); commands beyond max are applied but not
 * reported. entry is borrowed for the call.
 * A malformed entry is still recorded (the log stays identical on all
 * nodes) and yields TERN_EMALFORMED results, one per command announced in
 * its header (1 if unreadable). A produce with a message larger than
 * max_message yields TERN_ETOOBIG and appends nothing (all nodes must use
 * the same max_message). Producer dedup: a retried batch still remembered
 * (last 32 per queue and producer) gives duplicate = 1 with its original
 * base_offset/count; an older one gives duplicate = 1, status 0, count 0
 * (applied before, offsets unknown); a gap gives TERN_ESEQUENCE.
 * Returns 0, or a negative code on I/O or LMDB failure (-ENOSPC and
 * MDB_MAP_FULL -> TERN_EFULL), after which the env refuses further
 * applies (idx_status) until reopened; pending unflushed results may
 * then be rolled back and are re-derived identically by idx_open.
 * Bulk-written bytes that idx_restore has not indexed (an abandoned
 * fetch) are dropped first (idx_bulk_discard). */
int idx_apply(struct idx_env *e,
              uint64_t index,
              const void *entry,
              size_t len,
              struct idx_result *results,
              unsigned max,
              unsigned *n_results);

/* Commit the pending write transaction (no fsync: the Raft log is the
 * durable source of truth). */
int idx_flush(struct idx_env *e);
/* Flush, then fdatasync the commit log (LMDB is not synced: it is
 * rebuilt from the log at every open). */
int idx_sync(struct idx_env *e);

/* ---- Reads (flushed state only) ---------------------------------------- */

/* A queue name argument that is NULL or fails tern_qname_valid (a stored
 * name: "q" or "ns%q"), or a group name that is NULL or fails
 * tern_name_valid, makes a read return TERN_EBADNAME; an unknown queue,
 * TERN_ENOQUEUE. */

struct idx_queue_info
{
    const char *name;                   /* borrowed for the callback */
    uint64_t start_offset;              /* first readable offset */
    uint64_t next_offset;               /* offset the next message will get */
    uint64_t created_index;             /* raft index of the create */
    uint64_t bytes;                     /* sum of the lengths of its messages */
    struct idx_queue_settings settings; /* retention */
    uint64_t id; /* queue id (never reused; message ids) */
};
typedef int (*idx_queue_cb)(void *arg, const struct idx_queue_info *q);
/* Calls cb for each queue in name order; a non-zero return stops. */
int idx_queue_list(struct idx_env *e, idx_queue_cb cb, void *arg);
/* The same, starting with the first queue whose name sorts after after
 * (borrowed; NULL or "": from the first queue). after is a bound, not
 * checked as a name: "ns%" starts at the first queue of namespace ns
 * (stored names sort bytewise, those of ns are contiguous). */
int idx_queue_list_after(struct idx_env *e,
                         const char *after,
                         idx_queue_cb cb,
                         void *arg);
int idx_queue_get(struct idx_env *e,
                  const char *queue,
                  struct idx_queue_info *out);

struct idx_fetched
{
    uint64_t offset;
    uint64_t timestamp_ms; /* append time */
    uint64_t producer_id;
    const void *data; /* borrowed for the callback */
    uint32_t len;
    /* The message's properties block (idx_props_decode), borrowed for the
     * callback; props_len 0 = none. Set by idx_fetch_filtered and the
     * idx_message_get_* calls, 0 from idx_fetch. */
    const void *props;
    uint32_t props_len;
    /* The queue's id: with offset, the message id (docs/MESSAGES.md). */
    uint64_t queue_id;
};
typedef int (*idx_fetch_cb)(void *arg, const struct idx_fetched *m);
/* A run of messages that lie back to back in the message list of one
 * PRODUCE command, at consecutive offsets (idx_fetch_opts.run_cb). */
struct idx_fetched_run
{
    uint64_t offset;       /* of the first message */
    uint32_t count;        /* >= 1 */
    uint64_t timestamp_ms; /* append time, the same for all of them */
    /* The list's bytes, as recorded: count x {u32 len, bytes} or, with
     * props, count x {u32 len, bytes, u32 props_len, props} (props_len 0:
     * none). Borrowed for the callback. */
    const void *list;
    size_t list_len;
    bool props;
    uint64_t queue_id;
};
typedef int (*idx_run_cb)(void *arg, const struct idx_fetched_run *run);
/* Read up to max_msgs messages (and about max_bytes: at least one message
 * is returned even if larger) from offset. *next_offset (OUT) is the offset
 * after the last message returned. TERN_ENOQUEUE, TERN_EOFFSET (offset
 * below the start or beyond the end), 0 with no calls at the end of the
 * queue. A non-zero return from cb stops after that message (still
 * counted in *next_offset); the fetch returns 0. Every record read is
 * verified by checksum (TERN_ECORRUPT, never garbage; messages already
 * delivered before the bad record stay delivered, *next_offset says how
 * far). m->data is borrowed until cb returns. */
int idx_fetch(struct idx_env *e,
              const char *queue,
              uint64_t offset,
              uint32_t max_msgs,
              uint32_t max_bytes,
              idx_fetch_cb cb,
              void *arg,
              uint64_t *next_offset);

/* A tag of a fetch's filter (borrowed). */
struct idx_tag
{
    const char *tag;
    uint32_t len;
};
#define IDX_FETCH_TAGS_MAX 16u
struct idx_fetch_opts
{
    uint32_t max_msgs;
    uint32_t max_bytes;
    /* Deliver only messages whose tag is one of tags[0..n_tags) (n_tags
     * 0: every message; at most IDX_FETCH_TAGS_MAX, each passing
     * idx_tag_valid, else TERN_EINVAL). A message without a tag matches
     * no filter. Skipped messages are not delivered and not counted, but
     * *next_offset moves past them. */
    const struct idx_tag *tags;
    uint32_t n_tags;
    /* Examine at most this many messages per call (0: no limit), matching
     * or not: a filter that matches nothing in a long queue still answers
     * in bounded time, with *next_offset where to go on. */
    uint32_t max_scan;
    /* Count the properties' bytes against max_bytes (when the caller
     * sends them on). */
    bool with_props;
    /* Set (without a tag filter): the messages that lie in a PRODUCE
     * command's list come to run_cb (with the fetch's arg), as many of
     * them at once as the bounds allow; the others (a dead letter, a
     * delayed message) come to cb one by one. The bounds, the order and
     * *next_offset are those of the per-message fetch with the same
     * options: the same messages are delivered. A run's list holds the
     * messages' properties whatever with_props says; a caller that sends
     * the lists on sets with_props so that they count. A non-zero return
     * stops as cb's does. */
    idx_run_cb run_cb;
};
/* idx_fetch with options o (borrowed): the tag filter, the scan bound,
 * and the properties in each idx_fetched. Errors as idx_fetch. */
int idx_fetch_filtered(struct idx_env *e,
                       const char *queue,
                       uint64_t offset,
                       const struct idx_fetch_opts *o,
                       idx_fetch_cb cb,
                       void *arg,
                       uint64_t *next_offset);

/* A fetch run by another thread (node/server.c hands large reads to the
 * thread pool, so the loop thread keeps answering). idx_reader_start, on
 * the loop thread, takes a snapshot: an LMDB read txn and a copy of the
 * segment table from the record of (queue, offset) on (the reader opens
 * those files itself). idx_reader_fetch, on any one thread, then runs
 * idx_fetch_filtered against that snapshot, touching no env; its cb
 * runs on that thread. idx_reader_end, on the loop thread, frees the
 * reader and says whether what the fetch delivered may be served: 0, or
 * -EAGAIN when bytes of the log were cut or deleted since the start (a
 * truncation, retention, a rebase, or the env was closed), so the
 * delivered messages may not be the log's: fetch again through the env.
 *
 * Lifetime: idx_close abandons a reader no thread has started to fetch
 * (its fetch then returns -EAGAIN at once) and waits for one being
 * fetched; every started reader must still be ended. Memory: the reader
 * is the library's until idx_reader_end; queue is copied. */
struct idx_reader;
/* Segment files one reader holds open at most. */
#define IDX_READER_MAX_FDS 8u
/* The generation of e's log bytes: process-wide unique, changed by every
 * cut of the log or deleted segment, and new for each idx_open. Equal
 * values: what was read from the log then is still its bytes. */
uint64_t idx_generation(const struct idx_env *e);
/* 0 and *out, or a tern code (errmsg in idx_errmsg(e)). */
int idx_reader_start(struct idx_env *e,
                     const char *queue,
                     uint64_t offset,
                     struct idx_reader **out);
/* Once. Returns as idx_fetch_filtered (errmsg in idx_reader_errmsg), or
 * -EAGAIN for an abandoned reader or a read past the copied table. */
int idx_reader_fetch(struct idx_reader *r,
                     const struct idx_fetch_opts *o,
                     idx_fetch_cb cb,
                     void *arg,
                     uint64_t *next_offset);
const char *idx_reader_errmsg(const struct idx_reader *r);
int idx_reader_end(struct idx_reader *r);

/* Message get (docs/MESSAGES.md, "Query and seek"): the message at offset
 * of queue, delivered to cb once (with its properties). queue_id 0: any;
 * otherwise the queue's id must be queue_id (a message id names both).
 * TERN_ENOTFOUND when the queue's id differs or no retained message has
 * that offset; TERN_ENOQUEUE, TERN_EBADNAME, TERN_ECORRUPT. */
int idx_message_get(struct idx_env *e,
                    const char *queue,
                    uint64_t queue_id,
                    uint64_t offset,
                    idx_fetch_cb cb,
                    void *arg);
/* The retained messages among offsets[0..n) (borrowed; the order given,
 * increasing offsets read each record once) of queue, each delivered to
 * cb with its properties; offsets trimmed or never appended are skipped.
 * cb returning non-zero stops the walk (0 is returned). TERN_ENOQUEUE,
 * TERN_EBADNAME, TERN_ECORRUPT. One read txn: the RECEIVE answer. */
int idx_messages_get(struct idx_env *e,
                     const char *queue,
                     const uint64_t *offsets,
                     uint32_t n,
                     idx_fetch_cb cb,
                     void *arg);
/* The messages of queue with key key[0..key_len) (1..IDX_KEY_MAX bytes,
 * else TERN_EINVAL), newest first, at most max (1..): one cb call each (a
 * non-zero return stops). *n (OUT, may be NULL) = how many were
 * delivered; 0 with no call when the key has no message. */
int idx_message_get_key(struct idx_env *e,
                        const char *queue,
                        const void *key,
                        size_t key_len,
                        uint32_t max,
                        idx_fetch_cb cb,
                        void *arg,
                        uint32_t *n);

/* The first offset of queue whose message has append time >= time_ms,
 * or the queue's next offset when none has (OUT *offset). A binary
 * search over [start_offset, next_offset) (append times never decrease
 * with the offset). TERN_ENOQUEUE, TERN_EBADNAME. */
int idx_offset_for_time(struct idx_env *e,
                        const char *queue,
                        uint64_t time_ms,
                        uint64_t *offset);
/* Message trace (docs/MESSAGES.md, "Query and seek"): what the index
 * knows of one message. */
struct idx_trace
{
    uint64_t queue_id; /* with offset, the message id */
    uint64_t offset;
    uint64_t append_ms;   /* append time (docs/MESSAGES.md, "Time") */
    uint64_t producer_id; /* 0: none */
    uint64_t seq;         /* seq of the batch it came in (0: none) */
    uint32_t batch_pos;   /* its position in that batch, from 0 */
    uint32_t batch_count; /* messages in that batch */
    uint32_t len;         /* message bytes */
    uint64_t raft_index;  /* index of the entry that holds it */
    uint64_t term;        /* term of the leader that proposed the entry
                             (its TERM command); 0: unknown (an entry
                             built before TERM existed) */
    uint16_t key_len;     /* 0: no key */
    uint8_t tag_len;      /* 0: no tag */
    uint8_t key[IDX_KEY_MAX];
    char tag[IDX_TAG_MAX];
};
/* A consumer group of the traced message's queue whose committed offset is
 * past the message (next_offset > offset). commit_ms and commit_index are
 * those of the group's latest GROUP_COMMIT (not of the commit that first
 * passed the message); 0 when unknown (a row from an older checkpoint). */
struct idx_trace_group
{
    const char *name; /* borrowed for the callback */
    uint64_t next_offset;
    uint64_t commit_ms;
    uint64_t commit_index;
};
typedef int (*idx_trace_group_cb)(void *arg, const struct idx_trace_group *g);
/* Trace the message at offset of queue into *out (caller-owned), then call
 * cb (may be NULL) for each group past it, in name order (a non-zero
 * return stops). Flushed state; the entry holding the message is read
 * from the log and verified. TERN_EOFFSET below the queue's first offset
 * (the errmsg names it: trimmed by retention) or at/after its end;
 * TERN_ENOQUEUE, TERN_EBADNAME, TERN_ECORRUPT, -errno. */
int idx_message_trace(struct idx_env *e,
                      const char *queue,
                      uint64_t offset,
                      struct idx_trace *out,
                      idx_trace_group_cb cb,
                      void *arg);
/* Append time of the newest applied entry (applied state, pending txn
 * included): docs/MESSAGES.md, "Time". */
uint64_t idx_last_append_ms(const struct idx_env *e);

/* ---- Retention planning (the leader's side of TRIM) --------------------- */

/* What the queue's settings require trimming now (flushed state), as a
 * TRIM: the first offset to keep is the largest of next - max_messages,
 * the first offset from which the retained bytes fit max_bytes (both only
 * under drop-oldest) and the first offset with append time >= now_ms -
 * max_age_ms; at most max_msgs messages per plan (the rest is the next
 * plan's). *plan (OUT) has to == from when nothing is due. 0,
 * TERN_ENOQUEUE, or a code. */
struct idx_trim_plan
{
    uint64_t queue_id;
    uint64_t from;
    uint64_t to;
    uint64_t bytes;
};
int idx_trim_plan(struct idx_env *e,
                  const char *queue,
                  uint64_t now_ms,
                  uint64_t max_msgs,
                  struct idx_trim_plan *plan);
/* Queues that a produce left over max_messages or max_bytes under
 * drop-oldest since the last call, for the leader to plan at once (the
 * periodic pass finds them too): cb(arg, stored name) for each, then the
 * list is empty. At most 1024 are remembered between calls. */
void idx_over_limits_drain(struct idx_env *e,
                           void (*cb)(void *arg, const char *queue),
                           void *arg);

/* ---- Shared groups: the leader's plans and reads (shared.c) ------------- */

/* What consumer_id may be given now (t: the leader's clock, flushed
 * state): leases due by t (ready or expired), oldest offset first, then
 * new offsets from the group's next, at most max_n (<= the
 * IDX_SHARED_LIST_MAX of out) and at most prefetch minus the leases the
 * consumer holds unexpired, new offsets only while next - floor < window;
 * max_bytes > 0: the planned messages' data and properties, plus
 * msg_overhead each (their framing in the answer), at most max_bytes (one
 * message at least), so the answer carries every lease.
 * Due rows whose next delivery would pass max_deliveries go to dead[0..
 * max_dead) instead (with their count; *n_dead OUT). *n (OUT) items in
 * out, for idx_cmd_deliver. TERN_ENOQUEUE, TERN_ENOTFOUND, TERN_EINVAL (a
 * stream group), TERN_EBADNAME. */
int idx_deliver_plan(struct idx_env *e,
                     const char *queue,
                     const char *group,
                     uint64_t consumer_id,
                     uint32_t max_n,
                     uint64_t max_bytes,
                     uint32_t msg_overhead,
                     uint32_t prefetch,
                     uint64_t t,
                     struct idx_deliver_item *out,
                     uint32_t *n,
                     struct idx_deliver_item *dead,
                     uint32_t max_dead,
                     uint32_t *n_dead);
/* Append to w (idx_cmd_begin done by the caller, which owns w) the
 * DEAD_LETTER of candidate d of (queue, group), reading the message's
 * bytes and properties from the log. TERN_ENOTFOUND when the message is
 * no longer retained, the codes of idx_message_get, w's error. */
int idx_dead_letter_plan(struct idx_env *e,
                         const char *queue,
                         const char *group,
                         const struct idx_deliver_item *d,
                         const char *reason,
                         struct tern_wbuf *w);
/* A shared group's state (flushed). */
struct idx_shared_group
{
    struct idx_shared_settings settings;
    uint64_t floor; /* every offset below is settled or trimmed */
    uint64_t next;  /* the first offset never delivered */
    uint64_t rows;  /* lease rows (unacknowledged offsets in [floor, next)) */
};
int idx_shared_group_get(struct idx_env *e,
                         const char *queue,
                         const char *group,
                         struct idx_shared_group *out);
/* One lease row (offset, delivery count, state, consumer, deadline). */
struct idx_lease
{
    uint64_t offset;
    uint32_t count;
    uint32_t ready; /* 1: ready (deadline = not before), 0: leased */
    uint64_t consumer_id;
    uint64_t deadline_ms;
};
/* The group's lease rows from offset from, in offset order, at most max
 * (one cb call each; a non-zero return stops). Codes as
 * idx_shared_group_get. */
int idx_shared_leases(struct idx_env *e,
                      const char *queue,
                      const char *group,
                      uint64_t from,
                      uint32_t max,
                      int (*cb)(void *arg, const struct idx_lease *l),
                      void *arg);
/* ---- Group status and delivery states (status.c; flushed state) ------- */

/* Consumers named in one group status (the ones holding most leases). */
#define IDX_STATUS_CONSUMERS_MAX 16u
/* Distinct consumers one status walk counts; leases of others are summed
 * in others_held. */
#define IDX_STATUS_TRACK_MAX 256u
struct idx_status_consumer
{
    uint64_t id;   /* consumer id (a producer id of the client) */
    uint32_t held; /* unexpired leases it holds */
};
/* One group of a queue (docs/WORKQUEUES.md, "Group status"). */
struct idx_group_status
{
    char name[TERN_NAME_MAX + 1];
    bool shared;
    uint64_t start;     /* the queue's first retained offset */
    uint64_t end;       /* the queue's next offset */
    uint64_t committed; /* stream: the committed offset; shared: floor */
    uint64_t next;      /* shared: first offset never delivered; stream:
                           = committed */
    uint64_t lag;       /* end - max(committed, start) */
    uint64_t commit_ms; /* stream: latest GROUP_COMMIT's append time (0
                           unknown) */
    /* Shared groups only (zero for stream groups). */
    struct idx_shared_settings settings;
    char dlq[TERN_NAME_MAX + 1]; /* the DLQ's stored name ("" if invalid) */
    uint64_t dlq_depth;          /* its end - first offset; 0: none yet */
    uint64_t in_flight;          /* rows leased with deadline > now */
    uint64_t ready; /* rows ready, or leased with deadline <= now */
    uint64_t oldest_deadline_ms; /* earliest deadline of in-flight rows */
    uint32_t n_consumers;        /* consumers[0..n_consumers), most first */
    uint32_t consumers_seen;     /* distinct consumers counted (bounded
                                    by IDX_STATUS_TRACK_MAX) */
    uint64_t others_held;        /* leases of consumers past that bound */
    bool partial;                /* the walk stopped at max_rows rows */
    struct idx_status_consumer consumers[IDX_STATUS_CONSUMERS_MAX];
    /* Stream groups: the live claim (until > now_ms), or 0 and 0. */
    uint64_t claim_holder;
    uint64_t claim_until_ms;
};
/* Status of group (a valid name) of queue into *out (caller-owned) by the
 * clock now_ms, walking at most max_rows (>= 1) lease rows. TERN_ENOQUEUE,
 * TERN_ENOTFOUND (no such group), TERN_EBADNAME, TERN_ECORRUPT. */
int idx_group_status(struct idx_env *e,
                     const char *queue,
                     const char *group,
                     uint64_t now_ms,
                     uint32_t max_rows,
                     struct idx_group_status *out);
/* The groups of queue whose names sort after after ("" or NULL: from the
 * first), in name order, at most max (>= 1): one cb call each with its
 * status (borrowed for the call; a non-zero return stops), each walk
 * bounded by max_rows as idx_group_status, and by max_total_rows lease
 * rows for the whole page (a group that starts past that bound is not
 * listed). *more (OUT) is set when groups follow the last one listed.
 * TERN_ENOQUEUE, TERN_EBADNAME, TERN_ECORRUPT. */
int idx_group_status_list(struct idx_env *e,
                          const char *queue,
                          const char *after,
                          uint32_t max,
                          uint64_t now_ms,
                          uint32_t max_rows,
                          uint64_t max_total_rows,
                          int (*cb)(void *arg,
                                    const struct idx_group_status *g),
                          void *arg,
                          bool *more);
/* Where the message at offset stands in one shared group. */
enum idx_delivery_state {
    IDX_DELIVERY_NEW = 0,     /* never delivered: offset >= next */
    IDX_DELIVERY_SETTLED = 1, /* acknowledged or dead-lettered: below
                                 floor, or no row in [floor, next) */
    IDX_DELIVERY_LEASED = 2,  /* leased to consumer_id until deadline_ms */
    IDX_DELIVERY_READY = 3,   /* ready again from deadline_ms */
};
struct idx_delivery
{
    const char *group; /* borrowed for the callback */
    uint32_t state;    /* enum idx_delivery_state */
    uint32_t count;    /* deliveries so far (leased / ready) */
    uint64_t consumer_id;
    uint64_t deadline_ms;
};
/* For each shared group of queue, in name order, the state of the
 * message at offset (one cb call each; a non-zero return stops). No
 * check that offset is retained (idx_message_trace does it).
 * TERN_ENOQUEUE, TERN_EBADNAME, TERN_ECORRUPT. */
int idx_message_deliveries(struct idx_env *e,
                           const char *queue,
                           uint64_t offset,
                           int (*cb)(void *arg, const struct idx_delivery *d),
                           void *arg);

/* The claim row of stream group (queue, group) (flushed state): 0 with
 * *out, or 0 with *out zeroed (holder 0) when there is none. The caller
 * compares until_ms with its clock. TERN_ENOQUEUE, TERN_EBADNAME. */
int idx_claim_get(struct idx_env *e,
                  const char *queue,
                  const char *group,
                  struct idx_claim *out);
/* ---- Timer planning (the leader's side of TIMER_FIRE; timer.c) --------- */

/* What one idx_timer_plan call did. */
struct idx_timer_plan
{
    uint32_t keys;      /* keys put in the TIMER_FIRE */
    uint32_t rows_read; /* rows of "timers" read (keys, plus one not due) */
    bool more;          /* due rows were left for the next plan (a bound) */
};
/* Plan a TIMER_FIRE (flushed state) from the rows of "timers" due by t,
 * oldest first, at most max_keys (1..IDX_TIMER_FIRE_KEYS_MAX) of them and
 * at most max_bytes of command body (at least one key whatever its size),
 * each with its message read from the PRODUCE_DELAYED record in the log:
 * appended to the entry being built in w (caller-owned, after
 * idx_cmd_begin with a timestamp >= t) when a row is due, nothing added
 * when none is (out->keys 0). Reads no row past the first one not due.
 * 0, TERN_EINVAL (bad bounds), TERN_ECORRUPT (a row or its record),
 * w->err, -errno. */
int idx_timer_plan(struct idx_env *e,
                   uint64_t t,
                   uint32_t max_keys,
                   uint32_t max_bytes,
                   struct tern_wbuf *w,
                   struct idx_timer_plan *out);
/* Pending timers (flushed state): *pending (OUT) rows of "timers",
 * *oldest_due_ms (OUT) the earliest due time (0 without any). */
int idx_timer_stats(struct idx_env *e,
                    uint64_t *pending,
                    uint64_t *oldest_due_ms);

/* ---- The row cleaner (clean.c): local, not replicated ------------------ */

/* Delete at most budget LMDB rows that no read can reach: msgs rows below
 * each trimmed queue's start_offset and every msgs, groups and producers
 * row of a deleted queue. Runs in the pending write txn and commits it
 * (idx_flush): LMDB has one writer, so a separate txn would have to
 * commit the pending one first anyway. *done (OUT) = rows and work marks
 * removed; *done < budget means nothing is left to clean. 0 or a tern
 * code (an LMDB failure; the pending txn is then dropped, as by a failed
 * idx_apply). */
int idx_clean_step(struct idx_env *e, unsigned budget, unsigned *done);
/* Whether the cleaner has work (flushed state: call after idx_flush). */
bool idx_clean_pending(struct idx_env *e);

/* Committed offset of a group (0 if it never committed). */
int idx_group_offset(struct idx_env *e,
                     const char *queue,
                     const char *group,
                     uint64_t *offset);

/* ---- Security metadata reads (flushed state; docs/AUTH.md) ------------- */

/* A grant pattern: "*", a valid queue name, or a prefix of one followed by
 * '*' (len bytes at p, borrowed). */
bool idx_acl_pattern_valid(const char *p, size_t len);
/* Whether pattern matches queue (both NUL-terminated, borrowed). A NULL
 * queue (a namespace-wide operation) matches only "*". */
bool idx_acl_pattern_match(const char *pattern, const char *queue);

struct idx_user_info
{
    const char *name; /* borrowed for the callback / the call */
    uint32_t flags;   /* IDX_USER_* */
    uint64_t created_index;
    uint8_t cred[IDX_CRED_MAX];
    uint32_t cred_len;
};
typedef int (*idx_user_cb)(void *arg, const struct idx_user_info *u);
/* Users in name order; a non-zero return from cb stops. */
int idx_user_list(struct idx_env *e, idx_user_cb cb, void *arg);
/* As idx_user_list, from the first user whose name sorts after after
 * (borrowed for the call; NULL or "": from the first user). */
int idx_user_list_after(struct idx_env *e,
                        const char *after,
                        idx_user_cb cb,
                        void *arg);
/* TERN_ENOTFOUND, TERN_EBADNAME. out->name = name. */
int idx_user_get(struct idx_env *e,
                 const char *name,
                 struct idx_user_info *out);

struct idx_acl
{
    const char *user; /* borrowed for the callback */
    const char *ns;
    const char *pattern;
    uint32_t perms;
};
typedef int (*idx_acl_cb)(void *arg, const struct idx_acl *a);
/* Grants in (user, namespace, pattern) order, only user's when user is
 * not NULL or "". */
int idx_acl_list(struct idx_env *e, const char *user, idx_acl_cb cb, void *arg);
/* As idx_acl_list, from the first grant that sorts after the grant key
 * (after->user, after->ns, after->pattern; after->perms ignored; borrowed
 * for the call; NULL: from the first grant). TERN_EBADNAME for an invalid
 * cursor. */
int idx_acl_list_after(struct idx_env *e,
                       const char *user,
                       const struct idx_acl *after,
                       idx_acl_cb cb,
                       void *arg);
/* Pure evaluator over a user's grants g[0..n) (any namespace; only those
 * of ns count): the permission bits the user holds on queue in ns (queue
 * NULL: namespace-wide, "*" grants only). IDX_PERM_ADMIN in the union
 * gives IDX_PERM_ALL. admin: the user's IDX_USER_ADMIN flag, which gives
 * IDX_PERM_ALL everywhere. */
uint32_t idx_acl_eval(const struct idx_acl *g,
                      size_t n,
                      bool admin,
                      const char *ns,
                      const char *queue);
/* *allowed (OUT) = whether user holds every bit of want on queue in ns
 * (idx_acl_eval over the tables). An unknown user is allowed nothing
 * (0, *allowed false). TERN_EBADNAME for an invalid user or namespace. */
int idx_acl_allows(struct idx_env *e,
                   const char *user,
                   const char *ns,
                   const char *queue,
                   uint32_t want,
                   bool *allowed);

struct idx_namespace_info
{
    const char *name;       /* borrowed for the callback / the call */
    uint64_t created_index; /* 0 for an implicit "default" */
    struct idx_quota quota;
};
typedef int (*idx_namespace_cb)(void *arg, const struct idx_namespace_info *n);
/* Namespaces in name order, "default" included even if never set. */
int idx_namespace_list(struct idx_env *e, idx_namespace_cb cb, void *arg);
/* As idx_namespace_list, from the first namespace whose name sorts after
 * after (borrowed for the call; NULL or "": from the first). */
int idx_namespace_list_after(struct idx_env *e,
                             const char *after,
                             idx_namespace_cb cb,
                             void *arg);
/* TERN_ENOTFOUND, TERN_EBADNAME. */
int idx_namespace_get(struct idx_env *e,
                      const char *name,
                      struct idx_namespace_info *out);

/* Owner of producer id pid, i.e. of its block pid >> 32: owner
 * (caller-owned, TERN_NAME_MAX + 1 bytes, "" for the anonymous owner) and
 * *owned (OUT) = whether that owner still exists as the user the block
 * was issued to (always true for the anonymous owner). TERN_ENOTFOUND for
 * an id whose block was never issued (every id below 2^32). */
int idx_producer_owner(struct idx_env *e,
                       uint64_t pid,
                       char *owner,
                       bool *owned);
/* The block number (not the id) the next PRODUCER_INIT will issue; it
 * answers the id block << 32 (applied state, pending txn included).
 * 2^32 once every block is issued. */
uint64_t idx_next_producer_id(const struct idx_env *e);

/* Usage of namespace ns (NULL, "" or "default": the queues with plain
 * names): *queues and *bytes (OUT) = its number of queues and the sum of
 * the lengths of their messages (flushed state; what the quotas of
 * NAMESPACE_SET are checked against). An unknown namespace or one without
 * queues gives zeros and 0. TERN_EBADNAME for an invalid name. */
int idx_ns_usage(struct idx_env *e,
                 const char *ns,
                 uint64_t *queues,
                 uint64_t *bytes);

/* Security generation: an in-memory counter (not persisted, not equal
 * across nodes) that increments whenever users, acls, namespaces or
 * producer_ids may have changed: when a flush (idx_flush, idx_sync)
 * commits applied entries that changed any of them (so a read after a
 * change sees the new generation and the new rows together), and after
 * idx_open and every idx_restore. PRODUCE, FETCH-side reads, queue
 * commands and READ_BARRIER leave it alone. A server may cache what it
 * read of those tables (a connection's grants) and read again when the
 * value differs from the one it cached with. */
uint64_t idx_security_gen(const struct idx_env *e);

/* ---- Snapshots and bulk catch-up --------------------------------------- */

/* Sync everything and append a manifest of the current state to w
 * (caller-owned; 40 bytes at the old w->len: version, checksum,
 * last_applied, log end, checksum of the last record). Format in
 * index/snapshot.c. */
int idx_snapshot(struct idx_env *e, struct tern_wbuf *w);
/* Adopt a manifest: if the local state already covers it, nothing to do;
 * otherwise the log must already hold [0, manifest end) (after bulk
 * writes; TERN_EINVAL if not): index it, verifying every record, and set
 * last_applied. Copied bytes beyond the manifest end are truncated.
 * TERN_ECORRUPT if the local log disagrees with the manifest or a copied
 * record is damaged (the log is then cut back to the last good record,
 * so idx_bulk_range asks for the rest again). TERN_EMALFORMED for a bad
 * manifest. */
int idx_restore(struct idx_env *e, const void *manifest, size_t len);
/* Which bytes [*from, *to) the local log lacks to reach the manifest
 * (OUT; *from == *to when nothing is missing). */
int idx_bulk_range(struct idx_env *e,
                   const void *manifest,
                   size_t len,
                   uint64_t *from,
                   uint64_t *to);
/* Read raw log bytes at pos (leader side) into buf (caller-owned). *n
 * (OUT) may be < cap; 0 at the log end. TERN_EINVAL beyond the end. */
int idx_bulk_read(struct idx_env *e,
                  uint64_t pos,
                  void *buf,
                  size_t cap,
                  size_t *n);
/* Append raw log bytes at pos == idx_log_end (follower side; TERN_EINVAL
 * elsewhere). Records are verified when idx_restore indexes them; an
 * idx_apply before that drops them (idx_bulk_discard). */
int idx_bulk_write(struct idx_env *e, uint64_t pos, const void *buf, size_t n);
/* Drop bulk-written bytes not indexed yet: truncate the log back to the
 * indexed end, durably (ftruncate + fsync, blocking; small unless a big
 * fetch was abandoned). 0 when there is nothing to drop. Afterwards
 * idx_bulk_range asks for them again. Returns the sticky error of a
 * failed env, or -errno / TERN_EFULL from the truncate. */
int idx_bulk_discard(struct idx_env *e);
/* Bytes dropped by idx_bulk_discard since idx_open. */
uint64_t idx_discarded_bytes(const struct idx_env *e);

/* ---- Backups (index/backup.c; docs/OPERATIONS.md) ---------------------- */

#define IDX_BACKUP_CLUSTER_MAX     64
#define IDX_SNAPSHOT_MANIFEST_SIZE 64

struct idx_backup;

/* What a backup holds (its manifest, summed up). */
struct idx_backup_info
{
    uint64_t created_ms;   /* wall clock of the node that wrote it */
    uint64_t node_id;      /* that node */
    uint64_t term;         /* its raft term when the backup began */
    uint64_t last_applied; /* raft index the backup covers */
    uint64_t log_start;    /* commit-log range it holds */
    uint64_t log_end;
    uint32_t n_files;
    uint64_t total_bytes; /* sum of the file sizes */
    char cluster[IDX_BACKUP_CLUSTER_MAX + 1];
};

struct idx_backup_options
{
    const char *dir;      /* absolute; missing (parent exists) or empty */
    const char *data_dir; /* the node's data dir: dir must be outside */
    const char *cluster;  /* cluster name for the manifest */
    uint64_t node_id;
    uint64_t term;
    uint64_t min_free_bytes; /* free space to leave beside the copy */
    /* the index must cover at least this raft index (idx_last_applied
     * when the caller decided to back up), else the job fails with
     * TERN_EBUSY: the copy sees flushed state only */
    uint64_t min_applied;
};

/* Loop thread. Check the target (absolute, outside data_dir, missing or
 * empty, enough free disk), create it, note the log start and hold the
 * head of the log until idx_backup_end. o is caller-owned. OUT: *out, the
 * job, owned by the caller until idx_backup_end frees it. TERN_EBACKUP
 * while another backup of e runs, TERN_EFULL when the disk is too full,
 * TERN_EINVAL for a bad target; errmsg says which. */
int idx_backup_begin(struct idx_env *e,
                     const struct idx_backup_options *o,
                     struct idx_backup **out,
                     char *errmsg);
/* Worker thread (blocking): copy LMDB, the log it covers and write the
 * manifest. The result is read by idx_backup_end. Does nothing when
 * idx_close came first. */
void idx_backup_run(struct idx_backup *b);
/* Loop thread, after idx_backup_run returned (or was never started):
 * release the hold, free b. 0 with *info filled (info may be NULL), or the
 * backup's error with errmsg. */
int idx_backup_end(struct idx_backup *b,
                   struct idx_backup_info *info,
                   char *errmsg);
/* Is a backup of e running (the head of the log is held)? */
bool idx_backup_holds(const struct idx_env *e);
/* Any thread, blocking: check dir's manifest, every file's size and
 * checksum, the segments' coverage and the last record. 0 with *info
 * (may be NULL), TERN_ECORRUPT / TERN_EVERSION / -errno with errmsg. */
int idx_backup_verify(const char *dir,
                      struct idx_backup_info *info,
                      char *errmsg);
/* With with_log: verify dir, then copy its commit log into
 * index_dir/log, which must not exist, so idx_open rebuilds the index from
 * it. Without: read only dir/MANIFEST (checksummed) and write nothing.
 * OUT: manifest, the snapshot manifest (idx_restore's format) of the
 * state the backup covers, and *info (may be NULL). */
int idx_backup_install(const char *dir,
                       const char *index_dir,
                       bool with_log,
                       uint8_t manifest[IDX_SNAPSHOT_MANIFEST_SIZE],
                       struct idx_backup_info *info,
                       char *errmsg);

#endif /* TERN_IDX_H */
