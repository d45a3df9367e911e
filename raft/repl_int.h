/*
 * Private to raft/ and its tests: the layout of struct repl and the entry
 * points the files of raft/ call in each other. struct repl is grouped by
 * the file that owns each field: a field is written only by its owning
 * file (the others read it, or call a function of the owner); tests may
 * poke fields directly. The wire codec has its own header (repl_codec.h).
 *
 * Calls between the files: repl.c (public API, life cycle) calls the
 * others and none calls it; latency.c and codec.c call none of the others.
 * io.c, guard.c, bulk.c, fsm.c and fail.c call each other: io.c filters
 * messages through guard.c and hands InstallSnapshot and bulk frames to
 * bulk.c, which delivers through io.c; guard.c and bulk.c read io.c's term
 * runs; fsm.c and bulk.c share the start-up restore; each of them can
 * fail-stop (fail.c), which aborts a bulk fetch and polls the role
 * (guard.c).
 */
#ifndef TERN_REPL_INT_H
#define TERN_REPL_INT_H

#include <linux/aio_abi.h>
#include <stdbool.h>
#include <stdint.h>

#include <raft.h>
#include <raft/uv.h>

#include <tern_common.h>

#include "repl.h"
#include "repl_codec.h"
#include "xport.h"

/* ---- io.c: the raft_io wrapper ----------------------------------------- */

struct repl_term_run
{
    uint64_t index; /* first index of a run of entries with this term */
    uint64_t term;
};

struct repl_io_state
{
    struct raft_io outer; /* what raft sees */
    /* raft_io callbacks given to outer.start / outer.close. */
    raft_io_tick_cb tick_cb;
    raft_io_recv_cb recv_cb;
    raft_io_close_cb close_cb;
    bool started; /* io_start succeeded */

    /* Durable-log tracking (top of io.c). */
    uint64_t next_index;    /* index the next io->append starts at */
    uint64_t durable_index; /* last index durably stored */
    uint64_t term;          /* durable current term (load/set_term) */
    struct repl_term_run *runs;
    size_t n_runs, cap_runs;
    struct tern_list appends; /* in-flight appends, submission order */
    struct tern_list sends;   /* in-flight xport sends */
    uint64_t snap_index;      /* latest durable snapshot (load/put) */
    uint64_t snap_term;
    uint64_t install_index; /* snapshot_put(trailing=0) in flight */
    uint64_t install_term;

    /* Fencing: the term the xport's epoch and fence were last set to (0:
     * not set yet, or the last attempt failed: retried on ticks). */
    uint64_t fenced_term;
    uint64_t fence_errors; /* stats: failed xport_set_epoch/fence */

    /* Oversized AppendEntries split into parts. */
    uint64_t ae_split; /* stats: AppendEntries sent as >1 part */
    uint64_t ae_parts; /* stats: parts sent for those */

    /* Durability modes. acked_index: the last index whose append callback
     * raft got (what the core counts as stored, its last_stored): equal
     * to durable_index in disk mode, possibly ahead of it in memory mode.
     * The guards (guard.c) use acked_index; status.last_stored reports
     * durable_index. */
    uint64_t acked_index;
    unsigned n_unacked;       /* appends whose raft cb has not fired */
    struct tern_list unacked; /* memory mode: those, submission order;
                                 disk mode: deferred ones that failed */
    uv_idle_t idle;           /* fires deferred acks, completes quiet
                                 answers */
    bool idle_init;
    bool idle_closed;
    /* Follower ("Follower apply off the answer path", io.c): the commit
     * index of the newest accepted AppendEntries, held back from the core
     * until its entries are acked and answered (disk mode: delivered as
     * far as durable at once). index 0: nothing held. */
    struct
    {
        uint64_t index;  /* the AppendEntries' last entry */
        uint64_t term;   /* its term */
        uint64_t commit; /* its leader_commit (<= index) */
        uint64_t gen;    /* truncate_gen after the append */
        uint64_t leader_id;
        char leader_addr[REPL_WIRE_ADDR_MAX + 1];
    } hold;
    bool quiet_results;          /* answers to our own heartbeat: not sent */
    struct tern_list null_sends; /* those, completed by run_deferred */
    uint64_t holds_delivered;    /* stats */
    /* Memory mode: appends acked but not yet handed to the inner io
     * ("Coalesced inner writes"), submission order, their bytes, and the
     * timer that hands them over. */
    struct tern_list inner_pending;
    size_t inner_pending_bytes;
    uv_timer_t flush_timer;
    bool flush_timer_closed;
    uint64_t inner_flushes; /* stats: hand-overs of pending appends */
    /* Disk mode, set around raft_apply (repl_io_defer_appends): the
     * leader's own append waits in inner_pending until its AppendEntries
     * are sent ("A leader's own write after its AppendEntries", io.c). */
    bool defer_appends;

