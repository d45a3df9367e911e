/*
 * The `tern` retention option parsers and printers (cli/parse.c), called
 * directly: durations, sizes and times, good values, edge values, values
 * refused, and the printers' round trip back through the parsers.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "cli.h"

Test(cli_parse, durations)
{
    uint64_t v = 7;
    cr_assert_eq(cli_parse_duration_ms("72h", &v), 0);
    cr_expect_eq(v, 72ull * 3600 * 1000);
    cr_assert_eq(cli_parse_duration_ms("30m", &v), 0);
    cr_expect_eq(v, 30ull * 60 * 1000);
    cr_assert_eq(cli_parse_duration_ms("10s", &v), 0);
    cr_expect_eq(v, 10000);
    cr_assert_eq(cli_parse_duration_ms("250ms", &v), 0);
    cr_expect_eq(v, 250);
    cr_assert_eq(cli_parse_duration_ms("7d", &v), 0);
    cr_expect_eq(v, 7ull * 86400 * 1000);
    cr_assert_eq(cli_parse_duration_ms("0", &v), 0);
    cr_expect_eq(v, 0);
    cr_assert_eq(cli_parse_duration_ms("0s", &v), 0);
    cr_expect_eq(v, 0);

    v = 7;
    cr_expect_eq(cli_parse_duration_ms("30", &v), -1, "a unit is needed");
    cr_expect_eq(cli_parse_duration_ms("", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("h", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("-1h", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("1.5h", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("10 s", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("10S", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("1hr", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("99999999999999999999ms", &v), -1);
    cr_expect_eq(cli_parse_duration_ms("18446744073709551d", &v), -1,
                 "overflow in the unit product");
    cr_expect_eq(cli_parse_duration_ms(NULL, &v), -1);
    cr_expect_eq(v, 7, "unchanged on failure");
}

Test(cli_parse, sizes)
{
    uint64_t v = 7;
    cr_assert_eq(cli_parse_size("1G", &v), 0);
    cr_expect_eq(v, 1ull << 30);
    cr_assert_eq(cli_parse_size("256K", &v), 0);
    cr_expect_eq(v, 256ull << 10);
    cr_assert_eq(cli_parse_size("256k", &v), 0);
    cr_expect_eq(v, 256ull << 10);
    cr_assert_eq(cli_parse_size("64MiB", &v), 0);
    cr_expect_eq(v, 64ull << 20);
    cr_assert_eq(cli_parse_size("2TB", &v), 0);
    cr_expect_eq(v, 2ull << 40);
    cr_assert_eq(cli_parse_size("1000", &v), 0);
    cr_expect_eq(v, 1000);
    cr_assert_eq(cli_parse_size("1000B", &v), 0);
    cr_expect_eq(v, 1000);
    cr_assert_eq(cli_parse_size("0", &v), 0);
    cr_expect_eq(v, 0);

    v = 7;
    cr_expect_eq(cli_parse_size("", &v), -1);
    cr_expect_eq(cli_parse_size("G", &v), -1);
    cr_expect_eq(cli_parse_size("1.5G", &v), -1);
    cr_expect_eq(cli_parse_size("1g", &v), -1, "only k is accepted lower");
    cr_expect_eq(cli_parse_size("1P", &v), -1);
    cr_expect_eq(cli_parse_size("1Gx", &v), -1);
    cr_expect_eq(cli_parse_size("1iB", &v), -1);
    cr_expect_eq(cli_parse_size("-1", &v), -1);
    cr_expect_eq(cli_parse_size("16777216T", &v), -1, "overflow");
    cr_expect_eq(v, 7);
}

Test(cli_parse, times)
{
    uint64_t v = 7;
    cr_assert_eq(cli_parse_time_ms("1970-01-01T00:00:00Z", &v), 0);
    cr_expect_eq(v, 0);
    cr_assert_eq(cli_parse_time_ms("2026-12-04T10:00:00Z", &v), 0);
    cr_expect_eq(v, 1796378400000ull);
    cr_assert_eq(cli_parse_time_ms("2026-12-04T10:00:00.5Z", &v), 0);
    cr_expect_eq(v, 1796378400500ull);
    cr_assert_eq(cli_parse_time_ms("2026-12-04T10:00:00.123456789+00:00", &v),
                 0);
    cr_expect_eq(v, 1796378400123ull);
    cr_assert_eq(cli_parse_time_ms("2000-02-29T23:59:59Z", &v), 0);
    cr_expect_eq(v, 951868799000ull);
    cr_assert_eq(cli_parse_time_ms("2024-12-31t23:59:59z", &v), 0);
    cr_expect_eq(v, 1735689599000ull);
    cr_assert_eq(cli_parse_time_ms("1796378400000", &v), 0);
    cr_expect_eq(v, 1796378400000ull);
    cr_assert_eq(cli_parse_time_ms("0", &v), 0);
    cr_expect_eq(v, 0);

    v = 7;
    cr_expect_eq(cli_parse_time_ms("", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:00:00", &v), -1,
                 "no zone: not UTC for sure");
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:00:00+01:00", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04 10:00:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-13-04T10:00:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-00-04T10:00:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2025-02-29T10:00:00Z", &v), -1,
                 "not a leap year");
    cr_expect_eq(cli_parse_time_ms("1900-02-29T10:00:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-04-31T10:00:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T24:00:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:60:00Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:00:60Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:00:00.Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:00:00.1234567890Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("1969-12-31T23:59:59Z", &v), -1);
    cr_expect_eq(cli_parse_time_ms("-5", &v), -1);
    cr_expect_eq(cli_parse_time_ms("99999999999999999999", &v), -1);
    cr_expect_eq(cli_parse_time_ms("2026-12-04T10:00:00Zjunk", &v), -1);
    cr_expect_eq(v, 7);
}

Test(cli_parse, printers_round_trip)
{
    static const uint64_t durations[] = {
        72ull * 3600000, 1800000, 90000, 1500, 2000, 1};
    static const char *const duration_text[] = {"72h",    "30m", "90s",
                                                "1500ms", "2s",  "1ms"};
    static const uint64_t sizes[] = {1ull << 30, 256ull << 10, 1000, 3ull << 40,
                                     1536};
    static const char *const size_text[] = {"1G", "256K", "1000", "3T", "1536"};
    char buf[32];
    uint64_t back;
    for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++) {
        cli_format_duration(durations[i], buf, sizeof buf);
        cr_expect_str_eq(buf, duration_text[i]);
        cr_assert_eq(cli_parse_duration_ms(buf, &back), 0);
        cr_expect_eq(back, durations[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        cli_format_size(sizes[i], buf, sizeof buf);
        cr_expect_str_eq(buf, size_text[i]);
        cr_assert_eq(cli_parse_size(buf, &back), 0);
        cr_expect_eq(back, sizes[i]);
    }
}
