/*
 * shm backend of the transport interface (xport_shm_new): the one-sided
 * ring protocol of rdma/ring.c over shared memory between processes on one
 * host. For development, CI and single-host clusters; the verbs backend
 * runs the same protocol over RDMA.
 *
 * Topology. Each node listens on a unix SOCK_SEQPACKET socket; its path is
 * the node's address. To send to a peer, a node connects once (lazily, on
 * the first send) and keeps the socket open only as a liveness signal and
 * for the handshake; messages never travel over it. For each connected
 * sender, the receiver creates one ring (a sealed memfd) that the sender
 * maps and writes directly; the sender creates one control file (a sealed
 * memfd) holding the credit word that the receiver writes. Each node has
 * ONE eventfd (its doorbell), watched by uv_poll on the node's loop: peers
 * ring it for new records and for credit returned to a waiting sender.
 * memfds instead of /dev/shm files: a killed process leaves nothing behind,
 * and every connection gets fresh, zeroed memory, so a restarted peer can
 * never see (or scribble on) the previous incarnation's ring.
 *
 * Trust. A ring is a door into the receiver's Raft: whoever may write it
 * can forge messages. So no memfd or eventfd crosses the socket before
 * both sides have proven they hold the cluster secret (auth.h: 32 bytes
 * every node of the cluster shares), by a mutual challenge-response. The
 * socket directory's permissions stay a second line, and the only line
 * against a relay: a process that can put its own socket at a node's path
 * (the node not running, the directory writable) can pass the proofs of
 * two real nodes between them. Without a secret (xport_shm_options.secret
 * NULL, the node's peer_auth = none) the proofs are zeros and nobody
 * checks them: any process that can connect gets a ring. Records are
 * always fully validated (rdma/ring.c).
 *
 * Handshake messages, version 2 (one SEQPACKET message each, 104 bytes,
 * integers little-endian):
 *
 *   offset size field
 *        0    4 magic     0x48534d54 (bytes "TMSH")
 *        4    2 version   2
 *        6    2 type      1 = HELLO, 2 = WELCOME, 3 = CHALLENGE, 4 = AUTH
 *        8    8 sender    node id S of the sending side of the ring
 *       16    8 receiver  node id R of the receiving side
 *       24    8 capacity  WELCOME: ring data bytes; others: 0
 *       32   32 nonce     HELLO: Ns; CHALLENGE: Nr; others: zeros
 *       64   32 mac       CHALLENGE: MAC_r; AUTH: MAC_s; others: zeros
 *       96    4 checksum  tern_checksum32 over bytes 0..95
 *      100    4 zero
 *
 * The exchange (S connects to R's socket; fds with SCM_RIGHTS):
 *
 *   1. S -> R  HELLO      S, R, Ns                  no fds
 *   2. R -> S  CHALLENGE  S, R, Nr, MAC_r           no fds
 *   3. S -> R  AUTH       S, R, MAC_s               fds: S's control memfd,
 *                                                   S's eventfd
 *   4. R -> S  WELCOME    S, R, capacity            fds: the ring memfd,
 *                                                   R's eventfd
 *
 *   MAC_r = auth_secret_mac(secret, "tern shm receiver", [S, R, Ns, Nr])
 *   MAC_s = auth_secret_mac(secret, "tern shm sender",   [S, R, Ns, Nr])
 *
 * with S and R as 8-byte little-endian parts and Ns, Nr 32 bytes from
 * auth_random, fresh for every connection (auth_secret_mac prefixes the
 * label and every part with its length). S checks MAC_r (auth_equal,
 * constant time) before it creates or passes anything; R checks MAC_s
 * before it creates the ring. Why it holds: a proof covers both nonces, so
 * an AUTH recorded on another connection fails against a fresh Nr (and a
 * CHALLENGE against a fresh Ns); the labels differ per direction, so R's
 * own MAC_r reflected back as an AUTH fails; the ids are in the
 * transcript, so a proof for one pair of nodes serves no other.
 *
 * Refusals. The side that sees any of these closes the socket, closes
 * every fd it received, delivers nothing and counts one auth_refused:
 * bad magic, version, checksum or size; a message other than the one the
 * step expects; ids other than the expected ones; a MAC that does not
 * verify; fds on HELLO or CHALLENGE, or not exactly two on AUTH or
 * WELCOME; a truncated message or fd list (MSG_TRUNC, MSG_CTRUNC: the
 * kernel already closed the fds that did not fit); an inbound handshake
 * not finished within handshake_timeout_ms. EOF during the handshake is
 * not counted (the other side refused, or left). At most max_pending
 * inbound connections may be in the handshake: one more closes the oldest
 * of them (counted as refused and as evicted), so strangers cannot hold
 * every slot for longer than it takes a real peer to finish.
 *
 * Shared files, version 1 (the first 4096 bytes of each memfd):
 *
 *   offset size field
 *        0    4 magic     0x46534d54 (bytes "TMSF")
 *        4    2 version   1
 *        6    2 kind      1 = ring (receiver's), 2 = control (sender's)
 *        8    8 capacity  ring data bytes (control: 0)
 *       16    8 sender    node ids, as in the handshake
 *       24    8 receiver
 *       32    4 checksum  tern_checksum32 over bytes 0..31
 *       64    8 ring: armed (1 = the receiver may sleep: the sender clears
 *                 it and writes the receiver's eventfd; 0 = awake, no
 *                 doorbell needed). control: credit (the receiver's
 *                 consumed ring position, see rdma/ring.c)
 *      128    8 ring: fence (receiver's current fence, informational)
 *     4096  cap ring: the ring data area (rdma/ring.c record format)
 * Files are sealed (no shrink/grow) before they are passed, and the
 * mapping side checks the seals and size, so a peer cannot make our
 * mapping fault.
 *
 * Doorbell suppression (futex-style): after draining, the receiver stores
 * armed = 1 (seq_cst) and re-checks every ring; the sender, after writing
 * records, exchanges armed with 0 (seq_cst) and writes the eventfd only if
 * it was 1. Either the sender sees armed, or the receiver sees the record.
 *
 * Busy-polling (xport_set_busy_poll, off by default): a send that
 * went straight into a ring arms a deadline and starts a uv_prepare
 * handle and marks the inbound rings awake (armed = 0: senders skip the
 * doorbell); when the loop is about to sleep, the handle spins on them
 * until a record lands or the deadline passes, delivers what landed (as a
 * doorbell would) and runs the usual arm-and-re-check before the loop
 * sleeps (also when the round is skipped: the rings were marked awake).
 * Adaptive back-off after consecutive empty rounds.
 *
 * Adaptive polling (xport_set_adaptive_poll, when busy-polling is off):
 * the same rounds, but only those the policy plans (rdma/adapt.c, from
 * the recent send->arrival gaps) and bounded by its cap. A round due at
 * once starts from the send as above; one due later (a follower waiting
 * for the next AppendEntries) is started by a timerfd wake-up
 * (xport_wake) at its start. An arrival (a ring found ready before
 * delivery) is recorded and cancels a pending wake-up.
 *
 * Peers, the send path, queues, delivery and fencing are the ring driver's
 * (rdma/ringx.c); this file is the medium: sockets, memfds, the doorbell
 * and busy-polling. Send path, happy case: connected, nothing queued, ring
 * space available: xport_send writes the record straight into the peer's
 * ring (the only copy), rings the doorbell if needed, and the caller's cb
 * fires with 0 from a uv_idle handle (never inside xport_send). Otherwise
 * the message is copied into the peer's bounded queue and written when
 * space or the connection arrives.
 * Failure modes:
 *   - connect fails (no such socket, refused), the receiver does not
 *     prove the secret, or no WELCOME within handshake_timeout_ms
 *     (default 2000): queued sends complete with TERN_ENOCONN; a
 *     back-off of connect_retry_ms follows during which sends complete with
 *     TERN_ENOCONN at once; the next send after it reconnects;
 *   - the peer dies or closes (EOF/HUP on the socket): queued sends
 *     complete with TERN_ENOCONN; the next send reconnects to a fresh ring.
 *     Records already written were "handed off" (cb 0) and are lost with
 *     the peer's memory. On the receiving side, EOF from a sender first
 *     drains what it wrote, then drops the ring;
 *   - a sender reconnects (restart): the receiver drains and drops the old
 *     ring before using the new one, so order per sender is kept;
 *   - queued bytes for a peer would exceed max_queued_bytes: the send
 *     completes with TERN_EBUSY (one message is always accepted when the
 *     queue is empty);
 *   - an invalid record (checksum, trailer, version) in an inbound ring:
 *     the ring is torn down (its sender sees EOF and reconnects);
 *   - the peer's ring is smaller than our max_message and a queued message
 *     does not fit it: that send completes with TERN_ETOOBIG;
 *   - xport_close: queued sends complete with TERN_ECANCELED (outcomes
 *     already decided keep theirs), then the close callback runs once every
 *     handle is closed.
 */
