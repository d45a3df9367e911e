/* Unit tests of the single active consumer of stream groups in index/
 * (docs/WORKQUEUES.md): the codec of CLAIM and GROUP_COMMIT_AS and its
 * refusals; claim, renew, refuse, takeover once until <= t, release and
 * the generation; commits refused for a non-holder (GROUP_COMMIT_AS) and
 * for anyone (GROUP_COMMIT) while a claim is live; claims on a shared
 * group refused; checkpoints keep claims (equal bytes on two envs, the
 * same rows after a rebuild); a deleted queue's claims go. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <idx.h>

#include "cmd.h"
#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_claim, .init = th_dirs_init, .fini = th_dirs_fini);

static struct idx_result run1(struct idx_env *e,
                              uint64_t index,
                              struct tern_wbuf *w)
{
    struct idx_result r[1];
    memset(r, 0, sizeof r);
    cr_assert_eq(th_apply(e, index, w, r, 1), 1);
    cr_assert_eq(idx_flush(e), 0);
    tern_wbuf_free(w);
    return r[0];
}

static struct idx_result claim(struct idx_env *e,
                               uint64_t index,
                               uint64_t t,
                               uint64_t consumer,
                               uint32_t action,
                               uint32_t lease_ms)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    idx_cmd_claim(&w, "q", "g", consumer, action, lease_ms);
    cr_assert_eq(w.err, 0);
    return run1(e, index, &w);
}

/* GROUP_COMMIT_AS by consumer (0: a plain GROUP_COMMIT). */
static struct idx_result commit(struct idx_env *e,
                                uint64_t index,
                                uint64_t t,
                                uint64_t consumer,
                                uint64_t next)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    if (consumer == 0) {
        idx_cmd_group_commit(&w, "q", "g", next);
    } else {
        idx_cmd_group_commit_as(&w, "q", "g", consumer, next);
    }
    cr_assert_eq(w.err, 0);
    return run1(e, index, &w);
}

static struct idx_claim row(struct idx_env *e)
{
    struct idx_claim c;
    cr_assert_eq(idx_claim_get(e, "q", "g", &c), 0, "%s", idx_errmsg(e));
    return c;
}

static uint64_t offset(struct idx_env *e)
{
    uint64_t off = 0;
    cr_assert_eq(idx_group_offset(e, "q", "g", &off), 0);
    return off;
}

/* Queue "q" with n messages; returns the next raft index. */
static uint64_t setup(struct idx_env *e, uint32_t n)
{
    th_create(e, 1, "q");
    (void)th_produce(e, 2, "q", 0, 0, n);
    cr_assert_eq(idx_flush(e), 0);
    return 3;
}

