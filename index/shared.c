/*
 * Shared groups (docs/WORKQUEUES.md): each message of a queue goes to one
 * consumer of the group at a time under a lease and is settled one by
 * one. This file applies SHARED_CONFIG, DELIVER, SETTLE and the group's
 * part of DEAD_LETTER (apply.c appends the DLQ copy), moves shared groups
 * on a TRIM, and holds the leader's plans (idx_deliver_plan,
 * idx_dead_letter_plan) and the reads of a group's state. Formats: the
 * group row version 3 and DBI "leases" in keys.c, the commands in cmd.c.
 *
 * Apply reads only the group row, the lease rows and the entry (t = its
 * timestamp_ms), all of which a checkpoint holds, so a rebuild decides
 * as the first apply did. Invariants of a group row: floor <= next; lease
 * rows only in [floor, next); floor is next or the offset of the group's
 * first lease row (every offset of [floor, next) without a row is
 * acknowledged); next - floor grows only by DELIVER, and only while it is
 * below window.
 */
#include <stdio.h>

#include "idx_int.h"

/* ---- Rows -----------------------------------------------------------------
 */

/* The group row of (queue_id, group) in txn: 0 with *g, 1 when there is
 * none, or a failure code. */
static int group_get(struct idx_env *e,
                     MDB_txn *txn,
                     uint64_t queue_id,
                     const char *group,
                     size_t group_len,
                     struct idx__group_val *g)
{
    uint8_t key[IDX__GROUP_KEY_MAX];
    MDB_val k = {idx__group_key(key, queue_id, group, group_len), key}, v;
    int rc = mdb_get(txn, e->dbi_groups, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get group");
    }
    if (idx__group_val_decode(v.mv_data, v.mv_size, g) != 0) {
        return IDX__CORRUPT(e, "group value of %.*s", (int)group_len, group);
    }
    return 0;
}

