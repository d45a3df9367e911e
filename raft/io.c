/*
 * raft/io.c: tern's struct raft_io wrapper. The disk methods (init, load,
 * bootstrap, recover, set_term, set_vote, append, truncate, snapshot_put,
 * snapshot_get, time, random, async_work, close) delegate to an inner
 * raft_io (raft_uv in production, a fake in tests); send and receive go
 * through an xport with our codec (codec.c).
 *
 * On the way the wrapper keeps what the mitigations in guard.c need:
 *   - next_index: index of the next appended entry (the contract passes
 *     none): start_index + n after load, index after truncate(index),
 *     snapshot->index + 1 after an install snapshot_put(trailing = 0);
 *   - durable_index: the last index whose append completed with status 0,
 *     clamped by truncate (an in-flight append's completion only counts up
 *     to the truncation point) and set to the snapshot index when an install
 *     completes;
 *   - term runs: the term of every index of the submitted log, so the term
 *     of durable_index is known (RequestVote rewrite, #429).
 *
 * Happy path of a send: encode synchronously (the message is on raft's
 * stack), hand the frame to xport_send (which copies), complete raft's
 * callback from the xport completion. Failure modes: xport_send fails ->
 * we return RAFT_NOCONNECTION and raft's cb never fires; completion with an
 * error -> raft's cb gets RAFT_NOCONNECTION (drops the follower to probe);
 * close -> every pending raft cb fires with RAFT_CANCELED at once and the
 * xport request is orphaned (freed by its own completion later).
 *
 * A failed append makes the replica fail-stop (repl_fail): 0.15 handles
 * append failures badly (#466, 0cac59c), so the node stops taking part
 * (drops all messages) and reports REPL_UNAVAILABLE; node/ restarts it.
 *
 * Fencing. The xport's epoch (stamped on what we write) and fence (writes
 * stamped below it are refused) follow the Raft term:
 * both are set to the term loaded at start (io_load, before io_start, so
 * before anything is sent or received) and to every new term right after
 * the inner set_term made it durable and before we return to raft, i.e.
 * before raft acts in that term: a candidate's RequestVotes already carry
 * the new epoch, and a follower that learns term T from a message refuses
 * one-sided writes stamped < T before it answers. set_vote never changes
 * the term; it only re-asserts a fence whose setting failed. A failed set
 * is counted (fence_errors) and retried on every tick; it is not a safety
 * problem (every Raft message carries its term, which the core checks),
 * only the NIC-level protection is late. Liveness with the fence: a
 * node refuses messages of lower-term nodes instead of answering them
 * with its higher term, but those nodes still receive the higher-term
 * nodes' messages (heartbeats, RequestVotes), learn the term from them
 * and then get through.
 *
 * Oversized AppendEntries. libraft 0.15 sends every entry from next_index
 * in one message. send() splits it into parts that each
 * fit xport_max_message: part k carries entries [s_k, s_{k+1}), with
 * prev_log_index = original prev + s_k and prev_log_term = the term of
 * entries[s_k - 1] (the original prev term for the first part), and
 * leader_commit clamped to the part's last index (a follower applying part
 * k must not learn a commit index beyond what part k validated). The parts
 * go to the xport back to back, so they arrive in order (or, after a loss,
 * as a prefix, which is itself a valid AppendEntries sequence); raft's
 * send cb fires once, after every part completed, with the first error. If
 * a later part cannot even be submitted, the parts already submitted still
 * complete and raft's cb gets RAFT_NOCONNECTION (the follower goes to
 * probe; what it received is a valid prefix).
 *
 * Durability modes (semantics in repl.h). Disk mode: raft's append cb
 * fires from the inner completion. Memory mode: the append goes
 * to the inner io at once (same order, so raft_uv's own ordering of
 * appends, truncates and snapshot installs is untouched) and raft's cb is
 * deferred (never inside append) and fired in submission order with
 * status 0, while the inner write goes on: right after the core's recv
 * returns when the append came from a received message (a follower's
 * AppendEntries: its answer leaves in the same loop iteration), else from
 * an idle handle on the next loop turn (a leader's proposal: repl_propose
 * must not run raft's callbacks inside itself).
 * If an inner completion arrives before the deferred turn (only possible
 * for the oldest unacked append, completions being ordered), raft's cb
 * fires from it with its status. A later inner failure fail-stops the
 * replica as in disk mode. durable_index always follows the inner
 * completions; acked_index follows raft's callbacks (what the core counts,
 * its last_stored); the guards use acked_index (guard.c item 8).
 * The inner io gets a copy of the entries (array and payloads, one block
 * freed at the inner completion): raft drops its references to them at
 * its (early) callback, and the log may then free them (truncation,
 * compaction, close), while raft_uv keeps only pointers to them until it
 * encodes them into its write buffer, which happens later when a write is
 * already in flight (found by test_uv.c under ASan: a use after free).
 *
 * Follower apply off the answer path. libraft 0.15's
 * follower applies newly committed entries inside the append callback,
 * BEFORE it sends the AppendEntries result, so every answer waited for an
 * FSM apply (~10 us for a 1 KiB entry, measured) of the previous entry.
 * When an AppendEntries brings new entries and a higher leader_commit,
 * we hand it to the core with leader_commit lowered to the core's commit
 * index (lowering it is always safe, guard.c item 5) and hold the real
 * value; once its entries are acked (the answer is out) we deliver an
 * equivalent empty AppendEntries of the same leader and term, prev = the
 * held message's last entry (its term from our term runs), leader_commit
 * = the held value, through the guard; the core commits and applies on
 * its synchronous heartbeat path and its answer to that message is not
 * sent (it completes as sent: the leader already got the real answer).
 * Log matching: the core accepted the held message (it appended its
 * entries: next_index moved past them, else the hold is dropped), so our
 * log up to its last entry is the leader's; the hold is dropped if the
 * term or the truncation generation changed before delivery, or the node
 * is no longer a follower. Net effect: followers apply the same entries a
 * few microseconds later, after answering instead of before.
 * Disk mode does the same with the disk write in between: the held
 * commit is delivered at once, right after the core took the message and
 * started its write, and again after each ack; guard.c item 5 clamps the
 * delivered commit to acked_index (what is durable here), so the core
 * applies what the message newly commits WHILE the disk writes its
 * entries (exactly what a leader's heartbeat arriving then would do), and
 * the answer leaves as soon as the write completes. The hold ends once
 * its entries are acked; the commit the core still lacks then is
 * delivered after that ack. Measured with `tern bench --stages` (disk,
 * sequential): the follower's ack -> result (F_POST) held its apply.
 *
 * A leader's own write after its AppendEntries (disk mode). libraft 0.15
 * hands a proposal's entry to io->append (raft_uv submits the direct
 * write there: an io_submit and a virtio notification, 13% of the
 * leader's CPU time in a sequential run under perf) and only then
 * sends the AppendEntries, although the commit waits for a follower's
 * write as well as the leader's. repl_propose sets defer_appends around
 * raft_apply: the append then waits in inner_pending and goes to the
 * inner io when raft_apply returns, after the sends. Raft's entries array
 * stays valid until the append callback (the core holds it), the order
 * of appends is kept (every path that orders against appends flushes
 * inner_pending first, as in memory mode), and a write that fails to
 * start fail-stops the replica; raft's callback then gets RAFT_IOERR from
 * the next loop turn (the idle handle), never inside append. Its
 * AppendEntries have left by then, so, as for a write that fails after
 * it started, the proposal's outcome is unknown (repl.h: -EIO). Other
 * leader appends (barriers, configuration changes) go at once.
 *
 * Coalesced inner writes (memory mode). raft's cb no longer waits for the
 * inner write, so handing each append to raft_uv at once only costs: one
 * O_DSYNC segment write per append per node (measured: a threadpool
 * wake-up, a pwritev and a virtio notification each, on the same 2 vCPUs
 * the commit path needs). Instead an acked append waits in inner_pending
 * (submission order) and all of them go to the inner io together, in
 * order, REPL__FLUSH_MS after the first one (raft_uv then writes them as
 * one batch), or at once when REPL__FLUSH_BYTES are pending, and always
 * before anything whose order relative to appends matters to raft_uv:
 * truncate, snapshot_put, close. A write that fails to start fail-stops
 * the replica, like a failed write. Without a loop (tests) they go over at
 * the end of repl_io_run_deferred. Cost: a crash loses up to
 * REPL__FLUSH_MS more of a memory-mode node's log (repl.h).
 *
 * Term record (meta.c has the format and the crash-window reasoning).
 * raft_uv's metadata files carry no checksum, so we keep our own record
 * of term and vote and update it right after the inner set_term,
 * set_vote and bootstrap succeeded and before returning to raft (a vote
 * is therefore never sent before both are durable). io_load compares the
 * two after the inner load: equal goes on; ours missing is created (an
 * upgrade, or a crash inside the first bootstrap); ours one update behind
 * (a crash between the two writes) is completed; anything else refuses
 * the load (RAFT_CORRUPT -> TERN_ECORRUPT, both values in the message) and
 * frees what the inner load returned. A failed write of our record after
 * the inner one succeeded fail-stops the replica (the next start finds
 * the crash-window state and completes it).
 *
 * Refused messages. Before a decoded message reaches the guard or the
 * core (repl_xport_recv): a sender id that is not in the configuration
 * (or is our own) is dropped and counted (unknown_senders); a Raft
 * message whose term is >= REPL_TERM_MAX or more than max_term_jump above
 * our durable term, or which carries a term greater than its own (an
 * entry's, prev_log_term, last_log_term, a snapshot's last_term), is
 * dropped and counted (terms_refused); bounds and their reasons in
 * repl.h. Dropping is always safe in Raft. io_set_term refuses a term
 * >= REPL_TERM_MAX: the replica fail-stops (TERN_ELIMIT) rather than let
 * the term approach the wrap. node/ logs the counters (rate-limited).
 *
 * Frame checksums. A frame's checksum (codec.c) is XXH32 or XXH3; XXH3
 * costs about a tenth per byte, and the leader checksums every entry it
 * sends twice per follower (the frame here, the tcp transport's frame).
 * Every frame we send carries REPL_FRAME_ACCEPTS_XXH3; a peer whose
 * newest frame carried it gets XXH3 frames and XPORT_SEND_XXH3 (the tcp
 * transport's version 2), any other peer XXH32 and version 1, which every
 * release decodes (repl_peer_learn, from repl_xport_recv once the sender
 * is known). A peer restarted with an older release drops our XXH3
 * frames as corrupt until its first frame reaches us (a vote request at
 * the latest, after its election timeout): we send it XXH32 from then on.
 *
 * Close and truncate (libraft 0.15 bug, found by test_uv.c: a SEGV in
 * raft_uv's truncate after-work callback under ASan, the libuv assertion
 * "uv__finish_close: handle->flags & UV_HANDLE_CLOSING" without it).
 * raft_uv runs a truncate as a barrier callback that queues threadpool work
 * (uv->truncate_work, inside struct uv); uv->barrier stays set until that
 * work's after-work callback. raft_uv's close (uvBarrierClose) fires a
 * still-set uv->barrier once more: the truncate barrier callback, seeing
 * the close, frees the truncate request that the queued work still uses,
 * clears uv->barrier, and the close callback no longer waits (its
 * truncate_work check is an assert, compiled out in Debian). We then free
 * struct uv (raft_uv_close), and the after-work callback later writes into
 * and unblocks the freed struct uv. So the inner close waits until no
 * truncate can be in flight: every truncate is followed by an append
 * (0.15's follower appends the entries it truncated for at once), and
 * raft_uv starts that append only after the truncate's after-work ran, so
 * the append's completion proves the truncate finished. io_close holds the
 * inner close back while an append submitted after the newest unfinished
 * truncate is still pending and issues it from the next tick (raft_uv's
 * timer keeps running until its close; never from inside an inner
 * callback, which raft_uv does not expect to close it). Only for raft_uv
 * (wait_truncate); a truncate that raft follows with no append (its append
 * submission failed: out of memory, fail-stop) cannot be waited for.
 *
 * A truncate raft_uv did not carry out (libraft 0.15: its truncate work
 * sets uv->errored on failure, which nothing reads; the appends queued
 * behind the truncate are then written and acknowledged). raft_uv
 * truncates by rewriting the closed segment that holds the index (a new
 * file ending at index - 1), removing every closed segment from that one
 * on and syncing the directory. If listing, reading, writing or removing
 * fails, closed segments holding entries at or above the index stay
 * beside the new entries written for the same indexes: the log on disk is
 * no longer the log raft acknowledged (a restart loads the stale entries
 * or refuses the directory). io.c checks the outcome instead of the
 * error: the first append handed to raft_uv after a truncate completes
 * only once the truncate work has run (its barrier holds appends back),
 * and no closed segment may then hold an index at or above the index of
 * the newest truncate, the lowest since the previous append (a truncate
 * is always below next_index; a segment raft_uv closes
 * after the truncate can only be the one this append went to, and
 * raft_uv fires an append's callback before it closes its segment). If
 * one does, that append completes with RAFT_IOERR and the replica
 * fail-stops, naming the file (repl_status.failed_detail): nothing
 * written after the failed truncate is acknowledged, and a restart loads
 * the stale entries as uncommitted ones (a truncate only drops
 * uncommitted entries) or refuses the directory (node.c's rejoin path).
 * Not caught: a directory sync that fails after the removals succeeded
 * (the names are gone until a power loss brings them back).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "repl_int.h"

#define REPL__FLUSH_MS    1
#define REPL__FLUSH_BYTES ((size_t)1 << 20)

struct append_req
{
    struct raft_io_append inner_req;
    struct repl *r;
    struct raft_io_append *outer_req;
    raft_io_append_cb cb;
    uint64_t first;
    uint64_t last; /* clamped by truncate; last < first: nothing counts */
    bool acked;    /* raft's cb fired */
    uint64_t truncate_gen; /* r->io.truncate_gen at submission */
    uint64_t check_index;  /* r->io.trunc_check at submission (0: none) */
    void *copy;            /* memory mode: the entries handed to the inner io */
    /* What goes to the inner io: copy (memory mode), or raft's own array
     * (a leader's append deferred within repl_propose: raft holds it
     * until the callback). */
    const struct raft_entry *entries;
    unsigned n;            /* number of entries */
    size_t bytes;          /* memory mode: size of copy */
    bool dead;             /* never reached the inner io (failed to start) */
    bool ack_linked;       /* on r->io.unacked */
    struct tern_list link; /* r->io.inner_pending until handed to the
                              inner io, then r->io.appends while the
                              inner is pending */
    struct tern_list ack_link; /* r->io.unacked (memory mode; disk mode:
                                  a deferred one that failed to start) */
};

