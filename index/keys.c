/*
 * LMDB key and value encoding of the index. Everything in LMDB is derived
 * from the commit log (index/log.c) and idx_open rebuilds it from the log
 * every time (env.c), so these formats carry one schema version (in meta
 * "state") rather than one per value, and never need a migration.
 * Encoded/decoded byte by byte, be careful when adapting.
 *
 * Keys sort with LMDB's default memcmp order; numeric key parts are
 * big-endian so that one queue's entries are contiguous and in offset
 * order. Values are little-endian.
 *
 * DBI "meta":
 *   key "state" -> 64 bytes:
 *     u32 schema version (4), u32 last_rec_checksum, u64 last_applied,
 *     u64 log_end, u64 last_rec_pos, u64 next_queue_id,
 *     u64 next_producer_id (the next producer-id block number, 1..2^32;
 *     2^32 once every block is issued), u64 last_append_ms (append time
 *     of the last applied valid entry: docs/MESSAGES.md, "Time"; 0 before
 *     the first), u32 reserved (0), u32 tern_checksum32 over the
 *     preceding 60 bytes.
 *   It is written in the same write txn as every change it describes.
 *   Schema 2 added next_producer_id and the four security tables below
 *   (docs/AUTH.md); schema 1 was 48 bytes without it. Schema 3 added the
 *   queue's bytes (queue value version 2), the table ns_usage, and made
 *   producer_ids keyed by block number. Schema 4 (56 -> 64 bytes) added
 *   last_append_ms, queue value version 3 (retention settings, bytes
 *   retained rather than appended) and the cleaner's work marks below.
 *   No upgrade code: LMDB is rebuilt from the commit log at every open,
 *   and old entries produce the new layout.
 *   Work marks of the row cleaner (index/clean.c), in the same DBI so
 *   that no new DBI is needed; both are written by the apply txn that
 *   creates the work and removed by the cleaner when it is done (local to
 *   the node, like the rows they describe):
 *   key "dead" + u64 BE queue id (12 bytes) -> empty: a deleted queue
 *     whose msgs, groups and producers rows are still to delete.
 *   key "trim" + u64 BE queue id (12 bytes) -> queue name: a queue whose
 *     start_offset moved; its msgs rows below it are still to delete.
 * DBI "queues":
 *   key queue name (tern_qname_valid: a plain name of namespace "default"
 *   or "ns%name", no NUL) -> 80 bytes:
 *     u32 version (3), u32 flags (0), u64 queue id, u64 created_index,
 *     u64 start_offset (the low watermark: first retained offset),
 *     u64 next_offset, u64 bytes (sum of the lengths of the retained
 *     messages, [start_offset, next_offset)), u64 max_age_ms,
 *     u64 max_bytes, u64 max_messages (0 = no limit), u32 overflow
 *     (0 drop-oldest, 1 reject), u32 reserved (0). A queue whose
 *     QUEUE_CREATE had no settings (the earlier release) has all three
 *     limits 0 (index/cmd.c).
 *   Version 2 was 48 bytes (up to bytes, which counted every message
 *   appended); version 1 was 40 bytes without bytes.
 *   Deleting a queue removes the key (freeing the name) and writes the
 *   "dead" work mark of its id (meta, above): the cleaner deletes its
 *   msgs/groups/producers rows later, in bounded batches. Ids are never
 *   reused (meta next_queue_id), so a re-created queue starts empty and
 *   no read reaches the rows of the old one.
 * DBI "msgs":
 *   key u64 BE queue id, u64 BE offset (16 bytes) -> version 1 (a message
 *   without properties), 32 bytes:
 *     u64 log position of the record, u32 byte offset of the message data
 *     inside the record payload, u32 length, u64 append time in ms (the
 *     entry's append time, docs/MESSAGES.md "Time": never decreasing with
 *     the offset), u64 producer_id.
 *   or version 2 (a message with properties, docs/MESSAGES.md), 48 +
 *   key_len bytes: the 32 bytes of version 1, then
 *     u32 byte offset of the properties block inside the record payload,
 *     u32 its length (>= 14), u32 tag hash (idx__tag_hash: tern_checksum32
 *     of the tag bytes; 0 without a tag), u8 tag_len (0..64), u8 version
 *     (2), u16 key_len (0..256), key_len bytes of the key.
 *   The length tells the versions apart. The tag hash lets a tag filter
 *   skip rows without reading the log, as RocketMQ's ConsumeQueue keeps
 *   a tag hash code; the key is kept so that the key index rows of an
 *   offset range can be found (idx__key_rows_delete).
 *   Rows below the queue's start_offset may remain until the cleaner
 *   deletes them; reads never look below start_offset.
 * DBI "keys" (the key index of message get by key):
 *   key u64 BE queue id, u8 key_len - 1 (keys are 1..256 bytes), key,
 *   u64 BE offset -> empty. Written with the msgs row; one key's rows are
 *   contiguous in offset order. The cleaner deletes them with the msgs
 *   rows (idx__key_rows_delete before the rows of the range go).
 * DBI "groups":
 *   key u64 BE queue id, group name -> version 2, 32 bytes:
 *     u64 next offset (the group's committed offset), u32 version (2),
 *     u32 reserved (0), u64 append time in ms of the entry of the
 *     GROUP_COMMIT that wrote the row, u64 raft index of that entry.
 *   or version 1, 8 bytes: the next offset alone (rows of checkpoints
 *   written before version 2; their commit time and index are unknown,
 *   read as 0). The length tells the versions apart. Message trace
 *   (read.c) reports the commit time and index; fetches read the offset.
 *   or version 3, a shared group (docs/WORKQUEUES.md), 41 + dlq_len bytes:
 *     u64 floor (every offset below it is acknowledged, dead-lettered or
 *     trimmed; read as the group's offset by fetches and trace),
 *     u32 version (3), u32 mode (1 = shared), u64 next (the first offset
 *     never delivered), u64 ack_timeout_ms, u32 max_deliveries,
 *     u32 window, u8 dlq_len (0 = the default DLQ name), dlq (a plain
 *     name). Versions 1 and 2 are stream groups; a group name keeps its
 *     mode (GROUP_COMMIT on a version 3 row and SHARED_* on a version 1
 *     or 2 row are refused).
 * DBI "leases" (the unacknowledged offsets of shared groups):
 *   key u64 BE queue id, u8 group_len (1..200), group, u64 BE offset ->
 *   24 bytes: u32 delivery count (>= 1), u8 state (0 leased, 1 ready),
 *   u8 reserved (0), u16 reserved (0), u64 consumer id (of the last
 *   delivery), u64 deadline in ms (leased: the lease's end; ready: not
 *   before). The length byte makes (queue id, group_len, group) a prefix
 *   that no other group's key starts with, so one group's rows are one
 *   contiguous range in offset order; a queue's rows share the 8-byte
 *   queue id prefix (the cleaner's walk of a deleted queue). Rows exist
 *   only for offsets in [floor, next) of the group row.
 * DBI "claims" (single active consumer of stream groups): key as the
 *   groups key; the value is owned and documented by index/claim.c.
 * DBI "producers":
 *   key u64 BE queue id, u64 BE producer id (queue first, so a queue's
 *   producers are deleted with one range walk) -> 16 + 20 * n bytes:
 *     u64 last_seq, u32 n (0..IDX__DEDUP_WINDOW = 32), u32 reserved (0),
 *     n x (u64 seq, u64 base_offset, u32 count), newest first.
 * DBI "users":
 *   key user name -> 17 + cred_len bytes:
 *     u32 version (1), u32 flags (IDX_USER_*), u64 created_index (raft
 *     index of the USER_SET that created it; a replace keeps it),
 *     u8 cred_len, cred (opaque).
 * DBI "acls":
 *   key user name, 0x00, namespace name, 0x00, pattern (names never hold
 *   0x00, so a user's grants are one contiguous range) -> u32 perms.
 * DBI "namespaces":
 *   key namespace name -> 40 bytes:
 *     u32 version (1), u32 flags (0), u64 created_index, u64 max_queues,
 *     u64 max_bytes, u64 produce_bytes_per_s.
 * DBI "producer_ids":
 *   key u64 BE block number n (1..2^32 - 1; the block holds the producer
 *   ids n << 32 .. n << 32 | 0xffffffff) -> 8 + len bytes: u64 the
 *   owner's created_index (0 for the anonymous owner), owner name (len =
 *   0..200 bytes, 0 = anonymous).
 * DBI "ns_usage":
 *   key namespace name ("default" for the queues with plain names) ->
 *   24 bytes: u32 version (1), u32 flags (0), u64 queues, u64 bytes (the
 *   sum of the queue values' bytes of the namespace's queues). Updated in
 *   the same txn as QUEUE_CREATE, QUEUE_DELETE (which gives the queue's
 *   bytes back) and PRODUCE; a namespace without queues has no row.
 * DBI "timers" (delayed messages, index/timer.c):
 *   key u64 BE due time ms, u64 BE raft index of the PRODUCE_DELAYED
 *   entry, u32 BE message number in that entry (20 bytes; due order,
 *   then log order) -> 32 bytes:
 *     u32 version (1), u32 message number (as in the key), u64 queue id,
 *     u64 queue incarnation (the queue's created_index), u64 log position
 *     of the PRODUCE_DELAYED record.
 *   Written by PRODUCE_DELAYED, deleted by the TIMER_FIRE that moves it.
 * DBI "timer_recs" (the log records pending timers need):
 *   key u64 BE log position of a PRODUCE_DELAYED record -> 8 bytes:
 *     u32 version (1), u32 its rows in "timers" (>= 1; no row at 0).
 *   The first key is the oldest record the head of the log must keep
 *   (snapshot.c); kept with "timers" in the same txn.
 * Both are in checkpoints (ckpt.c): apply alone decides them.
 */
