/*
 * verbs backend of the transport interface (xport_verbs_new): the
 * one-sided ring protocol of rdma/ring.c over RDMA RC queue pairs, set up
 * with librdmacm, driven from the node's libuv loop.
 * Tested on soft-RoCE (rxe) by tests/hw/ through tests/rxe/run.sh.
 *
 * Peers, the send path, queues, delivery and the software fence are the
 * ring driver's (rdma/ringx.c); this file is the medium: posting,
 * completions, devices, the NIC fence and busy-polling.
 *
 * Topology (as shm): per ordered pair (sender S, receiver R) one RC QP,
 * set up by S with rdma_cm, lazily on the first send (rdma/verbs_cm.c:
 * resolution, connect/accept and the handshake in which both sides prove
 * the cluster secret, version 2, documented there). Only once S has
 * proved it does R register a zeroed ring of cap bytes plus a 64-byte
 * sink with REMOTE_WRITE; S keeps a local MIRROR of the ring (same layout, the
 * ring protocol's single copy of the caller's bytes goes there) and a 64-byte
 * control area whose first 8 bytes are the credit word, registered with
 * REMOTE_WRITE. Per transport and per RDMA device there is ONE protection
 * domain, ONE completion channel and ONE CQ shared by all QPs on that
 * device; completions are routed to connections by QP number.
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
 * The first RECV posted on every QP takes the peer's handshake message
 * (a SEND of VERBS__HS_LEN bytes into a buffer registered for local
 * access only); behind it VERBS__RQ_DEPTH - 1 zero-length RECVs are
 * pre-posted and re-posted before the ring is drained. Any other
 * two-sided message, and any doorbell before the handshake completed,
 * closes the connection (counted in auth_refused). A sender counts doorbells
 * whose head is beyond the credit it has seen: each such doorbell may still
 * hold a receive buffer at the receiver (a record is consumed only after the
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
 * Events: the rdma_cm event channel fd and each device's completion
 * channel fd are O_NONBLOCK and watched by uv_poll on the node loop. The
 * CQ handler reads and acks all channel events in one batch, re-arms
 * notification, polls the CQ dry in batches, and only then delivers
 * messages and flushes queues (so recv callbacks never run inside a CQ
 * poll). A completion with an error status (IBV_WC_WR_FLUSH_ERR,
 * IBV_WC_RETRY_EXC_ERR, remote access errors, ...) tears the connection
 * down.
 *
 * Connection states (struct vconn): outbound RESOLVING (address, route)
 * -> CONNECTING (connect, ACCEPT, AUTH sent, waiting for RING) -> UP;
 * inbound CONNECTING (accepted, waiting for AUTH; at most
 * max_pending_auth of them, each for at most connect_timeout_ms) -> UP
 * (ring exposed; ESTABLISHED may still come later, records already
 * arrive); both -> CLOSING ->
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
 * Fencing. Records carry the sender's epoch and the
 * receiver drops records below its fence (rdma/ring.c, software check).
 * On top of that the NIC enforces it: a connect request whose epoch is
 * below the fence is rejected, and xport_set_fence revokes remote
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
 * Busy-polling (xport_set_busy_poll, off by default): see "busy-poll"
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

#include "verbs_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#define VERBS__DEFAULT_RING       ((size_t)8 << 20)
#define VERBS__DEFAULT_MAX_QUEUED ((size_t)64 << 20)
#define VERBS__DEFAULT_RETRY_MS   100u
#define VERBS__DEFAULT_CONNECT_MS 2000u
#define VERBS__DEFAULT_ACK_TMO    15u /* 4.096 us * 2^15 = 134 ms per try */

static const struct xport_ops verbs_ops;

static void sweep_kick(struct verbs_xport *x);

/* ---- tracing -------------------------------------------------------------
 * Libraries do not log: connection events go to stderr only when the
 * environment variable TERN_VERBS_TRACE is set (a debugging aid for the
 * rxe runner, like LIBRAFT_TRACE). */
static int trace_on = -1;

