/*
 * raft/io.c: tern's struct raft_io wrapper. The disk methods (init, load,
 * bootstrap, recover, set_term, set_vote, append, truncate, snapshot_put,
 * snapshot_get, time, random, async_work, close) delegate to an inner
 * raft_io (raft_uv in production, a fake in tests); send and receive go
 * through an xport with our codec (codec.c).
 *
 * On the way the wrapper keeps what the mitigations in guard.c need:
 *   - next_index: index of the next appended entry (the contract passes
 *     none): start_index + n after load, index after truncate(index),
 *     snapshot->index + 1 after an install snapshot_put(trailing = 0);
 *   - durable_index: the last index whose append completed with status 0,
 *     clamped by truncate (an in-flight append's completion only counts up
 *     to the truncation point) and set to the snapshot index when an install
 *     completes;
 *   - term runs: the term of every index of the submitted log, so the term
 *     of durable_index is known (RequestVote rewrite, #429).
 *
 * Happy path of a send: encode synchronously (the message is on raft's
 * stack), hand the frame to xport_send (which copies), complete raft's
 * callback from the xport completion. Failure modes: xport_send fails ->
 * we return RAFT_NOCONNECTION and raft's cb never fires; completion with an
 * error -> raft's cb gets RAFT_NOCONNECTION (drops the follower to probe);
 * close -> every pending raft cb fires with RAFT_CANCELED at once and the
 * xport request is orphaned (freed by its own completion later).
 *
 * A failed append makes the replica fail-stop (repl_fail): 0.15 handles
 * append failures badly (#466, 0cac59c), so the node stops taking part
 * (drops all messages) and reports REPL_UNAVAILABLE; node/ restarts it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "repl_int.h"

struct append_req {
    struct raft_io_append inner_req;
    struct repl *r;
    struct raft_io_append *outer_req;
    raft_io_append_cb cb;
    uint64_t first;
    uint64_t last; /* clamped by truncate; last < first: nothing counts */
    struct repl_list link;
};

struct send_req {
    struct xport_send xs;
    struct repl *r; /* NULL once orphaned by close */
    struct raft_io_send *raft_req;
    raft_io_send_cb raft_cb;
    struct repl_list link;
};

struct put_req {
    struct raft_io_snapshot_put inner_req;
    struct repl *r;
    struct raft_io_snapshot_put *outer_req;
    raft_io_snapshot_put_cb cb;
    uint64_t index;
    uint64_t term;
    bool install;
};

/* raft_init sets outer.data to the struct raft, so find ourselves by
 * address. The inner io's data is ours (raft_uv never uses it). */
static struct repl *outer_repl(struct raft_io *io)
{
    return REPL__CONTAINER(io, struct repl, outer);
}

static void copy_errmsg(struct repl *r)
{
    memcpy(r->outer.errmsg, r->inner->errmsg, sizeof r->outer.errmsg);
}

/* ---- term runs --------------------------------------------------------- */

static void runs_truncate(struct repl *r, uint64_t index)
{
    while (r->n_runs > 0 && r->runs[r->n_runs - 1].index >= index) {
        r->n_runs--;
    }
}

static int runs_append(struct repl *r, uint64_t index, uint64_t term)
{
    if (r->n_runs > 0 && r->runs[r->n_runs - 1].term == term) {
        return 0;
    }
    if (r->n_runs == r->cap_runs) {
        size_t cap = r->cap_runs ? r->cap_runs * 2 : 16;
        struct repl_term_run *n = tern_realloc(r->runs, cap * sizeof *n);
        if (n == NULL) {
            return -ENOMEM;
        }
        r->runs = n;
        r->cap_runs = cap;
    }
    r->runs[r->n_runs].index = index;
    r->runs[r->n_runs].term = term;
    r->n_runs++;
    return 0;
}

uint64_t repl_io_term_of(const struct repl *r, uint64_t index)
{
    if (index == 0 || index >= r->next_index) {
        return 0;
    }
    for (size_t i = r->n_runs; i > 0; i--) {
        if (r->runs[i - 1].index <= index) {
            return r->runs[i - 1].term;
        }
    }
    return 0;
}

/* ---- disk methods ------------------------------------------------------ */

static int io_init(struct raft_io *io, raft_id id, const char *address)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->init(r->inner, id, address);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static void inner_close_cb(struct raft_io *inner)
{
    struct repl *r = inner->data;
    raft_io_close_cb cb = r->io_close_cb;
    if (cb != NULL) {
        cb(&r->outer);
    }
}

static void io_close(struct raft_io *io, raft_io_close_cb cb)
{
    struct repl *r = outer_repl(io);
    r->closing = true;
    repl_bulk_abort(r);
    repl_io_close_sends(r);
    r->io_close_cb = cb;
    r->inner->close(r->inner, inner_close_cb);
}

