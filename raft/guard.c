/*
 * raft/guard.c: leader barrier, role polling and the adapter-side
 * mitigations of libraft 0.15.0 safety bugs. Everything here only DROPS
 * (or neutralises) messages, LOWERS advertised/learned indexes, DELAYS
 * timer ticks, or (item 6) rewrites a message into an equivalent one:
 * raft tolerates message loss and late timers, so none of it can break
 * safety; the cost is liveness while the condition holds.
 *
 * 1. Figure 8 / Raft 5.4.2 (#220, fixed upstream by #336 in 0.17.1). The
 *    0.15 leader commits by counting replicas, with no "entry is from my
 *    term" check: replicationQuorum(r, r->last_stored) (called after every
 *    AppendEntries result and every leader append completion) commits
 *    index = the leader's last_stored once a majority has
 *    match_index >= last_stored. On winning an election we submit
 *    raft_barrier(); its index b is the first entry of the new term (0.15
 *    appends no no-op; repl_propose is refused until the barrier applied,
 *    so nothing precedes it). On the leader a SUCCESSFUL AppendEntries
 *    result reaches the core unchanged only once our own durable index
 *    (io.c, from append completions) is >= b; before that it is
 *    neutralised: its last_log_index is set to 0, so the core still counts
 *    the contact (the leader does not step down for lack of quorum contact
 *    while its barrier write is slow) but progressMaybeUpdate() finds
 *    nothing new, so neither match_index nor the commit index moves
 *    (equivalent to dropping it, for safety). Rejections always pass.
 *    The newest neutralised result per peer is kept and handed to the
 *    core once our durable index reaches b (repl_guard_release: after
 *    that append completes, and on ticks): the answer to the new
 *    leader's first heartbeat is what moves 0.15's progress from probe to
 *    pipeline, so without it the barrier would wait for the next
 *    heartbeat interval before going out (HB ms more before a new leader
 *    is writable). A late copy of a message the follower sent: safe.
 *    Why this suffices: results pass only when durable >= b, and then the
 *    core's last_stored >= b too (we update durable_index right before the
 *    append callback that advances last_stored; the leader's own appends
 *    of this term start at b and complete in order after any older one),
 *    so every quorum check evaluates an index >= b, i.e. a current-term
 *    entry, and committing it commits older entries exactly as Raft
 *    allows. Before that, no follower has match_index > 0 in this term, so
 *    a quorum check at an old-term last_stored (an append of an earlier
 *    term completing late) finds no majority.
 *    Deviation from the textbook form of this guard, which also asks
 *    result.last_log_index >= b:
 *    under 0.15's quorum-at-last_stored rule that condition adds nothing
 *    once durable >= b (a match_index < b never counts for an index >= b)
 *    and it breaks liveness: a follower whose InstallSnapshot turns out to
 *    be a no-op answers success with its own last index < b, and 0.15
 *    keeps that follower's progress in SNAPSHOT state (ignoring its
 *    rejections) until a success arrives: found by the chaos tests, and
 *    by jepsen (F1: a new leader whose only live follower needed a
 *    snapshot never committed its barrier; F3: a follower ahead of the
 *    snapshot was ignored until the install timeout; both with a ternd
 *    built before this deviation). Tested: test_cluster.c
 *    "new_leader_with_snapshot_follower_becomes_writable",
 *    "follower_ahead_of_snapshot_catches_up_without_timeout".
 *    Reset on every role or term change. Tested: test_cluster.c
 *    "figure8_*" (the Raft paper's Figure 8 schedule: committed, applied and
 *    later overwritten without the guard, never committed with it) and the
 *    chaos tests (no index ever applies two payloads, acknowledged writes
 *    survive).
 * 2. Writability: writable only after the barrier's callback with status 0
 *    (index >= b by construction), so a new leader never acknowledges
 *    writes on top of a log whose older tail it has not committed.
 *    Tested: test_cluster.c "barrier_gates_writes".
 * 3. #429 RequestVote advertises the unpersisted last index/term: outgoing
 *    RequestVote (and pre-vote) is rewritten to the durable last index and
 *    its term when those are lower. That only makes the candidate look less
 *    up to date (never grants a vote the original would not get), and it
 *    advertises what survives a crash. Not rewritten if the term of the
 *    durable index is unknown. Tested: test_cluster.c "vote_rewrite".
 * 4. #467 / 4fbd3c0: a follower converting to candidate (election timeout)
 *    while entries or an installed snapshot are still being persisted.
 *    While a non-leader has appends or an install in flight we withhold
 *    raft's tick (only election timers run on non-leaders' ticks; the
 *    conversion then happens on the first tick after the writes settle,
 *    which is the upstream fix's behaviour; also while a bulk fetch runs,
 *    bulk.c), and we drop incoming TimeoutNow while an install is in
 *    flight. A TimeoutNow that comes while appends are in flight is held
 *    and handed to raft on the first tick after they are acknowledged
 *    (repl_guard_tick; dropped after an election timeout or a role
 *    change): 0.15's leader sends it once the target was *sent*
 *    everything (progressIsUpToDate compares next_index), which under
 *    load is before the target has persisted it, and never resends it,
 *    so dropping it made every transfer under load time out.
 *    Tested: test_cluster.c "tick_withheld", "transfer_under_load".
 * 5. #423 commit index ahead of what the follower stores/matches: when an
 *    AppendEntries brings nothing new, 0.15's follower sets commit_index =
 *    min(leader_commit, logLastIndex) at once: past the prefix this message
 *    validated and past what is durable locally (so the FSM may apply an
 *    entry the local log loses in a crash). We clamp leader_commit to
 *    prev_log_index + n_entries (Raft's "index of last new entry") and, if
 *    the message carries nothing beyond what we already submitted, to our
 *    durable index. (With new entries 0.15 already waits for the append and
 *    uses min(leader_commit, last_stored).) Lowering a learned commit index
 *    is always safe; it delays the follower's apply by a heartbeat at most.
 *    Note: the source we could read (a 0.1x-era replication.c) has that
 *    synchronous path; Debian's 0.15.0 did not advance a frozen follower's
 *    commit past its stored index in test_cluster.c
 *    "follower_applies_only_durable_entries" even without the clamp, so
 *    this is defence in depth and that test a regression test.
 * 6. Follower ahead of the leader's snapshot (found by the chaos tests, no
 *    upstream issue known): 0.15's checkLogMatchingProperty rejects an
 *    AppendEntries whose prev_log_index lies below the follower's own
 *    latest snapshot S (its term is unknown there), and the leader only
 *    ever probes downwards, so a follower that snapshotted past the
 *    leader's last snapshot is rejected all the way down and sent the
 *    leader's older snapshot, which 0.15 treats as "already have it"
 *    without moving the leader's progress: stuck forever. We rebase such
 *    a message onto S: prev = S with our snapshot's term, entries <= S
 *    dropped. Sound: S <= our last applied <= commit index, so entry S is
 *    committed and the leader's log holds the same entry (Leader
 *    Completeness), and we check the term when the message carries it.
 *    Tested: test_cluster.c "chaos_*" seeds that got stuck before.
 * 7. Append failure (#466, 0cac59c leader keeps leadership after a failed
 *    disk write): fail-stop, see io.c. Same for a failed FSM apply (fsm.c).
 * 8. Durability modes (repl.h, io.c). Every "durable index" above is, in
 *    the code, acked_index: the last index whose append callback the core
 *    got, i.e. the core's own last_stored. In disk mode it is the durable
 *    index (updated together, right before the callback). In memory mode
 *    it is the memory index, and it has to be: item 1's argument is about
 *    the index the core's quorum check evaluates (last_stored), and what
 *    the core counts as stored in memory mode is the memory index. Using
 *    the disk index there would be unsafe, not just slow: a disk
 *    completion can precede the deferred callback, so disk >= b while the
 *    core's last_stored < b, and a quorum check at an old-term last_stored
 *    could then count followers' results. With acked_index the argument is
 *    unchanged (acked >= b implies the core's last_stored >= b). Items 3
 *    and 5 likewise follow what the mode counts (the memory index: voters
 *    compare in-memory logs anyway, and a memory-mode follower may apply
 *    committed entries it holds in memory); item 4 holds ticks only while
 *    the core still waits for an append callback. status.last_stored
 *    keeps reporting the real disk index.
 * 9. FSM quiet during a bulk fetch / snapshot install (jepsen F2, no
 *    upstream issue: 0.15 keeps taking AppendEntries while it installs,
 *    and our bulk fetch runs before the install reaches it): incoming
 *    AppendEntries are dropped while a fetch is active or an install is
 *    being persisted, so the core learns no commit index and applies
 *    nothing until the snapshot is restored (rules in bulk.c). Dropping
 *    is safe; liveness: the follower is behind anyway, the fetch is
 *    bounded by its stall timer and ticks are held meanwhile (item 4).
 *    Tested: test_cluster.c "bulk_fetch_keeps_fsm_quiet",
 *    "install_already_held_is_not_fetched".
 * 10. A follower that lost entries it acknowledged (memory mode: it
 *    crashed before its disk wrote them, repl.h) restarts with a shorter
 *    log. 0.15's leader keeps its progress in pipeline state with
 *    match_index at what the follower acknowledged, and there treats every
 *    rejection at or below match_index as stale (progressMaybeDecrement),
 *    so the follower never catches up unless a send to it fails while it
 *    is down (then the progress goes to probe). Found by test_durability.c
 *    "memory_mode_single_crash_loses_nothing" once followers answered
 *    sooner. The leader remembers, per peer and term, the highest index
 *    each acknowledged; a rejection whose last_log_index is below it makes
 *    the next AppendEntries to that peer report a failed send (it still
 *    goes out), which is what a dead link does: the core drops the peer
 *    to probe and finds its real end. Only liveness is involved.
 * 11. Disk full (jepsen F5; repl_set_disk_full, from node/disk.c's
 *    alarm). A follower whose file system is full would fail its next
 *    append or apply and fail-stop (items 7, fsm.c), and a restarted node
 *    on a still-full disk fail-stops again. While the alarm is on, an
 *    incoming AppendEntries loses its entries and is delivered as a
 *    heartbeat (clamped by item 5, so entries we already hold are applied
 *    in node/'s reserve), ticks are withheld (io.c: a node that takes no
 *    entries falls behind and must not stand for election; it still
 *    votes) and TimeoutNow is dropped (no leadership for a full node).
 *    Sending fewer entries is always a valid AppendEntries; the leader
 *    keeps probing and the follower catches up once the alarm clears.
 *    Dropping the whole message instead cost the leader its contact with
 *    every full follower: with an entry in flight 0.15 sends a follower
 *    the entry (its empty pipeline heartbeat is rejected and the probe
 *    that follows carries entries), so with every follower full the
 *    leader stepped down after an election timeout and, the full nodes
 *    standing for nothing, the cluster had no leader (not even for reads)
 *    until space came back. The answer to a stripped message claims its
 *    prev_log_index only (item 12). Liveness cost: a full node is as good
 *    as partitioned for writes. Tested: test_cluster.c
 *    "disk_full_follower_takes_no_entries",
 *    "every_follower_full_leader_keeps_leading" and
 *    "full_follower_stale_suffix_never_matches".
 * 12. A follower's success answer claims only what it matched (found in
 *    review). 0.15 answers an AppendEntries with its last_stored, also
 *    past the prefix the message checked (the synchronous path of an
 *    empty or already-held AppendEntries, and an append completing after
 *    the leader changed), and the leader takes min(that, its last index)
 *    as the follower's match: a deposed leader's stale suffix, beyond the
 *    new leader's first heartbeat's prev_log_index, counted as a copy of
 *    the new leader's barrier written there meanwhile, which committed
 *    with one real copy. Each follower keeps the highest index it matched
 *    the leader of a term on (an AppendEntries raft took: an append it
 *    caused or a success answer inside its delivery, prev_log_index +
 *    n_entries; an InstallSnapshot it took: the snapshot's index), and a
 *    success result claims no more in that term, nothing in another
 *    (repl_guard_send). Lowering a match is always safe; it only delays
 *    the leader's view. Tested: test_cluster.c
 *    "late_heartbeat_answer_never_counts_a_stale_suffix" (the barrier
 *    committed with one copy without it) and
 *    "full_follower_stale_suffix_never_matches".
 * Not mitigated: #466's on-disk hole handling inside raft_uv itself; the
 *    ambiguity of LEADERSHIPLOST (clients must dedupe).
 */