#include "idx_int.h"

/* Big-endian (keys sort by memcmp): one store or load, swapped on a
 * little-endian host. */
void idx__put_be64(uint8_t *p, uint64_t v)
{
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, sizeof v);
}

uint64_t idx__get_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

void idx__state_encode(uint8_t *buf, const struct idx__state *s)
{
    tern_put_u32(buf, IDX__SCHEMA_VERSION);
    tern_put_u32(buf + 4, s->last_rec_checksum);
    tern_put_u64(buf + 8, s->last_applied);
    tern_put_u64(buf + 16, s->log_end);
    tern_put_u64(buf + 24, s->last_rec_pos);
    tern_put_u64(buf + 32, s->next_queue_id);
    tern_put_u64(buf + 40, s->next_producer_id);
    tern_put_u64(buf + 48, s->last_append_ms);
    tern_put_u32(buf + 56, 0);
    tern_put_u32(buf + 60, tern_checksum32(buf, 60));
}

int idx__state_decode(const void *buf, size_t len, struct idx__state *s)
{
    const uint8_t *b = buf;
    if (len != IDX__STATE_SIZE ||
        !IDX__CHECKSUM_OK(tern_get_u32(b + 60), tern_checksum32(b, 60))) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u32(b) != IDX__SCHEMA_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u32(b + 56) != 0) {
        return TERN_ECORRUPT;
    }
    s->last_rec_checksum = tern_get_u32(b + 4);
    s->last_applied = tern_get_u64(b + 8);
    s->log_end = tern_get_u64(b + 16);
    s->last_rec_pos = tern_get_u64(b + 24);
    s->next_queue_id = tern_get_u64(b + 32);
    s->next_producer_id = tern_get_u64(b + 40);
    s->last_append_ms = tern_get_u64(b + 48);
    return 0;
}

