/*
 * raft/lost.c: acting at once on a leader's loss (4. and 5. below: when no
 * connection closes). A killed
 * leader's kernel closes its sockets at once, so its followers learn of the
 * death within a round trip (the xport's peer-down signal, xport.h), while
 * libraft 0.15 would wait out a randomized election timeout in [ET, 2ET)
 * and, worse, every follower refuses RequestVotes (pre-votes included) as
 * long as it remembers a leader, however old (recv_request_vote.c). This
 * file turns the signal into an election started at once.
 *
 * Episode. A follower whose current leader is peer P gets P's peer-down
 * signal: the episode (r->lost) records P, the term and the time. It ends
 * when the term changes, a leader other than P is known, the node stops
 * being a follower or candidate, a message from P arrives (AppendEntries
 * or InstallSnapshot of the episode's term or later: P lives, the signal
 * was a connection reset), or 2 * ET after the signal (the normal timers
 * rule again).
 *
 * 1. Who goes first. Among the voters of the configuration other than P,
 *    ranked by id, the k-th (k = 0, 1, ...) acts REPL_LOST_STAGGER(ET) * k
 *    ms after the signal (ET / 3 each: longer than a pre-vote round, the
 *    term and vote fsyncs and the RequestVote on loopback, so when both
 *    followers see the close at once the first one's election is decided
 *    before the second starts its own: no split vote). The first one's
 *    pre-vote fails only if its log is behind the other's; the second then
 *    wins on its turn.
 * 2. Acting = expiring the election timer. 0.15 has no call for it, but
 *    our raft_io owns time(): r->lost.offset (ms, only grows) is added to
 *    the inner io's clock (io.c io_time) by exactly what the running timer
 *    still lacks (from struct raft's public election_timer_start and
 *    randomized_election_timeout), and a tick is run at once through the
 *    usual gates (io.c repl_io_tick: no tick while appends are in flight,
 *    the disk is full, the node may not vote...; a gated node converts on
 *    its next allowed tick, its timer already expired). The core converts
 *    to a pre-vote candidate: no term change yet.
 *    A candidate still in pre-vote REPL_LOST_RETRY_MS later (its pre-vote
 *    reached a follower that had not seen the close yet) expires its timer
 *    again, which re-sends the pre-vote; at most REPL_LOST_TRIES times.
 * 3. Voting. While in an episode, a RequestVote (pre-vote or real) from a
 *    voter other than P is handed to the core with disrupt_leader set, so
 *    the core's "I still have a leader" refusal does not apply (it does not
 *    touch the log comparison nor the one-vote-per-term rule: safety is
 *    unchanged, only the stickiness, which protects a live leader, is
 *    lifted for a leader this node saw die).
 *
 * False signals. A reset connection to a live leader starts an episode on
 * one follower: its pre-vote goes to P (a leader refuses) and to the other
 * follower, which still hears P, so has no episode, and refuses; the
 * candidate stays in pre-vote without changing its term and returns to
 * follower at P's next heartbeat. Nothing is disrupted. Only if every
 * follower of a majority loses its connections to a live P at once (then
 * P is cut off from them anyway) is a new leader elected, in a new term,
 * as if their timers had expired.
 *
 * Without a signal. A leader cut off by the network (packets dropped, no
 * connection closed) gives no signal: each follower's own timer, drawn in
 * [ET, 2ET), runs out. Two more rules keep that to one round:
 * 4. A silent leader is no leader. 0.15 refuses every vote while a
 *    follower remembers a leader, however long ago it last heard from it,
 *    so the first follower to time out was refused by the other until the
 *    other's own timer ran out too (the later of two timers, not the
 *    earlier). Section 4.2.3 of the Raft thesis refuses only "within the
 *    minimum election timeout of hearing from a current leader": a
 *    RequestVote (pre-vote or real) reaching a follower whose leader has
 *    been silent for at least ET (both by raft's election_timer_start,
 *    which every AppendEntries and InstallSnapshot from the leader
 *    restarts, and by the inner clock since the last such message of our
 *    leader and term seen here, also one guard.c keeps from the core
 *    while a snapshot is installed; so neither the offset of 2. nor a held
 *    heartbeat makes a live leader silent) is handed
 *    to the core with disrupt_leader set. As in 3., only the stickiness is
 *    lifted, never the log comparison nor one vote per term; a live leader
 *    is heard every heartbeat (ET / 10), so it is never disrupted. This
 *    node's own timer would have made it stop following at the same age
 *    anyway, which is also why leader-side contact checks see no change.
 *    When that vote is then refused because the candidate's log is behind
 *    ours (the durable one we would advertise), an election is due that
 *    only a node like us can win: we stand at once (our timer expired as
 *    in 2.) instead of when our own timer runs out, up to ET later.
 * 5. Two pre-vote candidates. When both followers time out within a
 *    message's flight of each other, each is a pre-vote candidate without
 *    a leader, each grants the other's pre-vote, both stand in the next
 *    term and split the vote: a second round, and with timers this close
 *    sometimes a third. A pre-vote candidate that gets a pre-vote for the
 *    same next term from a voter whose log is not more up to date than
 *    the one it advertised itself (the durable one, guard.c item 3) takes
 *    the round: on equal logs the lower id wins, and the higher id's
 *    pre-vote is refused (made to advertise an empty log, as guard.c
 *    neutralises rather than drops); a log behind ours the core refuses by
 *    itself. Either way the sender has no leader any more, so it would
 *    grant ours: our pre-vote is sent again at once (the timer expired as
 *    in 2.), not after our own timer runs out again, unless the sender's
 *    grant is counted already (a re-send restarts the count). The higher
 *    id, for its part, stands aside for ET: grants of its own pre-vote are
 *    handed to the core as refusals, so with five voters the second
 *    lowest cannot pass the pre-vote on the others' grants beside the
 *    lowest and split the real vote with it; when that ends, a candidate
 *    whose grants were set aside sends its pre-vote again at once.
 *    Bounds, per term: REPL_LOST_TIES refused ties, REPL_LOST_TRIES
 *    re-sends, later pre-votes being left to the core, and one ET of
 *    standing aside (neither refusing nor re-sending meanwhile), so nodes
 *    that reach different majorities (a partial partition) cannot hold
 *    each other up for long. Refusing a vote is always safe;
 *    only liveness is at stake, and the lower id's pre-vote still needs a
 *    majority like any other.
 *
 * Other users of io time (checked): the core's leader-side timers
 * (heartbeats, contact quorum, promotion rounds) and ours (member.c change
 * deadlines, repl.c transfer settling) measure differences taken while
 * leading; the offset only moves while following, before an election, so
 * they see a constant shift. guard.c item 4's held TimeoutNow (a follower)
 * may expire up to 2 * ET early: it is dropped, and this election replaces
 * it. bulk.c reads the inner clock, latency.c the monotonic ns clock.
 */
