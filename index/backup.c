/*
 * Online backups of a node's state, their verification and their
 * installation into a new data directory (docs/OPERATIONS.md, "Backup
 * and restore").
 *
 * WHAT A BACKUP HOLDS. The commit log is the truth (LMDB is derived from
 * it and rebuilt at every idx_open), so a backup is a prefix of the log
 * that a consistent LMDB state covers, plus that LMDB state:
 *
 *   DIR/MANIFEST           the manifest below, written last (a directory
 *                          without it is an unfinished backup)
 *   DIR/lmdb/data.mdb      mdb_env_copy2 of the live index, one read txn
 *   DIR/log/NNN.seg        the commit-log segments that hold positions
 *                          below the covered log end, cut there
 *   DIR/log/NNN.ckpt       the checkpoints at or after the log start and
 *                          below the covered log end (ckpt.c)
 *
 * CONSISTENCY. The copy of LMDB is taken in one read txn (LMDB's copy
 * API); its meta "state" row says what it covers: last applied raft
 * index, log end, last record (position, checksum). Records are written
 * to the log before the LMDB commit that indexes them, so every byte
 * below that log end is in the segment files when the copy starts; bytes
 * past it are not copied. The head of the log is not trimmed while a
 * backup runs (snapshot.c trim_head asks idx_backup_holds), so the log
 * start and its checkpoint, noted when the backup begins, stay on disk.
 * The copy ends by reading back the record at the covered position and
 * checking it against the state row (raft index and checksum).
 *
 * THREADS. idx_backup_begin (loop thread) validates the target and notes
 * the log start; idx_backup_run (a worker thread, uv_queue_work in node/)
 * does the copying through the LMDB env (opened MDB_NOTLS, so a read txn
 * may live on any thread) and the files on disk, never the segment table
 * the loop thread changes; idx_backup_end (loop thread) releases the hold
 * and frees the job. idx_close cancels a running backup and waits for its
 * worker to stop (one chunk, at most) before closing LMDB; a job its
 * worker has not picked up yet is abandoned without waiting.
 *
 * MANIFEST (version 1, little-endian; encoded/decoded byte by byte, be
 * careful when adapting):
 *
 *   offset size  field
 *   0      4     magic 0x504b4254 ("TBKP")
 *   4      2     version = 1
 *   6      2     flags = 0
 *   8      4     total length of the manifest, checksum included
 *   12     4     n_files (<= IDX__BACKUP_MAX_FILES)
 *   16     8     created_ms      wall clock of the node at the end
 *   24     8     node_id         the node that took it
 *   32     8     term            its raft term when the backup began
 *   40     8     last_applied    raft index the copy covers
 *   48     8     log_end         log position just after that record
 *   56     8     last_rec_pos    its position
 *   64     4     last_rec_checksum
 *   68     4     ckpt_sum        header checksum of the checkpoint at
 *                                log_start (0 when log_start is 0)
 *   72     8     log_start       where the copied log starts
 *   80     8     ckpt_size       that checkpoint's file size
 *   88     1     c: cluster name length (1..IDX_BACKUP_CLUSTER_MAX)
 *   89     c     cluster name ([node] cluster_name of the node: bytes
 *                0x21..0x7e)
 *   then n_files x { u8 name length k (1..IDX__BACKUP_NAME_MAX), k bytes
 *                    name, u64 size, u32 tern_checksum32 of the file }
 *   len-4  4     tern_checksum32 over [0, len-4)
 *
 * A name is "lmdb/data.mdb" or "log/" + 20 digits + ".seg" or ".ckpt";
 * nothing else is accepted (a manifest names no path outside DIR). The
 * snapshot fields (last_applied .. ckpt_size) are a snapshot manifest's
 * (snapshot.c) and pass its checks.
 *
 * VERIFY reads MANIFEST, checks every file's size and checksum, that no
 * other file is in log/, that the segments are contiguous and reach
 * log_end, and the record at last_rec_pos. INSTALL verifies and copies
 * log/ into a new index directory, or (without the log, for a node that
 * fetches it from a peer, which checks every record it receives) reads
 * only MANIFEST; either way it hands back the snapshot manifest Raft's
 * initial snapshot carries (node/backup.c, raft/seed.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "idx_int.h"

#define IDX__BACKUP_MAGIC   0x504b4254U
#define IDX__BACKUP_VERSION 1
#define IDX__BACKUP_FIXED   89
#define IDX__BACKUP_CHUNK   ((size_t)1 << 20)
#define IDX__SEG_HDR        32
#define IDX__PATH_MAX       4096
/* Local path buffers: a stored directory plus a file name. */
#define IDX__PATH_BUF (IDX__PATH_MAX + 128)

/* Job states (struct idx_backup.state). */
enum {
    BK_QUEUED = 0,    /* handed to a worker, not started */
    BK_RUNNING = 1,   /* the worker runs */
    BK_DONE = 2,      /* the worker finished (rc set) */
    BK_ABANDONED = 3, /* idx_close came first: the worker does nothing */
};

struct idx_backup
{
    struct idx_env *env; /* loop thread only; NULL after idx_close */
    MDB_env *mdb;        /* valid while state is RUNNING */
    char dir[IDX__PATH_MAX];
    char log_dir[IDX__PATH_MAX];
    char cluster[IDX_BACKUP_CLUSTER_MAX + 1];
    uint64_t node_id;
    uint64_t term;
    uint64_t min_applied;
    uint64_t log_start; /* noted at begin; held by the trim hold */
    uint64_t ckpt_size;
    uint32_t ckpt_sum;
    atomic_int state;
    atomic_int cancel;
    int rc; /* worker's result, read after BK_DONE */
    struct idx_backup_info info;
    char errmsg[TERN_ERRMSG_SIZE];
};

/* ---- Manifest codec ------------------------------------------------------ */

static bool digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
    }
    return true;
}

/* A cluster name as node/ allows it: 1..IDX_BACKUP_CLUSTER_MAX bytes of
 * printable ASCII without spaces. */
static bool cluster_valid(const char *s, size_t n)
{
    if (n == 0 || n > IDX_BACKUP_CLUSTER_MAX) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
            return false;
        }
    }
    return true;
}

