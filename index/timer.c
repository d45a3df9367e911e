/*
 * Delayed messages (docs/WORKQUEUES.md, "Delayed and scheduled messages"):
 * applying PRODUCE_DELAYED and TIMER_FIRE, the leader's plan of
 * TIMER_FIRE (idx_timer_plan), the status counts (idx_timer_stats) and the
 * part of the log start that pending timers hold (idx__timer_need).
 * Formats: the commands in cmd.c, the rows of "timers" and "timer_recs"
 * in keys.c.
 *
 * The leader plans, the log carries, apply checks. A PRODUCE_DELAYED
 * stores nothing in its queue: one "timers" row per message points at the
 * record (its bytes stay in the commit log), and "timer_recs" counts the
 * rows of each record so that the oldest record a timer needs is its
 * first key. The leader reads due rows and their messages from the log
 * and proposes them in a TIMER_FIRE; applying it needs nothing but the
 * entry and the tables, so a rebuild from a checkpoint (which holds both
 * tables, ckpt.c) decides alike:
 *   row absent                 skipped (an earlier TIMER_FIRE moved it)
 *   due > t (the entry's time) skipped (never appended before its time)
 *   queue gone or re-created   row deleted, message dropped (counted)
 *   else                       row deleted, the message appended by the
 *                              produce path (idx__produce_append) with the
 *                              entry's append time, its msgs row pointing
 *                              into the TIMER_FIRE record; a refusal by
 *                              quota or retention drops it (counted)
 * Once the last row of a record is gone, the head trim (snapshot.c) may
 * pass the record.
 */
#include <errno.h>
#include <stdio.h>

#include "idx_int.h"

/* ---- timer_recs: rows per PRODUCE_DELAYED record ------------------------ */

/* Add delta (+n or -1) to the rows of the record at pos. */
static int rec_add(struct idx_env *e, uint64_t pos, int64_t delta)
{
    uint8_t key[8], val[IDX__TIMER_REC_VAL_SIZE];
    uint32_t rows = 0;
    MDB_val k = {sizeof key, key}, v;
    idx__put_be64(key, pos);
    int rc = mdb_get(e->wtxn, e->dbi_timer_recs, &k, &v);
    if (rc == 0) {
        if (idx__timer_rec_val_decode(v.mv_data, v.mv_size, &rows) != 0) {
            return IDX__CORRUPT(e, "timer_recs row of record %llu",
                                (unsigned long long)pos);
        }
    } else if (rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "get timer_recs");
    }
    int64_t now = (int64_t)rows + delta;
    if (now < 0 || now > (int64_t)UINT32_MAX) {
        return IDX__CORRUPT(e, "timer_recs of record %llu: %u rows %+lld",
                            (unsigned long long)pos, rows, (long long)delta);
    }
    if (now == 0) {
        rc = mdb_del(e->wtxn, e->dbi_timer_recs, &k, NULL);
        return rc != 0 ? idx__mdb_err(e, rc, "delete timer_recs") : 0;
    }
    idx__timer_rec_val_encode(val, (uint32_t)now);
    v.mv_size = sizeof val;
    v.mv_data = val;
    rc = mdb_put(e->wtxn, e->dbi_timer_recs, &k, &v, 0);
    return rc != 0 ? idx__mdb_err(e, rc, "put timer_recs") : 0;
}

int idx__timer_need(struct idx_env *e, uint64_t *need)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(e->wtxn, e->dbi_timer_recs, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return idx__mdb_err(e, rc, "first timer record");
    }
    if (k.mv_size != 8) {
        return IDX__CORRUPT(e, "timer_recs key of %zu bytes", k.mv_size);
    }
    *need = TERN_MIN(*need, idx__get_be64(k.mv_data));
    return 0;
}

/* ---- Apply --------------------------------------------------------------- */

int idx__timer_apply_delayed(struct idx_env *e,
                             uint64_t pos,
                             uint64_t index,
                             const struct idx__cmd *c,
                             uint32_t *msg_no,
                             struct idx_result *r)
{
    struct idx__queue_val q;
    struct idx__producer_val pv;
    struct idx__msg_iter mi;
    const uint8_t *data;
    uint32_t len, base = *msg_no;
    *msg_no += c->n_msgs; /* numbers are taken whatever the result */
    int rc = idx__queue_get(e, c->queue, c->queue_len, &q);
    if (rc != 0) {
        r->status = rc == 1 ? TERN_ENOQUEUE : 0;
        return rc == 1 ? 0 : rc;
    }
    idx__msg_iter_init(&mi, c);
    while (idx__msg_iter_next(&mi, &data, &len) == 1) {
        if (len > e->max_message) {
            r->status = TERN_ETOOBIG;
            return 0;
        }
    }
    /* A resend of a scheduled batch answers its due time (kept where a
     * PRODUCE keeps the base offset) and schedules nothing. */
    rc = idx__producer_check(e, q.id, c->producer_id, c->seq, &pv, r);
    if (rc != 0) {
        return rc < 0 ? rc : 0;
    }
    for (uint32_t i = 0; i < c->n_msgs; i++) {
        struct idx_timer_key tk = {c->due_ms, index, base + i};
        struct idx__timer_val tv = {base + i, q.id, q.created_index, pos};
        uint8_t key[IDX__TIMER_KEY_SIZE], val[IDX__TIMER_VAL_SIZE];
        idx__timer_key(key, &tk);
        idx__timer_val_encode(val, &tv);
        MDB_val k = {sizeof key, key}, v = {sizeof val, val};
        rc = mdb_put(e->wtxn, e->dbi_timers, &k, &v, 0);
        if (rc != 0) {
            return idx__mdb_err(e, rc, "put timer");
        }
    }
    r->count = c->n_msgs;
    rc = idx__producer_remember(e, q.id, c->producer_id, c->seq, &pv, c->due_ms,
                                c->n_msgs);
    return rc != 0 ? rc : rec_add(e, pos, c->n_msgs);
}

