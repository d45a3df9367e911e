/*
 * tests/unit/raft/test_cluster.c: the repl io wrapper, guard and bulk
 * catch-up on the deterministic cluster harness (fake disks, mem xport,
 * manual clock).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS 200000

static struct cluster cl;

static void propose_n(struct cluster *c,
                      unsigned leader,
                      unsigned n,
                      size_t size,
                      uint64_t tag,
                      uint64_t *last)
{
    uint8_t buf[4096];
    cr_assert(size >= 16 && size <= sizeof buf);
    for (unsigned k = 0; k < n; k++) {
        memset(buf, (int)(k & 0xff), size);
        tern_put_u64(buf, tag);
        tern_put_u64(buf + 8, k);
        cr_assert_eq(cluster_propose(c, leader, buf, size, last), 0);
    }
}

static void start_all(struct cluster *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        cluster_start(c, i);
    }
}

/* Step until some node is a writable leader (asserted); returns it. */
static int wait_writable_leader(struct cluster *c)
{
    cr_assert(cluster_step_until(c, pred_writable_leader, NULL, STEPS));
    return cluster_writable_leader(c);
}

/* Start every node and wait for a writable leader; returns it. */
static int start_all_elect(struct cluster *c)
{
    start_all(c);
    return wait_writable_leader(c);
}

/* n unconditional steps. */
static void steps(struct cluster *c, unsigned n)
{
    for (unsigned s = 0; s < n; s++) {
        cluster_step(c);
    }
}

/* propose_n, then step until every node applied up to *last (asserted). */
static void propose_applied(struct cluster *c,
                            unsigned leader,
                            unsigned n,
                            size_t size,
                            uint64_t tag,
                            uint64_t *last)
{
    propose_n(c, leader, n, size, tag, last);
    cr_assert(cluster_step_until(c, pred_all_applied, last, STEPS));
}

static void assert_streams_equal(struct cluster *c)
{
    for (unsigned i = 1; i < c->n; i++) {
        cr_expect_eq(c->nodes[i].stream_len, c->nodes[0].stream_len,
                     "node %u stream %zu vs %zu", i, c->nodes[i].stream_len,
                     c->nodes[0].stream_len);
        if (c->nodes[i].stream_len == c->nodes[0].stream_len) {
            cr_expect(memcmp(c->nodes[i].stream, c->nodes[0].stream,
                             c->nodes[0].stream_len) == 0);
        }
    }
}

TestSuite(cluster, .timeout = 60);

Test(cluster, election_replication_commit)
{
    uint64_t last = 0;
    int l;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    {
        /* raft_uv 0.15 needs 8-byte multiples: other lengths are refused
         * up front (and the buffer stays the caller's). */
        void *odd = tern_malloc(13);
        uint64_t idx = 0;
        cr_expect_eq(repl_propose(cl.nodes[l].repl, odd, 13, NULL, NULL, &idx),
                     TERN_EINVAL);
        tern_free(odd);
    }
    propose_n(&cl, (unsigned)l, 20, 64, 1, &last);
    cr_assert_geq(last, 3);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect_eq(cl.nodes[i].n_applied, 20);
        struct repl_status st;
        repl_get_status(cl.nodes[i].repl, &st);
        cr_expect_geq(st.commit_index, last);
        cr_expect_eq(st.last_applied, last);
        cr_expect_geq(st.last_stored, last);
        cr_expect_eq(st.leader_id, cl.nodes[l].id);
        cr_expect_eq(st.role, i == (unsigned)l ? REPL_LEADER : REPL_FOLLOWER);
    }
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

Test(cluster, leader_failure_new_leader)
{
    uint64_t last = 0;
    int l, l2;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)l, 10, 32, 1, &last);
    cluster_crash(&cl, (unsigned)l);
    l2 = wait_writable_leader(&cl);
    cr_assert_neq(l2, l);
    propose_applied(&cl, (unsigned)l2, 10, 32, 2, &last);
    cluster_start(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect_eq(cl.nodes[i].n_applied, 20, "node %u applied %llu", i,
                     (unsigned long long)cl.nodes[i].n_applied);
    }
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

static bool caught_up(struct cluster *c, unsigned i)
{
    struct repl_status st;
    repl_get_status(c->nodes[i].repl, &st);
    return st.caught_up;
}

/* repl_status.caught_up (what node/ judges logins by): a follower that
 * was down while entries were committed is not caught up until it has
 * applied what the leader had committed when it first heard from it;
 * isolated, it hears no leader and stays so; a leader is caught up once
 * writable; once caught up, a node stays so. */
Test(cluster, restarted_follower_catches_up_before_it_says_so)
{
    uint64_t last = 0;
    struct repl_status st;
    unsigned f;
    int l;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)l, 5, 32, 1, &last);
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect(caught_up(&cl, i), "node %u", i);
    }
    f = (unsigned)cluster_other(&cl, l, -1);
    cluster_crash(&cl, f);
    propose_n(&cl, (unsigned)l, 200, 256, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));

    cluster_isolate(&cl, f, true);
    cluster_start(&cl, f);
    steps(&cl, 3000);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect(!st.caught_up, "isolated since its start: no leader heard");
    cr_expect_eq(st.catch_up_to, 0);
    cr_expect(st.last_applied < last);
    cr_expect(caught_up(&cl, (unsigned)l), "the leader stays caught up");

    cluster_isolate(&cl, f, false);
    for (unsigned s = 0; s < STEPS; s++) {
        cluster_step(&cl);
        repl_get_status(cl.nodes[f].repl, &st);
        if (st.catch_up_to != 0) {
            break;
        }
        cr_assert(!st.caught_up, "caught up without a mark, applied %llu",
                  (unsigned long long)st.last_applied);
    }
    cr_expect_geq(st.catch_up_to, last,
                  "the mark covers what was committed before the start");
    cr_expect_eq(st.caught_up, st.last_applied >= st.catch_up_to);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect(caught_up(&cl, f));

    /* Sticky: cut off again, it still says so. */
    cluster_isolate(&cl, f, true);
    steps(&cl, 3000);
    cr_expect(caught_up(&cl, f));
    cluster_isolate(&cl, f, false);

    /* Everyone down and back: the new leader is caught up once writable,
     * each follower once it applied its mark. */
    for (unsigned i = 0; i < cl.n; i++) {
        cluster_crash(&cl, i);
    }
    cluster_start_all(&cl);
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect(!caught_up(&cl, i), "node %u before any election", i);
    }
    l = wait_writable_leader(&cl);
    cr_expect(caught_up(&cl, (unsigned)l));
    propose_applied(&cl, (unsigned)l, 1, 32, 3, &last);
    for (unsigned i = 0; i < cl.n; i++) {
        cr_expect(caught_up(&cl, i), "node %u after the restart", i);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

Test(cluster, barrier_gates_writes)
{
    int l;
    uint64_t idx;
    cluster_init(&cl, 3);
    start_all(&cl);
    cr_assert(cluster_step_until(&cl, pred_any_leader, NULL, STEPS));
    l = cluster_leader(&cl);
    /* The leader's barrier write cannot complete: no writes. */
    cl.nodes[l].frozen = true;

    cr_expect(!cl.nodes[l].writable);
    {
        void *buf = tern_malloc(8);
        cr_expect_eq(repl_propose(cl.nodes[l].repl, buf, 8, NULL, NULL, &idx),
                     TERN_ENOTLEADER);
        tern_free(buf);
    }
    for (unsigned s = 0; s < 100; s++) { /* 100 ms < election timeout */
        cluster_step(&cl);
        cr_assert(!cl.nodes[l].writable);
    }
    cr_expect_eq(cl.nodes[l].role, REPL_LEADER);
    cl.nodes[l].frozen = false;
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cr_expect_eq(cluster_writable_leader(&cl), l);
    cluster_fini(&cl);
}

/* ---- Figure 8 ---------------------------------------------------------- */

struct node_pred
{
    unsigned i;
};

static bool pred_node_leader(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].up && c->nodes[i].role == REPL_LEADER;
}

static bool pred_node_writable(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].up && c->nodes[i].role == REPL_LEADER &&
           c->nodes[i].writable;
}

static bool pred_index3_applied(struct cluster *c, void *arg)
{
    (void)arg;
    return c->applied_set[3];
}

/* The Raft paper's Figure 8 schedule with three nodes S1..S3 (indexes 0..2):
 *  1. S1 leads term 2 (barrier at 2 committed everywhere); it appends X at
 *     index 3 (term 2) durably on itself only, then crashes.
 *  2. S2 leads term 3 with S3's vote, persists its barrier at index 3
 *     (term 3) without replicating it, then crashes.
 *  3. S1 restarts and leads term >= 4 with S3's vote. Its own barrier
 *     write (index 4) never completes. S3 stores 3 (X) and 4 and acks 4.
 *     0.15 then commits index 3 at S1's last_stored (3): X "committed" and
 *     applied, though it is not from S1's term. S1 crashes.
 *  4. S3 is cut off, S1 and S2 restart: S2's log (3, term 3) beats S1's
 *     (3, term 2), S2 wins and overwrites index 3 on S1.
 * Returns whether X was applied anywhere and whether it was lost. */