void idx__queue_val_encode(uint8_t *buf, const struct idx__queue_val *q)
{
    tern_put_u32(buf, 3);
    tern_put_u32(buf + 4, 0);
    tern_put_u64(buf + 8, q->id);
    tern_put_u64(buf + 16, q->created_index);
    tern_put_u64(buf + 24, q->start_offset);
    tern_put_u64(buf + 32, q->next_offset);
    tern_put_u64(buf + 40, q->bytes);
    tern_put_u64(buf + 48, q->settings.max_age_ms);
    tern_put_u64(buf + 56, q->settings.max_bytes);
    tern_put_u64(buf + 64, q->settings.max_messages);
    tern_put_u32(buf + 72, q->settings.overflow);
    tern_put_u32(buf + 76, 0);
}

int idx__queue_val_decode(const void *buf, size_t len, struct idx__queue_val *q)
{
    const uint8_t *b = buf;
    if (len != IDX__QUEUE_VAL_SIZE || tern_get_u32(b) != 3 ||
        tern_get_u32(b + 4) != 0 || tern_get_u32(b + 76) != 0 ||
        tern_get_u32(b + 72) > IDX_OVERFLOW_REJECT ||
        tern_get_u64(b + 24) > tern_get_u64(b + 32)) {
        return TERN_ECORRUPT;
    }
    q->id = tern_get_u64(b + 8);
    q->created_index = tern_get_u64(b + 16);
    q->start_offset = tern_get_u64(b + 24);
    q->next_offset = tern_get_u64(b + 32);
    q->bytes = tern_get_u64(b + 40);
    q->settings.max_age_ms = tern_get_u64(b + 48);
    q->settings.max_bytes = tern_get_u64(b + 56);
    q->settings.max_messages = tern_get_u64(b + 64);
    q->settings.overflow = tern_get_u32(b + 72);
    return 0;
}

