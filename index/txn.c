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

__attribute__((format(printf, 4, 0))) static int vfail(char *errmsg,
                                                       int code,
                                                       int line,
                                                       const char *fmt,
                                                       va_list ap)
{
    char msg[TERN_ERRMSG_SIZE];
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    if (code == TERN_ECORRUPT) {
        tern_errmsg_printf(errmsg, "%s (index:%d)", msg, line);
    } else {
        tern_errmsg_printf(errmsg, "%s", msg);
    }
    return code;
}

int idx__fail(struct idx_env *e, int code, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = vfail(e->errmsg, code, line, fmt, ap);
    va_end(ap);
    return code;
}

int idx__failm(char *errmsg, int code, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = vfail(errmsg, code, line, fmt, ap);
    va_end(ap);
    return code;
}

int idx__mdb_errm(char *errmsg, int rc, const char *what)
{
    int code;
    switch (rc) {
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
        code = TERN_EFULL;
        break;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
        code = TERN_ECORRUPT;
        break;
    case MDB_VERSION_MISMATCH:
        code = TERN_EVERSION;
        break;
    default:
        code = rc > 0 ? -rc : TERN_EINTERNAL;
        break;
    }
    tern_errmsg_printf(errmsg, "lmdb %s: %s", what, mdb_strerror(rc));
    return code;
}

int idx__mdb_err(struct idx_env *e, int rc, const char *what)
{
    if (rc == MDB_MAP_FULL) {
        e->map_full = true;
        tern_errmsg_printf(e->errmsg,
                           "lmdb %s: MDB_MAP_FULL (map_size %zu bytes): "
                           "raise idx_options.map_size",
                           what, e->map_size);
        return TERN_EFULL;
    }
    return idx__mdb_errm(e->errmsg, rc, what);
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

int idx__buf_reserve(uint8_t **buf, size_t *cap, size_t n, char *errmsg)
{
    if (n <= *cap) {
        return 0;
    }
    size_t c = *cap != 0 ? *cap : 4096;
    while (c < n) {
        c *= 2;
    }
    uint8_t *p = tern_realloc(*buf, c);
    if (p == NULL) {
        return idx__failm(errmsg, -ENOMEM, __LINE__, "read buffer of %zu bytes",
                          c);
    }
    *buf = p;
    *cap = c;
    return 0;
}

int idx__rbuf_reserve(struct idx_env *e, size_t n)
{
    return idx__buf_reserve(&e->rbuf, &e->rbuf_cap, n, e->errmsg);
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
