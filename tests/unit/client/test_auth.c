/*
 * libtern's login (tern_client_set_auth), issued producer ids
 * (PRODUCER_INIT) and the user / grant / namespace calls, against the
 * fake server with a hook that speaks the server side: SCRAM through
 * auth_scram_server_*, producer id blocks, and the admin ops with a small
 * in-memory model.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <auth.h>
#include <tern/tern.h>
#include <tern_common.h>

#include "auth_fake.h"
#include "client_fixture.h"
#include "fake_server.h"

#define PASSWORD AUTHSRV_PASSWORD

static void set_scram(struct tern_client *c,
                      const char *user,
                      const char *password,
                      const char *ns)
{
    struct tern_auth_options o;
    tern_auth_options_init(&o);
    o.mechanism = TERN_AUTH_SCRAM;
    o.user = user;
    o.password = password;
    o.ns = ns;
    cr_assert_eq(tern_client_set_auth(c, &o), 0, "%s", tern_client_errmsg(c));
}

/* ---- Login ---- */

Test(auth, scram_login_before_any_request)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct authsrv s;
    start_auth_server(&fs, &a);
    c = client_for(fs.addr, 5000, 8);
    set_scram(c, "alice", PASSWORD, "acme");
    create_queue(c, "q");
    cr_expect_eq(tern_produce(c, "q", &(struct tern_msg){"m", 1}, 1, NULL), 0,
                 "%s", tern_client_errmsg(c));
    s = snap(&fs, &a);
    cr_expect_eq(s.logins, 1);
    cr_expect_eq(s.unauthed_requests, 0);
    cr_expect_str_eq(s.last_ns, "acme");
    cr_expect_str_eq(s.last_mech, "SCRAM-SHA-256");
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(auth, default_namespace_is_empty_on_the_wire)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    start_auth_server(&fs, &a);
    c = client_for(fs.addr, 5000, 8);
    set_scram(c, "alice", PASSWORD, NULL);
    create_queue(c, "q");
    cr_expect_str_eq(snap(&fs, &a).last_ns, "");
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(auth, wrong_password_is_final_eauth)
{
    struct fake_server fs, other;
    struct authsrv a, b;
    struct tern_client *c;
    char servers[160];
    start_auth_server(&fs, &a);
    start_auth_server(&other, &b);
    (void)snprintf(servers, sizeof servers, "%s,%s", fs.addr, other.addr);
    c = client_for(servers, 3000, 8);
    set_scram(c, "alice", "wrong password", NULL);
    cr_expect_eq(tern_queue_create(c, "q"), TERN_EAUTH);
    cr_expect_neq(strstr(tern_client_errmsg(c), "invalid-proof"), NULL, "%s",
                  tern_client_errmsg(c));
    /* Not retried on the other server as if it were a network error. */
    cr_expect_eq(fake_n_requests(&other), 0);
    cr_expect_eq(snap(&fs, &a).auth_failures, 1);
    cr_expect_eq(snap(&fs, &a).unauthed_requests, 0);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
    stop_auth_server(&other, &b);
}

