/*
 * tests/unit/raft/test_durability.c: the durability modes (repl.h, io.c
 * "Durability modes"): memory mode commits from memory while every disk
 * write is held back and disk mode does not, the documented loss and its
 * limits, the follower's apply off the answer path and the coalesced
 * inner writes. On the deterministic cluster harness, whose fake disks
 * complete writes only when the test lets them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS CLUSTER_STEPS

static struct cluster cl;

/* Returns the leader's commit index after proposing 3 entries with every
 * disk frozen; *last is the last proposed index. */
static uint64_t commit_with_frozen_disks(enum repl_durability d,
                                         uint64_t *last,
                                         int *leader)
{
    struct repl_status st;
    uint64_t prev = 0;
    int l;
    cluster_init(&cl, 3);
    cl.durability = d;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    cluster_freeze_all(&cl, true);
    cluster_propose_n(&cl, (unsigned)l, 3, 32, 2, last);
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_lt(st.last_counted, *last, "never acked inside append");
    for (unsigned s = 0; s < 2000; s++) {
        cluster_step(&cl);
        repl_get_status(cl.nodes[l].repl, &st);
        if (st.commit_index >= *last) {
            break;
        }
    }
    for (unsigned i = 0; i < cl.n; i++) {
        struct repl_status fs;
        repl_get_status(cl.nodes[i].repl, &fs);
        cr_expect_gt(fake_io_pending(cl.nodes[i].io), 0,
                     "node %u: its disk append is still pending", i);
        cr_expect_lt(fake_disk_last_index(&cl.nodes[i].disk), *last);
        cr_expect_lt(fs.last_stored, *last, "last_stored is the disk");
        cr_expect_eq(fs.durability, d);
    }
    *leader = l;
    return st.commit_index;
}

