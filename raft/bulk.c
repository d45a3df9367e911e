/*
 * raft/bulk.c: bulk catch-up before an InstallSnapshot reaches libraft.
 *
 * libraft 0.15 sends a snapshot whole, in one message, from one in-RAM
 * buffer. tern's snapshot data is only a small manifest of the FSM state
 * (repl_fsm.snapshot); the state itself is a byte stream the follower
 * fetches from the snapshot's sender over the same xport, with two extra
 * frame types (layout in codec.c):
 *
 *   follower                                  leader (sender of the snapshot)
 *   InstallSnapshot(manifest) arrives, held
 *   bulk_range(manifest) -> [from, to)
 *   BULK_REQ {snap, pos, len<=chunk} x window ->
 *                                     <- BULK_DATA {snap, pos, bytes}
 * (bulk_read) bulk_write(pos, bytes); more BULK_REQs
 *   ... pos == to: deliver the held InstallSnapshot to libraft, which
 *   persists it (snapshot_put) and calls restore(manifest).
 *
 * Failure modes: a BULK_DATA out of order (a loss) is ignored and the stall
 * timer (bulk_stall_ms without progress) re-requests from the write
 * position, up to 3 times; then, or on an error status, a write error or a
 * newer snapshot, the held message is dropped. libraft's leader then sends
 * the snapshot again after install_snapshot_timeout (repl.c: a few
 * seconds; the manifest is small, so resends are cheap), and bulk_range
 * says what is still missing: bytes already written are kept. A resend of
 * the snapshot being fetched is ignored. Only one fetch at a time, and no
 * InstallSnapshot reaches libraft while it still persists a previous one
 * (0.15 asserts, compiled out, that only one install is in flight).
 *
 * The bytes land in the FSM's own log (node/: the index commit log), past
 * what it has indexed, so nothing else may advance the FSM from the start
 * of a fetch until libraft restored the snapshot (jepsen F2: libraft
 * applied entries during a fetch; idx_apply then found un-indexed bulk
 * bytes, or bulk writes found the log moved: fail-stop). Four rules:
 *   1. No AppendEntries reaches libraft while a fetch is active or an
 *      install is being persisted (guard.c item 9): without them the core
 *      learns no commit index and appends nothing. Dropping is safe (Raft
 *      tolerates loss); the leader keeps sending heartbeats.
 *   2. A fetch starts (bulk_range, first requests) only once no append is
 *      in flight (an append completing can advance the commit index and
 *      apply); until then the InstallSnapshot is held and the start is
 *      retried on every tick.
 *   3. An InstallSnapshot that 0.15 treats as a no-op (our latest snapshot
 *      is at least as recent, or our log holds its last index with a term
 *      >= its last term: "have more recent snapshot" / "have all entries";
 *      then it calls no restore) is delivered at once, without a fetch:
 *      fetched bytes would stay un-indexed. The core then answers success
 *      with the snapshot index and its entries are applied as usual.
 *   4. The held InstallSnapshot reaches libraft only when the core can take
 *      it: 0.15 ignores one (no answer; the leader waits for
 *      install_snapshot_timeout) while it takes or stores a snapshot of its
 *      own, and the fetched bytes would then sit un-indexed with AEs
 *      flowing again. A complete fetch (or a no-op install) is held,
 *      AEs still dropped, and delivered on a later tick.
 * Staging the fetched bytes outside the log (adopted by restore only)
 * would also do, but needs an index/ format change; rules 1-4 keep the
 * FSM untouched while the follower is anyway useless (it is behind).
 * Aborted fetches (the F2 "known gap", closed): the bytes of an aborted
 * fetch stay in the log so that a resend only fetches the rest. If libraft
 * instead applies entries (a new leader still holds them in its log, or
 * the follower learns the commit of entries it holds), the FSM drops the
 * un-adopted bytes first: index/'s idx_apply truncates its log back to
 * the indexed end (idx_bulk_discard, durable) instead of refusing, which
 * made the replica fail-stop. Decision: drop lazily at that apply, in
 * index/, rather than at the abort (needs no new repl_fsm callback, and a
 * prompt resend still reuses the bytes) or staging outside the log.
 *
 * Start-up restore from a peer (storage damage): libraft 0.15
 * restores the node's latest snapshot inside raft_start. If the FSM lacks
 * bytes that snapshot covers (index/ cut its commit log at a damaged
 * record, and the raft log no longer holds those entries), fsm.c defers
 * the restore instead of failing the start: repl_bulk_restore_later holds
 * the manifest as a fetch "from ourselves" (held.sender_id == our id;
 * peer_id is the peer asked), which fetches the missing range from the
 * peers in turn (any peer: the log is identical on every node) and then
 * calls the FSM's restore itself. libraft believes the snapshot restored
 * meanwhile; nothing is applied over the gap because, as for any fetch,
 * AppendEntries are dropped and election ticks withheld while
 * fetch.active (the node does not campaign; its raft log and vote are
 * intact, so answering votes stays safe), and fsm.c fail-stops an apply
 * that would still come (e.g. after a leadership transfer to this node)
 * rather than skip the missing entries. An InstallSnapshot not newer
 * than that snapshot is handed to libraft (which ignores it) without
 * touching the fetch; a newer one replaces it (its restore covers more).
 * A peer that fails or stalls is replaced by the next one; a restore that
 * finds copied bytes damaged (TERN_ECORRUPT) fetches again; any other
 * restore error fail-stops the replica.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "repl_int.h"

#define BULK__MAX_RETRIES 3
#define BULK__CHUNK       ((uint64_t)1 << 20)
#define BULK__WINDOW      4
#define BULK__STALL_MS    5000

void repl_bulk_setup(struct repl *r)
{
    r->bulk.chunk = BULK__CHUNK;
    r->bulk.window = BULK__WINDOW;
    r->bulk.stall_ms = BULK__STALL_MS;
}

static uint64_t now_ms(struct repl *r)
{
    return r->inner->time(r->inner);
}

/* The fetch is a start-up restore (see top), not a held InstallSnapshot. */
static bool is_local(const struct repl *r)
{
    return r->bulk.fetch.active && r->bulk.fetch.held.sender_id == r->id;
}

