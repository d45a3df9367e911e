/*
 * verbs backend of the transport interface (xport_verbs_new): the
 * one-sided ring protocol of rdma/ring.c over RDMA RC queue pairs, set up
 * with librdmacm, driven from the node's libuv loop (house style H6).
 * Tested on soft-RoCE (rxe) by tests/hw/ through tests/rxe/run.sh.
 *
 * Topology (as shm): per ordered pair (sender S, receiver R) one RC QP,
 * set up by S with rdma_cm, lazily on the first send, from S's bound source
 * IP (rdma_cm needs it: without it the kernel routes a local destination
 * through lo and the traffic never leaves the destination's device). R
 * registers a zeroed ring of cap bytes plus a 64-byte sink with
 * REMOTE_WRITE; S keeps a local MIRROR of the ring (same layout, the ring
 * protocol's single copy of the caller's bytes goes there) and a 64-byte
 * control area whose first 8 bytes are the credit word, registered with
 * REMOTE_WRITE. Per transport and per RDMA device there is ONE protection
 * domain, ONE completion channel and ONE CQ shared by all QPs on that
 * device; completions are routed to connections by QP number.
 *
 * Private data, version 1 (integers little-endian):
 *   CONNECT (S -> R, 52 bytes)          ACCEPT (R -> S, 52 bytes)
 *    0 4 magic 0x56534d54 "TMSV"         0 4 magic
 *    4 2 version 1                        4 2 version 1
 *    6 2 type 1                           6 2 type 2
 *    8 8 sender id                        8 8 sender id
 *   16 8 receiver id                     16 8 receiver id
 *   24 8 credit word address             24 8 ring address (sink at +cap)
 *   32 4 credit word rkey                32 4 ring rkey
 *   36 4 zero                            36 4 ring capacity (bytes)
 *   40 8 sender's epoch                  40 8 receiver's fence
 *   48 4 checksum (bytes 0..47)          48 4 checksum (bytes 0..47)
 * (a CM REQ carries at most 56 bytes of private data over rdma_cm.)
 *
 * Ring ops on verbs:
 *   write         memcpy into the mirror at off and extend the dirty
 *                 range; a write that wraps to a lower offset first posts
 *                 the current range as a plain RDMA_WRITE;
 *   doorbell      post the dirty range as RDMA_WRITE_WITH_IMM. imm = low
 *                 32 bits of the sender's head (64-aligned), bit 0 = WAKE
 *                 (see below). The receiver's RECV completion says
 *                 "everything before head has landed"
 *                 (xport_ring_rx_landed), so it never reads a record whose
 *                 bytes are still landing (RDMA WRITE bytes land in no
 *                 defined order; RC keeps the order between WRs);
 *   write_credit  8-byte RDMA_WRITE (inline) of the consumed position into
 *                 the sender's credit word; with wake, WRITE_WITH_IMM
 *                 (imm = VERBS__IMM_CREDIT) so the sender gets a
 *                 completion and flushes its queue.
 * Zero-length RECVs are pre-posted on every QP (VERBS__RQ_DEPTH) and
 * re-posted before the ring is drained. A sender counts doorbells whose
 * head is beyond the credit it has seen: each such doorbell may still hold
 * a receive buffer at the receiver (a record is consumed only after the
 * doorbell announcing it was processed and its RECV re-posted, and RC
 * delivers doorbells in order). At most VERBS__IMM_BUDGET are outstanding;
 * the last one allowed carries WAKE, which makes the receiver's next credit
 * write a wake-up. A receiver sends at most one wake per doorbell it
 * received, which bounds the sender's receive queue the same way. A sender
 * with queued messages also re-reads its credit word every
 * VERBS__SWEEP_MS (a safety net: no wake-up can be lost for good).
 *
 * Selective signalling with send-queue accounting (HERD): WRs are numbered
 * 1, 2, 3, ... per QP (wr_id = the number); a signalled completion of WR k
 * retires every WR <= k. A WR is signalled when no signalled WR is
 * outstanding (so a lone send completes at once), or every
 * VERBS__SIGNAL_EVERY WRs; a post never leaves more than VERBS__SQ_DEPTH
 * WRs outstanding (the send path reserves room first and queues the
 * message otherwise). A send's callback fires (0) once a signalled WR at
 * or after its doorbell completed, i.e. the bytes are in the peer's
 * memory. When sends wait and no signalled WR is outstanding, a signalled
 * 8-byte "nop" write into the receiver's sink provides the completion.
 *
 * Tracing: TERN_VERBS_TRACE=1 in the environment prints connection events
 * and error completions to stderr (libraries do not log otherwise).
 *
 * Events (H6): the rdma_cm event channel fd and each device's completion
 * channel fd are O_NONBLOCK and watched by uv_poll on the node loop. The
 * CQ handler reads and acks all channel events in one batch, re-arms
 * notification, polls the CQ dry in batches, and only then delivers
 * messages and flushes queues (so recv callbacks never run inside a CQ
 * poll). A completion with an error status (IBV_WC_WR_FLUSH_ERR,
 * IBV_WC_RETRY_EXC_ERR, remote access errors, ...) tears the connection
 * down.
 *
 * Connection states (struct vconn): outbound RESOLVING (address, route)
 * -> CONNECTING -> UP; inbound CONNECTING (accepted, waiting for
 * ESTABLISHED; records are already received) -> UP; both -> CLOSING ->
 * freed. Teardown: rdma_disconnect (or a move to the error state), then a
 * signalled marker WR whose flush completion says every earlier WR of the
 * QP has been flushed; only then (or after VERBS__DRAIN_MS) are the QP, the
 * cm_id, the MRs and the memory released, from the loop, never inside the
 * call that closed the connection.
 *
 * Failure modes:
 *   - connect fails (REJECTED, UNREACHABLE, ADDR/ROUTE_ERROR) or has not
 *     completed within connect_timeout_ms (a partitioned peer takes ~100 s
 *     to fail in the CM): queued sends complete with TERN_ENOCONN and the
 *     peer enters a back-off of connect_retry_ms during which sends
 *     complete with TERN_ENOCONN at once; the next send after it
 *     reconnects;
 *   - a dead or partitioned peer while connected: retry_count 6 (rxe treats
 *     7 as infinite) and the ACK timeout option turn it into
 *     IBV_WC_RETRY_EXC_ERR after about 7 x 4.096 us x 2^ack_timeout;
 *     DISCONNECTED from the CM when the peer closes; both tear down,
 *     in-flight and queued sends complete with TERN_ENOCONN; the next send
 *     reconnects;
 *   - a sender connects again (restart, or after giving up its previous
 *     connection): before accepting, the receiver polls its CQs, delivers
 *     what the older connections from that sender announced and closes
 *     them, so order per sender is kept (writes of the old connection
 *     still on the wire are lost with it: the sender failed those sends);
 *   - data arrives on an accepted connection before the CM's RTU: the
 *     receiver calls rdma_notify(COMM_EST) (async events are not read);
 *   - queued bytes for a peer would exceed max_queued_bytes: TERN_EBUSY
 *     (one message is always accepted when the queue is empty);
 *   - an invalid record in an inbound ring: the connection is torn down;
 *   - xport_close: queued and in-flight sends complete with TERN_ECANCELED,
 *     then the close callback runs once every QP, id and handle is gone.
 *
 * Fencing (issue 3 item 3). Records carry the sender's epoch and the
 * receiver drops records below its fence (rdma/ring.c, software check).
 * On top of that the NIC enforces it: a connect request whose epoch is
 * below the fence is rejected, and xport_verbs_set_fence revokes remote
 * write access (ibv_modify_qp IBV_QP_ACCESS_FLAGS = 0) on every inbound QP
 * whose sender has not shown an epoch >= the fence (its connect epoch or
 * the epoch of a delivered record). A deposed sender's next write is then
 * NAKed by the receiving NIC and never reaches memory; the sender's QP
 * fails (counted in nic_rejects), it reconnects, and the reconnect is
 * refused until its epoch has caught up.
 *
 * The fence check at set_fence uses what has been delivered: a sender
 * whose first records of the new epoch are still in the CQ is revoked and
 * reconnects (set_fence may run inside a recv callback, so it does not
 * poll the CQ itself).
 *
 * Assumption (ring.h): the receiver's 8-byte credit write lands
 * single-copy atomically in the sender's credit word. Real NICs write an
 * aligned 8-byte PCIe payload atomically; rxe copies it with the kernel's
 * memcpy, which does in practice. Ring records do not rely on it: the
 * receiver reads only below the head announced by a doorbell.
 *
 * Busy-polling (xport_verbs_set_busy_poll, off by default): see "busy-poll"
 * below; the TCP fallback and the background re-try of rdma are
 * rdma/fallback.c.
 *
 * Not done: async events (ibv_get_async_event: port down, device
 * removal), CQ resizing (QPs per device are capped by the CQ size: a
 * connect beyond it fails with TERN_ENOCONN), a bulk side channel for
 * snapshots.
 */
