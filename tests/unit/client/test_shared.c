/*
 * libtern's shared-group calls (tern_shared_config, tern_receive with
 * tern_fetch_result_receipt, tern_settle) against the fake server: a hook
 * answers PRODUCER_INIT (the consumer id), SHARED_CONFIG, RECEIVE and
 * SETTLE as the leader would and records what each request carried.
 * Checked: the settings mask and values on the wire, the consumer id and
 * bounds of a receive, messages and receipts handed back, the per-item
 * done / stale answer of a settle and the items sent, server refusals
 * passed through with their message, malformed answers, and the refusals
 * that send nothing.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

#define PID_BLOCK (7ull << 32)

static struct
{
    int n_init;
    int n_config;
    int n_receive;
    int n_settle;
    uint32_t mask;
    uint64_t ack_timeout_ms;
    uint32_t max_deliveries;
    uint32_t window;
    char dlq[64];
    char group[64];
    uint64_t consumer_id;
    uint32_t max_msgs;
    uint32_t wait_ms;
    uint32_t n_items;
    struct proto_settle_item items[8];
    int refuse;     /* answer TERN_EINVAL naming the mode */
    int bad_settle; /* answer one done byte fewer than items */
    int received;   /* messages to answer a RECEIVE with (0..3) */
} seen;

static enum fake_action shared_hook(struct fake_server *fs,
                                    int conn,
                                    const struct proto_header *h,
                                    const struct proto_request *r)
{
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    switch (r->op) {
    case PROTO_OP_PRODUCER_INIT:
        seen.n_init++;
        proto_encode_producer_init_resp(&w, h->request_id, PID_BLOCK);
        break;
    case PROTO_OP_SHARED_CONFIG:
        seen.n_config++;
        seen.mask = r->set_mask;
        seen.ack_timeout_ms = r->shared.ack_timeout_ms;
        seen.max_deliveries = r->shared.max_deliveries;
        seen.window = r->shared.window;
        cr_assert_lt(r->shared.dlq_len, sizeof seen.dlq);
        memcpy(seen.dlq, r->shared.dlq, r->shared.dlq_len);
        seen.dlq[r->shared.dlq_len] = '\0';
        cr_assert_lt(r->group_len, sizeof seen.group);
        memcpy(seen.group, r->group, r->group_len);
        seen.group[r->group_len] = '\0';
        if (seen.refuse) {
            proto_encode_error(&w, r->op, h->request_id, TERN_EINVAL,
                               "jobs/g is a stream group", 0, "");
        } else {
            proto_encode_empty_resp(&w, r->op, h->request_id);
        }
        break;
    case PROTO_OP_RECEIVE: {
        static const struct proto_fetched_msg m[3] = {
            {10, 1700000000001ull, "ten", 3, NULL, 0},
            {12, 1700000000002ull, "twelve", 6, NULL, 0},
            {13, 1700000000003ull, "thirteen", 8, NULL, 0},
        };
        seen.n_receive++;
        seen.consumer_id = r->consumer_id;
        seen.max_msgs = r->max_msgs;
        seen.wait_ms = r->wait_ms;
        size_t start = proto_receive_begin(&w, h->request_id, 0x1234);
        for (int i = 0; i < seen.received; i++) {
            proto_put_received(&w, &m[i], (uint32_t)(i + 1));
        }
        cr_assert_eq(proto_receive_end(&w, start, (uint32_t)seen.received), 0);
        break;
    }
    case PROTO_OP_SETTLE: {
        struct proto_settle_item it;
        uint8_t done[8];
        size_t pos = 0;
        seen.n_settle++;
        seen.n_items = 0;
        while (proto_next_settle(r, &pos, &it) && seen.n_items < 8) {
            /* Even offsets still hold their lease; odd ones are stale. */
            done[seen.n_items] = (it.offset % 2) == 0;
            seen.items[seen.n_items++] = it;
        }
        if (seen.refuse) {
            proto_encode_error(&w, r->op, h->request_id, TERN_ENOTFOUND,
                               "no shared group g of queue jobs", 0, "");
        } else {
            proto_encode_settle_resp(&w, h->request_id, done,
                                     seen.n_items - (seen.bad_settle ? 1 : 0));
        }
        break;
    }
    default:
        tern_wbuf_free(&w);
        return FAKE_DEFAULT;
    }
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

static struct tern_client *start(struct fake_server *fs)
{
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(fs, shared_hook), 0);
    return client_for(fs->addr, 2000, 8);
}