#include "adapt.h"
#include "ringx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <auth.h>
#include <tern_common.h>

#define SHM__DEFAULT_RING       ((size_t)8 << 20)
#define SHM__DEFAULT_MAX_QUEUED ((size_t)64 << 20)
#define SHM__DEFAULT_RETRY_MS   100u
#define SHM__DEFAULT_HS_MS      2000u /* handshake_timeout_ms */
#define SHM__DEFAULT_PENDING    32u   /* max_pending */
#define SHM__SWEEP_MS           250u
#define SHM__BACKLOG            128
#define SHM__PATH_MAX           108 /* sizeof(sun_path) */
#define SHM__FILE_HDR           4096u
#define SHM__MSG_MAGIC          0x48534d54u
#define SHM__FILE_MAGIC         0x46534d54u
#define SHM__MSG_VERSION        2u
#define SHM__FILE_VERSION       1u
#define SHM__MSG_SIZE           104u
#define SHM__MSG_HELLO          1u
#define SHM__MSG_WELCOME        2u
#define SHM__MSG_CHALLENGE      3u
#define SHM__MSG_AUTH           4u
#define SHM__NONCE              32u
#define SHM__FDS_MAX            3u /* 2 per message, 1 more to see too many */
#define SHM__LABEL_RECEIVER     "tern shm receiver"
#define SHM__LABEL_SENDER       "tern shm sender"
#define SHM__KIND_RING          1u
#define SHM__KIND_CTRL          2u
#define SHM__OFF_ARMED          64u
#define SHM__OFF_CREDIT         64u
#define SHM__OFF_FENCE          128u
#define SHM__DRAIN_BUDGET       1024u /* messages per ring per wake-up */
#define SHM__ACCEPT_BUDGET      64u
#define SHM__SPIN_MISS_LIMIT    8u  /* empty rounds before backing off */
#define SHM__SPIN_SKIP          64u /* sends without a round after that */

/* Where a connection is in the handshake (top of the file): the message
 * it waits for. */
enum shm_hs {
    SHM_HS_HELLO,     /* inbound, accepted */
    SHM_HS_AUTH,      /* inbound, CHALLENGE sent */
    SHM_HS_CHALLENGE, /* outbound, HELLO sent */
    SHM_HS_WELCOME,   /* outbound, AUTH sent */
    SHM_HS_DONE,
};

/* One unix-socket connection and the shared memory that goes with it.
 * Outbound (rc.peer != NULL): we send; ring_map is the peer's ring,
 * ctrl_map our control file. Inbound: we receive; ring_map is our ring,
 * ctrl_map the sender's control file. Freed (unmapped, fds closed) in
 * on_conn_closed, never synchronously, so a recv callback that closes the
 * transport cannot pull memory from under the drain loop. */
struct conn
{
    struct xport_ringx_conn rc; /* first member: state, peer, tx, rx */
    uv_poll_t poll;
    int sock;
    int remote_efd; /* the other side's doorbell, or -1 */
    uint8_t *ring_map;
    size_t ring_map_len;
    uint8_t *ctrl_map;
    size_t ctrl_map_len;
    size_t cap;
    enum shm_hs hs;
    int pending;            /* inbound, counted in x->pending */
    uint8_t ns[SHM__NONCE]; /* the sender's nonce */
    uint8_t nr[SHM__NONCE]; /* the receiver's nonce */
    uint64_t hs_sender;     /* inbound: ids of the HELLO */
    uint64_t hs_receiver;
};

/* The shm-only counters (the driver keeps the others). */
struct shm_counters
{
    uint64_t doorbells;
    uint64_t wakeups;
    uint64_t spins;
    uint64_t spin_hits;
    uint64_t spin_ns;
    uint64_t auth_refused;
    uint64_t evicted;
};

struct shm_xport
{
    struct xport_ringx r; /* first member: the driver (rdma/ringx.h) */
    char path[SHM__PATH_MAX];
    int lsock;
    int efd;
    uv_poll_t lpoll;
    uv_poll_t epoll;
    uv_prepare_t spin;
    unsigned spin_us;         /* busy-poll budget; 0 = off */
    uint64_t spin_until;      /* uv_hrtime deadline of the pending round */
    unsigned spin_misses;     /* consecutive empty rounds */
    unsigned spin_skip;       /* sends left without a round */
    struct xport_adapt adapt; /* adaptive poll policy (cap 0 = off) */
    struct xport_wake wake;   /* starts a planned round later */
    uint64_t wake_until;      /* that round's deadline; 0 = none pending */
    uint64_t wake_at;         /* when the pending wake-up is due */
    uv_timer_t sweep;
    struct shm_counters stats;
    int lpoll_ok, epoll_ok;
    struct auth_secret secret; /* wiped in shm_destroy */
    int has_secret;
    unsigned hs_timeout_ms;
    unsigned max_pending;
    unsigned pending; /* inbound connections in the handshake */
};

static const struct xport_ops shm_ops;

static struct shm_xport *shm_of(struct xport_ringx *r)
{
    return (struct shm_xport *)r;
}

static struct conn *conn_of(struct xport_ringx_conn *rc)
{
    return (struct conn *)rc;
}

/* Inbound connections that are up, in list order (NULL at the end). */
static struct conn *inbound_next(struct xport_ringx_conn *rc)
{
    for (; rc != NULL; rc = xport_ringx_conn_next(rc)) {
        if (rc->peer == NULL && rc->state == XPORT_RINGX_UP) {
            return conn_of(rc);
        }
    }
    return NULL;
}

static struct conn *inbound_first(struct shm_xport *x)
{
    return inbound_next(xport_ringx_conn_first(&x->r));
}

static struct conn *inbound_after(struct conn *c)
{
    return inbound_next(xport_ringx_conn_next(&c->rc));
}

/* ---- small helpers ----------------------------------------------------- */

static void efd_ring(int fd)
{
    uint64_t one = 1;
    /* EAGAIN means the counter is saturated: the wake-up is pending. */
    (void)!write(fd, &one, sizeof one);
}

static void put_le64_atomic(uint8_t *p, uint64_t v, int order)
{
    uint8_t b[8];
    uint64_t w;
    tern_put_u64(b, v);
    memcpy(&w, b, sizeof w);
    __atomic_store_n((uint64_t *)(void *)p, w, order);
}

