/* Unit tests of checkpoints and the trimmed head of the commit log
 * (index/ckpt.c, snapshot.c "Retention", env.c rebuild_start): the same
 * checkpoints on every node, segments freed once no queue needs them, a
 * rebuild from the checkpoint the log starts at, a follower too far
 * behind fetching the leader's checkpoint through the bulk stream, and an
 * unusable checkpoint handled like damage (the log is dropped and fetched
 * again). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <idx.h>

#include "index_helpers.h"

TestSuite(index_ckpt, .init = th_dirs_init, .fini = th_dirs_fini);

#define SEG 4096

static struct idx_env *open_env(const char *dir, uint64_t seg, uint64_t ck)
{
    struct idx_options o = {
        .dir = dir, .segment_bytes = seg, .checkpoint_bytes = ck};
    return th_open_opts(&o);
}

static void group_commit(struct idx_env *e,
                         uint64_t index,
                         const char *q,
                         const char *g,
                         uint64_t next)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000 + index);
    idx_cmd_group_commit(&w, q, g, next);
    th_apply(e, index, &w, r, 1);
    cr_expect_eq(r[0].status, 0);
    tern_wbuf_free(&w);
}

static void delete_queue(struct idx_env *e, uint64_t index, const char *q)
{
    struct tern_wbuf w;
    struct idx_result r[1];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000 + index);
    idx_cmd_queue_delete(&w, q);
    th_apply(e, index, &w, r, 1);
    cr_expect_eq(r[0].status, 0);
    tern_wbuf_free(&w);
}

/* The workload: "old" fills many segments and is deleted, "keep" gets a
 * few messages and a group offset after that. Entries 1..last_index. */
static uint64_t workload(struct idx_env *e)
{
    uint64_t i = 1;
    th_create(e, i++, "old");
    for (int k = 0; k < 600; k++, i++) {
        (void)th_produce(e, i, "old", 7, (uint64_t)k + 1, 3);
    }
    delete_queue(e, i++, "old");
    th_create(e, i++, "keep");
    for (int k = 0; k < 10; k++, i++) {
        (void)th_produce(e, i, "keep", 9, (uint64_t)k + 1, 2);
    }
    group_commit(e, i++, "keep", "g", 5);
    cr_assert_eq(idx_flush(e), 0);
    return i - 1;
}

/* Two snapshots: the first only remembers its end (trimming never passes
 * the log end of the manifest before it), the second trims. */
static void snapshot_twice(struct idx_env *e, struct tern_wbuf *man)
{
    struct tern_wbuf first;
    tern_wbuf_init(&first);
    cr_assert_eq(idx_snapshot(e, &first), 0, "%s", idx_errmsg(e));
    tern_wbuf_free(&first);
    tern_wbuf_init(man);
    cr_assert_eq(idx_snapshot(e, man), 0, "%s", idx_errmsg(e));
}

static void expect_keep_same(struct idx_env *a, struct idx_env *b)
{
    struct th_msgs ma = {0}, mb = {0};
    cr_assert_eq(th_fetch_all(a, "keep", 7, 4096, &ma), 0);
    cr_assert_eq(th_fetch_all(b, "keep", 7, 4096, &mb), 0);
    cr_expect_eq(ma.n, 20);
    th_msgs_expect_eq(&ma, &mb);
    th_msgs_free(&ma);
    th_msgs_free(&mb);
    cr_expect_eq(idx_last_applied(a), idx_last_applied(b));
    uint64_t ga = 0, gb = 0;
    cr_expect_eq(idx_group_offset(a, "keep", "g", &ga), 0);
    cr_expect_eq(idx_group_offset(b, "keep", "g", &gb), 0);
    cr_expect_eq(ga, 5);
    cr_expect_eq(gb, 5);
}

Test(index_ckpt, same_checkpoints_on_every_node)
{
    /* Different segment sizes, the same checkpoint interval: the same
     * checkpoint files, byte for byte. */
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, 3000, SEG);
    (void)workload(a);
    (void)workload(b);
    th_expect_same_checkpoints(th_dir_a, th_dir_b, 6);
    idx_close(a);
    idx_close(b);
}

