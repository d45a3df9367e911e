/* Unit tests of recovery at idx_open (index/env.c, index/log.c): torn and
 * corrupt tails, LMDB lost, behind or ahead of the log, bad segments,
 * corruption in the middle detected by fetch, and disk full (ENOSPC) on a
 * small tmpfs; the modes index/ creates its files and directories with. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

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
    char mnt[4096];
    /* The ENOSPC test mounts a tmpfs here; never leave it behind, even
     * when an assertion aborted the test before its own umount. */
    if ((size_t)snprintf(mnt, sizeof mnt, "%s/mnt", dir) < sizeof mnt) {
        (void)umount2(mnt, MNT_DETACH);
    }
    th_rmdir(dir);
    dir = NULL;
}

TestSuite(index_recovery, .init = setup, .fini = teardown);

#define N 11
/* Log end after applying index i (ends[0] = 0). */
static uint64_t ends[N + 1];

/* Index 1 creates "q" (and "r"), 2..N produce 3 messages each into "q";
 * group g commits at 4; producer 9 dedups on "r". Applies indexes
 * from..to of that sequence, recording each log end in ends[]. */
static void populate_range(struct idx_env *e, uint64_t from, uint64_t to)
{
    struct tern_wbuf w;
    struct idx_result r[2];
    tern_wbuf_init(&w);
    for (uint64_t i = from; i <= to; i++) {
        if (i == 1) {
            idx_cmd_begin(&w, 1000);
            idx_cmd_queue_create(&w, "q");
            idx_cmd_queue_create(&w, "r");
            th_apply(e, 1, &w, r, 2);
        } else if (i == 4) {
            struct idx_msg m = {"dedup", 5};
            idx_cmd_begin(&w, 2000);
            idx_cmd_group_commit(&w, "q", "g", 3);
            idx_cmd_produce(&w, "r", 9, 1, &m, 1);
            th_apply(e, i, &w, r, 2);
        } else {
            th_produce(e, i, "q", 0, i, 3);
        }
        ends[i] = idx_log_end(e);
    }
    tern_wbuf_free(&w);
}

static void populate(struct idx_env *e)
{
    populate_range(e, 1, N);
}

/* A fresh env in dir with the whole sequence applied, closed again. */
static void populate_closed(uint64_t segment_bytes)
{
    struct idx_env *e = th_open(dir, segment_bytes);
    populate(e);
    idx_close(e);
}

/* Reopen dir and check what recovery found: the bytes it cut from the
 * log tail and the last applied index. */
static struct idx_env *reopen_expect(uint64_t segment_bytes,
                                     uint64_t truncated,
                                     uint64_t last_applied)
{
    struct idx_env *e = th_open(dir, segment_bytes);
    cr_expect_eq(idx_truncated_bytes(e), truncated);
    cr_expect_eq(idx_last_applied(e), last_applied);
    return e;
}

static char *segment0(void)
{
    char *p = malloc(4096);
    cr_assert_lt((size_t)snprintf(p, 4096, "%s/log/%020llu.seg", dir, 0ULL),
                 4096);
    return p;
}

/* Messages "q" must hold after applying indexes 1..last. */
static void expect_q_upto(struct idx_env *e, uint64_t last)
{
    struct th_msgs m = {0};
    size_t k = 0;
    cr_assert_eq(th_fetch_all(e, "q", 5, 1 << 20, &m), 0);
    for (uint64_t i = 2; i <= last; i++) {
        if (i == 4) {
            continue;
        }
        for (uint32_t j = 0; j < 3; j++, k++) {
            char text[96];
            th_msg_text(text, sizeof text, "q", i, j);
            cr_assert_lt(k, m.n);
            cr_assert_str_eq(m.v[k].data, text);
        }
    }
    cr_assert_eq(m.n, k);
    th_msgs_free(&m);
}

Test(index_recovery, clean_reopen)
{
    struct idx_env *e;
    populate_closed(0);
    e = reopen_expect(0, 0, N);
    cr_expect_eq(idx_log_end(e), ends[N]);
    expect_q_upto(e, N);
    idx_close(e);
}

