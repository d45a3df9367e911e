/*
 * Checkpoints: the index's metadata as of a record boundary of the commit
 * log, so that the head of the log can be deleted (retention,
 * docs/MESSAGES.md) while LMDB can still be rebuilt from what is left,
 * and so that a follower too far behind a trimmed leader can start from
 * the leader's checkpoint. This file owns the checkpoint format.
 *
 * WHEN. While applying (idx__index_record), before the first record that
 * starts in a new block of checkpoint_bytes of the log stream: record at
 * position P gets a checkpoint "at P" when P / checkpoint_bytes differs
 * from the previous record's position / checkpoint_bytes. The rule
 * depends only on positions, which are the same on every node, and the
 * metadata is the same on every node for the same applied index, so every
 * node writes byte-identical checkpoints at the same positions (a peer
 * can serve another's checkpoint, raft/bulk.c). Rebuilds (idx_open,
 * idx_restore) write the ones that are missing.
 *
 * A node that could not apply an entry (one of a later release:
 * idx_refused_newer) holds less than its peers from there on, so it
 * writes no checkpoint after that record; restarted on the later release,
 * its rebuild applies the entry and writes the missing ones. An earlier
 * release did write them: one that met an XXH3 entry (0.4.0) recorded it
 * unapplied in a record of version 1, and its checkpoints after it in its
 * version 1 segments lack the entry. The rebuild at idx_open, which finds
 * such a record (env.c), writes those checkpoints again over the old
 * files (the rebuild starts at the oldest checkpoint, which the head
 * trims then reach).
 *
 * WHAT. Every LMDB table whose rows are decided by applying commands
 * alone: meta's state record (last_applied = the raft index of the
 * record before P, log_end = P), queues, groups, producers, users, acls,
 * namespaces, producer_ids, ns_usage, leases (shared groups,
 * docs/WORKQUEUES.md), and (table ids 16, 17) the delayed messages'
 * timers and timer_recs, and (table id 18) the claims of stream groups
 * (claim.c). Not the cleaner's work marks in
 * meta (index/clean.c): a node removes them as its cleaner finishes, so
 * they differ between nodes; and they are not needed after a rebuild
 * from P, where the rows they point at were never re-created (a queue
 * deleted or trimmed before P) or are marked again by the replay. Nor
 * the groups, producers, leases and claims rows of a queue with a "dead"
 * mark:
 * the cleaner deletes them at each node's own pace, and they belong to
 * no queue (build_body). Not msgs: the
 * rows of the messages a queue still retains are re-derived by replaying the
 * records at and after P (retention keeps every retained message at or after
 * the checkpoint the log starts at); rows of trimmed messages are gone for
 * good. Tables that differ between nodes (what a local cleaner has done)
 * are never in a checkpoint.
 *
 * BACKGROUND (idx_options.background_checkpoints, the node's setting).
 * Copying the tables on the loop thread held it 0.2-0.5 s at 1 M queues
 * (docs/ARCHITECTURE.md), on every node at once. So idx_apply, at P,
 * commits the pending write txn (the state before P: LMDB is rebuilt
 * from the log at every open, env.c, so an early commit loses nothing),
 * opens an LMDB read txn on it (the env is MDB_NOTLS, so a worker may use
 * and end it) and leaves a job (idx_ckpt_take) that a worker writes
 * (idx_ckpt_run: the same bytes as an inline write at P, then the
 * directory's fsync). Only idx_ckpt_end puts P in the list e->ckpts,
 * which is all trims, manifests and serving look at; until then the
 * previous checkpoint is the newest, and a trim never passes it, so no
 * log P would need is deleted before P's file is durable. One job at a
 * time: the next position waits for the running job (or writes an
 * unstarted one itself). Skipping instead would leave this node without
 * a checkpoint its peers have, which a peer's manifest may name. A crash
 * or idx_close before the write finished leaves a .tmp (removed by
 * idx__ckpt_scan) and the previous checkpoint; the rebuild at the next
 * open writes P again (it replays from an earlier checkpoint).
 *
 * FILE <dir>/log/%020llu.ckpt (named by P), written to a .tmp file,
 * fsync'ed and renamed; the directory is fsync'ed with the log's next
 * sync. Layout (integers little-endian; encoded/decoded byte by byte, be
 * careful when adapting):
 *
 *   offset size  field
 *   0      8     magic "TERNCKP\0"
 *   8      4     version = 1
 *   12     4     header size = 64
 *   16     8     position P (must match the file name)
 *   24     8     last_applied (raft index of the record before P; 0 = none)
 *   32     8     last_rec_pos (its position)
 *   40     4     last_rec_checksum (its record checksum)
 *   44     4     rows (number of rows in the body)
 *   48     8     body length in bytes
 *   56     4     tern_checksum32 of the body
 *   60     4     tern_checksum32 over bytes [0,60)
 *   64     ...   body: rows, tables in the order of ckpt_tables below and
 *                each table in LMDB key order:
 *                  u8 table id, u16 key length (1..511), u32 value length,
 *                  key, value
 *
 * A checkpoint whose header or body fails its checksum, whose position
 * does not match its name or whose rows are out of order is unusable
 * (env.c then drops the log before it: a peer supplies it again).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "idx_int.h"

#define CKPT__MAGIC   "TERNCKP\0"
#define CKPT__VERSION 1
#define CKPT__ROW_HDR 7
#define CKPT__KEY_MAX 511

/* The tables of a checkpoint and their ids; the order is the body order. */
static const struct
{
    uint8_t id;
    size_t dbi; /* offsetof(struct idx_env, dbi_...) */
} ckpt_tables[] = {
    {1, offsetof(struct idx_env, dbi_meta)},
    {2, offsetof(struct idx_env, dbi_queues)},
    {3, offsetof(struct idx_env, dbi_groups)},
    {4, offsetof(struct idx_env, dbi_producers)},
    {5, offsetof(struct idx_env, dbi_users)},
    {6, offsetof(struct idx_env, dbi_acls)},
    {7, offsetof(struct idx_env, dbi_namespaces)},
    {8, offsetof(struct idx_env, dbi_pids)},
    {9, offsetof(struct idx_env, dbi_usage)},
    {10, offsetof(struct idx_env, dbi_leases)},
    {16, offsetof(struct idx_env, dbi_timers)},
    {17, offsetof(struct idx_env, dbi_timer_recs)},
    {18, offsetof(struct idx_env, dbi_claims)},
};

