/* tern-powerloss-probe: test programs for the power-loss shim.  The "run"
 * subcommands do file I/O under the shim and print progress to stdout; the
 * test script kills them with SIGKILL, runs tern-powerloss-restore, then runs
 * the matching "check" subcommand (without the shim), which prints one
 * "PASS name" or "FAIL name: why" line per assertion and exits 1 on any FAIL.
 *
 *   basic DIR                 many single-file scenarios, then "ready"
 *   check-basic DIR
 *   threads DIR N SECONDS     N writer threads; acks on stdout
 *   check-threads DIR N ACKS
 *   lmdb DIR N sync|nosync    N committed txns (nosync: env sync at N/2)
 *   check-lmdb DIR N sync|nosync|atleast:K
 *   bench FILE N SIZE         N x (pwrite 4 KiB + fdatasync) on a SIZE file */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int g_fail;

static void die(const char *what)
{
    fprintf(stderr, "probe: %s: %s\n", what, strerror(errno));
    exit(3);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (write(1, buf, (size_t)n) != n) {
        exit(3);
    }
}

static void check(int ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...)
{
    if (ok) {
        printf("PASS %s\n", name);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    g_fail = 1;
}

static void path(char *out, const char *dir, const char *name)
{
    if (snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX) {
        fprintf(stderr, "probe: path too long\n");
        exit(3);
    }
}

static int xopen(const char *dir, const char *name, int flags)
{
    char p[PATH_MAX];
    path(p, dir, name);
    int fd = open(p, flags, 0644);
    if (fd < 0) {
        die(p);
    }
    return fd;
}

static void fill(int fd, int c, size_t n)
{
    char buf[8192];
    memset(buf, c, sizeof buf);
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        if (write(fd, buf, k) != (ssize_t)k) {
            die("write");
        }
        n -= k;
    }
}

static void xfsync(int fd)
{
    if (fsync(fd) != 0) {
        die("fsync");
    }
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        die(dir);
    }
    xfsync(fd);
    close(fd);
}

static void xrename(const char *dir, const char *a, const char *b)
{
    char pa[PATH_MAX], pb[PATH_MAX];
    path(pa, dir, a);
    path(pb, dir, b);
    if (rename(pa, pb) != 0) {
        die("rename");
    }
}

/* Waits (bounded) to be killed by the test. */
static void wait_for_kill(void)
{
    say("ready\n");
    for (int i = 0; i < 300; i++) {
        usleep(100000);
    }
    say("not killed\n");
    exit(4);
}