#include "ring.h"
#include "sendq.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <tern_common.h>

#define VERBS__DEFAULT_RING       ((size_t)8 << 20)
#define VERBS__DEFAULT_MAX_QUEUED ((size_t)64 << 20)
#define VERBS__DEFAULT_RETRY_MS   100u
#define VERBS__DEFAULT_CONNECT_MS 2000u
#define VERBS__DEFAULT_ACK_TMO    15u /* 4.096 us * 2^15 = 134 ms per try */
#define VERBS__RETRY_COUNT        6u  /* 7 = infinite on rxe */
#define VERBS__RNR_RETRY          6u
#define VERBS__PD_MAGIC           0x56534d54u
#define VERBS__PD_VERSION         1u
#define VERBS__PD_CONNECT         1u
#define VERBS__PD_ACCEPT          2u
#define VERBS__PD_LEN             52u
#define VERBS__IMM_CREDIT         0xffffffffu /* never a ring position */
#define VERBS__IMM_WAKE           0x1u        /* positions are 64-aligned */
#define VERBS__SINK               64u         /* sink bytes after the ring */
#define VERBS__SQ_DEPTH           256u
#define VERBS__RQ_DEPTH           256u
#define VERBS__IMM_BUDGET         64u /* doorbells beyond credit */
#define VERBS__SIGNAL_EVERY       32u
#define VERBS__SQ_RESERVE         3u /* wrap piece + doorbell + nop */
#define VERBS__CQ_WANT            32768 /* capped by the device */
#define VERBS__POLL_BATCH         32
#define VERBS__INLINE_WANT        256u
#define VERBS__SWEEP_MS           10u
#define VERBS__DRAIN_MS           1000u
#define VERBS__BACKLOG            128
#define VERBS__WR_DRAIN           UINT64_MAX

enum vconn_state {
    V_RESOLVING, /* outbound: address and route resolution */
    V_CONNECTING,
    V_UP,
    V_CLOSING, /* torn down; freed once drained */
};

struct verbs_xport;
struct vpeer;

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

/* One RC connection: outbound (peer != NULL: we write into the peer's
 * ring) or inbound (we own the ring, the peer writes). */
struct vconn
{
    struct verbs_xport *x;
    struct vpeer *peer;
    struct vconn *next;
    enum vconn_state state;
    struct rdma_cm_id *id;
    struct vdev *dev;
    uint32_t qp_num;
    int has_qp;
    int established;
    uint64_t started; /* loop ms at connect start */
    uint64_t remote_id;
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
    int rx_ready;       /* rx initialised */
    int may_wake;       /* a doorbell arrived since our last wake */
    int wake_req;       /* a doorbell asked for a wake-up */
    int credit_owed;    /* a credit write found the SQ full */
    uint64_t peer_epoch; /* highest epoch the sender has shown */
    int revoked;
    /* loop work */
    int pending;      /* completions arrived: drain / flush */
    int drained;      /* CLOSING: marker flushed (or none needed) */
    uint64_t close_deadline;
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
};

/* A destination node. Lives until the transport is freed. */
struct vpeer
{
    struct xport_peer base; /* first member: id, address, retry_after */
    struct verbs_xport *x;
    struct vconn *conn;
    struct xport_sendq q; /* waiting for ring space or the connection */
};

struct verbs_xport
{
    struct xport base; /* first member: the interface's handle */
    uv_loop_t *loop;
    size_t ring_bytes;
    size_t max_queued;
    unsigned retry_ms;
    unsigned connect_ms;
    uint8_t ack_timeout;
    struct sockaddr_in bind_sa; /* our IP, port 0: source of connects */
    struct rdma_event_channel *ech;
    struct rdma_cm_id *listen_id;
    uv_poll_t cm_poll;
    uv_idle_t idle;
    uv_timer_t sweep;
    struct xport_spin spin; /* busy-poll: polls the CQs (xport_int.h) */
    struct vdev *devs;
    struct xport_peer *peers; /* of struct vpeer */
    struct vconn *conns;
    struct xport_done done; /* deferred completions, drained by idle */
    unsigned handles; /* open handles besides idle */
    uint64_t epoch;
    uint64_t fence;
    struct xport_verbs_stats stats;
    int started;
    int closing;
    int finishing;
    int idle_closing;
};

static const struct xport_ops verbs_ops;

static struct vpeer *peer_first(struct verbs_xport *x)
{
    return (struct vpeer *)x->peers;
}

static struct vpeer *peer_next(struct vpeer *p)
{
    return (struct vpeer *)p->base.next;
}

static void vconn_close(struct vconn *c, int status);
static void flush_queue(struct vpeer *p);
static void maybe_finish(struct verbs_xport *x);
static void sweep_kick(struct verbs_xport *x);
struct vdev;
static unsigned cq_service(struct vdev *d);

/* ---- tracing -------------------------------------------------------------
 * Libraries do not log (house style H8): connection events go to stderr
 * only when the environment variable TERN_VERBS_TRACE is set (a debugging
 * aid for the rxe runner, like LIBRAFT_TRACE). */
static int trace_on = -1;

static void vtrace(const struct verbs_xport *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void vtrace(const struct verbs_xport *x, const char *fmt, ...)
{
    va_list ap;

    if (trace_on < 0) {
        trace_on = getenv("TERN_VERBS_TRACE") != NULL;
    }
    if (!trace_on) {
        return;
    }
    (void)fprintf(stderr, "verbs[%llu] ", (unsigned long long)x->base.self_id);
    va_start(ap, fmt);
    (void)vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void)fputc('\n', stderr);
}

/* ---- private data ------------------------------------------------------ */

static void pd_encode(uint8_t p[VERBS__PD_LEN],
                      unsigned type,
                      uint64_t sender,
                      uint64_t receiver,
                      uint64_t addr,
                      uint32_t rkey,
                      uint32_t cap,
                      uint64_t epoch)
{
    memset(p, 0, VERBS__PD_LEN);
    tern_put_u32(p, VERBS__PD_MAGIC);
    tern_put_u16(p + 4, VERBS__PD_VERSION);
    tern_put_u16(p + 6, (uint16_t)type);
    tern_put_u64(p + 8, sender);
    tern_put_u64(p + 16, receiver);
    tern_put_u64(p + 24, addr);
    tern_put_u32(p + 32, rkey);
    tern_put_u32(p + 36, cap);
    tern_put_u64(p + 40, epoch);
    tern_put_u32(p + 48, tern_checksum32(p, 48));
}

/* Check magic, version, type and checksum of private data of len bytes
 * (the CM may pad it). Returns 0 or a negative code. */
static int pd_check(const uint8_t *p, size_t len, unsigned type)
{
    if (p == NULL || len < VERBS__PD_LEN ||
        tern_get_u32(p) != VERBS__PD_MAGIC) {
        return TERN_EMALFORMED;
    }
    if (tern_get_u16(p + 4) != VERBS__PD_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u16(p + 6) != type ||
        tern_get_u32(p + 48) != tern_checksum32(p, 48)) {
        return TERN_EMALFORMED;
    }
    return 0;
}

/* ---- deferred completions ---------------------------------------------- */

static void reap(struct verbs_xport *x);

static void on_idle(uv_idle_t *h)
{
    struct verbs_xport *x = h->data;
    /* reap frees closed connections; it queues no completion. */
    int stopped = xport_done_drain(&x->done);

    reap(x);
    if (stopped) {
        maybe_finish(x);
    }
}

static void inflight_fail(struct vconn *c, int status)
{
    while (c->inflight != NULL) {
        struct xport_send *req = c->inflight;
        c->inflight = req->priv[0];
        xport_done_push(&c->x->done, req, status);
    }
    c->inflight_tail = NULL;
    c->unassigned = NULL;
}

/* A signalled WR up to wr_id completed: so did every earlier one. */
static void inflight_complete(struct vconn *c, uint64_t wr_id)
{
    while (c->inflight != NULL) {
        struct xport_send *req = c->inflight;
        uint64_t at = (uint64_t)(uintptr_t)req->priv[2];
        if (at == 0 || at > wr_id) {
            break;
        }
        c->inflight = req->priv[0];
        xport_done_push(&c->x->done, req, 0);
    }
    if (c->inflight == NULL) {
        c->inflight_tail = NULL;
    }
}

/* ---- posting ------------------------------------------------------------ */

