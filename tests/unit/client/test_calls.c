/*
 * libtern's synchronous calls against the fake server (fake_server.c):
 * server list parsing, a round trip of every call and its result object,
 * replication stats and their errors, and clean allocation failures.
 */
#include <errno.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

Test(client, bad_server_lists)
{
    struct tern_client *c = NULL;
    cr_expect_eq(tern_client_new("", NULL, &c), TERN_EINVAL);
    cr_expect_eq(tern_client_new("localhost", NULL, &c), TERN_EINVAL);
    cr_expect_eq(tern_client_new("h:0", NULL, &c), TERN_EINVAL);
    cr_expect_eq(tern_client_new("h:99999", NULL, &c), TERN_EINVAL);
    cr_expect_eq(tern_client_new("h:1,:2", NULL, &c), TERN_EINVAL);
    cr_expect_null(c);
    cr_assert_eq(tern_client_new(" 127.0.0.1:1 , [::1]:2 ", NULL, &c), 0);
    /* Known only once the first produce asked the leader for it. */
    cr_expect_eq(tern_client_producer_id(c), 0);
    tern_client_free(c);
}

Test(client, sync_round_trips)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m[3] = {{"a.1", 3}, {"bb", 2}, {"", 0}};
    uint64_t base = 99;
    struct tern_fetch_result *r;
    struct tern_queue_list *l;
    struct tern_status *st;
    const void *data;
    size_t len;
    uint64_t off, ts;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    cr_expect_eq(tern_queue_create(c, "q"), TERN_EQUEUEEXISTS);
    cr_expect_eq(tern_queue_create(c, "bad name"), TERN_EBADNAME);
    cr_expect_eq(tern_produce(c, "q", m, 3, &base), 0);
    cr_expect_eq(base, 0);
    cr_expect_eq(tern_produce(c, "q", m, 1, &base), 0);
    cr_expect_eq(base, 3);
    cr_expect_eq(tern_produce(c, "nope", m, 1, &base), TERN_ENOQUEUE);

    cr_assert_eq(tern_fetch(c, "q", 1, 10, 0, 0, &r), 0);
    cr_expect_eq(tern_fetch_result_count(r), 3);
    cr_expect_eq(tern_fetch_result_next_offset(r), 4);
    cr_expect_eq(tern_fetch_result_end_offset(r), 4);
    cr_assert_eq(tern_fetch_result_get(r, 0, &off, &ts, &data, &len), 0);
    cr_expect_eq(off, 1);
    cr_expect_eq(ts, 1001);
    cr_expect_eq(len, 2);
    cr_expect_eq(memcmp(data, "bb", 2), 0);
    cr_expect_eq(tern_fetch_result_get(r, 3, NULL, NULL, NULL, NULL),
                 TERN_EINVAL);
    tern_fetch_result_free(r);

    cr_assert_eq(tern_group_fetch(c, "q", "g", 2, 0, 0, &r), 0);
    cr_expect_eq(tern_fetch_result_count(r), 2);
    tern_fetch_result_free(r);
    cr_expect_eq(tern_group_commit(c, "q", "g", 2), 0);

    cr_assert_eq(tern_queue_list(c, &l), 0);
    cr_assert_eq(tern_queue_list_count(l), 1);
    cr_expect_str_eq(tern_queue_list_name(l, 0), "q");
    cr_expect_eq(tern_queue_list_next_offset(l, 0), 4);
    tern_queue_list_free(l);

    cr_assert_eq(tern_cluster_status(c, NULL, &st), 0);
    cr_expect_eq(tern_status_node_id(st), 1);
    cr_expect_eq(tern_status_role(st), TERN_ROLE_LEADER);
    cr_expect_str_eq(tern_role_name(tern_status_role(st)), "leader");
    cr_expect_eq(tern_status_term(st), 7);
    cr_expect_eq(tern_status_commit_index(st), 42);
    cr_expect_eq(tern_status_last_applied(st), 41);
    cr_expect_eq(tern_status_writable(st), 1);
    cr_expect_str_eq(tern_status_leader_address(st), fs.addr);
    cr_expect_str_eq(tern_status_server(st), fs.addr);
    cr_expect_str_eq(tern_status_transport(st), "tcp");
    cr_expect_eq(tern_status_member_count(st), 1);
    cr_expect_str_eq(tern_status_member_client_address(st, 0), fs.addr);
    cr_expect_null(tern_status_member_client_address(st, 1));
    tern_status_free(st);

    cr_expect_eq(tern_queue_delete(c, "q"), 0);
    cr_expect_eq(tern_queue_delete(c, "q"), TERN_ENOQUEUE);
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- Replication stats ---- */

static uint64_t stats_count(struct fake_server *fs, int *resets)
{
    uint64_t n;
    pthread_mutex_lock(&fs->mu);
    n = fs->stats_count;
    *resets = fs->stats_resets;
    pthread_mutex_unlock(&fs->mu);
    return n;
}

