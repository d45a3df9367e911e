/*
 * The CLI's renderers called directly: JSON string escaping and UTF-8
 * validation (cli/util.c), base64 of binary payloads, and the latency
 * histogram of `tern bench` as text and SVG (cli/histogram.c).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* What fn wrote to a memory stream, into buf[cap]. */
#define CAPTURE(buf, cap, call)                                                \
    do {                                                                       \
        FILE *f_ = fmemopen((buf), (cap), "w");                                \
        cr_assert_not_null(f_);                                                \
        call;                                                                  \
        (void)fclose(f_);                                                      \
    } while (0)

Test(cli_render, utf8_validation)
{
    cr_expect(cli_utf8_valid("", 0));
    cr_expect(cli_utf8_valid("plain.dots", 10));
    cr_expect(cli_utf8_valid("h\xc3\xa9", 3));         /* é */
    cr_expect(cli_utf8_valid("\xe2\x82\xac", 3));      /* € */
    cr_expect(cli_utf8_valid("\xf0\x9f\x98\x80", 4));  /* emoji */
    cr_expect(!cli_utf8_valid("\xff", 1));             /* bad byte */
    cr_expect(!cli_utf8_valid("\xc3", 1));             /* truncated */
    cr_expect(!cli_utf8_valid("\xc0\xaf", 2));         /* overlong */
    cr_expect(!cli_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
    cr_expect(!cli_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    cr_expect(!cli_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    cr_expect(!cli_utf8_valid("a\x80", 2));            /* stray cont. */
}

Test(cli_render, json_escaping)
{
    char buf[256];
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf,
            cli_json_utf8(f_, "q\"\\\n\r\t\b\f\x01\x7f h\xc3\xa9", 14));
    cr_expect_str_eq(buf,
                     "\"q\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u007f h\xc3\xa9\"");
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf, cli_json_base64(f_, "\x00\xff\n\x01", 4));
    cr_expect_str_eq(buf, "\"AP8KAQ==\"");
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf, cli_json_base64(f_, "ab", 2));
    cr_expect_str_eq(buf, "\"YWI=\"");
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf, cli_json_base64(f_, "abc", 3));
    cr_expect_str_eq(buf, "\"YWJj\"");
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf, cli_json_base64(f_, "", 0));
    cr_expect_str_eq(buf, "\"\"");
}

Test(cli_render, histogram_text)
{
    /* 0 us, three in [2,4), one in [512,1024), one in [1024,2048). */
    static const int64_t v[] = {0, 2, 3, 3, 700, 1500};
    struct cli_hist h;
    char buf[4096];
    cli_hist_fill(&h, v, 6);
    cr_expect_eq(h.n, 6);
    cr_expect_eq(h.lo, 0);
    cr_expect_eq(h.hi, 11);
    cr_expect_eq(h.count[0], 1);
    cr_expect_eq(h.count[2], 3);
    cr_expect_eq(h.count[10], 1);
    cr_expect_eq(h.count[11], 1);
    cr_expect_eq(h.peak, 3);
    cr_expect_eq(h.p50, 3);
    cr_expect_eq(h.max, 1500);
    cr_expect_eq(h.p999, 1500);
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf, cli_hist_print(f_, &h, "produce"));
    cr_expect_neq(strstr(buf,
                         "produce histogram (us, log2 buckets, 6 "
                         "samples):\n"),
                  NULL, "%s", buf);
    /* the fullest bucket has the full 40-character bar */
    cr_expect_neq(strstr(buf,
                         "        2 .. 4         |"
                         "######################################## 3\n"),
                  NULL, "%s", buf);
    /* an empty bucket between the first and last has an empty bar */
    cr_expect_neq(strstr(buf,
                         "       16 .. 32        |"
                         "                                         0\n"),
                  NULL, "%s", buf);
    cr_expect_neq(strstr(buf,
                         "     1024 .. 2048      |"
                         "##############                           1\n"),
                  NULL, "%s", buf);
    cr_expect_neq(strstr(buf,
                         "p50 3 us  p90 1500 us  p99 1500 us  p999 "
                         "1500 us  max 1500 us\n"),
                  NULL, "%s", buf);
}

Test(cli_render, histogram_svg)
{
    static const int64_t v[] = {100, 100, 300};
    struct cli_hist h;
    char *buf = calloc(1, 16384);
    int bars = 0;
    cr_assert_not_null(buf);
    cli_hist_fill(&h, v, 3);
    CAPTURE(buf, 16383, cr_expect_eq(cli_hist_svg(f_, &h, "a<b&c"), 0));
    cr_expect_eq(strncmp(buf, "<?xml", 5), 0);
    cr_expect_neq(strstr(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\""),
                  NULL);
    cr_expect_neq(strstr(buf, "a&lt;b&amp;c (us, log2 buckets, 3 samples)"),
                  NULL, "%s", buf);
    for (const char *p = buf; (p = strstr(p, "class=\"bar\"")) != NULL; p++) {
        bars++;
    }
    cr_expect_eq(bars, 3, "buckets 64..128, 128..256 (empty), 256..512");
    cr_expect_neq(strstr(buf, "<title>64..128 us: 2</title>"), NULL, "%s", buf);
    cr_expect_neq(strstr(buf, "p50 100 us"), NULL);
    cr_expect_neq(strstr(buf, "</svg>\n"), NULL);
    free(buf);
}

Test(cli_render, histogram_empty)
{
    struct cli_hist h;
    char buf[1024];
    cli_hist_fill(&h, NULL, 0);
    memset(buf, 0, sizeof buf);
    CAPTURE(buf, sizeof buf, cli_hist_print(f_, &h, "fetch"));
    cr_expect_str_eq(buf,
                     "  fetch histogram (us, log2 buckets, 0 samples):\n"
                     "  p50 0 us  p90 0 us  p99 0 us  p999 0 us  max 0 us\n");
}
