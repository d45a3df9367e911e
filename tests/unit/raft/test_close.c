/*
 * tests/unit/raft/test_close.c: the io wrapper's close against an inner
 * truncate still in flight (raft/io.c, "Close and truncate": libraft
 * 0.15's raft_uv frees a running truncate and completes its close early
 * when closed then, so the wrapper holds the inner close back until the
 * append that follows the truncate completed). One replica over a fake
 * disk (fake_io.h) whose operations the test completes by hand; the test
 * calls the io methods raft would call (it stays a follower: nothing is
 * delivered to it).
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fake_io.h"
#include "repl_int.h"
#include "xport_test.h"

struct one
{
    struct fake_disk disk;
    struct fake_io *io;
    uint64_t clock;
    struct xport_mem_net *net;
    struct xport *x;
    struct repl *r;
};

static int fsm_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    (void)arg;
    (void)index;
    (void)buf;
    (void)len;
    return 0;
}

static int fsm_snapshot(void *arg, uint64_t last_applied, void **m, size_t *len)
{
    (void)arg;
    *m = tern_malloc(8);
    tern_put_u64(*m, last_applied);
    *len = 8;
    return 0;
}

static int fsm_restore(void *arg, const void *m, size_t len)
{
    (void)arg;
    (void)m;
    (void)len;
    return 0;
}

static void state_cb(void *arg,
                     enum repl_role role,
                     uint64_t leader,
                     uint64_t term,
                     bool writable)
{
    (void)arg;
    (void)role;
    (void)leader;
    (void)term;
    (void)writable;
}

static void one_start(struct one *o)
{
    static const char *addrs[3] = {"127.0.0.1:9001", "127.0.0.1:9002",
                                   "127.0.0.1:9003"};
    struct repl_peer peers[3];
    struct repl_config cfg = {0};
    struct repl_fsm fsm = {0};
    char errmsg[TERN_ERRMSG_SIZE] = "";

    memset(o, 0, sizeof *o);
    for (unsigned k = 0; k < 3; k++) {
        peers[k].id = k + 1;
        peers[k].address = addrs[k];
    }
    cfg.id = 1;
    cfg.address = addrs[0];
    cfg.peers = peers;
    cfg.n_peers = 3;
    fsm.apply = fsm_apply;
    fsm.snapshot = fsm_snapshot;
    fsm.restore = fsm_restore;
    fake_disk_init(&o->disk);
    o->io = calloc(1, sizeof *o->io);
    cr_assert_not_null(o->io);
    fake_io_init(o->io, &o->disk, &o->clock, 7);
    cr_assert_eq(xport_mem_net_new(&o->net), 0);
    cr_assert_eq(xport_mem_new(o->net, 1, &o->x), 0);
    cr_assert_eq(repl_new_with_io(NULL, o->x, &cfg, &fsm, state_cb, NULL,
                                  &o->io->io, &o->r, errmsg),
                 0, "%s", errmsg);
    /* What repl_new sets for raft_uv. */
    o->r->io.wait_truncate = true;
    cr_assert_eq(repl_start(o->r, errmsg), 0, "%s", errmsg);
    while (fake_io_complete(o->io, 1) > 0) { /* bootstrap leftovers */
    }
}

static void one_fini(struct one *o)
{
    xport_close(o->x, NULL, NULL);
    xport_mem_net_complete(o->net);
    xport_mem_net_free(o->net);
    fake_disk_close(&o->disk);
    free(o->io);
}

static void append_cb(struct raft_io_append *req, int status)
{
    *(int *)req->data = status;
}

static void closed_cb(void *arg)
{
    *(bool *)arg = true;
}

/* Submit one 8-byte entry of term through the wrapper, as raft would. */
static void append_one(struct one *o,
                       struct raft_io_append *req,
                       struct raft_entry *e,
                       uint64_t *payload,
                       uint64_t term,
                       int *status)
{
    memset(e, 0, sizeof *e);
    e->term = term;
    e->type = RAFT_COMMAND;
    e->buf.base = payload;
    e->buf.len = sizeof *payload;
    *status = -1;
    req->data = status;
    cr_assert_eq(o->r->io.outer.append(&o->r->io.outer, req, e, 1, append_cb),
                 0);
}

