/*
 * Message rows by range and by time, and the row cleaner.
 *
 * Retention moves a queue's start_offset (apply.c) and QUEUE_DELETE frees
 * a queue's name, both in the apply txn and both O(what they decide), not
 * O(rows): the LMDB rows they leave behind (msgs rows below start_offset,
 * every msgs/groups/producers/keys row of a deleted queue, and the key
 * index row of each message deleted by range) are deleted here, by
 * idx_clean_step, in batches of at most budget rows. Reads never look
 * below start_offset nor at a deleted queue's id (ids are never reused),
 * so a row awaiting deletion is never served. The cleaner is local to the
 * node: it is not replicated and decides nothing; every node's reads give
 * the same answers whether or not its cleaner has caught up.
 *
 * What is left to clean is recorded by the apply txn as work marks in
 * meta ("dead" + queue id, "trim" + queue id -> name; keys.c) and removed
 * here once done, so the cleaner never scans the queues to find work. The
 * rebuild at idx_open replays the marks with the entries, and the cleaner
 * then removes the rows the replay re-created.
 *
 * The cleaner works in the pending write txn (txn.c) and commits it with
 * idx_flush: LMDB has one writer per env, so a txn of its own would have
 * to commit the pending one first anyway.
 */
#include "idx_int.h"

int idx__msgs_time_search(struct idx_env *e,
                          MDB_txn *txn,
                          uint64_t queue_id,
                          uint64_t lo,
                          uint64_t hi,
                          uint64_t time_ms,
                          uint64_t *offset)
{
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        uint8_t key[IDX__MSG_KEY_SIZE];
        struct idx__msg_val m;
        idx__msg_key(key, queue_id, mid);
        MDB_val k = {sizeof key, key}, v;
        int rc = mdb_get(txn, e->dbi_msgs, &k, &v);
        if (rc == MDB_NOTFOUND) {
            return IDX__CORRUPT(e, "queue id %llu: index entry %llu missing",
                                (unsigned long long)queue_id,
                                (unsigned long long)mid);
        }
        if (rc != 0) {
            return idx__mdb_err(e, rc, "get message");
        }
        if (idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0) {
            return IDX__CORRUPT(e, "queue id %llu: index entry %llu",
                                (unsigned long long)queue_id,
                                (unsigned long long)mid);
        }
        if (m.timestamp_ms >= time_ms) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    *offset = lo;
    return 0;
}

/* The key index row of the message at offset (msgs value v), if it has a
 * key: deleted with the msgs row. 0 or an LMDB code. */
static int key_row_del(struct idx_env *e,
                       uint64_t queue_id,
                       uint64_t offset,
                       const MDB_val *v)
{
    struct idx__msg_val m;
    uint8_t row[IDX__KEY_ROW_MAX];
    if (idx__msg_val_decode(v->mv_data, v->mv_size, &m) != 0 ||
        m.key_len == 0) {
        return 0; /* a damaged row has no key row to find */
    }
    MDB_val rk = {idx__key_row(row, queue_id, m.key, m.key_len, offset, false),
                  row};
    int rc = mdb_del(e->wtxn, e->dbi_keys, &rk, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int idx__clean_range(struct idx_env *e,
                     uint64_t queue_id,
                     uint64_t from,
                     uint64_t to,
                     unsigned budget,
                     unsigned *deleted)
{
    MDB_cursor *cur;
    uint8_t key[IDX__MSG_KEY_SIZE], end[IDX__MSG_KEY_SIZE];
    MDB_val k, v;
    unsigned n = 0;
    int rc = mdb_cursor_open(e->wtxn, e->dbi_msgs, &cur);
    *deleted = 0;
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    idx__msg_key(end, queue_id, to);
    while (n < budget && from < to) {
        idx__msg_key(key, queue_id, from);
        k.mv_size = sizeof key;
        k.mv_data = key;
        /* Re-seek after every delete (as apply.c's walks): immune to the
         * cursor position rules after mdb_cursor_del. */
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc != 0 || k.mv_size != sizeof key ||
            memcmp(k.mv_data, end, sizeof end) >= 0) {
            break;
        }
        from = idx__get_be64((const uint8_t *)k.mv_data + 8) + 1;
        rc = key_row_del(e, queue_id, from - 1, &v);
        if (rc != 0) {
            break;
        }
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0) {
            break;
        }
        n++;
    }
    mdb_cursor_close(cur);
    *deleted = n;
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "delete messages");
    }
    return 0;
}

