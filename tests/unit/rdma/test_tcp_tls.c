/* Unit tests of mutual TLS on the TCP transport (rdma/tcp.c, "TLS") over
 * real sockets on 127.0.0.1, one uv loop bounded by a watchdog timer,
 * credentials made per test with scripts/tern-certs.sh
 * (xport_test_tls.h). Nodes with certificates from the cluster CA talk;
 * a node with a foreign CA's certificate, a node presenting another
 * node's certificate, a node dialing the wrong id, a plaintext transport
 * and a raw socket speaking plaintext frames deliver nothing, and
 * auth_refused counts each. The xport contract itself runs over TLS in
 * test_conformance.c (backend tcp_tls). */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <tern_common.h>
#include <xport.h>

#include "tcp_frame.h"
#include "xport_test_harness.h"
#include "xport_test_tls.h"

#define WATCHDOG_MS 20000

struct env
{
    uv_loop_t loop;
    uv_timer_t watchdog;
    int timed_out;
};

static struct env env;
static const char *own;     /* nodes 1, 2, 3 of the cluster CA */
static const char *foreign; /* node 2 of another CA */

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    env.timed_out = 1;
    uv_stop(&env.loop);
}

static void setup(void)
{
    cr_assert(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
    srand((unsigned)(getpid() ^ time(NULL)));
    memset(&env, 0, sizeof env);
    in_send = 0;
    reentrant_cbs = 0;
    own = tls_creds_make("own", "1 2 3");
    foreign = tls_creds_make("foreign", "2");
    cr_assert_eq(uv_loop_init(&env.loop), 0);
    uv_timer_init(&env.loop, &env.watchdog);
    uv_timer_start(&env.watchdog, on_watchdog, WATCHDOG_MS, 0);
}

static void teardown(void)
{
    uv_close((uv_handle_t *)&env.watchdog, NULL);
    uv_run(&env.loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&env.loop), 0, "every handle was closed");
    cr_expect_eq(reentrant_cbs, 0, "no callback ran inside xport_send");
    tls_creds_free();
}

TestSuite(tcp_tls, .init = setup, .fini = teardown, .timeout = 90);

static void run_until(const int *flag, int want)
{
    for (long i = 0; i < 10000000 && *flag < want && !env.timed_out; i++) {
        uv_run(&env.loop, UV_RUN_ONCE);
    }
    cr_assert(!env.timed_out, "watchdog fired waiting for %d (now %d)", want,
              *flag);
}

/* Run the loop for about ms milliseconds (bounded). */
static void run_for(unsigned ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000;
    for (long i = 0; i < 10000000 && uv_hrtime() < end; i++) {
        uv_run(&env.loop, UV_RUN_NOWAIT);
        if (i % 64 == 63) {
            usleep(1000);
        }
    }
}

struct sink
{
    int count;
    int bad;
    int out_of_order;
    uint64_t from[4]; /* count per sender id 0..3 */
    unsigned next[4];
};

static void on_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct sink *s = arg;
    const uint8_t *p = msg;
    unsigned k;

    s->count++;
    if (len < 4 || from > 3) {
        s->bad++;
        return;
    }
    k = tern_get_u32(p);
    if (k != s->next[from]) {
        s->out_of_order++;
    }
    s->next[from] = k + 1;
    s->from[from]++;
    for (size_t i = 4; i < len; i++) {
        if (p[i] != pattern(k, i)) {
            s->bad++;
            return;
        }
    }
}

/* A TLS transport of node id presenting node<cert_id> of cert_dir and
 * trusting ca_dir's CA. */
static struct xport *node(uint64_t id,
                          const char *cert_dir,
                          uint64_t cert_id,
                          const char *ca_dir,
                          char addr[64])
{
    struct xport_tcp_options o = {0};
    tls_node_options(&o, cert_dir, cert_id, ca_dir);
    o.connect_retry_ms = 20;
    return tcp_make_random(&env.loop, id, &o, addr, 64);
}

static uint64_t refused(struct xport *x)
{
    struct xport_stats st;
    cr_assert_eq(xport_get_stats(x, &st), 0);
    return st.auth_refused;
}

/* Run until x's auth_refused reaches want (bounded by the watchdog). */
static void run_until_refused(struct xport *x, uint64_t want)
{
    for (long i = 0; i < 10000000 && refused(x) < want && !env.timed_out; i++) {
        uv_run(&env.loop, UV_RUN_ONCE);
    }
    cr_assert_geq(refused(x), want, "auth_refused reached %llu",
                  (unsigned long long)want);
}

