/*
 * libtern's deadlines and tern_produce_resend: TERN_ETIMEDOUT when the
 * server never answers or stops listening, -ECONNREFUSED at once when
 * nothing ever listened, then resending the batch with the unknown outcome
 * (appended once, or TERN_ESEQUENCE behind a gap).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <tern/tern.h>
#include <tern_common.h>

#include "client_fixture.h"
#include "fake_server.h"

/* ---- Timeouts ---- */

Test(client, timeout_when_server_never_answers)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"x", 1};
    int64_t t0;
    cr_assert_eq(fake_start(&fs, silent_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    t0 = now_ms();
    cr_expect_eq(tern_produce(c, "q", &m, 1, NULL), TERN_ETIMEDOUT);
    cr_expect_geq(now_ms() - t0, 250);
    cr_expect_lt(now_ms() - t0, 5000);
    cr_expect_neq(tern_client_errmsg(c)[0], '\0');
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, timeout_when_nothing_listens)
{
    struct fake_server fs;
    struct tern_client *c;
    char addr[64];
    cr_assert_eq(fake_start(&fs, NULL), 0);
    (void)snprintf(addr, sizeof addr, "%s", fs.addr);
    fake_stop(&fs); /* the port is now closed */
    c = client_for(addr, 300, 8);
    /* Never connected: refused at once, nothing was sent. */
    cr_expect_eq(tern_queue_create(c, "q"), -ECONNREFUSED);
    cr_expect_neq(strstr(tern_client_errmsg(c), "refused"), NULL, "%s",
                  tern_client_errmsg(c));
    tern_client_free(c);
}

/* Once a connection came up, a server that goes away is retried until the
 * deadline: TERN_ETIMEDOUT, with the refusal as the last error. */
Test(client, timeout_when_server_stops_listening)
{
    struct fake_server fs;
    struct tern_client *c;
    cr_assert_eq(fake_start(&fs, NULL), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    fake_stop(&fs); /* the port is now closed */
    cr_expect_eq(tern_queue_create(c, "q2"), TERN_ETIMEDOUT);
    cr_expect_neq(strstr(tern_client_errmsg(c), "refused"), NULL, "%s",
                  tern_client_errmsg(c));
    tern_client_free(c);
}

/* ---- tern_produce_resend: the batch with an unknown outcome ---- */

/* fs->counter: 1 = produce requests are applied by the model but never
 * answered (the answer is lost), 2 = dropped silently (never applied),
 * 0 = normal. Set by the test thread under fs->mu. */
static enum fake_action lose_produce_hook(struct fake_server *fs,
                                          int conn,
                                          const struct proto_header *h,
                                          const struct proto_request *r)
{
    (void)conn;
    if (r->op != PROTO_OP_PRODUCE || fs->counter == 0) {
        return FAKE_DEFAULT;
    }
    if (fs->counter == 1) {
        struct tern_wbuf w;
        tern_wbuf_init(&w);
        fake_model_answer(fs, h, r, &w);
        tern_wbuf_free(&w);
        return FAKE_HANDLED;
    }
    return FAKE_SILENT;
}

static void set_mode(struct fake_server *fs, int mode)
{
    (void)pthread_mutex_lock(&fs->mu);
    fs->counter = mode;
    (void)pthread_mutex_unlock(&fs->mu);
}

static void resend_after_timeout(int mode)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg m = {"r-0", 3};
    struct tern_msg other = {"r-X", 3};
    uint64_t base = 77;
    int n;
    cr_assert_eq(fake_start(&fs, lose_produce_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    cr_expect_eq(tern_produce_resend(c, "q", &m, 1, &base), TERN_EINVAL,
                 "nothing to resend yet");

    set_mode(&fs, mode);
    cr_assert_eq(tern_produce(c, "q", &m, 1, &base), TERN_ETIMEDOUT);
    cr_expect_eq(fake_n_msgs(&fs), mode == 1 ? 1 : 0);
    set_mode(&fs, 0);

    cr_expect_eq(tern_produce_resend(c, "q", &other, 1, &base), TERN_EINVAL,
                 "other bytes are not the batch that timed out");
    cr_expect_eq(
        tern_produce_resend(c, "q", (struct tern_msg[]){m, m}, 2, &base),
        TERN_EINVAL);
    cr_assert_eq(tern_produce_resend(c, "q", &m, 1, &base), 0, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(base, 0, "the offset of the one copy");
    cr_expect_eq(fake_n_msgs(&fs), 1, "appended exactly once");
    n = fake_n_records(&fs);
    cr_assert_geq(n, 2);
    cr_expect_eq(fake_record_at(&fs, n - 1).seq, 1, "same sequence");
    cr_expect_eq(fake_record_at(&fs, n - 1).producer_id,
                 tern_client_producer_id(c), "same producer id");
    cr_expect_eq(tern_produce_resend(c, "q", &m, 1, &base), TERN_EINVAL,
                 "resolved: nothing left to resend");
    /* The next batch takes the next sequence. */
    cr_expect_eq(tern_produce(c, "q", &other, 1, &base), 0);
    cr_expect_eq(base, 1);
    cr_expect_eq(fake_record_at(&fs, fake_n_records(&fs) - 1).seq, 2);
    tern_client_free(c);
    fake_stop(&fs);
}

Test(client, resend_after_lost_answer_returns_original_offset)
{
    resend_after_timeout(1);
}

Test(client, resend_after_lost_request_appends_once)
{
    resend_after_timeout(2);
}

Test(client, resend_behind_a_gap_is_esequence)
{
    struct fake_server fs;
    struct tern_client *c;
    struct tern_msg a = {"g-0", 3}, b = {"g-1", 3};
    cr_assert_eq(fake_start(&fs, lose_produce_hook), 0);
    c = client_for(fs.addr, 300, 8);
    create_queue(c, "q");
    set_mode(&fs, 2); /* both lost before the server: seq 1 and 2 */
    cr_assert_eq(tern_produce(c, "q", &a, 1, NULL), TERN_ETIMEDOUT);
    cr_assert_eq(tern_produce(c, "q", &b, 1, NULL), TERN_ETIMEDOUT);
    set_mode(&fs, 0);
    /* Only the last one is kept; seq 2 behind the gap at 1: never
     * appended, and said so. */
    cr_expect_eq(tern_produce_resend(c, "q", &a, 1, NULL), TERN_EINVAL);
    cr_expect_eq(tern_produce_resend(c, "q", &b, 1, NULL), TERN_ESEQUENCE, "%s",
                 tern_client_errmsg(c));
    cr_expect_eq(fake_n_msgs(&fs), 0);
    cr_expect_eq(tern_produce_resend(c, "q", &b, 1, NULL), TERN_EINVAL,
                 "resolved by the ESEQUENCE answer");
    tern_client_free(c);
    fake_stop(&fs);
}
