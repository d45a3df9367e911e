/*
 * Group status and delivery states (docs/WORKQUEUES.md, "Group status"):
 * read-only views of the groups of a queue for GROUP_STATUS and message
 * trace. Everything is read in one read txn of the flushed state: the
 * group rows (DBI "groups"), the lease rows of shared groups (DBI
 * "leases", bounded walks), and the queue rows of the queue and of a
 * shared group's DLQ (its depth). Formats are keys.c's; nothing here
 * writes.
 */
#include <string.h>

#include "idx_int.h"

static int rtxn(struct idx_env *e,
                const char *queue,
                MDB_txn **txn,
                struct idx__queue_val *q)
{
    size_t qn = queue != NULL ? strnlen(queue, TERN_NAME_MAX + 1) : 0;
    if (!tern_qname_valid(queue, qn)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid queue name");
    }
    int rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, txn);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "begin read txn");
    }
    MDB_val k = {qn, (void *)(uintptr_t)queue}, v;
    rc = mdb_get(*txn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOQUEUE, __LINE__, "no queue %s", queue);
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get queue");
    } else if (idx__queue_val_decode(v.mv_data, v.mv_size, q) != 0) {
        rc = IDX__CORRUPT(e, "queue value of %s", queue);
    }
    if (rc != 0) {
        mdb_txn_abort(*txn);
    }
    return rc;
}

/* Messages of the queue named name in txn (end - first offset), 0 when
 * there is none. */
static int queue_depth(struct idx_env *e,
                       MDB_txn *txn,
                       const char *name,
                       uint64_t *depth)
{
    struct idx__queue_val q;
    MDB_val k = {strlen(name), (void *)(uintptr_t)name}, v;
    *depth = 0;
    int rc = mdb_get(txn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get queue");
    }
    if (idx__queue_val_decode(v.mv_data, v.mv_size, &q) != 0) {
        return IDX__CORRUPT(e, "queue value of %s", name);
    }
    *depth = q.next_offset - q.start_offset;
    return 0;
}

static void consumer_count(struct idx_group_status *s,
                           struct idx_status_consumer *track,
                           uint64_t id)
{
    for (uint32_t i = 0; i < s->consumers_seen; i++) {
        if (track[i].id == id) {
            track[i].held++;
            return;
        }
    }
    if (s->consumers_seen < IDX_STATUS_TRACK_MAX) {
        track[s->consumers_seen++] = (struct idx_status_consumer){id, 1};
        return;
    }
    s->others_held++;
}

/* The top IDX_STATUS_CONSUMERS_MAX of track[0..s->consumers_seen) by
 * held (then by id) into s->consumers. */
static void consumers_top(struct idx_group_status *s,
                          struct idx_status_consumer *track)
{
    uint32_t n = s->consumers_seen;
    for (uint32_t k = 0; k < n && k < IDX_STATUS_CONSUMERS_MAX; k++) {
        uint32_t best = k;
        for (uint32_t i = k + 1; i < n; i++) {
            if (track[i].held > track[best].held ||
                (track[i].held == track[best].held &&
                 track[i].id < track[best].id)) {
                best = i;
            }
        }
        struct idx_status_consumer t = track[k];
        track[k] = track[best];
        track[best] = t;
        s->consumers[k] = track[k];
        s->n_consumers = k + 1;
    }
}

/* Fill the shared part of s from the lease rows of group (queue id qid),
 * at most max_rows of them; *rows (OUT) = rows read. */
static int shared_walk(struct idx_env *e,
                       MDB_txn *txn,
                       uint64_t qid,
                       const char *group,
                       size_t group_len,
                       uint64_t now_ms,
                       uint32_t max_rows,
                       struct idx_group_status *s,
                       uint64_t *rows)
{
    struct idx_status_consumer track[IDX_STATUS_TRACK_MAX] = {{0, 0}};
    uint8_t prefix[IDX__LEASE_KEY_MAX];
    size_t pn = idx__lease_key(prefix, qid, group, group_len, 0, true);
    MDB_cursor *cur;
    MDB_val k = {pn, prefix}, v;
    *rows = 0;
    int rc = mdb_cursor_open(txn, e->dbi_leases, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    rc = 0;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__lease_val l;
        if (k.mv_size != pn + 8 || memcmp(k.mv_data, prefix, pn) != 0) {
            break;
        }
        if (*rows >= max_rows) {
            s->partial = true;
            break;
        }
        (*rows)++;
        if (idx__lease_val_decode(v.mv_data, v.mv_size, &l) != 0) {
            rc = IDX__CORRUPT(e, "lease row of group %s", group);
            break;
        }
        if (l.state == IDX__LEASE_LEASED && l.deadline_ms > now_ms) {
            s->in_flight++;
            if (s->oldest_deadline_ms == 0 ||
                l.deadline_ms < s->oldest_deadline_ms) {
                s->oldest_deadline_ms = l.deadline_ms;
            }
            consumer_count(s, track, l.consumer_id);
        } else {
            s->ready++;
        }
    }
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "lease walk");
    }
    mdb_cursor_close(cur);
    if (rc == 0) {
        consumers_top(s, track);
    }
    return rc;
}

