/*
 * The `tern` command-line client (other engineers' scripts depend on this
 * exact syntax and output; change it only together with them):
 *
 *   tern [-s ADDR[,ADDR...]] [--timeout-ms N] [--read-from any|leader|first]
 *        [--tls] [--no-tls] [--ca FILE] [--cert FILE --key FILE] COMMAND ...
 *     servers default: $TERN_SERVERS, else 127.0.0.1:7400. Reads go to the
 *     leader, except with exactly one server given (then to that server) or
 *     as --read-from says.
 *     TLS: on with --tls, --ca or TERN_TLS=1 (--no-tls wins over all);
 *     --ca (default $TERN_CA) is the CA that verifies the servers, which
 *     must present a certificate naming the address connected to;
 *     --cert/--key (default $TERN_CERT/$TERN_KEY) a client certificate.
 *     Login: [--user NAME] [--password-file FILE] [--namespace NS]
 *     [--auth scram|external]; user, password and namespace default to
 *     $TERN_USER, $TERN_PASSWORD, $TERN_NAMESPACE (a password is never an
 *     argument). A user means SCRAM-SHA-256 with that password; --auth
 *     external logs in with the TLS client certificate (--user then
 *     names its CN, optional). The namespace ("default" when none) is
 *     the one the commands' queues live in.
 *   tern queue create NAME [RETENTION] | queue delete NAME
 *   tern queue update NAME RETENTION...   (only the options given change)
 *   tern queue info NAME [--json]
 *     RETENTION: [--max-age 72h|30m|10s|0] [--max-bytes 1G|256K|0]
 *                [--max-messages N|0] [--overflow drop-oldest|reject]
 *     (0: no limit; an option left out of create: the default, 72h,
 *     no byte or count limit, drop-oldest)
 *   tern queue list [--json] [--limit N] [--page-size N]
 *   tern produce QUEUE [--count N] [--size S] [--batch B] [--window W]
 *                      [--max-in-flight M] [--merge-bytes N]
 *                      [--ack-log FILE] [--id-prefix P]
 *                      [--key K] [--tag T] [--header NAME=VALUE]... [--raw]
 *                      [--delay 10s | --at 2026-12-04T10:00:00Z]
 *     --delay / --at: delayed messages (docs/WORKQUEUES.md), appended when
 *     the leader's clock reaches the due time (a delay with a unit: ms, s,
 *     m, h, d; a time as --from-time's); with --key, --tag, --header the
 *     messages carry them when they come due.
 *     The ack log then has "<id>\tdue=<due time ms>" lines.
 *   tern consume QUEUE [--offset N | --from-time T | --group G] [--max N]
 *                      [--follow] [--idle-exit-ms MS] [--commit]
 *                      [--tag 'a || b'] [--format raw|text|json|F]
 *                      [--delimiter D]   (--raw, --json: --format raw, json)
 *   tern consume QUEUE --group G --shared [--ack] [--max N] [--follow]
 *   tern consume QUEUE --group G --exclusive [--lease 30s] [--wait D]
 *                      [--max N] [--follow]
 *   tern group config QUEUE G --shared [--ack-timeout D]
 *                      [--max-deliveries N] [--dlq NAME]
 *   tern group status QUEUE [GROUP] [--json]   (cli/status.c)
 *   tern dlq list [QUEUE] [--json]
 *   tern dlq redrive DLQ [--to QUEUE] [--max N] [--group NAME]
 *     --from-time: from the first message appended at or after T (RFC 3339
 *     UTC such as 2026-12-04T10:00:00Z, or ms since the epoch).
 *   tern message get QUEUE --offset N | --id ID | --key K [--max N]
 *                      [--format F | --raw | --json]
 *   tern message trace QUEUE OFFSET [--json]   (cli/trace.c: produced,
 *                      committed, the groups past it)
 *   tern cluster status [--json]
 *   tern cluster stats [--reset] [--json]
 *   tern cluster add ID RAFT_ADDR CLIENT_ADDR [--wait-ms N]
 *   tern cluster remove ID   (docs/MEMBERSHIP.md)
 *   tern cluster rejoin ID RAFT_ADDR CLIENT_ADDR [--wait-ms N]
 *   tern cluster transfer [--to ID]   (hand leadership over; admin; prints
 *                      "leader: <id>" once the new leader took over)
 *   tern bench QUEUE [--size 1024] [--count N] [--window W] [--batch B]
 *                    [--max-in-flight M] [--merge-bytes N]
 *                    [--replication] [--stages] [--json]
 *                    [--mode produce|consume|e2e] [--duration D]
 *                    [--histogram-svg FILE] [--latencies FILE]
 *   tern user set NAME [--admin] [--cert]
 *                 [--password-file F | --password-stdin | --no-password]
 *   tern user delete NAME | user list [--json]
 *   tern user hash [--password-file F | --password-stdin]   (no server)
 *   tern acl set USER NS PATTERN PERMS | acl delete USER NS PATTERN
 *   tern acl list [USER] [--json]
 *   tern namespace set NS [--max-queues N] [--max-bytes N]
 *                         [--produce-rate BYTES_PER_S]
 *   tern namespace delete NS | namespace list [--json]
 *   tern admin backup [--node HOST:PORT] [--verify] [--any-state]
 *                     [--wait-ms N] DIR
 *
 * Admin output: user list "<name>\t<admin,cert|admin|cert|->\t<password|->"
 * per user; acl list "<user>\t<namespace>\t<pattern>\t<perms>" per grant
 * (perms "all" or a comma list of produce,consume,manage,admin);
 * namespace list "<name>\t<max_queues>\t<max_bytes>\t<produce_bytes_per_s>"
 * (0 = unlimited); user hash prints the credential's text form
 * (SCRAM-SHA-256$...), the value of [security] bootstrap_admin_cred.
 * `namespace set` replaces every quota (an option left out is 0).
 * The three admin lists print every entry, in order: libtern reads the
 * server's pages one after another (at most TERN_ADMIN_LIST_MAX entries).
 *
 * Message properties (docs/MESSAGES.md): produce --key, --tag and
 * --header (repeatable) give every message of the run those properties
 * (batches are then sent one at a time, each acknowledged before the
 * next); --raw sends all of stdin as one message, bytes as they are.
 * consume --tag keeps only messages with one of the tags (filtered on the
 * server; the group commit moves past the others). --format, --raw and
 * --json (directives in cli/message.c) print messages with their
 * properties and whole payloads; message get prints "<offset>\t<id>\t
 * <key>\t<tag>\t<payload>" per message unless told otherwise.
 *
 * Output formats: consume prints "<offset>\t<payload>\n" per message,
 * the payload whole with '\\', tab, newline, carriage return and other
 * control bytes escaped (--format text, cli/message.c; a shared consumer
 * puts the delivery count between the two); the ack log has
 * "<payload-id>\t<offset>\n" per acknowledged message (offset -1 when the
 * server acknowledged a retried batch as an old duplicate whose offsets
 * it no longer remembers); payload-id is the payload up to its first '.'
 * (produce --count payloads are "<id>" then '.' padding). Errors:
 * "tern: <what>: <strerror>" on stderr and a non-zero exit: 1 the server
 * refused or failed a request, 2 usage (an unknown command or global
 * option is named and fails before any connection), 3 no server could be
 * reached (every server refused the connection or did not resolve;
 * nothing was sent), 4 no answer before the deadline (outcome unknown). `tern
 * --version` prints the CLI's version and the loaded libtern's. A group
 * consume whose
 * committed offset retention trimmed says so on stderr, once per group
 * fetch that skipped: "tern: group G: N messages below the queue's first
 * offset F were trimmed before they were consumed".
 * queue info prints "<field>:\t<value>" lines (queue, first offset, next
 * offset, messages, bytes, max age, max bytes, max messages, overflow;
 * limits as 72h / 256K, 0 = none); --json one object with start_offset,
 * next_offset, messages, bytes, created_index, max_age_ms, max_bytes,
 * max_messages and overflow.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define CLI_DEFAULT_SERVERS "127.0.0.1:7400"
#define CLI_FETCH_MAX_MSGS  1000
#define CLI_FETCH_MAX_BYTES (4u << 20)
#define CLI_FOLLOW_WAIT_MS  1000

static void usage(FILE *f)
{
    (void)fprintf(
        f,
        "usage: tern [-s|--servers ADDR[,ADDR...]] [--timeout-ms N] "
        "[--read-from any|leader|first]\n"
        "            [--tls] [--no-tls] [--ca FILE] [--cert FILE --key FILE]\n"
        "            [--user NAME] [--password-file FILE] [--namespace NS] "
        "[--auth scram|external]\n"
        "            COMMAND ...\n"
        "  queue create NAME [RETENTION] | queue delete NAME\n"
        "  queue update NAME RETENTION...   (only the options given change)\n"
        "  queue info NAME [--json]\n"
        "    RETENTION: [--max-age 72h|30m|10s|0] [--max-bytes 1G|256K|0]\n"
        "               [--max-messages N|0] [--overflow drop-oldest|reject]\n"
        "    (0 = no limit; create's defaults: 72h, no byte or count limit, "
        "drop-oldest)\n"
        "  queue list [--json] [--limit N] [--page-size N]\n"
        "  produce QUEUE [--count N] [--size S] [--batch B] [--window W]\n"
        "                [--max-in-flight M] [--merge-bytes N]\n"
        "                [--ack-log FILE] [--id-prefix P]\n"
        "                [--key K] [--tag T] [--header NAME=VALUE]... "
        "[--raw]\n"
        "                [--delay 10s | --at 2026-12-04T10:00:00Z]\n"
        "  consume QUEUE [--offset N | --from-time T | --group G] [--max N] "
        "[--follow]\n"
        "                [--idle-exit-ms MS] [--commit]\n"
        "                [--tag 'a || b'] [--format raw|text|json|F] "
        "[--delimiter D]\n"
        "    (default: \"<offset>\\t<payload>\" per message, as --format "
        "text: the payload\n"
        "    whole, with \\\\, tab, newline and control bytes escaped;\n"
        "    raw: payload bytes then the delimiter, default \\n; json: one "
        "object per line;\n"
        "    --raw and --json are --format raw and --format json)\n"
        "  consume QUEUE --group G --shared [--ack] [--max N] [--follow]\n"
        "  consume QUEUE --group G --exclusive [--lease 30s] [--wait D] "
        "[--max N] [--follow]\n"
        "                [--idle-exit-ms MS]\n"
        "    (prints offset, delivery count and payload per message)\n"
        "  group config QUEUE G --shared [--ack-timeout 30s] "
        "[--max-deliveries 16]\n"
        "                [--dlq NAME]\n"
        "  group status QUEUE [GROUP] [--json]\n"
        "  dlq list [QUEUE] [--json]\n"
        "  dlq redrive DLQ [--to QUEUE] [--max N] [--group tern-redrive]\n"
        "    (T: RFC 3339 UTC such as 2026-12-04T10:00:00Z, or ms since the "
        "epoch)\n"
        "  message get QUEUE --offset N | --id ID | --key K [--max N]\n"
        "                [--format raw|text|json|F] [--delimiter D]\n"
        "    --format directives: %%o offset, %%i id, %%k key, %%t tag, "
        "%%T append time ms,\n"
        "    %%P producer time ms, %%h headers name=value,..., %%p payload, "
        "%%%% percent\n"
        "  message trace QUEUE OFFSET [--json]\n"
        "  cluster status [--json]\n"
        "  cluster stats [--reset] [--json]\n"
        "  cluster add ID RAFT_ADDR CLIENT_ADDR [--wait-ms N]\n"
        "  cluster remove ID\n"
        "  cluster rejoin ID RAFT_ADDR CLIENT_ADDR [--wait-ms N]\n"
        "  cluster transfer [--to ID]\n"
        "  bench QUEUE [--size 1024] [--count N] [--window W] "
        "[--batch B] [--replication] [--stages] [--json]\n"
        "        [--max-in-flight M] [--merge-bytes N]\n"
        "        [--mode produce|consume|e2e] [--duration D] "
        "[--histogram-svg FILE] [--latencies FILE]\n"
        "  user set NAME [--admin] [--cert] [--password-file F | "
        "--password-stdin | --no-password]\n"
        "  user delete NAME | user list [--json]\n"
        "  user hash [--password-file F | --password-stdin]\n"
        "  acl set USER NS PATTERN PERMS | acl delete USER NS PATTERN\n"
        "  acl list [USER] [--json]    (PERMS: all, or a comma list of "
        "produce,consume,manage,admin)\n"
        "  namespace set NS [--max-queues N] [--max-bytes N] "
        "[--produce-rate BYTES_PER_S]\n"
        "  namespace delete NS | namespace list [--json]\n"
        "  admin backup [--node HOST:PORT] [--verify] [--any-state]\n"
        "               [--wait-ms N] DIR\n"
        "  (user, acl and namespace list read every page of the server's "
        "list, in order)\n"
        "Login: --user NAME (or TERN_USER) with --password-file FILE (or "
        "TERN_PASSWORD)\n"
        "  logs in by SCRAM-SHA-256; --auth external by the TLS client "
        "certificate;\n"
        "  --namespace NS (or TERN_NAMESPACE) picks the namespace.\n"
        "TLS: --tls (or TERN_TLS=1, or --ca) speaks TLS 1.3 and verifies "
        "each server's\n"
        "  certificate against --ca FILE (or TERN_CA) and the address "
        "connected to;\n"
        "  --cert/--key (or TERN_CERT/TERN_KEY) present a client "
        "certificate;\n"
        "  --no-tls turns TLS off whatever the environment says.\n"
        "Servers: -s/--servers (or TERN_SERVERS; default 127.0.0.1:7400).\n"
        "tern --version prints the versions of tern and libtern; "
        "tern --help this text.\n"
        "Exit codes: 0 ok; 1 the server refused or failed a request; 2 "
        "usage error\n"
        "  (nothing sent); 3 no server reachable (connection refused, "
        "unknown host;\n"
        "  nothing sent); 4 no answer before --timeout-ms (outcome "
        "unknown).\n");
}

void cli_usage(FILE *f)
{
    usage(f);
}

/* The login from the flags and TERN_USER/TERN_PASSWORD/TERN_NAMESPACE
 * (after TLS). 0, or the exit code. */
