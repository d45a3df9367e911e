/*
 * `tern message get` and the printing of fetched messages with their
 * properties (docs/MESSAGES.md): the --format directives, --raw and
 * --json of `tern consume` and `tern message get`, and the
 * --key/--tag/--header options of `tern produce`.
 *
 * --format directives (each message is printed as the format, then a
 * newline):
 *   %o offset          %i message id (32 hex digits)
 *   %k key             %t tag
 *   %T append time (ms since the epoch, the leader's)
 *   %P producer timestamp (ms)
 *   %h headers as name=value,name=value
 *   %p payload, whole  %% a percent sign
 *   \t a tab, \n a newline
 * --format raw (or --raw) writes each payload's bytes as they are, then
 * the delimiter (--delimiter, default "\n"; "" for none), nothing else.
 * --format text is consume's default line, "<offset>\t<payload>": the
 * payload whole, with '\\', tab, newline and carriage return written as
 * \\\\, \\t, \\n and \\r, other control bytes (and every byte >= 0x80
 * of a payload that is not valid UTF-8) as \\xHH: one line per message,
 * and a payload that is text reads as itself.
 * --format json (or --json) writes one object per line:
 *   {"queue":"...","offset":N,"id":"...","append_ts":N,"producer_ts":N,
 *   "key":"...","tag":"...","headers":{"name":"value",...},
 *   "payload":"..."} (producer_ts, key, tag and headers only when the
 *   message has them; append_ts and producer_ts in ms since the epoch).
 *   A payload that is valid UTF-8 is a JSON string of it (control
 *   characters, '"' and '\\' escaped); any other payload is its base64
 *   (RFC 4648) with "payload_encoding":"base64" after it. Keys, tags and
 *   headers are strings of their UTF-8, or, when not valid UTF-8, of their
 *   bytes with those outside printable ASCII as \u00XX escapes.
 * Any other --format value is a format string of the directives above.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A key, tag or header as a JSON string: its UTF-8, or its bytes with
 * \u00XX escapes when it is not valid UTF-8. */
static void json_text(const void *p, size_t len)
{
    if (cli_utf8_valid(p, len)) {
        cli_json_utf8(stdout, p, len);
    } else {
        cli_json_bytes(stdout, p, len);
    }
}

static void print_headers(const struct tern_fetch_result *r,
                          size_t i,
                          size_t n,
                          int json)
{
    for (size_t h = 0; h < n; h++) {
        const char *name;
        const void *value;
        size_t nl, vl;
        if (tern_fetch_result_header(r, i, h, &name, &nl, &value, &vl) != 0) {
            continue;
        }
        if (json) {
            (void)fputs(h > 0 ? "," : "", stdout);
            json_text(name, nl);
            (void)fputc(':', stdout);
            json_text(value, vl);
        } else {
            (void)printf("%s%.*s=", h > 0 ? "," : "", (int)nl, name);
            (void)fwrite(value, 1, vl, stdout);
        }
    }
}

/* Whether byte b of a text line is written as an escape: the line's
 * separators and '\\', other control bytes, and bytes >= 0x80 of a
 * payload that is not valid UTF-8. */
static int text_escaped(unsigned char b, int utf8)
{
    return b < 0x20 || b == 0x7f || b == '\\' || (b >= 0x80 && !utf8);
}

void cli_print_payload(FILE *out, const void *data, size_t len)
{
    const unsigned char *p = data;
    int utf8 = cli_utf8_valid(data, len);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = p[i];
        if (!text_escaped(b, utf8)) {
            continue;
        }
        (void)fwrite(p + run, 1, i - run, out);
        run = i + 1;
        switch (b) {
        case '\\':
            (void)fputs("\\\\", out);
            break;
        case '\t':
            (void)fputs("\\t", out);
            break;
        case '\n':
            (void)fputs("\\n", out);
            break;
        case '\r':
            (void)fputs("\\r", out);
            break;
        default:
            (void)fprintf(out, "\\x%02x", b);
        }
    }
    (void)fwrite(p + run, 1, len - run, out);
    (void)fputc('\n', out);
}

void cli_print_init(struct cli_print *p, const char *format)
{
    memset(p, 0, sizeof *p);
    p->mode = CLI_PRINT_FORMAT;
    p->format = format;
    p->delim[0] = '\n';
    p->delim_len = 1;
}

