/* Backend-independent entry points of the transport interface. */
#include "xport_int.h"

#include <tern_common.h>

int xport_start(struct xport *x, xport_recv_cb cb, void *arg)
{
    x->recv_cb = cb;
    x->recv_arg = arg;
    return x->ops->start(x);
}

int xport_send(struct xport *x, struct xport_send *req, uint64_t peer_id,
               const char *peer_address, const struct xport_iov *iov,
               unsigned n, xport_send_cb cb)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        total += iov[i].len;
    }
    if (total > x->ops->max_message(x)) {
        return TERN_ETOOBIG;
    }
    req->cb = cb;
    return x->ops->send(x, req, peer_id, peer_address, iov, n);
}

size_t xport_max_message(const struct xport *x)
{
    return x->ops->max_message(x);
}

const char *xport_name(const struct xport *x)
{
    return x->ops->name;
}

int xport_set_epoch(struct xport *x, uint64_t epoch)
{
    return x->ops->set_epoch != NULL ? x->ops->set_epoch(x, epoch) : 0;
}

int xport_set_fence(struct xport *x, uint64_t fence)
{
    return x->ops->set_fence != NULL ? x->ops->set_fence(x, fence) : 0;
}

void xport_close(struct xport *x, xport_close_cb cb, void *arg)
{
    x->close_cb = cb;
    x->close_arg = arg;
    x->ops->close(x);
}

void xport__closed(struct xport *x, void (*free_fn)(struct xport *x))
{
    xport_close_cb cb = x->close_cb;
    void *arg = x->close_arg;
    free_fn(x);
    if (cb != NULL) {
        cb(arg);
    }
}
