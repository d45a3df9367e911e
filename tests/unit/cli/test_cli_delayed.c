/*
 * `tern produce --delay | --at` (cli/cli.c) run as a child process against
 * the fake server, whose hook answers PRODUCE_DELAYED with the due time
 * the leader would record: the when field sent (a delay in ms, or the due
 * time with PROTO_DELAY_AT), the ack log lines "<id>\tdue=<ms>", and the
 * usage errors (a bad duration or time, both options), and properties
 * carried by delayed messages.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tern/tern.h>

#include "cli_run.h"
#include "fake_server.h"

#define NOW_MS 1800000000000ull

static struct
{
    int n_requests;
    uint64_t when;
    uint32_t n_msgs;
    uint32_t n_props; /* messages with a properties block */
} seen;

static enum fake_action delayed_hook(struct fake_server *fs,
                                     int conn,
                                     const struct proto_header *h,
                                     const struct proto_request *r)
{
    struct tern_wbuf w;
    uint64_t when = r->time_ms & ~PROTO_DELAY_AT;
    if (r->op != PROTO_OP_PRODUCE_DELAYED) {
        return FAKE_DEFAULT;
    }
    seen.n_requests++;
    seen.when = r->time_ms;
    seen.n_msgs = r->n_msgs;
    seen.n_props = 0;
    size_t pos = 0;
    struct proto_msg m;
    while (r->props_len > 0 && proto_next_props(r, &pos, &m)) {
        seen.n_props += m.len > 0 ? 1 : 0;
    }
    tern_wbuf_init(&w);
    proto_encode_produce_delayed_resp(
        &w, h->request_id, r->n_msgs,
        (r->time_ms & PROTO_DELAY_AT) != 0 ? when : NOW_MS + when);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(cli_delayed, delay_and_at_with_ack_log)
{
    struct fake_server fs;
    struct cli_run r;
    char ack[] = "/tmp/tern-cli-dack-XXXXXX";
    char args[512], buf[1024];
    int fd = mkstemp(ack);
    cr_assert_geq(fd, 0);
    (void)close(fd);
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, delayed_hook), 0);

    (void)snprintf(args, sizeof args,
                   "produce jobs --count 3 --batch 2 --delay 10s "
                   "--ack-log %s --id-prefix d",
                   ack);
    cli_run_tern(&r, fs.addr, NULL, args);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(seen.n_requests, 2, "batches of 2 and 1");
    cr_expect_eq(seen.when, 10000);
    cr_expect_eq(seen.n_msgs, 1);
    cli_slurp(ack, buf, sizeof buf);
    cr_expect_str_eq(buf,
                     "d-0\tdue=1800000010000\nd-1\tdue=1800000010000\n"
                     "d-2\tdue=1800000010000\n");

    cli_run_tern(&r, fs.addr, NULL,
                 "produce jobs --count 1 --at 2026-12-04T10:00:00Z");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(seen.when, PROTO_DELAY_AT | 1796378400000ull);
    cr_expect_eq(seen.n_requests, 3);

    /* Usage errors send nothing. */
    cli_run_tern(&r, fs.addr, NULL, "produce jobs --count 1 --delay 10");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "--delay 10: a duration"), NULL, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "produce jobs --count 1 --at tomorrow");
    cr_expect_eq(r.code, 2);
    cr_expect_neq(strstr(r.err, "--at tomorrow"), NULL, "%s", r.err);
    cli_run_tern(&r, fs.addr, NULL, "produce jobs --count 1 --delay 1s --at 5");
    cr_expect_eq(r.code, 2);
    cr_expect_eq(seen.n_requests, 3);
    /* With properties: the delayed messages carry them. */
    cli_run_tern(&r, fs.addr, NULL,
                 "produce jobs --count 2 --batch 2 --delay 1s --tag t --key k");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_eq(seen.n_requests, 4, "%d %s", seen.n_requests, r.err);
    cr_expect_eq(seen.n_msgs, 2);
    cr_expect_eq(seen.n_props, 2);
    cr_expect_eq(seen.when, 1000, "%llu", (unsigned long long)seen.when);
    fake_stop(&fs);
    (void)unlink(ack);
}
