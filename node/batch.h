/*
 * Write batching and the routing of apply results back to requests
 * (batch.c): struct node_batcher and the operations it needs from its
 * user (struct node_batcher_ops). No libuv, no repl: the unit tests drive
 * it with fakes. Private to node/ and its tests.
 */
#ifndef TERN_NODE_BATCH_H
#define TERN_NODE_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tern_common.h>

#include "idx.h"
#include "proto.h"

/* One write request waiting for its raft entry to be applied. Allocated
 * and freed by the batcher; owner is the requester's (the server's
 * connection, which holds a reference for each request until it is
 * answered). */
/* A FETCH/GROUP_FETCH's flags (PROTO_FETCH_*) and tag filter as the
 * request carried them: n_tags records (u8 len, tag) in raw[0..len). */
struct node_fetch_filter
{
    uint8_t flags;
    uint8_t n_tags;
    uint16_t len;
    uint8_t raw[PROTO_MAX_FILTER_TAGS * (1 + PROTO_MAX_TAG)];
};

struct node_wreq
{
    struct tern_list link;
    void *owner;
    uint64_t request_id;
    uint8_t op;
    int status;               /* final: 0 or a tern code */
    struct idx_result result; /* valid when status == 0 */
    /* GROUP_FETCH: a read that rides a READ_BARRIER command; what to serve
     * once the barrier is applied (names NUL-terminated). */
    char queue[PROTO_MAX_NAME + 1];
    char group[PROTO_MAX_NAME + 1];
    uint32_t max_msgs;
    uint32_t max_bytes;
    uint32_t wait_ms;
    struct node_fetch_filter filter; /* flags: all of the request's */
    uint64_t due_ms; /* PRODUCE_DELAYED: the absolute due time proposed */
    /* RECEIVE: the DELIVER's items (owned, freed with w); SETTLE: the
     * number of items (the answer has one done byte each). */
    struct idx_deliver_item *items;
    uint32_t n_items;
    /* PRODUCE and PRODUCE_DELAYED, for the metrics (metrics.h): when the
     * request was added (uv_hrtime) and its messages' bytes. */
    uint64_t added_ns;
    uint64_t msg_bytes;
    /* When its entry was proposed and applied on this node (uv_hrtime; 0:
     * not yet), for the stage breakdown (server.c). */
    uint64_t proposed_ns;
    uint64_t applied_ns;
};
/* w->op of the leader's own TIMER_FIRE (node_batcher_add_timer_fire): no
 * client op has this number. */
#define NODE_WREQ_TIMER_FIRE 0xfeu

/* One raft command entry in the making or in flight. */
struct node_batch
{
    struct tern_list link;
    struct tern_list wreqs;
    unsigned n_cmds;      /* commands in the entry (TERM included) */
    unsigned n_lead;      /* leading commands no request owns (TERM) */
    struct tern_wbuf w;   /* entry bytes (moved to repl on propose) */
    size_t len;           /* sealed entry length (without padding) */
    uint8_t head[24];     /* the sealed entry's header (identity) */
    uint64_t index;       /* raft index once proposed */
    uint64_t ts;          /* the entry's timestamp_ms (leader's clock) */
    uint64_t proposed_ns; /* uv_hrtime at repl_propose */
    bool applied;         /* results were routed */
    struct node_batcher *batcher;
};

struct node_batcher_ops
{
    /* Propose the sealed entry. buf is tern_malloc'd, transferred on 0.
     * OUT: *index. The completion must later reach
     * node_batcher_proposed(batch, status, index). */
    int (*propose)(void *arg,
                   struct node_batch *batch,
                   void *buf,
                   size_t len,
                   uint64_t *index);
    /* Answer w (w->status, w->result) to w->owner. w is borrowed for the
     * call and freed after it. */
    void (*respond)(struct node_wreq *w);
    /* Leader timestamp for new entries (ms since the epoch). */
    uint64_t (*timestamp_ms)(void *arg);
    /* The node's current Raft term, put first in every new entry as a
     * TERM command (message trace). NULL, or 0 returned: no TERM. */
    uint64_t (*term)(void *arg);
    /* Whether new entries carry the XXH3 flag (idx_cmd_flag_xxh3). NULL:
     * never. */
    bool (*xxh3)(void *arg);
};