void xport_verbs_trace(const struct verbs_xport *x, const char *fmt, ...)
{
    va_list ap;

    if (trace_on < 0) {
        trace_on = getenv("TERN_VERBS_TRACE") != NULL;
    }
    if (!trace_on) {
        return;
    }
    (void)fprintf(stderr, "verbs[%llu] ",
                  (unsigned long long)x->r.base.self_id);
    va_start(ap, fmt);
    (void)vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void)fputc('\n', stderr);
}

/* ---- in-flight sends ---------------------------------------------------- */

static void inflight_fail(struct vconn *c, int status)
{
    while (c->inflight != NULL) {
        struct xport_send *req = c->inflight;
        c->inflight = req->priv[0];
        xport_done_push(&c->rc.x->done, req, status);
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
        xport_done_push(&c->rc.x->done, req, 0);
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
        vx(c)->stats.signalled++;
    } else {
        c->since_signal++;
    }
    vx(c)->stats.posted++;
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

/* Post the handshake receive: room for one VERBS__HS_LEN message at
 * c->hs (a longer SEND fails the QP with a local length error). */
static int post_recv_hs(struct vconn *c)
{
    struct ibv_recv_wr wr, *bad = NULL;
    struct ibv_sge sge;
    int rc;

    memset(&wr, 0, sizeof wr);
    sge.addr = (uintptr_t)c->hs;
    sge.length = VERBS__HS_LEN;
    sge.lkey = c->hs_mr->lkey;
    wr.wr_id = VERBS__WR_HS;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    rc = ibv_post_recv(c->id->qp, &wr, &bad);
    return rc == 0 ? 0 : rc > 0 ? -rc : -EIO;
}

int xport_vconn_post_hs(struct vconn *c, size_t len)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;
    uint64_t id;
    int rc;

    if (sq_room(c) == 0 || len > VERBS__HS_BUF - 64) {
        return -EAGAIN;
    }
    id = c->sq_posted + 1;
    memset(&wr, 0, sizeof wr);
    sge.addr = (uintptr_t)(c->hs + 64);
    sge.length = (uint32_t)len;
    sge.lkey = c->hs_mr->lkey;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    rc = ibv_post_send(c->id->qp, &wr, &bad);
    if (rc != 0) {
        return rc > 0 ? -rc : -EIO;
    }
    c->sq_posted = id;
    c->last_signalled = id;
    c->since_signal = 0;
    vx(c)->stats.posted++;
    vx(c)->stats.signalled++;
    return 0;
}

/* Outbound: nothing signalled is outstanding but sends wait for a
 * completion: a signalled 8-byte write into the receiver's sink. */
static int maybe_nop(struct vconn *c)
{
    int err = 0;

    if (c->inflight == NULL || signalled_outstanding(c) ||
        c->rc.state != XPORT_RINGX_UP) {
        return 0;
    }
    if ((uint64_t)(uintptr_t)c->inflight->priv[2] == 0) {
        return 0; /* its doorbell has not been posted yet */
    }
    if (post_write(c, c->word + 1, 8, c->word_mr->lkey, c->remote_addr + c->cap,
                   c->remote_rkey, 0, 0, 1, &err) == 0) {
        /* Full send queue: a signalled WR is among the outstanding ones
         * (one in every VERBS__SIGNAL_EVERY), its completion comes. */
        return err == -EAGAIN ? 0 : err;
    }
    vx(c)->stats.nops++;
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
    size_t rec = (size_t)(c->rc.tx.head & (c->cap - 1));
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
    uint32_t imm = (uint32_t)c->rc.tx.head;
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
        c->rc.tx.head;
    c->imm_count++;
    vx(c)->stats.doorbells++;
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
        vx(c)->stats.wakes++;
    }
    c->credit_owed = 0;
    return 0;
}

const struct xport_ring_ops xport_verbs_ring_ops = {
    .write = op_write,
    .doorbell = op_doorbell,
    .write_credit = op_write_credit,
};

/* ---- devices ------------------------------------------------------------ */

static void on_cq(uv_poll_t *h, int status, int events);

