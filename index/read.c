/*
 * Reads: queue listing and lookup, consumer-group offsets and message
 * fetches. Every read runs in its own LMDB read txn (MDB_NOTLS), so it sees
 * flushed state only, never the pending write txn. Message bytes are
 * served from the commit log with pread; each record is read whole and
 * its checksum verified once per fetch before any message of it is
 * handed out, so a damaged record yields TERN_ECORRUPT, never garbage.
 *
 * Why the log positions in a read txn are always readable: the log is
 * append-only while the env is open (truncation happens only inside
 * idx_open and idx_restore, before any index entry points past the cut,
 * and in idx_bulk_discard, which cuts only bytes no index entry points
 * to), and every position LMDB stores was written before it was indexed.
 */
#include <errno.h>
#include <string.h>

#include "idx_int.h"

/* A NUL-terminated queue or group name of the read API (tern_name_valid). */
static int name_valid(const char *name)
{
    return name != NULL &&
           tern_name_valid(name, strnlen(name, TERN_NAME_MAX + 1));
}

static int rtxn_begin(struct idx_env *e, MDB_txn **txn)
{
    int rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, txn);
    return rc != 0 ? idx__mdb_err(e, rc, "begin read txn") : 0;
}

static int lookup_queue(struct idx_env *e,
                        MDB_txn *txn,
                        const char *name,
                        struct idx__queue_val *q)
{
    if (!name_valid(name)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid queue name");
    }
    MDB_val k = {strlen(name), (void *)(uintptr_t)name}, v;
    int rc = mdb_get(txn, e->dbi_queues, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return idx__fail(e, TERN_ENOQUEUE, __LINE__, "no queue %s", name);
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "get queue");
    }
    if (idx__queue_val_decode(v.mv_data, v.mv_size, q) != 0) {
        return IDX__CORRUPT(e, "queue value of %s", name);
    }
    return 0;
}

int idx_queue_get(struct idx_env *e,
                  const char *queue,
                  struct idx_queue_info *out)
{
    MDB_txn *txn;
    struct idx__queue_val q = {0};
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc == 0) {
        out->name = queue;
        out->start_offset = q.start_offset;
        out->next_offset = q.next_offset;
        out->created_index = q.created_index;
    }
    mdb_txn_abort(txn);
    return rc;
}

int idx_queue_list(struct idx_env *e, idx_queue_cb cb, void *arg)
{
    return idx_queue_list_after(e, NULL, cb, arg);
}

int idx_queue_list_after(struct idx_env *e,
                         const char *after,
                         idx_queue_cb cb,
                         void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k, v;
    char name[TERN_NAME_MAX + 1];
    size_t after_len = after != NULL ? strlen(after) : 0;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_open(txn, e->dbi_queues, &cur);
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        goto err_after_txn;
    }
    int mrc;
    if (after_len > 0) {
        /* The first key >= after; after itself is skipped. */
        k.mv_size = after_len;
        k.mv_data = (void *)after;
        mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (mrc == 0 && k.mv_size == after_len &&
            memcmp(k.mv_data, after, after_len) == 0) {
            mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
    } else {
        mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    }
    for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__queue_val q;
        if (k.mv_size == 0 || k.mv_size > TERN_NAME_MAX ||
            idx__queue_val_decode(v.mv_data, v.mv_size, &q) != 0) {
            rc = IDX__CORRUPT(e, "queue entry");
            break;
        }
        memcpy(name, k.mv_data, k.mv_size);
        name[k.mv_size] = '\0';
        struct idx_queue_info qi = {
            .name = name,
            .start_offset = q.start_offset,
            .next_offset = q.next_offset,
            .created_index = q.created_index,
        };
        if (cb(arg, &qi) != 0) {
            break;
        }
    }
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "cursor");
    }
    mdb_cursor_close(cur);
err_after_txn:
    mdb_txn_abort(txn);
    return rc;
}

