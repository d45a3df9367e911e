/*
 * `tern group status`, `tern dlq list` and `tern dlq redrive`
 * (docs/WORKQUEUES.md, "Group status" and "Dead-letter queues"), on top
 * of tern_group_status, tern_queue_list_page, tern_group_fetch_ex,
 * tern_produce_messages and tern_group_commit.
 *
 * group status QUEUE [GROUP] [--json]: one line per group (every page of
 * the queue's groups without GROUP), tab-separated after a header line:
 *   group mode committed next end lag in-flight ready consumers dlq depth
 * mode is "stream" or "shared"; committed is a shared group's ack floor;
 * consumers is "id:count,..." (most leases first, "-" for none, "+N" when
 * leases of further consumers were not itemized); "*" after in-flight
 * when the server's row bound cut the counts. --json: one object per
 * line with the same fields and the settings.
 *
 * dlq list [QUEUE] [--json]: for every shared group of QUEUE (or of every
 * queue the user sees, page by page) "dlq<TAB>queue<TAB>group<TAB>depth".
 *
 * dlq redrive DLQ [--to QUEUE] [--max N] [--group NAME]: reads DLQ with
 * the stream group NAME (default tern-redrive) from its committed offset
 * up to the DLQ's end when the redrive started (at most N messages),
 * produces each message to QUEUE or to the queue its tern-dlq-queue
 * header names, with its key, tag, producer time and headers but the
 * tern-dlq-* ones, then commits the group past the batch. Batches are at
 * most 100 messages, each produced with libtern's producer id and
 * sequence number (a retry inside the call is not appended twice).
 * At-least-once: a crash (or a failed produce) after a produce and before
 * its commit leaves the batch uncommitted, and the next redrive produces
 * it again (a new process has a new producer id, so the server cannot
 * tell it is a retry): the destination may then hold those messages
 * twice; nothing is lost, and a redrive that found nothing to move moves
 * nothing. Prints "moved N", "to QUEUE: N" per destination.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CLI_REDRIVE_BATCH 100u
#define CLI_DLQ_HEADER    "tern-dlq-"

/* ---- group status ---------------------------------------------------- */

static void print_consumers(const struct tern_group_status_list *l,
                            size_t i,
                            const struct tern_group_status *g)
{
    uint64_t id;
    uint32_t held;
    if (g->n_consumers == 0 && g->others_held == 0) {
        (void)fputc('-', stdout);
    }
    for (size_t j = 0; j < g->n_consumers; j++) {
        if (tern_group_status_consumer(l, i, j, &id, &held) == 0) {
            (void)printf("%s%" PRIu64 ":%u", j > 0 ? "," : "", id, held);
        }
    }
    if (g->others_held > 0) {
        (void)printf("%s+%" PRIu64, g->n_consumers > 0 ? "," : "",
                     g->others_held);
    }
}

static void print_group_text(const struct tern_group_status_list *l, size_t i)
{
    struct tern_group_status g;
    if (tern_group_status_get(l, i, &g) != 0) {
        return;
    }
    (void)printf("%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64,
                 g.name, g.shared ? "shared" : "stream", g.committed, g.next,
                 g.end, g.lag);
    if (!g.shared) {
        /* consumers: the claim holder of a single active consumer */
        if (g.claim_holder != 0) {
            (void)printf("\t-\t-\t%" PRIu64 ":claim\t-\t-\n", g.claim_holder);
        } else {
            (void)printf("\t-\t-\t-\t-\t-\n");
        }
        return;
    }
    (void)printf("\t%" PRIu64 "%s\t%" PRIu64 "\t", g.in_flight,
                 g.partial ? "*" : "", g.ready);
    print_consumers(l, i, &g);
    (void)printf("\t%s\t%" PRIu64 "\n", g.dlq[0] != '\0' ? g.dlq : "-",
                 g.dlq_depth);
}

