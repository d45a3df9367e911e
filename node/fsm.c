/*
 * The state machine ternd gives to raft: the index (index/) behind the
 * repl_fsm callbacks. apply -> idx_apply (then the per-command results are
 * routed to waiting client requests through the batcher; on followers and
 * during replay there is no pending batch and the results are dropped),
 * snapshot -> idx_snapshot manifest, restore -> idx_restore, bulk_* ->
 * idx_bulk_*.
 *
 * Group commit: idx_apply leaves its changes in one pending LMDB write
 * transaction; node.c calls node_fsm_flush once per loop iteration, after
 * the applies of that iteration, and only then releases the answers of
 * the batches whose apply the flush covered.
 *
 * Failure modes:
 *   - a failed apply (disk full, I/O error) is sticky until the env is
 *     reopened; repl retries the entry, so the next apply reopens the
 *     index (at most once a second) and tries again: this is how the node
 *     recovers once space returns;
 *   - an apply or a flush that meets ENOSPC gives the disk reserve back
 *     (disk.c) and retries at once on a reopened env, in the reserve's
 *     space;
 *   - a failed fsync of the index is never retried or cured by a reopen
 *     (idx_sync_failed, fsyncgate), nor is a failed reopen: the node stops
 *     with exit code 1, restarts and re-applies from the raft log.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tern_common.h>

#include "fsm.h"
#include "log.h"

void node_fsm_init(struct node_fsm *f,
                   uv_loop_t *loop,
                   struct node_batcher *batcher,
                   const struct node_fsm_ops *ops,
                   void *arg)
{
    memset(f, 0, sizeof(*f));
    f->ops = *ops;
    f->arg = arg;
    f->loop = loop;
    f->batcher = batcher;
}

/* The options of every idx_open of f. */
static void index_options(const struct node_fsm *f, struct idx_options *io)
{
    memset(io, 0, sizeof(*io));
    io->dir = f->dir;
    io->max_message = f->max_message;
    io->segment_bytes = f->segment_bytes;
    io->map_size = (size_t)f->map_bytes;
    io->background_checkpoints = true;
}

/* A checkpoint written on libuv's thread pool (index/ckpt.c,
 * BACKGROUND): the loop thread keeps applying meanwhile. */
struct ckpt_work
{
    uv_work_t work;
    struct idx_ckpt_job *job;
    uint64_t started_ns;
};

static void ckpt_work(uv_work_t *w)
{
    struct ckpt_work *c = w->data;
    idx_ckpt_run(c->job);
}

static void ckpt_done(uv_work_t *w, int status)
{
    struct ckpt_work *c = w->data;
    (void)status; /* UV_ECANCELED never happens: nothing cancels it */
    char errmsg[TERN_ERRMSG_SIZE];
    int rv = idx_ckpt_end(c->job, errmsg);
    if (rv != 0) {
        /* The env failed as an apply would: the next apply reopens it,
         * and the rebuild writes the checkpoint again. */
        node_log(NODE_LOG_ERROR, "checkpoint failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), errmsg);
    } else {
        node_log(NODE_LOG_INFO, "checkpoint written", "ms=%llu",
                 (unsigned long long)((uv_hrtime() - c->started_ns) / 1000000));
    }
    tern_free(c);
}

/* Hand the checkpoint job the last apply left (if any) to a worker. */
static void ckpt_queue(struct node_fsm *f)
{
    struct idx_ckpt_job *j = idx_ckpt_take(f->idx);
    struct ckpt_work *c;
    if (j == NULL) {
        return;
    }
    c = tern_calloc(1, sizeof *c);
    if (c != NULL) {
        c->job = j;
        c->work.data = c;
        c->started_ns = uv_hrtime();
        if (uv_queue_work(f->loop, &c->work, ckpt_work, ckpt_done) == 0) {
            return;
        }
        tern_free(c);
    }
    /* No worker: write it here, as before background checkpoints. */
    char errmsg[TERN_ERRMSG_SIZE];
    if (idx_ckpt_end(j, errmsg) != 0) {
        node_log(NODE_LOG_ERROR, "checkpoint failed", "detail=\"%s\"", errmsg);
    }
}

int node_fsm_open(struct node_fsm *f,
                  const char *dir,
                  uint32_t max_message,
                  uint64_t segment_bytes,
                  uint64_t map_bytes,
                  char *errmsg)
{
    struct idx_options io;
    int rv;

    if (snprintf(f->dir, sizeof(f->dir), "%s", dir) >= (int)sizeof(f->dir)) {
        tern_errmsg_printf(errmsg, "index dir path too long");
        return TERN_EINVAL;
    }
    f->max_message = max_message;
    f->segment_bytes = segment_bytes;
    f->map_bytes = map_bytes;
    index_options(f, &io);
    /* At start only: a node restarted right after a kill -9 may find its
     * lock still held by the old process's last threads. */
    io.lock_wait_ms = 5000;
    rv = idx_open(&io, &f->idx, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "index %s", f->dir);
        return rv;
    }
    node_log(idx_truncated_bytes(f->idx) > 0 ? NODE_LOG_WARN : NODE_LOG_INFO,
             "index opened",
             "dir=%s last_applied=%llu log_start=%llu log_end=%llu "
             "truncated_bytes=%llu "
             "cut=\"%s\"",
             f->dir, (unsigned long long)idx_last_applied(f->idx),
             (unsigned long long)idx_log_start(f->idx),
             (unsigned long long)idx_log_end(f->idx),
             (unsigned long long)idx_truncated_bytes(f->idx),
             idx_cut_note(f->idx));
    return 0;
}