static int cli_auth(struct tern_client *c,
                    const char *mech,
                    const char *user,
                    const char *password_file,
                    const char *ns)
{
    struct tern_auth_options o;
    char pw[CLI_PASSWORD_MAX];
    const char *env_pw = getenv("TERN_PASSWORD");
    int rv;

    user = user != NULL ? user : getenv("TERN_USER");
    ns = ns != NULL ? ns : getenv("TERN_NAMESPACE");
    if (user != NULL && user[0] == '\0') {
        user = NULL;
    }
    if (ns != NULL && ns[0] == '\0') {
        ns = NULL;
    }
    tern_auth_options_init(&o);
    o.user = user;
    o.ns = ns;
    if (mech != NULL && strcmp(mech, "external") == 0) {
        o.mechanism = TERN_AUTH_EXTERNAL;
    } else if (mech != NULL && strcmp(mech, "scram") != 0) {
        usage(stderr);
        return 2;
    } else if (mech != NULL || user != NULL) {
        o.mechanism = TERN_AUTH_SCRAM;
    } else {
        if (ns != NULL || password_file != NULL) {
            (void)fprintf(stderr,
                          "tern: a namespace or password needs a login: "
                          "--user NAME (or TERN_USER), or --auth external\n");
            return 2;
        }
        return 0;
    }
    if (o.mechanism == TERN_AUTH_SCRAM) {
        if (user == NULL) {
            (void)fprintf(stderr,
                          "tern: SCRAM login needs --user NAME (or "
                          "TERN_USER)\n");
            return 2;
        }
        if (password_file != NULL) {
            if (cli_read_password_file(password_file, pw, sizeof pw) != 0) {
                return 2;
            }
        } else if (env_pw != NULL && env_pw[0] != '\0') {
            (void)snprintf(pw, sizeof pw, "%s", env_pw);
        } else {
            (void)fprintf(stderr,
                          "tern: login as %s needs a password: "
                          "--password-file FILE or TERN_PASSWORD\n",
                          user);
            return 2;
        }
        o.password = pw;
    }
    rv = tern_client_set_auth(c, &o);
    cli_wipe(pw, sizeof pw);
    if (rv != 0) {
        cli_error(c, rv, "login setup");
        return 2;
    }
    return 0;
}

/* TLS from the flags and TERN_TLS/TERN_CA/TERN_CERT/TERN_KEY. 0, or the
 * exit code. */
static int cli_tls(struct tern_client *c,
                   int tls,
                   const char *ca,
                   const char *cert,
                   const char *key)
{
    const char *env = getenv("TERN_TLS");
    int rv;

    if (tls < 0) {
        return 0; /* --no-tls */
    }
    if (tls == 0 && ca == NULL && (env == NULL || strcmp(env, "1") != 0)) {
        return 0;
    }
    ca = ca != NULL ? ca : getenv("TERN_CA");
    cert = cert != NULL ? cert : getenv("TERN_CERT");
    key = key != NULL ? key : getenv("TERN_KEY");
    if (ca == NULL || ca[0] == '\0') {
        (void)fprintf(stderr,
                      "tern: TLS needs the servers' CA: --ca FILE "
                      "or TERN_CA\n");
        return 2;
    }
    rv = tern_client_set_tls(c, ca, cert, key);
    if (rv != 0) {
        cli_error(c, rv, "TLS setup");
        return 2;
    }
    return 0;
}

/* ---- queue ---- */

/* Print the first n queues of one page (json: a comma before all but the first
 * queue of the whole list, *first says whether none was printed yet). */
static void print_queues(const struct tern_queue_list *l,
                         size_t n,
                         int json,
                         int *first)
{
    for (size_t i = 0; i < n; i++) {
        if (json) {
            (void)printf("%s{\"name\":", *first ? "" : ",");
            cli_json_string(stdout, tern_queue_list_name(l, i));
            (void)printf(",\"start_offset\":%" PRIu64
                         ",\"next_offset\":%" PRIu64 "}",
                         tern_queue_list_start_offset(l, i),
                         tern_queue_list_next_offset(l, i));
        } else {
            (void)printf("%s\t%" PRIu64 "\t%" PRIu64 "\n",
                         tern_queue_list_name(l, i),
                         tern_queue_list_start_offset(l, i),
                         tern_queue_list_next_offset(l, i));
        }
        *first = 0;
    }
}