static MDB_dbi table_dbi(const struct idx_env *e, size_t i)
{
    return *(const MDB_dbi *)((const char *)e + ckpt_tables[i].dbi);
}

void idx__ckpt_path(const struct idx_env *e,
                    uint64_t pos,
                    char *buf,
                    size_t cap)
{
    (void)snprintf(buf, cap, "%s/%020llu.ckpt", e->log_dir,
                   (unsigned long long)pos);
}

/* ---- The list of checkpoints (e->ckpts, sorted) ------------------------- */

static int ckpts_insert(struct idx_env *e, uint64_t pos)
{
    size_t i = e->n_ckpts;
    while (i > 0 && e->ckpts[i - 1] > pos) {
        i--;
    }
    if (i > 0 && e->ckpts[i - 1] == pos) {
        return 0;
    }
    if (e->n_ckpts == e->cap_ckpts) {
        size_t cap = e->cap_ckpts != 0 ? e->cap_ckpts * 2 : 16;
        uint64_t *p = tern_realloc(e->ckpts, cap * sizeof *p);
        if (p == NULL) {
            return idx__fail(e, -ENOMEM, __LINE__, "checkpoint list: %s",
                             strerror(ENOMEM));
        }
        e->ckpts = p;
        e->cap_ckpts = cap;
    }
    memmove(&e->ckpts[i + 1], &e->ckpts[i],
            (e->n_ckpts - i) * sizeof *e->ckpts);
    e->ckpts[i] = pos;
    e->n_ckpts++;
    return 0;
}

