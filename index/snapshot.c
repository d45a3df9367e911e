/*
 * Snapshots and bulk catch-up. A tern snapshot is not a copy of the data:
 * the commit log is byte-identical on every node, so the snapshot handed
 * to Raft is a small manifest naming a prefix of the log. A follower that
 * lacks that prefix copies the missing bytes from the leader's log
 * (idx_bulk_range/read/write, out of band) and then adopts the manifest
 * (idx_restore), which indexes the copied records, verifying each one.
 *
 * Manifest layout (version 2, 64 bytes, little-endian; encoded/decoded
 * byte by byte, be careful when adapting):
 *
 *   offset size  field
 *   0      4     magic 0x504e5354 ("TSNP")
 *   4      2     version = 2
 *   6      2     flags = 0
 *   8      8     last_applied       raft index of the last record
 *   16     8     log_end            log position just after it
 *   24     8     last_rec_pos       its position
 *   32     4     last_rec_checksum  its record checksum
 *   36     4     ckpt_sum           header checksum of the checkpoint at
 *                                   log_start (0 when log_start is 0)
 *   40     8     log_start          where the sender's log starts
 *   48     8     ckpt_size          that checkpoint's file size
 *   56     4     reserved = 0
 *   60     4     tern_checksum32 over bytes [0,60)
 *
 * Version 1 (40 bytes: bytes [0,36) as above, then the checksum over
 * them) is still read, as a log that starts at 0.
 *
 * Retention (docs/MESSAGES.md). idx_snapshot is where the head of the log
 * is deleted: after the sync, the log is trimmed to the newest checkpoint
 * (ckpt.c) at or before both the first record any queue still needs and
 * the log end of the previous manifest (so the manifest raft persisted
 * before this one still names a log this node can verify); segments that
 * end at or before it and older checkpoints are deleted, and the manifest
 * names the new log start and its checkpoint. A trimmed log never trims
 * to a checkpoint larger than its own position (see below). Nothing is
 * trimmed while a backup runs (backup.c copies from the log start).
 *
 * A follower whose log ends before the manifest's log_start cannot
 * continue from its own log. The bulk stream then starts ckpt_size bytes
 * before log_start: positions [log_start - ckpt_size, log_start) are the
 * bytes of the sender's checkpoint file at log_start, and positions from
 * log_start on are the log. idx_bulk_range sets up a staging file
 * (log/stage.ckpt) for the first part; when it is complete and its
 * checksums match the manifest, the follower rebases: every segment and
 * checkpoint it had is deleted, the staged file becomes its checkpoint at
 * log_start, LMDB is emptied and loaded from it and the log restarts
 * empty at log_start; the rest of the stream is appended as usual and
 * idx_restore indexes it. Until the staged checkpoint is complete the
 * follower's own log and index are untouched, so an abandoned fetch
 * leaves it as it was; after the rebase it is a consistent (older) state.
 *
 * Happy path (follower): range = idx_bulk_range(manifest); copy
 * [from,to) with idx_bulk_read on the leader and idx_bulk_write here
 * (segment cuts may differ: positions are global); idx_restore(manifest).
 * Failure modes: a record that fails verification during idx_restore
 * truncates the log back to the last indexed record (so a retry copies
 * again) and returns TERN_ECORRUPT; a log that holds a different record at
 * the manifest's last position returns TERN_ECORRUPT and changes nothing.
 * Bytes beyond the manifest's log_end that were copied but are not
 * covered by it are truncated by idx_restore: Raft re-applies those
 * entries after the snapshot index.
 *
 * Abandoned fetches (jepsen F2 "known gap"): raft/bulk.c keeps the bytes
 * of an aborted fetch (stall timer, error status, newer snapshot) in the
 * log so that a resend of the snapshot only fetches the rest. If raft
 * instead goes on applying entries (the leader changed, or the follower
 * learned the commit of entries it already holds), those bytes sit where
 * the next record must go. idx_apply then drops them first
 * (idx_bulk_discard, apply.c: ftruncate back to the indexed end + fsync,
 * on the calling thread; a later fetch asks for them again). Decision: drop
 * lazily at the first apply rather than at the abort (no FSM callback is
 * needed and a prompt resend still reuses the bytes), and rather than
 * staging fetched bytes outside the log (a second copy at restore and a
 * second file set to recover).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "idx_int.h"

#define IDX__MANIFEST_MAGIC   0x504e5354U
#define IDX__MANIFEST_VERSION 2

int idx__manifest_decode(const void *buf, size_t len, struct idx__manifest *m)
{
    const uint8_t *b = buf;
    unsigned version;
    if (buf == NULL ||
        (len != IDX__MANIFEST_SIZE && len != IDX__MANIFEST_SIZE_V1) ||
        tern_get_u32(b) != IDX__MANIFEST_MAGIC) {
        return TERN_EMALFORMED;
    }
    version = len == IDX__MANIFEST_SIZE_V1 ? 1 : 2;
    if (!IDX__CHECKSUM_OK(tern_get_u32(b + len - 4),
                          tern_checksum32(b, len - 4))) {
        return TERN_EMALFORMED;
    }
    if (tern_get_u16(b + 4) != version) {
        return TERN_EVERSION;
    }
    if (tern_get_u16(b + 6) != 0) {
        return TERN_EMALFORMED;
    }
    m->last_applied = tern_get_u64(b + 8);
    m->log_end = tern_get_u64(b + 16);
    m->last_rec_pos = tern_get_u64(b + 24);
    m->last_rec_checksum = tern_get_u32(b + 32);
    m->ckpt_sum = 0;
    m->log_start = 0;
    m->ckpt_size = 0;
    if (version == 2) {
        m->ckpt_sum = tern_get_u32(b + 36);
        m->log_start = tern_get_u64(b + 40);
        m->ckpt_size = tern_get_u64(b + 48);
        if (tern_get_u32(b + 56) != 0 || m->log_start > m->log_end ||
            (m->log_start == 0) != (m->ckpt_size == 0) ||
            m->ckpt_size > m->log_start) {
            return TERN_EMALFORMED;
        }
    }
    if (m->last_applied == 0
            ? (m->log_end != 0 || m->last_rec_pos != 0)
            : (m->log_end < IDX__REC_HDR_SIZE ||
               m->last_rec_pos > m->log_end - IDX__REC_HDR_SIZE)) {
        return TERN_EMALFORMED;
    }
    return 0;
}

void idx__manifest_encode(uint8_t *b, const struct idx__manifest *m)
{
    tern_put_u32(b, IDX__MANIFEST_MAGIC);
    tern_put_u16(b + 4, IDX__MANIFEST_VERSION);
    tern_put_u16(b + 6, 0);
    tern_put_u64(b + 8, m->last_applied);
    tern_put_u64(b + 16, m->log_end);
    tern_put_u64(b + 24, m->last_rec_pos);
    tern_put_u32(b + 32, m->last_rec_checksum);
    tern_put_u32(b + 36, m->ckpt_sum);
    tern_put_u64(b + 40, m->log_start);
    tern_put_u64(b + 48, m->ckpt_size);
    tern_put_u32(b + 56, 0);
    tern_put_u32(b + 60, tern_checksum32(b, 60));
}

/* ---- Retention: the head of the log ------------------------------------- */