void idx_queue_settings_default(struct idx_queue_settings *s)
{
    memset(s, 0, sizeof *s);
    s->max_age_ms = IDX_DEFAULT_MAX_AGE_MS;
    s->overflow = IDX_OVERFLOW_DROP_OLDEST;
}

void idx__mark_key(uint8_t *key, const char *kind, uint64_t queue_id)
{
    memcpy(key, kind, 4);
    idx__put_be64(key + 4, queue_id);
}

void idx__usage_val_encode(uint8_t *buf, const struct idx__usage_val *u)
{
    tern_put_u32(buf, 1);
    tern_put_u32(buf + 4, 0);
    tern_put_u64(buf + 8, u->queues);
    tern_put_u64(buf + 16, u->bytes);
}

int idx__usage_val_decode(const void *buf, size_t len, struct idx__usage_val *u)
{
    const uint8_t *b = buf;
    if (len != IDX__USAGE_VAL_SIZE || tern_get_u32(b) != 1 ||
        tern_get_u32(b + 4) != 0) {
        return TERN_ECORRUPT;
    }
    u->queues = tern_get_u64(b + 8);
    u->bytes = tern_get_u64(b + 16);
    return 0;
}

size_t idx__usage_key(const char *queue, size_t queue_len, const char **key)
{
    const char *ns, *name;
    size_t ns_len, name_len;
    tern_qname_split(queue, queue_len, &ns, &ns_len, &name, &name_len);
    if (ns_len == 0) {
        *key = IDX_NAMESPACE_DEFAULT;
        return sizeof IDX_NAMESPACE_DEFAULT - 1;
    }
    *key = ns;
    return ns_len;
}

void idx__msg_key(uint8_t *key, uint64_t queue_id, uint64_t offset)
{
    idx__put_be64(key, queue_id);
    idx__put_be64(key + 8, offset);
}

size_t idx__msg_val_encode(uint8_t *buf, const struct idx__msg_val *m)
{
    tern_put_u64(buf, m->rec_pos);
    tern_put_u32(buf + 8, m->data_off);
    tern_put_u32(buf + 12, m->len);
    tern_put_u64(buf + 16, m->timestamp_ms);
    tern_put_u64(buf + 24, m->producer_id);
    if (m->props_len == 0) {
        return IDX__MSG_VAL_SIZE;
    }
    tern_put_u32(buf + 32, m->props_off);
    tern_put_u32(buf + 36, m->props_len);
    tern_put_u32(buf + 40, m->tag_hash);
    buf[44] = m->tag_len;
    buf[45] = 2;
    tern_put_u16(buf + 46, m->key_len);
    if (m->key_len > 0) {
        memcpy(buf + IDX__MSG_VAL_V2_SIZE, m->key, m->key_len);
    }
    return IDX__MSG_VAL_V2_SIZE + (size_t)m->key_len;
}