static void file_hdr_encode(uint8_t *p,
                            unsigned kind,
                            size_t cap,
                            uint64_t sender,
                            uint64_t receiver)
{
    tern_put_u32(p, SHM__FILE_MAGIC);
    tern_put_u16(p + 4, SHM__FILE_VERSION);
    tern_put_u16(p + 6, (uint16_t)kind);
    tern_put_u64(p + 8, cap);
    tern_put_u64(p + 16, sender);
    tern_put_u64(p + 24, receiver);
    tern_put_u32(p + 32, tern_checksum32(p, 32));
}

static int file_hdr_check(const uint8_t *p,
                          unsigned kind,
                          size_t cap,
                          uint64_t sender,
                          uint64_t receiver)
{
    if (tern_get_u32(p) != SHM__FILE_MAGIC ||
        tern_get_u32(p + 32) != tern_checksum32(p, 32)) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u16(p + 4) != SHM__FILE_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u16(p + 6) != kind || tern_get_u64(p + 8) != cap ||
        tern_get_u64(p + 16) != sender || tern_get_u64(p + 24) != receiver) {
        return TERN_EMALFORMED;
    }
    return 0;
}

/* Create a sealed memfd of size bytes, mapped shared. Returns the fd (the
 * caller passes then closes it) or -errno; *map is the mapping. */
static int memfd_new(const char *name, size_t size, uint8_t **map /* OUT */)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *m;
    int rc;

    if (fd < 0) {
        return errno != 0 ? -errno : -EIO;
    }
    if (ftruncate(fd, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
            0) {
        rc = errno != 0 ? -errno : -EIO;
        close(fd);
        return rc;
    }
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rc = errno != 0 ? -errno : -EIO;
        close(fd);
        return rc;
    }
    *map = m;
    return fd;
}

/* Map a memfd received from a peer, after checking it cannot shrink under
 * us and holds at least size bytes. Returns 0 or a negative code. */
static int memfd_map_peer(int fd, size_t size, uint8_t **map /* OUT */)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    void *m;

    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        return TERN_EMALFORMED;
    }
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (size_t)st.st_size < size) {
        return TERN_EMALFORMED;
    }
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        return -errno;
    }
    *map = m;
    return 0;
}

/* A handshake message, decoded (layout at the top of the file). */
struct hs_msg
{
    unsigned type;
    uint64_t sender;
    uint64_t receiver;
    uint64_t cap;
    uint8_t nonce[SHM__NONCE];
    uint8_t mac[AUTH_MAC_SIZE];
};

static void msg_encode(uint8_t m[SHM__MSG_SIZE], const struct hs_msg *h)
{
    memset(m, 0, SHM__MSG_SIZE);
    tern_put_u32(m, SHM__MSG_MAGIC);
    tern_put_u16(m + 4, SHM__MSG_VERSION);
    tern_put_u16(m + 6, (uint16_t)h->type);
    tern_put_u64(m + 8, h->sender);
    tern_put_u64(m + 16, h->receiver);
    tern_put_u64(m + 24, h->cap);
    memcpy(m + 32, h->nonce, SHM__NONCE);
    memcpy(m + 64, h->mac, AUTH_MAC_SIZE);
    tern_put_u32(m + 96, tern_checksum32(m, 96));
}

/* Decode and check a handshake message of the given type. Returns 0,
 * TERN_EVERSION, or TERN_EMALFORMED (size, magic, checksum, type). */
static int msg_decode(const uint8_t *m,
                      size_t len,
                      unsigned type,
                      struct hs_msg *out /* OUT */)
{
    if (len != SHM__MSG_SIZE || tern_get_u32(m) != SHM__MSG_MAGIC) {
        return TERN_EMALFORMED;
    }
    if (tern_get_u16(m + 4) != SHM__MSG_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u32(m + 96) != tern_checksum32(m, 96) ||
        tern_get_u16(m + 6) != type || tern_get_u32(m + 100) != 0) {
        return TERN_EMALFORMED;
    }
    out->type = type;
    out->sender = tern_get_u64(m + 8);
    out->receiver = tern_get_u64(m + 16);
    out->cap = tern_get_u64(m + 24);
    memcpy(out->nonce, m + 32, SHM__NONCE);
    memcpy(out->mac, m + 64, AUTH_MAC_SIZE);
    return 0;
}

/* The proof of one side (label SHM__LABEL_*) over ids and both nonces:
 * zeros without a secret. Returns 0 or TERN_EINTERNAL. */
static int hs_mac(const struct shm_xport *x,
                  const char *label,
                  uint64_t sender,
                  uint64_t receiver,
                  const uint8_t ns[SHM__NONCE],
                  const uint8_t nr[SHM__NONCE],
                  uint8_t out[AUTH_MAC_SIZE])
{
    uint8_t ids[16];
    struct auth_iov parts[4];

    if (!x->has_secret) {
        memset(out, 0, AUTH_MAC_SIZE);
        return 0;
    }
    tern_put_u64(ids, sender);
    tern_put_u64(ids + 8, receiver);
    parts[0] = (struct auth_iov){ids, 8};
    parts[1] = (struct auth_iov){ids + 8, 8};
    parts[2] = (struct auth_iov){ns, SHM__NONCE};
    parts[3] = (struct auth_iov){nr, SHM__NONCE};
    return auth_secret_mac(&x->secret, label, parts, 4, out);
}

/* Check the other side's proof in constant time (nothing to check without
 * a secret). Returns 0, TERN_EAUTH, or TERN_EINTERNAL. */
static int hs_verify(const struct shm_xport *x,
                     const char *label,
                     uint64_t sender,
                     uint64_t receiver,
                     const uint8_t ns[SHM__NONCE],
                     const uint8_t nr[SHM__NONCE],
                     const uint8_t got[AUTH_MAC_SIZE])
{
    uint8_t want[AUTH_MAC_SIZE];
    int rc;

    if (!x->has_secret) {
        return 0;
    }
    rc = hs_mac(x, label, sender, receiver, ns, nr, want);
    if (rc == 0 && !auth_equal(want, got, AUTH_MAC_SIZE)) {
        rc = TERN_EAUTH;
    }
    auth_wipe(want, sizeof want);
    return rc;
}

/* Send a handshake message with nfds fds (0 or 2). Returns 0 or -errno. */
static int sock_send(int sock,
                     const uint8_t m[SHM__MSG_SIZE],
                     const int *fds,
                     unsigned nfds)
{
    union
    {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {(void *)m, SHM__MSG_SIZE};
    struct msghdr mh;
    struct cmsghdr *cm;

    memset(&u, 0, sizeof u);
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    }
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != (ssize_t)SHM__MSG_SIZE) {
        return errno != 0 ? -errno : -EIO;
    }
    return 0;
}

