/*
 * bench_xport: round-trip latency between two processes (fork) through the
 * node transports, beside the floors measured in the same run on the same
 * machine:
 *   eventfd        two processes ping-pong with blocking eventfd reads
 *                  (the shm transport's wake-up primitive, nothing else);
 *   eventfd+epoll  the same, each side waiting in epoll_wait first (what a
 *                  libuv loop does; the honest floor for a loop-driven
 *                  transport);
 *   eventfd paced  eventfd+epoll, but the parent sleeps GAP us between
 *                  round trips (-g, default 200), so both sides go idle
 *                  between messages as the nodes do in a window-1
 *                  replication run: on a VM the wake-up of an idle vCPU
 *                  is part of every round trip (reported, not a floor the
 *                  targets are defined against);
 *   tcp loopback   blocking TCP_NODELAY sockets on 127.0.0.1, SIZE bytes
 *                  each way;
 *   xport shm      xport_shm transports, one uv loop per process: the
 *                  parent sends SIZE bytes, the child's recv callback
 *                  sends them back, the parent's recv callback takes the
 *                  time and sends the next;
 *   xport tcp      the same over xport_tcp on 127.0.0.1.
 * Prints a table (microseconds) and one JSON line. Not a test: no
 * pass/fail, no timing assertions.
 *
 * Usage: bench_xport [-n round_trips] [-s size_bytes] [-w warmup]
 *                    [-m stream_messages] [-W window] [-g gap_us] [-b us]
 *                    [-P]
 * -P: pin the parent to CPU 0 and the child of every ping-pong to CPU 1.
 * -b us: both ends of the xport ping-pongs busy-poll up to us microseconds
 * after each send (xport_set_busy_poll), as
 * ternd's busy_poll_us does; the floors never spin.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tern_common.h>
#include <xport.h>

#define BENCH__POOL 256

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct result
{
    const char *name;
    const char *key;
    int ok;
    size_t n;
    double p50, p99, p999, mean, min;
};

/* -P: the parent runs on CPU 0 and every child on CPU 1, as the two ends
 * of a replication leg run on two CPUs (bench/replication.sh --pin). */
static int pin_cpus;

static void pin_to(int cpu)
{
    cpu_set_t set;
    if (!pin_cpus) {
        return;
    }
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("bench_xport: sched_setaffinity");
    }
}

static pid_t fork_child(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        pin_to(1);
    }
    return pid;
}

static void summarize(struct result *r, uint64_t *s, size_t n)
{
    double sum = 0;
    qsort(s, n, sizeof *s, cmp_u64);
    for (size_t i = 0; i < n; i++) {
        sum += (double)s[i];
    }
    r->ok = n > 0;
    r->n = n;
    if (n == 0) {
        return;
    }
    r->p50 = (double)s[n >> 1] / 1000.0;
    r->p99 = (double)s[(size_t)((double)n * 0.99)] / 1000.0;
    r->p999 = (double)s[TERN_MIN(n - 1, (size_t)((double)n * 0.999))] / 1000.0;
    r->mean = sum / (double)n / 1000.0;
    r->min = (double)s[0] / 1000.0;
}

static void child_done(pid_t pid)
{
    int st;
    kill(pid, SIGTERM);
    (void)waitpid(pid, &st, 0);
}

/* ---- floors ------------------------------------------------------------ */

static void efd_wait(int fd, int ep)
{
    uint64_t v;
    if (ep >= 0) {
        struct epoll_event ev;
        while (epoll_wait(ep, &ev, 1, -1) < 0 && errno == EINTR) {
        }
    }
    while (read(fd, &v, sizeof v) != (ssize_t)sizeof v) {
        if (errno != EINTR && errno != EAGAIN) {
            _exit(2);
        }
    }
}

static void efd_post(int fd)
{
    uint64_t one = 1;
    if (write(fd, &one, sizeof one) != (ssize_t)sizeof one) {
        _exit(2);
    }
}

