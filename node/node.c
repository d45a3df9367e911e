/*
 * The wiring of one ternd process: xport (rdma/), repl (raft/) and the
 * index (index/) on ONE libuv loop, plus the client server (server.c).
 *
 * Data directory layout: DIR/raft (raft_uv's files, owned by repl),
 * DIR/index (commit log + LMDB, owned by idx).
 *
 * The FSM given to repl is the index: apply -> idx_apply (then the
 * per-command results are routed to waiting client requests through the
 * batcher; on followers and during replay there is no pending batch and
 * the results are dropped), snapshot -> idx_snapshot manifest,
 * restore -> idx_restore, bulk_* -> idx_bulk_*.
 *
 * Group commit: idx_apply leaves its changes in one pending LMDB write
 * transaction; a uv_check handle (end of every loop iteration) first
 * proposes the write batch collected during the iteration, then calls
 * idx_flush once if anything was applied, then releases the answers of
 * the batches whose apply that flush covered, then wakes parked FETCHes.
 * So an acknowledged message is immediately fetchable, on this node.
 * A uv_idle handle is started whenever work is pending so the loop never
 * blocks in poll with an unflushed apply.
 *
 * Transport (--transport, see node/config.c): tcp is xport_tcp on
 * raft_addr; shm and rdma are rdma/fallback.c composites of the fast
 * backend (shm on <shm_dir>/tern-shm-<host>-<port>.sock, or verbs on
 * raft_addr) and tcp on raft_addr, with the peers' fast addresses derived
 * from their raft addresses by the same rule (node_fast_address); auto is
 * rdma when a device exists and the verbs listener comes up, else tcp. The
 * node shows the real selection ("tcp", "shm+tcp", "verbs+tcp") as its
 * transport in the status answer (node_config(n)->transport).
 *
 * Shutdown (SIGTERM/SIGINT): close the client server, answer unproposed
 * writes with TERN_ESHUTDOWN, repl_close (in-flight proposals fail with
 * TERN_ESHUTDOWN), then idx_close, then xport_close, then our own handles;
 * uv_run returns and main exits 0.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "node.h"

struct node
{
    const struct node_config *cfg; /* &cfg_view */
    /* The caller's config with transport replaced by the selected one
     * (shallow copy: every other pointer is borrowed from the caller). */
    struct node_config cfg_view;
    char transport_name[32];      /* selected: "tcp", "shm+tcp", ... */
    char transport_requested[16]; /* cfg: "tcp" | "shm" | "rdma" | "auto" */
    bool fast_is_shm;             /* the fallback's fast backend is shm */
    struct xport *fast;           /* the fallback's fast backend, or NULL */
    struct xport *tcp;  /* the tcp transport (owned by the fallback, if any) */
    uint64_t loop_iters;          /* loop iterations (on_check runs) */
    uv_loop_t loop;
    struct xport *xport;
    struct idx_env *idx;
    struct repl *repl;
    struct node_server *server;
    struct node_batcher batcher;
    uv_check_t check;
    uv_idle_t idle;
    uv_signal_t sig_term;
    uv_signal_t sig_int;
    uv_timer_t watchdog;
    bool handles_init;
    int last_fsm_error;
    uint64_t idx_reopened_at; /* uv_now of the last reopen */
    int apply_err;
    uint64_t apply_err_logged_at;
    bool idle_on;
    bool dirty; /* applied since the last idx_flush */
    bool stopping;
    bool fatal; /* stop at the end of this loop iteration */
    int exit_code;
    /* Latest state reported by repl. */
    enum repl_role role;
    uint64_t leader_id;
    uint64_t term;
    bool writable;
    struct node_disk disk; /* space alarm and reserve (disk.c) */
    uint64_t disk_alarm_since; /* uv_now the leader's alarm was first seen */
    uint64_t disk_handed_at;   /* uv_now of the last hand-over attempt */
    uint64_t disk_hand_over_ms; /* wait before the next one: 3 s, doubled
                                   per failed attempt up to 48 s */
    char raft_dir[PATH_MAX];
    char index_dir[PATH_MAX];
    struct idx_result results[NODE_MAX_CMDS_PER_ENTRY];
};

static const char *role_name(enum repl_role r)
{
    switch (r) {
    case REPL_FOLLOWER:
        return "follower";
    case REPL_CANDIDATE:
        return "candidate";
    case REPL_LEADER:
        return "leader";
    default:
        return "unavailable";
    }
}

/* ---- Accessors for server.c -------------------------------------------- */

struct idx_env *node_idx(struct node *n)
{
    return n->idx;
}

struct node_batcher *node_batcher(struct node *n)
{
    return &n->batcher;
}

const struct node_config *node_config(struct node *n)
{
    return n->cfg;
}

void node_status(struct node *n, struct repl_status *out)
{
    memset(out, 0, sizeof(*out));
    out->id = n->cfg->id;
    if (n->repl != NULL && !n->stopping) {
        repl_get_status(n->repl, out);
    }
}

void node_latency(struct node *n, struct repl_latency *out, bool reset)
{
    memset(out, 0, sizeof(*out));
    if (n->repl != NULL && !n->stopping) {
        repl_get_latency(n->repl, out, reset);
    }
}

static void on_idle(uv_idle_t *h)
{
    (void)h;
}

void node_kick(struct node *n)
{
    if (n->handles_init && !n->idle_on && !n->stopping) {
        uv_idle_start(&n->idle, on_idle);
        n->idle_on = true;
    }
}

/* Tell raft when the alarm flips (a follower then takes no new entries). */
static void disk_poll(struct node *n, bool force)
{
    if (node_disk_poll(&n->disk, uv_now(&n->loop), force) && n->repl != NULL) {
        repl_set_disk_full(n->repl, n->disk.alarm);
    }
}

