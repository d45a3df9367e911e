/*
 * TCP backend of the transport interface (xport_tcp_new): libuv TCP streams
 * on IPv4. Each node listens on its bind address; to send to a peer it opens
 * ONE outbound connection (lazily, on the first send) and uses it only for
 * sending; accepted (inbound) connections are used only for receiving.
 *
 * Wire format, versions 1 and 2 (encoded/decoded in rdma/tcp_frame.c, be
 * careful when adapting: nodes of different builds talk to each other). All
 * integers little-endian. A connection carries a sequence of frames; with
 * TLS on (below) the frames run inside a TLS 1.3 stream, byte for byte
 * the same as the plaintext ones, and nothing else is sent in the clear:
 *
 *   offset size field
 *        0    2 magic     0x5854 (bytes 'T' 'X')
 *        2    1 version   1, or 2: the same frame with the checksum below
 *                         computed by XXH3 instead (tern_checksum32_xxh3,
 *                         seed "tern"), about ten times cheaper per byte
 *        3    1 type      1 = HELLO, 2 = MSG
 *        4    4 length    payload bytes (MSG: <= receiver's max_message;
 *                         HELLO: exactly 16)
 *        8    8 seq       position of the frame on this connection:
 *                         HELLO is 0, then 1, 2, 3, ... with no gaps
 *       16    4 checksum  version 1: tern_checksum32 (XXH32, seed "tern")
 *                         over bytes 0..15 of the header followed by the
 *                         payload; version 2: tern_checksum32_xxh3 of the
 *                         same bytes
 *       20    - payload
 *
 *   HELLO payload: u64 sender node id, u64 receiver node id (the id the
 *   sender believes it is connecting to).
 *
 * Protocol. The connecting side writes HELLO, then one MSG frame per
 * xport_send, in order. The accepting side never writes. The receiver
 * checks, frame by frame: magic, version, type, length (before buffering
 * the payload, so an oversized length costs nothing), seq, checksum; the
 * first frame must be a HELLO naming this node as receiver, every later one
 * a MSG. Any violation closes that connection (transports do not log); the
 * sender notices EOF, fails its in-flight sends with TERN_ENOCONN and
 * reconnects on its next send. A new HELLO from a sender closes any older
 * inbound connection from the same sender id, so frames from one sender are
 * delivered from one connection at a time (in order, or lost).
 *
 * Versions. A receiver takes both versions, frame by frame. A sender
 * writes HELLO as version 1 and a MSG as version 2 only when the caller
 * says the peer decodes it (XPORT_SEND_XXH3 in the send's flags: raft/
 * learns that from the peer's own Raft frames, raft/codec.c), since a
 * build that knows only version 1 closes the connection on a version 2
 * frame.
 *
 * TLS (xport_tcp_options.tls_server/tls_client; auth/tls.c sessions over
 * memory buffers). The connecting side is the TLS client: it presents its
 * node certificate and requires the server's to chain to the cluster CA
 * with CN "node-<id it dialed>"; frames queued by xport_send wait until
 * the handshake completes, then HELLO and they are encrypted in order.
 * The accepting side is the TLS server: it requires a client certificate
 * from the cluster CA with CN "node-<id>", and the HELLO's sender id must
 * be that id (and its receiver id this node). Any failure (handshake,
 * certificate, CN, a HELLO naming another id, plaintext bytes where TLS
 * is expected, an alert) closes the connection before anything it
 * carried is delivered and counts it in auth_refused (xport_get_stats).
 * The server never sends application data; the client treats any as a
 * violation. Bounds: an inbound connection that has not finished TLS and
 * HELLO within handshake_timeout_ms is closed (counted when TLS is on),
 * at most max_pending_inbound inbound connections may be in that state
 * (more are closed on accept), and an outbound one whose handshake has
 * not finished handshake_timeout_ms after connecting is closed like a
 * failed connect. A session buffers at most AUTH_TLS_BUF (64 KiB) of
 * ciphertext each way; a message being sent is held twice (the frame,
 * then its ciphertext) only while it is encrypted, then as ciphertext.
 *
 * Send path, happy case: xport_send encodes header + payload into one owned
 * buffer (the only copy), hands it to uv_write (libuv queues writes made
 * while the connection is still being established), and the caller's cb
 * fires from the write callback with 0.
 * Failure modes:
 *   - connect fails, or has not succeeded within TCP__CONNECT_TIMEOUT_MS:
 *     libuv cancels the queued writes when we close the handle; each cb
 *     gets TERN_ENOCONN; the peer enters a back-off of connect_retry_ms
 *     during which sends complete with TERN_ENOCONN without touching the
 *     network; the next send after it reconnects (lazily: nothing
 *     reconnects without a send);
 *   - an established connection breaks (EOF, reset, write error): same, but
 *     the next send reconnects at once; EOF or a reset read on it is
 *     also reported as the peer-down signal (xport_set_peer_down);
 *   - per-peer bytes handed to libuv and not yet completed would exceed
 *     max_queued_bytes: the send completes with TERN_EBUSY (a single message
 *     is always accepted when nothing is queued);
 *   - the peer's address changed: the old connection is closed (its sends
 *     fail with TERN_ENOCONN) and the new address is used;
 *   - a peer host dies silently: TCP_USER_TIMEOUT and keepalive (see the
 *     constants below) reset the connection; then as above;
 *   - TLS refused (either side): the connection closes, auth_refused
 *     grows; an outbound one backs off for connect_retry_ms like a failed
 *     connect, and its queued sends complete with TERN_ENOCONN;
 *   - xport_close: in-flight sends complete with TERN_ECANCELED (sends
 *     whose outcome was already decided, e.g. TERN_EBUSY, keep it), then
 *     the close callback runs once every handle is closed.
 * Busy-polling (xport_set_busy_poll, off by default): a send that was
 * handed to libuv starts a uv_idle handle for up to us microseconds (or
 * extends its deadline); while it runs the loop polls without sleeping, and
 * the first frame received stops it. It removes the wake-up of an idle
 * thread from the round trip at the cost of a CPU while it spins.
 * xport_get_stats counts the rounds (spins) and the rounds a message
 * ended (spin_hits); tcp's only other counter is auth_refused.
 * Adaptive polling (xport_set_adaptive_poll, when busy-polling is off):
 * the same rounds, only those the policy plans (rdma/adapt.c), bounded by
 * its cap; a round due later is started by a timerfd wake-up
 * (xport_wake). A received message is recorded before it is delivered
 * and cancels a pending wake-up.
 * Completions decided inside xport_send (EBUSY, ENOCONN during back-off)
 * are queued on a list drained by a uv_idle handle, so no callback ever
 * runs inside xport_send.
 *
 * SIGPIPE: libuv writes with write(2)/writev(2), not send(MSG_NOSIGNAL), and
 * does not ignore SIGPIPE; the process (ternd, tests) must ignore it.
 */