int idx__msg_val_decode(const void *buf, size_t len, struct idx__msg_val *m)
{
    const uint8_t *b = buf;
    memset(m, 0, sizeof *m);
    if (len != IDX__MSG_VAL_SIZE &&
        (len < IDX__MSG_VAL_V2_SIZE || b[45] != 2 ||
         len != IDX__MSG_VAL_V2_SIZE + (size_t)tern_get_u16(b + 46) ||
         tern_get_u16(b + 46) > IDX_KEY_MAX || b[44] > IDX_TAG_MAX ||
         tern_get_u32(b + 36) == 0)) {
        return TERN_ECORRUPT;
    }
    m->rec_pos = tern_get_u64(b);
    m->data_off = tern_get_u32(b + 8);
    m->len = tern_get_u32(b + 12);
    m->timestamp_ms = tern_get_u64(b + 16);
    m->producer_id = tern_get_u64(b + 24);
    if (len > IDX__MSG_VAL_SIZE) {
        m->props_off = tern_get_u32(b + 32);
        m->props_len = tern_get_u32(b + 36);
        m->tag_hash = tern_get_u32(b + 40);
        m->tag_len = b[44];
        m->key_len = tern_get_u16(b + 46);
        m->key = b + IDX__MSG_VAL_V2_SIZE;
    }
    return 0;
}

uint32_t idx__tag_hash(const void *tag, size_t len)
{
    return len > 0 ? tern_checksum32(tag, len) : 0;
}

size_t idx__key_row(uint8_t *buf,
                    uint64_t queue_id,
                    const void *key,
                    size_t key_len,
                    uint64_t offset,
                    bool prefix_only)
{
    idx__put_be64(buf, queue_id);
    buf[8] = (uint8_t)(key_len - 1); /* keys are 1..256 bytes */
    memcpy(buf + 9, key, key_len);
    if (prefix_only) {
        return 9 + key_len;
    }
    idx__put_be64(buf + 9 + key_len, offset);
    return 17 + key_len;
}

size_t idx__group_key(uint8_t *key,
                      uint64_t queue_id,
                      const char *group,
                      size_t group_len)
{
    idx__put_be64(key, queue_id);
    memcpy(key + 8, group, group_len);
    return 8 + group_len;
}

size_t idx__group_val_encode(uint8_t *buf, const struct idx__group_val *g)
{
    if (g->shared) {
        size_t dn = strnlen(g->settings.dlq, TERN_NAME_MAX);
        tern_put_u64(buf, g->next_offset);
        tern_put_u32(buf + 8, 3);
        tern_put_u32(buf + 12, 1);
        tern_put_u64(buf + 16, g->next);
        tern_put_u64(buf + 24, g->settings.ack_timeout_ms);
        tern_put_u32(buf + 32, g->settings.max_deliveries);
        tern_put_u32(buf + 36, g->settings.window);
        buf[40] = (uint8_t)dn;
        memcpy(buf + IDX__GROUP_VAL_V3_SIZE, g->settings.dlq, dn);
        return IDX__GROUP_VAL_V3_SIZE + dn;
    }
    tern_put_u64(buf, g->next_offset);
    tern_put_u32(buf + 8, 2);
    tern_put_u32(buf + 12, 0);
    tern_put_u64(buf + 16, g->commit_ms);
    tern_put_u64(buf + 24, g->commit_index);
    return IDX__GROUP_VAL_SIZE;
}