#include <errno.h>
#include <string.h>

#include "repl_int.h"

struct repl_barrier_req
{
    struct raft_barrier req;
    struct repl *r;
    uint64_t term;
    bool stale;
};

int repl_guard_init(struct repl *r)
{
    r->guard.enabled = true;
    r->guard.hold_ticks = true;
    r->guard.role = RAFT_UNAVAILABLE;
    r->guard.peer_acks = tern_calloc(r->n_peers, sizeof *r->guard.peer_acks);
    return r->guard.peer_acks != NULL ? 0 : -ENOMEM;
}

void repl_guard_free(struct repl *r)
{
    tern_free(r->guard.peer_acks);
    r->guard.peer_acks = NULL;
}

void repl_set_guard(struct repl *r, bool enabled)
{
    r->guard.enabled = enabled;
}

uint64_t repl_guard_drops(const struct repl *r)
{
    return r->guard.dropped;
}

uint64_t repl_vote_rewrites(const struct repl *r)
{
    return r->guard.vote_rewrites;
}

static enum repl_role role_from_raft(int state)
{
    switch (state) {
    case RAFT_FOLLOWER:
        return REPL_FOLLOWER;
    case RAFT_CANDIDATE:
        return REPL_CANDIDATE;
    case RAFT_LEADER:
        return REPL_LEADER;
    default:
        return REPL_UNAVAILABLE;
    }
}

