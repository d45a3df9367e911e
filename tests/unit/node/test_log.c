/* Unit tests of ternd's log line formatter (node/log.c): the text format,
 * the JSON format (escaping of quotes, backslashes, control characters and
 * bytes that are not UTF-8; key=value fields as members, integers as
 * numbers), the journald form (priority prefix, no timestamp), cut lines
 * that stay well-formed, and the JOURNAL_STREAM check. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "log.h"

static const struct timespec ts0 = {1796222460, 123456789}; /* 2026-12-02 */

static char line[4096];

static const char *fmt(enum node_log_format f,
                       bool journal,
                       enum node_log_level lvl,
                       const char *msg,
                       const char *kv)
{
    struct node_log_style st = {f, journal};
    size_t n =
        node_log_format_line(line, sizeof line - 1, &st, &ts0, lvl, 7, msg, kv);
    cr_assert_gt(n, 0);
    cr_assert_eq(line[n - 1], '\n', "a line ends in a newline");
    line[n] = '\0';
    cr_assert_eq(strchr(line, '\n'), line + n - 1, "exactly one newline");
    return line;
}

Test(node_log, text_line)
{
    fmt(NODE_LOG_TEXT, false, NODE_LOG_INFO, "leader \"changed\"\n",
        "role=leader term=3");
    cr_expect_str_eq(line,
                     "ts=2026-12-02T14:41:00.123Z level=INFO node=7 "
                     "msg=\"leader \\\"changed\\\"?\" role=leader "
                     "term=3\n");
}

Test(node_log, json_line_fields_and_numbers)
{
    fmt(NODE_LOG_JSON, false, NODE_LOG_WARN, "disk full",
        "free_bytes=1024 path=/var/lib/tern detail=\"no \\\"space\\\" left\" "
        "neg=-5 lead0=007 big=123456789012345678901");
    cr_expect_str_eq(line,
                     "{\"ts\":\"2026-12-02T14:41:00.123Z\","
                     "\"level\":\"warn\",\"node\":7,\"msg\":\"disk "
                     "full\",\"free_bytes\":1024,"
                     "\"path\":\"/var/lib/tern\","
                     "\"detail\":\"no \\\"space\\\" left\","
                     "\"neg\":-5,\"lead0\":\"007\","
                     "\"big\":\"123456789012345678901\"}\n");
}

Test(node_log, json_escapes_control_chars_and_bad_utf8)
{
    /* Quote, backslash, newline, tab, CR, other control chars, DEL, valid
     * UTF-8 (2 and 3 bytes) kept, a lone continuation byte, a truncated
     * sequence, an overlong form and a surrogate replaced. */
    fmt(NODE_LOG_JSON, false, NODE_LOG_ERROR,
        "q\" b\\ n\n t\t r\r x\x01\x1f\x7f é € \x80 \xe2\x82 \xc0\xaf "
        "\xed\xa0\x80",
        NULL);
    cr_expect_str_eq(line,
                     "{\"ts\":\"2026-12-02T14:41:00.123Z\",\"level\":\"error\","
                     "\"node\":7,\"msg\":\"q\\\" b\\\\ n\\n t\\t r\\r "
                     "x\\u0001\\u001f\\u007f \xc3\xa9 \xe2\x82\xac \\ufffd "
                     "\\ufffd\\ufffd \\ufffd\\ufffd "
                     "\\ufffd\\ufffd\\ufffd\"}\n");
}

Test(node_log, json_field_values_escaped)
{
    fmt(NODE_LOG_JSON, false, NODE_LOG_DEBUG, "m",
        "user=\"a\\\\b\xff\" bare=x\x02y \"stray");
    cr_expect_str_eq(line,
                     "{\"ts\":\"2026-12-02T14:41:00.123Z\","
                     "\"level\":\"debug\",\"node\":7,\"msg\":\"m\","
                     "\"user\":\"a\\\\b\\ufffd\",\"bare\":\"x\\u0002y\","
                     "\"_\":\"\\\"stray\"}\n");
}

