/*
 * libtern's group status against the fake server: the GROUP_STATUS
 * request tern_group_status sends (one group, a page after a name), the
 * result object and its accessors (fields, DLQ, consumers, more), a
 * server error passed through; message trace with deliveries (the flag
 * on the wire, the delivery accessors); cluster status with the timer
 * count, and its fallback to the plain request for a server that refuses
 * the flags byte.
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
    char group[64];
    char after[64];
    uint32_t max;
    uint8_t flags;
    unsigned n;
    unsigned status_flagged;
    int refuse_flags;
} seen;

static const struct proto_status_consumer cons[2] = {{0x100000001ull, 3},
                                                     {0x200000001ull, 1}};

static void answer_status(struct tern_wbuf *w, uint64_t id)
{
    struct proto_group_status s = {
        .group = "workers",
        .group_len = 7,
        .shared = 1,
        .end = 40,
        .committed = 10,
        .next = 14,
        .lag = 30,
        .ack_timeout_ms = 30000,
        .max_deliveries = 16,
        .window = 65536,
        .dlq = "orders-dlq-workers",
        .dlq_len = 18,
        .dlq_depth = 1,
        .in_flight = 4,
        .ready = 0,
        .oldest_deadline_ms = 1700000030000ull,
        .n_consumers = 2,
        .consumers = cons,
    };
    struct proto_group_status t = {
        .group = "zaudit",
        .group_len = 6,
        .end = 40,
        .committed = 40,
        .next = 40,
        .commit_ms = 1700000000000ull,
    };
    size_t start = proto_group_status_begin(w, id);
    proto_put_group_status(w, &s);
    proto_put_group_status(w, &t);
    cr_assert_eq(proto_group_status_end(w, start, 2, 1), 0);
}

static enum fake_action hook(struct fake_server *fs,
                             int conn,
                             const struct proto_header *h,
                             const struct proto_request *r)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    if (r->op == PROTO_OP_STATUS && r->flags != 0) {
        seen.status_flagged++;
        if (seen.refuse_flags) {
            proto_encode_error(&w, r->op, h->request_id, TERN_EMALFORMED,
                               "trailing bytes", 0, "");
        } else {
            struct proto_status st = {
                .node_id = 1,
                .role = 3,
                .leader_id = 1,
                .leader_address = fs->addr,
                .leader_address_len = (uint16_t)strlen(fs->addr),
                .transport = "tcp",
                .transport_len = 3,
                .durability = "disk",
                .durability_len = 4,
                .has_timers = 1,
                .timers_pending = 5,
                .timers_oldest_due_ms = 1700000099000ull,
            };
            proto_encode_status_resp(&w, h->request_id, &st);
        }
    } else if (r->op == PROTO_OP_GROUP_STATUS) {
        (void)snprintf(seen.queue, sizeof seen.queue, "%.*s", (int)r->queue_len,
                       r->queue);
        (void)snprintf(seen.group, sizeof seen.group, "%.*s", (int)r->group_len,
                       r->group != NULL ? r->group : "");
        (void)snprintf(seen.after, sizeof seen.after, "%.*s", (int)r->after_len,
                       r->after != NULL ? r->after : "");
        seen.max = r->max_count;
        seen.n++;
        if (r->group_len == 4) {
            proto_encode_error(&w, r->op, h->request_id, TERN_ENOTFOUND,
                               "no group nope on this queue", 0, "");
        } else {
            answer_status(&w, h->request_id);
        }
    } else if (r->op == PROTO_OP_MESSAGE_TRACE) {
        struct proto_trace t = {
            .queue_id = 1, .offset = r->offset, .batch_count = 1};
        struct proto_delivery d = {
            "workers",       7, PROTO_DELIVERY_LEASED, 2, 0x100000001ull,
            1700000030000ull};
        seen.flags = r->flags;
        size_t start = proto_trace_begin(&w, h->request_id, &t);
        if (r->flags != 0) {
            cr_assert_eq(proto_trace_end_deliveries(&w, start, 0, 0, &d, 1, 0),
                         0);
        } else {
            cr_assert_eq(proto_trace_end(&w, start, 0, 0), 0);
        }
    } else {
        tern_wbuf_free(&w);
        return FAKE_DEFAULT;
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

Test(client_group_status, status_and_accessors)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_group_status_list *l = NULL;
    struct tern_group_status g;
    uint64_t id;
    uint32_t held;
    int more = 0;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, hook), 0);
    c = client_for(fs.addr, 2000, 8);

    cr_assert_eq(tern_group_status(c, "orders", NULL, "audit", 5, &l), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_str_eq(seen.queue, "orders");
    cr_expect_str_eq(seen.group, "");
    cr_expect_str_eq(seen.after, "audit");
    cr_expect_eq(seen.max, 5);
    cr_assert_eq(tern_group_status_count(l, &more), 2);
    cr_expect_eq(more, 1);
    cr_assert_eq(tern_group_status_get(l, 0, &g), 0);
    cr_expect_str_eq(g.name, "workers");
    cr_expect_eq(g.shared, 1);
    cr_expect_eq(g.committed, 10);
    cr_expect_eq(g.next, 14);
    cr_expect_eq(g.end, 40);
    cr_expect_eq(g.lag, 30);
    cr_expect_eq(g.in_flight, 4);
    cr_expect_str_eq(g.dlq, "orders-dlq-workers");
    cr_expect_eq(g.dlq_depth, 1);
    cr_expect_eq(g.ack_timeout_ms, 30000);
    cr_expect_eq(g.oldest_deadline_ms, 1700000030000ull);
    cr_assert_eq(g.n_consumers, 2);
    cr_assert_eq(tern_group_status_consumer(l, 0, 0, &id, &held), 0);
    cr_expect(id == 0x100000001ull && held == 3);
    cr_assert_eq(tern_group_status_consumer(l, 0, 1, &id, &held), 0);
    cr_expect(id == 0x200000001ull && held == 1);
    cr_expect_eq(tern_group_status_consumer(l, 0, 2, &id, &held), TERN_EINVAL);
    cr_assert_eq(tern_group_status_get(l, 1, &g), 0);
    cr_expect_str_eq(g.name, "zaudit");
    cr_expect_eq(g.shared, 0);
    cr_expect_str_eq(g.dlq, "");
    cr_expect_eq(g.commit_ms, 1700000000000ull);
    cr_expect_eq(tern_group_status_get(l, 2, &g), TERN_EINVAL);
    tern_group_status_free(l);
    tern_group_status_free(NULL);

    l = (struct tern_group_status_list *)&seen;
    cr_expect_eq(tern_group_status(c, "orders", "nope", NULL, 0, &l),
                 TERN_ENOTFOUND);
    cr_expect_null(l);
    cr_expect_str_eq(seen.group, "nope");
    cr_expect(strstr(tern_client_errmsg(c), "no group nope") != NULL, "%s",
              tern_client_errmsg(c));
    unsigned before = seen.n;
    cr_expect_eq(tern_group_status(c, "orders", "bad name", NULL, 0, &l),
                 TERN_EBADNAME);
    cr_expect_eq(seen.n, before, "nothing was sent");
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_group_status, trace_deliveries)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_message_trace *t = NULL;
    struct tern_trace_delivery d;
    int more = 1;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, hook), 0);
    c = client_for(fs.addr, 2000, 8);

    cr_assert_eq(
        tern_message_trace_ex(c, "orders", 12, TERN_TRACE_DELIVERIES, &t), 0,
        "%s", tern_client_errmsg(c));
    cr_expect_eq(seen.flags, PROTO_TRACE_DELIVERIES);
    cr_expect_eq(tern_message_trace_has_deliveries(t), 1);
    cr_assert_eq(tern_message_trace_delivery_count(t, &more), 1);
    cr_expect_eq(more, 0);
    cr_assert_eq(tern_message_trace_delivery(t, 0, &d), 0);
    cr_expect_str_eq(d.group, "workers");
    cr_expect_eq(d.state, TERN_DELIVERY_LEASED);
    cr_expect_str_eq(tern_delivery_state_name(d.state), "leased");
    cr_expect_eq(d.count, 2);
    cr_expect_eq(d.consumer_id, 0x100000001ull);
    cr_expect_eq(d.deadline_ms, 1700000030000ull);
    cr_expect_eq(tern_message_trace_delivery(t, 1, &d), TERN_EINVAL);
    tern_message_trace_free(t);

    /* Without the flag: the old request, no deliveries. */
    cr_assert_eq(tern_message_trace(c, "orders", 12, &t), 0);
    cr_expect_eq(seen.flags, 0);
    cr_expect_eq(tern_message_trace_delivery_count(t, NULL), 0);
    cr_expect_eq(tern_message_trace_has_deliveries(t), 0);
    tern_message_trace_free(t);
    cr_expect_eq(tern_message_trace_ex(c, "orders", 12, 8, &t), TERN_EINVAL);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_group_status, cluster_status_timers_and_fallback)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_status *s = NULL;
    uint64_t pending = 0, oldest = 0;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(&fs, hook), 0);
    c = client_for(fs.addr, 2000, 8);

    cr_assert_eq(tern_cluster_status(c, fs.addr, &s), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.status_flagged, 1);
    cr_assert_eq(tern_status_timers(s, &pending, &oldest), 0);
    cr_expect_eq(pending, 5);
    cr_expect_eq(oldest, 1700000099000ull);
    tern_status_free(s);

    /* A server that predates the tail refuses the flags byte: the call
     * asks again without it. */
    seen.refuse_flags = 1;
    cr_assert_eq(tern_cluster_status(c, fs.addr, &s), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.status_flagged, 2);
    cr_expect_eq(tern_status_node_id(s), 1);
    cr_expect_eq(tern_status_timers(s, &pending, &oldest), TERN_ENOTFOUND);
    tern_status_free(s);
    tern_client_free(c);
    fake_stop(&fs);
}
