/*
 * The `tern` CLI (client/cli.c) run as a child process against the fake
 * server: exact output formats other scripts parse (ack log, consume lines,
 * queue list JSON, the admin lists), exit codes and the error line
 * format, the login options, `tern user hash` (parsed back), and the
 * message property options (--format, --json, --raw, message get),
 * message trace (text and JSON) and the group skip line of consume.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <auth.h>
#include <tern/tern.h>

#include "auth_fake.h"
#include "cli_run.h"
#include "fake_server.h"

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

    cli_run_tern(&r, fs.addr, NULL, "queue create orders");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "queue create orders");
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
    cli_run_tern(&r, fs.addr, NULL, args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_slurp(ack, buf, sizeof buf);
    cr_expect_str_eq(buf, "p-0\t0\np-1\t1\np-2\t2\n");
    cr_expect_eq(fake_n_msgs(&fs), 3);
    char *m0 = fake_msg(&fs, 0);
    cr_expect_str_eq(m0, "p-0.....");
    free(m0);

    (void)snprintf(args, sizeof args, "produce orders --ack-log %s", ack);
    cli_run_tern(&r, fs.addr, "hello\nworld.x\n", args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_slurp(ack, buf, sizeof buf);
    cr_expect_str_eq(buf, "p-0\t0\np-1\t1\np-2\t2\nhello\t3\nworld.x\t4\n");

    cli_run_tern(&r, fs.addr, NULL, "consume orders");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out,
                     "0\tp-0.....\n1\tp-1.....\n2\tp-2.....\n"
                     "3\thello\n4\tworld.x\n");
    /* --format text is the default line; raw prints the payloads whole */
    cli_run_tern(&r, fs.addr, NULL, "consume orders --format text");
    cr_expect_str_eq(r.out,
                     "0\tp-0.....\n1\tp-1.....\n2\tp-2.....\n"
                     "3\thello\n4\tworld.x\n");
    cli_run_tern(&r, fs.addr, NULL, "consume orders --offset 3 --format raw");
    cr_expect_str_eq(r.out, "hello\nworld.x\n");
    cli_run_tern(&r, fs.addr, NULL, "consume orders --offset 1 --max 2");
    cr_expect_str_eq(r.out, "1\tp-1.....\n2\tp-2.....\n");
    cli_run_tern(&r, fs.addr, NULL,
                 "consume orders --offset 5 --follow --idle-exit-ms 200");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "");

    cli_run_tern(&r, fs.addr, NULL, "queue list --json");
    cr_expect_eq(r.code, 0);
    cr_expect_str_eq(r.out,
                     "{\"queues\":[{\"name\":\"orders\","
                     "\"start_offset\":0,\"next_offset\":5}]}\n");
    cli_run_tern(&r, fs.addr, NULL, "cluster status --json");
    cr_expect_eq(r.code, 0);
    cr_expect_neq(strstr(r.out, "\"role\":\"leader\""), NULL, "%s", r.out);

    cli_run_tern(&r, fs.addr, NULL, "produce nosuch --count 2");
    cr_expect_eq(r.code, 1);
    cr_expect_eq(strncmp(r.err, "tern: produce nosuch: no such queue", 35), 0,
                 "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL,
                 "bench orders --count 20 --window 4 --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(strncmp(r.out, "{\"queue\":\"orders\"", 17), 0, "%s", r.out);
    cli_run_tern(&r, fs.addr, NULL, "frobnicate");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "unknown command 'frobnicate'"), NULL, "%s",
                  r.err);

    (void)unlink(ack);
    fake_stop(&fs);
}