/* `tern queue list [--json] [--limit N] [--page-size N]`: every queue
 * (at most N with --limit), asked for page by page (--page-size queues
 * per request; default: the server's page size). */
static int cmd_queue_list(struct tern_client *c, int argc, char **argv)
{
    char after[256] = ""; /* queue names are at most 200 bytes */
    uint64_t limit = UINT64_MAX;
    uint64_t page = 0;
    uint64_t listed = 0;
    int json = 0;
    int first = 1;
    int more = 1;

    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[k], "--limit") == 0 && k + 1 < argc) {
            if (cli_parse_u64("--limit", argv[++k], &limit) != 0) {
                return 2;
            }
        } else if (strcmp(argv[k], "--page-size") == 0 && k + 1 < argc) {
            if (cli_parse_u64("--page-size", argv[++k], &page) != 0 ||
                page > UINT32_MAX) {
                return 2;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (json) {
        (void)printf("{\"queues\":[");
    }
    /* Bounded: each page lists at least one queue past the last. */
    while (more && listed < limit) {
        struct tern_queue_list *l;
        uint64_t want = limit - listed;
        uint64_t n = page > 0 ? page : UINT32_MAX;
        size_t got;
        const char *last;
        int rv;
        if (n > want) {
            n = want;
        }
        rv = tern_queue_list_page(c, after[0] != '\0' ? after : NULL,
                                  n >= UINT32_MAX ? 0 : (uint32_t)n, &l, &more);
        if (rv != 0) {
            if (json) {
                (void)printf("]}\n");
            }
            cli_error(c, rv, "queue list");
            return 1;
        }
        got = tern_queue_list_count(l);
        if (got > want) {
            got = (size_t)want; /* a server that ignored max_count */
        }
        print_queues(l, got, json, &first);
        listed += got;
        last = got > 0 ? tern_queue_list_name(l, got - 1) : NULL;
        if (more && (last == NULL || strcmp(last, after) <= 0)) {
            tern_queue_list_free(l);
            if (json) {
                (void)printf("]}\n");
            }
            cli_error(c, TERN_EMALFORMED, "queue list: page does not advance");
            return 1;
        }
        if (last != NULL) {
            (void)snprintf(after, sizeof(after), "%s", last);
        }
        tern_queue_list_free(l);
    }
    if (json) {
        (void)printf("]}\n");
    }
    return 0;
}

/* The RETENTION options in argv[0..argc) into o (initialised by the
 * caller): 0, or -1 (printed). *n_set (OUT): how many were given. */
static int parse_retention(int argc,
                           char **argv,
                           struct tern_queue_options *o,
                           int *n_set)
{
    *n_set = 0;
    /* Options come in pairs: each step consumes an option and its value. */
    for (int k = 0; k < argc; k += 2) {
        const char *a = argv[k];
        const char *v = k + 1 < argc ? argv[k + 1] : NULL;
        int bad = v == NULL;
        if (v == NULL) {
            /* an option without its value */
        } else if (strcmp(a, "--max-age") == 0) {
            bad = cli_parse_duration_ms(v, &o->max_age_ms) != 0;
        } else if (strcmp(a, "--max-bytes") == 0) {
            bad = cli_parse_size(v, &o->max_bytes) != 0 ||
                  o->max_bytes == TERN_QUEUE_DEFAULT;
        } else if (strcmp(a, "--max-messages") == 0) {
            bad = cli_parse_u64(a, v, &o->max_messages) != 0 ||
                  o->max_messages == TERN_QUEUE_DEFAULT;
        } else if (strcmp(a, "--overflow") == 0) {
            if (strcmp(v, "drop-oldest") == 0) {
                o->overflow = TERN_OVERFLOW_DROP_OLDEST;
            } else if (strcmp(v, "reject") == 0) {
                o->overflow = TERN_OVERFLOW_REJECT;
            } else {
                bad = 1;
            }
        } else {
            usage(stderr);
            return -1;
        }
        if (bad) {
            (void)fprintf(stderr, "tern: %s: bad value \"%s\" (see usage)\n", a,
                          v != NULL ? v : "");
            return -1;
        }
        (*n_set)++;
    }
    return 0;
}

/* `tern queue info NAME [--json]`. */
static int cmd_queue_info(struct tern_client *c, int argc, char **argv)
{
    struct tern_queue_info *q;
    char age[32], bytes[32];
    int json;
    int rv;
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "--json") != 0)) {
        usage(stderr);
        return 2;
    }
    json = argc == 4;
    rv = tern_queue_info(c, argv[2], &q);
    if (rv != 0) {
        cli_error(c, rv, "queue info %s", argv[2]);
        return 1;
    }
    if (json) {
        (void)printf("{\"queue\":");
        cli_json_string(stdout, argv[2]);
        (void)printf(
            ",\"start_offset\":%" PRIu64 ",\"next_offset\":%" PRIu64
            ",\"messages\":%" PRIu64 ",\"bytes\":%" PRIu64
            ",\"created_index\":%" PRIu64 ",\"max_age_ms\":%" PRIu64
            ",\"max_bytes\":%" PRIu64 ",\"max_messages\":%" PRIu64
            ",\"overflow\":",
            tern_queue_info_start_offset(q), tern_queue_info_next_offset(q),
            tern_queue_info_messages(q), tern_queue_info_bytes(q),
            tern_queue_info_created_index(q), tern_queue_info_max_age_ms(q),
            tern_queue_info_max_bytes(q), tern_queue_info_max_messages(q));
        cli_json_string(stdout,
                        tern_overflow_name(tern_queue_info_overflow(q)));
        (void)printf("}\n");
    } else {
        cli_format_duration(tern_queue_info_max_age_ms(q), age, sizeof age);
        cli_format_size(tern_queue_info_max_bytes(q), bytes, sizeof bytes);
        (void)printf("queue:\t%s\n", argv[2]);
        (void)printf("first offset:\t%" PRIu64 "\n",
                     tern_queue_info_start_offset(q));
        (void)printf("next offset:\t%" PRIu64 "\n",
                     tern_queue_info_next_offset(q));
        (void)printf("messages:\t%" PRIu64 "\n", tern_queue_info_messages(q));
        (void)printf("bytes:\t%" PRIu64 "\n", tern_queue_info_bytes(q));
        (void)printf("max age:\t%s\n",
                     tern_queue_info_max_age_ms(q) != 0 ? age : "none");
        (void)printf("max bytes:\t%s\n",
                     tern_queue_info_max_bytes(q) != 0 ? bytes : "none");
        if (tern_queue_info_max_messages(q) != 0) {
            (void)printf("max messages:\t%" PRIu64 "\n",
                         tern_queue_info_max_messages(q));
        } else {
            (void)printf("max messages:\tnone\n");
        }
        (void)printf("overflow:\t%s\n",
                     tern_overflow_name(tern_queue_info_overflow(q)));
    }
    tern_queue_info_free(q);
    return 0;
}

/* `tern queue create NAME RETENTION` / `tern queue update NAME
 * RETENTION...`. */
static int cmd_queue_settings(struct tern_client *c, int argc, char **argv)
{
    struct tern_queue_options o;
    int update = strcmp(argv[1], "update") == 0;
    int n_set = 0;
    int rv;
    tern_queue_options_init(&o);
    if (argc < 3 || argv[2][0] == '-' ||
        parse_retention(argc - 3, argv + 3, &o, &n_set) != 0) {
        if (argc < 3 || argv[2][0] == '-') {
            usage(stderr);
        }
        return 2;
    }
    if (update && n_set == 0) {
        (void)fprintf(stderr,
                      "tern: queue update %s: nothing to change "
                      "(give --max-age, --max-bytes, --max-messages "
                      "or --overflow)\n",
                      argv[2]);
        return 2;
    }
    rv = update ? tern_queue_update(c, argv[2], &o)
                : tern_queue_create_opts(c, argv[2], &o);
    if (rv != 0) {
        cli_error(c, rv, "queue %s %s", argv[1], argv[2]);
        return 1;
    }
    return 0;
}

static int cmd_queue(struct tern_client *c, int argc, char **argv)
{
    int rv;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "update") == 0 ||
        (strcmp(argv[1], "create") == 0 && argc > 3)) {
        return cmd_queue_settings(c, argc, argv);
    }
    if (strcmp(argv[1], "info") == 0) {
        return cmd_queue_info(c, argc, argv);
    }
    if (strcmp(argv[1], "create") == 0 || strcmp(argv[1], "delete") == 0) {
        int create = argv[1][0] == 'c';
        if (argc != 3) {
            usage(stderr);
            return 2;
        }
        rv = create ? tern_queue_create(c, argv[2])
                    : tern_queue_delete(c, argv[2]);
        if (rv != 0) {
            cli_error(c, rv, "queue %s %s", argv[1], argv[2]);
            return 1;
        }
        return 0;
    }
    if (strcmp(argv[1], "list") == 0) {
        return cmd_queue_list(c, argc - 1, argv + 1);
    }
    usage(stderr);
    return 2;
}

/* ---- produce ---- */

struct produce_batch;

