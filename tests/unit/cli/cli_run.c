/*
 * The child-process runner of the CLI unit tests (cli_run.h): the `tern`
 * binary (TERN_CLI_PATH, set by CMake) run through the shell with stdin,
 * stdout and stderr redirected to files of a temporary directory.
 */
#include "cli_run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

void cli_slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (f != NULL) {
        n = fread(buf, 1, cap - 1, f);
        (void)fclose(f);
    }
    buf[n] = '\0';
}

void cli_run_tern(struct cli_run *r,
                  const char *addr,
                  const char *input,
                  const char *args)
{
    char dir[] = "/tmp/tern-cli-test-XXXXXX";
    char cmd[2048], out[128], err[128], in[128];
    int st;
    cr_assert_not_null(mkdtemp(dir));
    (void)snprintf(out, sizeof out, "%s/out", dir);
    (void)snprintf(err, sizeof err, "%s/err", dir);
    (void)snprintf(in, sizeof in, "%s/in", dir);
    FILE *f = fopen(in, "w");
    cr_assert_not_null(f);
    (void)fputs(input != NULL ? input : "", f);
    (void)fclose(f);
    (void)snprintf(cmd, sizeof cmd,
                   "%s -s %s --timeout-ms 2000 %s <%s >%s 2>%s", TERN_CLI_PATH,
                   addr, args, in, out, err);
    st = system(cmd);
    r->code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    cli_slurp(out, r->out, sizeof r->out);
    cli_slurp(err, r->err, sizeof r->err);
    (void)unlink(out);
    (void)unlink(err);
    (void)unlink(in);
    (void)rmdir(dir);
}