int node_disk_check(struct node *n, char *errmsg)
{
    disk_poll(n, false);
    return node_disk_refuse(&n->disk, errmsg);
}

/* ENOSPC met by an apply or a flush: give the reserve back to the file
 * system for the work in flight. Returns whether there was one. */
static bool disk_release(struct node *n, const char *why)
{
    bool had = n->disk.held;
    node_disk_release(&n->disk, why);
    if (n->repl != NULL) {
        repl_set_disk_full(n->repl, true);
    }
    return had;
}

/* ---- FSM ---------------------------------------------------------------- */

static void node_stop(struct node *n);

/* A failed fsync of the index is never retried or cured by a reopen
 * (idx_sync_failed, fsyncgate): stop the process, which restarts and
 * re-applies from the raft log. Returns whether it did. */
static bool stop_if_sync_failed(struct node *n)
{
    if (n->idx == NULL || !idx_sync_failed(n->idx)) {
        return false;
    }
    if (!n->fatal) {
        node_log(NODE_LOG_ERROR, "index sync failed, exiting",
                 "err=%s detail=\"%s\"", tern_err_name(idx_status(n->idx)),
                 idx_errmsg(n->idx));
        n->exit_code = 1;
        n->fatal = true; /* stopped from on_check, not inside repl */
        node_kick(n);
    }
    return true;
}

/* force: skip the once-a-second limit (the reserve was just released, so
 * the retry can succeed). */
static int idx_reopen(struct node *n, bool force)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct idx_options io;
    uint64_t now = uv_now(&n->loop);
    int status = idx_status(n->idx);
    int rv;

    if (!force && n->idx_reopened_at != 0 && now - n->idx_reopened_at < 1000) {
        return status;
    }
    n->idx_reopened_at = now;
    node_log(NODE_LOG_WARN, "reopening the index after a failed apply",
             "err=%s", tern_err_name(status));
    idx_close(n->idx);
    n->idx = NULL;
    n->dirty = false;
    memset(&io, 0, sizeof(io));
    io.dir = n->index_dir;
    io.max_message = (uint32_t)n->cfg->max_message_bytes;
    rv = idx_open(&io, &n->idx, errmsg);
    if ((rv == TERN_EFULL || rv == -ENOSPC) &&
        disk_release(n, "index reopen: no space left")) {
        /* Rebuilding LMDB from the log needs room: the reserve's. */
        node_log(NODE_LOG_WARN, "retrying the index reopen in the disk "
                 "reserve", "detail=\"%s\"", errmsg);
        errmsg[0] = '\0';
        rv = idx_open(&io, &n->idx, errmsg);
    }
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "cannot reopen the index, exiting",
                 "err=%s detail=\"%s\"", tern_err_name(rv), errmsg);
        n->idx = NULL;
        n->exit_code = 1;
        n->fatal = true; /* stopped from on_check, not inside repl */
        node_kick(n);
        return rv;
    }
    node_log(NODE_LOG_INFO, "index reopened",
             "last_applied=%llu log_end=%llu truncated_bytes=%llu",
             (unsigned long long)idx_last_applied(n->idx),
             (unsigned long long)idx_log_end(n->idx),
             (unsigned long long)idx_truncated_bytes(n->idx));
    return 0;
}

static int fsm_apply(void *arg, uint64_t index, const void *buf, size_t len)
{
    struct node *n = arg;
    unsigned nr = 0;
    int rv;

    if (n->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    if (stop_if_sync_failed(n)) {
        return idx_status(n->idx);
    }
    if (idx_status(n->idx) != 0) {
        /* A failed apply (disk full, I/O error) is sticky until the env is
         * reopened; repl retries the entry, so reopen (at most once a
         * second) and try again: this is how the node recovers once space
         * returns. */
        rv = idx_reopen(n, false);
        if (rv != 0) {
            return rv;
        }
    }
    len = idx_cmd_entry_len(buf, len);
    rv = idx_apply(n->idx, index, buf, len, n->results, NODE_MAX_CMDS_PER_ENTRY,
                   &nr);
    if ((rv == TERN_EFULL || rv == -ENOSPC) &&
        disk_release(n, "apply: no space left")) {
        /* The reserve's blocks are free now (disk.c): retry once, on a
         * reopened env (a failed apply is sticky). */
        node_log(NODE_LOG_WARN, "retrying the apply in the disk reserve",
                 "index=%llu", (unsigned long long)index);
        rv = idx_reopen(n, true);
        if (rv != 0) {
            return rv; /* n->idx is gone: the node is stopping */
        }
        rv = idx_apply(n->idx, index, buf, len, n->results,
                       NODE_MAX_CMDS_PER_ENTRY, &nr);
    }
    if (rv != 0) {
        uint64_t now = uv_now(&n->loop);
        /* repl retries the entry: log a repeated failure once a second. */
        if (rv != n->apply_err || now - n->apply_err_logged_at >= 1000) {
            node_log(NODE_LOG_ERROR, "apply failed",
                     "index=%llu err=%s detail=\"%s\"",
                     (unsigned long long)index, tern_err_name(rv),
                     idx_errmsg(n->idx));
            n->apply_err = rv;
            n->apply_err_logged_at = now;
        }
        return rv == -ENOSPC ? TERN_EFULL : rv;
    }
    n->apply_err = 0;
    n->dirty = true;
    node_kick(n);
    node_batcher_on_apply(&n->batcher, index, buf, len, n->results, nr);
    return 0;
}

static int fsm_snapshot(void *arg,
                        uint64_t last_applied,
                        void **manifest,
                        size_t *manifest_len)
{
    struct node *n = arg;
    struct tern_wbuf w;
    int rv;

    if (n->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    tern_wbuf_init(&w);
    rv = idx_snapshot(n->idx, &w);
    if (rv == 0 && w.err != 0) {
        rv = w.err;
    }
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "snapshot failed",
                 "last_applied=%llu err=%s detail=\"%s\"",
                 (unsigned long long)last_applied, tern_err_name(rv),
                 idx_errmsg(n->idx));
        tern_wbuf_free(&w);
        (void)stop_if_sync_failed(n);
        return rv;
    }
    n->dirty = false; /* idx_snapshot flushed */
    node_log(NODE_LOG_INFO, "snapshot taken",
             "last_applied=%llu idx_last_applied=%llu log_end=%llu "
             "manifest_bytes=%zu",
             (unsigned long long)last_applied,
             (unsigned long long)idx_last_applied(n->idx),
             (unsigned long long)idx_log_end(n->idx), w.len);
    *manifest = w.base;
    *manifest_len = w.len;
    return 0;
}