/* Version 3 (buf[0..len), len >= IDX__GROUP_VAL_V3_SIZE). */
static int group_val_v3_decode(const uint8_t *b,
                               size_t len,
                               struct idx__group_val *g)
{
    size_t dn = b[40];
    if (tern_get_u32(b + 12) != 1 || len != IDX__GROUP_VAL_V3_SIZE + dn ||
        (dn > 0 && !tern_name_valid((const char *)b + 41, dn))) {
        return TERN_ECORRUPT;
    }
    g->shared = true;
    g->next_offset = tern_get_u64(b);
    g->next = tern_get_u64(b + 16);
    g->settings.ack_timeout_ms = tern_get_u64(b + 24);
    g->settings.max_deliveries = tern_get_u32(b + 32);
    g->settings.window = tern_get_u32(b + 36);
    memcpy(g->settings.dlq, b + 41, dn);
    g->settings.dlq[dn] = '\0';
    return g->next < g->next_offset ? TERN_ECORRUPT : 0;
}

size_t idx__lease_key(uint8_t *key,
                      uint64_t queue_id,
                      const char *group,
                      size_t group_len,
                      uint64_t offset,
                      bool prefix_only)
{
    idx__put_be64(key, queue_id);
    key[8] = (uint8_t)group_len;
    memcpy(key + 9, group, group_len);
    if (prefix_only) {
        return 9 + group_len;
    }
    idx__put_be64(key + 9 + group_len, offset);
    return 17 + group_len;
}

void idx__lease_val_encode(uint8_t *buf, const struct idx__lease_val *l)
{
    tern_put_u32(buf, l->count);
    buf[4] = l->state;
    buf[5] = 0;
    tern_put_u16(buf + 6, 0);
    tern_put_u64(buf + 8, l->consumer_id);
    tern_put_u64(buf + 16, l->deadline_ms);
}

int idx__lease_val_decode(const void *buf, size_t len, struct idx__lease_val *l)
{
    const uint8_t *b = buf;
    if (len != IDX__LEASE_VAL_SIZE || b[4] > IDX__LEASE_READY || b[5] != 0 ||
        tern_get_u16(b + 6) != 0 || tern_get_u32(b) == 0) {
        return TERN_ECORRUPT;
    }
    l->count = tern_get_u32(b);
    l->state = b[4];
    l->consumer_id = tern_get_u64(b + 8);
    l->deadline_ms = tern_get_u64(b + 16);
    return 0;
}

int idx__group_val_decode(const void *buf, size_t len, struct idx__group_val *g)
{
    const uint8_t *b = buf;
    memset(g, 0, sizeof *g);
    if (len == IDX__GROUP_VAL_V1_SIZE) {
        g->next_offset = tern_get_u64(b);
        return 0;
    }
    if (len >= IDX__GROUP_VAL_V3_SIZE && tern_get_u32(b + 8) == 3) {
        return group_val_v3_decode(b, len, g);
    }
    if (len != IDX__GROUP_VAL_SIZE || tern_get_u32(b + 8) != 2 ||
        tern_get_u32(b + 12) != 0) {
        return TERN_ECORRUPT;
    }
    g->next_offset = tern_get_u64(b);
    g->commit_ms = tern_get_u64(b + 16);
    g->commit_index = tern_get_u64(b + 24);
    return 0;
}

void idx__producer_key(uint8_t *key, uint64_t queue_id, uint64_t producer_id)
{
    idx__put_be64(key, queue_id);
    idx__put_be64(key + 8, producer_id);
}

size_t idx__producer_val_encode(uint8_t *buf, const struct idx__producer_val *p)
{
    uint8_t *q = buf + 16;
    tern_put_u64(buf, p->last_seq);
    tern_put_u32(buf + 8, p->n);
    tern_put_u32(buf + 12, 0);
    for (uint32_t i = 0; i < p->n; i++) {
        tern_put_u64(q, p->b[i].seq);
        tern_put_u64(q + 8, p->b[i].base_offset);
        tern_put_u32(q + 16, p->b[i].count);
        q += 20;
    }
    return (size_t)(q - buf);
}