Test(index_recovery, torn_record_truncated)
{
    struct idx_env *e;
    populate_closed(0);
    char *seg = segment0();
    th_truncate(seg, (off_t)(32 + ends[N - 1] + 10));
    e = reopen_expect(0, 10, N - 1);
    cr_expect_eq(idx_log_end(e), ends[N - 1]);
    cr_expect_eq(th_file_size(seg), (off_t)(32 + ends[N - 1]));
    expect_q_upto(e, N - 1);
    /* The lost entry is re-applied by Raft and lands where it was. */
    th_produce(e, N, "q", 0, N, 3);
    cr_expect_eq(idx_log_end(e), ends[N]);
    cr_assert_eq(idx_flush(e), 0);
    expect_q_upto(e, N);
    idx_close(e);
    /* Torn inside the record header. */
    th_truncate(seg, (off_t)(32 + ends[N - 1] + 5));
    e = reopen_expect(0, 5, N - 1);
    idx_close(e);
    free(seg);
}

Test(index_recovery, garbage_tail_truncated)
{
    struct idx_env *e;
    populate_closed(0);
    char *seg = segment0();
    char junk[100];
    memset(junk, 0xab, sizeof junk);
    th_append(seg, junk, sizeof junk);
    e = reopen_expect(0, 100, N);
    cr_expect_eq(idx_log_end(e), ends[N]);
    expect_q_upto(e, N);
    idx_close(e);
    /* A valid but stale record (raft index not increasing) ends the log. */
    uint8_t *rec = malloc(ends[3] - ends[2]);
    FILE *f = fopen(seg, "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, (long)(32 + ends[2]), SEEK_SET), 0);
    cr_assert_eq(fread(rec, 1, ends[3] - ends[2], f), ends[3] - ends[2]);
    (void)fclose(f);
    th_append(seg, rec, ends[3] - ends[2]);
    e = reopen_expect(0, ends[3] - ends[2], N);
    idx_close(e);
    free(rec);
    free(seg);
}

Test(index_recovery, flipped_byte_in_last_record)
{
    struct idx_env *e;
    populate_closed(0);
    char *seg = segment0();
    th_flip_byte(seg, (off_t)(32 + ends[N - 1] + 24 + 7));
    e = reopen_expect(0, ends[N] - ends[N - 1], N - 1);
    expect_q_upto(e, N - 1);
    idx_close(e);
    /* Flipped byte in the last record's header. */
    e = th_open(dir, 0);
    th_produce(e, N, "q", 0, N, 3);
    idx_close(e);
    th_flip_byte(seg, (off_t)(32 + ends[N - 1] + 9));
    e = reopen_expect(0, ends[N] - ends[N - 1], N - 1);
    idx_close(e);
    free(seg);
}

static void rm_lmdb(void)
{
    char p[4096];
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/data.mdb", dir),
                 sizeof p);
    cr_assert_eq(unlink(p), 0);
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/lock.mdb", dir),
                 sizeof p);
    unlink(p);
}

Test(index_recovery, lmdb_lost_is_rebuilt)
{
    struct idx_env *e = th_open(dir, 300);
    populate(e);
    cr_assert_eq(idx_flush(e), 0);
    struct th_msgs before = {0}, after = {0};
    cr_assert_eq(th_fetch_all(e, "q", 4, 1000, &before), 0);
    idx_close(e);
    rm_lmdb();
    e = reopen_expect(300, 0, N);
    cr_assert_eq(th_fetch_all(e, "q", 4, 1000, &after), 0);
    th_msgs_expect_eq(&before, &after);
    uint64_t off;
    cr_assert_eq(idx_group_offset(e, "q", "g", &off), 0);
    cr_expect_eq(off, 3);
    /* Producer state rebuilt too: a retry is still a duplicate. */
    struct tern_wbuf w;
    struct idx_result r[1];
    struct idx_msg m = {"dedup", 5};
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_produce(&w, "r", 9, 1, &m, 1);
    th_apply(e, N + 1, &w, r, 1);
    cr_expect_eq(r[0].duplicate, 1);
    cr_expect_eq(r[0].base_offset, 0);
    cr_expect_eq(r[0].count, 1);
    tern_wbuf_free(&w);
    th_msgs_free(&before);
    th_msgs_free(&after);
    idx_close(e);

    /* An unreadable LMDB file is treated the same way. */
    char p[4096];
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/data.mdb", dir),
                 sizeof p);
    th_truncate(p, 0);
    th_append(p, "this is not an lmdb file, not at all........", 44);
    e = th_open(dir, 300);
    cr_expect_eq(idx_last_applied(e), N + 1);
    expect_q_upto(e, N);
    idx_close(e);
}

