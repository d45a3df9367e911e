/*
 * Declarations shared by the `tern` CLI sources: cli.c (argument parsing
 * and the queue/produce/consume/cluster commands), bench.c (`tern bench`)
 * and util.c (error reporting, number parsing, clock). The CLI uses only
 * the public libtern API.
 */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include <stdint.h>

#include <tern/tern.h>

/* util.c. Print "tern: <what>: <strerror>[ (<detail>)]" to stderr. */
void cli_error(struct tern_client *c, int rv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Parse a non-negative decimal integer option value; 0 or -1 (message
 * printed). */
int cli_parse_u64(const char *opt, const char *s, uint64_t *out);
/* Monotonic time in microseconds. */
int64_t cli_now_us(void);

/* bench.c. `tern bench QUEUE ...`; returns the process exit code. */
int cli_bench(struct tern_client *c, int argc, char **argv);

#endif /* TERN_CLI_H */
