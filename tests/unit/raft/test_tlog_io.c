/*
 * tests/unit/raft/test_tlog_io.c: raft/tlog_io.c's raft_io contract,
 * driven by hand on a real directory (what libraft would call, without
 * libraft): a node that starts with nothing takes entries from index 1; a
 * close while a snapshot is being written; a snapshot read while another
 * is written; a close during an install keeps the appends' order; an
 * install whose snapshot cannot be written stops the log instead of
 * leaving one that does not load; term and vote survive a damaged slot.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../rm_tree.h"
#include "repl_int.h"

static uv_loop_t loop;
static char dir[] = "/tmp/tern-tlog-io-XXXXXX";
static bool closed;
static int order[64];
static int n_order;
static int put_status;
static int get_status;

static void setup(void)
{
    strcpy(dir, "/tmp/tern-tlog-io-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(uv_loop_init(&loop), 0);
    n_order = 0;
    put_status = -1;
    get_status = -1;
}

static void teardown(void)
{
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(&loop), 0, "every handle closed");
    test_rm_tree(dir);
}

TestSuite(tlog_io, .init = setup, .fini = teardown, .timeout = 60);

static void close_cb(struct raft_io *io)
{
    (void)io;
    closed = true;
}

static struct raft_io *open_io(void)
{
    struct raft_io *io = NULL;
    char em[TERN_ERRMSG_SIZE] = "";
    cr_assert_eq(repl_tlog_io_new(&loop, dir, 0, 0, &io, em), 0, "%s", em);
    return io;
}

static void close_io(struct raft_io *io)
{
    closed = false;
    io->close(io, close_cb);
    for (int k = 0; k < 100000 && !closed; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert(closed);
    repl_tlog_io_free(io);
}

static void free_snap(struct raft_snapshot *s)
{
    if (s == NULL) {
        return;
    }
    for (unsigned i = 0; i < s->n_bufs; i++) {
        raft_free(s->bufs[i].base);
    }
    raft_free(s->bufs);
    raft_configuration_close(&s->configuration);
    raft_free(s);
}

/* Load; *start and *n out; the entries and snapshot freed. */
static int load(struct raft_io *io, raft_index *start, size_t *n)
{
    raft_term term;
    raft_id vote;
    struct raft_entry *es = NULL;
    struct raft_snapshot *snap = NULL;
    int rv = io->load(io, &term, &vote, &snap, start, &es, n);
    if (rv == 0 && *n > 0) {
        raft_free(es[0].batch);
        raft_free(es);
    }
    free_snap(snap);
    return rv;
}

static void bootstrap(void)
{
    struct raft_io *io = open_io();
    struct raft_configuration c;
    raft_configuration_init(&c);
    cr_assert_eq(raft_configuration_add(&c, 1, "127.0.0.1:1", RAFT_VOTER), 0);
    cr_assert_eq(io->bootstrap(io, &c), 0, "%s", io->errmsg);
    raft_configuration_close(&c);
    close_io(io);
}

/* A bootstrapped store, opened and loaded. */
static struct raft_io *bootstrapped(raft_index *start, size_t *n)
{
    struct raft_io *io;
    bootstrap();
    io = open_io();
    cr_assert_eq(load(io, start, n), 0, "%s", io->errmsg);
    return io;
}

static void app_cb(struct raft_io_append *req, int status)
{
    order[n_order++] =
        (int)(intptr_t)req->data * 1000 + (status < 0 ? -status : status);
}

static struct raft_io_append reqs[64];
static uint8_t payload[64];

static int append(struct raft_io *io, int id)
{
    struct raft_entry e = {0};
    e.term = 1;
    e.type = RAFT_COMMAND;
    e.buf.base = payload;
    e.buf.len = 8;
    reqs[id].data = (void *)(intptr_t)id;
    return io->append(io, &reqs[id], &e, 1, app_cb);
}

