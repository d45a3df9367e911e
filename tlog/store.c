/*
 * tlog/store.c: the raft log store over a directory of segment files
 * (format.c owns their bytes; docs/LOGSTORE.md the design).
 *
 * Files. seg-%020llu: a segment, named by its seq (store-wide, never
 * reused). prep-%020llu: a segment being prepared (deleted at open).
 * free-%020llu: a forgotten segment's file kept for reuse (the free list,
 * at most tlog_config.free_max files), named by its last seq. Nothing
 * else of the directory is the store's.
 *
 * Preparing a segment (on libuv's thread pool). From the free list:
 * rename free-M to prep-N, write the new header over the old one,
 * fdatasync, rename to seg-N, fsync the directory: one 4 KiB write, and
 * every block of the file has been written before (no extent to
 * convert). The older bytes after the header stay: records of older
 * seqs, which never pass for seq N's, and the link record that opens
 * every segment's first write says where the one before ended (format.c,
 * LINK). Otherwise a new file: create prep-N, allocate its size, write it
 * over with zeros 1 MiB at a time, each chunk written back before the
 * next (a first write to an allocated but unwritten ext4 block waits for
 * a journal commit; raft/prealloc.c), then header, fdatasync, rename,
 * fsync the directory. One segment is kept prepared ahead of the one in
 * use. A crash at any step leaves a prep-N (deleted at open) or a
 * free-M whatever its header says (free files are never read).
 *
 * Writes. Appends encode their entries at once into the open write: a
 * block-aligned buffer destined for a known offset of a known segment.
 * One write is in flight at a time (bench/RESULTS.md: more gave nothing
 * on a virtual disk that completes its flushes one by one); what arrives
 * meanwhile joins the open write, which goes out when the one in flight
 * completes, ended by a pad on a block boundary. Writes are numbered
 * within their segment (records carry the number: format.c's torn-tail
 * rule) and hold at most the window of bytes (tlog_config; a single
 * larger record is a write of its own, in a segment sized for it).
 * O_DIRECT | O_DSYNC by Linux AIO from the loop thread (kaio.c): a
 * completion means durable. An append's callback fires when the write
 * holding its last entry completed, in submission order.
 *
 * A failed write fails its appends and every later one, queued or not,
 * in order, and the store refuses appends from then on (a hole in a raft
 * log is not allowed: libraft 0.15's #466).
 *
 * Truncate(i). After the writes submitted before it, the appends after it
 * start a new segment: nothing is rewritten. Loading, a segment whose
 * first record has an index below the next expected one supersedes the
 * loaded entries from that index on (its stream position must be theirs).
 * If the new segment never got a record (a crash first), the older
 * entries load again: the state before the truncate, which nothing that
 * depended on the truncate (an append after it) made durable. (tlog_forget
 * may delete a segment a truncate superseded whole before that: what
 * loads is then a prefix of the state before the truncate. raft truncates
 * only entries no majority stored, so dropping them is safe.)
 *
 * Reset (an install): every segment that exists is void; the caller
 * records the first valid seq durably (tlog_config.void_below at later
 * opens) before tlog_forget deletes them.
 *
 * Forgetting (tlog_forget) goes one segment at a time, oldest first, and
 * stops at the first that stays: each file renamed to free-N (while the
 * free list has room) or unlinked, and the directory synced, before the
 * next. A crash between two leaves no gap, and the segments on disk are
 * always the ones from some seq on: a link never names a missing
 * segment that the log needs.
 *
 * Loading (tlog_open): segments in seq order, each scanned (format.c).
 * Entries continue (index and stream position) or supersede; an index
 * gap is damage. A segment with records that is not the last is checked
 * against the next one's link (version 2): its records must end exactly
 * where the link says, with the same write number; a file the link names
 * that holds no records, or is missing where the segments after the
 * first are, is damage. Only the last segment with records may end torn
 * (a crash during its last write). A version 1 segment (zeroed, no link)
 * that is not the last must end clean, so a torn one, when last, is
 * shortened to its last whole record and synced; a version 2 one is left
 * as it is (the link after it will name its end). Segments without
 * records are recycled (or deleted), except the newest, kept as the
 * spare if it holds nothing of its own seq. Nothing is cut, renamed or
 * deleted before the whole load succeeded, and a file with records is
 * never dropped for being unreadable. Appends after an open always start
 * a new segment.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlog_int.h"

#define TLOG__DEFAULT_BLOCK  4096u
#define TLOG__DEFAULT_WINDOW ((uint32_t)1 << 20)
#define TLOG__ZERO_CHUNK     ((size_t)1 << 20)
#define TLOG__NAME_MAX       32
/* The largest segment a load reads: one largest record and its pad. */
#define TLOG__SEGMENT_MAX  ((uint64_t)TLOG_REC_MAX_PAYLOAD + ((uint64_t)1 << 20))
#define TLOG__IN_FLIGHT    1u /* writes in flight (bench/RESULTS.md) */
#define TLOG__DEFAULT_FREE 4u
#define TLOG__FREE_MAX     1024u
#define TLOG__LINK_SIZE    (TLOG_REC_HEADER_SIZE + TLOG_LINK_PAYLOAD)

enum seg_state {
    SEG_PREPARING, /* on the thread pool */
    SEG_READY,     /* prepared, fd open */
    SEG_LOADED,    /* from the load: read only, fd closed */
    SEG_FAILED     /* its preparation failed */
};

struct seg
{
    struct tern_list link; /* s->segs, seq order */
    uint64_t seq;
    uint64_t size;
    uint64_t first_index; /* 0: no record placed yet */
    uint64_t last_index;  /* of the records it holds, after truncates */
    uint64_t placed;      /* bytes placed: header + writes */
    uint32_t writes;      /* writes placed: the last one's number */
    enum seg_state state;
    int fd;
    bool direct;
    bool is_void; /* tlog_reset: deleted by the next forget */
    /* preparation */
    uv_work_t work;
    struct tlog_store *store;
    uint32_t block_size;
    uint64_t recycle; /* the free file to prepare it from (0: a new one) */
    bool recycled;    /* it was */
    int status;
};

struct app
{
    struct tern_list link;
    tlog_append_cb cb;
    void *arg;
};

struct write
{
    struct tern_list link; /* s->writes, submission order */
    struct tlog__kreq req;
    struct tlog_store *store;
    struct seg *seg;
    uint8_t *buf;
    size_t len, cap;
    uint64_t off;          /* in seg */
    uint16_t num;          /* its number in seg (records carry it) */
    struct tern_list apps; /* appends whose last entry is in it */
    bool sealed, submitted, done;
    int status;
};

struct tlog_store
{
    uv_loop_t *loop;
    char *dir;
    int dir_fd;
    uint64_t segment_bytes;
    uint32_t block_size, window;
    struct tlog__kaio kaio;
    struct tern_list segs;
    struct tern_list writes;
    struct write *open; /* last of writes, taking records; NULL: none */
    struct seg *cur;    /* the segment writes are placed in (NULL: none) */
    uint64_t next_seq;
    uint64_t void_below;    /* tlog_config's */
    uint64_t restart_index; /* tlog_config's */
    uint64_t next_index;    /* 0: not started */
    uint64_t next_pos;
    struct tlog_link last; /* where the last write placed ends: the link
                              of the next segment's first write */
    uint64_t *free_seq;    /* the free list: free-N files */
    uint32_t n_free, free_max;
    bool roll; /* the next write starts a new segment (open, truncate) */
    bool in_flight;
    int failed; /* sticky: the first failed write's status */
    bool closing;
    bool close_started;
    unsigned handles; /* open libuv handles (retire_idle, kaio's poll) */
    uv_idle_t retire_idle;
    void (*close_cb)(void *arg);
    void *close_arg;
    unsigned preparing;    /* preparations on the pool */
    unsigned deleting;     /* segments on dels */
    bool del_running;      /* the head of dels is being deleted */
    bool del_stuck;        /* a deletion's directory sync failed: no more */
    struct tern_list dels; /* segments to delete, oldest first */
    /* Stream position before each index from pos_base on: truncate
     * rewinds to it. */
    uint64_t *pos_of;
    uint64_t pos_base;
    size_t pos_n, pos_cap;
    struct tlog_stats stats;
};