/* One raft send (or one bulk frame): one or more xport sends (parts). */
struct send_group
{
    struct repl *r; /* NULL once orphaned by close */
    struct raft_io_send *raft_req;
    raft_io_send_cb raft_cb;
    unsigned pending; /* parts submitted, not completed */
    bool sealed;      /* every part submitted */
    int status;       /* first error */
    struct tern_list link;
};

struct send_req
{
    struct xport_send xs;
    struct send_group *g;
};

struct put_req
{
    struct raft_io_snapshot_put inner_req;
    struct repl *r;
    struct raft_io_snapshot_put *outer_req;
    raft_io_snapshot_put_cb cb;
    uint64_t index;
    uint64_t term;
    bool install;
};

static void group_finish(struct send_group *g);
static void ack(struct repl *r, struct append_req *a, int status);

/* raft_init sets outer.data to the struct raft, so find ourselves by
 * address. The inner io's data is ours (raft_uv never uses it). */
static struct repl *outer_repl(struct raft_io *io)
{
    return TERN_CONTAINER(io, struct repl, io.outer);
}

static void copy_errmsg(struct repl *r)
{
    memcpy(r->io.outer.errmsg, r->inner->errmsg, sizeof r->io.outer.errmsg);
}

/* ---- term runs --------------------------------------------------------- */

static void runs_truncate(struct repl *r, uint64_t index)
{
    while (r->io.n_runs > 0 && r->io.runs[r->io.n_runs - 1].index >= index) {
        r->io.n_runs--;
    }
}

static int runs_append(struct repl *r, uint64_t index, uint64_t term)
{
    if (r->io.n_runs > 0 && r->io.runs[r->io.n_runs - 1].term == term) {
        return 0;
    }
    if (r->io.n_runs == r->io.cap_runs) {
        size_t cap = r->io.cap_runs ? r->io.cap_runs * 2 : 16;
        struct repl_term_run *n = tern_realloc(r->io.runs, cap * sizeof *n);
        if (n == NULL) {
            return -ENOMEM;
        }
        r->io.runs = n;
        r->io.cap_runs = cap;
    }
    r->io.runs[r->io.n_runs].index = index;
    r->io.runs[r->io.n_runs].term = term;
    r->io.n_runs++;
    return 0;
}