static void emit(struct repl *r)
{
    if (r->state_cb != NULL && !r->closing) {
        r->state_cb(r->state_arg, role_from_raft(r->guard.role),
                    r->guard.leader_id, r->guard.role_term, r->guard.writable);
    }
}

void repl_update_writable(struct repl *r)
{
    bool w = r->guard.barrier_applied && !r->guard.transferring &&
             r->failed == 0 && r->guard.role == RAFT_LEADER;
    if (w != r->guard.writable) {
        r->guard.writable = w;
        emit(r);
    }
}

void repl_guard_transfer(struct repl *r, bool on, uint64_t term)
{
    if (!on && r->guard.role_term != term) {
        return; /* another term's transfer: the role change reset it */
    }
    r->guard.transferring = on;
    repl_update_writable(r);
}

static void barrier_cb(struct raft_barrier *req, int status)
{
    struct repl_barrier_req *b = req->data;
    struct repl *r = b->r;
    bool stale = b->stale;
    uint64_t term = b->term;
    uint64_t index = req->index;
    if (!stale && r->guard.barrier == b) {
        r->guard.barrier = NULL;
    }
    tern_free(b);
    if (stale || status != 0 || r->closing) {
        return;
    }
    if (r->guard.role == RAFT_LEADER && r->guard.role_term == term &&
        raft_state(&r->raft) == RAFT_LEADER && r->raft.current_term == term &&
        index >= r->guard.barrier_index && r->guard.barrier_index != 0) {
        r->guard.barrier_applied = true;
        repl_update_writable(r);
    }
}

