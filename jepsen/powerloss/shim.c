/* libtern_powerloss.so: an LD_PRELOAD shim that records which writes to the
 * files under TERN_POWERLOSS_ROOT are durable, so that after kill -9 the tool
 * tern-powerloss-restore can put every file back to its last durable state
 * (simulated power loss: the page cache is lost, the disk survives).
 *
 * Model (ext4-like, see README.md for the full table):
 *   - A file's content becomes durable at fsync/fdatasync, sync_file_range
 *     with SYNC_FILE_RANGE_WAIT_AFTER, msync(MS_SYNC) of a shared mapping,
 *     syncfs or sync.  At that point the shim copies the file into a shadow
 *     (STATE_DIR/rec/<id>.data) atomically, after the real call returned 0.
 *   - Writes through an fd opened O_DSYNC/O_SYNC, and pwritev2 with
 *     RWF_DSYNC/RWF_SYNC, are durable when they return.  A file that only such
 *     fds ever write is never tracked (libraft writes its segments with KAIO,
 *     which no shim can see).  If the file also has a shadow (LMDB's meta fd),
 *     the write is journalled (<id>.redo) and applied to the shadow too.
 *   - Any other modification (write family, ftruncate, fallocate, O_TRUNC,
 *     fopen for writing, shared writable mmap, copy_file_range, sendfile)
 *     first makes sure a shadow of the durable content exists, then creates
 *     the <id>.dirty marker, and only then lets the write reach the file.
 *   - Names: a created file has no durable name until fsync of the file or of
 *     its directory.  rename and unlink become durable at fsync of the
 *     directory holding the name, or (rename) at fsync of the renamed file.
 * Every state change is written to STATE_DIR before the real call it
 * describes, and shadows are replaced by rename, so the state is usable after
 * kill -9 at any instruction.
 *
 * Threads: one global mutex (g_lock) guards the fd table and every record's
 * metadata; each record has a rwlock: non-durable writes hold it shared,
 * durability captures and synchronous writes hold it exclusive.  Lock order
 * is record rwlock, then g_lock.  fork() is not supported. */
#define _GNU_SOURCE
#include "pl_state.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define NFD    65536
#define NMAP   64
#define NHASH  1024

struct rec
{
    struct pl_meta m; /* guarded by g_lock */
    int dirty;        /* marker file exists; guarded by g_lock */
    pthread_rwlock_t io;
    struct rec *next;  /* list of all records */
    struct rec *hnext; /* inode hash chain */
    int hashed;
};

struct fd_ent
{
    int used;
    int is_dir;
    int dsync;
    uint64_t dev, ino;
    char *path; /* directories only; owned by the table */
};

struct map_ent
{
    char *addr;
    size_t len;
    uint64_t dev, ino;
};

static int g_on;
static int g_trace;
static char g_root[PATH_MAX];
static size_t g_rootlen;
static char g_state[PATH_MAX];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fd_ent *g_fds;
static struct rec *g_recs;
static struct rec *g_hash[NHASH];
static struct map_ent g_maps[NMAP];
static unsigned long g_counter;
static char g_idbase[32];

