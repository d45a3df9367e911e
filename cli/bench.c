/*
 * `tern bench QUEUE [--size 1024] [--count N] [--window W] [--batch B]
 * [--replication] [--json]`: produce load generator. Sends N messages of S
 * bytes in batches of B (default 1 message per request) with at most W
 * batches in flight (W = 1: sequential), measures per-batch latency from
 * the send call to the acknowledgement, and reports p50/p99/p999/max
 * latency and throughput. Output: a human table on stdout; with --json the
 * table goes to stderr and stdout gets one JSON object line. The queue is
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
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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

static int64_t pct(const int64_t *v, size_t n, double p)
{
    size_t i;
    if (n == 0) {
        return 0;
    }
    i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

int cli_bench(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"size", required_argument, NULL, 'z'},
        {"count", required_argument, NULL, 'n'},
        {"window", required_argument, NULL, 'w'},
        {"batch", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},
        {"replication", no_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    uint64_t size = 1024, count = 10000, window = 1, batch = 1;
    int json = 0;
    int repl = 0;
    int repl_failed = 0;
    char leader[128] = "";
    struct tern_repl_stats rs;
    int ch, idx = 0;
    const char *queue;
    struct bench_state st;
    struct tern_msg *msgs;
    char *payload;
    uint64_t sent = 0;
    int64_t t0, t1;
    int rv;
    FILE *table;

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
        case 'b':
            dst = &batch;
            break;
        case 'j':
            json = 1;
            continue;
        case 'r':
            repl = 1;
            continue;
        default:
            return 2;
        }
        if (cli_parse_u64(opts[idx].name, optarg, dst) != 0) {
            return 2;
        }
    }
    if (optind + 1 != argc || count == 0 || window == 0 || batch == 0 ||
        batch > 100000 || window > 100000 || size > (64u << 20)) {
        (void)fprintf(stderr,
                      "usage: tern bench QUEUE [--size 1024] [--count N] "
                      "[--window W] [--batch B] [--replication] "
                      "[--json]\n");
        return 2;
    }
    queue = argv[optind];
    rv = tern_queue_create(c, queue);
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

    t0 = cli_now_us();
    rv = 0;
    while (sent < count && st.first_error == 0) {
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
    t1 = cli_now_us();
    if (repl) {
        const char *l = tern_client_leader(c);
        int moved = l != NULL && strcmp(l, leader) != 0;
        int srv;
        if (moved) {
            (void)snprintf(leader, sizeof leader, "%s", l);
        }
        srv = tern_replication_stats(c, leader, 0, &rs);
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
        double mbs = mps * (double)size / 1e6;
        int64_t p50 = pct(st.lat_us, st.n_lat, 0.50);
        int64_t p99 = pct(st.lat_us, st.n_lat, 0.99);
        int64_t p999 = pct(st.lat_us, st.n_lat, 0.999);
        int64_t mx = st.n_lat > 0 ? st.lat_us[st.n_lat - 1] : 0;
        table = json ? stderr : stdout;
        (void)fprintf(table,
                      "bench %s: size %" PRIu64 " B, count %" PRIu64
                      ", window %" PRIu64 ", batch %" PRIu64 "\n",
                      queue, size, count, window, batch);
        (void)fprintf(
            table, "  acknowledged   %" PRIu64 " msgs (%" PRIu64 " errors)\n",
            st.acked, st.errors);
        (void)fprintf(table, "  elapsed        %.3f s\n", secs);
        (void)fprintf(table, "  throughput     %.0f msgs/s  %.2f MB/s\n", mps,
                      mbs);
        (void)fprintf(table,
                      "  latency/batch  p50 %" PRId64 " us  p99 %" PRId64
                      " us  p999 %" PRId64 " us  max %" PRId64 " us\n",
                      p50, p99, p999, mx);
        if (repl) {
            (void)fprintf(table,
                          "  replication (leader append->commit)  p50 %.1f us"
                          "  p99 %.1f us  p999 %.1f us  max %.1f us  (%" PRIu64
                          " samples, node %" PRIu64 ", %s, %s)\n",
                          (double)rs.p50_ns / 1e3, (double)rs.p99_ns / 1e3,
                          (double)rs.p999_ns / 1e3, (double)rs.max_ns / 1e3,
                          rs.count, rs.node_id, rs.transport, rs.durability);
        }
        if (json) {
            (void)printf(
                "{\"queue\":\"%s\",\"size\":%" PRIu64 ",\"count\":%" PRIu64
                ",\"window\":%" PRIu64 ",\"batch\":%" PRIu64
                ",\"acked\":%" PRIu64 ",\"errors\":%" PRIu64
                ",\"elapsed_s\":%.6f,\"msgs_per_s\":%.1f,\"mb_per_s\":%.3f"
                ",\"latency_us\":{\"p50\":%" PRId64 ",\"p99\":%" PRId64
                ",\"p999\":%" PRId64 ",\"max\":%" PRId64 "}",
                queue, size, count, window, batch, st.acked, st.errors, secs,
                mps, mbs, p50, p99, p999, mx);
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
