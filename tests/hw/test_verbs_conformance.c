/* Verbs conformance on a real RDMA device: the transport conformance suite
 * (tests/unit/rdma/test_conformance.c: the SAME cases and harness, compiled
 * into this file) run against the verbs backend (suite conformance_verbs),
 * plus verbs-only cases: fencing at the NIC (verbs_fencing), wire faults
 * (verbs_faults: connect timeout to a partitioned peer, dead peer
 * detection; need TERN_HW_PARTITION/TERN_HW_HEAL, else skipped), three
 * nodes all-to-all (verbs_cluster), selective signalling beyond the send
 * queue (verbs_signalling), ring-size mismatch and delivery before start
 * (verbs_misc), a functional round-trip latency (verbs_latency),
 * busy-polling of the CQs (verbs_busy_poll), and the handshake's
 * authentication with the cluster secret (verbs_auth: peers with the
 * secret talk, a transport with another secret and a raw rdma_cm client
 * speaking the old format or forging the proof get no remote key and
 * deliver nothing). Every transport made here holds one test secret
 * unless a case says otherwise.
 * Without an RDMA device (ibv_get_device_list finds nothing) the binary
 * prints why and exits 77 (ctest SKIP_RETURN_CODE 77, label rdma-hw). It
 * ends with a line "N passed, N failed".
 *
 * Addresses: the sender-side transport of each case (loop A) binds the
 * first IPv4 address of TERN_HW_IPS, the receiver side (loop B) the second;
 * default: RXEVM_NODE_IPS (set in the rxe guest, tests/rxe/run.sh), else
 * "10.77.0.1 10.77.0.2"; a third address (the guest's 10.77.0.3) is used
 * by verbs_cluster only. Two different IPs on RDMA devices are needed
 * (rdma_cm does not work on lo); on rxe they are rxe0 and rxe1 on veth +
 * bridge, so the traffic crosses a real (virtual) wire. Only the verbs
 * cases run unless --filter says otherwise. Deadlines are longer than the
 * suite's default (TERN_HW_DEADLINE_S, default 120 s per case): soft-RoCE
 * under QEMU TCG is slow. */
#include "../unit/rdma/test_conformance.c"  // NOLINT(bugprone-suspicious-include)

#include <arpa/inet.h>
#include <fcntl.h>

#include <auth.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <xport_test.h>

#define HW_IP_MAX 48

static char hw_ips[3][HW_IP_MAX]; /* the third is optional */
/* Connect timeout of the transports made here. The backend's default (2 s)
 * is tight for soft-RoCE under QEMU TCG on a loaded host (registering an
 * 8 MiB ring alone can take a second there), so the conformance cases use
 * TERN_HW_CONNECT_MS (default 10000); the timeout case sets 2000. */
static unsigned hw_connect_ms;
/* The secret of the transports made on loop A and loop B (NULL: none). */
static struct auth_secret hw_key, hw_other_key;
static const struct auth_secret *hw_secret_a, *hw_secret_b;
static unsigned hw_max_pending; /* 0: the backend's default */

static void hw_ips_init(void)
{
    const char *env = getenv("TERN_HW_IPS");
    char buf[3 * HW_IP_MAX + 3];

    if (env == NULL || env[0] == '\0') {
        env = getenv("RXEVM_NODE_IPS");
    }
    if (env == NULL || env[0] == '\0') {
        env = "10.77.0.1 10.77.0.2";
    }
    (void)snprintf(buf, sizeof buf, "%s", env);
    hw_ips[2][0] = '\0';
    cr_assert_geq(
        sscanf(buf, "%47s %47s %47s", hw_ips[0], hw_ips[1], hw_ips[2]), 2,
        "TERN_HW_IPS needs two IPv4 addresses, got '%s'", env);
}

static void verbs_setup(void)
{
    const char *s = getenv("TERN_HW_DEADLINE_S");
    uint64_t secs = s != NULL && atoi(s) > 0 ? (uint64_t)atoi(s) : 120;

    const char *cms = getenv("TERN_HW_CONNECT_MS");

    setup();
    hw_ips_init();
    memset(hw_key.key, 0x5a, sizeof hw_key.key);
    memset(hw_other_key.key, 0xa5, sizeof hw_other_key.key);
    hw_secret_a = &hw_key;
    hw_secret_b = &hw_key;
    hw_max_pending = 0;
    hw_connect_ms = cms != NULL && atoi(cms) > 0 ? (unsigned)atoi(cms) : 10000;
    deadline = uv_hrtime() + secs * 1000 * 1000 * 1000;
}

static struct xport *verbs_make_at(uv_loop_t *loop,
                                   uint64_t id,
                                   const struct profile *pr,
                                   const char *addr)
{
    struct xport_verbs_options o = {0};
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    int rc = 0;

    o.ring_bytes = pr->small_budget ? 65536 : 0;
    o.max_queued_bytes = pr->max_queued;
    o.connect_retry_ms = pr->retry_ms;
    o.connect_timeout_ms = hw_connect_ms;
    o.secret = loop == &loop_a ? hw_secret_a : hw_secret_b;
    /* A restarted listener may find its port still held for a moment. */
    for (int i = 0; i < 1000 && !expired(); i++) {
        rc = xport_verbs_new(loop, id, addr, &o, &x, errmsg);
        if (rc != -EADDRINUSE) {
            break;
        }
        pump(1);
    }
    cr_assert_eq(rc, 0, "xport_verbs_new %s: %s", addr, errmsg);
    cr_assert_str_eq(xport_name(x), "verbs");
    return x;
}

static struct xport *verbs_make(uv_loop_t *loop,
                                uint64_t id,
                                const struct profile *pr,
                                char addr[ADDR_MAX])
{
    struct xport_verbs_options o = {0};
    char errmsg[TERN_ERRMSG_SIZE];
    const char *ip = loop == &loop_a ? hw_ips[0] : hw_ips[1];
    struct xport *x = NULL;

    o.ring_bytes = pr->small_budget ? 65536 : 0;
    o.max_queued_bytes = pr->max_queued;
    o.connect_retry_ms = pr->retry_ms;
    o.connect_timeout_ms = hw_connect_ms;
    o.max_pending_auth = hw_max_pending;
    o.secret = loop == &loop_a ? hw_secret_a : hw_secret_b;
    for (int i = 0; i < 100; i++) {
        int rc;
        (void)snprintf(addr, ADDR_MAX, "%s:%d", ip, 20000 + rand() % 40000);
        rc = xport_verbs_new(loop, id, addr, &o, &x, errmsg);
        if (rc == 0) {
            return x;
        }
        cr_assert_eq(rc, -EADDRINUSE, "xport_verbs_new %s: %s", addr, errmsg);
    }
    cr_assert_fail("no free port");
    return NULL;
}

