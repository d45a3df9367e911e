/*
 * tests/unit/raft/test_fixture.c: raft/fsm.c (index tracking, byte-sized
 * snapshots, restore) on libraft's own deterministic raft_fixture, under
 * partitions, leader changes and kills: replicated counters converge and
 * no applied entry is lost or applied twice at different indexes.
 */
#include <string.h>

#include <criterion/criterion.h>
#include <raft/fixture.h>

#include "repl_int.h"

#define N         3
#define MAX_INDEX 8192

struct counter
{
    uint64_t sum;
    uint64_t applied_index;
    uint64_t n_applied;
    uint64_t n_restores;
};

static struct raft_fixture f;
static struct repl *glue[N];
static struct counter counters[N];
static uint64_t seen_value[MAX_INDEX];
static bool index_conflict;
static bool index_order_violation;
static struct raft_apply *reqs[4096];
static unsigned n_reqs;

static int c_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    struct counter *c = arg;
    uint64_t v;
    cr_assert_eq(len, 8);
    v = tern_get_u64(buf);
    if (index <= c->applied_index) {
        index_order_violation = true;
    }
    if (index < MAX_INDEX) {
        if (seen_value[index] != 0 && seen_value[index] != v) {
            index_conflict = true;
        }
        seen_value[index] = v;
    }
    c->sum += v;
    c->applied_index = index;
    c->n_applied++;
    return 0;
}

static int c_snapshot(void *arg,
                      uint64_t last_applied,
                      void **manifest,
                      size_t *len)
{
    struct counter *c = arg;
    uint8_t *m = tern_malloc(24);
    cr_assert_eq(last_applied, c->applied_index,
                 "snapshot index = last applied (barriers: none here)");
    tern_put_u64(m, c->sum);
    tern_put_u64(m + 8, last_applied);
    tern_put_u64(m + 16, c->n_applied);
    *manifest = m;
    *len = 24;
    return 0;
}

static int c_restore(void *arg, const void *m, size_t len)
{
    struct counter *c = arg;
    cr_assert_eq(len, 24);
    c->sum = tern_get_u64(m);
    c->applied_index = tern_get_u64((const uint8_t *)m + 8);
    c->n_applied = tern_get_u64((const uint8_t *)m + 16);
    c->n_restores++;
    return 0;
}

static void setup(uint64_t snapshot_bytes)
{
    struct raft_configuration conf;
    memset(counters, 0, sizeof counters);
    memset(seen_value, 0, sizeof seen_value);
    index_conflict = false;
    index_order_violation = false;
    repl_install_heap();
    cr_assert_eq(raft_fixture_initialize(&f), 0);
    for (unsigned i = 0; i < N; i++) {
        struct repl *r = tern_calloc(1, sizeof *r);
        r->fsm.arg = &counters[i];
        r->fsm.apply = c_apply;
        r->fsm.snapshot = c_snapshot;
        r->fsm.restore = c_restore;
        r->snapshot_threshold_bytes = snapshot_bytes;
        tern_list_init(&r->io.appends);
        tern_list_init(&r->io.sends);
        repl_fsm_setup(r);
        glue[i] = r;
        cr_assert_eq(raft_fixture_grow(&f, &r->glue.raft_fsm), 0);
        r->glue.core = raft_fixture_get(&f, i);
        raft_set_snapshot_threshold(r->glue.core, 64);
        raft_set_snapshot_trailing(r->glue.core, 16);
    }
    raft_configuration_init(&conf);
    cr_assert_eq(raft_fixture_configuration(&f, N, &conf), 0);
    cr_assert_eq(raft_fixture_bootstrap(&f, &conf), 0);
    raft_configuration_close(&conf);
    cr_assert_eq(raft_fixture_start(&f), 0);
}

static void teardown(void)
{
    raft_fixture_close(&f);
    for (unsigned i = 0; i < N; i++) {
        tern_free(glue[i]);
    }
    for (unsigned i = 0; i < n_reqs; i++) {
        tern_free(reqs[i]);
    }
    n_reqs = 0;
}