    /* libraft 0.15 truncate/close race ("Close and truncate"): truncates
     * handed to the inner io, the newest of them known finished (an
     * append submitted after it completed), and whether io_close is
     * holding the inner close back until that catches up. */
    uint64_t truncate_gen;
    uint64_t truncate_settled;
    bool wait_truncate; /* inner truncates may be in flight */
    /* raft_uv ignores a truncate that fails ("A truncate raft_uv did not
     * carry out", io.c): the newest truncate's index, the lowest since
     * the last append handed to the inner io (0: none), and whether the
     * data dir's closed
     * segments are checked once such an append completes. */
    uint64_t trunc_check;
    bool check_segments;
    bool inner_close_deferred;
    bool inner_closed;

    uint64_t bad_frames;     /* stats: undecodable or misaddressed */
    uint64_t ticks_withheld; /* stats: guard.c item 4 */

    /* Peers whose newest frame carried REPL_FRAME_ACCEPTS_XXH3 ("Frame
     * checksums" in io.c): ids, at most REPL_CAPS_MAX, owned. */
    uint64_t *xxh3_peers;
    unsigned n_xxh3_peers;
    unsigned cap_xxh3_peers;

    /* Received messages refused before the core ("Refused messages" at
     * the top of io.c): a term beyond the bounds, or a sender outside the
     * configuration; the newest of each for the node's log line. */
    uint64_t max_term_jump;   /* repl_config.max_term_jump */
    uint64_t terms_refused;   /* stats */
    uint64_t refused_term;    /* the newest refused message's term */
    uint64_t refused_from;    /* and its sender */
    uint64_t unknown_senders; /* stats */
    uint64_t unknown_from;    /* the newest unknown sender */
    bool term_exhausted;      /* set_term refused at REPL_TERM_MAX */

    /* tern's term record (meta.c); off when the repl has no data_dir. */
    bool meta_on;
    uint64_t meta_seq;       /* seq of the newest record written */
    int meta_load;           /* enum repl_meta_load of the last load */
    uint64_t meta_prev_term; /* the record as found at load */
    uint64_t meta_prev_vote;
};

/* ---- meta.c: tern's term record ---------------------------------------- */

#define REPL_META_SIZE 48

struct repl_meta_rec
{
    bool present; /* read: a valid record was found */
    uint64_t seq;
    uint64_t term;
    uint64_t vote;
};

/* Encode/decode one record (format at the top of meta.c). decode:
 * TERN_ECORRUPT (length, magic, checksum) or TERN_EVERSION. */
void repl_meta_encode(uint8_t buf[REPL_META_SIZE],
                      const struct repl_meta_rec *m);
int repl_meta_decode(const void *buf, size_t len, struct repl_meta_rec *out);
/* Read the current record of dir (out->present false if there is none).
 * 0, TERN_ECORRUPT (files but no valid record), TERN_EVERSION or -errno,
 * with errmsg. */
int repl_meta_read(const char *dir, struct repl_meta_rec *out, char *errmsg);
/* Write m durably into the slot of m->seq. 0 or -errno with errmsg. */
int repl_meta_write(const char *dir,
                    const struct repl_meta_rec *m,
                    char *errmsg);
/* Compare what the inner io loaded with our record (rules at the top of
 * meta.c): a repl_meta_load value, or TERN_ECORRUPT with errmsg naming
 * both. */
int repl_meta_check(uint64_t inner_term,
                    uint64_t inner_vote,
                    const struct repl_meta_rec *ours,
                    uint64_t max_jump,
                    char *errmsg);

/* ---- guard.c: role tracking, barrier, mitigations ----------------------- */

struct repl_barrier_req;

/* Leader, per peer (same order as repl.peers): the highest index that
 * peer acknowledged in term, and whether its next AppendEntries must
 * report a failed send (guard.c item 10). */
struct repl_peer_ack
{
    uint64_t term;
    uint64_t acked;
    bool probe;
    /* Item 1: the newest successful result neutralised before our
     * barrier was durable, handed to the core once it is (its
     * last_log_index; term: the term it answered in; 0: none). */
    uint64_t held_term;
    uint64_t held_last;
};