int idx__ckpt_scan(struct idx_env *e)
{
    DIR *d = opendir(e->log_dir);
    struct dirent *de;
    int rc = 0;
    if (d == NULL) {
        return idx__fail(e, -errno, __LINE__, "opendir %s: %s", e->log_dir,
                         strerror(errno));
    }
    while ((de = readdir(d)) != NULL) {
        const char *s = de->d_name;
        char *endp;
        if ((strlen(s) == 29 && strcmp(s + 20, ".ckpt.tmp") == 0) ||
            strcmp(s, "stage.ckpt") == 0) {
            char path[4096];
            (void)snprintf(path, sizeof path, "%s/%s", e->log_dir, s);
            (void)unlink(path); /* a write or fetch that did not finish */
            continue;
        }
        if (strlen(s) != 25 || strcmp(s + 20, ".ckpt") != 0 || s[0] == '-' ||
            s[0] == '+') {
            continue;
        }
        unsigned long long v = strtoull(s, &endp, 10);
        if (endp != s + 20) {
            continue;
        }
        rc = ckpts_insert(e, v);
        if (rc != 0) {
            break;
        }
    }
    closedir(d);
    return rc;
}

/* ---- Header -------------------------------------------------------------- */

static void header_encode(uint8_t *h,
                          uint64_t pos,
                          const struct idx__state *st,
                          uint32_t rows,
                          uint64_t body_len,
                          uint32_t body_sum)
{
    memset(h, 0, IDX__CKPT_HDR_SIZE);
    memcpy(h, CKPT__MAGIC, 8);
    tern_put_u32(h + 8, CKPT__VERSION);
    tern_put_u32(h + 12, IDX__CKPT_HDR_SIZE);
    tern_put_u64(h + 16, pos);
    tern_put_u64(h + 24, st->last_applied);
    tern_put_u64(h + 32, st->last_rec_pos);
    tern_put_u32(h + 40, st->last_rec_checksum);
    tern_put_u32(h + 44, rows);
    tern_put_u64(h + 48, body_len);
    tern_put_u32(h + 56, body_sum);
    tern_put_u32(h + 60, tern_checksum32(h, 60));
}

int idx__ckpt_header_decode(const uint8_t *h,
                            uint64_t pos,
                            struct idx__ckpt_hdr *out)
{
    if (memcmp(h, CKPT__MAGIC, 8) != 0 ||
        tern_get_u32(h + 12) != IDX__CKPT_HDR_SIZE ||
        !IDX__CHECKSUM_OK(tern_get_u32(h + 60), tern_checksum32(h, 60))) {
        return TERN_ECORRUPT;
    }
    if (tern_get_u32(h + 8) != CKPT__VERSION) {
        return TERN_EVERSION;
    }
    out->pos = tern_get_u64(h + 16);
    out->last_applied = tern_get_u64(h + 24);
    out->last_rec_pos = tern_get_u64(h + 32);
    out->last_rec_checksum = tern_get_u32(h + 40);
    out->rows = tern_get_u32(h + 44);
    out->body_len = tern_get_u64(h + 48);
    out->body_sum = tern_get_u32(h + 56);
    out->hdr_sum = tern_get_u32(h + 60);
    if (out->pos != pos || out->body_len > ((uint64_t)1 << 40)) {
        return TERN_ECORRUPT;
    }
    return 0;
}

/* ---- Writing ------------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return w < 0 ? errno : ENOSPC;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* What a checkpoint is read from: a txn and the tables' handles (copied,
 * so a worker thread needs nothing of the env). */
struct ckpt_src
{
    MDB_txn *txn;
    MDB_dbi meta;
    MDB_dbi dbi[TERN_ARRAY_SIZE(ckpt_tables)];
};

static void src_init(struct ckpt_src *s, const struct idx_env *e, MDB_txn *txn)
{
    s->txn = txn;
    s->meta = e->dbi_meta;
    for (size_t i = 0; i < TERN_ARRAY_SIZE(ckpt_tables); i++) {
        s->dbi[i] = table_dbi(e, i);
    }
}