int idx__producer_val_decode(const void *buf,
                             size_t len,
                             struct idx__producer_val *p)
{
    const uint8_t *b = buf;
    if (len < 16) {
        return TERN_ECORRUPT;
    }
    p->last_seq = tern_get_u64(b);
    p->n = tern_get_u32(b + 8);
    if (p->n > IDX__DEDUP_WINDOW || len != 16 + (size_t)p->n * 20 ||
        tern_get_u32(b + 12) != 0) {
        return TERN_ECORRUPT;
    }
    b += 16;
    for (uint32_t i = 0; i < p->n; i++) {
        p->b[i].seq = tern_get_u64(b);
        p->b[i].base_offset = tern_get_u64(b + 8);
        p->b[i].count = tern_get_u32(b + 16);
        b += 20;
    }
    return 0;
}

size_t idx__user_val_encode(uint8_t *buf, const struct idx__user_val *u)
{
    tern_put_u32(buf, 1);
    tern_put_u32(buf + 4, u->flags);
    tern_put_u64(buf + 8, u->created_index);
    buf[16] = (uint8_t)u->cred_len;
    memcpy(buf + 17, u->cred, u->cred_len);
    return 17 + (size_t)u->cred_len;
}

int idx__user_val_decode(const void *buf, size_t len, struct idx__user_val *u)
{
    const uint8_t *b = buf;
    if (len < 17 || tern_get_u32(b) != 1 || len != 17 + (size_t)b[16] ||
        (tern_get_u32(b + 4) & ~IDX_USER_FLAGS) != 0) {
        return TERN_ECORRUPT;
    }
    u->flags = tern_get_u32(b + 4);
    u->created_index = tern_get_u64(b + 8);
    u->cred_len = b[16];
    memcpy(u->cred, b + 17, u->cred_len);
    return 0;
}

size_t idx__acl_key(uint8_t *key,
                    const char *user,
                    size_t user_len,
                    const char *ns,
                    size_t ns_len,
                    const char *pattern,
                    size_t pattern_len)
{
    uint8_t *p = key;
    memcpy(p, user, user_len);
    p += user_len;
    *p++ = 0;
    memcpy(p, ns, ns_len);
    p += ns_len;
    *p++ = 0;
    memcpy(p, pattern, pattern_len);
    p += pattern_len;
    return (size_t)(p - key);
}

int idx__acl_key_split(const void *key, size_t len, struct idx__acl_key *out)
{
    const char *k = key;
    const char *z1 = len > 0 ? memchr(k, 0, len) : NULL;
    const char *z2 =
        z1 != NULL ? memchr(z1 + 1, 0, len - (size_t)(z1 + 1 - k)) : NULL;
    if (z2 == NULL) {
        return TERN_ECORRUPT;
    }
    out->user_len = (size_t)(z1 - k);
    out->ns_len = (size_t)(z2 - z1 - 1);
    out->pattern_len = len - (size_t)(z2 + 1 - k);
    if (out->user_len > IDX_USER_NAME_MAX || out->ns_len > IDX_NS_NAME_MAX ||
        !tern_name_valid(k, out->user_len) ||
        !tern_name_valid(z1 + 1, out->ns_len) ||
        !idx_acl_pattern_valid(z2 + 1, out->pattern_len)) {
        return TERN_ECORRUPT;
    }
    memcpy(out->user, k, out->user_len);
    out->user[out->user_len] = '\0';
    memcpy(out->ns, z1 + 1, out->ns_len);
    out->ns[out->ns_len] = '\0';
    memcpy(out->pattern, z2 + 1, out->pattern_len);
    out->pattern[out->pattern_len] = '\0';
    return 0;
}

void idx__ns_val_encode(uint8_t *buf, const struct idx__ns_val *n)
{
    tern_put_u32(buf, 1);
    tern_put_u32(buf + 4, 0);
    tern_put_u64(buf + 8, n->created_index);
    tern_put_u64(buf + 16, n->quota.max_queues);
    tern_put_u64(buf + 24, n->quota.max_bytes);
    tern_put_u64(buf + 32, n->quota.produce_bytes_per_s);
}