Test(auth, unknown_user_is_eauth)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    start_auth_server(&fs, &a);
    c = client_for(fs.addr, 3000, 8);
    set_scram(c, "mallory", PASSWORD, NULL);
    cr_expect_eq(tern_queue_create(c, "q"), TERN_EAUTH);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(auth, server_final_that_does_not_verify_is_eauth)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    start_auth_server(&fs, &a);
    a.tamper_final = 1;
    c = client_for(fs.addr, 3000, 8);
    set_scram(c, "alice", PASSWORD, NULL);
    cr_expect_eq(tern_queue_create(c, "q"), TERN_EAUTH);
    cr_expect_neq(strstr(tern_client_errmsg(c), "did not prove"), NULL, "%s",
                  tern_client_errmsg(c));
    /* Nothing was sent after the unproven login. */
    cr_expect_eq(snap(&fs, &a).unauthed_requests, 0);
    cr_expect_eq(fake_n_requests(&fs), 2);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(auth, login_runs_again_after_a_reconnect)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct authsrv s;
    start_auth_server(&fs, &a);
    a.drop_first_write = 1;
    c = client_for(fs.addr, 5000, 8);
    set_scram(c, "alice", PASSWORD, "acme");
    create_queue(c, "q"); /* dropped once, retried on a new connection */
    s = snap(&fs, &a);
    cr_expect_eq(s.logins, 2);
    cr_expect_eq(s.unauthed_requests, 0);
    cr_expect_eq(fs.n_accepts, 2);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(auth, set_auth_checks_its_arguments)
{
    struct tern_client *c = client_for("127.0.0.1:1", 1000, 8);
    struct tern_auth_options o;
    tern_auth_options_init(&o);
    cr_expect_eq(o.mechanism, TERN_AUTH_NONE);
    o.mechanism = TERN_AUTH_SCRAM;
    o.user = "alice";
    cr_expect_eq(tern_client_set_auth(c, &o), TERN_EINVAL); /* no password */
    o.password = "pw";
    o.ns = "bad ns";
    cr_expect_eq(tern_client_set_auth(c, &o), TERN_EINVAL);
    o.ns = NULL;
    o.user = "bad user";
    cr_expect_eq(tern_client_set_auth(c, &o), TERN_EINVAL);
    o.user = "alice";
    cr_expect_eq(tern_client_set_auth(c, &o), 0);
    o.mechanism = TERN_AUTH_EXTERNAL; /* needs TLS first */
    cr_expect_eq(tern_client_set_auth(c, &o), TERN_EINVAL);
    cr_expect_neq(strstr(tern_client_errmsg(c), "TLS"), NULL);
    o.mechanism = 9;
    cr_expect_eq(tern_client_set_auth(c, &o), TERN_EINVAL);
    cr_expect_eq(tern_client_set_auth(c, NULL), 0); /* off again */
    tern_client_free(c);
}

Test(auth, no_auth_against_a_server_that_requires_it)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    start_auth_server(&fs, &a);
    c = client_for(fs.addr, 3000, 8);
    cr_expect_eq(tern_queue_create(c, "q"), TERN_EAUTH);
    cr_expect_neq(strstr(tern_client_errmsg(c), "authenticate first"), NULL);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

/* ---- Issued producer ids ---- */

Test(producer_id, block_from_the_leader_for_every_queue)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    a.pid_mode = 1;
    a.pid_block = 7ULL << 32;
    c = client_for(fs.addr, 5000, 8);
    cr_expect_eq(tern_client_producer_id(c), 0);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    cr_expect_eq(tern_client_producer_id(c), 7ULL << 32);
    cr_assert_eq(fake_n_records(&fs), 2);
    cr_expect_eq(fake_record_at(&fs, 0).producer_id, 7ULL << 32);
    cr_expect_eq(fake_record_at(&fs, 1).producer_id, 7ULL << 32);
    cr_expect_eq(fake_record_at(&fs, 1).seq, 2);
    cr_expect_eq(snap(&fs, &a).pid_requests, 1); /* once per client */
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(producer_id, renumber_stays_in_the_block)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct done_log log;
    struct done_ctx ctx[2];
    struct tern_msg m = {"z", 1};
    struct fake_record last;
    int n;
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    a.pid_mode = 1;
    a.pid_block = 9ULL << 32;
    a.fail_first_produce = 1;
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    memset(&log, 0, sizeof log);
    for (int i = 0; i < 2; i++) {
        ctx[i].log = &log;
        ctx[i].idx = i;
        cr_assert_eq(tern_produce_async(c, "q", &m, 1, on_done, &ctx[i]), 0,
                     "%s", tern_client_errmsg(c));
    }
    drain(c);
    cr_expect_eq(log.status[0], TERN_ETOOBIG);
    cr_expect_eq(log.status[1], 0);
    n = fake_n_records(&fs);
    cr_assert_geq(n, 3);
    last = fake_record_at(&fs, n - 1);
    cr_expect_eq(last.producer_id, (9ULL << 32) | 1, "%llx",
                 (unsigned long long)last.producer_id);
    cr_expect_eq(last.seq, 1);
    cr_expect_eq(tern_client_producer_id(c), 9ULL << 32);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(producer_id, random_fallback_on_an_older_server)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    a.pid_mode = 0; /* the model answers TERN_EINVAL */
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0);
    cr_expect_neq(tern_client_producer_id(c), 0);
    cr_expect_eq(fake_record_at(&fs, 0).producer_id,
                 tern_client_producer_id(c));
    cr_expect_eq(fake_record_at(&fs, 1).producer_id,
                 tern_client_producer_id(c));
    cr_expect_eq(snap(&fs, &a).pid_requests, 1);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(producer_id, refusal_fails_the_produce_and_asks_again)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    a.pid_mode = 2; /* TERN_EDENIED, then a block */
    a.pid_block = 3ULL << 32;
    c = client_for(fs.addr, 5000, 8);
    create_queue(c, "q");
    cr_expect_eq(tern_produce(c, "q", &m, 1, NULL), TERN_EDENIED);
    cr_expect_neq(strstr(tern_client_errmsg(c), "no ids for you"), NULL, "%s",
                  tern_client_errmsg(c));
    cr_expect_eq(fake_n_records(&fs), 0);
    cr_expect_eq(tern_client_producer_id(c), 0);
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(fake_record_at(&fs, 0).producer_id, 3ULL << 32);
    cr_expect_eq(fake_record_at(&fs, 0).seq, 1);
    cr_expect_eq(snap(&fs, &a).pid_requests, 2);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

