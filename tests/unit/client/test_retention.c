/*
 * libtern's retention calls against the fake server: a hook answers
 * QUEUE_CREATE, QUEUE_UPDATE, QUEUE_INFO, OFFSET_FOR_TIME and GROUP_FETCH
 * and records what each request carried. Checked: the settings tail of a
 * create (defaults filled in, none when every field is default), the mask
 * of an update (only the fields set), the queue info object, offset for
 * time, the group fetch's skip report, and the refusals that send nothing
 * (no field to update, a bad overflow) or that come from a bad answer.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* What the hook saw (written on the server thread; read by the test once
 * the call that sent the request has returned). */
static struct
{
    int n_requests;
    uint8_t op;
    uint8_t has_settings;
    uint32_t mask;
    struct proto_queue_settings settings;
    uint64_t time_ms;
    uint8_t flags;
    char tag[80];      /* the first tag of a GROUP_FETCH's filter */
    int bad_info;      /* answer QUEUE_INFO with start above next */
    int old_group_ans; /* answer GROUP_FETCH without the skip tail */
} seen;

static enum fake_action retention_hook(struct fake_server *fs,
                                       int conn,
                                       const struct proto_header *h,
                                       const struct proto_request *r)
{
    struct tern_wbuf w;
    struct proto_fetched_msg m[2] = {{40, 5000, "m40", 3, NULL, 0},
                                     {41, 5001, "m41", 3, NULL, 0}};
    tern_wbuf_init(&w);
    switch (r->op) {
    case PROTO_OP_QUEUE_CREATE:
    case PROTO_OP_QUEUE_UPDATE:
        seen.has_settings = r->has_settings;
        seen.mask = r->set_mask;
        seen.settings = r->settings;
        proto_encode_empty_resp(&w, r->op, h->request_id);
        break;
    case PROTO_OP_QUEUE_INFO: {
        struct proto_queue_info_resp a = {
            .start_offset = seen.bad_info ? 9 : 40,
            .next_offset = 50,
            .bytes = 1234,
            .created_index = 77,
            .settings = {.max_age_ms = 2000,
                         .max_bytes = 262144,
                         .max_messages = 10,
                         .overflow = 1}};
        proto_encode_queue_info_resp(&w, h->request_id, &a);
        if (seen.bad_info) {
            /* Rewrite next_offset below start_offset. */
            tern_put_u64(w.base + PROTO_HEADER_SIZE + 8, 3);
            proto_frame_end(&w, 0);
        }
        break;
    }
    case PROTO_OP_OFFSET_FOR_TIME:
        seen.time_ms = r->time_ms;
        proto_encode_offset_resp(&w, h->request_id, 44);
        break;
    case PROTO_OP_GROUP_FETCH: {
        struct proto_group_skip skip = {.skipped = 37, .first_offset = 40};
        const char *t;
        uint8_t tl;
        size_t pos = 0;
        seen.flags = r->flags;
        seen.tag[0] = '\0';
        if (proto_next_tag(r, &pos, &t, &tl)) {
            (void)snprintf(seen.tag, sizeof seen.tag, "%.*s", (int)tl, t);
        }
        if (seen.old_group_ans) {
            proto_encode_fetch_resp(&w, r->op, h->request_id, 42, 50, m, 2);
        } else if ((r->flags & PROTO_FETCH_PROPS) != 0) {
            /* As the server builds it: the answer with properties and
             * its queue id, then the skip tail last. */
            proto_encode_fetch_props_resp(&w, r->op, h->request_id, 42, 50, m,
                                          2, 0xabc);
            proto_put_group_skip(&w, &skip);
            proto_frame_end(&w, 0);
        } else {
            proto_encode_group_fetch_skip_resp(&w, h->request_id, 42, 50, m, 2,
                                               &skip);
        }
        break;
    }
    default:
        tern_wbuf_free(&w);
        return FAKE_DEFAULT;
    }
    seen.n_requests++;
    seen.op = r->op;
    fake_send(fs, conn, &w);
    tern_wbuf_free(&w);
    return FAKE_HANDLED;
}

static struct tern_client *start(struct fake_server *fs)
{
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(fake_start(fs, retention_hook), 0);
    return client_for(fs->addr, 2000, 8);
}

