/*
 * raft/repl.c: the public repl_ API (repl.h): configuration checks, the
 * replica's life cycle (new/start/close), proposals, status and
 * leadership transfer. libraft's heap is tern's allocator (installed
 * once, before the first replica).
 *
 * Production: repl_new creates an inner raft_uv over data_dir with a dummy
 * raft_uv_transport (raft_uv_init requires one; null_transport.c's never
 * listens or connects, all traffic goes through the xport, io.c). Tests use
 * repl_new_with_io with a fake inner io.
 *
 * Settings applied to libraft: pre-vote on, election timeout / heartbeat
 * from the config (150/15 ms by default), tick every min(5, HB/3) ms,
 * entry-count snapshot threshold 8 (the byte threshold in fsm.c governs:
 * libraft asks only once this many entries were applied since the last
 * snapshot, then at every apply while the FSM answers RAFT_BUSY; with 64,
 * a log of large batched entries, 128 KiB each, took no snapshot for
 * 8 MiB, so retention freed nothing: found by integration_retention),
 * snapshot trailing from the config, install-snapshot timeout
 * max(2 s, 20 x ET) (see bulk.c: the snapshot libraft sends is a small
 * manifest, so a resend is cheap, while a long timeout would stall a
 * follower whose InstallSnapshot was lost for that long; a resend of the
 * snapshot being fetched is ignored, a newer one restarts the fetch from
 * where the bytes already are).
 *
 * tern's term record (meta.c) lives in data_dir beside raft_uv's files;
 * repl_new_with_io without a data_dir (tests over a fake inner io) keeps
 * none.
 *
 * Status sources: term = the durable term tracked by io.c from load and
 * set_term; commit_index = struct raft's commit_index field (0.15 has no
 * accessor; the struct is public in 0.15); last_applied/last_index via
 * raft_last_applied/raft_last_index; last_stored = io.c's durable index.
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <raft/uv.h>

#include "repl_int.h"
#include "tlog.h"

#define REPL__DEFAULT_ET             150
#define REPL__DEFAULT_HB             15
#define REPL__DEFAULT_SNAPSHOT_BYTES ((uint64_t)64 << 20)
#define REPL__DEFAULT_TRAILING       256
#define REPL__ENTRY_THRESHOLD        8
#define REPL__INSTALL_TIMEOUT_MIN_MS 2000
#define REPL__FRAME_OVERHEAD         1024

struct repl_proposal
{
    struct raft_apply req;
    struct repl *r;
    repl_propose_cb cb;
    void *data;
    struct tern_list link;
};

/* ---- libraft heap = tern allocator ------------------------------------ */

static void *heap_malloc(void *data, size_t n)
{
    (void)data;
    return tern_malloc(n);
}
static void heap_free(void *data, void *p)
{
    (void)data;
    tern_free(p);
}
static void *heap_calloc(void *data, size_t n, size_t size)
{
    (void)data;
    return tern_calloc(n, size);
}
static void *heap_realloc(void *data, void *p, size_t n)
{
    (void)data;
    return tern_realloc(p, n);
}
static void *heap_aligned_alloc(void *data, size_t alignment, size_t size)
{
    (void)data;
    /* raft_uv's O_DIRECT buffers; freed only through heap_aligned_free. */
    return aligned_alloc(alignment,
                         (size + alignment - 1) / alignment * alignment);
}
static void heap_aligned_free(void *data, size_t alignment, void *p)
{
    (void)data;
    (void)alignment;
    free(p);
}

static struct raft_heap tern_raft_heap = {
    .data = NULL,
    .malloc = heap_malloc,
    .free = heap_free,
    .calloc = heap_calloc,
    .realloc = heap_realloc,
    .aligned_alloc = heap_aligned_alloc,
    .aligned_free = heap_aligned_free,
};
static atomic_flag heap_installed = ATOMIC_FLAG_INIT;

void repl_install_heap(void)
{
    if (!atomic_flag_test_and_set(&heap_installed)) {
        raft_heap_set(&tern_raft_heap);
    }
}

/* ---- config ------------------------------------------------------------ */

const char *repl_durability_name(enum repl_durability d)
{
    switch (d) {
    case REPL_DURABILITY_DISK:
        return "disk";
    case REPL_DURABILITY_MEMORY:
        return "memory";
    default:
        return "unknown";
    }
}

