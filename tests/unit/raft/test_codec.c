/*
 * tests/unit/raft/test_codec.c: round trip of every frame type through
 * raft/codec.c, rejection of truncated and corrupt input, configuration
 * validation.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "repl_int.h"

/* Flatten an encoded frame into one buffer (what an xport delivers). */
static uint8_t *flatten(const struct repl_frame *f, size_t *len)
{
    uint8_t *b = tern_malloc(f->len);
    size_t off = 0;
    cr_assert_not_null(b);
    for (unsigned i = 0; i < f->n_iov; i++) {
        if (f->iov[i].len > 0) {
            memcpy(b + off, f->iov[i].base, f->iov[i].len);
        }
        off += f->iov[i].len;
    }
    cr_assert_eq(off, f->len);
    *len = off;
    return b;
}

static uint8_t *encode(const struct raft_message *m, size_t *len)
{
    struct repl_frame f;
    unsigned n_sent;
    uint8_t *b;
    cr_assert_eq(
        repl_codec_encode(7, "10.0.0.7:9000", 0, m, 1 << 20, &f, &n_sent), 0);
    b = flatten(&f, len);
    repl_frame_release(&f);
    return b;
}

static void roundtrip(const struct raft_message *m, struct repl_wire *w)
{
    size_t len;
    uint8_t *b = encode(m, &len);
    cr_assert_eq(repl_codec_decode(b, len, w), 0);
    cr_expect_eq(w->type, m->type);
    cr_expect_eq(w->sender_id, 7);
    cr_expect_str_eq(w->msg.server_address, "10.0.0.7:9000");
    cr_expect_eq(w->msg.server_id, 7);
    /* Every strict prefix is rejected without allocating. */
    for (size_t k = 0; k < len; k++) {
        struct repl_wire t;
        cr_expect_neq(repl_codec_decode(b, k, &t), 0, "prefix %zu", k);
    }
    /* Every single-bit flip is rejected (checksum or structure). */
    for (size_t k = 0; k < len; k++) {
        struct repl_wire t;
        b[k] ^= 0x10;
        cr_expect_neq(repl_codec_decode(b, len, &t), 0, "flip at %zu", k);
        b[k] ^= 0x10;
    }
    tern_free(b);
}

TestSuite(codec);

Test(codec, append_entries)
{
    struct raft_message m = {0};
    struct raft_entry e[3];
    struct repl_wire w;
    char p0[] = "hello", p2[] = "world!";
    m.type = RAFT_IO_APPEND_ENTRIES;
    m.server_id = 2;
    m.server_address = "b";
    m.append_entries.term = 5;
    m.append_entries.prev_log_index = 10;
    m.append_entries.prev_log_term = 4;
    m.append_entries.leader_commit = 9;
    e[0] = (struct raft_entry){5, RAFT_COMMAND, {p0, 5}, NULL};
    e[1] = (struct raft_entry){5, RAFT_BARRIER, {NULL, 0}, NULL};
    e[2] = (struct raft_entry){5, RAFT_COMMAND, {p2, 6}, NULL};
    m.append_entries.entries = e;
    m.append_entries.n_entries = 3;
    roundtrip(&m, &w);
    cr_expect_eq(w.msg.append_entries.term, 5);
    cr_expect_eq(w.msg.append_entries.prev_log_index, 10);
    cr_expect_eq(w.msg.append_entries.prev_log_term, 4);
    cr_expect_eq(w.msg.append_entries.leader_commit, 9);
    cr_assert_eq(w.msg.append_entries.n_entries, 3);
    for (unsigned i = 0; i < 3; i++) {
        const struct raft_entry *d = &w.msg.append_entries.entries[i];
        cr_expect_eq(d->term, 5);
        cr_expect_eq(d->type, e[i].type);
        cr_expect_eq(d->buf.len, e[i].buf.len);
        cr_expect_eq(d->batch, w.msg.append_entries.entries[0].batch,
                     "one batch per message");
        if (d->buf.len > 0) {
            cr_expect(memcmp(d->buf.base, e[i].buf.base, d->buf.len) == 0);
        }
    }
    repl_wire_release(&w);
}

