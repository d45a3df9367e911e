/*
 * tests/unit/raft: deterministic cluster harness. N repl instances, each
 * over a fake in-memory disk (fake_io.h) and the mem xport, one manual
 * clock, driven by cluster_step(): every action (one message delivery, one
 * disk completion, one millisecond of clock) is chosen deterministically,
 * so a failing schedule replays exactly.
 *
 * The test FSM keeps a byte stream (every applied payload appended) and
 * survives crashes (like LMDB would); its snapshot manifest is
 * {u64 stream_len, u64 applied_index}; bulk_range/read/write move stream
 * bytes into a staging copy that only restore adopts. Like index/ (the
 * bytes land past the indexed end of its log), an apply while bytes are
 * staged drops them (idx_bulk_discard) or, with c->refuse_over_bulk (the
 * index/ of jepsen F2, before the fix), fails with TERN_EINVAL.
 * Every (index, payload checksum) any FSM applies is recorded
 * cluster-wide; a different payload at an already applied index sets
 * c->conflict (a committed entry was lost).
 * With c->meta, every node gets a temporary data_dir (removed by
 * cluster_fini), so its repl keeps tern's term record (raft/meta.c) there
 * beside the fake disk's term and vote.
 */
#ifndef TERN_TEST_CLUSTER_H
#define TERN_TEST_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "fake_io.h"
#include "repl_int.h"
#include "txport.h"
#include "xport_test.h"

#define CLUSTER_MAX       5
#define CLUSTER_MAX_INDEX 4096
#define CLUSTER_STEPS     200000 /* step bound of the helpers below */

struct cluster;

struct cnode
{
    struct cluster *c;
    unsigned i;
    uint64_t id;
    char addr[32];
    struct fake_disk disk;
    struct fake_io *io;
    struct xport *x;
    struct txport *tx; /* c->use_txport: x wraps the mem xport */
    struct repl *repl;
    bool up;
    bool frozen; /* disk ops are not completed */
    /* state callback */
    enum repl_role role;
    uint64_t leader;
    uint64_t term;
    bool writable;
    /* FSM (durable across crashes) */
    uint8_t *stream;
    size_t stream_len, stream_cap;
    /* bulk staging: the leader's stream prefix being fetched; adopted by
     * restore only (applies may still run meanwhile) */
    uint8_t *stage;
    size_t stage_len, stage_cap;
    bool staging;
    /* bytes bulk-written and not yet adopted by a restore; applies that
     * ran over them while the fetch was still active (bulk.c rule 1 is
     * broken; cluster_fini expects none); stagings dropped by an apply
     * after the fetch was given up (the index/ fix of the F2 gap) */
    uint64_t bulk_pending;
    uint64_t applies_over_bulk;
    uint64_t bulk_dropped;
    int bulk_reads_ok; /* >= 0: serve that many bulk reads, then fail */
    uint64_t applied_index;
    uint64_t n_applied;
    uint64_t n_restores;
    int fail_apply;     /* next apply returns this */
    int timeout_offset; /* >= 0: fixed election timeout ET + offset */
    char meta_dir[64];  /* c->meta: the repl's data_dir */
    bool join;          /* start in join mode (also implied by n_boot) */
    bool no_ticks;      /* its clock ticks are withheld (entries still
                           arrive: a follower needs no tick for them) */
};

struct cluster
{
    unsigned n;
    struct cnode nodes[CLUSTER_MAX];
    struct xport_mem_net *net;
    uint64_t clock;
    bool guard;
    uint64_t snapshot_bytes;
    unsigned trailing;
    uint64_t bulk_chunk;
    enum repl_durability durability;
    bool use_txport;        /* nodes talk through a txport over mem */
    size_t max_message;     /* txport's max message (0: mem's) */
    bool fencing;           /* txport refuses messages below its fence */
    bool refuse_over_bulk;  /* FSM: old index/ contract (see top) */
    bool meta;              /* nodes keep a term record (see top) */
    uint64_t max_term_jump; /* repl_config.max_term_jump (0: default) */
    bool no_auto_rejoin;    /* repl_config.no_auto_rejoin */
    unsigned n_boot;        /* membership: nodes [0, n_boot) bootstrap the
                               configuration, the others start in join
                               mode with those as peers (0: all of n) */
    uint32_t applied_sum[CLUSTER_MAX_INDEX];
    bool applied_set[CLUSTER_MAX_INDEX];
    bool conflict;
    unsigned rr; /* round robin for disk completions */
};

void cluster_init(struct cluster *c, unsigned n);
void cluster_start(struct cluster *c, unsigned i);
/* cluster_start that may fail: repl_start's code (errmsg filled); on
 * failure the node stays down (its repl and xport closed). */
int cluster_try_start(struct cluster *c, unsigned i, char *errmsg);
/* Crash node i: pending disk ops are lost, repl and xport closed. */
void cluster_crash(struct cluster *c, unsigned i);
void cluster_fini(struct cluster *c);
/* One deterministic action; false if nothing could happen (never: the
 * clock can always advance). */
void cluster_step(struct cluster *c);
typedef bool (*cluster_pred)(struct cluster *c, void *arg);
/* Step until pred holds (checked after every action); false after
 * max_steps. */
bool cluster_step_until(struct cluster *c,
                        cluster_pred pred,
                        void *arg,
                        unsigned max_steps);
/* Index of the writable leader, -1 if none. */
int cluster_writable_leader(struct cluster *c);
int cluster_leader(struct cluster *c); /* role leader, writable or not */
/* Propose a tern_malloc'd copy of payload on node i. */
int cluster_propose(struct cluster *c,
                    unsigned i,
                    const void *payload,
                    size_t len,
                    uint64_t *index);
/* Cut/restore both directions between nodes i and j. */
void cluster_link(struct cluster *c, unsigned i, unsigned j, bool up);
void cluster_isolate(struct cluster *c, unsigned i, bool isolated);

/* Helpers shared by the topic test files (they assert on failure). */
void cluster_start_all(struct cluster *c);
/* Start every node and wait for a writable leader; returns its index. */
int cluster_elect(struct cluster *c);
/* n unconditional steps. */
void cluster_steps(struct cluster *c, unsigned n);
/* The first node that is neither a nor b. */
int cluster_other(struct cluster *c, int a, int b);
/* Propose n entries of size bytes (16..1024) on node l: each starts with
 * tag and its number k, then bytes k & 0xff; *last: the last index. */
void cluster_propose_n(struct cluster *c,
                       unsigned l,
                       unsigned n,
                       size_t size,
                       uint64_t tag,
                       uint64_t *last);
/* cluster_propose_n, then step until every up node applied *last. */
void cluster_propose_applied(struct cluster *c,
                             unsigned l,
                             unsigned n,
                             size_t size,
                             uint64_t tag,
                             uint64_t *last);
/* Hold back (true) or resume every node's disk completions. */
void cluster_freeze_all(struct cluster *c, bool frozen);

bool pred_writable_leader(struct cluster *c, void *arg);
bool pred_any_leader(struct cluster *c, void *arg);
/* arg: pointer to uint64_t index: all up nodes applied >= index */
bool pred_all_applied(struct cluster *c, void *arg);
/* arg: pointer to uint64_t index: the role leader committed >= index */
bool pred_leader_committed(struct cluster *c, void *arg);

#endif /* TERN_TEST_CLUSTER_H */
