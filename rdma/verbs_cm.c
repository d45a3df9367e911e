/*
 * Connection setup of the verbs backend with librdmacm: the event channel
 * and the listening id, outbound address and route resolution, connect
 * and accept with the private data below, and the connection events that
 * follow (established, disconnected, errors). The rings and completions
 * themselves are rdma/verbs.c's.
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
 * Outbound (sender S, lazily on the first send): rdma_resolve_addr from
 * S's bound source IP (without it the kernel routes a local destination
 * through lo and the traffic never leaves the destination's device) ->
 * ADDR_RESOLVED: rdma_resolve_route -> ROUTE_RESOLVED: QP, control area
 * (credit word) registered REMOTE_WRITE, rdma_connect with CONNECT ->
 * ESTABLISHED with ACCEPT: the local mirror of the receiver's ring, state
 * UP, the queue is flushed. Inbound (receiver R): CONNECT_REQUEST: checks
 * (receiver id, epoch not below the fence: else rejected), older
 * connections from that sender superseded, a zeroed ring registered
 * REMOTE_WRITE, rdma_accept with ACCEPT; records may arrive before
 * ESTABLISHED (verbs.c handles them). Any error event, or a failing step,
 * closes the connection (TERN_ENOCONN); DISCONNECTED on an inbound
 * connection first delivers what its sender announced.
 */
#include "verbs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#define VERBS__PD_MAGIC   0x56534d54u
#define VERBS__PD_VERSION 1u
#define VERBS__PD_CONNECT 1u
#define VERBS__PD_ACCEPT  2u
#define VERBS__PD_LEN     52u

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

/* ---- connection setup ---------------------------------------------------- */

static int set_ack_timeout(struct verbs_xport *x, struct rdma_cm_id *id)
{
    uint8_t t = x->ack_timeout;
    return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t,
                           sizeof t) != 0
               ? -errno
               : 0;
}

static void conn_param(struct rdma_conn_param *cp, const uint8_t *pd)
{
    memset(cp, 0, sizeof *cp);
    cp->private_data = pd;
    cp->private_data_len = VERBS__PD_LEN;
    cp->responder_resources = 1;
    cp->initiator_depth = 1;
    cp->retry_count = VERBS__RETRY_COUNT;
    cp->rnr_retry_count = VERBS__RNR_RETRY;
}

/* Outbound: route resolved. Create the QP, register the control area,
 * connect. */
static int outbound_connect(struct vconn *c)
{
    struct verbs_xport *x = vx(c);
    struct rdma_conn_param cp;
    uint8_t pd[VERBS__PD_LEN];
    int rc = xport_vconn_setup_qp(c);

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
    pd_encode(pd, VERBS__PD_CONNECT, x->r.base.self_id, c->rc.peer->base.id,
              (uintptr_t)c->word, c->word_mr->rkey, 0, x->r.epoch);
    conn_param(&cp, pd);
    return rdma_connect(c->id, &cp) != 0 ? -errno : 0;
}

/* Outbound: ESTABLISHED with the receiver's ring coordinates. Allocate the
 * mirror (the receiver's size) and start sending. */