struct node_batcher
{
    struct node_batcher_ops ops;
    void *arg;
    size_t max_entry_bytes;    /* seal an entry at this size */
    unsigned max_cmds;         /* and at this many commands */
    unsigned max_inflight;     /* proposals outstanding */
    size_t max_inflight_bytes; /* entry bytes outstanding (at least one) */
    unsigned max_queued;       /* sealed entries waiting: congested beyond */
    struct node_batch *open;
    struct tern_list queued;
    struct tern_list inflight;
    struct tern_list done;
    unsigned n_queued;
    unsigned n_inflight;
    unsigned n_done;
    size_t inflight_bytes;
};

#define NODE_MAX_CMDS_PER_ENTRY 4096u

void node_batcher_init(struct node_batcher *b,
                       const struct node_batcher_ops *ops,
                       void *arg);
/* The delay of a SETTLE retry (PROTO_SETTLE_RETRY) of a message after its
 * count-th delivery: RocketMQ's backoff levels 1s 5s 10s 30s 1m 2m ... 2h
 * (docs/WORKQUEUES.md); the last level for every count beyond. */
uint64_t node_retry_delay_ms(uint32_t count);

/* Add one write request (QUEUE_CREATE/DELETE, PRODUCE, PRODUCE_DELAYED
 * (its due time: r->time_ms's due time, at least the entry's timestamp,
 * or that timestamp plus its delay; set in the request's due_ms),
 * GROUP_COMMIT (as GROUP_COMMIT_AS when r->consumer_id is not 0: the
 * server sets it), SHARED_CONFIG, SETTLE, and
 * the security metadata writes USER_SET/DELETE, ACL_SET/DELETE,
 * NAMESPACE_SET/DELETE, PRODUCER_INIT) to the open entry; r borrows from the
 * frame and is copied. On error this request is not queued and not
 * answered (when the open entry's buffer could not grow, the requests it
 * held are answered with that error during the call):
 * TERN_EINVAL for an op that is not a write, a produce without messages or with
 * a producer id and seq 0; TERN_EBADNAME for an empty or long name;
 * TERN_EMALFORMED; -ENOMEM. */
int node_batcher_add(struct node_batcher *b,
                     void *owner,
                     uint64_t request_id,
                     const struct proto_request *r);
/* Add the leader's TRIM of queue (stored name, borrowed) as plan says
 * (idx_trim_plan; docs/MESSAGES.md, "Retention") to the open entry.
 * Nobody is answered (no owner). TERN_EINVAL, TERN_EBADNAME, -ENOMEM;
 * nothing is queued on error. */
int node_batcher_add_trim(struct node_batcher *b,
                          const char *queue,
                          const struct idx_trim_plan *plan);
/* Plan callback of node_batcher_add_timer_fire: append the TIMER_FIRE of
 * the timers due by t to w (the open entry, stamped t; borrowed for the
 * call). OUT: *keys, the keys appended (0: nothing due). 0 or a code. */
typedef int (*node_timer_plan_cb)(void *arg,
                                  struct tern_wbuf *w,
                                  uint64_t t,
                                  uint32_t *keys);
/* The leader's TIMER_FIRE (docs/WORKQUEUES.md): seals the open entry if it
 * holds requests, starts a new one and lets plan fill it with the timers
 * due by that entry's timestamp. When plan appends keys, a request with op
 * NODE_WREQ_TIMER_FIRE and owner (borrowed) is queued with it and answered
 * through the respond op like any other (result: count appended,
 * base_offset dropped); OUT: *keys. Nothing due: the new entry is dropped,
 * 0 with *keys 0. On error (plan's code, -ENOMEM) nothing is queued. */
