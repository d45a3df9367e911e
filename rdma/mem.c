/*
 * rdma/mem.c: the deterministic in-process transport backend ("mem") for
 * tests. A struct xport_mem_net is a manually stepped network shared by
 * several struct xport endpoints: xport_send copies the message into one
 * global FIFO (so the order of messages between any two endpoints is the
 * send order) and queues the send completion; nothing is delivered and no
 * callback fires until the test calls xport_mem_net_deliver / _drop /
 * _complete. No loop and no timers are involved.
 *
 * Links are up by default. A down link completes new sends with
 * TERN_ENOCONN and drops what was queued on it. Queued bytes per ordered
 * pair are bounded (64 MiB): beyond that sends complete with TERN_EBUSY.
 * Closing an endpoint fires its pending completions with TERN_ECANCELED,
 * drops queued messages addressed to it, then runs the close callback
 * (synchronously, from inside xport_close).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <tern_common.h>

#include "xport_int.h"

#define MEM__MAX_MESSAGE ((size_t)256 << 20)
#define MEM__MAX_QUEUED  ((size_t)64 << 20)

struct mem_msg
{
    struct mem_msg *next;
    uint64_t from;
    uint64_t to;
    size_t len;
    uint8_t data[];
};

struct mem_completion
{
    struct mem_completion *next;
    struct mem_xport *owner;
    struct xport_send *req;
    int status;
};

struct mem_link
{
    struct mem_link *next;
    uint64_t from;
    uint64_t to;
};

struct mem_xport
{
    struct xport base;
    struct xport_mem_net *net;
    struct mem_xport *next;
    int started;
};

struct xport_mem_net
{
    struct mem_xport *xports;
    struct mem_msg *head, *tail;
    struct mem_completion *chead, *ctail;
    struct mem_link *down;
};

int xport_mem_net_new(struct xport_mem_net **out)
{
    struct xport_mem_net *net = tern_calloc(1, sizeof *net);
    if (net == NULL) {
        return -ENOMEM;
    }
    *out = net;
    return 0;
}

void xport_mem_net_free(struct xport_mem_net *net)
{
    if (net == NULL) {
        return;
    }
    while (net->head != NULL) {
        struct mem_msg *m = net->head;
        net->head = m->next;
        tern_free(m);
    }
    while (net->chead != NULL) {
        struct mem_completion *c = net->chead;
        net->chead = c->next;
        tern_free(c);
    }
    while (net->down != NULL) {
        struct mem_link *l = net->down;
        net->down = l->next;
        tern_free(l);
    }
    tern_free(net);
}

static int link_is_down(struct xport_mem_net *net, uint64_t from, uint64_t to)
{
    for (struct mem_link *l = net->down; l != NULL; l = l->next) {
        if (l->from == from && l->to == to) {
            return 1;
        }
    }
    return 0;
}

static int matches(uint64_t want, uint64_t have)
{
    return want == 0 || want == have;
}

static struct mem_xport *find_xport(struct xport_mem_net *net, uint64_t id)
{
    for (struct mem_xport *m = net->xports; m != NULL; m = m->next) {
        if (m->base.self_id == id) {
            return m;
        }
    }
    return NULL;
}

/* Unlink and return the first queued message matching from/to. */
static struct mem_msg *take_msg(struct xport_mem_net *net,
                                uint64_t from,
                                uint64_t to)
{
    struct mem_msg *prev = NULL;
    for (struct mem_msg *m = net->head; m != NULL; prev = m, m = m->next) {
        if (matches(from, m->from) && matches(to, m->to)) {
            if (prev == NULL) {
                net->head = m->next;
            } else {
                prev->next = m->next;
            }
            if (net->tail == m) {
                net->tail = prev;
            }
            m->next = NULL;
            return m;
        }
    }
    return NULL;
}

void xport_mem_net_set_link(struct xport_mem_net *net,
                            uint64_t from,
                            uint64_t to,
                            int up)
{
    struct mem_link **pp = &net->down;
    while (*pp != NULL) {
        if ((*pp)->from == from && (*pp)->to == to) {
            break;
        }
        pp = &(*pp)->next;
    }
    if (up) {
        if (*pp != NULL) {
            struct mem_link *l = *pp;
            *pp = l->next;
            tern_free(l);
        }
        return;
    }
    if (*pp == NULL) {
        struct mem_link *l = tern_calloc(1, sizeof *l);
        if (l == NULL) {
            return; /* test helper: best effort under OOM injection */
        }
        l->from = from;
        l->to = to;
        l->next = net->down;
        net->down = l;
    }
    xport_mem_net_drop(net, from, to, SIZE_MAX);
}

size_t xport_mem_net_pending(struct xport_mem_net *net,
                             uint64_t from,
                             uint64_t to)
{
    size_t n = 0;
    for (struct mem_msg *m = net->head; m != NULL; m = m->next) {
        n += matches(from, m->from) && matches(to, m->to);
    }
    return n;
}

size_t xport_mem_net_deliver(struct xport_mem_net *net,
                             uint64_t from,
                             uint64_t to,
                             size_t n)
{
    /* Only messages queued before the call: receivers may send more. */
    size_t limit = xport_mem_net_pending(net, from, to);
    size_t done = 0;
    if (limit > n) {
        limit = n;
    }
    while (done < limit) {
        struct mem_msg *m = take_msg(net, from, to);
        struct mem_xport *dst;
        if (m == NULL) {
            break;
        }
        dst = find_xport(net, m->to);
        if (dst != NULL && dst->started && dst->base.recv_cb != NULL) {
            dst->base.recv_cb(dst->base.recv_arg, m->from, m->data, m->len);
        }
        tern_free(m);
        done++;
    }
    return done;
}