Test(cli, cluster_stats_and_bench_replication)
{
    struct fake_server fs;
    struct cli_run r;
    cr_assert_eq(fake_start(&fs, NULL), 0);

    cli_run_tern(&r, fs.addr, NULL, "queue create q");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "produce q --count 2");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "cluster stats --json");
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
    cli_run_tern(&r, fs.addr, NULL, "cluster stats --reset");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_neq(strstr(r.out, "samples:       2 (0 dropped)\n"), NULL, "%s",
                  r.out);
    cr_expect_neq(strstr(r.out,
                         "replication (leader append->commit), us:\n"
                         "  min 1.0  p50 1.0  p90 1.8  p99 2.0  p99.9 2.0  "
                         "max 2.0  mean 1.5\n(counters reset)\n"),
                  NULL, "%s", r.out);
    cli_run_tern(&r, fs.addr, NULL, "cluster stats");
    cr_expect_neq(strstr(r.out, "samples:       0 (0 dropped)\n"), NULL, "%s",
                  r.out);
    cli_run_tern(&r, fs.addr, NULL, "cluster stats --bogus");
    cr_expect_eq(r.code, 2);

    /* The bench resets the counters after creating the queue, so the 20
     * produce requests are all it sees (fake: sample k took k us). */
    cli_run_tern(&r, fs.addr, NULL, "produce q --count 5");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL,
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
    cli_run_tern(&r, fs.addr, NULL, "bench q --count 3 --json");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_null(strstr(r.out, "replication"), "%s", r.out);
    fake_stop(&fs);
}

/* ---- Login and administration ---- */

/* A 0600 file holding password and a newline; path into buf[cap]. */
static void password_file(char *buf, size_t cap, const char *password)
{
    int fd;
    FILE *f;
    (void)snprintf(buf, cap, "/tmp/tern-cli-pw-XXXXXX");
    fd = mkstemp(buf);
    cr_assert_geq(fd, 0);
    f = fdopen(fd, "w");
    cr_assert_not_null(f);
    (void)fprintf(f, "%s\n", password);
    (void)fclose(f);
}

Test(cli, user_hash_parses_back)
{
    struct cli_run r;
    struct auth_scram_cred cred, again;
    char why[TERN_ERRMSG_SIZE];
    char pwf[64];
    size_t len;

    cli_run_tern(&r, "127.0.0.1:1", "s3cret pw\n",
                 "user hash --password-stdin");
    cr_assert_eq(r.code, 0, "%s", r.err);
    len = strcspn(r.out, "\n");
    cr_expect_eq(r.out[len], '\n');
    cr_expect_eq(r.out[len + 1], '\0');
    cr_assert_eq(auth_scram_cred_parse(r.out, len, &cred, why), 0, "%s: %s",
                 r.out, why);
    cr_assert_eq(auth_scram_cred_derive("s3cret pw", cred.salt, cred.salt_len,
                                        cred.iterations, &again, why),
                 0);
    cr_expect_eq(
        memcmp(cred.stored_key, again.stored_key, sizeof cred.stored_key), 0);
    cr_expect_eq(
        memcmp(cred.server_key, again.server_key, sizeof cred.server_key), 0);

    password_file(pwf, sizeof pwf, "from a file");
    {
        char args[128];
        (void)snprintf(args, sizeof args, "user hash --password-file %s", pwf);
        cli_run_tern(&r, "127.0.0.1:1", NULL, args);
    }
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(strncmp(r.out, "SCRAM-SHA-256$4096:", 19), 0, "%s", r.out);
    (void)unlink(pwf);

    cli_run_tern(&r, "127.0.0.1:1", NULL, "user hash");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, "127.0.0.1:1", "", "user hash --password-stdin");
    cr_expect_eq(r.code, 1);
    cli_run_tern(&r, "127.0.0.1:1", "caf\xc3\xa9\n",
                 "user hash --password-stdin");
    cr_expect_eq(r.code, 1);
    cr_expect_eq(strncmp(r.err, "tern: user hash", 15), 0, "%s", r.err);
}