static int run_basic(const char *d)
{
    char p[PATH_MAX];
    int fd, fd2;

    fd = xopen(d, "a.dat", O_WRONLY | O_CREAT | O_TRUNC);
    fill(fd, 'a', 1000);
    xfsync(fd);
    fill(fd, 'b', 500);
    close(fd);

    fd = xopen(d, "b.dat", O_WRONLY | O_CREAT);
    fill(fd, 'b', 100);
    close(fd);

    fd = xopen(d, "c.dat", O_WRONLY | O_CREAT | O_DSYNC);
    fill(fd, 'c', 300);
    close(fd);

    fd = xopen(d, "d.tmp", O_WRONLY | O_CREAT);
    fill(fd, 'd', 200);
    xfsync(fd);
    close(fd);
    xrename(d, "d.tmp", "d.dat");

    /* Scenarios that fsync a directory run in synced/, so that the names in
     * the top directory never become durable through a directory fsync. */
    char sd[PATH_MAX];
    path(sd, d, "synced");
    if (mkdir(sd, 0755) != 0) {
        die("mkdir synced");
    }
    fd = xopen(sd, "e.tmp", O_WRONLY | O_CREAT);
    fill(fd, 'e', 200);
    xfsync(fd);
    close(fd);
    xrename(sd, "e.tmp", "e.dat");
    fsync_dir(sd);

    fd = xopen(d, "f.tmp", O_WRONLY | O_CREAT);
    fill(fd, 'f', 200);
    xfsync(fd);
    xrename(d, "f.tmp", "f.dat");
    xfsync(fd);
    close(fd);

    fd = xopen(d, "pre_append", O_WRONLY | O_APPEND);
    fill(fd, 'x', 50);
    close(fd);

    fd = xopen(d, "pre_trunc", O_WRONLY | O_TRUNC);
    fill(fd, 'x', 3);
    close(fd);

    xrename(d, "pre_rename", "pre_renamed");

    path(p, d, "pre_unlink");
    if (unlink(p) != 0) {
        die("unlink");
    }

    fd = xopen(sd, "g.dat", O_WRONLY | O_CREAT);
    fill(fd, 'g', 100);
    xfsync(fd);
    close(fd);
    path(p, sd, "g.dat");
    if (unlink(p) != 0) {
        die("unlink");
    }
    fsync_dir(sd);

    fd = xopen(d, "h.dat", O_WRONLY | O_CREAT);
    fill(fd, 'h', 400);
    xfsync(fd);
    if (ftruncate(fd, 100) != 0) {
        die("ftruncate");
    }
    close(fd);

    fd = xopen(d, "i.dat", O_WRONLY | O_CREAT);
    fill(fd, 'i', 64);
    if (fdatasync(fd) != 0) {
        die("fdatasync");
    }
    char buf[4096];
    memset(buf, 'I', sizeof buf);
    struct iovec v = {buf, 64};
    if (pwritev2(fd, &v, 1, 64, RWF_DSYNC) != 64) {
        die("pwritev2");
    }
    if (pwrite(fd, buf, 64, 128) != 64) {
        die("pwrite");
    }
    close(fd);

    /* LMDB pattern: data fd + fdatasync, then a meta write on an O_DSYNC fd
     * of the same file, then more unsynced data. */
    fd = xopen(d, "j.dat", O_RDWR | O_CREAT);
    fill(fd, 'j', 4096);
    if (fdatasync(fd) != 0) {
        die("fdatasync");
    }
    fd2 = xopen(d, "j.dat", O_WRONLY | O_DSYNC);
    if (pwrite(fd2, "METAMETAMETAMETA", 16, 0) != 16) {
        die("pwrite meta");
    }
    memset(buf, 'J', sizeof buf);
    if (pwrite(fd, buf, 4096, 4096) != 4096 || pwrite(fd, buf, 8, 100) != 8) {
        die("pwrite data");
    }
    close(fd2);
    close(fd);

    path(p, d, "k.dat");
    FILE *f = fopen(p, "w");
    if (f == NULL) {
        die("fopen");
    }
    memset(buf, 'k', 100);
    fwrite(buf, 1, 100, f);
    fflush(f);
    xfsync(fileno(f));
    fclose(f);
    f = fopen(p, "a");
    fwrite(buf, 1, 10, f);
    fclose(f);

    fd = xopen(d, "l.dat", O_WRONLY | O_CREAT);
    fill(fd, 'l', 10);
    xfsync(fd);
    fd2 = dup(fd);
    close(fd);
    fill(fd2, 'L', 20);
    close(fd2);

    /* fsyncgate: fail-fsync naming "m.dat" fails only m.dat's fsync. */
    fd = xopen(d, "m.dat", O_WRONLY | O_CREAT);
    fd2 = xopen(d, "m2.dat", O_WRONLY | O_CREAT);
    fill(fd, 'm', 10);
    fill(fd2, 'n', 10);
    xfsync(fd);
    fill(fd, 'M', 10);
    {
        char fp[PATH_MAX];
        snprintf(fp, sizeof fp, "%s/fail-fsync", getenv("TERN_POWERLOSS_DIR"));
        int ff = open(fp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (ff < 0 || write(ff, "m.dat\n", 6) != 6) {
            die("write fail-fsync");
        }
        close(ff);
        int rc2 = fsync(fd2);
        int rc = fsync(fd);
        int err = errno;
        say("fsyncgate other=%d target=%d errno=%d\n", rc2, rc, rc ? err : 0);
    }
    close(fd2);
    close(fd);

    path(p, d, "sub");
    if (mkdir(p, 0755) != 0) {
        die("mkdir");
    }
    fd = xopen(d, "sub/n.dat", O_WRONLY | O_CREAT);
    fill(fd, 'n', 10);
    xfsync(fd);
    close(fd);

    fd = xopen(sd, "o.dat", O_WRONLY | O_CREAT);
    fill(fd, 'o', 50);
    close(fd);
    fsync_dir(sd);

    fd = xopen(d, "q.tmp", O_WRONLY | O_CREAT);
    fill(fd, 'q', 20);
    xfsync(fd);
    close(fd);
    xrename(d, "q.tmp", "pre_over");

    fd = xopen(d, "r.dat", O_RDWR | O_CREAT);
    fill(fd, 'r', 4096);
    xfsync(fd);
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        die("mmap");
    }
    memset(m, 'R', 10);
    if (msync(m, 4096, MS_SYNC) != 0) {
        die("msync");
    }
    memset(m + 10, 'Z', 10);
    munmap(m, 4096);
    close(fd);

    wait_for_kill();
    return 0;
}