int repl_config_validate(struct repl_config *c, char *errmsg)
{
    bool self = false;
    if (c->election_timeout_ms == 0) {
        c->election_timeout_ms = REPL__DEFAULT_ET;
    }
    if (c->heartbeat_ms == 0) {
        c->heartbeat_ms = REPL__DEFAULT_HB;
    }
    if (c->snapshot_threshold_bytes == 0) {
        c->snapshot_threshold_bytes = REPL__DEFAULT_SNAPSHOT_BYTES;
    }
    if (c->snapshot_trailing == 0) {
        c->snapshot_trailing = REPL__DEFAULT_TRAILING;
    }
    if (c->max_term_jump == 0) {
        c->max_term_jump = REPL_DEFAULT_MAX_TERM_JUMP;
    }
    if (c->id == 0) {
        tern_errmsg_printf(errmsg, "repl: id must be > 0");
        return TERN_EINVAL;
    }
    if (c->durability != REPL_DURABILITY_DISK &&
        c->durability != REPL_DURABILITY_MEMORY) {
        tern_errmsg_printf(errmsg, "repl: unknown durability %d",
                           (int)c->durability);
        return TERN_EINVAL;
    }
    if (c->address == NULL || c->address[0] == '\0' ||
        strlen(c->address) > REPL_WIRE_ADDR_MAX) {
        tern_errmsg_printf(errmsg, "repl: address empty or too long");
        return TERN_EINVAL;
    }
    if (c->heartbeat_ms >= c->election_timeout_ms) {
        tern_errmsg_printf(errmsg,
                           "repl: heartbeat %u ms must be < election "
                           "timeout %u ms",
                           c->heartbeat_ms, c->election_timeout_ms);
        return TERN_EINVAL;
    }
    if (c->election_timeout_ms < 3 * c->heartbeat_ms) {
        tern_errmsg_printf(errmsg,
                           "repl: election timeout %u ms must be >= 3 x "
                           "heartbeat %u ms",
                           c->election_timeout_ms, c->heartbeat_ms);
        return TERN_EINVAL;
    }
    if (c->peers == NULL || c->n_peers == 0) {
        tern_errmsg_printf(errmsg, "repl: no peers");
        return TERN_EINVAL;
    }
    for (unsigned i = 0; i < c->n_peers; i++) {
        const struct repl_peer *p = &c->peers[i];
        if (p->id == 0 || p->address == NULL || p->address[0] == '\0' ||
            strlen(p->address) > REPL_WIRE_ADDR_MAX) {
            tern_errmsg_printf(errmsg, "repl: peer %u: bad id or address", i);
            return TERN_EINVAL;
        }
        for (unsigned j = 0; j < i; j++) {
            if (c->peers[j].id == p->id) {
                tern_errmsg_printf(errmsg, "repl: duplicate peer id %llu",
                                   (unsigned long long)p->id);
                return TERN_EINVAL;
            }
            if (strcmp(c->peers[j].address, p->address) == 0) {
                tern_errmsg_printf(errmsg, "repl: duplicate address %s",
                                   p->address);
                return TERN_EINVAL;
            }
        }
        if (p->id == c->id) {
            if (strcmp(p->address, c->address) != 0) {
                tern_errmsg_printf(errmsg,
                                   "repl: own address %s differs from peer "
                                   "entry %s",
                                   c->address, p->address);
                return TERN_EINVAL;
            }
            self = true;
        }
    }
    if (!self && !c->join) {
        tern_errmsg_printf(errmsg, "repl: id %llu not among peers",
                           (unsigned long long)c->id);
        return TERN_EINVAL;
    }
    return 0;
}

/* ---- life cycle ------------------------------------------------------- */

static void free_repl(struct repl *r)
{
    if (r->own_inner) {
        raft_uv_close(r->inner);
        tern_free(r->inner);
        tern_free(r->dummy_transport);
    }
    if (r->own_tlog) {
        repl_tlog_io_free(r->inner);
    }
    for (unsigned i = 0; i < r->n_peers; i++) {
        tern_free((void *)r->peers[i].address);
    }
    tern_free(r->peers);
    repl_guard_free(r);
    tern_free(r->address);
    tern_free(r->data_dir);
    repl_io_free(r);
    repl_lat_free(r);
    tern_free(r);
}