bool idx__backup_name_valid(const char *name, size_t n)
{
    if (n == 13 && memcmp(name, "lmdb/data.mdb", 13) == 0) {
        return true;
    }
    if (n == 4 + 20 + 4 && memcmp(name, "log/", 4) == 0 &&
        digits(name + 4, 20) && memcmp(name + 24, ".seg", 4) == 0) {
        return true;
    }
    return n == 4 + 20 + 5 && memcmp(name, "log/", 4) == 0 &&
           digits(name + 4, 20) && memcmp(name + 24, ".ckpt", 5) == 0;
}

int idx__backup_manifest_encode(const struct idx__backup_manifest *m,
                                struct tern_wbuf *w)
{
    size_t start = w->len;
    size_t cn = strlen(m->cluster);
    uint8_t *len_at;
    if (!cluster_valid(m->cluster, cn) || m->n_files > IDX__BACKUP_MAX_FILES) {
        return TERN_EINVAL;
    }
    for (uint32_t i = 0; i < m->n_files; i++) {
        size_t k = strlen(m->files[i].name);
        if (!idx__backup_name_valid(m->files[i].name, k)) {
            return TERN_EINVAL;
        }
    }
    tern_wbuf_u32(w, IDX__BACKUP_MAGIC);
    tern_wbuf_u16(w, IDX__BACKUP_VERSION);
    tern_wbuf_u16(w, 0);
    tern_wbuf_u32(w, 0); /* length, patched below */
    tern_wbuf_u32(w, m->n_files);
    tern_wbuf_u64(w, m->created_ms);
    tern_wbuf_u64(w, m->node_id);
    tern_wbuf_u64(w, m->term);
    tern_wbuf_u64(w, m->snap.last_applied);
    tern_wbuf_u64(w, m->snap.log_end);
    tern_wbuf_u64(w, m->snap.last_rec_pos);
    tern_wbuf_u32(w, m->snap.last_rec_checksum);
    tern_wbuf_u32(w, m->snap.ckpt_sum);
    tern_wbuf_u64(w, m->snap.log_start);
    tern_wbuf_u64(w, m->snap.ckpt_size);
    tern_wbuf_u8(w, (uint8_t)cn);
    tern_wbuf_put(w, m->cluster, cn);
    for (uint32_t i = 0; i < m->n_files; i++) {
        size_t k = strlen(m->files[i].name);
        tern_wbuf_u8(w, (uint8_t)k);
        tern_wbuf_put(w, m->files[i].name, k);
        tern_wbuf_u64(w, m->files[i].size);
        tern_wbuf_u32(w, m->files[i].checksum);
    }
    tern_wbuf_u32(w, 0); /* checksum, patched below */
    if (w->err != 0) {
        return w->err;
    }
    if (w->len - start > IDX__BACKUP_MANIFEST_MAX) {
        return TERN_ETOOBIG;
    }
    len_at = w->base + start;
    tern_put_u32(len_at + 8, (uint32_t)(w->len - start));
    tern_put_u32(w->base + w->len - 4,
                 tern_checksum32(len_at, w->len - start - 4));
    return 0;
}

void idx__backup_manifest_free(struct idx__backup_manifest *m)
{
    tern_free(m->files);
    m->files = NULL;
    m->n_files = 0;
}

int idx__backup_manifest_decode(const void *buf,
                                size_t len,
                                struct idx__backup_manifest *m)
{
    const uint8_t *b = buf;
    struct tern_cursor c;
    uint8_t snap[IDX__MANIFEST_SIZE];
    size_t cn;
    int rc;

    memset(m, 0, sizeof *m);
    if (buf == NULL || len < IDX__BACKUP_FIXED + 4 ||
        len > IDX__BACKUP_MANIFEST_MAX ||
        tern_get_u32(b) != IDX__BACKUP_MAGIC || tern_get_u32(b + 8) != len) {
        return TERN_EMALFORMED;
    }
    if (!IDX__CHECKSUM_OK(tern_get_u32(b + len - 4),
                          tern_checksum32(b, len - 4))) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u16(b + 4) != IDX__BACKUP_VERSION) {
        return TERN_EVERSION;
    }
    if (tern_get_u16(b + 6) != 0 ||
        tern_get_u32(b + 12) > IDX__BACKUP_MAX_FILES) {
        return TERN_EMALFORMED;
    }
    tern_cursor_init(&c, b + 12, len - 12 - 4);
    m->n_files = tern_cursor_u32(&c);
    m->created_ms = tern_cursor_u64(&c);
    m->node_id = tern_cursor_u64(&c);
    m->term = tern_cursor_u64(&c);
    /* The snapshot fields, checked as a snapshot manifest. */
    {
        struct idx__manifest t;
        t.last_applied = tern_cursor_u64(&c);
        t.log_end = tern_cursor_u64(&c);
        t.last_rec_pos = tern_cursor_u64(&c);
        t.last_rec_checksum = tern_cursor_u32(&c);
        t.ckpt_sum = tern_cursor_u32(&c);
        t.log_start = tern_cursor_u64(&c);
        t.ckpt_size = tern_cursor_u64(&c);
        idx__manifest_encode(snap, &t);
    }
    cn = tern_cursor_u8(&c);
    if (c.err != 0 || cn == 0 || cn > IDX_BACKUP_CLUSTER_MAX) {
        return TERN_EMALFORMED;
    }
    rc = idx__manifest_decode(snap, sizeof snap, &m->snap);
    if (rc != 0) {
        return TERN_EMALFORMED;
    }
    const uint8_t *name = tern_cursor_bytes(&c, cn);
    if (name == NULL || !cluster_valid((const char *)name, cn)) {
        return TERN_EMALFORMED;
    }
    memcpy(m->cluster, name, cn);
    m->cluster[cn] = '\0';
    if (m->n_files > 0) {
        m->files = tern_calloc(m->n_files, sizeof *m->files);
        if (m->files == NULL) {
            m->n_files = 0;
            return -ENOMEM;
        }
    }
    for (uint32_t i = 0; i < m->n_files; i++) {
        size_t k = tern_cursor_u8(&c);
        const uint8_t *f = tern_cursor_bytes(&c, k);
        if (f == NULL || !idx__backup_name_valid((const char *)f, k)) {
            idx__backup_manifest_free(m);
            return TERN_EMALFORMED;
        }
        memcpy(m->files[i].name, f, k);
        m->files[i].name[k] = '\0';
        m->files[i].size = tern_cursor_u64(&c);
        m->files[i].checksum = tern_cursor_u32(&c);
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(m->files[j].name, m->files[i].name) == 0) {
                idx__backup_manifest_free(m);
                return TERN_EMALFORMED;
            }
        }
    }
    if (c.err != 0 || tern_cursor_left(&c) != 0) {
        idx__backup_manifest_free(m);
        return TERN_EMALFORMED;
    }
    return 0;
}

