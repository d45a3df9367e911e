/*
 * bench_query: query by key and seek by time on a large queue
 * (docs/MESSAGES.md, "Query and seek"), through libtern as a user sees
 * them: the round trip over the client port included.
 *
 *   bench_query -s SERVERS [-q QUEUE] [--count N] [--size S] [--keys K]
 *               [--batch B] [--queries Q] [--load-only] [--query-only]
 *               [--seed X]
 *
 * Load (unless --query-only): creates QUEUE without retention limits and
 * produces N messages of S bytes in synchronous batches of B, message i
 * with key "k%010u" of i % K (every key names N / K messages, spread over
 * the whole queue). Prints the load rate and the slowest batch (a
 * request may take up to 60 s before the run fails).
 *
 * Queries (unless --load-only), Q each, uniformly random, timed one by
 * one from the call to its answer:
 *   key:    tern_message_get_key of a random key, at most 10 messages
 *           (the newest first); every answer is checked: the count is
 *           min(10, N / K) and each offset o has o % K = the key's number.
 *   time:   tern_offset_for_time of a random time between the first and
 *           the last append time; every 16th answer o is checked against
 *           the append times of o - 1 (before the time) and o (at or
 *           after it), fetched with tern_message_get_offset (untimed).
 *   offset: tern_message_get_offset of a random offset, as the baseline
 *           of one indexed read with the same round trip.
 * Prints p50/p90/p99/p999/max in microseconds per kind and exits 1 if a
 * check failed. The queue is read where read_from sends it (the leader).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tern/errors.h>
#include <tern/tern.h>

#define KEY_GET_MAX 10

struct opts
{
    const char *servers;
    const char *queue;
    uint64_t count;
    size_t size;
    uint64_t keys;
    size_t batch;
    size_t queries;
    int load;
    int query;
    uint64_t seed;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* xorshift64*: reproducible from --seed. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t pct(const int64_t *v, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void report(const char *kind, int64_t *lat, size_t n)
{
    if (n == 0) {
        return;
    }
    qsort(lat, n, sizeof *lat, cmp_i64);
    printf("%-7s %8zu queries  p50 %6" PRId64 "  p90 %6" PRId64
           "  p99 %6" PRId64 "  p999 %6" PRId64 "  max %7" PRId64 " us\n",
           kind, n, pct(lat, n, 0.50), pct(lat, n, 0.90), pct(lat, n, 0.99),
           pct(lat, n, 0.999), lat[n - 1]);
}

static int fail(struct tern_client *c, const char *what, int rv)
{
    fprintf(stderr, "bench_query: %s: %s (%s)\n", what, tern_strerror(rv),
            tern_client_errmsg(c));
    return 1;
}

static int load(struct tern_client *c, const struct opts *o)
{
    struct tern_queue_options qo;
    tern_queue_options_init(&qo);
    qo.max_age_ms = 0; /* keep everything */
    int rv = tern_queue_create_opts(c, o->queue, &qo);
    if (rv != 0 && rv != TERN_EQUEUEEXISTS) {
        return fail(c, "queue create", rv);
    }
    struct tern_message *m = calloc(o->batch, sizeof *m);
    char(*keys)[16] = calloc(o->batch, sizeof *keys);
    char *payload = malloc(o->size);
    if (m == NULL || keys == NULL || payload == NULL) {
        fprintf(stderr, "bench_query: out of memory\n");
        rv = 1;
        goto out;
    }
    memset(payload, 'x', o->size);
    int64_t t0 = now_us(), last = t0, slowest = 0;
    for (uint64_t i = 0; i < o->count;) {
        size_t n = 0;
        for (; n < o->batch && i + n < o->count; n++) {
            int kl = snprintf(keys[n], sizeof keys[n], "k%010" PRIu64,
                              (i + n) % o->keys);
            m[n].data = payload;
            m[n].len = o->size;
            m[n].key = keys[n];
            m[n].key_len = (size_t)kl;
        }
        uint64_t base;
        int64_t sent = now_us();
        rv = tern_produce_messages(c, o->queue, m, n, &base);
        if (now_us() - sent > slowest) {
            slowest = now_us() - sent;
        }
        if (rv != 0) {
            rv = fail(c, "produce", rv);
            goto out;
        }
        i += n;
        if (now_us() - last > 10 * 1000000 || i == o->count) {
            last = now_us();
            printf("load: %" PRIu64
                   " messages, %.0f msg/s, slowest batch "
                   "%.1f ms\n",
                   i, (double)i * 1e6 / (double)(last - t0),
                   (double)slowest / 1000.0);
            fflush(stdout);
        }
    }
    rv = 0;
