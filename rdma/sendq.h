/*
 * Private to rdma/: the per-peer send bookkeeping every connection backend
 * (tcp.c, shm.c, verbs.c; fallback.c uses the peer table) shares, written
 * once:
 *   - deferred completions: a FIFO of decided send completions drained by
 *     the backend's uv_idle handle, so no callback ever runs inside
 *     xport_send (the xport contract);
 *   - the pending-send queue: owned copies of messages waiting for ring
 *     space or for the connection, with byte accounting and the per-peer
 *     bound (TERN_EBUSY);
 *   - the peer table: one record per destination node id, found or created
 *     on send, re-addressed when the caller's address for it changes.
 * No wire or file format lives here.
 */
#ifndef TERN_XPORT_SENDQ_H
#define TERN_XPORT_SENDQ_H

#include "xport_int.h"

/* ---- deferred completions ----------------------------------------------
 * Requests are linked through req->priv[0], their status is kept in
 * req->priv[1] (priv[2..3] stay the backend's). */
struct xport_done
{
    struct xport_send *head, *tail;
    uv_idle_t *idle; /* started on every push; the backend's handle */
    uv_idle_cb on_idle;
};

/* Bind the list to the backend's idle handle (initialised by the backend;
 * its callback on_idle calls xport_done_fire). */
void xport_done_init(struct xport_done *d, uv_idle_t *idle, uv_idle_cb on_idle);

/* Complete req with status on a later loop iteration (FIFO order). req is
 * borrowed until its callback runs. */
void xport_done_push(struct xport_done *d, struct xport_send *req, int status);

/* Fire every completion queued so far, in order. Completions pushed by
 * the callbacks wait for the next call (xport_done_empty says so). */
void xport_done_fire(struct xport_done *d);

/* The body of the backend's idle callback: xport_done_fire, then stop the
 * idle handle if no completion is pending any more. Returns 1 when it
 * stopped (the backend may then finish a close), else 0. */
int xport_done_drain(struct xport_done *d);

static inline int xport_done_empty(const struct xport_done *d)
{
    return d->head == NULL;
}

/* ---- pending-send queue ------------------------------------------------ */

/* A message waiting for ring space or for the connection: owned copy. */
struct xport_qmsg
{
    struct xport_qmsg *next;
    struct xport_send *req;
    size_t len;
    uint8_t data[];
};

struct xport_sendq
{
    struct xport_qmsg *head, *tail;
    size_t bytes; /* sum of len over the queue */
};

/* The per-peer bound of the contract: with something already queued
 * (nothing_queued == 0), a message of add bytes that would take the queued
 * bytes beyond max is refused (the send completes with TERN_EBUSY); one
 * message is always accepted when nothing is queued. */
static inline int xport_over_budget(int nothing_queued,
                                    size_t queued,
                                    size_t add,
                                    size_t max)
{
    return !nothing_queued && queued + add > max;
}

/* xport_over_budget for a pending-send queue. */
static inline int xport_sendq_full(const struct xport_sendq *q,
                                   size_t add,
                                   size_t max)
{
    return xport_over_budget(q->head == NULL, q->bytes, add, max);
}

/* Append a copy of iov[0..n) (total bytes) for req. The iov buffers are
 * borrowed for the call only. Returns 0 or -ENOMEM (nothing queued). */
int xport_sendq_push(struct xport_sendq *q,
                     struct xport_send *req,
                     const struct xport_iov *iov,
                     unsigned n,
                     size_t total);

/* Unlink and return the first message (NULL when empty), its bytes no
 * longer counted. The caller owns it (tern_free). */
struct xport_qmsg *xport_sendq_pop(struct xport_sendq *q);

/* Complete every queued message with status through d and free them. */
void xport_sendq_fail(struct xport_sendq *q, struct xport_done *d, int status);

/* ---- peer table --------------------------------------------------------
 * A backend's peer record embeds struct xport_peer as its FIRST member
 * and is allocated (zeroed) by xport_peer_get; records live until the
 * table is freed. */
#define XPORT_PEER_ADDR_MAX 256 /* NUL included; backends check tighter */

struct xport_peer
{
    struct xport_peer *next;
    uint64_t id;
    char address[XPORT_PEER_ADDR_MAX]; /* as given to xport_send */
    uint64_t retry_after; /* uv_now() before which no attempt is made */
};

enum xport_peer_found {
    XPORT_PEER_SAME,  /* known, at this address: nothing to do */
    XPORT_PEER_NEW,   /* unknown id */
    XPORT_PEER_MOVED, /* known, at another address */
};

/* Look id up in the table at head; *out = its record or NULL (NEW). */
enum xport_peer_found xport_peer_find(struct xport_peer *head,
                                      uint64_t id,
                                      const char *address,
                                      struct xport_peer **out /* OUT */);

/* After xport_peer_find said NEW or MOVED (and the backend validated the
 * address and dropped a MOVED peer's connection): create the record for
 * id (size bytes, zeroed, linked at the head of *head) when *p is NULL,
 * then store address and reset retry_after. Returns 0, TERN_EINVAL (the
 * address does not fit) or -ENOMEM (nothing changed). */
int xport_peer_set(struct xport_peer **head,
                   struct xport_peer **p /* IN/OUT */,
                   size_t size,
                   uint64_t id,
                   const char *address);

/* Free every record of the table (backends' free functions). */
void xport_peers_free(struct xport_peer **head);

#endif /* TERN_XPORT_SENDQ_H */
