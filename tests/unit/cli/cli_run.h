/*
 * The `tern` binary run as a child process for the CLI unit tests: one
 * runner, shared by every test file, that starts
 * `tern -s ADDR --timeout-ms 2000 ARGS` with a given stdin and captures
 * its exit code, stdout and stderr.
 */
#ifndef TERN_TEST_CLI_RUN_H
#define TERN_TEST_CLI_RUN_H

#include <stddef.h>

/* What one run of `tern` left behind. */
struct cli_run
{
    int code;       /* exit code, or -1 if it did not exit normally */
    char out[8192]; /* stdout, NUL-terminated, truncated to fit */
    char err[4096]; /* stderr, NUL-terminated, truncated to fit */
};

/* Reads at most cap - 1 bytes of the file at path into buf and terminates
 * it; an unreadable file reads as "". path and buf are caller-owned. */
void cli_slurp(const char *path, char *buf, size_t cap);

/* Runs `tern -s addr --timeout-ms 2000 <args>` (args split by the shell)
 * with stdin holding input (NULL: empty) and fills *r (OUT). The
 * temporary files live in a fresh directory under /tmp, removed before
 * the call returns. All pointers are caller-owned. */
void cli_run_tern(struct cli_run *r,
                  const char *addr,
                  const char *input,
                  const char *args);

#endif