static int group_put(struct idx_env *e,
                     uint64_t queue_id,
                     const char *group,
                     size_t group_len,
                     const struct idx__group_val *g)
{
    uint8_t key[IDX__GROUP_KEY_MAX], val[IDX__GROUP_VAL_MAX];
    MDB_val k = {idx__group_key(key, queue_id, group, group_len), key};
    MDB_val v = {idx__group_val_encode(val, g), val};
    int rc = mdb_put(e->wtxn, e->dbi_groups, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put group") : 0;
}

int idx__group_is_shared(struct idx_env *e, const void *key, size_t key_len)
{
    struct idx__group_val g = {0};
    MDB_val k = {key_len, (void *)(uintptr_t)key}, v;
    int rc = mdb_get(e->wtxn, e->dbi_groups, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get group");
    }
    if (idx__group_val_decode(v.mv_data, v.mv_size, &g) != 0) {
        return IDX__CORRUPT(e, "group value");
    }
    return g.shared ? 1 : 0;
}

/* The lease row at offset: 0 with *l, 1 when there is none, or a code. */
static int lease_get(struct idx_env *e,
                     MDB_txn *txn,
                     uint64_t queue_id,
                     const char *group,
                     size_t group_len,
                     uint64_t offset,
                     struct idx__lease_val *l)
{
    uint8_t key[IDX__LEASE_KEY_MAX];
    MDB_val k = {idx__lease_key(key, queue_id, group, group_len, offset, false),
                 key},
            v;
    int rc = mdb_get(txn, e->dbi_leases, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get lease");
    }
    if (idx__lease_val_decode(v.mv_data, v.mv_size, l) != 0) {
        return IDX__CORRUPT(e, "lease row of %.*s offset %llu", (int)group_len,
                            group, (unsigned long long)offset);
    }
    return 0;
}

static int lease_put(struct idx_env *e,
                     uint64_t queue_id,
                     const char *group,
                     size_t group_len,
                     uint64_t offset,
                     const struct idx__lease_val *l)
{
    uint8_t key[IDX__LEASE_KEY_MAX], val[IDX__LEASE_VAL_SIZE];
    MDB_val k = {idx__lease_key(key, queue_id, group, group_len, offset, false),
                 key};
    MDB_val v = {sizeof val, val};
    idx__lease_val_encode(val, l);
    int rc = mdb_put(e->wtxn, e->dbi_leases, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put lease") : 0;
}

static int lease_del(struct idx_env *e,
                     uint64_t queue_id,
                     const char *group,
                     size_t group_len,
                     uint64_t offset)
{
    uint8_t key[IDX__LEASE_KEY_MAX];
    MDB_val k = {idx__lease_key(key, queue_id, group, group_len, offset, false),
                 key};
    int rc = mdb_del(e->wtxn, e->dbi_leases, &k, NULL);
    return rc != 0 ? idx__mdb_err(e, rc, "delete lease") : 0;
}

/* A cursor walk over one group's lease rows from offset from, in offset
 * order. */
struct lease_walk
{
    MDB_cursor *cur;
    uint8_t prefix[IDX__LEASE_KEY_MAX];
    size_t prefix_len;
    bool started;
};

static int walk_open(struct idx_env *e,
                     MDB_txn *txn,
                     struct lease_walk *w,
                     uint64_t queue_id,
                     const char *group,
                     size_t group_len)
{
    w->prefix_len =
        idx__lease_key(w->prefix, queue_id, group, group_len, 0, true);
    w->started = false;
    int rc = mdb_cursor_open(txn, e->dbi_leases, &w->cur);
    return rc != 0 ? idx__mdb_err(e, rc, "cursor open") : 0;
}

/* 1 with *offset and *l of the next row at or after from (first call) or
 * after the previous one, 0 at the group's end, or a failure code. */
static int walk_next(struct idx_env *e,
                     struct lease_walk *w,
                     uint64_t from,
                     uint64_t *offset,
                     struct idx__lease_val *l)
{
    uint8_t key[IDX__LEASE_KEY_MAX];
    MDB_val k, v;
    int rc;
    if (!w->started) {
        memcpy(key, w->prefix, w->prefix_len);
        idx__put_be64(key + w->prefix_len, from);
        k.mv_size = w->prefix_len + 8;
        k.mv_data = key;
        rc = mdb_cursor_get(w->cur, &k, &v, MDB_SET_RANGE);
        w->started = true;
    } else {
        rc = mdb_cursor_get(w->cur, &k, &v, MDB_NEXT);
    }
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "lease walk");
    }
    if (k.mv_size != w->prefix_len + 8 ||
        memcmp(k.mv_data, w->prefix, w->prefix_len) != 0) {
        return 0;
    }
    *offset = idx__get_be64((const uint8_t *)k.mv_data + w->prefix_len);
    if (idx__lease_val_decode(v.mv_data, v.mv_size, l) != 0) {
        return IDX__CORRUPT(e, "lease row at offset %llu",
                            (unsigned long long)*offset);
    }
    return 1;
}