/* Real libc functions, resolved with dlsym(RTLD_NEXT). */
#define REAL(name) (real_##name ? real_##name : resolve_##name())
#define DECL_REAL(ret, name, args)                                             \
    static ret(*real_##name) args;                                             \
    static ret(*resolve_##name(void)) args                                     \
    {                                                                          \
        real_##name = (ret(*) args)dlsym(RTLD_NEXT, #name);                    \
        if (real_##name == NULL) {                                             \
            fprintf(stderr, "tern-powerloss: FATAL dlsym %s\n", #name);        \
            abort();                                                           \
        }                                                                      \
        return real_##name;                                                    \
    }

DECL_REAL(int, openat, (int, const char *, int, ...))
DECL_REAL(ssize_t, write, (int, const void *, size_t))
DECL_REAL(ssize_t, pwrite, (int, const void *, size_t, off_t))
DECL_REAL(ssize_t, pwrite64, (int, const void *, size_t, off64_t))
DECL_REAL(ssize_t, writev, (int, const struct iovec *, int))
DECL_REAL(ssize_t, pwritev, (int, const struct iovec *, int, off_t))
DECL_REAL(ssize_t, pwritev64, (int, const struct iovec *, int, off64_t))
DECL_REAL(ssize_t, pwritev2, (int, const struct iovec *, int, off_t, int))
DECL_REAL(ssize_t, pwritev64v2, (int, const struct iovec *, int, off64_t, int))
DECL_REAL(int, ftruncate, (int, off_t))
DECL_REAL(int, ftruncate64, (int, off64_t))
DECL_REAL(int, truncate, (const char *, off_t))
DECL_REAL(int, truncate64, (const char *, off64_t))
DECL_REAL(int, fallocate, (int, int, off_t, off_t))
DECL_REAL(int, fallocate64, (int, int, off64_t, off64_t))
DECL_REAL(int, posix_fallocate, (int, off_t, off_t))
DECL_REAL(int, posix_fallocate64, (int, off64_t, off64_t))
DECL_REAL(int, fsync, (int))
DECL_REAL(int, fdatasync, (int))
DECL_REAL(int, sync_file_range, (int, off64_t, off64_t, unsigned int))
DECL_REAL(int, msync, (void *, size_t, int))
DECL_REAL(int, syncfs, (int))
DECL_REAL(void, sync, (void))
DECL_REAL(int, close, (int))
DECL_REAL(int, dup, (int))
DECL_REAL(int, dup2, (int, int))
DECL_REAL(int, dup3, (int, int, int))
DECL_REAL(int, fcntl, (int, int, ...))
DECL_REAL(int, fcntl64, (int, int, ...))
DECL_REAL(int, renameat2, (int, const char *, int, const char *, unsigned))
DECL_REAL(int, unlinkat, (int, const char *, int))
DECL_REAL(int, remove, (const char *))
DECL_REAL(void *, mmap, (void *, size_t, int, int, int, off_t))
DECL_REAL(void *, mmap64, (void *, size_t, int, int, int, off64_t))
DECL_REAL(int, munmap, (void *, size_t))
DECL_REAL(FILE *, fopen, (const char *, const char *))
DECL_REAL(FILE *, fopen64, (const char *, const char *))
DECL_REAL(int, fclose, (FILE *))
DECL_REAL(ssize_t,
          copy_file_range,
          (int, off64_t *, int, off64_t *, size_t, unsigned int))
DECL_REAL(ssize_t, sendfile, (int, int, off_t *, size_t))
DECL_REAL(ssize_t, sendfile64, (int, int, off64_t *, size_t))

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    if (!g_trace) {
        return;
    }
    char buf[PATH_MAX * 2 + 128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if ((size_t)n > sizeof buf - 2) {
        n = (int)sizeof buf - 2;
    }
    buf[n++] = '\n';
    dprintf(2, "tern-powerloss[%d]: %.*s", getpid(), n, buf);
}

static void fatal(const char *what, int err) __attribute__((noreturn));
static void fatal(const char *what, int err)
{
    dprintf(2, "tern-powerloss: FATAL %s: %s (state %s)\n", what,
            strerror(err < 0 ? -err : err), g_state);
    abort();
}

static void ensure_active(void);

/* ---- paths --------------------------------------------------------------- */

/* Lexically normalises an absolute path (//, ., ..) into out. */
static int normalise(const char *in, char *out)
{
    size_t n = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/') {
            p++;
        }
        const char *s = p;
        while (*p && *p != '/') {
            p++;
        }
        size_t k = (size_t)(p - s);
        if (k == 0 || (k == 1 && s[0] == '.')) {
            continue;
        }
        if (k == 2 && s[0] == '.' && s[1] == '.') {
            while (n > 0 && out[n - 1] != '/') {
                n--;
            }
            if (n > 0) {
                n--;
            }
            continue;
        }
        if (n + 1 + k >= PATH_MAX) {
            return -1;
        }
        out[n++] = '/';
        memcpy(out + n, s, k);
        n += k;
    }
    if (n == 0) {
        out[n++] = '/';
    }
    out[n] = 0;
    return 0;
}

/* Absolute, normalised form of (dirfd, path).  Symlinks are not resolved. */
static int abs_path(int dirfd, const char *path, char *out)
{
    char base[PATH_MAX], tmp[2 * PATH_MAX + 2];
    if (path == NULL || path[0] == 0) {
        return -1;
    }
    if (path[0] == '/') {
        snprintf(tmp, sizeof tmp, "%s", path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (getcwd(base, sizeof base) == NULL) {
                return -1;
            }
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t k = readlink(link, base, sizeof base - 1);
            if (k <= 0) {
                return -1;
            }
            base[k] = 0;
        }
        snprintf(tmp, sizeof tmp, "%s/%s", base, path);
    }
    return normalise(tmp, out);
}

static int under_root(const char *p)
{
    return strncmp(p, g_root, g_rootlen) == 0 &&
           (p[g_rootlen] == '/' || p[g_rootlen] == 0);
}

/* 1 if the parent directory of path p is exactly dir. */
static int parent_is(const char *p, const char *dir)
{
    const char *slash = strrchr(p, '/');
    if (slash == NULL) {
        return 0;
    }
    size_t k = (size_t)(slash - p);
    if (k == 0) {
        return strcmp(dir, "/") == 0;
    }
    return strlen(dir) == k && strncmp(p, dir, k) == 0;
}

/* ---- records (callers hold g_lock unless noted) -------------------------- */

static unsigned hash_of(uint64_t dev, uint64_t ino)
{
    return (unsigned)((ino * 2654435761u) ^ dev) % NHASH;
}

static void hash_add(struct rec *r)
{
    if (r->hashed || r->m.ino == 0) {
        return;
    }
    unsigned h = hash_of(r->m.dev, r->m.ino);
    r->hnext = g_hash[h];
    g_hash[h] = r;
    r->hashed = 1;
}

static void hash_del(struct rec *r)
{
    if (!r->hashed) {
        return;
    }
    struct rec **pp = &g_hash[hash_of(r->m.dev, r->m.ino)];
    while (*pp != r) {
        pp = &(*pp)->hnext;
    }
    *pp = r->hnext;
    r->hashed = 0;
}

static struct rec *rec_find(uint64_t dev, uint64_t ino)
{
    for (struct rec *r = g_hash[hash_of(dev, ino)]; r; r = r->hnext) {
        if (r->m.dev == dev && r->m.ino == ino) {
            return r;
        }
    }
    return NULL;
}

static void meta_save(struct rec *r)
{
    int rc = pl_meta_write(g_state, &r->m);
    if (rc != 0) {
        fatal("write meta", rc);
    }
}

static struct rec *rec_alloc(void)
{
    struct rec *r = calloc(1, sizeof *r);
    pthread_rwlockattr_t a;
    if (r == NULL) {
        fatal("malloc", ENOMEM);
    }
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&r->io, &a);
    pthread_rwlockattr_destroy(&a);
    r->next = g_recs;
    g_recs = r;
    return r;
}

static struct rec *rec_new(const char *path,
                           int content,
                           const char *dpath,
                           const struct stat *st,
                           unsigned mode)
{
    struct rec *r = rec_alloc();
    snprintf(r->m.id, sizeof r->m.id, "%s-%lu", g_idbase, ++g_counter);
    r->m.content = content;
    r->m.mode = mode & 07777;
    snprintf(r->m.cpath, sizeof r->m.cpath, "%s", path);
    snprintf(r->m.dpath, sizeof r->m.dpath, "%s", dpath);
    if (st != NULL) {
        r->m.dev = (uint64_t)st->st_dev;
        r->m.ino = (uint64_t)st->st_ino;
        r->m.mode = (unsigned)st->st_mode & 07777;
    }
    hash_add(r);
    meta_save(r);
    trace("track %s id=%s content=%d", path, r->m.id, content);
    return r;
}

/* Record of an existing regular file: found by inode, or a new record whose
 * current content and name are taken as durable. */
static struct rec *rec_existing(const char *path, const struct stat *st)
{
    struct rec *r = rec_find((uint64_t)st->st_dev, (uint64_t)st->st_ino);
    return r ? r : rec_new(path, PL_LIVE, path, st, 0);
}

static void rec_unlink_file(struct rec *r, const char *suffix)
{
    char p[PATH_MAX];
    if (pl_rec_path(p, sizeof p, g_state, r->m.id, suffix) == 0) {
        pl_sys_unlink(p);
    }
}

