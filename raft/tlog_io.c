/*
 * raft/tlog_io.c: the inner raft_io over tern's own log store (tlog/,
 * docs/LOGSTORE.md), chosen by `[raft] log_store = tern` in place of
 * raft_uv; io.c wraps it as it wraps raft_uv.
 *
 * What it keeps where (DATA_DIR/raft):
 *   - entries: tlog's segments (seg-N);
 *   - term and vote: meta.c's record (tern-meta1/2), the only copy (io.c's
 *     comparison with raft_uv's metadata is off: meta_on false);
 *   - snapshots: snap-N files (N the snapshot's index, format below), the
 *     newest two kept.
 *
 * The contract (libraft 0.15, as raft_uv keeps it): load once; bootstrap
 * and set_term / set_vote durable before they return; appends complete in
 * submission order, never inside append, 0 = durable (tlog); truncate
 * after the appends before it; snapshot_put with trailing > 0 does not
 * hold appends, raft forgets the entries below index - trailing + 1 once
 * it is durable; an install (trailing 0) completes after the appends
 * before it, holds the appends after it until its snapshot is durable,
 * and voids the whole log before it; snapshot_get deferred.
 *
 * An install voids every segment that exists when it starts (tlog_reset
 * returns the first seq that stays valid). The snapshot file records that
 * seq (void_below) and is durable before the segments go, so a crash in
 * between loads the snapshot and deletes the void segments at open;
 * every later snapshot carries the value on.
 *
 * Snapshot file snap-%020llu (integers little-endian, encoded here only):
 *
 *   off  size  field
 *   0    8     magic "TERNSNP\0"
 *   8    4     version 1
 *   12   4     header size 64
 *   16   8     index
 *   24   8     term
 *   32   8     configuration index
 *   40   8     void_below: segments with a lower seq are void (0: none)
 *   48   4     configuration length (codec.c's repl_conf_encode)
 *   52   4     data length
 *   56   4     tern_checksum32_xxh3 of the configuration then the data,
 *              seeded with tern_checksum32 of bytes [0,56)
 *   60   4     zeros
 *   64   ...   configuration, then data
 *
 * Written as snap-N.tmp, fdatasynced, renamed, the directory fsynced.
 * Load takes the newest file that checks; a damaged newer one is named
 * in the error (RAFT_CORRUPT) rather than skipped, as a damaged segment.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tlog.h>

#include "repl_codec.h"
#include "repl_int.h"

#define TIO__SNAP_MAGIC  "TERNSNP"
#define TIO__SNAP_HEADER 64u
#define TIO__SNAP_FIELDS 56u
#define TIO__SNAP_MAX    ((uint64_t)1 << 32)
#define TIO__SNAP_KEEP   2

struct tio_snap
{
    uint64_t index, term, conf_index, void_below;
    uint8_t *conf; /* repl_conf_encode's bytes */
    uint32_t conf_len;
    uint8_t *data;
    uint32_t data_len;
};

struct held
{
    struct tern_list link;
    struct raft_io_append *req;
    raft_io_append_cb cb;
    struct raft_entry *entries; /* a copy (one block) */
    unsigned n;
};

struct tio;

struct put_op
{
    uv_work_t work;
    struct tio *t;
    struct raft_io_snapshot_put *req;
    raft_io_snapshot_put_cb cb;
    unsigned trailing;
    uint8_t *file; /* the encoded file */
    size_t len;
    uint64_t index;
    int status;
};

struct get_op
{
    uv_work_t work;
    struct tio *t;
    struct raft_io_snapshot_get *req;
    raft_io_snapshot_get_cb cb;
    struct raft_snapshot *snap;
    int status;
};

struct tio
{
    struct raft_io io; /* the inner io io.c wraps */
    uv_loop_t *loop;
    char *dir;
    int dir_fd;
    struct tlog_config cfg;
    struct tlog_store *store;
    uv_timer_t timer;
    bool timer_on;
    raft_io_tick_cb tick;
    uint64_t term, vote, meta_seq;
    uint64_t void_below;
    uint64_t snap_index;  /* newest durable snapshot */
    unsigned outstanding; /* appends handed to the store, not completed */
    bool installing;      /* an install's snapshot is not durable yet */
    int failed;           /* RAFT_*: no more appends (a failed install) */
    struct put_op *install_done; /* written, waiting for outstanding 0 */
    struct tern_list held;       /* appends during an install */
    unsigned workers;            /* put/get on the pool */
    bool closing;
    bool store_closed;
    raft_io_close_cb close_cb;
    unsigned torn; /* torn tails the last load cut */
};

static struct tio *tio_of(struct raft_io *io)
{
    return (struct tio *)io;
}

static void set_errmsg(struct tio *t, const char *em)
{
    (void)snprintf(t->io.errmsg, sizeof t->io.errmsg, "%s", em);
}

