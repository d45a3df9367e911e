/*
 * tests/unit/raft/test_meta.c: tern's term record (raft/meta.c) and the
 * messages refused before the core (raft/io.c "Refused messages"): the
 * record's codec and load rules, each crash window between the inner
 * write and ours, refusals on the deterministic cluster harness (fake
 * disks whose term and vote the tests edit between "crashes"), absurd
 * terms and unknown senders injected as encoded frames, and the bound on
 * our own set_term.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cluster.h"

#define STEPS CLUSTER_STEPS

static struct cluster cl;

/* ---- the record's codec and rules --------------------------------------- */

Test(meta, record_round_trip_and_damage)
{
    struct repl_meta_rec in = {.seq = 7, .term = 42, .vote = 3};
    struct repl_meta_rec out = {0};
    uint8_t buf[REPL_META_SIZE];

    repl_meta_encode(buf, &in);
    cr_assert_eq(repl_meta_decode(buf, sizeof buf, &out), 0);
    cr_expect_eq(out.seq, 7);
    cr_expect_eq(out.term, 42);
    cr_expect_eq(out.vote, 3);
    cr_expect_eq(repl_meta_decode(buf, sizeof buf - 1, &out), TERN_ECORRUPT);
    for (size_t k = 0; k < 44; k++) { /* every covered byte, one bit */
        buf[k] ^= 0x10;
        cr_expect_eq(repl_meta_decode(buf, sizeof buf, &out), TERN_ECORRUPT,
                     "byte %zu", k);
        buf[k] ^= 0x10;
    }
    /* A valid record of another version (checksum recomputed). */
    tern_put_u16(buf + 4, 2);
    tern_put_u32(buf + 40, tern_checksum32(buf, 40));
    cr_expect_eq(repl_meta_decode(buf, sizeof buf, &out), TERN_EVERSION);
}

static int check(uint64_t it,
                 uint64_t iv,
                 bool present,
                 uint64_t ot,
                 uint64_t ov)
{
    struct repl_meta_rec ours = {
        .present = present, .seq = 5, .term = ot, .vote = ov};
    char errmsg[TERN_ERRMSG_SIZE] = "";
    return repl_meta_check(it, iv, &ours, 100, errmsg);
}

Test(meta, load_rules)
{
    /* equal, or both pristine */
    cr_expect_eq(check(5, 2, true, 5, 2), REPL_META_MATCH);
    cr_expect_eq(check(0, 0, false, 0, 0), REPL_META_MATCH);
    /* no record yet: an upgrade */
    cr_expect_eq(check(5, 2, false, 0, 0), REPL_META_CREATED);
    /* set_term interrupted (vote cleared), within the jump bound */
    cr_expect_eq(check(6, 0, true, 5, 2), REPL_META_COMPLETED);
    cr_expect_eq(check(105, 0, true, 5, 0), REPL_META_COMPLETED);
    cr_expect_eq(check(106, 0, true, 5, 0), TERN_ECORRUPT); /* jump */
    cr_expect_eq(check(REPL_TERM_MAX, 0, true, REPL_TERM_MAX - 1, 0),
                 TERN_ECORRUPT);
    /* set_vote interrupted */
    cr_expect_eq(check(5, 3, true, 5, 0), REPL_META_COMPLETED);
    /* refused: term back, vote lost, vote changed, term ahead with a
     * vote (our set_term record precedes any vote in the new term) */
    cr_expect_eq(check(4, 2, true, 5, 2), TERN_ECORRUPT);
    cr_expect_eq(check(4, 0, true, 5, 0), TERN_ECORRUPT);
    cr_expect_eq(check(5, 0, true, 5, 2), TERN_ECORRUPT);
    cr_expect_eq(check(5, 3, true, 5, 2), TERN_ECORRUPT);
    cr_expect_eq(check(6, 2, true, 5, 2), TERN_ECORRUPT);
    {
        struct repl_meta_rec ours = {
            .present = true, .seq = 9, .term = 5, .vote = 2};
        char errmsg[TERN_ERRMSG_SIZE] = "";
        cr_assert_eq(repl_meta_check(4, 1, &ours, 100, errmsg), TERN_ECORRUPT);
        cr_expect_not_null(strstr(errmsg, "term 4 vote 1"), "%s", errmsg);
        cr_expect_not_null(strstr(errmsg, "term 5 vote 2"), "%s", errmsg);
    }
}