static int epoll_for(int fd)
{
    struct epoll_event ev = {.events = EPOLLIN};
    int ep = epoll_create1(EPOLL_CLOEXEC);
    ev.data.fd = fd;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        return -1;
    }
    return ep;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000u),
                          (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void bench_eventfd(struct result *r,
                          size_t n,
                          size_t warm,
                          int use_epoll,
                          unsigned gap_us)
{
    int ping = eventfd(0, EFD_CLOEXEC), pong = eventfd(0, EFD_CLOEXEC);
    uint64_t *s = calloc(n, sizeof *s);
    pid_t pid;

    if (ping < 0 || pong < 0 || s == NULL) {
        free(s);
        return;
    }
    pid = fork_child();
    if (pid == 0) {
        int ep = use_epoll ? epoll_for(ping) : -1;
        for (;;) {
            efd_wait(ping, ep);
            efd_post(pong);
        }
    }
    {
        int ep = use_epoll ? epoll_for(pong) : -1;
        for (size_t i = 0; i < warm + n; i++) {
            uint64_t t0;
            if (gap_us > 0) {
                sleep_us(gap_us);
            }
            t0 = now_ns();
            efd_post(ping);
            efd_wait(pong, ep);
            if (i >= warm) {
                s[i - warm] = now_ns() - t0;
            }
        }
        if (ep >= 0) {
            close(ep);
        }
    }
    child_done(pid);
    summarize(r, s, n);
    free(s);
    close(ping);
    close(pong);
}

static int full_io(int fd, void *buf, size_t len, int wr)
{
    size_t off = 0;
    while (off < len) {
        ssize_t k = wr ? write(fd, (char *)buf + off, len - off)
                       : read(fd, (char *)buf + off, len - off);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) {
                continue;
            }
            return -1;
        }
        off += (size_t)k;
    }
    return 0;
}

static void bench_tcp_floor(struct result *r,
                            size_t n,
                            size_t warm,
                            size_t size)
{
    struct sockaddr_in sa;
    socklen_t slen = sizeof sa;
    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uint64_t *s = calloc(n, sizeof *s);
    char *buf = calloc(1, size + 1);
    pid_t pid;
    int fd;

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || s == NULL || buf == NULL ||
        bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &slen) != 0) {
        free(s);
        free(buf);
        return;
    }
    pid = fork_child();
    if (pid == 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (struct sockaddr *)&sa, sizeof sa) != 0) {
            _exit(2);
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        for (;;) {
            if (full_io(c, buf, size, 0) != 0 ||
                full_io(c, buf, size, 1) != 0) {
                _exit(0);
            }
        }
    }
    fd = accept(lfd, NULL, NULL);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (size_t i = 0; i < warm + n; i++) {
        uint64_t t0 = now_ns();
        if (full_io(fd, buf, size, 1) != 0 || full_io(fd, buf, size, 0) != 0) {
            break;
        }
        if (i >= warm) {
            s[i - warm] = now_ns() - t0;
        }
    }
    close(fd);
    close(lfd);
    child_done(pid);
    summarize(r, s, n);
    free(s);
    free(buf);
}

/* ---- transports -------------------------------------------------------- */

struct pp
{
    uv_loop_t loop;
    struct xport *x;
    uint64_t peer_id;
    const char *peer_addr;
    struct xport_send pool[BENCH__POOL];
    int busy[BENCH__POOL];
    unsigned next;
    uint8_t *msg;
    size_t size;
    /* parent only */
    uint64_t *samples;
    size_t n, warm, count;
    uint64_t t0;
    int failed_sends;
};

static void pp_send(struct pp *p, const void *msg, size_t len);
static void st_on_sent(struct xport_send *req, int status);

static void pp_on_sent(struct xport_send *req, int status)
{
    struct pp *p = req->data;
    p->busy[req - p->pool] = 0;
    if (status != 0 && p->samples != NULL && p->count == 0) {
        /* Connection not up yet: retry the first ping. */
        p->failed_sends++;
        if (p->failed_sends < 100000) {
            p->t0 = now_ns();
            pp_send(p, p->msg, p->size);
        }
    }
}

static void pp_send(struct pp *p, const void *msg, size_t len)
{
    struct xport_iov iov = {msg, len};
    unsigned k = p->next++ % BENCH__POOL;
    if (p->busy[k]) {
        return; /* cannot happen with one message in flight */
    }
    p->busy[k] = 1;
    p->pool[k].data = p;
    if (xport_send(p->x, &p->pool[k], p->peer_id, p->peer_addr, &iov, 1,
                   pp_on_sent) != 0) {
        p->busy[k] = 0;
    }
}

static void on_echo(void *arg, uint64_t from, const void *msg, size_t len)
{
    (void)from;
    pp_send(arg, msg, len);
}

static void pp_closed(void *arg)
{
    (void)arg;
}

static void on_pong(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct pp *p = arg;
    uint64_t t = now_ns();
    (void)from;
    (void)msg;
    (void)len;
    if (p->count >= p->warm) {
        p->samples[p->count - p->warm] = t - p->t0;
    }
    p->count++;
    if (p->count >= p->warm + p->n) {
        xport_close(p->x, pp_closed, NULL);
        return;
    }
    p->t0 = now_ns();
    pp_send(p, p->msg, p->size);
}

