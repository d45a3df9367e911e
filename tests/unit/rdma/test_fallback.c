/* Unit tests of the fallback composite (rdma/fallback.c) with fast = shm
 * and slow = tcp on loopback: traffic uses shm while it works, moves to
 * tcp when the peer's shm side goes away (no errors beyond the sends that
 * reveal the switch), returns to shm when it comes back (through a probe
 * that loses nothing), a failed probe re-sent over tcp, both address
 * forms (explicit "SLOW|FAST" and a mapper), epoch/fence pass-through,
 * oversize messages over tcp, close with pending sends on both paths, and
 * argument checks. One uv loop per test; bounded polling, no sleeps. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <tern_common.h>
#include <xport.h>
#include <xport_test.h>

#include "xport_test_loop.h"

#define ADDR_MAX 128

static void setup(void)
{
    loop_setup("fb", 30);
}

static void teardown(void)
{
    loop_teardown();
}

TestSuite(fallback, .init = setup, .fini = teardown, .timeout = 90);

/* Run the loop until at least ms milliseconds of loop time passed. */
static void run_for_ms(uint64_t ms)
{
    uint64_t until;
    uv_update_time(&loop);
    until = uv_now(&loop) + ms;
    for (long i = 0; i < 50000000 && uv_hrtime() < deadline; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        uv_update_time(&loop);
        if (uv_now(&loop) >= until) {
            return;
        }
    }
    cr_assert_fail("loop time did not advance");
}

/* ---- backends ---------------------------------------------------------- */

static struct xport *tcp_make(uint64_t id, char addr[ADDR_MAX])
{
    return tcp_make_random(&loop, id, NULL, addr, ADDR_MAX);
}

static struct xport *shm_make_at(uint64_t id, const char *path, size_t ring)
{
    struct xport_shm_options o = {0};
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    int rc;
    o.ring_bytes = ring;
    rc = xport_shm_new(&loop, id, path, &o, &x, errmsg);
    cr_assert_eq(rc, 0, "xport_shm_new %s: %s", path, errmsg);
    return x;
}

static void shm_path(uint64_t id, char path[ADDR_MAX])
{
    (void)snprintf(path, ADDR_MAX, "%s/n%llu.sock", dir,
                   (unsigned long long)id);
}

/* A fallback node: shm at dir/n<id>.sock, tcp on a random port. */
struct fnode
{
    struct xport *x;   /* the composite */
    struct xport *shm; /* owned by x; kept for its stats */
    char tcp_addr[ADDR_MAX];
    char shm_addr[ADDR_MAX];
    char combined[2 * ADDR_MAX + 1]; /* "tcp|shm" */
};

static void fnode_make(struct fnode *n,
                       uint64_t id,
                       const struct xport_fallback_options *o)
{
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *tcp = tcp_make(id, n->tcp_addr);
    shm_path(id, n->shm_addr);
    n->shm = shm_make_at(id, n->shm_addr, 0);
    cr_assert_eq(xport_fallback_new(&loop, n->shm, tcp, o, &n->x, errmsg), 0,
                 "%s", errmsg);
    cr_assert_str_eq(xport_name(n->x), "shm+tcp");
    (void)snprintf(n->combined, sizeof n->combined, "%s|%s", n->tcp_addr,
                   n->shm_addr);
}

/* ---- messages ---------------------------------------------------------- */

struct sink
{
    int count;
    int bad;
    uint64_t from;
};

static void on_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct sink *s = arg;
    const uint8_t *b = msg;
    uint32_t k;
    cr_assert_geq(len, 4);
    k = tern_get_u32(b);
    for (size_t i = 4; i < len; i++) {
        if (b[i] != pattern(k, i)) {
            s->bad++;
            break;
        }
    }
    s->from = from;
    s->count++;
}