static void figure8(bool guard, bool *applied, bool *lost)
{
    struct node_pred p0 = {0}, p1 = {1};
    uint64_t last = 0;
    uint8_t x[16] = "X-entry-term-2";
    const struct fake_entry *e;

    cluster_init(&cl, 3);
    cl.guard = guard;
    cl.nodes[0].timeout_offset = 0;
    cl.nodes[1].timeout_offset = 40;
    cl.nodes[2].timeout_offset = 120;
    /* 1. */
    cluster_start(&cl, 0);
    cluster_start(&cl, 1);
    cluster_start(&cl, 2);
    cr_assert(cluster_step_until(&cl, pred_node_writable, &p0, STEPS));
    last = 2;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_isolate(&cl, 0, true);
    cr_assert_eq(cluster_propose(&cl, 0, x, sizeof x, &last), 0);
    cr_assert_eq(last, 3);
    for (unsigned s = 0; s < 20; s++) {
        cluster_step(&cl); /* S1 persists X; the AEs go nowhere */
    }
    cr_assert_eq(fake_disk_last_index(&cl.nodes[0].disk), 3);
    cluster_crash(&cl, 0);
    cluster_isolate(&cl, 0, false);

    /* 2. S2 wins term 3 with S3's vote, keeps its barrier to itself. */
    /* 0.15 followers refuse (pre-)votes while they remember a leader:
     * restart S3 so that it forgets S1 and S2 (which times out first)
     * gets its vote. */
    cluster_crash(&cl, 2);
    cluster_start(&cl, 2);
    cr_assert(cluster_step_until(&cl, pred_node_leader, &p1, STEPS));
    cluster_link(&cl, 1, 2, false);
    xport_mem_net_drop(cl.net, cl.nodes[1].id, 0, SIZE_MAX);
    steps(&cl, 20);
    e = fake_disk_get(&cl.nodes[1].disk, 3);
    cr_assert_not_null(e);
    cr_assert_eq(e->type, RAFT_BARRIER);
    cr_assert_eq(fake_disk_last_index(&cl.nodes[2].disk), 2);
    cluster_crash(&cl, 1);
    cluster_link(&cl, 1, 2, true);

    /* 3. S1 back, wins with S3, its own disk frozen once it leads. */
    cluster_start(&cl, 0);
    cr_assert(cluster_step_until(&cl, pred_node_leader, &p0, STEPS));
    cl.nodes[0].frozen = true;
    if (!guard) {
        cr_assert(cluster_step_until(&cl, pred_index3_applied, NULL, 2000),
                  "without the guard 0.15 should commit the old entry");
    } else {
        steps(&cl, 2000);
        cr_assert_eq(cl.nodes[0].role, REPL_LEADER,
                     "the guard must not depose the leader");
        cr_assert_gt(repl_guard_drops(cl.nodes[0].repl), 0);
    }
    e = fake_disk_get(&cl.nodes[2].disk, 4);
    cr_assert_not_null(e, "S3 should hold S1's current-term entry");
    *applied = cl.applied_set[3];
    cluster_crash(&cl, 0);

    /* 4. */
    cluster_isolate(&cl, 2, true);
    cluster_start(&cl, 0);
    cluster_start(&cl, 1);
    cr_assert(cluster_step_until(&cl, pred_node_writable, &p1, STEPS));
    cluster_crash(&cl, 2); /* out of the picture: S1 and S2 must agree */
    last = fake_disk_last_index(&cl.nodes[1].disk);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    e = fake_disk_get(&cl.nodes[0].disk, 3);
    cr_assert_not_null(e);
    *lost = *applied && e->type != RAFT_COMMAND;
    cluster_fini(&cl);
}

Test(cluster, figure8_without_guard_loses_committed_entry)
{
    bool applied = false, lost = false;
    figure8(false, &applied, &lost);
    cr_expect(applied, "old-term entry reported committed (applied)");
    cr_expect(lost, "and later overwritten");
}

Test(cluster, figure8_with_guard_never_commits_old_entry)
{
    bool applied = true, lost = true;
    figure8(true, &applied, &lost);
    cr_expect(!applied, "old-term entry must not be committed");
    cr_expect(!lost);
}

/* ---- 0.15 mitigations #467 / #429 --------------------------------------- */

static int other_follower(struct cluster *c, int a, int b)
{
    for (unsigned k = 0; k < c->n; k++) {
        if ((int)k != a && (int)k != b) {
            return (int)k;
        }
    }
    return -1;
}

/* A follower whose append is still being persisted when the leader dies.
 * hold: the #467 mitigation on. Returns whether it became candidate while
 * the append was pending. */
static bool pending_append_then_leader_dies(bool hold, uint64_t *rewrites)
{
    uint64_t last = 0;
    int l, f;
    bool candidate = false;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    cl.nodes[f].repl->guard.hold_ticks = hold;
    cl.nodes[f].frozen = true;
    propose_n(&cl, (unsigned)l, 1, 32, 9, &last);
    steps(&cl, 50);
    cr_assert_gt(fake_io_pending(cl.nodes[f].io), 0);
    /* f's timer runs out first: the other follower, whose leader is
     * silent by then, would otherwise elect itself with f's vote before f
     * ever stands (lost.c item 4). */
    cl.nodes[f].repl->raft.follower_state.randomized_election_timeout = 150;
    cl.nodes[other_follower(&cl, l, f)]
        .repl->raft.follower_state.randomized_election_timeout = 299;
    cluster_crash(&cl, (unsigned)l);
    for (unsigned s = 0; s < 3000; s++) {
        cluster_step(&cl);
        if (cl.nodes[f].role == REPL_CANDIDATE ||
            cl.nodes[f].role == REPL_LEADER) {
            candidate = true;
        }
    }
    *rewrites = repl_vote_rewrites(cl.nodes[f].repl);
    if (hold) {
        cr_expect_gt(cl.nodes[f].repl->io.ticks_withheld, 0);
    }
    /* Once the write settles the cluster recovers either way. */
    cl.nodes[f].frozen = false;
    cluster_start(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
    return candidate;
}

Test(cluster, tick_withheld_while_persisting)
{
    uint64_t rewrites = 0;
    cr_expect(!pending_append_then_leader_dies(true, &rewrites),
              "no candidacy while entries are being persisted (#467)");
}

Test(cluster, vote_rewrite_advertises_durable_index)
{
    uint64_t rewrites = 0;
    cr_expect(pending_append_then_leader_dies(false, &rewrites));
    cr_expect_gt(rewrites, 0, "RequestVote rewritten to durable index (#429)");
}

/* ---- snapshots by bytes and bulk catch-up ---------------------------------
 */

Test(cluster, snapshot_threshold_is_bytes)
{
    uint64_t last = 0;
    int l;
    cluster_init(&cl, 3);
    cl.snapshot_bytes = 1 << 20; /* far above 150 x 100 bytes */
    l = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)l, 150, 100, 1, &last);
    steps(&cl, 200);
    /* 150 entries > raft's entry threshold (64), but too few bytes. */
    cr_expect_eq(cl.nodes[l].disk.snap_index, 0);
    cluster_fini(&cl);

    cluster_init(&cl, 3);
    cl.snapshot_bytes = 2000;
    l = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)l, 150, 100, 1, &last);
    steps(&cl, 200);
    cr_expect_gt(cl.nodes[l].disk.snap_index, 0);
    cluster_fini(&cl);
}

/* Three nodes that snapshot every ~2000 bytes and keep 8 trailing
 * entries, so restarts and lagging followers go through InstallSnapshot
 * and the bulk catch-up; bulk_chunk: bytes per BULK_DATA (0: default). */
static void init_snapshotting(struct cluster *c, uint64_t bulk_chunk)
{
    cluster_init(c, 3);
    c->snapshot_bytes = 2000;
    c->trailing = 8;
    if (bulk_chunk != 0) {
        c->bulk_chunk = bulk_chunk;
    }
}

Test(cluster, bulk_catch_up_through_install_snapshot)
{
    uint64_t last = 0;
    int l, f;
    init_snapshotting(&cl, 700);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 5, 100, 1, &last);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 200, 100, 2, &last);
    steps(&cl, 200);
    cr_assert_gt(cl.nodes[l].disk.snap_index, 20);
    cr_assert_gt(cl.nodes[l].disk.start,
                 fake_disk_last_index(&cl.nodes[f].disk) + 1,
                 "the follower must need a snapshot");
    cluster_start(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_eq(cl.nodes[f].n_restores, 1);
    cr_expect_eq(cl.nodes[f].repl->bulk.completed, 1,
                 "the install went through the bulk fetch");
    cr_expect_gt(cl.nodes[f].disk.snap_index, 0);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    /* Replication continues after the install. */
    propose_applied(&cl, (unsigned)l, 10, 100, 3, &last);
    assert_streams_equal(&cl);
    cluster_fini(&cl);
}

/* ---- proposals: failure paths ------------------------------------------- */

struct prop_result
{
    int calls;
    int status;
    uint64_t index;
};

static void prop_cb(void *data, int status, uint64_t index)
{
    struct prop_result *p = data;
    p->calls++;
    p->status = status;
    p->index = index;
}

