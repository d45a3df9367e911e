/*
 * fallback backend of the transport interface (xport_fallback_new): a
 * composite transport over a FAST backend (shm, verbs) and a SLOW one
 * (tcp), chosen per peer: the fast path if a device and the peer agree,
 * else tcp; a fast-path failure falls back to tcp and the fast path is
 * re-tried in the background (Raft tolerates the switch). It owns both: they
 * are started together, closed together, and whatever either receives is
 * delivered upward unchanged (the composite has no wire format of its own: each
 * backend's format applies on its own sockets/rings).
 *
 * Peer addresses. The caller (raft) knows one address per peer: the slow
 * one (raft's configuration, stored in the raft log, keeps plain tcp
 * "host:port" addresses, so membership and restarts are unaffected). The
 * fast address is found, in this order:
 *   1. peer_address "SLOW|FAST" (explicit, e.g. for tests or a config that
 *      stores both): the part before the first '|' is the slow address,
 *      the rest the fast one;
 *   2. else options.fast_address(arg, peer_id, slow, out, cap) if given
 *      (the node derives it deterministically from the slow address; see
 *      node/node.c), returning 0 with a NUL-terminated out;
 *   3. else (or when the mapper returns non-zero) the peer has no fast
 *      path and always uses the slow backend.
 * Both nodes of a pair must agree on the mapping (same rule, same
 * directory/port): a peer that does not listen on the fast address simply
 * stays on the slow path (its fast connects fail; see below).
 *
 * Per-peer path state machine (each peer starts in FAST):
 *   FAST    every send goes to the fast backend. A send whose completion
 *           is a path failure (any negative status except TERN_EBUSY and
 *           TERN_ECANCELED: TERN_ENOCONN, a ring-size mismatch
 *           TERN_ETOOBIG, ...), or a fast xport_send that fails
 *           synchronously (bad fast address, shutting down), moves the
 *           peer to SLOW with retry_after = now + retry_ms. The failed
 *           sends complete upward with their fast status (raft counts
 *           them as lost; a synchronous fast failure is retried over slow
 *           within the same call, so it loses nothing).
 *   SLOW    every send goes to the slow backend. The first send at or
 *           after retry_after is a PROBE: it goes to the fast backend
 *           (the composite keeps a copy of its bytes) and the peer enters
 *           PROBING.
 *   PROBING sends go to the slow backend while the probe is in flight.
 *           The probe's completion decides: 0 -> FAST (counted in
 *           to_fast); a failure -> SLOW again with a new retry_after, and
 *           the probe's bytes are re-sent over the slow backend, so a
 *           failed probe loses nothing and its caller sees the slow
 *           outcome.
 * EBUSY policy: TERN_EBUSY from the fast backend means its per-peer queue
 * is full (the peer consumes slowly; the path works): it is passed upward
 * and does not switch (moving the backlog to tcp would not make the peer
 * faster and would reorder more). Failures of the slow backend are passed
 * upward and never change the path.
 * Stale failures: a switch back to FAST starts a new generation; failures
 * of fast sends issued in an older generation do not switch again.
 *
 * Order and loss. Within one path the backend's guarantee holds (in order
 * or lost). Across a switch (both directions) messages of one peer can
 * arrive out of order (the slow path may deliver after newer fast-path
 * messages, or before older ones), and fast sends that were "handed off"
 * (cb 0) just before the fast path died are lost with it. Raft tolerates
 * both: every message carries term and indices, an out-of-order or
 * missing AppendEntries is rejected and re-sent from the follower's
 * reported index, and heartbeats/votes are idempotent. Messages larger
 * than the fast backend's max_message go over the slow backend (no state
 * change): max_message of the composite is the slow backend's.
 *
 * Epoch and fence (xport_set_epoch/xport_set_fence), busy-polling
 * (xport_set_busy_poll) and adaptive polling (xport_set_adaptive_poll) go
 * to both backends; xport_get_stats sums both
 * backends' counters and adds the composite's own (fast_sends ...).
 * Start: both are started; the recv callback of the composite is looked up
 * at delivery, so re-pointing it (repl_close) works as for any backend.
 * Close: both backends are closed (their pending sends complete with
 * TERN_ECANCELED, passed upward); the composite's close callback runs
 * after both have closed. Every completion runs from a backend's own
 * deferred path, so no callback ever runs inside xport_send.
 */
