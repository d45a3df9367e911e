/*
 * Command entries: the payload of every Raft entry tern replicates. The
 * builder (idx_cmd_*), the strict validator (idx_cmd_validate) and the
 * iterator idx_apply uses. An entry is decoded from untrusted bytes
 * (anything in the Raft log or the commit log), so every read goes
 * through a bounded tern_cursor.
 *
 * Entry layout (version 1; all integers little-endian; encoded/decoded
 * byte by byte, be careful when adapting):
 *
 *   offset size  field
 *   0      2     version        = 1
 *   2      2     flags          0 or IDX__CMD_FLAG_XXH3 (1); anything
 *                               else is rejected
 *   4      4     n_commands     1..65536
 *   8      8     timestamp_ms   leader wall clock, stamped on every message
 *   16     4     total_len      length of the whole entry, header included
 *   20     4     checksum       flags 0: tern_checksum32 (XXH32) over bytes
 *                               [0,20) followed by bytes [24,total_len).
 *                               IDX__CMD_FLAG_XXH3: tern_checksum32_xxh3 of
 *                               bytes [24,total_len) seeded with
 *                               tern_checksum32 of bytes [0,20)
 *   24     ...   n_commands commands, back to back, nothing after the last
 *
 * The XXH3 flag (idx_cmd_flag_xxh3; added after the first release of
 * version 1) also makes the entry's commit-log record a version 2 one
 * (XXH3, index/log.c): on a producer's path the entry is checksummed once
 * when built and once on every node that applies it, and its record once
 * more on every node and at every read. A node that does not know the
 * flag finds the entry malformed, records it unapplied and in a record of
 * version 1 where the others write version 2, and the logs then differ
 * in that record's checksum, which snapshots and checkpoints compare. So
 * a leader flags its entries only once the cluster has switched
 * (idx_xxh3_in_use: a new cluster, or one whose last entry was flagged)
 * or an operator has said every node knows the flag ([raft]
 * entry_checksum = xxh3 in node/; docs/OPERATIONS.md, "Upgrades").
 *
 * Command: u8 type, u32 body_len, body_len bytes of body. The body must be
 * consumed exactly by its decoder. A queue name (qname below) is u8 len +
 * bytes passing tern_qname_valid: a plain name of the namespace "default"
 * (1..200 bytes of [A-Za-z0-9._-]) or the stored form "ns%name" of a queue
 * of namespace ns (docs/AUTH.md, "Stored names"; ns 1..64 bytes, the
 * whole at most 200). A group name is plain (tern_name_valid). Qualified
 * names were accepted after the first release of version 1: a node that
 * does not know them finds such an entry malformed, so upgrade every node
 * before a namespace other than "default" gets a queue.
 *
 *   QUEUE_CREATE (1):
 *     qname [settings]
 *     The settings tail (25 bytes, added with retention; a node that does
 *     not know it finds the entry malformed, so upgrade every node before
 *     a leader proposes one): u64 max_age_ms, u64 max_bytes,
 *     u64 max_messages (0 = no limit), u8 overflow (0 drop-oldest,
 *     1 reject). A leader of this release always writes the tail (the
 *     built-in defaults, idx_queue_settings_default, when the client sent
 *     no settings). Without the tail (entries of the earlier release,
 *     whose queues kept every message) the queue gets no limits: max_age,
 *     max_bytes and max_messages 0, drop-oldest.
 *   QUEUE_DELETE (2):
 *     qname
 *   PRODUCE (3):
 *     qname, u64 producer_id, u64 seq, u32 n_msgs (>= 1),
 *     n_msgs x (u32 len, len bytes)
 *     producer_id != 0 requires seq >= 1; seq is ignored when it is 0.
 *   GROUP_COMMIT (4):
 *     qname, u8 group_len, group, u64 next_offset
 *   READ_BARRIER (5):
 *     empty body; applies nothing (result 0). Added after the first
 *     release of version 1: a node that does not know type 5 rejects the
 *     entry, so upgrade every node before a leader proposes one.
 *
 * Security metadata (docs/AUTH.md), added after the first release of
 * version 1 like READ_BARRIER (upgrade every node before a leader proposes
 * one). name = u8 len + bytes passing tern_name_valid, at most
 * IDX_USER_NAME_MAX (128) bytes for a user, IDX_NS_NAME_MAX (64) for a
 * namespace:
 *   USER_SET (6):
 *     name user, u32 flags (IDX_USER_ADMIN 1 | IDX_USER_CERT 2, other bits
 *     0), u8 cred_len, cred (opaque: auth/scram.c binary credential;
 *     cred_len 0 only with IDX_USER_CERT)
 *   USER_DELETE (7), NAMESPACE_DELETE (11):
 *     name
 *   ACL_SET (8):
 *     name user, name namespace, u8 pattern_len, pattern
 *     (idx_acl_pattern_valid), u32 perms (1..IDX_PERM_ALL)
 *   ACL_DELETE (9):
 *     name user, name namespace, u8 pattern_len, pattern
 *   NAMESPACE_SET (10):
 *     name, u64 max_queues, u64 max_bytes, u64 produce_bytes_per_s
 *   PRODUCER_INIT (12):
 *     u8 owner_len (0 = anonymous), owner (tern_name_valid when not empty)
 *
 * Retention (docs/MESSAGES.md, "Retention"), added after the first release
 * of version 1 (upgrade every node before a leader proposes one):
 *   QUEUE_UPDATE (13):
 *     qname, u32 mask (IDX_SET_MAX_AGE 1 | IDX_SET_MAX_BYTES 2 |
 *     IDX_SET_MAX_MESSAGES 4 | IDX_SET_OVERFLOW 8; at least one bit, no
 *     others), u64 max_age_ms, u64 max_bytes, u64 max_messages,
 *     u8 overflow (0 or 1). A field whose bit is clear is left unchanged
 *     and must be 0 in the body (one encoding per command).
 *   TRIM (14):
 *     qname, u64 queue_id, u64 from, u64 to (> from), u64 bytes
 *     The leader's decision (node/, from its index: idx_trim_plan) that
 *     queue qname, incarnation queue_id, drops offsets [from, to), which
 *     hold bytes message bytes. Applying it moves start_offset from
 *     `from` to `to` and lowers the queue's and namespace's bytes by
 *     `bytes`; it changes nothing (result TERN_EINVAL) if the queue is not
 *     that incarnation, its start_offset is not `from`, or `to` is past
 *     next_offset. Applying never reads the rows of the trimmed messages,
 *     so a rebuild from a checkpoint (ckpt.c) that lacks them applies it
 *     as the first apply did.
 *
 * Message properties (docs/MESSAGES.md), added after the security
 * metadata (upgrade every node before a leader proposes one; a batch
 * without properties stays a PRODUCE, which every node applies):
 *   PRODUCE_PROPS (15):
 *     qname, u64 producer_id, u64 seq, u32 n_msgs (>= 1),
 *     n_msgs x (u32 len, len bytes, u32 props_len, props_len bytes of a
 *     properties block; props_len 0 = this message has none); at least
 *     one message has a block (a batch without any is a PRODUCE)
 *
 * Message trace (docs/MESSAGES.md, "Query and seek"), added after message
 * properties (upgrade every node before a leader proposes one):
 *   TERM (16):
 *     u64 term (>= 1): the Raft term of the leader that built the entry.
 *     The leader's batcher (node/batch.c) puts it first in every entry it
 *     builds, 13 bytes in all; applying it records nothing (result 0).
 *     Trace reads it back from the entry of a message; an entry without
 *     one (older entries) has an unknown term.
 *
 * Shared groups (docs/WORKQUEUES.md), added after message trace (upgrade
 * every node before a leader proposes one). group = u8 len + a plain name
 * (tern_name_valid). Lists hold 1..IDX_SHARED_LIST_MAX (1024) items with
 * strictly increasing offsets (one item per offset):
 *   SHARED_CONFIG (17):
 *     qname, group, u32 mask (IDX_SHARED_SET_ACK_TIMEOUT 1 |
 *     _MAX_DELIVERIES 2 | _WINDOW 4 | _DLQ 8; 0 = create with the
 *     defaults or change nothing), u64 ack_timeout_ms (>= 1),
 *     u32 max_deliveries (>= 1), u32 window (1..2^24), u8 dlq_len, dlq
 *     (a plain name; 0 bytes = the default name). A field whose bit is
 *     clear is 0 (dlq_len 0) in the body (one encoding per command).
 *   DELIVER (18):
 *     qname, group, u64 consumer_id, u16 n (1..1024),
 *     n x (u64 offset, u32 count: 0 for a new offset, else the delivery
 *     count the leader saw on the row)
 *   SETTLE (19):
 *     qname, group, u16 n (1..1024),
 *     n x (u64 offset, u32 count (>= 1), u8 action (0 ack, 1 nack,
 *     2 extend, 3 release), u64 delay_ms (0 for ack and release))
 *   DEAD_LETTER (20):
 *     qname, group, u64 offset, u32 count (>= 1), u8 reason_len (1..64),
 *     reason ([A-Za-z0-9._-]), u32 len, len bytes of the message,
 *     u32 props_len, props_len bytes of a properties block (below): the
 *     message's own block rebuilt by idx__dlq_props: its producer time,
 *     key and tag, its headers but those named tern-dlq-* (kept in order
 *     while they and the four below fit IDX_HEADERS_MAX and
 *     IDX_HEADERS_BYTES_MAX, the rest dropped), then tern-dlq-queue
 *     (qname), tern-dlq-offset (offset in decimal), tern-dlq-deliveries
 *     (count in decimal), tern-dlq-reason (reason). The validator rebuilds
 *     the block from the one it reads and requires the same bytes.
 * Delayed messages (docs/WORKQUEUES.md, "Delayed and scheduled
 * messages"), added after TERM (upgrade every node before a leader
 * proposes one; types 17..20 are shared groups):
 *   PRODUCE_DELAYED (21):
 *     u64 due_ms (absolute, the leader's clock), then a PRODUCE_PROPS body
 *     (qname, u64 producer_id, u64 seq, u32 n_msgs (>= 1), n_msgs x
 *     (u32 len, bytes, u32 props_len, props)) with two differences: no
 *     message needs a properties block, and producer_id and seq are
 *     deduplicated as PRODUCE's (apply.c: the producers row of the queue
 *     remembers (seq, due_ms, count) of the batches it scheduled; 0 / 0 =
 *     no dedup). The messages are numbered, for the timer keys, across
 *     all PRODUCE_DELAYED commands of the entry from 0.
 *   TIMER_FIRE (22):
 *     u32 n_keys (1..IDX_TIMER_FIRE_KEYS_MAX = 1024), n_keys x
 *     (u64 due_ms, u64 raft_index (>= 1), u32 msg_no, qname, u32 len,
 *     len bytes, u32 props_len, props_len bytes of a properties block
 *     (0 = none)): a timer key, the queue the leader read from the
 *     PRODUCE_DELAYED record, and the message and properties it read
 *     there. The body (u32 n_keys included) is at most
 *     IDX_TIMER_FIRE_BYTES_MAX (4 MiB) unless it holds one key.
 *
 * Single active consumer of stream groups (docs/WORKQUEUES.md), added
 * after delayed messages (upgrade every node before a leader proposes
 * one). group = u8 len + a plain name:
 *   CLAIM (23):
 *     qname, group, u64 consumer_id (!= 0), u8 action (1 claim or renew,
 *     2 release), u32 lease_ms (claim: >= 1; release: 0)
 *   GROUP_COMMIT_AS (24):
 *     qname, group, u64 consumer_id (!= 0), u64 next_offset
 *
 * Properties block (version 1; the same bytes travel on the wire in
 * PRODUCE and FETCH, proto/include/proto.h; protected by the checksum of
 * the entry or frame that carries it):
 *   offset size  field
 *   0      1     version        = 1
 *   1      1     flags          = 0
 *   2      8     producer_ts_ms the producer's clock (opaque to tern)
 *   10     2     key_len        0 (no key) .. IDX_KEY_MAX (256)
 *   12     1     tag_len        0 (no tag) .. IDX_TAG_MAX (64)
 *   13     1     n_headers      0 .. IDX_HEADERS_MAX (32)
 *   14     ...   key_len bytes of key, tag_len bytes of tag ([A-Za-z0-9._-]),
 *                n_headers x (u8 name_len 1..64, name, u16 value_len
 *                0..1024, value), nothing after the last header;
 *                the names and values add up to at most 8192 bytes.
 * The validator checks every block against these limits, so a command
 * that passes one is refused whole (TERN_EMALFORMED) on every node.
 *
 * Message size: the validator checks structure only. The per-message limit
 * (idx_options.max_message) is enforced by idx_apply as a TERN_ETOOBIG
 * result for the whole produce command, so every node of a cluster must
 * run with the same max_message or their indexes diverge.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "cmd.h"

#define IDX__CMD_VERSION 1

/* ---- Builder ------------------------------------------------------------- */

