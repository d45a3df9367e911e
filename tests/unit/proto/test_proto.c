/*
 * Unit tests of proto/proto.c: encode/decode round trips for every op and
 * response, error frames with leader hints, and rejection of bad magic,
 * version, oversized bodies, bad checksums, truncation, trailing bytes and
 * bad names.
 */
#include <errno.h>

#include <criterion/criterion.h>

#include <proto.h>

/* Parse the single frame in w; returns the body and fills h. */
static const uint8_t *parse_one(const struct tern_wbuf *w,
                                struct proto_header *h)
{
    const void *body = NULL;
    cr_assert_eq(
        proto_frame_parse(w->base, w->len, PROTO_DEFAULT_MAX_BODY, h, &body),
        0);
    cr_assert_eq(w->len, PROTO_HEADER_SIZE + (size_t)h->body_len);
    return body;
}

/* parse_one, then decode the frame as a request (asserted). */
static void parse_request(const struct tern_wbuf *w,
                          struct proto_header *h,
                          struct proto_request *r)
{
    const uint8_t *body = parse_one(w, h);
    cr_assert_eq(proto_decode_request(h->op, body, h->body_len, r), 0);
}

static int streq(const char *p, size_t len, const char *want)
{
    return p != NULL && len == strlen(want) && memcmp(p, want, len) == 0;
}

Test(proto, header_fields_and_checksum)
{
    struct tern_wbuf w;
    struct proto_header h;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 0x1122334455667788),
                 0);
    cr_assert_eq(w.len, PROTO_HEADER_SIZE);
    cr_expect_eq(w.base[0], 0x74);
    cr_expect_eq(w.base[1], 0x6E);
    cr_assert_eq(proto_header_decode(w.base, PROTO_DEFAULT_MAX_BODY, &h), 0);
    cr_expect_eq(h.version, TERN_PROTO_VERSION);
    cr_expect_eq(h.op, PROTO_OP_STATUS);
    cr_expect_eq(h.body_len, 0);
    cr_expect_eq(h.request_id, 0x1122334455667788ULL);
    cr_expect_eq(h.status, 0);
    cr_expect_eq(proto_frame_verify(w.base, NULL, 0), 0);
    tern_wbuf_free(&w);
}

Test(proto, queue_ops_round_trip)
{
    uint8_t ops[] = {PROTO_OP_QUEUE_CREATE, PROTO_OP_QUEUE_DELETE};
    for (size_t i = 0; i < sizeof ops; i++) {
        struct tern_wbuf w;
        struct proto_header h;
        struct proto_request r;
        tern_wbuf_init(&w);
        cr_assert_eq(proto_encode_queue_op(&w, ops[i], 7, "orders.v1"), 0);
        parse_request(&w, &h, &r);
        cr_expect_eq(h.op, ops[i]);
        cr_expect_eq(h.request_id, 7);
        cr_expect(streq(r.queue, r.queue_len, "orders.v1"));
        tern_wbuf_free(&w);
    }
}