static const struct backend backend_verbs = {"verbs", verbs_make,
                                             verbs_make_at};

#define CONFORMANCE_VERBS(test)                                                \
    Test(conformance_verbs, test, .init = verbs_setup, .fini = teardown,       \
         .timeout = 600)                                                       \
    {                                                                          \
        t_##test(&backend_verbs);                                              \
    }

CONFORMANCE_VERBS(ordering_and_exact_bytes)
CONFORMANCE_VERBS(bidirectional)
CONFORMANCE_VERBS(too_big_rejected)
CONFORMANCE_VERBS(stalled_receiver_bounded)
CONFORMANCE_VERBS(slow_receiver_credit_return)
CONFORMANCE_VERBS(enoconn_then_connect)
CONFORMANCE_VERBS(peer_restart)
CONFORMANCE_VERBS(sender_restart)
CONFORMANCE_VERBS(close_cancels)
CONFORMANCE_VERBS(reply_and_close_from_recv_callback)

/* ---- verbs only -----------------------------------------------------------
 */

/* Send one message and wait for its callback; returns its status. */
static int send_wait(struct xport *x, uint64_t to, const char *addr, unsigned k)
{
    struct sreq r;
    int done = 0;

    cr_assert_eq(send_msg(x, &r, to, addr, k, 100, &done), 0);
    run_until(&done, 1);
    return r.status;
}

/* Fencing at the NIC. B fences epoch 2 while A (epoch 1)
 * is connected: A's next write is refused by B's NIC (the send fails, it is
 * not "handed off" and silently dropped), A's reconnect with epoch 1 is
 * refused, and A gets back in only with epoch 2. A sender that has shown
 * the new epoch keeps its access when the fence rises to it. */
Test(verbs_fencing,
     nic_rejects_deposed_sender,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    struct profile pr = {.retry_ms = 20};
    struct xport_verbs_stats sa, sb;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &pr, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    int delivered, st;
    unsigned k = 1;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    cr_assert_eq(xport_verbs_set_epoch(a, 1), 0);
    cr_assert_eq(xport_verbs_set_fence(b, 1), 0);
    warm_up(a, 2, b_addr, &sink);
    cr_assert_eq(send_wait(a, 2, b_addr, k++), 0);
    run_until(&sink.count, 2);

    /* A new term: B fences A's epoch out. */
    cr_assert_eq(xport_verbs_set_fence(b, 2), 0);
    cr_assert_eq(xport_verbs_stats(b, &sb), 0);
    cr_expect_eq(sb.revoked, 1, "B revoked A's remote write access");
    st = send_wait(a, 2, b_addr, k++);
    cr_expect_eq(st, TERN_ENOCONN, "a deposed sender's write fails (%d)", st);
    cr_assert_eq(xport_verbs_stats(a, &sa), 0);
    cr_expect_geq(sa.nic_rejects, 1, "B's NIC refused the write");

    /* Reconnecting with the old epoch is refused. */
    for (int i = 0; i < 1000000 && !expired(); i++) {
        cr_assert_eq(xport_verbs_stats(b, &sb), 0);
        if (sb.rejected > 0) {
            break;
        }
        st = send_wait(a, 2, b_addr, k++);
        cr_expect_eq(st, TERN_ENOCONN, "stale epoch: no connection (%d)", st);
    }
    cr_expect_geq(sb.rejected, 1, "B refused A's connect with epoch 1");
    for (int i = 0; i < 2000; i++) {
        pump(1);
    }
    cr_expect_eq(sink.count, 2, "nothing from the deposed sender arrived");

    /* A catches up: epoch 2 gets a connection and delivers. */
    cr_assert_eq(xport_verbs_set_epoch(a, 2), 0);
    delivered = sink.count;
    for (int i = 0; i < 1000000 && sink.count == delivered && !expired(); i++) {
        if (send_wait(a, 2, b_addr, k++) == 0) {
            run_until(&sink.count, delivered + 1);
        }
    }
    cr_expect_eq(sink.count, delivered + 1);

    /* A, at epoch 3 and seen by B at 3, keeps access when B fences 3. */
    cr_assert_eq(xport_verbs_set_epoch(a, 3), 0);
    cr_assert_eq(send_wait(a, 2, b_addr, k++), 0);
    run_until(&sink.count, delivered + 2);
    cr_assert_eq(xport_verbs_set_fence(b, 3), 0);
    cr_assert_eq(send_wait(a, 2, b_addr, k++), 0);
    run_until(&sink.count, delivered + 3);
    cr_assert_eq(xport_verbs_stats(b, &sb), 0);
    cr_expect_eq(sb.revoked, 1, "the current sender was not revoked");
    cr_expect_eq(sink.out_of_order + sink.bad, 0);
    cr_assert_eq(xport_verbs_stats(a, &sa), 0);
    cr_log_info(
        "verbs fencing: A posted %llu WRs, %llu doorbells, "
        "%llu nic_rejects; B revoked %llu, rejected %llu",
        (unsigned long long)sa.posted, (unsigned long long)sa.doorbells,
        (unsigned long long)sa.nic_rejects, (unsigned long long)sb.revoked,
        (unsigned long long)sb.rejected);
    close_and_wait(a);
    close_and_wait(b);
}

/* Wire faults (rxe guest only: tests/rxe/run.sh sets TERN_HW_PARTITION
 * and TERN_HW_HEAL to shell commands that cut and restore the receiver's
 * node with netem loss 100% on both ends of its veth). */
static void wire(const char *var)
{
    const char *cmd = getenv(var);
    if (cmd == NULL || cmd[0] == '\0') {
        cr_skip_test("%s not set: no way to cut the wire here", var);
    }
    cr_assert_eq(system(cmd), 0, "%s: %s", var, cmd);
}

static double secs_since(uint64_t t0)
{
    return (double)(uv_hrtime() - t0) / 1e9;
}

/* A connect to a partitioned peer gives up after connect_timeout_ms (the
 * backend's default, 2 s) instead of the CM's ~100 s; after the wire heals,
 * traffic flows. */