Test(cluster, propose_callbacks_and_close)
{
    struct prop_result ok = {0}, pending = {0};
    uint64_t idx = 0, last;
    void *buf;
    int l, f;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);

    buf = tern_malloc(8);
    cr_expect_eq(repl_propose(cl.nodes[f].repl, buf, 8, prop_cb, &ok, &idx),
                 TERN_ENOTLEADER);
    tern_free(buf);

    buf = tern_malloc(8);
    memset(buf, 1, 8);
    cr_assert_eq(repl_propose(cl.nodes[l].repl, buf, 8, prop_cb, &ok, &idx), 0);
    last = idx;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_eq(ok.calls, 1);
    cr_expect_eq(ok.status, 0);
    cr_expect_eq(ok.index, idx);

    /* Cut the leader off: the next proposal cannot commit; close fails it. */
    cluster_isolate(&cl, l, true);
    buf = tern_malloc(8);
    memset(buf, 2, 8);
    cr_assert_eq(
        repl_propose(cl.nodes[l].repl, buf, 8, prop_cb, &pending, &idx), 0);
    steps(&cl, 20);
    cr_expect_eq(pending.calls, 0);
    cluster_crash(&cl, (unsigned)l);
    cr_expect_eq(pending.calls, 1);
    cr_expect_eq(pending.status, TERN_ESHUTDOWN);
    cluster_fini(&cl);
}

/* What node/ does when a step-down fails its writes: answer the client
 * (which asks for the status, and so polls) and maybe propose the next
 * batch, from inside the callback. libraft 0.15 fails them while it still
 * says leader with its progress array freed: a barrier or an apply from
 * there dereferenced NULL (a SIGSTOPped leader resumed under load). */
struct stepdown_probe
{
    struct repl *r;
    int calls;
    int status;
    int propose_rv;
    enum repl_role role_seen;
};

static void stepdown_cb(void *data, int status, uint64_t index)
{
    struct stepdown_probe *p = data;
    struct repl_status st;
    void *buf = tern_calloc(1, 8);
    uint64_t idx;
    (void)index;
    p->calls++;
    p->status = status;
    repl_get_status(p->r, &st);
    p->role_seen = st.role;
    p->propose_rv = repl_propose(p->r, buf, 8, NULL, NULL, &idx);
    if (p->propose_rv != 0) {
        tern_free(buf);
    }
}

Test(cluster, stepdown_callbacks_may_reenter)
{
    struct stepdown_probe probe[4] = {{0}};
    uint64_t idx = 0;
    int l;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);

    /* Cut the leader off with writes pending: it steps down after an
     * election timeout without a quorum's contact and fails them. */
    cluster_isolate(&cl, l, true);
    for (unsigned i = 0; i < 4; i++) {
        void *buf = tern_calloc(1, 8);
        probe[i].r = cl.nodes[l].repl;
        cr_assert_eq(repl_propose(cl.nodes[l].repl, buf, 8, stepdown_cb,
                                  &probe[i], &idx),
                     0);
    }
    for (unsigned n = 0; n < STEPS && probe[3].calls == 0; n++) {
        cluster_step(&cl);
    }
    for (unsigned i = 0; i < 4; i++) {
        cr_expect_eq(probe[i].calls, 1, "write %u answered once", i);
        cr_expect_eq(probe[i].status, TERN_ELEADERSHIPLOST, "%s",
                     tern_strerror(probe[i].status));
        cr_expect_eq(probe[i].propose_rv, TERN_ELEADERSHIPLOST,
                     "a proposal from inside the step-down is refused");
    }
    /* The poll after the step-down catches up: a follower now. */
    steps(&cl, 100);
    struct repl_status st;
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_neq(st.role, REPL_LEADER);
    cluster_isolate(&cl, l, false);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cluster_fini(&cl);
}

Test(cluster, failed_apply_fail_stops_then_restart_catches_up)
{
    uint64_t last = 0;
    struct repl_status st;
    int l, f;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    cl.nodes[f].fail_apply = -5; /* -EIO once */
    propose_n(&cl, (unsigned)l, 5, 32, 1, &last);
    steps(&cl, 500);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect_eq(st.fsm_error, -5);
    cr_expect_eq(st.failed, -5);
    cr_expect_eq(st.role, REPL_UNAVAILABLE);
    cr_expect_eq(cl.nodes[f].role, REPL_UNAVAILABLE);
    cr_expect_lt(cl.nodes[f].n_applied, 5);
    /* The other two carry on. */
    propose_n(&cl, (unsigned)l, 5, 32, 2, &last);
    cluster_crash(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_start(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_eq(cl.nodes[f].n_applied, 10);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- leadership transfer, bulk fetch after a loss ------------------------ */

Test(cluster, transfer_moves_writable_leadership)
{
    uint64_t last = 0;
    int l, f, l2;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 3, 32, 1, &last);
    cr_assert_eq(repl_transfer(cl.nodes[l].repl, cl.nodes[f].id), 0);
    cr_expect(!cl.nodes[l].writable, "no writes during a transfer");
    cr_expect_eq(repl_transfer(cl.nodes[f].repl, 0), TERN_ENOTLEADER);
    {
        struct node_pred p = {(unsigned)f};
        cr_assert(cluster_step_until(&cl, pred_node_writable, &p, STEPS));
    }
    l2 = cluster_writable_leader(&cl);
    cr_expect_eq(l2, f);
    propose_applied(&cl, (unsigned)l2, 3, 32, 2, &last);
    assert_streams_equal(&cl);
    cluster_fini(&cl);
}

struct transfer_out
{
    int calls;
    int status;
    uint64_t target, leader, term;
};

static void transfer_done(void *data,
                          int status,
                          uint64_t target,
                          uint64_t leader,
                          uint64_t term)
{
    struct transfer_out *o = data;
    o->calls++;
    o->status = status;
    o->target = target;
    o->leader = leader;
    o->term = term;
}

static bool pred_transfer_done(struct cluster *c, void *arg)
{
    (void)c;
    return ((struct transfer_out *)arg)->calls > 0;
}

/* A transfer started while entries are in flight (the target has been
 * sent them, not persisted them: 0.15 sends TimeoutNow then) completes:
 * the target holds the TimeoutNow until its appends are acknowledged. */
Test(cluster, transfer_under_load)
{
    uint64_t last = 0;
    struct transfer_out o = {0};
    char m[TERN_ERRMSG_SIZE];
    uint64_t target = 0;
    int l, f;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 3, 32, 1, &last);
    for (unsigned round = 0; round < 5; round++) {
        propose_n(&cl, (unsigned)l, 4, 64, 2 + round, &last);
        steps(&cl, 1);
    }
    cr_assert_eq(repl_transfer_start(cl.nodes[l].repl, cl.nodes[f].id,
                                     transfer_done, &o, &target, m),
                 0, "%s", m);
    cr_expect_eq(target, cl.nodes[f].id);
    cr_assert(cluster_step_until(&cl, pred_transfer_done, &o, STEPS));
    cr_expect_eq(o.calls, 1);
    cr_expect_eq(o.status, 0, "status %d", o.status);
    cr_expect_eq(o.leader, cl.nodes[f].id);
    cr_expect_eq(o.target, cl.nodes[f].id);
    cr_expect_gt(o.term, 0);
    /* The TimeoutNow came before the appends were durable: held, then
     * delivered (dropping it made the transfer time out). */
    cr_expect_eq(cl.nodes[f].repl->guard.timeout_now_delivered, 1);
    cr_expect_eq(cl.nodes[f].repl->guard.timeout_now_dropped, 0);
    {
        struct node_pred p = {(unsigned)f};
        cr_assert(cluster_step_until(&cl, pred_node_writable, &p, STEPS));
    }
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    assert_streams_equal(&cl);
    cluster_fini(&cl);
}

/* The refusals, each without a callback; id 0 picks a voter. */
Test(cluster, transfer_refusals_and_any_voter)
{
    struct transfer_out o = {0};
    char m[TERN_ERRMSG_SIZE];
    uint64_t target = 0;
    int l, f;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    struct repl *r = cl.nodes[l].repl;
    cr_expect_eq(repl_transfer_start(r, 99, transfer_done, &o, NULL, m),
                 TERN_ENOTVOTER);
    cr_expect(strstr(m, "no node 99") != NULL, "%s", m);
    cr_expect_eq(
        repl_transfer_start(r, cl.nodes[l].id, transfer_done, &o, NULL, m),
        TERN_ENOTVOTER);
    cr_expect_eq(
        repl_transfer_start(cl.nodes[f].repl, 0, transfer_done, &o, NULL, m),
        TERN_ENOTLEADER);
    cr_assert_eq(repl_transfer_start(r, 0, transfer_done, &o, &target, m), 0,
                 "%s", m);
    cr_expect(target != 0 && target != cl.nodes[l].id);
    cr_expect_eq(repl_transfer_start(r, 0, transfer_done, &o, NULL, m),
                 TERN_EBUSY);
    cr_expect_eq(o.calls, 0, "no callback for a refused call");
    cr_assert(cluster_step_until(&cl, pred_transfer_done, &o, STEPS));
    cr_expect_eq(o.status, 0);
    cr_expect_eq(o.leader, target);
    cluster_fini(&cl);
}

static bool pred_fetch_active(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].up && c->nodes[i].repl->bulk.fetch.active &&
           c->nodes[i].repl->bulk.fetch.in_flight > 0;
}

Test(cluster, bulk_fetch_recovers_from_lost_chunks)
{
    uint64_t last = 0;
    int l, f;
    struct node_pred pf;
    init_snapshotting(&cl, 500);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 200, 100, 7, &last);
    steps(&cl, 200);
    cluster_start(&cl, (unsigned)f);
    pf.i = (unsigned)f;
    cr_assert(cluster_step_until(&cl, pred_fetch_active, &pf, STEPS));
    /* Let the requests reach the leader, then lose its answers. */
    cr_assert_gt(
        xport_mem_net_deliver(cl.net, cl.nodes[f].id, cl.nodes[l].id, SIZE_MAX),
        0);
    cr_assert_gt(
        xport_mem_net_drop(cl.net, cl.nodes[l].id, cl.nodes[f].id, SIZE_MAX),
        0);
    {
        uint64_t t0 = cl.clock;
        cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
        cr_expect_lt(cl.clock - t0, 30000,
                     "recovered by re-requesting, not by a snapshot resend");
    }
    cr_expect_eq(cl.nodes[f].n_restores, 1);
    cr_expect_geq(cl.nodes[f].repl->bulk.rerequests, 1);
    cr_expect_eq(cl.nodes[f].repl->bulk.completed, 1);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- randomized schedules ------------------------------------------------ */