/* Content of dir/name (malloc'd, NUL-terminated) or NULL; *n gets the size. */
static char *slurp(const char *dir, const char *name, size_t *n)
{
    char p[PATH_MAX];
    struct stat st;
    path(p, dir, name);
    int fd = open(p, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }
    char *b = malloc((size_t)st.st_size + 1);
    ssize_t r = read(fd, b, (size_t)st.st_size);
    close(fd);
    *n = r < 0 ? 0 : (size_t)r;
    b[*n] = 0;
    return b;
}

/* 1 if dir/name holds exactly n bytes, all c (c == 0: any). */
static int is_file(const char *dir, const char *name, size_t n, int c)
{
    size_t k;
    char *b = slurp(dir, name, &k);
    int ok = b != NULL && k == n;
    for (size_t i = 0; ok && c && i < k; i++) {
        ok = b[i] == c;
    }
    free(b);
    return ok;
}

static int absent(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    path(p, dir, name);
    return lstat(p, &st) != 0 && errno == ENOENT;
}

static size_t size_of(const char *dir, const char *name)
{
    size_t k = 0;
    free(slurp(dir, name, &k));
    return k;
}

static int check_basic(const char *d)
{
    size_t k;
    char *b;
    check(is_file(d, "a.dat", 1000, 'a'),
          "fsynced_data_kept_unsynced_append_lost",
          "a.dat size %zu (want 1000 x 'a')", size_of(d, "a.dat"));
    check(absent(d, "b.dat"), "never_fsynced_file_removed", "b.dat exists");
    check(is_file(d, "c.dat", 300, 'c'), "odsync_writes_kept", "c.dat size %zu",
          size_of(d, "c.dat"));
    check(is_file(d, "d.tmp", 200, 'd') && absent(d, "d.dat"),
          "rename_without_dir_fsync_lost", "d.tmp %zu B, d.dat %s",
          size_of(d, "d.tmp"), absent(d, "d.dat") ? "absent" : "present");
    check(is_file(d, "synced/e.dat", 200, 'e') && absent(d, "synced/e.tmp"),
          "rename_with_dir_fsync_kept", "e.dat %zu B",
          size_of(d, "synced/e.dat"));
    check(is_file(d, "f.dat", 200, 'f') && absent(d, "f.tmp"),
          "rename_then_file_fsync_kept", "f.dat %zu B", size_of(d, "f.dat"));
    check(is_file(d, "pre_append", 100, 'P'), "preexisting_append_lost",
          "pre_append %zu B", size_of(d, "pre_append"));
    check(is_file(d, "pre_trunc", 80, 'T'), "preexisting_otrunc_lost",
          "pre_trunc %zu B", size_of(d, "pre_trunc"));
    check(is_file(d, "pre_rename", 50, 'R') && absent(d, "pre_renamed"),
          "preexisting_rename_lost", "pre_rename %zu B",
          size_of(d, "pre_rename"));
    check(is_file(d, "pre_unlink", 30, 'U'), "unlink_without_dir_fsync_lost",
          "pre_unlink %zu B", size_of(d, "pre_unlink"));
    check(absent(d, "synced/g.dat"), "unlink_with_dir_fsync_kept",
          "g.dat exists");
    check(is_file(d, "h.dat", 400, 'h'), "unsynced_ftruncate_lost",
          "h.dat %zu B", size_of(d, "h.dat"));
    b = slurp(d, "i.dat", &k);
    check(b && k == 128 && b[0] == 'i' && b[63] == 'i' && b[64] == 'I' &&
              b[127] == 'I',
          "pwritev2_rwf_dsync_kept_pwrite_lost", "i.dat %zu B", k);
    free(b);
    b = slurp(d, "j.dat", &k);
    check(b && k == 4096 && memcmp(b, "METAMETAMETAMETA", 16) == 0 &&
              b[16] == 'j' && b[100] == 'j' && b[4095] == 'j',
          "dsync_fd_write_into_shadowed_file", "j.dat %zu B, starts %.16s", k,
          b ? b : "");
    free(b);
    check(is_file(d, "k.dat", 100, 'k'), "stdio_fsynced_kept_unsynced_lost",
          "k.dat %zu B", size_of(d, "k.dat"));
    check(is_file(d, "l.dat", 10, 'l'), "write_through_dup_lost", "l.dat %zu B",
          size_of(d, "l.dat"));
    check(is_file(d, "m.dat", 10, 'm'), "fsync_eio_injected_not_durable",
          "m.dat %zu B", size_of(d, "m.dat"));
    check(is_file(d, "m2.dat", 10, 'n'), "fsync_eio_only_for_matching_file",
          "m2.dat %zu B", size_of(d, "m2.dat"));
    check(is_file(d, "sub/n.dat", 10, 'n'), "file_in_new_subdir_kept",
          "sub/n.dat %zu B", size_of(d, "sub/n.dat"));
    check(is_file(d, "synced/o.dat", 0, 0), "dir_fsync_keeps_name_not_data",
          "o.dat %zu B (%s)", size_of(d, "synced/o.dat"),
          absent(d, "synced/o.dat") ? "absent" : "present");
    check(is_file(d, "pre_over", 40, 'O') && is_file(d, "q.tmp", 20, 'q'),
          "rename_over_existing_lost", "pre_over %zu B, q.tmp %zu B",
          size_of(d, "pre_over"), size_of(d, "q.tmp"));
    b = slurp(d, "r.dat", &k);
    check(b && k == 4096 && b[0] == 'R' && b[9] == 'R' && b[10] == 'r' &&
              b[19] == 'r',
          "msync_kept_later_mmap_store_lost", "r.dat %zu B %.24s", k,
          b ? b : "");
    free(b);
    return g_fail;
}

