/*
 * libtern's paged security lists against the fake server: a hook serves
 * USER_LIST pages over numbered user names and ACL_LIST pages over a
 * fixed table of grants (each page after the request's cursor), and
 * answers NAMESPACE_LIST unpaged as an older server does. tern_user_list
 * and tern_acl_list return every page's entries in order; a page that does
 * not advance is reported, not looped on; a list longer than
 * TERN_ADMIN_LIST_MAX is TERN_ELIMIT.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

static uint32_t n_users;   /* users listed by the hook */
static uint32_t page_size; /* entries per page */
static int stuck;          /* every page repeats the first entries */
static int n_requests;

#define N_ACL_USERS 5
#define N_ACL_NS    3
#define N_GRANTS    30 /* N_ACL_USERS x N_ACL_NS x 2 patterns */
_Static_assert(N_GRANTS == N_ACL_USERS * N_ACL_NS * 2,
               "one grant per user, namespace and pattern");

static void user_name(uint32_t i, char *buf, size_t size)
{
    (void)snprintf(buf, size, "user-%07u", i);
}

/* Grant i of the table, in (user, namespace, pattern) order. */
static void grant(int i, char *u, char *ns, const char **pattern)
{
    (void)snprintf(u, 16, "g%d", i / (N_ACL_NS * 2));
    (void)snprintf(ns, 16, "ns%d", (i / 2) % N_ACL_NS);
    *pattern = i % 2 == 0 ? "*" : "q*"; /* '*' sorts before 'q' */
}

static int grant_after(int i, const struct proto_request *r)
{
    char u[16], ns[16], ru[64], rn[64], rp[64];
    const char *p;
    int c;
    grant(i, u, ns, &p);
    (void)snprintf(ru, sizeof ru, "%.*s", (int)r->after_len, r->after);
    (void)snprintf(rn, sizeof rn, "%.*s", (int)r->after_ns_len, r->after_ns);
    (void)snprintf(rp, sizeof rp, "%.*s", (int)r->after_pattern_len,
                   r->after_pattern);
    c = strcmp(u, ru);
    if (c == 0) {
        c = strcmp(ns, rn);
    }
    if (c == 0) {
        c = strcmp(p, rp);
    }
    return c > 0;
}