static int raft_err(int rv)
{
    switch (rv) {
    case 0:
        return 0;
    case -ENOMEM:
        return RAFT_NOMEM;
    case -ENOSPC:
        return RAFT_NOSPACE;
    case -ECANCELED:
    case TERN_ESHUTDOWN:
        return RAFT_CANCELED;
    case TERN_ECORRUPT:
        return RAFT_CORRUPT;
    case TERN_EINVAL:
        return RAFT_INVALID;
    case TERN_ETOOBIG:
        return RAFT_TOOBIG;
    default:
        return RAFT_IOERR;
    }
}

static uint8_t entry_type(unsigned short t)
{
    return t == RAFT_CHANGE    ? TLOG_REC_CHANGE
           : t == RAFT_BARRIER ? TLOG_REC_BARRIER
                               : TLOG_REC_COMMAND;
}

static unsigned short raft_type(uint8_t t)
{
    return t == TLOG_REC_CHANGE    ? RAFT_CHANGE
           : t == TLOG_REC_BARRIER ? RAFT_BARRIER
                                   : RAFT_COMMAND;
}

/* ---- snapshot files ------------------------------------------------------ */

static void snap_name(char *out, size_t cap, uint64_t index, bool tmp)
{
    (void)snprintf(out, cap, "snap-%020" PRIu64 "%s", index, tmp ? ".tmp" : "");
}

/* Encode a snapshot file; NULL on out of memory. */
static uint8_t *snap_encode(const struct raft_snapshot *s,
                            uint64_t void_below,
                            size_t *len)
{
    struct tern_wbuf conf;
    size_t data_len = 0, at;
    uint8_t *f;
    tern_wbuf_init(&conf);
    if (repl_conf_encode(&s->configuration, &conf) != 0 || conf.err != 0) {
        tern_wbuf_free(&conf);
        return NULL;
    }
    for (unsigned i = 0; i < s->n_bufs; i++) {
        data_len += s->bufs[i].len;
    }
    if (data_len > UINT32_MAX || conf.len > UINT32_MAX) {
        tern_wbuf_free(&conf);
        return NULL;
    }
    *len = TIO__SNAP_HEADER + conf.len + data_len;
    f = tern_calloc(1, *len);
    if (f == NULL) {
        tern_wbuf_free(&conf);
        return NULL;
    }
    memcpy(f, TIO__SNAP_MAGIC, 8);
    tern_put_u32(f + 8, 1);
    tern_put_u32(f + 12, TIO__SNAP_HEADER);
    tern_put_u64(f + 16, s->index);
    tern_put_u64(f + 24, s->term);
    tern_put_u64(f + 32, s->configuration_index);
    tern_put_u64(f + 40, void_below);
    tern_put_u32(f + 48, (uint32_t)conf.len);
    tern_put_u32(f + 52, (uint32_t)data_len);
    memcpy(f + TIO__SNAP_HEADER, conf.base, conf.len);
    at = TIO__SNAP_HEADER + conf.len;
    for (unsigned i = 0; i < s->n_bufs; i++) {
        memcpy(f + at, s->bufs[i].base, s->bufs[i].len);
        at += s->bufs[i].len;
    }
    tern_put_u32(f + 56, tern_checksum32_xxh3(
                             f + TIO__SNAP_HEADER, *len - TIO__SNAP_HEADER,
                             tern_checksum32(f, TIO__SNAP_FIELDS)));
    tern_wbuf_free(&conf);
    return f;
}

/* Decode a snapshot file image into *out (pointers into img). */
static int snap_decode(const uint8_t *img, size_t len, struct tio_snap *out)
{
    uint32_t conf_len, data_len;
    if (len < TIO__SNAP_HEADER || memcmp(img, TIO__SNAP_MAGIC, 8) != 0 ||
        tern_get_u32(img + 12) != TIO__SNAP_HEADER) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u32(img + 8) != 1) {
        return TERN_EVERSION;
    }
    conf_len = tern_get_u32(img + 48);
    data_len = tern_get_u32(img + 52);
    if ((uint64_t)TIO__SNAP_HEADER + conf_len + data_len != len ||
        tern_get_u32(img + 56) !=
            tern_checksum32_xxh3(img + TIO__SNAP_HEADER, len - TIO__SNAP_HEADER,
                                 tern_checksum32(img, TIO__SNAP_FIELDS))) {
        return TERN_ECORRUPT;
    }
    out->index = tern_get_u64(img + 16);
    out->term = tern_get_u64(img + 24);
    out->conf_index = tern_get_u64(img + 32);
    out->void_below = tern_get_u64(img + 40);
    out->conf = (uint8_t *)img + TIO__SNAP_HEADER;
    out->conf_len = conf_len;
    out->data = (uint8_t *)img + TIO__SNAP_HEADER + conf_len;
    out->data_len = data_len;
    return out->index == 0 ? TERN_ECORRUPT : 0;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