struct repl_guard_state
{
    int role; /* RAFT_* state last polled */
    uint64_t leader_id;
    uint64_t role_term;
    bool writable;                    /* barrier_applied && !transferring */
    bool barrier_applied;             /* this term's barrier applied */
    bool transferring;                /* repl_transfer in progress */
    struct repl_barrier_req *barrier; /* current term's barrier, if any */
    uint64_t barrier_index;           /* b: first entry of the current term */
    bool enabled;    /* Figure-8 guard on (tests may disable) */
    bool hold_ticks; /* #467 mitigation on (tests may disable) */
    struct repl_peer_ack *peer_acks;
    uint64_t dropped;       /* stats: results neutralised (item 1) */
    uint64_t vote_rewrites; /* stats: RequestVote rewrites (#429) */
    uint64_t timeout_now_dropped;
    uint64_t forced_probes;        /* stats: item 10 */
    uint64_t ae_rebased;           /* stats: AppendEntries rebased (item 6) */
    uint64_t ae_held_off;          /* stats: AppendEntries dropped during a
                                      fetch or install (item 9) */
    uint64_t ae_disk_full_dropped; /* stats: stripped for item 11 */
    /* Item 12: the highest index this follower has matched the leader
     * of match_term on (an AppendEntries accepted: prev_log_index +
     * n_entries; a snapshot installed: its index). A successful result
     * claims no more (repl_guard_send). While an AppendEntries or an
     * InstallSnapshot is being delivered (repl_io_deliver), deliv_* hold
     * its term and what accepting it matches. */
    uint64_t match_term;
    uint64_t match_cap;
    bool deliv_set;
    uint64_t deliv_term;
    uint64_t deliv_last;
    uint64_t results_capped; /* stats: results lowered by item 12 */
    /* Item 4: a TimeoutNow that came while appends were in flight, held
     * for the tick after they are acknowledged (repl_guard_tick). */
    struct
    {
        bool set;
        uint64_t from;
        uint64_t at; /* raft io time it came */
        char addr[REPL_WIRE_ADDR_MAX + 1];
        struct raft_timeout_now msg;
    } held_timeout_now;
    uint64_t timeout_now_delivered; /* stats: held ones delivered */
    uint64_t results_released;      /* stats: item 1's held results */
    bool releasing;                 /* repl_guard_release is running */
};

/* ---- fsm.c: the raft_fsm glue ------------------------------------------ */

struct repl_fsm_glue
{
    struct raft_fsm raft_fsm; /* what raft calls */
    struct raft *core;        /* &repl.raft (tests may point it at a
                                 raft_fixture server) */
    uint64_t applied_bytes;   /* since the last snapshot */
    int fsm_error;            /* last FSM apply/restore error (0: none) */
};

/* ---- bulk.c: bulk catch-up ---------------------------------------------- */

struct repl_bulk_fetch
{
    bool active;
    bool started;          /* range taken, requests sent (a fetch waits
                              for in-flight appends first, bulk.c) */
    bool fetched;          /* bytes were written (stats) */
    struct repl_wire held; /* the InstallSnapshot waiting for its data */
    uint64_t peer_id;
    char peer_addr[REPL_WIRE_ADDR_MAX + 1];
    uint64_t next_pos; /* next byte to write */
    uint64_t next_req; /* next byte to request */
    uint64_t to;
    unsigned in_flight; /* requests outstanding */
    unsigned retries;   /* stall re-requests since last progress */
    uint64_t last_progress_ms;
};

struct repl_bulk_state
{
    struct repl_bulk_fetch fetch;
    uint64_t chunk;  /* bytes per BULK_DATA */
    unsigned window; /* BULK_REQs in flight */
    uint64_t stall_ms;
    uint64_t rerequests; /* stats: stall re-requests */
    uint64_t completed;  /* stats: fetches delivered to raft */
    uint64_t noop;       /* stats: installs delivered unfetched
                            (0.15 treats them as no-ops) */
};

/* ---- latency.c: replication latency samples ----------------------------- */

#define REPL_LAT_PENDING 1024
struct repl_lat_pending
{
    uint64_t index; /* last index of a leader append */
    uint64_t t0_ns;
    uint64_t post_ns; /* first AppendEntries covering index posted */
    uint64_t res_ns;  /* first successful result covering index received */
    uint64_t disk_ns; /* the leader's own append covering index durable */
};
/* Follower side of the stage breakdown: the newest AppendEntries with
 * entries, from its arrival to its result. */
struct repl_lat_follower
{
    uint64_t index;     /* its last index; 0: none being timed */
    uint64_t recv_ns;   /* the xport delivered the frame */
    uint64_t core_ns;   /* decoded, handed to the core */
    uint64_t append_ns; /* the core appended its entries */
    uint64_t ack_ns;    /* raft's append callback fired */
};