static void serve_users(struct fake_server *fs,
                        int conn,
                        const struct proto_header *h,
                        const struct proto_request *r)
{
    struct tern_wbuf w;
    char name[32];
    uint32_t first = 0, n = 0;
    size_t start;
    if (r->after_len > 5 && !stuck) {
        first = (uint32_t)strtoul(r->after + 5, NULL, 10) + 1;
    }
    tern_wbuf_init(&w);
    start = proto_list_begin(&w, PROTO_OP_USER_LIST, h->request_id);
    for (uint32_t i = first; i < n_users && n < page_size; i++, n++) {
        user_name(i, name, sizeof name);
        proto_put_user_entry(&w, name, i % 2 == 0 ? PROTO_USER_ADMIN : 0, 1);
    }
    cr_assert_eq(
        proto_list_end_page(&w, start, n, stuck || first + n < n_users), 0);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

static void serve_grants(struct fake_server *fs,
                         int conn,
                         const struct proto_header *h,
                         const struct proto_request *r)
{
    struct tern_wbuf w;
    char u[16], ns[16];
    const char *p;
    int i = 0;
    uint32_t n = 0;
    size_t start;
    cr_assert_eq(r->user_len, 0, "every user's grants");
    while (i < N_GRANTS && r->after_len > 0 && !grant_after(i, r)) {
        i++;
    }
    tern_wbuf_init(&w);
    start = proto_list_begin(&w, PROTO_OP_ACL_LIST, h->request_id);
    for (; i < N_GRANTS && n < page_size; i++, n++) {
        grant(i, u, ns, &p);
        proto_put_acl_entry(&w, u, ns, p, (uint32_t)(i % 15) + 1);
    }
    cr_assert_eq(proto_list_end_page(&w, start, n, i < N_GRANTS), 0);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

/* An older server: the whole list, no more byte. */
static void serve_namespaces(struct fake_server *fs,
                             int conn,
                             const struct proto_header *h)
{
    struct tern_wbuf w;
    size_t start;
    tern_wbuf_init(&w);
    start = proto_list_begin(&w, PROTO_OP_NAMESPACE_LIST, h->request_id);
    proto_put_namespace_entry(&w, "default", 0, 0, 0);
    proto_put_namespace_entry(&w, "team", 1, 2, 3);
    cr_assert_eq(proto_list_end(&w, start, 2), 0);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
}

static enum fake_action admin_pages_hook(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r)
{
    switch (r->op) {
    case PROTO_OP_USER_LIST:
        n_requests++;
        cr_assert_eq(r->paged, 1, "libtern sends paged requests");
        serve_users(fs, conn, h, r);
        return FAKE_HANDLED;
    case PROTO_OP_ACL_LIST:
        n_requests++;
        cr_assert_eq(r->paged, 1, "libtern sends paged requests");
        serve_grants(fs, conn, h, r);
        return FAKE_HANDLED;
    case PROTO_OP_NAMESPACE_LIST:
        n_requests++;
        serve_namespaces(fs, conn, h);
        return FAKE_HANDLED;
    default:
        return FAKE_DEFAULT;
    }
}

static void reset(uint32_t users, uint32_t page, int is_stuck)
{
    n_users = users;
    page_size = page;
    stuck = is_stuck;
    n_requests = 0;
}

Test(client, user_list_walks_every_page)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_user_list *l;
    char want[32];
    reset(23, 4, 0);
    cr_assert_eq(fake_start(&fs, admin_pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_assert_eq(tern_user_list(c, &l), 0);
    cr_assert_eq(tern_user_list_count(l), 23);
    for (uint32_t i = 0; i < 23; i++) {
        user_name(i, want, sizeof want);
        cr_expect_str_eq(tern_user_list_name(l, i), want);
        cr_expect_eq(tern_user_list_flags(l, i),
                     i % 2 == 0 ? TERN_USER_ADMIN : 0);
    }
    cr_expect_eq(n_requests, 6);
    tern_user_list_free(l);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, acl_list_pages_by_grant_key)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_acl_list *l;
    char u[16], ns[16];
    const char *p;
    reset(0, 4, 0);
    cr_assert_eq(fake_start(&fs, admin_pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_assert_eq(tern_acl_list(c, NULL, &l), 0);
    cr_assert_eq(tern_acl_list_count(l), N_GRANTS);
    for (int i = 0; i < N_GRANTS; i++) {
        grant(i, u, ns, &p);
        cr_expect_str_eq(tern_acl_list_user(l, (size_t)i), u);
        cr_expect_str_eq(tern_acl_list_namespace(l, (size_t)i), ns);
        cr_expect_str_eq(tern_acl_list_pattern(l, (size_t)i), p);
        cr_expect_eq(tern_acl_list_perms(l, (size_t)i), (uint32_t)(i % 15) + 1);
    }
    cr_expect_eq(n_requests, (N_GRANTS + 3) / 4);
    tern_acl_list_free(l);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, unpaged_answer_is_the_whole_list)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_namespace_list *l;
    reset(0, 4, 0);
    cr_assert_eq(fake_start(&fs, admin_pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_assert_eq(tern_namespace_list(c, &l), 0);
    cr_assert_eq(tern_namespace_list_count(l), 2);
    cr_expect_str_eq(tern_namespace_list_name(l, 1), "team");
    cr_expect_eq(tern_namespace_list_produce_bytes_per_s(l, 1), 3);
    cr_expect_eq(n_requests, 1);
    tern_namespace_list_free(l);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, user_list_page_must_advance)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_user_list *l = NULL;
    reset(10, 3, 1);
    cr_assert_eq(fake_start(&fs, admin_pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_expect_eq(tern_user_list(c, &l), TERN_EMALFORMED);
    cr_expect_null(l);
    cr_expect_leq(n_requests, 2);
    cr_expect(strstr(tern_client_errmsg(c), "does not advance") != NULL, "%s",
              tern_client_errmsg(c));
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, user_list_bounded, .timeout = 120)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_user_list *l = NULL;
    uint32_t page = 100000;
    reset(TERN_ADMIN_LIST_MAX + page, page, 0);
    cr_assert_eq(fake_start(&fs, admin_pages_hook), 0);
    c = client_for(fs.addr, 30000, 8);
    cr_expect_eq(tern_user_list(c, &l), TERN_ELIMIT);
    cr_expect_null(l);
    cr_expect_eq(n_requests, (int)(TERN_ADMIN_LIST_MAX / page) + 1);
    cr_expect(strstr(tern_client_errmsg(c), "more than") != NULL, "%s",
              tern_client_errmsg(c));
    tern_client_free(c);
    fake_stop(&fs);
}
