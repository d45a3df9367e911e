/* tern-delayer: the "delay, jitter and reorder" nemesis.  tc netem is not in
 * this kernel, so packets are steered into an NFQUEUE by an iptables rule
 * (always with --queue-bypass, so a dead delayer is no partition) and this
 * program holds each one for delay +- jitter milliseconds before giving the
 * NF_ACCEPT verdict.  Jitter is uniform in [-J, +J] (clamped at 0), so packets
 * are reordered whenever J is large against their spacing.
 *
 *   tern-delayer --queue N --delay-ms D [--jitter-ms J] [--seconds S]
 *                [--limit L] [--seed X]
 *
 * Pending packets sit in a binary min-heap keyed by (deadline, arrival
 * number).  At most L (default 10000) are held; a packet arriving when L are
 * pending gets NF_DROP at once, which bounds memory.  The kernel queue is
 * sized above L with fail-open, so the kernel itself never drops.
 * On SIGTERM/SIGINT, after S seconds, or on a fatal error, every pending
 * packet is released (NF_ACCEPT) before exit.  "ready" is printed on stdout
 * once the queue is bound; stats go to stderr at exit.
 * Exit status: 0 clean stop, 1 runtime error (e.g. queue busy, no
 * permission), 2 bad usage. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct pending
{
    uint64_t due_ns;
    uint64_t seq;
    uint32_t id;
};

struct delayer
{
    struct nfq_q_handle *qh;
    struct pending *heap;
    size_t n, limit;
    uint64_t delay_ns, jitter_ns, seq, rng;
    uint64_t received, accepted, dropped, max_pending, reordered_due;
    uint64_t last_due;
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: deterministic for a given --seed. */
static uint64_t next_rand(struct delayer *d)
{
    d->rng ^= d->rng >> 12;
    d->rng ^= d->rng << 25;
    d->rng ^= d->rng >> 27;
    return d->rng * 2685821657736338717ull;
}