struct repl_lat_state
{
    struct repl_latency total;        /* leader append -> commit */
    unsigned recent_pos;              /* next slot of total.recent */
    struct repl_lat_pending *pending; /* ring, REPL_LAT_PENDING */
    unsigned head, n;
    uint64_t (*now)(void); /* monotonic ns; tests may replace it */
    unsigned posted;       /* pending[head..+posted) have post_ns */
    unsigned resulted;     /* pending[head..+resulted) have res_ns */
    unsigned synced;       /* pending[head..+synced) have disk_ns */
    uint64_t recv_ns;      /* arrival time of the frame being decoded */
    struct repl_lat_follower f;
    struct repl_latency stages[REPL_STAGE__COUNT];
};

/* ---- member.c: membership changes -------------------------------------- */

struct repl_member_change;

struct repl_member_state
{
    struct repl_member_change *change; /* the change under way, or NULL */
    bool self_absent;        /* stats: self not in the configuration at the last
                                tick */
    bool rejoin_wait;        /* joined with nothing: no votes until seen as
                                a non-voter (repl.h, "Votes") */
    uint64_t votes_withheld; /* stats: RequestVotes dropped */
    bool auto_rejoin;        /* repl_config: !no_auto_rejoin */
    uint64_t amnesia_id;     /* a voter that reported less than it acked,
                                to rejoin from the next tick (0: none) */
    uint64_t auto_rejoins;   /* stats */
    uint64_t auto_rejoin_id;
};

/* ---- lost.c: acting on a leader's lost connection ----------------------- */

struct repl_lost_state
{
    bool on;                /* act on peer-down signals (repl_config) */
    uint64_t offset;        /* ms added to the inner clock (io_time); grows */
    uint64_t leader_id;     /* episode: the leader whose connection closed (0:
                               none) */
    uint64_t term;          /* episode: the term it led */
    uint64_t since;         /* episode: inner io time of the signal */
    uint64_t act_at;        /* inner io time of the next action (0: none) */
    unsigned tries;         /* timer expiries in this episode */
    uint64_t signals;       /* stats: peer-down signals received */
    uint64_t episodes;      /* stats: signals about the current leader */
    uint64_t acted;         /* stats: election timers expired */
    uint64_t false_signals; /* stats: the leader spoke after its signal */
    uint64_t votes_unstuck; /* stats: RequestVotes given disrupt_leader */
    /* 4. and 5. (elections without a closed connection). */
    uint64_t stale_unstuck;  /* stats: votes let past a leader silent >= ET */
    uint64_t my_pre_term;    /* our last pre-vote as sent: its term, */
    uint64_t my_pre_index;   /* last log index */
    uint64_t my_pre_last;    /* and last log term (0 term: none sent) */
    uint64_t race_term;      /* the term of the race_ counts and yield */
    unsigned race_ties;      /* tied pre-votes refused in race_term (5.) */
    unsigned race_resends;   /* pre-votes re-sent at once in race_term */
    uint64_t yield_until;    /* inner io ms: our pre-vote grants count as
                                refusals until then (5.; 0: none) */
    uint64_t heard_at;       /* inner io ms of the last AppendEntries or
                                InstallSnapshot of our leader (4.) */
    bool yielded;            /* stood aside once in race_term (5.) */
    bool grants_dropped;     /* grants set aside in this standing aside */
    uint64_t grants_yielded; /* stats: our pre-vote grants set aside (5.) */
    bool resend;             /* re-send our pre-vote after this delivery */
    bool stand;              /* stand ourselves after this delivery (4.) */
    uint64_t stood;          /* stats: elections started by 4. */
    uint64_t ties_refused;   /* stats: equal-log pre-votes refused (5.) */
    uint64_t resends;        /* stats: pre-votes re-sent at once (5.) */
};

/* ---- the replica -------------------------------------------------------- */

