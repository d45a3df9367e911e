/*
 * ternd's client protocol server (wire format: proto/include/proto.h): a uv_tcp
 * listener on client_addr and one struct node_conn per client.
 *
 * Reading: each connection has its own read buffer (up to one whole frame
 * of max_frame_bytes plus 64 KiB); node_frame_next (frame.c) decides what
 * each frame is. Requests are pipelined: every complete frame is handled
 * at once and answered by request_id, in whatever order answers are ready.
 *
 * Writes (QUEUE_CREATE/DELETE, PRODUCE, GROUP_COMMIT): on a node that is
 * not a writable leader -> TERN_ENOTLEADER with the leader's id and client
 * address from the peers table; a PRODUCE with a message above
 * max_message_bytes -> TERN_ETOOBIG (nothing is appended); below
 * min_free_disk_bytes of free space -> TERN_EFULL; otherwise the request
 * joins the batcher's open entry and is answered after the group commit
 * that covers its apply (batch.c, fsm.c).
 *
 * Reads (FETCH, QUEUE_LIST, STATUS) are served from the local index on any
 * node: a follower may serve slightly stale data, but only committed data
 * (the index holds applied entries only). Two exceptions: a FETCH with
 * PROTO_FETCH_LEADER (libtern's TERN_READ_LEADER) is served by a writable
 * leader only, others answer TERN_ENOTLEADER with the leader hint; and
 * GROUP_FETCH is served by a writable leader only, after a read barrier
 * through the log (batch.c), so a consumer never restarts below its
 * group's committed offset. Both, when parked, are refused the same way
 * if the node stops being a writable leader while they wait (the node
 * calls node_server_wake on that change). STATS answers
 * with the local raft latency counters on any node. A FETCH (or
 * GROUP_FETCH) at the end of the queue with wait_ms > 0 is parked and
 * answered after a flush makes new data visible (every parked fetch is
 * re-checked after each flush that applied something) or when wait_ms
 * expires (empty answer).
 *
 * Connection states: OPEN (reading, answering) -> DRAINING (a fatal frame
 * error was answered; no more reading; closed once the write queue is
 * empty) -> CLOSING (uv_close issued) -> CLOSED (handle closed). The memory
 * lives on until the last reference is gone: the handle holds one, each
 * write request in the batcher and each parked fetch holds one, so late
 * answers for a closed connection are dropped safely.
 *
 * Backpressure: reading stops on every connection while the batcher is
 * congested, and on a connection whose unsent answers exceed 32 MiB.
 *
 * The server sees the node only through what node_server_new is given
 * (server.h): the configuration, the batcher that takes write requests,
 * and struct node_server_ops (index, raft status and latency, disk
 * alarm). Answers to batched requests come back through
 * node_server_respond, the batcher's respond op.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern_common.h>

#include "frame.h"
#include "log.h"
#include "server.h"

#define SERVER__READ_CHUNK        ((size_t)64 << 10)
#define SERVER__MAX_WRITE_QUEUE   ((size_t)32 << 20)
#define SERVER__MAX_PARKED        10000u
#define SERVER__MAX_WAIT_MS       60000u
#define SERVER__DEFAULT_MAX_MSGS  1000u
#define SERVER__MAX_MSGS          10000u
#define SERVER__DEFAULT_MAX_BYTES (1u << 20)

/* The node as the server sees it (node_server_new's arguments). Each
 * connection has a copy: it can outlive the server. */
struct node_view
{
    struct node_server_ops ops;
    void *arg;
    const struct node_config *cfg;
    struct node_batcher *batcher;
};

static struct idx_env *view_idx(const struct node_view *v)
{
    return v->ops.idx(v->arg);
}

static void view_status(const struct node_view *v, struct repl_status *out)
{
    v->ops.status(v->arg, out);
}

enum conn_state {
    CONN_OPEN = 0,
    CONN_DRAINING,
    CONN_CLOSING,
    CONN_CLOSED,
};

struct node_conn
{
    uv_tcp_t tcp;
    struct tern_list link;
    struct node_server *srv; /* NULL once the server is closed */
    struct node_view view;
    enum conn_state state;
    uint8_t *rbuf;
    size_t rlen;
    size_t rcap;
    size_t rmax;
    unsigned refs;
    unsigned writes; /* uv_write requests pending */
    bool reading;
    uint64_t id;
};

struct parked
{
    struct tern_list link;
    struct node_conn *c;
    uint8_t op;
    uint64_t request_id;
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    uint64_t offset;
    uint32_t max_msgs;
    uint32_t max_bytes;
    bool leader_only;  /* GROUP_FETCH, or FETCH with PROTO_FETCH_LEADER */
    uint64_t deadline; /* uv_now ms */
};

