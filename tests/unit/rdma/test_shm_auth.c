/* Unit tests of the shm handshake's authentication (rdma/shm.c, handshake
 * version 2): two transports with the same cluster secret talk; with
 * different secrets, or one without, nothing is delivered either way and
 * auth_refused counts it. Then the test itself plays a stranger on the
 * unix socket (an old version 1 HELLO with fds, a forged AUTH, a replayed
 * AUTH, a reflected proof, fds where none belong, too many fds, silence,
 * a flood of pending connections) and a fake receiver: no ring fd ever
 * reaches the stranger, nothing is delivered, every fd the transport
 * received is closed, and real peers are still served afterwards.
 * Message layouts are written out here from the format at the top of
 * rdma/shm.c. One uv loop per test, bounded polling, no sleeps. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <auth.h>
#include <tern_common.h>
#include <xport.h>

#include "xport_test_loop.h"

#define MSG_SIZE    104
#define T_HELLO     1
#define T_WELCOME   2
#define T_CHALLENGE 3
#define T_AUTH      4

static struct auth_secret secret_a, secret_b;

static void setup(void)
{
    char errmsg[TERN_ERRMSG_SIZE];
    loop_setup("shma", 30);
    cr_assert_eq(auth_random(secret_a.key, sizeof secret_a.key, errmsg), 0);
    cr_assert_eq(auth_random(secret_b.key, sizeof secret_b.key, errmsg), 0);
}

static void teardown(void)
{
    loop_teardown();
}

TestSuite(shm_auth, .init = setup, .fini = teardown, .timeout = 60);

/* An shm transport with id at dir/n<id>.sock; secret may be NULL. */
static struct xport *make_opts(uint64_t id,
                               const struct auth_secret *secret,
                               unsigned hs_ms,
                               unsigned max_pending,
                               char path[108])
{
    struct xport_shm_options o = {0};
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;
    int rc;

    o.secret = secret;
    o.handshake_timeout_ms = hs_ms;
    o.max_pending = max_pending;
    (void)snprintf(path, 108, "%s/n%llu.sock", dir, (unsigned long long)id);
    rc = xport_shm_new(&loop, id, path, &o, &x, errmsg);
    cr_assert_eq(rc, 0, "xport_shm_new: %s", errmsg);
    return x;
}

