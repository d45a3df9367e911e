/*
 * Private to rdma/: the backend vtable behind struct xport. Every backend
 * embeds struct xport as its first member and fills ops.
 */
#ifndef TERN_XPORT_INT_H
#define TERN_XPORT_INT_H

#include "xport.h"
#include "xport_test.h"

#include <netinet/in.h>

struct xport_ops
{
    const char *name;
    int (*start)(struct xport *x);
    int (*send)(struct xport *x,
                struct xport_send *req,
                uint64_t peer_id,
                const char *peer_address,
                const struct xport_iov *iov,
                unsigned n);
    size_t (*max_message)(const struct xport *x);
    void (*close)(struct xport *x);
    /* Optional (NULL: the backend has no epochs; raft's own term check in
     * every message is then the only fence). */
    int (*set_epoch)(struct xport *x, uint64_t epoch);
    int (*set_fence)(struct xport *x, uint64_t fence);
    /* Optional (NULL: the backend does not poll; xport_set_busy_poll then
     * returns 0 and does nothing). */
    int (*set_busy_poll)(struct xport *x, unsigned us);
    /* Optional (NULL: xport_set_adaptive_poll returns 0, does nothing). */
    int (*set_adaptive_poll)(struct xport *x, unsigned us);
    /* Optional (NULL: every counter stays 0): fill in the counters this
     * backend keeps; out arrives zeroed. */
    void (*get_stats)(const struct xport *x, struct xport_stats *out);
};

struct xport
{
    const struct xport_ops *ops;
    uint64_t self_id;
    xport_recv_cb recv_cb;
    void *recv_arg;
    xport_close_cb close_cb;
    void *close_arg;
    xport_peer_down_cb peer_down_cb; /* xport_set_peer_down */
    void *peer_down_arg;
};

/* A backend saw an established connection with peer_id break (xport.h,
 * "Peer-down signal"): tell the user, if it asked. */
void xport__peer_down(struct xport *x, uint64_t peer_id);

/* Called by a backend once fully closed: runs the user's close callback,
 * then the backend's free function. */
void xport__closed(struct xport *x, void (*free_fn)(struct xport *x));

/* Add every counter of add to sum (the fallback composite's totals). */
void xport_stats_add(struct xport_stats *sum, const struct xport_stats *add);

/* Sum of iov[0..n).len. */
size_t xport_iov_total(const struct xport_iov *iov, unsigned n);

/* The argument checks every connection backend's send starts with:
 * TERN_ESHUTDOWN once the transport is closing, TERN_EINVAL without a
 * peer address or with n > 0 and no iov; else 0 with *total set to the
 * message size. */
int xport_send_begin(int closing,
                     const char *peer_address,
                     const struct xport_iov *iov,
                     unsigned n,
                     size_t *total /* OUT */);

/* Copy the concatenation of iov[0..n) to dst (room for xport_iov_total
 * bytes; the iov buffers are only read). */
void xport_iov_gather(uint8_t *dst, const struct xport_iov *iov, unsigned n);

/* Longest "a.b.c.d:port" address (NUL included) of the IPv4 backends. */
#define XPORT_IPV4_ADDR_MAX 64

/* Parse "a.b.c.d:port" (dotted quad, decimal port 0..65535, shorter than
 * XPORT_IPV4_ADDR_MAX) into *sa. Returns 0 or TERN_EINVAL. Used by tcp
 * and verbs for their addresses. */
int xport_parse_ipv4(const char *address, struct sockaddr_in *sa /* OUT */);

/* Busy-poll round (tcp, verbs; shm has its own, on the rings): while a
 * round runs, an idle handle keeps the loop from sleeping and calls the
 * backend's cb on every iteration. A send arms a round of `us`
 * microseconds (or moves its deadline); the backend stops it when what it
 * waited for came, or when xport_spin_expired. us = 0: off. The handle is
 * the backend's to close (uv_close(&s->idle, ...)). */
struct xport_spin
{
    uv_idle_t idle; /* idle.data: the backend */
    uv_idle_cb cb;
    unsigned us;    /* budget after a send; 0 = off */
    uint64_t until; /* uv_hrtime deadline of the running round */
    int on;         /* idle is started */
};
/* Cannot fail (uv_idle_init). */
void xport_spin_init(struct xport_spin *s,
                     uv_loop_t *loop,
                     void *data,
                     uv_idle_cb cb);
void xport_spin_arm(struct xport_spin *s); /* no-op when us == 0 */
void xport_spin_stop(struct xport_spin *s);
void xport_spin_set(struct xport_spin *s, unsigned us); /* 0 also stops */
int xport_spin_expired(const struct xport_spin *s);
/* Run a round until the uv_hrtime deadline until, whatever s->us (an
 * adaptive round, adapt.h). */
void xport_spin_until(struct xport_spin *s, uint64_t until);

/* A one-shot wake-up of the loop at a uv_hrtime instant with microsecond
 * resolution (uv_timer has milliseconds): a timerfd under uv_poll. The
 * adaptive poll (adapt.h) starts a round that is due later from it, so
 * the loop's own wake-up is paid before the message comes. */
struct xport_wake
{
    uv_poll_t poll; /* poll.data: the backend */
    int fd;         /* the timerfd; -1: none (init failed) */
    int armed;
};
/* Create the timerfd and its poll handle on loop; cb runs when it fires
 * and calls xport_wake_fired. 0, or -errno (then w->fd is -1 and no
 * handle exists: the backend runs only rounds due at once). */
int xport_wake_init(struct xport_wake *w,
                    uv_loop_t *loop,
                    void *data,
                    uv_poll_cb cb);
/* Fire once at the uv_hrtime instant when (replaces a pending one). */
void xport_wake_at(struct xport_wake *w, uint64_t when);
/* Disarm a pending wake-up (no syscall if none is pending). */
void xport_wake_cancel(struct xport_wake *w);
/* In cb: consume the expiration. */
void xport_wake_fired(struct xport_wake *w);
struct xport_adapt;
/* A send under adaptive polling (adapt.h), shared by tcp and shm: plan a
 * round with xport_adapt_sent. One due now: any pending wake-up is
 * cancelled (*wake_until = 0) and its deadline returned, for the caller
 * to start. One due later: w is armed at its start, recorded in
 * *wake_at and *wake_until (the round the wake-up starts), and 0 is
 * returned, as when no round is planned or adaptive polling is off. */
uint64_t xport_adapt_arm(struct xport_adapt *a,
                         struct xport_wake *w,
                         uint64_t *wake_until,
                         uint64_t *wake_at);
/* Close the handle (cb: the backend's handle-closed callback) and the
 * timerfd. Only after a successful xport_wake_init. */
void xport_wake_close(struct xport_wake *w, uv_close_cb cb);

#endif /* TERN_XPORT_INT_H */
