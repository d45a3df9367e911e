/*
 * libtern against the in-test fake server (fake_server.c): sync API round
 * trips, leader redirect through the NOT_LEADER hint, retry after a dropped
 * connection with the same producer id and sequence, TERN_ETIMEDOUT when
 * the server never answers, pipelined async produce with out-of-order
 * answers, and the TERN_ESEQUENCE resend / renumber paths.
 */
#include <errno.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "fake_server.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct tern_client *client_for(const char *servers,
                                      int timeout_ms,
                                      int window)
{
    struct tern_client_options o;
    struct tern_client *c = NULL;
    tern_client_options_init(&o);
    o.request_timeout_ms = timeout_ms;
    o.retry_backoff_ms = 5;
    o.connect_timeout_ms = 500;
    o.max_in_flight = window;
    cr_assert_eq(tern_client_new(servers, &o, &c), 0);
    return c;
}

static void create_queue(struct tern_client *c, const char *q)
{
    cr_assert_eq(tern_queue_create(c, q), 0, "%s", tern_client_errmsg(c));
}

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
    cr_expect_neq(tern_client_producer_id(c), 0);
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
    if (fs->counter++ == 0) {
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
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- Leader redirect ---- */

static enum fake_action follower_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    if (r->op == PROTO_OP_STATUS || r->op == PROTO_OP_FETCH) {
        return FAKE_DEFAULT;
    }
    fake_send_error(fs, conn, h, TERN_ENOTLEADER, fs->peer_addr);
    return FAKE_HANDLED;
}

Test(client, leader_redirect_via_hint)
{
    struct fake_server follower, leader;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    uint64_t base;
    cr_assert_eq(fake_start(&leader, NULL), 0);
    cr_assert_eq(fake_start(&follower, follower_hook), 0);
    (void)pthread_mutex_lock(&follower.mu);
    (void)snprintf(follower.peer_addr, sizeof follower.peer_addr, "%s",
                   leader.addr);
    (void)pthread_mutex_unlock(&follower.mu);

    /* The client only knows the follower. */
    c = client_for(follower.addr, 3000, 8);
    create_queue(c, "q");
    cr_expect_eq(fake_n_requests(&follower), 1);
    cr_expect_eq(fake_n_requests(&leader), 1);
    cr_assert_not_null(tern_client_leader(c));
    cr_expect_str_eq(tern_client_leader(c), leader.addr);
    /* Later writes go straight to the leader. */
    cr_expect_eq(tern_produce(c, "q", &m, 1, &base), 0);
    cr_expect_eq(fake_n_requests(&follower), 1);
    cr_expect_eq(fake_n_records(&leader), 1);
    tern_client_free(c);
    fake_stop(&follower);
    fake_stop(&leader);
}

/* An ex-leader that still answers STATUS as the leader: a fetch that asks
 * for the leader (PROTO_FETCH_LEADER) is redirected to fs->peer_addr and
 * counted; any other fetch is served by the model (which has no queue). */
