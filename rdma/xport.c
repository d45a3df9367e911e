/* Backend-independent entry points of the transport interface, and the
 * small helpers every backend shares (xport_int.h). */
#include "xport_int.h"

#include "adapt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <tern_common.h>

int xport_start(struct xport *x, xport_recv_cb cb, void *arg)
{
    x->recv_cb = cb;
    x->recv_arg = arg;
    return x->ops->start(x);
}

int xport_send_flags(struct xport *x,
                     struct xport_send *req,
                     uint64_t peer_id,
                     const char *peer_address,
                     const struct xport_iov *iov,
                     unsigned n,
                     unsigned flags,
                     xport_send_cb cb)
{
    if (xport_iov_total(iov, n) > x->ops->max_message(x)) {
        return TERN_ETOOBIG;
    }
    req->cb = cb;
    req->flags = flags;
    return x->ops->send(x, req, peer_id, peer_address, iov, n);
}

int xport_send(struct xport *x,
               struct xport_send *req,
               uint64_t peer_id,
               const char *peer_address,
               const struct xport_iov *iov,
               unsigned n,
               xport_send_cb cb)
{
    return xport_send_flags(x, req, peer_id, peer_address, iov, n, 0, cb);
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

int xport_set_busy_poll(struct xport *x, unsigned us)
{
    if (x == NULL) {
        return TERN_EINVAL;
    }
    return x->ops->set_busy_poll != NULL ? x->ops->set_busy_poll(x, us) : 0;
}

int xport_set_adaptive_poll(struct xport *x, unsigned us)
{
    if (x == NULL) {
        return TERN_EINVAL;
    }
    return x->ops->set_adaptive_poll != NULL ? x->ops->set_adaptive_poll(x, us)
                                             : 0;
}

int xport_get_stats(const struct xport *x, struct xport_stats *out)
{
    if (x == NULL || out == NULL) {
        return TERN_EINVAL;
    }
    memset(out, 0, sizeof *out);
    if (x->ops->get_stats != NULL) {
        x->ops->get_stats(x, out);
    }
    return 0;
}

void xport_stats_add(struct xport_stats *sum, const struct xport_stats *add)
{
    sum->doorbells += add->doorbells;
    sum->wakeups += add->wakeups;
    sum->spins += add->spins;
    sum->spin_hits += add->spin_hits;
    sum->spin_ns += add->spin_ns;
    sum->credit_waits += add->credit_waits;
    sum->fenced += add->fenced;
    sum->corrupt += add->corrupt;
    sum->fast_sends += add->fast_sends;
    sum->slow_sends += add->slow_sends;
    sum->fast_failures += add->fast_failures;
    sum->to_slow += add->to_slow;
    sum->probes += add->probes;
    sum->to_fast += add->to_fast;
    sum->auth_refused += add->auth_refused;
    if (add->last_refusal[0] != '\0') {
        memcpy(sum->last_refusal, add->last_refusal, sizeof(sum->last_refusal));
    }
}

void xport_set_peer_down(struct xport *x, xport_peer_down_cb cb, void *arg)
{
    x->peer_down_cb = cb;
    x->peer_down_arg = arg;
}

void xport__peer_down(struct xport *x, uint64_t peer_id)
{
    if (x->peer_down_cb != NULL && peer_id != 0) {
        x->peer_down_cb(x->peer_down_arg, peer_id);
    }
}

void xport_close(struct xport *x, xport_close_cb cb, void *arg)
{
    x->peer_down_cb = NULL;
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

size_t xport_iov_total(const struct xport_iov *iov, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        total += iov[i].len;
    }
    return total;
}

int xport_send_begin(int closing,
                     const char *peer_address,
                     const struct xport_iov *iov,
                     unsigned n,
                     size_t *total)
{
    if (closing) {
        return TERN_ESHUTDOWN;
    }
    if (peer_address == NULL || (n > 0 && iov == NULL)) {
        return TERN_EINVAL;
    }
    *total = xport_iov_total(iov, n);
    return 0;
}

void xport_iov_gather(uint8_t *dst, const struct xport_iov *iov, unsigned n)
{
    size_t off = 0;
    for (unsigned i = 0; i < n; i++) {
        if (iov[i].len > 0) {
            memcpy(dst + off, iov[i].base, iov[i].len);
        }
        off += iov[i].len;
    }
}

int xport_parse_ipv4(const char *address, struct sockaddr_in *sa)
{
    char host[XPORT_IPV4_ADDR_MAX];
    const char *colon;
    char *end;
    unsigned long port;
    size_t hlen;

    if (address == NULL || strlen(address) >= XPORT_IPV4_ADDR_MAX) {
        return TERN_EINVAL;
    }
    colon = strrchr(address, ':');
    if (colon == NULL || colon == address || colon[1] < '0' || colon[1] > '9') {
        return TERN_EINVAL;
    }
    hlen = (size_t)(colon - address);
    memcpy(host, address, hlen);
    host[hlen] = '\0';
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || port > 65535) {
        return TERN_EINVAL;
    }
    if (uv_ip4_addr(host, (int)port, sa) != 0) {
        return TERN_EINVAL;
    }
    return 0;
}