#include "adapt.h"
#include "sendq.h"
#include "tcp_frame.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <auth.h>
#include <tern_common.h>

#define TCP__DEFAULT_MAX_MESSAGE ((size_t)256 << 20)
#define TCP__DEFAULT_MAX_QUEUED  ((size_t)64 << 20)
#define TCP__DEFAULT_RETRY_MS    100u
#define TCP__BACKLOG             128
#define TCP__RBUF_CHUNK          ((size_t)64 << 10)
#define TCP__RBUF_MIN_FREE       ((size_t)4 << 10)
#define TCP__RBUF_KEEP           ((size_t)256 << 10)
/* Dead-peer detection: an outbound connect gives up after
 * TCP__CONNECT_TIMEOUT_MS (checked every TCP__SWEEP_MS); on established
 * connections, unacknowledged data older than TCP__USER_TIMEOUT_MS
 * (TCP_USER_TIMEOUT) or failed keepalive probes after TCP__KEEPALIVE_S of
 * silence reset the connection.
 * Both are short on purpose: a link that drops packets for a while (a
 * partition, a switch failing over) leaves an established connection
 * waiting for TCP's retransmission timer, which doubles from 200 ms: after
 * a 7 s outage the next retransmission came up to 5 s after the heal, and
 * the node on the far side stayed cut off that long (seen in the Jepsen
 * partition runs: a new election waited 0.9 s for a vote behind such a
 * connection). Giving up on the connection after 1 s of unacknowledged
 * data, and on a connect after 500 ms, bounds the wait after a heal by
 * the connect timeout plus connect_retry_ms; on loopback and a LAN a
 * connect or an acknowledgement takes well under a millisecond. */
#define TCP__CONNECT_TIMEOUT_MS 500u
#define TCP__SWEEP_MS           50u
#define TCP__USER_TIMEOUT_MS    1000u
#define TCP__KEEPALIVE_S        5u
/* Defaults of the handshake bounds (xport_tcp_options). */
#define TCP__HANDSHAKE_TIMEOUT_MS 5000u
#define TCP__MAX_PENDING_INBOUND  64u

#define TCP__CONTAINER(ptr, type, member)                                      \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

enum conn_state {
    CONN_CONNECTING, /* outbound, connect in progress */
    CONN_UP,         /* reading (inbound) or writable (outbound) */
    CONN_CLOSING,    /* uv_close called; freed in its close callback */
};

struct tcp_xport;
struct peer;

/* One TCP stream. Outbound: owned by its peer (peer->conn) until closing.
 * Inbound: linked in tcp_xport.inbound. Freed in on_conn_closed. */
struct conn
{
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t hello_req;
    uint8_t hello[XPORT_TCP_FRAME_HDR + XPORT_TCP_HELLO_LEN];
    struct tcp_xport *x;
    struct peer *peer;        /* outbound: the peer; inbound: NULL */
    struct conn *prev, *next; /* inbound list */
    enum conn_state state;
    uint8_t *rbuf; /* receive buffer, rlen bytes used of rcap */
    size_t rlen, rcap;
    size_t rneed;           /* size of the frame being assembled, once known */
    uint64_t seq;           /* outbound: next seq to send; inbound: expected */
    uint64_t connect_start; /* outbound: uv_now() when connect began */
    int hello_seen;         /* inbound: HELLO received */
    uint64_t from_id;       /* inbound: sender id from HELLO */
    uint64_t accepted_at;   /* inbound: uv_now() at accept */
    int pending;            /* inbound: counted in x->pending_inbound */
    /* TLS (NULL/0 in plaintext) */
    struct auth_tls *tls;
    int tls_ready;        /* handshake done (outbound: HELLO sent) */
    uint8_t *cin;         /* ciphertext receive buffer, TCP__RBUF_CHUNK */
    uint64_t cert_id;     /* inbound: node id of the client cert's CN */
    struct out_msg *pend; /* outbound: frames waiting for the handshake */
    struct out_msg **pend_tail;
};

/* A destination node. Lives until the transport is freed. base.retry_after:
 * uv_now() before which no connect is tried. */
struct peer
{
    struct xport_peer base; /* first member: id, address, retry_after */
    struct tcp_xport *x;
    struct sockaddr_in addr;
    struct conn *conn;   /* outbound connection or NULL */
    size_t queued_bytes; /* frames handed to libuv, write cb not yet run */
};

/* One message in flight: the owned copy of the frame and its write req. */
struct out_msg
{
    uv_write_t wr;
    struct xport_send *req;
    struct peer *peer;
    struct conn *conn;
    struct out_msg *next; /* TLS: on conn->pend until the handshake ends */
    uint8_t *cipher;      /* TLS: the frame's ciphertext (owned), which
                           * replaces frame[] once encrypted */
    size_t cipher_len;
    size_t size; /* the frame's size (what queued_bytes counts) */
    uint8_t frame[];
};

/* A write of TLS output that belongs to no message: handshake flights,
 * alerts, the encrypted HELLO. */
struct raw_write
{
    uv_write_t wr;
    struct conn *conn;
    uint8_t data[];
};

struct tcp_xport
{
    struct xport base; /* first member: the interface's handle */
    uv_loop_t *loop;
    size_t max_message;
    size_t max_queued;
    unsigned retry_ms;
    uv_tcp_t listener;
    uv_idle_t idle;           /* drains the deferred-completion list */
    struct xport_spin spin;   /* busy-poll (xport_int.h) */
    struct xport_adapt adapt; /* adaptive poll policy (cap 0 = off) */
    struct xport_wake wake;   /* starts a planned round later */
    uint64_t wake_until;      /* that round's deadline; 0 = none pending */
    uint64_t wake_at;         /* when the pending wake-up is due */
    uint64_t spins;           /* busy-poll rounds started */
    uint64_t spin_hits;       /* rounds ended by an arriving message */
    uv_timer_t sweep; /* connect timeouts; runs while a connect is pending */
    struct xport_peer *peers; /* of struct peer */
    struct conn *inbound;     /* head of the inbound list */
    struct xport_done done;   /* deferred completions, drained by idle */
    unsigned handles; /* open handles besides idle: listener, sweep, conns */
    struct auth_tls_ctx *tls_server; /* borrowed; NULL: plaintext */
    struct auth_tls_ctx *tls_client; /* borrowed */
    unsigned hs_timeout_ms;          /* handshake_timeout_ms */
    unsigned max_pending;            /* max_pending_inbound */
    unsigned pending_inbound;        /* inbound conns before their HELLO */
    uint64_t auth_refused;
    char last_refusal[XPORT_REFUSAL_MAX]; /* why, for the node's log */
    int started;
    int closing;
    int idle_closing;
};

