/*
 * The commit log: append-only segment files holding one record per applied
 * Raft command entry. This file owns the on-disk format of the log.
 *
 * POSITIONS. The log is one byte stream: the concatenation of all records.
 * A position is an offset in that stream ("global position"); segment
 * headers are not part of it. LMDB stores positions, and bulk catch-up
 * (idx_bulk_*) copies stream bytes, so two nodes holding the same records
 * have the same stream even if they cut it into segments differently.
 *
 * SEGMENTS. <dir>/log/%020llu.seg, named by the position of its first
 * stream byte. Segment i+1 starts where segment i ends; the first starts at
 * 0 until retention deletes the head of the log (idx__log_drop_head, at a
 * raft snapshot: index/snapshot.c), after which the first segment holds
 * the checkpoint position the log is rebuilt from (index/ckpt.c) and the
 * bytes before it in that segment are never read again. A segment file is
 * a 32-byte header followed by stream bytes:
 *
 *   offset size  field
 *   0      8     magic "TERNSEG\0"
 *   8      4     version: 1 or 2 (below)
 *   12     4     header size = 32
 *   16     8     start position (must match the file name)
 *   24     4     reserved = 0
 *   28     4     tern_checksum32 over bytes [0,28)
 *
 * Appends roll to a new segment before a record when the active segment
 * already holds >= segment_bytes stream bytes. Bulk writes roll at any
 * byte once the active segment is full, so a record may span two
 * segments; every reader goes through idx__log_pread, which crosses
 * segment boundaries.
 *
 * Segment versions. A version 1 segment holds records of version 1 only;
 * a version 2 segment may hold records of both versions. This build
 * creates version 2 segments and never appends to a version 1 one: when
 * the active segment is of version 1 (a data directory of an earlier
 * release, or a cut back into one), the next append (record or bulk)
 * first rolls to a new segment, or rewrites the header of an empty one.
 * An earlier release, which reads a record of version 2 as a torn tail
 * and would cut it, thus refuses the directory (TERN_EVERSION, below)
 * instead. Segment boundaries may differ between nodes (positions never
 * do).
 *
 * RECORDS (all integers little-endian; encoded/decoded byte by byte, be
 * careful when adapting):
 *
 *   offset size  field
 *   0      4     magic 0x52435254 ("TRCR")
 *   4      2     version: 1 or 2
 *   6      2     flags = 0
 *   8      8     raft index of the entry (strictly increasing in the log)
 *   16     4     payload length (<= 1 GiB)
 *   20     4     checksum. Version 1: tern_checksum32 (XXH32) over bytes
 *                [0,20) followed by the payload. Version 2:
 *                tern_checksum32_xxh3 of the payload seeded with
 *                tern_checksum32 of bytes [0,20) (XXH3: the same
 *                construction as client frames of version 2, and 2.7x
 *                faster here on what a consumer reads back)
 *   24     ...   payload: the Raft entry bytes exactly as applied
 *
 * No padding. Every entry idx_apply receives is recorded, malformed ones
 * included: the log stays byte-identical on all nodes and the indexer
 * derives the same (TERN_EMALFORMED) results from it on every replay. The
 * version is the entry's too (idx__entry_record_version: 2 for an entry
 * that carries the XXH3 flag, index/cmd.c), so every node writes the same
 * bytes for it: snapshot manifests and checkpoints compare a record's
 * checksum across nodes.
 *
 * DURABILITY. Records are written with plain pwrite, no fsync per record:
 * the Raft log is the durable source of truth and replays what a crash
 * loses (idx_apply skips what is already applied). idx_sync fdatasyncs
 * every segment written since the last sync and fsyncs log/ when segments
 * were created or removed. Every IDX__LOG_WRITEBACK_BYTES (256 KiB) appended,
 * the kernel is asked to start writing them back (log_writeback), so that wait
 * is mostly for what is already in flight. A failed write is rolled back with
 * ftruncate so the log never keeps a partial record while the env is open.
 *
 * RECOVERY (idx_open, see env.c). Segment headers are checked here; a bad
 * or missing segment cuts the log at its start. A header whose magic and
 * checksum hold but whose version is not 1 or 2 was written by a release this
 * build does not know: idx_open fails with TERN_EVERSION naming the file
 * and the version, before anything in the directory changes. Every record is
 * then scanned from position 0 (LMDB is rebuilt at each open); the first record
 * that is short, malformed, fails its checksum or does not increase the
 * raft index ends the log, and everything after it is truncated
 * (ftruncate + fsync). Where and why is kept for idx_cut_note; the raft
 * log or a peer re-supplies the records after the cut (raft/bulk.c).
 * Un-indexed bulk bytes of an abandoned fetch are cut by idx_bulk_discard
 * (apply.c) before the next append.
 *
 * READ-AHEAD. A record read right where the previous one ended (a
 * consumer streaming a queue) keeps 8 MiB ahead of it requested from the
 * kernel (POSIX_FADV_WILLNEED), so a consumer catching up from a cold page
 * cache has the disk reading while the loop thread answers; other reads
 * request nothing. A log view (idx_reader, one per answer read on the
 * thread pool) does the same, and one that starts inside the range the
 * reader before it asked for (handed over by idx_reader_end, cleared by a
 * cut) asks only for what lies past it: a consumer's answers of about
 * 1 MiB each would otherwise ask the kernel for the same 8 MiB again and
 * again, a walk of the page cache that cost 7% of ternd's CPU.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "idx_int.h"

#define IDX__SEG_MAGIC    "TERNSEG\0"
#define IDX__SEG_VERSION  2 /* written; 1 is read too */
#define IDX__SEG_HDR_SIZE 32
#define IDX__REC_MAGIC    0x52435254U /* "TRCR" little-endian */
#define LOG__PAGE         ((uint64_t)4096)
/* Segment files kept open for reading before the cache is dropped. */
#define IDX__MAX_OPEN_SEGS 32