static enum fake_action exleader_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    if (r->op == PROTO_OP_FETCH && (r->flags & PROTO_FETCH_LEADER) != 0) {
        fs->counter++;
        fake_send_error(fs, conn, h, TERN_ENOTLEADER, fs->peer_addr);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

/* F4 (jepsen/FINDINGS.md): a READ_LEADER fetch carries the leader flag, so
 * a deposed leader redirects it instead of serving its own queue end; the
 * client follows the hint and keeps reading from the new leader. READ_ANY
 * fetches carry no flag. */
Test(client, read_leader_fetch_follows_a_deposed_leaders_hint)
{
    struct fake_server old, leader;
    struct tern_client *w, *c;
    struct tern_client_options o;
    struct tern_fetch_result *res = NULL;
    struct tern_msg m[3] = {{"a", 1}, {"b", 1}, {"c", 1}};
    uint64_t base;
    cr_assert_eq(fake_start(&leader, NULL), 0);
    cr_assert_eq(fake_start(&old, exleader_hook), 0);
    (void)pthread_mutex_lock(&old.mu);
    (void)snprintf(old.peer_addr, sizeof old.peer_addr, "%s", leader.addr);
    (void)pthread_mutex_unlock(&old.mu);
    w = client_for(leader.addr, 3000, 8);
    create_queue(w, "q");
    cr_assert_eq(tern_produce(w, "q", m, 3, &base), 0);
    tern_client_free(w);

    c = client_for(old.addr, 3000, 8); /* read_from defaults to LEADER */
    cr_assert_eq(tern_fetch(c, "q", 0, 10, 0, 0, &res), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(tern_fetch_result_count(res), 3);
    tern_fetch_result_free(res);
    (void)pthread_mutex_lock(&old.mu);
    cr_expect_eq(old.counter, 1);
    (void)pthread_mutex_unlock(&old.mu);
    cr_assert_not_null(tern_client_leader(c));
    cr_expect_str_eq(tern_client_leader(c), leader.addr);
    /* The next read goes to the new leader directly. */
    cr_assert_eq(tern_fetch(c, "q", 1, 10, 0, 0, &res), 0);
    cr_expect_eq(tern_fetch_result_count(res), 2);
    tern_fetch_result_free(res);
    (void)pthread_mutex_lock(&old.mu);
    cr_expect_eq(old.counter, 1);
    (void)pthread_mutex_unlock(&old.mu);
    tern_client_free(c);

    tern_client_options_init(&o);
    o.request_timeout_ms = 1000;
    o.read_from = TERN_READ_ANY;
    cr_assert_eq(tern_client_new(old.addr, &o, &c), 0);
    /* Served by the ex-leader itself, without the flag: its model has no
     * queue. */
    cr_expect_eq(tern_fetch(c, "q", 0, 10, 0, 0, &res), TERN_ENOQUEUE);
    (void)pthread_mutex_lock(&old.mu);
    cr_expect_eq(old.counter, 1);
    (void)pthread_mutex_unlock(&old.mu);
    tern_client_free(c);
    fake_stop(&old);
    fake_stop(&leader);
}

Test(client, not_leader_without_hint_tries_next_server)
{
    struct fake_server follower, leader;
    struct tern_client *c;
    char servers[160];
    cr_assert_eq(fake_start(&leader, NULL), 0);
    cr_assert_eq(fake_start(&follower, follower_hook), 0); /* empty hint */
    (void)snprintf(servers, sizeof servers, "%s,%s", follower.addr,
                   leader.addr);
    c = client_for(servers, 3000, 8);
    create_queue(c, "q");
    cr_expect_eq(fake_n_requests(&follower), 1);
    cr_expect_eq(fake_n_requests(&leader), 1);
    tern_client_free(c);
    fake_stop(&follower);
    fake_stop(&leader);
}

/* ---- Retry after a dropped connection ---- */

static enum fake_action drop_first_produce_hook(struct fake_server *fs,
                                                int conn,
                                                const struct proto_header *h,
                                                const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && fs->counter++ == 0) {
        /* Append, then lose the answer with the connection. */
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        fake_model_answer(fs, h, r, &w);
        tern_wbuf_free(&w);
        return FAKE_DROP;
    }
    return FAKE_DEFAULT;
}

Test(client, retry_after_drop_reuses_producer_and_sequence)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m[2] = {{"p-0", 3}, {"p-1", 3}};
    uint64_t base = 77;
    cr_assert_eq(fake_start(&fs, drop_first_produce_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", m, 2, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0, "retry must return the original offsets");
    cr_assert_eq(fake_n_records(&fs), 2);
    struct fake_record a = fake_record_at(&fs, 0);
    struct fake_record b = fake_record_at(&fs, 1);
    cr_expect_eq(a.producer_id, tern_client_producer_id(c));
    cr_expect_eq(b.producer_id, a.producer_id);
    cr_expect_eq(a.seq, 1);
    cr_expect_eq(b.seq, 1);
    (void)pthread_mutex_lock(&fs.mu);
    cr_expect_eq(fs.n_accepts, 2, "the retry uses a new connection");
    (void)pthread_mutex_unlock(&fs.mu);
    cr_expect_eq(fake_n_msgs(&fs), 2, "appended exactly once");
    /* The next batch gets the next sequence. */
    cr_expect_eq(tern_produce(c, "q", m, 1, &base), 0);
    cr_expect_eq(base, 2);
    cr_expect_eq(fake_record_at(&fs, 2).seq, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- Timeouts ---- */

static enum fake_action silent_hook(struct fake_server *fs,
                                    int conn,
                                    const struct proto_header *h,
                                    const struct proto_request *r)
{
    return r->op == PROTO_OP_PRODUCE ? FAKE_SILENT : FAKE_DEFAULT;
}

Test(client, timeout_when_server_never_answers)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    int64_t t0;
    cr_assert_eq(fake_start(&fs, silent_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    t0 = now_ms();
    cr_expect_eq(tern_produce(c, "q", &m, 1, NULL), TERN_ETIMEDOUT);
    cr_expect_geq(now_ms() - t0, 250);
    cr_expect_lt(now_ms() - t0, 5000);
    cr_expect_neq(tern_client_errmsg(c)[0], '\0');
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, timeout_when_nothing_listens)
{
    struct fake_server fs;
    struct tern_client *c;
    char addr[64];
    cr_assert_eq(fake_start(&fs, NULL), 0);
    (void)snprintf(addr, sizeof addr, "%s", fs.addr);
    fake_stop(&fs); /* the port is now closed */
    c = client_for(addr, 300, 8);
    cr_expect_eq(tern_queue_create(c, "q"), TERN_ETIMEDOUT);
    cr_expect_neq(strstr(tern_client_errmsg(c), "refused"), NULL, "%s",
                  tern_client_errmsg(c));
    tern_client_free(c);
}

/* ---- Async pipelining ---- */

struct done_log
{
    int n;
    int status[64];
    uint64_t base[64];
    size_t count[64];
    int order[64];
};

struct done_ctx
{
    struct done_log *log;
    int idx;
};

static void on_done(void *arg, int status, uint64_t base, size_t count)
{
    struct done_ctx *d = arg;
    struct done_log *l = d->log;
    l->status[d->idx] = status;
    l->base[d->idx] = base;
    l->count[d->idx] = count;
    l->order[l->n++] = d->idx;
}

static void drain(struct tern_client *c)
{
    int64_t until = now_ms() + 10000;
    while (tern_client_pending(c) > 0 && now_ms() < until) {
        cr_assert_geq(tern_client_poll(c, 100), 0);
    }
    cr_assert_eq(tern_client_pending(c), 0);
}

static enum fake_action reorder_hook(struct fake_server *fs,
                                     int conn,
                                     const struct proto_header *h,
                                     const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_PRODUCE) {
        return FAKE_DEFAULT;
    }
    tern_wbuf_init(&w);
    fake_model_answer(fs, h, r, &w);
    fake_defer(fs, conn, &w);
    tern_wbuf_free(&w);
    if (fs->n_deferred == 4) {
        fake_flush_deferred(fs, 1);
    }
    return FAKE_HANDLED;
}

Test(client, async_pipelined_out_of_order_answers)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[8];
    char payload[8][8];
    cr_assert_eq(fake_start(&fs, reorder_hook), 0);
    c = client_for(fs.addr, 5000, 4);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 8; i++) {
        struct tern_msg m[2];
        (void)snprintf(payload[i], sizeof payload[i], "b%d", i);
        m[0].data = payload[i];
        m[0].len = strlen(payload[i]);
        m[1] = m[0];
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", m, 2, on_done, &ctx[i]), 0);
    }
    memset(payload, 0, sizeof payload); /* messages were copied */
    cr_expect_eq(tern_client_pending(c), 8);
    drain(c);
    cr_assert_eq(log.n, 8);
    for (int i = 0; i < 8; i++) {
        cr_expect_eq(log.status[i], 0);
        cr_expect_eq(log.base[i], (uint64_t)i * 2, "batch %d", i);
        cr_expect_eq(log.count[i], 2);
    }
    /* Answers came back newest first within each window of 4. */
    cr_expect_eq(log.order[0], 3);
    cr_expect_eq(log.order[3], 0);
    for (uint64_t k = 0; k < 16; k++) {
        char want[8];
        char *got = fake_msg(&fs, k);
        (void)snprintf(want, sizeof want, "b%d", (int)(k / 2));
        cr_expect_str_eq(got, want);
        free(got);
    }
    for (int i = 0; i < fake_n_records(&fs); i++) {
        cr_expect_eq(fake_record_at(&fs, i).seq, (uint64_t)i + 1);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- ESEQUENCE: resend in order after a lost first batch ---- */

static enum fake_action sequence_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_PRODUCE || fs->counter >= 3) {
        return FAKE_DEFAULT;
    }
    /* Round 1 (a leader change): batch 1 is lost (answered late with
     * "leadership lost"), 2 and 3 see the gap. */
    fs->counter++;
    tern_wbuf_init(&w);
    if (r->seq == 1) {
        proto_encode_error(&w, h->op, h->request_id, TERN_ELEADERSHIPLOST,
                           "leadership lost", 0, NULL);
        fake_defer(fs, conn, &w);
    } else {
        fake_model_answer(fs, h, r, &w); /* ESEQUENCE: 1 is missing */
        fake_send(fs, conn, &w);
    }
    if (fs->counter == 3) {
        fake_flush_deferred(fs, 0);
    }
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(client, esequence_resends_in_flight_batches_in_order)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[3];
    const char *p[3] = {"one", "two", "three"};
    cr_assert_eq(fake_start(&fs, sequence_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 3; i++) {
        struct tern_msg m = {p[i], strlen(p[i])};
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_assert_eq(log.n, 3);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(log.status[i], 0, "batch %d: %s", i,
                     tern_strerror(log.status[i]));
        cr_expect_eq(log.base[i], (uint64_t)i);
    }
    cr_assert_eq(fake_n_msgs(&fs), 3);
    for (uint64_t k = 0; k < 3; k++) {
        char *got = fake_msg(&fs, k);
        cr_expect_str_eq(got, p[k]);
        free(got);
    }
    /* Every resend kept its producer id and sequence. */
    int n = fake_n_records(&fs);
    cr_expect_geq(n, 6);
    for (int i = 0; i < n; i++) {
        struct fake_record rec = fake_record_at(&fs, i);
        cr_expect_eq(rec.producer_id, tern_client_producer_id(c));
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- ESEQUENCE after a batch failed for good: renumber ---- */

static enum fake_action toobig_first_hook(struct fake_server *fs,
                                          int conn,
                                          const struct proto_header *h,
                                          const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && fs->counter++ == 0) {
        fake_send_error(fs, conn, h, TERN_ETOOBIG, NULL);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

Test(client, esequence_after_failed_batch_renumbers)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[2];
    struct tern_msg m = {"z", 1};
    cr_assert_eq(fake_start(&fs, toobig_first_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 2; i++) {
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_expect_eq(log.status[0], TERN_ETOOBIG);
    cr_expect_eq(log.status[1], 0);
    cr_expect_eq(fake_n_msgs(&fs), 1);
    int n = fake_n_records(&fs);
    cr_assert_geq(n, 3);
    struct fake_record last = fake_record_at(&fs, n - 1);
    cr_expect_neq(last.producer_id, tern_client_producer_id(c));
    cr_expect_eq(last.seq, 1);
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- Retryable errors and cancellation ---- */

static enum fake_action noleader_twice_hook(struct fake_server *fs,
                                            int conn,
                                            const struct proto_header *h,
                                            const struct proto_request *r)
{
    if (r->op == PROTO_OP_QUEUE_CREATE && fs->counter++ < 2) {
        fake_send_error(fs, conn, h, TERN_ENOLEADER, NULL);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

Test(client, no_leader_is_retried)
{
    struct fake_server fs;
    struct tern_client *c;
    cr_assert_eq(fake_start(&fs, noleader_twice_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    create_queue(c, "q");
    cr_expect_eq(fake_n_requests(&fs), 3);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, free_cancels_pending_async)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx = {&log, 0};
    struct tern_msg m = {"x", 1};
    cr_assert_eq(fake_start(&fs, silent_hook), 0);
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx), 0);
    cr_expect_eq(tern_client_poll(c, 50), 0);
    tern_client_free(c);
    cr_expect_eq(log.n, 1);
    cr_expect_eq(log.status[0], TERN_ECANCELED);
    fake_stop(&fs);
}

Test(client, async_errors_never_fire_callbacks)
{
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx = {&log, 0};
    struct tern_msg m = {"x", 1};
    memset(&log, 0, sizeof log);
    cr_assert_eq(tern_client_new("127.0.0.1:1", NULL, &c), 0);
    cr_expect_eq(tern_produce_async(c, "bad/name", &m, 1, on_done, &ctx),
                 TERN_EBADNAME);
    cr_expect_eq(tern_produce_async(c, "q", &m, 0, on_done, &ctx), TERN_EINVAL);
    cr_expect_eq(tern_client_pending(c), 0);
    tern_client_free(c);
    cr_expect_eq(log.n, 0);
}

/* ---- A dropped connection with several batches in flight ---- */

static enum fake_action drop_after_four_hook(struct fake_server *fs,
                                             int conn,
                                             const struct proto_header *h,
                                             const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_PRODUCE || fs->counter >= 4) {
        return FAKE_DEFAULT;
    }
    /* Append the first four batches but lose every answer. */
    fs->counter++;
    tern_wbuf_init(&w);
    fake_model_answer(fs, h, r, &w);
    tern_wbuf_free(&w);
    return fs->counter == 4 ? FAKE_DROP : FAKE_SILENT;
}

Test(client, drop_with_batches_in_flight_resends_in_order_once)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[5];
    char payload[5][4];
    cr_assert_eq(fake_start(&fs, drop_after_four_hook), 0);
    c = client_for(fs.addr, 5000, 4);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 5; i++) {
        struct tern_msg m;
        (void)snprintf(payload[i], sizeof payload[i], "d%d", i);
        m.data = payload[i];
        m.len = strlen(payload[i]);
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_assert_eq(log.n, 5);
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(log.status[i], 0, "batch %d: %s", i,
                     tern_strerror(log.status[i]));
    }
    /* 1..3 were acknowledged as forgotten duplicates, 4 as a remembered
     * one, 5 appended fresh. */
    cr_expect_eq(log.count[0], 0);
    cr_expect_eq(log.count[3], 1);
    cr_expect_eq(log.base[3], 3);
    cr_expect_eq(log.base[4], 4);
    cr_assert_eq(fake_n_msgs(&fs), 5, "each batch appended exactly once");
    for (uint64_t k = 0; k < 5; k++) {
        char want[4];
        char *got = fake_msg(&fs, k);
        (void)snprintf(want, sizeof want, "d%d", (int)k);
        cr_expect_str_eq(got, want);
        free(got);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- Allocation failures (no network involved) ---- */

Test(client, allocation_failures_are_clean)
{
    struct tern_msg m = {"x", 1};
    int ok_new = 0, ok_produce = 0;
    for (long n = 0; n < 40; n++) {
        struct tern_client *c = NULL;
        struct done_log log;
        struct done_ctx ctx = {&log, 0};
        int rv;
        memset(&log, 0, sizeof log);
        tern_alloc_fail_after(n);
        rv = tern_client_new("127.0.0.1:1,127.0.0.1:2", NULL, &c);
        if (rv != 0) {
            tern_alloc_fail_after(-1);
            cr_expect_eq(rv, -ENOMEM);
            cr_expect_null(c);
            continue;
        }
        ok_new++;
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
}

/* ---- The deadline of a queued async batch starts in the window ---- */

static enum fake_action slow_hook(struct fake_server *fs,
                                  int conn,
                                  const struct proto_header *h,
                                  const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE) {
        /* Simulated service time of a slow leader. */
        struct timespec ts = {0, 20 * 1000 * 1000L};
        (void)nanosleep(&ts, NULL);
    }
    return FAKE_DEFAULT;
}

Test(client, queued_batches_do_not_time_out_behind_the_window)
{
    struct fake_server fs;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[30];
    struct tern_msg m = {"w", 1};
    int64_t t0;
    cr_assert_eq(fake_start(&fs, slow_hook), 0);
    c = client_for(fs.addr, 300, 1);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    t0 = now_ms();
    for (int i = 0; i < 30; i++) {
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0);
    }
    drain(c);
    cr_expect_gt(now_ms() - t0, 300, "the run outlasts one request timeout");
    cr_assert_eq(log.n, 30);
    for (int i = 0; i < 30; i++) {
        cr_expect_eq(log.status[i], 0, "batch %d: %s", i,
                     tern_strerror(log.status[i]));
        cr_expect_eq(log.base[i], (uint64_t)i);
    }
    tern_client_free(c);
    fake_stop(&fs);
}

/* ---- tern_produce_resend: the batch with an unknown outcome ---- */

/* fs->counter: 1 = produce requests are applied by the model but never
 * answered (the answer is lost), 2 = dropped silently (never applied),
 * 0 = normal. Set by the test thread under fs->mu. */
static enum fake_action lose_produce_hook(struct fake_server *fs,
                                          int conn,
                                          const struct proto_header *h,
                                          const struct proto_request *r)
{
    (void)conn;
    if (r->op != PROTO_OP_PRODUCE || fs->counter == 0) {
        return FAKE_DEFAULT;
    }
    if (fs->counter == 1) {
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        fake_model_answer(fs, h, r, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    }
    return FAKE_SILENT;
}

static void set_mode(struct fake_server *fs, int mode)
{
    (void)pthread_mutex_lock(&fs->mu);
    fs->counter = mode;
    (void)pthread_mutex_unlock(&fs->mu);
}

static void resend_after_timeout(int mode)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"r-0", 3};
    struct tern_msg other = {"r-X", 3};
    uint64_t base = 77;
    int n;
    cr_assert_eq(fake_start(&fs, lose_produce_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    cr_expect_eq(tern_produce_resend(c, "q", &m, 1, &base), TERN_EINVAL,
                 "nothing to resend yet");

    set_mode(&fs, mode);
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), TERN_ETIMEDOUT);
    cr_expect_eq(fake_n_msgs(&fs), mode == 1 ? 1 : 0);
    set_mode(&fs, 0);

    cr_expect_eq(tern_produce_resend(c, "q", &other, 1, &base), TERN_EINVAL,
                 "other bytes are not the batch that timed out");
    cr_expect_eq(tern_produce_resend(c, "q", (struct tern_msg[]){m, m}, 2,
                                     &base),
                 TERN_EINVAL);
    cr_assert_eq(tern_produce_resend(c, "q", &m, 1, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0, "the offset of the one copy");
    cr_expect_eq(fake_n_msgs(&fs), 1, "appended exactly once");
    n = fake_n_records(&fs);
    cr_assert_geq(n, 2);
    cr_expect_eq(fake_record_at(&fs, n - 1).seq, 1, "same sequence");
    cr_expect_eq(fake_record_at(&fs, n - 1).producer_id,
                 tern_client_producer_id(c), "same producer id");
    cr_expect_eq(tern_produce_resend(c, "q", &m, 1, &base), TERN_EINVAL,
                 "resolved: nothing left to resend");
    /* The next batch takes the next sequence. */
    cr_expect_eq(tern_produce(c, "q", &other, 1, &base), 0);
    cr_expect_eq(base, 1);
    cr_expect_eq(fake_record_at(&fs, fake_n_records(&fs) - 1).seq, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, resend_after_lost_answer_returns_original_offset)
{
    resend_after_timeout(1);
}

Test(client, resend_after_lost_request_appends_once)
{
    resend_after_timeout(2);
}

Test(client, resend_behind_a_gap_is_esequence)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg a = {"g-0", 3}, b = {"g-1", 3};
    cr_assert_eq(fake_start(&fs, lose_produce_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    set_mode(&fs, 2); /* both lost before the server: seq 1 and 2 */
    cr_assert_eq(tern_produce(c, "q", &a, 1, NULL), TERN_ETIMEDOUT);
    cr_assert_eq(tern_produce(c, "q", &b, 1, NULL), TERN_ETIMEDOUT);
    set_mode(&fs, 0);
    /* Only the last one is kept; seq 2 behind the gap at 1: never
     * appended, and said so. */
    cr_expect_eq(tern_produce_resend(c, "q", &a, 1, NULL), TERN_EINVAL);
    cr_expect_eq(tern_produce_resend(c, "q", &b, 1, NULL), TERN_ESEQUENCE,
                 "%s", tern_client_errmsg(c));
    cr_expect_eq(fake_n_msgs(&fs), 0);
    cr_expect_eq(tern_produce_resend(c, "q", &b, 1, NULL), TERN_EINVAL,
                 "resolved by the ESEQUENCE answer");
    tern_client_free(c);
    fake_stop(&fs);
}