Test(tcp_tls, three_nodes_exchange_messages)
{
    enum { N = 60 };
    static struct sreq reqs[3][3][N];
    static struct sink sinks[4];
    char addr[4][64];
    struct xport *x[4];
    int done = 0;

    memset(sinks, 0, sizeof sinks);
    for (unsigned i = 1; i <= 3; i++) {
        x[i] = node(i, own, i, own, addr[i]);
        cr_assert_eq(xport_start(x[i], on_recv, &sinks[i]), 0);
    }
    /* Every node to every other; message 7 is 1 MiB (many TLS records,
     * more than a session's buffer). */
    for (unsigned k = 0; k < N; k++) {
        for (unsigned i = 1; i <= 3; i++) {
            for (unsigned j = 1; j <= 3; j++) {
                size_t len = k == 7 ? (size_t)1 << 20 : 16 + k * 37;
                if (i == j) {
                    continue;
                }
                cr_assert_eq(send_msg(x[i], &reqs[i - 1][j - 1][k], j, addr[j],
                                      k, len, &done),
                             0);
            }
        }
    }
    run_until(&done, 6 * N);
    for (unsigned i = 1; i <= 3; i++) {
        run_until(&sinks[i].count, 2 * N);
        cr_expect_eq(sinks[i].bad + sinks[i].out_of_order, 0,
                     "node %u: exact bytes, in order", i);
        for (unsigned j = 1; j <= 3; j++) {
            cr_expect_eq(sinks[i].from[j], i == j ? 0 : N,
                         "node %u got %llu from %u", i,
                         (unsigned long long)sinks[i].from[j], j);
            if (i != j) {
                for (unsigned k = 0; k < N; k++) {
                    cr_expect_eq(reqs[i - 1][j - 1][k].status, 0);
                }
            }
        }
        cr_expect_eq(refused(x[i]), 0);
    }
    /* Busy-polling keeps working inside TLS. */
    {
        struct xport_stats st;
        cr_assert_eq(xport_set_busy_poll(x[1], 2000), 0);
        cr_expect_eq(send_and_wait(x[1], 2, addr[2], N, 100), 0);
        run_until(&sinks[2].count, 2 * N + 1);
        cr_assert_eq(xport_get_stats(x[1], &st), 0);
        cr_expect_geq(st.spins, 1);
    }
    for (unsigned i = 1; i <= 3; i++) {
        close_and_wait(x[i]);
    }
}

/* intruder sends to node 1 until node 1 has refused it twice; nothing is
 * delivered. Returns the intruder's own auth_refused. */
static uint64_t intrude(struct xport *intruder,
                        uint64_t claim_peer,
                        struct xport *n1,
                        const char *n1_addr,
                        struct sink *s)
{
    static struct sreq r[8];
    uint64_t before = refused(n1);
    int done = 0;

    for (unsigned k = 0; k < 8 && refused(n1) < before + 2; k++) {
        cr_assert_eq(
            send_msg(intruder, &r[k], claim_peer, n1_addr, k, 64, &done), 0);
        run_until(&done, (int)k + 1);
        run_for(50);
    }
    cr_expect_geq(refused(n1), before + 2, "node 1 refused every attempt");
    cr_expect_eq(s->count, 0, "nothing delivered");
    return refused(intruder);
}

Test(tcp_tls, foreign_ca_refused)
{
    static struct sink s1, s2;
    char a1[64], a2[64];
    struct xport *n1 = node(1, own, 1, own, a1);
    /* Node 2 of another cluster, which trusts its own CA only. */
    struct xport *f2 = node(2, foreign, 2, foreign, a2);

    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    cr_assert_eq(xport_start(n1, on_recv, &s1), 0);
    cr_assert_eq(xport_start(f2, on_recv, &s2), 0);
    cr_expect_geq(intrude(f2, 1, n1, a1, &s1), 1,
                  "the intruder refused node 1's certificate, too");
    /* Node 1 dialing the foreign node refuses its certificate. */
    {
        uint64_t before = refused(n1);
        cr_expect_eq(send_and_wait(n1, 2, a2, 0, 64) <= 0, 1);
        run_until_refused(n1, before + 1);
        run_for(100);
        cr_expect_eq(s2.count, 0);
    }
    close_and_wait(f2);
    close_and_wait(n1);
}

Test(tcp_tls, node_claiming_another_id_refused)
{
    static struct sink s1;
    char a1[64], a2[64];
    struct xport *n1 = node(1, own, 1, own, a1);
    /* Holds node 3's valid certificate but says it is node 2. */
    struct xport *liar = node(2, own, 3, own, a2);

    memset(&s1, 0, sizeof s1);
    cr_assert_eq(xport_start(n1, on_recv, &s1), 0);
    cr_assert_eq(xport_start(liar, on_recv, &s1), 0);
    (void)intrude(liar, 1, n1, a1, &s1);
    close_and_wait(liar);
    close_and_wait(n1);
}

Test(tcp_tls, dialing_the_wrong_node_refused)
{
    static struct sink s2;
    char a1[64], a2[64];
    struct xport *n1 = node(1, own, 1, own, a1);
    struct xport *n2 = node(2, own, 2, own, a2);
    int done = 0;
    static struct sreq r;

    memset(&s2, 0, sizeof s2);
    cr_assert_eq(xport_start(n1, on_recv, &s2), 0);
    cr_assert_eq(xport_start(n2, on_recv, &s2), 0);
    /* Node 1 believes node 3 listens at node 2's address: node 2's
     * certificate says node-2, so node 1 refuses before sending HELLO. */
    cr_assert_eq(send_msg(n1, &r, 3, a2, 0, 64, &done), 0);
    run_until(&done, 1);
    cr_expect_eq(r.status, TERN_ENOCONN);
    cr_expect_eq(refused(n1), 1);
    run_for(100);
    cr_expect_eq(s2.count, 0);
    close_and_wait(n2);
    close_and_wait(n1);
}