/* One segment file: the entries of e->segs. */
struct idx__seg
{
    uint64_t start; /* global position of the first stream byte */
    uint64_t size;  /* stream bytes held (file size - header) */
    int fd;         /* -1 when not open */
    int dirty;      /* written since the last sync */
    int version;    /* of its header: 1 holds records of version 1 only */
};

/* ---- Records ------------------------------------------------------------- */

uint32_t idx__record_checksum(const void *hdr,
                              const void *payload,
                              size_t payload_len)
{
    if (tern_get_u16((const uint8_t *)hdr + 4) == IDX__REC_VERSION_XXH3) {
        return tern_checksum32_xxh3(payload, payload_len,
                                    tern_checksum32(hdr, 20));
    }
    struct tern_checksum_state st;
    tern_checksum32_begin(&st);
    tern_checksum32_update(&st, hdr, 20);
    if (payload_len > 0) {
        tern_checksum32_update(&st, payload, payload_len);
    }
    return tern_checksum32_end(&st);
}

void idx__record_sum_begin(struct idx__record_sum *rs, const void *hdr)
{
    bool xxh3 = tern_get_u16((const uint8_t *)hdr + 4) == IDX__REC_VERSION_XXH3;
    /* Version 2: XXH3 of the payload seeded with XXH32 of the header;
     * version 1: XXH32 of both. */
    tern_checksum32_either_begin(&rs->sum, xxh3,
                                 xxh3 ? tern_checksum32(hdr, 20) : 0);
    if (!xxh3) {
        tern_checksum32_either_update(&rs->sum, hdr, 20);
    }
}

void idx__record_sum_update(struct idx__record_sum *rs,
                            const void *buf,
                            size_t len)
{
    tern_checksum32_either_update(&rs->sum, buf, len);
}

uint32_t idx__record_sum_end(struct idx__record_sum *rs)
{
    return tern_checksum32_either_end(&rs->sum);
}

void idx__record_header_encode(void *hdr,
                               uint16_t version,
                               uint64_t index,
                               const void *payload,
                               uint32_t payload_len)
{
    uint8_t *h = hdr;
    tern_put_u32(h, IDX__REC_MAGIC);
    tern_put_u16(h + 4, version);
    tern_put_u16(h + 6, 0);
    tern_put_u64(h + 8, index);
    tern_put_u32(h + 16, payload_len);
    tern_put_u32(h + 20, idx__record_checksum(h, payload, payload_len));
}

int idx__record_header_decode(const void *hdr, struct idx__record *out)
{
    const uint8_t *h = hdr;
    uint16_t version = tern_get_u16(h + 4);
    if (tern_get_u32(h) != IDX__REC_MAGIC ||
        (version != IDX__REC_VERSION_XXH32 &&
         version != IDX__REC_VERSION_XXH3) ||
        tern_get_u16(h + 6) != 0) {
        return TERN_EMALFORMED;
    }
    out->version = version;
    out->index = tern_get_u64(h + 8);
    out->payload_len = tern_get_u32(h + 16);
    out->checksum = tern_get_u32(h + 20);
    out->payload = NULL;
    if (out->index == 0 || out->payload_len > IDX__RECORD_MAX_PAYLOAD) {
        return TERN_EMALFORMED;
    }
    return 0;
}

int idx__record_decode(const void *buf,
                       size_t len,
                       struct idx__record *out,
                       size_t *size)
{
    const uint8_t *b = buf;
    if (len < IDX__REC_HDR_SIZE) {
        return TERN_EMALFORMED;
    }
    int rc = idx__record_header_decode(b, out);
    if (rc != 0) {
        return rc;
    }
    if (len - IDX__REC_HDR_SIZE < out->payload_len) {
        return TERN_EMALFORMED;
    }
    if (!IDX__CHECKSUM_OK(
            out->checksum,
            idx__record_checksum(b, b + IDX__REC_HDR_SIZE, out->payload_len))) {
        return TERN_ECORRUPT;
    }
    out->payload = b + IDX__REC_HDR_SIZE;
    *size = IDX__REC_HDR_SIZE + (size_t)out->payload_len;
    return 0;
}

/* ---- Segment table ------------------------------------------------------- */

static void seg_path_in(const char *log_dir,
                        uint64_t start,
                        char *buf,
                        size_t cap)
{
    (void)snprintf(buf, cap, "%s/%020llu.seg", log_dir,
                   (unsigned long long)start);
}

static void seg_path(const struct idx_env *e,
                     uint64_t start,
                     char *buf,
                     size_t cap)
{
    seg_path_in(e->log_dir, start, buf, cap);
}

uint64_t idx__next_gen(void)
{
    static atomic_uint_fast64_t next = 1;
    return (uint64_t)atomic_fetch_add(&next, 1);
}

/* Bytes a reader may have read at their positions were cut or deleted:
 * an idx_reader started before is stale (read.c). */
static void log_changed(struct idx_env *e)
{
    e->gen = idx__next_gen();
    e->view_ahead_from = 0;
    e->view_ahead_until = 0;
}

static void seg_header_encode(uint8_t *h, uint64_t start)
{
    memset(h, 0, IDX__SEG_HDR_SIZE);
    memcpy(h, IDX__SEG_MAGIC, 8);
    tern_put_u32(h + 8, IDX__SEG_VERSION);
    tern_put_u32(h + 12, IDX__SEG_HDR_SIZE);
    tern_put_u64(h + 16, start);
    tern_put_u32(h + 28, tern_checksum32(h, 28));
}

static int seg_version_known(uint32_t v)
{
    return v == 1 || v == IDX__SEG_VERSION;
}

