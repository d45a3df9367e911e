/*
 * tests/unit/raft/test_lost.c: acting on a leader's lost connection
 * (raft/lost.c) on the deterministic cluster harness: a crashed leader's
 * followers, told by the xport's peer-down signal, elect a new leader
 * before an election timeout would have fired; a false signal about a live
 * leader changes no term and elects no one; both followers signalled at
 * once elect one leader in one round (no split vote), also when the first
 * in turn has the shorter log. Time is the harness clock (1 ms a step when
 * nothing else can happen), so these are assertions on logic, not speed.
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