bool repl_bulk_restore_pending(const struct repl *r)
{
    return is_local(r);
}

/* The peer after the current one (never ourselves), for a local fetch. */
static void next_peer(struct repl *r)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    unsigned cur = r->n_peers;
    for (unsigned i = 0; i < r->n_peers; i++) {
        if (r->peers[i].id == f->peer_id) {
            cur = i;
        }
    }
    for (unsigned k = 1; k <= r->n_peers; k++) {
        const struct repl_peer *p = &r->peers[(cur + k) % r->n_peers];
        if (p->id != r->id) {
            f->peer_id = p->id;
            (void)snprintf(f->peer_addr, sizeof f->peer_addr, "%s", p->address);
            return;
        }
    }
}

/* Start a local fetch over: from the next peer, range taken again on the
 * next tick. */
static void local_retry(struct repl *r)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    next_peer(r);
    f->started = false;
    f->in_flight = 0;
    f->retries = 0;
    f->last_progress_ms = now_ms(r);
}

/* A fetch failed: a local one moves on to the next peer, a held
 * InstallSnapshot is dropped (the leader resends it). */
static void give_up(struct repl *r)
{
    if (is_local(r)) {
        local_retry(r);
        return;
    }
    repl_bulk_abort(r);
}

int repl_bulk_restore_later(struct repl *r, struct raft_buffer *manifest)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    if (r->fsm.bulk_range == NULL || r->n_peers < 2 || f->active) {
        return TERN_EINVAL;
    }
    memset(f, 0, sizeof *f);
    f->active = true;
    f->held.type = RAFT_IO_INSTALL_SNAPSHOT;
    f->held.sender_id = r->id;
    (void)snprintf(f->held.sender_addr, sizeof f->held.sender_addr, "%s",
                   r->address);
    raft_configuration_init(&f->held.msg.install_snapshot.conf);
    f->held.msg.install_snapshot.last_index = r->io.snap_index;
    f->held.msg.install_snapshot.last_term = r->io.snap_term;
    f->held.msg.install_snapshot.data = *manifest; /* ours from here */
    f->peer_id = r->id;
    next_peer(r);
    f->last_progress_ms = 0; /* io_start has not run: no clock yet */
    return 0;
}

/* A complete local fetch: restore the manifest into the FSM ourselves. */
static void finish_local(struct repl *r)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    const struct raft_buffer *m = &f->held.msg.install_snapshot.data;
    int rv = r->fsm.restore(r->fsm.arg, m->base, m->len);
    if (rv == TERN_ECORRUPT) {
        local_retry(r); /* damaged copy, cut back by the FSM: again */
        return;
    }
    if (rv != 0) {
        repl_fsm_fail(r, rv); /* releases the fetch */
        return;
    }
    if (f->fetched) {
        r->bulk.completed++;
    }
    repl_fsm_restored(r);
    repl_wire_release(&f->held);
    f->active = false;
}