#include "sendq.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tern_common.h>

#ifdef TERN_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

#define FB__DEFAULT_RETRY_MS 1000u
#define FB__ADDR_MAX         128 /* one backend address, NUL included */
#define FB__NAME_MAX         32

enum fb_state {
    FB_FAST,
    FB_SLOW,
    FB_PROBING,
};

enum fb_kind {
    FB_SEND_FAST,
    FB_SEND_SLOW,
    FB_SEND_PROBE,
};

struct fb_xport;

/* A destination node. Lives until the transport is freed (in-flight sends
 * point at it). */
struct fb_peer
{
    /* first member: id, address (as given to xport_send), retry_after
     * (SLOW: uv_now() from which a probe is sent) */
    struct xport_peer base;
    char slow[FB__ADDR_MAX];
    char fast[FB__ADDR_MAX]; /* "" = no fast path for this peer */
    enum fb_state state;
    uint64_t gen; /* incremented on every switch to FAST */
};

/* One send in flight in a backend: owns the inner request. */
struct fb_send
{
    struct xport_send inner;
    struct xport_send *outer; /* the caller's request */
    struct fb_xport *x;
    struct fb_peer *peer;
    enum fb_kind kind;
    uint64_t gen;
    size_t len;
    uint8_t *copy; /* PROBE only: the message bytes (owned) */
};

struct fb_xport
{
    struct xport base; /* first member: the interface's handle */
    struct xport_ops ops;
    char name[FB__NAME_MAX];
    uv_loop_t *loop;
    struct xport *fast;
    struct xport *slow;
    unsigned retry_ms;
    int (*fast_address)(void *arg,
                        uint64_t peer_id,
                        const char *slow_address,
                        char *out,
                        size_t cap);
    void *fast_address_arg;
    struct xport_peer *peers; /* of struct fb_peer */
    struct xport_fallback_stats stats;
    unsigned open; /* backends not yet closed */
    int closing;
};

static int fb_send(struct xport *base,
                   struct xport_send *req,
                   uint64_t peer_id,
                   const char *peer_address,
                   const struct xport_iov *iov,
                   unsigned n);

static const struct fb_xport *fb_of(const struct xport *base)
{
    if (base == NULL || base->ops == NULL || base->ops->send != fb_send) {
        return NULL;
    }
    return (const struct fb_xport *)base;
}

/* ---- peers ------------------------------------------------------------- */

/* Split/derive the slow and fast addresses of address into p. Returns 0 or
 * TERN_EINVAL. */
static int peer_addresses(struct fb_xport *x,
                          struct fb_peer *p,
                          uint64_t id,
                          const char *address)
{
    const char *bar = strchr(address, '|');
    size_t slow_len = bar != NULL ? (size_t)(bar - address) : strlen(address);

    if (slow_len == 0 || slow_len >= FB__ADDR_MAX) {
        return TERN_EINVAL;
    }
    memcpy(p->slow, address, slow_len);
    p->slow[slow_len] = '\0';
    p->fast[0] = '\0';
    if (bar != NULL) {
        size_t fast_len = strlen(bar + 1);
        if (fast_len == 0 || fast_len >= FB__ADDR_MAX) {
            return TERN_EINVAL;
        }
        memcpy(p->fast, bar + 1, fast_len + 1);
    } else if (x->fast_address != NULL) {
        if (x->fast_address(x->fast_address_arg, id, p->slow, p->fast,
                            sizeof p->fast) != 0) {
            p->fast[0] = '\0';
        }
        p->fast[sizeof p->fast - 1] = '\0';
    }
    return 0;
}

/* Find or create the peer for id; follow an address change (which starts
 * the peer afresh on the fast path). */
static int peer_get(struct fb_xport *x,
                    uint64_t id,
                    const char *address,
                    struct fb_peer **out)
{
    struct fb_peer tmp;
    struct xport_peer *bp;
    struct fb_peer *p;
    int rc;