static void close_fds(int fds[2])
{
    for (int i = 0; i < 2; i++) {
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
}

/* Receive one message and its fds: fds[0..1] (-1 when absent; the caller
 * owns and must close the ones received), *nfds how many came. Every fd
 * of a message that is truncated (data or control) or carries more than
 * two is closed here. Returns the message length, 0 at EOF, -EAGAIN when
 * nothing is there, -EMSGSIZE (truncated, too many fds), or -errno. */
static ssize_t sock_recv(int sock,
                         uint8_t *m,
                         size_t cap,
                         int fds[2],
                         unsigned *nfds /* OUT */)
{
    union
    {
        char buf[CMSG_SPACE(SHM__FDS_MAX * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {m, cap};
    struct msghdr mh;
    int got[SHM__FDS_MAX];
    unsigned n_got = 0;
    ssize_t n;

    fds[0] = fds[1] = -1;
    *nfds = 0;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
        return -errno;
    }
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL;
         cm = CMSG_NXTHDR(&mh, cm)) {
        size_t k;
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
            cm->cmsg_len < CMSG_LEN(0)) {
            continue;
        }
        k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (n_got < SHM__FDS_MAX) {
                got[n_got++] = fd;
            } else {
                close(fd); /* n_got > 2 already: refused below */
            }
        }
    }
    if ((mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) != 0 || n_got > 2) {
        for (unsigned i = 0; i < n_got; i++) {
            close(got[i]);
        }
        return -EMSGSIZE;
    }
    for (unsigned i = 0; i < n_got; i++) {
        fds[i] = got[i];
    }
    *nfds = n_got;
    return n;
}

/* ---- ring ops over shared memory ---------------------------------------- */

static int op_write(void *ctx, size_t off, const void *src, size_t len)
{
    struct conn *c = ctx;
    uint8_t *dst = c->ring_map + SHM__FILE_HDR + off;

    /* Call order reaches the receiver through release stores: the ring
     * lands a record by writing its 8-byte seq word last, and that store
     * is a release, so every earlier copy of the record (payload, trailer,
     * header) happens before it for the receiver's acquire load of the
     * word. Every other store this backend publishes (credit word, armed
     * flag) is seq_cst, itself a release; a standalone fence after a plain
     * copy would order nothing more (and ThreadSanitizer does not model
     * fences). */
    if (len == 8 && off % 8 == 0) {
        uint64_t w;
        memcpy(&w, src, sizeof w);
        /* Release: every earlier write of the record is visible first. */
        __atomic_store_n((uint64_t *)(void *)dst, w, __ATOMIC_RELEASE);
    } else {
        memcpy(dst, src, len);
    }
    return 0;
}

static int op_doorbell(void *ctx)
{
    struct conn *c = ctx;
    uint64_t *armed = (uint64_t *)(void *)(c->ring_map + SHM__OFF_ARMED);

    if (__atomic_exchange_n(armed, 0, __ATOMIC_SEQ_CST) != 0) {
        efd_ring(c->remote_efd);
        shm_of(c->rc.x)->stats.doorbells++;
    }
    return 0;
}

static int op_write_credit(void *ctx, uint64_t consumed, int wake)
{
    struct conn *c = ctx;

    put_le64_atomic(c->ctrl_map + SHM__OFF_CREDIT, consumed, __ATOMIC_SEQ_CST);
    if (wake) {
        efd_ring(c->remote_efd);
        shm_of(c->rc.x)->stats.doorbells++;
    }
    return 0;
}

static const struct xport_ring_ops shm_ring_ops = {
    .write = op_write,
    .doorbell = op_doorbell,
    .write_credit = op_write_credit,
};

/* ---- connections ------------------------------------------------------- */

static void on_lpoll_closed(uv_handle_t *h)
{
    struct shm_xport *x = h->data;
    close(x->lsock);
    x->lsock = -1;
    xport_ringx_handle_closed(h);
}

static void on_epoll_closed(uv_handle_t *h)
{
    struct shm_xport *x = h->data;
    close(x->efd);
    x->efd = -1;
    xport_ringx_handle_closed(h);
}

static void conn_release(struct conn *c)
{
    if (c->ring_map != NULL) {
        munmap(c->ring_map, c->ring_map_len);
    }
    if (c->ctrl_map != NULL) {
        munmap(c->ctrl_map, c->ctrl_map_len);
    }
    if (c->remote_efd >= 0) {
        close(c->remote_efd);
    }
    if (c->sock >= 0) {
        close(c->sock);
    }
    tern_free(c);
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct xport_ringx *x = c->rc.x;

    xport_ringx_conn_unlink(&c->rc);
    conn_release(c);
    x->handles--;
    xport_ringx_maybe_finish(x);
}

/* An inbound connection leaves the handshake (up or closing). */
static void pending_done(struct conn *c)
{
    if (c->pending) {
        c->pending = 0;
        shm_of(c->rc.x)->pending--;
    }
}

/* Close a connection (idempotent). Outbound: the peer's queued messages
 * complete with status. */
static void conn_close(struct xport_ringx_conn *rc, int status)
{
    struct conn *c = conn_of(rc);

    if (rc->state == XPORT_RINGX_CLOSING) {
        return;
    }
    pending_done(c);
    rc->state = XPORT_RINGX_CLOSING;
    (void)xport_ringx_conn_detach(rc, status);
    uv_close((uv_handle_t *)&c->poll, on_conn_closed);
}

static void on_conn_poll(uv_poll_t *h, int status, int events);

/* Allocate a conn around sock (taken over, also on failure), link it and
 * start watching it. Returns NULL on failure. */
static struct conn *conn_new(struct shm_xport *x,
                             struct xport_ringx_peer *p,
                             int sock)
{
    struct conn *c = tern_calloc(1, sizeof *c);

    if (c == NULL) {
        close(sock);
        return NULL;
    }
    c->sock = sock;
    c->remote_efd = -1;
    c->hs = p == NULL ? SHM_HS_HELLO : SHM_HS_CHALLENGE;
    if (uv_poll_init(x->r.loop, &c->poll, sock) != 0) {
        conn_release(c); /* no handle was registered */
        return NULL;
    }
    xport_ringx_conn_init(&x->r, &c->rc, p);
    c->poll.data = c;
    x->r.handles++;
    if (p == NULL) {
        c->pending = 1;
        x->pending++;
    }
    if (uv_poll_start(&c->poll, UV_READABLE | UV_DISCONNECT, on_conn_poll) !=
        0) {
        conn_close(&c->rc, TERN_ENOCONN);
        return NULL;
    }
    return c;
}

/* ---- receiving --------------------------------------------------------- */

static int rings_ready(struct shm_xport *x)
{
    for (struct conn *c = inbound_first(x); c != NULL; c = inbound_after(c)) {
        if (xport_ring_rx_ready(&c->rc.rx)) {
            return 1;
        }
    }
    return 0;
}

/* Deliver what every inbound ring holds, write what waits for credit,
 * then ask senders for a doorbell and re-check before the loop sleeps. */
static void receive_all(struct shm_xport *x)
{
    int again = 0;

    /* Before delivery, which may send the answer: the arrival closes the
     * adaptive poll's gap (adapt.h) and a pending wake-up is moot. */
    if (x->adapt.cap_ns != 0 && x->r.started && rings_ready(x)) {
        xport_adapt_received(&x->adapt, uv_hrtime());
        x->wake_until = 0;
        xport_wake_cancel(&x->wake);
    }

    for (struct conn *c = inbound_first(x); c != NULL && !x->r.closing;
         c = inbound_after(c)) {
        again |= xport_ringx_drain(&c->rc, SHM__DRAIN_BUDGET);
    }
    for (struct xport_peer *bp = x->r.peers; bp != NULL && !x->r.closing;
         bp = bp->next) {
        struct xport_ringx_peer *p = (struct xport_ringx_peer *)bp;
        if (p->q.head != NULL) {
            xport_ringx_flush(p);
        }
    }
    if (x->r.closing) {
        return;
    }
    /* About to sleep: ask senders for a doorbell, then re-check. */
    for (struct conn *c = inbound_first(x); c != NULL; c = inbound_after(c)) {
        put_le64_atomic(c->ring_map + SHM__OFF_ARMED, 1, __ATOMIC_SEQ_CST);
    }
    for (struct conn *c = inbound_first(x); c != NULL && !again;
         c = inbound_after(c)) {
        again = xport_ring_rx_ready(&c->rc.rx);
    }
    if (again) {
        efd_ring(x->efd);
    }
}