int idx_group_offset(struct idx_env *e,
                     const char *queue,
                     const char *group,
                     uint64_t *offset)
{
    MDB_txn *txn;
    struct idx__queue_val q = {0};
    uint8_t key[IDX__GROUP_KEY_MAX];
    *offset = 0;
    if (!name_valid(group)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid group name");
    }
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc == 0) {
        size_t kn = idx__group_key(key, q.id, group, strlen(group));
        MDB_val k = {kn, key}, v;
        rc = mdb_get(txn, e->dbi_groups, &k, &v);
        if (rc == 0) {
            if (v.mv_size != 8) {
                rc = IDX__CORRUPT(e, "group value");
            } else {
                *offset = tern_get_u64(v.mv_data);
            }
        } else if (rc == MDB_NOTFOUND) {
            rc = 0;
        } else {
            rc = idx__mdb_err(e, rc, "get group");
        }
    }
    mdb_txn_abort(txn);
    return rc;
}

int idx_fetch(struct idx_env *e,
              const char *queue,
              uint64_t offset,
              uint32_t max_msgs,
              uint32_t max_bytes,
              idx_fetch_cb cb,
              void *arg,
              uint64_t *next_offset)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    struct idx__queue_val q = {0};
    struct idx__record rec = {0};
    uint64_t rec_pos = UINT64_MAX; /* record currently in e->rbuf */
    uint64_t off = offset;
    uint64_t bytes = 0;
    uint32_t count = 0;
    *next_offset = offset;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc != 0) {
        goto out;
    }
    if (offset < q.start_offset || offset > q.next_offset) {
        rc = idx__fail(
            e, TERN_EOFFSET, __LINE__, "offset %llu outside [%llu,%llu] of %s",
            (unsigned long long)offset, (unsigned long long)q.start_offset,
            (unsigned long long)q.next_offset, queue);
        goto out;
    }
    rc = mdb_cursor_open(txn, e->dbi_msgs, &cur);
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        goto out;
    }
    while (off < q.next_offset && count < max_msgs) {
        uint8_t key[IDX__MSG_KEY_SIZE];
        struct idx__msg_val m;
        MDB_val k, v;
        idx__msg_key(key, q.id, off);
        if (count == 0) {
            k.mv_size = sizeof key;
            k.mv_data = key;
            rc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
        } else {
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        if (rc != 0 || k.mv_size != sizeof key ||
            memcmp(k.mv_data, key, sizeof key) != 0) {
            rc = IDX__CORRUPT(e, "queue %s: index entry %llu missing", queue,
                              (unsigned long long)off);
            goto out;
        }
        if (idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0) {
            rc = IDX__CORRUPT(e, "queue %s: index entry %llu", queue,
                              (unsigned long long)off);
            goto out;
        }
        if (count > 0 && bytes + m.len > max_bytes) {
            break;
        }
        if (m.rec_pos != rec_pos) {
            rc = idx__log_read_record(e, m.rec_pos, e->log_end, &rec);
            if (rc == TERN_EMALFORMED) {
                rc = TERN_ECORRUPT;
            }
            if (rc != 0) {
                tern_errmsg_wrapf(e->errmsg, "fetch %s offset %llu", queue,
                                  (unsigned long long)off);
                goto out;
            }
            rec_pos = m.rec_pos;
        }
        if (m.data_off > rec.payload_len ||
            m.len > rec.payload_len - m.data_off) {
            rc = IDX__CORRUPT(e, "queue %s: message %llu outside its record",
                              queue, (unsigned long long)off);
            goto out;
        }
        struct idx_fetched f = {
            .offset = off,
            .timestamp_ms = m.timestamp_ms,
            .producer_id = m.producer_id,
            .data = rec.payload + m.data_off,
            .len = m.len,
        };
        count++;
        bytes += m.len;
        off++;
        *next_offset = off;
        if (cb(arg, &f) != 0) {
            break;
        }
    }
    rc = 0;
out:
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return rc;
}