Test(cli, login_options_and_environment)
{
    struct fake_server fs;
    struct authsrv a;
    struct cli_run r;
    char pwf[64], bad[64];
    char args[256];
    struct authsrv s;

    start_auth_server(&fs, &a);
    password_file(pwf, sizeof pwf, AUTHSRV_PASSWORD);
    password_file(bad, sizeof bad, "not it");

    (void)snprintf(args, sizeof args,
                   "--user alice --password-file %s --namespace acme "
                   "queue create q",
                   pwf);
    cli_run_tern(&r, fs.addr, NULL, args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    s = snap(&fs, &a);
    cr_expect_eq(s.logins, 1);
    cr_expect_str_eq(s.last_ns, "acme");
    cr_expect_eq(s.unauthed_requests, 0);

    /* The environment. */
    cr_assert_eq(setenv("TERN_USER", "alice", 1), 0);
    cr_assert_eq(setenv("TERN_PASSWORD", AUTHSRV_PASSWORD, 1), 0);
    cr_assert_eq(setenv("TERN_NAMESPACE", "env-ns", 1), 0);
    cli_run_tern(&r, fs.addr, NULL, "queue list");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(snap(&fs, &a).last_ns, "env-ns");
    cr_expect_eq(snap(&fs, &a).logins, 2);

    /* A wrong password: the error line names the failure and the reason. */
    (void)snprintf(args, sizeof args,
                   "--user alice --password-file %s queue create q2", bad);
    cli_run_tern(&r, fs.addr, NULL, args);
    cr_expect_eq(r.code, 1);
    cr_expect_eq(
        strncmp(r.err, "tern: queue create q2: authentication failed (", 46), 0,
        "%s", r.err);
    cr_expect_neq(strstr(r.err, "invalid-proof"), NULL, "%s", r.err);
    cr_assert_eq(unsetenv("TERN_PASSWORD"), 0);

    /* No password anywhere, a password on the command line, a bad
     * mechanism: usage errors, nothing sent. */
    cli_run_tern(&r, fs.addr, NULL, "queue list");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "needs a password"), NULL, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "--password hunter2 queue list");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "--auth kerberos queue list");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "--auth external queue list");
    cr_expect_eq(r.code, 2); /* needs TLS */
    cr_assert_eq(unsetenv("TERN_USER"), 0);
    cr_assert_eq(unsetenv("TERN_NAMESPACE"), 0);
    cli_run_tern(&r, fs.addr, NULL, "--namespace acme queue list");
    cr_expect_eq(r.code, 2);
    cr_expect_eq(snap(&fs, &a).logins, 2); /* the wrong password's failed */

    (void)unlink(pwf);
    (void)unlink(bad);
    stop_auth_server(&fs, &a);
}