void node_fsm_close(struct node_fsm *f)
{
    if (f->idx != NULL) {
        idx_close(f->idx);
        f->idx = NULL;
        node_log(NODE_LOG_DEBUG, "index closed", NULL);
    }
}

/* Stop the node (once). */
static void fail(struct node_fsm *f)
{
    f->failed = true;
    f->ops.fail(f->arg);
}

/* A failed fsync of the index is never retried or cured by a reopen
 * (idx_sync_failed, fsyncgate): stop the process, which restarts and
 * re-applies from the raft log. Returns whether it did. */
static bool stop_if_sync_failed(struct node_fsm *f)
{
    if (f->idx == NULL || !idx_sync_failed(f->idx)) {
        return false;
    }
    if (!f->failed) {
        node_log(NODE_LOG_ERROR, "index sync failed, exiting",
                 "err=%s detail=\"%s\"", tern_err_name(idx_status(f->idx)),
                 idx_errmsg(f->idx));
        fail(f);
    }
    return true;
}

/* force: skip the once-a-second limit (the reserve was just released, so
 * the retry can succeed). */
static int reopen(struct node_fsm *f, bool force)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct idx_options io;
    uint64_t now = uv_now(f->loop);
    int status = idx_status(f->idx);
    int rv;

    if (!force && f->reopened_at != 0 && now - f->reopened_at < 1000) {
        return status;
    }
    f->reopened_at = now;
    node_log(NODE_LOG_WARN, "reopening the index after a failed apply",
             "err=%s", tern_err_name(status));
    idx_close(f->idx);
    f->idx = NULL;
    f->dirty = false;
    index_options(f, &io);
    rv = idx_open(&io, &f->idx, errmsg);
    if ((rv == TERN_EFULL || rv == -ENOSPC) &&
        f->ops.release_disk(f->arg, "index reopen: no space left")) {
        /* Rebuilding LMDB from the log needs room: the reserve's. */
        node_log(NODE_LOG_WARN,
                 "retrying the index reopen in the disk "
                 "reserve",
                 "detail=\"%s\"", errmsg);
        errmsg[0] = '\0';
        rv = idx_open(&io, &f->idx, errmsg);
    }
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "cannot reopen the index, exiting",
                 "err=%s detail=\"%s\"", tern_err_name(rv), errmsg);
        f->idx = NULL;
        fail(f);
        return rv;
    }
    node_log(NODE_LOG_INFO, "index reopened",
             "last_applied=%llu log_end=%llu truncated_bytes=%llu",
             (unsigned long long)idx_last_applied(f->idx),
             (unsigned long long)idx_log_end(f->idx),
             (unsigned long long)idx_truncated_bytes(f->idx));
    return 0;
}

/* The index reached its LMDB map, not the disk: releasing the disk
 * reserve would not help. The failed apply fail-stops the replica (every
 * node meets it at the same entry); restarted with a larger
 * index_map_bytes, the node rebuilds the index from the commit log and
 * loses nothing. Logged at most once a minute. */
