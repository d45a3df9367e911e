/*
 * tests/unit/raft/test_lost.c: acting on a leader's lost connection
 * (raft/lost.c) on the deterministic cluster harness: a crashed leader's
 * followers, told by the xport's peer-down signal, elect a new leader
 * before an election timeout would have fired; a false signal about a live
 * leader changes no term and elects no one; both followers signalled at
 * once elect one leader in one round (no split vote), also when the first
 * in turn has the shorter log. Without a signal (a leader cut off by the
 * network): a silent leader holds no votes, and followers whose timers
 * run out together elect one leader in one round. Time is the harness clock (1
 * ms a step when nothing else can happen), so these are assertions on logic,
 * not speed.
 */
#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS CLUSTER_STEPS
#define ET    150u /* repl_config's default election timeout */

static struct cluster cl;

/* Every up node's term. */
static uint64_t term_of(unsigned i)
{
    return cl.nodes[i].repl->raft.current_term;
}

/* The leader's id as node i sees it (0: none). */
static uint64_t leader_seen(unsigned i)
{
    struct repl_status st;
    repl_get_status(cl.nodes[i].repl, &st);
    return st.leader_id;
}

/* Crash leader l and give every survivor the peer-down signal for it. */
static void crash_and_signal(int l)
{
    cluster_crash(&cl, (unsigned)l);
    for (unsigned i = 0; i < cl.n; i++) {
        if (cl.nodes[i].up) {
            cr_assert_eq(
                xport_mem_net_peer_down(cl.net, cl.nodes[l].id, cl.nodes[i].id),
                1);
        }
    }
}

/* Number of up nodes that are role leaders in term. */
static unsigned leaders_in(uint64_t term)
{
    unsigned n = 0;
    for (unsigned i = 0; i < cl.n; i++) {
        if (cl.nodes[i].up && cl.nodes[i].role == REPL_LEADER &&
            term_of(i) == term) {
            n++;
        }
    }
    return n;
}

TestSuite(lost, .timeout = 60);

Test(lost, crashed_leader_replaced_before_the_timeout)
{
    uint64_t last = 0, t0, term0;
    int l, l2;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 10, 64, 1, &last);
    term0 = term_of((unsigned)l);
    t0 = cl.clock;
    crash_and_signal(l);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    l2 = cluster_writable_leader(&cl);
    cr_assert_neq(l2, l);
    /* Elected and writable before the earliest election timeout (the
     * timer was restarted by the last heartbeat, at or before t0). */
    cr_expect_lt(cl.clock - t0, ET, "took %llu ms",
                 (unsigned long long)(cl.clock - t0));
    /* One round: the new term is the next one, one leader in it. */
    cr_expect_eq(term_of((unsigned)l2), term0 + 1);
    cr_expect_eq(leaders_in(term0 + 1), 1);
    cr_expect_eq(cl.nodes[l2].repl->lost.acted, 1);
    /* The answers to its first heartbeat, held by guard.c item 1 until
     * its barrier was durable, reached the core (no heartbeat interval
     * waited in probe mode). */
    cr_expect_geq(cl.nodes[l2].repl->guard.results_released, 1);
    /* Writes go on; nothing committed was lost. */
    cluster_propose_applied(&cl, (unsigned)l2, 5, 64, 2, &last);
    cluster_start(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect_eq(cl.nodes[i].n_applied, 15);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* A new leader is writable without waiting a heartbeat interval: the
 * answer to its first heartbeat (which moves 0.15's progress out of probe
 * mode) is held until its barrier is durable, then handed to the core. */
static bool pred_role_leader(struct cluster *c, void *arg)
{
    (void)arg;
    return cluster_leader(c) >= 0;
}

Test(lost, new_leader_writable_within_a_heartbeat)
{
    uint64_t last = 0, t_lead;
    int l, l2;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 1, &last);
    crash_and_signal(l);
    cr_assert(cluster_step_until(&cl, pred_role_leader, NULL, STEPS));
    t_lead = cl.clock;
    l2 = cluster_leader(&cl);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cr_expect_eq(cluster_writable_leader(&cl), l2);
    cr_expect_lt(cl.clock - t_lead, 15u, "writable %llu ms after elected",
                 (unsigned long long)(cl.clock - t_lead));
    cr_expect_geq(cl.nodes[l2].repl->guard.results_released, 1);
    cluster_fini(&cl);
}

