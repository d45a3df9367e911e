/*
 * ternd's event log (log.c): levels and the one-line key=value writer.
 * Private to node/ and its tests.
 */
#ifndef TERN_NODE_LOG_H
#define TERN_NODE_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum node_log_level {
    NODE_LOG_ERROR = 0,
    NODE_LOG_WARN,
    NODE_LOG_INFO,
    NODE_LOG_DEBUG,
};

/* Set the node id stamped on every line and the most verbose level shown.
 * Before this call lines carry node=0 and level INFO is shown. */
void node_log_setup(uint64_t node_id, enum node_log_level level);
bool node_log_enabled(enum node_log_level level);
/* Write one line "ts=... level=... node=... msg="msg" <kv>" to stderr with
 * a single write(2). kv_fmt (may be NULL) formats the key=value tail. */
void node_log(enum node_log_level level,
              const char *msg,
              const char *kv_fmt,
              ...) __attribute__((format(printf, 3, 4)));
/* "error" / "warn" / "info" / "debug" -> level; -1 if unknown. */
int node_log_level_parse(const char *s);
const char *node_log_level_name(enum node_log_level level);

#endif /* TERN_NODE_LOG_H */
