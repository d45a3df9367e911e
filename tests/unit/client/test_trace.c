/*
 * libtern's message trace against the fake server: the MESSAGE_TRACE
 * request tern_message_trace sends, the result object and its accessors
 * (fields, id, key, tag, groups, more), the server's error passed through
 * with its message (TERN_EOFFSET), a malformed answer refused, and a bad
 * queue name refused before anything is sent.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* What the hook saw (server thread, fs->mu held). */
static struct
{
    char queue[64];
    uint64_t offset;
    unsigned n;
} seen;

static enum fake_action trace_hook(struct fake_server *fs,
                                   int conn,
                                   const struct proto_header *h,
                                   const struct proto_request *r)
{
    struct tern_wbuf w;
    if (r->op != PROTO_OP_MESSAGE_TRACE) {
        return FAKE_DEFAULT;
    }
    (void)snprintf(seen.queue, sizeof seen.queue, "%.*s", (int)r->queue_len,
                   r->queue);
    seen.offset = r->offset;
    seen.n++;
    tern_wbuf_init(&w);
    if (r->offset == 3) {
        proto_encode_error(&w, PROTO_OP_MESSAGE_TRACE, h->request_id,
                           TERN_EOFFSET,
                           "offset 3 is below the queue's first offset 10 "
                           "(trimmed by retention)",
                           0, "");
    } else if (r->offset == 4) {
        /* a malformed answer: a position past its batch */
        struct proto_trace t = {.offset = 4, .batch_pos = 5, .batch_count = 1};
        size_t start = proto_trace_begin(&w, h->request_id, &t);
        (void)proto_trace_end(&w, start, 0, 0);
    } else {
        struct proto_trace t = {
            .queue_id = 0xabcdef,
            .offset = r->offset,
            .append_ms = 1700000000123ull,
            .producer_id = 0x100000001ull,
            .seq = 6,
            .batch_pos = 1,
            .batch_count = 2,
            .len = 11,
            .raft_index = 812,
            .term = 3,
            .key = "order-9",
            .key_len = 7,
            .tag = "paid",
            .tag_len = 4,
        };
        struct proto_trace_group g[2] = {
            {"audit", 5, r->offset + 1, 1700000000200ull, 815},
            {"billing", 7, r->offset + 9, 0, 0},
        };
        size_t start = proto_trace_begin(&w, h->request_id, &t);
        proto_put_trace_group(&w, &g[0]);
        proto_put_trace_group(&w, &g[1]);
        cr_assert_eq(proto_trace_end(&w, start, 2, 1), 0);
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(client_trace, trace_and_accessors)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_message_trace *t = NULL;
    struct tern_trace_info info;
    struct tern_trace_group g;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, trace_hook), 0);
    c = client_for(fs.addr, 2000, 8);

    cr_assert_eq(tern_message_trace(c, "orders", 41, &t), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_str_eq(seen.queue, "orders");
    cr_expect_eq(seen.offset, 41);
    cr_assert_not_null(t);
    tern_message_trace_info(t, &info);
    cr_expect_eq(info.offset, 41);
    cr_expect_str_eq(info.id, "0000000000abcdef0000000000000029");
    cr_expect_eq(info.append_ms, 1700000000123ull);
    cr_expect_eq(info.producer_id, 0x100000001ull);
    cr_expect_eq(info.seq, 6);
    cr_expect_eq(info.batch_pos, 1);
    cr_expect_eq(info.batch_count, 2);
    cr_expect_eq(info.len, 11);
    cr_expect_eq(info.raft_index, 812);
    cr_expect_eq(info.term, 3);
    cr_expect(info.key_len == 7 && memcmp(info.key, "order-9", 7) == 0);
    cr_expect(info.tag_len == 4 && memcmp(info.tag, "paid", 4) == 0);
    cr_expect_eq(info.n_groups, 2);
    cr_expect_eq(info.more_groups, 1);
    cr_assert_eq(tern_message_trace_group(t, 0, &g), 0);
    cr_expect_str_eq(g.name, "audit");
    cr_expect_eq(g.committed_offset, 42);
    cr_expect_eq(g.commit_ms, 1700000000200ull);
    cr_expect_eq(g.commit_index, 815);
    cr_assert_eq(tern_message_trace_group(t, 1, &g), 0);
    cr_expect_str_eq(g.name, "billing");
    cr_expect_eq(g.committed_offset, 50);
    cr_expect_eq(g.commit_index, 0, "unknown");
    cr_expect_eq(tern_message_trace_group(t, 2, &g), TERN_EINVAL);
    tern_message_trace_free(t);
    tern_message_trace_free(NULL);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_trace, errors)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_message_trace *t = (struct tern_message_trace *)&seen;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, trace_hook), 0);
    c = client_for(fs.addr, 2000, 8);

    cr_expect_eq(tern_message_trace(c, "orders", 3, &t), TERN_EOFFSET);
    cr_expect_null(t);
    cr_expect(strstr(tern_client_errmsg(c), "first offset 10") != NULL, "%s",
              tern_client_errmsg(c));

    cr_expect_eq(tern_message_trace(c, "orders", 4, &t), TERN_EMALFORMED);
    cr_expect_null(t);

    unsigned before = seen.n;
    cr_expect_eq(tern_message_trace(c, "bad name", 1, &t), TERN_EBADNAME);
    cr_expect_null(t);
    cr_expect(strstr(tern_client_errmsg(c), "bad name") != NULL, "%s",
              tern_client_errmsg(c));
    cr_expect_eq(seen.n, before, "nothing was sent");
    tern_client_free(c);
    fake_stop(&fs);
}
