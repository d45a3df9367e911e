/* Unit tests of the transport-generic busy-poll, adaptive poll and
 * counter operations (xport_set_busy_poll, xport_set_adaptive_poll,
 * xport_get_stats): a backend that does not poll
 * (mem) accepts the call and reports zeros; tcp and shm count their
 * busy-poll rounds; the fallback composite (fast = shm, slow = tcp on
 * loopback) passes the budget to both of its backends and reports the sum
 * of their counters plus its own path counters. One uv loop per test;
 * bounded polling, no sleeps. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#include <tern_common.h>
#include <xport.h>
#include <xport_test.h>

#include "xport_test_loop.h"

#define ADDR_MAX 128
#define SPIN_US  2000u

static void setup(void)
{
    loop_setup("ps", 30);
}

static void teardown(void)
{
    loop_teardown();
}

TestSuite(poll_stats, .init = setup, .fini = teardown, .timeout = 90);

/* A fallback node: shm at dir/n<id>.sock, tcp on a random port; the
 * composite owns both, the pointers are kept to read their counters. */
struct pnode
{
    struct xport *x;
    struct xport *shm;
    struct xport *tcp;
    char tcp_addr[ADDR_MAX];
    char shm_addr[ADDR_MAX];
    char combined[2 * ADDR_MAX + 1]; /* "tcp|shm": fast path */
    int received;
};

static void on_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct pnode *n = arg;
    (void)from;
    (void)msg;
    (void)len;
    n->received++;
}

static void pnode_make(struct pnode *n, uint64_t id)
{
    char errmsg[TERN_ERRMSG_SIZE];
    int rc;

    memset(n, 0, sizeof *n);
    n->tcp = tcp_make_random(&loop, id, NULL, n->tcp_addr, ADDR_MAX);
    (void)snprintf(n->shm_addr, ADDR_MAX, "%s/n%llu.sock", dir,
                   (unsigned long long)id);
    rc = xport_shm_new(&loop, id, n->shm_addr, NULL, &n->shm, errmsg);
    cr_assert_eq(rc, 0, "xport_shm_new: %s", errmsg);
    rc = xport_fallback_new(&loop, n->shm, n->tcp, NULL, &n->x, errmsg);
    cr_assert_eq(rc, 0, "xport_fallback_new: %s", errmsg);
    (void)snprintf(n->combined, sizeof n->combined, "%s|%s", n->tcp_addr,
                   n->shm_addr);
    cr_assert_eq(xport_start(n->x, on_recv, n), 0);
}

/* Send message k from a to node 2 at addr; wait for its completion (0). */
static void send_ok(struct pnode *a, const char *addr, unsigned k)
{
    cr_assert_eq(send_and_wait(a->x, 2, addr, k, 64), 0);
}

/* Wait until b has received want messages. */
static void wait_received(struct pnode *b, int want)
{
    run_until(&b->received, want);
}

static struct xport_stats stats_of(const struct xport *x)
{
    struct xport_stats s;
    cr_assert_eq(xport_get_stats(x, &s), 0);
    return s;
}

Test(poll_stats, mem_backend_does_not_poll)
{
    struct xport_mem_net *net = NULL;
    struct xport *x = NULL;
    struct xport_stats s;
    int closed = 0;

    cr_assert_eq(xport_mem_net_new(&net), 0);
    cr_assert_eq(xport_mem_new(net, 1, &x), 0);
    cr_expect_eq(xport_set_busy_poll(x, 100), 0, "mem accepts, ignores");
    cr_expect_eq(xport_set_busy_poll(x, 0), 0);
    memset(&s, 0xa5, sizeof s);
    cr_assert_eq(xport_get_stats(x, &s), 0);
    cr_expect_eq(s.doorbells + s.wakeups + s.spins + s.spin_hits + s.spin_ns +
                     s.credit_waits + s.fenced + s.corrupt + s.fast_sends +
                     s.slow_sends + s.fast_failures + s.to_slow + s.probes +
                     s.to_fast,
                 0, "no counter: all zero");
    cr_expect_eq(xport_set_busy_poll(NULL, 1), TERN_EINVAL);
    cr_expect_eq(xport_get_stats(NULL, &s), TERN_EINVAL);
    cr_expect_eq(xport_get_stats(x, NULL), TERN_EINVAL);
    xport_close(x, on_closed, &closed);
    cr_expect_eq(closed, 1);
    xport_mem_net_free(net);
}