Test(codec, heartbeat_and_prefix_split)
{
    struct raft_message m = {0};
    struct raft_entry e[4];
    struct repl_wire w;
    static char big[1000];
    struct repl_frame f;
    unsigned n_sent = 99;
    m.type = RAFT_IO_APPEND_ENTRIES;
    m.append_entries.term = 1;
    roundtrip(&m, &w);
    cr_expect_eq(w.msg.append_entries.n_entries, 0);
    cr_expect_null(w.msg.append_entries.entries);
    repl_wire_release(&w);

    for (unsigned i = 0; i < 4; i++) {
        e[i] = (struct raft_entry){1, RAFT_COMMAND, {big, sizeof big}, NULL};
    }
    m.append_entries.entries = e;
    m.append_entries.n_entries = 4;
    /* Room for two entries only: a prefix goes out. */
    cr_assert_eq(repl_codec_encode(1, "a", 0, &m, 2200, &f, &n_sent), 0);
    cr_expect_eq(n_sent, 2);
    repl_frame_release(&f);
    /* Not even one entry fits. */
    cr_expect_eq(repl_codec_encode(1, "a", 0, &m, 500, &f, &n_sent),
                 TERN_ETOOBIG);
}

Test(codec, results_votes_timeout_now)
{
    struct raft_message m = {0};
    struct repl_wire w;

    m.type = RAFT_IO_APPEND_ENTRIES_RESULT;
    m.append_entries_result.term = 3;
    m.append_entries_result.rejected = 8;
    m.append_entries_result.last_log_index = 6;
    roundtrip(&m, &w);
    cr_expect_eq(w.msg.append_entries_result.term, 3);
    cr_expect_eq(w.msg.append_entries_result.rejected, 8);
    cr_expect_eq(w.msg.append_entries_result.last_log_index, 6);

    memset(&m, 0, sizeof m);
    m.type = RAFT_IO_REQUEST_VOTE;
    m.request_vote.term = 4;
    m.request_vote.candidate_id = 9;
    m.request_vote.last_log_index = 100;
    m.request_vote.last_log_term = 3;
    m.request_vote.disrupt_leader = true;
    m.request_vote.pre_vote = true;
    roundtrip(&m, &w);
    cr_expect_eq(w.msg.request_vote.term, 4);
    cr_expect_eq(w.msg.request_vote.candidate_id, 9);
    cr_expect_eq(w.msg.request_vote.last_log_index, 100);
    cr_expect_eq(w.msg.request_vote.last_log_term, 3);
    cr_expect(w.msg.request_vote.disrupt_leader);
    cr_expect(w.msg.request_vote.pre_vote);

    memset(&m, 0, sizeof m);
    m.type = RAFT_IO_REQUEST_VOTE_RESULT;
    m.request_vote_result.term = 4;
    m.request_vote_result.vote_granted = true;
    m.request_vote_result.pre_vote = raft_tribool_true;
    roundtrip(&m, &w);
    cr_expect_eq(w.msg.request_vote_result.term, 4);
    cr_expect(w.msg.request_vote_result.vote_granted);
    cr_expect_eq(w.msg.request_vote_result.pre_vote, raft_tribool_true);

    memset(&m, 0, sizeof m);
    m.type = RAFT_IO_TIMEOUT_NOW;
    m.timeout_now.term = 12;
    m.timeout_now.last_log_index = 77;
    m.timeout_now.last_log_term = 11;
    roundtrip(&m, &w);
    cr_expect_eq(w.msg.timeout_now.term, 12);
    cr_expect_eq(w.msg.timeout_now.last_log_index, 77);
    cr_expect_eq(w.msg.timeout_now.last_log_term, 11);
}

Test(codec, install_snapshot_with_configuration)
{
    struct raft_message m = {0};
    struct repl_wire w;
    char data[] = "manifest-bytes";
    m.type = RAFT_IO_INSTALL_SNAPSHOT;
    m.install_snapshot.term = 6;
    m.install_snapshot.last_index = 1000;
    m.install_snapshot.last_term = 5;
    m.install_snapshot.conf_index = 900;
    raft_configuration_init(&m.install_snapshot.conf);
    cr_assert_eq(raft_configuration_add(&m.install_snapshot.conf, 1,
                                        "127.0.0.1:1", RAFT_VOTER),
                 0);
    cr_assert_eq(raft_configuration_add(&m.install_snapshot.conf, 2,
                                        "127.0.0.1:2", RAFT_STANDBY),
                 0);
    cr_assert_eq(raft_configuration_add(&m.install_snapshot.conf, 3,
                                        "127.0.0.1:3", RAFT_SPARE),
                 0);
    m.install_snapshot.data.base = data;
    m.install_snapshot.data.len = sizeof data;
    roundtrip(&m, &w);
    raft_configuration_close(&m.install_snapshot.conf);
    cr_expect_eq(w.msg.install_snapshot.term, 6);
    cr_expect_eq(w.msg.install_snapshot.last_index, 1000);
    cr_expect_eq(w.msg.install_snapshot.last_term, 5);
    cr_expect_eq(w.msg.install_snapshot.conf_index, 900);
    cr_assert_eq(w.msg.install_snapshot.conf.n, 3);
    cr_expect_eq(w.msg.install_snapshot.conf.servers[1].id, 2);
    cr_expect_str_eq(w.msg.install_snapshot.conf.servers[1].address,
                     "127.0.0.1:2");
    cr_expect_eq(w.msg.install_snapshot.conf.servers[1].role, RAFT_STANDBY);
    cr_expect_eq(w.msg.install_snapshot.conf.servers[2].role, RAFT_SPARE);
    cr_assert_eq(w.msg.install_snapshot.data.len, sizeof data);
    cr_expect(memcmp(w.msg.install_snapshot.data.base, data, sizeof data) == 0);
    repl_wire_release(&w);
}