Test(index_recovery, lmdb_behind_is_reindexed)
{
    char p[4096], save[4096];
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/data.mdb", dir),
                 sizeof p);
    cr_assert_lt((size_t)snprintf(save, sizeof save, "%s/old.mdb", dir),
                 sizeof save);
    struct idx_env *e;
    populate_closed(200);
    th_rmdir(dir);
    dir = th_tmpdir();
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/data.mdb", dir),
                 sizeof p);
    cr_assert_lt((size_t)snprintf(save, sizeof save, "%s/old.mdb", dir),
                 sizeof save);

    e = th_open(dir, 200);
    populate_range(e, 1, 6);
    cr_assert_eq(idx_sync(e), 0);
    th_copy_file(p, save);
    populate_range(e, 7, N);
    idx_close(e);
    th_copy_file(save, p);
    e = reopen_expect(200, 0, N);
    expect_q_upto(e, N);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, (N - 2) * 3);
    idx_close(e);
}

Test(index_recovery, lmdb_ahead_is_rebuilt)
{
    struct idx_env *e;
    populate_closed(0);
    char *seg = segment0();
    /* The log lost its last entries at a clean record boundary. */
    th_truncate(seg, (off_t)(32 + ends[8]));
    e = reopen_expect(0, 0, 8);
    cr_expect_eq(idx_log_end(e), ends[8]);
    expect_q_upto(e, 8);
    struct idx_queue_info qi;
    cr_assert_eq(idx_queue_get(e, "q", &qi), 0);
    cr_expect_eq(qi.next_offset, 6 * 3);
    idx_close(e);
    free(seg);
}

Test(index_recovery, bad_segment_header_cuts_log)
{
    struct idx_env *e;
    populate_closed(100);
    int nseg = th_count_segments(dir);
    cr_assert_gt(nseg, 4);
    /* Damage the header of the segment holding the start of record 8. */
    char p[4096];
    uint64_t start = 0;
    for (uint64_t i = 1; i <= N; i++) {
        cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/log/%020llu.seg", dir,
                                      (unsigned long long)ends[i]),
                     sizeof p);
        if (i >= 7 && access(p, F_OK) == 0) {
            start = ends[i];
            break;
        }
    }
    cr_assert_gt(start, 0, "a segment starts on a record boundary");
    th_flip_byte(p, 3);
    e = th_open(dir, 100);
    cr_expect_eq(idx_log_end(e), start);
    cr_expect_gt(idx_truncated_bytes(e), 0);
    cr_expect_lt(idx_last_applied(e), N);
    cr_expect_geq(idx_last_applied(e), 7);
    expect_q_upto(e, idx_last_applied(e));
    cr_expect_lt(th_count_segments(dir), nseg);
    idx_close(e);
}

