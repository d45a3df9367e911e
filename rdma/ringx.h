/*
 * Private to rdma/: the ring-transport driver shared by the shm backend
 * (rdma/shm.c) and the verbs backend (rdma/verbs.c). Both run the
 * one-sided ring protocol of rdma/ring.c with one connection per ordered
 * pair of nodes: an outbound connection writes into the peer's ring, an
 * inbound one owns a ring a peer writes into. What does not depend on the
 * medium lives here, written once:
 *   - peers: one record per destination, found or created on send,
 *     re-addressed (its connection dropped) when its address changes;
 *   - the send path: straight into the ring when connected with nothing
 *     queued, else into the peer's bounded queue (TERN_EBUSY beyond it),
 *     a connect on first use and a back-off after a failed one;
 *   - flushing queues into rings as credit or the connection arrives;
 *   - delivery from inbound rings (deliver, consume, return credit, tear
 *     a ring down on an invalid record) and the supersede rule that keeps
 *     a reconnecting sender's order;
 *   - epoch and fence, deferred completions and the close sequence.
 * The medium (shared memory, RDMA verbs) supplies the ring ops of ring.h,
 * its connection lifecycle and a few hooks (struct xport_ringx_medium),
 * and embeds the driver's structs as the FIRST member of its own.
 * No wire or file format lives here (ring.c owns the record format, each
 * medium its handshake).
 */
#ifndef TERN_XPORT_RINGX_H
#define TERN_XPORT_RINGX_H

#include <tern_common.h>

#include "ring.h"
#include "sendq.h"

enum xport_ringx_state {
    XPORT_RINGX_CONNECTING, /* outbound: connecting; inbound: handshake */
    XPORT_RINGX_UP,
    XPORT_RINGX_CLOSING, /* torn down; the medium frees it later */
};

struct xport_ringx;
struct xport_ringx_peer;

/* One connection (FIRST member of the medium's connection). Outbound:
 * peer != NULL, tx writes into the peer's ring. Inbound: peer == NULL, rx
 * reads our ring once rx_ready. */
struct xport_ringx_conn
{
    struct xport_ringx *x;
    struct xport_ringx_peer *peer;
    struct tern_list link; /* in x->conns */
    enum xport_ringx_state state;
    uint64_t remote_id;
    uint64_t started;    /* uv_now() when the connection was created */
    int rx_ready;        /* inbound: rx initialised */
    uint64_t peer_epoch; /* inbound: highest epoch the sender has shown */
    struct xport_ring_tx tx;
    struct xport_ring_rx rx;
};

/* A destination node. Lives until the transport is freed. */
struct xport_ringx_peer
{
    struct xport_peer base; /* first member: id, address, retry_after */
    struct xport_ringx *x;
    struct xport_ringx_conn *conn; /* current outbound connection or NULL */
    struct xport_sendq q; /* waiting for ring space or the connection */
};

/* What the medium provides. Hooks marked optional may be NULL. */
struct xport_ringx_medium
{
    /* Start connecting p: on success p->conn is set (state CONNECTING)
     * and 0 returned; else a negative code (-ENOMEM and TERN_EINVAL fail
     * the send, others complete it with TERN_ENOCONN and start the
     * back-off). */
    int (*connect)(struct xport_ringx_peer *p);
    /* Close c (idempotent; never frees c synchronously): must call
     * xport_ringx_conn_detach(c, status) and set state CLOSING. */
    void (*conn_close)(struct xport_ringx_conn *c, int status);
    /* Optional: room for one more message on c besides ring space (called
     * after the credit refresh): 0, or -EAGAIN (wait). */
    int (*tx_reserve)(struct xport_ringx_conn *c);
    /* A message for req went into c's ring: the medium owns req's
     * completion now (at once, or when the write is known to land). */
    void (*tx_written)(struct xport_ringx_conn *c, struct xport_send *req);
    /* Optional: a send went straight into a ring (busy-poll arming). */
    void (*sent)(struct xport_ringx *x);
    /* Optional: a send was queued (sent == 1 when it was added by
     * xport_send, 0 when a flush left messages waiting). */
    void (*queued)(struct xport_ringx *x, int sent);
    /* Optional: the fence was raised; c is an inbound connection not
     * closing, with its rx.fence already set. */
    void (*fence)(struct xport_ringx_conn *c, uint64_t fence);
    /* Optional: on every run of the idle handle (after the completions). */
    void (*idle)(struct xport_ringx *x);
    /* Optional: closing, every completion ran: return non-zero while the
     * medium still has work before the idle handle may close (it calls
     * xport_ringx_maybe_finish again when done). */
    int (*finish)(struct xport_ringx *x);
    /* Optional: the idle handle closed, right before the transport is
     * freed: release what is left of the medium. */
    void (*destroy)(struct xport_ringx *x);
};

