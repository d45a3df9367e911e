/*
 * bench_shared: shared consumption with acks (docs/WORKQUEUES.md, "Shared
 * groups") against produce alone, through libtern as a user sees it.
 *
 *   bench_shared -s SERVERS [--count N] [--size S] [--consumers C]
 *                [--batch B] [--produce-batch P] [--window W]
 *                [--rate R] [--paced-count M] [--wait-ms T]
 *                [--timeout-s X] [--phases abc]
 *
 * Every phase uses a fresh queue (named after the process id) and the
 * same producer: N messages of S bytes (default 200,000 x 1024) in
 * batches of P (default 16) with tern_produce_async, at most W (default
 * 32) batches in flight. Each message starts with its send time (u64
 * CLOCK_MONOTONIC microseconds, taken when its batch is handed to
 * libtern) and its number (u64), both little-endian; the rest is filler.
 *
 *   A  produce only: msg/s from the first send to the last ack.
 *   B  the same producer while C consumer threads (default 4, each its own
 *      tern_client, so its own producer id = consumer id) receive from one
 *      shared group of the queue (tern_receive, up to B messages, default
 *      256, long poll T ms, default 200) and ack each answer in one
 *      tern_settle, until all N are acked or X seconds (default 300) pass.
 *      Reports produce msg/s, end-to-end msg/s (N / time from the first
 *      send to the last ack answered), the ratio to A, deliveries against
 *      N (a second delivery of a number is a duplicate), stale acks and
 *      each consumer's count.
 *   C  paced: M messages (default 10,000) one per batch at R msg/s
 *      (default 1,000) with the same consumers: latency that is not
 *      queueing.
 *
 * Latency (B and C): receive time minus send time of each number's first
 * delivery, p50/p99/max in microseconds. Producer and consumers are
 * threads of this process, so both read the same clock.
 * Exit status: 0, 1 when a phase did not finish (an error, or not every
 * message acked in time), 2 for usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tern/errors.h>
#include <tern/tern.h>

#define GROUP      "workers"
#define HDR_BYTES  16
#define MAX_THREAD 64

struct opts
{
    const char *servers;
    uint64_t count;
    size_t size;
    unsigned consumers;
    uint32_t batch;
    size_t pbatch;
    size_t window;
    uint64_t rate;
    uint64_t paced;
    uint32_t wait_ms;
    uint64_t timeout_s;
    const char *phases;
};

/* One phase's shared state: the producer writes send times into the
 * payloads, consumers fill seen[] and lat[] by message number. */
struct run
{
    const struct opts *o;
    char queue[64];
    uint64_t n;
    _Atomic uint8_t *seen;      /* deliveries per message number (saturating) */
    int64_t *lat_us;            /* first delivery's latency per number, or -1 */
    atomic_uint_fast64_t acked; /* items answered done */
    atomic_uint_fast64_t stale; /* items answered stale */
    atomic_uint_fast64_t deliveries; /* messages received */
    atomic_int_fast64_t last_ack_us; /* when the last ack was answered */
    atomic_int stop;
    atomic_int failed;
    int64_t deadline_us;
};

struct consumer
{
    struct run *run;
    unsigned id;
    pthread_t thread;
    uint64_t received;
    uint64_t acked;
    uint64_t receive_errors;
    uint64_t settle_errors;
    uint64_t empty;      /* empty answers */
    uint64_t empty_fast; /* of them, answered before wait_ms / 2 */
    int64_t recv_us;     /* time in tern_receive */
    int64_t settle_us;   /* time in tern_settle */
    uint64_t settles;
};