static void on_dev_poll_closed(uv_handle_t *h)
{
    struct vdev *d = h->data;
    d->x->r.handles--;
    xport_ringx_maybe_finish(&d->x->r);
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
    rc = uv_poll_init(x->r.loop, &d->poll, d->chan->fd);
    if (rc != 0) {
        goto err;
    }
    d->poll.data = d;
    d->poll_open = 1;
    x->r.handles++;
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

static struct vconn *vconn_first(struct verbs_xport *x)
{
    return (struct vconn *)xport_ringx_conn_first(&x->r);
}

static struct vconn *vconn_next(struct vconn *c)
{
    return (struct vconn *)xport_ringx_conn_next(&c->rc);
}

struct vconn *xport_vconn_new(struct verbs_xport *x,
                              struct xport_ringx_peer *p,
                              struct rdma_cm_id *id)
{
    struct vconn *c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        return NULL;
    }
    xport_ringx_conn_init(&x->r, &c->rc, p);
    c->id = id;
    id->context = c;
    sweep_kick(x);
    return c;
}

static struct vconn *vconn_by_qpn(struct verbs_xport *x, uint32_t qpn)
{
    for (struct vconn *c = vconn_first(x); c != NULL; c = vconn_next(c)) {
        if (c->has_qp && c->qp_num == qpn) {
            return c;
        }
    }
    return NULL;
}

int xport_vconn_setup_qp(struct vconn *c)
{
    struct verbs_xport *x = vx(c);
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
    /* The handshake buffer: local access only, never remote. */
    if (posix_memalign((void **)&c->hs, 64, VERBS__HS_BUF) != 0) {
        c->hs = NULL;
        return -ENOMEM;
    }
    memset(c->hs, 0, VERBS__HS_BUF);
    c->hs_mr =
        ibv_reg_mr(c->dev->pd, c->hs, VERBS__HS_BUF, IBV_ACCESS_LOCAL_WRITE);
    if (c->hs_mr == NULL) {
        return errno != 0 ? -errno : -ENOMEM;
    }
    /* First in the receive queue, so the peer's first message lands in
     * it; the zero-length receives after it take doorbells and credit. */
    rc = post_recv_hs(c);
    for (unsigned i = 1; rc == 0 && i < VERBS__RQ_DEPTH; i++) {
        rc = post_recv(c);
    }
    return rc;
}

/* Free everything of c (its QP has been flushed or given up on). */
static void vconn_destroy(struct vconn *c)
{
    xport_ringx_conn_unlink(&c->rc);
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
    if (c->hs_mr != NULL) {
        ibv_dereg_mr(c->hs_mr);
    }
    if (c->id != NULL) {
        rdma_destroy_id(c->id);
    }
    free(c->ring);
    free(c->word);
    free(c->hs);
    tern_free(c);
}

/* Free the connections that are closed and drained (or out of time). */
static void reap(struct verbs_xport *x)
{
    uint64_t now = uv_now(x->r.loop);
    struct vconn *c = vconn_first(x);

    while (c != NULL) {
        struct vconn *next = vconn_next(c);
        if (c->rc.state == XPORT_RINGX_CLOSING &&
            (c->drained || now >= c->close_deadline)) {
            vconn_destroy(c);
        }
        c = next;
    }
}

/* Close a connection (idempotent, never frees c: reap does, later).
 * Outbound: the peer's queued and in-flight sends complete with status. */
void xport_vconn_close(struct vconn *c, int status)
{
    struct verbs_xport *x = vx(c);
    struct ibv_qp_attr qa;
    int err = 0;

    if (c->rc.state == XPORT_RINGX_CLOSING) {
        return;
    }
    xport_verbs_trace(
        x, "%s conn %s peer %llu (state %d, established %d): status %d",
        c->rc.peer != NULL ? "close outbound" : "close inbound",
        c->rc.peer != NULL ? c->rc.peer->base.address : "-",
        (unsigned long long)c->rc.remote_id, (int)c->rc.state, c->established,
        status);
    if (c->rc.peer != NULL && c->rc.peer->conn == &c->rc && !c->established) {
        c->rc.peer->base.retry_after = uv_now(x->r.loop) + x->r.retry_ms;
    }
    (void)xport_ringx_conn_detach(&c->rc, status);
    inflight_fail(c, status);
    c->rc.state = XPORT_RINGX_CLOSING;
    c->close_deadline = uv_now(x->r.loop) + VERBS__DRAIN_MS;
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
        xport_ringx_kick(&x->r);
    }
    sweep_kick(x);
}