struct xport_ringx_stats
{
    uint64_t credit_waits; /* sends that found no room in the ring */
    uint64_t fenced;       /* inbound records dropped by the fence */
    uint64_t corrupt;      /* inbound rings torn down: invalid record */
    uint64_t delivered;    /* messages delivered */
};

/* The transport (FIRST member of the medium's transport). */
struct xport_ringx
{
    struct xport base; /* first member: the interface's handle */
    const struct xport_ringx_medium *medium;
    uv_loop_t *loop;
    size_t ring_bytes;        /* each inbound ring */
    size_t max_queued;        /* per peer */
    unsigned retry_ms;        /* back-off after a failed connect */
    size_t addr_max;          /* peer addresses are shorter */
    unsigned drain_budget;    /* messages per ring per drain */
    uv_idle_t idle;           /* drains done; the medium's idle hook */
    struct xport_done done;   /* deferred completions */
    struct xport_peer *peers; /* of struct xport_ringx_peer */
    struct tern_list conns;   /* every connection, both directions */
    unsigned handles;         /* the medium's open handles besides idle */
    uint64_t epoch;
    uint64_t fence;
    struct xport_ringx_stats stats;
    int started;
    int closing;
    int idle_closing;
};

/* Initialise x (zeroed by the caller, base.ops and base.self_id set):
 * the idle handle (cannot fail), the lists. */
void xport_ringx_init(struct xport_ringx *x,
                      uv_loop_t *loop,
                      const struct xport_ringx_medium *medium);

/* Connections in list order (NULL at the end). */
struct xport_ringx_conn *xport_ringx_conn_first(struct xport_ringx *x);
struct xport_ringx_conn *xport_ringx_conn_next(struct xport_ringx_conn *c);

/* Initialise c (zeroed by the caller) for x, outbound to p or inbound (p
 * NULL), state CONNECTING, and link it into x->conns. */
void xport_ringx_conn_init(struct xport_ringx *x,
                           struct xport_ringx_conn *c,
                           struct xport_ringx_peer *p);
/* Unlink c from x->conns (the medium then frees it). */
void xport_ringx_conn_unlink(struct xport_ringx_conn *c);

/* For the medium's conn_close: if c is its peer's current connection,
 * detach it and complete the peer's queued sends with status. Returns 1
 * if it was the current connection. */
int xport_ringx_conn_detach(struct xport_ringx_conn *c, int status);

/* The medium saw c's peer go away (EOF or hangup on the socket, the CM's
 * DISCONNECTED): if c was UP and x is not closing, report the peer-down
 * signal (xport.h) for c's remote id. Call before closing c. */
void xport_ringx_peer_down(struct xport_ringx_conn *c);

/* Write what waits in p's queue into its ring while space lasts, then
 * ring the doorbell once. */
void xport_ringx_flush(struct xport_ringx_peer *p);

/* Deliver up to budget messages of inbound c (rx_ready; nothing before
 * xport_start). The recv callback may close the transport or c: it
 * stops as soon as either happens. Returns 1 when the budget ran out
 * with more to deliver, else 0. */
int xport_ringx_drain(struct xport_ringx_conn *c, unsigned budget);

/* A newer inbound connection from sender replaces the older ones (other
 * than keep, which may be NULL): deliver what they hold, then close
 * them, so the sender's order is kept. */
void xport_ringx_supersede(struct xport_ringx *x,
                           uint64_t sender,
                           const struct xport_ringx_conn *keep);

/* Start the idle handle (completions, the medium's idle hook). */
void xport_ringx_kick(struct xport_ringx *x);

/* Closing: once every completion ran, the medium's finish hook agrees
 * and its handles are closed, close the idle handle and free x. */
void xport_ringx_maybe_finish(struct xport_ringx *x);

/* uv close callback for the medium's handles (h->data = x): one handle
 * fewer, then xport_ringx_maybe_finish. */
void xport_ringx_handle_closed(uv_handle_t *h);

/* The close sequence's common part: x->closing set, queued sends
 * complete with TERN_ECANCELED, every connection closed (TERN_ECANCELED). */
void xport_ringx_cancel(struct xport_ringx *x);

/* struct xport_ops members shared by the media. */
int xport_ringx_send(struct xport *base,
                     struct xport_send *req,
                     uint64_t peer_id,
                     const char *peer_address,
                     const struct xport_iov *iov,
                     unsigned n);
size_t xport_ringx_max_message(const struct xport *base);
int xport_ringx_set_epoch(struct xport *base, uint64_t epoch);
int xport_ringx_set_fence(struct xport *base, uint64_t fence);

#endif /* TERN_XPORT_RINGX_H */
