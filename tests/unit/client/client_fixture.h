/*
 * Helpers shared by the libtern unit tests (test_*.c): a client with short
 * timeouts, queue creation, a log of async produce completions, draining a
 * client's pending batches, and a fake-server hook that never answers a
 * PRODUCE. Criterion assertions inside them fail the calling test.
 */
#ifndef TERN_TEST_CLIENT_FIXTURE_H
#define TERN_TEST_CLIENT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <tern/tern.h>

#include "fake_server.h"

/* Monotonic milliseconds. */
int64_t now_ms(void);

/* A client for servers with request timeout timeout_ms, async window
 * window, a 5 ms retry back-off and a 500 ms connect timeout. Asserts
 * success; the test frees the client. */
struct tern_client *client_for(const char *servers, int timeout_ms, int window);

/* tern_queue_create that must succeed. */
void create_queue(struct tern_client *c, const char *q);

/* What the completions of async produce calls reported, by batch index. */
struct done_log
{
    int n;
    int status[64];
    uint64_t base[64];
    size_t count[64];
    int order[64]; /* batch indexes in completion order */
};

/* Callback argument of one batch (borrowed by the client until its
 * completion fires). */
struct done_ctx
{
    struct done_log *log;
    int idx;
};

/* tern_produce_cb: records the completion in ((struct done_ctx *)arg)->log. */
void on_done(void *arg, int status, uint64_t base, size_t count);

/* Poll c until nothing is pending (asserts it happens within 10 s). */
void drain(struct tern_client *c);

/* Hook: PRODUCE requests are never answered; the model answers the rest. */
enum fake_action silent_hook(struct fake_server *fs,
                             int conn,
                             const struct proto_header *h,
                             const struct proto_request *r);

/* Hook: the first PRODUCE (fs->counter 0) fails for good with
 * TERN_ETOOBIG; the model answers everything else. */
enum fake_action fail_first_produce_hook(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r);

#endif /* TERN_TEST_CLIENT_FIXTURE_H */