static int create(uv_loop_t *loop,
                  struct xport *x,
                  const struct repl_config *cin,
                  const struct repl_fsm *fsm,
                  repl_state_cb state_cb,
                  void *state_arg,
                  struct raft_io *inner,
                  bool own_inner,
                  struct raft_uv_transport *dummy,
                  struct repl **out,
                  char *errmsg)
{
    struct repl_config c = *cin;
    struct repl *r;
    int rv;

    rv = repl_config_validate(&c, errmsg);
    if (rv != 0) {
        return rv;
    }
    repl_install_heap();
    r = tern_calloc(1, sizeof *r);
    if (r == NULL) {
        return -ENOMEM;
    }
    r->loop = loop;
    r->xport = x;
    r->inner = inner;
    r->id = c.id;
    r->election_timeout_ms = c.election_timeout_ms;
    r->heartbeat_ms = c.heartbeat_ms;
    r->tick_ms = TERN_MAX(1u, TERN_MIN(5u, c.heartbeat_ms / 3));
    r->snapshot_threshold_bytes = c.snapshot_threshold_bytes;
    r->snapshot_trailing = c.snapshot_trailing;
    r->durability = c.durability;
    r->join = c.join;
    r->member.auto_rejoin = !c.no_auto_rejoin;
    r->lost.on = !c.no_peer_down;
    r->fsm = *fsm;
    r->state_cb = state_cb;
    r->state_arg = state_arg;
    tern_list_init(&r->proposals);
    repl_bulk_setup(r);
    if (repl_lat_init(r) != 0) {
        goto err_nomem;
    }
    r->address = tern_strdup(c.address);
    r->data_dir = c.data_dir != NULL ? tern_strdup(c.data_dir) : NULL;
    r->peers = tern_calloc(c.n_peers, sizeof *r->peers);
    if (r->address == NULL || r->peers == NULL ||
        (c.data_dir != NULL && r->data_dir == NULL)) {
        goto err_nomem;
    }
    for (unsigned i = 0; i < c.n_peers; i++) {
        r->peers[i].id = c.peers[i].id;
        r->peers[i].address = tern_strdup(c.peers[i].address);
        if (r->peers[i].address == NULL) {
            goto err_nomem;
        }
        r->n_peers = i + 1;
    }
    if (repl_guard_init(r) != 0) {
        goto err_nomem;
    }
    /* own_inner: raft_uv (its close/truncate race, its failed truncates:
     * io.c). */
    repl_io_setup(r, own_inner);
    r->io.max_term_jump = c.max_term_jump;
    r->io.meta_on = r->data_dir != NULL;
    repl_fsm_setup(r);
    rv = raft_init(&r->raft, &r->io.outer, &r->glue.raft_fsm, c.id, c.address);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: raft_init: %s",
                           raft_errmsg(&r->raft));
        rv = repl_err_from_raft(rv);
        goto err;
    }
    r->raft.data = r;
    raft_set_election_timeout(&r->raft, c.election_timeout_ms);
    raft_set_heartbeat_timeout(&r->raft, c.heartbeat_ms);
    raft_set_pre_vote(&r->raft, true);
    raft_set_snapshot_threshold(&r->raft, REPL__ENTRY_THRESHOLD);
    raft_set_snapshot_trailing(&r->raft, c.snapshot_trailing);
    raft_set_install_snapshot_timeout(
        &r->raft,
        TERN_MAX(REPL__INSTALL_TIMEOUT_MIN_MS, 20 * c.election_timeout_ms));
    r->own_inner = own_inner;
    r->dummy_transport = dummy;
    *out = r;
    return 0;

err_nomem:
    rv = -ENOMEM;
err:
    r->own_inner = false; /* the caller still owns inner on failure */
    free_repl(r);
    return rv;
}

int repl_new_with_io(uv_loop_t *loop,
                     struct xport *x,
                     const struct repl_config *c,
                     const struct repl_fsm *fsm,
                     repl_state_cb state_cb,
                     void *state_arg,
                     struct raft_io *inner,
                     struct repl **out,
                     char *errmsg)
{
    return create(loop, x, c, fsm, state_cb, state_arg, inner, false, NULL, out,
                  errmsg);
}

int repl_log_dir_scan(const char *dir, struct repl_log_dir *out)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    memset(out, 0, sizeof *out);
    if (d == NULL) {
        return errno == ENOENT ? 0 : -errno;
    }
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        unsigned long long a, b;
        char end;
        bool meta =
            strcmp(nm, "metadata1") == 0 || strcmp(nm, "metadata2") == 0;
        bool log = strncmp(nm, "seg-", 4) == 0 || strncmp(nm, "snap-", 5) == 0;
        if (meta || strncmp(nm, "open-", 5) == 0 ||
            strncmp(nm, "snapshot-", 9) == 0 ||
            sscanf(nm, "%llu-%llu%c", &a, &b, &end) == 2) {
            out->uv = true;
            out->uv_meta = out->uv_meta || meta;
        } else if (log || strncmp(nm, "free-", 5) == 0) {
            out->tern = true;
            out->tern_log = out->tern_log || log;
        }
    }
    (void)closedir(d);
    return 0;
}