static int io_load(struct raft_io *io, raft_term *term, raft_id *voted_for,
                   struct raft_snapshot **snapshot, raft_index *start_index,
                   struct raft_entry *entries[], size_t *n_entries)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->load(r->inner, term, voted_for, snapshot, start_index,
                            entries, n_entries);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    r->term = *term;
    r->n_runs = 0;
    if (*snapshot != NULL) {
        r->snap_index = (*snapshot)->index;
        r->snap_term = (*snapshot)->term;
        /* Entries kept before the snapshot (trailing) carry the terms up to
         * it themselves; the snapshot's run is needed only beyond them. */
        if (*n_entries == 0 || *start_index > (*snapshot)->index) {
            (void)runs_append(r, (*snapshot)->index, (*snapshot)->term);
        }
    }
    /* Out of memory for the runs only degrades term lookups (they return
     * "unknown", which disables the RequestVote rewrite): no failure. */
    for (size_t i = 0; i < *n_entries; i++) {
        if (runs_append(r, *start_index + i, (*entries)[i].term) != 0) {
            r->n_runs = 0;
            break;
        }
    }
    r->next_index = *start_index + *n_entries;
    if (*n_entries == 0 && *snapshot != NULL &&
        r->next_index <= (*snapshot)->index) {
        r->next_index = (*snapshot)->index + 1;
    }
    r->durable_index = r->next_index - 1;
    return 0;
}

static void io_tick(struct raft_io *inner)
{
    struct repl *r = inner->data;
    if (r->closing || r->tick_cb == NULL) {
        return;
    }
    /* guard.c item 4 (#467, 4fbd3c0): a non-leader does not get ticks (its
     * election timer) while it still persists entries or a snapshot, or
     * fetches the bulk data of one (it is behind: no use as a candidate). */
    if (r->failed == 0 &&
        (!r->hold_ticks || raft_state(&r->raft) == RAFT_LEADER ||
         (repl_list_empty(&r->appends) && r->install_index == 0 &&
          !r->fetch.active))) {
        r->tick_cb(&r->outer);
    } else if (r->failed == 0) {
        r->ticks_withheld++;
    }
    repl_bulk_tick(r);
    repl_poll(r);
}

static void io_inner_recv(struct raft_io *inner, struct raft_message *msg)
{
    /* The inner transport is a dummy that never receives. */
    (void)inner;
    (void)msg;
}

static int io_start(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                    raft_io_recv_cb recv)
{
    struct repl *r = outer_repl(io);
    int rv;
    (void)msecs; /* we tick faster than raft's heartbeat (repl->tick_ms) */
    r->tick_cb = tick;
    r->recv_cb = recv;
    rv = r->inner->start(r->inner, r->tick_ms, io_tick, io_inner_recv);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    rv = xport_start(r->xport, repl_xport_recv, r);
    if (rv != 0) {
        snprintf(r->outer.errmsg, sizeof r->outer.errmsg,
                 "xport start: %s", tern_strerror(rv));
        return RAFT_IOERR;
    }
    r->started = true;
    return 0;
}

static int io_bootstrap(struct raft_io *io, const struct raft_configuration *c)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->bootstrap(r->inner, c);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static int io_recover(struct raft_io *io, const struct raft_configuration *c)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->recover(r->inner, c);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static int io_set_term(struct raft_io *io, raft_term term)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->set_term(r->inner, term);
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    r->term = term;
    return 0;
}

static int io_set_vote(struct raft_io *io, raft_id id)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->set_vote(r->inner, id);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static void append_done(struct raft_io_append *inner_req, int status)
{
    struct append_req *a =
        REPL__CONTAINER(inner_req, struct append_req, inner_req);
    struct repl *r = a->r;
    repl_list_remove(&a->link);
    if (status == 0) {
        if (a->last >= a->first && a->last > r->durable_index) {
            r->durable_index = a->last;
        }
    } else if (status != RAFT_CANCELED && !r->closing) {
        repl_fail(r, repl_err_from_raft(status));
    }
    a->outer_req->cb = a->cb;
    a->cb(a->outer_req, status);
    tern_free(a);
}