struct node_server
{
    struct node_view view;
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t park_timer;
    struct tern_list conns;
    struct tern_list parked;
    unsigned n_parked;
    uint32_t max_body;
    uint64_t next_conn_id;
    unsigned open_handles;
    bool closing;
    void (*close_cb)(void *arg);
    void *close_arg;
};

struct out
{
    uv_write_t req;
    struct node_conn *c;
    uint8_t *base;
};

static void conn_close(struct node_conn *c);
static void conn_update_reading(struct node_conn *c);
static void conn_process(struct node_conn *c);

/* ---- References and writes ---------------------------------------------- */

static void conn_unref(struct node_conn *c)
{
    TERN_ASSERT(c->refs > 0);
    if (--c->refs == 0) {
        TERN_ASSERT(c->state == CONN_CLOSED);
        tern_free(c->rbuf);
        tern_free(c);
    }
}

static bool conn_live(const struct node_conn *c)
{
    return c->state == CONN_OPEN || c->state == CONN_DRAINING;
}

static void on_write(uv_write_t *req, int status)
{
    struct out *o = (struct out *)req;
    struct node_conn *c = o->c;
    tern_free(o->base);
    tern_free(o);
    c->writes--;
    if (status != 0 && conn_live(c)) {
        node_log(NODE_LOG_DEBUG, "client write failed", "conn=%llu err=%s",
                 (unsigned long long)c->id, uv_strerror(status));
        conn_close(c);
    } else if (c->state == CONN_DRAINING && c->writes == 0) {
        conn_close(c);
    } else if (c->state == CONN_OPEN) {
        conn_update_reading(c);
    }
    conn_unref(c);
}

/* Send the frame(s) in w; w's buffer is taken over (w is reset). */
static void conn_send(struct node_conn *c, struct tern_wbuf *w)
{
    struct out *o;
    uv_buf_t b;
    int rv;

    if (!conn_live(c) || w->err != 0 || w->len == 0) {
        if (w->err != 0 && conn_live(c)) {
            node_log(NODE_LOG_WARN, "cannot encode answer, closing",
                     "conn=%llu err=%s", (unsigned long long)c->id,
                     tern_err_name(w->err));
            conn_close(c);
        }
        tern_wbuf_free(w);
        return;
    }
    o = tern_malloc(sizeof(*o));
    if (o == NULL) {
        tern_wbuf_free(w);
        conn_close(c);
        return;
    }
    o->c = c;
    o->base = w->base;
    b = uv_buf_init((char *)w->base, (unsigned)w->len);
    tern_wbuf_init(w);
    rv = uv_write(&o->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rv != 0) {
        tern_free(o->base);
        tern_free(o);
        conn_close(c);
        return;
    }
    c->writes++;
    c->refs++;
}

static void send_error(struct node_conn *c,
                       uint8_t op,
                       uint64_t request_id,
                       int status,
                       const char *message)
{
    struct tern_wbuf w;
    uint64_t leader_id = 0;
    const char *leader_addr = "";

    if (status == -ENOSPC) {
        status = TERN_EFULL;
    }
    if (status == TERN_ENOTLEADER) {
        struct repl_status st;
        const struct node_peer *p;
        view_status(&c->view, &st);
        leader_id = st.leader_id;
        p = node_config_peer(c->view.cfg, leader_id);
        if (p != NULL) {
            leader_addr = p->client_addr;
        }
    }
    tern_wbuf_init(&w);
    proto_encode_error(&w, op, request_id, status,
                       message != NULL ? message : tern_strerror(status),
                       leader_id, leader_addr);
    conn_send(c, &w);
}

/* ---- Reads ------------------------------------------------------------- */

struct fetch_ctx
{
    struct tern_wbuf *w;
    uint32_t n;
};

static int fetch_cb(void *arg, const struct idx_fetched *m)
{
    struct fetch_ctx *x = arg;
    tern_wbuf_u64(x->w, m->offset);
    tern_wbuf_u64(x->w, m->timestamp_ms);
    proto_put_blob(x->w, m->data, m->len);
    x->n++;
    return x->w->err;
}

static void park_arm(struct node_server *s);

/* Copy the string src into dst[size]; false if it does not fit whole. */
static bool copy_whole(char *dst, size_t size, const char *src)
{
    int k = snprintf(dst, size, "%s", src);
    return k >= 0 && (size_t)k < size;
}

/* Serve a FETCH/GROUP_FETCH. With wait_ms > 0 and nothing readable it is
 * parked (returns true). leader_only: the request may only be answered by a
 * writable leader (the caller checked that now); a parked one is refused
 * instead of served if the node stops being one while it waits. */