/* Move g's floor to its first lease row at or after it, or to next. */
static int floor_settle(struct idx_env *e,
                        uint64_t queue_id,
                        const char *group,
                        size_t group_len,
                        struct idx__group_val *g)
{
    struct lease_walk w;
    struct idx__lease_val l = {0};
    uint64_t off = 0;
    int rc = walk_open(e, e->wtxn, &w, queue_id, group, group_len);
    if (rc != 0) {
        return rc;
    }
    rc = walk_next(e, &w, g->next_offset, &off, &l);
    mdb_cursor_close(w.cur);
    if (rc < 0) {
        return rc;
    }
    g->next_offset = rc == 1 && off < g->next ? off : g->next;
    return 0;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static void done_set(struct idx_result *r, uint32_t i)
{
    r->done[i / 64] |= (uint64_t)1 << (i % 64);
    r->count++;
}

/* The DLQ's stored name for group g of queue[0..queue_len) into out
 * (TERN_NAME_MAX + 1 bytes): the setting, or "<queue>-dlq-<group>", in
 * the queue's namespace. 0, or TERN_EBADNAME when it is no valid name. */
static int dlq_name(const char *queue,
                    size_t queue_len,
                    const char *group,
                    size_t group_len,
                    const struct idx__group_val *g,
                    char *out)
{
    int n;
    const char *pct = memchr(queue, '%', queue_len);
    if (g->settings.dlq[0] == '\0') {
        n = snprintf(out, TERN_NAME_MAX + 1, "%.*s-dlq-%.*s", (int)queue_len,
                     queue, (int)group_len, group);
    } else if (pct != NULL) {
        n = snprintf(out, TERN_NAME_MAX + 1, "%.*s%s", (int)(pct - queue + 1),
                     queue, g->settings.dlq);
    } else {
        n = snprintf(out, TERN_NAME_MAX + 1, "%s", g->settings.dlq);
    }
    if (n < 0 || n > (int)TERN_NAME_MAX || !tern_qname_valid(out, (size_t)n) ||
        ((size_t)n == queue_len && memcmp(out, queue, queue_len) == 0)) {
        return TERN_EBADNAME;
    }
    return 0;
}

/* ---- Apply ----------------------------------------------------------------
 */

/* The command's shared group into *g: 0; 1 with r->status set (none:
 * TERN_ENOTFOUND; a stream group: TERN_EINVAL); or a failure code. */
static int cmd_group(struct idx_env *e,
                     const struct idx__queue_val *q,
                     const struct idx__cmd *c,
                     struct idx__group_val *g,
                     struct idx_result *r)
{
    int rc = group_get(e, e->wtxn, q->id, c->group, c->group_len, g);
    if (rc == 1) {
        r->status = TERN_ENOTFOUND;
    } else if (rc == 0 && !g->shared) {
        r->status = TERN_EINVAL;
        rc = 1;
    }
    return rc;
}

static int apply_config(struct idx_env *e,
                        const struct idx__queue_val *q,
                        const struct idx__cmd *c,
                        struct idx_result *r)
{
    struct idx__group_val g = {0};
    char dlq[TERN_NAME_MAX + 1];
    memset(&g, 0, sizeof g);
    int rc = group_get(e, e->wtxn, q->id, c->group, c->group_len, &g);
    if (rc < 0) {
        return rc;
    }
    if (rc == 0 && !g.shared) {
        r->status = TERN_EINVAL; /* a stream group of that name */
        return 0;
    }
    if (rc == 1) {
        memset(&g, 0, sizeof g);
        g.shared = true;
        g.next_offset = q->start_offset;
        g.next = q->start_offset;
        idx_shared_settings_default(&g.settings);
    }
    if ((c->mask & IDX_SHARED_SET_ACK_TIMEOUT) != 0) {
        g.settings.ack_timeout_ms = c->shared.ack_timeout_ms;
    }
    if ((c->mask & IDX_SHARED_SET_MAX_DELIVERIES) != 0) {
        g.settings.max_deliveries = c->shared.max_deliveries;
    }
    if ((c->mask & IDX_SHARED_SET_WINDOW) != 0) {
        g.settings.window = c->shared.window;
    }
    if ((c->mask & IDX_SHARED_SET_DLQ) != 0) {
        memcpy(g.settings.dlq, c->shared.dlq, sizeof g.settings.dlq);
    }
    if (dlq_name(c->queue, c->queue_len, c->group, c->group_len, &g, dlq)) {
        r->status = TERN_EBADNAME;
        return 0;
    }
    return group_put(e, q->id, c->group, c->group_len, &g);
}

static int apply_deliver(struct idx_env *e,
                         const struct idx__queue_val *q,
                         uint64_t t,
                         const struct idx__cmd *c,
                         struct idx_result *r)
{
    struct idx__group_val g = {0};
    struct idx_deliver_item it = {0};
    struct idx__lease_val l = {0};
    int rc = cmd_group(e, q, c, &g, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    uint64_t next0 = g.next;
    for (uint32_t i = 0; i < c->n_items; i++) {
        idx__cmd_deliver_item(c, i, &it);
        if (it.count == 0) {
            if (it.offset != g.next || g.next >= q->next_offset ||
                g.next - g.next_offset >= g.settings.window) {
                continue;
            }
            l.count = 1;
            g.next++;
        } else {
            rc = lease_get(e, e->wtxn, q->id, c->group, c->group_len, it.offset,
                           &l);
            if (rc < 0) {
                return rc;
            }
            if (rc == 1 || l.count != it.count || l.deadline_ms > t ||
                l.count >= g.settings.max_deliveries) {
                continue;
            }
            l.count++;
        }
        l.state = IDX__LEASE_LEASED;
        l.consumer_id = c->consumer_id;
        l.deadline_ms = add_sat(t, g.settings.ack_timeout_ms);
        rc = lease_put(e, q->id, c->group, c->group_len, it.offset, &l);
        if (rc != 0) {
            return rc;
        }
        done_set(r, i);
    }
    if (g.next == next0) {
        return 0;
    }
    return group_put(e, q->id, c->group, c->group_len, &g);
}

static int apply_settle(struct idx_env *e,
                        const struct idx__queue_val *q,
                        uint64_t t,
                        const struct idx__cmd *c,
                        struct idx_result *r)
{
    struct idx__group_val g = {0};
    struct idx_settle_item it = {0};
    struct idx__lease_val l = {0};
    bool floor_gone = false;
    int rc = cmd_group(e, q, c, &g, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    for (uint32_t i = 0; i < c->n_items; i++) {
        idx__cmd_settle_item(c, i, &it);
        rc =
            lease_get(e, e->wtxn, q->id, c->group, c->group_len, it.offset, &l);
        if (rc < 0) {
            return rc;
        }
        if (rc == 1 && it.action == IDX_SETTLE_ACK && it.offset < g.next) {
            /* Delivered and without a row: acknowledged (maybe by this
             * very ack, resent after its answer was lost), dead-lettered
             * or trimmed. Acks are idempotent: done, nothing changes. */
            done_set(r, i);
            continue;
        }
        if (rc == 1 || l.count != it.count ||
            (it.action == IDX_SETTLE_EXTEND && l.state != IDX__LEASE_LEASED)) {
            continue; /* stale: the message moved on */
        }
        if (it.action == IDX_SETTLE_ACK) {
            rc = lease_del(e, q->id, c->group, c->group_len, it.offset);
            floor_gone = floor_gone || it.offset == g.next_offset;
        } else {
            l.state = it.action == IDX_SETTLE_EXTEND ? IDX__LEASE_LEASED
                                                     : IDX__LEASE_READY;
            l.deadline_ms = add_sat(t, it.delay_ms);
            rc = lease_put(e, q->id, c->group, c->group_len, it.offset, &l);
        }
        if (rc != 0) {
            return rc;
        }
        done_set(r, i);
    }
    if (!floor_gone) {
        return 0;
    }
    rc = floor_settle(e, q->id, c->group, c->group_len, &g);
    if (rc != 0) {
        return rc;
    }
    return group_put(e, q->id, c->group, c->group_len, &g);
}

int idx__shared_apply(struct idx_env *e,
                      const struct idx__queue_val *q,
                      uint64_t t,
                      const struct idx__cmd *c,
                      struct idx_result *r)
{
    switch (c->type) {
    case IDX_CMD_SHARED_CONFIG:
        return apply_config(e, q, c, r);
    case IDX_CMD_DELIVER:
        return apply_deliver(e, q, t, c, r);
    case IDX_CMD_SETTLE:
        return apply_settle(e, q, t, c, r);
    default:
        return IDX__CORRUPT(e, "shared apply of command type %u", c->type);
    }
}

int idx__shared_dl_check(struct idx_env *e,
                         const struct idx__queue_val *q,
                         uint64_t t,
                         const struct idx__cmd *c,
                         char *dlq,
                         struct idx_result *r)
{
    struct idx__group_val g = {0};
    struct idx__lease_val l = {0};
    int rc = cmd_group(e, q, c, &g, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    rc = lease_get(e, e->wtxn, q->id, c->group, c->group_len, c->dl.offset, &l);
    if (rc < 0) {
        return rc;
    }
    if (rc == 1 || l.count != c->dl.count || l.deadline_ms > t) {
        return 0; /* moved on: status 0, count 0 */
    }
    if (dlq_name(c->queue, c->queue_len, c->group, c->group_len, &g, dlq)) {
        r->status = TERN_EBADNAME;
        return 0;
    }
    return 1;
}

int idx__shared_dl_finish(struct idx_env *e,
                          const struct idx__queue_val *q,
                          const struct idx__cmd *c)
{
    struct idx__group_val g = {0};
    int rc = group_get(e, e->wtxn, q->id, c->group, c->group_len, &g);
    if (rc != 0) {
        return rc < 0 ? rc : IDX__CORRUPT(e, "group of a dead letter gone");
    }
    rc = lease_del(e, q->id, c->group, c->group_len, c->dl.offset);
    if (rc != 0 || c->dl.offset != g.next_offset) {
        return rc;
    }
    rc = floor_settle(e, q->id, c->group, c->group_len, &g);
    if (rc != 0) {
        return rc;
    }
    return group_put(e, q->id, c->group, c->group_len, &g);
}

/* One shared group of a TRIM: rows below to go, floor and next move up. */
static int trim_group(struct idx_env *e,
                      uint64_t queue_id,
                      const char *group,
                      size_t group_len,
                      uint64_t to,
                      struct idx__group_val *g)
{
    struct lease_walk w;
    struct idx__lease_val l = {0};
    uint64_t off = 0;
    int rc = walk_open(e, e->wtxn, &w, queue_id, group, group_len);
    if (rc != 0) {
        return rc;
    }
    /* Rows lie in [floor, next): at most window of them. */
    while ((rc = walk_next(e, &w, g->next_offset, &off, &l)) == 1 && off < to) {
        int mrc = mdb_cursor_del(w.cur, 0);
        if (mrc != 0) {
            rc = idx__mdb_err(e, mrc, "delete lease");
            break;
        }
    }
    mdb_cursor_close(w.cur);
    if (rc < 0) {
        return rc;
    }
    g->next = TERN_MAX(g->next, to);
    g->next_offset = TERN_MAX(g->next_offset, to);
    return floor_settle(e, queue_id, group, group_len, g);
}

int idx__shared_trim(struct idx_env *e, uint64_t queue_id, uint64_t to)
{
    MDB_cursor *cur;
    uint8_t prefix[8];
    MDB_val k = {sizeof prefix, prefix}, v;
    int rc = mdb_cursor_open(e->wtxn, e->dbi_groups, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    idx__put_be64(prefix, queue_id);
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__group_val g = {0};
        char name[TERN_NAME_MAX];
        size_t n = k.mv_size - sizeof prefix;
        if (k.mv_size <= sizeof prefix || n > TERN_NAME_MAX ||
            memcmp(k.mv_data, prefix, sizeof prefix) != 0) {
            break;
        }
        if (idx__group_val_decode(v.mv_data, v.mv_size, &g) != 0) {
            rc = IDX__CORRUPT(e, "group row of queue id %llu",
                              (unsigned long long)queue_id);
            break;
        }
        if (!g.shared || (g.next_offset >= to && g.next >= to)) {
            continue;
        }
        memcpy(name, (const uint8_t *)k.mv_data + sizeof prefix, n);
        rc = trim_group(e, queue_id, name, n, to, &g);
        if (rc == 0) {
            uint8_t val[IDX__GROUP_VAL_MAX];
            MDB_val nv = {idx__group_val_encode(val, &g), val};
            int prc = mdb_cursor_put(cur, &k, &nv, MDB_CURRENT);
            rc = prc != 0 ? idx__mdb_err(e, prc, "put group") : 0;
        }
        if (rc != 0) {
            break;
        }
    }
    mdb_cursor_close(cur);
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "group walk");
    }
    return rc;
}

/* ---- The leader's plans and reads (flushed state) --------------------------
 */

/* A read txn with the queue and its shared group: 0, or a code (errmsg
 * set; the txn is closed). */
static int read_group(struct idx_env *e,
                      const char *queue,
                      const char *group,
                      MDB_txn **txn,
                      struct idx__queue_val *q,
                      struct idx__group_val *g)
{
    size_t qn = queue != NULL ? strnlen(queue, TERN_NAME_MAX + 1) : 0;
    size_t gn = group != NULL ? strnlen(group, TERN_NAME_MAX + 1) : 0;
    MDB_val k = {qn, (void *)(uintptr_t)queue}, v;
    if (!tern_qname_valid(queue, qn) || !tern_name_valid(group, gn)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid queue or group");
    }
    int rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, txn);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "begin read txn");
    }
    rc = mdb_get(*txn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOQUEUE, __LINE__, "no queue %s", queue);
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get queue");
    } else if (idx__queue_val_decode(v.mv_data, v.mv_size, q) != 0) {
        rc = IDX__CORRUPT(e, "queue value of %s", queue);
    } else {
        rc = group_get(e, *txn, q->id, group, gn, g);
        if (rc == 1) {
            rc = idx__fail(e, TERN_ENOTFOUND, __LINE__,
                           "no group %s on queue %s", group, queue);
        } else if (rc == 0 && !g->shared) {
            rc = idx__fail(e, TERN_EINVAL, __LINE__,
                           "group %s of queue %s is a stream group", group,
                           queue);
        }
    }
    if (rc != 0) {
        mdb_txn_abort(*txn);
    }
    return rc;
}