static int seg_header_ok(const uint8_t *h, uint64_t start)
{
    return memcmp(h, IDX__SEG_MAGIC, 8) == 0 &&
           seg_version_known(tern_get_u32(h + 8)) &&
           tern_get_u32(h + 12) == IDX__SEG_HDR_SIZE &&
           tern_get_u64(h + 16) == start &&
           tern_get_u32(h + 28) == tern_checksum32(h, 28);
}

/* A well-formed header (magic, checksum) of another segment version. */
static int seg_header_other_version(const uint8_t *h)
{
    return memcmp(h, IDX__SEG_MAGIC, 8) == 0 &&
           tern_get_u32(h + 28) == tern_checksum32(h, 28) &&
           !seg_version_known(tern_get_u32(h + 8));
}

static void close_read_fds(struct idx_env *e)
{
    /* Keep the active (last) segment open: it is written constantly. */
    for (size_t i = 0; i + 1 < e->n_segs; i++) {
        if (e->segs[i].fd >= 0 && !e->segs[i].dirty) {
            close(e->segs[i].fd);
            e->segs[i].fd = -1;
            e->open_fds--;
        }
    }
}

/* fd of segment i, opening it on demand. 0 or -errno. */
static int seg_fd(struct idx_env *e, size_t i, int *fd)
{
    char path[4096];
    if (e->segs[i].fd < 0) {
        if (e->open_fds >= IDX__MAX_OPEN_SEGS) {
            close_read_fds(e);
        }
        seg_path(e, e->segs[i].start, path, sizeof path);
        int f = open(path, O_RDWR | O_CLOEXEC);
        if (f < 0) {
            return idx__fail(e, -errno, __LINE__, "open %s: %s", path,
                             strerror(errno));
        }
        e->segs[i].fd = f;
        e->open_fds++;
    }
    *fd = e->segs[i].fd;
    return 0;
}

static int segs_push(struct idx_env *e, uint64_t start, uint64_t size, int fd)
{
    if (e->n_segs == e->cap_segs) {
        size_t cap = e->cap_segs != 0 ? e->cap_segs * 2 : 16;
        struct idx__seg *s = tern_realloc(e->segs, cap * sizeof *s);
        if (s == NULL) {
            return idx__fail(e, -ENOMEM, __LINE__, "segment table: %s",
                             strerror(ENOMEM));
        }
        e->segs = s;
        e->cap_segs = cap;
    }
    e->segs[e->n_segs].start = start;
    e->segs[e->n_segs].size = size;
    e->segs[e->n_segs].fd = fd;
    e->segs[e->n_segs].dirty = 0;
    e->segs[e->n_segs].version = IDX__SEG_VERSION;
    e->n_segs++;
    if (fd >= 0) {
        e->open_fds++;
    }
    return 0;
}

static int io_err(struct idx_env *e, int err, const char *what)
{
    int code = err == ENOSPC || err == EDQUOT ? TERN_EFULL : -err;
    return idx__fail(e, code, __LINE__, "commit log %s: %s", what,
                     strerror(err));
}

/* Create a new, empty segment starting at the current log end. */
static int seg_create(struct idx_env *e)
{
    char path[4096];
    uint8_t h[IDX__SEG_HDR_SIZE];
    seg_path(e, e->log_end, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return io_err(e, errno, "create segment");
    }
    seg_header_encode(h, e->log_end);
    ssize_t n = pwrite(fd, h, sizeof h, 0);
    if (n != (ssize_t)sizeof h) {
        int err = n < 0 ? errno : ENOSPC;
        close(fd);
        unlink(path);
        return io_err(e, err, "write segment header");
    }
    int rc = segs_push(e, e->log_end, 0, fd);
    if (rc != 0) {
        close(fd);
        unlink(path);
        return rc;
    }
    e->segs[e->n_segs - 1].dirty = 1;
    e->dir_dirty = 1;
    return 0;
}

/* Before an append: a new segment when the active one is full or of
 * version 1 (see "Segment versions"); an empty one of version 1 gets its
 * header rewritten instead, as a new segment would take its name. */