/* Delete at most budget keys of dbi starting with the 8-byte prefix;
 * *deleted (OUT). */
static int clean_prefix(struct idx_env *e,
                        MDB_dbi dbi,
                        const uint8_t *prefix,
                        unsigned budget,
                        unsigned *deleted)
{
    MDB_cursor *cur;
    MDB_val k, v;
    unsigned n = 0;
    int rc = mdb_cursor_open(e->wtxn, dbi, &cur);
    *deleted = 0;
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    while (n < budget) {
        k.mv_size = 8;
        k.mv_data = (void *)(uintptr_t)prefix;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc != 0 || k.mv_size < 8 || memcmp(k.mv_data, prefix, 8) != 0) {
            break;
        }
        rc = mdb_cursor_del(cur, 0);
        if (rc != 0) {
            break;
        }
        n++;
    }
    mdb_cursor_close(cur);
    *deleted = n;
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "delete range");
    }
    return 0;
}

int idx__mark_put(struct idx_env *e,
                  const char *kind,
                  uint64_t queue_id,
                  const char *name,
                  size_t name_len)
{
    uint8_t key[IDX__MARK_KEY_SIZE];
    idx__mark_key(key, kind, queue_id);
    MDB_val k = {sizeof key, key};
    MDB_val v = {name_len, (void *)(uintptr_t)name};
    int rc = mdb_put(e->wtxn, e->dbi_meta, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put work mark") : 0;
}

/* The first mark of kind in txn: 1 with *queue_id and (for "trim") the
 * name copied into name[0..*name_len), 0 when there is none. */
static int mark_first(struct idx_env *e,
                      MDB_txn *txn,
                      const char *kind,
                      uint64_t *queue_id,
                      char *name,
                      size_t *name_len)
{
    MDB_cursor *cur;
    MDB_val k = {4, (void *)(uintptr_t)kind}, v;
    int rc = mdb_cursor_open(txn, e->dbi_meta, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    int found = 0;
    if (rc == 0 && k.mv_size == IDX__MARK_KEY_SIZE &&
        memcmp(k.mv_data, kind, 4) == 0) {
        if (v.mv_size > TERN_NAME_MAX) {
            mdb_cursor_close(cur);
            return IDX__CORRUPT(e, "work mark value");
        }
        *queue_id = idx__get_be64((const uint8_t *)k.mv_data + 4);
        if (name != NULL) {
            memcpy(name, v.mv_data, v.mv_size);
            *name_len = v.mv_size;
        }
        found = 1;
    }
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "get work mark");
    }
    return found;
}

static int mark_del(struct idx_env *e, const char *kind, uint64_t queue_id)
{
    uint8_t key[IDX__MARK_KEY_SIZE];
    idx__mark_key(key, kind, queue_id);
    MDB_val k = {sizeof key, key};
    int rc = mdb_del(e->wtxn, e->dbi_meta, &k, NULL);
    return rc != 0 && rc != MDB_NOTFOUND ? idx__mdb_err(e, rc, "delete mark")
                                         : 0;
}

/* Add d rows to *n: 1 while the budget has room, 0 once it is spent (the
 * rows of the mark may not all be gone: the mark stays). */
static int count_rows(unsigned d, unsigned budget, unsigned *n)
{
    *n += d;
    return *n < budget ? 1 : 0;
}

/* Delete the rows a work mark of queue id stands for (name[0..name_len):
 * the mark's value), at most budget - *n of them, counted in *n: 1 when
 * all are gone, 0 when the budget was spent first, or an error. */
typedef int (*mark_rows_cb)(struct idx_env *e,
                            uint64_t id,
                            const char *name,
                            size_t name_len,
                            unsigned budget,
                            unsigned *n);