struct ack_log
{
    unsigned n;
    uint64_t index[4096];
    uint32_t sum[4096];
};

static struct ack_log acks;

struct ack_ctx
{
    uint32_t sum;
};

static void chaos_cb(void *data, int status, uint64_t index)
{
    struct ack_ctx *a = data;
    if (status == 0 && acks.n < 4096) {
        acks.index[acks.n] = index;
        acks.sum[acks.n] = a->sum;
        acks.n++;
    }
    tern_free(a);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void dump_cluster(struct cluster *c)
{
    for (unsigned k = 0; k < c->n; k++) {
        if (!c->nodes[k].up) {
            (void)fprintf(stderr, "n%u down\n", k);
            continue;
        }
        struct repl_status st;
        repl_get_status(c->nodes[k].repl, &st);
        (void)fprintf(stderr,
                      "n%u role %d term %llu leader %llu commit %llu applied "
                      "%llu last %llu stored %llu failed %d fsm %d fetch %d "
                      "pend %zu\n",
                      k, st.role, (unsigned long long)st.term,
                      (unsigned long long)st.leader_id,
                      (unsigned long long)st.commit_index,
                      (unsigned long long)st.last_applied,
                      (unsigned long long)st.last_index,
                      (unsigned long long)st.last_stored, st.failed,
                      st.fsm_error, c->nodes[k].repl->bulk.fetch.active,
                      fake_io_pending(c->nodes[k].io));
    }
    for (unsigned k = 0; k < c->n; k++) {
        struct raft *rr = repl_raft(c->nodes[k].repl);
        (void)fprintf(stderr, "n%u disk start %llu n %zu snap %llu/%llu\n", k,
                      (unsigned long long)c->nodes[k].disk.start,
                      c->nodes[k].disk.n,
                      (unsigned long long)c->nodes[k].disk.snap_index,
                      (unsigned long long)c->nodes[k].disk.snap_term);
        if (raft_state(rr) == RAFT_LEADER) {
            for (unsigned q = 0; q < rr->configuration.n; q++) {
                struct raft_progress *pg = &rr->leader_state.progress[q];
                (void)fprintf(
                    stderr,
                    "  prog id %llu state %u next %llu match %llu snap %llu\n",
                    rr->configuration.servers[q].id, pg->state, pg->next_index,
                    pg->match_index, pg->snapshot_index);
            }
        }
    }
}

/* Variants: durability of every node, and whether nodes crash (memory
 * durability may lose acknowledged entries to crashes, repl.h, so its
 * chaos run has partitions and message loss only). */
static enum repl_durability chaos_durability = REPL_DURABILITY_DISK;
static bool chaos_crashes = true;
static size_t chaos_max_message; /* non-zero: txport, fencing, this max */
static uint64_t chaos_splits;    /* AppendEntries split, summed over runs */
static uint64_t chaos_fenced;    /* messages refused by a fence, summed */

/* Random crashes, restarts, partitions and message loss with the guard on:
 * no index ever applies two different payloads, every acknowledged
 * proposal survives, and the healed cluster converges. */
static void chaos(unsigned n, uint64_t seed, unsigned rounds)
{
    uint64_t s = seed;
    uint64_t last = 0;
    unsigned proposed = 0;
    cluster_init(&cl, n);
    cl.snapshot_bytes = 4000;
    cl.trailing = 16;
    cl.bulk_chunk = 1000;
    memset(&acks, 0, sizeof acks);
    cl.guard = getenv("CHAOS_NOGUARD") == NULL;
    cl.durability = chaos_durability;
    if (chaos_max_message != 0) {
        cl.use_txport = true;
        cl.fencing = true;
        cl.max_message = chaos_max_message;
    }
    start_all(&cl);
    for (unsigned round = 0; round < rounds; round++) {
        uint64_t r = rnd(&s) % 1000;
        unsigned i = (unsigned)(rnd(&s) % n), j = (unsigned)(rnd(&s) % n);
        int l = cluster_writable_leader(&cl);
        if (r < 5) {
            unsigned up = 0;
            for (unsigned k = 0; k < n; k++) {
                up += cl.nodes[k].up;
            }
            if (chaos_crashes && cl.nodes[i].up && up > n / 2 + 1) {
                cluster_crash(&cl, i);
            }
        } else if (r < 25) {
            if (!cl.nodes[i].up) {
                cluster_start(&cl, i);
            }
        } else if (r < 35 && i != j) {
            cluster_link(&cl, i, j, false);
        } else if (r < 70 && i != j) {
            cluster_link(&cl, i, j, true);
        } else if (r < 90) {
            xport_mem_net_drop(cl.net, 0, 0, 1);
        } else if (r < 200 && l >= 0 && proposed < 1500) {
            struct ack_ctx *a = tern_malloc(sizeof *a);
            uint8_t *buf = tern_malloc(48);
            uint64_t idx;
            memset(buf, (int)proposed, 48);
            tern_put_u64(buf, seed);
            tern_put_u64(buf + 8, proposed++);
            a->sum = tern_checksum32(buf, 48) ^ 48u;
            if (repl_propose(cl.nodes[l].repl, buf, 48, chaos_cb, a, &idx) !=
                0) {
                tern_free(buf);
                tern_free(a);
            }
        }
        for (unsigned k = 0; k < 20; k++) {
            cluster_step(&cl);
        }
        cr_assert(!cl.conflict, "seed %llu round %u: index applied twice",
                  (unsigned long long)seed, round);
    }
    /* Heal and converge. */
    for (unsigned a = 0; a < n; a++) {
        for (unsigned b = 0; b < n; b++) {
            if (a != b) {
                cluster_link(&cl, a, b, true);
            }
        }
        if (!cl.nodes[a].up) {
            cluster_start(&cl, a);
        }
    }
    /* A final write, retried until acknowledged (a leader change may make
     * an attempt's outcome ambiguous: it then fails with
     * TERN_ELEADERSHIPLOST and may or may not commit). */
    for (unsigned attempt = 0;; attempt++) {
        struct prop_result res = {0};
        uint8_t *buf;
        int l;
        cr_assert_lt(attempt, 20, "seed %llu: final write never acknowledged",
                     (unsigned long long)seed);
        cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS),
                  "seed %llu: no leader after healing",
                  (unsigned long long)seed);
        l = cluster_writable_leader(&cl);
        buf = tern_malloc(16);
        memcpy(buf, "final-write-0000", 16);
        buf[15] = (uint8_t)('0' + attempt % 10);
        if (repl_propose(cl.nodes[l].repl, buf, 16, prop_cb, &res, &last) !=
            0) {
            tern_free(buf);
            continue;
        }
        for (unsigned k = 0; k < STEPS && res.calls == 0; k++) {
            cluster_step(&cl);
        }
        if (res.calls == 1 && res.status == 0) {
            break;
        }
    }
    if (!cluster_step_until(&cl, pred_all_applied, &last, STEPS)) {
        dump_cluster(&cl);
        cr_assert(false, "seed %llu: no convergence (last %llu)",
                  (unsigned long long)seed, (unsigned long long)last);
    }
    assert_streams_equal(&cl);
    cr_assert(!cl.conflict);
    for (unsigned k = 0; k < acks.n; k++) {
        cr_assert(acks.index[k] < CLUSTER_MAX_INDEX);
        cr_assert(cl.applied_set[acks.index[k]],
                  "seed %llu: acked index %llu lost", (unsigned long long)seed,
                  (unsigned long long)acks.index[k]);
        cr_assert_eq(cl.applied_sum[acks.index[k]], acks.sum[k],
                     "seed %llu: acked index %llu holds another entry",
                     (unsigned long long)seed,
                     (unsigned long long)acks.index[k]);
    }
    for (unsigned k = 0; k < n; k++) {
        chaos_splits += cl.nodes[k].repl->io.ae_split;
        if (cl.nodes[k].tx != NULL) {
            chaos_fenced += cl.nodes[k].tx->fenced;
            cr_assert_eq(cl.nodes[k].tx->stamp_errors, 0);
        }
    }
    cluster_fini(&cl);
}

/* CHAOS_SEEDS=n runs more seeds (exploration; the default keeps the unit
 * test fast). */
static uint64_t n_seeds(uint64_t dflt)
{
    const char *e = getenv("CHAOS_SEEDS");
    return e != NULL ? strtoull(e, NULL, 10) : dflt;
}

Test(cluster, chaos_3_nodes, .timeout = 120)
{
    for (uint64_t seed = 1; seed <= n_seeds(12); seed++) {
        chaos(3, seed * 0x9e3779b97f4a7c15ULL, 1500);
    }
}