struct produce_state
{
    FILE *ack;
    uint64_t acked;
    uint64_t failed;
    int first_error;
    char first_errmsg[512];
    int stop;
    /* Batches in submission order, so the ack log is written in
     * production order even when answers complete out of order. */
    struct produce_batch *head;
    struct produce_batch *tail;
};

/* One batch in flight: its payload ids (owned) and, once done, its
 * outcome. */
struct produce_batch
{
    struct produce_batch *next;
    struct produce_state *ps;
    struct tern_client *c;
    size_t n;
    char **ids;
    int done;
    int status;
    uint64_t base_offset; /* delayed: the due time */
    size_t count;
    int delayed;
};

static void batch_free(struct produce_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->ids[i]);
    }
    free(b->ids);
    free(b);
}

/* Write the ack lines of the completed prefix of the batch list. */
static void ack_flush(struct produce_state *ps)
{
    int wrote = 0;
    while (ps->head != NULL && ps->head->done) {
        struct produce_batch *b = ps->head;
        ps->head = b->next;
        if (ps->head == NULL) {
            ps->tail = NULL;
        }
        if (b->status == 0 && ps->ack != NULL) {
            for (size_t i = 0; i < b->n; i++) {
                if (b->delayed) {
                    (void)fprintf(ps->ack, "%s\tdue=%" PRIu64 "\n", b->ids[i],
                                  b->base_offset);
                } else if (b->count == 0) {
                    /* A duplicate whose offsets the server forgot. */
                    (void)fprintf(ps->ack, "%s\t-1\n", b->ids[i]);
                } else {
                    (void)fprintf(ps->ack, "%s\t%" PRIu64 "\n", b->ids[i],
                                  b->base_offset + i);
                }
            }
            wrote = 1;
        }
        batch_free(b);
    }
    if (wrote) {
        (void)fflush(ps->ack);
    }
}

static void produce_done(void *arg,
                         int status,
                         uint64_t base_offset,
                         size_t count)
{
    struct produce_batch *b = arg;
    struct produce_state *ps = b->ps;
    b->done = 1;
    b->status = status;
    b->base_offset = base_offset;
    b->count = count;
    if (status == 0) {
        ps->acked += b->n;
    } else {
        ps->failed += b->n;
        if (ps->first_error == 0) {
            ps->first_error = status;
            (void)snprintf(ps->first_errmsg, sizeof ps->first_errmsg, "%s",
                           tern_client_errmsg(b->c));
        }
        ps->stop = 1;
    }
    ack_flush(ps);
}

/* The properties produce gives every message (--key, --tag, --header). */
struct produce_props
{
    const char *key;
    const char *tag;
    struct tern_header headers[TERN_HEADERS_MAX];
    size_t n_headers;
    /* --delay (PRODUCE_DELAY_IN) or --at (PRODUCE_DELAY_AT): delay_ms is
     * the delay or the due time; 0 without either */
    int delay_mode;
    uint64_t delay_ms;
};
#define PRODUCE_DELAY_IN 1
#define PRODUCE_DELAY_AT 2

static int props_given(const struct produce_props *pp)
{
    return pp->key != NULL || pp->tag != NULL || pp->n_headers > 0;
}

/* Send one batch of n payloads (ids[k] is the id of payloads[k]); takes
 * ownership of ids. With properties the batch is sent synchronously. */
static int produce_send(struct tern_client *c,
                        struct produce_state *ps,
                        const char *queue,
                        char **payloads,
                        size_t *lens,
                        char **ids,
                        size_t n,
                        const struct produce_props *pp)
{
    struct tern_msg *msgs = calloc(n, sizeof *msgs);
    struct produce_batch *b = calloc(1, sizeof *b);
    int rv;
    if (msgs == NULL || b == NULL) {
        free(msgs);
        free(b);
        for (size_t i = 0; i < n; i++) {
            free(ids[i]);
        }
        free(ids);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        msgs[i].data = payloads[i];
        msgs[i].len = lens[i];
    }
    b->ps = ps;
    b->c = c;
    b->n = n;
    b->ids = ids;
    if (pp->delay_mode != 0 || props_given(pp)) {
        /* One synchronous call per batch: with properties, or delayed
         * (the due time is kept for the ack log). */
        struct tern_message *tm = calloc(n, sizeof *tm);
        uint64_t out = 0;
        if (tm == NULL) {
            free(msgs);
            batch_free(b);
            return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            tm[i].data = msgs[i].data;
            tm[i].len = msgs[i].len;
            tm[i].key = pp->key;
            tm[i].key_len = pp->key != NULL ? strlen(pp->key) : 0;
            tm[i].tag = pp->tag;
            tm[i].headers = pp->headers;
            tm[i].n_headers = pp->n_headers;
        }
        if (pp->delay_mode == PRODUCE_DELAY_IN) {
            rv = tern_produce_messages_delayed(c, queue, tm, n, pp->delay_ms,
                                               &out);
        } else if (pp->delay_mode == PRODUCE_DELAY_AT) {
            rv = tern_produce_messages_at(c, queue, tm, n, pp->delay_ms, &out);
        } else {
            rv = tern_produce_messages(c, queue, tm, n, &out);
        }
        free(tm);
        free(msgs);
        if (rv != 0 && rv != TERN_ETIMEDOUT) {
            batch_free(b);
            return rv; /* refused before or by the server: nothing sent */
        }
        b->delayed = pp->delay_mode != 0;
        if (ps->tail != NULL) {
            ps->tail->next = b;
        } else {
            ps->head = b;
        }
        ps->tail = b;
        produce_done(b, rv, out, rv == 0 ? n : 0);
        return 0;
    }
    rv = tern_produce_async(c, queue, msgs, n, produce_done, b);
    free(msgs);
    if (rv != 0) {
        batch_free(b);
        return rv;
    }
    if (ps->tail != NULL) {
        ps->tail->next = b;
    } else {
        ps->head = b;
    }
    ps->tail = b;
    return 0;
}