static void map_full(struct node_fsm *f)
{
    uint64_t now = uv_now(f->loop);
    if (f->map_full_logged_at != 0 && now - f->map_full_logged_at < 60000) {
        return;
    }
    f->map_full_logged_at = now;
    node_log(NODE_LOG_ERROR, "index map full: raise [node] index_map_bytes",
             "index_map_bytes=%llu detail=\"%s\"",
             (unsigned long long)f->map_bytes, idx_errmsg(f->idx));
}

bool node_fsm_flush(struct node_fsm *f)
{
    int rv;
    if (!f->dirty || f->idx == NULL) {
        return false;
    }
    rv = idx_flush(f->idx);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "index flush failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), idx_errmsg(f->idx));
        if (idx_map_full(f->idx)) {
            map_full(f);
            f->reopened_at = 0;
        } else if (rv == TERN_EFULL || rv == -ENOSPC) {
            /* The next apply reopens the env (rebuilt from the commit
             * log) in the space the reserve gives back. */
            (void)f->ops.release_disk(f->arg, "index flush: no space left");
            f->reopened_at = 0;
        }
    }
    f->dirty = false;
    return true;
}

static int fsm_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    struct node_fsm *f = arg;
    unsigned nr = 0;
    int rv;

    if (f->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    if (stop_if_sync_failed(f)) {
        return idx_status(f->idx);
    }
    if (idx_status(f->idx) != 0 && idx_map_full(f->idx)) {
        /* A reopen would rebuild the index into a map of the same size
         * and fill it again, and its failure would look like a full disk
         * (the reserve released for nothing): fail-stop (map_full). */
        if (!f->failed) {
            fail(f);
        }
        return idx_status(f->idx);
    }
    if (idx_status(f->idx) != 0) {
        /* A failed apply (disk full, I/O error) is sticky until the env is
         * reopened; repl retries the entry, so reopen (at most once a
         * second) and try again: this is how the node recovers once space
         * returns. */
        rv = reopen(f, false);
        if (rv != 0) {
            return rv;
        }
    }
    len = idx_cmd_entry_len(buf, len);
    rv = idx_apply(f->idx, index, buf, len, f->results, NODE_MAX_CMDS_PER_ENTRY,
                   &nr);
    if (rv == TERN_EFULL && idx_map_full(f->idx)) {
        map_full(f);
    } else if ((rv == TERN_EFULL || rv == -ENOSPC) &&
               f->ops.release_disk(f->arg, "apply: no space left")) {
        /* The reserve's blocks are free now (disk.c): retry once, on a
         * reopened env (a failed apply is sticky). */
        node_log(NODE_LOG_WARN, "retrying the apply in the disk reserve",
                 "index=%llu", (unsigned long long)index);
        rv = reopen(f, true);
        if (rv != 0) {
            return rv; /* f->idx is gone: the node is stopping */
        }
        rv = idx_apply(f->idx, index, buf, len, f->results,
                       NODE_MAX_CMDS_PER_ENTRY, &nr);
    }
    if (rv != 0) {
        uint64_t now = uv_now(f->loop);
        /* repl retries the entry: log a repeated failure once a second. */
        if (rv != f->apply_err || now - f->apply_err_logged_at >= 1000) {
            node_log(NODE_LOG_ERROR, "apply failed",
                     "index=%llu err=%s detail=\"%s\"",
                     (unsigned long long)index, tern_err_name(rv),
                     idx_errmsg(f->idx));
            f->apply_err = rv;
            f->apply_err_logged_at = now;
        }
        return rv == -ENOSPC ? TERN_EFULL : rv;
    }
    f->apply_err = 0;
    f->dirty = true;
    uint64_t newer_pos;
    if (idx_refused_newer(f->idx, &newer_pos) &&
        (!f->newer_logged || f->newer_logged_pos != newer_pos)) {
        /* Its peers applied what this node only recorded: upgrade it. */
        node_log(NODE_LOG_WARN,
                 "entry of a later release recorded unapplied: this node's "
                 "index lacks it and writes no checkpoint until it runs "
                 "that release",
                 "log_pos=%llu applied_index=%llu",
                 (unsigned long long)newer_pos, (unsigned long long)index);
        f->newer_logged = true;
        f->newer_logged_pos = newer_pos;
    }
    ckpt_queue(f);
    f->ops.kick(f->arg);
    node_batcher_on_apply(f->batcher, index, buf, len, f->results, nr);
    return 0;
}