struct repl
{
    /* repl.c: configuration (strings copied) and life cycle. */
    struct raft raft;
    struct raft_io *inner; /* disk: raft_uv or a test fake */
    bool own_inner;        /* inner is our raft_uv (free at close) */
    bool own_tlog;         /* inner is our tlog_io.c (free at close) */
    struct raft_uv_transport *dummy_transport;
    uv_loop_t *loop;
    struct xport *xport;
    uint64_t id;
    char *address;
    char *data_dir;
    struct repl_peer *peers;
    unsigned n_peers;
    unsigned election_timeout_ms;
    unsigned heartbeat_ms;
    unsigned tick_ms;
    uint64_t snapshot_threshold_bytes;
    unsigned snapshot_trailing;
    enum repl_durability durability;
    bool join; /* repl_config.join: never bootstrap */
    struct repl_fsm fsm;
    repl_state_cb state_cb;
    void *state_arg;
    bool disk_full; /* repl_set_disk_full (guard.c item 11) */
    bool closing;   /* repl_close called */
    /* > 0 while a callback of libraft's runs for a request it fails (a
     * step-down fails every pending apply, barrier, change and transfer
     * before it updates its state: raft_state still says leader while
     * the leader's progress array is already freed). Callers up the
     * stack (node/, answering clients) may ask for the status or propose
     * again; repl_poll then touches nothing and the calls that would
     * enter libraft refuse (TERN_ELEADERSHIPLOST): a raft_barrier there
     * dereferenced the freed progress array (a SIGSTOPped leader resumed
     * under load crashed so). The poll after the delivery or tick that
     * caused the step-down catches up. */
    unsigned core_failing;
    /* the transfer under way, or being decided (repl.c) */
    struct transfer_req *transfer;
    struct tern_list proposals;
    /* Caught up since the start (repl.c, repl_status.caught_up): the
     * first whole commit index of a leader of the current term that
     * covers an entry of its own term (marked), and the sticky result. */
    bool catch_marked;
    bool caught_up;
    uint64_t catch_mark;
    void (*close_cb)(void *arg);
    void *close_arg;

    /* fail.c: sticky fail-stop code (0 = healthy), and what failed when
     * the code alone does not say it (repl_fail_detail; "" otherwise). */
    int failed;
    char fail_detail[TERN_ERRMSG_SIZE];

    struct repl_io_state io;         /* io.c */
    struct repl_guard_state guard;   /* guard.c */
    struct repl_fsm_glue glue;       /* fsm.c */
    struct repl_bulk_state bulk;     /* bulk.c */
    struct repl_lat_state lat;       /* latency.c */
    struct repl_member_state member; /* member.c */
    struct repl_lost_state lost;     /* lost.c */
};

/* repl.c: the catch-up mark (repl_status.caught_up). repl_catch_note
 * takes an incoming message's AppendEntries fields before the guard and
 * the core change them; repl_catch_delivered, after the core took it,
 * sets the mark if the message carried its leader's whole commit index
 * and the core has all of it. */
struct repl_catch_probe
{
    bool ae;
    uint64_t term, commit, prev, n;
};
void repl_catch_note(struct repl *r,
                     const struct raft_message *m,
                     struct repl_catch_probe *p);
void repl_catch_delivered(struct repl *r, const struct repl_catch_probe *p);

/* ---- io.c ---------------------------------------------------------------- */

/* Fill r->io and the outer raft_io (before raft_init). wait_truncate: the
 * inner io is raft_uv (its close/truncate race, top of io.c). */
void repl_io_setup(struct repl *r, bool wait_truncate);
/* "A truncate raft_uv did not carry out" (io.c): -EIO with errmsg naming
 * the file when a raft_uv closed segment in dir holds an entry at or
 * above index, -errno if dir cannot be listed, else 0. */
int repl_io_stale_segment(const char *dir, uint64_t index, char *errmsg);
/* Free what r->io allocated (after raft's close). */
void repl_io_free(struct repl *r);
void repl_io_close_sends(struct repl *r);
/* Term of the entry at index in the submitted log, 0 if unknown. */
uint64_t repl_io_term_of(const struct repl *r, uint64_t index);
void repl_xport_recv(void *arg, uint64_t from, const void *buf, size_t len);
/* Send an encoded frame (bulk side channel); cb-less. */
int repl_io_send_frame(struct repl *r,
                       uint64_t peer_id,
                       const char *addr,
                       struct repl_frame *f);
/* Deliver a decoded Raft message to the core and poll state afterwards. */
void repl_io_deliver(struct repl *r, struct repl_wire *w);
/* Memory durability: fire the deferred append callbacks (in submission
 * order). Runs from the loop's idle handle; tests without a loop call it
 * directly. Returns how many fired. */
size_t repl_io_run_deferred(struct repl *r);
/* Around raft_apply (repl_propose): in disk mode, hold the leader's own
 * appends back until repl_io_flush_deferred hands them to the inner io
 * ("A leader's own write after its AppendEntries", io.c); no-op in
 * memory mode, whose coalesced appends keep their own timer. */
void repl_io_defer_appends(struct repl *r);
void repl_io_flush_deferred(struct repl *r);
/* Run what a tick of the inner io runs (raft's tick through the gates of
 * guard.c item 4, then the polls), now. Outside raft's callbacks only. */
void repl_io_tick(struct repl *r);

/* ---- guard.c ------------------------------------------------------------- */

/* Item 12: the AppendEntries or InstallSnapshot being delivered was
 * accepted (a success answer or an append/install it caused): what it
 * matches counts for this follower's results. */