static int fsm_restore(void *arg, const void *manifest, size_t manifest_len)
{
    struct node *n = arg;
    int rv;
    if (n->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_restore(n->idx, manifest, manifest_len);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "restore failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), idx_errmsg(n->idx));
        return rv;
    }
    n->dirty = true;
    node_kick(n);
    node_log(NODE_LOG_INFO, "restored snapshot",
             "last_applied=%llu log_end=%llu",
             (unsigned long long)idx_last_applied(n->idx),
             (unsigned long long)idx_log_end(n->idx));
    return 0;
}

static int fsm_bulk_range(void *arg,
                          const void *manifest,
                          size_t len,
                          uint64_t *from,
                          uint64_t *to)
{
    struct node *n = arg;
    int rv;
    if (n->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_bulk_range(n->idx, manifest, len, from, to);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "bulk range failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), idx_errmsg(n->idx));
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
    struct node *n = arg;
    int rv;
    if (n->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_bulk_read(n->idx, pos, buf, cap, nread);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "bulk read failed",
                 "pos=%llu err=%s detail=\"%s\"", (unsigned long long)pos,
                 tern_err_name(rv), idx_errmsg(n->idx));
    }
    return rv;
}

static int fsm_bulk_write(void *arg, uint64_t pos, const void *buf, size_t len)
{
    struct node *n = arg;
    int rv;
    if (n->idx == NULL) {
        return TERN_ESHUTDOWN;
    }
    rv = idx_bulk_write(n->idx, pos, buf, len);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "bulk write failed",
                 "pos=%llu bytes=%zu err=%s detail=\"%s\"",
                 (unsigned long long)pos, len, tern_err_name(rv),
                 idx_errmsg(n->idx));
    }
    return rv;
}

static void on_state(void *arg,
                     enum repl_role role,
                     uint64_t leader_id,
                     uint64_t term,
                     bool writable)
{
    struct node *n = arg;
    const struct node_peer *lp = node_config_peer(n->cfg, leader_id);
    node_log(NODE_LOG_INFO, "raft state changed",
             "role=%s leader=%llu leader_client_addr=%s term=%llu "
             "writable=%s prev_role=%s prev_leader=%llu prev_term=%llu",
             role_name(role), (unsigned long long)leader_id,
             lp != NULL ? lp->client_addr : "-", (unsigned long long)term,
             writable ? "true" : "false", role_name(n->role),
             (unsigned long long)n->leader_id, (unsigned long long)n->term);
    bool was_writable = n->writable;
    n->role = role;
    n->leader_id = leader_id;
    n->term = term;
    n->writable = writable;
    if (was_writable && !writable && n->server != NULL) {
        /* Parked leader-only fetches are refused now (server.c). */
        node_server_wake(n->server);
    }
    /* Busy-poll where answers come back at once: a leader's AppendEntries.
     * A follower spins for the next AppendEntries only if configured: it
     * waits for the next client write, so it spins on every commit (the
     * cost of skipping an idle vCPU's wake-up, bench/replication.sh). */
    unsigned spin_us = role == REPL_LEADER ? n->cfg->busy_poll_us
                                           : n->cfg->follower_busy_poll_us;
    if (n->fast != NULL && n->fast_is_shm) {
        (void)xport_shm_set_busy_poll(n->fast, spin_us);
    } else if (n->fast != NULL) {
#ifdef TERN_HAVE_VERBS
        /* transport=rdma: poll the CQs instead of the channel's wake-up. */
        (void)xport_verbs_set_busy_poll(n->fast, spin_us);
#endif
    } else if (n->fast == NULL && n->tcp != NULL) {
        /* transport=tcp: the same loop-level polling on the sockets. */
        (void)xport_tcp_set_busy_poll(n->tcp, spin_us);
    }
}

/* ---- Batcher ops -------------------------------------------------------- */

static void on_proposed(void *data, int status, uint64_t index)
{
    struct node_batch *batch = data;
    struct node *n = batch->batcher->arg;
    if (status != 0) {
        node_log(NODE_LOG_DEBUG, "proposal failed",
                 "index=%llu err=%s commands=%u", (unsigned long long)index,
                 tern_err_name(status), batch->n_cmds);
    }
    node_batcher_proposed(batch, status, index);
    node_kick(n);
}

static int batch_propose(void *arg,
                         struct node_batch *batch,
                         void *buf,
                         size_t len,
                         uint64_t *index)
{
    struct node *n = arg;
    if (n->repl == NULL || n->stopping) {
        return TERN_ESHUTDOWN;
    }
    return repl_propose(n->repl, buf, len, on_proposed, batch, index);
}