/* A deleted queue's group and producer rows are removed by each node's
 * cleaner at its own pace: checkpoints written while one node has
 * cleaned and the other not are still the same bytes. */
Test(index_ckpt, same_checkpoints_whatever_the_cleaner_did)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, SEG, SEG);
    struct idx_env *both[2] = {a, b};
    for (int n = 0; n < 2; n++) {
        struct idx_env *e = both[n];
        uint64_t i = 1;
        th_create(e, i++, "gone");
        for (int k = 0; k < 5; k++, i++) {
            (void)th_produce(e, i, "gone", 7, (uint64_t)k + 1, 2);
        }
        group_commit(e, i++, "gone", "g", 3);
        delete_queue(e, i++, "gone");
        cr_assert_eq(idx_flush(e), 0);
        if (e == a) { /* only a cleans */
            unsigned done = 256;
            for (int k = 0; k < 100 && done == 256; k++) {
                cr_assert_eq(idx_clean_step(e, 256, &done), 0, "%s",
                             idx_errmsg(e));
            }
            cr_assert_lt(done, 256);
            cr_assert(!idx_clean_pending(e));
        }
        th_create(e, i++, "keep");
        for (int k = 0; k < 300; k++, i++) {
            (void)th_produce(e, i, "keep", 9, (uint64_t)k + 1, 3);
        }
        cr_assert_eq(idx_flush(e), 0);
    }
    th_expect_same_checkpoints(th_dir_a, th_dir_b, 3);
    idx_close(a);
    idx_close(b);
}

Test(index_ckpt, trim_frees_segments_and_reopen_rebuilds)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *ref = open_env(th_dir_b, SEG, SEG);
    struct tern_wbuf man;
    (void)workload(a);
    (void)workload(ref);
    int segs_before = th_count_segments(th_dir_a);
    uint64_t disk_before = idx_disk_bytes(a);
    snapshot_twice(a, &man);
    cr_expect_gt(idx_log_start(a), 0, "the head was trimmed");
    cr_expect_lt(th_count_segments(th_dir_a), segs_before / 4,
                 "segments of the deleted queue are gone (%d of %d left)",
                 th_count_segments(th_dir_a), segs_before);
    cr_expect_lt(idx_disk_bytes(a), disk_before / 4);
    expect_keep_same(a, ref);

    /* Reopen: the rebuild starts at the checkpoint the log starts at. */
    uint64_t start = idx_log_start(a);
    idx_close(a);
    a = open_env(th_dir_a, SEG, SEG);
    cr_expect_eq(idx_log_start(a), start);
    cr_expect_eq(idx_truncated_bytes(a), 0, "%s", idx_cut_note(a));
    expect_keep_same(a, ref);
    /* Both go on alike. */
    uint64_t next = idx_last_applied(a) + 1;
    (void)th_produce(a, next, "keep", 9, 11, 4);
    (void)th_produce(ref, next, "keep", 9, 11, 4);
    cr_assert_eq(idx_flush(a), 0);
    cr_assert_eq(idx_flush(ref), 0);
    struct th_msgs ma = {0}, mr = {0};
    cr_assert_eq(th_fetch_all(a, "keep", 100, 1 << 20, &ma), 0);
    cr_assert_eq(th_fetch_all(ref, "keep", 100, 1 << 20, &mr), 0);
    cr_expect_eq(ma.n, 24);
    th_msgs_expect_eq(&ma, &mr);
    th_msgs_free(&ma);
    th_msgs_free(&mr);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(ref);
}