Test(codec, bulk_frames)
{
    struct repl_bulk_msg b = {0};
    struct repl_frame f;
    struct repl_wire w;
    uint8_t payload[300];
    uint8_t *flat;
    size_t len;
    memset(payload, 0xab, sizeof payload);

    b.snap_index = 44;
    b.pos = 1 << 20;
    b.len = 4096;
    cr_assert_eq(repl_codec_encode_bulk(3, "c", 0, REPL_WIRE_BULK_REQ, &b, &f),
                 0);
    flat = flatten(&f, &len);
    repl_frame_release(&f);
    cr_assert_eq(repl_codec_decode(flat, len, &w), 0);
    cr_expect_eq(w.type, REPL_WIRE_BULK_REQ);
    cr_expect_eq(w.bulk.snap_index, 44);
    cr_expect_eq(w.bulk.pos, 1 << 20);
    cr_expect_eq(w.bulk.len, 4096);
    tern_free(flat);

    b.len = sizeof payload;
    b.data = payload;
    b.status = REPL_BULK_STATUS_OK;
    cr_assert_eq(repl_codec_encode_bulk(3, "c", 0, REPL_WIRE_BULK_DATA, &b, &f),
                 0);
    flat = flatten(&f, &len);
    repl_frame_release(&f);
    cr_assert_eq(repl_codec_decode(flat, len, &w), 0);
    cr_expect_eq(w.type, REPL_WIRE_BULK_DATA);
    cr_expect_eq(w.bulk.len, sizeof payload);
    cr_expect(memcmp(w.bulk.data, payload, sizeof payload) == 0);
    tern_free(flat);
}

Test(codec, garbage_rejected)
{
    uint8_t junk[64];
    struct repl_wire w;
    memset(junk, 0, sizeof junk);
    cr_expect_eq(repl_codec_decode(junk, sizeof junk, &w), TERN_EMALFORMED);
    cr_expect_neq(repl_codec_decode(junk, 0, &w), 0);
}

Test(codec, oom_during_decode_leaks_nothing)
{
    struct raft_message m = {0};
    struct raft_entry e = {2, RAFT_COMMAND, {"abc", 3}, NULL};
    struct repl_wire w;
    size_t len;
    uint8_t *b;
    m.type = RAFT_IO_APPEND_ENTRIES;
    m.append_entries.entries = &e;
    m.append_entries.n_entries = 1;
    b = encode(&m, &len);
    /* libraft's heap is raft's default here unless repl_new ran; either
     * way a failure must leave nothing allocated (ASan checks leaks). */
    for (long k = 0; k < 4; k++) {
        tern_alloc_fail_after(k);
        int rv = repl_codec_decode(b, len, &w);
        tern_alloc_fail_after(-1);
        if (rv == 0) {
            repl_wire_release(&w);
        }
    }
    tern_free(b);
}

Test(codec, config_validate)
{
    struct repl_peer peers[3] = {
        {1, "127.0.0.1:1"}, {2, "127.0.0.1:2"}, {3, "127.0.0.1:3"}};
    struct repl_config c = {0};
    char errmsg[TERN_ERRMSG_SIZE];
    c.id = 2;
    c.address = "127.0.0.1:2";
    c.peers = peers;
    c.n_peers = 3;
    cr_assert_eq(repl_config_validate(&c, errmsg), 0, "%s", errmsg);
    cr_expect_eq(c.election_timeout_ms, 150);
    cr_expect_eq(c.heartbeat_ms, 15);
    cr_expect_eq(c.snapshot_threshold_bytes, (uint64_t)64 << 20);
    cr_expect_eq(c.snapshot_trailing, 256);

    c.heartbeat_ms = 150;
    cr_expect_eq(repl_config_validate(&c, errmsg), TERN_EINVAL);
    c.heartbeat_ms = 60; /* ET < 3 x HB */
    cr_expect_eq(repl_config_validate(&c, errmsg), TERN_EINVAL);
    c.heartbeat_ms = 15;
    c.id = 4; /* not among peers */
    cr_expect_eq(repl_config_validate(&c, errmsg), TERN_EINVAL);
    c.id = 2;
    peers[2].id = 1; /* duplicate */
    cr_expect_eq(repl_config_validate(&c, errmsg), TERN_EINVAL);
    peers[2].id = 3;
    peers[2].address = "";
    cr_expect_eq(repl_config_validate(&c, errmsg), TERN_EINVAL);
    peers[2].address = "127.0.0.1:3";
    c.address = "127.0.0.1:9"; /* differs from own peer entry */
    cr_expect_eq(repl_config_validate(&c, errmsg), TERN_EINVAL);
    c.address = "127.0.0.1:2";
    cr_expect_eq(repl_config_validate(&c, errmsg), 0);
}