/* The first log position any queue still needs: the record of each
 * non-empty queue's first retained message (its start_offset row), and
 * the oldest record of a pending timer (timer.c). */
static int needed_pos(struct idx_env *e, uint64_t *out)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint64_t need = e->st.log_end;
    int rc = idx__txn_begin(e);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_cursor_open(e->wtxn, e->dbi_queues, &cur);
    if (rc != 0) {
        return idx__mdb_err(e, rc, "retention cursor");
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct idx__queue_val q;
        struct idx__msg_val mv;
        uint8_t mk[IDX__MSG_KEY_SIZE];
        MDB_val mkey = {sizeof mk, mk}, mval;
        if (idx__queue_val_decode(v.mv_data, v.mv_size, &q) != 0) {
            mdb_cursor_close(cur);
            return IDX__CORRUPT(e, "retention: bad queue row");
        }
        if (q.start_offset >= q.next_offset) {
            continue;
        }
        idx__msg_key(mk, q.id, q.start_offset);
        int grc = mdb_get(e->wtxn, e->dbi_msgs, &mkey, &mval);
        if (grc != 0 ||
            idx__msg_val_decode(mval.mv_data, mval.mv_size, &mv) != 0) {
            mdb_cursor_close(cur);
            return grc != 0 && grc != MDB_NOTFOUND
                       ? idx__mdb_err(e, grc, "retention get")
                       : IDX__CORRUPT(e,
                                      "retention: queue %llu has no row "
                                      "for its first offset %llu",
                                      (unsigned long long)q.id,
                                      (unsigned long long)q.start_offset);
        }
        need = TERN_MIN(need, mv.rec_pos);
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND) {
        return idx__mdb_err(e, rc, "retention walk");
    }
    rc = idx__timer_need(e, &need);
    if (rc != 0) {
        return rc;
    }
    *out = need;
    return 0;
}