#include "repl_int.h"

#define REPL_LOST_TRIES    5u
#define REPL_LOST_RETRY_MS 2u
#define REPL_LOST_TIES     2u /* tied pre-votes refused per term (5.) */

unsigned repl_lost_stagger_ms(unsigned election_timeout_ms)
{
    return TERN_MAX(1u, election_timeout_ms / 3);
}

/* Raft's clock (with the offset) and the inner io's (without): episode
 * times use the latter, so moving the former does not age them. */
static uint64_t raft_now(struct repl *r)
{
    return r->raft.io->time(r->raft.io);
}

static uint64_t now_ms(struct repl *r)
{
    return r->inner->time(r->inner);
}

static uint64_t current_leader(struct repl *r)
{
    raft_id id = 0;
    const char *addr = NULL;
    raft_leader(&r->raft, &id, &addr);
    return id;
}

static void episode_end(struct repl *r)
{
    r->lost.leader_id = 0;
    r->lost.act_at = 0;
    r->lost.tries = 0;
}

/* Rank of this node among the voters other than lost (by id): 0 first. */
static unsigned rank_of(struct repl *r, uint64_t lost)
{
    unsigned k = 0;
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        const struct raft_server *s = &r->raft.configuration.servers[i];
        if (s->role == RAFT_VOTER && s->id != lost && s->id < r->id) {
            k++;
        }
    }
    return k;
}