struct prod_state
{
    uint64_t acked;
    uint64_t errors;
    int first_error;
    int64_t last_ack_us;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_item(const void *a, const void *b)
{
    uint64_t x = ((const struct tern_settle_item *)a)->receipt.offset;
    uint64_t y = ((const struct tern_settle_item *)b)->receipt.offset;
    return (x > y) - (x < y);
}

static int64_t pct(const int64_t *v, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static int client(const struct opts *o, size_t window, struct tern_client **c)
{
    struct tern_client_options co;
    tern_client_options_init(&co);
    co.request_timeout_ms = 30000;
    co.max_in_flight = (int)window;
    int rv = tern_client_new(o->servers, &co, c);
    if (rv != 0) {
        (void)fprintf(stderr, "bench_shared: %s: %s\n", o->servers,
                      tern_strerror(rv));
    }
    return rv;
}

static void prod_done(void *arg, int status, uint64_t base, size_t count)
{
    struct prod_state *st = arg;
    (void)base;
    if (status == 0) {
        st->acked += count;
        st->last_ack_us = now_us();
    } else {
        st->errors++;
        if (st->first_error == 0) {
            st->first_error = status;
        }
    }
}

/* Produce run->n messages; rate 0: as fast as the window allows, else one
 * batch every batch / rate seconds. Returns 0 or the first error; *t0 is
 * the first send, st->last_ack_us the last ack. */
static int produce(struct tern_client *c,
                   struct run *run,
                   size_t pbatch,
                   uint64_t rate,
                   int64_t *t0,
                   struct prod_state *st)
{
    const struct opts *o = run->o;
    size_t window = o->window;
    struct tern_msg *msgs = calloc(pbatch, sizeof *msgs);
    unsigned char *buf = calloc(pbatch, o->size);
    int rv = 0;
    if (msgs == NULL || buf == NULL) {
        rv = -ENOMEM;
        goto out;
    }
    memset(buf, 'x', pbatch * o->size);
    *t0 = now_us();
    for (uint64_t sent = 0; sent < run->n && rv == 0;) {
        size_t n = run->n - sent < pbatch ? (size_t)(run->n - sent) : pbatch;
        if (rate != 0) {
            int64_t due = *t0 + (int64_t)(sent * 1000000 / rate);
            while (now_us() < due && now_us() < run->deadline_us) {
                int64_t left = (due - now_us()) / 1000;
                (void)tern_client_poll(c, left > 0 ? (int)left : 0);
            }
        }
        while (tern_client_pending(c) >= window && st->first_error == 0 &&
               now_us() < run->deadline_us) {
            int prv = tern_client_poll(c, 100);
            if (prv < 0) {
                rv = prv;
                break;
            }
        }
        if (rv != 0 || st->first_error != 0) {
            break;
        }
        if (now_us() >= run->deadline_us) {
            rv = TERN_ETIMEDOUT;
            break;
        }
        int64_t t = now_us();
        for (size_t i = 0; i < n; i++) {
            unsigned char *p = buf + i * o->size;
            put_u64(p, (uint64_t)t);
            put_u64(p + 8, sent + i);
            msgs[i].data = p;
            msgs[i].len = o->size;
        }
        rv = tern_produce_async(c, run->queue, msgs, n, prod_done, st);
        if (rv != 0) {
            break;
        }
        (void)tern_client_poll(c, 0); /* onto the wire now */
        sent += n;
    }
    while (tern_client_pending(c) > 0 &&
           now_us() < run->deadline_us + 30000000) {
        if (tern_client_poll(c, 100) < 0) {
            break;
        }
    }
    if (rv == 0 && st->first_error != 0) {
        rv = st->first_error;
    }
    if (rv == 0 && st->acked != run->n) {
        rv = TERN_ETIMEDOUT;
    }
    if (rv != 0) {
        (void)fprintf(stderr, "bench_shared: produce to %s: %s (%s)\n",
                      run->queue, tern_strerror(rv), tern_client_errmsg(c));
    }
out:
    free(msgs);
    free(buf);
    return rv;
}

static void *consume(void *arg)
{
    struct consumer *k = arg;
    struct run *run = k->run;
    const struct opts *o = run->o;
    struct tern_client *c = NULL;
    struct tern_settle_item *items = calloc(o->batch, sizeof *items);
    if (items == NULL || client(o, 1, &c) != 0) {
        atomic_store(&run->failed, 1);
        goto out;
    }
    while (!atomic_load(&run->stop) && now_us() < run->deadline_us) {
        struct tern_fetch_result *r = NULL;
        int64_t t_call = now_us();
        int rv = tern_receive(c, run->queue, GROUP, o->batch, o->wait_ms, &r);
        int64_t t = now_us();
        k->recv_us += t - t_call;
        if (rv != 0) {
            k->receive_errors++;
            if (k->receive_errors <= 3) {
                (void)fprintf(stderr,
                              "bench_shared: consumer %u: receive: %s (%s)\n",
                              k->id, tern_strerror(rv), tern_client_errmsg(c));
            }
            usleep(10000);
            continue;
        }
        size_t n = tern_fetch_result_count(r);
        if (n == 0) {
            k->empty++;
            k->empty_fast += t - t_call < (int64_t)o->wait_ms * 500;
        }
        for (size_t i = 0; i < n; i++) {
            const void *data;
            size_t len;
            items[i].action = TERN_SETTLE_ACK;
            items[i].delay_ms = 0;
            if (tern_fetch_result_get(r, i, NULL, NULL, &data, &len) != 0 ||
                tern_fetch_result_receipt(r, i, &items[i].receipt) != 0 ||
                len < HDR_BYTES) {
                atomic_store(&run->failed, 1);
                continue;
            }
            uint64_t sent = get_u64(data);
            uint64_t num = get_u64((const unsigned char *)data + 8);
            if (num >= run->n) {
                atomic_store(&run->failed, 1);
                continue;
            }
            uint8_t prev = atomic_fetch_add(&run->seen[num], 1);
            if (prev == 0) {
                run->lat_us[num] = t - (int64_t)sent;
            } else if (prev == 255) {
                atomic_store(&run->seen[num], 255); /* saturate */
            }
        }
        k->received += n;
        atomic_fetch_add(&run->deliveries, n);
        tern_fetch_result_free(r);
        if (n == 0) {
            continue;
        }
        qsort(items, n, sizeof *items, cmp_item);
        t_call = now_us();
        rv = tern_settle(c, run->queue, GROUP, items, n);
        k->settle_us += now_us() - t_call;
        k->settles++;
        if (rv != 0) {
            k->settle_errors++;
            if (k->settle_errors <= 3) {
                (void)fprintf(stderr,
                              "bench_shared: consumer %u: settle: %s (%s)\n",
                              k->id, tern_strerror(rv), tern_client_errmsg(c));
            }
            continue; /* the leases expire and come back */
        }
        uint64_t done = 0;
        for (size_t i = 0; i < n; i++) {
            done += items[i].done != 0;
        }
        k->acked += done;
        atomic_fetch_add(&run->stale, n - done);
        if (atomic_fetch_add(&run->acked, done) + done >= run->n) {
            atomic_store(&run->last_ack_us, now_us());
            atomic_store(&run->stop, 1);
        }
    }
out:
    if (c != NULL) {
        tern_client_free(c);
    }
    free(items);
    return NULL;
}

/* Latency of first deliveries: p50/p99/max over those seen. */
static void latency(const struct run *run, const char *label)
{
    int64_t *v = malloc(run->n * sizeof *v);
    size_t m = 0;
    if (v == NULL) {
        return;
    }
    for (uint64_t i = 0; i < run->n; i++) {
        if (atomic_load(&run->seen[i]) != 0) {
            v[m++] = run->lat_us[i];
        }
    }
    if (m > 0) {
        qsort(v, m, sizeof *v, cmp_i64);
        printf("  %-30s p50 %" PRId64 " us, p99 %" PRId64 " us, max %" PRId64
               " us (%zu messages)\n",
               label, pct(v, m, 0.50), pct(v, m, 0.99), v[m - 1], m);
    }
    free(v);
}

static int setup_queue(struct tern_client *c, const char *queue, int shared)
{
    struct tern_queue_options qo;
    tern_queue_options_init(&qo);
    qo.max_age_ms = 0;
    int rv = tern_queue_create_opts(c, queue, &qo);
    if (rv == 0 && shared) {
        rv = tern_shared_config(c, queue, GROUP, NULL);
    }
    if (rv != 0) {
        (void)fprintf(stderr, "bench_shared: create %s: %s (%s)\n", queue,
                      tern_strerror(rv), tern_client_errmsg(c));
    }
    return rv;
}

/* Phase A: returns msg/s, or 0 on failure. */
static double phase_produce(const struct opts *o)
{
    struct run run = {.o = o, .n = o->count};
    struct prod_state st = {0};
    struct tern_client *c;
    int64_t t0 = 0;
    double mps = 0;
    (void)snprintf(run.queue, sizeof run.queue, "sbench-a-%ld", (long)getpid());
    if (client(o, o->window, &c) != 0) {
        return 0;
    }
    run.deadline_us = now_us() + (int64_t)o->timeout_s * 1000000;
    if (setup_queue(c, run.queue, 0) == 0 &&
        produce(c, &run, o->pbatch, 0, &t0, &st) == 0) {
        double secs = (double)(st.last_ack_us - t0) / 1e6;
        mps = secs > 0 ? (double)o->count / secs : 0;
        printf("A produce only: %" PRIu64 " x %zu B in %.2f s: %.0f msg/s\n",
               o->count, o->size, secs, mps);
    }
    tern_client_free(c);
    return mps;
}

/* Phases B (rate 0) and C (paced). 0 or 1. */
static int phase_shared(const struct opts *o,
                        char tag,
                        uint64_t n,
                        size_t pbatch,
                        uint64_t rate,
                        double base_mps)
{
    struct run run = {.o = o, .n = n};
    struct consumer k[MAX_THREAD];
    struct prod_state st = {0};
    struct tern_client *c;
    int64_t t0 = 0;
    int rv = 1;
    unsigned started = 0;
    (void)snprintf(run.queue, sizeof run.queue, "sbench-%c-%ld", tag,
                   (long)getpid());
    run.seen = calloc(n, sizeof *run.seen);
    run.lat_us = calloc(n, sizeof *run.lat_us);
    if (run.seen == NULL || run.lat_us == NULL ||
        client(o, o->window, &c) != 0) {
        free(run.seen);
        free(run.lat_us);
        return 1;
    }
    run.deadline_us = now_us() + (int64_t)o->timeout_s * 1000000;
    if (setup_queue(c, run.queue, 1) != 0) {
        goto out;
    }
    memset(k, 0, sizeof k);
    for (unsigned i = 0; i < o->consumers; i++) {
        k[i].run = &run;
        k[i].id = i;
        if (pthread_create(&k[i].thread, NULL, consume, &k[i]) != 0) {
            atomic_store(&run.stop, 1);
            break;
        }
        started++;
    }
    int prv = produce(c, &run, pbatch, rate, &t0, &st);
    if (prv != 0) {
        atomic_store(&run.stop, 1);
    }
    /* Consumers run until every message is acked or the deadline. */
    for (unsigned i = 0; i < started; i++) {
        pthread_join(k[i].thread, NULL);
    }
    uint64_t acked = atomic_load(&run.acked);
    uint64_t dels = atomic_load(&run.deliveries);
    uint64_t distinct = 0, dups = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t s = atomic_load(&run.seen[i]);
        distinct += s != 0;
        dups += s > 1 ? s - 1u : 0;
    }
    double psecs = (double)(st.last_ack_us - t0) / 1e6;
    double esecs = (double)(atomic_load(&run.last_ack_us) - t0) / 1e6;
    if (rate == 0) {
        printf("B produce + %u consumers (receive %u, ack each answer):\n",
               o->consumers, o->batch);
    } else {
        printf("C paced at %" PRIu64 " msg/s, %" PRIu64
               " messages, %u"
               " consumers:\n",
               rate, n, o->consumers);
    }
    if (prv == 0) {
        printf("  produce                        %.0f msg/s (%.2f s)\n",
               psecs > 0 ? (double)n / psecs : 0, psecs);
    }
    if (acked >= n && esecs > 0) {
        double e2e = (double)n / esecs;
        printf("  end to end (first send .. last ack) %.0f msg/s (%.2f s)", e2e,
               esecs);
        if (base_mps > 0) {
            printf(", %.2f of produce only", e2e / base_mps);
        }
        printf("\n");
    }
    printf("  acked %" PRIu64 " of %" PRIu64 ", deliveries %" PRIu64
           " (distinct %" PRIu64 ", duplicates %" PRIu64
           "), stale acks %" PRIu64 "\n",
           acked, n, dels, distinct, dups, (uint64_t)atomic_load(&run.stale));
    printf("  per consumer (received/acked/empty receives/errors):");
    uint64_t recvs = 0, empty = 0, fast = 0, settles = 0;
    int64_t recv_us = 0, settle_us = 0;
    for (unsigned i = 0; i < started; i++) {
        printf(" %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64, k[i].received,
               k[i].acked, k[i].empty,
               k[i].receive_errors + k[i].settle_errors);
        recvs += k[i].settles + k[i].empty;
        empty += k[i].empty;
        fast += k[i].empty_fast;
        settles += k[i].settles;
        recv_us += k[i].recv_us;
        settle_us += k[i].settle_us;
    }
    printf("\n");
    printf("  receives %" PRIu64
           " (%.0f messages each with any), empty %" PRIu64 " (%" PRIu64
           " of them before wait/2), mean receive %.1f ms,"
           " mean settle %.1f ms\n",
           recvs, settles > 0 ? (double)dels / (double)settles : 0, empty, fast,
           recvs > 0 ? (double)recv_us / 1e3 / (double)recvs : 0,
           settles > 0 ? (double)settle_us / 1e3 / (double)settles : 0);
    latency(&run, "produce-to-delivery latency");
    rv = prv == 0 && acked >= n && !atomic_load(&run.failed) ? 0 : 1;
    if (rv != 0) {
        (void)fprintf(stderr,
                      "bench_shared: phase %c did not finish: %" PRIu64
                      " of %" PRIu64 " acked%s\n",
                      tag, acked, n,
                      atomic_load(&run.failed) ? " (a malformed message)" : "");
    }
out:
    tern_client_free(c);
    free(run.seen);
    free(run.lat_us);
    return rv;
}

static uint64_t num(const char *s, const char *what, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        (void)fprintf(stderr, "bench_shared: %s: %" PRIu64 "..%" PRIu64 "\n",
                      what, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    struct opts o = {.count = 200000,
                     .size = 1024,
                     .consumers = 4,
                     .batch = 256,
                     .pbatch = 16,
                     .window = 32,
                     .rate = 1000,
                     .paced = 10000,
                     .wait_ms = 200,
                     .timeout_s = 300,
                     .phases = "abc"};
    static const struct option lo[] = {
        {"count", required_argument, NULL, 'n'},
        {"size", required_argument, NULL, 'z'},
        {"consumers", required_argument, NULL, 'c'},
        {"batch", required_argument, NULL, 'b'},
        {"produce-batch", required_argument, NULL, 'p'},
        {"window", required_argument, NULL, 'w'},
        {"rate", required_argument, NULL, 'r'},
        {"paced-count", required_argument, NULL, 'm'},
        {"wait-ms", required_argument, NULL, 'W'},
        {"timeout-s", required_argument, NULL, 'T'},
        {"phases", required_argument, NULL, 'P'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "s:", lo, NULL)) != -1) {
        switch (ch) {
        case 's':
            o.servers = optarg;
            break;
        case 'n':
            o.count = num(optarg, "--count", 1, 100000000);
            break;
        case 'z':
            o.size = num(optarg, "--size", HDR_BYTES, 1 << 20);
            break;
        case 'c':
            o.consumers = (unsigned)num(optarg, "--consumers", 1, MAX_THREAD);
            break;
        case 'b':
            o.batch = (uint32_t)num(optarg, "--batch", 1, 1024);
            break;
        case 'p':
            o.pbatch = num(optarg, "--produce-batch", 1, 10000);
            break;
        case 'w':
            o.window = num(optarg, "--window", 1, 1024);
            break;
        case 'r':
            o.rate = num(optarg, "--rate", 1, 1000000);
            break;
        case 'm':
            o.paced = num(optarg, "--paced-count", 0, 10000000);
            break;
        case 'W':
            o.wait_ms = (uint32_t)num(optarg, "--wait-ms", 0, 30000);
            break;
        case 'T':
            o.timeout_s = num(optarg, "--timeout-s", 1, 86400);
            break;
        case 'P':
            o.phases = optarg;
            break;
        default:
            return 2;
        }
    }
    if (o.servers == NULL || strspn(o.phases, "abc") != strlen(o.phases)) {
        (void)fprintf(stderr,
                      "usage: bench_shared -s SERVERS [--count N] [--size S]"
                      " [--consumers C] [--batch B] [--produce-batch P]"
                      " [--window W] [--rate R] [--paced-count M] [--wait-ms T]"
                      " [--timeout-s X] [--phases abc]\n");
        return 2;
    }
    (void)setvbuf(stdout, NULL, _IOLBF, 0);
    printf("shared bench: %" PRIu64
           " x %zu B, produce batches of %zu,"
           " window %zu; %u consumers, receive batch %u, wait %u ms\n",
           o.count, o.size, o.pbatch, o.window, o.consumers, o.batch,
           o.wait_ms);
    int rv = 0;
    double base = 0;
    if (strchr(o.phases, 'a') != NULL) {
        base = phase_produce(&o);
        rv |= base > 0 ? 0 : 1;
    }
    if (strchr(o.phases, 'b') != NULL) {
        rv |= phase_shared(&o, 'b', o.count, o.pbatch, 0, base);
    }
    if (strchr(o.phases, 'c') != NULL && o.paced > 0) {
        rv |= phase_shared(&o, 'c', o.paced, 1, o.rate, 0);
    }
    return rv;
}