static int cmd_produce(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"count", required_argument, NULL, 'n'},
        {"size", required_argument, NULL, 'z'},
        {"batch", required_argument, NULL, 'b'},
        {"window", required_argument, NULL, 'w'},
        {"max-in-flight", required_argument, NULL, 'I'},
        {"merge-bytes", required_argument, NULL, 'G'},
        {"ack-log", required_argument, NULL, 'a'},
        {"id-prefix", required_argument, NULL, 'p'},
        {"key", required_argument, NULL, 'k'},
        {"tag", required_argument, NULL, 't'},
        {"header", required_argument, NULL, 'H'},
        {"raw", no_argument, NULL, 'r'},
        {"delay", required_argument, NULL, 'd'},
        {"at", required_argument, NULL, 'A'},
        {NULL, 0, NULL, 0},
    };
    struct produce_props pp;
    int raw = 0;
    uint64_t count = 0, size = 0, batch = 1, window = 1;
    int have_count = 0;
    const char *ack_path = NULL;
    char prefix_buf[64];
    const char *prefix = NULL;
    const char *queue;
    struct produce_state ps;
    uint64_t produced = 0;
    struct cli_progress prog;
    int64_t t0 = cli_now_us();
    int rv = 0;
    int ch;
    char *line = NULL;
    size_t line_cap = 0;
    int eof = 0;

    memset(&pp, 0, sizeof pp);
    optind = 1;
    int idx = 0;
    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        uint64_t *dst = NULL;
        switch (ch) {
        case 'k':
            pp.key = optarg;
            continue;
        case 't':
            pp.tag = optarg;
            continue;
        case 'r':
            raw = 1;
            continue;
        case 'd':
        case 'A':
            if (pp.delay_mode != 0 ||
                (ch == 'd' ? cli_parse_duration_ms(optarg, &pp.delay_ms)
                           : cli_parse_time_ms(optarg, &pp.delay_ms)) != 0) {
                if (pp.delay_mode != 0) {
                    (void)fprintf(stderr, "tern: --delay and --at: give one\n");
                } else if (ch == 'd') {
                    (void)fprintf(stderr,
                                  "tern: --delay %s: a duration such as 10s, "
                                  "500ms, 5m, 2h, 1d\n",
                                  optarg);
                } else {
                    (void)fprintf(stderr,
                                  "tern: --at %s: a time such as "
                                  "2026-12-04T10:00:00Z or ms since the "
                                  "epoch\n",
                                  optarg);
                }
                for (size_t h = 0; h < pp.n_headers; h++) {
                    free((char *)pp.headers[h].name);
                }
                return 2;
            }
            pp.delay_mode = ch == 'd' ? PRODUCE_DELAY_IN : PRODUCE_DELAY_AT;
            continue;
        case 'H':
            if (pp.n_headers >= TERN_HEADERS_MAX) {
                (void)fprintf(stderr, "tern: at most %d --header\n",
                              TERN_HEADERS_MAX);
                rv = 2;
            } else if (cli_parse_header(optarg, &pp.headers[pp.n_headers]) !=
                       0) {
                rv = 2;
            } else {
                pp.n_headers++;
            }
            if (rv != 0) {
                for (size_t h = 0; h < pp.n_headers; h++) {
                    free((char *)pp.headers[h].name);
                }
                return 2;
            }
            continue;
        case 'n':
            dst = &count;
            have_count = 1;
            break;
        case 'z':
            dst = &size;
            break;
        case 'b':
            dst = &batch;
            break;
        case 'w':
            dst = &window;
            break;
        case 'I':
        case 'G':
            continue; /* the client's options (cli.c cli_client_new) */
        case 'a':
            ack_path = optarg;
            continue;
        case 'p':
            prefix = optarg;
            continue;
        default:
            usage(stderr);
            return 2;
        }
        if (cli_parse_u64(opts[idx].name, optarg, dst) != 0) {
            return 2;
        }
    }
    if (optind + 1 != argc || batch == 0 || window == 0 || batch > 100000 ||
        window > 100000 || size > (64u << 20) || (raw && have_count)) {
        for (size_t h = 0; h < pp.n_headers; h++) {
            free((char *)pp.headers[h].name);
        }
        usage(stderr);
        return 2;
    }
    queue = argv[optind];
    if (prefix == NULL) {
        (void)snprintf(prefix_buf, sizeof prefix_buf, "m%ld", (long)getpid());
        prefix = prefix_buf;
    }
    memset(&ps, 0, sizeof ps);
    cli_progress_init(&prog, "produce", 1);
    if (ack_path != NULL) {
        ps.ack = fopen(ack_path, "a");
        if (ps.ack == NULL) {
            cli_error(NULL, -errno, "open %s", ack_path);
            return 1;
        }
    }

    /* Main loop: keep at most `window` batches in the client, send the
     * next batch when one completes. */
    for (;;) {
        char **payloads = NULL;
        size_t *lens = NULL;
        char **ids = NULL;
        size_t n = 0;

        while (!ps.stop && tern_client_pending(c) >= window) {
            int prv = tern_client_poll(c, -1);
            if (prv < 0) {
                rv = prv;
                ps.stop = 1;
            }
        }
        if (ps.stop || eof || (have_count && produced >= count)) {
            break;
        }
        payloads = calloc(batch, sizeof *payloads);
        lens = calloc(batch, sizeof *lens);
        ids = calloc(batch, sizeof *ids);
        if (payloads == NULL || lens == NULL || ids == NULL) {
            free(payloads);
            free(lens);
            free(ids);
            rv = -ENOMEM;
            break;
        }
        while (n < batch) {
            if (have_count) {
                char idbuf[128];
                size_t idlen, plen;
                if (produced + n >= count) {
                    break;
                }
                (void)snprintf(idbuf, sizeof idbuf, "%s-%" PRIu64, prefix,
                               produced + n);
                idlen = strlen(idbuf);
                plen = size > idlen ? size : idlen;
                payloads[n] = malloc(plen + 1);
                ids[n] = strdup(idbuf);
                if (payloads[n] == NULL || ids[n] == NULL) {
                    free(payloads[n]);
                    free(ids[n]);
                    rv = -ENOMEM;
                    break;
                }
                memcpy(payloads[n], idbuf, idlen);
                memset(payloads[n] + idlen, '.', plen - idlen);
                payloads[n][plen] = '\0';
                lens[n] = plen;
            } else if (raw) {
                /* All of stdin, bytes as they are, as one message. */
                size_t got = 0;
                if (eof) {
                    break;
                }
                for (;;) {
                    if (got == line_cap) {
                        size_t cap = line_cap != 0 ? line_cap * 2 : 65536;
                        char *nl =
                            cap <= (64u << 20) ? realloc(line, cap) : NULL;
                        if (nl == NULL) {
                            rv = cap <= (64u << 20) ? -ENOMEM : TERN_ETOOBIG;
                            break;
                        }
                        line = nl;
                        line_cap = cap;
                    }
                    size_t k = fread(line + got, 1, line_cap - got, stdin);
                    if (k == 0) {
                        break;
                    }
                    got += k;
                }
                eof = 1;
                if (rv != 0) {
                    break;
                }
                payloads[n] = malloc(got != 0 ? got : 1);
                ids[n] = strdup("raw");
                if (payloads[n] == NULL || ids[n] == NULL) {
                    free(payloads[n]);
                    free(ids[n]);
                    rv = -ENOMEM;
                    break;
                }
                if (got > 0) {
                    memcpy(payloads[n], line, got);
                }
                lens[n] = got;
            } else {
                ssize_t got = getline(&line, &line_cap, stdin);
                if (got < 0) {
                    eof = 1;
                    break;
                }
                if (got > 0 && line[got - 1] == '\n') {
                    line[--got] = '\0';
                }
                payloads[n] = strdup(line);
                ids[n] = strdup(line);
                if (payloads[n] == NULL || ids[n] == NULL) {
                    free(payloads[n]);
                    free(ids[n]);
                    rv = -ENOMEM;
                    break;
                }
                lens[n] = (size_t)got;
            }
            n++;
        }
        if (n > 0 && rv == 0) {
            rv = produce_send(c, &ps, queue, payloads, lens, ids, n, &pp);
            if (rv != 0) {
                cli_error(c, rv, "produce to %s", queue);
            } else {
                produced += n;
            }
            ids = NULL; /* owned by the batch (or freed) now */
        }
        for (size_t i = 0; i < n; i++) {
            free(payloads[i]);
            if (ids != NULL) {
                free(ids[i]);
            }
        }
        free(payloads);
        free(lens);
        free(ids);
        if (rv != 0) {
            break;
        }
        cli_progress_tick(&prog, ps.acked);
    }
    /* Drain what is in flight; their outcome decides the exit code too. */
    while (tern_client_pending(c) > 0) {
        int prv = tern_client_poll(c, -1);
        if (prv < 0) {
            rv = rv != 0 ? rv : prv;
            break;
        }
        cli_progress_tick(&prog, ps.acked);
    }
    cli_progress_end(&prog);
    free(line);
    for (size_t h = 0; h < pp.n_headers; h++) {
        free((char *)pp.headers[h].name);
    }
    if (ps.ack != NULL) {
        (void)fclose(ps.ack);
    }
    if (ps.first_error != 0) {
        cli_note_error(ps.first_error);
        (void)fprintf(stderr, "tern: produce %s: %s%s%s%s\n", queue,
                      tern_strerror(ps.first_error),
                      ps.first_errmsg[0] != '\0' ? " (" : "", ps.first_errmsg,
                      ps.first_errmsg[0] != '\0' ? ")" : "");
    } else if (rv != 0) {
        cli_error(c, rv, "produce %s", queue);
    }
    (void)fprintf(stderr,
                  "tern: produce %s: %" PRIu64 " acknowledged, %" PRIu64
                  " failed, %" PRIu64 " not sent, %.3f s\n",
                  queue, ps.acked, ps.failed, produced - ps.acked - ps.failed,
                  (double)(cli_now_us() - t0) / 1e6);
    return rv == 0 && ps.first_error == 0 && ps.acked == produced ? 0 : 1;
}

/* ---- consume ---- */

static int consume_retryable(int rv)
{
    return rv != TERN_ENOQUEUE && rv != TERN_EBADNAME && rv != TERN_EOFFSET &&
           rv != TERN_EINVAL && rv != -ENOMEM;
}

/* The progress line of `tern consume` (when stdout is not a terminal). */
static struct cli_progress consume_prog;

