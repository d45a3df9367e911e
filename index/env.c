/*
 * The env: opening (recovery and reconciliation of the commit log with
 * LMDB), closing and the accessors of its state. The top of index/'s
 * file graph (idx_int.h): it drives log.c and the index writer of apply.c.
 *
 * Recovery at idx_open:
 *   1. log.c checks the segment headers and their contiguity.
 *   2. LMDB is rebuilt from the commit log, every time: its files are
 *      removed unread and every record is re-indexed from position 0,
 *      scanning and verifying (checksum, raft index increasing) the whole
 *      log.
 * Why every time (decision, storage damage on a stopped node):
 * LMDB has no page or value checksums. A flipped bit in a leaf page can
 * change a message's log position or length, and serving it would hand
 * out another message or a slice of one (garbage that passes the record
 * checksum); a truncated data.mdb makes the mmap fault (SIGBUS) on first
 * touch. The commit log, by contrast, is checksummed per record, and LMDB
 * is derived from it. So no copy of LMDB that survived a stop is trusted,
 * and the same scan verifies every log record, so damage in the middle of
 * the log is found at open instead of by an unlucky read. Cost: start-up
 * reads the whole log and re-inserts every index row (linear in the log;
 * measured on this machine, Debug build, warm page cache: 200 MB holding
 * 200k messages in 0.59 s, 22 MB holding 200k in 0.28 s, i.e. ~1.4 us per
 * message plus the read); the way out when logs grow is a
 * checksum per LMDB value (key included) checked on read plus a verified
 * walk at open, and per-segment sealed checksums.
 * Failure modes:
 *   - a torn or corrupt record (short record, bad header, checksum
 *     mismatch, raft index not increasing): the log ends there; it is
 *     truncated to the last valid record, the cut bytes are reported by
 *     idx_truncated_bytes and where it was cut by idx_cut_note. Nothing
 *     after a bad record can be trusted to be indexed consistently. The
 *     Raft log re-supplies those entries (idx_apply) when it still holds
 *     them; when the node's raft snapshot is past the cut, idx_restore
 *     refuses with TERN_EINVAL naming the cut, and raft/ fetches the
 *     missing range from a peer before restoring (raft/bulk.c, "Start-up
 *     restore from a peer").
 *   - I/O errors and MDB_MAP_FULL fail idx_open with the code.
 *
 * File modes: index/ creates its directories 0700 and its files (LOCK,
 * LMDB's, the commit-log segments of log.c) 0600: queue contents are
 * readable by the node's user only (node/ also refuses a group- or
 * world-accessible data directory).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "idx_int.h"

#define IDX__DEFAULT_MAP_SIZE      ((size_t)1 << 30)
#define IDX__DEFAULT_SEGMENT_BYTES ((uint64_t)64 << 20)
#define IDX__DEFAULT_MAX_MESSAGE   ((uint32_t)4 << 20)
/* Records indexed per write txn during recovery. */
#define IDX__RECOVERY_BATCH 1024

/* Open (creating) the DBIs of the index in txn. */
static int dbi_open_all(struct idx_env *e, MDB_txn *txn)
{
    int rc;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &e->dbi_meta)) != 0 ||
        (rc = mdb_dbi_open(txn, "queues", MDB_CREATE, &e->dbi_queues)) != 0 ||
        (rc = mdb_dbi_open(txn, "msgs", MDB_CREATE, &e->dbi_msgs)) != 0 ||
        (rc = mdb_dbi_open(txn, "groups", MDB_CREATE, &e->dbi_groups)) != 0 ||
        (rc = mdb_dbi_open(txn, "producers", MDB_CREATE, &e->dbi_producers)) !=
            0 ||
        (rc = mdb_dbi_open(txn, "users", MDB_CREATE, &e->dbi_users)) != 0 ||
        (rc = mdb_dbi_open(txn, "acls", MDB_CREATE, &e->dbi_acls)) != 0 ||
        (rc = mdb_dbi_open(txn, "namespaces", MDB_CREATE,
                           &e->dbi_namespaces)) != 0 ||
        (rc = mdb_dbi_open(txn, "producer_ids", MDB_CREATE, &e->dbi_pids)) !=
            0 ||
        (rc = mdb_dbi_open(txn, "ns_usage", MDB_CREATE, &e->dbi_usage)) != 0 ||
        (rc = mdb_dbi_open(txn, "keys", MDB_CREATE, &e->dbi_keys)) != 0 ||
        (rc = mdb_dbi_open(txn, "leases", MDB_CREATE, &e->dbi_leases)) != 0 ||
        (rc = mdb_dbi_open(txn, "timers", MDB_CREATE, &e->dbi_timers)) != 0 ||
        (rc = mdb_dbi_open(txn, "timer_recs", MDB_CREATE,
                           &e->dbi_timer_recs)) != 0 ||
        (rc = mdb_dbi_open(txn, "claims", MDB_CREATE, &e->dbi_claims)) != 0) {
        return idx__mdb_err(e, rc, "open dbi");
    }
    return 0;
}