static void set_err(struct tern_wbuf *w, int code)
{
    if (w->err == 0) {
        w->err = code;
    }
}

void idx_cmd_begin(struct tern_wbuf *w, uint64_t timestamp_ms)
{
    uint8_t hdr[IDX__CMD_HDR_SIZE] = {0};
    w->len = 0;
    tern_put_u16(hdr, IDX__CMD_VERSION);
    tern_put_u64(hdr + 8, timestamp_ms);
    tern_wbuf_put(w, hdr, sizeof hdr);
}

void idx_cmd_flag_xxh3(struct tern_wbuf *w)
{
    if (w->err == 0 && w->len >= IDX__CMD_HDR_SIZE) {
        tern_put_u16(w->base + 2, IDX__CMD_FLAG_XXH3);
    }
}

/* Start a command: writes type and a length placeholder, bumps the count.
 * Returns the offset of the length field, or 0 on error. */
static size_t cmd_start(struct tern_wbuf *w, uint8_t type)
{
    size_t at;
    if (w->err != 0) {
        return 0;
    }
    if (w->len < IDX__CMD_HDR_SIZE) {
        set_err(w, TERN_EINVAL); /* idx_cmd_begin was not called */
        return 0;
    }
    uint32_t n = tern_get_u32(w->base + 4);
    if (n >= IDX__CMD_MAX_COMMANDS) {
        set_err(w, TERN_ETOOBIG);
        return 0;
    }
    tern_wbuf_u8(w, type);
    at = w->len;
    tern_wbuf_u32(w, 0);
    if (w->err != 0) {
        return 0;
    }
    tern_put_u32(w->base + 4, n + 1);
    return at;
}

static void cmd_finish(struct tern_wbuf *w, size_t at)
{
    if (w->err != 0 || at == 0) {
        return;
    }
    size_t body = w->len - at - 4;
    if (body > UINT32_MAX) {
        set_err(w, TERN_ETOOBIG);
        return;
    }
    tern_put_u32(w->base + at, (uint32_t)body);
}

/* A name of the kind valid() checks (tern_name_valid for groups, users
 * and namespaces, tern_qname_valid for queues). */
static void put_valid(struct tern_wbuf *w,
                      const char *name,
                      int (*valid)(const char *, size_t))
{
    size_t n = name != NULL ? strnlen(name, TERN_NAME_MAX + 1) : 0;
    if (!valid(name, n)) {
        set_err(w, TERN_EBADNAME);
        return;
    }
    tern_wbuf_u8(w, (uint8_t)n);
    tern_wbuf_put(w, name, n);
}

static void put_name(struct tern_wbuf *w, const char *name)
{
    put_valid(w, name, tern_name_valid);
}

static void put_qname(struct tern_wbuf *w, const char *queue)
{
    put_valid(w, queue, tern_qname_valid);
}

void idx_cmd_queue_create(struct tern_wbuf *w, const char *queue)
{
    size_t at = cmd_start(w, IDX_CMD_QUEUE_CREATE);
    put_qname(w, queue);
    cmd_finish(w, at);
}

static void put_settings(struct tern_wbuf *w,
                         const struct idx_queue_settings *s)
{
    tern_wbuf_u64(w, s->max_age_ms);
    tern_wbuf_u64(w, s->max_bytes);
    tern_wbuf_u64(w, s->max_messages);
    tern_wbuf_u8(w, (uint8_t)s->overflow);
}

void idx_cmd_queue_create_opts(struct tern_wbuf *w,
                               const char *queue,
                               const struct idx_queue_settings *s)
{
    if (s != NULL && s->overflow > IDX_OVERFLOW_REJECT) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_QUEUE_CREATE);
    put_qname(w, queue);
    if (s != NULL) {
        put_settings(w, s);
    }
    cmd_finish(w, at);
}

void idx_cmd_queue_update(struct tern_wbuf *w,
                          const char *queue,
                          uint32_t mask,
                          const struct idx_queue_settings *s)
{
    struct idx_queue_settings v = {0};
    if (s == NULL || mask == 0 || (mask & ~IDX_SET_ALL) != 0 ||
        ((mask & IDX_SET_OVERFLOW) != 0 && s->overflow > IDX_OVERFLOW_REJECT)) {
        set_err(w, TERN_EINVAL);
        return;
    }
    v.max_age_ms = (mask & IDX_SET_MAX_AGE) != 0 ? s->max_age_ms : 0;
    v.max_bytes = (mask & IDX_SET_MAX_BYTES) != 0 ? s->max_bytes : 0;
    v.max_messages = (mask & IDX_SET_MAX_MESSAGES) != 0 ? s->max_messages : 0;
    v.overflow = (mask & IDX_SET_OVERFLOW) != 0 ? s->overflow : 0;
    size_t at = cmd_start(w, IDX_CMD_QUEUE_UPDATE);
    put_qname(w, queue);
    tern_wbuf_u32(w, mask);
    put_settings(w, &v);
    cmd_finish(w, at);
}

void idx_cmd_trim(struct tern_wbuf *w,
                  const char *queue,
                  uint64_t queue_id,
                  uint64_t from,
                  uint64_t to,
                  uint64_t bytes)
{
    if (to <= from) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_TRIM);
    put_qname(w, queue);
    tern_wbuf_u64(w, queue_id);
    tern_wbuf_u64(w, from);
    tern_wbuf_u64(w, to);
    tern_wbuf_u64(w, bytes);
    cmd_finish(w, at);
}

void idx_cmd_queue_delete(struct tern_wbuf *w, const char *queue)
{
    size_t at = cmd_start(w, IDX_CMD_QUEUE_DELETE);
    put_qname(w, queue);
    cmd_finish(w, at);
}

/* Both produce builders: message i from at(msgs, i). */
typedef void (*msg_at_fn)(const void *msgs, uint32_t i, struct idx_pmsg *m);

/* delayed: a PRODUCE_DELAYED due at *delayed, which writes every message's
 * props_len; else a PRODUCE or, with any properties, a PRODUCE_PROPS. */