static bool serve_fetch(struct node_conn *c,
                        uint8_t op,
                        uint64_t request_id,
                        const char *queue,
                        const char *group,
                        uint64_t offset,
                        uint32_t max_msgs,
                        uint32_t max_bytes,
                        uint32_t wait_ms,
                        bool leader_only)
{
    const struct node_view *v = &c->view;
    struct idx_env *e = view_idx(v);
    const struct node_config *cfg = v->cfg;
    struct idx_queue_info qi;
    struct tern_wbuf w;
    struct fetch_ctx x;
    uint64_t next = 0;
    size_t start;
    size_t n_pos;
    uint32_t cap_bytes;
    int rv;

    if (e == NULL) {
        send_error(c, op, request_id, TERN_ESHUTDOWN, NULL);
        return false;
    }
    if (op == PROTO_OP_GROUP_FETCH) {
        rv = idx_group_offset(e, queue, group, &offset);
        if (rv != 0) {
            send_error(c, op, request_id, rv, NULL);
            return false;
        }
    }
    rv = idx_queue_get(e, queue, &qi);
    if (rv != 0) {
        send_error(c, op, request_id, rv, NULL);
        return false;
    }
    if (op == PROTO_OP_GROUP_FETCH && offset < qi.start_offset) {
        /* A group behind the queue start (or new) reads from the start. */
        offset = qi.start_offset;
    }
    if (offset < qi.start_offset) {
        char m[128];
        (void)snprintf(
            m, sizeof(m), "offset %llu is below the queue start %llu",
            (unsigned long long)offset, (unsigned long long)qi.start_offset);
        send_error(c, op, request_id, TERN_EOFFSET, m);
        return false;
    }
    if (offset > qi.next_offset) {
        char m[128];
        (void)snprintf(m, sizeof(m), "offset %llu is beyond the queue end %llu",
                       (unsigned long long)offset,
                       (unsigned long long)qi.next_offset);
        send_error(c, op, request_id, TERN_EOFFSET, m);
        return false;
    }
    if (offset == qi.next_offset && wait_ms > 0 && c->srv != NULL &&
        c->srv->n_parked < SERVER__MAX_PARKED) {
        struct node_server *s = c->srv;
        struct parked *p = tern_calloc(1, sizeof(*p));
        /* A truncated name would park a fetch of another queue or group:
         * such a request is answered now, as when out of memory. */
        if (p != NULL && (!copy_whole(p->queue, sizeof(p->queue), queue) ||
                          !copy_whole(p->group, sizeof(p->group), group))) {
            tern_free(p);
            p = NULL;
        }
        if (p != NULL) {
            p->c = c;
            p->op = op;
            p->request_id = request_id;
            p->offset = offset;
            p->max_msgs = max_msgs;
            p->max_bytes = max_bytes;
            p->leader_only = leader_only;
            p->deadline =
                uv_now(s->loop) + TERN_MIN(wait_ms, SERVER__MAX_WAIT_MS);
            tern_list_push(&s->parked, &p->link);
            s->n_parked++;
            c->refs++;
            park_arm(s);
            return true;
        }
    }
    if (max_msgs == 0) {
        max_msgs = SERVER__DEFAULT_MAX_MSGS;
    }
    max_msgs = TERN_MIN(max_msgs, SERVER__MAX_MSGS);
    cap_bytes = (uint32_t)(cfg->max_frame_bytes / 2);
    if (max_bytes == 0) {
        max_bytes = SERVER__DEFAULT_MAX_BYTES;
    }
    max_bytes = TERN_MIN(max_bytes, cap_bytes);

    tern_wbuf_init(&w);
    start = w.len;
    proto_frame_begin(&w, (uint8_t)(op | PROTO_OP_RESPONSE), request_id, 0);
    tern_wbuf_u64(&w, 0); /* next_offset, patched below */
    tern_wbuf_u64(&w, qi.next_offset);
    n_pos = w.len;
    tern_wbuf_u32(&w, 0); /* n, patched below */
    x.w = &w;
    x.n = 0;
    rv = 0;
    next = offset;
    if (offset < qi.next_offset) {
        rv = idx_fetch(e, queue, offset, max_msgs, max_bytes, fetch_cb, &x,
                       &next);
    }
    if (rv != 0 || w.err != 0) {
        tern_wbuf_free(&w);
        send_error(c, op, request_id, rv != 0 ? rv : w.err, NULL);
        return false;
    }
    tern_put_u64(w.base + start + PROTO_HEADER_SIZE, next);
    tern_put_u32(w.base + n_pos, x.n);
    rv = proto_frame_end(&w, start);
    if (rv != 0) {
        tern_wbuf_free(&w);
        send_error(c, op, request_id, rv, NULL);
        return false;
    }
    conn_send(c, &w);
    return false;
}