/* Whether the episode still holds (top of the file); ends it if not. */
static bool episode_valid(struct repl *r)
{
    int state;
    uint64_t lid;
    if (r->lost.leader_id == 0) {
        return false;
    }
    state = raft_state(&r->raft);
    lid = state == RAFT_FOLLOWER ? current_leader(r) : 0;
    if (r->closing || r->failed != 0 || r->raft.current_term != r->lost.term ||
        (state != RAFT_FOLLOWER && state != RAFT_CANDIDATE) ||
        (lid != 0 && lid != r->lost.leader_id) ||
        now_ms(r) - r->lost.since > 2 * (uint64_t)r->election_timeout_ms) {
        episode_end(r);
        return false;
    }
    return true;
}

/* Move the clock so the running election timer has expired (2.). */
static void expire_timer(struct repl *r)
{
    int state = raft_state(&r->raft);
    unsigned timeout;
    uint64_t elapsed = raft_now(r) - r->raft.election_timer_start;
    if (state == RAFT_FOLLOWER) {
        timeout = r->raft.follower_state.randomized_election_timeout;
    } else if (state == RAFT_CANDIDATE) {
        timeout = r->raft.candidate_state.randomized_election_timeout;
    } else {
        return;
    }
    if (elapsed < timeout) {
        r->lost.offset += timeout - elapsed;
    }
}

/* Expire the running election timer and tick at once (2.). */
static void expire_now(struct repl *r)
{
    expire_timer(r);
    repl_io_tick(r);
}

static void act(struct repl *r)
{
    r->lost.tries++;
    r->lost.acted++;
    expire_timer(r);
    r->lost.act_at = now_ms(r) + REPL_LOST_RETRY_MS; /* before the tick:
                                                         it checks us */
    repl_io_tick(r);
}

static void on_peer_down(void *arg, uint64_t peer_id)
{
    struct repl *r = arg;
    unsigned rank;
    if (r->closing || r->failed != 0 || !r->lost.on) {
        return;
    }
    r->lost.signals++;
    if (raft_state(&r->raft) != RAFT_FOLLOWER || current_leader(r) != peer_id ||
        r->lost.leader_id == peer_id) {
        return; /* not our leader, or already in this episode */
    }
    r->lost.leader_id = peer_id;
    r->lost.term = r->raft.current_term;
    r->lost.since = now_ms(r);
    r->lost.tries = 0;
    r->lost.episodes++;
    rank = rank_of(r, peer_id);
    if (rank == 0) {
        act(r);
    } else {
        r->lost.act_at =
            r->lost.since +
            (uint64_t)rank * repl_lost_stagger_ms(r->election_timeout_ms);
    }
}

void repl_lost_start(struct repl *r)
{
    xport_set_peer_down(r->xport, on_peer_down, r);
}

static void yield_tick(struct repl *r);

void repl_lost_tick(struct repl *r)
{
    yield_tick(r);
    if (!episode_valid(r) || r->lost.act_at == 0 ||
        now_ms(r) < r->lost.act_at) {
        return;
    }
    if (r->lost.tries == 0) {
        act(r); /* our turn came (1.) */
        return;
    }
    if (raft_state(&r->raft) == RAFT_CANDIDATE &&
        r->raft.candidate_state.in_pre_vote &&
        r->lost.tries < REPL_LOST_TRIES) {
        act(r); /* pre-vote again (2.) */
        return;
    }
    if (raft_state(&r->raft) == RAFT_FOLLOWER &&
        r->lost.tries < REPL_LOST_TRIES) {
        act(r); /* the earlier tick was gated: try again */
        return;
    }
    r->lost.act_at = 0; /* the election runs, or gave up: timers rule */
}

/* Index of voter id among the configuration's voters (the core's
 * candidate_state.votes), or n if it is none. */
static unsigned voter_index(const struct repl *r, uint64_t id)
{
    unsigned k = 0;
    for (unsigned i = 0; i < r->raft.configuration.n; i++) {
        const struct raft_server *s = &r->raft.configuration.servers[i];
        if (s->role != RAFT_VOTER) {
            continue;
        }
        if (s->id == id) {
            return k;
        }
        k++;
    }
    return r->raft.configuration.n;
}

/* Is id a voter of the configuration? */
static bool is_voter(const struct repl *r, uint64_t id)
{
    return voter_index(r, id) < r->raft.configuration.n;
}