Test(verbs_faults,
     connect_to_partitioned_peer_times_out,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    struct profile pr = {.retry_ms = 20};
    struct xport_verbs_stats sa;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a, *b;
    uint64_t t0;
    double took;
    int st;
    unsigned k = 1;

    wire("TERN_HW_PARTITION");
    hw_connect_ms = 0; /* the backend's default */
    a = verbs_make(&loop_a, 1, &pr, a_addr);
    b = verbs_make(&loop_b, 2, &pr, b_addr);
    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    t0 = uv_hrtime();
    st = send_wait(a, 2, b_addr, k++);
    took = secs_since(t0);
    wire("TERN_HW_HEAL");
    cr_expect_eq(st, TERN_ENOCONN, "status %d", st);
    cr_expect_lt(took, 10.0, "gave up after %.1f s", took);
    cr_assert_eq(xport_verbs_stats(a, &sa), 0);
    cr_expect_geq(sa.connect_timeouts, 1);
    cr_log_info("verbs: connect to a partitioned peer failed after %.2f s",
                took);
    for (int i = 0; i < 1000000 && sink.count == 0 && !expired(); i++) {
        if (send_wait(a, 2, b_addr, k++) == 0) {
            run_until(&sink.count, 1);
        }
    }
    cr_expect_eq(sink.count, 1, "delivered once the wire healed");
    close_and_wait(a);
    close_and_wait(b);
}

/* A connected peer vanishes from the wire: retry_count 6 and the ACK
 * timeout turn the next write into IBV_WC_RETRY_EXC_ERR within seconds
 * (rxe treats 7 as infinite); the send fails, and after the wire heals a
 * new connection replaces the old one on both sides. */
