/*
 * tests/unit/raft/test_append_split.c: oversized AppendEntries split into
 * parts that each fit the xport's message size (io.c "Oversized
 * AppendEntries"), on the deterministic cluster harness with a txport
 * whose messages are small.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS CLUSTER_STEPS

static struct cluster cl;

#define SMALL_MAX 2048

Test(append_split, lagging_follower_catches_up_through_split_append_entries)
{
    uint64_t last = 0;
    uint64_t split_before;
    unsigned chained = 0, with_entries = 0;
    int l, f;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    cl.max_message = SMALL_MAX;
    l = cluster_elect(&cl);
    f = cluster_other(&cl, l, l);
    cluster_propose_applied(&cl, (unsigned)l, 5, 96, 1, &last);
    cluster_crash(&cl, (unsigned)f);
    cluster_propose_applied(&cl, (unsigned)l, 300, 96, 2, &last);
    split_before = cl.nodes[l].repl->io.ae_split;
    cluster_start(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_steps(&cl, 100);

    /* ~36 KB of entries behind, 2 KB per message: many parts. */
    cr_expect_gt(cl.nodes[l].repl->io.ae_split, split_before);
    cr_expect_geq(cl.nodes[l].repl->io.ae_parts, 300 * 120 / SMALL_MAX);
    {
        const struct txport *t = cl.nodes[f].tx;
        const struct fake_disk *ld = &cl.nodes[l].disk;
        for (unsigned k = 0; k < t->n_ae; k++) {
            const struct txport_ae *a = &t->ae[k];
            cr_assert_leq(a->len, SMALL_MAX);
            cr_assert_leq(a->commit, a->prev_index + a->n,
                          "leader_commit clamped to the part");
            if (a->prev_index > 0 && fake_disk_get(ld, a->prev_index)) {
                cr_assert_eq(a->prev_term,
                             fake_disk_get(ld, a->prev_index)->term,
                             "prev_log_term of part at %llu",
                             (unsigned long long)a->prev_index);
            }
            if (a->n > 0) {
                with_entries++;
            }
            if (k > 0 && a->n > 0 && t->ae[k - 1].n > 0 &&
                a->prev_index == t->ae[k - 1].prev_index + t->ae[k - 1].n) {
                chained++; /* part k continues part k-1 */
            }
        }
    }
    cr_expect_geq(chained, 300 * 120 / SMALL_MAX - 1);
    cr_expect_gt(with_entries, 0);
    /* Exact bytes and order: the follower's durable log equals the
     * leader's, entry by entry. */
    {
        const struct fake_disk *ld = &cl.nodes[l].disk;
        const struct fake_disk *fd = &cl.nodes[f].disk;
        cr_assert_eq(fake_disk_last_index(fd), fake_disk_last_index(ld));
        for (uint64_t i = ld->start; i <= fake_disk_last_index(ld); i++) {
            const struct fake_entry *a = fake_disk_get(ld, i);
            const struct fake_entry *b = fake_disk_get(fd, i);
            cr_assert_not_null(b, "index %llu missing", (unsigned long long)i);
            cr_assert_eq(a->term, b->term);
            cr_assert_eq(a->type, b->type);
            cr_assert_eq(a->len, b->len);
            cr_assert(memcmp(a->buf, b->buf, a->len) == 0,
                      "index %llu bytes differ", (unsigned long long)i);
        }
    }
    cr_expect_eq(cl.nodes[f].stream_len, cl.nodes[l].stream_len);
    cr_expect(memcmp(cl.nodes[f].stream, cl.nodes[l].stream,
                     cl.nodes[l].stream_len) == 0);
    cr_expect_eq(cl.nodes[f].n_applied, 305);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* Steps until every node applied last, expecting follower f never to say
 * caught_up before it (raft and FSM) had applied last. */
static void expect_not_early(int f, uint64_t last)
{
    struct repl_status st;
    for (unsigned s = 0; s < STEPS; s++) {
        cluster_step(&cl);
        repl_get_status(cl.nodes[f].repl, &st);
        if (st.caught_up && st.last_applied < last &&
            cl.nodes[f].applied_index < last) {
            cr_expect_fail(
                "caught_up with mark %llu at applied %llu, the "
                "cluster committed %llu before the follower "
                "started",
                (unsigned long long)st.catch_up_to,
                (unsigned long long)st.last_applied, (unsigned long long)last);
            return;
        }
        if (pred_all_applied(&cl, &last)) {
            return;
        }
    }
}

/* Three nodes over the txport with SMALL_MAX messages, a leader (returned)
 * and *f another node, 5 entries applied everywhere (*last). */
static int split_cluster(int *f, uint64_t *last)
{
    int l;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    cl.max_message = SMALL_MAX;
    l = cluster_elect(&cl);
    *f = cluster_other(&cl, l, l);
    cluster_propose_applied(&cl, (unsigned)l, 5, 96, 1, last);
    return l;
}

/* repl_status.caught_up with split AppendEntries: each part carries a
 * commit index capped at its own last entry, so a follower that comes
 * back behind must not take the first part's for the leader's (restarted
 * while the others commit, or cut off, restarted and let back in). */
Test(append_split, restarted_follower_caught_up_once_applied)
{
    uint64_t last = 0;
    int f, l = split_cluster(&f, &last);
    cluster_crash(&cl, (unsigned)f);
    cluster_propose_applied(&cl, (unsigned)l, 300, 96, 2, &last);
    cluster_start(&cl, (unsigned)f);
    expect_not_early(f, last);
    cluster_fini(&cl);
}

Test(append_split, cut_follower_not_caught_up_after_first_part)
{
    uint64_t last = 0;
    int f, l = split_cluster(&f, &last);
    cluster_isolate(&cl, (unsigned)f, true);
    cluster_propose_n(&cl, (unsigned)l, 300, 96, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));
    cluster_steps(&cl, 50);
    cluster_crash(&cl, (unsigned)f);
    cluster_start(&cl, (unsigned)f);
    cluster_isolate(&cl, (unsigned)f, false);
    expect_not_early(f, last);
    cluster_fini(&cl);
}
