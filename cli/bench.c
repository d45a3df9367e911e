/*
 * `tern bench QUEUE [--size 1024] [--count N] [--window W] [--batch B]
 * [--replication] [--json]`: produce load generator. Sends N messages of S
 * bytes in calls of B (default 1 message per tern_produce_async call)
 * with at most W calls pending (W = 1: sequential), measures per-call
 * latency from the send call to the acknowledgement, and reports
 * p50/p99/p999/max latency and throughput. libtern keeps at most
 * --max-in-flight batches on the wire (its default, 32) and merges the
 * calls that wait behind them (--merge-bytes, default 64 KiB; 0: off),
 * as a Kafka producer batches, so W above 32 means larger batches, not
 * more of them. Output: a human table on stdout; with --json the table
 * goes to stderr and stdout gets one JSON object line. The queue is
 * created if missing.
 *
 * --replication: reset the leader's replication latency counters (STATS
 * request, tern_replication_stats) after creating the queue, fetch them
 * after the run, and report the leader's append->commit p50/p99 beside the
 * produce latency ("replication" row; "replication_us" in the JSON). Those
 * are histogram bucket upper bounds (~19% resolution), one sample per raft
 * entry (the server batches concurrent requests into one entry), so the
 * count differs from the number of batches sent. If the leader changed
 * during the run, the figures cover only the new leader's part (a warning
 * says so).
 *
 * --latencies FILE: write every latency sample (us, one per line, sorted;
 * what the percentiles are taken from) to FILE, for plotting a CDF.
 *
 * --stages (implies --replication): also fetch the leader's breakdown of
 * the commit path over the same samples (tern_replication_stages: request
 * read -> entry proposed, leader append durable, AppendEntries sent,
 * follower result received, commit, apply, applied -> answer queued; and
 * the whole stay at the leader, request read -> answer queued) and print a
 * p50/p99 table per stage next to the client-observed latency, with the
 * part outside the commit (client to leader, batching, reply: observed
 * p50 - append->commit p50 - apply p50) and the part outside the leader
 * (the client library's queue, the kernel's socket queues, the wire and
 * the wake-ups: observed p50 - request_to_answer p50; a lower bound, as
 * the leader's figure is its bucket's upper bound). JSON: "stages_us",
 * {name: {p50, p99, count}}. The stages run partly in parallel (the
 * leader's own disk write overlaps the follower's round trip), so they
 * do not add up to the total.
 *
 * [--mode produce|consume|e2e] [--duration D] [--histogram-svg FILE]:
 *   produce (default): as above; the latency is per batch.
 *   consume: read the queue back from its first offset (fetches of up to
 *     --batch messages, at least 100; the queue must hold messages, e.g.
 *     from a produce run), at most --count messages; the latency is per
 *     fetch, the throughput what was read.
 *   e2e: a consumer on a second connection, in its own thread, long-polls
 *     the queue from its end while this thread produces; each payload
 *     starts with the send time (CLOCK_MONOTONIC us, 8 bytes little
 *     endian, so --size is at least 8), and the latency is per message,
 *     from the produce call to its delivery to the consumer.
 *   Every mode stops after --count messages or --duration (default 60s),
 *   whichever comes first. The table shows a log2 histogram of the
 *   latencies (histogram.c) and p50/p90/p99/p999/max; --histogram-svg
 *   writes the same histogram as an SVG file.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* What each leader stage of `tern bench --stages` covers (struct
 * tern_repl_stage names); stages not listed print under their own name. */
static const struct
{
    const char *name;
    const char *what;
} stage_titles[] = {
    {"request_to_propose", "request read -> entry proposed"},
    {"leader_disk", "leader append durable (own disk write)"},
    {"append_to_post", "leader append -> AppendEntries sent"},
    {"post_to_result", "-> follower durable + ack (round trip)"},
    {"result_to_commit", "-> commit index covers it"},
    {"apply", "FSM apply (one entry)"},
    {"apply_to_answer", "applied -> answer queued"},
    {"request_to_answer", "at the leader: read -> answer queued"},
};

