/*
 * Reads: queue listing and lookup, consumer-group offsets, message
 * fetches (with the tag filter: rows whose tag hash matches none of the
 * filter's are skipped without reading the log, a hash match is confirmed
 * on the record's tag), message get by offset, id and key (the key index,
 * newest first), message trace (the msgs row, the entry that holds the
 * message: its TERM and produce commands, and the groups past it), and
 * the security metadata (users, grants and their evaluation,
 * namespaces, producer id owners; docs/AUTH.md). Every read runs in its own
 * LMDB read txn (MDB_NOTLS), so it sees flushed state only, never the pending
 * write txn. Message bytes are served from the commit log with pread; each
 * record is read whole and its checksum verified once per fetch before any
 * message of it is handed out, so a damaged record yields TERN_ECORRUPT, never
 * garbage.
 *
 * Why the log positions in a read txn are always readable: the log is
 * append-only while the env is open (truncation happens only inside
 * idx_open and idx_restore, before any index entry points past the cut,
 * and in idx_bulk_discard, which cuts only bytes no index entry points
 * to), and every position LMDB stores was written before it was indexed.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "idx_int.h"

/* A NUL-terminated group name of the read API (tern_name_valid). */
static int name_valid(const char *name)
{
    return name != NULL &&
           tern_name_valid(name, strnlen(name, TERN_NAME_MAX + 1));
}

/* A NUL-terminated stored queue name (tern_qname_valid: "q" or "ns%q"). */
static int qname_valid(const char *name)
{
    return name != NULL &&
           tern_qname_valid(name, strnlen(name, TERN_NAME_MAX + 1));
}

static int rtxn_begin(struct idx_env *e, MDB_txn **txn)
{
    int rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, txn);
    return rc != 0 ? idx__mdb_err(e, rc, "begin read txn") : 0;
}

/* The queue row of name in txn (dbi: the queues table). Errors into
 * errmsg. */
static int lookup_queue_in(MDB_txn *txn,
                           MDB_dbi dbi,
                           char *errmsg,
                           const char *name,
                           struct idx__queue_val *q)
{
    if (!qname_valid(name)) {
        return idx__failm(errmsg, TERN_EBADNAME, __LINE__,
                          "invalid queue name");
    }
    MDB_val k = {strlen(name), (void *)(uintptr_t)name}, v;
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc == MDB_NOTFOUND) {
        return idx__failm(errmsg, TERN_ENOQUEUE, __LINE__, "no queue %s", name);
    }
    if (rc != 0) {
        return idx__mdb_errm(errmsg, rc, "get queue");
    }
    if (idx__queue_val_decode(v.mv_data, v.mv_size, q) != 0) {
        return IDX__CORRUPTM(errmsg, "queue value of %s", name);
    }
    return 0;
}