/* ---- threads ----------------------------------------------------------- */

#define REC        64
#define SYNC_EVERY 4
#define MAX_RECS   20000

struct thr
{
    const char *dir;
    int id;
    int shared_fd;
    double deadline;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void make_rec(char *r, int t, int seq)
{
    memset(r, '.', REC);
    snprintf(r, REC, "t%02d s%07d ", t, seq);
    r[REC - 1] = '\n';
}

static void *writer(void *arg)
{
    struct thr *th = arg;
    char name[32], r[REC];
    snprintf(name, sizeof name, "t%02d.dat", th->id);
    int fd = xopen(th->dir, name, O_WRONLY | O_CREAT | O_APPEND);
    for (int seq = 0; seq < MAX_RECS && now() < th->deadline; seq++) {
        make_rec(r, th->id, seq);
        if (write(fd, r, REC) != REC) {
            die("write");
        }
        if (seq % SYNC_EVERY == SYNC_EVERY - 1) {
            xfsync(fd);
            say("ack t%02d %d\n", th->id, seq);
        }
        if (seq % 8 == 0) {
            if (write(th->shared_fd, r, REC) != REC) {
                die("write shared");
            }
            if (fdatasync(th->shared_fd) != 0) {
                die("fdatasync shared");
            }
            say("shared t%02d %d\n", th->id, seq);
        }
    }
    close(fd);
    return NULL;
}

static int run_threads(const char *d, int n, double secs)
{
    pthread_t tid[64];
    struct thr th[64];
    int sfd = xopen(d, "shared.dat", O_WRONLY | O_CREAT | O_APPEND);
    for (int i = 0; i < n && i < 64; i++) {
        th[i] = (struct thr){d, i, sfd, now() + secs};
        pthread_create(&tid[i], NULL, writer, &th[i]);
    }
    for (int i = 0; i < n && i < 64; i++) {
        pthread_join(tid[i], NULL);
    }
    say("finished\n");
    wait_for_kill();
    return 0;
}

static int check_threads(const char *d, int n, const char *acks)
{
    int last[64], shared_acked[64][MAX_RECS / 8 + 1];
    char line[128];
    memset(shared_acked, 0, sizeof shared_acked);
    for (int i = 0; i < 64; i++) {
        last[i] = -1;
    }
    FILE *f = fopen(acks, "r");
    if (f == NULL) {
        die(acks);
    }
    int t, s, nshared = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "ack t%d %d", &t, &s) == 2 && t >= 0 && t < 64) {
            last[t] = s > last[t] ? s : last[t];
        } else if (sscanf(line, "shared t%d %d", &t, &s) == 2 && t >= 0 &&
                   t < 64 && s / 8 <= MAX_RECS / 8) {
            shared_acked[t][s / 8] = 1;
            nshared++;
        }
    }
    fclose(f);
    for (int i = 0; i < n; i++) {
        char name[32], want[REC], tn[48];
        size_t k;
        snprintf(name, sizeof name, "t%02d.dat", i);
        snprintf(tn, sizeof tn, "thread_%02d_file", i);
        char *b = slurp(d, name, &k);
        int ok = b != NULL && k % REC == 0;
        size_t recs = b ? k / REC : 0;
        for (size_t j = 0; ok && j < recs; j++) {
            make_rec(want, i, (int)j);
            ok = memcmp(b + j * REC, want, REC) == 0;
        }
        check(ok && (long)recs >= last[i] + 1 && recs % SYNC_EVERY == 0, tn,
              "%zu records (acked %d, must be a multiple of %d), intact=%d",
              recs, last[i] + 1, SYNC_EVERY, ok);
        free(b);
    }
    size_t k;
    char *b = slurp(d, "shared.dat", &k);
    int ok = b != NULL && k % REC == 0, missing = 0;
    static char seen[64][MAX_RECS / 8 + 1];
    memset(seen, 0, sizeof seen);
    for (size_t j = 0; ok && j < k / REC; j++) {
        if (sscanf(b + j * REC, "t%d s%d", &t, &s) != 2 || t < 0 || t >= 64 ||
            s % 8 != 0) {
            ok = 0;
            break;
        }
        seen[t][s / 8] = 1;
    }
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j <= MAX_RECS / 8; j++) {
            missing += shared_acked[i][j] && !seen[i][j];
        }
    }
    check(ok && missing == 0, "shared_file_all_acked_records_present",
          "intact=%d, %d of %d acked records missing", ok, missing, nshared);
    free(b);
    return g_fail;
}