static int active_ready(struct idx_env *e)
{
    struct idx__seg *s = &e->segs[e->n_segs - 1];
    if (s->version != IDX__SEG_VERSION && s->size == 0) {
        uint8_t h[IDX__SEG_HDR_SIZE];
        int fd = -1;
        int rc = seg_fd(e, e->n_segs - 1, &fd);
        if (rc != 0) {
            return rc;
        }
        seg_header_encode(h, s->start);
        ssize_t n = pwrite(fd, h, sizeof h, 0);
        if (n != (ssize_t)sizeof h) {
            return io_err(e, n < 0 ? errno : ENOSPC, "rewrite segment header");
        }
        s->version = IDX__SEG_VERSION;
        s->dirty = 1;
        return 0;
    }
    if (s->size >= e->segment_bytes || s->version != IDX__SEG_VERSION) {
        return seg_create(e);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Remove segment files starting at or after index i from disk and table.
 * Adds their stream bytes to *lost. */
static void drop_segs_from(struct idx_env *e, size_t i, uint64_t *lost)
{
    char path[4096];
    for (size_t j = i; j < e->n_segs; j++) {
        if (e->segs[j].fd >= 0) {
            close(e->segs[j].fd);
            e->open_fds--;
        }
        seg_path(e, e->segs[j].start, path, sizeof path);
        unlink(path);
        *lost += e->segs[j].size;
        log_changed(e);
    }
    if (i < e->n_segs) {
        e->dir_dirty = 1;
    }
    e->n_segs = i;
}

int idx__log_open(struct idx_env *e)
{
    uint64_t *starts = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    DIR *d;
    struct dirent *de;

    if (mkdir(e->log_dir, 0700) != 0 && errno != EEXIST) {
        return io_err(e, errno, "mkdir");
    }
    d = opendir(e->log_dir);
    if (d == NULL) {
        return io_err(e, errno, "opendir");
    }
    while ((de = readdir(d)) != NULL) {
        const char *s = de->d_name;
        char *endp;
        if (strlen(s) != 24 || strcmp(s + 20, ".seg") != 0 || s[0] == '-' ||
            s[0] == '+') {
            continue;
        }
        unsigned long long v = strtoull(s, &endp, 10);
        if (endp != s + 20) {
            continue;
        }
        if (n == cap) {
            cap = cap != 0 ? cap * 2 : 16;
            uint64_t *p = tern_realloc(starts, cap * sizeof *p);
            if (p == NULL) {
                rc = idx__fail(e, -ENOMEM, __LINE__, "log dir: %s",
                               strerror(ENOMEM));
                goto err_after_opendir;
            }
            starts = p;
        }
        starts[n++] = v;
    }
    closedir(d);
    d = NULL;
    if (n > 0) {
        qsort(starts, n, sizeof *starts, cmp_u64);
    }

    /* Add segments while they are well formed and contiguous; the first
     * bad one cuts the log (it and everything after it are removed). The
     * first may start after 0: retention deleted the head of the log
     * (env.c then rebuilds from a checkpoint, ckpt.c). */
    uint64_t expect = n > 0 ? starts[0] : 0;
    size_t good = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        uint8_t h[IDX__SEG_HDR_SIZE];
        struct stat stt;
        if (starts[i] != expect) {
            break;
        }
        seg_path(e, starts[i], path, sizeof path);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            rc = io_err(e, errno, "open segment");
            goto err_after_list;
        }
        if (fstat(fd, &stt) != 0) {
            rc = io_err(e, errno, "stat segment");
            close(fd);
            goto err_after_list;
        }
        if (stt.st_size < IDX__SEG_HDR_SIZE ||
            pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
            close(fd);
            break;
        }
        if (seg_header_other_version(h)) {
            /* Written by a release this build does not know: refused
             * before anything in the directory changes. */
            close(fd);
            rc = idx__fail(e, TERN_EVERSION, __LINE__,
                           "segment log/%020llu.seg has version %u; this "
                           "build reads versions 1 and %u: refusing the "
                           "data directory",
                           (unsigned long long)starts[i],
                           (unsigned)tern_get_u32(h + 8), IDX__SEG_VERSION);
            goto err_after_list;
        }
        if (!seg_header_ok(h, starts[i])) {
            close(fd);
            break;
        }
        uint64_t size = (uint64_t)stt.st_size - IDX__SEG_HDR_SIZE;
        rc = segs_push(e, starts[i], size, fd);
        if (rc != 0) {
            close(fd);
            goto err_after_list;
        }
        e->segs[e->n_segs - 1].version = (int)tern_get_u32(h + 8);
        if (e->open_fds > IDX__MAX_OPEN_SEGS) {
            close_read_fds(e);
        }
        expect = starts[i] + size;
        good++;
    }
    if (good < n) {
        tern_errmsg_printf(e->cut_note,
                           "segment log/%020llu.seg unusable (bad header, "
                           "or a gap: the log ended at %llu); it and %zu "
                           "later segment(s) removed",
                           (unsigned long long)starts[good],
                           (unsigned long long)expect, n - good - 1);
    }
    for (size_t i = good; i < n; i++) {
        /* Unusable segments: count what they held as truncated. */
        char path[4096];
        struct stat stt;
        seg_path(e, starts[i], path, sizeof path);
        if (stat(path, &stt) == 0 && stt.st_size > IDX__SEG_HDR_SIZE) {
            e->truncated += (uint64_t)stt.st_size - IDX__SEG_HDR_SIZE;
        }
        unlink(path);
        e->dir_dirty = 1;
    }
    /* An empty trailing segment other than the first is harmless; keep. */
    if (e->n_segs == 0) {
        e->log_end = 0;
        rc = seg_create(e);
        if (rc != 0) {
            goto err_after_list;
        }
    }
    e->log_end = e->segs[e->n_segs - 1].start + e->segs[e->n_segs - 1].size;
    e->wb_pos = e->log_end;
    tern_free(starts);
    return 0;

err_after_opendir:
    closedir(d);
err_after_list:
    tern_free(starts);
    return rc;
}

void idx__log_close(struct idx_env *e)
{
    for (size_t i = 0; i < e->n_segs; i++) {
        if (e->segs[i].fd >= 0) {
            close(e->segs[i].fd);
        }
    }
    tern_free(e->segs);
    e->segs = NULL;
    e->n_segs = 0;
    e->cap_segs = 0;
    e->open_fds = 0;
    e->read_next = 0;
    e->read_ahead_until = 0;
}

/* Index of the segment of segs[0..n) holding pos (the last one whose
 * start <= pos). */
static size_t seg_find_in(const struct idx__seg *segs, size_t n, uint64_t pos)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (segs[mid].start <= pos) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static size_t seg_find(const struct idx_env *e, uint64_t pos)
{
    return seg_find_in(e->segs, e->n_segs, pos);
}

/* What a read goes through: a segment table (sorted, contiguous), the end
 * of its bytes, where errors go and how the fd of segment i is found. The
 * env (loop thread) opens its segments on demand into a bounded cache
 * (seg_fd); an idx__logview (any one thread) opens its own. */
struct seg_src
{
    struct idx__seg *segs;
    size_t n_segs;
    uint64_t log_end;
    char *errmsg;
    int (*fd_of)(void *arg, size_t i, int *fd);
    void *arg;
};

static int env_fd_of(void *arg, size_t i, int *fd)
{
    return seg_fd(arg, i, fd);
}

static void env_src(struct idx_env *e, struct seg_src *s)
{
    s->segs = e->segs;
    s->n_segs = e->n_segs;
    s->log_end = e->log_end;
    s->errmsg = e->errmsg;
    s->fd_of = env_fd_of;
    s->arg = e;
}