Test(client_shared, config_mask_and_values)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_shared_options o;

    cr_assert_eq(tern_shared_config(c, "jobs", "g", NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.n_config, 1);
    cr_expect_eq(seen.mask, 0, "NULL: the defaults");
    cr_expect_str_eq(seen.group, "g");
    cr_expect_str_eq(seen.dlq, "");

    memset(&o, 0, sizeof o);
    o.ack_timeout_ms = 5000;
    o.dlq = "dead";
    cr_assert_eq(tern_shared_config(c, "jobs", "g", &o), 0);
    cr_expect_eq(seen.mask,
                 PROTO_SHARED_SET_ACK_TIMEOUT | PROTO_SHARED_SET_DLQ);
    cr_expect_eq(seen.ack_timeout_ms, 5000);
    cr_expect_eq(seen.max_deliveries, 0, "outside the mask: 0");
    cr_expect_str_eq(seen.dlq, "dead");

    memset(&o, 0, sizeof o);
    o.max_deliveries = 3;
    o.window = 100;
    o.dlq = ""; /* empty: not set */
    cr_assert_eq(tern_shared_config(c, "jobs", "g", &o), 0);
    cr_expect_eq(seen.mask,
                 PROTO_SHARED_SET_MAX_DELIVERIES | PROTO_SHARED_SET_WINDOW);
    cr_expect_eq(seen.max_deliveries, 3);
    cr_expect_eq(seen.window, 100);
    cr_expect_eq(seen.ack_timeout_ms, 0);

    seen.refuse = 1;
    cr_expect_eq(tern_shared_config(c, "jobs", "g", NULL), TERN_EINVAL);
    cr_expect_neq(strstr(tern_client_errmsg(c), "stream group"), NULL, "%s",
                  tern_client_errmsg(c));
    cr_expect_eq(seen.n_config, 4);

    /* Refused before sending. */
    cr_expect_eq(tern_shared_config(c, "jobs", "bad group", NULL),
                 TERN_EBADNAME);
    o.dlq = "bad dlq";
    cr_expect_eq(tern_shared_config(c, "jobs", "g", &o), TERN_EBADNAME);
    cr_expect_eq(seen.n_config, 4, "nothing more was sent");
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_shared, receive_messages_and_receipts)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_fetch_result *r = NULL;
    struct tern_receipt rc;
    uint64_t off = 0, ts = 0;
    const void *data;
    size_t len;

    seen.received = 3;
    cr_assert_eq(tern_receive(c, "jobs", "g", 16, 250, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.n_init, 1, "the consumer id came from the leader");
    cr_expect_eq(seen.consumer_id, PID_BLOCK);
    cr_expect_eq(seen.max_msgs, 16);
    cr_expect_eq(seen.wait_ms, 250);
    cr_assert_eq(tern_fetch_result_count(r), 3);
    cr_assert_eq(tern_fetch_result_get(r, 1, &off, &ts, &data, &len), 0);
    cr_expect_eq(off, 12);
    cr_expect_eq(ts, 1700000000002ull);
    cr_assert_eq(len, 6);
    cr_expect_eq(memcmp(data, "twelve", 6), 0);
    cr_assert_eq(tern_fetch_result_receipt(r, 0, &rc), 0);
    cr_expect_eq(rc.offset, 10);
    cr_expect_eq(rc.count, 1);
    cr_assert_eq(tern_fetch_result_receipt(r, 2, &rc), 0);
    cr_expect_eq(rc.offset, 13);
    cr_expect_eq(rc.count, 3);
    cr_expect_eq(tern_fetch_result_receipt(r, 3, &rc), TERN_EINVAL,
                 "out of range");
    tern_fetch_result_free(r);

    /* Nothing due: an empty answer; the id is asked once per client. */
    seen.received = 0;
    cr_assert_eq(tern_receive(c, "jobs", "g", 1, 0, &r), 0);
    cr_expect_eq(tern_fetch_result_count(r), 0);
    cr_expect_eq(tern_fetch_result_receipt(r, 0, &rc), TERN_EINVAL);
    tern_fetch_result_free(r);
    cr_expect_eq(seen.n_init, 1);
    cr_expect_eq(seen.n_receive, 2);

    /* A plain fetch result has no receipts. */
    static const struct tern_msg one = {"plain", 5};
    create_queue(c, "jobs");
    cr_assert_eq(tern_produce(c, "jobs", &one, 1, NULL), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_fetch(c, "jobs", 0, 10, 1 << 20, 0, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_assert_eq(tern_fetch_result_count(r), 1);
    cr_expect_eq(tern_fetch_result_receipt(r, 0, &rc), TERN_EINVAL);
    tern_fetch_result_free(r);

    /* Bounds refused before sending. */
    cr_expect_eq(tern_receive(c, "jobs", "g", 0, 0, &r), TERN_EINVAL);
    cr_expect_null(r);
    cr_expect_eq(tern_receive(c, "jobs", "g", 1025, 0, &r), TERN_EINVAL);
    cr_expect_eq(seen.n_receive, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_shared, settle_items_done_and_stale)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_settle_item it[4];

    memset(it, 0, sizeof it);
    it[0] = (struct tern_settle_item){{10, 1}, TERN_SETTLE_ACK, 0, 9};
    it[1] = (struct tern_settle_item){{11, 2}, TERN_SETTLE_NACK, 1500, 9};
    it[2] = (struct tern_settle_item){{12, 1}, TERN_SETTLE_EXTEND, 30000, 9};
    it[3] = (struct tern_settle_item){{13, 4}, TERN_SETTLE_RELEASE, 0, 9};
    cr_assert_eq(tern_settle(c, "jobs", "g", it, 4), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.n_settle, 1, "one request for the batch");
    cr_assert_eq(seen.n_items, 4);
    cr_expect_eq(seen.items[0].offset, 10);
    cr_expect_eq(seen.items[0].count, 1);
    cr_expect_eq(seen.items[0].action, PROTO_SETTLE_ACK);
    cr_expect_eq(seen.items[1].action, PROTO_SETTLE_NACK);
    cr_expect_eq(seen.items[1].delay_ms, 1500);
    cr_expect_eq(seen.items[2].action, PROTO_SETTLE_EXTEND);
    cr_expect_eq(seen.items[2].delay_ms, 30000);
    cr_expect_eq(seen.items[3].count, 4);
    cr_expect_eq(seen.items[3].action, PROTO_SETTLE_RELEASE);
    cr_expect_eq(it[0].done, 1);
    cr_expect_eq(it[1].done, 0, "stale");
    cr_expect_eq(it[2].done, 1);
    cr_expect_eq(it[3].done, 0);

    /* A refusal passes through with its message. */
    seen.refuse = 1;
    cr_expect_eq(tern_settle(c, "jobs", "g", it, 1), TERN_ENOTFOUND);
    cr_expect_neq(strstr(tern_client_errmsg(c), "no shared group"), NULL, "%s",
                  tern_client_errmsg(c));
    seen.refuse = 0;

    /* An answer with fewer done bytes than items is malformed, and no
     * item is reported done (earlier values are cleared). */
    seen.bad_settle = 1;
    it[0].done = it[1].done = 7;
    cr_expect_eq(tern_settle(c, "jobs", "g", it, 2), TERN_EMALFORMED);
    cr_expect_eq(it[0].done, 0);
    cr_expect_eq(it[1].done, 0);
    seen.bad_settle = 0;

    /* Refused before sending: count, order, action, delay. */
    int sent = seen.n_settle;
    cr_expect_eq(tern_settle(c, "jobs", "g", it, 0), TERN_EINVAL);
    cr_expect_eq(tern_settle(c, "jobs", "g", NULL, 1), TERN_EINVAL);
    struct tern_settle_item *many = calloc(1025, sizeof *many);
    cr_assert_not_null(many);
    cr_expect_eq(tern_settle(c, "jobs", "g", many, 1025), TERN_EINVAL);
    free(many);
    struct tern_settle_item bad[2] = {{{5, 1}, TERN_SETTLE_ACK, 0, 0},
                                      {{5, 1}, TERN_SETTLE_ACK, 0, 0}};
    cr_expect_eq(tern_settle(c, "jobs", "g", bad, 2), TERN_EINVAL,
                 "offsets must increase");
    bad[1].receipt.offset = 6;
    bad[1].action = 9;
    cr_expect_eq(tern_settle(c, "jobs", "g", bad, 2), TERN_EINVAL,
                 "unknown action");
    bad[1].action = TERN_SETTLE_ACK;
    bad[1].delay_ms = 10;
    cr_expect_eq(tern_settle(c, "jobs", "g", bad, 2), TERN_EINVAL,
                 "a delay on an ack");
    cr_expect_eq(seen.n_settle, sent, "nothing more was sent");
    tern_client_free(c);
    fake_stop(&fs);
}