/* ---- File helpers (any thread) ------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0) {
        return -errno;
    }
    if (fsync(fd) != 0) {
        rc = -errno;
    }
    close(fd);
    return rc;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Copy the first n bytes of src to a new file dst (0600, fsynced),
 * checksumming them. OUT: *sum. cancel may be NULL. */
static int copy_prefix(const char *src,
                       const char *dst,
                       uint64_t n,
                       uint32_t *sum,
                       atomic_int *cancel,
                       char *errmsg)
{
    struct tern_checksum_state st;
    uint8_t *buf = tern_malloc(IDX__BACKUP_CHUNK);
    int in = -1, out = -1, rc = 0;
    uint64_t done = 0;

    if (buf == NULL) {
        return -ENOMEM;
    }
    tern_checksum32_begin(&st);
    in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "open %s: %s", src, strerror(errno));
        goto err_after_buf;
    }
    out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "create %s: %s", dst, strerror(errno));
        goto err_after_in;
    }
    while (done < n) {
        size_t want = (size_t)TERN_MIN((uint64_t)IDX__BACKUP_CHUNK, n - done);
        ssize_t k;
        if (cancel != NULL && atomic_load(cancel)) {
            rc = TERN_ECANCELED;
            tern_errmsg_printf(errmsg, "backup canceled: the index closed");
            goto err_after_out;
        }
        k = pread(in, buf, want, (off_t)done);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            rc = k < 0 ? -errno : TERN_ECORRUPT;
            tern_errmsg_printf(errmsg, "read %s at %llu: %s", src,
                               (unsigned long long)done,
                               k < 0 ? strerror(errno) : "file is short");
            goto err_after_out;
        }
        tern_checksum32_update(&st, buf, (size_t)k);
        rc = write_all(out, buf, (size_t)k);
        if (rc != 0) {
            tern_errmsg_printf(errmsg, "write %s: %s", dst, tern_strerror(rc));
            goto err_after_out;
        }
        done += (uint64_t)k;
    }
    if (fsync(out) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "fsync %s: %s", dst, strerror(errno));
        goto err_after_out;
    }
    *sum = tern_checksum32_end(&st);
err_after_out:
    close(out);
err_after_in:
    close(in);
err_after_buf:
    tern_free(buf);
    return rc;
}

/* Size and checksum of a whole file. */
static int file_sum(const char *path, uint64_t *size, uint32_t *sum)
{
    struct tern_checksum_state st;
    uint8_t *buf = tern_malloc(IDX__BACKUP_CHUNK);
    int fd, rc = 0;
    uint64_t done = 0;
    if (buf == NULL) {
        return -ENOMEM;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        tern_free(buf);
        return rc;
    }
    tern_checksum32_begin(&st);
    for (;;) {
        ssize_t k = read(fd, buf, IDX__BACKUP_CHUNK);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k < 0) {
            rc = -errno;
            break;
        }
        if (k == 0) {
            break;
        }
        tern_checksum32_update(&st, buf, (size_t)k);
        done += (uint64_t)k;
    }
    close(fd);
    tern_free(buf);
    *size = done;
    *sum = tern_checksum32_end(&st);
    return rc;
}

/* "log/NNN.seg" or ".ckpt" -> its position; kind 's' or 'c', 0 else. */
static char log_name_kind(const char *name, uint64_t *pos)
{
    size_t n = strlen(name);
    if (!idx__backup_name_valid(name, n) || strncmp(name, "log/", 4) != 0) {
        return 0;
    }
    *pos = strtoull(name + 4, NULL, 10);
    return name[n - 1] == 'g' ? 's' : 'c';
}

/* ---- Begin (loop thread) ------------------------------------------------- */

/* Is path (resolved) dir itself or below it? */
static bool path_within(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The target must be absolute, outside the data dir, and missing (its
 * parent exists) or an empty directory. OUT: *exists. */
static int check_target(const struct idx_backup_options *o,
                        bool *exists,
                        char *errmsg)
{
    char parent[IDX__PATH_BUF], rp[PATH_MAX], rdata[PATH_MAX];
    const char *slash;
    struct stat sb;
    DIR *d;

    if (o->dir == NULL || o->dir[0] != '/' ||
        strlen(o->dir) >= IDX__PATH_MAX - 64) {
        tern_errmsg_printf(errmsg,
                           "backup directory must be an absolute path "
                           "(on the node's host) shorter than %d bytes",
                           IDX__PATH_MAX - 64);
        return TERN_EINVAL;
    }
    if (o->data_dir == NULL || realpath(o->data_dir, rdata) == NULL) {
        tern_errmsg_printf(errmsg, "cannot resolve the data directory");
        return TERN_EINVAL;
    }
    *exists = stat(o->dir, &sb) == 0;
    if (*exists) {
        struct dirent *de;
        if (!S_ISDIR(sb.st_mode)) {
            tern_errmsg_printf(errmsg, "backup target %s is not a directory",
                               o->dir);
            return TERN_EINVAL;
        }
        if (realpath(o->dir, rp) == NULL) {
            tern_errmsg_printf(errmsg, "resolve %s: %s", o->dir,
                               strerror(errno));
            return -errno;
        }
        d = opendir(o->dir);
        if (d == NULL) {
            tern_errmsg_printf(errmsg, "open %s: %s", o->dir, strerror(errno));
            return -errno;
        }
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
                closedir(d);
                tern_errmsg_printf(
                    errmsg, "backup target %s exists and is not empty", o->dir);
                return TERN_EINVAL;
            }
        }
        closedir(d);
    } else {
        slash = strrchr(o->dir, '/');
        (void)snprintf(parent, sizeof parent, "%.*s",
                       (int)(slash == o->dir ? 1 : slash - o->dir), o->dir);
        if (realpath(parent, rp) == NULL) {
            tern_errmsg_printf(errmsg,
                               "the parent directory of %s does not exist "
                               "on the node: %s",
                               o->dir, strerror(errno));
            return TERN_EINVAL;
        }
        /* The last component joins the parent, which is outside the data
         * dir unless it is inside; a name of ".." is refused. */
        if (strcmp(slash + 1, "..") == 0 || strcmp(slash + 1, ".") == 0 ||
            slash[1] == '\0') {
            tern_errmsg_printf(errmsg,
                               "backup target %s names no new "
                               "directory",
                               o->dir);
            return TERN_EINVAL;
        }
    }
    /* rp: the target, or its parent when it is still to be made (an empty
     * or new directory cannot hold the data dir). */
    if (path_within(rp, rdata)) {
        tern_errmsg_printf(errmsg,
                           "backup target %s is inside the data directory "
                           "%s",
                           o->dir, rdata);
        return TERN_EINVAL;
    }
    return 0;
}