    if (xport_peer_find(x->peers, id, address, &bp) == XPORT_PEER_SAME) {
        *out = (struct fb_peer *)bp;
        return 0;
    }
    if (strlen(address) >= XPORT_PEER_ADDR_MAX) {
        return TERN_EINVAL;
    }
    rc = peer_addresses(x, &tmp, id, address);
    if (rc != 0) {
        return rc;
    }
    rc = xport_peer_set(&x->peers, &bp, sizeof *p, id, address);
    if (rc != 0) {
        return rc;
    }
    p = (struct fb_peer *)bp;
    memcpy(p->slow, tmp.slow, sizeof p->slow);
    memcpy(p->fast, tmp.fast, sizeof p->fast);
    p->state = FB_FAST;
    p->gen++; /* failures of sends to the old address are stale */
    *out = p;
    return 0;
}

static void peer_to_slow(struct fb_xport *x, struct fb_peer *p)
{
    p->state = FB_SLOW;
    p->base.retry_after = uv_now(x->loop) + x->retry_ms;
}

/* ---- sending ----------------------------------------------------------- */

static int is_path_failure(int status)
{
    return status < 0 && status != TERN_EBUSY && status != TERN_ECANCELED;
}

static void on_inner_sent(struct xport_send *inner, int status);

/* Hand s to the slow backend. Returns xport_send's result. */
static int send_slow(struct fb_xport *x,
                     struct fb_send *s,
                     const struct xport_iov *iov,
                     unsigned n)
{
    int rc;

    s->kind = FB_SEND_SLOW;
    rc = xport_send_flags(x->slow, &s->inner, s->peer->base.id, s->peer->slow,
                          iov, n, s->outer->flags, on_inner_sent);
    if (rc == 0) {
        x->stats.slow_sends++;
    }
    return rc;
}

static void on_inner_sent(struct xport_send *inner, int status)
{
    struct fb_send *s = inner->data;
    struct fb_xport *x = s->x;
    struct fb_peer *p = s->peer;
    struct xport_send *req = s->outer;

    switch (s->kind) {
    case FB_SEND_PROBE:
        if (s->gen != p->gen || p->state != FB_PROBING) {
            break; /* the address changed meanwhile: outcome is stale */
        }
        if (status == 0) {
            p->state = FB_FAST;
            p->gen++;
            x->stats.to_fast++;
            break;
        }
        if (status == TERN_ECANCELED || x->closing) {
            peer_to_slow(x, p);
            break;
        }
        x->stats.fast_failures++;
        peer_to_slow(x, p);
        {
            /* Nothing of the probe reached the peer over the fast path:
             * re-send its bytes over the slow one; the caller sees that
             * outcome instead. */
            struct xport_iov iov = {s->copy, s->len};
            uint8_t *copy = s->copy;
            int rc = send_slow(x, s, &iov, 1);
            tern_free(copy);
            s->copy = NULL;
            if (rc == 0) {
                return; /* s lives on in the slow backend */
            }
        }
        break;
    case FB_SEND_FAST:
        if (is_path_failure(status)) {
            x->stats.fast_failures++;
            if (p->state == FB_FAST && s->gen == p->gen) {
                peer_to_slow(x, p);
                x->stats.to_slow++;
            }
        }
        break;
    case FB_SEND_SLOW:
        break;
    }
    tern_free(s->copy);
    tern_free(s);
    req->cb(req, status);
}