/* Trim the head of the log (see the top). Called with everything synced. */
static int trim_head(struct idx_env *e)
{
    uint64_t need = 0, to = 0;
    int rc;
    if (e->backup != NULL) {
        return 0; /* a backup copies from the log start (backup.c) */
    }
    rc = needed_pos(e, &need);
    if (rc != 0) {
        return rc;
    }
    need = TERN_MIN(need, e->prev_snap_end);
    for (size_t i = 0; i < e->n_ckpts; i++) {
        uint32_t sum;
        uint64_t c = e->ckpts[i];
        if (c > need) {
            break;
        }
        /* The bulk stream puts the checkpoint just before its position:
         * it must fit there. */
        uint64_t size = idx__ckpt_file_size(e, c, &sum);
        if (size != 0 && size <= c) {
            to = c;
        }
    }
    if (to <= e->log_start) {
        return 0;
    }
    rc = idx__log_drop_head(e, to);
    if (rc != 0) {
        return rc;
    }
    idx__ckpt_drop_before(e, to);
    e->log_start = to;
    return idx__log_sync(e);
}

int idx_snapshot(struct idx_env *e, struct tern_wbuf *w)
{
    uint64_t ckpt_size = 0;
    uint32_t ckpt_sum = 0;
    int rc = idx_sync(e);
    if (rc != 0) {
        return rc;
    }
    rc = trim_head(e);
    if (rc != 0) {
        return rc;
    }
    if (e->log_start > 0) {
        ckpt_size = idx__ckpt_file_size(e, e->log_start, &ckpt_sum);
        if (ckpt_size == 0 || ckpt_size > e->log_start) {
            return IDX__CORRUPT(e,
                                "the checkpoint at the log start %llu "
                                "is missing or unusable",
                                (unsigned long long)e->log_start);
        }
    }
    uint8_t *b = tern_wbuf_reserve(w, IDX__MANIFEST_SIZE);
    if (b == NULL) {
        return w->err != 0 ? w->err : -ENOMEM;
    }
    struct idx__manifest m = {
        .last_applied = e->committed.last_applied,
        .log_end = e->committed.log_end,
        .last_rec_pos = e->committed.last_rec_pos,
        .last_rec_checksum = e->committed.last_rec_checksum,
        .log_start = e->log_start,
        .ckpt_size = ckpt_size,
        .ckpt_sum = ckpt_sum,
    };
    idx__manifest_encode(b, &m);
    w->len += IDX__MANIFEST_SIZE;
    e->prev_snap_end = e->committed.log_end;
    return 0;
}

static int decode_manifest(struct idx_env *e,
                           const void *buf,
                           size_t len,
                           struct idx__manifest *m)
{
    int rc = idx__manifest_decode(buf, len, m);
    if (rc != 0) {
        return idx__fail(e, rc, __LINE__, "bad snapshot manifest (%zu bytes)",
                         len);
    }
    return 0;
}

/* ---- Fetching a checkpoint (see the top) --------------------------------- */

static void stage_path(const struct idx_env *e, char *buf, size_t cap)
{
    (void)snprintf(buf, cap, "%s/stage.ckpt", e->log_dir);
}