static int lookup_queue(struct idx_env *e,
                        MDB_txn *txn,
                        const char *name,
                        struct idx__queue_val *q)
{
    return lookup_queue_in(txn, e->dbi_queues, e->errmsg, name, q);
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
        out->bytes = q.bytes;
        out->settings = q.settings;
        out->id = q.id;
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
        if (!tern_qname_valid(k.mv_data, k.mv_size) ||
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
            .bytes = q.bytes,
            .settings = q.settings,
            .id = q.id,
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
            struct idx__group_val g;
            if (idx__group_val_decode(v.mv_data, v.mv_size, &g) != 0) {
                rc = IDX__CORRUPT(e, "group value");
            } else {
                *offset = g.next_offset;
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

/* What a message read goes through: an env (the loop thread) or an
 * idx_reader's log view (another thread, touching no env). */
struct rd
{
    MDB_txn *txn;
    MDB_dbi dbi_queues;
    MDB_dbi dbi_msgs;
    char *errmsg; /* TERN_ERRMSG_SIZE bytes */
    struct idx_env *e;
    struct idx__logview *view; /* when e is NULL */
    const atomic_bool *cancel; /* set: stop (-EAGAIN); NULL: none */
};

static void rd_env(struct rd *rd, struct idx_env *e, MDB_txn *txn)
{
    rd->txn = txn;
    rd->dbi_queues = e->dbi_queues;
    rd->dbi_msgs = e->dbi_msgs;
    rd->errmsg = e->errmsg;
    rd->e = e;
    rd->view = NULL;
    rd->cancel = NULL;
}

/* Read (once per record) and check the record of m into *rec; f filled
 * for the message at off of queue (queue id qid). what names the read in
 * the errmsg of a record that does not read ("fetch", "trace"). */
static int load_msg_via(const struct rd *rd,
                        const char *what,
                        const char *queue,
                        uint64_t qid,
                        uint64_t off,
                        const struct idx__msg_val *m,
                        struct idx__record *rec,
                        uint64_t *rec_pos,
                        struct idx_fetched *f)
{
    if (m->rec_pos != *rec_pos) {
        int rc =
            rd->e != NULL
                ? idx__log_read_record(rd->e, m->rec_pos, rd->e->log_end, rec)
                : idx__logview_read_record(rd->view, m->rec_pos, rec);
        if (rc == TERN_EMALFORMED) {
            rc = TERN_ECORRUPT;
        }
        if (rc != 0) {
            *rec_pos = UINT64_MAX;
            tern_errmsg_wrapf(rd->errmsg, "%s %s offset %llu", what, queue,
                              (unsigned long long)off);
            return rc;
        }
        *rec_pos = m->rec_pos;
    }
    if (m->data_off > rec->payload_len ||
        m->len > rec->payload_len - m->data_off ||
        m->props_off > rec->payload_len ||
        m->props_len > rec->payload_len - m->props_off) {
        return IDX__CORRUPTM(rd->errmsg,
                             "queue %s: message %llu outside its record", queue,
                             (unsigned long long)off);
    }
    memset(f, 0, sizeof *f);
    f->offset = off;
    f->timestamp_ms = m->timestamp_ms;
    f->producer_id = m->producer_id;
    f->data = rec->payload + m->data_off;
    f->len = m->len;
    f->queue_id = qid;
    if (m->props_len > 0) {
        f->props = rec->payload + m->props_off;
        f->props_len = m->props_len;
    }
    return 0;
}

static int load_msg(struct idx_env *e,
                    const char *what,
                    const char *queue,
                    uint64_t qid,
                    uint64_t off,
                    const struct idx__msg_val *m,
                    struct idx__record *rec,
                    uint64_t *rec_pos,
                    struct idx_fetched *f)
{
    struct rd rd;
    rd_env(&rd, e, NULL);
    return load_msg_via(&rd, what, queue, qid, off, m, rec, rec_pos, f);
}

/* The msgs row of offset of queue (queue id qid, offset retained) into
 * *m. */
static int get_msg_row(struct idx_env *e,
                       MDB_txn *txn,
                       const char *queue,
                       uint64_t qid,
                       uint64_t offset,
                       struct idx__msg_val *m)
{
    uint8_t key[IDX__MSG_KEY_SIZE];
    idx__msg_key(key, qid, offset);
    MDB_val k = {sizeof key, key}, v;
    int rc = mdb_get(txn, e->dbi_msgs, &k, &v);
    if (rc != 0 || idx__msg_val_decode(v.mv_data, v.mv_size, m) != 0) {
        return IDX__CORRUPT(e, "queue %s: index entry %llu", queue,
                            (unsigned long long)offset);
    }
    return 0;
}

/* Whether the message of row m (loaded as f when the hash matched) has one
 * of the filter's tags. hashes[i] is idx__tag_hash of tags[i]. */
static bool tag_hash_match(const struct idx__msg_val *m,
                           const struct idx_fetch_opts *o,
                           const uint32_t *hashes)
{
    if (m->tag_len == 0) {
        return false;
    }
    for (uint32_t i = 0; i < o->n_tags; i++) {
        if (hashes[i] == m->tag_hash && o->tags[i].len == m->tag_len) {
            return true;
        }
    }
    return false;
}

static bool tag_match(const struct idx_fetched *f,
                      const struct idx_fetch_opts *o)
{
    struct idx_props p;
    if (f->props_len == 0 ||
        idx_props_decode(f->props, f->props_len, &p) != 0) {
        return false;
    }
    for (uint32_t i = 0; i < o->n_tags; i++) {
        if (o->tags[i].len == p.tag_len &&
            memcmp(o->tags[i].tag, p.tag, p.tag_len) == 0) {
            return true;
        }
    }
    return false;
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
    struct idx_fetch_opts o = {.max_msgs = max_msgs, .max_bytes = max_bytes};
    return idx_fetch_filtered(e, queue, offset, &o, cb, arg, next_offset);
}

/* The rows a fetch need not read. A PRODUCE command's messages take
 * consecutive offsets of its queue, all or none of them (apply.c), and
 * their msgs rows are derived from the command alone: the row of the next
 * offset is the next message of the command, with the same record, append
 * time and producer. So once a row is read and its record loaded, the
 * rest of its command's messages are read from the record (the same
 * idx__msg_val a row would give) instead of one LMDB row each: a cursor
 * step and a row decode were a quarter of a consumer's instructions
 * (bench/fetch_instructions.sh). Not with a tag filter (its rows' tag
 * hashes skip records unread), nor for other commands (a DEAD_LETTER's one
 * message, delayed messages whose offsets come at their TIMER_FIRE). */
struct walk
{
    const uint8_t *p;   /* the next message's u32 len; NULL: no walk */
    const uint8_t *end; /* the end of the command's message list */
    const uint8_t *payload;
    uint64_t rec_pos;
    bool with_props;
    uint64_t timestamp_ms;
    uint64_t producer_id;
    /* where the lookups in the record at scan_rec_pos resume (an entry
     * of the batcher holds up to thousands of one-message commands) */
    struct idx__entry_scan scan;
    uint64_t scan_rec_pos;
};

/* Start walking after row m, whose record is loaded in rec at rec_pos. */
static void walk_start(struct walk *w,
                       const struct idx__record *rec,
                       uint64_t rec_pos,
                       const struct idx__msg_val *m)
{
    size_t start, end;
    bool with_props;
    w->p = NULL;
    if (w->scan_rec_pos != rec_pos) {
        memset(&w->scan, 0, sizeof w->scan);
        w->scan_rec_pos = rec_pos;
    }
    if (idx__entry_produce_msgs(rec->payload, rec->payload_len, m->data_off,
                                &w->scan, &start, &end, &with_props) != 1) {
        return;
    }
    /* Past the message: its bytes, and its properties block (which
     * starts right after them: props_off is data_off + len + 4). */
    size_t next = (size_t)m->data_off + m->len;
    if (with_props) {
        if (m->props_len > 0 && m->props_off != next + 4) {
            return;
        }
        next += 4 + (size_t)m->props_len;
    }
    if (m->data_off < start + 4 || next > end) {
        return;
    }
    w->p = rec->payload + next;
    w->end = rec->payload + end;
    w->payload = rec->payload;
    w->rec_pos = rec_pos;
    w->with_props = with_props;
    w->timestamp_ms = m->timestamp_ms;
    w->producer_id = m->producer_id;
}

/* The next message of the walk as its row would be: true with *m filled,
 * false at the end of the command (or of what the bounds allow). */
static bool walk_next(struct walk *w, uint64_t rec_pos, struct idx__msg_val *m)
{
    struct tern_cursor c;
    if (w->p == NULL || w->rec_pos != rec_pos || w->p >= w->end) {
        w->p = NULL;
        return false;
    }
    tern_cursor_init(&c, w->p, (size_t)(w->end - w->p));
    uint32_t len = tern_cursor_u32(&c);
    const uint8_t *data = tern_cursor_bytes(&c, len);
    uint32_t plen = 0;
    const uint8_t *props = NULL;
    if (w->with_props) {
        plen = tern_cursor_u32(&c);
        props = tern_cursor_bytes(&c, plen);
    }
    if (c.err != 0 || data == NULL) {
        w->p = NULL;
        return false;
    }
    memset(m, 0, sizeof *m);
    m->rec_pos = rec_pos;
    m->data_off = (uint32_t)(data - w->payload);
    m->len = len;
    m->timestamp_ms = w->timestamp_ms;
    m->producer_id = w->producer_id;
    if (plen > 0) {
        m->props_off = (uint32_t)(props - w->payload);
        m->props_len = plen;
    }
    w->p = c.p;
    return true;
}

/* Where fetch_in is in its bounds, for fetch_run. */
struct fetch_pos
{
    uint64_t off; /* the next offset to deliver */
    uint64_t bytes;
    uint32_t count;
    uint32_t scanned;
};

/* Whether f, read through its row, starts a run: walk w (just started
 * after it) stands in its PRODUCE list, and the list's own framing of f
 * agrees with the row (its u32 len, and props_len in a list with
 * properties). */
static bool run_head_ok(const struct walk *w, const struct idx_fetched *f)
{
    const uint8_t *d = f->data;
    if (w->p == NULL || d - 4 < w->payload || tern_get_u32(d - 4) != f->len) {
        return false;
    }
    return !w->with_props || tern_get_u32(d + f->len) == f->props_len;
}

/* Deliver f (at fp->off, its size counted in size, the first of its list:
 * run_head_ok) and the messages after it in the list that the bounds
 * allow, as one run to o->run_cb. Moves fp past them and ends the walk.
 * 1: the callback asked to stop; 0: go on. */
static int fetch_run(struct walk *w,
                     const struct idx_fetch_opts *o,
                     const struct idx_fetched *f,
                     uint64_t size,
                     uint64_t queue_next,
                     struct fetch_pos *fp,
                     void *arg)
{
    const uint8_t *start = (const uint8_t *)f->data - 4;
    const uint8_t *p = w->p;
    uint32_t n = 1;
    uint64_t b = fp->bytes + size;
    while (p < w->end && fp->off + n < queue_next &&
           fp->count + n < o->max_msgs &&
           (o->max_scan == 0 || fp->scanned + n <= o->max_scan)) {
        size_t left = (size_t)(w->end - p);
        uint32_t len, plen = 0;
        size_t step;
        if (left < 4 || (len = tern_get_u32(p)) > left - 4) {
            break;
        }
        step = 4 + (size_t)len;
        if (w->with_props) {
            if (left - step < 4 ||
                (plen = tern_get_u32(p + step)) > left - step - 4) {
                break;
            }
            step += 4 + (size_t)plen;
        }
        uint64_t sz = len + (o->with_props ? plen : 0);
        if (b + sz > o->max_bytes) {
            break;
        }
        p += step;
        b += sz;
        n++;
    }
    /* idx_close's cancel is looked at once per run: a run ends within one
     * record and max_msgs. */
    struct idx_fetched_run run = {
        .offset = fp->off,
        .count = n,
        .timestamp_ms = f->timestamp_ms,
        .list = start,
        .list_len = (size_t)(p - start),
        .props = w->with_props,
        .queue_id = f->queue_id,
    };
    fp->off += n;
    fp->count += n;
    fp->bytes = b;
    fp->scanned += n - 1;
    w->p = NULL; /* the next message is read through its row */
    return o->run_cb(arg, &run) != 0 ? 1 : 0;
}

/* The fetch of idx_fetch_filtered in rd->txn (which the caller ends). */
static int fetch_in(const struct rd *rd,
                    const char *queue,
                    uint64_t offset,
                    const struct idx_fetch_opts *o,
                    idx_fetch_cb cb,
                    void *arg,
                    uint64_t *next_offset)
{
    MDB_cursor *cur = NULL;
    struct idx__queue_val q = {0};
    struct idx__record rec = {0};
    uint64_t rec_pos = UINT64_MAX; /* record currently in e->rbuf */
    struct walk walk = {.scan_rec_pos = UINT64_MAX};
    uint64_t cur_at = UINT64_MAX; /* the offset whose row cur is on */
    uint64_t off = offset;
    uint64_t bytes = 0;
    uint32_t count = 0, scanned = 0;
    uint32_t hashes[IDX_FETCH_TAGS_MAX];
    *next_offset = offset;
    if (o->n_tags > IDX_FETCH_TAGS_MAX || (o->n_tags > 0 && o->tags == NULL)) {
        return idx__failm(rd->errmsg, TERN_EINVAL, __LINE__,
                          "a tag filter holds at most %u tags",
                          IDX_FETCH_TAGS_MAX);
    }
    for (uint32_t i = 0; i < o->n_tags; i++) {
        if (!idx_tag_valid(o->tags[i].tag, o->tags[i].len)) {
            return idx__failm(rd->errmsg, TERN_EINVAL, __LINE__,
                              "tag %u of the filter is not a tag (1..%u "
                              "bytes of [A-Za-z0-9._-])",
                              i, IDX_TAG_MAX);
        }
        hashes[i] = idx__tag_hash(o->tags[i].tag, o->tags[i].len);
    }
    int rc = lookup_queue_in(rd->txn, rd->dbi_queues, rd->errmsg, queue, &q);
    if (rc != 0) {
        goto out;
    }
    if (offset < q.start_offset) {
        /* Trimmed by retention: name the low watermark (the wire carries
         * this message to the client). */
        rc = idx__failm(rd->errmsg, TERN_EOFFSET, __LINE__,
                        "offset %llu of %s is below its first offset %llu "
                        "(trimmed by retention)",
                        (unsigned long long)offset, queue,
                        (unsigned long long)q.start_offset);
        goto out;
    }
    if (offset > q.next_offset) {
        rc = idx__failm(rd->errmsg, TERN_EOFFSET, __LINE__,
                        "offset %llu outside [%llu,%llu] of %s",
                        (unsigned long long)offset,
                        (unsigned long long)q.start_offset,
                        (unsigned long long)q.next_offset, queue);
        goto out;
    }
    rc = mdb_cursor_open(rd->txn, rd->dbi_msgs, &cur);
    if (rc != 0) {
        rc = idx__mdb_errm(rd->errmsg, rc, "cursor open");
        goto out;
    }
    while (off < q.next_offset && count < o->max_msgs &&
           (o->max_scan == 0 || scanned < o->max_scan)) {
        uint8_t key[IDX__MSG_KEY_SIZE];
        struct idx__msg_val m;
        struct idx_fetched f;
        MDB_val k, v;
        bool walked = walk_next(&walk, rec_pos, &m);
        if (!walked) {
            idx__msg_key(key, q.id, off);
            if (cur_at == UINT64_MAX || cur_at + 1 != off) {
                k.mv_size = sizeof key;
                k.mv_data = key;
                rc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
            } else {
                rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
            }
            cur_at = off;
            if (rc != 0 || k.mv_size != sizeof key ||
                memcmp(k.mv_data, key, sizeof key) != 0) {
                rc = IDX__CORRUPTM(rd->errmsg,
                                   "queue %s: index entry %llu missing", queue,
                                   (unsigned long long)off);
                goto out;
            }
            if (idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0) {
                rc = IDX__CORRUPTM(rd->errmsg, "queue %s: index entry %llu",
                                   queue, (unsigned long long)off);
                goto out;
            }
        }
        scanned++;
        if (rd->cancel != NULL &&
            atomic_load_explicit(rd->cancel, memory_order_relaxed)) {
            rc = -EAGAIN; /* idx_close waits for this reader */
            goto out;
        }
        if (o->n_tags > 0 && !tag_hash_match(&m, o, hashes)) {
            off++;
            *next_offset = off;
            continue;
        }
        uint64_t size = m.len + (o->with_props ? m.props_len : 0);
        if (count > 0 && bytes + size > o->max_bytes) {
            break;
        }
        rc =
            load_msg_via(rd, "fetch", queue, q.id, off, &m, &rec, &rec_pos, &f);
        if (rc != 0) {
            goto out;
        }
        if (!walked && o->n_tags == 0) {
            walk_start(&walk, &rec, rec_pos, &m);
            if (o->run_cb != NULL && run_head_ok(&walk, &f)) {
                struct fetch_pos fp = {off, bytes, count, scanned};
                int stop =
                    fetch_run(&walk, o, &f, size, q.next_offset, &fp, arg);
                off = fp.off;
                *next_offset = off;
                bytes = fp.bytes;
                count = fp.count;
                scanned = fp.scanned;
                if (stop) {
                    break;
                }
                continue;
            }
        }
        off++;
        *next_offset = off;
        if (o->n_tags > 0 && !tag_match(&f, o)) {
            continue; /* a hash collision */
        }
        count++;
        bytes += size;
        if (cb(arg, &f) != 0) {
            break;
        }
    }
    rc = 0;
out:
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    return rc;
}

int idx_fetch_filtered(struct idx_env *e,
                       const char *queue,
                       uint64_t offset,
                       const struct idx_fetch_opts *o,
                       idx_fetch_cb cb,
                       void *arg,
                       uint64_t *next_offset)
{
    MDB_txn *txn;
    struct rd rd;
    *next_offset = offset;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rd_env(&rd, e, txn);
    rc = fetch_in(&rd, queue, offset, o, cb, arg, next_offset);
    mdb_txn_abort(txn);
    return rc;
}

/* ---- Fetches on another thread (idx_reader) ------------------------------ */

/* Reader states (struct idx_reader.state), as the checkpoint job's. */
enum {
    RD_QUEUED = 0,    /* started, no thread fetches yet */
    RD_RUNNING = 1,   /* a thread fetches */
    RD_DONE = 2,      /* fetched; the read txn is ended */
    RD_ABANDONED = 3, /* idx_close came first: never fetched */
};

struct idx_reader
{
    /* loop thread only */
    struct idx_env *env;   /* NULL once idx_close abandoned or waited */
    struct tern_list link; /* in env->readers */
    uint64_t gen;          /* env->gen at the start */
    /* set at the start, read-only after */
    char queue[TERN_NAME_MAX + 1];
    uint64_t offset;
    struct rd rd; /* rd.txn: ended by the fetching thread */
    struct idx__logview view;
    /* the fetching thread's; read by the loop once state is RD_DONE */
    uint64_t ahead_from; /* the view's read-ahead range, at its close */
    uint64_t ahead_until;
    uint8_t *last_buf; /* the view's last checked record, at its close */
    size_t last_cap;   /* (owned; idx_reader_end hands it to the env) */
    uint64_t last_pos; /* UINT64_MAX: none */
    atomic_int state;
    atomic_bool cancel; /* idx_close: stop at the next message */
    char errmsg[TERN_ERRMSG_SIZE];
};

int idx_reader_start(struct idx_env *e,
                     const char *queue,
                     uint64_t offset,
                     struct idx_reader **out)
{
    struct idx__queue_val q = {0};
    struct idx__msg_val m;
    uint64_t from = idx__log_first(e);
    MDB_txn *txn;
    *out = NULL;
    if (!qname_valid(queue)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid queue name");
    }
    struct idx_reader *r = tern_calloc(1, sizeof *r);
    if (r == NULL) {
        return idx__fail(e, -ENOMEM, __LINE__, "reader: %s", strerror(ENOMEM));
    }
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        tern_free(r);
        return rc;
    }
    /* The view starts at the record of the first message, if retained. */
    if (lookup_queue(e, txn, queue, &q) == 0 && offset >= q.start_offset &&
        offset < q.next_offset &&
        get_msg_row(e, txn, queue, q.id, offset, &m) == 0 &&
        m.rec_pos >= from && m.rec_pos < e->log_end) {
        from = m.rec_pos;
    }
    e->errmsg[0] = '\0';
    rc = idx__logview_init(&r->view, e, from, e->errmsg);
    if (rc != 0) {
        mdb_txn_abort(txn);
        tern_free(r);
        return rc;
    }
    r->last_pos = UINT64_MAX;
    if (e->held_buf != NULL && e->held_pos == from && e->held_gen == e->gen) {
        /* The reader before this one ended in this record: start with it
         * (read and checked in this generation of the log). */
        r->view.rbuf = e->held_buf;
        r->view.rbuf_cap = e->held_cap;
        r->view.rbuf_pos = from;
        e->held_buf = NULL;
    }
    (void)snprintf(r->queue, sizeof r->queue, "%s", queue);
    r->offset = offset;
    rd_env(&r->rd, e, txn);
    r->rd.e = NULL;
    r->rd.view = &r->view;
    r->rd.errmsg = r->errmsg;
    r->rd.cancel = &r->cancel;
    r->view.errmsg = r->errmsg;
    r->env = e;
    r->gen = e->gen;
    atomic_init(&r->state, RD_QUEUED);
    atomic_init(&r->cancel, false);
    tern_list_push(&e->readers, &r->link);
    *out = r;
    return 0;
}

int idx_reader_fetch(struct idx_reader *r,
                     const struct idx_fetch_opts *o,
                     idx_fetch_cb cb,
                     void *arg,
                     uint64_t *next_offset)
{
    int expected = RD_QUEUED;
    int rc;
    *next_offset = r->offset;
    if (!atomic_compare_exchange_strong(&r->state, &expected, RD_RUNNING)) {
        return -EAGAIN; /* abandoned by idx_close */
    }
    rc = fetch_in(&r->rd, r->queue, r->offset, o, cb, arg, next_offset);
    mdb_txn_abort(r->rd.txn); /* MDB_NOTLS: any thread may end it */
    r->rd.txn = NULL;
    r->ahead_from = r->view.ahead_from;
    r->ahead_until = r->view.ahead_until;
    if (r->view.rbuf_pos != UINT64_MAX && r->view.rbuf_cap <= IDX__HELD_MAX) {
        r->last_buf = r->view.rbuf;
        r->last_cap = r->view.rbuf_cap;
        r->last_pos = r->view.rbuf_pos;
        r->view.rbuf = NULL;
    }
    idx__logview_close(&r->view);
    atomic_store(&r->state, RD_DONE);
    return rc;
}

uint64_t idx_generation(const struct idx_env *e)
{
    return e->gen;
}

const char *idx_reader_errmsg(const struct idx_reader *r)
{
    return r->errmsg;
}

/* Loop thread: settle r against its env (abandon it if no thread fetches
 * it yet, else wait for the fetch) and detach it. */
static void reader_settle(struct idx_reader *r)
{
    int expected = RD_QUEUED;
    if (atomic_compare_exchange_strong(&r->state, &expected, RD_ABANDONED)) {
        mdb_txn_abort(r->rd.txn);
        r->rd.txn = NULL;
        idx__logview_close(&r->view);
    }
    atomic_store(&r->cancel, true);
    while (atomic_load(&r->state) == RD_RUNNING) {
        struct timespec ts = {0, 1000000L};
        (void)nanosleep(&ts, NULL);
    }
    tern_list_remove(&r->link);
    r->env = NULL;
}

void idx__readers_abandon(struct idx_env *e)
{
    while (!tern_list_empty(&e->readers)) {
        reader_settle(TERN_CONTAINER(e->readers.next, struct idx_reader, link));
    }
}

int idx_reader_end(struct idx_reader *r)
{
    int rc = -EAGAIN;
    if (r->env != NULL) {
        struct idx_env *e = r->env;
        bool same = e->gen == r->gen;
        bool fetched = atomic_load(&r->state) == RD_DONE;
        reader_settle(r);
        rc = same && fetched ? 0 : -EAGAIN;
        if (rc == 0 && r->ahead_until > r->ahead_from) {
            /* the next reader of this stream asks only for what follows */
            e->view_ahead_from = r->ahead_from;
            e->view_ahead_until = r->ahead_until;
        }
        if (rc == 0 && r->last_buf != NULL) {
            /* and starts with the record this one ended in */
            tern_free(e->held_buf);
            e->held_buf = r->last_buf;
            e->held_cap = r->last_cap;
            e->held_pos = r->last_pos;
            e->held_gen = e->gen;
            r->last_buf = NULL;
        }
    }
    tern_free(r->last_buf);
    tern_free(r);
    return rc;
}

/* The messages at offsets[0..n) of queue, each record read once while
 * consecutive offsets share it. strict: an offset not retained (or a
 * queue id that differs) is TERN_ENOTFOUND; else such offsets are
 * skipped. cb's non-zero return stops the walk (the call returns 0). */
static int messages_get(struct idx_env *e,
                        const char *queue,
                        uint64_t queue_id,
                        const uint64_t *offsets,
                        uint32_t n,
                        bool strict,
                        idx_fetch_cb cb,
                        void *arg)
{
    MDB_txn *txn;
    struct idx__queue_val q = {0};
    struct idx__record rec = {0};
    uint64_t rec_pos = UINT64_MAX;
    struct idx__msg_val m = {0};
    struct idx_fetched f;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc != 0) {
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t offset = offsets[i];
        if ((queue_id != 0 && queue_id != q.id) || offset < q.start_offset ||
            offset >= q.next_offset) {
            if (!strict) {
                continue;
            }
            rc = idx__fail(e, TERN_ENOTFOUND, __LINE__,
                           "no message %llu in queue %s",
                           (unsigned long long)offset, queue);
            goto out;
        }
        rc = get_msg_row(e, txn, queue, q.id, offset, &m);
        if (rc == 0) {
            rc = load_msg(e, "fetch", queue, q.id, offset, &m, &rec, &rec_pos,
                          &f);
        }
        if (rc != 0 || cb(arg, &f) != 0) {
            break;
        }
    }
out:
    mdb_txn_abort(txn);
    return rc;
}

int idx_message_get(struct idx_env *e,
                    const char *queue,
                    uint64_t queue_id,
                    uint64_t offset,
                    idx_fetch_cb cb,
                    void *arg)
{
    return messages_get(e, queue, queue_id, &offset, 1, true, cb, arg);
}

int idx_messages_get(struct idx_env *e,
                     const char *queue,
                     const uint64_t *offsets,
                     uint32_t n,
                     idx_fetch_cb cb,
                     void *arg)
{
    return messages_get(e, queue, 0, offsets, n, false, cb, arg);
}

int idx_message_get_key(struct idx_env *e,
                        const char *queue,
                        const void *key,
                        size_t key_len,
                        uint32_t max,
                        idx_fetch_cb cb,
                        void *arg,
                        uint32_t *n)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL, *mcur = NULL;
    struct idx__queue_val q = {0};
    struct idx__record rec = {0};
    uint64_t rec_pos = UINT64_MAX;
    uint8_t prefix[IDX__KEY_ROW_MAX], last[IDX__KEY_ROW_MAX];
    uint32_t got = 0;
    if (n != NULL) {
        *n = 0;
    }
    if (key == NULL || key_len == 0 || key_len > IDX_KEY_MAX || max == 0) {
        return idx__fail(e, TERN_EINVAL, __LINE__,
                         "a key is 1..%u bytes and max at least 1",
                         IDX_KEY_MAX);
    }
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc != 0) {
        goto out;
    }
    size_t plen = idx__key_row(prefix, q.id, key, key_len, 0, true);
    size_t llen = idx__key_row(last, q.id, key, key_len, UINT64_MAX, false);
    if ((rc = mdb_cursor_open(txn, e->dbi_keys, &cur)) != 0 ||
        (rc = mdb_cursor_open(txn, e->dbi_msgs, &mcur)) != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        goto out;
    }
    /* Newest first: from the last row of the key (offset UINT64_MAX is
     * never a row: the first row at or after it, then back). */
    MDB_val k = {llen, last}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (mrc == MDB_NOTFOUND) {
        mrc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    } else if (mrc == 0) {
        mrc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
    }
    for (; mrc == 0 && got < max; mrc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
        if (k.mv_size != plen + 8 || memcmp(k.mv_data, prefix, plen) != 0) {
            break;
        }
        uint64_t off = idx__get_be64((const uint8_t *)k.mv_data + plen);
        if (off < q.start_offset) {
            break; /* trimmed: awaiting the cleaner */
        }
        uint8_t mkey[IDX__MSG_KEY_SIZE];
        struct idx__msg_val m;
        struct idx_fetched f;
        idx__msg_key(mkey, q.id, off);
        MDB_val mk = {sizeof mkey, mkey}, mv;
        rc = mdb_cursor_get(mcur, &mk, &mv, MDB_SET_KEY);
        if (rc != 0 || idx__msg_val_decode(mv.mv_data, mv.mv_size, &m) != 0) {
            rc = IDX__CORRUPT(e,
                              "queue %s: key row of offset %llu has no "
                              "message",
                              queue, (unsigned long long)off);
            goto out;
        }
        rc = load_msg(e, "fetch", queue, q.id, off, &m, &rec, &rec_pos, &f);
        if (rc != 0) {
            goto out;
        }
        got++;
        if (cb(arg, &f) != 0) {
            break;
        }
    }
    if (mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "cursor");
        goto out;
    }
    rc = 0;
    if (n != NULL) {
        *n = got;
    }