/* The indexes of snap-N files, newest first (at most cap); with
 * clean_tmp (at load only: a put may be writing one) leftover snap-N.tmp
 * files are deleted. A descriptor of its own: listings run on the loop
 * and on the pool at once. */
static size_t list_snaps(int dir_fd, uint64_t *out, size_t cap, bool clean_tmp)
{
    int fd2 = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
    struct dirent *e;
    uint64_t *all = NULL;
    size_t n = 0, acap = 0;
    if (d == NULL) {
        if (fd2 >= 0) {
            (void)close(fd2);
        }
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        unsigned long long idx;
        int end = 0;
        if (sscanf(e->d_name, "snap-%20llu%n", &idx, &end) != 1) {
            continue;
        }
        if (strcmp(e->d_name + end, ".tmp") == 0) {
            if (clean_tmp) {
                (void)unlinkat(dir_fd, e->d_name, 0);
            }
            continue;
        }
        if (e->d_name[end] != '\0' || end != 25) {
            continue;
        }
        if (n == acap) {
            size_t c = acap ? acap * 2 : 16;
            uint64_t *p = tern_realloc(all, c * sizeof *p);
            if (p == NULL) {
                break;
            }
            all = p;
            acap = c;
        }
        all[n++] = idx;
    }
    (void)closedir(d);
    if (n > 1) {
        qsort(all, n, sizeof *all, cmp_desc);
    }
    if (n > cap) {
        n = cap;
    }
    if (n > 0) {
        memcpy(out, all, n * sizeof *out);
    }
    tern_free(all);
    return n;
}

/* Write a snapshot file durably (on the pool). */
static int snap_write(int dir_fd, uint64_t index, const uint8_t *f, size_t len)
{
    char tmp[64], name[64];
    size_t done = 0;
    int fd, rv = 0;
    snap_name(tmp, sizeof tmp, index, true);
    snap_name(name, sizeof name, index, false);
    fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -errno;
    }
    while (done < len) {
        ssize_t w = write(fd, f + done, len - done);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            rv = w < 0 ? -errno : -EIO;
            break;
        }
        done += (size_t)w;
    }
    if (rv == 0 && fdatasync(fd) != 0) {
        rv = -errno;
    }
    (void)close(fd);
    if (rv == 0 && renameat(dir_fd, tmp, dir_fd, name) != 0) {
        rv = -errno;
    }
    if (rv == 0 && fsync(dir_fd) != 0) {
        rv = -errno;
    }
    if (rv != 0) {
        (void)unlinkat(dir_fd, tmp, 0);
        return rv;
    }
    /* Older ones beyond the newest TIO__SNAP_KEEP go. */
    {
        uint64_t idx[TIO__SNAP_KEEP + 8];
        size_t n = list_snaps(dir_fd, idx, TIO__SNAP_KEEP + 8, false);
        for (size_t i = TIO__SNAP_KEEP; i < n; i++) {
            snap_name(name, sizeof name, idx[i], false);
            (void)unlinkat(dir_fd, name, 0);
        }
    }
    return 0;
}

/* Free a raft_snapshot of snap_load (NULL: nothing). */
static void snap_free(struct raft_snapshot *s)
{
    if (s == NULL) {
        return;
    }
    for (unsigned i = 0; s->bufs != NULL && i < s->n_bufs; i++) {
        raft_free(s->bufs[i].base);
    }
    raft_free(s->bufs);
    raft_configuration_close(&s->configuration);
    raft_free(s);
}

/* The newest snapshot file as a raft_snapshot (raft_malloc'd, one
 * buffer), or NULL with 0 when there is none. */
