/*
 * tests/unit/raft/txport.c: the test-only wrapping xport (see txport.h).
 */
#include "txport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "repl_int.h"

struct tsend
{
    struct xport_send xs;
    struct xport_send *outer; /* NULL: nobody waits */
    uint8_t stamp[8];
};

struct txport_held
{
    struct txport_held *next;
    struct xport_send *outer;
    uint64_t peer_id;
    char addr[REPL_WIRE_ADDR_MAX + 1];
    size_t len;
    uint8_t data[]; /* stamp + message */
};

static struct txport *tx(struct xport *x)
{
    return (struct txport *)x;
}

static void log_event(struct txport *t, int kind, uint64_t value)
{
    if (t->n_events < TXPORT_MAX_EVENTS) {
        t->events[t->n_events].kind = kind;
        t->events[t->n_events].value = value;
        t->n_events++;
    }
}

static void t_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct txport *t = arg;
    const uint8_t *b = msg;
    uint64_t epoch;
    if (len < 8) {
        return;
    }
    epoch = tern_get_u64(b);
    b += 8;
    len -= 8;
    if (len > 5 && b[5] == RAFT_IO_APPEND_ENTRIES && t->n_ae < TXPORT_MAX_AE) {
        struct repl_wire w;
        if (repl_codec_decode(b, len, &w) == 0) {
            struct txport_ae *a = &t->ae[t->n_ae++];
            const struct raft_append_entries *m = &w.msg.append_entries;
            a->from = from;
            a->term = m->term;
            a->epoch = epoch;
            a->prev_index = m->prev_log_index;
            a->prev_term = m->prev_log_term;
            a->commit = m->leader_commit;
            a->n = m->n_entries;
            a->len = len;
            repl_wire_release(&w);
        }
    }
    if (t->fencing && epoch < t->fence) {
        t->fenced++;
        return;
    }
    t->delivered++;
    if (t->base.recv_cb != NULL) {
        t->base.recv_cb(t->base.recv_arg, from, b, len);
    }
}

static void t_peer_down(void *arg, uint64_t peer_id)
{
    xport__peer_down(arg, peer_id);
}

static int t_start(struct xport *x)
{
    xport_set_peer_down(tx(x)->inner, t_peer_down, x);
    return xport_start(tx(x)->inner, t_recv, x);
}

static void tsend_done(struct xport_send *xs, int status)
{
    struct tsend *s = xs->data;
    struct xport_send *outer = s->outer;
    tern_free(s);
    if (outer != NULL) {
        outer->cb(outer, status);
    }
}

/* The epoch and the fence must already be the term of a Raft frame. */
static void check_stamp(struct txport *t, const struct xport_iov *iov)
{
    const uint8_t *h = iov[0].base;
    size_t hl = iov[0].len;
    uint16_t alen;
    const uint8_t *body;
    uint64_t term;
    unsigned type;
    if (hl < 34) {
        return;
    }
    type = h[5];
    if (type < RAFT_IO_APPEND_ENTRIES || type > RAFT_IO_TIMEOUT_NOW) {
        return;
    }
    alen = tern_get_u16(h + 32);
    if (hl < 34u + alen + 8u) {
        return;
    }
    body = h + 34 + alen;
    term = tern_get_u64(body);
    if (type == RAFT_IO_REQUEST_VOTE && hl >= 34u + alen + 34u &&
        body[33] != 0) {
        term--; /* pre-vote: asks for term + 1 */
    }
    t->raft_sent++;
    if (type == RAFT_IO_REQUEST_VOTE_RESULT && hl >= 34u + alen + 10u &&
        body[9] == raft_tribool_true) {
        /* 0.15 answers a pre-vote with the term asked for (the candidate's
         * term + 1) without adopting it: only the order is checked. */
        if (t->epoch != t->fence || term <= t->epoch) {
            t->stamp_errors++;
        }
        return;
    }
    if (t->epoch != term || t->fence != term) {
        t->stamp_errors++;
        if (getenv("TXPORT_DEBUG") != NULL) {
            (void)fprintf(stderr,
                          "txport %llu: type %u term %llu epoch %llu "
                          "pv %d\n",
                          (unsigned long long)t->base.self_id, type,
                          (unsigned long long)term,
                          (unsigned long long)t->epoch,
                          type == RAFT_IO_REQUEST_VOTE ? body[33] : -1);
        }
    }
}