/* Order of two advertised logs by (last term, last index): <0, 0, >0. */
static int log_order(uint64_t term_a,
                     uint64_t index_a,
                     uint64_t term_b,
                     uint64_t index_b)
{
    if (term_a != term_b) {
        return term_a < term_b ? -1 : 1;
    }
    if (index_a != index_b) {
        return index_a < index_b ? -1 : 1;
    }
    return 0;
}

/* The term of our durable last entry, as our RequestVote advertises it
 * (guard.c item 3); 0 when unknown (nothing is then taken as behind). */
static uint64_t our_last_term(struct repl *r)
{
    return r->io.acked_index == 0 ? 0 : repl_io_term_of(r, r->io.acked_index);
}

bool repl_lost_leader_silent(struct repl *r)
{
    uint64_t et = r->election_timeout_ms;
    /* Both clocks: raft's (the core's own view, restarted by a new
     * leader or a granted vote) and the inner one without the offset of
     * 2. (heard_at: the leader's messages as they arrive, also those
     * guard.c keeps from the core while a snapshot is installed), so
     * neither a moved clock nor a held heartbeat makes a live leader
     * silent. */
    return raft_state(&r->raft) == RAFT_FOLLOWER && current_leader(r) != 0 &&
           raft_now(r) - r->raft.election_timer_start >= et &&
           now_ms(r) - r->lost.heard_at >= et;
}

/* 4.: a vote reaching a follower whose leader has been silent >= ET. */
static void silent_leader(struct repl *r, struct raft_message *m)
{
    struct raft_request_vote *v = &m->request_vote;
    if (v->disrupt_leader || !repl_lost_leader_silent(r)) {
        return;
    }
    v->disrupt_leader = true;
    r->lost.stale_unstuck++;
    if (log_order(v->last_log_term, v->last_log_index, our_last_term(r),
                  r->io.acked_index) < 0) {
        r->lost.stand = true; /* 4., a candidate behind us */
    }
}

/* 5.: a pre-vote reaching us while we are a pre-vote candidate. */
static void pre_vote_race(struct repl *r, struct raft_message *m)
{
    struct raft_request_vote *v = &m->request_vote;
    uint64_t next = r->raft.current_term + 1;
    unsigned k;
    int order;
    if (!v->pre_vote || raft_state(&r->raft) != RAFT_CANDIDATE ||
        !r->raft.candidate_state.in_pre_vote || r->lost.my_pre_term != next ||
        v->term != next || m->server_id == r->id ||
        !is_voter(r, m->server_id)) {
        return;
    }
    if (r->lost.race_term != r->raft.current_term) {
        r->lost.race_term = r->raft.current_term;
        r->lost.race_ties = 0;
        r->lost.race_resends = 0;
        r->lost.yield_until = 0;
        r->lost.yielded = false;
        r->lost.grants_dropped = false;
    }
    order = log_order(r->lost.my_pre_last, r->lost.my_pre_index,
                      v->last_log_term, v->last_log_index);
    if (order < 0) {
        return; /* theirs is ahead: the core grants it */
    }
    if (order == 0 && r->lost.my_pre_index == 0) {
        return; /* both empty: never refused */
    }
    if (order == 0 && r->id > m->server_id) {
        /* Theirs to take: the core grants it, and we stand aside once a
         * term (our own pre-vote's grants do not count for ET), or two
         * of us could pass the pre-vote with different majorities and
         * split the real vote. */
        if (!r->lost.yielded) {
            r->lost.yielded = true;
            r->lost.yield_until = now_ms(r) + r->election_timeout_ms;
        }
        return;
    }
    if (r->lost.yield_until != 0) {
        return; /* standing aside: no refusals nor re-sends of ours */
    }
    if (order == 0) {
        if (r->lost.race_ties >= REPL_LOST_TIES) {
            return; /* left to the core */
        }
        r->lost.race_ties++;
        r->lost.ties_refused++;
        v->last_log_index = 0; /* our log is not empty: the core refuses */
        v->last_log_term = 0;
    }
    k = voter_index(r, m->server_id);
    if (r->lost.race_resends >= REPL_LOST_TRIES ||
        k >= r->raft.configuration.n || r->raft.candidate_state.votes[k]) {
        return; /* no more re-sends, or its grant is counted already */
    }
    r->lost.race_resends++;
    r->lost.resend = true;
}