static int src_pread(const struct seg_src *src,
                     uint64_t pos,
                     void *buf,
                     size_t n)
{
    uint8_t *out = buf;
    if (pos < src->segs[0].start) {
        return idx__failm(src->errmsg, TERN_EINVAL, __LINE__,
                          "log read at %llu: the log starts at %llu "
                          "(retention deleted what was before)",
                          (unsigned long long)pos,
                          (unsigned long long)src->segs[0].start);
    }
    if (pos > src->log_end || n > src->log_end - pos) {
        return idx__failm(src->errmsg, TERN_EINVAL, __LINE__,
                          "log read [%llu,+%zu) beyond end %llu",
                          (unsigned long long)pos, n,
                          (unsigned long long)src->log_end);
    }
    size_t i = seg_find_in(src->segs, src->n_segs, pos);
    while (n > 0) {
        int fd = -1;
        const struct idx__seg *s = &src->segs[i];
        uint64_t in_seg = s->start + s->size - pos;
        if (pos < s->start || in_seg == 0) {
            i++;
            if (i >= src->n_segs) {
                return IDX__CORRUPTM(src->errmsg,
                                     "log segment table hole at %llu",
                                     (unsigned long long)pos);
            }
            continue;
        }
        int rc = src->fd_of(src->arg, i, &fd);
        if (rc != 0) {
            return rc;
        }
        size_t want = (size_t)TERN_MIN((uint64_t)n, in_seg);
        ssize_t got =
            pread(fd, out, want, (off_t)(IDX__SEG_HDR_SIZE + (pos - s->start)));
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return idx__failm(src->errmsg, -errno, __LINE__, "log read: %s",
                              strerror(errno));
        }
        if (got == 0) {
            return IDX__CORRUPTM(src->errmsg,
                                 "log segment %llu shorter than expected",
                                 (unsigned long long)s->start);
        }
        out += got;
        pos += (uint64_t)got;
        n -= (size_t)got;
    }
    return 0;
}

int idx__log_pread(struct idx_env *e, uint64_t pos, void *buf, size_t n)
{
    struct seg_src src;
    env_src(e, &src);
    return src_pread(&src, pos, buf, n);
}

/* Start the kernel writing appended bytes back once IDX__LOG_WRITEBACK_BYTES
 * have accumulated since the last start, without waiting for them
 * (sync_file_range SYNC_FILE_RANGE_WRITE), as RocksDB's bytes_per_sync and
 * PostgreSQL's backend_flush_after do: the fdatasync of a snapshot
 * (idx_sync, on the loop thread) then finds little left to write, instead
 * of everything since the last one. The range ends on a page boundary, so
 * the next append never writes into a page under writeback (which stable-
 * page devices make wait); a segment left by a roll gets its tail. Best
 * effort: durability is still idx_sync's, and a write error here still
 * reaches its fdatasync. e->wb_pos: the position writeback was started up
 * to (the log end at open; lowered by a truncation). */
static void writeback_range(int fd, uint64_t from_off, uint64_t to_off)
{
    if (to_off > from_off) {
        (void)sync_file_range(fd, (off_t)from_off, (off_t)(to_off - from_off),
                              SYNC_FILE_RANGE_WRITE);
    }
}

static void log_writeback(struct idx_env *e)
{
    const struct idx__seg *s = &e->segs[e->n_segs - 1];
    if (e->wb_pos < s->start) {
        /* The segment before rolled: the rest of it, whole. */
        const struct idx__seg *p = e->n_segs > 1 ? s - 1 : NULL;
        if (p != NULL && p->fd >= 0 && e->wb_pos >= p->start) {
            writeback_range(p->fd, IDX__SEG_HDR_SIZE + (e->wb_pos - p->start),
                            IDX__SEG_HDR_SIZE + p->size);
        }
        e->wb_pos = s->start;
    }
    uint64_t from = IDX__SEG_HDR_SIZE + (e->wb_pos - s->start);
    uint64_t to = (IDX__SEG_HDR_SIZE + s->size) & ~(LOG__PAGE - 1);
    if (to >= from + IDX__LOG_WRITEBACK_BYTES && s->fd >= 0) {
        writeback_range(s->fd, from, to);
        e->wb_pos = s->start + (to - IDX__SEG_HDR_SIZE);
    }
}

/* Write all of buf at file offset off of the active segment; on failure
 * truncate the segment back to its old size. */
static int active_write(struct idx_env *e,
                        const struct iovec *iov,
                        int iovcnt,
                        size_t total)
{
    struct idx__seg *s = &e->segs[e->n_segs - 1];
    int fd = -1;
    int rc = seg_fd(e, e->n_segs - 1, &fd);
    if (rc != 0) {
        return rc;
    }
    off_t base = (off_t)(IDX__SEG_HDR_SIZE + s->size);
    size_t done = 0;
    struct iovec v[4];
    TERN_ASSERT(iovcnt <= 4);
    while (done < total) {
        /* Build the remaining iovec. */
        int k = 0;
        size_t skip = done;
        for (int j = 0; j < iovcnt; j++) {
            if (skip >= iov[j].iov_len) {
                skip -= iov[j].iov_len;
                continue;
            }
            v[k].iov_base = (uint8_t *)iov[j].iov_base + skip;
            v[k].iov_len = iov[j].iov_len - skip;
            skip = 0;
            k++;
        }
        ssize_t w = pwritev(fd, v, k, base + (off_t)done);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            int err = w < 0 ? errno : ENOSPC;
            /* Roll back the partial write: the log must end on a record
             * boundary while the env is open. */
            log_changed(e);
            if (ftruncate(fd, base) != 0) {
                return idx__fail(e, -errno, __LINE__,
                                 "commit log rollback failed: %s",
                                 strerror(errno));
            }
            return io_err(e, err, "write");
        }
        done += (size_t)w;
    }
    s->size += total;
    s->dirty = 1;
    e->log_end += total;
    log_writeback(e);
    return 0;
}

