/* Per-peer send bookkeeping shared by the connection backends: deferred
 * completions, the pending-send queue and the peer table (see sendq.h). */
#include "sendq.h"

#include <errno.h>
#include <string.h>

#include <tern_common.h>

/* ---- deferred completions ---------------------------------------------- */

void xport_done_init(struct xport_done *d, uv_idle_t *idle, uv_idle_cb on_idle)
{
    d->head = NULL;
    d->tail = NULL;
    d->idle = idle;
    d->on_idle = on_idle;
}

void xport_done_push(struct xport_done *d, struct xport_send *req, int status)
{
    req->priv[0] = NULL;
    req->priv[1] = (void *)(intptr_t)status;
    if (d->tail != NULL) {
        d->tail->priv[0] = req;
    } else {
        d->head = req;
    }
    d->tail = req;
    uv_idle_start(d->idle, d->on_idle);
}

void xport_done_fire(struct xport_done *d)
{
    struct xport_send *list = d->head;

    d->head = NULL;
    d->tail = NULL;
    while (list != NULL) {
        struct xport_send *req = list;
        int status = (int)(intptr_t)req->priv[1];
        list = req->priv[0];
        req->cb(req, status);
    }
}

int xport_done_drain(struct xport_done *d)
{
    xport_done_fire(d);
    if (!xport_done_empty(d)) {
        return 0;
    }
    uv_idle_stop(d->idle);
    return 1;
}

/* ---- pending-send queue ------------------------------------------------ */

int xport_sendq_push(struct xport_sendq *q,
                     struct xport_send *req,
                     const struct xport_iov *iov,
                     unsigned n,
                     size_t total)
{
    struct xport_qmsg *m = tern_malloc(sizeof *m + total);

    if (m == NULL) {
        return -ENOMEM;
    }
    m->next = NULL;
    m->req = req;
    m->len = total;
    xport_iov_gather(m->data, iov, n);
    if (q->tail != NULL) {
        q->tail->next = m;
    } else {
        q->head = m;
    }
    q->tail = m;
    q->bytes += total;
    return 0;
}

struct xport_qmsg *xport_sendq_pop(struct xport_sendq *q)
{
    struct xport_qmsg *m = q->head;

    if (m == NULL) {
        return NULL;
    }
    q->head = m->next;
    if (q->head == NULL) {
        q->tail = NULL;
    }
    q->bytes -= m->len;
    return m;
}

void xport_sendq_fail(struct xport_sendq *q, struct xport_done *d, int status)
{
    while (q->head != NULL) {
        struct xport_qmsg *m = q->head;
        q->head = m->next;
        xport_done_push(d, m->req, status);
        tern_free(m);
    }
    q->tail = NULL;
    q->bytes = 0;
}

/* ---- peer table -------------------------------------------------------- */

enum xport_peer_found xport_peer_find(struct xport_peer *head,
                                      uint64_t id,
                                      const char *address,
                                      struct xport_peer **out)
{
    struct xport_peer *p;

    for (p = head; p != NULL && p->id != id; p = p->next) {
    }
    *out = p;
    if (p == NULL) {
        return XPORT_PEER_NEW;
    }
    return strcmp(p->address, address) == 0 ? XPORT_PEER_SAME
                                            : XPORT_PEER_MOVED;
}

int xport_peer_set(struct xport_peer **head,
                   struct xport_peer **p,
                   size_t size,
                   uint64_t id,
                   const char *address)
{
    size_t len = strlen(address);

    if (len >= XPORT_PEER_ADDR_MAX) {
        return TERN_EINVAL;
    }
    if (*p == NULL) {
        struct xport_peer *np = tern_calloc(1, size);
        if (np == NULL) {
            return -ENOMEM;
        }
        np->id = id;
        np->next = *head;
        *head = np;
        *p = np;
    }
    memcpy((*p)->address, address, len + 1);
    (*p)->retry_after = 0;
    return 0;
}

void xport_peers_free(struct xport_peer **head)
{
    while (*head != NULL) {
        struct xport_peer *p = *head;
        *head = p->next;
        tern_free(p);
    }
}