static unsigned sq_room(const struct vconn *c)
{
    return VERBS__SQ_DEPTH - (unsigned)(c->sq_posted - c->sq_retired);
}

static int signalled_outstanding(const struct vconn *c)
{
    return c->last_signalled > c->sq_retired;
}

/* Post one RDMA write (opcode IBV_WR_RDMA_WRITE[_WITH_IMM]) of len bytes
 * at local addr (lkey) to remote (raddr, rkey); inline when it fits.
 * Signalled if want_signal, every VERBS__SIGNAL_EVERY WRs, or when it
 * takes the last send-queue slot. Returns the wr_id, or 0 with *err set
 * (-EAGAIN: the send queue is full). */
static uint64_t post_write(struct vconn *c,
                           const void *addr,
                           size_t len,
                           uint32_t lkey,
                           uint64_t raddr,
                           uint32_t rkey,
                           int with_imm,
                           uint32_t imm,
                           int want_signal,
                           int *err /* OUT */)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;
    uint64_t id;
    int rc;

    if (sq_room(c) == 0) {
        *err = -EAGAIN;
        return 0;
    }
    id = c->sq_posted + 1;
    memset(&wr, 0, sizeof wr);
    sge.addr = (uintptr_t)addr;
    sge.length = (uint32_t)len;
    sge.lkey = lkey;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (want_signal || c->since_signal + 1 >= VERBS__SIGNAL_EVERY ||
        sq_room(c) <= 1) {
        wr.send_flags |= IBV_SEND_SIGNALED;
    }
    if (len <= c->max_inline) {
        wr.send_flags |= IBV_SEND_INLINE;
    }
    rc = ibv_post_send(c->id->qp, &wr, &bad);
    if (rc != 0) {
        *err = rc > 0 ? -rc : -EIO;
        return 0;
    }
    c->sq_posted = id;
    if (wr.send_flags & IBV_SEND_SIGNALED) {
        c->last_signalled = id;
        c->since_signal = 0;
        c->x->stats.signalled++;
    } else {
        c->since_signal++;
    }
    c->x->stats.posted++;
    return id;
}

/* Post one zero-length receive (for WRITE_WITH_IMM completions). */
static int post_recv(struct vconn *c)
{
    struct ibv_recv_wr wr, *bad = NULL;
    int rc;

    memset(&wr, 0, sizeof wr);
    rc = ibv_post_recv(c->id->qp, &wr, &bad);
    return rc == 0 ? 0 : rc > 0 ? -rc : -EIO;
}

/* Outbound: nothing signalled is outstanding but sends wait for a
 * completion: a signalled 8-byte write into the receiver's sink. */
static int maybe_nop(struct vconn *c)
{
    int err = 0;

    if (c->inflight == NULL || signalled_outstanding(c) ||
        c->state != V_UP) {
        return 0;
    }
    if ((uint64_t)(uintptr_t)c->inflight->priv[2] == 0) {
        return 0; /* its doorbell has not been posted yet */
    }
    if (post_write(c, c->word + 1, 8, c->word_mr->lkey,
                   c->remote_addr + c->cap, c->remote_rkey, 0, 0, 1,
                   &err) == 0) {
        /* Full send queue: a signalled WR is among the outstanding ones
         * (one in every VERBS__SIGNAL_EVERY), its completion comes. */
        return err == -EAGAIN ? 0 : err;
    }
    c->x->stats.nops++;
    return 0;
}

/* ---- ring ops over verbs ------------------------------------------------ */

static int op_write(void *ctx, size_t off, const void *src, size_t len)
{
    struct vconn *c = ctx;
    /* The record being written starts at head (ring.c advances head only
     * after a record's last write), and its writes all land at or after
     * that offset; only the next lap's first record lands below the dirty
     * range. */
    size_t rec = (size_t)(c->tx.head & (c->cap - 1));
    int err = 0;

    if (c->dirty && rec < c->dirty_lo) {
        /* Wrapped to the ring start: ship the part at the end first. */
        if (post_write(c, c->ring + c->dirty_lo, c->dirty_hi - c->dirty_lo,
                       c->ring_mr->lkey, c->remote_addr + c->dirty_lo,
                       c->remote_rkey, 0, 0, 0, &err) == 0) {
            return err;
        }
        c->dirty = 0;
    }
    memcpy(c->ring + off, src, len);
    if (!c->dirty) {
        c->dirty = 1;
        c->dirty_lo = rec;
        c->dirty_hi = off + len;
    } else {
        c->dirty_hi = TERN_MAX(c->dirty_hi, off + len);
    }
    return 0;
}

static int op_doorbell(void *ctx)
{
    struct vconn *c = ctx;
    uint32_t imm = (uint32_t)c->tx.head;
    uint64_t id;
    int err = 0;

    if (!c->dirty) {
        return 0;
    }
    if (c->imm_count + 1 >= VERBS__IMM_BUDGET) {
        imm |= VERBS__IMM_WAKE;
    }
    id = post_write(c, c->ring + c->dirty_lo, c->dirty_hi - c->dirty_lo,
                    c->ring_mr->lkey, c->remote_addr + c->dirty_lo,
                    c->remote_rkey, 1, imm, !signalled_outstanding(c), &err);
    if (id == 0) {
        return err;
    }
    c->dirty = 0;
    c->imm_heads[(c->imm_first + c->imm_count) % VERBS__IMM_BUDGET] =
        c->tx.head;
    c->imm_count++;
    c->x->stats.doorbells++;
    /* The sends written since the last doorbell complete with this WR (or
     * any later signalled one). */
    for (struct xport_send *q = c->unassigned; q != NULL; q = q->priv[0]) {
        q->priv[2] = (void *)(uintptr_t)id;
    }
    c->unassigned = NULL;
    return 0;
}

static int op_write_credit(void *ctx, uint64_t consumed, int wake)
{
    struct vconn *c = ctx;
    int err = 0;

    if (sq_room(c) < 1) {
        c->credit_owed = 1;
        return -EAGAIN;
    }
    if (wake && !c->may_wake) {
        wake = 0; /* the sender re-reads its credit word on a timer */
    }
    tern_put_u64((uint8_t *)c->word, consumed);
    if (post_write(c, c->word, 8, c->word_mr->lkey, c->remote_addr,
                   c->remote_rkey, wake, VERBS__IMM_CREDIT, 0, &err) == 0) {
        if (err == -EAGAIN) {
            c->credit_owed = 1;
        }
        return err;
    }
    if (wake) {
        c->may_wake = 0;
        c->x->stats.wakes++;
    }
    c->credit_owed = 0;
    return 0;
}

static const struct xport_ring_ops verbs_ring_ops = {
    .write = op_write,
    .doorbell = op_doorbell,
    .write_credit = op_write_credit,
};

/* ---- devices ------------------------------------------------------------ */

static void on_cq(uv_poll_t *h, int status, int events);

static void on_handle_closed(uv_handle_t *h)
{
    struct verbs_xport *x = h->data;
    x->handles--;
    maybe_finish(x);
}

static void on_dev_poll_closed(uv_handle_t *h)
{
    struct vdev *d = h->data;
    d->x->handles--;
    maybe_finish(d->x);
}

/* The transport's resources on device verbs, created on first use. */
static int vdev_get(struct verbs_xport *x,
                    struct ibv_context *verbs,
                    struct vdev **out /* OUT */)
{
    struct ibv_device_attr attr;
    struct vdev *d;
    int cqe = VERBS__CQ_WANT;
    int fl, rc;

