/*
 * bench_scale: the client side of the scale benchmarks (bench/scale_queues,
 * bench/scale_messages), through libtern as a user sees it.
 *
 *   bench_scale fill    -s SERVERS --queues N [--threads T] [--from K]
 *       creates queues q0000000.. (N of them, from number K) and produces
 *       one 16-byte message into each, from T threads (default 32), each
 *       with its own client, queue i handled by thread i % T. A queue that
 *       already exists is reused. Prints the rate.
 *   bench_scale serve   -s SERVERS --queue Q [--deadline-ms D]
 *       until D ms (default 60000) have passed: produce one message to Q
 *       and fetch Q from its first offset, with short timeouts, retrying.
 *       Prints "serving_at_ms=<CLOCK_REALTIME ms>" once both succeeded
 *       (exit 0), or exits 1. With --read-first the fetch is served by
 *       the first server of SERVERS (the node being timed).
 *   bench_scale list    -s SERVERS --queues N [--page-size P]
 *       times one page of P (default 1000) queue names at the start, the
 *       middle and the end of the N queues q0000000.. (each page asked
 *       for after the name before it), 5 times each; prints the slowest.
 *   bench_scale produce -s SERVERS --queue Q --count N [--size S]
 *                       [--batch B] [--window W]
 *       produces N messages of S bytes (default 128) to Q (created if
 *       missing) in async batches of B (default 256), W in flight
 *       (default 32); prints the rate of the first and the last 5% of the
 *       messages and of every tenth.
 *   bench_scale consume -s SERVERS --queue Q --count N [--max-bytes M]
 *       reads N messages of Q from offset 0 with tern_fetch (M bytes a
 *       fetch, default 4 MiB) and prints the message and payload rates.
 *
 * Every loop is bounded: by its count and by a request timeout of 60 s
 * (fill, produce, consume) or by --deadline-ms (serve).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tern/errors.h>
#include <tern/tern.h>

#define QNAME_FMT "q%07" PRIu64

struct opts
{
    const char *servers;
    const char *queue;
    uint64_t queues;
    uint64_t from;
    unsigned threads;
    uint64_t deadline_ms;
    uint32_t page_size;
    uint64_t count;
    size_t size;
    size_t batch;
    int window;
    uint32_t max_bytes;
    int read_first;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct tern_client *client(const struct opts *o, int timeout_ms)
{
    struct tern_client_options co;
    struct tern_client *c = NULL;
    tern_client_options_init(&co);
    co.request_timeout_ms = timeout_ms;
    co.connect_timeout_ms = timeout_ms < 1000 ? timeout_ms : 1000;
    co.max_in_flight = o->window;
    if (o->read_first) {
        co.read_from = TERN_READ_FIRST;
    }
    int rv = tern_client_new(o->servers, &co, &c);
    if (rv != 0) {
        fprintf(stderr, "bench_scale: client: %s\n", tern_strerror(rv));
        exit(1);
    }
    return c;
}

/* ---- fill ------------------------------------------------------------ */

struct filler
{
    const struct opts *o;
    unsigned id;
    uint64_t done;
    int failed;
};

static void *fill_thread(void *arg)
{
    struct filler *f = arg;
    const struct opts *o = f->o;
    struct tern_client *c = client(o, 60000);
    char name[32];
    static const char payload[16] = "scale-bench-msg";
    struct tern_msg m = {payload, sizeof(payload)};

    for (uint64_t i = o->from + f->id; i < o->from + o->queues;
         i += o->threads) {
        (void)snprintf(name, sizeof(name), QNAME_FMT, i);
        int rv = tern_queue_create(c, name);
        if (rv == TERN_EQUEUEEXISTS) {
            rv = 0;
        }
        if (rv == 0) {
            rv = tern_produce(c, name, &m, 1, NULL);
        }
        if (rv != 0) {
            fprintf(stderr, "bench_scale: fill %s: %s: %s\n", name,
                    tern_err_name(rv), tern_client_errmsg(c));
            f->failed = 1;
            break;
        }
        f->done++;
    }
    tern_client_free(c);
    return NULL;
}