static int io_append(struct raft_io *io, struct raft_io_append *req,
                     const struct raft_entry entries[], unsigned n,
                     raft_io_append_cb cb)
{
    struct repl *r = outer_repl(io);
    struct append_req *a;
    size_t saved_runs = r->n_runs;
    int rv;

    if (r->failed != 0) {
        return RAFT_IOERR;
    }
    a = tern_calloc(1, sizeof *a);
    if (a == NULL) {
        return RAFT_NOMEM;
    }
    a->r = r;
    a->outer_req = req;
    a->cb = cb;
    a->first = r->next_index;
    a->last = r->next_index + n - 1;
    a->inner_req.data = req->data;
    for (unsigned i = 0; i < n; i++) {
        if (runs_append(r, a->first + i, entries[i].term) != 0) {
            r->n_runs = saved_runs;
            tern_free(a);
            return RAFT_NOMEM;
        }
    }
    rv = r->inner->append(r->inner, &a->inner_req, entries, n, append_done);
    if (rv != 0) {
        copy_errmsg(r);
        r->n_runs = saved_runs;
        tern_free(a);
        return rv;
    }
    r->next_index += n;
    repl_list_push(&r->appends, &a->link);
    return 0;
}

static int io_truncate(struct raft_io *io, raft_index index)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->truncate(r->inner, index);
    struct repl_list *e;
    if (rv != 0) {
        copy_errmsg(r);
        return rv;
    }
    for (e = r->appends.next; e != &r->appends; e = e->next) {
        struct append_req *a = REPL__CONTAINER(e, struct append_req, link);
        if (a->last >= index) {
            a->last = index - 1;
        }
    }
    if (r->durable_index >= index) {
        r->durable_index = index - 1;
    }
    r->next_index = index;
    runs_truncate(r, index);
    return 0;
}

static void put_done(struct raft_io_snapshot_put *inner_req, int status)
{
    struct put_req *p = REPL__CONTAINER(inner_req, struct put_req, inner_req);
    struct repl *r = p->r;
    if (status == 0 && p->index > r->snap_index) {
        r->snap_index = p->index;
        r->snap_term = p->term;
    }
    if (p->install) {
        r->install_index = 0;
        if (status == 0) {
            r->durable_index = p->index;
        }
    }
    p->outer_req->cb = p->cb;
    p->cb(p->outer_req, status);
    tern_free(p);
}

static int io_snapshot_put(struct raft_io *io, unsigned trailing,
                           struct raft_io_snapshot_put *req,
                           const struct raft_snapshot *snapshot,
                           raft_io_snapshot_put_cb cb)
{
    struct repl *r = outer_repl(io);
    struct put_req *p = tern_calloc(1, sizeof *p);
    int rv;
    if (p == NULL) {
        return RAFT_NOMEM;
    }
    p->r = r;
    p->outer_req = req;
    p->cb = cb;
    p->index = snapshot->index;
    p->term = snapshot->term;
    p->install = trailing == 0;
    p->inner_req.data = req->data;
    rv = r->inner->snapshot_put(r->inner, trailing, &p->inner_req, snapshot,
                                put_done);
    if (rv != 0) {
        copy_errmsg(r);
        tern_free(p);
        return rv;
    }
    if (p->install) {
        struct repl_list *e;
        /* The install replaces the whole log; earlier in-flight appends no
         * longer describe it. */
        for (e = r->appends.next; e != &r->appends; e = e->next) {
            struct append_req *a = REPL__CONTAINER(e, struct append_req, link);
            a->last = a->first - 1;
        }
        r->install_index = snapshot->index;
        r->install_term = snapshot->term;
        r->next_index = snapshot->index + 1;
        if (r->durable_index > snapshot->index) {
            r->durable_index = 0;
        }
        r->n_runs = 0;
        if (runs_append(r, snapshot->index, snapshot->term) != 0) {
            /* Only the term lookups suffer; they then return 0. */
            r->n_runs = 0;
        }
    }
    return 0;
}

static int io_snapshot_get(struct raft_io *io, struct raft_io_snapshot_get *req,
                           raft_io_snapshot_get_cb cb)
{
    struct repl *r = outer_repl(io);
    int rv = r->inner->snapshot_get(r->inner, req, cb);
    if (rv != 0) {
        copy_errmsg(r);
    }
    return rv;
}

static raft_time io_time(struct raft_io *io)
{
    struct repl *r = outer_repl(io);
    return r->inner->time(r->inner);
}

static int io_random(struct raft_io *io, int min, int max)
{
    struct repl *r = outer_repl(io);
    return r->inner->random(r->inner, min, max);
}

static int io_async_work(struct raft_io *io, struct raft_io_async_work *req,
                         raft_io_async_work_cb cb)
{
    struct repl *r = outer_repl(io);
    return r->inner->async_work(r->inner, req, cb);
}

/* ---- network ----------------------------------------------------------- */

static void send_done(struct xport_send *xs, int status)
{
    struct send_req *s = xs->data;
    if (s->r != NULL) {
        repl_list_remove(&s->link);
        if (s->raft_cb != NULL) {
            s->raft_cb(s->raft_req, status == 0 ? 0 : RAFT_NOCONNECTION);
        }
    }
    tern_free(s);
}