/* Forgets r: nothing is left to restore for it.  The meta goes first. */
static void rec_drop(struct rec *r)
{
    rec_unlink_file(r, ".meta");
    rec_unlink_file(r, ".data");
    rec_unlink_file(r, ".dirty");
    rec_unlink_file(r, ".redo");
    hash_del(r);
    for (struct rec **pp = &g_recs; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    trace("forget id=%s", r->m.id);
    /* r stays allocated: other threads may still hold the pointer. */
}

static void mark_dirty(struct rec *r)
{
    char p[PATH_MAX];
    if (r->dirty) {
        return;
    }
    if (pl_rec_path(p, sizeof p, g_state, r->m.id, ".dirty") != 0) {
        fatal("dirty path", ENAMETOOLONG);
    }
    int fd = pl_sys_open(p, O_WRONLY | O_CREAT, 0600);
    if (fd < 0) {
        fatal("create dirty marker", errno);
    }
    pl_sys_close(fd);
    r->dirty = 1;
}

static void clear_dirty(struct rec *r)
{
    if (r->dirty) {
        rec_unlink_file(r, ".dirty");
        r->dirty = 0;
    }
}

/* Other records whose durable name is p lose it (p now names another file). */
static void displace(const char *p, struct rec *keep)
{
    struct rec *r = g_recs, *next;
    for (; r; r = next) {
        next = r->next;
        if (r != keep && strcmp(r->m.dpath, p) == 0) {
            r->m.dpath[0] = 0;
            if (r->m.unlinked) {
                rec_drop(r);
            } else {
                meta_save(r);
            }
        }
    }
}

/* The current name of r becomes its durable name. */
static void name_durable(struct rec *r)
{
    if (r->m.unlinked || r->m.cpath[0] == 0 ||
        strcmp(r->m.dpath, r->m.cpath) == 0) {
        return;
    }
    displace(r->m.cpath, r);
    snprintf(r->m.dpath, sizeof r->m.dpath, "%s", r->m.cpath);
}

/* Copies the current content of the file (through fd, or its current path if
 * fd < 0) into the shadow.  Caller holds r->io exclusively or g_lock with no
 * non-durable writer possible (content LIVE). */
static void capture(struct rec *r, int fd)
{
    char src[PATH_MAX];
    if (fd >= 0) {
        snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    } else {
        snprintf(src, sizeof src, "%s", r->m.cpath);
    }
    int sfd = pl_sys_open(src, O_RDONLY, 0);
    if (sfd < 0) {
        fatal("open file to capture", errno);
    }
    int rc = pl_shadow_capture(g_state, r->m.id, sfd);
    pl_sys_close(sfd);
    if (rc != 0) {
        fatal("capture shadow", rc);
    }
}

/* Before a non-durable modification: returns with r->io held shared, the
 * durable content saved (shadow) and the dirty marker present. */
static void begin_modify(struct rec *r, int fd)
{
    for (;;) {
        pthread_rwlock_rdlock(&r->io);
        pthread_mutex_lock(&g_lock);
        if (r->m.content != PL_LIVE) {
            mark_dirty(r);
            pthread_mutex_unlock(&g_lock);
            return;
        }
        pthread_mutex_unlock(&g_lock);
        pthread_rwlock_unlock(&r->io);
        pthread_rwlock_wrlock(&r->io);
        pthread_mutex_lock(&g_lock);
        int live = r->m.content == PL_LIVE;
        pthread_mutex_unlock(&g_lock);
        if (live) {
            capture(r, fd);
            pthread_mutex_lock(&g_lock);
            r->m.content = PL_SHADOW;
            meta_save(r);
            pthread_mutex_unlock(&g_lock);
            trace("shadow id=%s (first modification)", r->m.id);
        }
        pthread_rwlock_unlock(&r->io);
    }
}

static void end_modify(struct rec *r)
{
    pthread_rwlock_unlock(&r->io);
}

/* 1 if r has a shared writable mapping (caller holds g_lock). */
static int mapped_writable(const struct rec *r)
{
    for (int i = 0; i < NMAP; i++) {
        if (g_maps[i].addr != NULL && g_maps[i].dev == r->m.dev &&
            g_maps[i].ino == r->m.ino) {
            return 1;
        }
    }
    return 0;
}

/* After a successful fsync-like call (caller holds r->io exclusively). */
static void make_durable(struct rec *r, int fd)
{
    pthread_mutex_lock(&g_lock);
    int content = r->m.content, unlinked = r->m.unlinked;
    pthread_mutex_unlock(&g_lock);
    if (unlinked) {
        return;
    }
    if (content != PL_LIVE) {
        capture(r, fd);
    }
    pthread_mutex_lock(&g_lock);
    if (content != PL_LIVE) {
        r->m.content = PL_SHADOW;
    }
    name_durable(r);
    meta_save(r);
    if (!mapped_writable(r)) {
        /* Stores through a live shared mapping are never seen: a mapped
         * file stays dirty until it is unmapped and synced again. */
        clear_dirty(r);
    }
    pthread_mutex_unlock(&g_lock);
    trace("durable id=%s %s", r->m.id, r->m.cpath);
}

/* fsync of directory dir returned 0: names in it become durable. */
static void dir_synced(const char *dir)
{
    pthread_mutex_lock(&g_lock);
    struct rec *r = g_recs, *next;
    for (; r; r = next) {
        next = r->next;
        int cur_here =
            !r->m.unlinked && r->m.cpath[0] && parent_is(r->m.cpath, dir);
        if (cur_here) {
            if (strcmp(r->m.dpath, r->m.cpath) != 0) {
                name_durable(r);
                meta_save(r);
            }
        } else if (r->m.dpath[0] && parent_is(r->m.dpath, dir)) {
            /* The old name was removed (unlink, or rename to elsewhere). */
            r->m.dpath[0] = 0;
            if (r->m.unlinked) {
                rec_drop(r);
            } else {
                meta_save(r);
            }
        }
    }
    pthread_mutex_unlock(&g_lock);
    trace("dir durable %s", dir);
}

/* sync()/syncfs(): everything becomes durable. */
static void all_durable(void)
{
    struct rec **v;
    size_t n = 0, k = 0;
    pthread_mutex_lock(&g_lock);
    for (struct rec *r = g_recs; r; r = r->next) {
        n++;
    }
    v = malloc((n + 1) * sizeof *v);
    if (v == NULL) {
        fatal("malloc", ENOMEM);
    }
    for (struct rec *r = g_recs; r; r = r->next) {
        v[k++] = r;
    }
    pthread_mutex_unlock(&g_lock);
    for (k = 0; k < n; k++) {
        struct rec *r = v[k];
        pthread_rwlock_wrlock(&r->io);
        pthread_mutex_lock(&g_lock);
        int unlinked = r->m.unlinked;
        int gone = 1;
        for (struct rec *q = g_recs; q; q = q->next) {
            gone &= q != r;
        }
        if (!gone && unlinked) {
            rec_drop(r);
        }
        pthread_mutex_unlock(&g_lock);
        if (!gone && !unlinked) {
            make_durable(r, -1);
        }
        pthread_rwlock_unlock(&r->io);
    }
    free(v);
}

/* ---- fd table ------------------------------------------------------------ */

static void fd_set_ent(int fd,
                       int is_dir,
                       int dsync,
                       const struct stat *st,
                       const char *path)
{
    if (fd < 0 || fd >= NFD) {
        return;
    }
    pthread_mutex_lock(&g_lock);
    struct fd_ent *e = &g_fds[fd];
    free(e->path);
    e->path = is_dir ? strdup(path) : NULL;
    e->is_dir = is_dir;
    e->dsync = dsync;
    e->dev = (uint64_t)st->st_dev;
    e->ino = (uint64_t)st->st_ino;
    __atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
}

static void fd_clear(int fd)
{
    if (!g_on || fd < 0 || fd >= NFD ||
        !__atomic_load_n(&g_fds[fd].used, __ATOMIC_ACQUIRE)) {
        return;
    }
    pthread_mutex_lock(&g_lock);
    __atomic_store_n(&g_fds[fd].used, 0, __ATOMIC_RELEASE);
    free(g_fds[fd].path);
    g_fds[fd].path = NULL;
    pthread_mutex_unlock(&g_lock);
}

static void fd_copy(int from, int to)
{
    if (!g_on || to < 0 || to >= NFD) {
        return;
    }
    fd_clear(to);
    if (from < 0 || from >= NFD ||
        !__atomic_load_n(&g_fds[from].used, __ATOMIC_ACQUIRE)) {
        return;
    }
    pthread_mutex_lock(&g_lock);
    struct fd_ent e = g_fds[from];
    e.path = e.path ? strdup(e.path) : NULL;
    g_fds[to] = e;
    pthread_mutex_unlock(&g_lock);
}

/* What fd refers to: 0 untracked; 1 a tracked record (*rp); 2 a directory
 * (*dir gets a copy of its path). */
static int fd_lookup(int fd, struct rec **rp, int *dsync, char *dir)
{
    int kind = 0;
    if (!g_on || fd < 0 || fd >= NFD ||
        !__atomic_load_n(&g_fds[fd].used, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    pthread_mutex_lock(&g_lock);
    struct fd_ent *e = &g_fds[fd];
    if (e->used && e->is_dir) {
        if (dir != NULL) {
            snprintf(dir, PATH_MAX, "%s", e->path);
        }
        kind = 2;
    } else if (e->used) {
        *rp = rec_find(e->dev, e->ino);
        *dsync = e->dsync;
        kind = *rp ? 1 : 0;
    }
    pthread_mutex_unlock(&g_lock);
    return kind;
}

/* ---- open ---------------------------------------------------------------- */

struct open_ctx
{
    char path[PATH_MAX];
    int tracked;         /* path under root */
    struct rec *created; /* record made for a file about to be created */
    struct rec *trunc;   /* existing file being truncated: io held */
    int dsync;
};

static void open_before(struct open_ctx *c,
                        int dirfd,
                        const char *path,
                        int flags)
{
    struct stat st;
    memset(c, 0, sizeof *c);
    if (!g_on || (flags & O_PATH) || (flags & __O_TMPFILE) == __O_TMPFILE ||
        abs_path(dirfd, path, c->path) != 0 || !under_root(c->path)) {
        return;
    }
    ensure_active();
    c->tracked = 1;
    c->dsync = (flags & O_DSYNC) != 0;
    int writes =
        (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
    if (!writes) {
        return;
    }
    int exists = stat(c->path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        return;
    }
    pthread_mutex_lock(&g_lock);
    struct rec *r =
        exists ? rec_find((uint64_t)st.st_dev, (uint64_t)st.st_ino) : NULL;
    if (!c->dsync && exists) {
        r = rec_existing(c->path, &st);
    } else if (!c->dsync && !exists && (flags & O_CREAT)) {
        c->created = rec_new(c->path, PL_NONE, "", NULL, 0644);
    } else if (c->dsync && !exists && (flags & O_CREAT)) {
        /* The name is durable at once: a record that still had this path
         * as its durable name (renamed or unlinked away) loses it. */
        displace(c->path, NULL);
    }
    pthread_mutex_unlock(&g_lock);
    if (r != NULL && exists && (flags & O_TRUNC) && !c->dsync) {
        begin_modify(r, -1);
        c->trunc = r;
    }
}

static int open_after(struct open_ctx *c, int fd)
{
    int err = errno;
    struct stat st;
    if (c->trunc) {
        end_modify(c->trunc);
    }
    if (fd < 0) {
        if (c->created) {
            pthread_mutex_lock(&g_lock);
            rec_drop(c->created);
            pthread_mutex_unlock(&g_lock);
        }
        errno = err;
        return fd;
    }
    if (!c->tracked || fstat(fd, &st) != 0) {
        errno = err;
        return fd;
    }
    if (c->created) {
        pthread_mutex_lock(&g_lock);
        struct rec *other = rec_find((uint64_t)st.st_dev, (uint64_t)st.st_ino);
        if (other != NULL) {
            /* Lost a creation race: the file existed after all. */
            rec_drop(c->created);
        } else {
            c->created->m.dev = (uint64_t)st.st_dev;
            c->created->m.ino = (uint64_t)st.st_ino;
            c->created->m.mode = (unsigned)st.st_mode & 07777;
            hash_add(c->created);
            meta_save(c->created);
        }
        pthread_mutex_unlock(&g_lock);
    }
    if (S_ISDIR(st.st_mode)) {
        fd_set_ent(fd, 1, 0, &st, c->path);
    } else if (S_ISREG(st.st_mode)) {
        fd_set_ent(fd, 0, c->dsync, &st, c->path);
    }
    trace("open %s fd=%d dsync=%d", c->path, fd, c->dsync);
    errno = err;
    return fd;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_ctx c;
    open_before(&c, dirfd, path, flags);
    int fd = REAL(openat)(dirfd, path, flags, mode);
    return open_after(&c, fd);
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE
               ? (mode_t)va_arg(ap, int)
               : 0;
}

EXPORT int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(AT_FDCWD, path, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(AT_FDCWD, path, flags | O_LARGEFILE, mode);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(dirfd, path, flags, mode);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(dirfd, path, flags | O_LARGEFILE, mode);
}

EXPORT int __open_2(const char *path, int flags)
{
    return do_openat(AT_FDCWD, path, flags, 0);
}

EXPORT int __open64_2(const char *path, int flags)
{
    return do_openat(AT_FDCWD, path, flags | O_LARGEFILE, 0);
}

EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
    return do_openat(dirfd, path, flags, 0);
}

EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
    return do_openat(dirfd, path, flags | O_LARGEFILE, 0);
}

EXPORT int creat(const char *path, mode_t mode)
{
    return do_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

EXPORT int creat64(const char *path, mode_t mode)
{
    return do_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_LARGEFILE,
                     mode);
}

static int fopen_flags(const char *m)
{
    int f = m[0] == 'w'   ? O_WRONLY | O_CREAT | O_TRUNC
            : m[0] == 'a' ? O_WRONLY | O_CREAT | O_APPEND
                          : O_RDONLY;
    if (strchr(m, '+')) {
        f = (f & ~O_ACCMODE) | O_RDWR;
    }
    return f;
}

static FILE *do_fopen(const char *path, const char *mode, int is64)
{
    struct open_ctx c;
    int flags = fopen_flags(mode);
    open_before(&c, AT_FDCWD, path, flags);
    FILE *f = is64 ? REAL(fopen64)(path, mode) : REAL(fopen)(path, mode);
    int err = errno;
    open_after(&c, f ? fileno(f) : -1);
    if (f != NULL && c.tracked && (flags & O_ACCMODE) != O_RDONLY) {
        /* stdio writes go through glibc-internal calls we cannot see: the
         * file counts as modified from now until it is fsynced. */
        struct rec *r = NULL;
        int dsync = 0;
        if (fd_lookup(fileno(f), &r, &dsync, NULL) == 1) {
            begin_modify(r, fileno(f));
            end_modify(r);
        }
    }
    errno = err;
    return f;
}

EXPORT FILE *fopen(const char *path, const char *mode)
{
    return do_fopen(path, mode, 0);
}

EXPORT FILE *fopen64(const char *path, const char *mode)
{
    return do_fopen(path, mode, 1);
}

EXPORT int fclose(FILE *f)
{
    if (f != NULL) {
        fd_clear(fileno(f));
    }
    return REAL(fclose)(f);
}

EXPORT int close(int fd)
{
    fd_clear(fd);
    return REAL(close)(fd);
}

EXPORT int dup(int fd)
{
    int nfd = REAL(dup)(fd);
    int err = errno;
    if (nfd >= 0) {
        fd_copy(fd, nfd);
    }
    errno = err;
    return nfd;
}

EXPORT int dup2(int fd, int nfd)
{
    int rc = REAL(dup2)(fd, nfd);
    int err = errno;
    if (rc >= 0 && fd != nfd) {
        fd_copy(fd, rc);
    }
    errno = err;
    return rc;
}

EXPORT int dup3(int fd, int nfd, int flags)
{
    int rc = REAL(dup3)(fd, nfd, flags);
    int err = errno;
    if (rc >= 0) {
        fd_copy(fd, rc);
    }
    errno = err;
    return rc;
}

static int after_fcntl(int fd, int cmd, int rc)
{
    int err = errno;
    if (rc >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
        fd_copy(fd, rc);
    }
    errno = err;
    return rc;
}

EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return after_fcntl(fd, cmd, REAL(fcntl)(fd, cmd, arg));
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return after_fcntl(fd, cmd, REAL(fcntl64)(fd, cmd, arg));
}

/* ---- writes -------------------------------------------------------------- */

/* One write-like call on a tracked fd, between wop_begin and wop_end. */
struct wop
{
    struct rec *r;
    int kind; /* 0 untracked, 1 non-durable, 2 synchronous + redo */
    int op;   /* enum pl_redo_op for kind 2 */
    uint64_t off;
    char *data; /* gathered bytes for a synchronous write */
    uint64_t len;
};

/* Offset a write(2)-style call will write at. */
static uint64_t cur_offset(int fd)
{
    int fl = REAL(fcntl)(fd, F_GETFL, 0);
    struct stat st;
    if (fl >= 0 && (fl & O_APPEND) && fstat(fd, &st) == 0) {
        return (uint64_t)st.st_size;
    }
    off_t o = lseek(fd, 0, SEEK_CUR);
    return o < 0 ? 0 : (uint64_t)o;
}

/* Starts a synchronous operation on r: journals it for the shadow. */
static void sync_begin(struct wop *w)
{
    struct rec *r = w->r;
    pthread_rwlock_wrlock(&r->io);
    pthread_mutex_lock(&g_lock);
    if (r->m.content == PL_NONE) {
        /* Never-durable file: only what is written synchronously survives. */
        char p[PATH_MAX];
        pl_rec_path(p, sizeof p, g_state, r->m.id, ".data");
        int fd = pl_sys_open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) {
            fatal("create shadow", errno);
        }
        pl_sys_close(fd);
        r->m.content = PL_SHADOW;
        name_durable(r);
        meta_save(r);
    }
    pthread_mutex_unlock(&g_lock);
    int rc = pl_redo_write(g_state, r->m.id, w->op, w->off, w->data, w->len);
    if (rc != 0) {
        fatal("write redo", rc);
    }
}