static unsigned busy_poll_us; /* -b: both ends of the xport ping-pongs */

static int make_x(int shm,
                  uv_loop_t *loop,
                  uint64_t id,
                  const char *addr,
                  struct xport **out)
{
    char errmsg[TERN_ERRMSG_SIZE];
    int rc = shm ? xport_shm_new(loop, id, addr, NULL, out, errmsg)
                 : xport_tcp_new(loop, id, addr, NULL, out, errmsg);
    if (rc != 0) {
        (void)fprintf(stderr, "bench_xport: %s transport: %s\n",
                      shm ? "shm" : "tcp", errmsg);
        return rc;
    }
    if (busy_poll_us > 0) {
        rc = xport_set_busy_poll(*out, busy_poll_us);
    }
    return rc;
}

static void bench_xport(struct result *r,
                        int shm,
                        size_t n,
                        size_t warm,
                        size_t size,
                        const char *addr_parent,
                        const char *addr_child)
{
    static struct pp p;
    int ready[2];
    char c;
    pid_t pid;

    if (pipe(ready) != 0) {
        return;
    }
    pid = fork_child();
    if (pid == 0) {
        static struct pp q;
        uv_loop_init(&q.loop);
        if (make_x(shm, &q.loop, 2, addr_child, &q.x) != 0) {
            _exit(2);
        }
        q.peer_id = 1;
        q.peer_addr = addr_parent;
        xport_start(q.x, on_echo, &q);
        (void)!write(ready[1], "r", 1);
        uv_run(&q.loop, UV_RUN_DEFAULT);
        _exit(0);
    }
    close(ready[1]);
    memset(&p, 0, sizeof p);
    uv_loop_init(&p.loop);
    p.samples = calloc(n, sizeof *p.samples);
    p.msg = calloc(1, size + 1);
    p.size = size;
    p.n = n;
    p.warm = warm;
    p.peer_id = 2;
    p.peer_addr = addr_child;
    if (read(ready[0], &c, 1) != 1 || p.samples == NULL ||
        make_x(shm, &p.loop, 1, addr_parent, &p.x) != 0) {
        child_done(pid);
        return;
    }
    close(ready[0]);
    xport_start(p.x, on_pong, &p);
    p.t0 = now_ns();
    pp_send(&p, p.msg, p.size);
    uv_run(&p.loop, UV_RUN_DEFAULT);
    uv_loop_close(&p.loop);
    child_done(pid);
    if (p.count >= warm + n) {
        summarize(r, p.samples, n);
    }
    free(p.samples);
    free(p.msg);
}

/* ---- one-way streaming throughput ---------------------------------------- */

struct st
{
    uv_loop_t loop;
    struct xport *x;
    const char *peer_addr;
    uint64_t peer_id;
    struct xport_send *reqs; /* window slots */
    uint8_t *msg;
    size_t size, total, sent, completed, received, failed;
    unsigned window;
    int stop;
    int samples_parent; /* 1 in the parent (sender) */
    uint64_t t0, t1;
};

static void st_send(struct st *s, struct xport_send *req)
{
    struct xport_iov iov = {s->msg, s->size};
    req->data = s;
    s->sent++;
    if (xport_send(s->x, req, s->peer_id, s->peer_addr, &iov, 1, st_on_sent) !=
        0) {
        s->failed++;
    }
}

static void st_on_sent(struct xport_send *req, int status)
{
    struct st *s = req->data;
    s->completed++;
    if (status != 0 && !s->stop) {
        /* A lost message would stall the count: give up on this run. */
        s->failed++;
        s->stop = 1;
        if (s->samples_parent) {
            xport_close(s->x, pp_closed, NULL);
        }
    }
    if (!s->stop && s->sent < s->total) {
        st_send(s, req); /* the slot is free again: keep the window full */
    }
}

static void st_on_count(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct st *s = arg;
    (void)from;
    (void)msg;
    (void)len;
    if (++s->received == s->total) {
        struct xport_iov iov = {"d", 1};
        (void)xport_send(s->x, &s->reqs[0], s->peer_id, s->peer_addr, &iov, 1,
                         st_on_sent);
    }
}

static void st_on_done(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct st *s = arg;
    (void)from;
    (void)msg;
    (void)len;
    if (s->stop) {
        return;
    }
    s->t1 = now_ns();
    s->stop = 1;
    xport_close(s->x, pp_closed, NULL);
}

