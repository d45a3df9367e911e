/*
 * The `tern` CLI (client/cli.c) run as a child process against the fake
 * server: exact output formats other scripts parse (ack log, consume lines,
 * queue list JSON), exit codes and the error line format.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_server.h"

struct cli_run
{
    int code;
    char out[8192];
    char err[4096];
};

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (f != NULL) {
        n = fread(buf, 1, cap - 1, f);
        (void)fclose(f);
    }
    buf[n] = '\0';
}

/* Run `tern -s addr --timeout-ms 2000 <args>` with stdin from `input`. */
static void run_cli(struct cli_run *r,
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
    slurp(out, r->out, sizeof r->out);
    slurp(err, r->err, sizeof r->err);
    (void)unlink(out);
    (void)unlink(err);
    (void)unlink(in);
    (void)rmdir(dir);
}

Test(cli, queue_produce_consume_formats)
{
    struct fake_server fs;
    struct cli_run r;
    char ack[] = "/tmp/tern-cli-ack-XXXXXX";
    char args[512];
    char buf[4096];
    int fd = mkstemp(ack);
    cr_assert_geq(fd, 0);
    (void)close(fd);
    cr_assert_eq(fake_start(&fs, NULL), 0);

    run_cli(&r, fs.addr, NULL, "queue create orders");
    cr_expect_eq(r.code, 0, "%s", r.err);
    run_cli(&r, fs.addr, NULL, "queue create orders");
    cr_expect_eq(r.code, 1);
    cr_expect_eq(strncmp(r.err,
                         "tern: queue create orders: queue already "
                         "exists",
                         47),
                 0, "%s", r.err);

    (void)snprintf(args, sizeof args,
                   "produce orders --count 3 --size 8 --batch 2 --window 2 "
                   "--ack-log %s --id-prefix p",
                   ack);
    run_cli(&r, fs.addr, NULL, args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    slurp(ack, buf, sizeof buf);
    cr_expect_str_eq(buf, "p-0\t0\np-1\t1\np-2\t2\n");
    cr_expect_eq(fake_n_msgs(&fs), 3);
    char *m0 = fake_msg(&fs, 0);
    cr_expect_str_eq(m0, "p-0.....");
    free(m0);

    (void)snprintf(args, sizeof args, "produce orders --ack-log %s", ack);
    run_cli(&r, fs.addr, "hello\nworld.x\n", args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    slurp(ack, buf, sizeof buf);
    cr_expect_str_eq(buf, "p-0\t0\np-1\t1\np-2\t2\nhello\t3\nworld.x\t4\n");

    run_cli(&r, fs.addr, NULL, "consume orders");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "0\tp-0\n1\tp-1\n2\tp-2\n3\thello\n4\tworld\n");
    run_cli(&r, fs.addr, NULL, "consume orders --offset 1 --max 2");
    cr_expect_str_eq(r.out, "1\tp-1\n2\tp-2\n");
    run_cli(&r, fs.addr, NULL,
            "consume orders --offset 5 --follow --idle-exit-ms 200");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "");

    run_cli(&r, fs.addr, NULL, "queue list --json");
    cr_expect_eq(r.code, 0);
    cr_expect_str_eq(r.out,
                     "{\"queues\":[{\"name\":\"orders\","
                     "\"start_offset\":0,\"next_offset\":5}]}\n");
    run_cli(&r, fs.addr, NULL, "cluster status --json");
    cr_expect_eq(r.code, 0);
    cr_expect_neq(strstr(r.out, "\"role\":\"leader\""), NULL, "%s", r.out);

    run_cli(&r, fs.addr, NULL, "produce nosuch --count 2");
    cr_expect_eq(r.code, 1);
    cr_expect_eq(strncmp(r.err, "tern: produce nosuch: no such queue", 35), 0,
                 "%s", r.err);
    run_cli(&r, fs.addr, NULL, "bench orders --count 20 --window 4 --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(strncmp(r.out, "{\"queue\":\"orders\"", 17), 0, "%s", r.out);
    run_cli(&r, fs.addr, NULL, "frobnicate");
    cr_expect_eq(r.code, 2);

    (void)unlink(ack);
    fake_stop(&fs);
}

Test(cli, cluster_stats_and_bench_replication)
{
    struct fake_server fs;
    struct cli_run r;
    cr_assert_eq(fake_start(&fs, NULL), 0);

    run_cli(&r, fs.addr, NULL, "queue create q");
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_cli(&r, fs.addr, NULL, "produce q --count 2");
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_cli(&r, fs.addr, NULL, "cluster stats --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    {
        char want[512];
        (void)snprintf(want, sizeof want,
                       "{\"server\":\"%s\",\"node_id\":1,\"role\":\"leader\","
                       "\"transport\":\"tcp\",\"durability\":\"disk\","
                       "\"count\":2,\"dropped\":0,\"replication_ns\":{"
                       "\"min\":1000,\"p50\":1000,\"p90\":1800,\"p99\":1980,"
                       "\"p999\":1998,\"max\":2000,\"mean\":1500}}\n",
                       fs.addr);
        cr_expect_str_eq(r.out, want);
    }
    run_cli(&r, fs.addr, NULL, "cluster stats --reset");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_neq(strstr(r.out, "samples:       2 (0 dropped)\n"), NULL, "%s",
                  r.out);
    cr_expect_neq(strstr(r.out,
                         "replication (leader append->commit), us:\n"
                         "  min 1.0  p50 1.0  p90 1.8  p99 2.0  p99.9 2.0  "
                         "max 2.0  mean 1.5\n(counters reset)\n"),
                  NULL, "%s", r.out);
    run_cli(&r, fs.addr, NULL, "cluster stats");
    cr_expect_neq(strstr(r.out, "samples:       0 (0 dropped)\n"), NULL, "%s",
                  r.out);
    run_cli(&r, fs.addr, NULL, "cluster stats --bogus");
    cr_expect_eq(r.code, 2);

    /* The bench resets the counters after creating the queue, so the 20
     * produce requests are all it sees (fake: sample k took k us). */
    run_cli(&r, fs.addr, NULL, "produce q --count 5");
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_cli(&r, fs.addr, NULL,
            "bench q --count 20 --window 4 --replication --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_neq(strstr(r.out,
                         ",\"replication_us\":{\"p50\":10.000,\"p99\":19.800,"
                         "\"p999\":19.980,\"max\":20.000,\"mean\":10.500,"
                         "\"count\":20,\"node_id\":1,\"transport\":\"tcp\","
                         "\"durability\":\"disk\"}}\n"),
                  NULL, "%s", r.out);
    cr_expect_neq(strstr(r.err,
                         "  replication (leader append->commit)  p50 "
                         "10.0 us  p99 19.8 us"),
                  NULL, "%s", r.err);
    /* Without --replication: no STATS request, no replication figures. */
    run_cli(&r, fs.addr, NULL, "bench q --count 3 --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_null(strstr(r.out, "replication"), "%s", r.out);
    fake_stop(&fs);
}