static struct peer *peer_first(struct tcp_xport *x)
{
    return (struct peer *)x->peers;
}

static struct peer *peer_next(struct peer *p)
{
    return (struct peer *)p->base.next;
}

/* ---- deferred completions ---------------------------------------------- */

static void maybe_finish(struct tcp_xport *x);

static void on_idle(uv_idle_t *h)
{
    struct tcp_xport *x = h->data;

    if (xport_done_drain(&x->done)) {
        maybe_finish(x);
    }
}

/* ---- busy-poll ---------------------------------------------------------- */

static const struct xport_ops tcp_ops;

/* While a round runs the loop polls with a zero timeout, so a frame
 * that lands is read without the wake-up of a sleeping thread. */
static void on_spin(uv_idle_t *h)
{
    struct tcp_xport *x = h->data;
    if (xport_spin_expired(&x->spin)) {
        xport_spin_stop(&x->spin);
    }
}

/* Start (or move the deadline of) a round ending at until. */
static void round_start(struct tcp_xport *x, uint64_t until)
{
    if (!x->spin.on) {
        x->spins++;
    }
    xport_spin_until(&x->spin, until);
}

/* A planned round is due (xport_wake). */
static void on_wake(uv_poll_t *h, int status, int events)
{
    struct tcp_xport *x = h->data;
    uint64_t until = x->wake_until, now = uv_hrtime();

    (void)status;
    (void)events;
    xport_wake_fired(&x->wake);
    x->wake_until = 0;
    if (until != 0) {
        xport_adapt_woke(&x->adapt, x->wake_at, now);
    }
    if (!x->closing && until != 0 && now < until) {
        round_start(x, until);
    }
}

/* A send was handed to libuv: a busy-poll round if enabled, else the
 * round the adaptive poll plans, if any. */
static void spin_arm(struct tcp_xport *x)
{
    uint64_t until;

    if (x->closing) {
        return;
    }
    if (x->spin.us != 0) {
        if (!x->spin.on) {
            x->spins++;
        }
        xport_spin_arm(&x->spin);
        return;
    }
    until = xport_adapt_arm(&x->adapt, &x->wake, &x->wake_until, &x->wake_at);
    if (until != 0) {
        round_start(x, until);
    }
}

int xport_tcp_set_adaptive_poll(struct xport *base, unsigned us)
{
    struct tcp_xport *x = (struct tcp_xport *)base;
    if (base == NULL || base->ops != &tcp_ops) {
        return TERN_EINVAL;
    }
    xport_adapt_init(&x->adapt, us);
    x->wake_until = 0;
    xport_wake_cancel(&x->wake);
    return 0;
}

int xport_tcp_set_busy_poll(struct xport *base, unsigned us)
{
    struct tcp_xport *x = (struct tcp_xport *)base;
    if (base == NULL || base->ops != &tcp_ops) {
        return TERN_EINVAL;
    }
    xport_spin_set(&x->spin, us);
    return 0;
}

/* ---- connections ------------------------------------------------------- */

static void tcp_free(struct xport *base)
{
    struct tcp_xport *x = (struct tcp_xport *)base;
    xport_peers_free(&x->peers);
    tern_free(x);
}

static void on_idle_closed(uv_handle_t *h)
{
    struct tcp_xport *x = h->data;
    xport__closed(&x->base, tcp_free);
}

/* Once closing and nothing is left open or pending, close the idle handle;
 * its close callback frees the transport. */
static void maybe_finish(struct tcp_xport *x)
{
    if (!x->closing || x->idle_closing || x->handles > 0 ||
        !xport_done_empty(&x->done)) {
        return;
    }
    x->idle_closing = 1;
    uv_close((uv_handle_t *)&x->idle, on_idle_closed);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct tcp_xport *x = h->data;
    x->handles--;
    maybe_finish(x);
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct tcp_xport *x = c->x;

    if (c->peer == NULL) {
        if (c->prev != NULL) {
            c->prev->next = c->next;
        } else {
            x->inbound = c->next;
        }
        if (c->next != NULL) {
            c->next->prev = c->prev;
        }
    }
    auth_tls_free(c->tls);
    tern_free(c->cin);
    tern_free(c->rbuf);
    tern_free(c);
    x->handles--;
    maybe_finish(x);
}

/* Close a connection (idempotent). Writes still queued on it complete with
 * an error through on_write before on_conn_closed runs; frames still
 * waiting for the TLS handshake complete through the deferred list. */
static void conn_close(struct conn *c)
{
    struct tcp_xport *x = c->x;

    if (c->state == CONN_CLOSING) {
        return;
    }
    c->state = CONN_CLOSING;
    if (c->peer != NULL && c->peer->conn == c) {
        c->peer->conn = NULL;
    }
    if (c->pending) {
        c->pending = 0;
        x->pending_inbound--;
    }
    while (c->pend != NULL) {
        struct out_msg *m = c->pend;
        c->pend = m->next;
        m->peer->queued_bytes -= m->size;
        xport_done_push(&x->done, m->req,
                        x->closing ? TERN_ECANCELED : TERN_ENOCONN);
        tern_free(m);
    }
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Close a connection whose other side failed to prove cluster membership
 * (TLS handshake, certificate, CN, HELLO ids): nothing it sent was
 * delivered. An outbound one backs off like a failed connect. */
static void conn_refuse(struct conn *c, const char *why)
{
    if (c->state == CONN_CLOSING) {
        return;
    }
    c->x->auth_refused++;
    (void)snprintf(c->x->last_refusal, sizeof(c->x->last_refusal),
                   "%s%.48s: %.90s",
                   c->peer != NULL ? "outbound to " : "inbound",
                   c->peer != NULL ? c->peer->base.address : "",
                   why != NULL ? why : "refused");
    if (c->peer != NULL) {
        c->peer->base.retry_after = uv_now(c->x->loop) + c->x->retry_ms;
    }
    conn_close(c);
}

/* Allocate and init a conn and its handle. Returns NULL on ENOMEM. */
static struct conn *conn_new(struct tcp_xport *x, struct peer *p)
{
    struct conn *c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        return NULL;
    }
    c->x = x;
    c->peer = p;
    c->rneed = XPORT_TCP_FRAME_HDR;
    c->pend_tail = &c->pend;
    /* No socket is created yet (AF_UNSPEC), and a failed init leaves no
     * trace in the loop, so the plain free is safe. */
    if (uv_tcp_init(x->loop, &c->tcp) != 0) {
        tern_free(c);
        return NULL;
    }
    c->tcp.data = c;
    x->handles++;
    return c;
}