static int before(const struct pending *a, const struct pending *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_push(struct delayer *d, struct pending p)
{
    size_t i = d->n++;
    d->heap[i] = p;
    while (i > 0 && before(&d->heap[i], &d->heap[(i - 1) / 2])) {
        struct pending t = d->heap[i];
        d->heap[i] = d->heap[(i - 1) / 2];
        d->heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static struct pending heap_pop(struct delayer *d)
{
    struct pending top = d->heap[0];
    d->heap[0] = d->heap[--d->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < d->n && before(&d->heap[l], &d->heap[m])) {
            m = l;
        }
        if (r < d->n && before(&d->heap[r], &d->heap[m])) {
            m = r;
        }
        if (m == i) {
            break;
        }
        struct pending t = d->heap[i];
        d->heap[i] = d->heap[m];
        d->heap[m] = t;
        i = m;
    }
    return top;
}

static void verdict(struct delayer *d, uint32_t id, uint32_t v)
{
    if (nfq_set_verdict(d->qh, id, v, 0, NULL) < 0) {
        fprintf(stderr, "tern-delayer: verdict for packet %u: %s\n", id,
                strerror(errno));
    }
}

static int on_packet(struct nfq_q_handle *qh,
                     struct nfgenmsg *msg,
                     struct nfq_data *nfa,
                     void *arg)
{
    struct delayer *d = arg;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    (void)qh;
    (void)msg;
    if (ph == NULL) {
        return 0;
    }
    uint32_t id = ntohl(ph->packet_id);
    d->received++;
    if (d->n >= d->limit) {
        d->dropped++;
        verdict(d, id, NF_DROP);
        return 0;
    }
    int64_t delta = (int64_t)d->delay_ns;
    if (d->jitter_ns > 0) {
        delta += (int64_t)(next_rand(d) % (2 * d->jitter_ns + 1)) -
                 (int64_t)d->jitter_ns;
    }
    uint64_t due = now_ns() + (uint64_t)(delta > 0 ? delta : 0);
    if (due < d->last_due) {
        d->reordered_due++;
    }
    d->last_due = due;
    heap_push(d, (struct pending){due, d->seq++, id});
    if (d->n > d->max_pending) {
        d->max_pending = d->n;
    }
    return 0;
}

/* Accepts every packet due by t (all of them if t == UINT64_MAX). */
static void release_due(struct delayer *d, uint64_t t)
{
    while (d->n > 0 && d->heap[0].due_ns <= t) {
        struct pending p = heap_pop(d);
        verdict(d, p.id, NF_ACCEPT);
        d->accepted++;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: tern-delayer --queue N --delay-ms D [--jitter-ms J] "
            "[--seconds S] [--limit L] [--seed X]\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != 0 || s[0] == '-') {
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"queue", required_argument, NULL, 'q'},
        {"delay-ms", required_argument, NULL, 'd'},
        {"jitter-ms", required_argument, NULL, 'j'},
        {"seconds", required_argument, NULL, 's'},
        {"limit", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t queue = UINT64_MAX, delay = UINT64_MAX, jitter = 0, secs = 0;
    uint64_t limit = 10000, seed = 0x9e3779b97f4a7c15ull;
    int c, rc = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        uint64_t *dst = c == 'q'   ? &queue
                        : c == 'd' ? &delay
                        : c == 'j' ? &jitter
                        : c == 's' ? &secs
                        : c == 'l' ? &limit
                        : c == 'r' ? &seed
                                   : NULL;
        if (dst == NULL || parse_u64(optarg, dst) != 0) {
            usage();
            return 2;
        }
    }
    if (optind != argc || queue > 65535 || delay == UINT64_MAX ||
        delay > 600000 || jitter > delay + 600000 || limit == 0 ||
        limit > 1000000) {
        usage();
        return 2;
    }

    struct delayer d = {0};
    d.delay_ns = delay * 1000000u;
    d.jitter_ns = jitter * 1000000u;
    d.limit = (size_t)limit;
    d.rng = seed ? seed : 1;
    d.heap = calloc(d.limit, sizeof *d.heap);
    if (d.heap == NULL) {
        fprintf(stderr, "tern-delayer: out of memory\n");
        return 1;
    }

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct nfq_handle *h = nfq_open();
    if (h == NULL) {
        fprintf(stderr, "tern-delayer: nfq_open: %s\n", strerror(errno));
        goto err_after_heap;
    }
    d.qh = nfq_create_queue(h, (uint16_t)queue, on_packet, &d);
    if (d.qh == NULL) {
        fprintf(stderr,
                "tern-delayer: bind queue %llu: %s (queue in use, or not "
                "root in this network namespace?)\n",
                (unsigned long long)queue, strerror(errno));
        goto err_after_open;
    }
    if (nfq_set_mode(d.qh, NFQNL_COPY_META, 0) < 0 ||
        nfq_set_queue_maxlen(d.qh, (uint32_t)(d.limit + 1024)) < 0) {
        fprintf(stderr, "tern-delayer: configure queue: %s\n", strerror(errno));
        goto err_after_queue;
    }
    /* Kernel queue overflow accepts instead of dropping (best effort). */
    (void)nfq_set_queue_flags(d.qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN);
    nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);

    int fd = nfq_fd(h);
    uint64_t end = secs ? now_ns() + secs * 1000000000u : UINT64_MAX;
    uint64_t enobufs = 0;
    static char buf[65536] __attribute__((aligned));
    printf("ready queue=%llu delay_ms=%llu jitter_ms=%llu limit=%zu\n",
           (unsigned long long)queue, (unsigned long long)delay,
           (unsigned long long)jitter, d.limit);
    fflush(stdout);
    rc = 0;
    while (!g_stop) {
        uint64_t t = now_ns();
        if (t >= end) {
            break;
        }
        release_due(&d, t);
        uint64_t wake = end;
        if (d.n > 0 && d.heap[0].due_ns < wake) {
            wake = d.heap[0].due_ns;
        }
        uint64_t wait_ns = wake > t ? wake - t : 0;
        int timeout = (int)((wait_ns + 999999) / 1000000);
        if (timeout > 1000) {
            timeout = 1000;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int k = poll(&p, 1, timeout);
        if (k < 0 && errno != EINTR) {
            fprintf(stderr, "tern-delayer: poll: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (k <= 0) {
            continue;
        }
        /* Bounded batch, so a flood cannot starve the release timer. */
        for (int batch = 0; batch < 256; batch++) {
            ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n < 0 && errno == ENOBUFS) {
                enobufs++; /* the kernel accepted (fail-open) or dropped */
                continue;
            }
            if (n <= 0) {
                break;
            }
            nfq_handle_packet(h, buf, (int)n);
        }
    }
    release_due(&d, UINT64_MAX);
    fprintf(stderr,
            "tern-delayer: received=%llu accepted=%llu dropped=%llu "
            "max_pending=%llu reordered=%llu enobufs=%llu\n",
            (unsigned long long)d.received, (unsigned long long)d.accepted,
            (unsigned long long)d.dropped, (unsigned long long)d.max_pending,
            (unsigned long long)d.reordered_due, (unsigned long long)enobufs);
err_after_queue:
    nfq_destroy_queue(d.qh);
err_after_open:
    nfq_close(h);
err_after_heap:
    free(d.heap);
    return rc;
}