/* Whether dir holds a file of the other log store: raft_uv's metadata1/2
 * for tern's, tern's segments, free segment files or snapshots for
 * raft_uv. A directory stays with the store that made it; switching would
 * load an empty log under the node's term and votes. */
static bool other_store_files(const char *dir, enum repl_log_store store)
{
    struct repl_log_dir f;
    if (repl_log_dir_scan(dir, &f) != 0) {
        return false; /* the store's own open reports it */
    }
    return store == REPL_LOG_STORE_TERN ? f.uv_meta : f.tern;
}

int repl_new(uv_loop_t *loop,
             struct xport *x,
             const struct repl_config *c,
             const struct repl_fsm *fsm,
             repl_state_cb state_cb,
             void *state_arg,
             struct repl **out,
             char *errmsg)
{
    struct repl_null_transport *d;
    struct raft_io *inner;
    int rv;

    if (loop == NULL) {
        tern_errmsg_printf(errmsg, "repl: loop missing");
        return TERN_EINVAL;
    }
    if (c->data_dir == NULL || c->data_dir[0] == '\0') {
        tern_errmsg_printf(errmsg, "repl: data_dir missing");
        return TERN_EINVAL;
    }
    if (mkdir(c->data_dir, 0700) != 0 && errno != EEXIST) {
        rv = -errno;
        tern_errmsg_printf(errmsg, "repl: mkdir %s: %s", c->data_dir,
                           tern_strerror(rv));
        return rv;
    }
    if (other_store_files(c->data_dir, c->log_store)) {
        tern_errmsg_printf(errmsg,
                           "repl: %s holds a raft log of log_store = %s, "
                           "not %s: a raft directory stays with the store "
                           "that made it (rejoin with an empty one to "
                           "switch)",
                           c->data_dir,
                           c->log_store == REPL_LOG_STORE_TERN ? "uv" : "tern",
                           c->log_store == REPL_LOG_STORE_TERN ? "tern" : "uv");
        return TERN_EINVAL;
    }
    repl_install_heap();
    if (c->log_store == REPL_LOG_STORE_TERN) {
        /* The free list holds what a snapshot forgets: the segments of one
         * snapshot interval, so that in the steady state every new segment
         * is a recycled one (docs/LOGSTORE.md, stage 2). */
        uint64_t every = c->snapshot_threshold_bytes
                             ? c->snapshot_threshold_bytes
                             : REPL__DEFAULT_SNAPSHOT_BYTES;
        uint64_t seg =
            c->segment_bytes ? c->segment_bytes : TLOG_DEFAULT_SEGMENT_BYTES;
        uint64_t free_max = every / seg + 1;
        rv = repl_tlog_io_new(loop, c->data_dir, seg,
                              (uint32_t)(free_max < 2    ? 2
                                         : free_max > 16 ? 16
                                                         : free_max),
                              &inner, errmsg);
        if (rv != 0) {
            return rv;
        }
        rv = create(loop, x, c, fsm, state_cb, state_arg, inner, false, NULL,
                    out, errmsg);
        if (rv != 0) {
            repl_tlog_io_free(inner);
            return rv;
        }
        /* tlog_io keeps the term record itself, the only copy. */
        (*out)->own_tlog = true;
        (*out)->io.meta_on = false;
        return 0;
    }
    d = tern_calloc(1, sizeof *d);
    inner = tern_calloc(1, sizeof *inner);
    if (d == NULL || inner == NULL) {
        tern_free(d);
        tern_free(inner);
        return -ENOMEM;
    }
    repl_null_transport_init(d, loop);
    rv = raft_uv_init(inner, loop, c->data_dir, &d->t);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: raft_uv_init %s: %s", c->data_dir,
                           inner->errmsg);
        tern_free(d);
        tern_free(inner);
        return repl_err_from_raft(rv);
    }
    rv = create(loop, x, c, fsm, state_cb, state_arg, inner, true, &d->t, out,
                errmsg);
    if (rv != 0) {
        raft_uv_close(inner);
        tern_free(inner);
        tern_free(d);
    }
    return rv;
}

