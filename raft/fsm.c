/*
 * raft/fsm.c: the struct raft_fsm (version 1) that libraft calls, mapped
 * onto tern's struct repl_fsm.
 *
 * Index of an applied entry: libraft 0.15's apply has no index. Its
 * replicationApply() walks index = last_applied + 1 .. commit_index, calls
 * fsm->apply only for RAFT_COMMAND entries (RAFT_BARRIER and RAFT_CHANGE
 * are handled inside the core) and sets r->last_applied = index after each
 * entry, including barriers and changes. At start-up, with no snapshot it
 * sets last_applied = 1 (the bootstrap RAFT_CHANGE), after a snapshot
 * restore last_applied = snapshot index. So during fsm->apply the entry's
 * index is exactly raft_last_applied() + 1.
 *
 * Failed apply (0.15): replicationApply stops at the failing entry without
 * advancing last_applied and returns the error, which every caller ignores
 * (then a snapshot check may still run, for the entries before it). The
 * core retries only when it applies again: a leader on every
 * AppendEntries result, but a follower only when the commit index
 * advances, i.e. on an idle cluster never (verified in the cluster test).
 * So a failed apply makes the replica fail-stop (repl_fail: it stops
 * taking part, reports REPL_UNAVAILABLE and status.failed/fsm_error);
 * node/ closes and restarts it, and libraft re-applies everything after
 * the last snapshot, which the idempotent FSM skips or redoes. Sound:
 * the entry was not applied (apply must be atomic), and a stopped
 * replica is a crashed one as far as Raft is concerned.
 *
 * Snapshots by bytes: libraft counts entries (threshold set to 64 by
 * repl.c), so fsm->snapshot is asked often; it answers RAFT_BUSY (0.15
 * takeSnapshot turns RAFT_BUSY into "skip, retry later") until
 * snapshot_threshold_bytes of command payload were applied since the last
 * snapshot. The manifest from repl_fsm.snapshot is the snapshot data (one
 * buffer, freed by libraft with raft_free, which is tern_free: repl.c
 * installs tern's allocator as libraft's heap). Restore: libraft transfers
 * the buffer on success only (on failure it frees it itself).
 */
#include "repl_int.h"

static int fsm_apply(struct raft_fsm *f, const struct raft_buffer *buf,
                     void **result)
{
    struct repl *r = f->data;
    uint64_t index = raft_last_applied(r->core) + 1;
    int rv;

    *result = NULL;
    rv = r->fsm.apply(r->fsm.arg, index, buf->base, buf->len);
    if (rv != 0) {
        r->fsm_error = rv;
        repl_fail(r, rv);
        return RAFT_IOERR;
    }
    r->applied_bytes += buf->len;
    return 0;
}

static int fsm_snapshot(struct raft_fsm *f, struct raft_buffer *bufs[],
                        unsigned *n_bufs)
{
    struct repl *r = f->data;
    void *manifest = NULL;
    size_t len = 0;
    int rv;

    if (r->applied_bytes < r->snapshot_threshold_bytes ||
        r->fsm.snapshot == NULL) {
        return RAFT_BUSY;
    }
    rv = r->fsm.snapshot(r->fsm.arg, raft_last_applied(r->core), &manifest,
                         &len);
    if (rv != 0 || manifest == NULL || len == 0) {
        tern_free(manifest);
        return RAFT_BUSY; /* retried on a later apply */
    }
    *bufs = raft_malloc(sizeof **bufs);
    if (*bufs == NULL) {
        tern_free(manifest);
        return RAFT_BUSY;
    }
    (*bufs)[0].base = manifest;
    (*bufs)[0].len = len;
    *n_bufs = 1;
    r->applied_bytes = 0;
    return 0;
}

static int fsm_restore(struct raft_fsm *f, struct raft_buffer *buf)
{
    struct repl *r = f->data;
    int rv;
    if (r->fsm.restore == NULL) {
        return RAFT_IOERR;
    }
    rv = r->fsm.restore(r->fsm.arg, buf->base, buf->len);
    if (rv != 0) {
        r->fsm_error = rv;
        return RAFT_IOERR;
    }
    raft_free(buf->base);
    buf->base = NULL;
    r->applied_bytes = 0;
    return 0;
}

void repl_fsm_setup(struct repl *r)
{
    r->core = &r->raft;
    r->raft_fsm.version = 1;
    r->raft_fsm.data = r;
    r->raft_fsm.apply = fsm_apply;
    r->raft_fsm.snapshot = fsm_snapshot;
    r->raft_fsm.restore = fsm_restore;
}