Test(lost, without_the_signal_the_timeout_rules)
{
    uint64_t last = 0, t0;
    int l;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 1, &last);
    t0 = cl.clock;
    cluster_crash(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    /* The control: no follower can start before its timer of >= ET. */
    cr_expect_geq(cl.clock - t0, ET - 15u, "took %llu ms",
                  (unsigned long long)(cl.clock - t0));
    cluster_fini(&cl);
}

Test(lost, false_signal_disrupts_nothing)
{
    uint64_t last = 0, term0;
    int l, f;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 1, &last);
    term0 = term_of((unsigned)l);
    /* Each follower in turn hears its connection to a live leader reset
     * (the other one still hears the leader). */
    for (int k = 0; k < 2; k++) {
        f = cluster_other(&cl, l, k == 0 ? -1 : cluster_other(&cl, l, -1));
        cr_assert_eq(
            xport_mem_net_peer_down(cl.net, cl.nodes[l].id, cl.nodes[f].id), 1);
        /* The first in turn acts at once (a pre-vote); the second would
         * wait its turn, and hears the leader before it. */
        cr_expect_eq(cl.nodes[f].repl->lost.acted, k == 0 ? 1 : 0,
                     "follower %d acted %llu", f,
                     (unsigned long long)cl.nodes[f].repl->lost.acted);
        for (unsigned s = 0; s < 4 * ET; s++) {
            cluster_step(&cl);
            cr_assert_leq(leaders_in(term_of((unsigned)l)), 1);
        }
        for (unsigned i = 0; i < cl.n; i++) {
            cr_expect_eq(term_of(i), term0, "node %u term %llu", i,
                         (unsigned long long)term_of(i));
            cr_expect_eq(leader_seen(i), cl.nodes[l].id);
        }
        cr_expect_eq(cl.nodes[l].role, REPL_LEADER);
        cr_expect(cl.nodes[l].writable);
        cr_expect_eq(cl.nodes[f].repl->lost.leader_id, 0); /* ended */
        cr_expect_eq(cl.nodes[f].repl->lost.false_signals, 1);
    }
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 2, &last);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* The first in turn (lowest id) has the shorter log: its pre-vote fails,
 * the second wins on its turn; still one round, one leader. */
Test(lost, first_in_turn_behind_second_wins)
{
    uint64_t last = 0, t0, term0;
    int l, first, second, l2;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 1, &last);
    first = cluster_other(&cl, l, -1); /* lower index: lower id */
    second = cluster_other(&cl, l, first);
    cr_assert_lt(cl.nodes[first].id, cl.nodes[second].id);
    cluster_link(&cl, (unsigned)l, (unsigned)first, false);
    cluster_propose_n(&cl, (unsigned)l, 4, 64, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));
    term0 = term_of((unsigned)l);
    t0 = cl.clock;
    crash_and_signal(l);
    cluster_link(&cl, (unsigned)l, (unsigned)first, true);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    l2 = cluster_writable_leader(&cl);
    cr_expect_eq(l2, second);
    cr_expect_lt(cl.clock - t0, ET, "took %llu ms",
                 (unsigned long long)(cl.clock - t0));
    cr_expect_geq(cl.clock - t0, repl_lost_stagger_ms(ET));
    cr_expect_eq(term_of((unsigned)l2), term0 + 1);
    cr_expect_eq(leaders_in(term0 + 1), 1);
    cr_expect_eq(term_of((unsigned)first), term0 + 1);
    /* The committed entries survived. */
    cluster_propose_applied(&cl, (unsigned)l2, 2, 64, 3, &last);
    cr_expect_eq(cl.nodes[first].n_applied, 9);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- A leader cut off without a closed connection (4. and 5.) ---- */

/* Fix the election timers of every node but l: the running follower
 * timers to ET + offset[k] (k: rank among them), and every later draw
 * (candidate timers) to ET + draw. */
static void fix_timers(int l, const unsigned *offset, int draw)
{
    unsigned k = 0;
    for (unsigned i = 0; i < cl.n; i++) {
        if ((int)i == l) {
            continue;
        }
        cr_assert_eq(raft_state(&cl.nodes[i].repl->raft), RAFT_FOLLOWER);
        cl.nodes[i].repl->raft.follower_state.randomized_election_timeout =
            ET + offset[k++];
        cl.nodes[i].io->fixed_random = draw;
    }
}