static int consume_run(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"offset", required_argument, NULL, 'o'},
        {"group", required_argument, NULL, 'g'},
        {"max", required_argument, NULL, 'm'},
        {"follow", no_argument, NULL, 'f'},
        {"idle-exit-ms", required_argument, NULL, 'i'},
        {"commit", no_argument, NULL, 'c'},
        {"tag", required_argument, NULL, 't'},
        {"format", required_argument, NULL, 'F'},
        {"raw", no_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"delimiter", required_argument, NULL, 'D'},
        {"from-time", required_argument, NULL, 'T'},
        {"shared", no_argument, NULL, 'S'},
        {"ack", no_argument, NULL, 'A'},
        {"exclusive", no_argument, NULL, 'X'},
        {"lease", required_argument, NULL, 'L'},
        {"wait", required_argument, NULL, 'W'},
        {NULL, 0, NULL, 0},
    };
    int shared = 0, ack = 0, exclusive = 0;
    uint64_t lease_ms = 30000, excl_wait_ms = 0;
    const char *tags = NULL;
    struct cli_print pr;
    int props = 0;
    uint64_t committed = UINT64_MAX; /* last offset this run committed */
    uint64_t offset = 0, max = 0, idle_ms = 0;
    const char *from_time = NULL;
    int have_offset = 0, have_max = 0, have_idle = 0, follow = 0, commit = 0;
    const char *group = NULL;
    const char *queue;
    uint64_t printed = 0;
    int64_t last_msg_us;
    int group_pending;
    int ch;

    cli_print_init(&pr, "%p");
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'o':
            if (cli_parse_u64("--offset", optarg, &offset) != 0) {
                return 2;
            }
            have_offset = 1;
            break;
        case 'g':
            group = optarg;
            break;
        case 'm':
            if (cli_parse_u64("--max", optarg, &max) != 0) {
                return 2;
            }
            have_max = 1;
            break;
        case 'f':
            follow = 1;
            break;
        case 'i':
            if (cli_parse_u64("--idle-exit-ms", optarg, &idle_ms) != 0) {
                return 2;
            }
            have_idle = 1;
            break;
        case 'c':
            commit = 1;
            break;
        case 't':
            tags = optarg;
            break;
        case 'T':
            from_time = optarg;
            break;
        case 'S':
            shared = 1;
            break;
        case 'A':
            ack = 1;
            break;
        case 'X':
            exclusive = 1;
            break;
        case 'L':
        case 'W':
            if (cli_parse_duration_ms(
                    optarg, ch == 'L' ? &lease_ms : &excl_wait_ms) != 0 ||
                (ch == 'L' && lease_ms < 3)) {
                (void)fprintf(stderr, "tern: %s: bad duration \"%s\"\n",
                              ch == 'L' ? "--lease" : "--wait", optarg);
                return 2;
            }
            exclusive = exclusive || ch == 'L';
            break;
        default:
            /* --format, --raw, --json and --delimiter. */
            if (cli_print_option(ch, optarg, &pr) != 0) {
                return 2;
            }
            break;
        }
    }
    /* JSON and format strings print properties: ask for them. */
    props =
        pr.given && (pr.mode == CLI_PRINT_JSON || pr.mode == CLI_PRINT_FORMAT);
    if (optind + 1 != argc || (have_offset && group != NULL) ||
        (commit && group == NULL) ||
        (from_time != NULL && (have_offset || group != NULL))) {
        usage(stderr);
        return 2;
    }
    queue = argv[optind];
    pr.queue = queue;
    if (exclusive) {
        if (shared || ack || group == NULL || have_offset ||
            from_time != NULL || commit || tags != NULL || pr.given) {
            usage(stderr);
            return 2;
        }
        return cli_exclusive_consume(c, queue, group, lease_ms, excl_wait_ms,
                                     have_max ? max : 0, follow);
    }
    if (shared || ack) {
        if (!shared || group == NULL || have_offset || from_time != NULL ||
            commit || tags != NULL || pr.given) {
            usage(stderr);
            return 2;
        }
        return cli_shared_consume(c, queue, group, ack, have_max ? max : 0,
                                  follow, have_idle ? idle_ms : 0);
    }
    if (from_time != NULL) {
        uint64_t t;
        int rv;
        if (cli_parse_time_ms(from_time, &t) != 0) {
            (void)fprintf(stderr,
                          "tern: --from-time: bad time \"%s\" (RFC 3339 "
                          "UTC such as 2026-12-04T10:00:00Z, or ms since "
                          "the epoch)\n",
                          from_time);
            return 2;
        }
        rv = tern_offset_for_time(c, queue, t, &offset);
        if (rv != 0) {
            cli_error(c, rv, "consume %s: offset for %s", queue, from_time);
            return 1;
        }
    }
    group_pending = group != NULL;
    last_msg_us = cli_now_us();
    cli_progress_init(&consume_prog, "consume", !isatty(STDOUT_FILENO));

    while (!have_max || printed < max) {
        struct tern_fetch_result *r = NULL;
        uint32_t want = CLI_FETCH_MAX_MSGS;
        uint32_t wait_ms = 0;
        int rv;
        size_t n;
        if (have_max && max - printed < want) {
            want = (uint32_t)(max - printed);
        }
        if (follow) {
            wait_ms = CLI_FOLLOW_WAIT_MS;
            if (have_idle) {
                int64_t idle_left =
                    (int64_t)idle_ms - (cli_now_us() - last_msg_us) / 1000;
                if (idle_left <= 0) {
                    break;
                }
                if ((uint64_t)idle_left < wait_ms) {
                    wait_ms = (uint32_t)idle_left;
                }
            }
        }
        /* Without a filter or properties these are the plain fetch and
         * group fetch, on the wire too. */
        struct tern_fetch_options fo = {want, CLI_FETCH_MAX_BYTES, wait_ms,
                                        tags, props};
        rv = group_pending ? tern_group_fetch_ex(c, queue, group, &fo, &r)
                           : tern_fetch_ex(c, queue, offset, &fo, &r);
        if (rv != 0) {
            if (follow && consume_retryable(rv)) {
                /* Keep following through elections and restarts; the
                 * idle timer still bounds the run. */
                struct timespec ts = {0, 100000000L};
                (void)nanosleep(&ts, NULL);
                continue;
            }
            cli_error(c, rv, "consume %s", queue);
            return 1;
        }
        if (group_pending && tern_fetch_result_skipped(r) > 0) {
            (void)fprintf(stderr,
                          "tern: group %s: %" PRIu64
                          " messages below the queue's first offset %" PRIu64
                          " were trimmed before they were consumed\n",
                          group, tern_fetch_result_skipped(r),
                          tern_fetch_result_start_offset(r));
        }
        n = tern_fetch_result_count(r);
        for (size_t i = 0; i < n; i++) {
            uint64_t off;
            const void *data;
            size_t len;
            printed++;
            if (pr.given) {
                (void)cli_print_message(r, i, &pr);
                continue;
            }
            (void)tern_fetch_result_get(r, i, &off, NULL, &data, &len);
            (void)printf("%" PRIu64 "\t", off);
            cli_print_payload(stdout, data, len);
        }
        (void)fflush(stdout);
        cli_progress_tick(&consume_prog, printed);
        /* A tag filter may answer no message and still move on: the
         * skipped messages count as read (and are committed past). */
        uint64_t next = tern_fetch_result_next_offset(r);
        int moved = n > 0 || (tags != NULL && next != offset);
        if (n > 0) {
            last_msg_us = cli_now_us();
        }
        if (moved) {
            offset = next;
            if (group != NULL && commit && next != committed) {
                rv = tern_group_commit(c, queue, group, offset);
                if (rv != 0) {
                    cli_error(c, rv, "commit %s/%s", queue, group);
                    tern_fetch_result_free(r);
                    return 1;
                }
                committed = next;
            }
            /* Without --commit the group offset does not move: continue
             * from where this fetch ended. */
            group_pending = group != NULL && commit;
        } else if (group_pending && !commit) {
            offset = next;
            group_pending = 0;
        }
        if (!follow && ((n == 0 && tags == NULL) ||
                        next >= tern_fetch_result_end_offset(r))) {
            tern_fetch_result_free(r);
            break;
        }
        tern_fetch_result_free(r);
    }
    return 0;
}

static int cmd_consume(struct tern_client *c, int argc, char **argv)
{
    int code;
    memset(&consume_prog, 0, sizeof consume_prog);
    code = consume_run(c, argc, argv);
    cli_progress_end(&consume_prog);
    return code;
}

/* ---- cluster stats ---- */

/* `tern cluster stats [--reset] [--json]`: the replication latency summary
 * of the server reads go to (the leader by default). */
static int cmd_stats(struct tern_client *c, int argc, char **argv)
{
    struct tern_repl_stats st;
    int json = 0, reset = 0;
    int rv;
    for (int k = 2; k < argc; k++) {
        if (strcmp(argv[k], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[k], "--reset") == 0) {
            reset = 1;
        } else {
            usage(stderr);
            return 2;
        }
    }
    rv = tern_replication_stats(c, NULL, reset, &st);
    if (rv != 0) {
        cli_error(c, rv, "cluster stats");
        return 1;
    }
    if (json) {
        (void)printf("{\"server\":");
        cli_json_string(stdout, st.server);
        (void)printf(",\"node_id\":%" PRIu64 ",\"role\":", st.node_id);
        cli_json_string(stdout, tern_role_name(st.role));
        (void)printf(",\"transport\":");
        cli_json_string(stdout, st.transport);
        (void)printf(",\"durability\":");
        cli_json_string(stdout, st.durability);
        (void)printf(",\"count\":%" PRIu64 ",\"dropped\":%" PRIu64
                     ",\"replication_ns\":{\"min\":%" PRIu64 ",\"p50\":%" PRIu64
                     ",\"p90\":%" PRIu64 ",\"p99\":%" PRIu64
                     ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64
                     ",\"mean\":%" PRIu64 "}}\n",
                     st.count, st.dropped, st.min_ns, st.p50_ns, st.p90_ns,
                     st.p99_ns, st.p999_ns, st.max_ns, st.mean_ns);
        return 0;
    }
    (void)printf("server:        %s\n", st.server);
    (void)printf("node id:       %" PRIu64 "\n", st.node_id);
    (void)printf("role:          %s\n", tern_role_name(st.role));
    (void)printf("transport:     %s\n", st.transport);
    (void)printf("durability:    %s\n", st.durability);
    (void)printf("samples:       %" PRIu64 " (%" PRIu64 " dropped)\n", st.count,
                 st.dropped);
    (void)printf("replication (leader append->commit), us:\n");
    (void)printf(
        "  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  "
        "max %.1f  mean %.1f\n",
        (double)st.min_ns / 1e3, (double)st.p50_ns / 1e3,
        (double)st.p90_ns / 1e3, (double)st.p99_ns / 1e3,
        (double)st.p999_ns / 1e3, (double)st.max_ns / 1e3,
        (double)st.mean_ns / 1e3);
    if (reset) {
        (void)printf("(counters reset)\n");
    }
    return 0;
}

/* ---- cluster status ---- */

/* The node's pending delayed messages (left out for a server that
 * predates the count). */
static void print_timers_text(const struct tern_status *s)
{
    uint64_t pending, oldest;
    if (tern_status_timers(s, &pending, &oldest) != 0) {
        return;
    }
    (void)printf("timers:        %" PRIu64 " pending", pending);
    if (pending > 0) {
        (void)printf(", oldest due %" PRIu64 " ms", oldest);
    }
    (void)printf("\n");
}

