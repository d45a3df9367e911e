/* Unit tests of applying and reading (index/apply.c, index/read.c):
 * produce/fetch across batches and segment rolls, replay idempotence,
 * producer dedup, groups, queue lifecycle, malformed entries, limits, map
 * full. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <idx.h>
#include "idx_int.h"

#include "index_helpers.h"

static char *dir;

static void setup(void)
{
    dir = th_tmpdir();
}

static void teardown(void)
{
    th_rmdir(dir);
    dir = NULL;
}

TestSuite(index_apply, .init = setup, .fini = teardown);

Test(index_apply, produce_fetch_across_segments)
{
    struct idx_env *e = th_open(dir, 512);
    uint64_t idx = 1, expect_off = 0;
    th_create(e, idx++, "a");
    th_create(e, idx++, "b");
    for (uint64_t s = 1; s <= 200; s++) {
        const char *q = (s % 3 == 0) ? "b" : "a";
        uint32_t n = (uint32_t)(s % 5) + 1;
        struct idx_result r = th_produce(e, idx++, q, 0, s, n);
        cr_assert_eq(r.status, 0);
        cr_assert_eq(r.duplicate, 0);
        cr_assert_eq(r.count, n);
        if (q[0] == 'a') {
            cr_assert_eq(r.base_offset, expect_off);
            expect_off += n;
        }
        if (s % 17 == 0) {
            cr_assert_eq(idx_flush(e), 0);
        }
    }
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_gt(th_count_segments(dir), 10, "segments rolled");
    cr_expect_eq(idx_last_applied(e), idx - 1);

    /* Fetch everything with several chunkings: identical results. */
    struct th_msgs all = {0}, m1 = {0}, m2 = {0};
    cr_assert_eq(th_fetch_all(e, "a", 1000, 1u << 30, &all), 0);
    cr_assert_eq(all.n, expect_off);
    cr_assert_eq(th_fetch_all(e, "a", 1, 1u << 30, &m1), 0);
    cr_assert_eq(th_fetch_all(e, "a", 7, 100, &m2), 0);
    th_msgs_expect_eq(&all, &m1);
    th_msgs_expect_eq(&all, &m2);
    /* Contents in order, matching what was produced. */
    size_t k = 0;
    for (uint64_t s = 1; s <= 200; s++) {
        if (s % 3 == 0) {
            continue;
        }
        for (uint32_t i = 0; i < (uint32_t)(s % 5) + 1; i++, k++) {
            char text[96];
            th_msg_text(text, sizeof text, "a", s, i);
            cr_assert_eq(all.v[k].offset, k);
            cr_assert_str_eq(all.v[k].data, text);
            cr_assert_eq(all.v[k].producer_id, 0);
            cr_assert_geq(all.v[k].timestamp_ms, 1000);
        }
    }
    /* max_bytes 0 still returns one message. */
    unsigned cnt = 0;
    uint64_t next = 0;
    cr_assert_eq(idx_fetch(e, "a", 3, 100, 0, th_count_fetched, &cnt, &next),
                 0);
    cr_expect_eq(cnt, 1);
    cr_expect_eq(next, 4);
    /* At the end: 0 and no calls; beyond: EOFFSET. */
    cnt = 0;
    cr_expect_eq(
        idx_fetch(e, "a", expect_off, 10, 1000, th_count_fetched, &cnt, &next),
        0);
    cr_expect_eq(cnt, 0);
    cr_expect_eq(next, expect_off);
    cr_expect_eq(idx_fetch(e, "a", expect_off + 1, 10, 1000, th_count_fetched,
                           &cnt, &next),
                 TERN_EOFFSET);
    cr_expect_eq(
        idx_fetch(e, "nope", 0, 10, 1000, th_count_fetched, &cnt, &next),
        TERN_ENOQUEUE);
    th_msgs_free(&all);
    th_msgs_free(&m1);
    th_msgs_free(&m2);

    /* Reopen: same results (reads from a fresh env). */
    idx_close(e);
    e = th_open(dir, 512);
    cr_expect_eq(idx_truncated_bytes(e), 0);
    struct th_msgs again = {0};
    cr_assert_eq(th_fetch_all(e, "b", 3, 1000, &again), 0);
    cr_expect_gt(again.n, 0);
    th_msgs_free(&again);
    idx_close(e);
}