int idx__lmdb_clear(struct idx_env *e)
{
    const MDB_dbi all[] = {e->dbi_meta,   e->dbi_queues,     e->dbi_msgs,
                           e->dbi_groups, e->dbi_producers,  e->dbi_users,
                           e->dbi_acls,   e->dbi_namespaces, e->dbi_pids,
                           e->dbi_usage,  e->dbi_keys,       e->dbi_leases,
                           e->dbi_timers, e->dbi_timer_recs, e->dbi_claims};
    int rc = idx__txn_begin(e);
    for (size_t i = 0; rc == 0 && i < TERN_ARRAY_SIZE(all); i++) {
        int mrc = mdb_drop(e->wtxn, all[i], 0);
        if (mrc != 0) {
            rc = idx__mdb_err(e, mrc, "empty a table");
        }
    }
    return rc;
}

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = tern_malloc(n);
    if (p != NULL) {
        (void)snprintf(p, n, "%s/%s", a, b);
    }
    return p;
}

/* Remove LMDB's files (unread): it is rebuilt from the log. A file that
 * cannot be removed fails the open (it would be trusted otherwise). */
static int lmdb_remove(struct idx_env *e)
{
    static const char *const names[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < TERN_ARRAY_SIZE(names); i++) {
        char *p = path_join(e->lmdb_dir, names[i]);
        if (p == NULL) {
            return idx__fail(e, -ENOMEM, __LINE__, "out of memory");
        }
        if (unlink(p) != 0 && errno != ENOENT) {
            int err = errno;
            int rc =
                idx__fail(e, -err, __LINE__, "remove %s: %s", p, strerror(err));
            tern_free(p);
            return rc;
        }
        tern_free(p);
    }
    return 0;
}

/* A fresh, empty LMDB env (rebuilt from the log at every open, see top). */
static int lmdb_open(struct idx_env *e)
{
    int rc = lmdb_remove(e);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_env_create(&e->mdb);
    if (rc != 0) {
        e->mdb = NULL;
        return idx__mdb_err(e, rc, "env create");
    }
    if ((rc = mdb_env_set_mapsize(e->mdb, e->map_size)) != 0 ||
        (rc = mdb_env_set_maxdbs(e->mdb, 16)) != 0 ||
        (rc = mdb_env_open(e->mdb, e->lmdb_dir,
                           MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOTLS, 0600)) !=
            0) {
        mdb_env_close(e->mdb);
        e->mdb = NULL;
        return idx__mdb_err(e, rc, "env open");
    }
    return 0;
}

/* Remember where (and why) the scan ends the log before its end. */
static void note_cut(struct idx_env *e, uint64_t pos, const char *why)
{
    char where[256], reason[TERN_ERRMSG_SIZE], prev[TERN_ERRMSG_SIZE];
    idx__log_locate(e, pos, where, sizeof where);
    (void)snprintf(reason, sizeof reason, "%s", why);
    (void)snprintf(prev, sizeof prev, "%s", e->cut_note);
    tern_errmsg_printf(e->cut_note,
                       "commit log cut at %llu (%s): %s; %llu bytes "
                       "dropped%s%s",
                       (unsigned long long)pos, where, reason,
                       (unsigned long long)(e->log_end - pos),
                       prev[0] != '\0' ? "; " : "", prev);
}