Test(cli, admin_commands)
{
    struct fake_server fs;
    struct authsrv a;
    struct cli_run r;
    struct authsrv s;
    struct auth_scram_cred cred, again;
    char why[TERN_ERRMSG_SIZE];

    start_auth_server(&fs, &a);
    a.require_auth = 0;

    cli_run_tern(&r, fs.addr, "bob pw\n",
                 "user set bob --admin --password-stdin");
    cr_expect_eq(r.code, 0, "%s", r.err);
    s = snap(&fs, &a);
    cr_expect_str_eq(s.user, "bob");
    cr_expect_eq(s.user_flags, TERN_USER_ADMIN);
    cr_assert_eq(
        auth_scram_cred_decode(s.user_cred, s.user_cred_len, &cred, why), 0,
        "%s", why);
    cr_assert_eq(auth_scram_cred_derive("bob pw", cred.salt, cred.salt_len,
                                        cred.iterations, &again, why),
                 0);
    cr_expect_eq(
        memcmp(cred.stored_key, again.stored_key, sizeof cred.stored_key), 0);
    cli_run_tern(&r, fs.addr, NULL, "user set app --cert --no-password");
    cr_expect_eq(r.code, 0, "%s", r.err);
    s = snap(&fs, &a);
    cr_expect_eq(s.user_flags, TERN_USER_CERT);
    cr_expect_eq(s.user_cred_len, 0);
    cli_run_tern(&r, fs.addr, NULL, "user set app"); /* which password? */
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, "x\n",
                 "user set app --no-password --password-stdin");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL,
                 "user set app --no-password"); /* no --cert */
    cr_expect_eq(r.code, 1);
    cr_expect_eq(snap(&fs, &a).user_sets, 2);

    cli_run_tern(&r, fs.addr, NULL, "user list");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "alice\tadmin\tpassword\nnode-app\tcert\t-\n");
    cli_run_tern(&r, fs.addr, NULL, "user list --json");
    cr_expect_str_eq(r.out,
                     "{\"users\":[{\"name\":\"alice\",\"admin\":true,"
                     "\"cert\":false,\"password\":true},{\"name\":"
                     "\"node-app\",\"admin\":false,\"cert\":true,"
                     "\"password\":false}]}\n");
    cli_run_tern(&r, fs.addr, NULL, "user delete bob");
    cr_expect_eq(r.code, 0, "%s", r.err);

    cli_run_tern(&r, fs.addr, NULL,
                 "acl set bob acme orders.* produce,consume");
    cr_expect_eq(r.code, 0, "%s", r.err);
    s = snap(&fs, &a);
    cr_expect_str_eq(s.acl_pattern, "orders.*");
    cr_expect_eq(s.acl_perms, TERN_PERM_PRODUCE | TERN_PERM_CONSUME);
    cli_run_tern(&r, fs.addr, NULL, "acl set bob acme '*' all");
    cr_expect_eq(snap(&fs, &a).acl_perms, TERN_PERM_ALL);
    cli_run_tern(&r, fs.addr, NULL, "acl set bob acme '*' manage,admin");
    cr_expect_eq(snap(&fs, &a).acl_perms, TERN_PERM_MANAGE | TERN_PERM_ADMIN);
    cli_run_tern(&r, fs.addr, NULL, "acl set bob acme '*' read");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "acl set bob acme");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "acl list bob");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(snap(&fs, &a).acl_user, "bob");
    cr_expect_str_eq(r.out,
                     "bob\tacme\torders.*\tproduce,consume\n"
                     "bob\tdefault\t*\tall\n"
                     "carol\tacme\taudit\tconsume\n");
    cli_run_tern(&r, fs.addr, NULL, "acl list --json");
    cr_expect_str_eq(snap(&fs, &a).acl_user, "");
    cr_expect_eq(strncmp(r.out,
                         "{\"grants\":[{\"user\":\"bob\",\"namespace\":"
                         "\"acme\",\"pattern\":\"orders.*\",\"perms\":"
                         "\"produce,consume\"}",
                         86),
                 0, "%s", r.out);
    cli_run_tern(&r, fs.addr, NULL, "acl delete bob acme orders.*");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(snap(&fs, &a).last_op, PROTO_OP_ACL_DELETE);

    cli_run_tern(&r, fs.addr, NULL,
                 "namespace set acme --max-queues 10 --max-bytes 1048576 "
                 "--produce-rate 4096");
    cr_expect_eq(r.code, 0, "%s", r.err);
    s = snap(&fs, &a);
    cr_expect_str_eq(s.ns_name, "acme");
    cr_expect_eq(s.ns_q[0], 10);
    cr_expect_eq(s.ns_q[1], 1048576);
    cr_expect_eq(s.ns_q[2], 4096);
    cli_run_tern(&r, fs.addr, NULL, "namespace set acme --max-queues many");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "namespace list");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "acme\t10\t1048576\t4096\ndefault\t0\t0\t0\n");
    cli_run_tern(&r, fs.addr, NULL, "namespace delete acme");
    cr_expect_eq(r.code, 0, "%s", r.err);

    /* Errors: the CLI's error line with the server's reason. */
    (void)pthread_mutex_lock(&fs.mu);
    a.notfound_deletes = 1;
    (void)pthread_mutex_unlock(&fs.mu);
    cli_run_tern(&r, fs.addr, NULL, "namespace delete acme");
    cr_expect_eq(r.code, 1);
    {
        const char *want =
            "tern: namespace delete acme: no such user, "
            "namespace or grant (";
        cr_expect_eq(strncmp(r.err, want, strlen(want)), 0, "%s", r.err);
    }
    cr_expect_neq(strstr(r.err, "no such thing"), NULL, "%s", r.err);
    stop_auth_server(&fs, &a);
}