static struct xport *make(uint64_t id,
                          const struct auth_secret *secret,
                          char path[108])
{
    return make_opts(id, secret, 0, 0, path);
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

static struct xport_shm_stats stats_of(struct xport *x)
{
    struct xport_shm_stats st;
    cr_assert_eq(xport_shm_stats(x, &st), 0);
    return st;
}

static uint64_t refused(struct xport *x)
{
    struct xport_stats st;
    cr_assert_eq(xport_get_stats(x, &st), 0);
    cr_expect_eq(st.auth_refused, stats_of(x).auth_refused,
                 "the generic counter is shm's");
    return st.auth_refused;
}

/* Whether this process maps a memfd whose name contains name. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    cr_assert(f != NULL);
    while (!found && fgets(line, sizeof line, f) != NULL) {
        found = strstr(line, name) != NULL;
    }
    (void)fclose(f);
    return found;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    cr_assert(d != NULL);
    while (readdir(d) != NULL) {
        n++;
    }
    (void)closedir(d);
    return n;
}

static void run_for_ms(unsigned ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000u;
    for (long i = 0; i < 100000000 && uv_hrtime() < end; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
    }
}

/* ---- a stranger's side of the handshake -------------------------------- */

struct msg
{
    unsigned version;
    unsigned type;
    uint64_t sender;
    uint64_t receiver;
    uint64_t cap;
    uint8_t nonce[32];
    uint8_t mac[32];
};

static void encode(uint8_t m[MSG_SIZE], const struct msg *h)
{
    memset(m, 0, MSG_SIZE);
    tern_put_u32(m, 0x48534d54u);
    tern_put_u16(m + 4, (uint16_t)h->version);
    tern_put_u16(m + 6, (uint16_t)h->type);
    tern_put_u64(m + 8, h->sender);
    tern_put_u64(m + 16, h->receiver);
    tern_put_u64(m + 24, h->cap);
    memcpy(m + 32, h->nonce, 32);
    memcpy(m + 64, h->mac, 32);
    tern_put_u32(m + 96, tern_checksum32(m, 96));
}

static void decode(const uint8_t *m, struct msg *h)
{
    cr_assert_eq(tern_get_u32(m), 0x48534d54u);
    cr_assert_eq(tern_get_u32(m + 96), tern_checksum32(m, 96));
    h->version = tern_get_u16(m + 4);
    h->type = tern_get_u16(m + 6);
    h->sender = tern_get_u64(m + 8);
    h->receiver = tern_get_u64(m + 16);
    h->cap = tern_get_u64(m + 24);
    memcpy(h->nonce, m + 32, 32);
    memcpy(h->mac, m + 64, 32);
}

/* The proofs of rdma/shm.c, computed with a secret the stranger holds
 * (to record genuine traffic for the replay test). */
static void proof(const struct auth_secret *s,
                  const char *label,
                  uint64_t sender,
                  uint64_t receiver,
                  const uint8_t ns[32],
                  const uint8_t nr[32],
                  uint8_t out[32])
{
    uint8_t ids[16];
    struct auth_iov parts[4];
    tern_put_u64(ids, sender);
    tern_put_u64(ids + 8, receiver);
    parts[0] = (struct auth_iov){ids, 8};
    parts[1] = (struct auth_iov){ids + 8, 8};
    parts[2] = (struct auth_iov){ns, 32};
    parts[3] = (struct auth_iov){nr, 32};
    cr_assert_eq(auth_secret_mac(s, label, parts, 4, out), 0);
}

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

/* Send len bytes with nfds fds. */
static void raw_send(int fd,
                     const void *m,
                     size_t len,
                     const int *fds,
                     int nfds)
{
    union
    {
        char buf[CMSG_SPACE(8 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {(void *)m, len};
    struct msghdr mh;
    memset(&u, 0, sizeof u);
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        struct cmsghdr *cm;
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    cr_assert_eq(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)len, "sendmsg: %s",
                 strerror(errno));
}

/* Wait (running the loop) for the next message on fd. Returns its length
 * (0: EOF) and the number of fds that came with it in *nfds (closed
 * here: a stranger must never get any, and the tests only count them). */
static ssize_t raw_recv(int fd, uint8_t *m, size_t cap, int *nfds)
{
    union
    {
        char buf[CMSG_SPACE(8 * sizeof(int))];
        struct cmsghdr align;
    } u;
    *nfds = 0;
    for (long i = 0; i < 10000000 && uv_hrtime() < deadline; i++) {
        struct iovec iov = {m, cap};
        struct msghdr mh;
        ssize_t n;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof u.buf;
        uv_run(&loop, UV_RUN_NOWAIT);
        n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EAGAIN) {
            continue;
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); n >= 0 && cm != NULL;
             cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t j = 0; j < k; j++) {
                    int got;
                    memcpy(&got, CMSG_DATA(cm) + j * sizeof(int), sizeof got);
                    close(got);
                    (*nfds)++;
                }
            }
        }
        return n < 0 ? 0 : n; /* ECONNRESET counts as closed */
    }
    cr_assert_fail("no answer and no EOF from the transport");
    return -1;
}

/* The transport hangs up on fd without sending a message or an fd. */
static void expect_closed(int fd, const char *what)
{
    uint8_t m[256];
    int nfds;
    ssize_t n = raw_recv(fd, m, sizeof m, &nfds);
    cr_expect_eq(n, 0, "%s: closed, not answered", what);
    cr_expect_eq(nfds, 0, "%s: no fd reaches a stranger", what);
}

/* A HELLO from sender to receiver with nonce ns; returns the CHALLENGE. */
static struct msg hello(int fd,
                        uint64_t sender,
                        uint64_t receiver,
                        const uint8_t ns[32])
{
    struct msg h = {2, T_HELLO, sender, receiver, 0, {0}, {0}};
    uint8_t m[256];
    int nfds;
    ssize_t n;

    memcpy(h.nonce, ns, 32);
    encode(m, &h);
    raw_send(fd, m, MSG_SIZE, NULL, 0);
    n = raw_recv(fd, m, sizeof m, &nfds);
    cr_assert_eq(n, MSG_SIZE, "a CHALLENGE answers a HELLO");
    cr_expect_eq(nfds, 0, "no fd with the CHALLENGE");
    decode(m, &h);
    cr_expect_eq(h.version, 2);
    cr_expect_eq(h.type, T_CHALLENGE);
    cr_expect_eq(h.sender, sender);
    cr_expect_eq(h.receiver, receiver);
    return h;
}