Test(index_apply, replay_is_idempotent)
{
    struct idx_env *e = th_open(dir, 1024);
    th_create(e, 1, "q");
    for (uint64_t i = 2; i <= 50; i++) {
        th_produce(e, i, "q", 0, i, 3);
    }
    uint64_t end = idx_log_end(e);
    idx_close(e);

    e = th_open(dir, 1024);
    cr_assert_eq(idx_last_applied(e), 50);
    /* Raft replays the same entries after a restart: all skipped. */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create(&w, "q");
    cr_assert_eq(idx_cmd_end(&w), 0);
    for (uint64_t i = 1; i <= 50; i++) {
        struct idx_result r[4];
        unsigned n = 77;
        cr_assert_eq(idx_apply(e, i, w.base, w.len, r, 4, &n), 0);
        cr_assert_eq(n, 0);
    }
    cr_expect_eq(idx_log_end(e), end, "nothing appended");
    cr_assert_eq(idx_flush(e), 0);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, (uint64_t)49 * 3);
    /* The next index is applied normally. */
    th_produce(e, 51, "q", 0, 51, 1);
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, 49 * 3 + 1);
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_apply, producer_dedup)
{
    struct idx_env *e = th_open(dir, 0);
    uint64_t idx = 1;
    struct idx_result r;
    th_create(e, idx++, "q");
    r = th_produce(e, idx++, "q", 77, 1, 2);
    cr_expect_eq(r.base_offset, 0);
    r = th_produce(e, idx++, "q", 77, 2, 3);
    cr_expect_eq(r.base_offset, 2);
    cr_expect_eq(r.count, 3);
    r = th_produce(e, idx++, "q", 77, 3, 1);
    cr_expect_eq(r.base_offset, 5);
    /* Retry of batch 2: original offsets, nothing appended. */
    r = th_produce(e, idx++, "q", 77, 2, 3);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.duplicate, 1);
    cr_expect_eq(r.base_offset, 2);
    cr_expect_eq(r.count, 3);
    /* Gap. */
    r = th_produce(e, idx++, "q", 77, 5, 1);
    cr_expect_eq(r.status, TERN_ESEQUENCE);
    cr_expect_eq(r.duplicate, 0);
    /* Unknown producer must start at 1. */
    r = th_produce(e, idx++, "q", 78, 2, 1);
    cr_expect_eq(r.status, TERN_ESEQUENCE);
    /* Producer 0: never deduplicated. */
    r = th_produce(e, idx++, "q", 0, 1, 1);
    cr_expect_eq(r.duplicate, 0);
    cr_expect_eq(r.base_offset, 6);
    r = th_produce(e, idx++, "q", 0, 1, 1);
    cr_expect_eq(r.duplicate, 0);
    cr_expect_eq(r.base_offset, 7);
    /* Same producer id on another queue: its own sequence. */
    th_create(e, idx++, "other");
    r = th_produce(e, idx++, "other", 77, 1, 1);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.base_offset, 0);
    /* Push batch 1 out of the window (IDX__DEDUP_WINDOW remembered). */
    const uint64_t last = 3 + IDX__DEDUP_WINDOW + 1;
    for (uint64_t s = 4; s <= last; s++) {
        r = th_produce(e, idx++, "q", 77, s, 1);
        cr_assert_eq(r.status, 0);
        cr_assert_eq(r.duplicate, 0);
    }
    r = th_produce(e, idx++, "q", 77, 1, 2);
    cr_expect_eq(r.status, 0);
    cr_expect_eq(r.duplicate, 1);
    cr_expect_eq(r.count, 0, "forgotten batch: offsets unknown");
    r = th_produce(e, idx++, "q", 77, 5, 1);
    cr_expect_eq(r.duplicate, 1);
    cr_expect_eq(r.count, 1);
    /* Dedup state survives reopen. */
    idx_close(e);
    e = th_open(dir, 0);
    r = th_produce(e, idx++, "q", 77, last, 1);
    cr_expect_eq(r.duplicate, 1);
    r = th_produce(e, idx++, "q", 77, last + 1, 1);
    cr_expect_eq(r.duplicate, 0);
    cr_assert_eq(idx_flush(e), 0);
    struct th_msgs m = {0};
    cr_assert_eq(th_fetch_all(e, "q", 100, 1 << 20, &m), 0);
    cr_expect_eq(m.n, 6 + 2 + (last - 3) + 1);
    cr_expect_eq(m.v[0].producer_id, 77);
    th_msgs_free(&m);
    idx_close(e);
}