int node_batcher_add_timer_fire(struct node_batcher *b,
                                node_timer_plan_cb plan,
                                void *arg,
                                void *owner,
                                uint32_t *keys);
/* Shared groups (docs/WORKQUEUES.md). A RECEIVE planned by the leader
 * (idx_deliver_plan): a DELIVER of items[0..n) (1..IDX_SHARED_LIST_MAX,
 * copied) of (queue, group) (stored names, borrowed) to consumer_id,
 * answered like a write with the items kept in the wreq (the server reads
 * the delivered messages once it is applied). TERN_EINVAL, TERN_EBADNAME,
 * -ENOMEM; nothing is queued on error. */
int node_batcher_add_deliver(struct node_batcher *b,
                             void *owner,
                             uint64_t request_id,
                             const char *queue,
                             const char *group,
                             uint64_t consumer_id,
                             const struct idx_deliver_item *items,
                             uint32_t n);
/* The DEAD_LETTER of candidate d (borrowed) of (queue, group), its
 * message read from e by idx_dead_letter_plan; nobody is answered. The
 * codes of idx_dead_letter_plan, TERN_EBADNAME, -ENOMEM. */
int node_batcher_add_dead_letter(struct node_batcher *b,
                                 struct idx_env *e,
                                 const char *queue,
                                 const char *group,
                                 const struct idx_deliver_item *d,
                                 const char *reason);
/* A SETTLE of items[0..n) (1..IDX_SHARED_LIST_MAX, increasing offsets,
 * borrowed) nobody waits for: the release of a gone consumer's leases. */
int node_batcher_add_settle(struct node_batcher *b,
                            const char *queue,
                            const char *group,
                            const struct idx_settle_item *items,
                            uint32_t n);
/* Single active consumer (docs/WORKQUEUES.md): a CLAIM of (queue, group)
 * (stored names, borrowed, kept in the wreq) by consumer_id, action
 * IDX_CLAIM_* with lease_ms (0 for a release); owner NULL: nobody is
 * answered (the release of a closed connection's claim). The wreq's
 * result holds the claim row, also when its status is TERN_ECLAIMED.
 * TERN_EINVAL, TERN_EBADNAME, -ENOMEM; nothing is queued on error. */
int node_batcher_add_claim(struct node_batcher *b,
                           void *owner,
                           uint64_t request_id,
                           const char *queue,
                           const char *group,
                           uint64_t consumer_id,
                           uint32_t action,
                           uint32_t lease_ms);
/* Too much is waiting: stop reading client connections. */
bool node_batcher_congested(const struct node_batcher *b);
/* Seal the open entry and propose queued entries up to max_inflight. */
void node_batcher_propose(struct node_batcher *b);
/* FSM apply hook: route results if index is one of our proposals and the
 * bytes are the ones we proposed. */
void node_batcher_on_apply(struct node_batcher *b,
                           uint64_t index,
                           const void *entry,
                           size_t len,
                           const struct idx_result *results,
                           unsigned n);
/* Propose completion (repl_propose_cb). status 0: wait for the next flush;
 * otherwise answer every request of the batch with status now. */
void node_batcher_proposed(struct node_batch *batch,
                           int status,
                           uint64_t index);
/* Answer the done batches' produces (PRODUCE, PRODUCE_DELAYED: their
 * answer is their result alone) before the index flush that covers
 * them; the caller flushes before it reads any further request (node.c's
 * on_check), so nothing can ask for the message before it is visible. */
void node_batcher_answer_produces(struct node_batcher *b);
/* idx_flush covered everything applied so far: answer the done batches. */
void node_batcher_flushed(struct node_batcher *b);
/* Answer every request not yet proposed with status (shutdown). */
void node_batcher_fail_pending(struct node_batcher *b, int status);
bool node_batcher_idle(const struct node_batcher *b);

#endif /* TERN_NODE_BATCH_H */