/* Bytes the backup will write: LMDB's file plus the log's segments. */
static uint64_t estimate_bytes(const struct idx_env *e)
{
    char path[IDX__PATH_BUF];
    struct stat sb;
    uint64_t n = 0;
    (void)snprintf(path, sizeof path, "%s/data.mdb", e->lmdb_dir);
    if (stat(path, &sb) == 0) {
        n += (uint64_t)sb.st_size;
    }
    return n + (e->log_end - TERN_MIN(idx__log_first(e), e->log_end)) +
           (uint64_t)e->n_segs * IDX__SEG_HDR;
}

int idx_backup_begin(struct idx_env *e,
                     const struct idx_backup_options *o,
                     struct idx_backup **out,
                     char *errmsg)
{
    struct idx_backup *b;
    struct statvfs vs;
    char probe[IDX__PATH_BUF];
    bool exists = false;
    uint64_t need, avail;
    int rc;

    *out = NULL;
    if (e->backup != NULL) {
        tern_errmsg_printf(errmsg,
                           "a backup of this node is already running "
                           "(one at a time per node)");
        return TERN_EBACKUP;
    }
    if (o->cluster == NULL || !cluster_valid(o->cluster, strlen(o->cluster))) {
        tern_errmsg_printf(errmsg, "bad cluster name for the manifest");
        return TERN_EINVAL;
    }
    rc = check_target(o, &exists, errmsg);
    if (rc != 0) {
        return rc;
    }
    /* Disk space where the backup goes. */
    if (exists) {
        (void)snprintf(probe, sizeof probe, "%s", o->dir);
    } else {
        const char *slash = strrchr(o->dir, '/');
        (void)snprintf(probe, sizeof probe, "%.*s",
                       (int)(slash == o->dir ? 1 : slash - o->dir), o->dir);
    }
    if (statvfs(probe, &vs) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "statvfs %s: %s", probe, strerror(errno));
        return rc;
    }
    need = estimate_bytes(e) + o->min_free_bytes;
    avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    if (avail < need) {
        tern_errmsg_printf(errmsg,
                           "not enough free disk for the backup at %s: "
                           "%llu bytes free, %llu needed (the copy plus "
                           "[node] min_free_disk_bytes)",
                           probe, (unsigned long long)avail,
                           (unsigned long long)need);
        return TERN_EFULL;
    }
    b = tern_calloc(1, sizeof *b);
    if (b == NULL) {
        return -ENOMEM;
    }
    if (!exists && mkdir(o->dir, 0700) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "mkdir %s: %s", o->dir, strerror(errno));
        tern_free(b);
        return rc;
    }
    (void)snprintf(b->dir, sizeof b->dir, "%s", o->dir);
    (void)snprintf(b->log_dir, sizeof b->log_dir, "%s", e->log_dir);
    (void)snprintf(b->cluster, sizeof b->cluster, "%s", o->cluster);
    b->node_id = o->node_id;
    b->term = o->term;
    b->min_applied = o->min_applied;
    b->env = e;
    b->mdb = e->mdb;
    b->log_start = e->log_start;
    if (b->log_start > 0) {
        b->ckpt_size = idx__ckpt_file_size(e, b->log_start, &b->ckpt_sum);
        if (b->ckpt_size == 0) {
            tern_errmsg_printf(errmsg,
                               "the checkpoint at the log start %llu "
                               "is missing",
                               (unsigned long long)b->log_start);
            tern_free(b);
            return TERN_ECORRUPT;
        }
    }
    atomic_init(&b->state, BK_QUEUED);
    atomic_init(&b->cancel, 0);
    e->backup = b;
    *out = b;
    return 0;
}

bool idx_backup_holds(const struct idx_env *e)
{
    return e->backup != NULL;
}

/* ---- Run (worker thread) ------------------------------------------------- */

/* Read the meta "state" row of the LMDB copy at dir/lmdb. */
static int copied_state(const char *lmdb_dir,
                        struct idx__state *st,
                        char *errmsg)
{
    MDB_env *env;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    MDB_val k, v;
    int rc = mdb_env_create(&env);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "lmdb create: %s", mdb_strerror(rc));
        return TERN_EINTERNAL;
    }
    (void)mdb_env_set_maxdbs(env, 32);
    rc = mdb_env_open(env, lmdb_dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0600);
    if (rc == 0) {
        rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    }
    if (rc == 0) {
        rc = mdb_dbi_open(txn, "meta", 0, &dbi);
    }
    if (rc == 0) {
        k.mv_data = (void *)IDX__META_KEY_STATE;
        k.mv_size = strlen(IDX__META_KEY_STATE);
        rc = mdb_get(txn, dbi, &k, &v);
    }
    if (rc == MDB_NOTFOUND) {
        memset(st, 0, sizeof *st); /* an index that applied nothing */
        rc = 0;
    } else if (rc == 0 && idx__state_decode(v.mv_data, v.mv_size, st) != 0) {
        rc = MDB_CORRUPTED;
    }
    if (txn != NULL) {
        mdb_txn_abort(txn);
    }
    mdb_env_close(env);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "read the state of the LMDB copy: %s",
                           mdb_strerror(rc));
        return TERN_ECORRUPT;
    }
    return 0;
}