/* Tables keyed by u64 BE queue id first whose rows of a deleted queue
 * the local cleaner removes at its own pace: those rows are left out
 * while the queue's "dead" mark exists, so every node writes the same
 * bytes however far its cleaner got. */
static bool keyed_by_queue(uint8_t id)
{
    /* groups, producers, leases, claims */
    return id == 3 || id == 4 || id == 10 || id == 18;
}

/* *dead: whether queue id has a "dead" work mark. 0 or an LMDB code. */
static int queue_dead(const struct ckpt_src *s, uint64_t id, int *dead)
{
    uint8_t key[IDX__MARK_KEY_SIZE];
    idx__mark_key(key, "dead", id);
    MDB_val k = {sizeof key, key}, v;
    int rc = mdb_get(s->txn, s->meta, &k, &v);
    *dead = rc == 0;
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Serialise the checkpoint tables as s->txn sees them. 0, an LMDB code
 * (*what says where) or -ENOMEM. Touches no env: runs on the
 * loop thread (idx__ckpt_write) or a worker (idx_ckpt_run). */
static int build_body(const struct ckpt_src *s,
                      struct tern_wbuf *w,
                      uint32_t *rows,
                      const char **what)
{
    uint64_t last_id = 0;
    int last_dead = 0;
    *rows = 0;
    for (size_t i = 0; i < TERN_ARRAY_SIZE(ckpt_tables); i++) {
        MDB_cursor *cur;
        MDB_val k, v;
        int rc = mdb_cursor_open(s->txn, s->dbi[i], &cur);
        if (rc != 0) {
            *what = "checkpoint cursor";
            return rc;
        }
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            uint8_t h[CKPT__ROW_HDR];
            if (ckpt_tables[i].id == 1 &&
                (k.mv_size != sizeof IDX__META_KEY_STATE - 1 ||
                 memcmp(k.mv_data, IDX__META_KEY_STATE, k.mv_size) != 0)) {
                continue; /* the cleaner's marks: local work, see WHAT */
            }
            if (keyed_by_queue(ckpt_tables[i].id) && k.mv_size >= 8) {
                uint64_t id = idx__get_be64(k.mv_data);
                if (id != last_id) {
                    last_id = id;
                    rc = queue_dead(s, id, &last_dead);
                    if (rc != 0) {
                        mdb_cursor_close(cur);
                        *what = "checkpoint dead mark";
                        return rc;
                    }
                }
                if (last_dead) {
                    continue;
                }
            }
            h[0] = ckpt_tables[i].id;
            tern_put_u16(h + 1, (uint16_t)k.mv_size);
            tern_put_u32(h + 3, (uint32_t)v.mv_size);
            tern_wbuf_put(w, h, sizeof h);
            tern_wbuf_put(w, k.mv_data, k.mv_size);
            tern_wbuf_put(w, v.mv_data, v.mv_size);
            (*rows)++;
        }
        mdb_cursor_close(cur);
        if (rc != MDB_NOTFOUND) {
            *what = "checkpoint walk";
            return rc;
        }
        if (w->err != 0) {
            *what = "checkpoint body";
            return -ENOMEM;
        }
    }
    return 0;
}

/* Write the file at path from s (its .tmp, fsync, rename and, with
 * sync_dir, fsync of the directory). 0, an LMDB code with *what set,
 * -ENOMEM, or an errno (positive) with *what NULL. Touches no env. */