Test(index_claim, codec_round_trip_and_refusals)
{
    struct tern_wbuf w;
    struct idx__entry it;
    struct idx__cmd c;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_claim(&w, "ns%q", "g", 7, IDX_CLAIM_ACQUIRE, 2000);
    idx_cmd_claim(&w, "q", "g", 7, IDX_CLAIM_RELEASE, 0);
    idx_cmd_group_commit_as(&w, "q", "grp", 9, 42);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx__entry_open(&it, w.base, w.len), 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect(c.type == IDX_CMD_CLAIM && c.consumer_id == 7 &&
              c.flags == IDX_CLAIM_ACQUIRE && c.lease_ms == 2000 &&
              c.queue_len == 4 && memcmp(c.queue, "ns%q", 4) == 0 &&
              c.group_len == 1);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect(c.type == IDX_CMD_CLAIM && c.flags == IDX_CLAIM_RELEASE &&
              c.lease_ms == 0);
    cr_assert_eq(idx__entry_next(&it, &c), 1);
    cr_expect(c.type == IDX_CMD_GROUP_COMMIT_AS && c.consumer_id == 9 &&
              c.next_offset == 42 && c.group_len == 3);
    cr_expect_eq(idx__entry_next(&it, &c), 0);
    /* Every truncation of the entry is refused (the checksum or the
     * length breaks), and so is a changed action byte. */
    for (size_t n = 0; n < w.len; n++) {
        cr_expect_neq(idx_cmd_validate(w.base, n), 0, "length %zu", n);
    }
    tern_wbuf_free(&w);

    /* Builder refusals: consumer 0, lease 0, release with a lease, an
     * unknown action. */
    uint32_t bad[][3] = {{0, IDX_CLAIM_ACQUIRE, 10},
                         {1, IDX_CLAIM_ACQUIRE, 0},
                         {1, IDX_CLAIM_RELEASE, 10},
                         {1, 3, 10}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tern_wbuf_init(&w);
        idx_cmd_begin(&w, 5);
        idx_cmd_claim(&w, "q", "g", bad[i][0], bad[i][1], bad[i][2]);
        cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL, "case %zu", i);
        tern_wbuf_free(&w);
    }
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_group_commit_as(&w, "q", "g", 0, 1);
    cr_expect_eq(idx_cmd_end(&w), TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(index_claim, malformed_bodies_are_refused)
{
    /* A CLAIM whose action byte is changed to 3, the checksum redone. */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 5);
    idx_cmd_claim(&w, "q", "g", 7, IDX_CLAIM_ACQUIRE, 1000);
    cr_assert_eq(idx_cmd_end(&w), 0);
    /* action at: header 24, type 1, body_len 4, qname 2, group 2, id 8 */
    size_t at = 24 + 1 + 4 + 2 + 2 + 8;
    cr_assert_eq(w.base[at], IDX_CLAIM_ACQUIRE);
    w.base[at] = 3;
    th_entry_reseal(w.base, w.len);
    cr_expect_eq(idx_cmd_validate(w.base, w.len), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(index_claim, claim_renew_refuse_takeover_release_generation)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 5);
    /* No claim: idx_claim_get gives holder 0. */
    cr_expect_eq(row(e).holder, 0);
    struct idx_result r = claim(e, i++, 1000, 7, IDX_CLAIM_ACQUIRE, 2000);
    cr_expect(r.status == 0 && r.count == 1 && r.claim.holder == 7 &&
              r.claim.until_ms == 3000 && r.claim.generation == 1);
    struct idx_claim c = row(e);
    cr_expect(c.holder == 7 && c.until_ms == 3000 && c.generation == 1);
    /* The claim made no group row. */
    cr_expect_eq(offset(e), 0);

    /* Renew: until moves, the generation stays. */
    r = claim(e, i++, 1500, 7, IDX_CLAIM_ACQUIRE, 2000);
    cr_expect(r.status == 0 && r.claim.until_ms == 3500 &&
              r.claim.generation == 1);
    /* Another consumer before until: refused, names holder and until. */
    r = claim(e, i++, 3499, 8, IDX_CLAIM_ACQUIRE, 2000);
    cr_expect(r.status == TERN_ECLAIMED && r.count == 0 &&
              r.claim.holder == 7 && r.claim.until_ms == 3500);
    cr_expect_eq(row(e).holder, 7);
    /* At until (until <= t) it takes over; the generation moves. */
    r = claim(e, i++, 3500, 8, IDX_CLAIM_ACQUIRE, 1000);
    cr_expect(r.status == 0 && r.claim.holder == 8 &&
              r.claim.until_ms == 4500 && r.claim.generation == 2);
    /* The old holder's renewal is now a refused claim. */
    r = claim(e, i++, 3600, 7, IDX_CLAIM_ACQUIRE, 1000);
    cr_expect(r.status == TERN_ECLAIMED && r.claim.holder == 8);
    /* Release by a non-holder changes nothing. */
    r = claim(e, i++, 3600, 7, IDX_CLAIM_RELEASE, 0);
    cr_expect(r.status == 0 && r.count == 0 && r.claim.holder == 8);
    cr_expect_eq(row(e).holder, 8);
    /* Release by the holder: the row goes, anyone may claim at once. */
    r = claim(e, i++, 3600, 8, IDX_CLAIM_RELEASE, 0);
    cr_expect(r.status == 0 && r.count == 1);
    cr_expect_eq(row(e).holder, 0);
    r = claim(e, i++, 3601, 7, IDX_CLAIM_ACQUIRE, 1000);
    cr_expect(r.status == 0 && r.claim.holder == 7 && r.claim.generation == 1,
              "a fresh row starts again at 1");
    /* A claim of a missing queue. */
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 4000);
    idx_cmd_claim(&w, "nope", "g", 7, IDX_CLAIM_ACQUIRE, 10);
    cr_expect_eq(run1(e, i++, &w).status, TERN_ENOQUEUE);
    idx_close(e);
}