static int add_file(struct idx__backup_manifest *m,
                    size_t *cap,
                    const char *name,
                    uint64_t size,
                    uint32_t sum)
{
    if (m->n_files == IDX__BACKUP_MAX_FILES) {
        return TERN_ELIMIT;
    }
    if (m->n_files == *cap) {
        size_t nc = *cap == 0 ? 16 : *cap * 2;
        void *p = tern_realloc(m->files, nc * sizeof *m->files);
        if (p == NULL) {
            return -ENOMEM;
        }
        m->files = p;
        *cap = nc;
    }
    size_t len = strlen(name);
    if (len >= sizeof m->files[m->n_files].name) {
        return TERN_ELIMIT;
    }
    memcpy(m->files[m->n_files].name, name, len + 1);
    m->files[m->n_files].size = size;
    m->files[m->n_files].checksum = sum;
    m->n_files++;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* List the positions of log/ files of a kind ('s' segments, 'c'
 * checkpoints) in dir, sorted. OUT: *pos (tern_malloc'd), *n. */
static int list_log(const char *dir, char kind, uint64_t **pos, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t cap = 0;
    *pos = NULL;
    *n = 0;
    if (d == NULL) {
        return -errno;
    }
    while ((de = readdir(d)) != NULL) {
        char name[300];
        uint64_t p;
        (void)snprintf(name, sizeof name, "log/%s", de->d_name);
        if (log_name_kind(name, &p) != kind) {
            continue;
        }
        if (*n == cap) {
            size_t nc = cap == 0 ? 16 : cap * 2;
            void *q = tern_realloc(*pos, nc * sizeof **pos);
            if (q == NULL) {
                closedir(d);
                tern_free(*pos);
                *pos = NULL;
                return -ENOMEM;
            }
            *pos = q;
            cap = nc;
        }
        (*pos)[(*n)++] = p;
    }
    closedir(d);
    if (*n > 0) {
        qsort(*pos, *n, sizeof **pos, cmp_u64);
    }
    return 0;
}

/* The checksum and raft index of the record at pos in the segments of
 * dir/log (listed in segs, starts sorted), streaming its payload. */
static int read_record_at(const char *dir,
                          const uint64_t *segs,
                          size_t n_segs,
                          uint64_t pos,
                          uint64_t *index,
                          uint32_t *sum_stored,
                          uint32_t *sum_computed)
{
    uint8_t hdr[IDX__REC_HDR_SIZE];
    uint8_t *buf = NULL;
    struct idx__record r;
    struct idx__record_sum st;
    uint64_t at = pos, end;
    size_t got = 0;
    int rc = 0;

    /* Bytes [pos, pos + len) across segments: first the header. */
    for (int pass = 0; pass < 2; pass++) {
        uint64_t want_end = pass == 0 ? pos + IDX__REC_HDR_SIZE : end;
        for (size_t i = 0; i < n_segs && at < want_end; i++) {
            char path[IDX__PATH_BUF];
            struct stat sb;
            uint64_t s = segs[i], size;
            int fd;
            (void)snprintf(path, sizeof path, "%s/log/%020llu.seg", dir,
                           (unsigned long long)s);
            fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                rc = -errno;
                goto out;
            }
            if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < IDX__SEG_HDR) {
                close(fd);
                rc = TERN_ECORRUPT;
                goto out;
            }
            size = (uint64_t)sb.st_size - IDX__SEG_HDR;
            while (at >= s && at < s + size && at < want_end) {
                size_t n = (size_t)TERN_MIN(TERN_MIN(s + size, want_end) - at,
                                            (uint64_t)IDX__BACKUP_CHUNK);
                uint8_t *dst = pass == 0 ? hdr + got : buf;
                ssize_t k = pread(fd, dst, n, (off_t)(at - s + IDX__SEG_HDR));
                if (k <= 0) {
                    close(fd);
                    rc = k < 0 ? -errno : TERN_ECORRUPT;
                    goto out;
                }
                if (pass == 1) {
                    idx__record_sum_update(&st, buf, (size_t)k);
                } else {
                    got += (size_t)k;
                }
                at += (uint64_t)k;
            }
            close(fd);
        }
        if (at != want_end) {
            rc = TERN_ECORRUPT; /* the log does not reach that far */
            goto out;
        }
        if (pass == 0) {
            if (idx__record_header_decode(hdr, &r) != 0) {
                rc = TERN_ECORRUPT;
                goto out;
            }
            end = pos + IDX__REC_HDR_SIZE + r.payload_len;
            buf = tern_malloc(IDX__BACKUP_CHUNK);
            if (buf == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            idx__record_sum_begin(&st, hdr);
        }
    }
    *index = r.index;
    *sum_stored = r.checksum;
    *sum_computed = idx__record_sum_end(&st);
out:
    tern_free(buf);
    return rc;
}

/* Check the record a manifest's snapshot fields name, in dir/log. */
static int check_last_record(const char *dir,
                             const struct idx__manifest *s,
                             const uint64_t *segs,
                             size_t n_segs,
                             char *errmsg)
{
    uint64_t index = 0;
    uint32_t stored = 0, computed = 0;
    int rc;
    if (s->last_applied == 0) {
        return 0;
    }
    rc = read_record_at(dir, segs, n_segs, s->last_rec_pos, &index, &stored,
                        &computed);
    if (rc != 0 || index != s->last_applied || stored != computed ||
        stored != s->last_rec_checksum) {
        tern_errmsg_printf(errmsg,
                           "the record at log position %llu (raft index "
                           "%llu) is missing or damaged in the backup",
                           (unsigned long long)s->last_rec_pos,
                           (unsigned long long)s->last_applied);
        return TERN_ECORRUPT;
    }
    return 0;
}

/* Write dir/MANIFEST (write temp, fsync, rename, fsync dir). */
static int write_manifest(const char *dir,
                          const struct idx__backup_manifest *m,
                          char *errmsg)
{
    char tmp[IDX__PATH_BUF], path[IDX__PATH_BUF];
    struct tern_wbuf w;
    int fd, rc;
    tern_wbuf_init(&w);
    rc = idx__backup_manifest_encode(m, &w);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "encode the manifest: %s",
                           tern_strerror(rc));
        goto out;
    }
    (void)snprintf(tmp, sizeof tmp, "%s/MANIFEST.tmp", dir);
    (void)snprintf(path, sizeof path, "%s/MANIFEST", dir);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "create %s: %s", tmp, strerror(errno));
        goto out;
    }
    rc = write_all(fd, w.base, w.len);
    if (rc == 0 && fsync(fd) != 0) {
        rc = -errno;
    }
    close(fd);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -errno;
    }
    if (rc == 0) {
        rc = fsync_path(dir);
    }
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "write %s: %s", path, tern_strerror(rc));
    }
