/*
 * `tern group status` and `tern dlq list` (cli/status.c) run as a child
 * process against the fake server, whose hook answers GROUP_STATUS in two
 * pages: the table (every page, the consumers column, stream groups with
 * "-"), the JSON lines, `dlq list QUEUE` (shared groups only), and the
 * usage errors (nothing sent); `tern cluster status` with every member's
 * version (asked of each member, "-" / null when unreachable or another
 * node answers) and from a server that predates the version.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tern/tern.h>

#include "cli_run.h"
#include "fake_server.h"

static struct
{
    int n_requests;
    char after[64];
} seen;

static const struct proto_status_consumer cons[2] = {{7, 3}, {9, 1}};

static enum fake_action status_hook(struct fake_server *fs,
                                    int conn,
                                    const struct proto_header *h,
                                    const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_GROUP_STATUS) {
        return FAKE_DEFAULT;
    }
    seen.n_requests++;
    (void)snprintf(seen.after, sizeof seen.after, "%.*s", (int)r->after_len,
                   r->after != NULL ? r->after : "");
    tern_wbuf_init(&w);
    size_t start = proto_group_status_begin(&w, h->request_id);
    if (r->after_len == 0) {
        struct proto_group_status a = {
            .group = "a",
            .group_len = 1,
            .shared = 1,
            .end = 40,
            .committed = 10,
            .next = 14,
            .lag = 30,
            .ack_timeout_ms = 30000,
            .max_deliveries = 16,
            .window = 65536,
            .dlq = "q-dlq-a",
            .dlq_len = 7,
            .dlq_depth = 1,
            .in_flight = 4,
            .n_consumers = 2,
            .consumers = cons,
        };
        proto_put_group_status(&w, &a);
        cr_assert_eq(proto_group_status_end(&w, start, 1, 1), 0);
    } else {
        struct proto_group_status b = {
            .group = "b",
            .group_len = 1,
            .end = 40,
            .committed = 38,
            .next = 38,
            .lag = 2,
        };
        proto_put_group_status(&w, &b);
        cr_assert_eq(proto_group_status_end(&w, start, 1, 0), 0);
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(cli_status, group_status_pages_and_dlq_list)
{
    struct fake_server fs;
    struct cli_run r;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, status_hook), 0);

    cli_run_tern(&r, fs.addr, NULL, "group status q");
    cr_expect_eq(r.code, 0);
    cr_expect_eq(seen.n_requests, 2, "two pages");
    cr_expect_str_eq(seen.after, "a", "the second page after the first");
    cr_expect_str_eq(r.out,
                     "group\tmode\tcommitted\tnext\tend\tlag\tin-flight\t"
                     "ready\tconsumers\tdlq\tdepth\n"
                     "a\tshared\t10\t14\t40\t30\t4\t0\t7:3,9:1\tq-dlq-a\t1\n"
                     "b\tstream\t38\t38\t40\t2\t-\t-\t-\t-\t-\n");

    cli_run_tern(&r, fs.addr, NULL, "group status q a --json");
    cr_expect_eq(r.code, 0);
    cr_expect_neq(strstr(r.out, "\"group\":\"a\",\"mode\":\"shared\""), NULL,
                  "%s", r.out);
    cr_expect_neq(strstr(r.out,
                         "\"consumers\":[{\"id\":7,\"leases\":3},"
                         "{\"id\":9,\"leases\":1}]"),
                  NULL, "%s", r.out);

    cli_run_tern(&r, fs.addr, NULL, "dlq list q");
    cr_expect_eq(r.code, 0);
    cr_expect_str_eq(r.out, "dlq\tqueue\tgroup\tdepth\nq-dlq-a\tq\ta\t1\n");

    /* Usage errors send nothing. */
    int before = seen.n_requests;
    cli_run_tern(&r, fs.addr, NULL, "group status");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "group status q a b");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "dlq redrive");
    cr_expect_eq(r.code, 2);
    cli_run_tern(&r, fs.addr, NULL, "dlq nothing");
    cr_expect_eq(r.code, 2);
    cr_expect_eq(seen.n_requests, before);
    fake_stop(&fs);
}

/* ---- cluster status: every member's version ---- */

/* Two fake servers answer STATUS as nodes 1 and 2 of a four-member
 * cluster; member 3 has no server at its address, member 4's address is
 * node 1's (so node 1 answers there, not node 4). */
static struct
{
    struct fake_server *node[2];
    char dead[64];
    int n_status[2];
} cl;