static int write_file(const struct ckpt_src *s,
                      const char *log_dir,
                      const char *path,
                      uint64_t pos,
                      const struct idx__state *st,
                      bool sync_dir,
                      const char **what)
{
    char tmp[4100];
    uint8_t h[IDX__CKPT_HDR_SIZE];
    struct tern_wbuf w;
    uint32_t rows = 0;
    int fd, err;

    tern_wbuf_init(&w);
    err = build_body(s, &w, &rows, what);
    if (err != 0) {
        goto out;
    }
    *what = NULL; /* an errno from here on */
    header_encode(h, pos, st, rows, w.len, tern_checksum32(w.base, w.len));
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        err = errno;
        goto out;
    }
    err = write_all(fd, h, sizeof h);
    if (err == 0) {
        err = write_all(fd, w.base, w.len);
    }
    if (err == 0 && fsync(fd) != 0) {
        err = errno;
    }
    close(fd);
    if (err == 0 && rename(tmp, path) != 0) {
        err = errno;
    }
    if (err != 0) {
        (void)unlink(tmp);
        goto out;
    }
    if (sync_dir) {
        int dfd = open(log_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0) {
            err = errno;
        }
        if (dfd >= 0) {
            close(dfd);
        }
    }
out:
    tern_wbuf_free(&w);
    return err;
}

/* An error of write_file into e's errmsg and a tern code. */
static int write_err(struct idx_env *e,
                     const char *path,
                     int err,
                     const char *what)
{
    if (err == -ENOMEM) {
        return idx__fail(e, -ENOMEM, __LINE__, "checkpoint %s: out of memory",
                         path);
    }
    if (what != NULL) {
        return idx__mdb_err(e, err, what);
    }
    return idx__fail(e, err == ENOSPC || err == EDQUOT ? TERN_EFULL : -err,
                     __LINE__, "checkpoint %s: %s", path, strerror(err));
}

int idx__ckpt_write(struct idx_env *e, uint64_t pos)
{
    char path[4096];
    struct ckpt_src src;
    const char *what = NULL;

    TERN_INVARIANT(e->st.log_end == pos);
    idx__ckpt_path(e, pos, path, sizeof path);
    if (access(path, F_OK) == 0 && !(e->stale_ckpts && pos > e->stale_from &&
                                     idx__log_in_v1_segment(e, pos))) {
        return ckpts_insert(e, pos); /* written before (a rebuild) */
    }
    src_init(&src, e, e->wtxn);
    int err = write_file(&src, e->log_dir, path, pos, &e->st, false, &what);
    if (err != 0) {
        return write_err(e, path, err, what);
    }
    e->dir_dirty = 1; /* the directory is synced with the log's next sync */
    return ckpts_insert(e, pos);
}

/* ---- Writing in a worker (see BACKGROUND at the top) --------------------- */

/* Job states (struct idx_ckpt_job.state). */
enum {
    CJ_QUEUED = 0,    /* started, no thread writes it yet */
    CJ_RUNNING = 1,   /* a thread writes it */
    CJ_DONE = 2,      /* written or failed (err, what set) */
    CJ_ABANDONED = 3, /* idx_close or a restore came first: never written */
};

struct idx_ckpt_job
{
    /* loop thread only */
    struct idx_env *env; /* NULL once settled (idx_ckpt_end frees) */
    bool taken;          /* handed out by idx_ckpt_take */
    /* set before the job is handed out, read-only after */
    struct ckpt_src src; /* src.txn: the read txn, aborted by the writer */
    struct idx__state st;
    uint64_t pos;
    char path[4096];
    char log_dir[4096];
    /* the writer's: read after CJ_DONE */
    atomic_int state;
    int err;
    const char *what;
};

/* Write j (whichever thread wins it from CJ_QUEUED). */
static void job_write(struct idx_ckpt_job *j)
{
    int expected = CJ_QUEUED;
    if (!atomic_compare_exchange_strong(&j->state, &expected, CJ_RUNNING)) {
        return; /* written by the loop, or abandoned */
    }
    j->err = write_file(&j->src, j->log_dir, j->path, j->pos, &j->st, true,
                        &j->what);
    mdb_txn_abort(j->src.txn); /* MDB_NOTLS: any thread may end it */
    j->src.txn = NULL;
    atomic_store(&j->state, CJ_DONE);
}