/* An AUTH (mac) with a control memfd made like a real sender's and an
 * eventfd. Returns the encoded message in out. */
static void auth_msg(uint8_t out[MSG_SIZE],
                     uint64_t sender,
                     uint64_t receiver,
                     const uint8_t mac[32])
{
    struct msg h = {2, T_AUTH, sender, receiver, 0, {0}, {0}};
    memcpy(h.mac, mac, 32);
    encode(out, &h);
}

/* A sealed control file as rdma/shm.c makes it (file format version 1). */
static int ctrl_memfd(uint64_t sender, uint64_t receiver)
{
    int fd = memfd_create("stranger-ctrl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    uint8_t *p;
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert(p != MAP_FAILED);
    tern_put_u32(p, 0x46534d54u);
    tern_put_u16(p + 4, 1);
    tern_put_u16(p + 6, 2);
    tern_put_u64(p + 8, 0);
    tern_put_u64(p + 16, sender);
    tern_put_u64(p + 24, receiver);
    tern_put_u32(p + 32, tern_checksum32(p, 32));
    cr_assert_eq(munmap(p, 4096), 0);
    cr_assert_eq(
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    return fd;
}

/* ---- real peers -------------------------------------------------------- */

Test(shm_auth, same_secret_talks_both_ways)
{
    char pa[108], pb[108];
    struct xport *a = make(1, &secret_a, pa);
    struct xport *b = make(2, &secret_a, pb);
    struct sink sa = {0}, sb = {0};

    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    for (unsigned k = 1; k <= 20; k++) {
        cr_assert_eq(send_and_wait(a, 2, pb, k, 64 + k), 0);
        cr_assert_eq(send_and_wait(b, 1, pa, 100 + k, 32), 0);
    }
    run_until(&sb.count, 20);
    run_until(&sa.count, 20);
    cr_expect_eq(sb.last, 20);
    cr_expect_eq(sb.from, 1);
    cr_expect_eq(sa.last, 120);
    cr_expect_eq(sa.from, 2);
    cr_expect_eq(refused(a), 0);
    cr_expect_eq(refused(b), 0);
    cr_expect_eq(stats_of(b).pending, 0, "no handshake left pending");
    close_and_wait(a);
    close_and_wait(b);
}

/* A and B hold different secrets, or one holds none: every send fails
 * with TERN_ENOCONN, nothing arrives, no ring is ever created, and the
 * side that checked the proof counts the refusal. */
static void expect_strangers(const struct auth_secret *sa_secret,
                             const struct auth_secret *sb_secret)
{
    char pa[108], pb[108];
    struct xport *a = make(1, sa_secret, pa);
    struct xport *b = make(2, sb_secret, pb);
    struct sink sa = {0}, sb = {0};
    int fails = 0;

    cr_assert_eq(xport_start(a, on_recv, &sa), 0);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    /* Each failed connect is followed by a 100 ms back-off (sends fail at
     * once during it); keep trying across several connects. */
    for (unsigned k = 0;
         k < 200 && uv_hrtime() < deadline && refused(a) + refused(b) < 4;
         k++) {
        fails += send_and_wait(a, 2, pb, k, 64) == TERN_ENOCONN;
        fails += send_and_wait(b, 1, pa, k, 64) == TERN_ENOCONN;
        run_for_ms(5);
    }
    cr_expect_geq(refused(a) + refused(b), 4, "refusals counted");
    cr_expect_geq(fails, 4);
    cr_expect_eq(sa.count, 0, "nothing delivered to A");
    cr_expect_eq(sb.count, 0, "nothing delivered to B");
    cr_expect(!mapped("tern-ring-"), "no ring was ever created");
    close_and_wait(a);
    close_and_wait(b);
}

Test(shm_auth, different_secrets_deliver_nothing_either_way)
{
    char pa[108], pb[108];
    struct xport *a, *b;
    struct sink sb = {0};
    expect_strangers(&secret_a, &secret_b);
    /* Both refuse what they receive: each side's check fails for the
     * other's proof, whoever connects. */
    a = make(1, &secret_a, pa);
    b = make(2, &secret_b, pb);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), TERN_ENOCONN);
    cr_expect_eq(refused(a), 1, "A refused B's CHALLENGE");
    cr_expect_eq(refused(b), 0, "B saw A leave (EOF is not counted)");
    cr_expect_eq(sb.count, 0);
    close_and_wait(a);
    close_and_wait(b);
}