/* Whether the message at off (queue id qid) still fits a plan bounded by
 * max_bytes (0: unbounded) that counts *bytes of *counted messages so far
 * (the first message counted always fits); if so, it is counted: its
 * data, properties and msg_overhead. A message without a row (trimmed,
 * skipped by the answer) fits and is not counted. 1 fits, 0 not, or a
 * code. */
static int plan_fits(struct idx_env *e,
                     MDB_txn *txn,
                     uint64_t qid,
                     uint64_t off,
                     uint64_t max_bytes,
                     uint32_t msg_overhead,
                     uint64_t *bytes,
                     uint32_t *counted)
{
    uint8_t key[IDX__MSG_KEY_SIZE];
    struct idx__msg_val m = {0};
    MDB_val k = {sizeof key, key}, v;
    if (max_bytes == 0) {
        return 1;
    }
    idx__msg_key(key, qid, off);
    int rc = mdb_get(txn, e->dbi_msgs, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get message");
    }
    if (idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0) {
        return IDX__CORRUPT(e, "queue id %llu: index entry %llu",
                            (unsigned long long)qid, (unsigned long long)off);
    }
    uint64_t size = (uint64_t)m.len + m.props_len + msg_overhead;
    if (*counted > 0 && *bytes + size > max_bytes) {
        return 0;
    }
    *bytes += size;
    (*counted)++;
    return 1;
}

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
                     uint32_t *n_dead)
{
    MDB_txn *txn = NULL;
    struct idx__queue_val q = {0};
    struct idx__group_val g = {0};
    struct lease_walk w;
    struct idx__lease_val l = {0};
    uint64_t off = 0, bytes = 0;
    uint32_t held = 0, counted = 0;
    int fits = 1;
    *n = 0;
    *n_dead = 0;
    int rc = read_group(e, queue, group, &txn, &q, &g);
    if (rc != 0) {
        return rc;
    }
    max_n = TERN_MIN(max_n, IDX_SHARED_LIST_MAX);
    rc = walk_open(e, txn, &w, q.id, group, strlen(group));
    if (rc != 0) {
        goto out;
    }
    /* Leases the consumer holds count against its prefetch. */
    while ((rc = walk_next(e, &w, g.next_offset, &off, &l)) == 1) {
        if (l.state == IDX__LEASE_LEASED && l.consumer_id == consumer_id &&
            l.deadline_ms > t) {
            held++;
        }
    }
    if (rc < 0) {
        goto close;
    }
    uint32_t budget = held >= prefetch ? 0 : TERN_MIN(max_n, prefetch - held);
    w.started = false;
    while (*n < budget &&
           (rc = walk_next(e, &w, g.next_offset, &off, &l)) == 1) {
        if (l.deadline_ms > t) {
            continue;
        }
        struct idx_deliver_item d = {off, l.count};
        if (l.count >= g.settings.max_deliveries) {
            if (*n_dead < max_dead) {
                dead[(*n_dead)++] = d;
            }
            continue;
        }
        fits = plan_fits(e, txn, q.id, off, max_bytes, msg_overhead, &bytes,
                         &counted);
        if (fits <= 0) {
            break;
        }
        out[(*n)++] = d;
    }
    if (rc < 0 || fits < 0) {
        rc = fits < 0 ? fits : rc;
        goto close;
    }
    rc = 0;
    for (uint64_t o = g.next; fits == 1 && *n < budget && o < q.next_offset &&
                              o - g.next_offset < g.settings.window;
         o++) {
        fits = plan_fits(e, txn, q.id, o, max_bytes, msg_overhead, &bytes,
                         &counted);
        if (fits == 1) {
            out[(*n)++] = (struct idx_deliver_item){o, 0};
        }
    }
    rc = fits < 0 ? fits : 0;
close:
    mdb_cursor_close(w.cur);
out:
    mdb_txn_abort(txn);
    return rc;
}

