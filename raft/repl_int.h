/*
 * Private to raft/ (and its tests): the layout of struct repl and the
 * internal entry points shared by io.c (our struct raft_io wrapper), codec.c
 * (wire frames), guard.c (Figure-8 guard and the other 0.15 mitigations),
 * fsm.c (raft_fsm glue), bulk.c (bulk catch-up) and repl.c (public API).
 * Only raft/ and tests/unit/raft, tests/fuzz include this file.
 */
#ifndef TERN_REPL_INT_H
#define TERN_REPL_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <raft.h>

#include <tern_common.h>

#include "repl.h"
#include "xport.h"

/* ------------------------------------------------------------------------
 * Codec (codec.c). Frame layout documented at the top of codec.c.
 */
enum {
    REPL_WIRE_BULK_REQ = 16,
    REPL_WIRE_BULK_DATA = 17,
};
#define REPL_WIRE_ADDR_MAX 255
#define REPL_BULK_STATUS_OK 0
#define REPL_BULK_STATUS_ERROR 1

struct repl_bulk_msg {
    uint64_t snap_index; /* InstallSnapshot last_index the fetch belongs to */
    uint64_t pos;
    uint64_t len;       /* BULK_REQ: bytes wanted; BULK_DATA: data bytes */
    uint8_t status;     /* BULK_DATA only */
    const uint8_t *data; /* BULK_DATA: borrowed from the frame */
};

/* A decoded frame. For Raft types, msg's dynamic members (AppendEntries
 * entries array + one batch, InstallSnapshot conf + data.base) are
 * raft_malloc'd and owned by whoever holds the struct until handed to raft
 * (or released with repl_wire_release). */
struct repl_wire {
    unsigned type;              /* RAFT_IO_* or REPL_WIRE_BULK_* */
    uint64_t sender_id;
    char sender_addr[REPL_WIRE_ADDR_MAX + 1];
    struct raft_message msg;    /* Raft types; server_address -> sender_addr */
    struct repl_bulk_msg bulk;  /* bulk types */
};

/* Encoded frame: a header buffer plus borrowed payload iovecs (entry
 * payloads, snapshot data). iov[0] is the header. Valid while the source
 * message is. Release with repl_frame_release. */
struct repl_frame {
    struct tern_wbuf head;
    struct xport_iov *iov;
    unsigned n_iov;
    size_t len; /* total frame length */
};

/* Encode a Raft message. max_len: if an AppendEntries would exceed it, only
 * a prefix of the entries is encoded (*n_sent tells how many; a prefix of an
 * AppendEntries is itself a valid AppendEntries). Returns 0, TERN_ETOOBIG
 * (not even one entry / the message fits), -ENOMEM or TERN_EINVAL. */
int repl_codec_encode(uint64_t sender_id, const char *sender_addr,
                      const struct raft_message *m, size_t max_len,
                      struct repl_frame *f, unsigned *n_sent);
/* Encode a bulk message (type REPL_WIRE_BULK_*). data may be NULL if
 * bulk->len == 0 or type is BULK_REQ. */
int repl_codec_encode_bulk(uint64_t sender_id, const char *sender_addr,
                           unsigned type, const struct repl_bulk_msg *bulk,
                           struct repl_frame *f);
void repl_frame_release(struct repl_frame *f);
/* Decode untrusted bytes. On 0, *w owns raft_malloc'd memory (see above);
 * on error nothing is allocated. Errors: TERN_EMALFORMED, TERN_ECORRUPT,
 * TERN_EVERSION, -ENOMEM. */
int repl_codec_decode(const void *buf, size_t len, struct repl_wire *w);
/* Free what a decoded (undelivered) Raft message owns. */
void repl_wire_release(struct repl_wire *w);
/* Configuration codec (configurationDecode is not exported by 0.15). */
int repl_conf_encode(const struct raft_configuration *c, struct tern_wbuf *w);
int repl_conf_decode(struct tern_cursor *cur, struct raft_configuration *c);

