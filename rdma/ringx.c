/*
 * The ring-transport driver (see ringx.h): peers, the send path, queue
 * flushing, delivery from inbound rings, epoch and fence, deferred
 * completions and the close sequence of the shm and verbs backends.
 *
 * Send path, happy case: connected, nothing queued, ring space (and, per
 * the medium, send-queue room): xport_send writes the record straight into
 * the peer's ring (the only copy), rings the doorbell, and the medium
 * completes the request later (shm at once from the idle handle, verbs
 * when the write has landed), never inside xport_send. Otherwise the
 * message is copied into the peer's bounded queue and written when space
 * or the connection arrives.
 * Failure modes:
 *   - no connection: the first send connects (the medium's connect); a
 *     failed connect completes the send with TERN_ENOCONN and starts a
 *     back-off of retry_ms during which sends complete with TERN_ENOCONN
 *     at once;
 *   - a write into the ring fails (broken connection): the connection is
 *     closed, the send and everything queued complete with TERN_ENOCONN;
 *   - the peer's ring is too small for a message: that send completes
 *     with TERN_ETOOBIG, the connection stays;
 *   - queued bytes would exceed max_queued: TERN_EBUSY (one message is
 *     always accepted when the queue is empty);
 *   - an invalid record in an inbound ring: the connection is closed
 *     (counted in corrupt).
 */
#include "ringx.h"

#include <errno.h>
#include <string.h>

static void on_idle(uv_idle_t *h)
{
    struct xport_ringx *x = h->data;
    int stopped = xport_done_drain(&x->done);

    if (x->medium->idle != NULL) {
        x->medium->idle(x);
    }
    if (stopped) {
        xport_ringx_maybe_finish(x);
    }
}

void xport_ringx_init(struct xport_ringx *x,
                      uv_loop_t *loop,
                      const struct xport_ringx_medium *medium)
{
    x->loop = loop;
    x->medium = medium;
    tern_list_init(&x->conns);
    /* Always 0: no syscall. */
    (void)uv_idle_init(loop, &x->idle);
    x->idle.data = x;
    xport_done_init(&x->done, &x->idle, on_idle);
}

/* ---- connections ------------------------------------------------------- */

static struct xport_ringx_conn *conn_at(struct xport_ringx *x,
                                        struct tern_list *l)
{
    return l == &x->conns ? NULL
                          : TERN_CONTAINER(l, struct xport_ringx_conn, link);
}

struct xport_ringx_conn *xport_ringx_conn_first(struct xport_ringx *x)
{
    return conn_at(x, x->conns.next);
}

struct xport_ringx_conn *xport_ringx_conn_next(struct xport_ringx_conn *c)
{
    return conn_at(c->x, c->link.next);
}

void xport_ringx_conn_init(struct xport_ringx *x,
                           struct xport_ringx_conn *c,
                           struct xport_ringx_peer *p)
{
    c->x = x;
    c->peer = p;
    c->state = XPORT_RINGX_CONNECTING;
    c->started = uv_now(x->loop);
    tern_list_push(&x->conns, &c->link);
}

void xport_ringx_conn_unlink(struct xport_ringx_conn *c)
{
    tern_list_remove(&c->link);
}

int xport_ringx_conn_detach(struct xport_ringx_conn *c, int status)
{
    struct xport_ringx_peer *p = c->peer;

    if (p == NULL || p->conn != c) {
        return 0;
    }
    p->conn = NULL;
    xport_sendq_fail(&p->q, &c->x->done, status);
    return 1;
}

void xport_ringx_peer_down(struct xport_ringx_conn *c)
{
    if (c->state == XPORT_RINGX_UP && !c->x->closing) {
        xport__peer_down(&c->x->base, c->remote_id);
    }
}

static void conn_close(struct xport_ringx_conn *c, int status)
{
    c->x->medium->conn_close(c, status);
}

/* ---- sending ----------------------------------------------------------- */

/* Write one message into c's ring (no doorbell). Returns 0 (the medium
 * owns req's completion), -EAGAIN (no room: nothing written),
 * TERN_ETOOBIG, or another negative code (c is broken). */
static int tx_write(struct xport_ringx_conn *c,
                    struct xport_send *req,
                    const struct xport_iov *iov,
                    unsigned n,
                    size_t total)
{
    const struct xport_ringx_medium *m = c->x->medium;
    int rc = xport_ring_tx_refresh(&c->tx);

    if (rc == 0 && m->tx_reserve != NULL) {
        rc = m->tx_reserve(c);
    }
    if (rc == 0) {
        rc = xport_ring_tx_write(&c->tx, iov, n, total);
    }
    if (rc == 0) {
        m->tx_written(c, req);
    }
    return rc;
}

