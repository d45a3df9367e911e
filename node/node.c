/*
 * The wiring of one ternd process: the raft transport (transport.c over
 * rdma/), repl (raft/), the state machine over the index (fsm.c over
 * index/), write batching (batch.c) and the client server (server.c) on
 * ONE libuv loop, and the node's lifecycle.
 *
 * Data directory layout: DIR/raft (raft_uv's files, owned by repl),
 * DIR/index (commit log + LMDB, owned by idx), DIR/disk-reserve (disk.c),
 * DIR/IDENTITY (ident.c). DIR is created 0700 and must stay private
 * (ident.c); a data dir of another node or cluster, or one with group or
 * world access, is refused with exit code 2 (a configuration error), a
 * damaged IDENTITY or raft term record with exit code 1.
 *
 * The cluster secret (cluster_secret_file, when set) is read once at
 * start into the node (n->secret, wiped when the node is freed); a file
 * that is missing, readable by others or malformed stops the node with
 * exit code 2. The transport (shm/verbs handshakes) and the client port
 * (access.c: the SCRAM answers for unknown users) borrow it through the
 * node's view of the configuration (cfg_view.cluster_secret).
 *
 * One loop iteration: a uv_check handle (end of every iteration) first
 * proposes the write batch collected during the iteration, then answers
 * the applied produces, then flushes the index once if anything was
 * applied (group commit, fsm.c), then releases the other answers of the
 * batches whose apply that flush covered, then wakes parked FETCHes. So an
 * acknowledged message is immediately fetchable, on this node. A uv_idle handle
 * is started whenever work is pending so the loop never blocks in poll with an
 * unflushed apply. A 100 ms watchdog timer polls the disk space, hands
 * leadership over when the leader's disk is full, and watches raft for a
 * fail-stop.
 *
 * Retention (docs/MESSAGES.md): after each flush the row cleaner
 * (idx_clean_step, [node] clean_batch_rows rows per iteration, local to
 * the node) runs while it has work, keeping the loop awake until done.
 * A writable leader decides every trim and proposes it as a TRIM command
 * carrying the result (index/apply.c says why): idx_trim_plan reads the
 * queue's rows in the leader's index. It plans (a) after each flush, for
 * the queues a produce left over a drop-oldest limit
 * (idx_over_limits_drain), and (b) every [node] retention_interval_ms
 * for the next page of [node] retention_page queues (max_age and lowered
 * limits; a cursor over the queue names, wrapping at the end). A plan
 * already proposed for a queue is not proposed again while its start
 * offset has not moved, for up to a second (then it is assumed lost: a
 * TRIM that finds the queue changed is refused at apply and planned
 * again).
 *
 * Delayed messages (docs/WORKQUEUES.md): every [node] timer_interval_ms a
 * writable leader whose index holds timers due by its clock
 * (idx_timer_stats) plans a TIMER_FIRE (idx_timer_plan: at most [node]
 * timer_batch keys and 4 MiB, oldest first) into an entry of its own
 * (node_batcher_add_timer_fire) and proposes it. One TIMER_FIRE at a
 * time: the plan reads flushed state, so a second one planned before the
 * first is applied would hold the same keys (skipped at apply, but written
 * to the log). The flag clears when the fire is answered (applied and
 * flushed, or failed), or after 10 s as lost; when the plan left due
 * timers behind, the next pass starts at once. A pass that fires logs one
 * DEBUG line when answered; a plan error logs a WARN at most every 10 s.
 *
 * Shutdown (SIGTERM/SIGINT): a leader with other voters first hands its
 * leadership over (repl_transfer_start to the voter with the highest match
 * index, repl_get_progress) and waits for the transfer to end, at most one
 * election timeout + 500 ms; meanwhile it takes no new writes (TERN_ENOTLEADER,
 * so libtern moves to another node) and its proposals in flight end with
 * TERN_ELEADERSHIPLOST when it steps down (libtern resends them, the
 * producer id makes that idempotent). A second signal stops at once.
 * Then: close the client server, answer unproposed writes with
 * TERN_ESHUTDOWN, repl_close (in-flight proposals fail with
 * TERN_ESHUTDOWN), then close the index, then the transport, then our own
 * handles; uv_run returns and main exits 0.
 *
 * SIGHUP reopens the [log] file (logrotate: rename it, then send SIGHUP)
 * and logs "log reopened"; nothing else is re-read (the configuration,
 * TLS files and the cluster secret take effect on restart).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include <auth.h>
#include <proto.h>
#include <tern/tern.h>
#include <tern_common.h>

#include "batch.h"
#include "config.h"
#include "disk.h"
#include "fsm.h"
#include "ident.h"
#include "idx.h"
#include "log.h"
#include "metrics.h"
#include "node.h"
#include "notify.h"
#include "repl.h"
#include "server.h"
#include "transport.h"

struct node
{
    const struct node_config *cfg; /* &cfg_view */
    /* The caller's config with transport replaced by the selected one
     * (shallow copy: every other pointer is borrowed from the caller). */
    struct node_config cfg_view;
    struct node_transport transport; /* its name is cfg_view.transport */
    uint64_t loop_iters;             /* loop iterations (on_check runs) */
    uv_loop_t loop;
    struct node_fsm fsm; /* the index behind raft's state machine */
    struct repl *repl;
    struct node_server *server;
    struct node_metrics *metrics; /* [metrics] endpoint; NULL: off */
    struct node_batcher batcher;
    uv_check_t check;
    uv_idle_t idle;
    uv_signal_t sig_term;
    uv_signal_t sig_int;
    uv_signal_t sig_hup;
    uv_timer_t watchdog;
    uint64_t watchdog_at;    /* uv_now of the last watchdog tick (0: none) */
    uv_timer_t handover;     /* bounds the hand-over at shutdown */
    bool handing_over;       /* a stop signal came while leader: transferring */
    bool handover_done;      /* stop at the end of this loop iteration */
    uint64_t handover_since; /* uv_now when the hand-over began */
    uv_timer_t retention;
    uv_timer_t timers; /* the timer pass (delayed messages) */
    /* A TIMER_FIRE proposed and not answered yet: since (uv_now), keys */
    bool timer_inflight;
    bool timer_more; /* the last plan left due timers behind */
    uint64_t timer_since;
    uint32_t timer_keys;
    uint64_t timer_warn_ms; /* uv_now of the last plan-error line */
    bool clean_more; /* the cleaner may have work (checked after flush) */
    /* retention pass cursor: the last queue name of the previous page */
    char retain_after[TERN_NAME_MAX + 1];
    /* TRIMs proposed and maybe not applied yet (plan_trim) */
    struct node_trim_pending
    {
        char queue[TERN_NAME_MAX + 1];
        uint64_t queue_id;
        uint64_t from;
        uint64_t at; /* uv_now when proposed */
    } trims[64];
    bool handles_init;
    int last_fsm_error;
    uint64_t auth_refused;        /* transport's count when last logged */
    uint64_t auth_refused_log_ms; /* uv_now() of that line */
    bool idle_on;
    bool stopping;
    bool fatal; /* stop at the end of this loop iteration */
    int exit_code;
    /* Latest state reported by repl. */
    enum repl_role role;
    uint64_t leader_id;
    uint64_t term;
    bool writable;
    struct node_disk disk;      /* space alarm and reserve (disk.c) */
    uint64_t disk_alarm_since;  /* uv_now the leader's alarm was first seen */
    uint64_t disk_handed_at;    /* uv_now of the last hand-over attempt */
    uint64_t disk_hand_over_ms; /* wait before the next one: 3 s, doubled
                                   per failed attempt up to 48 s */
    char raft_dir[PATH_MAX];
    char index_dir[PATH_MAX];
    /* Membership (raft/member.c): the role last logged, when a node not
     * in the configuration last said so, and the scratch copy of the
     * configuration server_client_addr reads. */
    int member_role_logged; /* enum repl_member_role; -1: none yet */
    bool caught_up_logged;  /* "index caught up" was logged */
    uint64_t absent_logged_at;
    uint64_t rejoin_logged_at;    /* the "lost its data" line (10 s) */
    uint64_t auto_rejoins_logged; /* status.auto_rejoins last logged */
    bool rejoin_wait_logged;      /* status.rejoin_wait at the last poll */
    struct repl_member members[REPL_MEMBERS_MAX];
    /* Raft messages refused before the core (raft/io.c): the counts last
     * logged and when (one line per burst, at most every 10 s). */
    uint64_t logged_terms_refused;
    uint64_t logged_unknown_senders;
    uint64_t refused_logged_at;
    /* [security] bootstrap_admin: the term in which this node, as leader,
     * last proposed it (0: never). */
    uint64_t bootstrap_term;
    /* The cluster secret, loaded at start when cluster_secret_file is set
     * (then cfg_view.cluster_secret points here); wiped on free. */
    struct auth_secret secret;
    /* The raft log failed its checksums at start (repl_start's
     * TERN_ECORRUPT or a corrupt-* segment raft_uv moved aside) and
     * [raft] rejoin_on_corrupt allows a rejoin: node_run moves the raft
     * directory aside and starts again in join mode. */
    bool raft_corrupt;
};

