/*
 * libFuzzer target for the client wire protocol (proto/proto.c): feeds
 * arbitrary bytes to the header decoder, the checksum verifier, the request
 * decoders of every op, the error-frame decoder and every response decoder,
 * and walks every iterator (the security metadata ops 10..19 and the
 * authentication ops 20..21, the message property ops, message trace,
 * the shared group ops 27..29, the delayed produce, op 31, the
 * leadership transfer, op 33, the membership changes, op 34, and the
 * backup, op 36, and HELLO, op 37, included; the STATUS answer's tail in
 * its versions with the server version and the members' roles; frames of
 * both versions, each sealed in the other and back; FETCH answers in the
 * runs layout, with and without properties asked for).
 * Decoders must never read out of bounds, and a decoded request must re-encode
 * to a body that decodes to the same fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <proto.h>

static void name_copy(char *dst, const char *src, size_t n)
{
    if (n > 0) {
        memcpy(dst, src, n);
    }
    dst[n] = '\0';
}

/* PRODUCE's messages and properties blocks, for the re-encoding. */
struct pm_arr
{
    const struct proto_msg *m;
    const struct proto_msg *p;
};

static void pm_arr_at(const void *msgs,
                      uint32_t i,
                      struct proto_msg *m,
                      struct proto_msg *p)
{
    const struct pm_arr *a = msgs;
    *m = a->m[i];
    *p = a->p[i];
}

/* SHARED_CONFIG, RECEIVE and SETTLE (ops 27..29). */
static int reencode_shared(struct tern_wbuf *w,
                           const struct proto_request *r,
                           const char *q,
                           const char *g)
{
    static struct proto_settle_item items[PROTO_SHARED_LIST_MAX];
    char dlq[PROTO_MAX_NAME + 1];
    struct proto_shared_settings s = r->shared;
    size_t pos = 0;
    uint32_t k = 0;
    switch (r->op) {
    case PROTO_OP_SHARED_CONFIG:
        name_copy(dlq, s.dlq, s.dlq_len);
        s.dlq = dlq;
        return proto_encode_shared_config(w, 1, q, g, r->set_mask, &s);
    case PROTO_OP_RECEIVE:
        return proto_encode_receive(w, 1, q, g, r->consumer_id, r->max_msgs,
                                    r->wait_ms);
    default:
        while (k < PROTO_SHARED_LIST_MAX &&
               proto_next_settle(r, &pos, &items[k])) {
            k++;
        }
        if (k != r->n_items) {
            abort();
        }
        return proto_encode_settle(w, 1, q, g, items, k);
    }
}

/* FETCH / GROUP_FETCH (group NULL) with the decoded flags and tags. */
static int reencode_fetch(struct tern_wbuf *w,
                          const struct proto_request *r,
                          const char *q,
                          const char *group)
{
    char tags[PROTO_MAX_FILTER_TAGS][PROTO_MAX_TAG + 1];
    const char *tp[PROTO_MAX_FILTER_TAGS];
    const char *t;
    uint8_t tl;
    size_t pos = 0;
    uint32_t k = 0;
    while (k < PROTO_MAX_FILTER_TAGS && proto_next_tag(r, &pos, &t, &tl)) {
        name_copy(tags[k], t, tl);
        tp[k] = tags[k];
        k++;
    }
    if (k != r->n_tags) {
        abort();
    }
    struct proto_fetch_filter f = {(uint8_t)(r->flags & ~PROTO_FETCH_TAGS), tp,
                                   k};
    return proto_encode_fetch_filtered(w, 1, q, group, r->offset, r->max_msgs,
                                       r->max_bytes, r->wait_ms, &f);
}

/* The security lists, unpaged (old form) or with the paging tail. */
static int reencode_list(struct tern_wbuf *w, const struct proto_request *r)
{
    char u[PROTO_MAX_NAME + 1], a[PROTO_MAX_NAME + 1];
    char an[PROTO_MAX_NAME + 1], ap[PROTO_MAX_NAME + 1];
    struct proto_list_cursor after = {a, an, ap};
    name_copy(u, r->user, r->user_len);
    name_copy(a, r->after, r->after_len);
    name_copy(an, r->after_ns, r->after_ns_len);
    name_copy(ap, r->after_pattern, r->after_pattern_len);
    if (r->paged) {
        return proto_encode_list_page_req(w, r->op, 1, u, &after, r->max_count);
    }
    if (r->op == PROTO_OP_ACL_LIST) {
        return proto_encode_acl_list(w, 1, u);
    }
    return proto_encode_simple(w, r->op, 1);
}