/* Where the rebuild starts (in the pending txn of the fresh LMDB): at 0
 * with empty tables when the log still starts at 0; else at the oldest
 * checkpoint inside the log, whose rows are loaded (retention deleted the
 * head, ckpt.c). A trimmed log without a usable checkpoint cannot be
 * indexed at all: it is dropped whole, noted like a cut, and a peer
 * supplies the state again (raft/bulk.c, start-up restore). A checkpoint
 * of a version this build does not know is no damage: TERN_EVERSION
 * refuses the directory and nothing is dropped. */
static int rebuild_start(struct idx_env *e)
{
    uint64_t first = idx__log_first(e);
    int rc = idx__ckpt_scan(e);
    if (rc != 0) {
        return rc;
    }
    e->log_start = 0;
    if (first == 0) {
        return 0;
    }
    idx__ckpt_drop_before(e, first);
    if (e->n_ckpts > 0 && e->ckpts[0] <= e->log_end) {
        uint64_t at = e->ckpts[0];
        rc = idx__ckpt_load(e, at);
        if (rc == 0) {
            e->log_start = at;
            return 0;
        }
        if (rc != TERN_ECORRUPT) {
            /* TERN_EVERSION: a later release wrote it; refuse the
             * directory rather than drop the log it stands for. */
            return rc;
        }
        /* Rows already put belong to no state: start over empty. */
        idx__txn_abort(e);
        rc = idx__txn_begin(e);
        if (rc == 0) {
            rc = dbi_open_all(e, e->wtxn);
        }
        if (rc != 0) {
            return rc;
        }
    }
    {
        char why[TERN_ERRMSG_SIZE];
        (void)snprintf(
            why, sizeof why, "%s",
            e->n_ckpts > 0 ? e->errmsg : "no checkpoint inside the log");
        e->truncated += e->log_end - first;
        tern_errmsg_printf(e->cut_note,
                           "commit log [%llu,%llu) dropped: it starts "
                           "after 0 (retention) and %s",
                           (unsigned long long)first,
                           (unsigned long long)e->log_end, why);
    }
    idx__ckpt_forget_all(e);
    rc = idx__log_reset(e, 0);
    if (rc != 0) {
        return rc;
    }
    e->st.log_end = 0;
    return 0;
}

/* Index the log into the fresh LMDB from where rebuild_start says; the
 * first bad record ends the log. */
