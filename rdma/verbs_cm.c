/*
 * Connection setup of the verbs backend with librdmacm: the event channel
 * and the listening id, outbound address and route resolution, connect
 * and accept, the handshake that authenticates both sides with the
 * cluster secret before any ring is exposed, and the connection events
 * that follow (established, disconnected, errors). The rings and
 * completions themselves are rdma/verbs.c's.
 *
 * Handshake, version 2 (integers little-endian). CONNECT and ACCEPT are
 * rdma_cm private data (a CM REQ carries at most 56 bytes, a REP 196);
 * AUTH and RING are two-sided SENDs of VERBS__HS_LEN (56) bytes on the
 * new QP, each landing in the peer's first posted receive (a buffer
 * registered for local access only).
 *   CONNECT (S -> R, 52 bytes)          ACCEPT (R -> S, 84 bytes)
 *    0 4 magic 0x56534d54 "TMSV"         0 4 magic
 *    4 2 version 2                        4 2 version 2
 *    6 2 type 1                           6 2 type 2
 *    8 8 sender id                        8 8 sender id
 *   16 8 receiver id                     16 8 receiver id
 *   24 8 sender's epoch                  24 8 receiver's fence
 *   32 16 sender nonce Ns                32 16 receiver nonce Nr
 *   48 4 checksum (bytes 0..47)          48 32 MAC_r
 *                                        80 4 checksum (bytes 0..79)
 *   AUTH (S -> R, SEND, 56 bytes)       RING (R -> S, SEND, 56 bytes)
 *    0 4 magic                            0 4 magic
 *    4 2 version 2                        4 2 version 2
 *    6 2 type 3                           6 2 type 4
 *    8 8 credit word address              8 8 ring address (sink at +cap)
 *   16 4 credit word rkey                16 4 ring rkey
 *   20 4 zero                            20 4 ring capacity (bytes)
 *   24 32 MAC_s                          24 32 MAC_g
 * The proofs are auth_secret_mac over the cluster secret (auth/secret.c:
 * label, then each part length-prefixed) of the transcript T (64 bytes:
 * sender id u64, receiver id u64, Ns, Nr, sender's epoch u64, receiver's
 * fence u64) and, for AUTH and RING, the message's bytes 8..23:
 *   MAC_r = mac("tern verbs receiver", T)
 *   MAC_s = mac("tern verbs sender", T, AUTH[8..24))
 *   MAC_g = mac("tern verbs ring", T, RING[8..24))
 * A label per direction and message: no proof can be reflected back or
 * used as another message; Ns and Nr come from auth_random for every
 * connection: no proof can be replayed on another one. Without a secret
 * (xport_verbs_options.secret NULL, peer_auth = none) the key is 32 zero
 * bytes: the same exchange, authenticating nothing, and such a node only
 * talks to nodes without a secret.
 *
 * What is exposed when: R registers its ring (REMOTE_WRITE) only after
 * MAC_s checked out and sends its address and rkey in RING; S registers
 * its credit word (REMOTE_WRITE) only after MAC_r checked out and sends
 * it in AUTH. Neither CONNECT nor ACCEPT carries an address or a key, so
 * a peer without the secret learns no remote key; its memory registered
 * for the connection (QP, handshake buffer) goes when the connection is
 * closed. A handshake failure (bad format, version, ids or MAC, a write
 * or any other message before authentication, an inbound connection not
 * authenticated within connect_timeout_ms, more than max_pending_auth
 * inbound connections waiting for it) closes or rejects the connection,
 * delivers nothing and counts one auth_refused.
 *
 * Outbound (sender S, lazily on the first send): rdma_resolve_addr from
 * S's bound source IP (without it the kernel routes a local destination
 * through lo and the traffic never leaves the destination's device) ->
 * ADDR_RESOLVED: rdma_resolve_route -> ROUTE_RESOLVED: QP (handshake
 * receive posted first), rdma_connect with CONNECT -> ESTABLISHED with
 * ACCEPT: MAC_r checked, credit word registered, AUTH sent -> RING
 * received: MAC_g checked, the local mirror of the receiver's ring, state
 * UP, the queue is flushed. Inbound (receiver R): CONNECT_REQUEST: checks
 * (format, receiver id, epoch not below the fence: else rejected, the
 * pending cap), QP (handshake receive first), rdma_accept with ACCEPT ->
 * AUTH received (possibly before ESTABLISHED): MAC_s checked, epoch
 * checked against the fence again, older connections from that sender
 * superseded, a zeroed ring registered REMOTE_WRITE, RING sent, state UP;
 * records arrive only after that. Any error event, or a failing step,
 * closes the connection (TERN_ENOCONN); DISCONNECTED on an inbound
 * connection first delivers what its sender announced.
 */