/* ------------------------------------------------------------------------
 * Status translation (repl.c).
 */
int repl_err_from_raft(int rv);

/* ------------------------------------------------------------------------
 * The replica.
 */
#define REPL_LAT_PENDING 1024
struct repl_lat_pending {
    uint64_t index; /* last index of a leader append */
    uint64_t t0_ns;
    uint64_t post_ns; /* first AppendEntries covering index posted */
    uint64_t res_ns;  /* first successful result covering index received */
};
/* Follower side of the stage breakdown (latency.c): the newest
 * AppendEntries with entries, from its arrival to its result. */
struct repl_lat_follower {
    uint64_t index;     /* its last index; 0: none being timed */
    uint64_t recv_ns;   /* the xport delivered the frame */
    uint64_t core_ns;   /* decoded, handed to the core */
    uint64_t append_ns; /* the core appended its entries */
    uint64_t ack_ns;    /* raft's append callback fired */
};
struct repl_term_run {
    uint64_t index; /* first index of a run of entries with this term */
    uint64_t term;
};

struct repl_bulk_fetch {
    bool active;
    bool started;             /* range taken, requests sent (a fetch waits
                                 for in-flight appends first, bulk.c) */
    bool fetched;             /* bytes were written (stats) */
    struct repl_wire held;    /* the InstallSnapshot waiting for its data */
    uint64_t peer_id;
    char peer_addr[REPL_WIRE_ADDR_MAX + 1];
    uint64_t next_pos;        /* next byte to write */
    uint64_t next_req;        /* next byte to request */
    uint64_t to;
    unsigned in_flight;       /* requests outstanding */
    unsigned retries;         /* stall re-requests since last progress */
    uint64_t last_progress_ms;
};

struct repl {
    /* Raft core and our io wrapper. */
    struct raft raft;
    struct raft *core;          /* &raft (fsm.c; tests may point it at a
                                   raft_fixture server) */
    struct raft_io outer;       /* what raft sees */
    struct raft_io *inner;      /* disk: raft_uv or a test fake */
    bool own_inner;             /* inner is our raft_uv (free at close) */
    struct raft_uv_transport *dummy_transport;
    struct raft_fsm raft_fsm;
    uv_loop_t *loop;
    struct xport *xport;

    /* Config (strings copied). */
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

    struct repl_fsm fsm;
    repl_state_cb state_cb;
    void *state_arg;

    /* raft_io callbacks given to outer.start. */
    raft_io_tick_cb tick_cb;
    raft_io_recv_cb recv_cb;
    raft_io_close_cb io_close_cb;
    bool started;
    bool closing;
    int failed;               /* sticky fail-stop code (0 = healthy) */

    /* Durable-log tracking (io.c). */
    uint64_t next_index;      /* index the next io->append starts at */
    uint64_t durable_index;   /* last index durably stored */
    uint64_t term;            /* durable current term (load/set_term) */
    struct repl_term_run *runs;
    size_t n_runs, cap_runs;
    struct tern_list appends;   /* in-flight appends, submission order */
    struct tern_list sends;     /* in-flight xport sends */
    uint64_t snap_index;        /* latest durable snapshot (load/put) */
    uint64_t snap_term;
    uint64_t ae_rebased;        /* stats: AppendEntries rebased (guard 6) */
    uint64_t install_index;     /* snapshot_put(trailing=0) in flight */
    uint64_t install_term;

    /* Fencing (io.c): the term the xport's epoch and fence were last set
     * to (0: not set yet, or the last attempt failed: retried on ticks). */
    uint64_t fenced_term;
    uint64_t fence_errors;      /* stats: failed xport_set_epoch/fence */

    /* Oversized AppendEntries split into parts (io.c). */
    uint64_t ae_split;          /* stats: AppendEntries sent as >1 part */
    uint64_t ae_parts;          /* stats: parts sent for those */