Test(index_claim, commits_are_refused_for_non_holders)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 5);
    /* Without a claim, both kinds of commit go through. */
    cr_expect_eq(commit(e, i++, 1000, 0, 1).status, 0);
    cr_expect_eq(commit(e, i++, 1000, 9, 2).status, 0);
    cr_expect_eq(offset(e), 2);
    cr_assert_eq(claim(e, i++, 1000, 7, IDX_CLAIM_ACQUIRE, 2000).status, 0);
    /* The holder commits. */
    cr_expect_eq(commit(e, i++, 1100, 7, 3).status, 0);
    cr_expect_eq(offset(e), 3);
    /* Another consumer and a plain commit are refused. */
    struct idx_result r = commit(e, i++, 1200, 8, 4);
    cr_expect(r.status == TERN_ECLAIMED && r.claim.holder == 7 &&
              r.claim.until_ms == 3000);
    r = commit(e, i++, 1200, 0, 4);
    cr_expect_eq(r.status, TERN_ECLAIMED);
    cr_expect_eq(offset(e), 3, "no refused commit moved the offset");
    /* 8 takes over after the lapse; 7's late commit is refused. */
    cr_assert_eq(claim(e, i++, 3000, 8, IDX_CLAIM_ACQUIRE, 2000).status, 0);
    r = commit(e, i++, 3001, 7, 5);
    cr_expect(r.status == TERN_ECLAIMED && r.claim.holder == 8);
    cr_expect_eq(commit(e, i++, 3002, 8, 4).status, 0);
    cr_expect_eq(offset(e), 4);
    /* A lapsed claim refuses nobody. */
    cr_expect_eq(commit(e, i++, 5000, 7, 5).status, 0);
    cr_expect_eq(commit(e, i++, 5000, 0, 5).status, 0);
    cr_expect_eq(offset(e), 5);
    idx_close(e);
}

Test(index_claim, shared_groups_refuse_claims)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 3);
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_shared_config(&w, "q", "g", 0, NULL);
    cr_assert_eq(run1(e, i++, &w).status, 0);
    struct idx_result r = claim(e, i++, 1000, 7, IDX_CLAIM_ACQUIRE, 1000);
    cr_expect(r.status == TERN_EINVAL && r.count == 0);
    cr_expect_eq(row(e).holder, 0);
    idx_close(e);
}

/* A workload of claims, takeovers and commits with checkpoints every
 * 1 KiB; "q" keeps no message, the bytes go to "fill", deleted at the
 * end, so that a snapshot may trim the whole head of the log. */
static void workload(struct idx_env *e)
{
    uint64_t i = 1, t = 1000;
    th_create(e, i++, "q");
    th_create(e, i++, "fill");
    for (int k = 0; k < 40; k++, t += 300) {
        uint64_t consumer = 1 + (uint64_t)(k % 3);
        (void)claim(e, i++, t, consumer, IDX_CLAIM_ACQUIRE, 500);
        (void)commit(e, i++, t, consumer, 0);
        (void)th_produce(e, i++, "fill", 0, 0, 1);
    }
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, t);
    idx_cmd_queue_delete(&w, "fill");
    cr_assert_eq(run1(e, i++, &w).status, 0);
}

