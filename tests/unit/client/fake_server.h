/*
 * A fake tern server for libtern unit tests: one thread, a listening
 * socket on 127.0.0.1 (ephemeral port), speaking proto/include/proto.h. A small
 * in-memory model (queues, messages, producer dedup with the same rules as
 * index/apply.c) answers by default; each test installs a hook that can
 * answer differently, defer answers, stay silent or drop the connection.
 */
#ifndef TERN_TEST_FAKE_SERVER_H
#define TERN_TEST_FAKE_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include <proto.h>

#define FAKE_MAX_CONNS   16
#define FAKE_MAX_MSGS    4096
#define FAKE_MAX_RECORDS 256
#define FAKE_MAX_FRAME   1024 /* longest PRODUCE frame kept as raw bytes */

enum fake_action {
    FAKE_DEFAULT = 0, /* let the model answer */
    FAKE_HANDLED,     /* the hook answered (or deferred) */
    FAKE_SILENT,      /* never answer this request */
    FAKE_DROP,        /* close the connection, no answer */
};

/* One PRODUCE request as seen by the server (for assertions). */
struct fake_record
{
    uint64_t producer_id;
    uint64_t seq;
    uint32_t n_msgs;
    int conn;
};

struct fake_server;
/* Runs on the server thread with fs->mu held. */
typedef enum fake_action (*fake_hook_cb)(struct fake_server *fs,
                                         int conn,
                                         const struct proto_header *h,
                                         const struct proto_request *r);

struct fake_server
{
    pthread_t thread;
    pthread_mutex_t mu;
    int listen_fd;
    int stop_pipe[2];
    char addr[64]; /* "127.0.0.1:port" */
    int conn_fd[FAKE_MAX_CONNS];
    struct tern_wbuf conn_out[FAKE_MAX_CONNS];
    uint8_t *conn_in[FAKE_MAX_CONNS];
    size_t conn_in_len[FAKE_MAX_CONNS];
    fake_hook_cb hook;
    void *hook_arg;
    /* Model. */
    int queue_exists;
    char queue[PROTO_MAX_NAME + 1];
    char *msgs[FAKE_MAX_MSGS];
    uint32_t msg_len[FAKE_MAX_MSGS];
    uint64_t n_msgs;
    uint64_t dedup_producer;
    uint64_t dedup_last_seq;
    uint64_t dedup_base;
    uint32_t dedup_count;
    /* Observations. */
    int n_requests;
    int n_accepts;
    struct fake_record records[FAKE_MAX_RECORDS];
    int n_records;
    /* Raw bytes (header and body) of the last PRODUCE frame received, if
     * it was at most FAKE_MAX_FRAME bytes long (else last_produce_len 0). */
    uint8_t last_produce[FAKE_MAX_FRAME];
    size_t last_produce_len;
    /* Deferred answers (raw frames) for hooks. */
    struct tern_wbuf deferred[FAKE_MAX_RECORDS];
    int deferred_conn[FAKE_MAX_RECORDS];
    int n_deferred;
    /* Replication stats model: produce requests appended since the last
     * STATS reset, and the number of resets seen. */
    uint64_t stats_count;
    int stats_resets;
    /* Frame version 2 (proto.h): speaks_hello 0 answers HELLO as a
     * server before it does (TERN_EINVAL, unknown op), 1 takes
     * PROTO_FEATURE_XXH3. HELLOs are not requests for n_requests or the
     * hook; n_hello counts them. last_version: the version byte of the
     * last other request. */
    int speaks_hello;
    int n_hello;
    uint8_t last_version;
    /* STATUS answers: 0 as the writable leader (node 1), 1 as a follower
     * of node 2 at peer_addr. */
    int status_follower;
    /* Free-form state for hooks. */
    int counter;
    char peer_addr[64]; /* leader hint for NOT_LEADER hooks */
};

int fake_start(struct fake_server *fs, fake_hook_cb hook);
void fake_stop(struct fake_server *fs);

/* Helpers for hooks (server thread, mu held). */
/* The model's answer for a request, appended to w. */
void fake_model_answer(struct fake_server *fs,
                       const struct proto_header *h,
                       const struct proto_request *r,
                       struct tern_wbuf *w);
void fake_send(struct fake_server *fs, int conn, const struct tern_wbuf *w);
void fake_send_error(struct fake_server *fs,
                     int conn,
                     const struct proto_header *h,
                     int status,
                     const char *leader_addr);
/* Keep a frame to send later; fake_flush_deferred sends all kept frames,
 * newest first when reverse. */
void fake_defer(struct fake_server *fs, int conn, const struct tern_wbuf *w);
void fake_flush_deferred(struct fake_server *fs, int reverse);

/* Thread-safe snapshots for the test thread. */
int fake_n_records(struct fake_server *fs);
struct fake_record fake_record_at(struct fake_server *fs, int i);
int fake_n_requests(struct fake_server *fs);
uint64_t fake_n_msgs(struct fake_server *fs);
/* Copy of message i's payload as a string (caller frees). */
char *fake_msg(struct fake_server *fs, uint64_t i);
/* Copy the raw bytes of the last PRODUCE frame received into
 * buf[0..cap) (caller-owned); returns the frame's length, 0 if none was
 * kept or it does not fit in cap. */
size_t fake_last_produce(struct fake_server *fs, void *buf, size_t cap);

#endif /* TERN_TEST_FAKE_SERVER_H */