static int cmd_fill(const struct opts *o)
{
    struct filler *f = calloc(o->threads, sizeof(*f));
    pthread_t *th = calloc(o->threads, sizeof(*th));
    int failed = 0;
    uint64_t done = 0;
    if (f == NULL || th == NULL) {
        fprintf(stderr, "bench_scale: out of memory\n");
        return 1;
    }
    int64_t t0 = now_us();
    for (unsigned i = 0; i < o->threads; i++) {
        f[i].o = o;
        f[i].id = i;
        if (pthread_create(&th[i], NULL, fill_thread, &f[i]) != 0) {
            fprintf(stderr, "bench_scale: pthread_create failed\n");
            exit(1);
        }
    }
    for (unsigned i = 0; i < o->threads; i++) {
        (void)pthread_join(th[i], NULL);
        failed |= f[i].failed;
        done += f[i].done;
    }
    double s = (double)(now_us() - t0) / 1e6;
    printf("fill: %" PRIu64
           " queues created with one message each in "
           "%.1f s (%.0f queues/s, %u threads)\n",
           done, s, (double)done / s, o->threads);
    free(f);
    free(th);
    return failed;
}

/* ---- serve ----------------------------------------------------------- */

static int cmd_serve(const struct opts *o)
{
    int64_t end = now_us() + (int64_t)o->deadline_ms * 1000;
    static const char payload[] = "serve-probe";
    struct tern_msg m = {payload, sizeof(payload) - 1};
    int last = 0;
    while (now_us() < end) {
        struct tern_client *c = client(o, 200);
        struct tern_fetch_result *r = NULL;
        int rv = tern_produce(c, o->queue, &m, 1, NULL);
        if (rv == 0) {
            rv = tern_fetch(c, o->queue, 0, 1, 4096, 0, &r);
        }
        if (rv == 0 && tern_fetch_result_count(r) < 1) {
            rv = TERN_ENOQUEUE;
        }
        tern_fetch_result_free(r);
        tern_client_free(c);
        if (rv == 0) {
            printf("serving_at_ms=%" PRId64 "\n", wall_ms());
            return 0;
        }
        last = rv;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr,
            "bench_scale: serve: not serving after %" PRIu64 " ms (last: %s)\n",
            o->deadline_ms, tern_err_name(last));
    return 1;
}

/* ---- list ------------------------------------------------------------ */

static int cmd_list(const struct opts *o)
{
    struct tern_client *c = client(o, 60000);
    static const char *const where[] = {"first", "middle", "last"};
    uint64_t at[3] = {0, o->queues / 2,
                      o->queues > o->page_size ? o->queues - o->page_size : 0};
    int failed = 0;
    for (int w = 0; w < 3; w++) {
        char after[32] = "";
        int64_t worst = 0;
        size_t got = 0;
        if (at[w] > 0) {
            (void)snprintf(after, sizeof(after), QNAME_FMT, at[w] - 1);
        }
        for (int k = 0; k < 5; k++) {
            struct tern_queue_list *l = NULL;
            int more = 0;
            int64_t t0 = now_us();
            int rv = tern_queue_list_page(c, after, o->page_size, &l, &more);
            int64_t us = now_us() - t0;
            if (rv != 0) {
                fprintf(stderr, "bench_scale: list: %s: %s\n",
                        tern_err_name(rv), tern_client_errmsg(c));
                failed = 1;
                break;
            }
            got = tern_queue_list_count(l);
            tern_queue_list_free(l);
            worst = us > worst ? us : worst;
        }
        printf(
            "list page %s (after \"%s\"): %zu names, slowest of 5: "
            "%.2f ms\n",
            where[w], after, got, (double)worst / 1000.0);
        printf("list_%s_ms=%.2f\n", where[w], (double)worst / 1000.0);
    }
    tern_client_free(c);
    return failed;
}