out:
    tern_wbuf_free(&w);
    return rc;
}

static void info_from(const struct idx__backup_manifest *m,
                      struct idx_backup_info *info)
{
    memset(info, 0, sizeof *info);
    info->created_ms = m->created_ms;
    info->node_id = m->node_id;
    info->term = m->term;
    info->last_applied = m->snap.last_applied;
    info->log_start = m->snap.log_start;
    info->log_end = m->snap.log_end;
    info->n_files = m->n_files;
    for (uint32_t i = 0; i < m->n_files; i++) {
        info->total_bytes += m->files[i].size;
    }
    (void)snprintf(info->cluster, sizeof info->cluster, "%s", m->cluster);
}

static int run(struct idx_backup *b)
{
    struct idx__backup_manifest m;
    struct idx__state st;
    char path[IDX__PATH_BUF], src[IDX__PATH_BUF];
    uint64_t *segs = NULL, *ckpts = NULL, *copied = NULL;
    size_t n_segs = 0, n_ckpts = 0, n_copied = 0, cap = 0;
    uint64_t size;
    uint32_t sum;
    int rc;

    memset(&m, 0, sizeof m);
    /* 1. LMDB, in one read txn (mdb_env_copy2's own). */
    (void)snprintf(path, sizeof path, "%s/lmdb", b->dir);
    if (mkdir(path, 0700) != 0) {
        rc = -errno;
        tern_errmsg_printf(b->errmsg, "mkdir %s: %s", path, strerror(errno));
        return rc;
    }
    rc = mdb_env_copy2(b->mdb, path, 0);
    if (rc != 0) {
        tern_errmsg_printf(b->errmsg, "copy LMDB to %s: %s", path,
                           mdb_strerror(rc));
        return rc > 0 ? -rc : TERN_EINTERNAL;
    }
    rc = copied_state(path, &st, b->errmsg);
    if (rc != 0) {
        return rc;
    }
    if (st.last_applied < b->min_applied) {
        tern_errmsg_printf(b->errmsg,
                           "the index copy covers raft index %llu, below "
                           "the %llu asked for (not flushed yet): retry",
                           (unsigned long long)st.last_applied,
                           (unsigned long long)b->min_applied);
        return TERN_EBUSY;
    }
    (void)snprintf(path, sizeof path, "%s/lmdb/data.mdb", b->dir);
    rc = file_sum(path, &size, &sum);
    if (rc == 0) {
        rc = add_file(&m, &cap, "lmdb/data.mdb", size, sum);
    }
    if (rc != 0) {
        tern_errmsg_printf(b->errmsg, "checksum %s: %s", path,
                           tern_strerror(rc));
        goto out;
    }
    m.snap.last_applied = st.last_applied;
    m.snap.log_end = st.log_end;
    m.snap.last_rec_pos = st.last_rec_pos;
    m.snap.last_rec_checksum = st.last_rec_checksum;
    m.snap.log_start = b->log_start;
    m.snap.ckpt_size = b->ckpt_size;
    m.snap.ckpt_sum = b->ckpt_sum;
    if (st.log_end < b->log_start) {
        rc = TERN_EINTERNAL;
        tern_errmsg_printf(b->errmsg,
                           "the index copy ends before the log "
                           "start");
        goto out;
    }

    /* 2. The segments below the covered log end, cut there. */
    (void)snprintf(path, sizeof path, "%s/log", b->dir);
    if (mkdir(path, 0700) != 0) {
        rc = -errno;
        tern_errmsg_printf(b->errmsg, "mkdir %s: %s", path, strerror(errno));
        goto out;
    }
    rc = list_log(b->log_dir, 's', &segs, &n_segs);
    if (rc == 0) {
        rc = list_log(b->log_dir, 'c', &ckpts, &n_ckpts);
    }
    if (rc == 0) {
        copied = tern_calloc(n_segs + 1, sizeof *copied);
        rc = copied == NULL ? -ENOMEM : 0;
    }
    if (rc != 0) {
        tern_errmsg_printf(b->errmsg, "list %s: %s", b->log_dir,
                           tern_strerror(rc));
        goto out;
    }
    for (size_t i = 0; i < n_segs; i++) {
        char name[IDX__BACKUP_NAME_MAX + 3];
        uint64_t start = segs[i], stream;
        struct stat sb;
        if (start >= st.log_end && !(st.log_end == 0 && i == 0)) {
            continue;
        }
        /* Segments wholly before the log start's segment are not read. */
        if (i + 1 < n_segs && segs[i + 1] <= b->log_start &&
            segs[i + 1] > start) {
            continue;
        }
        (void)snprintf(src, sizeof src, "%s/%020llu.seg", b->log_dir,
                       (unsigned long long)start);
        if (stat(src, &sb) != 0) {
            rc = -errno;
            tern_errmsg_printf(b->errmsg, "stat %s: %s", src, strerror(errno));
            goto out;
        }
        stream = (uint64_t)sb.st_size > IDX__SEG_HDR
                     ? (uint64_t)sb.st_size - IDX__SEG_HDR
                     : 0;
        stream = TERN_MIN(stream, st.log_end > start ? st.log_end - start : 0);
        (void)snprintf(name, sizeof name, "log/%020llu.seg",
                       (unsigned long long)start);
        (void)snprintf(path, sizeof path, "%s/%s", b->dir, name);
        rc = copy_prefix(src, path, stream + IDX__SEG_HDR, &sum, &b->cancel,
                         b->errmsg);
        if (rc == 0) {
            rc = add_file(&m, &cap, name, stream + IDX__SEG_HDR, sum);
        }
        if (rc != 0) {
            goto out;
        }
        copied[n_copied++] = start;
    }
    /* 3. The checkpoints from the log start up to the log end. */
    for (size_t i = 0; i < n_ckpts; i++) {
        char name[IDX__BACKUP_NAME_MAX + 3];
        struct stat sb;
        if (ckpts[i] < b->log_start || ckpts[i] >= st.log_end) {
            continue;
        }
        (void)snprintf(src, sizeof src, "%s/%020llu.ckpt", b->log_dir,
                       (unsigned long long)ckpts[i]);
        if (stat(src, &sb) != 0) {
            rc = -errno;
            tern_errmsg_printf(b->errmsg, "stat %s: %s", src, strerror(errno));
            goto out;
        }
        (void)snprintf(name, sizeof name, "log/%020llu.ckpt",
                       (unsigned long long)ckpts[i]);
        (void)snprintf(path, sizeof path, "%s/%s", b->dir, name);
        rc = copy_prefix(src, path, (uint64_t)sb.st_size, &sum, &b->cancel,
                         b->errmsg);
        if (rc == 0) {
            rc = add_file(&m, &cap, name, (uint64_t)sb.st_size, sum);
        }
        if (rc != 0) {
            goto out;
        }
    }
    (void)snprintf(path, sizeof path, "%s/log", b->dir);
    rc = fsync_path(path);
    if (rc == 0) {
        (void)snprintf(path, sizeof path, "%s/lmdb", b->dir);
        rc = fsync_path(path);
    }
    if (rc != 0) {
        tern_errmsg_printf(b->errmsg, "fsync %s: %s", path, tern_strerror(rc));
        goto out;
    }
    /* 4. The record the copy covers, read back from the backup. */
    rc = check_last_record(b->dir, &m.snap, copied, n_copied, b->errmsg);
    if (rc != 0) {
        goto out;
    }
    /* 5. The manifest, last. */
    m.created_ms = now_ms();
    m.node_id = b->node_id;
    m.term = b->term;
    (void)snprintf(m.cluster, sizeof m.cluster, "%s", b->cluster);
    rc = write_manifest(b->dir, &m, b->errmsg);
    if (rc == 0) {
        info_from(&m, &b->info);
    }
out:
    tern_free(segs);
    tern_free(ckpts);
    tern_free(copied);
    idx__backup_manifest_free(&m);
    return rc;
}