#include "verbs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#define VERBS__PD_MAGIC       0x56534d54u
#define VERBS__PD_VERSION     2u
#define VERBS__PD_CONNECT     1u
#define VERBS__PD_ACCEPT      2u
#define VERBS__PD_AUTH        3u
#define VERBS__PD_RING        4u
#define VERBS__PD_CONNECT_LEN 52u
#define VERBS__PD_ACCEPT_LEN  84u
#define VERBS__PD_MAX         96u /* what is read of private data */
#define VERBS__TRANSCRIPT     64u

/* ---- messages ------------------------------------------------------------ */

static void put_head(uint8_t *p, unsigned type)
{
    tern_put_u32(p, VERBS__PD_MAGIC);
    tern_put_u16(p + 4, VERBS__PD_VERSION);
    tern_put_u16(p + 6, (uint16_t)type);
}

/* Check magic, version and type of a message of len bytes (the CM may pad
 * private data) that should be want bytes long. Returns 0 or a negative
 * code. */
static int check_head(const uint8_t *p, size_t len, size_t want, unsigned type)
{
    if (p == NULL || len < want || tern_get_u32(p) != VERBS__PD_MAGIC) {
        return TERN_EMALFORMED;
    }
    if (tern_get_u16(p + 4) != VERBS__PD_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u16(p + 6) != type) {
        return TERN_EMALFORMED;
    }
    return 0;
}

/* The transcript T of c's handshake (the layout above). */
static void transcript(const struct vconn *c,
                       uint64_t sender,
                       uint64_t receiver,
                       uint8_t t[VERBS__TRANSCRIPT])
{
    tern_put_u64(t, sender);
    tern_put_u64(t + 8, receiver);
    memcpy(t + 16, c->nonce_s, VERBS__NONCE);
    memcpy(t + 32, c->nonce_r, VERBS__NONCE);
    tern_put_u64(t + 48, c->hs_epoch);
    tern_put_u64(t + 56, c->hs_fence);
}

/* The MAC under label of c's transcript and, when body != NULL, the 16
 * message bytes at body. */