Test(proto, simple_ops_round_trip)
{
    uint8_t ops[] = {PROTO_OP_QUEUE_LIST, PROTO_OP_STATUS};
    for (size_t i = 0; i < sizeof ops; i++) {
        struct tern_wbuf w;
        struct proto_header h;
        struct proto_request r;
        tern_wbuf_init(&w);
        cr_assert_eq(proto_encode_simple(&w, ops[i], 9), 0);
        parse_request(&w, &h, &r);
        cr_expect_eq(r.op, ops[i]);
        tern_wbuf_free(&w);
    }
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    cr_expect_eq(proto_encode_simple(&w, PROTO_OP_PRODUCE, 1), TERN_EINVAL);
    cr_expect_eq(proto_encode_queue_op(&w, PROTO_OP_STATUS, 1, "q"),
                 TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto, produce_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    struct proto_msg in[3] = {{"alpha", 5}, {"", 0}, {"gamma-long", 10}};
    struct proto_msg m;
    size_t pos = 0;
    int n = 0;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_produce(&w, 42, "q1", 0xdeadbeefcafe, 17, in, 3),
                 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(h.op, PROTO_OP_PRODUCE);
    cr_expect(streq(r.queue, r.queue_len, "q1"));
    cr_expect_eq(r.producer_id, 0xdeadbeefcafeULL);
    cr_expect_eq(r.seq, 17);
    cr_expect_eq(r.n_msgs, 3);
    while (proto_next_msg(&r, &pos, &m)) {
        cr_assert_lt(n, 3);
        cr_expect_eq(m.len, in[n].len);
        cr_expect_eq(memcmp(m.data, in[n].data, m.len), 0);
        n++;
    }
    cr_expect_eq(n, 3);
    cr_expect_eq(proto_encode_produce(&w, 1, "q1", 1, 1, in, 0), TERN_EINVAL);
    tern_wbuf_free(&w);
}

static void pmsg_at(const void *msgs, uint32_t i, struct proto_msg *m)
{
    *m = ((const struct proto_msg *)msgs)[i];
}

/* proto_produce_append: the grown frame, once sealed, is the frame of all
 * the messages encoded at once, byte for byte; refusals leave it whole. */
Test(proto, produce_append_equals_one_encoding)
{
    struct tern_wbuf w, all;
    struct proto_header h;
    struct proto_request r;
    struct proto_msg in[5] = {
        {"alpha", 5}, {"", 0}, {"gamma-long", 10}, {"d", 1}, {"epsilon", 7}};
    struct proto_msg m;
    size_t pos = 0, len;
    int n = 0;
    tern_wbuf_init(&w);
    tern_wbuf_init(&all);
    cr_assert_eq(
        proto_encode_produce_at(&w, 0, "queue-a", 7, 9, pmsg_at, in, 2), 0);
    cr_assert_eq(proto_produce_append(&w, pmsg_at, in + 2, 1), 0);
    cr_assert_eq(proto_produce_append(&w, pmsg_at, in + 3, 2), 0);
    cr_assert_eq(
        proto_frame_seal_request(w.base, w.len, 42, TERN_PROTO_VERSION), 0);
    cr_assert_eq(proto_encode_produce(&all, 42, "queue-a", 7, 9, in, 5), 0);
    cr_assert_eq(w.len, all.len);
    cr_expect_eq(memcmp(w.base, all.base, w.len), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(r.n_msgs, 5);
    while (proto_next_msg(&r, &pos, &m)) {
        cr_assert_lt(n, 5);
        cr_expect_eq(m.len, in[n].len);
        cr_expect_eq(memcmp(m.data, in[n].data, m.len), 0);
        n++;
    }
    cr_expect_eq(n, 5);

    /* Not a PRODUCE, a cut frame, no messages: refused, w as it was. */
    len = w.len;
    cr_expect_eq(proto_produce_append(&w, pmsg_at, in, 0), TERN_EMALFORMED);
    w.len = len - 1;
    cr_expect_eq(proto_produce_append(&w, pmsg_at, in, 1), TERN_EMALFORMED);
    cr_expect_eq(w.len, len - 1);
    w.len = len;
    cr_expect_eq(memcmp(w.base, all.base, w.len), 0);
    all.len = 0;
    cr_assert_eq(proto_encode_simple(&all, PROTO_OP_STATUS, 1), 0);
    cr_expect_eq(proto_produce_append(&all, pmsg_at, in, 1), TERN_EMALFORMED);
    cr_expect_eq(all.len, PROTO_HEADER_SIZE);
    tern_wbuf_free(&w);
    tern_wbuf_free(&all);
}

Test(proto, fetch_and_group_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_fetch(&w, 3, "q", 1000, 64, 1 << 20, 250, 0), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(h.body_len, 2 + 1 + 8 + 4 + 4 + 4); /* no flags byte */
    cr_expect_eq(r.flags, 0);
    cr_expect(streq(r.queue, r.queue_len, "q"));
    cr_expect_eq(r.offset, 1000);
    cr_expect_eq(r.max_msgs, 64);
    cr_expect_eq(r.max_bytes, 1 << 20);
    cr_expect_eq(r.wait_ms, 250);

    w.len = 0;
    cr_assert_eq(proto_encode_group_fetch(&w, 4, "q", "g-1", 5, 99, 7), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(r.op, PROTO_OP_GROUP_FETCH);
    cr_expect(streq(r.group, r.group_len, "g-1"));
    cr_expect_eq(r.max_msgs, 5);
    cr_expect_eq(r.max_bytes, 99);
    cr_expect_eq(r.wait_ms, 7);

    w.len = 0;
    cr_assert_eq(proto_encode_group_commit(&w, 5, "q", "g", 123456789), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(r.op, PROTO_OP_GROUP_COMMIT);
    cr_expect(streq(r.group, r.group_len, "g"));
    cr_expect_eq(r.offset, 123456789);
    tern_wbuf_free(&w);
}

/* The optional FETCH flags byte: present only when not 0, the leader bit
 * round-trips, unknown bits and extra bytes are refused both ways. */
Test(proto, fetch_leader_flag)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    const uint8_t *body;
    uint8_t copy[64];
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_fetch(&w, 3, "q", 7, 1, 100, 0, PROTO_FETCH_LEADER), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(h.body_len, 2 + 1 + 8 + 4 + 4 + 4 + 1);
    cr_expect_eq(r.flags, PROTO_FETCH_LEADER);
    cr_expect_eq(r.offset, 7);
    cr_expect_eq(r.wait_ms, 0);

    body = w.base + PROTO_HEADER_SIZE;
    cr_assert_leq(h.body_len + 1, sizeof copy);
    memcpy(copy, body, h.body_len);
    copy[h.body_len - 1] = 0x08; /* unknown bit */
    cr_expect_eq(proto_decode_request(PROTO_OP_FETCH, copy, h.body_len, &r),
                 TERN_EMALFORMED);
    copy[h.body_len - 1] = 0; /* 0 is written by leaving the byte out */
    cr_expect_eq(proto_decode_request(PROTO_OP_FETCH, copy, h.body_len, &r),
                 TERN_EMALFORMED);
    copy[h.body_len - 1] = PROTO_FETCH_LEADER;
    copy[h.body_len] = 0; /* a second trailing byte */
    cr_expect_eq(proto_decode_request(PROTO_OP_FETCH, copy, h.body_len + 1, &r),
                 TERN_EMALFORMED);

    w.len = 0;
    cr_expect_eq(proto_encode_fetch(&w, 3, "q", 7, 1, 100, 0, 0x02),
                 TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto, error_frames)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_error e;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_error(&w, PROTO_OP_PRODUCE, 11, TERN_ENOTLEADER,
                                    "not the leader", 3, "127.0.0.1:7402"),
                 0);
    const uint8_t *body = parse_one(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_PRODUCE | PROTO_OP_RESPONSE);
    cr_expect_eq(h.status, TERN_ENOTLEADER);
    cr_expect_eq(h.request_id, 11);
    cr_assert_eq(proto_decode_error(body, h.body_len, h.status, &e), 0);
    cr_expect(streq(e.message, e.message_len, "not the leader"));
    cr_expect_eq(e.leader_id, 3);
    cr_expect(streq(e.leader_address, e.leader_address_len, "127.0.0.1:7402"));

    /* Unknown leader. */
    w.len = 0;
    cr_assert_eq(proto_encode_error(&w, PROTO_OP_PRODUCE, 12, TERN_ENOTLEADER,
                                    NULL, 0, NULL),
                 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_error(body, h.body_len, h.status, &e), 0);
    cr_expect_eq(e.message_len, 0);
    cr_expect_eq(e.leader_id, 0);
    cr_expect_eq(e.leader_address_len, 0);

    /* Other codes carry only the message; a leader hint would be trailing. */
    w.len = 0;
    cr_assert_eq(proto_encode_error(&w, PROTO_OP_ERROR, 0, TERN_ECORRUPT,
                                    "bad checksum", 0, NULL),
                 0);
    body = parse_one(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_ERROR | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_error(body, h.body_len, h.status, &e), 0);
    cr_expect(streq(e.message, e.message_len, "bad checksum"));
    cr_expect_eq(proto_decode_error(body, h.body_len, TERN_ENOTLEADER, &e),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_encode_error(&w, 1, 1, 0, "x", 0, NULL), TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto, responses_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    const uint8_t *body;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_empty_resp(&w, PROTO_OP_QUEUE_CREATE, 1), 0);
    body = parse_one(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_QUEUE_CREATE | PROTO_OP_RESPONSE);
    cr_expect_eq(proto_decode_empty_resp(body, h.body_len), 0);
    cr_expect_eq(proto_decode_empty_resp("x", 1), TERN_EMALFORMED);

    struct proto_produce_resp pr;
    w.len = 0;
    cr_assert_eq(proto_encode_produce_resp(&w, 2, 500, 7, 1), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_produce_resp(body, h.body_len, &pr), 0);
    cr_expect_eq(pr.base_offset, 500);
    cr_expect_eq(pr.count, 7);
    cr_expect_eq(pr.duplicate, 1);

    struct proto_fetched_msg fm[2] = {{10, 111, "hello", 5, NULL, 0},
                                      {11, 222, "world!", 6, NULL, 0}};
    struct proto_fetch_resp fr;
    struct proto_fetched_msg got;
    size_t pos = 0;
    int n = 0;
    w.len = 0;
    cr_assert_eq(
        proto_encode_fetch_resp(&w, PROTO_OP_GROUP_FETCH, 3, 12, 20, fm, 2), 0);
    body = parse_one(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_GROUP_FETCH | PROTO_OP_RESPONSE);
    cr_assert_eq(proto_decode_fetch_resp(body, h.body_len, &fr), 0);
    cr_expect_eq(fr.next_offset, 12);
    cr_expect_eq(fr.end_offset, 20);
    cr_expect_eq(fr.n, 2);
    while (proto_next_fetched(&fr, &pos, &got)) {
        cr_assert_lt(n, 2);
        cr_expect_eq(got.offset, fm[n].offset);
        cr_expect_eq(got.timestamp_ms, fm[n].timestamp_ms);
        cr_expect_eq(got.len, fm[n].len);
        cr_expect_eq(memcmp(got.data, fm[n].data, got.len), 0);
        n++;
    }
    cr_expect_eq(n, 2);

    struct proto_queue_info qi[2] = {{"a", 1, 0, 5}, {"bb", 2, 3, 9}};
    struct proto_queue_list_resp ql;
    struct proto_queue_info q;
    w.len = 0;
    pos = 0;
    n = 0;
    cr_assert_eq(proto_encode_queue_list_resp(&w, 4, qi, 2), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_queue_list_resp(body, h.body_len, &ql), 0);
    cr_expect_eq(ql.n, 2);
    while (proto_next_queue_info(&ql, &pos, &q)) {
        cr_assert_lt(n, 2);
        cr_expect_eq(q.name_len, qi[n].name_len);
        cr_expect_eq(memcmp(q.name, qi[n].name, q.name_len), 0);
        cr_expect_eq(q.start_offset, qi[n].start_offset);
        cr_expect_eq(q.next_offset, qi[n].next_offset);
        n++;
    }
    cr_expect_eq(n, 2);

    struct proto_member mem[2] = {
        {1, "127.0.0.1:7301", 14, "127.0.0.1:7401", 14},
        {2, "127.0.0.1:7302", 14, "", 0}};
    struct proto_status st = {
        .node_id = 1,
        .role = 2,
        .leader_id = 1,
        .leader_address = "127.0.0.1:7401",
        .leader_address_len = 14,
        .term = 5,
        .commit_index = 77,
        .last_applied = 76,
        .writable = 1,
        .transport = "tcp",
        .transport_len = 3,
        .durability = "fsync",
        .durability_len = 5,
        .n_members = 2,
        .members = mem,
    };
    struct proto_status sd;
    struct proto_member gm;
    w.len = 0;
    pos = 0;
    n = 0;
    cr_assert_eq(proto_encode_status_resp(&w, 5, &st), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_status_resp(body, h.body_len, &sd), 0);
    cr_expect_eq(sd.node_id, 1);
    cr_expect_eq(sd.role, 2);
    cr_expect_eq(sd.leader_id, 1);
    cr_expect(
        streq(sd.leader_address, sd.leader_address_len, "127.0.0.1:7401"));
    cr_expect_eq(sd.term, 5);
    cr_expect_eq(sd.commit_index, 77);
    cr_expect_eq(sd.last_applied, 76);
    cr_expect_eq(sd.writable, 1);
    cr_expect(streq(sd.transport, sd.transport_len, "tcp"));
    cr_expect(streq(sd.durability, sd.durability_len, "fsync"));
    cr_expect_eq(sd.n_members, 2);
    while (proto_next_member(&sd, &pos, &gm)) {
        cr_assert_lt(n, 2);
        cr_expect_eq(gm.id, mem[n].id);
        cr_expect_eq(gm.raft_address_len, mem[n].raft_address_len);
        cr_expect_eq(gm.client_address_len, mem[n].client_address_len);
        n++;
    }
    cr_expect_eq(n, 2);
    tern_wbuf_free(&w);
}

Test(proto, rejects_bad_headers)
{
    struct tern_wbuf w;
    struct proto_header h;
    const void *body;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 1, "q"), 0);

    uint8_t buf[64];
    cr_assert_leq(w.len, sizeof buf);
    memcpy(buf, w.base, w.len);
    buf[0] ^= 1;
    cr_expect_eq(proto_header_decode(buf, PROTO_DEFAULT_MAX_BODY, &h),
                 TERN_EMALFORMED);
    memcpy(buf, w.base, w.len);
    buf[2] = PROTO_VERSION_MAX + 1;
    cr_expect_eq(proto_header_decode(buf, PROTO_DEFAULT_MAX_BODY, &h),
                 TERN_EVERSION);
    buf[2] = 0;
    cr_expect_eq(proto_header_decode(buf, PROTO_DEFAULT_MAX_BODY, &h),
                 TERN_EVERSION);
    memcpy(buf, w.base, w.len);
    cr_expect_eq(proto_header_decode(buf, 2, &h), TERN_ETOOBIG);
    cr_expect_eq(proto_header_decode(buf, 3, &h), 0);
    tern_put_u32(buf + 4, PROTO_DEFAULT_MAX_BODY + 1);
    cr_expect_eq(proto_header_decode(buf, PROTO_DEFAULT_MAX_BODY, &h),
                 TERN_ETOOBIG);

    /* Any flipped bit in the checked header or body fails the checksum. */
    for (size_t i = 0; i < w.len; i++) {
        if (i < 4 || (i >= 20 && i < 24)) {
            continue; /* magic/version/op checked elsewhere; checksum */
        }
        memcpy(buf, w.base, w.len);
        buf[i] ^= 0x10;
        int rv =
            proto_frame_parse(buf, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body);
        cr_expect_neq(rv, 0, "byte %zu flipped was accepted", i);
    }
    memcpy(buf, w.base, w.len);
    buf[3] ^= 0x01; /* op is covered by the checksum too */
    cr_expect_eq(
        proto_frame_parse(buf, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body),
        TERN_ECORRUPT);
    memcpy(buf, w.base, w.len);
    buf[21] ^= 0x01;
    cr_expect_eq(
        proto_frame_parse(buf, w.len, PROTO_DEFAULT_MAX_BODY, &h, &body),
        TERN_ECORRUPT);

    /* Truncated frames. */
    for (size_t len = 0; len < w.len; len++) {
        cr_expect_eq(
            proto_frame_parse(w.base, len, PROTO_DEFAULT_MAX_BODY, &h, &body),
            TERN_EMALFORMED);
    }
    tern_wbuf_free(&w);
}