uint64_t repl_io_term_of(const struct repl *r, uint64_t index)
{
    if (index == 0 || index >= r->io.next_index) {
        return 0;
    }
    for (size_t i = r->io.n_runs; i > 0; i--) {
        if (r->io.runs[i - 1].index <= index) {
            return r->io.runs[i - 1].term;
        }
    }
    return 0;
}

/* ---- fencing ----------------------------------------------------------- */

static void fence_to(struct repl *r, uint64_t term)
{
    int rv = xport_set_epoch(r->xport, term);
    if (rv == 0) {
        rv = xport_set_fence(r->xport, term);
    }
    if (rv != 0) {
        r->io.fence_errors++;
        r->io.fenced_term = 0; /* retried on the next tick */
        return;
    }
    r->io.fenced_term = term;
}

/* ---- disk methods ------------------------------------------------------ */

static int io_init(struct raft_io *io, raft_id id, const char *address)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->init(r->inner, id, address);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static void maybe_closed(struct repl *r)
{
    raft_io_close_cb cb = r->io.close_cb;
    if (!r->io.inner_closed || (r->io.idle_init && !r->io.idle_closed) ||
        (r->io.idle_init && !r->io.flush_timer_closed)) {
        return;
    }
    if (cb != NULL) {
        /* Only appends whose inner write never started can still wait for
         * raft's callback (the inner close completed all others, in
         * order); complete them before raft's close callback. */
        while (!tern_list_empty(&r->io.unacked)) {
            struct append_req *a =
                TERN_CONTAINER(r->io.unacked.next, struct append_req, ack_link);
            ack(r, a, RAFT_CANCELED);
            if (a->dead) {
                tern_free(a);
            }
        }
        r->io.close_cb = NULL;
        cb(&r->io.outer);
    }
}

static void inner_close_cb(struct raft_io *inner)
{
    struct repl *r = inner->data;
    r->io.inner_closed = true;
    maybe_closed(r);
}

static void idle_close_cb(uv_handle_t *h)
{
    struct repl *r = h->data;
    r->io.idle_closed = true;
    maybe_closed(r);
}

static void flush_timer_close_cb(uv_handle_t *h)
{
    struct repl *r = h->data;
    r->io.flush_timer_closed = true;
    maybe_closed(r);
}

static void append_done(struct raft_io_append *inner_req, int status);

static void idle_cb(uv_idle_t *h);
static void deliver_hold(struct repl *r);

/* An append the inner io took: it settles the truncates before it ("Close
 * and truncate") and checks them ("A truncate raft_uv did not carry out"). */
static void submitted(struct repl *r, struct append_req *a)
{
    a->truncate_gen = r->io.truncate_gen;
    a->check_index = r->io.trunc_check;
    r->io.trunc_check = 0;
    tern_list_push(&r->io.appends, &a->link);
}

/* Hand the pending appends to the inner io, in order (see the top of the
 * file): memory mode's acked ones, or a leader's deferred one. */
static void flush_inner(struct repl *r)
{
    if (tern_list_empty(&r->io.inner_pending)) {
        return;
    }
    r->io.inner_flushes++;
    if (r->io.idle_init && !r->io.flush_timer_closed) {
        uv_timer_stop(&r->io.flush_timer);
    }
    while (!tern_list_empty(&r->io.inner_pending)) {
        struct append_req *a =
            TERN_CONTAINER(r->io.inner_pending.next, struct append_req, link);
        int rv = RAFT_IOERR;
        tern_list_remove(&a->link);
        r->io.inner_pending_bytes -= a->bytes;
        if (r->failed == 0) {
            rv = r->inner->append(r->inner, &a->inner_req, a->entries, a->n,
                                  append_done);
        }
        if (rv == 0) {
            submitted(r, a);
            continue;
        }
        if (r->failed == 0) {
            copy_errmsg(r);
            repl_fail(r, repl_err_from_raft(rv));
        }
        tern_free(a->copy);
        a->copy = NULL;
        if (a->acked) {
            tern_free(a);
        } else {
            a->dead = true; /* freed by repl_io_run_deferred after its ack */
            if (!a->ack_linked) {
                /* Disk mode: acked (with the error) from the idle turn. */
                a->ack_linked = true;
                tern_list_push(&r->io.unacked, &a->ack_link);
                if (r->io.idle_init && !r->io.idle_closed) {
                    uv_idle_start(&r->io.idle, idle_cb);
                }
            }
        }
    }
}

static void flush_timer_cb(uv_timer_t *t)
{
    flush_inner(t->data);
}

void repl_io_defer_appends(struct repl *r)
{
    r->io.defer_appends = r->durability == REPL_DURABILITY_DISK;
}

void repl_io_flush_deferred(struct repl *r)
{
    if (r->io.defer_appends) {
        r->io.defer_appends = false;
        flush_inner(r);
    }
}

/* An inner truncate may still be in flight: an append submitted after the
 * newest truncate not known finished is pending (see the top of the file;
 * appends complete in order, so the newest pending append tells). */
static bool truncate_in_flight(const struct repl *r)
{
    const struct append_req *last;
    if (!r->io.wait_truncate || r->io.truncate_settled == r->io.truncate_gen ||
        tern_list_empty(&r->io.appends)) {
        return false;
    }
    last = TERN_CONTAINER(r->io.appends.prev, struct append_req, link);
    return last->truncate_gen > r->io.truncate_settled;
}

static void io_close(struct raft_io *io, raft_io_close_cb cb)
{
    struct repl *r = outer_repl(io);
    /* r->closing is already set: raft_close is called by repl_close only. */
    repl_bulk_abort(r);
    repl_io_close_sends(r);
    r->io.close_cb = cb;
    /* Unacked appends still have their inner write pending: the inner
     * close completes (cancels) them, which fires raft's cbs in order. */
    flush_inner(r); /* they must reach the inner io before its close */
    if (r->io.idle_init) {
        uv_close((uv_handle_t *)&r->io.idle, idle_close_cb);
        uv_close((uv_handle_t *)&r->io.flush_timer, flush_timer_close_cb);
    }
    if (truncate_in_flight(r)) {
        r->io.inner_close_deferred = true; /* io_tick closes it */
        return;
    }
    r->inner->close(r->inner, inner_close_cb);
}

/* ---- term record (meta.c) ----------------------------------------------- */

/* Write our record of (term, vote) as the next seq. A RAFT_* code with
 * outer.errmsg on failure. */
static int meta_put(struct repl *r, uint64_t term, uint64_t vote)
{
    struct repl_meta_rec m = {0};
    char em[TERN_ERRMSG_SIZE] = "";
    int rv;
    m.seq = r->io.meta_seq + 1;
    m.term = term;
    m.vote = vote;
    rv = repl_meta_write(r->data_dir, &m, em);
    if (rv != 0) {
        (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg, "%s", em);
        return rv == -ENOSPC ? RAFT_NOSPACE : RAFT_IOERR;
    }
    r->io.meta_seq = m.seq;
    return 0;
}

/* After an inner set_term/set_vote succeeded: our record follows, or the
 * replica fail-stops (the inner state is then one update ahead, which the
 * next load completes). */
static int meta_follow(struct repl *r, uint64_t term, uint64_t vote)
{
    int rv;
    if (!r->io.meta_on) {
        return 0;
    }
    rv = meta_put(r, term, vote);
    if (rv != 0) {
        repl_fail(r, repl_err_from_raft(rv));
    }
    return rv;
}

/* Compare the inner io's loaded term and vote with our record (top of the
 * file). A RAFT_* code with outer.errmsg on refusal. */
static int meta_load(struct repl *r, uint64_t term, uint64_t vote)
{
    struct repl_meta_rec ours;
    char em[TERN_ERRMSG_SIZE] = "";
    int rv;
    if (!r->io.meta_on) {
        return 0;
    }
    rv = repl_meta_read(r->data_dir, &ours, em);
    if (rv == 0) {
        r->io.meta_seq = ours.seq;
        r->io.meta_prev_term = ours.term;
        r->io.meta_prev_vote = ours.vote;
        rv = repl_meta_check(term, vote, &ours, r->io.max_term_jump, em);
    }
    if (rv < 0) {
        (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg, "%s", em);
        return rv == TERN_ECORRUPT || rv == TERN_EVERSION ? RAFT_CORRUPT
                                                          : RAFT_IOERR;
    }
    r->io.meta_load = rv;
    if (rv != REPL_META_MATCH) {
        return meta_put(r, term, vote);
    }
    return 0;
}

/* Free what a successful inner load returned (the load is refused after
 * all): entries share batches, consecutive ones the same. */
