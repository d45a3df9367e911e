/* Login bounds and produce-rate buckets of node/access.c: the per-address
 * failure table (window, eviction of the oldest, bound), the cluster
 * secret handed in (no silent fallback), and buckets of deleted or
 * re-created namespaces against a real index, and the permission
 * MESSAGE_TRACE needs. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <auth.h>
#include <tern_common.h>

#include "access.h"
#include "config.h"
#include "idx.h"

static struct node_config cfg;
static struct node_access *acc;
static char errmsg[TERN_ERRMSG_SIZE];

static void setup(void)
{
    node_config_init(&cfg);
    acc = NULL;
    errmsg[0] = '\0';
}

static void teardown(void)
{
    node_access_free(acc);
    node_config_free(&cfg);
}

TestSuite(access, .init = setup, .fini = teardown);

static uint32_t ip4(const char *s)
{
    struct in_addr a;
    cr_assert_eq(inet_pton(AF_INET, s, &a), 1);
    return a.s_addr;
}

static void open_access(unsigned per_minute, unsigned sources)
{
    cfg.auth_failures_per_minute = per_minute;
    cfg.auth_failure_sources = sources;
    cr_assert_eq(node_access_new(&cfg, NULL, &acc, errmsg), 0, "%s", errmsg);
}

Test(access, defaults)
{
    cr_expect_eq(cfg.auth_failure_delay_ms, 500u);
    cr_expect_eq(cfg.auth_failures_per_minute, 20u);
    cr_expect_eq(cfg.auth_failure_sources, 4096u);
}

/* The cap holds within the window, names the wait in seconds, and lifts
 * when the window is over; other addresses are not affected. */
Test(access, failures_window)
{
    uint32_t a = ip4("10.0.0.1");
    uint32_t b = ip4("10.0.0.2");

    open_access(3, 16);
    cr_expect_eq(node_access_login_allowed(acc, a, 1000, errmsg), 0);
    for (int i = 0; i < 2; i++) {
        node_access_login_failed(acc, a, 1000 + (uint64_t)i);
        cr_expect_eq(node_access_login_allowed(acc, a, 1010, errmsg), 0,
                     "below the cap after %d failures", i + 1);
    }
    node_access_login_failed(acc, a, 1002);
    cr_expect_eq(node_access_login_allowed(acc, a, 1010, errmsg),
                 TERN_ETHROTTLED);
    cr_expect(strstr(errmsg, "retry in 60 s") != NULL, "%s", errmsg);
    cr_expect(strstr(errmsg, "auth_failures_per_minute") != NULL, "%s", errmsg);
    cr_expect_eq(node_access_login_allowed(acc, a, 31000, errmsg),
                 TERN_ETHROTTLED);
    cr_expect(strstr(errmsg, "retry in 30 s") != NULL, "%s", errmsg);
    cr_expect_eq(node_access_login_allowed(acc, b, 31000, errmsg), 0,
                 "another address is served");
    cr_expect_eq(node_access_login_allowed(acc, a, 60999, errmsg),
                 TERN_ETHROTTLED, "still inside the window");
    cr_expect_eq(node_access_login_allowed(acc, a, 61000, errmsg), 0,
                 "the window is over");
    /* A new window: counting starts again. */
    node_access_login_failed(acc, a, 61000);
    node_access_login_failed(acc, a, 61001);
    cr_expect_eq(node_access_login_allowed(acc, a, 61002, errmsg), 0);
    node_access_login_failed(acc, a, 61002);
    cr_expect_eq(node_access_login_allowed(acc, a, 61003, errmsg),
                 TERN_ETHROTTLED);
}

/* A failure after the window is over starts a new one. */
Test(access, failures_old_window_restarts)
{
    uint32_t a = ip4("10.0.0.3");

    open_access(2, 16);
    node_access_login_failed(acc, a, 0);
    node_access_login_failed(acc, a, 70000);
    cr_expect_eq(node_access_login_allowed(acc, a, 70001, errmsg), 0,
                 "failures of different windows do not add up");
    node_access_login_failed(acc, a, 70002);
    cr_expect_eq(node_access_login_allowed(acc, a, 70003, errmsg),
                 TERN_ETHROTTLED);
}

