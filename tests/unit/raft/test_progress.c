/*
 * tests/unit/raft/test_progress.c: repl_get_progress, the leader's view of
 * each voter's match index that the node's metrics report as replication
 * lag, on the deterministic cluster harness.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS 200000

static struct cluster cl;

struct want
{
    unsigned leader;
    uint64_t index;
};

/* Every voter but the leader reports match index >= w->index. */
static bool pred_all_matched(struct cluster *c, void *arg)
{
    const struct want *w = arg;
    struct repl_progress p[CLUSTER_MAX];
    unsigned n = repl_get_progress(c->nodes[w->leader].repl, p, CLUSTER_MAX);
    if (n != c->n - 1) {
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        if (p[i].match_index < w->index) {
            return false;
        }
    }
    return true;
}

TestSuite(progress, .timeout = 60);

Test(progress, leader_reports_each_voter_followers_none)
{
    struct repl_progress p[CLUSTER_MAX];
    uint64_t last = 0;
    struct want w;
    int l;

    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 10, 64, 1, &last);
    w.leader = (unsigned)l;
    w.index = last;
    cr_assert(cluster_step_until(&cl, pred_all_matched, &w, STEPS));
    cr_assert_eq(repl_get_progress(cl.nodes[l].repl, p, CLUSTER_MAX), 2u);
    for (unsigned i = 0; i < 2; i++) {
        cr_expect_neq(p[i].id, cl.nodes[l].id, "the leader is not listed");
        cr_expect_eq(p[i].match_index, last);
    }
    cr_expect_neq(p[0].id, p[1].id);
    cr_expect_eq(repl_get_progress(cl.nodes[l].repl, p, 1), 1u,
                 "at most max entries");
    for (unsigned i = 0; i < cl.n; i++) {
        if (i != (unsigned)l) {
            cr_expect_eq(repl_get_progress(cl.nodes[i].repl, p, CLUSTER_MAX),
                         0u, "node %u does not lead: no progress", i);
        }
    }
    cluster_fini(&cl);
}

Test(progress, an_isolated_follower_falls_behind)
{
    struct repl_progress p[CLUSTER_MAX];
    uint64_t first = 0, last = 0;
    int l, f;
    unsigned n;

    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 5, 64, 1, &first);
    f = cluster_other(&cl, l, l);
    cluster_isolate(&cl, (unsigned)f, true);
    cluster_propose_n(&cl, (unsigned)l, 20, 64, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));
    n = repl_get_progress(cl.nodes[l].repl, p, CLUSTER_MAX);
    cr_assert_eq(n, 2u);
    for (unsigned i = 0; i < n; i++) {
        if (p[i].id == cl.nodes[f].id) {
            cr_expect_leq(p[i].match_index, first,
                          "isolated: stuck at or below %llu",
                          (unsigned long long)first);
        } else {
            cr_expect_geq(p[i].match_index, last);
        }
    }
    cluster_isolate(&cl, (unsigned)f, false);
    cluster_fini(&cl);
}