Test(index_recovery, corrupt_middle_record_detected_by_fetch)
{
    struct idx_env *e = th_open(dir, 0);
    populate(e);
    cr_assert_eq(idx_sync(e), 0);
    char *seg = segment0();
    /* Record 5 holds offsets 6..8 of q (2 and 3 hold 0..5). */
    th_flip_byte(seg, (off_t)(32 + ends[4] + 24 + 40));
    unsigned cnt = 0;
    uint64_t next = 0;
    cr_expect_eq(
        idx_fetch(e, "q", 0, 100, 1 << 20, th_count_fetched, &cnt, &next),
        TERN_ECORRUPT);
    cr_expect_eq(cnt, 6, "messages before the bad record were served");
    cr_expect_eq(next, 6);
    cr_expect_neq(strstr(idx_errmsg(e), "checksum"), NULL, "%s", idx_errmsg(e));
    cnt = 0;
    cr_expect_eq(
        idx_fetch(e, "q", 7, 1, 1 << 20, th_count_fetched, &cnt, &next),
        TERN_ECORRUPT);
    cr_expect_eq(cnt, 0);
    cnt = 0;
    cr_expect_eq(
        idx_fetch(e, "q", 9, 100, 1 << 20, th_count_fetched, &cnt, &next), 0);
    cr_expect_eq(cnt, (N - 5) * 3);
    idx_close(e);
    /* Reopen verifies every record: the log ends before record 5, and
     * says where; nothing past the damage is served. */
    e = th_open(dir, 0);
    cr_expect_eq(idx_last_applied(e), 4);
    cr_expect_eq(idx_log_end(e), ends[4]);
    cr_expect_eq(idx_truncated_bytes(e), ends[N] - ends[4]);
    cr_expect_eq(th_file_size(seg), (off_t)(32 + ends[4]));
    {
        char want[128];
        (void)snprintf(want, sizeof want,
                       "00000000000000000000.seg offset %llu",
                       (unsigned long long)(32 + ends[4]));
        cr_expect_neq(strstr(idx_cut_note(e), want), NULL, "%s",
                      idx_cut_note(e));
        cr_expect_neq(strstr(idx_cut_note(e), "checksum"), NULL, "%s",
                      idx_cut_note(e));
    }
    cnt = 0;
    cr_expect_eq(
        idx_fetch(e, "q", 0, 100, 1 << 20, th_count_fetched, &cnt, &next), 0);
    cr_expect_eq(cnt, 6);
    cr_expect_eq(
        idx_fetch(e, "q", 7, 100, 1 << 20, th_count_fetched, &cnt, &next),
        TERN_EOFFSET);
    /* Raft re-applies the entries after the cut: identical again. */
    populate_range(e, 5, N);
    cr_assert_eq(idx_flush(e), 0);
    cr_expect_eq(idx_log_end(e), ends[N]);
    expect_q_upto(e, N);
    idx_close(e);
    e = th_open(dir, 0);
    cr_expect_eq(idx_truncated_bytes(e), 0);
    cr_expect_str_empty(idx_cut_note(e));
    expect_q_upto(e, N);
    idx_close(e);
    free(seg);
}

/* LMDB damaged while the node was stopped (bytes flipped in the middle of
 * data.mdb, or the file cut in half): open never reads it, it rebuilds
 * the index from the log; every message is served correctly. */
Test(index_recovery, damaged_lmdb_is_rebuilt_unread)
{
    char p[4096];
    struct idx_env *e;
    populate_closed(0);
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/lmdb/data.mdb", dir),
                 sizeof p);
    off_t size = th_file_size(p);
    cr_assert_gt(size, 4 * 4096);
    for (off_t at = 2 * 4096; at < size; at += 4096) {
        for (int k = 0; k < 64; k++) {
            th_flip_byte(p, at + 100 + k);
        }
    }
    e = reopen_expect(0, 0, N);
    expect_q_upto(e, N);
    cr_expect_str_empty(idx_cut_note(e));
    idx_close(e);
    th_truncate(p, th_file_size(p) / 2);
    e = reopen_expect(0, 0, N);
    expect_q_upto(e, N);
    idx_close(e);
    th_truncate(p, 100); /* not even a meta page */
    e = reopen_expect(0, 0, N);
    expect_q_upto(e, N);
    idx_close(e);
}

