/*
 * tests/unit/raft/test_issue3.c: issue 3 items on the deterministic
 * cluster harness: fencing wired to the Raft term (through the test-only
 * txport, txport.h), oversized AppendEntries split into parts, and the
 * durability modes (fake disks whose writes the test holds back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS 200000

static struct cluster cl;

static void start_all(struct cluster *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        cluster_start(c, i);
    }
}

static int elect(struct cluster *c)
{
    start_all(c);
    cr_assert(cluster_step_until(c, pred_writable_leader, NULL, STEPS));
    return cluster_writable_leader(c);
}

static void steps(struct cluster *c, unsigned n)
{
    for (unsigned s = 0; s < n; s++) {
        cluster_step(c);
    }
}

static int other(struct cluster *c, int a, int b)
{
    for (unsigned k = 0; k < c->n; k++) {
        if ((int)k != a && (int)k != b) {
            return (int)k;
        }
    }
    return -1;
}

static void propose_n(struct cluster *c, unsigned l, unsigned n, size_t size,
                      uint64_t tag, uint64_t *last)
{
    uint8_t buf[1024];
    cr_assert(size >= 16 && size <= sizeof buf);
    for (unsigned k = 0; k < n; k++) {
        memset(buf, (int)(k & 0xff), size);
        tern_put_u64(buf, tag);
        tern_put_u64(buf + 8, k);
        cr_assert_eq(cluster_propose(c, l, buf, size, last), 0);
    }
}

static void propose_applied(struct cluster *c, unsigned l, unsigned n,
                            size_t size, uint64_t tag, uint64_t *last)
{
    propose_n(c, l, n, size, tag, last);
    cr_assert(cluster_step_until(c, pred_all_applied, last, STEPS));
}

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
    cr_expect_eq(t->epoch, nd->disk.term, "node %u epoch %llu term %llu",
                 nd->i, (unsigned long long)t->epoch,
                 (unsigned long long)nd->disk.term);
    cr_expect_eq(t->fence, nd->disk.term);
    cr_expect_eq(status_term(nd), nd->disk.term);
    cr_expect_gt(t->raft_sent, 0);
    cr_expect_eq(t->stamp_errors, 0, "node %u: %llu frames sent before the "
                 "epoch/fence reached their term", nd->i,
                 (unsigned long long)t->stamp_errors);
}

/* ---- 1. fencing ----------------------------------------------------------- */