static void stage_close(struct idx_env *e)
{
    char path[4096];
    if (e->stage.fd >= 0) {
        close(e->stage.fd);
        e->stage.fd = -1;
    }
    stage_path(e, path, sizeof path);
    (void)unlink(path);
    e->stage.active = false;
}

static int stage_open(struct idx_env *e, const struct idx__manifest *m)
{
    char path[4096];
    stage_close(e);
    stage_path(e, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return idx__fail(e, -errno, __LINE__, "create %s: %s", path,
                         strerror(errno));
    }
    e->stage.fd = fd;
    e->stage.active = true;
    e->stage.pos = m->log_start;
    e->stage.size = m->ckpt_size;
    e->stage.sum = m->ckpt_sum;
    e->stage.written = 0;
    return 0;
}

/* The staged checkpoint is complete: verify it and rebase the node on it.
 * Nothing of the old state survives a successful rebase; a failed check
 * leaves the old state and drops the staged bytes (a retry fetches them
 * again). */
static int stage_adopt(struct idx_env *e)
{
    char spath[4096], cpath[4096];
    uint8_t h[IDX__CKPT_HDR_SIZE];
    struct idx__ckpt_hdr hdr;
    uint64_t at = e->stage.pos;
    int rc;

    if (fsync(e->stage.fd) != 0) {
        rc = idx__fail(e, -errno, __LINE__, "fsync staged checkpoint: %s",
                       strerror(errno));
        stage_close(e);
        return rc;
    }
    if (pread(e->stage.fd, h, sizeof h, 0) != (ssize_t)sizeof h ||
        idx__ckpt_header_decode(h, at, &hdr) != 0 ||
        hdr.hdr_sum != e->stage.sum ||
        IDX__CKPT_HDR_SIZE + hdr.body_len != e->stage.size) {
        stage_close(e);
        return IDX__CORRUPT(e,
                            "fetched checkpoint at %llu does not match "
                            "the manifest",
                            (unsigned long long)at);
    }
    /* Rebase: the old log and checkpoints go, the staged file becomes the
     * checkpoint at its position, LMDB is loaded from it. */
    rc = idx_flush(e);
    if (rc != 0) {
        return rc;
    }
    idx__ckpt_forget_all(e);
    stage_path(e, spath, sizeof spath);
    idx__ckpt_path(e, at, cpath, sizeof cpath);
    close(e->stage.fd);
    e->stage.fd = -1;
    e->stage.active = false;
    if (rename(spath, cpath) != 0) {
        return idx__fail(e, -errno, __LINE__, "rename %s: %s", spath,
                         strerror(errno));
    }
    rc = idx__log_reset(e, at);
    if (rc == 0) {
        rc = idx__lmdb_clear(e);
    }
    if (rc == 0) {
        rc = idx__ckpt_load(e, at);
    }
    if (rc == 0) {
        e->log_start = at;
        e->cut_note[0] = '\0';
        e->refused_newer = false; /* the peer's state, which has it */
        rc = idx_flush(e);
    }
    if (rc == 0) {
        rc = idx__log_sync(e);
    }
    if (rc != 0) {
        /* The old state is gone and the new one did not load. */
        e->failed = rc;
    }
    return rc;
}

static int stage_write(struct idx_env *e,
                       uint64_t pos,
                       const uint8_t *buf,
                       size_t n,
                       size_t *used)
{
    uint64_t base = e->stage.pos - e->stage.size;
    *used = 0;
    if (pos != base + e->stage.written) {
        return idx__fail(e, TERN_EINVAL, __LINE__,
                         "bulk write at %llu, staged checkpoint expects "
                         "%llu",
                         (unsigned long long)pos,
                         (unsigned long long)(base + e->stage.written));
    }
    size_t take =
        (size_t)TERN_MIN((uint64_t)n, e->stage.size - e->stage.written);
    size_t done = 0;
    while (done < take) {
        ssize_t w = pwrite(e->stage.fd, buf + done, take - done,
                           (off_t)(e->stage.written + done));
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            int err = w < 0 ? errno : ENOSPC;
            return idx__fail(e,
                             err == ENOSPC || err == EDQUOT ? TERN_EFULL : -err,
                             __LINE__, "staged checkpoint: %s", strerror(err));
        }
        done += (size_t)w;
    }
    e->stage.written += take;
    *used = take;
    if (e->stage.written == e->stage.size) {
        return stage_adopt(e);
    }
    return 0;
}