/* Parent streams total messages of size bytes to the child, window
 * sends in flight; the child answers once it has counted them all.
 * Returns messages per second, or 0 on failure. */
static double bench_stream(int shm,
                           size_t total,
                           size_t size,
                           unsigned window,
                           const char *addr_parent,
                           const char *addr_child,
                           size_t *failed)
{
    static struct st s;
    int ready[2];
    char c;
    pid_t pid;
    double rate = 0;

    if (pipe(ready) != 0) {
        return 0;
    }
    pid = fork_child();
    if (pid == 0) {
        static struct st q;
        static struct xport_send done_req;
        uv_loop_init(&q.loop);
        if (make_x(shm, &q.loop, 2, addr_child, &q.x) != 0) {
            _exit(2);
        }
        q.total = total;
        q.peer_id = 1;
        q.peer_addr = addr_parent;
        q.reqs = &done_req;
        xport_start(q.x, st_on_count, &q);
        (void)!write(ready[1], "r", 1);
        uv_run(&q.loop, UV_RUN_DEFAULT);
        _exit(0);
    }
    close(ready[1]);
    memset(&s, 0, sizeof s);
    uv_loop_init(&s.loop);
    s.total = total;
    s.size = size;
    s.window = window;
    s.peer_id = 2;
    s.peer_addr = addr_child;
    s.samples_parent = 1;
    s.reqs = calloc(window, sizeof *s.reqs);
    s.msg = calloc(1, size + 1);
    if (read(ready[0], &c, 1) != 1 || s.reqs == NULL || s.msg == NULL ||
        make_x(shm, &s.loop, 1, addr_parent, &s.x) != 0) {
        child_done(pid);
        free(s.reqs);
        free(s.msg);
        return 0;
    }
    close(ready[0]);
    xport_start(s.x, st_on_done, &s);
    /* The time includes connection setup (~0.1 ms, negligible here). */
    s.t0 = now_ns();
    for (unsigned i = 0; i < window && s.sent < total; i++) {
        st_send(&s, &s.reqs[i]);
    }
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
    child_done(pid);
    if (s.t1 > s.t0 && s.failed == 0) {
        rate = (double)total / ((double)(s.t1 - s.t0) / 1e9);
    }
    *failed = s.failed;
    free(s.reqs);
    free(s.msg);
    return rate;
}

/* ---- main -------------------------------------------------------------- */

static void print_row(const struct result *r)
{
    if (!r->ok) {
        printf("%-16s %8s  (failed)\n", r->name, "-");
        return;
    }
    printf("%-16s %8zu %9.2f %9.2f %9.2f %9.2f %9.2f\n", r->name, r->n, r->p50,
           r->p99, r->p999, r->mean, r->min);
}