out:
    if (mcur != NULL) {
        mdb_cursor_close(mcur);
    }
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return rc;
}

/* ---- Message trace ------------------------------------------------------- */

/* From the entry of the message (payload, verified): the TERM command and
 * the produce command whose message bytes hold data_off. */
static int trace_entry(struct idx_env *e,
                       const struct idx__record *rec,
                       const struct idx__msg_val *m,
                       struct idx_trace *out)
{
    struct idx__entry it;
    struct idx__cmd cmd;
    const uint8_t *data = rec->payload + m->data_off;
    bool found = false;
    int rc = idx__entry_open(&it, rec->payload, rec->payload_len);
    if (rc != 0) {
        return IDX__CORRUPT(e, "entry %llu of a message is not a command entry",
                            (unsigned long long)rec->index);
    }
    while ((rc = idx__entry_next(&it, &cmd)) == 1) {
        if (cmd.type == IDX_CMD_TERM) {
            out->term = cmd.term;
            continue;
        }
        if (found ||
            (cmd.type != IDX_CMD_PRODUCE &&
             cmd.type != IDX_CMD_PRODUCE_PROPS) ||
            data < cmd.msgs || data >= cmd.msgs + cmd.msgs_len) {
            continue;
        }
        struct idx__msg_iter mi;
        const uint8_t *p;
        uint32_t len, i = 0;
        idx__msg_iter_init(&mi, &cmd);
        while (idx__msg_iter_next(&mi, &p, &len) == 1) {
            if (p == data) {
                out->seq = cmd.seq;
                out->batch_pos = i;
                out->batch_count = cmd.n_msgs;
                found = true;
                break;
            }
            i++;
        }
    }
    if (rc != 0 || !found) {
        return IDX__CORRUPT(e, "entry %llu holds no message at byte %u",
                            (unsigned long long)rec->index, m->data_off);
    }
    return 0;
}

