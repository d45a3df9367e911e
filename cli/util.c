/*
 * Helpers shared by the `tern` command sources (cli.c, bench.c, message.c,
 * trace.c): error reporting in the CLI's one format, option number
 * parsing, JSON strings and a monotonic clock.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

void cli_error(struct tern_client *c, int rv, const char *fmt, ...)
{
    va_list ap;
    const char *detail = c != NULL ? tern_client_errmsg(c) : "";
    /* Skip a detail that only repeats the error string. */
    if (strcmp(detail, tern_strerror(rv)) == 0) {
        detail = "";
    }
    (void)fputs("tern: ", stderr);
    va_start(ap, fmt);
    (void)vfprintf(stderr, fmt, ap);
    va_end(ap);
    (void)fprintf(stderr, ": %s", tern_strerror(rv));
    if (detail[0] != '\0') {
        (void)fprintf(stderr, " (%s)", detail);
    }
    (void)fputc('\n', stderr);
}

int cli_parse_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (s == NULL || *s == '\0' || *s == '-') {
        (void)fprintf(stderr, "tern: %s: expected a non-negative number\n",
                      opt);
        return -1;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') {
        (void)fprintf(stderr, "tern: %s: bad number \"%s\"\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int64_t cli_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* p[0..len) as a JSON string; bytes from 0x7f up are \u00XX escapes
 * when high is set, as they are otherwise. */
static void json_escape(FILE *f, const void *p, size_t len, int high)
{
    const unsigned char *s = p;
    (void)fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"' || s[i] == '\\') {
            (void)fprintf(f, "\\%c", s[i]);
        } else if (s[i] < 0x20 || (high && s[i] >= 0x7f)) {
            (void)fprintf(f, "\\u%04x", s[i]);
        } else {
            (void)fputc(s[i], f);
        }
    }
    (void)fputc('"', f);
}

void cli_json_string(FILE *f, const char *s)
{
    json_escape(f, s, strlen(s), 0);
}

void cli_json_bytes(FILE *f, const void *p, size_t len)
{
    json_escape(f, p, len, 1);
}
