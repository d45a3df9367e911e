/*
 * The node's metrics and health endpoint: an HTTP server (libmicrohttpd)
 * on [metrics] listen serving
 *   GET /metrics  Prometheus text exposition format 0.0.4
 *                 (docs/OPERATIONS.md lists every metric);
 *   GET /healthz  200 "ok" while the loop thread is alive (its heartbeat,
 *                 a 500 ms timer, is younger than 2 s), else 503;
 *   GET /readyz   200 "ready" while the node takes part in a working
 *                 cluster, else 503 with the reason as text: the loop
 *                 does not answer, raft fail-stopped, the replica is not
 *                 running, the node is not a voter of the configuration
 *                 it knows (absent, standby, spare), no leader is known, the
 * disk alarm is on, or the applied index is more than [metrics] ready_max_lag
 * entries behind the commit index. Any other path is 404, any method but GET
 * and HEAD 405. With [metrics] token_file set every path asks for
 * "Authorization: Bearer <token>" (401 otherwise; compared in constant time).
 *
 * Bounds: [metrics] max_connections connections at once (MHD's connection
 * limit; 4 per source address), connection_timeout_s per connection, 16
 * KiB of request (headers) per connection, 16 MiB of answer, [metrics]
 * max_queues queues and max_groups groups per scrape (the rest is left
 * out and tern_metrics_truncated says so).
 *
 * Threading. MHD runs its own thread; the loop thread owns raft, the
 * index and the server, and the HTTP thread never touches them:
 *   - counters the loop bumps (requests, errors, produce totals, client
 *     connections, the produce latency histogram) are _Atomic uint64_t,
 *     written by the loop alone and read relaxed by the HTTP thread;
 *   - everything else is a snapshot the loop gathers on demand: a scrape
 *     takes the mutex, notes the snapshot's generation, wakes the loop with
 *     uv_async_send and waits on the condition variable (1 s at most) for
 *     a newer generation. The loop's async callback gathers the snapshot
 *     under the mutex (raft status and progress, replication latency, the
 *     transport, the disk alarm, and the queues and groups read from the
 *     index by the loop, bounded as above) and broadcasts. The scrape then
 *     renders under the mutex. A loop that does not answer within the
 *     second gets the previous snapshot served (tern_metrics_stale 1) and
 *     /readyz says so. Index reads stay on the loop: the index may be
 *     closed or reopened there at any time.
 * Shutdown: node_metrics_close sets stopping under the mutex (a waiting
 * scrape gives up at once), stops MHD (joins its thread), then closes the
 * loop handles; the object is freed in the last close callback.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include <proto.h>
#include <tern/tern.h>
#include <tern_common.h>

#include "disk.h"
#include "log.h"
#include "metrics.h"
#include "transport.h"

/* ---- Exposition writer ------------------------------------------------ */

void node_expo_init(struct node_expo *e, size_t max)
{
    memset(e, 0, sizeof(*e));
    e->max = max;
}

void node_expo_free(struct node_expo *e)
{
    tern_free(e->buf);
    e->buf = NULL;
    e->len = e->cap = 0;
}

/* Room for n more bytes (plus a NUL); false once err is set. */
static bool expo_reserve(struct node_expo *e, size_t n)
{
    size_t want;
    char *nb;

    if (e->err != 0) {
        return false;
    }
    if (e->len + n + 1 > e->max) {
        e->err = TERN_ELIMIT;
        return false;
    }
    if (e->len + n + 1 <= e->cap) {
        return true;
    }
    want = e->cap == 0 ? 4096 : e->cap;
    while (want < e->len + n + 1) {
        want *= 2;
    }
    want = TERN_MIN(want, e->max);
    nb = tern_malloc(want);
    if (nb == NULL) {
        e->err = -ENOMEM;
        return false;
    }
    if (e->len > 0) {
        memcpy(nb, e->buf, e->len);
    }
    tern_free(e->buf);
    e->buf = nb;
    e->cap = want;
    return true;
}

static void expo_put(struct node_expo *e, const char *s, size_t n)
{
    if (expo_reserve(e, n)) {
        memcpy(e->buf + e->len, s, n);
        e->len += n;
        e->buf[e->len] = '\0';
    }
}

static void expo_str(struct node_expo *e, const char *s)
{
    expo_put(e, s, strlen(s));
}

/* s with backslash and newline escaped, and double quotes when quote. */
static void expo_escaped(struct node_expo *e, const char *s, bool quote)
{
    const char *run = s;
    for (; *s != '\0'; s++) {
        const char *rep = NULL;
        if (*s == '\\') {
            rep = "\\\\";
        } else if (*s == '\n') {
            rep = "\\n";
        } else if (*s == '"' && quote) {
            rep = "\\\"";
        }
        if (rep != NULL) {
            expo_put(e, run, (size_t)(s - run));
            expo_str(e, rep);
            run = s + 1;
        }
    }
    expo_put(e, run, (size_t)(s - run));
}

void node_expo_family(struct node_expo *e,
                      const char *name,
                      const char *type,
                      const char *help)
{
    expo_str(e, "# HELP ");
    expo_str(e, name);
    expo_str(e, " ");
    expo_escaped(e, help, false);
    expo_str(e, "\n# TYPE ");
    expo_str(e, name);
    expo_str(e, " ");
    expo_str(e, type);
    expo_str(e, "\n");
}

/* name{labels[,extra]} followed by a space. */
static void expo_series(struct node_expo *e,
                        const char *name,
                        const char *suffix,
                        const struct node_label *labels,
                        unsigned n,
                        const struct node_label *extra)
{
    expo_str(e, name);
    expo_str(e, suffix);
    if (n > 0 || extra != NULL) {
        expo_str(e, "{");
        for (unsigned i = 0; i < n + (extra != NULL); i++) {
            const struct node_label *l = i < n ? &labels[i] : extra;
            if (i > 0) {
                expo_str(e, ",");
            }
            expo_str(e, l->name);
            expo_str(e, "=\"");
            expo_escaped(e, l->value, true);
            expo_str(e, "\"");
        }
        expo_str(e, "}");
    }
    expo_str(e, " ");
}

