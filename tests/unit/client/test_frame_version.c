/*
 * libtern's frame version 2 (proto.h, "Versions") against the fake
 * server: HELLO goes out once per connection; a server that does not know
 * it (the fake's default, as a server before it) keeps every request in
 * version 1; one that takes PROTO_FEATURE_XXH3 gets the requests after
 * its answer in version 2; a reconnect starts in version 1 with a new
 * HELLO.
 */
#include <criterion/criterion.h>

#include <tern/tern.h>

#include "client_fixture.h"
#include "fake_server.h"

/* Start the fake, speaking HELLO or not. */
static void start_fake(struct fake_server *fs, fake_hook_cb hook, int hello)
{
    cr_assert_eq(fake_start(fs, hook), 0);
    pthread_mutex_lock(&fs->mu);
    fs->speaks_hello = hello;
    pthread_mutex_unlock(&fs->mu);
}

static void seen(struct fake_server *fs, int *n_hello, int *version)
{
    pthread_mutex_lock(&fs->mu);
    *n_hello = fs->n_hello;
    *version = fs->last_version;
    pthread_mutex_unlock(&fs->mu);
}

/* Produce one message to q and fetch it back. */
static void round_trip(struct tern_client *c)
{
    struct tern_msg m = {"x", 1};
    struct tern_fetch_result *r = NULL;
    cr_assert_eq(tern_produce(c, "q", &m, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_fetch(c, "q", 0, 1, 0, 0, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(tern_fetch_result_count(r), 1);
    tern_fetch_result_free(r);
}

/* Against a fake speaking HELLO or not, with hook: create q, then
 * `trips` round trips; *n_hello and *version as the fake saw them. */
static void run_case(int hello,
                     fake_hook_cb hook,
                     int trips,
                     int *n_hello,
                     int *version)
{
    struct fake_server fs;
    start_fake(&fs, hook, hello);
    struct tern_client *c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    for (int i = 0; i < trips; i++) {
        round_trip(c);
    }
    seen(&fs, n_hello, version);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_frame_version, an_older_server_keeps_version_1)
{
    int n_hello, version;
    run_case(0, NULL, 2, &n_hello, &version);
    cr_expect_eq(n_hello, 1, "one HELLO per connection");
    cr_expect_eq(version, TERN_PROTO_VERSION);
}

Test(client_frame_version, a_server_that_takes_xxh3_gets_version_2)
{
    int n_hello, version;
    /* HELLO's answer comes before the first request's. */
    run_case(1, NULL, 1, &n_hello, &version);
    cr_expect_eq(n_hello, 1);
    cr_expect_eq(version, PROTO_VERSION_XXH3);
}

/* Drops the connection at the first FETCH (fs->counter). */
static enum fake_action drop_first_fetch(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r)
{
    (void)conn;
    (void)h;
    if (r->op == PROTO_OP_FETCH && fs->counter++ == 0) {
        return FAKE_DROP;
    }
    return FAKE_DEFAULT;
}

Test(client_frame_version, a_reconnect_says_hello_again)
{
    int n_hello, version;
    /* The first round trip's fetch is retried on a new connection, which
     * says HELLO again and goes on in version 2. */
    run_case(1, drop_first_fetch, 2, &n_hello, &version);
    cr_expect_eq(n_hello, 2);
    cr_expect_eq(version, PROTO_VERSION_XXH3);
}