static void conn_close(struct xport_ringx_conn *c, int status)
{
    xport_vconn_close((struct vconn *)c, status);
}

void xport_vconn_refuse(struct vconn *c, const char *why)
{
    struct verbs_xport *x = vx(c);

    if (c->rc.state == XPORT_RINGX_CLOSING) {
        return;
    }
    x->stats.auth_refused++;
    xport_verbs_trace(
        x, "%s conn peer %llu refused: %s",
        c->rc.peer != NULL ? "outbound" : "inbound",
        (unsigned long long)(c->rc.peer != NULL ? c->rc.peer->base.id
                                                : c->rc.remote_id),
        why);
    xport_vconn_close(c, TERN_ENOCONN);
}

/* ---- receiving --------------------------------------------------------- */

/* Deliver what c's ring holds up to the landed limit (the driver's
 * drain; a doorbell that asked for a wake-up makes the credit write at
 * its end one). */
void xport_vconn_drain(struct vconn *c)
{
    if (!c->rc.rx_ready || !vx(c)->r.started) {
        return;
    }
    if (c->wake_req) {
        c->rc.rx.wake = 1;
        c->wake_req = 0;
    }
    (void)xport_ringx_drain(&c->rc, UINT_MAX);
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
        xport_ringx_kick(&x->r);
        return;
    }
    if (c->rc.state == XPORT_RINGX_CLOSING) {
        return;
    }
    if (wc->status != IBV_WC_SUCCESS) {
        xport_verbs_trace(x, "qp %u wr %llu: %s", wc->qp_num,
                          (unsigned long long)wc->wr_id,
                          ibv_wc_status_str(wc->status));
        if (c->rc.peer == NULL && !c->authed) {
            /* e.g. a SEND longer than the handshake receive */
            xport_vconn_refuse(c, "error before authentication");
            return;
        }
        if (wc->status == IBV_WC_REM_ACCESS_ERR ||
            wc->status == IBV_WC_REM_INV_REQ_ERR ||
            wc->status == IBV_WC_REM_OP_ERR) {
            x->stats.nic_rejects++;
        } else if (wc->status == IBV_WC_RETRY_EXC_ERR ||
                   wc->status == IBV_WC_RNR_RETRY_EXC_ERR) {
            x->stats.retry_errors++;
        }
        xport_vconn_close(c, x->r.closing ? TERN_ECANCELED : TERN_ENOCONN);
        return;
    }
    if ((wc->opcode & IBV_WC_RECV) && c->rc.peer == NULL && !c->established) {
        /* Data before the CM's RTU: what the COMM_EST async event
         * would tell the CM (we do not read async events). */
        (void)rdma_notify(c->id, IBV_EVENT_COMM_EST);
    }
    switch (wc->opcode) {
    case IBV_WC_RECV:
        /* The only two-sided message: the peer's handshake message, in
         * the first receive, once. */
        if (wc->wr_id != VERBS__WR_HS || c->hs_got ||
            wc->byte_len != VERBS__HS_LEN) {
            xport_vconn_refuse(c, "unexpected message");
            return;
        }
        c->hs_got = 1;
        c->pending = 1;
        break;
    case IBV_WC_RECV_RDMA_WITH_IMM:
        if (!c->authed) {
            /* No ring exists yet: nothing may be announced. */
            xport_vconn_refuse(c, "write before authentication");
            return;
        }
        if (post_recv(c) != 0) {
            xport_vconn_close(c, TERN_ENOCONN);
            return;
        }
        imm = ntohl(wc->imm_data);
        if (c->rc.peer == NULL && imm != VERBS__IMM_CREDIT && c->rc.rx_ready) {
            xport_ring_rx_landed(&c->rc.rx, imm & ~(uint32_t)63);
            c->wake_req |= (imm & VERBS__IMM_WAKE) != 0;
            c->may_wake = 1;
        }
        c->pending = 1;
        break;
    case IBV_WC_SEND:
    case IBV_WC_RDMA_WRITE:
        if (wc->wr_id > c->sq_retired && wc->wr_id <= c->sq_posted) {
            c->sq_retired = wc->wr_id;
        }
        if (c->rc.peer != NULL) {
            inflight_complete(c, wc->wr_id);
        }
        c->pending = 1;
        break;
    default:
        break;
    }
}

