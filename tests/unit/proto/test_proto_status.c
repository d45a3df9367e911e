/* Unit tests of group status in proto/: the GROUP_STATUS request (one
 * group, every group paged) and its answer of versioned records with
 * consumers, a later record version with extra fields, the decoder's
 * refusals (every truncation, bad more byte, too many consumers); the
 * MESSAGE_TRACE request flags and the delivery tail of its answer, and an
 * answer without the tail still decoding; the STATUS request flags and
 * the answer's tail in its versions (timers; the server version). */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <proto.h>

static const uint8_t *parse(const struct tern_wbuf *w, struct proto_header *h)
{
    const void *body = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &body),
        0);
    cr_assert_eq(PROTO_HEADER_SIZE + h->body_len, w->len);
    return body;
}

Test(proto_status, group_status_request)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_group_status(&w, 3, "orders", "workers", NULL, 0),
                 0);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_GROUP_STATUS);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect(r.queue_len == 6 && memcmp(r.queue, "orders", 6) == 0);
    cr_expect(r.group_len == 7 && memcmp(r.group, "workers", 7) == 0);
    cr_expect_eq(r.after_len, 0);
    for (uint32_t cut = 0; cut < h.body_len; cut++) {
        cr_expect_neq(proto_decode_request(h.op, body, cut, &r), 0);
    }
    w.len = 0;
    cr_assert_eq(proto_encode_group_status(&w, 3, "orders", "", "g1", 50), 0);
    body = parse(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.group_len, 0);
    cr_expect(r.after_len == 2 && memcmp(r.after, "g1", 2) == 0);
    cr_expect_eq(r.max_count, 50);
    w.len = 0;
    cr_expect_eq(
        proto_encode_group_status(&w, 3, "orders", "bad name", NULL, 0),
        TERN_EBADNAME);
    tern_wbuf_free(&w);
}

static struct proto_status_consumer consumers[2] = {{7, 5}, {9, 1}};

static void put_records(struct tern_wbuf *w, size_t *start, int more)
{
    struct proto_group_status s = {
        .group = "workers",
        .group_len = 7,
        .shared = 1,
        .start = 3,
        .end = 100,
        .committed = 10,
        .next = 20,
        .lag = 90,
        .ack_timeout_ms = 30000,
        .max_deliveries = 16,
        .window = 65536,
        .dlq = "orders-dlq-workers",
        .dlq_len = 18,
        .dlq_depth = 2,
        .in_flight = 6,
        .ready = 4,
        .oldest_deadline_ms = 1234,
        .partial = 1,
        .others_held = 8,
        .n_consumers = 2,
        .consumers = consumers,
    };
    struct proto_group_status t = {
        .group = "audit",
        .group_len = 5,
        .start = 3,
        .end = 100,
        .committed = 50,
        .next = 50,
        .lag = 50,
        .commit_ms = 99,
        .claim_holder = 77,
        .claim_until_ms = 1800000000000ull,
    };
    *start = proto_group_status_begin(w, 8);
    size_t before = w->len;
    proto_put_group_status(w, &s);
    cr_assert_eq(w->len - before, proto_group_status_size(&s));
    proto_put_group_status(w, &t);
    cr_assert_eq(proto_group_status_end(w, *start, 2, more), 0);
}