static void submit_barrier(struct repl *r)
{
    struct repl_barrier_req *b = tern_calloc(1, sizeof *b);
    int rv;
    if (b == NULL) {
        return; /* retried on the next tick */
    }
    b->r = r;
    b->term = r->guard.role_term;
    b->req.data = b;
    rv = raft_barrier(&r->raft, &b->req, barrier_cb);
    if (rv != 0) {
        tern_free(b);
        return;
    }
    r->guard.barrier = b;
    r->guard.barrier_index = b->req.index;
}

void repl_poll(struct repl *r)
{
    int role;
    uint64_t term;
    raft_id lid = 0;
    const char *laddr = NULL;
    bool changed = false;

    if (r->closing || !r->io.started || r->core_failing > 0) {
        return; /* inside a step-down: touch nothing (repl_int.h) */
    }
    role = r->failed != 0 ? RAFT_UNAVAILABLE : raft_state(&r->raft);
    if (role == RAFT_UNAVAILABLE && r->failed == 0) {
        /* 0.15 converts to UNAVAILABLE for good on some internal errors
         * (e.g. out of memory while handling a message): report it as a
         * fail-stop so node/ restarts the replica. */
        repl_fail(r, TERN_EINTERNAL);
        return;
    }
    /* 0.15 has no accessor for the current term; struct raft is public in
     * 0.15 (hidden fields came in 0.17). */
    term = r->raft.current_term;
    if (r->failed == 0) {
        raft_leader(&r->raft, &lid, &laddr);
    }
    if (role != r->guard.role || term != r->guard.role_term) {
        if (r->guard.barrier != NULL) {
            r->guard.barrier->stale = true;
            r->guard.barrier = NULL;
        }
        r->guard.writable = false;
        r->guard.barrier_applied = false;
        r->guard.transferring = false;
        r->guard.barrier_index = 0;
        r->guard.role = role;
        r->guard.role_term = term;
        repl_lat_forget(r, 0);
        changed = true;
    }
    if (lid != r->guard.leader_id) {
        r->guard.leader_id = lid;
        changed = true;
    }
    if (role == RAFT_LEADER && r->guard.barrier == NULL &&
        r->guard.barrier_index == 0) {
        submit_barrier(r);
    }
    if (changed) {
        emit(r);
    }
    repl_transfer_poll(r);
}