static void tick(struct one *o)
{
    o->clock += 50;
    (void)fake_io_maybe_tick(o->io);
}

/* The follower-conflict shape both tests start from: append entry 1 and
 * let it complete, then truncate at it and append a replacement (left
 * pending: its completion also finishes the truncate). */
struct conflict
{
    struct raft_io_append a1, a2;
    struct raft_entry e1, e2;
    uint64_t p1, p2;
    int s1, s2;
};

static void truncate_then_append(struct one *o, struct conflict *c)
{
    uint64_t next = o->r->io.next_index;
    c->p1 = 1;
    c->p2 = 2;
    append_one(o, &c->a1, &c->e1, &c->p1, 1, &c->s1);
    cr_assert_eq(fake_io_complete(o->io, 1), 1);
    cr_assert_eq(c->s1, 0);
    cr_assert_eq(o->r->io.outer.truncate(&o->r->io.outer, next), 0);
    append_one(o, &c->a2, &c->e2, &c->p2, 2, &c->s2);
}

Test(repl_close, inner_close_waits_for_the_append_after_a_truncate)
{
    struct one o;
    struct conflict c;
    bool closed = false;

    one_start(&o);
    truncate_then_append(&o, &c);

    repl_close(o.r, closed_cb, &closed);
    cr_expect(!o.io->closing, "inner close held back: truncate in flight");
    tick(&o);
    cr_expect(!o.io->closing, "still held back on a tick");
    /* The truncate, then the append after it, finish. */
    cr_assert_eq(fake_io_complete(o.io, 2), 2);
    cr_expect_eq(c.s2, 0, "the append completed, not canceled");
    cr_expect(!o.io->closing, "never closed from inside an inner callback");
    cr_expect(!closed);
    tick(&o);
    cr_expect(o.io->closing, "the next tick closes the inner io");
    (void)fake_io_flush(o.io);
    cr_expect(closed, "repl_close completed");
    one_fini(&o);
}

Test(repl_close, inner_close_is_immediate_without_a_truncate_in_flight)
{
    struct one o;
    struct conflict c;
    bool closed = false;

    one_start(&o);
    truncate_then_append(&o, &c);
    cr_assert_eq(fake_io_complete(o.io, 2), 2);    /* the truncate finished */
    append_one(&o, &c.a1, &c.e1, &c.p1, 2, &c.s1); /* an ordinary append */

    repl_close(o.r, closed_cb, &closed);
    cr_expect(o.io->closing, "nothing to wait for: the inner closes at once");
    cr_expect_eq(c.s1, RAFT_CANCELED, "the inner close canceled it");
    (void)fake_io_flush(o.io);
    cr_expect(closed);
    one_fini(&o);
}

/* ---- the same over the real raft_uv -------------------------------------
 * Append, truncate, append, then close after a varying number of loop
 * turns, so that some closes land while raft_uv's truncate work runs (its
 * barrier fired, its after-work not yet run): without the wrapper holding
 * the inner close back, raft_uv frees the truncate under its work and
 * completes the close early; the after-work then crashes on freed memory
 * (a SEGV under ASan, a heap corruption without). Setting
 * TERN_TEST_NO_TRUNCATE_WAIT turns the wrapper's wait off to show that
 * (24 rounds crash every run here). */

