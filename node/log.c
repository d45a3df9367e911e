/*
 * ternd's event log: one line per event, written with a single write(2) so
 * lines from one process never interleave, to stderr or to [log] file.
 *
 * Text format (the default):
 *
 *   ts=2026-12-02T14:41:00.123Z level=INFO node=1 msg="leader changed" \
 *       role=leader leader=1 term=3
 *
 * ts is UTC ISO 8601 with milliseconds; msg is quoted (quotes and
 * backslashes escaped, control characters replaced by '?'); the key=value
 * tail is formatted by the caller. JSON format ([log] format = json): one
 * object per line, {"ts":..., "level":"info", "node":1, "msg":...} and
 * then one member per field of the key=value tail, in order: a value
 * quoted in the tail ("..." with \" and \\ escapes) or anything but an
 * integer is a JSON string, an integer a JSON number; text that is not a
 * key=value pair goes into a member "_" . Strings are escaped for JSON:
 * quote, backslash, control characters (\n, \t, \r, else \u00XX) and
 * every byte that is not part of valid UTF-8 (as \ufffd).
 *
 * Under systemd (JOURNAL_STREAM names the device and inode of our stderr,
 * and we log to stderr) every line starts with its syslog priority, "<3>"
 * error, "<4>" warning, "<6>" info, "<7>" debug (sd-daemon.h's SD_ERR
 * etc.), and carries no timestamp of ours: the journal stamps it.
 *
 * [log] file: opened O_APPEND at start; node_log_reopen (SIGHUP) opens the
 * path again and dup2s it over the same descriptor, so a rotated file
 * (renamed away by logrotate) gets no more lines and a concurrent writer
 * never sees a closed descriptor. A line is at most 2 KiB of text (4 KiB
 * of JSON); longer lines are cut, still well-formed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tern_common.h>

#include "log.h"

static uint64_t log_node_id;
static enum node_log_level log_level = NODE_LOG_INFO;
static enum node_log_format log_format = NODE_LOG_TEXT;
static bool log_journal;           /* stderr is the journal's stream */
static int log_fd = STDERR_FILENO; /* stderr or the [log] file */
static char *log_path;             /* [log] file, NULL: stderr */

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
/* syslog priorities (sd-daemon.h SD_ERR, SD_WARNING, SD_INFO, SD_DEBUG) */
static const char level_prio[] = {'3', '4', '6', '7'};
static const char *const format_names[] = {"text", "json"};

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

int node_log_format_parse(const char *s)
{
    for (unsigned i = 0; i < TERN_ARRAY_SIZE(format_names); i++) {
        if (strcasecmp(s, format_names[i]) == 0) {
            return (int)i;
        }
    }
    return -1;
}

const char *node_log_format_name(enum node_log_format f)
{
    if ((unsigned)f >= TERN_ARRAY_SIZE(format_names)) {
        return "?";
    }
    return format_names[f];
}

bool node_log_journal_stream(const char *env, int fd)
{
    unsigned long long dev, ino;
    struct stat st;
    char tail;
    if (env == NULL || sscanf(env, "%llu:%llu%c", &dev, &ino, &tail) != 2) {
        return false;
    }
    return fstat(fd, &st) == 0 && (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

static int open_log(const char *path, char *errmsg)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        int e = errno;
        tern_errmsg_printf(errmsg, "open log file %s: %s", path, strerror(e));
        return -e;
    }
    return fd;
}

int node_log_open(const char *path, enum node_log_format format, char *errmsg)
{
    log_format = format;
    if (path == NULL) {
        log_journal =
            node_log_journal_stream(getenv("JOURNAL_STREAM"), STDERR_FILENO);
        return 0;
    }
    int fd = open_log(path, errmsg);
    if (fd < 0) {
        return fd;
    }
    size_t len = strlen(path) + 1;
    char *p = tern_malloc(len);
    if (p == NULL) {
        close(fd);
        tern_errmsg_printf(errmsg, "out of memory");
        return -ENOMEM;
    }
    memcpy(p, path, len);
    if (log_fd != STDERR_FILENO) {
        close(log_fd);
    }
    tern_free(log_path);
    log_path = p;
    log_fd = fd;
    log_journal = false;
    return 0;
}

int node_log_reopen(char *errmsg)
{
    int fd;
    if (log_path == NULL) {
        return 0;
    }
    fd = open_log(log_path, errmsg);
    if (fd < 0) {
        return fd;
    }
    if (dup2(fd, log_fd) < 0) {
        int e = errno;
        close(fd);
        tern_errmsg_printf(errmsg, "dup2 log file %s: %s", log_path,
                           strerror(e));
        return -e;
    }
    close(fd);
    return 0;
}