/* 5.: our pre-vote granted while we stand aside for a lower id. */
static void pre_vote_result(struct repl *r, struct raft_message *m)
{
    struct raft_request_vote_result *res = &m->request_vote_result;
    if (res->pre_vote != raft_tribool_true || !res->vote_granted ||
        r->lost.yield_until == 0 || r->lost.race_term != r->raft.current_term ||
        raft_state(&r->raft) != RAFT_CANDIDATE ||
        !r->raft.candidate_state.in_pre_vote ||
        now_ms(r) >= r->lost.yield_until) {
        return;
    }
    res->vote_granted = false; /* a refusal changes nothing in the core */
    r->lost.grants_yielded++;
    r->lost.grants_dropped = true;
}

/* The end of standing aside (5.): a candidate whose grants were set aside
 * asks again at once rather than at its next timer; one that is no
 * candidate any more just ends it. */
static void yield_tick(struct repl *r)
{
    bool dropped = r->lost.grants_dropped;
    if (r->lost.yield_until == 0 || now_ms(r) < r->lost.yield_until) {
        if (r->lost.yield_until != 0 &&
            (raft_state(&r->raft) != RAFT_CANDIDATE ||
             r->lost.race_term != r->raft.current_term)) {
            r->lost.yield_until = 0; /* elected someone, or left */
        }
        return;
    }
    r->lost.yield_until = 0;
    r->lost.grants_dropped = false;
    if (dropped && raft_state(&r->raft) == RAFT_CANDIDATE &&
        r->raft.candidate_state.in_pre_vote &&
        r->lost.race_term == r->raft.current_term && !r->closing &&
        r->failed == 0) {
        r->lost.resends++;
        expire_now(r);
    }
}

void repl_lost_recv(struct repl *r, struct raft_message *m)
{
    if (m->type == RAFT_IO_REQUEST_VOTE && is_voter(r, m->server_id)) {
        silent_leader(r, m);
        pre_vote_race(r, m);
    } else if (m->type == RAFT_IO_REQUEST_VOTE_RESULT) {
        pre_vote_result(r, m);
    } else if (m->server_id == current_leader(r) &&
               ((m->type == RAFT_IO_APPEND_ENTRIES &&
                 m->append_entries.term == r->raft.current_term) ||
                (m->type == RAFT_IO_INSTALL_SNAPSHOT &&
                 m->install_snapshot.term == r->raft.current_term))) {
        /* Our leader speaks, also when guard.c keeps the message from the
         * core (a snapshot being installed, a bulk fetch): 4. must not
         * take a live leader for a silent one. */
        r->lost.heard_at = now_ms(r);
    }
    if (r->lost.leader_id == 0) {
        return;
    }
    if (m->server_id == r->lost.leader_id) {
        if ((m->type == RAFT_IO_APPEND_ENTRIES &&
             m->append_entries.term >= r->lost.term) ||
            (m->type == RAFT_IO_INSTALL_SNAPSHOT &&
             m->install_snapshot.term >= r->lost.term)) {
            r->lost.false_signals++;
            episode_end(r); /* it lives */
        }
        return;
    }
    if (m->type == RAFT_IO_REQUEST_VOTE && !m->request_vote.disrupt_leader &&
        episode_valid(r)) {
        m->request_vote.disrupt_leader = true; /* 3. */
        r->lost.votes_unstuck++;
    }
}

void repl_lost_delivered(struct repl *r)
{
    bool resend = r->lost.resend, stand = r->lost.stand;
    int state = raft_state(&r->raft);
    r->lost.resend = false;
    r->lost.stand = false;
    if (r->closing || r->failed != 0) {
        return;
    }
    if (resend && state == RAFT_CANDIDATE &&
        r->raft.candidate_state.in_pre_vote) {
        r->lost.resends++;
    } else if (stand && state == RAFT_FOLLOWER && current_leader(r) != 0) {
        r->lost.stood++;
    } else {
        return;
    }
    expire_now(r);
}

void repl_lost_sent(struct repl *r, const struct raft_message *m)
{
    if (m->type == RAFT_IO_REQUEST_VOTE && m->request_vote.pre_vote) {
        r->lost.my_pre_term = m->request_vote.term;
        r->lost.my_pre_index = m->request_vote.last_log_index;
        r->lost.my_pre_last = m->request_vote.last_log_term;
    }
}