static void expo_u64_val(struct node_expo *e, uint64_t v)
{
    char b[32];
    int k = snprintf(b, sizeof(b), "%llu\n", (unsigned long long)v);
    expo_put(e, b, (size_t)k);
}

static void expo_f64_val(struct node_expo *e, double v)
{
    char b[40];
    int k;
    if (isnan(v)) {
        expo_str(e, "NaN\n");
        return;
    }
    if (isinf(v)) {
        expo_str(e, v > 0 ? "+Inf\n" : "-Inf\n");
        return;
    }
    k = snprintf(b, sizeof(b), "%.15g\n", v);
    expo_put(e, b, (size_t)k);
}

void node_expo_u64(struct node_expo *e,
                   const char *name,
                   const struct node_label *labels,
                   unsigned n,
                   uint64_t v)
{
    expo_series(e, name, "", labels, n, NULL);
    expo_u64_val(e, v);
}

void node_expo_f64(struct node_expo *e,
                   const char *name,
                   const struct node_label *labels,
                   unsigned n,
                   double v)
{
    expo_series(e, name, "", labels, n, NULL);
    expo_f64_val(e, v);
}

void node_expo_histogram(struct node_expo *e,
                         const char *name,
                         const struct node_label *labels,
                         unsigned n,
                         const double *bounds,
                         const uint64_t *counts,
                         unsigned nb,
                         double sum)
{
    uint64_t cum = 0;
    char le[32];
    struct node_label l = {"le", le};

    for (unsigned i = 0; i <= nb; i++) {
        cum += counts[i];
        if (i < nb) {
            (void)snprintf(le, sizeof(le), "%g", bounds[i]);
        } else {
            (void)snprintf(le, sizeof(le), "+Inf");
        }
        expo_series(e, name, "_bucket", labels, n, &l);
        expo_u64_val(e, cum);
    }
    expo_series(e, name, "_sum", labels, n, NULL);
    expo_f64_val(e, sum);
    expo_series(e, name, "_count", labels, n, NULL);
    expo_u64_val(e, cum);
}

/* ---- Histograms ---------------------------------------------------------- */

