/* Unit tests of the TCP transport (rdma/tcp.c) over real sockets on
 * 127.0.0.1: each test runs a real uv loop, bounded by a watchdog timer, and
 * polls conditions (no sleeps). Ports are random in 20000-60000, retried on
 * EADDRINUSE. Only what is TCP's own lives here (socket options, byte-exact
 * queue accounting, bad addresses, hostile raw peers, frames split across
 * reads, OOM, SYN timeouts); the xport contract every backend shares
 * (ordering, exact bytes, too-big, ENOCONN then connect, peer restart,
 * close cancelling sends...) runs against tcp in test_conformance.c. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#define WATCHDOG_MS  10000
#define MAX_RECORDED 4096

/* ---- harness ----------------------------------------------------------- */

struct env
{
    uv_loop_t loop;
    uv_timer_t watchdog;
    int timed_out;
};

static struct env env;

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    env.timed_out = 1;
    uv_stop(&env.loop);
}

static void setup(void)
{
    /* libuv does not ignore SIGPIPE (see rdma/tcp.c); ternd must, too. */
    cr_assert(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
    srand((unsigned)(getpid() ^ time(NULL)));
    memset(&env, 0, sizeof env);
    in_send = 0;
    reentrant_cbs = 0;
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
}

TestSuite(tcp, .init = setup, .fini = teardown, .timeout = 60);

/* Run the loop until *flag reaches want (or the watchdog fires). */
static void run_until(const int *flag, int want)
{
    for (long i = 0; i < 10000000 && *flag < want && !env.timed_out; i++) {
        uv_run(&env.loop, UV_RUN_ONCE);
    }
    cr_assert(!env.timed_out, "watchdog fired waiting for %d (now %d)", want,
              *flag);
}

struct sink
{
    int count;
    int bad;
    uint64_t from[MAX_RECORDED];
    size_t len[MAX_RECORDED];
};

/* Messages are send_msg's (xport_test_harness.h): the sink checks that
 * the n-th one received is message n, every byte. */
static void on_recv(void *arg, uint64_t from_id, const void *msg, size_t len)
{
    struct sink *s = arg;
    const uint8_t *b = msg;
    unsigned k = (unsigned)s->count;
    if (s->count < MAX_RECORDED) {
        s->from[s->count] = from_id;
        s->len[s->count] = len;
    }
    if (len >= 4 && tern_get_u32(b) != k) {
        s->bad++;
    } else {
        for (size_t i = len >= 4 ? 4 : 0; i < len; i++) {
            if (b[i] != pattern(k, i)) {
                s->bad++;
                break;
            }
        }
    }
    s->count++;
}

static struct xport *make_tcp(uint64_t id,
                              const struct xport_tcp_options *o,
                              char addr[32])
{
    return tcp_make_random(&env.loop, id, o, addr, 32);
}

/* ---- tests ------------------------------------------------------------- */

/* uv_walk callback: every connected TCP socket of the loop has Nagle off
 * and a user timeout. */
static void check_sockopts(uv_handle_t *h, void *arg)
{
    int *checked = arg;
    uv_os_fd_t fd;
    int v = 0;
    socklen_t len = sizeof v;

    if (h->type != UV_TCP || uv_is_closing(h) || uv_fileno(h, &fd) != 0) {
        return;
    }
    cr_assert_eq(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len), 0);
    if (v) {
        return; /* a listener */
    }
    len = sizeof v;
    cr_assert_eq(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
    cr_expect_eq(v, 1, "TCP_NODELAY on every connection");
    len = sizeof v;
    cr_assert_eq(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &v, &len), 0);
    cr_expect_eq(v, 1000, "TCP_USER_TIMEOUT (1 s) on every connection");
    (*checked)++;
}

Test(tcp, bidirectional)
{
    enum { N = 300 };
    static struct sreq ra[N], rb[N];
    static struct sink sa, sb;
    char a_addr[32], b_addr[32];
    struct xport *a = make_tcp(10, NULL, a_addr);
    struct xport *b = make_tcp(20, NULL, b_addr);
    int done = 0;
    int sockets = 0;

    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    for (unsigned k = 0; k < N; k++) {
        cr_assert_eq(send_msg(a, &ra[k], 20, b_addr, k, 10 + k, &done), 0);
        cr_assert_eq(send_msg(b, &rb[k], 10, a_addr, k, 3 * (size_t)k, &done),
                     0);
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
        cr_expect_eq(sa.len[k], 3 * (size_t)k);
    }
    cr_expect_eq(sa.bad + sb.bad, 0);
    uv_walk(&env.loop, check_sockopts, &sockets);
    cr_expect_eq(sockets, 4, "2 outbound + 2 inbound sockets checked");
    close_and_wait(a);
    close_and_wait(b);
}

