/*
 * raft/fail.c: fail-stop and code translation.
 *
 * Fail-stop: some failures leave libraft 0.15 in a state it does not
 * recover from correctly (a failed append, #466 / 0cac59c, io.c; a failed
 * FSM apply, fsm.c; the core turning UNAVAILABLE, guard.c). repl_fail
 * makes the replica stop taking part: r->failed is sticky, io.c then
 * drops every message and refuses every append and send, a bulk fetch is
 * abandoned, and the replica reports REPL_UNAVAILABLE (guard.c's role
 * poll) and is no longer writable. node/ closes and restarts it; a
 * stopped replica is a crashed one as far as Raft is concerned.
 *
 * Code translation: RAFT_* codes never leave raft/; repl_err_from_raft
 * maps them onto tern codes (tern/errors.h) or -errno.
 */
#include <errno.h>
#include <stdio.h>

#include "repl_int.h"

void repl_fail(struct repl *r, int code)
{
    if (r->failed != 0) {
        return;
    }
    r->failed = code != 0 ? code : TERN_EINTERNAL;
    repl_bulk_abort(r);
    repl_poll(r);
    repl_update_writable(r);
}

void repl_fail_detail(struct repl *r, int code, const char *detail)
{
    if (r->failed != 0) {
        return;
    }
    (void)snprintf(r->fail_detail, sizeof r->fail_detail, "%s", detail);
    repl_fail(r, code);
}

int repl_err_from_raft(int rv)
{
    switch (rv) {
    case 0:
        return 0;
    case RAFT_NOMEM:
        return -ENOMEM;
    case RAFT_NOTLEADER:
        return TERN_ENOTLEADER;
    case RAFT_LEADERSHIPLOST:
        return TERN_ELEADERSHIPLOST;
    case RAFT_SHUTDOWN:
    case RAFT_CANCELED:
        return TERN_ESHUTDOWN;
    case RAFT_NOSPACE:
        return TERN_EFULL;
    case RAFT_IOERR:
        return -EIO;
    case RAFT_CORRUPT:
        return TERN_ECORRUPT;
    case RAFT_MALFORMED:
        return TERN_EMALFORMED;
    case RAFT_TOOBIG:
        return TERN_ETOOBIG;
    case RAFT_NOCONNECTION:
        return TERN_ENOCONN;
    case RAFT_BUSY:
    case RAFT_TOOMANY:
        return TERN_EBUSY;
    case RAFT_BADID:
    case RAFT_DUPLICATEID:
    case RAFT_DUPLICATEADDRESS:
    case RAFT_BADROLE:
    case RAFT_INVALID:
    case RAFT_NAMETOOLONG:
    case RAFT_CANTBOOTSTRAP:
        return TERN_EINVAL;
    case RAFT_CANTCHANGE:
        return TERN_ECHANGING; /* a configuration change is uncommitted or
                                  a promotion is catching up */
    case RAFT_NOTFOUND:
        return -ENOENT;
    case RAFT_UNAUTHORIZED:
        return -EACCES;
    default:
        return TERN_EINTERNAL;
    }
}