static void put_cb(struct raft_io_snapshot_put *req, int status)
{
    (void)req;
    put_status = status;
}

static void get_cb(struct raft_io_snapshot_get *req,
                   struct raft_snapshot *s,
                   int status)
{
    (void)req;
    get_status = status;
    free_snap(s);
}

/* A snapshot at idx with data_len bytes of data (the caller frees it). */
static struct raft_snapshot *mk_snap(raft_index idx, size_t data_len)
{
    struct raft_snapshot *s = calloc(1, sizeof *s);
    s->index = idx;
    s->term = 1;
    s->configuration_index = 1;
    raft_configuration_init(&s->configuration);
    cr_assert_eq(
        raft_configuration_add(&s->configuration, 1, "127.0.0.1:1", RAFT_VOTER),
        0);
    s->bufs = calloc(1, sizeof *s->bufs);
    s->bufs[0].base = calloc(1, data_len > 0 ? data_len : 1);
    memset(s->bufs[0].base, 'x', data_len);
    s->bufs[0].len = data_len;
    s->n_bufs = 1;
    return s;
}

static void drop_snap(struct raft_snapshot *s)
{
    raft_configuration_close(&s->configuration);
    free(s->bufs[0].base);
    free(s->bufs);
    free(s);
}

static void spin(const int *v, int unset)
{
    for (int k = 0; k < 200000 && *v == unset; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert_neq(*v, unset);
}

Test(tlog_io, a_node_that_starts_with_nothing_appends_from_index_1)
{
    struct raft_io *io = open_io();
    raft_index start = 0;
    size_t n = 9;
    cr_assert_eq(load(io, &start, &n), 0, "%s", io->errmsg);
    cr_expect_eq(start, 1);
    cr_expect_eq(n, 0);
    cr_assert_eq(append(io, 1), 0, "%s", io->errmsg);
    spin(&n_order, 0);
    cr_expect_eq(order[0], 1000, "acknowledged with 0");
    close_io(io);
    io = open_io();
    cr_assert_eq(load(io, &start, &n), 0, "%s", io->errmsg);
    cr_expect_eq(start, 1);
    cr_expect_eq(n, 1);
    close_io(io);
}

Test(tlog_io, close_while_a_snapshot_is_written)
{
    struct raft_snapshot *s;
    struct raft_io_snapshot_put req;
    raft_index start;
    size_t n;
    struct raft_io *io;
    io = bootstrapped(&start, &n);
    s = mk_snap(1, 32 << 20); /* outlives the store's own close */
    cr_assert_eq(io->snapshot_put(io, 1, &req, s, put_cb), 0);
    close_io(io);
    cr_expect_eq(put_status, 0, "written, then the close completed");
    drop_snap(s);
}

Test(tlog_io, a_snapshot_read_while_another_is_written)
{
    struct raft_snapshot *s1, *s2;
    struct raft_io_snapshot_put req;
    struct raft_io_snapshot_get greq;
    raft_index start;
    size_t n;
    struct raft_io *io;
    io = bootstrapped(&start, &n);
    s1 = mk_snap(1, 4096);
    cr_assert_eq(io->snapshot_put(io, 1, &req, s1, put_cb), 0);
    spin(&put_status, -1);
    cr_assert_eq(put_status, 0);
    put_status = -1;
    s2 = mk_snap(1, 64 << 20);
    cr_assert_eq(io->snapshot_put(io, 1, &req, s2, put_cb), 0);
    cr_assert_eq(io->snapshot_get(io, &greq, get_cb), 0);
    spin(&put_status, -1);
    spin(&get_status, -1);
    cr_expect_eq(put_status, 0, "the read left the file being written");
    cr_expect_eq(get_status, 0);
    close_io(io);
    drop_snap(s1);
    drop_snap(s2);
}

Test(tlog_io, close_during_an_install_keeps_the_appends_order)
{
    struct raft_snapshot *s;
    struct raft_io_snapshot_put req;
    raft_index start;
    size_t n;
    struct raft_io *io;
    io = bootstrapped(&start, &n);
    cr_assert_eq(append(io, 1), 0); /* index 2, in flight */
    s = mk_snap(10, 16 << 20);
    cr_assert_eq(io->snapshot_put(io, 0, &req, s, put_cb), 0);
    cr_assert_eq(append(io, 2), 0); /* index 11: held for the install */
    closed = false;
    io->close(io, close_cb);
    for (int k = 0; k < 100000 && !closed; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    cr_assert(closed);
    cr_assert_eq(n_order, 2);
    cr_expect_eq(order[0] / 1000, 1, "the append before the install first");
    cr_expect_eq(order[1] / 1000, 2);
    cr_expect_eq(order[1] % 1000, RAFT_CANCELED, "the held one canceled");
    repl_tlog_io_free(io);
    drop_snap(s);
}

Test(tlog_io, an_install_that_cannot_be_written_stops_the_log)
{
    char path[400];
    struct raft_snapshot *s;
    struct raft_io_snapshot_put req;
    raft_index start;
    size_t n;
    struct raft_io *io;
    io = bootstrapped(&start, &n);
    cr_assert_eq(append(io, 1), 0);
    cr_assert_eq(append(io, 2), 0);
    for (int k = 0; k < 200000 && n_order < 2; k++) {
        uv_run(&loop, UV_RUN_ONCE);
    }
    /* A directory where the snapshot's temporary file goes: EISDIR. */
    snprintf(path, sizeof path, "%s/snap-%020d.tmp", dir, 10);
    cr_assert_eq(mkdir(path, 0700), 0);
    s = mk_snap(10, 4096);
    cr_assert_eq(io->snapshot_put(io, 0, &req, s, put_cb), 0);
    spin(&put_status, -1);
    cr_expect_neq(put_status, 0);
    cr_expect_neq(append(io, 3), 0, "no append after the voided log");
    close_io(io);
    cr_assert_eq(rmdir(path), 0);
    io = open_io();
    cr_expect_eq(load(io, &start, &n), 0, "it loads: %s", io->errmsg);
    cr_expect_eq(start, 1);
    cr_expect_eq(n, 3, "the log before the install");
    close_io(io);
    drop_snap(s);
}

Test(tlog_io, term_and_vote_survive_a_damaged_slot)
{
    struct raft_io *io;
    raft_term term;
    raft_id vote;
    struct raft_entry *es;
    struct raft_snapshot *snap;
    raft_index start;
    size_t n;
    char path[400];
    FILE *f;
    io = bootstrapped(&start, &n);
    cr_assert_eq(io->set_term(io, 7), 0);
    cr_assert_eq(io->set_vote(io, 3), 0);
    close_io(io);
    /* A flipped bit in each slot in turn: the other holds (7, 3). */
    for (int slot = 1; slot <= 2; slot++) {
        snprintf(path, sizeof path, "%s/tern-meta%d", dir, slot);
        f = fopen(path, "r+b");
        cr_assert_not_null(f);
        cr_assert_eq(fseek(f, 16, SEEK_SET), 0); /* the term */
        int ch = fgetc(f);
        cr_assert_eq(fseek(f, 16, SEEK_SET), 0);
        fputc(ch ^ 0x04, f);
        fclose(f);
        io = open_io();
        cr_assert_eq(io->load(io, &term, &vote, &snap, &start, &es, &n), 0,
                     "%s", io->errmsg);
        cr_expect_eq(term, 7, "slot %d damaged", slot);
        cr_expect_eq(vote, 3, "slot %d damaged", slot);
        raft_free(es[0].batch);
        raft_free(es);
        free_snap(snap);
        close_io(io);
        f = fopen(path, "r+b");
        cr_assert_eq(fseek(f, 16, SEEK_SET), 0);
        fputc(ch, f);
        fclose(f);
    }
}
