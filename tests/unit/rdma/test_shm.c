/* Unit tests specific to the shm transport (rdma/shm.c); the contract
 * itself is covered by test_conformance.c. Here: epoch fencing, a corrupt
 * record tearing the ring down, hostile handshakes, listen-path handling
 * bad arguments, and a real peer process killed with SIGKILL and
 * restarted. Every transport here holds the same cluster secret, as a
 * node's does (test_shm_auth.c: the proofs themselves). One uv loop per
 * test, bounded polling, no sleeps. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <auth.h>
#include <tern_common.h>
#include <xport.h>
#include <xport_test.h>

#include "xport_test_loop.h"

static struct auth_secret secret;

static void setup(void)
{
    loop_setup("shm", 20);
    for (unsigned i = 0; i < sizeof secret.key; i++) {
        secret.key[i] = (uint8_t)(i * 7 + 1);
    }
}

static void teardown(void)
{
    loop_teardown();
}

TestSuite(shm, .init = setup, .fini = teardown, .timeout = 60);

static struct xport *make(uint64_t id,
                          const struct xport_shm_options *o,
                          char path[108])
{
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport_shm_options so = {0};
    struct xport *x = NULL;
    int rc;
    if (o != NULL) {
        so = *o;
    }
    so.secret = &secret;
    (void)snprintf(path, 108, "%s/n%llu.sock", dir, (unsigned long long)id);
    rc = xport_shm_new(&loop, id, path, &so, &x, errmsg);
    cr_assert_eq(rc, 0, "xport_shm_new: %s", errmsg);
    return x;
}

struct sink
{
    int count;
    uint32_t last;
    uint64_t from;
};

static void on_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct sink *s = arg;
    cr_assert_geq(len, 4);
    s->last = tern_get_u32(msg);
    s->from = from;
    s->count++;
}

Test(shm, fence_drops_stale_epochs)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct xport *b = make(2, NULL, pb);
    struct xport_shm_stats st;
    struct sink s = {0};

    cr_assert_eq(xport_start(b, on_recv, &s), 0);
    cr_assert_eq(xport_shm_set_epoch(a, 3), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), 0);
    run_until(&s.count, 1);
    /* B moves to epoch 4: A's records (epoch 3) are dropped. */
    cr_assert_eq(xport_shm_set_fence(b, 4), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 2, 64), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 3, 64), 0);
    /* A learns the new term: delivered again. */
    cr_assert_eq(xport_shm_set_epoch(a, 4), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 4, 64), 0);
    run_until(&s.count, 2);
    cr_expect_eq(s.last, 4, "the fenced messages never arrived");
    cr_assert_eq(xport_shm_stats(b, &st), 0);
    cr_expect_eq(st.fenced, 2);
    /* A newer epoch than the fence is accepted too. */
    cr_assert_eq(xport_shm_set_epoch(a, 9), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 5, 64), 0);
    run_until(&s.count, 3);
    close_and_wait(a);
    close_and_wait(b);
}

/* The address of the shared mapping of memfd `name` in this process. */
static uint8_t *find_mapping(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uint8_t *found = NULL;
    cr_assert(f != NULL);
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long start;
        if (strstr(line, name) != NULL && sscanf(line, "%lx-", &start) == 1) {
            found = (uint8_t *)start;
            break;
        }
    }
    (void)fclose(f);
    return found;
}