/* Classifies and prepares a write of the gathered iov at off (-1: current
 * offset) on fd.  sync_flag: the call itself asks for O_DSYNC semantics. */
static void wop_begin(struct wop *w,
                      int fd,
                      const struct iovec *iov,
                      int n,
                      int64_t off,
                      int sync_flag,
                      int op)
{
    int dsync = 0;
    memset(w, 0, sizeof *w);
    if (fd_lookup(fd, &w->r, &dsync, NULL) != 1) {
        return;
    }
    dsync |= sync_flag;
    pthread_mutex_lock(&g_lock);
    int live = w->r->m.content == PL_LIVE;
    pthread_mutex_unlock(&g_lock);
    if (!dsync) {
        w->kind = 1;
        begin_modify(w->r, fd);
        return;
    }
    if (live) {
        return; /* durable content that stays durable */
    }
    w->kind = 2;
    w->op = op;
    w->off = off < 0 ? cur_offset(fd) : (uint64_t)off;
    if (op == PL_REDO_WRITE) {
        for (int i = 0; i < n; i++) {
            w->len += iov[i].iov_len;
        }
        w->data = malloc(w->len ? w->len : 1);
        if (w->data == NULL) {
            fatal("malloc", ENOMEM);
        }
        size_t k = 0;
        for (int i = 0; i < n; i++) {
            memcpy(w->data + k, iov[i].iov_base, iov[i].iov_len);
            k += iov[i].iov_len;
        }
    }
    sync_begin(w);
}

