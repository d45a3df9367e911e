/* Unit tests of the adaptive poll policy (rdma/adapt.c): its decisions
 * as a pure function of the send and arrival times it is given. No loop,
 * no clock: every time is made up, so nothing here depends on speed. */
#include <criterion/criterion.h>

#include "adapt.h"

#define US 1000ull /* nanoseconds */
#define T0 (1000000ull * US)

/* One exchange: a send at *now, its answer gap later; *now moves on to
 * the arrival plus pause. Returns the plan made at the send. */
static struct xport_adapt_plan exchange(struct xport_adapt *a,
                                        uint64_t *now,
                                        uint64_t gap,
                                        uint64_t pause)
{
    struct xport_adapt_plan p = xport_adapt_sent(a, *now);
    *now += gap;
    xport_adapt_received(a, *now);
    *now += pause;
    return p;
}

TestSuite(adapt);

Test(adapt, off_never_plans)
{
    struct xport_adapt a;
    uint64_t now = T0;

    xport_adapt_init(&a, 0);
    for (int i = 0; i < 20; i++) {
        struct xport_adapt_plan p = exchange(&a, &now, 10 * US, 5 * US);
        cr_expect_eq(p.until, 0, "exchange %d: no round while off", i);
    }
    cr_expect_eq(a.n, 0, "nothing learnt while off");
}

Test(adapt, leader_spins_from_its_send_once_answers_come_fast)
{
    struct xport_adapt a;
    uint64_t now = T0;
    struct xport_adapt_plan p;

    xport_adapt_init(&a, 50);
    for (unsigned i = 0; i < XPORT_ADAPT_NEED; i++) {
        p = exchange(&a, &now, 20 * US, 100 * US);
        cr_expect_eq(p.until, 0, "exchange %u: still learning", i);
    }
    /* Answers come back in 20 us, less than half the cap: spin at once. */
    p = xport_adapt_sent(&a, now);
    cr_expect_eq(p.start, now);
    cr_expect_eq(p.until, now + 50 * US, "a round lasts the cap");
}

Test(adapt, follower_round_is_placed_around_the_expected_arrival)
{
    struct xport_adapt a;
    uint64_t now = T0;
    struct xport_adapt_plan p;

    /* A follower: its answer, then the next AppendEntries 300 us later. */
    xport_adapt_init(&a, 50);
    for (unsigned i = 0; i < XPORT_ADAPT_GAPS; i++) {
        (void)exchange(&a, &now, 300 * US, 5 * US);
    }
    p = xport_adapt_sent(&a, now);
    cr_expect_eq(p.start, now + 275 * US, "half a cap early");
    cr_expect_eq(p.until, now + 325 * US, "half a cap late");
}

Test(adapt, window_covers_the_earliest_densest_cluster_of_gaps)
{
    struct xport_adapt a;
    uint64_t now = T0;
    struct xport_adapt_plan p;
    /* Sorted: 100 120 200 | 300 400 500 600 700: one cap (100 us) from
     * 100 holds three gaps, no other stretch more. */
    const unsigned gaps[XPORT_ADAPT_GAPS] = {500, 100, 700, 300,
                                             200, 600, 120, 400};

    xport_adapt_init(&a, 100);
    for (unsigned i = 0; i < XPORT_ADAPT_GAPS; i++) {
        (void)exchange(&a, &now, gaps[i] * US, 5 * US);
    }
    p = xport_adapt_sent(&a, now);
    cr_expect_eq(p.start, now + 100 * US);
    cr_expect_eq(p.until, now + 200 * US);
    /* The oldest gap goes first: 80 replaces 500. 80 100 120 (spread
     * 40 us) is the earliest cluster of three: the window is centred on
     * it, 30 us of slack on each side. */
    xport_adapt_received(&a, now + 80 * US);
    now += 100 * US;
    p = xport_adapt_sent(&a, now);
    cr_expect_eq(p.start, now + 50 * US);
    cr_expect_eq(p.until, now + 150 * US);
}

Test(adapt, late_wake_ups_move_the_timer_earlier)
{
    struct xport_adapt a;
    uint64_t now = T0;
    struct xport_adapt_plan p;

    xport_adapt_init(&a, 100);
    for (unsigned i = 0; i < XPORT_ADAPT_GAPS; i++) {
        (void)exchange(&a, &now, 400 * US, 5 * US);
    }
    /* Window 350..450 us after the send. A wake-up 40 us late: the
     * moving average (a quarter of each new figure) is 10 us. */
    xport_adapt_woke(&a, now, now + 40 * US);
    cr_expect_eq(a.late_ns, 10 * US);
    p = xport_adapt_sent(&a, now);
    cr_expect_eq(p.start, now + 340 * US, "the timer goes 10 us early");
    cr_expect_eq(p.until, now + 450 * US, "the window still ends on time");
    /* Early wake-ups count as on time; lateness is capped at half a cap. */
    xport_adapt_woke(&a, now, now - 5 * US);
    cr_expect_eq(a.late_ns, 7500);
    for (int i = 0; i < 40; i++) {
        xport_adapt_woke(&a, now, now + 1000 * US);
    }
    cr_expect_eq(a.late_ns, 50 * US);
}