/* After a CQ batch: deliver, return credit, flush queues, post nops. */
void xport_verbs_process_pending(struct verbs_xport *x)
{
    for (struct vconn *c = vconn_first(x); c != NULL && !x->r.closing;
         c = vconn_next(c)) {
        if (!c->pending || c->rc.state == XPORT_RINGX_CLOSING) {
            continue;
        }
        c->pending = 0;
        if (c->hs_got && !c->authed) {
            xport_verbs_cm_handshake(c);
            if (c->rc.state == XPORT_RINGX_CLOSING || x->r.closing) {
                continue;
            }
        }
        if (c->rc.peer == NULL) {
            xport_vconn_drain(c);
            if (c->credit_owed && c->rc.state != XPORT_RINGX_CLOSING &&
                c->rc.rx_ready && x->r.started) {
                int rc = xport_ring_rx_flush(&c->rc.rx, 1);
                if (rc != 0 && rc != -EAGAIN) {
                    xport_vconn_close(c, TERN_ENOCONN);
                }
            }
        } else if (c->rc.state == XPORT_RINGX_UP) {
            if (c->rc.peer->q.head != NULL) {
                xport_ringx_flush(c->rc.peer);
            }
            if (c->rc.state == XPORT_RINGX_UP && maybe_nop(c) != 0) {
                xport_vconn_close(c, TERN_ENOCONN);
            }
        }
    }
}

/* Poll d's CQ dry, then deliver and flush (process_pending). Returns the
 * number of completions handled. */
unsigned xport_verbs_cq_service(struct vdev *d)
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
        for (struct vconn *c = vconn_first(x); c != NULL; c = vconn_next(c)) {
            if (c->dev == d) {
                xport_vconn_close(c, TERN_ENOCONN);
                c->drained = 1;
            }
        }
        return total;
    }
    xport_verbs_process_pending(x);
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
    /* Read every channel event, ack them in one call, re-arm, then
     * poll (a completion arriving after the poll raises a new event). */
    while (ibv_get_cq_event(d->chan, &cq, &cq_ctx) == 0) {
        nev++;
    }
    if (nev > 0) {
        ibv_ack_cq_events(d->cq, nev);
    }
    (void)ibv_req_notify_cq(d->cq, 0);
    (void)xport_verbs_cq_service(d);
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
    uint64_t delivered = x->r.stats.delivered;
    unsigned found = 0;

    x->stats.spins++;
    for (struct vdev *d = x->devs; d != NULL && !x->r.closing; d = d->next) {
        found += xport_verbs_cq_service(d);
    }
    if (found > 0) {
        x->stats.spin_hits++;
    }
    if (x->r.closing || x->r.stats.delivered != delivered ||
        xport_spin_expired(&x->spin)) {
        xport_spin_stop(&x->spin);
    }
}

static void spin_arm(struct xport_ringx *r)
{
    struct verbs_xport *x = (struct verbs_xport *)r;

    if (!x->r.closing) {
        xport_spin_arm(&x->spin);
    }
}

/* ---- sending ----------------------------------------------------------- */

/* Forget doorbells the receiver has consumed past (their RECVs are
 * re-posted). */
static void imm_retire(struct vconn *c)
{
    while (c->imm_count > 0 && c->imm_heads[c->imm_first] <= c->rc.tx.credit) {
        c->imm_first = (c->imm_first + 1) % VERBS__IMM_BUDGET;
        c->imm_count--;
    }
}

/* Room for one more message besides ring space: send-queue slots for it
 * (VERBS__SQ_RESERVE) and a doorbell within the budget. */