    /* Durability mode (io.c). acked_index: the last index whose append
     * callback raft got (what the core counts as stored, its last_stored):
     * equal to durable_index in disk mode, possibly ahead of it in memory
     * mode. The guards (guard.c) use acked_index; status.last_stored
     * reports durable_index. */
    enum repl_durability durability;
    uint64_t acked_index;
    unsigned n_unacked;         /* appends whose raft cb has not fired */
    struct tern_list unacked;   /* memory mode: those, submission order */
    uv_idle_t idle;             /* memory mode: fires deferred acks */
    /* Memory mode, follower (io.c "Follower apply off the answer path"):
     * the commit index of the newest accepted AppendEntries, held back
     * from the core until its entries are acked and answered. index 0:
     * nothing held. */
    struct {
        uint64_t index;         /* the AppendEntries' last entry */
        uint64_t term;          /* its term */
        uint64_t commit;        /* its leader_commit (<= index) */
        uint64_t gen;           /* r->truncate_gen after the append */
        uint64_t leader_id;
        char leader_addr[REPL_WIRE_ADDR_MAX + 1];
    } hold;
    /* Memory mode: appends acked but not yet handed to the inner io
     * (io.c "Coalesced inner writes"), submission order, their bytes, and
     * the timer that hands them over. */
    struct tern_list inner_pending;
    size_t inner_pending_bytes;
    uv_timer_t flush_timer;
    bool flush_timer_closed;
    uint64_t inner_flushes;     /* stats: hand-overs of pending appends */
    bool quiet_results;         /* answers to our own heartbeat: not sent */
    struct tern_list null_sends; /* those, completed by run_deferred */
    uint64_t holds_delivered;   /* stats */
    /* Leader, per peer (same order as peers): the highest index that peer
     * acknowledged in ack_term, and whether its next AppendEntries must
     * report a failed send (guard.c item 10). */
    struct repl_peer_ack {
        uint64_t term;
        uint64_t acked;
        bool probe;
    } *peer_acks;
    uint64_t forced_probes;     /* stats: guard.c item 10 */

    /* Replication latency (latency.c). */
    struct repl_latency lat;
    unsigned lat_recent_pos;    /* next slot of lat.recent */
    struct repl_lat_pending *lat_pending; /* ring, REPL_LAT_PENDING */
    unsigned lat_head, lat_n;
    uint64_t (*lat_now)(void);  /* monotonic ns; tests may replace it */
    unsigned lat_posted;        /* pending[head..+lat_posted) have post_ns */
    unsigned lat_resulted;      /* pending[head..+lat_resulted) have res_ns */
    uint64_t lat_recv_ns;       /* arrival time of the frame being decoded */
    struct repl_lat_follower lat_f;
    struct repl_latency stages[REPL_STAGE__COUNT];
    int (*fsm_apply)(struct raft_fsm *f, const struct raft_buffer *buf,
                     void **result); /* fsm.c's, wrapped by repl.c */
    bool idle_init;
    bool idle_closed;
    bool inner_closed;

    /* libraft 0.15 truncate/close race (io.c, "Close and truncate"):
     * truncates handed to the inner io, the newest of them known finished
     * (an append submitted after it completed), and whether io_close is
     * holding the inner close back until that catches up. */
    uint64_t truncate_gen;
    uint64_t truncate_settled;
    bool wait_truncate;          /* inner truncates may be in flight */
    bool inner_close_deferred;

    /* Role tracking, barrier, guard (guard.c). */
    int role;
    uint64_t leader_id;
    uint64_t role_term;
    bool writable;              /* barrier_applied && !transferring */
    bool barrier_applied;       /* this term's barrier applied */
    bool transferring;          /* repl_transfer in progress */
    struct repl_barrier_req *barrier; /* current term's barrier, if any */
    uint64_t barrier_index;     /* b: first entry of the current term */
    bool guard_enabled;
    bool hold_ticks;            /* #467 mitigation on (tests may disable) */
    uint64_t guard_dropped;     /* stats: results dropped by the guard */
    uint64_t vote_rewrites;     /* stats: RequestVote rewrites (#429) */
    uint64_t timeout_now_dropped;
    uint64_t ticks_withheld;