Test(codec, error_translation)
{
    cr_expect_eq(repl_err_from_raft(0), 0);
    cr_expect_eq(repl_err_from_raft(RAFT_NOTLEADER), TERN_ENOTLEADER);
    cr_expect_eq(repl_err_from_raft(RAFT_LEADERSHIPLOST), TERN_ELEADERSHIPLOST);
    cr_expect_eq(repl_err_from_raft(RAFT_SHUTDOWN), TERN_ESHUTDOWN);
    cr_expect_eq(repl_err_from_raft(RAFT_CANCELED), TERN_ESHUTDOWN);
    cr_expect_eq(repl_err_from_raft(RAFT_NOSPACE), TERN_EFULL);
    cr_expect_eq(repl_err_from_raft(RAFT_IOERR), -EIO);
    cr_expect_eq(repl_err_from_raft(RAFT_NOMEM), -ENOMEM);
}

/* An AppendEntries encoded with XXH3 as its checksum (REPL_FRAME_XXH3)
 * decodes with the flags it was sent with, and is refused as corrupt
 * when a payload byte changes or when the flag is cleared (the checksum
 * is then taken as XXH32's). A frame of either kind with flag bits this
 * release does not know still decodes. */
Test(codec, xxh3_frames)
{
    uint8_t payload[300];
    struct raft_entry e = {0};
    struct raft_message m;
    struct repl_frame f;
    struct repl_wire w;
    unsigned n_sent;
    uint8_t *flat;
    size_t len;
    uint16_t flags;

    for (size_t i = 0; i < sizeof payload; i++) {
        payload[i] = (uint8_t)(i * 7);
    }
    e.term = 3;
    e.type = RAFT_COMMAND;
    e.buf.base = payload;
    e.buf.len = sizeof payload;
    memset(&m, 0, sizeof m);
    m.type = RAFT_IO_APPEND_ENTRIES;
    m.append_entries.term = 3;
    m.append_entries.prev_log_index = 9;
    m.append_entries.prev_log_term = 2;
    m.append_entries.leader_commit = 9;
    m.append_entries.entries = &e;
    m.append_entries.n_entries = 1;

    cr_assert_eq(
        repl_codec_encode(4, "b", REPL_FRAME_XXH3 | REPL_FRAME_ACCEPTS_XXH3, &m,
                          1 << 20, &f, &n_sent),
        0);
    flat = flatten(&f, &len);
    repl_frame_release(&f);
    cr_assert_eq(repl_codec_decode(flat, len, &w), 0);
    cr_expect_eq(w.flags, REPL_FRAME_XXH3 | REPL_FRAME_ACCEPTS_XXH3);
    cr_expect_eq(w.msg.append_entries.n_entries, 1);
    cr_expect_eq(memcmp(w.msg.append_entries.entries[0].buf.base, payload,
                        sizeof payload),
                 0);
    repl_wire_release(&w);

    flat[len - 5] ^= 0x10; /* a payload byte */
    cr_expect_eq(repl_codec_decode(flat, len, &w), TERN_ECORRUPT);
    flat[len - 5] ^= 0x10;
    flags = tern_get_u16(flat + 6);
    tern_put_u16(flat + 6, (uint16_t)(flags & ~REPL_FRAME_XXH3));
    cr_expect_eq(repl_codec_decode(flat, len, &w), TERN_ECORRUPT);
    free(flat);

    /* Unknown bits, XXH3 and XXH32. */
    for (unsigned x3 = 0; x3 < 2; x3++) {
        cr_assert_eq(
            repl_codec_encode(4, "b", 0x8000u | (x3 ? REPL_FRAME_XXH3 : 0u), &m,
                              1 << 20, &f, &n_sent),
            0);
        flat = flatten(&f, &len);
        repl_frame_release(&f);
        cr_expect_eq(repl_codec_decode(flat, len, &w), 0, "xxh3 %u", x3);
        cr_expect_eq(w.flags, 0x8000u | (x3 ? REPL_FRAME_XXH3 : 0u));
        repl_wire_release(&w);
        free(flat);
    }
}