static int snap_load(int dir_fd,
                     const char *dir,
                     bool clean_tmp,
                     struct raft_snapshot **out,
                     uint64_t *void_below,
                     char *errmsg)
{
    uint64_t idx[1];
    char name[64];
    uint8_t *img = NULL;
    size_t len = 0;
    struct tio_snap sn;
    struct tern_cursor cur;
    struct raft_snapshot *s;
    int rv;
    *out = NULL;
    *void_below = 0;
    if (list_snaps(dir_fd, idx, 1, clean_tmp) == 0) {
        return 0;
    }
    snap_name(name, sizeof name, idx[0], false);
    rv = tlog_read_file(dir_fd, name, TIO__SNAP_MAX, &img, &len);
    if (rv == 0) {
        rv = snap_decode(img, len, &sn);
    }
    if (rv == 0 && sn.index != idx[0]) {
        rv = TERN_ECORRUPT;
    }
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "tlog_io: snapshot %s/%s: %s", dir, name,
                           tern_strerror(rv));
        tern_free(img);
        return rv;
    }
    s = raft_calloc(1, sizeof *s);
    if (s == NULL) {
        tern_free(img);
        return -ENOMEM;
    }
    s->index = sn.index;
    s->term = sn.term;
    s->configuration_index = sn.conf_index;
    raft_configuration_init(&s->configuration);
    tern_cursor_init(&cur, sn.conf, sn.conf_len);
    rv = repl_conf_decode(&cur, &s->configuration);
    s->bufs = raft_malloc(sizeof *s->bufs);
    if (s->bufs != NULL) {
        s->n_bufs = 1;
        s->bufs[0].base = raft_malloc(sn.data_len > 0 ? sn.data_len : 1);
    }
    if (rv != 0 || s->bufs == NULL || s->bufs[0].base == NULL) {
        snap_free(s);
        tern_free(img);
        tern_errmsg_printf(errmsg, "tlog_io: snapshot %s/%s: configuration",
                           dir, name);
        return rv != 0 ? TERN_ECORRUPT : -ENOMEM;
    }
    memcpy(s->bufs[0].base, sn.data, sn.data_len);
    s->bufs[0].len = sn.data_len;
    *void_below = sn.void_below;
    tern_free(img);
    *out = s;
    return 0;
}

/* ---- load, start, term -----------------------------------------------------
 */

static int t_init(struct raft_io *io, raft_id id, const char *address)
{
    (void)io;
    (void)id;
    (void)address;
    return 0;
}

/* Term and vote, durable: meta.c's record written twice (two consecutive
 * seqs, so both of its slots), because here it is the only copy (with
 * raft_uv a flipped bit in the newer slot shows against raft_uv's own
 * metadata). A crash during the first write leaves the previous record
 * in the other slot, of a call that never returned; a flipped bit in
 * either slot later leaves the same record in the other. */
static int meta_write(struct tio *t, uint64_t term, uint64_t vote)
{
    struct repl_meta_rec m = {0};
    char em[TERN_ERRMSG_SIZE] = "";
    int rv = 0;
    m.term = term;
    m.vote = vote;
    for (int k = 1; k <= 2 && rv == 0; k++) {
        m.seq = t->meta_seq + (uint64_t)k;
        rv = repl_meta_write(t->dir, &m, em);
    }
    if (rv != 0) {
        set_errmsg(t, em);
        return rv == -ENOSPC ? RAFT_NOSPACE : RAFT_IOERR;
    }
    t->meta_seq = m.seq;
    t->term = term;
    t->vote = vote;
    return 0;
}

