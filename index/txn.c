/*
 * The plumbing every other file of index/ shares, and the bottom of its
 * call graph (it calls no other file of index/): error reporting into
 * e->errmsg (idx__fail and its line-stamped IDX__CORRUPT form), the
 * translation of LMDB codes into tern codes, the record read buffer
 * e->rbuf, and the pending LMDB write txn: opened lazily by the first
 * write (idx__txn_begin), dropped with the state it described
 * (idx__txn_abort), committed by idx_flush.
 *
 * Full disk during a commit: the env is opened MDB_NOSYNC, so
 * mdb_txn_commit writes pages and never syncs. LMDB reports a short pwrite
 * (mdb_page_flush) as EIO; an EIO from a commit while fewer than
 * IDX__SHORT_WRITE_FREE bytes are free on LMDB's file system is therefore
 * a full disk (TERN_EFULL, cured by reopening: LMDB is rebuilt from the
 * log), not a lost fsync.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/statvfs.h>

#include "idx_int.h"

int idx__fail(struct idx_env *e, int code, int line, const char *fmt, ...)
{
    char msg[TERN_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == TERN_ECORRUPT) {
        tern_errmsg_printf(e->errmsg, "%s (index:%d)", msg, line);
    } else {
        tern_errmsg_printf(e->errmsg, "%s", msg);
    }
    return code;
}

int idx__mdb_err(struct idx_env *e, int rc, const char *what)
{
    int code;
    switch (rc) {
    case MDB_MAP_FULL:
        e->map_full = true;
        tern_errmsg_printf(e->errmsg,
                           "lmdb %s: MDB_MAP_FULL (map_size %zu bytes): "
                           "raise idx_options.map_size",
                           what, e->map_size);
        return TERN_EFULL;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
        code = TERN_ECORRUPT;
        break;
    case MDB_VERSION_MISMATCH:
        code = TERN_EVERSION;
        break;
    case ENOSPC:
    case EDQUOT:
        code = TERN_EFULL;
        break;
    default:
        code = rc > 0 ? -rc : TERN_EINTERNAL;
        break;
    }
    tern_errmsg_printf(e->errmsg, "lmdb %s: %s", what, mdb_strerror(rc));
    return code;
}

int idx__commit_err_code(int rc, uint64_t free_bytes, int have_free)
{
    if (rc == EIO && have_free && free_bytes < IDX__SHORT_WRITE_FREE) {
        return TERN_EFULL;
    }
    return rc > 0 ? -rc : TERN_EINTERNAL;
}

int idx__commit_eio(struct idx_env *e)
{
    struct statvfs sv;
    uint64_t avail = 0;
    int have = statvfs(e->lmdb_dir, &sv) == 0;
    int code;
    if (have) {
        avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    }
    code = idx__commit_err_code(EIO, avail, have);
    if (code == TERN_EFULL) {
        tern_errmsg_printf(e->errmsg,
                           "lmdb commit: short write (EIO) with %llu bytes "
                           "free: file system full",
                           (unsigned long long)avail);
    } else {
        tern_errmsg_printf(e->errmsg, "lmdb commit: %s", mdb_strerror(EIO));
    }
    return code;
}

int idx__rbuf_reserve(struct idx_env *e, size_t n)
{
    if (n <= e->rbuf_cap) {
        return 0;
    }
    size_t cap = e->rbuf_cap != 0 ? e->rbuf_cap : 4096;
    while (cap < n) {
        cap *= 2;
    }
    uint8_t *p = tern_realloc(e->rbuf, cap);
    if (p == NULL) {
        return idx__fail(e, -ENOMEM, __LINE__, "read buffer of %zu bytes", cap);
    }
    e->rbuf = p;
    e->rbuf_cap = cap;
    return 0;
}

int idx__txn_begin(struct idx_env *e)
{
    if (e->wtxn != NULL) {
        return 0;
    }
    int rc = mdb_txn_begin(e->mdb, NULL, 0, &e->wtxn);
    if (rc != 0) {
        e->wtxn = NULL;
        return idx__mdb_err(e, rc, "begin write txn");
    }
    return 0;
}

/* A dropped txn changed nothing visible, but bumping costs one re-read of
 * the grants a server caches and keeps the rule simple. */
static void sec_publish(struct idx_env *e)
{
    if (e->sec_dirty) {
        e->sec_dirty = false;
        e->sec_gen++;
    }
}

void idx__txn_abort(struct idx_env *e)
{
    if (e->wtxn != NULL) {
        mdb_txn_abort(e->wtxn);
        e->wtxn = NULL;
    }
    e->st = e->committed;
    sec_publish(e);
}

int idx_flush(struct idx_env *e)
{
    if (e->wtxn == NULL) {
        return 0;
    }
    int rc = mdb_txn_commit(e->wtxn);
    e->wtxn = NULL;
    if (rc != 0) {
        rc = rc == EIO ? idx__commit_eio(e) : idx__mdb_err(e, rc, "commit");
        e->st = e->committed;
        e->failed = rc;
        sec_publish(e);
        return rc;
    }
    e->committed = e->st;
    sec_publish(e);
    return 0;
}