Test(tcp_tls, plaintext_transport_refused)
{
    static struct sink s1, sp;
    char a1[64], ap[64];
    struct xport *n1 = node(1, own, 1, own, a1);
    struct xport *plain = tcp_make_random(&env.loop, 2, NULL, ap, sizeof ap);
    int done = 0;
    static struct sreq r;

    memset(&s1, 0, sizeof s1);
    memset(&sp, 0, sizeof sp);
    cr_assert_eq(xport_start(n1, on_recv, &s1), 0);
    cr_assert_eq(xport_start(plain, on_recv, &sp), 0);
    (void)intrude(plain, 1, n1, a1, &s1);
    /* And the other way: a ClientHello is no frame for a plaintext
     * listener, which closes; node 1 delivers nothing either way. */
    cr_assert_eq(send_msg(n1, &r, 2, ap, 0, 64, &done), 0);
    run_until(&done, 1);
    run_for(100);
    cr_expect_eq(sp.count, 0);
    close_and_wait(plain);
    close_and_wait(n1);
}

/* A blocking socket connected to addr. */
static int raw_connect(const char *addr)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)atoi(strchr(addr, ':') + 1));
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Whether the transport closed fd: EOF or reset seen (non-blocking). */
static int raw_closed(int fd)
{
    char b[256];
    ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

Test(tcp_tls, raw_plaintext_frames_refused)
{
    static struct sink s1;
    char a1[64];
    struct xport *n1 = node(1, own, 1, own, a1);
    uint8_t hello[XPORT_TCP_HELLO_LEN], body[32];
    uint8_t wire[(size_t)2 * XPORT_TCP_FRAME_HDR + sizeof hello + sizeof body];
    struct xport_iov hi = {hello, sizeof hello}, bi = {body, sizeof body};
    int fd;

    memset(&s1, 0, sizeof s1);
    memset(body, 0xab, sizeof body);
    tern_put_u32(body, 0);
    cr_assert_eq(xport_start(n1, on_recv, &s1), 0);
    /* A well-formed HELLO from node 2 and a MSG, in plaintext. */
    xport_tcp_hello_encode(hello, 2, 1);
    xport_tcp_frame_encode(wire, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_HELLO,
                           0, &hi, 1, sizeof hello);
    xport_tcp_frame_encode(wire + XPORT_TCP_FRAME_HDR + sizeof hello,
                           XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_MSG, 1, &bi,
                           1, sizeof body);
    fd = raw_connect(a1);
    cr_assert_eq(write(fd, wire, sizeof wire), (ssize_t)sizeof wire);
    run_until_refused(n1, 1);
    run_for(50);
    cr_expect(raw_closed(fd), "the connection was closed");
    cr_expect_eq(s1.count, 0, "nothing delivered");
    close(fd);
    close_and_wait(n1);
}

Test(tcp_tls, silent_connections_time_out_and_are_capped)
{
    static struct sink s1;
    struct xport_tcp_options o = {0};
    char a1[64];
    struct xport *n1;
    int fds[4];
    int closed = 0;

    memset(&s1, 0, sizeof s1);
    tls_node_options(&o, own, 1, own);
    o.handshake_timeout_ms = 400;
    o.max_pending_inbound = 2;
    n1 = tcp_make_random(&env.loop, 1, &o, a1, sizeof a1);
    cr_assert_eq(xport_start(n1, on_recv, &s1), 0);
    for (int i = 0; i < 4; i++) {
        fds[i] = raw_connect(a1);
        run_for(20);
    }
    /* Over the cap: closed at once, and not counted as refused (they
     * were never asked to prove anything). */
    run_for(100);
    for (int i = 0; i < 4; i++) {
        closed += raw_closed(fds[i]);
    }
    cr_expect_eq(closed, 2, "two over the cap closed on accept");
    cr_expect_eq(refused(n1), 0);
    /* The two within the cap time out. */
    run_until_refused(n1, 2);
    run_for(50);
    for (int i = 0; i < 4; i++) {
        cr_expect(raw_closed(fds[i]), "connection %d closed", i);
        close(fds[i]);
    }
    cr_expect_eq(s1.count, 0);
    close_and_wait(n1);
}

Test(tcp_tls, options_need_both_contexts)
{
    struct xport_tcp_options o = {0};
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct xport *x = NULL;

    tls_node_options(&o, own, 1, own);
    o.tls_client = NULL;
    cr_expect_eq(xport_tcp_new(&env.loop, 1, "127.0.0.1:0", &o, &x, errmsg),
                 TERN_EINVAL);
    cr_expect(strstr(errmsg, "TLS") != NULL, "%s", errmsg);
    cr_expect_null(x);
}