Test(cluster, chaos_5_nodes, .timeout = 120)
{
    const char *only = getenv("CHAOS_ONLY");
    for (uint64_t seed = 1; seed <= n_seeds(6); seed++) {
        if (only != NULL && strtoull(only, NULL, 10) != seed) {
            continue;
        }
        chaos(5, seed * 0xc2b2ae3d27d4eb4fULL, 1500);
    }
    /* Seed 111 got a follower stuck before guard.c item 6 (rebase onto the
     * follower's snapshot); seed 1 of chaos_3_nodes before item 1 stopped
     * requiring last_log_index >= b. */
    chaos(5, 111 * 0xc2b2ae3d27d4eb4fULL, 1500);
}

Test(cluster, chaos_3_nodes_memory_durability_no_crashes, .timeout = 120)
{
    chaos_durability = REPL_DURABILITY_MEMORY;
    chaos_crashes = false;
    for (uint64_t seed = 1; seed <= n_seeds(8); seed++) {
        chaos(3, seed * 0x2545f4914f6cdd1dULL, 1500);
    }
}

/* Oversized AppendEntries split into small parts and term fencing, under
 * crashes, partitions and loss. */
Test(cluster, chaos_3_nodes_split_and_fence, .timeout = 120)
{
    chaos_max_message = 1200; /* ~15 entries of 48 bytes per part */
    for (uint64_t seed = 1; seed <= n_seeds(8); seed++) {
        chaos(3, seed * 0x94d049bb133111ebULL, 1500);
    }
    cr_expect_gt(chaos_splits, 0, "the runs split AppendEntries");
    cr_expect_gt(chaos_fenced, 0, "and fenced stale messages");
}

/* #423: a follower must not apply entries its own disk has not stored,
 * even when heartbeats tell it they are committed. */
Test(cluster, follower_applies_only_durable_entries)
{
    uint64_t last = 0;
    int l, f;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    cl.nodes[f].frozen = true;
    propose_n(&cl, (unsigned)l, 3, 32, 1, &last);
    for (unsigned s = 0; s < 300; s++) { /* many heartbeats */
        cluster_step(&cl);
    }
    {
        struct repl_status st;
        repl_get_status(cl.nodes[l].repl, &st);
        cr_assert_geq(st.commit_index, last, "committed by the other two");
        repl_get_status(cl.nodes[f].repl, &st);
        cr_expect_lt(st.commit_index, last);
        cr_expect_eq(cl.nodes[f].n_applied, 0,
                     "nothing applied before it is stored locally");
        cr_expect_eq(st.role, REPL_FOLLOWER);
    }
    cl.nodes[f].frozen = false;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_eq(cl.nodes[f].n_applied, 3);
    cluster_fini(&cl);
}

/* Allocation failures injected at many points of a running cluster: no
 * crash, no leak (ASan), and the cluster still converges afterwards. */
static void allocation_failures(enum repl_durability d)
{
    const char *oom_max = getenv("OOM_MAX");
    long kmax = oom_max != NULL ? atol(oom_max) : 60;
    long kstep = oom_max != NULL ? 1 : 3;
    for (long k = 0; k < kmax; k += kstep) {
        uint64_t last = 0;
        int l;
        cluster_init(&cl, 3);
        cl.durability = d;
        l = start_all_elect(&cl);
        propose_n(&cl, (unsigned)l, 3, 32, 1, &last);
        tern_alloc_fail_after(k);
        steps(&cl, 40);
        tern_alloc_fail_after(-1);
        for (unsigned i = 0; i < cl.n; i++) {
            struct repl_status st;
            repl_get_status(cl.nodes[i].repl, &st);
            if (st.failed != 0) {
                cluster_crash(&cl, i); /* fail-stopped: restart it */
                cluster_start(&cl, i);
            }
        }
        cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS),
                  "k=%ld", k);
        l = cluster_writable_leader(&cl);
        {
            uint8_t buf[16] = "after-oom";
            cr_assert_eq(
                cluster_propose(&cl, (unsigned)l, buf, sizeof buf, &last), 0);
        }
        if (!cluster_step_until(&cl, pred_all_applied, &last, STEPS)) {
            dump_cluster(&cl);
            cr_assert(false, "k=%ld last %llu", k, (unsigned long long)last);
        }
        cr_expect(!cl.conflict);
        cluster_fini(&cl);
    }
}

Test(cluster, allocation_failures_do_not_break_the_cluster, .timeout = 120)
{
    allocation_failures(REPL_DURABILITY_DISK);
}

Test(cluster, allocation_failures_memory_durability, .timeout = 120)
{
    allocation_failures(REPL_DURABILITY_MEMORY);
}

/* ---- jepsen F3: follower ahead of the leader's snapshot ------------------ */

/* A follower restarts with a log that already holds the leader's latest
 * snapshot index. The leader (its sends to the dead follower failed, so its
 * progress fell back to next_index = match + 1 = 1) sends it that snapshot;
 * 0.15's follower answers "have all entries" (success, last_log_index =
 * snapshot index). That answer must move the leader's progress out of
 * SNAPSHOT state at once: the guard's old §8.1 rule (pass a success only if
 * its last_log_index >= the barrier) neutralised it (the snapshot index is
 * below the new leader's barrier) and the follower was ignored until
 * install_snapshot_timeout (jepsen F3, run with a stale ternd that had
 * that rule and a 60 s timeout). */
Test(cluster, follower_ahead_of_snapshot_catches_up_without_timeout)
{
    uint64_t last = 0, t0;
    int l, f, t;
    struct node_pred tp;
    init_snapshotting(&cl, 0);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 100, 100, 1, &last);
    cluster_crash(&cl, (unsigned)f);
    cluster_isolate(&cl, (unsigned)f, true);
    /* A new leader (match_index 0 for f) whose sends to f fail. */
    t = other_follower(&cl, l, f);
    cr_assert_eq(repl_transfer(cl.nodes[l].repl, cl.nodes[t].id), 0);
    tp.i = (unsigned)t;
    cr_assert(cluster_step_until(&cl, pred_node_writable, &tp, STEPS));
    l = t;
    propose_applied(&cl, (unsigned)l, 3, 100, 2, &last);
    steps(&cl, 400);
    cluster_isolate(&cl, (unsigned)f, false);
    cr_assert_leq(cl.nodes[l].disk.snap_index,
                  fake_disk_last_index(&cl.nodes[f].disk),
                  "the follower must be ahead of the leader's snapshot");
    cluster_start(&cl, (unsigned)f);
    t0 = cl.clock;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_lt(cl.clock - t0, 1500,
                 "caught up in %llu ms: waited for the install timeout",
                 (unsigned long long)(cl.clock - t0));
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- jepsen F2: the FSM stays quiet around a bulk fetch ------------------ */

static bool pred_disk_has(struct cluster *c, void *arg)
{
    const uint64_t *want = arg; /* [node, index] */
    return fake_disk_last_index(&c->nodes[want[0]].disk) >= want[1];
}

static bool pred_node_applied(struct cluster *c, void *arg)
{
    const uint64_t *want = arg; /* [node, index] */
    return c->nodes[want[0]].applied_index >= want[1];
}

/* The follower's raft log already holds the snapshot's last index (it
 * crashed after persisting entries whose commit it had not learned), but
 * its FSM is behind the snapshot. 0.15 treats such an InstallSnapshot as
 * "have all entries" (no restore) and then applies those entries: fetched
 * bytes would stay un-indexed under them (index/: idx_apply refuses; jepsen
 * F2 fail-stop). Rule 3 of bulk.c: delivered without a fetch. */
Test(cluster, install_already_held_is_not_fetched)
{
    uint64_t last = 0, want[2];
    int l, f, t;
    struct node_pred tp;
    init_snapshotting(&cl, 0);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 10, 100, 1, &last);
    propose_n(&cl, (unsigned)l, 100, 100, 2, &last);
    want[0] = (uint64_t)f;
    want[1] = last;
    cr_assert(cluster_step_until(&cl, pred_disk_has, want, STEPS));
    /* Cut f off before its result or the next commit index travel: the
     * leader's match for f stays low, f has not learned the commit. */
    cluster_isolate(&cl, (unsigned)f, true);
    cr_assert_lt(cl.nodes[f].applied_index, last,
                 "the follower must not have applied the tail");
    /* A new leader (match_index 0 for f; its sends to f fail, so its
     * progress falls back to next_index 1 and it sends its snapshot). */
    t = other_follower(&cl, l, f);
    want[0] = (uint64_t)t; /* t applies (and snapshots) the tail first */
    cr_assert(cluster_step_until(&cl, pred_node_applied, want, STEPS));
    cr_assert_eq(repl_transfer(cl.nodes[l].repl, cl.nodes[t].id), 0);
    tp.i = (unsigned)t;
    cr_assert(cluster_step_until(&cl, pred_node_writable, &tp, STEPS));
    l = t;
    steps(&cl, 600);
    cr_assert_gt(cl.nodes[l].disk.snap_index, cl.nodes[f].applied_index,
                 "the follower's FSM must be behind the leader's snapshot "
                 "(snap %llu, applied %llu, last %llu)",
                 (unsigned long long)cl.nodes[l].disk.snap_index,
                 (unsigned long long)cl.nodes[f].applied_index,
                 (unsigned long long)last);
    cr_assert_leq(cl.nodes[l].disk.snap_index,
                  fake_disk_last_index(&cl.nodes[f].disk),
                  "leader snap %llu, follower last %llu",
                  (unsigned long long)cl.nodes[l].disk.snap_index,
                  (unsigned long long)fake_disk_last_index(&cl.nodes[f].disk));
    cluster_isolate(&cl, (unsigned)f, false);
    propose_applied(&cl, (unsigned)l, 5, 100, 3, &last);
    cr_expect_eq(cl.nodes[f].applies_over_bulk, 0);
    cr_expect_geq(cl.nodes[f].repl->bulk.noop, 1);
    cr_expect_eq(cl.nodes[f].repl->bulk.completed, 0);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* A fetch while the leader keeps committing: no AppendEntries reaches the
 * follower's core from the InstallSnapshot until the restore, so it
 * applies nothing over the fetched bytes (rule 1 of bulk.c). */