static void node_stop(struct node *n);
static void handover_end(struct node *n);

/* ---- Loop and disk ---------------------------------------------------- */

static void on_idle(uv_idle_t *h)
{
    (void)h;
}

/* Ask for one more loop iteration soon (flush/propose pending work). */
static void node_kick(struct node *n)
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

/* ---- The server's view of the node (struct node_server_ops) ------------ */

static struct idx_env *server_idx(void *arg)
{
    struct node *n = arg;
    return n->fsm.idx;
}

static void server_status(void *arg, struct repl_status *out)
{
    struct node *n = arg;
    memset(out, 0, sizeof(*out));
    out->id = n->cfg->id;
    if (n->repl != NULL && !n->stopping) {
        repl_get_status(n->repl, out);
    }
}

static int server_transfer(void *arg,
                           uint64_t to_id,
                           repl_transfer_cb cb,
                           void *data,
                           char *errmsg)
{
    struct node *n = arg;
    uint64_t target = 0;
    int rv;
    if (n->repl == NULL || n->stopping || n->handing_over) {
        tern_errmsg_printf(errmsg, "the node is stopping");
        return TERN_ESHUTDOWN;
    }
    rv = repl_transfer_start(n->repl, to_id, cb, data, &target, errmsg);
    node_log(rv == 0 ? NODE_LOG_INFO : NODE_LOG_WARN,
             "leadership transfer asked by a client",
             "to=%llu target=%llu result=%s detail=\"%s\"",
             (unsigned long long)to_id, (unsigned long long)target,
             rv == 0 ? "started" : tern_err_name(rv), rv == 0 ? "" : errmsg);
    return rv;
}

static void server_latency(void *arg, struct repl_latency *out, bool reset)
{
    struct node *n = arg;
    memset(out, 0, sizeof(*out));
    if (n->repl != NULL && !n->stopping) {
        repl_get_latency(n->repl, out, reset);
    }
}

static void server_stages(void *arg, struct repl_latency *out)
{
    struct node *n = arg;
    memset(out, 0, REPL_STAGE__COUNT * sizeof(*out));
    if (n->repl != NULL && !n->stopping) {
        repl_get_stages(n->repl, out, false);
    }
}

/* ---- The metrics endpoint's view of the node (metrics.h) -------------- */

static void metrics_latency(void *arg, struct repl_latency *out)
{
    server_latency(arg, out, false);
}

static unsigned metrics_progress(void *arg,
                                 struct repl_progress *out,
                                 unsigned max)
{
    struct node *n = arg;
    if (n->repl == NULL || n->stopping) {
        return 0;
    }
    return repl_get_progress(n->repl, out, max);
}

/* 0, or TERN_EFULL with a message while the disk alarm is on (statvfs,
 * cached ~100 ms). */
static int server_disk_check(void *arg, char *errmsg)
{
    struct node *n = arg;
    disk_poll(n, false);
    return node_disk_refuse(&n->disk, errmsg);
}

static void server_members(void *arg,
                           struct repl_member *out,
                           unsigned cap,
                           unsigned *count)
{
    struct node *n = arg;
    *count = 0;
    if (n->repl != NULL && !n->stopping) {
        repl_members(n->repl, out, cap, count);
    }
}

static int server_member_change(void *arg,
                                uint8_t action,
                                uint64_t id,
                                const char *raft_addr,
                                const char *client_addr,
                                unsigned timeout_ms,
                                repl_change_cb cb,
                                void *data)
{
    struct node *n = arg;
    int rv;
    if (n->repl == NULL || n->stopping) {
        return TERN_ESHUTDOWN;
    }
    if (action == PROTO_MEMBER_ADD) {
        rv = repl_member_add(n->repl, id, raft_addr, client_addr, timeout_ms,
                             cb, data);
    } else {
        rv = repl_member_remove(n->repl, id, cb, data);
    }
    node_log(
        rv == 0 ? NODE_LOG_INFO : NODE_LOG_WARN,
        rv == 0 ? "membership change started" : "membership change refused",
        "action=%s id=%llu raft_addr=%s client_addr=%s err=%s",
        action == PROTO_MEMBER_ADD ? "add" : "remove", (unsigned long long)id,
        raft_addr[0] != '\0' ? raft_addr : "-",
        client_addr[0] != '\0' ? client_addr : "-",
        rv == 0 ? "-" : tern_err_name(rv));
    return rv;
}

/* Member id's client address: the one kept with it in the raft
 * configuration (members added at run time), else its [peers] line. */
static const char *server_client_addr(void *arg, uint64_t id)
{
    struct node *n = arg;
    const struct node_peer *p = node_config_peer(n->cfg, id);
    if (n->repl != NULL && !n->stopping && id != 0) {
        unsigned count = 0;
        repl_members(n->repl, n->members, REPL_MEMBERS_MAX, &count);
        for (unsigned i = 0; i < count && i < REPL_MEMBERS_MAX; i++) {
            if (n->members[i].id == id && n->members[i].meta[0] != '\0') {
                return n->members[i].meta;
            }
        }
    }
    return p != NULL ? p->client_addr : NULL;
}

/* ---- The state machine's view of the node (struct node_fsm_ops) ------- */

static void fsm_kick(void *arg)
{
    node_kick(arg);
}

static bool fsm_release_disk(void *arg, const char *why)
{
    return disk_release(arg, why);
}

static void fsm_fail(void *arg)
{
    struct node *n = arg;
    n->exit_code = 1;
    n->fatal = true; /* stopped from on_check, not inside repl */
    node_kick(n);
}

/* ---- Raft state --------------------------------------------------------- */

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
             repl_role_name(role), (unsigned long long)leader_id,
             lp != NULL ? lp->client_addr : "-", (unsigned long long)term,
             writable ? "true" : "false", repl_role_name(n->role),
             (unsigned long long)n->leader_id, (unsigned long long)n->term);
    bool was_writable = n->writable;
    bool leader_changed = leader_id != n->leader_id;
    n->role = role;
    n->leader_id = leader_id;
    n->term = term;
    n->writable = writable;
    node_notify_role(repl_role_name(role), term, writable);
    if ((was_writable != writable || leader_changed) && n->server != NULL) {
        /* Parked leader-only fetches are refused now, writes held for a
         * leader are answered with the hint (server.c). */
        node_server_wake(n->server);
    }
    /* Busy-poll where answers come back at once: a leader's AppendEntries.
     * A follower spins for the next AppendEntries only if configured: it
     * waits for the next client write, so it spins on every commit (the
     * cost of skipping an idle vCPU's wake-up, bench/replication.sh). */
    unsigned spin_us = role == REPL_LEADER ? n->cfg->busy_poll_us
                                           : n->cfg->follower_busy_poll_us;
    (void)node_transport_set_busy_poll(&n->transport, spin_us);
    /* Otherwise spin only while exchanges come back soon (rdma/adapt.c),
     * in memory mode: on disk a commit waits for fsyncs, and spinning
     * took their CPU (slower, bench/RESULTS.md "Adaptive polling"). */
    (void)node_transport_set_adaptive_poll(
        &n->transport,
        n->cfg->memory_durability ? n->cfg->adaptive_poll_us : 0);
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

/* The term the batcher stamps on new entries (TERM command): the term
 * this node is leader in when it builds them. 0 (no TERM) without a
 * replica. */
static uint64_t batch_term(void *arg)
{
    struct node *n = arg;
    struct repl_status st;
    if (n->repl == NULL) {
        return 0;
    }
    repl_get_status(n->repl, &st);
    return st.term;
}