Test(adapt, idle_gap_stops_rounds_until_exchanges_are_short_again)
{
    struct xport_adapt a;
    uint64_t now = T0;
    struct xport_adapt_plan p;

    xport_adapt_init(&a, 50); /* horizon 800 us */
    for (unsigned i = 0; i < XPORT_ADAPT_GAPS; i++) {
        (void)exchange(&a, &now, 30 * US, 10 * US);
    }
    cr_expect_neq(xport_adapt_sent(&a, now).until, 0, "busy: spins");
    /* Traffic stops: the next arrival is a heartbeat 100 ms later. */
    now += 100000 * US;
    xport_adapt_received(&a, now);
    for (unsigned i = 0; i < XPORT_ADAPT_NEED; i++) {
        p = exchange(&a, &now, 30 * US, 10 * US);
        cr_expect_eq(p.until, 0, "exchange %u after idle: sleeps", i);
    }
    cr_expect_neq(xport_adapt_sent(&a, now).until, 0,
                  "XPORT_ADAPT_NEED short gaps in a row: spins again");
}

Test(adapt, gaps_just_beyond_the_horizon_never_spin)
{
    struct xport_adapt a;
    uint64_t now = T0;

    xport_adapt_init(&a, 50);
    for (int i = 0; i < 20; i++) {
        struct xport_adapt_plan p =
            exchange(&a, &now, 50 * US * XPORT_ADAPT_HORIZON + 1, 10 * US);
        cr_expect_eq(p.until, 0, "exchange %d: too slow to predict", i);
    }
    /* Exactly at the horizon is within it. */
    xport_adapt_init(&a, 50);
    for (unsigned i = 0; i < XPORT_ADAPT_NEED; i++) {
        (void)exchange(&a, &now, 50 * US * XPORT_ADAPT_HORIZON, 10 * US);
    }
    cr_expect_neq(xport_adapt_sent(&a, now).until, 0);
}

Test(adapt, unanswered_send_counts_as_idle)
{
    struct xport_adapt a;
    uint64_t now = T0;

    xport_adapt_init(&a, 50);
    for (unsigned i = 0; i < XPORT_ADAPT_GAPS; i++) {
        (void)exchange(&a, &now, 30 * US, 10 * US);
    }
    /* A send nobody answers (the peer died), then another one 1 ms later:
     * the silence is an idle gap, so the second send does not spin. */
    cr_expect_neq(xport_adapt_sent(&a, now).until, 0);
    now += 1000 * US;
    cr_expect_eq(xport_adapt_sent(&a, now).until, 0);
    cr_expect_eq(a.sent_at, now, "the gap runs from the new send");
}

Test(adapt, gap_runs_from_the_first_unanswered_send)
{
    struct xport_adapt a;
    uint64_t now = T0;
    struct xport_adapt_plan p;

    xport_adapt_init(&a, 100);
    /* A leader sends to two followers, 10 us apart; the first answer
     * comes 40 us after the first send, the second one after that. */
    for (unsigned i = 0; i < XPORT_ADAPT_NEED; i++) {
        (void)xport_adapt_sent(&a, now);
        (void)xport_adapt_sent(&a, now + 10 * US);
        xport_adapt_received(&a, now + 40 * US);
        xport_adapt_received(&a, now + 60 * US);
        now += 200 * US;
    }
    cr_expect_eq(a.n, XPORT_ADAPT_NEED, "one gap per exchange");
    for (unsigned i = 0; i < a.n; i++) {
        cr_expect_eq(a.gaps[i], 40 * US, "gap %u", i);
    }
    /* A second send inside the window starts the round now, and the
     * window still ends one cap after the first send; once the window
     * has passed, a send plans nothing. */
    p = xport_adapt_sent(&a, now);
    cr_expect_eq(p.start, now);
    cr_expect_eq(p.until, now + 100 * US);
    p = xport_adapt_sent(&a, now + 30 * US);
    cr_expect_eq(p.start, now + 30 * US);
    cr_expect_eq(p.until, now + 100 * US);
    p = xport_adapt_sent(&a, now + 100 * US);
    cr_expect_eq(p.until, 0);
}

Test(adapt, arrival_without_send_is_ignored)
{
    struct xport_adapt a;
    uint64_t now = T0;

    xport_adapt_init(&a, 50);
    for (int i = 0; i < 10; i++) {
        xport_adapt_received(&a, now);
        now += 20 * US;
    }
    cr_expect_eq(a.n, 0);
    cr_expect_eq(xport_adapt_sent(&a, now).until, 0);
}

Test(adapt, init_forgets_what_was_learnt)
{
    struct xport_adapt a;
    uint64_t now = T0;

    xport_adapt_init(&a, 50);
    for (unsigned i = 0; i < XPORT_ADAPT_GAPS; i++) {
        (void)exchange(&a, &now, 30 * US, 10 * US);
    }
    xport_adapt_init(&a, 80);
    cr_expect_eq(a.n, 0);
    cr_expect_eq(a.cap_ns, 80 * US);
    cr_expect_eq(a.horizon_ns, 80 * US * XPORT_ADAPT_HORIZON);
    cr_expect_eq(xport_adapt_sent(&a, now).until, 0);
}