static void pump(struct tlog_store *s);
static void maybe_closed(struct tlog_store *s);

/* ---- helpers ----------------------------------------------------------------
 */

static void seg_name(char *out, const char *prefix, uint64_t seq)
{
    (void)snprintf(out, TLOG__NAME_MAX, "%s-%020" PRIu64, prefix, seq);
}

static int sync_dir(int dir_fd)
{
    return fsync(dir_fd) == 0 ? 0 : -errno;
}

static void *aligned(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, TLOG_BLOCK_MAX, n) != 0) {
        return NULL;
    }
    return p;
}

/* Open a segment file for writes: O_DIRECT | O_DSYNC, or O_DSYNC where
 * the file system takes no O_DIRECT (tmpfs). */
static int open_for_writes(int dir_fd, const char *name, bool *direct)
{
    int fd = openat(dir_fd, name, O_RDWR | O_DIRECT | O_DSYNC | O_CLOEXEC);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) {
        fd = openat(dir_fd, name, O_RDWR | O_DSYNC | O_CLOEXEC);
    }
    return fd >= 0 ? fd : -errno;
}

/* ---- positions ----------------------------------------------------------- */

static int pos_push(struct tlog_store *s, uint64_t index, uint64_t pos)
{
    if (s->pos_n == 0) {
        s->pos_base = index;
    }
    if (index != s->pos_base + s->pos_n) {
        return TERN_EINTERNAL;
    }
    if (s->pos_n == s->pos_cap) {
        size_t cap = s->pos_cap ? s->pos_cap * 2 : 1024;
        uint64_t *p = tern_realloc(s->pos_of, cap * sizeof *p);
        if (p == NULL) {
            return -ENOMEM;
        }
        s->pos_of = p;
        s->pos_cap = cap;
    }
    s->pos_of[s->pos_n++] = pos;
    return 0;
}

/* Drop the positions of index and above. */
static void pos_cut(struct tlog_store *s, uint64_t index)
{
    if (s->pos_n > 0 && index >= s->pos_base &&
        index < s->pos_base + s->pos_n) {
        s->pos_n = (size_t)(index - s->pos_base);
    }
}

/* Forget the positions below index. */
static void pos_forget(struct tlog_store *s, uint64_t index)
{
    size_t k;
    if (s->pos_n == 0 || index <= s->pos_base) {
        return;
    }
    k = index - s->pos_base >= s->pos_n ? s->pos_n
                                        : (size_t)(index - s->pos_base);
    memmove(s->pos_of, s->pos_of + k, (s->pos_n - k) * sizeof *s->pos_of);
    s->pos_n -= k;
    s->pos_base += k;
}

/* ---- preparing segments ---------------------------------------------------
 */

/* Make prep (fd, its header written) seg-seq durably and open it for
 * writes; fd is closed. */
static int prepare_finish(int dir_fd,
                          int fd,
                          const char *prep,
                          uint64_t seq,
                          int *fd_out,
                          bool *direct)
{
    char name[TLOG__NAME_MAX];
    int rv = 0;
    seg_name(name, "seg", seq);
    if (fdatasync(fd) != 0 || renameat(dir_fd, prep, dir_fd, name) != 0) {
        rv = -errno;
        (void)close(fd);
        (void)unlinkat(dir_fd, prep, 0);
        return rv;
    }
    (void)close(fd);
    rv = sync_dir(dir_fd);
    if (rv != 0) {
        return rv;
    }
    fd = open_for_writes(dir_fd, name, direct);
    if (fd < 0) {
        return fd;
    }
    *fd_out = fd;
    return 0;
}

/* Prepare seg-seq from free-from: a new header over the old one. -EAGAIN:
 * the file is not of size bytes (or is gone). On any failure the caller
 * prepares a new file instead. */
static int recycle_file(int dir_fd,
                        uint64_t from,
                        uint64_t seq,
                        uint64_t size,
                        uint32_t block_size,
                        int *fd_out,
                        bool *direct)
{
    char old[TLOG__NAME_MAX], prep[TLOG__NAME_MAX];
    struct tlog_seg_header h = {seq, block_size, TLOG__IN_FLIGHT, 0};
    uint8_t *buf = NULL;
    struct stat st;
    ssize_t w;
    int fd;

    seg_name(old, "free", from);
    seg_name(prep, "prep", seq);
    if (renameat(dir_fd, old, dir_fd, prep) != 0) {
        return errno == ENOENT ? -EAGAIN : -errno;
    }
    fd = openat(dir_fd, prep, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return -EAGAIN; /* prepared anew under the same name */
    }
    buf = aligned(TLOG_SEG_HEADER_SIZE);
    if (buf == NULL || fstat(fd, &st) != 0 || (uint64_t)st.st_size != size) {
        free(buf);
        (void)close(fd);
        return -EAGAIN;
    }
    tlog_seg_header_encode(buf, &h);
    w = pwrite(fd, buf, TLOG_SEG_HEADER_SIZE, 0);
    free(buf);
    if (w != (ssize_t)TLOG_SEG_HEADER_SIZE) {
        int rv = w < 0 ? -errno : -EIO;
        (void)close(fd);
        (void)unlinkat(dir_fd, prep, 0);
        return rv;
    }
    return prepare_finish(dir_fd, fd, prep, seq, fd_out, direct);
}

/* Prepare seg-seq of size bytes: from free-recycle if not 0 (*recycled
 * then says whether it was), else (or if that file does not fit) a new
 * file written over with zeros. */
static int prepare_file(int dir_fd,
                        uint64_t seq,
                        uint64_t size,
                        uint32_t block_size,
                        uint64_t recycle,
                        bool *recycled,
                        int *fd_out,
                        bool *direct)
{
    char prep[TLOG__NAME_MAX];
    struct tlog_seg_header h = {seq, block_size, TLOG__IN_FLIGHT, 0};
    uint8_t *buf = NULL;
    uint64_t at = 0;
    int fd, rv = 0;

    *recycled = false;
    if (recycle != 0) {
        rv = recycle_file(dir_fd, recycle, seq, size, block_size, fd_out,
                          direct);
        if (rv == 0) {
            *recycled = true;
            return 0;
        }
        rv = 0; /* a new file instead (it replaces prep-seq if it exists) */
    }
    seg_name(prep, "prep", seq);
    fd = openat(dir_fd, prep, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -errno;
    }
    buf = aligned(TLOG__ZERO_CHUNK);
    if (buf == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    rv = posix_fallocate(fd, 0, (off_t)size); /* returns the error */
    if (rv != 0) {
        rv = -rv;
        goto out;
    }
    memset(buf, 0, TLOG__ZERO_CHUNK);
    while (at < size) {
        size_t n = size - at < TLOG__ZERO_CHUNK ? (size_t)(size - at)
                                                : TLOG__ZERO_CHUNK;
        ssize_t w = pwrite(fd, buf, n, (off_t)at);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            rv = w < 0 ? -errno : -EIO;
            goto out;
        }
        (void)sync_file_range(fd, (off_t)at, w,
                              SYNC_FILE_RANGE_WAIT_BEFORE |
                                  SYNC_FILE_RANGE_WRITE |
                                  SYNC_FILE_RANGE_WAIT_AFTER);
        at += (uint64_t)w;
    }
    tlog_seg_header_encode(buf, &h);
    {
        ssize_t w = pwrite(fd, buf, TLOG_SEG_HEADER_SIZE, 0);
        if (w != (ssize_t)TLOG_SEG_HEADER_SIZE) {
            rv = w < 0 ? -errno : -EIO;
            goto out;
        }
    }
    rv = prepare_finish(dir_fd, fd, prep, seq, fd_out, direct);
    fd = -1;
out:
    free(buf);
    if (fd >= 0) {
        (void)close(fd);
        (void)unlinkat(dir_fd, prep, 0);
    }
    return rv;
}

static void prep_work(uv_work_t *w)
{
    struct seg *g = w->data;
    g->status = prepare_file(g->store->dir_fd, g->seq, g->size, g->block_size,
                             g->recycle, &g->recycled, &g->fd, &g->direct);
}