/* Every strict prefix of a valid body is malformed, and so is the body with
 * one extra byte. */
static void check_truncation_and_trailing(uint8_t op,
                                          const uint8_t *body,
                                          size_t len)
{
    struct proto_request r;
    uint8_t buf[512];
    cr_assert_lt(len, sizeof buf);
    for (size_t n = 0; n < len; n++) {
        cr_expect_eq(proto_decode_request(op, body, n, &r), TERN_EMALFORMED,
                     "op %d prefix %zu of %zu accepted", op, n, len);
    }
    memcpy(buf, body, len);
    buf[len] = 0;
    cr_expect_eq(proto_decode_request(op, buf, len + 1, &r), TERN_EMALFORMED,
                 "op %d trailing byte accepted", op);
    cr_expect_eq(proto_decode_request(op, body, len, &r), 0);
}

Test(proto, rejects_truncated_and_trailing_requests)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_msg msgs[2] = {{"abc", 3}, {"de", 2}};
    const uint8_t *body;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 1, "q"), 0);
    body = parse_one(&w, &h);
    check_truncation_and_trailing(PROTO_OP_QUEUE_CREATE, body, h.body_len);
    w.len = 0;
    cr_assert_eq(proto_encode_produce(&w, 1, "q", 5, 6, msgs, 2), 0);
    body = parse_one(&w, &h);
    check_truncation_and_trailing(PROTO_OP_PRODUCE, body, h.body_len);
    w.len = 0;
    cr_assert_eq(proto_encode_fetch(&w, 1, "q", 5, 6, 7, 8, 0), 0);
    body = parse_one(&w, &h);
    check_truncation_and_trailing(PROTO_OP_FETCH, body, h.body_len);
    w.len = 0;
    cr_assert_eq(proto_encode_group_fetch(&w, 1, "q", "g", 6, 7, 8), 0);
    body = parse_one(&w, &h);
    check_truncation_and_trailing(PROTO_OP_GROUP_FETCH, body, h.body_len);
    w.len = 0;
    cr_assert_eq(proto_encode_group_commit(&w, 1, "q", "g", 6), 0);
    body = parse_one(&w, &h);
    check_truncation_and_trailing(PROTO_OP_GROUP_COMMIT, body, h.body_len);

    struct proto_request r;
    cr_expect_eq(proto_decode_request(PROTO_OP_STATUS, "x", 1, &r),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_decode_request(0x55, "", 0, &r), TERN_EINVAL);
    cr_expect_eq(
        proto_decode_request(PROTO_OP_PRODUCE | PROTO_OP_RESPONSE, "", 0, &r),
        TERN_EINVAL);
    tern_wbuf_free(&w);
}