Test(client, replication_stats)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    struct tern_repl_stats s;
    int resets;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    }
    cr_assert_eq(tern_replication_stats(c, NULL, 0, &s), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_str_eq(s.server, fs.addr);
    cr_expect_eq(s.node_id, 1);
    cr_expect_eq(s.role, TERN_ROLE_LEADER);
    cr_expect_str_eq(s.transport, "tcp");
    cr_expect_str_eq(s.durability, "disk");
    cr_expect_eq(s.count, 4);
    cr_expect_eq(s.dropped, 0);
    cr_expect_eq(s.mean_ns, 2500); /* (1+2+3+4) us / 4 */
    cr_expect_eq(s.min_ns, 1000);
    cr_expect_eq(s.p50_ns, 2000);
    cr_expect_eq(s.p90_ns, 3600);
    cr_expect_eq(s.p99_ns, 3960);
    cr_expect_eq(s.p999_ns, 3996);
    cr_expect_eq(s.max_ns, 4000);

    /* reset: the answer has the old counters, the server starts over. */
    cr_assert_eq(tern_replication_stats(c, fs.addr, 1, &s), 0);
    cr_expect_eq(s.count, 4);
    cr_expect_eq(stats_count(&fs, &resets), 0);
    cr_expect_eq(resets, 1);
    cr_assert_eq(tern_replication_stats(c, fs.addr, 0, &s), 0);
    cr_expect_eq(s.count, 0);
    cr_expect_eq(s.mean_ns, 0);
    cr_expect_eq(s.p50_ns, 0);
    cr_expect_eq(s.max_ns, 0);
    cr_expect_eq(resets, 1);

    cr_expect_eq(tern_replication_stats(c, "no port", 0, &s), TERN_EINVAL);
    cr_expect_eq(s.server[0], '\0');
    tern_client_free(c);
    fake_stop(&fs);
}

/* tern_replication_stages: the summary plus the stage tail, in the
 * server's order, cut at max; reset covers both. */
Test(client, replication_stages)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    struct tern_repl_stats s;
    struct tern_repl_stage sg[4];
    unsigned n = 99;
    int resets;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    }
    cr_assert_eq(tern_replication_stages(c, NULL, 0, &s, sg, 4, &n), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(s.count, 4);
    cr_expect_eq(s.p50_ns, 2000);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(sg[0].name, "leader_disk");
    cr_expect_eq(sg[0].count, 4);
    cr_expect_eq(sg[0].p50_ns, 1000);
    cr_expect_eq(sg[0].p99_ns, 1980);
    cr_expect_str_eq(sg[1].name, "apply");
    cr_expect_eq(sg[1].p99_ns, 1000);

    /* max 1: the first stage only; reset starts the server over. */
    cr_assert_eq(tern_replication_stages(c, fs.addr, 1, &s, sg, 1, &n), 0);
    cr_expect_eq(n, 1);
    cr_expect_str_eq(sg[0].name, "leader_disk");
    cr_expect_eq(stats_count(&fs, &resets), 0);
    cr_expect_eq(resets, 1);
    cr_assert_eq(tern_replication_stages(c, fs.addr, 0, &s, sg, 4, &n), 0);
    cr_expect_eq(n, 2);
    cr_expect_eq(sg[0].count, 0);
    tern_client_free(c);
    fake_stop(&fs);
}

/* A server that does not know STATS (or fails it), then one that answers
 * garbage. */
static enum fake_action stats_error_hook(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r)
{
    if (r->op != PROTO_OP_STATS) {
        return FAKE_DEFAULT;
    }
    if ((r->flags & PROTO_STATS_STAGES) != 0 || fs->counter++ == 0) {
        /* As a server that predates the stage tail refuses its flag. */
        fake_send_error(fs, conn, h, TERN_EINVAL, NULL);
    } else {
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        proto_encode_empty_resp(&w, PROTO_OP_STATS, h->request_id);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
    }
    return FAKE_HANDLED;
}

Test(client, replication_stats_errors)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_repl_stats s;

    cr_assert_eq(fake_start(&fs, stats_error_hook), 0);
    c = client_for(fs.addr, 1000, 8);
    memset(&s, 0x5a, sizeof s);
    cr_expect_eq(tern_replication_stats(c, fs.addr, 1, &s), TERN_EINVAL);
    cr_expect_eq(s.count, 0);
    cr_expect_eq(s.server[0], '\0');
    cr_expect_eq(tern_replication_stats(c, fs.addr, 0, &s), TERN_EMALFORMED);
    cr_expect_eq(s.count, 0);
    {
        /* An older server refuses the stages flag: nothing filled. */
        struct tern_repl_stage sg[2];
        unsigned n = 7;
        cr_expect_eq(tern_replication_stages(c, fs.addr, 0, &s, sg, 2, &n),
                     TERN_EINVAL);
        cr_expect_eq(n, 0);
        cr_expect_eq(s.count, 0);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- Allocation failures (no network involved) ---- */

Test(client, allocation_failures_are_clean)
{
    struct fake_server fs;
    struct tern_msg m = {"x", 1};
    int ok_new = 0, ok_produce = 0;
    cr_assert_eq(fake_start(&fs, NULL), 0);
    for (long n = 0; n < 40; n++) {
        struct tern_client *c = NULL;
        struct done_log log;
        struct done_ctx ctx = {&log, 0};
        int rv;
        memset(&log, 0, sizeof log);
        tern_alloc_fail_after(n);
        rv = tern_client_new(fs.addr, NULL, &c);
        tern_alloc_fail_after(-1);
        if (rv != 0) {
            cr_expect_eq(rv, -ENOMEM);
            cr_expect_null(c);
            continue;
        }
        ok_new++;
        /* The first produce asks for the producer id (a round trip, so
         * with allocations working); the server is idle after it, so the
         * failures below hit the client alone. */
        if (ok_new == 1) {
            create_queue(c, "q");
        }
        cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                     tern_client_errmsg(c));
        tern_alloc_fail_after(n);
        rv = tern_produce_async(c, "q", &m, 1, on_done, &ctx);
        tern_alloc_fail_after(-1);
        if (rv == 0) {
            ok_produce++;
        } else {
            cr_expect_eq(rv, -ENOMEM);
        }
        tern_client_free(c);
        cr_expect_eq(log.n, rv == 0 ? 1 : 0);
    }
    cr_expect_gt(ok_new, 0);
    cr_expect_gt(ok_produce, 0);
    fake_stop(&fs);
}