/* Whether the batcher flags new entries XXH3 ([raft] entry_checksum). */
static bool batch_xxh3(void *arg)
{
    struct node *n = arg;
    switch (n->cfg->entry_checksum) {
    case NODE_ENTRY_CHECKSUM_XXH3:
        return true;
    case NODE_ENTRY_CHECKSUM_XXH32:
        return false;
    default:
        return n->fsm.idx != NULL && idx_xxh3_in_use(n->fsm.idx);
    }
}

/* ---- Bootstrap admin ----------------------------------------------------- */

static int any_user_cb(void *arg, const struct idx_user_info *u)
{
    (void)u;
    *(bool *)arg = true;
    return 1;
}

/* [security] bootstrap_admin (docs/AUTH.md): a writable leader whose
 * users table is empty proposes the configured admin, once per term (a
 * proposal lost to a leader change is made again by the next leader). */
static void bootstrap_admin(struct node *n)
{
    const struct node_config *c = n->cfg;
    struct auth_scram_cred cred;
    struct proto_request r;
    uint8_t enc[AUTH_SCRAM_CRED_ENC_MAX];
    char m[TERN_ERRMSG_SIZE];
    bool any = false;
    size_t len = 0;
    int rv;

    if (c->bootstrap_admin == NULL || !n->writable ||
        n->bootstrap_term == n->term || n->fsm.idx == NULL) {
        return;
    }
    n->bootstrap_term = n->term;
    if (idx_user_list(n->fsm.idx, any_user_cb, &any) != 0 || any) {
        return;
    }
    rv = auth_scram_cred_parse(c->bootstrap_admin_cred,
                               strlen(c->bootstrap_admin_cred), &cred, m);
    if (rv == 0) {
        rv = auth_scram_cred_encode(&cred, enc, sizeof(enc), &len, m);
    }
    auth_wipe(&cred, sizeof(cred));
    if (rv == 0) {
        memset(&r, 0, sizeof(r));
        r.op = PROTO_OP_USER_SET;
        r.user = c->bootstrap_admin;
        r.user_len = (uint16_t)strlen(c->bootstrap_admin);
        r.bits = PROTO_USER_ADMIN;
        r.cred = enc;
        r.cred_len = (uint32_t)len;
        rv = node_batcher_add(&n->batcher, NULL, 0, &r);
        if (rv != 0) {
            (void)snprintf(m, sizeof(m), "%s", tern_strerror(rv));
        }
    }
    auth_wipe(enc, sizeof(enc));
    node_log(rv == 0 ? NODE_LOG_INFO : NODE_LOG_ERROR,
             rv == 0 ? "bootstrap admin proposed (no users yet)"
                     : "bootstrap admin not proposed",
             "user=%s term=%llu err=%s detail=\"%s\"", c->bootstrap_admin,
             (unsigned long long)n->term, rv == 0 ? "-" : tern_err_name(rv),
             rv == 0 ? "" : m);
    node_kick(n);
}

/* ---- Retention ------------------------------------------------------------
 */

/* Messages one TRIM drops at most (the rest is the next plan's). */
#define NODE_TRIM_MAX_MSGS 65536u

/* Plan queue and propose its TRIM if one is due (writable leader). */
static void plan_trim(struct node *n, const char *queue)
{
    struct idx_trim_plan plan;
    uint64_t now = uv_now(&n->loop);
    struct node_trim_pending *slot = NULL, *oldest = &n->trims[0];
    int rv = idx_trim_plan(n->fsm.idx, queue, batch_timestamp(n),
                           NODE_TRIM_MAX_MSGS, &plan);
    if (rv != 0 || plan.to <= plan.from) {
        return;
    }
    for (size_t i = 0; i < TERN_ARRAY_SIZE(n->trims); i++) {
        struct node_trim_pending *t = &n->trims[i];
        if (strcmp(t->queue, queue) == 0) {
            slot = t;
            break;
        }
        if (t->at < oldest->at) {
            oldest = t;
        }
    }
    if (slot != NULL && slot->queue_id == plan.queue_id &&
        slot->from == plan.from && now - slot->at < 1000) {
        return; /* proposed, not applied yet */
    }
    rv = node_batcher_add_trim(&n->batcher, queue, &plan);
    if (rv != 0) {
        node_log(NODE_LOG_WARN, "trim not proposed", "queue=%s err=%s", queue,
                 tern_err_name(rv));
        return;
    }
    slot = slot != NULL ? slot : oldest;
    (void)snprintf(slot->queue, sizeof(slot->queue), "%s", queue);
    slot->queue_id = plan.queue_id;
    slot->from = plan.from;
    slot->at = now;
    node_kick(n);
}

static void plan_trim_cb(void *arg, const char *queue)
{
    plan_trim(arg, queue);
}

struct retain_page
{
    struct node *n;
    char last[TERN_NAME_MAX + 1];
    unsigned count;
    unsigned max;
};

static int retain_page_cb(void *arg, const struct idx_queue_info *q)
{
    struct retain_page *p = arg;
    (void)snprintf(p->last, sizeof(p->last), "%s", q->name);
    plan_trim(p->n, q->name);
    return ++p->count >= p->max;
}

/* (b) of the top: the next page of queues. */
static void on_retention(uv_timer_t *t)
{
    struct node *n = t->data;
    struct retain_page p = {.n = n, .count = 0, .max = n->cfg->retention_page};
    if (n->stopping || !n->writable || n->fsm.idx == NULL) {
        return;
    }
    if (idx_queue_list_after(n->fsm.idx, n->retain_after, retain_page_cb, &p) !=
        0) {
        return;
    }
    (void)snprintf(n->retain_after, sizeof(n->retain_after), "%s",
                   p.count < p.max ? "" : p.last);
}

/* (a) of the top: after a flush. */
static void plan_over_limits(struct node *n)
{
    if (n->stopping || !n->writable || n->fsm.idx == NULL ||
        idx_status(n->fsm.idx) != 0) {
        return;
    }
    idx_over_limits_drain(n->fsm.idx, plan_trim_cb, n);
}

/* ---- Delayed messages: the timer pass (see the top) ----------------------
 */

/* A TIMER_FIRE left unanswered this long is taken as lost. */
#define NODE_TIMER_LOST_MS 10000u

/* node_timer_plan_cb: plan into the leader's fresh entry. */
static int timer_plan(void *arg,
                      struct tern_wbuf *w,
                      uint64_t t,
                      uint32_t *keys)
{
    struct node *n = arg;
    struct idx_timer_plan p;
    int rv = idx_timer_plan(n->fsm.idx, t, n->cfg->timer_batch,
                            IDX_TIMER_FIRE_BYTES_MAX, w, &p);
    *keys = rv == 0 ? p.keys : 0;
    n->timer_more = rv == 0 && p.more;
    return rv;
}

static void on_timer_pass(uv_timer_t *h)
{
    struct node *n = h->data;
    uint64_t now = uv_now(&n->loop);
    uint64_t pending = 0, oldest = 0;
    uint32_t keys = 0;
    int rv;
    if (n->stopping || !n->writable || n->fsm.idx == NULL ||
        idx_status(n->fsm.idx) != 0) {
        return;
    }
    if (n->timer_inflight && now - n->timer_since < NODE_TIMER_LOST_MS) {
        return;
    }
    n->timer_inflight = false;
    if (idx_timer_stats(n->fsm.idx, &pending, &oldest) != 0 || pending == 0 ||
        oldest > batch_timestamp(n)) {
        return;
    }
    rv = node_batcher_add_timer_fire(&n->batcher, timer_plan, n, n, &keys);
    if (rv != 0) {
        if (now - n->timer_warn_ms >= NODE_TIMER_LOST_MS ||
            n->timer_warn_ms == 0) {
            n->timer_warn_ms = now;
            node_log(NODE_LOG_WARN, "timer pass: no TIMER_FIRE planned",
                     "pending=%llu oldest_due_ms=%llu err=%s",
                     (unsigned long long)pending, (unsigned long long)oldest,
                     tern_err_name(rv));
        }
        return;
    }
    if (keys > 0) {
        n->timer_inflight = true;
        n->timer_since = now;
        n->timer_keys = keys;
        node_kick(n);
    }
}

/* The batcher's respond op: the node's own TIMER_FIRE ends here, every
 * other request goes to its connection. */