bool node_log_to_file(void)
{
    return log_path != NULL;
}

/* ---- Line formatting ---------------------------------------------------- */

/* A bounded line: puts stop (and set cut) once they would leave fewer
 * than reserve bytes free, so the closing bytes always fit. */
struct lbuf
{
    char *p;
    size_t n, cap, reserve;
    bool cut;
};

static bool room(struct lbuf *b, size_t k)
{
    if (b->cut || b->n + k + b->reserve > b->cap) {
        b->cut = true;
        return false;
    }
    return true;
}

static void put_raw(struct lbuf *b, const char *s, size_t k)
{
    if (room(b, k)) {
        memcpy(b->p + b->n, s, k);
        b->n += k;
    }
}

static void put_str(struct lbuf *b, const char *s)
{
    put_raw(b, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s[0..len) (1..4), or 0. */
static size_t utf8_len(const unsigned char *s, size_t len)
{
    size_t k;
    uint32_t cp;
    if (s[0] < 0x80) {
        return 1;
    } else if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        k = 2;
        cp = s[0] & 0x1fu;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        k = 3;
        cp = s[0] & 0x0fu;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        k = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (len < k) {
        return 0;
    }
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0u) != 0x80u) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }
    return k;
}

/* s[0..len) as the inside of a JSON string. */
static void put_json_chars(struct lbuf *b, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len && !b->cut) {
        unsigned char ch = u[i];
        char esc[8];
        size_t k;
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            put_raw(b, esc, 2);
            i++;
        } else if (ch == '\n') {
            put_raw(b, "\\n", 2);
            i++;
        } else if (ch == '\t') {
            put_raw(b, "\\t", 2);
            i++;
        } else if (ch == '\r') {
            put_raw(b, "\\r", 2);
            i++;
        } else if (ch < 0x20 || ch == 0x7f) {
            (void)snprintf(esc, sizeof esc, "\\u%04x", ch);
            put_raw(b, esc, 6);
            i++;
        } else if ((k = utf8_len(u + i, len - i)) == 0) {
            put_raw(b, "\\ufffd", 6);
            i++;
        } else {
            put_raw(b, s + i, k);
            i += k;
        }
    }
}

static void put_json_string(struct lbuf *b, const char *s, size_t len)
{
    put_raw(b, "\"", 1);
    put_json_chars(b, s, len);
    put_raw(b, "\"", 1);
}

static bool is_integer(const char *s, size_t len)
{
    size_t i = s[0] == '-' ? 1 : 0;
    if (len == i || len - i > 18 || (s[i] == '0' && len - i > 1)) {
        return false;
    }
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
    }
    return true;
}

/* The key=value tail as JSON members (each preceded by a comma), each
 * appended whole or not at all: a cut line drops the members that do not
 * fit, so it stays well-formed. */
static void put_json_fields(struct lbuf *out, const char *kv)
{
    char mem[8192];
    const char *p = kv;
    while (*p != '\0' && !out->cut) {
        struct lbuf mb = {mem, 0, sizeof mem, 0, false};
        struct lbuf *b = &mb;
        const char *key, *eq, *val;
        size_t klen;
        while (*p == ' ') {
            p++;
        }
        if (*p == '\0') {
            break;
        }
        key = p;
        while (*p != '\0' && *p != ' ' && *p != '=' && *p != '"') {
            p++;
        }
        eq = p;
        klen = (size_t)(eq - key);
        put_raw(b, ",", 1);
        if (*eq != '=' || klen == 0) {
            /* Not a key=value pair: the rest up to the next space. */
            while (*p != '\0' && *p != ' ') {
                p++;
            }
            put_raw(b, "\"_\":", 4);
            put_json_string(b, key, (size_t)(p - key));
            if (!mb.cut) {
                put_raw(out, mem, mb.n);
            }
            continue;
        }
        put_json_string(b, key, klen);
        put_raw(b, ":", 1);
        val = ++p;
        if (*val == '"') {
            /* Quoted: unescape \" and \\ while copying. */
            put_raw(b, "\"", 1);
            p = val + 1;
            while (*p != '\0' && *p != '"' && !b->cut) {
                const char *run = p;
                if (*p == '\\' && (p[1] == '"' || p[1] == '\\')) {
                    put_json_chars(b, p + 1, 1);
                    p += 2;
                    continue;
                }
                while (*p != '\0' && *p != '"' && *p != '\\') {
                    p++;
                }
                if (p == run) {
                    p++; /* a lone backslash */
                }
                put_json_chars(b, run, (size_t)(p - run));
            }
            put_raw(b, "\"", 1);
            if (*p == '"') {
                p++;
            }
        } else {
            while (*p != '\0' && *p != ' ') {
                p++;
            }
            if (p > val && is_integer(val, (size_t)(p - val))) {
                put_raw(b, val, (size_t)(p - val));
            } else {
                put_json_string(b, val, (size_t)(p - val));
            }
        }
        if (mb.cut) {
            out->cut = true; /* one member above 8 KiB: stop here */
        } else {
            put_raw(out, mem, mb.n);
        }
    }
}

