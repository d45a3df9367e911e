/*
 * Declarations shared by the `tern` CLI sources: cli.c (argument parsing
 * and the queue/produce/consume/cluster commands), admin.c (the
 * user/acl/namespace commands), bench.c (`tern bench`), parse.c (the
 * retention option values), util.c (error reporting, number parsing,
 * clock) and cluster.c (the member versions of `tern cluster status`). The CLI
 * uses only the public libtern API.
 */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <tern/tern.h>

/* Exit codes of `tern` (documented in the usage text and README.md). */
#define CLI_EXIT_OK      0 /* done */
#define CLI_EXIT_ERROR   1 /* the server refused or failed the request */
#define CLI_EXIT_USAGE   2 /* bad command, option or value; nothing sent */
#define CLI_EXIT_CONNECT 3 /* no server could be reached; nothing sent */
#define CLI_EXIT_TIMEOUT                                                       \
    4 /* no answer before the deadline: outcome unknown                        \
       */
/* util.c. The exit code for a command that returned code after the
 * errors it reported: CLI_EXIT_ERROR becomes CLI_EXIT_CONNECT or
 * CLI_EXIT_TIMEOUT when the first error reported (cli_error or
 * cli_note_error) was a connection failure or a timeout. */
int cli_exit_code(int code);
/* Record rv (a libtern code) as reported, for cli_exit_code. */
void cli_note_error(int rv);
/* util.c. Print "tern: <what>: <strerror>[ (<detail>)]" to stderr. */
void cli_error(struct tern_client *c, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Parse a non-negative decimal integer option value; 0 or -1 (message
 * printed). */
int cli_parse_u64(const char *opt, const char *s, uint64_t *out);
/* Monotonic time in microseconds. */
int64_t cli_now_us(void);

/* util.c. Write s as a JSON string (quoted, escaped) to f. */
void cli_json_string(FILE *f, const char *s);
/* util.c. Write p[0..len) (borrowed; message bytes, any value) as a JSON
 * string to f: bytes outside printable ASCII are \u00XX escapes. */
void cli_json_bytes(FILE *f, const void *p, size_t len);

/* util.c. The progress line of long produces and consumes: "<what>: N
 * msgs, R msg/s, E s" on stderr, redrawn in place at most 4 times a second
 * (the first tick draws at once), erased by cli_progress_end; only when
 * stderr is a terminal (and, for a command that prints messages, stdout is
 * not: on = 0 then). */
struct cli_progress
{
    int on;
    int drawn;
    const char *what; /* borrowed */
    int64_t t0_us;
    int64_t last_us;
};
void cli_progress_init(struct cli_progress *p, const char *what, int on);
void cli_progress_tick(struct cli_progress *p, uint64_t count);
void cli_progress_end(struct cli_progress *p);

/* cli.c. Another client with the servers, options, TLS and login main
 * set up (for a second connection, e.g. bench --mode e2e's consumer);
 * *out caller-owned (tern_client_free). 0, or -1 (printed). */
int cli_client_new(struct tern_client **out);
/* cli.c. Like cli_client_new, but to server alone ("host:port", borrowed
 * for the call), reading from it, with connection and request timeouts of
 * at most timeout_ms. */
int cli_client_probe_new(const char *server,
                         int timeout_ms,
                         struct tern_client **out);

/* cluster.c. Longest version string kept for a member, with its NUL. */
#define CLI_VERSION_MAX 65
/* How long `tern cluster status` waits for a member's own answer. */
#define CLI_PROBE_TIMEOUT_MS 500
/* The software version of each member of s (borrowed), into out[i] for
 * member i (out: tern_status_member_count(s) entries, caller-owned): the
 * answering server's from s itself, every other member's from its own
 * STATUS answer, asked of its client address by all members at once with
 * CLI_PROBE_TIMEOUT_MS; "" when unknown (unreachable, no answer in time,
 * another node answering there, or a server that predates the field). */
void cli_member_versions(const struct tern_status *s,
                         char (*out)[CLI_VERSION_MAX]);
/* cli.c. Print the usage text to f. */
void cli_usage(FILE *f);

/* admin.c: `tern user|acl|namespace ...` (argv[0] is the command word);
 * each returns the process exit code. cli_user_hash needs no server. */
int cli_user(struct tern_client *c, int argc, char **argv);
int cli_user_hash(int argc, char **argv);
int cli_acl(struct tern_client *c, int argc, char **argv);
int cli_namespace(struct tern_client *c, int argc, char **argv);
/* tern admin backup: an online backup of one node (docs/OPERATIONS.md). */
int cli_admin(struct tern_client *c, int argc, char **argv);
/* Longest password read, plus its line end and NUL. */
#define CLI_PASSWORD_MAX 1027
/* Read the first line of f (what names it in errors) into buf[cap]
 * without its line end: 0, or -1 (empty, too long, nothing; printed). */
int cli_read_password(FILE *f, const char *what, char *buf, size_t cap);
/* The same from the file at path. */
int cli_read_password_file(const char *path, char *buf, size_t cap);
/* Overwrite n bytes at p with zeros (not optimised away). */
void cli_wipe(void *p, size_t n);
/* PERMS of `acl set`: a comma list of produce, consume, manage, admin,
 * or "all". 0, or -1 (printed). */
int cli_parse_perms(const char *s, uint32_t *out);
/* The inverse: "all", a comma list, or "-". */
void cli_format_perms(uint32_t perms, char *buf, size_t cap);

/* message.c: printing fetched messages (directives of --format in
 * message.c's header comment), `tern message get`. */
#define CLI_PRINT_FORMAT 0 /* the --format string */
#define CLI_PRINT_RAW    1 /* payload bytes as they are, then the delimiter */
#define CLI_PRINT_JSON   2 /* one JSON object per line */
#define CLI_PRINT_TEXT   3 /* "<offset>\t<payload, escaped>" (the default) */
/* How messages are printed: mode, the format string of CLI_PRINT_FORMAT,
 * the queue named in JSON, the delimiter written after each raw payload
 * (delim[0..delim_len), default "\n"). Strings borrowed from argv. */
struct cli_print
{
    int mode;
    const char *format;
    const char *queue;
    char delim[64];
    size_t delim_len;
    int given; /* a --format, --raw or --json was given */
};
/* Defaults: mode CLI_PRINT_FORMAT with format, delimiter "\n". */
void cli_print_init(struct cli_print *p, const char *format);
/* Print message i of r; 0 or -1. */
int cli_print_message(const struct tern_fetch_result *r,
                      size_t i,
                      const struct cli_print *p);
/* 0, or -1 (printed) for an unknown directive. */
int cli_format_valid(const char *format);
/* The printing options of `tern consume` and `tern message get` as getopt
 * returns them: 'F' --format (raw, text, json, or a format string; arg
 * borrowed), 'r' --raw, 'j' --json, 'D' --delimiter (with \n, \t, \0
 * and \\ escapes). 0, or -1 (printed: a bad format or delimiter, or the
 * usage text for any other ch). */
int cli_print_option(int ch, const char *arg, struct cli_print *p);
/* The payload part of consume's text line (--format text, the default,
 * after "<offset>\t"): the whole payload data[0..len) with separators,
 * '\\' and control bytes escaped (cli/message.c), then a newline. Reads
 * data only. */
void cli_print_payload(FILE *out, const void *data, size_t len);
/* util.c. JSON value helpers: s[0..len) is well-formed UTF-8 (no
 * overlong forms, surrogates or code points past U+10FFFF); write valid
 * UTF-8 p[0..len) as a JSON string (control characters, '"' and '\\'
 * escaped, the rest as it is); write p[0..len) in base64 (RFC 4648, with
 * padding) between quotes. */
int cli_utf8_valid(const void *s, size_t len);
void cli_json_utf8(FILE *f, const void *p, size_t len);
void cli_json_base64(FILE *f, const void *p, size_t len);
/* "name=value" (arg borrowed: h->value points into it; h->name is
 * malloc'd, the caller frees it). 0 or -1 (printed). */
int cli_parse_header(const char *arg, struct tern_header *h);
int cli_message(struct tern_client *c, int argc, char **argv);
/* `tern message trace QUEUE OFFSET [--json]` (cli/trace.c); argv[0] is
 * "trace". Returns the exit code. */
int cli_message_trace(struct tern_client *c, int argc, char **argv);
/* parse.c: the retention option values. Each returns 0 with *out set, or
 * -1 (nothing printed; *out unchanged). A duration is a decimal number
 * with a unit ms, s, m, h or d ("0" alone is allowed: no limit), in ms. A
 * size is a decimal number of bytes, optionally followed by K, M, G or T
 * (binary: 1K = 1024), itself optionally followed by B or iB. A time is
 * RFC 3339 in UTC (YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00), from 1970)
 * or a number of ms since the epoch. */
int cli_parse_duration_ms(const char *s, uint64_t *out);
/* shared.c: receive from shared group (queue, group) and print (ack:
 * acknowledge each batch after printing it; max 0: no limit; follow:
 * wait for more, until idle_ms without a message when not 0). Exit
 * code. */
int cli_shared_consume(struct tern_client *c,
                       const char *queue,
                       const char *group,
                       int ack,
                       uint64_t max,
                       int follow,
                       uint64_t idle_ms);
/* exclusive.c: the single active consumer of stream group (queue,
 * group): claim for lease_ms (waiting at most wait_ms when not 0), fetch,
 * print, commit and renew, release at exit (max 0: no limit; follow:
 * wait for more). Exit code. */
int cli_exclusive_consume(struct tern_client *c,
                          const char *queue,
                          const char *group,
                          uint64_t lease_ms,
                          uint64_t wait_ms,
                          uint64_t max,
                          int follow);
/* `tern group config ...` (argv[0] = "group"). Exit code. */
int cli_group(struct tern_client *c, int argc, char **argv);
/* status.c. `tern group status ...` (argv[0] "group", argv[1] "status")
 * and `tern dlq list|redrive ...` (argv[0] "dlq"); the exit code. */
int cli_group_status(struct tern_client *c, int argc, char **argv);
int cli_dlq(struct tern_client *c, int argc, char **argv);
int cli_parse_size(const char *s, uint64_t *out);
int cli_parse_time_ms(const char *s, uint64_t *out);
/* The inverses for printing into buf[cap] (caller-owned): the largest
 * whole unit ("72h", "90s", "1500ms"; 0 as "0ms"), ("256K", "1G", "1000";
 * 0 as "0"). */
void cli_format_duration(uint64_t ms, char *buf, size_t cap);
void cli_format_size(uint64_t bytes, char *buf, size_t cap);

/* histogram.c: the latency histogram of `tern bench` (log2 buckets of
 * us: bucket 0 below 1 us, bucket k in [2^(k-1), 2^k)). */
#define CLI_HIST_BUCKETS 40
struct cli_hist
{
    uint64_t count[CLI_HIST_BUCKETS];
    uint64_t peak; /* the largest count */
    int lo, hi;    /* first and last non-empty bucket (hi < lo: none) */
    size_t n;
    int64_t p50, p90, p99, p999, max;
};
/* Nearest-rank percentile p (0..1) of sorted[0..n) (0 when n is 0). */
int64_t cli_hist_pct(const int64_t *sorted, size_t n, double p);
/* Fill h from sorted[0..n) (ascending, us; borrowed). */
void cli_hist_fill(struct cli_hist *h, const int64_t *sorted, size_t n);
/* The bar chart: one line per bucket from lo to hi ("  lo .. hi |###
 * count"), then the percentiles line. */
void cli_hist_print(FILE *f, const struct cli_hist *h, const char *title);
/* The same as an SVG document on f; 0, or -1 on a write error. */
int cli_hist_svg(FILE *f, const struct cli_hist *h, const char *title);

/* bench.c. `tern bench QUEUE ...`; returns the process exit code. */
int cli_bench(struct tern_client *c, int argc, char **argv);

#endif /* TERN_CLI_H */