Test(issue3, fence_follows_every_term_change)
{
    uint64_t last = 0;
    int l, l2;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    l = elect(&cl);
    for (unsigned i = 0; i < cl.n; i++) {
        /* Loaded term (bootstrap: 1) first, before anything was sent. */
        cr_expect_eq(cl.nodes[i].tx->events[0].kind, TXPORT_EPOCH);
        cr_expect_eq(cl.nodes[i].tx->events[0].value, 1);
        check_fence_log(&cl.nodes[i]);
    }
    propose_applied(&cl, (unsigned)l, 5, 32, 1, &last);
    cluster_crash(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    l2 = cluster_writable_leader(&cl);
    propose_applied(&cl, (unsigned)l2, 5, 32, 2, &last);
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

Test(issue3, fence_refuses_deposed_leader_late_writes)
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
    l = elect(&cl);
    propose_applied(&cl, (unsigned)l, 3, 32, 1, &last);
    old_term = cl.nodes[l].disk.term;

    /* The leader's writes from now on are late: held, then cut off. */
    cl.nodes[l].tx->hold = true;
    cr_assert_eq(cluster_propose(&cl, (unsigned)l, x, sizeof x, &x_index), 0);
    steps(&cl, 5);
    cluster_isolate(&cl, (unsigned)l, true);
    cr_assert(cluster_step_until(&cl, pred_new_leader, &l, STEPS));
    cr_expect_eq(cl.nodes[l].disk.term, old_term, "the old leader learned "
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
    cr_assert_gt(xport_mem_net_deliver(cl.net, cl.nodes[l].id, 0, SIZE_MAX),
                 0);
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
        cr_assert_eq(cluster_propose(&cl, (unsigned)l2, y, sizeof y, &last),
                     0);
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

Test(issue3, fence_set_failure_is_retried_on_tick)
{
    uint64_t last = 0;
    int l, f;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    l = elect(&cl);
    f = other(&cl, l, l);
    cl.nodes[f].tx->fail_sets = 1;
    cluster_crash(&cl, (unsigned)l); /* forces a new term on f */
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    steps(&cl, 50);
    cr_expect_geq(cl.nodes[f].repl->io.fence_errors, 1);
    cr_expect_eq(cl.nodes[f].repl->io.fenced_term, cl.nodes[f].disk.term);
    cr_expect_eq(cl.nodes[f].tx->epoch, cl.nodes[f].disk.term);
    cr_expect_eq(cl.nodes[f].tx->fence, cl.nodes[f].disk.term);
    propose_applied(&cl, (unsigned)cluster_writable_leader(&cl), 3, 32, 1,
                    &last);
    cluster_fini(&cl);
}

/* ---- 2. oversized AppendEntries ------------------------------------------ */

#define SMALL_MAX 2048

Test(issue3, lagging_follower_catches_up_through_split_append_entries)
{
    uint64_t last = 0;
    uint64_t split_before;
    unsigned chained = 0, with_entries = 0;
    int l, f;
    cluster_init(&cl, 3);
    cl.use_txport = true;
    cl.fencing = true;
    cl.max_message = SMALL_MAX;
    l = elect(&cl);
    f = other(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 5, 96, 1, &last);
    cluster_crash(&cl, (unsigned)f);
    propose_applied(&cl, (unsigned)l, 300, 96, 2, &last);
    split_before = cl.nodes[l].repl->io.ae_split;
    cluster_start(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    steps(&cl, 100);

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
            cr_assert_not_null(b, "index %llu missing",
                               (unsigned long long)i);
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

/* ---- 3. durability modes --------------------------------------------------- */

static void freeze_all(struct cluster *c, bool frozen)
{
    for (unsigned i = 0; i < c->n; i++) {
        c->nodes[i].frozen = frozen;
    }
}

/* Returns the leader's commit index after proposing 3 entries with every
 * disk frozen; *last is the last proposed index. */
static uint64_t commit_with_frozen_disks(enum repl_durability d,
                                         uint64_t *last, int *leader)
{
    struct repl_status st;
    uint64_t prev = 0;
    int l;
    cluster_init(&cl, 3);
    cl.durability = d;
    l = elect(&cl);
    propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    freeze_all(&cl, true);
    propose_n(&cl, (unsigned)l, 3, 32, 2, last);
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

Test(issue3, memory_mode_commits_while_every_disk_write_is_pending)
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
    freeze_all(&cl, false);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    steps(&cl, 50);
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

Test(issue3, disk_mode_does_not_commit_before_the_disks)
{
    uint64_t last = 0;
    int l;
    uint64_t commit =
        commit_with_frozen_disks(REPL_DURABILITY_DISK, &last, &l);
    cr_expect_lt(commit, last, "disk mode: nothing commits from memory");
    cr_expect_eq(cl.nodes[l].n_applied, 2);
    freeze_all(&cl, false);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    cluster_fini(&cl);
}

struct ack {
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
    l = elect(&cl);
    propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    freeze_all(&cl, true);
    buf = tern_malloc(32);
    memset(buf, 0xee, 32);
    cr_assert_eq(repl_propose(cl.nodes[l].repl, buf, 32, ack_cb, &a, &idx), 0);
    for (unsigned s = 0; s < 2000 && a.calls == 0; s++) {
        cluster_step(&cl);
    }
    cr_assert_eq(a.calls, 1);
    cr_assert_eq(a.status, 0, "acknowledged to the client");
    for (unsigned i = 0; i < cl.n; i++) {
        cr_assert_null(fake_disk_get(&cl.nodes[i].disk, idx),
                       "on no disk yet");
    }
    *leader = l;
    return idx;
}

/* Documented loss (repl.h): all holders crash before their disks wrote
 * the entry. */
Test(issue3, memory_mode_majority_crash_before_disk_loses_acked_entry)
{
    int l;
    uint64_t idx = acked_in_memory_only(&l);
    for (unsigned i = 0; i < cl.n; i++) {
        cluster_crash(&cl, i); /* power loss: pending writes lost */
    }
    start_all(&cl);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    steps(&cl, 200);
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
Test(issue3, memory_mode_single_crash_loses_nothing)
{
    int l, f;
    uint64_t idx = acked_in_memory_only(&l);
    uint64_t last = idx;
    f = other(&cl, l, l);
    cluster_crash(&cl, (unsigned)f);
    freeze_all(&cl, false);
    cluster_start(&cl, (unsigned)f);
    cr_assert(cluster_step_until(&cl, pred_all_applied, &last, STEPS));
    steps(&cl, 100);
    for (unsigned i = 0; i < cl.n; i++) {
        const struct fake_entry *e = fake_disk_get(&cl.nodes[i].disk, idx);
        cr_assert_not_null(e, "node %u lacks the entry", i);
        cr_expect_eq(e->type, RAFT_COMMAND);
        cr_expect_eq(((const uint8_t *)e->buf)[0], 0xee);
    }
    cr_expect(!cl.conflict);
    cluster_fini(&cl);
}

/* ---- 4. replication latency samples --------------------------------------- */

static uint64_t cluster_now_ns(void)
{
    return cl.clock * 1000000ull; /* the manual clock counts ms */
}

static bool pred_leader_committed(struct cluster *c, void *arg)
{
    struct repl_status st;
    int l = cluster_leader(c);
    if (l < 0) {
        return false;
    }
    repl_get_status(c->nodes[l].repl, &st);
    return st.commit_index >= *(uint64_t *)arg;
}

Test(issue3, latency_leader_append_to_commit)
{
    struct repl_latency lat;
    uint64_t idx = 0, t0, t1;
    int l;
    cluster_init(&cl, 3);
    l = elect(&cl);
    steps(&cl, 20);
    cl.nodes[l].repl->lat.now = cluster_now_ns;
    repl_get_latency(cl.nodes[l].repl, &lat, true);
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    cr_assert_eq(lat.count, 0);
    cr_assert_eq(repl_latency_quantile(&lat, 0.5), 0);

    /* Disks held back 50 ms: the sample is the whole append -> commit. */
    freeze_all(&cl, true);
    t0 = cl.clock;
    propose_n(&cl, (unsigned)l, 1, 32, 1, &idx);
    while (cl.clock < t0 + 50) {
        cluster_step(&cl);
    }
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    cr_expect_eq(lat.count, 0, "not committed yet");
    freeze_all(&cl, false);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &idx, STEPS));
    t1 = cl.clock;
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    cr_assert_eq(lat.count, 1);
    cr_expect_eq(lat.recent[0], (t1 - t0) * 1000000ull);
    cr_expect_geq(lat.min_ns, 50000000ull);
    cr_expect_eq(lat.min_ns, lat.max_ns);
    cr_expect_eq(lat.sum_ns, lat.recent[0]);
    cr_expect_eq(lat.n_recent, 1);

    /* More samples: one per proposal, oldest first; quantiles bracket. */
    for (unsigned k = 0; k < 100; k++) {
        propose_n(&cl, (unsigned)l, 1, 32, 2, &idx);
        cr_assert(cluster_step_until(&cl, pred_leader_committed, &idx,
                                     STEPS));
    }
    repl_get_latency(cl.nodes[l].repl, &lat, true);
    cr_expect_eq(lat.count, 101);
    cr_expect_eq(lat.n_recent, REPL_LATENCY_RECENT);
    cr_expect_eq(lat.dropped, 0);
    {
        uint64_t sum = 0, p50 = repl_latency_quantile(&lat, 0.5),
                 p99 = repl_latency_quantile(&lat, 0.99);
        for (unsigned b = 0; b < REPL_LATENCY_BUCKETS; b++) {
            sum += lat.buckets[b];
        }
        cr_expect_eq(sum, 101);
        cr_expect_leq(p50, p99);
        cr_expect_leq(p99, lat.max_ns);
        cr_expect_geq(repl_latency_quantile(&lat, 1.0), lat.max_ns);
        cr_expect_leq(lat.min_ns, p50);
    }
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    cr_expect_eq(lat.count, 0, "reset");
    cluster_fini(&cl);
}

/* ---- 5. the memory-mode commit path (io.c) ------------------------------ */

static uint64_t id_of(int i)
{
    return cl.nodes[i].id;
}

/* A follower answers an AppendEntries before it applies the entries the
 * message newly commits (io.c "Follower apply off the answer path"): its
 * FSM apply fails (the replica fail-stops, refusing every later send), yet
 * the answer is already queued toward the leader; the entry was applied
 * by the held commit index (not by the answer's path). */
/* The reported quantile is the upper bound of its bucket: never below the
 * true quantile, at most 1/16 of a power of two (6.25%) above it, exact
 * for small values and clamped to the largest sample. */
Test(issue3, latency_quantiles_within_a_sixteenth)
{
    static struct repl_latency l;
    const double qs[] = {0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0};
    const unsigned n = 100000;

    memset(&l, 0, sizeof l);
    /* 1, 2, ..., n * 37 ns (0.000037 .. 3.7 ms) in a shuffled order. */
    for (unsigned i = 0; i < n; i++) {
        unsigned k = (unsigned)(((uint64_t)i * 7919u) % n) + 1u;
        repl_latency_record(&l, (uint64_t)k * 37u);
    }
    cr_assert_eq(l.count, n);
    cr_expect_eq(l.min_ns, 37);
    cr_expect_eq(l.max_ns, (uint64_t)n * 37u);
    for (unsigned i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        uint64_t want = (uint64_t)(qs[i] * n) * 37u;
        uint64_t got = repl_latency_quantile(&l, qs[i]);
        cr_expect_geq(got, want, "q %.3f: %llu < %llu", qs[i],
                      (unsigned long long)got, (unsigned long long)want);
        cr_expect_leq((double)got, (double)want * 1.0625,
                      "q %.3f: %llu > %llu + 6.25%%", qs[i],
                      (unsigned long long)got, (unsigned long long)want);
    }
    /* Exact below 16, and a value is in the bucket whose bound is >= it. */
    memset(&l, 0, sizeof l);
    for (uint64_t v = 0; v < 16; v++) {
        repl_latency_record(&l, v);
    }
    cr_expect_eq(repl_latency_quantile(&l, 0.5), 7);
    memset(&l, 0, sizeof l);
    repl_latency_record(&l, UINT64_MAX);
    repl_latency_record(&l, UINT64_MAX - 1);
    cr_expect_eq(repl_latency_quantile(&l, 1.0), UINT64_MAX);
    cr_expect_eq(repl_latency_quantile(&l, 0.5), UINT64_MAX);
}

Test(issue3, memory_mode_follower_answers_before_it_applies)
{
    uint64_t prev = 0, e1 = 0, e2 = 0;
    struct repl_status st;
    int l, f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = elect(&cl);
    f = other(&cl, l, l);
    propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    /* e1 commits; f holds it but has not learnt the commit yet. */
    propose_n(&cl, (unsigned)l, 1, 32, 2, &e1);
    cr_assert(cluster_step_until(&cl, pred_leader_committed, &e1, STEPS));
    xport_mem_net_complete(cl.net);
    repl_get_status(cl.nodes[f].repl, &st);
    cr_assert_geq(st.last_counted, e1);
    cr_assert_lt(cl.nodes[f].applied_index, e1, "f learns the commit later");
    /* e2's AppendEntries carries commit = e1. Drain f's inbound queue and
     * its answers so that only the new message is in flight. */
    cr_assert_eq(xport_mem_net_pending(cl.net, id_of(f), id_of(l)), 0);
    propose_n(&cl, (unsigned)l, 1, 32, 3, &e2);
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
 * leader's commit path is unchanged (same entries, same payloads). */
Test(issue3, memory_mode_followers_apply_every_entry)
{
    uint64_t last = 0;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    int l = elect(&cl);
    for (unsigned k = 0; k < 40; k++) {
        propose_applied(&cl, (unsigned)l, 1 + k % 3, 64, 10 + k, &last);
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

/* Coalesced inner writes: a memory-mode append reaches the inner (disk)
 * io only after raft's callback fired, and several of them in submission
 * order; disk mode hands each over at once. */
Test(issue3, memory_mode_inner_writes_follow_the_acks_in_order)
{
    uint64_t prev = 0, last = 0;
    struct repl_status st;
    int l;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = elect(&cl);
    propose_applied(&cl, (unsigned)l, 2, 32, 1, &prev);
    steps(&cl, 50);
    cr_assert_eq(fake_io_pending(cl.nodes[l].io), 0);
    propose_n(&cl, (unsigned)l, 3, 32, 2, &last);
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
        cr_expect_eq(tern_get_u64((const uint8_t *)e->buf + 8),
                     i - (last - 2), "index %llu in order",
                     (unsigned long long)i);
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
Test(issue3, memory_mode_truncate_hands_pending_appends_over_first)
{
    struct raft_io_append req[2];
    struct raft_entry e[2];
    uint8_t payload[2][16];
    struct repl *r;
    uint64_t n0;
    int l, f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = elect(&cl);
    f = other(&cl, l, l);
    steps(&cl, 50);
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
        cr_assert_eq(r->io.outer.append(&r->io.outer, &req[k], &e[k], 1, order_cb),
                     0);
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

/* Stage breakdown (repl_get_stages): every commit of the leader gets one
 * sample per leader stage, every answering follower one per follower
 * stage; the stages of a sample add up to no more than the total. */
Test(issue3, stage_breakdown_counts_every_commit)
{
    struct repl_latency st[REPL_STAGE__COUNT], lat;
    uint64_t prev = 0, idx = 0;
    int l;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = elect(&cl);
    propose_applied(&cl, (unsigned)l, 1, 32, 1, &prev);
    for (unsigned i = 0; i < cl.n; i++) {
        cl.nodes[i].repl->lat.now = cluster_now_ns;
        repl_get_latency(cl.nodes[i].repl, &lat, true);
    }
    for (unsigned k = 0; k < 20; k++) {
        propose_n(&cl, (unsigned)l, 1, 32, 2, &idx);
        cr_assert(cluster_step_until(&cl, pred_all_applied, &idx, STEPS));
    }
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    repl_get_stages(cl.nodes[l].repl, st, false);
    cr_expect_eq(lat.count, 20);
    cr_expect_eq(st[REPL_STAGE_APPEND_TO_POST].count, 20);
    cr_expect_eq(st[REPL_STAGE_POST_TO_RESULT].count, 20);
    cr_expect_eq(st[REPL_STAGE_RESULT_TO_COMMIT].count, 20);
    cr_expect_leq(st[REPL_STAGE_APPEND_TO_POST].sum_ns +
                      st[REPL_STAGE_POST_TO_RESULT].sum_ns +
                      st[REPL_STAGE_RESULT_TO_COMMIT].sum_ns,
                  lat.sum_ns);
    cr_expect_geq(st[REPL_STAGE_APPLY].count, 20);
    for (unsigned i = 0; i < cl.n; i++) {
        if ((int)i == l) {
            continue;
        }
        repl_get_stages(cl.nodes[i].repl, st, true);
        cr_expect_eq(st[REPL_STAGE_F_TOTAL].count, 20, "node %u", i);
        cr_expect_eq(st[REPL_STAGE_F_DECODE].count, 20);
        cr_expect_eq(st[REPL_STAGE_APPEND_TO_POST].count, 0);
        repl_get_stages(cl.nodes[i].repl, st, false);
        cr_expect_eq(st[REPL_STAGE_F_TOTAL].count, 0, "reset");
        cr_expect_str_eq(repl_stage_name(REPL_STAGE_F_TOTAL), "f_total");
        cr_expect_str_eq(repl_stage_name(REPL_STAGE__COUNT), "?");
    }
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
Test(issue3, memory_mode_failed_hand_over_fail_stops)
{
    struct raft_io_append req[2];
    struct raft_entry e[2];
    uint8_t payload[2][16];
    struct repl_status st;
    struct repl *r;
    int l, f;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = elect(&cl);
    f = other(&cl, l, l);
    steps(&cl, 50);
    r = cl.nodes[f].repl;
    memset(e, 0, sizeof e);
    for (int k = 0; k < 2; k++) {
        memset(payload[k], 0x50 + k, sizeof payload[k]);
        e[k].term = r->io.term;
        e[k].type = RAFT_COMMAND;
        e[k].buf.base = payload[k];
        e[k].buf.len = sizeof payload[k];
        cr_assert_eq(r->io.outer.append(&r->io.outer, &req[k], &e[k], 1, dead_cb),
                     0);
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