Test(client_retention, create_with_options)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_queue_options o;

    tern_queue_options_init(&o);
    cr_expect_eq(o.max_age_ms, TERN_QUEUE_DEFAULT);
    cr_expect_eq(o.overflow, TERN_OVERFLOW_DEFAULT);
    /* Every field default: the plain create, no settings tail. */
    cr_assert_eq(tern_queue_create_opts(c, "q", &o), 0);
    cr_expect_eq(seen.op, PROTO_OP_QUEUE_CREATE);
    cr_expect_eq(seen.has_settings, 0);
    cr_assert_eq(tern_queue_create_opts(c, "q", NULL), 0);
    cr_expect_eq(seen.has_settings, 0);

    /* One field set: the others carry the built-in defaults. */
    o.max_bytes = 262144;
    cr_assert_eq(tern_queue_create_opts(c, "q", &o), 0);
    cr_expect_eq(seen.has_settings, 1);
    cr_expect_eq(seen.settings.max_bytes, 262144);
    cr_expect_eq(seen.settings.max_age_ms, TERN_QUEUE_DEFAULT_MAX_AGE_MS);
    cr_expect_eq(seen.settings.max_messages, 0);
    cr_expect_eq(seen.settings.overflow, 0);

    o.max_age_ms = 0; /* no age limit is a value, not the default */
    o.max_messages = 7;
    o.overflow = TERN_OVERFLOW_REJECT;
    cr_assert_eq(tern_queue_create_opts(c, "q", &o), 0);
    cr_expect_eq(seen.settings.max_age_ms, 0);
    cr_expect_eq(seen.settings.max_messages, 7);
    cr_expect_eq(seen.settings.overflow, 1);

    /* Refused before anything is sent. */
    int before = seen.n_requests;
    o.overflow = 5;
    cr_expect_eq(tern_queue_create_opts(c, "q", &o), TERN_EINVAL);
    cr_expect_neq(strstr(tern_client_errmsg(c), "overflow"), NULL);
    o.overflow = TERN_OVERFLOW_DEFAULT;
    cr_expect_eq(tern_queue_create_opts(c, "bad name", &o), TERN_EBADNAME);
    cr_expect_eq(seen.n_requests, before);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_retention, update_sends_only_the_fields_set)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_queue_options o;

    tern_queue_options_init(&o);
    cr_expect_eq(tern_queue_update(c, "q", &o), TERN_EINVAL);
    cr_expect_neq(strstr(tern_client_errmsg(c), "no setting"), NULL);
    cr_expect_eq(tern_queue_update(c, "q", NULL), TERN_EINVAL);
    cr_expect_eq(seen.n_requests, 0, "nothing sent");

    o.max_messages = 100;
    cr_assert_eq(tern_queue_update(c, "q", &o), 0);
    cr_expect_eq(seen.op, PROTO_OP_QUEUE_UPDATE);
    cr_expect_eq(seen.mask, PROTO_SET_MAX_MESSAGES);
    cr_expect_eq(seen.settings.max_messages, 100);

    tern_queue_options_init(&o);
    o.max_age_ms = 2000;
    o.overflow = TERN_OVERFLOW_DROP_OLDEST;
    cr_assert_eq(tern_queue_update(c, "q", &o), 0);
    cr_expect_eq(seen.mask, PROTO_SET_MAX_AGE | PROTO_SET_OVERFLOW);
    cr_expect_eq(seen.settings.max_age_ms, 2000);
    cr_expect_eq(seen.settings.overflow, 0);

    o.max_bytes = 0;
    o.max_messages = 0;
    cr_assert_eq(tern_queue_update(c, "q", &o), 0);
    cr_expect_eq(seen.mask, PROTO_SET_ALL);
    cr_expect_eq(seen.settings.max_bytes, 0);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_retention, queue_info_object)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_queue_info *q = NULL;

    cr_assert_eq(tern_queue_info(c, "q", &q), 0);
    cr_expect_eq(seen.op, PROTO_OP_QUEUE_INFO);
    cr_expect_eq(tern_queue_info_start_offset(q), 40);
    cr_expect_eq(tern_queue_info_next_offset(q), 50);
    cr_expect_eq(tern_queue_info_messages(q), 10);
    cr_expect_eq(tern_queue_info_bytes(q), 1234);
    cr_expect_eq(tern_queue_info_created_index(q), 77);
    cr_expect_eq(tern_queue_info_max_age_ms(q), 2000);
    cr_expect_eq(tern_queue_info_max_bytes(q), 262144);
    cr_expect_eq(tern_queue_info_max_messages(q), 10);
    cr_expect_eq(tern_queue_info_overflow(q), TERN_OVERFLOW_REJECT);
    cr_expect_str_eq(tern_overflow_name(tern_queue_info_overflow(q)), "reject");
    cr_expect_str_eq(tern_overflow_name(TERN_OVERFLOW_DROP_OLDEST),
                     "drop-oldest");
    cr_expect_str_eq(tern_overflow_name(9), "unknown");
    tern_queue_info_free(q);
    tern_queue_info_free(NULL);

    /* An answer whose start is past its end is not a queue info. */
    seen.bad_info = 1;
    q = (struct tern_queue_info *)&seen; /* must be reset to NULL */
    cr_expect_eq(tern_queue_info(c, "q", &q), TERN_EMALFORMED);
    cr_expect_null(q);
    cr_expect_eq(tern_queue_info(c, "bad name", &q), TERN_EBADNAME);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_retention, offset_for_time)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    uint64_t off = 0;

    cr_assert_eq(tern_offset_for_time(c, "q", 1796378400000ull, &off), 0);
    cr_expect_eq(seen.op, PROTO_OP_OFFSET_FOR_TIME);
    cr_expect_eq(seen.time_ms, 1796378400000ull);
    cr_expect_eq(off, 44);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client_retention, group_fetch_reports_skipped)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_fetch_result *r = NULL;
    uint64_t off;

    cr_assert_eq(tern_group_fetch(c, "q", "g", 10, 0, 0, &r), 0);
    cr_expect_eq(seen.flags, PROTO_GROUP_FETCH_SKIPPED, "libtern asks");
    cr_expect_eq(tern_fetch_result_skipped(r), 37);
    cr_expect_eq(tern_fetch_result_start_offset(r), 40);
    cr_assert_eq(tern_fetch_result_count(r), 2);
    cr_assert_eq(tern_fetch_result_get(r, 1, &off, NULL, NULL, NULL), 0);
    cr_expect_eq(off, 41);
    cr_expect_eq(tern_fetch_result_next_offset(r), 42);
    tern_fetch_result_free(r);
    cr_expect_eq(tern_fetch_result_skipped(NULL), 0);

    /* An answer without the tail (a server that ignored the flag). */
    seen.old_group_ans = 1;
    r = NULL;
    cr_expect_eq(tern_group_fetch(c, "q", "g", 10, 0, 0, &r), TERN_EMALFORMED);
    cr_expect_null(r);
    tern_client_free(c);
    fake_stop(&fs);
}

