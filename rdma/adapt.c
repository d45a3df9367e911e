/*
 * Adaptive poll policy (adapt.h): when a node in a request/response
 * exchange should spin instead of sleeping, so that it does not pay the
 * wake-up of a sleeping thread (on a VM, of an idle vCPU: tens of
 * microseconds) on every round trip, while an idle node sleeps.
 *
 * What it learns. A gap is the time from the first send with no arrival
 * since to the next arrival. A leader's gap is its round trip to the
 * fastest follower; a follower's gap (it only answers) is the time from
 * its answer to the next AppendEntries, i.e. the leader's whole cycle
 * (client round trip included) under steady load, and a heartbeat
 * interval when idle. The last XPORT_ADAPT_GAPS gaps are kept.
 *
 * What it decides, at each send. Nothing (sleep, as without polling)
 * unless the last XPORT_ADAPT_NEED gaps were all within the horizon
 * (XPORT_ADAPT_HORIZON times the cap): heartbeats, an idle cluster and a
 * peer that stopped answering all fall outside it, so an idle node never
 * spins (a leader's heartbeat answers are within it, but those rounds end
 * with the answer, one round trip per heartbeat). Otherwise one round of
 * at most the cap, centred on the expected arrival: it starts half a cap
 * before the first unanswered send plus the lower quartile of the kept
 * gaps (or at once, if that has passed: a leader's round trip is shorter
 * than the cap, so it spins from its send), and lasts the cap. The
 * backend ends a round at the first arrival and runs a round that starts
 * later from a timer, so the wake-up is paid before the message comes,
 * off the round trip.
 *
 * Cost bound: at most one round of at most the cap per send, and none
 * while idle; a round's arrival (or the end of the round) re-plans. A
 * prediction that keeps missing costs the cap per exchange and still
 * saves nothing; it is the horizon that bounds how long the node keeps
 * trying (a gap of more than the horizon stops the rounds until
 * XPORT_ADAPT_NEED short gaps in a row come back).
 */
#include "adapt.h"

#include <string.h>

void xport_adapt_init(struct xport_adapt *a, unsigned cap_us)
{
    memset(a, 0, sizeof *a);
    a->cap_ns = (uint64_t)cap_us * 1000u;
    a->horizon_ns = a->cap_ns * XPORT_ADAPT_HORIZON;
}

static void record(struct xport_adapt *a, uint64_t gap)
{
    a->gaps[a->next] = gap;
    a->next = (a->next + 1) % XPORT_ADAPT_GAPS;
    if (a->n < XPORT_ADAPT_GAPS) {
        a->n++;
    }
}

/* The last XPORT_ADAPT_NEED gaps are known and all within the horizon. */
static int predictable(const struct xport_adapt *a)
{
    if (a->n < XPORT_ADAPT_NEED) {
        return 0;
    }
    for (unsigned i = 1; i <= XPORT_ADAPT_NEED; i++) {
        unsigned k = (a->next + XPORT_ADAPT_GAPS - i) % XPORT_ADAPT_GAPS;
        if (a->gaps[k] > a->horizon_ns) {
            return 0;
        }
    }
    return 1;
}

/* The lower quartile of the kept gaps (insertion sort of a copy: at most
 * XPORT_ADAPT_GAPS values). */
static uint64_t low_gap(const struct xport_adapt *a)
{
    uint64_t s[XPORT_ADAPT_GAPS];
    unsigned n = a->n;

    for (unsigned i = 0; i < n; i++) {
        uint64_t v = a->gaps[i];
        unsigned j = i;
        for (; j > 0 && s[j - 1] > v; j--) {
            s[j] = s[j - 1];
        }
        s[j] = v;
    }
    return s[n / 4];
}

struct xport_adapt_plan xport_adapt_sent(struct xport_adapt *a, uint64_t now)
{
    struct xport_adapt_plan p = {0, 0};
    uint64_t expect, start;

    if (a->cap_ns == 0) {
        return p;
    }
    if (a->sent_at != 0 && now - a->sent_at > a->horizon_ns) {
        /* Unanswered for longer than the horizon: an idle gap. */
        record(a, now - a->sent_at);
        a->sent_at = 0;
    }
    if (a->sent_at == 0) {
        a->sent_at = now;
    }
    if (!predictable(a)) {
        return p;
    }
    expect = a->sent_at + low_gap(a);
    start = expect > a->sent_at + a->cap_ns / 2 ? expect - a->cap_ns / 2
                                                : a->sent_at;
    if (start < now) {
        start = now;
    }
    p.start = start;
    p.until = start + a->cap_ns;
    return p;
}

void xport_adapt_received(struct xport_adapt *a, uint64_t now)
{
    if (a->cap_ns == 0 || a->sent_at == 0) {
        return;
    }
    record(a, now >= a->sent_at ? now - a->sent_at : 0);
    a->sent_at = 0;
}
