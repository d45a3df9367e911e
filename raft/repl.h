/*
 * raft/: tern's replication adapter over libraft 0.15.0 (prefix repl_).
 *
 * One struct repl is one Raft server: libraft's struct raft, our own
 * struct raft_io wrapper (disk methods delegated to an inner raft_uv, send
 * and receive through an rdma/ xport with our codec), the Figure-8 commit
 * guard, leader-change detection (0.15 has no state callback), the
 * leader barrier, byte-sized snapshots and the bulk catch-up side channel.
 * Only this module includes <raft.h>; no RAFT_* code leaks out (they are
 * translated to tern codes).
 *
 * Threading: everything runs on the loop thread passed to repl_new.
 * Memory: repl_new installs tern's allocator into libraft (raft_heap_set),
 * so buffers from tern_malloc may be handed to repl_propose.
 */
#ifndef TERN_REPL_H
#define TERN_REPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "xport.h"

struct repl;

enum repl_role {
    REPL_UNAVAILABLE = 0,
    REPL_FOLLOWER,
    REPL_CANDIDATE,
    REPL_LEADER,
};

/* The state machine, implemented by node/ on top of index/. All callbacks
 * run on the loop thread. Buffers passed in are borrowed for the call. */
struct repl_fsm {
    void *arg;
    /* Apply the command entry at raft index. Must be idempotent: on restart
     * entries after the last snapshot are applied again, and the FSM skips
     * indexes it already holds. Must be atomic. A non-zero return is an
     * I/O failure: the replica fail-stops (status.failed), see fsm.c. */
    int (*apply)(void *arg, uint64_t index, const void *buf, size_t len);
    /* Make the state at last_applied durable and describe it in a small
     * manifest (tern_malloc'd, ownership passes to repl on 0). */
    int (*snapshot)(void *arg, uint64_t last_applied, void **manifest,
                    size_t *manifest_len);
    /* Adopt the state a manifest describes. Called at start-up with the
     * latest local snapshot and on a follower after an InstallSnapshot whose
     * bulk data has been fetched. If the FSM is already at or past the
     * manifest's applied index (it is durable), keep the current state. A
     * non-zero return leaves libraft's state unchanged (startup fails). */
    int (*restore)(void *arg, const void *manifest, size_t manifest_len);
    /* Bulk catch-up (follower side): which byte range [*from, *to) of the
     * leader's state stream this node lacks to reach the manifest. Called
     * again for every InstallSnapshot (also after an aborted fetch):
     * bytes already fetched should not be asked for again. */
    int (*bulk_range)(void *arg, const void *manifest, size_t manifest_len,
                      uint64_t *from, uint64_t *to);
    /* Leader side (the node that sent the snapshot): read up to cap bytes
     * of the state stream at pos into buf; *n = 0 means no such bytes. */
    int (*bulk_read)(void *arg, uint64_t pos, void *buf, size_t cap,
                     size_t *n);
    /* Follower side: write n bytes at pos (pos == current end of the
     * fetched data). Write into STAGING: only restore() may adopt it.
     * apply() can still run while a fetch is in progress, and the
     * InstallSnapshot may end up not being installed (then restore is not
     * called for it). */
    int (*bulk_write)(void *arg, uint64_t pos, const void *buf, size_t n);
};

struct repl_peer {
    uint64_t id;
    const char *address; /* raft (xport) address "host:port" */
};

struct repl_config {
    uint64_t id;
    const char *address;  /* this node's raft address */
    const char *data_dir; /* raft_uv's directory (created if missing) */
    const struct repl_peer *peers; /* all voters, self included */
    unsigned n_peers;
    unsigned election_timeout_ms;      /* default 150 */
    unsigned heartbeat_ms;             /* default 15; < election timeout */
    uint64_t snapshot_threshold_bytes; /* applied bytes between snapshots;
                                          default 64 MiB */
    unsigned snapshot_trailing;        /* entries kept after a snapshot;
                                          default 256 */
};

/* Fill defaults for zero fields, then check invariants (HB < ET, ids
 * unique, self among peers, ...). */
int repl_config_validate(struct repl_config *c, char *errmsg);

/* Leader/role changes and writability. writable is true only on a leader
 * whose post-election barrier has been applied (and no leadership transfer
 * is under way). Runs on the loop thread, possibly from inside libraft's
 * callbacks: it may call repl_propose/repl_get_status but not repl_close. */
typedef void (*repl_state_cb)(void *arg, enum repl_role role,
                              uint64_t leader_id, uint64_t term,
                              bool writable);

/* Create (not start). loop must not be NULL (raft_uv runs on it). x is
 * borrowed and must outlive the repl; the repl owns x's receive side:
 * repl_start calls xport_start(x, ...) and repl_close re-points it to a
 * no-op (x itself is not closed). The config strings are copied. *out is
 * released by repl_close. */
int repl_new(uv_loop_t *loop, struct xport *x, const struct repl_config *c,
             const struct repl_fsm *fsm, repl_state_cb state_cb,
             void *state_arg, struct repl **out, char *errmsg);

/* Bootstrap the configuration if the data dir is pristine, then start. */
int repl_start(struct repl *r, char *errmsg);

/* Propose one command entry. buf is tern_malloc'd; ownership passes to repl
 * on success (return 0). *index (OUT) is the entry's raft index; the FSM's
 * apply for that index runs before cb. cb gets 0 once applied, or
 * TERN_ENOTLEADER / TERN_ELEADERSHIPLOST (outcome unknown: the entry may
 * still commit) / TERN_ESHUTDOWN / TERN_EFULL / -EIO. Fails with
 * TERN_ENOTLEADER when not writable, TERN_ETOOBIG when len exceeds the
 * xport's largest message minus 1 KiB of framing, TERN_EINVAL when len is
 * not a multiple of 8: raft_uv 0.15 writes entry payloads unpadded but
 * reads them back as if padded to 8 bytes, so any other length silently
 * corrupts its segment files. Pad with zeros; the FSM's apply then sees
 * the padded length, so its entry format must carry its own length. */
typedef void (*repl_propose_cb)(void *data, int status, uint64_t index);
int repl_propose(struct repl *r, void *buf, size_t len, repl_propose_cb cb,
                 void *data, uint64_t *index);

struct repl_status {
    uint64_t id;
    enum repl_role role;
    uint64_t leader_id; /* 0 if unknown */
    uint64_t term;
    uint64_t commit_index;
    uint64_t last_applied;
    uint64_t last_index;
    uint64_t last_stored; /* durably appended locally */
    bool writable;
    int fsm_error; /* last repl_fsm.apply/restore error (0: none) */
    int failed;    /* non-zero: fail-stopped after a log write or FSM apply
                      error; the replica no longer takes part (role
                      REPL_UNAVAILABLE): close and restart it */
};
void repl_get_status(struct repl *r, struct repl_status *out);

/* Ask the leader to hand over leadership to id (0: any voter). */
int repl_transfer(struct repl *r, uint64_t id);

/* Stop raft; pending proposals fail with TERN_ESHUTDOWN; cb(arg) runs once
 * closed (asynchronously: keep running the loop), r is freed before it
 * runs. The xport is not closed: close it after cb. */
void repl_close(struct repl *r, void (*cb)(void *arg), void *arg);

#endif /* TERN_REPL_H */