Test(poll_stats, tcp_and_shm_count_their_rounds)
{
    struct pnode a, b;
    struct xport_stats s;

    pnode_make(&a, 1);
    pnode_make(&b, 2);
    cr_assert_eq(xport_set_busy_poll(a.tcp, SPIN_US), 0);
    cr_assert_eq(xport_set_busy_poll(a.shm, SPIN_US), 0);
    /* Over tcp only (a plain tcp address has no fast path). */
    send_ok(&a, b.tcp_addr, 1);
    wait_received(&b, 1);
    s = stats_of(a.tcp);
    cr_expect_geq(s.spins, 1, "a tcp send armed a round");
    cr_expect_eq(s.doorbells + s.wakeups + s.credit_waits, 0,
                 "tcp keeps no ring counters");
    /* Over shm: the first send connects (queued), the second goes
     * straight into the ring and arms a round. */
    send_ok(&a, b.combined, 2);
    send_ok(&a, b.combined, 3);
    wait_received(&b, 3);
    s = stats_of(a.shm);
    cr_expect_geq(s.spins, 1, "a direct shm send armed a round");
    cr_expect_eq(s.fast_sends + s.slow_sends, 0, "no path counters");
    close_and_wait(a.x);
    close_and_wait(b.x);
}

Test(poll_stats, fallback_forwards_busy_poll_to_both)
{
    struct pnode a, b;
    struct xport_stats before, after;

    pnode_make(&a, 1);
    pnode_make(&b, 2);
    cr_assert_eq(xport_set_busy_poll(a.x, SPIN_US), 0);
    send_ok(&a, b.combined, 1); /* connects shm */
    wait_received(&b, 1);
    before = stats_of(a.shm);
    send_ok(&a, b.combined, 2);
    wait_received(&b, 2);
    after = stats_of(a.shm);
    cr_expect_gt(after.spins, before.spins, "shm got the budget");
    before = stats_of(a.tcp);
    send_ok(&a, b.tcp_addr, 3);
    wait_received(&b, 3);
    after = stats_of(a.tcp);
    cr_expect_gt(after.spins, before.spins, "tcp got the budget");

    /* 0 turns polling off in both. */
    cr_assert_eq(xport_set_busy_poll(a.x, 0), 0);
    before = stats_of(a.x);
    send_ok(&a, b.combined, 4);
    send_ok(&a, b.tcp_addr, 5);
    wait_received(&b, 5);
    after = stats_of(a.x);
    cr_expect_eq(after.spins, before.spins, "no round once off");
    close_and_wait(a.x);
    close_and_wait(b.x);
}