Test(proto, rejects_bad_names)
{
    struct tern_wbuf w;
    struct proto_request r;
    struct proto_msg m = {"x", 1};
    char big[PROTO_MAX_NAME + 2];
    tern_wbuf_init(&w);
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';

    /* Encoders refuse, and leave nothing behind. */
    cr_expect_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 1, ""),
                 TERN_EBADNAME);
    cr_expect_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 1, "a b"),
                 TERN_EBADNAME);
    cr_expect_eq(proto_encode_queue_op(&w, PROTO_OP_QUEUE_CREATE, 1, big),
                 TERN_EBADNAME);
    cr_expect_eq(proto_encode_produce(&w, 1, "q/x", 0, 0, &m, 1),
                 TERN_EBADNAME);
    cr_expect_eq(proto_encode_group_commit(&w, 1, "q", "g g", 0),
                 TERN_EBADNAME);
    cr_expect_eq(w.len, 0);
    cr_expect_eq(w.err, 0);

    /* Decoders refuse hand-made bodies. */
    uint8_t body[300];
    struct tern_wbuf b;
    const char *bad[] = {"", "a b", "q\n", big, "caf\xc3\xa9"};
    for (size_t i = 0; i < TERN_ARRAY_SIZE(bad); i++) {
        tern_wbuf_init(&b);
        proto_put_str(&b, bad[i], strlen(bad[i]));
        cr_assert_leq(b.len, sizeof body);
        memcpy(body, b.base, b.len);
        cr_expect_eq(
            proto_decode_request(PROTO_OP_QUEUE_DELETE, body, b.len, &r),
            TERN_EBADNAME, "name %zu accepted", i);
        tern_wbuf_free(&b);
    }
    /* A bad group name. */
    tern_wbuf_init(&b);
    proto_put_str(&b, "q", 1);
    proto_put_str(&b, "g*", 2);
    tern_wbuf_u64(&b, 1);
    cr_expect_eq(proto_decode_request(PROTO_OP_GROUP_COMMIT, b.base, b.len, &r),
                 TERN_EBADNAME);
    tern_wbuf_free(&b);
    tern_wbuf_free(&w);
}