/* Our doorbell: new records in some inbound ring, or credit for a waiting
 * sender. */
static void on_efd(uv_poll_t *h, int status, int events)
{
    struct shm_xport *x = h->data;
    uint64_t v;

    (void)status;
    (void)events;
    (void)!read(x->efd, &v, sizeof v);
    x->stats.wakeups++;
    receive_all(x);
}

/* One busy-poll round (see the top of the file), right before the loop
 * would sleep. */
static void on_spin(uv_prepare_t *h)
{
    struct shm_xport *x = h->data;
    uint64_t start = uv_hrtime(), now = start;
    int hit;

    uv_prepare_stop(&x->spin);
    if (x->r.closing) {
        return;
    }
    if ((x->spin_us != 0 || x->adapt.cap_ns != 0) && now < x->spin_until) {
        x->stats.spins++;
        while (!(hit = rings_ready(x)) && now < x->spin_until) {
            __builtin_ia32_pause();
            now = uv_hrtime();
        }
        x->stats.spin_ns += now - start;
        if (hit) {
            x->stats.spin_hits++;
            x->spin_misses = 0;
        } else if (x->spin_us != 0 &&
                   ++x->spin_misses >= SHM__SPIN_MISS_LIMIT) {
            x->spin_misses = 0;
            x->spin_skip = SHM__SPIN_SKIP;
        }
    }
    /* Always: spin_arm marked the rings awake, so deliver and re-arm
     * (and re-check) before the loop may sleep. */
    receive_all(x);
}

int xport_shm_set_busy_poll(struct xport *base, unsigned us)
{
    struct shm_xport *x = (struct shm_xport *)base;
    if (base == NULL || base->ops != &shm_ops) {
        return TERN_EINVAL;
    }
    /* A pending round still runs (without spinning when us is 0): it
     * re-arms the rings spin_arm marked awake. */
    x->spin_us = us;
    x->spin_misses = 0;
    x->spin_skip = 0;
    return 0;
}

int xport_shm_set_adaptive_poll(struct xport *base, unsigned us)
{
    struct shm_xport *x = (struct shm_xport *)base;
    if (base == NULL || base->ops != &shm_ops) {
        return TERN_EINVAL;
    }
    xport_adapt_init(&x->adapt, us);
    x->wake_until = 0;
    xport_wake_cancel(&x->wake);
    return 0;
}

/* Start a round that spins until the uv_hrtime deadline until. */
static void round_start(struct shm_xport *x, uint64_t until)
{
    x->spin_until = until;
    /* Awake from now on: an answer faster than the loop's way to the
     * round rings no doorbell either. on_spin re-arms. */
    for (struct conn *c = inbound_first(x); c != NULL; c = inbound_after(c)) {
        put_le64_atomic(c->ring_map + SHM__OFF_ARMED, 0, __ATOMIC_SEQ_CST);
    }
    uv_prepare_start(&x->spin, on_spin);
}

/* A planned round is due (xport_wake). */
static void on_wake(uv_poll_t *h, int status, int events)
{
    struct shm_xport *x = h->data;
    uint64_t until = x->wake_until, now = uv_hrtime();

    (void)status;
    (void)events;
    xport_wake_fired(&x->wake);
    x->wake_until = 0;
    if (until != 0) {
        xport_adapt_woke(&x->adapt, x->wake_at, now);
    }
    if (!x->r.closing && until != 0 && now < until) {
        round_start(x, until);
    }
}

/* A send went into a ring: arm a busy-poll round if enabled, else the
 * round the adaptive poll plans, if any. */
static void spin_arm(struct xport_ringx *r)
{
    struct shm_xport *x = shm_of(r);

    if (x->spin_us == 0) {
        uint64_t until =
            xport_adapt_arm(&x->adapt, &x->wake, &x->wake_until, &x->wake_at);
        if (until != 0) {
            round_start(x, until);
        }
        return;
    }
    if (x->spin_skip > 0) {
        x->spin_skip--;
        return;
    }
    round_start(x, uv_hrtime() + (uint64_t)x->spin_us * 1000u);
}

/* ---- the handshake (top of the file) ---------------------------------- */

/* A failure the other side caused (counted as a refusal), as opposed to
 * a local one (memory, memfd) or the other side leaving. */
static int peer_fault(int rc)
{
    return rc == TERN_EAUTH || rc == TERN_EMALFORMED || rc == TERN_EVERSION ||
           rc == TERN_ECORRUPT || rc == -EMSGSIZE;
}

/* Inbound, step 1: HELLO (no fds). Answer CHALLENGE. */
static int inbound_hello(struct conn *c,
                         const uint8_t *m,
                         ssize_t n,
                         unsigned nfds)
{
    struct shm_xport *x = shm_of(c->rc.x);
    char errmsg[TERN_ERRMSG_SIZE];
    uint8_t out[SHM__MSG_SIZE];
    struct hs_msg h;
    int rc;

    rc = msg_decode(m, (size_t)n, SHM__MSG_HELLO, &h);
    if (rc != 0) {
        return rc;
    }
    if (nfds != 0 || h.receiver != x->r.base.self_id || h.cap != 0) {
        return TERN_EMALFORMED;
    }
    c->hs_sender = h.sender;
    c->hs_receiver = h.receiver;
    memcpy(c->ns, h.nonce, SHM__NONCE);
    rc = auth_random(c->nr, SHM__NONCE, errmsg);
    if (rc != 0) {
        return rc;
    }
    memset(&h, 0, sizeof h);
    h.type = SHM__MSG_CHALLENGE;
    h.sender = c->hs_sender;
    h.receiver = c->hs_receiver;
    memcpy(h.nonce, c->nr, SHM__NONCE);
    rc = hs_mac(x, SHM__LABEL_RECEIVER, h.sender, h.receiver, c->ns, c->nr,
                h.mac);
    if (rc != 0) {
        return rc;
    }
    msg_encode(out, &h);
    rc = sock_send(c->sock, out, NULL, 0);
    if (rc != 0) {
        return rc;
    }
    c->hs = SHM_HS_AUTH;
    return 0;
}

/* Inbound, step 3: AUTH with the sender's control memfd and eventfd. Once
 * its proof verifies, set up the ring and answer WELCOME with it. */