Test(cluster, bulk_fetch_keeps_fsm_quiet)
{
    uint64_t last = 0, applied0;
    int l, f;
    struct node_pred pf;
    init_snapshotting(&cl, 300);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 200, 100, 7, &last);
    steps(&cl, 200);
    cluster_start(&cl, (unsigned)f);
    pf.i = (unsigned)f;
    cr_assert(cluster_step_until(&cl, pred_fetch_active, &pf, STEPS));
    applied0 = cl.nodes[f].n_applied;
    /* The leader goes on committing (with the third node) meanwhile. */
    propose_n(&cl, (unsigned)l, 20, 100, 8, &last);
    while (cl.nodes[f].repl->bulk.fetch.active) {
        cluster_step(&cl);
        cr_assert_eq(cl.nodes[f].n_applied, applied0,
                     "applied during the fetch");
    }
    cr_expect_gt(cl.nodes[f].repl->guard.ae_held_off, 0);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    /* (the leader may have snapshotted past the first install meanwhile:
     * then a second one follows) */
    cr_expect_geq(cl.nodes[f].n_restores, 1);
    cr_expect_geq(cl.nodes[f].repl->bulk.completed, 1);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- jepsen F1: new leader whose only live follower needs a snapshot ---- */

/* The leader dies while the third node still needs a snapshot; the new
 * leader can commit its barrier only with that node, i.e. only once its
 * progress leaves SNAPSHOT state. The install's success answer carries the
 * snapshot index, below the new barrier: the guard must let it through once
 * the barrier is durable (the §8.1 "last_log_index >= b" rule neutralised
 * it, and every re-sent snapshot's answer too: the leader never became
 * writable, jepsen F1). */
Test(cluster, new_leader_with_snapshot_follower_becomes_writable)
{
    uint64_t last = 0, t0;
    int l, f, t;
    struct node_pred tp;
    init_snapshotting(&cl, 0);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    t = other_follower(&cl, l, f);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 200, 100, 1, &last);
    steps(&cl, 200);
    cr_assert_gt(cl.nodes[l].disk.start,
                 fake_disk_last_index(&cl.nodes[f].disk) + 1,
                 "the follower must need a snapshot");
    cluster_crash(&cl, (unsigned)l);
    cluster_start(&cl, (unsigned)f);
    t0 = cl.clock;
    tp.i = (unsigned)t;
    cr_assert(cluster_step_until(&cl, pred_node_writable, &tp, STEPS),
              "the new leader never became writable");
    cr_expect_lt(cl.clock - t0, 2500,
                 "writable after %llu ms: waited for an install timeout",
                 (unsigned long long)(cl.clock - t0));
    cr_expect_geq(cl.nodes[f].n_restores, 1);
    propose_applied(&cl, (unsigned)t, 5, 100, 2, &last);
    cluster_start(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* 0.15 ignores an InstallSnapshot (no answer, the leader waits for the
 * install timeout) while the core takes or stores a snapshot of its own;
 * seen in the jepsen re-runs after the F2 fix: a fetch completed while the
 * follower persisted its own snapshot, the held message was dropped by the
 * core and the follower waited 3 s with un-indexed bytes in its log. Rule 4
 * of bulk.c: the complete fetch stays held (AEs still dropped) until the
 * core can take it. The core's "taking a snapshot" state is simulated by
 * setting its pending snapshot term (struct raft is public in 0.15). */
static bool pred_fetch_complete(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    const struct repl_bulk_fetch *fe = &c->nodes[i].repl->bulk.fetch;
    return fe->active && fe->started && fe->next_pos >= fe->to;
}

Test(cluster, complete_fetch_waits_for_the_cores_own_snapshot)
{
    uint64_t last = 0, t0, restores0;
    int l, f;
    struct node_pred pf;
    struct raft *core;
    init_snapshotting(&cl, 500);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 200, 100, 9, &last);
    steps(&cl, 200);
    cluster_start(&cl, (unsigned)f);
    pf.i = (unsigned)f;
    cr_assert(cluster_step_until(&cl, pred_fetch_active, &pf, STEPS));
    core = repl_raft(cl.nodes[f].repl);
    cr_assert_eq(core->snapshot.pending.term, 0);
    restores0 = cl.nodes[f].n_restores;
    core->snapshot.pending.term = 1; /* "taking a snapshot" */
    cr_assert(cluster_step_until(&cl, pred_fetch_complete, &pf, STEPS));
    t0 = cl.clock;
    steps(&cl, 300);
    cr_expect(cl.nodes[f].repl->bulk.fetch.active,
              "held while the core is busy");
    cr_expect_eq(cl.nodes[f].n_restores, restores0);
    core->snapshot.pending.term = 0;
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_lt(cl.clock - t0, 2500,
                 "caught up %llu ms after: waited for an install timeout",
                 (unsigned long long)(cl.clock - t0));
    cr_expect_eq(cl.nodes[f].n_restores, restores0 + 1);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- jepsen F2 gap: an aborted fetch, then entries are applied ---------- */

/* The fetch was given up with bytes written (bulk.c keeps them for a
 * resend of the snapshot). */
static bool pred_fetch_aborted_with_bytes(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].up && c->nodes[i].bulk_pending > 0 &&
           !c->nodes[i].repl->bulk.fetch.active;
}

/* Some bytes of the fetch reached f. */
static bool pred_fetch_has_bytes(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].up && c->nodes[i].repl->bulk.fetch.active &&
           c->nodes[i].bulk_pending > 0;
}

/* f fetches a snapshot from l and aborts midway with bytes staged: l's
 * bulk reads fail after 2 chunks (error status), or with stall, the link
 * l-f goes down once bytes arrived and the stall timer gives up after its
 * re-requests. Then leadership moves to t, whose raft log still holds
 * every entry f lacks (a large trailing), so t replicates them with
 * AppendEntries and f applies them over its staged bytes: the schedule of
 * the F2 "known gap". refuse: the FSM refuses such applies, like index/
 * did before idx_apply dropped the staged bytes. Returns whether f
 * fail-stopped; on success checks that everything converged. */
static bool aborted_fetch_then_entries_applied(bool refuse, bool stall)
{
    uint64_t last = 0;
    int l, f, t;
    struct node_pred pf, pt;
    struct repl_status st;
    bool failed;
    init_snapshotting(&cl, 300);
    cl.refuse_over_bulk = refuse;
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    t = other_follower(&cl, l, f);
    /* t keeps its whole raft log. */
    cluster_crash(&cl, (unsigned)t);
    cl.trailing = 4096;
    cluster_start(&cl, (unsigned)t);
    cl.trailing = 8;
    propose_applied(&cl, (unsigned)l, 5, 100, 1, &last);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 200, 100, 2, &last);
    steps(&cl, 200);
    cr_assert_gt(cl.nodes[l].disk.start,
                 fake_disk_last_index(&cl.nodes[f].disk) + 1,
                 "f must need a snapshot from l");
    cr_assert_leq(cl.nodes[t].disk.start,
                  fake_disk_last_index(&cl.nodes[f].disk) + 1,
                  "t must still hold f's missing entries");
    if (!stall) {
        cl.nodes[l].bulk_reads_ok = 2;
    }
    cluster_start(&cl, (unsigned)f);
    pf.i = (unsigned)f;
    if (stall) {
        cr_assert(cluster_step_until(&cl, pred_fetch_has_bytes, &pf, STEPS));
        cluster_link(&cl, (unsigned)l, (unsigned)f, false);
    }
    cr_assert(
        cluster_step_until(&cl, pred_fetch_aborted_with_bytes, &pf, STEPS),
        "the fetch must be aborted midway");
    cr_assert_eq(cl.nodes[f].repl->bulk.completed, 0);
    if (stall) {
        cr_expect_geq(cl.nodes[f].repl->bulk.rerequests, 3,
                      "given up by the stall timer");
    }
    cl.nodes[l].bulk_reads_ok = -1;
    cr_assert_eq(repl_transfer(cl.nodes[l].repl, cl.nodes[t].id), 0);
    pt.i = (unsigned)t;
    cr_assert(cluster_step_until(&cl, pred_node_writable, &pt, STEPS));
    propose_n(&cl, (unsigned)t, 5, 100, 3, &last);
    (void)cluster_step_until(&cl, pred_all_applied, &last, STEPS);
    cluster_link(&cl, (unsigned)l, (unsigned)f, true);
    repl_get_status(cl.nodes[f].repl, &st);
    failed = st.failed != 0;
    if (!failed) {
        cr_expect(pred_all_applied(&cl, &last), "f caught up");
        cr_expect_geq(cl.nodes[f].bulk_dropped, 1,
                      "entries were applied over the aborted fetch's bytes");
        cr_expect_eq(cl.nodes[f].n_restores, 0, "caught up by entries");
        assert_streams_equal(&cl);
        /* and replication goes on */
        propose_applied(&cl, (unsigned)t, 10, 100, 4, &last);
        assert_streams_equal(&cl);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
    return failed;
}