int repl_start(struct repl *r, char *errmsg)
{
    struct raft_configuration conf;
    bool mark = false;
    int rv;

    rv = repl_member_rejoin_mark_load(r, &mark, errmsg);
    if (rv != 0) {
        return rv;
    }
    if (r->join) {
        /* Never bootstrap: the configuration comes from the leader that
         * adds this node (member.c). */
        goto start;
    }
    raft_configuration_init(&conf);
    for (unsigned i = 0; i < r->n_peers; i++) {
        rv = raft_configuration_add(&conf, r->peers[i].id, r->peers[i].address,
                                    RAFT_VOTER);
        if (rv != 0) {
            raft_configuration_close(&conf);
            tern_errmsg_printf(errmsg, "repl: configuration: %s",
                               raft_strerror(rv));
            return repl_err_from_raft(rv);
        }
    }
    rv = raft_bootstrap(&r->raft, &conf);
    raft_configuration_close(&conf);
    if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {
        tern_errmsg_printf(errmsg, "repl: bootstrap: %s",
                           raft_errmsg(&r->raft));
        return repl_err_from_raft(rv);
    }
start:
    rv = raft_start(&r->raft);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "repl: start: %s", raft_errmsg(&r->raft));
        return repl_err_from_raft(rv);
    }
    /* A joining node that starts with nothing, or one that did and was
     * not re-added yet (member.c, "Votes" and "The rejoin marker"). The
     * marker is durable before the loop runs, so before any entry or
     * vote request can reach this node. */
    r->member.rejoin_wait = mark || (r->join && r->raft.configuration.n == 0 &&
                                     raft_last_index(&r->raft) == 0);
    if (r->member.rejoin_wait && !mark) {
        rv = repl_member_rejoin_mark_store(r, errmsg);
        if (rv != 0) {
            return rv;
        }
    }
    repl_poll(r);
    return 0;
}

static void apply_cb(struct raft_apply *req, int status, void *result)
{
    struct repl_proposal *p = req->data;
    (void)result;
    tern_list_remove(&p->link);
    if (p->cb != NULL) {
        struct repl *r = p->r;
        int code = repl_err_from_raft(status);
        if (status != 0 && r->closing) {
            code = TERN_ESHUTDOWN;
        }
        r->core_failing += status != 0;
        p->cb(p->data, code, req->index);
        r->core_failing -= status != 0;
    }
    tern_free(p);
}

int repl_propose(struct repl *r,
                 void *buf,
                 size_t len,
                 repl_propose_cb cb,
                 void *data,
                 uint64_t *index)
{
    struct repl_proposal *p;
    struct raft_buffer b;
    int rv;

    if (r->closing) {
        return TERN_ESHUTDOWN;
    }
    if (r->core_failing > 0) {
        return TERN_ELEADERSHIPLOST; /* inside a step-down (repl_int.h) */
    }
    repl_poll(r);
    if (!r->guard.writable || r->failed != 0) {
        return TERN_ENOTLEADER;
    }
    /* An entry must fit one AppendEntries frame (codec.c: preamble,
     * address, fixed fields, one entry header), or it could never be
     * replicated and would wedge the log. */
    if (xport_max_message(r->xport) <= REPL__FRAME_OVERHEAD ||
        len > xport_max_message(r->xport) - REPL__FRAME_OVERHEAD) {
        return TERN_ETOOBIG;
    }
    if (len == 0 || len % 8 != 0) {
        return TERN_EINVAL; /* see repl.h: raft_uv 0.15 padding */
    }
    p = tern_calloc(1, sizeof *p);
    if (p == NULL) {
        return -ENOMEM;
    }
    p->r = r;
    p->cb = cb;
    p->data = data;
    p->req.data = p;
    b.base = buf;
    b.len = len;
    tern_list_push(&r->proposals, &p->link);
    /* Disk mode: the leader's own write goes to the disk after the
     * AppendEntries have left (io.c), not before them. */
    repl_io_defer_appends(r);
    rv = raft_apply(&r->raft, &p->req, &b, 1, apply_cb);
    repl_io_flush_deferred(r);
    if (rv != 0) {
        tern_list_remove(&p->link);
        tern_free(p);
        return repl_err_from_raft(rv);
    }
    if (index != NULL) {
        *index = p->req.index;
    }
    return 0;
}

static uint64_t transfer_target(struct repl *r);

const char *repl_role_name(enum repl_role r)
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

void repl_catch_note(struct repl *r,
                     const struct raft_message *m,
                     struct repl_catch_probe *p)
{
    const struct raft_append_entries *a = &m->append_entries;
    p->ae = !r->catch_marked && m->type == RAFT_IO_APPEND_ENTRIES;
    if (p->ae) {
        p->term = a->term;
        p->commit = a->leader_commit;
        p->prev = a->prev_log_index;
        p->n = a->n_entries;
    }
}