const double node_metrics_bounds[NODE_METRICS_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
/* The same in nanoseconds. */
static const uint64_t bounds_ns[NODE_METRICS_BUCKETS] = {
    100000ull,     250000ull,     500000ull,     1000000ull,
    2500000ull,    5000000ull,    10000000ull,   25000000ull,
    50000000ull,   100000000ull,  250000000ull,  500000000ull,
    1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull};

static unsigned bucket_of(uint64_t ns)
{
    unsigned i = 0;
    while (i < NODE_METRICS_BUCKETS && ns > bounds_ns[i]) {
        i++;
    }
    return i;
}

void node_histo_observe(struct node_histo *h, uint64_t ns)
{
    atomic_fetch_add_explicit(&h->counts[bucket_of(ns)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

uint64_t node_histo_read(const struct node_histo *h, uint64_t *counts)
{
    uint64_t total = 0;
    for (unsigned i = 0; i <= NODE_METRICS_BUCKETS; i++) {
        counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        total += counts[i];
    }
    return total;
}

void node_histo_add_range(uint64_t *counts, uint64_t hi_ns, uint64_t count)
{
    counts[bucket_of(hi_ns)] += count;
}

/* The largest value repl's latency bucket b holds (repl.h). */
static uint64_t repl_bucket_hi(unsigned b)
{
    const unsigned s_n = 1u << REPL_LATENCY_SUB_BITS;
    unsigned p;
    unsigned shift;
    uint64_t top;

    if (b < s_n) {
        return b;
    }
    p = b / s_n + REPL_LATENCY_SUB_BITS - 1;
    shift = p - REPL_LATENCY_SUB_BITS;
    top = (uint64_t)s_n + b % s_n + 1;
    if (top > (UINT64_MAX >> shift)) {
        return UINT64_MAX;
    }
    return (top << shift) - 1;
}

/* ---- Counters ------------------------------------------------------------ */

struct metrics_counters
{
    _Atomic uint64_t requests[NODE_METRICS__OPS];
    _Atomic uint64_t errors[NODE_METRICS__OPS][NODE_METRICS_CODES];
    _Atomic uint64_t produce_messages;
    _Atomic uint64_t produce_bytes;
    _Atomic uint64_t conns_open;
    _Atomic uint64_t conns_accepted;
    _Atomic uint64_t fetch_pool[NODE_METRICS__POOL];
    struct node_histo produce_latency;
};

/* ---- The snapshot the loop gathers --------------------------------------- */

#define METRICS__PEERS_MAX    64u
#define METRICS__ANSWER_MAX   (16u << 20)
#define METRICS__REQUEST_MAX  (16u << 10)
#define METRICS__WAIT_MS      1000u
#define METRICS__HEARTBEAT_MS 500u
#define METRICS__HEALTH_NS    (2000ull * 1000 * 1000)
/* Lease rows one group's status walks, and one scrape in total. */
#define METRICS__GROUP_ROWS  64u
#define METRICS__GROUP_TOTAL 65536u

struct snap_peer
{
    uint64_t id;
    uint64_t match; /* valid when has_match (this node leads) */
    bool has_match;
    const char *transport; /* static */
};

struct snap_queue
{
    char name[TERN_NAME_MAX + 1];
    uint64_t depth;
    uint64_t bytes;
};

struct snap_group
{
    unsigned queue; /* index into queues */
    char name[TERN_NAME_MAX + 1];
    uint64_t lag;
};

struct snap
{
    uint64_t gen; /* 0: never gathered */
    struct repl_status st;
    struct snap_peer peers[METRICS__PEERS_MAX];
    unsigned n_peers;
    uint64_t repl_counts[NODE_METRICS_BUCKETS + 1];
    uint64_t repl_count;
    uint64_t repl_sum_ns;
    char transport[32];
    uint64_t to_slow;
    uint64_t to_fast;
    uint64_t disk_free;
    bool disk_alarm;
    bool have_idx;
    struct snap_queue *queues; /* [max_queues] */
    unsigned n_queues;
    struct snap_group *groups; /* [max_groups] */
    unsigned n_groups;
    bool truncated; /* queues or groups left out */
};

struct node_metrics
{
    uv_loop_t *loop;
    const struct node_config *cfg;
    struct node_metrics_source src;
    uv_async_t async;
    uv_timer_t heartbeat;
    unsigned open_handles;
    struct MHD_Daemon *daemon;
    char *token; /* owned, wiped on free; NULL: none */
    size_t token_len;
    double start_time; /* seconds since the epoch */
    _Atomic uint64_t heartbeat_ns;
    struct metrics_counters c;
    /* Loop-thread scratch. */
    struct repl_latency *lat;       /* owned */
    struct repl_progress *progress; /* owned, [METRICS__PEERS_MAX] */
    /* Guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stopping;
    struct snap snap;
};

/* ---- Hooks ------------------------------------------------------------- */

static enum node_metrics_op op_class(uint8_t op)
{
    switch (op) {
    case PROTO_OP_PRODUCE:
    case PROTO_OP_PRODUCE_DELAYED:
        return NODE_METRICS_PRODUCE;
    case PROTO_OP_FETCH:
    case PROTO_OP_GROUP_FETCH:
        return NODE_METRICS_FETCH;
    case PROTO_OP_RECEIVE:
        return NODE_METRICS_RECEIVE;
    default:
        return NODE_METRICS_OTHER;
    }
}

static const char *const op_names[NODE_METRICS__OPS] = {"produce", "fetch",
                                                        "receive", "other"};

static unsigned code_slot(int code)
{
    if (code <= -31001 && code > -31001 - (int)(NODE_METRICS_CODES - 1)) {
        return (unsigned)(-code - 31000);
    }
    return 0;
}

static void bump(_Atomic uint64_t *a, uint64_t n)
{
    atomic_fetch_add_explicit(a, n, memory_order_relaxed);
}

static uint64_t load(const _Atomic uint64_t *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

void node_metrics_request(struct node_metrics *m, uint8_t op)
{
    if (m != NULL) {
        bump(&m->c.requests[op_class(op)], 1);
    }
}

void node_metrics_error(struct node_metrics *m, uint8_t op, int code)
{
    if (m != NULL) {
        bump(&m->c.errors[op_class(op)][code_slot(code)], 1);
    }
}

void node_metrics_produced(struct node_metrics *m,
                           uint64_t messages,
                           uint64_t bytes)
{
    if (m != NULL) {
        bump(&m->c.produce_messages, messages);
        bump(&m->c.produce_bytes, bytes);
    }
}

void node_metrics_produce_latency(struct node_metrics *m, uint64_t latency_ns)
{
    if (m != NULL) {
        node_histo_observe(&m->c.produce_latency, latency_ns);
    }
}

void node_metrics_conn(struct node_metrics *m, bool opened)
{
    if (m == NULL) {
        return;
    }
    if (opened) {
        bump(&m->c.conns_accepted, 1);
        bump(&m->c.conns_open, 1);
    } else {
        atomic_fetch_sub_explicit(&m->c.conns_open, 1, memory_order_relaxed);
    }
}

void node_metrics_fetch_pool(struct node_metrics *m, enum node_metrics_pool k)
{
    if (m != NULL) {
        bump(&m->c.fetch_pool[k], 1);
    }
}

/* ---- Gathering (loop thread, under mu) -------------------------------- */

struct gather_ctx
{
    struct snap *s;
    unsigned max;
};

static int queue_cb(void *arg, const struct idx_queue_info *q)
{
    struct gather_ctx *x = arg;
    struct snap_queue *sq;
    if (x->s->n_queues >= x->max) {
        x->s->truncated = true;
        return 1;
    }
    sq = &x->s->queues[x->s->n_queues++];
    (void)snprintf(sq->name, sizeof(sq->name), "%s", q->name);
    sq->depth = q->next_offset - q->start_offset;
    sq->bytes = q->bytes;
    return 0;
}

struct group_ctx
{
    struct snap *s;
    unsigned queue;
};

static int group_cb(void *arg, const struct idx_group_status *g)
{
    struct group_ctx *x = arg;
    struct snap_group *sg = &x->s->groups[x->s->n_groups++];
    sg->queue = x->queue;
    (void)snprintf(sg->name, sizeof(sg->name), "%s", g->name);
    sg->lag = g->lag;
    return 0;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void gather_index(struct node_metrics *m, struct idx_env *e)
{
    struct snap *s = &m->snap;
    struct gather_ctx gx = {s, m->cfg->metrics_max_queues};
    uint64_t now = wall_ms();

    s->n_queues = 0;
    s->n_groups = 0;
    s->truncated = false;
    if (gx.max == 0 || idx_queue_list(e, queue_cb, &gx) < 0) {
        return;
    }
    for (unsigned i = 0; i < s->n_queues; i++) {
        unsigned room = m->cfg->metrics_max_groups - s->n_groups;
        struct group_ctx gc = {s, i};
        bool more = false;
        if (room == 0) {
            s->truncated = true;
            break;
        }
        if (idx_group_status_list(e, s->queues[i].name, NULL, room, now,
                                  METRICS__GROUP_ROWS, METRICS__GROUP_TOTAL,
                                  group_cb, &gc, &more) == 0 &&
            more) {
            s->truncated = true;
        }
    }
}

static const char *peer_transport(const struct node_transport *t, uint64_t id)
{
    int rv;
    if (t->xport == NULL) {
        return "none";
    }
    if (strchr(t->name, '+') == NULL) {
        return strcmp(t->name, "shm") == 0 ? "shm" : "tcp";
    }
    rv = xport_fallback_peer_fast(t->xport, id);
    if (rv == 1) {
        return t->fast_is_shm ? "shm" : "verbs";
    }
    return rv == 0 ? "tcp" : "none"; /* -ENOENT: nothing sent yet */
}

static void gather(struct node_metrics *m)
{
    struct snap *s = &m->snap;
    const struct node_metrics_source *src = &m->src;
    const struct node_config *cfg = m->cfg;
    struct xport_stats xs;
    struct idx_env *e;
    unsigned np;

    src->status(src->arg, &s->st);
    src->latency(src->arg, m->lat);
    memset(s->repl_counts, 0, sizeof(s->repl_counts));
    for (unsigned b = 0; b < REPL_LATENCY_BUCKETS; b++) {
        if (m->lat->buckets[b] != 0) {
            node_histo_add_range(s->repl_counts, repl_bucket_hi(b),
                                 m->lat->buckets[b]);
        }
    }
    s->repl_count = m->lat->count;
    s->repl_sum_ns = m->lat->sum_ns;

    np = src->progress(src->arg, m->progress, METRICS__PEERS_MAX);
    s->n_peers = 0;
    for (unsigned i = 0; i < cfg->n_peers && s->n_peers < METRICS__PEERS_MAX;
         i++) {
        struct snap_peer *p = &s->peers[s->n_peers];
        if (cfg->peers[i].id == cfg->id) {
            continue;
        }
        p->id = cfg->peers[i].id;
        p->has_match = false;
        for (unsigned k = 0; k < np; k++) {
            if (m->progress[k].id == p->id) {
                p->has_match = true;
                p->match = m->progress[k].match_index;
            }
        }
        p->transport = peer_transport(src->transport, p->id);
        s->n_peers++;
    }
    (void)snprintf(s->transport, sizeof(s->transport), "%s",
                   src->transport->name);
    node_transport_stats(src->transport, &xs);
    s->to_slow = xs.to_slow;
    s->to_fast = xs.to_fast;
    s->disk_free = src->disk->free;
    s->disk_alarm = src->disk->alarm;
    e = src->idx(src->arg);
    s->have_idx = e != NULL;
    if (e != NULL) {
        gather_index(m, e);
    } else {
        s->n_queues = s->n_groups = 0;
    }
    s->gen++;
}

static void on_async(uv_async_t *h)
{
    struct node_metrics *m = h->data;
    pthread_mutex_lock(&m->mu);
    if (!m->stopping) {
        gather(m);
    }
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
}

static void on_heartbeat(uv_timer_t *h)
{
    struct node_metrics *m = h->data;
    atomic_store_explicit(&m->heartbeat_ns, uv_hrtime(), memory_order_relaxed);
}

/* ---- HTTP thread ----------------------------------------------------------
 */

/* Ask the loop for a new snapshot and wait for it (at most
 * METRICS__WAIT_MS). Returns with mu held; true if the snapshot is new. */
static bool refresh(struct node_metrics *m)
{
    struct timespec deadline;
    uint64_t want;

    (void)clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += METRICS__WAIT_MS / 1000;
    pthread_mutex_lock(&m->mu);
    want = m->snap.gen + 1;
    if (!m->stopping) {
        (void)uv_async_send(&m->async);
    }
    while (m->snap.gen < want && !m->stopping) {
        if (pthread_cond_timedwait(&m->cond, &m->mu, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    return m->snap.gen >= want;
}

static void render_counters(struct node_metrics *m, struct node_expo *e)
{
    uint64_t counts[NODE_METRICS_BUCKETS + 1];
    uint64_t n;
    struct node_label l[2];

    node_expo_family(e, "tern_requests_total", "counter",
                     "Client requests received, by op class (produce, "
                     "fetch, receive, other).");
    for (unsigned o = 0; o < NODE_METRICS__OPS; o++) {
        l[0] = (struct node_label){"op", op_names[o]};
        node_expo_u64(e, "tern_requests_total", l, 1, load(&m->c.requests[o]));
    }
    node_expo_family(e, "tern_request_errors_total", "counter",
                     "Client requests answered with an error, by op class "
                     "and error code (codes seen so far).");
    for (unsigned o = 0; o < NODE_METRICS__OPS; o++) {
        for (unsigned k = 0; k < NODE_METRICS_CODES; k++) {
            uint64_t v = load(&m->c.errors[o][k]);
            if (v == 0) {
                continue;
            }
            l[0] = (struct node_label){"op", op_names[o]};
            l[1] = (struct node_label){
                "code", k == 0 ? "other" : tern_err_name(-31000 - (int)k)};
            node_expo_u64(e, "tern_request_errors_total", l, 2, v);
        }
    }
    node_expo_family(e, "tern_produce_messages_total", "counter",
                     "Messages of successfully answered produce requests.");
    node_expo_u64(e, "tern_produce_messages_total", NULL, 0,
                  load(&m->c.produce_messages));
    node_expo_family(e, "tern_produce_bytes_total", "counter",
                     "Message bytes of successfully answered produce "
                     "requests.");
    node_expo_u64(e, "tern_produce_bytes_total", NULL, 0,
                  load(&m->c.produce_bytes));
    node_expo_family(e, "tern_produce_latency_seconds", "histogram",
                     "Leader: time from a produce request's receipt to its "
                     "answer (after the group commit covering it).");
    n = node_histo_read(&m->c.produce_latency, counts);
    (void)n;
    node_expo_histogram(e, "tern_produce_latency_seconds", NULL, 0,
                        node_metrics_bounds, counts, NODE_METRICS_BUCKETS,
                        (double)load(&m->c.produce_latency.sum_ns) / 1e9);
    node_expo_family(e, "tern_client_connections", "gauge",
                     "Client connections open.");
    node_expo_u64(e, "tern_client_connections", NULL, 0,
                  load(&m->c.conns_open));
    node_expo_family(e, "tern_client_connections_accepted_total", "counter",
                     "Client connections accepted.");
    node_expo_u64(e, "tern_client_connections_accepted_total", NULL, 0,
                  load(&m->c.conns_accepted));
    static const char *const pool_kinds[NODE_METRICS__POOL] = {
        "read", "ahead", "ahead_served", "reread", "ahead_next"};
    node_expo_family(e, "tern_fetch_pool_total", "counter",
                     "FETCHes read on the thread pool (read), next FETCHes "
                     "read ahead (ahead), read-aheads that answered their "
                     "FETCH (ahead_served), and pooled reads read again on "
                     "the loop (reread: the log was cut, the read failed, "
                     "or a claimed read-ahead reached the queue end), and "
                     "read-aheads of the answer after the next (ahead_next, "
                     "counted in ahead too).");
    for (unsigned k = 0; k < NODE_METRICS__POOL; k++) {
        struct node_label kind[] = {{"kind", pool_kinds[k]}};
        node_expo_u64(e, "tern_fetch_pool_total", kind, 1,
                      load(&m->c.fetch_pool[k]));
    }
}

static void render_snap(struct node_metrics *m, struct node_expo *e, bool fresh)
{
    const struct snap *s = &m->snap;
    static const enum repl_role roles[] = {REPL_LEADER, REPL_FOLLOWER,
                                           REPL_CANDIDATE, REPL_UNAVAILABLE};
    struct node_label l[2];
    char id[24];

    node_expo_family(e, "tern_raft_term", "gauge", "Current raft term.");
    node_expo_u64(e, "tern_raft_term", NULL, 0, s->st.term);
    node_expo_family(e, "tern_raft_role", "gauge",
                     "1 for this node's raft role, 0 for the others.");
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(roles); i++) {
        l[0] = (struct node_label){"role", repl_role_name(roles[i])};
        node_expo_u64(e, "tern_raft_role", l, 1, s->st.role == roles[i]);
    }
    node_expo_family(e, "tern_raft_leader_id", "gauge",
                     "Id of the leader this node knows (0: none).");
    node_expo_u64(e, "tern_raft_leader_id", NULL, 0, s->st.leader_id);
    node_expo_family(e, "tern_raft_leader_silent", "gauge",
                     "1 on a follower that has not heard from its leader "
                     "for an election timeout.");
    node_expo_u64(e, "tern_raft_leader_silent", NULL, 0, s->st.leader_silent);
    node_expo_family(e, "tern_raft_commit_index", "gauge",
                     "Raft commit index.");
    node_expo_u64(e, "tern_raft_commit_index", NULL, 0, s->st.commit_index);
    node_expo_family(e, "tern_raft_applied_index", "gauge",
                     "Last raft index applied to the index.");
    node_expo_u64(e, "tern_raft_applied_index", NULL, 0, s->st.last_applied);
    node_expo_family(e, "tern_raft_last_index", "gauge",
                     "Last index of the local raft log.");
    node_expo_u64(e, "tern_raft_last_index", NULL, 0, s->st.last_index);
    node_expo_family(e, "tern_raft_failed", "gauge",
                     "1 when raft fail-stopped (restart needed).");
    node_expo_u64(e, "tern_raft_failed", NULL, 0, s->st.failed != 0);

    node_expo_family(e, "tern_raft_log_store_info", "gauge",
                     "The raft log store ([raft] log_store: uv, tern).");
    /* From the config, not the status: a stopping node's status is
     * zeroed, and its store did not change. */
    l[0] = (struct node_label){"store", m->cfg->tern_log_store ? "tern" : "uv"};
    node_expo_u64(e, "tern_raft_log_store_info", l, 1, 1);
    node_expo_family(e, "tern_raft_log_torn_tails", "gauge",
                     "Torn tails the last load found (0 or 1; a write a "
                     "crash interrupted; tern store only).");
    node_expo_u64(e, "tern_raft_log_torn_tails", NULL, 0, s->st.log_torn);
    if (s->st.log_store_tern) {
        const struct repl_log_stats *g = &s->st.log;
        const struct
        {
            const char *name, *type, *help;
            uint64_t v;
        } one[] = {
            {"tern_raft_log_writes_total", "counter",
             "Durable writes of the raft log completed.", g->writes},
            {"tern_raft_log_written_bytes_total", "counter",
             "Bytes those writes wrote (whole blocks).", g->bytes},
            {"tern_raft_log_segments", "gauge", "Raft log segments in use.",
             g->segments},
            {"tern_raft_log_segments_forgotten_total", "counter",
             "Segments forgotten (behind a snapshot or cut by a truncate).",
             g->forgotten},
            {"tern_raft_log_free_segments", "gauge",
             "Files on the free list, kept for reuse.", g->free},
        };
        for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
            node_expo_family(e, one[i].name, one[i].type, one[i].help);
            node_expo_u64(e, one[i].name, NULL, 0, one[i].v);
        }
        node_expo_family(e, "tern_raft_log_segments_prepared_total", "counter",
                         "Segments prepared for writes, by where the file "
                         "came from (recycled: the free list; new: a new "
                         "zeroed file).");
        l[0] = (struct node_label){"from", "recycled"};
        node_expo_u64(e, "tern_raft_log_segments_prepared_total", l, 1,
                      g->recycled);
        l[0] = (struct node_label){"from", "new"};
        node_expo_u64(e, "tern_raft_log_segments_prepared_total", l, 1,
                      g->prepared - g->recycled);
    }

    node_expo_family(e, "tern_raft_peer_match_index", "gauge",
                     "Leader only: highest index each peer stored.");
    for (unsigned i = 0; i < s->n_peers; i++) {
        if (s->peers[i].has_match) {
            (void)snprintf(id, sizeof(id), "%llu",
                           (unsigned long long)s->peers[i].id);
            l[0] = (struct node_label){"peer", id};
            node_expo_u64(e, "tern_raft_peer_match_index", l, 1,
                          s->peers[i].match);
        }
    }
    node_expo_family(e, "tern_raft_peer_lag_entries", "gauge",
                     "Leader only: last log index minus the peer's match "
                     "index.");
    for (unsigned i = 0; i < s->n_peers; i++) {
        if (s->peers[i].has_match) {
            uint64_t lag = s->st.last_index > s->peers[i].match
                               ? s->st.last_index - s->peers[i].match
                               : 0;
            (void)snprintf(id, sizeof(id), "%llu",
                           (unsigned long long)s->peers[i].id);
            l[0] = (struct node_label){"peer", id};
            node_expo_u64(e, "tern_raft_peer_lag_entries", l, 1, lag);
        }
    }
    node_expo_family(e, "tern_raft_peer_transport", "gauge",
                     "1 for the transport this node's raft traffic to the "
                     "peer uses now (tcp, shm, verbs; none: nothing sent "
                     "yet).");
    for (unsigned i = 0; i < s->n_peers; i++) {
        (void)snprintf(id, sizeof(id), "%llu",
                       (unsigned long long)s->peers[i].id);
        l[0] = (struct node_label){"peer", id};
        l[1] = (struct node_label){"transport", s->peers[i].transport};
        node_expo_u64(e, "tern_raft_peer_transport", l, 2, 1);
    }
    node_expo_family(e, "tern_transport_info", "gauge",
                     "The raft transport selected (tcp, shm+tcp, "
                     "verbs+tcp).");
    l[0] = (struct node_label){"transport", s->transport};
    node_expo_u64(e, "tern_transport_info", l, 1, 1);
    node_expo_family(e, "tern_transport_fallback_switches_total", "counter",
                     "Per-peer path switches of the fallback transport.");
    l[0] = (struct node_label){"direction", "to_slow"};
    node_expo_u64(e, "tern_transport_fallback_switches_total", l, 1,
                  s->to_slow);
    l[0] = (struct node_label){"direction", "to_fast"};
    node_expo_u64(e, "tern_transport_fallback_switches_total", l, 1,
                  s->to_fast);
    node_expo_family(e, "tern_replication_latency_seconds", "histogram",
                     "Leader: time from a batch's local append to the commit "
                     "index covering it (the counters of tern cluster stats; "
                     "its reset resets them).");
    node_expo_histogram(e, "tern_replication_latency_seconds", NULL, 0,
                        node_metrics_bounds, s->repl_counts,
                        NODE_METRICS_BUCKETS, (double)s->repl_sum_ns / 1e9);

    node_expo_family(e, "tern_queue_depth_messages", "gauge",
                     "Messages retained in the queue (next offset minus "
                     "first retained offset).");
    for (unsigned i = 0; i < s->n_queues; i++) {
        l[0] = (struct node_label){"queue", s->queues[i].name};
        node_expo_u64(e, "tern_queue_depth_messages", l, 1, s->queues[i].depth);
    }
    node_expo_family(e, "tern_queue_bytes", "gauge",
                     "Message bytes retained in the queue.");
    for (unsigned i = 0; i < s->n_queues; i++) {
        l[0] = (struct node_label){"queue", s->queues[i].name};
        node_expo_u64(e, "tern_queue_bytes", l, 1, s->queues[i].bytes);
    }
    node_expo_family(e, "tern_group_lag_messages", "gauge",
                     "Messages of the queue past the group's committed "
                     "offset (shared groups: past the floor).");
    for (unsigned i = 0; i < s->n_groups; i++) {
        l[0] = (struct node_label){"queue", s->queues[s->groups[i].queue].name};
        l[1] = (struct node_label){"group", s->groups[i].name};
        node_expo_u64(e, "tern_group_lag_messages", l, 2, s->groups[i].lag);
    }
    node_expo_family(
        e, "tern_metrics_truncated", "gauge",
        "1 when queues or groups may have been left out ([metrics] "
        "max_queues, max_groups).");
    node_expo_u64(e, "tern_metrics_truncated", NULL, 0, s->truncated);
    node_expo_family(e, "tern_metrics_stale", "gauge",
                     "1 when the loop did not answer this scrape in time "
                     "and an older snapshot is shown.");
    node_expo_u64(e, "tern_metrics_stale", NULL, 0, !fresh);

    node_expo_family(e, "tern_disk_free_bytes", "gauge",
                     "Bytes available in the data directory's file system "
                     "(last reading).");
    node_expo_u64(e, "tern_disk_free_bytes", NULL, 0, s->disk_free);
    node_expo_family(e, "tern_disk_alarm", "gauge",
                     "1 while the disk alarm refuses writes.");
    node_expo_u64(e, "tern_disk_alarm", NULL, 0, s->disk_alarm);
}

static void render(struct node_metrics *m, struct node_expo *e, bool fresh)
{
    char version[32];
    struct node_label l = {"version", version};
    uint64_t hb = atomic_load_explicit(&m->heartbeat_ns, memory_order_relaxed);

    (void)snprintf(version, sizeof(version), "%d.%d.%d", TERN_VERSION_MAJOR,
                   TERN_VERSION_MINOR, TERN_VERSION_PATCH);
    node_expo_family(e, "tern_build_info", "gauge",
                     "Always 1; the version is the label.");
    node_expo_u64(e, "tern_build_info", &l, 1, 1);
    node_expo_family(e, "tern_process_start_time_seconds", "gauge",
                     "Start time of the process since the epoch, seconds.");
    node_expo_f64(e, "tern_process_start_time_seconds", NULL, 0, m->start_time);
    node_expo_family(e, "tern_loop_heartbeat_age_seconds", "gauge",
                     "Time since the loop thread's last heartbeat.");
    node_expo_f64(e, "tern_loop_heartbeat_age_seconds", NULL, 0,
                  (double)(uv_hrtime() - hb) / 1e9);
    render_counters(m, e);
    render_snap(m, e, fresh);
}

/* The reason the node is not ready ("" when ready) into why (cap bytes).
 * mu held. */
static void readiness(struct node_metrics *m, bool fresh, char *why, size_t cap)
{
    const struct snap *s = &m->snap;
    why[0] = '\0';
    if (!fresh) {
        (void)snprintf(why, cap, "loop not responding");
    } else if (s->st.failed != 0) {
        (void)snprintf(why, cap, "raft fail-stopped (%s)",
                       tern_err_name(s->st.failed));
    } else if (s->st.role == REPL_UNAVAILABLE) {
        (void)snprintf(why, cap, "not a member: raft is not running");
    } else if (s->st.member_role != REPL_MEMBER_VOTER) {
        /* A node waiting to be added, catching up as a standby or
         * removed serves no quorum yet (docs/MEMBERSHIP.md). */
        (void)snprintf(why, cap, "not a voter of the configuration: %s",
                       repl_member_role_name(s->st.member_role));
    } else if (s->st.leader_id == 0) {
        (void)snprintf(why, cap, "no leader");
    } else if (s->disk_alarm) {
        (void)snprintf(why, cap, "disk alarm: %llu bytes free",
                       (unsigned long long)s->disk_free);
    } else if (!s->have_idx) {
        (void)snprintf(why, cap, "index not open");
    } else if (s->st.commit_index > s->st.last_applied &&
               s->st.commit_index - s->st.last_applied >
                   m->cfg->metrics_ready_max_lag) {
        (void)snprintf(
            why, cap, "applied index %llu is %llu behind commit index %llu",
            (unsigned long long)s->st.last_applied,
            (unsigned long long)(s->st.commit_index - s->st.last_applied),
            (unsigned long long)s->st.commit_index);
    }
}

static enum MHD_Result reply_text(struct MHD_Connection *conn,
                                  unsigned status,
                                  const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *)(uintptr_t)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rv;
    if (r == NULL) {
        return MHD_NO;
    }
    (void)MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                  "text/plain; charset=utf-8");
    if (status == MHD_HTTP_UNAUTHORIZED) {
        (void)MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                      "Bearer");
    }
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        (void)MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    rv = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rv;
}

static bool token_ok(const struct node_metrics *m, struct MHD_Connection *conn)
{
    const char *h;
    size_t n;
    unsigned char diff = 0;

    if (m->token == NULL) {
        return true;
    }
    h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncmp(h, "Bearer ", 7) != 0) {
        return false;
    }
    h += 7;
    n = strlen(h);
    if (n != m->token_len) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        diff |= (unsigned char)(h[i] ^ m->token[i]);
    }
    return diff == 0;
}

static void free_answer(void *p)
{
    tern_free(p);
}

static enum MHD_Result serve_metrics(struct node_metrics *m,
                                     struct MHD_Connection *conn)
{
    struct node_expo e;
    struct MHD_Response *r;
    enum MHD_Result rv;
    bool fresh;

    node_expo_init(&e, METRICS__ANSWER_MAX);
    fresh = refresh(m);
    render(m, &e, fresh);
    pthread_mutex_unlock(&m->mu);
    if (e.err != 0 || e.buf == NULL) {
        node_expo_free(&e);
        return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "metrics answer too large or out of memory\n");
    }
    r = MHD_create_response_from_buffer_with_free_callback(e.len, e.buf,
                                                           free_answer);
    if (r == NULL) {
        node_expo_free(&e);
        return MHD_NO;
    }
    (void)MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                  "text/plain; version=0.0.4; charset=utf-8");
    rv = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rv;
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **req_cls)
{
    struct node_metrics *m = cls;
    char why[160];
    bool fresh;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)req_cls;

    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "only GET and HEAD\n");
    }
    if (!token_ok(m, conn)) {
        return reply_text(conn, MHD_HTTP_UNAUTHORIZED,
                          "a bearer token is required\n");
    }
    if (strcmp(url, "/metrics") == 0) {
        return serve_metrics(m, conn);
    }
    if (strcmp(url, "/healthz") == 0) {
        uint64_t hb =
            atomic_load_explicit(&m->heartbeat_ns, memory_order_relaxed);
        uint64_t age = uv_hrtime() - hb;
        if (age < METRICS__HEALTH_NS) {
            return reply_text(conn, MHD_HTTP_OK, "ok\n");
        }
        (void)snprintf(why, sizeof(why), "loop not responding for %llu ms\n",
                       (unsigned long long)(age / 1000000u));
        return reply_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, why);
    }
    if (strcmp(url, "/readyz") == 0) {
        size_t k;
        fresh = refresh(m);
        readiness(m, fresh, why, sizeof(why) - 1);
        pthread_mutex_unlock(&m->mu);
        if (why[0] == '\0') {
            return reply_text(conn, MHD_HTTP_OK, "ready\n");
        }
        k = strlen(why);
        why[k] = '\n';
        why[k + 1] = '\0';
        return reply_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, why);
    }
    return reply_text(conn, MHD_HTTP_NOT_FOUND,
                      "not found: /metrics, /healthz, /readyz\n");
}