static void produce(struct tern_wbuf *w,
                    const char *queue,
                    uint64_t producer_id,
                    uint64_t seq,
                    msg_at_fn at,
                    const void *msgs,
                    uint32_t n,
                    const uint64_t *delayed)
{
    struct idx_pmsg m;
    bool props = delayed != NULL;
    if (n == 0 || (msgs == NULL) || (producer_id != 0 && seq == 0)) {
        set_err(w, TERN_EINVAL);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        at(msgs, i, &m);
        if (m.props_len > 0) {
            int rc = idx_props_check(m.props, m.props_len, NULL);
            if (rc != 0) {
                set_err(w, rc == TERN_ETOOBIG ? TERN_ETOOBIG : TERN_EINVAL);
                return;
            }
            props = true;
        }
    }
    size_t at_len = cmd_start(w, delayed != NULL ? IDX_CMD_PRODUCE_DELAYED
                                 : props         ? IDX_CMD_PRODUCE_PROPS
                                                 : IDX_CMD_PRODUCE);
    if (delayed != NULL) {
        tern_wbuf_u64(w, *delayed);
    }
    put_qname(w, queue);
    tern_wbuf_u64(w, producer_id);
    tern_wbuf_u64(w, seq);
    tern_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n && w->err == 0; i++) {
        at(msgs, i, &m);
        tern_wbuf_u32(w, m.len);
        tern_wbuf_put(w, m.data, m.len);
        if (props) {
            tern_wbuf_u32(w, m.props_len);
            tern_wbuf_put(w, m.props, m.props_len);
        }
    }
    cmd_finish(w, at_len);
}

static void plain_at(const void *msgs, uint32_t i, struct idx_pmsg *m)
{
    const struct idx_msg *p = (const struct idx_msg *)msgs + i;
    m->data = p->data;
    m->len = p->len;
    m->props = NULL;
    m->props_len = 0;
}

static void props_at(const void *msgs, uint32_t i, struct idx_pmsg *m)
{
    *m = ((const struct idx_pmsg *)msgs)[i];
}

void idx_cmd_produce(struct tern_wbuf *w,
                     const char *queue,
                     uint64_t producer_id,
                     uint64_t seq,
                     const struct idx_msg *msgs,
                     uint32_t n)
{
    produce(w, queue, producer_id, seq, plain_at, msgs, n, NULL);
}

void idx_cmd_produce_props(struct tern_wbuf *w,
                           const char *queue,
                           uint64_t producer_id,
                           uint64_t seq,
                           const struct idx_pmsg *msgs,
                           uint32_t n)
{
    produce(w, queue, producer_id, seq, props_at, msgs, n, NULL);
}

void idx_cmd_produce_delayed(struct tern_wbuf *w,
                             const char *queue,
                             uint64_t due_ms,
                             uint64_t producer_id,
                             uint64_t seq,
                             const struct idx_pmsg *msgs,
                             uint32_t n)
{
    produce(w, queue, producer_id, seq, props_at, msgs, n, &due_ms);
}

size_t idx_cmd_timer_fire_begin(struct tern_wbuf *w)
{
    size_t at = cmd_start(w, IDX_CMD_TIMER_FIRE);
    tern_wbuf_u32(w, 0); /* n_keys, counted by idx_cmd_timer_fire_add */
    return w->err == 0 ? at : 0;
}

void idx_cmd_timer_fire_add(struct tern_wbuf *w,
                            size_t at,
                            const struct idx_timer_key *k,
                            const char *queue,
                            const struct idx_pmsg *m)
{
    if (w->err != 0) {
        return;
    }
    if (at == 0 || k == NULL || m == NULL || k->index == 0 ||
        (m->len > 0 && m->data == NULL)) {
        set_err(w, TERN_EINVAL);
        return;
    }
    uint32_t n = tern_get_u32(w->base + at + 4);
    if (n >= IDX_TIMER_FIRE_KEYS_MAX) {
        set_err(w, TERN_ETOOBIG);
        return;
    }
    if (m->props_len > 0) {
        int rc = idx_props_check(m->props, m->props_len, NULL);
        if (rc != 0) {
            set_err(w, rc == TERN_ETOOBIG ? TERN_ETOOBIG : TERN_EINVAL);
            return;
        }
    }
    tern_wbuf_u64(w, k->due_ms);
    tern_wbuf_u64(w, k->index);
    tern_wbuf_u32(w, k->msg_no);
    put_qname(w, queue);
    tern_wbuf_u32(w, m->len);
    tern_wbuf_put(w, m->data, m->len);
    tern_wbuf_u32(w, m->props_len);
    tern_wbuf_put(w, m->props, m->props_len);
    if (w->err == 0) {
        tern_put_u32(w->base + at + 4, n + 1);
    }
}

void idx_cmd_timer_fire_end(struct tern_wbuf *w, size_t at)
{
    if (w->err != 0) {
        return;
    }
    if (at == 0) {
        set_err(w, TERN_EINVAL);
        return;
    }
    uint32_t n = tern_get_u32(w->base + at + 4);
    if (n == 0) {
        set_err(w, TERN_EINVAL);
        return;
    }
    if (n > 1 && w->len - at - 4 > IDX_TIMER_FIRE_BYTES_MAX) {
        set_err(w, TERN_ETOOBIG);
        return;
    }
    cmd_finish(w, at);
}

void idx_cmd_group_commit(struct tern_wbuf *w,
                          const char *queue,
                          const char *group,
                          uint64_t next_offset)
{
    size_t at = cmd_start(w, IDX_CMD_GROUP_COMMIT);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, next_offset);
    cmd_finish(w, at);
}

void idx_cmd_claim(struct tern_wbuf *w,
                   const char *queue,
                   const char *group,
                   uint64_t consumer_id,
                   uint32_t action,
                   uint32_t lease_ms)
{
    if (consumer_id == 0 ||
        (action == IDX_CLAIM_ACQUIRE
             ? lease_ms == 0
             : action != IDX_CLAIM_RELEASE || lease_ms != 0)) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_CLAIM);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, consumer_id);
    tern_wbuf_u8(w, (uint8_t)action);
    tern_wbuf_u32(w, lease_ms);
    cmd_finish(w, at);
}

void idx_cmd_group_commit_as(struct tern_wbuf *w,
                             const char *queue,
                             const char *group,
                             uint64_t consumer_id,
                             uint64_t next_offset)
{
    if (consumer_id == 0) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_GROUP_COMMIT_AS);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, consumer_id);
    tern_wbuf_u64(w, next_offset);
    cmd_finish(w, at);
}

void idx_cmd_read_barrier(struct tern_wbuf *w)
{
    cmd_finish(w, cmd_start(w, IDX_CMD_READ_BARRIER));
}

void idx_cmd_term(struct tern_wbuf *w, uint64_t term)
{
    if (term == 0) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_TERM);
    tern_wbuf_u64(w, term);
    cmd_finish(w, at);
}

static void put_name_max(struct tern_wbuf *w, const char *name, size_t max)
{
    if (name != NULL && strnlen(name, max + 1) > max) {
        set_err(w, TERN_EBADNAME);
        return;
    }
    put_name(w, name);
}

static void put_pattern(struct tern_wbuf *w, const char *pattern)
{
    size_t n = pattern != NULL ? strnlen(pattern, TERN_NAME_MAX + 1) : 0;
    if (pattern == NULL || !idx_acl_pattern_valid(pattern, n)) {
        set_err(w, TERN_EBADNAME);
        return;
    }
    tern_wbuf_u8(w, (uint8_t)n);
    tern_wbuf_put(w, pattern, n);
}

void idx_cmd_user_set(struct tern_wbuf *w,
                      const char *name,
                      uint32_t flags,
                      const void *cred,
                      size_t cred_len)
{
    if ((flags & ~IDX_USER_FLAGS) != 0 || cred_len > IDX_CRED_MAX ||
        (cred_len > 0 && cred == NULL) ||
        (cred_len == 0 && (flags & IDX_USER_CERT) == 0)) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_USER_SET);
    put_name_max(w, name, IDX_USER_NAME_MAX);
    tern_wbuf_u32(w, flags);
    tern_wbuf_u8(w, (uint8_t)cred_len);
    tern_wbuf_put(w, cred, cred_len);
    cmd_finish(w, at);
}

void idx_cmd_user_delete(struct tern_wbuf *w, const char *name)
{
    size_t at = cmd_start(w, IDX_CMD_USER_DELETE);
    put_name_max(w, name, IDX_USER_NAME_MAX);
    cmd_finish(w, at);
}

void idx_cmd_acl_set(struct tern_wbuf *w,
                     const char *user,
                     const char *ns,
                     const char *pattern,
                     uint32_t perms)
{
    if (perms == 0 || (perms & ~IDX_PERM_ALL) != 0) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_ACL_SET);
    put_name_max(w, user, IDX_USER_NAME_MAX);
    put_name_max(w, ns, IDX_NS_NAME_MAX);
    put_pattern(w, pattern);
    tern_wbuf_u32(w, perms);
    cmd_finish(w, at);
}

void idx_cmd_acl_delete(struct tern_wbuf *w,
                        const char *user,
                        const char *ns,
                        const char *pattern)
{
    size_t at = cmd_start(w, IDX_CMD_ACL_DELETE);
    put_name_max(w, user, IDX_USER_NAME_MAX);
    put_name_max(w, ns, IDX_NS_NAME_MAX);
    put_pattern(w, pattern);
    cmd_finish(w, at);
}