void repl_catch_delivered(struct repl *r, const struct repl_catch_probe *p)
{
    /* An AppendEntries of the current term comes from its one leader.
     * Its leader_commit is that leader's commit index only if the sender
     * did not lower it: io.c's split caps each part's at the part's last
     * index, so a message whose commit reaches its own last entry may be
     * such a part (a heartbeat carries the leader's last index as its
     * prev, so its commit is whole). Taken only when the core has all of
     * it (commit_index reached it: not refused, not lowered by the guard
     * or a memory-mode hold), and when it is an entry of the leader's own
     * term: then the leader's barrier is committed, and with it everything
     * committed before its term (a new leader's commit index lags its
     * predecessor's until then). */
    if (!p->ae || r->catch_marked || p->term != r->raft.current_term ||
        (p->n > 0 && p->commit >= p->prev + p->n) || p->commit == 0 ||
        r->raft.commit_index < p->commit ||
        repl_io_term_of(r, p->commit) != p->term) {
        return;
    }
    r->catch_marked = true;
    r->catch_mark = p->commit;
}

/* Has the index caught up since the start (repl_status.caught_up)? */
static bool catch_up(struct repl *r, const struct repl_status *st)
{
    if (!r->caught_up &&
        ((st->role == REPL_LEADER && st->writable) ||
         (r->catch_marked && st->last_applied >= r->catch_mark))) {
        r->caught_up = true;
    }
    return r->caught_up;
}

void repl_get_status(struct repl *r, struct repl_status *out)
{
    memset(out, 0, sizeof *out);
    repl_poll(r);
    out->id = r->id;
    switch (r->guard.role) {
    case RAFT_FOLLOWER:
        out->role = REPL_FOLLOWER;
        break;
    case RAFT_CANDIDATE:
        out->role = REPL_CANDIDATE;
        break;
    case RAFT_LEADER:
        out->role = REPL_LEADER;
        break;
    default:
        out->role = REPL_UNAVAILABLE;
        break;
    }
    out->leader_id = r->guard.leader_id;
    out->leader_silent = repl_lost_leader_silent(r);
    out->term = r->io.term;
    out->commit_index = r->raft.commit_index;
    out->last_applied = raft_last_applied(&r->raft);
    out->last_index = raft_last_index(&r->raft);
    out->last_stored = r->io.durable_index;
    out->last_counted = r->io.acked_index;
    out->durability = r->durability;
    out->writable = r->guard.writable;
    out->catch_up_to = r->catch_marked ? r->catch_mark : 0;
    out->transfer_to = transfer_target(r);
    out->fsm_error = r->glue.fsm_error;
    out->failed = r->failed;
    out->failed_detail = r->fail_detail;
    out->disk_full = r->disk_full;
    out->disk_full_dropped = r->guard.ae_disk_full_dropped;
    out->terms_refused = r->io.terms_refused;
    out->refused_term = r->io.refused_term;
    out->refused_from = r->io.refused_from;
    out->unknown_senders = r->io.unknown_senders;
    out->unknown_from = r->io.unknown_from;
    out->term_exhausted = r->io.term_exhausted;
    out->meta_load = r->io.meta_load;
    out->log_torn = r->own_tlog ? repl_tlog_io_torn(r->inner) : 0;
    out->log_store_tern = r->own_tlog;
    memset(&out->log, 0, sizeof out->log);
    if (r->own_tlog) {
        repl_tlog_io_stats(r->inner, &out->log);
    }
    out->meta_prev_term = r->io.meta_prev_term;
    out->meta_prev_vote = r->io.meta_prev_vote;
    out->member_role = repl_self_role(r);
    out->n_members = r->raft.configuration.n;
    out->votes_withheld = r->member.votes_withheld;
    out->rejoin_wait = r->member.rejoin_wait;
    out->auto_rejoins = r->member.auto_rejoins;
    out->auto_rejoin_id = r->member.auto_rejoin_id;
    out->rejoin_needed =
        r->member.rejoin_wait && out->member_role == REPL_MEMBER_VOTER;
    out->caught_up = catch_up(r, out);
}

unsigned repl_get_progress(struct repl *r,
                           struct repl_progress *out,
                           unsigned max)
{
    unsigned n = 0;

    /* libraft 0.15 keeps leader_state.progress parallel to
     * configuration.servers while it leads (notes on the 0.15 pin in
     * docs/ARCHITECTURE.md). */
    if (r->closing || r->raft.state != RAFT_LEADER ||
        r->raft.leader_state.progress == NULL) {
        return 0;
    }
    for (unsigned i = 0; i < r->raft.configuration.n && n < max; i++) {
        const struct raft_server *s = &r->raft.configuration.servers[i];
        if (s->id == r->raft.id || s->role != RAFT_VOTER) {
            continue;
        }
        out[n].id = s->id;
        out[n].match_index = r->raft.leader_state.progress[i].match_index;
        n++;
    }
    return n;
}