static int fb_send(struct xport *base,
                   struct xport_send *req,
                   uint64_t peer_id,
                   const char *peer_address,
                   const struct xport_iov *iov,
                   unsigned n)
{
    struct fb_xport *x = (struct fb_xport *)base;
    struct fb_peer *p;
    struct fb_send *s;
    size_t total;
    int use_fast = 0;
    int probe = 0;
    int rc;

    rc = xport_send_begin(x->closing, peer_address, iov, n, &total);
    if (rc != 0) {
        return rc;
    }
    rc = peer_get(x, peer_id, peer_address, &p);
    if (rc != 0) {
        return rc;
    }
    if (p->fast[0] != '\0' && total <= xport_max_message(x->fast)) {
        if (p->state == FB_FAST) {
            use_fast = 1;
        } else if (p->state == FB_SLOW &&
                   uv_now(x->loop) >= p->base.retry_after) {
            use_fast = 1;
            probe = 1;
        }
    }
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        return -ENOMEM;
    }
    s->inner.data = s;
    s->outer = req;
    s->x = x;
    s->peer = p;
    s->gen = p->gen;
    s->len = total;
    if (use_fast) {
        if (probe) {
            s->copy = tern_malloc(total > 0 ? total : 1);
            if (s->copy == NULL) {
                tern_free(s);
                return -ENOMEM;
            }
            xport_iov_gather(s->copy, iov, n);
        }
        s->kind = probe ? FB_SEND_PROBE : FB_SEND_FAST;
        rc = xport_send_flags(x->fast, &s->inner, peer_id, p->fast, iov, n,
                              s->outer->flags, on_inner_sent);
        if (rc == 0) {
            x->stats.fast_sends++;
            if (probe) {
                p->state = FB_PROBING;
                x->stats.probes++;
            }
            return 0;
        }
        tern_free(s->copy);
        s->copy = NULL;
        if (rc == -ENOMEM) {
            tern_free(s);
            return rc;
        }
        /* The fast path refused synchronously: switch now, send slow. */
        x->stats.fast_failures++;
        if (!probe) {
            x->stats.to_slow++;
        }
        peer_to_slow(x, p);
    }
    rc = send_slow(x, s, iov, n);
    if (rc != 0) {
        tern_free(s);
    }
    return rc;
}

/* ---- receiving --------------------------------------------------------- */

static void on_inner_recv(void *arg,
                          uint64_t from_id,
                          const void *msg,
                          size_t len)
{
    struct fb_xport *x = arg;

    if (x->base.recv_cb != NULL) {
        x->base.recv_cb(x->base.recv_arg, from_id, msg, len);
    }
}

/* Either backend's peer-down signal is ours (a hint either way). */
static void on_inner_peer_down(void *arg, uint64_t peer_id)
{
    struct fb_xport *x = arg;
    xport__peer_down(&x->base, peer_id);
}

/* ---- lifecycle --------------------------------------------------------- */

static int fb_start(struct xport *base)
{
    struct fb_xport *x = (struct fb_xport *)base;
    int rc;

    if (x->closing) {
        return TERN_ESHUTDOWN;
    }
    xport_set_peer_down(x->slow, on_inner_peer_down, x);
    xport_set_peer_down(x->fast, on_inner_peer_down, x);
    rc = xport_start(x->slow, on_inner_recv, x);
    if (rc == 0) {
        rc = xport_start(x->fast, on_inner_recv, x);
    }
    return rc;
}

static size_t fb_max_message(const struct xport *base)
{
    const struct fb_xport *x = (const struct fb_xport *)base;
    return xport_max_message(x->slow);
}

static int fb_set_epoch(struct xport *base, uint64_t epoch)
{
    struct fb_xport *x = (struct fb_xport *)base;
    int rc = xport_set_epoch(x->fast, epoch);
    int rc2 = xport_set_epoch(x->slow, epoch);
    return rc != 0 ? rc : rc2;
}

static int fb_set_fence(struct xport *base, uint64_t fence)
{
    struct fb_xport *x = (struct fb_xport *)base;
    int rc = xport_set_fence(x->fast, fence);
    int rc2 = xport_set_fence(x->slow, fence);
    return rc != 0 ? rc : rc2;
}

static int fb_set_busy_poll(struct xport *base, unsigned us)
{
    struct fb_xport *x = (struct fb_xport *)base;
    int rc = xport_set_busy_poll(x->fast, us);
    int rc2 = xport_set_busy_poll(x->slow, us);
    return rc != 0 ? rc : rc2;
}

static int fb_set_adaptive_poll(struct xport *base, unsigned us)
{
    struct fb_xport *x = (struct fb_xport *)base;
    int rc = xport_set_adaptive_poll(x->fast, us);
    int rc2 = xport_set_adaptive_poll(x->slow, us);
    return rc != 0 ? rc : rc2;
}

static void fb_get_stats(const struct xport *base, struct xport_stats *out)
{
    const struct fb_xport *x = (const struct fb_xport *)base;
    struct xport_stats inner;

    out->fast_sends = x->stats.fast_sends;
    out->slow_sends = x->stats.slow_sends;
    out->fast_failures = x->stats.fast_failures;
    out->to_slow = x->stats.to_slow;
    out->probes = x->stats.probes;
    out->to_fast = x->stats.to_fast;
    if (xport_get_stats(x->fast, &inner) == 0) {
        xport_stats_add(out, &inner);
    }
    if (xport_get_stats(x->slow, &inner) == 0) {
        xport_stats_add(out, &inner);
    }
}