static int hs_mac(const struct vconn *c,
                  const char *label,
                  uint64_t sender,
                  uint64_t receiver,
                  const uint8_t *body,
                  uint8_t out[AUTH_MAC_SIZE])
{
    uint8_t t[VERBS__TRANSCRIPT];
    struct auth_iov parts[2] = {{t, sizeof t}, {body, 16}};

    transcript(c, sender, receiver, t);
    return auth_secret_mac(&vx(c)->secret, label, parts, body != NULL ? 2 : 1,
                           out);
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

static void conn_param(struct rdma_conn_param *cp,
                       const uint8_t *pd,
                       size_t len)
{
    memset(cp, 0, sizeof *cp);
    cp->private_data = pd;
    cp->private_data_len = (uint8_t)len;
    cp->responder_resources = 1;
    cp->initiator_depth = 1;
    cp->retry_count = VERBS__RETRY_COUNT;
    cp->rnr_retry_count = VERBS__RNR_RETRY;
}

/* Outbound: route resolved. Create the QP, connect with CONNECT. */
static int outbound_connect(struct vconn *c)
{
    struct verbs_xport *x = vx(c);
    struct rdma_conn_param cp;
    uint8_t pd[VERBS__PD_CONNECT_LEN];
    int rc = xport_vconn_setup_qp(c);

    if (rc != 0) {
        return rc;
    }
    rc = auth_random(c->nonce_s, VERBS__NONCE, NULL);
    if (rc != 0) {
        return rc;
    }
    c->hs_epoch = x->r.epoch;
    memset(pd, 0, sizeof pd);
    put_head(pd, VERBS__PD_CONNECT);
    tern_put_u64(pd + 8, x->r.base.self_id);
    tern_put_u64(pd + 16, c->rc.peer->base.id);
    tern_put_u64(pd + 24, c->hs_epoch);
    memcpy(pd + 32, c->nonce_s, VERBS__NONCE);
    tern_put_u32(pd + 48, tern_checksum32(pd, 48));
    conn_param(&cp, pd, sizeof pd);
    return rdma_connect(c->id, &cp) != 0 ? -errno : 0;
}

/* Outbound: ESTABLISHED with ACCEPT. Check the receiver's proof, then
 * register the credit word and send AUTH. TERN_EAUTH and the format codes
 * mean the receiver did not prove the secret. */
static int outbound_established(struct vconn *c,
                                const uint8_t *priv,
                                size_t priv_len)
{
    struct verbs_xport *x = vx(c);
    uint64_t self = x->r.base.self_id, peer = c->rc.peer->base.id;
    uint8_t mac[AUTH_MAC_SIZE];
    uint8_t *m = c->hs + 64;
    int rc = check_head(priv, priv_len, VERBS__PD_ACCEPT_LEN, VERBS__PD_ACCEPT);

    c->established = 1; /* the CM's connection exists: disconnect it */
    if (rc != 0) {
        return rc;
    }
    if (tern_get_u32(priv + 80) != tern_checksum32(priv, 80) ||
        tern_get_u64(priv + 8) != self || tern_get_u64(priv + 16) != peer) {
        return TERN_EMALFORMED;
    }
    c->hs_fence = tern_get_u64(priv + 24);
    memcpy(c->nonce_r, priv + 32, VERBS__NONCE);
    rc = hs_mac(c, "tern verbs receiver", self, peer, NULL, mac);
    if (rc != 0) {
        return rc;
    }
    if (!auth_equal(mac, priv + 48, AUTH_MAC_SIZE)) {
        return TERN_EAUTH;
    }
    /* The receiver proved the secret: expose the credit word. */
    if (posix_memalign((void **)&c->word, 64, 64) != 0) {
        c->word = NULL;
        return -ENOMEM;
    }
    memset(c->word, 0, 64);
    c->word_mr = ibv_reg_mr(c->dev->pd, c->word, 64,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (c->word_mr == NULL) {
        return errno != 0 ? -errno : -ENOMEM;
    }
    memset(m, 0, VERBS__HS_LEN);
    put_head(m, VERBS__PD_AUTH);
    tern_put_u64(m + 8, (uintptr_t)c->word);
    tern_put_u32(m + 16, c->word_mr->rkey);
    rc = hs_mac(c, "tern verbs sender", self, peer, m + 8, m + 24);
    if (rc != 0) {
        return rc;
    }
    return xport_vconn_post_hs(c, VERBS__HS_LEN);
}

/* Outbound: RING arrived. Check it, allocate the mirror (the receiver's
 * size), go UP. */
static int outbound_ring(struct vconn *c)
{
    struct verbs_xport *x = vx(c);
    const uint8_t *m = c->hs;
    uint8_t mac[AUTH_MAC_SIZE];
    size_t cap;
    int rc = check_head(m, VERBS__HS_LEN, VERBS__HS_LEN, VERBS__PD_RING);

    if (rc != 0) {
        return rc;
    }
    rc = hs_mac(c, "tern verbs ring", x->r.base.self_id, c->rc.peer->base.id,
                m + 8, mac);
    if (rc != 0) {
        return rc;
    }
    if (!auth_equal(mac, m + 24, AUTH_MAC_SIZE)) {
        return TERN_EAUTH;
    }
    cap = tern_get_u32(m + 20);
    if (!xport_ring_cap_valid(cap)) {
        return TERN_EMALFORMED;
    }
    /* The mirror needs no zeroing: only bytes written since are posted. */
    if (posix_memalign((void **)&c->ring, 4096, cap) != 0) {
        c->ring = NULL;
        return -ENOMEM;
    }
    c->ring_mr = ibv_reg_mr(c->dev->pd, c->ring, cap, IBV_ACCESS_LOCAL_WRITE);
    if (c->ring_mr == NULL) {
        return errno != 0 ? -errno : -ENOMEM;
    }
    c->rc.remote_id = c->rc.peer->base.id;
    c->remote_addr = tern_get_u64(m + 8);
    c->remote_rkey = tern_get_u32(m + 16);
    c->cap = cap;
    xport_ring_tx_init(&c->rc.tx, &xport_verbs_ring_ops, c, cap, c->word);
    c->rc.tx.epoch = x->r.epoch;
    c->authed = 1;
    c->rc.state = XPORT_RINGX_UP;
    x->stats.connects++;
    return 0;
}

/* A sender connects again (it has given up its previous connection to
 * us): deliver what its older connections hold, then close them, before
 * the new one exists, so the sender's order is kept. Writes of the old
 * connection still on the wire are lost with it (the sender already
 * failed those sends). */
static void supersede_inbound(struct verbs_xport *x,
                              uint64_t sender,
                              const struct vconn *keep)
{
    for (struct vdev *d = x->devs; d != NULL && !x->r.closing; d = d->next) {
        /* doorbells already in the CQ count */
        (void)xport_verbs_cq_service(d);
    }
    xport_ringx_supersede(&x->r, sender, &keep->rc);
}

/* Inbound connections still waiting for AUTH. */
static unsigned pending_auth(struct verbs_xport *x)
{
    unsigned n = 0;

    for (struct xport_ringx_conn *rc = xport_ringx_conn_first(&x->r);
         rc != NULL; rc = xport_ringx_conn_next(rc)) {
        n += rc->peer == NULL && rc->state == XPORT_RINGX_CONNECTING;
    }
    return n;
}

/* Inbound: connect request. Check it, create the QP, accept with ACCEPT
 * (no ring exists yet). On failure the caller rejects and destroys id (c
 * no longer owns it). */
static int inbound_accept(struct verbs_xport *x,
                          struct rdma_cm_id *id,
                          const uint8_t *priv,
                          size_t priv_len)
{
    struct rdma_conn_param cp;
    uint8_t pd[VERBS__PD_ACCEPT_LEN];
    struct vconn *c;
    int rc =
        check_head(priv, priv_len, VERBS__PD_CONNECT_LEN, VERBS__PD_CONNECT);

    if (rc == 0 && (tern_get_u32(priv + 48) != tern_checksum32(priv, 48) ||
                    tern_get_u64(priv + 16) != x->r.base.self_id)) {
        rc = TERN_EMALFORMED;
    }
    if (rc != 0) {
        x->stats.auth_refused++; /* not our protocol, or not for us */
        return rc;
    }
    if (tern_get_u64(priv + 24) < x->r.fence) {
        x->stats.rejected++;
        return TERN_ECANCELED; /* a deposed sender: no access at all */
    }
    if (pending_auth(x) >= x->max_pending) {
        x->stats.auth_refused++;
        return TERN_ELIMIT;
    }
    c = xport_vconn_new(x, NULL, id);
    if (c == NULL) {
        return -ENOMEM;
    }
    c->rc.remote_id = tern_get_u64(priv + 8);
    c->rc.peer_epoch = tern_get_u64(priv + 24);
    c->hs_epoch = c->rc.peer_epoch;
    c->hs_fence = x->r.fence;
    memcpy(c->nonce_s, priv + 32, VERBS__NONCE);
    rc = auth_random(c->nonce_r, VERBS__NONCE, NULL);
    if (rc == 0) {
        rc = set_ack_timeout(x, id);
    }
    if (rc == 0) {
        rc = xport_vconn_setup_qp(c);
    }
    if (rc == 0) {
        memset(pd, 0, sizeof pd);
        put_head(pd, VERBS__PD_ACCEPT);
        tern_put_u64(pd + 8, c->rc.remote_id);
        tern_put_u64(pd + 16, x->r.base.self_id);
        tern_put_u64(pd + 24, c->hs_fence);
        memcpy(pd + 32, c->nonce_r, VERBS__NONCE);
        rc = hs_mac(c, "tern verbs receiver", c->rc.remote_id,
                    x->r.base.self_id, NULL, pd + 48);
    }
    if (rc != 0) {
        goto fail;
    }
    tern_put_u32(pd + 80, tern_checksum32(pd, 80));
    conn_param(&cp, pd, sizeof pd);
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

/* Inbound: AUTH arrived. Check the sender's proof, then supersede its
 * older connections, register a zeroed ring and send RING. TERN_EAUTH and
 * the format codes mean the sender did not prove the secret. */
static int inbound_auth(struct vconn *c)
{
    struct verbs_xport *x = vx(c);
    const uint8_t *a = c->hs;
    uint8_t *m = c->hs + 64;
    uint8_t mac[AUTH_MAC_SIZE];
    int rc = check_head(a, VERBS__HS_LEN, VERBS__HS_LEN, VERBS__PD_AUTH);

    if (rc != 0) {
        return rc;
    }
    rc = hs_mac(c, "tern verbs sender", c->rc.remote_id, x->r.base.self_id,
                a + 8, mac);
    if (rc != 0) {
        return rc;
    }
    if (!auth_equal(mac, a + 24, AUTH_MAC_SIZE)) {
        return TERN_EAUTH;
    }
    if (c->rc.peer_epoch < x->r.fence) {
        /* The fence rose past the sender's epoch since it connected. */
        x->stats.rejected++;
        return TERN_ECANCELED;
    }
    c->remote_addr = tern_get_u64(a + 8);
    c->remote_rkey = tern_get_u32(a + 16);
    supersede_inbound(x, c->rc.remote_id, c);
    if (x->r.closing) {
        return TERN_ESHUTDOWN; /* a recv callback closed the transport */
    }
    if (c->rc.state == XPORT_RINGX_CLOSING) {
        return TERN_ENOCONN; /* closed while the CQs were serviced */
    }
    c->cap = x->r.ring_bytes;
    if (posix_memalign((void **)&c->ring, 4096, c->cap + VERBS__SINK) != 0) {
        c->ring = NULL;
        return -ENOMEM;
    }
    if (posix_memalign((void **)&c->word, 64, 64) != 0) {
        c->word = NULL;
        return -ENOMEM;
    }
    memset(c->ring, 0, c->cap + VERBS__SINK);
    memset(c->word, 0, 64);
    c->ring_mr = ibv_reg_mr(c->dev->pd, c->ring, c->cap + VERBS__SINK,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->word_mr = ibv_reg_mr(c->dev->pd, c->word, 64, IBV_ACCESS_LOCAL_WRITE);
    if (c->ring_mr == NULL || c->word_mr == NULL) {
        return -ENOMEM;
    }
    xport_ring_rx_init(&c->rc.rx, &xport_verbs_ring_ops, c, c->ring, c->cap);
    c->rc.rx.fence = x->r.fence;
    xport_ring_rx_landed(&c->rc.rx, 0); /* bounded from the start */
    c->rc.rx_ready = 1;
    memset(m, 0, VERBS__HS_LEN);
    put_head(m, VERBS__PD_RING);
    tern_put_u64(m + 8, (uintptr_t)c->ring);
    tern_put_u32(m + 16, c->ring_mr->rkey);
    tern_put_u32(m + 20, (uint32_t)c->cap);
    rc = hs_mac(c, "tern verbs ring", c->rc.remote_id, x->r.base.self_id, m + 8,
                m + 24);
    if (rc == 0) {
        rc = xport_vconn_post_hs(c, VERBS__HS_LEN);
    }
    if (rc != 0) {
        return rc;
    }
    c->authed = 1;
    c->rc.state = XPORT_RINGX_UP;
    x->stats.accepts++;
    return 0;
}

/* A handshake code that says the peer did not prove the secret. */
static int refused(int rc)
{
    return rc == TERN_EAUTH || rc == TERN_EMALFORMED || rc == TERN_EVERSION;
}

void xport_verbs_cm_handshake(struct vconn *c)
{
    struct verbs_xport *x = vx(c);
    int rc = c->rc.peer != NULL ? outbound_ring(c) : inbound_auth(c);

    if (rc == 0 || c->rc.state == XPORT_RINGX_CLOSING || x->r.closing) {
        return;
    }
    if (refused(rc)) {
        xport_vconn_refuse(c, tern_strerror(rc));
        return;
    }
    xport_verbs_trace(x, "handshake: %s", tern_strerror(rc));
    xport_vconn_close(c, TERN_ENOCONN);
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
        c->established = 1;
        if (c->rc.peer != NULL) {
            rc = outbound_established(c, priv, priv_len);
            if (refused(rc)) {
                xport_vconn_refuse(c, tern_strerror(rc));
                return;
            }
        }
        break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (c->rc.peer == NULL && !c->authed) {
            xport_vconn_refuse(c, "gone before authentication");
            break;
        }
        if (c->rc.peer == NULL && c->dev != NULL) {
            /* The sender is gone: deliver what it announced first. */
            xport_verbs_cq_service(c->dev);
            if (c->rc.state != XPORT_RINGX_CLOSING) {
                xport_vconn_drain(c);
            }
        }
        xport_ringx_peer_down(&c->rc); /* after what it announced */
        xport_vconn_close(c, TERN_ENOCONN);
        break;
    default: /* errors, rejections, unreachable, device removal */
        if (c->rc.peer == NULL && !c->authed) {
            xport_vconn_refuse(c, rdma_event_str(type));
            break;
        }
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
        uint8_t priv[VERBS__PD_MAX];
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