size_t node_log_format_line(char *buf,
                            size_t size,
                            const struct node_log_style *style,
                            const struct timespec *ts,
                            enum node_log_level level,
                            uint64_t node_id,
                            const char *msg,
                            const char *kv)
{
    struct lbuf b = {buf, 0, size, 0, false};
    char tmp[96];
    struct tm tm;
    bool json = style->format == NODE_LOG_JSON;

    if ((unsigned)level >= TERN_ARRAY_SIZE(level_tags) || size < 256) {
        return 0;
    }
    b.reserve = json ? 3 : 2; /* "}\n (JSON) or "\n */
    if (style->journal) {
        tmp[0] = '<';
        tmp[1] = level_prio[level];
        tmp[2] = '>';
        put_raw(&b, tmp, 3);
    }
    if (json) {
        put_str(&b, "{");
        if (!style->journal) {
            gmtime_r(&ts->tv_sec, &tm);
            size_t k =
                strftime(tmp, sizeof tmp, "\"ts\":\"%Y-%m-%dT%H:%M:%S", &tm);
            (void)snprintf(tmp + k, sizeof tmp - k, ".%03ldZ\",",
                           ts->tv_nsec / 1000000L);
            put_str(&b, tmp);
        }
        (void)snprintf(tmp, sizeof tmp,
                       "\"level\":\"%s\",\"node\":%llu,\"msg\":",
                       level_names[level], (unsigned long long)node_id);
        put_str(&b, tmp);
        b.reserve = 3; /* the closing quote of msg, then }\n */
        put_raw(&b, "\"", 1);
        put_json_chars(&b, msg, strlen(msg));
        b.cut = false; /* a cut msg ends at a whole character */
        b.reserve = 2;
        put_raw(&b, "\"", 1);
        if (kv != NULL) {
            put_json_fields(&b, kv);
        }
        b.p[b.n++] = '}';
        b.p[b.n++] = '\n';
        return b.n;
    }
    if (!style->journal) {
        gmtime_r(&ts->tv_sec, &tm);
        size_t k = strftime(tmp, sizeof tmp, "ts=%Y-%m-%dT%H:%M:%S", &tm);
        (void)snprintf(tmp + k, sizeof tmp - k, ".%03ldZ ",
                       ts->tv_nsec / 1000000L);
        put_str(&b, tmp);
    }
    (void)snprintf(tmp, sizeof tmp, "level=%s node=%llu msg=\"",
                   level_tags[level], (unsigned long long)node_id);
    put_str(&b, tmp);
    b.reserve = 3;
    for (const char *p = msg; *p != '\0' && !b.cut; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            put_raw(&b, e, 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            put_raw(&b, "?", 1);
        } else {
            put_raw(&b, (const char *)&ch, 1);
        }
    }
    b.cut = false;
    b.reserve = 1;
    put_raw(&b, "\"", 1);
    if (kv != NULL && kv[0] != '\0') {
        put_raw(&b, " ", 1);
        put_str(&b, kv);
        if (b.cut) {
            /* as much of the tail as fits */
            size_t k = TERN_MIN(strlen(kv), b.cap - b.n - 1);
            memcpy(b.p + b.n, kv, k);
            b.n += k;
            for (size_t i = b.n - k; i < b.n; i++) {
                if (b.p[i] == '\n') {
                    b.p[i] = ' ';
                }
            }
        }
    }
    b.p[b.n++] = '\n';
    return b.n;
}

void node_log(enum node_log_level level,
              const char *msg,
              const char *kv_fmt,
              ...)
{
    char kv[2048];
    char line[4096];
    struct timespec ts;
    struct node_log_style style = {log_format, log_journal};
    size_t n;

    if (!node_log_enabled(level)) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    kv[0] = '\0';
    if (kv_fmt != NULL && kv_fmt[0] != '\0') {
        va_list ap;
        va_start(ap, kv_fmt);
        (void)vsnprintf(kv, sizeof kv, kv_fmt, ap);
        va_end(ap);
    }
    n = node_log_format_line(line,
                             log_format == NODE_LOG_JSON ? sizeof line : 2048,
                             &style, &ts, level, log_node_id, msg, kv);
    /* Nothing sensible to do if the log is gone. */
    ssize_t w = write(log_fd, line, n);
    (void)w;
}
