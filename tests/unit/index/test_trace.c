/* Unit tests of message trace in index/: the TERM command (cmd.c: builder,
 * validator, 13 bytes), the group value with the committing entry's time
 * and index (keys.c, both versions), and idx_message_trace (read.c):
 * producer, seq and position in the batch, raft index and term, key and
 * tag, the groups past the message, trimmed and missing offsets, and the
 * same answer after a rebuild from the log. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

static void reseal(uint8_t *b, size_t len)
{
    struct tern_checksum_state st;
    tern_put_u32(b + 16, (uint32_t)len);
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, b, 20);
    tern_checksum32_update(&st, b + 24, len - 24);
    tern_put_u32(b + 20, tern_checksum32_end(&st));
}

Test(index_trace_cmd, term_round_trip)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_term(&w, 0x0102030405060708ull);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_expect_eq(w.len, IDX__CMD_HDR_SIZE + 13, "TERM costs 13 bytes");
    cr_assert_eq(idx_cmd_validate(w.base, w.len), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect_eq(c.type, IDX_CMD_TERM);
    cr_expect_eq(c.term, 0x0102030405060708ull);
    cr_expect_eq(idx__entry_next(&it, &c), 0);
    tern_wbuf_free(&w);
}

Test(index_trace_cmd, term_zero_and_bad_bodies_refused)
{
    struct tern_wbuf w;
    uint8_t raw[64];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_term(&w, 0);
    cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL, "the builder refuses term 0");
    tern_wbuf_free(&w);

    /* Hand-made bodies: term 0, 7 bytes, 9 bytes. */
    static const uint32_t body_len[3] = {8, 7, 9};
    for (int k = 0; k < 3; k++) {
        memset(raw, 0, sizeof raw);
        tern_put_u16(raw, 1);
        tern_put_u32(raw + 4, 1);
        raw[24] = IDX_CMD_TERM;
        tern_put_u32(raw + 25, body_len[k]);
        if (k > 0) {
            raw[29] = 3; /* a term that is not 0 */
        }
        size_t len = 29 + body_len[k];
        reseal(raw, len);
        cr_expect_eq(idx_cmd_validate(raw, len), TERN_EMALFORMED, "case %d", k);
    }
    /* The same frame with a good body passes. */
    memset(raw, 0, sizeof raw);
    tern_put_u16(raw, 1);
    tern_put_u32(raw + 4, 1);
    raw[24] = IDX_CMD_TERM;
    tern_put_u32(raw + 25, 8);
    raw[29] = 3;
    reseal(raw, 37);
    cr_expect_eq(idx_cmd_validate(raw, 37), 0);
}

Test(index_trace_cmd, group_value_versions)
{
    uint8_t b[IDX__GROUP_VAL_SIZE];
    struct idx__group_val g = {
        .next_offset = 17, .commit_ms = 1700000000000ull, .commit_index = 42};
    struct idx__group_val d;
    idx__group_val_encode(b, &g);
    cr_assert_eq(idx__group_val_decode(b, sizeof b, &d), 0);
    cr_expect_eq(d.next_offset, 17);
    cr_expect_eq(d.commit_ms, 1700000000000ull);
    cr_expect_eq(d.commit_index, 42);
    /* version 1: the offset alone, commit unknown */
    uint8_t old[8];
    tern_put_u64(old, 9);
    cr_assert_eq(idx__group_val_decode(old, sizeof old, &d), 0);
    cr_expect_eq(d.next_offset, 9);
    cr_expect_eq(d.commit_ms, 0);
    cr_expect_eq(d.commit_index, 0);
    /* unknown version, reserved bits, other lengths */
    tern_put_u32(b + 8, 3);
    cr_expect_eq(idx__group_val_decode(b, sizeof b, &d), TERN_ECORRUPT);
    tern_put_u32(b + 8, 2);
    tern_put_u32(b + 12, 1);
    cr_expect_eq(idx__group_val_decode(b, sizeof b, &d), TERN_ECORRUPT);
    tern_put_u32(b + 12, 0);
    cr_expect_eq(idx__group_val_decode(b, 16, &d), TERN_ECORRUPT);
    cr_expect_eq(idx__group_val_decode(b, 31, &d), TERN_ECORRUPT);
}

TestSuite(index_trace, .init = th_dirs_init, .fini = th_dirs_fini);

/* Groups seen by the trace callback. */
struct seen
{
    unsigned n;
    char name[8][TERN_NAME_MAX + 1];
    struct idx_trace_group g[8];
    unsigned stop_after; /* 0: never */
};

static int group_cb(void *arg, const struct idx_trace_group *g)
{
    struct seen *s = arg;
    cr_assert_lt(s->n, 8);
    (void)snprintf(s->name[s->n], sizeof s->name[s->n], "%s", g->name);
    s->g[s->n] = *g;
    s->n++;
    return s->stop_after != 0 && s->n >= s->stop_after;
}