/* FETCH (with properties when asked) and MESSAGE_GET answered with one
 * message that has a key, a tag, a header and a producer timestamp, and
 * one without. */
static enum fake_action props_cli_hook(struct fake_server *fs,
                                       int conn,
                                       const struct proto_header *h,
                                       const struct proto_request *r)
{
    static const uint8_t block[] = {
        1,   0,   5,   0,   0,
        0,   0,   0,   0,   0,   /* version, flags, producer ts */
        2,   0,   3,   1,        /* key_len, tag_len, headers */
        'k', '1', 't', 'g', '1', /* key, tag */
        1,   'h', 1,   0,   'v', /* header h=v */
    };
    struct proto_fetched_msg fm[2] = {
        {0, 1700, "a.bc", 4, block, sizeof block},
        {1, 1800, "plain", 5, NULL, 0},
    };
    struct tern_wbuf w;
    if (r->op != PROTO_OP_FETCH && r->op != PROTO_OP_MESSAGE_GET) {
        return FAKE_DEFAULT;
    }
    tern_wbuf_init(&w);
    if (r->op == PROTO_OP_FETCH && (r->flags & PROTO_FETCH_PROPS) == 0) {
        proto_encode_fetch_resp(&w, r->op, h->request_id, 2, 2, fm, 2);
    } else if (r->op == PROTO_OP_FETCH) {
        proto_encode_fetch_props_resp(&w, r->op, h->request_id, 2, 2, fm, 2, 7);
    } else {
        proto_encode_message_get_resp(&w, h->request_id, 7, fm, 1);
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(cli, message_properties_formats)
{
    struct fake_server fs;
    struct cli_run r;
    cr_assert_eq(fake_start(&fs, props_cli_hook), 0);
    cli_run_tern(&r, fs.addr, NULL, "queue create q");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL,
                 "consume q --format '%o|%k|%t|%h|%P|%T|%p|%%'");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out,
                     "0|k1|tg1|h=v|5|1700|a.bc|%\n"
                     "1||||0|1800|plain|%\n");
    cli_run_tern(&r, fs.addr, NULL, "consume q --json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out,
                     "{\"queue\":\"q\",\"offset\":0,\"id\":"
                     "\"00000000000000070000000000000000\",\"append_ts\":1700,"
                     "\"producer_ts\":5,\"key\":\"k1\",\"tag\":\"tg1\","
                     "\"headers\":{\"h\":\"v\"},\"payload\":\"a.bc\"}\n"
                     "{\"queue\":\"q\",\"offset\":1,\"id\":"
                     "\"00000000000000070000000000000001\",\"append_ts\":1800,"
                     "\"payload\":\"plain\"}\n");
    cli_run_tern(&r, fs.addr, NULL, "consume q --format json");
    cr_expect_eq(strncmp(r.out, "{\"queue\":\"q\",\"offset\":0,", 24), 0, "%s",
                 r.out);
    cli_run_tern(&r, fs.addr, NULL, "consume q --raw");
    cr_expect_str_eq(r.out, "a.bc\nplain\n", "%d %s", r.code, r.err);
    cli_run_tern(&r, fs.addr, NULL, "consume q --format raw --delimiter ''");
    cr_expect_str_eq(r.out, "a.bcplain");
    cli_run_tern(&r, fs.addr, NULL,
                 "consume q --format raw --delimiter '\\t|'");
    cr_expect_str_eq(r.out, "a.bc\t|plain\t|");
    cli_run_tern(&r, fs.addr, NULL, "consume q --delimiter '\\q'");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "unknown escape") != NULL, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "consume q --format text");
    cr_expect_str_eq(r.out, "0\ta.bc\n1\tplain\n");
    cli_run_tern(&r, fs.addr, NULL, "message get q --key k1");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out,
                     "0\t00000000000000070000000000000000\tk1\ttg1\t"
                     "a.bc\n");
    /* usage and argument errors */
    cli_run_tern(&r, fs.addr, NULL, "consume q --format '%x'");
    cr_expect_eq(r.code, 2);
    cr_expect(strstr(r.err, "unknown directive") != NULL, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "message get q");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "message get q --offset 1 --key k");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "message get q --id 12");
    cr_expect_eq(r.code, 1);
    cr_expect(strstr(r.err, "message id") != NULL, "%s", r.err);
    cli_run_tern(&r, fs.addr, "x\n", "produce q --header novalue");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, "x\n", "produce q --tag 'a b'");
    cr_expect_eq(r.code, 1);
    cr_expect(strstr(r.err, "tag") != NULL, "%s", r.err);
    cr_expect_eq(fake_n_msgs(&fs), 0, "nothing was produced");
    fake_stop(&fs);
}