static void prep_after(uv_work_t *w, int status)
{
    struct seg *g = w->data;
    struct tlog_store *s = g->store;
    s->preparing--;
    if (status != 0 && g->status == 0) {
        g->status = -ECANCELED;
    }
    g->state = g->status == 0 ? SEG_READY : SEG_FAILED;
    if (g->state == SEG_READY) {
        s->stats.prepared++;
        s->stats.recycled += g->recycled;
    }
    pump(s);
    maybe_closed(s);
}

/* A new segment of at least size bytes, preparing on the pool; NULL on
 * out of memory. */
static struct seg *seg_new(struct tlog_store *s, uint64_t size)
{
    struct seg *g = tern_calloc(1, sizeof *g);
    if (g == NULL) {
        return NULL;
    }
    g->seq = s->next_seq++;
    g->size = size;
    g->placed = TLOG_SEG_HEADER_SIZE;
    g->state = SEG_PREPARING;
    g->fd = -1;
    g->store = s;
    g->block_size = s->block_size;
    g->work.data = g;
    if (size == s->segment_bytes && s->n_free > 0) {
        g->recycle = s->free_seq[--s->n_free]; /* the worker's now */
    }
    tern_list_push(&s->segs, &g->link);
    if (uv_queue_work(s->loop, &g->work, prep_work, prep_after) != 0) {
        if (g->recycle != 0) {
            s->free_seq[s->n_free++] = g->recycle; /* still on disk */
            g->recycle = 0;
        }
        g->state = SEG_FAILED;
        g->status = -EIO;
        return g;
    }
    s->preparing++;
    return g;
}

/* The newest segment, if it has taken no record yet (the spare). */
static struct seg *spare(struct tlog_store *s)
{
    struct seg *g;
    if (tern_list_empty(&s->segs)) {
        return NULL;
    }
    g = TERN_CONTAINER(s->segs.prev, struct seg, link);
    return g->first_index == 0 && g->placed == TLOG_SEG_HEADER_SIZE &&
                   g->state != SEG_LOADED && g->state != SEG_FAILED &&
                   !g->is_void
               ? g
               : NULL;
}

/* ---- writes -----------------------------------------------------------------
 */

static void write_free(struct write *w)
{
    free(w->buf);
    tern_free(w);
}

/* A new open write of at least need bytes of records, placed in the
 * current segment or (roll, or no room) a new one. */
static struct write *write_new(struct tlog_store *s, size_t need)
{
    struct write *w = tern_calloc(1, sizeof *w);
    struct seg *g = NULL;
    /* link, records, pad */
    size_t room = TLOG__LINK_SIZE + need + 2 * (size_t)s->block_size;
    if (w == NULL) {
        return NULL;
    }
    if (!s->roll && s->cur != NULL) {
        g = s->cur;
        if (g->state == SEG_LOADED || g->state == SEG_FAILED || g->is_void ||
            g->placed + room > g->size || g->writes >= TLOG_WRITES_MAX) {
            g = NULL;
        }
    }
    if (g == NULL) {
        uint64_t size = s->segment_bytes;
        g = spare(s);
        if (g != NULL && TLOG_SEG_HEADER_SIZE + room > g->size) {
            g = NULL; /* a larger one for this record; the spare waits */
        }
        if (g == NULL) {
            if (TLOG_SEG_HEADER_SIZE + room > size) {
                size = (TLOG_SEG_HEADER_SIZE + room + s->block_size - 1) /
                       s->block_size * s->block_size;
            }
            g = seg_new(s, size);
            if (g == NULL) {
                tern_free(w);
                return NULL;
            }
        }
        s->roll = false;
        s->cur = g;
    }
    w->cap = need > 65536 - TLOG__LINK_SIZE
                 ? TLOG__LINK_SIZE + need + s->block_size * 2
                 : 65536;
    w->buf = aligned(w->cap);
    if (w->buf == NULL) {
        tern_free(w);
        return NULL;
    }
    w->store = s;
    w->seg = g;
    w->off = g->placed;
    w->num = (uint16_t)++g->writes;
    if (w->num == 1) {
        /* The segment's first write opens with where the last one ended. */
        tlog_link_encode(w->buf, g->seq, s->next_pos, &s->last);
        w->len = TLOG__LINK_SIZE;
    }
    tern_list_init(&w->apps);
    tern_list_push(&s->writes, &w->link);
    s->open = w;
    return w;
}

/* Room for need more bytes in w's buffer (within the window checked by
 * the caller). */
static int write_grow(struct write *w, size_t need)
{
    size_t cap = w->cap;
    uint8_t *b;
    if (w->len + need + 2 * TLOG_BLOCK_MAX <= cap) {
        return 0;
    }
    while (w->len + need + 2 * TLOG_BLOCK_MAX > cap) {
        cap *= 2;
    }
    b = aligned(cap);
    if (b == NULL) {
        return -ENOMEM;
    }
    memcpy(b, w->buf, w->len);
    free(w->buf);
    w->buf = b;
    w->cap = cap;
    return 0;
}

/* Pad the open write to its block's end and close it to records; its
 * bytes are placed in its segment. */
static void seal(struct tlog_store *s)
{
    struct write *w = s->open;
    size_t pad;
    if (w == NULL) {
        return;
    }
    pad = tlog_pad_size(w->len, w->seg->block_size);
    tlog_pad_encode(w->buf + w->len, pad, w->seg->seq, w->num, s->next_pos);
    w->len += pad;
    w->seg->placed = w->off + w->len;
    w->sealed = true;
    s->last.prev_seq = w->seg->seq;
    s->last.prev_end = w->seg->placed;
    s->last.prev_write = w->num;
    s->open = NULL;
}

static void fail_all(struct tlog_store *s, int status);

/* Retire the completed prefix of the writes, in order: their appends'
 * callbacks. Then fail what a failure left, start the next write, close
 * if closing. */
static void retire(struct tlog_store *s)
{
    while (!tern_list_empty(&s->writes)) {
        struct write *h = TERN_CONTAINER(s->writes.next, struct write, link);
        if (!h->done) {
            break;
        }
        if (h->status != 0 && s->failed == 0) {
            s->failed = h->status;
        }
        tern_list_remove(&h->link);
        while (!tern_list_empty(&h->apps)) {
            struct app *a = TERN_CONTAINER(h->apps.next, struct app, link);
            tern_list_remove(&a->link);
            a->cb(a->arg, h->status != 0 ? h->status : s->failed);
            tern_free(a);
        }
        write_free(h);
    }
    if (s->failed != 0) {
        fail_all(s, s->failed);
    } else if (s->closing && !s->in_flight) {
        fail_all(s, -ECANCELED); /* after the write in flight, in order */
    }
    pump(s);
    maybe_closed(s);
}

static void write_done(struct tlog__kreq *r, int status)
{
    struct write *w = TERN_CONTAINER(r, struct write, req);
    struct tlog_store *s = w->store;
    s->in_flight = false;
    w->done = true;
    w->status = status;
    if (status == 0) {
        s->stats.writes++;
        s->stats.bytes += w->len;
    }
    retire(s);
}

/* A write that could not be submitted completes from the loop (pump may
 * run inside tlog_append, whose callbacks never run inside it). */
static void retire_idle(uv_idle_t *h)
{
    struct tlog_store *s = h->data;
    uv_idle_stop(h);
    retire(s);
}

/* Fail every write not yet submitted, in order, with status. */
static void fail_all(struct tlog_store *s, int status)
{
    struct tern_list *e = s->writes.next;
    while (e != &s->writes) {
        struct write *w = TERN_CONTAINER(e, struct write, link);
        e = e->next;
        if (w->submitted) {
            continue; /* in flight: its completion comes */
        }
        if (s->open == w) {
            s->open = NULL;
        }
        tern_list_remove(&w->link);
        while (!tern_list_empty(&w->apps)) {
            struct app *a = TERN_CONTAINER(w->apps.next, struct app, link);
            tern_list_remove(&a->link);
            a->cb(a->arg, status);
            tern_free(a);
        }
        write_free(w);
    }
}

/* Start the oldest write not submitted, if none is in flight and its
 * segment is prepared. */
