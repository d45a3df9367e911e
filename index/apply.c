/*
 * The write path. idx_apply appends a command entry to the commit log,
 * then the index writer (idx__index_record) indexes it into the pending
 * LMDB write txn (txn.c: opened lazily, committed by idx_flush), with meta
 * "state" (last_applied, log_end, last record) in the same txn. idx_open
 * and idx_restore index records already in the log with the same writer,
 * so that a rebuild derives exactly what the live path did. idx_sync makes
 * both stores durable; idx_bulk_discard drops un-indexed bulk bytes before
 * an append (see snapshot.c, "Abandoned fetches").
 *
 * Determinism: the outcome of a command depends only on the LMDB state
 * derived from earlier records, the entry bytes and max_message (which
 * must be equal on all nodes). Logical failures are results; only I/O and
 * LMDB failures fail idx_apply.
 *
 * Failure modes: a failed log write is rolled back by log.c and the env
 * turns "failed" (sticky, idx_status): further applies return the same
 * code until idx_close/idx_open. A failed LMDB operation aborts the pending
 * txn: the log then holds records LMDB lacks, which idx_open re-indexes.
 * A failed sync (idx_sync) is sticky too and flagged idx_sync_failed: the
 * caller must not reopen and carry on, but stop (see idx.h).
 *
 * Producer dedup (per queue and producer id, producer 0 = none):
 *   seq == last + 1            append, remember (seq, base, count)
 *   seq <= last, remembered    duplicate = 1, original base_offset/count
 *   seq <= last, forgotten     duplicate = 1, status 0, base_offset 0 and
 *                              count 0 ("applied earlier, offsets unknown";
 *                              like Kafka's DUPLICATE_SEQUENCE, not retried)
 *   seq > last + 1             status TERN_ESEQUENCE
 * An unknown producer has last = 0, so its first batch must be seq 1.
 * PRODUCE_DELAYED (timer.c) follows the same rules; its remembered
 * batches hold the due time where a PRODUCE's hold the base offset.
 *
 * Security metadata (docs/AUTH.md; tables in keys.c): USER_SET creates or
 * replaces (keeping created_index, which binds producer ids to this
 * incarnation of the user); USER_DELETE and NAMESPACE_DELETE remove the
 * grants naming them in the same txn; ACL_SET needs an existing user and
 * namespace ("default" always exists); PRODUCER_INIT hands out block
 * next_producer_id (meta "state") as the result's base_offset n << 32
 * (TERN_ELIMIT once the 2^32 - 1 blocks are issued). Each of them sets
 * sec_dirty, so idx_flush bumps idx_security_gen.
 *
 * Namespaces and quotas (docs/AUTH.md, "Quotas"): a queue "ns%q" needs
 * namespace ns (QUEUE_CREATE TERN_ENOTFOUND); NAMESPACE_DELETE of a
 * namespace that still has queues is TERN_EINVAL. Table ns_usage counts
 * each namespace's queues and message bytes in the same txn as the
 * QUEUE_CREATE, QUEUE_DELETE and PRODUCE that change them, so the quota
 * checks read the state every node derives from the same log:
 *   QUEUE_CREATE  exists -> TERN_EQUEUEEXISTS; else max_queues > 0 and
 *                 queues >= max_queues -> TERN_EQUOTA
 *   PRODUCE       after the dedup checks (a resend of an applied batch
 *                 still answers duplicate): max_bytes > 0 and bytes +
 *                 the batch's message bytes > max_bytes -> TERN_EQUOTA,
 *                 nothing appended, producer state unchanged
 * The quotas are those of the namespace's row in "namespaces"; "default"
 * has quotas only once a NAMESPACE_SET "default" gave some.
 *
 * Time and retention (docs/MESSAGES.md): each valid entry's append time
 * is max(its timestamp_ms, the previous append time) (meta "state"
 * last_append_ms), stamped on its messages' msgs rows. A queue's
 * start_offset moves only here, by the retention functions below:
 *   PRODUCE      a batch passing max_messages or max_bytes by itself ->
 *                TERN_EQUEUEFULL; with overflow reject, count + n >
 *                max_messages or bytes + batch > max_bytes ->
 *                TERN_EQUEUEFULL (checked after the quota, nothing
 *                appended); with drop-oldest the append is taken and the
 *                queue, if now over a limit, is noted for the leader's
 *                planner (idx_over_limits_drain), which proposes a TRIM
 *   TRIM         the leader's decision (idx_trim_plan: drop-oldest
 *                limits and max_age, planned from its own rows): moves
 *                start_offset and lowers the bytes by what the command
 *                says, without reading the trimmed rows, so a rebuild
 *                from a checkpoint that lacks them decides the same
 *   QUEUE_UPDATE changes the masked settings; a lowered limit is applied
 *                by the next TRIM the leader plans
 * Why the leader decides and the command carries the result (decision,
 * checkpoints): a rebuild from a checkpoint (ckpt.c) replays the log
 * after it without the rows of older messages; a trim computed at apply
 * from those rows (their lengths, their append times) could not be
 * replayed. Drop-oldest is therefore enforced one planning step after
 * the produce that passed the limit (the leader plans after each flush),
 * not inside it.
 * Trimming lowers the queue's bytes and its namespace usage by the
 * trimmed message bytes and writes the cleaner's "trim" mark; the rows
 * stay for the cleaner (clean.c). QUEUE_DELETE frees the name and writes
 * the "dead" mark; its rows go to the cleaner too.
 *
 * Message properties (docs/MESSAGES.md): PRODUCE_PROPS applies as PRODUCE;
 * a message with a properties block gets a version 2 msgs row (where the
 * block is in the record, its tag hash and its key; keys.c) and, when it
 * has a key, a row in the key index "keys", in the same txn. The cleaner
 * (clean.c) deletes a message's key row before its msgs row
 * (idx__key_rows_delete, for trimmed offsets and deleted queues alike).
 *
 * Delayed messages (docs/WORKQUEUES.md): PRODUCE_DELAYED and TIMER_FIRE
 * are applied by timer.c; a fired message goes through the produce path
 * here (idx__produce_append: quota, retention, rows, bytes), its msgs row
 * pointing into the TIMER_FIRE record that carries its bytes.
 */