static void parked_free(struct node_server *s, struct parked *p)
{
    tern_list_remove(&p->link);
    s->n_parked--;
    conn_unref(p->c);
    tern_free(p);
}

static bool refuse_unless_writable(struct node_conn *c,
                                   uint8_t op,
                                   uint64_t request_id,
                                   const struct repl_status *st);

/* Answer p now (new data, queue gone, expired, or, for a leader-only
 * request, the node no longer a writable leader: then TERN_ENOTLEADER). */
static void parked_answer(struct node_server *s, struct parked *p)
{
    struct node_conn *c = p->c;
    struct repl_status st;
    if (conn_live(c)) {
        view_status(&s->view, &st);
        if (!p->leader_only ||
            !refuse_unless_writable(c, p->op, p->request_id, &st)) {
            serve_fetch(c, p->op, p->request_id, p->queue, p->group, p->offset,
                        p->max_msgs, p->max_bytes, 0, false);
        }
    }
    parked_free(s, p);
}

/* Has p something to read (or an error to report)? writable: the node's
 * status, read once per wake by the caller. */
static bool parked_ready(struct node_server *s, struct parked *p, bool writable)
{
    struct idx_env *e = view_idx(&s->view);
    struct idx_queue_info qi;
    uint64_t offset = p->offset;
    if (!conn_live(p->c) || e == NULL) {
        return true;
    }
    if (p->leader_only && !writable) {
        return true;
    }
    if (p->op == PROTO_OP_GROUP_FETCH &&
        idx_group_offset(e, p->queue, p->group, &offset) != 0) {
        return true;
    }
    if (idx_queue_get(e, p->queue, &qi) != 0) {
        return true;
    }
    return offset != qi.next_offset;
}

static void on_park_timer(uv_timer_t *t)
{
    struct node_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    struct tern_list *l = s->parked.next;
    while (l != &s->parked) {
        struct parked *p = TERN_CONTAINER(l, struct parked, link);
        l = l->next;
        if (p->deadline <= now || !conn_live(p->c)) {
            parked_answer(s, p);
        }
    }
    park_arm(s);
}

static void park_arm(struct node_server *s)
{
    uint64_t now = uv_now(s->loop);
    uint64_t min = UINT64_MAX;
    struct tern_list *l;
    if (s->closing) {
        return;
    }
    for (l = s->parked.next; l != &s->parked; l = l->next) {
        struct parked *p = TERN_CONTAINER(l, struct parked, link);
        min = TERN_MIN(min, p->deadline);
    }
    if (min == UINT64_MAX) {
        uv_timer_stop(&s->park_timer);
        return;
    }
    uv_timer_start(&s->park_timer, on_park_timer, min > now ? min - now : 0, 0);
}

void node_server_wake(struct node_server *s)
{
    struct tern_list *l = s->parked.next;
    struct repl_status st;
    bool any = false;
    if (s->n_parked == 0) {
        return; /* the common case, after every flush */
    }
    view_status(&s->view, &st);
    while (l != &s->parked) {
        struct parked *p = TERN_CONTAINER(l, struct parked, link);
        l = l->next;
        if (parked_ready(s, p, st.writable)) {
            parked_answer(s, p);
            any = true;
        }
    }
    if (any) {
        park_arm(s);
    }
}

struct list_ctx
{
    struct tern_wbuf *w;
    uint32_t n;
};

static int list_cb(void *arg, const struct idx_queue_info *q)
{
    struct list_ctx *x = arg;
    proto_put_str(x->w, q->name, strlen(q->name));
    tern_wbuf_u64(x->w, q->start_offset);
    tern_wbuf_u64(x->w, q->next_offset);
    x->n++;
    return x->w->err;
}

static void serve_list(struct node_conn *c, uint64_t request_id)
{
    struct idx_env *e = view_idx(&c->view);
    struct tern_wbuf w;
    struct list_ctx x;
    size_t n_pos;
    int rv;

    if (e == NULL) {
        send_error(c, PROTO_OP_QUEUE_LIST, request_id, TERN_ESHUTDOWN, NULL);
        return;
    }
    tern_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OP_QUEUE_LIST | PROTO_OP_RESPONSE, request_id,
                      0);
    n_pos = w.len;
    tern_wbuf_u32(&w, 0);
    x.w = &w;
    x.n = 0;
    rv = idx_queue_list(e, list_cb, &x);
    if (rv == 0 && w.err == 0) {
        tern_put_u32(w.base + n_pos, x.n);
        rv = proto_frame_end(&w, 0);
    }
    if (rv != 0 || w.err != 0) {
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_QUEUE_LIST, request_id, rv != 0 ? rv : w.err,
                   NULL);
        return;
    }
    conn_send(c, &w);
}

