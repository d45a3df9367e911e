/* Unit tests of snapshots and bulk catch-up (index/snapshot.c): manifest
 * round trip, transferring a log between two envs cut into different
 * segments, staying identical afterwards, and the failure modes of
 * idx_restore. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <idx.h>

#include "index_helpers.h"

TestSuite(index_snapshot, .init = th_dirs_init, .fini = th_dirs_fini);

/* Deterministic workload: entry i of a run. */
static void apply_workload(struct idx_env *e, uint64_t from, uint64_t to)
{
    for (uint64_t i = from; i <= to; i++) {
        if (i == 1) {
            struct tern_wbuf w;
            struct idx_result r[2];
            tern_wbuf_init(&w);
            idx_cmd_begin(&w, 500);
            idx_cmd_queue_create(&w, "q0");
            idx_cmd_queue_create(&w, "q1");
            th_apply(e, i, &w, r, 2);
            tern_wbuf_free(&w);
        } else if (i % 50 == 0) {
            struct tern_wbuf w;
            struct idx_result r[1];
            tern_wbuf_init(&w);
            idx_cmd_begin(&w, 500 + i);
            idx_cmd_group_commit(&w, "q0", "grp", i / 10);
            th_apply(e, i, &w, r, 1);
            tern_wbuf_free(&w);
        } else {
            const char *q = (i % 2) ? "q0" : "q1";
            struct idx_result r =
                th_produce(e, i, q, (i % 3) ? 5 : 0, i, (uint32_t)(i % 4) + 1);
            (void)r;
        }
        if (i % 64 == 0) {
            cr_assert_eq(idx_flush(e), 0);
        }
    }
    cr_assert_eq(idx_flush(e), 0);
}

/* Apply entries 1..last of the workload on a, then take a's snapshot
 * manifest into man (initialised here; the caller frees it). */
static void snapshot_workload(struct idx_env *a,
                              uint64_t last,
                              struct tern_wbuf *man)
{
    tern_wbuf_init(man);
    apply_workload(a, 1, last);
    cr_assert_eq(idx_snapshot(a, man), 0);
}

static void transfer(struct idx_env *a,
                     struct idx_env *b,
                     const struct tern_wbuf *man,
                     size_t chunk)
{
    uint64_t from, to;
    uint8_t *buf = malloc(chunk);
    cr_assert_eq(idx_bulk_range(b, man->base, man->len, &from, &to), 0);
    cr_assert_eq(from, idx_log_end(b));
    for (uint64_t pos = from; pos < to;) {
        size_t n = 0;
        size_t want = (size_t)TERN_MIN((uint64_t)chunk, to - pos);
        cr_assert_eq(idx_bulk_read(a, pos, buf, want, &n), 0);
        cr_assert_gt(n, 0);
        cr_assert_eq(idx_bulk_write(b, pos, buf, n), 0, "%s", idx_errmsg(b));
        pos += n;
    }
    free(buf);
}

static void expect_same(struct idx_env *a, struct idx_env *b)
{
    const char *qs[] = {"q0", "q1"};
    cr_assert_eq(idx_last_applied(a), idx_last_applied(b));
    cr_assert_eq(idx_log_end(a), idx_log_end(b));
    for (int i = 0; i < 2; i++) {
        struct th_msgs ma = {0}, mb = {0};
        cr_assert_eq(th_fetch_all(a, qs[i], 33, 4096, &ma), 0);
        cr_assert_eq(th_fetch_all(b, qs[i], 33, 4096, &mb), 0);
        th_msgs_expect_eq(&ma, &mb);
        th_msgs_free(&ma);
        th_msgs_free(&mb);
    }
    uint64_t ga, gb;
    cr_assert_eq(idx_group_offset(a, "q0", "grp", &ga), 0);
    cr_assert_eq(idx_group_offset(b, "q0", "grp", &gb), 0);
    cr_assert_eq(ga, gb);
    uint64_t la, lb;
    uint8_t *ba = th_log_bytes(a, &la);
    uint8_t *bb = th_log_bytes(b, &lb);
    cr_assert_eq(la, lb);
    cr_assert_eq(memcmp(ba, bb, la), 0, "log bytes identical");
    free(ba);
    free(bb);
}

