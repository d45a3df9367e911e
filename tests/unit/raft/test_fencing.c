/*
 * tests/unit/raft/test_fencing.c: the xport's epoch and fence follow the
 * Raft term (io.c "Fencing"), on the deterministic cluster harness through
 * the test-only txport (txport.h), which logs every set_epoch/set_fence
 * and every frame's stamp and can refuse frames below its fence.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS CLUSTER_STEPS

static struct cluster cl;

static uint64_t status_term(struct cnode *nd)
{
    struct repl_status st;
    repl_get_status(nd->repl, &st);
    return st.term;
}

/* Every set_epoch/set_fence pair carries one term, terms never go down,
 * the latest is the node's durable term, and every Raft frame it sent
 * went out with epoch == fence == the frame's term. */
static void check_fence_log(struct cnode *nd)
{
    struct txport *t = nd->tx;
    uint64_t prev = 0;
    cr_assert_not_null(t);
    cr_assert_geq(t->n_events, 2);
    cr_assert_lt(t->n_events, TXPORT_MAX_EVENTS);
    cr_expect_eq(t->n_events % 2, 0);
    for (unsigned k = 0; k + 1 < t->n_events; k += 2) {
        cr_expect_eq(t->events[k].kind, TXPORT_EPOCH);
        cr_expect_eq(t->events[k + 1].kind, TXPORT_FENCE);
        cr_expect_eq(t->events[k].value, t->events[k + 1].value);
        cr_expect_geq(t->events[k].value, prev);
        prev = t->events[k].value;
    }
    cr_expect_eq(t->epoch, nd->disk.term, "node %u epoch %llu term %llu", nd->i,
                 (unsigned long long)t->epoch,
                 (unsigned long long)nd->disk.term);
    cr_expect_eq(t->fence, nd->disk.term);
    cr_expect_eq(status_term(nd), nd->disk.term);
    cr_expect_gt(t->raft_sent, 0);
    cr_expect_eq(t->stamp_errors, 0,
                 "node %u: %llu frames sent before the "
                 "epoch/fence reached their term",
                 nd->i, (unsigned long long)t->stamp_errors);
}

Test(fencing, fence_follows_every_term_change)
{
    uint64_t last = 0;
    int l, l2;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    l = cluster_elect(&cl);
    for (unsigned i = 0; i < cl.n; i++) {
        /* Loaded term (bootstrap: 1) first, before anything was sent. */
        cr_expect_eq(cl.nodes[i].tx->events[0].kind, TXPORT_EPOCH);
        cr_expect_eq(cl.nodes[i].tx->events[0].value, 1);
        check_fence_log(&cl.nodes[i]);
    }
    cluster_propose_applied(&cl, (unsigned)l, 5, 32, 1, &last);
    cluster_crash(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    l2 = cluster_writable_leader(&cl);
    cluster_propose_applied(&cl, (unsigned)l2, 5, 32, 2, &last);
    cluster_start(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    for (unsigned i = 0; i < cl.n; i++) {
        check_fence_log(&cl.nodes[i]);
        cr_expect_gt(cl.nodes[i].disk.term, 2);
        cr_expect_eq(cl.nodes[i].repl->io.fence_errors, 0);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

static bool pred_new_leader(struct cluster *c, void *arg)
{
    int old = *(int *)arg;
    int l = cluster_writable_leader(c);
    for (unsigned k = 0; k < c->n; k++) {
        if ((int)k != old && c->nodes[k].up &&
            c->nodes[k].role == REPL_LEADER && c->nodes[k].writable) {
            return true;
        }
    }
    (void)l;
    return false;
}

Test(fencing, fence_refuses_deposed_leader_late_writes)
{
    uint64_t last = 0, x_index = 0, old_term;
    uint64_t fenced_before[CLUSTER_MAX];
    uint8_t x[32] = "X-deposed-leader-late-write";
    unsigned n;
    int l;
    cluster_init(&cl, 3);
    n = cl.n; /* both loops below cover the same nodes */
    cl.use_txport = true;
    cl.fencing = true;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 32, 1, &last);
    old_term = cl.nodes[l].disk.term;

    /* The leader's writes from now on are late: held, then cut off. */
    cl.nodes[l].tx->hold = true;
    cr_assert_eq(cluster_propose(&cl, (unsigned)l, x, sizeof x, &x_index), 0);
    cluster_steps(&cl, 5);
    cluster_isolate(&cl, (unsigned)l, true);
    cr_assert(cluster_step_until(&cl, pred_new_leader, &l, STEPS));
    cr_expect_eq(cl.nodes[l].disk.term, old_term,
                 "the old leader learned "
                 "nothing");
    for (unsigned i = 0; i < n; i++) {
        fenced_before[i] = cl.nodes[i].tx->fenced;
        if ((int)i != l) {
            cr_assert_gt(cl.nodes[i].tx->fence, old_term);
        }
    }
    /* Heal, and let the late writes (stamped old_term) land first. */
    cluster_isolate(&cl, (unsigned)l, false);
    cl.nodes[l].tx->hold = false;
    txport_release(cl.nodes[l].tx);
    cr_assert_gt(xport_mem_net_deliver(cl.net, cl.nodes[l].id, 0, SIZE_MAX), 0);
    for (unsigned i = 0; i < n; i++) {
        bool saw_x = false;
        if ((int)i == l) {
            continue;
        }
        cr_expect_gt(cl.nodes[i].tx->fenced, fenced_before[i],
                     "node %u refused nothing", i);
        for (unsigned k = 0; k < cl.nodes[i].tx->n_ae; k++) {
            const struct txport_ae *a = &cl.nodes[i].tx->ae[k];
            if (a->from == cl.nodes[l].id && a->epoch == old_term &&
                a->prev_index + a->n >= x_index && a->n > 0) {
                saw_x = true; /* the late AppendEntries carrying X */
            }
        }
        cr_expect(saw_x, "node %u: the late write reached the xport", i);
    }
    /* Converge: X is nowhere (never committed, overwritten on l). */
    {
        uint8_t y[16] = "after";
        int l2 = cluster_writable_leader(&cl);
        cr_assert(l2 >= 0 && l2 != l);
        cr_assert_eq(cluster_propose(&cl, (unsigned)l2, y, sizeof y, &last), 0);
        cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    }
    for (unsigned i = 0; i < cl.n; i++) {
        const struct fake_entry *e = fake_disk_get(&cl.nodes[i].disk, x_index);
        cr_assert_not_null(e);
        cr_expect(e->len != sizeof x || memcmp(e->buf, x, sizeof x) != 0,
                  "node %u holds the deposed leader's entry", i);
        check_fence_log(&cl.nodes[i]);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

Test(fencing, fence_set_failure_is_retried_on_tick)
{
    uint64_t last = 0;
    int l, f;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    l = cluster_elect(&cl);
    f = cluster_other(&cl, l, l);
    cl.nodes[f].tx->fail_sets = 1;
    cluster_crash(&cl, (unsigned)l); /* forces a new term on f */
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cluster_steps(&cl, 50);
    cr_expect_geq(cl.nodes[f].repl->io.fence_errors, 1);
    cr_expect_eq(cl.nodes[f].repl->io.fenced_term, cl.nodes[f].disk.term);
    cr_expect_eq(cl.nodes[f].tx->epoch, cl.nodes[f].disk.term);
    cr_expect_eq(cl.nodes[f].tx->fence, cl.nodes[f].disk.term);
    cluster_propose_applied(&cl, (unsigned)cluster_writable_leader(&cl), 3, 32,
                            1, &last);
    cluster_fini(&cl);
}