    /* FSM glue (fsm.c). */
    uint64_t applied_bytes;     /* since the last snapshot */
    int fsm_error;              /* last FSM apply error (0 = none) */

    /* Proposals (repl.c). */
    struct tern_list proposals;

    /* Bulk catch-up (bulk.c). */
    struct repl_bulk_fetch fetch;
    uint64_t bulk_chunk;        /* bytes per BULK_DATA */
    unsigned bulk_window;       /* BULK_REQs in flight */
    uint64_t bulk_stall_ms;
    uint64_t bad_frames;        /* stats */
    uint64_t bulk_rerequests;   /* stats: stall re-requests */
    uint64_t bulk_completed;    /* stats: fetches delivered to raft */
    uint64_t bulk_noop;         /* stats: installs delivered unfetched
                                   (0.15 treats them as no-ops) */
    uint64_t ae_held_off;       /* stats: AppendEntries dropped during a
                                   fetch or install (guard.c item 9) */
    bool disk_full;             /* repl_set_disk_full (guard.c item 11) */
    uint64_t ae_disk_full_dropped; /* stats: AppendEntries dropped for it */

    void (*close_cb)(void *arg);
    void *close_arg;
};

/* io.c */
void repl_io_setup(struct repl *r);
void repl_io_close_sends(struct repl *r);
/* Term of the entry at index in the submitted log, 0 if unknown. */
uint64_t repl_io_term_of(const struct repl *r, uint64_t index);
void repl_xport_recv(void *arg, uint64_t from, const void *buf, size_t len);
/* Send an encoded frame (bulk side channel); cb-less. */
int repl_io_send_frame(struct repl *r, uint64_t peer_id, const char *addr,
                       struct repl_frame *f);
/* Deliver a decoded Raft message to the core and poll state afterwards. */
void repl_io_deliver(struct repl *r, struct repl_wire *w);
/* Mark the replica failed (fail-stop). */
void repl_fail(struct repl *r, int code);
/* Memory durability: fire the deferred append callbacks (in submission
 * order). Runs from the loop's idle handle; tests without a loop call it
 * directly. Returns how many fired. */
size_t repl_io_run_deferred(struct repl *r);

/* latency.c */
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
 * handed to the xport. Each costs a clock read at most. */
void repl_lat_posted(struct repl *r, uint64_t last);
void repl_lat_resulted(struct repl *r, uint64_t last);
void repl_lat_f_recv(struct repl *r);
void repl_lat_f_core(struct repl *r, uint64_t last);
void repl_lat_f_append(struct repl *r);
void repl_lat_f_ack(struct repl *r, uint64_t last);
void repl_lat_f_post(struct repl *r, uint64_t last);
/* Add to->from (monotonic ns; skipped if from is 0) to a stage. */
void repl_lat_stage(struct repl *r, unsigned stage, uint64_t from,
                    uint64_t to);

/* guard.c */
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
/* Recompute writable from barrier/transfer/failure state; emit on change. */
void repl_update_writable(struct repl *r);

/* fsm.c */
void repl_fsm_setup(struct repl *r);

/* bulk.c */
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

/* Test hooks (repl.c). */
/* Create a replica over a caller-provided inner (disk) io. The inner io
 * must be initialised (not raft_init'ed); it is borrowed and must outlive
 * the repl. loop may be NULL. */
int repl_new_with_io(uv_loop_t *loop, struct xport *x,
                     const struct repl_config *c, const struct repl_fsm *fsm,
                     repl_state_cb state_cb, void *state_arg,
                     struct raft_io *inner, struct repl **out, char *errmsg);
void repl_set_guard(struct repl *r, bool enabled);
void repl_install_heap(void);
struct raft *repl_raft(struct repl *r);
/* Stats for tests: guard drops, vote rewrites, dropped TimeoutNow. */
uint64_t repl_guard_drops(const struct repl *r);
uint64_t repl_vote_rewrites(const struct repl *r);

#endif /* TERN_REPL_INT_H */