/* The status of the group whose row is (name[0..n), v) of queue q. */
static int one_status(struct idx_env *e,
                      MDB_txn *txn,
                      const char *queue,
                      const struct idx__queue_val *q,
                      const char *name,
                      size_t n,
                      const MDB_val *v,
                      uint64_t now_ms,
                      uint32_t max_rows,
                      struct idx_group_status *s,
                      uint64_t *rows)
{
    struct idx__group_val g;
    memset(s, 0, sizeof *s);
    *rows = 0;
    if (n > TERN_NAME_MAX || !tern_name_valid(name, n) ||
        idx__group_val_decode(v->mv_data, v->mv_size, &g) != 0) {
        return IDX__CORRUPT(e, "group row of queue %s", queue);
    }
    memcpy(s->name, name, n);
    s->name[n] = '\0';
    s->shared = g.shared;
    s->start = q->start_offset;
    s->end = q->next_offset;
    s->committed = g.next_offset;
    s->next = g.shared ? g.next : g.next_offset;
    s->commit_ms = g.shared ? 0 : g.commit_ms;
    uint64_t from = TERN_MAX(s->committed, s->start);
    s->lag = s->end > from ? s->end - from : 0;
    if (!g.shared) {
        uint8_t key[IDX__GROUP_KEY_MAX];
        struct idx_claim cl;
        size_t kn = idx__group_key(key, q->id, name, n);
        int rc = idx__claim_read(e, txn, key, kn, &cl);
        if (rc == 0 && cl.until_ms > now_ms) {
            s->claim_holder = cl.holder;
            s->claim_until_ms = cl.until_ms;
        }
        return rc < 0 ? rc : 0;
    }
    s->settings = g.settings;
    if (idx__shared_dlq_name(queue, strlen(queue), name, n, &g, s->dlq) != 0) {
        s->dlq[0] = '\0';
    } else {
        int rc = queue_depth(e, txn, s->dlq, &s->dlq_depth);
        if (rc != 0) {
            return rc;
        }
    }
    return shared_walk(e, txn, q->id, name, n, now_ms, max_rows, s, rows);
}

int idx_group_status(struct idx_env *e,
                     const char *queue,
                     const char *group,
                     uint64_t now_ms,
                     uint32_t max_rows,
                     struct idx_group_status *out)
{
    MDB_txn *txn = NULL;
    struct idx__queue_val q = {0};
    uint8_t key[IDX__GROUP_KEY_MAX];
    uint64_t rows;
    size_t gn = group != NULL ? strnlen(group, TERN_NAME_MAX + 1) : 0;
    if (!tern_name_valid(group, gn)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid group name");
    }
    int rc = rtxn(e, queue, &txn, &q);
    if (rc != 0) {
        return rc;
    }
    MDB_val k = {idx__group_key(key, q.id, group, gn), key}, v;
    rc = mdb_get(txn, e->dbi_groups, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOTFOUND, __LINE__, "no group %s on queue %s",
                       group, queue);
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get group");
    } else {
        rc = one_status(e, txn, queue, &q, group, gn, &v, now_ms,
                        TERN_MAX(max_rows, 1u), out, &rows);
    }
    mdb_txn_abort(txn);
    return rc;
}

/* A cursor over the group rows of queue id qid after name after
 * (after_len 0: from the first): the first row into k, v; 0, or
 * MDB_NOTFOUND at the end, or an LMDB code. */