void repl_io_close_sends(struct repl *r)
{
    while (!repl_list_empty(&r->sends)) {
        struct send_req *s =
            REPL__CONTAINER(r->sends.next, struct send_req, link);
        repl_list_remove(&s->link);
        s->r = NULL;
        if (s->raft_cb != NULL) {
            s->raft_cb(s->raft_req, RAFT_CANCELED);
        }
    }
}

static int send_frame(struct repl *r, uint64_t peer_id, const char *addr,
                      struct repl_frame *f, struct raft_io_send *raft_req,
                      raft_io_send_cb raft_cb)
{
    struct send_req *s = tern_calloc(1, sizeof *s);
    int rv;
    if (s == NULL) {
        return -ENOMEM;
    }
    s->xs.data = s;
    s->r = r;
    s->raft_req = raft_req;
    s->raft_cb = raft_cb;
    rv = xport_send(r->xport, &s->xs, peer_id, addr, f->iov, f->n_iov,
                    send_done);
    if (rv != 0) {
        tern_free(s);
        return rv;
    }
    repl_list_push(&r->sends, &s->link);
    return 0;
}

int repl_io_send_frame(struct repl *r, uint64_t peer_id, const char *addr,
                       struct repl_frame *f)
{
    return send_frame(r, peer_id, addr, f, NULL, NULL);
}

static int io_send(struct raft_io *io, struct raft_io_send *req,
                   const struct raft_message *message, raft_io_send_cb cb)
{
    struct repl *r = outer_repl(io);
    struct raft_message copy;
    const struct raft_message *m;
    struct repl_frame f;
    unsigned n_sent;
    int rv;

    if (r->failed != 0 || r->closing) {
        return RAFT_NOCONNECTION;
    }
    m = repl_guard_send(r, message, &copy);
    rv = repl_codec_encode(r->id, r->address, m, xport_max_message(r->xport),
                           &f, &n_sent);
    if (rv != 0) {
        snprintf(r->outer.errmsg, sizeof r->outer.errmsg, "encode: %s",
                 tern_strerror(rv));
        return rv == -ENOMEM ? RAFT_NOMEM : RAFT_TOOBIG;
    }
    rv = send_frame(r, m->server_id, m->server_address, &f, req, cb);
    repl_frame_release(&f);
    if (rv != 0) {
        snprintf(r->outer.errmsg, sizeof r->outer.errmsg, "xport send: %s",
                 tern_strerror(rv));
        return rv == -ENOMEM ? RAFT_NOMEM : RAFT_NOCONNECTION;
    }
    return 0;
}

void repl_io_deliver(struct repl *r, struct repl_wire *w)
{
    if (r->closing || r->failed != 0 || r->recv_cb == NULL ||
        !repl_guard_recv(r, &w->msg)) {
        repl_wire_release(w);
        return;
    }
    /* raft takes ownership of the entries array/batch and snapshot data. */
    r->recv_cb(&r->outer, &w->msg);
    repl_poll(r);
}

void repl_xport_recv(void *arg, uint64_t from, const void *buf, size_t len)
{
    struct repl *r = arg;
    struct repl_wire w;
    int rv;

    if (r == NULL || r->closing || r->failed != 0 || r->recv_cb == NULL) {
        return;
    }
    rv = repl_codec_decode(buf, len, &w);
    if (rv != 0) {
        r->bad_frames++;
        return;
    }
    if (w.sender_id != from) {
        r->bad_frames++;
        repl_wire_release(&w);
        return;
    }
    switch (w.type) {
        case REPL_WIRE_BULK_REQ:
        case REPL_WIRE_BULK_DATA:
            repl_bulk_on_frame(r, &w);
            break;
        case RAFT_IO_INSTALL_SNAPSHOT:
            repl_bulk_on_install(r, &w);
            break;
        default:
            repl_io_deliver(r, &w);
            break;
    }
}

void repl_io_setup(struct repl *r)
{
    struct raft_io *o = &r->outer;
    memset(o, 0, sizeof *o);
    o->version = r->inner->async_work != NULL ? 2 : 1;
    o->init = io_init;
    o->close = io_close;
    o->load = io_load;
    o->start = io_start;
    o->bootstrap = io_bootstrap;
    o->recover = io_recover;
    o->set_term = io_set_term;
    o->set_vote = io_set_vote;
    o->send = io_send;
    o->append = io_append;
    o->truncate = io_truncate;
    o->snapshot_put = io_snapshot_put;
    o->snapshot_get = io_snapshot_get;
    o->time = io_time;
    o->random = io_random;
    o->async_work = r->inner->async_work != NULL ? io_async_work : NULL;
    r->inner->data = r;
    repl_list_init(&r->appends);
    repl_list_init(&r->sends);
    r->next_index = 1;
}