Test(proto, rejects_bad_responses)
{
    struct proto_produce_resp pr;
    struct proto_fetch_resp fr;
    struct proto_queue_list_resp ql;
    struct proto_status st;
    struct tern_wbuf w;
    struct proto_header h;
    const uint8_t *body;
    uint8_t buf[256];
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_produce_resp(&w, 2, 500, 7, 0), 0);
    body = parse_one(&w, &h);
    for (size_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_produce_resp(body, n, &pr), TERN_EMALFORMED);
    }
    memcpy(buf, body, h.body_len);
    buf[h.body_len] = 0;
    cr_expect_eq(proto_decode_produce_resp(buf, h.body_len + 1u, &pr),
                 TERN_EMALFORMED);

    /* A fetch response claiming more messages than the body holds. */
    struct proto_fetched_msg fm = {1, 2, "x", 1, NULL, 0};
    w.len = 0;
    cr_assert_eq(proto_encode_fetch_resp(&w, PROTO_OP_FETCH, 1, 2, 2, &fm, 1),
                 0);
    body = parse_one(&w, &h);
    memcpy(buf, body, h.body_len);
    tern_put_u32(buf + 16, 0xffffffffu);
    cr_expect_eq(proto_decode_fetch_resp(buf, h.body_len, &fr),
                 TERN_EMALFORMED);
    for (size_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_fetch_resp(body, n, &fr), TERN_EMALFORMED);
    }
    cr_expect_eq(proto_decode_queue_list_resp("\x01\x00\x00\x00", 4, &ql),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_decode_status_resp("", 0, &st), TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto, encoder_oom_leaves_sticky_error)
{
    struct tern_wbuf w;
    struct proto_msg m = {"x", 1};
    tern_wbuf_init(&w);
    tern_alloc_fail_after(0);
    cr_expect_eq(proto_encode_produce(&w, 1, "q", 1, 1, &m, 1), -ENOMEM);
    tern_alloc_fail_after(-1);
    cr_expect_eq(w.len, 0);
    tern_wbuf_free(&w);
}

/* A caller's own message type, read through an accessor. */
struct caller_msg
{
    uint32_t len;
    const char *bytes;
};