Test(cluster, entries_applied_after_an_aborted_fetch)
{
    cr_expect(!aborted_fetch_then_entries_applied(false, false),
              "the follower fail-stopped");
}

Test(cluster, entries_applied_after_a_stalled_fetch)
{
    cr_expect(!aborted_fetch_then_entries_applied(false, true),
              "the follower fail-stopped");
}

/* The same schedules against the pre-fix index/ contract: the follower
 * fail-stops (jepsen F2 "known gap"), so the tests above reach it. */
Test(cluster, aborted_fetch_fail_stops_with_the_old_index_contract)
{
    cr_expect(aborted_fetch_then_entries_applied(true, false),
              "expected the F2 fail-stop");
    cr_expect(aborted_fetch_then_entries_applied(true, true),
              "expected the F2 fail-stop (stall)");
}

/* ---- storage damage: the FSM lost bytes its raft snapshot covers -------- */

/* f restarts with its raft log and snapshot intact, but its FSM lost the
 * second half of its stream (index/ cut a damaged commit log at open) and
 * the raft log no longer holds those entries (snapshot + trailing 8).
 * raft_start's restore of the local snapshot cannot be done locally: it
 * must be fetched from a peer (bulk.c "Start-up restore from a peer")
 * instead of failing the start, with nothing applied before it. */
static bool pred_restore_done(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].up && !repl_bulk_restore_pending(c->nodes[i].repl) &&
           c->nodes[i].n_restores >= 2;
}

Test(cluster, startup_restore_fetches_missing_fsm_bytes_from_a_peer)
{
    uint64_t last = 0, snap;
    int l, f;
    struct node_pred pf;
    struct repl_status st;
    init_snapshotting(&cl, 700);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 200, 100, 1, &last);
    steps(&cl, 200);
    snap = cl.nodes[f].disk.snap_index;
    cr_assert_gt(snap, 20, "f took snapshots of its own");
    cr_assert_gt(cl.nodes[f].disk.start, 2, "its raft log is compacted");
    cluster_crash(&cl, (unsigned)f);
    cl.nodes[f].stream_len /= 2; /* the FSM lost its tail */
    cl.nodes[f].applied_index = 0;
    cl.nodes[f].n_restores = 0;
    cl.nodes[f].n_applied = 0;
    propose_applied(&cl, (unsigned)l, 10, 100, 2, &last);
    cluster_start(&cl, (unsigned)f); /* asserts repl_start succeeded */
    cr_expect(repl_bulk_restore_pending(cl.nodes[f].repl));
    cr_expect_eq(cl.nodes[f].n_restores, 1, "the local attempt failed");
    pf.i = (unsigned)f;
    cr_assert(cluster_step_until(&cl, pred_restore_done, &pf, STEPS),
              "the restore from a peer never completed");
    cr_expect_eq(cl.nodes[f].applied_index, snap,
                 "restored exactly the local snapshot");
    cr_expect_eq(cl.nodes[f].n_applied, 0, "nothing applied before it");
    cr_expect_geq(cl.nodes[f].repl->bulk.completed, 1);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect_eq(st.failed, 0);
    assert_streams_equal(&cl);
    propose_applied(&cl, (unsigned)l, 5, 100, 3, &last);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* The peer asked first fails every bulk read: the next one is asked. */