static void pump(struct tlog_store *s)
{
    struct write *w;
    int rv;
    if (s->in_flight || s->failed != 0 || s->closing ||
        tern_list_empty(&s->writes)) {
        return;
    }
    w = TERN_CONTAINER(s->writes.next, struct write, link);
    if (w->submitted) {
        return;
    }
    if (w->seg->state == SEG_PREPARING) {
        return; /* prep_after pumps */
    }
    if (w->seg->state == SEG_FAILED) {
        /* From the loop, never inside tlog_append. */
        s->failed = w->seg->status != 0 ? w->seg->status : -EIO;
        uv_idle_start(&s->retire_idle, retire_idle);
        return;
    }
    if (!w->sealed) {
        seal(s);
    }
    /* The next segment prepares while this one fills. */
    if (spare(s) == NULL && s->preparing == 0 && !s->closing) {
        (void)seg_new(s, s->segment_bytes);
    }
    w->req.fd = w->seg->fd;
    w->req.buf = w->buf;
    w->req.len = w->len;
    w->req.off = w->off;
    w->req.direct = w->seg->direct;
    w->req.cb = write_done;
    w->submitted = true;
    s->in_flight = true;
    rv = tlog__kaio_write(&s->kaio, &w->req);
    if (rv != 0) {
        s->in_flight = false;
        w->done = true;
        w->status = rv;
        s->failed = rv;
        uv_idle_start(&s->retire_idle, retire_idle);
    }
}

int tlog_append(struct tlog_store *s,
                const struct tlog_entry *entries,
                unsigned n,
                tlog_append_cb cb,
                void *arg)
{
    struct app *a;
    if (s->closing) {
        return TERN_ESHUTDOWN;
    }
    if (s->failed != 0) {
        return s->failed;
    }
    if (s->next_index == 0 || n == 0) {
        return TERN_EINVAL;
    }
    for (unsigned i = 0; i < n; i++) {
        if (entries[i].len > TLOG_REC_MAX_PAYLOAD) {
            return TERN_ETOOBIG;
        }
    }
    a = tern_calloc(1, sizeof *a);
    if (a == NULL) {
        return -ENOMEM;
    }
    for (unsigned i = 0; i < n; i++) {
        size_t size = tlog_rec_size(entries[i].len);
        struct write *w = s->open;
        struct tlog_rec r;
        if (w != NULL && (w->len + size > s->window ||
                          w->off + w->len + size + 2 * (size_t)s->block_size >
                              w->seg->size)) {
            seal(s);
            w = NULL;
        }
        if (w == NULL) {
            w = write_new(s, size);
        }
        if (w == NULL || write_grow(w, size) != 0 ||
            pos_push(s, s->next_index, s->next_pos) != 0) {
            /* Out of memory mid-append: what is encoded stays (the raft
             * core gets the failure and the replica stops). */
            tern_free(a);
            s->failed = -ENOMEM;
            uv_idle_start(&s->retire_idle, retire_idle);
            return -ENOMEM;
        }
        r.type = entries[i].type;
        r.write = w->num;
        r.seq = w->seg->seq;
        r.index = s->next_index;
        r.term = entries[i].term;
        r.pos = s->next_pos;
        r.len = entries[i].len;
        r.payload = entries[i].payload;
        tlog_rec_encode(w->buf + w->len, &r);
        w->len += size;
        if (w->seg->first_index == 0) {
            w->seg->first_index = r.index;
        }
        w->seg->last_index = r.index;
        s->next_index++;
        s->next_pos = tlog_rec_pos_after(&r);
    }
    a->cb = cb;
    a->arg = arg;
    tern_list_push(&s->open->apps, &a->link);
    pump(s); /* goes out now if nothing is in flight */
    return 0;
}

int tlog_truncate(struct tlog_store *s, uint64_t index)
{
    struct tern_list *e;
    if (index == 0 || index >= s->next_index || index < s->pos_base ||
        s->pos_n == 0 || s->closing) {
        return TERN_EINVAL;
    }
    seal(s); /* the appends before go out as they are */
    s->next_pos = s->pos_of[index - s->pos_base];
    pos_cut(s, index);
    s->next_index = index;
    s->roll = true;
    for (e = s->segs.next; e != &s->segs; e = e->next) {
        struct seg *g = TERN_CONTAINER(e, struct seg, link);
        if (g->first_index >= index) {
            g->last_index = 0; /* superseded whole: forget may delete */
            g->first_index = g->first_index != 0 ? index : 0;
        } else if (g->last_index >= index) {
            g->last_index = index - 1;
        }
    }
    return 0;
}

uint64_t tlog_reset(struct tlog_store *s, uint64_t index, uint64_t pos)
{
    struct tern_list *e;
    seal(s);
    for (e = s->segs.next; e != &s->segs; e = e->next) {
        TERN_CONTAINER(e, struct seg, link)->is_void = true;
    }
    s->roll = true;
    s->next_index = index;
    s->next_pos = pos;
    s->pos_n = 0;
    return s->next_seq;
}

uint64_t tlog_reset_seq(const struct tlog_store *s)
{
    return s->next_seq;
}

int tlog_start_at(struct tlog_store *s, uint64_t index, uint64_t pos)
{
    if (s->next_index != 0 || index == 0) {
        return TERN_EINVAL;
    }
    s->next_index = index;
    s->next_pos = pos;
    return 0;
}

uint64_t tlog_next_index(const struct tlog_store *s)
{
    return s->next_index;
}

uint64_t tlog_next_pos(const struct tlog_store *s)
{
    return s->next_pos;
}

void tlog_get_stats(const struct tlog_store *s, struct tlog_stats *out)
{
    struct tern_list *e;
    *out = s->stats;
    out->segments = 0;
    for (e = s->segs.next; e != &s->segs; e = e->next) {
        out->segments++;
    }
    out->aio = s->kaio.ctx != 0 && !s->kaio.use_pool;
    out->free = s->n_free;
}

/* ---- forgetting ------------------------------------------------------------
 */

/* Deletions run one at a time, oldest first (s->dels), each file renamed
 * to free-N (to_free) or unlinked, and the directory synced, before the
 * next: a crash between two leaves the log without a gap. */
enum del_result {
    DEL_DONE,    /* renamed or unlinked, the directory synced */
    DEL_KEPT,    /* the file is still there */
    DEL_UNSYNCED /* its name went, the directory sync failed */
};

struct del
{
    uv_work_t work;
    struct tlog_store *s;
    struct seg *g;
    bool to_free; /* onto the free list (a slot is held for it) */
    enum del_result result;
};

static void del_work(uv_work_t *w)
{
    struct del *d = w->data;
    char name[TLOG__NAME_MAX], free_name[TLOG__NAME_MAX];
    seg_name(name, "seg", d->g->seq);
    seg_name(free_name, "free", d->g->seq);
    if (d->g->fd >= 0) {
        (void)close(d->g->fd);
        d->g->fd = -1;
    }
    if (d->to_free &&
        renameat(d->s->dir_fd, name, d->s->dir_fd, free_name) != 0) {
        d->to_free = false;
    }
    if (!d->to_free && unlinkat(d->s->dir_fd, name, 0) != 0) {
        d->result = DEL_KEPT;
        return;
    }
    d->result = sync_dir(d->s->dir_fd) == 0 ? DEL_DONE : DEL_UNSYNCED;
}

static void del_next(struct tlog_store *s);

/* The segments waiting for deletion go back to the head of the log, in
 * order (the segments on disk stay those from a seq on). */
static void dels_put_back(struct tlog_store *s)
{
    struct tern_list *first = s->segs.next;
    while (!tern_list_empty(&s->dels)) {
        struct seg *g = TERN_CONTAINER(s->dels.next, struct seg, link);
        tern_list_remove(&g->link);
        tern_list_push(first, &g->link); /* before the head: in order */
        s->deleting--;
    }
}

static void del_after(uv_work_t *w, int status)
{
    struct del *d = w->data;
    struct tlog_store *s = d->s;
    s->del_running = false;
    if (status != 0 || d->result == DEL_KEPT) {
        /* Nothing after it may go first: the next forget tries again. */
        dels_put_back(s);
        tern_free(d);
        maybe_closed(s);
        return;
    }
    tern_list_remove(&d->g->link);
    s->deleting--;
    s->stats.deleted++;
    if (d->result == DEL_UNSYNCED) {
        /* Whether its name went is not known: no deletion after it (a gap)
         * and no reuse of it (a rename a crash undoes would name it by its
         * old seq) for the life of the store. */
        s->del_stuck = true;
        dels_put_back(s);
    } else if (d->to_free) {
        s->free_seq[s->n_free++] = d->g->seq; /* the slot held for it */
        s->stats.freed++;
    }
    tern_free(d->g);
    tern_free(d);
    del_next(s);
    maybe_closed(s);
}