/* Copy the bulk range b lacks from a, in chunks. */
static void fetch(struct idx_env *a,
                  struct idx_env *b,
                  const struct tern_wbuf *man,
                  size_t chunk,
                  uint64_t stop_after)
{
    uint64_t from, to, copied = 0;
    uint8_t *buf = malloc(chunk);
    cr_assert_eq(idx_bulk_range(b, man->base, man->len, &from, &to), 0, "%s",
                 idx_errmsg(b));
    for (uint64_t pos = from; pos < to && copied < stop_after;) {
        size_t n = 0;
        size_t want = (size_t)TERN_MIN((uint64_t)chunk, to - pos);
        cr_assert_eq(idx_bulk_read(a, pos, buf, want, &n), 0, "%s",
                     idx_errmsg(a));
        cr_assert_gt(n, 0);
        cr_assert_eq(idx_bulk_write(b, pos, buf, n), 0, "%s", idx_errmsg(b));
        pos += n;
        copied += n;
    }
    free(buf);
}

Test(index_ckpt, far_behind_follower_starts_from_the_leaders_checkpoint)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, 3000, SEG);
    struct tern_wbuf man;
    (void)workload(a);
    snapshot_twice(a, &man);
    cr_assert_gt(idx_log_start(a), 0);

    /* b applied a few entries of its own history: far behind a's start. */
    th_create(b, 1, "old");
    (void)th_produce(b, 2, "old", 7, 1, 3);
    cr_assert_eq(idx_flush(b), 0);
    uint64_t from, to;
    cr_assert_eq(idx_bulk_range(b, man.base, man.len, &from, &to), 0);
    cr_expect_lt(from, idx_log_start(a),
                 "the stream starts with the "
                 "checkpoint, before the leader's log start");

    /* An abandoned part-fetch of the checkpoint leaves b as it was. */
    fetch(a, b, &man, 100, 300);
    cr_expect_eq(idx_last_applied(b), 2);
    cr_expect_eq(idx_status(b), 0);

    /* The rest, in odd chunks; the restore indexes the log after it. */
    fetch(a, b, &man, 777, UINT64_MAX);
    cr_expect_eq(idx_log_start(b), idx_log_start(a));
    cr_assert_eq(idx_restore(b, man.base, man.len), 0, "%s", idx_errmsg(b));
    expect_keep_same(a, b);
    struct th_msgs m = {0};
    cr_expect_eq(th_fetch_all(b, "old", 10, 4096, &m), TERN_ENOQUEUE,
                 "b's own old queue is gone with its old state");
    th_msgs_free(&m);

    /* Reopen b: it rebuilds from the fetched checkpoint. */
    idx_close(b);
    b = open_env(th_dir_b, 3000, SEG);
    cr_expect_eq(idx_truncated_bytes(b), 0, "%s", idx_cut_note(b));
    expect_keep_same(a, b);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

Test(index_ckpt, unusable_start_checkpoint_drops_the_log)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct tern_wbuf man;
    (void)workload(a);
    snapshot_twice(a, &man);
    uint64_t start = idx_log_start(a);
    cr_assert_gt(start, 0);
    idx_close(a);
    char p[4096];
    (void)snprintf(p, sizeof p, "%s/log/%020llu.ckpt", th_dir_a,
                   (unsigned long long)start);
    th_flip_byte(p, th_file_size(p) - 3);
    a = open_env(th_dir_a, SEG, SEG);
    cr_expect_eq(idx_last_applied(a), 0, "nothing can be indexed");
    cr_expect_eq(idx_log_end(a), 0);
    cr_expect_gt(idx_truncated_bytes(a), 0);
    cr_expect(strstr(idx_cut_note(a), "checksum") != NULL, "%s",
              idx_cut_note(a));
    /* Like any damage: the manifest's bytes come from a peer. */
    struct idx_env *peer = open_env(th_dir_b, SEG, SEG);
    struct tern_wbuf pman;
    (void)workload(peer);
    snapshot_twice(peer, &pman);
    cr_expect_eq(idx_restore(a, pman.base, pman.len), TERN_EINVAL);
    fetch(peer, a, &pman, 4096, UINT64_MAX);
    cr_assert_eq(idx_restore(a, pman.base, pman.len), 0, "%s", idx_errmsg(a));
    expect_keep_same(a, peer);
    tern_wbuf_free(&man);
    tern_wbuf_free(&pman);
    idx_close(a);
    idx_close(peer);
}