/* Ends the operation; done = bytes written (write ops) or 0/-1 result. */
static void wop_end(struct wop *w, ssize_t done)
{
    int err = errno;
    if (w->kind == 1) {
        end_modify(w->r);
    } else if (w->kind == 2) {
        char p[PATH_MAX];
        pl_rec_path(p, sizeof p, g_state, w->r->m.id, ".data");
        int ok = w->op == PL_REDO_WRITE ? done > 0 : done == 0;
        if (ok) {
            uint64_t len = w->op == PL_REDO_WRITE ? (uint64_t)done : 0;
            int fd = pl_sys_open(p, O_WRONLY | O_CREAT, 0600);
            int rc = fd < 0 ? -errno
                            : pl_redo_apply_fd(fd, w->op, w->off, w->data, len);
            if (fd >= 0) {
                pl_sys_close(fd);
            }
            if (rc != 0) {
                fatal("apply redo", rc);
            }
        }
        rec_unlink_file(w->r, ".redo");
        pthread_rwlock_unlock(&w->r->io);
        free(w->data);
    }
    errno = err;
}

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    struct iovec v = {(void *)(uintptr_t)buf, n};
    struct wop w;
    wop_begin(&w, fd, &v, 1, -1, 0, PL_REDO_WRITE);
    ssize_t rc = REAL(write)(fd, buf, n);
    wop_end(&w, rc);
    return rc;
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    struct iovec v = {(void *)(uintptr_t)buf, n};
    struct wop w;
    wop_begin(&w, fd, &v, 1, off, 0, PL_REDO_WRITE);
    ssize_t rc = REAL(pwrite)(fd, buf, n, off);
    wop_end(&w, rc);
    return rc;
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    struct iovec v = {(void *)(uintptr_t)buf, n};
    struct wop w;
    wop_begin(&w, fd, &v, 1, off, 0, PL_REDO_WRITE);
    ssize_t rc = REAL(pwrite64)(fd, buf, n, off);
    wop_end(&w, rc);
    return rc;
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
    struct wop w;
    wop_begin(&w, fd, iov, n, -1, 0, PL_REDO_WRITE);
    ssize_t rc = REAL(writev)(fd, iov, n);
    wop_end(&w, rc);
    return rc;
}

EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    struct wop w;
    wop_begin(&w, fd, iov, n, off, 0, PL_REDO_WRITE);
    ssize_t rc = REAL(pwritev)(fd, iov, n, off);
    wop_end(&w, rc);
    return rc;
}

EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int n, off64_t off)
{
    struct wop w;
    wop_begin(&w, fd, iov, n, off, 0, PL_REDO_WRITE);
    ssize_t rc = REAL(pwritev64)(fd, iov, n, off);
    wop_end(&w, rc);
    return rc;
}

static int rwf_sync(int flags)
{
    return (flags & (RWF_DSYNC | RWF_SYNC)) != 0;
}

EXPORT ssize_t
pwritev2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
    struct wop w;
    wop_begin(&w, fd, iov, n, off, rwf_sync(flags), PL_REDO_WRITE);
    ssize_t rc = REAL(pwritev2)(fd, iov, n, off, flags);
    wop_end(&w, rc);
    return rc;
}

EXPORT ssize_t
pwritev64v2(int fd, const struct iovec *iov, int n, off64_t off, int flags)
{
    struct wop w;
    wop_begin(&w, fd, iov, n, off, rwf_sync(flags), PL_REDO_WRITE);
    ssize_t rc = REAL(pwritev64v2)(fd, iov, n, off, flags);
    wop_end(&w, rc);
    return rc;
}

EXPORT int ftruncate(int fd, off_t len)
{
    struct wop w;
    wop_begin(&w, fd, NULL, 0, len, 0, PL_REDO_TRUNCATE);
    int rc = REAL(ftruncate)(fd, len);
    wop_end(&w, rc);
    return rc;
}

EXPORT int ftruncate64(int fd, off64_t len)
{
    struct wop w;
    wop_begin(&w, fd, NULL, 0, len, 0, PL_REDO_TRUNCATE);
    int rc = REAL(ftruncate64)(fd, len);
    wop_end(&w, rc);
    return rc;
}

EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
    struct wop w;
    wop_begin(&w, fd, NULL, 0, off + len, 0, PL_REDO_EXTEND);
    int rc = REAL(fallocate)(fd, mode, off, len);
    wop_end(&w, rc);
    return rc;
}

EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
    struct wop w;
    wop_begin(&w, fd, NULL, 0, off + len, 0, PL_REDO_EXTEND);
    int rc = REAL(fallocate64)(fd, mode, off, len);
    wop_end(&w, rc);
    return rc;
}

EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
    struct wop w;
    wop_begin(&w, fd, NULL, 0, off + len, 0, PL_REDO_EXTEND);
    int rc = REAL(posix_fallocate)(fd, off, len);
    wop_end(&w, rc == 0 ? 0 : -1);
    return rc;
}

EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len)
{
    struct wop w;
    wop_begin(&w, fd, NULL, 0, off + len, 0, PL_REDO_EXTEND);
    int rc = REAL(posix_fallocate64)(fd, off, len);
    wop_end(&w, rc == 0 ? 0 : -1);
    return rc;
}

/* A call that modifies fd in a way we do not journal (copy_file_range,
 * sendfile): non-durable, or on a synchronous fd, durable as it stands. */
static struct rec *opaque_begin(int fd)
{
    struct rec *r = NULL;
    int dsync = 0;
    if (fd_lookup(fd, &r, &dsync, NULL) != 1) {
        return NULL;
    }
    if (dsync) {
        trace("warning: copy into synchronous fd %d not journalled", fd);
        return NULL;
    }
    begin_modify(r, fd);
    return r;
}

static void opaque_end(struct rec *r)
{
    int err = errno;
    if (r) {
        end_modify(r);
    }
    errno = err;
}

EXPORT ssize_t copy_file_range(int in,
                               off64_t *oin,
                               int out,
                               off64_t *oout,
                               size_t n,
                               unsigned int flags)
{
    struct rec *r = opaque_begin(out);
    ssize_t rc = REAL(copy_file_range)(in, oin, out, oout, n, flags);
    opaque_end(r);
    return rc;
}

EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
    struct rec *r = opaque_begin(out);
    ssize_t rc = REAL(sendfile)(out, in, off, n);
    opaque_end(r);
    return rc;
}

EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n)
{
    struct rec *r = opaque_begin(out);
    ssize_t rc = REAL(sendfile64)(out, in, off, n);
    opaque_end(r);
    return rc;
}

/* truncate(path): like ftruncate on a non-synchronous fd. */
static struct rec *path_modify_begin(const char *path)
{
    char p[PATH_MAX];
    struct stat st;
    if (!g_on || abs_path(AT_FDCWD, path, p) != 0 || !under_root(p) ||
        stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
        return NULL;
    }
    ensure_active();
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_existing(p, &st);
    pthread_mutex_unlock(&g_lock);
    begin_modify(r, -1);
    return r;
}

EXPORT int truncate(const char *path, off_t len)
{
    struct rec *r = path_modify_begin(path);
    int rc = REAL(truncate)(path, len);
    opaque_end(r);
    return rc;
}

EXPORT int truncate64(const char *path, off64_t len)
{
    struct rec *r = path_modify_begin(path);
    int rc = REAL(truncate64)(path, len);
    opaque_end(r);
    return rc;
}

/* ---- durability calls ---------------------------------------------------- */

/* Consumes STATE_DIR/fail-fsync if present and it matches r: 1 = fail this
 * fsync with EIO.  The file may hold a path substring (first line); then
 * only a file whose current path contains it matches.  Empty: any file. */
static int inject_fsync_failure(struct rec *r)
{
    char p[PATH_MAX + 16], want[256] = "", cpath[PATH_MAX];
    snprintf(p, sizeof p, "%s/fail-fsync", g_state);
    int fd = pl_sys_open(p, O_RDONLY, 0);
    if (fd < 0) {
        return 0;
    }
    ssize_t n = pl_sys_pread(fd, want, sizeof want - 1, 0);
    pl_sys_close(fd);
    want[n > 0 ? n : 0] = 0;
    want[strcspn(want, "\n")] = 0;
    pthread_mutex_lock(&g_lock);
    snprintf(cpath, sizeof cpath, "%s", r->m.cpath);
    pthread_mutex_unlock(&g_lock);
    if (want[0] != 0 && strstr(cpath, want) == NULL) {
        return 0;
    }
    return pl_sys_unlink(p) == 0; /* only one caller consumes it */
}