void idx_backup_run(struct idx_backup *b)
{
    int expected = BK_QUEUED;
    if (!atomic_compare_exchange_strong(&b->state, &expected, BK_RUNNING)) {
        return; /* abandoned by idx_close */
    }
    b->rc = run(b);
    atomic_store(&b->state, BK_DONE);
}

void idx__backup_detach(struct idx_env *e)
{
    struct idx_backup *b = e->backup;
    int expected = BK_QUEUED;
    if (b == NULL) {
        return;
    }
    atomic_store(&b->cancel, 1);
    if (!atomic_compare_exchange_strong(&b->state, &expected, BK_ABANDONED)) {
        /* Running: it stops at its next chunk. */
        while (atomic_load(&b->state) == BK_RUNNING) {
            struct timespec ts = {0, 2000000L};
            (void)nanosleep(&ts, NULL);
        }
    }
    b->env = NULL;
    b->mdb = NULL;
    e->backup = NULL;
}

int idx_backup_end(struct idx_backup *b,
                   struct idx_backup_info *info,
                   char *errmsg)
{
    int rc;
    int state = atomic_load(&b->state);
    if (b->env != NULL) {
        b->env->backup = NULL;
    }
    if (state == BK_DONE) {
        rc = b->rc;
        if (rc != 0) {
            tern_errmsg_printf(errmsg, "%s", b->errmsg);
        } else if (info != NULL) {
            *info = b->info;
        }
    } else {
        rc = TERN_ECANCELED;
        tern_errmsg_printf(errmsg, "backup canceled: the index closed first");
    }
    tern_free(b);
    return rc;
}

/* ---- Verify and install (any thread, blocking) ----------------------------
 */

/* Read and decode dir/MANIFEST. The caller frees m. */
static int load_manifest(const char *dir,
                         struct idx__backup_manifest *m,
                         char *errmsg)
{
    char path[IDX__PATH_BUF];
    uint8_t *buf = NULL;
    struct stat sb;
    int fd, rc = 0;
    ssize_t k;

    memset(m, 0, sizeof *m);
    if (strlen(dir) >= IDX__PATH_MAX - 64) {
        tern_errmsg_printf(errmsg, "backup path too long");
        return TERN_EINVAL;
    }
    (void)snprintf(path, sizeof path, "%s/MANIFEST", dir);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg,
                           "%s: %s (not a backup, or an unfinished one)", path,
                           strerror(errno));
        return rc;
    }
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0 ||
        (uint64_t)sb.st_size > IDX__BACKUP_MANIFEST_MAX) {
        close(fd);
        tern_errmsg_printf(errmsg, "%s: bad size", path);
        return TERN_ECORRUPT;
    }
    buf = tern_malloc((size_t)sb.st_size);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    k = pread(fd, buf, (size_t)sb.st_size, 0);
    close(fd);
    if (k != sb.st_size) {
        tern_free(buf);
        tern_errmsg_printf(errmsg, "%s: short read", path);
        return TERN_ECORRUPT;
    }
    rc = idx__backup_manifest_decode(buf, (size_t)k, m);
    tern_free(buf);
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "%s: %s", path,
                           rc == TERN_EVERSION
                               ? "written by a release this build does not "
                                 "know"
                               : "damaged (checksum or layout)");
        return rc == -ENOMEM || rc == TERN_EVERSION ? rc : TERN_ECORRUPT;
    }
    return 0;
}