static int inbound_auth(struct conn *c,
                        const uint8_t *m,
                        ssize_t n,
                        int fds[2],
                        unsigned nfds)
{
    struct shm_xport *x = shm_of(c->rc.x);
    uint8_t welcome[SHM__MSG_SIZE];
    struct hs_msg h;
    uint64_t sender = c->hs_sender;
    char name[64];
    int out_fds[2];
    int ring_fd;
    int rc;

    rc = msg_decode(m, (size_t)n, SHM__MSG_AUTH, &h);
    if (rc != 0) {
        return rc;
    }
    if (nfds != 2 || h.sender != sender || h.receiver != c->hs_receiver ||
        h.cap != 0) {
        return TERN_EMALFORMED;
    }
    rc = hs_verify(x, SHM__LABEL_SENDER, sender, c->hs_receiver, c->ns, c->nr,
                   h.mac);
    if (rc != 0) {
        return rc;
    }
    /* The sender is proven: from here on it is a cluster peer. */
    rc = memfd_map_peer(fds[0], SHM__FILE_HDR, &c->ctrl_map);
    if (rc != 0) {
        return rc;
    }
    c->ctrl_map_len = SHM__FILE_HDR;
    rc = file_hdr_check(c->ctrl_map, SHM__KIND_CTRL, 0, sender,
                        x->r.base.self_id);
    if (rc != 0) {
        return rc;
    }
    c->remote_efd = fds[1];
    fds[1] = -1;
    c->rc.remote_id = sender;
    c->cap = x->r.ring_bytes;
    (void)snprintf(name, sizeof name, "tern-ring-%llu-from-%llu",
                   (unsigned long long)x->r.base.self_id,
                   (unsigned long long)sender);
    ring_fd = memfd_new(name, SHM__FILE_HDR + c->cap, &c->ring_map);
    if (ring_fd < 0) {
        return ring_fd;
    }
    c->ring_map_len = SHM__FILE_HDR + c->cap;
    file_hdr_encode(c->ring_map, SHM__KIND_RING, c->cap, sender,
                    x->r.base.self_id);
    put_le64_atomic(c->ring_map + SHM__OFF_FENCE, x->r.fence, __ATOMIC_RELAXED);
    put_le64_atomic(c->ring_map + SHM__OFF_ARMED, 1, __ATOMIC_SEQ_CST);
    xport_ring_rx_init(&c->rc.rx, &shm_ring_ops, c, c->ring_map + SHM__FILE_HDR,
                       c->cap);
    c->rc.rx.fence = x->r.fence;
    memset(&h, 0, sizeof h);
    h.type = SHM__MSG_WELCOME;
    h.sender = sender;
    h.receiver = x->r.base.self_id;
    h.cap = c->cap;
    msg_encode(welcome, &h);
    out_fds[0] = ring_fd;
    out_fds[1] = x->efd;
    rc = sock_send(c->sock, welcome, out_fds, 2);
    close(ring_fd);
    if (rc != 0) {
        return rc;
    }
    c->hs = SHM_HS_DONE;
    pending_done(c);
    c->rc.rx_ready = 1;
    c->rc.state = XPORT_RINGX_UP;
    xport_ringx_supersede(&x->r, sender, &c->rc);
    return 0;
}

/* Outbound, step 2: CHALLENGE (no fds). Once the receiver's proof
 * verifies, create the control file and answer AUTH with it and our
 * eventfd. */
static int outbound_challenge(struct conn *c,
                              const uint8_t *m,
                              ssize_t n,
                              unsigned nfds)
{
    struct shm_xport *x = shm_of(c->rc.x);
    uint64_t self = x->r.base.self_id;
    uint64_t peer = c->rc.peer->base.id;
    uint8_t auth[SHM__MSG_SIZE];
    struct hs_msg h;
    char name[64];
    int out_fds[2];
    int ctrl_fd;
    int rc;

    rc = msg_decode(m, (size_t)n, SHM__MSG_CHALLENGE, &h);
    if (rc != 0) {
        return rc;
    }
    if (nfds != 0 || h.sender != self || h.receiver != peer || h.cap != 0) {
        return TERN_EMALFORMED;
    }
    memcpy(c->nr, h.nonce, SHM__NONCE);
    rc = hs_verify(x, SHM__LABEL_RECEIVER, self, peer, c->ns, c->nr, h.mac);
    if (rc != 0) {
        return rc;
    }
    (void)snprintf(name, sizeof name, "tern-ctrl-%llu-to-%llu",
                   (unsigned long long)self, (unsigned long long)peer);
    ctrl_fd = memfd_new(name, SHM__FILE_HDR, &c->ctrl_map);
    if (ctrl_fd < 0) {
        return ctrl_fd;
    }
    c->ctrl_map_len = SHM__FILE_HDR;
    file_hdr_encode(c->ctrl_map, SHM__KIND_CTRL, 0, self, peer);
    memset(&h, 0, sizeof h);
    h.type = SHM__MSG_AUTH;
    h.sender = self;
    h.receiver = peer;
    rc = hs_mac(x, SHM__LABEL_SENDER, self, peer, c->ns, c->nr, h.mac);
    if (rc == 0) {
        msg_encode(auth, &h);
        out_fds[0] = ctrl_fd;
        out_fds[1] = x->efd;
        rc = sock_send(c->sock, auth, out_fds, 2);
    }
    close(ctrl_fd);
    if (rc != 0) {
        return rc;
    }
    c->hs = SHM_HS_WELCOME;
    return 0;
}

/* Outbound, step 4: WELCOME with the ring memfd and the receiver's
 * eventfd. Map the ring; start sending. */
static int outbound_welcome(struct conn *c,
                            const uint8_t *m,
                            ssize_t n,
                            int fds[2],
                            unsigned nfds)
{
    struct xport_ringx *x = c->rc.x;
    struct hs_msg h;
    size_t cap;
    int rc;

    rc = msg_decode(m, (size_t)n, SHM__MSG_WELCOME, &h);
    if (rc != 0) {
        return rc;
    }
    if (h.sender != x->base.self_id || h.receiver != c->rc.peer->base.id ||
        h.cap > XPORT_RING_MAX_CAP || !xport_ring_cap_valid((size_t)h.cap) ||
        nfds != 2) {
        return TERN_EMALFORMED;
    }
    cap = (size_t)h.cap;
    rc = memfd_map_peer(fds[0], SHM__FILE_HDR + cap, &c->ring_map);
    if (rc != 0) {
        return rc;
    }
    c->ring_map_len = SHM__FILE_HDR + cap;
    rc = file_hdr_check(c->ring_map, SHM__KIND_RING, cap, h.sender, h.receiver);
    if (rc != 0) {
        return rc;
    }
    c->remote_efd = fds[1];
    fds[1] = -1;
    c->rc.remote_id = h.receiver;
    c->cap = cap;
    xport_ring_tx_init(
        &c->rc.tx, &shm_ring_ops, c, cap,
        (const uint64_t *)(void *)(c->ctrl_map + SHM__OFF_CREDIT));
    c->rc.tx.epoch = x->epoch;
    c->hs = SHM_HS_DONE;
    c->rc.state = XPORT_RINGX_UP;
    return 0;
}

/* One handshake message for c, by the step it is at. */
static int handshake_step(struct conn *c,
                          const uint8_t *m,
                          ssize_t n,
                          int fds[2],
                          unsigned nfds)
{
    switch (c->hs) {
    case SHM_HS_HELLO:
        return inbound_hello(c, m, n, nfds);
    case SHM_HS_AUTH:
        return inbound_auth(c, m, n, fds, nfds);
    case SHM_HS_CHALLENGE:
        return outbound_challenge(c, m, n, nfds);
    case SHM_HS_WELCOME:
        return outbound_welcome(c, m, n, fds, nfds);
    case SHM_HS_DONE:
        break;
    }
    return TERN_EMALFORMED; /* not reached: UP connections read no more */
}