/* Encode r again from its decoded fields: the body must come out byte for
 * byte as it went in (every request has one encoding). */
static void reencode(const struct proto_request *r,
                     const uint8_t *body,
                     size_t len)
{
    char q[PROTO_MAX_NAME + 1], g[PROTO_MAX_NAME + 1];
    char u[PROTO_MAX_NAME + 1], n[PROTO_MAX_NAME + 1];
    char pat[PROTO_MAX_NAME + 1];
    struct proto_msg *m = NULL, *p = NULL;
    struct proto_header h;
    struct tern_wbuf w;
    const void *b;
    int rv;
    name_copy(q, r->queue, r->queue_len);
    name_copy(g, r->group, r->group_len);
    tern_wbuf_init(&w);
    switch (r->op) {
    case PROTO_OP_QUEUE_CREATE:
        rv = proto_encode_queue_create(&w, 1, q,
                                       r->has_settings ? &r->settings : NULL);
        break;
    case PROTO_OP_QUEUE_DELETE:
        rv = proto_encode_queue_op(&w, r->op, 1, q);
        break;
    case PROTO_OP_QUEUE_UPDATE:
        rv = proto_encode_queue_update(&w, 1, q, r->set_mask, &r->settings);
        break;
    case PROTO_OP_QUEUE_INFO:
        rv = proto_encode_queue_info_req(&w, 1, q);
        break;
    case PROTO_OP_OFFSET_FOR_TIME:
        rv = proto_encode_offset_for_time(&w, 1, q, r->time_ms);
        break;
    case PROTO_OP_QUEUE_LIST:
        if (r->paged) {
            char a[PROTO_MAX_NAME + 1];
            name_copy(a, r->after, r->after_len);
            rv = proto_encode_queue_list_req(&w, 1, a, r->max_count);
        } else {
            rv = proto_encode_simple(&w, r->op, 1);
        }
        break;
    case PROTO_OP_STATUS:
        rv = proto_encode_status_req(&w, 1, r->flags);
        break;
    case PROTO_OP_GROUP_STATUS: {
        char a[PROTO_MAX_NAME + 1];
        name_copy(a, r->after, r->after_len);
        rv = proto_encode_group_status(&w, 1, q, g, a, r->max_count);
        break;
    }
    case PROTO_OP_PRODUCE: {
        size_t pos = 0;
        uint32_t k = 0;
        m = malloc(sizeof *m * (r->n_msgs > 0 ? r->n_msgs : 1));
        if (m == NULL) {
            abort();
        }
        while (k < r->n_msgs && proto_next_msg(r, &pos, &m[k])) {
            k++;
        }
        if (r->props_len == 0) {
            rv = proto_encode_produce(&w, 1, q, r->producer_id, r->seq, m, k);
            break;
        }
        p = calloc(r->n_msgs > 0 ? r->n_msgs : 1, sizeof *p);
        if (p == NULL) {
            abort();
        }
        pos = 0;
        for (uint32_t i = 0; i < k; i++) {
            if (!proto_next_props(r, &pos, &p[i])) {
                abort();
            }
        }
        struct pm_arr arr = {m, p};
        rv = proto_encode_produce_props(&w, 1, q, r->producer_id, r->seq,
                                        pm_arr_at, &arr, k);
        break;
    }
    case PROTO_OP_PRODUCE_DELAYED: {
        size_t pos = 0;
        uint32_t k = 0;
        m = malloc(sizeof *m * (r->n_msgs > 0 ? r->n_msgs : 1));
        p = calloc(r->n_msgs > 0 ? r->n_msgs : 1, sizeof *p);
        if (m == NULL || p == NULL) {
            abort();
        }
        while (k < r->n_msgs && proto_next_msg(r, &pos, &m[k])) {
            k++;
        }
        pos = 0;
        for (uint32_t i = 0; r->props_len > 0 && i < k; i++) {
            if (!proto_next_props(r, &pos, &p[i])) {
                abort();
            }
        }
        struct pm_arr arr = {m, p};
        rv = proto_encode_produce_delayed(&w, 1, q, r->time_ms, r->producer_id,
                                          r->seq, pm_arr_at, &arr, k);
        break;
    }
    case PROTO_OP_FETCH:
        rv = reencode_fetch(&w, r, q, NULL);
        break;
    case PROTO_OP_GROUP_FETCH:
        rv = reencode_fetch(&w, r, q, g);
        break;
    case PROTO_OP_MESSAGE_GET:
        rv = proto_encode_message_get(
            &w, 1, q, r->get_by == PROTO_GET_ID ? r->queue_id : 0, r->offset,
            r->get_by == PROTO_GET_KEY ? r->key : NULL, r->key_len,
            r->max_count);
        break;
    case PROTO_OP_MESSAGE_TRACE:
        rv = proto_encode_message_trace_flags(&w, 1, q, r->offset, r->flags);
        break;
    case PROTO_OP_SHARED_CONFIG:
    case PROTO_OP_RECEIVE:
    case PROTO_OP_SETTLE:
        rv = reencode_shared(&w, r, q, g);
        break;
    case PROTO_OP_CLAIM:
        rv = proto_encode_claim(&w, 1, q, g, r->consumer_id, r->flags,
                                r->lease_ms);
        break;
    case PROTO_OP_GROUP_COMMIT:
        rv = proto_encode_group_commit(&w, 1, q, g, r->offset);
        break;
    case PROTO_OP_MEMBER: {
        char ra[PROTO_MEMBER_ADDR_MAX + 1], ca[PROTO_MEMBER_ADDR_MAX + 1];
        name_copy(ra, r->raft_address, r->raft_address_len);
        name_copy(ca, r->client_address, r->client_address_len);
        rv = proto_encode_member_req(&w, 1, r->flags, r->member_id, ra, ca,
                                     r->wait_ms);
        break;
    }
    case PROTO_OP_STATS:
        rv = proto_encode_stats_req(&w, 1, r->flags);
        break;
    case PROTO_OP_USER_SET:
        name_copy(u, r->user, r->user_len);
        rv = proto_encode_user_set(&w, 1, u, r->bits, r->cred, r->cred_len);
        break;
    case PROTO_OP_USER_DELETE:
        name_copy(u, r->user, r->user_len);
        rv = proto_encode_name_op(&w, r->op, 1, u);
        break;
    case PROTO_OP_NAMESPACE_DELETE:
        name_copy(n, r->ns, r->ns_len);
        rv = proto_encode_name_op(&w, r->op, 1, n);
        break;
    case PROTO_OP_ACL_SET:
    case PROTO_OP_ACL_DELETE:
        name_copy(u, r->user, r->user_len);
        name_copy(n, r->ns, r->ns_len);
        name_copy(pat, r->pattern, r->pattern_len);
        rv = proto_encode_acl_op(&w, r->op, 1, u, n, pat, r->bits);
        break;
    case PROTO_OP_USER_LIST:
    case PROTO_OP_ACL_LIST:
    case PROTO_OP_NAMESPACE_LIST:
        rv = reencode_list(&w, r);
        break;
    case PROTO_OP_NAMESPACE_SET:
        name_copy(n, r->ns, r->ns_len);
        rv = proto_encode_namespace_set(&w, 1, n, r->max_queues,
                                        r->max_bytes_quota,
                                        r->produce_bytes_per_s);
        break;
    case PROTO_OP_PRODUCER_INIT:
        rv = proto_encode_simple(&w, r->op, 1);
        break;
    case PROTO_OP_AUTH_START: {
        char mech[PROTO_MAX_MECHANISM + 1];
        name_copy(mech, r->mechanism, r->mechanism_len);
        name_copy(n, r->ns, r->ns_len);
        rv = proto_encode_auth_start(&w, 1, mech, n, r->auth_data,
                                     r->auth_data_len);
        break;
    }
    case PROTO_OP_AUTH_CONTINUE:
        rv = proto_encode_auth_continue(&w, 1, r->auth_data, r->auth_data_len);
        break;
    case PROTO_OP_CLUSTER_TRANSFER:
        rv = proto_encode_cluster_transfer(&w, 1, r->to_id);
        break;
    default:
        abort();
    }
    if (rv != 0 ||
        proto_frame_parse(w.base, w.len, PROTO_DEFAULT_MAX_BODY, &h, &b) != 0 ||
        h.body_len != len || (len > 0 && memcmp(b, body, len) != 0)) {
        abort();
    }
    free(m);
    free(p);
    tern_wbuf_free(&w);
}