Test(index_claim, checkpoints_keep_claims)
{
    struct idx_options oa = {
        .dir = th_dir_a, .segment_bytes = 2048, .checkpoint_bytes = 1024};
    struct idx_options ob = {
        .dir = th_dir_b, .segment_bytes = 2048, .checkpoint_bytes = 1024};
    struct idx_env *a = th_open_opts(&oa), *b = th_open_opts(&ob);
    workload(a);
    workload(b);
    struct idx_claim ca = row(a), cb = row(b);
    cr_expect(ca.holder != 0 && ca.generation > 1);
    cr_expect_eq(memcmp(&ca, &cb, sizeof ca), 0);
    char *files = th_log_files(th_dir_a, ".ckpt");
    cr_assert(files != NULL && strchr(files, '\n') != NULL,
              "the workload wrote checkpoints");
    char *first = strdup(files);
    *strchr(first, '\n') = '\0';
    char pa[4200], pb[4200];
    (void)snprintf(pa, sizeof pa, "%s/log/%s", th_dir_a, first);
    (void)snprintf(pb, sizeof pb, "%s/log/%s", th_dir_b, first);
    size_t na, nb;
    uint8_t *ba = th_read_file(pa, &na), *bb = th_read_file(pb, &nb);
    cr_expect(na == nb && memcmp(ba, bb, na) == 0, "same checkpoint bytes");
    /* The checkpoint holds a claims row (table id 18). */
    bool found = false;
    for (size_t k = 64; k + 7 <= na;) {
        uint16_t kl = tern_get_u16(ba + k + 1);
        uint32_t vl = tern_get_u32(ba + k + 3);
        found = found || ba[k] == 18;
        k += 7 + kl + vl;
    }
    cr_expect(found, "a claims row in %s", first);
    free(ba);
    free(bb);
    free(first);
    free(files);
    /* Trim the log head (two snapshots), reopen: the rebuild starts at
     * the checkpoint the log starts at and gives the same row. */
    struct tern_wbuf man;
    tern_wbuf_init(&man);
    cr_assert_eq(idx_snapshot(a, &man), 0, "%s", idx_errmsg(a));
    man.len = 0;
    cr_assert_eq(idx_snapshot(a, &man), 0, "%s", idx_errmsg(a));
    tern_wbuf_free(&man);
    cr_expect_gt(idx_log_start(a), 0, "the head was trimmed");
    idx_close(a);
    a = th_open_opts(&oa);
    cr_expect_gt(idx_log_start(a), 0);
    struct idx_claim c2 = row(a);
    cr_expect_eq(memcmp(&ca, &c2, sizeof ca), 0);
    idx_close(a);
    idx_close(b);
}

Test(index_claim, queue_delete_drops_claims)
{
    struct idx_env *e = th_open(th_dir_a, 0);
    uint64_t i = setup(e, 2);
    cr_assert_eq(claim(e, i++, 1000, 7, IDX_CLAIM_ACQUIRE, 60000).status, 0);
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_queue_delete(&w, "q");
    cr_expect_eq(run1(e, i++, &w).status, 0);
    /* A re-created queue of that name has no claim. */
    th_create(e, i++, "q");
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_eq(row(e).holder, 0);
    cr_expect_eq(claim(e, i++, 1001, 8, IDX_CLAIM_ACQUIRE, 1000).status, 0);
    unsigned n = 0;
    for (int k = 0; k < 100 && idx_clean_pending(e); k++) {
        cr_assert_eq(idx_clean_step(e, 4, &n), 0);
        cr_assert_eq(idx_flush(e), 0);
    }
    cr_expect(!idx_clean_pending(e));
    MDB_txn *txn;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_stat(txn, e->dbi_claims, &st), 0);
    mdb_txn_abort(txn);
    cr_expect_eq(st.ms_entries, 1, "the dead queue's claim is gone");
    cr_expect_eq(row(e).holder, 8);
    idx_close(e);
}