/* A leadership transfer under way (at most one: libraft 0.15 keeps one
 * in r->transfer and refuses a second with RAFT_NOTLEADER).
 *
 * Happy path: raft_transfer picks the target (id 0: the first voter
 * whose match index is our last index, else the last voter) and sends it
 * TimeoutNow once its log is up to date; the target starts an election
 * that disrupts us, we step down on its higher term, and the first
 * message from it as leader completes the transfer (recv.c: our current
 * leader is the target) and fires transfer_cb.
 *
 * Failure modes, all ending in transfer_cb (0.15 has no status in it, so
 * the outcome is read from raft's state): the target does not win within
 * an election timeout (the tick gives up: we are still leader, or another
 * node won, or no leader is known yet) -> TERN_ETRANSFER; raft closes or
 * goes unavailable -> TERN_ESHUTDOWN / TERN_ETRANSFER. While a transfer is
 * under way raft_apply refuses new entries (0.15) and raft_leader reports
 * no leader; entries already appended keep replicating and may commit
 * under the new leader (their proposals fail with TERN_ELEADERSHIPLOST). */
struct transfer_req
{
    struct raft_transfer req;
    struct repl *r;
    uint64_t term;
    repl_transfer_cb cb;
    void *data;
    /* raft gave up while an election was under way (we no longer lead,
     * no leader known): the outcome is decided by repl_transfer_poll once
     * a leader is known, or settle_until (raft io time) passes. */
    bool settling;
    uint64_t settle_until;
};

/* The target of a transfer this leader is running (0: none). */
static uint64_t transfer_target(struct repl *r)
{
    struct transfer_req *t = r->transfer;
    return t != NULL && !t->settling && raft_state(&r->raft) == RAFT_LEADER
               ? t->req.id
               : 0;
}

static void transfer_finish(struct transfer_req *t, int status, uint64_t lid)
{
    struct repl *r = t->r;
    if (r->transfer == t) {
        r->transfer = NULL;
    }
    if (t->cb != NULL) {
        t->cb(t->data, status, t->req.id, status == 0 ? lid : 0,
              status == 0 ? r->raft.current_term : 0);
    }
    tern_free(t);
}

/* The outcome of t from raft's state now: 1 decided (*status), 0 not
 * yet (an election is under way). */
static int transfer_outcome(struct transfer_req *t, int *status, uint64_t *lid)
{
    struct repl *r = t->r;
    raft_id id = 0;
    const char *addr = NULL;
    int state = raft_state(&r->raft);
    raft_leader(&r->raft, &id, &addr);
    *lid = id;
    if (state == RAFT_LEADER || r->failed != 0 || state == RAFT_UNAVAILABLE) {
        *status = TERN_ETRANSFER; /* we lead on, or cannot take part */
        return 1;
    }
    if (id == 0) {
        return 0;
    }
    *status = id == t->req.id ? 0 : TERN_ETRANSFER;
    return 1;
}

static void transfer_cb(struct raft_transfer *req)
{
    struct transfer_req *t = req->data;
    struct repl *r = t->r;
    uint64_t lid = 0;
    int status = TERN_ESHUTDOWN;

    r->core_failing++; /* the core may be mid step-down (repl_int.h) */
    if (!r->closing) {
        /* Done or given up (the core times a transfer out after an
         * election timeout): if we still lead the same term, writes
         * reopen. */
        repl_guard_transfer(r, false, t->term);
        if (transfer_outcome(t, &status, &lid) == 0) {
            t->settling = true;
            t->settle_until =
                r->raft.io->time(r->raft.io) + r->election_timeout_ms;
            r->core_failing--;
            return;
        }
    }
    transfer_finish(t, status, lid);
    r->core_failing--;
}

void repl_transfer_poll(struct repl *r)
{
    struct transfer_req *t = r->transfer;
    uint64_t lid = 0;
    int status = TERN_ESHUTDOWN;
    if (t == NULL || !t->settling) {
        return;
    }
    if (!r->closing && transfer_outcome(t, &status, &lid) == 0) {
        if (r->raft.io->time(r->raft.io) < t->settle_until) {
            return;
        }
        status = TERN_ETRANSFER;
    }
    transfer_finish(t, status, lid);
}

/* Whether id is a voter of raft's current configuration (struct raft is
 * public in 0.15). */
static int voter_role(struct repl *r, uint64_t id)
{
    const struct raft_configuration *c = &r->raft.configuration;
    for (unsigned i = 0; i < c->n; i++) {
        if (c->servers[i].id == id) {
            return c->servers[i].role;
        }
    }
    return -1;
}