static void serve_status(struct node_conn *c, uint64_t request_id)
{
    const struct node_config *cfg = c->view.cfg;
    struct proto_member members[64];
    struct proto_status ps;
    struct repl_status st;
    const struct node_peer *lp;
    struct tern_wbuf w;
    unsigned nm = TERN_MIN(cfg->n_peers, (unsigned)TERN_ARRAY_SIZE(members));

    view_status(&c->view, &st);
    lp = node_config_peer(cfg, st.leader_id);
    for (unsigned i = 0; i < nm; i++) {
        members[i].id = cfg->peers[i].id;
        members[i].raft_address = cfg->peers[i].raft_addr;
        members[i].raft_address_len = (uint16_t)strlen(cfg->peers[i].raft_addr);
        members[i].client_address = cfg->peers[i].client_addr;
        members[i].client_address_len =
            (uint16_t)strlen(cfg->peers[i].client_addr);
    }
    memset(&ps, 0, sizeof(ps));
    ps.node_id = cfg->id;
    ps.role = (uint8_t)st.role;
    ps.leader_id = st.leader_id;
    ps.leader_address = lp != NULL ? lp->client_addr : "";
    ps.leader_address_len = (uint16_t)strlen(ps.leader_address);
    ps.term = st.term;
    ps.commit_index = st.commit_index;
    ps.last_applied = st.last_applied;
    ps.writable = st.writable ? 1 : 0;
    ps.transport = cfg->transport;
    ps.transport_len = (uint16_t)strlen(cfg->transport);
    ps.durability = repl_durability_name(st.durability);
    ps.durability_len = (uint16_t)strlen(ps.durability);
    ps.n_members = nm;
    ps.members = members;
    tern_wbuf_init(&w);
    if (proto_encode_status_resp(&w, request_id, &ps) != 0) {
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_STATUS, request_id, TERN_EINTERNAL,
                   "cannot encode status");
        return;
    }
    conn_send(c, &w);
}

/* STATS: this node's replication latency summary (leader append ->
 * commit), then a reset of the counters when the request asks for it.
 * Answered by any node: a follower has nothing sampled (count 0). */
static void serve_stats(struct node_conn *c, uint64_t request_id, uint8_t flags)
{
    const struct node_config *cfg = c->view.cfg;
    struct repl_latency *lat;
    struct repl_status st;
    struct proto_stats ps;
    struct tern_wbuf w;

    /* ~8 KiB of histogram: keep it off the loop's stack. */
    lat = tern_malloc(sizeof(*lat));
    if (lat == NULL) {
        send_error(c, PROTO_OP_STATS, request_id, -ENOMEM, NULL);
        return;
    }
    view_status(&c->view, &st);
    c->view.ops.latency(c->view.arg, lat, (flags & PROTO_STATS_RESET) != 0);
    memset(&ps, 0, sizeof(ps));
    ps.node_id = cfg->id;
    ps.role = (uint8_t)st.role;
    ps.transport = cfg->transport;
    ps.transport_len = (uint16_t)strlen(cfg->transport);
    ps.durability = repl_durability_name(st.durability);
    ps.durability_len = (uint16_t)strlen(ps.durability);
    ps.count = lat->count;
    ps.dropped = lat->dropped;
    ps.sum_ns = lat->sum_ns;
    ps.min_ns = lat->min_ns;
    ps.p50_ns = repl_latency_quantile(lat, 0.50);
    ps.p90_ns = repl_latency_quantile(lat, 0.90);
    ps.p99_ns = repl_latency_quantile(lat, 0.99);
    ps.p999_ns = repl_latency_quantile(lat, 0.999);
    ps.max_ns = lat->max_ns;
    tern_free(lat);
    tern_wbuf_init(&w);
    if (proto_encode_stats_resp(&w, request_id, &ps) != 0) {
        tern_wbuf_free(&w);
        send_error(c, PROTO_OP_STATS, request_id, TERN_EINTERNAL,
                   "cannot encode stats");
        return;
    }
    conn_send(c, &w);
}

/* ---- Writes ------------------------------------------------------------- */

/* Answer TERN_ENOTLEADER (with the leader hint) unless this node is a
 * writable leader. Returns whether it refused. */
static bool refuse_unless_writable(struct node_conn *c,
                                   uint8_t op,
                                   uint64_t request_id,
                                   const struct repl_status *st)
{
    const struct node_config *cfg = c->view.cfg;
    const struct node_peer *p;
    char m[TERN_ERRMSG_SIZE];

    if (st->writable) {
        return false;
    }
    p = node_config_peer(cfg, st->leader_id);
    if (st->leader_id != 0 && st->leader_id != cfg->id && p != NULL) {
        (void)snprintf(m, sizeof(m),
                       "not the leader; leader is node %llu at %s",
                       (unsigned long long)st->leader_id, p->client_addr);
    } else if (st->leader_id == cfg->id) {
        (void)snprintf(m, sizeof(m), "leader not ready for writes yet");
    } else {
        (void)snprintf(m, sizeof(m), "not the leader; no leader known");
    }
    send_error(c, op, request_id, TERN_ENOTLEADER, m);
    return true;
}