int idx__log_append_record(struct idx_env *e,
                           uint16_t version,
                           uint64_t index,
                           const void *payload,
                           uint32_t len,
                           uint64_t *pos,
                           uint32_t *checksum)
{
    uint8_t h[IDX__REC_HDR_SIZE];
    struct iovec iov[2];
    int rc;
    if (len > IDX__RECORD_MAX_PAYLOAD) {
        return idx__fail(e, TERN_ETOOBIG, __LINE__,
                         "entry of %u bytes exceeds the record limit", len);
    }
    rc = active_ready(e);
    if (rc != 0) {
        return rc;
    }
    idx__record_header_encode(h, version, index, payload, len);
    iov[0].iov_base = h;
    iov[0].iov_len = sizeof h;
    iov[1].iov_base = (void *)(uintptr_t)payload;
    iov[1].iov_len = len;
    *pos = e->log_end;
    rc = active_write(e, iov, 2, sizeof h + len);
    if (rc != 0) {
        return rc;
    }
    *checksum = tern_get_u32(h + 20);
    e->xxh3_pos = *pos; /* idx_xxh3_in_use need not read it back */
    e->xxh3_gen = e->gen;
    e->xxh3_version = version;
    return 0;
}

int idx__log_write_raw(struct idx_env *e,
                       uint64_t pos,
                       const void *buf,
                       size_t n)
{
    const uint8_t *p = buf;
    if (pos != e->log_end) {
        return idx__fail(
            e, TERN_EINVAL, __LINE__, "bulk write at %llu, log ends at %llu",
            (unsigned long long)pos, (unsigned long long)e->log_end);
    }
    while (n > 0) {
        int rc = active_ready(e);
        if (rc != 0) {
            return rc;
        }
        struct idx__seg *s = &e->segs[e->n_segs - 1];
        size_t chunk =
            (size_t)TERN_MIN((uint64_t)n, e->segment_bytes - s->size);
        struct iovec iov = {.iov_base = (void *)(uintptr_t)p, .iov_len = chunk};
        rc = active_write(e, &iov, 1, chunk);
        if (rc != 0) {
            return rc;
        }
        p += chunk;
        n -= chunk;
    }
    return 0;
}

int idx__log_drop_head(struct idx_env *e, uint64_t pos)
{
    char path[4096];
    size_t drop = 0;
    /* Whole segments ending at or before pos; never the active one. */
    while (drop + 1 < e->n_segs &&
           e->segs[drop].start + e->segs[drop].size <= pos) {
        struct idx__seg *sg = &e->segs[drop];
        log_changed(e);
        if (sg->fd >= 0) {
            close(sg->fd);
            e->open_fds--;
        }
        seg_path(e, sg->start, path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT) {
            int err = errno;
            memmove(e->segs, e->segs + drop, (e->n_segs - drop) * sizeof *sg);
            e->n_segs -= drop;
            return io_err(e, err, "delete segment");
        }
        drop++;
    }
    if (drop > 0) {
        memmove(e->segs, e->segs + drop, (e->n_segs - drop) * sizeof *e->segs);
        e->n_segs -= drop;
        e->dir_dirty = 1;
    }
    return 0;
}

int idx__log_reset(struct idx_env *e, uint64_t pos)
{
    uint64_t lost = 0;
    drop_segs_from(e, 0, &lost);
    e->log_end = pos;
    e->wb_pos = pos;
    return seg_create(e);
}

bool idx_xxh3_in_use(struct idx_env *e)
{
    uint8_t h[IDX__REC_HDR_SIZE];
    uint64_t pos = e->st.last_rec_pos;
    if (e->failed != 0 || e->n_segs == 0) {
        return false;
    }
    if (e->st.last_applied == 0) {
        /* A new cluster, if this build made the directory: the empty
         * version 1 segment of an earlier release's (a cluster that never
         * committed a command entry, now being upgraded) says not. */
        return e->segs[0].version == IDX__SEG_VERSION;
    }
    if (pos != e->xxh3_pos || e->gen != e->xxh3_gen || e->xxh3_version == 0) {
        /* The record may be gone (a log rebased past it): not switched,
         * as on every node whose log lacks it. */
        e->xxh3_pos = pos;
        e->xxh3_gen = e->gen;
        e->xxh3_version = -1;
        if (pos >= e->segs[0].start && pos <= e->log_end &&
            e->log_end - pos >= sizeof h) {
            char keep[TERN_ERRMSG_SIZE];
            memcpy(keep, e->errmsg, sizeof keep);
            if (idx__log_pread(e, pos, h, sizeof h) == 0) {
                e->xxh3_version = tern_get_u16(h + 4);
            }
            memcpy(e->errmsg, keep, sizeof keep);
        }
    }
    return e->xxh3_version == IDX__REC_VERSION_XXH3;
}

uint64_t idx__log_first(const struct idx_env *e)
{
    return e->segs[0].start;
}

bool idx__log_in_v1_segment(const struct idx_env *e, uint64_t pos)
{
    return e->n_segs > 0 && pos < e->log_end &&
           e->segs[seg_find(e, pos)].version == 1;
}

uint64_t idx__log_disk_bytes(const struct idx_env *e)
{
    uint64_t n = 0;
    for (size_t i = 0; i < e->n_segs; i++) {
        n += IDX__SEG_HDR_SIZE + e->segs[i].size;
    }
    return n;
}