void xport_ringx_flush(struct xport_ringx_peer *p)
{
    struct xport_ringx *x = p->x;
    struct xport_ringx_conn *c = p->conn;
    int wrote = 0;

    if (c == NULL || c->state != XPORT_RINGX_UP) {
        return;
    }
    while (p->q.head != NULL) {
        struct xport_qmsg *m = p->q.head;
        struct xport_iov iov = {m->data, m->len};
        int rc = tx_write(c, m->req, &iov, 1, m->len);
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
                conn_close(c, TERN_ENOCONN);
                return;
            }
            continue;
        }
        tern_free(m);
        wrote = 1;
    }
    if (wrote && xport_ring_tx_doorbell(&c->tx) != 0) {
        conn_close(c, TERN_ENOCONN);
        return;
    }
    if (p->q.head != NULL && x->medium->queued != NULL) {
        x->medium->queued(x, 0);
    }
}

/* Find or create the peer for id; follow an address change. */
static int peer_get(struct xport_ringx *x,
                    uint64_t id,
                    const char *address,
                    struct xport_ringx_peer **out /* OUT */)
{
    struct xport_peer *bp;
    struct xport_ringx_peer *p;
    size_t len = strlen(address);
    int rc;

    if (len == 0 || len >= x->addr_max) {
        return TERN_EINVAL;
    }
    if (xport_peer_find(x->peers, id, address, &bp) == XPORT_PEER_SAME) {
        *out = (struct xport_ringx_peer *)bp;
        return 0;
    }
    p = (struct xport_ringx_peer *)bp;
    if (p != NULL && p->conn != NULL) {
        conn_close(p->conn, TERN_ENOCONN);
    }
    rc = xport_peer_set(&x->peers, &bp, sizeof *p, id, address);
    if (rc != 0) {
        return rc;
    }
    p = (struct xport_ringx_peer *)bp;
    p->x = x;
    *out = p;
    return 0;
}