static void del_next(struct tlog_store *s)
{
    struct del *d;
    if (s->del_running || tern_list_empty(&s->dels)) {
        return;
    }
    d = tern_calloc(1, sizeof *d);
    if (d == NULL || s->del_stuck) {
        tern_free(d);
        dels_put_back(s); /* the next forget tries again */
        return;
    }
    d->s = s;
    d->g = TERN_CONTAINER(s->dels.next, struct seg, link);
    d->work.data = d;
    /* A file of the usual size goes onto the free list while it has room
     * (one deletion runs at a time: no other holds a slot). */
    d->to_free = s->n_free < s->free_max && !s->closing &&
                 d->g->size == s->segment_bytes && d->g->state != SEG_FAILED;
    if (uv_queue_work(s->loop, &d->work, del_work, del_after) != 0) {
        tern_free(d);
        dels_put_back(s);
        return;
    }
    s->del_running = true;
}

/* Whether a write still targets g. */
static bool seg_busy(const struct tlog_store *s, const struct seg *g)
{
    const struct tern_list *e;
    for (e = s->writes.next; e != &s->writes; e = e->next) {
        if (TERN_CONTAINER(e, struct write, link)->seg == g) {
            return true;
        }
    }
    return false;
}

void tlog_forget(struct tlog_store *s, uint64_t index)
{
    struct seg *newest = NULL;
    struct tern_list *e;
    if (s->closing) {
        return;
    }
    pos_forget(s, index);
    /* The newest segment that took records stays, with all after it: the
     * log goes on from there. */
    for (e = s->segs.prev; e != &s->segs; e = e->prev) {
        struct seg *g = TERN_CONTAINER(e, struct seg, link);
        if (g->first_index != 0 && !g->is_void) {
            newest = g;
            break;
        }
    }
    e = s->segs.next;
    while (e != &s->segs) {
        struct seg *g = TERN_CONTAINER(e, struct seg, link);
        if (g == newest) {
            break;
        }
        e = e->next;
        /* Void segments, whole segments below index (a superseded one
         * holds nothing: last_index 0) and spares passed over for a larger
         * record, that no write targets, oldest first: up to the first
         * that stays (the segments on disk are those from a seq on). */
        if (g->state == SEG_PREPARING || seg_busy(s, g) ||
            (!g->is_void && g->first_index != 0 && g->last_index >= index)) {
            break;
        }
        tern_list_remove(&g->link);
        tern_list_push(&s->dels, &g->link);
        if (s->cur == g) {
            s->cur = NULL;
        }
        s->deleting++;
    }
    del_next(s);
}

/* ---- closing ----------------------------------------------------------------
 */

static void store_free(struct tlog_store *s)
{
    while (!tern_list_empty(&s->writes)) { /* only after a failed open */
        struct write *w = TERN_CONTAINER(s->writes.next, struct write, link);
        tern_list_remove(&w->link);
        write_free(w);
    }
    while (!tern_list_empty(&s->segs)) {
        struct seg *g = TERN_CONTAINER(s->segs.next, struct seg, link);
        tern_list_remove(&g->link);
        if (g->fd >= 0) {
            (void)close(g->fd);
        }
        tern_free(g);
    }
    if (s->dir_fd >= 0) {
        (void)close(s->dir_fd);
    }
    tern_free(s->pos_of);
    tern_free(s->free_seq);
    tern_free(s->dir);
    tern_free(s);
}

static void handle_closed(struct tlog_store *s)
{
    if (--s->handles > 0) {
        return;
    }
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    store_free(s);
    if (cb != NULL) {
        cb(arg);
    }
}

static void idle_closed(uv_handle_t *h)
{
    handle_closed(h->data);
}

static void kaio_closed(void *arg)
{
    handle_closed(arg);
}

static void maybe_closed(struct tlog_store *s)
{
    if (!s->closing || s->close_started || s->in_flight || s->preparing > 0 ||
        s->deleting > 0 || !tern_list_empty(&s->writes)) {
        return;
    }
    s->close_started = true;
    s->handles = 2;
    uv_close((uv_handle_t *)&s->retire_idle, idle_closed);
    tlog__kaio_close(&s->kaio, kaio_closed, s);
}

void tlog_close(struct tlog_store *s, void (*cb)(void *arg), void *arg)
{
    s->closing = true;
    s->close_cb = cb;
    s->close_arg = arg;
    s->open = NULL;
    /* With a write in flight its appends complete first (retire cancels
     * the rest after it); from the loop, not inside this call. */
    uv_idle_start(&s->retire_idle, retire_idle);
}

/* ---- loading ----------------------------------------------------------------
 */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* A segment file's bytes for the load: mapped read-only and populated in
 * one go (no copy, no fault per page), or read into memory.
 * Populating with MADV_POPULATE_READ, not MAP_POPULATE: a page the disk
 * cannot read fails the madvise (EFAULT), where MAP_POPULATE would leave
 * it out silently and the scan's access would raise SIGBUS (or, for a
 * FUSE file, fault forever). Any failure there falls back to pread, which
 * names the error (EIO); so does every file on a kernel before 5.14
 * (EINVAL: the load then pays the page faults of reading). A populated
 * page that memory pressure evicts before the scan reaches it is read
 * again by a fault; that window is the load's own few milliseconds.
 * 0 or a negative code. */
static int image_read(int dir_fd, const char *name, struct tlog_image *im)
{
    struct stat st;
    int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
    uint8_t *img = NULL;
    void *p;
    int rv;
    memset(im, 0, sizeof *im);
    if (fd < 0) {
        return -errno;
    }
    if (fstat(fd, &st) != 0) {
        rv = -errno;
        (void)close(fd);
        return rv;
    }
    if ((uint64_t)st.st_size > TLOG__SEGMENT_MAX) {
        (void)close(fd);
        return TERN_ETOOBIG;
    }
    if (st.st_size >= (off_t)TLOG_SEG_HEADER_SIZE) {
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            if (madvise(p, (size_t)st.st_size, MADV_POPULATE_READ) == 0) {
                (void)close(fd);
                im->p = p;
                im->len = (size_t)st.st_size;
                im->mapped = true;
                return 0;
            }
            (void)munmap(p, (size_t)st.st_size);
        }
    }
    (void)close(fd);
    rv = tlog_read_file(dir_fd, name, TLOG__SEGMENT_MAX, &img, &im->len);
    im->p = img;
    return rv;
}

static void image_free(struct tlog_image *im)
{
    if (im->mapped) {
        (void)munmap(im->p, im->len);
    } else {
        tern_free(im->p);
    }
    memset(im, 0, sizeof *im);
}

struct load
{
    struct tlog_store *s;
    struct tlog_loaded *l;
    size_t cap;
    uint64_t *pos; /* per loaded entry */
    char *errmsg;
};

void tlog_loaded_free(struct tlog_loaded *l)
{
    for (size_t i = 0; i < l->n_images; i++) {
        image_free(&l->images[i]);
    }
    tern_free(l->images);
    tern_free(l->entries);
    memset(l, 0, sizeof *l);
}

static int load_cb(void *arg, const struct tlog_rec *r, size_t off)
{
    struct load *ld = arg;
    struct tlog_loaded *l = ld->l;
    (void)off;
    if (l->n == ld->cap) {
        size_t cap = ld->cap ? ld->cap * 2 : 1024;
        struct tlog_entry *e = tern_realloc(l->entries, cap * sizeof *e);
        uint64_t *p = tern_realloc(ld->pos, cap * sizeof *p);
        if (e != NULL) {
            l->entries = e;
        }
        if (p != NULL) {
            ld->pos = p;
        }
        if (e == NULL || p == NULL) {
            return -ENOMEM;
        }
        ld->cap = cap;
    }
    if (l->n == 0) {
        l->first_index = r->index;
    }
    l->entries[l->n].type = r->type;
    l->entries[l->n].term = r->term;
    l->entries[l->n].payload = r->payload;
    l->entries[l->n].len = r->len;
    ld->pos[l->n] = r->pos;
    l->n++;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int push_seq(uint64_t **seqs, size_t *n, size_t *cap, uint64_t seq)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        uint64_t *p = tern_realloc(*seqs, c * sizeof *p);
        if (p == NULL) {
            return -ENOMEM;
        }
        *seqs = p;
        *cap = c;
    }
    (*seqs)[(*n)++] = seq;
    return 0;
}