static uint64_t batch_timestamp(void *arg)
{
    struct timespec ts;
    (void)arg;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void batch_respond(void *arg, struct node_wreq *w)
{
    (void)arg;
    node_server_respond(NULL, w);
}

/* ---- Loop hooks --------------------------------------------------------- */

static void on_check(uv_check_t *h)
{
    struct node *n = h->data;
    bool flushed = false;

    n->loop_iters++;
    if (n->fatal && !n->stopping) {
        node_stop(n);
    }
    if (!n->stopping) {
        node_batcher_propose(&n->batcher);
    }
    if (n->dirty && n->idx != NULL) {
        int rv = idx_flush(n->idx);
        if (rv != 0) {
            node_log(NODE_LOG_ERROR, "index flush failed",
                     "err=%s detail=\"%s\"", tern_err_name(rv),
                     idx_errmsg(n->idx));
            if (rv == TERN_EFULL || rv == -ENOSPC) {
                /* The next apply reopens the env (rebuilt from the commit
                 * log) in the space the reserve gives back. */
                disk_release(n, "index flush: no space left");
                n->idx_reopened_at = 0;
            }
        }
        n->dirty = false;
        flushed = true;
    }
    node_batcher_flushed(&n->batcher);
    if (n->server != NULL) {
        if (flushed) {
            node_server_wake(n->server);
        }
        node_server_update_reading(n->server);
    }
    if (n->idle_on) {
        uv_idle_stop(&n->idle);
        n->idle_on = false;
    }
}

/* ---- Start and stop ----------------------------------------------------- */

static void handle_closed(uv_handle_t *h)
{
    (void)h;
}

static void close_own_handles(struct node *n)
{
    if (!n->handles_init) {
        return;
    }
    n->handles_init = false;
    uv_close((uv_handle_t *)&n->check, handle_closed);
    uv_close((uv_handle_t *)&n->idle, handle_closed);
    uv_close((uv_handle_t *)&n->sig_term, handle_closed);
    uv_close((uv_handle_t *)&n->sig_int, handle_closed);
    uv_close((uv_handle_t *)&n->watchdog, handle_closed);
}

static void on_xport_closed(void *arg)
{
    struct node *n = arg;
    node_log(NODE_LOG_DEBUG, "transport closed", NULL);
    close_own_handles(n);
}

static void after_repl(struct node *n)
{
    /* Answers of applied batches: their connections are gone already. */
    node_batcher_flushed(&n->batcher);
    node_batcher_fail_pending(&n->batcher, TERN_ESHUTDOWN);
    if (n->idx != NULL) {
        idx_close(n->idx);
        n->idx = NULL;
        node_log(NODE_LOG_DEBUG, "index closed", NULL);
    }
    if (n->xport != NULL) {
        struct xport *x = n->xport;
        n->xport = NULL;
        n->tcp = NULL;
        xport_close(x, on_xport_closed, n);
    } else {
        close_own_handles(n);
    }
}

static void on_repl_closed(void *arg)
{
    struct node *n = arg;
    node_log(NODE_LOG_DEBUG, "raft closed", NULL);
    after_repl(n);
}

static void on_server_closed(void *arg)
{
    (void)arg;
    node_log(NODE_LOG_DEBUG, "client server closed", NULL);
}

/* One INFO line at shutdown with the replication stage breakdown
 * (repl.h, enum repl_stage: p50 and p99 in us since the last latency
 * reset), the loop iterations and the fast backend's counters (shm:
 * doorbells, wake-ups, busy-poll rounds; verbs: doorbells, busy-poll
 * rounds): what bench/replication.sh --stages prints per node. */
static void log_stages(struct node *n)
{
    struct repl_latency *st, *lat; /* ~8 KiB each: off the stack */
    char buf[1024];
    size_t off = 0;
    struct xport_shm_stats ss;
    struct xport_fallback_stats fs;

    if (!node_log_enabled(NODE_LOG_INFO) || n->repl == NULL) {
        return;
    }
    st = tern_calloc(REPL_STAGE__COUNT + 1, sizeof *st);
    if (st == NULL) {
        return; /* a profiling line: skipped when memory is short */
    }
    lat = &st[REPL_STAGE__COUNT];
    repl_get_latency(n->repl, lat, false);
    repl_get_stages(n->repl, st, false);
    for (unsigned i = 0; i < REPL_STAGE__COUNT && off < sizeof buf; i++) {
        int k = snprintf(buf + off, sizeof buf - off, "%s%s=%llu/%.1f/%.1f",
                         i ? " " : "", repl_stage_name(i),
                         (unsigned long long)st[i].count,
                         (double)repl_latency_quantile(&st[i], 0.5) / 1e3,
                         (double)repl_latency_quantile(&st[i], 0.99) / 1e3);
        if (k < 0) {
            break;
        }
        off += (size_t)k;
    }
    memset(&ss, 0, sizeof ss);
    memset(&fs, 0, sizeof fs);
    if (n->fast != NULL && n->fast_is_shm) {
        (void)xport_shm_stats(n->fast, &ss);
    }
#ifdef TERN_HAVE_VERBS
    if (n->fast != NULL && !n->fast_is_shm) {
        /* spins/spin_hits: the fast backend's busy-poll rounds. */
        struct xport_verbs_stats vs;
        if (xport_verbs_stats(n->fast, &vs) == 0) {
            ss.spins = vs.spins;
            ss.spin_hits = vs.spin_hits;
            ss.doorbells = vs.doorbells;
        }
    }
#endif
    if (n->fast != NULL) {
        (void)xport_fallback_stats(n->xport, &fs);
    }
    node_log(NODE_LOG_INFO, "replication stages",
             "commits=%llu loop_iters=%llu doorbells=%llu wakeups=%llu "
             "spins=%llu spin_hits=%llu spin_us=%llu fast_sends=%llu "
             "slow_sends=%llu to_slow=%llu to_fast=%llu "
             "stages(count/p50us/p99us)=\"%s\"",
             (unsigned long long)lat->count, (unsigned long long)n->loop_iters,
             (unsigned long long)ss.doorbells, (unsigned long long)ss.wakeups,
             (unsigned long long)ss.spins, (unsigned long long)ss.spin_hits,
             (unsigned long long)(ss.spin_ns / 1000),
             (unsigned long long)fs.fast_sends,
             (unsigned long long)fs.slow_sends, (unsigned long long)fs.to_slow,
             (unsigned long long)fs.to_fast, buf);
    tern_free(st);
}

static void node_stop(struct node *n)
{
    if (n->stopping) {
        return;
    }
    log_stages(n);
    n->stopping = true;
    if (n->server != NULL) {
        struct node_server *s = n->server;
        n->server = NULL;
        node_server_close(s, on_server_closed, n);
    }
    node_batcher_fail_pending(&n->batcher, TERN_ESHUTDOWN);
    if (n->repl != NULL) {
        struct repl *r = n->repl;
        n->repl = NULL;
        repl_close(r, on_repl_closed, n);
    } else {
        after_repl(n);
    }
}

/* repl reports the last FSM error, and fail-stops the replica after a
 * failed FSM apply or raft log write (libraft 0.15 would not retry a failed
 * apply on an idle cluster, see raft/fsm.c). A fail-stopped replica needs a
 * restart, so the node exits 1 and leaves that to its supervisor; on
 * restart the entries are applied again from the raft log. */
/* A leader whose disk is full refuses every write, while a follower with
 * space could take them: after a second of alarm, ask raft to hand the
 * leadership over (0.15 picks the most up-to-date voter; a full follower
 * drops the TimeoutNow, guard.c item 11, and the leader carries on), again
 * after 3 s, doubling up to 48 s while attempts fail (jepsen F5). */
static void disk_hand_over(struct node *n, const struct repl_status *st)
{
    uint64_t now = uv_now(&n->loop);
    int rv;
    if (!n->disk.alarm || st->role != REPL_LEADER || n->cfg->n_peers < 2) {
        n->disk_alarm_since = 0;
        n->disk_hand_over_ms = 3000;
        return;
    }
    if (n->disk_alarm_since == 0) {
        n->disk_alarm_since = now;
        n->disk_handed_at = 0;
        n->disk_hand_over_ms = 3000;
    }
    if (now - n->disk_alarm_since < 1000 ||
        (n->disk_handed_at != 0 &&
         now - n->disk_handed_at < n->disk_hand_over_ms)) {
        return;
    }
    if (n->disk_handed_at != 0 && n->disk_hand_over_ms < 48000) {
        n->disk_hand_over_ms *= 2; /* still leading: the others are full */
    }
    n->disk_handed_at = now;
    rv = repl_transfer(n->repl, 0);
    node_log(rv == 0 ? NODE_LOG_WARN : NODE_LOG_INFO,
             "disk full on the leader: handing leadership over",
             "result=%s free_bytes=%llu", rv == 0 ? "started" : tern_err_name(rv),
             (unsigned long long)n->disk.free);
}

static void on_watchdog(uv_timer_t *t)
{
    struct node *n = t->data;
    struct repl_status st;
    if (n->stopping || n->repl == NULL) {
        return;
    }
    disk_poll(n, false);
    repl_get_status(n->repl, &st);
    disk_hand_over(n, &st);
    if (st.fsm_error != n->last_fsm_error) {
        node_log(st.fsm_error != 0 ? NODE_LOG_ERROR : NODE_LOG_INFO,
                 st.fsm_error != 0 ? "state machine apply failed"
                                   : "state machine apply recovered",
                 "err=%s last_applied=%llu commit_index=%llu",
                 tern_err_name(st.fsm_error),
                 (unsigned long long)st.last_applied,
                 (unsigned long long)st.commit_index);
        n->last_fsm_error = st.fsm_error;
    }
    if (st.failed != 0) {
        node_log(NODE_LOG_ERROR, "raft replica fail-stopped, exiting", "err=%s",
                 tern_err_name(st.failed));
        n->exit_code = 1;
        node_stop(n);
    }
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct node *n = h->data;
    if (n->stopping) {
        node_log(NODE_LOG_WARN, "signal during shutdown ignored", "signal=%s",
                 signum == SIGINT ? "INT" : "TERM");
        return;
    }
    node_log(NODE_LOG_INFO, "stopping", "signal=%s",
             signum == SIGINT ? "INT" : "TERM");
    node_stop(n);
}

static int mkdir_p(const char *path, char *errmsg)
{
    char tmp[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(tmp)) {
        tern_errmsg_printf(errmsg, "bad directory path '%s'", path);
        return TERN_EINVAL;
    }
    memcpy(tmp, path, len + 1);
    for (char *p = tmp + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
                tern_errmsg_printf(errmsg, "mkdir %s: %s", tmp,
                                   strerror(errno));
                return -errno;
            }
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        tern_errmsg_printf(errmsg, "mkdir %s: %s", tmp, strerror(errno));
        return -errno;
    }
    return 0;
}