Test(shm, corrupt_record_tears_ring_down)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct xport *b = make(2, NULL, pb);
    struct xport_shm_stats st;
    struct sink s = {0};
    uint8_t buf[64] = {0};
    struct xport_iov iov = {buf, sizeof buf};
    struct sreq r = {0};
    uint8_t *ring;

    cr_assert_eq(xport_start(b, on_recv, &s), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), 0);
    run_until(&s.count, 1);
    ring = find_mapping("/memfd:tern-ring-2-from-1");
    cr_assert(ring != NULL, "ring mapping found");
    /* The next record lands at ring offset 128 (the first took 128 bytes)
     * synchronously inside xport_send; flip one of its payload bytes
     * before B's loop sees it. */
    tern_put_u32(buf, 2);
    cr_assert_eq(xport_send(a, &r.req, 2, pb, &iov, 1, on_sent), 0);
    ring[4096 + 128 + 24 + 10] ^= 0x40;
    run_until(&r.done, 1);
    cr_expect_eq(r.status, 0, "handed off");
    /* B tears the ring down; A sees EOF and reconnects on later sends. */
    for (long i = 0; i < 100000000 && s.count < 2 && uv_hrtime() < deadline;
         i++) {
        (void)send_and_wait(a, 2, pb, 3, 64);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    cr_expect_geq(s.count, 2);
    cr_expect_eq(s.last, 3, "the corrupt record was never delivered");
    cr_assert_eq(xport_shm_stats(b, &st), 0);
    cr_expect_eq(st.corrupt, 1);
    close_and_wait(a);
    close_and_wait(b);
}

/* A raw SEQPACKET client speaking nonsense is disconnected; it never
 * disturbs a real peer. */
static int raw_connect(const char *path)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static int raw_closed_by_peer(int fd)
{
    char c;
    ssize_t n;
    for (int i = 0; i < 100000 && uv_hrtime() < deadline; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        n = recv(fd, &c, 1, MSG_DONTWAIT);
        if (n == 0) {
            return 1;
        }
        if (n > 0) {
            return 0; /* it answered: not expected here */
        }
    }
    return 0;
}

/* A well-formed HELLO (version 2, layout at the top of rdma/shm.c). */
static void put_hello(uint8_t m[104], uint64_t sender, uint64_t receiver)
{
    memset(m, 0, 104);
    tern_put_u32(m, 0x48534d54u);
    tern_put_u16(m + 4, 2);
    tern_put_u16(m + 6, 1);
    tern_put_u64(m + 8, sender);
    tern_put_u64(m + 16, receiver);
    memset(m + 32, 0x5a, 32); /* the nonce */
    tern_put_u32(m + 96, tern_checksum32(m, 96));
}

/* Send a HELLO from sender to receiver over a raw connection to path
 * (byte flip, when >= 0, flipped first): the receiver must hang up. */
static void expect_hello_refused(const char *path,
                                 uint64_t sender,
                                 uint64_t receiver,
                                 int flip,
                                 const char *what)
{
    uint8_t m[104];
    int fd = raw_connect(path);
    put_hello(m, sender, receiver);
    if (flip >= 0) {
        m[flip] ^= 1;
    }
    cr_assert_eq(send(fd, m, sizeof m, 0), 104);
    cr_expect(raw_closed_by_peer(fd), "%s", what);
    close(fd);
}

Test(shm, hostile_handshakes_disconnected)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct xport *b = make(2, NULL, pb);
    struct sink s = {0};
    int fd;

    cr_assert_eq(xport_start(b, on_recv, &s), 0);
    /* Garbage. */
    fd = raw_connect(pb);
    cr_assert_eq(send(fd, "GET / HTTP/1.0\r\n\r\n", 18, 0), 18);
    cr_expect(raw_closed_by_peer(fd), "garbage");
    close(fd);
    /* A HELLO for another receiver. */
    expect_hello_refused(pb, 9, 3, -1, "wrong receiver");
    /* A flipped checksum bit, version bit, nonce bit. */
    expect_hello_refused(pb, 9, 2, 97, "bad checksum");
    expect_hello_refused(pb, 9, 2, 4, "bad version");
    expect_hello_refused(pb, 9, 2, 40, "nonce changed after the checksum");
    /* Connect and hang up at once. */
    close(raw_connect(pb));
    /* A real peer is still served. */
    cr_assert_eq(send_and_wait(a, 2, pb, 7, 64), 0);
    run_until(&s.count, 1);
    cr_expect_eq(s.last, 7);
    cr_expect_eq(s.from, 1);
    close_and_wait(a);
    close_and_wait(b);
}

