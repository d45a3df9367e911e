/* Transport conformance suite: ONE set of tests of the xport contract
 * (rdma/xport.h) run against every backend that moves bytes between
 * processes (tcp, tcp with mutual TLS, shm; verbs joins when it runs
 * somewhere), through a table
 * of constructors. The sender and the receiver run on two separate uv loops
 * that the test pumps explicitly, so a stalled or slow receiver is a loop
 * the test does not run (no sleeps; every wait is a bounded poll with a
 * wall-clock deadline). Each test is a plain function taking the backend;
 * one Criterion test per (backend, test) pair is declared at the bottom.
 * shm runs twice: without authentication and with a cluster secret. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <auth.h>
#include <tern_common.h>
#include <xport.h>

#include "xport_test_harness.h"
#include "xport_test_tls.h"

#define DEADLINE_NS  (20ull * 1000 * 1000 * 1000)
#define ADDR_MAX     108
#define MAX_RECORDED 8192

/* ---- harness: two loops ------------------------------------------------ */

static uv_loop_t loop_a, loop_b; /* sender side, receiver side */
static uint64_t deadline;
static char tmpdir[64];

static void setup(void)
{
    cr_assert(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
    srand((unsigned)(getpid() ^ time(NULL)));
    in_send = 0;
    reentrant_cbs = 0;
    cr_assert_eq(uv_loop_init(&loop_a), 0);
    cr_assert_eq(uv_loop_init(&loop_b), 0);
    deadline = uv_hrtime() + DEADLINE_NS;
    (void)snprintf(tmpdir, sizeof tmpdir, "/tmp/tern-conf-XXXXXX");
    cr_assert(mkdtemp(tmpdir) != NULL);
}

static void rm_tree(const char *dir)
{
    char cmd[128];
    /* Only our own mkdtemp directory (sockets of closed transports are
     * already unlinked; this removes leftovers of a failed test). */
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

static void teardown(void)
{
    for (int i = 0; i < 1000; i++) {
        int a = uv_run(&loop_a, UV_RUN_NOWAIT);
        int b = uv_run(&loop_b, UV_RUN_NOWAIT);
        if (!a && !b) {
            break;
        }
    }
    cr_expect_eq(uv_loop_close(&loop_a), 0, "every handle of A was closed");
    cr_expect_eq(uv_loop_close(&loop_b), 0, "every handle of B was closed");
    cr_expect_eq(reentrant_cbs, 0, "no callback ran inside xport_send");
    rm_tree(tmpdir);
    tls_creds_free(); /* after every transport is closed */
}

static int expired(void)
{
    return uv_hrtime() > deadline;
}

static void pump(int run_b)
{
    uv_run(&loop_a, UV_RUN_NOWAIT);
    if (run_b) {
        uv_run(&loop_b, UV_RUN_NOWAIT);
    }
}

/* Pump both loops until *flag >= want (bounded by count and time). */
static void run_until(const int *flag, int want)
{
    for (long i = 0; i < 50000000 && *flag < want && !expired(); i++) {
        pump(1);
    }
    cr_assert_geq(*flag, want, "timed out waiting for %d (now %d)", want,
                  *flag);
}

/* ---- backends ---------------------------------------------------------- */

/* What a test may ask of a transport's options. */
struct profile
{
    int small_budget;  /* max_message about 32 KiB */
    size_t max_queued; /* 0 = backend default */
    unsigned retry_ms; /* 0 = backend default */
};

struct backend
{
    const char *name;
    /* Create at a fresh address (written to addr). */
    struct xport *(*make)(uv_loop_t *loop,
                          uint64_t id,
                          const struct profile *pr,
                          char addr[ADDR_MAX]);
    /* Create at a given address (a restarted node). */
    struct xport *(*make_at)(uv_loop_t *loop,
                             uint64_t id,
                             const struct profile *pr,
                             const char *addr);
};

static struct xport_tcp_options tcp_options(const struct profile *pr)
{
    struct xport_tcp_options o = {0};
    o.max_message = pr->small_budget ? 32768 - 40 : 0;
    o.max_queued_bytes = pr->max_queued;
    o.connect_retry_ms = pr->retry_ms;
    return o;
}

static struct xport *tcp_make_at(uv_loop_t *loop,
                                 uint64_t id,
                                 const struct profile *pr,
                                 const char *addr)
{
    struct xport_tcp_options o = tcp_options(pr);
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    int rc = 0;

    /* A restarted listener may find the port busy for a moment. */
    for (int i = 0; i < 1000 && !expired(); i++) {
        rc = xport_tcp_new(loop, id, addr, &o, &x, errmsg);
        if (rc != -EADDRINUSE) {
            break;
        }
        pump(1);
    }
    cr_assert_eq(rc, 0, "xport_tcp_new %s: %s", addr, errmsg);
    cr_assert_str_eq(xport_name(x), "tcp");
    return x;
}

static struct xport *tcp_make(uv_loop_t *loop,
                              uint64_t id,
                              const struct profile *pr,
                              char addr[ADDR_MAX])
{
    struct xport_tcp_options o = tcp_options(pr);
    return tcp_make_random(loop, id, &o, addr, ADDR_MAX);
}

/* The cluster secret of the shm_secret backend. */
static const struct auth_secret conf_secret = {{
    0x3c, 0x91, 0x07, 0xee, 0x58, 0x12, 0xa4, 0x6d, 0x20, 0xbf, 0x9a,
    0x45, 0x71, 0x0c, 0xd3, 0x86, 0xf2, 0x39, 0x5e, 0xab, 0x14, 0x67,
    0xc8, 0x03, 0x9d, 0x52, 0xe6, 0x2f, 0x80, 0x1b, 0x74, 0xca,
}};

static struct xport *shm_new_at(uv_loop_t *loop,
                                uint64_t id,
                                const struct profile *pr,
                                const char *addr,
                                const struct auth_secret *secret)
{
    struct xport_shm_options o = {0};
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    int rc;

    o.secret = secret;
    o.ring_bytes = pr->small_budget ? 65536 : 0;
    o.max_queued_bytes = pr->max_queued;
    o.connect_retry_ms = pr->retry_ms;
    rc = xport_shm_new(loop, id, addr, &o, &x, errmsg);
    cr_assert_eq(rc, 0, "xport_shm_new %s: %s", addr, errmsg);
    cr_assert_str_eq(xport_name(x), "shm");
    return x;
}

static void shm_addr(uint64_t id, char addr[ADDR_MAX])
{
    static unsigned n;
    (void)snprintf(addr, ADDR_MAX, "%s/node-%llu-%u.sock", tmpdir,
                   (unsigned long long)id, n++);
}

static struct xport *shm_make_at(uv_loop_t *loop,
                                 uint64_t id,
                                 const struct profile *pr,
                                 const char *addr)
{
    return shm_new_at(loop, id, pr, addr, NULL);
}

static struct xport *shm_make(uv_loop_t *loop,
                              uint64_t id,
                              const struct profile *pr,
                              char addr[ADDR_MAX])
{
    shm_addr(id, addr);
    return shm_make_at(loop, id, pr, addr);
}

/* tcp with mutual TLS: every node presents node<id> of one cluster CA
 * (made on first use in this test). */
static const char *tls_dir;

static struct xport_tcp_options tcp_tls_options(const struct profile *pr,
                                                uint64_t id)
{
    struct xport_tcp_options o = tcp_options(pr);
    if (tls_n_ctx == 0) {
        tls_dir = tls_creds_make("cluster", "1 2 10 20");
        /* Making credentials is no part of the test's time. */
        deadline = uv_hrtime() + DEADLINE_NS;
    }
    tls_node_options(&o, tls_dir, id, tls_dir);
    return o;
}

static struct xport *tcp_tls_make_at(uv_loop_t *loop,
                                     uint64_t id,
                                     const struct profile *pr,
                                     const char *addr)
{
    struct xport_tcp_options o = tcp_tls_options(pr, id);
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    int rc = 0;

    for (int i = 0; i < 1000 && !expired(); i++) {
        rc = xport_tcp_new(loop, id, addr, &o, &x, errmsg);
        if (rc != -EADDRINUSE) {
            break;
        }
        pump(1);
    }
    cr_assert_eq(rc, 0, "xport_tcp_new %s: %s", addr, errmsg);
    return x;
}

static struct xport *tcp_tls_make(uv_loop_t *loop,
                                  uint64_t id,
                                  const struct profile *pr,
                                  char addr[ADDR_MAX])
{
    struct xport_tcp_options o = tcp_tls_options(pr, id);
    return tcp_make_random(loop, id, &o, addr, ADDR_MAX);
}

static struct xport *shm_secret_make_at(uv_loop_t *loop,
                                        uint64_t id,
                                        const struct profile *pr,
                                        const char *addr)
{
    return shm_new_at(loop, id, pr, addr, &conf_secret);
}

static struct xport *shm_secret_make(uv_loop_t *loop,
                                     uint64_t id,
                                     const struct profile *pr,
                                     char addr[ADDR_MAX])
{
    shm_addr(id, addr);
    return shm_secret_make_at(loop, id, pr, addr);
}

static const struct backend backend_tcp = {"tcp", tcp_make, tcp_make_at};
static const struct backend backend_tcp_tls = {"tcp_tls", tcp_tls_make,
                                               tcp_tls_make_at};
static const struct backend backend_shm = {"shm", shm_make, shm_make_at};
static const struct backend backend_shm_secret = {"shm", shm_secret_make,
                                                  shm_secret_make_at};

/* ---- messages and sinks ------------------------------------------------ */

/* Message k (send_msg, xport_test_harness.h): a u32 index k, then pattern
 * bytes. Messages shorter than 4 bytes carry only pattern bytes (index
 * taken from arrival order), all of them checked. */
struct sink
{
    int count;
    int bad;          /* payload mismatch */
    int out_of_order; /* indices not strictly increasing */
    long last;
    uint64_t from[MAX_RECORDED];
    size_t len[MAX_RECORDED];
    unsigned idx[MAX_RECORDED];
};

static void sink_init(struct sink *s)
{
    memset(s, 0, sizeof *s);
    s->last = -1;
}

static void on_recv(void *arg, uint64_t from_id, const void *msg, size_t len)
{
    struct sink *s = arg;
    const uint8_t *b = msg;
    unsigned k = len >= 4 ? tern_get_u32(b) : (unsigned)(s->last + 1);

    if ((long)k <= s->last) {
        s->out_of_order++;
    }
    s->last = k;
    for (size_t i = len >= 4 ? 4 : 0; i < len; i++) {
        if (b[i] != pattern(k, i)) {
            s->bad++;
            break;
        }
    }
    if (s->count < MAX_RECORDED) {
        s->from[s->count] = from_id;
        s->len[s->count] = len;
        s->idx[s->count] = k;
    }
    s->count++;
}

/* Send one message and wait until it arrived (connection established). */
static void warm_up(struct xport *a,
                    uint64_t b_id,
                    const char *b_addr,
                    struct sink *s)
{
    struct sreq r;
    int done = 0;
    int before = s->count;
    cr_assert_eq(send_msg(a, &r, b_id, b_addr, 0, 8, &done), 0);
    run_until(&done, 1);
    cr_assert_eq(r.status, 0);
    run_until(&s->count, before + 1);
}

/* ---- the tests --------------------------------------------------------- */

static void t_ordering_and_exact_bytes(const struct backend *be)
{
    static const size_t sizes[] = {0,    1,     2,      3,      4,  19,
                                   20,   21,    63,     64,     65, 1000,
                                   4096, 65537, 300000, 1 << 20};
    enum { N = 240 };
    static struct sreq reqs[N];
    static struct sink sink;
    struct profile pr = {0};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    int completed = 0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    for (unsigned k = 0; k < N; k++) {
        cr_assert_eq(send_msg(a, &reqs[k], 2, b_addr, k,
                              sizes[k % TERN_ARRAY_SIZE(sizes)], &completed),
                     0);
    }
    cr_expect_eq(completed, 0, "no completion inside xport_send");
    run_until(&completed, N);
    run_until(&sink.count, N);
    for (unsigned k = 0; k < N; k++) {
        cr_expect_eq(reqs[k].status, 0, "send %u", k);
        cr_expect_eq(sink.from[k], 1);
        cr_expect_eq(sink.len[k], sizes[k % TERN_ARRAY_SIZE(sizes)],
                     "message %u arrived in order", k);
    }
    cr_expect_eq(sink.bad, 0, "payload bytes are exact");
    cr_expect_eq(sink.out_of_order, 0);
    close_and_wait(a);
    close_and_wait(b);
}

static void t_bidirectional(const struct backend *be)
{
    enum { N = 300 };
    static struct sreq ra[N], rb[N];
    static struct sink sa, sb;
    struct profile pr = {0};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 10, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 20, &pr, b_addr);
    int done = 0;

    sink_init(&sa);
    sink_init(&sb);
    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    for (unsigned k = 0; k < N; k++) {
        cr_assert_eq(send_msg(a, &ra[k], 20, b_addr, k, 10 + k, &done), 0);
        cr_assert_eq(
            send_msg(b, &rb[k], 10, a_addr, k, 4 + 3 * (size_t)k, &done), 0);
    }
    run_until(&done, 2 * N);
    run_until(&sa.count, N);
    run_until(&sb.count, N);
    for (unsigned k = 0; k < N; k++) {
        cr_expect_eq(ra[k].status, 0);
        cr_expect_eq(rb[k].status, 0);
        cr_expect_eq(sa.from[k], 20);
        cr_expect_eq(sb.from[k], 10);
        cr_expect_eq(sb.len[k], 10 + k);
        cr_expect_eq(sa.len[k], 4 + 3 * (size_t)k);
    }
    cr_expect_eq(sa.bad + sb.bad + sa.out_of_order + sb.out_of_order, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* Larger than the transport's budget: rejected synchronously with
 * TERN_ETOOBIG (no callback); exactly the budget goes through. Splitting
 * is the caller's job (documented in rdma/ring.c). */
static void t_too_big_rejected(const struct backend *be)
{
    struct profile pr = {.small_budget = 1};
    static struct sink sink;
    struct sreq r1, r2;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    size_t max = xport_max_message(a);
    int done = 0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    cr_expect_eq(max, 32768 - 40, "the small profile's budget");
    cr_expect_eq(send_msg(a, &r1, 2, b_addr, 0, max + 1, &done), TERN_ETOOBIG);
    cr_expect_eq(send_msg(a, &r1, 2, b_addr, 0, 10 * max, &done), TERN_ETOOBIG);
    cr_assert_eq(send_msg(a, &r2, 2, b_addr, 0, max, &done), 0);
    run_until(&done, 1);
    run_until(&sink.count, 1);
    cr_expect_eq(r1.done, 0, "a failed send never calls back");
    cr_expect_eq(r2.status, 0);
    cr_expect_eq(sink.len[0], max);
    cr_expect_eq(sink.bad, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* The receiver's loop stops: the sender fills the path (ring or socket
 * buffers), then its bounded queue, then gets TERN_EBUSY. When the
 * receiver runs again, credit flows back and every accepted message
 * arrives, in order, exactly. */
static void t_stalled_receiver_bounded(const struct backend *be)
{
    enum { N = 1000, SIZE = 16384 };
    static struct sreq reqs[N];
    static struct sink sink;
    struct profile pr = {.small_budget = 1, .max_queued = 256 << 10};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    int done = 0, ok = 0, busy = 0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    warm_up(a, 2, b_addr, &sink);
    for (unsigned k = 1; k <= N; k++) {
        cr_assert_eq(send_msg(a, &reqs[k - 1], 2, b_addr, k, SIZE, &done), 0);
        pump(0); /* only the sender runs */
    }
    for (int i = 0; i < 1000; i++) {
        pump(0);
    }
    cr_expect_eq(sink.count, 1, "nothing delivered while B is stalled");
    cr_expect_lt(done, N, "some sends wait for the receiver");
    run_until(&done, N);
    for (int k = 0; k < N; k++) {
        ok += reqs[k].status == 0;
        busy += reqs[k].status == TERN_EBUSY;
    }
    cr_log_info("%s: %d accepted, %d busy", be->name, ok, busy);
    cr_expect_eq(ok + busy, N, "only 0 or TERN_EBUSY");
    cr_expect_gt(busy, 0, "the queue bound was hit");
    cr_expect_gt(ok, (256 << 10) / SIZE, "the queue was used");
    run_until(&sink.count, 1 + ok);
    for (int i = 0; i < 1000; i++) {
        pump(1);
    }
    cr_expect_eq(sink.count, 1 + ok, "exactly the accepted messages");
    cr_expect_eq(sink.out_of_order, 0);
    cr_expect_eq(sink.bad, 0);
    for (int k = 0, j = 1; k < N && j < MAX_RECORDED; k++) {
        if (reqs[k].status == 0) {
            cr_expect_eq(sink.idx[j], (unsigned)k + 1);
            j++;
        }
    }
    if (strcmp(be->name, "shm") == 0) {
        struct xport_shm_stats st;
        cr_assert_eq(xport_shm_stats(a, &st), 0);
        cr_expect_gt(st.credit_waits, 0, "the ring was full");
    }
    close_and_wait(a);
    close_and_wait(b);
}

/* A receiver running at a fraction of the sender's pace, with a window of
 * outstanding sends: flow control loses nothing and keeps order. */
static void t_slow_receiver_credit_return(const struct backend *be)
{
    enum { N = 3000, SIZE = 3000, WINDOW = 64 };
    static struct sreq reqs[N];
    static struct sink sink;
    struct profile pr = {.small_budget = 1};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    int done = 0;
    unsigned next = 0;

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    for (long i = 0; i < 50000000 && (done < N || sink.count < N) && !expired();
         i++) {
        for (int j = 0; j < 8 && next < N && (int)next - done < WINDOW; j++) {
            cr_assert_eq(send_msg(a, &reqs[next], 2, b_addr, next, SIZE, &done),
                         0);
            next++;
        }
        pump(i % 7 == 0);
    }
    cr_assert_eq(done, N);
    cr_assert_eq(sink.count, N);
    for (int k = 0; k < N; k++) {
        cr_expect_eq(reqs[k].status, 0, "send %d", k);
    }
    cr_expect_eq(sink.out_of_order, 0);
    cr_expect_eq(sink.bad, 0);
    cr_expect_eq(sink.idx[N - 1], N - 1);
    if (strcmp(be->name, "shm") == 0) {
        struct xport_shm_stats st;
        cr_assert_eq(xport_shm_stats(a, &st), 0);
        cr_log_info("shm: slow receiver: %llu credit waits, %llu doorbells",
                    (unsigned long long)st.credit_waits,
                    (unsigned long long)st.doorbells);
        cr_expect_gt(st.credit_waits, 0, "the 64 KiB ring filled up");
    }
    close_and_wait(a);
    close_and_wait(b);
}

static void t_enoconn_then_connect(const struct backend *be)
{
    struct profile pr = {.retry_ms = 30};
    static struct sink sink;
    struct sreq r;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    int done = 0;

    /* An address nobody listens on any more. */
    close_and_wait(b);
    cr_assert_eq(send_msg(a, &r, 2, b_addr, 0, 5, &done), 0);
    cr_expect_eq(r.done, 0, "never completed inside xport_send");
    run_until(&done, 1);
    cr_expect_eq(r.status, TERN_ENOCONN);
    done = 0;
    cr_assert_eq(send_msg(a, &r, 2, b_addr, 0, 5, &done), 0);
    cr_expect_eq(r.done, 0);
    run_until(&done, 1);
    cr_expect_eq(r.status, TERN_ENOCONN, "back-off: deferred failure");

    sink_init(&sink);
    b = be->make_at(&loop_b, 2, &pr, b_addr);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    for (long i = 0; i < 100000000 && sink.count == 0 && !expired(); i++) {
        done = 0;
        cr_assert_eq(send_msg(a, &r, 2, b_addr, 7, 50, &done), 0);
        run_until(&done, 1);
        if (r.status != 0) {
            cr_expect_eq(r.status, TERN_ENOCONN);
        } else {
            run_until(&sink.count, 1);
        }
    }
    cr_expect_eq(sink.count, 1);
    cr_expect_eq(sink.bad, 0);
    cr_expect_eq(r.status, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* The receiver restarts at the same address: traffic resumes on a new
 * connection; anything lost around the restart is lost in order. */
static void t_peer_restart(const struct backend *be)
{
    struct profile pr = {.retry_ms = 20};
    static struct sink s1, s2;
    struct sreq r;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    unsigned idx = 1;
    int done = 0;

    sink_init(&s1);
    sink_init(&s2);
    cr_assert_eq(xport_start(b, on_recv, &s1), 0);
    warm_up(a, 2, b_addr, &s1);
    close_and_wait(b);

    b = be->make_at(&loop_b, 2, &pr, b_addr);
    cr_assert_eq(xport_start(b, on_recv, &s2), 0);
    for (long i = 0; i < 100000000 && s2.count < 5 && !expired(); i++) {
        int before = s2.count;
        done = 0;
        cr_assert_eq(send_msg(a, &r, 2, b_addr, idx++, 64, &done), 0);
        run_until(&done, 1);
        cr_expect(r.status == 0 || r.status == TERN_ENOCONN, "status %d",
                  r.status);
        if (r.status == 0 && before > 0) {
            run_until(&s2.count, before + 1); /* no loss once connected */
        }
    }
    cr_log_info("%s: restart: %u sends for %d deliveries", be->name, idx - 1,
                s2.count);
    cr_expect_geq(s2.count, 5);
    cr_expect_eq(s2.out_of_order, 0);
    for (int k = 0; k < s2.count && k < MAX_RECORDED; k++) {
        cr_expect_eq(s2.from[k], 1);
    }
    cr_expect_eq(s2.bad, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* The SENDER restarts (same id, new transport): the receiver takes the
 * new connection and keeps delivering. */
static void t_sender_restart(const struct backend *be)
{
    struct profile pr = {0};
    static struct sink sink;
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);

    sink_init(&sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    warm_up(a, 2, b_addr, &sink);
    close_and_wait(a);
    a = be->make(&loop_a, 1, &pr, a_addr);
    warm_up(a, 2, b_addr, &sink);
    warm_up(a, 2, b_addr, &sink);
    cr_expect_eq(sink.count, 3);
    cr_expect_eq(sink.from[2], 1);
    close_and_wait(a);
    close_and_wait(b);
}

/* The peer-down signal (xport_set_peer_down): the receiver reports the
 * sender's id once the sender's connection closes (the sender closing its
 * transport here; a killed process's kernel closes it the same way), not
 * while it lives, and never after its own close. */
struct downs
{
    int count;
    uint64_t last;
};

static void on_down(void *arg, uint64_t peer_id)
{
    struct downs *d = arg;
    d->count++;
    d->last = peer_id;
}

static void t_peer_down_on_close(const struct backend *be)
{
    struct profile pr = {0};
    static struct sink sink;
    struct downs d = {0};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);

    sink_init(&sink);
    xport_set_peer_down(b, on_down, &d);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    warm_up(a, 2, b_addr, &sink);
    warm_up(a, 2, b_addr, &sink);
    cr_expect_eq(d.count, 0, "no signal while the sender lives");
    close_and_wait(a);
    run_until(&d.count, 1);
    cr_expect_eq(d.last, 1);
    close_and_wait(b);
}

static struct
{
    int sends_done;
    int closed;
    int sends_at_close;
} order;

static void on_sent_order(struct xport_send *req, int status)
{
    on_sent(req, status);
    order.sends_done++;
}

static void on_closed_order(void *arg)
{
    (void)arg;
    order.sends_at_close = order.sends_done;
    order.closed++;
}

/* Close with sends waiting (receiver never runs): they complete with
 * TERN_ECANCELED (or keep an already decided TERN_EBUSY), all before the
 * close callback; sending after close is refused synchronously. */
static void t_close_cancels(const struct backend *be)
{
    enum { N = 8 };
    struct profile pr = {.max_queued = (4 << 20) + 1000};
    static struct sreq r[N + 1];
    static uint8_t big[1 << 20];
    struct xport_iov iov = {big, sizeof big};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);

    memset(&order, 0, sizeof order);
    memset(r, 0, sizeof r);
    in_send = 1;
    for (int k = 0; k < N; k++) {
        cr_assert_eq(
            xport_send(a, &r[k].req, 2, b_addr, &iov, 1, on_sent_order), 0);
    }
    in_send = 0;
    xport_close(a, on_closed_order, NULL);
    in_send = 1;
    cr_expect_eq(xport_send(a, &r[N].req, 2, b_addr, &iov, 1, on_sent_order),
                 TERN_ESHUTDOWN, "no sends once closing");
    in_send = 0;
    for (long i = 0; i < 50000000 && !order.closed && !expired(); i++) {
        pump(0);
    }
    cr_assert_eq(order.closed, 1);
    cr_expect_eq(order.sends_done, N);
    cr_expect_eq(order.sends_at_close, N, "sends complete before close cb");
    for (int k = 0; k < N; k++) {
        cr_expect_eq(r[k].status, k < 4 ? TERN_ECANCELED : TERN_EBUSY,
                     "send %d: %d", k, r[k].status);
    }
    cr_expect_eq(r[N].done, 0);
    close_and_wait(b);
}

/* Re-entrancy: the receiver answers from inside its recv callback, and
 * closes itself from inside a recv callback with more messages waiting. */
struct echo
{
    struct xport *x;
    uint64_t to;
    const char *addr;
    struct sreq reqs[512];
    int n;
    int close_after; /* close the transport on this delivery (0 = never) */
    int closed;
    int received;
};

static void on_closed_echo(void *arg)
{
    ((struct echo *)arg)->closed++;
}

static void on_recv_echo(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct echo *e = arg;
    struct xport_iov iov = {msg, len};
    (void)from;
    e->received++;
    cr_expect_eq(e->closed, 0, "no delivery after close");
    if (e->close_after != 0 && e->received == e->close_after) {
        xport_close(e->x, on_closed_echo, e);
        return;
    }
    if (e->close_after == 0 && e->n < 512) {
        struct sreq *r = &e->reqs[e->n++];
        memset(r, 0, sizeof *r);
        cr_expect_eq(
            xport_send(e->x, &r->req, e->to, e->addr, &iov, 1, on_sent), 0);
    }
}

static void t_reply_and_close_from_recv_callback(const struct backend *be)
{
    enum { N = 200 };
    static struct sreq reqs[N];
    static struct sink sink;
    static struct echo e;
    struct profile pr = {0};
    char a_addr[ADDR_MAX], b_addr[ADDR_MAX];
    struct xport *a = be->make(&loop_a, 1, &pr, a_addr);
    struct xport *b = be->make(&loop_b, 2, &pr, b_addr);
    int done = 0;

    sink_init(&sink);
    memset(&e, 0, sizeof e);
    e.x = b;
    e.to = 1;
    e.addr = a_addr;
    cr_assert_eq(xport_start(a, on_recv, &sink), 0);
    cr_assert_eq(xport_start(b, on_recv_echo, &e), 0);
    for (unsigned k = 0; k < N; k++) {
        cr_assert_eq(send_msg(a, &reqs[k], 2, b_addr, k, 100 + k, &done), 0);
    }
    run_until(&sink.count, N);
    cr_expect_eq(sink.out_of_order + sink.bad, 0, "echoes in order, exact");
    cr_expect_eq(sink.len[N - 1], 100 + N - 1);
    run_until(&done, N);

    /* Now B closes itself on the 3rd of a burst of 50. */
    e.close_after = e.received + 3;
    done = 0;
    for (unsigned k = 0; k < 50; k++) {
        cr_assert_eq(send_msg(a, &reqs[k], 2, b_addr, k, 64, &done), 0);
    }
    run_until(&e.closed, 1);
    cr_expect_eq(e.received, e.close_after, "nothing delivered after close");
    run_until(&done, 50);
    close_and_wait(a);
}

/* ---- registration: every test x every backend --------------------------- */

#define CONFORMANCE(test)                                                      \
    Test(conformance_tcp, test, .init = setup, .fini = teardown,               \
         .timeout = 60)                                                        \
    {                                                                          \
        t_##test(&backend_tcp);                                                \
    }                                                                          \
    Test(conformance_tcp_tls, test, .init = setup, .fini = teardown,           \
         .timeout = 60)                                                        \
    {                                                                          \
        t_##test(&backend_tcp_tls);                                            \
    }                                                                          \
    Test(conformance_shm, test, .init = setup, .fini = teardown,               \
         .timeout = 60)                                                        \
    {                                                                          \
        t_##test(&backend_shm);                                                \
    }                                                                          \
    Test(conformance_shm_secret, test, .init = setup, .fini = teardown,        \
         .timeout = 60)                                                        \
    {                                                                          \
        t_##test(&backend_shm_secret);                                         \
    }

CONFORMANCE(ordering_and_exact_bytes)
CONFORMANCE(bidirectional)
CONFORMANCE(too_big_rejected)
CONFORMANCE(stalled_receiver_bounded)
CONFORMANCE(slow_receiver_credit_return)
CONFORMANCE(enoconn_then_connect)
CONFORMANCE(peer_restart)
CONFORMANCE(sender_restart)
CONFORMANCE(close_cancels)
CONFORMANCE(reply_and_close_from_recv_callback)
CONFORMANCE(peer_down_on_close)