/* Move one due timer (its row tv already deleted): append its message. 1
 * appended, 0 dropped, or a failure code. */
static int fire_one(struct idx_env *e,
                    uint64_t pos,
                    uint64_t append_ms,
                    const uint8_t *payload,
                    const struct idx__fire_key *k,
                    const struct idx__timer_val *tv)
{
    struct idx__queue_val q;
    struct idx__msg_iter mi;
    struct idx_result pr = {0};
    const uint8_t *data;
    uint32_t len;
    int rc = idx__queue_get(e, k->queue, k->queue_len, &q);
    if (rc < 0) {
        return rc;
    }
    if (rc == 1 || q.id != tv->queue_id ||
        q.created_index != tv->created_index) {
        return 0; /* its queue is gone, or is another incarnation */
    }
    idx__msg_iter_init_fire(&mi, k);
    struct idx__msg_iter first = mi;
    if (idx__msg_iter_next(&mi, &data, &len) != 1) {
        return IDX__CORRUPT(e, "validated timer message is malformed");
    }
    if (len > e->max_message) {
        return 0;
    }
    rc = idx__produce_append(e, k->queue, k->queue_len, &q, pos, append_ms,
                             payload, 0, &first, 1, len, &pr);
    if (rc != 0) {
        return rc;
    }
    return pr.status == 0 ? 1 : 0;
}

int idx__timer_apply_fire(struct idx_env *e,
                          uint64_t pos,
                          uint64_t append_ms,
                          uint64_t t,
                          const uint8_t *payload,
                          const struct idx__cmd *c,
                          struct idx_result *r)
{
    struct idx__fire_iter fi;
    struct idx__fire_key fk;
    idx__fire_iter_init(&fi, c);
    while (idx__fire_iter_next(&fi, &fk) == 1) {
        struct idx__timer_val tv;
        uint8_t key[IDX__TIMER_KEY_SIZE];
        MDB_val k = {sizeof key, key}, v;
        if (fk.key.due_ms > t) {
            continue; /* not due by the entry's clock */
        }
        idx__timer_key(key, &fk.key);
        int rc = mdb_get(e->wtxn, e->dbi_timers, &k, &v);
        if (rc == MDB_NOTFOUND) {
            continue; /* moved by an earlier TIMER_FIRE */
        }
        if (rc != 0) {
            return idx__mdb_err(e, rc, "get timer");
        }
        if (idx__timer_val_decode(v.mv_data, v.mv_size, &tv) != 0) {
            return IDX__CORRUPT(e, "timer row due %llu of entry %llu",
                                (unsigned long long)fk.key.due_ms,
                                (unsigned long long)fk.key.index);
        }
        rc = mdb_del(e->wtxn, e->dbi_timers, &k, NULL);
        if (rc != 0) {
            return idx__mdb_err(e, rc, "delete timer");
        }
        rc = rec_add(e, tv.rec_pos, -1);
        if (rc == 0) {
            rc = fire_one(e, pos, append_ms, payload, &fk, &tv);
        }
        if (rc < 0) {
            return rc;
        }
        if (rc == 1) {
            r->count++;
        } else {
            r->base_offset++; /* dropped (idx_result) */
        }
    }
    return 0;
}

/* ---- The leader's plan --------------------------------------------------- */

/* The message msg_no of the PRODUCE_DELAYED commands of the entry
 * payload[0..len) (numbered across them from 0): its queue into qname
 * (NUL-terminated, TERN_NAME_MAX + 1 bytes) and *m (borrowed from
 * payload). 0 or 1 when the entry has no such message. */