static void batch_respond(struct node_wreq *w)
{
    struct node *n;
    if (w->op != NODE_WREQ_TIMER_FIRE || w->owner == NULL) {
        node_server_respond(w);
        return;
    }
    n = w->owner;
    n->timer_inflight = false;
    node_log(NODE_LOG_DEBUG, "timers fired",
             "keys=%u appended=%u dropped=%llu term=%llu err=%s", n->timer_keys,
             w->status == 0 ? w->result.count : 0,
             (unsigned long long)(w->status == 0 ? w->result.base_offset : 0),
             (unsigned long long)n->term,
             w->status == 0 ? "-" : tern_err_name(w->status));
    if (w->status == 0 && n->timer_more && n->handles_init && !n->stopping &&
        n->cfg->timer_interval_ms > 0) {
        /* Due timers were left behind: the next pass now. */
        uv_timer_start(&n->timers, on_timer_pass, 0, n->cfg->timer_interval_ms);
    }
}

/* One bounded cleaner step after a flush, while there is work. */
static void clean_step(struct node *n, bool flushed)
{
    unsigned done = 0;
    if (flushed) {
        n->clean_more = true;
    }
    if (!n->clean_more || n->stopping || n->fsm.idx == NULL ||
        idx_status(n->fsm.idx) != 0) {
        return;
    }
    if (!idx_clean_pending(n->fsm.idx)) {
        n->clean_more = false;
        return;
    }
    int rv = idx_clean_step(n->fsm.idx, n->cfg->clean_batch_rows, &done);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "row cleaner failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), idx_errmsg(n->fsm.idx));
        n->clean_more = false;
        return;
    }
    n->clean_more = done >= n->cfg->clean_batch_rows;
    if (n->clean_more) {
        node_kick(n);
    }
}

/* ---- Loop hooks --------------------------------------------------------- */