/* Hand r to the batcher: answered by node_server_respond once its entry is
 * applied and flushed (the request holds a connection reference until
 * then), or now with the error if the batcher refuses it. */
static void batch_request(struct node_conn *c,
                          uint64_t request_id,
                          const struct proto_request *r)
{
    int rv = node_batcher_add(c->view.batcher, c, request_id, r);
    if (rv != 0) {
        send_error(c, r->op, request_id, rv, NULL);
        return;
    }
    c->refs++;
}

static void handle_write(struct node_conn *c,
                         uint64_t request_id,
                         const struct proto_request *r)
{
    const struct node_view *v = &c->view;
    const struct node_config *cfg = v->cfg;
    char m[TERN_ERRMSG_SIZE];
    struct repl_status st;
    int rv;

    view_status(v, &st);
    /* A leader with a full disk says so, also while it hands leadership
     * over (not writable then): "disk full" is the answer a client can act
     * on, a redirect to itself is not. */
    if (st.leader_id == cfg->id && (rv = v->ops.disk_check(v->arg, m)) != 0) {
        send_error(c, r->op, request_id, rv, m);
        return;
    }
    if (refuse_unless_writable(c, r->op, request_id, &st)) {
        return;
    }
    if (r->op == PROTO_OP_PRODUCE) {
        size_t pos = 0;
        struct proto_msg msg;
        uint32_t i = 0;
        if (r->n_msgs == 0) {
            send_error(c, r->op, request_id, TERN_EINVAL,
                       "produce without messages");
            return;
        }
        while (proto_next_msg(r, &pos, &msg)) {
            if (msg.len > cfg->max_message_bytes) {
                (void)snprintf(
                    m, sizeof(m),
                    "message %u is %u bytes > max_message_bytes %llu", i,
                    msg.len, (unsigned long long)cfg->max_message_bytes);
                send_error(c, r->op, request_id, TERN_ETOOBIG, m);
                return;
            }
            i++;
        }
    }
    rv = v->ops.disk_check(v->arg, m);
    if (rv != 0) {
        send_error(c, r->op, request_id, rv, m);
        return;
    }
    batch_request(c, request_id, r);
}

/* GROUP_FETCH: only a writable leader serves it, behind a read barrier
 * (batch.c): the consumer starts at or above every offset its group had
 * committed when it asked, also right after a leader change. With the disk
 * alarm on, the barrier cannot be appended: the leader serves from its
 * applied state directly (a leader deposed without knowing it yet may then
 * answer with an older offset; documented in README). */
static void handle_group_fetch(struct node_conn *c,
                               uint64_t request_id,
                               const struct proto_request *r,
                               const char *queue,
                               const char *group)
{
    const struct node_view *v = &c->view;
    char m[TERN_ERRMSG_SIZE];
    struct repl_status st;

    view_status(v, &st);
    if (refuse_unless_writable(c, r->op, request_id, &st)) {
        return;
    }
    if (v->ops.disk_check(v->arg, m) != 0) {
        serve_fetch(c, r->op, request_id, queue, group, 0, r->max_msgs,
                    r->max_bytes, r->wait_ms, true);
        return;
    }
    batch_request(c, request_id, r);
}

void node_server_respond(struct node_wreq *w)
{
    struct node_conn *c = w->owner;
    if (c == NULL) {
        return;
    }
    if (conn_live(c)) {
        if (w->status != 0) {
            const char *m = tern_strerror(w->status);
            send_error(c, w->op, w->request_id, w->status, m);
        } else if (w->op == PROTO_OP_GROUP_FETCH) {
            /* The barrier is applied and flushed: serve the read now. */
            serve_fetch(c, w->op, w->request_id, w->queue, w->group, 0,
                        w->max_msgs, w->max_bytes, w->wait_ms, true);
        } else {
            struct tern_wbuf b;
            tern_wbuf_init(&b);
            if (w->op == PROTO_OP_PRODUCE) {
                proto_encode_produce_resp(&b, w->request_id,
                                          w->result.base_offset,
                                          w->result.count, w->result.duplicate);
            } else {
                proto_encode_empty_resp(&b, w->op, w->request_id);
            }
            conn_send(c, &b);
        }
    }
    conn_unref(c);
}

/* ---- Frames -------------------------------------------------------------- */