/* Item 6: rebase an AppendEntries whose prev_log_index lies below our
 * latest snapshot S onto S (see the top of the file). */
static void rebase_below_snapshot(struct repl *r, struct raft_append_entries *a)
{
    uint64_t s = r->io.snap_index;
    uint64_t p = a->prev_log_index;
    if (s == 0 || r->io.snap_term == 0 || p >= s) {
        return;
    }
    if (p + a->n_entries <= s) {
        /* Everything it carries is inside our snapshot. */
        repl_wire_drop_entries(a);
    } else {
        uint64_t k = s - p; /* entries[k - 1] is index s */
        if (a->entries[k - 1].term != r->io.snap_term) {
            return; /* cannot happen for a committed s; leave it to raft */
        }
        memmove(a->entries, a->entries + k,
                (size_t)(a->n_entries - k) * sizeof *a->entries);
        a->n_entries -= (unsigned)k;
    }
    a->prev_log_index = s;
    a->prev_log_term = r->io.snap_term;
    r->guard.ae_rebased++;
}

static struct repl_peer_ack *peer_ack(struct repl *r, uint64_t id)
{
    if (r->guard.peer_acks == NULL) {
        return NULL;
    }
    for (unsigned i = 0; i < r->n_peers; i++) {
        if (r->peers[i].id == id) {
            return &r->guard.peer_acks[i];
        }
    }
    return NULL;
}

/* Item 10: track what each peer acknowledged in this term. */
static void track_result(struct repl *r, const struct raft_message *m)
{
    const struct raft_append_entries_result *res = &m->append_entries_result;
    struct repl_peer_ack *p = peer_ack(r, m->server_id);
    uint64_t term = r->raft.current_term;
    if (p == NULL || raft_state(&r->raft) != RAFT_LEADER || res->term != term) {
        return;
    }
    if (p->term != term) {
        p->term = term;
        p->acked = 0;
        p->probe = false;
    }
    if (res->rejected == 0) {
        if (res->last_log_index > p->acked) {
            p->acked = res->last_log_index;
        }
    } else if (res->last_log_index < p->acked) {
        /* Nothing left (an empty log, or only a bootstrap entry) after
         * it acknowledged more in this term: its log is gone (member.c,
         * "Automatic rejoin"). A shorter but not empty log is no proof:
         * 0.15 followers report their whole log in a success, a tail
         * that a conflict may truncate later. */
        if (res->last_log_index <= 1 && p->acked > 1) {
            repl_member_amnesia(r, m->server_id);
        }
        p->acked = res->last_log_index;
        p->probe = true;
    }
}