/* Two slots: the newest valid one wins; a torn newest leaves the older. */
Test(meta, slots_alternate_and_survive_a_torn_write)
{
    char dir[] = "/tmp/tern-meta-t-XXXXXX";
    char errmsg[TERN_ERRMSG_SIZE] = "";
    char path[128];
    struct repl_meta_rec m = {0}, got;
    int fd;

    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(repl_meta_read(dir, &got, errmsg), 0);
    cr_expect(!got.present);
    for (uint64_t seq = 1; seq <= 3; seq++) {
        m.seq = seq;
        m.term = 10 + seq;
        m.vote = seq;
        cr_assert_eq(repl_meta_write(dir, &m, errmsg), 0, "%s", errmsg);
        cr_assert_eq(repl_meta_read(dir, &got, errmsg), 0);
        cr_expect(got.present);
        cr_expect_eq(got.seq, seq);
        cr_expect_eq(got.term, 10 + seq);
    }
    /* Tear the newest (seq 3, slot 1): seq 2 of slot 2 is current. */
    (void)snprintf(path, sizeof path, "%s/tern-meta1", dir);
    fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "\0\0\0\0", 4, 16), 4);
    close(fd);
    cr_assert_eq(repl_meta_read(dir, &got, errmsg), 0);
    cr_expect_eq(got.seq, 2);
    cr_expect_eq(got.term, 12);
    /* Both damaged: corrupt. */
    (void)snprintf(path, sizeof path, "%s/tern-meta2", dir);
    fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "\xff", 1, 20), 1);
    close(fd);
    cr_expect_eq(repl_meta_read(dir, &got, errmsg), TERN_ECORRUPT);
    cr_expect_not_null(strstr(errmsg, "no valid record"), "%s", errmsg);
    (void)snprintf(path, sizeof path, "%s/tern-meta1", dir);
    unlink(path);
    (void)snprintf(path, sizeof path, "%s/tern-meta2", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- on the cluster harness ---------------------------------------------- */

static struct repl_meta_rec record_of(struct cnode *nd)
{
    struct repl_meta_rec m;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    cr_assert_eq(repl_meta_read(nd->meta_dir, &m, errmsg), 0, "%s", errmsg);
    return m;
}

/* Overwrite the record with (term, vote) as the next write. */
static void put_record(struct cnode *nd, uint64_t term, uint64_t vote)
{
    struct repl_meta_rec m = record_of(nd);
    char errmsg[TERN_ERRMSG_SIZE] = "";
    m.seq++;
    m.term = term;
    m.vote = vote;
    cr_assert_eq(repl_meta_write(nd->meta_dir, &m, errmsg), 0, "%s", errmsg);
}

static struct repl_status status_of(struct cnode *nd)
{
    struct repl_status st;
    repl_get_status(nd->repl, &st);
    return st;
}

/* A cluster of 3 with records, elected, one entry applied everywhere. */
static int meta_cluster(void)
{
    uint64_t last;
    int l;
    cluster_init(&cl, 3);
    cl.meta = true;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 1, 64, 1, &last);
    return l;
}

/* The others keep serving: a writable leader among them applies more. */
static void others_serve(void)
{
    uint64_t last;
    int l;
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    l = cluster_writable_leader(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 2, &last);
}

Test(meta, record_follows_every_term_and_vote)
{
    int l = meta_cluster();
    for (unsigned i = 0; i < cl.n; i++) {
        struct repl_meta_rec m = record_of(&cl.nodes[i]);
        cr_expect(m.present);
        cr_expect_eq(m.term, cl.nodes[i].disk.term, "node %u", i);
        cr_expect_eq(m.vote, cl.nodes[i].disk.vote, "node %u", i);
    }
    /* Another election: still in step, and a restart matches. */
    cluster_crash(&cl, (unsigned)l);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    cluster_start(&cl, (unsigned)l);
    cluster_steps(&cl, 500);
    for (unsigned i = 0; i < cl.n; i++) {
        struct repl_meta_rec m = record_of(&cl.nodes[i]);
        cr_expect_eq(m.term, cl.nodes[i].disk.term, "node %u", i);
        cr_expect_eq(m.vote, cl.nodes[i].disk.vote, "node %u", i);
        cr_expect_eq(status_of(&cl.nodes[i]).meta_load, REPL_META_MATCH);
    }
    cluster_fini(&cl);
}