/* raft_uv 0.15 renames a last closed segment that fails its checksum at
 * load to "corrupt-<ns>-<name>" and starts without its entries, which this
 * node may have acknowledged (a voter that forgets acknowledged entries
 * can elect a leader without them). Counts those files in dir and copies
 * the greatest name (the newest) into newest (cap bytes, may be NULL). */
static unsigned count_corrupt_segments(const char *dir, char *newest,
                                       size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    unsigned n = 0;
    if (newest != NULL && cap > 0) {
        newest[0] = '\0';
    }
    if (d == NULL) {
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "corrupt-", 8) != 0) {
            continue;
        }
        n++;
        if (newest != NULL && strcmp(de->d_name, newest) > 0) {
            (void)snprintf(newest, cap, "%s", de->d_name);
        }
    }
    closedir(d);
    return n;
}

static int write_pid_file(const char *path, char *errmsg)
{
    char buf[32];
    int len = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        tern_errmsg_printf(errmsg, "pid file %s: %s", path, strerror(errno));
        return -errno;
    }
    if (write(fd, buf, (size_t)len) != len) {
        tern_errmsg_printf(errmsg, "pid file %s: short write", path);
        close(fd);
        return -EIO;
    }
    close(fd);
    return 0;
}

static void log_config(const struct node_config *c)
{
    char peers[1024];
    size_t off = 0;
    peers[0] = '\0';
    for (unsigned i = 0; i < c->n_peers && off < sizeof(peers); i++) {
        int k = snprintf(peers + off, sizeof(peers) - off, "%s%llu=%s/%s",
                         i == 0 ? "" : ",", (unsigned long long)c->peers[i].id,
                         c->peers[i].raft_addr, c->peers[i].client_addr);
        if (k < 0) {
            break;
        }
        off += (size_t)k;
    }
    node_log(NODE_LOG_INFO, "config",
             "data_dir=%s client_addr=%s raft_addr=%s transport=%s "
             "election_timeout_ms=%u heartbeat_ms=%u snapshot_bytes=%llu "
             "snapshot_trailing=%u max_message_bytes=%llu "
             "max_frame_bytes=%llu min_free_disk_bytes=%llu "
             "reserve_disk_bytes=%llu log_level=%s peers=%s",
             c->data_dir, c->client_addr, c->raft_addr, c->transport,
             c->election_timeout_ms, c->heartbeat_ms,
             (unsigned long long)c->snapshot_bytes, c->snapshot_trailing,
             (unsigned long long)c->max_message_bytes,
             (unsigned long long)c->max_frame_bytes,
             (unsigned long long)c->min_free_disk_bytes,
             (unsigned long long)c->reserve_disk_bytes,
             node_log_level_name((enum node_log_level)c->log_level), peers);
}