#include <errno.h>

#include "idx_int.h"

int idx__queue_get(struct idx_env *e,
                   const char *name,
                   size_t n,
                   struct idx__queue_val *q)
{
    MDB_val k = {n, (void *)(uintptr_t)name}, v;
    int rc = mdb_get(e->wtxn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get queue");
    }
    if (idx__queue_val_decode(v.mv_data, v.mv_size, q) != 0) {
        return IDX__CORRUPT(e, "queue value of %.*s", (int)n, name);
    }
    return 0;
}

static int put_queue(struct idx_env *e,
                     const char *name,
                     size_t n,
                     const struct idx__queue_val *q)
{
    uint8_t buf[IDX__QUEUE_VAL_SIZE];
    idx__queue_val_encode(buf, q);
    MDB_val k = {n, (void *)(uintptr_t)name}, v = {sizeof buf, buf};
    int rc = mdb_put(e->wtxn, e->dbi_queues, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put queue") : 0;
}

/* ---- Namespace usage and quotas ------------------------------------------ */

/* The namespace (ns_usage key) of the command's queue. */
struct ns_ref
{
    const char *name;
    size_t len;
};

static struct ns_ref queue_ns(const struct idx__cmd *c)
{
    struct ns_ref n;
    n.len = idx__usage_key(c->queue, c->queue_len, &n.name);
    return n;
}

/* Usage of namespace n (zeros without a row). */
static int get_usage(struct idx_env *e,
                     struct ns_ref n,
                     struct idx__usage_val *u)
{
    MDB_val k = {n.len, (void *)(uintptr_t)n.name}, v;
    int rc = mdb_get(e->wtxn, e->dbi_usage, &k, &v);
    memset(u, 0, sizeof *u);
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get usage");
    }
    if (idx__usage_val_decode(v.mv_data, v.mv_size, u) != 0) {
        return IDX__CORRUPT(e, "usage value of %.*s", (int)n.len, n.name);
    }
    return 0;
}

/* Store u; a namespace without queues (which then holds no bytes) has no
 * row. */
static int put_usage(struct idx_env *e,
                     struct ns_ref n,
                     const struct idx__usage_val *u)
{
    uint8_t buf[IDX__USAGE_VAL_SIZE];
    MDB_val k = {n.len, (void *)(uintptr_t)n.name}, v = {sizeof buf, buf};
    int rc;
    if (u->queues == 0) {
        rc = mdb_del(e->wtxn, e->dbi_usage, &k, NULL);
        return rc != 0 && rc != MDB_NOTFOUND
                   ? idx__mdb_err(e, rc, "delete usage")
                   : 0;
    }
    idx__usage_val_encode(buf, u);
    rc = mdb_put(e->wtxn, e->dbi_usage, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put usage") : 0;
}

/* Quotas of namespace n: 0 with *q filled (zeros: unlimited) when it has
 * a row, 1 when it has none, or an error. */
static int get_ns(struct idx_env *e, struct ns_ref n, struct idx_quota *q)
{
    struct idx__ns_val nv;
    MDB_val k = {n.len, (void *)(uintptr_t)n.name}, v;
    int rc = mdb_get(e->wtxn, e->dbi_namespaces, &k, &v);
    memset(q, 0, sizeof *q);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get namespace");
    }
    if (idx__ns_val_decode(v.mv_data, v.mv_size, &nv) != 0) {
        return IDX__CORRUPT(e, "namespace value of %.*s", (int)n.len, n.name);
    }
    *q = nv.quota;
    return 0;
}

static bool is_default_ns(const char *name, size_t n)
{
    return n == sizeof IDX_NAMESPACE_DEFAULT - 1 &&
           memcmp(name, IDX_NAMESPACE_DEFAULT, n) == 0;
}

/* The command's queue into *q: 0; 1 with r->status = TERN_ENOQUEUE when
 * there is none (a result, not a failure); or a failure code. */
static int cmd_queue(struct idx_env *e,
                     const struct idx__cmd *c,
                     struct idx__queue_val *q,
                     struct idx_result *r)
{
    int rc = idx__queue_get(e, c->queue, c->queue_len, q);
    if (rc == 1) {
        r->status = TERN_ENOQUEUE;
    }
    return rc;
}

static int apply_create(struct idx_env *e,
                        uint64_t index,
                        const struct idx__cmd *c,
                        struct idx_result *r)
{
    struct idx__queue_val q = {0};
    struct idx__usage_val u;
    struct idx_quota quota;
    struct ns_ref ns = queue_ns(c);
    int rc = idx__queue_get(e, c->queue, c->queue_len, &q);
    if (rc < 0) {
        return rc;
    }
    if (rc == 0) {
        r->status = TERN_EQUEUEEXISTS;
        return 0;
    }
    rc = get_ns(e, ns, &quota);
    if (rc < 0) {
        return rc;
    }
    if (rc == 1 && !is_default_ns(ns.name, ns.len)) {
        r->status = TERN_ENOTFOUND;
        return 0;
    }
    rc = get_usage(e, ns, &u);
    if (rc != 0) {
        return rc;
    }
    if (quota.max_queues > 0 && u.queues >= quota.max_queues) {
        r->status = TERN_EQUOTA;
        return 0;
    }
    memset(&q, 0, sizeof q);
    q.id = e->st.next_queue_id++;
    q.created_index = index;
    if (c->has_settings) {
        q.settings = c->settings;
    } else {
        /* Only the earlier release writes a QUEUE_CREATE without settings
         * (a leader of this one always writes the tail): its queues kept
         * every message, so they keep them until QUEUE_UPDATE sets limits.
         * All zero: no limits, drop-oldest. */
        memset(&q.settings, 0, sizeof q.settings);
    }
    rc = put_queue(e, c->queue, c->queue_len, &q);
    if (rc != 0) {
        return rc;
    }
    u.queues++;
    return put_usage(e, ns, &u);
}