Test(durability, memory_mode_commits_while_every_disk_write_is_pending)
{
    uint64_t last = 0;
    struct repl_status st;
    int l;
    uint64_t commit =
        commit_with_frozen_disks(REPL_DURABILITY_MEMORY, &last, &l);
    cr_expect_geq(commit, last, "memory mode: committed from memory");
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_geq(st.last_counted, last);
    cr_expect_geq(st.last_applied, last, "and applied on the leader");
    cr_expect_eq(cl.nodes[l].n_applied, 5);
    /* The disks then catch up. */
    cluster_freeze_all(&cl, false);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_steps(&cl, 50);
    for (unsigned i = 0; i < cl.n; i++) {
        struct repl_status fs;
        repl_get_status(cl.nodes[i].repl, &fs);
        cr_expect_geq(fake_disk_last_index(&cl.nodes[i].disk), last);
        cr_expect_geq(fs.last_stored, last);
        cr_expect_eq(fs.last_counted, fs.last_stored);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

Test(durability, disk_mode_does_not_commit_before_the_disks)
{
    uint64_t last = 0;
    int l;
    uint64_t commit = commit_with_frozen_disks(REPL_DURABILITY_DISK, &last, &l);
    cr_expect_lt(commit, last, "disk mode: nothing commits from memory");
    cr_expect_eq(cl.nodes[l].n_applied, 2);
    cluster_freeze_all(&cl, false);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_fini(&cl);
}

struct ack
{
    int calls;
    int status;
};

static void ack_cb(void *data, int status, uint64_t index)
{
    struct ack *a = data;
    (void)index;
    a->calls++;
    a->status = status;
}

/* Propose E with every disk frozen and wait until it is acknowledged. */
static uint64_t acked_in_memory_only(int *leader)
{
    struct ack a = {0};
    uint64_t prev = 0, idx = 0;
    uint8_t *buf;
    int l;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    cluster_freeze_all(&cl, true);
    buf = tern_malloc(32);
    memset(buf, 0xee, 32);
    cr_assert_eq(repl_propose(cl.nodes[l].repl, buf, 32, ack_cb, &a, &idx), 0);
    for (unsigned s = 0; s < 2000 && a.calls == 0; s++) {
        cluster_step(&cl);
    }
    cr_assert_eq(a.calls, 1);
    cr_assert_eq(a.status, 0, "acknowledged to the client");
    for (unsigned i = 0; i < cl.n; i++) {
        cr_assert_null(fake_disk_get(&cl.nodes[i].disk, idx), "on no disk yet");
    }
    *leader = l;
    return idx;
}

/* Documented loss (repl.h): all holders crash before their disks wrote
 * the entry. */
Test(durability, memory_mode_majority_crash_before_disk_loses_acked_entry)
{
    int l;
    uint64_t idx = acked_in_memory_only(&l);
    for (unsigned i = 0; i < cl.n; i++) {
        cluster_crash(&cl, i); /* power loss: pending writes lost */
    }
    cluster_start_all(&cl);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cluster_steps(&cl, 200);
    for (unsigned i = 0; i < cl.n; i++) {
        const struct fake_entry *e = fake_disk_get(&cl.nodes[i].disk, idx);
        cr_expect(e == NULL || e->type != RAFT_COMMAND ||
                      ((const uint8_t *)e->buf)[0] != 0xee,
                  "node %u: the acknowledged entry is gone", i);
    }
    cluster_fini(&cl);
}

/* One follower crashing before its disk wrote the entry loses nothing
 * while the leader stays up. */
Test(durability, memory_mode_single_crash_loses_nothing)
{
    int l, f;
    uint64_t idx = acked_in_memory_only(&l);
    uint64_t last = idx;
    f = cluster_other(&cl, l, l);
    cluster_crash(&cl, (unsigned)f);
    cluster_freeze_all(&cl, false);
    cluster_start(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_steps(&cl, 100);
    for (unsigned i = 0; i < cl.n; i++) {
        const struct fake_entry *e = fake_disk_get(&cl.nodes[i].disk, idx);
        cr_assert_not_null(e, "node %u lacks the entry", i);
        cr_expect_eq(e->type, RAFT_COMMAND);
        cr_expect_eq(((const uint8_t *)e->buf)[0], 0xee);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

static uint64_t id_of(int i)
{
    return cl.nodes[i].id;
}

/* A 3-node cluster in mode d where entry *e1 is committed at the leader
 * *l and stored on follower *f, which has not learnt the commit yet; no
 * message is in flight from f to l. */
static void commit_unknown_to_a_follower(enum repl_durability d,
                                         int *l,
                                         int *f,
                                         uint64_t *e1)
{
    uint64_t prev = 0;
    struct repl_status st;
    cluster_init(&cl, 3);
    cl.durability = d;
    *l = cluster_elect(&cl);
    *f = cluster_other(&cl, *l, *l);
    cluster_propose_applied(&cl, (unsigned)*l, 2, 32, 1, &prev);
    cluster_propose_n(&cl, (unsigned)*l, 1, 32, 2, e1);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, e1, STEPS));
    xport_mem_net_complete(cl.net);
    repl_get_status(cl.nodes[*f].repl, &st);
    cr_assert_geq(st.last_counted, *e1);
    cr_assert_lt(cl.nodes[*f].applied_index, *e1, "f learns the commit later");
    cr_assert_eq(xport_mem_net_pending(cl.net, id_of(*f), id_of(*l)), 0);
}

/* A follower answers an AppendEntries before it applies the entries the
 * message newly commits (io.c "Follower apply off the answer path"): its
 * FSM apply fails (the replica fail-stops, refusing every later send), yet
 * the answer is already queued toward the leader; the entry was applied
 * by the held commit index (not by the answer's path). */
Test(durability, memory_mode_follower_answers_before_it_applies)
{
    uint64_t e1 = 0, e2 = 0;
    struct repl_status st;
    int l, f;
    commit_unknown_to_a_follower(REPL_DURABILITY_MEMORY, &l, &f, &e1);
    /* e2's AppendEntries carries commit = e1. */
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 3, &e2);
    cr_assert_geq(xport_mem_net_pending(cl.net, id_of(l), id_of(f)), 1);
    cl.nodes[f].fail_apply = TERN_EINVAL;
    while (xport_mem_net_pending(cl.net, id_of(l), id_of(f)) > 1) {
        cr_assert_eq(xport_mem_net_deliver(cl.net, id_of(l), id_of(f), 1), 1);
    }
    cr_assert_eq(xport_mem_net_deliver(cl.net, id_of(l), id_of(f), 1), 1);
    cr_expect_geq(xport_mem_net_pending(cl.net, id_of(f), id_of(l)), 1,
                  "the answer went out before the failing apply");
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect_neq(st.failed, 0, "the apply did run (and failed)");
    cr_expect_eq(cl.nodes[f].fail_apply, 0);
    cr_expect_geq(cl.nodes[f].repl->io.holds_delivered, 1);
    cluster_fini(&cl);
}

/* With the hold, followers still apply everything, in order, and the
 * leader's commit path is unchanged (same entries, same payloads), under
 * a stream of proposals of varied sizes. */
static void followers_apply_every_entry(enum repl_durability d)
{
    uint64_t last = 0;
    cluster_init(&cl, 3);
    cl.durability = d;
    int l = cluster_elect(&cl);
    for (unsigned k = 0; k < 40; k++) {
        cluster_propose_applied(&cl, (unsigned)l, 1 + k % 3, 64, 10 + k, &last);
    }
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect_eq(cl.nodes[i].applied_index, last, "node %u", i);
        if ((int)i != l) {
            cr_expect_gt(cl.nodes[i].repl->io.holds_delivered, 0, "node %u", i);
        }
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

Test(durability, memory_mode_followers_apply_every_entry)
{
    followers_apply_every_entry(REPL_DURABILITY_MEMORY);
}

/* Coalesced inner writes: a memory-mode append reaches the inner (disk)
 * io only after raft's callback fired, and several of them in submission
 * order; disk mode hands each over at once. */
Test(durability, memory_mode_inner_writes_follow_the_acks_in_order)
{
    uint64_t prev = 0, last = 0;
    struct repl_status st;
    int l;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    cluster_steps(&cl, 50);
    cr_assert_eq(fake_io_pending(cl.nodes[l].io), 0);
    cluster_propose_n(&cl, (unsigned)l, 3, 32, 2, &last);
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_lt(st.last_counted, last, "no callback inside append");
    cr_expect_eq(fake_io_pending(cl.nodes[l].io), 0,
                 "not handed to the disk before the callbacks");
    cr_expect_eq(repl_io_run_deferred(cl.nodes[l].repl), 3);
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_eq(st.last_counted, last);
    cr_expect_eq(fake_io_pending(cl.nodes[l].io), 3, "then all three");
    cr_expect_eq(fake_io_complete(cl.nodes[l].io, 3), 3);
    for (uint64_t i = last - 2; i <= last; i++) {
        const struct fake_entry *e = fake_disk_get(&cl.nodes[l].disk, i);
        cr_assert_not_null(e);
        cr_expect_eq(tern_get_u64((const uint8_t *)e->buf + 8), i - (last - 2),
                     "index %llu in order", (unsigned long long)i);
    }
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_eq(st.last_stored, last);
    cluster_fini(&cl);
}

static int io_cb_order[8];
static int io_cb_n;
static void order_cb(struct raft_io_append *req, int status)
{
    cr_expect_eq(status, 0);
    io_cb_order[io_cb_n++ % 8] = (int)(intptr_t)req->data;
}

/* A truncate (and likewise snapshot_put, close) hands the pending appends
 * to the inner io first: raft_uv orders them against each other. Driven
 * through the wrapper's raft_io directly, on an idle follower. */
Test(durability, memory_mode_truncate_hands_pending_appends_over_first)
{
    struct raft_io_append req[2];
    struct raft_entry e[2];
    uint8_t payload[2][16];
    struct repl *r;
    uint64_t n0;
    int l, f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = cluster_elect(&cl);
    f = cluster_other(&cl, l, l);
    cluster_steps(&cl, 50);
    r = cl.nodes[f].repl;
    cr_assert_eq(fake_io_pending(cl.nodes[f].io), 0);
    n0 = r->io.next_index;
    memset(e, 0, sizeof e);
    for (int k = 0; k < 2; k++) {
        memset(payload[k], 0x40 + k, sizeof payload[k]);
        e[k].term = r->io.term;
        e[k].type = RAFT_COMMAND;
        e[k].buf.base = payload[k];
        e[k].buf.len = sizeof payload[k];
        req[k].data = (void *)(intptr_t)(k + 1);
        cr_assert_eq(
            r->io.outer.append(&r->io.outer, &req[k], &e[k], 1, order_cb), 0);
    }
    cr_expect_eq(io_cb_n, 0, "never inside append");
    cr_expect_eq(fake_io_pending(cl.nodes[f].io), 0);
    cr_assert_eq(r->io.outer.truncate(&r->io.outer, n0 + 1), 0);
    cr_expect_eq(fake_io_pending(cl.nodes[f].io), 3,
                 "both appends, then the truncate");
    cr_expect_eq(fake_io_complete(cl.nodes[f].io, 3), 3);
    cr_expect_eq(io_cb_n, 2, "completions in submission order");
    cr_expect_eq(io_cb_order[0], 1);
    cr_expect_eq(io_cb_order[1], 2);
    cr_expect_eq(fake_disk_last_index(&cl.nodes[f].disk), n0,
                 "the truncate applied after the appends");
    cr_assert_not_null(fake_disk_get(&cl.nodes[f].disk, n0));
    cr_expect_eq(
        ((const uint8_t *)fake_disk_get(&cl.nodes[f].disk, n0)->buf)[0], 0x40);
    cluster_crash(&cl, (unsigned)f); /* its core never saw these appends */
    cluster_fini(&cl);
}

static int dead_status[4];
static int dead_n;
static void dead_cb(struct raft_io_append *req, int status)
{
    (void)req;
    dead_status[dead_n++ % 4] = status;
}

/* A coalesced append whose hand-over to the inner io fails (its raft
 * callback may already have fired) fail-stops the replica; appends that
 * never reached the inner io still get their callback, in order, at the
 * latest from the close (before the io's close callback). */
Test(durability, memory_mode_failed_hand_over_fail_stops)
{
    struct raft_io_append req[2];
    struct raft_entry e[2];
    uint8_t payload[2][16];
    struct repl_status st;
    struct repl *r;
    int l, f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = cluster_elect(&cl);
    f = cluster_other(&cl, l, l);
    cluster_steps(&cl, 50);
    r = cl.nodes[f].repl;
    memset(e, 0, sizeof e);
    for (int k = 0; k < 2; k++) {
        memset(payload[k], 0x50 + k, sizeof payload[k]);
        e[k].term = r->io.term;
        e[k].type = RAFT_COMMAND;
        e[k].buf.base = payload[k];
        e[k].buf.len = sizeof payload[k];
        cr_assert_eq(
            r->io.outer.append(&r->io.outer, &req[k], &e[k], 1, dead_cb), 0);
    }
    cl.nodes[f].io->fail_next_submit = RAFT_IOERR;
    cr_assert_eq(r->io.outer.truncate(&r->io.outer, r->io.next_index), 0);
    repl_get_status(r, &st);
    cr_expect_neq(st.failed, 0, "fail-stopped");
    cr_expect_eq(fake_io_pending(cl.nodes[f].io), 1, "only the truncate");
    cr_expect_eq(dead_n, 0, "not inside truncate");
    cluster_crash(&cl, (unsigned)f); /* close: the callbacks fire first */
    cr_expect_eq(dead_n, 2);
    cr_expect_neq(dead_status[0], 0);
    cr_expect_neq(dead_status[1], 0);
    cluster_fini(&cl);
}

/* ---- disk mode: the order of the commit path's steps (io.c) ---------- */

static struct
{
    int leader;
    uint64_t first;
    size_t pending[CLUSTER_MAX];
    unsigned calls;
} order;

static void record_sends_at_append(void *arg, uint64_t first, unsigned n)
{
    (void)arg;
    (void)n;
    order.calls++;
    order.first = first;
    for (unsigned i = 0; i < cl.n; i++) {
        order.pending[i] =
            (int)i == order.leader
                ? 0
                : xport_mem_net_pending(cl.net, id_of(order.leader), id_of(i));
    }
}

/* The leader hands its own write of a proposal to the disk only after the
 * AppendEntries carrying it went to every follower (io.c "A leader's own
 * write after its AppendEntries"): the followers' disk writes, which the
 * commit waits for, start one disk submission earlier. The entry still
 * commits and applies everywhere. */
Test(durability, disk_mode_leader_writes_after_its_append_entries_left)
{
    uint64_t prev = 0, e = 0;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_DISK;
    int l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    cluster_steps(&cl, 50);
    xport_mem_net_complete(cl.net);
    for (unsigned i = 0; i < cl.n; i++) {
        if ((int)i != l) {
            while (xport_mem_net_pending(cl.net, id_of(l), id_of(i)) > 0) {
                cr_assert_eq(
                    xport_mem_net_deliver(cl.net, id_of(l), id_of(i), 1), 1);
            }
        }
    }
    memset(&order, 0, sizeof order);
    order.leader = l;
    cl.nodes[l].io->on_append = record_sends_at_append;
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 7, &e);
    cr_assert_eq(order.calls, 1, "one disk write for the proposal");
    cr_expect_eq(order.first, e);
    for (unsigned i = 0; i < cl.n; i++) {
        if ((int)i != l) {
            cr_expect_geq(order.pending[i], 1,
                          "node %u: its AppendEntries left before the "
                          "leader's own write",
                          i);
        }
    }
    cl.nodes[l].io->on_append = NULL;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &e, STEPS));
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* A deferred write that the disk refuses to start fail-stops the leader
 * like a failed write (guard.c item 7); raft hears of it from the next
 * loop turn, and the others elect a leader that commits. */
Test(durability, disk_mode_deferred_write_that_fails_to_start_fail_stops)
{
    uint64_t prev = 0, e = 0, e2 = 0;
    struct repl_status st;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_DISK;
    int l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    cl.nodes[l].io->fail_next_submit = RAFT_IOERR;
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 7, &e);
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_neq(st.failed, 0, "the leader fail-stopped");
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS * 4));
    int l2 = cluster_writable_leader(&cl);
    cr_assert_neq(l2, l);
    cluster_propose_n(&cl, (unsigned)l2, 1, 32, 8, &e2);
    cr_expect(cluster_step_until(&cl, pred_leader_committed, &e2, STEPS),
              "the new leader commits");
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* A follower applies the entries an AppendEntries newly commits while it
 * writes the message's own entries, not between the write and its answer
 * (io.c "Follower apply off the answer path", disk mode): with its disk
 * frozen, the commit is applied and no answer has gone yet; the answer
 * leaves when the write completes. */