Test(access, failures_cap_zero_is_off)
{
    uint32_t a = ip4("10.0.0.4");

    open_access(0, 16);
    for (int i = 0; i < 100; i++) {
        node_access_login_failed(acc, a, (uint64_t)i);
    }
    cr_expect_eq(node_access_login_allowed(acc, a, 100, errmsg), 0);
}

/* Full table: a new address takes the entry with the oldest window. */
Test(access, failures_evict_oldest)
{
    uint32_t ips[5];
    char s[32];

    for (unsigned i = 0; i < 5; i++) {
        (void)snprintf(s, sizeof(s), "192.168.1.%u", i + 1);
        ips[i] = ip4(s);
    }
    open_access(2, 4);
    for (unsigned i = 0; i < 4; i++) {
        node_access_login_failed(acc, ips[i], 1000 * (uint64_t)(i + 1));
        node_access_login_failed(acc, ips[i], 1000 * (uint64_t)(i + 1) + 1);
    }
    cr_expect_eq(node_access_login_sources(acc), 4u);
    for (unsigned i = 0; i < 4; i++) {
        cr_expect_eq(node_access_login_allowed(acc, ips[i], 5000, errmsg),
                     TERN_ETHROTTLED, "address %u throttled", i);
    }
    node_access_login_failed(acc, ips[4], 6000);
    cr_expect_eq(node_access_login_sources(acc), 4u, "bounded");
    cr_expect_eq(node_access_login_allowed(acc, ips[0], 6001, errmsg), 0,
                 "the oldest window was forgotten");
    for (unsigned i = 1; i < 4; i++) {
        cr_expect_eq(node_access_login_allowed(acc, ips[i], 6001, errmsg),
                     TERN_ETHROTTLED, "address %u still counted", i);
    }
    node_access_login_failed(acc, ips[4], 6002);
    cr_expect_eq(node_access_login_allowed(acc, ips[4], 6003, errmsg),
                 TERN_ETHROTTLED, "the new address is counted");
}

/* Many addresses through a small table: never above the bound, every
 * hash chain stays consistent (the latest addresses are found). */
Test(access, failures_bound)
{
    open_access(1, 16);
    for (uint32_t i = 0; i < 5000; i++) {
        node_access_login_failed(acc, htonl(0x0a000000u + i), i);
        cr_assert_leq(node_access_login_sources(acc), 16u);
    }
    cr_expect_eq(node_access_login_sources(acc), 16u);
    for (uint32_t i = 5000 - 16; i < 5000; i++) {
        cr_expect_eq(node_access_login_allowed(acc, htonl(0x0a000000u + i),
                                               5000, errmsg),
                     TERN_ETHROTTLED, "address %u", i);
    }
    cr_expect_eq(
        node_access_login_allowed(acc, htonl(0x0a000000u), 5000, errmsg), 0,
        "an address forgotten long ago");
}

/* A configured secret file that the node did not load is an error, not a
 * random key; a loaded secret gives the same answer key every time. */
Test(access, secret_required_when_configured)
{
    struct auth_secret s;

    cfg.cluster_secret_file = strdup("/nonexistent/cluster.secret");
    cr_expect_eq(node_access_new(&cfg, NULL, &acc, errmsg), TERN_EINVAL);
    cr_expect(strstr(errmsg, "cluster_secret_file") != NULL, "%s", errmsg);
    cr_expect_null(acc);
    memset(&s, 7, sizeof(s));
    cr_expect_eq(node_access_new(&cfg, &s, &acc, errmsg), 0, "%s", errmsg);
}

/* ---- Produce-rate buckets against a real index ------------------------ */

static struct idx_env *env;
static char dir[64];
static uint64_t next_index;

static void env_open(void)
{
    struct idx_options o;
    (void)snprintf(dir, sizeof(dir), "/tmp/ternd-access-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    cr_assert_eq(idx_open(&o, &env, errmsg), 0, "%s", errmsg);
    next_index = 1;
}

static void env_close(void)
{
    char cmd[128];
    idx_close(env);
    cr_assert_lt((size_t)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir),
                 sizeof(cmd));
    cr_expect_eq(system(cmd), 0);
}