static int tx_reserve(struct xport_ringx_conn *rc)
{
    struct vconn *c = (struct vconn *)rc;

    imm_retire(c);
    if (sq_room(c) < VERBS__SQ_RESERVE || c->imm_count >= VERBS__IMM_BUDGET) {
        return -EAGAIN;
    }
    return 0;
}

/* The message is in the mirror: req completes once a signalled WR at or
 * after its doorbell has completed (in flight until then). */
static void tx_written(struct xport_ringx_conn *rc, struct xport_send *req)
{
    struct vconn *c = (struct vconn *)rc;

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
}

/* Messages wait in a queue: the sweep re-reads their credit word; a send
 * just queued also arms a busy-poll round. */
static void queued(struct xport_ringx *r, int sent)
{
    sweep_kick((struct verbs_xport *)r);
    if (sent) {
        spin_arm(r);
    }
}

/* The fence was raised: revoke remote write access at the NIC for an
 * inbound connection whose sender has not shown an epoch >= fence. */
static void fence_qp(struct xport_ringx_conn *rc, uint64_t fence)
{
    struct vconn *c = (struct vconn *)rc;
    struct ibv_qp_attr qa;

    if (c->rc.peer_epoch >= fence || c->revoked) {
        return;
    }
    /* The NIC now NAKs this sender's writes into our ring. */
    memset(&qa, 0, sizeof qa);
    qa.qp_access_flags = 0;
    if (ibv_modify_qp(c->id->qp, &qa, IBV_QP_ACCESS_FLAGS) != 0) {
        /* Cannot revoke in place: tear the QP down instead. */
        xport_vconn_close(c, TERN_ENOCONN);
        return;
    }
    c->revoked = 1;
    vx(c)->stats.revoked++;
}

/* ---- timers ------------------------------------------------------------- */

/* Connect timeouts, drain deadlines of closed connections, and the
 * credit re-read of senders with queued messages. Runs only while one of
 * those exists. */
static void on_sweep(uv_timer_t *t)
{
    struct verbs_xport *x = t->data;
    uint64_t now = uv_now(x->r.loop);
    int needed = 0;

    for (struct vconn *c = vconn_first(x); c != NULL; c = vconn_next(c)) {
        switch (c->rc.state) {
        case XPORT_RINGX_CONNECTING:
            if (now - c->rc.started >= x->connect_ms && c->rc.peer == NULL) {
                /* An inbound connection that never proved the secret. */
                xport_vconn_refuse(c, "authentication timed out");
            } else if (now - c->rc.started >= x->connect_ms) {
                xport_verbs_trace(x, "connect timeout after %llu ms",
                                  (unsigned long long)(now - c->rc.started));
                x->stats.connect_timeouts++;
                xport_vconn_close(c, TERN_ENOCONN);
            }
            needed = 1;
            break;
        case XPORT_RINGX_CLOSING:
            needed = 1;
            break;
        case XPORT_RINGX_UP:
            if (c->rc.peer != NULL && c->rc.peer->conn == &c->rc &&
                c->rc.peer->q.head != NULL) {
                xport_ringx_flush(c->rc.peer);
                needed = 1;
            }
            break;
        }
    }
    reap(x);
    if (!needed || x->finishing) {
        uv_timer_stop(&x->sweep);
    }
    xport_ringx_maybe_finish(&x->r);
}

static void sweep_kick(struct verbs_xport *x)
{
    if (!x->finishing && !uv_is_active((uv_handle_t *)&x->sweep)) {
        uv_timer_start(&x->sweep, on_sweep, VERBS__SWEEP_MS, VERBS__SWEEP_MS);
    }
}

/* ---- lifecycle --------------------------------------------------------- */

/* Idle hook: free closed connections (it queues no completion). */
static void idle_reap(struct xport_ringx *r)
{
    reap((struct verbs_xport *)r);
}

/* Closing: once every connection is freed (and every completion ran),
 * close the handles; the driver closes the idle handle after them. */