Test(shm_auth, secret_and_no_secret_deliver_nothing_either_way)
{
    char pa[108], pb[108];
    struct xport *a, *b;
    struct sink sb = {0};
    expect_strangers(&secret_a, NULL);
    /* The unauthenticated side sends a zero proof: the other refuses it,
     * as sender and as receiver. */
    a = make(1, NULL, pa);
    b = make(2, &secret_a, pb);
    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 1, 64), TERN_ENOCONN);
    run_for_ms(20);
    cr_expect_eq(refused(b), 1, "B refused A's AUTH");
    cr_expect_eq(refused(a), 0);
    cr_expect_eq(sb.count, 0);
    close_and_wait(a);
    close_and_wait(b);
}

Test(shm_auth, no_secret_on_both_sides_talks)
{
    char pa[108], pb[108];
    struct xport *a = make(1, NULL, pa);
    struct xport *b = make(2, NULL, pb);
    struct sink sb = {0};

    cr_assert_eq(xport_start(b, on_recv, &sb), 0);
    cr_assert_eq(send_and_wait(a, 2, pb, 5, 64), 0);
    run_until(&sb.count, 1);
    cr_expect_eq(sb.last, 5);
    close_and_wait(a);
    close_and_wait(b);
}

/* ---- strangers on B's socket ------------------------------------------- */

/* B (id 2, secret_a) and a real peer A (id 1, secret_a); after the
 * stranger's attempts A must still be served. */
struct scene
{
    char pa[108], pb[108];
    struct xport *a, *b;
    struct sink sink;
    int fds_before;
};

static void scene_up(struct scene *s, unsigned hs_ms, unsigned max_pending)
{
    memset(s, 0, sizeof *s);
    s->a = make(1, &secret_a, s->pa);
    s->b = make_opts(2, &secret_a, hs_ms, max_pending, s->pb);
    cr_assert_eq(xport_start(s->b, on_recv, &s->sink), 0);
}

static void scene_down(struct scene *s, unsigned want_refused)
{
    cr_expect_eq(s->sink.count, 0, "nothing the stranger sent arrived");
    cr_expect_eq(refused(s->b), want_refused, "B counted every refusal");
    cr_assert_eq(send_and_wait(s->a, 2, s->pb, 77, 64), 0);
    run_until(&s->sink.count, 1);
    cr_expect_eq(s->sink.last, 77, "a real peer is still served");
    cr_expect_eq(s->sink.from, 1);
    cr_expect_eq(stats_of(s->b).pending, 0);
    close_and_wait(s->a);
    close_and_wait(s->b);
}

Test(shm_auth, old_version_hello_with_fds_refused)
{
    struct scene s;
    uint8_t m[40];
    int fds[2];
    int fd;
    int before;

    scene_up(&s, 0, 0);
    fds[0] = ctrl_memfd(9, 2);
    fds[1] = eventfd(0, EFD_CLOEXEC);
    cr_assert_geq(fds[1], 0);
    before = count_fds();
    fd = raw_connect(s.pb);
    /* Version 1: a 40-byte HELLO that carried the control memfd and the
     * eventfd, and got a ring back at once. */
    memset(m, 0, sizeof m);
    tern_put_u32(m, 0x48534d54u);
    tern_put_u16(m + 4, 1);
    tern_put_u16(m + 6, T_HELLO);
    tern_put_u64(m + 8, 9);
    tern_put_u64(m + 16, 2);
    tern_put_u32(m + 32, tern_checksum32(m, 32));
    raw_send(fd, m, sizeof m, fds, 2);
    expect_closed(fd, "v1 HELLO");
    close(fd);
    run_for_ms(20);
    cr_expect_eq(count_fds(), before, "B closed the fds it was sent");
    close(fds[0]);
    close(fds[1]);
    scene_down(&s, 1);
}

