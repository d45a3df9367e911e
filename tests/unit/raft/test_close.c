/*
 * tests/unit/raft/test_close.c: the io wrapper's close against an inner
 * truncate still in flight (raft/io.c, "Close and truncate": libraft
 * 0.15's raft_uv frees a running truncate and completes its close early
 * when closed then, so the wrapper holds the inner close back until the
 * append that follows the truncate completed). One replica over a fake
 * disk (fake_io.h) whose operations the test completes by hand; the test
 * calls the io methods raft would call (it stays a follower: nothing is
 * delivered to it). Also a truncate raft_uv did not carry out (io.c: the
 * first append after it fail-stops the replica when a closed segment
 * still holds a truncated index), over the fake disk with segment names
 * made by hand and over the real raft_uv with a segment it cannot remove.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../immutable.h"
#include "../rm_tree.h"
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

/* Node 1 of three at addrs, with the no-op FSM above. */
static void node1_config(const char *const addrs[3],
                         struct repl_peer peers[3],
                         struct repl_config *cfg,
                         struct repl_fsm *fsm)
{
    memset(cfg, 0, sizeof *cfg);
    memset(fsm, 0, sizeof *fsm);
    for (unsigned k = 0; k < 3; k++) {
        peers[k].id = k + 1;
        peers[k].address = addrs[k];
    }
    cfg->id = 1;
    cfg->address = addrs[0];
    cfg->peers = peers;
    cfg->n_peers = 3;
    fsm->apply = fsm_apply;
    fsm->snapshot = fsm_snapshot;
    fsm->restore = fsm_restore;
}

static void one_start(struct one *o)
{
    static const char *addrs[3] = {"127.0.0.1:9001", "127.0.0.1:9002",
                                   "127.0.0.1:9003"};
    struct repl_peer peers[3];
    struct repl_config cfg;
    struct repl_fsm fsm;
    char errmsg[TERN_ERRMSG_SIZE] = "";

    memset(o, 0, sizeof *o);
    node1_config(addrs, peers, &cfg, &fsm);
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

/* A replica over the real raft_uv in dir, created, not started: a quiet
 * follower (it never campaigns). */
static struct repl *uv_replica_new(uv_loop_t *loop,
                                   struct xport *x,
                                   const char *dir)
{
    static const char *addrs[3] = {"127.0.0.1:9101", "127.0.0.1:9102",
                                   "127.0.0.1:9103"};
    struct repl_peer peers[3];
    struct repl_config cfg;
    struct repl_fsm fsm;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct repl *r;
    node1_config(addrs, peers, &cfg, &fsm);
    cfg.data_dir = dir;
    cfg.election_timeout_ms = 100000; /* stays a quiet follower */
    cfg.heartbeat_ms = 15;
    cr_assert_eq(repl_new(loop, x, &cfg, &fsm, state_cb, NULL, &r, errmsg), 0,
                 "%s", errmsg);
    return r;
}

/* uv_replica_new, started. */
static struct repl *uv_replica(uv_loop_t *loop, struct xport *x, char *dir)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct repl *r = uv_replica_new(loop, x, dir);
    cr_assert(r->io.check_segments, "on for raft_uv");
    cr_assert_eq(repl_start(r, errmsg), 0, "%s", errmsg);
    return r;
}

Test(repl_close, raft_uv_close_during_truncate, .timeout = 120)
{
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
        r = uv_replica_new(&loop, x, dir);
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
    test_rm_tree(base);
}

/* ---- a truncate raft_uv did not carry out -------------------------------
 * raft/io.c, "A truncate raft_uv did not carry out": raft_uv ignores a
 * failed truncate and goes on writing and acknowledging the appends behind
 * it; the wrapper checks the data dir once the first of them completed
 * and fail-stops when a closed segment still holds a truncated index. */

/* Make dir/raft_uv's closed segment name for [first, last]. */
static void touch_segment(const char *dir, uint64_t first, uint64_t last)
{
    char path[400];
    FILE *f;
    cr_assert_lt(
        (size_t)snprintf(path, sizeof path, "%s/%016llu-%016llu", dir,
                         (unsigned long long)first, (unsigned long long)last),
        sizeof path);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fclose(f), 0);
}

/* one_start, plus what repl_new sets for raft_uv in a data dir. */
static void one_start_checked(struct one *o, char *dir)
{
    one_start(o);
    cr_assert_not_null(mkdtemp(dir));
    o->r->data_dir = tern_strdup(dir); /* freed by the replica */
    o->r->io.check_segments = true;
}

static void one_fini_dir(struct one *o, const char *dir)
{
    bool closed = false;
    repl_close(o->r, closed_cb, &closed);
    (void)fake_io_flush(o->io);
    tick(o);
    (void)fake_io_flush(o->io);
    cr_expect(closed);
    one_fini(o);
    test_rm_tree(dir);
}

Test(repl_close, segment_left_by_a_truncate_fail_stops)
{
    char dir[] = "/tmp/tern-trunc-check-XXXXXX";
    struct repl_status st;
    struct conflict c;
    struct one o;
    uint64_t next;

    one_start_checked(&o, dir);
    next = o.r->io.next_index;
    /* The segment raft_uv should have removed for the truncate at next. */
    touch_segment(dir, next, next);
    truncate_then_append(&o, &c);
    cr_assert_eq(fake_io_complete(o.io, 2), 2);
    cr_expect_eq(c.s2, RAFT_IOERR, "the append after it is not acknowledged");
    repl_get_status(o.r, &st);
    cr_expect_eq(st.failed, -EIO, "fail-stop");
    cr_expect_not_null(strstr(st.failed_detail, "truncate"), "%s",
                       st.failed_detail);
    cr_expect_eq(o.r->io.durable_index, next - 1, "not counted as durable");
    one_fini_dir(&o, dir);
}