Test(proto_status, group_status_answer_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_group_status_resp a;
    struct proto_group_status g;
    struct proto_status_consumer c;
    size_t start, pos = 0;
    tern_wbuf_init(&w);
    put_records(&w, &start, 1);
    const uint8_t *body = parse(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_GROUP_STATUS | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_group_status_resp(body, h.body_len, &a), 0);
    cr_expect_eq(a.n, 2);
    cr_expect_eq(a.more, 1);
    cr_assert(proto_next_group_status(&a, &pos, &g));
    cr_expect_eq(g.version, 2);
    cr_expect(g.group_len == 7 && memcmp(g.group, "workers", 7) == 0);
    cr_expect_eq(g.shared, 1);
    cr_expect_eq(g.start, 3);
    cr_expect_eq(g.end, 100);
    cr_expect_eq(g.committed, 10);
    cr_expect_eq(g.next, 20);
    cr_expect_eq(g.lag, 90);
    cr_expect_eq(g.ack_timeout_ms, 30000);
    cr_expect_eq(g.max_deliveries, 16);
    cr_expect_eq(g.window, 65536);
    cr_expect(g.dlq_len == 18 && memcmp(g.dlq, "orders-dlq-workers", 18) == 0);
    cr_expect_eq(g.dlq_depth, 2);
    cr_expect_eq(g.in_flight, 6);
    cr_expect_eq(g.ready, 4);
    cr_expect_eq(g.oldest_deadline_ms, 1234);
    cr_expect_eq(g.partial, 1);
    cr_expect_eq(g.others_held, 8);
    cr_assert_eq(g.n_consumers, 2);
    proto_status_consumer(&g, 0, &c);
    cr_expect(c.id == 7 && c.held == 5);
    proto_status_consumer(&g, 1, &c);
    cr_expect(c.id == 9 && c.held == 1);
    cr_assert(proto_next_group_status(&a, &pos, &g));
    cr_expect(g.group_len == 5 && memcmp(g.group, "audit", 5) == 0);
    cr_expect_eq(g.shared, 0);
    cr_expect_eq(g.commit_ms, 99);
    cr_expect_eq(g.dlq_len, 0);
    cr_expect_eq(g.n_consumers, 0);
    cr_expect_eq(g.claim_holder, 77, "version 2: the claim");
    cr_expect_eq(g.claim_until_ms, 1800000000000ull);
    cr_expect_not(proto_next_group_status(&a, &pos, &g));
    for (uint32_t cut = 0; cut < h.body_len; cut++) {
        cr_expect_eq(proto_decode_group_status_resp(body, cut, &a),
                     TERN_EMALFORMED, "cut %u", cut);
    }
    /* A bad more byte. */
    cr_assert_gt(h.body_len, 0);
    uint8_t *copy = malloc(h.body_len);
    memcpy(copy, body, h.body_len);
    copy[h.body_len - 1] = 2;
    cr_expect_eq(proto_decode_group_status_resp(copy, h.body_len, &a),
                 TERN_EMALFORMED);
    free(copy);
    tern_wbuf_free(&w);
}

/* A record of a later version: its extra fields are skipped; version 2
 * with extra bytes is refused, and so is version 1 with the claim's. */
Test(proto_status, later_record_version)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_group_status_resp a;
    struct proto_group_status g;
    size_t start, pos = 0;
    tern_wbuf_init(&w);
    put_records(&w, &start, 0);
    const uint8_t *body = parse(&w, &h);
    /* Rebuild the body with the first record grown by 9 bytes. */
    uint32_t rec_len = tern_get_u32(body + 4);
    size_t nlen = h.body_len + 9;
    uint8_t *b = calloc(1, nlen);
    memcpy(b, body, 4);
    tern_put_u32(b + 4, rec_len + 9);
    memcpy(b + 8, body + 8, rec_len);
    memcpy(b + 8 + rec_len + 9, body + 8 + rec_len, h.body_len - 8 - rec_len);
    cr_expect_eq(proto_decode_group_status_resp(b, nlen, &a), TERN_EMALFORMED);
    b[8] = 1;
    cr_expect_eq(proto_decode_group_status_resp(b, nlen, &a), TERN_EMALFORMED);
    b[8] = 3; /* the version */
    cr_assert_eq(proto_decode_group_status_resp(b, nlen, &a), 0);
    cr_assert(proto_next_group_status(&a, &pos, &g));
    cr_expect_eq(g.version, 3);
    cr_expect_eq(g.lag, 90);
    cr_assert(proto_next_group_status(&a, &pos, &g));
    cr_expect(g.group_len == 5 && memcmp(g.group, "audit", 5) == 0);
    free(b);
    tern_wbuf_free(&w);
}