Test(verbs_faults,
     dead_peer_detected_then_reconnect,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    struct profile pr = {.retry_ms = 20};
    struct xport_verbs_stats sa;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &pr, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    uint64_t t0;
    double took;
    int st, before;
    unsigned k = 1;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    warm_up(a, 2, b_addr, &sink);
    wire("TERN_HW_PARTITION");
    t0 = uv_hrtime();
    st = send_wait(a, 2, b_addr, k++);
    took = secs_since(t0);
    wire("TERN_HW_HEAL");
    cr_expect_eq(st, TERN_ENOCONN, "status %d", st);
    cr_expect_lt(took, 15.0, "detected after %.1f s", took);
    cr_assert_eq(xport_verbs_stats(a, &sa), 0);
    cr_expect_geq(sa.retry_errors, 1, "IBV_WC_RETRY_EXC_ERR seen");
    cr_log_info("verbs: dead peer detected after %.2f s", took);
    before = sink.count;
    for (int i = 0; i < 1000000 && sink.count == before && !expired(); i++) {
        if (send_wait(a, 2, b_addr, k++) == 0) {
            run_until(&sink.count, before + 1);
        }
    }
    cr_expect_eq(sink.count, before + 1, "delivered on a new connection");
    cr_expect_eq(sink.out_of_order + sink.bad, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* Round-trip latency of one small message and its echo, over verbs
 * (functional figure only: soft-RoCE under TCG is not a performance
 * measurement). Also checks selective signalling: fewer signalled
 * completions than messages is not asserted, only reported. */
struct pingpong
{
    struct xport *x;
    uint64_t to;
    const char *addr;
    struct sreq req;
    int received;
};

static void on_recv_pong(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct pingpong *p = arg;
    (void)from;
    (void)msg;
    (void)len;
    p->received++;
}

static void on_recv_ping(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct pingpong *p = arg;
    struct xport_iov iov = {msg, len};
    (void)from;
    p->received++;
    memset(&p->req, 0, sizeof p->req);
    cr_expect_eq(
        xport_send(p->x, &p->req.req, p->to, p->addr, &iov, 1, on_sent), 0);
}

static int cmp_u64(const void *l, const void *r)
{
    uint64_t a = *(const uint64_t *)l, b = *(const uint64_t *)r;
    return a < b ? -1 : a > b;
}

Test(verbs_latency,
     small_message_round_trip,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    enum { N = 200 };
    static uint64_t rtt[N];
    const size_t i50 = N / 2, i99 = N * 99 / 100;
    static struct pingpong pa, pb;
    struct profile pr = {0};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &pr, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    struct xport_verbs_stats sa;
    static struct sreq r;
    int done = 0;
    uint8_t msg[32] = {0};
    struct xport_iov iov = {msg, sizeof msg};

    memset(&pa, 0, sizeof pa);
    memset(&pb, 0, sizeof pb);
    pb.x = b;
    pb.to = 1;
    pb.addr = a_addr;
    cr_assert_eq(xport_start(a, on_recv_pong, &pa), 0);
    cr_assert_eq(xport_start(b, on_recv_ping, &pb), 0);
    for (int i = 0; i < N + 10 && !expired(); i++) {
        int want = pa.received + 1;
        uint64_t t0 = uv_hrtime();
        done = 0;
        memset(&r, 0, sizeof r);
        r.counter = &done;
        cr_assert_eq(xport_send(a, &r.req, 2, b_addr, &iov, 1, on_sent), 0);
        run_until(&pa.received, want);
        if (i >= 10) { /* the first ones include connection setup */
            rtt[i - 10] = uv_hrtime() - t0;
        }
        run_until(&done, 1);
        cr_expect_eq(r.status, 0);
    }
    qsort(rtt, N, sizeof rtt[0], cmp_u64);
    cr_assert_eq(xport_verbs_stats(a, &sa), 0);
    printf(
        "verbs round trip (32 B message + echo, %d runs): p50 %.1f us, "
        "p99 %.1f us, max %.1f us; A: %llu WRs posted (%llu signalled), "
        "%llu doorbells, %llu nops\n",
        N, (double)rtt[i50] / 1e3, (double)rtt[i99] / 1e3,
        (double)rtt[N - 1] / 1e3, (unsigned long long)sa.posted,
        (unsigned long long)sa.signalled, (unsigned long long)sa.doorbells,
        (unsigned long long)sa.nops);
    (void)fflush(stdout);
    close_and_wait(a);
    close_and_wait(b);
}

/* Busy-poll (xport_verbs_set_busy_poll): with it on both ends, a ping-pong
 * of distinct messages is answered in order and byte for byte while the
 * CQs are polled from the loop (spin rounds that found completions); a
 * round ends at the delivered answer, and a send nobody answers ends its
 * round at the deadline. Prints the round trip beside the same exchange
 * without polling (functional under TCG). */
struct bp_side
{
    struct xport *x;
    uint64_t to;
    const char *addr;
    int echo; /* 1: send back what arrives */
    int received;
    int bad;
    struct sreq reqs[128]; /* one per echo: an echo may still be in flight
                              when the next message arrives */
};

static void bp_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct bp_side *p = arg;
    const uint8_t *b = msg;
    unsigned k = (unsigned)p->received;
    (void)from;
    if (len != 64 || tern_get_u32(b) != k) {
        p->bad++;
    }
    for (size_t i = 4; i < len && i < 64; i++) {
        if (b[i] != pattern(k, i)) {
            p->bad++;
            break;
        }
    }
    p->received++;
    if (p->echo) {
        struct xport_iov iov = {msg, len};
        struct sreq *r = &p->reqs[k % 128];
        memset(r, 0, sizeof *r);
        cr_expect_eq(
            xport_send(p->x, &r->req, p->to, p->addr, &iov, 1, on_sent), 0);
    }
}

static void count_active_spin(uv_handle_t *h, void *arg)
{
    if (h->type == UV_IDLE && uv_is_active(h)) {
        (*(int *)arg)++;
    }
}

static int active_idles_a(void)
{
    int n = 0;
    uv_walk(&loop_a, count_active_spin, &n);
    return n;
}

static double bp_rounds(struct xport *a,
                        const char *b_addr,
                        struct bp_side *pa,
                        unsigned first,
                        unsigned n)
{
    static uint64_t rtt[64];
    static struct sreq r;
    size_t mid;
    int done;
    for (unsigned i = 0; i < n && !expired(); i++) {
        int want = pa->received + 1;
        uint64_t t0 = uv_hrtime();
        done = 0;
        cr_assert_eq(send_msg(a, &r, 2, b_addr, first + i, 64, &done), 0);
        run_until(&pa->received, want);
        rtt[i % 64] = uv_hrtime() - t0;
        run_until(&done, 1);
        cr_expect_eq(r.status, 0);
    }
    qsort(rtt, n < 64 ? n : 64, sizeof rtt[0], cmp_u64);
    mid = (size_t)(n < 64 ? n : 64) / 2;
    return (double)rtt[mid] / 1e3;
}

Test(verbs_busy_poll,
     cq_polled_until_the_answer_or_deadline,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct bp_side pa, pb;
    static struct sreq lone;
    struct profile pr = {0};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &pr, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    struct xport_verbs_stats s0, s1;
    double p50_off, p50_on;
    int done = 0;
    uint64_t t0;

    memset(&pa, 0, sizeof pa);
    memset(&pb, 0, sizeof pb);
    pb.x = b;
    pb.to = 1;
    pb.addr = a_addr;
    pb.echo = 1;
    cr_assert_eq(xport_verbs_set_busy_poll(NULL, 10), TERN_EINVAL);
    cr_assert_eq(xport_start(a, bp_recv, &pa), 0);
    cr_assert_eq(xport_start(b, bp_recv, &pb), 0);
    /* Without polling first (also connects): no spin round runs. */
    p50_off = bp_rounds(a, b_addr, &pa, 0, 40);
    cr_assert_eq(xport_verbs_stats(a, &s0), 0);
    cr_expect_eq(s0.spins, 0, "no round while off");
    cr_assert_eq(xport_verbs_set_busy_poll(a, 5000000), 0); /* 5 s */
    cr_assert_eq(xport_verbs_set_busy_poll(b, 5000000), 0);
    p50_on = bp_rounds(a, b_addr, &pa, 40, 40);
    cr_assert_eq(xport_verbs_stats(a, &s1), 0);
    cr_expect_eq(pa.received, 80);
    cr_expect_eq(pb.received, 80);
    cr_expect_eq(pa.bad + pb.bad, 0, "order and bytes kept");
    cr_expect_gt(s1.spins, 0, "A polled its CQ from the loop");
    cr_expect_gt(s1.spin_hits, 0, "and found completions there");
    for (int i = 0; i < 100 && active_idles_a() > 0; i++) {
        uv_run(&loop_a, UV_RUN_NOWAIT);
    }
    cr_expect_eq(active_idles_a(), 0, "the answer ended the round");
    /* A send nobody answers (B no longer echoes): the deadline ends it. */
    pb.echo = 0;
    cr_assert_eq(xport_verbs_set_busy_poll(a, 20000), 0); /* 20 ms */
    cr_assert_eq(send_msg(a, &lone, 2, b_addr, 80, 64, &done), 0);
    run_until(&pb.received, 81);
    t0 = uv_hrtime();
    while (active_idles_a() > 0 && uv_hrtime() - t0 < 5000000000ull) {
        uv_run(&loop_a, UV_RUN_NOWAIT);
        uv_run(&loop_b, UV_RUN_NOWAIT);
    }
    cr_expect_eq(active_idles_a(), 0, "the deadline ended the round");
    run_until(&done, 1);
    cr_expect_eq(lone.status, 0);
    cr_assert_eq(xport_verbs_set_busy_poll(a, 0), 0);
    cr_assert_eq(xport_verbs_set_busy_poll(b, 0), 0);
    printf(
        "verbs busy-poll round trip (64 B + echo, 40 each): p50 %.1f us "
        "polling, %.1f us on the channel; A: %llu rounds, %llu found "
        "completions\n",
        p50_on, p50_off, (unsigned long long)s1.spins,
        (unsigned long long)s1.spin_hits);
    (void)fflush(stdout);
    close_and_wait(a);
    close_and_wait(b);
}

/* Three nodes on three devices (rxe0..rxe2 in the guest), each on its own
 * loop, all sending to all: six connections, per-sender order and exact
 * bytes at every receiver. */
struct node_sink
{
    int count[4];
    long last[4];
    int bad;
};

static void on_recv_node(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct node_sink *s = arg;
    const uint8_t *b = msg;
    unsigned k = len >= 4 ? tern_get_u32(b) : 0;

    if (from < 1 || from > 3 || len < 4 || (long)k <= s->last[from]) {
        s->bad++;
        return;
    }
    s->last[from] = k;
    for (size_t i = 4; i < len; i++) {
        if (b[i] != pattern(k, i)) {
            s->bad++;
            break;
        }
    }
    s->count[from]++;
}

Test(verbs_cluster,
     three_nodes_all_to_all,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    enum { NODES = 3, N = 150 };
    static struct sreq reqs[NODES][NODES][N];
    static struct node_sink sinks[NODES];
    static uv_loop_t loop_c;
    uv_loop_t *loops[NODES] = {&loop_a, &loop_b, &loop_c};
    struct xport *x[NODES];
    char addr[NODES][ADDR_MAX];
    int done = 0, closed = 0, total = 0;

    if (hw_ips[2][0] == '\0') {
        cr_skip_test("TERN_HW_IPS has no third address");
    }
    cr_assert_eq(uv_loop_init(&loop_c), 0);
    memset(sinks, 0, sizeof sinks);
    for (int i = 0; i < NODES; i++) {
        struct xport_verbs_options o = {0};
        char errmsg[TERN_ERRMSG_SIZE];
        int rc = -EADDRINUSE;
        for (int t = 0; t < 100 && rc == -EADDRINUSE; t++) {
            (void)snprintf(addr[i], ADDR_MAX, "%.47s:%d", hw_ips[i],
                           20000 + rand() % 40000);
            o.connect_timeout_ms = hw_connect_ms;
            o.secret = &hw_key;
            rc = xport_verbs_new(loops[i], (uint64_t)i + 1, addr[i], &o, &x[i],
                                 errmsg);
        }
        cr_assert_eq(rc, 0, "node %d: %s", i + 1, errmsg);
        for (int j = 1; j <= NODES; j++) {
            sinks[i].last[j] = -1;
        }
        cr_assert_eq(xport_start(x[i], on_recv_node, &sinks[i]), 0);
    }
    for (unsigned k = 0; k < N; k++) {
        for (int i = 0; i < NODES; i++) {
            for (int j = 0; j < NODES; j++) {
                if (i != j) {
                    cr_assert_eq(
                        send_msg(x[i], &reqs[i][j][k], (uint64_t)j + 1, addr[j],
                                 k, 40 + 97 * (size_t)k, &done),
                        0);
                }
            }
        }
    }
    for (long it = 0; it < 50000000 && !expired(); it++) {
        total = 0;
        for (int i = 0; i < NODES; i++) {
            uv_run(loops[i], UV_RUN_NOWAIT);
            for (int j = 1; j <= NODES; j++) {
                total += sinks[i].count[j];
            }
        }
        if (done == NODES * (NODES - 1) * N && total == done) {
            break;
        }
    }
    cr_expect_eq(done, NODES * (NODES - 1) * N, "every send completed");
    cr_expect_eq(total, NODES * (NODES - 1) * N, "every message arrived");
    for (int i = 0; i < NODES; i++) {
        cr_expect_eq(sinks[i].bad, 0, "node %d: order and bytes", i + 1);
        for (int j = 0; j < NODES; j++) {
            if (i != j) {
                cr_expect_eq(sinks[i].count[j + 1], N, "%d -> %d", j + 1,
                             i + 1);
            }
        }
    }
    for (int i = 0; i < NODES; i++) {
        for (int j = 0; j < NODES; j++) {
            for (int k = 0; i != j && k < N; k++) {
                cr_expect_eq(reqs[i][j][k].status, 0);
            }
        }
        xport_close(x[i], on_closed, &closed);
    }
    for (long it = 0; it < 50000000 && closed < NODES && !expired(); it++) {
        for (int i = 0; i < NODES; i++) {
            uv_run(loops[i], UV_RUN_NOWAIT);
        }
    }
    cr_assert_eq(closed, NODES);
    for (int i = 0; i < 1000 && uv_run(&loop_c, UV_RUN_NOWAIT); i++) {
    }
    cr_expect_eq(uv_loop_close(&loop_c), 0, "every handle of C was closed");
}

/* The receiver's ring is smaller than the sender's max_message: a message
 * that fits the sender's budget but not the peer's ring completes with
 * TERN_ETOOBIG (asynchronously); smaller ones around it arrive. */
Test(verbs_misc,
     peer_ring_smaller_than_message,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    struct profile big = {0}, small = {.small_budget = 1};
    struct sreq r[3];
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &big, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &small, b_addr);
    int done = 0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    warm_up(a, 2, b_addr, &sink);
    cr_assert_eq(send_msg(a, &r[0], 2, b_addr, 1, 1000, &done), 0);
    cr_assert_eq(send_msg(a, &r[1], 2, b_addr, 2, 40000, &done), 0);
    cr_assert_eq(send_msg(a, &r[2], 2, b_addr, 3, 32768 - 40, &done), 0);
    run_until(&done, 3);
    run_until(&sink.count, 3);
    cr_expect_eq(r[0].status, 0);
    cr_expect_eq(r[1].status, TERN_ETOOBIG, "status %d", r[1].status);
    cr_expect_eq(r[2].status, 0);
    cr_expect_eq(sink.idx[1], 1);
    cr_expect_eq(sink.idx[2], 3);
    cr_expect_eq(sink.bad + sink.out_of_order, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* Records that land before xport_start stay in the ring and are delivered,
 * in order, once the receiver starts. */
Test(verbs_misc,
     delivery_waits_for_start,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    enum { N = 5 };
    static struct sink sink;
    struct profile pr = {0};
    struct sreq r[N];
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &pr, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    int done = 0;

    sink_init(&sink);
    for (unsigned k = 0; k < N; k++) {
        cr_assert_eq(send_msg(a, &r[k], 2, b_addr, k, 500 + k, &done), 0);
    }
    run_until(&done, N);
    for (int k = 0; k < N; k++) {
        cr_expect_eq(r[k].status, 0, "handed off before the receiver starts");
    }
    for (int i = 0; i < 2000; i++) {
        pump(1);
    }
    cr_expect_eq(sink.count, 0);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    run_until(&sink.count, N);
    cr_expect_eq(sink.len[N - 1], 500 + N - 1);
    cr_expect_eq(sink.bad + sink.out_of_order, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* Selective signalling and send-queue accounting: a burst far larger than
 * the send queue (256 WRs), sent without running the loop in between,
 * goes through with a fraction of the WRs signalled; every callback fires
 * with 0 and every message arrives in order. */
Test(verbs_signalling,
     burst_beyond_send_queue,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    enum { N = 2000 };
    static struct sreq reqs[N];
    static struct sink sink;
    struct profile pr = {0};
    struct xport_verbs_stats sa;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = verbs_make(&loop_a, 1, &pr, a_addr);
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    int done = 0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    warm_up(a, 2, b_addr, &sink);
    for (unsigned k = 1; k <= N; k++) {
        cr_assert_eq(send_msg(a, &reqs[k - 1], 2, b_addr, k, 64, &done), 0);
    }
    run_until(&done, N);
    run_until(&sink.count, N + 1);
    for (int k = 0; k < N; k++) {
        cr_expect_eq(reqs[k].status, 0, "send %d", k);
    }
    cr_expect_eq(sink.out_of_order + sink.bad, 0);
    cr_assert_eq(xport_verbs_stats(a, &sa), 0);
    printf(
        "verbs burst of %d x 64 B: %llu WRs posted, %llu signalled, "
        "%llu doorbells, %llu nops, %llu waits for room\n",
        N, (unsigned long long)sa.posted, (unsigned long long)sa.signalled,
        (unsigned long long)sa.doorbells, (unsigned long long)sa.nops,
        (unsigned long long)sa.credit_waits);
    (void)fflush(stdout);
    cr_expect_lt(sa.signalled * 4, sa.posted, "selective signalling");
    close_and_wait(a);
    close_and_wait(b);
}

/* ---- authentication --------------------------------------------------------
 * The handshake of rdma/verbs_cm.c (version 2): CONNECT and ACCEPT carry
 * ids, epoch/fence, nonces and the receiver's proof, never an address or
 * a key; the ring's address and rkey go out only after the sender's proof
 * checked out. */

/* Peers holding the same secret exchange messages both ways (and so do
 * two peers without one); nothing is refused. */
Test(verbs_auth,
     same_secret_exchanges,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink_a, sink_b;
    struct profile pr = {0};
    struct xport_verbs_stats sa, sb;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a, *b;

    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            hw_secret_a = NULL;
            hw_secret_b = NULL;
        }
        a = verbs_make(&loop_a, 1, &pr, a_addr);
        b = verbs_make(&loop_b, 2, &pr, b_addr);
        sink_init(&sink_a);
        sink_init(&sink_b);
        cr_assert_eq(xport_start(a, on_recv, &sink_a), 0);
        cr_assert_eq(xport_start(b, on_recv, &sink_b), 0);
        warm_up(a, 2, b_addr, &sink_b);
        warm_up(b, 1, a_addr, &sink_a);
        cr_assert_eq(send_wait(a, 2, b_addr, 1), 0);
        run_until(&sink_b.count, 2);
        cr_expect_eq(sink_a.bad + sink_b.bad + sink_b.out_of_order, 0);
        cr_assert_eq(xport_verbs_stats(a, &sa), 0);
        cr_assert_eq(xport_verbs_stats(b, &sb), 0);
        cr_expect_eq(sa.auth_refused + sb.auth_refused, 0, "round %d", round);
        cr_expect_eq(sa.connects, 1, "round %d", round);
        cr_expect_eq(sb.accepts, 1, "round %d", round);
        close_and_wait(a);
        close_and_wait(b);
    }
}

/* A sender with another secret, or with none, gets no connection: every
 * send fails, nothing is delivered, and both sides count the refusal. */
Test(verbs_auth,
     other_secret_delivers_nothing,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    struct profile pr = {.retry_ms = 20};
    struct xport_verbs_stats sa, sb;
    struct xport_stats st;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a, *b;
    unsigned k = 1;

    b = verbs_make(&loop_b, 2, &pr, b_addr);
    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    for (int round = 0; round < 2; round++) {
        uint64_t refused_before;
        cr_assert_eq(xport_verbs_stats(b, &sb), 0);
        refused_before = sb.auth_refused;
        hw_secret_a = round == 0 ? &hw_other_key : NULL;
        a = verbs_make(&loop_a, 1, &pr, a_addr);
        for (int i = 0; i < 3; i++) {
            int rc = send_wait(a, 2, b_addr, k++);
            cr_expect_eq(rc, TERN_ENOCONN, "round %d send %d: %d", round, i,
                         rc);
        }
        /* B counts once A's side of the connection is gone. */
        for (int i = 0; i < 1000000 && !expired(); i++) {
            cr_assert_eq(xport_verbs_stats(b, &sb), 0);
            if (sb.auth_refused >= refused_before + 3) {
                break;
            }
            pump(1);
        }
        cr_assert_eq(xport_verbs_stats(a, &sa), 0);
        cr_expect_geq(sa.auth_refused, 3, "A refused B's proof (round %d)",
                      round);
        cr_expect_eq(sa.connects, 0);
        cr_expect_geq(sb.auth_refused, refused_before + 3,
                      "B counted the refused connections (round %d)", round);
        cr_expect_eq(sb.accepts, 0);
        cr_assert_eq(xport_get_stats(b, &st), 0);
        cr_expect_eq(st.auth_refused, sb.auth_refused);
        close_and_wait(a);
    }
    for (int i = 0; i < 2000; i++) {
        pump(1);
    }
    cr_expect_eq(sink.count, 0, "nothing delivered");
    close_and_wait(b);
}

/* A raw rdma_cm client (no transport): its own PD, CQ and QP, a 256-byte
 * buffer registered with remote write (0..63: its receive, 64..127: its
 * send, 128..135: a "credit word" offered to the receiver). */
struct raw
{
    struct rdma_event_channel *ech;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *buf;
    int has_qp;
    uint8_t priv[256]; /* private data of the last event */
    size_t priv_len;
};

/* The next cm event on r, pumping both loops meanwhile; -1 on timeout. */
static int raw_event(struct raw *r, double max_s)
{
    uint64_t t0 = uv_hrtime();
    struct rdma_cm_event *ev;

    while (!expired() && secs_since(t0) < max_s) {
        if (rdma_get_cm_event(r->ech, &ev) == 0) {
            int type = (int)ev->event;
            r->priv_len = 0;
            if (ev->param.conn.private_data != NULL) {
                r->priv_len = TERN_MIN((size_t)ev->param.conn.private_data_len,
                                       sizeof r->priv);
                memcpy(r->priv, ev->param.conn.private_data, r->priv_len);
            }
            rdma_ack_cm_event(ev);
            return type;
        }
        pump(1);
    }
    return -1;
}

/* "ip:port" -> sockaddr_in. */
static void raw_sockaddr(const char *addr, struct sockaddr_in *sa)
{
    char ip[HW_IP_MAX];
    int port = 0;

    cr_assert_eq(sscanf(addr, "%47[^:]:%d", ip, &port), 2, "address %s", addr);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    cr_assert_eq(inet_pton(AF_INET, ip, &sa->sin_addr), 1, "address %s", addr);
}

/* Resolve, create the QP (one receive of 64 bytes posted) and connect to
 * addr with the given private data. */
static void raw_connect(struct raw *r,
                        const char *addr,
                        const uint8_t *pd,
                        size_t pd_len)
{
    struct sockaddr_in src, dst;
    struct ibv_qp_init_attr qa;
    struct rdma_conn_param cp;
    struct ibv_sge sge;
    struct ibv_recv_wr wr, *bad = NULL;
    char sa[ADDR_MAX];
    int fl;

    memset(r, 0, sizeof *r);
    (void)snprintf(sa, sizeof sa, "%s:0", hw_ips[0]);
    raw_sockaddr(sa, &src);
    raw_sockaddr(addr, &dst);
    r->ech = rdma_create_event_channel();
    cr_assert_not_null(r->ech);
    fl = fcntl(r->ech->fd, F_GETFL);
    cr_assert_eq(fcntl(r->ech->fd, F_SETFL, fl | O_NONBLOCK), 0);
    cr_assert_eq(rdma_create_id(r->ech, &r->id, NULL, RDMA_PS_TCP), 0);
    cr_assert_eq(rdma_resolve_addr(r->id, (struct sockaddr *)&src,
                                   (struct sockaddr *)&dst, 5000),
                 0);
    cr_assert_eq(raw_event(r, 30), RDMA_CM_EVENT_ADDR_RESOLVED);
    cr_assert_eq(rdma_resolve_route(r->id, 5000), 0);
    cr_assert_eq(raw_event(r, 30), RDMA_CM_EVENT_ROUTE_RESOLVED);
    r->pd = ibv_alloc_pd(r->id->verbs);
    cr_assert_not_null(r->pd);
    r->cq = ibv_create_cq(r->id->verbs, 16, NULL, NULL, 0);
    cr_assert_not_null(r->cq);
    cr_assert_eq(posix_memalign((void **)&r->buf, 4096, 256), 0);
    memset(r->buf, 0, 256);
    r->mr = ibv_reg_mr(r->pd, r->buf, 256,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    cr_assert_not_null(r->mr);
    memset(&qa, 0, sizeof qa);
    qa.send_cq = r->cq;
    qa.recv_cq = r->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 8;
    qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    cr_assert_eq(rdma_create_qp(r->id, r->pd, &qa), 0);
    r->has_qp = 1;
    sge.addr = (uintptr_t)r->buf;
    sge.length = 64;
    sge.lkey = r->mr->lkey;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    cr_assert_eq(ibv_post_recv(r->id->qp, &wr, &bad), 0);
    memset(&cp, 0, sizeof cp);
    cp.private_data = pd;
    cp.private_data_len = (uint8_t)pd_len;
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = 6;
    cp.rnr_retry_count = 6;
    cr_assert_eq(rdma_connect(r->id, &cp), 0);
}

/* Successful receive completions on r's CQ so far (the receiver's RING
 * message would be one). */
static int raw_received(struct raw *r)
{
    struct ibv_wc wc[8];
    int n, got = 0;

    while ((n = ibv_poll_cq(r->cq, 8, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            got += wc[i].status == IBV_WC_SUCCESS &&
                   (wc[i].opcode & IBV_WC_RECV) != 0;
        }
    }
    return got;
}

static void raw_close(struct raw *r)
{
    if (r->has_qp) {
        rdma_destroy_qp(r->id);
    }
    if (r->mr != NULL) {
        ibv_dereg_mr(r->mr);
    }
    if (r->cq != NULL) {
        ibv_destroy_cq(r->cq);
    }
    if (r->pd != NULL) {
        ibv_dealloc_pd(r->pd);
    }
    if (r->id != NULL) {
        rdma_destroy_id(r->id);
    }
    if (r->ech != NULL) {
        rdma_destroy_event_channel(r->ech);
    }
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* CONNECT of handshake version v from sender id 1 to receiver id 2.
 * Version 1 (the old format) carried the sender's credit word address and
 * rkey at 24/32 and its epoch at 40; version 2 carries the epoch at 24 and
 * a nonce at 32. */
static size_t raw_connect_pd(uint8_t pd[56], unsigned v, const struct raw *r)
{
    memset(pd, 0, 56);
    tern_put_u32(pd, 0x56534d54u);
    tern_put_u16(pd + 4, (uint16_t)v);
    tern_put_u16(pd + 6, 1);
    tern_put_u64(pd + 8, 1);
    tern_put_u64(pd + 16, 2);
    if (v == 1) {
        tern_put_u64(pd + 24, (uintptr_t)(r->buf + 128));
        tern_put_u32(pd + 32, r->mr != NULL ? r->mr->rkey : 0x1234);
        tern_put_u64(pd + 40, 0);
    } else {
        tern_put_u64(pd + 24, 0);
        for (int i = 0; i < 16; i++) {
            pd[32 + i] = (uint8_t)(17 * i + 3);
        }
    }
    tern_put_u32(pd + 48, tern_checksum32(pd, 48));
    return 52;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) {
            return 0;
        }
    }
    return 1;
}

/* A stranger speaking the old format (version 1 CONNECT with its credit
 * word in the clear) is rejected: its REJECTED event carries nothing, no
 * connection comes up, nothing is delivered, auth_refused counts it. */
Test(verbs_auth,
     raw_v1_connect_rejected,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    static struct raw r;
    struct profile pr = {0};
    struct xport_verbs_stats sb;
    char b_addr[ADDR_MAX];
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    uint8_t pd[56];
    int ev;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    memset(&r, 0, sizeof r);
    /* The credit word it offers is a placeholder (r has no buffer yet):
     * the request is refused before anything could use it. */
    raw_connect(&r, b_addr, pd, raw_connect_pd(pd, 1, &r));
    ev = raw_event(&r, 60);
    cr_expect_eq(ev, RDMA_CM_EVENT_REJECTED, "event %d (%s)", ev,
                 ev >= 0 ? rdma_event_str((enum rdma_cm_event_type)ev) : "-");
    cr_expect(all_zero(r.priv, r.priv_len),
              "the rejection carries no private data");
    cr_expect_eq(raw_received(&r), 0, "no message from the receiver");
    cr_assert_eq(xport_verbs_stats(b, &sb), 0);
    cr_expect_eq(sb.auth_refused, 1);
    cr_expect_eq(sb.accepts, 0);
    raw_close(&r);
    for (int i = 0; i < 500; i++) {
        pump(1);
    }
    cr_expect_eq(sink.count, 0, "nothing delivered");
    close_and_wait(b);
}

/* Decode an ACCEPT (version 2) from B (id 2) to sender 1: every byte is
 * one of its documented fields (ids, fence, nonce, MAC, checksum), the
 * rest of what the CM delivered is zero: no address, no key. */
static void expect_accept_v2(const struct raw *r)
{
    cr_assert_geq(r->priv_len, 84, "ACCEPT of %zu bytes", r->priv_len);
    cr_expect_eq(tern_get_u32(r->priv), 0x56534d54u);
    cr_expect_eq(tern_get_u16(r->priv + 4), 2, "version 2");
    cr_expect_eq(tern_get_u16(r->priv + 6), 2, "type ACCEPT");
    cr_expect_eq(tern_get_u64(r->priv + 8), 1);
    cr_expect_eq(tern_get_u64(r->priv + 16), 2);
    cr_expect_eq(tern_get_u64(r->priv + 24), 0, "B's fence");
    cr_expect(!all_zero(r->priv + 32, 16), "a receiver nonce");
    cr_expect(!all_zero(r->priv + 48, 32), "a MAC");
    cr_expect_eq(tern_get_u32(r->priv + 80), tern_checksum32(r->priv, 80));
    cr_expect(all_zero(r->priv + 84, r->priv_len - 84), "nothing else");
}

/* A stranger that speaks version 2 gets an ACCEPT (which holds no address
 * or key), then sends an AUTH with a forged MAC offering its own credit
 * word: it never receives RING (no ring address or rkey), B never writes
 * into its memory, B closes the connection, counts it, and delivers
 * nothing; a peer with the secret is served right after. A second
 * stranger writes (a zero-length RDMA write with immediate, which needs
 * no key) instead of authenticating: refused the same way. */
Test(verbs_auth,
     raw_forged_auth_gets_no_rkey,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    static struct raw r;
    struct profile pr = {0};
    struct xport_verbs_stats sb;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *b = verbs_make(&loop_b, 2, &pr, b_addr);
    struct xport *a;
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;
    uint8_t pd[56];
    uint8_t *m;
    int ev, got = 0;
    uint64_t t0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    for (int variant = 0; variant < 2; variant++) {
        raw_connect(&r, b_addr, pd, raw_connect_pd(pd, 2, &r));
        ev = raw_event(&r, 60);
        cr_assert_eq(ev, RDMA_CM_EVENT_ESTABLISHED, "variant %d: event %d",
                     variant, ev);
        expect_accept_v2(&r);
        memset(&wr, 0, sizeof wr);
        wr.wr_id = 2;
        wr.send_flags = IBV_SEND_SIGNALED;
        if (variant == 0) {
            /* AUTH: our word at buf + 128, a MAC we cannot compute */
            m = r.buf + 64;
            memset(m, 0, 56);
            tern_put_u32(m, 0x56534d54u);
            tern_put_u16(m + 4, 2);
            tern_put_u16(m + 6, 3);
            tern_put_u64(m + 8, (uintptr_t)(r.buf + 128));
            tern_put_u32(m + 16, r.mr->rkey);
            memset(m + 24, 0x77, 32);
            sge.addr = (uintptr_t)m;
            sge.length = 56;
            sge.lkey = r.mr->lkey;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
        } else {
            wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(64);
        }
        cr_assert_eq(ibv_post_send(r.id->qp, &wr, &bad), 0);
        /* B closes the connection: DISCONNECTED (bounded wait). */
        t0 = uv_hrtime();
        ev = raw_event(&r, 60);
        got += raw_received(&r);
        cr_expect_eq(ev, RDMA_CM_EVENT_DISCONNECTED,
                     "variant %d: B closed the connection (event %d)", variant,
                     ev);
        while (secs_since(t0) < 1.0 && !expired()) {
            got += raw_received(&r);
            pump(1);
        }
        cr_expect_eq(got, 0, "variant %d: no RING message", variant);
        cr_expect(all_zero(r.buf, 64), "variant %d: nothing received", variant);
        cr_expect(all_zero(r.buf + 128, 128),
                  "variant %d: B never wrote into our memory", variant);
        cr_assert_eq(xport_verbs_stats(b, &sb), 0);
        cr_expect_eq(sb.auth_refused, (uint64_t)variant + 1);
        cr_expect_eq(sb.accepts, 0);
        raw_close(&r);
    }
    cr_expect_eq(sink.count, 0, "nothing delivered");
    /* B still serves a peer that holds the secret. */
    a = verbs_make(&loop_a, 1, &pr, a_addr);
    warm_up(a, 2, b_addr, &sink);
    cr_assert_eq(xport_verbs_stats(b, &sb), 0);
    cr_expect_eq(sb.accepts, 1);
    cr_expect_eq(sb.auth_refused, 2);
    close_and_wait(a);
    close_and_wait(b);
}

/* Unauthenticated inbound connections are bounded: with max_pending_auth
 * 1, a second stranger is rejected while the first waits, and the first
 * is closed once connect_timeout_ms passed without AUTH. */
Test(verbs_auth,
     pending_bounded_and_timed_out,
     .init = verbs_setup,
     .fini = teardown,
     .timeout = 600)
{
    static struct sink sink;
    static struct raw r1, r2;
    struct profile pr = {0};
    struct xport_verbs_stats sb;
    char b_addr[ADDR_MAX];
    struct xport *b;
    uint8_t pd[56];
    int ev;
    uint64_t t0;

    hw_max_pending = 1;
    hw_connect_ms = 3000;
    b = verbs_make(&loop_b, 2, &pr, b_addr);
    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    raw_connect(&r1, b_addr, pd, raw_connect_pd(pd, 2, &r1));
    t0 = uv_hrtime();
    cr_assert_eq(raw_event(&r1, 60), RDMA_CM_EVENT_ESTABLISHED);
    raw_connect(&r2, b_addr, pd, raw_connect_pd(pd, 2, &r2));
    ev = raw_event(&r2, 60);
    cr_expect_eq(ev, RDMA_CM_EVENT_REJECTED, "the second waits not (%d)", ev);
    cr_assert_eq(xport_verbs_stats(b, &sb), 0);
    cr_expect_eq(sb.auth_refused, 1, "the rejected one");
    ev = raw_event(&r1, 120);
    cr_expect_eq(ev, RDMA_CM_EVENT_DISCONNECTED, "timed out (%d)", ev);
    cr_expect_geq(secs_since(t0), 2.0, "not before the timeout");
    cr_assert_eq(xport_verbs_stats(b, &sb), 0);
    cr_expect_eq(sb.auth_refused, 2, "and the timed-out one");
    cr_expect_eq(raw_received(&r1), 0);
    raw_close(&r1);
    raw_close(&r2);
    cr_expect_eq(sink.count, 0);
    close_and_wait(b);
}

/* ---- runner ---------------------------------------------------------------
 */

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    printf("%zu passed, %zu failed\n", stats->tests_passed,
           stats->tests_failed + stats->tests_crashed);
    (void)fflush(stdout);
}

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests;
    struct ibv_device **devs;
    int n = 0;
    int result = 0;

    devs = ibv_get_device_list(&n);
    if (devs != NULL) {
        ibv_free_device_list(devs);
    }
    if (n <= 0) {
        printf("no RDMA device (ibv_get_device_list found none): skipped\n");
        return 77;
    }
    tests = criterion_initialize();
    criterion_options.pattern = "@(conformance_verbs|verbs_*)/*";
    if (criterion_handle_args(argc, argv, true)) {
        result = !criterion_run_all_tests(tests);
    }
    criterion_finalize(tests);
    return result;
}