static void print_group_json(const char *queue,
                             const struct tern_group_status_list *l,
                             size_t i)
{
    struct tern_group_status g;
    uint64_t id;
    uint32_t held;
    if (tern_group_status_get(l, i, &g) != 0) {
        return;
    }
    (void)fputs("{\"queue\":", stdout);
    cli_json_string(stdout, queue);
    (void)fputs(",\"group\":", stdout);
    cli_json_string(stdout, g.name);
    (void)printf(",\"mode\":\"%s\",\"committed\":%" PRIu64 ",\"next\":%" PRIu64
                 ",\"start\":%" PRIu64 ",\"end\":%" PRIu64 ",\"lag\":%" PRIu64,
                 g.shared ? "shared" : "stream", g.committed, g.next, g.start,
                 g.end, g.lag);
    if (!g.shared) {
        (void)printf(",\"commit_ms\":%" PRIu64 ",\"claim_holder\":%" PRIu64
                     ",\"claim_until_ms\":%" PRIu64 "}\n",
                     g.commit_ms, g.claim_holder, g.claim_until_ms);
        return;
    }
    (void)printf(",\"in_flight\":%" PRIu64 ",\"ready\":%" PRIu64
                 ",\"oldest_deadline_ms\":%" PRIu64
                 ",\"partial\":%s,\"ack_timeout_ms\":%" PRIu64
                 ",\"max_deliveries\":%u,\"window\":%u,\"dlq\":",
                 g.in_flight, g.ready, g.oldest_deadline_ms,
                 g.partial ? "true" : "false", g.ack_timeout_ms,
                 g.max_deliveries, g.window);
    cli_json_string(stdout, g.dlq);
    (void)printf(",\"dlq_depth\":%" PRIu64 ",\"others_held\":%" PRIu64
                 ",\"consumers\":[",
                 g.dlq_depth, g.others_held);
    for (size_t j = 0; j < g.n_consumers; j++) {
        if (tern_group_status_consumer(l, i, j, &id, &held) == 0) {
            (void)printf("%s{\"id\":%" PRIu64 ",\"leases\":%u}",
                         j > 0 ? "," : "", id, held);
        }
    }
    (void)fputs("]}\n", stdout);
}

/* Every page of queue's groups (or group alone), each group to cb. 0, or
 * the first error (printed when loud). */
static int each_group(struct tern_client *c,
                      const char *queue,
                      const char *group,
                      bool loud,
                      void (*cb)(void *arg,
                                 const char *queue,
                                 const struct tern_group_status_list *l,
                                 size_t i),
                      void *arg)
{
    char after[256] = "";
    struct tern_group_status_list *l = NULL;
    struct tern_group_status g;
    int more = 1, rv = 0;
    /* Each page moves past a name: at most as many pages as groups. */
    for (unsigned page = 0; more && page < 1000000u; page++) {
        rv = tern_group_status(c, queue, group, after, 0, &l);
        if (rv != 0) {
            if (loud) {
                cli_error(c, rv, "group status %s", queue);
            }
            return rv;
        }
        size_t n = tern_group_status_count(l, &more);
        for (size_t i = 0; i < n; i++) {
            cb(arg, queue, l, i);
        }
        if (n == 0 || group != NULL ||
            tern_group_status_get(l, n - 1, &g) != 0) {
            more = 0;
        } else {
            (void)snprintf(after, sizeof after, "%s", g.name);
        }
        tern_group_status_free(l);
        l = NULL;
    }
    return 0;
}

static void group_cb(void *arg,
                     const char *queue,
                     const struct tern_group_status_list *l,
                     size_t i)
{
    if (*(int *)arg) {
        print_group_json(queue, l, i);
    } else {
        print_group_text(l, i);
    }
}

int cli_group_status(struct tern_client *c, int argc, char **argv)
{
    int json = 0, n = 0;
    const char *args[2] = {NULL, NULL};
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (n < 2 && argv[i][0] != '-') {
            args[n++] = argv[i];
        } else {
            n = 3;
        }
    }
    if (n < 1 || n > 2) {
        (void)fprintf(stderr, "tern: group status QUEUE [GROUP] [--json]\n");
        return 2;
    }
    if (!json) {
        (void)printf(
            "group\tmode\tcommitted\tnext\tend\tlag\tin-flight\t"
            "ready\tconsumers\tdlq\tdepth\n");
    }
    int rv = each_group(c, args[0], args[1], true, group_cb, &json);
    (void)fflush(stdout);
    return rv == 0 ? 0 : 1;
}

/* ---- dlq list -------------------------------------------------------- */

static void dlq_cb(void *arg,
                   const char *queue,
                   const struct tern_group_status_list *l,
                   size_t i)
{
    struct tern_group_status g;
    if (tern_group_status_get(l, i, &g) != 0 || !g.shared) {
        return;
    }
    if (*(int *)arg) {
        (void)fputs("{\"dlq\":", stdout);
        cli_json_string(stdout, g.dlq);
        (void)fputs(",\"queue\":", stdout);
        cli_json_string(stdout, queue);
        (void)fputs(",\"group\":", stdout);
        cli_json_string(stdout, g.name);
        (void)printf(",\"depth\":%" PRIu64 "}\n", g.dlq_depth);
    } else {
        (void)printf("%s\t%s\t%s\t%" PRIu64 "\n", g.dlq, queue, g.name,
                     g.dlq_depth);
    }
}