static void on_check(uv_check_t *h)
{
    struct node *n = h->data;
    struct node_server *corked;
    bool flushed = false;

    n->loop_iters++;
    if ((n->fatal || n->handover_done) && !n->stopping) {
        node_stop(n);
    }
    if (!n->stopping) {
        bootstrap_admin(n);
        node_batcher_propose(&n->batcher);
    }
    /* Answers go out with one write per connection (server.h); the server
     * is freed only in its close callback, so corked stays valid here.
     * Produce answers leave before the index flush: it runs before the
     * loop reads another request (batch.c, step 5). The uncork only
     * writes: it must neither read a connection nor wake parked fetches
     * (those wait for the flush, below). */
    corked = n->server;
    if (corked != NULL) {
        node_server_cork(corked);
    }
    node_batcher_answer_produces(&n->batcher);
    if (corked != NULL) {
        node_server_uncork(corked);
    }
    flushed = node_fsm_flush(&n->fsm);
    if (corked != NULL) {
        node_server_cork(corked);
    }
    node_batcher_flushed(&n->batcher);
    if (flushed) {
        plan_over_limits(n);
    }
    clean_step(n, flushed);
    if (n->server != NULL) {
        if (flushed) {
            node_server_wake(n->server);
        }
    }
    if (corked != NULL) {
        node_server_uncork(corked);
    }
    if (n->server != NULL) {
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
    uv_close((uv_handle_t *)&n->sig_hup, handle_closed);
    uv_close((uv_handle_t *)&n->watchdog, handle_closed);
    uv_close((uv_handle_t *)&n->handover, handle_closed);
    uv_close((uv_handle_t *)&n->retention, handle_closed);
    uv_close((uv_handle_t *)&n->timers, handle_closed);
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
    node_fsm_close(&n->fsm);
    if (!node_transport_close(&n->transport, on_xport_closed, n)) {
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
 * reset), the loop iterations and the transport's counters
 * (transport.c): what bench/replication.sh --stages prints per node. */
static void log_stages(struct node *n)
{
    struct repl_latency *st, *lat; /* ~8 KiB each: off the stack */
    char buf[1024];
    size_t off = 0;
    struct xport_stats xc;

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
    node_transport_stats(&n->transport, &xc);
    node_log(NODE_LOG_INFO, "replication stages",
             "commits=%llu loop_iters=%llu doorbells=%llu wakeups=%llu "
             "spins=%llu spin_hits=%llu spin_us=%llu fast_sends=%llu "
             "slow_sends=%llu to_slow=%llu to_fast=%llu auth_refused=%llu "
             "stages(count/p50us/p99us)=\"%s\"",
             (unsigned long long)lat->count, (unsigned long long)n->loop_iters,
             (unsigned long long)xc.doorbells, (unsigned long long)xc.wakeups,
             (unsigned long long)xc.spins, (unsigned long long)xc.spin_hits,
             (unsigned long long)(xc.spin_ns / 1000),
             (unsigned long long)xc.fast_sends,
             (unsigned long long)xc.slow_sends, (unsigned long long)xc.to_slow,
             (unsigned long long)xc.to_fast,
             (unsigned long long)xc.auth_refused, buf);
    tern_free(st);
}

static void node_stop(struct node *n)
{
    if (n->stopping) {
        return;
    }
    log_stages(n);
    n->stopping = true;
    if (!n->raft_corrupt) {
        node_notify_stopping(); /* else node_run starts again at once */
    }
    if (n->metrics != NULL) {
        if (n->server != NULL) {
            node_server_set_metrics(n->server, NULL);
        }
        node_metrics_close(n->metrics);
        n->metrics = NULL;
    }
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
    if (!n->disk.alarm || st->role != REPL_LEADER || st->n_members < 2) {
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
             "result=%s free_bytes=%llu",
             rv == 0 ? "started" : tern_err_name(rv),
             (unsigned long long)n->disk.free);
}

/* One WARN line when the transport refused peer connections that did
 * not prove cluster membership (xport_stats.auth_refused), at most every
 * NODE__REFUSED_LOG_MS. */
#define NODE__REFUSED_LOG_MS 10000
static void log_auth_refused(struct node *n)
{
    struct xport_stats xc;
    uint64_t now = uv_now(&n->loop);

    if (n->auth_refused_log_ms != 0 &&
        now - n->auth_refused_log_ms < NODE__REFUSED_LOG_MS) {
        return;
    }
    node_transport_stats(&n->transport, &xc);
    if (xc.auth_refused <= n->auth_refused) {
        return;
    }
    node_log(NODE_LOG_WARN, "peer connections refused",
             "refused=%llu total=%llu transport=%s detail=\"no valid cluster "
             "credentials (TLS handshake, certificate, CN or HELLO id)\" "
             "last=\"%s\"",
             (unsigned long long)(xc.auth_refused - n->auth_refused),
             (unsigned long long)xc.auth_refused, n->transport.name,
             xc.last_refusal);
    n->auth_refused = xc.auth_refused;
    n->auth_refused_log_ms = now;
}

/* One WARN line per burst of raft messages refused before the core
 * (absurd terms, unknown senders: raft/io.c), at most every 10 s, with
 * the counts since the last line and the newest offender. */
static void log_refused(struct node *n, const struct repl_status *st)
{
    uint64_t now = uv_now(&n->loop);
    if ((st->terms_refused == n->logged_terms_refused &&
         st->unknown_senders == n->logged_unknown_senders) ||
        (n->refused_logged_at != 0 && now - n->refused_logged_at < 10000)) {
        return;
    }
    node_log(
        NODE_LOG_WARN, "raft messages refused",
        "terms_refused=%llu last_term=%llu last_term_from=%llu "
        "unknown_senders=%llu last_unknown=%llu our_term=%llu "
        "max_term_jump=%llu",
        (unsigned long long)(st->terms_refused - n->logged_terms_refused),
        (unsigned long long)st->refused_term,
        (unsigned long long)st->refused_from,
        (unsigned long long)(st->unknown_senders - n->logged_unknown_senders),
        (unsigned long long)st->unknown_from, (unsigned long long)st->term,
        (unsigned long long)n->cfg->max_term_jump);
    n->logged_terms_refused = st->terms_refused;
    n->logged_unknown_senders = st->unknown_senders;
    n->refused_logged_at = now;
}

/* This node's place in the configuration: one line when its role changes,
 * and while it is not in the configuration one WARN line at start and
 * then every 10 s (a node to be added with `tern cluster add`, or one that
 * was removed: it takes no part until it is added). */
static void log_membership(struct node *n, const struct repl_status *st)
{
    uint64_t now = uv_now(&n->loop);
    if (st->member_role != n->member_role_logged &&
        st->member_role != REPL_MEMBER_ABSENT) {
        node_log(NODE_LOG_INFO, "cluster membership",
                 "id=%llu role=%s members=%u", (unsigned long long)n->cfg->id,
                 repl_member_role_name(st->member_role), st->n_members);
    }
    if (n->rejoin_wait_logged && !st->rejoin_wait) {
        node_log(NODE_LOG_INFO, "added to the cluster: may vote",
                 "id=%llu role=%s", (unsigned long long)n->cfg->id,
                 repl_member_role_name(st->member_role));
    }
    n->rejoin_wait_logged = st->rejoin_wait;
    if (st->auto_rejoins != n->auto_rejoins_logged) {
        node_log(NODE_LOG_WARN,
                 "voter answered with less than it acknowledged (lost "
                 "data): removing it and adding it back",
                 "id=%llu auto_rejoins=%llu",
                 (unsigned long long)st->auto_rejoin_id,
                 (unsigned long long)st->auto_rejoins);
        n->auto_rejoins_logged = st->auto_rejoins;
    }
    if (st->rejoin_needed && now - n->rejoin_logged_at >= 10000) {
        node_log(NODE_LOG_ERROR,
                 "lost its data but still counted as a voter: not voting",
                 "id=%llu votes_withheld=%llu hint=\"on the cluster: tern "
                 "cluster rejoin %llu %s %s\"",
                 (unsigned long long)n->cfg->id,
                 (unsigned long long)st->votes_withheld,
                 (unsigned long long)n->cfg->id, n->cfg->raft_addr,
                 n->cfg->client_addr);
        n->rejoin_logged_at = now;
    }
    if (st->member_role == REPL_MEMBER_ABSENT &&
        (n->member_role_logged != REPL_MEMBER_ABSENT ||
         now - n->absent_logged_at >= 10000)) {
        node_log(NODE_LOG_WARN,
                 "not in the cluster configuration; waiting to be added",
                 "id=%llu raft_addr=%s client_addr=%s join=%s members=%u "
                 "hint=\"on the cluster: tern cluster add %llu %s %s\"",
                 (unsigned long long)n->cfg->id, n->cfg->raft_addr,
                 n->cfg->client_addr, n->cfg->join ? "true" : "false",
                 st->n_members, (unsigned long long)n->cfg->id,
                 n->cfg->raft_addr, n->cfg->client_addr);
        n->absent_logged_at = now;
    }
    n->member_role_logged = st->member_role;
}

static void on_watchdog(uv_timer_t *t)
{
    struct node *n = t->data;
    struct repl_status st;
    if (n->stopping || n->repl == NULL) {
        return;
    }
    /* The loop thread was busy (or the process stopped) for longer than an
     * election timeout: followers may have started an election. */
    uint64_t now = uv_now(&n->loop);
    if (n->watchdog_at != 0 &&
        now - n->watchdog_at > 100u + n->cfg->election_timeout_ms) {
        node_log(NODE_LOG_WARN, "loop thread stalled",
                 "ms=%llu election_timeout_ms=%u",
                 (unsigned long long)(now - n->watchdog_at - 100u),
                 n->cfg->election_timeout_ms);
    }
    n->watchdog_at = now;
    log_auth_refused(n);
    disk_poll(n, false);
    repl_get_status(n->repl, &st);
    if (n->handing_over && st.role != REPL_LEADER && st.leader_id != 0 &&
        st.leader_id != n->cfg->id) {
        node_log(NODE_LOG_INFO, "leadership handed over, stopping",
                 "leader=%llu term=%llu ms=%llu",
                 (unsigned long long)st.leader_id, (unsigned long long)st.term,
                 (unsigned long long)(uv_now(&n->loop) - n->handover_since));
        handover_end(n);
    }
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
    log_refused(n, &st);
    log_membership(n, &st);
    if (st.caught_up && !n->caught_up_logged) {
        /* From here on, logins are judged (server.c auth_caught_up). */
        node_log(NODE_LOG_INFO, "index caught up with the log",
                 "last_applied=%llu caught_up_to=%llu role=%s",
                 (unsigned long long)st.last_applied,
                 (unsigned long long)st.catch_up_to,
                 st.role == REPL_LEADER ? "leader" : "follower");
        n->caught_up_logged = true;
    }
    if (st.term_exhausted) {
        node_log(NODE_LOG_ERROR, "raft term reached its bound (2^62)",
                 "term=%llu (a new election would need a higher term)",
                 (unsigned long long)st.term);
    }
    if (st.failed != 0) {
        node_log(NODE_LOG_ERROR, "raft replica fail-stopped, exiting",
                 "err=%s detail=\"%s\"", tern_err_name(st.failed),
                 st.failed_detail != NULL ? st.failed_detail : "");
        n->exit_code = 1;
        node_stop(n);
    }
}

/* ---- Hand-over at shutdown ---------------------------------------------- */

/* The hand-over ended (cb, the bound, or a second signal): stop at the end
 * of this loop iteration (never from inside raft's callbacks). */
static void handover_end(struct node *n)
{
    if (!n->handing_over) {
        return;
    }
    n->handing_over = false;
    uv_timer_stop(&n->handover);
    n->handover_done = true;
    node_kick(n);
}

static void on_handover_done(void *data,
                             int status,
                             uint64_t target,
                             uint64_t leader_id,
                             uint64_t term)
{
    struct node *n = data;
    if (status == TERN_ESHUTDOWN || !n->handing_over) {
        return; /* stopping already */
    }
    node_log(status == 0 ? NODE_LOG_INFO : NODE_LOG_WARN,
             status == 0 ? "leadership handed over, stopping"
                         : "leadership hand-over failed, stopping anyway",
             "target=%llu leader=%llu term=%llu err=%s ms=%llu",
             (unsigned long long)target, (unsigned long long)leader_id,
             (unsigned long long)term,
             status == 0 ? "none" : tern_err_name(status),
             (unsigned long long)(uv_now(&n->loop) - n->handover_since));
    handover_end(n);
}

static void on_handover_timer(uv_timer_t *t)
{
    struct node *n = t->data;
    node_log(NODE_LOG_WARN, "leadership hand-over timed out, stopping anyway",
             "ms=%llu",
             (unsigned long long)(uv_now(&n->loop) - n->handover_since));
    handover_end(n);
}

/* The voter with the highest match index (ties: configuration order), or
 * 0 (then raft picks one whose log is up to date). */
static uint64_t most_caught_up(struct node *n)
{
    struct repl_progress pr[64];
    unsigned np = repl_get_progress(n->repl, pr, TERN_ARRAY_SIZE(pr));
    uint64_t best = 0, best_match = 0;
    for (unsigned i = 0; i < np; i++) {
        if (best == 0 || pr[i].match_index > best_match) {
            best = pr[i].id;
            best_match = pr[i].match_index;
        }
    }
    return best;
}

/* A stop signal on a leader with other voters: start the hand-over.
 * Returns whether it started (else stop now). */
static bool handover_start(struct node *n, const char *sig)
{
    struct repl_status st;
    char m[TERN_ERRMSG_SIZE] = "";
    uint64_t target = 0;
    int rv;
    if (n->repl == NULL) {
        return false;
    }
    repl_get_status(n->repl, &st);
    /* The members of the configuration, not the [peers] lines: a
     * cluster may have grown by `tern cluster add`. */
    if (st.role != REPL_LEADER || st.n_members < 2) {
        return false;
    }
    n->handover_since = uv_now(&n->loop);
    n->handing_over = true;
    rv = repl_transfer_start(n->repl, most_caught_up(n), on_handover_done, n,
                             &target, m);
    if (rv == TERN_EBUSY) {
        /* A client's transfer is under way: wait for it to end (the
         * watchdog sees the role change), within the same bound. */
        target = 0;
    } else if (rv != 0) {
        n->handing_over = false;
        node_log(NODE_LOG_WARN, "cannot hand leadership over, stopping",
                 "signal=%s err=%s detail=\"%s\"", sig, tern_err_name(rv), m);
        return false;
    }
    node_notify_stopping();
    uv_timer_start(&n->handover, on_handover_timer,
                   (uint64_t)n->cfg->election_timeout_ms + 500u, 0);
    node_log(NODE_LOG_INFO, "stopping: handing leadership over first",
             "signal=%s target=%llu term=%llu bound_ms=%u", sig,
             (unsigned long long)target, (unsigned long long)st.term,
             n->cfg->election_timeout_ms + 500u);
    return true;
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct node *n = h->data;
    const char *sig = signum == SIGINT ? "INT" : "TERM";
    if (n->stopping) {
        node_log(NODE_LOG_WARN, "signal during shutdown ignored", "signal=%s",
                 sig);
        return;
    }
    if (n->handing_over) {
        node_log(NODE_LOG_WARN, "second signal: stopping without waiting",
                 "signal=%s", sig);
        handover_end(n);
        return;
    }
    if (handover_start(n, sig)) {
        return;
    }
    node_log(NODE_LOG_INFO, "stopping", "signal=%s", sig);
    node_stop(n);
}

/* SIGHUP: reopen the log file (nothing else is re-read). */
static void on_sighup(uv_signal_t *h, int signum)
{
    char m[TERN_ERRMSG_SIZE] = "";
    int rv;
    (void)h;
    (void)signum;
    rv = node_log_reopen(m);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR,
                 "log reopen failed, still writing the old file",
                 "err=%s detail=\"%s\"", tern_err_name(rv), m);
        return;
    }
    node_log(NODE_LOG_INFO, "log reopened", "to_file=%s",
             node_log_to_file() ? "true" : "false");
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
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
        tern_errmsg_printf(errmsg, "mkdir %s: %s", tmp, strerror(errno));
        return -errno;
    }
    return 0;
}