/* tern_group_fetch_ex asks for the skip tail too, with a tag filter and
 * with properties (the tail after the queue id), and its result tells. */
Test(client_retention, group_fetch_ex_reports_skipped)
{
    struct fake_server fs;
    struct tern_client *c = start(&fs);
    struct tern_fetch_result *r = NULL;
    struct tern_message_props p;
    uint64_t off;

    struct tern_fetch_options o = {10, 0, 0, "paid", 0};
    cr_assert_eq(tern_group_fetch_ex(c, "q", "g", &o, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.flags, PROTO_GROUP_FETCH_SKIPPED | PROTO_FETCH_TAGS);
    cr_expect_str_eq(seen.tag, "paid");
    cr_expect_eq(tern_fetch_result_skipped(r), 37);
    cr_expect_eq(tern_fetch_result_start_offset(r), 40);
    cr_assert_eq(tern_fetch_result_count(r), 2);
    cr_assert_eq(tern_fetch_result_get(r, 0, &off, NULL, NULL, NULL), 0);
    cr_expect_eq(off, 40);
    cr_expect_eq(tern_fetch_result_next_offset(r), 42);
    tern_fetch_result_free(r);

    o.properties = 1;
    r = NULL;
    cr_assert_eq(tern_group_fetch_ex(c, "q", "g", &o, &r), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(seen.flags, PROTO_GROUP_FETCH_SKIPPED | PROTO_FETCH_PROPS |
                                 PROTO_FETCH_TAGS);
    cr_expect_eq(tern_fetch_result_skipped(r), 37);
    cr_expect_eq(tern_fetch_result_start_offset(r), 40);
    cr_assert_eq(tern_fetch_result_count(r), 2);
    cr_assert_eq(tern_fetch_result_props(r, 1, &p), 0);
    cr_expect_str_eq(p.id, "0000000000000abc0000000000000029");
    cr_expect_eq(p.append_ts_ms, 5001);
    tern_fetch_result_free(r);

    /* An answer without the tail is refused, with properties too. */
    seen.old_group_ans = 1;
    r = NULL;
    o.properties = 0;
    cr_expect_eq(tern_group_fetch_ex(c, "q", "g", &o, &r), TERN_EMALFORMED);
    cr_expect_null(r);
    tern_client_free(c);
    fake_stop(&fs);
}

/* The model's answers: a plain fetch starts where it was asked, and the
 * model's group fetch (skip tail, nothing skipped) reads as before. */
Test(client_retention, fetch_start_offset_with_the_model)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m[3] = {{"a", 1}, {"b", 1}, {"c", 1}};
    struct tern_fetch_result *r = NULL;

    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 2000, 8);
    create_queue(c, "q");
    cr_assert_eq(tern_produce(c, "q", m, 3, NULL), 0);
    cr_assert_eq(tern_fetch(c, "q", 1, 10, 0, 0, &r), 0);
    cr_expect_eq(tern_fetch_result_start_offset(r), 1);
    cr_expect_eq(tern_fetch_result_skipped(r), 0);
    tern_fetch_result_free(r);
    cr_assert_eq(tern_group_fetch(c, "q", "g", 10, 0, 0, &r), 0);
    cr_expect_eq(tern_fetch_result_count(r), 3);
    cr_expect_eq(tern_fetch_result_skipped(r), 0);
    cr_expect_eq(tern_fetch_result_start_offset(r), 0);
    tern_fetch_result_free(r);
    tern_client_free(c);
    fake_stop(&fs);
}