Test(index_recovery, enospc_on_small_tmpfs)
{
    char mnt[2048], sub[4096], filler[4096];
    cr_assert_lt((size_t)snprintf(mnt, sizeof mnt, "%s/mnt", dir), sizeof mnt);
    cr_assert_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        cr_skip_test("cannot mount a 1 MiB tmpfs (%s): ENOSPC not tested",
                     strerror(errno));
    }
    cr_assert_lt((size_t)snprintf(sub, sizeof sub, "%s/env", mnt), sizeof sub);
    cr_assert_lt((size_t)snprintf(filler, sizeof filler, "%s/filler", mnt),
                 sizeof filler);
    {
        /* Space to give back after the failure so that reopen can work. */
        static char zero[128 * 1024];
        FILE *f = fopen(filler, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(zero, 1, sizeof zero, f), sizeof zero);
        cr_assert_eq(fclose(f), 0);
    }
    struct idx_options o = {
        .dir = sub, .map_size = 8 << 20, .segment_bytes = 64 << 10};
    struct idx_env *e = th_open_opts(&o);
    th_create(e, 1, "q");
    struct tern_wbuf w;
    static char big[3000];
    memset(big, 'z', sizeof big);
    struct idx_msg m = {big, sizeof big};
    tern_wbuf_init(&w);
    int rc = 0;
    uint64_t idx = 2, last_ok = 1;
    for (int i = 0; i < 2000 && rc == 0; i++) {
        struct idx_result r[1];
        unsigned n;
        idx_cmd_begin(&w, 1);
        idx_cmd_produce(&w, "q", 0, 0, &m, 1);
        cr_assert_eq(idx_cmd_end(&w), 0);
        rc = idx_apply(e, idx, w.base, w.len, r, 1, &n);
        if (rc == 0) {
            last_ok = idx++;
            rc = idx_flush(e);
        }
    }
    cr_expect_eq(rc, TERN_EFULL, "got %s (%s)", tern_strerror(rc),
                 idx_errmsg(e));
    cr_expect_eq(idx_status(e), TERN_EFULL);
    uint64_t end = idx_log_end(e);
    idx_close(e);
    cr_assert_eq(unlink(filler), 0);
    e = th_open_opts(&o);
    cr_expect_eq(idx_truncated_bytes(e), 0, "no partial record left");
    cr_expect_eq(idx_log_end(e), end);
    cr_expect_eq(idx_status(e), 0);
    cr_expect_geq(idx_last_applied(e), last_ok);
    cr_expect_leq(idx_last_applied(e), last_ok + 1);
    struct th_msgs all = {0};
    cr_expect_eq(th_fetch_all(e, "q", 10, 1 << 20, &all), 0);
    cr_expect_geq(all.n, last_ok - 1);
    th_msgs_free(&all);
    idx_close(e);
    tern_wbuf_free(&w);
    cr_expect_eq(umount(mnt), 0, "umount: %s", strerror(errno));
}

Test(index_recovery, second_open_of_a_dir_is_refused)
{
    struct idx_env *e = th_open(dir, 0);
    struct idx_env *e2 = NULL;
    struct idx_options o = {.dir = dir};
    char err[TERN_ERRMSG_SIZE] = "";
    cr_expect_eq(idx_open(&o, &e2, err), TERN_EBUSY, "%s", err);
    cr_expect_null(e2);
    idx_close(e);
    e = th_open(dir, 0);
    idx_close(e);
}

/* Another holder of the directory's lock (as a killed node's last
 * threads are): holds it for hold_ms, then closes it. */
struct lock_holder
{
    int fd;
    unsigned hold_ms;
};

static void *release_later(void *arg)
{
    struct lock_holder *h = arg;
    usleep(h->hold_ms * 1000);
    close(h->fd);
    return NULL;
}

static int hold_lock(const char *d)
{
    char p[512];
    int fd;
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/LOCK", d), sizeof p);
    fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    return fd;
}

