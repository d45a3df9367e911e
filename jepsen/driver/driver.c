/*
 * tern-jepsen-driver: the Jepsen-style workload driver for tern. It drives a
 * cluster through the real libtern (<tern/tern.h>, so the library's retry
 * and leader following are under test too) and appends one JSON line per
 * event to a history file, in the format judged by jepsen/checker/checker.py
 * (documented at the top of that file; history format version 1).
 *
 * Phases (each bounded in time and count):
 *   1. setup: create the queues (retrying until --setup-timeout);
 *   2. workload, --time seconds: --producers threads each produce unique
 *      ids "<process>-<counter>" to a random queue (one message per batch,
 *      idempotent producer: each client has its own producer id, recorded
 *      as "producer" on each produce invoke; libtern retries a batch with
 *      the same producer id + sequence until --produce-timeout-ms; with
 *      --resend N a timed-out batch is then resent up to N times with
 *      tern_produce_resend, same id + sequence), at most
 *      --rate ops/s and --max-ops ops per thread; --consumers threads read
 *      every queue by offset from 0 (consumer i reads from the leader when
 *      i is even, from any server when odd);
 *      with --group 1 each consumer i instead owns consumer group "jg<i>"
 *      and alternates tern_group_fetch / tern_group_commit;
 *   3. drain: for each queue, read everything from offset 0 through the
 *      leader until --drain-quiet consecutive empty answers at the end
 *      (bounded by --drain-timeout);
 *   4. final reads: for each node, read each queue from that node alone up
 *      to the end the drain saw (bounded by --final-timeout), recorded with
 *      "complete": false when the node did not catch up.
 *
 * Retention (--max-messages M > 0): the queues are created with
 * max_messages M, drop-oldest, no max_age (docs/MESSAGES.md), and a first
 * event {"process":"driver","f":"retention","value":M} says so. A read
 * below a queue's first offset (TERN_EOFFSET) asks the node for the first
 * offset (tern_queue_info) and records "trim-skip" {"offset": where it
 * was, "first": where it goes on}; drains and final reads start at the
 * first offset and record it as "start" (asked again at the end: the
 * low watermark of that node after the read); after the final reads, each
 * node is asked for the message just below its first offset ("probe-
 * below": "served" true would be a trimmed message served).
 *
 * Work queue (--workload work-queue, docs/WORKQUEUES.md): the queues get
 * shared group "jw" (--ack-timeout-ms, --max-deliveries); producers as
 * above; each consumer receives from the group round robin over the
 * queues and settles what it got: --skip-pct left to expire, --nack-pct
 * nacked (100 ms), the rest acked ("receive" and "settle" events with
 * receipts and per-item outcomes; "retire" when a process frees its
 * client, which releases its leases). The drain receives and acks every
 * queue until it stays empty for 3 ack timeouts + 1 s, then reads the
 * dead-letter queue "<queue>-dlq-jw" ("dlq-read"); no final reads.
 *
 * Delayed (--workload delayed): producers use tern_produce_delayed with a
 * delay uniform in [--delay-min-ms, --delay-max-ms] and record the due
 * time the leader answered; consumers fetch by offset as above (with the
 * wall clock of each answer, and "append_ms": each message's append time,
 * also in drains and final reads); the drain waits until the latest
 * acknowledged due time + 2 s has passed ("delayed-wait"), then drains
 * and reads every node as above.
 *
 * Outcomes: a produce that returns 0 is "ok" (with the acknowledged
 * offset); TERN_ENOQUEUE / EBADNAME / ETOOBIG / EINVAL are "fail" (the
 * write cannot have happened); every other error (TERN_ETIMEDOUT,
 * TERN_ELEADERSHIPLOST, connection errors, ...) is "info" (outcome unknown):
 * the process is retired, its client freed, and the thread continues as a
 * new process with a new client (new producer id). Read errors are "info"
 * too and also retire the reader.
 *
 * Threads: one tern_client per thread (libtern is not thread-safe); the
 * history file is shared under a mutex and flushed per line, so a crash
 * keeps everything written so far.
 *
 * Build: see jepsen/driver/Makefile (links libtern from a build tree).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tern/tern.h>

#define DRV__MAX_NODES    9
#define DRV__MAX_QUEUES   16
#define DRV__MAX_THREADS  64
#define DRV__FETCH_MAX    200
#define DRV__READ_WAIT_MS 100

struct drv_node
{
    char name[32];
    char addr[64];
};

struct drv_opts
{
    struct drv_node nodes[DRV__MAX_NODES];
    int n_nodes;
    char servers[DRV__MAX_NODES * 64];
    const char *history;
    const char *queue_prefix;
    int queues;
    int producers;
    int consumers;
    double time_s;
    int rate;
    long max_ops;
    int request_timeout_ms;
    int produce_timeout_ms; /* producers' request timeout (0: as above) */
    int resend;             /* tern_produce_resend attempts after a timeout */
    int connect_timeout_ms;
    const char *tls_ca; /* --ca: TLS to the nodes, verified by this CA */
    const char *tls_cert;
    const char *tls_key;
    double setup_timeout_s;
    double drain_timeout_s;
    double final_timeout_s;
    int drain_quiet;
    int async_window;
    int group;             /* consumers use consumer groups */
    uint64_t max_messages; /* retention: queues keep at most this many */
    int mode;              /* DRV__MODE_*: the --workload */
    int ack_timeout_ms;    /* work-queue: the shared group's lease */
    int max_deliveries;    /* work-queue: deliveries before the DLQ */
    int skip_pct;          /* work-queue: received and left to expire */
    int nack_pct;          /* work-queue: received and nacked */
    int delay_min_ms;      /* delayed: each produce's delay, uniform in */
    int delay_max_ms;      /*   [delay_min_ms, delay_max_ms] */
};

#define DRV__MODE_QUEUE   0 /* the queue workloads (default) */
#define DRV__MODE_WQ      1 /* work-queue: one shared group, receive + ack */
#define DRV__MODE_DELAYED 2 /* delayed: tern_produce_delayed + fetches */
#define DRV__WQ_GROUP     "jw"
#define DRV__WQ_RECV_MAX  16

static struct drv_opts opts;
static char queue_names[DRV__MAX_QUEUES][64];
static FILE *hist;
static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int next_process;
static atomic_long stat_ok, stat_fail, stat_info, stat_reads, stat_resends;
static uint64_t drain_end[DRV__MAX_QUEUES];
/* The leader's commit index asked right after the drain (0: unknown). */
static uint64_t drain_commit;
/* Per queue: 1 + the highest offset any produce was acknowledged at (0:
 * none), the least end the final drain must reach. */
static uint64_t acked_end[DRV__MAX_QUEUES];
static pthread_mutex_t acked_mu = PTHREAD_MUTEX_INITIALIZER;
/* Delayed: the latest due time (ms since the epoch, leader's clock) of an
 * acknowledged delayed produce; the drain waits until it passed. */
static uint64_t max_due_ms;

static void note_acked(const char *queue, uint64_t off)
{
    if (off == UINT64_MAX) {
        return;
    }
    for (int i = 0; i < opts.queues; i++) {
        if (strcmp(queue_names[i], queue) == 0) {
            pthread_mutex_lock(&acked_mu);
            if (off + 1 > acked_end[i]) {
                acked_end[i] = off + 1;
            }
            pthread_mutex_unlock(&acked_mu);
            return;
        }
    }
}

/* ---- helpers --------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Wall clock (CLOCK_REALTIME) in ms since the epoch: the clock the
 * leader's due times are in (the nodes run on this machine). */
static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ULL + (uint64_t)ts.tv_nsec / 1000000ULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Growable string for one history line. */
struct sbuf
{
    char *p;
    size_t len, cap;
};

static void sb_reserve(struct sbuf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap) {
        return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1) {
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (p == NULL) {
        fprintf(stderr, "driver: out of memory\n");
        abort();
    }
    b->p = p;
    b->cap = cap;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b,
                                                            const char *fmt,
                                                            ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Appends s (len bytes) as a JSON string literal. */
static void sb_jstr(struct sbuf *b, const char *s, size_t len)
{
    sb_reserve(b, len * 6 + 2);
    b->p[b->len++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            b->p[b->len++] = '\\';
            b->p[b->len++] = (char)ch;
        } else if (ch < 0x20 || ch >= 0x7f) {
            b->len += (size_t)snprintf(b->p + b->len, 7, "\\u%04x", ch);
        } else {
            b->p[b->len++] = (char)ch;
        }
    }
    b->p[b->len++] = '"';
    b->p[b->len] = '\0';
}