static int t_load(struct raft_io *io,
                  raft_term *term,
                  raft_id *voted_for,
                  struct raft_snapshot **snapshot,
                  raft_index *start_index,
                  struct raft_entry *entries[],
                  size_t *n_entries)
{
    struct tio *t = tio_of(io);
    struct repl_meta_rec m;
    struct tlog_loaded l;
    char em[TERN_ERRMSG_SIZE] = "";
    struct raft_snapshot *snap = NULL;
    struct raft_entry *es = NULL;
    uint8_t *batch = NULL;
    size_t total = 0, at = 0;
    int rv;

    *snapshot = NULL;
    *entries = NULL;
    *n_entries = 0;
    rv = repl_meta_read(t->dir, &m, em);
    if (rv != 0) {
        set_errmsg(t, em);
        return rv == TERN_ECORRUPT || rv == TERN_EVERSION ? RAFT_CORRUPT
                                                          : RAFT_IOERR;
    }
    if (m.present) {
        t->meta_seq = m.seq;
        t->term = m.term;
        t->vote = m.vote;
    }
    rv = snap_load(t->dir_fd, t->dir, true, &snap, &t->void_below, em);
    if (rv != 0) {
        set_errmsg(t, em);
        return raft_err(rv);
    }
    t->cfg.void_below = t->void_below;
    /* The log may go on from the snapshot after a gap: the reset below,
     * whose void segments a crash left (it records no void_below). */
    t->cfg.restart_index = snap != NULL ? snap->index + 1 : 0;
    rv = tlog_open(t->loop, &t->cfg, &t->store, &l, em);
    if (rv != 0) {
        set_errmsg(t, em);
        goto err_snap;
    }
    t->torn = l.torn;
    if (snap != NULL) {
        t->snap_index = snap->index;
        if (l.n > 0 && l.first_index > snap->index + 1) {
            tern_errmsg_printf(em,
                               "tlog_io: the log starts at %" PRIu64
                               ", after the snapshot at %" PRIu64,
                               l.first_index, (uint64_t)snap->index);
            set_errmsg(t, em);
            rv = TERN_ECORRUPT;
            goto err_loaded;
        }
        if (l.n > 0 && l.next_index <= snap->index) {
            /* Entries all older than the snapshot: not raft's log. */
            tlog_loaded_free(&l);
            (void)tlog_reset(t->store, snap->index + 1, 0);
            tlog_forget(t->store, snap->index + 1);
        }
    } else if (l.n > 0 && l.first_index != 1) {
        tern_errmsg_printf(
            em, "tlog_io: the log starts at %" PRIu64 " with no snapshot",
            l.first_index);
        set_errmsg(t, em);
        rv = TERN_ECORRUPT;
        goto err_loaded;
    }
    if (l.n == 0 && tlog_next_index(t->store) == 0) {
        /* Nothing kept: after the snapshot, or from index 1 (a node that
         * joins gets its log from the leader). */
        (void)tlog_start_at(t->store, snap != NULL ? snap->index + 1 : 1, 0);
    }
    if (!m.present && l.n > 0) {
        /* Entries without a term record: a crash between the bootstrap's
         * entry and its term. The entries' term, no vote (as learning a
         * term from a message). */
        rv = meta_write(t, l.entries[l.n - 1].term, 0);
        if (rv != 0) {
            goto err_loaded_raft;
        }
    }
    for (size_t i = 0; i < l.n; i++) {
        total += (l.entries[i].len + 7) & ~(size_t)7;
    }
    if (l.n > 0) {
        es = raft_calloc(l.n, sizeof *es);
        batch = raft_malloc(total > 0 ? total : 8);
        if (es == NULL || batch == NULL) {
            raft_free(es);
            raft_free(batch);
            rv = -ENOMEM;
            goto err_loaded;
        }
    }
    for (size_t i = 0; i < l.n; i++) {
        es[i].term = l.entries[i].term;
        es[i].type = raft_type(l.entries[i].type);
        es[i].buf.base = batch + at;
        es[i].buf.len = l.entries[i].len;
        es[i].batch = batch;
        if (l.entries[i].len > 0) {
            memcpy(batch + at, l.entries[i].payload, l.entries[i].len);
        }
        at += (l.entries[i].len + 7) & ~(size_t)7;
    }
    *start_index = l.n > 0 ? l.first_index : snap != NULL ? snap->index + 1 : 1;
    *n_entries = l.n;
    *entries = es;
    *snapshot = snap;
    *term = t->term;
    *voted_for = t->vote;
    tlog_loaded_free(&l);
    return 0;

err_loaded:
    rv = raft_err(rv);
err_loaded_raft:
    tlog_loaded_free(&l);
    snap_free(snap);
    return rv;
err_snap:
    snap_free(snap);
    return raft_err(rv);
}

static void timer_cb(uv_timer_t *h)
{
    struct tio *t = h->data;
    if (t->tick != NULL && !t->closing) {
        t->tick(&t->io);
    }
}

static int t_start(struct raft_io *io,
                   unsigned msecs,
                   raft_io_tick_cb tick,
                   raft_io_recv_cb recv)
{
    struct tio *t = tio_of(io);
    (void)recv; /* io.c receives through the xport */
    t->tick = tick;
    uv_timer_init(t->loop, &t->timer);
    t->timer.data = t;
    t->timer_on = true;
    uv_timer_start(&t->timer, timer_cb, msecs, msecs);
    return 0;
}

static int t_bootstrap(struct raft_io *io, const struct raft_configuration *c)
{
    struct tio *t = tio_of(io);
    struct repl_meta_rec m;
    struct raft_buffer buf;
    struct tlog_entry e;
    uint64_t snap[1];
    char em[TERN_ERRMSG_SIZE] = "";
    int rv;
    /* libraft calls it before load: pristine is no term record, no
     * snapshot and no segment (tlog_bootstrap checks the last). */
    rv = repl_meta_read(t->dir, &m, em);
    if (rv != 0 || m.present || t->store != NULL ||
        list_snaps(t->dir_fd, snap, 1, false) > 0) {
        return RAFT_CANTBOOTSTRAP;
    }
    if (raft_configuration_encode(c, &buf) != 0) {
        return RAFT_NOMEM;
    }
    e.type = TLOG_REC_CHANGE;
    e.term = 1;
    e.payload = buf.base;
    e.len = (uint32_t)buf.len;
    rv = tlog_bootstrap(&t->cfg, 1, 0, &e, 1, em);
    raft_free(buf.base);
    if (rv == -EEXIST) {
        return RAFT_CANTBOOTSTRAP;
    }
    if (rv != 0) {
        set_errmsg(t, em);
        return raft_err(rv);
    }
    return meta_write(t, 1, 0);
}

static int t_recover(struct raft_io *io, const struct raft_configuration *c)
{
    (void)c;
    set_errmsg(tio_of(io), "tlog_io: recover is not supported");
    return RAFT_INVALID;
}