static int do_sync(int fd, int (*real)(int))
{
    struct rec *r = NULL;
    int dsync = 0;
    char dir[PATH_MAX];
    int kind = fd_lookup(fd, &r, &dsync, dir);
    if (kind == 0) {
        return real(fd);
    }
    if (kind == 2) {
        int rc = real(fd);
        int err = errno;
        if (rc == 0) {
            dir_synced(dir);
        }
        errno = err;
        return rc;
    }
    if (inject_fsync_failure(r)) {
        trace("injected EIO on fsync fd=%d id=%s", fd, r->m.id);
        errno = EIO;
        return -1;
    }
    pthread_rwlock_wrlock(&r->io);
    int rc = real(fd);
    int err = errno;
    if (rc == 0) {
        make_durable(r, fd);
    }
    pthread_rwlock_unlock(&r->io);
    errno = err;
    return rc;
}

static int fsync_thunk(int fd)
{
    return REAL(fsync)(fd);
}

static int fdatasync_thunk(int fd)
{
    return REAL(fdatasync)(fd);
}

EXPORT int fsync(int fd)
{
    return do_sync(fd, fsync_thunk);
}

EXPORT int fdatasync(int fd)
{
    return do_sync(fd, fdatasync_thunk);
}

static __thread off64_t t_sfr_off, t_sfr_len;
static __thread unsigned t_sfr_flags;

static int sfr_thunk(int fd)
{
    return REAL(sync_file_range)(fd, t_sfr_off, t_sfr_len, t_sfr_flags);
}

EXPORT int sync_file_range(int fd, off64_t off, off64_t len, unsigned int flags)
{
    if (!(flags & SYNC_FILE_RANGE_WAIT_AFTER)) {
        return REAL(sync_file_range)(fd, off, len, flags);
    }
    t_sfr_off = off;
    t_sfr_len = len;
    t_sfr_flags = flags;
    return do_sync(fd, sfr_thunk);
}

EXPORT void sync(void)
{
    REAL(sync)();
    if (g_on) {
        all_durable();
    }
}

EXPORT int syncfs(int fd)
{
    int rc = REAL(syncfs)(fd);
    int err = errno;
    if (rc == 0 && g_on) {
        all_durable();
    }
    errno = err;
    return rc;
}

/* ---- mmap ---------------------------------------------------------------- */

static void *after_mmap(void *p, size_t len, int prot, int flags, int fd)
{
    struct rec *r = NULL;
    int dsync = 0, err = errno;
    if (p == MAP_FAILED || !(prot & PROT_WRITE) || !(flags & MAP_SHARED) ||
        fd_lookup(fd, &r, &dsync, NULL) != 1) {
        return p;
    }
    /* Stores through the mapping cannot be seen: dirty until msync/fsync. */
    begin_modify(r, fd);
    end_modify(r);
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < NMAP; i++) {
        if (g_maps[i].addr == NULL) {
            g_maps[i] = (struct map_ent){p, len, r->m.dev, r->m.ino};
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    errno = err;
    return p;
}

EXPORT void *mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    return after_mmap(REAL(mmap)(a, len, prot, flags, fd, off), len, prot,
                      flags, fd);
}

EXPORT void *mmap64(void *a,
                    size_t len,
                    int prot,
                    int flags,
                    int fd,
                    off64_t off)
{
    return after_mmap(REAL(mmap64)(a, len, prot, flags, fd, off), len, prot,
                      flags, fd);
}

EXPORT int munmap(void *a, size_t len)
{
    if (g_on) {
        pthread_mutex_lock(&g_lock);
        for (int i = 0; i < NMAP; i++) {
            if (g_maps[i].addr >= (char *)a &&
                g_maps[i].addr < (char *)a + len) {
                g_maps[i].addr = NULL;
            }
        }
        pthread_mutex_unlock(&g_lock);
    }
    return REAL(munmap)(a, len);
}