int idx_bulk_range(struct idx_env *e,
                   const void *manifest,
                   size_t len,
                   uint64_t *from,
                   uint64_t *to)
{
    struct idx__manifest m = {0};
    int rc = decode_manifest(e, manifest, len, &m);
    if (rc != 0) {
        return rc;
    }
    if (m.log_start == 0 || e->log_end >= m.log_start) {
        *from = e->log_end;
        *to = TERN_MAX(e->log_end, m.log_end);
        return 0;
    }
    /* Too far behind: the sender's checkpoint first (see the top). */
    if (!e->stage.active || e->stage.pos != m.log_start ||
        e->stage.size != m.ckpt_size || e->stage.sum != m.ckpt_sum) {
        rc = stage_open(e, &m);
        if (rc != 0) {
            return rc;
        }
    }
    *from = m.log_start - m.ckpt_size + e->stage.written;
    *to = m.log_end;
    return 0;
}

int idx_bulk_read(struct idx_env *e,
                  uint64_t pos,
                  void *buf,
                  size_t cap,
                  size_t *n)
{
    *n = 0;
    if (pos < e->log_start) {
        /* The checkpoint part of the stream (see the top). */
        uint32_t sum;
        uint64_t size = idx__ckpt_file_size(e, e->log_start, &sum);
        if (size == 0 || size > e->log_start || pos < e->log_start - size) {
            return idx__fail(e, TERN_EINVAL, __LINE__,
                             "bulk read at %llu: the log starts at %llu "
                             "and its checkpoint covers %llu bytes",
                             (unsigned long long)pos,
                             (unsigned long long)e->log_start,
                             (unsigned long long)size);
        }
        uint64_t off = pos - (e->log_start - size);
        size_t want = (size_t)TERN_MIN((uint64_t)cap, size - off);
        int rc = idx__ckpt_pread(e, e->log_start, off, buf, want);
        if (rc == 0) {
            *n = want;
        }
        return rc;
    }
    if (pos > e->log_end) {
        return idx__fail(
            e, TERN_EINVAL, __LINE__, "bulk read at %llu beyond log end %llu",
            (unsigned long long)pos, (unsigned long long)e->log_end);
    }
    size_t want = (size_t)TERN_MIN((uint64_t)cap, e->log_end - pos);
    int rc = idx__log_pread(e, pos, buf, want);
    if (rc == 0) {
        *n = want;
    }
    return rc;
}

int idx_bulk_write(struct idx_env *e, uint64_t pos, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    if (e->failed != 0) {
        return e->failed;
    }
    if (e->stage.active && pos < e->stage.pos) {
        size_t used = 0;
        int rc = stage_write(e, pos, p, n, &used);
        if (rc != 0 || used == n) {
            return rc;
        }
        pos += used;
        p += used;
        n -= used;
    }
    return idx__log_write_raw(e, pos, p, n);
}

/* Is the record at m->last_rec_pos the one the manifest names? */
static int log_has_manifest_record(struct idx_env *e,
                                   const struct idx__manifest *m)
{
    struct idx__record rec;
    if (m->last_applied == 0) {
        return 1;
    }
    if (m->last_rec_pos < e->log_start) {
        /* Trimmed away since: the state is past it (the same log). */
        return e->st.last_applied >= m->last_applied;
    }
    if (idx__log_read_record(e, m->last_rec_pos, m->log_end, &rec) != 0) {
        return 0;
    }
    return rec.index == m->last_applied &&
           rec.checksum == m->last_rec_checksum &&
           m->last_rec_pos + IDX__REC_HDR_SIZE + rec.payload_len == m->log_end;
}