Test(meta, mismatch_refused_and_not_repaired)
{
    int l = meta_cluster();
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    char errmsg[TERN_ERRMSG_SIZE] = "";
    uint64_t t;

    cluster_crash(&cl, f);
    t = cl.nodes[f].disk.term;
    cr_assert_geq(t, 2);
    cl.nodes[f].disk.term = t - 1; /* raft_uv's term went back */
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    cr_expect_not_null(strstr(errmsg, "term record mismatch"), "%s", errmsg);
    cr_expect(!cl.nodes[f].up);
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    cr_expect_eq(record_of(&cl.nodes[f]).term, t, "record kept");
    others_serve();
    cl.nodes[f].disk.term = t;
    cluster_start(&cl, f);
    cluster_fini(&cl);
}

Test(meta, vote_lost_or_changed_refused)
{
    int l = meta_cluster();
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct cnode *nd = &cl.nodes[f];
    uint64_t t;

    cluster_crash(&cl, f);
    t = nd->disk.term;
    put_record(nd, t, 3);
    nd->disk.vote = 0; /* vote lost */
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    nd->disk.vote = 2; /* vote changed */
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    nd->disk.term = t + 1; /* term ahead with a vote */
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    others_serve();
    cluster_fini(&cl);
}

Test(meta, corrupt_record_refused_torn_one_tolerated)
{
    int l = meta_cluster();
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct cnode *nd = &cl.nodes[f];
    struct repl_meta_rec m;
    char path[128];
    int fd;

    cluster_crash(&cl, f);
    /* Write the current state twice, so both slots hold it. */
    put_record(nd, nd->disk.term, nd->disk.vote);
    put_record(nd, nd->disk.term, nd->disk.vote);
    m = record_of(nd);
    /* The older slot torn: starts. */
    (void)snprintf(path, sizeof path, "%s/tern-meta%u", nd->meta_dir,
                   (m.seq & 1) != 0 ? 2u : 1u);
    fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "\x01", 1, 17), 1);
    close(fd);
    cr_assert_eq(cluster_try_start(&cl, f, errmsg), 0, "%s", errmsg);
    cluster_crash(&cl, f);
    /* Both damaged: refused with a clear message. */
    for (unsigned k = 1; k <= 2; k++) {
        (void)snprintf(path, sizeof path, "%s/tern-meta%u", nd->meta_dir, k);
        fd = open(path, O_WRONLY);
        cr_assert_geq(fd, 0);
        cr_assert_eq(pwrite(fd, "\x01", 1, 9), 1);
        close(fd);
    }
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    cr_expect_not_null(strstr(errmsg, "no valid record"), "%s", errmsg);
    others_serve();
    cluster_fini(&cl);
}

/* A node of a version without the record: it is created at the first
 * start, from the inner values, and matches afterwards. */
Test(meta, upgrade_creates_the_record)
{
    uint64_t last;
    int l;
    unsigned f;
    struct repl_meta_rec m;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 1, 64, 1, &last);
    f = (unsigned)cluster_other(&cl, l, l);
    cluster_crash(&cl, f);
    cl.meta = true; /* the restarted node gets an empty data_dir */
    cluster_start(&cl, f);
    cr_expect_eq(status_of(&cl.nodes[f]).meta_load, REPL_META_CREATED);
    m = record_of(&cl.nodes[f]);
    cr_expect(m.present);
    cr_expect_eq(m.term, status_of(&cl.nodes[f]).term);
    cluster_crash(&cl, f);
    cluster_start(&cl, f);
    cr_expect_eq(status_of(&cl.nodes[f]).meta_load, REPL_META_MATCH);
    cluster_fini(&cl);
}

/* Crash after raft_uv's set_term and before ours: the inner term is
 * ahead, vote cleared: completed, and the record catches up. */