/* Make room for the next read into rbuf. Returns 0 or -ENOMEM. */
static int rbuf_reserve(struct conn *c)
{
    if (c->rcap - c->rlen < TCP__RBUF_MIN_FREE || c->rcap < c->rneed) {
        /* rlen < rneed <= XPORT_TCP_FRAME_HDR + max_message here, so the
         * buffer never exceeds one maximal frame plus one chunk. */
        size_t cap = TERN_MAX(c->rlen + TCP__RBUF_CHUNK, c->rneed);
        uint8_t *p = tern_realloc(c->rbuf, cap);
        if (p == NULL) {
            return -ENOMEM;
        }
        c->rbuf = p;
        c->rcap = cap;
    }
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;

    (void)suggested;
    buf->base = NULL;
    buf->len = 0; /* on failure libuv reports UV_ENOBUFS: we close */
    if (c->tls != NULL) {
        /* Ciphertext: decrypted into rbuf by on_read. */
        if (c->cin == NULL) {
            c->cin = tern_malloc(TCP__RBUF_CHUNK);
        }
        if (c->cin != NULL) {
            buf->base = (char *)c->cin;
            buf->len = TCP__RBUF_CHUNK;
        }
        return;
    }
    if (rbuf_reserve(c) == 0) {
        buf->base = (char *)c->rbuf + c->rlen;
        buf->len = c->rcap - c->rlen;
    }
}

/* Hand every byte of TLS output pending on c to the socket. Returns 0 or
 * a negative code (the caller closes c). */
static void on_raw_written(uv_write_t *wr, int status)
{
    struct raw_write *w = TCP__CONTAINER(wr, struct raw_write, wr);
    struct conn *c = w->conn;

    tern_free(w);
    if (status < 0) {
        conn_close(c);
    }
}

static int conn_flush(struct conn *c)
{
    size_t n = auth_tls_pending(c->tls);
    struct raw_write *w;
    uv_buf_t b;
    int rc;

    if (n == 0) {
        return 0;
    }
    w = tern_malloc(sizeof *w + n);
    if (w == NULL) {
        return -ENOMEM;
    }
    w->conn = c;
    b.base = (char *)w->data;
    b.len = auth_tls_take(c->tls, w->data, n);
    rc = uv_write(&w->wr, (uv_stream_t *)&c->tcp, &b, 1, on_raw_written);
    if (rc != 0) {
        tern_free(w);
    }
    return rc;
}

/* Encrypt len bytes at p on c's session into a new owned buffer
 * (*out, *out_len). Returns 0 or a negative code. */
static int tls_seal(struct conn *c,
                    const uint8_t *p,
                    size_t len,
                    uint8_t **out,
                    size_t *out_len)
{
    /* TLS 1.3 adds 22 bytes per record of at most 16 KiB. */
    size_t cap = len + (len / 16384 + 1) * 32 + 64;
    size_t off = 0, olen = 0;
    uint8_t *buf = tern_malloc(cap);
    int rc = 0;

    if (buf == NULL) {
        return -ENOMEM;
    }
    while (off < len || auth_tls_pending(c->tls) > 0) {
        size_t used = 0, n, took;
        if (off < len) {
            rc = auth_tls_write(c->tls, p + off, len - off, &used);
            if (rc != 0) {
                goto err;
            }
            off += used;
        }
        n = auth_tls_pending(c->tls);
        if (olen + n > cap) {
            uint8_t *q = tern_realloc(buf, olen + n);
            if (q == NULL) {
                rc = -ENOMEM;
                goto err;
            }
            buf = q;
            cap = olen + n;
        }
        took = auth_tls_take(c->tls, buf + olen, n);
        olen += took;
        if (used == 0 && took == 0) {
            rc = TERN_EINTERNAL; /* no progress: never loop forever */
            goto err;
        }
    }
    *out = buf;
    *out_len = olen;
    return 0;

err:
    tern_free(buf);
    return rc;
}

/* A HELLO from sender supersedes its older inbound connections. */
static void close_older_inbound(struct tcp_xport *x, struct conn *keep)
{
    for (struct conn *c = x->inbound; c != NULL; c = c->next) {
        if (c != keep && c->hello_seen && c->from_id == keep->from_id) {
            conn_close(c);
        }
    }
}

/* Handle one validated frame on an inbound connection. Returns 0, -1 if
 * the frame breaks the protocol, -2 if the sender is not who its
 * certificate says (TLS). */
static int inbound_frame(struct conn *c, const struct xport_tcp_frame *f)
{
    struct tcp_xport *x = c->x;
    uint64_t sender, receiver;

    if (f->seq != c->seq) {
        return -1;
    }
    c->seq++;
    if (!c->hello_seen) {
        if (f->type != XPORT_TCP_FRAME_HELLO) {
            return -1;
        }
        xport_tcp_hello_decode(f->payload, &sender, &receiver);
        if (c->tls != NULL &&
            (sender != c->cert_id || receiver != x->base.self_id)) {
            return -2;
        }
        if (receiver != x->base.self_id) {
            return -1;
        }
        c->hello_seen = 1;
        c->from_id = sender;
        if (c->pending) {
            c->pending = 0;
            x->pending_inbound--;
        }
        close_older_inbound(x, c);
        return 0;
    }
    if (f->type != XPORT_TCP_FRAME_MSG) {
        return -1;
    }
    if (x->spin.on) {
        x->spin_hits++;
    }
    xport_spin_stop(&x->spin); /* what the round waited for has come */
    if (x->adapt.cap_ns != 0) {
        /* Before delivery, which may send the answer (adapt.h). */
        xport_adapt_received(&x->adapt, uv_hrtime());
        x->wake_until = 0;
        xport_wake_cancel(&x->wake);
    }
    if (x->base.recv_cb != NULL) {
        x->base.recv_cb(x->base.recv_arg, c->from_id, f->payload, f->len);
    }
    return 0;
}