Test(index_apply, groups)
{
    struct idx_env *e = th_open(dir, 0);
    struct tern_wbuf w;
    struct idx_result r[4];
    uint64_t off = 99;
    tern_wbuf_init(&w);
    th_create(e, 1, "q");
    th_produce(e, 2, "q", 0, 1, 5);
    cr_assert_eq(idx_flush(e), 0);
    idx_cmd_begin(&w, 3);
    idx_cmd_group_commit(&w, "q", "g1", 3);
    idx_cmd_group_commit(&w, "q", "g2", 6);
    idx_cmd_group_commit(&w, "nope", "g1", 0);
    idx_cmd_group_commit(&w, "q", "g3", 5);
    cr_assert_eq(th_apply(e, 3, &w, r, 4), 4);
    cr_expect_eq(r[0].status, 0);
    cr_expect_eq(r[1].status, TERN_EOFFSET);
    cr_expect_eq(r[2].status, TERN_ENOQUEUE);
    cr_expect_eq(r[3].status, 0);
    /* Not visible before the flush. */
    cr_assert_eq(idx_group_offset(e, "q", "g1", &off), 0);
    cr_expect_eq(off, 0);
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_group_offset(e, "q", "g1", &off), 0);
    cr_expect_eq(off, 3);
    cr_assert_eq(idx_group_offset(e, "q", "g3", &off), 0);
    cr_expect_eq(off, 5);
    cr_assert_eq(idx_group_offset(e, "q", "never", &off), 0);
    cr_expect_eq(off, 0);
    cr_expect_eq(idx_group_offset(e, "nope", "g1", &off), TERN_ENOQUEUE);
    cr_expect_eq(idx_group_offset(e, "q", "bad name", &off), TERN_EBADNAME);
    /* Commit moves backwards too (a consumer may rewind). */
    idx_cmd_begin(&w, 4);
    idx_cmd_group_commit(&w, "q", "g1", 1);
    th_apply(e, 4, &w, r, 4);
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_group_offset(e, "q", "g1", &off), 0);
    cr_expect_eq(off, 1);
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_apply, read_barrier_changes_nothing)
{
    struct idx_env *e = th_open(dir, 0);
    struct tern_wbuf w;
    struct idx_result r[4];
    uint64_t off = 99;
    struct idx_queue_info qi;
    tern_wbuf_init(&w);
    th_create(e, 1, "q");
    th_produce(e, 2, "q", 0, 1, 5);
    idx_cmd_begin(&w, 3);
    idx_cmd_group_commit(&w, "q", "g1", 3);
    cr_assert_eq(th_apply(e, 3, &w, r, 4), 1);
    idx_cmd_begin(&w, 4);
    idx_cmd_read_barrier(&w);
    idx_cmd_read_barrier(&w);
    cr_assert_eq(th_apply(e, 4, &w, r, 4), 2);
    cr_expect_eq(r[0].status, 0);
    cr_expect_eq(r[1].status, 0);
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_eq(idx_last_applied(e), 4);
    cr_assert_eq(idx_group_offset(e, "q", "g1", &off), 0);
    cr_expect_eq(off, 3);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, 5);
    tern_wbuf_free(&w);
    idx_close(e);
}

