/*
 * ternd's event log: one line per event on stderr, written with a single
 * write(2) so lines from one process never interleave:
 *
 *   ts=2026-12-02T14:41:00.123Z level=INFO node=1 msg="leader changed" \
 *       role=leader leader=1 term=3
 *
 * ts is UTC ISO 8601 with milliseconds; msg is quoted (quotes and
 * backslashes escaped, control characters replaced by '?'); the key=value
 * tail is formatted by the caller. Lines longer than 2 KiB are truncated.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <tern_common.h>

#include "log.h"

static uint64_t log_node_id;
static enum node_log_level log_level = NODE_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void node_log_setup(uint64_t node_id, enum node_log_level level)
{
    log_node_id = node_id;
    log_level = level;
}

bool node_log_enabled(enum node_log_level level)
{
    return level <= log_level;
}

int node_log_level_parse(const char *s)
{
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(level_names); i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            return (int)i;
        }
    }
    return -1;
}

const char *node_log_level_name(enum node_log_level level)
{
    if ((unsigned)level >= TERN_ARRAY_SIZE(level_names)) {
        return "?";
    }
    return level_names[level];
}

void node_log(enum node_log_level level,
              const char *msg,
              const char *kv_fmt,
              ...)
{
    char line[2048];
    size_t n = 0;
    struct timespec ts;
    struct tm tm;

    if (!node_log_enabled(level)) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n += strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n,
                          ".%03ldZ level=%s node=%llu msg=\"",
                          ts.tv_nsec / 1000000L, level_tags[level],
                          (unsigned long long)log_node_id);
    for (const char *p = msg; *p != '\0' && n < sizeof(line) - 8; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            line[n++] = '\\';
            line[n++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            line[n++] = '?';
        } else {
            line[n++] = (char)ch;
        }
    }
    line[n++] = '"';
    if (kv_fmt != NULL && kv_fmt[0] != '\0' && n < sizeof(line) - 2) {
        va_list ap;
        int k;
        line[n++] = ' ';
        va_start(ap, kv_fmt);
        k = vsnprintf(line + n, sizeof(line) - n - 1, kv_fmt, ap);
        va_end(ap);
        if (k > 0) {
            n += TERN_MIN((size_t)k, sizeof(line) - n - 2);
        }
    }
    line[n++] = '\n';
    /* Nothing sensible to do if stderr is gone. */
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}