Test(poll_stats, fallback_sums_backends_and_its_own)
{
    struct pnode a, b;
    struct xport_stats sum, shm, tcp;
    struct xport_fallback_stats fs;
    struct xport_shm_stats ss;
    int k = 0;

    pnode_make(&a, 1);
    pnode_make(&b, 2);
    cr_assert_eq(xport_set_busy_poll(a.x, SPIN_US), 0);
    for (int i = 0; i < 5; i++) {
        send_ok(&a, b.combined, (unsigned)k++);
        send_ok(&a, b.tcp_addr, (unsigned)k++);
    }
    wait_received(&b, k);
    sum = stats_of(a.x);
    shm = stats_of(a.shm);
    tcp = stats_of(a.tcp);
    cr_assert_eq(xport_fallback_stats(a.x, &fs), 0);
    cr_assert_eq(xport_shm_stats(a.shm, &ss), 0);

    cr_expect_eq(sum.doorbells, shm.doorbells + tcp.doorbells);
    cr_expect_eq(sum.wakeups, shm.wakeups + tcp.wakeups);
    cr_expect_eq(sum.spins, shm.spins + tcp.spins);
    cr_expect_eq(sum.spin_hits, shm.spin_hits + tcp.spin_hits);
    cr_expect_eq(sum.spin_ns, shm.spin_ns + tcp.spin_ns);
    cr_expect_eq(sum.credit_waits, shm.credit_waits + tcp.credit_waits);
    cr_expect_eq(sum.fenced, shm.fenced + tcp.fenced);
    cr_expect_eq(sum.corrupt, shm.corrupt + tcp.corrupt);
    cr_expect_gt(shm.spins, 0);
    cr_expect_gt(tcp.spins, 0);

    /* The composite's own counters. */
    cr_expect_eq(sum.fast_sends, fs.fast_sends);
    cr_expect_eq(sum.slow_sends, fs.slow_sends);
    cr_expect_eq(sum.fast_failures, fs.fast_failures);
    cr_expect_eq(sum.to_slow, fs.to_slow);
    cr_expect_eq(sum.probes, fs.probes);
    cr_expect_eq(sum.to_fast, fs.to_fast);
    cr_expect_eq(sum.fast_sends, 5);
    cr_expect_eq(sum.slow_sends, 5);

    /* The generic view of shm agrees with its own counters. */
    cr_expect_eq(shm.doorbells, ss.doorbells);
    cr_expect_eq(shm.wakeups, ss.wakeups);
    cr_expect_eq(shm.spins, ss.spins);
    cr_expect_eq(shm.spin_hits, ss.spin_hits);
    cr_expect_eq(shm.spin_ns, ss.spin_ns);
    cr_expect_eq(shm.credit_waits, ss.credit_waits);
    close_and_wait(a.x);
    close_and_wait(b.x);
}

/* n ping-pongs a -> b -> a over addresses ab (b's) and ba (a's). */
static void ping_pong(struct pnode *a,
                      struct pnode *b,
                      const char *ab,
                      const char *ba,
                      int n,
                      unsigned *k)
{
    for (int i = 0; i < n; i++) {
        int want_b = b->received + 1, want_a = a->received + 1;
        cr_assert_eq(send_and_wait(a->x, 2, ab, (*k)++, 64), 0);
        run_until(&b->received, want_b);
        cr_assert_eq(send_and_wait(b->x, 1, ba, (*k)++, 64), 0);
        run_until(&a->received, want_a);
    }
}

/* Adaptive polling through the composite: no round while the policy is
 * still learning (fewer than XPORT_ADAPT_NEED answered sends), rounds on
 * both backends once answers came back within the horizon (a cap of
 * 10 ms: a horizon of 160 ms, far above a loopback round trip), none once
 * it is set to 0. */
Test(poll_stats, adaptive_poll_spins_only_once_answers_come_back)
{
    struct pnode a, b;
    struct xport_stats before, after;
    unsigned k = 0;

    pnode_make(&a, 1);
    pnode_make(&b, 2);
    cr_assert_eq(xport_set_adaptive_poll(a.x, 10000), 0);
    ping_pong(&a, &b, b.tcp_addr, a.tcp_addr, 4, &k);
    after = stats_of(a.tcp);
    cr_expect_eq(after.spins, 0, "4 answered sends: still learning");
    ping_pong(&a, &b, b.tcp_addr, a.tcp_addr, 3, &k);
    after = stats_of(a.tcp);
    cr_expect_geq(after.spins, 1, "tcp: rounds once answers come fast");
    cr_expect_leq(after.spins, 3, "at most one round per send");

    /* shm: the first sends connect each way (queued, no round). */
    ping_pong(&a, &b, b.combined, a.combined, 8, &k);
    after = stats_of(a.shm);
    cr_expect_geq(after.spins, 1, "shm: rounds once answers come fast");

    cr_assert_eq(xport_set_adaptive_poll(a.x, 0), 0);
    before = stats_of(a.x);
    ping_pong(&a, &b, b.combined, a.combined, 3, &k);
    ping_pong(&a, &b, b.tcp_addr, a.tcp_addr, 3, &k);
    after = stats_of(a.x);
    cr_expect_eq(after.spins, before.spins, "no round once off");
    cr_expect_eq(xport_set_adaptive_poll(NULL, 1), TERN_EINVAL);
    close_and_wait(a.x);
    close_and_wait(b.x);
}