static int apply_delete(struct idx_env *e,
                        const struct idx__cmd *c,
                        struct idx_result *r)
{
    struct idx__queue_val q = {0};
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    MDB_val k = {c->queue_len, (void *)(uintptr_t)c->queue};
    rc = mdb_del(e->wtxn, e->dbi_queues, &k, NULL);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "delete queue");
    }
    rc = idx__mark_put(e, IDX__MARK_DEAD, q.id, "", 0);
    if (rc != 0) {
        return rc;
    }
    struct idx__usage_val u;
    struct ns_ref ns = queue_ns(c);
    rc = get_usage(e, ns, &u);
    if (rc != 0) {
        return rc;
    }
    if (u.queues == 0 || u.bytes < q.bytes) {
        return IDX__CORRUPT(e, "usage of %.*s below its queue %.*s",
                            (int)ns.len, ns.name, (int)c->queue_len, c->queue);
    }
    u.queues--;
    u.bytes -= q.bytes;
    return put_usage(e, ns, &u);
}

/* ---- Message properties and the key index ----------------------------------
 */

/* Fill m's property fields from the (validated) block of mi. */
static int msg_props(struct idx_env *e,
                     const uint8_t *payload,
                     const struct idx__msg_iter *mi,
                     struct idx__msg_val *m)
{
    struct idx_props p;
    if (idx_props_decode(mi->props, mi->props_len, &p) != 0) {
        return IDX__CORRUPT(e, "validated properties block is malformed");
    }
    m->props_off = (uint32_t)(mi->props - payload);
    m->props_len = mi->props_len;
    m->tag_len = (uint8_t)p.tag_len;
    m->tag_hash = idx__tag_hash(p.tag, p.tag_len);
    m->key_len = (uint16_t)p.key_len;
    m->key = (const uint8_t *)p.key;
    return 0;
}

static int put_key_row(struct idx_env *e,
                       uint64_t queue_id,
                       const struct idx__msg_val *m,
                       uint64_t offset)
{
    uint8_t row[IDX__KEY_ROW_MAX];
    MDB_val k = {idx__key_row(row, queue_id, m->key, m->key_len, offset, false),
                 row};
    MDB_val v = {0, row};
    int rc = mdb_put(e->wtxn, e->dbi_keys, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put key row") : 0;
}

int idx__key_rows_delete(struct idx_env *e,
                         uint64_t queue_id,
                         uint64_t from,
                         uint64_t to)
{
    MDB_cursor *cur;
    uint8_t key[IDX__MSG_KEY_SIZE];
    MDB_val k = {sizeof key, key}, v;
    int rc = mdb_cursor_open(e->wtxn, e->dbi_msgs, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    idx__msg_key(key, queue_id, from);
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__msg_val m;
        uint8_t row[IDX__KEY_ROW_MAX];
        if (k.mv_size != IDX__MSG_KEY_SIZE ||
            idx__get_be64(k.mv_data) != queue_id ||
            idx__get_be64((const uint8_t *)k.mv_data + 8) >= to) {
            break;
        }
        if (idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0) {
            mdb_cursor_close(cur);
            return IDX__CORRUPT(e, "message row of queue id %llu",
                                (unsigned long long)queue_id);
        }
        if (m.key_len == 0) {
            continue;
        }
        uint64_t off = idx__get_be64((const uint8_t *)k.mv_data + 8);
        MDB_val rk = {idx__key_row(row, queue_id, m.key, m.key_len, off, false),
                      row};
        int drc = mdb_del(e->wtxn, e->dbi_keys, &rk, NULL);
        if (drc != 0 && drc != MDB_NOTFOUND) {
            mdb_cursor_close(cur);
            return idx__mdb_err(e, drc, "delete key row");
        }
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "cursor");
    }
    return 0;
}

/* ---- Retention ------------------------------------------------------------
 */

/* Whether a batch of n messages and batch_bytes may be appended to q:
 * 0 or TERN_EQUEUEFULL. */
static int retain_admit(const struct idx__queue_val *q,
                        uint32_t n,
                        uint64_t batch_bytes)
{
    const struct idx_queue_settings *s = &q->settings;
    if ((s->max_messages > 0 && n > s->max_messages) ||
        (s->max_bytes > 0 && batch_bytes > s->max_bytes)) {
        return TERN_EQUEUEFULL; /* does not fit even in an empty queue */
    }
    if (s->overflow != IDX_OVERFLOW_REJECT) {
        return 0;
    }
    uint64_t count = q->next_offset - q->start_offset;
    if ((s->max_messages > 0 && count > s->max_messages - n) ||
        (s->max_bytes > 0 && q->bytes > s->max_bytes - batch_bytes)) {
        return TERN_EQUEUEFULL;
    }
    return 0;
}

/* Whether q passes max_messages or max_bytes. */
static bool over_limits(const struct idx__queue_val *q)
{
    const struct idx_queue_settings *s = &q->settings;
    return (s->max_messages > 0 &&
            q->next_offset - q->start_offset > s->max_messages) ||
           (s->max_bytes > 0 && q->bytes > s->max_bytes);
}

/* A produce left q (drop-oldest) over a limit: remember its name for the
 * leader's planner (idx_over_limits_drain; local, not replicated). */
static void note_over_limits(struct idx_env *e,
                             const char *name,
                             size_t name_len)
{
    if (e->n_over >= IDX__OVER_MAX) {
        e->over_lost = true;
        return;
    }
    for (size_t i = 0; i < e->n_over; i++) {
        if (strlen(e->over[i]) == name_len &&
            memcmp(e->over[i], name, name_len) == 0) {
            return;
        }
    }
    memcpy(e->over[e->n_over], name, name_len);
    e->over[e->n_over][name_len] = '\0';
    e->n_over++;
}

/* TRIM: the leader's decision, applied without reading the trimmed
 * messages' rows (cmd.c). */