static void free_loaded(struct raft_snapshot **snapshot,
                        struct raft_entry *entries[],
                        size_t *n_entries)
{
    void *batch = NULL;
    for (size_t i = 0; i < *n_entries; i++) {
        if ((*entries)[i].batch != batch) {
            batch = (*entries)[i].batch;
            raft_free(batch);
        }
    }
    raft_free(*entries);
    *entries = NULL;
    *n_entries = 0;
    if (*snapshot != NULL) {
        for (unsigned i = 0; i < (*snapshot)->n_bufs; i++) {
            raft_free((*snapshot)->bufs[i].base);
        }
        raft_free((*snapshot)->bufs);
        raft_configuration_close(&(*snapshot)->configuration);
        raft_free(*snapshot);
        *snapshot = NULL;
    }
}

static int io_load(struct raft_io *io,
                   raft_term *term,
                   raft_id *voted_for,
                   struct raft_snapshot **snapshot,
                   raft_index *start_index,
                   struct raft_entry *entries[],
                   size_t *n_entries)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->load(r->inner, term, voted_for, snapshot, start_index,
                            entries, n_entries);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    rv = meta_load(r, *term, *voted_for);
    if (rv != 0) {
        free_loaded(snapshot, entries, n_entries);
        return rv;
    }
    r->io.term = *term;
    r->io.n_runs = 0;
    if (*snapshot != NULL) {
        r->io.snap_index = (*snapshot)->index;
        r->io.snap_term = (*snapshot)->term;
        /* Entries kept before the snapshot (trailing) carry the terms up to
         * it themselves; the snapshot's run is needed only beyond them. */
        if (*n_entries == 0 || *start_index > (*snapshot)->index) {
            (void)runs_append(r, (*snapshot)->index, (*snapshot)->term);
        }
    }
    /* Out of memory for the runs only degrades term lookups (they return
     * "unknown", which disables the RequestVote rewrite): no failure. */
    for (size_t i = 0; i < *n_entries; i++) {
        if (runs_append(r, *start_index + i, (*entries)[i].term) != 0) {
            r->io.n_runs = 0;
            break;
        }
    }
    r->io.next_index = *start_index + *n_entries;
    if (*n_entries == 0 && *snapshot != NULL &&
        r->io.next_index <= (*snapshot)->index) {
        r->io.next_index = (*snapshot)->index + 1;
    }
    r->io.durable_index = r->io.next_index - 1;
    r->io.acked_index = r->io.durable_index;
    fence_to(r, r->io.term);
    return 0;
}

static void io_tick(struct raft_io *inner)
{
    struct repl *r = inner->data;
    if (r->io.inner_close_deferred) {
        if (!truncate_in_flight(r)) {
            r->io.inner_close_deferred = false;
            r->inner->close(r->inner, inner_close_cb);
        }
        return;
    }
    repl_io_tick(r);
    repl_lost_tick(r);
}

void repl_io_tick(struct repl *r)
{
    if (r->closing || r->io.tick_cb == NULL) {
        return;
    }
    if (r->io.fenced_term != r->io.term) {
        fence_to(r, r->io.term);
    }
    /* guard.c item 4 (#467, 4fbd3c0): a non-leader does not get ticks (its
     * election timer) while it still persists entries or a snapshot, or
     * fetches the bulk data of one (it is behind: no use as a candidate),
     * nor while its disk is full (guard.c item 11). */
    /* Nor does a node that may not vote (member.c, "Votes"): a node
     * rejoining after a loss must not stand for election either. */
    if (r->failed == 0 &&
        (!r->guard.hold_ticks || raft_state(&r->raft) == RAFT_LEADER ||
         (r->io.n_unacked == 0 && r->io.install_index == 0 &&
          !r->bulk.fetch.active && !r->disk_full && repl_member_may_vote(r)))) {
        r->io.tick_cb(&r->io.outer);
    } else if (r->failed == 0) {
        r->io.ticks_withheld++;
    }
    repl_bulk_tick(r);
    repl_lat_poll(r);
    repl_guard_tick(r);
    repl_poll(r);
    repl_member_tick(r);
}

static void io_inner_recv(struct raft_io *inner, struct raft_message *msg)
{
    /* The inner transport is a dummy that never receives. */
    (void)inner;
    (void)msg;
}

static int io_start(struct raft_io *io,
                    unsigned msecs,
                    raft_io_tick_cb tick,
                    raft_io_recv_cb recv)
{
    struct repl *r = outer_repl(io);
    int rv;
    (void)msecs; /* we tick faster than raft's heartbeat (repl->tick_ms) */
    r->io.tick_cb = tick;
    r->io.recv_cb = recv;
    if (r->loop != NULL && !r->io.idle_init) {
        uv_idle_init(r->loop, &r->io.idle);
        r->io.idle.data = r;
        uv_timer_init(r->loop, &r->io.flush_timer);
        r->io.flush_timer.data = r;
        r->io.idle_init = true;
    }
    rv = r->inner->start(r->inner, r->tick_ms, io_tick, io_inner_recv);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    repl_lost_start(r);
    rv = xport_start(r->xport, repl_xport_recv, r);
    if (rv != 0) {
        (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg,
                       "xport start: %s", tern_strerror(rv));
        return RAFT_IOERR;
    }
    r->io.started = true;
    return 0;
}

static int io_bootstrap(struct raft_io *io, const struct raft_configuration *c)
{
    struct repl *r = outer_repl(io);
    struct repl_meta_rec ours;
    char em[TERN_ERRMSG_SIZE] = "";
    int rv = r->inner->bootstrap(r->inner, c);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    /* The inner io was pristine and now holds term 1, no vote (raft_uv
     * 0.15). A record that exists already is left for io_load to compare:
     * raft_uv's files were lost under it (the load then refuses). */
    if (!r->io.meta_on || repl_meta_read(r->data_dir, &ours, em) != 0 ||
        ours.present) {
        return 0;
    }
    r->io.meta_seq = 0;
    return meta_put(r, 1, 0);
}

static int io_recover(struct raft_io *io, const struct raft_configuration *c)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->recover(r->inner, c);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static int io_set_term(struct raft_io *io, raft_term term)
{
    struct repl *r = outer_repl(io);
    int rv;
    if (term >= REPL_TERM_MAX) {
        (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg,
                       "term %llu would reach the term bound 2^62",
                       (unsigned long long)term);
        r->io.term_exhausted = true;
        repl_fail(r, TERN_ELIMIT);
        return RAFT_IOERR;
    }
    rv = r->inner->set_term(r->inner, term);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    rv = meta_follow(r, term, 0);
    if (rv != 0) {
        return rv;
    }
    r->io.term = term;
    /* Durable now: fence before raft acts in the new term. */
    fence_to(r, term);
    return 0;
}

static int io_set_vote(struct raft_io *io, raft_id id)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->set_vote(r->inner, id);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    rv = meta_follow(r, r->io.term, id);
    if (rv != 0) {
        return rv;
    }
    if (r->io.fenced_term != r->io.term) {
        fence_to(r, r->io.term); /* an earlier attempt failed */
    }
    return 0;
}

/* Fire raft's cb for a (the oldest unacked) append. */
static void ack(struct repl *r, struct append_req *a, int status)
{
    if (status == 0 && a->last >= a->first && a->last > r->io.acked_index) {
        r->io.acked_index = a->last;
    }
    a->acked = true;
    r->io.n_unacked--;
    if (a->ack_linked) {
        tern_list_remove(&a->ack_link);
        a->ack_linked = false;
    }
    if (status == 0) {
        repl_lat_f_ack(r, a->last);
        repl_lat_synced(r, a->last);
    }
    a->outer_req->cb = a->cb;
    a->cb(a->outer_req, status);
    repl_lat_poll(r);
}

static void append_done(struct raft_io_append *inner_req, int status)
{
    struct append_req *a =
        TERN_CONTAINER(inner_req, struct append_req, inner_req);
    struct repl *r = a->r;
    tern_list_remove(&a->link);
    if (a->truncate_gen > r->io.truncate_settled) {
        r->io.truncate_settled = a->truncate_gen; /* see the top of the file */
    }
    tern_free(a->copy);
    a->copy = NULL;
    if (status == 0 && a->check_index != 0 && r->io.check_segments &&
        r->data_dir != NULL) {
        char em[TERN_ERRMSG_SIZE] = "";
        int rv = repl_io_stale_segment(r->data_dir, a->check_index, em);
        if (rv != 0) {
            repl_fail_detail(r, rv, em);
            status = RAFT_IOERR;
        }
    }
    if (status == 0) {
        if (a->last >= a->first && a->last > r->io.durable_index) {
            r->io.durable_index = a->last;
        }
    } else if (status != RAFT_CANCELED && !r->closing) {
        repl_fail(r, repl_err_from_raft(status));
    }
    if (!a->acked) {
        /* Disk mode; or memory mode before the deferred turn (then this is
         * the oldest unacked append: completions are ordered). */
        ack(r, a, status);
        if (r->durability == REPL_DURABILITY_DISK && status == 0) {
            deliver_hold(r); /* answered: the rest of a held commit */
        }
    }
    tern_free(a);
    repl_guard_release(r); /* guard.c item 1: our barrier may be durable */
}