/* ---- lmdb -------------------------------------------------------------- */

static MDB_env *lmdb_open(const char *d, unsigned flags)
{
    MDB_env *env;
    int rc = mdb_env_create(&env);
    if (rc == 0) {
        rc = mdb_env_set_mapsize(env, 64u << 20);
    }
    if (rc == 0) {
        rc = mdb_env_open(env, d, flags, 0644);
    }
    if (rc != 0) {
        fprintf(stderr, "probe: lmdb open %s: %s\n", d, mdb_strerror(rc));
        exit(3);
    }
    return env;
}

static int run_lmdb(const char *d, int n, int nosync)
{
    MDB_env *env = lmdb_open(d, nosync ? MDB_NOSYNC : 0);
    MDB_dbi dbi;
    MDB_txn *txn;
    char key[32], val[200];
    for (int i = 0; i < n; i++) {
        int rc = mdb_txn_begin(env, NULL, 0, &txn);
        if (rc == 0) {
            rc = mdb_dbi_open(txn, NULL, 0, &dbi);
        }
        snprintf(key, sizeof key, "k%07d", i);
        memset(val, 'v', sizeof val);
        MDB_val k = {strlen(key), key}, v = {sizeof val, val};
        if (rc == 0) {
            rc = mdb_put(txn, dbi, &k, &v, 0);
        }
        if (rc == 0) {
            rc = mdb_txn_commit(txn);
        }
        if (rc != 0) {
            fprintf(stderr, "probe: lmdb txn %d: %s\n", i, mdb_strerror(rc));
            return 3;
        }
        say("committed %d\n", i);
        if (nosync && i + 1 == n / 2) {
            if (mdb_env_sync(env, 1) != 0) {
                die("mdb_env_sync");
            }
            say("synced %d\n", i);
        }
    }
    wait_for_kill();
    return 0;
}

