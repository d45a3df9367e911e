/*
 * ternd's event log (log.c): levels, formats (text key=value or JSON,
 * journald priority prefixes), the log file and its reopening, and the
 * one-line writer. Private to node/ and its tests.
 */
#ifndef TERN_NODE_LOG_H
#define TERN_NODE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

enum node_log_level {
    NODE_LOG_ERROR = 0,
    NODE_LOG_WARN,
    NODE_LOG_INFO,
    NODE_LOG_DEBUG,
};

enum node_log_format {
    NODE_LOG_TEXT = 0,
    NODE_LOG_JSON,
};

/* Set the node id stamped on every line and the most verbose level shown.
 * Before this call lines carry node=0 and level INFO is shown. */
void node_log_setup(uint64_t node_id, enum node_log_level level);
bool node_log_enabled(enum node_log_level level);
/* Where and how lines go: path NULL = stderr (then, when JOURNAL_STREAM
 * names stderr, lines carry a "<N>" priority and no timestamp), else
 * append to path (created 0640; path is copied). Call once at start,
 * before other threads log. 0, or -errno with errmsg (lines still go to
 * stderr). */
int node_log_open(const char *path, enum node_log_format format, char *errmsg);
/* Reopen the log file by its path over the same descriptor (SIGHUP,
 * logrotate); nothing to do when logging to stderr. 0, or -errno with
 * errmsg (lines keep going to the old file). */
int node_log_reopen(char *errmsg);
/* Whether node_log_open was given a file. */
bool node_log_to_file(void);
/* Whether env (JOURNAL_STREAM's value, "dev:ino"; may be NULL) names
 * the file open on fd. */
bool node_log_journal_stream(const char *env, int fd);
/* Write one line (format: log.c) with a single write(2). kv_fmt (may be
 * NULL) formats the key=value tail. */
void node_log(enum node_log_level level,
              const char *msg,
              const char *kv_fmt,
              ...) __attribute__((format(printf, 3, 4)));
/* "error" / "warn" / "info" / "debug" -> level; -1 if unknown. */
int node_log_level_parse(const char *s);
const char *node_log_level_name(enum node_log_level level);
/* "text" / "json" -> format; -1 if unknown. */
int node_log_format_parse(const char *s);
const char *node_log_format_name(enum node_log_format f);

/* How a line looks: the format, and journal = priority prefix "<N>" and
 * no timestamp. */
struct node_log_style
{
    enum node_log_format format;
    bool journal;
};
/* Format one line (ending in '\n', no NUL) into buf[0..size) (caller-
 * owned; size >= 256, else nothing is written): msg and kv (the key=value
 * tail, may be NULL) are borrowed. Returns its length; a line that does
 * not fit is cut, still well-formed (JSON: whole members only). */
size_t node_log_format_line(char *buf,
                            size_t size,
                            const struct node_log_style *style,
                            const struct timespec *ts,
                            enum node_log_level level,
                            uint64_t node_id,
                            const char *msg,
                            const char *kv);

#endif /* TERN_NODE_LOG_H */