static void walk_request(const struct proto_request *r)
{
    struct proto_msg m;
    size_t pos = 0;
    uint32_t n = 0;
    volatile uint8_t sink = 0;
    while (proto_next_msg(r, &pos, &m)) {
        if (m.len > 0) {
            sink ^= ((const uint8_t *)m.data)[m.len - 1];
        }
        n++;
    }
    if ((r->op == PROTO_OP_PRODUCE || r->op == PROTO_OP_PRODUCE_DELAYED) &&
        n != r->n_msgs) {
        abort();
    }
    (void)sink;
}

/* The list answers of the security metadata ops: every record the
 * decoder counted must come out of the iterator. */
static void list_responses(const uint8_t *d, size_t len)
{
    struct proto_list_resp lr;
    uint64_t id;
    size_t pos;
    uint32_t n;
    if (proto_decode_list_resp(PROTO_OP_USER_LIST, d, len, &lr) == 0) {
        struct proto_user_entry e;
        for (pos = 0, n = 0; proto_next_user(&lr, &pos, &e); n++) {
        }
        if (n != lr.n) {
            abort();
        }
    }
    if (proto_decode_list_resp(PROTO_OP_ACL_LIST, d, len, &lr) == 0) {
        struct proto_acl_entry e;
        for (pos = 0, n = 0; proto_next_acl(&lr, &pos, &e); n++) {
        }
        if (n != lr.n) {
            abort();
        }
    }
    if (proto_decode_list_resp(PROTO_OP_NAMESPACE_LIST, d, len, &lr) == 0) {
        struct proto_namespace_entry e;
        for (pos = 0, n = 0; proto_next_namespace(&lr, &pos, &e); n++) {
        }
        if (n != lr.n) {
            abort();
        }
    }
    (void)proto_decode_producer_init_resp(d, len, &id);
    {
        const void *ad;
        uint32_t an;
        if (proto_decode_auth_resp(d, len, &ad, &an) == 0 && an > 0 &&
            ((const uint8_t *)ad < d || (const uint8_t *)ad + an > d + len)) {
            abort();
        }
    }
}