/* Deliver the held commit index (see the top of the file). Memory mode:
 * once the held message's entries are acked. Disk mode: as far as it is
 * durable here, at once and after every ack (guard.c item 5 clamps the
 * message's commit to acked_index); held until its entries are acked. */
static void deliver_hold(struct repl *r)
{
    struct raft_message m;
    uint64_t index = r->io.hold.index;
    bool whole = r->io.acked_index >= index;
    if (index == 0 || (!whole && r->durability == REPL_DURABILITY_MEMORY)) {
        return;
    }
    if (whole) {
        r->io.hold.index = 0;
    }
    if (r->closing || r->failed != 0 || r->io.recv_cb == NULL ||
        raft_state(&r->raft) != RAFT_FOLLOWER ||
        r->raft.current_term != r->io.hold.term ||
        r->io.truncate_gen != r->io.hold.gen ||
        r->io.hold.commit <= r->raft.commit_index) {
        r->io.hold.index = 0;
        return;
    }
    if (TERN_MIN(r->io.hold.commit, r->io.acked_index) <=
        r->raft.commit_index) {
        return; /* nothing durable to add yet */
    }
    memset(&m, 0, sizeof m);
    m.type = RAFT_IO_APPEND_ENTRIES;
    m.server_id = r->io.hold.leader_id;
    m.server_address = r->io.hold.leader_addr;
    m.append_entries.term = r->io.hold.term;
    m.append_entries.prev_log_index = index;
    m.append_entries.prev_log_term = repl_io_term_of(r, index);
    m.append_entries.leader_commit = r->io.hold.commit;
    if (m.append_entries.prev_log_term == 0 || !repl_guard_recv(r, &m)) {
        return;
    }
    /* Not contact with the leader: the real message reset the election
     * timer when it came. In disk mode this runs after a write completes,
     * which may be after the leader died (lost.c may have expired the
     * timer meanwhile): keep the timer as it was. */
    raft_time timer = r->raft.election_timer_start;
    r->io.quiet_results = true;
    r->io.recv_cb(&r->io.outer, &m);
    r->io.quiet_results = false;
    if (raft_state(&r->raft) == RAFT_FOLLOWER) {
        r->raft.election_timer_start = timer;
    }
    r->io.holds_delivered++;
}

size_t repl_io_run_deferred(struct repl *r)
{
    size_t n = 0;
    while (!tern_list_empty(&r->io.unacked)) {
        struct append_req *a =
            TERN_CONTAINER(r->io.unacked.next, struct append_req, ack_link);
        /* Its inner write goes (or went) on; append_done frees it. A dead
         * one's never started (the replica is fail-stopped). */
        bool dead = a->dead;
        ack(r, a, dead ? RAFT_IOERR : 0);
        if (dead) {
            tern_free(a);
        }
        n++;
    }
    deliver_hold(r);
    if (!r->io.idle_init) {
        flush_inner(r); /* no loop, no timer: hand them over now */
    }
    while (!tern_list_empty(&r->io.null_sends)) {
        struct send_group *g =
            TERN_CONTAINER(r->io.null_sends.next, struct send_group, link);
        group_finish(g); /* status 0: "handed off" */
        n++;
    }
    if (r->io.idle_init && !r->io.idle_closed && !r->closing) {
        uv_idle_stop(&r->io.idle);
    }
    return n;
}

static void idle_cb(uv_idle_t *h)
{
    struct repl *r = h->data;
    (void)repl_io_run_deferred(r);
}

/* Memory mode: one block holding a copy of the entries array and their
 * payloads (the block is every copied entry's batch). NULL on OOM. */
static struct raft_entry *copy_entries(const struct raft_entry entries[],
                                       unsigned n,
                                       size_t *bytes /* OUT */)
{
    size_t head = (size_t)n * sizeof(struct raft_entry);
    size_t total = head;
    struct raft_entry *c;
    uint8_t *p;
    for (unsigned i = 0; i < n; i++) {
        total += (entries[i].buf.len + 7) & ~(size_t)7;
    }
    c = tern_malloc(total > 0 ? total : 1);
    if (c == NULL) {
        return NULL;
    }
    *bytes = total;
    p = (uint8_t *)c + head;
    for (unsigned i = 0; i < n; i++) {
        c[i] = entries[i];
        c[i].buf.base = p;
        c[i].batch = c;
        if (entries[i].buf.len > 0) {
            memcpy(p, entries[i].buf.base, entries[i].buf.len);
        }
        p += (entries[i].buf.len + 7) & ~(size_t)7;
    }
    return c;
}

static int io_append(struct raft_io *io,
                     struct raft_io_append *req,
                     const struct raft_entry entries[],
                     unsigned n,
                     raft_io_append_cb cb)
{
    struct repl *r = outer_repl(io);
    struct append_req *a;
    size_t saved_runs = r->io.n_runs;
    int rv;

    if (r->failed != 0) {
        return RAFT_IOERR;
    }
    if (raft_state(&r->raft) == RAFT_FOLLOWER) {
        repl_guard_matched(r); /* the delivered AppendEntries was taken */
    }
    a = tern_calloc(1, sizeof *a);
    if (a == NULL) {
        return RAFT_NOMEM;
    }
    a->r = r;
    a->outer_req = req;
    a->cb = cb;
    a->first = r->io.next_index;
    a->last = r->io.next_index + n - 1;
    a->inner_req.data = req->data;
    for (unsigned i = 0; i < n; i++) {
        if (runs_append(r, a->first + i, entries[i].term) != 0) {
            r->io.n_runs = saved_runs;
            tern_free(a);
            return RAFT_NOMEM;
        }
    }
    a->n = n;
    for (unsigned i = 0; i < n && r->member.rejoin_wait; i++) {
        if (entries[i].type == RAFT_CHANGE) {
            repl_member_conf_seen(r, &entries[i].buf);
        }
    }
    if (r->durability == REPL_DURABILITY_MEMORY) {
        a->copy = copy_entries(entries, n, &a->bytes);
        if (a->copy == NULL) {
            r->io.n_runs = saved_runs;
            tern_free(a);
            return RAFT_NOMEM;
        }
        a->entries = a->copy;
        /* Coalesced: handed to the inner io later (top of the file). */
        tern_list_push(&r->io.inner_pending, &a->link);
        r->io.inner_pending_bytes += a->bytes;
        if (r->io.idle_init && !r->closing &&
            !uv_is_active((uv_handle_t *)&r->io.flush_timer)) {
            uv_timer_start(&r->io.flush_timer, flush_timer_cb, REPL__FLUSH_MS,
                           0);
        }
    } else if (r->io.defer_appends) {
        /* A leader's own write after its AppendEntries (top of the file):
         * repl_propose hands it over when raft_apply returns. */
        a->entries = entries;
        tern_list_push(&r->io.inner_pending, &a->link);
    } else {
        rv = r->inner->append(r->inner, &a->inner_req, entries, n, append_done);
        if (rv != 0) {
            copy_errmsg(r);
            r->io.n_runs = saved_runs;
            tern_free(a);
            return rv;
        }
        submitted(r, a);
    }
    r->io.next_index += n;
    r->io.n_unacked++;
    if (raft_state(&r->raft) == RAFT_LEADER) {
        repl_lat_append(r, a->last);
    } else {
        repl_lat_f_append(r);
    }
    if (r->durability == REPL_DURABILITY_MEMORY) {
        a->ack_linked = true;
        tern_list_push(&r->io.unacked, &a->ack_link);
        if (r->io.idle_init) {
            uv_idle_start(&r->io.idle, idle_cb);
        }
        if (r->io.inner_pending_bytes >= REPL__FLUSH_BYTES) {
            flush_inner(r);
        }
    }
    return 0;
}