/* Decode and handle every whole frame in rbuf. Returns 0, or -1 when c
 * was closed (by a violation, or by the recv callback closing the
 * transport). */
static int process_frames(struct conn *c)
{
    size_t off = 0;

    /* The recv callback may close the transport: re-check the state. */
    while (c->state != CONN_CLOSING) {
        struct xport_tcp_frame f;
        int rc = xport_tcp_frame_decode(c->rbuf + off, c->rlen - off,
                                        c->x->max_message, &f);
        if (rc < 0) {
            if (c->tls != NULL && !c->hello_seen) {
                conn_refuse(c, "a malformed frame before HELLO");
            } else {
                conn_close(c);
            }
            return -1;
        }
        if (rc == 0) {
            c->rneed = f.size;
            break;
        }
        rc = inbound_frame(c, &f);
        if (rc == -2 || (rc != 0 && c->tls != NULL && !c->hello_seen)) {
            conn_refuse(c, "HELLO refused (its id is not the certificate's)");
            return -1;
        }
        if (rc != 0) {
            conn_close(c);
            return -1;
        }
        off += f.size;
    }
    if (c->state == CONN_CLOSING) {
        return -1;
    }
    if (off > 0) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    if (c->rlen == 0 && c->rcap > TCP__RBUF_KEEP) {
        tern_free(c->rbuf);
        c->rbuf = NULL;
        c->rcap = 0;
    }
    return 0;
}

/* "node-<id>" -> id (decimal, no sign, no leading zero, > 0). */
static int parse_node_cn(const char *cn, uint64_t *id)
{
    uint64_t v = 0;
    const char *p = cn + 5;

    if (strncmp(cn, "node-", 5) != 0 || *p < '1' || *p > '9') {
        return -1;
    }
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10) {
            return -1;
        }
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *id = v;
    return 0;
}

static void out_msg_start(struct out_msg *m);

/* The handshake of c just completed. Inbound: learn the client's node id
 * from its certificate. Outbound: send HELLO, then the frames that waited.
 * Returns 0, or -1 when c was closed. */
static int tls_established(struct conn *c)
{
    char cn[64];
    uint8_t *ct = NULL;
    size_t ct_len = 0;

    if (c->peer == NULL) {
        if (auth_tls_peer_cn(c->tls, cn, sizeof cn) != 0 ||
            parse_node_cn(cn, &c->cert_id) != 0) {
            conn_refuse(c, "the certificate's CN is not node-<id>");
            return -1;
        }
        c->tls_ready = 1;
        return 0;
    }
    /* The HELLO goes first, as the first bytes of the stream. */
    if (tls_seal(c, c->hello, sizeof c->hello, &ct, &ct_len) != 0) {
        conn_close(c);
        return -1;
    }
    {
        struct raw_write *w = tern_malloc(sizeof *w + ct_len);
        uv_buf_t b;
        if (w == NULL) {
            tern_free(ct);
            conn_close(c);
            return -1;
        }
        w->conn = c;
        memcpy(w->data, ct, ct_len);
        tern_free(ct);
        b.base = (char *)w->data;
        b.len = ct_len;
        if (uv_write(&w->wr, (uv_stream_t *)&c->tcp, &b, 1, on_raw_written) !=
            0) {
            tern_free(w);
            conn_close(c);
            return -1;
        }
    }
    c->tls_ready = 1;
    while (c->pend != NULL && c->state != CONN_CLOSING) {
        struct out_msg *m = c->pend;
        c->pend = m->next;
        if (c->pend == NULL) {
            c->pend_tail = &c->pend;
        }
        out_msg_start(m);
    }
    return c->state == CONN_CLOSING ? -1 : 0;
}

/* Bytes from the socket on a TLS connection: drive the handshake, then
 * decrypt into rbuf and handle the frames. */
static void tls_read(struct conn *c, const uint8_t *data, size_t len)
{
    size_t off = 0;

    /* Each round feeds at least one byte or decrypts at least one, so
     * this ends; the count is a guard. */
    for (unsigned round = 0; round < 1u << 20; round++) {
        size_t used = 0;
        int progress = 0;
        int rc;

        if (off < len) {
            (void)auth_tls_feed(c->tls, data + off, len - off, &used);
            off += used;
        }
        if (!c->tls_ready) {
            rc = auth_tls_handshake(c->tls);
            if (conn_flush(c) != 0) {
                conn_close(c);
                return;
            }
            if (rc < 0) {
                conn_refuse(c, auth_tls_errmsg(c->tls));
                return;
            }
            if (rc == AUTH_TLS_AGAIN) {
                if (off >= len) {
                    return;
                }
                if (used == 0) {
                    conn_close(c);
                    return;
                }
                continue;
            }
            if (tls_established(c) != 0) {
                return;
            }
        }
        for (;;) {
            size_t n = 0;
            if (rbuf_reserve(c) != 0) {
                conn_close(c);
                return;
            }
            rc =
                auth_tls_read(c->tls, c->rbuf + c->rlen, c->rcap - c->rlen, &n);
            if (rc != 0) {
                (void)conn_flush(c);
                if (rc != TERN_ECLOSED && (c->peer != NULL || !c->hello_seen)) {
                    /* e.g. the server refused our certificate */
                    conn_refuse(c, auth_tls_errmsg(c->tls));
                } else {
                    conn_close(c);
                }
                return;
            }
            if (n == 0) {
                break;
            }
            if (c->peer != NULL) {
                conn_close(c); /* the server never sends data */
                return;
            }
            progress = 1;
            c->rlen += n;
            if (process_frames(c) != 0) {
                return;
            }
        }
        if (conn_flush(c) != 0) {
            conn_close(c);
            return;
        }
        if (off >= len) {
            return;
        }
        if (used == 0 && !progress) {
            conn_close(c);
            return;
        }
    }
    conn_close(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    if (c->state == CONN_CLOSING || nread == 0) {
        return;
    }
    if (nread < 0) {
        /* EOF, reset, ENOBUFS. Before the handshake or HELLO finished,
         * with TLS on, the other side gave up proving itself. An
         * established connection breaking is the peer-down signal
         * (xport.h); x is not closing (our own close stops reads). */
        uint64_t down = 0;
        if (c->peer != NULL && c->state == CONN_UP) {
            down = c->peer->base.id;
        } else if (c->peer == NULL && c->hello_seen) {
            down = c->from_id;
        }
        conn_close(c);
        if (down != 0 && !c->x->closing) {
            xport__peer_down(&c->x->base, down);
        }
        return;
    }
    if (c->tls != NULL) {
        tls_read(c, (const uint8_t *)buf->base, (size_t)nread);
        return;
    }
    if (c->peer != NULL) {
        /* Bytes on an outbound connection, where the peer must never
         * write. */
        conn_close(c);
        return;
    }
    c->rlen += (size_t)nread;
    (void)process_frames(c);
}

/* Socket options of every connected stream: no Nagle delay (latency),
 * keepalive and a user timeout (dead peers). */
static int conn_tune(struct conn *c)
{
    unsigned timeout = TCP__USER_TIMEOUT_MS;
    uv_os_fd_t fd;
    int rc;

    rc = uv_tcp_nodelay(&c->tcp, 1);
    if (rc == 0) {
        rc = uv_tcp_keepalive(&c->tcp, 1, TCP__KEEPALIVE_S);
    }
    if (rc == 0) {
        rc = uv_fileno((uv_handle_t *)&c->tcp, &fd);
    }
    if (rc == 0 && setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout,
                              sizeof timeout) != 0) {
        rc = -errno;
    }
    return rc;
}

