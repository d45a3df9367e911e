/*
 * libtern's delayed produce (tern_produce_delayed, tern_produce_at)
 * against the fake server: a hook answers PRODUCE_DELAYED as the leader
 * would (the due time it recorded) and records what the request carried.
 * Checked: the when field (a delay, or PROTO_DELAY_AT and the due time),
 * the messages, the due time handed back, a server refusal passed through
 * with its message, an answer whose count does not match (malformed), the
 * refusals that send nothing, and the (producer id, seq) pair: the same
 * on a resend, the next seq after a success, a fresh id after a failure.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

static struct
{
    int n_requests;
    uint64_t when;
    uint32_t n_msgs;
    char first[32];
    int refuse;    /* answer TERN_EINVAL naming the limit */
    int bad_count; /* answer one message fewer than sent */
    int drop;      /* close the connection instead of answering, once */
    uint64_t pid[8], seq[8]; /* the (producer id, seq) of each request */
    char key0[16];           /* the first message's key, if any */
    uint32_t n_props;        /* properties blocks that are not empty */
} seen;

#define NOW_MS 1800000000000ull

static enum fake_action delayed_hook(struct fake_server *fs,
                                     int conn,
                                     const struct proto_header *h,
                                     const struct proto_request *r)
{
    struct tern_wbuf w;
    struct proto_msg m;
    size_t pos = 0;
    uint64_t when;
    if (r->op != PROTO_OP_PRODUCE_DELAYED) {
        return FAKE_DEFAULT;
    }
    if (seen.n_requests < 8) {
        seen.pid[seen.n_requests] = r->producer_id;
        seen.seq[seen.n_requests] = r->seq;
    }
    seen.n_requests++;
    seen.when = r->time_ms;
    if (seen.drop) {
        seen.drop = 0;
        return FAKE_DROP;
    }
    seen.n_msgs = r->n_msgs;
    if (proto_next_msg(r, &pos, &m) && m.len < sizeof seen.first) {
        memcpy(seen.first, m.data, m.len);
        seen.first[m.len] = '\0';
    }
    seen.n_props = 0;
    seen.key0[0] = '\0';
    pos = 0;
    for (uint32_t i = 0; r->props_len > 0 && proto_next_props(r, &pos, &m);
         i++) {
        if (m.len == 0) {
            continue;
        }
        seen.n_props++;
        /* The block's layout is the index's; the key's bytes are in it. */
        if (i == 0 && memmem(m.data, m.len, "order-7", 7) != NULL) {
            memcpy(seen.key0, "order-7", 8);
        }
    }
    tern_wbuf_init(&w);
    when = r->time_ms & ~PROTO_DELAY_AT;
    if (seen.refuse) {
        proto_encode_error(&w, r->op, h->request_id, TERN_EINVAL,
                           "delay 9 ms > max_delay_ms 5", 0, "");
    } else {
        uint64_t due = (r->time_ms & PROTO_DELAY_AT) != 0
                           ? (when > NOW_MS ? when : NOW_MS)
                           : NOW_MS + when;
        proto_encode_produce_delayed_resp(
            &w, h->request_id, r->n_msgs - (seen.bad_count ? 1 : 0), due);
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

static struct tern_client *start(struct fake_server *fs)
{
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(fs, delayed_hook), 0);
    return client_for(fs->addr, 2000, 8);
}

static const struct tern_msg two[2] = {{"first", 5}, {"second", 6}};

Test(client_delayed, delay_and_due_time)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    uint64_t due = 0;

    cr_assert_eq(tern_produce_delayed(c, "jobs", two, 2, 10000, &due), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.when, 10000);
    cr_expect_eq(seen.n_msgs, 2);
    cr_expect_str_eq(seen.first, "first");
    cr_expect_eq(due, NOW_MS + 10000);

    cr_assert_eq(tern_produce_at(c, "jobs", two, 1, NOW_MS + 777, &due), 0);
    cr_expect_eq(seen.when, PROTO_DELAY_AT | (NOW_MS + 777));
    cr_expect_eq(seen.n_msgs, 1);
    cr_expect_eq(due, NOW_MS + 777);

    /* A time already past: the leader's "now". NULL out is allowed. */
    cr_assert_eq(tern_produce_at(c, "jobs", two, 2, 5, NULL), 0);
    cr_expect_eq(seen.when, PROTO_DELAY_AT | 5);
    cr_expect_eq(seen.n_requests, 3);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_delayed, refusals)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    uint64_t due = 1;

    cr_expect_eq(tern_produce_delayed(c, "jobs", two, 0, 1, &due), TERN_EINVAL);
    cr_expect_eq(due, 0);
    cr_expect_eq(tern_produce_delayed(c, "jobs", NULL, 1, 1, &due),
                 TERN_EINVAL);
    cr_expect_eq(tern_produce_delayed(c, "jobs", two, 1, PROTO_DELAY_AT, &due),
                 TERN_EINVAL);
    cr_expect_eq(tern_produce_at(c, "jobs", two, 1, UINT64_MAX, &due),
                 TERN_EINVAL);
    cr_expect_eq(tern_produce_delayed(c, "bad name", two, 1, 1, &due),
                 TERN_EBADNAME);
    cr_expect_eq(seen.n_requests, 0, "nothing was sent");

    seen.refuse = 1;
    cr_expect_eq(tern_produce_delayed(c, "jobs", two, 1, 9, &due), TERN_EINVAL);
    cr_expect_neq(strstr(tern_client_errmsg(c), "max_delay_ms"), NULL, "%s",
                  tern_client_errmsg(c));
    seen.refuse = 0;
    seen.bad_count = 1;
    cr_expect_eq(tern_produce_delayed(c, "jobs", two, 2, 9, &due),
                 TERN_EMALFORMED);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_delayed, dedup_pair_per_queue)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    uint64_t due = 0;

    cr_assert_eq(tern_produce_delayed(c, "jobs", two, 2, 100, &due), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_produce_delayed(c, "jobs", two, 1, 100, &due), 0);
    cr_assert_eq(seen.n_requests, 2);
    cr_expect_neq(seen.pid[0], 0);
    cr_expect_eq(seen.seq[0], 1);
    cr_expect_eq(seen.pid[1], seen.pid[0]);
    cr_expect_eq(seen.seq[1], 2);

    /* A lost answer: the resend carries the same pair. */
    seen.drop = 1;
    cr_assert_eq(tern_produce_delayed(c, "jobs", two, 1, 100, &due), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(seen.n_requests, 4);
    cr_expect_eq(seen.pid[2], seen.pid[0]);
    cr_expect_eq(seen.seq[2], 3);
    cr_expect_eq(seen.pid[3], seen.pid[0]);
    cr_expect_eq(seen.seq[3], 3);

    /* After a failure the next call takes a fresh id from seq 1. */
    seen.refuse = 1;
    cr_expect_eq(tern_produce_delayed(c, "jobs", two, 1, 9, &due), TERN_EINVAL);
    seen.refuse = 0;
    cr_assert_eq(tern_produce_delayed(c, "jobs", two, 1, 9, &due), 0);
    cr_assert_eq(seen.n_requests, 6);
    cr_expect_eq(seen.seq[4], 4);
    cr_expect_neq(seen.pid[5], 0);
    cr_expect_neq(seen.pid[5], seen.pid[0]);
    cr_expect_eq(seen.seq[5], 1);

    /* Another queue has its own sequence. */
    cr_assert_eq(tern_produce_at(c, "other", two, 1, NOW_MS, &due), 0);
    cr_expect_eq(seen.seq[6], 1);
    cr_expect_neq(seen.pid[6], 0);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_delayed, with_properties)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    uint64_t due = 0;
    struct tern_header h = {"src", "web", 3};
    struct tern_message m[2] = {
        {.data = "a", .len = 1, .key = "order-7", .key_len = 7, .tag = "paid"},
        {.data = "b", .len = 1, .headers = &h, .n_headers = 1}};

    cr_assert_eq(tern_produce_messages_delayed(c, "jobs", m, 2, 500, &due), 0,
                 "%s", tern_client_errmsg(c));
    cr_expect_eq(seen.when, 500);
    cr_expect_eq(seen.n_msgs, 2);
    cr_expect_eq(seen.n_props, 2, "both messages carry their properties");
    cr_expect_str_eq(seen.key0, "order-7");
    cr_expect_eq(due, NOW_MS + 500);
    cr_expect_neq(seen.pid[0], 0, "deduplicated as the plain ones");

    cr_assert_eq(tern_produce_messages_at(c, "jobs", m, 1, NOW_MS + 9, &due),
                 0);
    cr_expect_eq(seen.when, PROTO_DELAY_AT | (NOW_MS + 9));
    cr_expect_eq(seen.seq[1], seen.seq[0] + 1);

    /* A property over its limit is refused before anything is sent. */
    m[0].tag = "not a tag";
    cr_expect_eq(tern_produce_messages_delayed(c, "jobs", m, 1, 5, &due),
                 TERN_EINVAL);
    cr_expect_eq(seen.n_requests, 2);
    tern_client_free(c);
    fake_stop(&fs);
}
