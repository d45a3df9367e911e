/* Shared helpers of the rdma/ unit tests (test_conformance.c, test_tcp.c,
 * test_shm.c, test_fallback.c, test_poll_stats.c;
 * tests/hw/test_verbs_conformance.c through test_conformance.c): send requests
 * that check the xport contract's completion rules (exactly once, never inside
 * xport_send), the message pattern, sending a patterned message in two iov
 * pieces, closing a transport and waiting for its close callback, and a TCP
 * transport on a random loopback port.
 *
 * Header-only, included once per test file (static helpers). The
 * including file defines, before or after the include:
 *   static void run_until(const int *flag, int want);
 * which runs its loop(s) until *flag >= want, bounded by count and time,
 * failing the test otherwise. It resets in_send and reentrant_cbs in its
 * setup and checks reentrant_cbs == 0 in its teardown. */
#ifndef TERN_XPORT_TEST_HARNESS_H
#define TERN_XPORT_TEST_HARNESS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <tern_common.h>
#include <xport.h>

static void run_until(const int *flag, int want);

static int in_send;       /* set around xport_send: callbacks must not see it */
static int reentrant_cbs; /* callbacks that ran inside xport_send */

/* Byte i of message k. */
static inline uint8_t pattern(unsigned k, size_t i)
{
    return (uint8_t)((size_t)k * 131u + i * 7u);
}

struct sreq
{
    struct xport_send req;
    int status;
    int done;
    int *counter; /* incremented on completion when not NULL */
};

static inline void on_sent(struct xport_send *req, int status)
{
    struct sreq *r = (struct sreq *)req;
    if (in_send) {
        reentrant_cbs++;
    }
    cr_expect_eq(r->done, 0, "callback fires exactly once");
    r->done++;
    r->status = status;
    if (r->counter != NULL) {
        (*r->counter)++;
    }
}

/* Send message k of len bytes: pattern(k, i), the first 4 bytes replaced
 * by the u32 index k when len >= 4; in two iov pieces. The buffer is
 * scribbled right after the call (the transport must have copied).
 * Returns xport_send's result; r (reset here) gets the completion. */
static inline int send_msg(struct xport *x,
                           struct sreq *r,
                           uint64_t peer,
                           const char *addr,
                           unsigned k,
                           size_t len,
                           int *counter)
{
    uint8_t *buf = malloc(len + 4);
    struct xport_iov iov[2];
    int rc;

    cr_assert(buf != NULL);
    for (size_t i = 0; i < len; i++) {
        buf[i] = pattern(k, i);
    }
    if (len >= 4) {
        tern_put_u32(buf, k);
    }
    iov[0].base = buf;
    iov[0].len = len / 3;
    iov[1].base = buf + len / 3;
    iov[1].len = len - len / 3;
    memset(r, 0, sizeof *r);
    r->counter = counter;
    in_send = 1;
    rc = xport_send(x, &r->req, peer, addr, iov, 2, on_sent);
    in_send = 0;
    memset(buf, 0xee, len);
    free(buf);
    return rc;
}

/* Send message k of len bytes (accepted: asserted) and wait for its
 * completion; returns its status. */
static inline int send_and_wait(struct xport *x,
                                uint64_t peer,
                                const char *addr,
                                unsigned k,
                                size_t len)
{
    struct sreq r;
    cr_assert_eq(send_msg(x, &r, peer, addr, k, len, NULL), 0);
    run_until(&r.done, 1);
    return r.status;
}

static inline void on_closed(void *arg)
{
    (*(int *)arg)++;
}

/* Close x and wait for its close callback. */
static inline void close_and_wait(struct xport *x)
{
    int closed = 0;
    xport_close(x, on_closed, &closed);
    run_until(&closed, 1);
}

/* A TCP transport on loop at a random 127.0.0.1 port in 20000-60000
 * (written to addr, cap bytes), retried on EADDRINUSE. */
static inline struct xport *tcp_make_random(uv_loop_t *loop,
                                            uint64_t id,
                                            const struct xport_tcp_options *o,
                                            char *addr,
                                            size_t cap)
{
    char errmsg[TERN_ERRMSG_SIZE];
    struct xport *x = NULL;

    for (int i = 0; i < 100; i++) {
        int rc;
        (void)snprintf(addr, cap, "127.0.0.1:%d", 20000 + rand() % 40000);
        rc = xport_tcp_new(loop, id, addr, o, &x, errmsg);
        if (rc == 0) {
            cr_assert_str_eq(xport_name(x), "tcp");
            return x;
        }
        cr_assert_eq(rc, -EADDRINUSE, "xport_tcp_new: %s", errmsg);
    }
    cr_assert_fail("no free port");
    return NULL;
}

#endif /* TERN_XPORT_TEST_HARNESS_H */