static int io_truncate(struct raft_io *io, raft_index index)
{
    struct repl *r = outer_repl(io);
    struct tern_list *e;
    int rv;
    flush_inner(r); /* raft_uv orders them before the truncate */
    rv = r->inner->truncate(r->inner, index);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    for (e = r->io.appends.next; e != &r->io.appends; e = e->next) {
        struct append_req *a = TERN_CONTAINER(e, struct append_req, link);
        if (a->last >= index) {
            a->last = index - 1;
        }
    }
    if (r->io.durable_index >= index) {
        r->io.durable_index = index - 1;
    }
    if (r->io.acked_index >= index) {
        r->io.acked_index = index - 1;
    }
    r->io.next_index = index;
    r->io.truncate_gen++;
    r->io.trunc_check = index; /* the lowest since the last append: a
                                    later truncate is below next_index */
    runs_truncate(r, index);
    repl_lat_forget(r, index);
    return 0;
}

int repl_io_stale_segment(const char *dir, uint64_t index, char *errmsg)
{
    struct dirent *d;
    DIR *dp = opendir(dir);
    int rv = 0;
    if (dp == NULL) {
        rv = -errno;
        tern_errmsg_printf(errmsg,
                           "after a truncate at %" PRIu64 ": list %s: %s",
                           index, dir, tern_strerror(rv));
        return rv;
    }
    errno = 0;
    while ((d = readdir(dp)) != NULL) {
        unsigned long long first, last;
        int end = 0;
        /* raft_uv's closed segment: %016llu-%016llu */
        if (strlen(d->d_name) != 33 ||
            sscanf(d->d_name, "%16llu-%16llu%n", &first, &last, &end) != 2 ||
            end != 33 || last < index) {
            continue;
        }
        tern_errmsg_printf(errmsg,
                           "raft_uv did not carry out a truncate at %" PRIu64
                           ": closed segment %s/%s still holds entries "
                           "%llu-%llu",
                           index, dir, d->d_name, first, last);
        rv = -EIO;
        break;
    }
    if (rv == 0 && errno != 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg,
                           "after a truncate at %" PRIu64 ": read %s: %s",
                           index, dir, tern_strerror(rv));
    }
    (void)closedir(dp);
    return rv;
}

static void put_done(struct raft_io_snapshot_put *inner_req, int status)
{
    struct put_req *p = TERN_CONTAINER(inner_req, struct put_req, inner_req);
    struct repl *r = p->r;
    if (status == 0 && p->index > r->io.snap_index) {
        r->io.snap_index = p->index;
        r->io.snap_term = p->term;
    }
    if (p->install) {
        r->io.install_index = 0;
        if (status == 0) {
            r->io.durable_index = p->index;
            r->io.acked_index = p->index;
        }
    }
    p->outer_req->cb = p->cb;
    p->cb(p->outer_req, status);
    tern_free(p);
}

static int io_snapshot_put(struct raft_io *io,
                           unsigned trailing,
                           struct raft_io_snapshot_put *req,
                           const struct raft_snapshot *snapshot,
                           raft_io_snapshot_put_cb cb)
{
    struct repl *r = outer_repl(io);
    struct put_req *p = tern_calloc(1, sizeof *p);
    int rv;
    if (p == NULL) {
        return RAFT_NOMEM;
    }
    p->r = r;
    p->outer_req = req;
    p->cb = cb;
    p->index = snapshot->index;
    p->term = snapshot->term;
    p->install = trailing == 0;
    if (p->install) {
        repl_guard_matched(r); /* the delivered InstallSnapshot was taken */
    }
    p->inner_req.data = req->data;
    flush_inner(r); /* raft_uv orders them before the snapshot */
    rv = r->inner->snapshot_put(r->inner, trailing, &p->inner_req, snapshot,
                                put_done);
    if (rv != 0) {
        copy_errmsg(r);
        tern_free(p);
        return rv;
    }
    if (p->install) {
        struct tern_list *e;
        /* The install replaces the whole log; earlier in-flight appends no
         * longer describe it. */
        for (e = r->io.appends.next; e != &r->io.appends; e = e->next) {
            struct append_req *a = TERN_CONTAINER(e, struct append_req, link);
            a->last = a->first - 1;
        }
        r->io.install_index = snapshot->index;
        r->io.install_term = snapshot->term;
        r->io.next_index = snapshot->index + 1;
        if (r->io.durable_index > snapshot->index) {
            r->io.durable_index = 0;
        }
        if (r->io.acked_index > snapshot->index) {
            r->io.acked_index = 0;
        }
        r->io.n_runs = 0;
        if (runs_append(r, snapshot->index, snapshot->term) != 0) {
            /* Only the term lookups suffer; they then return 0. */
            r->io.n_runs = 0;
        }
    }
    return 0;
}

static int io_snapshot_get(struct raft_io *io,
                           struct raft_io_snapshot_get *req,
                           raft_io_snapshot_get_cb cb)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->snapshot_get(r->inner, req, cb);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static raft_time io_time(struct raft_io *io)
{
    struct repl *r = outer_repl(io);
    return r->inner->time(r->inner) + r->lost.offset; /* lost.c, 2. */
}

static int io_random(struct raft_io *io, int min, int max)
{
    struct repl *r = outer_repl(io);
    return r->inner->random(r->inner, min, max);
}

static int io_async_work(struct raft_io *io,
                         struct raft_io_async_work *req,
                         raft_io_async_work_cb cb)
{
    struct repl *r = outer_repl(io);
    return r->inner->async_work(r->inner, req, cb);
}

/* ---- network ----------------------------------------------------------- */

static void group_finish(struct send_group *g)
{
    if (g->r != NULL) {
        tern_list_remove(&g->link);
        if (g->raft_cb != NULL) {
            g->raft_cb(g->raft_req, g->status == 0 ? 0 : RAFT_NOCONNECTION);
        }
    }
    tern_free(g);
}

static void send_done(struct xport_send *xs, int status)
{
    struct send_req *s = xs->data;
    struct send_group *g = s->g;
    tern_free(s);
    if (status != 0 && g->status == 0) {
        g->status = status;
    }
    g->pending--;
    if (g->pending == 0 && g->sealed) {
        group_finish(g);
    }
}

void repl_io_close_sends(struct repl *r)
{
    while (!tern_list_empty(&r->io.null_sends)) {
        struct send_group *g =
            TERN_CONTAINER(r->io.null_sends.next, struct send_group, link);
        tern_list_remove(&g->link);
        if (g->raft_cb != NULL) {
            g->raft_cb(g->raft_req, RAFT_CANCELED);
        }
        tern_free(g); /* no parts: nothing else refers to it */
    }
    while (!tern_list_empty(&r->io.sends)) {
        struct send_group *g =
            TERN_CONTAINER(r->io.sends.next, struct send_group, link);
        tern_list_remove(&g->link);
        g->r = NULL; /* freed by its last part's completion */
        if (g->raft_cb != NULL) {
            g->raft_cb(g->raft_req, RAFT_CANCELED);
        }
    }
}

static struct send_group *group_new(struct repl *r,
                                    struct raft_io_send *raft_req,
                                    raft_io_send_cb raft_cb)
{
    struct send_group *g = tern_calloc(1, sizeof *g);
    if (g != NULL) {
        g->r = r;
        g->raft_req = raft_req;
        g->raft_cb = raft_cb;
        tern_list_init(&g->link);
    }
    return g;
}

/* ---- frame checksums ("Frame checksums" at the top) ------------------- */

bool repl_peer_xxh3(const struct repl *r, uint64_t id)
{
    for (unsigned i = 0; i < r->io.n_xxh3_peers; i++) {
        if (r->io.xxh3_peers[i] == id) {
            return true;
        }
    }
    return false;
}

unsigned repl_frame_flags(const struct repl *r, uint64_t id)
{
    return REPL_FRAME_ACCEPTS_XXH3 |
           (repl_peer_xxh3(r, id) ? REPL_FRAME_XXH3 : 0u);
}

void repl_peer_learn(struct repl *r, uint64_t id, unsigned frame_flags)
{
    bool accepts = (frame_flags & REPL_FRAME_ACCEPTS_XXH3) != 0;
    unsigned i;
    for (i = 0; i < r->io.n_xxh3_peers; i++) {
        if (r->io.xxh3_peers[i] == id) {
            break;
        }
    }
    if (i < r->io.n_xxh3_peers) {
        if (!accepts) { /* e.g. restarted with an older release */
            r->io.xxh3_peers[i] = r->io.xxh3_peers[--r->io.n_xxh3_peers];
        }
        return;
    }
    if (!accepts || r->io.n_xxh3_peers >= REPL_CAPS_MAX) {
        return; /* past the bound: XXH32 frames, which every peer takes */
    }
    if (r->io.n_xxh3_peers == r->io.cap_xxh3_peers) {
        unsigned cap = r->io.cap_xxh3_peers ? 2 * r->io.cap_xxh3_peers : 8;
        uint64_t *p = tern_realloc(r->io.xxh3_peers, cap * sizeof *p);
        if (p == NULL) {
            return; /* XXH32 frames until a later frame finds memory */
        }
        r->io.xxh3_peers = p;
        r->io.cap_xxh3_peers = cap;
    }
    r->io.xxh3_peers[r->io.n_xxh3_peers++] = id;
}