Test(node_log, journald_prefix_without_timestamp)
{
    fmt(NODE_LOG_TEXT, true, NODE_LOG_ERROR, "x", "a=1");
    cr_expect_str_eq(line, "<3>level=ERROR node=7 msg=\"x\" a=1\n");
    fmt(NODE_LOG_TEXT, true, NODE_LOG_WARN, "x", NULL);
    cr_expect_str_eq(line, "<4>level=WARN node=7 msg=\"x\"\n");
    fmt(NODE_LOG_TEXT, true, NODE_LOG_DEBUG, "x", NULL);
    cr_expect_str_eq(line, "<7>level=DEBUG node=7 msg=\"x\"\n");
    fmt(NODE_LOG_JSON, true, NODE_LOG_INFO, "x", "a=1");
    cr_expect_str_eq(line,
                     "<6>{\"level\":\"info\",\"node\":7,\"msg\":\"x\",\"a\":1}"
                     "\n");
}

/* Whether s is one JSON object with balanced quotes (a cheap check that a
 * cut line is still well-formed). */
static bool json_closed(const char *s, size_t n)
{
    bool in_str = false;
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (in_str) {
            if (s[i] == '\\') {
                i++;
            } else if (s[i] == '"') {
                in_str = false;
            }
        } else if (s[i] == '"') {
            in_str = true;
        } else if (s[i] == '{') {
            depth++;
        } else if (s[i] == '}') {
            depth--;
        }
    }
    return !in_str && depth == 0;
}

Test(node_log, cut_lines_stay_well_formed)
{
    static char msg[3000], kv[3000];
    struct node_log_style js = {NODE_LOG_JSON, false};
    struct node_log_style tx = {NODE_LOG_TEXT, false};
    char buf[512];
    memset(msg, '"', sizeof msg - 1); /* every byte escapes to two */
    for (size_t i = 0; i + 8 < sizeof kv; i += 8) {
        memcpy(kv + i, "k=\"\x01\xe2\x82\xac\" ", 8);
    }
    for (size_t size = 256; size <= sizeof buf; size += 37) {
        size_t n = node_log_format_line(buf, size, &js, &ts0, NODE_LOG_INFO, 1,
                                        msg, kv);
        cr_assert(n > 0 && n <= size, "size %zu: %zu", size, n);
        cr_expect_eq(buf[n - 1], '\n');
        cr_expect(json_closed(buf, n - 1), "size %zu: %.*s", size, (int)n, buf);
        cr_expect_eq(buf[n - 2], '}');
        n = node_log_format_line(buf, size, &js, &ts0, NODE_LOG_INFO, 1, "m",
                                 kv);
        cr_expect(json_closed(buf, n - 1), "size %zu: %.*s", size, (int)n, buf);
        n = node_log_format_line(buf, size, &tx, &ts0, NODE_LOG_INFO, 1, msg,
                                 kv);
        cr_assert(n > 0 && n <= size);
        cr_expect_eq(buf[n - 1], '\n');
        cr_expect_eq(memchr(buf, '\n', n - 1), NULL);
    }
}

Test(node_log, formats_parse)
{
    cr_expect_eq(node_log_format_parse("text"), NODE_LOG_TEXT);
    cr_expect_eq(node_log_format_parse("JSON"), NODE_LOG_JSON);
    cr_expect_eq(node_log_format_parse("xml"), -1);
    cr_expect_str_eq(node_log_format_name(NODE_LOG_JSON), "json");
}

Test(node_log, journal_stream_names_the_fd)
{
    char path[] = "/tmp/tern-log-test-XXXXXX";
    char env[64];
    struct stat st;
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(fstat(fd, &st), 0);
    (void)snprintf(env, sizeof env, "%llu:%llu", (unsigned long long)st.st_dev,
                   (unsigned long long)st.st_ino);
    cr_expect(node_log_journal_stream(env, fd));
    (void)snprintf(env, sizeof env, "%llu:%llu", (unsigned long long)st.st_dev,
                   (unsigned long long)st.st_ino + 1);
    cr_expect(!node_log_journal_stream(env, fd), "another inode");
    cr_expect(!node_log_journal_stream(NULL, fd));
    cr_expect(!node_log_journal_stream("garbage", fd));
    cr_expect(!node_log_journal_stream("1:2x", fd));
    close(fd);
    unlink(path);
}