static void group_commit(struct idx_env *e,
                         uint64_t index,
                         uint64_t ts,
                         const char *group,
                         uint64_t next)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, ts);
    idx_cmd_group_commit(&w, "q", group, next);
    cr_assert_eq(th_apply(e, index, &w, r, 1), 1);
    cr_assert_eq(r[0].status, 0, "%s", tern_strerror(r[0].status));
    tern_wbuf_free(&w);
}

/* Queue "q" (index 1) and "other" (index 2); entry 5 stamped 5000 with
 * TERM 7, a produce of "other", then two produces of "q": pid 0x300000001
 * seq 1 (3 messages, the second with key "k-1" and tag "red") and seq 2
 * (2 messages). "q" offsets: 0..2 from seq 1, 3..4 from seq 2. Entry 6
 * (no TERM) stamped 1006 (append time 5000): one message at offset 5. */
static void populate(struct idx_env *e)
{
    struct tern_wbuf w, pb;
    struct idx_result r[4];
    struct idx_msg other[2] = {{"o0", 2}, {"o1", 2}};
    struct idx_props p = {
        .key = "k-1", .key_len = 3, .tag = "red", .tag_len = 3};
    th_create(e, 1, "q");
    th_create(e, 2, "other");
    tern_wbuf_init(&pb);
    idx_props_encode(&pb, &p);
    cr_assert_eq(pb.err, 0);
    struct idx_pmsg a[3] = {{"a0", 2, NULL, 0},
                            {"a1-long", 7, pb.base, (uint32_t)pb.len},
                            {"a2", 2, NULL, 0}};
    struct idx_msg b[2] = {{"b0", 2}, {"b1", 2}};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5000);
    idx_cmd_term(&w, 7);
    idx_cmd_produce(&w, "other", 0, 0, other, 2);
    idx_cmd_produce_props(&w, "q", 0x300000001ull, 1, a, 3);
    idx_cmd_produce(&w, "q", 0x300000001ull, 2, b, 2);
    cr_assert_eq(th_apply(e, 5, &w, r, 4), 4);
    cr_expect_eq(r[0].status, 0, "TERM applies as nothing");
    cr_expect_eq(r[1].count, 2);
    cr_expect_eq(r[2].count, 3, "%s", tern_strerror(r[2].status));
    cr_expect_eq(r[3].count, 2);
    cr_expect_eq(r[3].base_offset, 3);
    tern_wbuf_free(&w);
    tern_wbuf_free(&pb);
    struct idx_result one = th_produce(e, 6, "q", 0, 0, 1);
    cr_expect_eq(one.base_offset, 5);
    cr_assert_eq(idx_flush(e), 0);
}

static void expect_entry5(const struct idx_trace *t,
                          uint64_t offset,
                          uint64_t seq,
                          uint32_t pos,
                          uint32_t count)
{
    cr_expect_eq(t->offset, offset);
    cr_expect_eq(t->raft_index, 5);
    cr_expect_eq(t->term, 7);
    cr_expect_eq(t->append_ms, 5000);
    cr_expect_eq(t->producer_id, 0x300000001ull);
    cr_expect_eq(t->seq, seq);
    cr_expect_eq(t->batch_pos, pos, "offset %llu at %u",
                 (unsigned long long)offset, t->batch_pos);
    cr_expect_eq(t->batch_count, count);
}

Test(index_trace, produced_and_committed)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_trace t;
    struct idx_queue_info qi;
    populate(e);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);

    cr_assert_eq(idx_message_trace(e, "q", 1, &t, NULL, NULL), 0, "%s",
                 idx_errmsg(e));
    expect_entry5(&t, 1, 1, 1, 3);
    cr_expect_eq(t.queue_id, qi.id);
    cr_expect_eq(t.len, 7);
    cr_expect_eq(t.key_len, 3);
    cr_expect_eq(memcmp(t.key, "k-1", 3), 0);
    cr_expect_eq(t.tag_len, 3);
    cr_expect_eq(memcmp(t.tag, "red", 3), 0);

    cr_assert_eq(idx_message_trace(e, "q", 0, &t, NULL, NULL), 0);
    expect_entry5(&t, 0, 1, 0, 3);
    cr_expect_eq(t.key_len, 0);
    cr_expect_eq(t.tag_len, 0);
    cr_assert_eq(idx_message_trace(e, "q", 2, &t, NULL, NULL), 0);
    expect_entry5(&t, 2, 1, 2, 3);
    cr_assert_eq(idx_message_trace(e, "q", 3, &t, NULL, NULL), 0);
    expect_entry5(&t, 3, 2, 0, 2);
    cr_assert_eq(idx_message_trace(e, "q", 4, &t, NULL, NULL), 0);
    expect_entry5(&t, 4, 2, 1, 2);
    cr_expect_eq(t.len, 2);

    /* An entry without TERM: the term is unknown. */
    cr_assert_eq(idx_message_trace(e, "q", 5, &t, NULL, NULL), 0);
    cr_expect_eq(t.raft_index, 6);
    cr_expect_eq(t.term, 0);
    cr_expect_eq(t.producer_id, 0);
    cr_expect_eq(t.seq, 0);
    cr_expect_eq(t.batch_pos, 0);
    cr_expect_eq(t.batch_count, 1);
    cr_expect_eq(t.append_ms, 5000, "append times never go back");

    /* The other queue's messages of the same entry. */
    cr_assert_eq(idx_message_trace(e, "other", 1, &t, NULL, NULL), 0);
    cr_expect_eq(t.raft_index, 5);
    cr_expect_eq(t.term, 7);
    cr_expect_eq(t.batch_pos, 1);
    cr_expect_eq(t.batch_count, 2);
    idx_close(e);
}