static void print_json(const struct tern_fetch_result *r,
                       size_t i,
                       const struct cli_print *pr,
                       const struct tern_message_props *p,
                       uint64_t off,
                       const void *data,
                       size_t len)
{
    int utf8 = cli_utf8_valid(data, len);
    (void)fputs("{\"queue\":", stdout);
    json_text(pr->queue != NULL ? pr->queue : "",
              pr->queue != NULL ? strlen(pr->queue) : 0);
    (void)printf(",\"offset\":%" PRIu64 ",\"id\":\"%s\",\"append_ts\":%" PRIu64,
                 off, p->id, p->append_ts_ms);
    if (p->producer_ts_ms != 0) {
        (void)printf(",\"producer_ts\":%" PRIu64, p->producer_ts_ms);
    }
    if (p->key_len > 0) {
        (void)fputs(",\"key\":", stdout);
        json_text(p->key, p->key_len);
    }
    if (p->tag_len > 0) {
        (void)fputs(",\"tag\":", stdout);
        json_text(p->tag, p->tag_len);
    }
    if (p->n_headers > 0) {
        (void)fputs(",\"headers\":{", stdout);
        print_headers(r, i, p->n_headers, 1);
        (void)fputc('}', stdout);
    }
    (void)fputs(",\"payload\":", stdout);
    if (utf8) {
        cli_json_utf8(stdout, data, len);
    } else {
        cli_json_base64(stdout, data, len);
        (void)fputs(",\"payload_encoding\":\"base64\"", stdout);
    }
    (void)fputs("}\n", stdout);
}

int cli_print_message(const struct tern_fetch_result *r,
                      size_t i,
                      const struct cli_print *pr)
{
    struct tern_message_props p;
    const char *format = pr->format;
    uint64_t off;
    const void *data;
    size_t len;
    if (tern_fetch_result_get(r, i, &off, NULL, &data, &len) != 0) {
        return -1;
    }
    if (pr->mode == CLI_PRINT_RAW) {
        (void)fwrite(data, 1, len, stdout);
        (void)fwrite(pr->delim, 1, pr->delim_len, stdout);
        return 0;
    }
    if (pr->mode == CLI_PRINT_TEXT) {
        (void)printf("%" PRIu64 "\t", off);
        cli_print_payload(stdout, data, len);
        return 0;
    }
    if (tern_fetch_result_props(r, i, &p) != 0) {
        return -1;
    }
    if (pr->mode == CLI_PRINT_JSON) {
        print_json(r, i, pr, &p, off, data, len);
        return 0;
    }
    for (const char *f = format; *f != '\0'; f++) {
        if (*f == '\\' && (f[1] == 't' || f[1] == 'n')) {
            (void)putchar(f[1] == 't' ? '\t' : '\n');
            f++;
            continue;
        }
        if (*f != '%' || f[1] == '\0') {
            (void)putchar(*f);
            continue;
        }
        switch (*++f) {
        case 'o':
            (void)printf("%" PRIu64, off);
            break;
        case 'i':
            (void)fputs(p.id, stdout);
            break;
        case 'k':
            (void)fwrite(p.key != NULL ? p.key : "", 1, p.key_len, stdout);
            break;
        case 't':
            (void)fwrite(p.tag != NULL ? p.tag : "", 1, p.tag_len, stdout);
            break;
        case 'T':
            (void)printf("%" PRIu64, p.append_ts_ms);
            break;
        case 'P':
            (void)printf("%" PRIu64, p.producer_ts_ms);
            break;
        case 'h':
            print_headers(r, i, p.n_headers, 0);
            break;
        case 'p':
            (void)fwrite(data, 1, len, stdout);
            break;
        case '%':
            (void)putchar('%');
            break;
        default:
            (void)putchar('%');
            (void)putchar(*f);
            break;
        }
    }
    (void)putchar('\n');
    return 0;
}

int cli_format_valid(const char *format)
{
    for (const char *f = format; *f != '\0'; f++) {
        if (*f == '%') {
            if (f[1] == '\0' || strchr("oiktTPhp%", f[1]) == NULL) {
                (void)fprintf(stderr,
                              "tern: --format: unknown directive %%%c "
                              "(known: %%o %%i %%k %%t %%T %%P %%h %%p "
                              "%%%%)\n",
                              f[1] != '\0' ? f[1] : ' ');
                return -1;
            }
            f++;
        }
    }
    return 0;
}

/* The --delimiter value with its escapes into p; 0 or -1 (printed). */
static int parse_delimiter(const char *arg, struct cli_print *p)
{
    size_t n = 0;
    for (const char *a = arg; *a != '\0'; a++) {
        char ch = *a;
        if (ch == '\\') {
            switch (a[1]) {
            case 'n':
                ch = '\n';
                break;
            case 't':
                ch = '\t';
                break;
            case '0':
                ch = '\0';
                break;
            case '\\':
                ch = '\\';
                break;
            default:
                (void)fprintf(stderr,
                              "tern: --delimiter: unknown escape \\%c "
                              "(known: \\n \\t \\0 \\\\)\n",
                              a[1] != '\0' ? a[1] : ' ');
                return -1;
            }
            a++;
        }
        if (n >= sizeof p->delim) {
            (void)fprintf(stderr, "tern: --delimiter: at most %zu bytes\n",
                          sizeof p->delim);
            return -1;
        }
        p->delim[n++] = ch;
    }
    p->delim_len = n;
    return 0;
}