/* The seqs of seg-N files, sorted, and of free-N files (frees: NULL
 * if not wanted); prep-N files deleted. */
static int list_dir(struct tlog_store *s,
                    uint64_t **seqs,
                    size_t *n,
                    uint64_t **frees,
                    size_t *n_frees,
                    char *errmsg)
{
    int fd2 = openat(s->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
    struct dirent *e;
    size_t cap = 0, fcap = 0;
    *seqs = NULL;
    *n = 0;
    if (frees != NULL) {
        *frees = NULL;
        *n_frees = 0;
    }
    if (d == NULL) {
        int rv = -errno;
        if (fd2 >= 0) {
            (void)close(fd2);
        }
        tern_errmsg_printf(errmsg, "tlog: list %s: %s", s->dir,
                           tern_strerror(rv));
        return rv;
    }
    while ((e = readdir(d)) != NULL) {
        unsigned long long seq;
        int end = 0;
        if (sscanf(e->d_name, "prep-%20llu%n", &seq, &end) == 1 &&
            e->d_name[end] == '\0') {
            (void)unlinkat(s->dir_fd, e->d_name, 0);
            continue;
        }
        if (frees != NULL &&
            sscanf(e->d_name, "free-%20llu%n", &seq, &end) == 1 &&
            e->d_name[end] == '\0' && strlen(e->d_name) == 25) {
            if (push_seq(frees, n_frees, &fcap, seq) != 0) {
                (void)closedir(d);
                return -ENOMEM;
            }
            continue;
        }
        if (sscanf(e->d_name, "seg-%20llu%n", &seq, &end) != 1 ||
            e->d_name[end] != '\0' || strlen(e->d_name) != 24) {
            continue;
        }
        if (push_seq(seqs, n, &cap, seq) != 0) {
            (void)closedir(d);
            return -ENOMEM;
        }
    }
    (void)closedir(d);
    if (*n > 1) {
        qsort(*seqs, *n, sizeof **seqs, cmp_u64);
    }
    return 0;
}

int tlog_read_file(int dir_fd,
                   const char *name,
                   uint64_t max,
                   uint8_t **img,
                   size_t *len)
{
    struct stat st;
    size_t done = 0;
    int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
    int rv = 0;
    *img = NULL;
    if (fd < 0) {
        return -errno;
    }
    if (fstat(fd, &st) != 0) {
        rv = -errno;
        goto out;
    }
    if ((uint64_t)st.st_size > max) {
        rv = TERN_ETOOBIG;
        goto out;
    }
    *len = (size_t)st.st_size;
    *img = tern_malloc(*len > 0 ? *len : 1);
    if (*img == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    while (done < *len) {
        ssize_t r = pread(fd, *img + done, *len - done, (off_t)done);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            rv = r < 0 ? -errno : -EIO;
            tern_free(*img);
            *img = NULL;
            goto out;
        }
        done += (size_t)r;
    }
out:
    (void)close(fd);
    return rv;
}

/* The segment with records loaded last: what the next one's link must
 * name. */
struct held
{
    uint64_t seq; /* 0: none yet */
    size_t end;
    uint32_t write;
};

static bool has_seq(const uint64_t *seqs, size_t n, uint64_t seq)
{
    return n > 0 && bsearch(&seq, seqs, n, sizeof *seqs, cmp_u64) != NULL;
}

/* A linked segment (name, scanned into sc) against the segment with
 * records loaded before it (p): 0, or TERN_ECORRUPT with errmsg. */
static int check_link(const struct tlog_store *s,
                      const struct held *p,
                      const struct tlog_scan *sc,
                      const uint64_t *seqs,
                      size_t n_seqs,
                      const char *name,
                      char *errmsg)
{
    const struct tlog_link *k = &sc->link;
    if (p->seq != 0 && k->prev_seq == p->seq) {
        if (k->prev_end == p->end && k->prev_write == p->write) {
            return 0;
        }
        tern_errmsg_printf(
            errmsg,
            "tlog: %s/seg-%020" PRIu64
            ": its records end at offset %zu (write %u), "
            "but %s was written after it ended at %" PRIu64 " (write %u)",
            s->dir, p->seq, p->end, p->write, name, k->prev_end, k->prev_write);
        return TERN_ECORRUPT;
    }
    if (k->prev_seq > p->seq && k->prev_seq >= s->void_below &&
        has_seq(seqs, n_seqs, k->prev_seq)) {
        tern_errmsg_printf(errmsg,
                           "tlog: %s/%s was written after seg-%020" PRIu64
                           ", which holds no records",
                           s->dir, name, k->prev_seq);
        return TERN_ECORRUPT;
    }
    if (p->seq != 0) {
        tern_errmsg_printf(errmsg,
                           "tlog: %s/%s was written after seg-%020" PRIu64
                           ", not after seg-%020" PRIu64
                           " (a segment is missing)",
                           s->dir, name, k->prev_seq, p->seq);
        return TERN_ECORRUPT;
    }
    return 0; /* the first kept: what it follows was forgotten or voided */
}

/* After a load: free-N files kept up to the free list's bound (files of
 * the usual size; the rest deleted), then the dropped segments renamed
 * onto it while it has room, else deleted. */
static void settle_files(struct tlog_store *s,
                         const uint64_t *frees,
                         size_t n_frees,
                         const uint64_t *seqs,
                         const bool *drop,
                         size_t n_seqs)
{
    for (size_t k = 0; k < n_frees + n_seqs; k++) {
        bool is_free = k < n_frees;
        uint64_t seq = is_free ? frees[k] : seqs[k - n_frees];
        char name[TLOG__NAME_MAX], free_name[TLOG__NAME_MAX];
        struct stat st;
        if (!is_free && !drop[k - n_frees]) {
            continue;
        }
        seg_name(name, is_free ? "free" : "seg", seq);
        seg_name(free_name, "free", seq);
        if (s->n_free < s->free_max && fstatat(s->dir_fd, name, &st, 0) == 0 &&
            (uint64_t)st.st_size == s->segment_bytes &&
            (is_free || renameat(s->dir_fd, name, s->dir_fd, free_name) == 0)) {
            s->free_seq[s->n_free++] = seq;
            continue;
        }
        (void)unlinkat(s->dir_fd, name, 0);
    }
}

/* Sync seg-seq, shortened to *cut bytes first if cut is not NULL (its
 * torn tail goes). */
static int sync_seg(int dir_fd, uint64_t seq, const size_t *cut)
{
    char name[TLOG__NAME_MAX];
    int fd, rv = 0;
    seg_name(name, "seg", seq);
    fd = openat(dir_fd, name, (cut != NULL ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    if ((cut != NULL && ftruncate(fd, (off_t)*cut) != 0) ||
        fdatasync(fd) != 0) {
        rv = -errno;
    }
    (void)close(fd);
    return rv;
}

/* Load every segment (the top of the file). */
static int load(struct tlog_store *s, struct tlog_loaded *l, char *errmsg)
{
    struct load ld = {s, l, 0, NULL, errmsg};
    uint64_t *seqs = NULL, *frees = NULL;
    size_t n_seqs = 0, n_frees = 0;
    uint64_t torn_seq = 0; /* a torn segment (0: none) */
    size_t torn_end = 0;
    bool torn_cut = false;   /* shorten it to torn_end (version 1) */
    bool torn_empty = false; /* a version 2 one's first write is torn */
    bool *drop = NULL; /* per seq: recycle or unlink once the load stands */
    struct held prev = {0};
    int rv;

    memset(l, 0, sizeof *l);
    rv = list_dir(s, &seqs, &n_seqs, &frees, &n_frees, errmsg);
    if (rv != 0) {
        tern_free(frees);
        tern_free(seqs);
        return rv;
    }
    l->images = tern_calloc(n_seqs > 0 ? n_seqs : 1, sizeof *l->images);
    drop = tern_calloc(n_seqs > 0 ? n_seqs : 1, sizeof *drop);
    if (l->images == NULL || drop == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t k = 0; k < n_frees; k++) {
        /* A recycled file's older records must stay older than its seq. */
        if (frees[k] >= s->next_seq) {
            s->next_seq = frees[k] + 1;
        }
    }
    for (size_t k = 0; k < n_seqs; k++) {
        char name[TLOG__NAME_MAX];
        struct tlog_scan sc;
        struct seg *g;
        uint8_t *img = NULL;
        size_t len = 0, before = l->n;

        seg_name(name, "seg", seqs[k]);
        if (seqs[k] >= s->next_seq) {
            s->next_seq = seqs[k] + 1;
        }
        if (seqs[k] < s->void_below) {
            drop[k] = true; /* voided by an install */
            continue;
        }
        rv = image_read(s->dir_fd, name, &l->images[l->n_images]);
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "tlog: read %s/%s: %s", s->dir, name,
                               tern_strerror(rv));
            goto out;
        }
        img = l->images[l->n_images].p;
        len = l->images[l->n_images++].len;
        rv = tlog_seg_scan(img, len, seqs[k], 0, 0, load_cb, &ld, &sc, errmsg);
        if (rv != 0) {
            tern_errmsg_wrapf(errmsg, "tlog: %s/%s", s->dir, name);
            goto out;
        }
        if (sc.how == TLOG_SCAN_CORRUPT) {
            tern_errmsg_printf(errmsg,
                               "tlog: %s/%s: damaged at offset %zu (%s), "
                               "a record of it at %zu",
                               s->dir, name, sc.end, sc.why, sc.later_record);
            rv = TERN_ECORRUPT;
            goto out;
        }
        if (sc.n_records > 0 && sc.linked) {
            /* The segment written before it ends where its link says. */
            rv = check_link(s, &prev, &sc, seqs, n_seqs, name, errmsg);
            if (rv != 0) {
                goto out;
            }
            torn_seq = 0; /* a torn end before it is settled by the link */
            torn_cut = false;
        } else if (torn_seq != 0 &&
                   (sc.n_records > 0 ||
                    (sc.how == TLOG_SCAN_TORN &&
                     sc.header.version == TLOG_SEG_VERSION_ZEROED))) {
            /* A write went out after the torn one: that one completed. */
            tern_errmsg_printf(errmsg,
                               "tlog: %s/seg-%020" PRIu64
                               ": torn at offset %zu, but a later segment "
                               "was written",
                               s->dir, torn_seq, torn_end);
            rv = TERN_ECORRUPT;
            goto out;
        }
        if (sc.n_records == 0 && sc.how == TLOG_SCAN_CLEAN && !sc.linked &&
            sc.header.version == TLOG_SEG_VERSION_LINKED && k == n_seqs - 1 &&
            len == s->segment_bytes && sc.header.block_size == s->block_size &&
            sc.header.in_flight == TLOG__IN_FLIGHT) {
            /* The spare prepared before the stop: kept. */
            image_free(&l->images[--l->n_images]);
            g = tern_calloc(1, sizeof *g);
            if (g == NULL) {
                rv = -ENOMEM;
                goto out;
            }
            g->seq = seqs[k];
            g->size = len;
            g->placed = TLOG_SEG_HEADER_SIZE;
            g->state = SEG_READY;
            g->store = s;
            g->block_size = s->block_size;
            g->fd = open_for_writes(s->dir_fd, name, &g->direct);
            if (g->fd < 0) {
                rv = g->fd;
                tern_free(g);
                tern_errmsg_printf(errmsg, "tlog: open %s/%s: %s", s->dir, name,
                                   tern_strerror(rv));
                goto out;
            }
            tern_list_push(&s->segs, &g->link);
            continue;
        }
        if (sc.n_records == 0) {
            /* A spare, or a segment whose first write never landed. Version
             * 1, torn: it must be the last; cut to its header, not
             * deleted. Otherwise recycled (version 2: a later segment's
             * link would name it if its first write had completed). */
            if (sc.how == TLOG_SCAN_TORN &&
                sc.header.version == TLOG_SEG_VERSION_ZEROED) {
                torn_seq = seqs[k];
                torn_end = sc.end;
                torn_cut = true;
            } else {
                drop[k] = true;
                torn_empty =
                    torn_empty || sc.how == TLOG_SCAN_TORN || sc.linked;
            }
            image_free(&l->images[--l->n_images]);
            continue;
        }
        if (sc.how == TLOG_SCAN_TORN) {
            /* Version 2 keeps its bytes: the next segment's link will
             * name where its records end. */
            torn_seq = seqs[k];
            torn_end = sc.end;
            torn_cut = sc.header.version == TLOG_SEG_VERSION_ZEROED;
        }
        torn_empty = false; /* a torn first write before it, dropped */
        prev.seq = seqs[k];
        prev.end = sc.end;
        prev.write = sc.write;
        /* Its entries were appended at [before, l->n): they continue the
         * loaded ones, or supersede them from their first index on. */
        if (before > 0) {
            uint64_t next = l->first_index + before;
            uint64_t f = sc.first_index;
            uint64_t expect_pos;
            size_t keep;
            /* A gap up to where the caller's snapshot ends: the log went
             * on from it (a reset whose void_below was not recorded). */
            bool restart = f > next && f == s->restart_index;
            if (f > next && !restart) {
                tern_errmsg_printf(errmsg,
                                   "tlog: %s/%s starts at index %" PRIu64
                                   ", the segments before end at %" PRIu64,
                                   s->dir, name, f, next - 1);
                rv = TERN_ECORRUPT;
                goto out;
            }
            keep = restart || f < l->first_index ? 0
                                                 : (size_t)(f - l->first_index);
            expect_pos = f == next ? tlog_rec_pos_after(&(struct tlog_rec){
                                         .type = l->entries[before - 1].type,
                                         .pos = ld.pos[before - 1],
                                         .len = l->entries[before - 1].len})
                                   : ld.pos[keep];
            if (!restart && f >= l->first_index && sc.first_pos != expect_pos) {
                tern_errmsg_printf(errmsg,
                                   "tlog: %s/%s starts at stream position "
                                   "%" PRIu64 ", expected %" PRIu64,
                                   s->dir, name, sc.first_pos, expect_pos);
                rv = TERN_ECORRUPT;
                goto out;
            }
            if (keep < before) {
                /* Superseded from f on: move this segment's entries down
                 * over them, and mark the older segments. */
                size_t m = l->n - before;
                memmove(l->entries + keep, l->entries + before,
                        m * sizeof *l->entries);
                memmove(ld.pos + keep, ld.pos + before, m * sizeof *ld.pos);
                l->n = keep + m;
                if (keep == 0) {
                    l->first_index = f;
                }
                for (struct tern_list *e = s->segs.next; e != &s->segs;
                     e = e->next) {
                    struct seg *o = TERN_CONTAINER(e, struct seg, link);
                    if (o->first_index >= f) {
                        o->last_index = 0;
                    } else if (o->last_index >= f) {
                        o->last_index = f - 1;
                    }
                }
            }
        }
        g = tern_calloc(1, sizeof *g);
        if (g == NULL) {
            rv = -ENOMEM;
            goto out;
        }
        g->seq = seqs[k];
        g->size = len;
        g->first_index = sc.first_index;
        g->last_index = sc.next_index - 1;
        g->placed = len;
        g->state = SEG_LOADED;
        g->fd = -1;
        g->store = s;
        tern_list_push(&s->segs, &g->link);
    }
    if (s->next_seq < s->void_below) {
        s->next_seq = s->void_below; /* new segments must stay valid */
    }
    if (l->n > 0) {
        const struct tlog_entry *last = &l->entries[l->n - 1];
        l->next_index = l->first_index + l->n;
        l->next_pos = tlog_rec_pos_after(&(struct tlog_rec){
            .type = last->type, .pos = ld.pos[l->n - 1], .len = last->len});
        for (size_t i = 0; i < l->n; i++) {
            rv = pos_push(s, l->first_index + i, ld.pos[i]);
            if (rv != 0) {
                goto out;
            }
        }
        s->next_index = l->next_index;
        s->next_pos = l->next_pos;
    }
    s->last.prev_seq = prev.seq;
    s->last.prev_end = prev.end;
    s->last.prev_write = prev.write;
    /* The whole load stands: now the files change. */
    if (torn_cut) {
        rv = sync_seg(s->dir_fd, torn_seq, &torn_end);
        if (rv != 0) {
            tern_errmsg_printf(
                errmsg, "tlog: cut the torn tail of %s/seg-%020" PRIu64 ": %s",
                s->dir, torn_seq, tern_strerror(rv));
            goto out;
        }
        for (struct tern_list *e = s->segs.next; e != &s->segs; e = e->next) {
            struct seg *g = TERN_CONTAINER(e, struct seg, link);
            if (g->seq == torn_seq) {
                g->size = torn_end; /* not the free list's size */
            }
        }
    }
    if (prev.seq != 0 && (!torn_cut || torn_seq != prev.seq)) {
        /* What was read of the last segment may be in a cache only (a
         * crash that was no power loss): the next segment's link and
         * raft's count of stored entries rest on it from now on. */
        rv = sync_seg(s->dir_fd, prev.seq, NULL);
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "tlog: sync %s/seg-%020" PRIu64 ": %s",
                               s->dir, prev.seq, tern_strerror(rv));
            goto out;
        }
    }
    l->torn = torn_seq != 0 || torn_empty;
    settle_files(s, frees, n_frees, seqs, drop, n_seqs);
    if (n_seqs + n_frees > 0 && sync_dir(s->dir_fd) != 0) {
        /* Renames onto the free list a crash may undo: none reused. */
        s->n_free = 0;
    }
