/*
 * Private to the verbs backend: what rdma/verbs.c (rings over RC queue
 * pairs, completions, devices, lifecycle) and rdma/verbs_cm.c (rdma_cm
 * connection setup and its private data) share. The driver parts
 * (peers, send path, delivery) are rdma/ringx.h's.
 */
#ifndef TERN_XPORT_VERBS_INT_H
#define TERN_XPORT_VERBS_INT_H

#include <netinet/in.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <auth.h>

#include "ringx.h"

#define VERBS__RETRY_COUNT  6u /* 7 = infinite on rxe */
#define VERBS__RNR_RETRY    6u
#define VERBS__IMM_CREDIT   0xffffffffu /* never a ring position */
#define VERBS__IMM_WAKE     0x1u        /* positions are 64-aligned */
#define VERBS__SINK         64u         /* sink bytes after the ring */
#define VERBS__SQ_DEPTH     256u
#define VERBS__RQ_DEPTH     256u
#define VERBS__IMM_BUDGET   64u /* doorbells beyond credit */
#define VERBS__SIGNAL_EVERY 32u
#define VERBS__SQ_RESERVE   3u    /* wrap piece + doorbell + nop */
#define VERBS__CQ_WANT      32768 /* capped by the device */
#define VERBS__POLL_BATCH   32
#define VERBS__INLINE_WANT  256u
#define VERBS__SWEEP_MS     10u
#define VERBS__DRAIN_MS     1000u
#define VERBS__BACKLOG      128
#define VERBS__WR_DRAIN     UINT64_MAX
#define VERBS__WR_HS        (UINT64_MAX - 1) /* the handshake receive */
#define VERBS__NONCE        16u              /* bytes of each side's nonce */
#define VERBS__HS_LEN       56u  /* AUTH and RING messages (verbs_cm.c) */
#define VERBS__HS_BUF       128u /* receive area at 0, send area at 64 */
#define VERBS__MAX_PENDING  64u  /* default unauthenticated inbound cap */

struct verbs_xport;

/* Per-device resources of one transport. */
struct vdev
{
    struct vdev *next;
    struct verbs_xport *x;
    struct ibv_context *verbs; /* owned by librdmacm */
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    uv_poll_t poll;
    int poll_open;
    unsigned qps;     /* QPs on this device */
    unsigned max_qps; /* what the CQ can take */
};

/* One RC connection: outbound (rc.peer != NULL: we write into the peer's
 * ring) or inbound (we own the ring, the peer writes). */
struct vconn
{
    struct xport_ringx_conn rc; /* first member: state, peer, tx, rx */
    struct rdma_cm_id *id;
    struct vdev *dev;
    uint32_t qp_num;
    int has_qp;
    int established;
    /* Inbound: the ring (cap + sink bytes). Outbound: the mirror (cap). */
    uint8_t *ring;
    size_t cap;
    struct ibv_mr *ring_mr;
    /* Outbound: control area (credit word at 0, nop source at 8).
     * Inbound: credit scratch (source of credit writes). 64 bytes. */
    uint64_t *word;
    struct ibv_mr *word_mr;
    uint64_t remote_addr; /* outbound: ring; inbound: credit word */
    uint32_t remote_rkey;
    uint32_t max_inline;
    /* Handshake (verbs_cm.c): a buffer registered for local access only,
     * the peer's AUTH (inbound) or RING (outbound) message lands at 0 (the
     * QP's first receive), ours is sent from 64. */
    uint8_t *hs;
    struct ibv_mr *hs_mr;
    int hs_got; /* the peer's handshake message arrived */
    int authed; /* the peer proved the secret; its rings may be used */
    uint8_t nonce_s[VERBS__NONCE]; /* the sender's (CONNECT) */
    uint8_t nonce_r[VERBS__NONCE]; /* the receiver's (ACCEPT) */
    uint64_t hs_epoch;             /* the sender's epoch in CONNECT */
    uint64_t hs_fence;             /* the receiver's fence in ACCEPT */
    /* send-queue accounting */
    uint64_t sq_posted;      /* WRs posted (last wr_id) */
    uint64_t sq_retired;     /* every WR <= this has completed */
    uint64_t last_signalled; /* wr_id of the newest signalled WR */
    unsigned since_signal;
    /* outbound: dirty range of the mirror not yet posted */
    size_t dirty_lo, dirty_hi;
    int dirty;
    /* outbound: heads of doorbells beyond the credit seen (FIFO) */
    uint64_t imm_heads[VERBS__IMM_BUDGET];
    unsigned imm_first, imm_count;
    /* outbound: sends written to the ring, waiting for a completion;
     * linked through req->priv[0], req->priv[2] = wr_id of their doorbell
     * (0 = doorbell not posted yet) */
    struct xport_send *inflight, *inflight_tail;
    struct xport_send *unassigned; /* first with priv[2] == 0, or NULL */
    /* inbound */
    int may_wake;    /* a doorbell arrived since our last wake */
    int wake_req;    /* a doorbell asked for a wake-up */
    int credit_owed; /* a credit write found the SQ full */
    int revoked;
    /* loop work */
    int pending; /* completions arrived: drain / flush */
    int drained; /* CLOSING: marker flushed (or none needed) */
    uint64_t close_deadline;
};