Test(meta, crash_window_set_term_completed)
{
    int l = meta_cluster();
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    struct cnode *nd = &cl.nodes[f];
    uint64_t t;
    cluster_crash(&cl, f);
    t = nd->disk.term;
    nd->disk.term = t + 1; /* what the inner set_term wrote */
    nd->disk.vote = 0;
    cluster_start(&cl, f);
    cr_expect_eq(status_of(nd).meta_load, REPL_META_COMPLETED);
    cr_expect_eq(status_of(nd).meta_prev_term, t);
    cr_expect_eq(record_of(nd).term, t + 1);
    cr_expect_eq(record_of(nd).vote, 0);
    others_serve();
    cluster_fini(&cl);
}

/* Crash after raft_uv's set_vote and before ours. */
Test(meta, crash_window_set_vote_completed)
{
    int l = meta_cluster();
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    struct cnode *nd = &cl.nodes[f];
    cluster_crash(&cl, f);
    put_record(nd, nd->disk.term + 1, 0); /* our set_term went through */
    nd->disk.term++;
    nd->disk.vote = nd->id; /* the inner set_vote too, ours did not */
    cluster_start(&cl, f);
    cr_expect_eq(status_of(nd).meta_load, REPL_META_COMPLETED);
    cr_expect_eq(record_of(nd).vote, nd->id);
    others_serve();
    cluster_fini(&cl);
}

/* A set_term window beyond the jump bound is not a window: refused. */
Test(meta, crash_window_beyond_the_jump_refused)
{
    int l;
    unsigned f;
    char errmsg[TERN_ERRMSG_SIZE] = "";
    uint64_t last;
    cluster_init(&cl, 3);
    cl.meta = true;
    cl.max_term_jump = 10;
    l = cluster_elect(&cl);
    cluster_propose_applied(&cl, (unsigned)l, 1, 64, 1, &last);
    f = (unsigned)cluster_other(&cl, l, l);
    cluster_crash(&cl, f);
    cl.nodes[f].disk.term += 11;
    cl.nodes[f].disk.vote = 0;
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    cl.nodes[f].disk.term -= 1; /* + 10: within */
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), 0, "%s", errmsg);
    cluster_fini(&cl);
}

/* raft_uv's files lost (pristine again, the node re-bootstraps at term
 * 1) under an existing record: refused at load. */
Test(meta, raft_state_wiped_under_the_record_refused)
{
    int l = meta_cluster();
    unsigned f = (unsigned)cluster_other(&cl, l, l);
    char errmsg[TERN_ERRMSG_SIZE] = "";
    cluster_crash(&cl, f);
    cr_assert_geq(cl.nodes[f].disk.term, 2);
    fake_disk_close(&cl.nodes[f].disk);
    fake_disk_init(&cl.nodes[f].disk);
    cr_expect_eq(cluster_try_start(&cl, f, errmsg), TERN_ECORRUPT);
    cr_expect_not_null(strstr(errmsg, "raft_uv metadata term 1 vote 0"), "%s",
                       errmsg);
    others_serve();
    cluster_fini(&cl);
}

/* ---- refused messages ---------------------------------------------------- */

/* Encode m as sent by from, with frame flags (REPL_FRAME_*), and hand the
 * frame to nd's receive path. */
static void inject_flags(struct cnode *nd,
                         uint64_t from,
                         const struct raft_message *m,
                         unsigned flags)
{
    struct repl_frame f;
    unsigned n_sent = 0;
    uint8_t *buf;
    size_t off = 0;
    cr_assert_eq(repl_codec_encode(from, "127.0.0.1:9999", flags, m, 1 << 20,
                                   &f, &n_sent),
                 0);
    buf = malloc(f.len);
    cr_assert_not_null(buf);
    for (unsigned k = 0; k < f.n_iov; k++) {
        memcpy(buf + off, f.iov[k].base, f.iov[k].len);
        off += f.iov[k].len;
    }
    cr_assert_eq(off, f.len);
    repl_xport_recv(nd->repl, from, buf, f.len);
    repl_frame_release(&f);
    free(buf);
}