/* ---- Users, grants, namespaces ---- */

Test(admin, user_set_derives_the_credential_locally)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct auth_scram_cred got, again;
    struct authsrv s;
    char why[TERN_ERRMSG_SIZE];
    start_auth_server(&fs, &a);
    c = client_for(fs.addr, 5000, 8);
    set_scram(c, "alice", PASSWORD, NULL);
    cr_assert_eq(tern_user_set(c, "bob", "bob's secret", TERN_USER_ADMIN), 0,
                 "%s", tern_client_errmsg(c));
    s = snap(&fs, &a);
    cr_expect_str_eq(s.user, "bob");
    cr_expect_eq(s.user_flags, PROTO_USER_ADMIN);
    cr_assert_eq(
        auth_scram_cred_decode(s.user_cred, s.user_cred_len, &got, why), 0,
        "%s", why);
    /* The same password and salt give the same keys: the server got a
     * credential of that password, not the password. */
    cr_assert_eq(auth_scram_cred_derive("bob's secret", got.salt, got.salt_len,
                                        got.iterations, &again, why),
                 0);
    cr_expect_eq(
        memcmp(got.stored_key, again.stored_key, sizeof got.stored_key), 0);
    cr_expect_eq(memmem(s.user_cred, s.user_cred_len, "bob's secret", 12),
                 NULL);

    /* A certificate user has no credential. */
    cr_assert_eq(tern_user_set(c, "node-app", NULL, TERN_USER_CERT), 0);
    s = snap(&fs, &a);
    cr_expect_eq(s.user_cred_len, 0);
    cr_expect_eq(s.user_flags, PROTO_USER_CERT);
    /* No password and no cert flag: refused before anything is sent. */
    cr_expect_eq(tern_user_set(c, "x", NULL, 0), TERN_EINVAL);
    cr_expect_eq(tern_user_set(c, "x", "pw", 0x10), TERN_EINVAL);
    cr_expect_eq(tern_user_set(c, "bad name", "pw", 0), TERN_EBADNAME);
    cr_expect_eq(snap(&fs, &a).user_sets, 2);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(admin, user_set_cred_sends_the_parsed_credential)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    char text[TERN_CREDENTIAL_TEXT_MAX];
    struct auth_scram_cred parsed;
    uint8_t bin[AUTH_SCRAM_CRED_ENC_MAX];
    size_t len = 0;
    char why[TERN_ERRMSG_SIZE];
    struct authsrv s;
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    c = client_for(fs.addr, 5000, 8);
    cr_assert_eq(tern_credential_make("pw pw", 0, text, sizeof text), 0);
    cr_expect_eq(strncmp(text, "SCRAM-SHA-256$4096:", 19), 0, "%s", text);
    cr_expect_eq(tern_credential_make("pw", 0, text, 10), TERN_EINVAL);
    cr_assert_eq(tern_credential_make("pw pw", 0, text, sizeof text), 0);
    cr_assert_eq(auth_scram_cred_parse(text, strlen(text), &parsed, why), 0);
    cr_assert_eq(auth_scram_cred_encode(&parsed, bin, sizeof bin, &len, why),
                 0);
    cr_assert_eq(tern_user_set_cred(c, "carol", text, 0), 0, "%s",
                 tern_client_errmsg(c));
    s = snap(&fs, &a);
    cr_expect_str_eq(s.user, "carol");
    cr_assert_eq(s.user_cred_len, len);
    cr_expect_eq(memcmp(s.user_cred, bin, len), 0);
    cr_expect_neq(tern_user_set_cred(c, "carol", "SCRAM-SHA-256$nope", 0), 0);
    cr_expect_eq(tern_user_set_cred(c, "carol", "", TERN_USER_CERT), 0);
    cr_expect_eq(snap(&fs, &a).user_cred_len, 0);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(admin, grants_and_namespaces)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct authsrv s;
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    c = client_for(fs.addr, 5000, 8);
    cr_assert_eq(tern_acl_set(c, "bob", "acme", "orders.*",
                              TERN_PERM_PRODUCE | TERN_PERM_CONSUME),
                 0, "%s", tern_client_errmsg(c));
    s = snap(&fs, &a);
    cr_expect_str_eq(s.acl_user, "bob");
    cr_expect_str_eq(s.acl_ns, "acme");
    cr_expect_str_eq(s.acl_pattern, "orders.*");
    cr_expect_eq(s.acl_perms, 3);
    cr_expect_eq(tern_acl_set(c, "bob", "acme", "*", 0), TERN_EINVAL);
    cr_expect_eq(tern_acl_set(c, "bob", "acme", "*", 16), TERN_EINVAL);
    cr_expect_eq(tern_acl_set(c, "bob", "acme", "a*b", 1), TERN_EBADNAME);
    cr_assert_eq(tern_acl_delete(c, "bob", "acme", "orders.*"), 0);
    cr_expect_eq(snap(&fs, &a).last_op, PROTO_OP_ACL_DELETE);

    cr_assert_eq(tern_namespace_set(c, "acme", 10, 1u << 20, 4096), 0);
    s = snap(&fs, &a);
    cr_expect_str_eq(s.ns_name, "acme");
    cr_expect_eq(s.ns_q[0], 10);
    cr_expect_eq(s.ns_q[1], 1u << 20);
    cr_expect_eq(s.ns_q[2], 4096);
    cr_assert_eq(tern_namespace_delete(c, "acme"), 0);
    cr_expect_str_eq(snap(&fs, &a).user, "acme");
    cr_assert_eq(tern_user_delete(c, "bob"), 0);
    cr_expect_str_eq(snap(&fs, &a).user, "bob");

    /* A first attempt that finds nothing reports it. */
    (void)pthread_mutex_lock(&fs.mu);
    a.notfound_deletes = 1;
    (void)pthread_mutex_unlock(&fs.mu);
    cr_expect_eq(tern_user_delete(c, "bob"), TERN_ENOTFOUND);
    cr_expect_neq(strstr(tern_client_errmsg(c), "no such thing"), NULL);
    cr_expect_eq(tern_namespace_delete(c, "acme"), TERN_ENOTFOUND);
    cr_expect_eq(tern_acl_delete(c, "bob", "acme", "*"), TERN_ENOTFOUND);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