void xport_spin_init(struct xport_spin *s,
                     uv_loop_t *loop,
                     void *data,
                     uv_idle_cb cb)
{
    memset(s, 0, sizeof *s);
    (void)uv_idle_init(loop, &s->idle);
    s->idle.data = data;
    s->cb = cb;
}

void xport_spin_arm(struct xport_spin *s)
{
    if (s->us == 0) {
        return;
    }
    s->until = uv_hrtime() + (uint64_t)s->us * 1000u;
    if (!s->on) {
        uv_idle_start(&s->idle, s->cb);
        s->on = 1;
    }
}

void xport_spin_stop(struct xport_spin *s)
{
    if (s->on) {
        uv_idle_stop(&s->idle);
        s->on = 0;
    }
}

void xport_spin_set(struct xport_spin *s, unsigned us)
{
    s->us = us;
    if (us == 0) {
        xport_spin_stop(s);
    }
}

int xport_spin_expired(const struct xport_spin *s)
{
    return uv_hrtime() >= s->until;
}

void xport_spin_until(struct xport_spin *s, uint64_t until)
{
    s->until = until;
    if (!s->on) {
        uv_idle_start(&s->idle, s->cb);
        s->on = 1;
    }
}

int xport_wake_init(struct xport_wake *w,
                    uv_loop_t *loop,
                    void *data,
                    uv_poll_cb cb)
{
    int rc;

    w->armed = 0;
    w->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (w->fd < 0) {
        return -errno;
    }
    rc = uv_poll_init(loop, &w->poll, w->fd);
    if (rc != 0) {
        goto err_after_fd;
    }
    w->poll.data = data;
    rc = uv_poll_start(&w->poll, UV_READABLE, cb);
    if (rc != 0) {
        /* The handle exists: closing it is the caller's (as on success). */
        return 0;
    }
    return 0;

err_after_fd:
    close(w->fd);
    w->fd = -1;
    return rc;
}

void xport_wake_at(struct xport_wake *w, uint64_t when)
{
    struct itimerspec its;

    if (w->fd < 0) {
        return;
    }
    memset(&its, 0, sizeof its);
    /* uv_hrtime is CLOCK_MONOTONIC in nanoseconds; 0 would disarm. */
    its.it_value.tv_sec = (time_t)(when / 1000000000u);
    its.it_value.tv_nsec = (long)(when % 1000000000u);
    if (when == 0) {
        its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(w->fd, TFD_TIMER_ABSTIME, &its, NULL) == 0) {
        w->armed = 1;
    }
}

uint64_t xport_adapt_arm(struct xport_adapt *a,
                         struct xport_wake *w,
                         uint64_t *wake_until,
                         uint64_t *wake_at)
{
    uint64_t now;
    struct xport_adapt_plan p;

    if (a->cap_ns == 0) {
        return 0;
    }
    now = uv_hrtime();
    p = xport_adapt_sent(a, now);
    if (p.until == 0) {
        return 0;
    }
    if (p.start <= now) {
        *wake_until = 0;
        xport_wake_cancel(w);
        return p.until;
    }
    if (w->fd >= 0) {
        *wake_until = p.until;
        *wake_at = p.start;
        xport_wake_at(w, p.start);
    }
    return 0;
}

void xport_wake_cancel(struct xport_wake *w)
{
    struct itimerspec its;

    if (w->fd < 0 || !w->armed) {
        return;
    }
    memset(&its, 0, sizeof its);
    (void)timerfd_settime(w->fd, 0, &its, NULL);
    w->armed = 0;
}

void xport_wake_fired(struct xport_wake *w)
{
    uint64_t n;

    (void)!read(w->fd, &n, sizeof n);
    w->armed = 0;
}

void xport_wake_close(struct xport_wake *w, uv_close_cb cb)
{
    /* uv_close stops polling at once, so the fd may go now. */
    uv_close((uv_handle_t *)&w->poll, cb);
    close(w->fd);
    w->fd = -1;
    w->armed = 0;
}