/* Rows of a deleted queue: msgs, groups, producers, keys, leases, claims
 * of the dead id. */
static int dead_rows(struct idx_env *e,
                     uint64_t id,
                     const char *name,
                     size_t name_len,
                     unsigned budget,
                     unsigned *n)
{
    uint8_t prefix[8];
    unsigned d;
    (void)name;
    (void)name_len;
    idx__put_be64(prefix, id);
    const MDB_dbi dbis[] = {e->dbi_msgs, e->dbi_groups, e->dbi_producers,
                            e->dbi_keys, e->dbi_leases, e->dbi_claims};
    for (size_t i = 0; i < TERN_ARRAY_SIZE(dbis); i++) {
        int rc = clean_prefix(e, dbis[i], prefix, budget - *n, &d);
        if (rc != 0) {
            return rc;
        }
        if (count_rows(d, budget, n) == 0) {
            return 0;
        }
    }
    return 1;
}

/* msgs rows below the start_offset of the trimmed queue id, stored as
 * name. */
static int trimmed_rows(struct idx_env *e,
                        uint64_t id,
                        const char *name,
                        size_t name_len,
                        unsigned budget,
                        unsigned *n)
{
    MDB_val k = {name_len, (void *)(uintptr_t)name}, v;
    struct idx__queue_val q;
    unsigned d;
    int rc = mdb_get(e->wtxn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return 1;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get queue");
    }
    if (idx__queue_val_decode(v.mv_data, v.mv_size, &q) != 0) {
        return IDX__CORRUPT(e, "queue value of %.*s", (int)name_len, name);
    }
    /* A re-created queue of that name has another id: the "dead" mark of
     * the old id covers its rows. */
    if (q.id != id) {
        return 1;
    }
    rc = idx__clean_range(e, id, 0, q.start_offset, budget - *n, &d);
    if (rc != 0) {
        return rc;
    }
    return count_rows(d, budget, n);
}

/* The marks of kind, first to last: the rows of each (rows), then the
 * mark itself, while *n < budget. */
static int clean_marks(struct idx_env *e,
                       const char *kind,
                       mark_rows_cb rows,
                       unsigned budget,
                       unsigned *n)
{
    while (*n < budget) {
        uint64_t id = 0;
        char name[TERN_NAME_MAX];
        size_t name_len = 0;
        int rc = mark_first(e, e->wtxn, kind, &id, name, &name_len);
        if (rc <= 0) {
            return rc;
        }
        rc = rows(e, id, name, name_len, budget, n);
        if (rc <= 0) {
            return rc; /* an error, or the budget is spent */
        }
        rc = mark_del(e, kind, id);
        if (rc != 0) {
            return rc;
        }
        (*n)++;
    }
    return 0;
}

int idx_clean_step(struct idx_env *e, unsigned budget, unsigned *done)
{
    unsigned n = 0;
    int rc;
    *done = 0;
    if (e->failed != 0) {
        return e->failed;
    }
    if (budget == 0) {
        return 0;
    }
    rc = idx__txn_begin(e);
    if (rc != 0) {
        return rc;
    }
    rc = clean_marks(e, IDX__MARK_DEAD, dead_rows, budget, &n);
    if (rc == 0) {
        rc = clean_marks(e, IDX__MARK_TRIM, trimmed_rows, budget, &n);
    }
    if (rc != 0) {
        tern_errmsg_wrapf(e->errmsg, "clean");
        idx__txn_abort(e);
        e->failed = rc;
        return rc;
    }
    rc = idx_flush(e);
    if (rc != 0) {
        return rc;
    }
    *done = n;
    return 0;
}

bool idx_clean_pending(struct idx_env *e)
{
    MDB_txn *txn;
    uint64_t id;
    int found = 0;
    if (mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn) != 0) {
        return false;
    }
    if (mark_first(e, txn, IDX__MARK_DEAD, &id, NULL, NULL) == 1 ||
        mark_first(e, txn, IDX__MARK_TRIM, &id, NULL, NULL) == 1) {
        found = 1;
    }
    mdb_txn_abort(txn);
    return found != 0;
}