static int dlq_list(struct tern_client *c, const char *queue, int json)
{
    char after[256] = "";
    struct tern_queue_list *ql = NULL;
    int more = 1, rv;
    if (!json) {
        (void)printf("dlq\tqueue\tgroup\tdepth\n");
    }
    if (queue != NULL) {
        rv = each_group(c, queue, NULL, true, dlq_cb, &json);
        return rv == 0 ? 0 : 1;
    }
    for (unsigned page = 0; more && page < 1000000u; page++) {
        rv = tern_queue_list_page(c, after, 0, &ql, &more);
        if (rv != 0) {
            cli_error(c, rv, "queue list");
            return 1;
        }
        size_t n = tern_queue_list_count(ql);
        for (size_t i = 0; i < n; i++) {
            /* A queue the user may list but not read is left out. */
            (void)each_group(c, tern_queue_list_name(ql, i), NULL, false,
                             dlq_cb, &json);
        }
        if (n == 0) {
            more = 0;
        } else {
            (void)snprintf(after, sizeof after, "%s",
                           tern_queue_list_name(ql, n - 1));
        }
        tern_queue_list_free(ql);
    }
    (void)fflush(stdout);
    return 0;
}

/* ---- dlq redrive ----------------------------------------------------- */

/* One message of a redrive batch, its properties minus tern-dlq-*. */
struct redrive_msg
{
    char dest[256];
    char tag[TERN_TAG_MAX + 1];
    char names[TERN_HEADERS_MAX][TERN_HEADER_NAME_MAX + 1];
    struct tern_header headers[TERN_HEADERS_MAX];
    struct tern_message m;
};

/* Fill x from message i of r; dest is to, or the tern-dlq-queue header
 * without its namespace. 0, or -1 (printed) when it has no destination. */
static int redrive_msg(const struct tern_fetch_result *r,
                       size_t i,
                       const char *to,
                       struct redrive_msg *x)
{
    struct tern_message_props p;
    uint64_t off = 0;
    const void *data = NULL, *value;
    size_t len = 0, name_len, value_len;
    const char *name;
    memset(x, 0, sizeof *x);
    if (tern_fetch_result_get(r, i, &off, NULL, &data, &len) != 0 ||
        tern_fetch_result_props(r, i, &p) != 0) {
        return -1;
    }
    if (to != NULL) {
        (void)snprintf(x->dest, sizeof x->dest, "%s", to);
    }
    x->m.data = data;
    x->m.len = len;
    x->m.key = p.key;
    x->m.key_len = p.key_len;
    x->m.producer_ts_ms = p.producer_ts_ms;
    if (p.tag_len > 0) {
        (void)snprintf(x->tag, sizeof x->tag, "%.*s", (int)p.tag_len, p.tag);
        x->m.tag = x->tag;
    }
    for (size_t h = 0; h < p.n_headers && h < TERN_HEADERS_MAX; h++) {
        if (tern_fetch_result_header(r, i, h, &name, &name_len, &value,
                                     &value_len) != 0) {
            continue;
        }
        if (name_len >= strlen(CLI_DLQ_HEADER) &&
            memcmp(name, CLI_DLQ_HEADER, strlen(CLI_DLQ_HEADER)) == 0) {
            if (to == NULL && name_len == strlen("tern-dlq-queue") &&
                memcmp(name, "tern-dlq-queue", name_len) == 0) {
                const char *v = value, *pct = memchr(v, '%', value_len);
                size_t skip = pct != NULL ? (size_t)(pct - v) + 1 : 0;
                (void)snprintf(x->dest, sizeof x->dest, "%.*s",
                               (int)(value_len - skip), v + skip);
            }
            continue;
        }
        size_t k = x->m.n_headers;
        (void)snprintf(x->names[k], sizeof x->names[k], "%.*s", (int)name_len,
                       name);
        x->headers[k] = (struct tern_header){x->names[k], value, value_len};
        x->m.n_headers++;
    }
    x->m.headers = x->headers;
    if (x->dest[0] == '\0') {
        (void)fprintf(stderr,
                      "tern: dlq redrive: the message at offset %" PRIu64
                      " has no tern-dlq-queue header; name the queue with "
                      "--to\n",
                      off);
        return -1;
    }
    return 0;
}