bool repl_guard_force_probe(struct repl *r, uint64_t peer_id)
{
    struct repl_peer_ack *p = peer_ack(r, peer_id);
    if (p == NULL || !p->probe) {
        return false;
    }
    p->probe = false;
    r->guard.forced_probes++;
    return true;
}

bool repl_guard_recv(struct repl *r, struct raft_message *m)
{
    switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
        const struct raft_append_entries_result *res =
            &m->append_entries_result;
        uint64_t b;
        track_result(r, m);
        if (!r->guard.enabled || res->rejected != 0) {
            return true;
        }
        repl_poll(r);
        if (raft_state(&r->raft) != RAFT_LEADER) {
            return true; /* the core ignores it anyway */
        }
        b = r->guard.barrier_index;
        if (b == 0 || r->io.acked_index < b) {
            /* Neutralise rather than drop: with last_log_index 0 the
             * core still records contact with the follower (so the
             * leader does not step down for lack of quorum contact
             * while its own barrier write is slow), but
             * progressMaybeUpdate() sees nothing new, so neither
             * match_index nor the commit index moves. */
            struct repl_peer_ack *p = peer_ack(r, m->server_id);
            if (p != NULL && b != 0 && res->term == r->raft.current_term) {
                p->held_term = res->term; /* repl_guard_release */
                p->held_last = res->last_log_index;
            }
            m->append_entries_result.last_log_index = 0;
            r->guard.dropped++;
            return true;
        }
        return true;
    }
    case RAFT_IO_APPEND_ENTRIES: {
        struct raft_append_entries *a = &m->append_entries;
        uint64_t last_new;
        if (r->bulk.fetch.active || r->io.install_index != 0) {
            r->guard.ae_held_off++; /* item 9 */
            return false;
        }
        if (r->disk_full && a->n_entries > 0) {
            /* Item 11: delivered as a heartbeat, so the leader keeps its
             * contact with us; its answer claims prev_log_index only
             * (item 12). */
            r->guard.ae_disk_full_dropped++;
            repl_wire_drop_entries(a);
        }
        rebase_below_snapshot(r, a);
        last_new = a->prev_log_index + a->n_entries;
        if (a->leader_commit > last_new) {
            a->leader_commit = last_new;
        }
        /* Nothing new for our log: 0.15 takes its synchronous path and
         * commits up to logLastIndex without waiting for the disk. */
        if (last_new < r->io.next_index &&
            a->leader_commit > r->io.acked_index) {
            a->leader_commit = r->io.acked_index;
        }
        return true;
    }
    case RAFT_IO_TIMEOUT_NOW:
        if (r->io.install_index != 0 || r->disk_full) {
            r->guard.timeout_now_dropped++;
            return false;
        }
        if (r->io.n_unacked != 0) {
            /* 0.15's leader sends TimeoutNow once everything is *sent*
             * (progressIsUpToDate: next_index), not acknowledged, and
             * never again: hold it until our appends are durable rather
             * than let the transfer time out (repl_guard_tick). */
            size_t alen =
                m->server_address != NULL ? strlen(m->server_address) : 0;
            if (alen < sizeof r->guard.held_timeout_now.addr) {
                r->guard.held_timeout_now.set = true;
                r->guard.held_timeout_now.from = m->server_id;
                r->guard.held_timeout_now.at = r->raft.io->time(r->raft.io);
                memcpy(r->guard.held_timeout_now.addr,
                       alen > 0 ? m->server_address : "", alen);
                r->guard.held_timeout_now.addr[alen] = '\0';
                r->guard.held_timeout_now.msg = m->timeout_now;
            } else {
                r->guard.timeout_now_dropped++;
            }
            return false;
        }
        return true;
    default:
        return true;
    }
}