EXPORT int msync(void *a, size_t len, int flags)
{
    int rc = REAL(msync)(a, len, flags);
    int err = errno;
    if (rc != 0 || !g_on || !(flags & MS_SYNC)) {
        return rc;
    }
    struct rec *r = NULL;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < NMAP && r == NULL; i++) {
        char *m = g_maps[i].addr;
        if (m != NULL && (char *)a >= m && (char *)a < m + g_maps[i].len) {
            r = rec_find(g_maps[i].dev, g_maps[i].ino);
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (r != NULL) {
        pthread_rwlock_wrlock(&r->io);
        make_durable(r, -1);
        pthread_rwlock_unlock(&r->io);
    }
    errno = err;
    return rc;
}

/* ---- names --------------------------------------------------------------- */

static int do_rename(int ofd,
                     const char *old,
                     int nfd,
                     const char *new,
                     unsigned flags)
{
    char po[PATH_MAX], pn[PATH_MAX];
    struct stat so, sn;
    if (!g_on || abs_path(ofd, old, po) != 0 || abs_path(nfd, new, pn) != 0 ||
        (!under_root(po) && !under_root(pn))) {
        return REAL(renameat2)(ofd, old, nfd, new, flags);
    }
    if (!under_root(po) || !under_root(pn) || (flags & RENAME_EXCHANGE) ||
        lstat(po, &so) != 0 || !S_ISREG(so.st_mode)) {
        trace("warning: rename %s -> %s not tracked", po, pn);
        return REAL(renameat2)(ofd, old, nfd, new, flags);
    }
    ensure_active();
    int have_new = lstat(pn, &sn) == 0 && S_ISREG(sn.st_mode) &&
                   !(sn.st_dev == so.st_dev && sn.st_ino == so.st_ino);
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_existing(po, &so);
    struct rec *t = have_new ? rec_existing(pn, &sn) : NULL;
    if (t != NULL && t->m.content == PL_LIVE) {
        capture(t, -1); /* its inode is about to disappear */
        t->m.content = PL_SHADOW;
    }
    char saved[PATH_MAX];
    snprintf(saved, sizeof saved, "%s", r->m.cpath);
    snprintf(r->m.cpath, sizeof r->m.cpath, "%s", pn);
    meta_save(r);
    if (t != NULL) {
        t->m.unlinked = 1;
        t->m.cpath[0] = 0;
        hash_del(t);
        meta_save(t);
    }
    int rc = REAL(renameat2)(ofd, old, nfd, new, flags);
    int err = errno;
    if (rc != 0) {
        snprintf(r->m.cpath, sizeof r->m.cpath, "%s", saved);
        meta_save(r);
        if (t != NULL) {
            t->m.unlinked = 0;
            snprintf(t->m.cpath, sizeof t->m.cpath, "%s", pn);
            hash_add(t);
            meta_save(t);
        }
    } else if (t != NULL && t->m.dpath[0] == 0) {
        rec_drop(t);
    }
    pthread_mutex_unlock(&g_lock);
    trace("rename %s -> %s rc=%d", po, pn, rc);
    errno = err;
    return rc;
}

EXPORT int rename(const char *old, const char *new)
{
    return do_rename(AT_FDCWD, old, AT_FDCWD, new, 0);
}

EXPORT int renameat(int ofd, const char *old, int nfd, const char *new)
{
    return do_rename(ofd, old, nfd, new, 0);
}

EXPORT int renameat2(int ofd,
                     const char *old,
                     int nfd,
                     const char *new,
                     unsigned flags)
{
    return do_rename(ofd, old, nfd, new, flags);
}

/* Returns -2 if the path is not a tracked regular file (caller does the real
 * call), else the result of the real unlink. */
static int do_unlink(int dirfd, const char *path)
{
    char p[PATH_MAX];
    struct stat st;
    if (!g_on || abs_path(dirfd, path, p) != 0 || !under_root(p) ||
        lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
        return -2;
    }
    ensure_active();
    pthread_mutex_lock(&g_lock);
    struct rec *r = rec_existing(p, &st);
    if (r->m.content == PL_LIVE) {
        capture(r, -1);
        r->m.content = PL_SHADOW;
        meta_save(r);
    }
    int rc, err;
    if (r->m.dpath[0] == 0) {
        rc = REAL(unlinkat)(dirfd, path, 0);
        err = errno;
        if (rc == 0) {
            rec_drop(r);
        }
    } else {
        char saved[PATH_MAX];
        snprintf(saved, sizeof saved, "%s", r->m.cpath);
        r->m.unlinked = 1;
        r->m.cpath[0] = 0;
        hash_del(r);
        meta_save(r);
        rc = REAL(unlinkat)(dirfd, path, 0);
        err = errno;
        if (rc != 0) {
            r->m.unlinked = 0;
            snprintf(r->m.cpath, sizeof r->m.cpath, "%s", saved);
            hash_add(r);
            meta_save(r);
        }
    }
    pthread_mutex_unlock(&g_lock);
    trace("unlink %s rc=%d", p, rc);
    errno = err;
    return rc;
}

EXPORT int unlink(const char *path)
{
    int rc = do_unlink(AT_FDCWD, path);
    return rc == -2 ? REAL(unlinkat)(AT_FDCWD, path, 0) : rc;
}

EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
    int rc = (flags & AT_REMOVEDIR) ? -2 : do_unlink(dirfd, path);
    return rc == -2 ? REAL(unlinkat)(dirfd, path, flags) : rc;
}

EXPORT int remove(const char *path)
{
    int rc = do_unlink(AT_FDCWD, path);
    return rc == -2 ? REAL(remove)(path) : rc;
}

/* ---- init ---------------------------------------------------------------- */

static void load_records(void)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/rec", g_state);
    DIR *d = opendir(dir);
    if (d == NULL) {
        fatal("open state rec dir", errno);
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t k = strlen(de->d_name);
        if (k < 6 || strcmp(de->d_name + k - 5, ".meta") != 0) {
            continue;
        }
        char p[2 * PATH_MAX];
        struct rec *r;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        pthread_mutex_lock(&g_lock);
        r = rec_alloc();
        if (pl_meta_read(p, &r->m) != 0) {
            fatal("corrupt record in state dir", EINVAL);
        }
        int rc = pl_redo_apply(g_state, r->m.id);
        if (rc < 0) {
            fatal("apply pending redo", rc);
        }
        char dp[PATH_MAX];
        struct stat st;
        pl_rec_path(dp, sizeof dp, g_state, r->m.id, ".dirty");
        r->dirty = stat(dp, &st) == 0;
        if (!r->m.unlinked) {
            hash_add(r);
        }
        pthread_mutex_unlock(&g_lock);
    }
    closedir(d);
}

/* Runs once, at the first call that touches a path under the root: takes
 * STATE_DIR/lock and loads the records.  Deferred so that wrapper processes
 * that inherit LD_PRELOAD (sh, timeout, ...) but never touch the root do not
 * take the lock from the real target. */
static void activate(void)
{
    char p[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s/rec", g_state);
    if (pl_sys_mkdir(p, 0700) != 0 && errno != EEXIST) {
        fatal("mkdir state rec dir", errno);
    }
    snprintf(p, sizeof p, "%s/root", g_state);
    int rfd = pl_sys_open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (rfd < 0 ||
        pl_sys_pwrite(rfd, g_root, g_rootlen, 0) != (ssize_t)g_rootlen) {
        fatal("write STATE_DIR/root", errno);
    }
    pl_sys_close(rfd);
    /* One process per STATE_DIR; the restore tool refuses while we live. */
    snprintf(p, sizeof p, "%s/lock", g_state);
    int lfd = pl_sys_open(p, O_RDWR | O_CREAT, 0600);
    if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        fatal("lock STATE_DIR/lock (another process uses this state dir?)",
              errno);
    }
    load_records();
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void ensure_active(void)
{
    pthread_once(&g_once, activate);
}

__attribute__((constructor)) static void pl_init(void)
{
    const char *root = getenv("TERN_POWERLOSS_ROOT");
    const char *state = getenv("TERN_POWERLOSS_DIR");
    const char *tr = getenv("TERN_POWERLOSS_TRACE");
    g_trace = tr != NULL && tr[0] == '1';
    if (root == NULL || state == NULL) {
        if (root != NULL || state != NULL) {
            dprintf(2,
                    "tern-powerloss: set both TERN_POWERLOSS_ROOT and "
                    "TERN_POWERLOSS_DIR; shim disabled\n");
        }
        return;
    }
    if (realpath(root, g_root) == NULL || realpath(state, g_state) == NULL) {
        fatal("realpath of TERN_POWERLOSS_ROOT or TERN_POWERLOSS_DIR", errno);
    }
    g_rootlen = strlen(g_root);
    if (strcmp(g_root, "/") == 0 || under_root(g_state)) {
        dprintf(2,
                "tern-powerloss: FATAL TERN_POWERLOSS_DIR %s must be "
                "outside TERN_POWERLOSS_ROOT %s (and root not /)\n",
                g_state, g_root);
        abort();
    }
    g_fds = calloc(NFD, sizeof *g_fds);
    if (g_fds == NULL) {
        fatal("malloc fd table", ENOMEM);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(g_idbase, sizeof g_idbase, "%d-%lx", getpid(),
             (unsigned long)ts.tv_sec);
    g_on = 1;
    trace("on: root=%s state=%s", g_root, g_state);
}