/* Produce x[0..n) grouped by runs of one destination (order kept). */
static int redrive_produce(struct tern_client *c,
                           struct redrive_msg *x,
                           size_t n)
{
    struct tern_message m[CLI_REDRIVE_BATCH];
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && strcmp(x[j].dest, x[i].dest) == 0) {
            m[j - i] = x[j].m;
            j++;
        }
        int rv = tern_produce_messages(c, x[i].dest, m, j - i, NULL);
        if (rv != 0) {
            cli_error(c, rv, "dlq redrive: produce to %s", x[i].dest);
            return rv;
        }
        (void)printf("to %s: %zu\n", x[i].dest, j - i);
        i = j;
    }
    return 0;
}

static int dlq_redrive(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"to", required_argument, NULL, 't'},
        {"max", required_argument, NULL, 'm'},
        {"group", required_argument, NULL, 'g'},
        {NULL, 0, NULL, 0},
    };
    const char *to = NULL, *group = "tern-redrive";
    uint64_t max = UINT64_MAX, moved = 0, end = UINT64_MAX;
    struct redrive_msg *x = NULL;
    int ch, rv = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (ch == 't') {
            to = optarg;
        } else if (ch == 'g') {
            group = optarg;
        } else if (ch != 'm' || cli_parse_u64("--max", optarg, &max) != 0) {
            ch = '?';
            break;
        }
    }
    if (ch == '?' || optind + 1 != argc) {
        (void)fprintf(stderr,
                      "tern: dlq redrive DLQ [--to QUEUE] [--max N] "
                      "[--group NAME]\n");
        return 2;
    }
    const char *dlq = argv[optind];
    x = calloc(CLI_REDRIVE_BATCH, sizeof *x);
    if (x == NULL) {
        (void)fprintf(stderr, "tern: out of memory\n");
        return 1;
    }
    /* Each round moves at least one message or ends. */
    while (moved < max) {
        struct tern_fetch_options o = {0};
        struct tern_fetch_result *r = NULL;
        o.max_msgs = max - moved < CLI_REDRIVE_BATCH ? (uint32_t)(max - moved)
                                                     : CLI_REDRIVE_BATCH;
        o.properties = 1;
        rv = tern_group_fetch_ex(c, dlq, group, &o, &r);
        if (rv != 0) {
            cli_error(c, rv, "dlq redrive: fetch %s", dlq);
            break;
        }
        if (end == UINT64_MAX) {
            end = tern_fetch_result_end_offset(r); /* stop where it was */
        }
        size_t n = 0;
        uint64_t off = 0, next = tern_fetch_result_start_offset(r);
        for (size_t i = 0; i < tern_fetch_result_count(r); i++) {
            if (tern_fetch_result_get(r, i, &off, NULL, NULL, NULL) != 0 ||
                off >= end) {
                break;
            }
            if (redrive_msg(r, i, to, &x[n]) != 0) {
                rv = 1;
                break;
            }
            n++;
            next = off + 1;
        }
        if (rv == 0 && n > 0) {
            rv = redrive_produce(c, x, n);
        }
        if (rv == 0 && n > 0) {
            rv = tern_group_commit(c, dlq, group, next);
            if (rv != 0) {
                cli_error(c, rv, "dlq redrive: commit %s", dlq);
            }
        }
        tern_fetch_result_free(r);
        if (rv != 0 || n == 0) {
            break;
        }
        moved += n;
    }
    free(x);
    (void)printf("moved %" PRIu64 "\n", moved);
    (void)fflush(stdout);
    return rv == 0 ? 0 : 1;
}

int cli_dlq(struct tern_client *c, int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "list") == 0) {
        int json = 0, n = 0;
        const char *queue = NULL;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--json") == 0) {
                json = 1;
            } else if (n == 0 && argv[i][0] != '-') {
                queue = argv[i];
                n++;
            } else {
                n = 2;
            }
        }
        if (n > 1) {
            (void)fprintf(stderr, "tern: dlq list [QUEUE] [--json]\n");
            return 2;
        }
        return dlq_list(c, queue, json);
    }
    if (argc >= 2 && strcmp(argv[1], "redrive") == 0) {
        return dlq_redrive(c, argc - 1, argv + 1);
    }
    (void)fprintf(stderr,
                  "tern: dlq list [QUEUE] [--json] | dlq redrive DLQ "
                  "[--to QUEUE] [--max N] [--group NAME]\n");
    return 2;
}
