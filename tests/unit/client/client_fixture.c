/*
 * Helpers shared by the libtern unit tests (see client_fixture.h).
 */
#include <criterion/criterion.h>
#include <time.h>

#include "client_fixture.h"

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct tern_client *client_for(const char *servers, int timeout_ms, int window)
{
    struct tern_client_options o;
    struct tern_client *c = NULL;
    tern_client_options_init(&o);
    o.request_timeout_ms = timeout_ms;
    o.retry_backoff_ms = 5;
    o.connect_timeout_ms = 500;
    o.max_in_flight = window;
    cr_assert_eq(tern_client_new(servers, &o, &c), 0);
    return c;
}

void create_queue(struct tern_client *c, const char *q)
{
    cr_assert_eq(tern_queue_create(c, q), 0, "%s", tern_client_errmsg(c));
}

void on_done(void *arg, int status, uint64_t base, size_t count)
{
    struct done_ctx *d = arg;
    struct done_log *l = d->log;
    l->status[d->idx] = status;
    l->base[d->idx] = base;
    l->count[d->idx] = count;
    l->order[l->n++] = d->idx;
}

void drain(struct tern_client *c)
{
    int64_t until = now_ms() + 10000;
    while (tern_client_pending(c) > 0 && now_ms() < until) {
        cr_assert_geq(tern_client_poll(c, 100), 0);
    }
    cr_assert_eq(tern_client_pending(c), 0);
}

enum fake_action silent_hook(struct fake_server *fs,
                             int conn,
                             const struct proto_header *h,
                             const struct proto_request *r)
{
    return r->op == PROTO_OP_PRODUCE ? FAKE_SILENT : FAKE_DEFAULT;
}

enum fake_action fail_first_produce_hook(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r)
{
    if (r->op == PROTO_OP_PRODUCE && fs->counter++ == 0) {
        fake_send_error(fs, conn, h, TERN_ETOOBIG, NULL);
        return FAKE_HANDLED;
    }
    return FAKE_DEFAULT;
}
