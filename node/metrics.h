/*
 * The node's metrics and health endpoint (metrics.c): the Prometheus text
 * exposition writer, the counters the client server bumps on the loop
 * thread (atomics read by the HTTP thread), and the HTTP server itself
 * (libmicrohttpd, its own thread) serving /metrics, /healthz and /readyz.
 * Private to node/ and its tests.
 */
#ifndef TERN_NODE_METRICS_H
#define TERN_NODE_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "config.h"
#include "idx.h"
#include "repl.h"

struct node_disk;      /* disk.h */
struct node_transport; /* transport.h */

/* ---- Exposition writer (Prometheus text format 0.0.4) ----------------- */

/* A growing text buffer bounded by max bytes. Once an append would pass
 * max (or memory runs out) err is set (-ENOMEM or TERN_ELIMIT) and every
 * later append does nothing. buf is owned (tern_malloc), freed by
 * node_expo_free unless taken by the caller (then set buf to NULL). */
struct node_expo
{
    char *buf;
    size_t len;
    size_t cap;
    size_t max;
    int err;
};
/* A label; name and value borrowed for the call. Values are escaped
 * (backslash, double quote, newline); names must be valid label names. */
struct node_label
{
    const char *name;
    const char *value;
};
void node_expo_init(struct node_expo *e, size_t max);
void node_expo_free(struct node_expo *e);
/* "# HELP name help" (help escaped) and "# TYPE name type". */
void node_expo_family(struct node_expo *e,
                      const char *name,
                      const char *type,
                      const char *help);
/* One sample line: name{labels} value (labels[0..n), borrowed). */
void node_expo_u64(struct node_expo *e,
                   const char *name,
                   const struct node_label *labels,
                   unsigned n,
                   uint64_t v);
void node_expo_f64(struct node_expo *e,
                   const char *name,
                   const struct node_label *labels,
                   unsigned n,
                   double v);
/* A histogram's samples: name_bucket{labels,le} with cumulative counts
 * for the upper bounds[0..nb) (ascending, in the metric's unit) and
 * le="+Inf"; name_sum (sum) and name_count. counts[0..nb] are per bucket
 * (not cumulative): counts[i] holds values in (bounds[i-1], bounds[i]],
 * counts[nb] the values above the last bound. All borrowed. */
void node_expo_histogram(struct node_expo *e,
                         const char *name,
                         const struct node_label *labels,
                         unsigned n,
                         const double *bounds,
                         const uint64_t *counts,
                         unsigned nb,
                         double sum);

/* ---- Counters of the loop thread ---------------------------------------- */

/* The latency histograms' upper bounds, in seconds (100 us .. 10 s). */
#define NODE_METRICS_BUCKETS 16u
extern const double node_metrics_bounds[NODE_METRICS_BUCKETS];

/* A fixed-bucket histogram of durations; written by one thread, read by
 * others (relaxed atomics: a scrape may see a sample in a bucket before
 * its sum, never a torn value). */
struct node_histo
{
    _Atomic uint64_t counts[NODE_METRICS_BUCKETS + 1];
    _Atomic uint64_t sum_ns;
};
void node_histo_observe(struct node_histo *h, uint64_t ns);
/* OUT: counts[0..NODE_METRICS_BUCKETS] of h; returns their total. */
uint64_t node_histo_read(const struct node_histo *h, uint64_t *counts);
/* Add count samples in the range [lo_ns, hi_ns] to the per-bucket
 * counts[0..NODE_METRICS_BUCKETS] (into the first bucket whose bound is
 * at least hi_ns: the bucket of a range's largest value). */
void node_histo_add_range(uint64_t *counts, uint64_t hi_ns, uint64_t count);

/* Request classes the counters are kept by. */
enum node_metrics_op {
    NODE_METRICS_PRODUCE = 0, /* PRODUCE, PRODUCE_DELAYED */
    NODE_METRICS_FETCH,       /* FETCH, GROUP_FETCH */
    NODE_METRICS_RECEIVE,     /* RECEIVE */
    NODE_METRICS_OTHER,       /* every other op */
    NODE_METRICS__OPS
};
/* Error codes counted one by one: tern's own -31001..-31063 (slots
 * 1..63); slot 0 counts every other code. */
#define NODE_METRICS_CODES 64u

struct node_metrics;

/* Hooks for the client server (loop thread). m may be NULL (no endpoint
 * configured): then they do nothing. op is a PROTO_OP_* number. */
void node_metrics_request(struct node_metrics *m, uint8_t op);
void node_metrics_error(struct node_metrics *m, uint8_t op, int code);
/* A produce answered successfully: messages and their bytes. */
void node_metrics_produced(struct node_metrics *m,
                           uint64_t messages,
                           uint64_t bytes);
/* A produce answered (either way) latency_ns after it was received. */
void node_metrics_produce_latency(struct node_metrics *m, uint64_t latency_ns);
/* A client connection accepted (opened) or gone (closed). */
void node_metrics_conn(struct node_metrics *m, bool opened);
/* FETCHes read on the thread pool (server.c, fetch_job). */
enum node_metrics_pool {
    NODE_METRICS_POOL_READ = 0,     /* a FETCH read on the pool */
    NODE_METRICS_POOL_AHEAD,        /* a next FETCH read ahead */
    NODE_METRICS_POOL_AHEAD_SERVED, /* a read-ahead answered its FETCH */
    NODE_METRICS_POOL_REREAD,       /* read again on the loop (stale, failed,
                                       or a claimed read-ahead that reached
                                       the end) */
    NODE_METRICS_POOL_AHEAD_NEXT,   /* the one after read ahead too (also
                                       counted as ahead) */
    NODE_METRICS__POOL
};
void node_metrics_fetch_pool(struct node_metrics *m, enum node_metrics_pool k);

/* ---- The endpoint ---------------------------------------------------------
 */

/* What the endpoint reads of the node, on the loop thread only. arg is
 * the node; the functions and pointers are borrowed for the endpoint's
 * lifetime (disk and transport are embedded in the node). */
struct node_metrics_source
{
    void *arg;
    /* OUT: raft status (zeroed but for the id when raft is not running) */
    void (*status)(void *arg, struct repl_status *out);
    /* OUT: replication latency counters (zeroed when raft is not
     * running); never resets them */
    void (*latency)(void *arg, struct repl_latency *out);
    /* OUT: out[0..n) the voters' progress on a leader (repl.h) */
    unsigned (*progress)(void *arg, struct repl_progress *out, unsigned max);
    /* The index (NULL while there is none). Borrowed for the call. */
    struct idx_env *(*idx)(void *arg);
    const struct node_disk *disk;
    const struct node_transport *transport;
};

/* Start the endpoint when cfg->metrics_listen is set (else *out = NULL
 * and 0): reads the token file, binds the address, starts the HTTP
 * thread. loop, cfg and src are borrowed until node_metrics_close. OUT:
 * *out. 0, or TERN_EINVAL (configuration: token file) or another code,
 * with errmsg. */
int node_metrics_new(uv_loop_t *loop,
                     const struct node_config *cfg,
                     const struct node_metrics_source *src,
                     struct node_metrics **out,
                     char *errmsg);
/* Stop the HTTP thread (joins it: a scrape waiting for the loop gives up
 * at once) and close the loop handles; m is freed once they are closed.
 * m may be NULL. */
void node_metrics_close(struct node_metrics *m);

#endif /* TERN_NODE_METRICS_H */