void idx_cmd_namespace_set(struct tern_wbuf *w,
                           const char *name,
                           const struct idx_quota *q)
{
    if (q == NULL) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_NAMESPACE_SET);
    put_name_max(w, name, IDX_NS_NAME_MAX);
    tern_wbuf_u64(w, q->max_queues);
    tern_wbuf_u64(w, q->max_bytes);
    tern_wbuf_u64(w, q->produce_bytes_per_s);
    cmd_finish(w, at);
}

void idx_cmd_namespace_delete(struct tern_wbuf *w, const char *name)
{
    size_t at = cmd_start(w, IDX_CMD_NAMESPACE_DELETE);
    put_name_max(w, name, IDX_NS_NAME_MAX);
    cmd_finish(w, at);
}

void idx_cmd_producer_init(struct tern_wbuf *w, const char *owner)
{
    size_t at = cmd_start(w, IDX_CMD_PRODUCER_INIT);
    if (owner == NULL || owner[0] == '\0') {
        tern_wbuf_u8(w, 0);
    } else {
        put_name_max(w, owner, IDX_USER_NAME_MAX);
    }
    cmd_finish(w, at);
}

/* ---- Grant patterns ------------------------------------------------------ */

static bool name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
}

bool idx_acl_pattern_valid(const char *p, size_t len)
{
    if (p == NULL || len == 0 || len > TERN_NAME_MAX) {
        return false;
    }
    if (p[len - 1] != '*') {
        return tern_name_valid(p, len);
    }
    for (size_t i = 0; i + 1 < len; i++) {
        if (!name_char(p[i])) {
            return false;
        }
    }
    return true;
}

bool idx_acl_pattern_match(const char *pattern, const char *queue)
{
    size_t n = strlen(pattern);
    if (queue == NULL) {
        return n == 1 && pattern[0] == '*';
    }
    if (n > 0 && pattern[n - 1] == '*') {
        return strncmp(pattern, queue, n - 1) == 0;
    }
    return strcmp(pattern, queue) == 0;
}

/* ---- Properties blocks --------------------------------------------------- */

#define PROPS__VERSION  1
#define PROPS__HDR_SIZE 14

bool idx_tag_valid(const char *t, size_t len)
{
    if (t == NULL || len == 0 || len > IDX_TAG_MAX) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!name_char(t[i])) {
            return false;
        }
    }
    return true;
}

void idx_props_encode(struct tern_wbuf *w, const struct idx_props *p)
{
    size_t start = w->len;
    if (w->err != 0) {
        return;
    }
    if (p == NULL || (p->key_len > 0 && p->key == NULL) ||
        (p->tag_len > 0 && p->tag == NULL) ||
        (p->n_headers > 0 && p->headers == NULL)) {
        set_err(w, TERN_EINVAL);
        return;
    }
    if (p->key_len > IDX_KEY_MAX || p->tag_len > IDX_TAG_MAX ||
        p->n_headers > IDX_HEADERS_MAX) {
        set_err(w, TERN_ETOOBIG);
        return;
    }
    tern_wbuf_u8(w, PROPS__VERSION);
    tern_wbuf_u8(w, 0);
    tern_wbuf_u64(w, p->producer_ts_ms);
    tern_wbuf_u16(w, (uint16_t)p->key_len);
    tern_wbuf_u8(w, (uint8_t)p->tag_len);
    tern_wbuf_u8(w, (uint8_t)p->n_headers);
    tern_wbuf_put(w, p->key, p->key_len);
    tern_wbuf_put(w, p->tag, p->tag_len);
    for (uint32_t i = 0; i < p->n_headers && w->err == 0; i++) {
        const struct idx_header *h = &p->headers[i];
        if (h->name_len > IDX_HEADER_NAME_MAX ||
            h->value_len > IDX_HEADER_VALUE_MAX) {
            set_err(w, TERN_ETOOBIG);
            return;
        }
        if ((h->name_len > 0 && h->name == NULL) ||
            (h->value_len > 0 && h->value == NULL)) {
            set_err(w, TERN_EINVAL);
            return;
        }
        tern_wbuf_u8(w, (uint8_t)h->name_len);
        tern_wbuf_put(w, h->name, h->name_len);
        tern_wbuf_u16(w, (uint16_t)h->value_len);
        tern_wbuf_put(w, h->value, h->value_len);
    }
    if (w->err == 0) {
        int rc = idx_props_check(w->base + start, w->len - start, NULL);
        if (rc != 0) {
            set_err(w, rc);
        }
    }
}