/* A checkpoint a later release wrote (valid header, unknown version) is
 * not damage: the directory is refused, the log it stands for is kept. */
Test(index_ckpt, checkpoint_of_a_later_version_refuses_the_directory)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct tern_wbuf man;
    (void)workload(a);
    snapshot_twice(a, &man);
    uint64_t start = idx_log_start(a), end = idx_log_end(a);
    cr_assert_gt(start, 0);
    idx_close(a);
    tern_wbuf_free(&man);
    char p[4096];
    (void)snprintf(p, sizeof p, "%s/log/%020llu.ckpt", th_dir_a,
                   (unsigned long long)start);
    size_t n;
    uint8_t *b = th_read_file(p, &n);
    tern_put_u32(b + 8, 2);                       /* version */
    tern_put_u32(b + 60, tern_checksum32(b, 60)); /* header checksum */
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
    char *before = th_log_files(th_dir_a, ".ckpt");
    struct idx_options o = {
        .dir = th_dir_a, .segment_bytes = SEG, .checkpoint_bytes = SEG};
    struct idx_env *e = NULL;
    char err[TERN_ERRMSG_SIZE] = "";
    cr_expect_eq(idx_open(&o, &e, err), TERN_EVERSION, "%s", err);
    cr_expect(strstr(err, "has version 2") != NULL, "%s", err);
    char *after = th_log_files(th_dir_a, ".ckpt");
    cr_expect_str_eq(after, before, "no checkpoint removed");
    free(before);
    free(after);
    /* Put back, the directory opens with every record. */
    b = th_read_file(p, &n);
    tern_put_u32(b + 8, 1);
    tern_put_u32(b + 60, tern_checksum32(b, 60));
    f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
    a = open_env(th_dir_a, SEG, SEG);
    cr_expect_eq(idx_log_start(a), start);
    cr_expect_eq(idx_log_end(a), end);
    cr_expect_eq(idx_truncated_bytes(a), 0);
    idx_close(a);
}

Test(index_ckpt, version_one_manifest_still_read)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, SEG, SEG);
    struct tern_wbuf man;
    tern_wbuf_init(&man);
    (void)workload(a);
    cr_assert_eq(idx_snapshot(a, &man), 0);
    /* The same manifest as version 1 wrote it: 40 bytes. */
    uint8_t v1[40];
    memcpy(v1, man.base, 36);
    tern_put_u16(v1 + 4, 1);
    tern_put_u32(v1 + 36, tern_checksum32(v1, 36));
    struct tern_wbuf m1 = {.base = v1, .len = sizeof v1};
    fetch(a, b, &m1, 4096, UINT64_MAX);
    cr_assert_eq(idx_restore(b, v1, sizeof v1), 0, "%s", idx_errmsg(b));
    expect_keep_same(a, b);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

/* Retention by count (drop-oldest, applied as the leader's TRIMs) frees
 * the head of the log without a queue delete, and the rebuild from the
 * checkpoint replays the TRIMs without the rows of the messages they
 * drop; one node's cleaner running and the other's not changes neither
 * the checkpoints nor what a rebuild gives. */
