/*
 * libtern's paged queue list against the fake server: a hook that serves
 * QUEUE_LIST pages (at most 4 queues, or the request's max_count, after
 * the request's "after" name) over 25 fixed names. tern_queue_list walks
 * every page; tern_queue_list_page returns one page and the more flag; a
 * server whose page does not advance is reported, not looped on.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

#define N_NAMES   25
#define PAGE_SIZE 4

static int n_list_requests;
static int stuck; /* answer every page with the first name, more = 1 */

static void name_of(int i, char *buf, size_t size)
{
    (void)snprintf(buf, size, "queue-%02d", i);
}

static enum fake_action pages_hook(struct fake_server *fs,
                                   int conn,
                                   const struct proto_header *h,
                                   const struct proto_request *r)
{
    struct proto_queue_info qi[N_NAMES];
    char names[N_NAMES][16];
    uint32_t max = PAGE_SIZE;
    uint32_t n = 0;
    int i = 0;
    struct tern_wbuf w;

    if (r->op != PROTO_OP_QUEUE_LIST) {
        return FAKE_DEFAULT;
    }
    n_list_requests++;
    cr_assert_eq(r->paged, 1, "libtern sends paged requests");
    if (r->max_count > 0 && r->max_count < max) {
        max = r->max_count;
    }
    for (int k = 0; k < N_NAMES; k++) {
        name_of(k, names[k], sizeof names[k]);
    }
    if (!stuck) {
        while (i < N_NAMES && r->after_len > 0 &&
               strncmp(names[i], r->after, r->after_len) <= 0) {
            i++;
        }
    }
    for (; i < N_NAMES && n < max; i++, n++) {
        qi[n].name = names[i];
        qi[n].name_len = (uint16_t)strlen(names[i]);
        qi[n].start_offset = 0;
        qi[n].next_offset = (uint64_t)i;
    }
    tern_wbuf_init(&w);
    proto_encode_queue_list_page_resp(&w, h->request_id, qi, n,
                                      stuck || i < N_NAMES);
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(client, queue_list_walks_every_page)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_queue_list *l;
    char want[16];
    n_list_requests = 0;
    stuck = 0;
    cr_assert_eq(fake_start(&fs, pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_assert_eq(tern_queue_list(c, &l), 0);
    cr_assert_eq(tern_queue_list_count(l), N_NAMES);
    for (int i = 0; i < N_NAMES; i++) {
        name_of(i, want, sizeof want);
        cr_expect_str_eq(tern_queue_list_name(l, (size_t)i), want);
        cr_expect_eq(tern_queue_list_next_offset(l, (size_t)i), (uint64_t)i);
    }
    cr_expect_eq(n_list_requests, (N_NAMES + PAGE_SIZE - 1) / PAGE_SIZE);
    tern_queue_list_free(l);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, queue_list_one_page)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_queue_list *l;
    int more = -1;
    stuck = 0;
    cr_assert_eq(fake_start(&fs, pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_assert_eq(tern_queue_list_page(c, "queue-20", 3, &l, &more), 0);
    cr_assert_eq(tern_queue_list_count(l), 3);
    cr_expect_str_eq(tern_queue_list_name(l, 0), "queue-21");
    cr_expect_str_eq(tern_queue_list_name(l, 2), "queue-23");
    cr_expect_eq(more, 1);
    tern_queue_list_free(l);
    cr_assert_eq(tern_queue_list_page(c, "queue-23", 0, &l, &more), 0);
    cr_assert_eq(tern_queue_list_count(l), 1);
    cr_expect_str_eq(tern_queue_list_name(l, 0), "queue-24");
    cr_expect_eq(more, 0);
    tern_queue_list_free(l);
    cr_expect_eq(tern_queue_list_page(c, "bad name", 0, &l, &more),
                 TERN_EBADNAME);
    cr_expect_null(l);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, queue_list_page_must_advance)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_queue_list *l = NULL;
    n_list_requests = 0;
    stuck = 1;
    cr_assert_eq(fake_start(&fs, pages_hook), 0);
    c = client_for(fs.addr, 3000, 8);
    cr_expect_eq(tern_queue_list(c, &l), TERN_EMALFORMED);
    cr_expect_null(l);
    cr_expect_leq(n_list_requests, 2);
    tern_client_free(c);
    fake_stop(&fs);
}