void repl_guard_matched(struct repl *r);

/* Fill r->guard (after r->n_peers is set). Returns 0 or -ENOMEM. */
int repl_guard_init(struct repl *r);
void repl_guard_free(struct repl *r);
/* Filter an incoming Raft message: returns true to deliver (possibly
 * rewritten in place), false to drop. */
bool repl_guard_recv(struct repl *r, struct raft_message *m);
/* Rewrite an outgoing message (into *copy) if a mitigation applies.
 * Returns m or copy. */
const struct raft_message *repl_guard_send(struct repl *r,
                                           const struct raft_message *m,
                                           struct raft_message *copy);
/* Leader: true (once) if the next AppendEntries to peer_id must report a
 * failed send, which puts the core's progress for it in probe mode
 * (item 10). */
bool repl_guard_force_probe(struct repl *r, uint64_t peer_id);
/* Poll raft's role/leader/term; reset the guard, submit the barrier and
 * emit state callbacks on changes. */
void repl_poll(struct repl *r);
/* guard.c: on each tick (outside raft's callbacks), hand raft a held
 * TimeoutNow once its appends are acknowledged (item 4). */
void repl_guard_tick(struct repl *r);
/* Leader: hand the core the results item 1 neutralised before the
 * barrier was durable here, once it is (io.c, after an append completed;
 * every tick). Outside raft's callbacks only. */
void repl_guard_release(struct repl *r);
/* repl.c: decide a leadership transfer that raft gave up on during an
 * election, once a leader is known (called from repl_poll). */
void repl_transfer_poll(struct repl *r);
/* Recompute writable from barrier/transfer/failure state; emit on change. */
void repl_update_writable(struct repl *r);
/* A leadership transfer started (true) or ended (false) in term: writes
 * stop meanwhile. An end for another term than the current role term is
 * ignored. */
void repl_guard_transfer(struct repl *r, bool on, uint64_t term);

/* ---- fsm.c --------------------------------------------------------------- */

void repl_fsm_setup(struct repl *r);
/* The FSM state was restored outside libraft (a start-up restore, bulk.c):
 * the byte count toward the next snapshot starts over. */
void repl_fsm_restored(struct repl *r);
/* The FSM failed with code outside an apply (restore of a start-up
 * fetch): record it (status.fsm_error) and fail-stop. */
void repl_fsm_fail(struct repl *r, int code);

/* ---- bulk.c -------------------------------------------------------------- */

/* Fill r->bulk with the defaults. */
void repl_bulk_setup(struct repl *r);
/* Handle an InstallSnapshot: either deliver now or start a fetch (takes
 * ownership of *w in both cases). */
void repl_bulk_on_install(struct repl *r, struct repl_wire *w);
void repl_bulk_on_frame(struct repl *r, struct repl_wire *w);
void repl_bulk_tick(struct repl *r);
void repl_bulk_abort(struct repl *r);
/* Start-up restore from a peer: hold the node's own snapshot manifest
 * until its missing log bytes were fetched from a peer (pending until
 * then). On success the manifest buffer is owned by r; on failure it
 * stays the caller's. */
int repl_bulk_restore_later(struct repl *r, struct raft_buffer *manifest);
bool repl_bulk_restore_pending(const struct repl *r);

/* ---- member.c ------------------------------------------------------------ */

/* Add every server of libraft's configuration missing from r->peers (and
 * the guard's per-peer array beside it): members added at run time are
 * known senders and bulk sources from then on. Members removed stay (a
 * message from them is harmless to the core). 0 or -ENOMEM. */
int repl_peers_sync(struct repl *r);
/* The raft (xport) part of a configuration address: the text before the
 * first ',' (repl.h, "Membership"), into out (cap bytes, NUL-terminated,
 * cut when longer). */
void repl_member_raft_addr(const char *address, char *out, size_t cap);
/* Whether this node may grant a vote now (repl.h, "Votes"); also ends
 * the rejoin wait once the node sees itself as a non-voter (and removes
 * its marker file). */
bool repl_member_may_vote(struct repl *r);
/* The role of server id in a RAFT_CHANGE entry's payload, libraft 0.15's
 * encoding (configuration.c): u8 format 1, u64 LE server count, then per
 * server u64 LE id, NUL-terminated address, u8 role; padding after. 0 with
 * *role set, 1 when id is absent, TERN_EMALFORMED. Reads buf only. */
int repl_member_conf_role(const void *buf, size_t len, raft_id id, int *role);
/* A RAFT_CHANGE entry reaches this node's log (io.c, append): ends the
 * rejoin wait when it names this node a spare or standby, the add path's
 * first steps. Every such entry passes here, so the end of the wait does
 * not depend on a tick falling between the add's steps. */