Test(shm, listen_path_rules)
{
    char errmsg[TERN_ERRMSG_SIZE];
    char p[108], stale[160];
    struct xport *a = make(1, NULL, p);
    struct xport *x = NULL;
    struct sockaddr_un sa;
    int fd;

    cr_expect_eq(xport_shm_new(&loop, 5, p, NULL, &x, errmsg), -EADDRINUSE,
                 "a live listener keeps its path");
    /* A socket file nobody listens on (a killed node's) is replaced. */
    (void)snprintf(stale, sizeof stale, "%s/stale.sock", dir);
    fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, stale, strlen(stale) + 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
    cr_assert_eq(access(stale, F_OK), 0);
    cr_expect_eq(xport_shm_new(&loop, 6, stale, NULL, &x, errmsg), 0, "%s",
                 errmsg);
    close_and_wait(x);
    cr_expect_neq(access(stale, F_OK), 0, "close removes the socket file");
    close_and_wait(a);
}

Test(shm, bad_arguments)
{
    char errmsg[TERN_ERRMSG_SIZE];
    char longpath[200];
    struct xport_shm_options o = {.ring_bytes = 5000};
    struct xport *x = NULL;
    struct xport_shm_stats st;
    char p[108];
    struct sreq r = {0};
    struct xport_iov iov = {"abcd", 4};
    struct xport *a;

    cr_expect_eq(xport_shm_new(&loop, 1, "/tmp/x.sock", &o, &x, errmsg),
                 TERN_EINVAL);
    o.ring_bytes = 2048;
    cr_expect_eq(xport_shm_new(&loop, 1, "/tmp/x.sock", &o, &x, errmsg),
                 TERN_EINVAL);
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    cr_expect_eq(xport_shm_new(&loop, 1, longpath, NULL, &x, errmsg),
                 TERN_EINVAL);
    cr_expect_eq(xport_shm_new(&loop, 1, "", NULL, &x, errmsg), TERN_EINVAL);
    cr_expect_eq(
        xport_shm_new(&loop, 1, "/nonexistent-dir/x.sock", NULL, &x, errmsg),
        -ENOENT);
    a = make(1, NULL, p);
    cr_expect_eq(xport_max_message(a), ((size_t)8 << 20) / 2 - 40);
    cr_expect_eq(xport_send(a, &r.req, 2, "", &iov, 1, on_sent), TERN_EINVAL);
    cr_expect_eq(xport_send(a, &r.req, 2, longpath, &iov, 1, on_sent),
                 TERN_EINVAL);
    cr_expect_eq(r.done, 0);
    cr_expect_eq(xport_shm_set_fence(NULL, 1), TERN_EINVAL);
    cr_expect_eq(xport_shm_stats(a, &st), 0);
    cr_expect_eq(st.fenced + st.corrupt, 0);
    close_and_wait(a);
}

Test(shm, out_of_memory_fails_cleanly)
{
    char errmsg[TERN_ERRMSG_SIZE];
    char pa[108], pb[108];
    struct xport *x = NULL;
    struct xport *a, *b;
    struct sink s = {0};
    uint8_t buf[64] = {0};
    struct xport_iov iov = {buf, sizeof buf};
    struct sreq r = {0};

    (void)snprintf(pa, sizeof pa, "%s/oom.sock", dir);
    tern_alloc_fail_after(0);
    cr_expect_eq(xport_shm_new(&loop, 1, pa, NULL, &x, errmsg), -ENOMEM);
    tern_alloc_fail_after(-1);
    cr_expect_neq(access(pa, F_OK), 0, "no socket file left behind");

    a = make(1, NULL, pa);
    b = make(2, NULL, pb);
    cr_assert_eq(xport_start(b, on_recv, &s), 0);
    tern_alloc_fail_after(0); /* the peer record */
    cr_expect_eq(xport_send(a, &r.req, 2, pb, &iov, 1, on_sent), -ENOMEM);
    tern_alloc_fail_after(1); /* the connection */
    cr_expect_eq(xport_send(a, &r.req, 2, pb, &iov, 1, on_sent), -ENOMEM);
    tern_alloc_fail_after(-1);
    cr_expect_eq(r.done, 0, "a failed send never calls back");
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), 0);
    run_until(&s.count, 1);
    close_and_wait(a);
    close_and_wait(b);
}

/* ---- a real peer process, killed with SIGKILL and restarted ------------ */