struct list_ctx
{
    char names[8][64];
    uint64_t next[8];
    int n;
    int stop_after;
};

static int list_cb(void *arg, const struct idx_queue_info *q)
{
    struct list_ctx *c = arg;
    cr_assert_lt(c->n, 8);
    cr_assert_lt(
        (size_t)snprintf(c->names[c->n], sizeof c->names[c->n], "%s", q->name),
        sizeof c->names[c->n]);
    c->next[c->n] = q->next_offset;
    c->n++;
    return c->stop_after != 0 && c->n >= c->stop_after;
}

Test(index_apply, queue_lifecycle)
{
    struct idx_env *e = th_open(dir, 0);
    struct tern_wbuf w;
    struct idx_result r[4];
    struct idx_queue_info qi;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_queue_create(&w, "zeta");
    idx_cmd_queue_create(&w, "alpha");
    idx_cmd_queue_create(&w, "mid");
    idx_cmd_queue_create(&w, "alpha");
    cr_assert_eq(th_apply(e, 1, &w, r, 4), 4);
    cr_expect_eq(r[0].status, 0);
    cr_expect_eq(r[3].status, TERN_EQUEUEEXISTS);
    th_produce(e, 2, "mid", 0, 1, 4);
    th_create(e, 3, "b");
    cr_assert_eq(idx_flush(e), 0);

    struct list_ctx lc = {0};
    cr_assert_eq(idx_queue_list(e, list_cb, &lc), 0);
    cr_assert_eq(lc.n, 4);
    cr_expect_str_eq(lc.names[0], "alpha");
    cr_expect_str_eq(lc.names[1], "b");
    cr_expect_str_eq(lc.names[2], "mid");
    cr_expect_str_eq(lc.names[3], "zeta");
    cr_expect_eq(lc.next[2], 4);
    struct list_ctx stop = {.stop_after = 2};
    cr_assert_eq(idx_queue_list(e, list_cb, &stop), 0);
    cr_expect_eq(stop.n, 2);

    cr_assert_eq(idx_queue_get(e, "mid", &qi), 0);
    cr_expect_eq(qi.created_index, 1);
    cr_expect_eq(qi.next_offset, 4);
    cr_expect_eq(qi.start_offset, 0);

    /* Delete: gone for reads, name free, a second delete fails. */
    idx_cmd_begin(&w, 4);
    idx_cmd_group_commit(&w, "mid", "g", 2);
    idx_cmd_queue_delete(&w, "mid");
    idx_cmd_queue_delete(&w, "mid");
    idx_cmd_produce(&w, "mid", 0, 0, &(struct idx_msg){"x", 1}, 1);
    cr_assert_eq(th_apply(e, 4, &w, r, 4), 4);
    cr_expect_eq(r[0].status, 0);
    cr_expect_eq(r[1].status, 0);
    cr_expect_eq(r[2].status, TERN_ENOQUEUE);
    cr_expect_eq(r[3].status, TERN_ENOQUEUE);
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_eq(idx_queue_get(e, "mid", &qi), TERN_ENOQUEUE);
    unsigned cnt = 0;
    uint64_t next;
    uint64_t off;
    cr_expect_eq(idx_fetch(e, "mid", 0, 10, 100, th_count_fetched, &cnt, &next),
                 TERN_ENOQUEUE);
    cr_expect_eq(idx_group_offset(e, "mid", "g", &off), TERN_ENOQUEUE);

    /* Re-create: empty, offsets from 0, old group gone. */
    th_create(e, 5, "mid");
    struct idx_result pr = th_produce(e, 6, "mid", 0, 9, 2);
    cr_expect_eq(pr.base_offset, 0);
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_queue_get(e, "mid", &qi), 0);
    cr_expect_eq(qi.created_index, 5);
    cr_expect_eq(qi.next_offset, 2);
    cr_assert_eq(idx_group_offset(e, "mid", "g", &off), 0);
    cr_expect_eq(off, 0);
    struct th_msgs m = {0};
    cr_assert_eq(th_fetch_all(e, "mid", 10, 1000, &m), 0);
    cr_assert_eq(m.n, 2);
    char text[96];
    th_msg_text(text, sizeof text, "mid", 9, 0);
    cr_expect_str_eq(m.v[0].data, text);
    th_msgs_free(&m);
    cr_expect_eq(idx_queue_get(e, "bad/name", &qi), TERN_EBADNAME);
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_apply, reads_see_flushed_state_only)
{
    struct idx_env *e = th_open(dir, 0);
    struct idx_queue_info qi;
    th_create(e, 1, "q");
    cr_expect_eq(idx_queue_get(e, "q", &qi), TERN_ENOQUEUE);
    cr_expect_eq(idx_last_applied(e), 1, "applied, though not flushed");
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    th_produce(e, 2, "q", 0, 1, 3);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, 0);
    cr_assert_eq(idx_flush(e), 0);
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, 3);
    idx_close(e);
}