void repl_bulk_abort(struct repl *r)
{
    if (r->bulk.fetch.active) {
        repl_wire_release(&r->bulk.fetch.held);
        r->bulk.fetch.active = false;
    }
}

static void send_requests(struct repl *r)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    while (f->in_flight < r->bulk.window && f->next_req < f->to) {
        struct repl_bulk_msg b = {0};
        struct repl_frame fr;
        int rv;
        b.snap_index = f->held.msg.install_snapshot.last_index;
        b.pos = f->next_req;
        b.len = TERN_MIN(r->bulk.chunk, f->to - f->next_req);
        if (repl_codec_encode_bulk(r->id, r->address,
                                   repl_frame_flags(r, f->peer_id),
                                   REPL_WIRE_BULK_REQ, &b, &fr) != 0) {
            return;
        }
        rv = repl_io_send_frame(r, f->peer_id, f->peer_addr, &fr);
        repl_frame_release(&fr);
        if (rv != 0) {
            return; /* the stall timer retries */
        }
        f->next_req += b.len;
        f->in_flight++;
    }
}

/* Rule 4: 0.15's replicationInstallSnapshot ignores an InstallSnapshot
 * while the core takes or stores a snapshot itself (struct raft is public
 * in 0.15). */
static bool core_busy(const struct repl *r)
{
    return r->raft.snapshot.pending.term != 0 ||
           r->raft.snapshot.put.data != NULL;
}

static void finish(struct repl *r)
{
    struct repl_wire held = r->bulk.fetch.held;
    if (is_local(r)) {
        finish_local(r);
        return;
    }
    if (core_busy(r)) {
        return; /* held; retried on the next tick */
    }
    r->bulk.fetch.active = false;
    if (r->bulk.fetch.fetched) {
        r->bulk.completed++;
    }
    held.msg.server_address = held.sender_addr;
    repl_io_deliver(r, &held);
}

/* Hold w as a complete fetch (nothing to fetch) until finish delivers it. */
static void hold_complete(struct repl *r, struct repl_wire *w)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    memset(f, 0, sizeof *f);
    f->active = true;
    f->started = true;
    f->held = *w;
    f->held.msg.server_address = f->held.sender_addr;
    f->peer_id = w->sender_id;
    memcpy(f->peer_addr, w->sender_addr, sizeof f->peer_addr);
    f->last_progress_ms = now_ms(r);
    finish(r);
}

/* Rule 3: would 0.15's replicationInstallSnapshot treat s as a no-op?
 * (Its own checks: log snapshot index >= last_index, or the local term of
 * last_index != 0 and >= last_term; our snap_index and term runs track the
 * same log.) */
static bool install_is_noop(const struct repl *r,
                            const struct raft_install_snapshot *s)
{
    uint64_t t;
    if (r->io.snap_index != 0 && r->io.snap_index >= s->last_index) {
        return true;
    }
    t = repl_io_term_of(r, s->last_index);
    return t != 0 && t >= s->last_term;
}

/* Rule 2: take the range and send the first requests once no append is in
 * flight; a held InstallSnapshot whose data we already have goes to
 * libraft (through finish: rule 4). */
static void fetch_start(struct repl *r)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    const struct raft_install_snapshot *s = &f->held.msg.install_snapshot;
    uint64_t from = 0, to = 0;
    if (!f->active || f->started || r->io.n_unacked != 0) {
        return;
    }
    if (r->fsm.bulk_range(r->fsm.arg, s->data.base, s->data.len, &from, &to) !=
        0) {
        if (is_local(r)) {
            repl_fsm_fail(r, TERN_EMALFORMED); /* our own snapshot is
                                                  unusable */
            return;
        }
        repl_bulk_abort(r);
        return;
    }
    if (from >= to) {
        f->started = true;
        f->next_pos = f->next_req = f->to = 0;
        finish(r);
        return;
    }
    f->started = true;
    f->next_pos = from;
    f->next_req = from;
    f->to = to;
    f->last_progress_ms = now_ms(r);
    send_requests(r);
}