    for (d = x->devs; d != NULL; d = d->next) {
        if (d->verbs == verbs) {
            *out = d;
            return 0;
        }
    }
    if (ibv_query_device(verbs, &attr) == 0 && attr.max_cqe > 0 &&
        attr.max_cqe < cqe) {
        cqe = attr.max_cqe;
    }
    d = tern_calloc(1, sizeof *d);
    if (d == NULL) {
        return -ENOMEM;
    }
    d->x = x;
    d->verbs = verbs;
    d->max_qps = (unsigned)cqe / (VERBS__SQ_DEPTH + VERBS__RQ_DEPTH + 1);
    d->pd = ibv_alloc_pd(verbs);
    d->chan = d->pd != NULL ? ibv_create_comp_channel(verbs) : NULL;
    d->cq = d->chan != NULL ? ibv_create_cq(verbs, cqe, d, d->chan, 0) : NULL;
    if (d->cq == NULL) {
        rc = errno != 0 ? -errno : -ENOMEM;
        goto err;
    }
    fl = fcntl(d->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(d->chan->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        rc = -errno;
        goto err;
    }
    if (ibv_req_notify_cq(d->cq, 0) != 0) {
        rc = -EIO;
        goto err;
    }
    rc = uv_poll_init(x->loop, &d->poll, d->chan->fd);
    if (rc != 0) {
        goto err;
    }
    d->poll.data = d;
    d->poll_open = 1;
    x->handles++;
    d->next = x->devs;
    x->devs = d;
    rc = uv_poll_start(&d->poll, UV_READABLE, on_cq);
    if (rc != 0) {
        return rc; /* freed with the transport */
    }
    *out = d;
    return 0;

err:
    if (d->cq != NULL) {
        ibv_destroy_cq(d->cq);
    }
    if (d->chan != NULL) {
        ibv_destroy_comp_channel(d->chan);
    }
    if (d->pd != NULL) {
        ibv_dealloc_pd(d->pd);
    }
    tern_free(d);
    return rc;
}

/* Release the verbs objects of every device (after their poll handles
 * closed and every QP and MR is gone). */
static void vdevs_destroy(struct verbs_xport *x)
{
    while (x->devs != NULL) {
        struct vdev *d = x->devs;
        x->devs = d->next;
        ibv_destroy_cq(d->cq);
        ibv_destroy_comp_channel(d->chan);
        ibv_dealloc_pd(d->pd);
        tern_free(d);
    }
}

/* ---- connections ------------------------------------------------------- */

static struct vconn *vconn_new(struct verbs_xport *x,
                               struct vpeer *p,
                               struct rdma_cm_id *id)
{
    struct vconn *c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        return NULL;
    }
    c->x = x;
    c->peer = p;
    c->id = id;
    c->started = uv_now(x->loop);
    id->context = c;
    c->next = x->conns;
    x->conns = c;
    sweep_kick(x);
    return c;
}

static struct vconn *vconn_by_qpn(struct verbs_xport *x, uint32_t qpn)
{
    for (struct vconn *c = x->conns; c != NULL; c = c->next) {
        if (c->has_qp && c->qp_num == qpn) {
            return c;
        }
    }
    return NULL;
}