Test(index_ckpt, retention_by_count_frees_segments)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, 3000, SEG);
    struct idx_env *envs[2] = {a, b};
    struct idx_queue_settings qs;
    idx_queue_settings_default(&qs);
    qs.max_messages = 30;
    struct tern_wbuf w;
    struct idx_result r[1];
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1000);
    idx_cmd_queue_create_opts(&w, "ring", &qs);
    for (int j = 0; j < 2; j++) {
        th_apply(envs[j], 1, &w, r, 1);
        cr_assert_eq(r[0].status, 0);
    }
    /* The same log on both: each produce, then the TRIM a leader (a)
     * plans from its flushed index. */
    uint64_t index = 2;
    for (uint64_t k = 1; k <= 700; k++) {
        for (int j = 0; j < 2; j++) {
            struct idx_result pr = th_produce(envs[j], index, "ring", 3, k, 3);
            cr_assert_eq(pr.status, 0, "produce %llu: %d",
                         (unsigned long long)k, pr.status);
            cr_assert_eq(idx_flush(envs[j]), 0);
        }
        index++;
        struct idx_trim_plan p;
        cr_assert_eq(idx_trim_plan(a, "ring", 2000, 100000, &p), 0);
        if (p.to > p.from) {
            idx_cmd_begin(&w, 2000);
            idx_cmd_trim(&w, "ring", p.queue_id, p.from, p.to, p.bytes);
            for (int j = 0; j < 2; j++) {
                th_apply(envs[j], index, &w, r, 1);
                cr_assert_eq(r[0].status, 0);
            }
            index++;
        }
    }
    tern_wbuf_free(&w);
    for (int j = 0; j < 2; j++) {
        cr_assert_eq(idx_flush(envs[j]), 0);
    }
    /* Only a cleans its rows below the low watermark. */
    unsigned done = 0;
    do {
        cr_assert_eq(idx_clean_step(a, 256, &done), 0, "%s", idx_errmsg(a));
    } while (done == 256);
    char *na = th_log_files(th_dir_a, ".ckpt"),
         *nb = th_log_files(th_dir_b, ".ckpt");
    cr_expect_str_eq(na, nb);
    free(na);
    free(nb);

    int segs_before = th_count_segments(th_dir_a);
    struct tern_wbuf man;
    snapshot_twice(a, &man);
    cr_expect_gt(idx_log_start(a), 0);
    cr_expect_leq(th_count_segments(th_dir_a), 3,
                  "30 retained messages need at most the last segments "
                  "(%d of %d left)",
                  th_count_segments(th_dir_a), segs_before);
    struct th_msgs ma = {0}, mb = {0};
    cr_assert_eq(th_fetch_all(b, "ring", 100, 1 << 20, &mb), 0);
    cr_expect_eq(mb.n, 30, "%zu retained", mb.n);
    idx_close(a);
    a = open_env(th_dir_a, SEG, SEG);
    cr_expect_eq(idx_truncated_bytes(a), 0, "%s", idx_cut_note(a));
    cr_assert_eq(th_fetch_all(a, "ring", 100, 1 << 20, &ma), 0);
    th_msgs_expect_eq(&ma, &mb);
    th_msgs_free(&ma);
    th_msgs_free(&mb);
    tern_wbuf_free(&man);
    idx_close(a);
    idx_close(b);
}

/* ---- Entries a node recorded without applying them ------------------------
 */

/* Positions of the checkpoint files of dir, ascending; *n of them. */
static uint64_t *ckpt_positions(const char *dir, size_t *n)
{
    char *names = th_log_files(dir, ".ckpt");
    uint64_t *v = calloc(strlen(names) / 25 + 1, sizeof *v);
    cr_assert_not_null(v);
    *n = 0;
    for (char *l = strtok(names, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        v[(*n)++] = strtoull(l, NULL, 10);
    }
    free(names);
    return v;
}

static uint8_t *ckpt_bytes(const char *dir, uint64_t pos, size_t *len)
{
    char p[4096];
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/log/%020llu.ckpt", dir,
                                  (unsigned long long)pos),
                 sizeof p);
    return th_read_file(p, len);
}

/* Do dir a and dir b hold the same checkpoint file at pos? */
static bool same_ckpt(const char *da, const char *db, uint64_t pos)
{
    size_t la, lb;
    uint8_t *ba = ckpt_bytes(da, pos, &la), *bb = ckpt_bytes(db, pos, &lb);
    bool same = la == lb && memcmp(ba, bb, la) == 0;
    free(ba);
    free(bb);
    return same;
}

