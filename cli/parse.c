/*
 * Value parsers and printers of the `tern` retention options: durations
 * ("72h", "30m", "10s", "250ms", "7d", "0"), sizes ("1G", "256K", "512",
 * "0"; binary units) and points in time (RFC 3339 UTC such as
 * 2026-12-04T10:00:00Z, or milliseconds since the epoch). Pure functions
 * of their arguments (no clock, no locale), so tests call them directly.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Read the decimal digits at *p into *v (at least one; no overflow);
 * advance *p. 0 or -1. */
static int read_digits(const char **p, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    if (*s < '0' || *s > '9') {
        return -1;
    }
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (x > (UINT64_MAX - d) / 10) {
            return -1;
        }
        x = x * 10 + d;
    }
    *v = x;
    *p = s;
    return 0;
}

/* *out = a * b, or -1 on overflow. */
static int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b != 0 && a > UINT64_MAX / b) {
        return -1;
    }
    *out = a * b;
    return 0;
}

int cli_parse_duration_ms(const char *s, uint64_t *out)
{
    static const struct
    {
        const char *unit;
        uint64_t ms;
    } units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
    };
    const char *p = s;
    uint64_t v;
    if (s == NULL || read_digits(&p, &v) != 0) {
        return -1;
    }
    if (*p == '\0') {
        /* Only 0 goes without a unit: "30" could mean anything. */
        if (v != 0) {
            return -1;
        }
        *out = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].unit) == 0) {
            return mul_u64(v, units[i].ms, out);
        }
    }
    return -1;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    const char *p = s;
    uint64_t v;
    uint64_t mult = 1;
    if (s == NULL || read_digits(&p, &v) != 0) {
        return -1;
    }
    switch (*p) {
    case 'K':
    case 'k':
        mult = 1ull << 10;
        break;
    case 'M':
        mult = 1ull << 20;
        break;
    case 'G':
        mult = 1ull << 30;
        break;
    case 'T':
        mult = 1ull << 40;
        break;
    case '\0':
    case 'B':
        break;
    default:
        return -1;
    }
    if (mult != 1) {
        p++;
        if (strcmp(p, "iB") == 0 || strcmp(p, "B") == 0) {
            p += strlen(p);
        }
    } else if (*p == 'B') {
        p++;
    }
    if (*p != '\0') {
        return -1;
    }
    return mul_u64(v, mult, out);
}

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar
 * (y >= 1970). */
static uint64_t days_from_civil(uint64_t y, unsigned m, unsigned d)
{
    uint64_t era;
    unsigned yoe, doy, doe;
    y -= m <= 2;
    era = y / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static unsigned days_in_month(uint64_t y, unsigned m)
{
    static const unsigned days[12] = {31, 28, 31, 30, 31, 30,
                                      31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

/* Exactly n digits at *p as a number; advance *p. 0 or -1. */
static int fixed_digits(const char **p, int n, unsigned *v)
{
    unsigned x = 0;
    for (int i = 0; i < n; i++) {
        char ch = (*p)[i];
        if (ch < '0' || ch > '9') {
            return -1;
        }
        x = x * 10 + (unsigned)(ch - '0');
    }
    *v = x;
    *p += n;
    return 0;
}

/* The literal character ch at *p; advance. */
static int expect_char(const char **p, char ch)
{
    if (**p != ch) {
        return -1;
    }
    (*p)++;
    return 0;
}

int cli_parse_time_ms(const char *s, uint64_t *out)
{
    const char *p = s;
    unsigned y, mo, d, h, mi, sec, ms = 0;
    uint64_t days;
    if (s == NULL || *s == '\0') {
        return -1;
    }
    if (strspn(s, "0123456789") == strlen(s)) {
        uint64_t v;
        if (read_digits(&p, &v) != 0) {
            return -1;
        }
        *out = v;
        return 0;
    }
    if (fixed_digits(&p, 4, &y) != 0 || expect_char(&p, '-') != 0 ||
        fixed_digits(&p, 2, &mo) != 0 || expect_char(&p, '-') != 0 ||
        fixed_digits(&p, 2, &d) != 0 ||
        (expect_char(&p, 'T') != 0 && expect_char(&p, 't') != 0) ||
        fixed_digits(&p, 2, &h) != 0 || expect_char(&p, ':') != 0 ||
        fixed_digits(&p, 2, &mi) != 0 || expect_char(&p, ':') != 0 ||
        fixed_digits(&p, 2, &sec) != 0) {
        return -1;
    }
    if (*p == '.') {
        /* A fraction of a second: 1..9 digits, kept to the millisecond. */
        int n = 0;
        p++;
        while (p[n] >= '0' && p[n] <= '9') {
            if (n < 3) {
                ms = ms * 10 + (unsigned)(p[n] - '0');
            }
            n++;
        }
        if (n == 0 || n > 9) {
            return -1;
        }
        for (int k = n; k < 3; k++) {
            ms *= 10;
        }
        p += n;
    }
    /* UTC only: "Z" or a zero offset. */
    if (strcmp(p, "Z") != 0 && strcmp(p, "z") != 0 &&
        strcmp(p, "+00:00") != 0) {
        return -1;
    }
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) ||
        h > 23 || mi > 59 || sec > 59) {
        return -1;
    }
    days = days_from_civil(y, mo, d);
    *out = ((days * 24 + h) * 60 + mi) * 60000 + (uint64_t)sec * 1000 + ms;
    return 0;
}

void cli_format_duration(uint64_t ms, char *buf, size_t cap)
{
    static const struct
    {
        const char *unit;
        uint64_t ms;
    } units[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms != 0 && ms % units[i].ms == 0) {
            (void)snprintf(buf, cap, "%llu%s",
                           (unsigned long long)(ms / units[i].ms),
                           units[i].unit);
            return;
        }
    }
    (void)snprintf(buf, cap, "%llums", (unsigned long long)ms);
}

void cli_format_size(uint64_t bytes, char *buf, size_t cap)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        uint64_t u = 1ull << (10 * (4 - i));
        if (bytes != 0 && bytes % u == 0) {
            (void)snprintf(buf, cap, "%llu%c", (unsigned long long)(bytes / u),
                           units[i]);
            return;
        }
    }
    (void)snprintf(buf, cap, "%llu", (unsigned long long)bytes);
}