static void sb_free(struct sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* Starts a history line: {"process":P,"type":T,"f":F,"queue":Q,
 * "time":now. Caller appends fields then calls hist_end. */
static void hist_begin(struct sbuf *b,
                       int process,
                       const char *type,
                       const char *f,
                       const char *queue)
{
    b->len = 0;
    sb_printf(b, "{\"process\":%d,\"type\":\"%s\",\"f\":\"%s\"", process, type,
              f);
    if (queue != NULL) {
        sb_printf(b, ",\"queue\":");
        sb_jstr(b, queue, strlen(queue));
    }
}

static void hist_end(struct sbuf *b)
{
    /* The time is taken under the lock so the file is in time order. */
    pthread_mutex_lock(&hist_mu);
    sb_printf(b, ",\"time\":%" PRId64 "}\n", now_ns());
    fwrite(b->p, 1, b->len, hist);
    fflush(hist);
    pthread_mutex_unlock(&hist_mu);
}

static void sb_node(struct sbuf *b, const char *addr)
{
    if (addr == NULL) {
        return;
    }
    for (int i = 0; i < opts.n_nodes; i++) {
        if (strcmp(opts.nodes[i].addr, addr) == 0) {
            sb_printf(b, ",\"node\":\"%s\"", opts.nodes[i].name);
            return;
        }
    }
    sb_printf(b, ",\"node\":");
    sb_jstr(b, addr, strlen(addr));
}

static void sb_error(struct sbuf *b, struct tern_client *c, int rv)
{
    const char *m = c != NULL ? tern_client_errmsg(c) : "";
    sb_printf(b, ",\"error\":\"%s\",\"errmsg\":", tern_err_name(rv));
    sb_jstr(b, m, strlen(m));
}

static struct tern_client *client_new_timeout(const char *servers,
                                              int read_from,
                                              int timeout_ms)
{
    struct tern_client_options o;
    struct tern_client *c = NULL;
    tern_client_options_init(&o);
    o.request_timeout_ms = timeout_ms;
    o.connect_timeout_ms = opts.connect_timeout_ms;
    o.read_from = read_from;
    if (opts.async_window > 0) {
        /* libtern's window a quarter of the calls pending, so that the
         * calls waiting behind it merge into shared batches (libtern's
         * produce_merge_bytes): merged batches are under test too. */
        int w = opts.async_window / 4;
        /* At most 32: the batches the server remembers per producer and
         * queue for a retry's original offsets. */
        o.max_in_flight = w < 1 ? 1 : w > 32 ? 32 : w;
    }
    int rv = tern_client_new(servers, &o, &c);
    if (rv != 0) {
        fprintf(stderr, "driver: tern_client_new(%s): %s\n", servers,
                tern_strerror(rv));
        abort();
    }
    if (opts.tls_ca != NULL) {
        rv = tern_client_set_tls(c, opts.tls_ca, opts.tls_cert, opts.tls_key);
        if (rv != 0) {
            fprintf(stderr, "driver: TLS: %s\n", tern_client_errmsg(c));
            abort();
        }
    }
    /* Client authentication as the CLI takes it: TERN_USER and
     * TERN_PASSWORD from the environment (SCRAM-SHA-256). */
    if (getenv("TERN_USER") != NULL && getenv("TERN_USER")[0] != '\0') {
        struct tern_auth_options ao;
        tern_auth_options_init(&ao);
        ao.mechanism = TERN_AUTH_SCRAM;
        ao.user = getenv("TERN_USER");
        ao.password = getenv("TERN_PASSWORD");
        ao.ns = getenv("TERN_NAMESPACE");
        rv = tern_client_set_auth(c, &ao);
        if (rv != 0) {
            fprintf(stderr, "driver: auth: %s\n", tern_client_errmsg(c));
            abort();
        }
    }
    return c;
}

static struct tern_client *client_new(const char *servers, int read_from)
{
    return client_new_timeout(servers, read_from, opts.request_timeout_ms);
}

/* A producer's client: --produce-timeout-ms bounds how long libtern keeps
 * retrying one batch (same producer id and sequence) before ETIMEDOUT. */
static struct tern_client *producer_new(void)
{
    return client_new_timeout(opts.servers, TERN_READ_LEADER,
                              opts.produce_timeout_ms > 0
                                  ? opts.produce_timeout_ms
                                  : opts.request_timeout_ms);
}

static int definite_failure(int rv)
{
    return rv == TERN_ENOQUEUE || rv == TERN_EBADNAME || rv == TERN_ETOOBIG ||
           rv == TERN_EINVAL;
}

/* Appends ,"value":[[off,"id"],...] of a fetch result and returns count. */
static size_t sb_pairs(struct sbuf *b,
                       const struct tern_fetch_result *r,
                       uint64_t *last_offset)
{
    size_t n = tern_fetch_result_count(r);
    sb_printf(b, ",\"value\":[");
    for (size_t i = 0; i < n; i++) {
        uint64_t off = 0;
        const void *data = NULL;
        size_t len = 0;
        tern_fetch_result_get(r, i, &off, NULL, &data, &len);
        sb_printf(b, "%s[%" PRIu64 ",", i ? "," : "", off);
        sb_jstr(b, data != NULL ? data : "", data != NULL ? len : 0);
        sb_printf(b, "]");
        if (last_offset != NULL) {
            *last_offset = off;
        }
    }
    sb_printf(b, "]");
    /* Delayed: each message's append time (the leader's clock of the entry
     * that appended it), in the order of "value". */
    if (opts.mode == DRV__MODE_DELAYED) {
        sb_printf(b, ",\"append_ms\":[");
        for (size_t i = 0; i < n; i++) {
            uint64_t ts = 0;
            tern_fetch_result_get(r, i, NULL, &ts, NULL, NULL);
            sb_printf(b, "%s%" PRIu64, i ? "," : "", ts);
        }
        sb_printf(b, "]");
    }
    return n;
}

/* ---- workers ----------------------------------------------------------- */

struct worker
{
    pthread_t th;
    int index;
    int64_t deadline;
    unsigned seed;
};

static void *producer_main(void *arg)
{
    struct worker *w = arg;
    struct sbuf b = {0};
    struct tern_client *c = producer_new();
    int proc = atomic_fetch_add(&next_process, 1);
    long counter = 0;
    int64_t period_ns = opts.rate > 0 ? 1000000000LL / opts.rate : 0;
    int64_t next_at = now_ns();

    for (long ops = 0; ops < opts.max_ops && now_ns() < w->deadline; ops++) {
        const char *q = queue_names[rand_r(&w->seed) % (unsigned)opts.queues];
        char value[64];
        struct tern_msg m;
        uint64_t off = 0;
        int resends;
        int rv;

        if (period_ns > 0) {
            int64_t wait = next_at - now_ns();
            if (wait > 0) {
                sleep_ms((int)(wait / 1000000));
            }
            next_at += period_ns;
            if (next_at < now_ns() - period_ns) {
                next_at = now_ns();
            }
        }
        snprintf(value, sizeof(value), "%d-%ld", proc, counter++);
        m.data = value;
        m.len = strlen(value);
        hist_begin(&b, proc, "invoke", "produce", q);
        sb_printf(&b, ",\"value\":\"%s\",\"producer\":\"%016" PRIx64 "\"",
                  value, tern_client_producer_id(c));
        hist_end(&b);
        rv = tern_produce(c, q, &m, 1, &off);
        /* --resend: the same batch, same producer id + sequence, after a
         * timeout (outcome unknown). TERN_ESEQUENCE then proves it was
         * never appended: a definite failure. */
        resends = 0;
        while (rv == TERN_ETIMEDOUT && resends < opts.resend) {
            resends++;
            atomic_fetch_add(&stat_resends, 1);
            rv = tern_produce_resend(c, q, &m, 1, &off);
        }
        if (rv == 0) {
            hist_begin(&b, proc, "ok", "produce", q);
            sb_printf(&b, ",\"value\":\"%s\"", value);
            if (resends > 0) {
                sb_printf(&b, ",\"resends\":%d", resends);
            }
            if (off == UINT64_MAX) {
                sb_printf(&b, ",\"offset\":null");
            } else {
                sb_printf(&b, ",\"offset\":%" PRIu64, off);
            }
            sb_node(&b, tern_client_leader(c));
            hist_end(&b);
            note_acked(q, off);
            atomic_fetch_add(&stat_ok, 1);
            continue;
        }
        hist_begin(&b, proc,
                   definite_failure(rv) || (resends > 0 && rv == TERN_ESEQUENCE)
                       ? "fail"
                       : "info",
                   "produce", q);
        sb_printf(&b, ",\"value\":\"%s\"", value);
        if (resends > 0) {
            sb_printf(&b, ",\"resends\":%d", resends);
        }
        sb_node(&b, tern_client_leader(c));
        sb_error(&b, c, rv);
        hist_end(&b);
        if (definite_failure(rv) || (resends > 0 && rv == TERN_ESEQUENCE)) {
            atomic_fetch_add(&stat_fail, 1);
            continue;
        }
        atomic_fetch_add(&stat_info, 1);
        /* Retire: the op may still take effect. */
        tern_client_free(c);
        c = producer_new();
        proc = atomic_fetch_add(&next_process, 1);
        counter = 0;
    }
    tern_client_free(c);
    sb_free(&b);
    return NULL;
}

/* Delayed producer (--workload delayed): like producer_main, but each
 * message goes through tern_produce_delayed with a delay uniform in
 * [--delay-min-ms, --delay-max-ms]. The invoke records "delay_ms" and
 * "wall_ms" (this machine's wall clock); "ok" records "due_ms", the due
 * time the leader answered (its clock), and "wall_ms". libtern resends a
 * call's batch under the same producer id and seq, so its own retries
 * never schedule a value twice (docs/WORKQUEUES.md). */
static void *delayed_producer_main(void *arg)
{
    struct worker *w = arg;
    struct sbuf b = {0};
    struct tern_client *c = producer_new();
    int proc = atomic_fetch_add(&next_process, 1);
    long counter = 0;
    int64_t period_ns = opts.rate > 0 ? 1000000000LL / opts.rate : 0;
    int64_t next_at = now_ns();
    int span = opts.delay_max_ms - opts.delay_min_ms + 1;

    for (long ops = 0; ops < opts.max_ops && now_ns() < w->deadline; ops++) {
        const char *q = queue_names[rand_r(&w->seed) % (unsigned)opts.queues];
        uint64_t delay =
            (uint64_t)opts.delay_min_ms + (uint64_t)(rand_r(&w->seed) % span);
        char value[64];
        struct tern_msg m;
        uint64_t due = 0;
        int rv;

        if (period_ns > 0) {
            int64_t wait = next_at - now_ns();
            if (wait > 0) {
                sleep_ms((int)(wait / 1000000));
            }
            next_at += period_ns;
            if (next_at < now_ns() - period_ns) {
                next_at = now_ns();
            }
        }
        (void)snprintf(value, sizeof(value), "%d-%ld", proc, counter++);
        m.data = value;
        m.len = strlen(value);
        hist_begin(&b, proc, "invoke", "produce", q);
        sb_printf(&b,
                  ",\"value\":\"%s\",\"delay_ms\":%" PRIu64
                  ",\"wall_ms\":%" PRIu64,
                  value, delay, wall_ms());
        hist_end(&b);
        rv = tern_produce_delayed(c, q, &m, 1, delay, &due);
        hist_begin(&b, proc,
                   rv == 0                ? "ok"
                   : definite_failure(rv) ? "fail"
                                          : "info",
                   "produce", q);
        sb_printf(&b, ",\"value\":\"%s\",\"wall_ms\":%" PRIu64, value,
                  wall_ms());
        if (rv == 0) {
            sb_printf(&b, ",\"due_ms\":%" PRIu64, due);
        }
        sb_node(&b, tern_client_leader(c));
        if (rv != 0) {
            sb_error(&b, c, rv);
        }
        hist_end(&b);
        if (rv == 0) {
            pthread_mutex_lock(&acked_mu);
            if (due > max_due_ms) {
                max_due_ms = due;
            }
            pthread_mutex_unlock(&acked_mu);
            atomic_fetch_add(&stat_ok, 1);
            continue;
        }
        if (definite_failure(rv)) {
            atomic_fetch_add(&stat_fail, 1);
            continue;
        }
        atomic_fetch_add(&stat_info, 1);
        tern_client_free(c);
        c = producer_new();
        proc = atomic_fetch_add(&next_process, 1);
        counter = 0;
    }
    tern_client_free(c);
    sb_free(&b);
    return NULL;
}

/* Async producer (--async-window W > 0): tern_produce_async with up to W
 * one-message calls pending per client, libtern's window W/4 batches
 * (client_new_timeout), so the calls behind it merge. Several ops of one
 * process are then concurrent; the checker's per-producer order check still
 * applies, because libtern promises that batches to one queue are appended in
 * call order (counter order). After an "info" completion the process drains its
 * client (bounded), frees it and continues as a new process. */
struct async_ctx
{
    struct sbuf b;
    struct tern_client *c;
    int proc;
    int saw_info;
};

struct async_op
{
    struct async_ctx *ctx;
    int proc;
    char value[64];
    char queue[64];
};

static void on_produce(void *arg,
                       int status,
                       uint64_t base_offset,
                       size_t count)
{
    struct async_op *op = arg;
    struct async_ctx *x = op->ctx;
    const char *type = status == 0                ? "ok"
                       : definite_failure(status) ? "fail"
                                                  : "info";
    hist_begin(&x->b, op->proc, type, "produce", op->queue);
    sb_printf(&x->b, ",\"value\":\"%s\"", op->value);
    if (status == 0) {
        if (count == 0 || base_offset == UINT64_MAX) {
            sb_printf(&x->b, ",\"offset\":null");
        } else {
            sb_printf(&x->b, ",\"offset\":%" PRIu64, base_offset);
            note_acked(op->queue, base_offset);
        }
        atomic_fetch_add(&stat_ok, 1);
    } else {
        sb_error(&x->b, x->c, status);
        if (definite_failure(status)) {
            atomic_fetch_add(&stat_fail, 1);
        } else {
            atomic_fetch_add(&stat_info, 1);
            x->saw_info = 1;
        }
    }
    sb_node(&x->b, tern_client_leader(x->c));
    hist_end(&x->b);
    free(op);
}

/* Waits (bounded) for every pending batch, then frees the client: batches
 * still pending complete with TERN_ECANCELED inside tern_client_free and
 * are logged as info. */
static void async_retire(struct async_ctx *x)
{
    int64_t until = now_ns() + 4LL * opts.request_timeout_ms * 1000000LL;
    while (tern_client_pending(x->c) > 0 && now_ns() < until) {
        if (tern_client_poll(x->c, 50) < 0) {
            sleep_ms(10);
        }
    }
    tern_client_free(x->c);
    x->c = NULL;
}

static void *async_producer_main(void *arg)
{
    struct worker *w = arg;
    struct async_ctx x = {0};
    long counter = 0;
    int64_t period_ns = opts.rate > 0 ? 1000000000LL / opts.rate : 0;
    int64_t next_at = now_ns();

    x.c = producer_new();
    x.proc = atomic_fetch_add(&next_process, 1);
    for (long ops = 0, it = 0; ops < opts.max_ops && now_ns() < w->deadline &&
                               it < 100 * opts.max_ops;
         it++) {
        int64_t wait = next_at - now_ns();
        if (wait > 0 || tern_client_pending(x.c) >= (size_t)opts.async_window) {
            int ms = wait > 0 ? (int)(wait / 1000000) + 1 : 20;
            if (tern_client_poll(x.c, ms) < 0) {
                sleep_ms(5);
            }
        } else {
            const char *q =
                queue_names[rand_r(&w->seed) % (unsigned)opts.queues];
            struct async_op *op = calloc(1, sizeof(*op));
            struct tern_msg m;
            int rv;
            if (op == NULL) {
                abort();
            }
            op->ctx = &x;
            op->proc = x.proc;
            snprintf(op->value, sizeof(op->value), "%d-%ld", x.proc, counter++);
            snprintf(op->queue, sizeof(op->queue), "%s", q);
            m.data = op->value;
            m.len = strlen(op->value);
            hist_begin(&x.b, x.proc, "invoke", "produce", q);
            sb_printf(&x.b, ",\"value\":\"%s\",\"producer\":\"%016" PRIx64 "\"",
                      op->value, tern_client_producer_id(x.c));
            hist_end(&x.b);
            rv = tern_produce_async(x.c, q, &m, 1, on_produce, op);
            if (rv != 0) {
                /* Not queued: the callback never fires, nothing sent. */
                hist_begin(&x.b, x.proc, "fail", "produce", q);
                sb_printf(&x.b, ",\"value\":\"%s\"", op->value);
                sb_error(&x.b, x.c, rv);
                hist_end(&x.b);
                free(op);
            }
            ops++;
            next_at += period_ns;
            if (next_at < now_ns() - period_ns) {
                next_at = now_ns();
            }
            tern_client_poll(x.c, 0);
        }
        if (x.saw_info) {
            async_retire(&x);
            x.c = producer_new();
            x.proc = atomic_fetch_add(&next_process, 1);
            x.saw_info = 0;
            counter = 0;
        }
    }
    async_retire(&x);
    sb_free(&x.b);
    return NULL;
}

/* The queue's first offset as c's server sees it (UINT64_MAX: unknown). */
static uint64_t first_offset(struct tern_client *c, const char *q)
{
    struct tern_queue_info *qi = NULL;
    uint64_t f = UINT64_MAX;
    if (tern_queue_info(c, q, &qi) == 0) {
        f = tern_queue_info_start_offset(qi);
        tern_queue_info_free(qi);
    }
    return f;
}

static void *consumer_main(void *arg)
{
    struct worker *w = arg;
    struct sbuf b = {0};
    int read_from = (w->index % 2 == 0) ? TERN_READ_LEADER : TERN_READ_ANY;
    struct tern_client *c = client_new(opts.servers, read_from);
    int proc = atomic_fetch_add(&next_process, 1);
    uint64_t cursor[DRV__MAX_QUEUES] = {0};

    for (long ops = 0; ops < 10 * opts.max_ops && now_ns() < w->deadline;
         ops++) {
        int qi = (int)(ops % opts.queues);
        const char *q = queue_names[qi];
        struct tern_fetch_result *r = NULL;
        int rv;

        hist_begin(&b, proc, "invoke", "fetch", q);
        sb_printf(&b, ",\"offset\":%" PRIu64, cursor[qi]);
        hist_end(&b);
        rv = tern_fetch(c, q, cursor[qi], DRV__FETCH_MAX, 1u << 20,
                        DRV__READ_WAIT_MS, &r);
        if (rv == 0) {
            hist_begin(&b, proc, "ok", "fetch", q);
            sb_printf(&b,
                      ",\"offset\":%" PRIu64 ",\"end\":%" PRIu64
                      ",\"read_from\":\"%s\"",
                      cursor[qi], tern_fetch_result_end_offset(r),
                      read_from == TERN_READ_LEADER ? "leader" : "any");
            if (opts.mode == DRV__MODE_DELAYED) {
                sb_printf(&b, ",\"wall_ms\":%" PRIu64, wall_ms());
            }
            sb_pairs(&b, r, NULL);
            if (read_from == TERN_READ_LEADER) {
                sb_node(&b, tern_client_leader(c));
            }
            hist_end(&b);
            if (tern_fetch_result_count(r) > 0) {
                cursor[qi] = tern_fetch_result_next_offset(r);
            }
            tern_fetch_result_free(r);
            atomic_fetch_add(&stat_reads, 1);
            continue;
        }
        if (rv == TERN_EOFFSET && opts.max_messages > 0) {
            uint64_t f = first_offset(c, q);
            if (f != UINT64_MAX && f > cursor[qi]) {
                hist_begin(&b, proc, "ok", "trim-skip", q);
                sb_printf(&b, ",\"offset\":%" PRIu64 ",\"first\":%" PRIu64,
                          cursor[qi], f);
                hist_end(&b);
                cursor[qi] = f;
                continue;
            }
        }
        hist_begin(&b, proc, "info", "fetch", q);
        sb_printf(&b, ",\"offset\":%" PRIu64 ",\"read_from\":\"%s\"",
                  cursor[qi], read_from == TERN_READ_LEADER ? "leader" : "any");
        sb_error(&b, c, rv);
        hist_end(&b);
        tern_client_free(c);
        c = client_new(opts.servers, read_from);
        proc = atomic_fetch_add(&next_process, 1);
        sleep_ms(50);
    }
    tern_client_free(c);
    sb_free(&b);
    return NULL;
}

/* Consumer-group consumer (--group 1): consumer i owns group "jg<i>"
 * alone (so its commits only grow and the checker's group_regression rule
 * is sound) and, round robin over the queues, reads from the group's
 * committed offset (tern_group_fetch) and commits the offset after what it
 * read (tern_group_commit). Any error is "info" and retires the process
 * (the group lives on the server and continues with the next process). */
static void *group_consumer_main(void *arg)
{
    struct worker *w = arg;
    struct sbuf b = {0};
    struct tern_client *c = client_new(opts.servers, TERN_READ_LEADER);
    int proc = atomic_fetch_add(&next_process, 1);
    char group[32];

    snprintf(group, sizeof(group), "jg%d", w->index);
    for (long ops = 0; ops < 10 * opts.max_ops && now_ns() < w->deadline;
         ops++) {
        const char *q = queue_names[ops % opts.queues];
        struct tern_fetch_result *r = NULL;
        uint64_t next = 0, first = 0;
        size_t n;
        int rv;

        hist_begin(&b, proc, "invoke", "group-fetch", q);
        sb_printf(&b, ",\"group\":\"%s\"", group);
        hist_end(&b);
        rv = tern_group_fetch(c, q, group, DRV__FETCH_MAX, 1u << 20,
                              DRV__READ_WAIT_MS, &r);
        if (rv == 0) {
            n = tern_fetch_result_count(r);
            next = tern_fetch_result_next_offset(r);
            hist_begin(&b, proc, "ok", "group-fetch", q);
            sb_printf(&b, ",\"group\":\"%s\",\"end\":%" PRIu64, group,
                      tern_fetch_result_end_offset(r));
            if (n > 0 &&
                tern_fetch_result_get(r, 0, &first, NULL, NULL, NULL) == 0) {
                sb_printf(&b, ",\"start\":%" PRIu64, first);
            }
            sb_pairs(&b, r, NULL);
            sb_node(&b, tern_client_leader(c));
            hist_end(&b);
            tern_fetch_result_free(r);
            atomic_fetch_add(&stat_reads, 1);
            if (n == 0) {
                continue;
            }
            hist_begin(&b, proc, "invoke", "group-commit", q);
            sb_printf(&b, ",\"group\":\"%s\",\"offset\":%" PRIu64, group, next);
            hist_end(&b);
            rv = tern_group_commit(c, q, group, next);
            hist_begin(&b, proc, rv == 0 ? "ok" : "info", "group-commit", q);
            sb_printf(&b, ",\"group\":\"%s\",\"offset\":%" PRIu64, group, next);
            if (rv != 0) {
                sb_error(&b, c, rv);
            }
            hist_end(&b);
            if (rv == 0) {
                continue;
            }
        } else {
            hist_begin(&b, proc, "info", "group-fetch", q);
            sb_printf(&b, ",\"group\":\"%s\"", group);
            sb_error(&b, c, rv);
            hist_end(&b);
        }
        tern_client_free(c);
        c = client_new(opts.servers, TERN_READ_LEADER);
        proc = atomic_fetch_add(&next_process, 1);
        sleep_ms(50);
    }
    tern_client_free(c);
    sb_free(&b);
    return NULL;
}

/* ---- setup, drain and final reads ------------------------------------- */

static int setup_queues(void)
{
    struct sbuf b = {0};
    int64_t deadline = now_ns() + (int64_t)(opts.setup_timeout_s * 1e9);
    int ok = 1;
    for (int i = 0; i < opts.queues; i++) {
        int rv = -1;
        while (now_ns() < deadline) {
            struct tern_client *c = client_new(opts.servers, TERN_READ_LEADER);
            int proc = atomic_fetch_add(&next_process, 1);
            hist_begin(&b, proc, "invoke", "create-queue", queue_names[i]);
            hist_end(&b);
            if (opts.max_messages > 0) {
                struct tern_queue_options qo;
                tern_queue_options_init(&qo);
                qo.max_messages = opts.max_messages;
                qo.max_age_ms = 0;
                qo.overflow = TERN_OVERFLOW_DROP_OLDEST;
                rv = tern_queue_create_opts(c, queue_names[i], &qo);
            } else {
                rv = tern_queue_create(c, queue_names[i]);
            }
            if (rv == TERN_EQUEUEEXISTS) {
                rv = 0;
            }
            hist_begin(&b, proc, rv == 0 ? "ok" : "info", "create-queue",
                       queue_names[i]);
            if (rv != 0) {
                sb_error(&b, c, rv);
            }
            hist_end(&b);
            if (rv != 0) {
                fprintf(stderr, "driver: create %s: %s (%s)\n", queue_names[i],
                        tern_err_name(rv), tern_client_errmsg(c));
            }
            tern_client_free(c);
            if (rv == 0) {
                break;
            }
            sleep_ms(200);
        }
        if (rv != 0) {
            ok = 0;
        }
    }
    sb_free(&b);
    return ok ? 0 : -1;
}

/* Reads queue q from offset 0 up to its end with client c, writing one
 * event (f, "complete") at the end. Complete when `quiet` fetches in a row
 * returned nothing at the end and the offset reached target (the drain:
 * 1 + the highest acknowledged offset, so a lagging server cannot end it
 * early; a node's final read: the end the drain reached). Returns the end
 * offset reached. */
static uint64_t read_all(const char *f,
                         const char *q,
                         const char *servers,
                         int read_from,
                         const char *node,
                         uint64_t target,
                         int quiet,
                         double timeout_s,
                         int *complete)
{
    int64_t deadline = now_ns() + (int64_t)(timeout_s * 1e9);
    struct sbuf pairs = {0};
    struct sbuf appends = {0};
    struct sbuf b = {0};
    struct tern_client *c = client_new(servers, read_from);
    int proc = atomic_fetch_add(&next_process, 1);
    uint64_t off = 0;
    int empty_in_row = 0;
    size_t n_pairs = 0;
    long errors = 0;

    *complete = 0;
    hist_begin(&b, proc, "invoke", f, q);
    if (node != NULL) {
        sb_printf(&b, ",\"node\":\"%s\"", node);
    }
    if (opts.mode == DRV__MODE_DELAYED) {
        sb_printf(&b, ",\"wall_ms\":%" PRIu64, wall_ms());
    }
    hist_end(&b);
    sb_printf(&pairs, "%s", "");
    for (long it = 0; it < 1000000 && now_ns() < deadline; it++) {
        struct tern_fetch_result *r = NULL;
        int rv = tern_fetch(c, q, off, DRV__FETCH_MAX, 1u << 20,
                            DRV__READ_WAIT_MS, &r);
        if (rv == TERN_EOFFSET && opts.max_messages > 0) {
            uint64_t f = first_offset(c, q);
            if (f != UINT64_MAX && f > off) {
                off = f; /* retention trimmed below it */
                continue;
            }
        }
        if (rv == TERN_ENOQUEUE && strcmp(f, "dlq-read") == 0) {
            *complete = 1; /* no dead letter ever created the DLQ */
            break;
        }
        if (rv != 0) {
            errors++;
            tern_client_free(c);
            c = client_new(servers, read_from);
            sleep_ms(100);
            continue;
        }
        size_t n = tern_fetch_result_count(r);
        uint64_t end = tern_fetch_result_end_offset(r);
        for (size_t i = 0; i < n; i++) {
            uint64_t o = 0, ts = 0;
            const void *data = NULL;
            size_t len = 0;
            tern_fetch_result_get(r, i, &o, &ts, &data, &len);
            sb_printf(&appends, "%s%" PRIu64, n_pairs ? "," : "", ts);
            sb_printf(&pairs, "%s[%" PRIu64 ",", n_pairs ? "," : "", o);
            sb_jstr(&pairs, data != NULL ? data : "", data ? len : 0);
            sb_printf(&pairs, "]");
            n_pairs++;
        }
        if (n > 0) {
            off = tern_fetch_result_next_offset(r);
            empty_in_row = 0;
        } else if (off >= end) {
            empty_in_row++;
        }
        tern_fetch_result_free(r);
        /* Complete: caught up with the end (and, for a node's final read,
         * at or past the end the drain saw), `quiet` times in a row. */
        if (empty_in_row >= quiet && off >= target) {
            *complete = 1;
            break;
        }
        if (n == 0) {
            sleep_ms(100);
        }
    }
    /* Why a read is incomplete: the node's own view (applied index) next
     * to the leader's commit index seen after the drain. */
    uint64_t start = opts.max_messages > 0 ? first_offset(c, q) : 0;
    uint64_t node_applied = 0;
    int have_status = 0;
    if (!*complete && node != NULL) {
        struct tern_status *st = NULL;
        if (tern_cluster_status(c, servers, &st) == 0) {
            node_applied = tern_status_last_applied(st);
            have_status = 1;
            tern_status_free(st);
        }
    }
    tern_client_free(c);
    /* An incomplete drain is still the final view through the leader:
     * recorded as "ok" with "complete": false so that acknowledged
     * messages it lacks are judged lost (an incomplete final-read of one
     * node is "fail": that node is not judged). */
    hist_begin(&b, proc, *complete || strcmp(f, "drain") == 0 ? "ok" : "fail",
               f, q);
    if (node != NULL) {
        sb_printf(&b, ",\"node\":\"%s\"", node);
    }
    sb_printf(&b, ",\"complete\":%s,\"end\":%" PRIu64 ",\"errors\":%ld",
              *complete ? "true" : "false", off, errors);
    if (opts.max_messages > 0 && start != UINT64_MAX) {
        sb_printf(&b, ",\"start\":%" PRIu64, start);
    }
    if (have_status) {
        sb_printf(&b,
                  ",\"node_applied\":%" PRIu64 ",\"leader_commit\":%" PRIu64,
                  node_applied, drain_commit);
    }
    sb_printf(&b, ",\"value\":[%s]", pairs.p != NULL ? pairs.p : "");
    if (opts.mode == DRV__MODE_DELAYED) {
        sb_printf(&b, ",\"append_ms\":[%s]",
                  appends.p != NULL ? appends.p : "");
    }
    hist_end(&b);
    sb_free(&b);
    sb_free(&pairs);
    sb_free(&appends);
    return off;
}

/* ---- work-queue ------------------------------------------------------- */

/* Appends ,"value":[[offset,"id",count],...] of a tern_receive result. */
static void sb_receipts(struct sbuf *b, const struct tern_fetch_result *r)
{
    size_t n = tern_fetch_result_count(r);
    sb_printf(b, ",\"value\":[");
    for (size_t i = 0; i < n; i++) {
        struct tern_receipt rc = {0, 0};
        const void *data = NULL;
        size_t len = 0;
        tern_fetch_result_get(r, i, NULL, NULL, &data, &len);
        tern_fetch_result_receipt(r, i, &rc);
        sb_printf(b, "%s[%" PRIu64 ",", i ? "," : "", rc.offset);
        sb_jstr(b, data != NULL ? data : "", data != NULL ? len : 0);
        sb_printf(b, ",%" PRIu32 "]", rc.count);
    }
    sb_printf(b, "]");
}

static const char *settle_action_name(int action)
{
    switch (action) {
    case TERN_SETTLE_ACK:
        return "ack";
    case TERN_SETTLE_NACK:
        return "nack";
    case TERN_SETTLE_EXTEND:
        return "extend";
    default:
        return "release";
    }
}

/* One receive and the settle of what it got, as process proc of client c
 * on queue q: events "receive" (invoke; ok with [offset, id, count] per
 * message) and "settle" (invoke with [offset, count, action, id] per item;
 * ok with the outcome "ok" / "stale" appended to each item, or fail / info
 * with every item "failed" / "info"). skip_pct and nack_pct of the
 * messages are left to expire or nacked instead of acked. *got (OUT) is
 * the number of messages received. Returns 0, or the error that ends the
 * process (the caller retires the client). */
static int wq_round(struct tern_client *c,
                    int proc,
                    const char *q,
                    uint32_t wait_ms,
                    int skip_pct,
                    int nack_pct,
                    unsigned *seed,
                    struct sbuf *b,
                    size_t *got)
{
    struct tern_fetch_result *r = NULL;
    struct tern_settle_item items[DRV__WQ_RECV_MAX * 4];
    char ids[DRV__WQ_RECV_MAX * 4][64];
    size_t n, k = 0;
    int rv;

    *got = 0;
    hist_begin(b, proc, "invoke", "receive", q);
    sb_printf(b, ",\"group\":\"%s\"", DRV__WQ_GROUP);
    hist_end(b);
    rv = tern_receive(c, q, DRV__WQ_GROUP, DRV__WQ_RECV_MAX, wait_ms, &r);
    if (rv != 0) {
        hist_begin(b, proc, definite_failure(rv) ? "fail" : "info", "receive",
                   q);
        sb_printf(b, ",\"group\":\"%s\"", DRV__WQ_GROUP);
        sb_error(b, c, rv);
        hist_end(b);
        return rv;
    }
    n = tern_fetch_result_count(r);
    hist_begin(b, proc, "ok", "receive", q);
    sb_printf(b, ",\"group\":\"%s\"", DRV__WQ_GROUP);
    sb_receipts(b, r);
    sb_node(b, tern_client_leader(c));
    hist_end(b);
    atomic_fetch_add(&stat_reads, 1);
    *got = n;
    for (size_t i = 0; i < n && k < DRV__WQ_RECV_MAX * 4; i++) {
        struct tern_receipt rc = {0, 0};
        const void *data = NULL;
        size_t len = 0;
        int roll = (int)(rand_r(seed) % 100);
        if (roll < skip_pct) {
            continue; /* left to expire: redelivered after ack_timeout */
        }
        tern_fetch_result_get(r, i, NULL, NULL, &data, &len);
        tern_fetch_result_receipt(r, i, &rc);
        (void)snprintf(ids[k], sizeof(ids[k]), "%.*s",
                       (int)(len < 63 ? len : 63),
                       data != NULL ? (const char *)data : "");
        memset(&items[k], 0, sizeof(items[k]));
        items[k].receipt = rc;
        items[k].action =
            roll < skip_pct + nack_pct ? TERN_SETTLE_NACK : TERN_SETTLE_ACK;
        items[k].delay_ms = items[k].action == TERN_SETTLE_NACK ? 100 : 0;
        k++;
    }
    tern_fetch_result_free(r);
    if (k == 0) {
        return 0;
    }
    /* Receipts in increasing offset order (tern_settle's contract). */
    for (size_t i = 1; i < k; i++) {
        for (size_t j = i;
             j > 0 && items[j].receipt.offset < items[j - 1].receipt.offset;
             j--) {
            struct tern_settle_item t = items[j];
            char tid[64];
            items[j] = items[j - 1];
            items[j - 1] = t;
            memcpy(tid, ids[j], sizeof(tid));
            memcpy(ids[j], ids[j - 1], sizeof(tid));
            memcpy(ids[j - 1], tid, sizeof(tid));
        }
    }
    hist_begin(b, proc, "invoke", "settle", q);
    sb_printf(b, ",\"group\":\"%s\",\"value\":[", DRV__WQ_GROUP);
    for (size_t i = 0; i < k; i++) {
        sb_printf(b, "%s[%" PRIu64 ",%" PRIu32 ",\"%s\",", i ? "," : "",
                  items[i].receipt.offset, items[i].receipt.count,
                  settle_action_name(items[i].action));
        sb_jstr(b, ids[i], strlen(ids[i]));
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
    hist_end(b);
    rv = tern_settle(c, q, DRV__WQ_GROUP, items, k);
    hist_begin(b, proc,
               rv == 0                ? "ok"
               : definite_failure(rv) ? "fail"
                                      : "info",
               "settle", q);
    sb_printf(b, ",\"group\":\"%s\",\"value\":[", DRV__WQ_GROUP);
    for (size_t i = 0; i < k; i++) {
        const char *out = rv == 0 ? (items[i].done ? "ok" : "stale")
                          : definite_failure(rv) ? "failed"
                                                 : "info";
        sb_printf(b, "%s[%" PRIu64 ",%" PRIu32 ",\"%s\",", i ? "," : "",
                  items[i].receipt.offset, items[i].receipt.count,
                  settle_action_name(items[i].action));
        sb_jstr(b, ids[i], strlen(ids[i]));
        sb_printf(b, ",\"%s\"]", out);
    }
    sb_printf(b, "]");
    sb_node(b, tern_client_leader(c));
    if (rv != 0) {
        sb_error(b, c, rv);
    }
    hist_end(b);
    return rv;
}

/* Records that process proc frees its client now (the leader releases the
 * leases of a consumer whose connection closes: a "release" duplicate). */
static void wq_retire(struct sbuf *b, int proc)
{
    hist_begin(b, proc, "info", "retire", NULL);
    hist_end(b);
}

/* Work-queue consumer (--workload work-queue): round robin over the
 * queues, receives from shared group DRV__WQ_GROUP and settles what it
 * got. Any error retires the process (its client is freed, so the leader
 * releases its leases) and the thread goes on as a new process with a new
 * client, i.e. a new consumer id. */
static void *wq_consumer_main(void *arg)
{
    struct worker *w = arg;
    struct sbuf b = {0};
    struct tern_client *c = client_new(opts.servers, TERN_READ_LEADER);
    int proc = atomic_fetch_add(&next_process, 1);

    for (long ops = 0; ops < 10 * opts.max_ops && now_ns() < w->deadline;
         ops++) {
        size_t got = 0;
        int rv =
            wq_round(c, proc, queue_names[ops % opts.queues], DRV__READ_WAIT_MS,
                     opts.skip_pct, opts.nack_pct, &w->seed, &b, &got);
        if (rv == 0) {
            continue;
        }
        wq_retire(&b, proc);
        tern_client_free(c);
        c = client_new(opts.servers, TERN_READ_LEADER);
        proc = atomic_fetch_add(&next_process, 1);
        sleep_ms(50);
    }
    wq_retire(&b, proc);
    tern_client_free(c);
    sb_free(&b);
    return NULL;
}

/* Creates shared group DRV__WQ_GROUP on every queue (ack timeout and max
 * deliveries from the options), retrying until --setup-timeout. */
static int setup_shared(void)
{
    struct sbuf b = {0};
    int64_t deadline = now_ns() + (int64_t)(opts.setup_timeout_s * 1e9);
    int ok = 1;
    for (int i = 0; i < opts.queues; i++) {
        int rv = -1;
        while (now_ns() < deadline) {
            struct tern_client *c = client_new(opts.servers, TERN_READ_LEADER);
            struct tern_shared_options so;
            int proc = atomic_fetch_add(&next_process, 1);
            memset(&so, 0, sizeof(so));
            so.ack_timeout_ms = (uint64_t)opts.ack_timeout_ms;
            so.max_deliveries = (uint32_t)opts.max_deliveries;
            hist_begin(&b, proc, "invoke", "shared-config", queue_names[i]);
            sb_printf(&b,
                      ",\"group\":\"%s\",\"ack_timeout_ms\":%d,"
                      "\"max_deliveries\":%d",
                      DRV__WQ_GROUP, opts.ack_timeout_ms, opts.max_deliveries);
            hist_end(&b);
            rv = tern_shared_config(c, queue_names[i], DRV__WQ_GROUP, &so);
            hist_begin(&b, proc, rv == 0 ? "ok" : "info", "shared-config",
                       queue_names[i]);
            sb_printf(&b, ",\"group\":\"%s\"", DRV__WQ_GROUP);
            if (rv != 0) {
                sb_error(&b, c, rv);
                (void)fprintf(stderr, "driver: shared config %s: %s (%s)\n",
                              queue_names[i], tern_err_name(rv),
                              tern_client_errmsg(c));
            }
            hist_end(&b);
            tern_client_free(c);
            if (rv == 0) {
                break;
            }
            sleep_ms(200);
        }
        if (rv != 0) {
            ok = 0;
        }
    }
    sb_free(&b);
    return ok ? 0 : -1;
}

/* The work-queue drain of queue qi: receives and acks everything (no skip,
 * no nack) until nothing came for 3 ack timeouts + 1 s (leases a
 * vanished consumer held must expire first), bounded by timeout_s; then a
 * "wq-drain" event with "complete". Returns 1 when complete. */
static int wq_drain(int qi, double timeout_s)
{
    const char *q = queue_names[qi];
    int64_t deadline = now_ns() + (int64_t)(timeout_s * 1e9);
    int64_t quiet_ns = (3LL * opts.ack_timeout_ms + 1000) * 1000000LL;
    int64_t last_got = now_ns();
    struct tern_client *c = client_new(opts.servers, TERN_READ_LEADER);
    int proc = atomic_fetch_add(&next_process, 1);
    struct sbuf b = {0};
    unsigned seed = 1;
    int complete = 0;
    long errors = 0;

    for (long it = 0; it < 1000000 && now_ns() < deadline; it++) {
        size_t got = 0;
        int rv = wq_round(c, proc, q, 500, 0, 0, &seed, &b, &got);
        if (rv != 0) {
            errors++;
            wq_retire(&b, proc);
            tern_client_free(c);
            c = client_new(opts.servers, TERN_READ_LEADER);
            proc = atomic_fetch_add(&next_process, 1);
            sleep_ms(100);
            continue;
        }
        if (got > 0) {
            last_got = now_ns();
        } else if (now_ns() - last_got >= quiet_ns) {
            complete = 1;
            break;
        }
    }
    wq_retire(&b, proc);
    tern_client_free(c);
    hist_begin(&b, proc, "ok", "wq-drain", q);
    sb_printf(&b, ",\"group\":\"%s\",\"complete\":%s,\"errors\":%ld",
              DRV__WQ_GROUP, complete ? "true" : "false", errors);
    hist_end(&b);
    sb_free(&b);
    return complete;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: tern-jepsen-driver --nodes n1=H:P,n2=H:P,... --history F\n"
            "  [--queues K=1] [--queue-prefix jq] [--producers 4]\n"
            "  [--consumers 2] [--time S=30] [--rate OPS_PER_S=50]\n"
            "  [--max-ops N=100000] [--request-timeout-ms 2000]\n"
            "  [--produce-timeout-ms MS (producers; default: as request)]\n"
            "  [--resend N (after a produce timeout, tern_produce_resend up "
            "to N times)]\n"
            "  [--connect-timeout-ms 500] [--setup-timeout S=30]\n"
            "  [--drain-timeout S=60] [--drain-quiet 3]\n"
            "  [--final-timeout S=30] [--async-window W=0 (sync)]\n"
            "  [--group 0|1 (consumers use consumer groups jg<i>)]\n"
            "  [--max-messages M (retention: queues keep at most M, "
            "drop-oldest)]\n"
            "  [--workload queue|work-queue|delayed]\n"
            "  [--ack-timeout-ms 2000] [--max-deliveries 1000]\n"
            "  [--skip-pct 5] [--nack-pct 5] (work-queue)\n"
            "  [--delay-min-ms 500] [--delay-max-ms 5000] (delayed)\n"
            "  [--ca FILE (TLS, servers verified by FILE) [--cert F --key "
            "F]]\n"
            "environment: TERN_USER, TERN_PASSWORD, TERN_NAMESPACE (log in\n"
            "      with SCRAM-SHA-256, as the CLI)\n"
            "exit: 0 done (drain complete), 1 drain or setup incomplete,\n"
            "      2 usage\n");
}

static int parse_nodes(const char *s)
{
    char *dup = strdup(s), *save = NULL;
    size_t used = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL || opts.n_nodes >= DRV__MAX_NODES) {
            free(dup);
            return -1;
        }
        *eq = '\0';
        struct drv_node *n = &opts.nodes[opts.n_nodes++];
        snprintf(n->name, sizeof(n->name), "%s", tok);
        snprintf(n->addr, sizeof(n->addr), "%s", eq + 1);
        used +=
            (size_t)snprintf(opts.servers + used, sizeof(opts.servers) - used,
                             "%s%s", used ? "," : "", n->addr);
    }
    free(dup);
    return opts.n_nodes > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct worker workers[DRV__MAX_THREADS];
    int n_workers = 0;
    int rc = 0;

    opts.queue_prefix = "jq";
    opts.queues = 1;
    opts.producers = 4;
    opts.consumers = 2;
    opts.time_s = 30;
    opts.rate = 50;
    opts.max_ops = 100000;
    opts.request_timeout_ms = 2000;
    opts.connect_timeout_ms = 500;
    opts.setup_timeout_s = 30;
    opts.drain_timeout_s = 60;
    opts.final_timeout_s = 30;
    opts.drain_quiet = 3;
    opts.async_window = 0;
    opts.ack_timeout_ms = 2000;
    opts.max_deliveries = 1000;
    opts.skip_pct = 5;
    opts.nack_pct = 5;
    opts.delay_min_ms = 500;
    opts.delay_max_ms = 5000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            usage();
            return 0;
        }
        if (v == NULL) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--nodes") == 0) {
            if (parse_nodes(v) != 0) {
                usage();
                return 2;
            }
        } else if (strcmp(a, "--history") == 0) {
            opts.history = v;
        } else if (strcmp(a, "--queue-prefix") == 0) {
            opts.queue_prefix = v;
        } else if (strcmp(a, "--queues") == 0) {
            opts.queues = atoi(v);
        } else if (strcmp(a, "--producers") == 0) {
            opts.producers = atoi(v);
        } else if (strcmp(a, "--consumers") == 0) {
            opts.consumers = atoi(v);
        } else if (strcmp(a, "--time") == 0) {
            opts.time_s = atof(v);
        } else if (strcmp(a, "--rate") == 0) {
            opts.rate = atoi(v);
        } else if (strcmp(a, "--max-ops") == 0) {
            opts.max_ops = atol(v);
        } else if (strcmp(a, "--request-timeout-ms") == 0) {
            opts.request_timeout_ms = atoi(v);
        } else if (strcmp(a, "--produce-timeout-ms") == 0) {
            opts.produce_timeout_ms = atoi(v);
        } else if (strcmp(a, "--resend") == 0) {
            opts.resend = atoi(v);
        } else if (strcmp(a, "--ca") == 0) {
            opts.tls_ca = v;
        } else if (strcmp(a, "--cert") == 0) {
            opts.tls_cert = v;
        } else if (strcmp(a, "--key") == 0) {
            opts.tls_key = v;
        } else if (strcmp(a, "--connect-timeout-ms") == 0) {
            opts.connect_timeout_ms = atoi(v);
        } else if (strcmp(a, "--setup-timeout") == 0) {
            opts.setup_timeout_s = atof(v);
        } else if (strcmp(a, "--drain-timeout") == 0) {
            opts.drain_timeout_s = atof(v);
        } else if (strcmp(a, "--drain-quiet") == 0) {
            opts.drain_quiet = atoi(v);
        } else if (strcmp(a, "--max-messages") == 0) {
            opts.max_messages = strtoull(v, NULL, 10);
        } else if (strcmp(a, "--workload") == 0) {
            if (strcmp(v, "queue") == 0) {
                opts.mode = DRV__MODE_QUEUE;
            } else if (strcmp(v, "work-queue") == 0) {
                opts.mode = DRV__MODE_WQ;
            } else if (strcmp(v, "delayed") == 0) {
                opts.mode = DRV__MODE_DELAYED;
            } else {
                usage();
                return 2;
            }
        } else if (strcmp(a, "--ack-timeout-ms") == 0) {
            opts.ack_timeout_ms = atoi(v);
        } else if (strcmp(a, "--max-deliveries") == 0) {
            opts.max_deliveries = atoi(v);
        } else if (strcmp(a, "--skip-pct") == 0) {
            opts.skip_pct = atoi(v);
        } else if (strcmp(a, "--nack-pct") == 0) {
            opts.nack_pct = atoi(v);
        } else if (strcmp(a, "--delay-min-ms") == 0) {
            opts.delay_min_ms = atoi(v);
        } else if (strcmp(a, "--delay-max-ms") == 0) {
            opts.delay_max_ms = atoi(v);
        } else if (strcmp(a, "--group") == 0) {
            opts.group = atoi(v);
        } else if (strcmp(a, "--async-window") == 0) {
            opts.async_window = atoi(v);
        } else if (strcmp(a, "--final-timeout") == 0) {
            opts.final_timeout_s = atof(v);
        } else {
            usage();
            return 2;
        }
    }
    if (opts.n_nodes == 0 || opts.history == NULL || opts.queues < 1 ||
        opts.queues > DRV__MAX_QUEUES || opts.producers < 0 ||
        opts.consumers < 0 ||
        opts.producers + opts.consumers > DRV__MAX_THREADS ||
        opts.time_s <= 0 || opts.max_ops < 1 || opts.drain_quiet < 1 ||
        opts.ack_timeout_ms < 1 || opts.max_deliveries < 1 ||
        opts.skip_pct < 0 || opts.nack_pct < 0 ||
        opts.skip_pct + opts.nack_pct > 100 || opts.delay_min_ms < 0 ||
        opts.delay_max_ms < opts.delay_min_ms) {
        usage();
        return 2;
    }
    for (int i = 0; i < opts.queues; i++) {
        snprintf(queue_names[i], sizeof(queue_names[i]), "%s%d",
                 opts.queue_prefix, i);
    }
    hist = fopen(opts.history, "a");
    if (hist == NULL) {
        fprintf(stderr, "driver: %s: %s\n", opts.history, strerror(errno));
        return 2;
    }

    if (opts.max_messages > 0) {
        struct sbuf b = {0};
        hist_begin(&b, -1, "info", "retention", NULL);
        sb_printf(&b, ",\"value\":%" PRIu64, opts.max_messages);
        hist_end(&b);
        sb_free(&b);
    }
    if (opts.mode != DRV__MODE_QUEUE) {
        struct sbuf b = {0};
        hist_begin(&b, -1, "info", "workload", NULL);
        sb_printf(&b, ",\"value\":\"%s\"",
                  opts.mode == DRV__MODE_WQ ? "work-queue" : "delayed");
        if (opts.mode == DRV__MODE_WQ) {
            sb_printf(&b,
                      ",\"group\":\"%s\",\"ack_timeout_ms\":%d,"
                      "\"max_deliveries\":%d",
                      DRV__WQ_GROUP, opts.ack_timeout_ms, opts.max_deliveries);
        }
        hist_end(&b);
        sb_free(&b);
    }
    if (setup_queues() != 0 ||
        (opts.mode == DRV__MODE_WQ && setup_shared() != 0)) {
        fprintf(stderr, "driver: queue setup did not complete\n");
        fclose(hist);
        return 1;
    }
    fprintf(stderr, "driver: queues ready, workload for %.1f s\n", opts.time_s);

    int64_t deadline = now_ns() + (int64_t)(opts.time_s * 1e9);
    for (int i = 0; i < opts.producers + opts.consumers; i++) {
        struct worker *w = &workers[n_workers];
        w->index = i < opts.producers ? i : i - opts.producers;
        w->deadline = deadline;
        w->seed = (unsigned)(now_ns() ^ (i * 7919));
        if (pthread_create(&w->th, NULL,
                           i >= opts.producers
                               ? (opts.mode == DRV__MODE_WQ ? wq_consumer_main
                                  : opts.group ? group_consumer_main
                                               : consumer_main)
                           : opts.mode == DRV__MODE_DELAYED
                               ? delayed_producer_main
                           : opts.async_window > 0 ? async_producer_main
                                                   : producer_main,
                           w) != 0) {
            fprintf(stderr, "driver: pthread_create failed\n");
            abort();
        }
        n_workers++;
    }
    for (int i = 0; i < n_workers; i++) {
        pthread_join(workers[i].th, NULL);
    }
    fprintf(stderr,
            "driver: workload done: produce ok %ld fail %ld info %ld, "
            "fetches %ld, resends %ld\n",
            atomic_load(&stat_ok), atomic_load(&stat_fail),
            atomic_load(&stat_info), atomic_load(&stat_reads),
            atomic_load(&stat_resends));

    if (opts.mode == DRV__MODE_DELAYED) {
        /* Every acknowledged delayed message is due before the drain
         * starts (+ 2 s for the timer pass and one commit), bounded by
         * the drain timeout. */
        uint64_t until = max_due_ms + 2000;
        int64_t limit = now_ns() + (int64_t)(opts.drain_timeout_s * 1e9);
        struct sbuf b = {0};
        while (wall_ms() < until && now_ns() < limit) {
            sleep_ms(100);
        }
        hist_begin(&b, -1, "info", "delayed-wait", NULL);
        sb_printf(&b, ",\"value\":%" PRIu64 ",\"wall_ms\":%" PRIu64, max_due_ms,
                  wall_ms());
        hist_end(&b);
        sb_free(&b);
    }
    for (int qi = 0; qi < opts.queues; qi++) {
        int complete = 0;
        if (opts.mode == DRV__MODE_WQ) {
            char dlq[160];
            int dlq_done = 0;
            int done = wq_drain(qi, opts.drain_timeout_s);
            if (!done) {
                rc = 1;
            }
            /* The dead-letter queue: <queue>-dlq-<group>. */
            (void)snprintf(dlq, sizeof(dlq), "%s-dlq-%s", queue_names[qi],
                           DRV__WQ_GROUP);
            read_all("dlq-read", dlq, opts.servers, TERN_READ_LEADER, NULL, 0,
                     opts.drain_quiet, opts.drain_timeout_s, &dlq_done);
            (void)fprintf(stderr, "driver: work-queue drain %s: %s\n",
                          queue_names[qi], done ? "complete" : "INCOMPLETE");
            continue;
        }
        drain_end[qi] = read_all(
            "drain", queue_names[qi], opts.servers, TERN_READ_LEADER, NULL,
            acked_end[qi], opts.drain_quiet, opts.drain_timeout_s, &complete);
        fprintf(stderr, "driver: drain %s: end %" PRIu64 " %s\n",
                queue_names[qi], drain_end[qi],
                complete ? "complete" : "INCOMPLETE");
        if (!complete) {
            rc = 1;
        }
    }
    {
        struct tern_client *c = client_new(opts.servers, TERN_READ_LEADER);
        struct tern_status *st = NULL;
        if (tern_cluster_status(c, NULL, &st) == 0) {
            if (tern_status_role(st) == TERN_ROLE_LEADER) {
                drain_commit = tern_status_commit_index(st);
            }
            tern_status_free(st);
        }
        tern_client_free(c);
        fprintf(stderr,
                "driver: leader commit index after drain: %" PRIu64 "\n",
                drain_commit);
    }
    for (int ni = 0; opts.mode != DRV__MODE_WQ && ni < opts.n_nodes; ni++) {
        for (int qi = 0; qi < opts.queues; qi++) {
            int complete = 0;
            uint64_t end =
                read_all("final-read", queue_names[qi], opts.nodes[ni].addr,
                         TERN_READ_FIRST, opts.nodes[ni].name, drain_end[qi], 1,
                         opts.final_timeout_s, &complete);
            fprintf(stderr, "driver: final read %s %s: end %" PRIu64 " %s\n",
                    opts.nodes[ni].name, queue_names[qi], end,
                    complete ? "complete" : "INCOMPLETE");
        }
    }
    /* Retention: nothing below each node's first offset is served. */
    for (int ni = 0; opts.max_messages > 0 && ni < opts.n_nodes; ni++) {
        struct tern_client *c =
            client_new(opts.nodes[ni].addr, TERN_READ_FIRST);
        struct sbuf b = {0};
        for (int qi = 0; qi < opts.queues; qi++) {
            uint64_t f = first_offset(c, queue_names[qi]);
            struct tern_fetch_result *r = NULL;
            int rv;
            if (f == UINT64_MAX || f == 0) {
                continue;
            }
            rv = tern_fetch(c, queue_names[qi], f - 1, 1, 1u << 20, 0, &r);
            hist_begin(&b, atomic_fetch_add(&next_process, 1), "ok",
                       "probe-below", queue_names[qi]);
            sb_printf(
                &b,
                ",\"node\":\"%s\",\"offset\":%" PRIu64
                ",\"served\":%s,\"result\":\"%s\"",
                opts.nodes[ni].name, f - 1,
                rv == 0 && tern_fetch_result_count(r) > 0 ? "true" : "false",
                rv == 0 ? "ok" : tern_err_name(rv));
            hist_end(&b);
            tern_fetch_result_free(r);
        }
        sb_free(&b);
        tern_client_free(c);
    }
    fclose(hist);
    return rc;
}