/* The groups of queue id qid whose committed offset is past offset. */
static int trace_groups(struct idx_env *e,
                        MDB_txn *txn,
                        uint64_t qid,
                        uint64_t offset,
                        idx_trace_group_cb cb,
                        void *arg)
{
    MDB_cursor *cur;
    uint8_t prefix[8];
    char name[TERN_NAME_MAX + 1];
    int rc = mdb_cursor_open(txn, e->dbi_groups, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "cursor open");
    }
    idx__put_be64(prefix, qid);
    MDB_val k = {sizeof prefix, prefix}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__group_val g;
        if (k.mv_size <= sizeof prefix ||
            memcmp(k.mv_data, prefix, sizeof prefix) != 0) {
            break;
        }
        size_t n = k.mv_size - sizeof prefix;
        const char *gn = (const char *)k.mv_data + sizeof prefix;
        if (n > TERN_NAME_MAX || !tern_name_valid(gn, n) ||
            idx__group_val_decode(v.mv_data, v.mv_size, &g) != 0) {
            rc = IDX__CORRUPT(e, "group row of queue id %llu",
                              (unsigned long long)qid);
            break;
        }
        if (g.next_offset <= offset) {
            continue;
        }
        memcpy(name, gn, n);
        name[n] = '\0';
        struct idx_trace_group tg = {name, g.next_offset, g.commit_ms,
                                     g.commit_index};
        if (cb(arg, &tg) != 0) {
            break;
        }
    }
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "cursor");
    }
    mdb_cursor_close(cur);
    return rc;
}