static int apply_trim(struct idx_env *e,
                      const struct idx__cmd *c,
                      struct idx_result *r)
{
    struct idx__queue_val q = {0};
    struct idx__usage_val u;
    struct ns_ref ns = queue_ns(c);
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    rc = get_usage(e, ns, &u);
    if (rc != 0) {
        return rc;
    }
    if (q.id != c->trim.queue_id || q.start_offset != c->trim.from ||
        c->trim.to > q.next_offset || c->trim.bytes > q.bytes ||
        c->trim.bytes > u.bytes) {
        r->status = TERN_EINVAL; /* a stale plan: the leader plans again */
        return 0;
    }
    q.start_offset = c->trim.to;
    q.bytes -= c->trim.bytes;
    u.bytes -= c->trim.bytes;
    r->base_offset = c->trim.from;
    r->count =
        (uint32_t)TERN_MIN(c->trim.to - c->trim.from, (uint64_t)UINT32_MAX);
    rc = put_queue(e, c->queue, c->queue_len, &q);
    if (rc == 0) {
        rc = put_usage(e, ns, &u);
    }
    if (rc == 0) {
        rc = idx__mark_put(e, IDX__MARK_TRIM, q.id, c->queue, c->queue_len);
    }
    if (rc == 0) {
        rc = idx__shared_trim(e, q.id, c->trim.to);
    }
    return rc;
}

static int apply_update(struct idx_env *e,
                        const struct idx__cmd *c,
                        struct idx_result *r)
{
    struct idx__queue_val q = {0};
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    if ((c->mask & IDX_SET_MAX_AGE) != 0) {
        q.settings.max_age_ms = c->settings.max_age_ms;
    }
    if ((c->mask & IDX_SET_MAX_BYTES) != 0) {
        q.settings.max_bytes = c->settings.max_bytes;
    }
    if ((c->mask & IDX_SET_MAX_MESSAGES) != 0) {
        q.settings.max_messages = c->settings.max_messages;
    }
    if ((c->mask & IDX_SET_OVERFLOW) != 0) {
        q.settings.overflow = c->settings.overflow;
    }
    return put_queue(e, c->queue, c->queue_len, &q);
}

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
                        struct idx_result *r)
{
    struct idx__usage_val u;
    struct idx_quota quota;
    struct idx__msg_iter it = *mi;
    struct ns_ref ns;
    const uint8_t *data;
    uint32_t len;
    int rc;
    ns.len = idx__usage_key(queue, queue_len, &ns.name);
    rc = get_ns(e, ns, &quota);
    if (rc < 0) {
        return rc;
    }
    rc = get_usage(e, ns, &u);
    if (rc != 0) {
        return rc;
    }
    if (quota.max_bytes > 0 && (batch_bytes > quota.max_bytes ||
                                u.bytes > quota.max_bytes - batch_bytes)) {
        r->status = TERN_EQUOTA;
        return 0;
    }
    r->status = retain_admit(q, n, batch_bytes);
    if (r->status != 0) {
        return 0;
    }
    r->base_offset = q->next_offset;
    r->count = n;
    /* One row per message, consecutive offsets, all from the command
     * alone: a fetch reads the rows after a command's first from its
     * record instead (read.c, "walk"): keep them derived so. */
    while (idx__msg_iter_next(&it, &data, &len) == 1) {
        uint8_t key[IDX__MSG_KEY_SIZE], val[IDX__MSG_VAL_MAX];
        struct idx__msg_val m = {
            .rec_pos = rec_pos,
            .data_off = (uint32_t)(data - payload),
            .len = len,
            .timestamp_ms = timestamp_ms,
            .producer_id = producer_id,
        };
        if (it.props_len > 0 && (rc = msg_props(e, payload, &it, &m)) != 0) {
            return rc;
        }
        idx__msg_key(key, q->id, q->next_offset);
        MDB_val k = {sizeof key, key};
        MDB_val v = {idx__msg_val_encode(val, &m), val};
        rc = mdb_put(e->wtxn, e->dbi_msgs, &k, &v, 0);
        if (rc != 0) {
            return idx__mdb_err(e, rc, "put message");
        }
        if (m.key_len > 0 &&
            (rc = put_key_row(e, q->id, &m, q->next_offset)) != 0) {
            return rc;
        }
        q->next_offset++;
    }
    q->bytes += batch_bytes;
    u.bytes += batch_bytes;
    if (q->settings.overflow == IDX_OVERFLOW_DROP_OLDEST && over_limits(q)) {
        note_over_limits(e, queue, queue_len);
    }
    rc = put_queue(e, queue, queue_len, q);
    return rc == 0 ? put_usage(e, ns, &u) : rc;
}

/* Producer dedup, before a batch of (producer_id, seq) is applied to the
 * queue of id queue_id: 1 when it is answered already (r->duplicate with
 * the remembered base_offset and count, or r->status TERN_ESEQUENCE), 0 to
 * go on (*pv: the producer's row, for idx__producer_remember), or a failure
 * code. Producer 0 always goes on. */
int idx__producer_check(struct idx_env *e,
                        uint64_t queue_id,
                        uint64_t producer_id,
                        uint64_t seq,
                        struct idx__producer_val *pv,
                        struct idx_result *r)
{
    uint8_t pkey[16];
    memset(pv, 0, sizeof *pv);
    if (producer_id == 0) {
        return 0;
    }
    idx__producer_key(pkey, queue_id, producer_id);
    MDB_val k = {sizeof pkey, pkey}, v;
    int rc = mdb_get(e->wtxn, e->dbi_producers, &k, &v);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "get producer");
    }
    if (rc == 0 && idx__producer_val_decode(v.mv_data, v.mv_size, pv)) {
        return IDX__CORRUPT(e, "producer value");
    }
    if (seq <= pv->last_seq) {
        r->duplicate = 1;
        for (uint32_t i = 0; i < pv->n; i++) {
            if (pv->b[i].seq == seq) {
                r->base_offset = pv->b[i].base_offset;
                r->count = pv->b[i].count;
                break;
            }
        }
        return 1;
    }
    if (seq != pv->last_seq + 1) {
        r->status = TERN_ESEQUENCE;
        return 1;
    }
    return 0;
}

/* After a batch passed idx__producer_check and was applied: remember
 * (seq, base, count) as its newest batch in pv (from the check) and store
 * the row. Producer 0: nothing. 0 or a failure code. */