int cli_print_option(int ch, const char *arg, struct cli_print *p)
{
    switch (ch) {
    case 'F':
        if (strcmp(arg, "raw") == 0) {
            p->mode = CLI_PRINT_RAW;
        } else if (strcmp(arg, "json") == 0) {
            p->mode = CLI_PRINT_JSON;
        } else if (strcmp(arg, "text") == 0) {
            p->mode = CLI_PRINT_TEXT;
        } else if (cli_format_valid(arg) != 0) {
            return -1;
        } else {
            p->mode = CLI_PRINT_FORMAT;
            p->format = arg;
        }
        p->given = 1;
        return 0;
    case 'r':
        p->mode = CLI_PRINT_RAW;
        p->given = 1;
        return 0;
    case 'j':
        p->mode = CLI_PRINT_JSON;
        p->given = 1;
        return 0;
    case 'D':
        return parse_delimiter(arg, p);
    default:
        cli_usage(stderr);
        return -1;
    }
}

int cli_parse_header(const char *arg, struct tern_header *h)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq != NULL ? (size_t)(eq - arg) : 0;
    char *name;
    if (eq == NULL || n == 0 || n > TERN_HEADER_NAME_MAX) {
        (void)fprintf(stderr,
                      "tern: --header \"%s\": expected name=value (name "
                      "1..%d bytes)\n",
                      arg, TERN_HEADER_NAME_MAX);
        return -1;
    }
    name = strndup(arg, n);
    if (name == NULL) {
        return -1;
    }
    h->name = name;
    h->value = eq + 1;
    h->value_len = strlen(eq + 1);
    return 0;
}

/* `tern message get QUEUE --offset N | --id ID | --key K [--max N]
 * [--json | --raw | --format F]`. */
int cli_message(struct tern_client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"offset", required_argument, NULL, 'o'},
        {"id", required_argument, NULL, 'i'},
        {"key", required_argument, NULL, 'k'},
        {"max", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"raw", no_argument, NULL, 'r'},
        {"format", required_argument, NULL, 'F'},
        {"delimiter", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    uint64_t offset = 0, max = 100;
    const char *id = NULL, *key = NULL;
    struct cli_print pr;
    int have_offset = 0;
    struct tern_fetch_result *r = NULL;
    const char *queue;
    int ch, rv;
    if (argc >= 2 && strcmp(argv[1], "trace") == 0) {
        return cli_message_trace(c, argc - 1, argv + 1);
    }
    if (argc < 2 || strcmp(argv[1], "get") != 0) {
        cli_usage(stderr);
        return 2;
    }
    argc--;
    argv++;
    cli_print_init(&pr, "%o\\t%i\\t%k\\t%t\\t%p");
    optind = 1;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'o':
            if (cli_parse_u64("--offset", optarg, &offset) != 0) {
                return 2;
            }
            have_offset = 1;
            break;
        case 'i':
            id = optarg;
            break;
        case 'k':
            key = optarg;
            break;
        case 'm':
            if (cli_parse_u64("--max", optarg, &max) != 0) {
                return 2;
            }
            break;
        default:
            if (cli_print_option(ch, optarg, &pr) != 0) {
                return 2;
            }
            break;
        }
    }
    if (optind + 1 != argc || have_offset + (id != NULL) + (key != NULL) != 1 ||
        max == 0 || max > TERN_MESSAGE_GET_MAX) {
        cli_usage(stderr);
        return 2;
    }
    queue = argv[optind];
    pr.queue = queue;
    if (have_offset) {
        rv = tern_message_get_offset(c, queue, offset, &r);
    } else if (id != NULL) {
        rv = tern_message_get_id(c, queue, id, &r);
    } else {
        rv =
            tern_message_get_key(c, queue, key, strlen(key), (uint32_t)max, &r);
    }
    if (rv != 0) {
        cli_error(c, rv, "message get %s", queue);
        return 1;
    }
    for (size_t i = 0; i < tern_fetch_result_count(r); i++) {
        (void)cli_print_message(r, i, &pr);
    }
    (void)fflush(stdout);
    tern_fetch_result_free(r);
    return 0;
}