out:
    free(m);
    free(keys);
    free(payload);
    return rv;
}

/* Append time of message off (0 with *ts, or a code). */
static int append_time(struct tern_client *c,
                       const char *queue,
                       uint64_t off,
                       uint64_t *ts)
{
    struct tern_fetch_result *r;
    int rv = tern_message_get_offset(c, queue, off, &r);
    if (rv != 0) {
        return rv;
    }
    rv = tern_fetch_result_count(r) == 1
             ? tern_fetch_result_get(r, 0, NULL, ts, NULL, NULL)
             : TERN_ENOTFOUND;
    tern_fetch_result_free(r);
    return rv;
}

static int query(struct tern_client *c, const struct opts *o)
{
    struct tern_queue_info *qi;
    int rv = tern_queue_info(c, o->queue, &qi);
    if (rv != 0) {
        return fail(c, "queue info", rv);
    }
    uint64_t first = tern_queue_info_start_offset(qi);
    uint64_t end = tern_queue_info_next_offset(qi);
    tern_queue_info_free(qi);
    if (end - first < 2) {
        fprintf(stderr,
                "bench_query: queue %s holds %" PRIu64
                " messages (load it first)\n",
                o->queue, end - first);
        return 1;
    }
    uint64_t n = end - first, t_first, t_last;
    if ((rv = append_time(c, o->queue, first, &t_first)) != 0 ||
        (rv = append_time(c, o->queue, end - 1, &t_last)) != 0) {
        return fail(c, "message get", rv);
    }
    printf("queue %s: offsets [%" PRIu64 ", %" PRIu64
           "), append times "
           "over %.1f s, %" PRIu64 " keys\n",
           o->queue, first, end, (double)(t_last - t_first) / 1000.0, o->keys);

    int64_t *lat = malloc(o->queries * sizeof *lat);
    if (lat == NULL) {
        fprintf(stderr, "bench_query: out of memory\n");
        return 1;
    }
    uint64_t seed = o->seed, bad = 0;
    uint64_t per_key = end / o->keys; /* the load wrote offsets 0..end */
    uint64_t want = per_key < KEY_GET_MAX ? per_key : KEY_GET_MAX;

    for (size_t q = 0; q < o->queries; q++) {
        uint64_t k = rnd(&seed) % o->keys;
        char key[16];
        int kl = snprintf(key, sizeof key, "k%010" PRIu64, k);
        struct tern_fetch_result *r;
        int64_t t = now_us();
        rv =
            tern_message_get_key(c, o->queue, key, (size_t)kl, KEY_GET_MAX, &r);
        lat[q] = now_us() - t;
        if (rv != 0) {
            free(lat);
            return fail(c, "message get --key", rv);
        }
        size_t got = tern_fetch_result_count(r);
        bad += got != want;
        for (size_t i = 0; i < got; i++) {
            uint64_t off = 0;
            tern_fetch_result_get(r, i, &off, NULL, NULL, NULL);
            bad += off % o->keys != k;
        }
        tern_fetch_result_free(r);
    }
    report("key", lat, o->queries);

    for (size_t q = 0; q < o->queries; q++) {
        uint64_t when = t_first + rnd(&seed) % (t_last - t_first + 1), off;
        int64_t t = now_us();
        rv = tern_offset_for_time(c, o->queue, when, &off);
        lat[q] = now_us() - t;
        if (rv != 0) {
            free(lat);
            return fail(c, "offset for time", rv);
        }
        if (q % 16 == 0) {
            uint64_t at = 0, before = 0;
            if (off < first || off >= end ||
                append_time(c, o->queue, off, &at) != 0 || at < when ||
                (off > first &&
                 (append_time(c, o->queue, off - 1, &before) != 0 ||
                  before >= when))) {
                bad++;
            }
        }
    }
    report("time", lat, o->queries);

    for (size_t q = 0; q < o->queries; q++) {
        uint64_t off = first + rnd(&seed) % n, ts;
        int64_t t = now_us();
        rv = append_time(c, o->queue, off, &ts);
        lat[q] = now_us() - t;
        if (rv != 0) {
            free(lat);
            return fail(c, "message get --offset", rv);
        }
    }
    report("offset", lat, o->queries);
    free(lat);
    if (bad != 0) {
        fprintf(stderr,
                "bench_query: %" PRIu64
                " answers failed their "
                "check\n",
                bad);
        return 1;
    }
    printf("every checked answer was right\n");
    return 0;
}