int xport_mem_net_peer_down(struct xport_mem_net *net,
                            uint64_t from,
                            uint64_t to)
{
    struct mem_xport *dst = find_xport(net, to);
    if (dst == NULL || !dst->started || dst->base.peer_down_cb == NULL) {
        return 0;
    }
    xport__peer_down(&dst->base, from);
    return 1;
}

size_t xport_mem_net_drop(struct xport_mem_net *net,
                          uint64_t from,
                          uint64_t to,
                          size_t n)
{
    size_t done = 0;
    while (done < n) {
        struct mem_msg *m = take_msg(net, from, to);
        if (m == NULL) {
            break;
        }
        tern_free(m);
        done++;
    }
    return done;
}

size_t xport_mem_net_complete(struct xport_mem_net *net)
{
    struct mem_completion *list = net->chead;
    size_t n = 0;
    /* Callbacks may queue new completions: those wait for the next call. */
    net->chead = NULL;
    net->ctail = NULL;
    while (list != NULL) {
        struct mem_completion *c = list;
        list = c->next;
        c->req->cb(c->req, c->status);
        tern_free(c);
        n++;
    }
    return n;
}

static int mem_start(struct xport *x)
{
    struct mem_xport *m = (struct mem_xport *)x;
    m->started = 1;
    return 0;
}

static size_t queued_bytes(struct xport_mem_net *net,
                           uint64_t from,
                           uint64_t to)
{
    size_t n = 0;
    for (struct mem_msg *m = net->head; m != NULL; m = m->next) {
        if (m->from == from && m->to == to) {
            n += m->len;
        }
    }
    return n;
}

static int mem_send(struct xport *x,
                    struct xport_send *req,
                    uint64_t peer_id,
                    const char *peer_address,
                    const struct xport_iov *iov,
                    unsigned n)
{
    struct mem_xport *mx = (struct mem_xport *)x;
    struct xport_mem_net *net = mx->net;
    struct mem_completion *c;
    size_t total = xport_iov_total(iov, n);
    int status = 0;
    (void)peer_address;

    c = tern_calloc(1, sizeof *c);
    if (c == NULL) {
        return -ENOMEM;
    }
    if (link_is_down(net, x->self_id, peer_id)) {
        status = TERN_ENOCONN;
    } else if (queued_bytes(net, x->self_id, peer_id) + total >
               MEM__MAX_QUEUED) {
        status = TERN_EBUSY;
    } else {
        struct mem_msg *m = tern_malloc(sizeof *m + total);
        if (m == NULL) {
            tern_free(c);
            return -ENOMEM;
        }
        m->next = NULL;
        m->from = x->self_id;
        m->to = peer_id;
        m->len = total;
        xport_iov_gather(m->data, iov, n);
        if (net->tail == NULL) {
            net->head = m;
        } else {
            net->tail->next = m;
        }
        net->tail = m;
    }
    c->owner = mx;
    c->req = req;
    c->status = status;
    if (net->ctail == NULL) {
        net->chead = c;
    } else {
        net->ctail->next = c;
    }
    net->ctail = c;
    return 0;
}

static size_t mem_max_message(const struct xport *x)
{
    (void)x;
    return MEM__MAX_MESSAGE;
}

static void mem_free(struct xport *x)
{
    tern_free(x);
}

static void mem_close(struct xport *x)
{
    struct mem_xport *mx = (struct mem_xport *)x;
    struct xport_mem_net *net = mx->net;
    struct mem_completion **pp = &net->chead;
    struct mem_completion *mine = NULL, **mine_tail = &mine;

    /* Detach this endpoint's pending completions, then fire them. */
    net->ctail = NULL;
    while (*pp != NULL) {
        struct mem_completion *c = *pp;
        if (c->owner == mx) {
            *pp = c->next;
            c->next = NULL;
            *mine_tail = c;
            mine_tail = &c->next;
        } else {
            net->ctail = c;
            pp = &c->next;
        }
    }
    for (struct mem_xport **xp = &net->xports; *xp != NULL; xp = &(*xp)->next) {
        if (*xp == mx) {
            *xp = mx->next;
            break;
        }
    }
    xport_mem_net_drop(net, 0, x->self_id, SIZE_MAX);
    mx->started = 0;
    while (mine != NULL) {
        struct mem_completion *c = mine;
        mine = c->next;
        c->req->cb(c->req, TERN_ECANCELED);
        tern_free(c);
    }
    xport__closed(x, mem_free);
}

static const struct xport_ops mem_ops = {
    .name = "mem",
    .start = mem_start,
    .send = mem_send,
    .max_message = mem_max_message,
    .close = mem_close,
};

int xport_mem_new(struct xport_mem_net *net,
                  uint64_t self_id,
                  struct xport **out)
{
    struct mem_xport *mx;
    if (self_id == 0 || find_xport(net, self_id) != NULL) {
        return TERN_EINVAL;
    }
    mx = tern_calloc(1, sizeof *mx);
    if (mx == NULL) {
        return -ENOMEM;
    }
    mx->base.ops = &mem_ops;
    mx->base.self_id = self_id;
    mx->net = net;
    mx->next = net->xports;
    net->xports = mx;
    *out = &mx->base;
    return 0;
}