static int submit(struct txport *t,
                  struct xport_send *outer,
                  uint64_t peer,
                  const char *addr,
                  const struct xport_iov *iov,
                  unsigned n,
                  const uint8_t stamp[8])
{
    struct tsend *s = tern_calloc(1, sizeof *s);
    struct xport_iov *v;
    int rv;
    if (s == NULL) {
        return -ENOMEM;
    }
    v = tern_calloc(n + 1, sizeof *v);
    if (v == NULL) {
        tern_free(s);
        return -ENOMEM;
    }
    memcpy(s->stamp, stamp, 8);
    v[0].base = s->stamp;
    v[0].len = 8;
    memcpy(v + 1, iov, n * sizeof *v);
    s->outer = outer;
    s->xs.data = s;
    rv = xport_send(t->inner, &s->xs, peer, addr, v, n + 1, tsend_done);
    tern_free(v);
    if (rv != 0) {
        tern_free(s);
    }
    return rv;
}

static int t_send(struct xport *x,
                  struct xport_send *req,
                  uint64_t peer_id,
                  const char *peer_address,
                  const struct xport_iov *iov,
                  unsigned n)
{
    struct txport *t = tx(x);
    uint8_t stamp[8];
    check_stamp(t, iov);
    tern_put_u64(stamp, t->epoch);
    if (t->hold) {
        size_t len = 8;
        struct txport_held *h;
        int k;
        for (unsigned i = 0; i < n; i++) {
            len += iov[i].len;
        }
        h = tern_malloc(sizeof *h + len);
        if (h == NULL) {
            return -ENOMEM;
        }
        h->next = NULL;
        h->outer = req;
        h->peer_id = peer_id;
        k = snprintf(h->addr, sizeof h->addr, "%s", peer_address);
        if (k < 0 || (size_t)k >= sizeof h->addr) {
            tern_free(h); /* would be released to a truncated address */
            return -ENAMETOOLONG;
        }
        h->len = 0;
        memcpy(h->data, stamp, 8);
        h->len = 8;
        for (unsigned i = 0; i < n; i++) {
            if (iov[i].len > 0) {
                memcpy(h->data + h->len, iov[i].base, iov[i].len);
            }
            h->len += iov[i].len;
        }
        if (t->held_tail == NULL) {
            t->held_head = h;
        } else {
            t->held_tail->next = h;
        }
        t->held_tail = h;
        return 0;
    }
    return submit(t, req, peer_id, peer_address, iov, n, stamp);
}

void txport_release(struct txport *t)
{
    while (t->held_head != NULL) {
        struct txport_held *h = t->held_head;
        struct xport_iov v;
        t->held_head = h->next;
        if (t->held_head == NULL) {
            t->held_tail = NULL;
        }
        v.base = h->data + 8;
        v.len = h->len - 8;
        if (submit(t, h->outer, h->peer_id, h->addr, &v, 1, h->data) != 0) {
            h->outer->cb(h->outer, TERN_ENOCONN);
        }
        tern_free(h);
    }
}

static size_t t_max_message(const struct xport *x)
{
    const struct txport *t = (const struct txport *)x;
    return t->max_message != 0 ? t->max_message
                               : xport_max_message(t->inner) - 8;
}

static void t_free(struct xport *x)
{
    struct txport *t = tx(x);
    free(t->ae);
    tern_free(t);
}

static void inner_closed(void *arg)
{
    xport__closed(arg, t_free);
}

static void t_close(struct xport *x)
{
    struct txport *t = tx(x);
    while (t->held_head != NULL) {
        struct txport_held *h = t->held_head;
        t->held_head = h->next;
        h->outer->cb(h->outer, TERN_ECANCELED);
        tern_free(h);
    }
    t->held_tail = NULL;
    xport_close(t->inner, inner_closed, x);
}

static int t_set(struct txport *t, int kind, uint64_t v)
{
    if (t->fail_sets > 0) {
        t->fail_sets--;
        return -EIO;
    }
    log_event(t, kind, v);
    if (kind == TXPORT_EPOCH) {
        t->epoch = v;
    } else {
        t->fence = v;
    }
    return 0;
}

static int t_set_epoch(struct xport *x, uint64_t epoch)
{
    return t_set(tx(x), TXPORT_EPOCH, epoch);
}

static int t_set_fence(struct xport *x, uint64_t fence)
{
    return t_set(tx(x), TXPORT_FENCE, fence);
}

static const struct xport_ops t_ops = {
    .name = "txport",
    .start = t_start,
    .send = t_send,
    .max_message = t_max_message,
    .close = t_close,
    .set_epoch = t_set_epoch,
    .set_fence = t_set_fence,
};

int txport_new(struct xport *inner,
               size_t max_message,
               bool fencing,
               struct txport **out)
{
    struct txport *t = tern_calloc(1, sizeof *t);
    if (t == NULL) {
        return -ENOMEM;
    }
    t->ae = calloc(TXPORT_MAX_AE, sizeof *t->ae);
    if (t->ae == NULL) {
        tern_free(t);
        return -ENOMEM;
    }
    t->base.ops = &t_ops;
    t->base.self_id = inner->self_id;
    t->inner = inner;
    t->max_message = max_message;
    t->fencing = fencing;
    *out = t;
    return 0;
}