/* The data dir is private and belongs to this node (ident.c). Sets
 * n->exit_code to 2 for a refusal that the configuration (or a chmod)
 * must fix. */
static int check_data_dir(struct node *n, char *errmsg)
{
    const struct node_config *c = n->cfg;
    const char *cluster = node_config_cluster_name(c);
    struct node_ident found;
    enum node_ident_event ev = NODE_IDENT_MATCH;
    struct timespec ts;
    bool open_dir = false;
    unsigned mode = 0;
    int rv;

    rv = node_ident_check_private(c->data_dir, c->allow_open_data_dir != 0,
                                  &open_dir, &mode, errmsg);
    if (rv == TERN_EDENIED) {
        n->exit_code = 2;
    }
    if (rv != 0) {
        return rv;
    }
    if (open_dir) {
        node_log(NODE_LOG_WARN, "data dir is group or world accessible",
                 "data_dir=%s mode=%04o allow_open_data_dir=true", c->data_dir,
                 mode);
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    rv = node_ident_open(
        c->data_dir, cluster, c->id,
        (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u, &ev,
        &found, errmsg);
    if (rv == TERN_EIDENTITY) {
        node_log(NODE_LOG_ERROR, "data dir belongs to another node",
                 "data_dir=%s dir_cluster=%s dir_node=%llu cluster=%s "
                 "node=%llu",
                 c->data_dir, found.cluster, (unsigned long long)found.node_id,
                 cluster, (unsigned long long)c->id);
        n->exit_code = 2;
    }
    if (rv != 0) {
        return rv;
    }
    if (ev != NODE_IDENT_MATCH) {
        node_log(NODE_LOG_INFO,
                 ev == NODE_IDENT_CREATED ? "data dir identity created"
                                          : "data dir without identity adopted",
                 "data_dir=%s cluster=%s node=%llu", c->data_dir, cluster,
                 (unsigned long long)c->id);
    }
    return 0;
}

int node_pick_log_store(struct node_config *c, char *errmsg)
{
    char dir[PATH_MAX];
    struct repl_log_dir f;
    int rv;
    if (!c->log_store_auto) {
        c->log_store_why = "configured";
        return 0;
    }
    if (snprintf(dir, sizeof(dir), "%s/raft", c->data_dir) >=
        (int)sizeof(dir)) {
        tern_errmsg_printf(errmsg, "data_dir too long");
        return TERN_EINVAL;
    }
    rv = repl_log_dir_scan(dir, &f);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "%s: %s", dir, tern_strerror(rv));
        return rv;
    }
    if (f.uv && f.tern) {
        tern_errmsg_printf(errmsg,
                           "%s holds files of both raft log stores (raft_uv "
                           "and tern): set [raft] log_store to the one in "
                           "use, or move the directory aside and rejoin",
                           dir);
        return TERN_EINVAL;
    }
    c->tern_log_store = !f.uv;
    c->log_store_why = f.uv     ? "auto: raft_uv files found"
                       : f.tern ? "auto: tern store files found"
                                : "auto: a new raft directory";
    return 0;
}

/* Whether the store in use holds no raft log in dir: for raft_uv no
 * metadata1/2 (its term, vote and log start), for tern's store no segment
 * or snapshot (a term record alone is what a node that voted before its
 * first append leaves; with applied entries behind it, the log is lost). */
static bool raft_dir_logless(const char *dir, bool tern_store)
{
    struct repl_log_dir f;
    if (repl_log_dir_scan(dir, &f) != 0) {
        return false; /* the store's own load reports it */
    }
    return tern_store ? !f.tern_log : !f.uv_meta;
}

/* Whether a raft log that fails its checksums may be moved aside for a
 * rejoin: [raft] rejoin_on_corrupt is on and some other node can give the
 * log back (a single-node cluster has no one to catch up from). */
static bool can_rejoin(const struct node_config *c)
{
    if (!c->rejoin_on_corrupt) {
        return false;
    }
    for (unsigned i = 0; i < c->n_peers; i++) {
        if (c->peers[i].id != c->id) {
            return true;
        }
    }
    return false;
}

/* Rename DIR/raft to DIR/raft.corrupt-<UTC YYYYmmddTHHMMSSZ> (never
 * deleted: the operator keeps it for analysis) and sync DIR so that the
 * rename survives a crash; the new path goes to moved (cap bytes). 0 or a
 * negative code with errmsg. */
static int quarantine_raft_dir(const char *data_dir,
                               char *moved,
                               size_t cap,
                               char *errmsg)
{
    char from[PATH_MAX];
    char stamp[32];
    struct tm tm;
    time_t now = time(NULL);
    int fd;
    int w;
    int rv;

    if (gmtime_r(&now, &tm) == NULL ||
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm) == 0) {
        tern_errmsg_printf(errmsg, "raft log quarantine: no UTC time");
        return TERN_EINVAL;
    }
    w = snprintf(from, sizeof from, "%s/raft", data_dir);
    if (w < 0 || (size_t)w >= sizeof from) {
        tern_errmsg_printf(errmsg, "data dir path too long");
        return TERN_EINVAL;
    }
    w = snprintf(moved, cap, "%s/raft.corrupt-%s", data_dir, stamp);
    if (w < 0 || (size_t)w >= cap) {
        tern_errmsg_printf(errmsg, "data dir path too long");
        return TERN_EINVAL;
    }
    /* rename() would replace an empty directory of that name: refuse
     * any existing one instead. */
    if (access(moved, F_OK) == 0) {
        tern_errmsg_printf(errmsg, "raft log quarantine: %s exists", moved);
        return -EEXIST;
    }
    if (rename(from, moved) != 0) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "raft log quarantine: rename %s to %s: %s",
                           from, moved, tern_strerror(rv));
        return rv;
    }
    fd = open(data_dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        rv = -errno;
        if (fd >= 0) {
            close(fd);
        }
        tern_errmsg_printf(errmsg, "raft log quarantine: fsync %s: %s",
                           data_dir, tern_strerror(rv));
        return rv;
    }
    close(fd);
    return 0;
}

/* raft_uv 0.15 renames a last closed segment that fails its checksum at
 * load to "corrupt-<ns>-<name>" and starts without its entries, which this
 * node may have acknowledged (a voter that forgets acknowledged entries
 * can elect a leader without them). Counts those files in dir and copies
 * the greatest name (the newest) into newest (cap bytes, may be NULL). */
static unsigned count_corrupt_segments(const char *dir,
                                       char *newest,
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
    node_log(NODE_LOG_INFO, "raft log store", "store=%s why=\"%s\"",
             c->tern_log_store ? "tern" : "uv",
             c->log_store_why != NULL ? c->log_store_why : "configured");
}

/* Read cluster_secret_file, when set, into n->secret and point the
 * configuration view at it. A missing, public or malformed file is a
 * configuration error (exit code 2). */