int idx_message_trace(struct idx_env *e,
                      const char *queue,
                      uint64_t offset,
                      struct idx_trace *out,
                      idx_trace_group_cb cb,
                      void *arg)
{
    MDB_txn *txn;
    struct idx__queue_val q = {0};
    struct idx__record rec = {0};
    uint64_t rec_pos = UINT64_MAX;
    struct idx__msg_val m = {0};
    struct idx_fetched f = {0};
    memset(out, 0, sizeof *out);
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc != 0) {
        goto out;
    }
    if (offset < q.start_offset) {
        rc = idx__fail(e, TERN_EOFFSET, __LINE__,
                       "offset %llu is below the queue's first offset %llu "
                       "(trimmed by retention)",
                       (unsigned long long)offset,
                       (unsigned long long)q.start_offset);
        goto out;
    }
    if (offset >= q.next_offset) {
        rc = idx__fail(e, TERN_EOFFSET, __LINE__,
                       "offset %llu is at or beyond the queue end %llu",
                       (unsigned long long)offset,
                       (unsigned long long)q.next_offset);
        goto out;
    }
    rc = get_msg_row(e, txn, queue, q.id, offset, &m);
    if (rc == 0) {
        rc = load_msg(e, "trace", queue, q.id, offset, &m, &rec, &rec_pos, &f);
    }
    if (rc != 0) {
        goto out;
    }
    out->queue_id = q.id;
    out->offset = offset;
    out->append_ms = f.timestamp_ms;
    out->producer_id = f.producer_id;
    out->len = f.len;
    out->raft_index = rec.index;
    if (f.props_len > 0) {
        struct idx_props p;
        if (idx_props_decode(f.props, f.props_len, &p) != 0) {
            rc = IDX__CORRUPT(e, "queue %s: properties of message %llu", queue,
                              (unsigned long long)offset);
            goto out;
        }
        out->key_len = (uint16_t)p.key_len;
        out->tag_len = (uint8_t)p.tag_len;
        if (p.key_len > 0) {
            memcpy(out->key, p.key, p.key_len);
        }
        if (p.tag_len > 0) {
            memcpy(out->tag, p.tag, p.tag_len);
        }
    }
    rc = trace_entry(e, &rec, &m, out);
    if (rc == 0 && cb != NULL) {
        rc = trace_groups(e, txn, q.id, offset, cb, arg);
    }