static void caller_msg_at(const void *msgs, uint32_t i, struct proto_msg *m)
{
    const struct caller_msg *cm = msgs;
    m->data = cm[i].bytes;
    m->len = cm[i].len;
}

Test(proto, produce_at_encodes_the_same_bytes_as_produce)
{
    const struct caller_msg cm[3] = {{5, "alpha"}, {0, ""}, {4, "beta"}};
    struct proto_msg pm[3];
    struct tern_wbuf a, b;
    for (int i = 0; i < 3; i++) {
        pm[i].data = cm[i].bytes;
        pm[i].len = cm[i].len;
    }
    tern_wbuf_init(&a);
    tern_wbuf_init(&b);
    cr_assert_eq(proto_encode_produce(&a, 9, "orders", 42, 7, pm, 3), 0);
    cr_assert_eq(
        proto_encode_produce_at(&b, 9, "orders", 42, 7, caller_msg_at, cm, 3),
        0);
    cr_assert_eq(a.len, b.len);
    cr_expect_eq(memcmp(a.base, b.base, a.len), 0);
    tern_wbuf_free(&a);
    tern_wbuf_free(&b);
}

Test(proto, produce_at_refuses_bad_arguments_without_writing)
{
    const struct caller_msg cm[1] = {{1, "x"}};
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    cr_expect_eq(proto_encode_produce_at(&w, 1, "q", 1, 1, NULL, cm, 1),
                 TERN_EINVAL);
    cr_expect_eq(w.len, 0);
    cr_expect_eq(
        proto_encode_produce_at(&w, 1, "q", 1, 1, caller_msg_at, cm, 0),
        TERN_EINVAL);
    cr_expect_eq(w.len, 0);
    cr_expect_eq(
        proto_encode_produce_at(&w, 1, "q/x", 1, 1, caller_msg_at, cm, 1),
        TERN_EBADNAME);
    cr_expect_eq(w.len, 0);
    tern_wbuf_free(&w);
}

Test(proto, produce_at_oom_leaves_sticky_error)
{
    const struct caller_msg cm[1] = {{1, "x"}};
    struct tern_wbuf w;
    tern_wbuf_init(&w);
    tern_alloc_fail_after(0);
    cr_expect_eq(
        proto_encode_produce_at(&w, 1, "q", 1, 1, caller_msg_at, cm, 1),
        -ENOMEM);
    tern_alloc_fail_after(-1);
    cr_expect_eq(w.len, 0);
    cr_expect_eq(w.err, -ENOMEM);
    tern_wbuf_free(&w);
}

Test(proto, stats_request_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    const uint8_t *body;
    tern_wbuf_init(&w);
    cr_assert_eq(proto_encode_stats_req(&w, 77, PROTO_STATS_RESET), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(h.op, PROTO_OP_STATS);
    cr_expect_eq(h.request_id, 77);
    cr_expect_eq(h.body_len, 1);
    cr_expect_eq(r.op, PROTO_OP_STATS);
    cr_expect_eq(r.flags, PROTO_STATS_RESET);

    w.len = 0;
    cr_assert_eq(proto_encode_stats_req(&w, 78, 0), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(r.flags, 0);

    /* Undefined flag bits: refused by the encoder (nothing written) and
     * by the decoder. */
    w.len = 0;
    cr_expect_eq(proto_encode_stats_req(&w, 1, 0x04), TERN_EINVAL);
    cr_expect_eq(w.len, 0);
    cr_expect_eq(proto_decode_request(PROTO_OP_STATS, "\x05", 1, &r),
                 TERN_EMALFORMED);
    cr_expect_eq(r.flags, 0);
    /* Missing flags byte, trailing byte. */
    cr_expect_eq(proto_decode_request(PROTO_OP_STATS, "", 0, &r),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_decode_request(PROTO_OP_STATS, "\x01\x00", 2, &r),
                 TERN_EMALFORMED);

    /* Old ops stay as they were: no flags. */
    w.len = 0;
    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_STATUS, 2), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_request(h.op, body, h.body_len, &r), 0);
    cr_expect_eq(r.flags, 0);
    tern_wbuf_free(&w);
}

static void fill_stats(struct proto_stats *st)
{
    memset(st, 0, sizeof *st);
    st->node_id = 3;
    st->role = 3;
    st->transport = "shm+tcp";
    st->transport_len = 7;
    st->durability = "memory";
    st->durability_len = 6;
    st->count = 1000;
    st->dropped = 2;
    st->sum_ns = 12345678;
    st->min_ns = 4000;
    st->p50_ns = 11000;
    st->p90_ns = 15000;
    st->p99_ns = 30000;
    st->p999_ns = 90000;
    st->max_ns = 0x0123456789abcdefULL;
}

