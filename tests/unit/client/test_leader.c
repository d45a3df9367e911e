/*
 * libtern's leader following: the TERN_ENOTLEADER hint (writes, and
 * READ_LEADER fetches redirected by a deposed leader), trying the next
 * server without a hint, and retrying TERN_ENOLEADER.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

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