int idx__producer_remember(struct idx_env *e,
                           uint64_t queue_id,
                           uint64_t producer_id,
                           uint64_t seq,
                           struct idx__producer_val *pv,
                           uint64_t base,
                           uint32_t count)
{
    uint8_t pkey[16], buf[IDX__PRODUCER_VAL_MAX];
    uint32_t keep = TERN_MIN(pv->n, (uint32_t)IDX__DEDUP_WINDOW - 1);
    if (producer_id == 0) {
        return 0;
    }
    memmove(&pv->b[1], &pv->b[0], keep * sizeof pv->b[0]);
    pv->b[0].seq = seq;
    pv->b[0].base_offset = base;
    pv->b[0].count = count;
    pv->n = keep + 1;
    pv->last_seq = seq;
    idx__producer_key(pkey, queue_id, producer_id);
    MDB_val k = {sizeof pkey, pkey};
    MDB_val v = {idx__producer_val_encode(buf, pv), buf};
    int rc = mdb_put(e->wtxn, e->dbi_producers, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put producer") : 0;
}

static int apply_produce(struct idx_env *e,
                         uint64_t rec_pos,
                         uint64_t timestamp_ms,
                         const uint8_t *payload,
                         const struct idx__cmd *c,
                         struct idx_result *r)
{
    struct idx__queue_val q = {0};
    struct idx__producer_val pv;
    struct idx__msg_iter mi;
    const uint8_t *data;
    uint32_t len;
    uint64_t batch_bytes = 0; /* < 2^30: the entry holds them */
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    idx__msg_iter_init(&mi, c);
    while (idx__msg_iter_next(&mi, &data, &len) == 1) {
        if (len > e->max_message) {
            r->status = TERN_ETOOBIG;
            return 0;
        }
        batch_bytes += len;
    }
    rc = idx__producer_check(e, q.id, c->producer_id, c->seq, &pv, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    idx__msg_iter_init(&mi, c);
    rc = idx__produce_append(e, c->queue, c->queue_len, &q, rec_pos,
                             timestamp_ms, payload, c->producer_id, &mi,
                             c->n_msgs, batch_bytes, r);
    if (rc != 0 || r->status != 0) {
        return rc;
    }
    return idx__producer_remember(e, q.id, c->producer_id, c->seq, &pv,
                                  r->base_offset, r->count);
}

static int apply_group(struct idx_env *e,
                       uint64_t index,
                       uint64_t append_ms,
                       uint64_t t,
                       const struct idx__cmd *c,
                       struct idx_result *r)
{
    struct idx__queue_val q = {0};
    uint8_t key[IDX__GROUP_KEY_MAX], val[IDX__GROUP_VAL_SIZE];
    struct idx__group_val g = {.next_offset = c->next_offset,
                               .commit_ms = append_ms,
                               .commit_index = index};
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    if (c->next_offset > q.next_offset || c->next_offset < q.start_offset) {
        r->status = TERN_EOFFSET;
        return 0;
    }
    size_t kn = idx__group_key(key, q.id, c->group, c->group_len);
    rc = idx__group_is_shared(e, key, kn);
    if (rc != 0) {
        r->status = TERN_EINVAL; /* a shared group settles, never commits */
        return rc < 0 ? rc : 0;
    }
    /* A live claim of another consumer refuses it (claim.c). */
    rc = idx__claim_commit_check(e, key, kn, c->consumer_id, t, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    MDB_val k = {kn, key}, v = {idx__group_val_encode(val, &g), val};
    rc = mdb_put(e->wtxn, e->dbi_groups, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put group") : 0;
}

/* ---- Shared groups (shared.c; docs/WORKQUEUES.md) ----------------------- */

/* A command of a queue's groups applied by fn (idx__shared_apply for
 * SHARED_CONFIG, DELIVER, SETTLE; idx__claim_apply for CLAIM, "Single
 * active consumer"): the queue's row first (TERN_ENOQUEUE otherwise). */
static int apply_on_queue(struct idx_env *e,
                          uint64_t t,
                          const struct idx__cmd *c,
                          struct idx_result *r,
                          int (*fn)(struct idx_env *e,
                                    const struct idx__queue_val *q,
                                    uint64_t t,
                                    const struct idx__cmd *c,
                                    struct idx_result *r))
{
    struct idx__queue_val q = {0};
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    return fn(e, &q, t, c, r);
}

/* DEAD_LETTER: the group's check, the append of the carried message to
 * the DLQ (created on first use with the default retention, as a
 * QUEUE_CREATE would), then the row goes. A DLQ that refuses the append
 * (quota, overflow reject, ...) leaves the row as it was. */
static int apply_dead_letter(struct idx_env *e,
                             uint64_t index,
                             uint64_t pos,
                             uint64_t append_ms,
                             uint64_t t,
                             const uint8_t *payload,
                             const struct idx__cmd *c,
                             struct idx_result *r)
{
    struct idx__queue_val q = {0}, dq = {0};
    char dlq[TERN_NAME_MAX + 1];
    int rc = cmd_queue(e, c, &q, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    rc = idx__shared_dl_check(e, &q, t, c, dlq, r);
    if (rc != 1) {
        return rc;
    }
    struct idx__cmd dc = *c;
    dc.type = IDX_CMD_PRODUCE_PROPS;
    dc.queue = dlq;
    dc.queue_len = (uint8_t)strlen(dlq);
    dc.producer_id = 0;
    dc.seq = 0;
    rc = idx__queue_get(e, dc.queue, dc.queue_len, &dq);
    if (rc == 1) {
        dc.has_settings = true;
        idx_queue_settings_default(&dc.settings);
        rc = apply_create(e, index, &dc, r);
        if (rc != 0 || r->status != 0) {
            return rc;
        }
    } else if (rc != 0) {
        return rc;
    }
    rc = apply_produce(e, pos, append_ms, payload, &dc, r);
    if (rc != 0 || r->status != 0) {
        return rc;
    }
    return idx__shared_dl_finish(e, &q, c);
}

/* ---- Security metadata ------------------------------------------------- */

static int get_user(struct idx_env *e,
                    const char *name,
                    size_t n,
                    struct idx__user_val *u)
{
    MDB_val k = {n, (void *)(uintptr_t)name}, v;
    int rc = mdb_get(e->wtxn, e->dbi_users, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get user");
    }
    if (idx__user_val_decode(v.mv_data, v.mv_size, u) != 0) {
        return IDX__CORRUPT(e, "user value of %.*s", (int)n, name);
    }
    return 0;
}

/* 0 exists, 1 does not, or an error. */
static int ns_exists(struct idx_env *e, const char *name, size_t n)
{
    MDB_val k = {n, (void *)(uintptr_t)name}, v;
    int rc = mdb_get(e->wtxn, e->dbi_namespaces, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return is_default_ns(name, n) ? 0 : 1;
    }
    return rc != 0 ? idx__mdb_err(e, rc, "get namespace") : 0;
}

/* Delete the grants of user (a prefix walk) or, with user NULL, of
 * namespace ns (a walk of the whole table: grants are few). */
static int del_grants(struct idx_env *e,
                      const char *user,
                      size_t user_len,
                      const char *ns,
                      size_t ns_len)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint8_t prefix[TERN_NAME_MAX + 1];
    size_t plen = 0;
    int rc = mdb_cursor_open(e->wtxn, e->dbi_acls, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    if (user != NULL) {
        memcpy(prefix, user, user_len);
        prefix[user_len] = 0;
        plen = user_len + 1;
        k.mv_size = plen;
        k.mv_data = prefix;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    } else {
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    }
    while (rc == 0) {
        struct idx__acl_key ak;
        if (user != NULL &&
            (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0)) {
            break;
        }
        if (idx__acl_key_split(k.mv_data, k.mv_size, &ak) != 0) {
            mdb_cursor_close(cur);
            return IDX__CORRUPT(e, "grant key");
        }
        bool match = user != NULL || (ns != NULL && ak.ns_len == ns_len &&
                                      memcmp(ak.ns, ns, ns_len) == 0);
        if (match) {
            uint8_t at[IDX__ACL_KEY_MAX];
            size_t at_len = k.mv_size;
            memcpy(at, k.mv_data, at_len);
            rc = mdb_cursor_del(cur, 0);
            if (rc != 0) {
                break;
            }
            /* Re-seek past the deleted key (as del_prefix: immune to the
             * cursor position rules after mdb_cursor_del). */
            k.mv_size = at_len;
            k.mv_data = at;
            rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        } else {
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "delete grants");
    }
    return 0;
}

static int apply_user_set(struct idx_env *e,
                          uint64_t index,
                          const struct idx__cmd *c)
{
    struct idx__user_val u;
    uint8_t buf[IDX__USER_VAL_MAX];
    int rc = get_user(e, c->queue, c->queue_len, &u);
    if (rc < 0) {
        return rc;
    }
    if (rc == 1) {
        u.created_index = index;
    }
    u.flags = c->flags;
    u.cred_len = c->cred_len;
    memcpy(u.cred, c->cred, c->cred_len);
    MDB_val k = {c->queue_len, (void *)(uintptr_t)c->queue};
    MDB_val v = {idx__user_val_encode(buf, &u), buf};
    rc = mdb_put(e->wtxn, e->dbi_users, &k, &v, 0);
    e->sec_dirty = true;
    return rc != 0 ? idx__mdb_err(e, rc, "put user") : 0;
}

static int apply_user_delete(struct idx_env *e,
                             const struct idx__cmd *c,
                             struct idx_result *r)
{
    MDB_val k = {c->queue_len, (void *)(uintptr_t)c->queue};
    int rc = mdb_del(e->wtxn, e->dbi_users, &k, NULL);
    if (rc == MDB_NOTFOUND) {
        r->status = TERN_ENOTFOUND;
        return 0;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "delete user");
    }
    e->sec_dirty = true;
    return del_grants(e, c->queue, c->queue_len, NULL, 0);
}

static int apply_acl(struct idx_env *e,
                     const struct idx__cmd *c,
                     struct idx_result *r)
{
    struct idx__user_val u;
    uint8_t key[IDX__ACL_KEY_MAX], val[4];
    size_t kn = idx__acl_key(key, c->queue, c->queue_len, c->ns, c->ns_len,
                             c->pattern, c->pattern_len);
    MDB_val k = {kn, key}, v = {sizeof val, val};
    int rc;
    if (c->type == IDX_CMD_ACL_DELETE) {
        rc = mdb_del(e->wtxn, e->dbi_acls, &k, NULL);
        if (rc == MDB_NOTFOUND) {
            r->status = TERN_ENOTFOUND;
            return 0;
        }
        e->sec_dirty = true;
        return rc != 0 ? idx__mdb_err(e, rc, "delete grant") : 0;
    }
    rc = get_user(e, c->queue, c->queue_len, &u);
    if (rc == 0) {
        rc = ns_exists(e, c->ns, c->ns_len);
    }
    if (rc < 0) {
        return rc;
    }
    if (rc == 1) {
        r->status = TERN_ENOTFOUND;
        return 0;
    }
    tern_put_u32(val, c->flags);
    rc = mdb_put(e->wtxn, e->dbi_acls, &k, &v, 0);
    e->sec_dirty = true;
    return rc != 0 ? idx__mdb_err(e, rc, "put grant") : 0;
}

static int apply_ns_set(struct idx_env *e,
                        uint64_t index,
                        const struct idx__cmd *c)
{
    struct idx__ns_val n = {0};
    uint8_t buf[IDX__NS_VAL_SIZE];
    MDB_val k = {c->queue_len, (void *)(uintptr_t)c->queue}, v;
    int rc = mdb_get(e->wtxn, e->dbi_namespaces, &k, &v);
    if (rc == 0) {
        if (idx__ns_val_decode(v.mv_data, v.mv_size, &n) != 0) {
            return IDX__CORRUPT(e, "namespace value of %.*s", (int)c->queue_len,
                                c->queue);
        }
    } else if (rc == MDB_NOTFOUND) {
        n.created_index = index;
    } else {
        return idx__mdb_err(e, rc, "get namespace");
    }
    n.quota = c->quota;
    idx__ns_val_encode(buf, &n);
    v.mv_size = sizeof buf;
    v.mv_data = buf;
    rc = mdb_put(e->wtxn, e->dbi_namespaces, &k, &v, 0);
    e->sec_dirty = true;
    return rc != 0 ? idx__mdb_err(e, rc, "put namespace") : 0;
}

static int apply_ns_delete(struct idx_env *e,
                           const struct idx__cmd *c,
                           struct idx_result *r)
{
    if (is_default_ns(c->queue, c->queue_len)) {
        r->status = TERN_EINVAL;
        return 0;
    }
    struct ns_ref ns = {c->queue, c->queue_len};
    struct idx_quota quota;
    struct idx__usage_val u;
    int rc = get_ns(e, ns, &quota);
    if (rc < 0) {
        return rc;
    }
    if (rc == 1) {
        r->status = TERN_ENOTFOUND;
        return 0;
    }
    rc = get_usage(e, ns, &u);
    if (rc != 0) {
        return rc;
    }
    if (u.queues > 0) {
        r->status = TERN_EINVAL; /* delete its queues first */
        return 0;
    }
    MDB_val k = {c->queue_len, (void *)(uintptr_t)c->queue};
    rc = mdb_del(e->wtxn, e->dbi_namespaces, &k, NULL);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "delete namespace");
    }
    e->sec_dirty = true;
    return del_grants(e, NULL, 0, c->queue, c->queue_len);
}

static int apply_producer_init(struct idx_env *e,
                               const struct idx__cmd *c,
                               struct idx_result *r)
{
    struct idx__pid_val p = {0};
    uint8_t key[8], buf[IDX__PID_VAL_MAX];
    if (c->queue_len > 0) {
        struct idx__user_val u = {0};
        int rc = get_user(e, c->queue, c->queue_len, &u);
        if (rc < 0) {
            return rc;
        }
        if (rc == 1) {
            r->status = TERN_ENOTFOUND;
            return 0;
        }
        p.owner_created_index = u.created_index;
        memcpy(p.owner, c->queue, c->queue_len);
        p.owner_len = c->queue_len;
    }
    if (e->st.next_producer_id > IDX__PID_BLOCK_MAX) {
        r->status = TERN_ELIMIT; /* every block is issued */
        return 0;
    }
    uint64_t block = e->st.next_producer_id++;
    idx__put_be64(key, block);
    MDB_val k = {sizeof key, key}, v = {idx__pid_val_encode(buf, &p), buf};
    int rc = mdb_put(e->wtxn, e->dbi_pids, &k, &v, 0);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "put producer id");
    }
    e->sec_dirty = true;
    r->base_offset = block << IDX__PID_BLOCK_SHIFT;
    return 0;
}