static void on_conn_poll(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;
    struct xport_ringx *x = c->rc.x;
    uint8_t m[SHM__MSG_SIZE + 8];
    unsigned nfds;
    int fds[2];
    ssize_t n;
    int rc;

    if (c->rc.state == XPORT_RINGX_CLOSING) {
        return;
    }
    if (status < 0) {
        goto fail;
    }
    n = sock_recv(c->sock, m, sizeof m, fds, &nfds);
    if (n == -EAGAIN && !(events & UV_DISCONNECT)) {
        return;
    }
    if (n <= 0 || c->rc.state == XPORT_RINGX_UP) {
        /* EOF, error, or bytes after the handshake (never sent). */
        close_fds(fds);
        if (n == -EMSGSIZE && c->rc.state == XPORT_RINGX_CONNECTING) {
            shm_of(x)->stats.auth_refused++;
        }
        goto fail;
    }
    rc = handshake_step(c, m, n, fds, nfds);
    close_fds(fds);
    if (rc != 0) {
        if (peer_fault(rc)) {
            shm_of(x)->stats.auth_refused++;
        }
        goto fail;
    }
    if (c->rc.peer != NULL && c->rc.state == XPORT_RINGX_UP) {
        xport_ringx_flush(c->rc.peer);
    }
    return;

fail:
    if (c->rc.peer == NULL && c->rc.state == XPORT_RINGX_UP) {
        /* The sender is gone: deliver what it wrote, then drop the ring. */
        while (xport_ringx_drain(&c->rc, SHM__DRAIN_BUDGET)) {
        }
    } else if (c->rc.peer != NULL && c->rc.state == XPORT_RINGX_CONNECTING) {
        c->rc.peer->base.retry_after = uv_now(x->loop) + x->retry_ms;
    }
    xport_ringx_peer_down(&c->rc); /* after what it wrote was delivered */
    conn_close(&c->rc, TERN_ENOCONN);
}

/* ---- accepting and connecting ------------------------------------------ */

static void on_sweep(uv_timer_t *t);

static void sweep_start(struct shm_xport *x)
{
    if (!uv_is_active((uv_handle_t *)&x->sweep)) {
        uv_timer_start(&x->sweep, on_sweep, SHM__SWEEP_MS, SHM__SWEEP_MS);
    }
}

/* max_pending inbound connections are in the handshake: close the oldest
 * (the list is in creation order). */
static void evict_oldest_pending(struct shm_xport *x)
{
    for (struct xport_ringx_conn *rc = xport_ringx_conn_first(&x->r);
         rc != NULL; rc = xport_ringx_conn_next(rc)) {
        if (conn_of(rc)->pending && rc->state == XPORT_RINGX_CONNECTING) {
            x->stats.auth_refused++;
            x->stats.evicted++;
            conn_close(rc, TERN_ENOCONN);
            return;
        }
    }
}

static void on_listen(uv_poll_t *h, int status, int events)
{
    struct shm_xport *x = h->data;

    (void)events;
    if (status < 0 || x->r.closing) {
        return;
    }
    for (unsigned i = 0; i < SHM__ACCEPT_BUDGET; i++) {
        int s = accept4(x->lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s < 0) {
            return; /* EAGAIN, or an error on one pending connection */
        }
        if (x->pending >= x->max_pending) {
            evict_oldest_pending(x);
        }
        /* NULL: out of memory, that connection is dropped. */
        if (conn_new(x, NULL, s) != NULL) {
            sweep_start(x);
        }
    }
}

/* Every SHM__SWEEP_MS while a handshake is under way: close the ones that
 * took longer than handshake_timeout_ms. */
static void on_sweep(uv_timer_t *t)
{
    struct shm_xport *x = t->data;
    uint64_t now = uv_now(x->r.loop);
    struct xport_ringx_conn *next;
    int pending = 0;

    for (struct xport_ringx_conn *c = xport_ringx_conn_first(&x->r); c != NULL;
         c = next) {
        next = xport_ringx_conn_next(c);
        if (c->state != XPORT_RINGX_CONNECTING) {
            continue;
        }
        if (now - c->started < x->hs_timeout_ms) {
            pending = 1;
            continue;
        }
        if (c->peer != NULL) {
            c->peer->base.retry_after = now + x->r.retry_ms;
        } else {
            x->stats.auth_refused++; /* a stranger that says nothing */
        }
        conn_close(c, TERN_ENOCONN);
    }
    if (!pending) {
        uv_timer_stop(&x->sweep);
    }
}

/* Connect to p and send HELLO. Returns 0 or a negative code. */
static int peer_connect(struct xport_ringx_peer *p)
{
    struct shm_xport *x = shm_of(p->x);
    char errmsg[TERN_ERRMSG_SIZE];
    struct sockaddr_un sa;
    uint8_t hello[SHM__MSG_SIZE];
    struct hs_msg h;
    struct conn *c;
    int sock;
    int rc;

    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, p->base.address, strlen(p->base.address) + 1);
    sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sock < 0) {
        return -errno;
    }
    if (connect(sock, (struct sockaddr *)&sa, sizeof sa) != 0) {
        rc = -errno;
        close(sock);
        return rc;
    }
    c = conn_new(x, p, sock);
    if (c == NULL) {
        return -ENOMEM;
    }
    rc = auth_random(c->ns, SHM__NONCE, errmsg);
    if (rc == 0) {
        memset(&h, 0, sizeof h);
        h.type = SHM__MSG_HELLO;
        h.sender = x->r.base.self_id;
        h.receiver = p->base.id;
        memcpy(h.nonce, c->ns, SHM__NONCE);
        msg_encode(hello, &h);
        rc = sock_send(sock, hello, NULL, 0);
    }
    if (rc != 0) {
        conn_close(&c->rc, TERN_ENOCONN);
        return rc;
    }
    p->conn = &c->rc;
    sweep_start(x);
    return 0;
}

/* The send's completion is decided once its bytes are in the ring. */
static void tx_written(struct xport_ringx_conn *c, struct xport_send *req)
{
    xport_done_push(&c->x->done, req, 0);
}

/* The fence is also published in the ring file (informational). */
static void fence_ring(struct xport_ringx_conn *c, uint64_t fence)
{
    put_le64_atomic(conn_of(c)->ring_map + SHM__OFF_FENCE, fence,
                    __ATOMIC_RELEASE);
}

/* Right before the transport is freed: the secret leaves no copy. */
static void shm_destroy(struct xport_ringx *r)
{
    struct shm_xport *x = shm_of(r);
    auth_wipe(&x->secret, sizeof x->secret);
}

static const struct xport_ringx_medium shm_medium = {
    .connect = peer_connect,
    .conn_close = conn_close,
    .tx_written = tx_written,
    .sent = spin_arm,
    .fence = fence_ring,
    .destroy = shm_destroy,
};

/* ---- lifecycle --------------------------------------------------------- */

static int shm_start(struct xport *base)
{
    struct shm_xport *x = (struct shm_xport *)base;
    int rc;

    if (x->r.closing) {
        return TERN_ESHUTDOWN;
    }
    if (x->r.started) {
        return 0;
    }
    rc = uv_poll_start(&x->lpoll, UV_READABLE, on_listen);
    if (rc != 0) {
        return rc;
    }
    x->r.started = 1;
    return 0;
}

static void shm_close(struct xport *base)
{
    struct shm_xport *x = (struct shm_xport *)base;

    if (x->r.closing) {
        return;
    }
    x->r.closing = 1;
    if (x->path[0] != '\0') {
        (void)unlink(x->path);
    }
    if (x->lpoll_ok) {
        uv_close((uv_handle_t *)&x->lpoll, on_lpoll_closed);
    } else {
        close(x->lsock);
    }
    if (x->epoll_ok) {
        uv_close((uv_handle_t *)&x->epoll, on_epoll_closed);
    } else {
        close(x->efd);
    }
    uv_close((uv_handle_t *)&x->sweep, xport_ringx_handle_closed);
    uv_close((uv_handle_t *)&x->spin, xport_ringx_handle_closed);
    if (x->wake.fd >= 0) {
        xport_wake_close(&x->wake, xport_ringx_handle_closed);
    }
    xport_ringx_cancel(&x->r);
    xport_ringx_maybe_finish(&x->r);
}

