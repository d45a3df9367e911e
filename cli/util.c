/*
 * Helpers shared by the `tern` command sources (cli.c, bench.c, message.c,
 * trace.c): error reporting in the CLI's one format, option number
 * parsing, JSON strings and a monotonic clock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The first error reported by this process (0: none). */
static int first_error;
/* The progress line on screen, erased before an error is printed. */
static struct cli_progress *active_progress;

void cli_note_error(int rv)
{
    if (first_error == 0) {
        first_error = rv;
    }
}

int cli_exit_code(int code)
{
    if (code != CLI_EXIT_ERROR) {
        return code;
    }
    switch (first_error) {
    case -ECONNREFUSED:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -EADDRNOTAVAIL:
        return CLI_EXIT_CONNECT;
    case TERN_ETIMEDOUT:
        return CLI_EXIT_TIMEOUT;
    default:
        return code;
    }
}

void cli_error(struct tern_client *c, int rv, const char *fmt, ...)
{
    va_list ap;
    const char *detail = c != NULL ? tern_client_errmsg(c) : "";
    /* Skip a detail that only repeats the error string. */
    if (strcmp(detail, tern_strerror(rv)) == 0) {
        detail = "";
    }
    cli_note_error(rv);
    if (active_progress != NULL) {
        cli_progress_end(active_progress);
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

int cli_utf8_valid(const void *s, size_t len)
{
    const unsigned char *p = s;
    size_t i = 0;
    while (i < len) {
        unsigned char b = p[i];
        uint32_t cp;
        size_t n;
        if (b < 0x80) {
            i++;
            continue;
        }
        if (b >= 0xc2 && b <= 0xdf) {
            n = 1;
            cp = b & 0x1fu;
        } else if (b >= 0xe0 && b <= 0xef) {
            n = 2;
            cp = b & 0x0fu;
        } else if (b >= 0xf0 && b <= 0xf4) {
            n = 3;
            cp = b & 0x07u;
        } else {
            return 0; /* a continuation byte, 0xc0/0xc1 or 0xf5.. */
        }
        if (len - i <= n) {
            return 0;
        }
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (p[i + k] & 0x3fu);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return 0; /* overlong, past U+10FFFF, or a surrogate */
        }
        i += n + 1;
    }
    return 1;
}

void cli_json_utf8(FILE *f, const void *p, size_t len)
{
    const unsigned char *s = p;
    (void)fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        switch (s[i]) {
        case '"':
        case '\\':
            (void)fprintf(f, "\\%c", s[i]);
            break;
        case '\n':
            (void)fputs("\\n", f);
            break;
        case '\r':
            (void)fputs("\\r", f);
            break;
        case '\t':
            (void)fputs("\\t", f);
            break;
        case '\b':
            (void)fputs("\\b", f);
            break;
        case '\f':
            (void)fputs("\\f", f);
            break;
        default:
            if (s[i] < 0x20 || s[i] == 0x7f) {
                (void)fprintf(f, "\\u%04x", s[i]);
            } else {
                (void)fputc(s[i], f);
            }
            break;
        }
    }
    (void)fputc('"', f);
}

void cli_json_base64(FILE *f, const void *p, size_t len)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = p;
    size_t i = 0;
    (void)fputc('"', f);
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        (void)fputc(tab[v >> 18], f);
        (void)fputc(tab[(v >> 12) & 63], f);
        (void)fputc(tab[(v >> 6) & 63], f);
        (void)fputc(tab[v & 63], f);
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        (void)fprintf(f, "%c%c==", tab[v >> 18], tab[(v >> 12) & 63]);
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        (void)fprintf(f, "%c%c%c=", tab[v >> 18], tab[(v >> 12) & 63],
                      tab[(v >> 6) & 63]);
    }
    (void)fputc('"', f);
}

/* Redraw interval of the progress line: 4 Hz at most. */
#define CLI__PROGRESS_US 250000

void cli_progress_init(struct cli_progress *p, const char *what, int on)
{
    memset(p, 0, sizeof *p);
    p->on = on && isatty(STDERR_FILENO);
    p->what = what;
    p->t0_us = cli_now_us();
    if (p->on) {
        active_progress = p;
    }
}

void cli_progress_tick(struct cli_progress *p, uint64_t count)
{
    int64_t now;
    double secs;
    if (!p->on) {
        return;
    }
    now = cli_now_us();
    if (p->drawn && now - p->last_us < CLI__PROGRESS_US) {
        return;
    }
    secs = (double)(now - p->t0_us) / 1e6;
    (void)fprintf(stderr, "\r%s: %" PRIu64 " msgs, %.0f msg/s, %.1f s\033[K",
                  p->what, count, secs > 0 ? (double)count / secs : 0.0, secs);
    (void)fflush(stderr);
    p->drawn = 1;
    p->last_us = now;
}

void cli_progress_end(struct cli_progress *p)
{
    if (p->on && p->drawn) {
        (void)fputs("\r\033[K", stderr);
        (void)fflush(stderr);
    }
    p->drawn = 0;
    if (active_progress == p) {
        active_progress = NULL;
    }
}
