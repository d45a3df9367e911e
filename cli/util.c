/*
 * Helpers shared by the `tern` command sources (cli.c and bench.c): error
 * reporting in the CLI's one format, option number parsing, JSON strings
 * and a monotonic clock.
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

void cli_json_string(FILE *f, const char *s)
{
    (void)fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            (void)fprintf(f, "\\%c", ch);
        } else if (ch < 0x20) {
            (void)fprintf(f, "\\u%04x", ch);
        } else {
            (void)fputc(ch, f);
        }
    }
    (void)fputc('"', f);
}