/* The manifest's files, checked; segment starts collected in *segs. */
static int check_files(const char *dir,
                       const struct idx__backup_manifest *m,
                       uint64_t **segs,
                       size_t *n_segs,
                       char *errmsg)
{
    char path[IDX__PATH_BUF];
    size_t n_ondisk = 0, n_listed = 0;
    uint64_t end = 0;
    int rc = 0;

    *segs = tern_calloc(m->n_files + 1, sizeof **segs);
    *n_segs = 0;
    if (*segs == NULL) {
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < m->n_files; i++) {
        const struct idx__backup_file *f = &m->files[i];
        uint64_t size = 0, pos = 0;
        uint32_t sum = 0;
        char kind = log_name_kind(f->name, &pos);
        (void)snprintf(path, sizeof path, "%s/%s", dir, f->name);
        rc = file_sum(path, &size, &sum);
        if (rc != 0) {
            tern_errmsg_printf(errmsg, "backup file %s: %s", f->name,
                               tern_strerror(rc));
            return rc == -ENOENT ? TERN_ECORRUPT : rc;
        }
        if (size != f->size || sum != f->checksum) {
            tern_errmsg_printf(errmsg,
                               "backup file %s is damaged: %llu bytes, "
                               "checksum %08x; the manifest says %llu bytes, "
                               "%08x",
                               f->name, (unsigned long long)size, sum,
                               (unsigned long long)f->size, f->checksum);
            return TERN_ECORRUPT;
        }
        if (kind == 's') {
            (*segs)[(*n_segs)++] = pos;
        }
        if (kind != 0) {
            n_listed++;
        }
    }
    /* No stray file in log/ (a segment left over would be read). */
    (void)snprintf(path, sizeof path, "%s/log", dir);
    {
        DIR *d = opendir(path);
        struct dirent *de;
        if (d == NULL) {
            tern_errmsg_printf(errmsg, "backup has no log/: %s",
                               strerror(errno));
            return TERN_ECORRUPT;
        }
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
                n_ondisk++;
            }
        }
        closedir(d);
    }
    if (n_ondisk != n_listed) {
        tern_errmsg_printf(errmsg,
                           "backup log/ holds %zu files, the manifest "
                           "names %zu",
                           n_ondisk, n_listed);
        return TERN_ECORRUPT;
    }
    if (*n_segs > 0) {
        qsort(*segs, *n_segs, sizeof **segs, cmp_u64);
    }
    /* Contiguous segments that reach log_end and hold log_start. */
    for (size_t i = 0; i < *n_segs; i++) {
        uint64_t size = 0;
        for (uint32_t j = 0; j < m->n_files; j++) {
            uint64_t pos;
            if (log_name_kind(m->files[j].name, &pos) == 's' &&
                pos == (*segs)[i]) {
                size = m->files[j].size;
            }
        }
        if (size < IDX__SEG_HDR || (i > 0 && (*segs)[i] != end)) {
            tern_errmsg_printf(errmsg,
                               "backup segments are not contiguous "
                               "at %llu",
                               (unsigned long long)(*segs)[i]);
            return TERN_ECORRUPT;
        }
        end = (*segs)[i] + size - IDX__SEG_HDR;
    }
    if (m->snap.log_end > 0 && (*n_segs == 0 || end != m->snap.log_end ||
                                (*segs)[0] > m->snap.log_start)) {
        tern_errmsg_printf(errmsg,
                           "backup segments cover [%llu, %llu), the manifest "
                           "needs [%llu, %llu)",
                           (unsigned long long)(*n_segs > 0 ? (*segs)[0] : 0),
                           (unsigned long long)end,
                           (unsigned long long)m->snap.log_start,
                           (unsigned long long)m->snap.log_end);
        return TERN_ECORRUPT;
    }
    return 0;
}

int idx_backup_verify(const char *dir,
                      struct idx_backup_info *info,
                      char *errmsg)
{
    struct idx__backup_manifest m;
    uint64_t *segs = NULL;
    size_t n_segs = 0;
    int rc = load_manifest(dir, &m, errmsg);
    if (rc != 0) {
        return rc;
    }
    rc = check_files(dir, &m, &segs, &n_segs, errmsg);
    if (rc == 0) {
        rc = check_last_record(dir, &m.snap, segs, n_segs, errmsg);
    }
    if (rc == 0 && info != NULL) {
        info_from(&m, info);
    }
    tern_free(segs);
    idx__backup_manifest_free(&m);
    return rc;
}

int idx_backup_install(const char *dir,
                       const char *index_dir,
                       bool with_log,
                       uint8_t manifest[IDX_SNAPSHOT_MANIFEST_SIZE],
                       struct idx_backup_info *info,
                       char *errmsg)
{
    struct idx__backup_manifest m;
    char src[IDX__PATH_BUF], dst[IDX__PATH_BUF];
    int rc = with_log ? idx_backup_verify(dir, info, errmsg) : 0;
    if (rc != 0) {
        return rc;
    }
    rc = load_manifest(dir, &m, errmsg);
    if (rc != 0) {
        return rc;
    }
    idx__manifest_encode(manifest, &m.snap);
    if (!with_log) {
        if (info != NULL) {
            info_from(&m, info);
        }
        goto out;
    }
    (void)snprintf(dst, sizeof dst, "%s", index_dir);
    if (mkdir(dst, 0700) != 0 && errno != EEXIST) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "mkdir %s: %s", dst, strerror(errno));
        goto out;
    }
    (void)snprintf(dst, sizeof dst, "%s/log", index_dir);
    if (mkdir(dst, 0700) != 0) {
        rc = -errno;
        tern_errmsg_printf(errmsg, "mkdir %s: %s (the index must be new)", dst,
                           strerror(errno));
        goto out;
    }
    for (uint32_t i = 0; i < m.n_files; i++) {
        uint64_t pos;
        uint32_t sum = 0;
        if (log_name_kind(m.files[i].name, &pos) == 0) {
            continue; /* LMDB is rebuilt from the log at open */
        }
        (void)snprintf(src, sizeof src, "%s/%s", dir, m.files[i].name);
        (void)snprintf(dst, sizeof dst, "%s/%s", index_dir, m.files[i].name);
        rc = copy_prefix(src, dst, m.files[i].size, &sum, NULL, errmsg);
        if (rc == 0 && sum != m.files[i].checksum) {
            rc = TERN_ECORRUPT;
            tern_errmsg_printf(errmsg,
                               "backup file %s changed while it was "
                               "copied",
                               m.files[i].name);
        }
        if (rc != 0) {
            goto out;
        }
    }
    (void)snprintf(dst, sizeof dst, "%s/log", index_dir);
    rc = fsync_path(dst);
    if (rc == 0) {
        rc = fsync_path(index_dir);
    }
    if (rc != 0) {
        tern_errmsg_printf(errmsg, "fsync %s: %s", dst, tern_strerror(rc));
    }
out:
    idx__backup_manifest_free(&m);
    return rc;
}