int repl_transfer_start(struct repl *r,
                        uint64_t id,
                        repl_transfer_cb cb,
                        void *data,
                        uint64_t *target,
                        char *errmsg)
{
    struct transfer_req *t;
    int rv;
    if (r->closing) {
        tern_errmsg_printf(errmsg, "raft is closing");
        return TERN_ESHUTDOWN;
    }
    if (raft_state(&r->raft) != RAFT_LEADER || r->failed != 0 ||
        r->core_failing > 0) {
        tern_errmsg_printf(errmsg, "not the leader");
        return TERN_ENOTLEADER;
    }
    if (r->transfer != NULL) {
        tern_errmsg_printf(errmsg,
                           "a leadership transfer to node %llu is already "
                           "under way",
                           (unsigned long long)r->transfer->req.id);
        return TERN_EBUSY;
    }
    if (id != 0) {
        int role = voter_role(r, id);
        if (id == r->raft.id) {
            tern_errmsg_printf(errmsg, "node %llu is the leader already",
                               (unsigned long long)id);
            return TERN_ENOTVOTER;
        }
        if (role < 0) {
            tern_errmsg_printf(errmsg, "no node %llu in the cluster",
                               (unsigned long long)id);
            return TERN_ENOTVOTER;
        }
        if (role != RAFT_VOTER) {
            tern_errmsg_printf(errmsg,
                               "node %llu is not a voter (%s): only a voter "
                               "can lead",
                               (unsigned long long)id,
                               role == RAFT_STANDBY ? "standby" : "spare");
            return TERN_ENOTVOTER;
        }
    }
    t = tern_calloc(1, sizeof *t);
    if (t == NULL) {
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    t->req.data = t;
    t->r = r;
    t->term = r->guard.role_term;
    t->cb = cb;
    t->data = data;
    rv = raft_transfer(&r->raft, &t->req, id, transfer_cb);
    if (rv != 0) {
        tern_free(t);
        if (rv == RAFT_NOTFOUND || rv == RAFT_BADID) {
            tern_errmsg_printf(errmsg, "no other voter to hand leadership to");
            return TERN_ENOTVOTER;
        }
        tern_errmsg_printf(errmsg, "raft_transfer: %s", raft_errmsg(&r->raft));
        return repl_err_from_raft(rv);
    }
    r->transfer = t;
    if (target != NULL) {
        *target = t->req.id;
    }
    /* Writes stop at once (raft_apply refuses them during a transfer). */
    repl_guard_transfer(r, true, t->term);
    return 0;
}

int repl_transfer(struct repl *r, uint64_t id)
{
    char errmsg[TERN_ERRMSG_SIZE];
    return repl_transfer_start(r, id, NULL, NULL, NULL, errmsg);
}

void repl_set_disk_full(struct repl *r, bool full)
{
    r->disk_full = full;
}

static void raft_closed(struct raft *raft)
{
    struct repl *r = raft->data;
    void (*cb)(void *) = r->close_cb;
    void *arg = r->close_arg;
    /* Any proposal raft did not complete (it fails them with
     * RAFT_SHUTDOWN/LEADERSHIPLOST on the way down) gets TERN_ESHUTDOWN. */
    while (!tern_list_empty(&r->proposals)) {
        struct repl_proposal *p =
            TERN_CONTAINER(r->proposals.next, struct repl_proposal, link);
        tern_list_remove(&p->link);
        if (p->cb != NULL) {
            p->cb(p->data, TERN_ESHUTDOWN, p->req.index);
        }
        /* raft may still hold req: leak-free because raft is closed and
         * never touches it again. */
        tern_free(p);
    }
    repl_member_close(r);
    free_repl(r);
    if (cb != NULL) {
        cb(arg);
    }
}

static void noop_recv(void *arg, uint64_t from, const void *buf, size_t len)
{
    (void)arg;
    (void)from;
    (void)buf;
    (void)len;
}

void repl_close(struct repl *r, void (*cb)(void *arg), void *arg)
{
    r->close_cb = cb;
    r->close_arg = arg;
    if (r->io.started) {
        /* Detach from the borrowed xport: it outlives us. */
        (void)xport_start(r->xport, noop_recv, NULL);
    }
    r->closing = true;
    if (r->transfer != NULL && r->transfer->settling) {
        transfer_finish(r->transfer, TERN_ESHUTDOWN, 0);
    }
    raft_close(&r->raft, raft_closed);
}

struct raft *repl_raft(struct repl *r)
{
    return &r->raft;
}