static void shm_get_stats(const struct xport *base, struct xport_stats *out)
{
    struct xport_shm_stats s;

    if (xport_shm_stats(base, &s) != 0) {
        return; /* not reached: the ops table is this backend's */
    }
    out->doorbells = s.doorbells;
    out->wakeups = s.wakeups;
    out->spins = s.spins;
    out->spin_hits = s.spin_hits;
    out->spin_ns = s.spin_ns;
    out->credit_waits = s.credit_waits;
    out->fenced = s.fenced;
    out->corrupt = s.corrupt;
    out->auth_refused = s.auth_refused;
}

static const struct xport_ops shm_ops = {
    .name = "shm",
    .start = shm_start,
    .send = xport_ringx_send,
    .max_message = xport_ringx_max_message,
    .close = shm_close,
    .set_epoch = xport_ringx_set_epoch,
    .set_fence = xport_ringx_set_fence,
    .set_busy_poll = xport_shm_set_busy_poll,
    .set_adaptive_poll = xport_shm_set_adaptive_poll,
    .get_stats = shm_get_stats,
};

/* Bind and listen on path, replacing a stale socket file (one nobody
 * accepts on). Returns the socket or a negative code. */
static int listen_socket(const char *path)
{
    struct sockaddr_un sa;
    int fd;
    int rc;

    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int probe;
        if (errno != EADDRINUSE) {
            rc = -errno;
            goto err;
        }
        /* Someone accepting there? Then the address is taken. */
        probe =
            socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (probe < 0) {
            rc = -errno;
            goto err;
        }
        rc = connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0 ||
                     errno == EAGAIN
                 ? -EADDRINUSE
                 : 0;
        close(probe);
        if (rc != 0) {
            goto err;
        }
        (void)unlink(path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            rc = -errno;
            goto err;
        }
    }
    if (listen(fd, SHM__BACKLOG) != 0) {
        rc = -errno;
        (void)unlink(path);
        goto err;
    }
    return fd;

err:
    close(fd);
    return rc;
}

int xport_shm_new(uv_loop_t *loop,
                  uint64_t self_id,
                  const char *listen_path,
                  const struct xport_shm_options *opts,
                  struct xport **out,
                  char *errmsg)
{
    struct shm_xport *x;
    size_t ring = SHM__DEFAULT_RING;
    size_t max_queued = SHM__DEFAULT_MAX_QUEUED;
    unsigned retry_ms = SHM__DEFAULT_RETRY_MS;
    unsigned hs_ms = SHM__DEFAULT_HS_MS;
    unsigned max_pending = SHM__DEFAULT_PENDING;
    int lsock, efd;
    int rc;

    if (opts != NULL) {
        ring = opts->ring_bytes ? opts->ring_bytes : ring;
        max_queued =
            opts->max_queued_bytes ? opts->max_queued_bytes : max_queued;
        retry_ms = opts->connect_retry_ms ? opts->connect_retry_ms : retry_ms;
        hs_ms = opts->handshake_timeout_ms ? opts->handshake_timeout_ms : hs_ms;
        max_pending = opts->max_pending ? opts->max_pending : max_pending;
    }
    if (!xport_ring_cap_valid(ring)) {
        tern_errmsg_printf(errmsg,
                           "shm: ring_bytes %zu is not a power of two in "
                           "[%u, %zu]",
                           ring, XPORT_RING_MIN_CAP, XPORT_RING_MAX_CAP);
        return TERN_EINVAL;
    }
    if (loop == NULL || out == NULL || listen_path == NULL ||
        listen_path[0] == '\0' || strlen(listen_path) >= SHM__PATH_MAX) {
        tern_errmsg_printf(errmsg, "shm: bad listen path '%s'",
                           listen_path ? listen_path : "(null)");
        return TERN_EINVAL;
    }
    lsock = listen_socket(listen_path);
    if (lsock < 0) {
        rc = lsock;
        tern_errmsg_printf(errmsg, "shm: listen on %s: %s", listen_path,
                           tern_strerror(rc));
        goto err;
    }
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "shm: eventfd: %s", tern_strerror(rc));
        goto err_after_socket;
    }
    x = tern_calloc(1, sizeof *x);
    if (x == NULL) {
        rc = -ENOMEM;
        tern_errmsg_printf(errmsg, "shm: out of memory");
        goto err_after_efd;
    }
    x->r.base.ops = &shm_ops;
    x->r.base.self_id = self_id;
    xport_ringx_init(&x->r, loop, &shm_medium);
    x->r.ring_bytes = ring;
    x->r.max_queued = max_queued;
    x->r.retry_ms = retry_ms;
    x->r.addr_max = SHM__PATH_MAX;
    x->r.drain_budget = SHM__DRAIN_BUDGET;
    memcpy(x->path, listen_path, strlen(listen_path) + 1);
    x->lsock = lsock;
    x->efd = efd;
    x->hs_timeout_ms = hs_ms;
    x->max_pending = max_pending;
    if (opts != NULL && opts->secret != NULL) {
        x->secret = *opts->secret;
        x->has_secret = 1;
    }
    /* Always 0: no syscall. */
    (void)uv_prepare_init(loop, &x->spin);
    x->spin.data = x;
    (void)uv_timer_init(loop, &x->sweep);
    x->sweep.data = x;
    x->r.handles = 2; /* sweep, spin */
    if (xport_wake_init(&x->wake, loop, x, on_wake) == 0) {
        x->r.handles++; /* else no planned round starts later */
    }
    /* A failed uv_poll_init leaves no trace in the loop; from here on
     * failures unwind through shm_close (asynchronously, no callback). */
    rc = uv_poll_init(loop, &x->lpoll, lsock);
    if (rc == 0) {
        x->lpoll.data = x;
        x->lpoll_ok = 1;
        x->r.handles++;
        rc = uv_poll_init(loop, &x->epoll, efd);
    }
    if (rc == 0) {
        x->epoll.data = x;
        x->epoll_ok = 1;
        x->r.handles++;
        rc = uv_poll_start(&x->epoll, UV_READABLE, on_efd);
    }
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "shm: poll: %s", tern_strerror(rc));
        shm_close(&x->r.base);
        return rc;
    }
    *out = &x->r.base;
    return 0;

err_after_efd:
    close(efd);
err_after_socket:
    close(lsock);
    (void)unlink(listen_path);
err:
    return rc;
}

/* ---- shm-specific controls --------------------------------------------- */

int xport_shm_set_epoch(struct xport *base, uint64_t epoch)
{
    if (base == NULL || base->ops != &shm_ops) {
        return TERN_EINVAL;
    }
    return xport_ringx_set_epoch(base, epoch);
}

int xport_shm_set_fence(struct xport *base, uint64_t fence)
{
    if (base == NULL || base->ops != &shm_ops) {
        return TERN_EINVAL;
    }
    return xport_ringx_set_fence(base, fence);
}

int xport_shm_stats(const struct xport *base, struct xport_shm_stats *out)
{
    const struct shm_xport *x = (const struct shm_xport *)base;

    if (base == NULL || base->ops != &shm_ops || out == NULL) {
        return TERN_EINVAL;
    }
    memset(out, 0, sizeof *out);
    out->fenced = x->r.stats.fenced;
    out->credit_waits = x->r.stats.credit_waits;
    out->corrupt = x->r.stats.corrupt;
    out->doorbells = x->stats.doorbells;
    out->wakeups = x->stats.wakeups;
    out->spins = x->stats.spins;
    out->spin_hits = x->stats.spin_hits;
    out->spin_ns = x->stats.spin_ns;
    out->auth_refused = x->stats.auth_refused;
    out->evicted = x->stats.evicted;
    out->pending = x->pending;
    return 0;
}
