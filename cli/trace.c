/*
 * `tern message trace QUEUE OFFSET [--json]` (docs/MESSAGES.md, "Query
 * and seek"): what tern knows of one message, from tern_message_trace.
 *
 * Text form (one field per line; lines in brackets only when known):
 *   message    QUEUE offset N
 *   id         32 hex digits
 *   produced   append time, UTC ISO 8601 with ms (T ms since the epoch)
 *   producer   id P, batch seq S, message I of N   | none, message I of N
 *   size       N bytes
 *   [key       the key, bytes outside printable ASCII as \xNN]
 *   [tag       the tag]
 *   committed  raft index N, term T                | term unknown
 *   groups     N past this message (each group's latest commit)
 *     NAME committed offset N, at TIME (raft index N) | commit time unknown
 *   [  (more groups not listed)]
 *   deliveries N shared groups
 *     NAME never delivered | acknowledged or dead-lettered
 *        | leased to consumer C until TIME (delivery N)
 *        | ready at TIME (delivery N)
 *   [  (more shared groups not listed)]
 *   (the deliveries lines are left out with a server that predates them)
 * JSON form, one object: {"queue":"...","offset":N,"id":"...",
 *   "append_ms":N,"producer_id":N,"seq":N,"batch_pos":N,"batch_count":N,
 *   "size":N,"key":"...","tag":"...","raft_index":N,"term":N,
 *   "groups":[{"name":"...","committed_offset":N,"commit_ms":N,
 *   "commit_index":N}],"more_groups":false}; key and tag only when the
 *   message has them, null for an unknown term, commit_ms or
 *   commit_index; then "deliveries":[{"group":"...","state":"new" |
 *   "settled" | "leased" | "ready","count":N,"consumer_id":N,
 *   "deadline_ms":N}],"more_deliveries":false when the server sent them.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* ms since the epoch as "YYYY-MM-DDTHH:MM:SS.mmmZ" into buf. */
static void fmt_time(char *buf, size_t cap, uint64_t ms)
{
    time_t s = (time_t)(ms / 1000u);
    struct tm tm;
    char day[32];
    if (gmtime_r(&s, &tm) == NULL ||
        strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        (void)snprintf(buf, cap, "%" PRIu64 " ms", ms);
        return;
    }
    (void)snprintf(buf, cap, "%s.%03uZ", day, (unsigned)(ms % 1000u));
}

static void text_bytes(FILE *f, const void *p, size_t len)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x20 || s[i] >= 0x7f || s[i] == '\\') {
            (void)fprintf(f, "\\x%02x", s[i]);
        } else {
            (void)fputc(s[i], f);
        }
    }
}

/* A number, or null when it is 0 (unknown). */
static void json_known(FILE *f, const char *name, uint64_t v)
{
    if (v == 0) {
        (void)fprintf(f, ",\"%s\":null", name);
    } else {
        (void)fprintf(f, ",\"%s\":%" PRIu64, name, v);
    }
}

static void print_deliveries_text(const struct tern_message_trace *t,
                                  int has_deliveries)
{
    struct tern_trace_delivery d;
    char when[64];
    int more = 0;
    size_t n = tern_message_trace_delivery_count(t, &more);
    if (!has_deliveries) {
        return;
    }
    (void)printf("deliveries %zu shared groups\n", n);
    for (size_t i = 0; i < n; i++) {
        if (tern_message_trace_delivery(t, i, &d) != 0) {
            continue;
        }
        fmt_time(when, sizeof when, d.deadline_ms);
        switch (d.state) {
        case TERN_DELIVERY_NEW:
            (void)printf("  %s never delivered\n", d.group);
            break;
        case TERN_DELIVERY_SETTLED:
            (void)printf("  %s acknowledged or dead-lettered\n", d.group);
            break;
        case TERN_DELIVERY_LEASED:
            (void)printf("  %s leased to consumer %" PRIu64
                         " until %s (delivery %u)\n",
                         d.group, d.consumer_id, when, d.count);
            break;
        default:
            (void)printf("  %s ready at %s (delivery %u)\n", d.group, when,
                         d.count);
            break;
        }
    }
    if (more) {
        (void)fputs("  (more shared groups not listed)\n", stdout);
    }
}