Test(proto_status, trace_deliveries)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    struct proto_trace t = {.queue_id = 1, .offset = 4, .batch_count = 1};
    struct proto_trace out;
    struct proto_delivery d[2] = {
        {"g", 1, PROTO_DELIVERY_LEASED, 2, 77, 5000},
        {"h", 1, PROTO_DELIVERY_SETTLED, 0, 0, 0},
    };
    struct proto_delivery x;
    size_t pos = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_message_trace_flags(&w, 2, "q", 4, PROTO_TRACE_DELIVERIES),
        0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, PROTO_TRACE_DELIVERIES);
    cr_expect_eq(r.offset, 4);
    w.len = 0;
    cr_expect_eq(proto_encode_message_trace_flags(&w, 2, "q", 4, 2),
                 TERN_EINVAL);
    /* Flags 0 are the old request's bytes; an explicit 0 byte is refused. */
    w.len = 0;
    cr_assert_eq(proto_encode_message_trace_flags(&w, 2, "q", 4, 0), 0);
    body = parse(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, 0);
    uint8_t zero[32];
    memcpy(zero, body, h.body_len);
    zero[h.body_len] = 0;
    cr_expect_eq(proto_decode_request(h.op, zero, h.body_len + 1, &r),
                 TERN_EMALFORMED);

    w.len = 0;
    size_t start = proto_trace_begin(&w, 2, &t);
    cr_assert_eq(proto_trace_end_deliveries(&w, start, 0, 0, d, 2, 1), 0);
    body = parse(&w, &h);
    cr_assert_eq(proto_decode_message_trace_resp(body, h.body_len, &out), 0);
    cr_expect_eq(out.has_deliveries, 1);
    cr_expect_eq(out.n_deliveries, 2);
    cr_expect_eq(out.deliveries_more, 1);
    cr_assert(proto_next_delivery(&out, &pos, &x));
    cr_expect(x.group_len == 1 && x.group[0] == 'g');
    cr_expect_eq(x.state, PROTO_DELIVERY_LEASED);
    cr_expect_eq(x.count, 2);
    cr_expect_eq(x.consumer_id, 77);
    cr_expect_eq(x.deadline_ms, 5000);
    cr_assert(proto_next_delivery(&out, &pos, &x));
    cr_expect_eq(x.state, PROTO_DELIVERY_SETTLED);
    cr_expect_not(proto_next_delivery(&out, &pos, &x));
    size_t tail = 1 + 4 + 2 * proto_delivery_size(1) + 1;
    for (size_t cut = h.body_len - tail + 1; cut < h.body_len; cut++) {
        cr_expect_eq(proto_decode_message_trace_resp(body, cut, &out),
                     TERN_EMALFORMED, "cut %zu", cut);
    }
    /* Without the tail (what an older server sends) it still decodes. */
    cr_assert_eq(proto_decode_message_trace_resp(body, h.body_len - tail, &out),
                 0);
    cr_expect_eq(out.has_deliveries, 0);
    cr_expect_eq(out.n_deliveries, 0);
    tern_wbuf_free(&w);
}

Test(proto_status, status_timers)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    struct proto_status st, out;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_status_req(&w, 1, PROTO_STATUS_TIMERS), 0);
    const uint8_t *body = parse(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, PROTO_STATUS_TIMERS);
    w.len = 0;
    cr_expect_eq(proto_encode_status_req(&w, 1, 4), TERN_EINVAL);
    w.len = 0;
    cr_assert_eq(proto_encode_status_req(&w, 1, 0), 0);
    cr_expect_eq(w.len, PROTO_HEADER_SIZE); /* the old empty request */

    memset(&st, 0, sizeof st);
    st.node_id = 1;
    st.transport = "tcp";
    st.transport_len = 3;
    st.durability = "disk";
    st.durability_len = 4;
    st.leader_address = "";
    st.has_timers = 1;
    st.timers_pending = 12;
    st.timers_oldest_due_ms = 1700000000000ull;
    st.server_version = "0.1.0";
    st.server_version_len = 5;
    w.len = 0;
    cr_assert_eq(proto_encode_status_resp(&w, 1, &st), 0);
    body = parse(&w, &h);
    cr_assert_eq(proto_decode_status_resp(body, h.body_len, &out), 0);
    cr_expect_eq(out.has_timers, 1);
    cr_expect_eq(out.timers_pending, 12);
    cr_expect_eq(out.timers_oldest_due_ms, 1700000000000ull);
    cr_expect_eq(out.server_version_len, 5);
    cr_expect_eq(memcmp(out.server_version, "0.1.0", 5), 0);
    cr_expect_eq(proto_decode_status_resp(body, h.body_len - 1, &out),
                 TERN_EMALFORMED);
    /* Without the tail (a server that predates it) it still decodes. */
    cr_assert_eq(proto_decode_status_resp(body, h.body_len - 24, &out), 0);
    cr_expect_eq(out.has_timers, 0);
    cr_expect_eq(out.server_version_len, 0);
    cr_expect_str_eq(out.server_version, "");
    tern_wbuf_free(&w);
}

/* The tail's versions: 1 (timers only, what a server that predates the
 * server version sends), 2 (this encoder), a later one with more fields
 * (skipped), and the bounds of server_version. */