/* Entries 1..last: "keep" created, then produces of 3 messages, except
 * entry `special`, the ended entry *special_w (applied with idx_apply as
 * it is: it may be refused). Its log position in *special_pos. */
static void run_with(struct idx_env *e,
                     uint64_t special,
                     struct tern_wbuf *special_w,
                     uint64_t last,
                     uint64_t *special_pos,
                     int want_status)
{
    uint64_t seq = 1;
    th_create(e, 1, "keep");
    for (uint64_t i = 2; i <= last; i++) {
        if (i != special) {
            struct idx_result r = th_produce(e, i, "keep", 9, seq++, 3);
            cr_assert_eq(r.status, 0, "%s", tern_strerror(r.status));
            continue;
        }
        struct idx_result r[2];
        unsigned n = 0;
        *special_pos = idx_log_end(e);
        cr_assert_eq(idx_apply(e, i, special_w->base, special_w->len, r, 2, &n),
                     0, "%s", idx_errmsg(e));
        cr_assert_eq(n, 2);
        cr_expect_eq(r[0].status, want_status, "%s",
                     tern_strerror(r[0].status));
    }
    cr_assert_eq(idx_flush(e), 0);
}

/* A group commit of "keep"/"g" to 5 and a TERM in one entry. With
 * `later`, the TERM's type byte becomes 200: a command of a later release
 * (the same length), which this build does not know. */
static void commit_and_term(struct tern_wbuf *w, bool later, bool xxh3)
{
    idx_cmd_begin(w, 1150); /* the time produces around entry 150 carry */
    idx_cmd_group_commit(w, "keep", "g", 5);
    idx_cmd_term(w, 3);
    cr_assert_eq(idx_cmd_end(w), 0);
    if (later) {
        w->base[w->len - 13] = 200; /* u8 type, u32 length, u64 term */
    }
    if (xxh3) {
        idx_cmd_flag_xxh3(w);
    }
    th_entry_reseal(w->base, w->len);
}

/* A node meets an entry of a later release (a command type it does not
 * know): it records it unapplied (TERN_EMALFORMED), as its peers on that
 * release do not, so its state lacks the entry from there on. Its
 * checkpoints up to the entry are its peers' bytes; after it, it writes
 * none (a checkpoint there would carry the gap into a rebuild from it, a
 * trim and a peer's catch-up), also after a reopen that meets it again. */
Test(index_ckpt, an_entry_of_a_later_release_stops_the_checkpoints_after_it)
{
    struct idx_env *a = open_env(th_dir_a, SEG, SEG);
    struct idx_env *b = open_env(th_dir_b, SEG, SEG); /* the peers */
    struct tern_wbuf wa, wb;
    uint64_t pa = 0, pb = 0, pos = 0;
    tern_wbuf_init(&wa);
    tern_wbuf_init(&wb);
    commit_and_term(&wa, true, false);
    commit_and_term(&wb, false, false);
    cr_assert_eq(wa.len, wb.len);
    cr_assert_neq(idx_cmd_validate(wa.base, wa.len), 0);
    run_with(a, 150, &wa, 400, &pa, TERN_EMALFORMED);
    run_with(b, 150, &wb, 400, &pb, 0);
    cr_assert_eq(pa, pb);
    cr_expect(idx_refused_newer(a, &pos));
    cr_expect_eq(pos, pa);
    cr_expect(!idx_refused_newer(b, NULL));
    uint64_t g = 99;
    cr_expect_eq(idx_group_offset(a, "keep", "g", &g), 0);
    cr_expect_eq(g, 0, "a lacks the commit");
    cr_expect_eq(idx_group_offset(b, "keep", "g", &g), 0);
    cr_expect_eq(g, 5);

    for (int round = 0; round < 2; round++) {
        size_t na, nb, before = 0, after = 0;
        uint64_t *ca = ckpt_positions(th_dir_a, &na);
        uint64_t *cb = ckpt_positions(th_dir_b, &nb);
        for (size_t k = 0; k < nb; k++) {
            if (cb[k] <= pa) {
                cr_expect(k < na && ca[k] == cb[k] &&
                              same_ckpt(th_dir_a, th_dir_b, cb[k]),
                          "round %d: checkpoint %llu is the peers' bytes",
                          round, (unsigned long long)cb[k]);
                before++;
            } else {
                after++;
            }
        }
        cr_expect_geq(before, 3, "round %d", round);
        cr_expect_geq(after, 3, "round %d", round);
        cr_expect_eq(na, before, "round %d: none after %llu on a", round,
                     (unsigned long long)pa);
        free(ca);
        free(cb);
        if (round == 0) {
            /* Reopened on this build: the rebuild meets it again. */
            idx_close(a);
            a = open_env(th_dir_a, SEG, SEG);
            cr_expect_eq(idx_truncated_bytes(a), 0, "%s", idx_cut_note(a));
            pos = 0;
            cr_expect(idx_refused_newer(a, &pos));
            cr_expect_eq(pos, pa);
        }
    }
    struct th_msgs ma = {0}, mb = {0};
    cr_assert_eq(th_fetch_all(a, "keep", 100, 1 << 20, &ma), 0);
    cr_assert_eq(th_fetch_all(b, "keep", 100, 1 << 20, &mb), 0);
    cr_expect_eq(ma.n, 3 * 398);
    th_msgs_expect_eq(&ma, &mb);
    th_msgs_free(&ma);
    th_msgs_free(&mb);
    tern_wbuf_free(&wa);
    tern_wbuf_free(&wb);
    idx_close(a);
    idx_close(b);
}