/* GROUP_FETCH answered as for a group whose committed offset 2 was
 * trimmed: one message at the first offset 5 (with properties when
 * asked), then the skip tail (3 skipped) when the request asked for it. */
static enum fake_action group_skip_cli_hook(struct fake_server *fs,
                                            int conn,
                                            const struct proto_header *h,
                                            const struct proto_request *r)
{
    struct proto_fetched_msg fm = {5, 1700, "five", 4, NULL, 0};
    struct proto_group_skip skip = {3, 5};
    struct tern_wbuf w;
    if (r->op != PROTO_OP_GROUP_FETCH) {
        return FAKE_DEFAULT;
    }
    tern_wbuf_init(&w);
    if ((r->flags & PROTO_FETCH_PROPS) != 0) {
        proto_encode_fetch_props_resp(&w, r->op, h->request_id, 6, 6, &fm, 1,
                                      7);
    } else {
        proto_encode_fetch_resp(&w, r->op, h->request_id, 6, 6, &fm, 1);
    }
    if ((r->flags & PROTO_GROUP_FETCH_SKIPPED) != 0) {
        proto_put_group_skip(&w, &skip);
        (void)proto_frame_end(&w, 0);
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

/* `tern consume --group` says what retention took from the group, also
 * with a tag filter or a format (the filtered group fetch asks too). */
Test(cli, consume_group_skip_line_with_filter)
{
    static const char *const args[3] = {
        "consume q --group g",
        "consume q --group g --tag t",
        "consume q --group g --tag t --format '%o %p'",
    };
    static const char *const outs[3] = {"5\tfive\n", "5\tfive\n", "5 five\n"};
    struct fake_server fs;
    struct cli_run r;
    cr_assert_eq(fake_start(&fs, group_skip_cli_hook), 0);
    for (int i = 0; i < 3; i++) {
        cli_run_tern(&r, fs.addr, NULL, args[i]);
        cr_assert_eq(r.code, 0, "%s: %s", args[i], r.err);
        cr_expect_str_eq(r.out, outs[i], "%s", args[i]);
        cr_expect_str_eq(r.err,
                         "tern: group g: 3 messages below the queue's first "
                         "offset 5 were trimmed before they were consumed\n",
                         "%s", args[i]);
    }
    fake_stop(&fs);
}

/* MESSAGE_TRACE answered for offset 41 (with a key, a tag and two groups,
 * one with an unknown commit) and offset 5 (no producer, no key, term
 * unknown); offset 3 is trimmed. */
static enum fake_action trace_cli_hook(struct fake_server *fs,
                                       int conn,
                                       const struct proto_header *h,
                                       const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_MESSAGE_TRACE) {
        return FAKE_DEFAULT;
    }
    tern_wbuf_init(&w);
    if (r->offset == 3) {
        proto_encode_error(&w, r->op, h->request_id, TERN_EOFFSET,
                           "offset 3 is below the queue's first offset 10 "
                           "(trimmed by retention)",
                           0, "");
    } else if (r->offset == 41) {
        struct proto_trace t = {
            .queue_id = 7,
            .offset = 41,
            .append_ms = 1700000000123ull,
            .producer_id = 4294967297ull,
            .seq = 6,
            .batch_pos = 1,
            .batch_count = 2,
            .len = 11,
            .raft_index = 812,
            .term = 3,
            .key = "k\x01",
            .key_len = 2,
            .tag = "paid",
            .tag_len = 4,
        };
        struct proto_trace_group g[2] = {
            {"audit", 5, 42, 1700000000200ull, 815},
            {"old", 3, 50, 0, 0},
        };
        size_t start = proto_trace_begin(&w, h->request_id, &t);
        proto_put_trace_group(&w, &g[0]);
        proto_put_trace_group(&w, &g[1]);
        (void)proto_trace_end(&w, start, 2, 1);
    } else {
        struct proto_trace t = {.queue_id = 7,
                                .offset = r->offset,
                                .append_ms = 1000,
                                .batch_count = 1,
                                .len = 2,
                                .raft_index = 9};
        size_t start = proto_trace_begin(&w, h->request_id, &t);
        (void)proto_trace_end(&w, start, 0, 0);
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(cli, message_trace_text_and_json)
{
    struct fake_server fs;
    struct cli_run r;
    cr_assert_eq(fake_start(&fs, trace_cli_hook), 0);
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 41");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(
        r.out,
        "message    orders offset 41\n"
        "id         00000000000000070000000000000029\n"
        "produced   2023-11-14T22:13:20.123Z (1700000000123 ms)\n"
        "producer   id 4294967297, batch seq 6, message 2 of 2\n"
        "size       11 bytes\n"
        "key        k\\x01\n"
        "tag        paid\n"
        "committed  raft index 812, term 3\n"
        "groups     2 past this message (each group's latest commit)\n"
        "  audit committed offset 42, at 2023-11-14T22:13:20.200Z (raft "
        "index 815)\n"
        "  old committed offset 50, commit time unknown\n"
        "  (more groups not listed)\n");
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 41 --json");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(
        r.out,
        "{\"queue\":\"orders\",\"offset\":41,\"id\":"
        "\"00000000000000070000000000000029\",\"append_ms\":1700000000123,"
        "\"producer_id\":4294967297,\"seq\":6,\"batch_pos\":1,"
        "\"batch_count\":2,\"size\":11,\"key\":\"k\\u0001\",\"tag\":\"paid\","
        "\"raft_index\":812,\"term\":3,\"groups\":[{\"name\":\"audit\","
        "\"committed_offset\":42,\"commit_ms\":1700000000200,"
        "\"commit_index\":815},{\"name\":\"old\",\"committed_offset\":50,"
        "\"commit_ms\":null,\"commit_index\":null}],\"more_groups\":true}\n");
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 5");
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "producer   none, message 1 of 1\n") != NULL, "%s",
              r.out);
    cr_expect(strstr(r.out, "committed  raft index 9, term unknown\n") != NULL,
              "%s", r.out);
    cr_expect(strstr(r.out, "key ") == NULL, "%s", r.out);
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 5 --json");
    cr_expect(strstr(r.out, "\"term\":null,\"groups\":[],") != NULL, "%s",
              r.out);
    /* trimmed: the server's message, exit 1 */
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 3");
    cr_expect_eq(r.code, 1);
    cr_expect(strstr(r.err, "first offset 10") != NULL, "%s", r.err);
    /* argument errors */
    cli_run_tern(&r, fs.addr, NULL, "message trace orders");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "message trace orders x1");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 1 2");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "message trace orders 1 --bogus");
    cr_expect_eq(r.code, 2);
    fake_stop(&fs);
}

