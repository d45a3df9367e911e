/*
 * bench_failover_gap: one libtern producer that keeps producing across
 * leader failures, so a failover is measured without the start-up of a
 * new process per attempt (bench/failover.sh --single runs it).
 *
 *   bench_failover_gap -s SERVERS [-q QUEUE] [--size S] [--seconds T]
 *                      [--gap-ms G] [--backoff-ms B]
 *
 * Produces one message of S bytes (default 256) at a time, synchronously,
 * for T seconds (default 60, at most 3600), with libtern's retry back-off
 * starting at B ms (default 2; libtern doubles it per attempt up to 16x,
 * so a gap is quantised by at most 16 * B). Every gap between two
 * acknowledged produces longer than G ms (default 30) is printed as it
 * ends: "gap START_MS MS", START_MS being the wall clock (ms since the
 * epoch) of the acknowledgement before it, so a script can match gaps to
 * its kills. At the end: "done N acked, M failed calls, max gap X ms".
 * A failed call (its deadline passed) is counted and the loop goes on.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tern/errors.h>
#include <tern/tern.h>

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_failover_gap -s SERVERS [-q QUEUE] "
            "[--size S] [--seconds T] [--gap-ms G] "
            "[--backoff-ms B]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"servers", required_argument, NULL, 's'},
        {"queue", required_argument, NULL, 'q'},
        {"size", required_argument, NULL, 'z'},
        {"seconds", required_argument, NULL, 't'},
        {"gap-ms", required_argument, NULL, 'g'},
        {"backoff-ms", required_argument, NULL, 'b'},
        {NULL, 0, NULL, 0},
    };
    const char *servers = NULL, *queue = "failover-bench";
    size_t size = 256;
    long seconds = 60, gap_ms = 30, backoff = 2;
    struct tern_client_options o;
    struct tern_client *c = NULL;
    struct tern_msg m;
    char *payload;
    uint64_t acked = 0, failed = 0;
    int64_t end, last_mono, last_wall, max_gap = 0;
    int opt, rv;

    while ((opt = getopt_long(argc, argv, "s:q:", longs, NULL)) != -1) {
        switch (opt) {
        case 's':
            servers = optarg;
            break;
        case 'q':
            queue = optarg;
            break;
        case 'z':
            size = strtoul(optarg, NULL, 10);
            break;
        case 't':
            seconds = strtol(optarg, NULL, 10);
            break;
        case 'g':
            gap_ms = strtol(optarg, NULL, 10);
            break;
        case 'b':
            backoff = strtol(optarg, NULL, 10);
            break;
        default:
            usage();
        }
    }
    if (servers == NULL || size == 0 || size > 65536 || seconds <= 0 ||
        seconds > 3600 || gap_ms < 0 || backoff <= 0 || backoff > 1000) {
        usage();
    }
    tern_client_options_init(&o);
    o.retry_backoff_ms = (int)backoff;
    o.connect_timeout_ms = 200;
    o.request_timeout_ms = 10000;
    rv = tern_client_new(servers, &o, &c);
    if (rv != 0) {
        fprintf(stderr, "bench_failover_gap: %s\n", tern_strerror(rv));
        return 1;
    }
    rv = tern_queue_create(c, queue);
    if (rv != 0 && rv != TERN_EQUEUEEXISTS) {
        fprintf(stderr, "bench_failover_gap: create %s: %s (%s)\n", queue,
                tern_strerror(rv), tern_client_errmsg(c));
        tern_client_free(c);
        return 1;
    }
    payload = malloc(size);
    if (payload == NULL) {
        tern_client_free(c);
        return 1;
    }
    memset(payload, 'g', size);
    m.data = payload;
    m.len = size;
    end = mono_ms() + seconds * 1000;
    last_mono = mono_ms();
    last_wall = wall_ms();
    while (mono_ms() < end) {
        int64_t now;
        rv = tern_produce(c, queue, &m, 1, NULL);
        if (rv != 0) {
            failed++;
            continue;
        }
        acked++;
        now = mono_ms();
        if (now - last_mono > max_gap) {
            max_gap = now - last_mono;
        }
        if (now - last_mono > gap_ms) {
            printf("gap %" PRId64 " %" PRId64 "\n", last_wall, now - last_mono);
            fflush(stdout);
        }
        last_mono = now;
        last_wall = wall_ms();
    }
    printf("done %" PRIu64 " acked, %" PRIu64 " failed calls, max gap %" PRId64
           " ms\n",
           acked, failed, max_gap);
    free(payload);
    tern_client_free(c);
    return 0;
}