static void print_timers_json(const struct tern_status *s)
{
    uint64_t pending, oldest;
    if (tern_status_timers(s, &pending, &oldest) == 0) {
        (void)printf(",\"timers_pending\":%" PRIu64
                     ",\"timers_oldest_due_ms\":%" PRIu64,
                     pending, oldest);
    }
}

/* `tern cluster add ID RAFT_ADDR CLIENT_ADDR [--wait-ms N]`, `tern
 * cluster remove ID` and `tern cluster rejoin ID RAFT_ADDR CLIENT_ADDR
 * [--wait-ms N]` (remove, when it is a member, then add: a node that lost
 * its data comes back as a voter only this way, docs/MEMBERSHIP.md):
 * membership changes, answered once done. */
static int cmd_member(struct tern_client *c, int argc, char **argv)
{
    uint64_t id = 0;
    uint64_t wait_ms = 0;
    bool rejoin = strcmp(argv[1], "rejoin") == 0;
    bool add = rejoin || strcmp(argv[1], "add") == 0;
    int rv;
    if ((add && argc != 5 && argc != 7) || (!add && argc != 3) ||
        (add && argc == 7 && strcmp(argv[5], "--wait-ms") != 0)) {
        usage(stderr);
        return 2;
    }
    if (cli_parse_u64("ID", argv[2], &id) != 0 || id == 0) {
        (void)fprintf(stderr, "tern: cluster %s: ID must be a number > 0\n",
                      argv[1]);
        return 2;
    }
    if (add && argc == 7 &&
        (cli_parse_u64("--wait-ms", argv[6], &wait_ms) != 0 ||
         wait_ms > UINT32_MAX)) {
        return 2;
    }
    if (rejoin) {
        rv = tern_cluster_remove(c, id);
        if (rv != 0 && rv != TERN_ENOTMEMBER) {
            cli_error(c, rv, "cluster rejoin: remove");
            return 1;
        }
    }
    rv = add ? tern_cluster_add(c, id, argv[3], argv[4], (uint32_t)wait_ms)
             : tern_cluster_remove(c, id);
    if (rv != 0) {
        cli_error(c, rv,
                  rejoin ? "cluster rejoin: add"
                  : add  ? "cluster add"
                         : "cluster remove");
        return 1;
    }
    (void)printf("node %" PRIu64 " %s\n", id,
                 rejoin ? "rejoined: voter"
                 : add  ? "added: voter"
                        : "removed");
    return 0;
}

/* A version for JSON: the string, or null when unknown. */
static void print_version_json(const char *v)
{
    if (v[0] != '\0') {
        cli_json_string(stdout, v);
    } else {
        (void)printf("null");
    }
}

/* `tern cluster transfer [--to ID]`: hand the leadership over to node ID
 * (default: a caught-up voter the leader picks) and print the new leader
 * once it took over. */