static int outbound_established(struct vconn *c,
                                const uint8_t *priv,
                                size_t priv_len)
{
    struct verbs_xport *x = vx(c);
    int rc = pd_check(priv, priv_len, VERBS__PD_ACCEPT);
    size_t cap;

    if (rc != 0) {
        return rc;
    }
    cap = tern_get_u32(priv + 36);
    if (tern_get_u64(priv + 8) != x->r.base.self_id ||
        tern_get_u64(priv + 16) != c->rc.peer->base.id ||
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
    c->rc.remote_id = c->rc.peer->base.id;
    c->remote_addr = tern_get_u64(priv + 24);
    c->remote_rkey = tern_get_u32(priv + 32);
    c->cap = cap;
    xport_ring_tx_init(&c->rc.tx, &xport_verbs_ring_ops, c, cap, c->word);
    c->rc.tx.epoch = x->r.epoch;
    c->established = 1;
    c->rc.state = XPORT_RINGX_UP;
    x->stats.connects++;
    return 0;
}

/* A sender connects again (it has given up its previous connection to
 * us): deliver what its older connections hold, then close them, before
 * the new one exists, so the sender's order is kept. Writes of the old
 * connection still on the wire are lost with it (the sender already
 * failed those sends). */
static void supersede_inbound(struct verbs_xport *x, uint64_t sender)
{
    for (struct vdev *d = x->devs; d != NULL && !x->r.closing; d = d->next) {
        /* doorbells already in the CQ count */
        (void)xport_verbs_cq_service(d);
    }
    xport_ringx_supersede(&x->r, sender, NULL);
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

    if (rc != 0 || tern_get_u64(priv + 16) != x->r.base.self_id) {
        return rc != 0 ? rc : TERN_EMALFORMED;
    }
    if (tern_get_u64(priv + 40) < x->r.fence) {
        x->stats.rejected++;
        return TERN_ECANCELED; /* a deposed sender: no access at all */
    }
    supersede_inbound(x, tern_get_u64(priv + 8));
    if (x->r.closing) {
        return TERN_ESHUTDOWN; /* a recv callback closed the transport */
    }
    c = xport_vconn_new(x, NULL, id);
    if (c == NULL) {
        return -ENOMEM;
    }
    c->rc.remote_id = tern_get_u64(priv + 8);
    c->remote_addr = tern_get_u64(priv + 24);
    c->remote_rkey = tern_get_u32(priv + 32);
    c->rc.peer_epoch = tern_get_u64(priv + 40);
    c->cap = x->r.ring_bytes;
    rc = set_ack_timeout(x, id);
    if (rc == 0) {
        rc = xport_vconn_setup_qp(c);
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
        c->word_mr =
            ibv_reg_mr(c->dev->pd, c->word, 64, IBV_ACCESS_LOCAL_WRITE);
        if (c->ring_mr == NULL || c->word_mr == NULL) {
            rc = -ENOMEM;
        }
    }
    if (rc != 0) {
        goto fail;
    }
    xport_ring_rx_init(&c->rc.rx, &xport_verbs_ring_ops, c, c->ring, c->cap);
    c->rc.rx.fence = x->r.fence;
    xport_ring_rx_landed(&c->rc.rx, 0); /* bounded from the start */
    c->rc.rx_ready = 1;
    pd_encode(pd, VERBS__PD_ACCEPT, c->rc.remote_id, x->r.base.self_id,
              (uintptr_t)c->ring, c->ring_mr->rkey, (uint32_t)c->cap,
              x->r.fence);
    conn_param(&cp, pd);
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
    xport_vconn_close(c, TERN_ENOCONN);
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

    xport_verbs_trace(x, "cm event %s on %s", rdma_event_str(type),
                      c == NULL            ? "-"
                      : c->rc.peer != NULL ? c->rc.peer->base.address
                                           : "inbound");
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        rc = x->r.closing ? TERN_ESHUTDOWN
                          : inbound_accept(x, id, priv, priv_len);
        if (rc != 0) {
            xport_verbs_trace(x, "reject connect request: %s",
                              tern_strerror(rc));
            (void)rdma_reject(id, NULL, 0);
            rdma_destroy_id(id);
        }
        return;
    }
    if (c == NULL || c->rc.state == XPORT_RINGX_CLOSING) {
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
        if (c->rc.peer != NULL) {
            rc = outbound_established(c, priv, priv_len);
            if (rc == 0) {
                xport_ringx_flush(c->rc.peer);
            }
        } else {
            c->established = 1;
            c->rc.state = XPORT_RINGX_UP;
            x->stats.accepts++;
            c->pending = 1;
            xport_verbs_process_pending(x);
        }
        break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (c->rc.peer == NULL && c->dev != NULL) {
            /* The sender is gone: deliver what it announced first. */
            xport_verbs_cq_service(c->dev);
            if (c->rc.state != XPORT_RINGX_CLOSING) {
                xport_vconn_drain(c);
            }
        }
        xport_vconn_close(c, TERN_ENOCONN);
        break;
    default: /* errors, rejections, unreachable, device removal */
        xport_vconn_close(c, TERN_ENOCONN);
        break;
    }
    if (rc != 0) {
        xport_verbs_trace(x, "cm event %s: %s", rdma_event_str(type),
                          tern_strerror(rc));
        xport_vconn_close(c, TERN_ENOCONN);
    }
}

void xport_verbs_on_cm(uv_poll_t *h, int status, int events)
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
            priv_len =
                TERN_MIN((size_t)ev->param.conn.private_data_len, sizeof priv);
            memcpy(priv, ev->param.conn.private_data, priv_len);
        }
        rdma_ack_cm_event(ev);
        on_cm_event(x, id, type, priv, priv_len);
    }
}

int xport_verbs_cm_connect(struct xport_ringx_peer *p)
{
    struct verbs_xport *x = (struct verbs_xport *)p->x;
    struct sockaddr_in dst, src = x->bind_sa;
    struct rdma_cm_id *id = NULL;
    struct vconn *c;

    if (xport_parse_ipv4(p->base.address, &dst) != 0) {
        return TERN_EINVAL;
    }
    if (rdma_create_id(x->ech, &id, NULL, RDMA_PS_TCP) != 0) {
        return errno == ENOMEM ? -ENOMEM : TERN_ENOCONN;
    }
    c = xport_vconn_new(x, p, id);
    if (c == NULL) {
        rdma_destroy_id(id);
        return -ENOMEM;
    }
    src.sin_port = 0;
    p->conn = &c->rc;
    if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
                          (int)x->connect_ms) != 0) {
        xport_vconn_close(c, TERN_ENOCONN);
        return TERN_ENOCONN;
    }
    return 0;
}

int xport_verbs_cm_listen(struct verbs_xport *x,
                          const struct sockaddr_in *sa,
                          const char *bind_address,
                          char *errmsg)
{
    int fl;
    int rc;

    x->ech = rdma_create_event_channel();
    if (x->ech == NULL) {
        rc = errno != 0 ? -errno : -ENODEV;
        tern_errmsg_printf(errmsg, "verbs: no rdma_cm: %s", tern_strerror(rc));
        return rc;
    }
    fl = fcntl(x->ech->fd, F_GETFL);
    if (fl < 0 || fcntl(x->ech->fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
        rdma_create_id(x->ech, &x->listen_id, NULL, RDMA_PS_TCP) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "verbs: rdma_cm id: %s", tern_strerror(rc));
        goto err_after_channel;
    }
    if (rdma_bind_addr(x->listen_id, (struct sockaddr *)sa) != 0 ||
        rdma_listen(x->listen_id, VERBS__BACKLOG) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg,
                           "verbs: bind/listen %s: %s (an RDMA-capable "
                           "interface's IPv4 address is needed, not lo)",
                           bind_address, tern_strerror(rc));
        goto err_after_id;
    }
    return 0;

err_after_id:
    rdma_destroy_id(x->listen_id);
    x->listen_id = NULL;
err_after_channel:
    rdma_destroy_event_channel(x->ech);
    x->ech = NULL;
    return rc;
}