/* Usage errors name what is wrong and fail before any connection (the
 * address given is never listened on); --version needs no server. */
Test(cli, usage_errors_name_the_word_and_version)
{
    struct cli_run r;
    const char *nowhere = "127.0.0.1:1";
    cli_run_tern(&r, nowhere, NULL, "--version");
    cr_expect_eq(r.code, 0, "%s", r.err);
    char want[64];
    (void)snprintf(want, sizeof want, "tern %d.%d.%d (libtern ",
                   TERN_VERSION_MAJOR, TERN_VERSION_MINOR, TERN_VERSION_PATCH);
    cr_expect_eq(strncmp(r.out, want, strlen(want)), 0, "%s", r.out);
    cli_run_tern(&r, nowhere, NULL, "--timeout-ms 0 queue list");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "--timeout-ms 0: a request timeout of 1.."),
                  NULL, "%s", r.err);
    cli_run_tern(&r, nowhere, NULL, "--bogus x queue list");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "unknown option '--bogus'"), NULL, "%s", r.err);
    cli_run_tern(&r, nowhere, NULL, "--read-from nowhere queue list");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "--read-from nowhere: any, leader or first"),
                  NULL, "%s", r.err);
    cli_run_tern(&r, nowhere, NULL, "--user");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "--user needs a value"), NULL, "%s", r.err);
    cli_run_tern(&r, nowhere, NULL, "frobnicate now");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "unknown command 'frobnicate'"), NULL, "%s",
                  r.err);
    cli_run_tern(&r, nowhere, NULL, "bench q --mode sideways");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "--mode sideways: produce, consume or e2e"),
                  NULL, "%s", r.err);
    cli_run_tern(&r, nowhere, NULL, "bench q --mode e2e --size 4");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, nowhere, NULL, "--help");
    cr_expect_eq(r.code, 0);
    cr_expect_neq(strstr(r.out, "Exit codes: 0 ok; 1 the server refused"), NULL,
                  "%s", r.out);
}