static void name_copy(char *dst, const char *src, uint16_t len)
{
    if (src == NULL) {
        len = 0;
    }
    if (len > PROTO_MAX_NAME) {
        len = PROTO_MAX_NAME;
    }
    if (len > 0) {
        memcpy(dst, src, len);
    }
    dst[len] = '\0';
}

static void handle_request(struct node_conn *c,
                           uint64_t request_id,
                           const struct proto_request *r)
{
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];

    switch (r->op) {
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_DELETE:
    case PROTO_OP_PRODUCE:
    case PROTO_OP_GROUP_COMMIT:
        handle_write(c, request_id, r);
        break;
    case PROTO_OP_FETCH: {
        bool leader_only = (r->flags & PROTO_FETCH_LEADER) != 0;
        if (leader_only) {
            struct repl_status st;
            view_status(&c->view, &st);
            if (refuse_unless_writable(c, r->op, request_id, &st)) {
                break;
            }
        }
        name_copy(queue, r->queue, r->queue_len);
        serve_fetch(c, r->op, request_id, queue, "", r->offset, r->max_msgs,
                    r->max_bytes, r->wait_ms, leader_only);
        break;
    }
    case PROTO_OP_GROUP_FETCH:
        name_copy(queue, r->queue, r->queue_len);
        name_copy(group, r->group, r->group_len);
        handle_group_fetch(c, request_id, r, queue, group);
        break;
    case PROTO_OP_QUEUE_LIST:
        serve_list(c, request_id);
        break;
    case PROTO_OP_STATUS:
        serve_status(c, request_id);
        break;
    case PROTO_OP_STATS:
        serve_stats(c, request_id, r->flags);
        break;
    default:
        send_error(c, r->op, request_id, TERN_EINVAL, "unknown request op");
        break;
    }
}

static bool conn_may_process(const struct node_conn *c)
{
    return c->state == CONN_OPEN && !node_batcher_congested(c->view.batcher);
}