Test(shm_auth, forged_auth_refused)
{
    struct scene s;
    uint8_t ns[32], mac[32], m[MSG_SIZE];
    char errmsg[TERN_ERRMSG_SIZE];
    int fds[2];
    int fd;
    int before;

    scene_up(&s, 0, 0);
    fds[0] = ctrl_memfd(1, 2);
    fds[1] = eventfd(0, EFD_CLOEXEC);
    before = count_fds();
    cr_assert_eq(auth_random(ns, sizeof ns, errmsg), 0);
    cr_assert_eq(auth_random(mac, sizeof mac, errmsg), 0);
    /* The stranger claims to be node 1 (a real member). */
    fd = raw_connect(s.pb);
    (void)hello(fd, 1, 2, ns);
    auth_msg(m, 1, 2, mac);
    raw_send(fd, m, MSG_SIZE, fds, 2);
    expect_closed(fd, "random MAC");
    close(fd);
    run_for_ms(20);
    cr_expect_eq(count_fds(), before, "B closed the fds of the AUTH");
    close(fds[0]);
    close(fds[1]);
    scene_down(&s, 1);
}

Test(shm_auth, replayed_and_reflected_proofs_refused)
{
    struct scene s;
    uint8_t ns[32], mac[32], m[MSG_SIZE], ans[256];
    char errmsg[TERN_ERRMSG_SIZE];
    struct msg ch, w;
    int fds[2];
    int fd, nfds;

    scene_up(&s, 0, 0);
    cr_assert_eq(auth_random(ns, sizeof ns, errmsg), 0);
    /* Connection 1: genuine (the test holds the secret here only to
     * record what a real sender would send). */
    fds[0] = ctrl_memfd(1, 2);
    fds[1] = eventfd(0, EFD_CLOEXEC);
    fd = raw_connect(s.pb);
    ch = hello(fd, 1, 2, ns);
    proof(&secret_a, "tern shm sender", 1, 2, ns, ch.nonce, mac);
    auth_msg(m, 1, 2, mac);
    raw_send(fd, m, MSG_SIZE, fds, 2);
    cr_assert_eq(raw_recv(fd, ans, sizeof ans, &nfds), MSG_SIZE);
    decode(ans, &w);
    cr_expect_eq(w.type, T_WELCOME, "the genuine AUTH is welcomed");
    cr_expect_eq(nfds, 2, "ring memfd and eventfd");
    close(fd);
    run_for_ms(20);
    cr_assert_eq(refused(s.b), 0);

    /* Connection 2: the same HELLO, the recorded AUTH. B's nonce is new,
     * so the recorded proof does not verify. */
    fd = raw_connect(s.pb);
    (void)hello(fd, 1, 2, ns);
    raw_send(fd, m, MSG_SIZE, fds, 2);
    expect_closed(fd, "replayed AUTH");
    close(fd);

    /* Connection 3: B's own proof sent back as the AUTH. */
    fd = raw_connect(s.pb);
    ch = hello(fd, 1, 2, ns);
    auth_msg(m, 1, 2, ch.mac);
    raw_send(fd, m, MSG_SIZE, fds, 2);
    expect_closed(fd, "reflected CHALLENGE MAC");
    close(fd);

    /* Connection 4: a genuine proof, for another pair of ids. */
    fd = raw_connect(s.pb);
    ch = hello(fd, 1, 2, ns);
    proof(&secret_a, "tern shm sender", 3, 2, ns, ch.nonce, mac);
    auth_msg(m, 1, 2, mac);
    raw_send(fd, m, MSG_SIZE, fds, 2);
    expect_closed(fd, "proof for other ids");
    close(fd);
    close(fds[0]);
    close(fds[1]);

    /* The welcomed stranger of connection 1 wrote nothing: count 0. */
    run_for_ms(20);
    cr_expect_eq(s.sink.count, 0);
    cr_expect_eq(refused(s.b), 3);
    cr_expect_eq(send_and_wait(s.a, 2, s.pb, 77, 64), 0);
    run_until(&s.sink.count, 1);
    cr_expect_eq(s.sink.from, 1);
    close_and_wait(s.a);
    close_and_wait(s.b);
}