static void responses(const uint8_t *d, size_t len)
{
    struct proto_produce_resp pr;
    struct proto_fetch_resp fr;
    struct proto_queue_list_resp ql;
    struct proto_status st;
    struct proto_stats ss;
    size_t pos;
    (void)proto_decode_empty_resp(d, len);
    if (proto_decode_stats_resp(d, len, &ss) == 0) {
        /* Stage names borrow from the body, within their bound. */
        for (unsigned i = 0; i < ss.n_stages; i++) {
            const uint8_t *nm = (const uint8_t *)ss.stages[i].name;
            if (ss.n_stages > PROTO_STATS_MAX_STAGES ||
                ss.stages[i].name_len > PROTO_STATS_MAX_STAGE_NAME ||
                (ss.stages[i].name_len > 0 &&
                 (nm < d || nm + ss.stages[i].name_len > d + len))) {
                abort();
            }
        }
    }
    {
        struct proto_backup_info bk;
        (void)proto_decode_backup_resp(d, len, &bk);
    }
    (void)proto_decode_produce_resp(d, len, &pr);
    {
        uint32_t dcount;
        uint64_t ddue;
        (void)proto_decode_produce_delayed_resp(d, len, &dcount, &ddue);
    }
    {
        uint8_t granted;
        uint64_t holder, until;
        (void)proto_decode_claim_resp(d, len, &granted, &holder, &until);
    }
    {
        uint64_t leader, term;
        if (proto_decode_cluster_transfer_resp(d, len, &leader, &term) == 0 &&
            leader == 0) {
            abort();
        }
    }
    {
        uint8_t role;
        if (proto_decode_member_resp(d, len, &role) == 0 &&
            role > PROTO_MEMBER_ABSENT) {
            abort();
        }
    }
    if (proto_decode_fetch_resp(d, len, &fr) == 0) {
        struct proto_fetched_msg m;
        uint32_t n = 0;
        pos = 0;
        while (proto_next_fetched(&fr, &pos, &m)) {
            n++;
        }
        if (n != fr.n) {
            abort();
        }
    }
    for (int wp = 0; wp < 2; wp++) {
        /* The runs layout: the iterator yields exactly n messages at
         * strictly increasing offsets, every byte within the body. */
        if (proto_decode_fetch_runs_resp(d, len, wp, &fr) == 0) {
            struct proto_fetch_iter it = {0};
            struct proto_fetched_msg m;
            uint32_t n = 0;
            uint64_t next = 0;
            while (proto_fetch_iter_next(&fr, &it, &m)) {
                const uint8_t *md = m.data, *mp = m.props;
                if ((n > 0 && m.offset < next) ||
                    (m.len > 0 && (md < d || md + m.len > d + len)) ||
                    (m.props_len > 0 &&
                     (!wp || mp < d || mp + m.props_len > d + len))) {
                    abort();
                }
                next = m.offset + 1;
                n++;
            }
            pos = 0;
            if (n != fr.n || proto_next_fetched(&fr, &pos, &m) != 0) {
                abort();
            }
        }
    }
    if (proto_decode_fetch_props_resp(d, len, &fr) == 0) {
        struct proto_fetched_msg m;
        uint32_t n = 0;
        for (pos = 0; proto_next_fetched(&fr, &pos, &m); n++) {
        }
        if (n != fr.n) {
            abort();
        }
    }
    if (proto_decode_message_get_resp(d, len, &fr) == 0) {
        struct proto_fetched_msg m;
        uint32_t n = 0;
        for (pos = 0; proto_next_fetched(&fr, &pos, &m); n++) {
        }
        if (n != fr.n) {
            abort();
        }
    }
    if (proto_decode_receive_resp(d, len, &fr) == 0) {
        struct proto_fetched_msg m;
        uint32_t n = 0;
        for (pos = 0; proto_next_fetched(&fr, &pos, &m); n++) {
        }
        if (n != fr.n) {
            abort();
        }
    }
    const uint8_t *done;
    uint32_t n_done;
    (void)proto_decode_settle_resp(d, len, &done, &n_done);
    struct proto_trace tr;
    if (proto_decode_message_trace_resp(d, len, &tr) == 0) {
        struct proto_trace_group tg;
        uint32_t n = 0;
        for (pos = 0; proto_next_trace_group(&tr, &pos, &tg); n++) {
        }
        if (n != tr.n_groups) {
            abort();
        }
        struct proto_delivery dv;
        n = 0;
        for (pos = 0; proto_next_delivery(&tr, &pos, &dv); n++) {
        }
        if (n != tr.n_deliveries) {
            abort();
        }
    }
    struct proto_group_status_resp gs;
    if (proto_decode_group_status_resp(d, len, &gs) == 0) {
        struct proto_group_status g;
        struct proto_status_consumer sc;
        uint32_t n = 0;
        for (pos = 0; proto_next_group_status(&gs, &pos, &g); n++) {
            for (uint32_t i = 0; i < g.n_consumers; i++) {
                proto_status_consumer(&g, i, &sc);
            }
        }
        if (n != gs.n) {
            abort();
        }
    }
    if (proto_decode_queue_list_resp(d, len, &ql) == 0) {
        struct proto_queue_info q;
        uint32_t n = 0;
        pos = 0;
        while (proto_next_queue_info(&ql, &pos, &q)) {
            n++;
        }
        if (n != ql.n) {
            abort();
        }
    }
    if (proto_decode_status_resp(d, len, &st) == 0) {
        struct proto_member m;
        uint32_t n = 0;
        pos = 0;
        while (proto_next_member(&st, &pos, &m)) {
            n++;
        }
        if (n != st.n_members || st.server_version == NULL ||
            st.server_version_len > PROTO_MAX_SERVER_VERSION) {
            abort();
        }
        if (st.has_membership) {
            /* One role per member, each read in bounds. */
            unsigned sum = 0;
            if (st.n_member_roles != st.n_members ||
                st.self_role > PROTO_MEMBER_ABSENT) {
                abort();
            }
            for (uint32_t i = 0; i < st.n_member_roles; i++) {
                sum += st.member_roles[i];
            }
            (void)sum;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_header h;
    struct proto_request r;
    struct proto_error e;
    const void *body;

    if (size >= PROTO_HEADER_SIZE) {
        if (proto_header_decode(data, PROTO_DEFAULT_MAX_BODY, &h) == 0 &&
            size - PROTO_HEADER_SIZE >= h.body_len) {
            (void)proto_frame_verify(data, data + PROTO_HEADER_SIZE,
                                     h.body_len);
        }
        if (proto_frame_parse(data, size, PROTO_DEFAULT_MAX_BODY, &h, &body) ==
            0) {
            /* Sealed in the other frame version and back, a frame is the
             * same bytes, and verifies in both. */
            size_t flen = PROTO_HEADER_SIZE + (size_t)h.body_len;
            uint8_t other = h.version == PROTO_VERSION_XXH3
                                ? TERN_PROTO_VERSION
                                : PROTO_VERSION_XXH3;
            uint8_t *f = malloc(flen);
            if (f != NULL) {
                memcpy(f, data, flen);
                if (proto_frame_seal_request(f, flen, h.request_id, other) !=
                        0 ||
                    proto_frame_verify(f, f + PROTO_HEADER_SIZE, h.body_len) !=
                        0 ||
                    proto_frame_seal_request(f, flen, h.request_id,
                                             h.version) != 0 ||
                    memcmp(f, data, flen) != 0) {
                    abort();
                }
                free(f);
            }
        }
    }
    if (size >= 1) {
        /* First byte picks the op, the rest is the body. */
        const uint8_t *b = data + 1;
        size_t blen = size - 1;
        if (proto_decode_request(data[0], b, blen, &r) == 0) {
            walk_request(&r);
        }
        for (int op = PROTO_OP_QUEUE_CREATE; op <= PROTO_OP_SETTLE; op++) {
            if (proto_decode_request((uint8_t)op, b, blen, &r) == 0) {
                walk_request(&r);
                reencode(&r, b, blen);
            }
        }
        /* Claim (op 30), outside the range above. */
        if (proto_decode_request(PROTO_OP_CLAIM, b, blen, &r) == 0) {
            walk_request(&r);
            reencode(&r, b, blen);
        }
        /* Delayed produce (op 31) and group status (op 32), outside the
         * range above. */
        if (proto_decode_request(PROTO_OP_PRODUCE_DELAYED, b, blen, &r) == 0) {
            walk_request(&r);
            reencode(&r, b, blen);
        }
        if (proto_decode_request(PROTO_OP_GROUP_STATUS, b, blen, &r) == 0) {
            walk_request(&r);
            reencode(&r, b, blen);
        }
        /* Membership changes (op 34). */
        if (proto_decode_request(PROTO_OP_MEMBER, b, blen, &r) == 0) {
            walk_request(&r);
            reencode(&r, b, blen);
        }
        /* Leadership transfer (op 33). */
        if (proto_decode_request(PROTO_OP_CLUSTER_TRANSFER, b, blen, &r) == 0) {
            walk_request(&r);
            reencode(&r, b, blen);
        }
        /* HELLO (op 37): its features re-encode to the body's first four
         * bytes (what follows is skipped); its answer. */
        if (proto_decode_request(PROTO_OP_HELLO, b, blen, &r) == 0) {
            struct tern_wbuf w;
            tern_wbuf_init(&w);
            if (blen < 4 || proto_encode_hello(&w, 1, r.bits) != 0 ||
                w.len != PROTO_HEADER_SIZE + 4 ||
                memcmp(w.base + PROTO_HEADER_SIZE, b, 4) != 0) {
                abort();
            }
            tern_wbuf_free(&w);
        }
        {
            uint32_t features;
            (void)proto_decode_hello_resp(b, blen, &features);
        }
        /* Backup (op 36): the path and flags re-encode to the same body. */
        if (proto_decode_request(PROTO_OP_BACKUP, b, blen, &r) == 0) {
            char dir[PROTO_BACKUP_PATH_MAX + 1];
            struct tern_wbuf w;
            name_copy(dir, r.path, r.path_len);
            tern_wbuf_init(&w);
            if (proto_encode_backup(&w, 1, r.flags, dir, r.min_applied) != 0 ||
                w.len != PROTO_HEADER_SIZE + blen ||
                memcmp(w.base + PROTO_HEADER_SIZE, b, blen) != 0) {
                abort();
            }
            tern_wbuf_free(&w);
        }
        (void)proto_decode_error(b, blen, TERN_ENOTLEADER, &e);
        (void)proto_decode_error(b, blen, TERN_EINTERNAL, &e);
        (void)proto_decode_error(b, blen, (int32_t)data[0] - 128, &e);
    }
    responses(data, size);
    list_responses(data, size);
    return 0;
}
