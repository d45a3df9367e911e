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
 *
 * Stage breakdown (repl.h, enum repl_stage), for profiling the commit
 * path: a pending leader append also records when the first AppendEntries
 * carrying it was posted and when the first successful result covering
 * it arrived, and when the leader's own append covering it became
 * durable (three cursors into the ring: posts, results and local appends
 * cover prefixes, so marking is amortised O(1)); a follower times the newest
 * AppendEntries with entries from its arrival to its result. Stages use
 * the same histogram as the total.
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
    r->lat.pending = tern_calloc(REPL_LAT_PENDING, sizeof *r->lat.pending);
    if (r->lat.pending == NULL) {
        return -ENOMEM;
    }
    r->lat.now = hrtime;
    return 0;
}

uint64_t repl_lat_now(struct repl *r)
{
    return r->lat.now != NULL ? r->lat.now() : 0;
}

void repl_lat_free(struct repl *r)
{
    tern_free(r->lat.pending);
    r->lat.pending = NULL;
}

/* Bucket layout: repl.h, REPL_LATENCY_SUB_BITS. */
#define SUB_BITS REPL_LATENCY_SUB_BITS
#define SUBS     (1u << SUB_BITS)

static unsigned bucket_of(uint64_t v)
{
    unsigned p, sub;
    if (v < SUBS) {
        return (unsigned)v;
    }
    p = 63u - (unsigned)__builtin_clzll(v);
    sub = (unsigned)(v >> (p - SUB_BITS)) & (SUBS - 1u);
    return SUBS * (p - SUB_BITS + 1u) + sub;
}

static uint64_t bucket_upper(unsigned b)
{
    unsigned p, sub;
    if (b < SUBS) {
        return b;
    }
    p = b / SUBS + SUB_BITS - 1u;
    sub = b % SUBS;
    if (p >= 63 && sub == SUBS - 1u) {
        return UINT64_MAX;
    }
    return (((uint64_t)SUBS + sub + 1u) << (p - SUB_BITS)) - 1u;
}

void repl_latency_record(struct repl_latency *l, uint64_t ns)
{
    if (l->count == 0 || ns < l->min_ns) {
        l->min_ns = ns;
    }
    if (ns > l->max_ns) {
        l->max_ns = ns;
    }
    l->count++;
    l->sum_ns += ns;
    l->buckets[bucket_of(ns)]++;
}

void repl_lat_stage(struct repl *r, unsigned stage, uint64_t from, uint64_t to)
{
    if (from != 0 && to >= from) {
        repl_latency_record(&r->lat.stages[stage], to - from);
    }
}

static void sample(struct repl *r, uint64_t ns)
{
    struct repl_latency *l = &r->lat.total;
    repl_latency_record(l, ns);
    l->recent[r->lat.recent_pos] = ns;
    r->lat.recent_pos = (r->lat.recent_pos + 1) % REPL_LATENCY_RECENT;
    if (l->n_recent < REPL_LATENCY_RECENT) {
        l->n_recent++;
    }
}

void repl_lat_append(struct repl *r, uint64_t last)
{
    struct repl_lat_pending *p;
    if (r->lat.pending == NULL) {
        return;
    }
    if (r->lat.n == REPL_LAT_PENDING) {
        r->lat.total.dropped++;
        return;
    }
    p = &r->lat.pending[(r->lat.head + r->lat.n) % REPL_LAT_PENDING];
    p->index = last;
    p->t0_ns = r->lat.now();
    p->post_ns = 0;
    p->res_ns = 0;
    p->disk_ns = 0;
    r->lat.n++;
}

enum mark_what { MARK_POST, MARK_RESULT, MARK_DISK };

/* Stamp now into the pending appends from *cursor on whose index is <=
 * last: their post_ns, res_ns or disk_ns (what). */
static void mark(struct repl *r,
                 unsigned *cursor,
                 uint64_t last,
                 enum mark_what what)
{
    uint64_t now = 0;
    while (*cursor < r->lat.n) {
        struct repl_lat_pending *p =
            &r->lat.pending[(r->lat.head + *cursor) % REPL_LAT_PENDING];
        if (p->index > last) {
            break;
        }
        if (now == 0) {
            now = r->lat.now();
        }
        if (what == MARK_POST) {
            p->post_ns = now;
        } else if (what == MARK_RESULT) {
            p->res_ns = now;
        } else {
            p->disk_ns = now;
        }
        (*cursor)++;
    }
}

void repl_lat_posted(struct repl *r, uint64_t last)
{
    mark(r, &r->lat.posted, last, MARK_POST);
}

void repl_lat_resulted(struct repl *r, uint64_t last)
{
    mark(r, &r->lat.resulted, last, MARK_RESULT);
}

void repl_lat_synced(struct repl *r, uint64_t last)
{
    mark(r, &r->lat.synced, last, MARK_DISK);
}

void repl_lat_f_recv(struct repl *r)
{
    r->lat.recv_ns = r->lat.now();
}