Test(shm_auth, fds_where_none_belong_refused)
{
    struct scene s;
    uint8_t ns[32] = {1}, m[MSG_SIZE];
    struct msg h = {2, T_HELLO, 1, 2, 0, {0}, {0}};
    int fds[6];
    int fd;
    int before;

    scene_up(&s, 0, 0);
    for (int i = 0; i < 6; i++) {
        fds[i] = eventfd(0, EFD_CLOEXEC);
        cr_assert_geq(fds[i], 0);
    }
    before = count_fds();
    memcpy(h.nonce, ns, 32);
    encode(m, &h);
    /* A HELLO with two fds. */
    fd = raw_connect(s.pb);
    raw_send(fd, m, MSG_SIZE, fds, 2);
    expect_closed(fd, "HELLO with fds");
    close(fd);
    /* A HELLO with six fds (more than B takes: MSG_CTRUNC). */
    fd = raw_connect(s.pb);
    raw_send(fd, m, MSG_SIZE, fds, 6);
    expect_closed(fd, "HELLO with six fds");
    close(fd);
    /* An AUTH with a correct-looking but forged proof and three fds. */
    fd = raw_connect(s.pb);
    (void)hello(fd, 1, 2, ns);
    auth_msg(m, 1, 2, ns);
    raw_send(fd, m, MSG_SIZE, fds, 3);
    expect_closed(fd, "AUTH with three fds");
    close(fd);
    /* A HELLO longer than any handshake message (MSG_TRUNC). */
    {
        uint8_t big[512] = {0};
        memcpy(big, m, MSG_SIZE);
        fd = raw_connect(s.pb);
        raw_send(fd, big, sizeof big, fds, 2);
        expect_closed(fd, "oversized HELLO");
        close(fd);
    }
    /* A HELLO for another receiver. */
    h.receiver = 3;
    encode(m, &h);
    fd = raw_connect(s.pb);
    raw_send(fd, m, MSG_SIZE, NULL, 0);
    expect_closed(fd, "HELLO for node 3");
    close(fd);
    run_for_ms(20);
    cr_expect_eq(count_fds(), before, "every fd B was sent is closed");
    for (int i = 0; i < 6; i++) {
        close(fds[i]);
    }
    scene_down(&s, 5);
}

Test(shm_auth, silent_stranger_closed_after_timeout)
{
    struct scene s;
    uint64_t t0;
    int fd;

    scene_up(&s, 300, 0);
    t0 = uv_hrtime();
    fd = raw_connect(s.pb);
    expect_closed(fd, "silent stranger");
    /* uv_now has millisecond steps: allow one. */
    cr_expect_geq(uv_hrtime() - t0, 299ull * 1000000u,
                  "not before the handshake timeout");
    close(fd);
    scene_down(&s, 1);
}

Test(shm_auth, pending_handshakes_bounded)
{
    struct scene s;
    int fd[3];

    scene_up(&s, 0, 2);
    for (int i = 0; i < 3; i++) {
        fd[i] = raw_connect(s.pb);
        run_for_ms(10);
    }
    /* The third closed the oldest. */
    expect_closed(fd[0], "evicted");
    cr_expect_eq(stats_of(s.b).evicted, 1);
    cr_expect_eq(stats_of(s.b).pending, 2);
    close(fd[1]);
    close(fd[2]);
    run_for_ms(20);
    /* A real peer still gets in (its accept evicts nothing now). */
    scene_down(&s, 1);
}

/* ---- a fake receiver: A must not hand its fds to it -------------------- */

Test(shm_auth, sender_refuses_unproven_receiver)
{
    char pa[108], pf[108];
    struct xport *a = make(1, &secret_a, pa);
    struct sockaddr_un sa;
    uint8_t m[256];
    struct msg h;
    struct sreq r;
    int lfd, fd, nfds;
    ssize_t n;

    (void)snprintf(pf, sizeof pf, "%s/fake.sock", dir);
    lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, pf, strlen(pf) + 1);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(lfd, 4), 0);
    cr_assert_eq(send_msg(a, &r, 2, pf, 1, 64, NULL), 0);
    fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    cr_assert_geq(fd, 0);
    n = raw_recv(fd, m, sizeof m, &nfds);
    cr_assert_eq(n, MSG_SIZE);
    cr_expect_eq(nfds, 0, "HELLO carries no fds");
    decode(m, &h);
    cr_expect_eq(h.type, T_HELLO);
    cr_expect_eq(h.version, 2);
    /* Answer with a random proof. */
    h.type = T_CHALLENGE;
    cr_assert_eq(auth_random(h.nonce, 32, NULL), 0);
    cr_assert_eq(auth_random(h.mac, 32, NULL), 0);
    encode(m, &h);
    raw_send(fd, m, MSG_SIZE, NULL, 0);
    expect_closed(fd, "the fake receiver");
    run_until(&r.done, 1);
    cr_expect_eq(r.status, TERN_ENOCONN);
    cr_expect_eq(refused(a), 1);
    close(fd);
    close(lfd);
    close_and_wait(a);
}
