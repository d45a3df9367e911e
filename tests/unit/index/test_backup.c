/* Unit tests of backups (index/backup.c): the manifest codec (round trip,
 * every flipped byte and every truncation refused, names outside the
 * backup refused), a backup of a live env verified and installed into a
 * new index that serves the same messages and takes the manifest as its
 * snapshot, damage found by verify (a flipped byte, a missing or extra
 * file), the target and one-at-a-time refusals, and a job abandoned by
 * idx_close. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <idx.h>

#include "idx_int.h"
#include "index_helpers.h"

TestSuite(index_backup, .init = th_dirs_init, .fini = th_dirs_fini);

static void sample_manifest(struct idx__backup_manifest *m,
                            struct idx__backup_file *files)
{
    memset(m, 0, sizeof *m);
    m->created_ms = 1764800000000ULL;
    m->node_id = 2;
    m->term = 7;
    m->snap.last_applied = 1234;
    m->snap.log_end = 900000;
    m->snap.last_rec_pos = 899000;
    m->snap.last_rec_checksum = 0xdeadbeef;
    m->snap.log_start = 65536;
    m->snap.ckpt_size = 4000;
    m->snap.ckpt_sum = 0x1234;
    (void)snprintf(m->cluster, sizeof m->cluster, "prod-eu");
    m->n_files = 3;
    m->files = files;
    (void)snprintf(files[0].name, sizeof files[0].name, "lmdb/data.mdb");
    files[0].size = 81920;
    files[0].checksum = 1;
    (void)snprintf(files[1].name, sizeof files[1].name, "log/%020llu.seg",
                   65000ULL);
    files[1].size = 835032;
    files[1].checksum = 2;
    (void)snprintf(files[2].name, sizeof files[2].name, "log/%020llu.ckpt",
                   65536ULL);
    files[2].size = 4000;
    files[2].checksum = 3;
}

Test(index_backup, manifest_round_trip)
{
    struct idx__backup_file files[3];
    struct idx__backup_manifest m, d;
    struct tern_wbuf w;
    sample_manifest(&m, files);
    tern_wbuf_init(&w);
    cr_assert_eq(idx__backup_manifest_encode(&m, &w), 0);
    cr_assert_eq(idx__backup_manifest_decode(w.base, w.len, &d), 0);
    cr_expect_eq(d.created_ms, m.created_ms);
    cr_expect_eq(d.node_id, 2);
    cr_expect_eq(d.term, 7);
    cr_expect_eq(d.snap.last_applied, 1234);
    cr_expect_eq(d.snap.log_end, 900000);
    cr_expect_eq(d.snap.last_rec_pos, 899000);
    cr_expect_eq(d.snap.last_rec_checksum, 0xdeadbeef);
    cr_expect_eq(d.snap.log_start, 65536);
    cr_expect_eq(d.snap.ckpt_size, 4000);
    cr_expect_eq(d.snap.ckpt_sum, 0x1234);
    cr_expect_str_eq(d.cluster, "prod-eu");
    cr_assert_eq(d.n_files, 3);
    cr_assert_not_null(d.files);
    for (unsigned i = 0; i < 3; i++) {
        cr_expect_str_eq(d.files[i].name, files[i].name);
        cr_expect_eq(d.files[i].size, files[i].size);
        cr_expect_eq(d.files[i].checksum, files[i].checksum);
    }
    idx__backup_manifest_free(&d);
    tern_wbuf_free(&w);
}

Test(index_backup, manifest_damage_refused)
{
    struct idx__backup_file files[3];
    struct idx__backup_manifest m, d;
    struct tern_wbuf w;
    sample_manifest(&m, files);
    tern_wbuf_init(&w);
    cr_assert_eq(idx__backup_manifest_encode(&m, &w), 0);
    /* Every flipped bit of every byte, and every truncation. */
    for (size_t i = 0; i < w.len; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            w.base[i] ^= (uint8_t)(1u << bit);
            int rc = idx__backup_manifest_decode(w.base, w.len, &d);
            cr_expect_neq(rc, 0, "flip of bit %u at byte %zu accepted", bit, i);
            if (rc == 0) {
                idx__backup_manifest_free(&d);
            }
            w.base[i] ^= (uint8_t)(1u << bit);
        }
    }
    for (size_t n = 0; n < w.len; n++) {
        cr_expect_neq(idx__backup_manifest_decode(w.base, n, &d), 0,
                      "truncated to %zu accepted", n);
    }
    cr_expect_eq(idx__backup_manifest_decode(NULL, 0, &d), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(index_backup, names_outside_the_backup_refused)
{
    struct idx__backup_file files[3];
    struct idx__backup_manifest m, d;
    struct tern_wbuf w;
    uint8_t *at;
    static const char *const bad[] = {"../etc/passwd",
                                      "log/../../x.seg",
                                      "/abs",
                                      "log/1.seg",
                                      "log/0000000000000000000a.seg",
                                      "lmdb/lock.mdb",
                                      ""};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cr_expect(!idx__backup_name_valid(bad[k], strlen(bad[k])), "%s",
                  bad[k]);
    }
    cr_expect(idx__backup_name_valid("log/00000000000000065536.ckpt", 29));
    /* A cluster name with a byte outside 0x21..0x7e (found by fuzzing: a
     * NUL made the name re-encode shorter). */
    sample_manifest(&m, files);
    tern_wbuf_init(&w);
    cr_assert_eq(idx__backup_manifest_encode(&m, &w), 0);
    at = memmem(w.base, w.len, "prod-eu", 7);
    cr_assert_not_null(at);
    at[4] = '\0';
    tern_put_u32(w.base + w.len - 4, tern_checksum32(w.base, w.len - 4));
    cr_expect_eq(idx__backup_manifest_decode(w.base, w.len, &d),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
    (void)snprintf(m.cluster, sizeof m.cluster, "two words");
    tern_wbuf_init(&w);
    cr_expect_eq(idx__backup_manifest_encode(&m, &w), TERN_EINVAL);
    tern_wbuf_free(&w);
    sample_manifest(&m, files);
    (void)snprintf(files[1].name, sizeof files[1].name, "log/../x.seg");
    tern_wbuf_init(&w);
    cr_expect_eq(idx__backup_manifest_encode(&m, &w), TERN_EINVAL);
    tern_wbuf_free(&w);

    /* A well-checksummed manifest naming "../../etc/x.seg" (same length
     * as a segment name) is refused by the decoder. */
    sample_manifest(&m, files);
    tern_wbuf_init(&w);
    cr_assert_eq(idx__backup_manifest_encode(&m, &w), 0);
    at = memmem(w.base, w.len, files[1].name, strlen(files[1].name));
    cr_assert_not_null(at);
    memcpy(at, "../../../../../../../etc/x.seg", 28);
    tern_put_u32(w.base + w.len - 4, tern_checksum32(w.base, w.len - 4));
    cr_expect_eq(idx__backup_manifest_decode(w.base, w.len, &d),
                 TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

/* Queue "q" with n produces of 3 messages at raft indexes 2..n+1. */
static void workload(struct idx_env *e, uint64_t n)
{
    th_create(e, 1, "q");
    for (uint64_t i = 2; i <= n + 1; i++) {
        (void)th_produce(e, i, "q", 0, i, 3);
        if (i % 16 == 0) {
            cr_assert_eq(idx_flush(e), 0);
        }
    }
    cr_assert_eq(idx_flush(e), 0);
}

static char *path2(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    cr_assert_not_null(p);
    (void)snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Take a backup of e into dir (must succeed). */
static void take_backup(struct idx_env *e,
                        const char *dir,
                        struct idx_backup_info *info)
{
    struct idx_backup_options o = {.dir = dir,
                                   .data_dir = th_dir_a,
                                   .cluster = "old",
                                   .node_id = 3,
                                   .term = 5};
    struct idx_backup *b = NULL, *b2 = NULL;
    char m[TERN_ERRMSG_SIZE] = "";
    cr_assert_eq(idx_backup_begin(e, &o, &b, m), 0, "%s", m);
    cr_expect(idx_backup_holds(e));
    /* One at a time. */
    cr_expect_eq(idx_backup_begin(e, &o, &b2, m), TERN_EBACKUP);
    cr_expect(strstr(m, "already running") != NULL, "%s", m);
    idx_backup_run(b);
    cr_assert_eq(idx_backup_end(b, info, m), 0, "%s", m);
    cr_expect(!idx_backup_holds(e));
}

Test(index_backup, backup_verify_install)
{
    struct idx_env *a = th_open(th_dir_a, 4096), *c;
    struct idx_backup_info info, vinfo;
    struct th_msgs ma = {0}, mc = {0};
    uint8_t snap[IDX_SNAPSHOT_MANIFEST_SIZE];
    char m[TERN_ERRMSG_SIZE] = "";
    char *bk = path2(th_dir_b, "bk"), *into = path2(th_dir_b, "restored");
    workload(a, 200);
    take_backup(a, bk, &info);
    cr_expect_eq(info.last_applied, idx_last_applied(a));
    cr_expect_eq(info.log_end, idx_log_end(a));
    cr_expect_eq(info.node_id, 3);
    cr_expect_eq(info.term, 5);
    cr_expect_str_eq(info.cluster, "old");
    cr_expect_gt(info.n_files, 3); /* LMDB and several 4 KiB segments */
    cr_assert_eq(idx_backup_verify(bk, &vinfo, m), 0, "%s", m);
    cr_expect_eq(vinfo.total_bytes, info.total_bytes);

    /* The live env moves on; the backup does not. */
    cr_assert_eq(th_fetch_all(a, "q", 1000, 1 << 20, &ma), 0);
    cr_assert_eq(ma.n, 600);
    (void)th_produce(a, 202, "q", 0, 202, 3);
    cr_assert_eq(idx_flush(a), 0);

    cr_assert_eq(idx_backup_install(bk, into, true, snap, NULL, m), 0, "%s", m);
    c = th_open(into, 4096);
    cr_assert_eq(idx_restore(c, snap, sizeof snap), 0, "%s", idx_errmsg(c));
    cr_expect_eq(idx_last_applied(c), info.last_applied);
    cr_assert_eq(th_fetch_all(c, "q", 1000, 1 << 20, &mc), 0);
    th_msgs_expect_eq(&ma, &mc);
    th_msgs_free(&ma);
    th_msgs_free(&mc);
    idx_close(c);
    idx_close(a);
    free(bk);
    free(into);
}

Test(index_backup, damage_found_by_verify)
{
    struct idx_env *a = th_open(th_dir_a, 4096);
    struct idx_backup_info info;
    char m[TERN_ERRMSG_SIZE] = "";
    char *bk = path2(th_dir_b, "bk");
    char *seg, *extra, *mdb;
    workload(a, 100);
    take_backup(a, bk, &info);
    idx_close(a);
    seg = th_last_segment(bk);

    th_flip_byte(seg, th_file_size(seg) / 2);
    cr_expect_eq(idx_backup_verify(bk, NULL, m), TERN_ECORRUPT);
    cr_expect(strstr(m, "is damaged") != NULL, "%s", m);
    th_flip_byte(seg, th_file_size(seg) / 2);
    cr_assert_eq(idx_backup_verify(bk, NULL, m), 0, "%s", m);

    extra = path2(bk, "log/00000000000099999999.seg");
    th_copy_file(seg, extra);
    cr_expect_eq(idx_backup_verify(bk, NULL, m), TERN_ECORRUPT);
    cr_expect(strstr(m, "the manifest names") != NULL, "%s", m);
    cr_assert_eq(unlink(extra), 0);

    mdb = path2(bk, "lmdb/data.mdb");
    cr_assert_eq(unlink(mdb), 0);
    cr_expect_eq(idx_backup_verify(bk, NULL, m), TERN_ECORRUPT);
    cr_expect(strstr(m, "lmdb/data.mdb") != NULL, "%s", m);
    free(seg);
    free(extra);
    free(mdb);
    free(bk);
}

Test(index_backup, targets_refused)
{
    struct idx_env *a = th_open(th_dir_a, 4096);
    struct idx_backup *b = NULL;
    char m[TERN_ERRMSG_SIZE] = "";
    char *inside = path2(th_dir_a, "bk");
    char *full = path2(th_dir_b, "full");
    char *x = path2(full, "x");
    struct idx_backup_options o = {
        .data_dir = th_dir_a, .cluster = "old", .node_id = 1};
    workload(a, 10);
    o.dir = "relative";
    cr_expect_eq(idx_backup_begin(a, &o, &b, m), TERN_EINVAL);
    o.dir = inside;
    cr_expect_eq(idx_backup_begin(a, &o, &b, m), TERN_EINVAL);
    cr_expect(strstr(m, "inside the data directory") != NULL, "%s", m);
    cr_assert_eq(mkdir(full, 0700), 0);
    FILE *f = fopen(x, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fclose(f), 0);
    o.dir = full;
    cr_expect_eq(idx_backup_begin(a, &o, &b, m), TERN_EINVAL);
    cr_expect(strstr(m, "not empty") != NULL, "%s", m);
    cr_assert_eq(unlink(x), 0);
    o.min_free_bytes = UINT64_MAX / 2;
    cr_expect_eq(idx_backup_begin(a, &o, &b, m), TERN_EFULL);
    cr_expect(strstr(m, "not enough free disk") != NULL, "%s", m);
    cr_expect(!idx_backup_holds(a));
    idx_close(a);
    free(inside);
    free(full);
    free(x);
}

Test(index_backup, close_abandons_a_queued_job)
{
    struct idx_env *a = th_open(th_dir_a, 4096);
    struct idx_backup *b = NULL;
    char m[TERN_ERRMSG_SIZE] = "";
    char *bk = path2(th_dir_b, "bk");
    struct idx_backup_options o = {
        .dir = bk, .data_dir = th_dir_a, .cluster = "old", .node_id = 1};
    workload(a, 10);
    cr_assert_eq(idx_backup_begin(a, &o, &b, m), 0, "%s", m);
    idx_close(a);      /* before the worker started */
    idx_backup_run(b); /* does nothing */
    cr_expect_eq(idx_backup_end(b, NULL, m), TERN_ECANCELED);
    cr_expect_neq(idx_backup_verify(bk, NULL, m), 0);
    free(bk);
}