static int load_cluster_secret(struct node *n, char *errmsg)
{
    const char *path = n->cfg_view.cluster_secret_file;
    int rv;

    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    rv = auth_secret_load(path, &n->secret, errmsg);
    if (rv != 0) {
        auth_wipe(&n->secret, sizeof(n->secret));
        tern_errmsg_wrapf(errmsg, "[security] cluster_secret_file %s", path);
        n->exit_code = 2;
        return rv;
    }
    n->cfg_view.cluster_secret = &n->secret;
    return 0;
}

/* Everything up to uv_run. On failure the node is left for node_stop to
 * unwind (whatever was created is closed in order). */
static int node_start(struct node *n, char *errmsg)
{
    const struct node_config *c = n->cfg;
    static const struct node_batcher_ops bops = {
        batch_propose, batch_respond, batch_timestamp, batch_term, batch_xxh3};
    static const struct node_fsm_ops fops = {fsm_kick, fsm_release_disk,
                                             fsm_fail};
    static const struct node_server_ops sops = {
        server_idx,         server_status,   server_latency,
        server_disk_check,  server_members,  server_member_change,
        server_client_addr, server_transfer, server_stages};
    struct repl_config rc;
    struct repl_peer *rpeers = NULL;
    struct repl_fsm fsm;
    char corrupt_name[256];
    int rv;

    node_batcher_init(&n->batcher, &bops, n);
    node_fsm_init(&n->fsm, &n->loop, &n->batcher, &fops, n);

    uv_check_init(&n->loop, &n->check);
    uv_idle_init(&n->loop, &n->idle);
    uv_signal_init(&n->loop, &n->sig_term);
    uv_signal_init(&n->loop, &n->sig_int);
    uv_signal_init(&n->loop, &n->sig_hup);
    uv_timer_init(&n->loop, &n->watchdog);
    uv_timer_init(&n->loop, &n->handover);
    uv_timer_init(&n->loop, &n->retention);
    uv_timer_init(&n->loop, &n->timers);
    n->watchdog.data = n;
    n->retention.data = n;
    n->timers.data = n;
    n->clean_more = true; /* the rebuild at open may have left rows */
    n->check.data = n;
    n->sig_term.data = n;
    n->sig_int.data = n;
    n->sig_hup.data = n;
    n->handover.data = n;
    n->handles_init = true;
    uv_check_start(&n->check, on_check);
    uv_signal_start(&n->sig_term, on_signal, SIGTERM);
    uv_signal_start(&n->sig_int, on_signal, SIGINT);
    uv_signal_start(&n->sig_hup, on_sighup, SIGHUP);
    uv_timer_start(&n->watchdog, on_watchdog, 100, 100);
    if (c->retention_interval_ms > 0) {
        uv_timer_start(&n->retention, on_retention, c->retention_interval_ms,
                       c->retention_interval_ms);
    }
    if (c->timer_interval_ms > 0) {
        uv_timer_start(&n->timers, on_timer_pass, c->timer_interval_ms,
                       c->timer_interval_ms);
    }

    rv = load_cluster_secret(n, errmsg);
    if (rv != 0) {
        return rv;
    }
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
    rv = check_data_dir(n, errmsg);
    if (rv != 0) {
        return rv;
    }
    rv = node_disk_init(&n->disk, c->data_dir, c->min_free_disk_bytes,
                        c->reserve_disk_bytes, errmsg);
    if (rv != 0) {
        return rv;
    }

    rv = node_fsm_open(&n->fsm, n->index_dir, (uint32_t)c->max_message_bytes,
                       c->log_segment_bytes, c->index_map_bytes, errmsg);
    if (rv != 0) {
        return rv;
    }

    rv = node_transport_start(&n->transport, errmsg);
    if (rv != 0) {
        return rv;
    }
    node_log(NODE_LOG_INFO, "transport selected", "requested=%s selected=%s",
             n->transport.requested, n->transport.name);

    /* The raft log (with the term and vote) lost under an index that
     * applied entries: this node may have voted and acknowledged entries
     * it no longer has. Bootstrapping anew would let it vote with what is
     * left; only a rejoin (join mode, then remove + add) is safe
     * (docs/MEMBERSHIP.md, "Rejoin"). */
    if (!c->join && raft_dir_logless(n->raft_dir, c->tern_log_store) &&
        idx_last_applied(n->fsm.idx) > 0) {
        tern_errmsg_printf(errmsg,
                           "the raft log is gone (%s) "
                           "but the index applied up to %llu: this node "
                           "lost its votes and log and must not vote under "
                           "id %llu; start it with join = true and run `tern "
                           "cluster rejoin %llu %s %s` on the cluster",
                           c->tern_log_store ? "no raft/seg-* or snap-* file"
                                             : "no raft/metadata1 or 2",
                           (unsigned long long)idx_last_applied(n->fsm.idx),
                           (unsigned long long)c->id, (unsigned long long)c->id,
                           c->raft_addr, c->client_addr);
        return TERN_ECORRUPT;
    }

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
    rc.durability =
        c->memory_durability ? REPL_DURABILITY_MEMORY : REPL_DURABILITY_DISK;
    rc.log_store = c->tern_log_store ? REPL_LOG_STORE_TERN : REPL_LOG_STORE_UV;
    rc.segment_bytes = c->raft_segment_bytes;
    rc.max_term_jump = c->max_term_jump;
    rc.join = c->join != 0;
    rc.no_auto_rejoin = c->auto_rejoin == 0;
    rv = repl_config_validate(&rc, errmsg);
    if (rv == 0) {
        node_fsm_callbacks(&n->fsm, &fsm);
        rv = repl_new(&n->loop, n->transport.xport, &rc, &fsm, on_state, n,
                      &n->repl, errmsg);
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
        n->raft_corrupt = rv == TERN_ECORRUPT && can_rejoin(c);
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
        n->raft_corrupt = can_rejoin(c);
        return TERN_ECORRUPT;
    }
    {
        /* The index only holds committed entries, so when it is ahead of
         * the local raft log (libraft 0.15 may apply entries a follower
         * has not stored yet, libraft#423; a kill -9 then loses them locally)
         * the missing entries come back from the leader with the same
         * contents. A single-node cluster has no one to get them from: a
         * new entry would reuse an index the index already holds, be
         * skipped by idx_apply and be acknowledged without being stored.
         * Refuse to start then. */
        struct repl_status st;
        uint64_t applied = idx_last_applied(n->fsm.idx);
        repl_get_status(n->repl, &st);
        node_log(NODE_LOG_INFO, "raft loaded",
                 "last_index=%llu last_applied=%llu commit_index=%llu "
                 "term=%llu torn_tail_cut=%u",
                 (unsigned long long)st.last_index,
                 (unsigned long long)st.last_applied,
                 (unsigned long long)st.commit_index,
                 (unsigned long long)st.term, st.log_torn);
        if (st.meta_load != REPL_META_MATCH) {
            node_log(st.meta_load == REPL_META_CREATED ? NODE_LOG_INFO
                                                       : NODE_LOG_WARN,
                     st.meta_load == REPL_META_CREATED
                         ? "raft term record created"
                         : "raft term record completed after a crash",
                     "term=%llu record_term=%llu record_vote=%llu",
                     (unsigned long long)st.term,
                     (unsigned long long)st.meta_prev_term,
                     (unsigned long long)st.meta_prev_vote);
        }
        if (applied > st.last_index && st.n_members == 1) {
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
    rv =
        node_server_new(&n->loop, c, &n->batcher, &sops, n, &n->server, errmsg);
    if (rv != 0) {
        if (rv == TERN_EINVAL) {
            n->exit_code = 2; /* client_tls credentials that do not load */
        }
        tern_errmsg_wrapf(errmsg, "client server on %s", c->client_addr);
        return rv;
    }
    {
        const struct node_metrics_source msrc = {
            n,          server_status, metrics_latency, metrics_progress,
            server_idx, &n->disk,      &n->transport};
        rv = node_metrics_new(&n->loop, c, &msrc, &n->metrics, errmsg);
        if (rv != 0) {
            if (rv == TERN_EINVAL) {
                n->exit_code = 2; /* [metrics]: a token file refused */
            }
            return rv;
        }
        node_server_set_metrics(n->server, n->metrics);
        if (n->metrics != NULL) {
            node_log(NODE_LOG_INFO, "metrics endpoint", "listen=%s token=%s",
                     c->metrics_listen,
                     c->metrics_token_file != NULL ? "required" : "none");
        }
    }
    if (c->pid_file != NULL) {
        rv = write_pid_file(c->pid_file, errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    return 0;
}

/* File descriptors the node needs besides client connections: raft
 * peers, LMDB, logs, the data directory, libuv's own. */
#define NODE__NOFILE_MARGIN 256u

/* Raise RLIMIT_NOFILE's soft limit to the hard limit, and lower the
 * connection cap (with a warning) if even that cannot cover
 * max_connections plus the node's own descriptors. */
static void raise_nofile(struct node_config *c)
{
    /* and the segment files of the fetches read on the thread pool */
    unsigned margin =
        NODE__NOFILE_MARGIN + c->fetch_threads * IDX_READER_MAX_FDS;
    struct rlimit rl;
    rlim_t want = (rlim_t)c->max_connections + margin;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        node_log(NODE_LOG_WARN, "getrlimit(RLIMIT_NOFILE) failed", "err=%s",
                 strerror(errno));
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            node_log(NODE_LOG_WARN, "setrlimit(RLIMIT_NOFILE) failed", "err=%s",
                     strerror(errno));
            rl.rlim_cur = old;
        }
    }
    node_log(NODE_LOG_INFO, "file descriptor limit",
             "nofile=%llu max_connections=%u", (unsigned long long)rl.rlim_cur,
             c->max_connections);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        unsigned cap = rl.rlim_cur > (rlim_t)2 * margin
                           ? (unsigned)(rl.rlim_cur - margin)
                           : (unsigned)(rl.rlim_cur / 2);
        node_log(NODE_LOG_WARN, "max_connections lowered to fit RLIMIT_NOFILE",
                 "max_connections=%u lowered_to=%u nofile=%llu margin=%u",
                 c->max_connections, TERN_MAX(cap, 1u),
                 (unsigned long long)rl.rlim_cur, margin);
        c->max_connections = TERN_MAX(cap, 1u);
    }
}

/* One run of the node, from start to the end of its loop; returns the
 * exit code. With raft_corrupt non-NULL, a start refused because the raft
 * log fails its checksums (node->raft_corrupt) is not logged as a failure:
 * *raft_corrupt is set, the reason copied to detail (TERN_ERRMSG_SIZE) and
 * node_run decides. */
static int run_node(const struct node_config *c,
                    bool *raft_corrupt,
                    char *detail)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    struct node *n;
    int rv;

    (void)signal(SIGPIPE, SIG_IGN);
    n = tern_calloc(1, sizeof(*n));
    if (n == NULL) {
        node_log(NODE_LOG_ERROR, "out of memory", NULL);
        return 1;
    }
    n->cfg_view = *c;
    n->member_role_logged = -1;
    node_transport_init(&n->transport, &n->loop, &n->cfg_view, c->transport);
    n->cfg_view.transport = n->transport.name;
    n->cfg = &n->cfg_view;
    rv = uv_loop_init(&n->loop);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "uv_loop_init failed", "err=%s",
                 uv_strerror(rv));
        tern_free(n);
        return 1;
    }
    node_log(NODE_LOG_INFO, "starting", "pid=%ld version=%d.%d.%d",
             (long)getpid(), TERN_VERSION_MAJOR, TERN_VERSION_MINOR,
             TERN_VERSION_PATCH);
    log_config(c);
    if (c->peer_auth == NODE_PEER_AUTH_NONE && !c->dev) {
        node_log(NODE_LOG_WARN,
                 "peers are not authenticated: peer_auth = none lets anyone "
                 "who reaches raft_addr act as a cluster node",
                 "raft_addr=%s", c->raft_addr);
    }
    node_log(NODE_LOG_INFO, "client port", "client_addr=%s tls=%s client_ca=%s",
             c->client_addr, node_config_client_tls(c) ? "on" : "off",
             c->client_ca != NULL ? c->client_ca : "-");
    if (!node_config_client_tls(c) && c->client_tls == NODE_CLIENT_TLS_OFF &&
        !c->dev) {
        node_log(NODE_LOG_WARN,
                 "client connections are not encrypted: client_tls = off",
                 "client_addr=%s", c->client_addr);
    }
    node_log(NODE_LOG_INFO, "client authentication",
             "client_auth=%s bootstrap_admin=%s",
             node_config_client_auth(c) ? "required" : "off",
             c->bootstrap_admin != NULL ? c->bootstrap_admin : "-");
    if (!node_config_client_auth(c) && !c->dev &&
        !node_config_client_loopback(c)) {
        node_log(NODE_LOG_WARN,
                 "clients are not authenticated: client_auth = off lets "
                 "anyone who reaches client_addr read, write and delete "
                 "every queue of namespace default",
                 "client_addr=%s", c->client_addr);
    }
    raise_nofile(&n->cfg_view);
    rv = node_start(n, errmsg);
    if (rv != 0 && n->raft_corrupt && raft_corrupt != NULL) {
        *raft_corrupt = true;
        (void)snprintf(detail, TERN_ERRMSG_SIZE, "%s", errmsg);
        n->exit_code = 1;
        node_stop(n);
    } else if (rv != 0) {
        n->raft_corrupt = false;
        node_log(NODE_LOG_ERROR, "start failed", "err=%s detail=\"%s\"",
                 tern_err_name(rv), errmsg);
        if (n->exit_code == 0) {
            n->exit_code = 1; /* 2 if node_start said so */
        }
        node_stop(n);
    } else {
        node_log(NODE_LOG_INFO, "started",
                 "client_addr=%s raft_addr=%s data_dir=%s", c->client_addr,
                 c->raft_addr, c->data_dir);
        node_notify_ready(c->client_addr);
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
    if (!n->raft_corrupt) {
        node_log(NODE_LOG_INFO, "stopped", "exit_code=%d", rv);
    }
    auth_wipe(&n->secret, sizeof(n->secret));
    tern_free(n);
    return rv;
}