Test(proto, stats_response_round_trip)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_stats in, out;
    const uint8_t *body;
    tern_wbuf_init(&w);
    fill_stats(&in);
    cr_assert_eq(proto_encode_stats_resp(&w, 9, &in), 0);
    body = parse_one(&w, &h);
    cr_expect_eq(h.op, PROTO_OP_STATS | PROTO_OP_RESPONSE);
    cr_expect_eq(h.request_id, 9);
    cr_expect_eq(h.status, 0);
    /* u64 + u8 + (2+7) + (2+6) + 9 x u64 */
    cr_expect_eq(h.body_len, 8 + 1 + 9 + 8 + 9 * 8);
    cr_assert_eq(proto_decode_stats_resp(body, h.body_len, &out), 0);
    cr_expect_eq(out.node_id, 3);
    cr_expect_eq(out.role, 3);
    cr_expect(streq(out.transport, out.transport_len, "shm+tcp"));
    cr_expect(streq(out.durability, out.durability_len, "memory"));
    cr_expect_eq(out.count, 1000);
    cr_expect_eq(out.dropped, 2);
    cr_expect_eq(out.sum_ns, 12345678);
    cr_expect_eq(out.min_ns, 4000);
    cr_expect_eq(out.p50_ns, 11000);
    cr_expect_eq(out.p90_ns, 15000);
    cr_expect_eq(out.p99_ns, 30000);
    cr_expect_eq(out.p999_ns, 90000);
    cr_expect_eq(out.max_ns, 0x0123456789abcdefULL);

    /* Every truncation and a trailing byte are malformed, and leave the
     * output zeroed. */
    for (uint32_t n = 0; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_stats_resp(body, n, &out), TERN_EMALFORMED,
                     "truncated at %u", n);
        cr_expect_eq(out.count, 0);
        cr_expect_null(out.transport);
    }
    {
        uint8_t more[256];
        cr_assert_lt(h.body_len + 1, sizeof more);
        memcpy(more, body, h.body_len);
        more[h.body_len] = 0;
        cr_expect_eq(proto_decode_stats_resp(more, h.body_len + 1, &out),
                     TERN_EMALFORMED);
    }
    tern_wbuf_free(&w);
}

/* STATS with the stage tail: the request's PROTO_STATS_STAGES bit, the
 * answer's version 2 tail (every stage's name and quantiles), bounds,
 * and a later version's extra fields skipped. */
Test(proto, stats_stage_tail_round_trip)
{
    static const char *const names[] = {"leader_disk", "post_to_result",
                                        "apply"};
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    struct proto_stats in, out;
    const uint8_t *body;
    uint8_t more[512];
    tern_wbuf_init(&w);
    cr_assert_eq(
        proto_encode_stats_req(&w, 79, PROTO_STATS_RESET | PROTO_STATS_STAGES),
        0);
    parse_request(&w, &h, &r);
    cr_expect_eq(r.flags, PROTO_STATS_RESET | PROTO_STATS_STAGES);

    w.len = 0;
    fill_stats(&in);
    in.has_stages = 1;
    in.n_stages = 3;
    for (unsigned i = 0; i < 3; i++) {
        in.stages[i].name = names[i];
        in.stages[i].name_len = (uint16_t)strlen(names[i]);
        in.stages[i].count = 100 + i;
        in.stages[i].p50_ns = 1000 * (i + 1);
        in.stages[i].p99_ns = 9000 * (i + 1);
    }
    cr_assert_eq(proto_encode_stats_resp(&w, 10, &in), 0);
    body = parse_one(&w, &h);
    /* version 1 body, u8 version, u8 n, 3 x (str + 3 x u64) */
    cr_expect_eq(h.body_len, 8 + 1 + 9 + 8 + 9 * 8 + 2 + (2 + 11) + (2 + 14) +
                                 (2 + 5) + 3 * 24);
    cr_assert_eq(proto_decode_stats_resp(body, h.body_len, &out), 0);
    cr_expect_eq(out.p50_ns, 11000);
    cr_expect_eq(out.has_stages, 1);
    cr_assert_eq(out.n_stages, 3);
    for (unsigned i = 0; i < 3; i++) {
        cr_expect(streq(out.stages[i].name, out.stages[i].name_len, names[i]));
        cr_expect_eq(out.stages[i].count, 100 + i);
        cr_expect_eq(out.stages[i].p50_ns, 1000 * (i + 1));
        cr_expect_eq(out.stages[i].p99_ns, 9000 * (i + 1));
    }
    /* A truncated stage is malformed (the body without the tail is a
     * version 1 answer and decodes, without stages). */
    for (uint32_t n = 8 + 1 + 9 + 8 + 9 * 8 + 1; n < h.body_len; n++) {
        cr_expect_eq(proto_decode_stats_resp(body, n, &out), TERN_EMALFORMED,
                     "truncated at %u", n);
        cr_expect_eq(out.n_stages, 0);
    }
    cr_assert_eq(proto_decode_stats_resp(body, 8 + 1 + 9 + 8 + 9 * 8, &out), 0);
    cr_expect_eq(out.has_stages, 0);

    /* A later version's extra fields are skipped; an earlier version
     * (a tail is version 2 at least) is malformed. */
    cr_assert_lt(h.body_len + 5, sizeof more);
    memcpy(more, body, h.body_len);
    memcpy(more + h.body_len, "extra", 5);
    more[8 + 1 + 9 + 8 + 9 * 8] = PROTO_STATS_TAIL_VERSION + 1;
    cr_assert_eq(proto_decode_stats_resp(more, h.body_len + 5, &out), 0);
    cr_expect_eq(out.n_stages, 3);
    cr_expect_eq(out.stages[2].p99_ns, 27000);
    more[8 + 1 + 9 + 8 + 9 * 8] = PROTO_STATS_TAIL_VERSION;
    cr_expect_eq(proto_decode_stats_resp(more, h.body_len + 5, &out),
                 TERN_EMALFORMED);
    more[8 + 1 + 9 + 8 + 9 * 8] = 1;
    cr_expect_eq(proto_decode_stats_resp(more, h.body_len, &out),
                 TERN_EMALFORMED);
    /* More stages than the bound: refused both ways. */
    more[8 + 1 + 9 + 8 + 9 * 8] = PROTO_STATS_TAIL_VERSION;
    more[8 + 1 + 9 + 8 + 9 * 8 + 1] = PROTO_STATS_MAX_STAGES + 1;
    cr_expect_eq(proto_decode_stats_resp(more, h.body_len, &out),
                 TERN_EMALFORMED);
    w.len = 0;
    in.n_stages = PROTO_STATS_MAX_STAGES + 1;
    cr_expect_eq(proto_encode_stats_resp(&w, 11, &in), TERN_EINVAL);
    in.n_stages = 1;
    in.stages[0].name_len = PROTO_STATS_MAX_STAGE_NAME + 1;
    cr_expect_eq(proto_encode_stats_resp(&w, 11, &in), TERN_EINVAL);
    cr_expect_eq(w.len, 0);
    tern_wbuf_free(&w);
}