/* Submit one part of g. */
static int send_part(struct repl *r,
                     struct send_group *g,
                     uint64_t peer_id,
                     const char *addr,
                     struct repl_frame *f)
{
    struct send_req *s = tern_calloc(1, sizeof *s);
    char xaddr[REPL_WIRE_ADDR_MAX + 1];
    int rv;
    if (s == NULL) {
        return -ENOMEM;
    }
    s->xs.data = s;
    s->g = g;
    /* A configuration address may carry the member's META after a ','
     * (repl.h, "Membership"): the xport gets the raft address only. */
    repl_member_raft_addr(addr, xaddr, sizeof xaddr);
    rv = xport_send_flags(r->xport, &s->xs, peer_id, xaddr, f->iov, f->n_iov,
                          repl_peer_xxh3(r, peer_id) ? XPORT_SEND_XXH3 : 0,
                          send_done);
    if (rv != 0) {
        tern_free(s);
        return rv;
    }
    g->pending++;
    return 0;
}

/* All parts submitted (at least one): from now on the last completion
 * finishes the group. */
static void group_seal(struct repl *r, struct send_group *g)
{
    g->sealed = true;
    tern_list_push(&r->io.sends, &g->link);
}

int repl_io_send_frame(struct repl *r,
                       uint64_t peer_id,
                       const char *addr,
                       struct repl_frame *f)
{
    struct send_group *g = group_new(r, NULL, NULL);
    int rv;
    if (g == NULL) {
        return -ENOMEM;
    }
    rv = send_part(r, g, peer_id, addr, f);
    if (rv != 0) {
        tern_free(g);
        return rv;
    }
    group_seal(r, g);
    return 0;
}

static int raft_code(int rv)
{
    return rv == -ENOMEM ? RAFT_NOMEM : RAFT_NOCONNECTION;
}

/* Send an AppendEntries as parts that each fit max (see the top of the
 * file). Returns a RAFT_* code; on non-zero nothing was submitted. */
static int send_append_entries(struct repl *r,
                               struct send_group *g,
                               const struct raft_message *m,
                               size_t max)
{
    const struct raft_append_entries *a = &m->append_entries;
    unsigned off = 0;
    unsigned parts = 0;
    int rv;

    do {
        struct raft_message part = *m;
        struct raft_append_entries *pa = &part.append_entries;
        struct repl_frame f;
        unsigned n_sent = 0;
        uint64_t last;

        pa->entries = a->n_entries > 0 ? a->entries + off : NULL;
        pa->n_entries = a->n_entries - off;
        pa->prev_log_index = a->prev_log_index + off;
        pa->prev_log_term =
            off == 0 ? a->prev_log_term : a->entries[off - 1].term;
        rv = repl_codec_encode(r->id, r->address,
                               repl_frame_flags(r, m->server_id), &part, max,
                               &f, &n_sent);
        if (rv == 0) {
            last = pa->prev_log_index + n_sent;
            if (n_sent < pa->n_entries || pa->leader_commit > last) {
                /* Only a prefix fits, or the commit needs its clamp:
                 * encode again (headers only; payloads are borrowed). */
                repl_frame_release(&f);
                pa->n_entries = n_sent;
                if (pa->leader_commit > last) {
                    pa->leader_commit = last;
                }
                rv = repl_codec_encode(r->id, r->address,
                                       repl_frame_flags(r, m->server_id), &part,
                                       max, &f, &n_sent);
            }
        }
        if (rv != 0) {
            (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg,
                           "encode: %s", tern_strerror(rv));
            rv = rv == -ENOMEM ? RAFT_NOMEM : RAFT_TOOBIG;
            break;
        }
        rv = send_part(r, g, m->server_id, m->server_address, &f);
        repl_frame_release(&f);
        if (rv != 0) {
            (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg,
                           "xport send: %s", tern_strerror(rv));
            rv = raft_code(rv);
            break;
        }
        parts++;
        off += n_sent;
    } while (off < a->n_entries);

    if (parts == 0) {
        return rv;
    }
    if (parts > 1) {
        r->io.ae_split++;
        r->io.ae_parts += parts;
    }
    if (rv != 0 && g->status == 0) {
        g->status = TERN_ENOCONN; /* a prefix went out: raft probes */
    }
    return 0;
}

static int io_send(struct raft_io *io,
                   struct raft_io_send *req,
                   const struct raft_message *message,
                   raft_io_send_cb cb)
{
    struct repl *r = outer_repl(io);
    struct raft_message copy;
    const struct raft_message *m;
    struct send_group *g;
    size_t max = xport_max_message(r->xport);
    int rv;

    if (r->failed != 0 || r->closing) {
        return RAFT_NOCONNECTION;
    }
    m = repl_guard_send(r, message, &copy);
    repl_lost_sent(r, m);
    /* Stage stamps before the hand-off: a doorbell may let the peer run
     * before we do again. */
    if (m->type == RAFT_IO_APPEND_ENTRIES && m->append_entries.n_entries > 0) {
        repl_lat_posted(
            r, m->append_entries.prev_log_index + m->append_entries.n_entries);
    } else if (m->type == RAFT_IO_APPEND_ENTRIES_RESULT &&
               m->append_entries_result.rejected == 0) {
        repl_lat_f_post(r, m->append_entries_result.last_log_index);
    }
    g = group_new(r, req, cb);
    if (g == NULL) {
        return RAFT_NOMEM;
    }
    if (r->io.quiet_results && m->type == RAFT_IO_APPEND_ENTRIES_RESULT) {
        /* The answer to deliver_hold's message: not sent, completed by
         * run_deferred (never inside send). */
        g->sealed = true;
        tern_list_push(&r->io.null_sends, &g->link);
        if (r->io.idle_init && !r->io.idle_closed) {
            uv_idle_start(&r->io.idle, idle_cb);
        }
        return 0;
    }
    if (m->type == RAFT_IO_APPEND_ENTRIES) {
        rv = send_append_entries(r, g, m, max);
        if (rv == 0 && repl_guard_force_probe(r, m->server_id) &&
            g->status == 0) {
            g->status = TERN_ENOCONN; /* guard.c item 10: probe */
        }
    } else {
        struct repl_frame f;
        unsigned n_sent;
        rv = repl_codec_encode(r->id, r->address,
                               repl_frame_flags(r, m->server_id), m, max, &f,
                               &n_sent);
        if (rv != 0) {
            (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg,
                           "encode: %s", tern_strerror(rv));
            rv = rv == -ENOMEM ? RAFT_NOMEM : RAFT_TOOBIG;
        } else {
            rv = send_part(r, g, m->server_id, m->server_address, &f);
            repl_frame_release(&f);
            if (rv != 0) {
                (void)snprintf(r->io.outer.errmsg, sizeof r->io.outer.errmsg,
                               "xport send: %s", tern_strerror(rv));
                rv = raft_code(rv);
            }
        }
    }
    if (rv != 0) {
        tern_free(g);
        return rv;
    }
    group_seal(r, g);
    return 0;
}

/* Hold an AppendEntries' commit index back from the core
 * (see the top of the file). Returns true if held. */
static bool hold_commit(struct repl *r, struct repl_wire *w)
{
    struct raft_append_entries *a = &w->msg.append_entries;
    uint64_t last = a->prev_log_index + a->n_entries;
    const char *addr =
        w->msg.server_address != NULL ? w->msg.server_address : "";
    /* An address that does not fit whole (the codec bounds it, so never)
     * is not held: the commit then goes to the core as it came. */
    if (w->msg.type != RAFT_IO_APPEND_ENTRIES || a->n_entries == 0 ||
        last < r->io.next_index || a->leader_commit <= r->raft.commit_index ||
        strlen(addr) >= sizeof r->io.hold.leader_addr) {
        return false;
    }
    r->io.hold.index = last;
    r->io.hold.term = a->term;
    r->io.hold.commit = a->leader_commit;
    r->io.hold.leader_id = w->msg.server_id;
    (void)snprintf(r->io.hold.leader_addr, sizeof r->io.hold.leader_addr, "%s",
                   addr); /* fits: checked above */
    a->leader_commit = r->raft.commit_index;
    return true;
}