static int check_lmdb(const char *d, int n, const char *mode)
{
    MDB_env *env = lmdb_open(d, MDB_RDONLY);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    int count = 0, prefix = 1, rc;
    if ((rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) != 0 ||
        (rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0 ||
        (rc = mdb_cursor_open(txn, dbi, &cur)) != 0) {
        check(0, "lmdb_env_opens_after_restore", "%s", mdb_strerror(rc));
        return 1;
    }
    check(1, "lmdb_env_opens_after_restore", " ");
    while (mdb_cursor_get(cur, &k, &v, count ? MDB_NEXT : MDB_FIRST) == 0) {
        char want[32];
        snprintf(want, sizeof want, "k%07d", count);
        prefix &= k.mv_size == strlen(want) &&
                  memcmp(k.mv_data, want, k.mv_size) == 0;
        count++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    if (strcmp(mode, "sync") == 0) {
        check(count == n && prefix, "lmdb_default_sync_all_commits_kept",
              "%d of %d keys, prefix=%d", count, n, prefix);
    } else if (strcmp(mode, "nosync") == 0) {
        check(count == n / 2 && prefix, "lmdb_nosync_commits_after_sync_lost",
              "%d keys (want exactly %d: the ones before mdb_env_sync), "
              "prefix=%d",
              count, n / 2, prefix);
    } else {
        int least = atoi(mode + strlen("atleast:"));
        check(count >= least && prefix, "lmdb_killed_mid_commit_acked_kept",
              "%d keys, %d acknowledged, prefix=%d", count, least, prefix);
    }
    return g_fail;
}

/* ---- bench ------------------------------------------------------------- */

static int run_bench(const char *file, int n, long size)
{
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
    char buf[4096];
    if (fd < 0) {
        die(file);
    }
    memset(buf, 'b', sizeof buf);
    for (long off = 0; off < size; off += (long)sizeof buf) {
        if (pwrite(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf) {
            die("pwrite");
        }
    }
    xfsync(fd);
    double t0 = now();
    for (int i = 0; i < n; i++) {
        off_t off = (off_t)((long)i * 4096 % size);
        if (pwrite(fd, buf, sizeof buf, off) != (ssize_t)sizeof buf ||
            fdatasync(fd) != 0) {
            die("pwrite/fdatasync");
        }
    }
    double dt = now() - t0;
    close(fd);
    printf(
        "%.0f fsyncs/s (%d x pwrite 4 KiB + fdatasync, file %ld KiB, "
        "%.3f s)\n",
        n / dt, n, size / 1024, dt);
    return 0;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "basic") == 0 && argc == 3) {
        return run_basic(argv[2]);
    }
    if (strcmp(cmd, "check-basic") == 0 && argc == 3) {
        return check_basic(argv[2]);
    }
    if (strcmp(cmd, "threads") == 0 && argc == 5) {
        return run_threads(argv[2], atoi(argv[3]), atof(argv[4]));
    }
    if (strcmp(cmd, "check-threads") == 0 && argc == 5) {
        return check_threads(argv[2], atoi(argv[3]), argv[4]);
    }
    if (strcmp(cmd, "lmdb") == 0 && argc == 5) {
        return run_lmdb(argv[2], atoi(argv[3]), strcmp(argv[4], "nosync") == 0);
    }
    if (strcmp(cmd, "check-lmdb") == 0 && argc == 5) {
        return check_lmdb(argv[2], atoi(argv[3]), argv[4]);
    }
    if (strcmp(cmd, "bench") == 0 && argc == 5) {
        return run_bench(argv[2], atoi(argv[3]), atol(argv[4]));
    }
    fprintf(stderr, "usage: see the comment at the top of tests/probe.c\n");
    return 2;
}