/* Create c's QP on its device and post the receives. */
static int vconn_setup_qp(struct vconn *c)
{
    struct verbs_xport *x = c->x;
    struct ibv_qp_init_attr qa;
    unsigned inl = VERBS__INLINE_WANT;
    int rc;

    rc = vdev_get(x, c->id->verbs, &c->dev);
    if (rc != 0) {
        return rc;
    }
    if (c->dev->qps >= c->dev->max_qps) {
        return -ENOSPC;
    }
    for (;;) {
        memset(&qa, 0, sizeof qa);
        qa.send_cq = c->dev->cq;
        qa.recv_cq = c->dev->cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = VERBS__SQ_DEPTH;
        qa.cap.max_recv_wr = VERBS__RQ_DEPTH;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        qa.cap.max_inline_data = inl;
        qa.sq_sig_all = 0;
        if (rdma_create_qp(c->id, c->dev->pd, &qa) == 0) {
            break;
        }
        if (inl == 0) {
            return errno != 0 ? -errno : -EIO;
        }
        inl = inl > 64 ? 64 : 0; /* the device offers less inline room */
    }
    c->has_qp = 1;
    c->qp_num = c->id->qp->qp_num;
    c->dev->qps++;
    c->max_inline = qa.cap.max_inline_data;
    for (unsigned i = 0; i < VERBS__RQ_DEPTH; i++) {
        rc = post_recv(c);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* Free everything of c (its QP has been flushed or given up on). */
static void vconn_destroy(struct vconn *c)
{
    struct verbs_xport *x = c->x;
    struct vconn **pp = &x->conns;

    while (*pp != NULL && *pp != c) {
        pp = &(*pp)->next;
    }
    if (*pp == c) {
        *pp = c->next;
    }
    if (c->has_qp) {
        rdma_destroy_qp(c->id);
        c->dev->qps--;
    }
    if (c->ring_mr != NULL) {
        ibv_dereg_mr(c->ring_mr);
    }
    if (c->word_mr != NULL) {
        ibv_dereg_mr(c->word_mr);
    }
    if (c->id != NULL) {
        rdma_destroy_id(c->id);
    }
    free(c->ring);
    free(c->word);
    tern_free(c);
}

/* Free the connections that are closed and drained (or out of time). */
static void reap(struct verbs_xport *x)
{
    uint64_t now = uv_now(x->loop);
    struct vconn *c = x->conns;

    while (c != NULL) {
        struct vconn *next = c->next;
        if (c->state == V_CLOSING && (c->drained || now >= c->close_deadline)) {
            vconn_destroy(c);
        }
        c = next;
    }
}

/* Close a connection (idempotent, never frees c: reap does, later).
 * Outbound: the peer's queued and in-flight sends complete with status. */
static void vconn_close(struct vconn *c, int status)
{
    struct verbs_xport *x = c->x;
    struct ibv_qp_attr qa;
    int err = 0;

    if (c->state == V_CLOSING) {
        return;
    }
    vtrace(x, "%s conn %s peer %llu (state %d, established %d): status %d",
           c->peer != NULL ? "close outbound" : "close inbound",
           c->peer != NULL ? c->peer->base.address : "-",
           (unsigned long long)c->remote_id, (int)c->state, c->established,
           status);
    if (c->peer != NULL && c->peer->conn == c) {
        c->peer->conn = NULL;
        if (!c->established) {
            c->peer->base.retry_after = uv_now(x->loop) + x->retry_ms;
        }
        xport_sendq_fail(&c->peer->q, &x->done, status);
    }
    inflight_fail(c, status);
    c->state = V_CLOSING;
    c->close_deadline = uv_now(x->loop) + VERBS__DRAIN_MS;
    c->drained = 1;
    if (c->has_qp) {
        if (c->established) {
            (void)rdma_disconnect(c->id); /* QP to the error state */
        }
        memset(&qa, 0, sizeof qa);
        qa.qp_state = IBV_QPS_ERR;
        (void)ibv_modify_qp(c->id->qp, &qa, IBV_QP_STATE);
        /* The marker's flush completion comes after every earlier WR's. */
        if (sq_room(c) > 0) {
            struct ibv_sge sge = {(uintptr_t)c->word, 8,
                                  c->word_mr ? c->word_mr->lkey : 0};
            struct ibv_send_wr wr, *bad = NULL;
            memset(&wr, 0, sizeof wr);
            wr.wr_id = VERBS__WR_DRAIN;
            wr.sg_list = c->word_mr ? &sge : NULL;
            wr.num_sge = c->word_mr ? 1 : 0;
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.send_flags = IBV_SEND_SIGNALED;
            err = ibv_post_send(c->id->qp, &wr, &bad);
            c->drained = err != 0;
        }
    }
    if (c->drained) {
        uv_idle_start(&x->idle, on_idle);
    }
    sweep_kick(x);
}

/* ---- receiving --------------------------------------------------------- */

/* Deliver what c's ring holds up to the landed limit. The recv callback
 * may close the transport or c: stop as soon as it does. */
static void drain(struct vconn *c)
{
    struct verbs_xport *x = c->x;
    struct xport_ring_rec r;
    int rc = 0;

    if (!c->rx_ready || !x->started) {
        return;
    }
    if (c->wake_req) {
        c->rx.wake = 1;
        c->wake_req = 0;
    }
    while (!x->closing && (rc = xport_ring_rx_peek(&c->rx, &r)) == 1) {
        if (r.epoch > c->peer_epoch) {
            c->peer_epoch = r.epoch;
        }
        x->stats.delivered++;
        if (x->base.recv_cb != NULL) {
            x->base.recv_cb(x->base.recv_arg, c->remote_id, r.payload, r.len);
        }
        if (c->state == V_CLOSING) {
            return;
        }
        xport_ring_rx_consume(&c->rx);
        rc = xport_ring_rx_flush(&c->rx, 0);
        if (rc != 0 && rc != -EAGAIN) {
            vconn_close(c, TERN_ENOCONN);
            return;
        }
    }
    x->stats.fenced += c->rx.fenced;
    c->rx.fenced = 0;
    if (x->closing || c->state == V_CLOSING) {
        return;
    }
    if (rc < 0) {
        x->stats.corrupt++;
        vconn_close(c, TERN_ENOCONN);
        return;
    }
    rc = xport_ring_rx_flush(&c->rx, 1);
    if (rc != 0 && rc != -EAGAIN) {
        vconn_close(c, TERN_ENOCONN);
    }
}

/* Handle one work completion. Delivery and queue flushing happen after
 * the CQ is dry (process_pending). */
static void handle_wc(struct verbs_xport *x, const struct ibv_wc *wc)
{
    struct vconn *c = vconn_by_qpn(x, wc->qp_num);
    uint32_t imm;

    if (c == NULL) {
        return; /* a QP already destroyed */
    }
    if (wc->wr_id == VERBS__WR_DRAIN) {
        c->drained = 1;
        uv_idle_start(&x->idle, on_idle);
        return;
    }
    if (c->state == V_CLOSING) {
        return;
    }
    if (wc->status != IBV_WC_SUCCESS) {
        vtrace(x, "qp %u wr %llu: %s", wc->qp_num,
               (unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status));
        if (wc->status == IBV_WC_REM_ACCESS_ERR ||
            wc->status == IBV_WC_REM_INV_REQ_ERR ||
            wc->status == IBV_WC_REM_OP_ERR) {
            x->stats.nic_rejects++;
        } else if (wc->status == IBV_WC_RETRY_EXC_ERR ||
                   wc->status == IBV_WC_RNR_RETRY_EXC_ERR) {
            x->stats.retry_errors++;
        }
        vconn_close(c, x->closing ? TERN_ECANCELED : TERN_ENOCONN);
        return;
    }
    switch (wc->opcode) {
    case IBV_WC_RECV_RDMA_WITH_IMM:
        if (post_recv(c) != 0) {
            vconn_close(c, TERN_ENOCONN);
            return;
        }
        imm = ntohl(wc->imm_data);
        if (c->peer == NULL && c->state == V_CONNECTING) {
            /* Data before the CM's RTU: what the COMM_EST async event
             * would tell the CM (we do not read async events). */
            (void)rdma_notify(c->id, IBV_EVENT_COMM_EST);
        }
        if (c->peer == NULL && imm != VERBS__IMM_CREDIT && c->rx_ready) {
            xport_ring_rx_landed(&c->rx, imm & ~(uint32_t)63);
            c->wake_req |= (imm & VERBS__IMM_WAKE) != 0;
            c->may_wake = 1;
        }
        c->pending = 1;
        break;
    case IBV_WC_RDMA_WRITE:
        if (wc->wr_id > c->sq_retired && wc->wr_id <= c->sq_posted) {
            c->sq_retired = wc->wr_id;
        }
        if (c->peer != NULL) {
            inflight_complete(c, wc->wr_id);
        }
        c->pending = 1;
        break;
    default:
        break;
    }
}

/* After a CQ batch: deliver, return credit, flush queues, post nops. */
static void process_pending(struct verbs_xport *x)
{
    for (struct vconn *c = x->conns; c != NULL && !x->closing; c = c->next) {
        if (!c->pending || c->state == V_CLOSING) {
            continue;
        }
        c->pending = 0;
        if (c->peer == NULL) {
            drain(c);
            if (c->credit_owed && c->state != V_CLOSING && c->rx_ready &&
                x->started) {
                int rc = xport_ring_rx_flush(&c->rx, 1);
                if (rc != 0 && rc != -EAGAIN) {
                    vconn_close(c, TERN_ENOCONN);
                }
            }
        } else if (c->state == V_UP) {
            if (c->peer->q.head != NULL) {
                flush_queue(c->peer);
            }
            if (c->state == V_UP && maybe_nop(c) != 0) {
                vconn_close(c, TERN_ENOCONN);
            }
        }
    }
}

/* Poll d's CQ dry, then deliver and flush (process_pending). Returns the
 * number of completions handled. */
static unsigned cq_service(struct vdev *d)
{
    struct verbs_xport *x = d->x;
    struct ibv_wc wc[VERBS__POLL_BATCH];
    unsigned total = 0;
    int n;

    while ((n = ibv_poll_cq(d->cq, VERBS__POLL_BATCH, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            handle_wc(x, &wc[i]);
        }
        total += (unsigned)n;
    }
    if (n < 0) {
        /* The CQ is broken: every connection on this device goes. */
        for (struct vconn *c = x->conns; c != NULL; c = c->next) {
            if (c->dev == d) {
                vconn_close(c, TERN_ENOCONN);
                c->drained = 1;
            }
        }
        return total;
    }
    process_pending(x);
    return total;
}

static void on_cq(uv_poll_t *h, int status, int events)
{
    struct vdev *d = h->data;
    struct ibv_cq *cq;
    void *cq_ctx;
    unsigned nev = 0;

    (void)status;
    (void)events;
    /* H6: read every channel event, ack them in one call, re-arm, then
     * poll (a completion arriving after the poll raises a new event). */
    while (ibv_get_cq_event(d->chan, &cq, &cq_ctx) == 0) {
        nev++;
    }
    if (nev > 0) {
        ibv_ack_cq_events(d->cq, nev);
    }
    (void)ibv_req_notify_cq(d->cq, 0);
    (void)cq_service(d);
}

/* ---- busy-poll ----------------------------------------------------------
 * While a round runs (spin_arm: a send was posted or queued), the spin
 * idle handle keeps the loop from sleeping and polls every CQ on each
 * iteration, so a completion is handled without the completion channel's
 * wake-up. The round ends at the first delivered message (what it waited
 * for), at the deadline, or when the budget is set to 0. Channel events
 * still come (notification stays armed) and then find the CQ empty. */
static void on_spin(uv_idle_t *h)
{
    struct verbs_xport *x = h->data;
    uint64_t delivered = x->stats.delivered;
    unsigned found = 0;

    x->stats.spins++;
    for (struct vdev *d = x->devs; d != NULL && !x->closing; d = d->next) {
        found += cq_service(d);
    }
    if (found > 0) {
        x->stats.spin_hits++;
    }
    if (x->closing || x->stats.delivered != delivered ||
        xport_spin_expired(&x->spin)) {
        xport_spin_stop(&x->spin);
    }
}

static void spin_arm(struct verbs_xport *x)
{
    if (!x->closing) {
        xport_spin_arm(&x->spin);
    }
}

/* ---- connection setup ---------------------------------------------------- */

static int set_ack_timeout(struct verbs_xport *x, struct rdma_cm_id *id)
{
    uint8_t t = x->ack_timeout;
    return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t,
                           sizeof t) != 0
               ? -errno
               : 0;
}

/* Outbound: route resolved. Create the QP, register the control area,
 * connect. */
static int outbound_connect(struct vconn *c)
{
    struct verbs_xport *x = c->x;
    struct rdma_conn_param cp;
    uint8_t pd[VERBS__PD_LEN];
    int rc = vconn_setup_qp(c);

    if (rc != 0) {
        return rc;
    }
    if (posix_memalign((void **)&c->word, 64, 64) != 0) {
        return -ENOMEM;
    }
    memset(c->word, 0, 64);
    c->word_mr = ibv_reg_mr(c->dev->pd, c->word, 64,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (c->word_mr == NULL) {
        return errno != 0 ? -errno : -ENOMEM;
    }
    pd_encode(pd, VERBS__PD_CONNECT, x->base.self_id, c->peer->base.id,
              (uintptr_t)c->word, c->word_mr->rkey, 0, x->epoch);
    memset(&cp, 0, sizeof cp);
    cp.private_data = pd;
    cp.private_data_len = sizeof pd;
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = VERBS__RETRY_COUNT;
    cp.rnr_retry_count = VERBS__RNR_RETRY;
    c->state = V_CONNECTING;
    return rdma_connect(c->id, &cp) != 0 ? -errno : 0;
}

/* Outbound: ESTABLISHED with the receiver's ring coordinates. Allocate the
 * mirror (the receiver's size) and start sending. */
static int outbound_established(struct vconn *c,
                                const uint8_t *priv,
                                size_t priv_len)
{
    int rc = pd_check(priv, priv_len, VERBS__PD_ACCEPT);
    size_t cap;

    if (rc != 0) {
        return rc;
    }
    cap = tern_get_u32(priv + 36);
    if (tern_get_u64(priv + 8) != c->x->base.self_id ||
        tern_get_u64(priv + 16) != c->peer->base.id ||
        !xport_ring_cap_valid(cap)) {
        return TERN_EMALFORMED;
    }
    /* The mirror needs no zeroing: only bytes written since are posted. */
    if (posix_memalign((void **)&c->ring, 4096, cap) != 0) {
        return -ENOMEM;
    }
    c->ring_mr = ibv_reg_mr(c->dev->pd, c->ring, cap, IBV_ACCESS_LOCAL_WRITE);
    if (c->ring_mr == NULL) {
        return errno != 0 ? -errno : -ENOMEM;
    }
    c->remote_id = c->peer->base.id;
    c->remote_addr = tern_get_u64(priv + 24);
    c->remote_rkey = tern_get_u32(priv + 32);
    c->cap = cap;
    xport_ring_tx_init(&c->tx, &verbs_ring_ops, c, cap, c->word);
    c->tx.epoch = c->x->epoch;
    c->established = 1;
    c->state = V_UP;
    c->x->stats.connects++;
    return 0;
}

/* A sender connects again (it has given up its previous connection to
 * us): deliver what its older connections hold, then close them, before
 * the new one exists, so the sender's order is kept. Writes of the old
 * connection still on the wire are lost with it (the sender already
 * failed those sends). */
static void supersede_inbound(struct verbs_xport *x, uint64_t sender)
{
    for (struct vdev *d = x->devs; d != NULL && !x->closing; d = d->next) {
        (void)cq_service(d); /* doorbells already in the CQ count */
    }
    for (struct vconn *c = x->conns; c != NULL && !x->closing; c = c->next) {
        if (c->peer == NULL && c->remote_id == sender &&
            c->state != V_CLOSING) {
            drain(c);
            vconn_close(c, TERN_ENOCONN);
        }
    }
}

/* Inbound: connect request. Check it, register a zeroed ring, accept.
 * On failure the caller rejects and destroys id (c no longer owns it). */
static int inbound_accept(struct verbs_xport *x,
                          struct rdma_cm_id *id,
                          const uint8_t *priv,
                          size_t priv_len)
{
    struct rdma_conn_param cp;
    uint8_t pd[VERBS__PD_LEN];
    struct vconn *c;
    int rc = pd_check(priv, priv_len, VERBS__PD_CONNECT);

    if (rc != 0 || tern_get_u64(priv + 16) != x->base.self_id) {
        return rc != 0 ? rc : TERN_EMALFORMED;
    }
    if (tern_get_u64(priv + 40) < x->fence) {
        x->stats.rejected++;
        return TERN_ECANCELED; /* a deposed sender: no access at all */
    }
    supersede_inbound(x, tern_get_u64(priv + 8));
    if (x->closing) {
        return TERN_ESHUTDOWN; /* a recv callback closed the transport */
    }
    c = vconn_new(x, NULL, id);
    if (c == NULL) {
        return -ENOMEM;
    }
    c->state = V_CONNECTING;
    c->remote_id = tern_get_u64(priv + 8);
    c->remote_addr = tern_get_u64(priv + 24);
    c->remote_rkey = tern_get_u32(priv + 32);
    c->peer_epoch = tern_get_u64(priv + 40);
    c->cap = x->ring_bytes;
    rc = set_ack_timeout(x, id);
    if (rc == 0) {
        rc = vconn_setup_qp(c);
    }
    if (rc == 0 &&
        (posix_memalign((void **)&c->ring, 4096, c->cap + VERBS__SINK) != 0 ||
         posix_memalign((void **)&c->word, 64, 64) != 0)) {
        rc = -ENOMEM;
    }
    if (rc == 0) {
        memset(c->ring, 0, c->cap + VERBS__SINK);
        memset(c->word, 0, 64);
        c->ring_mr =
            ibv_reg_mr(c->dev->pd, c->ring, c->cap + VERBS__SINK,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        c->word_mr = ibv_reg_mr(c->dev->pd, c->word, 64, IBV_ACCESS_LOCAL_WRITE);
        if (c->ring_mr == NULL || c->word_mr == NULL) {
            rc = -ENOMEM;
        }
    }
    if (rc != 0) {
        goto fail;
    }
    xport_ring_rx_init(&c->rx, &verbs_ring_ops, c, c->ring, c->cap);
    c->rx.fence = x->fence;
    xport_ring_rx_landed(&c->rx, 0); /* bounded from the start */
    c->rx_ready = 1;
    pd_encode(pd, VERBS__PD_ACCEPT, c->remote_id, x->base.self_id,
              (uintptr_t)c->ring, c->ring_mr->rkey, (uint32_t)c->cap,
              x->fence);
    memset(&cp, 0, sizeof cp);
    cp.private_data = pd;
    cp.private_data_len = sizeof pd;
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = VERBS__RETRY_COUNT;
    cp.rnr_retry_count = VERBS__RNR_RETRY;
    if (rdma_accept(id, &cp) != 0) {
        rc = -errno;
        goto fail;
    }
    return 0;

fail:
    /* Give id back to the caller (it rejects and destroys it). */
    if (c->has_qp) {
        rdma_destroy_qp(id);
        c->has_qp = 0;
        c->dev->qps--;
    }
    c->id = NULL;
    id->context = NULL;
    vconn_close(c, TERN_ENOCONN);
    return rc;
}

static void on_cm_event(struct verbs_xport *x,
                        struct rdma_cm_id *id,
                        enum rdma_cm_event_type type,
                        const uint8_t *priv,
                        size_t priv_len)
{
    struct vconn *c = id->context;
    int rc = 0;

    vtrace(x, "cm event %s on %s", rdma_event_str(type),
           c == NULL         ? "-"
           : c->peer != NULL ? c->peer->base.address
                             : "inbound");
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        rc = x->closing ? TERN_ESHUTDOWN
                        : inbound_accept(x, id, priv, priv_len);
        if (rc != 0) {
            vtrace(x, "reject connect request: %s", tern_strerror(rc));
            (void)rdma_reject(id, NULL, 0);
            rdma_destroy_id(id);
        }
        return;
    }
    if (c == NULL || c->state == V_CLOSING) {
        return;
    }
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        rc = set_ack_timeout(x, id);
        if (rc == 0) {
            rc = rdma_resolve_route(id, (int)x->connect_ms) != 0 ? -errno : 0;
        }
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        rc = outbound_connect(c);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (c->peer != NULL) {
            rc = outbound_established(c, priv, priv_len);
            if (rc == 0) {
                flush_queue(c->peer);
            }
        } else {
            c->established = 1;
            c->state = V_UP;
            x->stats.accepts++;
            c->pending = 1;
            process_pending(x);
        }
        break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (c->peer == NULL && c->dev != NULL) {
            /* The sender is gone: deliver what it announced first. */
            cq_service(c->dev);
            if (c->state != V_CLOSING) {
                drain(c);
            }
        }
        vconn_close(c, TERN_ENOCONN);
        break;
    default: /* errors, rejections, unreachable, device removal */
        vconn_close(c, TERN_ENOCONN);
        break;
    }
    if (rc != 0) {
        vtrace(x, "cm event %s: %s", rdma_event_str(type), tern_strerror(rc));
        vconn_close(c, TERN_ENOCONN);
    }
}

static void on_cm(uv_poll_t *h, int status, int events)
{
    struct verbs_xport *x = h->data;
    struct rdma_cm_event *ev;

    (void)status;
    (void)events;
    while (rdma_get_cm_event(x->ech, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type type = ev->event;
        uint8_t priv[VERBS__PD_LEN];
        size_t priv_len = 0;

        if (ev->param.conn.private_data != NULL) {
            priv_len = TERN_MIN((size_t)ev->param.conn.private_data_len,
                                sizeof priv);
            memcpy(priv, ev->param.conn.private_data, priv_len);
        }
        rdma_ack_cm_event(ev);
        on_cm_event(x, id, type, priv, priv_len);
    }
}

/* ---- sending ----------------------------------------------------------- */

/* Forget doorbells the receiver has consumed past (their RECVs are
 * re-posted). */
static void imm_retire(struct vconn *c)
{
    while (c->imm_count > 0 &&
           c->imm_heads[c->imm_first] <= c->tx.credit) {
        c->imm_first = (c->imm_first + 1) % VERBS__IMM_BUDGET;
        c->imm_count--;
    }
}

/* Write one message into the peer's ring (no doorbell). Returns 0,
 * -EAGAIN (no ring space, send-queue room or doorbell budget: nothing
 * written), TERN_ETOOBIG, or another negative code (c is broken). */
static int try_write(struct vconn *c,
                     struct xport_send *req,
                     const struct xport_iov *iov,
                     unsigned n,
                     size_t total)
{
    int rc = xport_ring_tx_refresh(&c->tx);

    if (rc != 0) {
        return rc;
    }
    imm_retire(c);
    if (sq_room(c) < VERBS__SQ_RESERVE || c->imm_count >= VERBS__IMM_BUDGET) {
        return -EAGAIN;
    }
    rc = xport_ring_tx_write(&c->tx, iov, n, total);
    if (rc != 0) {
        return rc;
    }
    req->priv[0] = NULL;
    req->priv[2] = (void *)(uintptr_t)0;
    if (c->inflight_tail != NULL) {
        c->inflight_tail->priv[0] = req;
    } else {
        c->inflight = req;
    }
    c->inflight_tail = req;
    if (c->unassigned == NULL) {
        c->unassigned = req;
    }
    return 0;
}

/* Write queued messages into the ring while space lasts; one doorbell. */
static void flush_queue(struct vpeer *p)
{
    struct verbs_xport *x = p->x;
    struct vconn *c = p->conn;
    int wrote = 0;

    if (c == NULL || c->state != V_UP) {
        return;
    }
    while (p->q.head != NULL) {
        struct xport_qmsg *m = p->q.head;
        struct xport_iov iov = {m->data, m->len};
        int rc = try_write(c, m->req, &iov, 1, m->len);
        if (rc == -EAGAIN) {
            x->stats.credit_waits++;
            break;
        }
        (void)xport_sendq_pop(&p->q);
        if (rc != 0) {
            xport_done_push(&x->done, m->req,
                            rc == TERN_ETOOBIG ? rc : TERN_ENOCONN);
            tern_free(m);
            if (rc != TERN_ETOOBIG) {
                vconn_close(c, TERN_ENOCONN);
                return;
            }
            continue;
        }
        tern_free(m);
        wrote = 1;
    }
    if (wrote && xport_ring_tx_doorbell(&c->tx) != 0) {
        vconn_close(c, TERN_ENOCONN);
        return;
    }
    if (p->q.head != NULL) {
        sweep_kick(x);
    }
}

static int peer_connect(struct vpeer *p)
{
    struct verbs_xport *x = p->x;
    struct sockaddr_in dst, src = x->bind_sa;
    struct rdma_cm_id *id = NULL;
    struct vconn *c;

    if (xport_parse_ipv4(p->base.address, &dst) != 0) {
        return TERN_EINVAL;
    }
    if (rdma_create_id(x->ech, &id, NULL, RDMA_PS_TCP) != 0) {
        return errno == ENOMEM ? -ENOMEM : TERN_ENOCONN;
    }
    c = vconn_new(x, p, id);
    if (c == NULL) {
        rdma_destroy_id(id);
        return -ENOMEM;
    }
    c->state = V_RESOLVING;
    src.sin_port = 0;
    p->conn = c;
    if (rdma_resolve_addr(id, (struct sockaddr *)&src,
                          (struct sockaddr *)&dst, (int)x->connect_ms) != 0) {
        vconn_close(c, TERN_ENOCONN);
        return TERN_ENOCONN;
    }
    return 0;
}

/* Find or create the peer for id; follow an address change. */
static int peer_get(struct verbs_xport *x,
                    uint64_t id,
                    const char *address,
                    struct vpeer **out /* OUT */)
{
    struct xport_peer *bp;
    size_t len = strlen(address);
    int rc;

    if (len == 0 || len >= XPORT_IPV4_ADDR_MAX) {
        return TERN_EINVAL;
    }
    if (xport_peer_find(x->peers, id, address, &bp) == XPORT_PEER_SAME) {
        *out = (struct vpeer *)bp;
        return 0;
    }
    if (bp != NULL && ((struct vpeer *)bp)->conn != NULL) {
        vconn_close(((struct vpeer *)bp)->conn, TERN_ENOCONN);
    }
    rc = xport_peer_set(&x->peers, &bp, sizeof(struct vpeer), id, address);
    if (rc != 0) {
        return rc;
    }
    ((struct vpeer *)bp)->x = x;
    *out = (struct vpeer *)bp;
    return 0;
}

static int verbs_send(struct xport *base,
                      struct xport_send *req,
                      uint64_t peer_id,
                      const char *peer_address,
                      const struct xport_iov *iov,
                      unsigned n)
{
    struct verbs_xport *x = (struct verbs_xport *)base;
    struct vpeer *p;
    struct vconn *c;
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
    c = p->conn;
    if (c != NULL && c->state == V_UP && p->q.head == NULL) {
        /* Fast path: straight into the peer's ring (the only copy). */
        rc = try_write(c, req, iov, n, total);
        if (rc == 0) {
            rc = xport_ring_tx_doorbell(&c->tx);
            if (rc != 0) {
                vconn_close(c, TERN_ENOCONN); /* fails req too */
            } else {
                spin_arm(x);
            }
            return 0;
        }
        if (rc == TERN_ETOOBIG) {
            xport_done_push(&x->done, req, rc);
            return 0;
        }
        if (rc != -EAGAIN) {
            vconn_close(c, TERN_ENOCONN);
            xport_done_push(&x->done, req, TERN_ENOCONN);
            return 0;
        }
        x->stats.credit_waits++;
    }
    if (xport_sendq_full(&p->q, total, x->max_queued)) {
        xport_done_push(&x->done, req, TERN_EBUSY);
        return 0;
    }
    if (p->conn == NULL) {
        if (uv_now(x->loop) < p->base.retry_after) {
            xport_done_push(&x->done, req, TERN_ENOCONN);
            return 0;
        }
        rc = peer_connect(p);
        if (rc != 0) {
            if (rc == -ENOMEM || rc == TERN_EINVAL) {
                return rc;
            }
            p->base.retry_after = uv_now(x->loop) + x->retry_ms;
            xport_done_push(&x->done, req, TERN_ENOCONN);
            return 0;
        }
    }
    rc = xport_sendq_push(&p->q, req, iov, n, total);
    if (rc == 0) {
        sweep_kick(x);
        spin_arm(x);
    }
    return rc;
}

/* ---- timers ------------------------------------------------------------- */

/* Connect timeouts, drain deadlines of closed connections, and the
 * credit re-read of senders with queued messages. Runs only while one of
 * those exists. */
static void on_sweep(uv_timer_t *t)
{
    struct verbs_xport *x = t->data;
    uint64_t now = uv_now(x->loop);
    int needed = 0;

    for (struct vconn *c = x->conns; c != NULL; c = c->next) {
        switch (c->state) {
        case V_RESOLVING:
        case V_CONNECTING:
            if (now - c->started >= x->connect_ms) {
                vtrace(x, "connect timeout after %llu ms",
                       (unsigned long long)(now - c->started));
                x->stats.connect_timeouts++;
                vconn_close(c, TERN_ENOCONN);
            }
            needed = 1;
            break;
        case V_CLOSING:
            needed = 1;
            break;
        case V_UP:
            if (c->peer != NULL && c->peer->conn == c &&
                c->peer->q.head != NULL) {
                flush_queue(c->peer);
                needed = 1;
            }
            break;
        }
    }
    reap(x);
    if (!needed || x->finishing) {
        uv_timer_stop(&x->sweep);
    }
    maybe_finish(x);
}

static void sweep_kick(struct verbs_xport *x)
{
    if (!x->finishing && !uv_is_active((uv_handle_t *)&x->sweep)) {
        uv_timer_start(&x->sweep, on_sweep, VERBS__SWEEP_MS, VERBS__SWEEP_MS);
    }
}

/* ---- lifecycle --------------------------------------------------------- */

static void verbs_free(struct xport *base)
{
    struct verbs_xport *x = (struct verbs_xport *)base;
    xport_peers_free(&x->peers);
    tern_free(x);
}

static void on_idle_closed(uv_handle_t *h)
{
    struct verbs_xport *x = h->data;
    vdevs_destroy(x);
    if (x->ech != NULL) {
        rdma_destroy_event_channel(x->ech);
    }
    xport__closed(&x->base, verbs_free);
}

/* Closing: once every connection is freed and every completion ran,
 * close the handles; once they are closed, free the verbs objects. */
static void maybe_finish(struct verbs_xport *x)
{
    if (!x->closing || x->conns != NULL || !xport_done_empty(&x->done)) {
        return;
    }
    if (!x->finishing) {
        x->finishing = 1;
        xport_spin_stop(&x->spin);
        uv_close((uv_handle_t *)&x->cm_poll, on_handle_closed);
        uv_close((uv_handle_t *)&x->sweep, on_handle_closed);
        uv_close((uv_handle_t *)&x->spin.idle, on_handle_closed);
        for (struct vdev *d = x->devs; d != NULL; d = d->next) {
            if (d->poll_open) {
                d->poll_open = 0;
                uv_close((uv_handle_t *)&d->poll, on_dev_poll_closed);
            }
        }
        return;
    }
    if (x->handles > 0 || x->idle_closing) {
        return;
    }
    x->idle_closing = 1;
    uv_close((uv_handle_t *)&x->idle, on_idle_closed);
}

static int verbs_start(struct xport *base)
{
    struct verbs_xport *x = (struct verbs_xport *)base;

    if (x->closing) {
        return TERN_ESHUTDOWN;
    }
    if (!x->started) {
        x->started = 1;
        for (struct vconn *c = x->conns; c != NULL; c = c->next) {
            c->pending |= c->peer == NULL;
        }
        process_pending(x);
    }
    return 0;
}

static size_t verbs_max_message(const struct xport *base)
{
    return xport_ring_max_payload(
        ((const struct verbs_xport *)base)->ring_bytes);
}

static void verbs_close(struct xport *base)
{
    struct verbs_xport *x = (struct verbs_xport *)base;

    if (x->closing) {
        return;
    }
    x->closing = 1;
    if (x->listen_id != NULL) {
        rdma_destroy_id(x->listen_id); /* pending requests go with it */
        x->listen_id = NULL;
    }
    for (struct vpeer *p = peer_first(x); p != NULL; p = peer_next(p)) {
        xport_sendq_fail(&p->q, &x->done, TERN_ECANCELED);
    }
    for (struct vconn *c = x->conns; c != NULL; c = c->next) {
        vconn_close(c, TERN_ECANCELED);
    }
    uv_idle_start(&x->idle, on_idle); /* reaps and finishes */
}

static void verbs_get_stats(const struct xport *base, struct xport_stats *out)
{
    const struct verbs_xport *x = (const struct verbs_xport *)base;

    out->doorbells = x->stats.doorbells;
    out->spins = x->stats.spins;
    out->spin_hits = x->stats.spin_hits;
    out->credit_waits = x->stats.credit_waits;
    out->fenced = x->stats.fenced;
    out->corrupt = x->stats.corrupt;
}

static const struct xport_ops verbs_ops = {
    .name = "verbs",
    .start = verbs_start,
    .send = verbs_send,
    .max_message = verbs_max_message,
    .close = verbs_close,
    .set_epoch = xport_verbs_set_epoch,
    .set_fence = xport_verbs_set_fence,
    .set_busy_poll = xport_verbs_set_busy_poll,
    .get_stats = verbs_get_stats,
};

int xport_verbs_new(uv_loop_t *loop,
                    uint64_t self_id,
                    const char *bind_address,
                    const struct xport_verbs_options *opts,
                    struct xport **out,
                    char *errmsg)
{
    struct verbs_xport *x;
    struct sockaddr_in sa;
    int fl;
    int rc;

    if (loop == NULL || out == NULL || bind_address == NULL ||
        xport_parse_ipv4(bind_address, &sa) != 0) {
        tern_errmsg_printf(errmsg, "verbs: bad bind address '%s' (want ip:port)",
                           bind_address ? bind_address : "(null)");
        return TERN_EINVAL;
    }
    x = tern_calloc(1, sizeof *x);
    if (x == NULL) {
        tern_errmsg_printf(errmsg, "verbs: out of memory");
        return -ENOMEM;
    }
    x->base.ops = &verbs_ops;
    x->base.self_id = self_id;
    x->loop = loop;
    x->bind_sa = sa;
    x->ring_bytes = VERBS__DEFAULT_RING;
    x->max_queued = VERBS__DEFAULT_MAX_QUEUED;
    x->retry_ms = VERBS__DEFAULT_RETRY_MS;
    x->connect_ms = VERBS__DEFAULT_CONNECT_MS;
    x->ack_timeout = VERBS__DEFAULT_ACK_TMO;
    if (opts != NULL) {
        x->ring_bytes = opts->ring_bytes ? opts->ring_bytes : x->ring_bytes;
        x->max_queued =
            opts->max_queued_bytes ? opts->max_queued_bytes : x->max_queued;
        x->retry_ms = opts->connect_retry_ms ? opts->connect_retry_ms
                                             : x->retry_ms;
        x->connect_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms
                                                 : x->connect_ms;
        x->ack_timeout = opts->ack_timeout ? (uint8_t)opts->ack_timeout
                                           : x->ack_timeout;
    }
    if (!xport_ring_cap_valid(x->ring_bytes) ||
        x->ring_bytes > UINT32_MAX / 2 || x->ack_timeout > 31) {
        tern_errmsg_printf(errmsg,
                           "verbs: ring_bytes %zu must be a power of two in "
                           "[%u, 1 GiB], ack_timeout <= 31",
                           x->ring_bytes, XPORT_RING_MIN_CAP);
        rc = TERN_EINVAL;
        goto err;
    }
    x->ech = rdma_create_event_channel();
    if (x->ech == NULL) {
        rc = errno != 0 ? -errno : -ENODEV;
        tern_errmsg_printf(errmsg, "verbs: no rdma_cm: %s", tern_strerror(rc));
        goto err;
    }
    fl = fcntl(x->ech->fd, F_GETFL);
    if (fl < 0 || fcntl(x->ech->fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
        rdma_create_id(x->ech, &x->listen_id, NULL, RDMA_PS_TCP) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "verbs: rdma_cm id: %s", tern_strerror(rc));
        goto err_ech;
    }
    if (rdma_bind_addr(x->listen_id, (struct sockaddr *)&sa) != 0 ||
        rdma_listen(x->listen_id, VERBS__BACKLOG) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg,
                           "verbs: bind/listen %s: %s (an RDMA-capable "
                           "interface's IPv4 address is needed, not lo)",
                           bind_address, tern_strerror(rc));
        goto err_ech;
    }
    /* uv_idle_init and uv_timer_init cannot fail. */
    (void)uv_idle_init(loop, &x->idle);
    x->idle.data = x;
    xport_done_init(&x->done, &x->idle, on_idle);
    (void)uv_timer_init(loop, &x->sweep);
    x->sweep.data = x;
    xport_spin_init(&x->spin, loop, x, on_spin);
    x->handles = 2; /* sweep, spin */
    rc = uv_poll_init(loop, &x->cm_poll, x->ech->fd);
    if (rc != 0) {
        /* Only the timer and the idle handles exist: close them. */
        tern_errmsg_printf(errmsg, "verbs: poll: %s", tern_strerror(rc));
        rdma_destroy_id(x->listen_id);
        x->listen_id = NULL;
        x->closing = 1;
        x->finishing = 1;
        uv_close((uv_handle_t *)&x->sweep, on_handle_closed);
        uv_close((uv_handle_t *)&x->spin.idle, on_handle_closed);
        return rc; /* freed asynchronously, no callback */
    }
    x->cm_poll.data = x;
    x->handles++;
    rc = uv_poll_start(&x->cm_poll, UV_READABLE, on_cm);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "verbs: poll: %s", tern_strerror(rc));
        verbs_close(&x->base);
        return rc;
    }
    *out = &x->base;
    return 0;

err_ech:
    if (x->listen_id != NULL) {
        rdma_destroy_id(x->listen_id);
    }
    rdma_destroy_event_channel(x->ech);
err:
    tern_free(x);
    return rc;
}