void repl_io_deliver(struct repl *r, struct repl_wire *w)
{
    struct repl_catch_probe catch;
    bool held;
    if (r->closing || r->failed != 0 || r->io.recv_cb == NULL) {
        repl_wire_release(w);
        return;
    }
    repl_lost_recv(r, &w->msg);
    repl_catch_note(r, &w->msg, &catch);
    if (!repl_guard_recv(r, &w->msg)) {
        repl_wire_release(w);
        return;
    }
    held = hold_commit(r, w);
    if (w->msg.type == RAFT_IO_APPEND_ENTRIES &&
        w->msg.append_entries.n_entries > 0) {
        repl_lat_f_core(r, w->msg.append_entries.prev_log_index +
                               w->msg.append_entries.n_entries);
    } else if (w->msg.type == RAFT_IO_APPEND_ENTRIES_RESULT &&
               w->msg.append_entries_result.rejected == 0) {
        repl_lat_resulted(r, w->msg.append_entries_result.last_log_index);
    }
    /* Item 12 (guard.c): what accepting it matches, for its answer. */
    if (w->msg.type == RAFT_IO_APPEND_ENTRIES) {
        r->guard.deliv_set = true;
        r->guard.deliv_term = w->msg.append_entries.term;
        r->guard.deliv_last = w->msg.append_entries.prev_log_index +
                              w->msg.append_entries.n_entries;
    } else if (w->msg.type == RAFT_IO_INSTALL_SNAPSHOT) {
        r->guard.deliv_set = true;
        r->guard.deliv_term = w->msg.install_snapshot.term;
        r->guard.deliv_last = w->msg.install_snapshot.last_index;
    }
    /* raft takes ownership of the entries array/batch and snapshot data. */
    r->io.recv_cb(&r->io.outer, &w->msg);
    r->guard.deliv_set = false;
    repl_lost_delivered(r);
    repl_catch_delivered(r, &catch);
    if (held) {
        if (r->io.next_index <= r->io.hold.index) {
            r->io.hold.index = 0; /* rejected: nothing appended */
        } else {
            r->io.hold.gen = r->io.truncate_gen;
        }
    }
    if (r->durability == REPL_DURABILITY_MEMORY && !r->closing &&
        (!tern_list_empty(&r->io.unacked) || r->io.hold.index != 0)) {
        (void)repl_io_run_deferred(r); /* answer now, then the hold */
    } else if (held && !r->closing) {
        deliver_hold(r); /* disk mode: apply while the append is written */
    }
    repl_lat_poll(r);
    repl_poll(r);
}

/* A member of the configuration (or of the configured peers) other than
 * ourselves. */
static bool known_sender(struct repl *r, uint64_t id)
{
    if (id == r->id) {
        return false;
    }
    for (unsigned i = 0; i < r->n_peers; i++) {
        if (r->peers[i].id == id) {
            return true;
        }
    }
    /* A joining node that has no configuration yet cannot know who leads
     * now (members may have changed since its [peers] were written): it
     * takes any sender the xport let through (peer authentication, when
     * on, proved a node of the cluster), and from its first
     * configuration on, the members it lists. */
    if (r->join && r->raft.configuration.n == 0) {
        return true;
    }
    /* A member added since the last tick (member.c). */
    if (repl_peers_sync(r) != 0) {
        return false;
    }
    for (unsigned i = 0; i < r->n_peers; i++) {
        if (r->peers[i].id == id) {
            return true;
        }
    }
    return false;
}

/* The term a Raft message is sent in. */
static uint64_t msg_term(const struct raft_message *m)
{
    switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES:
        return m->append_entries.term;
    case RAFT_IO_APPEND_ENTRIES_RESULT:
        return m->append_entries_result.term;
    case RAFT_IO_REQUEST_VOTE:
        return m->request_vote.term;
    case RAFT_IO_REQUEST_VOTE_RESULT:
        return m->request_vote_result.term;
    case RAFT_IO_INSTALL_SNAPSHOT:
        return m->install_snapshot.term;
    case RAFT_IO_TIMEOUT_NOW:
        return m->timeout_now.term;
    default:
        return 0;
    }
}

/* The bounds of "Refused messages" (top of the file). */
static bool term_sane(const struct repl *r, const struct raft_message *m)
{
    uint64_t t = msg_term(m);
    uint64_t carried = 0; /* the largest other term the message holds */
    if (t >= REPL_TERM_MAX ||
        (t > r->io.term && t - r->io.term > r->io.max_term_jump)) {
        return false;
    }
    switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES:
        carried = m->append_entries.prev_log_term;
        for (unsigned i = 0; i < m->append_entries.n_entries; i++) {
            carried = TERN_MAX(carried, m->append_entries.entries[i].term);
        }
        break;
    case RAFT_IO_REQUEST_VOTE:
        carried = m->request_vote.last_log_term;
        break;
    case RAFT_IO_INSTALL_SNAPSHOT:
        carried = m->install_snapshot.last_term;
        break;
    case RAFT_IO_TIMEOUT_NOW:
        carried = m->timeout_now.last_log_term;
        break;
    default:
        break;
    }
    return carried <= t;
}

void repl_xport_recv(void *arg, uint64_t from, const void *buf, size_t len)
{
    struct repl *r = arg;
    struct repl_wire w;
    int rv;

    if (r == NULL || r->closing || r->failed != 0 || r->io.recv_cb == NULL) {
        return;
    }
    repl_lat_f_recv(r);
    rv = repl_codec_decode(buf, len, &w);
    if (rv != 0) {
        r->io.bad_frames++;
        return;
    }
    if (w.sender_id != from) {
        r->io.bad_frames++;
        repl_wire_release(&w);
        return;
    }
    if (!known_sender(r, from)) {
        r->io.unknown_senders++;
        r->io.unknown_from = from;
        repl_wire_release(&w);
        return;
    }
    repl_peer_learn(r, from, w.flags);
    if (w.type != REPL_WIRE_BULK_REQ && w.type != REPL_WIRE_BULK_DATA &&
        !term_sane(r, &w.msg)) {
        r->io.terms_refused++;
        r->io.refused_term = msg_term(&w.msg);
        r->io.refused_from = from;
        repl_wire_release(&w);
        return;
    }
    if ((w.type == RAFT_IO_REQUEST_VOTE || w.type == RAFT_IO_TIMEOUT_NOW) &&
        !repl_member_may_vote(r)) {
        /* Not a voter, or rejoining after a loss (repl.h, "Votes"): no
         * vote, and no candidacy on a leader's TimeoutNow either. */
        r->member.votes_withheld++;
        repl_wire_release(&w);
        return;
    }
    switch (w.type) {
    case REPL_WIRE_BULK_REQ:
    case REPL_WIRE_BULK_DATA:
        repl_bulk_on_frame(r, &w);
        break;
    case RAFT_IO_INSTALL_SNAPSHOT:
        repl_bulk_on_install(r, &w);
        break;
    default:
        repl_io_deliver(r, &w);
        break;
    }
}

void repl_io_setup(struct repl *r, bool wait_truncate)
{
    struct raft_io *o = &r->io.outer;
    memset(o, 0, sizeof *o);
    o->version = r->inner->async_work != NULL ? 2 : 1;
    o->init = io_init;
    o->close = io_close;
    o->load = io_load;
    o->start = io_start;
    o->bootstrap = io_bootstrap;
    o->recover = io_recover;
    o->set_term = io_set_term;
    o->set_vote = io_set_vote;
    o->send = io_send;
    o->append = io_append;
    o->truncate = io_truncate;
    o->snapshot_put = io_snapshot_put;
    o->snapshot_get = io_snapshot_get;
    o->time = io_time;
    o->random = io_random;
    o->async_work = r->inner->async_work != NULL ? io_async_work : NULL;
    r->inner->data = r;
    tern_list_init(&r->io.appends);
    tern_list_init(&r->io.unacked);
    tern_list_init(&r->io.sends);
    tern_list_init(&r->io.null_sends);
    tern_list_init(&r->io.inner_pending);
    r->io.next_index = 1;
    r->io.wait_truncate = wait_truncate;
    r->io.check_segments = wait_truncate; /* raft_uv, in r->data_dir */
}

void repl_io_free(struct repl *r)
{
    tern_free(r->io.xxh3_peers);
    r->io.xxh3_peers = NULL;
    r->io.n_xxh3_peers = r->io.cap_xxh3_peers = 0;
    tern_free(r->io.runs);
    r->io.runs = NULL;
    r->io.n_runs = 0;
    r->io.cap_runs = 0;
}
