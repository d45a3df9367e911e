/*
 * `tern group status` and `tern dlq list` (cli/status.c) run as a child
 * process against the fake server, whose hook answers GROUP_STATUS in two
 * pages: the table (every page, the consumers column, stream groups with
 * "-"), the JSON lines, `dlq list QUEUE` (shared groups only), and the
 * usage errors (nothing sent).
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