Test(index_apply, malformed_entry_is_recorded_not_applied)
{
    struct idx_env *e = th_open(dir, 0);
    struct tern_wbuf w;
    struct idx_result r[4];
    unsigned n = 0;
    th_create(e, 1, "q");
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_queue_create(&w, "x");
    idx_cmd_queue_create(&w, "y");
    cr_assert_eq(idx_cmd_end(&w), 0);
    w.base[w.len - 1] ^= 0xff; /* breaks the checksum */
    uint64_t end = idx_log_end(e);
    cr_assert_eq(idx_apply(e, 2, w.base, w.len, r, 4, &n), 0);
    cr_expect_eq(n, 2, "one result per announced command");
    cr_expect_eq(r[0].status, TERN_EMALFORMED);
    cr_expect_eq(r[1].status, TERN_EMALFORMED);
    cr_expect_eq(idx_last_applied(e), 2);
    cr_expect_eq(idx_log_end(e), end + 24 + w.len, "recorded in the log");
    /* Garbage too short to have a header. */
    cr_assert_eq(idx_apply(e, 3, "zz", 2, r, 4, &n), 0);
    cr_expect_eq(n, 1);
    cr_expect_eq(r[0].status, TERN_EMALFORMED);
    cr_assert_eq(idx_flush(e), 0);
    struct idx_queue_info qi;
    cr_expect_eq(idx_queue_get(e, "x", &qi), TERN_ENOQUEUE);
    /* A rebuild derives the same thing. */
    idx_close(e);
    e = th_open(dir, 0);
    cr_expect_eq(idx_last_applied(e), 3);
    cr_expect_eq(idx_truncated_bytes(e), 0);
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_apply, message_size_limit)
{
    struct idx_options o = {.dir = dir, .max_message = 10};
    struct idx_env *e = th_open_opts(&o);
    struct tern_wbuf w;
    struct idx_result r[2];
    struct idx_msg m[2] = {{"0123456789", 10}, {"0123456789A", 11}};
    th_create(e, 1, "q");
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_produce(&w, "q", 0, 0, m, 1);
    idx_cmd_produce(&w, "q", 0, 0, m, 2);
    cr_assert_eq(th_apply(e, 2, &w, r, 2), 2);
    cr_expect_eq(r[0].status, 0);
    cr_expect_eq(r[1].status, TERN_ETOOBIG);
    cr_assert_eq(idx_flush(e), 0);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, 1, "rejected batch appended nothing");
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_apply, results_capped_by_max)
{
    struct idx_env *e = th_open(dir, 0);
    struct tern_wbuf w;
    struct idx_result r[2];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_queue_create(&w, "a");
    idx_cmd_queue_create(&w, "b");
    idx_cmd_queue_create(&w, "c");
    cr_assert_eq(th_apply(e, 1, &w, r, 2), 2);
    cr_assert_eq(idx_flush(e), 0);
    struct idx_queue_info qi;
    cr_expect_eq(idx_queue_get(e, "c", &qi), 0, "all commands applied");
    tern_wbuf_free(&w);
    idx_close(e);
}

