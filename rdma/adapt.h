/*
 * Private to rdma/: the adaptive poll policy (rdma/adapt.c). A pure
 * function of the times of a transport's sends and arrivals: it decides,
 * at each send, whether and when the backend should spin for what comes
 * back, from how long recent exchanges took. No clock of its own and no
 * libuv: the backends (tcp.c, shm.c) pass uv_hrtime() and run the rounds
 * it plans; the unit tests pass made-up times.
 */
#ifndef TERN_XPORT_ADAPT_H
#define TERN_XPORT_ADAPT_H

#include <stdint.h>

#define XPORT_ADAPT_GAPS    8u  /* recent gaps kept */
#define XPORT_ADAPT_NEED    4u  /* recent gaps needed, all within horizon */
#define XPORT_ADAPT_HORIZON 16u /* horizon = this many times the cap */

/* One transport's policy state; all times are nanoseconds on one
 * monotonic clock. Zeroed storage is a disabled policy. */
struct xport_adapt
{
    uint64_t cap_ns;     /* longest round; 0 = off */
    uint64_t horizon_ns; /* gaps longer than this are "idle" */
    uint64_t sent_at;    /* first send not yet followed by an arrival (0:
                          * none) */
    uint64_t gaps[XPORT_ADAPT_GAPS]; /* recent send->arrival gaps, a ring */
    unsigned n;                      /* gaps recorded, at most the size */
    unsigned next;                   /* where the next gap goes */
    uint64_t late_ns; /* how late planned wake-ups run (moving average) */
};

/* A round the backend should run: spin from start until `until` (or an
 * arrival). until == 0: no round. */
struct xport_adapt_plan
{
    uint64_t start;
    uint64_t until;
};

/* Reset to cap_us (0 = off), forgetting every gap. */
void xport_adapt_init(struct xport_adapt *a, unsigned cap_us);

/* A message was handed to the medium at now. Returns the round to run:
 * none while off, while fewer than XPORT_ADAPT_NEED gaps are known, or
 * while any of the last XPORT_ADAPT_NEED was longer than the horizon (an
 * idle or slow peer: the node sleeps). Otherwise a window of one cap
 * after the first unanswered send, centred on the earliest densest
 * cluster of recent gaps (the most gaps one cap apart); the round starts
 * at the window minus how late planned wake-ups run (at most half a cap),
 * or now if that has passed, and ends with the window. A send whose
 * earlier send is still unanswered after the horizon records that as an
 * idle gap first. */
struct xport_adapt_plan xport_adapt_sent(struct xport_adapt *a, uint64_t now);

/* A message arrived at now: the gap since the first unanswered send is
 * recorded (nothing if no send waits). */
void xport_adapt_received(struct xport_adapt *a, uint64_t now);

/* A planned round due at `due` (a plan's start later than its send) was
 * woken at now: learn how late wake-ups run. */
void xport_adapt_woke(struct xport_adapt *a, uint64_t due, uint64_t now);

#endif /* TERN_XPORT_ADAPT_H */