static int finish(struct xport_ringx *r)
{
    struct verbs_xport *x = (struct verbs_xport *)r;

    if (!tern_list_empty(&x->r.conns)) {
        return 1;
    }
    if (!x->finishing) {
        x->finishing = 1;
        xport_spin_stop(&x->spin);
        uv_close((uv_handle_t *)&x->cm_poll, xport_ringx_handle_closed);
        uv_close((uv_handle_t *)&x->sweep, xport_ringx_handle_closed);
        uv_close((uv_handle_t *)&x->spin.idle, xport_ringx_handle_closed);
        for (struct vdev *d = x->devs; d != NULL; d = d->next) {
            if (d->poll_open) {
                d->poll_open = 0;
                uv_close((uv_handle_t *)&d->poll, on_dev_poll_closed);
            }
        }
        return 1;
    }
    return 0;
}

/* The idle handle closed: free the verbs objects. */
static void destroy(struct xport_ringx *r)
{
    struct verbs_xport *x = (struct verbs_xport *)r;

    vdevs_destroy(x);
    if (x->ech != NULL) {
        rdma_destroy_event_channel(x->ech);
    }
    auth_wipe(&x->secret, sizeof x->secret);
}

static const struct xport_ringx_medium verbs_medium = {
    .connect = xport_verbs_cm_connect,
    .conn_close = conn_close,
    .tx_reserve = tx_reserve,
    .tx_written = tx_written,
    .sent = spin_arm,
    .queued = queued,
    .fence = fence_qp,
    .idle = idle_reap,
    .finish = finish,
    .destroy = destroy,
};

static int verbs_start(struct xport *base)
{
    struct verbs_xport *x = (struct verbs_xport *)base;

    if (x->r.closing) {
        return TERN_ESHUTDOWN;
    }
    if (!x->r.started) {
        x->r.started = 1;
        for (struct vconn *c = vconn_first(x); c != NULL; c = vconn_next(c)) {
            c->pending |= c->rc.peer == NULL;
        }
        xport_verbs_process_pending(x);
    }
    return 0;
}

static void verbs_close(struct xport *base)
{
    struct verbs_xport *x = (struct verbs_xport *)base;

    if (x->r.closing) {
        return;
    }
    if (x->listen_id != NULL) {
        rdma_destroy_id(x->listen_id); /* pending requests go with it */
        x->listen_id = NULL;
    }
    xport_ringx_cancel(&x->r);
    xport_ringx_kick(&x->r); /* reaps and finishes */
}

static void verbs_get_stats(const struct xport *base, struct xport_stats *out)
{
    struct xport_verbs_stats s;

    if (xport_verbs_stats(base, &s) != 0) {
        return; /* not reached: the ops table is this backend's */
    }
    out->doorbells = s.doorbells;
    out->spins = s.spins;
    out->spin_hits = s.spin_hits;
    out->credit_waits = s.credit_waits;
    out->fenced = s.fenced;
    out->corrupt = s.corrupt;
    out->auth_refused = s.auth_refused;
}