static int groups_first(MDB_cursor *cur,
                        uint8_t *key,
                        uint64_t qid,
                        const char *after,
                        size_t after_len,
                        MDB_val *k,
                        MDB_val *v)
{
    k->mv_size = idx__group_key(key, qid, after, after_len);
    k->mv_data = key;
    int mrc = mdb_cursor_get(cur, k, v, MDB_SET_RANGE);
    if (mrc == 0 && after_len > 0 && k->mv_size == 8 + after_len &&
        memcmp(k->mv_data, key, 8 + after_len) == 0) {
        mrc = mdb_cursor_get(cur, k, v, MDB_NEXT);
    }
    return mrc;
}

static bool in_queue(const MDB_val *k, const uint8_t *prefix)
{
    return k->mv_size > 8 && memcmp(k->mv_data, prefix, 8) == 0;
}

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
                          bool *more)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    struct idx__queue_val q = {0};
    struct idx_group_status s;
    uint8_t key[IDX__GROUP_KEY_MAX];
    MDB_val k, v;
    size_t an = after != NULL ? strnlen(after, TERN_NAME_MAX + 1) : 0;
    uint64_t total = 0, rows;
    uint32_t n = 0;
    *more = false;
    if (an > 0 && !tern_name_valid(after, an)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid group name");
    }
    int rc = rtxn(e, queue, &txn, &q);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_open(txn, e->dbi_groups, &cur);
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        goto out;
    }
    int mrc = groups_first(cur, key, q.id, an > 0 ? after : "", an, &k, &v);
    for (; mrc == 0 && in_queue(&k, key);
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (n >= TERN_MAX(max, 1u) || total >= max_total_rows) {
            *more = true;
            break;
        }
        uint32_t bound = (uint32_t)TERN_MIN((uint64_t)TERN_MAX(max_rows, 1u),
                                            max_total_rows - total);
        rc = one_status(e, txn, queue, &q, (const char *)k.mv_data + 8,
                        k.mv_size - 8, &v, now_ms, bound, &s, &rows);
        if (rc != 0) {
            break;
        }
        total += rows;
        n++;
        if (cb(arg, &s) != 0) {
            break;
        }
    }
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "group walk");
    }
out:
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return rc;
}

int idx_message_deliveries(struct idx_env *e,
                           const char *queue,
                           uint64_t offset,
                           int (*cb)(void *arg, const struct idx_delivery *d),
                           void *arg)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    struct idx__queue_val q = {0};
    uint8_t key[IDX__GROUP_KEY_MAX];
    char name[TERN_NAME_MAX + 1];
    MDB_val k, v;
    int rc = rtxn(e, queue, &txn, &q);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_open(txn, e->dbi_groups, &cur);
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        goto out;
    }
    int mrc = groups_first(cur, key, q.id, "", 0, &k, &v);
    for (; mrc == 0 && in_queue(&k, key);
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__group_val g;
        size_t n = k.mv_size - 8;
        const char *gn = (const char *)k.mv_data + 8;
        if (n > TERN_NAME_MAX || !tern_name_valid(gn, n) ||
            idx__group_val_decode(v.mv_data, v.mv_size, &g) != 0) {
            rc = IDX__CORRUPT(e, "group row of queue %s", queue);
            break;
        }
        if (!g.shared) {
            continue;
        }
        memcpy(name, gn, n);
        name[n] = '\0';
        struct idx_delivery d = {name, IDX_DELIVERY_SETTLED, 0, 0, 0};
        if (offset >= g.next) {
            d.state = IDX_DELIVERY_NEW;
        } else if (offset >= g.next_offset) {
            uint8_t lk[IDX__LEASE_KEY_MAX];
            struct idx__lease_val l;
            MDB_val lkv = {idx__lease_key(lk, q.id, gn, n, offset, false), lk},
                    lv;
            int grc = mdb_get(txn, e->dbi_leases, &lkv, &lv);
            if (grc == 0) {
                if (idx__lease_val_decode(lv.mv_data, lv.mv_size, &l) != 0) {
                    rc = IDX__CORRUPT(e, "lease row of group %s", name);
                    break;
                }
                d.state = l.state == IDX__LEASE_LEASED ? IDX_DELIVERY_LEASED
                                                       : IDX_DELIVERY_READY;
                d.count = l.count;
                d.consumer_id = l.consumer_id;
                d.deadline_ms = l.deadline_ms;
            } else if (grc != MDB_NOTFOUND) {
                rc = idx__mdb_err(e, grc, "get lease");
                break;
            }
        }
        if (cb(arg, &d) != 0) {
            break;
        }
    }
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "group walk");
    }
out:
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return rc;
}