/* A writable leader other than *(int *)arg. */
static bool pred_other_writable(struct cluster *c, void *arg)
{
    int old = *(int *)arg;
    for (unsigned i = 0; i < c->n; i++) {
        if ((int)i != old && c->nodes[i].up && c->nodes[i].writable) {
            return true;
        }
    }
    return false;
}

/* Cut l off (its links drop messages; nothing closes) and step until
 * another node is a writable leader; returns it, *took ms after the cut.
 * l is joined again (it steps down when it hears the new term). */
static int cut_and_elect(int l, uint64_t *took)
{
    uint64_t t0 = cl.clock;
    int l2;
    cluster_isolate(&cl, (unsigned)l, true);
    cr_assert(cluster_step_until(&cl, pred_other_writable, &l, STEPS));
    *took = cl.clock - t0;
    for (l2 = 0; l2 < (int)cl.n && (l2 == l || !cl.nodes[l2].writable); l2++) {
    }
    cluster_isolate(&cl, (unsigned)l, false);
    return l2;
}

/* The end of a test: leader l takes 3 more writes, nothing conflicts. */
static void end_with_writes(int l, uint64_t *last)
{
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 2, last);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* A cluster of n with an elected leader (returned) and 5 entries applied
 * (*last); *term0 its term; *first and *second the two followers of
 * lowest index (lowest ids; second -1 for n < 3). */
static int start_settled(unsigned n,
                         uint64_t *last,
                         uint64_t *term0,
                         int *first,
                         int *second)
{
    int l;
    cluster_init(&cl, n);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 5, 64, 1, last);
    *term0 = term_of((unsigned)l);
    *first = cluster_other(&cl, l, -1);
    *second = cluster_other(&cl, l, *first);
    return l;
}

/* Both followers' timers run out in the same millisecond, and every later
 * timer too: without 5. each grants the other's pre-vote, both stand in
 * the next term, split the vote, and do so again on every round. */