int idx__log_truncate(struct idx_env *e, uint64_t pos)
{
    uint64_t lost = 0;
    int fd = -1;
    TERN_INVARIANT(pos <= e->log_end);
    size_t i = seg_find(e, pos);
    /* Segments entirely after pos go away (the first one always stays). */
    if (i + 1 < e->n_segs) {
        drop_segs_from(e, i + 1, &lost);
    }
    struct idx__seg *s = &e->segs[i];
    int rc = seg_fd(e, i, &fd);
    if (rc != 0) {
        return rc;
    }
    if (pos < s->start + s->size) {
        log_changed(e);
    }
    if (ftruncate(fd, (off_t)(IDX__SEG_HDR_SIZE + (pos - s->start))) != 0 ||
        fsync(fd) != 0) {
        return io_err(e, errno, "truncate");
    }
    s->size = pos - s->start;
    e->log_end = pos;
    e->wb_pos = TERN_MIN(e->wb_pos, pos);
    if (e->dir_dirty) {
        int dfd = open(e->log_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    return 0;
}

void idx__log_locate(const struct idx_env *e,
                     uint64_t pos,
                     char *buf,
                     size_t cap)
{
    const struct idx__seg *s = &e->segs[seg_find(e, pos)];
    (void)snprintf(buf, cap, "log/%020llu.seg offset %llu",
                   (unsigned long long)s->start,
                   (unsigned long long)(IDX__SEG_HDR_SIZE + (pos - s->start)));
}

int idx__log_sync(struct idx_env *e)
{
    for (size_t i = 0; i < e->n_segs; i++) {
        if (e->segs[i].dirty && e->segs[i].fd >= 0) {
            if (fdatasync(e->segs[i].fd) != 0) {
                return io_err(e, errno, "fdatasync");
            }
            e->segs[i].dirty = 0;
        }
    }
    if (e->dir_dirty) {
        int dfd = open(e->log_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
            return io_err(e, errno, "open log dir");
        }
        int rc = fsync(dfd);
        int err = errno;
        close(dfd);
        if (rc != 0) {
            return io_err(e, err, "fsync log dir");
        }
        e->dir_dirty = 0;
    }
    return 0;
}

/* Bytes a sequential reader has the kernel read ahead of it. */
#define LOG__READ_AHEAD ((uint64_t)8 << 20)

/* Ask the kernel to read [from, to) of the log into the page cache in the
 * background (POSIX_FADV_WILLNEED starts the reads and returns). Only a
 * hint: errors are ignored, the reads that follow work without it. */
static void src_will_need(const struct seg_src *src, uint64_t from, uint64_t to)
{
    size_t i = seg_find_in(src->segs, src->n_segs, from);
    while (from < to && i < src->n_segs) {
        const struct idx__seg *s = &src->segs[i];
        int fd = -1;
        if (from >= s->start + s->size) {
            i++;
            continue;
        }
        uint64_t n = TERN_MIN(to, s->start + s->size) - from;
        if (src->fd_of(src->arg, i, &fd) == 0) {
            (void)posix_fadvise(fd,
                                (off_t)(IDX__SEG_HDR_SIZE + (from - s->start)),
                                (off_t)n, POSIX_FADV_WILLNEED);
        }
        from += n;
        i++;
    }
}

/* Keep LOG__READ_AHEAD bytes past end requested from the kernel,
 * renewed when half of it is consumed. [*asked_from, *until): the range
 * asked so far, extended here (asked_from may be NULL). */
static void src_read_ahead(const struct seg_src *src,
                           uint64_t end,
                           uint64_t *asked_from,
                           uint64_t *until)
{
    if (end + LOG__READ_AHEAD / 2 > *until) {
        uint64_t from = TERN_MAX(end, *until);
        uint64_t to = TERN_MIN(end + LOG__READ_AHEAD, src->log_end);
        if (from < to) {
            src_will_need(src, from, to);
            if (asked_from != NULL && *until < end) {
                *asked_from = end; /* not contiguous: a new range */
            }
            *until = to;
        }
    }
}

/* A record read right after the previous one (a consumer streaming a
 * queue, a rebuild) keeps the read-ahead going, so the disk works while
 * the loop thread answers; a read elsewhere (by key, by offset) asks for
 * nothing. */
static void log_read_ahead(struct idx_env *e, uint64_t pos, uint64_t end)
{
    if (pos == e->read_next) {
        struct seg_src src;
        env_src(e, &src);
        src_read_ahead(&src, end, NULL, &e->read_ahead_until);
    }
    e->read_next = end;
}

/* Read the record at pos (ending at or before limit) into *buf (capacity
 * *cap, grown) and check it: header, bound, checksum. */
static int src_read_record(const struct seg_src *src,
                           uint8_t **buf,
                           size_t *cap,
                           uint64_t pos,
                           uint64_t limit,
                           struct idx__record *rec)
{
    int rc;
    if (limit > src->log_end) {
        limit = src->log_end;
    }
    if (pos > limit || limit - pos < IDX__REC_HDR_SIZE) {
        return idx__failm(src->errmsg, TERN_EMALFORMED, __LINE__,
                          "short record at %llu", (unsigned long long)pos);
    }
    rc = idx__buf_reserve(buf, cap, IDX__REC_HDR_SIZE, src->errmsg);
    if (rc != 0) {
        return rc;
    }
    rc = src_pread(src, pos, *buf, IDX__REC_HDR_SIZE);
    if (rc != 0) {
        return rc;
    }
    if (idx__record_header_decode(*buf, rec) != 0) {
        return idx__failm(src->errmsg, TERN_EMALFORMED, __LINE__,
                          "bad record header at %llu", (unsigned long long)pos);
    }
    if (limit - pos - IDX__REC_HDR_SIZE < rec->payload_len) {
        return idx__failm(src->errmsg, TERN_EMALFORMED, __LINE__,
                          "record at %llu runs past the log end",
                          (unsigned long long)pos);
    }
    rc = idx__buf_reserve(
        buf, cap, IDX__REC_HDR_SIZE + (size_t)rec->payload_len, src->errmsg);
    if (rc != 0) {
        return rc;
    }
    rc = src_pread(src, pos + IDX__REC_HDR_SIZE, *buf + IDX__REC_HDR_SIZE,
                   rec->payload_len);
    if (rc != 0) {
        return rc;
    }
    if (idx__record_checksum(*buf, *buf + IDX__REC_HDR_SIZE,
                             rec->payload_len) != rec->checksum) {
        return IDX__CORRUPTM(src->errmsg, "record checksum mismatch at %llu",
                             (unsigned long long)pos);
    }
    rec->payload = *buf + IDX__REC_HDR_SIZE;
    return 0;
}

int idx__log_read_record(struct idx_env *e,
                         uint64_t pos,
                         uint64_t limit,
                         struct idx__record *rec)
{
    struct seg_src src;
    env_src(e, &src);
    int rc = src_read_record(&src, &e->rbuf, &e->rbuf_cap, pos, limit, rec);
    if (rc == 0) {
        log_read_ahead(e, pos, pos + IDX__REC_HDR_SIZE + rec->payload_len);
    }
    return rc;
}

/* ---- Log views (idx_reader) ---------------------------------------------- */

static int view_fd_of(void *arg, size_t i, int *fd)
{
    struct idx__logview *v = arg;
    if (v->segs[i].fd < 0) {
        char path[4096];
        if (v->open_fds >= IDX_READER_MAX_FDS) {
            /* Reads go forward: the segments behind are done with. */
            for (size_t k = 0; k < v->n_segs; k++) {
                if (v->segs[k].fd >= 0) {
                    close(v->segs[k].fd);
                    v->segs[k].fd = -1;
                }
            }
            v->open_fds = 0;
        }
        seg_path_in(v->log_dir, v->segs[i].start, path, sizeof path);
        int f = open(path, O_RDONLY | O_CLOEXEC);
        if (f < 0) {
            return idx__failm(v->errmsg, -errno, __LINE__, "open %s: %s", path,
                              strerror(errno));
        }
        (void)posix_fadvise(f, 0, 0, POSIX_FADV_SEQUENTIAL);
        v->segs[i].fd = f;
        v->open_fds++;
    }
    *fd = v->segs[i].fd;
    return 0;
}

static void view_src(struct idx__logview *v, struct seg_src *s)
{
    s->segs = v->segs;
    s->n_segs = v->n_segs;
    s->log_end = v->log_end;
    s->errmsg = v->errmsg;
    s->fd_of = view_fd_of;
    s->arg = v;
}

int idx__logview_init(struct idx__logview *v,
                      const struct idx_env *e,
                      uint64_t from,
                      char *errmsg)
{
    size_t i = seg_find(e, from);
    size_t n = TERN_MIN(e->n_segs - i, e->view_max_segs);
    memset(v, 0, sizeof *v);
    v->errmsg = errmsg;
    v->rbuf_pos = UINT64_MAX;
    v->segs = tern_malloc(n * sizeof *v->segs);
    v->log_dir = tern_strdup(e->log_dir);
    if (v->segs == NULL || v->log_dir == NULL) {
        tern_free(v->segs);
        tern_free(v->log_dir);
        v->segs = NULL;
        v->log_dir = NULL;
        return idx__failm(errmsg, -ENOMEM, __LINE__, "log view: %s",
                          strerror(ENOMEM));
    }
    for (size_t k = 0; k < n; k++) {
        v->segs[k].start = e->segs[i + k].start;
        v->segs[k].size = e->segs[i + k].size;
        v->segs[k].fd = -1;
        v->segs[k].dirty = 0;
        v->segs[k].version = e->segs[i + k].version;
    }
    v->n_segs = n;
    v->capped = i + n < e->n_segs;
    v->log_end = v->segs[n - 1].start + v->segs[n - 1].size;
    if (from >= e->view_ahead_from && from < e->view_ahead_until &&
        from + LOG__READ_AHEAD >= e->view_ahead_until) {
        /* The reader before this one just asked for what follows from. */
        v->ahead_from = e->view_ahead_from;
        v->ahead_until = e->view_ahead_until;
    }
    return 0;
}

int idx__logview_read_record(struct idx__logview *v,
                             uint64_t pos,
                             struct idx__record *rec)
{
    struct seg_src src;
    view_src(v, &src);
    if (pos == v->rbuf_pos && idx__record_header_decode(v->rbuf, rec) == 0) {
        /* Read and checked already (by this view or the reader before
         * it, in this generation of the log). */
        rec->payload = v->rbuf + IDX__REC_HDR_SIZE;
        src_read_ahead(&src, pos + IDX__REC_HDR_SIZE + rec->payload_len,
                       &v->ahead_from, &v->ahead_until);
        return 0;
    }
    v->rbuf_pos = UINT64_MAX;
    int rc =
        src_read_record(&src, &v->rbuf, &v->rbuf_cap, pos, v->log_end, rec);
    if (rc == 0) {
        v->rbuf_pos = pos;
        src_read_ahead(&src, pos + IDX__REC_HDR_SIZE + rec->payload_len,
                       &v->ahead_from, &v->ahead_until);
    } else if (v->capped) {
        rc = -EAGAIN; /* maybe past the copied segments: the env reads it */
    }
    return rc;
}

void idx__logview_close(struct idx__logview *v)
{
    for (size_t i = 0; i < v->n_segs; i++) {
        if (v->segs[i].fd >= 0) {
            close(v->segs[i].fd);
        }
    }
    tern_free(v->segs);
    tern_free(v->log_dir);
    tern_free(v->rbuf);
    memset(v, 0, sizeof *v);
}
