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
/* Static name ("follower", "candidate", "leader"); "unavailable"
 * otherwise. */
const char *repl_role_name(enum repl_role r);

/* The state machine, implemented by node/ on top of index/. All callbacks
 * run on the loop thread. Buffers passed in are borrowed for the call. */
struct repl_fsm
{
    void *arg;
    /* Apply the command entry at raft index. Must be idempotent: on restart
     * entries after the last snapshot are applied again, and the FSM skips
     * indexes it already holds. Must be atomic. A non-zero return is an
     * I/O failure: the replica fail-stops (status.failed), see fsm.c. */
    int (*apply)(void *arg, uint64_t index, const void *buf, size_t len);
    /* Make the state at last_applied durable and describe it in a small
     * manifest (tern_malloc'd, ownership passes to repl on 0). */
    int (*snapshot)(void *arg,
                    uint64_t last_applied,
                    void **manifest,
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
    int (*bulk_range)(void *arg,
                      const void *manifest,
                      size_t manifest_len,
                      uint64_t *from,
                      uint64_t *to);
    /* Leader side (the node that sent the snapshot): read up to cap bytes
     * of the state stream at pos into buf; *n = 0 means no such bytes. */
    int (*bulk_read)(void *arg, uint64_t pos, void *buf, size_t cap, size_t *n);
    /* Follower side: write n bytes at pos (pos == current end of the
     * fetched data). Write into STAGING: only restore() may adopt it.
     * apply() can still run while a fetch is in progress, and the
     * InstallSnapshot may end up not being installed (then restore is not
     * called for it). */
    int (*bulk_write)(void *arg, uint64_t pos, const void *buf, size_t n);
};

struct repl_peer
{
    uint64_t id;
    const char *address; /* raft (xport) address "host:port" */
};

/* When an appended entry counts toward the commit quorum on a node.
 *
 * REPL_DURABILITY_DISK (default): once it is durable on that node's disk
 * (raft_uv's O_DSYNC write completed). A committed entry survives any
 * crashes as long as a majority's disks survive.
 *
 * REPL_DURABILITY_MEMORY: once it is in that node's memory (the disk
 * write continues in the background: appends are handed to raft_uv in
 * batches, at most about 1 ms after they counted, see raft/io.c
 * "Coalesced inner writes"; a crash therefore loses up to that much more
 * than the disk latency alone). Commit latency no longer includes a disk
 * write. What can lose ACKNOWLEDGED
 * (committed, applied, reported to the client) entries in this mode:
 *   - a crash of every node holding the entry before any of their disk
 *     writes of it completed: e.g. a power loss of the whole cluster, or
 *     of the majority that acknowledged it, within the disk latency (plus
 *     the ~1 ms batching delay) after the ack;
 *   - more generally: holders that crash before their disk write of the
 *     entry completed come back without it (amnesia, they then vote like
 *     nodes that never had it); the entry is lost if, before the leader
 *     re-replicated it to a majority again, a leader is elected by a
 *     quorum that contains no remaining holder. With 3 nodes and an entry
 *     acknowledged by 2, ONE such crash of the follower holder plus the
 *     leader becoming unavailable (crash, partition) before it re-sent the
 *     entry is enough;
 *   - "crash" includes a process crash (kill -9, OOM kill, abort): our
 *     io batches appends and raft_uv queues them in process memory while
 *     its single write is in flight, and those never reach the kernel. A
 *     write already submitted to the kernel survives a process crash, not
 *     a power loss.
 * What loses nothing: a crash of a holder whose disk write completed; a
 * crash (even with amnesia) of one node while the other holders stay
 * available and one of them leads or wins the next election (the election
 * restriction compares in-memory logs; terms and votes stay synchronous
 * and durable in both modes); crashes of nodes not among the holders.
 * After a loss, a node's FSM may hold an entry the cluster no longer has
 * (the index is applied before the log is durable). Snapshots, terms and
 * votes are durable before they count in both modes; only log appends
 * differ. status.last_stored stays the disk index in both modes. */
enum repl_durability {
    REPL_DURABILITY_DISK = 0,
    REPL_DURABILITY_MEMORY = 1,
};

/* Static name ("disk", "memory"); "unknown" for other values. */
const char *repl_durability_name(enum repl_durability d);

/* Term bounds. A received Raft message whose term (or a term it carries:
 * entries, last log term, snapshot term) is >= REPL_TERM_MAX, or above
 * our durable term by more than max_term_jump, or greater than the
 * message's own term, is refused before the core sees it and counted
 * (status.terms_refused): one forged RequestVote with term 2^64-1 would
 * otherwise make every node adopt it, and the next election wraps the
 * term. Our own set_term refuses to reach REPL_TERM_MAX: the replica
 * fail-stops with TERN_ELIMIT (status.term_exhausted) instead. 2^62
 * leaves room no real cluster reaches (an election per millisecond for
 * 10^8 years) and is far from the wrap. The jump bound: with pre-vote an
 * isolated node does not raise its term, so terms only grow by one per
 * election the cluster holds; a node that was down receives the
 * cluster's term, which is within the bound unless the cluster held that
 * many elections meanwhile. A refused node says so in its log (node/);
 * raise [raft] max_term_jump then. */
#define REPL_TERM_MAX              ((uint64_t)1 << 62)
#define REPL_DEFAULT_MAX_TERM_JUMP ((uint64_t)1 << 20)

/* What the load found in tern's term record (raft/meta.c), reported in
 * status.meta_load for the node's log. */
enum repl_meta_load {
    REPL_META_MATCH = 0,     /* equal to raft_uv's (or both pristine) */
    REPL_META_CREATED = 1,   /* none yet: created from raft_uv's values */
    REPL_META_COMPLETED = 2, /* one update behind raft_uv's (a crash
                                between the two writes): completed */
};

/* Where a replica keeps its raft log (DATA_DIR/raft): libraft's raft_uv,
 * or tern's own store (tlog/, docs/LOGSTORE.md; raft/tlog_io.c). A data
 * directory stays with the store that created it. */
enum repl_log_store { REPL_LOG_STORE_UV = 0, REPL_LOG_STORE_TERN = 1 };

struct repl_config
{
    uint64_t id;
    const char *address;           /* this node's raft address */
    const char *data_dir;          /* raft_uv's directory (created 0700 if
                                      missing), also holding tern's term record
                                      (raft/meta.c); NULL (tests over a fake inner
                                      io only): no term record */
    const struct repl_peer *peers; /* all voters, self included (with
                                      join: the members to expect
                                      messages from, self optional) */
    unsigned n_peers;
    bool join; /* a node joining a running cluster (raft/member.c): never
                  bootstrap a configuration; wait for the leader to add
                  and contact it (its configuration comes with the first
                  entries or snapshot it receives) */
    unsigned election_timeout_ms;      /* default 150 */
    unsigned heartbeat_ms;             /* default 15; < election timeout */
    uint64_t snapshot_threshold_bytes; /* applied bytes between snapshots;
                                          default 64 MiB */
    unsigned snapshot_trailing;        /* entries kept after a snapshot;
                                          default 256 */
    enum repl_durability durability;   /* default (0) REPL_DURABILITY_DISK;
                                          per node: every node of a cluster
                                          should use the same value (a
                                          memory-mode node counts entries
                                          that are only in its memory) */
    bool no_auto_rejoin;               /* leader: do not remove and add
                                          back a voter that reports less
                                          than it acknowledged (member.c,
                                          "Automatic rejoin"); default
                                          (false): do */
    uint64_t max_term_jump;            /* refuse messages whose term is
                                          more than this above ours
                                          (REPL_TERM_MAX above); default
                                          (0) REPL_DEFAULT_MAX_TERM_JUMP;
                                          UINT64_MAX: no jump bound */
    enum repl_log_store log_store;     /* default (0) REPL_LOG_STORE_UV */
    uint64_t segment_bytes;            /* log_store TERN: a segment file's
                                          size; 0: tlog's default (8 MiB) */
    bool no_peer_down;                 /* ignore the xport's peer-down
                                          signal (raft/lost.c): a
                                          follower waits out its election
                                          timeout after its leader died;
                                          default (false): it starts a
                                          pre-vote at once */
};

/* Fill defaults for zero fields, then check invariants (HB < ET, ids
 * unique, self among peers, ...). */
int repl_config_validate(struct repl_config *c, char *errmsg);

/* Leader/role changes and writability. writable is true only on a leader
 * whose post-election barrier has been applied (and no leadership transfer
 * is under way). Runs on the loop thread, possibly from inside libraft's
 * callbacks: it may call repl_propose/repl_get_status but not repl_close. */
typedef void (*repl_state_cb)(void *arg,
                              enum repl_role role,
                              uint64_t leader_id,
                              uint64_t term,
                              bool writable);

/* Create (not start). loop must not be NULL (raft_uv runs on it). x is
 * borrowed and must outlive the repl; the repl owns x's receive side:
 * repl_start calls xport_start(x, ...) and repl_close re-points it to a
 * no-op (x itself is not closed). The config strings are copied. *out is
 * released by repl_close. */
int repl_new(uv_loop_t *loop,
             struct xport *x,
             const struct repl_config *c,
             const struct repl_fsm *fsm,
             repl_state_cb state_cb,
             void *state_arg,
             struct repl **out,
             char *errmsg);

/* Fencing: the repl sets x's epoch and fence (xport_set_epoch,
 * xport_set_fence) to the Raft term it loads at start and to every new
 * term as soon as it is persisted (raft_io set_term), before raft acts in
 * that term: its own writes carry its term, and writes stamped with an
 * older term (a deposed leader's) are refused by x. A failed set is
 * retried on every tick (the term check inside every Raft message still
 * holds meanwhile). */

/* Bootstrap the configuration if the data dir is pristine, then start. */
int repl_start(struct repl *r, char *errmsg);

/* Propose one command entry. buf is tern_malloc'd; ownership passes to repl
 * on success (return 0). *index (OUT) is the entry's raft index; the FSM's
 * apply for that index runs before cb. cb gets 0 once applied, or
 * TERN_ENOTLEADER / TERN_ELEADERSHIPLOST / -EIO (outcome unknown: the
 * entry may still commit; -EIO: this node's disk write failed, its
 * AppendEntries may have left) / TERN_ESHUTDOWN / TERN_EFULL. Fails with
 * TERN_ENOTLEADER when not writable, TERN_ETOOBIG when len exceeds the
 * xport's largest message minus 1 KiB of framing, TERN_EINVAL when len is
 * not a multiple of 8: raft_uv 0.15 writes entry payloads unpadded but
 * reads them back as if padded to 8 bytes, so any other length silently
 * corrupts its segment files. Pad with zeros; the FSM's apply then sees
 * the padded length, so its entry format must carry its own length. */
typedef void (*repl_propose_cb)(void *data, int status, uint64_t index);
int repl_propose(struct repl *r,
                 void *buf,
                 size_t len,
                 repl_propose_cb cb,
                 void *data,
                 uint64_t *index);

struct repl_status
{
    uint64_t id;
    enum repl_role role;
    uint64_t leader_id; /* 0 if unknown */
    /* A follower that has not heard from leader_id for an election
     * timeout: it is probably gone (raft/lost.c 4.: it holds no votes),
     * and a new leader may be on its way. */
    bool leader_silent;
    uint64_t term;
    uint64_t commit_index;
    uint64_t last_applied;
    uint64_t last_index;
    uint64_t last_stored;  /* durably appended locally (on disk, both
                              modes) */
    uint64_t last_counted; /* last index counted toward the quorum on this
                              node: == last_stored in disk mode, may be
                              ahead of it in memory mode */
    enum repl_durability durability;
    bool writable;
    /* The index has applied what the cluster had committed when this
     * replica started: as a leader, it is writable (its term's barrier is
     * applied); as a follower, last_applied reached catch_up_to, the first
     * commit index a leader of the current term sent it whole (not capped
     * by a split), that it took whole, and that covers an entry of that
     * leader's own term (so its barrier, and everything committed before
     * it). Sticky until the replica is closed. Until then its tables
     * (users, grants) may miss what was committed while it was down.
     * Limit: a leader that has lost its quorum without knowing it yet
     * (for at most an election timeout) can give a follower that hears
     * only from it a mark below what a newer leader committed. */
    bool caught_up;
    uint64_t catch_up_to; /* 0 until such a commit index was heard */
    /* a leader handing over: the target (else 0) */
    uint64_t transfer_to;
    int fsm_error; /* last repl_fsm.apply/restore error (0: none) */
    int failed;    /* non-zero: fail-stopped after a log write or FSM apply
                      error; the replica no longer takes part (role
                      REPL_UNAVAILABLE): close and restart it */
    /* What failed, when the code alone does not say it ("" otherwise);
     * owned by the replica, valid until repl_close. */
    const char *failed_detail;
    bool disk_full;             /* repl_set_disk_full(true) in force */
    uint64_t disk_full_dropped; /* AppendEntries stripped of their entries
                                   while full */
    /* Received messages refused before the core (raft/io.c): a term out
     * of bounds (REPL_TERM_MAX), and a sender id outside the
     * configuration; the newest refused term and its sender, the newest
     * unknown sender. Counters only grow. */
    uint64_t terms_refused;
    uint64_t refused_term;
    uint64_t refused_from;
    uint64_t unknown_senders;
    uint64_t unknown_from;
    bool term_exhausted; /* fail-stopped: the next term would reach
                            REPL_TERM_MAX */
    /* The term record at start (raft/meta.c): enum repl_meta_load and
     * the record's term and vote as found (before it was created or
     * completed). */
    int meta_load;
    uint64_t meta_prev_term;
    uint64_t meta_prev_vote;
    /* log_store = tern: torn tails the load cut (0 or 1; a write a crash
     * interrupted, never acknowledged). Always 0 for raft_uv, which does
     * not report it. */
    unsigned log_torn;
    /* The raft log store ([raft] log_store): false raft_uv, true tern's
     * own (tlog). For tern, its counters since the node started. */
    bool log_store_tern;
    struct repl_log_stats
    {
        uint64_t writes;    /* durable writes completed */
        uint64_t bytes;     /* bytes they wrote */
        uint64_t segments;  /* segments in use */
        uint64_t prepared;  /* segments prepared */
        uint64_t recycled;  /* of them, over a file of the free list */
        uint64_t forgotten; /* segments forgotten (snapshots, truncates) */
        uint64_t free;      /* files on the free list now */
    } log;
    /* Membership (repl.h, "Membership"): this node's role in the latest
     * configuration it knows (enum repl_member_role; ABSENT: not in it,
     * waiting to be added, or removed) and that configuration's size. */
    int member_role;
    unsigned n_members;
    /* Votes (member.c, "Votes"): RequestVotes this node dropped because
     * it may not vote (counter), and rejoin_needed: it joined with an
     * empty data dir and the configuration already counts it as a voter
     * (it lost its data under this id): it never votes until it is
     * removed and added again (tern cluster rejoin). */
    uint64_t votes_withheld;
    bool rejoin_wait; /* started empty in join mode, not yet seen as a
                         non-voter: no vote (repl.h, "Votes") */
    bool rejoin_needed;
    /* Leader: voters it removed and added back after they reported less
     * than they had acknowledged (counter), and the last one's id. */
    uint64_t auto_rejoins;
    uint64_t auto_rejoin_id;
};
void repl_get_status(struct repl *r, struct repl_status *out);

/* What a raft directory holds, by store. Both stores write raft/meta.c's
 * term record (tern-meta1/2), so it tells neither apart. */
struct repl_log_dir
{
    bool uv;       /* raft_uv's: metadata1/2, open-N, START-END, snapshot-* */
    bool uv_meta;  /* of them, metadata1 or 2 (its term and vote) */
    bool tern;     /* tern's store's: seg-N, free-N, snap-N */
    bool tern_log; /* of them, seg-N or snap-N (entries or a snapshot) */
};
/* 0 (a missing directory holds nothing: a new node) or -errno. */
int repl_log_dir_scan(const char *dir, struct repl_log_dir *out);

/* A voter's replication progress as the leader sees it. */
struct repl_progress
{
    uint64_t id;
    uint64_t match_index; /* highest index it reported as stored */
};
/* On a leader: OUT out[0..n) for the voters other than itself (at most
 * max, configuration order; out caller-owned), n returned. 0 when this
 * replica does not lead. Loop thread only. */
unsigned repl_get_progress(struct repl *r,
                           struct repl_progress *out,
                           unsigned max);

/* Replication latency (for `tern bench`): on a leader, the time from the
 * leader's local append of a batch of entries (one repl_propose, or the
 * post-election barrier) to the moment its commit index covers the
 * batch's last entry, in monotonic nanoseconds (uv_hrtime). Sampled for
 * every leader append; cost per sample: a ring push at append, a compare
 * plus a histogram increment at commit. Appends in flight when the node
 * stops leading are not sampled. Histogram, with S = 2^SUB_BITS sub-
 * buckets per power of two: bucket b < S holds the value b; above,
 * b = S (p - SUB_BITS + 1) + s holds [(S + s) << (p - SUB_BITS),
 * (S + s + 1) << (p - SUB_BITS)) for the p with 2^p <= value < 2^(p+1)
 * (resolution 1/S of a power of two: with S = 16, an upper bound is at
 * most 6.25% above the value; 976 buckets). */
#define REPL_LATENCY_SUB_BITS 4
#define REPL_LATENCY_BUCKETS                                                   \
    ((1u << REPL_LATENCY_SUB_BITS) * (65u - REPL_LATENCY_SUB_BITS))
#define REPL_LATENCY_RECENT 64
struct repl_latency
{
    uint64_t count; /* samples since repl_new or the last reset */
    uint64_t sum_ns;
    uint64_t min_ns; /* 0 if count == 0 */
    uint64_t max_ns;
    uint64_t dropped; /* appends not sampled (too many in flight) */
    uint64_t buckets[REPL_LATENCY_BUCKETS];
    uint64_t recent[REPL_LATENCY_RECENT]; /* the last n_recent samples,
                                             oldest first */
    unsigned n_recent;
};
/* Copy the counters into *out (caller-owned); reset: start over. */
void repl_get_latency(struct repl *r, struct repl_latency *out, bool reset);
/* Add one sample of ns to l (caller-owned; what the node does for every
 * commit, for tools that keep a histogram of their own). */
void repl_latency_record(struct repl_latency *l, uint64_t ns);
/* Upper bound (ns) of the histogram bucket holding quantile q (0..1) of
 * l's samples (never above the largest sample); 0 if there are none. */
uint64_t repl_latency_quantile(const struct repl_latency *l, double q);

/* Stage breakdown of replication latency (profiling; same histogram
 * format, recent[] unused). Each node times its own part of a commit with
 * the monotonic clock:
 *   leader:   APPEND_TO_POST   leader append -> first AppendEntries
 *                              carrying it handed to the xport
 *             POST_TO_RESULT   -> first successful result covering it
 *                              received (the round trip seen by the leader)
 *             RESULT_TO_COMMIT -> commit index covers it
 *   follower: F_DECODE         frame delivered by the xport -> decoded,
 *                              handed to the core
 *             F_CORE           -> the core called append
 *             F_ACK            -> raft's append callback fired (memory
 *                              mode: the deferred completion)
 *             F_POST           -> the result handed to the xport
 *             F_TOTAL          frame delivered -> result handed over
 *   both:     APPLY            time inside one FSM apply (on the leader
 *                              after the commit, on a follower usually
 *                              inside F_ACK..F_POST: libraft 0.15 applies
 *                              before it answers)
 *   leader:   LEADER_DISK      leader append -> its own append is durable
 *                              (raft's append callback; memory mode: the
 *                              deferred completion); runs alongside
 *                              APPEND_TO_POST..POST_TO_RESULT
 * Post stamps are taken just before the hand-off to the xport.
 * POST_TO_RESULT - F_TOTAL is the transport (both ways) plus wake-ups. */
enum repl_stage {
    REPL_STAGE_APPEND_TO_POST = 0,
    REPL_STAGE_POST_TO_RESULT,
    REPL_STAGE_RESULT_TO_COMMIT,
    REPL_STAGE_F_DECODE,
    REPL_STAGE_F_CORE,
    REPL_STAGE_F_ACK,
    REPL_STAGE_F_POST,
    REPL_STAGE_F_TOTAL,
    REPL_STAGE_APPLY,
    REPL_STAGE_LEADER_DISK,
    REPL_STAGE__COUNT
};
/* Static short name of a stage ("append_to_post", ...); "?" otherwise. */
const char *repl_stage_name(unsigned stage);
/* Copy the stage histograms into out[REPL_STAGE__COUNT] (caller-owned);
 * reset: start over. Also reset by repl_get_latency(.., reset = true). */
void repl_get_stages(struct repl *r, struct repl_latency *out, bool reset);

/* The node's disk alarm (node/disk.c): while full, this replica takes no
 * new entries, does not stand for election and refuses leadership
 * transfers (guard.c item 11). A leader keeps leading; node/ refuses the
 * writes. */
void repl_set_disk_full(struct repl *r, bool full);

/* Leadership transfer: the leader hands leadership over to voter id, or
 * with id 0 to the first voter whose log matches the leader's last index
 * (libraft 0.15's choice; the last voter when none does yet). Writes stop
 * (not writable) until it ends. cb(data, status, target, leader_id, term)
 * runs once on the loop thread when it ends: status 0, leader_id the
 * target (now leader in term); TERN_ETRANSFER: the target did not win
 * within an election timeout (the leader may still lead: then writes
 * reopen), or another node won; TERN_ESHUTDOWN: repl_close ran first
 * (cb runs inside it; do not call repl_* from cb then). cb may be NULL.
 * Fails without calling cb: TERN_ENOTLEADER, TERN_EBUSY (a transfer is
 * under way), TERN_ENOTVOTER (id unknown, not a voter, ourselves, or no
 * other voter), TERN_ESHUTDOWN; errmsg says why. *target (OUT, may be
 * NULL) is the chosen target. */
typedef void (*repl_transfer_cb)(void *data,
                                 int status,
                                 uint64_t target,
                                 uint64_t leader_id,
                                 uint64_t term);
int repl_transfer_start(struct repl *r,
                        uint64_t id,
                        repl_transfer_cb cb,
                        void *data,
                        uint64_t *target,
                        char *errmsg);
/* repl_transfer_start without a callback. */
int repl_transfer(struct repl *r, uint64_t id);

/* ---- Membership (raft/member.c) ----------------------------------------
 *
 * The configuration is libraft's: every change is a RAFT_CHANGE entry, and
 * snapshots carry the configuration they cover, so every member and every
 * node that catches up learns it with the log. A member's address in that
 * configuration is "RAFTADDR" or "RAFTADDR,META": META is an opaque string
 * of the caller's (node/ keeps the member's client address there), cut
 * off before the address reaches the xport. Members bootstrapped from
 * repl_config.peers carry no META.
 *
 * One change at a time: while a change made through these calls is under
 * way, or libraft holds an uncommitted configuration or a promotion in
 * catch-up, another change fails with TERN_ECHANGING. Changes are made by
 * a writable leader only (TERN_ENOTLEADER otherwise). */
#define REPL_MEMBER_META_MAX 127
#define REPL_MEMBERS_MAX     64

/* libraft's roles (numbering kept), and ABSENT for "not in the
 * configuration". */
enum repl_member_role {
    REPL_MEMBER_STANDBY = 0, /* replicated to, does not vote */
    REPL_MEMBER_VOTER = 1,
    REPL_MEMBER_SPARE = 2, /* in the configuration, not replicated to */
    REPL_MEMBER_ABSENT = 3,
};
/* Static name ("standby", "voter", "spare", "absent"); "?" otherwise. */
const char *repl_member_role_name(int role);

struct repl_member
{
    uint64_t id;
    int role; /* enum repl_member_role */
    char address[256];
    char meta[REPL_MEMBER_META_MAX + 1]; /* "" when none */
};

/* The latest configuration this node knows (possibly not committed yet),
 * copied into out[0..cap) (caller-owned); *n (OUT) is the number of
 * members, which may exceed cap. */
void repl_members(struct repl *r,
                  struct repl_member *out,
                  unsigned cap,
                  unsigned *n);
/* This node's role in that configuration (REPL_MEMBER_ABSENT when it is
 * not in it, e.g. a joining node not added yet, or a removed one). */
int repl_self_role(struct repl *r);

/* Votes. A node grants no vote (RequestVote and pre-vote requests are
 * dropped before the core, status.votes_withheld) and never stands for
 * election (no election ticks, TimeoutNow dropped) while its
 * configuration does not list it as a voter, and a node that started in
 * join mode with
 * an empty log grants none until it has seen itself as a non-voter
 * (spare or standby) in its configuration, i.e. until it was added, or
 * removed and added again, by the add path. A node whose data was lost
 * (wiped, or rebuilt after a damaged log) and that comes back under its
 * old id in join mode therefore never votes with what it lost: the
 * cluster may have counted its votes and acknowledgements, and only a
 * removal committed without it (which puts every entry it acknowledged
 * on a majority of the others) followed by an add makes it a voter again
 * (docs/MEMBERSHIP.md, "Rejoin"). Withholding a vote is always safe in
 * Raft; it can only delay an election. */

/* A change's result: status 0 when the change completed (add: the node
 * is a voter; remove: the configuration without it is committed), else
 * a code. reached is the role the member holds in this leader's
 * configuration when cb runs (add: SPARE or STANDBY when the promotion
 * failed half-way; ABSENT when the first step failed). */
typedef void (*repl_change_cb)(void *data, int status, int reached);

/* Add a member: libraft's raft_add (spare), raft_assign standby (the
 * leader replicates to it: snapshot + bulk copy, then entries), and once
 * its log has reached the leader's commit index, raft_assign voter
 * (libraft's own catch-up rounds then run for what remains). address is
 * its raft address, meta (may be NULL) the string kept beside it; both
 * copied. timeout_ms bounds the whole change (0: 120 s): then cb gets
 * TERN_ETIMEDOUT and the member stays at the role reached (remove it, or
 * add again to go on: an add of a member already present continues from
 * its role). Fails at once with TERN_ENOTLEADER, TERN_ECHANGING,
 * TERN_EINVAL (id 0, bad address, a meta with ',' or too long, an id
 * already a voter, the address of another member), -ENOMEM; cb is then
 * not called. */
int repl_member_add(struct repl *r,
                    uint64_t id,
                    const char *address,
                    const char *meta,
                    unsigned timeout_ms,
                    repl_change_cb cb,
                    void *data);

/* Remove a member (raft_remove). Removing the leader itself is allowed:
 * libraft commits the new configuration and the leader then steps down,
 * and the other voters elect a leader among themselves. Fails at once with
 * TERN_ENOTLEADER, TERN_ECHANGING, TERN_ENOTMEMBER (no such id),
 * TERN_ELASTVOTER (the only voter), -ENOMEM. */
int repl_member_remove(struct repl *r,
                       uint64_t id,
                       repl_change_cb cb,
                       void *data);

/* Automatic rejoin (member.c): with disk durability, a voter that
 * answers this leader with an empty log (or one holding only a bootstrap
 * entry) after it acknowledged more to it in the same term has lost its
 * data (a wiped or replaced disk restarted under its id). The leader then
 * removes it and adds it back (the steps of repl_member_add, no caller
 * callback), so its forgotten votes and acknowledgements stop counting as soon
 * as the removal commits. Not in memory durability (there a crash loses
 * unwritten entries by design), not while another change is under way (retried
 * on the next report). */

/* Stop raft; pending proposals fail with TERN_ESHUTDOWN; cb(arg) runs once
 * closed (asynchronously: keep running the loop), r is freed before it
 * runs. The xport is not closed: close it after cb. */
void repl_close(struct repl *r, void (*cb)(void *arg), void *arg);

/* Seed c->data_dir, which must hold no raft state, with an initial
 * snapshot at index (term 1) whose configuration is c's peers, all
 * voters, and whose data is manifest (len bytes, caller-owned: the FSM's
 * restore receives it at start), so the node starts after index instead
 * of bootstrapping (raft/seed.c). Blocking, on a loop of its own; call
 * before repl_new. 0, or a code with errmsg. */
int repl_seed_snapshot(const struct repl_config *c,
                       uint64_t index,
                       const void *manifest,
                       size_t len,
                       char *errmsg);

#endif /* TERN_REPL_H */