/* ---- verbs-specific controls -------------------------------------------- */

int xport_verbs_set_epoch(struct xport *base, uint64_t epoch)
{
    struct verbs_xport *x = (struct verbs_xport *)base;

    if (base == NULL || base->ops != &verbs_ops) {
        return TERN_EINVAL;
    }
    x->epoch = epoch;
    for (struct vconn *c = x->conns; c != NULL; c = c->next) {
        if (c->peer != NULL && c->state == V_UP) {
            c->tx.epoch = epoch;
        }
    }
    return 0;
}

int xport_verbs_set_fence(struct xport *base, uint64_t fence)
{
    struct verbs_xport *x = (struct verbs_xport *)base;

    if (base == NULL || base->ops != &verbs_ops) {
        return TERN_EINVAL;
    }
    x->fence = fence;
    for (struct vconn *c = x->conns; c != NULL; c = c->next) {
        struct ibv_qp_attr qa;
        if (c->peer != NULL || c->state == V_CLOSING || !c->rx_ready) {
            continue;
        }
        c->rx.fence = fence;
        if (c->peer_epoch >= fence || c->revoked) {
            continue;
        }
        /* The NIC now NAKs this sender's writes into our ring. */
        memset(&qa, 0, sizeof qa);
        qa.qp_access_flags = 0;
        if (ibv_modify_qp(c->id->qp, &qa, IBV_QP_ACCESS_FLAGS) != 0) {
            /* Cannot revoke in place: tear the QP down instead. */
            vconn_close(c, TERN_ENOCONN);
            continue;
        }
        c->revoked = 1;
        x->stats.revoked++;
    }
    return 0;
}

int xport_verbs_set_busy_poll(struct xport *base, unsigned us)
{
    struct verbs_xport *x = (struct verbs_xport *)base;
    if (base == NULL || base->ops != &verbs_ops) {
        return TERN_EINVAL;
    }
    xport_spin_set(&x->spin, us);
    return 0;
}

int xport_verbs_stats(const struct xport *base,
                      struct xport_verbs_stats *out)
{
    const struct verbs_xport *x = (const struct verbs_xport *)base;

    if (base == NULL || base->ops != &verbs_ops || out == NULL) {
        return TERN_EINVAL;
    }
    *out = x->stats;
    return 0;
}
