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
 * Snapshots by bytes: libraft counts entries (threshold set to 8 by
 * repl.c), so fsm->snapshot is asked often; it answers RAFT_BUSY (0.15
 * takeSnapshot turns RAFT_BUSY into "skip, retry later") until
 * snapshot_threshold_bytes of command payload were applied since the last
 * snapshot. The manifest from repl_fsm.snapshot is the snapshot data (one
 * buffer, freed by libraft with raft_free, which is tern_free: repl.c
 * installs tern's allocator as libraft's heap). Restore: libraft transfers
 * the buffer on success only (on failure it frees it itself).
 *
 * Start-up restore the FSM cannot do (storage damage): raft_start
 * restores the latest local snapshot before io_start (r->io.started still
 * false). If the FSM then lacks bytes the snapshot covers (index/ cut a
 * damaged commit log at open; bulk_range says what is missing), the
 * restore is deferred to a bulk fetch from a peer (bulk.c, "Start-up
 * restore from a peer") instead of failing the start; until it is done no
 * entry is applied and no FSM snapshot is taken.
 *
 * Apply timing: the core calls apply right after it moved its commit
 * index, so apply first samples the replication latency (latency.c: a
 * leader's commit becomes visible to us here, and the sample is taken
 * before the apply's own cost), then times the FSM apply itself
 * (REPL_STAGE_APPLY).
 */
#include "repl_int.h"

void repl_fsm_restored(struct repl *r)
{
    r->glue.applied_bytes = 0;
}

void repl_fsm_fail(struct repl *r, int code)
{
    r->glue.fsm_error = code;
    repl_fail(r, code);
}

static int apply(struct raft_fsm *f,
                 const struct raft_buffer *buf,
                 void **result)
{
    struct repl *r = f->data;
    uint64_t index = raft_last_applied(r->glue.core) + 1;
    int rv;

    *result = NULL;
    if (repl_bulk_restore_pending(r)) {
        /* Never reached while AppendEntries are dropped for the fetch; an
         * apply now (e.g. after a leadership transfer to us) would skip
         * the entries the restore brings: fail-stop instead. */
        repl_fsm_fail(r, TERN_EINVAL);
        return RAFT_IOERR;
    }
    rv = r->fsm.apply(r->fsm.arg, index, buf->base, buf->len);
    if (rv != 0) {
        repl_fsm_fail(r, rv);
        return RAFT_IOERR;
    }
    r->glue.applied_bytes += buf->len;
    return 0;
}

/* apply, timed (see the top of the file). */
static int fsm_apply(struct raft_fsm *f,
                     const struct raft_buffer *buf,
                     void **result)
{
    struct repl *r = f->data;
    uint64_t t0;
    int rv;
    repl_lat_poll(r);
    t0 = repl_lat_now(r);
    rv = apply(f, buf, result);
    if (t0 != 0) {
        repl_lat_stage(r, REPL_STAGE_APPLY, t0, repl_lat_now(r));
    }
    return rv;
}

static int fsm_snapshot(struct raft_fsm *f,
                        struct raft_buffer *bufs[],
                        unsigned *n_bufs)
{
    struct repl *r = f->data;
    void *manifest = NULL;
    size_t len = 0;
    int rv;

    if (r->glue.applied_bytes < r->snapshot_threshold_bytes ||
        r->fsm.snapshot == NULL || repl_bulk_restore_pending(r)) {
        return RAFT_BUSY;
    }
    rv = r->fsm.snapshot(r->fsm.arg, raft_last_applied(r->glue.core), &manifest,
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
    r->glue.applied_bytes = 0;
    return 0;
}

/* Does the FSM lack bytes of the snapshot manifest in buf? */
static bool missing_bytes(struct repl *r, const struct raft_buffer *buf)
{
    uint64_t from = 0, to = 0;
    return r->fsm.bulk_range != NULL &&
           r->fsm.bulk_range(r->fsm.arg, buf->base, buf->len, &from, &to) ==
               0 &&
           from < to;
}

static int fsm_restore(struct raft_fsm *f, struct raft_buffer *buf)
{
    struct repl *r = f->data;
    int rv;
    if (r->fsm.restore == NULL) {
        return RAFT_IOERR;
    }
    rv = r->fsm.restore(r->fsm.arg, buf->base, buf->len);
    if (rv != 0 && !r->io.started && missing_bytes(r, buf) &&
        repl_bulk_restore_later(r, buf) == 0) {
        buf->base = NULL; /* held by the fetch */
        r->glue.applied_bytes = 0;
        return 0;
    }
    if (rv != 0) {
        r->glue.fsm_error = rv;
        return RAFT_IOERR;
    }
    raft_free(buf->base);
    buf->base = NULL;
    r->glue.applied_bytes = 0;
    return 0;
}

void repl_fsm_setup(struct repl *r)
{
    r->glue.core = &r->raft;
    r->glue.raft_fsm.version = 1;
    r->glue.raft_fsm.data = r;
    r->glue.raft_fsm.apply = fsm_apply;
    r->glue.raft_fsm.snapshot = fsm_snapshot;
    r->glue.raft_fsm.restore = fsm_restore;
}
