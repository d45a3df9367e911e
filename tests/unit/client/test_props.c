/*
 * libtern's message properties against the fake server: the properties
 * block tern_produce_messages puts on the wire (and that a batch without
 * properties is the plain PRODUCE), the limits refused before anything is
 * sent, the tag filter and properties flag of tern_fetch_ex and
 * tern_group_fetch_ex, the accessors of a fetched message with
 * properties (key, tag, headers, timestamps, id), and the MESSAGE_GET
 * calls (offset, id, key).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* What the hook saw and answers with (server thread, fs->mu held). */
static struct
{
    uint8_t props[2][512]; /* the blocks of the last PRODUCE's messages */
    uint32_t props_len[2];
    int produce_had_tail;
    uint8_t fetch_flags;
    char tags[4][80];
    int n_tags;
    uint8_t get_by;
    uint64_t get_queue_id;
    uint64_t get_offset;
    char get_key[300];
} seen;

static enum fake_action props_hook(struct fake_server *fs,
                                   int conn,
                                   const struct proto_header *h,
                                   const struct proto_request *r)
{
    struct tern_wbuf w;
    size_t pos = 0;
    if (r->op == PROTO_OP_PRODUCE) {
        struct proto_msg m;
        seen.produce_had_tail = r->props_len > 0;
        for (int i = 0; i < 2 && proto_next_props(r, &pos, &m); i++) {
            seen.props_len[i] = m.len;
            memcpy(seen.props[i], m.data, m.len < 512 ? m.len : 512);
        }
        return FAKE_DEFAULT;
    }
    if (r->op == PROTO_OP_FETCH || r->op == PROTO_OP_GROUP_FETCH) {
        const char *t;
        uint8_t tl;
        seen.fetch_flags = r->flags;
        seen.n_tags = 0;
        while (seen.n_tags < 4 && proto_next_tag(r, &pos, &t, &tl)) {
            (void)snprintf(seen.tags[seen.n_tags], sizeof seen.tags[0], "%.*s",
                           (int)tl, t);
            seen.n_tags++;
        }
        if ((r->flags & PROTO_FETCH_PROPS) == 0) {
            return FAKE_DEFAULT;
        }
        /* Answer message 1 only (as if 0 had been filtered), with the
         * second block seen, and next_offset 2. */
        struct proto_fetched_msg fm = {1, 777,           "two",
                                       3, seen.props[1], seen.props_len[1]};
        tern_wbuf_init(&w);
        proto_encode_fetch_props_resp(&w, r->op, h->request_id, 2, 2, &fm, 1,
                                      0xabcdef);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    }
    if (r->op == PROTO_OP_MESSAGE_GET) {
        seen.get_by = r->get_by;
        seen.get_queue_id = r->queue_id;
        seen.get_offset = r->offset;
        (void)snprintf(seen.get_key, sizeof seen.get_key, "%.*s",
                       (int)r->key_len, (const char *)r->key);
        struct proto_fetched_msg fm[2] = {
            {4, 900, "four", 4, seen.props[0], seen.props_len[0]},
            {1, 800, "one", 3, NULL, 0},
        };
        tern_wbuf_init(&w);
        proto_encode_message_get_resp(&w, h->request_id, 0xabcdef, fm,
                                      r->get_by == PROTO_GET_KEY ? 2 : 1);
        fake_send(fs, conn, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}

static void produce_two(struct tern_client *c)
{
    static const struct tern_header hd[2] = {{"trace", "t-1", 3},
                                             {"empty", "", 0}};
    struct tern_message m[2];
    memset(m, 0, sizeof m);
    m[0].data = "one";
    m[0].len = 3;
    m[0].key = "order-9";
    m[0].key_len = 7;
    m[0].tag = "paid";
    m[0].headers = hd;
    m[0].n_headers = 2;
    m[0].producer_ts_ms = 123456;
    m[1].data = "two";
    m[1].len = 3;
    m[1].tag = "refund";
    uint64_t base = 99;
    cr_assert_eq(tern_produce_messages(c, "q", m, 2, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0);
}

Test(client_props, produce_fetch_and_accessors)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_fetch_result *r = NULL;
    struct tern_message_props p;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, props_hook), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    produce_two(c);
    cr_expect(seen.produce_had_tail);
    /* block 0: version 1, flags 0, ts, key_len 7, tag_len 4, 2 headers */
    cr_assert_geq(seen.props_len[0], 14);
    cr_expect_eq(seen.props[0][0], 1);
    cr_expect_eq(tern_get_u64(seen.props[0] + 2), 123456);
    cr_expect_eq(tern_get_u16(seen.props[0] + 10), 7);
    cr_expect_eq(seen.props[0][12], 4);
    cr_expect_eq(seen.props[0][13], 2);
    cr_expect_eq(seen.props_len[0],
                 14 + 7 + 4 + (1 + 5 + 2 + 3) + (1 + 5 + 2 + 0));
    /* block 1: the client's clock as producer timestamp */
    cr_expect_gt(tern_get_u64(seen.props[1] + 2), 1600000000000ull);

    struct tern_fetch_options o = {10, 0, 0, "paid || refund", 1};
    cr_assert_eq(tern_fetch_ex(c, "q", 0, &o, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.fetch_flags,
                 PROTO_FETCH_LEADER | PROTO_FETCH_PROPS | PROTO_FETCH_TAGS);
    cr_assert_eq(seen.n_tags, 2);
    cr_expect_str_eq(seen.tags[0], "paid");
    cr_expect_str_eq(seen.tags[1], "refund");
    cr_assert_eq(tern_fetch_result_count(r), 1);
    cr_expect_eq(tern_fetch_result_next_offset(r), 2);
    cr_assert_eq(tern_fetch_result_props(r, 0, &p), 0);
    cr_expect_eq(p.append_ts_ms, 777);
    cr_expect(p.tag_len == 6 && memcmp(p.tag, "refund", 6) == 0);
    cr_expect_eq(p.key_len, 0);
    cr_expect_eq(p.n_headers, 0);
    cr_expect_str_eq(p.id, "0000000000abcdef0000000000000001");
    cr_expect_eq(tern_fetch_result_props(r, 1, &p), TERN_EINVAL);
    tern_fetch_result_free(r);

    /* group fetch with a filter, without properties */
    struct tern_fetch_options g = {10, 0, 0, "refund", 0};
    cr_assert_eq(tern_group_fetch_ex(c, "q", "grp", &g, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.fetch_flags, PROTO_FETCH_TAGS | PROTO_GROUP_FETCH_SKIPPED,
                 "a group fetch asks for the skip tail");
    cr_expect_eq(seen.n_tags, 1);
    cr_assert_eq(tern_fetch_result_props(r, 0, &p), 0);
    cr_expect_str_eq(p.id, "", "no queue id without properties");
    tern_fetch_result_free(r);

    /* bad filters are refused before anything is sent */
    int before = fake_n_requests(&fs);
    struct tern_fetch_options bad = {10, 0, 0, "a | b", 0};
    cr_expect_eq(tern_fetch_ex(c, "q", 0, &bad, &r), TERN_EINVAL);
    bad.tags = "a || b c";
    cr_expect_eq(tern_fetch_ex(c, "q", 0, &bad, &r), TERN_EINVAL);
    bad.tags = "a||a||a||a||a||a||a||a||a||a||a||a||a||a||a||a||a";
    cr_expect_eq(tern_fetch_ex(c, "q", 0, &bad, &r), TERN_EINVAL);
    cr_expect_eq(fake_n_requests(&fs), before);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_props, message_get_calls)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_fetch_result *r = NULL;
    struct tern_message_props p;
    const char *name;
    const void *value;
    size_t nl, vl;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, props_hook), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    produce_two(c);

    cr_assert_eq(tern_message_get_key(c, "q", "order-9", 7, 5, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.get_by, PROTO_GET_KEY);
    cr_expect_str_eq(seen.get_key, "order-9");
    cr_assert_eq(tern_fetch_result_count(r), 2);
    cr_assert_eq(tern_fetch_result_props(r, 0, &p), 0);
    cr_expect_eq(p.append_ts_ms, 900);
    cr_expect_eq(p.producer_ts_ms, 123456);
    cr_expect(p.key_len == 7 && memcmp(p.key, "order-9", 7) == 0);
    cr_expect_eq(p.n_headers, 2);
    cr_expect_str_eq(p.id, "0000000000abcdef0000000000000004");
    cr_assert_eq(tern_fetch_result_header(r, 0, 0, &name, &nl, &value, &vl), 0);
    cr_expect(nl == 5 && memcmp(name, "trace", 5) == 0);
    cr_expect(vl == 3 && memcmp(value, "t-1", 3) == 0);
    cr_assert_eq(tern_fetch_result_header(r, 0, 1, &name, &nl, &value, &vl), 0);
    cr_expect_eq(vl, 0);
    cr_expect_eq(tern_fetch_result_header(r, 0, 2, &name, &nl, &value, &vl),
                 TERN_EINVAL);
    cr_expect_eq(tern_fetch_result_header(r, 1, 0, &name, &nl, &value, &vl),
                 TERN_EINVAL, "message 1 has no properties");
    tern_fetch_result_free(r);

    cr_assert_eq(
        tern_message_get_id(c, "q", "0000000000ABCDEF0000000000000004", &r), 0);
    cr_expect_eq(seen.get_by, PROTO_GET_ID);
    cr_expect_eq(seen.get_queue_id, 0xabcdef);
    cr_expect_eq(seen.get_offset, 4);
    tern_fetch_result_free(r);
    cr_assert_eq(tern_message_get_offset(c, "q", 17, &r), 0);
    cr_expect_eq(seen.get_by, PROTO_GET_OFFSET);
    cr_expect_eq(seen.get_offset, 17);
    tern_fetch_result_free(r);

    cr_expect_eq(tern_message_get_id(c, "q", "xyz", &r), TERN_EINVAL);
    cr_expect_eq(
        tern_message_get_id(c, "q", "0000000000abcdef000000000000000g", &r),
        TERN_EINVAL);
    cr_expect_eq(tern_message_get_key(c, "q", "k", 1, 0, &r), TERN_EINVAL);
    cr_expect_eq(tern_message_get_key(c, "q", "k", 0, 1, &r), TERN_EINVAL);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_props, limits_refused_and_plain_batches)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_message m;
    char big[TERN_KEY_MAX + 1];
    struct tern_header hd[TERN_HEADERS_MAX + 1];
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, props_hook), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    int before = fake_n_requests(&fs);
    memset(&m, 0, sizeof m);
    m.data = "x";
    m.len = 1;
    memset(big, 'k', sizeof big);
    m.key = big;
    m.key_len = sizeof big;
    cr_expect_eq(tern_produce_messages(c, "q", &m, 1, NULL), TERN_ETOOBIG);
    cr_expect(strstr(tern_client_errmsg(c), "key") != NULL, "%s",
              tern_client_errmsg(c));
    m.key_len = 0;
    m.tag = "bad tag";
    cr_expect_eq(tern_produce_messages(c, "q", &m, 1, NULL), TERN_EINVAL);
    cr_expect(strstr(tern_client_errmsg(c), "tag") != NULL);
    m.tag = NULL;
    for (int i = 0; i <= TERN_HEADERS_MAX; i++) {
        hd[i] = (struct tern_header){"h", "v", 1};
    }
    m.headers = hd;
    m.n_headers = TERN_HEADERS_MAX + 1;
    cr_expect_eq(tern_produce_messages(c, "q", &m, 1, NULL), TERN_ETOOBIG);
    m.n_headers = 1;
    hd[0].name = "";
    cr_expect_eq(tern_produce_messages(c, "q", &m, 1, NULL), TERN_EINVAL);
    hd[0].name = "h";
    hd[0].value_len = TERN_HEADER_VALUE_MAX + 1;
    cr_expect_eq(tern_produce_messages(c, "q", &m, 1, NULL), TERN_ETOOBIG);
    cr_expect_eq(fake_n_requests(&fs), before, "nothing was sent");

    /* no properties: the plain PRODUCE (no tail) */
    m.n_headers = 0;
    cr_assert_eq(tern_produce_messages(c, "q", &m, 1, NULL), 0);
    cr_expect_eq(seen.produce_had_tail, 0);
    cr_expect_eq(fake_n_msgs(&fs), 1);
    tern_client_free(c);
    fake_stop(&fs);
}
