/*
 * Private to rdma/: the backend vtable behind struct xport. Every backend
 * embeds struct xport as its first member and fills ops.
 */
#ifndef TERN_XPORT_INT_H
#define TERN_XPORT_INT_H

#include "xport.h"

struct xport_ops {
    const char *name;
    int (*start)(struct xport *x);
    int (*send)(struct xport *x, struct xport_send *req, uint64_t peer_id,
                const char *peer_address, const struct xport_iov *iov,
                unsigned n);
    size_t (*max_message)(const struct xport *x);
    void (*close)(struct xport *x);
    /* Optional (NULL: the backend has no epochs; raft's own term check in
     * every message is then the only fence). */
    int (*set_epoch)(struct xport *x, uint64_t epoch);
    int (*set_fence)(struct xport *x, uint64_t fence);
};

struct xport {
    const struct xport_ops *ops;
    uint64_t self_id;
    xport_recv_cb recv_cb;
    void *recv_arg;
    xport_close_cb close_cb;
    void *close_arg;
};

/* Called by a backend once fully closed: runs the user's close callback,
 * then the backend's free function. */
void xport__closed(struct xport *x, void (*free_fn)(struct xport *x));

#endif /* TERN_XPORT_INT_H */