/* Nothing listens on the address: the command fails at once with the
 * reason and exit code 3, not after the request timeout with "outcome
 * unknown"; an unresolvable name and a list of refusing servers too. */
Test(cli, refused_connection_exit_code)
{
    struct cli_run r;
    cli_run_tern(&r, "127.0.0.1:1", NULL, "queue list");
    cr_expect_eq(r.code, 3, "%s", r.err);
    cr_expect_neq(strstr(r.err, "connect 127.0.0.1:1: Connection refused"),
                  NULL, "%s", r.err);
    cr_expect_null(strstr(r.err, "outcome unknown"), "%s", r.err);
    cli_run_tern(&r, "127.0.0.1:1,127.0.0.1:2", "x\n", "produce q");
    cr_expect_eq(r.code, 3, "%s", r.err);
    cr_expect_neq(strstr(r.err, "connect 127.0.0.1:2: Connection refused"),
                  NULL, "%s", r.err);
    cli_run_tern(&r, "no-such-host.invalid:7400", NULL, "cluster status");
    cr_expect_eq(r.code, 3, "%s", r.err);
    cr_expect_neq(strstr(r.err, "resolve no-such-host.invalid:7400"), NULL,
                  "%s", r.err);
}

/* One server refuses, the other answers: the command works. */
Test(cli, one_refused_one_up_works)
{
    struct fake_server fs;
    struct cli_run r;
    char servers[128];
    cr_assert_eq(fake_start(&fs, NULL), 0);
    (void)snprintf(servers, sizeof servers, "127.0.0.1:1,%s", fs.addr);
    cli_run_tern(&r, servers, NULL, "queue create q");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cli_run_tern(&r, servers, NULL, "queue list");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_neq(strstr(r.out, "q\t"), NULL, "%s", r.out);
    fake_stop(&fs);
}
