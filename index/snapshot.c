/*
 * Snapshots and bulk catch-up. A tern snapshot is not a copy of the data:
 * the commit log is byte-identical on every node, so the snapshot handed
 * to Raft is a small manifest naming a prefix of the log. A follower that
 * lacks that prefix copies the missing bytes from the leader's log
 * (idx_bulk_range/read/write, out of band) and then adopts the manifest
 * (idx_restore), which indexes the copied records, verifying each one.
 *
 * Manifest layout (version 1, 40 bytes, little-endian; encoded/decoded
 * byte by byte, be careful when adapting):
 *
 *   offset size  field
 *   0      4     magic 0x504e5354 ("TSNP")
 *   4      2     version = 1
 *   6      2     flags = 0
 *   8      8     last_applied       raft index of the last record
 *   16     8     log_end            log position just after it
 *   24     8     last_rec_pos       its position
 *   32     4     last_rec_checksum  its record checksum
 *   36     4     tern_checksum32 over bytes [0,36)
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

#include "idx_int.h"

#define IDX__MANIFEST_MAGIC   0x504e5354U
#define IDX__MANIFEST_VERSION 1

int idx__manifest_decode(const void *buf, size_t len, struct idx__manifest *m)
{
    const uint8_t *b = buf;
    if (buf == NULL || len != IDX__MANIFEST_SIZE ||
        tern_get_u32(b) != IDX__MANIFEST_MAGIC) {
        return TERN_EMALFORMED;
    }
    if (!IDX__CHECKSUM_OK(tern_get_u32(b + 36), tern_checksum32(b, 36))) {
        return TERN_EMALFORMED;
    }
    if (tern_get_u16(b + 4) != IDX__MANIFEST_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u16(b + 6) != 0) {
        return TERN_EMALFORMED;
    }
    m->last_applied = tern_get_u64(b + 8);
    m->log_end = tern_get_u64(b + 16);
    m->last_rec_pos = tern_get_u64(b + 24);
    m->last_rec_checksum = tern_get_u32(b + 32);
    if (m->last_applied == 0
            ? (m->log_end != 0 || m->last_rec_pos != 0)
            : (m->log_end < IDX__REC_HDR_SIZE ||
               m->last_rec_pos > m->log_end - IDX__REC_HDR_SIZE)) {
        return TERN_EMALFORMED;
    }
    return 0;
}

int idx_snapshot(struct idx_env *e, struct tern_wbuf *w)
{
    int rc = idx_sync(e);
    if (rc != 0) {
        return rc;
    }
    uint8_t *b = tern_wbuf_reserve(w, IDX__MANIFEST_SIZE);
    if (b == NULL) {
        return w->err != 0 ? w->err : -ENOMEM;
    }
    tern_put_u32(b, IDX__MANIFEST_MAGIC);
    tern_put_u16(b + 4, IDX__MANIFEST_VERSION);
    tern_put_u16(b + 6, 0);
    tern_put_u64(b + 8, e->committed.last_applied);
    tern_put_u64(b + 16, e->committed.log_end);
    tern_put_u64(b + 24, e->committed.last_rec_pos);
    tern_put_u32(b + 32, e->committed.last_rec_checksum);
    tern_put_u32(b + 36, tern_checksum32(b, 36));
    w->len += IDX__MANIFEST_SIZE;
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
    *from = e->log_end;
    *to = TERN_MAX(e->log_end, m.log_end);
    return 0;
}

int idx_bulk_read(struct idx_env *e,
                  uint64_t pos,
                  void *buf,
                  size_t cap,
                  size_t *n)
{
    *n = 0;
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
    if (e->failed != 0) {
        return e->failed;
    }
    return idx__log_write_raw(e, pos, buf, n);
}

/* Is the record at m->last_rec_pos the one the manifest names? */
static int log_has_manifest_record(struct idx_env *e,
                                   const struct idx__manifest *m)
{
    struct idx__record rec;
    if (m->last_applied == 0) {
        return 1;
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