/* Loop thread: finish the env's job, if any. Abandon (idx_close, a
 * restore) drops one no thread writes yet; else the loop writes it
 * itself. Either way waits for a running writer. A written checkpoint
 * joins the list; a failed write fails the env like a failed apply (the
 * next apply returns it, a reopen writes the checkpoint again). */
static int job_settle(struct idx_env *e, bool abandon)
{
    struct idx_ckpt_job *j = e->ckpt_job;
    int rc = 0;
    if (j == NULL) {
        return 0;
    }
    if (abandon) {
        int expected = CJ_QUEUED;
        if (atomic_compare_exchange_strong(&j->state, &expected,
                                           CJ_ABANDONED)) {
            mdb_txn_abort(j->src.txn);
            j->src.txn = NULL;
        }
    } else {
        job_write(j);
    }
    while (atomic_load(&j->state) == CJ_RUNNING) {
        struct timespec ts = {0, 1000000L};
        (void)nanosleep(&ts, NULL);
    }
    if (atomic_load(&j->state) == CJ_DONE) {
        if (j->err != 0) {
            rc = write_err(e, j->path, j->err, j->what);
            if (e->failed == 0) {
                e->failed = rc;
            }
        } else {
            rc = ckpts_insert(e, j->pos);
        }
    }
    e->ckpt_job = NULL;
    if (j->taken) {
        j->env = NULL; /* idx_ckpt_end frees it */
    } else {
        tern_free(j);
    }
    return rc;
}

int idx__ckpt_start(struct idx_env *e, uint64_t pos)
{
    struct idx_ckpt_job *j;
    MDB_txn *rtxn;
    int rc;

    TERN_INVARIANT(e->st.log_end == pos);
    /* At most one in flight: the previous one is finished first. */
    rc = job_settle(e, false);
    if (rc != 0) {
        return rc;
    }
    j = tern_calloc(1, sizeof *j);
    if (j == NULL) {
        return idx__fail(e, -ENOMEM, __LINE__, "checkpoint job: %s",
                         strerror(ENOMEM));
    }
    idx__ckpt_path(e, pos, j->path, sizeof j->path);
    if (access(j->path, F_OK) == 0) {
        tern_free(j);
        return ckpts_insert(e, pos); /* written before (a rebuild) */
    }
    /* The state before pos, committed: LMDB is rebuilt from the log at
     * every open (env.c), so an early commit costs no durability. */
    rc = idx_flush(e);
    if (rc != 0) {
        tern_free(j);
        return rc;
    }
    rc = mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &rtxn);
    if (rc != 0) {
        tern_free(j);
        return idx__mdb_err(e, rc, "checkpoint read txn");
    }
    j->env = e;
    src_init(&j->src, e, rtxn);
    j->st = e->st;
    j->pos = pos;
    (void)snprintf(j->log_dir, sizeof j->log_dir, "%s", e->log_dir);
    atomic_init(&j->state, CJ_QUEUED);
    e->ckpt_job = j;
    return idx__txn_begin(e);
}

void idx__ckpt_abandon(struct idx_env *e)
{
    (void)job_settle(e, true);
}

struct idx_ckpt_job *idx_ckpt_take(struct idx_env *e)
{
    struct idx_ckpt_job *j = e->ckpt_job;
    if (j == NULL || j->taken) {
        return NULL;
    }
    j->taken = true;
    return j;
}

void idx_ckpt_run(struct idx_ckpt_job *j)
{
    job_write(j);
}

int idx_ckpt_end(struct idx_ckpt_job *j, char *errmsg)
{
    int rc = 0;
    if (j->env != NULL) {
        struct idx_env *e = j->env;
        TERN_INVARIANT(e->ckpt_job == j);
        j->taken = false; /* settle frees it */
        rc = job_settle(e, false);
        if (rc != 0) {
            tern_errmsg_printf(errmsg, "%s", e->errmsg);
        }
    } else {
        tern_free(j);
    }
    return rc;
}

/* ---- Reading and loading ------------------------------------------------- */