out:
    mdb_txn_abort(txn);
    return rc;
}

int idx_offset_for_time(struct idx_env *e,
                        const char *queue,
                        uint64_t time_ms,
                        uint64_t *offset)
{
    MDB_txn *txn;
    struct idx__queue_val q = {0};
    int rc = rtxn_begin(e, &txn);
    *offset = 0;
    if (rc != 0) {
        return rc;
    }
    rc = lookup_queue(e, txn, queue, &q);
    if (rc == 0) {
        rc = idx__msgs_time_search(e, txn, q.id, q.start_offset, q.next_offset,
                                   time_ms, offset);
    }
    mdb_txn_abort(txn);
    return rc;
}

uint64_t idx_last_append_ms(const struct idx_env *e)
{
    return e->st.last_append_ms;
}

/* ---- Security metadata -------------------------------------------------- */

static int name_valid_max(const char *name, size_t max)
{
    size_t n = name != NULL ? strnlen(name, max + 1) : 0;
    return n <= max && tern_name_valid(name, n);
}

/* Walk dbi from the first key (or from the first key >= from, from_len
 * bytes; > from when skip_from), calling each(e, arg, k, v) until it returns
 * non-zero (1 stops without error, negative is an error). */
typedef int (*walk_fn)(struct idx_env *e,
                       void *arg,
                       const MDB_val *k,
                       const MDB_val *v);
static int walk(struct idx_env *e,
                MDB_dbi dbi,
                const void *from,
                size_t from_len,
                bool skip_from,
                walk_fn each,
                void *arg)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != 0) {
        rc = idx__mdb_err(e, rc, "cursor open");
        mdb_txn_abort(txn);
        return rc;
    }
    int mrc;
    if (from_len > 0) {
        k.mv_size = from_len;
        k.mv_data = (void *)(uintptr_t)from;
        mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (mrc == 0 && skip_from && k.mv_size == from_len &&
            memcmp(k.mv_data, from, from_len) == 0) {
            mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
    } else {
        mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    }
    for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        rc = each(e, arg, &k, &v);
        if (rc != 0) {
            break;
        }
    }
    if (rc == 0 && mrc != 0 && mrc != MDB_NOTFOUND) {
        rc = idx__mdb_err(e, mrc, "cursor");
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return rc < 0 ? rc : 0;
}

static int user_info(struct idx_env *e,
                     const MDB_val *k,
                     const MDB_val *v,
                     char *name,
                     struct idx_user_info *out)
{
    struct idx__user_val u;
    if (k->mv_size == 0 || k->mv_size > IDX_USER_NAME_MAX ||
        idx__user_val_decode(v->mv_data, v->mv_size, &u) != 0) {
        return IDX__CORRUPT(e, "user entry");
    }
    memcpy(name, k->mv_data, k->mv_size);
    name[k->mv_size] = '\0';
    out->name = name;
    out->flags = u.flags;
    out->created_index = u.created_index;
    out->cred_len = u.cred_len;
    memcpy(out->cred, u.cred, u.cred_len);
    return 0;
}

struct user_walk
{
    idx_user_cb cb;
    void *arg;
};

static int user_each(struct idx_env *e,
                     void *arg,
                     const MDB_val *k,
                     const MDB_val *v)
{
    struct user_walk *uw = arg;
    char name[IDX_USER_NAME_MAX + 1];
    struct idx_user_info ui;
    int rc = user_info(e, k, v, name, &ui);
    if (rc != 0) {
        return rc;
    }
    return uw->cb(uw->arg, &ui) != 0 ? 1 : 0;
}

int idx_user_list(struct idx_env *e, idx_user_cb cb, void *arg)
{
    return idx_user_list_after(e, NULL, cb, arg);
}

int idx_user_list_after(struct idx_env *e,
                        const char *after,
                        idx_user_cb cb,
                        void *arg)
{
    struct user_walk uw = {cb, arg};
    size_t n = after != NULL ? strlen(after) : 0;
    return walk(e, e->dbi_users, after, n, true, user_each, &uw);
}

int idx_user_get(struct idx_env *e, const char *name, struct idx_user_info *out)
{
    MDB_txn *txn;
    char copy[IDX_USER_NAME_MAX + 1];
    if (!name_valid_max(name, IDX_USER_NAME_MAX)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid user name");
    }
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    MDB_val k = {strlen(name), (void *)(uintptr_t)name}, v;
    rc = mdb_get(txn, e->dbi_users, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOTFOUND, __LINE__, "no user %s", name);
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get user");
    } else {
        rc = user_info(e, &k, &v, copy, out);
        out->name = name;
    }
    mdb_txn_abort(txn);
    return rc;
}

struct acl_walk
{
    idx_acl_cb cb;
    void *arg;
    size_t prefix_len; /* user name + 0x00, or 0 for all */
    const char *prefix;
};

