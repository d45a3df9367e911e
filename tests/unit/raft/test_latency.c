/*
 * tests/unit/raft/test_latency.c: replication latency samples
 * (repl_get_latency: leader append -> commit), their histogram's
 * quantiles and the stage breakdown (repl_get_stages), on the
 * deterministic cluster harness with the samples' clock tied to its
 * manual clock.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS CLUSTER_STEPS

static struct cluster cl;

static uint64_t cluster_now_ns(void)
{
    return cl.clock * 1000000ull; /* the manual clock counts ms */
}

Test(latency, leader_append_to_commit)
{
    struct repl_latency lat;
    uint64_t idx = 0, t0, t1;
    int l;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_steps(&cl, 20);
    cl.nodes[l].repl->lat.now = cluster_now_ns;
    repl_get_latency(cl.nodes[l].repl, &lat, true);
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    cr_assert_eq(lat.count, 0);
    cr_assert_eq(repl_latency_quantile(&lat, 0.5), 0);

    /* Disks held back 50 ms: the sample is the whole append -> commit. */
    cluster_freeze_all(&cl, true);
    t0 = cl.clock;
    cluster_propose_n(&cl, (unsigned)l, 1, 32, 1, &idx);
    while (cl.clock < t0 + 50) {
        cluster_step(&cl);
    }
    repl_get_latency(cl.nodes[l].repl, &lat, false);
    cr_expect_eq(lat.count, 0, "not committed yet");
    cluster_freeze_all(&cl, false);
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
        cluster_propose_n(&cl, (unsigned)l, 1, 32, 2, &idx);
        cr_assert(cluster_step_until(&cl, pred_leader_committed, &idx, STEPS));
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

/* The reported quantile is the upper bound of its bucket: never below the
 * true quantile, at most 1/16 of a power of two (6.25%) above it, exact
 * for small values and clamped to the largest sample. */
Test(latency, quantiles_within_a_sixteenth)
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

/* Stage breakdown (repl_get_stages): every commit of the leader gets one
 * sample per leader stage, every answering follower one per follower
 * stage; the stages of a sample add up to no more than the total. */
Test(latency, stage_breakdown_counts_every_commit)
{
    struct repl_latency st[REPL_STAGE__COUNT], lat;
    uint64_t prev = 0, idx = 0;
    int l;
    cluster_init(&cl, 3);
    cl.durability = REPL_DURABILITY_MEMORY;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 1, 32, 1, &prev);
    for (unsigned i = 0; i < cl.n; i++) {
        cl.nodes[i].repl->lat.now = cluster_now_ns;
        repl_get_latency(cl.nodes[i].repl, &lat, true);
    }
    for (unsigned k = 0; k < 20; k++) {
        cluster_propose_n(&cl, (unsigned)l, 1, 32, 2, &idx);
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
    /* The leader's own append is durable before the entry commits. */
    cr_expect_eq(st[REPL_STAGE_LEADER_DISK].count, 20);
    cr_expect_leq(st[REPL_STAGE_LEADER_DISK].sum_ns, lat.sum_ns);
    cr_expect_str_eq(repl_stage_name(REPL_STAGE_LEADER_DISK), "leader_disk");
    for (unsigned i = 0; i < cl.n; i++) {
        if ((int)i == l) {
            continue;
        }
        repl_get_stages(cl.nodes[i].repl, st, true);
        cr_expect_eq(st[REPL_STAGE_F_TOTAL].count, 20, "node %u", i);
        cr_expect_eq(st[REPL_STAGE_F_DECODE].count, 20);
        cr_expect_eq(st[REPL_STAGE_APPEND_TO_POST].count, 0);
        cr_expect_eq(st[REPL_STAGE_LEADER_DISK].count, 0);
        repl_get_stages(cl.nodes[i].repl, st, false);
        cr_expect_eq(st[REPL_STAGE_F_TOTAL].count, 0, "reset");
        cr_expect_str_eq(repl_stage_name(REPL_STAGE_F_TOTAL), "f_total");
        cr_expect_str_eq(repl_stage_name(REPL_STAGE__COUNT), "?");
    }
    cluster_fini(&cl);
}