int idx__ckpt_read_file(struct idx_env *e,
                        uint64_t pos,
                        struct idx__ckpt_hdr *hdr,
                        uint8_t **body)
{
    char path[4096];
    uint8_t h[IDX__CKPT_HDR_SIZE];
    uint8_t *b = NULL;
    struct stat st;
    int rc;

    *body = NULL;
    idx__ckpt_path(e, pos, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return idx__fail(e, -errno, __LINE__, "open %s: %s", path,
                         strerror(errno));
    }
    if (fstat(fd, &st) != 0 || st.st_size < IDX__CKPT_HDR_SIZE ||
        pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        rc = IDX__CORRUPT(e, "checkpoint %s: short header", path);
        goto out;
    }
    rc = idx__ckpt_header_decode(h, pos, hdr);
    if (rc == TERN_EVERSION) {
        rc = idx__fail(e, rc, __LINE__,
                       "checkpoint %s has version %u; this build reads "
                       "version %u: refusing the data directory",
                       path, (unsigned)tern_get_u32(h + 8),
                       (unsigned)CKPT__VERSION);
        goto out;
    }
    if (rc != 0) {
        rc = idx__fail(e, rc, __LINE__, "checkpoint %s: bad header", path);
        goto out;
    }
    if ((uint64_t)st.st_size != IDX__CKPT_HDR_SIZE + hdr->body_len) {
        rc = IDX__CORRUPT(
            e, "checkpoint %s: %lld bytes, header says %llu", path,
            (long long)st.st_size,
            (unsigned long long)(IDX__CKPT_HDR_SIZE + hdr->body_len));
        goto out;
    }
    b = tern_malloc(hdr->body_len != 0 ? (size_t)hdr->body_len : 1);
    if (b == NULL) {
        rc = idx__fail(e, -ENOMEM, __LINE__, "checkpoint %s: %s", path,
                       strerror(ENOMEM));
        goto out;
    }
    size_t got = 0;
    while (got < hdr->body_len) {
        ssize_t r = pread(fd, b + got, (size_t)hdr->body_len - got,
                          (off_t)(IDX__CKPT_HDR_SIZE + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            rc = r < 0 ? idx__fail(e, -errno, __LINE__, "read %s: %s", path,
                                   strerror(errno))
                       : IDX__CORRUPT(e, "checkpoint %s: short body", path);
            goto out;
        }
        got += (size_t)r;
    }
    if (!IDX__CHECKSUM_OK(hdr->body_sum,
                          tern_checksum32(b, (size_t)hdr->body_len))) {
        rc = IDX__CORRUPT(e, "checkpoint %s: body checksum mismatch", path);
        goto out;
    }
    *body = b;
    b = NULL;
    rc = 0;
out:
    tern_free(b);
    close(fd);
    return rc;
}

int idx__ckpt_load(struct idx_env *e, uint64_t pos)
{
    struct idx__ckpt_hdr hdr;
    uint8_t *body = NULL;
    struct idx__state s;
    int have_state = 0;
    size_t t = 0; /* index into ckpt_tables: rows come in table order */
    int rc = idx__ckpt_read_file(e, pos, &hdr, &body);
    if (rc != 0) {
        return rc;
    }
    rc = idx__txn_begin(e);
    if (rc != 0) {
        goto out;
    }
    struct tern_cursor c;
    tern_cursor_init(&c, body, (size_t)hdr.body_len);
    for (uint32_t i = 0; i < hdr.rows; i++) {
        uint8_t id = tern_cursor_u8(&c);
        uint16_t klen = tern_cursor_u16(&c);
        uint32_t vlen = tern_cursor_u32(&c);
        const uint8_t *kp = NULL, *vp = NULL;
        if (c.err == 0 && klen != 0 && klen <= CKPT__KEY_MAX) {
            kp = tern_cursor_bytes(&c, klen);
            vp = tern_cursor_bytes(&c, vlen);
        }
        if (c.err != 0 || kp == NULL || vp == NULL) {
            rc = IDX__CORRUPT(e, "checkpoint %llu: row %u malformed",
                              (unsigned long long)pos, i);
            goto out;
        }
        while (t < TERN_ARRAY_SIZE(ckpt_tables) && ckpt_tables[t].id != id) {
            t++;
        }
        if (t == TERN_ARRAY_SIZE(ckpt_tables)) {
            rc = IDX__CORRUPT(e,
                              "checkpoint %llu: row %u of table %u out "
                              "of order",
                              (unsigned long long)pos, i, id);
            goto out;
        }
        MDB_val k = {klen, (void *)(uintptr_t)kp};
        MDB_val v = {vlen, (void *)(uintptr_t)vp};
        int mrc = mdb_put(e->wtxn, table_dbi(e, t), &k, &v, MDB_APPEND);
        if (mrc == MDB_KEYEXIST) {
            rc = IDX__CORRUPT(e, "checkpoint %llu: row %u out of key order",
                              (unsigned long long)pos, i);
            goto out;
        }
        if (mrc != 0) {
            rc = idx__mdb_err(e, mrc, "checkpoint load");
            goto out;
        }
        if (id == 1 && klen == sizeof IDX__META_KEY_STATE - 1 &&
            memcmp(kp, IDX__META_KEY_STATE, klen) == 0) {
            rc = idx__state_decode(vp, vlen, &s);
            if (rc != 0) {
                rc = idx__fail(e, rc, __LINE__,
                               "checkpoint %llu: bad state record",
                               (unsigned long long)pos);
                goto out;
            }
            have_state = 1;
        }
    }
    if (tern_cursor_left(&c) != 0 || !have_state || s.log_end != pos ||
        s.last_applied != hdr.last_applied ||
        s.last_rec_pos != hdr.last_rec_pos ||
        s.last_rec_checksum != hdr.last_rec_checksum) {
        rc = IDX__CORRUPT(e,
                          "checkpoint %llu: state does not match its "
                          "header",
                          (unsigned long long)pos);
        goto out;
    }
    e->st = s;
    rc = ckpts_insert(e, pos);
out:
    tern_free(body);
    return rc;
}

uint64_t idx__ckpt_file_size(struct idx_env *e, uint64_t pos, uint32_t *sum)
{
    char path[4096];
    uint8_t h[IDX__CKPT_HDR_SIZE];
    struct idx__ckpt_hdr hdr;
    uint64_t size = 0;
    idx__ckpt_path(e, pos, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    if (pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h &&
        idx__ckpt_header_decode(h, pos, &hdr) == 0) {
        size = IDX__CKPT_HDR_SIZE + hdr.body_len;
        *sum = hdr.hdr_sum;
    }
    close(fd);
    return size;
}

int idx__ckpt_pread(struct idx_env *e,
                    uint64_t pos,
                    uint64_t off,
                    void *buf,
                    size_t n)
{
    char path[4096];
    idx__ckpt_path(e, pos, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return idx__fail(e, -errno, __LINE__, "open %s: %s", path,
                         strerror(errno));
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r =
            pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            int rc = r < 0 ? idx__fail(e, -errno, __LINE__, "read %s: %s", path,
                                       strerror(errno))
                           : idx__fail(e, TERN_EINVAL, __LINE__,
                                       "read %s beyond its end", path);
            close(fd);
            return rc;
        }
        got += (size_t)r;
    }
    close(fd);
    return 0;
}

void idx__ckpt_drop_before(struct idx_env *e, uint64_t pos)
{
    size_t keep = 0;
    for (size_t i = 0; i < e->n_ckpts; i++) {
        if (e->ckpts[i] < pos) {
            char path[4096];
            idx__ckpt_path(e, e->ckpts[i], path, sizeof path);
            (void)unlink(path);
            e->dir_dirty = 1;
        } else {
            e->ckpts[keep++] = e->ckpts[i];
        }
    }
    e->n_ckpts = keep;
}

void idx__ckpt_forget_all(struct idx_env *e)
{
    idx__ckpt_abandon(e); /* a pending one would be left on disk */
    idx__ckpt_drop_before(e, UINT64_MAX);
}