void repl_member_conf_seen(struct repl *r, const struct raft_buffer *buf);
/* fsync the directory dir (a file created, renamed or removed in it
 * becomes durable). 0 or -errno. (meta.c) */
int repl_fsync_dir(const char *dir);
/* The rejoin wait on disk (member.c, "The rejoin marker"): *present says
 * whether DATA_DIR/rejoin-wait exists. 0 or -errno with errmsg. */
int repl_member_rejoin_mark_load(struct repl *r, bool *present, char *errmsg);
/* Create the marker durably (file and directory fsynced). 0 or -errno
 * with errmsg. */
int repl_member_rejoin_mark_store(struct repl *r, char *errmsg);
/* Leader: voter id answered with last_log_index below what it had
 * acknowledged in this term (guard.c); member.c decides (repl.h,
 * "Automatic rejoin"). */
void repl_member_amnesia(struct repl *r, uint64_t id);
/* Every tick: drive the change under way (catch-up wait, deadline). */
void repl_member_tick(struct repl *r);
/* raft is closed: fail the change under way (TERN_ESHUTDOWN). */
void repl_member_close(struct repl *r);

/* ---- lost.c -------------------------------------------------------------- */

/* Listen to the xport's peer-down signal (before xport_start). */
void repl_lost_start(struct repl *r);
/* Every tick: the staggered action and the pre-vote retries. */
void repl_lost_tick(struct repl *r);
/* A received message on its way to the core: a message of the lost leader
 * ends the episode; a RequestVote during one gets disrupt_leader. */
void repl_lost_recv(struct repl *r, struct raft_message *m);
/* A follower whose leader has been silent for ET (4.). */
bool repl_lost_leader_silent(struct repl *r);
/* After the core took a received message: a pre-vote to re-send (5.). */
void repl_lost_delivered(struct repl *r);
/* A message on its way out, as sent (after guard.c's rewrites). */
void repl_lost_sent(struct repl *r, const struct raft_message *m);
/* Delay between two voters' turns (lost.c, 1.) for an election timeout. */
unsigned repl_lost_stagger_ms(unsigned election_timeout_ms);

/* ---- fail.c -------------------------------------------------------------- */

/* Mark the replica failed (fail-stop, sticky): it stops taking part,
 * reports REPL_UNAVAILABLE and is no longer writable. */
void repl_fail(struct repl *r, int code);
/* repl_fail with a detail (what failed, where) for repl_status's
 * failed_detail; the first failure's detail stays. */
void repl_fail_detail(struct repl *r, int code, const char *detail);
/* Translate a RAFT_* code into a tern code (0 stays 0). */
int repl_err_from_raft(int rv);

/* ---- latency.c ----------------------------------------------------------- */

int repl_lat_init(struct repl *r);
void repl_lat_free(struct repl *r);
/* A leader append of [.., last] was submitted. */
void repl_lat_append(struct repl *r, uint64_t last);
/* Sample every pending append the commit index now covers. */
void repl_lat_poll(struct repl *r);
/* Role/term change or truncation at index: forget appends >= index. */
void repl_lat_forget(struct repl *r, uint64_t index);
/* Stage breakdown (repl.h, enum repl_stage). Leader: an AppendEntries
 * carrying entries up to last was handed to the xport; a successful
 * result for up to last arrived. Follower: a frame arrived (before
 * decoding); a decoded AppendEntries goes to the core; the core appended;
 * raft's append cb fired for up to last; the result for up to last was
 * handed to the xport. Leader: its own append up to last is durable
 * (synced). Each costs a clock read at most. */
void repl_lat_posted(struct repl *r, uint64_t last);
void repl_lat_resulted(struct repl *r, uint64_t last);
void repl_lat_synced(struct repl *r, uint64_t last);
void repl_lat_f_recv(struct repl *r);
void repl_lat_f_core(struct repl *r, uint64_t last);
void repl_lat_f_append(struct repl *r);
void repl_lat_f_ack(struct repl *r, uint64_t last);
void repl_lat_f_post(struct repl *r, uint64_t last);
/* Add to-from (monotonic ns; skipped if from is 0) to a stage. */
void repl_lat_stage(struct repl *r, unsigned stage, uint64_t from, uint64_t to);
/* The monotonic clock of the samples, 0 if none is set (tests). */
uint64_t repl_lat_now(struct repl *r);

/* ---- tlog_io.c: the inner io over tern's log store ------------------------
 */