/* ---- produce --------------------------------------------------------- */

struct producer
{
    uint64_t acked;
    int failed;
};

static void produced(void *arg, int status, uint64_t base, size_t count)
{
    struct producer *p = arg;
    (void)base;
    if (status != 0) {
        if (!p->failed) {
            fprintf(stderr, "bench_scale: produce: %s\n",
                    tern_err_name(status));
        }
        p->failed = 1;
        return;
    }
    p->acked += count;
}

static int cmd_produce(const struct opts *o)
{
    struct tern_client *c = client(o, 60000);
    struct producer p = {0, 0};
    uint64_t sent = 0;
    size_t n = o->batch;
    struct tern_msg *msgs = calloc(n, sizeof(*msgs));
    char *buf = malloc(o->size * n);
    uint64_t step = o->count / 20 > 0 ? o->count / 20 : 1;
    uint64_t next_mark = step;
    int64_t t0 = now_us(), mark_t = t0;
    uint64_t mark_n = 0;
    double first = 0, last = 0;
    if (msgs == NULL || buf == NULL) {
        fprintf(stderr, "bench_scale: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < o->size * n; i++) {
        buf[i] = (char)('a' + i % 26);
    }
    for (size_t i = 0; i < n; i++) {
        msgs[i].data = buf + i * o->size;
        msgs[i].len = o->size;
    }
    int rv = tern_queue_create(c, o->queue);
    if (rv != 0 && rv != TERN_EQUEUEEXISTS) {
        fprintf(stderr, "bench_scale: create %s: %s\n", o->queue,
                tern_err_name(rv));
        return 1;
    }
    while (!p.failed && p.acked < o->count) {
        while (sent < o->count &&
               tern_client_pending(c) < (size_t)o->window * 2) {
            size_t k = o->count - sent < n ? (size_t)(o->count - sent) : n;
            rv = tern_produce_async(c, o->queue, msgs, k, produced, &p);
            if (rv != 0) {
                fprintf(stderr, "bench_scale: produce_async: %s\n",
                        tern_err_name(rv));
                return 1;
            }
            sent += k;
        }
        rv = tern_client_poll(c, 100);
        if (rv < 0) {
            fprintf(stderr, "bench_scale: poll: %s\n", tern_err_name(rv));
            return 1;
        }
        while (p.acked >= next_mark && next_mark <= o->count) {
            int64_t t = now_us();
            double rate = (double)(p.acked - mark_n) * 1e6 /
                          (double)(t - mark_t > 0 ? t - mark_t : 1);
            if (mark_n == 0) {
                first = rate;
            }
            last = rate;
            printf("produce: %" PRIu64
                   " acked, %.0f msg/s over the last "
                   "%" PRIu64 "\n",
                   p.acked, rate, p.acked - mark_n);
            fflush(stdout);
            mark_n = p.acked;
            mark_t = t;
            next_mark += step;
        }
    }
    double s = (double)(now_us() - t0) / 1e6;
    printf("produce: %" PRIu64
           " messages of %zu B in %.1f s: %.0f msg/s, "
           "%.1f MB/s\n",
           p.acked, o->size, s, (double)p.acked / s,
           (double)p.acked * (double)o->size / s / 1e6);
    printf(
        "produce_start_rate=%.0f produce_end_rate=%.0f "
        "produce_rate=%.0f\n",
        first, last, (double)p.acked / s);
    tern_client_free(c);
    free(msgs);
    free(buf);
    return p.failed;
}

/* ---- consume --------------------------------------------------------- */

static int cmd_consume(const struct opts *o)
{
    struct tern_client *c = client(o, 60000);
    uint64_t off = 0, n = 0, bytes = 0;
    int64_t t0 = now_us();
    while (n < o->count) {
        struct tern_fetch_result *r = NULL;
        int rv = tern_fetch(c, o->queue, off, 1000000, o->max_bytes, 0, &r);
        if (rv != 0) {
            fprintf(stderr, "bench_scale: fetch at %" PRIu64 ": %s: %s\n", off,
                    tern_err_name(rv), tern_client_errmsg(c));
            return 1;
        }
        size_t k = tern_fetch_result_count(r);
        for (size_t i = 0; i < k; i++) {
            size_t len = 0;
            (void)tern_fetch_result_get(r, i, NULL, NULL, NULL, &len);
            bytes += len;
        }
        n += k;
        off = tern_fetch_result_next_offset(r);
        tern_fetch_result_free(r);
        if (k == 0) {
            fprintf(stderr, "bench_scale: consume: queue ends at %" PRIu64 "\n",
                    off);
            return 1;
        }
    }
    double s = (double)(now_us() - t0) / 1e6;
    printf("consume: %" PRIu64 " messages, %" PRIu64
           " payload bytes in "
           "%.2f s: %.0f msg/s, %.1f MB/s of payload\n",
           n, bytes, s, (double)n / s, (double)bytes / s / 1e6);
    printf("consume_msgs_per_s=%.0f consume_payload_mb_s=%.1f\n", (double)n / s,
           (double)bytes / s / 1e6);
    tern_client_free(c);
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_scale fill|serve|list|produce|consume -s SERVERS "
            "[--queues N] [--from K] [--threads T] [--queue Q] "
            "[--deadline-ms D] [--page-size P] [--count N] [--size S] "
            "[--batch B] [--window W] [--max-bytes M]\n");
    exit(2);
}