int main(int argc, char **argv)
{
    size_t n = 20000, warm = 2000, size = 64, m = 200000;
    unsigned window = 256;
    double rate[2] = {0, 0};
    size_t failed[2] = {0, 0};
    unsigned gap_us = 200;
    struct result res[6] = {
        {.name = "eventfd", .key = "eventfd"},
        {.name = "eventfd+epoll", .key = "eventfd_epoll"},
        {.name = "eventfd paced", .key = "eventfd_paced"},
        {.name = "tcp loopback", .key = "tcp_floor"},
        {.name = "xport shm", .key = "xport_shm"},
        {.name = "xport tcp", .key = "xport_tcp"},
    };
    enum { R_EFD, R_EFD_EPOLL, R_PACED, R_TCP, R_SHM, R_XTCP };
    char dir[] = "/tmp/bench-xport-XXXXXX";
    char sp[128], sc[128], tp[32], tc[32];
    char sp2[128], sc2[128], tp2[32], tc2[32];
    int opt;

    while ((opt = getopt(argc, argv, "n:s:w:m:W:g:b:P")) != -1) {
        switch (opt) {
        case 'n':
            n = strtoul(optarg, NULL, 10);
            break;
        case 's':
            size = strtoul(optarg, NULL, 10);
            break;
        case 'w':
            warm = strtoul(optarg, NULL, 10);
            break;
        case 'm':
            m = strtoul(optarg, NULL, 10);
            break;
        case 'W':
            window = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'g':
            gap_us = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'b':
            busy_poll_us = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'P':
            pin_cpus = 1;
            break;
        default:
            (void)fprintf(
                stderr,
                "usage: %s [-n round_trips] [-s size] [-w warmup] "
                "[-m stream_messages] [-W window] [-g gap_us] [-b us] "
                "[-P]\n",
                argv[0]);
            return 2;
        }
    }
    if (n == 0 || size < 1 || window == 0) {
        (void)fprintf(stderr, "bench_xport: -n, -s and -W must be > 0\n");
        return 2;
    }
    (void)signal(SIGPIPE, SIG_IGN);
    pin_to(0);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    (void)snprintf(sp, sizeof sp, "%s/parent.sock", dir);
    (void)snprintf(sc, sizeof sc, "%s/child.sock", dir);
    (void)snprintf(sp2, sizeof sp2, "%s/parent2.sock", dir);
    (void)snprintf(sc2, sizeof sc2, "%s/child2.sock", dir);
    srand((unsigned)getpid());
    {
        int port = 20000 + rand() % 40000;
        (void)snprintf(tp, sizeof tp, "127.0.0.1:%d", port);
        (void)snprintf(tc, sizeof tc, "127.0.0.1:%d", port + 1);
        (void)snprintf(tp2, sizeof tp2, "127.0.0.1:%d", port + 2);
        (void)snprintf(tc2, sizeof tc2, "127.0.0.1:%d", port + 3);
    }

    bench_eventfd(&res[R_EFD], n, warm, 0, 0);
    bench_eventfd(&res[R_EFD_EPOLL], n, warm, 1, 0);
    /* Paced: fewer samples (each costs a gap). */
    bench_eventfd(&res[R_PACED], n < 3000 ? n : 3000, warm < 200 ? warm : 200,
                  1, gap_us);
    bench_tcp_floor(&res[R_TCP], n, warm, size);
    bench_xport(&res[R_SHM], 1, n, warm, size, sp, sc);
    bench_xport(&res[R_XTCP], 0, n, warm, size, tp, tc);
    if (m > 0) {
        rate[0] = bench_stream(1, m, size, window, sp2, sc2, &failed[0]);
        rate[1] = bench_stream(0, m, size, window, tp2, tc2, &failed[1]);
    }
    /* The children were killed: their socket files stay. */
    (void)unlink(sp);
    (void)unlink(sc);
    (void)unlink(sp2);
    (void)unlink(sc2);
    (void)rmdir(dir);

    printf(
        "round trip, %zu bytes each way, %zu samples (+%zu warm-up), "
        "microseconds\n",
        size, n, warm);
    printf("%-16s %8s %9s %9s %9s %9s %9s\n", "path", "n", "p50", "p99",
           "p99.9", "mean", "min");
    for (size_t i = 0; i < TERN_ARRAY_SIZE(res); i++) {
        print_row(&res[i]);
    }
    if (res[R_SHM].ok && res[R_EFD].ok && res[R_EFD_EPOLL].ok) {
        printf("shm p50 / eventfd p50 = %.2fx, / eventfd+epoll p50 = %.2fx\n",
               res[R_SHM].p50 / res[R_EFD].p50,
               res[R_SHM].p50 / res[R_EFD_EPOLL].p50);
    }
    if (res[R_XTCP].ok && res[R_TCP].ok) {
        printf("xport tcp p50 / tcp loopback p50 = %.2fx\n",
               res[R_XTCP].p50 / res[R_TCP].p50);
    }
    if (res[R_PACED].ok) {
        printf("eventfd paced: %u us idle between round trips\n", gap_us);
    }
    for (int i = 0; i < 2 && m > 0; i++) {
        if (rate[i] > 0) {
            printf("stream %s: %zu x %zu B, window %u: %.0f msg/s, %.1f MB/s\n",
                   i == 0 ? "shm" : "tcp", m, size, window, rate[i],
                   rate[i] * (double)size / 1e6);
        } else {
            printf("stream %s: failed (%zu sends failed)\n",
                   i == 0 ? "shm" : "tcp", failed[i]);
        }
    }
    printf(
        "{\"bench\":\"xport_pingpong\",\"size\":%zu,\"n\":%zu,"
        "\"paced_gap_us\":%u",
        size, n, gap_us);
    for (size_t i = 0; i < TERN_ARRAY_SIZE(res); i++) {
        if (res[i].ok) {
            printf(
                ",\"%s\":{\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,"
                "\"mean_us\":%.2f}",
                res[i].key, res[i].p50, res[i].p99, res[i].p999, res[i].mean);
        } else {
            printf(",\"%s\":null", res[i].key);
        }
    }
    printf(",\"stream_shm_msgs_per_s\":%.0f,\"stream_tcp_msgs_per_s\":%.0f}\n",
           rate[0], rate[1]);
    return 0;
}
