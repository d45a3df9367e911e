/*
 * tests/unit/rdma/test_mem.c: the deterministic in-process xport backend
 * (rdma/mem.c): nothing happens until stepped, per-pair ordering, deferred
 * completions, links down, drops, close cancels.
 */
#include <string.h>

#include <criterion/criterion.h>

#include <tern_common.h>

#include "xport.h"
#include "xport_test.h"

struct rx
{
    int n;
    uint64_t from[16];
    char msg[16][32];
};

static void on_recv(void *arg, uint64_t from, const void *msg, size_t len)
{
    struct rx *r = arg;
    cr_assert_lt(r->n, 16);
    cr_assert_lt(len, 32);
    r->from[r->n] = from;
    memcpy(r->msg[r->n], msg, len);
    r->msg[r->n][len] = '\0';
    r->n++;
}

struct done
{
    int n;
    int status[16];
};

static void on_sent(struct xport_send *req, int status)
{
    struct done *d = req->data;
    d->status[d->n++] = status;
}

static int send_str(struct xport *x,
                    struct xport_send *req,
                    uint64_t to,
                    const char *s,
                    struct done *d)
{
    struct xport_iov iov[2] = {{s, 1}, {s + 1, strlen(s) - 1}};
    req->data = d;
    return xport_send(x, req, to, "mem", iov, 2, on_sent);
}

static void closed(void *arg)
{
    (*(int *)arg)++;
}

Test(mem, stepped_delivery_and_completion)
{
    struct xport_mem_net *net;
    struct xport *a, *b;
    struct rx rb = {0};
    struct done d = {0};
    struct xport_send r1, r2, r3;
    int nclosed = 0;

    cr_assert_eq(xport_mem_net_new(&net), 0);
    cr_assert_eq(xport_mem_new(net, 1, &a), 0);
    cr_assert_eq(xport_mem_new(net, 2, &b), 0);
    cr_expect_neq(xport_mem_new(net, 2, &b), 0, "duplicate id");
    cr_expect_str_eq(xport_name(a), "mem");
    cr_assert_eq(xport_start(b, on_recv, &rb), 0);

    cr_assert_eq(send_str(a, &r1, 2, "one", &d), 0);
    cr_assert_eq(send_str(a, &r2, 2, "two", &d), 0);
    cr_expect_eq(d.n, 0, "completions are deferred");
    cr_expect_eq(rb.n, 0, "nothing delivered before stepping");
    cr_expect_eq(xport_mem_net_pending(net, 1, 2), 2);
    cr_expect_eq(xport_mem_net_pending(net, 2, 1), 0);

    cr_expect_eq(xport_mem_net_deliver(net, 1, 2, 1), 1);
    cr_assert_eq(rb.n, 1);
    cr_expect_str_eq(rb.msg[0], "one");
    cr_expect_eq(rb.from[0], 1);
    cr_expect_eq(xport_mem_net_complete(net), 2);
    cr_expect_eq(d.n, 2);
    cr_expect_eq(d.status[0], 0);

    /* Drop the second, link down, sends fail with ENOCONN. */
    cr_expect_eq(xport_mem_net_drop(net, 0, 0, 5), 1);
    xport_mem_net_set_link(net, 1, 2, 0);
    cr_assert_eq(send_str(a, &r3, 2, "three", &d), 0);
    cr_expect_eq(xport_mem_net_pending(net, 0, 0), 0);
    cr_expect_eq(xport_mem_net_complete(net), 1);
    cr_expect_eq(d.status[2], TERN_ENOCONN);
    xport_mem_net_set_link(net, 1, 2, 1);

    /* Close cancels pending completions. */
    cr_assert_eq(send_str(a, &r3, 2, "four", &d), 0);
    xport_close(a, closed, &nclosed);
    cr_expect_eq(nclosed, 1);
    cr_expect_eq(d.n, 4);
    cr_expect_eq(d.status[3], TERN_ECANCELED);
    /* The message itself was handed off and is still delivered. */
    cr_expect_eq(xport_mem_net_deliver(net, 0, 0, 10), 1);
    cr_expect_str_eq(rb.msg[1], "four");

    xport_close(b, closed, &nclosed);
    cr_expect_eq(nclosed, 2);
    xport_mem_net_free(net);
}

Test(mem, messages_to_closed_endpoint_are_dropped)
{
    struct xport_mem_net *net;
    struct xport *a, *b;
    struct rx rb = {0};
    struct done d = {0};
    struct xport_send r1;
    cr_assert_eq(xport_mem_net_new(&net), 0);
    cr_assert_eq(xport_mem_new(net, 1, &a), 0);
    cr_assert_eq(xport_mem_new(net, 2, &b), 0);
    cr_assert_eq(xport_start(b, on_recv, &rb), 0);
    cr_assert_eq(send_str(a, &r1, 2, "x", &d), 0);
    xport_close(b, NULL, NULL);
    cr_expect_eq(xport_mem_net_pending(net, 0, 0), 0);
    cr_expect_eq(xport_mem_net_complete(net), 1);
    cr_expect_eq(rb.n, 0);
    xport_close(a, NULL, NULL);
    xport_mem_net_free(net);
}