static void count_active_idle(uv_handle_t *h, void *arg)
{
    if (h->type == UV_IDLE && uv_is_active(h) && !uv_is_closing(h)) {
        (*(int *)arg)++;
    }
}

static int active_idles(void)
{
    int n = 0;
    uv_walk(&env.loop, count_active_idle, &n);
    return n;
}

/* Busy-poll: a send starts the spin handle (the loop then never sleeps),
 * the first frame received stops it, and so does the deadline. */
Test(tcp, busy_poll_spins_until_a_frame_or_the_deadline)
{
    static struct sreq r[4];
    static struct sink sa, sb;
    char a_addr[32], b_addr[32];
    struct xport *a = make_tcp(10, NULL, a_addr);
    struct xport *b = make_tcp(20, NULL, b_addr);
    int done = 0;
    uint64_t t0;

    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    cr_assert_eq(xport_tcp_set_busy_poll(NULL, 10), TERN_EINVAL);
    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    cr_assert_eq(xport_tcp_set_busy_poll(a, 5000000), 0); /* 5 s */
    cr_expect_eq(active_idles(), 0, "nothing spins before a send");
    cr_assert_eq(send_msg(a, &r[0], 20, b_addr, 0, 64, &done), 0);
    run_until(&done, 1);
    run_until(&sb.count, 1);
    uv_run(&env.loop, UV_RUN_NOWAIT); /* let deferred completions drain */
    cr_expect_eq(active_idles(), 1, "a spins for its answer");
    cr_assert_eq(send_msg(b, &r[1], 10, a_addr, 0, 64, &done), 0);
    run_until(&sa.count, 1);
    run_until(&done, 2);
    uv_run(&env.loop, UV_RUN_NOWAIT);
    cr_expect_eq(active_idles(), 0, "the answer ended the round");

    cr_assert_eq(xport_tcp_set_busy_poll(a, 2000), 0); /* 2 ms */
    cr_assert_eq(send_msg(a, &r[2], 20, b_addr, 1, 64, &done), 0);
    run_until(&sb.count, 2);
    t0 = uv_hrtime();
    while (active_idles() > 0 && uv_hrtime() - t0 < 2000000000ull) {
        uv_run(&env.loop, UV_RUN_NOWAIT);
    }
    cr_expect_eq(active_idles(), 0, "the deadline ended the round");
    cr_expect_lt(uv_hrtime() - t0, 1000000000ull, "within about 2 ms");
    cr_assert_eq(xport_tcp_set_busy_poll(a, 0), 0);
    cr_expect_eq(sa.bad + sb.bad, 0);
    close_and_wait(a);
    close_and_wait(b);
}

