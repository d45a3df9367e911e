/*
 * raft/null_transport.c: a raft_uv_transport that never listens or
 * connects. raft_uv_init requires a transport, but tern sends and
 * receives raft messages through the xport (io.c), so the raft_uv
 * instances of raft/ (the replica's inner io, repl.c; the start-up seed,
 * seed.c) are given this one. Its close is deferred to the loop through a
 * timer handle's close: raft_uv must not see its close callback run
 * inside its own close call.
 */
#include <string.h>

#include "repl_int.h"

static int null_init(struct raft_uv_transport *t,
                     raft_id id,
                     const char *address)
{
    (void)t;
    (void)id;
    (void)address;
    return 0;
}

static int null_listen(struct raft_uv_transport *t, raft_uv_accept_cb cb)
{
    (void)t;
    (void)cb;
    return 0;
}

static int null_connect(struct raft_uv_transport *t,
                        struct raft_uv_connect *req,
                        raft_id id,
                        const char *address,
                        raft_uv_connect_cb cb)
{
    (void)t;
    (void)req;
    (void)id;
    (void)address;
    (void)cb;
    return RAFT_NOCONNECTION;
}

static void null_closed(uv_handle_t *h)
{
    struct repl_null_transport *n = h->data;
    n->cb(&n->t);
}

static void null_close(struct raft_uv_transport *t,
                       raft_uv_transport_close_cb cb)
{
    struct repl_null_transport *n = (struct repl_null_transport *)t;
    n->cb = cb;
    uv_timer_init(n->loop, &n->timer);
    n->timer.data = n;
    uv_close((uv_handle_t *)&n->timer, null_closed);
}

void repl_null_transport_init(struct repl_null_transport *n, uv_loop_t *loop)
{
    memset(n, 0, sizeof *n);
    n->loop = loop;
    n->t.init = null_init;
    n->t.listen = null_listen;
    n->t.connect = null_connect;
    n->t.close = null_close;
}
