/*
 * raft/latency.c: leader append -> commit latency samples (repl.h,
 * repl_get_latency). io.c reports every leader append (its last index and
 * the monotonic time) into a bounded ring; repl_lat_poll, called wherever
 * the core may have moved its commit index (after a delivered message, an
 * append callback, a tick), samples the ring's head while the commit index
 * covers it. Appends complete and commit in index order, so the ring is
 * sorted and each poll costs one compare when nothing committed. A full
 * ring drops the new append's sample (counted); a role or term change
 * forgets everything pending (those entries commit, if ever, under another
 * leader).
 */
#include <errno.h>
#include <string.h>

#include "repl_int.h"

static uint64_t hrtime(void)
{
    return uv_hrtime();
}

int repl_lat_init(struct repl *r)
{
    r->lat_pending = tern_calloc(REPL_LAT_PENDING, sizeof *r->lat_pending);
    if (r->lat_pending == NULL) {
        return -ENOMEM;
    }
    r->lat_now = hrtime;
    return 0;
}

void repl_lat_free(struct repl *r)
{
    tern_free(r->lat_pending);
    r->lat_pending = NULL;
}

static unsigned bucket_of(uint64_t v)
{
    unsigned p, sub;
    if (v < 4) {
        return (unsigned)v;
    }
    p = 63u - (unsigned)__builtin_clzll(v);
    sub = (unsigned)(v >> (p - 2)) & 3u;
    return 4u * (p - 1u) + sub;
}

static uint64_t bucket_upper(unsigned b)
{
    unsigned p, sub;
    if (b < 4) {
        return b;
    }
    p = b / 4 + 1;
    sub = b % 4;
    if (p >= 63 && sub == 3) {
        return UINT64_MAX;
    }
    return (((uint64_t)5 + sub) << (p - 2)) - 1;
}

static void sample(struct repl *r, uint64_t ns)
{
    struct repl_latency *l = &r->lat;
    if (l->count == 0 || ns < l->min_ns) {
        l->min_ns = ns;
    }
    if (ns > l->max_ns) {
        l->max_ns = ns;
    }
    l->count++;
    l->sum_ns += ns;
    l->buckets[bucket_of(ns)]++;
    l->recent[r->lat_recent_pos] = ns;
    r->lat_recent_pos = (r->lat_recent_pos + 1) % REPL_LATENCY_RECENT;
    if (l->n_recent < REPL_LATENCY_RECENT) {
        l->n_recent++;
    }
}

void repl_lat_append(struct repl *r, uint64_t last)
{
    struct repl_lat_pending *p;
    if (r->lat_pending == NULL) {
        return;
    }
    if (r->lat_n == REPL_LAT_PENDING) {
        r->lat.dropped++;
        return;
    }
    p = &r->lat_pending[(r->lat_head + r->lat_n) % REPL_LAT_PENDING];
    p->index = last;
    p->t0_ns = r->lat_now();
    r->lat_n++;
}

void repl_lat_poll(struct repl *r)
{
    uint64_t commit, now = 0;
    if (r->lat_n == 0) {
        return;
    }
    commit = r->raft.commit_index;
    while (r->lat_n > 0 && r->lat_pending[r->lat_head].index <= commit) {
        struct repl_lat_pending *p = &r->lat_pending[r->lat_head];
        if (now == 0) {
            now = r->lat_now();
        }
        sample(r, now >= p->t0_ns ? now - p->t0_ns : 0);
        r->lat_head = (r->lat_head + 1) % REPL_LAT_PENDING;
        r->lat_n--;
    }
}

void repl_lat_forget(struct repl *r, uint64_t index)
{
    while (r->lat_n > 0) {
        unsigned tail = (r->lat_head + r->lat_n - 1) % REPL_LAT_PENDING;
        if (r->lat_pending[tail].index < index) {
            break;
        }
        r->lat_n--;
    }
}

void repl_get_latency(struct repl *r, struct repl_latency *out, bool reset)
{
    unsigned n = r->lat.n_recent;
    *out = r->lat;
    /* recent[] oldest first. */
    for (unsigned k = 0; k < n; k++) {
        unsigned pos = (r->lat_recent_pos + REPL_LATENCY_RECENT - n + k) %
                       REPL_LATENCY_RECENT;
        out->recent[k] = r->lat.recent[pos];
    }
    if (reset) {
        memset(&r->lat, 0, sizeof r->lat);
        r->lat_recent_pos = 0;
    }
}

uint64_t repl_latency_quantile(const struct repl_latency *l, double q)
{
    uint64_t want, seen = 0;
    if (l->count == 0) {
        return 0;
    }
    if (q < 0) {
        q = 0;
    }
    if (q > 1) {
        q = 1;
    }
    want = (uint64_t)(q * (double)l->count);
    if (want == 0) {
        want = 1;
    }
    for (unsigned b = 0; b < REPL_LATENCY_BUCKETS; b++) {
        seen += l->buckets[b];
        if (seen >= want) {
            return bucket_upper(b) < l->max_ns ? bucket_upper(b) : l->max_ns;
        }
    }
    return l->max_ns;
}