/* A raft log that fails its checksums at start (docs/MEMBERSHIP.md,
 * "Rejoin"): this node may have voted and acknowledged entries it can no
 * longer read, so it must never vote with what is left. With [raft]
 * rejoin_on_corrupt the raft directory is moved aside (never deleted;
 * refused as before if that fails) and the node starts again in join mode
 * with an empty raft log: it grants no vote and stands for no election
 * until it was removed and added again, by the leader's auto_rejoin or by
 * `tern cluster rejoin`; it then catches up from its peers. */
int node_run(const struct node_config *c)
{
    char errmsg[TERN_ERRMSG_SIZE] = "";
    char detail[TERN_ERRMSG_SIZE] = "";
    char moved[PATH_MAX];
    struct node_config jc;
    bool corrupt = false;
    int rv;

    node_log_setup(c->id, (enum node_log_level)c->log_level);
    rv =
        node_log_open(c->log_file, (enum node_log_format)c->log_format, errmsg);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "cannot open the log file",
                 "err=%s detail=\"%s\"", tern_err_name(rv), errmsg);
        return 2;
    }
    rv = run_node(c, &corrupt, detail);
    if (!corrupt) {
        return rv;
    }
    rv = quarantine_raft_dir(c->data_dir, moved, sizeof moved, errmsg);
    if (rv != 0) {
        node_log(NODE_LOG_ERROR, "start failed",
                 "err=%s detail=\"%s\" quarantine=\"%s\"",
                 tern_err_name(TERN_ECORRUPT), detail, errmsg);
        node_log(NODE_LOG_INFO, "stopped", "exit_code=1");
        return 1;
    }
    node_log(NODE_LOG_ERROR,
             "raft log fails its checksums: moved aside, rejoining as a "
             "non-voter (no vote until removed and added again)",
             "err=%s detail=\"%s\" moved_to=%s hint=\"on the cluster (if the "
             "leader does not re-add it by itself): tern cluster rejoin %llu "
             "%s %s\"",
             tern_err_name(TERN_ECORRUPT), detail, moved,
             (unsigned long long)c->id, c->raft_addr, c->client_addr);
    jc = *c;
    jc.join = 1;
    if (jc.log_store_auto) {
        /* The raft directory is empty now: auto picks again (tern's). */
        int prv = node_pick_log_store(&jc, errmsg);
        if (prv != 0) {
            node_log(NODE_LOG_ERROR, "start failed", "err=%s detail=\"%s\"",
                     tern_err_name(prv), errmsg);
            node_log(NODE_LOG_INFO, "stopped", "exit_code=1");
            return 1;
        }
    }
    return run_node(&jc, NULL, NULL); /* logs the store again */
}