/* Rewrite the record at stream position pos of dir's one segment as
 * version 1 (XXH32 over header bytes [0,20) and the payload), and the
 * segment's header as version 1: what an earlier release, which knew no
 * XXH3, wrote for an XXH3 entry it could not apply. */
static void as_earlier_release(const char *dir, uint64_t pos)
{
    char *seg = th_last_segment(dir);
    size_t len;
    uint8_t *b = th_read_file(seg, &len);
    uint8_t *r = b + 32 + pos;
    cr_assert_lt(32 + pos + 24, len);
    uint32_t plen = tern_get_u32(r + 16);
    struct tern_checksum_state st;
    tern_put_u16(r + 4, 1);
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, r, 20);
    tern_checksum32_update(&st, r + 24, plen);
    tern_put_u32(r + 20, tern_checksum32_end(&st));
    tern_put_u32(b + 8, 1);
    tern_put_u32(b + 28, tern_checksum32(b, 28));
    FILE *f = fopen(seg, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(b, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
    free(b);
    free(seg);
}

/* An earlier release (version 1 segments, no XXH3) that met an XXH3
 * entry recorded it unapplied in a record of version 1 and went on
 * writing checkpoints without it. This build's rebuild applies the entry
 * and writes those checkpoints again, so that a rebuild from one (once
 * the head is trimmed to it) or a peer fetching one gets the state with
 * the entry. */
Test(
    index_ckpt,
    checkpoints_an_earlier_release_wrote_without_an_xxh3_entry_are_written_again)
{
    struct idx_env *a = open_env(th_dir_a, 1 << 20, SEG);
    struct idx_env *b = open_env(th_dir_b, 1 << 20, SEG);
    struct tern_wbuf wa, wb;
    uint64_t pa = 0, pb = 0;
    tern_wbuf_init(&wa);
    tern_wbuf_init(&wb);
    commit_and_term(&wa, false, true);
    commit_and_term(&wb, false, true);
    wb.base[20] ^= 0x55; /* damaged: refused alike, the same length */
    run_with(a, 150, &wa, 400, &pa, 0);
    run_with(b, 150, &wb, 400, &pb, TERN_EMALFORMED);
    cr_assert_eq(pa, pb);
    cr_expect(!idx_refused_newer(b, NULL), "damage is no later release");
    idx_close(a);
    idx_close(b);

    /* b's checkpoints after the entry are what the earlier release wrote
     * (without it): copy them over a's, keeping a's to compare. */
    size_t na, nb, after = 0;
    uint64_t *ca = ckpt_positions(th_dir_a, &na);
    uint64_t *cb = ckpt_positions(th_dir_b, &nb);
    cr_assert_eq(na, nb);
    char *keep = th_tmpdir();
    char sub[4096];
    cr_assert_lt((size_t)snprintf(sub, sizeof sub, "%s/log", keep), sizeof sub);
    cr_assert_eq(mkdir(sub, 0700), 0);
    for (size_t k = 0; k < na; k++) {
        cr_assert_eq(ca[k], cb[k]);
        char from[4096], to[4096], mine[4096];
        (void)snprintf(from, sizeof from, "%s/log/%020llu.ckpt", th_dir_b,
                       (unsigned long long)ca[k]);
        (void)snprintf(to, sizeof to, "%s/log/%020llu.ckpt", th_dir_a,
                       (unsigned long long)ca[k]);
        (void)snprintf(mine, sizeof mine, "%s/log/%020llu.ckpt", keep,
                       (unsigned long long)ca[k]);
        if (ca[k] <= pa) {
            cr_expect(same_ckpt(th_dir_a, th_dir_b, ca[k]));
            continue;
        }
        cr_expect(!same_ckpt(th_dir_a, th_dir_b, ca[k]), "%llu lacks the entry",
                  (unsigned long long)ca[k]);
        th_copy_file(to, mine);
        th_copy_file(from, to);
        after++;
    }
    cr_assert_geq(after, 3);
    as_earlier_release(th_dir_a, pa);

    a = open_env(th_dir_a, 1 << 20, SEG);
    cr_expect_eq(idx_truncated_bytes(a), 0, "%s", idx_cut_note(a));
    cr_expect_eq(idx_last_applied(a), 400);
    uint64_t g = 0;
    cr_expect_eq(idx_group_offset(a, "keep", "g", &g), 0);
    cr_expect_eq(g, 5);
    for (size_t k = 0; k < na; k++) {
        if (ca[k] > pa) {
            cr_expect(same_ckpt(th_dir_a, keep, ca[k]),
                      "checkpoint %llu written again with the entry",
                      (unsigned long long)ca[k]);
        }
    }
    /* This build's checkpoints (in its version 2 segments) are its own:
     * kept as they are, even past the record (a changed byte stays). */
    uint64_t seq = 1000;
    for (uint64_t i = 401; idx_log_end(a) < ca[na - 1] + 3 * SEG; i++) {
        (void)th_produce(a, i, "keep", 9, seq++, 3);
    }
    cr_assert_eq(idx_flush(a), 0);
    idx_close(a);
    size_t n2;
    uint64_t *c2 = ckpt_positions(th_dir_a, &n2);
    cr_assert_geq(n2, na + 2);
    char mark[4096];
    (void)snprintf(mark, sizeof mark, "%s/log/%020llu.ckpt", th_dir_a,
                   (unsigned long long)c2[n2 - 1]);
    size_t mlen;
    uint8_t *mb = th_read_file(mark, &mlen);
    cr_assert_gt(mlen, 80);
    th_flip_byte(mark, 70);
    a = open_env(th_dir_a, 1 << 20, SEG);
    cr_expect_eq(idx_truncated_bytes(a), 0, "%s", idx_cut_note(a));
    size_t mlen2;
    uint8_t *mb2 = th_read_file(mark, &mlen2);
    cr_expect(mlen2 == mlen && mb2[70] == (uint8_t)(mb[70] ^ 0x5a) &&
                  memcmp(mb2, mb, 70) == 0,
              "a version 2 segment's checkpoint is not written again");
    free(mb);
    free(mb2);
    free(c2);
    idx_close(a);
    free(ca);
    free(cb);
    th_rmdir(keep);
    tern_wbuf_free(&wa);
    tern_wbuf_free(&wb);
}