const struct raft_message *repl_guard_send(struct repl *r,
                                           const struct raft_message *m,
                                           struct raft_message *copy)
{
    uint64_t d = r->io.acked_index;
    uint64_t t;
    if (m->type == RAFT_IO_APPEND_ENTRIES_RESULT &&
        m->append_entries_result.rejected == 0 && r->guard.enabled) {
        /* Item 12: no more than what we matched in the result's term. */
        const struct raft_append_entries_result *res =
            &m->append_entries_result;
        uint64_t cap;
        repl_guard_matched(r); /* a success answer inside a delivery */
        cap = r->guard.match_term == res->term ? r->guard.match_cap : 0;
        if (res->last_log_index > cap) {
            *copy = *m;
            copy->append_entries_result.last_log_index = cap;
            r->guard.results_capped++;
            return copy;
        }
        return m;
    }
    if (m->type != RAFT_IO_REQUEST_VOTE ||
        m->request_vote.last_log_index <= d) {
        return m;
    }
    t = repl_io_term_of(r, d);
    if (d != 0 && t == 0) {
        return m;
    }
    *copy = *m;
    copy->request_vote.last_log_index = d;
    copy->request_vote.last_log_term = t;
    r->guard.vote_rewrites++;
    return copy;
}

void repl_guard_matched(struct repl *r)
{
    if (!r->guard.deliv_set) {
        return;
    }
    if (r->guard.match_term != r->guard.deliv_term) {
        r->guard.match_term = r->guard.deliv_term;
        r->guard.match_cap = 0;
    }
    if (r->guard.deliv_last > r->guard.match_cap) {
        r->guard.match_cap = r->guard.deliv_last;
    }
}

void repl_guard_release(struct repl *r)
{
    uint64_t term = r->raft.current_term;
    uint64_t b = r->guard.barrier_index;
    if (r->guard.releasing || b == 0 || r->io.acked_index < b || r->closing ||
        r->failed != 0 || r->io.recv_cb == NULL ||
        raft_state(&r->raft) != RAFT_LEADER) {
        return;
    }
    r->guard.releasing = true;
    for (unsigned i = 0; i < r->n_peers; i++) {
        struct repl_peer_ack *p = &r->guard.peer_acks[i];
        struct raft_message m;
        if (p->held_term == 0) {
            continue;
        }
        if (p->held_term != term || raft_state(&r->raft) != RAFT_LEADER) {
            p->held_term = 0;
            continue;
        }
        memset(&m, 0, sizeof m);
        m.type = RAFT_IO_APPEND_ENTRIES_RESULT;
        m.server_id = r->peers[i].id;
        m.server_address = r->peers[i].address;
        m.append_entries_result.term = p->held_term;
        m.append_entries_result.rejected = 0;
        m.append_entries_result.last_log_index = p->held_last;
        p->held_term = 0;
        r->guard.results_released++;
        /* A late copy of what the follower sent: the core treats it as
         * any delayed message (its term and index are checked). */
        r->io.recv_cb(&r->io.outer, &m);
    }
    r->guard.releasing = false;
    repl_poll(r);
}

void repl_guard_tick(struct repl *r)
{
    repl_guard_release(r);
    struct raft_message m;
    if (!r->guard.held_timeout_now.set) {
        return;
    }
    if (r->raft.io->time(r->raft.io) - r->guard.held_timeout_now.at >
            r->election_timeout_ms ||
        raft_state(&r->raft) != RAFT_FOLLOWER) {
        r->guard.held_timeout_now.set = false; /* stale: the leader gave up */
        r->guard.timeout_now_dropped++;
        return;
    }
    if (r->io.n_unacked != 0 || r->io.install_index != 0 || r->disk_full ||
        r->closing || r->failed != 0 || r->io.recv_cb == NULL) {
        return;
    }
    r->guard.held_timeout_now.set = false;
    memset(&m, 0, sizeof m);
    m.type = RAFT_IO_TIMEOUT_NOW;
    m.server_id = r->guard.held_timeout_now.from;
    m.server_address = r->guard.held_timeout_now.addr;
    m.timeout_now = r->guard.held_timeout_now.msg;
    r->guard.timeout_now_delivered++;
    /* raft checks again that the sender is our leader, the term and that
     * our log matches the leader's last entry. */
    r->io.recv_cb(&r->io.outer, &m);
}