Test(proto_status, status_tail_versions)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_status st, out;
    uint8_t body[512];
    char longv[PROTO_MAX_SERVER_VERSION + 2];
    memset(&st, 0, sizeof st);
    st.node_id = 2;
    st.transport = "shm";
    st.transport_len = 3;
    st.durability = "disk";
    st.durability_len = 4;
    st.leader_address = "";
    st.has_timers = 1;
    st.timers_pending = 3;
    st.timers_oldest_due_ms = 99;
    st.server_version = "1.22.333";
    st.server_version_len = 8;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_status_resp(&w, 1, &st), 0);
    const uint8_t *b = parse(&w, &h);
    size_t len = h.body_len;
    size_t tail = len - (1 + 8 + 8 + 2 + 8); /* where the tail starts */
    cr_assert_leq(len + 8, sizeof body);
    memcpy(body, b, len);
    cr_expect_eq(body[tail], PROTO_STATUS_TAIL_VERSION);

    /* Version 1: the same fields up to the timers, no server version. */
    body[tail] = 1;
    cr_assert_eq(proto_decode_status_resp(body, len - 10, &out), 0);
    cr_expect_eq(out.has_timers, 1);
    cr_expect_eq(out.timers_pending, 3);
    cr_expect_eq(out.timers_oldest_due_ms, 99);
    cr_expect_eq(out.server_version_len, 0);
    cr_expect_str_eq(out.server_version, "");
    /* A version 1 tail is exact: bytes after it are malformed. */
    cr_expect_eq(proto_decode_status_resp(body, len, &out), TERN_EMALFORMED);
    /* Version 0 is no version. */
    body[tail] = 0;
    cr_expect_eq(proto_decode_status_resp(body, len, &out), TERN_EMALFORMED);

    /* Version 2 is exact: a cut string or trailing bytes are malformed. */
    body[tail] = 2;
    cr_expect_eq(proto_decode_status_resp(body, len - 1, &out),
                 TERN_EMALFORMED);
    memcpy(body + len, "new", 3);
    cr_expect_eq(proto_decode_status_resp(body, len + 3, &out),
                 TERN_EMALFORMED);
    /* A later version: the known fields (version 3 adds the members'
     * roles: self_role ABSENT, n = n_members = 0), the rest skipped. */
    body[tail] = PROTO_STATUS_TAIL_VERSION_MEMBERS + 1;
    memcpy(body + len, "\x03\0\0\0\0new", 8);
    cr_assert_eq(proto_decode_status_resp(body, len + 8, &out), 0);
    cr_expect_eq(out.has_membership, 1);
    cr_expect_eq(out.self_role, PROTO_MEMBER_ABSENT);
    cr_expect_eq(out.timers_pending, 3);
    cr_expect_eq(out.server_version_len, 8);
    cr_expect_eq(memcmp(out.server_version, "1.22.333", 8), 0);

    /* The longest server version goes; one byte more is refused both
     * ways. */
    memset(longv, 'v', sizeof longv);
    st.server_version = longv;
    st.server_version_len = PROTO_MAX_SERVER_VERSION;
    w.len = 0;
    cr_assert_eq(proto_encode_status_resp(&w, 1, &st), 0);
    b = parse(&w, &h);
    cr_assert_eq(proto_decode_status_resp(b, h.body_len, &out), 0);
    cr_expect_eq(out.server_version_len, PROTO_MAX_SERVER_VERSION);
    st.server_version_len = PROTO_MAX_SERVER_VERSION + 1;
    w.len = 0;
    cr_expect_eq(proto_encode_status_resp(&w, 1, &st), TERN_EINVAL);
    st.server_version_len = 8;
    st.server_version = "1.22.333";
    w.len = 0;
    cr_assert_eq(proto_encode_status_resp(&w, 1, &st), 0);
    b = parse(&w, &h);
    len = h.body_len;
    memcpy(body, b, len);
    /* The same answer with a 65-byte string in place of the 8 bytes. */
    len -= 2 + 8;
    body[len] = (uint8_t)(PROTO_MAX_SERVER_VERSION + 1);
    body[len + 1] = 0;
    cr_assert_leq(len + 2 + PROTO_MAX_SERVER_VERSION + 1, sizeof body);
    memset(body + len + 2, 'v', PROTO_MAX_SERVER_VERSION + 1);
    cr_expect_eq(proto_decode_status_resp(
                     body, len + 2 + PROTO_MAX_SERVER_VERSION + 1, &out),
                 TERN_EMALFORMED);
    /* A NULL server_version is encoded as the empty string. */
    st.server_version = NULL;
    st.server_version_len = 0;
    w.len = 0;
    cr_assert_eq(proto_encode_status_resp(&w, 1, &st), 0);
    b = parse(&w, &h);
    cr_assert_eq(proto_decode_status_resp(b, h.body_len, &out), 0);
    cr_expect_eq(out.server_version_len, 0);
    cr_expect_not_null(out.server_version);
    tern_wbuf_free(&w);
}