Test(cluster, startup_restore_moves_on_from_a_failing_peer)
{
    uint64_t last = 0;
    int l, f;
    struct node_pred pf;
    init_snapshotting(&cl, 700);
    l = start_all_elect(&cl);
    f = other_follower(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 200, 100, 1, &last);
    steps(&cl, 200);
    cluster_crash(&cl, (unsigned)f);
    cl.nodes[f].stream_len /= 2;
    cl.nodes[f].applied_index = 0;
    cl.nodes[f].n_restores = 0;
    cluster_start(&cl, (unsigned)f);
    cr_assert(repl_bulk_restore_pending(cl.nodes[f].repl));
    {
        uint64_t first = cl.nodes[f].repl->bulk.fetch.peer_id;
        cl.nodes[first - 1].bulk_reads_ok = 0;
        pf.i = (unsigned)f;
        cr_assert(cluster_step_until(&cl, pred_restore_done, &pf, STEPS));
        cr_expect_neq(cl.nodes[f].repl->bulk.fetch.peer_id, first);
        cl.nodes[first - 1].bulk_reads_ok = -1;
    }
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- jepsen F5: a follower whose disk is full (guard.c item 11) --------- */

/* While repl_set_disk_full is on, the follower stores no new entries
 * (AppendEntries with entries are dropped), does not stand for election
 * although it hears no AppendEntries it can use, and is no target for a
 * leadership transfer; the other two carry on. Once the alarm clears it
 * catches up. Without item 11 its log grows (or it starts an election) and
 * the expectations below fail. */
/* Three nodes, a leader (returned) and its followers *f and *g, five
 * entries applied everywhere up to *last. */
static int three_with_five_applied(int *f, int *g, uint64_t *last)
{
    int l;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    *f = other_follower(&cl, l, l);
    *g = other_follower(&cl, l, *f);
    propose_applied(&cl, (unsigned)l, 5, 32, 1, last);
    return l;
}

Test(cluster, disk_full_follower_takes_no_entries)
{
    uint64_t last = 0;
    struct repl_status st0, st;
    int f, g;
    int l = three_with_five_applied(&f, &g, &last);
    repl_get_status(cl.nodes[f].repl, &st0);
    repl_set_disk_full(cl.nodes[f].repl, true);

    propose_n(&cl, (unsigned)l, 20, 32, 2, &last);
    {
        uint64_t want_l[2] = {(uint64_t)l, last},
                 want_g[2] = {(uint64_t)g, last};
        cr_assert(cluster_step_until(&cl, pred_node_applied, want_l, STEPS));
        cr_assert(cluster_step_until(&cl, pred_node_applied, want_g, STEPS));
    }
    /* Many election timeouts of silence for f (150 ms each). */
    {
        uint64_t until = cl.clock + 3000;
        while (cl.clock < until) {
            cluster_step(&cl);
        }
    }
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect_eq(st.last_index, st0.last_index, "full follower stored %llu",
                 (unsigned long long)(st.last_index - st0.last_index));
    cr_expect(st.disk_full);
    cr_expect_gt(st.disk_full_dropped, 0);
    cr_expect_eq(st.role, REPL_FOLLOWER);
    cr_expect_eq(st.term, st0.term, "the full follower stood for election");
    cr_expect_eq(cluster_writable_leader(&cl), l);

    /* A transfer to the full node does not make it leader. */
    if (repl_transfer(cl.nodes[l].repl, cl.nodes[f].id) == 0) {
        uint64_t until = cl.clock + 3000;
        while (cl.clock < until) {
            cluster_step(&cl);
        }
    }
    cr_expect_neq(cluster_leader(&cl), f);
    cr_expect_eq(cl.nodes[f].role, REPL_FOLLOWER);

    repl_set_disk_full(cl.nodes[f].repl, false);
    l = wait_writable_leader(&cl);
    propose_n(&cl, (unsigned)l, 5, 32, 3, &last);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_eq(cl.nodes[f].n_applied, 30);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* Both followers full while an entry is in flight: 0.15 then sends them no
 * empty heartbeat, only AppendEntries with that entry. Dropped whole, they
 * cost the leader its quorum contact: it stepped down after an election
 * timeout and, the full nodes standing for nothing, the cluster had no
 * leader (so no reads, and no "disk full" answer) until space came back.
 * Stripped to heartbeats they keep the leader leading, and nothing
 * commits: no follower takes the entry. */
Test(cluster, every_follower_full_leader_keeps_leading)
{
    uint64_t last = 0, before;
    struct repl_status st0, st;
    int f, g;
    int l = three_with_five_applied(&f, &g, &last);
    before = last;
    repl_get_status(cl.nodes[l].repl, &st0);
    repl_set_disk_full(cl.nodes[f].repl, true);
    repl_set_disk_full(cl.nodes[g].repl, true);

    propose_n(&cl, (unsigned)l, 3, 32, 2, &last);
    {
        uint64_t until = cl.clock + 3000; /* 20 election timeouts */
        while (cl.clock < until) {
            cluster_step(&cl);
        }
    }
    repl_get_status(cl.nodes[l].repl, &st);
    cr_expect_eq(st.role, REPL_LEADER, "the leader stepped down");
    cr_expect_eq(st.term, st0.term);
    cr_expect_eq(st.commit_index, before, "committed %llu without a copy",
                 (unsigned long long)st.commit_index);
    cr_expect_eq(cl.nodes[f].applied_index, before);
    cr_expect_eq(cl.nodes[g].applied_index, before);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_expect_eq(st.last_index, before, "a full follower took entries");
    cr_expect_gt(st.disk_full_dropped, 0);
    repl_get_status(cl.nodes[g].repl, &st);
    cr_expect_eq(st.last_index, before, "a full follower took entries");

    repl_set_disk_full(cl.nodes[f].repl, false);
    repl_set_disk_full(cl.nodes[g].repl, false);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cr_expect_eq(cluster_leader(&cl), l);
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

static bool pred_not_leader(struct cluster *c, void *arg)
{
    unsigned i = ((struct node_pred *)arg)->i;
    return c->nodes[i].role != REPL_LEADER;
}

static bool pred_leader_besides_0(struct cluster *c, void *arg)
{
    (void)arg;
    for (unsigned k = 1; k < c->n; k++) {
        if (c->nodes[k].up && c->nodes[k].role == REPL_LEADER) {
            return true;
        }
    }
    return false;
}

/* Guard item 12 without a full disk: a deposed leader S1 keeps a longer
 * stale suffix (L+1..L+5 of its term). S3 wins the next term while S1
 * hears it; S3's first heartbeat (prev_log_index L, its last index then)
 * matches S1 at L, and 0.15 answers it with S1's last_stored (L+5). S3,
 * which meanwhile appended its barrier at L+1, took min(L+5, L+1): a
 * match of its barrier that S1 does not hold, and committed it. S1's disk
 * is frozen, and S2's once it voted, so neither stores the barrier for
 * real: nothing of S3's term may commit. */
Test(cluster, late_heartbeat_answer_never_counts_a_stale_suffix)
{
    struct node_pred p0 = {0};
    uint64_t last = 0, stale = 0;
    struct repl_status st;
    int n, m;
    cluster_init(&cl, 3);
    cl.nodes[0].timeout_offset = 0;
    cl.nodes[1].timeout_offset = 40;
    cl.nodes[2].timeout_offset = 120;
    start_all(&cl);
    cr_assert(cluster_step_until(&cl, pred_node_writable, &p0, STEPS));
    propose_applied(&cl, 0, 2, 32, 1, &last);

    /* S1 cut off appends L+1..L+5 and steps down (no quorum contact);
     * S2 and S3 stand for nothing meanwhile. */
    cl.nodes[1].no_ticks = true;
    cl.nodes[2].no_ticks = true;
    cluster_isolate(&cl, 0, true);
    propose_n(&cl, 0, 5, 32, 2, &stale);
    cr_assert_eq(stale, last + 5);
    cr_assert(cluster_step_until(&cl, pred_not_leader, &p0, STEPS));
    cr_assert_eq(fake_disk_last_index(&cl.nodes[0].disk), stale);

    /* S1 back, with a disk that completes nothing and no ticks (it stands
     * for nothing: its longer log would win). S3 stands, S2 votes for it
     * but stores nothing either: only S1's answers can count. */
    cl.nodes[0].frozen = true;
    cl.nodes[0].no_ticks = true;
    cl.nodes[1].no_ticks = false;
    cl.nodes[2].no_ticks = false;
    cluster_isolate(&cl, 0, false);
    cr_assert(cluster_step_until(&cl, pred_leader_besides_0, NULL, STEPS));
    n = cl.nodes[1].role == REPL_LEADER ? 1 : 2;
    m = 3 - n;
    cl.nodes[m].frozen = true; /* it voted; it stores nothing more */
    steps(&cl, 3000);
    repl_get_status(cl.nodes[n].repl, &st);
    cr_expect_eq(st.role, REPL_LEADER);
    cr_expect_eq(st.commit_index, last,
                 "the leader committed %llu with S1's stale suffix counted "
                 "as a copy",
                 (unsigned long long)st.commit_index);
    cr_expect_eq(fake_disk_last_index(&cl.nodes[0].disk), stale);
    cluster_fini(&cl);
}

/* A writable leader other than node a, or -1. */
static int writable_besides(struct cluster *c, int a)
{
    for (unsigned k = 0; k < c->n; k++) {
        if ((int)k != a && c->nodes[k].up && c->nodes[k].role == REPL_LEADER &&
            c->nodes[k].writable) {
            return (int)k;
        }
    }
    return -1;
}

static bool pred_writable_besides(struct cluster *c, void *arg)
{
    return writable_besides(c, *(const int *)arg) >= 0;
}

/* A full follower answers a stripped AppendEntries as a heartbeat, and
 * 0.15 answers a heartbeat with its last_stored: past the prefix the
 * message checked. A deposed leader's full log holds a longer stale
 * suffix; the new leader, with it as its only live follower, must count
 * none of that suffix as a copy of its own entries. */
Test(cluster, full_follower_stale_suffix_never_matches)
{
    uint64_t last = 0, stale = 0, committed;
    struct repl_status st;
    int a, b, c;
    cluster_init(&cl, 3);
    a = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)a, 5, 32, 1, &last);

    /* a, cut off, appends a long suffix nobody else gets. */
    cluster_isolate(&cl, (unsigned)a, true);
    propose_n(&cl, (unsigned)a, 30, 32, 2, &stale);
    steps(&cl, 50);
    cr_assert_eq(fake_disk_last_index(&cl.nodes[a].disk), stale);

    /* b and c elect a leader of their own and commit a short log. */
    cr_assert(cluster_step_until(&cl, pred_writable_besides, &a, STEPS));
    b = writable_besides(&cl, a);
    c = other_follower(&cl, a, b);
    propose_n(&cl, (unsigned)b, 3, 32, 3, &last);
    {
        uint64_t want[2] = {(uint64_t)b, last};
        cr_assert(cluster_step_until(&cl, pred_node_applied, want, STEPS));
    }
    committed = last;
    cr_assert_lt(committed, stale, "the stale suffix must be the longer");

    /* c goes; a comes back full: b's only live follower. */
    cluster_isolate(&cl, (unsigned)c, true);
    repl_set_disk_full(cl.nodes[a].repl, true);
    cluster_isolate(&cl, (unsigned)a, false);
    cluster_link(&cl, (unsigned)a, (unsigned)c, false);
    propose_n(&cl, (unsigned)b, 3, 32, 4, &last);
    {
        uint64_t until = cl.clock + 3000;
        while (cl.clock < until) {
            cluster_step(&cl);
        }
    }
    repl_get_status(cl.nodes[b].repl, &st);
    cr_expect_eq(st.role, REPL_LEADER, "the leader lost a's contact");
    cr_expect_eq(st.commit_index, committed,
                 "committed %llu with one copy (a's stale suffix counted)",
                 (unsigned long long)st.commit_index);
    repl_get_status(cl.nodes[a].repl, &st);
    cr_expect_gt(st.disk_full_dropped, 0);

    /* Space back, c back: one history everywhere. */
    repl_set_disk_full(cl.nodes[a].repl, false);
    cluster_isolate(&cl, (unsigned)c, false);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    assert_streams_equal(&cl);
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* Does a node (only, or any when only < 0) say caught_up while neither
 * raft nor its FSM has applied last, an index the cluster committed
 * before? Then *who, *applied and *mark say which and where. */
static bool early_caught_up(struct cluster *c,
                            uint64_t last,
                            int only,
                            int *who,
                            uint64_t *applied,
                            uint64_t *mark)
{
    for (unsigned i = 0; i < c->n; i++) {
        struct repl_status st;
        if (!c->nodes[i].up || (only >= 0 && (int)i != only)) {
            continue;
        }
        repl_get_status(c->nodes[i].repl, &st);
        if (st.caught_up && st.last_applied < last &&
            c->nodes[i].applied_index < last) {
            *who = (int)i;
            *applied = st.last_applied > c->nodes[i].applied_index
                           ? st.last_applied
                           : c->nodes[i].applied_index;
            *mark = st.catch_up_to;
            return true;
        }
    }
    return false;
}

/* Step until every node applied last, expecting no node (only, or any
 * when only < 0) to say caught_up before it applied last. */
static void expect_never_early(int only, uint64_t last)
{
    int who = -1;
    uint64_t applied = 0, mark = 0;
    bool early = false;
    for (unsigned s = 0; s < STEPS && !early; s++) {
        cluster_step(&cl);
        early = early_caught_up(&cl, last, only, &who, &applied, &mark);
        if (pred_all_applied(&cl, &last)) {
            break;
        }
    }
    cr_expect(!early,
              "node %d says caught_up (mark %llu) having applied %llu of "
              "the %llu committed",
              who, (unsigned long long)mark, (unsigned long long)applied,
              (unsigned long long)last);
}

/* A new leader's commit index can lag what its predecessor committed:
 * a restarted follower that marks the new leader's first leader_commit
 * says caught_up before it applied the predecessor's last commits. */
Test(cluster, not_caught_up_by_a_lagging_new_leader)
{
    uint64_t last = 0;
    struct repl_status st;
    int l, f, g;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)l, 5, 32, 1, &last);
    f = cluster_other(&cl, l, -1);
    g = cluster_other(&cl, l, f);
    cluster_crash(&cl, (unsigned)f);
    propose_n(&cl, (unsigned)l, 3, 32, 2, &last); /* "the user change" */
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));
    cluster_crash(&cl, (unsigned)l); /* before g hears the new commit */
    repl_get_status(cl.nodes[g].repl, &st);
    cr_log_info("g commit %llu applied %llu, cluster committed %llu",
                (unsigned long long)st.commit_index,
                (unsigned long long)st.last_applied, (unsigned long long)last);
    cluster_start(&cl, (unsigned)f);
    expect_never_early(f, last);
    cluster_fini(&cl);
}

/* The whole cluster restarts right after a commit the followers have not
 * heard of: the new leader's first heartbeats carry its restarted
 * commit index. */
Test(cluster, not_caught_up_early_after_full_restart)
{
    uint64_t last = 0;
    int l;
    cluster_init(&cl, 3);
    l = start_all_elect(&cl);
    propose_applied(&cl, (unsigned)l, 5, 32, 1, &last);
    propose_n(&cl, (unsigned)l, 3, 32, 2, &last);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &last, STEPS));
    for (unsigned i = 0; i < cl.n; i++) {
        cluster_crash(&cl, i);
    }
    cluster_start_all(&cl);
    expect_never_early(-1, last);
    cluster_fini(&cl);
}