Test(durability, disk_mode_follower_applies_while_its_append_is_written)
{
    uint64_t e1 = 0, e2 = 0;
    int l, f;
    commit_unknown_to_a_follower(REPL_DURABILITY_DISK, &l, &f, &e1);
    cl.nodes[f].frozen = true;
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 3, &e2);
    cr_assert_geq(xport_mem_net_pending(cl.net, id_of(l), id_of(f)), 1);
    while (xport_mem_net_pending(cl.net, id_of(l), id_of(f)) > 0) {
        cr_assert_eq(xport_mem_net_deliver(cl.net, id_of(l), id_of(f), 1), 1);
    }
    cr_expect_eq(fake_io_pending(cl.nodes[f].io), 1, "e2 is being written");
    cr_expect_geq(cl.nodes[f].applied_index, e1,
                  "e1 applied while e2 is written");
    cr_expect_eq(xport_mem_net_pending(cl.net, id_of(f), id_of(l)), 0,
                 "no answer before the write");
    cr_expect_geq(cl.nodes[f].repl->io.holds_delivered, 1);
    cl.nodes[f].frozen = false;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &e2, STEPS));
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

Test(durability, disk_mode_followers_apply_every_entry)
{
    followers_apply_every_entry(REPL_DURABILITY_DISK);
}