Test(admin, lists_are_decoded)
{
    struct fake_server fs;
    struct authsrv a;
    struct tern_client *c;
    struct tern_user_list *ul;
    struct tern_acl_list *al;
    struct tern_namespace_list *nl;
    start_auth_server(&fs, &a);
    a.require_auth = 0;
    c = client_for(fs.addr, 5000, 8);

    cr_assert_eq(tern_user_list(c, &ul), 0, "%s", tern_client_errmsg(c));
    cr_assert_eq(tern_user_list_count(ul), 2);
    cr_expect_str_eq(tern_user_list_name(ul, 0), "alice");
    cr_expect_eq(tern_user_list_flags(ul, 0), TERN_USER_ADMIN);
    cr_expect_eq(tern_user_list_has_password(ul, 0), 1);
    cr_expect_str_eq(tern_user_list_name(ul, 1), "node-app");
    cr_expect_eq(tern_user_list_flags(ul, 1), TERN_USER_CERT);
    cr_expect_eq(tern_user_list_has_password(ul, 1), 0);
    cr_expect_null(tern_user_list_name(ul, 2));
    tern_user_list_free(ul);

    cr_assert_eq(tern_acl_list(c, "bob", &al), 0);
    cr_expect_str_eq(snap(&fs, &a).acl_user, "bob");
    cr_assert_eq(tern_acl_list_count(al), 3);
    cr_expect_str_eq(tern_acl_list_user(al, 0), "bob");
    cr_expect_str_eq(tern_acl_list_namespace(al, 0), "acme");
    cr_expect_str_eq(tern_acl_list_pattern(al, 0), "orders.*");
    cr_expect_eq(tern_acl_list_perms(al, 0), 3);
    cr_expect_eq(tern_acl_list_perms(al, 1), TERN_PERM_ALL);
    cr_expect_str_eq(tern_acl_list_pattern(al, 2), "audit");
    cr_expect_null(tern_acl_list_user(al, 3));
    tern_acl_list_free(al);
    cr_assert_eq(tern_acl_list(c, NULL, &al), 0);
    cr_expect_str_eq(snap(&fs, &a).acl_user, "");
    tern_acl_list_free(al);

    cr_assert_eq(tern_namespace_list(c, &nl), 0);
    cr_assert_eq(tern_namespace_list_count(nl), 2);
    cr_expect_str_eq(tern_namespace_list_name(nl, 0), "acme");
    cr_expect_eq(tern_namespace_list_max_queues(nl, 0), 10);
    cr_expect_eq(tern_namespace_list_max_bytes(nl, 0), 1u << 20);
    cr_expect_eq(tern_namespace_list_produce_bytes_per_s(nl, 0), 4096);
    cr_expect_str_eq(tern_namespace_list_name(nl, 1), "default");
    cr_expect_eq(tern_namespace_list_max_queues(nl, 1), 0);
    tern_namespace_list_free(nl);
    tern_user_list_free(NULL);
    tern_acl_list_free(NULL);
    tern_namespace_list_free(NULL);
    tern_client_free(c);
    stop_auth_server(&fs, &a);
}