static int restore(struct idx_env *e, const void *manifest, size_t len)
{
    struct idx__manifest m = {0};
    unsigned batch = 0;
    int rc = decode_manifest(e, manifest, len, &m);
    if (rc != 0) {
        return rc;
    }
    if (e->failed != 0) {
        return e->failed;
    }
    rc = idx_flush(e);
    if (rc != 0) {
        return rc;
    }
    e->prev_snap_end = TERN_MAX(e->prev_snap_end, m.log_end);
    if (e->st.log_end >= m.log_end) {
        /* Already covered: the log must agree with the manifest. */
        if (!log_has_manifest_record(e, &m)) {
            return IDX__CORRUPT(e,
                                "local log disagrees with the snapshot "
                                "manifest at %llu (index %llu)",
                                (unsigned long long)m.last_rec_pos,
                                (unsigned long long)m.last_applied);
        }
        return 0;
    }
    if (e->log_end < m.log_end) {
        if (e->cut_note[0] != '\0') {
            /* The usual case at start-up: the local raft snapshot is past
             * damage idx_open cut away; only a peer has those bytes. */
            return idx__fail(e, TERN_EINVAL, __LINE__,
                             "log ends at %llu, snapshot %llu needs %llu; %s",
                             (unsigned long long)e->log_end,
                             (unsigned long long)m.last_applied,
                             (unsigned long long)m.log_end, e->cut_note);
        }
        return idx__fail(e, TERN_EINVAL, __LINE__,
                         "log ends at %llu, manifest needs %llu: bulk "
                         "transfer first",
                         (unsigned long long)e->log_end,
                         (unsigned long long)m.log_end);
    }
    uint64_t pos = e->st.log_end;
    while (pos < m.log_end) {
        struct idx__record rec;
        rc = idx__log_read_record(e, pos, m.log_end, &rec);
        if (rc == 0 && rec.index <= e->st.last_applied) {
            rc = IDX__CORRUPT(e, "raft index %llu not increasing at %llu",
                              (unsigned long long)rec.index,
                              (unsigned long long)pos);
        }
        if (rc == TERN_EMALFORMED) {
            rc = TERN_ECORRUPT;
        }
        if (rc == TERN_ECORRUPT) {
            goto err_truncate;
        }
        if (rc != 0) {
            goto err_flush;
        }
        rc = idx__index_record(e, pos, rec.index, rec.payload, rec.payload_len,
                               rec.checksum, NULL, 0, NULL);
        if (rc != 0) {
            idx__txn_abort(e);
            e->failed = rc;
            return rc;
        }
        pos += IDX__REC_HDR_SIZE + (uint64_t)rec.payload_len;
        if (++batch == 1024) {
            batch = 0;
            rc = idx_flush(e);
            if (rc != 0) {
                return rc;
            }
        }
    }
    rc = idx_flush(e);
    if (rc != 0) {
        return rc;
    }
    if (e->st.last_applied != m.last_applied ||
        e->st.last_rec_pos != m.last_rec_pos ||
        e->st.last_rec_checksum != m.last_rec_checksum) {
        return IDX__CORRUPT(e,
                            "restored log ends with index %llu, "
                            "manifest says %llu",
                            (unsigned long long)e->st.last_applied,
                            (unsigned long long)m.last_applied);
    }
    if (e->log_end > m.log_end) {
        rc = idx__log_truncate(e, m.log_end);
        if (rc != 0) {
            return rc;
        }
    }
    return idx_sync(e);

err_truncate : {
    char msg[TERN_ERRMSG_SIZE];
    memcpy(msg, e->errmsg, sizeof msg);
    int trc = idx_flush(e);
    if (trc == 0) {
        trc = idx__log_truncate(e, pos);
    }
    memcpy(e->errmsg, msg, sizeof msg);
    tern_errmsg_wrapf(e->errmsg, "restore");
    return trc != 0 ? trc : TERN_ECORRUPT;
}
err_flush:
    (void)idx_flush(e);
    return rc;
}

int idx_restore(struct idx_env *e, const void *manifest, size_t len)
{
    int rc = restore(e, manifest, len);
    /* Whatever it indexed, the security tables may have changed
     * (idx_security_gen). */
    e->sec_gen++;
    return rc;
}