static int props_fail(char *errmsg, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int props_fail(char *errmsg, int code, const char *fmt, ...)
{
    if (errmsg != NULL) {
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(errmsg, TERN_ERRMSG_SIZE, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Parse and check one block; headers are walked and checked, their start
 * is left in *headers. */
static int props_parse(const void *p,
                       size_t len,
                       struct idx_props *out,
                       const uint8_t **headers,
                       char *errmsg)
{
    struct tern_cursor c;
    uint32_t hbytes = 0;
    tern_cursor_init(&c, p, len);
    memset(out, 0, sizeof *out);
    if (p == NULL || len < PROPS__HDR_SIZE) {
        return props_fail(errmsg, TERN_EMALFORMED,
                          "properties block of %zu bytes is truncated", len);
    }
    if (tern_cursor_u8(&c) != PROPS__VERSION || tern_cursor_u8(&c) != 0) {
        return props_fail(errmsg, TERN_EMALFORMED,
                          "properties block: unknown version or flags");
    }
    out->producer_ts_ms = tern_cursor_u64(&c);
    out->key_len = tern_cursor_u16(&c);
    out->tag_len = tern_cursor_u8(&c);
    out->n_headers = tern_cursor_u8(&c);
    if (out->key_len > IDX_KEY_MAX) {
        return props_fail(errmsg, TERN_ETOOBIG,
                          "key of %u bytes is over the limit of %u bytes",
                          out->key_len, IDX_KEY_MAX);
    }
    if (out->tag_len > IDX_TAG_MAX) {
        return props_fail(errmsg, TERN_ETOOBIG,
                          "tag of %u bytes is over the limit of %u bytes",
                          out->tag_len, IDX_TAG_MAX);
    }
    if (out->n_headers > IDX_HEADERS_MAX) {
        return props_fail(errmsg, TERN_ETOOBIG,
                          "%u headers are over the limit of %u headers",
                          out->n_headers, IDX_HEADERS_MAX);
    }
    out->key = (const char *)tern_cursor_bytes(&c, out->key_len);
    out->tag = (const char *)tern_cursor_bytes(&c, out->tag_len);
    if (c.err != 0) {
        return props_fail(errmsg, TERN_EMALFORMED,
                          "properties block: key or tag truncated");
    }
    if (out->tag_len > 0 && !idx_tag_valid(out->tag, out->tag_len)) {
        return props_fail(errmsg, TERN_EINVAL,
                          "tag holds a byte outside [A-Za-z0-9._-]");
    }
    *headers = c.p;
    for (uint32_t i = 0; i < out->n_headers; i++) {
        uint8_t nl = tern_cursor_u8(&c);
        (void)tern_cursor_bytes(&c, nl);
        uint16_t vl = tern_cursor_u16(&c);
        (void)tern_cursor_bytes(&c, vl);
        if (c.err != 0) {
            return props_fail(errmsg, TERN_EMALFORMED,
                              "properties block: header %u truncated", i);
        }
        if (nl == 0) {
            return props_fail(errmsg, TERN_EINVAL, "header %u has no name", i);
        }
        if (nl > IDX_HEADER_NAME_MAX) {
            return props_fail(
                errmsg, TERN_ETOOBIG,
                "header name of %u bytes is over the limit of %u bytes", nl,
                IDX_HEADER_NAME_MAX);
        }
        if (vl > IDX_HEADER_VALUE_MAX) {
            return props_fail(
                errmsg, TERN_ETOOBIG,
                "header value of %u bytes is over the limit of %u bytes", vl,
                IDX_HEADER_VALUE_MAX);
        }
        hbytes += (uint32_t)nl + vl;
    }
    if (hbytes > IDX_HEADERS_BYTES_MAX) {
        return props_fail(errmsg, TERN_ETOOBIG,
                          "headers of %u bytes are over the limit of %u bytes",
                          hbytes, IDX_HEADERS_BYTES_MAX);
    }
    if (tern_cursor_left(&c) != 0) {
        return props_fail(errmsg, TERN_EMALFORMED,
                          "properties block: %zu bytes after the last header",
                          tern_cursor_left(&c));
    }
    return 0;
}

int idx_props_check(const void *p, size_t len, char *errmsg)
{
    struct idx_props out;
    const uint8_t *h = p;
    return props_parse(p, len, &out, &h, errmsg);
}

int idx_props_decode(const void *p, size_t len, struct idx_props *out)
{
    const uint8_t *h = p;
    int rc = props_parse(p, len, out, &h, NULL);
    out->headers = NULL; /* read them with idx_props_header */
    return rc;
}

int idx_props_header(const void *p,
                     size_t len,
                     uint32_t i,
                     struct idx_header *h)
{
    struct idx_props pr;
    const uint8_t *hp = p;
    struct tern_cursor c;
    if (props_parse(p, len, &pr, &hp, NULL) != 0 || i >= pr.n_headers) {
        return TERN_EINVAL;
    }
    tern_cursor_init(&c, hp, len - (size_t)(hp - (const uint8_t *)p));
    for (uint32_t k = 0; k <= i; k++) {
        h->name_len = tern_cursor_u8(&c);
        h->name = (const char *)tern_cursor_bytes(&c, h->name_len);
        h->value_len = tern_cursor_u16(&c);
        h->value = tern_cursor_bytes(&c, h->value_len);
    }
    return c.err == 0 ? 0 : TERN_EINVAL;
}

/* ---- Shared groups --------------------------------------------------------
 */

void idx_shared_settings_default(struct idx_shared_settings *s)
{
    memset(s, 0, sizeof *s);
    s->ack_timeout_ms = IDX_SHARED_ACK_TIMEOUT_MS;
    s->max_deliveries = IDX_SHARED_MAX_DELIVERIES;
    s->window = IDX_SHARED_WINDOW;
}

/* Whether the masked fields of s are in range and the others zero. */
static bool shared_settings_ok(uint32_t mask,
                               const struct idx_shared_settings *s,
                               size_t dlq_len)
{
    if ((mask & ~IDX_SHARED_SET_ALL) != 0) {
        return false;
    }
    if ((mask & IDX_SHARED_SET_ACK_TIMEOUT) != 0 ? s->ack_timeout_ms == 0
                                                 : s->ack_timeout_ms != 0) {
        return false;
    }
    if ((mask & IDX_SHARED_SET_MAX_DELIVERIES) != 0 ? s->max_deliveries == 0
                                                    : s->max_deliveries != 0) {
        return false;
    }
    if ((mask & IDX_SHARED_SET_WINDOW) != 0
            ? (s->window == 0 || s->window > IDX_SHARED_WINDOW_MAX)
            : s->window != 0) {
        return false;
    }
    if ((mask & IDX_SHARED_SET_DLQ) == 0 && dlq_len != 0) {
        return false;
    }
    return dlq_len == 0 || tern_name_valid(s->dlq, dlq_len);
}

void idx_cmd_shared_config(struct tern_wbuf *w,
                           const char *queue,
                           const char *group,
                           uint32_t mask,
                           const struct idx_shared_settings *s)
{
    struct idx_shared_settings v;
    memset(&v, 0, sizeof v);
    if (mask != 0 && s == NULL) {
        set_err(w, TERN_EINVAL);
        return;
    }
    if ((mask & IDX_SHARED_SET_ACK_TIMEOUT) != 0) {
        v.ack_timeout_ms = s->ack_timeout_ms;
    }
    if ((mask & IDX_SHARED_SET_MAX_DELIVERIES) != 0) {
        v.max_deliveries = s->max_deliveries;
    }
    if ((mask & IDX_SHARED_SET_WINDOW) != 0) {
        v.window = s->window;
    }
    size_t dn = 0;
    if ((mask & IDX_SHARED_SET_DLQ) != 0) {
        dn = strnlen(s->dlq, sizeof s->dlq);
        if (dn > TERN_NAME_MAX) {
            set_err(w, TERN_EBADNAME);
            return;
        }
        memcpy(v.dlq, s->dlq, dn);
    }
    if (!shared_settings_ok(mask, &v, dn)) {
        set_err(w, dn > 0 && !tern_name_valid(v.dlq, dn) ? TERN_EBADNAME
                                                         : TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_SHARED_CONFIG);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u32(w, mask);
    tern_wbuf_u64(w, v.ack_timeout_ms);
    tern_wbuf_u32(w, v.max_deliveries);
    tern_wbuf_u32(w, v.window);
    tern_wbuf_u8(w, (uint8_t)dn);
    tern_wbuf_put(w, v.dlq, dn);
    cmd_finish(w, at);
}

void idx_cmd_deliver(struct tern_wbuf *w,
                     const char *queue,
                     const char *group,
                     uint64_t consumer_id,
                     const struct idx_deliver_item *items,
                     uint32_t n)
{
    if (items == NULL || n == 0 || n > IDX_SHARED_LIST_MAX) {
        set_err(w, TERN_EINVAL);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        if (items[i].offset <= items[i - 1].offset) {
            set_err(w, TERN_EINVAL);
            return;
        }
    }
    size_t at = cmd_start(w, IDX_CMD_DELIVER);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, consumer_id);
    tern_wbuf_u16(w, (uint16_t)n);
    for (uint32_t i = 0; i < n; i++) {
        tern_wbuf_u64(w, items[i].offset);
        tern_wbuf_u32(w, items[i].count);
    }
    cmd_finish(w, at);
}

static bool settle_item_ok(uint32_t count, uint32_t action, uint64_t delay)
{
    if (count == 0 || action > IDX_SETTLE_RELEASE) {
        return false;
    }
    return (action != IDX_SETTLE_ACK && action != IDX_SETTLE_RELEASE) ||
           delay == 0;
}

void idx_cmd_settle(struct tern_wbuf *w,
                    const char *queue,
                    const char *group,
                    const struct idx_settle_item *items,
                    uint32_t n)
{
    if (items == NULL || n == 0 || n > IDX_SHARED_LIST_MAX) {
        set_err(w, TERN_EINVAL);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if ((i > 0 && items[i].offset <= items[i - 1].offset) ||
            !settle_item_ok(items[i].count, items[i].action,
                            items[i].delay_ms)) {
            set_err(w, TERN_EINVAL);
            return;
        }
    }
    size_t at = cmd_start(w, IDX_CMD_SETTLE);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u16(w, (uint16_t)n);
    for (uint32_t i = 0; i < n; i++) {
        tern_wbuf_u64(w, items[i].offset);
        tern_wbuf_u32(w, items[i].count);
        tern_wbuf_u8(w, (uint8_t)items[i].action);
        tern_wbuf_u64(w, items[i].delay_ms);
    }
    cmd_finish(w, at);
}

#define DLQ__HEADERS 4

static bool reason_valid(const char *r, size_t len)
{
    return idx_tag_valid(r, len) && len <= IDX_SHARED_REASON_MAX;
}

static void put_header(struct tern_wbuf *w,
                       const char *name,
                       const void *value,
                       size_t value_len)
{
    tern_wbuf_u8(w, (uint8_t)strlen(name));
    tern_wbuf_put(w, name, strlen(name));
    tern_wbuf_u16(w, (uint16_t)value_len);
    tern_wbuf_put(w, value, value_len);
}

static bool is_dlq_header(const struct idx_header *h)
{
    return h->name_len >= 9 && memcmp(h->name, "tern-dlq-", 9) == 0;
}

void idx__dlq_props(struct tern_wbuf *w,
                    const uint8_t *orig,
                    uint32_t orig_len,
                    const char *queue,
                    size_t queue_len,
                    uint64_t offset,
                    uint32_t count,
                    const char *reason,
                    size_t reason_len)
{
    struct idx_props p;
    char off_s[24], cnt_s[16];
    memset(&p, 0, sizeof p);
    if (orig_len > 0 && idx_props_decode(orig, orig_len, &p) != 0) {
        set_err(w, TERN_EINVAL);
        return;
    }
    int off_n =
        snprintf(off_s, sizeof off_s, "%llu", (unsigned long long)offset);
    int cnt_n = snprintf(cnt_s, sizeof cnt_s, "%u", count);
    uint32_t dlq_bytes = (uint32_t)(14 + queue_len + 15 + (size_t)off_n + 19 +
                                    (size_t)cnt_n + 15 + reason_len);
    uint32_t kept = 0, bytes = 0;
    size_t start = w->len;
    tern_wbuf_u8(w, PROPS__VERSION);
    tern_wbuf_u8(w, 0);
    tern_wbuf_u64(w, p.producer_ts_ms);
    tern_wbuf_u16(w, (uint16_t)p.key_len);
    tern_wbuf_u8(w, (uint8_t)p.tag_len);
    size_t n_at = w->len;
    tern_wbuf_u8(w, 0); /* n_headers, set below */
    tern_wbuf_put(w, p.key, p.key_len);
    tern_wbuf_put(w, p.tag, p.tag_len);
    for (uint32_t i = 0; i < p.n_headers; i++) {
        struct idx_header h;
        if (idx_props_header(orig, orig_len, i, &h) != 0) {
            set_err(w, TERN_EINVAL);
            return;
        }
        if (is_dlq_header(&h)) {
            continue;
        }
        uint32_t hb = (uint32_t)h.name_len + h.value_len;
        if (kept + 1 + DLQ__HEADERS > IDX_HEADERS_MAX ||
            bytes + hb + dlq_bytes > IDX_HEADERS_BYTES_MAX) {
            break; /* this one and the rest do not fit */
        }
        tern_wbuf_u8(w, (uint8_t)h.name_len);
        tern_wbuf_put(w, h.name, h.name_len);
        tern_wbuf_u16(w, (uint16_t)h.value_len);
        tern_wbuf_put(w, h.value, h.value_len);
        kept++;
        bytes += hb;
    }
    put_header(w, "tern-dlq-queue", queue, queue_len);
    put_header(w, "tern-dlq-offset", off_s, (size_t)off_n);
    put_header(w, "tern-dlq-deliveries", cnt_s, (size_t)cnt_n);
    put_header(w, "tern-dlq-reason", reason, reason_len);
    if (w->err == 0) {
        w->base[n_at] = (uint8_t)(kept + DLQ__HEADERS);
        if (idx_props_check(w->base + start, w->len - start, NULL) != 0) {
            set_err(w, TERN_EINVAL);
        }
    }
}

void idx_cmd_dead_letter(struct tern_wbuf *w,
                         const char *queue,
                         const char *group,
                         uint64_t offset,
                         uint32_t count,
                         const char *reason,
                         const struct idx_pmsg *m)
{
    size_t rn = reason != NULL ? strnlen(reason, IDX_SHARED_REASON_MAX + 1) : 0;
    size_t qn = queue != NULL ? strnlen(queue, TERN_NAME_MAX + 1) : 0;
    if (m == NULL || count == 0 || !reason_valid(reason, rn) ||
        (m->len > 0 && m->data == NULL) ||
        (m->props_len > 0 && idx_props_check(m->props, m->props_len, NULL))) {
        set_err(w, TERN_EINVAL);
        return;
    }
    size_t at = cmd_start(w, IDX_CMD_DEAD_LETTER);
    put_qname(w, queue);
    put_name(w, group);
    tern_wbuf_u64(w, offset);
    tern_wbuf_u32(w, count);
    tern_wbuf_u8(w, (uint8_t)rn);
    tern_wbuf_put(w, reason, rn);
    tern_wbuf_u32(w, m->len);
    tern_wbuf_put(w, m->data, m->len);
    size_t plen_at = w->len;
    tern_wbuf_u32(w, 0);
    size_t pstart = w->len;
    if (w->err == 0) {
        idx__dlq_props(w, m->props, m->props_len, queue, qn, offset, count,
                       reason, rn);
    }
    if (w->err == 0) {
        tern_put_u32(w->base + plen_at, (uint32_t)(w->len - pstart));
    }
    cmd_finish(w, at);
}

void idx__cmd_deliver_item(const struct idx__cmd *cmd,
                           uint32_t i,
                           struct idx_deliver_item *out)
{
    const uint8_t *p = cmd->items + (size_t)i * 12;
    out->offset = tern_get_u64(p);
    out->count = tern_get_u32(p + 8);
}

void idx__cmd_settle_item(const struct idx__cmd *cmd,
                          uint32_t i,
                          struct idx_settle_item *out)
{
    const uint8_t *p = cmd->items + (size_t)i * 21;
    out->offset = tern_get_u64(p);
    out->count = tern_get_u32(p + 8);
    out->action = p[12];
    out->delay_ms = tern_get_u64(p + 13);
}

static uint32_t entry_checksum(const uint8_t *base, size_t len)
{
    if ((tern_get_u16(base + 2) & IDX__CMD_FLAG_XXH3) != 0) {
        return tern_checksum32_xxh3(base + IDX__CMD_HDR_SIZE,
                                    len - IDX__CMD_HDR_SIZE,
                                    tern_checksum32(base, 20));
    }
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, base, 20);
    tern_checksum32_update(&st, base + IDX__CMD_HDR_SIZE,
                           len - IDX__CMD_HDR_SIZE);
    return tern_checksum32_end(&st);
}

int idx_cmd_end(struct tern_wbuf *w)
{
    if (w->err != 0) {
        return w->err;
    }
    if (w->len < IDX__CMD_HDR_SIZE) {
        return TERN_EINVAL;
    }
    if (tern_get_u32(w->base + 4) == 0) {
        return TERN_EINVAL; /* an entry carries at least one command */
    }
    if (w->len > UINT32_MAX || w->len > IDX__RECORD_MAX_PAYLOAD) {
        return TERN_ETOOBIG;
    }
    tern_put_u32(w->base + 16, (uint32_t)w->len);
    tern_put_u32(w->base + 20, entry_checksum(w->base, w->len));
    return 0;
}

/* ---- Decoder ------------------------------------------------------------- */

uint16_t idx__entry_record_version(const void *entry, size_t len)
{
    const uint8_t *b = entry;
    return len >= IDX__CMD_HDR_SIZE && tern_get_u16(b) == IDX__CMD_VERSION &&
                   (tern_get_u16(b + 2) & IDX__CMD_FLAG_XXH3) != 0
               ? IDX__REC_VERSION_XXH3
               : IDX__REC_VERSION_XXH32;
}

int idx__entry_open(struct idx__entry *it, const void *entry, size_t len)
{
    const uint8_t *b = entry;
    memset(it, 0, sizeof *it);
    if (entry == NULL || len < IDX__CMD_HDR_SIZE) {
        return TERN_EMALFORMED;
    }
    if (tern_get_u16(b) != IDX__CMD_VERSION) {
        return TERN_EVERSION;
    }
    if ((tern_get_u16(b + 2) & ~IDX__CMD_FLAG_XXH3) != 0 ||
        tern_get_u32(b + 16) != len) {
        return TERN_EMALFORMED;
    }
    it->n = tern_get_u32(b + 4);
    if (it->n == 0 || it->n > IDX__CMD_MAX_COMMANDS) {
        return TERN_EMALFORMED;
    }
    if (!IDX__CHECKSUM_OK(tern_get_u32(b + 20), entry_checksum(b, len))) {
        return TERN_EMALFORMED;
    }
    it->base = b;
    it->len = len;
    it->timestamp_ms = tern_get_u64(b + 8);
    tern_cursor_init(&it->c, b + IDX__CMD_HDR_SIZE, len - IDX__CMD_HDR_SIZE);
    return 0;
}

static const char *get_valid(struct tern_cursor *c,
                             uint8_t *n,
                             int (*valid)(const char *, size_t))
{
    *n = tern_cursor_u8(c);
    const char *p = (const char *)tern_cursor_bytes(c, *n);
    if (!valid(p, *n)) {
        c->err = TERN_EMALFORMED;
        return NULL;
    }
    return p;
}

static const char *get_name(struct tern_cursor *c, uint8_t *n)
{
    return get_valid(c, n, tern_name_valid);
}

static const char *get_qname(struct tern_cursor *c, uint8_t *n)
{
    return get_valid(c, n, tern_qname_valid);
}

static const char *get_name_max(struct tern_cursor *c, uint8_t *n, size_t max)
{
    const char *p = get_name(c, n);
    if (p != NULL && *n > max) {
        c->err = TERN_EMALFORMED;
        return NULL;
    }
    return p;
}

/* The 25-byte settings of QUEUE_CREATE's tail and QUEUE_UPDATE. 0 or
 * TERN_EMALFORMED (short, or an unknown overflow). */
static int get_settings(struct tern_cursor *c, struct idx_queue_settings *s)
{
    s->max_age_ms = tern_cursor_u64(c);
    s->max_bytes = tern_cursor_u64(c);
    s->max_messages = tern_cursor_u64(c);
    s->overflow = tern_cursor_u8(c);
    return c->err != 0 || s->overflow > IDX_OVERFLOW_REJECT ? TERN_EMALFORMED
                                                            : 0;
}

/* The list of a DELIVER (item_size 12) or SETTLE (21): u16 n, n items
 * with strictly increasing offsets. */
static int get_items(struct tern_cursor *c,
                     struct idx__cmd *cmd,
                     size_t item_size)
{
    cmd->n_items = tern_cursor_u16(c);
    if (c->err != 0 || cmd->n_items == 0 ||
        cmd->n_items > IDX_SHARED_LIST_MAX ||
        tern_cursor_left(c) / item_size < cmd->n_items) {
        return TERN_EMALFORMED;
    }
    cmd->items = tern_cursor_bytes(c, (size_t)cmd->n_items * item_size);
    for (uint32_t i = 0; i < cmd->n_items; i++) {
        const uint8_t *p = cmd->items + (size_t)i * item_size;
        if (i > 0 && tern_get_u64(p) <= tern_get_u64(p - item_size)) {
            return TERN_EMALFORMED;
        }
        if (item_size == 21 &&
            !settle_item_ok(tern_get_u32(p + 8), p[12], tern_get_u64(p + 13))) {
            return TERN_EMALFORMED;
        }
    }
    return 0;
}

/* DEAD_LETTER's message and its rebuilt properties block. */
static int get_dead_letter(struct tern_cursor *c, struct idx__cmd *cmd)
{
    struct tern_wbuf w;
    cmd->dl.offset = tern_cursor_u64(c);
    cmd->dl.count = tern_cursor_u32(c);
    cmd->reason_len = tern_cursor_u8(c);
    cmd->reason = (const char *)tern_cursor_bytes(c, cmd->reason_len);
    if (c->err != 0 || cmd->dl.count == 0 ||
        !reason_valid(cmd->reason, cmd->reason_len)) {
        return TERN_EMALFORMED;
    }
    cmd->msgs = c->p;
    cmd->n_msgs = 1;
    uint32_t len = tern_cursor_u32(c);
    (void)tern_cursor_bytes(c, len);
    uint32_t plen = tern_cursor_u32(c);
    const uint8_t *props = tern_cursor_bytes(c, plen);
    if (c->err != 0 || plen == 0 || plen > IDX_PROPS_MAX ||
        idx_props_check(props, plen, NULL) != 0) {
        return TERN_EMALFORMED;
    }
    cmd->msgs_len = (size_t)(c->p - cmd->msgs);
    tern_wbuf_init(&w);
    idx__dlq_props(&w, props, plen, cmd->queue, cmd->queue_len, cmd->dl.offset,
                   cmd->dl.count, cmd->reason, cmd->reason_len);
    int rc = w.err != 0 || w.len != plen || memcmp(w.base, props, plen) != 0
                 ? TERN_EMALFORMED
                 : 0;
    tern_wbuf_free(&w);
    return rc;
}

static int decode_shared(struct tern_cursor *c, struct idx__cmd *cmd)
{
    int rc = 0;
    cmd->queue = get_qname(c, &cmd->queue_len);
    cmd->group = get_name(c, &cmd->group_len);
    if (c->err != 0) {
        return TERN_EMALFORMED;
    }
    switch (cmd->type) {
    case IDX_CMD_SHARED_CONFIG: {
        cmd->mask = tern_cursor_u32(c);
        cmd->shared.ack_timeout_ms = tern_cursor_u64(c);
        cmd->shared.max_deliveries = tern_cursor_u32(c);
        cmd->shared.window = tern_cursor_u32(c);
        uint8_t dn = tern_cursor_u8(c);
        const uint8_t *d = tern_cursor_bytes(c, dn);
        if (c->err != 0) {
            return TERN_EMALFORMED;
        }
        memcpy(cmd->shared.dlq, d, dn);
        cmd->shared.dlq[dn] = '\0';
        if (!shared_settings_ok(cmd->mask, &cmd->shared, dn)) {
            return TERN_EMALFORMED;
        }
        break;
    }
    case IDX_CMD_DELIVER:
        cmd->consumer_id = tern_cursor_u64(c);
        rc = get_items(c, cmd, 12);
        break;
    case IDX_CMD_SETTLE:
        rc = get_items(c, cmd, 21);
        break;
    default:
        rc = get_dead_letter(c, cmd);
        break;
    }
    if (rc != 0 || c->err != 0 || tern_cursor_left(c) != 0) {
        return TERN_EMALFORMED;
    }
    return 0;
}

static int decode_body(struct tern_cursor *c, struct idx__cmd *cmd)
{
    switch (cmd->type) {
    case IDX_CMD_QUEUE_CREATE:
        cmd->queue = get_qname(c, &cmd->queue_len);
        if (c->err == 0 && tern_cursor_left(c) > 0) {
            cmd->has_settings = true;
            if (get_settings(c, &cmd->settings) != 0) {
                return TERN_EMALFORMED;
            }
        }
        break;
    case IDX_CMD_QUEUE_DELETE:
        cmd->queue = get_qname(c, &cmd->queue_len);
        break;
    case IDX_CMD_QUEUE_UPDATE:
        cmd->queue = get_qname(c, &cmd->queue_len);
        cmd->mask = tern_cursor_u32(c);
        if (c->err != 0 || cmd->mask == 0 || (cmd->mask & ~IDX_SET_ALL) != 0 ||
            get_settings(c, &cmd->settings) != 0) {
            return TERN_EMALFORMED;
        }
        if (((cmd->mask & IDX_SET_MAX_AGE) == 0 &&
             cmd->settings.max_age_ms != 0) ||
            ((cmd->mask & IDX_SET_MAX_BYTES) == 0 &&
             cmd->settings.max_bytes != 0) ||
            ((cmd->mask & IDX_SET_MAX_MESSAGES) == 0 &&
             cmd->settings.max_messages != 0) ||
            ((cmd->mask & IDX_SET_OVERFLOW) == 0 &&
             cmd->settings.overflow != 0)) {
            return TERN_EMALFORMED;
        }
        break;
    case IDX_CMD_TRIM:
        cmd->queue = get_qname(c, &cmd->queue_len);
        cmd->trim.queue_id = tern_cursor_u64(c);
        cmd->trim.from = tern_cursor_u64(c);
        cmd->trim.to = tern_cursor_u64(c);
        cmd->trim.bytes = tern_cursor_u64(c);
        if (c->err == 0 && cmd->trim.to <= cmd->trim.from) {
            return TERN_EMALFORMED;
        }
        break;
    case IDX_CMD_PRODUCE_DELAYED:
        cmd->due_ms = tern_cursor_u64(c);
        __attribute__((fallthrough)); /* a PRODUCE_PROPS body follows */
    case IDX_CMD_PRODUCE:
    case IDX_CMD_PRODUCE_PROPS: {
        bool delayed = cmd->type == IDX_CMD_PRODUCE_DELAYED;
        bool props = cmd->type != IDX_CMD_PRODUCE;
        cmd->queue = get_qname(c, &cmd->queue_len);
        cmd->producer_id = tern_cursor_u64(c);
        cmd->seq = tern_cursor_u64(c);
        cmd->n_msgs = tern_cursor_u32(c);
        if (c->err != 0) {
            break;
        }
        if (cmd->n_msgs == 0 || (cmd->producer_id != 0 && cmd->seq == 0) ||
            tern_cursor_left(c) / (props ? 8 : 4) < cmd->n_msgs) {
            return TERN_EMALFORMED;
        }
        cmd->msgs = c->p;
        bool any_props = false;
        for (uint32_t i = 0; i < cmd->n_msgs && c->err == 0; i++) {
            uint32_t len = tern_cursor_u32(c);
            (void)tern_cursor_bytes(c, len);
            if (props) {
                uint32_t plen = tern_cursor_u32(c);
                const uint8_t *pb = tern_cursor_bytes(c, plen);
                if (c->err == 0 && plen > 0 &&
                    idx_props_check(pb, plen, NULL) != 0) {
                    return TERN_EMALFORMED;
                }
                any_props = any_props || plen > 0;
            }
        }
        if (props && !delayed && c->err == 0 && !any_props) {
            return TERN_EMALFORMED; /* one encoding: that is a PRODUCE */
        }
        cmd->msgs_len = (size_t)(c->p - cmd->msgs);
        break;
    }
    case IDX_CMD_TIMER_FIRE: {
        size_t body = tern_cursor_left(c);
        struct idx__fire_iter fi;
        struct idx__fire_key k;
        cmd->n_msgs = tern_cursor_u32(c);
        if (c->err != 0 || cmd->n_msgs == 0 ||
            cmd->n_msgs > IDX_TIMER_FIRE_KEYS_MAX ||
            (cmd->n_msgs > 1 && body > IDX_TIMER_FIRE_BYTES_MAX)) {
            return TERN_EMALFORMED;
        }
        cmd->msgs = c->p;
        cmd->msgs_len = tern_cursor_left(c);
        fi.c = *c;
        for (uint32_t i = 0; i < cmd->n_msgs; i++) {
            if (idx__fire_iter_next(&fi, &k) != 1 || k.key.index == 0) {
                return TERN_EMALFORMED;
            }
            uint32_t len = tern_get_u32(k.msg);
            uint32_t plen = tern_get_u32(k.msg + 4 + len);
            if (plen > 0 && idx_props_check(k.msg + 8 + len, plen, NULL) != 0) {
                return TERN_EMALFORMED;
            }
        }
        *c = fi.c;
        cmd->msgs_len = (size_t)(c->p - cmd->msgs);
        break;
    }
    case IDX_CMD_GROUP_COMMIT:
        cmd->queue = get_qname(c, &cmd->queue_len);
        cmd->group = get_name(c, &cmd->group_len);
        cmd->next_offset = tern_cursor_u64(c);
        break;
    case IDX_CMD_CLAIM:
        cmd->queue = get_qname(c, &cmd->queue_len);
        cmd->group = get_name(c, &cmd->group_len);
        cmd->consumer_id = tern_cursor_u64(c);
        cmd->flags = tern_cursor_u8(c);
        cmd->lease_ms = tern_cursor_u32(c);
        if (c->err == 0 &&
            (cmd->consumer_id == 0 ||
             (cmd->flags == IDX_CLAIM_ACQUIRE
                  ? cmd->lease_ms == 0
                  : cmd->flags != IDX_CLAIM_RELEASE || cmd->lease_ms != 0))) {
            return TERN_EMALFORMED;
        }
        break;
    case IDX_CMD_GROUP_COMMIT_AS:
        cmd->queue = get_qname(c, &cmd->queue_len);
        cmd->group = get_name(c, &cmd->group_len);
        cmd->consumer_id = tern_cursor_u64(c);
        cmd->next_offset = tern_cursor_u64(c);
        if (c->err == 0 && cmd->consumer_id == 0) {
            return TERN_EMALFORMED;
        }
        break;
    case IDX_CMD_READ_BARRIER:
        break;
    case IDX_CMD_TERM:
        cmd->term = tern_cursor_u64(c);
        if (c->err == 0 && cmd->term == 0) {
            return TERN_EMALFORMED;
        }
        break;
    case IDX_CMD_USER_SET:
        cmd->queue = get_name_max(c, &cmd->queue_len, IDX_USER_NAME_MAX);
        cmd->flags = tern_cursor_u32(c);
        cmd->cred_len = tern_cursor_u8(c);
        cmd->cred = tern_cursor_bytes(c, cmd->cred_len);
        if (c->err == 0 &&
            ((cmd->flags & ~IDX_USER_FLAGS) != 0 ||
             (cmd->cred_len == 0 && (cmd->flags & IDX_USER_CERT) == 0))) {
            return TERN_EMALFORMED;
        }
        break;
    case IDX_CMD_USER_DELETE:
        cmd->queue = get_name_max(c, &cmd->queue_len, IDX_USER_NAME_MAX);
        break;
    case IDX_CMD_NAMESPACE_DELETE:
        cmd->queue = get_name_max(c, &cmd->queue_len, IDX_NS_NAME_MAX);
        break;
    case IDX_CMD_ACL_SET:
    case IDX_CMD_ACL_DELETE:
        cmd->queue = get_name_max(c, &cmd->queue_len, IDX_USER_NAME_MAX);
        cmd->ns = get_name_max(c, &cmd->ns_len, IDX_NS_NAME_MAX);
        cmd->pattern_len = tern_cursor_u8(c);
        cmd->pattern = (const char *)tern_cursor_bytes(c, cmd->pattern_len);
        if (c->err == 0 &&
            !idx_acl_pattern_valid(cmd->pattern, cmd->pattern_len)) {
            return TERN_EMALFORMED;
        }
        if (cmd->type == IDX_CMD_ACL_SET) {
            cmd->flags = tern_cursor_u32(c);
            if (c->err == 0 &&
                (cmd->flags == 0 || (cmd->flags & ~IDX_PERM_ALL) != 0)) {
                return TERN_EMALFORMED;
            }
        }
        break;
    case IDX_CMD_NAMESPACE_SET:
        cmd->queue = get_name_max(c, &cmd->queue_len, IDX_NS_NAME_MAX);
        cmd->quota.max_queues = tern_cursor_u64(c);
        cmd->quota.max_bytes = tern_cursor_u64(c);
        cmd->quota.produce_bytes_per_s = tern_cursor_u64(c);
        break;
    case IDX_CMD_PRODUCER_INIT:
        if (tern_cursor_left(c) >= 1 && c->p[0] == 0) {
            (void)tern_cursor_u8(c); /* anonymous owner */
            cmd->queue = "";
        } else {
            cmd->queue = get_name_max(c, &cmd->queue_len, IDX_USER_NAME_MAX);
        }
        break;
    case IDX_CMD_SHARED_CONFIG:
    case IDX_CMD_DELIVER:
    case IDX_CMD_SETTLE:
    case IDX_CMD_DEAD_LETTER:
        return decode_shared(c, cmd);
    default:
        return TERN_EMALFORMED;
    }
    if (c->err != 0 || tern_cursor_left(c) != 0) {
        return TERN_EMALFORMED;
    }
    return 0;
}

/* One command's framing at c (u8 type, u32 body length, body): the body
 * with *type and *body_len, or NULL when c holds less (c->err set). */
static const uint8_t *cmd_frame(struct tern_cursor *c,
                                uint8_t *type,
                                uint32_t *body_len)
{
    *type = tern_cursor_u8(c);
    *body_len = tern_cursor_u32(c);
    const uint8_t *p = tern_cursor_bytes(c, *body_len);
    return c->err != 0 ? NULL : p;
}

int idx__entry_next(struct idx__entry *it, struct idx__cmd *cmd)
{
    struct tern_cursor body;
    memset(cmd, 0, sizeof *cmd);
    if (it->c.err != 0) {
        return TERN_EMALFORMED;
    }
    if (it->i == it->n) {
        return tern_cursor_left(&it->c) == 0 ? 0 : TERN_EMALFORMED;
    }
    uint32_t body_len;
    const uint8_t *p = cmd_frame(&it->c, &cmd->type, &body_len);
    if (p == NULL) {
        return TERN_EMALFORMED;
    }
    tern_cursor_init(&body, p, body_len);
    int rc = decode_body(&body, cmd);
    if (rc != 0) {
        it->c.err = TERN_EMALFORMED;
        return rc;
    }
    it->i++;
    return 1;
}

void idx__msg_iter_init(struct idx__msg_iter *mi, const struct idx__cmd *cmd)
{
    tern_cursor_init(&mi->c, cmd->msgs, cmd->msgs_len);
    mi->with_props = cmd->type == IDX_CMD_PRODUCE_PROPS ||
                     cmd->type == IDX_CMD_DEAD_LETTER ||
                     cmd->type == IDX_CMD_PRODUCE_DELAYED;
    mi->props = NULL;
    mi->props_len = 0;
}

void idx__fire_iter_init(struct idx__fire_iter *fi, const struct idx__cmd *cmd)
{
    tern_cursor_init(&fi->c, cmd->msgs, cmd->msgs_len);
}

int idx__fire_iter_next(struct idx__fire_iter *fi, struct idx__fire_key *k)
{
    struct tern_cursor *c = &fi->c;
    if (c->err != 0 || tern_cursor_left(c) == 0) {
        return 0;
    }
    k->key.due_ms = tern_cursor_u64(c);
    k->key.index = tern_cursor_u64(c);
    k->key.msg_no = tern_cursor_u32(c);
    k->queue = get_qname(c, &k->queue_len);
    k->msg = c->p;
    uint32_t len = tern_cursor_u32(c);
    (void)tern_cursor_bytes(c, len);
    uint32_t plen = tern_cursor_u32(c);
    (void)tern_cursor_bytes(c, plen);
    if (c->err != 0) {
        return 0;
    }
    k->msg_len = (size_t)(c->p - k->msg);
    return 1;
}

void idx__msg_iter_init_fire(struct idx__msg_iter *mi,
                             const struct idx__fire_key *k)
{
    tern_cursor_init(&mi->c, k->msg, k->msg_len);
    mi->with_props = true;
    mi->props = NULL;
    mi->props_len = 0;
}

int idx__msg_iter_next(struct idx__msg_iter *mi,
                       const uint8_t **data,
                       uint32_t *len)
{
    if (tern_cursor_left(&mi->c) == 0) {
        return 0;
    }
    *len = tern_cursor_u32(&mi->c);
    *data = tern_cursor_bytes(&mi->c, *len);
    if (mi->with_props) {
        mi->props_len = tern_cursor_u32(&mi->c);
        mi->props = tern_cursor_bytes(&mi->c, mi->props_len);
    }
    return mi->c.err == 0 ? 1 : 0;
}

size_t idx_cmd_entry_len(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint32_t total;
    if (len < 24 || len % 8 != 0) {
        return len;
    }
    total = tern_get_u32(p + 16);
    if (total < 24 || total > len || len - total >= 8) {
        return len;
    }
    for (size_t i = total; i < len; i++) {
        if (p[i] != 0) {
            return len;
        }
    }
    return total;
}

void idx_cmd_pad(struct tern_wbuf *w)
{
    while (w->err == 0 && w->len % 8 != 0) {
        tern_wbuf_u8(w, 0);
    }
}

int idx__entry_produce_msgs(const void *entry,
                            size_t len,
                            size_t at,
                            struct idx__entry_scan *s,
                            size_t *start,
                            size_t *end,
                            bool *with_props)
{
    const uint8_t *b = entry;
    struct tern_cursor c, body;
    if (entry == NULL || len < IDX__CMD_HDR_SIZE || at >= len) {
        return 0;
    }
    if (s->pos < IDX__CMD_HDR_SIZE || s->pos >= len || at < s->pos) {
        s->pos = IDX__CMD_HDR_SIZE;
        s->i = 0;
    }
    tern_cursor_init(&c, b + s->pos, len - s->pos);
    for (uint32_t i = s->i, n = tern_get_u32(b + 4);
         i < n && i < IDX__CMD_MAX_COMMANDS; i++) {
        size_t here = (size_t)(c.p - b);
        uint8_t type;
        uint32_t body_len;
        const uint8_t *p = cmd_frame(&c, &type, &body_len);
        if (p == NULL) {
            return 0;
        }
        size_t from = (size_t)(p - b);
        if (at < from) {
            return 0; /* in a command's type and length */
        }
        if (at - from >= body_len) {
            continue;
        }
        s->pos = here;
        s->i = i;
        if (type != IDX_CMD_PRODUCE && type != IDX_CMD_PRODUCE_PROPS) {
            return 0;
        }
        tern_cursor_init(&body, p, body_len);
        uint8_t qlen = tern_cursor_u8(&body);
        (void)tern_cursor_bytes(&body, qlen);
        (void)tern_cursor_u64(&body); /* producer id */
        (void)tern_cursor_u64(&body); /* seq */
        (void)tern_cursor_u32(&body); /* n_msgs */
        if (body.err != 0) {
            return 0;
        }
        *start = (size_t)(body.p - b);
        *end = from + body_len;
        *with_props = type == IDX_CMD_PRODUCE_PROPS;
        return 1;
    }
    return 0;
}

bool idx__entry_newer(const void *entry, size_t len)
{
    const uint8_t *b = entry;
    struct tern_cursor c;
    if (entry == NULL || len < IDX__CMD_HDR_SIZE) {
        return false;
    }
    if (tern_get_u16(b) == 0) {
        return false;
    }
    if (tern_get_u16(b) > IDX__CMD_VERSION ||
        (tern_get_u16(b + 2) & ~IDX__CMD_FLAG_XXH3) != 0) {
        return true; /* its checksum may be one this build cannot compute */
    }
    if (tern_get_u32(b + 16) != len ||
        !IDX__CHECKSUM_OK(tern_get_u32(b + 20), entry_checksum(b, len))) {
        return false; /* damaged: every release refuses it */
    }
    tern_cursor_init(&c, b + IDX__CMD_HDR_SIZE, len - IDX__CMD_HDR_SIZE);
    for (uint32_t i = 0, n = tern_get_u32(b + 4);
         i < n && i < IDX__CMD_MAX_COMMANDS; i++) {
        uint8_t type;
        uint32_t body_len;
        if (cmd_frame(&c, &type, &body_len) == NULL) {
            return false;
        }
        if (type > IDX__CMD_TYPE_LAST) {
            return true;
        }
    }
    return false;
}

int idx_cmd_validate(const void *entry, size_t len)
{
    struct idx__entry it;
    struct idx__cmd cmd;
    int rc = idx__entry_open(&it, entry, len);
    if (rc != 0) {
        return rc;
    }
    while ((rc = idx__entry_next(&it, &cmd)) == 1) {
    }
    return rc;
}
