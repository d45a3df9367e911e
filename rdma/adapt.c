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
 * with the answer, one round trip per heartbeat). Otherwise a window of
 * one cap placed where the answer is expected: over the earliest densest
 * cluster of kept gaps (the one cap wide stretch holding the most of
 * them, centred on them), never before the send (a leader's round trip is
 * shorter than the cap, so it spins from its send). The backend ends a
 * round at the first arrival and runs a round that starts later from a
 * timer, so the wake-up is paid before the message comes, off the round
 * trip; since that wake-up itself takes time (on a VM, an idle vCPU's:
 * tens of microseconds), the timer is set earlier by how late the recent
 * ones ran (a moving average, at most half a cap), so a round spins at
 * most one and a half caps.
 *
 * Cost bound: at most one round of at most 1.5 caps per send, and none
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

/* Where the window opens, after the send: over the earliest stretch of
 * one cap that holds the most kept gaps, centred on the gaps in it, not
 * before 0 (insertion sort of a copy: at most XPORT_ADAPT_GAPS values). */
static uint64_t window_offset(const struct xport_adapt *a)
{
    uint64_t s[XPORT_ADAPT_GAPS], spread, slack;
    unsigned n = a->n, best = 0, best_count = 0;

    for (unsigned i = 0; i < n; i++) {
        uint64_t v = a->gaps[i];
        unsigned j = i;
        for (; j > 0 && s[j - 1] > v; j--) {
            s[j] = s[j - 1];
        }
        s[j] = v;
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned count = 0;
        while (i + count < n && s[i + count] - s[i] <= a->cap_ns) {
            count++;
        }
        if (count > best_count) {
            best = i;
            best_count = count;
        }
    }
    spread = s[best + best_count - 1] - s[best];
    slack = (a->cap_ns - spread) / 2;
    return s[best] > slack ? s[best] - slack : 0;
}

struct xport_adapt_plan xport_adapt_sent(struct xport_adapt *a, uint64_t now)
{
    struct xport_adapt_plan p = {0, 0};
    uint64_t open, start;

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
    open = a->sent_at + window_offset(a);
    if (open + a->cap_ns <= now) {
        return p; /* the window has passed (a later send) */
    }
    start = open > a->sent_at + a->late_ns ? open - a->late_ns : a->sent_at;
    p.start = start > now ? start : now;
    p.until = open + a->cap_ns;
    return p;
}

void xport_adapt_woke(struct xport_adapt *a, uint64_t due, uint64_t now)
{
    uint64_t late = now > due ? now - due : 0;

    a->late_ns = a->late_ns - a->late_ns / 4 + late / 4;
    if (a->late_ns > a->cap_ns / 2) {
        a->late_ns = a->cap_ns / 2;
    }
}

void xport_adapt_received(struct xport_adapt *a, uint64_t now)
{
    if (a->cap_ns == 0 || a->sent_at == 0) {
        return;
    }
    record(a, now >= a->sent_at ? now - a->sent_at : 0);
    a->sent_at = 0;
}