Test(index_snapshot, bulk_transfer_between_envs)
{
    struct idx_env *a = th_open(th_dir_a, 4096);
    struct idx_env *b = th_open(th_dir_b, 3000);
    struct tern_wbuf man;
    snapshot_workload(a, 1000, &man);
    cr_assert_eq(man.len, 64, "manifest version 2");

    /* A keeps applying while B catches up: the manifest is a prefix. */
    apply_workload(a, 1001, 1010);
    transfer(a, b, &man, 777);
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    cr_expect_eq(idx_last_applied(b), 1000);
    /* Restoring again is a no-op. */
    cr_assert_eq(idx_restore(b, man.base, man.len), 0);
    uint64_t from, to;
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    cr_expect_eq(from, to, "nothing left to copy");

    /* B applies what A applied after the snapshot; then both go on. */
    apply_workload(b, 1001, 1010);
    expect_same(a, b);
    apply_workload(a, 1011, 1100);
    apply_workload(b, 1011, 1100);
    expect_same(a, b);
    cr_expect_neq(th_count_segments(th_dir_a), th_count_segments(th_dir_b),
                  "different segment cuts");

    /* Both survive a reopen identically. */
    idx_close(a);
    idx_close(b);
    a = th_open(th_dir_a, 4096);
    b = th_open(th_dir_b, 3000);
    cr_expect_eq(idx_truncated_bytes(b), 0);
    expect_same(a, b);
    /* B's records span segment boundaries (bulk writes cut anywhere): a
     * full rebuild scans across them. */
    idx_close(b);
    char p[4096];
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/data.mdb", th_dir_b),
                 sizeof p);
    cr_assert_eq(unlink(p), 0);
    b = th_open(th_dir_b, 3000);
    cr_expect_eq(idx_truncated_bytes(b), 0);
    expect_same(a, b);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