Test(index_trace, groups_past_the_message)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_trace t;
    struct seen s;
    populate(e);
    group_commit(e, 7, 7000, "g-at", 1);   /* not past offset 1 */
    group_commit(e, 8, 8000, "g-past", 2); /* past */
    group_commit(e, 9, 9000, "g-all", 5);
    group_commit(e, 10, 10000, "g-all", 6); /* the latest commit counts */
    cr_assert_eq(idx_flush(e), 0);

    memset(&s, 0, sizeof s);
    cr_assert_eq(idx_message_trace(e, "q", 1, &t, group_cb, &s), 0, "%s",
                 idx_errmsg(e));
    cr_assert_eq(s.n, 2);
    cr_expect_str_eq(s.name[0], "g-all");
    cr_expect_eq(s.g[0].next_offset, 6);
    cr_expect_eq(s.g[0].commit_ms, 10000);
    cr_expect_eq(s.g[0].commit_index, 10);
    cr_expect_str_eq(s.name[1], "g-past");
    cr_expect_eq(s.g[1].next_offset, 2);
    cr_expect_eq(s.g[1].commit_ms, 8000);
    cr_expect_eq(s.g[1].commit_index, 8);

    memset(&s, 0, sizeof s);
    cr_assert_eq(idx_message_trace(e, "q", 0, &t, group_cb, &s), 0);
    cr_expect_eq(s.n, 3, "every group is past offset 0");
    memset(&s, 0, sizeof s);
    s.stop_after = 1;
    cr_assert_eq(idx_message_trace(e, "q", 0, &t, group_cb, &s), 0);
    cr_expect_eq(s.n, 1, "a non-zero return stops");
    memset(&s, 0, sizeof s);
    cr_assert_eq(idx_message_trace(e, "q", 5, &t, group_cb, &s), 0);
    cr_expect_eq(s.n, 1);
    cr_expect_str_eq(s.name[0], "g-all");
    /* groups of another queue never show */
    memset(&s, 0, sizeof s);
    cr_assert_eq(idx_message_trace(e, "other", 0, &t, group_cb, &s), 0);
    cr_expect_eq(s.n, 0);

    /* The same answers after a rebuild from the log. */
    idx_close(e);
    e = th_open(th_dir_a, 0);
    memset(&s, 0, sizeof s);
    cr_assert_eq(idx_message_trace(e, "q", 4, &t, group_cb, &s), 0);
    expect_entry5(&t, 4, 2, 1, 2);
    cr_assert_eq(s.n, 1);
    cr_expect_eq(s.g[0].commit_index, 10);
    cr_expect_eq(s.g[0].commit_ms, 10000);
    idx_close(e);
}

Test(index_trace, trimmed_and_missing)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    struct idx_trace t;
    struct idx_queue_info qi;
    struct tern_wbuf w;
    struct idx_result r[1];
    populate(e);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 7000);
    idx_cmd_trim(&w, "q", qi.id, 0, 2, 9);
    cr_assert_eq(th_apply(e, 7, &w, r, 1), 1);
    cr_assert_eq(r[0].status, 0);
    tern_wbuf_free(&w);
    cr_assert_eq(idx_flush(e), 0);

    cr_expect_eq(idx_message_trace(e, "q", 1, &t, NULL, NULL), TERN_EOFFSET);
    cr_expect(strstr(idx_errmsg(e), "first offset 2") != NULL, "%s",
              idx_errmsg(e));
    cr_expect_eq(idx_message_trace(e, "q", 2, &t, NULL, NULL), 0);
    cr_expect_eq(t.batch_pos, 2);
    cr_expect_eq(idx_message_trace(e, "q", 6, &t, NULL, NULL), TERN_EOFFSET);
    cr_expect_eq(idx_message_trace(e, "q", UINT64_MAX, &t, NULL, NULL),
                 TERN_EOFFSET);
    cr_expect_eq(idx_message_trace(e, "nope", 0, &t, NULL, NULL),
                 TERN_ENOQUEUE);
    cr_expect_eq(idx_message_trace(e, "bad name", 0, &t, NULL, NULL),
                 TERN_EBADNAME);
    idx_close(e);
}