/* ---- Transport selection ----------------------------------------------- */

/* The shm socket of the node whose raft address is raft_addr
 * ("host:port" -> <shm_dir>/tern-shm-<host>-<port>.sock). Returns 0,
 * TERN_EINVAL, or -ENAMETOOLONG when it does not fit a unix socket path. */
static int shm_socket_path(const char *shm_dir,
                           const char *raft_addr,
                           char *out,
                           size_t cap)
{
    const char *colon = strrchr(raft_addr, ':');
    int k;
    if (colon == NULL) {
        return TERN_EINVAL;
    }
    k = snprintf(out, cap, "%s/tern-shm-%.*s-%s.sock", shm_dir,
                 (int)(colon - raft_addr), raft_addr, colon + 1);
    if (k < 0 || (size_t)k >= cap || (size_t)k >= 108) {
        return -ENAMETOOLONG;
    }
    return 0;
}

/* xport_fallback_options.fast_address: a peer's fast address from its raft
 * address, by the rule its own node uses to listen. */
static int node_fast_address(void *arg,
                             uint64_t peer_id,
                             const char *slow_address,
                             char *out,
                             size_t cap)
{
    struct node *n = arg;
    size_t len = strlen(slow_address);
    (void)peer_id;
    if (n->fast_is_shm) {
        return shm_socket_path(n->cfg->shm_dir, slow_address, out, cap);
    }
    /* verbs: the raft address itself, in rdma_cm's port space. */
    if (len >= cap) {
        return -ENAMETOOLONG;
    }
    memcpy(out, slow_address, len + 1);
    return 0;
}

/* Wrap n->xport (tcp, owned by n) and fast into a fallback composite. On
 * failure fast is closed and n->xport stays the tcp transport (node_stop
 * closes it). */
static int wrap_fallback(struct node *n, struct xport *fast, char *errmsg)
{
    struct xport_fallback_options fo;
    struct xport *fb = NULL;
    int rv;

    memset(&fo, 0, sizeof(fo));
    n->fast_is_shm = strcmp(xport_name(fast), "shm") == 0;
    /* shm: a failed fast send at start-up (the peer's socket not there
     * yet) kept that peer on tcp for a whole second (seen in
     * bench/replication.sh --stages: ~1500 AppendEntries over tcp after
     * "cluster up"); a probe is one unix-socket connect, so retry sooner.
     * verbs keeps 1 s (an rdma_cm connect is dearer). */
    fo.retry_ms = n->fast_is_shm ? 200 : 1000;
    fo.fast_address = node_fast_address;
    fo.fast_address_arg = n;
    rv = xport_fallback_new(&n->loop, fast, n->xport, &fo, &fb, errmsg);
    if (rv == 0) {
        n->fast = fast; /* owned by the fallback: closed with it */
    }
    if (rv != 0) {
        xport_close(fast, NULL, NULL);
        return rv;
    }
    n->xport = fb;
    (void)snprintf(n->transport_name, sizeof(n->transport_name), "%s",
                   xport_name(fb));
    return 0;
}

/* Smallest power of two ring (at least 8 MiB) that carries an entry of
 * max_message_bytes plus framing in one message; larger messages go over
 * tcp (rdma/fallback.c). */
static size_t shm_ring_bytes(const struct node_config *c)
{
    size_t want = 2 * ((size_t)c->max_message_bytes + NODE_FRAME_OVERHEAD +
                       ((size_t)64 << 10));
    size_t ring = (size_t)8 << 20;
    while (ring < want && ring < ((size_t)1 << 30)) {
        ring <<= 1;
    }
    return ring;
}

/* Create n->xport according to the requested transport (see the top of
 * the file). On failure whatever exists is left in n->xport for
 * node_stop. */