static int cmd_transfer(struct tern_client *c, int argc, char **argv)
{
    uint64_t to = 0, leader = 0;
    int rv;
    for (int k = 2; k < argc; k++) {
        if (strcmp(argv[k], "--to") == 0 && k + 1 < argc) {
            if (cli_parse_u64("--to", argv[++k], &to) != 0) {
                return 2;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    rv = tern_cluster_transfer(c, to, &leader);
    if (rv != 0) {
        cli_error(c, rv, "cluster transfer");
        return 1;
    }
    (void)printf("leader: %" PRIu64 "\n", leader);
    return 0;
}

static int cmd_cluster(struct tern_client *c, int argc, char **argv)
{
    struct tern_status *s;
    char(*ver)[CLI_VERSION_MAX];
    int json;
    int rv;
    if (argc >= 2 && strcmp(argv[1], "stats") == 0) {
        return cmd_stats(c, argc, argv);
    }
    if (argc >= 2 &&
        (strcmp(argv[1], "add") == 0 || strcmp(argv[1], "remove") == 0 ||
         strcmp(argv[1], "rejoin") == 0)) {
        return cmd_member(c, argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "transfer") == 0) {
        return cmd_transfer(c, argc, argv);
    }
    if (argc < 2 || strcmp(argv[1], "status") != 0 || argc > 3 ||
        (argc == 3 && strcmp(argv[2], "--json") != 0)) {
        usage(stderr);
        return 2;
    }
    json = argc == 3;
    rv = tern_cluster_status(c, NULL, &s);
    if (rv != 0) {
        cli_error(c, rv, "cluster status");
        return 1;
    }
    /* Every member's version, "" unknown (at least one entry). */
    ver = calloc(tern_status_member_count(s) + 1, sizeof *ver);
    if (ver == NULL) {
        tern_status_free(s);
        cli_error(c, -ENOMEM, "cluster status");
        return 1;
    }
    cli_member_versions(s, ver);
    if (json) {
        (void)printf("{\"server\":");
        cli_json_string(stdout, tern_status_server(s));
        (void)printf(",\"node_id\":%" PRIu64 ",\"role\":",
                     tern_status_node_id(s));
        cli_json_string(stdout, tern_role_name(tern_status_role(s)));
        (void)printf(",\"leader_id\":%" PRIu64 ",\"leader_address\":",
                     tern_status_leader_id(s));
        cli_json_string(stdout, tern_status_leader_address(s));
        (void)printf(",\"term\":%" PRIu64 ",\"commit_index\":%" PRIu64
                     ",\"last_applied\":%" PRIu64
                     ",\"writable\":%s,\"transport\":",
                     tern_status_term(s), tern_status_commit_index(s),
                     tern_status_last_applied(s),
                     tern_status_writable(s) ? "true" : "false");
        cli_json_string(stdout, tern_status_transport(s));
        (void)printf(",\"durability\":");
        cli_json_string(stdout, tern_status_durability(s));
        (void)printf(",\"version\":");
        print_version_json(tern_status_version(s));
        (void)printf(",\"members\":[");
        for (size_t i = 0; i < tern_status_member_count(s); i++) {
            (void)printf("%s{\"id\":%" PRIu64 ",\"raft_address\":",
                         i ? "," : "", tern_status_member_id(s, i));
            cli_json_string(stdout, tern_status_member_raft_address(s, i));
            (void)printf(",\"client_address\":");
            cli_json_string(stdout, tern_status_member_client_address(s, i));
            if (tern_status_member_role(s, i) >= 0) {
                (void)printf(",\"role\":");
                cli_json_string(stdout, tern_member_role_name(
                                            tern_status_member_role(s, i)));
            }
            (void)printf(",\"version\":");
            print_version_json(ver[i]);
            (void)printf("}");
        }
        (void)printf("]");
        if (tern_status_self_role(s) >= 0) {
            (void)printf(",\"member_role\":");
            cli_json_string(stdout,
                            tern_member_role_name(tern_status_self_role(s)));
        }
        print_timers_json(s);
        (void)printf("}\n");
    } else {
        (void)printf("server:        %s\n", tern_status_server(s));
        (void)printf("node id:       %" PRIu64 "\n", tern_status_node_id(s));
        (void)printf("version:       %s\n", tern_status_version(s)[0] != '\0'
                                                ? tern_status_version(s)
                                                : "-");
        (void)printf("role:          %s\n",
                     tern_role_name(tern_status_role(s)));
        (void)printf("leader:        %" PRIu64 " %s\n",
                     tern_status_leader_id(s),
                     tern_status_leader_address(s)[0] != '\0'
                         ? tern_status_leader_address(s)
                         : "-");
        (void)printf("term:          %" PRIu64 "\n", tern_status_term(s));
        (void)printf("commit index:  %" PRIu64 "\n",
                     tern_status_commit_index(s));
        (void)printf("last applied:  %" PRIu64 "\n",
                     tern_status_last_applied(s));
        (void)printf("writable:      %s\n",
                     tern_status_writable(s) ? "yes" : "no");
        (void)printf("transport:     %s\n", tern_status_transport(s));
        (void)printf("durability:    %s\n", tern_status_durability(s));
        print_timers_text(s);
        if (tern_status_self_role(s) == TERN_MEMBER_ABSENT) {
            (void)printf(
                "membership:    absent: not in the cluster "
                "configuration; waiting to be added\n");
        } else if (tern_status_self_role(s) >= 0) {
            (void)printf("membership:    %s\n",
                         tern_member_role_name(tern_status_self_role(s)));
        }
        (void)printf("members:\n");
        for (size_t i = 0; i < tern_status_member_count(s); i++) {
            (void)printf("  %" PRIu64 "  raft %s  client %s  version %s\n",
                         tern_status_member_id(s, i),
                         tern_status_member_raft_address(s, i),
                         tern_status_member_client_address(s, i),
                         ver[i][0] != '\0' ? ver[i] : "-");
        }
        if (tern_status_self_role(s) >= 0) {
            /* Each member's role in the configuration the node knows. */
            (void)printf("roles:        ");
            for (size_t i = 0; i < tern_status_member_count(s); i++) {
                (void)printf(
                    " %" PRIu64 " %s", tern_status_member_id(s, i),
                    tern_member_role_name(tern_status_member_role(s, i)));
            }
            (void)printf("\n");
        }
    }
    free(ver);
    tern_status_free(s);
    return 0;
}

/* ---- main ---- */

/* The options main takes before the command (each with a value). */
static bool global_option(const char *a)
{
    static const char *const names[] = {
        "-s",     "--servers", "--timeout-ms", "--read-from",     "--ca",
        "--cert", "--key",     "--user",       "--password-file", "--namespace",
        "--auth"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (strcmp(a, names[k]) == 0) {
            return true;
        }
    }
    return false;
}

/* The commands main dispatches (a word for anything else fails at once,
 * before any connection). */
static bool known_command(const char *w)
{
    static const char *const names[] = {
        "queue",   "produce", "consume", "message", "group",     "dlq",
        "cluster", "bench",   "user",    "acl",     "namespace", "admin"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (strcmp(w, names[k]) == 0) {
            return true;
        }
    }
    return false;
}

/* The connection settings main used, for cli_client_new. */
static struct
{
    const char *servers;
    struct tern_client_options o;
    int tls;
    const char *ca, *cert, *key;
    const char *mech, *user, *pwfile, *ns;
} conf;

/* A client to servers with options o (borrowed for the call) and the
 * TLS and login main set up: cli_client_new's contract. */
static int client_new_with(const char *servers,
                           const struct tern_client_options *o,
                           struct tern_client **out)
{
    struct tern_client *c;
    int rv = tern_client_new(servers, o, &c);
    if (rv != 0) {
        cli_error(NULL, rv, "servers \"%s\"", servers);
        return -1;
    }
    if (cli_tls(c, conf.tls, conf.ca, conf.cert, conf.key) != 0 ||
        cli_auth(c, conf.mech, conf.user, conf.pwfile, conf.ns) != 0) {
        tern_client_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

int cli_client_new(struct tern_client **out)
{
    return client_new_with(conf.servers, &conf.o, out);
}

int cli_client_probe_new(const char *server,
                         int timeout_ms,
                         struct tern_client **out)
{
    struct tern_client_options o = conf.o;
    o.read_from = TERN_READ_FIRST;
    o.connect_timeout_ms = timeout_ms;
    if (o.request_timeout_ms == 0 || o.request_timeout_ms > timeout_ms) {
        o.request_timeout_ms = timeout_ms;
    }
    return client_new_with(server, &o, out);
}

int main(int argc, char **argv)
{
    const char *servers = getenv("TERN_SERVERS");
    struct tern_client_options o;
    struct tern_client *c = NULL;
    const char *read_from = NULL;
    const char *ca = NULL;
    const char *cert = NULL;
    const char *key = NULL;
    const char *auth_mech = NULL;
    const char *auth_user = NULL;
    const char *auth_pwfile = NULL;
    const char *auth_ns = NULL;
    int tls = 0;
    int i = 1;
    int rv;
    int code;

    if (servers == NULL || servers[0] == '\0') {
        servers = CLI_DEFAULT_SERVERS;
    }
    tern_client_options_init(&o);
    /* Global options come before the command. */
    while (i < argc && argv[i][0] == '-') {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            int lib = tern_version_number();
            (void)printf("tern %d.%d.%d (libtern %d.%d.%d)\n",
                         TERN_VERSION_MAJOR, TERN_VERSION_MINOR,
                         TERN_VERSION_PATCH, lib / 10000, lib / 100 % 100,
                         lib % 100);
            return 0;
        }
        if (strcmp(a, "--tls") == 0 || strcmp(a, "--no-tls") == 0) {
            tls = strcmp(a, "--tls") == 0 && tls >= 0 ? 1 : -1;
            i++;
            continue;
        }
        if (!global_option(a)) {
            (void)fprintf(stderr,
                          "tern: unknown option '%s' (tern --help lists "
                          "them)\n",
                          a);
            return 2;
        }
        if (val == NULL) {
            (void)fprintf(stderr, "tern: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "-s") == 0 || strcmp(a, "--servers") == 0) {
            servers = val;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            if (cli_parse_u64(a, val, &v) != 0) {
                return 2;
            }
            if (v == 0 || v > INT32_MAX) {
                (void)fprintf(stderr,
                              "tern: --timeout-ms %s: a request timeout of "
                              "1..%d ms\n",
                              val, INT32_MAX);
                return 2;
            }
            o.request_timeout_ms = (int)v;
        } else if (strcmp(a, "--read-from") == 0) {
            read_from = val;
        } else if (strcmp(a, "--ca") == 0) {
            ca = val;
        } else if (strcmp(a, "--cert") == 0) {
            cert = val;
        } else if (strcmp(a, "--key") == 0) {
            key = val;
        } else if (strcmp(a, "--user") == 0) {
            auth_user = val;
        } else if (strcmp(a, "--password-file") == 0) {
            auth_pwfile = val;
        } else if (strcmp(a, "--namespace") == 0) {
            auth_ns = val;
        } else if (strcmp(a, "--auth") == 0) {
            auth_mech = val;
        }
        i += 2;
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (!known_command(argv[i])) {
        (void)fprintf(stderr,
                      "tern: unknown command '%s' (tern --help lists them)\n",
                      argv[i]);
        return 2;
    }
    if (strcmp(argv[i], "user") == 0 && i + 1 < argc &&
        strcmp(argv[i + 1], "hash") == 0) {
        return cli_user_hash(argc - i, argv + i); /* no server */
    }
    if (read_from == NULL) {
        o.read_from =
            strchr(servers, ',') == NULL ? TERN_READ_FIRST : TERN_READ_LEADER;
    } else if (strcmp(read_from, "any") == 0) {
        o.read_from = TERN_READ_ANY;
    } else if (strcmp(read_from, "leader") == 0) {
        o.read_from = TERN_READ_LEADER;
    } else if (strcmp(read_from, "first") == 0) {
        o.read_from = TERN_READ_FIRST;
    } else {
        (void)fprintf(stderr, "tern: --read-from %s: any, leader or first\n",
                      read_from);
        return 2;
    }
    /* produce/bench: --window W is how many calls they keep pending;
     * libtern's own window of batches on the wire (max_in_flight, 32 by
     * default) and its merging of the calls waiting behind it are
     * --max-in-flight and --merge-bytes (0: no merging). */
    for (int k = i + 1; k + 1 < argc; k++) {
        uint64_t v;
        if (strcmp(argv[k], "--max-in-flight") == 0) {
            if (cli_parse_u64("--max-in-flight", argv[k + 1], &v) != 0) {
                return 2;
            }
            if (v == 0 || v > 100000) {
                (void)fprintf(stderr, "tern: --max-in-flight %s: 1 to 100000\n",
                              argv[k + 1]);
                return 2;
            }
            o.max_in_flight = (int)v;
        } else if (strcmp(argv[k], "--merge-bytes") == 0) {
            if (cli_parse_u64("--merge-bytes", argv[k + 1], &v) != 0) {
                return 2;
            }
            if (v > INT32_MAX) {
                (void)fprintf(stderr, "tern: --merge-bytes %s: 0 (off) to %d\n",
                              argv[k + 1], INT32_MAX);
                return 2;
            }
            o.produce_merge_bytes = v == 0 ? -1 : (int)v;
        }
    }
    conf.servers = servers;
    conf.o = o;
    conf.tls = tls;
    conf.ca = ca;
    conf.cert = cert;
    conf.key = key;
    conf.mech = auth_mech;
    conf.user = auth_user;
    conf.pwfile = auth_pwfile;
    conf.ns = auth_ns;
    rv = tern_client_new(servers, &o, &c);
    if (rv != 0) {
        cli_error(NULL, rv, "servers \"%s\"", servers);
        return 2;
    }
    code = cli_tls(c, tls, ca, cert, key);
    if (code == 0) {
        code = cli_auth(c, auth_mech, auth_user, auth_pwfile, auth_ns);
    }
    if (code != 0) {
        tern_client_free(c);
        return code;
    }
    argc -= i;
    argv += i;
    if (strcmp(argv[0], "queue") == 0) {
        code = cmd_queue(c, argc, argv);
    } else if (strcmp(argv[0], "produce") == 0) {
        code = cmd_produce(c, argc, argv);
    } else if (strcmp(argv[0], "consume") == 0) {
        code = cmd_consume(c, argc, argv);
    } else if (strcmp(argv[0], "message") == 0) {
        code = cli_message(c, argc, argv);
    } else if (strcmp(argv[0], "group") == 0 && argc >= 2 &&
               strcmp(argv[1], "status") == 0) {
        code = cli_group_status(c, argc, argv);
    } else if (strcmp(argv[0], "group") == 0) {
        code = cli_group(c, argc, argv);
    } else if (strcmp(argv[0], "dlq") == 0) {
        code = cli_dlq(c, argc, argv);
    } else if (strcmp(argv[0], "cluster") == 0) {
        code = cmd_cluster(c, argc, argv);
    } else if (strcmp(argv[0], "bench") == 0) {
        code = cli_bench(c, argc, argv);
    } else if (strcmp(argv[0], "user") == 0) {
        code = cli_user(c, argc, argv);
    } else if (strcmp(argv[0], "acl") == 0) {
        code = cli_acl(c, argc, argv);
    } else if (strcmp(argv[0], "namespace") == 0) {
        code = cli_namespace(c, argc, argv);
    } else if (strcmp(argv[0], "admin") == 0) {
        code = cli_admin(c, argc, argv);
    } else {
        usage(stderr);
        code = 2;
    }
    tern_client_free(c);
    return cli_exit_code(code);
}