/* A follower that redirects admin writes to the leader (fs->peer_addr). */
static enum fake_action redirect_hook(struct fake_server *fs,
                                      int conn,
                                      const struct proto_header *h,
                                      const struct proto_request *r)
{
    if (r->op == PROTO_OP_NAMESPACE_SET) {
        fake_send_error(fs, conn, h, TERN_ENOTLEADER, fs->peer_addr);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

Test(admin, writes_follow_the_leader)
{
    struct fake_server follower, leader;
    struct authsrv a;
    struct tern_client *c;
    char servers[160];
    start_auth_server(&leader, &a);
    a.require_auth = 0;
    cr_assert_eq(fake_start(&follower, redirect_hook), 0);
    (void)pthread_mutex_lock(&follower.mu);
    (void)snprintf(follower.peer_addr, sizeof follower.peer_addr, "%s",
                   leader.addr);
    (void)pthread_mutex_unlock(&follower.mu);
    (void)snprintf(servers, sizeof servers, "%s", follower.addr);
    c = client_for(servers, 5000, 8);
    cr_assert_eq(tern_namespace_set(c, "acme", 1, 2, 3), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_str_eq(snap(&leader, &a).ns_name, "acme");
    cr_expect_str_eq(tern_client_leader(c), leader.addr);
    tern_client_free(c);
    fake_stop(&follower);
    stop_auth_server(&leader, &a);
}