/* The same with the flags of a release that knows only XXH32 frames. */
static void inject(struct cnode *nd,
                   uint64_t from,
                   const struct raft_message *m)
{
    inject_flags(nd, from, m, 0);
}

static void vote_request(struct raft_message *m, uint64_t from, uint64_t term)
{
    memset(m, 0, sizeof *m);
    m->type = RAFT_IO_REQUEST_VOTE;
    m->server_id = from;
    m->server_address = "127.0.0.1:9999";
    m->request_vote.term = term;
    m->request_vote.candidate_id = from;
    m->request_vote.last_log_index = 1000;
    m->request_vote.last_log_term = term;
    m->request_vote.disrupt_leader = true;
}

/* arg: uint64_t term: a writable leader of a later term exists. */
static bool pred_leader_above(struct cluster *c, void *arg)
{
    int l = cluster_writable_leader(c);
    return l >= 0 && c->nodes[l].term > *(uint64_t *)arg;
}

Test(meta, absurd_terms_refused_counted_elections_go_on)
{
    struct raft_message m;
    uint64_t last, t, min_term;
    int l, l2;
    unsigned f;
    struct repl_status st;

    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    f = (unsigned)cluster_other(&cl, l, l);
    t = status_of(&cl.nodes[f]).term;
    /* The forged vote of the probe: 2^64 - 1. */
    vote_request(&m, cl.nodes[l].id, UINT64_MAX);
    inject(&cl.nodes[f], cl.nodes[l].id, &m);
    /* At the bound, and beyond the jump. */
    vote_request(&m, cl.nodes[l].id, REPL_TERM_MAX);
    inject(&cl.nodes[f], cl.nodes[l].id, &m);
    vote_request(&m, cl.nodes[l].id, t + REPL_DEFAULT_MAX_TERM_JUMP + 1);
    inject(&cl.nodes[f], cl.nodes[l].id, &m);
    /* A last log term above the message's own term. */
    vote_request(&m, cl.nodes[l].id, t + 1);
    m.request_vote.last_log_term = t + 2;
    inject(&cl.nodes[f], cl.nodes[l].id, &m);
    /* An AppendEntries carrying an entry of a later term than its own. */
    {
        struct raft_entry e = {0};
        uint8_t payload[8] = {0};
        memset(&m, 0, sizeof m);
        m.type = RAFT_IO_APPEND_ENTRIES;
        m.server_id = cl.nodes[l].id;
        m.server_address = "127.0.0.1:9999";
        m.append_entries.term = t;
        m.append_entries.prev_log_index = 1;
        m.append_entries.prev_log_term = 1;
        e.term = UINT64_MAX;
        e.type = RAFT_COMMAND;
        e.buf.base = payload;
        e.buf.len = sizeof payload;
        m.append_entries.entries = &e;
        m.append_entries.n_entries = 1;
        inject(&cl.nodes[f], cl.nodes[l].id, &m);
    }
    st = status_of(&cl.nodes[f]);
    cr_expect_eq(st.terms_refused, 5);
    cr_expect_eq(st.refused_term, t);
    cr_expect_eq(st.refused_from, cl.nodes[l].id);
    cr_expect_eq(st.term, t, "the node's term did not move");
    cr_expect_eq(st.failed, 0);

    /* Within the bound: delivered (the node adopts the higher term). */
    vote_request(&m, cl.nodes[l].id, t + 5);
    m.request_vote.last_log_index = 0;
    m.request_vote.last_log_term = 0;
    inject(&cl.nodes[f], cl.nodes[l].id, &m);
    cr_expect_eq(status_of(&cl.nodes[f]).term, t + 5);
    cr_expect_eq(status_of(&cl.nodes[f]).terms_refused, 5);

    /* Elections and writes still work (the old leader steps down when
     * it meets the higher term; wait for a leader of a later term). */
    min_term = t + 5;
    cr_assert(cluster_step_until(&cl, pred_leader_above, &min_term, STEPS));
    l2 = cluster_writable_leader(&cl);
    cluster_propose_applied(&cl, (unsigned)l2, 3, 64, 1, &last);
    cluster_crash(&cl, (unsigned)l2);
    cr_assert(cluster_step_until(&cl, pred_writable_leader, NULL, STEPS));
    l = cluster_writable_leader(&cl);
    cr_expect_neq(l, l2);
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 2, &last);
    cr_expect_lt(status_of(&cl.nodes[l]).term, t + 100);
    cluster_fini(&cl);
}