static int acl_each(struct idx_env *e,
                    void *arg,
                    const MDB_val *k,
                    const MDB_val *v)
{
    struct acl_walk *aw = arg;
    struct idx__acl_key ak;
    if (aw->prefix_len > 0 &&
        (k->mv_size < aw->prefix_len ||
         memcmp(k->mv_data, aw->prefix, aw->prefix_len) != 0)) {
        return 1;
    }
    if (idx__acl_key_split(k->mv_data, k->mv_size, &ak) != 0 ||
        v->mv_size != 4) {
        return IDX__CORRUPT(e, "grant entry");
    }
    struct idx_acl a = {
        .user = ak.user,
        .ns = ak.ns,
        .pattern = ak.pattern,
        .perms = tern_get_u32(v->mv_data),
    };
    return aw->cb(aw->arg, &a) != 0 ? 1 : 0;
}

int idx_acl_list(struct idx_env *e, const char *user, idx_acl_cb cb, void *arg)
{
    return idx_acl_list_after(e, user, NULL, cb, arg);
}

int idx_acl_list_after(struct idx_env *e,
                       const char *user,
                       const struct idx_acl *after,
                       idx_acl_cb cb,
                       void *arg)
{
    char prefix[IDX_USER_NAME_MAX + 1];
    uint8_t key[IDX__ACL_KEY_MAX];
    struct acl_walk aw = {cb, arg, 0, prefix};
    const void *from = prefix;
    size_t from_len;
    if (user != NULL && user[0] != '\0') {
        if (!name_valid_max(user, IDX_USER_NAME_MAX)) {
            return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid user name");
        }
        aw.prefix_len = strlen(user) + 1;
        memcpy(prefix, user, aw.prefix_len); /* with its NUL: the 0x00 */
    }
    from_len = aw.prefix_len;
    if (after != NULL) {
        if (!name_valid_max(after->user, IDX_USER_NAME_MAX) ||
            !name_valid_max(after->ns, IDX_NS_NAME_MAX) ||
            after->pattern == NULL ||
            !idx_acl_pattern_valid(after->pattern, strlen(after->pattern))) {
            return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid grant key");
        }
        size_t n = idx__acl_key(key, after->user, strlen(after->user),
                                after->ns, strlen(after->ns), after->pattern,
                                strlen(after->pattern));
        /* Start at the later of the user's range and the cursor. */
        size_t common = TERN_MIN(n, from_len);
        int cmp = memcmp(key, prefix, common);
        if (cmp > 0 || (cmp == 0 && n > from_len)) {
            from = key;
            from_len = n;
        }
    }
    return walk(e, e->dbi_acls, from, from_len, true, acl_each, &aw);
}

uint32_t idx_acl_eval(const struct idx_acl *g,
                      size_t n,
                      bool admin,
                      const char *ns,
                      const char *queue)
{
    uint32_t perms = 0;
    if (admin) {
        return IDX_PERM_ALL;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(g[i].ns, ns) == 0 &&
            idx_acl_pattern_match(g[i].pattern, queue)) {
            perms |= g[i].perms;
        }
    }
    return (perms & IDX_PERM_ADMIN) != 0 ? IDX_PERM_ALL : perms;
}

struct allows_walk
{
    const char *ns;
    const char *queue;
    uint32_t perms;
};

static int allows_each(void *arg, const struct idx_acl *a)
{
    struct allows_walk *w = arg;
    w->perms |= idx_acl_eval(a, 1, false, w->ns, w->queue);
    return 0;
}