static int transport_new(struct node *n, const char *want, char *errmsg)
{
    const struct node_config *c = n->cfg;
    struct xport_tcp_options xo;
    struct xport *fast = NULL;
    int devices;
    int rv;

    memset(&xo, 0, sizeof(xo));
    rv = xport_tcp_new(&n->loop, c->id, c->raft_addr, &xo, &n->xport, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "raft transport on %s", c->raft_addr);
        return rv;
    }
    n->tcp = n->xport;
    (void)snprintf(n->transport_name, sizeof(n->transport_name), "tcp");
    if (strcmp(want, "shm") == 0) {
        struct xport_shm_options so;
        char path[128];
        rv = shm_socket_path(c->shm_dir, c->raft_addr, path, sizeof(path));
        if (rv != 0) {
            tern_errmsg_printf(errmsg, "shm socket path for %s in %s: %s",
                               c->raft_addr, c->shm_dir, tern_strerror(rv));
            return rv;
        }
        memset(&so, 0, sizeof(so));
        so.ring_bytes = shm_ring_bytes(c);
        rv = xport_shm_new(&n->loop, c->id, path, &so, &fast, errmsg);
        if (rv != 0) {
            tern_errmsg_wrapf(errmsg, "shm transport on %s", path);
            return rv;
        }
        node_log(NODE_LOG_INFO, "shm transport listening",
                 "path=%s ring_bytes=%zu", path, so.ring_bytes);
        return wrap_fallback(n, fast, errmsg);
    }
    if (strcmp(want, "rdma") != 0 && strcmp(want, "auto") != 0) {
        return 0;
    }
    devices = xport_rdma_device_count();
#ifdef TERN_HAVE_VERBS
    if (devices > 0) {
        struct xport_verbs_options vo;
        char verrmsg[TERN_ERRMSG_SIZE] = "";
        memset(&vo, 0, sizeof(vo));
        vo.ring_bytes = shm_ring_bytes(c);
        rv = xport_verbs_new(&n->loop, c->id, c->raft_addr, &vo, &fast,
                             verrmsg);
        if (rv == 0) {
            node_log(NODE_LOG_INFO, "verbs transport listening",
                     "addr=%s devices=%d", c->raft_addr, devices);
            return wrap_fallback(n, fast, errmsg);
        }
        if (strcmp(want, "rdma") == 0) {
            tern_errmsg_printf(errmsg, "rdma transport on %s: %s",
                               c->raft_addr, verrmsg);
            return rv;
        }
        node_log(NODE_LOG_WARN, "rdma unavailable, using tcp",
                 "transport=auto detail=\"%s\"", verrmsg);
        return 0;
    }
#endif
    if (strcmp(want, "rdma") == 0) {
#ifdef TERN_HAVE_VERBS
        tern_errmsg_printf(errmsg, "transport rdma: no RDMA device found (use "
                                   "--transport tcp, shm or auto)");
#else
        tern_errmsg_printf(errmsg,
                           "transport rdma: ternd was built without "
                           "libibverbs/librdmacm (use --transport tcp, shm "
                           "or auto)");
#endif
        return -ENODEV;
    }
    node_log(NODE_LOG_INFO, "no RDMA device, using tcp",
             "transport=auto devices=%d", devices);
    return 0;
}

/* Everything up to uv_run. On failure the node is left for node_stop to
 * unwind (whatever was created is closed in order). */