Test(index_recovery, open_waits_for_a_lock_being_released)
{
    struct idx_env *e = th_open(dir, 0), *e2 = NULL;
    struct idx_options o = {.dir = dir, .lock_wait_ms = 3000};
    char err[TERN_ERRMSG_SIZE] = "";
    struct lock_holder h;
    pthread_t t;
    idx_close(e);

    /* Held for 200 ms: an open that waits gets it. */
    h.fd = hold_lock(dir);
    h.hold_ms = 200;
    cr_assert_eq(pthread_create(&t, NULL, release_later, &h), 0);
    cr_expect_eq(idx_open(&o, &e2, err), 0, "%s", err);
    pthread_join(t, NULL);
    idx_close(e2);
    e2 = NULL;

    /* Held throughout: refused once the wait is over, and at once
     * without one. */
    h.fd = hold_lock(dir);
    o.lock_wait_ms = 100;
    cr_expect_eq(idx_open(&o, &e2, err), TERN_EBUSY, "%s", err);
    cr_expect_null(e2);
    o.lock_wait_ms = 0;
    cr_expect_eq(idx_open(&o, &e2, err), TERN_EBUSY, "%s", err);
    close(h.fd);
    e = th_open(dir, 0);
    idx_close(e);
}

static unsigned n_checked;

static int expect_private(const char *path,
                          const struct stat *st,
                          int flag,
                          struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_D || flag == FTW_DP) {
        if (ftw->level > 0) {
            cr_expect_eq(st->st_mode & 0777, 0700, "%s: %o", path,
                         (unsigned)(st->st_mode & 0777));
        }
    } else if (S_ISREG(st->st_mode)) {
        cr_expect_eq(st->st_mode & 0777, 0600, "%s: %o", path,
                     (unsigned)(st->st_mode & 0777));
        n_checked++;
    }
    return 0;
}

/* Queue data is the node user's only: directories 0700, files 0600
 * (LOCK, segments, LMDB's data.mdb and lock.mdb), whatever the umask. */
Test(index_recovery, files_are_private)
{
    char sub[4096];
    struct idx_env *e;
    mode_t old = umask(0);
    cr_assert_lt((size_t)snprintf(sub, sizeof sub, "%s/idx", dir), sizeof sub);
    e = th_open(sub, 4096);
    th_create(e, 1, "q");
    for (uint64_t i = 2; i < 12; i++) {
        (void)th_produce(e, i, "q", 1, i, 20); /* rolls segments */
    }
    umask(old);
    n_checked = 0;
    cr_assert_eq(nftw(sub, expect_private, 16, FTW_PHYS), 0);
    cr_expect_geq(n_checked, 4);
    cr_expect_geq(th_count_segments(sub), 2);
    idx_close(e);
}

int fetch_probe(struct idx_env *e, unsigned *cnt, uint64_t *next);

Test(index_recovery, allocation_failures_fail_cleanly)
{
    populate_closed(64);
    rm_lmdb(); /* make open rebuild: the longest path */
    int opened = 0;
    for (long n = 0; n < 200 && !opened; n++) {
        struct idx_options o = {.dir = dir, .segment_bytes = 64};
        char err[TERN_ERRMSG_SIZE] = "";
        struct idx_env *x = NULL;
        tern_alloc_fail_after(n);
        int rc = idx_open(&o, &x, err);
        tern_alloc_fail_after(-1);
        if (rc == 0) {
            opened = 1;
            cr_expect_eq(idx_last_applied(x), N);
            /* Fetch under allocation failure: an error, never a crash. */
            unsigned cnt = 0;
            uint64_t next;
            tern_alloc_fail_after(0);
            rc = fetch_probe(x, &cnt, &next);
            tern_alloc_fail_after(-1);
            cr_expect(rc == 0 || rc == -ENOMEM, "got %s", tern_strerror(rc));
            expect_q_upto(x, N);
            idx_close(x);
        } else {
            cr_expect_eq(rc, -ENOMEM, "n=%ld: %s (%s)", n, tern_strerror(rc),
                         err);
            cr_expect_null(x);
        }
    }
    cr_expect(opened);
}

int fetch_probe(struct idx_env *e, unsigned *cnt, uint64_t *next)
{
    return idx_fetch(e, "q", 0, 100, 1 << 20, th_count_fetched, cnt, next);
}