int idx_dead_letter_plan(struct idx_env *e,
                         const char *queue,
                         const char *group,
                         const struct idx_deliver_item *d,
                         const char *reason,
                         struct tern_wbuf *w)
{
    MDB_txn *txn = NULL;
    struct idx__queue_val q = {0};
    struct idx__group_val g = {0};
    struct idx__msg_val m = {0};
    struct idx__record rec = {0};
    uint8_t key[IDX__MSG_KEY_SIZE];
    int rc = read_group(e, queue, group, &txn, &q, &g);
    if (rc != 0) {
        return rc;
    }
    idx__msg_key(key, q.id, d->offset);
    MDB_val k = {sizeof key, key}, v;
    rc = d->offset < q.start_offset ? MDB_NOTFOUND
                                    : mdb_get(txn, e->dbi_msgs, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOTFOUND, __LINE__,
                       "queue %s offset %llu is not retained", queue,
                       (unsigned long long)d->offset);
        goto out;
    }
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get message");
        goto out;
    }
    if (idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0) {
        rc = IDX__CORRUPT(e, "message row of %s", queue);
        goto out;
    }
    rc = idx__log_read_record(e, m.rec_pos, e->log_end, &rec);
    if (rc != 0) {
        rc = rc == TERN_EMALFORMED ? TERN_ECORRUPT : rc;
        goto out;
    }
    const uint8_t *p = e->rbuf + IDX__REC_HDR_SIZE;
    if ((uint64_t)m.data_off + m.len > rec.payload_len ||
        (uint64_t)m.props_off + m.props_len > rec.payload_len) {
        rc = IDX__CORRUPT(e, "message row of %s past its record", queue);
        goto out;
    }
    struct idx_pmsg pm = {p + m.data_off, m.len, p + m.props_off, m.props_len};
    idx_cmd_dead_letter(w, queue, group, d->offset, d->count, reason, &pm);
    rc = w->err;