/* Apply one namespace command (rate > 0 or keep: set; else delete). */
static void ns_apply(const char *name, bool set, uint64_t rate)
{
    struct tern_wbuf w;
    struct idx_result res[2];
    unsigned nr = 0;
    struct idx_quota q = {0, 0, rate};

    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    if (set) {
        idx_cmd_namespace_set(&w, name, &q);
    } else {
        idx_cmd_namespace_delete(&w, name);
    }
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_apply(env, next_index++, w.base, w.len, res, 2, &nr), 0,
                 "%s", idx_errmsg(env));
    cr_assert_eq(nr, 1);
    cr_assert_eq(res[0].status, 0);
    cr_assert_eq(idx_flush(env), 0);
    tern_wbuf_free(&w);
}

static struct node_principal in_ns(const char *ns)
{
    struct node_principal p;
    memset(&p, 0, sizeof(p));
    p.state = NODE_PRINCIPAL_DONE;
    (void)snprintf(p.ns, sizeof(p.ns), "%s", ns);
    return p;
}

Test(access, rate_bucket_of_deleted_namespace)
{
    struct node_principal p1 = in_ns("ns1");
    struct node_principal p2 = in_ns("ns2");

    env_open();
    open_access(20, 16);
    ns_apply("ns1", true, 1000);
    cr_expect_eq(node_access_rate(acc, &p1, env, 1000, 10, errmsg), 0);
    cr_expect_eq(node_access_rate(acc, &p1, env, 10, 10, errmsg),
                 TERN_ETHROTTLED, "ns1 spent its second");
    cr_expect_eq(node_access_rate_buckets(acc), 1u);

    /* Deleted: its bucket goes at the next charge of any namespace. */
    ns_apply("ns1", false, 0);
    ns_apply("ns2", true, 500);
    cr_expect_eq(node_access_rate(acc, &p2, env, 100, 20, errmsg), 0);
    cr_expect_eq(node_access_rate_buckets(acc), 1u,
                 "only ns2's bucket is left");

    /* Re-created with the same rate: a new namespace, a fresh bucket. */
    ns_apply("ns1", true, 1000);
    cr_expect_eq(node_access_rate(acc, &p1, env, 900, 30, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(node_access_rate_buckets(acc), 2u);

    /* Re-created with another rate: the new rate holds at once. */
    ns_apply("ns1", false, 0);
    ns_apply("ns1", true, 100);
    cr_expect_eq(node_access_rate(acc, &p1, env, 100, 40, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(node_access_rate(acc, &p1, env, 1, 40, errmsg),
                 TERN_ETHROTTLED, "the new rate (100 bytes/s) holds");
    cr_expect(strstr(errmsg, "100 bytes/s") != NULL, "%s", errmsg);

    /* Rate removed: the bucket goes and nothing is refused. */
    ns_apply("ns1", true, 0);
    cr_expect_eq(node_access_rate(acc, &p1, env, 5000, 41, errmsg), 0);
    cr_expect_eq(node_access_rate_buckets(acc), 1u, "ns2's only");
    env_close();
}

/* The table of buckets is bounded: the least recently charged goes. */
Test(access, rate_buckets_bounded)
{
    struct idx_quota q = {0, 0, 1000};
    struct idx_result *res = calloc(4100, sizeof(*res));
    struct node_principal p;
    struct tern_wbuf w;
    unsigned nr = 0;
    char name[32];

    cr_assert_not_null(res);
    env_open();
    open_access(20, 16);
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    for (unsigned i = 0; i < 4100; i++) {
        (void)snprintf(name, sizeof(name), "n%u", i);
        idx_cmd_namespace_set(&w, name, &q);
    }
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_apply(env, 1, w.base, w.len, res, 4100, &nr), 0, "%s",
                 idx_errmsg(env));
    cr_assert_eq(idx_flush(env), 0);
    tern_wbuf_free(&w);
    free(res);
    for (unsigned i = 0; i < 4100; i++) {
        (void)snprintf(name, sizeof(name), "n%u", i);
        p = in_ns(name);
        cr_assert_eq(node_access_rate(acc, &p, env, 1000, 100 + i, errmsg), 0);
        cr_assert_leq(node_access_rate_buckets(acc), 4096u);
    }
    cr_expect_eq(node_access_rate_buckets(acc), 4096u);
    /* n4099 is still held (spent), n0 was the least recent: forgotten. */
    p = in_ns("n4099");
    cr_expect_eq(node_access_rate(acc, &p, env, 1, 4199, errmsg),
                 TERN_ETHROTTLED);
    p = in_ns("n0");
    cr_expect_eq(node_access_rate(acc, &p, env, 1, 4200, errmsg), 0,
                 "a fresh bucket for n0");
    env_close();
}

/* One user with one grant on queue "orders" of "default"; returns the
 * user's created_index. */
static uint64_t user_with_grant(const char *user, uint32_t perms)
{
    struct tern_wbuf w;
    struct idx_result res[2];
    unsigned nr = 0;
    uint64_t index = next_index++;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_user_set(&w, user, 0, "c", 1);
    idx_cmd_acl_set(&w, user, "default", "orders", perms);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_apply(env, index, w.base, w.len, res, 2, &nr), 0, "%s",
                 idx_errmsg(env));
    cr_assert_eq(nr, 2);
    cr_assert_eq(res[0].status, 0);
    cr_assert_eq(res[1].status, 0);
    cr_assert_eq(idx_flush(env), 0);
    tern_wbuf_free(&w);
    return index;
}

/* MESSAGE_TRACE needs consume on the queue, as MESSAGE_GET. */
Test(access, message_trace_needs_consume)
{
    struct node_principal carol = in_ns("");
    struct node_principal pete = in_ns("");
    struct proto_request r;

    env_open();
    open_access(20, 16);
    (void)snprintf(carol.user, sizeof(carol.user), "carol");
    carol.created_index = user_with_grant("carol", IDX_PERM_CONSUME);
    (void)snprintf(pete.user, sizeof(pete.user), "pete");
    pete.created_index = user_with_grant("pete", IDX_PERM_PRODUCE);
    memset(&r, 0, sizeof(r));
    r.op = PROTO_OP_MESSAGE_TRACE;
    r.queue = "orders";
    r.queue_len = 6;
    cr_expect_eq(node_access_check(acc, &carol, env, &r, errmsg), 0, "%s",
                 errmsg);
    cr_expect_eq(node_access_check(acc, &pete, env, &r, errmsg), TERN_EDENIED);
    cr_expect(strstr(errmsg, "consume") != NULL, "%s", errmsg);
    r.queue = "others";
    cr_expect_eq(node_access_check(acc, &carol, env, &r, errmsg), TERN_EDENIED,
                 "the grant names one queue");
    env_close();
}

/* CLUSTER_TRANSFER is a cluster admin op: every queue permission is not
 * enough, the admin flag is. */
Test(access, cluster_transfer_needs_admin)
{
    struct node_principal mo = in_ns("");
    struct node_principal root = in_ns("");
    struct proto_request r;
    struct tern_wbuf w;
    struct idx_result res[1];
    unsigned nr = 0;

    env_open();
    open_access(20, 16);
    (void)snprintf(mo.user, sizeof(mo.user), "mo");
    mo.created_index = user_with_grant(
        "mo", IDX_PERM_PRODUCE | IDX_PERM_CONSUME | IDX_PERM_MANAGE);
    (void)snprintf(root.user, sizeof(root.user), "root");
    root.created_index = next_index++;
    tern_wbuf_init(&w);
    idx_cmd_begin(&w, 1);
    idx_cmd_user_set(&w, "root", IDX_USER_ADMIN, "c", 1);
    cr_assert_eq(idx_cmd_end(&w), 0);
    cr_assert_eq(idx_apply(env, root.created_index, w.base, w.len, res, 1, &nr),
                 0, "%s", idx_errmsg(env));
    cr_assert_eq(idx_flush(env), 0);
    tern_wbuf_free(&w);
    memset(&r, 0, sizeof(r));
    r.op = PROTO_OP_CLUSTER_TRANSFER;
    r.to_id = 2;
    cr_expect_eq(node_access_check(acc, &mo, env, &r, errmsg), TERN_EDENIED);
    cr_expect(strstr(errmsg, "admin") != NULL, "%s", errmsg);
    cr_expect_eq(node_access_check(acc, &root, env, &r, errmsg), 0, "%s",
                 errmsg);
    env_close();
}