struct verbs_xport
{
    struct xport_ringx r; /* first member: the driver (rdma/ringx.h) */
    unsigned connect_ms;
    uint8_t ack_timeout;
    struct sockaddr_in bind_sa; /* our IP, port 0: source of connects */
    struct rdma_event_channel *ech;
    struct rdma_cm_id *listen_id;
    uv_poll_t cm_poll;
    uv_timer_t sweep;
    struct xport_spin spin; /* busy-poll: polls the CQs (xport_int.h) */
    struct vdev *devs;
    struct xport_verbs_stats stats; /* the verbs-only counters */
    struct auth_secret secret; /* the handshake key; all zero without one */
    int has_secret;
    unsigned max_pending; /* inbound connections not authenticated yet */
    int finishing;
};

static inline struct verbs_xport *vx(const struct vconn *c)
{
    return (struct verbs_xport *)c->rc.x;
}

/* The ring ops over verbs (verbs.c), for the rings verbs_cm.c sets up. */
extern const struct xport_ring_ops xport_verbs_ring_ops;

/* ---- verbs.c ---------------------------------------------------------- */

/* Connection events and error completions to stderr when the environment
 * has TERN_VERBS_TRACE (libraries do not log otherwise). */
void xport_verbs_trace(const struct verbs_xport *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A connection around id (its context set to it), outbound to p or
 * inbound (p NULL), linked into the transport. NULL: out of memory. */
struct vconn *xport_vconn_new(struct verbs_xport *x,
                              struct xport_ringx_peer *p,
                              struct rdma_cm_id *id);
/* Create c's QP on id's device, register its handshake buffer and post
 * the receives (the handshake receive first). */
int xport_vconn_setup_qp(struct vconn *c);
/* Post len (<= 64) bytes at c->hs + 64 as a signalled SEND. 0 or a
 * negative code. */
int xport_vconn_post_hs(struct vconn *c, size_t len);
/* The peer failed to prove the secret (why: for the trace): count one
 * auth_refused and close c. */
void xport_vconn_refuse(struct vconn *c, const char *why);
/* Close c (idempotent; freed later, from the loop). */
void xport_vconn_close(struct vconn *c, int status);
/* Deliver what inbound c's ring holds up to the landed limit. */
void xport_vconn_drain(struct vconn *c);
/* Deliver, return credit, flush queues for connections with completions. */
void xport_verbs_process_pending(struct verbs_xport *x);
/* Poll d's CQ dry, then xport_verbs_process_pending. Returns the number
 * of completions handled. */
unsigned xport_verbs_cq_service(struct vdev *d);

/* ---- verbs_cm.c ------------------------------------------------------- */

/* The event channel (non-blocking), a listening id bound to sa. Returns 0
 * or a negative code with errmsg set and nothing left behind. */
int xport_verbs_cm_listen(struct verbs_xport *x,
                          const struct sockaddr_in *sa,
                          const char *bind_address,
                          char *errmsg);
/* The driver's connect: resolve p's address from our bound IP. */
int xport_verbs_cm_connect(struct xport_ringx_peer *p);
/* uv_poll callback of the event channel's fd. */
void xport_verbs_on_cm(uv_poll_t *h, int status, int events);
/* c's handshake message arrived (c->hs_got, not yet authenticated):
 * inbound, verify AUTH, expose the ring and send RING; outbound, verify
 * RING and go UP. On failure c is closed (refused). May poll the CQs and
 * deliver (a superseded connection). */
void xport_verbs_cm_handshake(struct vconn *c);

#endif /* TERN_XPORT_VERBS_INT_H */