out:
    mdb_txn_abort(txn);
    return rc;
}

int idx_shared_group_get(struct idx_env *e,
                         const char *queue,
                         const char *group,
                         struct idx_shared_group *out)
{
    MDB_txn *txn = NULL;
    struct idx__queue_val q = {0};
    struct idx__group_val g = {0};
    struct lease_walk w;
    struct idx__lease_val l = {0};
    uint64_t off = 0;
    int rc = read_group(e, queue, group, &txn, &q, &g);
    if (rc != 0) {
        return rc;
    }
    memset(out, 0, sizeof *out);
    out->settings = g.settings;
    out->floor = g.next_offset;
    out->next = g.next;
    rc = walk_open(e, txn, &w, q.id, group, strlen(group));
    if (rc == 0) {
        while ((rc = walk_next(e, &w, 0, &off, &l)) == 1) {
            out->rows++;
        }
        mdb_cursor_close(w.cur);
    }
    mdb_txn_abort(txn);
    return rc < 0 ? rc : 0;
}

int idx_shared_leases(struct idx_env *e,
                      const char *queue,
                      const char *group,
                      uint64_t from,
                      uint32_t max,
                      int (*cb)(void *arg, const struct idx_lease *l),
                      void *arg)
{
    MDB_txn *txn = NULL;
    struct idx__queue_val q = {0};
    struct idx__group_val g = {0};
    struct lease_walk w;
    struct idx__lease_val l = {0};
    uint64_t off = 0;
    uint32_t n = 0;
    int rc = read_group(e, queue, group, &txn, &q, &g);
    if (rc != 0) {
        return rc;
    }
    rc = walk_open(e, txn, &w, q.id, group, strlen(group));
    if (rc == 0) {
        while (n < max && (rc = walk_next(e, &w, from, &off, &l)) == 1) {
            struct idx_lease x = {off, l.count, l.state, l.consumer_id,
                                  l.deadline_ms};
            n++;
            if (cb(arg, &x) != 0) {
                break;
            }
        }
        mdb_cursor_close(w.cur);
    }
    mdb_txn_abort(txn);
    return rc < 0 ? rc : 0;
}

int idx__shared_dlq_name(const char *queue,
                         size_t queue_len,
                         const char *group,
                         size_t group_len,
                         const struct idx__group_val *g,
                         char *out)
{
    return dlq_name(queue, queue_len, group, group_len, g, out);
}