int idx__ns_val_decode(const void *buf, size_t len, struct idx__ns_val *n)
{
    const uint8_t *b = buf;
    if (len != IDX__NS_VAL_SIZE || tern_get_u32(b) != 1 ||
        tern_get_u32(b + 4) != 0) {
        return TERN_ECORRUPT;
    }
    n->created_index = tern_get_u64(b + 8);
    n->quota.max_queues = tern_get_u64(b + 16);
    n->quota.max_bytes = tern_get_u64(b + 24);
    n->quota.produce_bytes_per_s = tern_get_u64(b + 32);
    return 0;
}

size_t idx__pid_val_encode(uint8_t *buf, const struct idx__pid_val *p)
{
    tern_put_u64(buf, p->owner_created_index);
    memcpy(buf + 8, p->owner, p->owner_len);
    return 8 + p->owner_len;
}

int idx__pid_val_decode(const void *buf, size_t len, struct idx__pid_val *p)
{
    const uint8_t *b = buf;
    if (len < 8 || len - 8 > TERN_NAME_MAX ||
        (len > 8 && !tern_name_valid((const char *)b + 8, len - 8))) {
        return TERN_ECORRUPT;
    }
    p->owner_created_index = tern_get_u64(b);
    p->owner_len = len - 8;
    memcpy(p->owner, b + 8, p->owner_len);
    p->owner[p->owner_len] = '\0';
    return 0;
}

/* ---- timers, timer_recs ------------------------------------------------ */

#define IDX__TIMER_VAL_VERSION 1

void idx__timer_key(uint8_t *key, const struct idx_timer_key *k)
{
    idx__put_be64(key, k->due_ms);
    idx__put_be64(key + 8, k->index);
    key[16] = (uint8_t)(k->msg_no >> 24);
    key[17] = (uint8_t)(k->msg_no >> 16);
    key[18] = (uint8_t)(k->msg_no >> 8);
    key[19] = (uint8_t)k->msg_no;
}

int idx__timer_key_decode(const void *buf, size_t len, struct idx_timer_key *k)
{
    const uint8_t *p = buf;
    if (len != IDX__TIMER_KEY_SIZE) {
        return TERN_ECORRUPT;
    }
    k->due_ms = idx__get_be64(p);
    k->index = idx__get_be64(p + 8);
    k->msg_no = (uint32_t)p[16] << 24 | (uint32_t)p[17] << 16 |
                (uint32_t)p[18] << 8 | p[19];
    return 0;
}

void idx__timer_val_encode(uint8_t *buf, const struct idx__timer_val *t)
{
    tern_put_u32(buf, IDX__TIMER_VAL_VERSION);
    tern_put_u32(buf + 4, t->msg_no);
    tern_put_u64(buf + 8, t->queue_id);
    tern_put_u64(buf + 16, t->created_index);
    tern_put_u64(buf + 24, t->rec_pos);
}

int idx__timer_val_decode(const void *buf, size_t len, struct idx__timer_val *t)
{
    const uint8_t *p = buf;
    if (len != IDX__TIMER_VAL_SIZE ||
        tern_get_u32(p) != IDX__TIMER_VAL_VERSION) {
        return TERN_ECORRUPT;
    }
    t->msg_no = tern_get_u32(p + 4);
    t->queue_id = tern_get_u64(p + 8);
    t->created_index = tern_get_u64(p + 16);
    t->rec_pos = tern_get_u64(p + 24);
    return 0;
}

void idx__timer_rec_val_encode(uint8_t *buf, uint32_t rows)
{
    tern_put_u32(buf, IDX__TIMER_VAL_VERSION);
    tern_put_u32(buf + 4, rows);
}

int idx__timer_rec_val_decode(const void *buf, size_t len, uint32_t *rows)
{
    const uint8_t *p = buf;
    if (len != IDX__TIMER_REC_VAL_SIZE ||
        tern_get_u32(p) != IDX__TIMER_VAL_VERSION || tern_get_u32(p + 4) == 0) {
        return TERN_ECORRUPT;
    }
    *rows = tern_get_u32(p + 4);
    return 0;
}