/* ---- Life cycle ------------------------------------------------------------
 */

/* Read the bearer token: the first line of path (trailing whitespace cut),
 * 1..4096 bytes; the file must not be readable by group or others. */
static int load_token(struct node_metrics *m, const char *path, char *errmsg)
{
    char buf[4097];
    struct stat sb;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rv = 0;

    if (fd < 0) {
        tern_errmsg_printf(errmsg, "[metrics] token_file %s: %s", path,
                           strerror(errno));
        return TERN_EINVAL;
    }
    if (fstat(fd, &sb) != 0 || (sb.st_mode & 077) != 0) {
        tern_errmsg_printf(errmsg,
                           "[metrics] token_file %s: must not be accessible "
                           "by group or others (chmod 600)",
                           path);
        rv = TERN_EINVAL;
        goto err_after_open;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0) {
        tern_errmsg_printf(errmsg, "[metrics] token_file %s: %s", path,
                           strerror(errno));
        rv = TERN_EINVAL;
        goto err_after_open;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    n = (ssize_t)strlen(buf);
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\t')) {
        buf[--n] = '\0';
    }
    if (n == 0 || (size_t)n >= sizeof(buf) - 1) {
        tern_errmsg_printf(errmsg,
                           "[metrics] token_file %s: the first line must hold "
                           "a token of 1..4095 bytes",
                           path);
        rv = TERN_EINVAL;
        goto err_after_wipe;
    }
    m->token = tern_malloc((size_t)n + 1);
    if (m->token == NULL) {
        rv = -ENOMEM;
        goto err_after_wipe;
    }
    memcpy(m->token, buf, (size_t)n + 1);
    m->token_len = (size_t)n;
err_after_wipe:
    memset(buf, 0, sizeof(buf));
err_after_open:
    (void)close(fd);
    return rv;
}