Test(index_snapshot, bulk_bytes_reindexed_at_open_without_restore)
{
    struct idx_env *a = th_open(th_dir_a, 0);
    struct idx_env *b = th_open(th_dir_b, 0);
    struct tern_wbuf man;
    snapshot_workload(a, 100, &man);
    transfer(a, b, &man, 4096);
    idx_close(b);
    /* Crash between bulk writes and restore: the records are valid, so
     * open indexes them; restore then has nothing to do. */
    b = th_open(th_dir_b, 0);
    cr_expect_eq(idx_last_applied(b), 100);
    cr_assert_eq(idx_restore(b, man.base, man.len), 0);
    expect_same(a, b);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

Test(index_snapshot, restore_failures)
{
    struct idx_env *a = th_open(th_dir_a, 0);
    struct idx_env *b = th_open(th_dir_b, 0);
    struct tern_wbuf man;
    snapshot_workload(a, 60, &man);

    /* Malformed manifests. */
    uint64_t from, to;
    cr_expect_eq(idx_bulk_range(b, man.base, man.len - 1, &from, &to),
                 TERN_EMALFORMED);
    man.base[9] ^= 1;
    cr_expect_eq(idx_restore(b, man.base, man.len), TERN_EMALFORMED);
    man.base[9] ^= 1;

    /* Restore before the bytes are there. */
    cr_expect_eq(idx_restore(b, man.base, man.len), TERN_EINVAL);
    /* Bulk write anywhere but the end. */
    cr_expect_eq(idx_bulk_write(b, 5, "x", 1), TERN_EINVAL);
    cr_expect_eq(idx_bulk_read(a, idx_log_end(a) + 1, &from, 8, &(size_t){0}),
                 TERN_EINVAL);

    /* Corrupt bytes in transit: restore fails and cuts them off. */
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    uint8_t *buf = malloc(to);
    size_t n;
    cr_assert_eq(idx_bulk_read(a, 0, buf, to, &n), 0);
    cr_assert_eq(n, to);
    buf[to / 2] ^= 0x40;
    cr_assert_eq(idx_bulk_write(b, 0, buf, n), 0);
    cr_expect_eq(idx_restore(b, man.base, man.len), TERN_ECORRUPT);
    cr_expect_lt(idx_log_end(b), to / 2 + 1, "bad bytes cut off");
    cr_expect_gt(idx_last_applied(b), 0, "the good prefix was indexed");
    /* Retry of the missing range works. */
    buf[to / 2] ^= 0x40;
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    cr_assert_eq(idx_bulk_write(b, from, buf + from, to - from), 0);
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    cr_expect_eq(idx_last_applied(b), 60);
    expect_same(a, b);

    /* A manifest naming a different last record: ECORRUPT. */
    struct tern_wbuf bad;
    tern_wbuf_init(&bad);
    tern_wbuf_put(&bad, man.base, man.len);
    tern_put_u32(bad.base + 32, tern_get_u32(bad.base + 32) ^ 1);
    tern_put_u32(bad.base + 60, tern_checksum32(bad.base, 60));
    cr_expect_eq(idx_restore(b, bad.base, bad.len), TERN_ECORRUPT);
    /* An older manifest of the same log is covered: no-op. */
    struct tern_wbuf newer;
    tern_wbuf_init(&newer);
    apply_workload(a, 61, 80);
    cr_assert_eq(idx_snapshot(a, &newer), 0);
    transfer(a, b, &newer, 1000);
    cr_assert_eq(idx_restore(b, newer.base, newer.len), 0);
    cr_expect_eq(idx_last_applied(b), 80);
    cr_expect_eq(idx_restore(b, man.base, man.len), 0);
    cr_expect_eq(idx_last_applied(b), 80);
    expect_same(a, b);
    tern_wbuf_free(&newer);
    tern_wbuf_free(&bad);
    free(buf);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

/* Copy [from, from + n) of a's log into b (b's log must end at from). */
static void copy_bytes(struct idx_env *a,
                       struct idx_env *b,
                       uint64_t from,
                       uint64_t n)
{
    uint8_t *buf = malloc(n);
    size_t got = 0;
    cr_assert_eq(idx_bulk_read(a, from, buf, n, &got), 0);
    cr_assert_eq(got, n);
    cr_assert_eq(idx_bulk_write(b, from, buf, n), 0, "%s", idx_errmsg(b));
    free(buf);
}

/* jepsen F2 "known gap": a fetch is aborted midway (bulk.c keeps its bytes
 * for a resend), then raft goes on applying entries instead of delivering
 * the snapshot. idx_apply must drop the un-indexed bytes (it used to refuse
 * with TERN_EINVAL: fail-stop) and end up identical to the leader. */
Test(index_snapshot, apply_after_abandoned_fetch_drops_bulk_bytes)
{
    struct idx_env *a = th_open(th_dir_a, 4096);
    struct idx_env *b = th_open(th_dir_b, 3000);
    struct tern_wbuf man;
    uint64_t from, to, indexed_end;
    snapshot_workload(a, 300, &man);
    apply_workload(a, 301, 320);
    apply_workload(b, 1, 40);
    indexed_end = idx_log_end(b);
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    cr_assert_eq(from, indexed_end);
    /* Half of the range, cut in the middle of a record. */
    copy_bytes(a, b, from, (to - from) / 2 + 5);
    cr_assert_gt(idx_log_end(b), indexed_end);

    apply_workload(b, 41, 320);
    cr_expect_eq(idx_status(b), 0, "%s", idx_errmsg(b));
    cr_expect_eq(idx_discarded_bytes(b), (to - from) / 2 + 5);
    cr_expect_eq(idx_last_applied(b), 320);
    expect_same(a, b);
    /* The older snapshot is covered now. */
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    cr_expect_eq(from, to);
    /* The drop was durable: a reopen finds the same log. */
    idx_close(b);
    b = th_open(th_dir_b, 3000);
    cr_expect_eq(idx_truncated_bytes(b), 0);
    expect_same(a, b);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

Test(index_snapshot, bulk_discard_then_fetch_again)
{
    struct idx_env *a = th_open(th_dir_a, 0);
    struct idx_env *b = th_open(th_dir_b, 700);
    struct tern_wbuf man;
    uint64_t from, to, from2, to2;
    snapshot_workload(a, 200, &man);
    apply_workload(b, 1, 10);
    cr_expect_eq(idx_bulk_discard(b), 0, "nothing to drop");
    cr_expect_eq(idx_discarded_bytes(b), 0);
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    /* Across several of b's small segments. */
    copy_bytes(a, b, from, (to - from) - 3);
    cr_assert_gt(th_count_segments(th_dir_b), 2);
    cr_assert_eq(idx_bulk_discard(b), 0, "%s", idx_errmsg(b));
    cr_expect_eq(idx_log_end(b), from);
    cr_expect_eq(idx_discarded_bytes(b), (to - from) - 3);
    cr_expect_eq(idx_last_applied(b), 10);
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from2, &to2), 0);
    cr_expect_eq(from2, from, "the dropped bytes are asked for again");
    cr_expect_eq(to2, to);
    /* Gone after a reopen too (not re-indexed by idx_open). */
    idx_close(b);
    b = th_open(th_dir_b, 700);
    cr_expect_eq(idx_log_end(b), from);
    cr_expect_eq(idx_last_applied(b), 10);
    /* A complete fetch then restores normally. */
    transfer(a, b, &man, 999);
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    expect_same(a, b);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}