static void on_echo_sent(struct xport_send *req, int status)
{
    (void)req;
    (void)status;
}

static void child_echo(void *arg, uint64_t from, const void *msg, size_t len)
{
    static struct xport_send reqs[64];
    static unsigned next;
    struct xport *x = arg;
    struct xport_iov iov = {msg, len};
    (void)from;
    /* The parent has at most one ping in flight. */
    (void)xport_send(x, &reqs[next++ % 64], 1, getenv("TERN_TEST_PARENT"), &iov,
                     1, on_echo_sent);
}

/* Fork a child running an shm transport (id 2) at path that echoes to
 * the parent. Returns its pid once it listens. */
static pid_t spawn_echo(const char *path)
{
    int ready[2];
    char c;
    pid_t pid;

    cr_assert_eq(pipe(ready), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        uv_loop_t l;
        struct xport *x = NULL;
        char errmsg[TERN_ERRMSG_SIZE];
        struct xport_shm_options o = {0};
        o.secret = &secret;
        close(ready[0]);
        uv_loop_init(&l);
        if (xport_shm_new(&l, 2, path, &o, &x, errmsg) != 0 ||
            xport_start(x, child_echo, x) != 0) {
            _exit(3);
        }
        (void)!write(ready[1], "r", 1);
        uv_run(&l, UV_RUN_DEFAULT);
        _exit(0);
    }
    close(ready[1]);
    cr_assert_eq(read(ready[0], &c, 1), 1, "child listening");
    close(ready[0]);
    return pid;
}

Test(shm, killed_peer_process_restarts)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct sink s = {0};
    int st;
    pid_t child;
    uint32_t v = 1;

    (void)snprintf(pb, sizeof pb, "%s/child.sock", dir);
    cr_assert_eq(setenv("TERN_TEST_PARENT", pa, 1), 0);
    cr_assert_eq(xport_start(a, on_recv, &s), 0);
    child = spawn_echo(pb);
    cr_assert_eq(send_and_wait(a, 2, pb, v++, 64), 0);
    run_until(&s.count, 1);
    cr_expect_eq(s.from, 2);

    /* SIGKILL: the socket file stays behind, the ring memory goes. */
    cr_assert_eq(kill(child, SIGKILL), 0);
    cr_assert_eq(waitpid(child, &st, 0), child);
    cr_assert_eq(access(pb, F_OK), 0, "stale socket file left");
    /* The sender notices (EOF on the socket): sends fail, never hang. */
    for (int i = 0; i < 100000 && uv_hrtime() < deadline; i++) {
        if (send_and_wait(a, 2, pb, v++, 64) == TERN_ENOCONN) {
            break;
        }
    }
    cr_expect_eq(send_and_wait(a, 2, pb, v++, 64), TERN_ENOCONN,
                 "nobody listens: ENOCONN (back-off)");

    /* A new incarnation at the same path: traffic resumes. */
    child = spawn_echo(pb);
    /* Sends complete with TERN_ENOCONN until the back-off (100 ms) ends. */
    for (long i = 0; i < 100000000 && s.count < 2 && uv_hrtime() < deadline;
         i++) {
        if (send_and_wait(a, 2, pb, v++, 64) == 0) {
            for (int j = 0; j < 100000 && s.count < 2; j++) {
                uv_run(&loop, UV_RUN_NOWAIT);
            }
        }
    }
    cr_expect_eq(s.count, 2, "echo from the restarted peer");
    cr_expect_eq(s.from, 2);
    cr_assert_eq(kill(child, SIGKILL), 0);
    cr_assert_eq(waitpid(child, &st, 0), child);
    close_and_wait(a);
}

/* Busy-polling (xport_shm_set_busy_poll). Nobody answers A here (B only
 * receives, and A has no inbound ring at all), so every round spins to its
 * deadline and no longer; after 8 empty rounds the next 64 sends do not
 * spin. Budgets are large so that a preempted test process cannot make a
 * round start after its deadline. */