static int rm_cb(const char *path,
                 const struct stat *sb,
                 int flag,
                 struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void uv_timer_noop(uv_timer_t *t)
{
    (void)t;
}

/* Run loop until *v != unset (at most max turns; the test's 1 ms ticker
 * keeps UV_RUN_ONCE from blocking long). */
static void spin_int(uv_loop_t *loop, const int *v, int unset, int max)
{
    for (int k = 0; k < max && *v == unset; k++) {
        uv_run(loop, UV_RUN_ONCE);
    }
}

Test(repl_close, raft_uv_close_during_truncate, .timeout = 120)
{
    static const char *addrs[3] = {"127.0.0.1:9101", "127.0.0.1:9102",
                                   "127.0.0.1:9103"};
    char base[] = "/tmp/tern-repl-close-XXXXXX";
    struct xport_mem_net *net;
    struct xport *x;
    uv_loop_t loop;
    uv_timer_t ticker;
    int rounds = 24;

    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_not_null(mkdtemp(base));
    cr_assert_eq(xport_mem_net_new(&net), 0);
    cr_assert_eq(xport_mem_new(net, 1, &x), 0);
    uv_timer_init(&loop, &ticker);
    uv_timer_start(&ticker, uv_timer_noop, 1, 1);
    for (int round = 0; round < rounds; round++) {
        struct repl_peer peers[3];
        struct repl_config cfg = {0};
        struct repl_fsm fsm = {0};
        char errmsg[TERN_ERRMSG_SIZE] = "";
        char dir[300];
        struct repl *r;
        struct raft_io_append a1, a2;
        struct raft_entry e1, e2;
        uint64_t p1 = 1, p2 = 2;
        int s1 = -1, s2 = -1;
        bool closed = false;
        uint64_t next;

        cr_assert_lt((size_t)snprintf(dir, sizeof dir, "%s/r%d", base, round),
                     sizeof dir);
        for (unsigned k = 0; k < 3; k++) {
            peers[k].id = k + 1;
            peers[k].address = addrs[k];
        }
        cfg.id = 1;
        cfg.address = addrs[0];
        cfg.peers = peers;
        cfg.n_peers = 3;
        cfg.data_dir = dir;
        cfg.election_timeout_ms = 100000; /* stays a quiet follower */
        cfg.heartbeat_ms = 15;
        fsm.apply = fsm_apply;
        fsm.snapshot = fsm_snapshot;
        fsm.restore = fsm_restore;
        cr_assert_eq(repl_new(&loop, x, &cfg, &fsm, state_cb, NULL, &r, errmsg),
                     0, "%s", errmsg);
        cr_assert(r->io.wait_truncate, "on for raft_uv");
        if (getenv("TERN_TEST_NO_TRUNCATE_WAIT") != NULL) {
            r->io.wait_truncate = false; /* demonstrates the libraft bug */
        }
        cr_assert_eq(repl_start(r, errmsg), 0, "%s", errmsg);
        next = r->io.next_index;
        memset(&e1, 0, sizeof e1);
        e1.term = 1;
        e1.type = RAFT_COMMAND;
        e1.buf.base = &p1;
        e1.buf.len = sizeof p1;
        e2 = e1;
        e2.term = 2;
        e2.buf.base = &p2;
        a1.data = &s1;
        a2.data = &s2;
        cr_assert_eq(r->io.outer.append(&r->io.outer, &a1, &e1, 1, append_cb),
                     0);
        spin_int(&loop, &s1, -1, 20000);
        cr_assert_eq(s1, 0);
        cr_assert_eq(r->io.outer.truncate(&r->io.outer, next), 0);
        cr_assert_eq(r->io.outer.append(&r->io.outer, &a2, &e2, 1, append_cb),
                     0);
        /* 0..5 loop turns: before, during or after the truncate work. */
        for (int k = 0; k < round % 6; k++) {
            uv_run(&loop, UV_RUN_ONCE);
        }
        repl_close(r, closed_cb, &closed);
        for (int k = 0; k < 20000 && !closed; k++) {
            uv_run(&loop, UV_RUN_ONCE);
        }
        cr_assert(closed, "round %d: repl_close completed", round);
        cr_expect(s2 == 0 || s2 == RAFT_CANCELED, "round %d: s2 %d", round, s2);
        /* Let any late threadpool completion run. */
        for (int k = 0; k < 20; k++) {
            uv_run(&loop, UV_RUN_ONCE);
        }
    }
    uv_close((uv_handle_t *)&ticker, NULL);
    xport_close(x, NULL, NULL);
    xport_mem_net_complete(net);
    xport_mem_net_free(net);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    nftw(base, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}