static uint64_t num(const char *s, const char *what, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "bench_query: %s: %" PRIu64 "..%" PRIu64 "\n", what, lo,
                hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    struct opts o = {.queue = "qbench",
                     .count = 10000000,
                     .size = 100,
                     .keys = 1000000,
                     .batch = 1000,
                     .queries = 20000,
                     .load = 1,
                     .query = 1,
                     .seed = 88172645463325252ULL};
    static const struct option lo[] = {
        {"count", required_argument, NULL, 'n'},
        {"size", required_argument, NULL, 'z'},
        {"keys", required_argument, NULL, 'k'},
        {"batch", required_argument, NULL, 'b'},
        {"queries", required_argument, NULL, 'Q'},
        {"load-only", no_argument, NULL, 'L'},
        {"query-only", no_argument, NULL, 'R'},
        {"seed", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "s:q:", lo, NULL)) != -1) {
        switch (ch) {
        case 's':
            o.servers = optarg;
            break;
        case 'q':
            o.queue = optarg;
            break;
        case 'n':
            o.count = num(optarg, "--count", 1, 1000000000);
            break;
        case 'z':
            o.size = num(optarg, "--size", 1, 1 << 20);
            break;
        case 'k':
            o.keys = num(optarg, "--keys", 1, 1000000000);
            break;
        case 'b':
            o.batch = num(optarg, "--batch", 1, 10000);
            break;
        case 'Q':
            o.queries = num(optarg, "--queries", 1, 10000000);
            break;
        case 'L':
            o.query = 0;
            break;
        case 'R':
            o.load = 0;
            break;
        case 'S':
            o.seed = num(optarg, "--seed", 1, UINT64_MAX);
            break;
        default:
            return 2;
        }
    }
    if (o.servers == NULL || !(o.load || o.query)) {
        fprintf(stderr,
                "usage: bench_query -s SERVERS [-q QUEUE] [--count N]"
                " [--size S] [--keys K] [--batch B] [--queries Q]"
                " [--load-only | --query-only] [--seed X]\n");
        return 2;
    }
    /* A load of millions of keyed messages meets snapshots and checkpoints
     * of a large index: give a batch a minute rather than fail the run;
     * the load reports its slowest batch. */
    struct tern_client_options co;
    tern_client_options_init(&co);
    co.request_timeout_ms = 60000;
    struct tern_client *c;
    int rv = tern_client_new(o.servers, &co, &c);
    if (rv != 0) {
        fprintf(stderr, "bench_query: %s: %s\n", o.servers, tern_strerror(rv));
        return 2;
    }
    rv = o.load ? load(c, &o) : 0;
    if (rv == 0 && o.query) {
        rv = query(c, &o);
    }
    tern_client_free(c);
    return rv;
}