/* OUT: *sa from "host:port" (config.c checked the form). 0 or a code. */
static int listen_addr(const char *a, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(a, ':');
    size_t hl = colon != NULL ? (size_t)(colon - a) : 0;

    if (colon == NULL || hl == 0 || hl >= sizeof(host)) {
        return TERN_EINVAL;
    }
    memcpy(host, a, hl);
    host[hl] = '\0';
    return uv_ip4_addr(host, atoi(colon + 1), sa);
}

static void metrics_free(struct node_metrics *m)
{
    if (m->token != NULL) {
        memset(m->token, 0, m->token_len);
        tern_free(m->token);
    }
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->mu);
    tern_free(m->snap.queues);
    tern_free(m->snap.groups);
    tern_free(m->progress);
    tern_free(m->lat);
    tern_free(m);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct node_metrics *m = h->data;
    if (--m->open_handles == 0) {
        metrics_free(m);
    }
}

int node_metrics_new(uv_loop_t *loop,
                     const struct node_config *cfg,
                     const struct node_metrics_source *src,
                     struct node_metrics **out,
                     char *errmsg)
{
    struct node_metrics *m;
    struct sockaddr_in sa;
    pthread_condattr_t ca;
    struct timespec ts;
    int rv;

    *out = NULL;
    if (cfg->metrics_listen == NULL) {
        return 0;
    }
    if (cfg->metrics_max_connections == 0 || cfg->metrics_timeout_s == 0) {
        tern_errmsg_printf(errmsg,
                           "[metrics] max_connections and "
                           "connection_timeout_s must be at least 1");
        return TERN_EINVAL;
    }
    m = tern_calloc(1, sizeof(*m));
    if (m == NULL) {
        return -ENOMEM;
    }
    m->loop = loop;
    m->cfg = cfg;
    m->src = *src;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    m->start_time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    atomic_store(&m->heartbeat_ns, uv_hrtime());
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &ca);
    pthread_condattr_destroy(&ca);
    m->lat = tern_calloc(1, sizeof(*m->lat));
    m->progress = tern_calloc(METRICS__PEERS_MAX, sizeof(*m->progress));
    m->snap.queues = tern_calloc(TERN_MAX(cfg->metrics_max_queues, 1u),
                                 sizeof(struct snap_queue));
    m->snap.groups = tern_calloc(TERN_MAX(cfg->metrics_max_groups, 1u),
                                 sizeof(struct snap_group));
    if (m->lat == NULL || m->progress == NULL || m->snap.queues == NULL ||
        m->snap.groups == NULL) {
        rv = -ENOMEM;
        goto err_after_alloc;
    }
    if (cfg->metrics_token_file != NULL &&
        (rv = load_token(m, cfg->metrics_token_file, errmsg)) != 0) {
        goto err_after_alloc;
    }
    rv = listen_addr(cfg->metrics_listen, &sa);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "[metrics] listen %s: not host:port",
                           cfg->metrics_listen);
        rv = TERN_EINVAL;
        goto err_after_alloc;
    }
    rv = uv_async_init(loop, &m->async, on_async);
    if (rv != 0) {
        tern_errmsg_printf(errmsg, "metrics: uv_async_init: %s",
                           uv_strerror(rv));
        goto err_after_alloc;
    }
    m->async.data = m;
    (void)uv_timer_init(loop, &m->heartbeat);
    m->heartbeat.data = m;
    m->open_handles = 2;
    (void)uv_timer_start(&m->heartbeat, on_heartbeat, METRICS__HEARTBEAT_MS,
                         METRICS__HEARTBEAT_MS);
    errno = 0;
    m->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD, ntohs(sa.sin_port), NULL, NULL,
        on_request, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, cfg->metrics_max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        TERN_MIN(cfg->metrics_max_connections, 4u),
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->metrics_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS__REQUEST_MAX,
        MHD_OPTION_END);
    if (m->daemon == NULL) {
        tern_errmsg_printf(errmsg, "[metrics] listen %s: cannot serve (%s)",
                           cfg->metrics_listen,
                           errno != 0 ? strerror(errno) : "libmicrohttpd");
        rv = errno != 0 ? -errno : TERN_EINVAL;
        /* The handles are open: close them, m is freed when they are. */
        m->stopping = true;
        uv_close((uv_handle_t *)&m->async, on_handle_closed);
        uv_close((uv_handle_t *)&m->heartbeat, on_handle_closed);
        return rv;
    }
    *out = m;
    return 0;

err_after_alloc:
    metrics_free(m);
    return rv;
}

void node_metrics_close(struct node_metrics *m)
{
    if (m == NULL) {
        return;
    }
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
    MHD_stop_daemon(m->daemon);
    m->daemon = NULL;
    uv_close((uv_handle_t *)&m->async, on_handle_closed);
    uv_close((uv_handle_t *)&m->heartbeat, on_handle_closed);
}