out:
    tern_free(frees);
    tern_free(drop);
    tern_free(ld.pos);
    tern_free(seqs);
    if (rv != 0) {
        tlog_loaded_free(l);
    }
    return rv;
}

int tlog_open(uv_loop_t *loop,
              const struct tlog_config *c,
              struct tlog_store **out,
              struct tlog_loaded *loaded,
              char *errmsg)
{
    struct tlog_store *s;
    int rv;

    if (c->dir == NULL || c->dir[0] == '\0') {
        tern_errmsg_printf(errmsg, "tlog: no directory");
        return TERN_EINVAL;
    }
    s = tern_calloc(1, sizeof *s);
    if (s == NULL) {
        return -ENOMEM;
    }
    s->loop = loop;
    s->dir_fd = -1;
    s->segment_bytes =
        c->segment_bytes ? c->segment_bytes : TLOG_DEFAULT_SEGMENT_BYTES;
    s->block_size = c->block_size ? c->block_size : TLOG__DEFAULT_BLOCK;
    s->window = c->window ? c->window : TLOG__DEFAULT_WINDOW;
    s->next_seq = 1;
    s->void_below = c->void_below;
    s->restart_index = c->restart_index;
    s->free_max = c->free_max ? c->free_max : TLOG__DEFAULT_FREE;
    s->roll = true;
    tern_list_init(&s->segs);
    tern_list_init(&s->writes);
    tern_list_init(&s->dels);
    if (s->block_size < TLOG_BLOCK_MIN || s->block_size > TLOG_BLOCK_MAX ||
        (s->block_size & (s->block_size - 1)) != 0 ||
        s->window < s->block_size || s->window > TLOG_WINDOW_MAX ||
        s->window % s->block_size != 0 ||
        s->segment_bytes < TLOG_SEG_HEADER_SIZE + 4 * (uint64_t)s->block_size ||
        s->free_max > TLOG__FREE_MAX) {
        tern_errmsg_printf(errmsg,
                           "tlog: block %u, window %u, segment %" PRIu64
                           ", free list %u: out of bounds",
                           s->block_size, s->window, s->segment_bytes,
                           s->free_max);
        tern_free(s);
        return TERN_EINVAL;
    }
    s->dir = tern_strdup(c->dir);
    s->free_seq = tern_calloc(s->free_max, sizeof *s->free_seq);
    if (s->dir == NULL || s->free_seq == NULL) {
        tern_free(s->free_seq);
        tern_free(s->dir);
        tern_free(s);
        return -ENOMEM;
    }
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "tlog: mkdir %s: %s", c->dir,
                           tern_strerror(rv));
        goto err;
    }
    s->dir_fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dir_fd < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "tlog: open %s: %s", c->dir,
                           tern_strerror(rv));
        goto err;
    }
    rv = load(s, loaded, errmsg);
    if (rv != 0) {
        goto err;
    }
    rv = tlog__kaio_init(&s->kaio, loop, !c->no_aio);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "tlog: aio: %s", tern_strerror(rv));
        tlog_loaded_free(loaded);
        goto err;
    }
    uv_idle_init(loop, &s->retire_idle);
    s->retire_idle.data = s;
    *out = s;
    return 0;