static void on_sweep(uv_timer_t *t);

/* Has the kernel finished this pending connect, either way? Its callback
 * then runs in this loop iteration's poll phase: a loop that was held up
 * (a starved CPU) runs its timers first, and the sweep must not take a
 * connect that succeeded for one that hangs. */
static bool connect_done(struct conn *c)
{
    uv_os_fd_t fd;
    struct pollfd pfd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) {
        return false;
    }
    pfd.fd = fd;
    pfd.events = POLLOUT;
    pfd.revents = 0;
    return poll(&pfd, 1, 0) == 1 && pfd.revents != 0;
}

static void sweep_start(struct tcp_xport *x)
{
    if (!x->closing && !uv_is_active((uv_handle_t *)&x->sweep)) {
        uv_timer_start(&x->sweep, on_sweep, TCP__SWEEP_MS, TCP__SWEEP_MS);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    struct tcp_xport *x = server->data;
    struct conn *c;

    if (status < 0 || x->closing) {
        return;
    }
    c = conn_new(x, NULL);
    if (c == NULL) {
        /* Out of memory: drop this connection. libuv has already accepted
         * its fd and stops watching the listener while it is not taken
         * (uv/unix.h accepted_fd), so close it here to keep accepting. */
        if (server->accepted_fd >= 0) {
            close(server->accepted_fd);
            server->accepted_fd = -1;
        }
        return;
    }
    c->state = CONN_UP;
    c->next = x->inbound;
    if (x->inbound != NULL) {
        x->inbound->prev = c;
    }
    x->inbound = c;
    c->accepted_at = uv_now(x->loop);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    if (x->pending_inbound >= x->max_pending) {
        conn_close(c); /* too many connections still proving themselves */
        return;
    }
    c->pending = 1;
    x->pending_inbound++;
    sweep_start(x);
    if (x->tls_server != NULL &&
        auth_tls_new(x->tls_server, NULL, &c->tls, NULL) != 0) {
        conn_close(c);
        return;
    }
    if (conn_tune(c) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
    }
}

/* ---- send path --------------------------------------------------------- */

static void on_write(uv_write_t *wr, int status)
{
    struct out_msg *m = TCP__CONTAINER(wr, struct out_msg, wr);
    struct xport_send *req = m->req;
    struct conn *c = m->conn; /* valid: close callbacks run after writes' */
    struct tcp_xport *x = c->x;

    m->peer->queued_bytes -= m->size;
    tern_free(m->cipher);
    tern_free(m);
    if (status < 0) {
        conn_close(c);
        status = x->closing ? TERN_ECANCELED : TERN_ENOCONN;
    }
    req->cb(req, status);
}

/* Hand m (queued_bytes already counted) to its connection's socket,
 * encrypted when TLS is on. On failure m completes with TERN_ENOCONN
 * through the deferred list and the connection is closed. */
static void out_msg_start(struct out_msg *m)
{
    struct conn *c = m->conn;
    uv_buf_t b;

    b.base = (char *)m->frame;
    b.len = m->size;
    if (c->tls != NULL) {
        if (tls_seal(c, m->frame, m->size, &m->cipher, &m->cipher_len) != 0) {
            goto err;
        }
        /* Keep only the ciphertext: shrink away the frame. */
        {
            struct out_msg *small = tern_realloc(m, sizeof *m);
            if (small != NULL) {
                m = small;
            }
        }
        b.base = (char *)m->cipher;
        b.len = m->cipher_len;
    }
    if (uv_write(&m->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        goto err;
    }
    return;

err:
    m->peer->queued_bytes -= m->size;
    xport_done_push(&c->x->done, m->req,
                    c->x->closing ? TERN_ECANCELED : TERN_ENOCONN);
    tern_free(m->cipher);
    tern_free(m);
    conn_close(c);
}

static void on_hello_written(uv_write_t *wr, int status)
{
    struct conn *c = TCP__CONTAINER(wr, struct conn, hello_req);
    if (status < 0) {
        conn_close(c);
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    struct conn *c = req->data;
    struct peer *p = c->peer;

    if (c->state == CONN_CLOSING) {
        return; /* canceled by conn_close */
    }
    if (status < 0) {
        p->base.retry_after = uv_now(c->x->loop) + c->x->retry_ms;
        conn_close(c);
        return;
    }
    c->state = CONN_UP;
    c->connect_start = uv_now(c->x->loop); /* the handshake's clock */
    /* Read to notice EOF/reset promptly (and, with TLS, the server's
     * handshake flight); see on_read. */
    if (conn_tune(c) != 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
    }
}

/* Close outbound connections stuck connecting (peer host down, SYNs
 * unanswered) or stuck in their TLS handshake; their queued sends complete
 * with TERN_ENOCONN. Close inbound connections that have not finished TLS
 * and HELLO in time. */
static void on_sweep(uv_timer_t *t)
{
    struct tcp_xport *x = t->data;
    uint64_t now = uv_now(x->loop);
    int pending = 0;

    for (struct peer *p = peer_first(x); p != NULL; p = peer_next(p)) {
        struct conn *c = p->conn;
        uint64_t limit;
        if (c == NULL ||
            (c->state != CONN_CONNECTING && (c->tls == NULL || c->tls_ready))) {
            continue;
        }
        limit = c->state == CONN_CONNECTING ? TCP__CONNECT_TIMEOUT_MS
                                            : x->hs_timeout_ms;
        if (now - c->connect_start >= limit &&
            !(c->state == CONN_CONNECTING && connect_done(c))) {
            p->base.retry_after = now + x->retry_ms;
            conn_close(c);
        } else {
            pending = 1;
        }
    }
    for (struct conn *c = x->inbound; c != NULL; c = c->next) {
        if (!c->pending || c->state == CONN_CLOSING) {
            continue;
        }
        if (now - c->accepted_at >= x->hs_timeout_ms) {
            if (c->tls != NULL) {
                conn_refuse(c,
                            "no TLS handshake and HELLO within "
                            "handshake_timeout_ms");
            } else {
                conn_close(c);
            }
        } else {
            pending = 1;
        }
    }
    if (!pending) {
        uv_timer_stop(&x->sweep);
    }
}

/* Start an outbound connection to p and queue its HELLO (with TLS: its
 * ClientHello; the HELLO follows the handshake). */
static int peer_connect(struct peer *p)
{
    struct tcp_xport *x = p->x;
    struct conn *c = conn_new(x, p);
    uint8_t hello[XPORT_TCP_HELLO_LEN];
    struct xport_iov iov = {hello, sizeof hello};
    uv_buf_t b;
    int rc;

    if (c == NULL) {
        return -ENOMEM;
    }
    c->state = CONN_CONNECTING;
    c->connect_req.data = c;
    c->connect_start = uv_now(x->loop);
    xport_tcp_hello_encode(hello, x->base.self_id, p->base.id);
    xport_tcp_frame_encode(c->hello, XPORT_TCP_FRAME_VERSION,
                           XPORT_TCP_FRAME_HELLO, 0, &iov, 1, sizeof hello);
    c->seq = 1;
    if (x->tls_client != NULL) {
        char cn[32];
        struct auth_tls_expect e = {cn, NULL, NULL};
        (void)snprintf(cn, sizeof cn, "node-%llu",
                       (unsigned long long)p->base.id);
        rc = auth_tls_new(x->tls_client, &e, &c->tls, NULL);
        if (rc != 0) {
            conn_close(c);
            return rc;
        }
    }
    /* Setting the flag before the socket exists applies it at creation. */
    (void)uv_tcp_nodelay(&c->tcp, 1);
    rc = uv_tcp_connect(&c->connect_req, &c->tcp,
                        (const struct sockaddr *)&p->addr, on_connect);
    if (rc != 0) {
        conn_close(c);
        return rc;
    }
    if (c->tls != NULL) {
        /* The ClientHello, queued by libuv until the connect completes. */
        rc = auth_tls_handshake(c->tls) < 0 ? TERN_EINTERNAL : conn_flush(c);
    } else {
        b.base = (char *)c->hello;
        b.len = sizeof c->hello;
        rc = uv_write(&c->hello_req, (uv_stream_t *)&c->tcp, &b, 1,
                      on_hello_written);
    }
    if (rc != 0) {
        conn_close(c);
        return rc;
    }
    p->conn = c;
    sweep_start(x);
    return 0;
}

/* Find or create the peer for id; follow an address change. */
static int peer_get(struct tcp_xport *x,
                    uint64_t id,
                    const char *address,
                    struct peer **out)
{
    struct xport_peer *bp;
    struct sockaddr_in sa;
    struct peer *p;
    int rc;

    if (xport_peer_find(x->peers, id, address, &bp) == XPORT_PEER_SAME) {
        *out = (struct peer *)bp;
        return 0;
    }
    rc = xport_parse_ipv4(address, &sa);
    if (rc != 0) {
        return rc;
    }
    if (bp != NULL && ((struct peer *)bp)->conn != NULL) {
        conn_close(((struct peer *)bp)->conn);
    }
    rc = xport_peer_set(&x->peers, &bp, sizeof *p, id, address);
    if (rc != 0) {
        return rc;
    }
    p = (struct peer *)bp;
    p->x = x;
    p->addr = sa;
    *out = p;
    return 0;
}

static int tcp_send(struct xport *base,
                    struct xport_send *req,
                    uint64_t peer_id,
                    const char *peer_address,
                    const struct xport_iov *iov,
                    unsigned n)
{
    struct tcp_xport *x = (struct tcp_xport *)base;
    struct peer *p;
    struct out_msg *m;
    size_t total;
    int rc;

    rc = xport_send_begin(x->closing, peer_address, iov, n, &total);
    if (rc != 0) {
        return rc;
    }
    rc = peer_get(x, peer_id, peer_address, &p);
    if (rc != 0) {
        return rc;
    }
    if (xport_over_budget(p->queued_bytes == 0, p->queued_bytes,
                          XPORT_TCP_FRAME_HDR + total, x->max_queued)) {
        xport_done_push(&x->done, req, TERN_EBUSY);
        return 0;
    }
    if (p->conn == NULL && uv_now(x->loop) < p->base.retry_after) {
        xport_done_push(&x->done, req, TERN_ENOCONN);
        return 0;
    }
    m = tern_malloc(sizeof *m + XPORT_TCP_FRAME_HDR + total);
    if (m == NULL) {
        return -ENOMEM;
    }
    if (p->conn == NULL && peer_connect(p) != 0) {
        tern_free(m);
        p->base.retry_after = uv_now(x->loop) + x->retry_ms;
        xport_done_push(&x->done, req, TERN_ENOCONN);
        return 0;
    }
    m->req = req;
    m->peer = p;
    m->conn = p->conn;
    m->next = NULL;
    m->cipher = NULL;
    m->cipher_len = 0;
    m->size = XPORT_TCP_FRAME_HDR + total;
    xport_tcp_frame_encode(m->frame,
                           (req->flags & XPORT_SEND_XXH3) != 0
                               ? XPORT_TCP_FRAME_V_XXH3
                               : XPORT_TCP_FRAME_VERSION,
                           XPORT_TCP_FRAME_MSG, p->conn->seq++, iov, n, total);
    p->queued_bytes += m->size;
    if (p->conn->tls != NULL && !p->conn->tls_ready) {
        /* Encrypted once the handshake completes (tls_established). */
        *p->conn->pend_tail = m;
        p->conn->pend_tail = &m->next;
    } else {
        out_msg_start(m);
    }
    spin_arm(x);
    return 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static int tcp_start(struct xport *base)
{
    struct tcp_xport *x = (struct tcp_xport *)base;
    int rc;

    if (x->closing) {
        return TERN_ESHUTDOWN;
    }
    if (x->started) {
        return 0;
    }
    rc = uv_listen((uv_stream_t *)&x->listener, TCP__BACKLOG, on_connection);
    if (rc != 0) {
        return rc;
    }
    x->started = 1;
    return 0;
}

static size_t tcp_max_message(const struct xport *base)
{
    return ((const struct tcp_xport *)base)->max_message;
}

static void tcp_close(struct xport *base)
{
    struct tcp_xport *x = (struct tcp_xport *)base;

    if (x->closing) {
        return;
    }
    x->closing = 1;
    xport_spin_stop(&x->spin);
    uv_close((uv_handle_t *)&x->spin.idle, on_handle_closed);
    if (x->wake.fd >= 0) {
        xport_wake_close(&x->wake, on_handle_closed);
    }
    uv_close((uv_handle_t *)&x->listener, on_handle_closed);
    uv_close((uv_handle_t *)&x->sweep, on_handle_closed);
    for (struct peer *p = peer_first(x); p != NULL; p = peer_next(p)) {
        if (p->conn != NULL) {
            conn_close(p->conn);
        }
    }
    for (struct conn *c = x->inbound; c != NULL; c = c->next) {
        conn_close(c);
    }
    maybe_finish(x);
}

static void tcp_get_stats(const struct xport *base, struct xport_stats *out)
{
    const struct tcp_xport *x = (const struct tcp_xport *)base;

    out->spins = x->spins;
    out->spin_hits = x->spin_hits;
    out->auth_refused = x->auth_refused;
    memcpy(out->last_refusal, x->last_refusal, sizeof(out->last_refusal));
}

static const struct xport_ops tcp_ops = {
    .name = "tcp",
    .start = tcp_start,
    .send = tcp_send,
    .max_message = tcp_max_message,
    .close = tcp_close,
    .set_busy_poll = xport_tcp_set_busy_poll,
    .set_adaptive_poll = xport_tcp_set_adaptive_poll,
    .get_stats = tcp_get_stats,
};

/* Create the listening socket with plain syscalls, so every failure before
 * a uv handle exists unwinds synchronously. Returns an fd or -errno. */
static int listen_socket(const struct sockaddr_in *sa)
{
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc;

    if (fd < 0) {
        return -errno;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (const struct sockaddr *)sa, sizeof *sa) != 0 ||
        listen(fd, TCP__BACKLOG) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int xport_tcp_new(uv_loop_t *loop,
                  uint64_t self_id,
                  const char *bind_address,
                  const struct xport_tcp_options *opts,
                  struct xport **out,
                  char *errmsg)
{
    struct sockaddr_in sa;
    struct tcp_xport *x;
    size_t max_message = TCP__DEFAULT_MAX_MESSAGE;
    size_t max_queued = TCP__DEFAULT_MAX_QUEUED;
    unsigned retry_ms = TCP__DEFAULT_RETRY_MS;
    unsigned hs_timeout_ms = TCP__HANDSHAKE_TIMEOUT_MS;
    unsigned max_pending = TCP__MAX_PENDING_INBOUND;
    int fd;
    int rc;

    if (opts != NULL) {
        max_message = opts->max_message ? opts->max_message : max_message;
        max_queued =
            opts->max_queued_bytes ? opts->max_queued_bytes : max_queued;
        retry_ms = opts->connect_retry_ms ? opts->connect_retry_ms : retry_ms;
        hs_timeout_ms = opts->handshake_timeout_ms ? opts->handshake_timeout_ms
                                                   : hs_timeout_ms;
        max_pending =
            opts->max_pending_inbound ? opts->max_pending_inbound : max_pending;
        if ((opts->tls_server == NULL) != (opts->tls_client == NULL)) {
            tern_errmsg_printf(errmsg,
                               "tcp: TLS needs both a server and a client "
                               "context");
            return TERN_EINVAL;
        }
    }
    if (max_message > UINT32_MAX - XPORT_TCP_FRAME_HDR) {
        tern_errmsg_printf(errmsg, "tcp: max_message %zu exceeds %u",
                           max_message,
                           (unsigned)(UINT32_MAX - XPORT_TCP_FRAME_HDR));
        return TERN_EINVAL;
    }
    if (loop == NULL || out == NULL ||
        xport_parse_ipv4(bind_address, &sa) != 0) {
        tern_errmsg_printf(errmsg, "tcp: bad bind address '%s'",
                           bind_address ? bind_address : "(null)");
        return TERN_EINVAL;
    }
    fd = listen_socket(&sa);
    if (fd < 0) {
        rc = fd;
        tern_errmsg_printf(errmsg, "tcp: listen on %s: %s", bind_address,
                           tern_strerror(rc));
        goto err;
    }
    x = tern_calloc(1, sizeof *x);
    if (x == NULL) {
        rc = -ENOMEM;
        tern_errmsg_printf(errmsg, "tcp: out of memory");
        goto err_after_socket;
    }
    x->base.ops = &tcp_ops;
    x->base.self_id = self_id;
    x->loop = loop;
    x->max_message = max_message;
    x->max_queued = max_queued;
    x->retry_ms = retry_ms;
    x->hs_timeout_ms = hs_timeout_ms;
    x->max_pending = max_pending;
    if (opts != NULL) {
        x->tls_server = opts->tls_server;
        x->tls_client = opts->tls_client;
    }
    rc = uv_tcp_init(loop, &x->listener); /* leaves no trace on failure */
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "tcp: init: %s", tern_strerror(rc));
        goto err_after_alloc;
    }
    x->listener.data = x;
    /* Always 0: no syscall. */
    (void)uv_idle_init(loop, &x->idle);
    x->idle.data = x;
    xport_done_init(&x->done, &x->idle, on_idle);
    (void)uv_timer_init(loop, &x->sweep);
    x->sweep.data = x;
    xport_spin_init(&x->spin, loop, x, on_spin);
    x->handles = 3;
    if (xport_wake_init(&x->wake, loop, x, on_wake) == 0) {
        x->handles++; /* else no planned round starts later */
    }
    rc = uv_tcp_open(&x->listener, fd);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "tcp: adopt listen socket: %s",
                           tern_strerror(rc));
        /* The handles exist: free asynchronously (no user callback). */
        tcp_close(&x->base);
        goto err_after_socket;
    }
    *out = &x->base;
    return 0;

err_after_alloc:
    tern_free(x);
err_after_socket:
    close(fd);
err:
    return rc;
}