/* Handle every complete frame in the read buffer. */
static void conn_process(struct node_conn *c)
{
    size_t off = 0;
    uint32_t max_body = c->srv != NULL ? c->srv->max_body : 0;
    struct node_frame f;

    while (conn_may_process(c) && off < c->rlen) {
        node_frame_next(c->rbuf + off, c->rlen - off, max_body, &f);
        if (f.action == NODE_FRAME_NEED_MORE) {
            break;
        }
        switch (f.action) {
        case NODE_FRAME_REQUEST:
            handle_request(c, f.request_id, &f.req);
            break;
        case NODE_FRAME_ERROR:
            node_log(NODE_LOG_DEBUG, "bad request",
                     "conn=%llu err=%s "
                     "detail=\"%s\"",
                     (unsigned long long)c->id, tern_err_name(f.status),
                     f.message);
            send_error(c, f.op, f.request_id, f.status, f.message);
            break;
        default:
            node_log(NODE_LOG_WARN, "bad frame, closing connection",
                     "conn=%llu err=%s detail=\"%s\"",
                     (unsigned long long)c->id, tern_err_name(f.status),
                     f.message);
            send_error(c, f.op, f.request_id, f.status, f.message);
            if (c->state == CONN_OPEN) {
                c->state = CONN_DRAINING;
                if (c->reading) {
                    uv_read_stop((uv_stream_t *)&c->tcp);
                    c->reading = false;
                }
                if (c->writes == 0) {
                    conn_close(c);
                }
            }
            break;
        }
        off += f.consumed;
    }
    if (off > 0) {
        off = TERN_MIN(off, c->rlen);
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct node_conn *c = h->data;
    (void)suggested;
    if (c->rcap - c->rlen < SERVER__READ_CHUNK && c->rcap < c->rmax) {
        size_t cap = TERN_MAX(c->rcap * 2, c->rlen + SERVER__READ_CHUNK);
        uint8_t *p;
        cap = TERN_MIN(cap, c->rmax);
        p = tern_realloc(c->rbuf, cap);
        if (p != NULL) {
            c->rbuf = p;
            c->rcap = cap;
        }
    }
    *buf =
        uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct node_conn *c = stream->data;
    (void)buf;
    if (nread == 0) {
        return;
    }
    if (nread < 0) {
        if (nread != UV_EOF) {
            node_log(NODE_LOG_DEBUG, "client read failed", "conn=%llu err=%s",
                     (unsigned long long)c->id, uv_strerror((int)nread));
        }
        conn_close(c);
        return;
    }
    c->rlen += (size_t)nread;
    conn_process(c);
    conn_update_reading(c);
}

static void conn_update_reading(struct node_conn *c)
{
    bool want = conn_may_process(c) &&
                c->tcp.write_queue_size < SERVER__MAX_WRITE_QUEUE;
    if (want && !c->reading) {
        /* Frames left in the buffer while paused come first. */
        conn_process(c);
        if (!conn_may_process(c)) {
            return;
        }
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) {
            c->reading = true;
        } else {
            conn_close(c);
        }
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

void node_server_update_reading(struct node_server *s)
{
    struct tern_list *l = s->conns.next;
    while (l != &s->conns) {
        struct node_conn *c = TERN_CONTAINER(l, struct node_conn, link);
        l = l->next;
        conn_update_reading(c);
    }
}

/* ---- Connections and listener -------------------------------------------- */

static void server_handle_closed(struct node_server *s)
{
    if (--s->open_handles == 0 && s->closing) {
        void (*cb)(void *) = s->close_cb;
        void *arg = s->close_arg;
        tern_free(s);
        if (cb != NULL) {
            cb(arg);
        }
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    struct node_conn *c = h->data;
    struct node_server *s = c->srv;
    c->state = CONN_CLOSED;
    if (s != NULL) {
        tern_list_remove(&c->link);
        c->srv = NULL;
        node_log(NODE_LOG_DEBUG, "client disconnected", "conn=%llu",
                 (unsigned long long)c->id);
    }
    conn_unref(c);
    if (s != NULL) {
        server_handle_closed(s);
    }
}

static void conn_close(struct node_conn *c)
{
    if (c->state == CONN_CLOSING || c->state == CONN_CLOSED) {
        return;
    }
    c->state = CONN_CLOSING;
    c->reading = false;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct node_server *s = listener->data;
    struct node_conn *c;

    if (status != 0) {
        node_log(NODE_LOG_WARN, "accept failed", "err=%s", uv_strerror(status));
        return;
    }
    c = tern_calloc(1, sizeof(*c));
    if (c == NULL) {
        uv_tcp_t tmp;
        /* Accept and drop so the backlog does not spin. */
        uv_tcp_init(s->loop, &tmp);
        uv_accept(listener, (uv_stream_t *)&tmp);
        uv_close((uv_handle_t *)&tmp, NULL);
        return;
    }
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->srv = s;
    c->view = s->view;
    c->refs = 1;
    c->id = ++s->next_conn_id;
    c->rmax = PROTO_HEADER_SIZE + (size_t)s->max_body + SERVER__READ_CHUNK;
    tern_list_push(&s->conns, &c->link);
    s->open_handles++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    node_log(NODE_LOG_DEBUG, "client connected", "conn=%llu",
             (unsigned long long)c->id);
    conn_update_reading(c);
}

static void on_server_handle_closed(uv_handle_t *h)
{
    server_handle_closed(h->data);
}

int node_server_new(uv_loop_t *loop,
                    const struct node_config *cfg,
                    struct node_batcher *batcher,
                    const struct node_server_ops *ops,
                    void *arg,
                    struct node_server **out,
                    char *errmsg)
{
    const char *addr = cfg->client_addr;
    struct node_server *s;
    struct sockaddr_in sa;
    char host[64];
    const char *colon = strrchr(addr, ':');
    int rv;

    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        tern_errmsg_printf(errmsg, "bad address '%s'", addr);
        return TERN_EINVAL;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    rv = uv_ip4_addr(host, atoi(colon + 1), &sa);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "bad address '%s': %s", addr,
                           uv_strerror(rv));
        return TERN_EINVAL;
    }
    s = tern_calloc(1, sizeof(*s));
    if (s == NULL) {
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    s->view.ops = *ops;
    s->view.arg = arg;
    s->view.cfg = cfg;
    s->view.batcher = batcher;
    s->loop = loop;
    s->max_body = (uint32_t)cfg->max_frame_bytes;
    tern_list_init(&s->conns);
    tern_list_init(&s->parked);
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    uv_timer_init(loop, &s->park_timer);
    s->park_timer.data = s;
    s->open_handles = 2;
    rv = uv_tcp_bind(&s->listener, (const struct sockaddr *)&sa, 0);
    if (rv == 0) {
        rv = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "listen on %s: %s", addr, uv_strerror(rv));
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
        uv_close((uv_handle_t *)&s->park_timer, on_server_handle_closed);
        return rv;
    }
    *out = s;
    return 0;
}

void node_server_close(struct node_server *s, void (*cb)(void *arg), void *arg)
{
    struct tern_list *l;
    s->closing = true;
    s->close_cb = cb;
    s->close_arg = arg;
    while (!tern_list_empty(&s->parked)) {
        parked_free(s, TERN_CONTAINER(s->parked.next, struct parked, link));
    }
    uv_timer_stop(&s->park_timer);
    for (l = s->conns.next; l != &s->conns; l = l->next) {
        conn_close(TERN_CONTAINER(l, struct node_conn, link));
    }
    uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->park_timer, on_server_handle_closed);
}