/* A raft_io over tlog/ in dir (which must exist), its segment files of
 * segment_bytes, keeping at most free_max forgotten ones for reuse (0:
 * tlog's defaults); freed by
 * repl_tlog_io_free after its close callback. */
int repl_tlog_io_new(uv_loop_t *loop,
                     const char *dir,
                     uint64_t segment_bytes,
                     uint32_t free_max,
                     struct raft_io **out,
                     char *errmsg);
void repl_tlog_io_free(struct raft_io *io);
/* Torn tails the last load cut (tlog_loaded.torn: 0 or 1). */
unsigned repl_tlog_io_torn(struct raft_io *io);
/* The store's counters (tlog_get_stats); zeros before it is open. */
void repl_tlog_io_stats(struct raft_io *io, struct repl_log_stats *out);

/* ---- null_transport.c: raft_uv's transport, unused ---------------------- */

/* The transport given to raft_uv_init by repl.c and seed.c: it never
 * listens or connects (raft messages go through the xport, io.c); its
 * close completes on the loop. Caller-owned storage, which must outlive
 * the raft_uv instance's close. */
struct repl_null_transport
{
    struct raft_uv_transport t; /* first: what raft_uv sees */
    uv_loop_t *loop;
    uv_timer_t timer; /* defers the close callback to the loop */
    raft_uv_transport_close_cb cb;
};

/* Set up n for raft_uv_init(..., &n->t) on loop (borrowed). */
void repl_null_transport_init(struct repl_null_transport *n, uv_loop_t *loop);

/* ---- test hooks ---------------------------------------------------------- */

/* Create a replica over a caller-provided inner (disk) io (repl.c). The
 * inner io must be initialised (not raft_init'ed); it is borrowed and must
 * outlive the repl. loop may be NULL. */
int repl_new_with_io(uv_loop_t *loop,
                     struct xport *x,
                     const struct repl_config *c,
                     const struct repl_fsm *fsm,
                     repl_state_cb state_cb,
                     void *state_arg,
                     struct raft_io *inner,
                     struct repl **out,
                     char *errmsg);
/* Install tern's allocator as libraft's heap, once (repl.c). */
void repl_install_heap(void);
struct raft *repl_raft(struct repl *r);
/* Figure-8 guard on/off, and its stats (guard.c). */
void repl_set_guard(struct repl *r, bool enabled);
uint64_t repl_guard_drops(const struct repl *r);
uint64_t repl_vote_rewrites(const struct repl *r);

/* io.c, "Frame checksums": whether peer id decodes XXH3 frames, what a
 * frame to it carries (REPL_FRAME_*), and learning it from a frame's flags
 * (a frame already taken from a known sender). */
#define REPL_CAPS_MAX 1024
bool repl_peer_xxh3(const struct repl *r, uint64_t id);
unsigned repl_frame_flags(const struct repl *r, uint64_t id);
void repl_peer_learn(struct repl *r, uint64_t id, unsigned frame_flags);

/* crc.c: raft_uv's batch checksum (libraft's byteCrc32) by ISA-L's
 * crc32_ieee; the link's --wrap=byteCrc32 routes raft_uv's calls to it when
 * libraft is linked statically (TERN_RAFT_FAST_CRC). buf is borrowed for
 * the call. repl__real_crc32 is libraft's own, for the equivalence test. */
#ifdef TERN_RAFT_FAST_CRC
uint32_t repl__wrap_crc32(const void *buf,
                          size_t size,
                          uint32_t init) __asm__("__wrap_byteCrc32");
uint32_t repl__real_crc32(const void *buf,
                          size_t size,
                          uint32_t init) __asm__("__real_byteCrc32");
/* prealloc.c: raft_uv's allocation of an open segment, then zeros over
 * it (--wrap=UvOsFallocate); -errno on failure. repl__real_fallocate is
 * libraft's own. */
int repl__wrap_fallocate(int fd,
                         off_t offset,
                         off_t len) __asm__("__wrap_UvOsFallocate");
int repl__real_fallocate(int fd,
                         off_t offset,
                         off_t len) __asm__("__real_UvOsFallocate");
/* aio.c: raft_uv's io_destroy of a segment's AIO context, handed to a
 * thread (--wrap=UvOsIoDestroy); 0, or what libraft's own returns when it
 * runs inline (-errno). repl__real_iodestroy is libraft's own.
 * repl__aio_drain returns once every handed context is destroyed. */
int repl__wrap_iodestroy(aio_context_t ctx) __asm__("__wrap_UvOsIoDestroy");
int repl__real_iodestroy(aio_context_t ctx) __asm__("__real_UvOsIoDestroy");
void repl__aio_drain(void);
#endif

#endif /* TERN_REPL_INT_H */