Test(index_apply, map_full)
{
    struct idx_options o = {.dir = dir, .map_size = (size_t)64 * 1024};
    struct idx_env *e = th_open_opts(&o);
    struct tern_wbuf w;
    char text[200];
    struct idx_msg m[16];
    int rc = 0;
    uint64_t idx = 1;
    memset(text, 'x', sizeof text);
    for (int i = 0; i < 16; i++) {
        m[i].data = text;
        m[i].len = sizeof text;
    }
    th_create(e, idx++, "q");
    tern_wbuf_init(&w);
    for (int i = 0; i < 10000 && rc == 0; i++) {
        unsigned n;
        struct idx_result r[1];
        idx_cmd_begin(&w, 1);
        idx_cmd_produce(&w, "q", 0, 0, m, 16);
        cr_assert_eq(idx_cmd_end(&w), 0);
        rc = idx_apply(e, idx++, w.base, w.len, r, 1, &n);
        if (rc == 0 && i % 4 == 0) {
            rc = idx_flush(e);
        }
    }
    cr_assert_eq(rc, TERN_EFULL, "got %s", tern_strerror(rc));
    cr_expect_neq(strstr(idx_errmsg(e), "MDB_MAP_FULL"), NULL, "%s",
                  idx_errmsg(e));
    cr_expect_eq(idx_status(e), TERN_EFULL);
    cr_expect(idx_map_full(e), "the map, not the disk");
    unsigned n;
    struct idx_result r[1];
    cr_expect_eq(idx_apply(e, idx++, w.base, w.len, r, 1, &n), TERN_EFULL,
                 "sticky");
    uint64_t end = idx_log_end(e);
    idx_close(e);

    /* Open rebuilds LMDB from the log in a fresh file, which is compact
     * (no pages kept by thousands of small commits): the same map holds
     * every record now. */
    e = th_open_opts(&o);
    cr_expect_eq(idx_log_end(e), end);
    cr_expect_eq(idx_status(e), 0);
    idx_close(e);
    /* Too small even for that: open reports it. */
    struct idx_env *e2 = NULL;
    char err[TERN_ERRMSG_SIZE] = "";
    o.map_size = (size_t)16 * 1024;
    cr_expect_eq(idx_open(&o, &e2, err), TERN_EFULL, "%s", err);
    cr_expect_neq(strstr(err, "MDB_MAP_FULL"), NULL, "%s", err);
    /* A bigger map re-indexes every record in the log. */
    o.map_size = 64 << 20;
    e = th_open_opts(&o);
    cr_expect_eq(idx_log_end(e), end);
    cr_expect_eq(idx_truncated_bytes(e), 0);
    cr_expect_eq(idx_status(e), 0);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_gt(qi.next_offset, 0);
    cr_expect_eq(qi.next_offset % 16, 0);
    tern_wbuf_free(&w);
    idx_close(e);
}

/* A short LMDB write (EIO from mdb_txn_commit) on a nearly full file
 * system is a full disk (TERN_EFULL, cured by a reopen), not an I/O error
 * that would stop the node (jepsen disk-full-all). */
Test(index_apply, commit_eio_on_full_fs_is_efull)
{
    cr_expect_eq(idx__commit_err_code(EIO, 0, 1), TERN_EFULL);
    cr_expect_eq(idx__commit_err_code(EIO, IDX__SHORT_WRITE_FREE - 1, 1),
                 TERN_EFULL);
    cr_expect_eq(idx__commit_err_code(EIO, IDX__SHORT_WRITE_FREE, 1), -EIO,
                 "room left: a real I/O error");
    cr_expect_eq(idx__commit_err_code(EIO, 0, 0), -EIO,
                 "free space unknown: a real I/O error");
    cr_expect_eq(idx__commit_err_code(EACCES, 0, 1), -EACCES);
}