static void fb_free(struct xport *base)
{
    struct fb_xport *x = (struct fb_xport *)base;
    xport_peers_free(&x->peers);
    tern_free(x);
}

static void on_inner_closed(void *arg)
{
    struct fb_xport *x = arg;
    if (--x->open == 0) {
        xport__closed(&x->base, fb_free);
    }
}

static void fb_close(struct xport *base)
{
    struct fb_xport *x = (struct fb_xport *)base;
    struct xport *fast = x->fast;
    struct xport *slow = x->slow;

    if (x->closing) {
        return;
    }
    x->closing = 1;
    x->open = 2;
    /* x may be freed inside the second call if both close synchronously:
     * touch nothing of x after it. */
    xport_close(fast, on_inner_closed, x);
    xport_close(slow, on_inner_closed, x);
}

int xport_fallback_new(uv_loop_t *loop,
                       struct xport *fast,
                       struct xport *slow,
                       const struct xport_fallback_options *opts,
                       struct xport **out,
                       char *errmsg)
{
    struct fb_xport *x;

    if (loop == NULL || fast == NULL || slow == NULL || fast == slow ||
        out == NULL) {
        tern_errmsg_printf(errmsg, "fallback: bad arguments");
        return TERN_EINVAL;
    }
    if (fast->self_id != slow->self_id) {
        tern_errmsg_printf(errmsg,
                           "fallback: backends of different nodes (%llu, "
                           "%llu)",
                           (unsigned long long)fast->self_id,
                           (unsigned long long)slow->self_id);
        return TERN_EINVAL;
    }
    x = tern_calloc(1, sizeof *x);
    if (x == NULL) {
        tern_errmsg_printf(errmsg, "fallback: out of memory");
        return -ENOMEM;
    }
    x->ops.name = x->name;
    x->ops.start = fb_start;
    x->ops.send = fb_send;
    x->ops.max_message = fb_max_message;
    x->ops.close = fb_close;
    x->ops.set_epoch = fb_set_epoch;
    x->ops.set_fence = fb_set_fence;
    x->ops.set_busy_poll = fb_set_busy_poll;
    x->ops.set_adaptive_poll = fb_set_adaptive_poll;
    x->ops.get_stats = fb_get_stats;
    (void)snprintf(x->name, sizeof x->name, "%s+%s", xport_name(fast),
                   xport_name(slow));
    x->base.ops = &x->ops;
    x->base.self_id = slow->self_id;
    x->loop = loop;
    x->fast = fast;
    x->slow = slow;
    x->retry_ms = FB__DEFAULT_RETRY_MS;
    if (opts != NULL) {
        x->retry_ms = opts->retry_ms != 0 ? opts->retry_ms : x->retry_ms;
        x->fast_address = opts->fast_address;
        x->fast_address_arg = opts->fast_address_arg;
    }
    *out = &x->base;
    return 0;
}

int xport_fallback_stats(const struct xport *base,
                         struct xport_fallback_stats *out)
{
    const struct fb_xport *x = fb_of(base);

    if (x == NULL || out == NULL) {
        return TERN_EINVAL;
    }
    *out = x->stats;
    return 0;
}

int xport_fallback_peer_fast(const struct xport *base, uint64_t peer_id)
{
    const struct fb_xport *x = fb_of(base);

    if (x == NULL) {
        return TERN_EINVAL;
    }
    for (const struct xport_peer *bp = x->peers; bp != NULL; bp = bp->next) {
        if (bp->id == peer_id) {
            const struct fb_peer *p = (const struct fb_peer *)bp;
            return p->state == FB_FAST && p->fast[0] != '\0';
        }
    }
    return -ENOENT;
}

int xport_rdma_device_count(void)
{
#ifdef TERN_HAVE_VERBS
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL) {
        return 0;
    }
    ibv_free_device_list(list);
    return n;
#else
    return 0;
#endif
}