err:
    store_free(s);
    return rv;
}

/* ---- bootstrap ------------------------------------------------------------
 */

int tlog_bootstrap(const struct tlog_config *c,
                   uint64_t index,
                   uint64_t pos,
                   const struct tlog_entry *entries,
                   unsigned n,
                   char *errmsg)
{
    struct tlog_store probe;
    uint64_t *seqs = NULL;
    size_t n_seqs = 0, len = 0, cap = 0;
    uint32_t block = c->block_size ? c->block_size : TLOG__DEFAULT_BLOCK;
    uint64_t size =
        c->segment_bytes ? c->segment_bytes : TLOG_DEFAULT_SEGMENT_BYTES;
    uint64_t seq = c->void_below > 0 ? c->void_below : 1;
    uint8_t *buf = NULL;
    bool direct = false, recycled;
    int fd = -1, rv;

    memset(&probe, 0, sizeof probe);
    probe.dir = (char *)c->dir;
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "tlog: mkdir %s: %s", c->dir,
                           tern_strerror(rv));
        return rv;
    }
    probe.dir_fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (probe.dir_fd < 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "tlog: open %s: %s", c->dir,
                           tern_strerror(rv));
        return rv;
    }
    rv = list_dir(&probe, &seqs, &n_seqs, NULL, NULL, errmsg);
    if (rv == 0 && n_seqs > 0) {
        tern_errmsg_printf(errmsg, "tlog: %s holds segments", c->dir);
        rv = -EEXIST;
    }
    tern_free(seqs);
    if (rv != 0) {
        goto out;
    }
    cap = TLOG__LINK_SIZE;
    for (unsigned i = 0; i < n; i++) {
        cap += tlog_rec_size(entries[i].len);
    }
    cap += 2 * (size_t)block;
    if (TLOG_SEG_HEADER_SIZE + cap > size) {
        size = (TLOG_SEG_HEADER_SIZE + cap + block - 1) / block * block;
    }
    buf = aligned(cap);
    if (buf == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    tlog_link_encode(buf, seq, pos, &(struct tlog_link){0, 0, 0});
    len = TLOG__LINK_SIZE;
    for (unsigned i = 0; i < n; i++) {
        struct tlog_rec r;
        r.type = entries[i].type;
        r.write = 1;
        r.seq = seq;
        r.index = index + i;
        r.term = entries[i].term;
        r.pos = pos;
        r.len = entries[i].len;
        r.payload = entries[i].payload;
        tlog_rec_encode(buf + len, &r);
        len += tlog_rec_size(r.len);
        pos = tlog_rec_pos_after(&r);
    }
    tlog_pad_encode(buf + len, tlog_pad_size(len, block), seq, 1, pos);
    len += tlog_pad_size(len, block);
    rv = prepare_file(probe.dir_fd, seq, size, block, 0, &recycled, &fd,
                      &direct);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "tlog: prepare a segment in %s: %s", c->dir,
                           tern_strerror(rv));
        goto out;
    }
    {
        ssize_t w = pwrite(fd, buf, len, TLOG_SEG_HEADER_SIZE);
        rv = w == (ssize_t)len ? 0 : w < 0 ? -errno : -EIO;
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "tlog: write %s: %s", c->dir,
                           tern_strerror(rv));
    }
out:
    if (fd >= 0) {
        (void)close(fd);
    }
    free(buf);
    (void)close(probe.dir_fd);
    return rv;
}