Test(shm, busy_poll_round_is_bounded_and_backs_off)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct xport *b = make(2, NULL, pb);
    struct xport_shm_stats st;
    struct sink s = {0};
    const uint64_t budget_ns = 20000000; /* 20 ms */

    cr_assert_eq(xport_start(b, on_recv, &s), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), 0); /* connect */
    run_until(&s.count, 1);
    cr_assert_eq(xport_shm_set_busy_poll(a, (unsigned)(budget_ns / 1000)), 0);
    for (unsigned k = 0; k < 20; k++) {
        cr_assert_eq(send_and_wait(a, 2, pb, 2 + k, 64), 0);
    }
    run_until(&s.count, 21);
    cr_expect_eq(s.last, 21, "every message delivered, in order");
    cr_assert_eq(xport_shm_stats(a, &st), 0);
    cr_expect_eq(st.spins, 8, "8 empty rounds, then the back-off");
    cr_expect_eq(st.spin_hits, 0);
    cr_expect_geq(st.spin_ns, 8 * budget_ns / 2, "each round spun");
    cr_expect_leq(st.spin_ns, 8 * (budget_ns + 30000000ull),
                  "and stopped at its deadline");
    /* Off again: no more rounds. */
    cr_assert_eq(xport_shm_set_busy_poll(a, 0), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 22, 64), 0);
    run_until(&s.count, 22);
    cr_assert_eq(xport_shm_stats(a, &st), 0);
    cr_expect_eq(st.spins, 8);
    cr_expect_eq(xport_shm_set_busy_poll(NULL, 5), TERN_EINVAL);
    close_and_wait(a);
    close_and_wait(b);
}

/* An answer from another process that lands during a round is taken from
 * the ring and delivered from the round itself. From the send on, A's
 * inbound ring is marked awake (armed = 0: the peer skips the doorbell);
 * before A's loop may sleep again it is re-armed. (A peer preempted
 * between its write and its doorbell check may still ring: a spurious
 * wake-up, harmless, so wake-ups are not counted here.) */
Test(shm, busy_poll_takes_answers_from_the_ring)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct xport_shm_stats st;
    struct sink s = {0};
    struct sreq r;
    uint8_t *ring;
    int status;
    pid_t child;
    const int pings = 20;

    (void)snprintf(pb, sizeof pb, "%s/child.sock", dir);
    cr_assert_eq(setenv("TERN_TEST_PARENT", pa, 1), 0);
    cr_assert_eq(xport_start(a, on_recv, &s), 0);
    child = spawn_echo(pb);
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), 0);
    run_until(&s.count, 1); /* both directions connected */
    ring = find_mapping("/memfd:tern-ring-1-from-2");
    cr_assert(ring != NULL, "A's inbound ring mapping found");
    cr_expect_eq(tern_get_u64(ring + 64), 1, "armed while idle");
    cr_assert_eq(xport_shm_set_busy_poll(a, 50000), 0); /* 50 ms */
    for (int k = 0; k < pings; k++) {
        cr_assert_eq(send_msg(a, &r, 2, pb, 2 + (unsigned)k, 64, NULL), 0);
        cr_expect_eq(tern_get_u64(ring + 64), 0, "awake from the send on");
        run_until(&r.done, 1);
        run_until(&s.count, 2 + k);
        cr_expect_eq(s.last, 2 + (unsigned)k, "in order");
        /* A late doorbell check of the peer may clear it again (and ring);
         * the loop then re-arms it once more: never idle while awake. */
        for (long i = 0; i < 1000000 && tern_get_u64(ring + 64) != 1 &&
                         uv_hrtime() < deadline;
             i++) {
            uv_run(&loop, UV_RUN_NOWAIT);
        }
        cr_expect_eq(tern_get_u64(ring + 64), 1, "re-armed before sleeping");
    }
    cr_assert_eq(xport_shm_stats(a, &st), 0);
    cr_expect_geq(st.spin_hits, 1, "some answer landed during a round");
    cr_expect_leq(st.spin_hits, st.spins);
    cr_expect_leq(st.spins, (uint64_t)pings);
    cr_assert_eq(kill(child, SIGKILL), 0);
    cr_assert_eq(waitpid(child, &status, 0), child);
    close_and_wait(a);
}