Test(lost, cut_off_leader_tie_one_round)
{
    static const unsigned same[] = {5, 5};
    uint64_t last = 0, term0, took;
    int l, l2, low, high;
    l = start_settled(3, &last, &term0, &low, &high);
    fix_timers(l, same, 0);
    l2 = cut_and_elect(l, &took);
    cr_expect_eq(l2, low, "the lower id wins a tie");
    cr_expect_eq(term_of((unsigned)l2), term0 + 1, "one round");
    cr_expect_eq(leaders_in(term0 + 1), 1);
    cr_expect_lt(took, ET + 40, "took %llu ms", (unsigned long long)took);
    cr_expect_geq(cl.nodes[low].repl->lost.ties_refused, 1);
    cr_expect_geq(cl.nodes[low].repl->lost.resends, 1);
    cr_expect_eq(cl.nodes[low].repl->lost.acted, 0); /* no signal */
    cluster_propose_applied(&cl, (unsigned)l2, 3, 64, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* The same with five nodes: four followers time out at once. */
Test(lost, cut_off_leader_tie_of_four_one_round)
{
    static const unsigned same[] = {5, 5, 5, 5};
    uint64_t last = 0, term0, took;
    int l, l2, first, second;
    l = start_settled(5, &last, &term0, &first, &second);
    fix_timers(l, same, 0);
    l2 = cut_and_elect(l, &took);
    cr_expect_eq(l2, first, "the lowest id wins");
    cr_expect_eq(term_of((unsigned)l2), term0 + 1, "one round");
    cr_expect_eq(leaders_in(term0 + 1), 1);
    cr_expect_lt(took, ET + 40, "took %llu ms", (unsigned long long)took);
    /* Nobody else stood in that term: the others stood aside, so their
     * votes all went to the winner (the second lowest passing its own
     * pre-vote on the two highest's grants would have voted for itself,
     * and a network delivering its RequestVotes first would split). */
    for (unsigned i = 0; i < cl.n; i++) {
        if ((int)i != l) {
            cr_expect_eq(cl.nodes[i].repl->raft.voted_for, cl.nodes[l2].id,
                         "node %u voted for %llu", i,
                         (unsigned long long)cl.nodes[i].repl->raft.voted_for);
        }
    }
    cr_expect_geq(cl.nodes[second].repl->lost.grants_yielded, 1);
    end_with_writes(l2, &last);
}

/* The first follower's timer runs out at ET + 5, the other's at 2 ET - 1.
 * Without 4. the other refuses every vote until its own timer runs out
 * (it still remembers the leader): the later timer, not the earlier. */
Test(lost, silent_leader_holds_no_votes)
{
    static const unsigned apart[] = {5, ET - 1};
    uint64_t last = 0, term0, took;
    int l, l2, first, second;
    l = start_settled(3, &last, &term0, &first, &second);
    fix_timers(l, apart, 0);
    l2 = cut_and_elect(l, &took);
    cr_expect_eq(l2, first);
    cr_expect_eq(term_of((unsigned)l2), term0 + 1, "one round");
    cr_expect_lt(took, ET + 40, "took %llu ms", (unsigned long long)took);
    cr_expect_geq(cl.nodes[second].repl->lost.stale_unstuck, 1);
    end_with_writes(l2, &last);
}

/* The control for 4.: a follower cut off from a live leader times out and
 * asks for votes; the other follower hears the leader every heartbeat, so
 * it refuses, and nothing changes. */
Test(lost, live_leader_keeps_its_votes)
{
    static const unsigned apart[] = {5, ET - 1};
    uint64_t last = 0, term0;
    int l, first, second;
    l = start_settled(3, &last, &term0, &first, &second);
    fix_timers(l, apart, 0);
    cluster_link(&cl, (unsigned)l, (unsigned)first, false);
    for (unsigned s = 0; s < 6 * ET; s++) {
        cluster_step(&cl);
    }
    cr_expect_eq(raft_state(&cl.nodes[first].repl->raft), RAFT_CANDIDATE);
    cr_expect_eq(term_of((unsigned)l), term0);
    cr_expect_eq(term_of((unsigned)second), term0);
    cr_expect_eq(leader_seen((unsigned)second), cl.nodes[l].id);
    cr_expect_eq(cl.nodes[second].repl->lost.stale_unstuck, 0);
    cr_expect(cl.nodes[l].writable);
    cluster_link(&cl, (unsigned)l, (unsigned)first, true);
    end_with_writes(l, &last);
}

/* The first follower to time out has the shorter log: the other refuses
 * its pre-vote on the log comparison and, its leader silent for ET by
 * then, stands at once (4.) instead of when its own timer (2 ET - 1)
 * runs out. */
Test(lost, behind_candidate_makes_the_other_stand)
{
    static const unsigned apart[] = {20, ET - 1};
    uint64_t last = 0, term0, took;
    int l, l2, behind, ahead;
    l = start_settled(3, &last, &term0, &behind, &ahead);
    cluster_link(&cl, (unsigned)l, (unsigned)behind, false);
    cluster_propose_n(&cl, (unsigned)l, 3, 64, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));
    term0 = term_of((unsigned)l);
    fix_timers(l, apart, 0);
    l2 = cut_and_elect(l, &took);
    cr_expect_eq(l2, ahead);
    cr_expect_eq(term_of((unsigned)l2), term0 + 1, "one round");
    cr_expect_lt(took, ET + 60, "took %llu ms", (unsigned long long)took);
    cr_expect_geq(cl.nodes[ahead].repl->lost.stood, 1);
    cluster_propose_applied(&cl, (unsigned)l2, 2, 64, 3, &last);
    cr_expect_eq(cl.nodes[behind].n_applied, 10);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* Status: a follower reports its leader silent once it has not heard from
 * it for ET (ternd then holds writes instead of naming that leader), and
 * not before, nor while the leader is heard. */
Test(lost, status_reports_a_silent_leader)
{
    static const unsigned late[] = {ET - 1, ET - 1};
    struct repl_status st;
    uint64_t last = 0;
    int l, f;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 1, &last);
    f = cluster_other(&cl, l, -1);
    fix_timers(l, late, (int)ET - 1);
    for (unsigned s = 0; s < 3 * ET; s++) {
        cluster_step(&cl);
        repl_get_status(cl.nodes[f].repl, &st);
        cr_assert(!st.leader_silent, "heard every heartbeat");
    }
    cluster_isolate(&cl, (unsigned)l, true);
    cluster_steps(&cl, ET / 2);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect(!st.leader_silent, "silent for ET / 2 only");
    cr_expect_eq(st.leader_id, cl.nodes[l].id);
    cluster_steps(&cl, ET / 2 + 20);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect(st.leader_silent, "silent for ET + 20 ms");
    cr_expect_eq(st.leader_id, cl.nodes[l].id, "still its last leader");
    cluster_isolate(&cl, (unsigned)l, false);
    cluster_steps(&cl, 40);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect(!st.leader_silent, "heard again");
    cluster_fini(&cl);
}