static int put_state(struct idx_env *e)
{
    uint8_t buf[IDX__STATE_SIZE];
    idx__state_encode(buf, &e->st);
    MDB_val k = {sizeof IDX__META_KEY_STATE - 1, (void *)IDX__META_KEY_STATE};
    MDB_val v = {sizeof buf, buf};
    int rc = mdb_put(e->wtxn, e->dbi_meta, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put meta") : 0;
}

int idx__index_record(struct idx_env *e,
                      uint64_t pos,
                      uint64_t index,
                      const uint8_t *payload,
                      uint32_t len,
                      uint32_t checksum,
                      struct idx_result *results,
                      unsigned max,
                      unsigned *n_results)
{
    struct idx__entry it;
    struct idx__cmd cmd;
    unsigned n = 0;
    int rc = idx__txn_begin(e);
    if (rc != 0) {
        return rc;
    }
    /* The first record of each checkpoint_bytes block of the log gets a
     * checkpoint of the state before it (ckpt.c: same positions, same
     * bytes on every node). Not after an entry of a later release this
     * node only recorded (idx_refused_newer): its state lacks what the
     * peers' checkpoint at that position holds. */
    if (pos > 0 && !e->refused_newer &&
        pos / e->checkpoint_bytes != e->st.last_rec_pos / e->checkpoint_bytes) {
        rc = e->ckpt_live ? idx__ckpt_start(e, pos) : idx__ckpt_write(e, pos);
        if (rc != 0) {
            return rc;
        }
    }
    if (idx_cmd_validate(payload, len) != 0) {
        /* Recorded but not applied: one TERN_EMALFORMED result per
         * announced command (1 if the header is unreadable). */
        unsigned want = 1;
        if (!e->refused_newer && idx__entry_newer(payload, len)) {
            e->refused_newer = true;
            e->refused_pos = pos;
        }
        if (len >= IDX__CMD_HDR_SIZE) {
            uint32_t hn = tern_get_u32(payload + 4);
            if (hn >= 1 && hn <= IDX__CMD_MAX_COMMANDS) {
                want = hn;
            }
        }
        for (n = 0; n < want && n < max && results != NULL; n++) {
            memset(&results[n], 0, sizeof results[n]);
            results[n].status = TERN_EMALFORMED;
        }
    } else {
        rc = idx__entry_open(&it, payload, len);
        TERN_INVARIANT(rc == 0);
        /* Append time (docs/MESSAGES.md, "Time"): monotone over the log. */
        uint64_t append_ms = TERN_MAX(it.timestamp_ms, e->st.last_append_ms);
        uint32_t delayed_no = 0; /* timer message numbers (timer.c) */
        e->st.last_append_ms = append_ms;
        while (idx__entry_next(&it, &cmd) == 1) {
            struct idx_result r = {0};
            switch (cmd.type) {
            case IDX_CMD_QUEUE_CREATE:
                rc = apply_create(e, index, &cmd, &r);
                break;
            case IDX_CMD_QUEUE_DELETE:
                rc = apply_delete(e, &cmd, &r);
                break;
            case IDX_CMD_PRODUCE:
            case IDX_CMD_PRODUCE_PROPS:
                rc = apply_produce(e, pos, append_ms, payload, &cmd, &r);
                break;
            case IDX_CMD_GROUP_COMMIT:
            case IDX_CMD_GROUP_COMMIT_AS:
                rc =
                    apply_group(e, index, append_ms, it.timestamp_ms, &cmd, &r);
                break;
            case IDX_CMD_CLAIM:
                rc = apply_on_queue(e, it.timestamp_ms, &cmd, &r,
                                    idx__claim_apply);
                break;
            case IDX_CMD_READ_BARRIER:
            case IDX_CMD_TERM:
                break; /* result 0, nothing changes */
            case IDX_CMD_USER_SET:
                rc = apply_user_set(e, index, &cmd);
                break;
            case IDX_CMD_USER_DELETE:
                rc = apply_user_delete(e, &cmd, &r);
                break;
            case IDX_CMD_ACL_SET:
            case IDX_CMD_ACL_DELETE:
                rc = apply_acl(e, &cmd, &r);
                break;
            case IDX_CMD_NAMESPACE_SET:
                rc = apply_ns_set(e, index, &cmd);
                break;
            case IDX_CMD_NAMESPACE_DELETE:
                rc = apply_ns_delete(e, &cmd, &r);
                break;
            case IDX_CMD_PRODUCER_INIT:
                rc = apply_producer_init(e, &cmd, &r);
                break;
            case IDX_CMD_QUEUE_UPDATE:
                rc = apply_update(e, &cmd, &r);
                break;
            case IDX_CMD_TRIM:
                rc = apply_trim(e, &cmd, &r);
                break;
            case IDX_CMD_SHARED_CONFIG:
            case IDX_CMD_DELIVER:
            case IDX_CMD_SETTLE:
                rc = apply_on_queue(e, it.timestamp_ms, &cmd, &r,
                                    idx__shared_apply);
                break;
            case IDX_CMD_DEAD_LETTER:
                rc = apply_dead_letter(e, index, pos, append_ms,
                                       it.timestamp_ms, payload, &cmd, &r);
                break;
            case IDX_CMD_PRODUCE_DELAYED:
                rc = idx__timer_apply_delayed(e, pos, index, &cmd, &delayed_no,
                                              &r);
                break;
            case IDX_CMD_TIMER_FIRE:
                rc = idx__timer_apply_fire(e, pos, append_ms, it.timestamp_ms,
                                           payload, &cmd, &r);
                break;
            default:
                rc = IDX__CORRUPT(e, "validated entry has command type %u",
                                  cmd.type);
                break;
            }
            if (rc != 0) {
                return rc;
            }
            if (results != NULL && n < max) {
                results[n++] = r;
            }
        }
    }
    e->st.last_applied = index;
    e->st.last_rec_pos = pos;
    e->st.log_end = pos + IDX__REC_HDR_SIZE + len;
    e->st.last_rec_checksum = checksum;
    rc = put_state(e);
    if (rc != 0) {
        return rc;
    }
    if (n_results != NULL) {
        *n_results = n;
    }
    return 0;
}

int idx_apply(struct idx_env *e,
              uint64_t index,
              const void *entry,
              size_t len,
              struct idx_result *results,
              unsigned max,
              unsigned *n_results)
{
    uint64_t pos;
    uint32_t checksum;
    int rc;
    *n_results = 0;
    if (e->failed != 0) {
        return e->failed;
    }
    if (index <= e->st.last_applied) {
        return 0;
    }
    if (e->st.log_end != e->log_end) {
        /* Bytes of a bulk fetch that was abandoned (raft applies entries
         * instead of the snapshot they were fetched for): drop them,
         * durably, so the record lands where LMDB expects it (jepsen F2). */
        rc = idx_bulk_discard(e);
        if (rc != 0) {
            tern_errmsg_wrapf(e->errmsg, "apply %llu",
                              (unsigned long long)index);
            e->failed = rc;
            return rc;
        }
    }
    if (len > IDX__RECORD_MAX_PAYLOAD) {
        rc = idx__fail(e, TERN_ETOOBIG, __LINE__,
                       "entry %llu of %zu bytes exceeds the record limit",
                       (unsigned long long)index, len);
        e->failed = rc;
        return rc;
    }
    rc = idx__log_append_record(e, idx__entry_record_version(entry, len), index,
                                entry, (uint32_t)len, &pos, &checksum);
    if (rc != 0) {
        tern_errmsg_wrapf(e->errmsg, "apply %llu", (unsigned long long)index);
        e->failed = rc;
        return rc;
    }
    e->ckpt_live = e->ckpt_background;
    rc = idx__index_record(e, pos, index, entry, (uint32_t)len, checksum,
                           results, max, n_results);
    e->ckpt_live = false;
    if (rc != 0) {
        tern_errmsg_wrapf(e->errmsg, "apply %llu", (unsigned long long)index);
        idx__txn_abort(e);
        *n_results = 0;
        e->failed = rc;
        return rc;
    }
    return 0;
}

/* A failed sync is sticky and not retried (idx_sync_failed): what it
 * should have made durable may be gone from the disk already. */
static int sync_failed(struct idx_env *e, int rc)
{
    e->sync_failed = true;
    e->failed = rc;
    return rc;
}

int idx_sync(struct idx_env *e)
{
    int rc;
    if (e->sync_failed) {
        return e->failed;
    }
    rc = idx_flush(e);
    if (rc != 0) {
        return rc;
    }
    /* The commit log only: LMDB is removed unread and rebuilt from the
     * log at every open (env.c), so making its pages durable buys
     * nothing, and with a large index its sync took most of a snapshot's
     * time on the loop thread (hundreds of ms: longer than an election
     * timeout). */
    rc = idx__log_sync(e);
    return rc != 0 ? sync_failed(e, rc) : 0;
}

int idx_bulk_discard(struct idx_env *e)
{
    if (e->failed != 0) {
        return e->failed;
    }
    TERN_INVARIANT(e->st.log_end <= e->log_end);
    if (e->st.log_end == e->log_end) {
        return 0;
    }
    uint64_t n = e->log_end - e->st.log_end;
    int rc = idx__log_truncate(e, e->st.log_end);
    if (rc != 0) {
        tern_errmsg_wrapf(e->errmsg, "discard %llu un-indexed bulk bytes",
                          (unsigned long long)n);
        return rc;
    }
    e->discarded += n;
    return 0;
}

bool idx_refused_newer(const struct idx_env *e, uint64_t *pos)
{
    if (pos != NULL) {
        *pos = e->refused_newer ? e->refused_pos : 0;
    }
    return e->refused_newer;
}

uint64_t idx_discarded_bytes(const struct idx_env *e)
{
    return e->discarded;
}