Test(index_recovery, torn_tail_at_every_byte)
{
    char full[4096];
    struct idx_env *e;
    populate_closed(0);
    char *seg = segment0();
    cr_assert_lt((size_t)snprintf(full, sizeof full, "%s/full.seg", dir),
                 sizeof full);
    th_copy_file(seg, full);
    for (uint64_t cut = ends[N - 2]; cut <= ends[N]; cut++) {
        uint64_t last = N;
        while (ends[last] > cut) {
            last--;
        }
        th_copy_file(full, seg);
        th_truncate(seg, (off_t)(32 + cut));
        e = th_open(dir, 0);
        cr_assert_eq(idx_last_applied(e), last, "cut %llu",
                     (unsigned long long)cut);
        cr_assert_eq(idx_truncated_bytes(e), cut - ends[last]);
        cr_assert_eq(idx_log_end(e), ends[last]);
        idx_close(e);
    }
    e = th_open(dir, 0);
    expect_q_upto(e, N);
    idx_close(e);
    free(seg);
}

/* ---- Segment versions (index/log.c, "Segment versions") --------------- */

/* Version of the header of the segment starting at start. */
static uint32_t seg_version(uint64_t start)
{
    char p[4096];
    uint8_t h[32];
    cr_assert_lt((size_t)snprintf(p, sizeof p, "%s/log/%020llu.seg", dir,
                                  (unsigned long long)start),
                 sizeof p);
    FILE *f = fopen(p, "rb");
    cr_assert_not_null(f, "%s", p);
    cr_assert_eq(fread(h, 1, sizeof h, f), sizeof h);
    fclose(f);
    return tern_get_u32(h + 8);
}

/* Rewrite the header of segment 0 as version v (checksum resealed). */
static void set_seg0_version(uint32_t v)
{
    char *p = segment0();
    int fd = open(p, O_RDWR);
    uint8_t h[32];
    cr_assert_geq(fd, 0);
    cr_assert_eq(pread(fd, h, sizeof h, 0), (ssize_t)sizeof h);
    tern_put_u32(h + 8, v);
    tern_put_u32(h + 28, tern_checksum32(h, 28));
    cr_assert_eq(pwrite(fd, h, sizeof h, 0), (ssize_t)sizeof h);
    close(fd);
    free(p);
}

/* Version of the record at pos. */
static uint16_t rec_version(struct idx_env *e, uint64_t pos)
{
    uint8_t h[24];
    cr_assert_eq(idx__log_pread(e, pos, h, sizeof h), 0);
    return tern_get_u16(h + 4);
}

/* A data directory of an earlier release: one version 1 segment of
 * version 1 records. This build reads it, and appends its own records
 * (version 2) only after rolling to a version 2 segment, so that the
 * earlier release, which would cut a version 2 record as a torn tail,
 * refuses the directory instead. */
Test(index_recovery, a_version_1_segment_is_read_but_never_appended_to)
{
    struct idx_env *e = th_open(dir, 1 << 20);
    populate_range(e, 1, 6);
    cr_expect_eq(rec_version(e, ends[5]), 1);
    idx_close(e);
    set_seg0_version(1);

    e = reopen_expect(1 << 20, 0, 6);
    expect_q_upto(e, 6);
    cr_expect_eq(th_count_segments(dir), 1);
    th_entry_xxh3 = true;
    populate_range(e, 7, N);
    th_entry_xxh3 = false;
    cr_expect_eq(th_count_segments(dir), 2, "rolled before the first append");
    cr_expect_eq(seg_version(0), 1);
    cr_expect_eq(seg_version(ends[6]), 2);
    cr_expect_eq(rec_version(e, ends[6]), 2);
    cr_expect_eq(rec_version(e, ends[5]), 1);
    cr_assert_eq(idx_flush(e), 0);
    expect_q_upto(e, N);
    idx_close(e);

    e = reopen_expect(1 << 20, 0, N);
    expect_q_upto(e, N);
    cr_expect_eq(idx_log_end(e), ends[N]);
    idx_close(e);
}

/* The same for bulk bytes (a peer's records copied by position), and for
 * a log cut back into a version 1 segment. */