static int find_delayed(const uint8_t *payload,
                        uint32_t len,
                        uint32_t msg_no,
                        char *qname,
                        struct idx_pmsg *m)
{
    struct idx__entry it;
    struct idx__cmd cmd;
    uint32_t seen = 0;
    if (idx_cmd_validate(payload, len) != 0 ||
        idx__entry_open(&it, payload, len) != 0) {
        return 1;
    }
    while (idx__entry_next(&it, &cmd) == 1) {
        struct idx__msg_iter mi;
        const uint8_t *data;
        uint32_t dlen;
        if (cmd.type != IDX_CMD_PRODUCE_DELAYED) {
            continue;
        }
        if (msg_no - seen >= cmd.n_msgs) {
            seen += cmd.n_msgs;
            continue;
        }
        idx__msg_iter_init(&mi, &cmd);
        for (uint32_t i = 0; i <= msg_no - seen; i++) {
            if (idx__msg_iter_next(&mi, &data, &dlen) != 1) {
                return 1;
            }
        }
        memcpy(qname, cmd.queue, cmd.queue_len);
        qname[cmd.queue_len] = '\0';
        m->data = data;
        m->len = dlen;
        m->props = mi.props;
        m->props_len = mi.props_len;
        return 0;
    }
    return 1;
}

int idx_timer_plan(struct idx_env *e,
                   uint64_t t,
                   uint32_t max_keys,
                   uint32_t max_bytes,
                   struct tern_wbuf *w,
                   struct idx_timer_plan *out)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    struct idx__record rec = {0};
    uint64_t rec_pos = UINT64_MAX; /* the record in e->rbuf */
    uint64_t body = 4;             /* n_keys */
    size_t at = 0;
    int rc;
    if (out == NULL || w == NULL || max_keys == 0 ||
        max_keys > IDX_TIMER_FIRE_KEYS_MAX || max_bytes == 0 ||
        max_bytes > IDX_TIMER_FIRE_BYTES_MAX) {
        return idx__fail(e, TERN_EINVAL, __LINE__,
                         "timer plan: bounds out of range");
    }
    memset(out, 0, sizeof *out);
    rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "begin read txn");
    }
    rc = mdb_cursor_open(txn, e->dbi_timers, &cur);
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        goto out;
    }
    for (int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx_timer_key tk;
        struct idx__timer_val tv;
        struct idx_pmsg m;
        char qname[TERN_NAME_MAX + 1];
        if (mrc == MDB_NOTFOUND) {
            break;
        }
        if (mrc != 0) {
            rc = idx__mdb_err(e, mrc, "timer walk");
            goto out;
        }
        out->rows_read++;
        if (idx__timer_key_decode(k.mv_data, k.mv_size, &tk) != 0 ||
            idx__timer_val_decode(v.mv_data, v.mv_size, &tv) != 0) {
            rc = IDX__CORRUPT(e, "timer row %u of the plan", out->rows_read);
            goto out;
        }
        if (tk.due_ms > t) {
            break;
        }
        if (out->keys == max_keys) {
            out->more = true;
            break;
        }
        if (tv.rec_pos != rec_pos) {
            rc =
                idx__log_read_record(e, tv.rec_pos, e->committed.log_end, &rec);
            if (rc != 0) {
                tern_errmsg_wrapf(e->errmsg, "timer due %llu of entry %llu",
                                  (unsigned long long)tk.due_ms,
                                  (unsigned long long)tk.index);
                goto out;
            }
            rec_pos = tv.rec_pos;
        }
        if (rec.index != tk.index || find_delayed(rec.payload, rec.payload_len,
                                                  tk.msg_no, qname, &m) != 0) {
            rc = IDX__CORRUPT(e,
                              "timer due %llu: the record at %llu has no "
                              "delayed message %u of entry %llu",
                              (unsigned long long)tk.due_ms,
                              (unsigned long long)tv.rec_pos, tk.msg_no,
                              (unsigned long long)tk.index);
            goto out;
        }
        uint64_t size =
            20 + 1 + strlen(qname) + 8 + (uint64_t)m.len + m.props_len;
        if (out->keys > 0 && body + size > max_bytes) {
            out->more = true;
            break;
        }
        if (out->keys == 0) {
            at = idx_cmd_timer_fire_begin(w);
        }
        idx_cmd_timer_fire_add(w, at, &tk, qname, &m);
        if (w->err != 0) {
            rc = w->err;
            goto out;
        }
        out->keys++;
        body += size;
    }
    if (out->keys > 0) {
        idx_cmd_timer_fire_end(w, at);
        rc = w->err;
    }
out:
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return rc;
}

int idx_timer_stats(struct idx_env *e,
                    uint64_t *pending,
                    uint64_t *oldest_due_ms)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_stat st;
    MDB_val k, v;
    struct idx_timer_key tk = {0};
    int rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "begin read txn");
    }
    rc = mdb_stat(txn, e->dbi_timers, &st);
    if (rc == 0) {
        rc = mdb_cursor_open(txn, e->dbi_timers, &cur);
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return idx__mdb_err(e, rc, "timer stats");
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    mdb_cursor_close(cur);
    if (rc == 0 && idx__timer_key_decode(k.mv_data, k.mv_size, &tk) != 0) {
        mdb_txn_abort(txn);
        return IDX__CORRUPT(e, "first timer key");
    }
    mdb_txn_abort(txn);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "first timer");
    }
    *pending = st.ms_entries;
    *oldest_due_ms = tk.due_ms;
    return 0;
}