static int reconcile(struct idx_env *e)
{
    MDB_val k = {sizeof IDX__META_KEY_STATE - 1, (void *)IDX__META_KEY_STATE};
    MDB_val v;
    struct idx__state s;
    uint8_t buf[IDX__STATE_SIZE];
    int rc = idx__txn_begin(e);
    if (rc != 0) {
        return rc;
    }
    rc = dbi_open_all(e, e->wtxn);
    if (rc != 0) {
        goto err_after_txn;
    }
    e->refused_newer = false;
    e->stale_ckpts = false;
    memset(&s, 0, sizeof s);
    s.next_queue_id = 1;
    s.next_producer_id = 1;
    e->st = s;
    e->committed = s;
    rc = rebuild_start(e);
    if (rc != 0) {
        goto err_after_txn;
    }
    if (e->log_start == 0) {
        /* Record the empty state so an empty log has meta too. */
        idx__state_encode(buf, &s);
        v.mv_size = sizeof buf;
        v.mv_data = buf;
        rc = mdb_put(e->wtxn, e->dbi_meta, &k, &v, 0);
        if (rc != 0) {
            rc = idx__mdb_err(e, rc, "put meta");
            goto err_after_txn;
        }
    }
    rc = idx_flush(e);
    if (rc != 0) {
        return rc;
    }

    uint64_t pos = e->log_start;
    unsigned batch = 0;
    while (pos < e->log_end) {
        struct idx__record rec;
        rc = idx__log_read_record(e, pos, e->log_end, &rec);
        if (rc == TERN_EMALFORMED || rc == TERN_ECORRUPT) {
            note_cut(e, pos, e->errmsg);
            break;
        }
        if (rc != 0) {
            return rc;
        }
        if (rec.index <= e->st.last_applied) {
            note_cut(e, pos, "raft index not increasing");
            break;
        }
        if (!e->stale_ckpts &&
            rec.version <
                idx__entry_record_version(rec.payload, rec.payload_len)) {
            /* An XXH3 entry in a record of version 1: an earlier release
             * recorded it unapplied (it knew no XXH3). This build applies
             * it; the checkpoints that release wrote after it lack it. */
            e->stale_ckpts = true;
            e->stale_from = pos;
        }
        rc = idx__index_record(e, pos, rec.index, rec.payload, rec.payload_len,
                               rec.checksum, NULL, 0, NULL);
        if (rc != 0) {
            tern_errmsg_wrapf(e->errmsg, "re-index record at %llu",
                              (unsigned long long)pos);
            idx__txn_abort(e);
            return rc;
        }
        pos += IDX__REC_HDR_SIZE + (uint64_t)rec.payload_len;
        if (++batch == IDX__RECOVERY_BATCH) {
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
    e->stale_ckpts = false; /* only the rebuild writes them again */
    if (pos < e->log_end) {
        e->truncated += e->log_end - pos;
        rc = idx__log_truncate(e, pos);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;

err_after_txn:
    idx__txn_abort(e);
    return rc;
}

/* flock the directory's LOCK (e->lock_fd), retrying every 20 ms for up
 * to wait_ms while another env holds it. 0, TERN_EBUSY or -errno. */
static int lock_dir(struct idx_env *e, unsigned wait_ms)
{
    unsigned waited = 0;
    for (;;) {
        if (flock(e->lock_fd, LOCK_EX | LOCK_NB) == 0) {
            return 0;
        }
        if (errno != EWOULDBLOCK) {
            return idx__fail(e, -errno, __LINE__, "flock: %s", strerror(errno));
        }
        if (waited >= wait_ms) {
            return idx__fail(e, TERN_EBUSY, __LINE__,
                             "directory in use by another env%s",
                             wait_ms > 0 ? " (waited for it)" : "");
        }
        (void)usleep(20 * 1000);
        waited += 20;
    }
}

int idx_open(const struct idx_options *o, struct idx_env **out, char *errmsg)
{
    struct idx_env *e;
    int rc;
    *out = NULL;
    if (o == NULL || o->dir == NULL || o->dir[0] == '\0') {
        tern_errmsg_printf(errmsg, "idx_open: no directory");
        return TERN_EINVAL;
    }
    e = tern_calloc(1, sizeof *e);
    if (e == NULL) {
        tern_errmsg_printf(errmsg, "idx_open: out of memory");
        return -ENOMEM;
    }
    e->lock_fd = -1;
    e->map_size = o->map_size != 0 ? o->map_size : IDX__DEFAULT_MAP_SIZE;
    e->segment_bytes =
        o->segment_bytes != 0 ? o->segment_bytes : IDX__DEFAULT_SEGMENT_BYTES;
    e->checkpoint_bytes =
        o->checkpoint_bytes != 0 ? o->checkpoint_bytes : e->segment_bytes;
    e->ckpt_background = o->background_checkpoints;
    e->stage.fd = -1;
    e->gen = idx__next_gen();
    tern_list_init(&e->readers);
    e->view_max_segs = IDX__VIEW_MAX_SEGS;
    e->max_message =
        o->max_message != 0 ? o->max_message : IDX__DEFAULT_MAX_MESSAGE;
    e->dir = tern_strdup(o->dir);
    e->log_dir = path_join(o->dir, "log");
    e->lmdb_dir = path_join(o->dir, "lmdb");
    if (e->dir == NULL || e->log_dir == NULL || e->lmdb_dir == NULL) {
        rc = idx__fail(e, -ENOMEM, __LINE__, "out of memory");
        goto err_after_alloc;
    }
    if (mkdir(e->dir, 0700) != 0 && errno != EEXIST) {
        rc = idx__fail(e, -errno, __LINE__, "mkdir %s: %s", e->dir,
                       strerror(errno));
        goto err_after_alloc;
    }
    /* One writer per directory: a second env on the same log (in this
     * process or another) would interleave records. */
    {
        char *lock = path_join(e->dir, "LOCK");
        if (lock == NULL) {
            rc = idx__fail(e, -ENOMEM, __LINE__, "out of memory");
            goto err_after_alloc;
        }
        e->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        tern_free(lock);
        if (e->lock_fd < 0) {
            rc = idx__fail(e, -errno, __LINE__, "open LOCK: %s",
                           strerror(errno));
            goto err_after_alloc;
        }
        rc = lock_dir(e, o->lock_wait_ms);
        if (rc != 0) {
            goto err_after_lock;
        }
    }
    rc = idx__log_open(e);
    if (rc != 0) {
        goto err_after_log;
    }
    if (mkdir(e->lmdb_dir, 0700) != 0 && errno != EEXIST) {
        rc = idx__fail(e, -errno, __LINE__, "mkdir %s: %s", e->lmdb_dir,
                       strerror(errno));
        goto err_after_log;
    }
    rc = lmdb_open(e);
    if (rc != 0) {
        goto err_after_log;
    }
    rc = reconcile(e);
    if (rc != 0) {
        goto err_after_lmdb;
    }
    e->sec_gen++; /* idx_security_gen: a new view of the tables */
    *out = e;
    return 0;

err_after_lmdb:
    mdb_env_close(e->mdb);
err_after_log:
    idx__log_close(e);
err_after_lock:
    close(e->lock_fd);
err_after_alloc:
    tern_errmsg_printf(errmsg, "idx_open %s: %s", o->dir, e->errmsg);
    tern_free(e->ckpts);
    tern_free(e->dir);
    tern_free(e->log_dir);
    tern_free(e->lmdb_dir);
    tern_free(e->rbuf);
    tern_free(e);
    return rc;
}

void idx_close(struct idx_env *e)
{
    if (e == NULL) {
        return;
    }
    /* After a failed apply the pending txn (if any) still describes a
     * prefix of the log, so committing it is safe. */
    idx__ckpt_abandon(e);    /* before its read txn's env goes */
    idx__readers_abandon(e); /* the same for fetches on other threads */
    (void)idx_sync(e);
    idx__txn_abort(e);
    idx__backup_detach(e);
    mdb_env_close(e->mdb);
    idx__log_close(e);
    if (e->stage.fd >= 0) {
        close(e->stage.fd);
    }
    tern_free(e->ckpts);
    close(e->lock_fd); /* releases the flock */
    tern_free(e->dir);
    tern_free(e->log_dir);
    tern_free(e->lmdb_dir);
    tern_free(e->rbuf);
    tern_free(e->held_buf);
    tern_free(e);
}

uint64_t idx_last_applied(const struct idx_env *e)
{
    return e->st.last_applied;
}

uint64_t idx_log_end(const struct idx_env *e)
{
    return e->log_end;
}

uint64_t idx_log_start(const struct idx_env *e)
{
    return e->log_start;
}

uint64_t idx_disk_bytes(const struct idx_env *e)
{
    uint64_t n = idx__log_disk_bytes(e);
    for (size_t i = 0; i < e->n_ckpts; i++) {
        uint32_t sum;
        n += idx__ckpt_file_size((struct idx_env *)e, e->ckpts[i], &sum);
    }
    return n;
}

uint64_t idx_truncated_bytes(const struct idx_env *e)
{
    return e->truncated;
}

const char *idx_cut_note(const struct idx_env *e)
{
    return e->cut_note;
}

const char *idx_errmsg(const struct idx_env *e)
{
    return e->errmsg;
}

int idx_status(const struct idx_env *e)
{
    return e->failed;
}

bool idx_sync_failed(const struct idx_env *e)
{
    return e->sync_failed;
}

bool idx_map_full(const struct idx_env *e)
{
    return e->map_full;
}

uint64_t idx_security_gen(const struct idx_env *e)
{
    return e->sec_gen;
}