/* The held commit delivered after a write completes is not contact with
 * the leader: the follower's election timer keeps the value the real
 * AppendEntries gave it (else a follower whose leader died meanwhile
 * would wait a whole timeout more before it stands). */
Test(durability, disk_mode_held_commit_does_not_reset_the_election_timer)
{
    uint64_t prev = 0, e1 = 0, e2 = 0;
    int l, f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_DISK;
    l = cluster_elect(&cl);
    f = cluster_other(&cl, l, l);
    cluster_propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    cluster_steps(&cl, 50);
    xport_mem_net_complete(cl.net);
    cl.nodes[f].frozen = true;
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 2, &e1);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &e1, STEPS));
    cr_assert_lt(cl.nodes[f].applied_index, e1);
    cr_assert_geq(fake_io_pending(cl.nodes[f].io), 1, "e1 is being written");
    /* e2 brings commit = e1, which f cannot apply yet: held. */
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 3, &e2);
    while (xport_mem_net_pending(cl.net, id_of(l), id_of(f)) > 0) {
        cr_assert_eq(xport_mem_net_deliver(cl.net, id_of(l), id_of(f), 1), 1);
    }
    cr_assert_lt(cl.nodes[f].applied_index, e1, "e1 is not durable on f");
    raft_time timer = cl.nodes[f].repl->raft.election_timer_start;
    uint64_t held = cl.nodes[f].repl->io.holds_delivered;
    cl.clock += 40; /* no message from the leader meanwhile */
    cr_assert_geq(fake_io_complete(cl.nodes[f].io, 1), 1);
    cr_expect_geq(cl.nodes[f].applied_index, e1,
                  "applied once durable, from the held commit");
    cr_expect_gt(cl.nodes[f].repl->io.holds_delivered, held);
    cr_expect_eq(cl.nodes[f].repl->raft.election_timer_start, timer,
                 "the election timer is the real message's");
    cl.nodes[f].frozen = false;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &e2, STEPS));
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}