static int node_start(struct node *n, char *errmsg)
{
    const struct node_config *c = n->cfg;
    struct idx_options io;
    struct repl_config rc;
    struct repl_peer *rpeers = NULL;
    struct node_batcher_ops bops = {batch_propose, batch_respond,
                                    batch_timestamp};
    static const struct repl_fsm fsm_template = {
        NULL,           fsm_apply,     fsm_snapshot,   fsm_restore,
        fsm_bulk_range, fsm_bulk_read, fsm_bulk_write,
    };
    struct repl_fsm fsm = fsm_template;
    char corrupt_name[256];
    int rv;

    node_batcher_init(&n->batcher, &bops, n);

    uv_check_init(&n->loop, &n->check);
    uv_idle_init(&n->loop, &n->idle);
    uv_signal_init(&n->loop, &n->sig_term);
    uv_signal_init(&n->loop, &n->sig_int);
    uv_timer_init(&n->loop, &n->watchdog);
    n->watchdog.data = n;
    n->check.data = n;
    n->sig_term.data = n;
    n->sig_int.data = n;
    n->handles_init = true;
    uv_check_start(&n->check, on_check);
    uv_signal_start(&n->sig_term, on_signal, SIGTERM);
    uv_signal_start(&n->sig_int, on_signal, SIGINT);
    uv_timer_start(&n->watchdog, on_watchdog, 100, 100);

    if (snprintf(n->raft_dir, sizeof(n->raft_dir), "%s/raft", c->data_dir) >=
            (int)sizeof(n->raft_dir) ||
        snprintf(n->index_dir, sizeof(n->index_dir), "%s/index", c->data_dir) >=
            (int)sizeof(n->index_dir)) {
        tern_errmsg_printf(errmsg, "data dir path too long");
        return TERN_EINVAL;
    }
    rv = mkdir_p(c->data_dir, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = node_disk_init(&n->disk, c->data_dir, c->min_free_disk_bytes,
                        c->reserve_disk_bytes, errmsg);
    if (rv != 0) {
        return rv;
    }

    memset(&io, 0, sizeof(io));
    io.dir = n->index_dir;
    io.max_message = (uint32_t)c->max_message_bytes;
    rv = idx_open(&io, &n->idx, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "index %s", n->index_dir);
        return rv;
    }
    node_log(idx_truncated_bytes(n->idx) > 0 ? NODE_LOG_WARN : NODE_LOG_INFO,
             "index opened",
             "dir=%s last_applied=%llu log_end=%llu truncated_bytes=%llu "
             "cut=\"%s\"",
             n->index_dir, (unsigned long long)idx_last_applied(n->idx),
             (unsigned long long)idx_log_end(n->idx),
             (unsigned long long)idx_truncated_bytes(n->idx),
             idx_cut_note(n->idx));

    rv = transport_new(n, n->transport_requested, errmsg);
    if (rv != 0) {
        return rv;
    }
    node_log(NODE_LOG_INFO, "transport selected", "requested=%s selected=%s",
             n->transport_requested, n->transport_name);

    rpeers = tern_calloc(c->n_peers, sizeof(*rpeers));
    if (rpeers == NULL) {
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    for (unsigned i = 0; i < c->n_peers; i++) {
        rpeers[i].id = c->peers[i].id;
        rpeers[i].address = c->peers[i].raft_addr;
    }
    memset(&rc, 0, sizeof(rc));
    rc.id = c->id;
    rc.address = c->raft_addr;
    rc.data_dir = n->raft_dir;
    rc.peers = rpeers;
    rc.n_peers = c->n_peers;
    rc.election_timeout_ms = c->election_timeout_ms;
    rc.heartbeat_ms = c->heartbeat_ms;
    rc.snapshot_threshold_bytes = c->snapshot_bytes;
    rc.snapshot_trailing = c->snapshot_trailing;
    rc.durability = c->memory_durability ? REPL_DURABILITY_MEMORY
                                         : REPL_DURABILITY_DISK;
    rv = repl_config_validate(&rc, errmsg);
    if (rv == 0) {
        fsm.arg = n;
        rv = repl_new(&n->loop, n->xport, &rc, &fsm, on_state, n, &n->repl,
                      errmsg);
    }
    tern_free(rpeers);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "raft");
        return rv;
    }
    repl_set_disk_full(n->repl, n->disk.alarm);
    rv = repl_start(n->repl, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "raft start");
        return rv;
    }
    /* Also on every later start: the entries stay dropped. An operator
     * removes the file once the node was rebuilt from its peers. */
    if (count_corrupt_segments(n->raft_dir, corrupt_name,
                               sizeof(corrupt_name)) > 0) {
        tern_errmsg_printf(errmsg,
                           "raft log checksum mismatch at load: raft_uv "
                           "moved the segment to raft/%s and dropped its "
                           "entries (maybe acknowledged); must not vote",
                           corrupt_name);
        return TERN_ECORRUPT;
    }
    {
        /* The index only holds committed entries, so when it is ahead of
         * the local raft log (libraft 0.15 may apply entries a follower
         * has not stored yet, #423; a kill -9 then loses them locally)
         * the missing entries come back from the leader with the same
         * contents. A single-node cluster has no one to get them from: a
         * new entry would reuse an index the index already holds, be
         * skipped by idx_apply and be acknowledged without being stored.
         * Refuse to start then. */
        struct repl_status st;
        uint64_t applied = idx_last_applied(n->idx);
        repl_get_status(n->repl, &st);
        node_log(NODE_LOG_INFO, "raft loaded",
                 "last_index=%llu last_applied=%llu commit_index=%llu "
                 "term=%llu",
                 (unsigned long long)st.last_index,
                 (unsigned long long)st.last_applied,
                 (unsigned long long)st.commit_index,
                 (unsigned long long)st.term);
        if (applied > st.last_index && c->n_peers == 1) {
            tern_errmsg_printf(errmsg,
                               "index last_applied %llu is ahead of the "
                               "raft log (last index %llu): the raft log "
                               "lost committed entries; refusing to start",
                               (unsigned long long)applied,
                               (unsigned long long)st.last_index);
            return TERN_ECORRUPT;
        }
        if (applied > st.last_index) {
            node_log(NODE_LOG_WARN, "index ahead of the raft log",
                     "idx_last_applied=%llu raft_last_index=%llu "
                     "missing=%llu (expected back from the leader)",
                     (unsigned long long)applied,
                     (unsigned long long)st.last_index,
                     (unsigned long long)(applied - st.last_index));
        }
    }
    rv = node_server_new(n, &n->loop, c->client_addr, &n->server, errmsg);
    if (rv != 0) {
        tern_errmsg_wrapf(errmsg, "client server on %s", c->client_addr);
        return rv;
    }
    if (c->pid_file != NULL) {
        rv = write_pid_file(c->pid_file, errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    return 0;
}

int node_run(const struct node_config *c)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct node *n;
    int rv;

    node_log_setup(c->id, (enum node_log_level)c->log_level);
    (void)signal(SIGPIPE, SIG_IGN);
    n = tern_calloc(1, sizeof(*n));
    if (n == NULL) {
        node_log(NODE_LOG_ERROR, "out of memory", NULL);
        return 1;
    }
    n->cfg_view = *c;
    (void)snprintf(n->transport_requested, sizeof(n->transport_requested),
                   "%s", c->transport);
    (void)snprintf(n->transport_name, sizeof(n->transport_name), "%s",
                   c->transport);
    n->cfg_view.transport = n->transport_name;
    n->cfg = &n->cfg_view;
    rv = uv_loop_init(&n->loop);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "uv_loop_init failed", "err=%s",
                 uv_strerror(rv));
        tern_free(n);
        return 1;
    }
    node_log(NODE_LOG_INFO, "starting", "pid=%ld version=%s", (long)getpid(),
             "0.1.0");
    log_config(c);
    rv = node_start(n, errmsg);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "start failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), errmsg);
        n->exit_code = 1;
        node_stop(n);
    } else {
        node_log(NODE_LOG_INFO, "started",
                 "client_addr=%s raft_addr=%s data_dir=%s", c->client_addr,
                 c->raft_addr, c->data_dir);
    }
    uv_run(&n->loop, UV_RUN_DEFAULT);
    rv = uv_loop_close(&n->loop);
    if (rv != 0) {
        node_log(NODE_LOG_WARN, "loop closed with open handles", "err=%s",
                 uv_strerror(rv));
    }
    if (c->pid_file != NULL && n->exit_code == 0) {
        unlink(c->pid_file);
    }
    rv = n->exit_code;
    node_log(NODE_LOG_INFO, "stopped", "exit_code=%d", rv);
    tern_free(n);
    return rv;
}