static uint64_t num(const char *s)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        usage();
    }
    return (uint64_t)v;
}

int main(int argc, char **argv)
{
    struct opts o = {NULL, NULL, 1000000, 0,  32,       60000, 1000,
                     0,    128,  256,     32, 4u << 20, 0};
    if (argc < 2) {
        usage();
    }
    const char *cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        i++;
        if (strcmp(a, "--read-first") == 0) {
            o.read_first = 1;
            i--;
            continue;
        }
        if (v == NULL) {
            usage();
        }
        if (strcmp(a, "-s") == 0) {
            o.servers = v;
        } else if (strcmp(a, "--queue") == 0) {
            o.queue = v;
        } else if (strcmp(a, "--queues") == 0) {
            o.queues = num(v);
        } else if (strcmp(a, "--from") == 0) {
            o.from = num(v);
        } else if (strcmp(a, "--threads") == 0) {
            o.threads = (unsigned)num(v);
        } else if (strcmp(a, "--deadline-ms") == 0) {
            o.deadline_ms = num(v);
        } else if (strcmp(a, "--page-size") == 0) {
            o.page_size = (uint32_t)num(v);
        } else if (strcmp(a, "--count") == 0) {
            o.count = num(v);
        } else if (strcmp(a, "--size") == 0) {
            o.size = (size_t)num(v);
        } else if (strcmp(a, "--batch") == 0) {
            o.batch = (size_t)num(v);
        } else if (strcmp(a, "--window") == 0) {
            o.window = (int)num(v);
        } else if (strcmp(a, "--max-bytes") == 0) {
            o.max_bytes = (uint32_t)num(v);
        } else {
            usage();
        }
    }
    if (o.servers == NULL || o.threads < 1 || o.threads > 1024 || o.batch < 1 ||
        o.size < 1 || o.window < 1 || o.page_size < 1) {
        usage();
    }
    if (strcmp(cmd, "fill") == 0) {
        return cmd_fill(&o);
    }
    if (o.queue == NULL && strcmp(cmd, "list") != 0) {
        usage();
    }
    if (strcmp(cmd, "serve") == 0) {
        return cmd_serve(&o);
    }
    if (strcmp(cmd, "list") == 0) {
        return cmd_list(&o);
    }
    if (strcmp(cmd, "produce") == 0) {
        return cmd_produce(&o);
    }
    if (strcmp(cmd, "consume") == 0) {
        return cmd_consume(&o);
    }
    usage();
    return 2;
}