static raft_index apply_n(unsigned leader, unsigned n, uint64_t value)
{
    struct raft *r = raft_fixture_get(&f, leader);
    raft_index last = 0;
    for (unsigned k = 0; k < n; k++) {
        struct raft_apply *req = tern_calloc(1, sizeof *req);
        struct raft_buffer buf;
        buf.base = raft_malloc(8);
        buf.len = 8;
        tern_put_u64(buf.base, value);
        cr_assert_eq(raft_apply(r, req, &buf, 1, NULL), 0);
        last = req->index;
        /* raft keeps req queued until applied or failed: free at the end */
        cr_assert_lt(n_reqs, 4096);
        reqs[n_reqs++] = req;
    }
    return last;
}

TestSuite(fixture, .timeout = 120);

Test(fixture, counters_converge_across_partition)
{
    unsigned l, l2;
    raft_index last;
    setup(1 << 20);
    raft_fixture_elect(&f, 0);
    l = raft_fixture_leader_index(&f);
    cr_assert_eq(l, 0);
    last = apply_n(l, 200, 1);
    cr_assert(raft_fixture_step_until_applied(&f, N, last, 20000));

    /* Partition the leader; the majority elects a new one. */
    for (unsigned i = 0; i < N; i++) {
        if (i != l) {
            raft_fixture_disconnect(&f, l, i);
            raft_fixture_disconnect(&f, i, l);
        }
    }
    /* The fixture's own leader tracking ignores a majority leader while
     * the cut-off server campaigns at higher terms: poll the states. */
    l2 = N;
    for (unsigned t = 0; t < 300 && l2 == N; t++) {
        raft_fixture_step_until_elapsed(&f, 100);
        for (unsigned i = 0; i < N; i++) {
            if (i != l && raft_state(raft_fixture_get(&f, i)) == RAFT_LEADER) {
                l2 = i;
            }
        }
    }
    cr_assert_neq(l2, N, "no new leader in the majority");
    last = apply_n(l2, 100, 2);
    {
        unsigned other = 3 - l - l2;
        cr_assert(raft_fixture_step_until_applied(&f, l2, last, 20000));
        cr_assert(raft_fixture_step_until_applied(&f, other, last, 20000));
    }
    for (unsigned i = 0; i < N; i++) {
        if (i != l) {
            raft_fixture_reconnect(&f, l, i);
            raft_fixture_reconnect(&f, i, l);
        }
    }
    cr_assert(raft_fixture_step_until_applied(&f, N, last, 20000));
    for (unsigned i = 0; i < N; i++) {
        cr_expect_eq(counters[i].sum, 200 * 1 + 100 * 2, "server %u sum %llu",
                     i, (unsigned long long)counters[i].sum);
        cr_expect_eq(counters[i].n_applied, 300);
    }
    cr_expect(!index_conflict);
    cr_expect(!index_order_violation);
    teardown();
}

Test(fixture, byte_threshold_snapshots_and_restore_after_kill)
{
    raft_index last;
    unsigned l, victim;
    setup((uint64_t)8 * 100); /* a snapshot every 100 applied 8-byte entries */
    raft_fixture_elect(&f, 0);
    l = raft_fixture_leader_index(&f);
    victim = (l + 1) % N;
    last = apply_n(l, 50, 3);
    cr_assert(raft_fixture_step_until_applied(&f, N, last, 20000));
    cr_expect_eq(raft_fixture_get(&f, l)->log.snapshot.last_index, 0,
                 "50 entries: above raft's entry threshold, below bytes");
    raft_fixture_kill(&f, victim);
    last = apply_n(l, 400, 5);
    cr_assert(raft_fixture_step_until_applied(&f, l, last, 20000));
    raft_fixture_step_until_elapsed(&f, 2000);
    cr_expect_gt(raft_fixture_get(&f, l)->log.snapshot.last_index, 300,
                 "snapshots by bytes happened (last %llu)",
                 raft_fixture_get(&f, l)->log.snapshot.last_index);
    raft_fixture_revive(&f, victim);
    cr_assert(raft_fixture_step_until_applied(&f, N, last, 40000));
    for (unsigned i = 0; i < N; i++) {
        cr_expect_eq(counters[i].sum, 50 * 3 + 400 * 5, "server %u", i);
        cr_expect_eq(counters[i].applied_index, last);
    }
    cr_expect_geq(counters[victim].n_restores, 1,
                  "the revived server caught up through a snapshot");
    cr_expect(!index_conflict);
    cr_expect(!index_order_violation);
    teardown();
}