static const struct xport_ops verbs_ops = {
    .name = "verbs",
    .start = verbs_start,
    .send = xport_ringx_send,
    .max_message = xport_ringx_max_message,
    .close = verbs_close,
    .set_epoch = xport_ringx_set_epoch,
    .set_fence = xport_ringx_set_fence,
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
    int rc;

    if (loop == NULL || out == NULL || bind_address == NULL ||
        xport_parse_ipv4(bind_address, &sa) != 0) {
        tern_errmsg_printf(errmsg,
                           "verbs: bad bind address '%s' (want ip:port)",
                           bind_address ? bind_address : "(null)");
        return TERN_EINVAL;
    }
    x = tern_calloc(1, sizeof *x);
    if (x == NULL) {
        tern_errmsg_printf(errmsg, "verbs: out of memory");
        return -ENOMEM;
    }
    x->r.base.ops = &verbs_ops;
    x->r.base.self_id = self_id;
    x->bind_sa = sa;
    x->r.ring_bytes = VERBS__DEFAULT_RING;
    x->r.max_queued = VERBS__DEFAULT_MAX_QUEUED;
    x->r.retry_ms = VERBS__DEFAULT_RETRY_MS;
    x->r.addr_max = XPORT_IPV4_ADDR_MAX;
    x->r.drain_budget = UINT_MAX; /* bounded by the landed limit */
    x->connect_ms = VERBS__DEFAULT_CONNECT_MS;
    x->ack_timeout = VERBS__DEFAULT_ACK_TMO;
    if (opts != NULL) {
        x->r.ring_bytes = opts->ring_bytes ? opts->ring_bytes : x->r.ring_bytes;
        x->r.max_queued =
            opts->max_queued_bytes ? opts->max_queued_bytes : x->r.max_queued;
        x->r.retry_ms =
            opts->connect_retry_ms ? opts->connect_retry_ms : x->r.retry_ms;
        x->connect_ms =
            opts->connect_timeout_ms ? opts->connect_timeout_ms : x->connect_ms;
        x->ack_timeout =
            opts->ack_timeout ? (uint8_t)opts->ack_timeout : x->ack_timeout;
        x->max_pending = opts->max_pending_auth;
        if (opts->secret != NULL) {
            x->secret = *opts->secret;
            x->has_secret = 1;
        }
    }
    if (x->max_pending == 0) {
        x->max_pending = VERBS__MAX_PENDING;
    }
    if (!xport_ring_cap_valid(x->r.ring_bytes) ||
        x->r.ring_bytes > UINT32_MAX / 2 || x->ack_timeout > 31) {
        tern_errmsg_printf(errmsg,
                           "verbs: ring_bytes %zu must be a power of two in "
                           "[%u, 1 GiB], ack_timeout <= 31",
                           x->r.ring_bytes, XPORT_RING_MIN_CAP);
        rc = TERN_EINVAL;
        goto err;
    }
    rc = xport_verbs_cm_listen(x, &sa, bind_address, errmsg);
    if (rc != 0) {
        goto err;
    }
    /* uv_idle_init and uv_timer_init cannot fail. */
    xport_ringx_init(&x->r, loop, &verbs_medium);
    (void)uv_timer_init(loop, &x->sweep);
    x->sweep.data = x;
    xport_spin_init(&x->spin, loop, x, on_spin);
    x->r.handles = 2; /* sweep, spin */
    rc = uv_poll_init(loop, &x->cm_poll, x->ech->fd);
    if (rc != 0) {
        /* Only the timer and the idle handles exist: close them. */
        tern_errmsg_printf(errmsg, "verbs: poll: %s", tern_strerror(rc));
        rdma_destroy_id(x->listen_id);
        x->listen_id = NULL;
        x->r.closing = 1;
        x->finishing = 1;
        uv_close((uv_handle_t *)&x->sweep, xport_ringx_handle_closed);
        uv_close((uv_handle_t *)&x->spin.idle, xport_ringx_handle_closed);
        return rc; /* freed asynchronously, no callback */
    }
    x->cm_poll.data = x;
    x->r.handles++;
    rc = uv_poll_start(&x->cm_poll, UV_READABLE, xport_verbs_on_cm);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "verbs: poll: %s", tern_strerror(rc));
        verbs_close(&x->r.base);
        return rc;
    }
    *out = &x->r.base;
    return 0;

err:
    auth_wipe(&x->secret, sizeof x->secret);
    tern_free(x);
    return rc;
}

/* ---- verbs-specific controls -------------------------------------------- */

int xport_verbs_set_epoch(struct xport *base, uint64_t epoch)
{
    if (base == NULL || base->ops != &verbs_ops) {
        return TERN_EINVAL;
    }
    return xport_ringx_set_epoch(base, epoch);
}

int xport_verbs_set_fence(struct xport *base, uint64_t fence)
{
    if (base == NULL || base->ops != &verbs_ops) {
        return TERN_EINVAL;
    }
    return xport_ringx_set_fence(base, fence);
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

int xport_verbs_stats(const struct xport *base, struct xport_verbs_stats *out)
{
    const struct verbs_xport *x = (const struct verbs_xport *)base;

    if (base == NULL || base->ops != &verbs_ops || out == NULL) {
        return TERN_EINVAL;
    }
    *out = x->stats;
    out->credit_waits = x->r.stats.credit_waits;
    out->delivered = x->r.stats.delivered;
    out->fenced = x->r.stats.fenced;
    out->corrupt = x->r.stats.corrupt;
    return 0;
}