/* QUEUE_LIST paging: the request's optional after/max_count (an older
 * client's empty body still decodes, unpaged), and the answer's optional
 * more byte. */
Test(proto, queue_list_paged_request)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_request r;
    const uint8_t *body;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_simple(&w, PROTO_OP_QUEUE_LIST, 1), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(h.body_len, 0);
    cr_expect_eq(r.paged, 0);
    cr_expect_null(r.after);

    w.len = 0;
    cr_assert_eq(proto_encode_queue_list_req(&w, 2, NULL, 0), 0);
    parse_request(&w, &h, &r);
    cr_expect_eq(h.body_len, 6);
    cr_expect_eq(r.paged, 1);
    cr_expect_eq(r.after_len, 0);
    cr_expect_eq(r.max_count, 0);

    w.len = 0;
    cr_assert_eq(proto_encode_queue_list_req(&w, 3, "orders.eu", 250), 0);
    parse_request(&w, &h, &r);
    cr_expect(streq(r.after, r.after_len, "orders.eu"));
    cr_expect_eq(r.max_count, 250);

    /* A bad name, a truncated body, trailing bytes. */
    w.len = 0;
    cr_expect_eq(proto_encode_queue_list_req(&w, 4, "no/slash", 1),
                 TERN_EBADNAME);
    cr_expect_eq(proto_decode_request(PROTO_OP_QUEUE_LIST,
                                      "\x03\x00"
                                      "abc\x01\x00",
                                      7, &r),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_decode_request(PROTO_OP_QUEUE_LIST,
                                      "\x00\x00\x01\x00\x00\x00\x00", 7, &r),
                 TERN_EMALFORMED);
    cr_expect_eq(proto_decode_request(PROTO_OP_QUEUE_LIST,
                                      "\x02\x00"
                                      "a/\x01\x00\x00\x00",
                                      8, &r),
                 TERN_EBADNAME);
    w.len = 0;
    cr_assert_eq(proto_encode_queue_list_req(&w, 5, "q", 1), 0);
    body = parse_one(&w, &h);
    cr_expect_eq(
        proto_decode_request(PROTO_OP_QUEUE_LIST, body, h.body_len - 1, &r),
        TERN_EMALFORMED);
    tern_wbuf_free(&w);
}

Test(proto, queue_list_page_response)
{
    struct tern_wbuf w;
    struct proto_header h;
    struct proto_queue_info qi[2] = {{"a", 1, 0, 5}, {"bb", 2, 3, 9}};
    struct proto_queue_list_resp ql;
    struct proto_queue_info q;
    const uint8_t *body;
    size_t pos = 0;
    tern_wbuf_init(&w);

    cr_assert_eq(proto_encode_queue_list_page_resp(&w, 4, qi, 2, 1), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_queue_list_resp(body, h.body_len, &ql), 0);
    cr_expect_eq(ql.n, 2);
    cr_expect_eq(ql.paged, 1);
    cr_expect_eq(ql.more, 1);
    cr_assert(proto_next_queue_info(&ql, &pos, &q));
    cr_assert(proto_next_queue_info(&ql, &pos, &q));
    cr_expect(streq(q.name, q.name_len, "bb"));
    cr_expect_not(proto_next_queue_info(&ql, &pos, &q));

    /* The last page, and the unpaged answer of an older server. */
    w.len = 0;
    cr_assert_eq(proto_encode_queue_list_page_resp(&w, 4, qi, 0, 0), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_queue_list_resp(body, h.body_len, &ql), 0);
    cr_expect_eq(ql.n, 0);
    cr_expect_eq(ql.paged, 1);
    cr_expect_eq(ql.more, 0);
    w.len = 0;
    cr_assert_eq(proto_encode_queue_list_resp(&w, 4, qi, 1), 0);
    body = parse_one(&w, &h);
    cr_assert_eq(proto_decode_queue_list_resp(body, h.body_len, &ql), 0);
    cr_expect_eq(ql.paged, 0);
    cr_expect_eq(ql.more, 0);

    /* A more byte other than 0/1, two trailing bytes. */
    cr_expect_eq(proto_decode_queue_list_resp("\x00\x00\x00\x00\x02", 5, &ql),
                 TERN_EMALFORMED);
    cr_expect_eq(
        proto_decode_queue_list_resp("\x00\x00\x00\x00\x01\x00", 6, &ql),
        TERN_EMALFORMED);
    tern_wbuf_free(&w);
}