static enum fake_action cluster_hook(struct fake_server *fs,
                                     int conn,
                                     const struct proto_header *h,
                                     const struct proto_request *r)
{
    struct tern_wbuf w;
    int k = fs == cl.node[0] ? 0 : 1;
    const char *a1 = cl.node[0]->addr;
    const char *a2 = cl.node[1]->addr;
    struct proto_member m[4] = {
        {1, "127.0.0.1:1", 11, a1, (uint16_t)strlen(a1)},
        {2, "127.0.0.1:2", 11, a2, (uint16_t)strlen(a2)},
        {3, "127.0.0.1:3", 11, cl.dead, (uint16_t)strlen(cl.dead)},
        {4, "127.0.0.1:4", 11, a1, (uint16_t)strlen(a1)},
    };
    static const char *const version[2] = {"9.8.7", "9.8.10"};
    if (r->op != PROTO_OP_STATUS) {
        return FAKE_DEFAULT;
    }
    cl.n_status[k]++;
    struct proto_status st = {
        .node_id = (uint64_t)k + 1,
        .role = k == 0 ? 3 : 1,
        .leader_id = 1,
        .leader_address = a1,
        .leader_address_len = (uint16_t)strlen(a1),
        .term = 7,
        .transport = "tcp",
        .transport_len = 3,
        .durability = "disk",
        .durability_len = 4,
        .n_members = 4,
        .members = m,
        .has_timers = (r->flags & PROTO_STATUS_TIMERS) != 0,
        .server_version = version[k],
        .server_version_len = (uint16_t)strlen(version[k]),
    };
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_status_resp(&w, h->request_id, &st), 0);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

/* Runs `tern cluster status [--json]` at addr; it exits 0 and its stdout
 * holds every string of want (NULL-terminated). The stdout is left in *r
 * (OUT). */
static void status_has(struct cli_run *r,
                       const char *addr,
                       const char *args,
                       const char *const *want)
{
    cli_run_tern(r, addr, NULL, args);
    cr_expect_eq(r->code, 0, "%s: %s", args, r->err);
    for (; *want != NULL; want++) {
        cr_expect_neq(strstr(r->out, *want), NULL, "%s: no \"%s\" in %s", args,
                      *want, r->out);
    }
}

Test(cli_status, cluster_status_member_versions)
{
    static const char *const text[] = {
        "version:       9.8.7\n",     "  1  raft 127.0.0.1:1  client ",
        "  version 9.8.7\n  2  raft", "  version 9.8.10\n  3  raft",
        "  version -\n  4  raft",     NULL,
    };
    static const char *const json[] = {
        ",\"version\":\"9.8.10\",\"members\":[",
        "{\"id\":1,\"raft_address\":\"127.0.0.1:1\",\"client_address\":",
        "\",\"version\":\"9.8.7\"},{\"id\":2,",
        "\",\"version\":\"9.8.10\"},{\"id\":3,",
        "\",\"version\":null},{\"id\":4,",
        "\",\"version\":null}]",
        NULL,
    };
    struct fake_server a, b, gone;
    struct cli_run r;
    memset(&cl, 0, sizeof cl);
    cl.node[0] = &a;
    cl.node[1] = &b;
    /* A port nothing listens on: a fake server's, once stopped. */
    cr_assert_eq(fake_start(&gone, NULL), 0);
    (void)snprintf(cl.dead, sizeof cl.dead, "%s", gone.addr);
    fake_stop(&gone);
    cr_assert_eq(fake_start(&a, cluster_hook), 0);
    cr_assert_eq(fake_start(&b, cluster_hook), 0);

    status_has(&r, a.addr, "cluster status", text);
    /* Member 4's line is the last: node 1 answered at its address. */
    cr_expect_eq(strcmp(r.out + strlen(r.out) - 12, "  version -\n"), 0, "%s",
                 r.out);
    /* Node 1 answered the command and member 4's probe; node 2 its own. */
    cr_expect_eq(cl.n_status[0], 2);
    cr_expect_eq(cl.n_status[1], 1);
    status_has(&r, b.addr, "cluster status --json", json);
    fake_stop(&b);
    fake_stop(&a);
}

/* A server that predates the version (no tail): "-" and null. */
Test(cli_status, cluster_status_without_versions)
{
    static const char *const text[] = {"version:       -\n", "  version -\n",
                                       NULL};
    static const char *const json[] = {",\"version\":null,\"members\":[",
                                       ",\"version\":null}]", NULL};
    struct fake_server fs;
    struct cli_run r;
    cr_assert_eq(fake_start(&fs, NULL), 0);
    status_has(&r, fs.addr, "cluster status", text);
    status_has(&r, fs.addr, "cluster status --json", json);
    fake_stop(&fs);
}