Test(repl_close, truncate_carried_out_goes_on)
{
    char dir[] = "/tmp/tern-trunc-check-XXXXXX";
    struct repl_status st;
    struct conflict c;
    struct one o;
    uint64_t next;

    one_start_checked(&o, dir);
    next = o.r->io.next_index;
    /* What raft_uv leaves after a truncate at next: entries below it. */
    touch_segment(dir, 1, next - 1);
    truncate_then_append(&o, &c);
    cr_assert_eq(fake_io_complete(o.io, 2), 2);
    cr_expect_eq(c.s2, 0);
    repl_get_status(o.r, &st);
    cr_expect_eq(st.failed, 0);
    cr_expect_eq(o.r->io.durable_index, next);
    /* A closed segment written later (past next) is no longer judged: the
     * check belongs to the first append after a truncate only. */
    touch_segment(dir, next, next + 5);
    append_one(&o, &c.a1, &c.e1, &c.p1, 2, &c.s1);
    cr_assert_eq(fake_io_complete(o.io, 1), 1);
    cr_expect_eq(c.s1, 0);
    repl_get_status(o.r, &st);
    cr_expect_eq(st.failed, 0);
    one_fini_dir(&o, dir);
}

/* ---- the same over the real raft_uv -------------------------------------
 * Entries 2 and 3 in a closed segment (written, then the replica closed
 * and started again); a truncate at 3 rewrites it as [2, 2] and must
 * remove [2, 3]. With the immutable flag on [2, 3] the removal fails
 * (EPERM): raft_uv still acknowledges the append at 3 that follows; the
 * wrapper fail-stops instead. Without the flag, the same steps go on. */

static void uv_append(uv_loop_t *loop,
                      struct repl *r,
                      uint64_t term,
                      uint64_t *payload,
                      int *status)
{
    struct raft_io_append req;
    struct raft_entry e;
    memset(&e, 0, sizeof e);
    e.term = term;
    e.type = RAFT_COMMAND;
    e.buf.base = payload;
    e.buf.len = sizeof *payload;
    *status = -1;
    req.data = status;
    cr_assert_eq(r->io.outer.append(&r->io.outer, &req, &e, 1, append_cb), 0);
    spin_int(loop, status, -1, 20000);
}

static void uv_close_replica(uv_loop_t *loop, struct repl *r)
{
    bool closed = false;
    repl_close(r, closed_cb, &closed);
    for (int k = 0; k < 20000 && !closed; k++) {
        uv_run(loop, UV_RUN_ONCE);
    }
    cr_assert(closed);
}

static void raft_uv_truncate_round(bool fail)
{
    char base[] = "/tmp/tern-uv-trunc-XXXXXX";
    char seg[400];
    struct xport_mem_net *net;
    struct repl_status st;
    struct xport *x;
    struct repl *r;
    uv_loop_t loop;
    uv_timer_t ticker;
    uint64_t p2 = 2, p3 = 3, p3b = 33;
    int s = -1;
    int err = 0;

    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_not_null(mkdtemp(base));
    cr_assert_eq(xport_mem_net_new(&net), 0);
    cr_assert_eq(xport_mem_new(net, 1, &x), 0);
    uv_timer_init(&loop, &ticker);
    uv_timer_start(&ticker, uv_timer_noop, 1, 1);

    r = uv_replica(&loop, x, base);
    cr_assert_eq(r->io.next_index, 2, "the bootstrap entry is 1");
    uv_append(&loop, r, 1, &p2, &s);
    cr_assert_eq(s, 0);
    uv_append(&loop, r, 1, &p3, &s);
    cr_assert_eq(s, 0);
    uv_close_replica(&loop, r);
    r = uv_replica(&loop, x, base);
    cr_assert_eq(r->io.next_index, 4);
    cr_assert_lt((size_t)snprintf(seg, sizeof seg, "%s/%016llu-%016llu", base,
                                  2ull, 3ull),
                 sizeof seg);
    cr_assert_eq(access(seg, F_OK), 0, "raft_uv closed [2, 3] at the close");
    if (fail) {
        err = test_set_immutable(seg, true);
    }
    if (err == 0) {
        cr_assert_eq(r->io.outer.truncate(&r->io.outer, 3), 0);
        uv_append(&loop, r, 2, &p3b, &s);
        repl_get_status(r, &st);
        if (fail) {
            cr_expect_eq(s, RAFT_IOERR, "not acknowledged");
            cr_expect_eq(st.failed, -EIO, "fail-stop");
            cr_expect_not_null(
                strstr(st.failed_detail, "0000000000000002-0000000000000003"),
                "names the segment: %s", st.failed_detail);
            cr_expect_eq(test_set_immutable(seg, false), 0);
        } else {
            cr_expect_eq(s, 0);
            cr_expect_eq(st.failed, 0);
            cr_expect_neq(access(seg, F_OK), 0, "[2, 3] removed");
        }
    }
    uv_close_replica(&loop, r);
    uv_close((uv_handle_t *)&ticker, NULL);
    xport_close(x, NULL, NULL);
    xport_mem_net_complete(net);
    xport_mem_net_free(net);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0);
    test_rm_tree(base);
    if (err != 0) {
        cr_skip_test(
            "no immutable flag here (%s): the failure is not "
            "provoked",
            strerror(err));
    }
}

Test(repl_close, raft_uv_truncate_that_fails_fail_stops, .timeout = 120)
{
    raft_uv_truncate_round(true);
}

Test(repl_close, raft_uv_truncate_carried_out_goes_on, .timeout = 120)
{
    raft_uv_truncate_round(false);
}