void repl_lat_f_core(struct repl *r, uint64_t last)
{
    struct repl_lat_follower *f = &r->lat.f;
    if (r->lat.recv_ns == 0) {
        return;
    }
    memset(f, 0, sizeof *f);
    f->index = last;
    f->recv_ns = r->lat.recv_ns;
    f->core_ns = r->lat.now();
    r->lat.recv_ns = 0;
}

void repl_lat_f_append(struct repl *r)
{
    if (r->lat.f.index != 0 && r->lat.f.append_ns == 0) {
        r->lat.f.append_ns = r->lat.now();
    }
}

void repl_lat_f_ack(struct repl *r, uint64_t last)
{
    struct repl_lat_follower *f = &r->lat.f;
    if (f->index != 0 && f->ack_ns == 0 && last >= f->index) {
        f->ack_ns = r->lat.now();
    }
}

void repl_lat_f_post(struct repl *r, uint64_t last)
{
    struct repl_lat_follower *f = &r->lat.f;
    uint64_t now;
    if (f->index == 0 || last < f->index || f->ack_ns == 0) {
        return;
    }
    now = r->lat.now();
    repl_lat_stage(r, REPL_STAGE_F_DECODE, f->recv_ns, f->core_ns);
    repl_lat_stage(r, REPL_STAGE_F_CORE, f->core_ns, f->append_ns);
    repl_lat_stage(r, REPL_STAGE_F_ACK, f->append_ns, f->ack_ns);
    repl_lat_stage(r, REPL_STAGE_F_POST, f->ack_ns, now);
    repl_lat_stage(r, REPL_STAGE_F_TOTAL, f->recv_ns, now);
    f->index = 0;
}

void repl_lat_poll(struct repl *r)
{
    uint64_t commit, now = 0;
    if (r->lat.n == 0) {
        return;
    }
    commit = r->raft.commit_index;
    while (r->lat.n > 0 && r->lat.pending[r->lat.head].index <= commit) {
        struct repl_lat_pending *p = &r->lat.pending[r->lat.head];
        if (now == 0) {
            now = r->lat.now();
        }
        sample(r, now >= p->t0_ns ? now - p->t0_ns : 0);
        repl_lat_stage(r, REPL_STAGE_APPEND_TO_POST, p->t0_ns, p->post_ns);
        repl_lat_stage(r, REPL_STAGE_POST_TO_RESULT, p->post_ns, p->res_ns);
        repl_lat_stage(r, REPL_STAGE_RESULT_TO_COMMIT, p->res_ns,
                       p->res_ns != 0 ? now : 0);
        repl_lat_stage(r, REPL_STAGE_LEADER_DISK, p->t0_ns, p->disk_ns);
        r->lat.head = (r->lat.head + 1) % REPL_LAT_PENDING;
        r->lat.n--;
        if (r->lat.posted > 0) {
            r->lat.posted--;
        }
        if (r->lat.resulted > 0) {
            r->lat.resulted--;
        }
        if (r->lat.synced > 0) {
            r->lat.synced--;
        }
    }
}

void repl_lat_forget(struct repl *r, uint64_t index)
{
    while (r->lat.n > 0) {
        unsigned tail = (r->lat.head + r->lat.n - 1) % REPL_LAT_PENDING;
        if (r->lat.pending[tail].index < index) {
            break;
        }
        r->lat.n--;
    }
    if (r->lat.posted > r->lat.n) {
        r->lat.posted = r->lat.n;
    }
    if (r->lat.resulted > r->lat.n) {
        r->lat.resulted = r->lat.n;
    }
    if (r->lat.synced > r->lat.n) {
        r->lat.synced = r->lat.n;
    }
}

void repl_get_latency(struct repl *r, struct repl_latency *out, bool reset)
{
    unsigned n = r->lat.total.n_recent;
    *out = r->lat.total;
    /* recent[] oldest first. */
    for (unsigned k = 0; k < n; k++) {
        unsigned pos = (r->lat.recent_pos + REPL_LATENCY_RECENT - n + k) %
                       REPL_LATENCY_RECENT;
        out->recent[k] = r->lat.total.recent[pos];
    }
    if (reset) {
        memset(&r->lat.total, 0, sizeof r->lat.total);
        r->lat.recent_pos = 0;
        memset(r->lat.stages, 0, sizeof r->lat.stages);
    }
}

static const char *const stage_names[REPL_STAGE__COUNT] = {
    "append_to_post", "post_to_result", "result_to_commit", "f_decode",
    "f_core",         "f_ack",          "f_post",           "f_total",
    "apply",          "leader_disk",
};

const char *repl_stage_name(unsigned stage)
{
    return stage < REPL_STAGE__COUNT ? stage_names[stage] : "?";
}

void repl_get_stages(struct repl *r, struct repl_latency *out, bool reset)
{
    memcpy(out, r->lat.stages, sizeof r->lat.stages);
    if (reset) {
        memset(r->lat.stages, 0, sizeof r->lat.stages);
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