Test(meta, unknown_senders_dropped_and_counted)
{
    struct raft_message m;
    struct repl_status st;
    uint64_t t;
    int l;
    unsigned f;

    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    f = (unsigned)cluster_other(&cl, l, l);
    t = status_of(&cl.nodes[f]).term;
    vote_request(&m, 9, t + 1);
    inject(&cl.nodes[f], 9, &m);
    vote_request(&m, cl.nodes[f].id, t + 1); /* our own id */
    inject(&cl.nodes[f], cl.nodes[f].id, &m);
    st = status_of(&cl.nodes[f]);
    cr_expect_eq(st.unknown_senders, 2);
    cr_expect_eq(st.unknown_from, cl.nodes[f].id);
    cr_expect_eq(st.terms_refused, 0);
    cr_expect_eq(st.term, t);
    cr_expect_eq(st.role, REPL_FOLLOWER);
    cluster_fini(&cl);
}

/* Our own term never reaches the bound: set_term fail-stops instead. */
Test(meta, own_term_never_passes_the_bound)
{
    struct raft_io *io;
    struct repl_status st;
    int l;
    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    io = &cl.nodes[l].repl->io.outer;
    cr_expect_neq(io->set_term(io, REPL_TERM_MAX), 0);
    st = status_of(&cl.nodes[l]);
    cr_expect(st.term_exhausted);
    cr_expect_eq(st.failed, TERN_ELIMIT);
    cr_expect_lt(cl.nodes[l].disk.term, REPL_TERM_MAX, "inner not written");
    cr_expect_not_null(strstr(io->errmsg, "term bound"), "%s", io->errmsg);
    cluster_fini(&cl);
}

/* ---- frame checksums (io.c, "Frame checksums") --------------------------- */

/* Nodes of one release learn from each other's frames that XXH3 frames
 * are understood; a frame without REPL_FRAME_ACCEPTS_XXH3 (an older
 * release) takes it back at once, the peer's next frame of its own gives
 * it again, and a sender outside the configuration teaches nothing. The
 * cluster commits throughout, on XXH3 frames. */
Test(meta, frame_checksum_follows_what_the_peer_decodes)
{
    struct raft_message m;
    uint64_t t, last;
    struct repl *fr;
    int l;
    unsigned f;

    cluster_init(&cl, 3);
    l = cluster_elect(&cl);
    f = (unsigned)cluster_other(&cl, l, l);
    fr = cl.nodes[f].repl;
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 2, &last);
    cr_expect(repl_peer_xxh3(fr, cl.nodes[l].id));
    cr_expect(repl_peer_xxh3(cl.nodes[l].repl, cl.nodes[f].id));
    cr_expect_eq(repl_frame_flags(fr, cl.nodes[l].id),
                 REPL_FRAME_ACCEPTS_XXH3 | REPL_FRAME_XXH3);

    /* A stale vote request (raft ignores it), as an older release sends
     * it (no flags): the sender is known, so what it decodes is taken
     * from it. */
    t = status_of(&cl.nodes[f]).term;
    t = t > 1 ? t - 1 : t;
    vote_request(&m, cl.nodes[l].id, t);
    inject(&cl.nodes[f], cl.nodes[l].id, &m);
    cr_expect_not(repl_peer_xxh3(fr, cl.nodes[l].id));
    cr_expect_eq(repl_frame_flags(fr, cl.nodes[l].id), REPL_FRAME_ACCEPTS_XXH3);

    /* The leader's next heartbeat carries the flag again. */
    cluster_propose_applied(&cl, (unsigned)l, 3, 64, 2, &last);
    cr_expect(repl_peer_xxh3(fr, cl.nodes[l].id));

    /* Outside the configuration: dropped before anything is learned. */
    vote_request(&m, 99, t);
    inject_flags(&cl.nodes[f], 99, &m, REPL_FRAME_ACCEPTS_XXH3);
    cr_expect_not(repl_peer_xxh3(fr, 99));
    others_serve();
    cluster_fini(&cl);
}