int xport_ringx_send(struct xport *base,
                     struct xport_send *req,
                     uint64_t peer_id,
                     const char *peer_address,
                     const struct xport_iov *iov,
                     unsigned n)
{
    struct xport_ringx *x = (struct xport_ringx *)base;
    struct xport_ringx_peer *p;
    struct xport_ringx_conn *c;
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
    if (c != NULL && c->state == XPORT_RINGX_UP && p->q.head == NULL) {
        /* Fast path: straight into the peer's ring (the only copy). */
        rc = tx_write(c, req, iov, n, total);
        if (rc == 0) {
            if (xport_ring_tx_doorbell(&c->tx) != 0) {
                conn_close(c, TERN_ENOCONN); /* fails req too */
            } else if (x->medium->sent != NULL) {
                x->medium->sent(x);
            }
            return 0;
        }
        if (rc == TERN_ETOOBIG) {
            xport_done_push(&x->done, req, rc);
            return 0;
        }
        if (rc != -EAGAIN) {
            conn_close(c, TERN_ENOCONN);
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
        rc = x->medium->connect(p);
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
    if (rc == 0 && x->medium->queued != NULL) {
        x->medium->queued(x, 1);
    }
    return rc;
}

size_t xport_ringx_max_message(const struct xport *base)
{
    return xport_ring_max_payload(
        ((const struct xport_ringx *)base)->ring_bytes);
}

/* ---- receiving --------------------------------------------------------- */

int xport_ringx_drain(struct xport_ringx_conn *c, unsigned budget)
{
    struct xport_ringx *x = c->x;
    struct xport_ring_rec r;
    unsigned i = 0;
    int rc = 0;

    if (!c->rx_ready || !x->started) {
        return 0;
    }
    for (; i < budget && !x->closing; i++) {
        rc = xport_ring_rx_peek(&c->rx, &r);
        if (rc <= 0) {
            break;
        }
        if (r.epoch > c->peer_epoch) {
            c->peer_epoch = r.epoch;
        }
        x->stats.delivered++;
        if (x->base.recv_cb != NULL) {
            x->base.recv_cb(x->base.recv_arg, c->remote_id, r.payload, r.len);
        }
        if (c->state == XPORT_RINGX_CLOSING) {
            return 0;
        }
        xport_ring_rx_consume(&c->rx);
        rc = xport_ring_rx_flush(&c->rx, 0);
        if (rc != 0 && rc != -EAGAIN) {
            conn_close(c, TERN_ENOCONN);
            return 0;
        }
        rc = 0;
    }
    x->stats.fenced += c->rx.fenced;
    c->rx.fenced = 0;
    if (x->closing || c->state == XPORT_RINGX_CLOSING) {
        return 0;
    }
    if (rc < 0) {
        x->stats.corrupt++;
        conn_close(c, TERN_ENOCONN);
        return 0;
    }
    rc = xport_ring_rx_flush(&c->rx, 1);
    if (rc != 0 && rc != -EAGAIN) {
        conn_close(c, TERN_ENOCONN);
        return 0;
    }
    return i == budget && xport_ring_rx_ready(&c->rx);
}

void xport_ringx_supersede(struct xport_ringx *x,
                           uint64_t sender,
                           const struct xport_ringx_conn *keep)
{
    struct xport_ringx_conn *c;

    for (c = xport_ringx_conn_first(x); c != NULL && !x->closing;
         c = xport_ringx_conn_next(c)) {
        if (c->peer != NULL || c == keep || c->remote_id != sender ||
            c->state == XPORT_RINGX_CLOSING) {
            continue;
        }
        while (xport_ringx_drain(c, x->drain_budget)) {
        }
        conn_close(c, TERN_ENOCONN);
    }
}

/* ---- epoch and fence --------------------------------------------------- */

int xport_ringx_set_epoch(struct xport *base, uint64_t epoch)
{
    struct xport_ringx *x = (struct xport_ringx *)base;

    x->epoch = epoch;
    for (struct xport_ringx_conn *c = xport_ringx_conn_first(x); c != NULL;
         c = xport_ringx_conn_next(c)) {
        if (c->peer != NULL && c->state == XPORT_RINGX_UP) {
            c->tx.epoch = epoch;
        }
    }
    return 0;
}

int xport_ringx_set_fence(struct xport *base, uint64_t fence)
{
    struct xport_ringx *x = (struct xport_ringx *)base;

    x->fence = fence;
    for (struct xport_ringx_conn *c = xport_ringx_conn_first(x); c != NULL;
         c = xport_ringx_conn_next(c)) {
        if (c->peer != NULL || c->state == XPORT_RINGX_CLOSING ||
            !c->rx_ready) {
            continue;
        }
        c->rx.fence = fence;
        if (x->medium->fence != NULL) {
            x->medium->fence(c, fence);
        }
    }
    return 0;
}

/* ---- lifecycle --------------------------------------------------------- */

void xport_ringx_kick(struct xport_ringx *x)
{
    uv_idle_start(&x->idle, on_idle);
}

static void ringx_free(struct xport *base)
{
    struct xport_ringx *x = (struct xport_ringx *)base;
    xport_peers_free(&x->peers);
    tern_free(x);
}

static void on_idle_closed(uv_handle_t *h)
{
    struct xport_ringx *x = h->data;

    if (x->medium->destroy != NULL) {
        x->medium->destroy(x);
    }
    xport__closed(&x->base, ringx_free);
}

void xport_ringx_maybe_finish(struct xport_ringx *x)
{
    if (!x->closing || x->idle_closing || !xport_done_empty(&x->done)) {
        return;
    }
    if (x->medium->finish != NULL && x->medium->finish(x) != 0) {
        return;
    }
    if (x->handles > 0) {
        return;
    }
    x->idle_closing = 1;
    uv_close((uv_handle_t *)&x->idle, on_idle_closed);
}

void xport_ringx_handle_closed(uv_handle_t *h)
{
    struct xport_ringx *x = h->data;
    x->handles--;
    xport_ringx_maybe_finish(x);
}

void xport_ringx_cancel(struct xport_ringx *x)
{
    x->closing = 1;
    for (struct xport_peer *bp = x->peers; bp != NULL; bp = bp->next) {
        struct xport_ringx_peer *p = (struct xport_ringx_peer *)bp;
        xport_sendq_fail(&p->q, &x->done, TERN_ECANCELED);
    }
    for (struct xport_ringx_conn *c = xport_ringx_conn_first(x); c != NULL;
         c = xport_ringx_conn_next(c)) {
        conn_close(c, TERN_ECANCELED);
    }
}