Test(tcp, queue_bound_gives_ebusy)
{
    struct xport_tcp_options o = {.max_queued_bytes = 1000};
    static struct sink sink;
    struct sreq r1, r2, r3;
    char a_addr[32], b_addr[32];
    struct xport *a = make_tcp(1, &o, a_addr);
    struct xport *b = make_tcp(2, NULL, b_addr);
    int done = 0;

    memset(&sink, 0, sizeof sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    /* 620 bytes queued while connecting; 620 more would exceed 1000. */
    cr_assert_eq(send_msg(a, &r1, 2, b_addr, 0, 600, &done), 0);
    cr_assert_eq(send_msg(a, &r2, 2, b_addr, 1, 600, &done), 0);
    cr_assert_eq(send_msg(a, &r3, 2, b_addr, 1, 300, &done), 0);
    cr_expect_eq(done, 0);
    run_until(&done, 3);
    cr_expect_eq(r1.status, 0);
    cr_expect_eq(r2.status, TERN_EBUSY);
    cr_expect_eq(r3.status, 0, "fits next to the first");
    run_until(&sink.count, 2);
    cr_expect_eq(sink.len[0], 600);
    cr_expect_eq(sink.len[1], 300);
    /* Once drained, a message larger than the bound alone is accepted. */
    done = 0;
    cr_assert_eq(send_msg(a, &r1, 2, b_addr, 2, 5000, &done), 0);
    run_until(&done, 1);
    cr_expect_eq(r1.status, 0);
    run_until(&sink.count, 3);
    cr_expect_eq(sink.len[2], 5000);
    cr_expect_eq(sink.bad, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* Records messages carrying a u32 send index; checks it strictly grows
 * (order kept, loss allowed). */
struct seq_sink
{
    int count;
    int out_of_order;
    uint64_t from;
    long last;
};

static void on_recv_seq(void *arg,
                        uint64_t from_id,
                        const void *msg,
                        size_t len)
{
    struct seq_sink *s = arg;
    long idx = len >= 4 ? (long)tern_get_u32(msg) : -1;
    if (idx <= s->last) {
        s->out_of_order++;
    }
    s->last = idx;
    s->from = from_id;
    s->count++;
}

static int send_seq(struct xport *x,
                    struct sreq *r,
                    uint64_t peer,
                    const char *addr,
                    uint32_t idx,
                    int *counter)
{
    uint8_t buf[64] = {0};
    struct xport_iov iov = {buf, sizeof buf};
    int rc;
    tern_put_u32(buf, idx);
    memset(r, 0, sizeof *r);
    r->counter = counter;
    in_send = 1;
    rc = xport_send(x, &r->req, peer, addr, &iov, 1, on_sent);
    in_send = 0;
    return rc;
}

Test(tcp, bad_arguments)
{
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    struct sreq r;
    char a_addr[32];
    struct xport *a;
    int done = 0;

    cr_expect_eq(xport_tcp_new(&env.loop, 1, "127.0.0.1", NULL, &x, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(xport_tcp_new(&env.loop, 1, "nohost:80", NULL, &x, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(
        xport_tcp_new(&env.loop, 1, "127.0.0.1:70000", NULL, &x, errmsg),
        TERN_EINVAL);
    a = make_tcp(1, NULL, a_addr);
    cr_expect_eq(xport_tcp_new(&env.loop, 3, a_addr, NULL, &x, errmsg),
                 -EADDRINUSE, "second listener on the same address");
    cr_expect_eq(send_msg(a, &r, 2, "127.0.0.1:x", 0, 1, &done), TERN_EINVAL);
    cr_expect_eq(send_msg(a, &r, 2, "", 0, 1, &done), TERN_EINVAL);
    cr_expect_eq(r.done, 0);
    close_and_wait(a);
}

Test(tcp, peer_address_change_follows)
{
    static struct sink s1, s2;
    struct sreq r;
    char a_addr[32], b1_addr[32], b2_addr[32];
    struct xport *a = make_tcp(1, NULL, a_addr);
    struct xport *b1 = make_tcp(2, NULL, b1_addr);
    struct xport *b2 = make_tcp(2, NULL, b2_addr);
    int done = 0;

    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    cr_assert_eq(xport_start(b1, on_recv, &s1), 0);
    cr_assert_eq(xport_start(b2, on_recv, &s2), 0);
    cr_assert_eq(send_msg(a, &r, 2, b1_addr, 0, 10, &done), 0);
    run_until(&s1.count, 1);
    run_until(&done, 1);
    cr_assert_eq(send_msg(a, &r, 2, b2_addr, 0, 11, &done), 0);
    run_until(&s2.count, 1);
    run_until(&done, 2);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(s1.count, 1);
    cr_expect_eq(s2.len[0], 11);
    close_and_wait(a);
    close_and_wait(b1);
    close_and_wait(b2);
}

/* ---- hostile peers: raw sockets ---------------------------------------- */

struct raw
{
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    uint8_t *data;
    size_t len;
    int connected;
    int disconnected; /* EOF or error seen on read */
    int closed;
    char rbuf[64];
};

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    struct raw *r = h->data;
    (void)s;
    b->base = r->rbuf;
    b->len = sizeof r->rbuf;
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct raw *r = s->data;
    (void)b;
    if (n < 0) {
        r->disconnected = 1;
        uv_read_stop(s);
    } else if (n > 0) {
        r->disconnected = -1; /* the receiver must never write */
    }
}

static void raw_written(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static void raw_connected(uv_connect_t *c, int status)
{
    struct raw *r = c->data;
    uv_buf_t b = uv_buf_init((char *)r->data, (unsigned)r->len);
    cr_assert_eq(status, 0);
    r->connected = 1;
    cr_assert_eq(uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_read), 0);
    cr_assert_eq(uv_write(&r->wreq, (uv_stream_t *)&r->tcp, &b, 1, raw_written),
                 0);
}

static void raw_start(struct raw *r,
                      const char *addr,
                      uint8_t *data,
                      size_t len)
{
    struct sockaddr_in sa;
    char host[32];
    int port;

    memset(r, 0, sizeof *r);
    r->data = data;
    r->len = len;
    cr_assert_eq(sscanf(addr, "%31[^:]:%d", host, &port), 2);
    cr_assert_eq(uv_ip4_addr(host, port, &sa), 0);
    uv_tcp_init(&env.loop, &r->tcp);
    r->tcp.data = r;
    r->creq.data = r;
    cr_assert_eq(uv_tcp_connect(&r->creq, &r->tcp, (const struct sockaddr *)&sa,
                                raw_connected),
                 0);
}

static void raw_closed(uv_handle_t *h)
{
    struct raw *r = h->data;
    r->closed = 1;
    free(r->data);
}

static size_t put_hello(uint8_t *p, uint64_t from, uint64_t to)
{
    uint8_t hello[XPORT_TCP_HELLO_LEN];
    struct xport_iov iov = {hello, sizeof hello};
    xport_tcp_hello_encode(hello, from, to);
    xport_tcp_frame_encode(p, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_HELLO, 0,
                           &iov, 1, sizeof hello);
    return XPORT_TCP_FRAME_HDR + XPORT_TCP_HELLO_LEN;
}

static size_t put_msg(uint8_t *p, uint64_t seq, unsigned k, size_t len)
{
    uint8_t buf[256];
    struct xport_iov iov = {buf, len};
    cr_assert(len <= sizeof buf);
    for (size_t i = 0; i < len; i++) {
        buf[i] = pattern(k, i);
    }
    if (len >= 4) {
        tern_put_u32(buf, k); /* as send_msg does */
    }
    xport_tcp_frame_encode(p, XPORT_TCP_FRAME_VERSION, XPORT_TCP_FRAME_MSG, seq,
                           &iov, 1, len);
    return XPORT_TCP_FRAME_HDR + len;
}

Test(tcp, hostile_peers_disconnected_good_peers_served)
{
    enum { BAD = 7, FRAMES = 50 };
    struct xport_tcp_options o = {.max_message = 200};
    static struct sink sink, sink_a;
    static struct raw bad[BAD], good;
    struct sreq r;
    char a_addr[32], b_addr[32];
    struct xport *a = make_tcp(1, NULL, a_addr);
    struct xport *b = make_tcp(2, &o, b_addr);
    uint8_t *p;
    size_t n;
    int disconnected = 0;
    int done = 0;

    memset(&sink, 0, sizeof sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);

    /* 0: plain garbage. */
    p = malloc(64);
    memcpy(p, "GET / HTTP/1.0\r\n\r\n", 18);
    raw_start(&bad[0], b_addr, p, 18);
    /* 1: good hello, then a message with a flipped checksum bit. */
    p = malloc(512);
    n = put_hello(p, 90, 2);
    n += put_msg(p + n, 1, 0, 10);
    p[n - 11] ^= 0x80;
    raw_start(&bad[1], b_addr, p, n);
    /* 2: a length above max_message (header only: rejected early). */
    p = malloc(512);
    n = put_hello(p, 91, 2);
    put_msg(p + n, 1, 0, 201);
    n += XPORT_TCP_FRAME_HDR;
    raw_start(&bad[2], b_addr, p, n);
    /* 3: hello naming another receiver. */
    p = malloc(64);
    raw_start(&bad[3], b_addr, p, put_hello(p, 92, 3));
    /* 4: a message before any hello. */
    p = malloc(512);
    raw_start(&bad[4], b_addr, p, put_msg(p, 0, 0, 10));
    /* 5: a sequence gap. */
    p = malloc(512);
    n = put_hello(p, 93, 2);
    n += put_msg(p + n, 2, 0, 10);
    raw_start(&bad[5], b_addr, p, n);
    /* 6: an unknown version. */
    p = malloc(512);
    n = put_hello(p, 94, 2);
    p[2] = 7;
    raw_start(&bad[6], b_addr, p, n);

    /* A good raw peer sends many frames in one write. */
    p = malloc((size_t)FRAMES * 300);
    n = put_hello(p, 77, 2);
    for (unsigned k = 0; k < FRAMES; k++) {
        n += put_msg(p + n, k + 1, k, (size_t)k * 3);
    }
    raw_start(&good, b_addr, p, n);

    for (int i = 0; i < 1000000 && disconnected < BAD && !env.timed_out; i++) {
        uv_run(&env.loop, UV_RUN_ONCE);
        disconnected = 0;
        for (int k = 0; k < BAD; k++) {
            disconnected += bad[k].disconnected == 1;
        }
    }
    cr_assert_eq(disconnected, BAD, "every hostile peer was disconnected");
    run_until(&sink.count, FRAMES);
    for (unsigned k = 0; k < FRAMES; k++) {
        cr_expect_eq(sink.from[k], 77, "only the good peer delivered");
        cr_expect_eq(sink.len[k], (size_t)k * 3);
    }
    cr_expect_eq(sink.bad, 0);
    cr_expect_eq(good.disconnected, 0, "good raw peer still connected");

    /* A transport peer still works, and B answers it. */
    memset(&sink_a, 0, sizeof sink_a);
    cr_assert_eq(xport_start(a, on_recv, &sink_a), 0);
    cr_assert_eq(send_msg(a, &r, 2, b_addr, FRAMES, 100, &done), 0);
    run_until(&sink.count, FRAMES + 1);
    cr_expect_eq(sink.from[FRAMES], 1);
    run_until(&done, 1);
    cr_assert_eq(send_msg(b, &r, 1, a_addr, 0, 150, &done), 0);
    run_until(&sink_a.count, 1);
    run_until(&done, 2);
    cr_expect_eq(sink_a.from[0], 2);
    cr_expect_eq(sink.bad + sink_a.bad, 0);

    for (int k = 0; k < BAD; k++) {
        uv_close((uv_handle_t *)&bad[k].tcp, raw_closed);
    }
    uv_close((uv_handle_t *)&good.tcp, raw_closed);
    run_until(&good.closed, 1);
    close_and_wait(a);
    close_and_wait(b);
}

Test(tcp, frames_split_across_reads)
{
    enum { FRAMES = 20 };
    static struct sink sink;
    static struct raw parts[1];
    char b_addr[32];
    struct xport *b = make_tcp(2, NULL, b_addr);
    uint8_t *all = malloc((size_t)FRAMES * 300);
    uv_write_t *w;
    size_t n;
    int writes = 0;

    memset(&sink, 0, sizeof sink);
    cr_assert_eq(xport_start(b, on_recv, &sink), 0);
    n = put_hello(all, 5, 2);
    for (unsigned k = 0; k < FRAMES; k++) {
        n += put_msg(all + n, k + 1, k, 37 + k);
    }
    /* Connect with nothing to write, then dribble 1..7 bytes per loop
     * iteration so frames (and headers) straddle reads. */
    raw_start(&parts[0], b_addr, malloc(1), 0);
    run_until(&parts[0].connected, 1);
    uv_tcp_nodelay(&parts[0].tcp, 1);
    w = calloc(n, sizeof *w);
    for (size_t off = 0; off < n && !env.timed_out;) {
        size_t chunk = TERN_MIN((size_t)(1 + writes % 7), n - off);
        uv_buf_t buf = uv_buf_init((char *)all + off, (unsigned)chunk);
        cr_assert_eq(uv_write(&w[writes], (uv_stream_t *)&parts[0].tcp, &buf, 1,
                              raw_written),
                     0);
        writes++;
        off += chunk;
        uv_run(&env.loop, UV_RUN_NOWAIT);
    }
    run_until(&sink.count, FRAMES);
    for (unsigned k = 0; k < FRAMES; k++) {
        cr_expect_eq(sink.from[k], 5);
        cr_expect_eq(sink.len[k], 37 + k);
    }
    cr_expect_eq(sink.bad, 0);
    uv_close((uv_handle_t *)&parts[0].tcp, raw_closed);
    run_until(&parts[0].closed, 1);
    free(w);
    free(all);
    close_and_wait(b);
}

Test(tcp, out_of_memory_fails_cleanly)
{
    char errmsg[TERN_ERRMSG_SIZE];
    static struct seq_sink sink = {.last = -1};
    struct xport *x = NULL;
    struct sreq r;
    char a_addr[32], b_addr[32];
    struct xport *a, *b;
    uint32_t idx = 0;
    int done = 0;

    tern_alloc_fail_after(0);
    cr_expect_eq(xport_tcp_new(&env.loop, 1, "127.0.0.1:0", NULL, &x, errmsg),
                 -ENOMEM);
    tern_alloc_fail_after(-1);

    a = make_tcp(1, NULL, a_addr);
    b = make_tcp(2, NULL, b_addr);
    cr_assert_eq(xport_start(b, on_recv_seq, &sink), 0);
    /* Peer creation, then the message copy, fail: no callback. */
    tern_alloc_fail_after(0);
    cr_expect_eq(send_seq(a, &r, 2, b_addr, idx, &done), -ENOMEM);
    tern_alloc_fail_after(1);
    cr_expect_eq(send_seq(a, &r, 2, b_addr, idx, &done), -ENOMEM);
    tern_alloc_fail_after(-1);
    cr_expect_eq(r.done, 0);

    /* B cannot allocate the accepted connection: it drops it and keeps
     * accepting. */
    cr_assert_eq(send_seq(a, &r, 2, b_addr, idx++, &done), 0);
    tern_alloc_fail_after(0);
    run_until(&done, 1);
    tern_alloc_fail_after(-1);
    for (int i = 0; i < 100000 && sink.count == 0 && !env.timed_out; i++) {
        done = 0;
        cr_assert_eq(send_seq(a, &r, 2, b_addr, idx++, &done), 0);
        run_until(&done, 1);
    }
    cr_expect_geq(sink.count, 1);
    cr_expect_eq(sink.out_of_order, 0);
    close_and_wait(a);
    close_and_wait(b);
}

/* A listening socket on 127.0.0.1 at a free port (socket type flags such
 * as SOCK_NONBLOCK, listen backlog); *sa gets its address, addr its
 * "127.0.0.1:PORT". Returns the fd (the caller closes it). */
static int loopback_listener(int type_flags,
                             int backlog,
                             struct sockaddr_in *sa,
                             char addr[32])
{
    socklen_t slen = sizeof *sa;
    int lfd = socket(AF_INET, SOCK_STREAM | type_flags, 0);
    cr_assert_geq(lfd, 0);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(lfd, (struct sockaddr *)sa, sizeof *sa), 0);
    cr_assert_eq(listen(lfd, backlog), 0);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)sa, &slen), 0);
    (void)snprintf(addr, 32, "127.0.0.1:%d", ntohs(sa->sin_port));
    return lfd;
}

Test(tcp, connect_timeout_when_syns_go_unanswered)
{
    struct sockaddr_in sa;
    int lfd, cfd[4];
    char addr[32], a_addr[32];
    struct xport *a = make_tcp(1, NULL, a_addr);
    struct sreq r;
    int done = 0;
    uint64_t t0;

    /* A listener that never accepts, its accept queue filled: the kernel
     * drops further SYNs, so a connect neither succeeds nor fails. */
    lfd = loopback_listener(0, 0, &sa, addr);
    for (int i = 0; i < 4; i++) {
        cfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        cr_assert_geq(cfd[i], 0);
        (void)connect(cfd[i], (struct sockaddr *)&sa, sizeof sa);
    }

    uv_update_time(&env.loop);
    t0 = uv_now(&env.loop);
    cr_assert_eq(send_msg(a, &r, 2, addr, 0, 10, &done), 0);
    run_until(&done, 1);
    cr_expect_eq(r.status, TERN_ENOCONN);
    cr_expect_geq(uv_now(&env.loop) - t0, 450, "gave up after ~500 ms");
    close_and_wait(a);
    for (int i = 0; i < 4; i++) {
        close(cfd[i]);
    }
    close(lfd);
}

/* The peer-down signal (xport_set_peer_down): b reports a's id once a's
 * connections close (here a closes its transport; a killed process's
 * kernel closes them the same way), once per established connection
 * (a -> b inbound, b -> a outbound), and a, which closed itself, reports
 * nothing. */
struct downs
{
    int count;
    uint64_t ids[8];
};

static void on_down(void *arg, uint64_t peer_id)
{
    struct downs *d = arg;
    if (d->count < 8) {
        d->ids[d->count] = peer_id;
    }
    d->count++;
}

Test(tcp, peer_down_on_closed_connections)
{
    static struct sreq ra, rb;
    static struct sink sa, sb;
    struct downs da = {0}, db = {0};
    char a_addr[32], b_addr[32];
    struct xport *a = make_tcp(10, NULL, a_addr);
    struct xport *b = make_tcp(20, NULL, b_addr);
    int done = 0;

    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    xport_set_peer_down(a, on_down, &da);
    xport_set_peer_down(b, on_down, &db);
    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    cr_assert_eq(send_msg(a, &ra, 20, b_addr, 0, 16, &done), 0);
    cr_assert_eq(send_msg(b, &rb, 10, a_addr, 0, 16, &done), 0);
    run_until(&done, 2);
    run_until(&sa.count, 1);
    run_until(&sb.count, 1);
    cr_expect_eq(db.count, 0, "no signal while both live");
    close_and_wait(a);
    run_until(&db.count, 2);
    for (int i = 0; i < db.count && i < 8; i++) {
        cr_expect_eq(db.ids[i], 10);
    }
    cr_expect_eq(da.count, 0, "a closed itself: no signal");
    close_and_wait(b);
    cr_expect_eq(db.count, 2, "none after b's own close");
}

/* What XPORT_SEND_XXH3 puts on the wire: a raw listener stands in for the
 * peer and reads what the transport writes on one connection. HELLO goes
 * as version 1 (a peer of any release must take it), a send with the
 * flag as version 2, one without as version 1; each frame verifies. */
Test(tcp, xxh3_flag_selects_frame_version)
{
    static struct sink sa;
    struct sockaddr_in sin;
    char a_addr[32], l_addr[32];
    struct xport *a = make_tcp(10, NULL, a_addr);
    struct xport_iov iov = {"twelve bytes", 12};
    struct sreq r1, r2;
    uint8_t wire[512];
    size_t got = 0, off = 0;
    int lfd = loopback_listener(SOCK_NONBLOCK, 1, &sin, l_addr), cfd = -1;
    const unsigned want_version[3] = {1, 2, 1};

    memset(&sa, 0, sizeof sa);
    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    cr_assert_eq(xport_send_flags(a, &r1.req, 20, l_addr, &iov, 1,
                                  XPORT_SEND_XXH3, on_sent),
                 0);
    cr_assert_eq(xport_send(a, &r2.req, 20, l_addr, &iov, 1, on_sent), 0);
    /* HELLO (36 bytes) and two frames of 32: 100 bytes; bounded wait. */
    for (int i = 0; i < 5000 && got < 100; i++) {
        ssize_t n;
        (void)uv_run(&env.loop, UV_RUN_NOWAIT);
        if (cfd < 0) {
            cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        }
        if (cfd >= 0) {
            n = read(cfd, wire + got, sizeof wire - got);
            if (n > 0) {
                got += (size_t)n;
                continue;
            }
        }
        (void)usleep(1000);
    }
    cr_assert_eq(got, 100, "read %zu bytes", got);
    for (unsigned k = 0; k < 3; k++) {
        struct xport_tcp_frame f;
        cr_assert_eq(xport_tcp_frame_decode(wire + off, got - off, 1024, &f), 1,
                     "frame %u", k);
        cr_expect_eq(wire[off + 2], want_version[k], "frame %u", k);
        cr_expect_eq(f.type,
                     k == 0 ? XPORT_TCP_FRAME_HELLO : XPORT_TCP_FRAME_MSG);
        if (k > 0) {
            cr_expect_arr_eq(f.payload, "twelve bytes", 12);
        }
        off += f.size;
    }
    close(cfd);
    close(lfd);
    close_and_wait(a);
}