/* Send n messages, wait for all completions; returns how many failed. */
static int send_batch(struct xport *x,
                      uint64_t to,
                      const char *addr,
                      uint32_t first,
                      int n)
{
    static struct sreq reqs[512];
    int done = 0;
    int failed = 0;
    cr_assert_leq(n, 512);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(send_msg(x, &reqs[i], to, addr, first + (uint32_t)i,
                              16 + (size_t)i * 13, &done),
                     0);
    }
    cr_expect_eq(done, 0, "no completion inside xport_send");
    run_until(&done, n);
    for (int i = 0; i < n; i++) {
        failed += reqs[i].status != 0;
    }
    return failed;
}

static struct xport_fallback_stats stats_of(const struct xport *x)
{
    struct xport_fallback_stats st;
    cr_assert_eq(xport_fallback_stats(x, &st), 0);
    return st;
}

/* ---- tests ------------------------------------------------------------- */

/* A = fallback(shm, tcp); B = a bare shm and a bare tcp transport, so the
 * test can take B's shm side away and bring it back while B's tcp side
 * stays; separate sinks show which path carried each message. */
Test(fallback, shm_then_tcp_then_shm_again)
{
    struct xport_fallback_options o = {.retry_ms = 50};
    struct sink via_shm = {0}, via_tcp = {0}, at_a = {0};
    char b_tcp_addr[ADDR_MAX], b_shm_addr[ADDR_MAX], b_addr[2 * ADDR_MAX + 1];
    struct xport *b_tcp, *b_shm;
    struct xport_fallback_stats st;
    struct fnode a;
    int failed = 0;
    int sent = 0;

    fnode_make(&a, 1, &o);
    cr_assert_eq(xport_start(a.x, on_recv, &at_a), 0);
    b_tcp = tcp_make(2, b_tcp_addr);
    shm_path(2, b_shm_addr);
    b_shm = shm_make_at(2, b_shm_addr, 0);
    cr_assert_eq(xport_start(b_tcp, on_recv, &via_tcp), 0);
    cr_assert_eq(xport_start(b_shm, on_recv, &via_shm), 0);
    (void)snprintf(b_addr, sizeof b_addr, "%s|%s", b_tcp_addr, b_shm_addr);
    cr_expect_eq(xport_fallback_peer_fast(a.x, 2), -ENOENT);

    /* 1. Normal traffic: all over shm. */
    cr_expect_eq(send_batch(a.x, 2, b_addr, 0, 200), 0);
    sent += 200;
    run_until(&via_shm.count, 200);
    cr_expect_eq(via_tcp.count, 0, "nothing over tcp while shm works");
    cr_expect_eq(xport_fallback_peer_fast(a.x, 2), 1);
    st = stats_of(a.x);
    cr_expect_eq(st.fast_sends, 200);
    cr_expect_eq(st.slow_sends, 0);

    /* 2. B's shm side goes away: after the send(s) that reveal it, every
     * send completes with 0 and arrives over tcp. */
    close_and_wait(b_shm);
    b_shm = NULL;
    for (int i = 0; i < 20 && xport_fallback_peer_fast(a.x, 2) == 1; i++) {
        int rc = send_and_wait(a.x, 2, b_addr, (uint32_t)sent++, 100);
        failed += rc != 0;
        cr_expect(rc == 0 || rc == TERN_ENOCONN, "rc %d", rc);
    }
    cr_assert_eq(xport_fallback_peer_fast(a.x, 2), 0, "switched to tcp");
    cr_expect_leq(failed, 2, "only the sends revealing the switch failed");
    st = stats_of(a.x);
    cr_expect_eq(st.to_slow, 1);
    cr_expect_geq(st.fast_failures, 1);
    cr_expect_eq(send_batch(a.x, 2, b_addr, (uint32_t)sent, 300), 0,
                 "no errors after the switch");
    sent += 300;
    run_until(&via_tcp.count, 300);
    cr_expect_eq(xport_fallback_peer_fast(a.x, 2), 0);

    /* 3. shm comes back: after retry_ms a probe finds it, and traffic
     * returns to shm; nothing fails on the way. */
    b_shm = shm_make_at(2, b_shm_addr, 0);
    cr_assert_eq(xport_start(b_shm, on_recv, &via_shm), 0);
    for (int i = 0; i < 1000 && xport_fallback_peer_fast(a.x, 2) != 1 &&
                    uv_hrtime() < deadline;
         i++) {
        cr_expect_eq(send_and_wait(a.x, 2, b_addr, (uint32_t)sent++, 100), 0,
                     "a probe loses nothing");
        run_for_ms(5);
    }
    cr_assert_eq(xport_fallback_peer_fast(a.x, 2), 1, "back on shm");
    st = stats_of(a.x);
    cr_expect_eq(st.to_fast, 1);
    cr_expect_geq(st.probes, 1);
    {
        int tcp_before = via_tcp.count;
        int shm_before = via_shm.count;
        cr_expect_eq(send_batch(a.x, 2, b_addr, (uint32_t)sent, 200), 0);
        sent += 200;
        run_until(&via_shm.count, shm_before + 200);
        cr_expect_eq(via_tcp.count, tcp_before, "nothing more over tcp");
    }
    /* Every message but the ones lost at the switch (failed, or handed
     * to the dying ring) arrived, intact. */
    for (int i = 0; i < 100000 && via_shm.count + via_tcp.count < sent - 4 &&
                    uv_hrtime() < deadline;
         i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    cr_expect_geq(via_shm.count + via_tcp.count, sent - 4, "%d of %d",
                  via_shm.count + via_tcp.count, sent);
    cr_expect_leq(via_shm.count + via_tcp.count, sent);
    cr_expect_eq(via_shm.bad + via_tcp.bad, 0);
    cr_expect_eq(via_tcp.from, 1);

    close_and_wait(a.x);
    close_and_wait(b_shm);
    close_and_wait(b_tcp);
}

/* The peer never listens on shm: the first send reveals it; later probes
 * fail too and are re-sent over tcp, so only that first send fails. */
Test(fallback, failed_probe_is_resent_over_tcp)
{
    struct xport_fallback_options o = {.retry_ms = 20};
    struct sink at_b = {0};
    char b_tcp_addr[ADDR_MAX], b_addr[2 * ADDR_MAX + 1];
    struct xport *b_tcp;
    struct xport_fallback_stats st;
    struct fnode a;
    int failed = 0;

    fnode_make(&a, 1, &o);
    cr_assert_eq(xport_start(a.x, NULL, NULL), 0);
    b_tcp = tcp_make(2, b_tcp_addr);
    cr_assert_eq(xport_start(b_tcp, on_recv, &at_b), 0);
    (void)snprintf(b_addr, sizeof b_addr, "%s|%s/nobody.sock", b_tcp_addr, dir);
    cr_expect_eq(send_and_wait(a.x, 2, b_addr, 0, 100), TERN_ENOCONN);
    cr_expect_eq(xport_fallback_peer_fast(a.x, 2), 0);
    for (uint32_t k = 1; k <= 30; k++) {
        failed += send_and_wait(a.x, 2, b_addr, k, 100) != 0;
        run_for_ms(2);
    }
    cr_expect_eq(failed, 0);
    run_until(&at_b.count, 30);
    st = stats_of(a.x);
    cr_expect_geq(st.probes, 2, "probes: %llu", (unsigned long long)st.probes);
    cr_expect_eq(st.to_fast, 0);
    cr_expect_eq(st.to_slow, 1);
    cr_expect_eq(st.fast_failures, 1 + st.probes);
    cr_expect_eq(st.slow_sends, 30);
    cr_expect_eq(at_b.bad, 0);
    close_and_wait(a.x);
    close_and_wait(b_tcp);
}

/* Two fallback nodes with a mapper (plain tcp addresses, as raft has):
 * both directions over shm; epoch/fence reach the shm backends. */
static struct fnode *map_nodes[3];

static int map_fast(void *arg,
                    uint64_t peer_id,
                    const char *slow,
                    char *out,
                    size_t cap)
{
    cr_expect_eq(arg, (void *)map_nodes);
    for (int i = 1; i <= 2; i++) {
        if (map_nodes[i] != NULL && strcmp(slow, map_nodes[i]->tcp_addr) == 0) {
            cr_expect_eq(peer_id, (uint64_t)i);
            (void)snprintf(out, cap, "%s", map_nodes[i]->shm_addr);
            return 0;
        }
    }
    return -1;
}

Test(fallback, mapper_bidirectional_and_fencing)
{
    struct xport_fallback_options o = {0};
    struct sink sa = {0}, sb = {0};
    struct xport_shm_stats ss;
    struct fnode a, b;

    o.fast_address = map_fast;
    o.fast_address_arg = map_nodes;
    map_nodes[1] = &a;
    map_nodes[2] = &b;
    fnode_make(&a, 1, &o);
    fnode_make(&b, 2, &o);
    cr_assert_eq(xport_start(a.x, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b.x, on_recv, &sb), 0);
    cr_expect_eq(send_batch(a.x, 2, b.tcp_addr, 0, 100), 0);
    cr_expect_eq(send_batch(b.x, 1, a.tcp_addr, 0, 100), 0);
    run_until(&sa.count, 100);
    run_until(&sb.count, 100);
    cr_expect_eq(sa.from, 2);
    cr_expect_eq(sb.from, 1);
    cr_expect_eq(stats_of(a.x).fast_sends, 100);
    cr_expect_eq(stats_of(b.x).fast_sends, 100);
    cr_expect_eq(stats_of(a.x).slow_sends + stats_of(b.x).slow_sends, 0);
    cr_expect_eq(xport_max_message(a.x), 256u << 20, "tcp's budget");

    /* Fence 5 on B drops A's epoch-0 records; epoch 5 passes. */
    cr_assert_eq(xport_set_fence(b.x, 5), 0);
    cr_expect_eq(send_and_wait(a.x, 2, b.tcp_addr, 1000, 100), 0);
    cr_assert_eq(xport_shm_stats(b.shm, &ss), 0);
    for (int i = 0; i < 100000 && ss.fenced == 0 && uv_hrtime() < deadline;
         i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        cr_assert_eq(xport_shm_stats(b.shm, &ss), 0);
    }
    cr_expect_eq(ss.fenced, 1, "the fence reached B's shm backend");
    cr_expect_eq(sb.count, 100);
    cr_assert_eq(xport_set_epoch(a.x, 5), 0);
    cr_expect_eq(send_and_wait(a.x, 2, b.tcp_addr, 1001, 100), 0);
    run_until(&sb.count, 101);

    /* A peer the mapper does not know (a bare tcp node): tcp only. */
    {
        char c_addr[ADDR_MAX];
        struct sink sc = {0};
        struct xport *c = tcp_make(3, c_addr);
        cr_assert_eq(xport_start(c, on_recv, &sc), 0);
        cr_expect_eq(send_and_wait(a.x, 3, c_addr, 7, 100), 0);
        run_until(&sc.count, 1);
        cr_expect_eq(sc.from, 1);
        cr_expect_eq(xport_fallback_peer_fast(a.x, 3), 0);
        cr_expect_eq(stats_of(a.x).slow_sends, 1);
        cr_expect_eq(stats_of(a.x).to_slow, 0, "no fast path is no switch");
        close_and_wait(c);
    }
    cr_expect_eq(xport_fallback_peer_fast(a.x, 2), 1);
    map_nodes[1] = map_nodes[2] = NULL;
    close_and_wait(a.x);
    close_and_wait(b.x);
}

/* Messages larger than shm's budget go over tcp; the peer stays on shm. */
Test(fallback, oversize_goes_over_tcp)
{
    char errmsg[TERN_ERRMSG_SIZE];
    struct sink via_shm = {0}, via_tcp = {0};
    char a_tcp[ADDR_MAX], a_shm[ADDR_MAX], b_tcp_addr[ADDR_MAX],
        b_shm_addr[ADDR_MAX], b_addr[2 * ADDR_MAX + 1];
    struct xport *a, *a_fast, *b_tcp, *b_shm;
    struct sreq r;

    shm_path(1, a_shm);
    a_fast = shm_make_at(1, a_shm, 65536);
    cr_assert_eq(
        xport_fallback_new(&loop, a_fast, tcp_make(1, a_tcp), NULL, &a, errmsg),
        0);
    cr_assert_eq(xport_start(a, NULL, NULL), 0);
    b_tcp = tcp_make(2, b_tcp_addr);
    shm_path(2, b_shm_addr);
    b_shm = shm_make_at(2, b_shm_addr, 0);
    cr_assert_eq(xport_start(b_tcp, on_recv, &via_tcp), 0);
    cr_assert_eq(xport_start(b_shm, on_recv, &via_shm), 0);
    (void)snprintf(b_addr, sizeof b_addr, "%s|%s", b_tcp_addr, b_shm_addr);
    cr_expect_eq(send_and_wait(a, 2, b_addr, 1, 100), 0);
    run_until(&via_shm.count, 1);
    cr_assert_eq(send_msg(a, &r, 2, b_addr, 2, 100000, NULL), 0);
    run_until(&r.done, 1);
    cr_expect_eq(r.status, 0);
    run_until(&via_tcp.count, 1);
    cr_expect_eq(via_tcp.bad, 0);
    cr_expect_eq(xport_fallback_peer_fast(a, 2), 1);
    cr_expect_eq(send_and_wait(a, 2, b_addr, 3, 100), 0);
    run_until(&via_shm.count, 2);
    close_and_wait(a);
    close_and_wait(b_tcp);
    close_and_wait(b_shm);
}

/* Close with sends pending on both paths: every callback fires exactly
 * once (0 or TERN_ECANCELED), all before the close callback; sends after
 * close are refused. */
static int order_sends_done;
static int order_bad;

static void on_closed_order(void *arg)
{
    (*(int *)arg)++;
    if (order_sends_done != 2 * 50) {
        order_bad++;
    }
}

static void on_sent_order(struct xport_send *req, int status)
{
    on_sent(req, status);
    order_sends_done++;
}

Test(fallback, close_with_pending_sends)
{
    static struct sreq reqs[100];
    char b_tcp_addr[ADDR_MAX], b_shm_addr[ADDR_MAX], b_addr[2 * ADDR_MAX + 1];
    char c_tcp_addr[ADDR_MAX];
    uint8_t buf[256] = {0};
    struct xport_iov iov = {buf, sizeof buf};
    struct xport *b_tcp, *b_shm, *c_tcp;
    struct fnode a;
    int closed = 0;

    fnode_make(&a, 1, NULL);
    cr_assert_eq(xport_start(a.x, NULL, NULL), 0);
    /* B exists but is never started: shm accepts no HELLO (sends queue),
     * tcp's kernel backlog takes the connection. */
    b_tcp = tcp_make(2, b_tcp_addr);
    c_tcp = tcp_make(3, c_tcp_addr);
    shm_path(2, b_shm_addr);
    b_shm = shm_make_at(2, b_shm_addr, 0);
    (void)snprintf(b_addr, sizeof b_addr, "%s|%s", b_tcp_addr, b_shm_addr);
    order_sends_done = 0;
    order_bad = 0;
    for (int i = 0; i < 50; i++) {
        in_send = 1;
        cr_assert_eq(
            xport_send(a.x, &reqs[i].req, 2, b_addr, &iov, 1, on_sent_order),
            0);
        /* Peer 3: tcp only (no fast part). */
        cr_assert_eq(xport_send(a.x, &reqs[50 + i].req, 3, c_tcp_addr, &iov, 1,
                                on_sent_order),
                     0);
        in_send = 0;
    }
    xport_close(a.x, on_closed_order, &closed);
    cr_expect_eq(
        xport_send(a.x, &reqs[0].req, 2, b_addr, &iov, 1, on_sent_order),
        TERN_ESHUTDOWN);
    run_until(&closed, 1);
    cr_expect_eq(order_sends_done, 100);
    cr_expect_eq(order_bad, 0, "close callback after every send callback");
    for (int i = 0; i < 100; i++) {
        cr_expect(reqs[i].status == 0 || reqs[i].status == TERN_ECANCELED,
                  "send %d: %d", i, reqs[i].status);
    }
    for (int i = 0; i < 50; i++) {
        cr_expect_eq(reqs[i].status, TERN_ECANCELED,
                     "shm sends were queued: canceled");
    }
    close_and_wait(b_tcp);
    close_and_wait(c_tcp);
    close_and_wait(b_shm);
}

Test(fallback, bad_arguments)
{
    char errmsg[TERN_ERRMSG_SIZE];
    char t1[ADDR_MAX], t2[ADDR_MAX], p1[ADDR_MAX];
    struct xport *tcp1 = tcp_make(1, t1);
    struct xport *tcp2 = tcp_make(2, t2);
    struct xport *shm1, *x = NULL;
    struct xport_fallback_stats st;
    uint8_t buf[8] = {0};
    struct xport_iov iov = {buf, sizeof buf};
    struct sreq r = {0};
    char longaddr[400];

    shm_path(1, p1);
    shm1 = shm_make_at(1, p1, 0);
    cr_expect_eq(xport_fallback_new(NULL, shm1, tcp1, NULL, &x, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(xport_fallback_new(&loop, NULL, tcp1, NULL, &x, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(xport_fallback_new(&loop, tcp1, tcp1, NULL, &x, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(xport_fallback_new(&loop, shm1, tcp2, NULL, &x, errmsg),
                 TERN_EINVAL, "different self ids");
    cr_expect_not_null(strstr(errmsg, "different nodes"), "%s", errmsg);
    cr_expect_eq(xport_fallback_stats(tcp1, &st), TERN_EINVAL);
    cr_expect_eq(xport_fallback_peer_fast(tcp1, 1), TERN_EINVAL);
    cr_expect_geq(xport_rdma_device_count(), 0);
    close_and_wait(tcp2);
    cr_assert_eq(xport_fallback_new(&loop, shm1, tcp1, NULL, &x, errmsg), 0);
    cr_expect_eq(xport_send(x, &r.req, 2, "|/tmp/x", &iov, 1, on_sent),
                 TERN_EINVAL);
    cr_expect_eq(xport_send(x, &r.req, 2, "127.0.0.1:1|", &iov, 1, on_sent),
                 TERN_EINVAL);
    memset(longaddr, 'a', sizeof longaddr - 1);
    longaddr[sizeof longaddr - 1] = '\0';
    cr_expect_eq(xport_send(x, &r.req, 2, longaddr, &iov, 1, on_sent),
                 TERN_EINVAL);
    cr_expect_eq(xport_send(x, &r.req, 2, NULL, &iov, 1, on_sent), TERN_EINVAL);
    /* Fast address unusable (not a unix path for shm: too long) -> the
     * send goes over tcp in the same call, nothing lost. */
    memset(longaddr, 'b', 200);
    (void)snprintf(longaddr, sizeof longaddr, "127.0.0.1:1|/%0120d", 0);
    cr_expect_eq(xport_send(x, &r.req, 2, longaddr, &iov, 1, on_sent), 0);
    run_until(&r.done, 1);
    cr_expect_eq(r.status, TERN_ENOCONN, "nobody on tcp port 1 either");
    cr_expect_eq(stats_of(x).slow_sends, 1);
    cr_expect_eq(stats_of(x).to_slow, 1);
    close_and_wait(x);
}