static const char *stage_title(const char *name)
{
    for (size_t i = 0; i < sizeof stage_titles / sizeof stage_titles[0]; i++) {
        if (strcmp(stage_titles[i].name, name) == 0) {
            return stage_titles[i].what;
        }
    }
    return name;
}

static const struct tern_repl_stage *
stage_find(const struct tern_repl_stage *sg, unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(sg[i].name, name) == 0) {
            return &sg[i];
        }
    }
    return NULL;
}

/* One row of the stage table (nothing for a stage without samples: a
 * follower's own stages on a leader). */
static void stage_row(FILE *f, const struct tern_repl_stage *s)
{
    if (s != NULL && s->count > 0) {
        (void)fprintf(f, "      %-40s %9.1f %9.1f %9" PRIu64 "\n",
                      stage_title(s->name), (double)s->p50_ns / 1e3,
                      (double)s->p99_ns / 1e3, s->count);
    }
}

struct bench_state
{
    int64_t *lat_us; /* one per batch */
    size_t n_lat;
    uint64_t acked;
    uint64_t errors;
    int first_error;
};

struct bench_batch
{
    struct bench_state *st;
    int64_t sent_us;
    size_t n;
};

static void bench_done(void *arg,
                       int status,
                       uint64_t base_offset,
                       size_t count)
{
    struct bench_batch *b = arg;
    (void)base_offset;
    (void)count;
    if (status == 0) {
        b->st->lat_us[b->st->n_lat++] = cli_now_us() - b->sent_us;
        b->st->acked += b->n;
    } else {
        b->st->errors += b->n;
        if (b->st->first_error == 0) {
            b->st->first_error = status;
        }
    }
    free(b);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define BENCH_PRODUCE 0
#define BENCH_CONSUME 1
#define BENCH_E2E     2
static const char *const mode_names[] = {"produce", "consume", "e2e"};
static const char *const mode_units[] = {"batch", "fetch", "msg"};
static const char *const mode_titles[] = {"produce", "fetch",
                                          "produce-to-delivery"};

/* consume mode: read queue from its first offset, up to count messages or
 * the deadline; one latency sample per fetch into st. */
static int bench_consume(struct tern_client *c,
                         const char *queue,
                         uint64_t count,
                         uint64_t batch,
                         int64_t deadline_us,
                         struct bench_state *st,
                         uint64_t *bytes)
{
    struct tern_queue_info *q;
    uint64_t off, end;
    int rv = tern_queue_info(c, queue, &q);
    if (rv != 0) {
        return rv;
    }
    off = tern_queue_info_start_offset(q);
    end = tern_queue_info_next_offset(q);
    tern_queue_info_free(q);
    if (off == end) {
        (void)fprintf(stderr,
                      "tern: bench --mode consume: %s holds no message "
                      "(fill it with tern bench %s first)\n",
                      queue, queue);
        return TERN_EINVAL;
    }
    while (st->acked < count && off < end && cli_now_us() < deadline_us) {
        struct tern_fetch_result *r;
        uint64_t want = count - st->acked;
        int64_t t = cli_now_us();
        size_t n;
        want = want < batch ? want : batch;
        rv = tern_fetch(c, queue, off, (uint32_t)want, 4u << 20, 0, &r);
        if (rv != 0) {
            return rv;
        }
        st->lat_us[st->n_lat++] = cli_now_us() - t;
        n = tern_fetch_result_count(r);
        for (size_t i = 0; i < n; i++) {
            const void *d;
            size_t len;
            if (tern_fetch_result_get(r, i, NULL, NULL, &d, &len) == 0) {
                *bytes += len;
            }
        }
        st->acked += n;
        off = tern_fetch_result_next_offset(r);
        tern_fetch_result_free(r);
        if (n == 0) {
            break;
        }
    }
    return 0;
}

/* e2e mode: the consumer thread's state. */
struct bench_e2e
{
    struct tern_client *c; /* the consumer's own client */
    const char *queue;
    uint64_t offset; /* where the run's messages start */
    uint64_t count;
    int64_t deadline_us;
    int64_t *lat_us; /* count entries */
    size_t n_lat;
    int error;
};

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

static void *bench_e2e_consumer(void *arg)
{
    struct bench_e2e *e = arg;
    uint64_t off = e->offset;
    while (e->n_lat < __atomic_load_n(&e->count, __ATOMIC_RELAXED) &&
           cli_now_us() < e->deadline_us) {
        struct tern_fetch_result *r;
        int rv = tern_fetch(e->c, e->queue, off, 1000, 4u << 20, 100, &r);
        int64_t now = cli_now_us();
        size_t n;
        if (rv != 0) {
            e->error = rv;
            break;
        }
        n = tern_fetch_result_count(r);
        for (size_t i = 0;
             i < n && e->n_lat < __atomic_load_n(&e->count, __ATOMIC_RELAXED);
             i++) {
            const void *d;
            size_t len;
            if (tern_fetch_result_get(r, i, NULL, NULL, &d, &len) == 0 &&
                len >= 8) {
                e->lat_us[e->n_lat++] = now - (int64_t)get_le64(d);
            }
        }
        off = tern_fetch_result_next_offset(r);
        tern_fetch_result_free(r);
    }
    return NULL;
}

int cli_bench(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"size", required_argument, NULL, 'z'},
        {"count", required_argument, NULL, 'n'},
        {"window", required_argument, NULL, 'w'},
        {"max-in-flight", required_argument, NULL, 'I'},
        {"merge-bytes", required_argument, NULL, 'G'},
        {"batch", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"replication", no_argument, NULL, 'r'},
        {"stages", no_argument, NULL, 'S'},
        {"latencies", required_argument, NULL, 'L'},
        {"mode", required_argument, NULL, 'M'},
        {"duration", required_argument, NULL, 'd'},
        {"histogram-svg", required_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    int mode = BENCH_PRODUCE;
    uint64_t duration_ms = 60000;
    const char *svg = NULL;
    const char *lat_path = NULL;
    uint64_t bytes = 0;
    struct bench_e2e e2e;
    pthread_t e2e_thread;
    int e2e_started = 0;
    int64_t deadline_us;
    struct cli_hist hist;
    uint64_t size = 1024, count = 10000, window = 1, batch = 1;
    int json = 0;
    int repl = 0;
    int repl_failed = 0;
    char leader[128] = "";
    struct tern_repl_stats rs;
    int stages = 0;
    struct tern_repl_stage sg[TERN_REPL_MAX_STAGES];
    unsigned n_sg = 0;
    int ch, idx = 0;
    const char *queue;
    struct bench_state st;
    struct tern_msg *msgs;
    char *payload;
    uint64_t sent = 0;
    int64_t t0, t1;
    int rv;
    FILE *table;

    memset(&e2e, 0, sizeof e2e);
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        uint64_t *dst;
        switch (ch) {
        case 'z':
            dst = &size;
            break;
        case 'n':
            dst = &count;
            break;
        case 'w':
            dst = &window;
            break;
        case 'I':
        case 'G':
            continue; /* the client's options (cli.c cli_client_new) */
        case 'b':
            dst = &batch;
            break;
        case 'j':
            json = 1;
            continue;
        case 'r':
            repl = 1;
            continue;
        case 'S':
            repl = 1;
            stages = 1;
            continue;
        case 'M':
            if (strcmp(optarg, "produce") == 0) {
                mode = BENCH_PRODUCE;
            } else if (strcmp(optarg, "consume") == 0) {
                mode = BENCH_CONSUME;
            } else if (strcmp(optarg, "e2e") == 0) {
                mode = BENCH_E2E;
            } else {
                (void)fprintf(stderr,
                              "tern: bench --mode %s: produce, consume or "
                              "e2e\n",
                              optarg);
                return 2;
            }
            continue;
        case 'd':
            if (cli_parse_duration_ms(optarg, &duration_ms) != 0 ||
                duration_ms == 0) {
                (void)fprintf(stderr,
                              "tern: bench --duration %s: a duration such "
                              "as 10s or 500ms\n",
                              optarg);
                return 2;
            }
            continue;
        case 'H':
            svg = optarg;
            continue;
        case 'L':
            lat_path = optarg;
            continue;
        default:
            return 2;
        }
        if (cli_parse_u64(opts[idx].name, optarg, dst) != 0) {
            return 2;
        }
    }
    if (optind + 1 != argc || count == 0 || window == 0 || batch == 0 ||
        batch > 100000 || window > 100000 || size > (64u << 20) ||
        (mode == BENCH_E2E && size < 8) || (mode != BENCH_PRODUCE && repl)) {
        (void)fprintf(stderr,
                      "usage: tern bench QUEUE [--size 1024] [--count N] "
                      "[--window W] [--batch B] [--replication] "
                      "[--stages] [--json]\n"
                      "                  [--mode produce|consume|e2e] "
                      "[--duration 60s] [--histogram-svg FILE] "
                      "[--latencies FILE]\n"
                      "  (e2e: --size at least 8; --replication, "
                      "--stages: produce mode only)\n");
        return 2;
    }
    queue = argv[optind];
    rv = mode == BENCH_CONSUME ? 0 : tern_queue_create(c, queue);
    if (rv != 0 && rv != TERN_EQUEUEEXISTS) {
        cli_error(c, rv, "bench: create %s", queue);
        return 1;
    }
    memset(&rs, 0, sizeof rs);
    if (repl) {
        /* The create went to the leader: start its counters over there. */
        const char *l = tern_client_leader(c);
        if (l != NULL) {
            (void)snprintf(leader, sizeof leader, "%s", l);
        }
        rv = tern_replication_stats(c, leader[0] != '\0' ? leader : NULL, 1,
                                    &rs);
        if (rv != 0) {
            cli_error(c, rv, "bench: reset replication stats");
            return 1;
        }
        (void)snprintf(leader, sizeof leader, "%s", rs.server);
    }
    memset(&st, 0, sizeof st);
    st.lat_us = calloc((size_t)(count / batch + 1), sizeof *st.lat_us);
    msgs = calloc((size_t)batch, sizeof *msgs);
    payload = malloc(size != 0 ? (size_t)size : 1);
    if (st.lat_us == NULL || msgs == NULL || payload == NULL) {
        free(st.lat_us);
        free(msgs);
        free(payload);
        cli_error(c, -ENOMEM, "bench");
        return 1;
    }
    memset(payload, 'b', (size_t)size);
    for (uint64_t i = 0; i < batch; i++) {
        msgs[i].data = payload;
        msgs[i].len = (size_t)size;
    }
    if (mode == BENCH_E2E) {
        struct tern_queue_info *q;
        e2e.queue = queue;
        e2e.count = count;
        e2e.lat_us = calloc((size_t)count, sizeof *e2e.lat_us);
        rv = e2e.lat_us == NULL ? -ENOMEM : tern_queue_info(c, queue, &q);
        if (rv == 0) {
            e2e.offset = tern_queue_info_next_offset(q);
            tern_queue_info_free(q);
            rv = cli_client_new(&e2e.c) != 0 ? TERN_EINVAL : 0;
        }
        if (rv != 0) {
            free(e2e.lat_us);
            free(st.lat_us);
            free(msgs);
            free(payload);
            cli_error(c, rv, "bench %s: e2e consumer", queue);
            return 1;
        }
        /* Each message gets its own payload buffer for its send time. */
        free(payload);
        payload = malloc((size_t)(size * batch));
        if (payload == NULL) {
            tern_client_free(e2e.c);
            free(e2e.lat_us);
            free(st.lat_us);
            free(msgs);
            cli_error(c, -ENOMEM, "bench");
            return 1;
        }
        memset(payload, 'b', (size_t)(size * batch));
        for (uint64_t i = 0; i < batch; i++) {
            msgs[i].data = payload + i * size;
        }
    }

    t0 = cli_now_us();
    deadline_us = t0 + (int64_t)duration_ms * 1000;
    if (mode == BENCH_E2E) {
        e2e.deadline_us = deadline_us + 5000000; /* the tail may lag */
        if (pthread_create(&e2e_thread, NULL, bench_e2e_consumer, &e2e) != 0) {
            e2e.error = -EAGAIN;
        } else {
            e2e_started = 1;
        }
    }
    rv = 0;
    if (mode == BENCH_CONSUME) {
        rv = bench_consume(c, queue, count, batch < 100 ? 100 : batch,
                           deadline_us, &st, &bytes);
        sent = count; /* nothing to produce */
    }
    while (sent < count && st.first_error == 0 && e2e.error == 0 &&
           cli_now_us() < deadline_us) {
        struct bench_batch *b;
        size_t n = (size_t)(count - sent < batch ? count - sent : batch);
        while (tern_client_pending(c) >= window && st.first_error == 0) {
            rv = tern_client_poll(c, -1);
            if (rv < 0) {
                break;
            }
            rv = 0;
        }
        if (rv != 0 || st.first_error != 0) {
            break;
        }
        b = malloc(sizeof *b);
        if (b == NULL) {
            rv = -ENOMEM;
            break;
        }
        b->st = &st;
        b->n = n;
        b->sent_us = cli_now_us();
        if (mode == BENCH_E2E) {
            for (size_t k = 0; k < n; k++) {
                unsigned char *p = (unsigned char *)payload + k * size;
                uint64_t v = (uint64_t)b->sent_us;
                for (int j = 0; j < 8; j++) {
                    p[j] = (unsigned char)(v >> (8 * j));
                }
            }
        }
        rv = tern_produce_async(c, queue, msgs, n, bench_done, b);
        if (rv != 0) {
            free(b);
            break;
        }
        /* Push it onto the wire now so the latency clock is honest. */
        (void)tern_client_poll(c, 0);
        sent += n;
    }
    while (tern_client_pending(c) > 0) {
        if (tern_client_poll(c, -1) < 0) {
            break;
        }
    }
    if (e2e_started) {
        /* The consumer stops at what was sent (or its deadline). */
        __atomic_store_n(&e2e.count, st.acked, __ATOMIC_RELAXED);
        (void)pthread_join(e2e_thread, NULL);
        tern_client_free(e2e.c);
        free(st.lat_us);
        st.lat_us = e2e.lat_us; /* the latencies reported are e2e's */
        st.n_lat = e2e.n_lat;
        if (e2e.error != 0 && st.first_error == 0) {
            st.first_error = e2e.error;
        }
    } else if (mode == BENCH_E2E) {
        tern_client_free(e2e.c);
        free(e2e.lat_us);
    }
    t1 = cli_now_us();
    if (repl) {
        const char *l = tern_client_leader(c);
        int moved = l != NULL && strcmp(l, leader) != 0;
        int srv;
        if (moved) {
            (void)snprintf(leader, sizeof leader, "%s", l);
        }
        srv = stages ? tern_replication_stages(c, leader, 0, &rs, sg,
                                               TERN_REPL_MAX_STAGES, &n_sg)
                     : tern_replication_stats(c, leader, 0, &rs);
        if (srv != 0) {
            cli_error(c, srv, "bench: replication stats");
            memset(&rs, 0, sizeof rs);
            repl_failed = 1;
        } else if (moved || rs.role != TERN_ROLE_LEADER) {
            (void)fprintf(stderr,
                          "tern: bench: warning: the leader changed during "
                          "the run; replication figures are from %s (%s) "
                          "only\n",
                          rs.server, tern_role_name(rs.role));
        }
    }

    qsort(st.lat_us, st.n_lat, sizeof *st.lat_us, cmp_i64);
    {
        double secs = (double)(t1 - t0) / 1e6;
        double mps = secs > 0 ? (double)st.acked / secs : 0;
        double mbs = mode == BENCH_CONSUME ? (double)bytes / 1e6 / secs
                                           : mps * (double)size / 1e6;
        int64_t p50, p99, p999, mx;
        cli_hist_fill(&hist, st.lat_us, st.n_lat);
        p50 = hist.p50;
        p99 = hist.p99;
        p999 = hist.p999;
        mx = hist.max;
        if (secs <= 0) {
            mbs = 0;
        }
        table = json ? stderr : stdout;
        (void)fprintf(table,
                      "bench %s: mode %s, size %" PRIu64 " B, count %" PRIu64
                      ", window %" PRIu64 ", batch %" PRIu64 "\n",
                      queue, mode_names[mode], size, count, window, batch);
        (void)fprintf(table, "  %-14s %" PRIu64 " msgs (%" PRIu64 " errors)\n",
                      mode == BENCH_CONSUME ? "read" : "acknowledged", st.acked,
                      st.errors);
        (void)fprintf(table, "  elapsed        %.3f s\n", secs);
        (void)fprintf(table, "  throughput     %.0f msgs/s  %.2f MB/s\n", mps,
                      mbs);
        (void)fprintf(table,
                      "  latency/%-6s p50 %" PRId64 " us  p99 %" PRId64
                      " us  p999 %" PRId64 " us  max %" PRId64 " us\n",
                      mode_units[mode], p50, p99, p999, mx);
        cli_hist_print(table, &hist, mode_titles[mode]);
        if (svg != NULL) {
            FILE *f = fopen(svg, "w");
            char title[256];
            (void)snprintf(title, sizeof title, "tern bench %s: %s latency",
                           queue, mode_titles[mode]);
            if (f == NULL || cli_hist_svg(f, &hist, title) != 0) {
                cli_error(NULL, -(errno != 0 ? errno : EIO), "write %s", svg);
                rv = rv != 0 ? rv : -EIO;
            }
            if (f != NULL && fclose(f) != 0 && rv == 0) {
                cli_error(NULL, -errno, "write %s", svg);
                rv = -EIO;
            }
        }
        if (lat_path != NULL) {
            FILE *f = fopen(lat_path, "w");
            for (size_t i = 0; f != NULL && i < st.n_lat; i++) {
                (void)fprintf(f, "%" PRId64 "\n", st.lat_us[i]);
            }
            if (f == NULL || fclose(f) != 0) {
                cli_error(NULL, -(errno != 0 ? errno : EIO), "write %s",
                          lat_path);
                rv = rv != 0 ? rv : -EIO;
            }
        }
        if (repl) {
            (void)fprintf(table,
                          "  replication (leader append->commit)  p50 %.1f us"
                          "  p99 %.1f us  p999 %.1f us  max %.1f us  (%" PRIu64
                          " samples, node %" PRIu64 ", %s, %s)\n",
                          (double)rs.p50_ns / 1e3, (double)rs.p99_ns / 1e3,
                          (double)rs.p999_ns / 1e3, (double)rs.max_ns / 1e3,
                          rs.count, rs.node_id, rs.transport, rs.durability);
        }
        if (stages && !repl_failed) {
            const struct tern_repl_stage *ap = stage_find(sg, n_sg, "apply");
            double apply = ap != NULL ? (double)ap->p50_ns / 1e3 : 0;
            double rest = (double)p50 - (double)rs.p50_ns / 1e3 - apply;
            (void)fprintf(table,
                          "  stages (leader node %" PRIu64
                          ", p50/p99 us, bucket upper bounds)\n"
                          "    %-42s %9s %9s %9s\n"
                          "    %-42s %9" PRId64 " %9" PRId64
                          " %9zu\n"
                          "    %-42s %9.1f %9.1f %9" PRIu64 "\n",
                          rs.node_id, "stage", "p50", "p99", "count",
                          "client produce (observed)", p50, p99, st.n_lat,
                          "leader append -> commit", (double)rs.p50_ns / 1e3,
                          (double)rs.p99_ns / 1e3, rs.count);
            /* The known stages in the commit path's order, then any
             * other the server names. */
            for (size_t k = 0; k < sizeof stage_titles / sizeof stage_titles[0];
                 k++) {
                stage_row(table, stage_find(sg, n_sg, stage_titles[k].name));
            }
            for (unsigned i = 0; i < n_sg; i++) {
                if (stage_title(sg[i].name) == sg[i].name) {
                    stage_row(table, &sg[i]);
                }
            }
            (void)fprintf(table, "    %-42s %9.1f\n",
                          "outside the commit (wire, batching, reply)",
                          rest > 0 ? rest : 0);
            /* Measured, not derived: the client's p50 less the leader's
             * own p50 for the whole request (request_to_answer). */
            const struct tern_repl_stage *at =
                stage_find(sg, n_sg, "request_to_answer");
            if (at != NULL && at->count > 0) {
                double out = (double)p50 - (double)at->p50_ns / 1e3;
                (void)fprintf(table, "    %-42s %9.1f\n",
                              "outside the leader (client side, wire)",
                              out > 0 ? out : 0);
            }
            (void)fprintf(table,
                          "    (the leader's disk write runs alongside "
                          "the round trip: stages overlap)\n");
        }
        if (json) {
            (void)printf(
                "{\"queue\":\"%s\",\"size\":%" PRIu64 ",\"count\":%" PRIu64
                ",\"window\":%" PRIu64 ",\"batch\":%" PRIu64
                ",\"acked\":%" PRIu64 ",\"errors\":%" PRIu64
                ",\"elapsed_s\":%.6f,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f"
                ",\"latency_us\":{\"p50\":%" PRId64 ",\"p99\":%" PRId64
                ",\"p999\":%" PRId64 ",\"max\":%" PRId64 ",\"p90\":%" PRId64
                "},\"mode\":\"%s\"",
                queue, size, count, window, batch, st.acked, st.errors, secs,
                mps, mbs, p50, p99, p999, mx, hist.p90, mode_names[mode]);
            if (repl) {
                (void)printf(
                    ",\"replication_us\":{\"p50\":%.3f,\"p99\":%.3f"
                    ",\"p999\":%.3f,\"max\":%.3f,\"mean\":%.3f"
                    ",\"count\":%" PRIu64 ",\"node_id\":%" PRIu64
                    ",\"transport\":\"%s\",\"durability\":\"%s\"}",
                    (double)rs.p50_ns / 1e3, (double)rs.p99_ns / 1e3,
                    (double)rs.p999_ns / 1e3, (double)rs.max_ns / 1e3,
                    (double)rs.mean_ns / 1e3, rs.count, rs.node_id,
                    rs.transport, rs.durability);
            }
            if (stages) {
                (void)printf(",\"stages_us\":{");
                for (unsigned i = 0; i < n_sg; i++) {
                    (void)printf(
                        "%s\"%s\":{\"p50\":%.3f,\"p99\":%.3f"
                        ",\"count\":%" PRIu64 "}",
                        i ? "," : "", sg[i].name, (double)sg[i].p50_ns / 1e3,
                        (double)sg[i].p99_ns / 1e3, sg[i].count);
                }
                (void)printf("}");
            }
            (void)printf("}\n");
        }
    }
    free(st.lat_us);
    free(msgs);
    free(payload);
    if (st.first_error != 0 || rv != 0) {
        cli_error(c, st.first_error != 0 ? st.first_error : rv, "bench %s",
                  queue);
        return 1;
    }
    return repl_failed ? 1 : 0;
}