Test(index_recovery, bulk_bytes_and_a_cut_never_append_to_a_version_1_segment)
{
    struct idx_env *e = th_open(dir, 1 << 20);
    populate_range(e, 1, 6);
    idx_close(e);
    set_seg0_version(1);
    e = reopen_expect(1 << 20, 0, 6);
    cr_assert_eq(idx__log_write_raw(e, idx_log_end(e), "abc", 3), 0);
    cr_expect_eq(th_count_segments(dir), 2);
    cr_expect_eq(seg_version(ends[6]), 2);
    /* Cut back into segment 0: the next append rolls again. */
    cr_assert_eq(idx__log_truncate(e, ends[5]), 0);
    cr_expect_eq(th_count_segments(dir), 1);
    cr_assert_eq(idx__log_write_raw(e, idx_log_end(e), "abc", 3), 0);
    cr_expect_eq(th_count_segments(dir), 2);
    cr_expect_eq(seg_version(0), 1);
    cr_expect_eq(seg_version(ends[5]), 2);
    idx_close(e);
}

/* An empty version 1 segment (an earlier release rolled, then stopped)
 * gets its header rewritten: a new segment would take its name. */
Test(index_recovery, an_empty_version_1_segment_is_rewritten)
{
    struct idx_env *e = th_open(dir, 1 << 20);
    idx_close(e);
    set_seg0_version(1);
    e = reopen_expect(1 << 20, 0, 0);
    populate_range(e, 1, 3);
    cr_expect_eq(th_count_segments(dir), 1);
    cr_expect_eq(e->n_segs, 1, "one segment in the table too");
    cr_expect_eq(seg_version(0), 2);
    idx_close(e);
    e = reopen_expect(1 << 20, 0, 3);
    expect_q_upto(e, 3);
    idx_close(e);
}

/* A segment version this build does not know refuses the directory and
 * changes nothing. */
Test(index_recovery, an_unknown_segment_version_refuses_the_directory)
{
    populate_closed(1 << 20);
    set_seg0_version(3);
    char *p = segment0();
    off_t size = th_file_size(p);
    struct idx_options o = {.dir = dir, .segment_bytes = 1 << 20};
    struct idx_env *e = NULL;
    char err[TERN_ERRMSG_SIZE] = "";
    cr_expect_eq(idx_open(&o, &e, err), TERN_EVERSION, "%s", err);
    cr_expect(strstr(err, "has version 3") != NULL, "%s", err);
    cr_expect_eq(th_file_size(p), size, "nothing cut");
    free(p);
    set_seg0_version(2);
    e = reopen_expect(1 << 20, 0, N);
    expect_q_upto(e, N);
    idx_close(e);
}

/* idx_xxh3_in_use: a new log is (its first leader may start flagged), but
 * not the empty one of an earlier release; then it follows the last
 * applied entry's flag, across a reopen. */
Test(index_recovery, xxh3_in_use_follows_the_last_entry)
{
    struct idx_env *e = th_open(dir, 1 << 20);
    idx_close(e);
    set_seg0_version(1);
    e = th_open(dir, 1 << 20);
    cr_expect(!idx_xxh3_in_use(e), "an earlier release's empty log");
    idx_close(e);
    set_seg0_version(2);
    e = th_open(dir, 1 << 20);
    cr_expect(idx_xxh3_in_use(e), "nothing applied, made by this build");
    populate_range(e, 1, 3);
    cr_expect(!idx_xxh3_in_use(e), "an unflagged entry last");
    th_entry_xxh3 = true;
    populate_range(e, 4, 5);
    th_entry_xxh3 = false;
    cr_expect(idx_xxh3_in_use(e), "a flagged entry last");
    cr_expect_eq(rec_version(e, ends[4]), 2);
    idx_close(e);
    e = reopen_expect(1 << 20, 0, 5);
    cr_expect(idx_xxh3_in_use(e), "after a reopen");
    populate_range(e, 6, 6);
    cr_expect(!idx_xxh3_in_use(e), "each entry carries its own flag");
    idx_close(e);
}