static void print_text(const char *queue,
                       const struct tern_message_trace *t,
                       int has_deliveries)
{
    struct tern_trace_info in;
    struct tern_trace_group g;
    char when[64];
    tern_message_trace_info(t, &in);
    fmt_time(when, sizeof when, in.append_ms);
    (void)printf("message    %s offset %" PRIu64 "\n", queue, in.offset);
    (void)printf("id         %s\n", in.id);
    (void)printf("produced   %s (%" PRIu64 " ms)\n", when, in.append_ms);
    if (in.producer_id != 0) {
        (void)printf("producer   id %" PRIu64 ", batch seq %" PRIu64
                     ", message %u of %u\n",
                     in.producer_id, in.seq, in.batch_pos + 1, in.batch_count);
    } else {
        (void)printf("producer   none, message %u of %u\n", in.batch_pos + 1,
                     in.batch_count);
    }
    (void)printf("size       %u bytes\n", in.len);
    if (in.key_len > 0) {
        (void)fputs("key        ", stdout);
        text_bytes(stdout, in.key, in.key_len);
        (void)fputc('\n', stdout);
    }
    if (in.tag_len > 0) {
        (void)printf("tag        %.*s\n", (int)in.tag_len, in.tag);
    }
    if (in.term != 0) {
        (void)printf("committed  raft index %" PRIu64 ", term %" PRIu64 "\n",
                     in.raft_index, in.term);
    } else {
        (void)printf("committed  raft index %" PRIu64 ", term unknown\n",
                     in.raft_index);
    }
    (void)printf(
        "groups     %zu past this message (each group's latest "
        "commit)\n",
        in.n_groups);
    for (size_t i = 0; i < in.n_groups; i++) {
        if (tern_message_trace_group(t, i, &g) != 0) {
            continue;
        }
        (void)printf("  %s committed offset %" PRIu64, g.name,
                     g.committed_offset);
        if (g.commit_index != 0) {
            fmt_time(when, sizeof when, g.commit_ms);
            (void)printf(", at %s (raft index %" PRIu64 ")\n", when,
                         g.commit_index);
        } else {
            (void)fputs(", commit time unknown\n", stdout);
        }
    }
    if (in.more_groups) {
        (void)fputs("  (more groups not listed)\n", stdout);
    }
    print_deliveries_text(t, has_deliveries);
}

static void print_json(const char *queue,
                       const struct tern_message_trace *t,
                       int has_deliveries)
{
    struct tern_trace_info in;
    struct tern_trace_group g;
    tern_message_trace_info(t, &in);
    (void)fputs("{\"queue\":", stdout);
    cli_json_string(stdout, queue);
    (void)printf(",\"offset\":%" PRIu64 ",\"id\":\"%s\",\"append_ms\":%" PRIu64
                 ",\"producer_id\":%" PRIu64 ",\"seq\":%" PRIu64
                 ",\"batch_pos\":%u,\"batch_count\":%u,\"size\":%u",
                 in.offset, in.id, in.append_ms, in.producer_id, in.seq,
                 in.batch_pos, in.batch_count, in.len);
    if (in.key_len > 0) {
        (void)fputs(",\"key\":", stdout);
        cli_json_bytes(stdout, in.key, in.key_len);
    }
    if (in.tag_len > 0) {
        (void)fputs(",\"tag\":", stdout);
        cli_json_bytes(stdout, in.tag, in.tag_len);
    }
    (void)printf(",\"raft_index\":%" PRIu64, in.raft_index);
    json_known(stdout, "term", in.term);
    (void)fputs(",\"groups\":[", stdout);
    for (size_t i = 0; i < in.n_groups; i++) {
        if (tern_message_trace_group(t, i, &g) != 0) {
            continue;
        }
        (void)fputs(i > 0 ? ",{\"name\":" : "{\"name\":", stdout);
        cli_json_string(stdout, g.name);
        (void)printf(",\"committed_offset\":%" PRIu64, g.committed_offset);
        json_known(stdout, "commit_ms", g.commit_index != 0 ? g.commit_ms : 0);
        json_known(stdout, "commit_index", g.commit_index);
        (void)fputc('}', stdout);
    }
    (void)printf("],\"more_groups\":%s", in.more_groups ? "true" : "false");
    if (has_deliveries) {
        struct tern_trace_delivery d;
        int more = 0;
        size_t n = tern_message_trace_delivery_count(t, &more);
        (void)fputs(",\"deliveries\":[", stdout);
        for (size_t i = 0; i < n; i++) {
            if (tern_message_trace_delivery(t, i, &d) != 0) {
                continue;
            }
            (void)fputs(i > 0 ? ",{\"group\":" : "{\"group\":", stdout);
            cli_json_string(stdout, d.group);
            (void)printf(
                ",\"state\":\"%s\",\"count\":%u,\"consumer_id\":%" PRIu64
                ",\"deadline_ms\":%" PRIu64 "}",
                tern_delivery_state_name(d.state), d.count, d.consumer_id,
                d.deadline_ms);
        }
        (void)printf("],\"more_deliveries\":%s", more ? "true" : "false");
    }
    (void)fputs("}\n", stdout);
}

int cli_message_trace(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    struct tern_message_trace *t = NULL;
    uint64_t offset;
    int json = 0, ch, rv;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (ch != 'j') {
            cli_usage(stderr);
            return 2;
        }
        json = 1;
    }
    if (optind + 2 != argc) {
        cli_usage(stderr);
        return 2;
    }
    if (cli_parse_u64("OFFSET", argv[optind + 1], &offset) != 0) {
        return 2;
    }
    /* With the deliveries; a server that predates them refuses the flag. */
    int has_deliveries = 1;
    rv = tern_message_trace_ex(c, argv[optind], offset, TERN_TRACE_DELIVERIES,
                               &t);
    if (rv == TERN_EMALFORMED) {
        rv = tern_message_trace(c, argv[optind], offset, &t);
    }
    if (rv == 0) {
        has_deliveries = tern_message_trace_has_deliveries(t);
    }
    if (rv != 0) {
        cli_error(c, rv, "message trace %s %" PRIu64, argv[optind], offset);
        return 1;
    }
    if (json) {
        print_json(argv[optind], t, has_deliveries);
    } else {
        print_text(argv[optind], t, has_deliveries);
    }
    (void)fflush(stdout);
    tern_message_trace_free(t);
    return 0;
}