int idx_acl_allows(struct idx_env *e,
                   const char *user,
                   const char *ns,
                   const char *queue,
                   uint32_t want,
                   bool *allowed)
{
    struct idx_user_info u = {0};
    struct allows_walk w = {ns, queue, 0};
    *allowed = false;
    if (!name_valid_max(ns, IDX_NS_NAME_MAX)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid namespace");
    }
    int rc = idx_user_get(e, user, &u);
    if (rc == TERN_ENOTFOUND) {
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if ((u.flags & IDX_USER_ADMIN) != 0) {
        *allowed = true;
        return 0;
    }
    rc = idx_acl_list(e, user, allows_each, &w);
    if (rc == 0) {
        *allowed = want != 0 && (w.perms & want) == want;
    }
    return rc;
}

struct ns_walk
{
    idx_namespace_cb cb;
    void *arg;
    bool default_seen;
};

static int ns_default(struct ns_walk *w)
{
    struct idx_namespace_info ni = {.name = IDX_NAMESPACE_DEFAULT};
    w->default_seen = true;
    return w->cb(w->arg, &ni) != 0 ? 1 : 0;
}

static int ns_each(struct idx_env *e,
                   void *arg,
                   const MDB_val *k,
                   const MDB_val *v)
{
    struct ns_walk *w = arg;
    struct idx__ns_val nv;
    char name[IDX_NS_NAME_MAX + 1];
    if (k->mv_size == 0 || k->mv_size > IDX_NS_NAME_MAX ||
        idx__ns_val_decode(v->mv_data, v->mv_size, &nv) != 0) {
        return IDX__CORRUPT(e, "namespace entry");
    }
    memcpy(name, k->mv_data, k->mv_size);
    name[k->mv_size] = '\0';
    int cmp = strcmp(name, IDX_NAMESPACE_DEFAULT);
    if (!w->default_seen && cmp > 0 && ns_default(w) != 0) {
        return 1;
    }
    if (cmp == 0) {
        w->default_seen = true;
    }
    struct idx_namespace_info ni = {
        .name = name,
        .created_index = nv.created_index,
        .quota = nv.quota,
    };
    return w->cb(w->arg, &ni) != 0 ? 1 : 0;
}

int idx_namespace_list(struct idx_env *e, idx_namespace_cb cb, void *arg)
{
    return idx_namespace_list_after(e, NULL, cb, arg);
}

int idx_namespace_list_after(struct idx_env *e,
                             const char *after,
                             idx_namespace_cb cb,
                             void *arg)
{
    size_t n = after != NULL ? strlen(after) : 0;
    /* The implicit "default" is listed only if it sorts after after. */
    struct ns_walk w = {cb, arg,
                        n > 0 && strcmp(after, IDX_NAMESPACE_DEFAULT) >= 0};
    int rc = walk(e, e->dbi_namespaces, after, n, true, ns_each, &w);
    if (rc == 0 && !w.default_seen) {
        (void)ns_default(&w);
    }
    return rc;
}

int idx_namespace_get(struct idx_env *e,
                      const char *name,
                      struct idx_namespace_info *out)
{
    MDB_txn *txn;
    struct idx__ns_val nv;
    if (!name_valid_max(name, IDX_NS_NAME_MAX)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid namespace");
    }
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    memset(out, 0, sizeof *out);
    out->name = name;
    MDB_val k = {strlen(name), (void *)(uintptr_t)name}, v;
    rc = mdb_get(txn, e->dbi_namespaces, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = strcmp(name, IDX_NAMESPACE_DEFAULT) == 0
                 ? 0
                 : idx__fail(e, TERN_ENOTFOUND, __LINE__, "no namespace %s",
                             name);
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get namespace");
    } else if (idx__ns_val_decode(v.mv_data, v.mv_size, &nv) != 0) {
        rc = IDX__CORRUPT(e, "namespace value of %s", name);
    } else {
        out->created_index = nv.created_index;
        out->quota = nv.quota;
    }
    mdb_txn_abort(txn);
    return rc;
}

int idx_producer_owner(struct idx_env *e,
                       uint64_t pid,
                       char *owner,
                       bool *owned)
{
    MDB_txn *txn;
    struct idx__pid_val p;
    uint8_t key[8];
    owner[0] = '\0';
    *owned = false;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    idx__put_be64(key, pid >> IDX__PID_BLOCK_SHIFT);
    MDB_val k = {sizeof key, key}, v;
    rc = mdb_get(txn, e->dbi_pids, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = idx__fail(e, TERN_ENOTFOUND, __LINE__,
                       "producer id %llu: block %llu never issued",
                       (unsigned long long)pid,
                       (unsigned long long)(pid >> IDX__PID_BLOCK_SHIFT));
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get producer id");
    } else if (idx__pid_val_decode(v.mv_data, v.mv_size, &p) != 0) {
        rc = IDX__CORRUPT(e, "producer id %llu", (unsigned long long)pid);
    } else {
        memcpy(owner, p.owner, p.owner_len + 1);
        if (p.owner_len == 0) {
            *owned = true;
        } else {
            MDB_val uk = {p.owner_len, p.owner}, uv;
            struct idx__user_val u;
            int urc = mdb_get(txn, e->dbi_users, &uk, &uv);
            if (urc == 0) {
                if (idx__user_val_decode(uv.mv_data, uv.mv_size, &u) != 0) {
                    rc = IDX__CORRUPT(e, "user value of %s", p.owner);
                } else {
                    *owned = u.created_index == p.owner_created_index;
                }
            } else if (urc != MDB_NOTFOUND) {
                rc = idx__mdb_err(e, urc, "get user");
            }
        }
    }
    mdb_txn_abort(txn);
    return rc;
}

uint64_t idx_next_producer_id(const struct idx_env *e)
{
    return e->st.next_producer_id;
}

int idx_ns_usage(struct idx_env *e,
                 const char *ns,
                 uint64_t *queues,
                 uint64_t *bytes)
{
    MDB_txn *txn;
    struct idx__usage_val u = {0};
    *queues = 0;
    *bytes = 0;
    if (ns == NULL || ns[0] == '\0') {
        ns = IDX_NAMESPACE_DEFAULT;
    }
    if (!name_valid_max(ns, IDX_NS_NAME_MAX)) {
        return idx__fail(e, TERN_EBADNAME, __LINE__, "invalid namespace");
    }
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    MDB_val k = {strlen(ns), (void *)(uintptr_t)ns}, v;
    rc = mdb_get(txn, e->dbi_usage, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = 0;
    } else if (rc != 0) {
        rc = idx__mdb_err(e, rc, "get usage");
    } else if (idx__usage_val_decode(v.mv_data, v.mv_size, &u) != 0) {
        rc = IDX__CORRUPT(e, "usage value of %s", ns);
    } else {
        *queues = u.queues;
        *bytes = u.bytes;
    }
    mdb_txn_abort(txn);
    return rc;
}

/* ---- Retention planning (the leader's side of TRIM, apply.c) ----------- */

int idx_trim_plan(struct idx_env *e,
                  const char *queue,
                  uint64_t now_ms,
                  uint64_t max_msgs,
                  struct idx_trim_plan *plan)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    struct idx__queue_val q = {0};
    const struct idx_queue_settings *st = &q.settings;
    uint64_t keep, bytes;
    int rc = rtxn_begin(e, &txn);
    if (rc != 0) {
        return rc;
    }
    memset(plan, 0, sizeof(*plan));
    rc = lookup_queue(e, txn, queue, &q);
    if (rc != 0) {
        goto out;
    }
    plan->queue_id = q.id;
    plan->from = plan->to = q.start_offset;
    keep = q.start_offset;
    bytes = q.bytes;
    if (st->max_age_ms > 0 && now_ms > st->max_age_ms &&
        q.start_offset < q.next_offset) {
        uint64_t at;
        rc = idx__msgs_time_search(e, txn, q.id, q.start_offset, q.next_offset,
                                   now_ms - st->max_age_ms, &at);
        if (rc != 0) {
            goto out;
        }
        keep = TERN_MAX(keep, at);
    }
    if (st->overflow == IDX_OVERFLOW_DROP_OLDEST && st->max_messages > 0 &&
        q.next_offset - q.start_offset > st->max_messages) {
        keep = TERN_MAX(keep, q.next_offset - st->max_messages);
    }
    if (max_msgs == 0) {
        max_msgs = 1;
    }
    /* Walk the rows to drop: their bytes, and further while the bytes
     * limit still does not hold. */
    bool by_bytes =
        st->overflow == IDX_OVERFLOW_DROP_OLDEST && st->max_bytes > 0;
    uint64_t off = q.start_offset, dropped = 0;
    if (off < keep || (by_bytes && bytes > st->max_bytes)) {
        uint8_t key[IDX__MSG_KEY_SIZE];
        MDB_val k = {sizeof key, key}, v;
        int mrc = mdb_cursor_open(txn, e->dbi_msgs, &cur);
        if (mrc != 0) {
            rc = idx__mdb_err(e, mrc, "cursor open");
            goto out;
        }
        idx__msg_key(key, q.id, off);
        mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
        while ((off < keep || (by_bytes && bytes > st->max_bytes)) &&
               off < q.next_offset && off - q.start_offset < max_msgs) {
            struct idx__msg_val m;
            uint8_t want[IDX__MSG_KEY_SIZE];
            idx__msg_key(want, q.id, off);
            if (mrc != 0 || k.mv_size != sizeof want ||
                memcmp(k.mv_data, want, sizeof want) != 0 ||
                idx__msg_val_decode(v.mv_data, v.mv_size, &m) != 0 ||
                m.len > bytes) {
                rc = mrc != 0 && mrc != MDB_NOTFOUND
                         ? idx__mdb_err(e, mrc, "get message")
                         : IDX__CORRUPT(e, "queue %s: index entry %llu", queue,
                                        (unsigned long long)off);
                goto out;
            }
            bytes -= m.len;
            dropped += m.len;
            off++;
            mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
    }
    plan->to = off;
    plan->bytes = dropped;
out:
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    return rc;
}

struct over_scan
{
    void (*cb)(void *arg, const char *queue);
    void *arg;
};

static int over_scan_cb(void *arg, const struct idx_queue_info *q)
{
    struct over_scan *o = arg;
    const struct idx_queue_settings *st = &q->settings;
    if (st->overflow == IDX_OVERFLOW_DROP_OLDEST &&
        ((st->max_messages > 0 &&
          q->next_offset - q->start_offset > st->max_messages) ||
         (st->max_bytes > 0 && q->bytes > st->max_bytes))) {
        o->cb(o->arg, q->name);
    }
    return 0;
}

void idx_over_limits_drain(struct idx_env *e,
                           void (*cb)(void *arg, const char *queue),
                           void *arg)
{
    size_t n = e->n_over;
    bool lost = e->over_lost;
    e->n_over = 0;
    e->over_lost = false;
    for (size_t i = 0; i < n; i++) {
        cb(arg, e->over[i]);
    }
    if (lost) {
        /* More than the list holds: find them all (flushed state). */
        struct over_scan o = {cb, arg};
        (void)idx_queue_list(e, over_scan_cb, &o);
    }
}