static int fsm_snapshot(void *arg,
                        uint64_t last_applied,
                        void **manifest,
                        size_t *manifest_len)
{
    struct node_fsm *f = arg;
    struct tern_wbuf w;
    int rv;

    if (f->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    tern_wbuf_init(&w);
    /* idx_snapshot syncs the commit log and LMDB on this (the loop)
     * thread: its time is logged, as it holds back heartbeats. */
    uint64_t t0 = uv_hrtime();
    rv = idx_snapshot(f->idx, &w);
    uint64_t took_us = (uv_hrtime() - t0) / 1000;
    if (rv == 0 && w.err != 0) {
        rv = w.err;
    }
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "snapshot failed",
                 "last_applied=%llu err=%s detail=\"%s\"",
                 (unsigned long long)last_applied, tern_err_name(rv),
                 idx_errmsg(f->idx));
        tern_wbuf_free(&w);
        (void)stop_if_sync_failed(f);
        return rv;
    }
    f->dirty = false; /* idx_snapshot flushed */
    node_log(NODE_LOG_INFO, "snapshot taken",
             "last_applied=%llu idx_last_applied=%llu log_end=%llu "
             "manifest_bytes=%zu took_ms=%.1f",
             (unsigned long long)last_applied,
             (unsigned long long)idx_last_applied(f->idx),
             (unsigned long long)idx_log_end(f->idx), w.len,
             (double)took_us / 1000.0);
    *manifest = w.base;
    *manifest_len = w.len;
    return 0;
}

static int fsm_restore(void *arg, const void *manifest, size_t manifest_len)
{
    struct node_fsm *f = arg;
    int rv;
    if (f->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_restore(f->idx, manifest, manifest_len);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "restore failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), idx_errmsg(f->idx));
        return rv;
    }
    f->dirty = true;
    f->ops.kick(f->arg);
    node_log(NODE_LOG_INFO, "restored snapshot",
             "last_applied=%llu log_end=%llu",
             (unsigned long long)idx_last_applied(f->idx),
             (unsigned long long)idx_log_end(f->idx));
    return 0;
}

static int fsm_bulk_range(void *arg,
                          const void *manifest,
                          size_t len,
                          uint64_t *from,
                          uint64_t *to)
{
    struct node_fsm *f = arg;
    int rv;
    if (f->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_bulk_range(f->idx, manifest, len, from, to);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "bulk range failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), idx_errmsg(f->idx));
    } else {
        node_log(NODE_LOG_INFO, "snapshot catch-up",
                 "from=%llu to=%llu bytes=%llu", (unsigned long long)*from,
                 (unsigned long long)*to, (unsigned long long)(*to - *from));
    }
    return rv;
}

static int fsm_bulk_read(void *arg,
                         uint64_t pos,
                         void *buf,
                         size_t cap,
                         size_t *nread)
{
    struct node_fsm *f = arg;
    int rv;
    if (f->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_bulk_read(f->idx, pos, buf, cap, nread);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "bulk read failed",
                 "pos=%llu err=%s detail=\"%s\"", (unsigned long long)pos,
                 tern_err_name(rv), idx_errmsg(f->idx));
    }
    return rv;
}

static int fsm_bulk_write(void *arg, uint64_t pos, const void *buf, size_t len)
{
    struct node_fsm *f = arg;
    int rv;
    if (f->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_bulk_write(f->idx, pos, buf, len);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "bulk write failed",
                 "pos=%llu bytes=%zu err=%s detail=\"%s\"",
                 (unsigned long long)pos, len, tern_err_name(rv),
                 idx_errmsg(f->idx));
    }
    return rv;
}

void node_fsm_callbacks(struct node_fsm *f, struct repl_fsm *out)
{
    memset(out, 0, sizeof(*out));
    out->arg = f;
    out->apply = fsm_apply;
    out->snapshot = fsm_snapshot;
    out->restore = fsm_restore;
    out->bulk_range = fsm_bulk_range;
    out->bulk_read = fsm_bulk_read;
    out->bulk_write = fsm_bulk_write;
}