void repl_bulk_on_install(struct repl *r, struct repl_wire *w)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    const struct raft_install_snapshot *s = &w->msg.install_snapshot;

    if (r->io.install_index != 0) {
        repl_wire_release(w); /* an install is still being persisted */
        return;
    }
    if (r->fsm.bulk_range == NULL) {
        repl_io_deliver(r, w);
        return;
    }
    if (is_local(r) &&
        s->last_index <= f->held.msg.install_snapshot.last_index) {
        repl_io_deliver(r, w); /* not newer than ours: libraft ignores it */
        return;
    }
    if (install_is_noop(r, s)) {
        r->bulk.noop++;
        if (!core_busy(r)) {
            repl_io_deliver(r, w);
            return;
        }
        repl_bulk_abort(r);
        hold_complete(r, w);
        return;
    }
    if (f->active) {
        if (f->peer_id == w->sender_id &&
            f->held.msg.install_snapshot.last_index == s->last_index) {
            repl_wire_release(w); /* a resend of the one we fetch for */
            return;
        }
        repl_bulk_abort(r);
    }
    memset(f, 0, sizeof *f);
    f->active = true;
    f->held = *w;
    f->held.msg.server_address = f->held.sender_addr;
    f->peer_id = w->sender_id;
    memcpy(f->peer_addr, w->sender_addr, sizeof f->peer_addr);
    f->last_progress_ms = now_ms(r);
    fetch_start(r);
}

static void serve(struct repl *r, const struct repl_wire *w)
{
    struct repl_bulk_msg b = {0};
    struct repl_frame fr;
    uint8_t *buf = NULL;
    size_t want = (size_t)TERN_MIN(w->bulk.len, r->bulk.chunk);
    size_t got = 0;

    b.snap_index = w->bulk.snap_index;
    b.pos = w->bulk.pos;
    b.status = REPL_BULK_STATUS_ERROR;
    if (r->fsm.bulk_read != NULL && want > 0) {
        buf = tern_malloc(want);
    }
    if (buf != NULL) {
        b.status = REPL_BULK_STATUS_OK;
        while (got < want) {
            size_t n = 0;
            if (r->fsm.bulk_read(r->fsm.arg, w->bulk.pos + got, buf + got,
                                 want - got, &n) != 0) {
                b.status = REPL_BULK_STATUS_ERROR;
                break;
            }
            if (n == 0) {
                break;
            }
            got += n;
        }
        if (got == 0) {
            b.status = REPL_BULK_STATUS_ERROR;
        }
    }
    b.len = b.status == REPL_BULK_STATUS_OK ? got : 0;
    b.data = buf;
    if (repl_codec_encode_bulk(r->id, r->address,
                               repl_frame_flags(r, w->sender_id),
                               REPL_WIRE_BULK_DATA, &b, &fr) == 0) {
        (void)repl_io_send_frame(r, w->sender_id, w->sender_addr, &fr);
        repl_frame_release(&fr);
    }
    tern_free(buf);
}

static void on_data(struct repl *r, const struct repl_wire *w)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    if (!f->active || !f->started || w->sender_id != f->peer_id ||
        w->bulk.snap_index != f->held.msg.install_snapshot.last_index) {
        return;
    }
    if (f->next_pos >= f->to) {
        return; /* complete, waiting for the core (rule 4) */
    }
    if (w->bulk.status != REPL_BULK_STATUS_OK || w->bulk.len == 0) {
        give_up(r);
        return;
    }
    if (w->bulk.pos != f->next_pos) {
        return; /* after a loss; the stall timer re-requests */
    }
    if (w->bulk.len > f->to - f->next_pos ||
        r->fsm.bulk_write(r->fsm.arg, w->bulk.pos, w->bulk.data,
                          (size_t)w->bulk.len) != 0) {
        give_up(r);
        return;
    }
    f->next_pos += w->bulk.len;
    f->fetched = true;
    if (f->in_flight > 0) {
        f->in_flight--;
    }
    f->last_progress_ms = now_ms(r);
    f->retries = 0;
    if (f->next_pos >= f->to) {
        finish(r);
        return;
    }
    if (f->next_req < f->next_pos) {
        f->next_req = f->next_pos;
    }
    send_requests(r);
}

void repl_bulk_on_frame(struct repl *r, struct repl_wire *w)
{
    if (w->type == REPL_WIRE_BULK_REQ) {
        serve(r, w);
    } else {
        on_data(r, w);
    }
}

void repl_bulk_tick(struct repl *r)
{
    struct repl_bulk_fetch *f = &r->bulk.fetch;
    if (f->active && !f->started) {
        fetch_start(r);
        return;
    }
    if (f->active && f->next_pos >= f->to) {
        finish(r); /* complete, held for the core (rule 4) */
        return;
    }
    if (!f->active || now_ms(r) - f->last_progress_ms < r->bulk.stall_ms) {
        return;
    }
    if (f->retries >= BULK__MAX_RETRIES) {
        give_up(r);
        return;
    }
    f->retries++;
    r->bulk.rerequests++;
    f->in_flight = 0;
    f->next_req = f->next_pos;
    f->last_progress_ms = now_ms(r);
    send_requests(r);
}