static int t_set_term(struct raft_io *io, raft_term term)
{
    return meta_write(tio_of(io), term, 0);
}

static int t_set_vote(struct raft_io *io, raft_id id)
{
    struct tio *t = tio_of(io);
    return meta_write(t, t->term, id);
}

static int t_send(struct raft_io *io,
                  struct raft_io_send *req,
                  const struct raft_message *m,
                  raft_io_send_cb cb)
{
    (void)io;
    (void)req;
    (void)m;
    (void)cb;
    return RAFT_NOCONNECTION; /* io.c sends */
}

/* ---- appends
 * ----------------------------------------------------------------- */

struct app_ctx
{
    struct tio *t;
    struct raft_io_append *req;
    raft_io_append_cb cb;
};

static void maybe_install_done(struct tio *t);
static void release_held(struct tio *t, int status);

static void append_done(void *arg, int status)
{
    struct app_ctx *a = arg;
    struct tio *t = a->t;
    t->outstanding--;
    a->cb(a->req, raft_err(status));
    tern_free(a);
    maybe_install_done(t);
    if (t->closing && t->outstanding == 0 && t->install_done == NULL) {
        release_held(t, RAFT_CANCELED); /* in order, after those before */
    }
}

static int submit(struct tio *t,
                  struct raft_io_append *req,
                  const struct raft_entry entries[],
                  unsigned n,
                  raft_io_append_cb cb)
{
    struct tlog_entry small[16], *es = small;
    struct app_ctx *a = tern_malloc(sizeof *a);
    int rv;
    if (a == NULL) {
        return RAFT_NOMEM;
    }
    if (n > 16) {
        es = tern_malloc(n * sizeof *es);
        if (es == NULL) {
            tern_free(a);
            return RAFT_NOMEM;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        es[i].type = entry_type(entries[i].type);
        es[i].term = entries[i].term;
        es[i].payload = entries[i].buf.base;
        es[i].len = (uint32_t)entries[i].buf.len;
    }
    a->t = t;
    a->req = req;
    a->cb = cb;
    rv = tlog_append(t->store, es, n, append_done, a);
    if (es != small) {
        tern_free(es);
    }
    if (rv != 0) {
        tern_free(a);
        return raft_err(rv);
    }
    t->outstanding++;
    return 0;
}

static int t_append(struct raft_io *io,
                    struct raft_io_append *req,
                    const struct raft_entry entries[],
                    unsigned n,
                    raft_io_append_cb cb)
{
    struct tio *t = tio_of(io);
    struct held *h;
    size_t total = 0;
    uint8_t *p;
    if (t->closing) {
        return RAFT_CANCELED;
    }
    if (t->failed != 0) {
        set_errmsg(t, "tlog_io: an install failed after the log was voided");
        return t->failed;
    }
    for (unsigned i = 0; i < n; i++) {
        if (entries[i].buf.len > TLOG_REC_MAX_PAYLOAD) {
            return RAFT_TOOBIG;
        }
    }
    if (!t->installing) {
        return submit(t, req, entries, n, cb);
    }
    /* Held until the install's snapshot is durable: a copy. */
    for (unsigned i = 0; i < n; i++) {
        total += (entries[i].buf.len + 7) & ~(size_t)7;
    }
    h = tern_calloc(1, sizeof *h);
    p = tern_malloc(n * sizeof(struct raft_entry) + total + 8);
    if (h == NULL || p == NULL) {
        tern_free(h);
        tern_free(p);
        return RAFT_NOMEM;
    }
    h->entries = (struct raft_entry *)p;
    p += n * sizeof(struct raft_entry);
    for (unsigned i = 0; i < n; i++) {
        h->entries[i] = entries[i];
        h->entries[i].buf.base = p;
        if (entries[i].buf.len > 0) {
            memcpy(p, entries[i].buf.base, entries[i].buf.len);
        }
        p += (entries[i].buf.len + 7) & ~(size_t)7;
    }
    h->n = n;
    h->req = req;
    h->cb = cb;
    tern_list_push(&t->held, &h->link);
    return 0;
}

/* Hand the held appends to the store, or fail them (status != 0), in
 * order. */
static void release_held(struct tio *t, int status)
{
    while (!tern_list_empty(&t->held)) {
        struct held *h = TERN_CONTAINER(t->held.next, struct held, link);
        int rv = status;
        tern_list_remove(&h->link);
        if (rv == 0) {
            rv = submit(t, h->req, h->entries, h->n, h->cb);
        }
        if (rv != 0) {
            h->cb(h->req, rv);
        }
        tern_free(h->entries);
        tern_free(h);
    }
}

static int t_truncate(struct raft_io *io, raft_index index)
{
    struct tio *t = tio_of(io);
    int rv;
    if (t->installing || !tern_list_empty(&t->held)) {
        /* raft truncates entries it appended; none can be held (they
         * come after the install's index). */
        return RAFT_INVALID;
    }
    rv = tlog_truncate(t->store, index);
    if (rv != 0) {
        set_errmsg(t, "tlog_io: truncate below the kept entries");
        return raft_err(rv);
    }
    return 0;
}

/* ---- snapshots
 * ---------------------------------------------------------------- */

static void put_work(uv_work_t *w)
{
    struct put_op *p = w->data;
    p->status = snap_write(p->t->dir_fd, p->index, p->file, p->len);
}

static void maybe_closed(struct tio *t);

static void put_finish(struct put_op *p)
{
    struct tio *t = p->t;
    raft_io_snapshot_put_cb cb = p->cb;
    struct raft_io_snapshot_put *req = p->req;
    int status = p->status;
    tern_free(p->file);
    tern_free(p);
    cb(req, raft_err(status));
    maybe_closed(t);
}

static void maybe_install_done(struct tio *t)
{
    struct put_op *p = t->install_done;
    if (p == NULL || t->outstanding > 0) {
        return;
    }
    t->install_done = NULL;
    t->installing = false;
    release_held(t, t->closing       ? RAFT_CANCELED
                    : p->status == 0 ? 0
                                     : RAFT_IOERR);
    put_finish(p);
}

static void put_after(uv_work_t *w, int status)
{
    struct put_op *p = w->data;
    struct tio *t = p->t;
    t->workers--;
    if (status != 0 && p->status == 0) {
        p->status = -ECANCELED;
    }
    if (p->status == 0) {
        if (p->index > t->snap_index) {
            t->snap_index = p->index;
        }
        if (t->store == NULL || t->closing) {
            /* closing: the next open deletes what is void or below */
        } else if (p->trailing == 0) {
            tlog_forget(t->store, p->index + 1); /* the void segments */
        } else if (p->index > p->trailing) {
            tlog_forget(t->store, p->index - p->trailing + 1);
        }
    } else if (p->trailing == 0) {
        /* The log was voided for an install that is not durable: the
         * store must take no more appends (a load would find a gap). The
         * replica fail-stops at the next append. */
        t->failed = RAFT_IOERR;
    }
    if (p->trailing == 0) {
        /* The appends before the install complete first. */
        t->install_done = p;
        maybe_install_done(t);
        return;
    }
    put_finish(p);
}

static int t_snapshot_put(struct raft_io *io,
                          unsigned trailing,
                          struct raft_io_snapshot_put *req,
                          const struct raft_snapshot *s,
                          raft_io_snapshot_put_cb cb)
{
    struct tio *t = tio_of(io);
    struct put_op *p;
    if (t->closing) {
        return RAFT_CANCELED;
    }
    if (t->installing) {
        return RAFT_BUSY;
    }
    if (t->failed != 0) {
        return t->failed;
    }
    p = tern_calloc(1, sizeof *p);
    if (p == NULL) {
        return RAFT_NOMEM;
    }
    /* An install voids the log before it: the file records from which
     * seq segments stay valid. Nothing changes before it can go out. */
    p->file = snap_encode(
        s, trailing == 0 ? tlog_reset_seq(t->store) : t->void_below, &p->len);
    if (p->file == NULL) {
        tern_free(p);
        return RAFT_NOMEM;
    }
    p->t = t;
    p->req = req;
    p->cb = cb;
    p->trailing = trailing;
    p->index = s->index;
    p->work.data = p;
    if (uv_queue_work(t->loop, &p->work, put_work, put_after) != 0) {
        tern_free(p->file);
        tern_free(p);
        return RAFT_IOERR;
    }
    t->workers++;
    if (trailing == 0) {
        /* Appends after it start at index + 1 in new segments, held
         * until the snapshot is durable. */
        t->void_below = tlog_reset(t->store, s->index + 1, 0);
        t->installing = true;
    }
    return 0;
}

static void get_work(uv_work_t *w)
{
    struct get_op *g = w->data;
    uint64_t void_below;
    char em[TERN_ERRMSG_SIZE];
    g->status =
        snap_load(g->t->dir_fd, g->t->dir, false, &g->snap, &void_below, em);
    if (g->status == 0 && g->snap == NULL) {
        g->status = TERN_ECORRUPT; /* raft asks only when it took one */
    }
}

static void get_after(uv_work_t *w, int status)
{
    struct get_op *g = w->data;
    struct tio *t = g->t;
    t->workers--;
    if (status != 0 && g->status == 0) {
        g->status = -ECANCELED;
    }
    g->cb(g->req, g->status == 0 ? g->snap : NULL, raft_err(g->status));
    if (g->status != 0) {
        snap_free(g->snap);
    }
    tern_free(g);
    maybe_closed(t);
}

static int t_snapshot_get(struct raft_io *io,
                          struct raft_io_snapshot_get *req,
                          raft_io_snapshot_get_cb cb)
{
    struct tio *t = tio_of(io);
    struct get_op *g;
    if (t->closing) {
        return RAFT_CANCELED;
    }
    g = tern_calloc(1, sizeof *g);
    if (g == NULL) {
        return RAFT_NOMEM;
    }
    g->t = t;
    g->req = req;
    g->cb = cb;
    g->work.data = g;
    if (uv_queue_work(t->loop, &g->work, get_work, get_after) != 0) {
        tern_free(g);
        return RAFT_IOERR;
    }
    t->workers++;
    return 0;
}

static raft_time t_time(struct raft_io *io)
{
    return uv_now(tio_of(io)->loop);
}

static int t_random(struct raft_io *io, int min, int max)
{
    (void)io;
    return max > min ? min + (int)((unsigned)rand() % (unsigned)(max - min))
                     : min;
}

/* ---- close -----------------------------------------------------------------
 */

static void maybe_closed(struct tio *t)
{
    raft_io_close_cb cb;
    if (!t->closing || t->workers > 0 || !t->store_closed || t->timer_on ||
        t->close_cb == NULL) {
        return;
    }
    cb = t->close_cb;
    t->close_cb = NULL;
    cb(&t->io);
}

static void store_closed(void *arg)
{
    struct tio *t = arg;
    t->store = NULL;
    t->store_closed = true;
    maybe_closed(t);
}

static void timer_closed(uv_handle_t *h)
{
    struct tio *t = h->data;
    t->timer_on = false;
    maybe_closed(t);
}

static void t_close(struct raft_io *io, raft_io_close_cb cb)
{
    struct tio *t = tio_of(io);
    t->closing = true;
    t->close_cb = cb;
    if (t->outstanding == 0 && t->install_done == NULL) {
        release_held(t, RAFT_CANCELED); /* else after the appends before */
    }
    if (t->timer_on) {
        uv_close((uv_handle_t *)&t->timer, timer_closed);
    }
    if (t->store != NULL) {
        tlog_close(t->store, store_closed, t);
    } else {
        t->store_closed = true;
    }
    maybe_closed(t);
}

/* ---- life cycle ---------------------------------------------------------- */

int repl_tlog_io_new(uv_loop_t *loop,
                     const char *dir,
                     uint64_t segment_bytes,
                     uint32_t free_max,
                     struct raft_io **out,
                     char *errmsg)
{
    struct tio *t = tern_calloc(1, sizeof *t);
    if (t == NULL) {
        return -ENOMEM;
    }
    t->loop = loop;
    t->dir = tern_strdup(dir);
    if (t->dir == NULL) {
        tern_free(t);
        return -ENOMEM;
    }
    t->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->dir_fd < 0) {
        int rv = -errno;
        tern_errmsg_printf(errmsg, "tlog_io: open %s: %s", dir,
                           tern_strerror(rv));
        tern_free(t->dir);
        tern_free(t);
        return rv;
    }
    t->cfg.dir = t->dir;
    t->cfg.segment_bytes = segment_bytes;
    t->cfg.free_max = free_max;
    tern_list_init(&t->held);
    t->io.version = 1;
    t->io.init = t_init;
    t->io.close = t_close;
    t->io.load = t_load;
    t->io.start = t_start;
    t->io.bootstrap = t_bootstrap;
    t->io.recover = t_recover;
    t->io.set_term = t_set_term;
    t->io.set_vote = t_set_vote;
    t->io.send = t_send;
    t->io.append = t_append;
    t->io.truncate = t_truncate;
    t->io.snapshot_put = t_snapshot_put;
    t->io.snapshot_get = t_snapshot_get;
    t->io.time = t_time;
    t->io.random = t_random;
    *out = &t->io;
    return 0;
}

void repl_tlog_io_free(struct raft_io *io)
{
    struct tio *t = tio_of(io);
    if (t == NULL) {
        return;
    }
    if (t->dir_fd >= 0) {
        (void)close(t->dir_fd);
    }
    tern_free(t->dir);
    tern_free(t);
}

unsigned repl_tlog_io_torn(struct raft_io *io)
{
    return tio_of(io)->torn;
}

void repl_tlog_io_stats(struct raft_io *io, struct repl_log_stats *out)
{
    struct tio *t = tio_of(io);
    struct tlog_stats st;
    memset(out, 0, sizeof *out);
    if (t->store == NULL) {
        return;
    }
    tlog_get_stats(t->store, &st);
    out->writes = st.writes;
    out->bytes = st.bytes;
    out->segments = st.segments;
    out->prepared = st.prepared;
    out->recycled = st.recycled;
    out->forgotten = st.deleted;
    out->free = st.free;
}
