/*
 * tests/unit/raft: a test-only xport backend ("txport") wrapped around
 * another xport (the mem backend), implementing the private vtable of
 * rdma/xport_int.h. It adds what the mem backend lacks, so raft/'s use of
 * the transport interface can be checked deterministically:
 *   - epochs and fences with the semantics of xport.h: every message is
 *     sent as [u64 LE epoch | message] over the inner xport; a receiver
 *     drops messages stamped below its fence (counted in fenced);
 *   - a log of set_epoch/set_fence calls, and a check at every send of a
 *     Raft frame that the epoch and the fence already equal the term the
 *     frame carries (a pre-vote RequestVote carries term + 1, a pre-vote
 *     result the term asked for);
 *   - a small max_message (to exercise AppendEntries splitting), and a log
 *     of the AppendEntries frames received (decoded with raft/'s codec);
 *   - hold: sends are kept (their completion too) until txport_release,
 *     to play a deposed leader's late writes;
 *   - fail_sets: the next n set_epoch/set_fence calls fail.
 * Single-threaded, no loop: completions come from the inner xport.
 */
#ifndef TERN_TEST_TXPORT_H
#define TERN_TEST_TXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xport_int.h"

#define TXPORT_MAX_EVENTS 512
#define TXPORT_MAX_AE     8192

enum { TXPORT_EPOCH = 1, TXPORT_FENCE = 2 };

struct txport_event
{
    int kind;
    uint64_t value;
};

/* One AppendEntries frame received (before the fence check). */
struct txport_ae
{
    uint64_t from;
    uint64_t term;
    uint64_t epoch;
    uint64_t prev_index;
    uint64_t prev_term;
    uint64_t commit;
    unsigned n;
    size_t len; /* frame bytes, stamp excluded */
};

struct txport_held;

struct txport
{
    struct xport base; /* must be first */
    struct xport *inner;
    size_t max_message;
    bool fencing;
    uint64_t epoch;
    uint64_t fence;
    int fail_sets;
    bool hold;
    struct txport_held *held_head, *held_tail;
    struct txport_event events[TXPORT_MAX_EVENTS];
    unsigned n_events;
    uint64_t fenced;       /* inbound messages dropped by the fence */
    uint64_t delivered;    /* inbound messages delivered */
    uint64_t raft_sent;    /* Raft frames sent */
    uint64_t stamp_errors; /* Raft frames sent with epoch/fence != term */
    struct txport_ae *ae;  /* TXPORT_MAX_AE entries */
    unsigned n_ae;
};

/* Wrap inner (ownership passes to the txport: closed with it).
 * max_message 0: inner's. *out is released by xport_close(&t->base). */
int txport_new(struct xport *inner,
               size_t max_message,
               bool fencing,
               struct txport **out);
/* Submit the held sends (in order) to the inner xport. */
void txport_release(struct txport *t);

#endif /* TERN_TEST_TXPORT_H */
